/* weft cost: collective communication time (ALGORITHMS.md §1.2).
 *
 * Closed forms on a flat group (alpha-beta, ring and tree/recursive variants,
 * the cheaper taken on request), group placement on the cluster hierarchy
 * (ranks numbered rank = tp_rank + tp * (dp_rank + dp * pp_rank) on devices
 * numbered node-major), and the time of a collective over a placed group:
 * flat on the slowest level it spans, or hierarchical (reduce-scatter inside,
 * the reduced shards across, all-gather inside), whichever is cheaper.
 *
 * Bandwidths are per device and per direction, scaled by each level's
 * efficiency; `bytes` is always the full vector's size n (the input of an
 * all-reduce, the output of an all-gather, the input of a reduce-scatter).
 * A send/recv on the hierarchy also pays the cluster's per-message
 * p2p_overhead_s (the flat closed forms do not: they are the wire alone). */
#include "weft/cost.h"

#include <math.h>
#include <string.h>

static const char *const COLL_NAMES[WF_COLL_COUNT] = {
    "allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "sendrecv",
};

const char *wf_coll_name(wf_coll_kind k)
{
    if ((int)k < 0 || k >= WF_COLL_COUNT)
        return "?";
    return COLL_NAMES[k];
}

/* ceil(log2(p)) for p >= 1: the rounds of a recursive-doubling algorithm. */
static double log2_rounds(int64_t p)
{
    double r = 0;
    for (int64_t x = 1; x < p; x <<= 1)
        r += 1;
    return r;
}

static double ring_time(wf_coll_kind k, double p, double n, double a, double beta)
{
    switch (k) {
    case WF_COLL_ALLREDUCE:
        return 2 * (p - 1) * a + 2 * (p - 1) / p * n * beta;
    case WF_COLL_REDUCE_SCATTER:
    case WF_COLL_ALLGATHER:
    case WF_COLL_ALLTOALL:
        return (p - 1) * a + (p - 1) / p * n * beta;
    case WF_COLL_BROADCAST: /* pipelined chain */
        return (p - 1) * a + n * beta;
    case WF_COLL_SENDRECV:
    case WF_COLL_COUNT:
        break;
    }
    return a + n * beta;
}

static double tree_time(wf_coll_kind k, double p, double lg, double n, double a, double beta)
{
    switch (k) {
    case WF_COLL_ALLREDUCE: /* Rabenseifner: recursive halving + doubling */
        return 2 * lg * a + 2 * (p - 1) / p * n * beta;
    case WF_COLL_REDUCE_SCATTER: /* recursive halving */
    case WF_COLL_ALLGATHER:      /* recursive doubling */
        return lg * a + (p - 1) / p * n * beta;
    case WF_COLL_ALLTOALL: /* no tree variant: pairwise exchange */
        return (p - 1) * a + (p - 1) / p * n * beta;
    case WF_COLL_BROADCAST: /* binomial tree */
        return lg * (a + n * beta);
    case WF_COLL_SENDRECV:
    case WF_COLL_COUNT:
        break;
    }
    return a + n * beta;
}

double wf_coll_time_flat(wf_coll_kind k, wf_coll_algo algo, int64_t p, double bytes,
                         double alpha_s, double bw_bps)
{
    if (p <= 1 || bytes < 0 || !(bw_bps > 0))
        return 0;
    double beta = 1.0 / bw_bps, pp = (double)p;
    double ring = ring_time(k, pp, bytes, alpha_s, beta);
    if (algo == WF_ALGO_RING)
        return ring;
    double tree = tree_time(k, pp, log2_rounds(p), bytes, alpha_s, beta);
    if (algo == WF_ALGO_TREE)
        return tree;
    return ring < tree ? ring : tree;
}

/* ---- placement ---------------------------------------------------------------- */

/* Distinct values of floor(i * stride / unit) for i in [0, n): how many
 * blocks of `unit` consecutive devices the group touches. */
static int64_t distinct_units(int64_t n, int64_t stride, int64_t unit)
{
    if (unit <= 1)
        return n;
    if (stride % unit == 0)
        return n;
    if (unit % stride == 0) {
        int64_t per = unit / stride;
        return (n + per - 1) / per;
    }
    int64_t count = 0, last = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t u = i * stride / unit;
        if (u != last) {
            count++;
            last = u;
        }
    }
    return count;
}

wf_group wf_group_place(const wf_cluster *c, int64_t size, int64_t stride)
{
    wf_group g;
    g.nlevels = c->nlevels;
    for (int l = 0; l < WF_MAX_LEVELS; l++)
        g.span[l] = 1;
    if (size < 1)
        size = 1;
    if (stride < 1)
        stride = 1;
    /* prev = units touched at the level below (devices for level 0). The
     * outermost level is unbounded: a group never spans more than one of it. */
    int64_t prev = size, unit = 1;
    for (int l = 0; l < c->nlevels; l++) {
        unit *= c->level[l].size;
        int64_t here = l == c->nlevels - 1 ? 1 : distinct_units(size, stride, unit);
        g.span[l] = (prev + here - 1) / here;
        prev = here;
    }
    return g;
}

