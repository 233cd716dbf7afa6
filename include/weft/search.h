/* weft search: the searches over parallel plans, one wf_search_<name>
 * family per search (opts, result, point). Each returns WF_OK, WF_NOFIT
 * (nothing fits: the result holds the smallest plan) or WF_INVAL/WF_FORMAT
 * with a one-line message; results are freed by their _free, also after an
 * error. Narrative: docs/interfaces.md, "search.h"; docs/planner.md. */
#ifndef WEFT_SEARCH_H
#define WEFT_SEARCH_H

#include "weft/cluster.h"
#include "weft/core.h"
#include "weft/graph.h"
#include "weft/sbp.h"
#include "weft/cost.h"
#include "weft/layout.h"
#include "weft/models.h"
#include "weft/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- op-level search ------------------------------------------------------- */

typedef enum {
    WF_SEARCH_OPLEVEL_AUTO, /* frontier tracking, then coordinate descent; the best */
    WF_SEARCH_OPLEVEL_CD,   /* coordinate descent only */
    WF_SEARCH_OPLEVEL_FT    /* frontier tracking only */
} wf_search_oplevel_algo;

typedef struct {
    wf_search_oplevel_algo algo;
    int tie_layers;        /* 1: ops at the same (block, position) of layers of one kind (the same ops) share a decision */
    int max_frontier;      /* points kept per partial frontier (memory buckets), >= 2 */
    int max_sweeps;        /* coordinate-descent sweeps per lambda, >= 1 */
    int64_t max_elim_work; /* frontier tracking: the largest elimination it runs */
    double optimizer_bytes_per_param; /* Adam state per parameter; 0: 12 for fp16/bf16
                                         weights (fp32 master, m, v), 8 for fp32 (m, v) */
    int seq_dim;           /* -1 (default): no restriction; k >= 0: the sequence dim no op
                              but a product may split (Megatron without sequence parallelism) */
    int outer_dp;          /* 1: data-parallel layouts on the outer axis of a 2-axis mesh */
    int op_begin, op_end;  /* the forward ops searched, [op_begin, op_end); 0, 0: all;
                              choices of the others are -1 */
    double act_multiplier; /* saved activations count this many times in memory (the
                              micro-batches a 1F1B stage keeps in flight); >= 1, default 1 */
    double grad_sync_scale;/* weight-gradient reductions count x this in the time minimized
                              (1/m on a pipeline stage, which reduces once per m micro-batches);
                              [0, 1], default 1 */
} wf_search_oplevel_opts;

void wf_search_oplevel_opts_default(wf_search_oplevel_opts *o);

/* A plan on the frontier. */
typedef struct {
    double time_s;
    double compute_s;
    double memory_bytes;
    int *choice;    /* [nops] per forward op: index into wf_sbp_op_sigs(g, op, mesh) */
    wf_sbp *layout; /* [ntensors] as in wf_search_oplevel_result */
} wf_search_oplevel_point;

typedef struct {
    /* The plan: the fastest that fits the memory limit, else the smallest. */
    int nops;               /* forward ops searched (g->nfwd) */
    int ntensors;
    int *choice;            /* [nops] signature index per op */
    wf_sbp_sig *sig;        /* [nops] the signature per op */
    wf_sbp *layout;         /* [ntensors] each tensor's layout as produced (outputs: the
                               producer's signature; leaves: as stored) */
    double time_s;          /* one iteration */
    double compute_s;       /* of which computation */
    double comm_s;          /* of which communication (boxing, gradients, in-op) */
    double memory_bytes;    /* per device */
    double memory_limit_bytes;
    int fits;
    /* The time/memory frontier: time ascending, memory strictly descending. */
    int nfrontier;
    wf_search_oplevel_point *frontier;
    /* Statistics. */
    int ndecisions;         /* decision variables after layer tying */
    int64_t nchoices;       /* sum of their signature counts */
    int sweeps;             /* coordinate-descent sweeps run */
    int conditioned;        /* variables frontier tracking fixed (graph not series-parallel) */
    double search_time_s;   /* wall clock */
    wf_arena arena;         /* owns every array above */
} wf_search_oplevel_result;

