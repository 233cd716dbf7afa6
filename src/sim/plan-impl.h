/* Private declarations of the plan simulation: a model on a plan reduced to
 * "units" (a transformer's embedding, its tied layer and its head; or one op
 * of another model), each with the steps one micro-batch runs on one device
 * for its forward, backward and recomputation, and the pipeline layout of
 * unit instances over virtual stages. profile.c builds it from the graph IR
 * and the cost model's primitives; plan_tasks.c turns it into a task graph. */
#ifndef WEFT_SIM_PLAN_IMPL_H
#define WEFT_SIM_PLAN_IMPL_H

#include "weft/sim.h"

/* A step of a unit on one device:
 *   COMPUTE  a kernel on the stream (after the previous stream step);
 *   COLL     a collective on the tensor-parallel channel that the next stream
 *            step waits for (exposed);
 *   COLL_BG  a collective issued after the previous stream step that runs
 *            alongside the following stream steps (Megatron's asynchronous
 *            gradient all-reduce / re-gather);
 *   COLL_FREE a collective issued after the previous stream step that nothing
 *            waits for (the part of a collective hidden behind products
 *            outside its unit);
 *   JOIN     the next stream step waits for every COLL_BG issued so far. */
enum { STEP_COMPUTE, STEP_COLL, STEP_COLL_BG, STEP_COLL_FREE, STEP_JOIN };

typedef struct {
    uint8_t kind;
    uint8_t cat;      /* wf_sim_cat */
    double dur_s;
    double bytes;     /* a collective's size (its full vector), else 0 */
    const char *name; /* a string literal or one owned by the profile's arena */
} sim_step;

typedef struct {
    const char *name;
    sim_step *fwd, *bwd, *rec;
    int nfwd, nbwd, nrec;
    double params;          /* parameter elements held by one device */
    double eparams;         /* of them, expert parameters (sharded over expert-data-parallel ranks) */
    double mp_params;       /* of them, those whose gradient is a partial sum over the model-parallel
                               axis (all-reduced over it after the last micro-batch's backward) */
    double sub_params[2];   /* of them, those partial over one sub-axis only of a mesh of two
                               model-parallel axes (sim_profile.sub_group) */
    int ntensors;           /* its parameter tensors (each one gradient), forward order */
    double *tensor_params;  /* [ntensors] elements held by one device */
    double act_bytes;       /* kept from its forward to its backward, per micro-batch */
    double transient_bytes; /* live only while its backward runs */
    /* The same steps folded (the coarse graph): stream time, exposed channel
     * time after it, channel time hidden behind it. */
    double fwd_comp, fwd_exposed;
    double rec_comp, rec_exposed;
    double bwd_comp, bwd_exposed, bwd_hidden;
} sim_unit;

typedef struct {
    int transformer;
    int nunits;
    sim_unit *unit;
    int ninst;           /* unit instances in forward order */
    int *inst;           /* [ninst] the unit of each instance */
    int *inst_layer;     /* [ninst] model layer (transformers) or op index, -1 none */
    int nvs;             /* virtual stages p * v */
    int *vs_first;       /* [nvs + 1] instances of virtual stage k: [vs_first[k], vs_first[k+1]) */
    double shared_params;/* tied embedding held by the first and the last stage (pp > 1) */
    double p2p_s;        /* one pipeline send (activation or gradient), transformers */
    double *vs_send_s;   /* [nvs] a send between virtual stages k and k+1, either way */
    double grad_bytes;   /* per gradient element */
    double elem_bytes;   /* per weight element */
    double bytes_per_param;     /* weights + gradients + optimizer state (ZeRO applied) */
    double expert_bytes_per_param; /* the same for expert weights (ZeRO over ep's data-parallel ranks) */
    double opt_bytes_per_param; /* the optimizer step's memory traffic */
    double mem_bw_bps;          /* achieved memory bandwidth (optimizer step) */
    double buffer_bytes;        /* collective buffers and workspaces per device */
    wf_group dp_group, tp_group;
    wf_group edp_group;         /* expert weights' data-parallel ranks (stride ep x etp): ZeRO-3
                                   gathers the experts' shards over it; dp_group when ep x etp = 1 */
    int nsub;                   /* a mesh of two model-parallel axes: its sub-axes (else 0) */
    wf_group sub_group[2];
    int cp;                     /* context parallelism (the cost context's variant) */
    int tp_overlap;             /* the variant's tensor-parallel overlap (wf_cost_var) */
    int ag_overlap;             /* ZeRO-1/2's parameter all-gather behind the next forward */
    int n_rec;                  /* forwards without gradient per micro-batch (recycle=N), others 0 */
    double rec_bytes;           /* what a micro-batch recycles (held on the first stage) */
    double rec_send_s;          /* its trip from the last stage to the first (pp > 1) */
    int interlace;              /* the interlaced pipeline (plan interlace=1): instance 0 (the
                                   embedding) and ninst - 1 (the head) belong to no virtual stage
                                   (vs_first[0] = 1, vs_first[nvs] = ninst - 1); every stage holds
                                   them, tensor-parallel over tp x pp (their units' steps and
                                   parameters are those of that layout) */
    double x0_bytes;            /* interlaced: the embedding's output of one micro-batch that stage
                                   0 keeps until its first forward takes it */
} sim_profile;

