/* weft cost model, the estimate API: collective time on the hierarchy,
 * compute time per op, and the estimate of one training iteration of a plan
 * (wf_estimate_plan). What an estimate is made of -- the per-op and
 * per-section records and the layout descriptor that the simulator (sim/)
 * and the op-level plan (layout/) compose -- is in weft/cost_records.h.
 * ALGORITHMS.md §1 says how each part computes. */
#ifndef WEFT_COST_H
#define WEFT_COST_H

#include "weft/cluster.h"
#include "weft/models.h"
#include "weft/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- collectives --------------------------------------------------------- */
typedef enum {
    WF_COLL_ALLREDUCE,
    WF_COLL_REDUCE_SCATTER,
    WF_COLL_ALLGATHER,
    WF_COLL_ALLTOALL,
    WF_COLL_BROADCAST,
    WF_COLL_SENDRECV,
    WF_COLL_COUNT
} wf_coll_kind;

typedef enum { WF_ALGO_AUTO, WF_ALGO_RING, WF_ALGO_TREE } wf_coll_algo;

const char *wf_coll_name(wf_coll_kind k);

/* Closed forms of ALGORITHMS.md §1.2 on a flat group of p members; bytes is
 * the full vector's size n; alpha latency (s), bw_bps bandwidth (bytes/s).
 * WF_ALGO_AUTO takes the cheaper of ring and tree. p == 1 costs 0. */
double wf_coll_time_flat(wf_coll_kind k, wf_coll_algo algo, int64_t p, double bytes,
                         double alpha_s, double bw_bps);

/* A group of ranks laid on the cluster's hierarchy: span[l] = how many distinct
 * members it has along level l (product of spans = group size). */
typedef struct {
    int nlevels;
    int64_t span[WF_MAX_LEVELS];
} wf_group;

/* The group of `size` ranks whose numbers are `stride` apart (rank = tp_rank +
 * tp * (dp_rank + dp * pp_rank): tensor-parallel groups have stride 1, data-
 * parallel stride tp, pipeline stride tp*dp). */
wf_group wf_group_place(const wf_cluster *c, int64_t size, int64_t stride);
int64_t wf_group_size(const wf_group *g);

/* Time of a collective over a placed group: flat on the slowest level it spans
 * or hierarchical (reduce-scatter inside, all-reduce across, all-gather inside),
 * whichever is cheaper, with level efficiencies applied. A WF_COLL_SENDRECV
 * also pays the cluster's p2p_overhead_s (per message). */
double wf_coll_time(const wf_cluster *c, wf_coll_kind k, const wf_group *g, double bytes);

/* What wf_coll_time reads of a cluster: its levels, the reduction arithmetic's
 * speed and the per-message p2p overhead. A value small enough to keep inside
 * a mesh (sbp.h), so that boxing prices a collective exactly as the estimate
 * does. nlevels 0: no hierarchy (the mesh was given by hand). */
typedef struct {
    int nlevels;
    wf_level level[WF_MAX_LEVELS];
    double reduce_bps, p2p_overhead_s;
    int nccl; /* the cluster's coll_nccl: reduce-scatter, all-gather, broadcast as rings only */
} wf_coll_net;

wf_coll_net wf_coll_net_of(const wf_cluster *c);
/* wf_coll_time on that value: wf_coll_time(c, ...) == wf_coll_time_net(&net_of(c), ...). */
double wf_coll_time_net(const wf_coll_net *n, wf_coll_kind k, const wf_group *g, double bytes);

/* ---- compute --------------------------------------------------------------- */
/* Time of one op for one pass on the device: FLOPs/(peak x eff) + bytes/(bw x eff). */
double wf_compute_time(const wf_device *d, int matrix, wf_dtype dtype, double flops, double bytes);
/* The measured memory-bound kernel family an op of this kind runs as (norms,
 * activations, the loss, elementwise: wf_membound_time's kinds). */
wf_mb_kind wf_op_mb_kind(wf_op_kind kind);

/* ---- estimate ------------------------------------------------------------------- */
typedef struct {
    double compute, recompute, tp_comm, pp_comm, dp_comm, bubble, optimizer, exposed_comm;
    double ep_comm; /* of tp_comm, the experts' all-to-all and expert-tp collectives */
} wf_breakdown;

typedef struct {
    double iteration_time_s;
    double samples_per_s;
    double model_flops_per_iteration;  /* no-recompute count (Korthikanti's convention) */
    double tflops_per_device;          /* model FLOPs / time / devices / 1e12 */
    double mfu;
    double memory_per_device_bytes;    /* peak, most loaded device */
    double mem_weights_bytes;          /* weights + gradients + optimizer state */
    double mem_activation_bytes;
    double mem_buffer_bytes;           /* collective buffers, workspaces, reserved */
    double mem_layer_weights_bytes;    /* the part of mem_weights_bytes held for the repeated
                                          blocks (transformer layers) of that stage, without
                                          embedding and head; generic models: all of it */
    int fits;
    wf_breakdown breakdown;            /* seconds */
    int64_t devices;                   /* dp x tp x pp */
    int64_t micro_batches;             /* per pipeline: batch / (mbs x dp) */
    double bubble_max_s;               /* the longest any pipeline stage waits: the span of
                                          the slowest stage's passes and its bubble, less a
                                          stage's own m passes (a stage faster than the
                                          slowest, as the first beside a heavy head, also
                                          waits the difference m times); breakdown.bubble
                                          with equal stages, 0 without a pipeline */
} wf_estimate;

/* A cost context: the model's per-block costs on a cluster, cached so that a
 * search can call wf_estimate_plan millions of times (docs/cost-model.md).
 * Not thread-safe (the cache): use one context per thread. */
typedef struct wf_cost_ctx wf_cost_ctx;
wf_status wf_cost_ctx_create(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx **out);
void wf_cost_ctx_free(wf_cost_ctx *ctx);
/* Costs everything that follows under plan p's framework profile and its
 * attn, fp8, cp, grad and loss keys (wf_estimate_plan does this itself; the
 * simulator calls it before reading the records below). */
void wf_cost_ctx_use(wf_cost_ctx *ctx, const wf_plan *p);
/* Sets the variant of plan p (wf_cost_ctx_use) and returns p as the profile
 * runs it: zero as run (fsdp: 3 unless given) and overlap as run (local DDP
 * and DeepSpeed below ZeRO-3 reduce after backward). */
void wf_cost_plan_as_run(wf_cost_ctx *ctx, const wf_plan *p, wf_plan *out);
/* One line naming the profile and what it resolved for plan p, e.g.
 * "megatron-core (default): flash attention, bf16 matrix products, ..." */
int wf_cost_profile_line(const wf_cost_ctx *ctx, const wf_plan *p, char *buf, size_t cap);

/* Validates the plan against the model, the cluster and the batch (tp divides
 * heads, layers divisible by pp x vpp, batch by mbs x dp, dp x tp x pp equals
 * the devices used and no more than the cluster has) and estimates it. */
wf_status wf_estimate_plan(wf_cost_ctx *ctx, const wf_plan *p, int64_t batch, wf_estimate *out);

struct cJSON;
struct cJSON *wf_estimate_to_json(const wf_estimate *e);
/* The breakdown as the JSON object of `weft estimate` and `weft simulate`
 * (seconds: compute, recompute, tp_comm, pp_comm, dp_comm, bubble, optimizer,
 * exposed_comm). */
struct cJSON *wf_breakdown_to_json(const wf_breakdown *b);

#ifdef __cplusplus
}
#endif
#endif
