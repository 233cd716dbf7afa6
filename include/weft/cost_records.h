/* weft cost model, its records: what an estimate is made of, for code that
 * composes an iteration differently but costs every op as wf_estimate_plan
 * does (src/sim/, src/layout/; docs/interfaces.md, "cost_records.h"). */
#ifndef WEFT_COST_RECORDS_H
#define WEFT_COST_RECORDS_H

#include "weft/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the cost model's records ------------------------------------------------------
 * A context's forward ops at micro-batch 1, unsplit, in three sections (a
 * transformer's one-layer graph) or one (other models). */
typedef enum {
    WF_COST_SEC_PRE,   /* embedding: on the first pipeline stage */
    WF_COST_SEC_LAYER, /* the repeated block, costed once (other models: every op) */
    WF_COST_SEC_POST,  /* final norm, logits and loss: on the last stage */
    WF_COST_SEC_COUNT
} wf_cost_sec;

/* The model as the context costed it under the variant in use
 * (wf_cost_ctx_use): nothing else here depends on a plan. */
typedef struct {
    int transformer;               /* three sections; else one op list */
    int nops;                      /* forward ops (the graph's nfwd) */
    wf_dtype dtype;
    double elem_bytes;             /* per weight or activation element */
    double grad_elem_bytes;        /* per gradient element the framework keeps and reduces */
    double logits_per_sample;      /* logits elements of one sample (the loss's fp32 workspace) */
    double model_flops_per_sample; /* matrix FLOPs of one sample, forward + backward */
    double saved_dedup;            /* other models: the graph's deduplicated saved bytes over
                                      the ops' sum (<= 1), applied to each op's saved bytes */
    int cp;                        /* the variant's context parallelism (sizes below are per rank) */
    int tp_overlap;                /* 0 synchronous, 1 backward overlapped, 2 also forward (userbuffers) */
    int ag_overlap;                /* ZeRO-1/2's parameter all-gather behind the next forward
                                      (Megatron-Core's distributed optimizer, overlap_param_gather) */
    int ep, etp;                   /* the variant's expert and expert-tensor parallelism */
    double loss_elem_bytes;        /* per logit of the loss computation */
    double loss_ws_bytes;          /* per logit, the loss's backward workspace (transient) */
    double shared_split_params;    /* tied weights held by both the embedding and the head */
    double shared_repl_params;
    struct {
        int op0, nop;              /* ops [op0, op0 + nop) */
        double params_split;       /* parameter elements divided by tp */
        double params_repl;        /* parameter elements replicated over tp */
        double params_expert;      /* expert parameter elements of one rank (already / (ep x etp)) */
        double input_bytes;        /* input activation at micro-batch 1 (the layer's: s h) */
        double flops;              /* matrix FLOPs forward + backward at micro-batch 1 */
    } sec[WF_COST_SEC_COUNT];
} wf_cost_model_info;

void wf_cost_model_info_of(const wf_cost_ctx *ctx, wf_cost_model_info *out);

/* One forward op at micro-batch 1: its division, collectives, saved bytes. */
typedef struct {
    wf_cost_sec section;
    int matrix;                /* runs on the matrix unit */
    int split;                 /* work and weights divided by tp (column-, row-,
                                  vocabulary-parallel, per head); 0 = replicated */
    int attn_core;             /* what selective recomputation recomputes */
    int f_point;               /* the f point (identity forward, all-reduce backward) this
                                  op reads, numbered over the whole context; -1 none */
    double f_bytes;            /* that point's tensor */
    int g_point;               /* the g point (all-reduce forward) after this op; -1 none */
    double g_bytes;            /* that point's tensor */
    double ce_bytes;           /* vocabulary-parallel loss: fp32 per token, the size of each
                                  of its three all-reduces */
    double saved_repl_bytes;   /* saved for backward, replicated over tp (divided by tp with
                                  sequence parallelism) */
    double saved_split_bytes;  /* saved for backward, divided by tp */
    double saved_scores_bytes; /* attention scores, masks (divided by tp; what selective
                                  recomputation drops) */
    double out_bytes;          /* outputs written (a pipeline boundary's activation) */
    double owned_params;       /* other models: parameter elements this op holds, each
                                  parameter counted at its first reader */
    int expert;                /* a mixture-of-experts op (its weights / (ep x etp)) */
    int seg_start;             /* other models: the first op of a block instance (or of the ops
                                  between blocks), whose input full recomputation checkpoints */
    double ckpt_bytes;         /* at a seg_start: that checkpoint's activations */
} wf_cost_op_info;

