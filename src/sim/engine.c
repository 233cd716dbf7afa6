/* The discrete-event engine: building a task graph (devices, resources, tasks,
 * dependencies, buffers) and playing it out on an integer-nanosecond clock.
 *
 * Events (a task's release at its not-before time, a task's finish) sit in a
 * binary heap keyed by (time, sequence number). All events of one instant are
 * handled first (finishes free resources and release successors; frees of
 * memory happen before the allocations of tasks starting at the same instant),
 * then every resource that changed starts its head task if that task heads
 * the queue of each resource it needs and all are free. Queues are ordered by
 * (priority, ready sequence), one total order over all tasks, so collectives
 * spanning several channels cannot deadlock and the timeline is the same on
 * every run. After the run, per-device statistics come from a sweep over the
 * busy intervals of the device's stream and channels. */
#include "sim/sim-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const cat_names[] = {
#define WF_X(e, name) name,
    WF_SIM_CAT_LIST(WF_X)
#undef WF_X
};
_Static_assert(sizeof cat_names / sizeof cat_names[0] == WF_SIM_CAT_COUNT, "category table");

const char *wf_sim_cat_name(wf_sim_cat c)
{
    return (unsigned)c < WF_SIM_CAT_COUNT ? cat_names[c] : "?";
}

wf_ns wf_sim_ns(double seconds)
{
    if (!(seconds >= 0) || seconds > 9.0e9)
        return -1;
    return (wf_ns)llround(seconds * 1e9);
}

/* ---- arena-backed growable arrays ---------------------------------------------- */

/* Makes room for one more element in s->field (n used, cap allocated): 0, or -1. */
#define GROW(s, field, n, cap) \
    wf_grow_in(&(s)->arena, &(s)->field, &(s)->cap, (int64_t)(s)->n + 1, sizeof *(s)->field, 16)

/* ---- heaps ------------------------------------------------------------------------ */

static int hless(const sim_hitem *x, const sim_hitem *y)
{
    return x->k1 < y->k1 || (x->k1 == y->k1 && x->k2 < y->k2);
}

static void heap_push(sim_heap *h, int64_t k1, int64_t k2, int id)
{
    /* Capacity is sized before the run: every task enters each heap at most
     * a known number of times. */
    int i = h->n++;
    sim_hitem it = {k1, k2, id};
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!hless(&it, &h->a[parent]))
            break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = it;
}

