/* weft cluster: the device kind and the hierarchy of links a job runs on.
 *
 * A cluster = one device kind (peak FLOP/s per dtype on the matrix unit and on
 * the vector unit, memory, memory bandwidth, efficiency tables) and a hierarchy
 * of levels, innermost first: level 0 groups devices into nodes (NVSwitch),
 * level 1 groups nodes into the cluster (InfiniBand / Ethernet). Each level has
 * a per-device bandwidth, a latency and an efficiency factor. Devices are
 * numbered node-major: device d sits in node d / level[0].size.
 *
 * Calibration changes data here (the efficiency tables and factors), never code. */
#ifndef WEFT_CLUSTER_H
#define WEFT_CLUSTER_H

#include "weft/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WF_MAX_LEVELS 4
#define WF_MAX_EFF 8

/* Matrix-unit efficiency by the FLOPs of one op: the first entry whose
 * min_flops <= the op's FLOPs applies (entries sorted by min_flops, descending;
 * the cost model may interpolate in log(FLOPs) between neighbours). */
typedef struct {
    double min_flops;
    double eff;
} wf_eff_point;

/* The measured-kernel device model (src/cluster/kernel_model.c, docs/cost-model.md
 * "Device model"). A matrix product C[M,N] = A[M,K] B[K,N] runs as tiles of
 * tile_m x tile_n outputs spread over the SMs; each wave of tiles walks K plus
 * wave_k steps of epilogue, the kernel adds ramp_k steps of pipeline fill and
 * drain, wave quantization counts `quant` of the last partial wave, and the
 * launch costs launch_s. The product is never faster than its operands' bytes
 * at the copy bandwidth. cuBLAS picks the faster tile orientation. */
typedef enum {
    WF_GEMM_FP32,  /* strict fp32 on the vector unit (SIMT) */
    WF_GEMM_TF32,  /* fp32 inputs on the tensor cores */
    WF_GEMM_HALF,  /* bf16 / fp16 */
    WF_GEMM_FP8,   /* E4M3 / E5M2 */
    WF_GEMM_KINDS
} wf_gemm_kind;

typedef struct {
    int tile_m, tile_n; /* output tile of one SM (0: kind not fitted, FLOPs table applies) */
    double eff;         /* fraction of the kind's peak one SM reaches inside the K loop */
    double ramp_k;      /* per kernel: pipeline fill and drain, in K steps */
    double wave_k;      /* per wave: the epilogue (store of C), in K steps */
    double quant;       /* 0..1: how much of the last partial wave costs a whole wave */
    double launch_s;    /* fixed time per product (launch, dispatch) */
} wf_gemm_fit;

/* Attention kernels, by implementation. The fused (flash) kernels walk query
 * blocks of 128 rows against key blocks of 128; each query block costs its
 * key blocks (all of them, or those up to the diagonal when causal) plus
 * ramp blocks of prologue/epilogue (loading Q, writing O and the log-sum-exp;
 * backward: dQ accumulation). Efficiency by head dim and pass. */
typedef enum {
    WF_ATTN_IMPL_UNFUSED, /* two batched GEMMs, softmax and dropout kernels */
    WF_ATTN_IMPL_FA2,     /* FlashAttention-2 (flash-attn 2.x; PyTorch SDPA's flash backend on A100) */
    WF_ATTN_IMPL_SDPA,    /* torch.nn.functional.scaled_dot_product_attention as PyTorch dispatches it */
    WF_ATTN_IMPL_TE,      /* Transformer Engine's fused attention (cuDNN; FlashAttention-3 class on H100) */
    WF_ATTN_IMPL_COUNT
} wf_attn_impl;

#define WF_ATTN_HEAD_DIMS 5 /* head dims 64, 96, 128, 192, 256 (interpolated between, clamped outside) */
typedef struct {
    double eff_fwd[WF_ATTN_HEAD_DIMS]; /* fraction of the 16-bit matrix peak, forward (0: not fitted) */
    double eff_bwd[WF_ATTN_HEAD_DIMS]; /* backward (2.5x the forward's matrix FLOPs) */
    double ramp_fwd, ramp_bwd;         /* per query block, in key blocks */
    double launch_fwd_s, launch_bwd_s; /* fixed time per call (the backward's preprocessing
                                          and dQ conversion kernels included) */
} wf_attn_fit;

/* Memory-bound kernels by kind: achieved fraction of mem_bw_bps forward and
 * backward (0: mem_eff), measured on the framework's own kernels. */
typedef enum {
    WF_MB_ELEM,      /* add, mul, bias, dropout, rotary, casts, copies */
    WF_MB_ACT,       /* gelu, silu, relu, tanh */
    WF_MB_LAYERNORM, /* fused layer norm */
    WF_MB_RMSNORM,   /* fused RMS norm */
    WF_MB_LOSS,      /* softmax cross-entropy on fp32-upcast logits */
    WF_MB_KINDS
} wf_mb_kind;