/* Searches the forward ops of g on mesh m of cluster c. mem_limit_bytes <= 0
 * means the device's memory less the framework's reserve. opts NULL means the
 * defaults. On success r holds the plan and the frontier; when no plan fits,
 * r holds the smallest plan and the status is WF_NOFIT with a message giving
 * the smallest memory found and the limit. Free r with wf_search_oplevel_result_free
 * (also after an error). */
wf_status wf_search_oplevel(const wf_graph *g, const wf_cluster *c, const wf_mesh *m,
                            double mem_limit_bytes, const wf_search_oplevel_opts *opts,
                            wf_search_oplevel_result *r);
void wf_search_oplevel_result_free(wf_search_oplevel_result *r);

/* Makes frontier point i the result's plan (choice, sig, layout, time, memory, fits). */
wf_status wf_search_oplevel_result_select(wf_search_oplevel_result *r, const wf_graph *g, const wf_mesh *m,
                                          int i);

/* Costs of a given plan (one signature index per forward op, layers untied):
 * the same model the search minimizes. layout (per tensor, may be NULL) gives
 * the storage of leaves read by several ops; NULL stores each as its first
 * reader reads it. Any of the outputs may be NULL. */
wf_status wf_search_oplevel_evaluate(const wf_graph *g, const wf_cluster *c, const wf_mesh *m,
                                     const wf_search_oplevel_opts *opts, const int *choice,
                                     const wf_sbp *layout, double *time_s, double *compute_s,
                                     double *memory_bytes);

/* ==== outer search (src/search/outer.c) ==================================== */

typedef struct {
    int top_k;               /* plans kept in the ranking, >= 1 */
    double max_memory_bytes; /* memory budget per device; <= 0: the device's (the estimate's fits) */
    int64_t devices;         /* devices the plans use (dp x tp x pp); 0: all of the cluster's */
    int tp_cross_node;       /* 1: tp may exceed one node; 0: tp divides the devices per node */
    int exhaustive;          /* 1: no pruning and no dominated-point skipping (tests compare) */
    int search_comm;         /* 1: also try every dp gradient schedule (ddp, wfbp, horovod,
                                bytescheduler, mgwfbp, dear) when dp > 1 and overlapped */
    wf_sw sw;                /* framework profile of every plan (default megatron-core) */
    int fp8;                 /* 1: every plan runs its products in FP8 */
    wf_attn attn;            /* attention kernels of every plan (AUTO: the profile's) */
    int cp;                  /* context parallelism: 0 searches it (1, and for sequences of
                                8192 tokens or more 2, 4, 8, 16 where the profile has it),
                                >= 1 fixes it */
    int uniform_recompute;   /* 1: one recomputation for every layer only; 0 (default): also
                                block and per-stage recomputation (docs/planner.md) */
    int even_stages;         /* 1: even pipeline stages only; 0 (default): also uneven stages for
                                the best pipelined plans (docs/planner.md) */
    /* Only plans accept returns 1 for are searched (NULL: every plan); a function of the plan alone. */
    int (*accept)(const wf_plan *p, void *user);
    void *accept_user;
    /* Called after each (tp, pp, zero) group with the fraction of the space done; may be NULL. */
    void (*progress)(double fraction, void *user);
    void *progress_user;
} wf_search_outer_opts;

void wf_search_outer_opts_default(wf_search_outer_opts *o);

typedef struct {
    wf_plan plan;
    wf_estimate est;
} wf_search_outer_point;

typedef struct {
    int64_t devices;           /* devices the plans use */
    double budget_bytes;       /* the budget applied (max_memory_bytes, or the device's memory) */
    int ntop;
    wf_search_outer_point *top;       /* [ntop] fastest first */
    int npareto;
    wf_search_outer_point *pareto;    /* [npareto] time ascending, memory strictly descending */
    int64_t space;             /* candidates passing divisibility (the space searched) */
    int64_t searched;          /* candidates scored by wf_estimate_plan */
    int64_t pruned;            /* space - searched: skipped by the bounds and dominance */
    int64_t fitting;           /* scored candidates that fit */
    int has_min;               /* 1 when any candidate was scored */
    wf_search_outer_point min_memory; /* the scored candidate with the least memory (fitting or not) */
    double search_time_s;      /* wall clock */
} wf_search_outer_result;