static sim_hitem heap_pop(sim_heap *h)
{
    sim_hitem top = h->a[0];
    sim_hitem last = h->a[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && hless(&h->a[c + 1], &h->a[c]))
            c++;
        if (!hless(&h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n > 0)
        h->a[i] = last;
    return top;
}

static int heap_alloc(wf_arena *a, sim_heap *h, int cap)
{
    h->n = 0;
    h->cap = cap;
    h->a = wf_arena_alloc(a, (size_t)(cap > 0 ? cap : 1) * sizeof *h->a);
    return h->a ? 0 : -1;
}

/* ---- building ----------------------------------------------------------------------- */

wf_status wf_sim_create(wf_sim **out)
{
    *out = NULL;
    wf_sim *s = calloc(1, sizeof *s);
    if (!s)
        return wf_errorf(WF_NOMEM, "out of memory creating a simulation");
    wf_arena_init(&s->arena, 1 << 20);
    *out = s;
    return WF_OK;
}

void wf_sim_free(wf_sim *s)
{
    if (!s)
        return;
    wf_arena_free(&s->arena);
    free(s);
}

static wf_status nomem(void)
{
    return wf_errorf(WF_NOMEM, "out of memory building a simulation");
}

static int add_res(wf_sim *s, int kind, int dev, int idx, const char *name)
{
    if (GROW(s, res, nres, cap_res))
        return nomem();
    sim_res *r = &s->res[s->nres];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->dev = dev;
    r->idx = idx;
    r->name = wf_arena_strdup(&s->arena, name);
    if (!r->name)
        return nomem();
    return s->nres++;
}

static wf_status check_building(const wf_sim *s)
{
    if (s->ran)
        return wf_errorf(WF_INVAL, "simulation already ran: build a new one");
    return WF_OK;
}

int wf_sim_add_device(wf_sim *s, const char *name, int nchannels, int64_t replicas)
{
    wf_status st = check_building(s);
    if (st)
        return st;
    if (nchannels < 1 || nchannels > 64)
        return wf_errorf(WF_INVAL, "device '%s': nchannels=%d must be in 1..64", name ? name : "", nchannels);
    if (replicas < 1)
        return wf_errorf(WF_INVAL, "device '%s': replicas=%lld must be >= 1", name ? name : "",
                         (long long)replicas);
    if (GROW(s, dev, ndev, cap_dev))
        return nomem();
    int d = s->ndev;
    char buf[64];
    if (!name) {
        snprintf(buf, sizeof buf, "device %d", d);
        name = buf;
    }
    sim_dev *dv = &s->dev[d];
    memset(dv, 0, sizeof *dv);
    dv->name = wf_arena_strdup(&s->arena, name);
    if (!dv->name)
        return nomem();
    dv->nch = nchannels;
    dv->replicas = replicas;
    int r = add_res(s, RES_COMPUTE, d, 0, "compute");
    if (r < 0)
        return r;
    dv = &s->dev[d];
    dv->res0 = r;
    for (int c = 0; c < nchannels; c++) {
        snprintf(buf, sizeof buf, "comm %d", c);
        int rc = add_res(s, RES_CHANNEL, d, c, buf);
        if (rc < 0)
            return rc;
    }
    s->ndev++;
    return d;
}

int wf_sim_add_link(wf_sim *s, const char *name)
{
    wf_status st = check_building(s);
    if (st)
        return st;
    if (GROW(s, link_res, nlink, cap_link))
        return nomem();
    char buf[64];
    if (!name) {
        snprintf(buf, sizeof buf, "link %d", s->nlink);
        name = buf;
    }
    int r = add_res(s, RES_LINK, -1, s->nlink, name);
    if (r < 0)
        return r;
    s->link_res[s->nlink] = r;
    return s->nlink++;
}

int wf_sim_stream(const wf_sim *s, int dev)
{
    return dev >= 0 && dev < s->ndev ? s->dev[dev].res0 : -1;
}

int wf_sim_channel(const wf_sim *s, int dev, int ch)
{
    if (dev < 0 || dev >= s->ndev || ch < 0 || ch >= s->dev[dev].nch)
        return -1;
    return s->dev[dev].res0 + 1 + ch;
}

int wf_sim_link(const wf_sim *s, int link)
{
    return link >= 0 && link < s->nlink ? s->link_res[link] : -1;
}

int wf_sim_add_pool(wf_sim *s, const char *name, int64_t capacity)
{
    wf_status st = check_building(s);
    if (st)
        return st;
    if (capacity <= 0)
        return wf_errorf(WF_INVAL, "pool '%s': capacity=%lld must be > 0", name ? name : "",
                         (long long)capacity);
    if (GROW(s, pool, npool, cap_pool))
        return nomem();
    sim_pool *p = &s->pool[s->npool];
    memset(p, 0, sizeof *p);
    p->name = wf_arena_strdup(&s->arena, name ? name : "pool");
    if (!p->name)
        return nomem();
    p->cap = capacity;
    return s->npool++;
}

void wf_sim_task_desc_init(wf_sim_task_desc *d)
{
    memset(d, 0, sizeof *d);
    d->cat = WF_SIM_CAT_OTHER;
    d->pool = -1;
    d->mb = d->layer = d->chunk = -1;
    d->bytes = -1;
}

int wf_sim_add_task(wf_sim *s, const wf_sim_task_desc *d)
{
    wf_status st = check_building(s);
    if (st)
        return st;
    const char *name = d->name ? d->name : "task";
    if (d->dur_ns < 0)
        return wf_errorf(WF_INVAL, "task '%s': duration %lld ns must be >= 0", name, (long long)d->dur_ns);
    if (d->not_before_ns < 0)
        return wf_errorf(WF_INVAL, "task '%s': not_before %lld ns must be >= 0", name,
                         (long long)d->not_before_ns);
    if ((unsigned)d->cat >= WF_SIM_CAT_COUNT)
        return wf_errorf(WF_INVAL, "task '%s': category %d unknown", name, (int)d->cat);
    if (d->nres < 0 || (d->nres > 0 && !d->res))
        return wf_errorf(WF_INVAL, "task '%s': bad resource list (nres=%d)", name, d->nres);
    if (d->ndeps < 0 || (d->ndeps > 0 && !d->deps))
        return wf_errorf(WF_INVAL, "task '%s': bad dependency list (ndeps=%d)", name, d->ndeps);
    for (int i = 0; i < d->nres; i++) {
        if (d->res[i] < 0 || d->res[i] >= s->nres)
            return wf_errorf(WF_INVAL, "task '%s': resource %d does not exist", name, d->res[i]);
        for (int j = 0; j < i; j++)
            if (d->res[j] == d->res[i])
                return wf_errorf(WF_INVAL, "task '%s': resource %d listed twice", name, d->res[i]);
    }
    if (d->pool >= s->npool || d->pool < -1)
        return wf_errorf(WF_INVAL, "task '%s': pool %d does not exist", name, d->pool);
    if (d->pool >= 0 && d->pool_amount < 0)
        return wf_errorf(WF_INVAL, "task '%s': pool amount %lld must be >= 0", name,
                         (long long)d->pool_amount);
    for (int i = 0; i < d->ndeps; i++)
        if (d->deps[i] < 0 || d->deps[i] >= s->ntask)
            return wf_errorf(WF_INVAL, "task '%s': dependency %d does not exist", name, d->deps[i]);

    if (GROW(s, task, ntask, cap_task))
        return nomem();
    int id = s->ntask;
    sim_task *t = &s->task[id];
    memset(t, 0, sizeof *t);
    t->name = wf_arena_strdup(&s->arena, name);
    if (!t->name)
        return nomem();
    t->dur = d->dur_ns;
    t->not_before = d->not_before_ns;
    t->prio = d->priority;
    t->cat = (uint8_t)d->cat;
    t->pool = d->pool;
    t->amount = d->pool >= 0 ? d->pool_amount : 0;
    t->mb = d->mb;
    t->layer = d->layer;
    t->chunk = d->chunk;
    t->bytes = d->bytes;
    t->res_off = s->nresl;
    t->nres = d->nres;
    for (int i = 0; i < d->nres; i++) {
        if (GROW(s, resl, nresl, cap_resl))
            return nomem();
        s->resl[s->nresl++] = d->res[i];
    }
    s->ntask++;
    for (int i = 0; i < d->ndeps; i++) {
        if (GROW(s, edge, nedge, cap_edge))
            return nomem();
        s->edge[s->nedge++] = (sim_edge){d->deps[i], id};
    }
    return id;
}

wf_status wf_sim_add_dep(wf_sim *s, int task, int dep)
{
    wf_status st = check_building(s);
    if (st)
        return st;
    if (task < 0 || task >= s->ntask || dep < 0 || dep >= s->ntask)
        return wf_errorf(WF_INVAL, "dependency %d -> %d: no such task (have %d)", dep, task, s->ntask);
    if (task == dep)
        return wf_errorf(WF_INVAL, "task '%s' cannot depend on itself", s->task[task].name);
    if (GROW(s, edge, nedge, cap_edge))
        return nomem();
    s->edge[s->nedge++] = (sim_edge){dep, task};
    return WF_OK;
}

int wf_sim_ntasks(const wf_sim *s)
{
    return s->ntask;
}

int wf_sim_ndevices(const wf_sim *s)
{
    return s->ndev;
}

wf_status wf_sim_set_mem_base(wf_sim *s, int dev, int64_t bytes)
{
    if (dev < 0 || dev >= s->ndev)
        return wf_errorf(WF_INVAL, "memory base: device %d does not exist", dev);
    if (bytes < 0)
        return wf_errorf(WF_INVAL, "memory base of device %d: %lld bytes must be >= 0", dev, (long long)bytes);
    s->dev[dev].mem_base = bytes;
    return WF_OK;
}

wf_status wf_sim_add_buffer(wf_sim *s, int dev, int64_t bytes, int producer, int nusers, const int *users)
{
    wf_status st = check_building(s);
    if (st)
        return st;
    if (dev < 0 || dev >= s->ndev)
        return wf_errorf(WF_INVAL, "buffer: device %d does not exist", dev);
    if (bytes < 0)
        return wf_errorf(WF_INVAL, "buffer on device %d: %lld bytes must be >= 0", dev, (long long)bytes);
    if (producer < 0 || producer >= s->ntask)
        return wf_errorf(WF_INVAL, "buffer on device %d: producer task %d does not exist", dev, producer);
    if (nusers < 0 || (nusers > 0 && !users))
        return wf_errorf(WF_INVAL, "buffer on device %d: bad user list", dev);
    for (int i = 0; i < nusers; i++)
        if (users[i] < 0 || users[i] >= s->ntask)
            return wf_errorf(WF_INVAL, "buffer on device %d: user task %d does not exist", dev, users[i]);
    if (GROW(s, buf, nbuf, cap_buf))
        return nomem();
    sim_buf *b = &s->buf[s->nbuf];
    b->dev = dev;
    b->bytes = bytes;
    b->producer = producer;
    b->nusers = nusers;
    b->user_off = s->nusers;
    for (int i = 0; i < nusers; i++) {
        if (GROW(s, users, nusers, cap_users))
            return nomem();
        s->users[s->nusers++] = users[i];
    }
    s->nbuf++;
    return WF_OK;
}

/* ---- running ------------------------------------------------------------------------------ */

enum { EV_RELEASE = 0, EV_FINISH = 1 };
enum { ST_WAIT, ST_READY, ST_RUN, ST_DONE };

typedef struct {
    wf_sim *s;
    sim_heap ev;
    int64_t ev_seq, ready_seq;
    int *succ_off, *succ;  /* CSR of successors */
    int *alloc_off, *alloc;/* buffers allocated when a task starts */
    int *rel_off, *rel;    /* buffers whose user count drops when a task finishes */
    int64_t *mem_cur;      /* [ndev] */
    int64_t *mem_peak;     /* [ndev] */
    int *dirty_res;
    int ndirty_res;
    int *dirty_pool;
    int ndirty_pool;
    int done;
} run_ctx;

/* Builds a CSR (offsets [n+1], items) from pairs (key[i] -> val[i]), keeping
 * the order in which pairs were given. */
static int csr_build(wf_arena *a, int n, int npairs, const int *key, const int *val, int **off_out,
                     int **items_out)
{
    int *off = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *off);
    int *items = wf_arena_alloc(a, (size_t)(npairs > 0 ? npairs : 1) * sizeof *items);
    int *fill = wf_arena_alloc(a, (size_t)(n > 0 ? n : 1) * sizeof *fill);
    if (!off || !items || !fill)
        return -1;
    for (int i = 0; i < npairs; i++)
        off[key[i] + 1]++;
    for (int i = 0; i < n; i++)
        off[i + 1] += off[i];
    for (int i = 0; i < npairs; i++) {
        int k = key[i];
        items[off[k] + fill[k]++] = val[i];
    }
    *off_out = off;
    *items_out = items;
    return 0;
}

