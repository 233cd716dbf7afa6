/* weft search: finding parallel plans (ALGORITHMS.md §3), one section per
 * search, each independent. The op-level search (src/search/oplevel*.c)
 * picks one SBP signature per forward op on a device mesh and returns the
 * time/memory Pareto frontier; its cost terms and its two algorithms
 * (coordinate descent, frontier tracking): docs/interfaces.md, "search.h". */
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
    WF_SEARCH_OPLEVEL_AUTO, /* frontier tracking, then coordinate descent from its best
                        point and from data parallelism; the best of all */
    WF_SEARCH_OPLEVEL_CD,   /* coordinate descent only (the frontier: the plans met on
                        the way, one per lambda) */
    WF_SEARCH_OPLEVEL_FT    /* frontier tracking only */
} wf_search_oplevel_algo;

typedef struct {
    wf_search_oplevel_algo algo;
    int tie_layers;        /* 1: ops at the same (block, position) share a decision */
    int max_frontier;      /* points kept per partial frontier (memory buckets), >= 2 */
    int max_sweeps;        /* coordinate-descent sweeps per lambda, >= 1 */
    int64_t max_elim_work; /* frontier tracking: largest elimination it runs (entries of
                              the new table x choices of the variable x the average
                              frontier sizes combined); beyond it, or
                              where no variable has at most two neighbours, it fixes a
                              variable to the descent's choice instead */
    double optimizer_bytes_per_param; /* Adam state per parameter; 0: 12 for fp16/bf16
                                         weights (fp32 master, m, v), 8 for fp32 (m, v) */
    int seq_dim;           /* -1 (default): no restriction. k >= 0: the dim of the sequence
                              (tokens) in activations laid out [B, S, ...] (k = 1 in the zoo's
                              transformer graphs); ops other than matmul, batch_matmul and
                              linear take no signature splitting dim k of a non-parameter
                              operand of rank >= k + 2, or of an integer one (ids, labels
                              [B, S]) of rank >= k + 1: Megatron without sequence parallelism */
    int outer_dp;          /* 1: on a mesh of two axes every op takes the data-parallel layout on
                              the outer axis (non-parameter operands split by the batch, a scalar
                              output partial, weights replicated) where it has one: the layouts
                              the one cost model composes (wf_layout_cost) */
    int op_begin, op_end;  /* the forward ops searched, [op_begin, op_end); 0, 0: all of them.
                              A tensor produced before op_begin arrives (from the previous
                              pipeline stage) in whichever layout its reader takes; choices of
                              the other ops are -1 in results and ignored by evaluation */
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

/* ==== outer search (src/search/outer.c; owner: planner) ========================
 * The exhaustive search over whole-model plans (wf_plan): dp x tp x pp = the
 * devices, micro-batch size, interleaving (vpp), recomputation, ZeRO stage,
 * sequence parallelism and data-parallel overlap, every candidate scored by
 * wf_estimate_plan (the code behind `weft estimate`). Transformers take every
 * key; other models take dp x pp (tp = vpp = 1, recompute none or full), their
 * stages split by the estimate. Prunings keep the best (docs/planner.md):
 * divisibility first; a (tp, pp, zero) group whose weights, gradients and
 * optimizer state alone exceed the budget is skipped whole; memory does not
 * decrease with the micro-batch, so the first misfit ends that line; ZeRO
 * over one data-parallel rank and the GPipe schedule (1F1B's bubble, more
 * activations in flight) are dominated. The result: the top K plans that fit
 * (time, then memory, then the plan string) and the time/memory Pareto
 * frontier of the plans that fit. */

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
    int uniform_recompute;   /* 1: recompute none, selective or full for every layer only; 0 (the
                                default): also Megatron's block method where full recomputation
                                fits and none does not, and per-stage recomputation for the plans
                                of the top (docs/planner.md) */
    int even_stages;         /* 1: pipeline stages split the layers evenly only; 0 (the default):
                                also uneven stages (stages=) for the best pipelined plans, where
                                the embedding or the head makes an end stage slow
                                (docs/planner.md) */
    /* A filter on the plans searched (may be NULL: every plan): only the candidates it returns 1
       for are counted in the space, scored, ranked and put on the frontier, so the top K, the
       frontier and min_memory all hold plans it accepts (`weft plan --emit X`: the plans framework
       X runs, wf_export_accepts). It must depend on the plan alone. */
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

/* Searches the plans of model m on cluster c for the global batch. On success
 * r->top[0] is the fastest plan that fits. When candidates exist but none fits,
 * the status is WF_NOFIT with a message giving the smallest memory found and
 * the budget (r->min_memory holds that plan); when no plan divides the model,
 * the devices and the batch, WF_INVAL naming them. Free r with
 * wf_search_outer_result_free (also after an error). opts NULL means the defaults. */
wf_status wf_search_outer(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                          const wf_search_outer_opts *opts, wf_search_outer_result *r);
void wf_search_outer_result_free(wf_search_outer_result *r);

/* The device counts `--devices-range lo-hi` explores on cluster c: every count
 * in [lo, hi] that is a whole number of nodes, or a divisor of one node (a
 * partial node), and no more than the cluster has; ascending. Writes up to cap
 * counts into out and returns how many there are in all. */
int wf_search_outer_device_counts(const wf_cluster *c, int64_t lo, int64_t hi, int64_t *out, int cap);

/* ==== pipeline-stage DP (src/search/pipeline_dp.c; owner: planner) ==============
 * Alpa's inter-operator pass on a chain of n layers cut into `nstages`
 * contiguous stages run as a 1F1B pipeline of `micro` micro-batches:
 * minimize sum over stages of T_s + (micro - 1) x max_s T_s, where T_s is the
 * sum of the stage's layer times (forward + backward of one micro-batch) plus,
 * for every stage but the last, send_s[j] of its last layer j (moving the
 * boundary activation forward and its gradient back; send_s may be NULL),
 * subject to each stage's memory (its layers' weight bytes + their activation
 * bytes per micro-batch x the micro-batches stage s holds in 1F1B,
 * min(nstages - s, micro)) within mem_limit_bytes (<= 0: unlimited; weight
 * and activation arrays may be NULL). It enumerates the slowest-stage bound
 * t_max over the distinct stage times, runs a DP minimizing the sum under that
 * bound, and stops once a lower bound on the rest, max(least unbounded sum,
 * t_max) + (micro - 1) x t_max, reaches the best total. */
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

/* ==== op-level planner (src/search/opplan.c; owner: planner2) =====================
 * `weft plan --op-level`, and `weft plan` for models the outer search does not
 * cover (docs/planner.md): for any graph, the op-level search on every mesh
 * of the devices, and Alpa's inter-operator pass on top of it:
 *
 *   pp = 1: one op-level search of the whole graph per mesh (wf_mesh_candidates
 *           of the devices, or the given mesh); the iteration is one pass.
 *   pp > 1 (every divisor of the devices): m micro-batches of batch/m samples
 *           (m in {pp, 2 pp, 4 pp} dividing the batch, else the largest divisor
 *           of the batch up to 4 pp); each stage runs on a mesh of devices/pp
 *           devices (every candidate mesh of that size). The stage split comes
 *           from wf_pipeline_dp over per-op costs (the proxy: one op-level search
 *           of the whole graph on the stage mesh, with activations counted
 *           min(pp, m) times, weight-gradient reductions 1/m times and the memory
 *           limit x pp, its costs shared out per op, ol_op_shares; above 128 ops,
 *           consecutive ops are merged into 128 units of about equal time), plus
 *           the send of the tensors crossing each cut. Each stage of the split is
 *           then searched on its own (its op range, its micro-batches in flight
 *           min(pp - s, m), the memory limit), and the plan is costed as
 *             T_s = stage s's pass (forward + backward of one micro-batch, without
 *                   the weight-gradient reduction) + its boundary send (s < pp-1),
 *             time = sum_s T_s + (m - 1) max_s T_s + max_s G_s,
 *           G_s its weight-gradient reduction (once per iteration, the stages in
 *           parallel); memory = the most loaded stage (weights + in-flight
 *           activations). With pp = 1 this is the op-level search's own time.
 *
 * That model (the op-level model) proposes layouts. Every plan proposed (each
 * candidate's, every other fitting point of a single-stage frontier, data
 * parallelism on a one-axis mesh) is priced by the one cost model
 * (wf_layout_cost: what `weft estimate` of its file reports, on one
 * wf_layout_coster per mesh), the fastest of three distinct meshes are
 * descended op by op on it (the fastest result then kicked: descent_kicks),
 * and the ranking, the frontier and the best are on
 * it: the fastest that fits, plans the one model prices before those it does
 * not take (priced by the op-level model, as `weft estimate` then prices them),
 * ties to less memory, then to the plan string (docs/planner.md, "Ranking: one
 * price"). So any plan returned, written to a file and estimated, gives its
 * figures (tests/test_oneprice.c). The stages and per-op shares are the
 * op-level model's (wf_search_opplan_evaluate, as `weft plan --verify`
 * computes them). */

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
    /* 1: the figures above (time, breakdown, memory, fits, throughput) are
     * the one cost model's (wf_layout_cost: what `weft estimate` of the
     * plan reports), the stages and per-op shares the proxy's; 0: the proxy
     * search's own (the one model does not take these layouts) */
    int one_model;
    double proxy_time_s;      /* the proxy search's iteration time of the plan */
    /* and, when one_model, the proxy's figures the one model's replaced */
    double proxy_compute_s, proxy_comm_s, proxy_pp_comm_s, proxy_bubble_s, proxy_grad_sync_s;
    double proxy_memory_bytes;
    int proxy_fits;
    /* The plan's memory levers (TensorOpt's): recompute 1 = full
     * recomputation, recompute_s its time (part of compute_s); zero the ZeRO
     * stage (0-3). The plan string carries them (",recompute=full,zero=2"),
     * the plan's keys too ("recompute=full,zero=2"), and the one cost model
     * prices them. The ranking and the best have none while a plan without
     * them fits (docs/planner.md, "Ranking: one price"). */
    int recompute, zero;
    double recompute_s;
    /* The point's plan (wf_search_opplan's top and pareto: owned by the
     * result; NULL elsewhere): written to a file and estimated, it gives the
     * figures above (tests/test_oneprice.c). */
    const wf_layout *layouts;
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

/* Plans model m on cluster c for the global batch. WF_NOFIT (message: the
 * smallest memory found and the budget) when nothing fits, r->best then the
 * smallest; WF_INVAL when no candidate divides (mesh, pp, batch). Free r with
 * wf_search_opplan_result_free, also after an error. opts NULL: the defaults. */
wf_status wf_search_opplan(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                           const wf_search_opplan_opts *opts, wf_search_opplan_result *r);
void wf_search_opplan_result_free(wf_search_opplan_result *r);

/* ==== one search space (src/search/unified.c) ======================================
 * Every candidate is an op-level plan ranked by the one cost model: the
 * outer search's best (Megatron's layouts, costed by the closed form, which
 * is the one model on Megatron's descriptor) and the op-level search's
 * layouts (wf_search_opplan, with and without pipelining) costed by
 * wf_layout_cost under every recomputation and ZeRO stage. The best
 * is the fastest that fits the budget (the device's memory unless given),
 * never slower than the outer search's. */
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
} wf_search_unified_result;