/* Searches the whole-model plans of model m on cluster c for the global
 * batch (opts NULL: defaults). WF_OK: r->top[0] the fastest that fits;
 * WF_NOFIT: none fits (r->min_memory the smallest); WF_INVAL: no plan
 * divides model, devices and batch. Free r with wf_search_outer_result_free. */
wf_status wf_search_outer(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                          const wf_search_outer_opts *opts, wf_search_outer_result *r);
void wf_search_outer_result_free(wf_search_outer_result *r);

/* The device counts `--devices-range lo-hi` explores on c (whole nodes or
 * divisors of one node, within the cluster), ascending: up to cap written to
 * out; returns how many there are in all. */
int wf_search_outer_device_counts(const wf_cluster *c, int64_t lo, int64_t hi, int64_t *out, int cap);

/* ==== pipeline-stage DP (src/search/pipeline_dp.c) =============================
 * Alpa's inter-operator pass: a chain of n layers cut into nstages contiguous
 * 1F1B stages of `micro` micro-batches, minimizing the pipeline's time within
 * the memory limit (<= 0: unlimited). send_s, weight_bytes, act_bytes may be
 * NULL. */
#define WF_PIPELINE_MAX_STAGES 256

typedef struct {
    int nstages;
    int first[WF_PIPELINE_MAX_STAGES + 1]; /* [nstages + 1]: stage s holds layers [first[s], first[s+1]) */
    double time_s;           /* sum + (micro - 1) x slowest */
    double max_stage_s;      /* the slowest stage */
    double max_memory_bytes; /* the most loaded stage */
} wf_stage_plan;

/* WF_INVAL for nstages outside [1, min(n, WF_PIPELINE_MAX_STAGES)] or a
 * negative cost; WF_NOFIT when no split fits the memory limit. */
wf_status wf_pipeline_dp(int n, const double *layer_time_s, const double *send_s,
                         const double *weight_bytes, const double *act_bytes, int nstages,
                         int64_t micro, double mem_limit_bytes, wf_stage_plan *out);

/* ==== op-level planner (src/search/opplan.c) ====================================
 * `weft plan --op-level`, and `weft plan` for models the outer search does
 * not cover: the op-level search on every mesh, with pipelining, every plan
 * priced by the one cost model (wf_layout_cost). */
typedef struct {
    wf_search_oplevel_opts oplevel;  /* the per-stage search (algo, tying, seq_dim, ...); the op range,
                                 act_multiplier and grad_sync_scale are set per stage */
    const char *mesh;         /* NULL: every candidate mesh; else the stage mesh ("8x8"), and
                                 pp = devices / its devices */
    int64_t devices;          /* 0: all of the cluster's */
    int pp;                   /* 0: 1 and every divisor of the devices; else only this */
    double max_memory_bytes;  /* <= 0: the device's memory less the framework's reserve */
    int top_k;                /* candidates kept in the ranking, >= 1 */
    int no_point_layouts;     /* 1: the top's and the frontier's points carry no layouts
                                 (wf_search_opplan_point.layouts NULL but the best's): a caller that
                                 reads only the best saves writing each point's plan */
    void (*progress)(double fraction, void *user); /* may be NULL */
    void *progress_user;
    int descent_starts;       /* candidates descended on the one cost model: 0 the fastest 3 of
                                 distinct meshes; -1 every single-stage candidate (a search that
                                 proposes on the one model from each proxy proposal) */
    int64_t descent_work;     /* the descents' budget in ops costed: 0 the default (200000);
                                 -1 none */
    int descent_kicks;        /* kicks from the fastest descended plan (1 to 3 ops drawn at
                                 random, descended again, kept when better; on a budget of their
                                 own): 0 the default (8), -1 none, else that many */
} wf_search_opplan_opts;

void wf_search_opplan_opts_default(wf_search_opplan_opts *o);

typedef struct {
    int first_op, end_op;     /* the stage's forward ops [first_op, end_op) */
    int inflight;             /* micro-batches whose activations it keeps: min(pp - s, m) */
    double time_s;            /* T_s: one micro-batch's pass + its boundary send */
    double compute_s;         /* of which computation */
    double send_s;            /* of which the boundary send (0 for the last stage) */
    double grad_sync_s;       /* G_s: its weight-gradient reduction, once per iteration */
    double memory_bytes;      /* weights with state + inflight x activations */
} wf_search_opplan_stage;

