/* weft runtime: executes training for real on CPUs: the executor (wf_exec),
 * the optimizers (wf_optim) and the trainer (wf_train). No MPI type is
 * exposed; trainer calls marked "collective" are made by every rank and
 * return the same status on all. Narrative: docs/interfaces.md, "runtime.h";
 * docs/runtime.md. Symbols: B global batch, b = B / ranks, m micro-batches
 * per step, mbs = b / m. */
#ifndef WEFT_RUNTIME_H
#define WEFT_RUNTIME_H

#include "weft/core.h"
#include "weft/graph.h"
#include "weft/kernels.h"
#include "weft/plan.h"
#include "weft/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- executor ----------------------------------------------------------------- */

typedef struct wf_exec wf_exec;

typedef struct {
    int reference;  /* 1: run the naive reference kernels (tests); 0: the fast path */
    uint64_t seed;  /* parameter initialization and dropout streams */
} wf_exec_opts;

/* Copies the forward graph g (with a loss; float tensors fp32, integer inputs
 * and labels int32 or int64, held as int32), appends its backward pass, plans
 * activation memory and allocates: parameters (initialized from the seed, see
 * docs/runtime.md), their gradients, the inputs and the activation arena. A
 * graph the runtime cannot run (fp16 tensors, no loss, an unsupported shape)
 * is WF_INVAL naming the tensor or op. */
wf_status wf_exec_create(const wf_graph *g, const wf_exec_opts *o, wf_exec **out);
/* The same, with nkeep activations of g (forward outputs, fp32) whose values
 * stay readable after a forward until the next pass (wf_exec_kept_data):
 * AlphaFold2's recycled MSA row and pair. */
wf_status wf_exec_create_keeping(const wf_graph *g, const wf_exec_opts *o, const int *keep, int nkeep,
                                 wf_exec **out);
void wf_exec_free(wf_exec *e);

/* The executor's graph: forward ops [0, nfwd), backward ops after. */
const wf_graph *wf_exec_graph(const wf_exec *e);
/* The micro-batch the graph was built for (axis 0 of its data input; the
 * name predates the rule that `batch` is the global batch). */
int64_t wf_exec_batch(const wf_exec *e);

typedef struct {
    const char *name;
    int tensor;           /* index in the graph */
    int ndim;
    int64_t shape[WF_MAX_DIMS];
    int64_t numel;
    int decay;            /* 1 when weight decay applies (ndim >= 2: matrices, tables, kernels) */
    int has_grad;         /* 0 for a parameter the loss does not depend on (never updated) */
    int first_fwd_op;     /* first forward op reading it */
    int grad_op;          /* backward op producing its final gradient, -1 if none */
    int64_t offset;       /* floats from the start of the parameter block */
    int64_t grad_offset;  /* floats from the start of the gradient block */
    float *data;          /* [numel] in the parameter block */
    float *grad;          /* [numel] in the gradient block */
} wf_exec_param;

int wf_exec_nparams(const wf_exec *e);
const wf_exec_param *wf_exec_param_at(const wf_exec *e, int i);
/* Index of the parameter that tensor t is (or whose final gradient t is), -1. */
int wf_exec_param_of_tensor(const wf_exec *e, int t);
int wf_exec_param_of_grad(const wf_exec *e, int t);
/* All parameters, contiguous (padding between tensors is zero). */
float *wf_exec_param_block(const wf_exec *e, int64_t *nfloats);
float *wf_exec_grad_block(const wf_exec *e, int64_t *nfloats);
/* Moves the gradients to a new layout: parameter i's gradient at grad_off[i]
 * floats into a zeroed block of `total` floats (a communication schedule wants
 * each collective's gradients contiguous). Ranges must not overlap. */
wf_status wf_exec_set_grad_layout(wf_exec *e, const int64_t *grad_off, int64_t total);
/* Moves the parameters to a new layout, as wf_exec_set_grad_layout moves the
 * gradients (sharded data parallelism wants the two blocks alike). */
