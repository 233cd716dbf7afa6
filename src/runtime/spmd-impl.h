/* Private interface of the SPMD trainer (spmd.c) for train.c: op-level
 * plans (and whole-model plans with tensor parallelism, lowered to them) run
 * on a mesh of MPI ranks, each rank its local graph. Only src/runtime/ sees
 * MPI. */
#ifndef WEFT_RUNTIME_SPMD_IMPL_H
#define WEFT_RUNTIME_SPMD_IMPL_H

#include "weft/runtime.h"

#include <mpi.h>

typedef struct wf_spmd wf_spmd;

/* 1 when the trainer runs plan `plan` with the SPMD executor: an op-level
 * plan file, or a whole-model plan string or file with tp > 1 or sp. */
int wf_spmd_wants(const char *plan);

/* Collective over comm (every rank of the job). Reads or lowers the plan,
 * builds this rank's local graph, the mesh communicators, the executor (its
 * parameters the shards of the single process's initialization), the
 * optimizer and the gradient reduction over the data-parallel axis. */
wf_status wf_spmd_create(const wf_train_config *c, MPI_Comm comm, int rank, int nranks, wf_spmd **out);
void wf_spmd_free(wf_spmd *s);
wf_status wf_spmd_step(wf_spmd *s, wf_train_stats *st);
wf_status wf_spmd_sync(wf_spmd *s);
int64_t wf_spmd_steps_done(const wf_spmd *s);
wf_exec *wf_spmd_exec(const wf_spmd *s);
void wf_spmd_info_of(const wf_spmd *s, wf_train_info *out);
/* What a checkpoint of this run holds and restores (train.c writes it): the
 * executor (this rank's shards), the optimizer, the data loader, the steps
 * (written back on load), the micro-batches per step, and a line naming the
 * layouts ("layouts=mesh 2x2, plan fnv 0x..."), which a resume must match. */
typedef struct {
    wf_exec *e;
    wf_optim *o;
    struct wf_data *data;
    int64_t *steps;
    int64_t m;
    const char *model;
    char layouts[160];
} wf_spmd_ckpt;
void wf_spmd_ckpt_view(wf_spmd *s, wf_spmd_ckpt *out);

/* Collective: every parameter at its full shape, model graph order. */
wf_status wf_spmd_gather_params(wf_spmd *s, float *out, int64_t cap, int64_t *n);

#endif