static void mark_res(run_ctx *c, int r)
{
    sim_res *res = &c->s->res[r];
    if (!res->dirty) {
        res->dirty = 1;
        c->dirty_res[c->ndirty_res++] = r;
    }
}

static void mark_pool(run_ctx *c, int p)
{
    sim_pool *pl = &c->s->pool[p];
    if (!pl->dirty) {
        pl->dirty = 1;
        c->dirty_pool[c->ndirty_pool++] = p;
    }
}

static void push_event(run_ctx *c, wf_ns t, int type, int task)
{
    heap_push(&c->ev, t, c->ev_seq++, task * 2 + type);
}

static void mem_change(run_ctx *c, wf_ns now, int dev, int64_t delta)
{
    wf_sim *s = c->s;
    c->mem_cur[dev] += delta;
    if (c->mem_cur[dev] > c->mem_peak[dev])
        c->mem_peak[dev] = c->mem_cur[dev];
    /* One record per instant and device: a later change at the same instant
     * overwrites the last record. */
    if (s->nmem > 0 && s->mem[s->nmem - 1].t == now && s->mem[s->nmem - 1].dev == dev) {
        s->mem[s->nmem - 1].bytes = c->mem_cur[dev];
        return;
    }
    if (GROW(s, mem, nmem, cap_mem))
        return; /* the trace loses a counter point; the peak is still right */
    s->mem[s->nmem++] = (sim_memrec){now, dev, c->mem_cur[dev]};
}

