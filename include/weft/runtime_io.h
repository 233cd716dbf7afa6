/* weft runtime I/O: data loaders, checkpoints, machine calibration, and the
 * MPI-world helpers they share; no MPI types. Without MPI every function acts
 * as rank 0 of 1. "Collective": every rank calls it, and every rank returns
 * the same status (docs/interfaces.md, "runtime_io.h: the MPI world").
 * Shapes: B global batch, b this rank's slice, S sequence, F features. */
#ifndef WEFT_RUNTIME_IO_H
#define WEFT_RUNTIME_IO_H

#include <stdio.h>

#include "weft/cluster.h"
#include "weft/core.h"
#include "weft/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- MPI world ------------------------------------------------------------- */

/* This process's rank and the world size; 0 and 1 when MPI is not initialized
 * (or already finalized). */
void wf_mpi_world(int *rank, int *nranks);
/* 1 when a launcher (mpiexec, srun: PMI/PMIx/Open MPI environment variables)
 * started this process, so MPI should be initialized. */
int wf_mpi_launched(void);
/* Initializes MPI when this process was launched by a launcher and MPI is not
 * up yet; *started says whether this call did it (pass it to wf_mpi_stop). */
wf_status wf_mpi_start(int *started);
/* Finalizes MPI when `started` (from wf_mpi_start) is set. */
void wf_mpi_stop(int started);
/* Collective: every rank's n named values (command-line arguments) agree.
 * WF_OK when they do; else WF_INVAL on every rank naming the first field
 * that differs and the ranks' values. */
wf_status wf_mpi_agree_fields(const char *const names[], const char *const values[], int n);
/* The peer timeout (WEFT_PEER_TIMEOUT_S, default 120 s) and its watchdog
 * (docs/interfaces.md, "runtime_io.h: the MPI world"). */
double wf_mpi_peer_timeout_s(void);
wf_status wf_mpi_watchdog_start(int rank);
/* Collective: the worst status over the ranks, with the lowest failing
 * rank's message (prefixed "rank R: " on the others). */
wf_status wf_mpi_agree(wf_status st);

/* The job over nodes (ranks that share memory form a node). */
typedef struct {
    int rank, nranks;
    int node, nodes;             /* this rank's node (0-based, in order of the nodes' lowest ranks), nodes */
    int local_rank, ranks_per_node; /* rank within the node; the largest node's size */
} wf_mpi_job;
/* Collective: the layout (rank 0 of 1 on node 0 of 1 without MPI). */
wf_status wf_mpi_layout(wf_mpi_job *job);
/* Collective: buf from `root` to every rank (nothing without MPI). */
wf_status wf_mpi_bcast_bytes(void *buf, size_t bytes, int root);

/* ---- data loaders ---------------------------------------------------------------
 * Deterministic fp32 / int32 batches given (spec, layout, seed): sample p of
 * the run is a function of p and the seed. Specs (synthetic, fashion-mnist,
 * text:PATH, fortunes, PATH): docs/interfaces.md, "runtime_io.h". */

/* What the model consumes, per sample (the batch axis is left out). */
typedef struct {
    wf_dtype input_dtype;              /* WF_DTYPE_FP32: features; WF_DTYPE_INT32: token ids */
    int input_ndim;
    int64_t input_shape[WF_MAX_DIMS];  /* e.g. [F], [C,H,W] or [S] */
    int label_ndim;                    /* 0: one label per sample; 1: one per position */
    int64_t label_shape[WF_MAX_DIMS];  /* [] or [S] */
    int64_t classes;                   /* labels lie in [0, classes) */
    int64_t vocab;                     /* token inputs: ids lie in [0, vocab); 0 for features */
} wf_data_layout;

/* The layout of a graph with one label and one input (or several, one named
 * "ids"), batch on axis 0 (how each field is read: docs/interfaces.md,
 * "runtime_io.h: data loaders"). */
wf_status wf_data_layout_from_graph(const wf_graph *g, wf_data_layout *out);
/* The same with the loader's input chosen by the caller (tensor in). */
wf_status wf_data_layout_from_input(const wf_graph *g, int in, wf_data_layout *out);
int64_t wf_data_layout_input_numel(const wf_data_layout *l); /* per sample */
int64_t wf_data_layout_label_numel(const wf_data_layout *l); /* per sample (1 when label_ndim 0) */

typedef struct wf_data wf_data;

/* Opens a loader. A spec the layout cannot use (fashion-mnist for token ids,
 * text for features, a vocabulary smaller than WF_TEXT_VOCAB...) is WF_INVAL
 * naming both; a missing data file is WF_IO and a malformed one WF_FORMAT,
 * naming the file and what is wrong. */
