/* weft simulator: a discrete-event engine over per-device task graphs
 * (integer-nanosecond clock, ties broken by insertion order, so a graph always
 * gives the same timeline), and the builders that turn a pipeline schedule, a
 * data-parallel iteration or a plan into such a graph. Everything a
 * simulation allocates is freed by wf_sim_free. How the engine orders tasks,
 * counts memory and folds symmetric devices: docs/interfaces.md, "sim.h";
 * what it computes: ALGORITHMS.md §5. */
#ifndef WEFT_SIM_H
#define WEFT_SIM_H

#include "weft/core.h"
#include "weft/cost_records.h"
#include "weft/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int64_t wf_ns; /* simulated time, integer nanoseconds */
#define WF_SIM_MAX_STAGES 256 /* pipeline stages in one wf_sim_pipeline call */
#define WF_NS_PER_S INT64_C(1000000000)

/* Seconds to nanoseconds, rounded to the nearest; negative or NaN gives -1
 * (which wf_sim_add_task rejects). */
wf_ns wf_sim_ns(double seconds);

/* Task categories, for the per-device breakdown and the trace.
 * X(ENUM, "name") */
#define WF_SIM_CAT_LIST(X)      \
    X(FORWARD, "forward")       \
    X(BACKWARD, "backward")     \
    X(RECOMPUTE, "recompute")   \
    X(OPTIMIZER, "optimizer")   \
    X(TP_COMM, "tp_comm")       \
    X(PP_COMM, "pp_comm")       \
    X(DP_COMM, "dp_comm")       \
    X(MARKER, "marker")         \
    X(OTHER, "other")

typedef enum {
#define WF_X(e, name) WF_SIM_CAT_##e,
    WF_SIM_CAT_LIST(WF_X)
#undef WF_X
    WF_SIM_CAT_COUNT
} wf_sim_cat;

const char *wf_sim_cat_name(wf_sim_cat c);

typedef struct wf_sim wf_sim;

wf_status wf_sim_create(wf_sim **out);
void wf_sim_free(wf_sim *s);

/* ---- resources ------------------------------------------------------------ */
/* Adds a device with one compute stream and `nchannels` (>= 1) communication
 * channels; `replicas` (>= 1) real devices it stands for. Returns the device
 * index (0, 1, ...) or a negative status. */
int wf_sim_add_device(wf_sim *s, const char *name, int nchannels, int64_t replicas);
/* Adds a shared resource (a link of one hierarchy level); returns its index. */
int wf_sim_add_link(wf_sim *s, const char *name);
/* Resource ids to name in a task's resource list (-1 when out of range). */
int wf_sim_stream(const wf_sim *s, int dev);
int wf_sim_channel(const wf_sim *s, int dev, int ch);
int wf_sim_link(const wf_sim *s, int link);
/* A credit window of `capacity` units (bytes); returns its index. */
int wf_sim_add_pool(wf_sim *s, const char *name, int64_t capacity);

/* ---- tasks ---------------------------------------------------------------- */
typedef struct {
    const char *name;   /* shown in the trace (copied) */
    wf_sim_cat cat;
    wf_ns dur_ns;       /* >= 0 */
    int nres;           /* resources occupied for the whole duration (0: a */
    const int *res;     /*   timer or marker that needs none) */
    int ndeps;          /* tasks that must finish first (more: wf_sim_add_dep) */
    const int *deps;
    int priority;       /* smaller first among ready tasks of a resource */
    wf_ns not_before_ns;/* earliest start */
    int pool;           /* credit window to pass through, -1 none */
    int64_t pool_amount;
    /* Trace arguments, shown when >= 0. */
    int mb, layer, chunk;
    double bytes;
} wf_sim_task_desc;

