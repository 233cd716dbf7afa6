/* Private declarations of the cost module: the cost context (the model's ops
 * costed once at micro-batch 1), its cache of per-layer times keyed by
 * (micro-batch, tp, sp, recompute), and the pieces estimate.c, generic.c,
 * records.c and memory.c share. What other modules may read of it, cost.h
 * exports ("the cost model's records").
 *
 * Transformers are costed as three sections: "pre" (embedding, on the first
 * pipeline stage), one "layer" (the repeated block, costed once and
 * multiplied), and "post" (final norm, logits and loss, on the last stage).
 * Other models (CNNs, MLPs, explicit graphs) keep their whole op list and are
 * split into pipeline stages by time (generic.c). */
#ifndef WEFT_COST_IMPL_H
#define WEFT_COST_IMPL_H

#include "weft/cost_records.h"

/* One forward op at micro-batch 1 with full (unsplit) sizes. */
typedef struct {
    int matrix;      /* runs on the matrix unit */
    int split;       /* divided by tp (COL, ROW, SHARD, VOCAB); 0 = replicated (NONE) */
    int attn_core;   /* an ATTENTION op: what selective recomputation recomputes */
    int fpoint;      /* index of the tp point (f) this op reads, or -1 */
    int gpoint;      /* index of the tp point (g) after this op, or -1 */
    double ce_bytes; /* vocabulary-parallel loss: fp32 per token (each of its 3 all-reduces) */
    /* Attention (attn_core): what the flash kernel does instead (micro-batch 1). */
    double fl_fwd_flops, fl_bwd_flops, fl_fwd_bytes, fl_bwd_bytes, fl_saved_scores;
    double kv_bytes;     /* its key and value inputs (what context parallelism's ring passes) */
    double loss_logits;    /* the loss op: logits elements (its traffic follows the loss dtype) */
    int expert;            /* a mixture-of-experts op (dispatch, grouped MLP, combine): its work
                              spreads over the stage's ranks, its weights over ep x etp */
    double a2a_bytes;      /* moe_dispatch: the tokens it sends to their experts (micro-batch 1) */
    /* A grouped MLP: experts, rows per expert at micro-batch 1 (the capacity),
     * hidden, expert ffn and first product's width (2 ffn for SwiGLU). */
    double moe_e, moe_c, moe_h, moe_f, moe_g;
    double unf_bwd_extra;  /* unfused backward traffic of the framework's kernels beyond the graph's */
    double fwd_flops, bwd_in_flops, bwd_w_flops;
    double fwd_act_bytes, bwd_act_bytes;     /* activation traffic: scales with the micro-batch */
    double params;       /* parameter elements read (weight traffic, fixed per micro-batch) */
    int has_wgrad;       /* backward produces (accumulates) gradients of those parameters */
    double owned_params; /* generic models: parameters held by this op (each counted once) */
    double saved_repl;   /* saved for backward, replicated over tp (norm inputs, masks, COL inputs) */
    double saved_split;  /* saved for backward, split over tp (per-head and ffn activations) */
    double saved_scores; /* attention scores/probabilities/masks (split over tp) */
    double out_bytes;    /* outputs written (generic pipeline boundaries) */
    double regen_bytes;  /* of the saved bytes, what a framework that regenerates dropout masks
                            does not keep: a dropout's 1-byte mask; an unfused attention's mask
                            and dropped probabilities (in saved_scores) */
    double ws_bytes;     /* the weft runtime's kernel workspace for this op (attention: two
                            S x S score blocks, fp32) */
    /* What the profiles' memory rules need (wf_cost_op_saved, memory.c): */
    int kind;            /* the graph op's wf_op_kind */
    char name[WF_NAME_LEN]; /* the graph op's name (per-op co-shard matches it) */
    double norm_elems;   /* a norm: elements of the input it saves */
    double lin_in_bytes; /* a linear or matmul with weights: the bytes of its saved input */
    int in_from_attn;    /* that input is an attention's output (flash keeps it too) */
    int in_casts;        /* a product reading a norm's output: the casts of it a PyTorch script
                            makes under autocast (2: weft's fused qkv, the script's wq and wkv) */
    double glu_act_bytes;/* a mul of a SwiGLU: the silu output it saves (a fused SwiGLU keeps
                            its input alone) */
    double ce_logits;    /* the loss: its logits elements */
    int nsaved;          /* tensors it saves (each counted once per section) */
    double saved_sz[12]; /* their bytes at micro-batch 1 */
    /* The product's shape at micro-batch 1 (matrix ops; gk 0: unknown, costed by FLOPs):
     * gbatch products C[gm, gn] = A[gm, gk] B[gk, gn]; tensor parallelism splits gn
     * (gsplit 1: column- and vocabulary-parallel) or gk (gsplit 2: row-parallel). */
    double gm, gn, gk, gbatch;
    int gsplit;
    /* Attention (attn_core): heads, query and key lengths, head dim, causal mask. */
    double at_heads, at_s, at_skv, at_d;
    int at_causal;
    wf_mb_kind mb_kind;  /* memory-bound ops: which measured kernel family they run as */
    int glu;             /* SwiGLU parts: 1 the silu, 2 the product, 3 the gate projection, 4 the up
                            projection (a fusing profile runs 3+4 as one GEMM and 1+2 as one kernel) */
    /* Other models' block checkpoints (full recomputation, generic.c): */
    int seg_start;       /* the first op of a run of ops of one block instance (or of the ops
                            between blocks): full recomputation checkpoints its input */
    double ckpt_bytes;   /* at a seg_start: the activations that run reads from earlier ops
                            (micro-batch 1), what the checkpoint keeps */
} wf_cost_op;

