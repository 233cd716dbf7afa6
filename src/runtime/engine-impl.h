/* Private interface of the runtime's three execution engines for the
 * trainer (train.c): one table of function pointers per engine, in the
 * spirit of ggml's backend interface, so that the trainer drives a run, its
 * checkpoints and its reports without asking which engine it holds.
 *
 *   replica   (engine_replica.c)  one model replica per rank: data
 *                                  parallelism (dist.c's schedules, ZeRO) and
 *                                  experts split over ep ranks;
 *   pipeline  (engine_pipe.c)     the model cut into stages (pipeline.c),
 *                                  with tensor parallelism inside stages;
 *   spmd      (engine_spmd.c)     op-level plans and whole-model plans with
 *                                  tp or sp, each rank its local graph
 *                                  (spmd.c).
 *
 * wf_engine_select picks the engine of a run (the only place that does) and
 * resolves a whole-model plan for the engines that take one. Every call
 * marked collective is made by every rank of the trainer's group. Only
 * src/runtime/ sees MPI. */
#ifndef WEFT_RUNTIME_ENGINE_IMPL_H
#define WEFT_RUNTIME_ENGINE_IMPL_H

#include "runtime/dist-impl.h"

#include "weft/models.h"
#include "weft/plan.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <mpi.h>

/* What the trainer hands an engine: the run's configuration (borrowed for
 * the engine's life), the trainer's group, and for whole-model engines the
 * model and the plan resolved by wf_engine_select. */
typedef struct {
    const wf_train_config *c;
    MPI_Comm comm;        /* the trainer's group (MPI_COMM_NULL without MPI) */
    int rank, nranks;
    wf_model_config model; /* replica, pipeline: looked up */
    wf_plan plan;          /* replica, pipeline: parsed and completed (dp, mbs) */
    char plan_note[256];   /* the keys filled by default (wf_plan_complete) */
} wf_engine_args;

/* What a checkpoint of an engine's run saves and checks besides its
 * tensors: the data loader (its position), the steps (written back on
 * load), the micro-batches per step, the model's name, and the engine's
 * lines of the run description a resume must match ("plan=...\n" or
 * "layouts=...\n"). */
typedef struct {
    wf_data *data;
    int64_t *steps;
    int64_t m;
    const char *model;
    char run[192];
} wf_engine_ckpt;

typedef struct wf_engine_iface {
    const char *name; /* "replica", "pipeline", "spmd" */
    /* Collective: builds this rank's part of the run (its executors,
     * optimizers, communicators, data loader); on failure nothing is left. */
    wf_status (*create)(const wf_engine_args *a, void **out);
    void (*destroy)(void *eng);
    /* Collective: one step (every micro-batch's forward and backward, the
     * gradients' reduction, the optimizer update, the loss over the global
     * batch and the step's metrics into *s). */
    wf_status (*step)(void *eng, wf_train_stats *s);
    /* Collective: completes deferred communication and updates (dear). */
    wf_status (*sync)(void *eng);
    int64_t (*steps_done)(const void *eng);
    /* The executor tests and reports look at (a pipeline's first chunk). */
    wf_exec *(*exec)(const void *eng);
    void (*info)(const void *eng, wf_train_info *out);
    /* Collective: every parameter at its full shape (wf_train_gather_params). */
    wf_status (*gather_params)(void *eng, float *out, int64_t cap, int64_t *n);
    /* FNV-1a of the parameters (collective under ZeRO-3). */
    uint64_t (*checksum)(const void *eng);
    /* The pipeline ops of the last step (0 without stages). */
    int (*trace)(const void *eng, wf_pipe_op *ops, int cap);
    /* Checkpoint hooks: the run's description; the tensors a checkpoint
     * holds (names in *names); collective gather of sharded state into the
     * tensors' full images before a save; scatter of the shards back from
     * them after a load; release of the images. */
    void (*ckpt_view)(void *eng, wf_engine_ckpt *v);
    wf_status (*ckpt_tensors)(void *eng, wf_ckpt_tensor **out, char **names, int *n);
    wf_status (*ckpt_gather)(void *eng);
    void (*ckpt_scatter)(void *eng);
    void (*ckpt_release)(void *eng);
} wf_engine_iface;

extern const wf_engine_iface wf_engine_replica;
extern const wf_engine_iface wf_engine_pipeline;
extern const wf_engine_iface wf_engine_spmd;

/* The engine that runs a->c->plan on a->nranks ranks: SPMD for an op-level
 * plan file or a plan with tp or sp (and no stages); otherwise the model is
 * looked up and the plan resolved into a (auto: dp = ranks, one micro-batch;
 * a plan's dp and mbs completed), and a plan with stages runs on the
 * pipeline engine, the rest on replicas. NULL with *st set on failure. */
const wf_engine_iface *wf_engine_select(wf_engine_args *a, wf_status *st);