/* Defaults: no resources, no deps, priority 0, pool -1, mb/layer/chunk -1, bytes -1. */
void wf_sim_task_desc_init(wf_sim_task_desc *d);
/* Returns the task id (0, 1, ... in the order added) or a negative status. */
int wf_sim_add_task(wf_sim *s, const wf_sim_task_desc *d);
/* `task` starts only after `dep` finished. Either may be added later than the other. */
wf_status wf_sim_add_dep(wf_sim *s, int task, int dep);
int wf_sim_ntasks(const wf_sim *s);

/* ---- memory --------------------------------------------------------------- */
wf_status wf_sim_set_mem_base(wf_sim *s, int dev, int64_t bytes);
/* A buffer of `bytes` on `dev`, allocated when `producer` starts and freed when
 * the last of `users` finishes (when `producer` finishes if nusers == 0). */
wf_status wf_sim_add_buffer(wf_sim *s, int dev, int64_t bytes, int producer, int nusers,
                            const int *users);

/* ---- running and results --------------------------------------------------- */
/* Plays the graph out (once). A dependency cycle, or a task that can never
 * start, is WF_INVAL naming the task. */
wf_status wf_sim_run(wf_sim *s);

wf_ns wf_sim_makespan_ns(const wf_sim *s);
wf_ns wf_sim_task_start_ns(const wf_sim *s, int task);
wf_ns wf_sim_task_end_ns(const wf_sim *s, int task);

typedef struct {
    double busy_s[WF_SIM_CAT_COUNT]; /* summed durations of the tasks on this device, per category */
    double exposed_s[WF_SIM_CAT_COUNT]; /* channel time of each category while the stream is idle */
    double compute_s;       /* time the compute stream is busy */
    double comm_s;          /* time at least one channel is busy */
    double exposed_comm_s;  /* a channel busy while the compute stream is idle */
    double idle_s;          /* neither: makespan - |compute U comm| (includes pipeline bubbles) */
    double compute_idle_s;  /* makespan - compute_s */
    int64_t peak_mem_bytes; /* base + the largest sum of live buffers */
} wf_sim_device_stats;

int wf_sim_ndevices(const wf_sim *s);
wf_status wf_sim_device_stats_of(const wf_sim *s, int dev, wf_sim_device_stats *out);

/* The Chrome trace-event JSON ({"traceEvents":[...]}, ts/dur in µs): one "X"
 * event per task per resource it occupies (pid = device, tid = 0 compute,
 * 1+c channel c; links in a last process), "M" events naming processes and
 * threads, and "C" counter events of each device's memory. */
struct cJSON;
struct cJSON *wf_sim_trace_json(const wf_sim *s);
/* Writes it atomically. */
wf_status wf_sim_write_trace(const wf_sim *s, const char *path);

/* ---- pipelines --------------------------------------------------------------
 * One data-parallel replica's pipeline of p stages (one simulated device each)
 * with m micro-batches and v model chunks per stage, in the order of
 * wf_pipe_order. Virtual stage k = chunk * p + stage runs fwd_ns[k] per
 * micro-batch forward and bwd_ns[k] backward; an activation (or its gradient)
 * crossing from one virtual stage to the next takes p2p_ns on the sender's
 * channel 1 (activations) or 2 (gradients), nothing when p2p_ns is 0 or both
 * are on one device; each
 * forward keeps act_bytes[k] until its backward finishes. */
typedef struct {
    wf_pipe_kind kind;
    int p, m, v;
    const wf_ns *fwd_ns;       /* [p*v] */
    const wf_ns *bwd_ns;       /* [p*v] */
    wf_ns p2p_ns;
    const int64_t *act_bytes;  /* [p*v], NULL = 0 */
} wf_sim_pipe_desc;

typedef struct {
    wf_ns iteration_ns;     /* makespan */
    wf_ns bubble_ns[WF_SIM_MAX_STAGES]; /* per stage: makespan - its compute time */
    int64_t peak_mem_bytes[WF_SIM_MAX_STAGES];
} wf_sim_pipe_result;

