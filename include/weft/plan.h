/* weft plan: the plan value -- the whole-model plan's keys, the per-op
 * plan (wf_layout), their string and file forms, validation, the rank
 * groups (docs/interfaces.md, "plan.h"). */
#ifndef WEFT_PLAN_H
#define WEFT_PLAN_H

#include "weft/cluster.h"
#include "weft/core.h"
#include "weft/models.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { WF_RECOMPUTE_NONE, WF_RECOMPUTE_SELECTIVE, WF_RECOMPUTE_FULL } wf_recompute;

/* Per-stage recomputation (docs/plan-format.md): at most this many pipeline
 * stages in a per-stage list, at most WF_PLAN_RC_RUNS runs of equal values
 * in each list (the canonical string writes a run as "full*3"). */
#define WF_PLAN_RC_STAGES 64
#define WF_PLAN_RC_RUNS 8

/* Data-parallel gradient communication schedules (ALGORITHMS.md §4). */
#define WF_COMM_LIST(X)            \
    X(WFBP, "wfbp")                \
    X(DDP, "ddp")                  \
    X(HOROVOD, "horovod")          \
    X(BYTESCHEDULER, "bytescheduler") \
    X(MGWFBP, "mgwfbp")            \
    X(DEAR, "dear")                \
    X(AUTO, "auto")

typedef enum {
#define WF_X(e, name) WF_COMM_##e,
    WF_COMM_LIST(WF_X)
#undef WF_X
    WF_COMM_COUNT
} wf_comm_kind;

typedef struct {
    wf_comm_kind kind;
    double threshold_bytes; /* bucket / fusion threshold; 0 = the scheduler's default */
} wf_comm_sched;

/* PyTorch DDP's default bucket (bucket_cap_mb=25). */
#define WF_SCHED_DDP_BUCKET_BYTES (25.0 * 1048576.0)
/* `dear:0`'s threshold: no tensor fusion. */
#define WF_SCHED_UNFUSED_BYTES 1.0

/* "ddp:25" (MB), "dear", "auto". */
wf_status wf_comm_parse(const char *text, wf_comm_sched *out);
const char *wf_comm_name(wf_comm_kind k);

typedef enum { WF_PIPE_1F1B, WF_PIPE_GPIPE } wf_pipe_kind;

/* Attention kernels: the profile's (AUTO), fused (flash) or unfused. */
typedef enum { WF_ATTN_AUTO, WF_ATTN_FLASH, WF_ATTN_UNFUSED } wf_attn;

/* Framework profiles (sw=NAME; docs/cost-model.md). The first is the default. */
#define WF_SW_LIST(X)                       \
    X(MEGATRON_CORE, "megatron-core")       \
    X(MEGATRON_2022, "megatron-2022")       \
    X(MEGATRON_2021, "megatron-2021")       \
    X(DEEPSPEED, "deepspeed")               \
    X(FSDP, "fsdp")                         \
    X(WEFT, "weft")                         \
    X(PYTORCH, "pytorch")

typedef enum {
#define WF_X(e, name) WF_SW_##e,
    WF_SW_LIST(WF_X)
#undef WF_X
    WF_SW_COUNT
} wf_sw;

const char *wf_sw_name(wf_sw s);
/* A profile by name (case-insensitive, '_' for '-'); WF_INVAL naming the choices. */
wf_status wf_sw_parse(const char *text, wf_sw *out);

/* Bytes of a plan's per-op co-shard pattern, its NUL included. */
#define WF_PLAN_COSHARD_ON_LEN 72