wf_status wf_exec_set_param_layout(wf_exec *e, const int64_t *off, int64_t total);
/* Points parameter i at `data` (numel floats the caller owns; NULL: not
 * resident): ZeRO-3 gathers a parameter before the ops that read it and
 * frees it after. The ops reading it must not run while it is NULL. */
void wf_exec_bind_param(wf_exec *e, int i, float *data);
/* Frees the parameter block and unbinds every parameter (ZeRO-3 keeps its
 * shard and binds gathered copies); wf_exec_param_block is then NULL. */
void wf_exec_release_params(wf_exec *e);
/* The parameters op o reads (a backward op: also its forward op's inputs,
 * which its kernel reads), through views; writes at most cap indices into
 * out and returns how many there are. */
int wf_exec_op_params(const wf_exec *e, int o, int *out, int cap);
/* Zeroes the gradient block. */
void wf_exec_zero_grads(wf_exec *e);

/* Tensor index by name, -1 when absent. */
int wf_exec_find_tensor(const wf_exec *e, const char *name);
/* Storage of a leaf tensor (input: float or int32; label: int32; parameter),
 * NULL for other tensors (activations live only inside a pass). */
void *wf_exec_leaf_data(wf_exec *e, int tensor);
/* A kept activation's values (wf_exec_create_keeping) after a forward,
 * until the next pass; NULL for a tensor that was not kept. */
const float *wf_exec_kept_data(wf_exec *e, int tensor);

/* The dropout stream of the next passes: masks are a pure function of (seed,
 * each dropout op's seed, stream, global element index), where the element
 * index counts from global sample first_sample. Data-parallel ranks pass the
 * step as the stream and their first global sample, so together they draw the
 * masks a single process draws for the whole batch. */
void wf_exec_set_stream(wf_exec *e, uint64_t stream, int64_t first_sample);

/* Called before and after each op runs (forward and backward alike), e.g. to
 * issue collectives as gradients become ready and to let MPI progress. A hook
 * that fails stops the pass with its status. */
typedef struct {
    void *ctx;
    wf_status (*before)(void *ctx, int op);
    wf_status (*after)(void *ctx, int op);
} wf_exec_hooks;
void wf_exec_set_hooks(wf_exec *e, const wf_exec_hooks *h); /* NULL clears */

/* Expert parallelism: this rank runs experts [g E/ep, (g+1) E/ep) of every
 * MoE layer, exchanging rows through the two callbacks (MPI_Alltoall and
 * MPI_Alltoallv over the ep group, in rank order). */
#define WF_EXEC_MAX_EP 256
typedef struct {
    int ep, group_rank;
    void *ctx;
    wf_status (*alltoall_counts)(void *ctx, const int32_t *send, int32_t *recv, int n);
    wf_status (*alltoallv)(void *ctx, const float *send, const int64_t *send_n, float *recv, const int64_t *recv_n);
} wf_exec_experts;
void wf_exec_set_experts(wf_exec *e, const wf_exec_experts *x); /* NULL clears */

/* SPMD execution of op-level plans: per forward op of the local graph, a
 * boxing step (box_op), a vocabulary shard (vocab_first/vocab_total), split
 * batchnorm statistics (stats_split) or a global view (view), served by the
 * box and allreduce callbacks, which run even after a kernel failed. */
typedef struct {
    int64_t gshape[WF_MAX_DIMS]; /* the global tensor's shape (rank of the local one) */
    int64_t start[WF_MAX_DIMS];  /* the local block's first index in each dim */
} wf_exec_view;

typedef struct {
    void *ctx;
    const unsigned char *box_op;  /* [nfwd] */
    wf_status (*box)(void *ctx, int op, int backward, const float *in, float *out);
    const int64_t *vocab_first;   /* [nfwd], -1: not split */
    const int64_t *vocab_total;   /* [nfwd] */
    wf_status (*allreduce)(void *ctx, int op, float *buf, int64_t n, int is_max);
    const unsigned char *stats_split; /* [nfwd] */
    const unsigned char *has_view; /* [nfwd] */
    const wf_exec_view *view;      /* [nfwd] */
} wf_exec_spmd;
void wf_exec_set_spmd(wf_exec *e, const wf_exec_spmd *s); /* NULL clears; arrays borrowed */