/* Builds the pipeline into a fresh simulation (devices 0..p-1 are the stages),
 * runs it, and fills *res. When keep is non-NULL the simulation is returned
 * there (for a trace); the caller frees it. */
wf_status wf_sim_pipeline(const wf_sim_pipe_desc *d, wf_sim_pipe_result *res, wf_sim **keep);

/* ---- one data-parallel iteration under a comm schedule -----------------------
 * A model of `nlayers` layers in forward order on one device (the others of
 * the data-parallel group are symmetric): forward, then backward (layers in
 * reverse), the gradients reduced as the schedule issues them on one channel,
 * the optimizer step, then the next iteration's forward. The iteration time
 * is the steady-state period: from one backward's start to the next one's.
 * Per schedule kind the next forward waits for: everything reduced, then the
 * whole optimizer step (wfbp, ddp, horovod, mgwfbp); per layer its gradients
 * reduced and that layer's step (bytescheduler); per group its all-gather and
 * that group's step, the all-gathers issued as the recurrence of ALGORITHMS.md
 * §4 says (dear). */
typedef struct {
    int nlayers;
    const double *fwd_s;   /* [nlayers] forward time of each layer */
    const double *bwd_s;   /* [nlayers] backward time (input + weight gradients) */
    const double *opt_s;   /* [nlayers] optimizer step of the layer's parameters, NULL = 0 */
    int ngrads;
    const wf_grad *grads;  /* parameter order; bytes and layer used, ready_s computed */
    wf_sched_env env;
} wf_dp_model;

typedef struct {
    wf_comm_sched sched;      /* the schedule played (for auto: the one chosen) */
    double iteration_s;
    double compute_s;         /* forward + backward + optimizer */
    double comm_s;            /* channel busy time */
    double exposed_comm_s;    /* iteration_s - compute_s */
    int ncollectives;         /* collectives per iteration (dear counts both halves) */
    int candidates;           /* auto: schedules simulated */
} wf_dp_result;

/* Simulates one iteration under `s`. For WF_COMM_AUTO every scheduler is tried
 * with a sweep of thresholds and the fastest is returned (ties keep the
 * earlier candidate: wfbp, ddp, horovod, bytescheduler, mgwfbp, dear). When
 * trace_path is non-NULL the played schedule's trace is written there. */
wf_status wf_sim_dp_iteration(const wf_dp_model *m, const wf_comm_sched *s, const char *trace_path,
                              wf_dp_result *out);

/* The data-parallel model of `m` on cluster `c` at micro-batch `mbs` per
 * device: one layer per forward op (a transformer: every op of every layer),
 * its forward/backward times and optimizer traffic from the cost model (the
 * units of wf_sim_plan), one gradient per parameter tensor ready when its
 * op's backward ends, and collectives over `dp` ranks placed on the cluster
 * (wf_coll_time). Arrays and the collective context live in `a`; keep it
 * until done with *out. */
wf_status wf_sim_dp_model_build(const wf_model_config *m, const wf_cluster *c, int64_t mbs, int64_t dp,
                                wf_arena *a, wf_dp_model *out);

/* ---- one training iteration of a plan ----------------------------------------
 * One data-parallel replica of plan p as a task graph (one simulated device
 * per pipeline stage), played to its iteration time and memory peak, with
 * optional joint operator and tensor fusion. What the graph holds and how
 * fusion is chosen: docs/interfaces.md, "sim.h: one training iteration of a
 * plan". */
typedef struct {
    int detail;             /* 0 automatic, 1 per-unit steps, 2 coarse */
    const char *trace_path; /* write the Chrome trace there, NULL for none */
    int fuse;               /* 1: choose operator fusions jointly with the comm
                             * schedule's tensor fusion (DisCo), by simulation */
    int fuse_budget;        /* plans simulated by that search at most (0: 64) */
} wf_sim_plan_opts;

