/* weft cost: PyTorch's CUDA caching allocator, modelled from
 * c10/cuda/CUDACachingAllocator.cpp at commit
 * 001074d25084fdb87a799823e395a50f5ec044d3 (DeviceCachingAllocator) with
 * the default configuration: one stream, max_split_size unlimited, no
 * expandable segments, no garbage-collection threshold.
 *
 *  - malloc: the request is rounded up to 512 bytes (round_size with no
 *    roundup_power2_divisions); requests up to 1 MiB (kSmallSize) use the
 *    small pool, others the large pool (get_pool).
 *  - get_free_block: the smallest cached block of that pool at least as
 *    large (the pool's set orders blocks by size, then address).
 *  - Otherwise alloc_block asks the device for a segment of
 *    get_allocation_size: 2 MiB for a small request, 20 MiB for a large one
 *    under 10 MiB (kMinLargeAlloc), else the size rounded up to 2 MiB. If
 *    the device refuses, release_available_cached_blocks does nothing (it
 *    only acts with a max_split_size), release_cached_blocks frees every
 *    cached segment that is not split, and the allocation is retried once;
 *    a second refusal is the out-of-memory error.
 *  - should_split: a small-pool block splits when at least 512 bytes
 *    remain; a large-pool block when more than 1 MiB remains. The block
 *    handed out counts whole in allocated_bytes when it is not split.
 *  - free_block merges the freed block with free neighbours of its segment
 *    (try_merge_blocks); nothing goes back to the device until a release.
 * The device's refusal is modelled as segments totalling more than the
 * capacity given (cudaMalloc's own granularity is the 2 MiB every segment
 * is a multiple of). */
#include "cost/alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t addr, size;
    int64_t prev, next; /* neighbours in the segment, -1 none */
    int64_t fpos;       /* index in its pool's free list, -1 when allocated or dead */
    int pool;           /* 0 small, 1 large */
    int allocated;
    int live;
} blk;

struct wf_alloc {
    blk *b;
    int64_t n;
    int cap;       /* wf_grow's capacities (at most INT_MAX elements each) */
    int64_t *dead; /* reusable slots */
    int64_t ndead;
    int capdead;
    int64_t *fl[2]; /* free (cached) blocks per pool */
    int64_t nfl[2];
    int capfl[2];
    uint64_t next_addr, cap_bytes;
    wf_alloc_stats st;
};

uint64_t wf_alloc_round(uint64_t bytes)
{
    if (bytes < WF_ALLOC_MIN_BLOCK)
        return WF_ALLOC_MIN_BLOCK;
    return WF_ALLOC_MIN_BLOCK * ((bytes + WF_ALLOC_MIN_BLOCK - 1) / WF_ALLOC_MIN_BLOCK);
}

uint64_t wf_alloc_segment_size(uint64_t rounded)
{
    if (rounded <= WF_ALLOC_SMALL_SIZE)
        return WF_ALLOC_SMALL_BUFFER;
    if (rounded < WF_ALLOC_MIN_LARGE)
        return WF_ALLOC_LARGE_BUFFER;
    return WF_ALLOC_ROUND_LARGE * ((rounded + WF_ALLOC_ROUND_LARGE - 1) / WF_ALLOC_ROUND_LARGE);
}

wf_alloc *wf_alloc_new(uint64_t cap_bytes)
{
    wf_alloc *a = calloc(1, sizeof *a);
    if (a)
        a->cap_bytes = cap_bytes;
    return a;
}

void wf_alloc_free_all(wf_alloc *a)
{
    if (!a)
        return;
    free(a->b);
    free(a->dead);
    free(a->fl[0]);
    free(a->fl[1]);
    free(a);
}

const wf_alloc_stats *wf_alloc_stats_of(const wf_alloc *a) { return &a->st; }

uint64_t wf_alloc_block_size(const wf_alloc *a, int64_t h)
{
    return h >= 0 && h < a->n && a->b[h].live ? a->b[h].size : 0;
}

/* A block slot (reused when one died); -1 when out of host memory. */
static int64_t new_blk(wf_alloc *a)
{
    int64_t i;
    if (a->ndead > 0) {
        i = a->dead[--a->ndead];
    } else {
        if (wf_grow(&a->b, &a->cap, a->n + 1, sizeof *a->b, 64))
            return -1;
        i = a->n++;
    }
    memset(&a->b[i], 0, sizeof a->b[i]);
    a->b[i].prev = a->b[i].next = a->b[i].fpos = -1;
    a->b[i].live = 1;
    return i;
}

static int kill_blk(wf_alloc *a, int64_t i)
{
    a->b[i].live = 0;
    if (wf_grow(&a->dead, &a->capdead, a->ndead + 1, sizeof *a->dead, 64))
        return -1;
    a->dead[a->ndead++] = i;
    return 0;
}

static int fl_insert(wf_alloc *a, int64_t i)
{
    int p = a->b[i].pool;
    if (wf_grow(&a->fl[p], &a->capfl[p], a->nfl[p] + 1, sizeof *a->fl[p], 64))
        return -1;
    a->b[i].fpos = a->nfl[p];
    a->fl[p][a->nfl[p]++] = i;
    return 0;
}