static void start_task(run_ctx *c, int id, wf_ns now)
{
    wf_sim *s = c->s;
    sim_task *t = &s->task[id];
    t->state = ST_RUN;
    t->start = now;
    for (int i = 0; i < t->nres; i++)
        s->res[s->resl[t->res_off + i]].busy = id;
    for (int i = c->alloc_off[id]; i < c->alloc_off[id + 1]; i++) {
        sim_buf *b = &s->buf[c->alloc[i]];
        mem_change(c, now, b->dev, b->bytes);
    }
    push_event(c, now + t->dur, EV_FINISH, id);
}

/* A task admitted to run (released, and through its pool if any): into the
 * queues of its resources, or straight to running when it needs none. */
static void enter_queues(run_ctx *c, int id, wf_ns now)
{
    wf_sim *s = c->s;
    sim_task *t = &s->task[id];
    int64_t seq = c->ready_seq++;
    if (t->nres == 0) {
        start_task(c, id, now);
        return;
    }
    for (int i = 0; i < t->nres; i++) {
        int r = s->resl[t->res_off + i];
        heap_push(&s->res[r].q, t->prio, seq, id);
        mark_res(c, r);
    }
}

/* Dependencies done and not-before passed: into the pool, or the queues. */
static void release(run_ctx *c, int id, wf_ns now)
{
    wf_sim *s = c->s;
    sim_task *t = &s->task[id];
    t->state = ST_READY;
    if (t->pool >= 0) {
        heap_push(&s->pool[t->pool].q, t->prio, c->ready_seq++, id);
        mark_pool(c, t->pool);
        return;
    }
    enter_queues(c, id, now);
}

