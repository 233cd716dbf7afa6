/* weft cost: a model of PyTorch's CUDA caching allocator, and the
 * allocation and free events of one eager training step under the
 * sw=pytorch profile replayed through it (docs/cost-model.md, "The caching
 * allocator").
 *
 * The allocator follows c10/cuda/CUDACachingAllocator.cpp of PyTorch at
 * commit 001074d25084fdb87a799823e395a50f5ec044d3 with its default settings
 * (no PYTORCH_CUDA_ALLOC_CONF: max_split_size unlimited, no expandable
 * segments, no garbage collection, one stream). */
#ifndef WEFT_COST_ALLOC_H
#define WEFT_COST_ALLOC_H

#include <stdint.h>

#include "cost/cost-impl.h"

/* The allocator's constants (the file above). */
#define WF_ALLOC_MIN_BLOCK 512u          /* kMinBlockSize: every size rounds up to it */
#define WF_ALLOC_SMALL_SIZE 1048576u     /* kSmallSize: the largest small request */
#define WF_ALLOC_SMALL_BUFFER 2097152u   /* kSmallBuffer: small requests share 2 MiB segments */
#define WF_ALLOC_MIN_LARGE 10485760u     /* kMinLargeAlloc: below it a large request's segment is */
#define WF_ALLOC_LARGE_BUFFER 20971520u  /* kLargeBuffer (20 MiB) */
#define WF_ALLOC_ROUND_LARGE 2097152u    /* kRoundLarge: larger segments round up to 2 MiB */

typedef struct wf_alloc wf_alloc;

typedef struct {
    uint64_t allocated;      /* bytes of blocks handed out (allocated_bytes, as block sizes) */
    uint64_t reserved;       /* bytes of segments obtained from the device (reserved_bytes) */
    uint64_t peak_allocated; /* torch.cuda.max_memory_allocated */
    uint64_t peak_reserved;  /* torch.cuda.max_memory_reserved */
    int64_t segments;        /* live segments */
    int64_t device_allocs;   /* cudaMalloc calls that succeeded */
    int64_t device_frees;    /* segments released (cudaFree) */
    int64_t retries;         /* allocations retried after releasing the cache */
    int ooms;                /* allocations that failed even after the retry */
    uint64_t oom_request;    /* the first failed allocation's segment size */
    uint64_t oom_reserved;   /* reserved bytes when it failed */
} wf_alloc_stats;

/* A new allocator whose device accepts at most cap_bytes of segments in all
 * (cudaMalloc fails beyond; 0: unlimited). NULL when out of memory. */
wf_alloc *wf_alloc_new(uint64_t cap_bytes);
void wf_alloc_free_all(wf_alloc *a);

/* Serves a request of `bytes` (> 0): a block handle >= 0, -1 when the
 * device is out of memory even after the cache was released (the stats
 * record it; nothing changes), -2 when the host is. */
int64_t wf_alloc_malloc(wf_alloc *a, uint64_t bytes);
/* Returns block h to the cache (merging it with free neighbours). */
void wf_alloc_release(wf_alloc *a, int64_t h);
/* The size of block h (the request rounded, or the whole cached block). */
uint64_t wf_alloc_block_size(const wf_alloc *a, int64_t h);
const wf_alloc_stats *wf_alloc_stats_of(const wf_alloc *a);

/* The allocator's size rules: the rounded request, and the segment a new
 * allocation of that rounded size asks the device for. */
uint64_t wf_alloc_round(uint64_t bytes);
uint64_t wf_alloc_segment_size(uint64_t rounded);

/* One sw=pytorch training step of a transformer replayed through the
 * allocator (alloc_step.c): the persistent state, then `iters` iterations
 * (forward, loss, backward, clip_grad_norm_, fused AdamW, zero_grad) at
 * micro-batch mbs on a device whose segments may total cap_bytes (0:
 * unlimited). */
typedef struct {
    int applies;              /* 0: the plan is outside the replay (the caller keeps its bound) */
    int fits;                 /* no allocation failed */
    double peak_allocated;    /* bytes */
    double peak_reserved;     /* bytes (at a failure: reserved then plus the failed request) */
    double persistent;        /* weights, gradient buckets and Adam's moments (allocated) */
    wf_alloc_stats stats;
} wf_pt_step_memory;

wf_status wf_cost_pytorch_step_memory(const wf_cost_ctx *ctx, const wf_plan *p, int64_t mbs, int iters,
                                      double cap_bytes, wf_pt_step_memory *out);

/* The memory a PyTorch process holds outside its caching allocator: the
 * CUDA context (0.52 GiB measured on an H100 with PyTorch 2.11, CUDA 13.0:
 * tests/data/h100-pytorch-steps-2026-11-26.json, "source"). */
#define WF_PT_CONTEXT_BYTES (0.52 * 1073741824.0)

/* Iterations replayed: the first allocates Adam's moments, the second
 * rebuilds DDP's buckets, the third runs as every later one. */
#define WF_PT_ITERATIONS 3

/* sw=pytorch's memory per device (memory.c): the replay's peak reserve plus
 * the context, or -1 where the replay does not apply. */
double wf_cost_pytorch_memory(const wf_cost_ctx *ctx, const wf_plan *p, int64_t mbs);

#endif