wf_status wf_search_unified(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                            const wf_search_unified_opts *opts, wf_search_unified_result *r);
void wf_search_unified_result_free(wf_search_unified_result *r);

/* `weft plan --verify`: evaluates an op-level plan (wf_search_opplan_evaluate,
 * opts->oplevel for the model options, opts->max_memory_bytes for the
 * budget) into r as the search would report it: r->best, a copy of the plan
 * in r->best_plan, the graph and the per-op shares; top = [best], no
 * frontier. A plan that does not fit is not an error (r->best.fits = 0). */
wf_status wf_search_opplan_verify(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                           const wf_layout *plan, const wf_search_opplan_opts *opts,
                           wf_search_opplan_result *r);

/* The chain the planner's stage DP (wf_pipeline_dp) runs on, for graph g (built
 * for one micro-batch) in pp stages on stage mesh `mesh` with m micro-batches:
 * per forward op its proxy time (its share of one micro-batch's pass plus
 * 1/m of its weight-gradient reduction), the send if a stage ended after it,
 * its weight bytes (with gradients and optimizer state) and its activation
 * bytes of one micro-batch (ol_op_shares of the proxy search described
 * above). Arrays of g->nfwd entries; opts may be NULL. */
wf_status wf_search_opplan_chain(const wf_graph *g, const wf_cluster *c, const wf_mesh *mesh, int pp,
                          int64_t m, double mem_limit_bytes, const wf_search_oplevel_opts *opts,
                          double *op_time_s, double *send_s, double *weight_bytes,
                          double *act_bytes);

