/* SBP boxing: the cost of converting a tensor from one n-D layout to another.
 *
 * One axis changes at a time, each change priced by the 1-D table of
 * ALGORITHMS.md §2 with the cost model's one price of a collective
 * (wf_coll_time_net on the axis's group: the cluster's hierarchy, the
 * reduction arithmetic, the overheads; the flat closed forms on the axis's
 * latency and bandwidth for a mesh given by hand); the tensor's size "on an axis" is the
 * full tensor divided by the splits of the other axes at that moment. The
 * cheapest order is a shortest path (Dijkstra) over intermediate layouts: per
 * axis its source and target values, plus, for P -> B, S of the largest dim
 * (reduce-scatter now, all-gather later, so that the other axes reduce a
 * shard: the hierarchical all-reduce), and otherwise B (for when the direct
 * moves would split a dim more than it divides: [S(2),S(3)] -> [S(3),S(2)] on
 * 8x8 with dims of 112). Each intermediate must be valid for the tensor;
 * moving axes to B never breaks divisibility, nor does slicing from all-B
 * toward a valid target, so a path always exists. A cache keyed by
 * (shape, element size, from, to) makes repeated queries O(1). */
#include "weft/sbp.h"

#include <stdlib.h>
#include <string.h>

double wf_mesh_coll_time(const wf_mesh *m, int axis, wf_coll_kind k, double bytes)
{
    if (m->size[axis] <= 1)
        return 0.0;
    if (m->net.nlevels > 0 && m->algo == WF_ALGO_AUTO)
        return wf_coll_time_net(&m->net, k, &m->group[axis], bytes);
    return wf_coll_time_flat(k, m->algo, m->size[axis], bytes, m->alpha_s[axis], m->bw_bps[axis]);
}

double wf_sbp_box_axis_time(const wf_mesh *m, int axis, int8_t from, int8_t to,
                            double bytes_on_axis, int *coll)
{
    int k = -1;
    double n = bytes_on_axis;
    int64_t p = m->size[axis];
    if (from != to && p > 1) {
        if (from >= 0 && to == WF_SBP_B) {
            k = WF_COLL_ALLGATHER;
        } else if (from == WF_SBP_P && to == WF_SBP_B) {
            k = WF_COLL_ALLREDUCE;
        } else if (from == WF_SBP_P && to >= 0) {
            k = WF_COLL_REDUCE_SCATTER;
        } else if (from >= 0 && to >= 0) {
            k = WF_COLL_ALLTOALL;
            n = bytes_on_axis / (double)p; /* each device exchanges its shard */
        }
        /* B -> S (slice), B -> P and S -> P (zero-fill) are local. */
    }
    if (coll)
        *coll = k;
    if (k < 0)
        return 0.0;
    return wf_mesh_coll_time(m, axis, (wf_coll_kind)k, n);
}

/* ---- shortest path over intermediate layouts ------------------------------------------ */

#define MAX_CAND 3 /* per axis: from, to, and S of the largest dim or B */

typedef struct {
    int n[WF_SBP_MAX_AXES];
    int8_t v[WF_SBP_MAX_AXES][MAX_CAND];
} cand_set;

static void cand_add(cand_set *c, int a, int8_t v)
{
    for (int i = 0; i < c->n[a]; i++)
        if (c->v[a][i] == v)
            return;
    if (c->n[a] < MAX_CAND)
        c->v[a][c->n[a]++] = v;
}

static double on_axis_bytes(const wf_mesh *m, double total, const wf_sbp *s, int axis)
{
    double b = total;
    for (int a = 0; a < m->naxes; a++)
        if (a != axis && s->ax[a] >= 0)
            b /= (double)m->size[a];
    return b;
}

static wf_sbp decode(const cand_set *c, int naxes, int state)
{
    wf_sbp s = wf_sbp_broadcast();
    for (int a = naxes - 1; a >= 0; a--) {
        s.ax[a] = c->v[a][state % c->n[a]];
        state /= c->n[a];
    }
    return s;
}

/* A dim split on several axes is split outer axis first (the block of mesh
 * coordinates c is c0 x size1 + c1 ...). A step on axis a that splits or
 * unsplits dim k is then one collective (or a local slice) only when no
 * inner axis splits k too: gathering the outer split of a dim the inner axis
 * also splits leaves each rank blocks that are not the coarser layout's.
 * Such a step goes through B on the inner axis (gather inner first, split
 * it again after). */
static int nested_ok(int naxes, const wf_sbp *su, const wf_sbp *sv, int a)
{
    for (int b = a + 1; b < naxes; b++)
        if (su->ax[b] >= 0 && (su->ax[b] == su->ax[a] || su->ax[b] == sv->ax[a]))
            return 0;
    return 1;
}