/* Runs the forward ops; *loss = the loss (mean over this replica's batch).
 * A kernel that fails (a token id out of range) records its status and the
 * pass goes on calling the hooks without running kernels, so collectives stay
 * matched across ranks; the status is returned at the end. */
wf_status wf_exec_forward(wf_exec *e, float *loss);
/* Runs the backward ops. accumulate = 0 overwrites the parameter gradients,
 * 1 adds to them (gradient accumulation over micro-batches). */
wf_status wf_exec_backward(wf_exec *e, int accumulate);

/* ---- pipeline stages ---- */

/* A pipeline stage: a graph holding some forward ops; outs its outputs (no
 * loss: the backward is seeded from wf_exec_output_grad), wrt the boundary
 * inputs whose gradients it computes, init_index (NULL: none) each tensor's
 * index in the whole model, transformer the init rule (1 GPT-2, 0 PyTorch,
 * -1 this graph's). */
typedef struct {
    const int *outs;
    int nouts;
    const int *wrt;
    int nwrt;
    const int64_t *init_index;
    int transformer;
} wf_exec_stage;
wf_status wf_exec_create_stage(const wf_graph *g, const wf_exec_opts *o, const wf_exec_stage *s, wf_exec **out);
/* The same, with activations kept readable after a forward as
 * wf_exec_create_keeping keeps them (a pipeline stage holding AlphaFold2's
 * recycled MSA row or pair). */
wf_status wf_exec_create_stage_keeping(const wf_graph *g, const wf_exec_opts *o, const wf_exec_stage *s,
                                       const int *keep, int nkeep, wf_exec **out);
/* Output k's values after a forward (until the slot is next used). */
float *wf_exec_output(wf_exec *e, int k);
/* Where the gradient of output k goes before a backward (a leaf, per slot). */
float *wf_exec_output_grad(wf_exec *e, int k);
/* The gradient of input wrt[k] after a backward; NULL when it has none. */
float *wf_exec_input_grad(wf_exec *e, int k);
/* n activation slots (n micro-batches in flight between forward and
 * backward): each keeps its saved state and leaves apart. Once; n = 1: no change. */
wf_status wf_exec_set_slots(wf_exec *e, int n);
/* The bytes of one slot (its kept block and leaves). */
size_t wf_exec_slot_bytes(const wf_exec *e);
/* The slot the next passes read and write. */
void wf_exec_use_slot(wf_exec *e, int k);
/* e runs on `with`'s workspace, accumulation buffer and (both with slots)
 * work arena, grown to the larger need; `with` owns and reports them and
 * must outlive e's use. Once per executor. */
wf_status wf_exec_share_scratch(wf_exec *e, wf_exec *with);

typedef struct {
    size_t param_bytes;     /* the parameter block */
    size_t grad_bytes;      /* the gradient block */
    size_t leaf_bytes;      /* inputs, labels, the loss and its seed gradient */
    size_t arena_bytes;     /* planned activations, non-parameter gradients, saved state */
    size_t unplanned_bytes; /* what the arena's contents would take without reuse */
    size_t scratch_bytes;   /* kernel workspace and the accumulation buffer */
} wf_exec_memory;
void wf_exec_memory_of(const wf_exec *e, wf_exec_memory *m);

/* ---- optimizer ------------------------------------------------------------------ */

typedef enum { WF_OPTIM_SGD, WF_OPTIM_ADAMW } wf_optim_kind;