typedef struct {
    int dp, tp, pp;       /* data, tensor, pipeline degrees */
    int mbs;              /* micro-batch size (samples per micro-batch per data-parallel rank) */
    int vpp;              /* virtual pipeline stages (interleaved 1F1B when > 1) */
    wf_recompute recompute; /* every layer's recomputation; with per-stage values (rc_n > 0) the
                               strongest of them (full > selective > none) */
    int rc_layers;        /* the block method's N (0: every layer; docs/interfaces.md) */
    int rc_n;             /* 0: every stage follows recompute and rc_layers; else the number of
                             per-stage values in rc_kind_at / rc_layers_at (must equal pp) */
    unsigned char rc_kind_at[WF_PLAN_RC_STAGES]; /* [rc_n] each stage's wf_recompute */
    int rc_layers_at[WF_PLAN_RC_STAGES];         /* [rc_n] each stage's N (0 every layer; 0 for
                                                    stages whose recompute is not full) */
    int sp;               /* sequence parallelism (with tp) */
    int zero;             /* ZeRO stage 0..3 */
    int overlap;          /* 1: dp gradient reduction overlaps backward (default) */
    wf_pipe_kind pipe;    /* pipeline schedule */
    wf_comm_sched comm;   /* dp gradient schedule */
    int cp;               /* context parallelism: the sequence split over cp ranks */
    int ep;               /* expert parallelism: each MoE layer's experts over ep ranks */
    int etp;              /* expert tensor parallelism (0: tp, Megatron-Core's default) */
    double imb;           /* expert load imbalance: the busiest expert rank's tokens over the
                             mean (>= 1; 1: balanced routing) */
    int epo;              /* 1: the experts' all-to-alls overlap another micro-batch's compute
                             (Megatron-Core's --overlap-moe-expert-parallel-comm, DualPipe) */
    int fp8;              /* 1: matrix products in FP8 (Transformer Engine) */
    wf_attn attn;         /* attention kernels (AUTO: the profile's) */
    wf_sw sw;             /* framework profile */
    int grad_dtype;       /* gradient reduction dtype (a wf_dtype), or -1: the profile's */
    int loss_dtype;       /* dtype of the loss computation (a wf_dtype), or -1: the profile's */
    unsigned given;       /* WF_PLAN_GIVEN_*: keys the plan string named (a default plan: all) */
    int stage_n;          /* uneven stages: 0 even (layers / pp), else pp (stage_layers) */
    int stage_layers[WF_PLAN_RC_STAGES]; /* [stage_n] each stage's layers, each >= 1 */
    int coshard;          /* co-shard pieces per op (<= 1: none; models other than transformers) */
    char coshard_on[WF_PLAN_COSHARD_ON_LEN]; /* coshard=K@PATTERN: "" every op of a stage (whole-stage),
                             else '+'-joined op kinds or op-name globs (wf_plan_coshard_op) */
    int dap;              /* AlphaFold2's Dynamic Axial Parallelism degree (<= 1: none) */
    int nf1b;             /* recycling: 1 NF1B (forwards without gradient first), 0 each before
                             its forward */
    int interlace;        /* 1: the interlaced pipeline (SuperScaler's 1F1B+) */
} wf_plan;

/* Keys whose defaults depend on the devices and the batch (wf_plan_complete). */
#define WF_PLAN_GIVEN_DP 1u
#define WF_PLAN_GIVEN_MBS 2u

void wf_plan_default(wf_plan *p);
/* Parses a plan string or, when text names an existing file, a plan JSON file. */
wf_status wf_plan_parse(const char *text, wf_plan *out);
/* Fills dp and mbs where the string left them out (docs/interfaces.md);
 * what was assumed into note ("" when nothing; cap >= 1). A dp that cannot
 * fill the devices is WF_INVAL. */
wf_status wf_plan_complete(wf_plan *p, int64_t devices, int64_t batch, char *note, size_t cap);
/* The canonical string (docs/interfaces.md, "plan.h"); snprintf's count. */
int wf_plan_format(const wf_plan *p, char *buf, size_t cap);
/* Key k (0 <= k < wf_plan_nkeys()) of the plan-key table, in the canonical
 * string's order: its name, whether it is a parallel degree, its text in
 * wf_plan_format(p) ("" where left out). */
typedef struct {
    const char *name;
    int degree;
    char text[320];
} wf_plan_key_view;
int wf_plan_nkeys(void);
void wf_plan_key_view_of(int k, const wf_plan *p, wf_plan_key_view *out);
const char *wf_recompute_name(wf_recompute r);
/* Layers of one model chunk of pipeline stage s (0 <= s < pp) that plan p
 * recomputes fully (*full) and selectively (*sel) when a chunk holds
 * chunk_layers layers (layers / (pp x vpp)); the rest are not recomputed. */
void wf_plan_stage_rc(const wf_plan *p, int s, int chunk_layers, int *full, int *sel);
/* 1 when every layer of every stage is recomputed as p->recompute says
 * (chunk_layers as above); 0 for a per-stage or block-method plan. */
int wf_plan_rc_uniform(const wf_plan *p, int chunk_layers);
const char *wf_pipe_name(wf_pipe_kind k);
/* dp x tp x pp x cp. */
int64_t wf_plan_devices(const wf_plan *p);
/* Transformer layers on pipeline stage s of a model of `layers` layers:
 * stage_layers[s] for uneven stages, else layers / pp. */
int wf_plan_stage_layers(const wf_plan *p, int64_t layers, int s);
/* The first layer of stage s (the sum of the stages before it). */
int wf_plan_stage_first_layer(const wf_plan *p, int64_t layers, int s);
/* The pipeline kind of p for tables and JSON ("1F1B", "NF1B 1F1B + DAP";
 * the names: docs/interfaces.md, "plan.h"). */
const char *wf_plan_kind(const wf_plan *p);
/* 1 when plan p runs the forward op named `name` of kind `kind` (a
 * wf_op_kind) as coshard pieces: every op under whole-stage co-shard
 * (coshard > 1, coshard_on ""), the ops one of coshard_on's '+'-separated
 * patterns matches under per-op co-shard (a pattern matches an op whose kind
 * name, wf_op_name, equals it, or whose name it matches as a glob of '*' and
 * '?'); 0 without co-shard. */