/* Op i (0 <= i < nops); WF_INVAL otherwise. */
wf_status wf_cost_op_info_of(const wf_cost_ctx *ctx, int i, wf_cost_op_info *out);

/* Times of one forward op for one micro-batch on one device (seconds). */
typedef struct {
    double fwd_s;    /* forward */
    double bwd_in_s; /* backward: the input-gradient product */
    double bwd_w_s;  /* backward: the weight-gradient product (0 without weights) */
} wf_cost_op_time;

/* The times of every op (out[nops]) at micro-batch mbs under tp and sp: the
 * terms wf_cost_sections and the stage cut sum. Other models: tp=1, sp=0. */
wf_status wf_cost_op_times(const wf_cost_ctx *ctx, int64_t mbs, int tp, int sp, wf_cost_op_time *out);

/* Times of one transformer section for one micro-batch on one device
 * (seconds) and its activation memory (bytes). */
typedef struct {
    double fwd, bwd, rec;          /* compute: forward, backward, recomputation */
    double tp_fwd, tp_bwd, tp_rec; /* exposed tensor-parallel communication */
    double ep;                     /* of those, the experts' all-to-all and expert-tp collectives */
    double slow;                   /* compute lost to overlapped communication */
    double act_bytes;              /* kept for backward per micro-batch in flight */
    double transient_bytes;        /* rematerialized while one micro-batch runs backward */
    /* Profiles that count the runtime's own buffers (sw=weft), else 0: */
    double work_bytes;             /* the backward's working set: the gradients of the widest op's
                                      output and input, beside the gradient of the section's input */
    double acc_bytes;              /* the largest op's weight gradients, written to a buffer
                                      before they are added to the gradient block */
    double ws_bytes;               /* the largest kernel workspace (attention's score blocks) */
} wf_cost_sect_time;

/* A transformer's section times ([WF_COST_SEC_COUNT]) for (mbs, tp, sp,
 * recompute), cached in the context. NULL for other models or on OOM. */
const wf_cost_sect_time *wf_cost_sections(wf_cost_ctx *ctx, int64_t mbs, int tp, int sp, wf_recompute rc);

/* Bytes per parameter held on a device for weights, gradients and optimizer
 * state (mixed-precision or fp32 Adam), sharded by ZeRO stage `zero` over dp. */
double wf_cost_bytes_per_param(const wf_cost_ctx *ctx, int zero, int dp);
/* The profile's own buffers on a device of plan p at micro-batch mbs
 * (docs/cost-model.md, "Memory per framework"). */
double wf_cost_buffer_bytes(const wf_cost_ctx *ctx, const wf_plan *p, int64_t mbs);
/* 1: plan p holds ZeRO-3's gathered weights two layers at a time. */
int wf_cost_zero3_prefetch(const wf_cost_ctx *ctx, const wf_plan *p);
/* Bytes per parameter the optimizer step reads and writes (it is memory-bound). */
double wf_cost_optimizer_bytes_per_param(const wf_cost_ctx *ctx);

/* One pipeline message of `bytes` (a micro-batch's whole activation or
 * gradient) between neighbouring stages of plan p (docs/interfaces.md). */
double wf_cost_p2p_time(const wf_cost_ctx *ctx, const wf_plan *p, double bytes);
/* Recycling: stage k's passes into kind (0 no gradient, 1 forward, 2
 * backward), round and mb (cap entries each; the order: docs/interfaces.md).
 * Returns (n_rec + 2) m, or -1 when cap is short. */