typedef struct {
    wf_breakdown bd;         /* seconds; bubble = neither computing nor communicating */
    double busy_s;           /* stream busy: compute, recompute, sends, optimizer */
    double peak_memory_bytes;
    double dp_comm_s, dp_exposed_s;
} wf_sim_stage_result;

typedef struct {
    double iteration_time_s;
    double samples_per_s;
    double peak_memory_bytes; /* the most loaded stage */
    int fits;
    int critical_stage;       /* the stage with the busiest stream */
    wf_breakdown breakdown;   /* of the critical stage */
    int nstages;
    wf_sim_stage_result stage[WF_SIM_MAX_STAGES];
    wf_comm_sched comm;       /* the data-parallel schedule played (auto: the one chosen) */
    int dp_collectives;       /* on the critical stage, per iteration */
    int candidates;           /* auto: schedules simulated */
    int64_t devices, micro_batches;
    int64_t tasks;            /* of the final graph */
    int coarse;
    double wall_s;            /* time taken to simulate */
    /* With fuse: the operator fusions chosen ("a+b; c+d", truncated; for a
     * transformer they apply to every layer), and the best iteration without
     * operator fusion (its tensor fusion searched the same way). */
    int fusion_candidates, fusions, fusion_evals;
    double unfused_time_s;
    /* The full-overlap ideal (DisCo's): the same iteration with every data-
     * parallel gradient collective free (hidden entirely). */
    double ideal_time_s;
    char fused[1024];
} wf_sim_plan_result;

/* Validates the plan (wf_plan_validate) and simulates one iteration. */
wf_status wf_sim_plan(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, int64_t batch,
                      const wf_sim_plan_opts *opts, wf_sim_plan_result *out);
/* The same task graph for plan p played with the per-op terms of layout
 * descriptor l (cost.h; p's tp and sp are taken from it): each op's products
 * at its local shape, the model-parallel axis's collectives on channel 0
 * where the layouts put them (overlapped with the products of their window
 * as the framework overlaps them), the weights' partial gradients all-
 * reduced over that axis, and for other models the stage cut the descriptor
 * carries. wf_sim_plan plays Megatron's descriptor (wf_cost_layout_megatron):
 * the two differ only where the layouts differ, as wf_estimate_layouts and
 * wf_estimate_plan do. Validated as wf_estimate_layouts validates. No
 * operator fusion (opts->fuse is refused). */
wf_status wf_sim_layouts(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, const wf_cost_layout *l,
                         int64_t batch, const wf_sim_plan_opts *opts, wf_sim_plan_result *out);
/* An op-level plan simulated from its layouts: wf_layout_descriptor
 * (layout.h: the descriptor its SBP signatures give, and the plan its keys
 * give, into *as_plan when not NULL) played by wf_sim_layouts. Takes every
 * plan wf_layout_cost takes. */
wf_status wf_sim_oplevel(const wf_model_config *m, const wf_cluster *c, const wf_layout *ol, int64_t batch,
                         const wf_sim_plan_opts *opts, wf_sim_plan_result *out, wf_plan *as_plan);
/* {"iteration_time_s", "samples_per_s", "peak_memory_bytes", "fits", "breakdown",
 *  "comm": {"schedule", "threshold_bytes", "collectives", "dp_comm_s",
 *  "dp_exposed_s"}, "stages": [...], ...} */
struct cJSON *wf_sim_plan_to_json(const wf_sim_plan_result *r);

/* A per-layer plan of a mixture of experts (layout.h, wf_layout_perlayer)
 * simulated as its price composes (src/sim/sim_perlayer.c): iteration time
 * and peak memory. */
struct wf_layout_perlayer_s;
wf_status wf_sim_perlayer(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                          const struct wf_layout_perlayer_s *pl, double *iteration_time_s, double *peak_memory_bytes);

#ifdef __cplusplus
}
#endif
#endif
