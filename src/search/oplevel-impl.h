/* Private declarations of the op-level search: the decision problem built
 * from a graph on a mesh (oplevel.c), coordinate descent (oplevel_cd.c) and
 * frontier tracking (oplevel_ft.c).
 *
 * The problem: variables (one per tied group of forward ops, one per leaf
 * tensor read by several ops), each with a list of choices (signatures or
 * layouts) and per-choice unary time and memory (already multiplied by the
 * group's instances); pairwise time tables between variables (parallel edges
 * summed, self-edges folded into the unary). A plan's time is the sum of its
 * unary times plus the pairwise entries it selects; its memory the sum of
 * unary memories.
 *
 * The objective time t of each entry is tn + grad_sync_scale x sy: tn the
 * time of one pass (compute, in-op collectives, boxing of activations and
 * their gradients), sy the weight-gradient reductions, kept apart so that a
 * pipeline stage (which reduces once per m micro-batches) can weigh them
 * and report them separately. Memory m = mw + act_multiplier x ma (weights
 * with their gradients and optimizer state; saved activations).
 *
 * A problem may cover a range [lo, hi) of the forward ops (a pipeline
 * stage): tensors produced before lo arrive from the previous stage in
 * whichever layout the consumer wants (the send prices the move), like
 * leaves; one read by several ops of the range is a leaf variable. */
#ifndef WEFT_OPLEVEL_IMPL_H
#define WEFT_OPLEVEL_IMPL_H

#include "weft/search.h"

enum { OL_VAR_OP, OL_VAR_LEAF };

typedef struct {
    int kind;          /* OL_VAR_OP or OL_VAR_LEAF */
    int rep;           /* representative op (OP) or the tensor (LEAF) */
    int mult;          /* tied instances */
    int nch;           /* choices */
    int nall;          /* OP: signatures of rep before the options' filter */
    wf_sbp_sig *sigs;  /* OP: [nch] signatures of rep */
    wf_sbp *lay;       /* LEAF: [nch] layouts */
    int *sidx;         /* OP: [nch] index of each choice in wf_sbp_op_sigs (NULL: the same) */
    double *t;         /* [nch] objective time: tn + grad_sync_scale x sy */
    double *tn;        /* [nch] compute + in-op comm */
    double *sy;        /* [nch] attached weights' gradient reduction (unscaled) */
    double *tc;        /* [nch] of which compute */
    double *tf;        /* [nch] of which the forward pass (what recomputation repeats) */
    double *m;         /* [nch] memory: mw + act_multiplier x ma */
    double *mw;        /* [nch] weights, gradients, optimizer state */
    double *ma;        /* [nch] saved activations (one micro-batch) */
    int dp;            /* the data-parallel choice (start of the descent) */
} ol_var;

typedef struct {
    int u, v;   /* u < v */
    double *t;  /* [nch_u * nch_v], entry cu * nch_v + cv: the objective */
    double *tn; /* the same without weight-gradient reduction; NULL: equal to t */
    double *sy; /* the weight-gradient reduction (unscaled); NULL: none */
} ol_edge;

typedef struct {
    const wf_graph *g;
    const wf_cluster *c;
    wf_mesh mesh;
    wf_search_oplevel_opts opts;
    int nf;            /* forward ops of the graph */
    int lo, hi;        /* the range of forward ops the problem covers */
    int nvar;
    ol_var *var;
    int nedge;
    ol_edge *edge;
    int *adj_start;    /* [nvar + 1] CSR: edges touching each variable */
    int *adj;
    int *var_of_op;    /* [nf] */
    int *var_of_leaf;  /* [ntensors] leaf variables, else -1 */
    wf_arena arena;
} ol_problem;

/* Builds the problem; tie: share decisions across a block's layers. */
wf_status ol_problem_build(const wf_graph *g, const wf_cluster *c, const wf_mesh *m,
                           const wf_search_oplevel_opts *o, int tie, ol_problem *p);
void ol_problem_free(ol_problem *p);

/* Bytes per element of a parameter kept for training: the weight, its
 * gradient (never below the weight's), the optimizer state. */
void ol_state_parts(const ol_problem *p, const wf_tensor *w, double *wb, double *gb, double *ob);

/* Time, compute part and memory of an assignment (a choice per variable). */
void ol_eval(const ol_problem *p, const int *assign, double *time_s, double *compute_s,
             double *memory_bytes);

/* The parts of an assignment's cost. */
typedef struct {
    double t;       /* objective: tn + grad_sync_scale x sy */
    double tn;      /* one pass without weight-gradient reduction */
    double sy;      /* weight-gradient reduction */
    double tc;      /* computation (part of tn) */
    double m;       /* memory (mw + act_multiplier x ma, summed per choice) */
    double mw, ma;  /* weights with state; saved activations of one micro-batch */
} ol_parts;
void ol_eval_parts(const ol_problem *p, const int *assign, ol_parts *out);

/* The memory levers of an assignment (oplevel_levers.c): recomputation
 * and ZeRO, in closed form on the proxy's own parts. */