static void fl_remove(wf_alloc *a, int64_t i)
{
    int p = a->b[i].pool;
    int64_t k = a->b[i].fpos, last = a->fl[p][--a->nfl[p]];
    a->fl[p][k] = last;
    a->b[last].fpos = k;
    a->b[i].fpos = -1;
}

/* get_free_block: the smallest cached block of the pool that holds size
 * (the lowest address among equals), or -1. */
static int64_t best_fit(const wf_alloc *a, int pool, uint64_t size)
{
    int64_t best = -1;
    for (int64_t k = 0; k < a->nfl[pool]; k++) {
        const blk *c = &a->b[a->fl[pool][k]];
        if (c->size < size)
            continue;
        if (best < 0 || c->size < a->b[best].size || (c->size == a->b[best].size && c->addr < a->b[best].addr))
            best = a->fl[pool][k];
    }
    return best;
}

/* alloc_block: a new segment, or -1 when the device refuses (-2: host). */
static int64_t device_alloc(wf_alloc *a, int pool, uint64_t seg)
{
    if (a->cap_bytes > 0 && a->st.reserved + seg > a->cap_bytes)
        return -1;
    int64_t i = new_blk(a);
    if (i < 0)
        return -2;
    a->b[i].addr = a->next_addr;
    a->b[i].size = seg;
    a->b[i].pool = pool;
    a->next_addr += seg;
    a->st.reserved += seg;
    a->st.segments++;
    a->st.device_allocs++;
    if (a->st.reserved > a->st.peak_reserved)
        a->st.peak_reserved = a->st.reserved;
    return i;
}

/* release_cached_blocks: every cached block that is a whole segment goes
 * back to the device. */
static int release_cached(wf_alloc *a)
{
    for (int p = 0; p < 2; p++)
        for (int64_t k = 0; k < a->nfl[p];) {
            int64_t i = a->fl[p][k];
            if (a->b[i].prev >= 0 || a->b[i].next >= 0) {
                k++;
                continue;
            }
            fl_remove(a, i);
            a->st.reserved -= a->b[i].size;
            a->st.segments--;
            a->st.device_frees++;
            if (kill_blk(a, i))
                return -1;
        }
    return 0;
}

int64_t wf_alloc_malloc(wf_alloc *a, uint64_t bytes)
{
    uint64_t size = wf_alloc_round(bytes);
    int pool = size <= WF_ALLOC_SMALL_SIZE ? 0 : 1;
    int64_t i = best_fit(a, pool, size);
    if (i >= 0) {
        fl_remove(a, i);
    } else {
        uint64_t seg = wf_alloc_segment_size(size);
        i = device_alloc(a, pool, seg);
        if (i == -1) {
            a->st.retries++;
            if (release_cached(a))
                return -2;
            i = device_alloc(a, pool, seg);
        }
        if (i == -2)
            return -2;
        if (i == -1) {
            if (a->st.ooms++ == 0) {
                a->st.oom_request = seg;
                a->st.oom_reserved = a->st.reserved;
            }
            return -1;
        }
    }
    /* should_split, then alloc_found_block: the block keeps the front. */
    uint64_t rest = a->b[i].size - size;
    if (pool == 0 ? rest >= WF_ALLOC_MIN_BLOCK : rest > WF_ALLOC_SMALL_SIZE) {
        int64_t r = new_blk(a);
        if (r < 0)
            return -2;
        blk *b = &a->b[i], *R = &a->b[r];
        R->addr = b->addr + size;
        R->size = rest;
        R->pool = pool;
        R->prev = i;
        R->next = b->next;
        if (b->next >= 0)
            a->b[b->next].prev = r;
        b->next = r;
        b->size = size;
        if (fl_insert(a, r))
            return -2;
    }
    a->b[i].allocated = 1;
    a->st.allocated += a->b[i].size;
    if (a->st.allocated > a->st.peak_allocated)
        a->st.peak_allocated = a->st.allocated;
    return i;
}

/* try_merge_blocks: src, a free neighbour of dst, joins it. */
static int merge(wf_alloc *a, int64_t dst, int64_t src)
{
    if (src < 0 || a->b[src].allocated)
        return 0;
    blk *d = &a->b[dst], *s = &a->b[src];
    fl_remove(a, src);
    if (d->prev == src) {
        d->addr = s->addr;
        d->prev = s->prev;
        if (d->prev >= 0)
            a->b[d->prev].next = dst;
    } else {
        d->next = s->next;
        if (d->next >= 0)
            a->b[d->next].prev = dst;
    }
    d->size += s->size;
    return kill_blk(a, src);
}

void wf_alloc_release(wf_alloc *a, int64_t h)
{
    if (h < 0 || h >= a->n || !a->b[h].live || !a->b[h].allocated)
        return;
    a->b[h].allocated = 0;
    a->st.allocated -= a->b[h].size;
    /* Host allocation failures while merging leave the block unmerged: the
     * model then errs towards more cached memory, never less. */
    (void)merge(a, h, a->b[h].prev);
    (void)merge(a, h, a->b[h].next);
    (void)fl_insert(a, h);
}