typedef struct {
    char plan[128];           /* "mesh=8x8,pp=1,micro_batches=1" */
    char mesh[64];
    int pp;
    int64_t micro_batches;
    int64_t devices;          /* mesh devices x pp */
    double iteration_time_s;
    double samples_per_s;
    /* breakdown, adding up to the iteration time: m x the slowest stage's
       computation, communication (boxing, in-op collectives) and boundary
       send; the fill and drain of the pipeline; the slowest weight-gradient
       reduction */
    double compute_s, comm_s, pp_comm_s, bubble_s, grad_sync_s;
    double memory_per_device_bytes; /* the most loaded stage */
    int fits;                 /* every stage within the memory limit */
    double model_flops_per_iteration; /* forward + backward FLOPs of the graph x m */
    double tflops_per_device;
    double mfu;               /* against the device's matrix peak for the graph's dtype */
    int nstages;
    wf_search_opplan_stage *stages;  /* [nstages] (owned by the result or the caller's arena) */
    int one_model;            /* 1: the figures above are the one cost model's (wf_layout_cost);
                                 0: the proxy search's own */
    double proxy_time_s;      /* the proxy search's iteration time of the plan */
    /* and, when one_model, the proxy's figures the one model's replaced */
    double proxy_compute_s, proxy_comm_s, proxy_pp_comm_s, proxy_bubble_s, proxy_grad_sync_s;
    double proxy_memory_bytes;
    int proxy_fits;
    int recompute, zero;      /* memory levers: 1 = full recomputation; the ZeRO stage (0-3) */
    double recompute_s;       /* recomputation's time (part of compute_s) */
    const wf_layout *layouts; /* the point's plan (top and pareto: owned by the result; else NULL) */
} wf_search_opplan_point;

typedef struct {
    int has_best;
    wf_search_opplan_point best;     /* the fastest plan that fits (else the smallest found) */
    wf_layout best_plan;/* its layouts */
    wf_graph graph;           /* the graph of its micro-batch (op names, kinds) */
    int *op_stage;            /* [graph.nfwd] the stage of each op */
    double *op_compute_s;     /* [graph.nfwd] per op: its share of computation and */
    double *op_comm_s;        /* communication (in-op, boxing halves, weight gradients) per
                                 micro-batch (weight gradients per iteration) */
    int ntop;
    wf_search_opplan_point *top;     /* [ntop] fastest first, plans that fit */
    int npareto;
    wf_search_opplan_point *pareto;  /* time ascending, memory strictly descending, plans that fit
                                 (pp = 1 frontier points of every mesh, pipelined plans) */
    int64_t devices;
    double budget_bytes;
    int64_t searched;         /* candidates (mesh, pp, micro-batches) costed */
    int64_t searches;         /* op-level searches run (whole graphs and stages) */
    double search_time_s;
    wf_arena arena;
    wf_layout *point_plans; /* [npoint_plans] the top's and the frontier's layouts */
    int npoint_plans;
    int has_resolved;         /* 1: resolved holds best_plan resolved once (wf_layout_index): what
                                 evaluated and priced the best; a reader takes it from here (or
                                 moves it out, clearing has_resolved) rather than parse again */
    wf_layout_plan resolved;
} wf_search_opplan_result;

/* Plans model m on cluster c for the global batch (opts NULL: defaults).
 * WF_NOFIT: nothing fits (r->best the smallest); WF_INVAL: no candidate
 * divides (mesh, pp, batch). Free r with wf_search_opplan_result_free. */
wf_status wf_search_opplan(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                           const wf_search_opplan_opts *opts, wf_search_opplan_result *r);
void wf_search_opplan_result_free(wf_search_opplan_result *r);

/* ==== one search space (src/search/unified.c) ====================================
 * The outer search's best and the op-level planner's layouts, all ranked by
 * the one cost model; the best is never slower than the outer search's. */
typedef struct {
    int64_t devices;          /* 0: all of the cluster's */
    double max_memory_bytes;  /* <= 0: the device's memory */
    int seq_dim;              /* the op-level search's seq_dim (-1: no restriction) */
} wf_search_unified_opts;