int wf_plan_coshard_op(const wf_plan *p, const char *name, int kind);
/* 1 when p co-shards chosen ops only (coshard > 1 with a pattern). */
int wf_plan_coshard_per_op(const wf_plan *p);

/* ---- the interlaced pipeline's schedule (src/plan/interlace.c) -----------------
 * Each device's task order of an interlaced plan (interlace=1); every
 * dependency points forward in every order (docs/interfaces.md, "plan.h"). */
typedef enum {
    WF_PTASK_FWD,     /* the stage's layers, forward */
    WF_PTASK_BWD,     /* the stage's layers, backward */
    WF_PTASK_EMB_FWD, /* all devices: the embedding's forward */
    WF_PTASK_HEAD,    /* all devices: the head's forward, the loss, the head's backward */
    WF_PTASK_EMB_BWD, /* all devices: the embedding's backward */
    WF_PTASK_COUNT
} wf_ptask_kind;

typedef struct {
    int kind; /* wf_ptask_kind */
    int mb;   /* micro-batch 0..m-1 */
} wf_plan_task;

/* 1 for the segments that hold every device of the pipeline. */
int wf_ptask_all_devices(int kind);
/* "F", "B", "EF", "H", "EB": short names for schedule summaries. */
const char *wf_ptask_name(int kind);
/* Stage `stage` of p (>= 2) with m micro-batches: its 2m + 3m tasks into out
 * (cap entries), *n set. Bad p, m, stage or a small cap: WF_INVAL. */
wf_status wf_plan_interlace_order(int p, int m, int stage, wf_plan_task *out, int cap, int *n);
/* Plays the orders with durations: stage s's forward f_s[s] and backward
 * b_s[s] (each including its send to the next stage), the segments ef_s,
 * h_s, eb_s (every device at once: a segment starts when every device is
 * free and its input is ready). Writes when each stage's last task ends
 * (end_s, [p], may be NULL) and the makespan. */
wf_status wf_plan_interlace_play(int p, int m, const double *f_s, const double *b_s, double ef_s, double h_s,
                                 double eb_s, double *end_s, double *makespan_s);

/* ---- plan files (docs/plan-format.md) ---------------------------------------- */
typedef struct {
    char model[256];   /* "" when not recorded */
    char cluster[256]; /* "" when not recorded */
    int64_t batch;     /* 0 when not recorded */
} wf_plan_meta;

struct cJSON;
/* meta may be NULL on both sides; estimate (may be NULL) is copied in. */
struct cJSON *wf_plan_to_json(const wf_plan *p, const wf_plan_meta *meta,
                              const struct cJSON *estimate);
wf_status wf_plan_from_json(const struct cJSON *j, const char *ctx, wf_plan *out,
                            wf_plan_meta *meta);
wf_status wf_plan_read_file(const char *path, wf_plan *out, wf_plan_meta *meta);
/* Writes the plan file atomically (temporary file, fsync, rename). */
wf_status wf_plan_write_file(const char *path, const wf_plan *p, const wf_plan_meta *meta,
                             const struct cJSON *estimate);

/* ---- the per-op plan: wf_layout (docs/plan-format.md) --------------------------
 * The value and its file form; its meaning and its validation against a
 * model are layout.h's (wf_layout_validate, wf_layout_resolve). */
typedef struct {
    char mesh[64];          /* the mesh of each stage, e.g. "8x8" */
    int pp;                 /* pipeline stages, >= 1 */
    int64_t micro_batches;  /* >= 1 */
    int nlayouts, cap_layouts;
    char **op;              /* [nlayouts] forward op names, in the order added */
    char **sig;             /* [nlayouts] their signatures */
    int nstorage, cap_storage;
    char **tensor;          /* [nstorage] tensor names (a leaf, or a stage's input) */
    char **layout;          /* [nstorage] their storage layouts */
    int *storage_stage;     /* [nstorage] the stage each belongs to */
    char **stage_first;     /* [pp] the first op of each stage (NULL entries until set); with
                               vpp > 1 in keys, the first op of each stage's first chunk */
    char keys[512];         /* the keys that are not layouts, as a plan string ("": defaults) */
} wf_layout;

void wf_layout_init(wf_layout *p);
void wf_layout_free(wf_layout *p);
/* Sets mesh, pp (>= 1, <= 4096) and micro-batches; clears the stages. */
wf_status wf_layout_set(wf_layout *p, const char *mesh, int pp, int64_t micro_batches);
/* Appends an op's signature, a leaf's storage; WF_INVAL naming a repeated name. */
wf_status wf_layout_add_sig(wf_layout *p, const char *op, const char *sig);
wf_status wf_layout_add_storage(wf_layout *p, int stage, const char *tensor,
                                const char *layout);
