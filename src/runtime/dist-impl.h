/* Private interface of the data-parallel engine (dist.c) for the trainer
 * (train.c). Only src/runtime/ sees MPI. */
#ifndef WEFT_RUNTIME_DIST_IMPL_H
#define WEFT_RUNTIME_DIST_IMPL_H

#include "weft/plan.h"
#include "weft/runtime.h"

#include <mpi.h>

typedef struct wf_dist wf_dist;

typedef struct {
    MPI_Comm comm;       /* the data-parallel group; MPI_COMM_NULL without MPI */
    int rank, nranks;
    wf_comm_sched sched; /* wfbp, ddp, dear, horovod, mgwfbp or bytescheduler
                            (threshold 0 = default) */
    int overlap;         /* 0: issue every collective after the backward */
    const char *cluster; /* horovod, mgwfbp, bytescheduler: the cluster whose
                            predicted backward times and collective times
                            form their groups and order (NULL: "local") */
    int zero;            /* ZeRO stage 0-3 (docs/runtime.md, "Sharded state"): with zero >= 1 the
                            engine keeps the optimizer (o is NULL) over this rank's shard */
    const wf_optim_config *optim; /* zero >= 1: the optimizer to shard */
    /* Where the data-parallel group lies among the job's ranks (the timed
     * schedules price its collectives there): job_ranks, the job's ranks
     * (0: nranks), and group, the data-parallel axis's rank groups from
     * plan.h's one generator (size 0: all the job's ranks, stride 1 -- a
     * replica engine's). A pipeline's is {dp, tp}: a stage's data-parallel
     * ranks are tp apart. */
    int64_t job_ranks;
    wf_axis_ranks group;
} wf_dist_config;

/* The cluster the timed schedules price on (wf_cluster_of_job of the job's
 * ranks) and the data-parallel group laid on it, from c's job_ranks and group. */
wf_status wf_dist_group_place(const wf_dist_config *c, wf_cluster *cl, wf_group *g);

/* Groups the gradients for the schedule (weft/sched.h's wf_sched_build),
 * lays the gradient block out so that each group is contiguous (dear: padded
 * to a multiple of the ranks), and installs the executor's hooks. No
 * communication: every rank computes the same groups from the same graph. */
/* Every rank of comm agrees on the worst status (checkpoint.c); the message is
 * the lowest failing rank's, prefixed "rank N: " on the others. A null comm or
 * one rank returns st. wf_mpi_agree is this on MPI_COMM_WORLD. */
wf_status wf_mpi_agree_on(MPI_Comm comm, int rank, int nranks, wf_status st);
/* A wait outside MPI starts (what: its name, a static string) or ends
 * (NULL), watched as the blocking MPI calls are (peers.c: a peer that
 * stops answering ends the job after WEFT_PEER_TIMEOUT_S). */
void wf_mpi_wait_note(const char *what);

wf_status wf_dist_create(wf_exec *e, wf_optim *o, const wf_dist_config *c, wf_dist **out);
void wf_dist_free(wf_dist *d);

/* Before each micro-batch: `first` enables the deferred (dear) updates in its
 * forward, `last` the collectives in its backward. */
void wf_dist_begin_micro(wf_dist *d, int first, int last);
/* After the last micro-batch's backward: wfbp/ddp wait for every all-reduce,
 * clip and update (optimizer step t, gradients times grad_scale); dear issues
 * what remains and defers the update to the next forward (or wf_dist_sync). */
wf_status wf_dist_end_backward(wf_dist *d, int64_t t, double grad_scale);
/* Op-level plans (spmd.c): the clipping norm counts the square of gradient
 * float j (its index in the gradient block, as laid out by wf_dist_create)
 * weight[j] times and sums it over comm (MPI_COMM_NULL: this rank alone),
 * after the data-parallel reduction; every schedule. weight is borrowed. */
void wf_dist_set_norm(wf_dist *d, const float *weight, MPI_Comm comm);
/* wf_dist_end_backward in parts, for a caller whose clipping norm spans
 * more gradients than this engine's (pipeline stages), under every schedule
 * and every ZeRO stage:
 *   finish_reduce issues what remains and waits for every reduction (the
 *     all-reduces, or the reduce-scatters of dear and ZeRO-2/3: dear's
 *     barrier B0 at the end of the step);
 *   grad_get (collective over the data-parallel group) writes parameter i's
 *     reduced gradient whole into full (numel floats), gathered from the
 *     shards where it is sharded; grad_put takes this rank's part back from
 *     full (the caller sums a tied parameter's copies in between);
 *   reduced_sumsq (collective over the group) gives the squares of the
 *     reduced gradient, weighted as wf_dist_set_norm says (not summed over
 *     its comm: the caller sums), summed over the group's shards in rank
 *     order;
 *   apply_update clips by sqrt(sum_sq) x grad_scale (sum_sq: the squares of
 *     the summed gradients the caller counted) and updates (ZeRO: the shards
 *     stepped and under zero=1/2 the parameters gathered; dear: the first group's
 *     all-gather started, the rest deferred into the next forward as
 *     wf_dist_end_backward defers it, or wf_dist_sync). */
wf_status wf_dist_finish_reduce(wf_dist *d);
wf_status wf_dist_grad_get(wf_dist *d, int i, float *full);
wf_status wf_dist_grad_put(wf_dist *d, int i, const float *full);
wf_status wf_dist_reduced_sumsq(wf_dist *d, double *sum_sq);
wf_status wf_dist_apply_update(wf_dist *d, int64_t t, double grad_scale, double sum_sq);
/* Applies a deferred update now (dear); nothing otherwise. */
wf_status wf_dist_sync(wf_dist *d);

/* Seconds spent waiting for communication since the last call (and reset). */
double wf_dist_take_comm_s(wf_dist *d);
/* Norm of the averaged gradient of the last update applied (0 before any). */
double wf_dist_grad_norm(const wf_dist *d);
int wf_dist_ngroups(const wf_dist *d);
/* "wfbp", "ddp:25", "dear:1" (thresholds in MiB). */
const char *wf_dist_describe(const wf_dist *d);
/* How the group's collectives move: "shm" (one node's shared memory,
 * shm_coll.c), "mpi" or "none" (one rank). */
const char *wf_dist_transport(const wf_dist *d);

/* Sharded state (zero >= 1). The stage (0 without). Collective: gathers the
 * optimizer's state k into state[k] (and under zero=3 the parameters into
 * params, else ignored), full images laid out as the parameter block
 * (wf_exec_param's offset; wf_dist_zero_floats floats each, zeroed by the
 * caller; state NULL: the parameters only). scatter takes this rank's
 * shards back from such images (a checkpoint of any stage and of the same
 * dp). */
int wf_dist_zero(const wf_dist *d);
/* The optimizer the engine steps (its own over the shard under ZeRO). */
wf_optim *wf_dist_optim(const wf_dist *d);
int64_t wf_dist_zero_floats(const wf_dist *d);
wf_status wf_dist_zero_gather(wf_dist *d, float *params, float *const *state);
void wf_dist_zero_scatter(wf_dist *d, const float *params, const float *const *state);
/* Bytes this rank holds: parameters (zero=3: its shard, the parameters
 * without a gradient and the peak of gathered units), gradients (the
 * executor's local block and the reduced shards) and optimizer state. */
void wf_dist_memory(const wf_dist *d, size_t *param_bytes, size_t *grad_bytes, size_t *optim_bytes);

/* Gathers n doubles from every rank into out[nranks * n] in rank order (a
 * copy without MPI); the time counts as communication. */
wf_status wf_dist_allgather(wf_dist *d, const double *in, int n, double *out);

#endif
