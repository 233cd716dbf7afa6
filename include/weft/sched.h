/* weft scheduling: the order in which work is issued, as plain data.
 *
 * Pipeline schedules (GPipe, 1F1B, interleaved 1F1B) as the ordered list of
 * (forward|backward, micro-batch, chunk) a stage executes; data-parallel
 * gradient communication schedules (WFBP, DDP buckets, Horovod fusion,
 * ByteScheduler, MG-WFBP, DeAR) as the grouping of gradient tensors into
 * collectives and the constraints on when each is issued; and DeAR's closed-
 * form recurrence. ALGORITHMS.md §4 says how each schedule groups and issues.
 *
 * Nothing here plays a timeline: the simulator (weft/sim.h) turns these into
 * tasks, and the runtime issues the same groups with non-blocking MPI
 * collectives. The `auto` schedule is a search by simulation, so it lives in
 * the simulator (wf_sim_dp_iteration). */
#ifndef WEFT_SCHED_H
#define WEFT_SCHED_H

#include "weft/core.h"
#include "weft/cost.h"
#include "weft/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pipeline orderings ------------------------------------------------------
 * Stage `stage` of p, m micro-batches, v model chunks per stage (virtual
 * pipeline stage of chunk c on stage i = c*p + i). GPipe: every forward, then
 * every backward (micro-batches in reverse). 1F1B (PipeDream-Flush, Megatron):
 * p-stage-1 warm-up forwards, then alternately one forward and one backward,
 * then the remaining backwards. Interleaved 1F1B (v > 1, Megatron-LM's
 * schedule, m a multiple of p): forwards walk the chunks in groups of p
 * micro-batches, warm-up (p-stage-1)*2 + (v-1)*p forwards. */
typedef struct {
    int bwd;   /* 0 forward, 1 backward */
    int mb;    /* micro-batch 0..m-1 */
    int chunk; /* model chunk 0..v-1 */
} wf_pipe_op;

/* Fills out[0 .. 2*m*v) (cap entries available) and sets *n = 2*m*v. Bad p, m,
 * v or stage (or m not a multiple of p with v > 1) is WF_INVAL naming it. */
wf_status wf_pipe_order(wf_pipe_kind kind, int p, int m, int v, int stage, wf_pipe_op *out,
                        int cap, int *n);
/* Largest number of (micro-batch, chunk) forwards whose backward has not run
 * yet, over the prefixes of ops: GPipe m*v, 1F1B min(p - stage, m). */
int wf_pipe_peak_inflight(const wf_pipe_op *ops, int n);
const char *wf_sched_pipe_name(wf_pipe_kind k);

/* ---- gradient communication schedules ----------------------------------------- */
typedef struct {
    double bytes;   /* gradient bytes (> 0) */
    double ready_s; /* when backward produces it, from the start of backward */
    int layer;      /* forward layer index, 0 nearest the input */
} wf_grad;

/* Collective time on the data-parallel group: seconds for `bytes` (the full
 * vector's size) of an all-reduce, reduce-scatter or all-gather. */
typedef double (*wf_coll_time_fn)(void *ctx, wf_coll_kind kind, double bytes);

typedef struct {
    wf_coll_time_fn coll;
    void *coll_ctx;
    double alpha_s;      /* collective start-up for mgwfbp; 0 = coll(ALLREDUCE, 0 bytes) */
    double elem_bytes;   /* bytes per gradient element; 0 = 4 (fp32 gradients) */
    double cycle_s;      /* horovod cycle; 0 = 1 ms */
    double credit_bytes; /* bytescheduler credit window; 0 = 2 chunks */
} wf_sched_env;

/* Default thresholds, bytes (WF_SCHED_DDP_BUCKET_BYTES is in plan.h: the
 * cost model's memory reads it too). */
#define WF_SCHED_DDP_FIRST_BYTES (1.0 * 1048576.0)
#define WF_SCHED_HOROVOD_BYTES (128.0 * 1048576.0)
#define WF_SCHED_BYTESCHED_PARAMS (4.0 * 1048576.0) /* chunk, parameters */
#define WF_SCHED_DEAR_BYTES (25.0 * 1e6)
#define WF_SCHED_HOROVOD_CYCLE_S 1e-3