/* Dependencies done: released now, or at its not-before time. */
static void make_ready(run_ctx *c, int id, wf_ns now)
{
    if (c->s->task[id].not_before > now)
        push_event(c, c->s->task[id].not_before, EV_RELEASE, id);
    else
        release(c, id, now);
}

static void finish_task(run_ctx *c, int id, wf_ns now)
{
    wf_sim *s = c->s;
    sim_task *t = &s->task[id];
    t->state = ST_DONE;
    t->end = now;
    c->done++;
    if (now > s->makespan)
        s->makespan = now;
    for (int i = 0; i < t->nres; i++) {
        int r = s->resl[t->res_off + i];
        s->res[r].busy = -1;
        mark_res(c, r);
    }
    if (t->pool >= 0) {
        s->pool[t->pool].used -= t->amount;
        mark_pool(c, t->pool);
    }
    for (int i = c->rel_off[id]; i < c->rel_off[id + 1]; i++) {
        sim_buf *b = &s->buf[c->rel[i]];
        if (--b->left == 0)
            mem_change(c, now, b->dev, -b->bytes);
    }
    for (int i = c->succ_off[id]; i < c->succ_off[id + 1]; i++) {
        int n = c->succ[i];
        if (--s->task[n].deps_left == 0)
            make_ready(c, n, now);
    }
}

/* Admits pooled tasks by (priority, ready order) while they fit; a task larger
 * than the whole window is admitted alone so that it cannot starve. */