typedef struct {
    wf_optim_kind kind;
    double lr;
    double momentum;      /* sgd: buf = momentum buf + g; p -= lr buf */
    double beta1, beta2;  /* adamw */
    double eps;           /* adamw */
    double weight_decay;  /* adamw: decoupled (p -= lr wd p); sgd: added to g (L2). Only
                           * parameters with decay = 1 (ndim >= 2) */
    double clip_norm;     /* clip the global gradient norm to this; 0 = no clipping */
} wf_optim_config;

/* adamw: lr 1e-3, betas 0.9/0.999, eps 1e-8, wd 0.01; sgd: lr 0.01, momentum
 * 0.9, wd 0; both clip 1.0. */
void wf_optim_defaults(wf_optim_kind kind, wf_optim_config *c);
wf_status wf_optim_parse(const char *text, wf_optim_kind *out); /* "adamw", "sgd" */
const char *wf_optim_name(wf_optim_kind k);
/* Ranges: lr > 0, momentum and betas in [0,1), eps > 0, wd >= 0, clip >= 0. */
wf_status wf_optim_check(const wf_optim_config *c);

typedef struct wf_optim wf_optim;

/* State (adamw: m and v; sgd: the momentum buffer) laid out like the
 * parameter block of e, zeroed. */
wf_status wf_optim_create(const wf_optim_config *c, const wf_exec *e, wf_optim **out);
void wf_optim_free(wf_optim *o);
const wf_optim_config *wf_optim_config_of(const wf_optim *o);
/* One update of parameter i of e from its gradient times grad_scale (the
 * averaging over ranks and micro-batches and the clipping factor, folded);
 * t is the 1-based step number (AdamW's bias correction). */
void wf_optim_update(wf_optim *o, wf_exec *e, int param, float grad_scale, int64_t t);
/* min(1, clip / norm) (1 when clipping is off or norm is 0). */
double wf_optim_clip_factor(const wf_optim_config *c, double grad_norm);
/* State tensors per parameter (adamw 2, sgd 1), their names ("m", "v",
 * "momentum") and data ([numel] of parameter i). */
/* A flat optimizer over nfloats elements not tied to an executor's
 * parameters: sharded data parallelism (ZeRO) keeps the state of this rank's
 * shard of the flattened parameters only. update_flat steps w[0, n) with
 * gradient g[0, n) and the state at state_off, with or without weight decay
 * (the same arithmetic as wf_optim_update, element for element). */
wf_status wf_optim_create_flat(const wf_optim_config *c, int64_t nfloats, wf_optim **out);
void wf_optim_update_flat(wf_optim *o, float *w, const float *g, int64_t state_off, int64_t n, int decay,
                          float grad_scale, int64_t t);
/* State block k of a flat optimizer (*nfloats its floats). */
float *wf_optim_state_block(const wf_optim *o, int k, int64_t *nfloats);
int wf_optim_nstate(const wf_optim *o);
const char *wf_optim_state_name(const wf_optim *o, int k);
float *wf_optim_state(const wf_optim *o, int param, int k);

/* ---- trainer --------------------------------------------------------------------- */

typedef struct wf_train wf_train;

/* `--comm auto` for a data-parallel run: the schedule for model m at
 * micro-batch mbs on nranks ranks of cluster spec (NULL: the job's default,
 * wf_cluster_of_job), into out, with a line saying how it was chosen. The
 * runtime does not choose: the caller does (weft's CLI by simulation,
 * src/cli/autoplan.c). Every rank must choose the same from the same inputs. */
typedef wf_status (*wf_comm_auto_fn)(const wf_model_config *m, const char *cluster, int64_t mbs, int nranks,
                                     wf_comm_sched *out, char *note, size_t cap);