int wf_sbp_boxing_path(const wf_mesh *m, int ndim, const int64_t *shape, size_t elem_bytes,
                       const wf_sbp *from, const wf_sbp *to, wf_sbp_box_step *steps, int cap,
                       double *time_s)
{
    *time_s = 0;
    if (!wf_sbp_valid(m, ndim, shape, from) || !wf_sbp_valid(m, ndim, shape, to))
        return wf_errorf(WF_INVAL, "boxing: a layout does not fit the tensor's shape");
    int naxes = m->naxes;
    if (wf_sbp_equal(from, to, naxes))
        return 0;
    double total = (double)elem_bytes;
    for (int k = 0; k < ndim; k++)
        total *= (double)shape[k];
    /* Intermediate values per axis: its source and target, and for a partial
     * sum going to B also S(k) of the tensor's largest dim: reduce-scattering
     * first lets the other axes move a shard (the hierarchical all-reduce). */
    int kbig = 0;
    for (int k = 1; k < ndim; k++)
        if (shape[k] > shape[kbig])
            kbig = k;
    cand_set c;
    memset(&c, 0, sizeof c);
    for (int a = 0; a < naxes; a++) {
        cand_add(&c, a, from->ax[a]);
        cand_add(&c, a, to->ax[a]);
        if (from->ax[a] == WF_SBP_P && to->ax[a] == WF_SBP_B && ndim > 0)
            cand_add(&c, a, (int8_t)kbig);
        else if (from->ax[a] != to->ax[a] || from->ax[a] >= 0)
            cand_add(&c, a, WF_SBP_B); /* through B: always reachable (gather, then slice); a split
                                          kept may have to make way for an outer axis's step */
    }
    int nstates = 1;
    for (int a = 0; a < naxes; a++)
        nstates *= c.n[a];
    double *dist = malloc(sizeof(double) * (size_t)nstates);
    int *prev = malloc(sizeof(int) * (size_t)nstates);
    unsigned char *done = calloc((size_t)nstates, 1);
    if (!dist || !prev || !done) {
        free(dist);
        free(prev);
        free(done);
        return wf_errorf(WF_NOMEM, "boxing: out of memory for %d states", nstates);
    }
    int src = 0, dst = 0;
    for (int a = 0; a < naxes; a++) {
        int is = 0, id = 0;
        for (int i = 0; i < c.n[a]; i++) {
            if (c.v[a][i] == from->ax[a])
                is = i;
            if (c.v[a][i] == to->ax[a])
                id = i;
        }
        src = src * c.n[a] + is;
        dst = dst * c.n[a] + id;
    }
    for (int i = 0; i < nstates; i++) {
        dist[i] = -1;
        prev[i] = -1;
    }
    dist[src] = 0;
    /* Dijkstra, O(states^2): states are few (at most MAX_CAND^axes, typically < 20);
     * ties go to the lowest state index, so the path is deterministic. */
    for (;;) {
        int u = -1;
        for (int i = 0; i < nstates; i++)
            if (!done[i] && dist[i] >= 0 && (u < 0 || dist[i] < dist[u]))
                u = i;
        if (u < 0 || u == dst)
            break;
        done[u] = 1;
        wf_sbp su = decode(&c, naxes, u);
        int stride = 1;
        for (int a = naxes - 1; a >= 0; a--) {
            int cur = (u / stride) % c.n[a];
            for (int i = 0; i < c.n[a]; i++) {
                if (i == cur)
                    continue;
                int v = u + (i - cur) * stride;
                if (done[v])
                    continue;
                wf_sbp sv = su;
                sv.ax[a] = c.v[a][i];
                if (!wf_sbp_valid(m, ndim, shape, &sv) || !nested_ok(naxes, &su, &sv, a))
                    continue;
                double t = wf_sbp_box_axis_time(m, a, su.ax[a], sv.ax[a],
                                                on_axis_bytes(m, total, &su, a), NULL);
                /* Strictly cheaper beyond rounding: a reduce-scatter and an
                 * all-gather cost an all-reduce to the last bits, and the
                 * path found first (fewer steps) is kept. */
                if (dist[v] < 0 || dist[u] + t < dist[v] * (1 - 1e-12)) {
                    dist[v] = dist[u] + t;
                    prev[v] = u;
                }
            }
            stride *= c.n[a];
        }
    }
    if (dist[dst] < 0) { /* unreachable cannot happen: the direct axis-by-axis path is valid */
        free(dist);
        free(prev);
        free(done);
        return wf_errorf(WF_INTERNAL, "boxing: no path between layouts");
    }
    *time_s = dist[dst];
    /* Walk back, then write the steps in order. */
    int nsteps = 0;
    for (int v = dst; v != src; v = prev[v])
        nsteps++;
    int i = nsteps;
    for (int v = dst; v != src; v = prev[v]) {
        i--;
        if (i >= cap)
            continue;
        int u = prev[v];
        wf_sbp su = decode(&c, naxes, u), sv = decode(&c, naxes, v);
        int a = 0;
        while (a < naxes && su.ax[a] == sv.ax[a])
            a++;
        wf_sbp_box_step *st = &steps[i];
        st->axis = a;
        st->from = su;
        st->to = sv;
        double n = on_axis_bytes(m, total, &su, a);
        st->time_s = wf_sbp_box_axis_time(m, a, su.ax[a], sv.ax[a], n, &st->coll);
        st->bytes = st->coll == WF_COLL_ALLTOALL ? n / (double)m->size[a] : n;
    }
    free(dist);
    free(prev);
    free(done);
    return nsteps;
}

