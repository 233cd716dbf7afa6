/* Private interface of the pipeline engine (pipeline.c) for the trainer
 * (train.c). Only src/runtime/ sees MPI. */
#ifndef WEFT_RUNTIME_PIPELINE_IMPL_H
#define WEFT_RUNTIME_PIPELINE_IMPL_H

#include "weft/models.h"
#include "weft/plan.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"
#include "weft/sched.h"

#include <mpi.h>

typedef struct wf_pipe wf_pipe;

typedef struct {
    MPI_Comm comm;               /* the trainer's group (pp x dp ranks); MPI_COMM_NULL: one process */
    int rank, nranks;
    const wf_model_config *model;
    const wf_plan *plan;         /* pp, vpp, dp, mbs, pipe, interlace */
    const char *cluster;         /* the cost model's cluster for the cut of other models (NULL: local) */
    int64_t batch;               /* global batch B */
    wf_exec_opts exec;
    const wf_optim_config *optim;
    wf_comm_sched sched;         /* each stage's data-parallel group's schedule (any dist.c runs; the
                                    plan's zero shards the state over that group) */
    int overlap;
} wf_pipe_config;

/* The plan checks of a pipelined run (pp > 1 or vpp > 1): ranks = pp x dp,
 * the batch split, interleaving's conditions, the layers (transformers) or
 * ops (other models) the stages need. One line naming what does not fit. */
wf_status wf_pipe_check(const wf_plan *p, const wf_model_config *m, int nranks, int64_t batch);

/* Collective over comm. Cuts the model, builds this rank's stage executors
 * (one per chunk), optimizers, data-parallel engines and communicators. */
wf_status wf_pipe_create(const wf_pipe_config *c, wf_pipe **out);
void wf_pipe_free(wf_pipe *p);

/* This rank's data-parallel index and group size (the data slice it trains). */
void wf_pipe_dp_of(const wf_pipe *p, int *dp_index, int *dp);

/* Collective. One step over this pipeline's slice of the global batch:
 * in ([b, in_numel] floats or int32, b = B/dp) and lab ([b, lab_numel]);
 * first_sample is the slice's first global sample, step the steps done.
 * *loss: the mean over the global batch (every rank); *status: the worst
 * kernel status of any rank; comm_s: time waiting for communication. */
wf_status wf_pipe_step(wf_pipe *p, const void *in, const int32_t *lab, int64_t first_sample, int64_t step,
                       double *loss, wf_status *status, double *comm_s, double *grad_norm);

/* The trainer's info fields a pipeline fills (groups, params, memory, comm). */
void wf_pipe_info(const wf_pipe *p, wf_train_info *out);
const char *wf_pipe_describe(const wf_pipe *p);
wf_exec *wf_pipe_exec(const wf_pipe *p, int chunk);
/* The ops the last step executed, in execution order (copies at most cap;
 * returns the count). Interlaced (interlace=1): the layers' F and B as chunk
 * 0, the embedding's EF and EB as chunk 1 (forward, backward), each head H
 * as chunk 2 (forward: its forward and backward run together). */
int wf_pipe_trace(const wf_pipe *p, wf_pipe_op *ops, int cap);

/* Checkpoint tensors of this rank: its chunks' parameters as
 * "c<vs>/<name>" and their optimizer state "c<vs>/<state>.<index>". */
wf_status wf_pipe_ckpt_tensors(wf_pipe *p, wf_ckpt_tensor **out, char **names, int *n);
/* ZeRO (zero=1, 2): the optimizer state of those tensors lies in full
 * images the checkpoint reads and writes; collective gather fills them from
 * the shards before a save, scatter takes the shards back after a load,
 * release frees them (nothing without ZeRO). */
wf_status wf_pipe_zero_gather(wf_pipe *p);
void wf_pipe_zero_scatter(wf_pipe *p);
void wf_pipe_zero_release(wf_pipe *p);
/* Collective: completes dear's deferred updates (wf_dist_sync per chunk). */
wf_status wf_pipe_sync(wf_pipe *p);

/* Collective: the whole model's parameters, in the model's tensor order, each
 * tensor's numel values packed (dp index 0's stage ranks contribute). */
wf_status wf_pipe_gather_params(wf_pipe *p, float *out, int64_t cap, int64_t *n);
/* FNV-1a of every chunk's parameter block (collective under ZeRO-3: the gathered blocks). */
uint64_t wf_pipe_checksum(const wf_pipe *p);

#endif
