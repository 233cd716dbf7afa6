/* weft layout: the op-level plan's meaning (src/layout/). Lowering a
 * whole-model plan to the per-op SBP layouts that run it and raising them
 * back, and the layout descriptor of the cost model (wf_cost_layout,
 * weft/cost_records.h) an op-level plan's signatures give. It sits between
 * the cost model and SBP below and its consumers above (the estimate of an
 * op-level plan, the searches, the simulator, the runtime): none of them
 * derives a plan's layouts any other way (docs/architecture.md). */
#ifndef WEFT_LAYOUT_H
#define WEFT_LAYOUT_H

#include "weft/cluster.h"
#include "weft/core.h"
#include "weft/cost_records.h"
#include "weft/graph.h"
#include "weft/models.h"
#include "weft/plan.h"
#include "weft/sbp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lowers a whole-model plan to the op-level plan of the same layouts
 * (src/layout/lower.c, docs/plan-format.md "Lowering"): mesh dp x tp (outer
 * axis dp), pp stages by layer ranges, batch / (mbs x dp) micro-batches,
 * Megatron's signature for every forward op (column/row splits, per-head
 * ops, the vocabulary-parallel embedding, logits and loss, sequence
 * parallelism as S1 between them, the batch split on the dp axis). out must
 * be initialized. The keys that are not layouts (recompute, zero, overlap,
 * the schedules, vpp, the profile's) go into out->keys; cp is WF_INVAL. */
wf_status wf_plan_lower(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, int64_t batch,
                        wf_layout *out);

/* ==== one cost model (src/layout/layout_cost.c) ==================================
 * The estimate of op-level plan ol: its layouts read as the cost model's
 * layout descriptor (wf_cost_layout: per op what the layouts divide, which
 * collectives they need and what those may hide behind), its keys as the
 * rest of the plan, composed by wf_estimate_layouts exactly as a whole-model
 * plan (docs/cost-model.md, "One cost model"). The mesh has a data-parallel
 * axis (outer), a model-parallel one, or both; a transformer's layers run
 * one layout and its stages equal layer ranges; models other than
 * transformers take data-parallel layouts. What a plan breaks of these is
 * WF_INVAL naming it. ctx is a context of model m on cluster c; as_plan (may
 * be NULL) receives the plan composed (dp, tp, pp, mbs, sp from the layouts,
 * the rest from the keys). */
wf_status wf_layout_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                         const wf_layout *ol, wf_estimate *out, wf_plan *as_plan);
/* The descriptor and the plan wf_layout_cost composes (free out with
 * wf_cost_layout_free). */
wf_status wf_layout_descriptor(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                               const wf_layout *ol, wf_cost_layout *out, wf_plan *as_plan);

/* One plan's layouts costed again and again (what a search on the one cost
 * model needs): wf_layout_coster_new resolves ol once (wf_layout_index, as
 * wf_layout_cost does: the same checks, the same errors; the coster keeps
 * the resolution), wf_layout_coster_resolved takes a resolved value, and
 * each wf_layout_coster_cost prices the coster's current signatures -- one
 * per forward op of wf_layout_coster_graph (a transformer's: embedding, one
 * layer, head, tied to every layer), which the caller may change between
 * calls to any signature of that op on the mesh (wf_sbp_op_sigs) -- exactly
 * as wf_layout_cost prices the plan with those layouts. keep_storage
 * 0: every parameter is kept as its first reader reads it (ol's storage
 * layouts ignored). A mixture of experts is WF_INVAL (costed as the
 * whole-model plan it raises to). */
typedef struct wf_layout_coster wf_layout_coster;
wf_status wf_layout_coster_new(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                               const wf_layout *ol, int keep_storage, wf_layout_coster **out);
const wf_graph *wf_layout_coster_graph(const wf_layout_coster *k);
const wf_mesh *wf_layout_coster_mesh(const wf_layout_coster *k);
wf_sbp_sig *wf_layout_coster_sigs(wf_layout_coster *k);
/* Parameter t of the coster's graph kept in `layout` (NULL: as its first
 * reader reads it); other tensors are ignored, as the cost model ignores them. */
void wf_layout_coster_storage(wf_layout_coster *k, int t, const wf_sbp *layout);
/* The memory levers the next wf_layout_coster_cost prices, in place of the
 * plan's recompute and zero keys: recompute full (1) or none (0), and the
 * ZeRO stage (0-3) -- as the plan with "recompute=full,zero=N" is priced. */
void wf_layout_coster_levers(wf_layout_coster *k, int recompute_full, int zero);
wf_status wf_layout_coster_cost(wf_layout_coster *k, int64_t batch, wf_estimate *out);
void wf_layout_coster_free(wf_layout_coster *k);