wf_status wf_data_open(const char *spec, const wf_data_layout *layout, uint64_t seed, wf_data **out);
void wf_data_close(wf_data *d);

/* This rank's contiguous slice [first, first + count) of a global batch,
 * first = B*rank/nranks: the ranks' slices concatenate to the batch. */
void wf_data_slice(int64_t global_batch, int rank, int nranks, int64_t *first, int64_t *count);

/* Fills this rank's slice of the next global batch and advances the position
 * by global_batch (on every rank alike):
 *   inputs: float[b, input numel] or int32_t[b, input numel] (input_dtype)
 *   labels: int32_t[b, label numel]
 * where b = count of wf_data_slice. */
wf_status wf_data_next(wf_data *d, int64_t global_batch, int rank, int nranks, void *inputs,
                       int32_t *labels);

/* Global samples drawn so far; a checkpoint stores it, a resume seeks to it. */
int64_t wf_data_position(const wf_data *d);
wf_status wf_data_seek(wf_data *d, int64_t position);
/* Samples in one epoch (fashion-mnist images, text windows); 0 when infinite. */
int64_t wf_data_size(const wf_data *d);
/* A short description, e.g. "fashion-mnist train (60000 images)". */
const char *wf_data_describe(const wf_data *d);

/* The fixed character vocabulary (docs/interfaces.md, "runtime_io.h: data
 * loaders"). */
#define WF_TEXT_VOCAB 96
int wf_text_token(unsigned char c);
char wf_text_char(int id); /* '?' for an id outside the vocabulary */

/* An IDX file (gzip'd or plain; the format: docs/interfaces.md). A wrong
 * magic (when expect_magic != 0), a dimension of 0, a short or overlong
 * payload is WF_FORMAT naming the file. */
typedef struct {
    int ndim;
    int64_t dims[4];
    uint8_t *data; /* prod(dims) bytes */
} wf_idx;
wf_status wf_idx_read(const char *path, uint32_t expect_magic, wf_idx *out);
void wf_idx_free(wf_idx *x);

/* ---- checkpoints --------------------------------------------------------------------
 * DIR/manifest.json (rank 0, written last, atomically) names the complete
 * checkpoint; each save writes a new generation of shards, so an interrupted
 * save keeps the previous one (docs/data-and-checkpoints.md). */
#define WF_CKPT_VERSION 1
#define WF_CKPT_MODEL_LEN 128

typedef struct {
    int64_t step;           /* optimizer steps completed */
    int64_t data_position;  /* wf_data_position at the save */
    uint64_t rng[4];        /* the caller's RNG state (opaque words) */
    char model[WF_CKPT_MODEL_LEN]; /* canonical model name */
    char run[512];          /* the run's other settings, "key=value" lines, compared on
                               resume ("" when not recorded) */
} wf_ckpt_meta;

/* One named tensor: parameters, optimizer state ("adam.m.<param>"), anything.
 * Names are unique, at most WF_NAME_LEN-1 bytes. On load, data must point to
 * wf_ckpt_tensor_bytes() writable bytes. */
typedef struct {
    const char *name;
    wf_dtype dtype;
    int ndim;
    int64_t shape[WF_MAX_DIMS];
    void *data;
} wf_ckpt_tensor;

size_t wf_ckpt_tensor_bytes(const wf_ckpt_tensor *t);

/* Collective. Writes this rank's tensors and meta into DIR (created if
 * missing), then rank 0 writes the manifest. */
wf_status wf_ckpt_save(const char *dir, const wf_ckpt_meta *meta, const wf_ckpt_tensor *t, int n);

/* Collective. Reads the checkpoint in DIR into the caller's tensors (the
 * saved set exactly) and *meta; model (NULL: not checked) and the world size
 * must match. WF_NOTFOUND: no manifest; WF_FORMAT: a torn or corrupt file;
 * WF_INVAL: a mismatch; each naming the file. On error nothing is written. */
wf_status wf_ckpt_load(const char *dir, const char *model, wf_ckpt_meta *meta,
                       const wf_ckpt_tensor *t, int n);

/* Reads only the manifest of the checkpoint in DIR: step, model and run
 * (the rest of *meta is zero). Not collective. WF_NOTFOUND when absent. */
wf_status wf_ckpt_peek(const char *dir, wf_ckpt_meta *meta);

/* 1 when DIR holds a manifest (a complete checkpoint, unless corrupt). */
int wf_ckpt_exists(const char *dir);