/* A Megatron tensor-parallel communication point (a tensor of `bytes` at
 * micro-batch 1): an f point precedes column-parallel ops (identity forward,
 * all-reduce backward; with sequence parallelism all-gather forward and
 * reduce-scatter backward, plus the re-gather for the weight gradient); a g
 * point follows a row-parallel op (all-reduce forward; with sequence
 * parallelism reduce-scatter forward, all-gather backward). */
typedef struct {
    int is_f;
    double bytes;
} wf_tp_point;

typedef struct {
    int op0, nop;        /* ops [op0, op0 + nop) of ctx->ops */
    int pt0, npt;        /* tp points [pt0, pt0 + npt) */
    double ce_bytes;     /* vocab-parallel cross-entropy: 3 small all-reduces of this size */
    double params_split; /* parameter elements divided by tp */
    double params_repl;  /* replicated parameter elements */
    double params_expert;/* expert parameter elements (divided by ep x etp) */
    double input_bytes;  /* the section's input activation (what full recompute keeps) */
    double flops;        /* matrix FLOPs forward + backward (model FLOPs) */
} wf_cost_section;

/* Pipeline stages of a generic model for one (micro-batch, pp, recompute). */
#define WF_COST_MAX_STAGES 256
typedef struct {
    int nstages;
    double stage_time[WF_COST_MAX_STAGES]; /* fwd + bwd + rec per micro-batch */
    double fwd[WF_COST_MAX_STAGES], bwd[WF_COST_MAX_STAGES], rec[WF_COST_MAX_STAGES];
    double act[WF_COST_MAX_STAGES], transient[WF_COST_MAX_STAGES];
    double params[WF_COST_MAX_STAGES];
    double boundary_bytes[WF_COST_MAX_STAGES]; /* activation sent to the next stage (mb 1) */
    /* Under layouts with a model-parallel axis (wf_cost_split_stages_layout): */
    double tpf[WF_COST_MAX_STAGES], tpb[WF_COST_MAX_STAGES]; /* exposed collectives per micro-batch,
                                                                 forward and backward (in fwd, bwd) */
    double mp_params[WF_COST_MAX_STAGES]; /* parameters reduced over the model-parallel axis */
    double sub_params[2][WF_COST_MAX_STAGES]; /* reduced over one sub-axis (wf_cost_layout.nsub) */
    double boundary_div[WF_COST_MAX_STAGES]; /* the boundary activation is divided by */
    int first_op[WF_COST_MAX_STAGES + 1];    /* stage k holds ops [first_op[k], first_op[k + 1]) */
} wf_stage_split;