/* Building a task graph with a sticky status: after the first error nothing
 * more is added and -1 comes back, so a builder checks once at the end. */
typedef struct {
    wf_sim *s;
    wf_status st;
} sim_builder;

static inline int sim_task(sim_builder *b, const wf_sim_task_desc *d)
{
    if (b->st)
        return -1;
    int id = wf_sim_add_task(b->s, d);
    if (id < 0)
        b->st = id;
    return id;
}

/* Task t waits for task `on` (either may be -1: nothing). */
static inline void sim_dep(sim_builder *b, int t, int on)
{
    if (b->st || t < 0 || on < 0)
        return;
    b->st = wf_sim_add_dep(b->s, t, on);
}

/* A collective-time callback over group g of cluster c for a gradient
 * schedule (wf_sched_env.coll / coll_ctx), both copied into the arena. */
wf_status sim_coll_env(const wf_cluster *c, const wf_group *g, double elem_bytes, wf_arena *a, wf_sched_env *env);

/* Operator fusion candidates (DisCo's rules): two ops adjacent in the graph,
 * the second the only reader of the first's output. Fused, the second no
 * longer reads that intermediate and the backward no longer writes and reads
 * its gradient, and one kernel launch per pass goes away; a fused op's
 * gradients become ready with its producer's (their backward is one kernel). */
enum {
    SIM_FUSE_ELEMENTWISE,     /* a chain of elementwise ops */
    SIM_FUSE_MATMUL_EPILOGUE, /* matmul / linear + bias or activation */
    SIM_FUSE_ADD_NORM,        /* residual add + layer norm */
    SIM_FUSE_CONV_BN,         /* convolution + batch norm (its statistics an epilogue) */
    SIM_FUSE_NORM_ACT,        /* batch or layer norm + activation */
    SIM_FUSE_ATTENTION        /* an attention block spelled out: scores, scale, softmax, dropout, values */
};

typedef struct {
    int a, b;              /* forward ops in graph order: b reads a's output */
    int rule;              /* SIM_FUSE_* */
    double inter_bytes;    /* a's output at micro-batch 1 */
    char name[2 * WF_NAME_LEN + 2]; /* "a+b" */
} sim_fusion;

/* What does not depend on the plan: the cost model's records (cost_records.h) and
 * the graph they were built from (a transformer's one layer, or the whole
 * model, at micro-batch 1), and the fusion candidates. */
typedef struct {
    wf_cost_ctx *ctx;
    wf_cost_model_info info;
    wf_cost_op_info *ops; /* [g.nfwd] the cost model's record of each forward op */
    int npoints;          /* tensor-parallel points (f and g) of the records */
    wf_graph g;
    int transformer;
    int nfusions;
    sim_fusion *fusions;
} sim_model;

wf_status sim_model_init(const wf_model_config *m, const wf_cluster *c, sim_model *out);
void sim_model_free(sim_model *sm);

/* Units of `m` under plan `p` and layout descriptor `layouts` (NULL: the
 * whole-model plan's, Megatron's wf_cost_layout_megatron for transformers,
 * every op whole otherwise; given, its tp is p's); fuse[k] != 0 applies
 * sm->fusions[k] (fuse may be NULL: no fusion). op_level (tp = 1 only)
 * makes a transformer one unit per op of each layer instead of one per
 * layer (gradients ready op by op). */
wf_status sim_profile_build(sim_model *sm, const wf_model_config *m, const wf_cluster *c, const wf_plan *p,
                            const wf_cost_layout *layouts, const unsigned char *fuse, int op_level, wf_arena *a,
                            sim_profile *out);

#endif