int64_t wf_group_size(const wf_group *g)
{
    int64_t n = 1;
    for (int l = 0; l < g->nlevels; l++)
        n *= g->span[l];
    return n;
}

/* ---- time on the hierarchy ------------------------------------------------------- */

wf_coll_net wf_coll_net_of(const wf_cluster *c)
{
    wf_coll_net n;
    memset(&n, 0, sizeof n);
    n.nlevels = c->nlevels < WF_MAX_LEVELS ? c->nlevels : WF_MAX_LEVELS;
    for (int l = 0; l < n.nlevels; l++)
        n.level[l] = c->level[l];
    n.reduce_bps = c->reduce_bps;
    n.p2p_overhead_s = c->p2p_overhead_s;
    n.nccl = c->coll_nccl > 0.5;
    return n;
}

/* The hierarchy wf_coll_time reads: the cluster's own fields, or a wf_coll_net. */
typedef struct {
    int nlevels;
    const wf_level *level;
    double reduce_bps, p2p_overhead_s;
    int nccl;
} net_view;

static double level_time(const net_view *c, int l, wf_coll_kind k, int64_t p, double bytes)
{
    const wf_level *v = &c->level[l];
    /* NCCL runs only all-reduce as a tree; reduce-scatter, all-gather and
     * broadcast are rings (NCCL 2.7.8, src/graph/tuning.cc at 033d7995,
     * ncclTopoTuneModel: `if (coll != ncclCollAllReduce && a !=
     * NCCL_ALGO_RING) continue;`). */
    wf_coll_algo algo = c->nccl && k != WF_COLL_ALLREDUCE ? WF_ALGO_RING : WF_ALGO_AUTO;
    return wf_coll_time_flat(k, algo, p, bytes, v->latency_s, v->bw_bps * v->eff);
}

/* Hierarchical reduce-scatter / all-gather / all-reduce over the spanned
 * levels from index `from` of lv[] upwards: the innermost level works on the
 * full vector, each outer level on the shard the inner levels left. */
static double hier_time(const net_view *c, const wf_group *g, const int *lv, int nlv, int from,
                        wf_coll_kind k, double bytes)
{
    if (from == nlv - 1)
        return level_time(c, lv[from], k, g->span[lv[from]], bytes);
    int l = lv[from];
    int64_t p = g->span[l];
    double inner = bytes / (double)p;
    if (k == WF_COLL_ALLREDUCE)
        return level_time(c, l, WF_COLL_REDUCE_SCATTER, p, bytes) +
               hier_time(c, g, lv, nlv, from + 1, WF_COLL_ALLREDUCE, inner) +
               level_time(c, l, WF_COLL_ALLGATHER, p, bytes);
    return level_time(c, l, k, p, bytes) + hier_time(c, g, lv, nlv, from + 1, k, inner);
}

static double coll_time(const net_view *c, wf_coll_kind k, const wf_group *g, double bytes)
{
    int lv[WF_MAX_LEVELS], nlv = 0;
    for (int l = 0; l < g->nlevels && l < c->nlevels; l++)
        if (g->span[l] > 1)
            lv[nlv++] = l;
    if (nlv == 0 || !(bytes > 0))
        return 0;
    int64_t p = wf_group_size(g);
    double t = level_time(c, lv[nlv - 1], k, p, bytes);
    if (nlv > 1 && (k == WF_COLL_ALLREDUCE || k == WF_COLL_REDUCE_SCATTER || k == WF_COLL_ALLGATHER)) {
        double h = hier_time(c, g, lv, nlv, 0, k, bytes);
        if (h < t)
            t = h;
    }
    /* The reduction arithmetic: each member reduces (p-1)/p of the vector. */
    if (c->reduce_bps > 0 && (k == WF_COLL_ALLREDUCE || k == WF_COLL_REDUCE_SCATTER))
        t += (double)(p - 1) / (double)p * bytes / c->reduce_bps;
    /* A point-to-point message pays the framework's fixed cost on top of the
     * wire (the p2p call, the synchronization after it, the re-launch of the
     * next chunk's kernels): what makes very fine pipeline chunks expensive. */
    if (k == WF_COLL_SENDRECV)
        t += c->p2p_overhead_s;
    return t;
}

double wf_coll_time(const wf_cluster *c, wf_coll_kind k, const wf_group *g, double bytes)
{
    net_view v = {c->nlevels, c->level, c->reduce_bps, c->p2p_overhead_s, c->coll_nccl > 0.5};
    return coll_time(&v, k, g, bytes);
}

double wf_coll_time_net(const wf_coll_net *n, wf_coll_kind k, const wf_group *g, double bytes)
{
    net_view v = {n->nlevels, n->level, n->reduce_bps, n->p2p_overhead_s, n->nccl};
    return coll_time(&v, k, g, bytes);
}