typedef struct {
    double tf_rc;     /* forward compute of the ops in repeated blocks: what full recomputation
                         repeats in each backward pass */
    double ma_block;  /* of the saved activations (ma), the blocks' */
    double ck;        /* each block instance's input activations, kept as its checkpoint */
    double ma_peak;   /* the largest block instance's saved activations (live again while its
                         backward runs) */
    int layers;       /* block instances in the range */
    double zsave[4];  /* memory ZeRO stage z saves: the replicas' shares of optimizer state (1),
                         and gradients (2), and weights (3), 0 for z = 0 */
    double z12_s;     /* ZeRO 1-2: a reduce-scatter and an all-gather in place of each replicated
                         weight's gradient all-reduce (their difference in price) */
    double z3_s;      /* ZeRO-3's weight all-gathers of one pass (forward and backward), beyond z12_s */
} ol_levers;
wf_status ol_eval_levers(const ol_problem *p, const int *assign, ol_levers *out);

/* The parts of a one-stage plan (pp = 1: one micro-batch in flight) under
 * the levers: rc = 1 full recomputation, z the ZeRO stage (rc = z = 0: the
 * plan itself); *rc_s the recomputation's time. Returns 0 where a lever
 * saves no memory (no repeated blocks to recompute, no replicated state). */
int ol_lever_parts(const ol_parts *q, const ol_levers *lv, int rc, int z, ol_parts *v, double *rc_s);

/* Per op of the range, its share of an assignment's costs: its variable's
 * unary costs divided by the tied instances, plus half of every edge of that
 * variable (edges join two decisions), likewise divided; a shared leaf's
 * costs go to its first reader. Arrays of g->nfwd entries; ops outside the
 * range get 0. Any array may be NULL. A proxy for additive per-op costs
 * (the pipeline DP's layer costs), exact in sum: the shares add up to
 * ol_eval_parts's totals. */
void ol_op_shares(const ol_problem *p, const int *assign, double *tn, double *sy, double *tc,
                  double *mw, double *ma);

/* Per-op choices (indices into wf_sbp_op_sigs; -1 outside the range),
 * signatures (may be NULL) and per-tensor layouts of an assignment. */
void ol_fill_plan(const ol_problem *p, const int *assign, int *choice, wf_sbp_sig *sig,
                  wf_sbp *layout);

/* The assignment of per-op choices (full signature indices) and, for leaf
 * variables, storage layouts: layout[t] where given[t] (given NULL: all
 * given; layout NULL: none), else as the first reader reads it. WF_INVAL
 * naming the op when a choice is outside its signatures, not allowed by the
 * options, or differs between ops tied into one decision (*untied_needed is
 * then set when non-NULL). */
wf_status ol_assign_from_plan(const ol_problem *p, const int *choice, const wf_sbp *layout,
                              const unsigned char *given, int *assign, int *untied_needed);


/* Coordinate descent from assign (updated in place): minimizes time + lambda x
 * memory; when mem_cap >= 0 and the plan fits it, moves keep it fitting.
 * Returns the sweeps run. */
int ol_cd_run(const ol_problem *p, int *assign, double lambda, double mem_cap, int max_sweeps);

/* A frontier candidate from either algorithm. */
typedef struct {
    double t, m;
    int *assign; /* [nvar] */
    int seq;     /* order of arrival: breaks exact ties deterministically */
} ol_plan;

/* Coordinate descent with the lambda schedule: best (fits mem_limit if any
 * plan met does, else the smallest) into best_assign; every local optimum
 * met is appended to *plans (arena-allocated). */
wf_status ol_cd_search(const ol_problem *p, double mem_limit, int *best_assign, ol_plan **plans,
                       int *nplans, int *cap_plans, int *sweeps, wf_arena *a);

/* Frontier tracking: the Pareto set into *plans (appended); anchor gives the
 * choice of a variable that must be fixed when the graph has no elimination
 * with at most two neighbours. */
wf_status ol_ft_search(const ol_problem *p, const int *anchor, ol_plan **plans, int *nplans,
                       int *cap_plans, int *conditioned, wf_arena *a);

/* Sorts plans by (time, memory) and keeps the Pareto set (memory strictly
 * decreasing; of two times equal up to rounding, the smaller memory).
 * Returns the count kept (at the front). */
int ol_plans_prune(ol_plan *plans, int n);

/* Appends a plan (copying assign into the arena). */
wf_status ol_plans_push(const ol_problem *p, ol_plan **plans, int *nplans, int *cap,
                        const int *assign, wf_arena *a);

/* The whole search on a built problem: descent and/or frontier tracking per
 * p->opts.algo; on return plans[0, *nfront) is the Pareto set (time
 * ascending, memory strictly descending) of every plan met. */
wf_status ol_search_run(const ol_problem *p, double mem_limit, ol_plan **plans, int *nplans,
                        int *cap, int *nfront, int *sweeps, int *conditioned, wf_arena *scratch);

#endif