/* What a plan's framework profile and its keys (attn, fp8, cp, grad, loss)
 * change in how ops are costed (framework.c, docs/cost-model.md). */
typedef struct {
    wf_sw sw;
    int flash;          /* attention: the fused flash kernel (else unfused kernels) */
    int fp8;            /* matrix products other than attention in FP8 */
    int cp;             /* context parallelism: the sequence split over cp ranks */
    int tp_overlap;     /* 0: tensor-parallel collectives synchronous; 1: the backward ones
                           behind the weight/input-gradient GEMMs (Megatron-LM 2022); 2: also the
                           forward ones behind the GEMMs they feed (Megatron-Core's userbuffers) */
    int dp_overlap;     /* the gradient reduction overlaps backward (1) or follows it (0) */
    int ag_overlap;     /* ZeRO-1/2's parameter all-gather behind the next forward */
    int zero;           /* ZeRO stage as run */
    double grad_bytes;  /* per gradient element kept and reduced */
    int ep, etp;        /* expert and expert-tensor parallelism */
    double imb;         /* expert load imbalance (>= 1) */
    int epo;            /* the experts' all-to-alls overlap another micro-batch's compute */
    double loss_bytes;  /* per logit element of the loss computation */
    int regen_dropout;  /* dropout masks regenerated from the RNG state in backward: none kept,
                           and unfused attention keeps its probabilities alone (sw=weft) */
    int workspace;      /* count the runtime's own buffers (sw=weft): the backward's working
                           set, the kernels' workspace, the gradient accumulation buffer */
    int autocast;       /* torch.autocast over fp32 weights (sw=pytorch, bf16/fp16 model): fp32
                           residual stream and norms, weight casts each forward */
    int eager_norm;     /* norms as PyTorch's eager kernels save them (sw=pytorch): an RMSNorm
                           keeps its fp32 input and normalized output */
    int fused_glu;      /* SwiGLU as Megatron-Core runs it: gate and up projections one GEMM
                           (linear_fc1), silu and product one kernel (bias_swiglu), which keeps
                           fc1's output alone */
    int fp8_saved;      /* Transformer Engine's FP8 layers keep their inputs in FP8 */
    int expert_loop;    /* the grouped MLP as weft's runtime runs it (sw=weft, kernels_moe.c):
                           two products per expert, each at its own size's rate, and a backward
                           that recomputes the first product and the activation */
    int unpadded;       /* the model's dimensions as given, no padded vocabulary (sw=pytorch):
                           products with unaligned leading dimensions run on alignment-1 kernels */
    int eager_elem;     /* the exported script's eager elementwise chains (sw=pytorch): RMSNorm,
                           rotary, GQA's repeat, autocast's activation casts; no dropout */
    double w_bytes;     /* bytes per stored weight element (fp32 master weights: 4) */
    double loss_saved;  /* per logit, saved beyond the logits (PyTorch: fp32 log-probabilities) */
    double loss_ws;     /* per logit, the loss's backward workspace */
    int pp, dp;         /* the plan's pipeline and data parallelism (memory rules) */
    wf_attn_impl attn_impl; /* the attention kernels the profile runs (unfused when !flash) */
} wf_cost_var;

/* The variant of plan p for ctx's model (defaults resolved by the profile);
 * the whole struct is written, padding zeroed. */
void wf_cost_var_of(const wf_cost_ctx *ctx, const wf_plan *p, wf_cost_var *out);