static void admit_pools(run_ctx *c, wf_ns now)
{
    wf_sim *s = c->s;
    for (int k = 0; k < c->ndirty_pool; k++) {
        sim_pool *p = &s->pool[c->dirty_pool[k]];
        p->dirty = 0;
        while (p->q.n > 0) {
            int id = p->q.a[0].id;
            int64_t amt = s->task[id].amount;
            if (p->used > 0 && p->used + amt > p->cap)
                break;
            heap_pop(&p->q);
            p->used += amt;
            enter_queues(c, id, now);
        }
    }
    c->ndirty_pool = 0;
}

static void dispatch(run_ctx *c, wf_ns now)
{
    wf_sim *s = c->s;
    admit_pools(c, now);
    /* Starting a task only makes resources busy, so one pass over the
     * resources that changed starts every task that can start now, in an
     * order that does not matter (each started task headed all its queues). */
    for (int k = 0; k < c->ndirty_res; k++) {
        sim_res *r = &s->res[c->dirty_res[k]];
        r->dirty = 0;
        if (r->busy >= 0 || r->q.n == 0)
            continue;
        int id = r->q.a[0].id;
        sim_task *t = &s->task[id];
        int ok = 1;
        for (int i = 0; i < t->nres && ok; i++) {
            sim_res *o = &s->res[s->resl[t->res_off + i]];
            ok = o->busy < 0 && o->q.n > 0 && o->q.a[0].id == id;
        }
        if (!ok)
            continue;
        for (int i = 0; i < t->nres; i++)
            heap_pop(&s->res[s->resl[t->res_off + i]].q);
        start_task(c, id, now);
    }
    c->ndirty_res = 0;
}

/* Per-device statistics: a sweep over the busy intervals of its stream
 * (compute) and its channels (communication). */
typedef struct {
    wf_ns t;
    int d_compute, d_comm; /* +1 at a start, -1 at an end */
    int cat;
} sweep_pt;

static int cmp_sweep(const void *a, const void *b)
{
    const sweep_pt *x = a, *y = b;
    return (x->t > y->t) - (x->t < y->t);
}