typedef struct {
    int has_best;
    wf_layout plan;     /* the best plan's layouts and keys */
    wf_estimate est;          /* its estimate (the one cost model) */
    wf_plan as_plan;          /* the plan composed (dp, tp, pp, mbs, sp from the layouts) */
    int megatron;             /* 1: Megatron's layouts (the outer search's best); 0: the op-level
                                 search's */
    int lowered;              /* 1: plan holds the best's layouts; 0: the best (Megatron's, as_plan)
                                 has no op-level form yet (context parallelism) */
    int has_outer;
    double outer_best_s;      /* the outer search's best alone */
    int64_t costed;           /* op-level candidates the one model costed */
    int64_t searches;         /* op-level searches run */
    double budget_bytes;
    double search_time_s;
    /* A mixture of experts with dense layers: per-layer plans (layout.h,
     * wf_layout_perlayer) costed, and whether the best is one. */
    int64_t perlayer_costed;
    int perlayer;             /* 1: the best's dense layers run other layouts than its expert layers */
    double perlayer_whole_s;  /* the best plan's time among the others (whole-model or op-level) */
    double perlayer_best_s;   /* the fastest per-layer plan that fits (0: none), best or not: */
    double perlayer_best_mem_bytes;
    wf_plan perlayer_moe, perlayer_dense; /* the plans whose lowerings its expert layers and its dense
                                             layers run (wf_layout_perlayer_lower; the dense layers' dp,
                                             tp, sp: wf_layout_perlayer_dense_plan) */
    char perlayer_detail[256]; /* its layer kinds' layouts (wf_layout_perlayer_describe) */
} wf_search_unified_result;

/* The per-layer plans alone (what wf_search_unified adds for a mixture of
 * experts with dense layers: each of the outer search's fastest one-stage
 * plans on a mesh of one or two axes keeps its expert layers, its dense
 * layers take each other dense layout of that mesh; the one cost model
 * prices each): r's perlayer_* fields, and r's best the fastest that fits
 * (perlayer 1), or none (has_best 0: no dense layers, or none fits). Free
 * r with wf_search_unified_result_free. */
wf_status wf_search_perlayer(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                             const wf_search_unified_opts *opts, wf_search_unified_result *r);
/* WF_NOFIT when nothing fits the budget; free r with
 * wf_search_unified_result_free, also after an error. */
wf_status wf_search_unified(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                            const wf_search_unified_opts *opts, wf_search_unified_result *r);
void wf_search_unified_result_free(wf_search_unified_result *r);

/* `weft plan --verify`: plan evaluated (wf_search_opplan_evaluate) into r as
 * the search would report it (top = [best], no frontier); a plan that does
 * not fit is not an error (r->best.fits = 0). Free r as a search result. */
wf_status wf_search_opplan_verify(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                                  const wf_layout *plan, const wf_search_opplan_opts *opts,
                                  wf_search_opplan_result *r);

/* The stage DP's chain for graph g (one micro-batch) in pp stages of mesh
 * `mesh` with m micro-batches: per forward op its proxy time, send, weight
 * and activation bytes (arrays of g->nfwd; opts may be NULL). */
wf_status wf_search_opplan_chain(const wf_graph *g, const wf_cluster *c, const wf_mesh *mesh, int pp,
                                 int64_t m, double mem_limit_bytes, const wf_search_oplevel_opts *opts,
                                 double *op_time_s, double *send_s, double *weight_bytes,
                                 double *act_bytes);

/* Checks op-level plan `plan` against model m, cluster c and the batch and
 * costs it as the planner does (mem_limit_bytes <= 0: the device's less the
 * reserve; opts may be NULL). WF_INVAL/WF_FORMAT naming the failed check;
 * out's stages are allocated from arena. */
wf_status wf_search_opplan_evaluate(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                                    const wf_layout *plan, double mem_limit_bytes,
                                    const wf_search_oplevel_opts *opts, wf_arena *arena,
                                    wf_search_opplan_point *out);

/* A point as a new JSON object (plan, times, breakdown, memory, stages; op
 * names from g when g is not NULL): docs/interfaces.md lists the fields. */
struct cJSON *wf_search_opplan_point_to_json(const wf_search_opplan_point *pt, const wf_graph *g);

#ifdef __cplusplus
}
#endif
#endif