/* What a cached section or stage split was costed under, compared whole
 * (memcmp; built zeroed): the micro-batch, tp, sp, pp (generic models), the
 * recomputation and the variant, less the fields no section time reads (dp,
 * pp, zero and dp_overlap: the gradient reduction's and memory's). */
typedef struct {
    int64_t mbs;
    int tp, sp, pp;
    wf_recompute rc;
    wf_cost_var var;
} wf_cost_key;

typedef struct {
    int valid;
    wf_cost_key key;
    wf_cost_sect_time s[WF_COST_SEC_COUNT];
    wf_stage_split *split; /* generic models only (owned) */
} wf_cost_entry;

#define WF_COST_CACHE 1024
#define WF_COST_MLAYOUTS 32

struct wf_cost_ctx {
    wf_model_config model;
    wf_cluster cluster;
    int transformer;
    wf_dtype dtype;
    double elem_bytes;          /* bytes per activation / weight element */
    wf_cost_op *ops;
    int nops;
    wf_tp_point *pts;
    int npts;
    wf_cost_section sec[WF_COST_SEC_COUNT];
    double shared_split;        /* tied parameters held by both pre and post (one copy at pp=1) */
    double shared_repl;
    double logits_per_sample;   /* logits elements of one sample (CE workspace) */
    double model_flops_per_sample; /* matrix FLOPs of one sample, forward + backward */
    double saved_dedup;         /* generic: deduplicated / summed saved bytes of the graph */
    double cast_params;         /* parameter elements read by matrix products (autocast's casts) */
    double cast_tensors;        /* how many of those tensors exceed 1 MiB in 16 bits */
    double big_param_tensors;   /* parameter tensors above 1 MiB in fp32 */
    double param_tensors;       /* parameter tensors (each its own gradient collective under
                                   wfbp and bytescheduler) */
    double param_elems;         /* their elements */
    wf_cost_var var;            /* the variant in use (wf_cost_ctx_use; default plan's at first) */
    double *pipe_buf;           /* generic: scratch of wf_cost_pipeline_ends (owned) */
    size_t pipe_buf_n;          /* its doubles */
    wf_cost_entry cache[WF_COST_CACHE];
    wf_cost_layout mlay[WF_COST_MLAYOUTS]; /* Megatron's layouts per (tp, sp) in use */
    int nmlay;
    wf_cost_layout dap_lay[4];  /* AlphaFold2: the DAP layouts of dap_k[i] devices (dap.c), 0: none yet */
    int dap_k[4];
};

/* Bytes of one gradient element the framework keeps, accumulates and reduces. */
static inline double wf_cost_grad_elem_bytes(const wf_cost_ctx *ctx)
{
    return ctx->var.grad_bytes;
}

/* Weight traffic of an op per micro-batch: forward reads each weight;
 * backward reads it again and accumulates its gradient (read + write, since
 * gradients add up over the micro-batches of an iteration). */
/* Under autocast (fp32 weights) a product's forward first casts each weight
 * to 16 bits (read 4, write e) and reads the copy, which its backward reads
 * again; other ops read the fp32 weight itself. */
static inline double wf_cost_fwd_weight_bytes(const wf_cost_ctx *ctx, const wf_cost_op *r)
{
    if (ctx->var.autocast)
        return r->params * (r->matrix ? ctx->var.w_bytes + 2.0 * ctx->elem_bytes : ctx->var.w_bytes);
    return r->params * ctx->var.w_bytes;
}
static inline double wf_cost_bwd_weight_bytes(const wf_cost_ctx *ctx, const wf_cost_op *r)
{
    double w = ctx->var.autocast && r->matrix ? ctx->elem_bytes : ctx->var.w_bytes;
    return r->has_wgrad ? r->params * (w + 2.0 * wf_cost_grad_elem_bytes(ctx)) : 0;
}

/* Under var.unpadded: a weight product (forward (M, N, K) = (tokens, out,
 * in)) whose leading dimensions are not aligned takes the alignment-1
 * kernels' time in each pass it runs (framework.c; src/cluster/gemm_align.c). */