static wf_status compute_stats(wf_sim *s, const int64_t *mem_peak)
{
    int nd = s->ndev;
    s->stats = wf_arena_alloc(&s->arena, (size_t)(nd > 0 ? nd : 1) * sizeof *s->stats);
    int *off = calloc((size_t)nd + 1, sizeof *off);
    int *fill = calloc((size_t)nd + 1, sizeof *fill);
    if (!s->stats || !off || !fill) {
        free(off);
        free(fill);
        return nomem();
    }
    /* Interval endpoints bucketed per device; category sums counted once per
     * (task, device) even when a task holds several of the device's resources. */
    for (int i = 0; i < s->ntask; i++) {
        const sim_task *t = &s->task[i];
        for (int k = 0; k < t->nres; k++) {
            const sim_res *r = &s->res[s->resl[t->res_off + k]];
            if (r->dev >= 0 && t->dur > 0)
                off[r->dev + 1] += 2;
        }
    }
    for (int d = 0; d < nd; d++)
        off[d + 1] += off[d];
    sweep_pt *pts = malloc((size_t)(off[nd] > 0 ? off[nd] : 1) * sizeof *pts);
    if (!pts) {
        free(off);
        free(fill);
        return nomem();
    }
    memset(s->stats, 0, (size_t)(nd > 0 ? nd : 1) * sizeof *s->stats);
    for (int i = 0; i < s->ntask; i++) {
        const sim_task *t = &s->task[i];
        for (int k = 0; k < t->nres; k++) {
            const sim_res *r = &s->res[s->resl[t->res_off + k]];
            if (r->dev < 0)
                continue;
            int seen = 0;
            for (int j = 0; j < k; j++)
                seen |= s->res[s->resl[t->res_off + j]].dev == r->dev;
            if (!seen)
                s->stats[r->dev].busy_s[t->cat] += (double)t->dur / 1e9;
            if (t->dur == 0)
                continue;
            int isc = r->kind == RES_COMPUTE;
            sweep_pt *q = &pts[off[r->dev] + fill[r->dev]];
            q[0] = (sweep_pt){t->start, isc, !isc, t->cat};
            q[1] = (sweep_pt){t->end, -isc, -!isc, t->cat};
            fill[r->dev] += 2;
        }
    }
    for (int d = 0; d < nd; d++) {
        wf_sim_device_stats *st = &s->stats[d];
        sweep_pt *p = &pts[off[d]];
        int n = off[d + 1] - off[d];
        qsort(p, (size_t)n, sizeof *p, cmp_sweep);
        int cc = 0, cm = 0, ccat[WF_SIM_CAT_COUNT] = {0};
        wf_ns compute = 0, comm = 0, exposed = 0, either = 0, exp_cat[WF_SIM_CAT_COUNT] = {0};
        for (int i = 0; i < n;) {
            wf_ns t0 = p[i].t;
            while (i < n && p[i].t == t0) {
                cc += p[i].d_compute;
                cm += p[i].d_comm;
                ccat[p[i].cat] += p[i].d_comm;
                i++;
            }
            if (i < n) {
                wf_ns dt = p[i].t - t0;
                compute += cc > 0 ? dt : 0;
                comm += cm > 0 ? dt : 0;
                exposed += cm > 0 && cc == 0 ? dt : 0;
                either += cc > 0 || cm > 0 ? dt : 0;
                if (cm > 0 && cc == 0)
                    for (int k = 0; k < WF_SIM_CAT_COUNT; k++)
                        exp_cat[k] += ccat[k] > 0 ? dt : 0;
            }
        }
        for (int k = 0; k < WF_SIM_CAT_COUNT; k++)
            st->exposed_s[k] = (double)exp_cat[k] / 1e9;
        st->compute_s = (double)compute / 1e9;
        st->comm_s = (double)comm / 1e9;
        st->exposed_comm_s = (double)exposed / 1e9;
        st->idle_s = (double)(s->makespan - either) / 1e9;
        st->compute_idle_s = (double)(s->makespan - compute) / 1e9;
        st->peak_mem_bytes = mem_peak[d];
    }
    free(off);
    free(fill);
    free(pts);
    return WF_OK;
}