/* A piece of one gradient carried by one collective (the whole tensor unless
 * ByteScheduler chunked it). */
typedef struct {
    int grad;
    double offset_bytes, bytes;
} wf_comm_part;

typedef struct {
    wf_coll_kind kind;      /* ALLREDUCE; REDUCE_SCATTER for dear (its ALLGATHER follows
                             * in the next forward, one per group) */
    double bytes;
    int first_part, nparts; /* parts[first_part .. first_part+nparts) */
    int min_layer, max_layer;
    double ready_s;         /* every part ready (from the given ready times) */
    double issue_s;         /* when the scheduler issues it: ready_s, or the horovod tick */
    int tick;               /* horovod: the cycle it is issued in (issue_s = tick * cycle_s), else -1 */
    int after;              /* op that must be issued before this one (ddp order), -1 none */
    int priority;           /* smaller first on the channel (bytescheduler: min_layer), else 0 */
} wf_comm_op;

typedef struct {
    wf_comm_kind kind;
    double threshold_bytes; /* the one used (bucket, fusion, chunk or group size) */
    double credit_bytes;    /* bytescheduler: its credit window, else 0 */
    double cycle_s;         /* horovod: its cycle, else 0 */
    int nops;               /* in issue order */
    wf_comm_op *ops;
    int nparts;
    wf_comm_part *parts;
} wf_comm_schedule;

/* The schedules `--comm auto` chooses among, in the order ties keep
 * (src/sched/comm.c): with full = 1 every scheduler at a sweep of its
 * threshold (52: wfbp; ddp at 1-100 MiB; horovod at 16-256 MiB;
 * bytescheduler at 1-16 Mi parameters of elem_bytes each; mgwfbp; dear at
 * 1-256 MB, four steps per doubling), what the data-parallel simulator
 * (wf_sim_dp_iteration) and `weft train --comm auto` play; with full = 0 the
 * short list of 10 that the plan simulator plays for each data-parallel
 * group (wfbp; ddp at 1, 25, 100 MiB; horovod and bytescheduler at their
 * defaults; mgwfbp; dear at 5, 25, 100 MB). Writes at most cap schedules
 * (WF_COMM_CANDIDATES_MAX is enough) and returns how many. */
#define WF_COMM_CANDIDATES_MAX 64
int wf_comm_candidates(int full, double elem_bytes, wf_comm_sched *out, int cap);

/* Groups `grads` (parameter order) per the schedule `s` (AUTO is WF_INVAL: it
 * needs the simulator). Memory comes from `a`. */
wf_status wf_sched_build(const wf_comm_sched *s, const wf_grad *grads, int ngrads,
                         const wf_sched_env *env, wf_arena *a, wf_comm_schedule *out);

/* ---- DeAR's recurrence (ALGORITHMS.md §4) --------------------------------------
 * G groups in forward order. r[g]: time the backward finishes group g; rs[g],
 * ag[g]: reduce-scatter and all-gather times; u[g]: optimizer step; f[g]: the
 * next forward of the group's layers; bwd_end: when the backward ends.
 *   rs_end[g] = max(r[g], rs_end[g+1]) + rs[g]     (g = G-1 .. 0, rs_end[G] = 0)
 *   B0 = max(bwd_end, rs_end[0]);  ag_end[0] = B0 + ag[0]
 *   f_g = max(ff_end[g-1], ag_end[g])               (ff_end[-1] = B0)
 *   ag_end[g+1] = f_g + ag[g+1];  ff_end[g] = f_g + u[g] + f[g]
 * Returns ff_end[G-1]: when the next forward ends, from the backward's start.
 * rs_end, ag_end, ff_end may be NULL; otherwise [G] each. */
double wf_sched_dear_recurrence(int G, const double *r, const double *rs, const double *ag,
                                const double *u, const double *f, double bwd_end,
                                double *rs_end, double *ag_end, double *ff_end);

#ifdef __cplusplus
}
#endif
#endif