/* The whole-model plan whose lowering is op-level plan ol (mesh dp x tp, or
 * one of them, with or without sequence parallelism; for a mixture of
 * experts also edp x ep, ep x tp and edp x ep x tp, etp 1 or tp), into out;
 * WF_INVAL
 * naming the first op whose layout no whole-model plan gives. What lets the
 * simulator and the runtime take op-level plans of Megatron's family. */
wf_status wf_plan_raise(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                        wf_plan *out);

/* wf_plan_raise of some of ol's ops: part 0 every op (wf_plan_raise); 1 all
 * but the dense layers' (the layers of a mixture of experts without experts:
 * those before first_dense, or off moe_freq); 2 the dense layers' only. The
 * mesh, stages and micro-batches are compared in every part. */
wf_status wf_plan_raise_part(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                             int part, wf_plan *out);
/* The three at once, each candidate plan lowered once: found[k] and out[k]
 * for each part k that a whole-model plan's lowering matches (WF_OK also
 * when none does; an error only for what is no mismatch). */
wf_status wf_plan_raise_parts(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                              wf_plan out[3], int found[3]);

/* ==== per-layer plans of a mixture of experts (src/layout/perlayer.c) ============
 * An op-level plan of a mixture of experts with dense layers (DeepSeek's
 * first_dense, or moe_freq > 1) whose dense layers run other layouts than its
 * expert layers: the embedding, the head and the expert layers are the
 * lowering of whole-model plan `moe` (wf_plan_raise_part 1), the dense
 * layers that of `dense` (part 2; its dp, tp and sp), on the same mesh, one
 * stage. Costed layer by layer (docs/planner.md, "Per-layer plans"): the
 * price of `moe` (every layer as the cost model prices it today), plus, for
 * the dense layers, the cost of those layers under `dense` less their cost
 * under `moe`'s dense layouts (each the difference of a dense transformer of
 * the model's attention and dense MLP at L and L - dense_layers layers, by
 * the one cost model), plus the boxing where the layer layout changes (per
 * micro-batch: to_dense times into a dense layer, to_moe times out of one; a
 * gather forward or backward, or an all-to-all, on the mesh axis whose
 * layout changes, priced by the collective model on that axis's group). */
typedef struct wf_layout_perlayer_s {
    wf_plan moe;            /* the whole-model plan of the embedding, head and expert layers */
    wf_plan dense;          /* the whole-model plan whose lowering the dense layers run */
    int64_t dense_layers;   /* layers without experts */
    int64_t to_dense, to_moe; /* layout changes per micro-batch forward */
    double switch_fwd_s, switch_bwd_s; /* one micro-batch's boxing time, forward and backward, of
                                          all the changes */
} wf_layout_perlayer;

/* *is = 1 and *out filled when ol is such a plan; *is = 0 (WF_OK) when ol is
 * not one (a model without dense layers or experts, the lowering of one
 * whole-model plan -- wf_plan_raise takes it --, or expert layers in no
 * whole-model plan's layouts). A per-layer plan whose dense layers are no
 * whole-model plan's lowering on its mesh, or one of pp > 1: WF_INVAL
 * naming it. */
wf_status wf_layout_perlayer_of(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                                wf_layout_perlayer *out, int *is);
/* The same for the plan of expert plan moe and dense plan dense whose
 * op-level form is ol (wf_layout_perlayer_lower: its mesh and micro-batches),
 * without reading ol's layouts back (the search's candidates). */
wf_status wf_layout_perlayer_make(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_plan *moe,
                                  const wf_plan *dense, const wf_layout *ol, wf_layout_perlayer *out);
/* pl's price as above (ctx: a cost context of m on c; the simulator's
 * composition is wf_sim_perlayer, sim.h). */
wf_status wf_layout_perlayer_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                  const wf_layout_perlayer *pl, wf_estimate *out);
/* The dense transformer of m at `layers` layers (its attention and dense MLP,
 * no experts), and plan x's dense layouts as a plan of it (ep 1; at fewer
 * layers than m's, the block method's recomputed layers less m's dense
 * layers among them). */
wf_model_config wf_layout_perlayer_dense_model(const wf_model_config *m, int64_t layers);
wf_plan wf_layout_perlayer_dense_plan(const wf_model_config *m, const wf_plan *x, int64_t layers);
/* The op-level plan of pl: moe's lowering with the dense layers' signatures
 * of dense's (out initialized by the caller). */
wf_status wf_layout_perlayer_lower(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                                   const wf_plan *moe, const wf_plan *dense, wf_layout *out);
/* "tp=2,sp=1" style text of a plan's dense layouts, for tables (--detail). */
void wf_layout_perlayer_describe(const wf_layout_perlayer *pl, char *buf, size_t cap);