/* ---- shared by the replica and pipeline engines ---- */
/* The plan line of a checkpoint: "pp=1,dp=4", "pp=2,vpp=1,dp=2,pipe=1f1b". */
void wf_engine_plan_text(const wf_plan *p, char *buf, size_t cap);
/* The batch they feed. */
typedef struct {
    wf_data *data;
    wf_data_layout layout;
    int64_t b;                   /* samples this rank (pipeline: this pipeline) trains per step */
    int64_t in_numel, lab_numel; /* per sample */
    void *inbuf;                 /* [b, in_numel] float or int32 */
    int32_t *labbuf;             /* [b, lab_numel] */
} wf_engine_feed;
/* The buffers of f->b samples (in_numel and lab_numel set), sized before
 * they are allocated. */
wf_status wf_engine_feed_alloc(wf_engine_feed *f);
/* Part `part` of `parts` of the next global batch of `batch` samples into
 * the buffers (zeros on a data error, which is returned). */
wf_status wf_engine_feed_next(wf_engine_feed *f, int64_t batch, int part, int parts);
void wf_engine_feed_free(wf_engine_feed *f);

/* ---- every input of a model's graph (feed_inputs.c; the replica engine) ---- */
typedef enum {
    WF_FEED_CONST,    /* the model's constant (wf_model_constant_input), filled once */
    WF_FEED_RECYCLED, /* the previous forward's activation src (zeros first; src -1: always zeros) */
    WF_FEED_SHIFTED,  /* the labels shifted right, start token 0 (T5's decoder ids) */
    WF_FEED_NOISE,    /* AlphaFold2's other fp32 data input: seeded noise in [-0.5, 0.5) per global sample */
    WF_FEED_ZERO      /* an integer input beside the loader's ids: 0 (BERT's token_types) */
} wf_feed_kind;
typedef struct {
    int t;
    wf_feed_kind kind;
    int src;           /* recycled: the activation it takes, -1 none */
    int64_t numel;     /* per sample (a constant: per row of its first axis) */
    int64_t src_numel; /* recycled: the source's per sample */
    int64_t off;       /* recycled: its offset in a sample's recycled floats */
} wf_feed_input;
typedef struct {
    int in_t, lab_t;    /* the loader's input ("ids", else the first data input) and the labels */
    int n;
    wf_feed_input *x;   /* the other inputs */
    int nkeep;
    int *keep;          /* the recycled inputs' sources (wf_exec_opts.keep) */
    int64_t rec_floats; /* recycled floats per sample */
    int recycle;        /* the model's forwards without gradient before the one that learns */
    int64_t rows;       /* the batch the graph was built for */
} wf_feed_graph;
/* Sorts the inputs of g (built from m) by who feeds them; an input nothing
 * can feed is WF_INVAL naming it. */
wf_status wf_feed_graph_plan(const wf_model_config *m, const wf_graph *g, wf_feed_graph *f);
void wf_feed_graph_free(wf_feed_graph *f);
/* The constants into e's leaves (once: no pass writes them). */
wf_status wf_feed_graph_constants(const wf_feed_graph *f, const wf_model_config *m, wf_exec *e);
/* One pass's rows: rows [row0, row0 + f->rows) of fd's buffers into the
 * loader's input and the labels, global sample global0 first; the shifted
 * and noise inputs from them. */
void wf_feed_graph_rows(const wf_feed_graph *f, wf_exec *e, const wf_engine_feed *fd, int64_t row0,
                        int64_t global0, uint64_t seed);
/* Input x's `rows` rows into its leaf (shifted labels from lab, noise of
 * global samples global0..., zeros); nothing for a constant or recycled one. */
void wf_feed_input_fill(const wf_feed_input *x, void *leaf, int64_t rows, const int32_t *lab, int64_t global0,
                        uint64_t seed);
/* The recycled inputs from buf ([rows, rec_floats]); after a forward, their
 * sources into buf. */
void wf_feed_graph_recycled_load(const wf_feed_graph *f, wf_exec *e, const float *buf);
wf_status wf_feed_graph_recycled_save(const wf_feed_graph *f, wf_exec *e, float *buf);

/* ---- shared by the replica and SPMD engines: one executor, one wf_dist ---- */
/* Full images of ZeRO-sharded state that a checkpoint reads and writes:
 * [0] the parameters (zero=3), [1 + k] optimizer state k. */
typedef struct {
    float *img;
    float *ptr[3];
} wf_engine_images;
/* The tensors of a checkpoint: every parameter of e under its graph name,
 * then the optimizer's state per parameter ("<state>.<index>"); under ZeRO
 * (d's stage) the tensors of an unsharded run, held in images z. */
wf_status wf_engine_dist_tensors(wf_exec *e, wf_optim *o, wf_dist *d, wf_engine_images *z, wf_ckpt_tensor **out,
                                 char **names, int *n);
wf_status wf_engine_dist_gather(wf_dist *d, wf_engine_images *z);
void wf_engine_dist_scatter(wf_dist *d, wf_engine_images *z);
void wf_engine_images_free(wf_engine_images *z);
/* FNV-1a of e's parameter block (under ZeRO-3 of d's gathered block: collective). */
uint64_t wf_engine_dist_checksum(const wf_exec *e, wf_dist *d);

#endif
