/* weft cluster: the "measured" section of a cluster file (docs/cluster-format.md,
 * "Calibration on GPUs").
 *
 * `weft calibrate --gpu` writes the raw points it measured next to the factors
 * it fitted from them, so that a later model (a shape-aware device model, a
 * refit) can use the points themselves, and a reader can see what the factors
 * rest on. The points are plain data: matrix products by shape and dtype,
 * fused attention by shape, the device-to-device copy, the device memory a
 * process can allocate, and collectives by operation, scope and message size
 * (nccl-tests' conventions for sizes and bus bandwidth).
 *
 * This header is part of the cluster module (plain C, no CUDA): the cluster
 * reader validates the section, the gpu module fills it, the fit reads it.
 * The section is provenance: wf_cluster_from_json checks it and does not keep
 * it in wf_cluster; wf_cluster_measured_from_json reads it into this struct. */
#ifndef WEFT_CLUSTER_MEASURED_H
#define WEFT_CLUSTER_MEASURED_H

#include <stdint.h>

#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WF_MEASURED_MAX_KERNELS 512
#define WF_MEASURED_MAX_ATTN 64
#define WF_MEASURED_MAX_COLL 384

/* The operand types of a measured matrix product. tf32 is fp32 storage with
 * the tensor cores' reduced-precision multiply; fp8 is E4M3 inputs with a
 * bf16 output (fp32 accumulation throughout). */
typedef enum {
    WF_MDT_FP32,
    WF_MDT_TF32,
    WF_MDT_BF16,
    WF_MDT_FP16,
    WF_MDT_FP8,
    WF_MDT_COUNT
} wf_mdtype;

/* Name in the file ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3") and the
 * bytes of one input element and of one output element. */
const char *wf_mdtype_name(wf_mdtype t);
int wf_mdtype_parse(const char *name, wf_mdtype *out);
double wf_mdtype_in_bytes(wf_mdtype t);
double wf_mdtype_out_bytes(wf_mdtype t);

/* The collectives measured, as nccl-tests names and sizes them. */
typedef enum {
    WF_MCOLL_ALLREDUCE,
    WF_MCOLL_REDUCE_SCATTER,
    WF_MCOLL_ALLGATHER,
    WF_MCOLL_ALLTOALL,
    WF_MCOLL_SENDRECV,
    WF_MCOLL_COUNT
} wf_mcoll;

const char *wf_mcoll_name(wf_mcoll op);
int wf_mcoll_parse(const char *name, wf_mcoll *out);
/* nccl-tests' bus bandwidth factor for `ranks` ranks: busBw = algBw x factor,
 * algBw = bytes / seconds with bytes the full vector (the all-reduce's input,
 * the reduce-scatter's input, the all-gather's output, one rank's all-to-all
 * send buffer, the send/recv message). */
double wf_mcoll_busbw_factor(wf_mcoll op, int64_t ranks);

/* C[M,N] = A[M,K] x B[K,N]: 2 M N K FLOPs in `seconds` (median of trials). */
typedef struct {
    int64_t m, n, k;
    wf_mdtype dtype;
    double seconds;
} wf_kernel_point;

/* Fused scaled-dot-product attention, bf16: forward and backward times. */
typedef struct {
    int64_t batch, heads, kv_heads, seq, head_dim;
    int causal;
    double fwd_s, bwd_s;
} wf_attn_point;

/* Scope of a collective: the ranks of one node (the cluster's level 0), or
 * every rank of the job (spanning the nodes: the outermost level). */
typedef enum { WF_MSCOPE_NODE, WF_MSCOPE_JOB, WF_MSCOPE_COUNT } wf_mscope;
const char *wf_mscope_name(wf_mscope s);

typedef struct {
    wf_mcoll op;
    wf_mscope scope;
    int64_t ranks;    /* ranks in the communicator */
    double bytes;     /* nccl-tests' size (see wf_mcoll_busbw_factor) */
    double seconds;   /* per operation, averaged over the ranks */
} wf_coll_point;

typedef struct {
    /* provenance */
    char date[32];            /* ISO 8601 UTC, "2026-11-26T12:00:00Z" */
    char device[64];          /* the device's name as the driver reports it */
    int cc_major, cc_minor;   /* compute capability */
    int sms;                  /* streaming multiprocessors */
    int devices, nodes, devices_per_node; /* the job measured */
    char cuda_runtime[16], cuda_driver[16], cublaslt[16], nccl[16]; /* versions; "" = absent */
    char attention_note[160]; /* why attention is not measured ("" when it is) */
    /* the device */
    double launch_s;          /* a tiny matrix product launched back to back: time per launch */
    double mem_total_bytes;   /* cudaMemGetInfo total */
    double mem_free_bytes;    /* cudaMemGetInfo free, with this process's context up */
    double mem_alloc_bytes;   /* the largest single allocation that succeeded */
    double copy_bytes;        /* device-to-device copy of this many bytes ... */
    double copy_s;            /* ... takes this long (reads + writes 2 x copy_bytes) */
    int nkernels;
    wf_kernel_point kernels[WF_MEASURED_MAX_KERNELS];
    int nattn;
    wf_attn_point attn[WF_MEASURED_MAX_ATTN];
    int ncoll;
    wf_coll_point coll[WF_MEASURED_MAX_COLL];
} wf_cluster_measured;

struct cJSON;
/* Reads (every field checked, unknown fields rejected; the message names
 * ctx.field) and writes the "measured" object. */
wf_status wf_cluster_measured_from_json(const struct cJSON *j, const char *ctx, wf_cluster_measured *out);
struct cJSON *wf_cluster_measured_to_json(const wf_cluster_measured *m);
/* Reads the "measured" section of a cluster file; WF_NOTFOUND (message naming
 * the file) when the file has none. */
wf_status wf_cluster_measured_load(const char *path, wf_cluster_measured *out);

#ifdef __cplusplus
}
#endif
#endif
