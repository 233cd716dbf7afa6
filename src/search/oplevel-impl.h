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
 * unary memories. */
#ifndef WEFT_OPLEVEL_IMPL_H
#define WEFT_OPLEVEL_IMPL_H

#include "weft/search.h"

enum { OL_VAR_OP, OL_VAR_LEAF };

typedef struct {
    int kind;          /* OL_VAR_OP or OL_VAR_LEAF */
    int rep;           /* representative op (OP) or the tensor (LEAF) */
    int mult;          /* tied instances */
    int nch;           /* choices */
    wf_sbp_sig *sigs;  /* OP: [nch] signatures of rep */
    wf_sbp *lay;       /* LEAF: [nch] layouts */
    double *t;         /* [nch] time (compute + in-op comm + attached weights' sync) */
    double *tc;        /* [nch] of which compute */
    double *m;         /* [nch] memory */
    int dp;            /* the data-parallel choice (start of the descent) */
} ol_var;

typedef struct {
    int u, v;  /* u < v */
    double *t; /* [nch_u * nch_v], entry cu * nch_v + cv */
} ol_edge;

typedef struct {
    const wf_graph *g;
    const wf_cluster *c;
    wf_mesh mesh;
    wf_oplevel_opts opts;
    int nf;            /* forward ops */
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
                           const wf_oplevel_opts *o, int tie, ol_problem *p);
void ol_problem_free(ol_problem *p);

/* Time, compute part and memory of an assignment (a choice per variable). */
void ol_eval(const ol_problem *p, const int *assign, double *time_s, double *compute_s,
             double *memory_bytes);

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

#endif