/* Checks an op-level plan against model m, cluster c and the batch, and costs
 * it as the planner does. Every check names what failed: micro_batches divides
 * the batch; the mesh parses on the cluster and mesh x pp devices exist; every
 * op named is a forward op of the model's graph; every forward op has a
 * signature, legal for it on the mesh (wf_sbp_sig_find); the stages name
 * increasing ops starting at the first; storage layouts are layouts the
 * tensor can be kept in. mem_limit_bytes <= 0: the device's less the reserve.
 * opts (may be NULL) gives the per-stage model options (tie_layers,
 * optimizer_bytes_per_param). On success *out holds the numbers; its stages
 * are allocated from arena. WF_INVAL/WF_FORMAT with the reason otherwise. */
wf_status wf_search_opplan_evaluate(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                                   const wf_layout *plan, double mem_limit_bytes,
                                   const wf_search_oplevel_opts *opts, wf_arena *arena,
                                   wf_search_opplan_point *out);

/* A point's fields as JSON (plan, iteration_time_s, samples_per_s,
 * memory_per_device_bytes, fits, breakdown{compute, comm, pp_comm, bubble,
 * grad_sync}, mesh, pp, micro_batches, devices, model_flops_per_iteration,
 * tflops_per_device, mfu, stages[{first_op, end_op, ...}] with op names from
 * g when g is given). */
struct cJSON *wf_search_opplan_point_to_json(const wf_search_opplan_point *pt, const wf_graph *g);

#ifdef __cplusplus
}
#endif
#endif