typedef struct {
    char name[48];
    double matrix_flops[WF_DTYPE_COUNT]; /* peak FLOP/s of the matrix unit per dtype (0: unsupported) */
    double vector_flops[WF_DTYPE_COUNT]; /* peak FLOP/s of the vector unit per dtype */
    double mem_bytes;                    /* device memory */
    double mem_bw_bps;                   /* memory bandwidth */
    double mem_eff;                      /* achieved fraction of mem_bw_bps */
    double vector_eff;                   /* achieved fraction of vector peak */
    int neff;
    wf_eff_point matrix_eff[WF_MAX_EFF];
    double op_overhead_s;                /* shortest time of one op and pass (launch, dispatch) */
    double fp8_flops;                    /* dense FP8 peak of the matrix unit (0: no FP8 unit) */
    double fp8_eff;                      /* FP8 products reach fp8_eff x the matrix_eff curve of fp8_flops */
    /* Measured-kernel model (sms > 0): replaces matrix_eff and fp8_eff for the
     * products and attention kernels it fits. */
    double kernel_model;                 /* 1: cost ops by the measured-kernel model below;
                                            0: by the FLOPs table (matrix_eff) and mem_eff */
    int sms;                             /* streaming multiprocessors (0: no kernel model) */
    wf_gemm_fit gemm[WF_GEMM_KINDS];
    /* Per kind, 0: the fit's one tile; > 0: the library also carries 128x128,
     * 128x64 and 64x64 tiles and runs the fastest, each K loop no faster than
     * its operands arrive at this many bytes/s per SM (2 tm tn / ((tm + tn)
     * element bytes) FLOPs per byte). */
    double gemm_feed_bps[WF_GEMM_KINDS];
    wf_attn_fit attn[WF_ATTN_IMPL_COUNT];
    double mb_eff[WF_MB_KINDS][2];       /* memory-bound kernels, [kind][0 forward, 1 backward] */
    double opt_eff;                      /* fused AdamW step: fraction of mem_bw_bps (0: mem_eff) */
} wf_device;

typedef struct {
    char name[32];     /* "node", "cluster" */
    int64_t size;      /* members at this level: devices per node, nodes in the cluster */
    double bw_bps;     /* bandwidth per device at this level, each direction */
    double latency_s;  /* per message */
    double eff;        /* achieved fraction of bw_bps */
} wf_level;

typedef struct {
    char name[128];            /* preset name with overrides, or the file path */
    wf_device dev;
    int nlevels;
    wf_level level[WF_MAX_LEVELS];
    /* Calibration factors, each with a physical meaning (documented in docs/cluster-format.md). */
    double overlap_slowdown;   /* compute time x this while communication overlaps it (>= 1) */
    double reduce_bps;         /* speed of the reduction arithmetic in collectives (0: ignored) */
    double mem_reserved_bytes; /* memory the framework keeps (context, allocator slack) */
    double grad_bytes;         /* bytes per gradient element the framework keeps and reduces:
                                  2 (fp16) or 4 (fp32 accumulation, as Megatron-LM does) */
    double p2p_overhead_s;     /* fixed software cost of one point-to-point message (a pipeline
                                  send/recv): the framework's p2p call, the stream synchronization
                                  after it and the re-launch of the next chunk; added by
                                  wf_coll_time to every WF_COLL_SENDRECV */
    double op_gap_s;           /* GPU idle time per op and pass between its kernels: the
                                  framework's module call, hooks and FP8 scaling bookkeeping
                                  (a software factor, fitted on published runs) */
    double coll_nccl;          /* 1: collectives as NCCL runs them: all-reduce as a ring or a tree,
                                  reduce-scatter, all-gather and broadcast as rings only (NCCL
                                  2.7.8, src/graph/tuning.cc at 033d7995: every collective but
                                  all-reduce skips the non-ring algorithms); 0: the cheaper of
                                  ring and tree (recursive halving/doubling, as MPI libraries
                                  run them) for every collective */
} wf_cluster;

/* A preset with overrides ("dgx-a100:nodes=16"), or a cluster JSON file path.
 * Override keys: nodes, devices_per_node (plus any calibration factor by name). */
wf_status wf_cluster_lookup(const char *spec, wf_cluster *out);
int64_t wf_cluster_devices(const wf_cluster *c);
/* The cluster a job of nranks ranks plans, costs and runs on: spec (a preset
 * with overrides or a file, as wf_cluster_lookup) when given, else the
 * `local` preset, widened to one device per rank
 * ("local:devices_per_node=<nranks>") when the job has more ranks than it has
 * devices (ranks then share cores). The one rule of `weft train` for --plan
 * auto, --comm auto, lowering and the timed schedules. */