typedef struct {
    const char *model;    /* model spec (zoo name, family with overrides, JSON file) */
    const char *data;     /* data spec (weft/runtime_io.h) */
    int64_t batch;        /* global batch B */
    const char *plan;     /* plan string or file, or "auto" (dp = ranks, one micro-batch) */
    const char *comm;     /* comm schedule; NULL: the plan's; "auto": chosen by comm_auto */
    const char *cluster;  /* the job's cluster (wf_cluster_of_job; NULL: "local", this machine) */
    wf_comm_auto_fn comm_auto; /* chooses "auto" for data-parallel plans (NULL: auto is refused
                                  there; pipelines take ddp, SPMD plans wfbp) */
    wf_optim_config optim;
    uint64_t seed;
    int reference;        /* reference kernels */
    int self;             /* 1: train on this process alone, even inside an MPI job */
    int verbose;          /* 1: describe the setup on stderr (rank 0) */
    int init_random;      /* 1: an ONNX model starts from the seed's random initialization;
                           * 0: from the initializers in the file (its trained weights) */
} wf_train_config;

/* Collective. Builds the model, checks the plan against the world, opens the
 * data and lays out the gradients; picks the engine (replica, pipeline,
 * SPMD). WF_INVAL naming what the runtime does not run (zero with experts,
 * recompute). Free with wf_train_free. */
wf_status wf_train_create(const wf_train_config *c, wf_train **out);
void wf_train_free(wf_train *t);

typedef struct {
    int64_t step;        /* steps completed (this one included) */
    double loss;         /* mean over the global batch; identical on every rank */
    double time_s;       /* wall time of the step on this rank */
    double comm_s;       /* of which waiting for communication (exposed) */
    double compute_s;    /* time_s - comm_s */
    double grad_norm;    /* norm of the averaged gradient applied by the update
                          * (for dear: of the previous step's gradient, applied during
                          * this step's forward; 0 before any) */
    int64_t samples;     /* global samples in the step (B) */
    int64_t tokens;      /* global tokens (B * seq) for token models, else 0 */
} wf_train_stats;

/* What the runtime executes: one table (src/runtime/runs_plan.c) of what
 * each engine refuses, asked by wf_runtime_runs_plan before any run. */
typedef enum { WF_ENGINE_REPLICA, WF_ENGINE_PIPELINE, WF_ENGINE_SPMD } wf_engine_kind;
/* The engine that runs whole-model plan p (an op-level plan file runs SPMD). */
wf_engine_kind wf_runtime_engine_of(const wf_plan *p);
/* WF_OK, or WF_INVAL with one line naming what `engine` does not run in p
 * (rows about the model are skipped when m is NULL). The rank count, the
 * batch and the model's shapes are checked by the engines themselves. */
wf_status wf_runtime_engine_check(wf_engine_kind engine, const wf_plan *p, const wf_model_config *m);
/* WF_OK, or WF_INVAL naming why ZeRO stage `zero` and schedule `kind` do not
 * run together on a data-parallel group (any engine). */
wf_status wf_runtime_schedule_check(int zero, wf_comm_kind kind);
/* Whether the runtime executes plan p (with comm, when not NULL, in place of
 * the plan's schedule): no row of its engine and no row of the schedule
 * refuses it, before the world's rank count, which a search fixes. What
 * `weft train --plan auto` filters its candidates by, so auto never picks a
 * plan that train would refuse. */
int wf_runtime_runs_plan(const wf_plan *p, const wf_comm_sched *comm);
/* The same with the model's rows too (m: the model a run trains): what
 * `--plan auto` asks, so that a model the stages cannot feed (constant and
 * recycled inputs) is not given a pipelined plan. */
int wf_runtime_runs_model_plan(const wf_plan *p, const wf_model_config *m, const wf_comm_sched *comm);
/* The ranks a run of config c trains on: the MPI world's, or 1 with c->self
 * or without MPI. */
int wf_train_world_size(const wf_train_config *c);

/* Collective. One training step: this rank's slice of the next global batch,
 * forward and backward per micro-batch, the gradient reduction of the
 * schedule, the optimizer update (dear: deferred into the next step's forward
 * or wf_train_sync). */
wf_status wf_train_step(wf_train *t, wf_train_stats *s);
/* Collective. Completes outstanding communication and updates (dear), so the
 * parameters are those after every step taken. Idempotent. */