wf_status wf_sim_run(wf_sim *s)
{
    wf_status st = check_building(s);
    if (st)
        return st;
    s->ran = 1;
    wf_arena *a = &s->arena;
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    int n = s->ntask;

    size_t tmpn = (size_t)s->nedge + (size_t)s->nbuf + (size_t)s->nusers + 1;
    int *bk = malloc(tmpn * sizeof *bk);
    int *bv = malloc(tmpn * sizeof *bv);
    if (!bk || !bv) {
        free(bk);
        free(bv);
        return nomem();
    }
    /* Successors in the order the dependencies were added. */
    for (int i = 0; i < s->nedge; i++) {
        bk[i] = s->edge[i].from;
        bv[i] = s->edge[i].to;
        s->task[s->edge[i].to].deps_left++;
    }
    if (csr_build(a, n, s->nedge, bk, bv, &c.succ_off, &c.succ)) {
        free(bk);
        free(bv);
        return nomem();
    }

    /* Buffers: allocated at their producer's start; released by each user's
     * finish (by the producer's when it has no users). */
    for (int i = 0; i < s->nbuf; i++) {
        bk[i] = s->buf[i].producer;
        bv[i] = i;
    }
    int npr = csr_build(a, n, s->nbuf, bk, bv, &c.alloc_off, &c.alloc);
    int nr = 0;
    for (int i = 0; i < s->nbuf; i++) {
        sim_buf *b = &s->buf[i];
        if (b->nusers == 0) {
            bk[nr] = b->producer;
            bv[nr++] = i;
            b->left = 1;
        } else {
            for (int u = 0; u < b->nusers; u++) {
                bk[nr] = s->users[b->user_off + u];
                bv[nr++] = i;
            }
            b->left = b->nusers;
        }
    }
    int nrel = csr_build(a, n, nr, bk, bv, &c.rel_off, &c.rel);
    free(bk);
    free(bv);
    if (npr || nrel)
        return nomem();

    /* Queues sized by how many tasks use each resource / pool. */
    int *rcount = calloc((size_t)s->nres + 1, sizeof *rcount);
    int *pcount = calloc((size_t)s->npool + 1, sizeof *pcount);
    if (!rcount || !pcount) {
        free(rcount);
        free(pcount);
        return nomem();
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < s->task[i].nres; k++)
            rcount[s->resl[s->task[i].res_off + k]]++;
        if (s->task[i].pool >= 0)
            pcount[s->task[i].pool]++;
    }
    int fail = 0;
    for (int r = 0; r < s->nres; r++) {
        s->res[r].busy = -1;
        s->res[r].dirty = 0;
        fail |= heap_alloc(a, &s->res[r].q, rcount[r]);
    }
    for (int p = 0; p < s->npool; p++) {
        s->pool[p].used = 0;
        s->pool[p].dirty = 0;
        fail |= heap_alloc(a, &s->pool[p].q, pcount[p]);
    }
    free(rcount);
    free(pcount);
    fail |= heap_alloc(a, &c.ev, 2 * n + 1);
    c.dirty_res = wf_arena_alloc(a, (size_t)(s->nres + 1) * sizeof *c.dirty_res);
    c.dirty_pool = wf_arena_alloc(a, (size_t)(s->npool + 1) * sizeof *c.dirty_pool);
    c.mem_cur = wf_arena_alloc(a, (size_t)(s->ndev + 1) * sizeof *c.mem_cur);
    c.mem_peak = wf_arena_alloc(a, (size_t)(s->ndev + 1) * sizeof *c.mem_peak);
    if (fail || !c.dirty_res || !c.dirty_pool || !c.mem_cur || !c.mem_peak)
        return nomem();
    s->makespan = 0;
    for (int d = 0; d < s->ndev; d++) {
        c.mem_cur[d] = c.mem_peak[d] = s->dev[d].mem_base;
        if (GROW(s, mem, nmem, cap_mem))
            return nomem();
        s->mem[s->nmem++] = (sim_memrec){0, d, s->dev[d].mem_base};
    }

    for (int i = 0; i < n; i++) {
        s->task[i].state = ST_WAIT;
        s->task[i].start = s->task[i].end = -1;
    }
    for (int i = 0; i < n; i++)
        if (s->task[i].deps_left == 0)
            make_ready(&c, i, 0);
    dispatch(&c, 0);
    while (c.ev.n > 0) {
        wf_ns now = c.ev.a[0].k1;
        while (c.ev.n > 0 && c.ev.a[0].k1 == now) {
            sim_hitem e = heap_pop(&c.ev);
            int id = e.id / 2;
            if (e.id % 2 == EV_FINISH)
                finish_task(&c, id, now);
            else
                release(&c, id, now);
        }
        dispatch(&c, now);
    }
    if (c.done < n) {
        for (int i = 0; i < n; i++)
            if (s->task[i].state != ST_DONE)
                return wf_errorf(WF_INVAL,
                                 "simulation stalled: task %d '%s' never ran (%d of %d done; "
                                 "a dependency cycle?)",
                                 i, s->task[i].name, c.done, n);
    }
    return compute_stats(s, c.mem_peak);
}

wf_ns wf_sim_makespan_ns(const wf_sim *s)
{
    return s->makespan;
}

wf_ns wf_sim_task_start_ns(const wf_sim *s, int task)
{
    return task >= 0 && task < s->ntask ? s->task[task].start : -1;
}

wf_ns wf_sim_task_end_ns(const wf_sim *s, int task)
{
    return task >= 0 && task < s->ntask ? s->task[task].end : -1;
}

wf_status wf_sim_device_stats_of(const wf_sim *s, int dev, wf_sim_device_stats *out)
{
    if (!s->ran || !s->stats)
        return wf_errorf(WF_INVAL, "device statistics: the simulation has not run");
    if (dev < 0 || dev >= s->ndev)
        return wf_errorf(WF_INVAL, "device statistics: device %d does not exist", dev);
    *out = s->stats[dev];
    return WF_OK;
}