/* ---- calibration -------------------------------------------------------------------- */
#define WF_CALIB_MAX_GEMM 10
#define WF_CALIB_MAX_MSG 16
#define WF_CALIB_MAX_REPEATS 8
#define WF_CALIB_REPEATS 5       /* whole measurements of weft calibrate */
#define WF_CALIB_REPEATS_QUICK 3 /* of weft calibrate --quick */
#define WF_CALIB_OUTLIER_MADS 3.0
#define WF_CALIB_NOISY 0.10      /* a factor's spread over the repeats beyond which the machine is too noisy */

typedef struct {
    int quick;   /* keep the whole run under about 5 s */
    int threads; /* BLAS threads per rank (weft train runs one core per rank: 1) */
} wf_calib_opts;

typedef struct {
    int64_t m, n, k;
    double flops;         /* 2 m n k */
    double flops_per_s;   /* measured, mean over ranks */
} wf_calib_gemm;

typedef struct {
    int nranks, nodes, ranks_per_node;
    int threads;
    int cores;                     /* online cores of this node */
    double core_share;             /* cores / (ranks_per_node x threads), at most 1 */
    int cpu_clock;                 /* 1: compute timed on the thread CPU clock; 0: wall clock */
    char blas_core[32];            /* OpenBLAS's core type ("Haswell", "SkylakeX", ...) */
    int ngemm;                     /* compute: every rank at once, the mean over ranks */
    wf_calib_gemm gemm[WF_CALIB_MAX_GEMM];
    double gemm_peak_flops_per_s;  /* the best of gemm[] */
    double vector_flops_per_s;     /* the GELU forward on L1-resident data */
    double stream_bw_bps;          /* the fused AdamW pass's stream: 28 bytes per element / time */
    double copy_bw_bps;            /* memcpy of a large buffer: (read + written bytes) / time */
    double triad_bw_bps;           /* a = b + s c on large arrays: 3 arrays' bytes / time */
    double mem_bytes;              /* physical memory / ranks on this node */
    int nmsg;                      /* communication per message size (nranks >= 2) */
    double msg_bytes[WF_CALIB_MAX_MSG];
    double pingpong_s[WF_CALIB_MAX_MSG];
    double pingpong_inter_s[WF_CALIB_MAX_MSG];
    double allreduce_s[WF_CALIB_MAX_MSG];
    double p2p_alpha_s;            /* the alpha-beta fit of pingpong_s */
    double p2p_bw_bps;
    double inter_alpha_s;          /* fit of pingpong_inter_s */
    double inter_bw_bps;
    double allreduce_alpha_s;      /* fit of allreduce_s = alpha + bytes / bw (raw) */
    double allreduce_bw_bps;
    double allreduce_busbw_bps;    /* allreduce_bw_bps x 2 (p-1) / p (nccl-tests convention) */
    double overlap_slowdown;       /* compute time x this under an all-reduce (0: not measured) */
    double shared_sync_s;          /* core_share < 1: a small all-reduce's wait for peers off a
                                    * core (0: not measured) */
    int repeats;                   /* each number above: the median of this many measurements */
    int outliers;                  /* values rejected over all the factors */
    double spread;                 /* the widest (max - min) / median of a factor's kept values */
    char spread_factor[32];        /* which factor ("all-reduce bandwidth", ...) */
    int noisy;                     /* 1: spread > WF_CALIB_NOISY, or noisy_load */
    int noisy_load;                /* 1: the load average at the start exceeded the node's cores */
    double load_avg;               /* the 1-minute load average at the start */
    int allreduce_shm;             /* 1: the all-reduce timed is the shared-memory one, 0: MPI's */
} wf_calib_result;

/* Collective. Runs the measurements; every rank gets the same result. Sets
 * OpenBLAS's thread count to o->threads (and leaves it so). */
wf_status wf_calibrate_run(const wf_calib_opts *o, wf_calib_result *r);

/* wf_calibrate_run's n repeats (n <= WF_CALIB_MAX_REPEATS) combined into *r:
 * medians after outliers, the rates refitted, the noise fields set
 * (docs/interfaces.md, "runtime_io.h: the calibration"). */
void wf_calibrate_combine(const wf_calib_result *rs, int n, double load_avg, wf_calib_result *r);

/* The cluster these measurements describe (the "local" preset with the
 * measured bandwidth, peaks, efficiency table, memory and links) into c;
 * how each is derived: docs/interfaces.md, "runtime_io.h". */
wf_status wf_calibrate_to_cluster(const wf_calib_result *r, wf_cluster *c);

/* The human table of the measurements. */
void wf_calibrate_print(FILE *f, const wf_calib_result *r);

/* Fit of t = alpha + beta n, relative weights, alpha >= 0 (docs/interfaces.md);
 * fewer than two distinct n: WF_INVAL. */
wf_status wf_fit_alpha_beta(const double *n, const double *t, int k, double *alpha, double *beta);

#ifdef __cplusplus
}
#endif
#endif