/* ==== a plan resolved once (src/layout/resolve.c) ================================
 * One call reads a plan -- a plan string, a whole-model plan file or an
 * op-level plan file -- for a model, a cluster and a batch, and holds
 * everything its consumers read: the whole-model keys, the op-level form
 * (a whole-model plan's lowering when it has one), the mesh parsed once, each
 * forward op's SBP signature parsed once and indexed by op, the stage cut,
 * the cost model's layout descriptor, and each parallel axis's rank groups
 * from plan.h's one generator (order tp-cp-ep-dp-pp), with the hierarchy
 * level each reaches on the cluster. */
/* A part of the model placed on another device group than its stage's mesh
 * (the interlaced pipeline's embedding and head: every tp x pp rank of a
 * pipeline). */
typedef struct {
    int section;                  /* the model section (WF_COST_SEC_PRE: the embedding, _POST: the head
                                     with the loss) */
    int64_t size;                 /* ranks it spans: tp x pp */
    wf_axis_ranks axes[2];        /* the two axes it spans, tp's and pp's groups of a rank (their
                                     product, one pipeline replica) */
} wf_layout_segment;

typedef struct {
    int oplevel;                  /* 1: the text named an op-level plan file */
    wf_plan plan;                 /* the whole-model plan (an op-level file: the one its layouts
                                     compose, wf_layout_descriptor's as_plan) */
    int has_layouts;              /* 0: no op-level form (no lowering: models other than transformers,
                                     cp > 1, a mixture of experts' whole-model plan) */
    wf_layout ol;           /* the op-level form (has_layouts) */
    wf_mesh mesh;                 /* its mesh, parsed once (has_layouts) */
    wf_graph graph;               /* the model's graph at one micro-batch (has_layouts) */
    wf_sbp_sig *sig;              /* [graph.nfwd] each forward op's signature (has_layouts) */
    int *sig_index;               /* [graph.nfwd] its index among the op's signatures on the mesh
                                     (wf_sbp_op_sigs; has_layouts) */
    const char **sig_text;        /* [graph.nfwd] each forward op's signature as the plan writes it
                                     (has_layouts; the strings are the op-level form's) */
    int nstorage;                 /* the op-level form's storage layouts (has_layouts): */
    wf_sbp *storage;              /* [nstorage] each parsed once */
    int *storage_tensor;          /* [nstorage] the tensor of graph it keeps */
    int *storage_stage;           /* [nstorage] the stage it is kept on */
    int nstages;
    int *stage_first;             /* [nstages + 1] first op of each stage, then graph.nfwd
                                     (has_layouts) */
    int graph_view;               /* 1: graph is the caller's (wf_layout_resolve_choice), not freed
                                     with the value */
    int has_cost;                 /* cost holds the descriptor (a cost context was given) */
    wf_cost_layout cost;          /* the cost model's layout descriptor (free with the value) */
    wf_axis_ranks axes[WF_AXIS_COUNT];        /* the dense layers' groups */
    wf_axis_ranks expert_axes[WF_AXIS_COUNT]; /* the expert layers' (etp, ep, edp, pp) */
    int level[WF_AXIS_COUNT];     /* the outermost cluster level each dense axis's group spans
                                     (-1: a group of one) */
    /* The interlaced pipeline (plan.interlace; no op-level form): space, the
     * segments on every device of a pipeline; time, each stage's task order
     * (wf_plan_interlace_order), order[s * 5m .. (s + 1) * 5m) for stage s. */
    int nsegments;                /* 2 when interlaced, else 0 */
    wf_layout_segment segment[2];
    int64_t micro_batches;        /* the micro-batches: m of the orders (interlaced), or the op-level
                                     form's (has_layouts) */
    wf_plan_task *order;          /* [pp * 5m] (interlaced), else NULL */
} wf_layout_plan;

/* Resolves plan text for model m on cluster c at the global batch into out
 * (freed with wf_layout_plan_free, also after an error). ctx (may be NULL: no
 * descriptor) is a cost context of m on c. A plan that does not validate, an
 * op with no layout or one that names no signature of its op, a stage that
 * names no op: WF_INVAL naming it. */
wf_status wf_layout_resolve(const char *text, const wf_model_config *m, const wf_cluster *c, int64_t batch,
                            wf_cost_ctx *ctx, wf_layout_plan *out);
/* The same for an op-level form already read (ol, borrowed: it must outlive
 * out, whose ol stays empty): its mesh on c, the graph at one micro-batch of
 * the batch, each forward op's signature parsed once and indexed by op, the
 * stage cut; no keys, descriptor or rank groups. For a consumer that reads
 * or lowers the plan itself (the SPMD runtime). */
