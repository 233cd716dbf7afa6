/* weft plan: how one training iteration is parallelized.
 *
 * A plan string is "dp=24,tp=8,pp=8,mbs=2,vpp=2,recompute=full,zero=1,sp=0"
 * (keys left out take their defaults); a plan file is the JSON written by
 * `weft plan -o`. Every plan read is validated against a model, a cluster and
 * a batch before use. */
#ifndef WEFT_PLAN_H
#define WEFT_PLAN_H

#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { WF_RECOMPUTE_NONE, WF_RECOMPUTE_SELECTIVE, WF_RECOMPUTE_FULL } wf_recompute;

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

/* "ddp:25" (MB), "dear", "auto". */
wf_status wf_comm_parse(const char *text, wf_comm_sched *out);
const char *wf_comm_name(wf_comm_kind k);

typedef enum { WF_PIPE_1F1B, WF_PIPE_GPIPE } wf_pipe_kind;

typedef struct {
    int dp, tp, pp;       /* data, tensor, pipeline degrees */
    int mbs;              /* micro-batch size (samples per micro-batch per data-parallel rank) */
    int vpp;              /* virtual pipeline stages (interleaved 1F1B when > 1) */
    wf_recompute recompute;
    int sp;               /* sequence parallelism (with tp) */
    int zero;             /* ZeRO stage 0..3 */
    int overlap;          /* 1: dp gradient reduction overlaps backward (default) */
    wf_pipe_kind pipe;    /* pipeline schedule */
    wf_comm_sched comm;   /* dp gradient schedule */
} wf_plan;

void wf_plan_default(wf_plan *p);
/* Parses a plan string or, when text names an existing file, a plan JSON file. */
wf_status wf_plan_parse(const char *text, wf_plan *out);
/* Canonical string (every key), e.g. "dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full,sp=0,zero=0". */
int wf_plan_format(const wf_plan *p, char *buf, size_t cap);
const char *wf_recompute_name(wf_recompute r);
const char *wf_pipe_name(wf_pipe_kind k);
int64_t wf_plan_devices(const wf_plan *p);

/* ---- plan files (docs/plan-format.md) ----------------------------------------
 * {"format": "weft-plan", "version": 1, "plan": "dp=...,tp=...", optional
 * "model", "cluster", "batch" (what the plan was made for, for checking) and
 * "estimate" (an object, kept as written). */
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

#ifdef __cplusplus
}
#endif
#endif
