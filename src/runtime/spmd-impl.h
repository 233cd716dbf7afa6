/* Private interface of the SPMD trainer (spmd.c) for train.c: op-level
 * plans (and whole-model plans with tensor parallelism, lowered to them) run
 * on a mesh of MPI ranks, each rank its local graph. Only src/runtime/ sees
 * MPI. */
#ifndef WEFT_RUNTIME_SPMD_IMPL_H
#define WEFT_RUNTIME_SPMD_IMPL_H

#include "weft/models.h"
#include "weft/plan.h"
#include "weft/runtime.h"

#include <mpi.h>

typedef struct wf_spmd wf_spmd;

/* The most pipeline stages (chunks) one rank runs on one wf_spmd. */
#define WF_SPMD_MAX_STAGES 8

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
    wf_optim *o;          /* NULL under ZeRO: d's optimizer over its shard */
    struct wf_dist *d;    /* the data-parallel axis's engine (its ZeRO shards) */
    struct wf_data *data;
    int64_t *steps;
    int64_t m;
    const char *model;
    char layouts[160];
} wf_spmd_ckpt;
void wf_spmd_ckpt_view(wf_spmd *s, wf_spmd_ckpt *out);

/* Collective: every parameter at its full shape, model graph order. */
wf_status wf_spmd_gather_params(wf_spmd *s, float *out, int64_t cap, int64_t *n);

/* Parameters of exec e (named as the model's) <- their shards of the single
 * process's initialization (the global graph's executor under eo). */
wf_status wf_spmd_init_params(wf_spmd *S, wf_exec *e, const wf_exec_opts *eo);

/* ---- tensor parallelism inside pipeline stages (pipeline.c) ----
 * Collective over comm (one stage's tp ranks): the whole model at mbs
 * samples under the whole-model plan's tp (and sp) layouts, lowered with
 * wf_plan_lower as one stage, dp = 1; this rank's local graph with its
 * carriers, which the pipeline cuts into stages. No executor, optimizer or
 * data: the pipeline's stage executors take the callbacks. m may be padded
 * as Megatron pads a vocabulary (wf_megatron_pad_model): vocab_valid is then
 * the model's own size, whose ids and labels the data hold, and the
 * padding's logits are masked out of the loss (0: m is not padded). */
wf_status wf_spmd_create_tp(const wf_model_config *m, int64_t vocab_valid, const wf_plan *whole, int64_t mbs,
                            MPI_Comm comm, wf_spmd **out);
const wf_graph *wf_spmd_local_graph(const wf_spmd *S);
/* The callbacks of an executor whose graph holds the local graph's ops
 * [lo, ...) in order (lo = 0: the whole local graph); at most
 * WF_SPMD_MAX_STAGES values of lo besides 0. */
void wf_spmd_stage_callbacks(wf_spmd *S, int lo, wf_exec_spmd *out);
/* The share of a parameter's squared gradient this rank counts in the norm:
 * 1 / the ranks holding the same shard. */
double wf_spmd_param_share(const wf_spmd *S, const char *name);
/* Writes this rank's shard `local` of parameter `name` into the whole tensor
 * `full` when this rank is the first holder of that shard (returns 1), so a
 * sum over the ranks gathers each value once; else 0. */
int wf_spmd_put_param(const wf_spmd *S, const char *name, const float *local, float *full);
/* 1 when the global tensor named `name` is produced as a partial sum on
 * some mesh axis (its local tensor of that name holds this rank's
 * addend: the vocabulary-parallel embedding's output), else 0. */
int wf_spmd_tensor_partial(const wf_spmd *S, const char *name);
/* The collectives counted since the counters were last reset: all-gathers,
 * reduce-scatters, all-reduces, in-op all-reduces, all-to-alls. */
void wf_spmd_collectives(const wf_spmd *S, int64_t *ncoll);

#endif