wf_status wf_layout_index(const wf_layout *ol, const wf_model_config *m, const wf_cluster *c, int64_t batch,
                          wf_layout_plan *out);
void wf_layout_plan_free(wf_layout_plan *p);
/* The op-level form's validation, all of it (what wf_layout_index checks,
 * and its keys): WF_OK or the first failure, named. The whole-model plan's
 * rules are wf_plan_validate's (plan.h; the estimate validates every plan
 * it costs, and cost sits below layout). */
wf_status wf_layout_validate(const wf_layout *ol, const wf_model_config *m, const wf_cluster *c, int64_t batch);

/* A search's proposal, held in memory: the mesh, the stage cut and each
 * forward op's signature as the search chose them (no text). */
typedef struct {
    wf_mesh mesh;
    int pp;
    int64_t micro_batches;
    const wf_graph *graph;        /* the model's graph at one micro-batch (borrowed) */
    const int *stage_first;       /* [pp] each stage's first op */
    const wf_sbp_sig *sig;        /* [graph->nfwd] each forward op's signature */
    const int *sig_index;         /* [graph->nfwd] its index among the op's signatures on the mesh
                                     (wf_sbp_op_sigs) */
    const unsigned char *given;   /* [pp * graph->ntensors] 1: tensor t is kept on stage s in
                                     storage[s * ntensors + t] (may be NULL: none) */
    const wf_sbp *storage;        /* [pp * graph->ntensors] */
} wf_layout_choice;

/* Resolves proposal ch at the global batch into out, as wf_layout_index
 * resolves the op-level form that writes it (freed with
 * wf_layout_plan_free; graph borrowed, sig_text NULL): nothing is written
 * or parsed. The same checks of the mesh's devices, the stage cut and the
 * storage layouts; WF_INVAL naming what fails. */
wf_status wf_layout_resolve_choice(const wf_layout_choice *ch, const wf_cluster *c, int64_t batch,
                                   wf_layout_plan *out);

/* wf_plan_raise of op-level plan ol already resolved (lp: its mesh and signatures as parsed
 * there; keys: ol's keys). */
wf_status wf_plan_raise_resolved(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_plan *keys,
                                 const wf_layout_plan *lp, wf_plan *out);
/* wf_layout_descriptor and wf_layout_cost of op-level plan ol
 * already resolved into lp (wf_layout_index or wf_layout_resolve of ol): its
 * mesh, signatures and storage layouts are read as lp parsed them, nothing
 * parsed again; the same checks otherwise, the same figures. */
wf_status wf_layout_plan_descriptor(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                    const wf_layout *ol, const wf_layout_plan *lp, wf_cost_layout *out,
                                    wf_plan *as_plan);
wf_status wf_layout_plan_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                              const wf_layout *ol, const wf_layout_plan *lp, wf_estimate *out,
                              wf_plan *as_plan);
/* The same of a resolved value with its keys given (keys: the plan's keys,
 * as wf_layout_keys reads them; lp: wf_layout_index, wf_layout_resolve or
 * wf_layout_resolve_choice): what the searches price their proposals with. */
wf_status wf_layout_resolved_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                  const wf_plan *keys, const wf_layout_plan *lp, wf_estimate *out);
/* wf_layout_coster_new of a resolved value (lp and keys borrowed: they must
 * outlive the coster). */
wf_status wf_layout_coster_resolved(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                    const wf_plan *keys, const wf_layout_plan *lp, int keep_storage,
                                    wf_layout_coster **out);
/* The index of forward op `name` in p->graph, or -1. */
int wf_layout_op_index(const wf_layout_plan *p, const char *name);

/* Megatron-LM pads the vocabulary to a multiple of --make-vocab-size-
 * divisible-by (128) x tp (src/layout/vocab_pad.c cites the source).
 * wf_megatron_padded_vocab: that size. wf_megatron_pad_model: *out is m with
 * its vocabulary so padded, named as its override ("bert-base-pretrain:
 * vocab=30720"), and 1, when m is a transformer whose vocabulary tp > 1 does
 * not divide; else *out = *m and 0. wf_plan_lower lowers the model it is
 * given: `weft plan --verify` lowers the padded one (the op-level plan is
 * that model's, and is evaluated with it), and `weft train` runs it
 * (src/runtime/spmd.c), the padding's logits masked out of the loss. */
#define WF_MEGATRON_VOCAB_DIVISIBLE_BY 128
int64_t wf_megatron_padded_vocab(int64_t vocab, int tp, int divisible_by);
int wf_megatron_pad_model(const wf_model_config *m, int tp, wf_model_config *out);

#ifdef __cplusplus
}
#endif
#endif