int wf_cost_nf_order(int k, int p, int m, int gpipe, int n_rec, int nf1b, int cap, int *kind, int *round, int *mb);
/* The bytes one sample recycles from one forward to the next (0: a model
 * without recycling). */
double wf_cost_recycle_bytes(const wf_model_config *m);

/* The experts' collectives around op i (a moe_dispatch; else 0) for one
 * micro-batch of mbs under tp, each pass (docs/interfaces.md). */
void wf_cost_expert_comm(const wf_cost_ctx *ctx, int i, int64_t mbs, int tp, double *fwd_s, double *bwd_s);

/* epo=1: what of a layer's all-to-alls (comm) shows behind window, and the
 * compute slowed; without epo all of comm shows. */
void wf_cost_expert_overlap(const wf_cost_ctx *ctx, double comm, double window, double *exposed, double *slow);

/* Context parallelism's ring around attention op i for one micro-batch of
 * plan p, each pass (0 when cp = 1 or op i is no attention). */
void wf_cost_cp_ring(const wf_cost_ctx *ctx, const wf_plan *p, int i, double *fwd_s, double *bwd_s);

/* The estimate's balanced cut of n ops of times w[i] into min(pp, n) stages
 * (docs/interfaces.md); nocut[i] != 0 forbids a cut before op i (NULL:
 * none). Writes first[0..nstages]; returns nstages. */
int wf_cost_cut_stages(const double *w, int n, int pp, const unsigned char *nocut, int *first);

/* wf_estimate_plan's cut of a model other than a transformer into nvs
 * stages for plan p on c: first[0..nvs], first[nvs] = nops (checked). One
 * line naming what does not fit otherwise. */
wf_status wf_cost_plan_cut(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, int nvs, int nops,
                            int *first);

/* ---- layouts: one cost model for every plan ------------------------------------------
 * The layout descriptor: per op of the context, what a plan's layouts divide
 * and which collectives they run where; Megatron's (wf_cost_layout_megatron)
 * and an op-level plan's (wf_layout_cost, layout.h) are composed by the same
 * wf_estimate_layouts (docs/interfaces.md, "cost_records.h"). */

/* What a collective may hide behind: the forward, input-gradient or
 * weight-gradient product of the ops it names. */
typedef enum { WF_COST_WIN_NONE, WF_COST_WIN_FWD, WF_COST_WIN_DGRAD, WF_COST_WIN_WGRAD } wf_cost_win;

#define WF_COST_EVENT_OPS 8

/* One collective on the model-parallel axis, per micro-batch. */
typedef struct {
    int section;           /* a wf_cost_sec */
    wf_coll_kind kind;
    int bwd;               /* 0: in the forward pass (again in a full recomputation), 1: backward */
    double bytes;          /* the collective's whole vector at micro-batch 1 */
    double times;          /* how many of it (the vocabulary-parallel loss: 3 all-reduces) */
    wf_cost_win win;
    int need;              /* the profile's tp_overlap that hides it (1 backward overlap, 2 also
                              userbuffers, 3 never) */
    int nwop;
    int wop[WF_COST_EVENT_OPS]; /* the context ops whose products form the window */
    int at;                /* the context op it belongs to (its reader; the pipeline stage that
                              pays it in models other than transformers); -1 none (the end of
                              its section) */
    int sub;               /* its group: 0 the whole model-parallel axis (wf_cost_layout.axis);
                              1 + k sub-axis k (wf_cost_layout.sub[k]) of a mesh whose two axes
                              are both model-parallel */
} wf_cost_event;