wf_status wf_train_sync(wf_train *t);
/* Collective over the world (not in self mode with several ranks). Syncs, then
 * writes a checkpoint of the parameters, the optimizer state, the step and the
 * data position (weft/runtime_io.h format). */
wf_status wf_train_save(wf_train *t, const char *dir);
/* Collective. Loads a checkpoint written by a run of the same model, data
 * batch, seed, optimizer and rank count; training continues exactly as the
 * uninterrupted run would have. */
wf_status wf_train_load(wf_train *t, const char *dir);
/* Collective. Syncs, then writes every parameter of the model at its full
 * shape into out, in the model graph's order, concatenated (n: the floats
 * they take; nothing is written when cap is smaller). Under an op-level plan
 * the shards of every rank, and with pipeline stages the stages, are
 * gathered, so all ranks hold the same values. */
wf_status wf_train_gather_params(wf_train *t, float *out, int64_t cap, int64_t *n);
/* Steps completed. */
int64_t wf_train_steps_done(const wf_train *t);
/* FNV-1a hash of the parameter block's bytes (call after wf_train_sync). */
uint64_t wf_train_checksum(const wf_train *t);

typedef struct {
    int rank, nranks;
    int64_t local_batch;     /* b */
    int64_t micro_batches;   /* m */
    int64_t micro_batch;     /* mbs */
    int64_t tokens_per_sample; /* seq for token models, 0 for features */
    int ngroups;             /* collectives per step (dear: reduce-scatters) */
    int64_t params;          /* parameter elements */
    char comm[64];           /* the schedule executed, e.g. "dear:23.8" (threshold in MiB) */
    char comm_note[192];     /* with auto: how it was chosen; else "" */
    char plan_note[256];     /* the plan keys filled by default (wf_plan_complete); else "" */
    char model[128];         /* canonical model name */
    char data[256];          /* the loader's description */
    char init[160];          /* where the parameters start: "random (seed N)" or the file */
    wf_exec_memory memory;   /* under ZeRO param_bytes and grad_bytes are what this rank holds
                                (dist.c's wf_dist_memory) */
    int zero;                /* the ZeRO stage run */
    size_t optimizer_bytes;  /* optimizer state on this rank (data-parallel plans; else 0) */
    /* SPMD plans: the collectives of the last step on this rank (boxing
     * all-gathers, reduce-scatters, all-reduces; in-op all-reduces of the
     * vocabulary-parallel loss and batch statistics; boxing all-to-alls);
     * else 0 */
    int64_t spmd_allgathers, spmd_reduce_scatters, spmd_allreduces, spmd_inop_allreduces, spmd_alltoalls;
    char mesh[96];           /* SPMD: "2x2 (data-parallel axis 0)"; micro_batch is then the
                                global micro-batch every rank's shard belongs to; else "" */
} wf_train_info;
void wf_train_info_of(const wf_train *t, wf_train_info *out);
wf_exec *wf_train_exec(const wf_train *t);

/* With pipeline stages (pp > 1): the (forward|backward, micro-batch, chunk)
 * ops this rank executed in the last step, in execution order (it plays
 * weft/sched.h's wf_pipe_order of its stage; interlaced, plan.h's
 * wf_plan_interlace_order: F and B chunk 0, EF and EB chunk 1, H chunk 2);
 * returns their count (0 without stages), copying at most cap. */
int wf_train_pipe_order(const wf_train *t, wf_pipe_op *ops, int cap);

/* The BLAS library in use and its threads: weft/kernels.h. */

/* ---- MPI world helpers for callers without mpi.h ---------------------------------- */

/* Collective over the world: min and max of v over the ranks (v itself
 * without MPI). */
wf_status wf_world_minmax_u64(uint64_t v, uint64_t *min, uint64_t *max);
/* Collective over the world: a barrier (nothing without MPI). */
wf_status wf_world_barrier(void);

#ifdef __cplusplus
}
#endif
#endif
