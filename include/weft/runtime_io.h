/* weft runtime I/O: data loaders, checkpoints, machine calibration, and the
 * small MPI-world helpers they share.
 *
 * This header never exposes MPI types (only src/runtime/ includes mpi.h). Every
 * function here works both when MPI is initialized (it uses MPI_COMM_WORLD's
 * rank and size) and when it is not (it behaves as rank 0 of 1). Functions
 * marked "collective" must be called by every rank of the world when MPI is up;
 * they agree on failure, so either every rank succeeds or every rank returns
 * the same error (the message of the lowest failing rank).
 *
 * Symbols in shape comments: B global batch, b this rank's slice of it,
 * S sequence length, F features per sample. */
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
/* Collective over MPI_COMM_WORLD, at start: every rank's n named values
 * (command-line arguments as strings) compared through hashes. WF_OK when all
 * ranks have the same; else WF_INVAL on every rank naming the first field
 * that differs and the ranks' values ("the ranks disagree on --steps: rank 0
 * has '5', rank 1 '7' ..."). Without MPI or on one rank: WF_OK. */
wf_status wf_mpi_agree_fields(const char *const names[], const char *const values[], int n);
/* The peer timeout (WEFT_PEER_TIMEOUT_S, default 120 s): a blocking MPI call
 * of the runtime that waits longer ends the process with status 1 and one
 * line (src/runtime/peers.c); wf_mpi_start starts that watchdog. */
double wf_mpi_peer_timeout_s(void);
wf_status wf_mpi_watchdog_start(int rank);
/* Collective: the worst (most negative) status over the ranks. When some rank
 * failed, every rank returns that status and the message of the lowest failing
 * rank (prefixed "rank R: " on the others). Without MPI it returns st. */
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

/* Reads the layout from a graph with one WF_ROLE_LABEL tensor and one
 * WF_ROLE_INPUT tensor (or several, one of them named "ids": the loader feeds
 * that one; the caller fills the others, e.g. BERT's token_types with zeros),
 * both with the batch on axis 0: classes is the last
 * axis of the logits of the cross-entropy op that reads the labels, vocab the
 * rows of the embedding table that reads the ids. Integer inputs (INT32 or
 * INT64 in the graph) are token ids, delivered as int32. */
wf_status wf_data_layout_from_graph(const wf_graph *g, wf_data_layout *out);
/* The same with the loader's input chosen by the caller (tensor in): the
 * engines pick it among a model's several data inputs (AlphaFold2's
 * target_feat beside msa_feat, constants and recycled inputs). */
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

/* This rank's contiguous slice of a global batch: samples [first, first+count)
 * with first = B*rank/nranks (integer division), so the slices of ranks
 * 0..nranks-1 concatenate to the whole batch. */
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

/* The fixed character vocabulary: id 0 is '\n', ids 1..95 are the printable
 * ASCII bytes ' '..'~' (byte - 31); every other byte (tab, CR, control bytes,
 * UTF-8 bytes) maps to the id of ' '. */
#define WF_TEXT_VOCAB 96
int wf_text_token(unsigned char c);
char wf_text_char(int id); /* '?' for an id outside the vocabulary */

/* An IDX file (gzip'd or plain; Fashion-MNIST / MNIST format): big-endian magic
 * 0x000008<ndim> for unsigned bytes, then ndim big-endian u32 dimensions, then
 * the bytes. A wrong magic (when expect_magic != 0), a dimension of 0, a short
 * or overlong payload is WF_FORMAT naming the file. */
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
    /* What else the run was made of, as "key=value" lines ("data=...\n
     * optimizer=adamw\n..."): kept in the manifest, compared key by key on
     * resume so that every mismatch is named. "" when not recorded. */
    char run[512];
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

