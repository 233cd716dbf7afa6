/* Private state of the event engine, shared by engine.c (building and running)
 * and trace.c (the Chrome trace). Everything lives in the simulation's arena;
 * growable arrays are doubled by copying into a fresh arena block (the old
 * block is dead weight until wf_sim_free, at most as large as the live one). */
#ifndef WEFT_SIM_IMPL_H
#define WEFT_SIM_IMPL_H

#include "weft/sim.h"

enum { RES_COMPUTE, RES_CHANNEL, RES_LINK };

/* A heap item: ordered by (k1, k2); id is the payload. */
typedef struct {
    int64_t k1, k2;
    int id;
} sim_hitem;

typedef struct {
    sim_hitem *a;
    int n, cap;
} sim_heap;

typedef struct {
    const char *name;
    int nch;
    int64_t replicas;
    int res0;          /* resource id of its compute stream; channels follow */
    int64_t mem_base;
} sim_dev;

typedef struct {
    int kind;          /* RES_* */
    int dev;           /* owning device, -1 for links */
    int idx;           /* channel index or link index */
    const char *name;
    /* run state */
    int busy;          /* task occupying it, -1 free */
    int dirty;
    sim_heap q;        /* ready tasks keyed by (priority, ready seq) */
} sim_res;

typedef struct {
    const char *name;
    int64_t cap, used;
    int dirty;
    sim_heap q;
} sim_pool;

typedef struct {
    const char *name;
    wf_ns dur, not_before;
    int prio;
    int res_off, nres; /* into sim.resl */
    int pool;
    int64_t amount;
    int mb, layer, chunk;
    double bytes;
    uint8_t cat;
    /* run state */
    uint8_t state;     /* 0 waiting, 1 ready, 2 running, 3 done */
    int deps_left;
    wf_ns start, end;
} sim_task;

typedef struct {
    int from, to;
} sim_edge;

typedef struct {
    int dev;
    int64_t bytes;
    int producer;
    int nusers, user_off; /* into sim.users */
    int left;             /* run: users not finished yet */
} sim_buf;

/* One change of a device's memory (for the trace's counter track). */
typedef struct {
    wf_ns t;
    int dev;
    int64_t bytes;
} sim_memrec;

struct wf_sim {
    wf_arena arena;
    sim_dev *dev;
    int ndev, cap_dev;
    int *link_res;
    int nlink, cap_link;
    sim_res *res;
    int nres, cap_res;
    sim_pool *pool;
    int npool, cap_pool;
    sim_task *task;
    int ntask, cap_task;
    int *resl;
    int nresl, cap_resl;
    sim_edge *edge;
    int nedge, cap_edge;
    sim_buf *buf;
    int nbuf, cap_buf;
    int *users;
    int nusers, cap_users;
    /* results */
    int ran;
    wf_ns makespan;
    wf_sim_device_stats *stats; /* [ndev] */
    sim_memrec *mem;
    int nmem, cap_mem;
};

#endif
