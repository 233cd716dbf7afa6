/* Frontier tracking (TensorOpt's FT, Cai et al. 2022) by variable elimination.
 *
 * Every factor maps an assignment of its (at most two) variables to a Pareto
 * frontier of (time, memory) points: the unary factors hold each choice's own
 * costs, the pairwise factors the edge tables (memory 0). Eliminating a
 * variable x whose factors reach at most two other variables a, b combines
 * them into one factor over {a, b}:
 *     G(ca, cb) = prune( union over c of  F1(c, ..) (+) F2(c, ..) (+) F3(c, ..) )
 * where (+) is the Minkowski sum of frontiers. With one neighbour this is the
 * chain step F_{i+1}(c') = prune(U_c F_i(c) (+) {e(c,c') + t(c'), m(c')});
 * with two it is series reduction; factors over the same variables are merged
 * first (parallel edges). prune(S) sorts by time and keeps the points whose
 * memory strictly decreases; when more than max_frontier remain, memory is
 * cut into max_frontier buckets and each bucket keeps its fastest point.
 * The variable eliminated next is the one whose elimination is cheapest
 * (entries of the new table x its choices: leaves and chains first). A graph
 * that is not series-parallel (treewidth above 2) reaches a state where every
 * variable has three or more neighbours, and a mesh with many axes can make
 * every elimination costlier than max_elim_work; then the most connected
 * variable is fixed to the anchor's choice (the descent's plan) and the
 * elimination goes on: the frontier is then conditioned on that choice. Every kept point remembers how it was made (a
 * DAG of choices), so each point of the final frontier yields its plan. */
#include "search/oplevel-impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double t, m;
    int node; /* pnode that made the point, -1 for the original costs */
} pt;

typedef struct {
    int var, ch;  /* var >= 0: this point chose ch for var; -1: a sum */
    int kid[3];
} pnode;

typedef struct {
    int nv, v[2]; /* variables, ascending */
    int nent;
    int *off, *len;
    pt *pts;
    int npts;
    size_t cappts;
    int alive;
} factor;

typedef struct {
    double t, m;
    int ch;
    int kid[3];
} cand;

typedef struct {
    const ol_problem *p;
    int K;
    factor *f;
    int nf;
    size_t capf;
    pnode *pn;
    int npn;
    size_t cappn;
    int **vf;
    int *nvf;
    size_t *capvf;
    unsigned char *gone;
    cand *c1, *c2, *cu; /* scratch: per-choice, sum, union */
    int *fine;          /* scratch: 4K fine memory buckets */
    size_t cap1, cap2, capu;
} ft_state;

static wf_status oom(void) { return wf_errorf(WF_NOMEM, "frontier tracking: out of memory"); }

/* RESERVE(ptr, cap, need): 1 when ptr has room for need elements (grown by
 * wf_grow, doubling from 256), else 0 with ptr left intact. */
#define RESERVE(ptr, cap, need) reserve(&(ptr), &(cap), (need), sizeof *(ptr))
static int reserve(void *pp, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 1;
    int c = (int)*cap; /* wf_grow keeps capacities below INT_MAX */
    if (need > INT_MAX || wf_grow(pp, &c, (int64_t)need, elem, 256) != 0)
        return 0;
    *cap = (size_t)c;
    return 1;
}

static int cmp_cand(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    if (a->m != b->m)
        return a->m < b->m ? -1 : 1;
    if (a->ch != b->ch)
        return a->ch < b->ch ? -1 : 1;
    for (int i = 0; i < 3; i++)
        if (a->kid[i] != b->kid[i])
            return a->kid[i] < b->kid[i] ? -1 : 1;
    return 0;
}

/* Keeps the Pareto points of c[0..n) sorted by (time, memory): memory
 * strictly decreasing; of two times equal up to rounding (sums taken in
 * another order), the smaller memory. Returns the count. */
