/* Arena allocator: blocks chained in a list, bump allocation, freed at once. */
#include "weft/core.h"

#include <stdlib.h>
#include <string.h>

struct wf_arena_block {
    wf_arena_block *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

void wf_arena_init(wf_arena *a, size_t block_bytes)
{
    a->head = NULL;
    a->block_bytes = block_bytes ? block_bytes : 64 * 1024;
    a->used_bytes = 0;
}

void *wf_arena_alloc(wf_arena *a, size_t bytes)
{
    size_t need = (bytes + 15) & ~(size_t)15;
    if (need == 0)
        need = 16;
    wf_arena_block *b = a->head;
    if (!b || b->cap - b->used < need) {
        size_t cap = need > a->block_bytes ? need : a->block_bytes;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += need;
    a->used_bytes += need;
    memset(p, 0, need);
    return p;
}

char *wf_arena_strdup(wf_arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = wf_arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void wf_arena_free(wf_arena *a)
{
    wf_arena_block *b = a->head;
    while (b) {
        wf_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

void *wf_calloc(size_t n, size_t size)
{
    if (n == 0 || size == 0)
        return calloc(1, 1);
    return calloc(n, size);
}