void wf_cost_unaligned_gemm(const wf_cost_ctx *ctx, wf_gemm_kind kind, double nb, double M, double N, double K,
                            wf_cost_op_time *t);

/* Under var.eager_elem: op r's times (micro-batch b, work divided by div)
 * as the exported PyTorch script runs it, replacing or adding to the
 * graph's kernels (framework.c). */
void wf_cost_eager_time(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div, wf_cost_op_time *t);

/* What op i keeps for backward at micro-batch 1 under the variant in use
 * (docs/cost-model.md, "Memory per framework"): out[0] the part replicated
 * over tp, out[1] the part split over tp, out[2] the attention's scores (or
 * the flash kernel's log-sum-exp). The estimate, the stage cut and the
 * records the simulator reads all take it from here. */
void wf_cost_op_saved(const wf_cost_ctx *ctx, int i, double out[3]);

/* Fills the cost ops of a transformer (one layer) or a whole generic graph. */
wf_status wf_cost_build_transformer(wf_cost_ctx *ctx);
wf_status wf_cost_build_generic(wf_cost_ctx *ctx);

/* Splits a generic model into pp stages for micro-batch b (into *out). */
void wf_cost_split_stages(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc,
                          wf_stage_split *out);
/* The same under layouts L (NULL: the estimate's, data parallelism), cut at
 * first[0..pp] when given (NULL: balanced by time, as the estimate cuts). */
void wf_cost_split_stages_layout(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc,
                                 const wf_cost_layout *L, const int *cut, wf_stage_split *out);

/* Plays a pipeline of p stages and m micro-batches (1F1B, or GPipe when
 * gpipe) whose stage k takes fp[k] per forward (its activation send
 * included) and bp[k] per backward (recomputation and gradient send
 * included): end[k] = when stage k finishes its last pass. buf holds
 * 2 p m + 2 p doubles. Returns 0, or -1 if the order cannot run. */
int wf_cost_pipeline_ends(const double *fp, const double *bp, int p, int m, int gpipe, double *buf, double *end);
/* ---- recycling (nf1b.c) and co-shard ----------------------------------------------
 * The pipeline of a model with recycling played pass by pass in
 * wf_cost_nf_order's order (fp, bp as for
 * wf_cost_pipeline_ends; ng[k] a forward without gradient and its send;
 * rsend the recycled outputs' trip from the last stage to the first): when
 * each stage ends, into end[p]. 0, -1 for an order that cannot run, -2 out of
 * memory. */
int wf_cost_pipeline_nf_ends(const double *fp, const double *bp, const double *ng, double rsend, int p, int m,
                             int gpipe, int n_rec, int nf1b, double *end);
/* wf_cost_split_stages_layout with every op run as `pieces` pieces in turn
 * (co-shard, pieces >= 1): each piece an op on 1/pieces of the rows, and
 * under full recomputation one piece's activations live at a time. */
void wf_cost_split_stages_pieces(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc, const wf_cost_layout *L,
                                 const int *cut, int pieces, wf_stage_split *out);
/* The same with only the ops sel[i] != 0 run as pieces (per-op co-shard,
 * coshard=K@PATTERN; sel NULL: every op, as wf_cost_split_stages_pieces).
 * A chosen op replays its own forward piece by piece before its backward
 * (counted in rec) whatever rc says, keeps none of its saved activations
 * between its forward and its backward, and holds one piece's, its saved
 * activations / pieces, while its backward runs (transient: the largest
 * chosen op's). Under recompute=full its piece's activations count in its
 * segment's replay as activations / pieces. */
void wf_cost_split_stages_sel(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc, const wf_cost_layout *L,
                              const int *cut, int pieces, const unsigned char *sel, wf_stage_split *out);