wf_status wf_cluster_of_job(const char *spec, int nranks, wf_cluster *out);
/* A preset by exact name (no overrides, no files); WF_NOTFOUND when unknown. */
wf_status wf_cluster_from_preset(const char *name, wf_cluster *out);
/* Applies "key=value" overrides already parsed into a spec (nodes,
 * devices_per_node, calibration factors); unknown keys are WF_INVAL. */
wf_status wf_cluster_apply_overrides(wf_cluster *c, wf_spec *s);
/* Checks every field is in range (levels non-empty, sizes >= 1, bandwidths > 0,
 * efficiencies in (0, 1], efficiency table sorted); the message names the field. */
wf_status wf_cluster_check(const wf_cluster *c);

struct cJSON;
wf_status wf_cluster_from_json(const struct cJSON *j, const char *ctx, wf_cluster *out);
struct cJSON *wf_cluster_to_json(const wf_cluster *c);

/* The scalar factors settable by name: `preset:key=value` overrides and the
 * cluster file's fields. One table drives the overrides, their error hint and
 * `weft clusters`' listing. */
typedef struct {
    const char *key;  /* override name (the file's field name, device. ones inside "device") */
    size_t offset;    /* of the double in wf_cluster */
    double lo, hi;    /* accepted range */
    const char *unit; /* "s", "bytes", "B/s" or "" (a ratio or a count) */
    const char *help; /* what it means, one line */
} wf_cluster_factor;

int wf_cluster_factor_count(void);
const wf_cluster_factor *wf_cluster_factor_at(int i);
double wf_cluster_factor_value(const wf_cluster *c, const wf_cluster_factor *f);

/* Time of `count` independent products C[M,N] = A[M,K] B[K,N] of one kind
 * (one launch), by the measured-kernel model; falls back to the FLOPs table
 * (wf_device_matrix_eff) when the device has no fit for the kind. A linear
 * layer's forward is (tokens, out, in), its data gradient (tokens, in, out),
 * its weight gradient (out, in, tokens): the pass enters through the shape. */
double wf_gemm_time(const wf_device *d, wf_gemm_kind kind, double count, double M, double N, double K);
/* Unaligned products (src/cluster/gemm_align.c): the leading dimensions of
 * C[M,N] = A[M,K] B[K,N], and whether A and B are contiguous along K. */
typedef struct {
    int a_kmajor, b_kmajor;
    double lda, ldb, ldc; /* elements */
} wf_gemm_layout;
/* The elements a leading dimension must be a multiple of for the fast
 * kernels (16 bytes; 1 for SIMT fp32); whether layout l meets it. */
int wf_gemm_align_elems(wf_gemm_kind kind);
int wf_gemm_layout_aligned(wf_gemm_kind kind, const wf_gemm_layout *l);
/* A linear layer's (in -> out, row-major tensors) three products as
 * wf_gemm_time takes them: forward, data gradient, weight gradient. */
void wf_gemm_linear_layouts(double in, double out, wf_gemm_layout pass[3]);
/* Time of the alignment-1 fallback kernels for the product (0: no model for
 * this device or kind). */
double wf_gemm_align1_time(const wf_device *d, wf_gemm_kind kind, double count, double M, double N, double K,
                           const wf_gemm_layout *l);
/* The gemm kind a product in dtype runs as (fp8: E4M3 products). */
wf_gemm_kind wf_gemm_kind_of(wf_dtype dtype, int fp8);
/* Time of one fused attention call: bh = batch x heads, S queries against
 * Skv keys of head dim D, causal or not, forward (bwd 0) or backward. Returns
 * a negative value when impl has no fit on this device (the caller costs it
 * unfused). */
double wf_attn_time(const wf_device *d, wf_attn_impl impl, double bh, double S, double Skv, double D,
                    int causal, int bwd);
const char *wf_attn_impl_name(wf_attn_impl impl);
/* Whether ops are costed by the measured-kernel model (kernel_model on and
 * the device has one). */
int wf_device_kernels(const wf_device *d);
/* Time of a memory-bound kernel moving `bytes` (reads plus writes). */
double wf_membound_time(const wf_device *d, wf_mb_kind kind, int bwd, double bytes);
/* Achieved bandwidth of the optimizer step. */
double wf_device_opt_bps(const wf_device *d);

/* Matrix efficiency of one op of `flops` FLOPs on this device. */
double wf_device_matrix_eff(const wf_device *d, double flops);

typedef struct {
    const char *name;
    const char *summary;
} wf_cluster_preset;
int wf_cluster_preset_count(void);
const wf_cluster_preset *wf_cluster_preset_at(int i);

#ifdef __cplusplus
}
#endif
#endif