/* Names the first op of stage s (0 <= s < pp). */
wf_status wf_layout_set_stage(wf_layout *p, int s, const char *first_op);
/* Sets the plan's keys from a whole-model plan (every key but the layouts':
 * dp, tp, pp, mbs, sp, cp, ep, etp). */
wf_status wf_layout_set_keys(wf_layout *p, const wf_plan *keys);
/* The whole-model plan of the keys (defaults where not given; dp, tp, pp,
 * mbs and sp at their defaults, for the layouts to say). WF_INVAL naming a
 * key that is a layout's, or a bad value. */
wf_status wf_layout_keys(const wf_layout *p, wf_plan *out);
/* The signature recorded for op, or NULL. */
const char *wf_layout_sig_of(const wf_layout *p, const char *op);
/* "mesh=8x8,pp=2,micro_batches=8" into buf; returns snprintf's count. */
int wf_layout_format(const wf_layout *p, char *buf, size_t cap);

struct cJSON *wf_layout_to_json(const wf_layout *p, const wf_plan_meta *meta,
                                const struct cJSON *estimate);
/* Reads an op-level plan object (ctx names it in messages). */
wf_status wf_layout_from_json(const struct cJSON *j, const char *ctx, wf_layout *out,
                              wf_plan_meta *meta);
wf_status wf_layout_write_file(const char *path, const wf_layout *p,
                               const wf_plan_meta *meta, const struct cJSON *estimate);
/* Reads a plan file of either kind. A whole-model file fills whole and sets
 * *is_oplevel = 0; an op-level file (one with "layouts") fills ol (which must
 * be initialized; may be NULL, and then the file is an error pointing to
 * `weft plan --verify`) and sets *is_oplevel = 1. */
wf_status wf_plan_read_file_any(const char *path, wf_plan *whole, wf_layout *ol,
                                wf_plan_meta *meta, int *is_oplevel);
/* 1 when text names a readable op-level plan file (no error recorded either way). */
int wf_plan_is_oplevel_file(const char *text);

/* ---- rank groups: one generator --------------------------------------------------
 * Each axis: groups of `size` ranks `stride` apart, in Megatron-Core's order
 * tp-cp-ep-dp-pp (dense and expert generators; docs/interfaces.md, "plan.h"). */
typedef enum { WF_AXIS_TP, WF_AXIS_CP, WF_AXIS_EP, WF_AXIS_DP, WF_AXIS_PP, WF_AXIS_COUNT } wf_axis;

typedef struct {
    int64_t size;   /* ranks in each group */
    int64_t stride; /* between consecutive members */
} wf_axis_ranks;

/* The generator: size[a] (< 1 read as 1) in the order of wf_axis. */
void wf_rank_generator(const int64_t size[WF_AXIS_COUNT], wf_axis_ranks out[WF_AXIS_COUNT]);
/* The dense layers' axes: tp, cp, dp, pp (ep 1). */
void wf_rank_axes_dense(int64_t tp, int64_t cp, int64_t dp, int64_t pp, wf_axis_ranks out[WF_AXIS_COUNT]);
/* The expert layers' axes over the same tp x cp x dp x pp ranks: etp (on
 * WF_AXIS_TP), ep, edp = tp cp dp / (etp ep) (at least 1, on WF_AXIS_DP), pp. */
void wf_rank_axes_expert(int64_t tp, int64_t cp, int64_t dp, int64_t pp, int64_t ep, int64_t etp,
                         wf_axis_ranks out[WF_AXIS_COUNT]);
/* Axes lo..hi (adjacent, lo <= hi) as one group: the product of their sizes,
 * the stride of lo. */
wf_axis_ranks wf_rank_axes_join(const wf_axis_ranks ax[WF_AXIS_COUNT], wf_axis lo, wf_axis hi);
/* The inverse of a join: a's group as two sub-axes, out[0] outer (a.size /
 * inner ranks), out[1] inner (`inner` ranks, a's stride); inner divides
 * a.size. */
void wf_rank_axis_split(wf_axis_ranks a, int64_t inner, wf_axis_ranks out[2]);
/* Rank r's coordinate on an axis, and the first rank of its group there (the
 * same for every member: a group's colour for MPI_Comm_split). */
int64_t wf_rank_coord(wf_axis_ranks a, int64_t r);
int64_t wf_rank_group_first(wf_axis_ranks a, int64_t r);

/* Whether whole-model plan p can run model m on cluster c with the global
 * batch: WF_INVAL naming the first rule it breaks (docs/architecture.md,
 * "Validation"). */
wf_status wf_plan_validate(const wf_plan *p, const wf_model_config *m, const wf_cluster *c,
                           int64_t batch);

#ifdef __cplusplus
}
#endif
#endif