static int pareto_sorted(cand *c, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k > 0 && c[i].m >= c[k - 1].m)
            continue;
        if (k > 0 && c[i].t <= c[k - 1].t + 1e-12 * c[k - 1].t)
            k--;
        c[k++] = c[i];
    }
    return k;
}

/* Bounds a Pareto list to about K points: memory cut into K buckets, each
 * keeping its fastest point; the fastest and the smallest always stay. */
static int bucket_bound(cand *c, int k, int K)
{
    if (k <= K)
        return k;
    double hi = c[0].m, lo = c[k - 1].m, span = hi - lo;
    int out = 1, last = 0;
    for (int i = 1; i < k - 1; i++) {
        int b = (int)((hi - c[i].m) / span * (double)(K - 1));
        if (b != last) {
            c[out++] = c[i];
            last = b;
        }
    }
    c[out++] = c[k - 1];
    return out;
}

/* Pareto-prunes c[0..n) in place and bounds it to about K points; returns the count. */
static int prune(cand *c, int n, int K)
{
    if (n <= 1)
        return n;
    qsort(c, (size_t)n, sizeof *c, cmp_cand);
    return bucket_bound(c, pareto_sorted(c, n), K);
}

/* Heap of list heads for the k-way merge (by time, memory, then list). */
typedef struct {
    const cand *c;
    int list;
} head;

static int head_less(const head *a, const head *b)
{
    if (a->c->t != b->c->t)
        return a->c->t < b->c->t;
    if (a->c->m != b->c->m)
        return a->c->m < b->c->m;
    return a->list < b->list;
}