/* Micro-batches whose activations the first stage holds at once. */
double wf_cost_inflight(const wf_plan *p, int64_t micro_batches);
/* Micro-batches whose activations pipeline stage s (0 <= s < pp) holds at
 * once: the first stage's wf_cost_inflight, fewer down the pipeline. */
double wf_cost_inflight_stage(const wf_plan *p, int64_t micro_batches, int s);

/* Times of op r at micro-batch b, its activation work divided by div
 * (tensor or sequence parallelism) and its weights by pdiv (split ops): the
 * one computation behind wf_cost_op_times, the sections and the stage cut. */
wf_cost_op_time wf_cost_op_time_of(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div,
                                   double pdiv);

/* Op r's times under tensor parallelism t and sequence parallelism sp, the
 * experts' layout and imbalance of the variant applied (what the sections,
 * the stage cut and wf_cost_op_times all use). */
wf_cost_op_time wf_cost_op_time_tp(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double t, int sp);

/* Replaces the cluster of a context and drops its cache (calibration). */
void wf_cost_ctx_set_cluster(wf_cost_ctx *ctx, const wf_cluster *c);

/* ---- calibration data (calib.c) ----------------------------------------------
 * The measurements of Korthikanti et al. 2022 (tests/data/calibration-
 * korthikanti2022.json): iteration times and memory per GPU of four GPT models
 * on DGX A100, and the plan each row ran. */
#define WF_CALIB_MAX_ROWS 32
typedef struct {
    char model[64];
    int model_index;  /* into wf_calib_data.models */
    wf_plan plan;
    int64_t batch;
    char mode[16];    /* full, seqsel, none */
    double time_s;    /* measured iteration time (time rows) */
    double weights_gib, act_gib; /* measured memory (memory rows) */
} wf_calib_row;

#define WF_CALIB_MAX_MODELS 8
typedef struct {
    int nmodels, ntime, nmem;
    wf_model_config models[WF_CALIB_MAX_MODELS];
    char spec[WF_CALIB_MAX_MODELS][128]; /* the model as the file names it (H100 rows) */
    wf_calib_row time[WF_CALIB_MAX_ROWS];
    wf_calib_row mem[WF_CALIB_MAX_ROWS];
} wf_calib_data;

/* Reads the data file; checks each model's shape against the zoo entry of
 * the same name (a mismatch is WF_FORMAT). */
wf_status wf_calib_load(const char *path, wf_calib_data *out);

/* Predictions for every row on cluster c, reusing one cost context per model
 * (ctxs[WF_CALIB_MAX_MODELS], NULL-initialized by the caller, freed with
 * wf_calib_free). pred_time[i] for time rows, pred_weights/pred_act in GiB for
 * memory rows: pred_weights is what the paper counts, the weights, gradients
 * and optimizer state of the transformer layers of the most loaded stage
 * (wf_estimate.mem_layer_weights_bytes), pred_act its activations. */
/* Reads NVIDIA's H100 rows (../shared/data/calibration-h100.json, copied to
 * tests/data/calibration-h100.json) into time rows, each run as
 * sw=megatron-core, fp8=1, zero=1, recompute=none, in bf16. */
wf_status wf_calib_load_h100(const char *path, wf_calib_data *out);

wf_status wf_calib_predict(const wf_calib_data *d, const wf_cluster *c, wf_cost_ctx **ctxs,
                           double *pred_time, double *pred_weights, double *pred_act);
void wf_calib_free(wf_cost_ctx **ctxs);

/* What the calibration grids minimize: the mean |relative error| of the
 * time rows plus any excess of the worst over 6% (mean and max returned when
 * not NULL). */
double wf_calib_score(const wf_calib_data *d, const double *pred, double *mean_out, double *max_out);
/* The matrix efficiency curve e_max F / (F + f_half) sampled at 1e13 ... 1e8
 * FLOPs into dev's table (both presets' fitted form). */
void wf_calib_set_curve(wf_device *dev, double e_max, double f_half);

#endif