typedef struct {
    int tp;                 /* devices on the model-parallel axis (1: none) */
    wf_axis_ranks axis;     /* its rank groups: the tp axis of plan.h's one generator */
    int sp;                 /* activations at a layer boundary are split on it (pipeline sends
                               of 1/tp without a gather: Megatron's sequence parallelism) */
    int nops;               /* the context's ops */
    double *div;            /* [nops] activation work divided by */
    double *pdiv;           /* [nops] weight traffic divided by */
    double *repl_div;       /* [nops] the saved input-like bytes divided by */
    double *split_div;      /* [nops] the saved per-shard bytes (and scores) divided by */
    double input_div;       /* the layer's input (what full recomputation keeps) divided by */
    double *params;         /* [nops] models other than transformers: local parameter elements
                               each op holds (each parameter at its first reader) */
    double *mp_grad;        /* [nops] of them, the elements whose gradient is partial over the axis */
    int *cut;               /* models other than transformers: the first op of each of the plan's
                               pp stages, cut[pp] = nops (NULL: the estimate's balanced cut;
                               owned, freed with the descriptor) */
    int nev, cap_ev;
    wf_cost_event *ev;
    double sec_params[WF_COST_SEC_COUNT];  /* local parameter elements of each section (experts
                                              excluded; tied weights in both pre and post) */
    double shared_params;   /* local elements of the weights pre and post share */
    double sec_mp_grad[WF_COST_SEC_COUNT]; /* of sec_params, partial over the axis */
    int nsub;               /* 2: a mesh of two model-parallel axes (sub[0] outer, sub[1] inner,
                               wf_rank_axis_split of axis); else 0 */
    wf_axis_ranks sub[2];
    double *sub_grad[2];    /* [nops] models other than transformers: elements reduced over sub k */
    double sec_sub_grad[2][WF_COST_SEC_COUNT]; /* transformers: the same per section */
} wf_cost_layout;

/* Allocates a descriptor for ctx's ops with tp devices on the model-parallel
 * axis: every op undivided, no collective. Free with wf_cost_layout_free. */
wf_status wf_cost_layout_init(const wf_cost_ctx *ctx, int tp, wf_cost_layout *out);
void wf_cost_layout_free(wf_cost_layout *l);
/* The rank groups collective e of l runs on (l->axis or l->sub[k]). */
wf_axis_ranks wf_cost_event_ranks(const wf_cost_layout *l, const wf_cost_event *e);
/* Appends a collective. */
wf_status wf_cost_layout_add_event(wf_cost_layout *l, const wf_cost_event *ev);
/* The descriptor of Megatron-LM's layouts under tensor parallelism tp and
 * sequence parallelism sp: what the whole-model estimate composes. */
wf_status wf_cost_layout_megatron(const wf_cost_ctx *ctx, int tp, int sp, wf_cost_layout *out);

/* The ops plan p runs as co-shard pieces, one flag per cost op into sel
 * (ctx->nops): every op under whole-stage co-shard, those its pattern
 * matches under per-op co-shard (wf_plan_coshard_op). WF_INVAL naming the
 * pattern when it matches no op of the model. */
wf_status wf_cost_coshard_sel(const wf_cost_ctx *ctx, const wf_plan *p, unsigned char *sel);

/* FastFold's Dynamic Axial Parallelism (arXiv 2203.00854; hpcaitech/FastFold
 * at eba4968) of an AlphaFold2-shaped model split dap >= 2 ways into out
 * (src/cost/dap.c; docs/interfaces.md, "cost_records.h"). */
wf_status wf_cost_layout_dap(const wf_cost_ctx *ctx, int dap, wf_cost_layout *out);
/* The times of every op (out[nops]) at micro-batch mbs under layouts l: each
 * op's activation work divided by l->div, its weight traffic by l->pdiv
 * (experts by the variant's expert layout): exactly the terms
 * wf_estimate_layouts composes, for the simulator to play. */
wf_status wf_cost_op_times_layout(const wf_cost_ctx *ctx, int64_t mbs, const wf_cost_layout *l,
                                  wf_cost_op_time *out);
/* The estimate of plan p (its dp, pp, mbs, vpp, recompute, zero, overlap,
 * schedules and profile keys; its tp and sp are taken from the descriptor)
 * with the per-op terms of descriptor l: wf_estimate_plan's composition. */
wf_status wf_estimate_layouts(wf_cost_ctx *ctx, const wf_plan *p, const wf_cost_layout *l, int64_t batch,
                              wf_estimate *out);

#ifdef __cplusplus
}
#endif
#endif