static void sift_down(head *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && head_less(&h[l], &h[m]))
            m = l;
        if (r < n && head_less(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        head t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Beyond GRID_ABOVE x K candidate points, a union or a sum of frontiers is
 * pruned on a grid (grid_pareto) instead of by sorting. */
#define GRID_ABOVE 2

/* The Pareto set of many unsorted points c[0..n), approximately and in one
 * pass: the fastest point per fine memory bucket (4K buckets over the range),
 * then those whose time beats every smaller one, bounded to about K points.
 * Only points the K-bucket bound would mostly drop anyway are lost; the
 * smallest memory always survives. fine has room for 4K ints. */
static int grid_pareto(const cand *c, size_t n, int *fine, int K, cand *out)
{
    if (n == 0)
        return 0;
    double lo = c[0].m, hi = c[0].m;
    size_t mmin = 0;
    for (size_t i = 1; i < n; i++) {
        if (c[i].m < lo)
            lo = c[i].m;
        if (c[i].m > hi)
            hi = c[i].m;
        if (c[i].m < c[mmin].m || (c[i].m == c[mmin].m && c[i].t < c[mmin].t))
            mmin = i;
    }
    int R = 4 * K;
    for (int b = 0; b < R; b++)
        fine[b] = -1;
    double scale = hi > lo ? (double)(R - 1) / (hi - lo) : 0;
    for (size_t i = 0; i < n; i++) {
        int b = (int)((c[i].m - lo) * scale);
        if (b < 0)
            b = 0;
        if (b >= R)
            b = R - 1;
        int w = fine[b];
        if (w < 0 || c[i].t < c[w].t || (c[i].t == c[w].t && c[i].m < c[w].m))
            fine[b] = (int)i;
    }
    /* Memory ascending: keep each bucket's winner faster than every smaller
     * one; then reverse into time-ascending order. */
    int k = 0;
    double best_t = 0;
    if (fine[0] != (int)mmin) {
        out[k++] = c[mmin];
        best_t = c[mmin].t;
    }
    for (int b = 0; b < R; b++) {
        int w = fine[b];
        if (w < 0 || (k > 0 && !(c[w].t < best_t)))
            continue;
        out[k++] = c[w];
        best_t = c[w].t;
    }
    for (int i = 0; i < k / 2; i++) {
        cand t = out[i];
        out[i] = out[k - 1 - i];
        out[k - 1 - i] = t;
    }
    return bucket_bound(out, k, K);
}

/* Merges nl sorted Pareto lists (list i = c[start[i] .. start[i+1])) into the
 * Pareto set of their union, written to out, bounded to about K points
 * (exact up to GRID_ABOVE x K points, grid_pareto above). heap and pos have room for nl
 * entries, fine for 4K. Returns the count. */
static int merge_lists(const cand *c, const size_t *start, int nl, head *heap, size_t *pos,
                       int *fine, cand *out, int K)
{
    size_t n = start[nl];
    if (n > (size_t)GRID_ABOVE * (size_t)K)
        return grid_pareto(c, n, fine, K, out);
    int nh = 0;
    for (int i = 0; i < nl; i++) {
        pos[i] = start[i];
        if (start[i] < start[i + 1])
            heap[nh++] = (head){&c[start[i]], i};
    }
    for (int i = nh / 2 - 1; i >= 0; i--)
        sift_down(heap, nh, i);
    int k = 0;
    while (nh > 0) {
        head top = heap[0];
        const cand *p = top.c;
        if (!(k > 0 && p->m >= out[k - 1].m)) {
            if (k > 0 && p->t <= out[k - 1].t + 1e-12 * out[k - 1].t)
                k--;
            out[k++] = *p;
        }
        if (++pos[top.list] < start[top.list + 1]) {
            heap[0] = (head){&c[pos[top.list]], top.list};
        } else {
            heap[0] = heap[--nh];
        }
        sift_down(heap, nh, 0);
    }
    return bucket_bound(out, k, K);
}

/* ---- factors -------------------------------------------------------------------- */

static int nch(const ft_state *s, int v) { return s->p->var[v].nch; }

static int new_factor(ft_state *s, int nv, const int *v)
{
    if (!RESERVE(s->f, s->capf, (size_t)s->nf + 1))
        return -1;
    factor *F = &s->f[s->nf];
    memset(F, 0, sizeof *F);
    F->nv = nv;
    for (int i = 0; i < nv; i++)
        F->v[i] = v[i];
    if (nv == 2 && F->v[0] > F->v[1]) {
        F->v[0] = v[1];
        F->v[1] = v[0];
    }
    F->nent = 1;
    for (int i = 0; i < nv; i++)
        F->nent *= nch(s, F->v[i]);
    F->off = malloc(sizeof(int) * (size_t)F->nent);
    F->len = calloc((size_t)F->nent, sizeof(int));
    if (!F->off || !F->len) {
        free(F->off);
        free(F->len);
        return -1;
    }
    F->alive = 1;
    return s->nf++;
}

/* Appends entry e's points (entries are filled in order 0, 1, ...). */
static int put_entry(factor *F, int e, const pt *pts, int n)
{
    if (!RESERVE(F->pts, F->cappts, (size_t)(F->npts + n)))
        return 0;
    F->off[e] = F->npts;
    F->len[e] = n;
    memcpy(F->pts + F->npts, pts, sizeof(pt) * (size_t)n);
    F->npts += n;
    return 1;
}

static int attach(ft_state *s, int fi)
{
    const factor *F = &s->f[fi];
    for (int i = 0; i < F->nv; i++) {
        int v = F->v[i];
        if (!RESERVE(s->vf[v], s->capvf[v], (size_t)s->nvf[v] + 1))
            return 0;
        s->vf[v][s->nvf[v]++] = fi;
    }
    return 1;
}

static void kill(ft_state *s, int fi)
{
    factor *F = &s->f[fi];
    F->alive = 0;
    free(F->off);
    free(F->len);
    free(F->pts);
    F->off = F->len = NULL;
    F->pts = NULL;
}

/* Alive factors of v (compacting its list). */
static int factors_of(ft_state *s, int v, int *out, int cap)
{
    int n = 0, k = 0;
    for (int i = 0; i < s->nvf[v]; i++) {
        int fi = s->vf[v][i];
        if (!s->f[fi].alive)
            continue;
        s->vf[v][k++] = fi;
        if (n < cap)
            out[n] = fi;
        n++;
    }
    s->nvf[v] = k;
    return n;
}

/* Stride of variable v in factor F's entry index (0 when absent). */
static int stride_of(const ft_state *s, const factor *F, int v)
{
    if (F->nv >= 1 && F->v[0] == v)
        return F->nv == 2 ? nch(s, F->v[1]) : 1;
    if (F->nv == 2 && F->v[1] == v)
        return 1;
    return 0;
}

static int new_node(ft_state *s, int var, int ch, const int *kid)
{
    if (!RESERVE(s->pn, s->cappn, (size_t)s->npn + 1))
        return -2;
    pnode *n = &s->pn[s->npn];
    n->var = var;
    n->ch = ch;
    for (int i = 0; i < 3; i++)
        n->kid[i] = kid[i];
    return s->npn++;
}

/* out = every a[i] (+) b[j], recording b's node in kid[slot]; returns the count. */
static int sum_lists(const cand *a, int na, const pt *b, int nb, int slot, cand *out)
{
    int n = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++) {
            out[n] = a[i];
            out[n].t += b[j].t;
            out[n].m += b[j].m;
            out[n].kid[slot] = b[j].node;
            n++;
        }
    return n;
}

/* Minkowski sum of the frontiers of k factor entries (pointers to their
 * points), pruned, into s->c1 tagged with choice ch. Returns the count or -1. */
static int combine(ft_state *s, int k, const pt *const *lists, const int *lens, int ch)
{
    /* Factor entries are sorted Pareto lists; adding one point to every point
     * of one keeps it so, which is the common case (original costs are
     * single points): only two real frontiers need the pairs and a prune. */
    size_t need = (size_t)lens[0];
    if (!RESERVE(s->c1, s->cap1, need + 1))
        return -1;
    int n = 0;
    for (int j = 0; j < lens[0]; j++) {
        cand c = {lists[0][j].t, lists[0][j].m, ch, {lists[0][j].node, -1, -1}};
        s->c1[n++] = c;
    }
    for (int i = 1; i < k; i++) {
        if (lens[i] == 1) {
            for (int j = 0; j < n; j++) {
                s->c1[j].t += lists[i][0].t;
                s->c1[j].m += lists[i][0].m;
                s->c1[j].kid[i] = lists[i][0].node;
            }
            continue;
        }
        if (n == 1) {
            cand base = s->c1[0];
            if (!RESERVE(s->c1, s->cap1, (size_t)lens[i] + 1))
                return -1;
            for (int j = 0; j < lens[i]; j++) {
                s->c1[j] = base;
                s->c1[j].t += lists[i][j].t;
                s->c1[j].m += lists[i][j].m;
                s->c1[j].kid[i] = lists[i][j].node;
            }
            n = lens[i];
            continue;
        }
        size_t prod = (size_t)n * (size_t)lens[i];
        if (!RESERVE(s->c2, s->cap2, prod + 1))
            return -1;
        int m = sum_lists(s->c1, n, lists[i], lens[i], i, s->c2);
        if (!RESERVE(s->c1, s->cap1, (size_t)m + 1))
            return -1;
        if (prod > (size_t)GRID_ABOVE * (size_t)s->K) {
            n = grid_pareto(s->c2, (size_t)m, s->fine, s->K, s->c1);
        } else {
            m = prune(s->c2, m, s->K);
            memcpy(s->c1, s->c2, sizeof(cand) * (size_t)m);
            n = m;
        }
    }
    return bucket_bound(s->c1, n, s->K);
}

/* Materializes pruned candidates as points: a node per point that has
 * something to remember (a choice, or kids). */
static int materialize(ft_state *s, const cand *c, int n, int var, pt *out)
{
    for (int i = 0; i < n; i++) {
        int node = -1;
        if (var >= 0 || c[i].kid[0] >= 0 || c[i].kid[1] >= 0 || c[i].kid[2] >= 0) {
            node = new_node(s, var, c[i].ch, c[i].kid);
            if (node < -1)
                return 0;
        }
        out[i] = (pt){c[i].t, c[i].m, node};
    }
    return 1;
}

/* Merges alive factors of x with identical variable sets (parallel edges). */
static wf_status merge_parallel(ft_state *s, int x)
{
    int ids[64];
    for (;;) {
        int n = factors_of(s, x, ids, 64);
        if (n > 64)
            n = 64;
        int a = -1, b = -1;
        for (int i = 0; i < n && a < 0; i++)
            for (int j = i + 1; j < n && a < 0; j++) {
                const factor *F = &s->f[ids[i]], *G = &s->f[ids[j]];
                if (F->nv == G->nv && F->v[0] == G->v[0] && (F->nv < 2 || F->v[1] == G->v[1])) {
                    a = ids[i];
                    b = ids[j];
                }
            }
        if (a < 0)
            return WF_OK;
        int nv = s->f[a].nv, vars[2] = {s->f[a].v[0], s->f[a].v[1]};
        int fi = new_factor(s, nv, vars);
        if (fi < 0)
            return oom();
        factor *F = &s->f[a], *G = &s->f[b], *H = &s->f[fi];
        for (int e = 0; e < H->nent; e++) {
            const pt *lists[2] = {F->pts + F->off[e], G->pts + G->off[e]};
            int lens[2] = {F->len[e], G->len[e]};
            int m = combine(s, 2, lists, lens, 0);
            if (m < 0)
                return oom();
            pt *tmp = malloc(sizeof(pt) * (size_t)m + 1);
            if (!tmp || !materialize(s, s->c1, m, -1, tmp) || !put_entry(&s->f[fi], e, tmp, m)) {
                free(tmp);
                return oom();
            }
            free(tmp);
            F = &s->f[a];
            G = &s->f[b];
            H = &s->f[fi];
        }
        kill(s, a);
        kill(s, b);
        if (!attach(s, fi))
            return oom();
    }
}

/* Neighbour set of x (up to 3 reported); returns its size or -1 when > 2. */
static int neighbours(ft_state *s, int x, int nb[3])
{
    int ids[64], n = factors_of(s, x, ids, 64), k = 0;
    if (n > 64)
        return -1;
    for (int i = 0; i < n; i++) {
        const factor *F = &s->f[ids[i]];
        for (int j = 0; j < F->nv; j++) {
            int v = F->v[j];
            if (v == x)
                continue;
            int dup = 0;
            for (int q = 0; q < k; q++)
                dup |= nb[q] == v;
            if (!dup) {
                if (k == 2)
                    return -1;
                nb[k++] = v;
            }
        }
    }
    return k;
}

static wf_status eliminate(ft_state *s, int x)
{
    wf_status st = merge_parallel(s, x);
    if (st)
        return st;
    int ids[64], nb[3];
    int k = factors_of(s, x, ids, 64);
    int nn = neighbours(s, x, nb);
    if (nn < 0 || k > 3)
        return wf_errorf(WF_INTERNAL, "frontier tracking: eliminating a variable of degree > 2");
    if (nn == 2 && nb[0] > nb[1]) {
        int t = nb[0];
        nb[0] = nb[1];
        nb[1] = t;
    }
    int gi = new_factor(s, nn, nb);
    if (gi < 0)
        return oom();
    int na = nn >= 1 ? nch(s, nb[0]) : 1, nbb = nn == 2 ? nch(s, nb[1]) : 1, nx = nch(s, x);
    int sx[3], sa[3], sb[3];
    for (int i = 0; i < k; i++) {
        sx[i] = stride_of(s, &s->f[ids[i]], x);
        sa[i] = nn >= 1 ? stride_of(s, &s->f[ids[i]], nb[0]) : 0;
        sb[i] = nn == 2 ? stride_of(s, &s->f[ids[i]], nb[1]) : 0;
    }
    pt *tmp = NULL;
    size_t captmp = 0;
    size_t *start = malloc(sizeof(size_t) * (size_t)(nx + 1));
    size_t *pos = malloc(sizeof(size_t) * (size_t)(nx + 1));
    head *heap = malloc(sizeof(head) * (size_t)(nx + 1));
    if (!start || !pos || !heap) {
        st = oom();
        goto fail;
    }
    for (int ca = 0; ca < na; ca++)
        for (int cb = 0; cb < nbb; cb++) {
            /* Per choice of x a pruned frontier (sorted), then their union's. */
            size_t nu = 0;
            for (int c = 0; c < nx; c++) {
                const pt *lists[3];
                int lens[3];
                for (int i = 0; i < k; i++) {
                    const factor *F = &s->f[ids[i]];
                    int e = c * sx[i] + ca * sa[i] + cb * sb[i];
                    lists[i] = F->pts + F->off[e];
                    lens[i] = F->len[e];
                }
                int m = combine(s, k, lists, lens, c);
                if (m < 0 || !RESERVE(s->cu, s->capu, nu + (size_t)m + 1)) {
                    st = oom();
                    goto fail;
                }
                start[c] = nu;
                memcpy(s->cu + nu, s->c1, sizeof(cand) * (size_t)m);
                nu += (size_t)m;
            }
            start[nx] = nu;
            if (!RESERVE(s->c2, s->cap2, nu + 1)) {
                st = oom();
                goto fail;
            }
            int m = merge_lists(s->cu, start, nx, heap, pos, s->fine, s->c2, s->K);
            if (!RESERVE(tmp, captmp, (size_t)m + 1) || !materialize(s, s->c2, m, x, tmp) ||
                !put_entry(&s->f[gi], ca * nbb + cb, tmp, m)) {
                st = oom();
                goto fail;
            }
        }
    free(tmp);
    free(start);
    free(pos);
    free(heap);
    for (int i = 0; i < k; i++)
        kill(s, ids[i]);
    if (!attach(s, gi))
        return oom();
    s->gone[x] = 1;
    return WF_OK;
fail:
    free(tmp);
    free(start);
    free(pos);
    free(heap);
    return st;
}

/* Fixes x to choice c0: its factors lose x; its unary points remember the choice. */
static wf_status condition(ft_state *s, int x, int c0)
{
    int ids[256];
    int k = factors_of(s, x, ids, 256);
    if (k > 256)
        return wf_errorf(WF_INTERNAL, "frontier tracking: variable with %d factors", k);
    int wrapped = 0;
    for (int i = 0; i < k; i++) {
        const factor *F = &s->f[ids[i]];
        int rest[1], nr = 0;
        for (int j = 0; j < F->nv; j++)
            if (F->v[j] != x)
                rest[nr++] = F->v[j];
        int gi = new_factor(s, nr, rest);
        if (gi < 0)
            return oom();
        F = &s->f[ids[i]];
        int sx = stride_of(s, F, x), sr = nr ? stride_of(s, F, rest[0]) : 0;
        int nent = s->f[gi].nent;
        for (int e = 0; e < nent; e++) {
            F = &s->f[ids[i]];
            int src = c0 * sx + e * sr;
            int n = F->len[src];
            pt *tmp = malloc(sizeof(pt) * (size_t)n + 1);
            if (!tmp)
                return oom();
            memcpy(tmp, F->pts + F->off[src], sizeof(pt) * (size_t)n);
            if (nr == 0 && !wrapped) {
                for (int j = 0; j < n; j++) {
                    int kid[3] = {tmp[j].node, -1, -1};
                    tmp[j].node = new_node(s, x, c0, kid);
                    if (tmp[j].node < -1) {
                        free(tmp);
                        return oom();
                    }
                }
            }
            if (!put_entry(&s->f[gi], e, tmp, n)) {
                free(tmp);
                return oom();
            }
            free(tmp);
        }
        if (nr == 0)
            wrapped = 1;
        kill(s, ids[i]);
        if (!attach(s, gi))
            return oom();
    }
    if (!wrapped) {
        int gi = new_factor(s, 0, NULL);
        int kid[3] = {-1, -1, -1};
        int node = new_node(s, x, c0, kid);
        pt one = {0, 0, node};
        if (gi < 0 || node < 0 || !put_entry(&s->f[gi], 0, &one, 1))
            return oom();
    }
    s->gone[x] = 1;
    return WF_OK;
}

static void state_free(ft_state *s)
{
    for (int i = 0; i < s->nf; i++)
        if (s->f[i].alive)
            kill(s, i);
    free(s->f);
    free(s->pn);
    if (s->vf)
        for (int v = 0; v < s->p->nvar; v++)
            free(s->vf[v]);
    free(s->vf);
    free(s->nvf);
    free(s->capvf);
    free(s->gone);
    free(s->fine);
    free(s->c1);
    free(s->c2);
    free(s->cu);
}

static wf_status init_factors(ft_state *s)
{
    const ol_problem *p = s->p;
    for (int v = 0; v < p->nvar; v++) {
        int fi = new_factor(s, 1, &v);
        if (fi < 0)
            return oom();
        for (int c = 0; c < p->var[v].nch; c++) {
            pt one = {p->var[v].t[c], p->var[v].m[c], -1};
            if (!put_entry(&s->f[fi], c, &one, 1))
                return oom();
        }
        if (!attach(s, fi))
            return oom();
    }
    for (int e = 0; e < p->nedge; e++) {
        int vars[2] = {p->edge[e].u, p->edge[e].v};
        int fi = new_factor(s, 2, vars);
        if (fi < 0)
            return oom();
        for (int i = 0; i < s->f[fi].nent; i++) {
            pt one = {p->edge[e].t[i], 0, -1};
            if (!put_entry(&s->f[fi], i, &one, 1))
                return oom();
        }
        if (!attach(s, fi))
            return oom();
    }
    return WF_OK;
}

/* Follows a point's DAG, setting assign[var] for every choice on the way. */
static wf_status reconstruct(const ft_state *s, const int *roots, int nroots, int *assign)
{
    int n = s->p->nvar;
    for (int v = 0; v < n; v++)
        assign[v] = -1;
    size_t cap = 256, top = 0;
    int *stack = malloc(sizeof(int) * cap);
    if (!stack)
        return oom();
    for (int i = 0; i < nroots; i++)
        if (roots[i] >= 0)
            stack[top++] = roots[i];
    while (top > 0) {
        const pnode *pn = &s->pn[stack[--top]];
        if (pn->var >= 0)
            assign[pn->var] = pn->ch;
        for (int i = 0; i < 3; i++)
            if (pn->kid[i] >= 0) {
                if (!RESERVE(stack, cap, top + 1)) {
                    free(stack);
                    return oom();
                }
                stack[top++] = pn->kid[i];
            }
    }
    free(stack);
    for (int v = 0; v < n; v++)
        if (assign[v] < 0)
            return wf_errorf(WF_INTERNAL, "frontier tracking: variable %d left unassigned", v);
    return WF_OK;
}

wf_status ol_ft_search(const ol_problem *p, const int *anchor, ol_plan **plans, int *nplans,
                       int *cap_plans, int *conditioned, wf_arena *a)
{
    ft_state s;
    memset(&s, 0, sizeof s);
    s.p = p;
    s.K = p->opts.max_frontier;
    wf_status st = WF_OK;
    int *assign = NULL;
    s.vf = calloc((size_t)p->nvar + 1, sizeof(int *));
    s.nvf = calloc((size_t)p->nvar + 1, sizeof(int));
    s.capvf = calloc((size_t)p->nvar + 1, sizeof(size_t));
    s.gone = calloc((size_t)p->nvar + 1, 1);
    s.fine = malloc(sizeof(int) * (size_t)(4 * s.K));
    if (!s.vf || !s.nvf || !s.capvf || !s.gone || !s.fine) {
        st = oom();
        goto done;
    }
    if ((st = init_factors(&s)))
        goto done;
    for (int left = p->nvar; left > 0; left--) {
        /* The next variable: the smallest new table (entries x choices). */
        int best = -1;
        double best_cost = 0;
        for (int x = 0; x < p->nvar; x++) {
            if (s.gone[x])
                continue;
            int nb[3];
            int nn = neighbours(&s, x, nb);
            if (nn < 0)
                continue;
            /* Work: new entries x choices of x x the frontier points combined. */
            double cost = nch(&s, x);
            for (int i = 0; i < nn; i++)
                cost *= nch(&s, nb[i]);
            int ids[64], nfx = factors_of(&s, x, ids, 64);
            for (int i = 0; i < nfx && i < 64; i++) {
                const factor *F = &s.f[ids[i]];
                cost *= (double)F->npts / (double)F->nent;
            }
            if (cost > (double)p->opts.max_elim_work)
                continue;
            if (best < 0 || cost < best_cost) {
                best = x;
                best_cost = cost;
            }
        }
        if (best >= 0) {
            st = eliminate(&s, best);
        } else {
            /* Not series-parallel here (or too costly): fix the most connected
             * variable, the one with more choices on a tie. */
            int pick = -1, most = -1, most_ch = -1;
            for (int x = 0; x < p->nvar; x++) {
                if (s.gone[x])
                    continue;
                int ids[1];
                int d = factors_of(&s, x, ids, 0);
                if (d > most || (d == most && nch(&s, x) > most_ch)) {
                    most = d;
                    most_ch = nch(&s, x);
                    pick = x;
                }
            }
            st = condition(&s, pick, anchor[pick]);
            (*conditioned)++;
        }
        if (st)
            goto done;
    }
    /* The 0-variable factors left: their Minkowski sum is the frontier. */
    {
        int n = 0, nz = 0;
        for (int i = 0; i < s.nf; i++) {
            const factor *F = &s.f[i];
            if (!F->alive || F->nv != 0)
                continue;
            const pt *lists[2];
            int lens[2];
            if (nz == 0) {
                if (!RESERVE(s.cu, s.capu, (size_t)F->len[0] + 1)) {
                    st = oom();
                    goto done;
                }
                for (int j = 0; j < F->len[0]; j++) {
                    const pt *q = &F->pts[F->off[0] + j];
                    s.cu[j] = (cand){q->t, q->m, 0, {q->node, -1, -1}};
                }
                n = F->len[0];
            } else {
                /* Fold the running sum into one node per point, then add F. */
                pt *cur = malloc(sizeof(pt) * (size_t)n + 1);
                if (!cur || !materialize(&s, s.cu, n, -1, cur)) {
                    free(cur);
                    st = oom();
                    goto done;
                }
                F = &s.f[i];
                lists[0] = cur;
                lens[0] = n;
                lists[1] = F->pts + F->off[0];
                lens[1] = F->len[0];
                int m = combine(&s, 2, lists, lens, 0);
                free(cur);
                if (m < 0 || !RESERVE(s.cu, s.capu, (size_t)m + 1)) {
                    st = oom();
                    goto done;
                }
                memcpy(s.cu, s.c1, sizeof(cand) * (size_t)m);
                n = m;
            }
            nz++;
        }
        n = prune(s.cu, n, s.K);
        assign = malloc(sizeof(int) * (size_t)p->nvar + 1);
        if (!assign) {
            st = oom();
            goto done;
        }
        int first = *nplans;
        for (int i = 0; i < n; i++) {
            if ((st = reconstruct(&s, s.cu[i].kid, 3, assign)))
                goto done;
            if ((st = ol_plans_push(p, plans, nplans, cap_plans, assign, a)))
                goto done;
        }
        /* Exact costs may reorder near-ties: prune again on them. */
        *nplans = first + ol_plans_prune(*plans + first, *nplans - first);
    }
done:
    free(assign);
    state_free(&s);
    return st;
}