/* Collective. Reads the checkpoint in DIR into the caller's tensors, which must
 * match the saved ones exactly (same set of names, dtypes and shapes), and into
 * *meta. `model` (NULL: not checked) must equal the saved model name, and the
 * world size the saved nranks. No checkpoint (no manifest) is WF_NOTFOUND; a
 * torn, truncated or corrupt file (size, magic, version, CRC) is WF_FORMAT; a
 * mismatch with what the caller expects is WF_INVAL. Every message names the
 * file and the reason. On any error the caller's tensors and meta are left
 * untouched, and load never writes to DIR. */
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
    double core_share;             /* the share of a core each rank's compute gets:
                                    * cores / (ranks_per_node x threads), at most 1 (ranks
                                    * that outnumber the cores take turns on them) */
    int cpu_clock;                 /* 1: compute and memory timed on the thread CPU clock
                                    * (one BLAS thread), so other jobs' use of the core is not
                                    * counted; 0: wall clock */
    char blas_core[32];            /* OpenBLAS's core type ("Haswell", "SkylakeX", ...) */
    /* compute, measured on every rank at once and averaged over ranks */
    int ngemm;
    wf_calib_gemm gemm[WF_CALIB_MAX_GEMM];
    double gemm_peak_flops_per_s;  /* the best of gemm[] */
    double vector_flops_per_s;     /* the runtime's GELU forward on L1-resident data, in the
                                    * graph's FLOPs per element */
    double stream_bw_bps;          /* an optimizer-like stream on large arrays (4 read, 3
                                    * written, as the fused AdamW pass): 28 bytes per element / time */
    double copy_bw_bps;            /* memcpy of a large buffer: (read + written bytes) / time */
    double triad_bw_bps;           /* a = b + s c on large arrays: 3 arrays' bytes / time */
    double mem_bytes;              /* physical memory / ranks on this node */
    /* communication (nranks >= 2), per message size: one-way ping-pong time
     * between rank 0 and another rank on its node (0 when it has none) and one
     * on another node (0 when the job has one node), and the MPI_Allreduce
     * time of a float vector over all ranks */
    int nmsg;
    double msg_bytes[WF_CALIB_MAX_MSG];
    double pingpong_s[WF_CALIB_MAX_MSG];
    double pingpong_inter_s[WF_CALIB_MAX_MSG];
    double allreduce_s[WF_CALIB_MAX_MSG];
    double p2p_alpha_s;            /* latency and bandwidth of pingpong_s: the intercept of the
                                    * alpha-beta fit, the largest message's rate after it */
    double p2p_bw_bps;
    double inter_alpha_s;          /* fit of pingpong_inter_s */
    double inter_bw_bps;
    double allreduce_alpha_s;      /* fit of allreduce_s = alpha + bytes / bw (raw) */
    double allreduce_bw_bps;
    double allreduce_busbw_bps;    /* allreduce_bw_bps x 2 (p-1) / p (nccl-tests convention) */
    double overlap_slowdown;       /* compute time x this while an all-reduce overlaps it,
                                    * measured (>= 1; 0 when not measured) */
    double shared_sync_s;          /* ranks that outnumber the cores (core_share < 1): what a
                                    * small blocking all-reduce between bursts of compute adds
                                    * to them, the wait for peers that are not on a core (0:
                                    * not measured) */
    /* repeats: every number above is the median of `repeats` whole
     * measurements (3 with quick, else 5) after outliers are rejected */
    int repeats;
    int outliers;                  /* values rejected over all the factors */
    double spread;                 /* the widest (max - min) / median of a factor's kept values */
    char spread_factor[32];        /* which factor ("all-reduce bandwidth", ...) */
    int noisy;                     /* 1: too noisy to calibrate: spread > WF_CALIB_NOISY, or
                                    * noisy_load */
    int noisy_load;                /* 1: the load average at the start exceeded the node's cores
                                    * (other processes compete for them: the messages, timed on
                                    * the wall clock, wait for descheduled peers) */
    double load_avg;               /* the 1-minute load average at the start */
    int allreduce_shm;             /* 1: allreduce_s and overlap_slowdown time the runtime's
                                    * shared-memory all-reduce (every rank on one node; see
                                    * docs/runtime.md), 0: MPI_Allreduce */
} wf_calib_result;

/* Collective. Runs the measurements (compute on every rank at once, message
 * passing when nranks >= 2); every rank gets the same result. With OpenBLAS
 * it sets the process's BLAS thread count to o->threads (and leaves it so). */
wf_status wf_calibrate_run(const wf_calib_opts *o, wf_calib_result *r);

/* What wf_calibrate_run does with its n repeats (n <= WF_CALIB_MAX_REPEATS):
 * *r is rs[0] with every factor replaced by its median after outliers are
 * rejected (WF_CALIB_OUTLIER_MADS scaled MADs; with 3 repeats or fewer, 2 x
 * WF_CALIB_NOISY of the median), the rates refitted, repeats, outliers,
 * spread, spread_factor and noisy set (noisy: a factor the cost model uses
 * spread beyond WF_CALIB_NOISY over its kept values, or noisy_load: load_avg
 * above rs[0].cores when that is known), load_avg = load_avg. */
void wf_calibrate_combine(const wf_calib_result *rs, int n, double load_avg, wf_calib_result *r);

/* The cluster these measurements describe (the "local" preset with the
 * measured bandwidth, peaks, efficiency table, memory and links) into c;
 * how each is derived: docs/interfaces.md, "runtime_io.h". */
wf_status wf_calibrate_to_cluster(const wf_calib_result *r, wf_cluster *c);

/* The human table of the measurements. */
void wf_calibrate_print(FILE *f, const wf_calib_result *r);

/* Least-squares fit of t = alpha + beta n with relative weights (each point's
 * residual divided by its t, so small messages fix alpha and large ones beta).
 * alpha is clamped at 0 (then beta is refitted through the origin). At least
 * two distinct n are needed (else WF_INVAL). */
wf_status wf_fit_alpha_beta(const double *n, const double *t, int k, double *alpha, double *beta);

#ifdef __cplusplus
}
#endif
#endif
