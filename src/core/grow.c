/* weft core: one way to grow an array by doubling (wf_grow in weft/core.h).
 * Every growing array of the library goes through it, so the doubling, the
 * overflow checks and the zeroing of new elements are written once. */
#include "weft/core.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The capacity that holds `need` elements of `elem` bytes: *cap doubled
 * (from `first` when 0) until it does; -1 when it would pass INT_MAX
 * elements or SIZE_MAX bytes. */
static int64_t next_cap(int cap, int64_t need, size_t elem, int first)
{
    if (need > INT_MAX || elem == 0)
        return -1;
    int64_t nc = cap > 0 ? cap : (first > 0 ? first : 1);
    while (nc < need)
        nc *= 2;
    if (nc > INT_MAX)
        nc = need;
    if ((uint64_t)nc > SIZE_MAX / elem)
        return -1;
    return nc;
}

int wf_grow(void *arr, int *cap, int64_t need, size_t elem, int first)
{
    if (need <= *cap)
        return 0;
    int64_t nc = next_cap(*cap, need, elem, first);
    if (nc < 0)
        return -1;
    /* The caller's T * is read and written as bytes: a T * and a void *
     * share their representation on every platform weft builds on. */
    void *old;
    memcpy(&old, arr, sizeof old);
    char *p = realloc(old, (size_t)nc * elem);
    if (!p)
        return -1;
    memset(p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    memcpy(arr, &p, sizeof p);
    *cap = (int)nc;
    return 0;
}

int wf_grow_in(wf_arena *a, void *arr, int *cap, int64_t need, size_t elem, int first)
{
    if (need <= *cap)
        return 0;
    int64_t nc = next_cap(*cap, need, elem, first);
    if (nc < 0)
        return -1;
    char *p = wf_arena_alloc(a, (size_t)nc * elem);
    if (!p)
        return -1;
    void *old;
    memcpy(&old, arr, sizeof old);
    if (*cap > 0)
        memcpy(p, old, (size_t)*cap * elem);
    memset(p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    memcpy(arr, &p, sizeof p);
    *cap = (int)nc;
    return 0;
}