/* ---- cache ------------------------------------------------------------------------------ */

typedef struct {
    int64_t shape[WF_MAX_DIMS];
    int32_t ndim;
    int32_t elem_bytes;
    wf_sbp from, to;
} box_key;

struct wf_sbp_cache {
    wf_mesh mesh;
    box_key *keys;
    double *val;
    unsigned char *used;
    size_t cap, count;
    int64_t lookups, misses;
};

wf_status wf_sbp_cache_create(const wf_mesh *m, wf_sbp_cache **out)
{
    *out = NULL;
    wf_sbp_cache *c = calloc(1, sizeof *c);
    if (!c)
        return wf_errorf(WF_NOMEM, "boxing cache: out of memory");
    c->mesh = *m;
    c->cap = 1024;
    c->keys = calloc(c->cap, sizeof *c->keys);
    c->val = calloc(c->cap, sizeof *c->val);
    c->used = calloc(c->cap, 1);
    if (!c->keys || !c->val || !c->used) {
        wf_sbp_cache_free(c);
        return wf_errorf(WF_NOMEM, "boxing cache: out of memory");
    }
    *out = c;
    return WF_OK;
}

void wf_sbp_cache_free(wf_sbp_cache *c)
{
    if (!c)
        return;
    free(c->keys);
    free(c->val);
    free(c->used);
    free(c);
}

void wf_sbp_cache_stats(const wf_sbp_cache *c, int64_t *lookups, int64_t *misses)
{
    *lookups = c->lookups;
    *misses = c->misses;
}

static uint64_t key_hash(const box_key *k)
{
    /* Word-wise multiply-xorshift over the (zero-padded) key. */
    uint64_t w[sizeof(box_key) / 8 + 1] = {0};
    memcpy(w, k, sizeof *k);
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        h ^= w[i];
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    return h;
}

static size_t slot_of(const wf_sbp_cache *c, const box_key *k)
{
    size_t i = (size_t)(key_hash(k) & (c->cap - 1));
    while (c->used[i] && memcmp(&c->keys[i], k, sizeof *k) != 0)
        i = (i + 1) & (c->cap - 1);
    return i;
}

static int grow(wf_sbp_cache *c)
{
    wf_sbp_cache n = *c;
    n.cap = c->cap * 2;
    n.keys = calloc(n.cap, sizeof *n.keys);
    n.val = calloc(n.cap, sizeof *n.val);
    n.used = calloc(n.cap, 1);
    if (!n.keys || !n.val || !n.used) {
        free(n.keys);
        free(n.val);
        free(n.used);
        return 0;
    }
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->used[i])
            continue;
        size_t j = slot_of(&n, &c->keys[i]);
        n.used[j] = 1;
        n.keys[j] = c->keys[i];
        n.val[j] = c->val[i];
    }
    free(c->keys);
    free(c->val);
    free(c->used);
    *c = n;
    return 1;
}

double wf_sbp_boxing_time(wf_sbp_cache *c, const wf_tensor *t, const wf_sbp *from,
                          const wf_sbp *to)
{
    int naxes = c->mesh.naxes;
    c->lookups++;
    if (wf_sbp_equal(from, to, naxes))
        return wf_sbp_valid(&c->mesh, t->ndim, t->shape, from) ? 0.0 : -1.0;
    box_key k;
    memset(&k, 0, sizeof k); /* padding and unused dims hash as zero */
    k.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++)
        k.shape[d] = t->shape[d];
    k.elem_bytes = (int32_t)wf_dtype_bytes(t->dtype);
    k.from = wf_sbp_broadcast();
    k.to = wf_sbp_broadcast();
    for (int a = 0; a < naxes; a++) {
        k.from.ax[a] = from->ax[a];
        k.to.ax[a] = to->ax[a];
    }
    size_t i = slot_of(c, &k);
    if (c->used[i])
        return c->val[i];
    c->misses++;
    double time_s;
    int n = wf_sbp_boxing_path(&c->mesh, t->ndim, t->shape, (size_t)k.elem_bytes, &k.from, &k.to,
                               NULL, 0, &time_s);
    if (n < 0)
        time_s = -1.0;
    if ((c->count + 1) * 2 > c->cap) {
        if (!grow(c))
            return time_s; /* uncached but correct */
        i = slot_of(c, &k);
    }
    c->used[i] = 1;
    c->keys[i] = k;
    c->val[i] = time_s;
    c->count++;
    return time_s;
}
