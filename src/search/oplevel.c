/* Op-level search: builds the decision problem of a graph on a mesh (which
 * signature each forward op runs, which layout each shared leaf tensor is
 * stored in), evaluates plans, and drives coordinate descent and frontier
 * tracking (include/weft/search.h says what is costed).
 *
 * Layer tying: forward ops stamped with the same repeated block and the same
 * position inside their layer are one decision when every layer of the block
 * has the same ops (kinds, attributes, shapes, roles); the representative
 * (first layer) is costed and its costs multiplied by the layer count. Edges
 * between tied groups (inside a layer, or from layer l to l+1) are costed once
 * per distinct (producer group, output, consumer group, input) and multiplied
 * by their occurrences.
 *
 * Gradients (the SBP duals, sbp.h): an edge costs the forward boxing of the
 * tensor from its producer's layout to its consumer's, plus, when the tensor
 * needs a gradient, the backward boxing of the consumer's gradient layout to
 * the layout the producer needs. A weight read by one op is stored as that op
 * reads it (P read as B); its gradient is boxed to the storage layout, which
 * is the data-parallel all-reduce when the weight is B where the op's output
 * is split. A leaf read by several ops (tied embeddings) is its own decision;
 * the gradient contributions are summed before the reduction, so each edge
 * carries an equal share of it.
 *
 * Ranges (pipeline stages): with opts.op_begin/op_end the problem covers a
 * contiguous range of forward ops; a tensor produced before the range is
 * treated like a leaf (it arrives in whichever layout its reader takes, or,
 * read by several ops, in the layout of its own variable), and layers cut by
 * the range's ends are left untied. Costs are split by kind (oplevel-impl.h:
 * tn, sy, mw, ma) so that a stage can weigh the weight-gradient reduction
 * once per iteration and keep several micro-batches' activations. */
#include "graph/graph-impl.h"
#include "search/oplevel-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void wf_search_oplevel_opts_default(wf_search_oplevel_opts *o)
{
    memset(o, 0, sizeof *o);
    o->algo = WF_SEARCH_OPLEVEL_AUTO;
    o->tie_layers = 1;
    o->max_frontier = 32;
    o->max_sweeps = 100;
    o->max_elim_work = (int64_t)5000000;
    o->optimizer_bytes_per_param = 0;
    o->seq_dim = -1;
    o->op_begin = o->op_end = 0;
    o->act_multiplier = 1;
    o->grad_sync_scale = 1;
}

static wf_status check_opts(const wf_search_oplevel_opts *o)
{
    if (o->algo != WF_SEARCH_OPLEVEL_AUTO && o->algo != WF_SEARCH_OPLEVEL_CD && o->algo != WF_SEARCH_OPLEVEL_FT)
        return wf_errorf(WF_INVAL, "oplevel: algo=%d is not auto, cd or ft", (int)o->algo);
    if (o->max_frontier < 2 || o->max_frontier > 4096)
        return wf_errorf(WF_INVAL, "oplevel: max_frontier=%d outside [2, 4096]", o->max_frontier);
    if (o->max_sweeps < 1)
        return wf_errorf(WF_INVAL, "oplevel: max_sweeps=%d (expected >= 1)", o->max_sweeps);
    if (o->max_elim_work < 1)
        return wf_errorf(WF_INVAL, "oplevel: max_elim_work=%lld (expected >= 1)",
                         (long long)o->max_elim_work);
    if (!(o->optimizer_bytes_per_param >= 0) || o->optimizer_bytes_per_param > 1024)
        return wf_errorf(WF_INVAL, "oplevel: optimizer_bytes_per_param=%g outside [0, 1024]",
                         o->optimizer_bytes_per_param);
    if (o->seq_dim < -1 || o->seq_dim >= WF_MAX_DIMS)
        return wf_errorf(WF_INVAL, "oplevel: seq_dim=%d outside [-1, %d)", o->seq_dim, WF_MAX_DIMS);
    if (o->op_begin < 0 || o->op_end < 0)
        return wf_errorf(WF_INVAL, "oplevel: op range [%d, %d) is negative", o->op_begin, o->op_end);
    if (!(o->act_multiplier >= 1) || o->act_multiplier > 1e6)
        return wf_errorf(WF_INVAL, "oplevel: act_multiplier=%g outside [1, 1e6]", o->act_multiplier);
    if (!(o->grad_sync_scale >= 0) || o->grad_sync_scale > 1)
        return wf_errorf(WF_INVAL, "oplevel: grad_sync_scale=%g outside [0, 1]", o->grad_sync_scale);
    return WF_OK;
}

/* *o := *opts, or the defaults when opts is NULL; then checked. */
static wf_status get_opts(const wf_search_oplevel_opts *opts, wf_search_oplevel_opts *o)
{
    if (opts)
        *o = *opts;
    else
        wf_search_oplevel_opts_default(o);
    return check_opts(o);
}

/* ---- problem building ----------------------------------------------------------- */

static void *aalloc(ol_problem *p, size_t n, size_t size)
{
    return wf_arena_alloc(&p->arena, n * size + 1);
}

static int is_leaf(const wf_graph *g, int t) { return g->tensors[t].producer < 0; }

/* The attributes that change an op's signatures or costs (seeds do not). */
static int same_attrs(const wf_op_attrs *a, const wf_op_attrs *b)
{
    if (a->trans_a != b->trans_a || a->trans_b != b->trans_b || a->causal != b->causal ||
        a->heads != b->heads || a->kv_heads != b->kv_heads || a->axis != b->axis ||
        a->groups != b->groups || a->eps != b->eps || a->p != b->p || a->scale != b->scale ||
        a->base != b->base || a->ndim != b->ndim || a->nsplit != b->nsplit)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != b->kernel[i] || a->stride[i] != b->stride[i] || a->pad[i] != b->pad[i])
            return 0;
    for (int i = 0; i < WF_MAX_DIMS; i++)
        if (a->shape[i] != b->shape[i] || a->perm[i] != b->perm[i])
            return 0;
    for (int i = 0; i < WF_MAX_OUTPUTS; i++)
        if (a->sizes[i] != b->sizes[i])
            return 0;
    return 1;
}

static int same_tensor(const wf_graph *g, int a, int b)
{
    const wf_tensor *x = &g->tensors[a], *y = &g->tensors[b];
    if (x->dtype != y->dtype || x->role != y->role || x->ndim != y->ndim)
        return 0;
    for (int k = 0; k < x->ndim; k++)
        if (x->shape[k] != y->shape[k])
            return 0;
    return 1;
}

/* Ops a (representative) and b cost the same and have the same signatures. */
static int equivalent(const wf_graph *g, const unsigned char *ng, const int *ncons, int a, int b)
{
    const wf_op *x = &g->ops[a], *y = &g->ops[b];
    if (x->kind != y->kind || x->nin != y->nin || x->nout != y->nout ||
        !same_attrs(&x->attr, &y->attr))
        return 0;
    for (int j = 0; j < x->nin; j++) {
        int s = x->in[j], t = y->in[j];
        if (!same_tensor(g, s, t) || ng[s] != ng[t] || is_leaf(g, s) != is_leaf(g, t))
            return 0;
        if (is_leaf(g, s) && ((ncons[s] == 1) != (ncons[t] == 1)))
            return 0;
    }
    for (int j = 0; j < x->nout; j++)
        if (!same_tensor(g, x->out[j], y->out[j]) || ng[x->out[j]] != ng[y->out[j]])
            return 0;
    return 1;
}

typedef struct {
    int block, layer, op;
} bl_key;

/* -1, 0 or 1 as a lies below, at or above b (a pair that is not equal but not
 * below, such as a NaN, counts as above); the qsort comparators chain it over
 * their fields. */
static int cmp_num(double a, double b) { return a == b ? 0 : a < b ? -1 : 1; }

static int cmp_bl(const void *pa, const void *pb)
{
    const bl_key *a = pa, *b = pb;
    int d;
    if ((d = cmp_num(a->block, b->block)) || (d = cmp_num(a->layer, b->layer)))
        return d;
    return cmp_num(a->op, b->op);
}

/* rep[i] = the op whose decision op i shares (i itself when untied): each
 * layer's ops tie to those of the first layer of its block with the same ops
 * (its kind). Only layers whose ops all lie in [lo, hi) take part (a range
 * may cut a layer). */
static wf_status tie_layers(const wf_graph *g, int nf, int lo, int hi, const unsigned char *ng,
                            const int *ncons, int *rep)
{
    for (int i = 0; i < nf; i++)
        rep[i] = i;
    int n = 0;
    bl_key *k = malloc(sizeof *k * (size_t)(nf + 1));
    if (!k)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    for (int i = 0; i < nf; i++)
        if (g->ops[i].block >= 0 && g->ops[i].layer >= 0)
            k[n++] = (bl_key){g->ops[i].block, g->ops[i].layer, i};
    qsort(k, (size_t)n, sizeof *k, cmp_bl);
    /* Keep the complete layers (ops sorted by index within a layer). */
    int kept = 0;
    for (int s = 0; s < n;) {
        int e = s;
        while (e < n && k[e].block == k[s].block && k[e].layer == k[s].layer)
            e++;
        if (k[s].op >= lo && k[e - 1].op < hi)
            for (int i = s; i < e; i++)
                k[kept++] = k[i];
        s = e;
    }
    n = kept;
    /* Per block: its layers (runs of equal layer ids); the first is the representative. */
    int *starts = malloc(sizeof(int) * (size_t)(n + 1));
    if (!starts) {
        free(k);
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    }
    for (int s = 0; s < n;) {
        int e = s;
        while (e < n && k[e].block == k[s].block)
            e++;
        int nl = 0;
        for (int i = s; i < e; i++)
            if (i == s || k[i].layer != k[i - 1].layer)
                starts[nl++] = i;
        starts[nl] = e;
        /* Layers tie by kind: each to the first layer of the block with
         * the same ops (a mixture of experts' dense layers to the first
         * dense one, its expert layers to the first expert one). */
        for (int l = 1; l < nl; l++) {
            const int len = starts[l + 1] - starts[l];
            for (int r = 0; r < l; r++) {
                const int f = starts[r];
                if (rep[k[f].op] != k[f].op || starts[r + 1] - f != len)
                    continue; /* not a kind's first layer, or another length */
                int ok = 1;
                for (int q = 0; ok && q < len; q++)
                    ok = equivalent(g, ng, ncons, k[f + q].op, k[starts[l] + q].op);
                if (!ok)
                    continue;
                for (int q = 0; q < len; q++)
                    rep[k[starts[l] + q].op] = k[f + q].op;
                break;
            }
        }
        s = e;
    }
    free(starts);
    free(k);
    return WF_OK;
}

typedef struct {
    const unsigned char *ng;
    const int *ncons;
    const int *claim;
    wf_sbp_cache *cache;
} build_ctx;

void ol_state_parts(const ol_problem *p, const wf_tensor *w, double *wb, double *gb, double *ob)
{
    *wb = (double)wf_dtype_bytes(w->dtype);
    *gb = p->c->grad_bytes > *wb ? p->c->grad_bytes : *wb; /* never below the weight's */
    *ob = p->opts.optimizer_bytes_per_param > 0
              ? p->opts.optimizer_bytes_per_param
              : (w->dtype == WF_DTYPE_FP16 || w->dtype == WF_DTYPE_BF16 ? 12.0 : 8.0);
}

/* Bytes per parameter element kept for training: weight + gradient + optimizer state. */
static double state_bytes(const ol_problem *p, const wf_tensor *w)
{
    double wb, gb, ob;
    ol_state_parts(p, w, &wb, &gb, &ob);
    return wb + gb + ob;
}

/* The gradient of a parameter as a tensor (its element size per the cluster). */
static wf_tensor grad_tensor(const ol_problem *p, const wf_tensor *w)
{
    wf_tensor t = *w;
    if (p->c->grad_bytes >= 4 && wf_dtype_bytes(w->dtype) < 4)
        t.dtype = WF_DTYPE_FP32;
    return t;
}

static double numel_local(const ol_problem *p, const wf_tensor *t, const wf_sbp *s)
{
    return (double)wf_tensor_numel(t) / (double)wf_sbp_split_factor(&p->mesh, s);
}

/* A tensor laid out [B, S, ...] (or integer [B, S]) whose dim k is the sequence. */
static int token_shaped(const wf_tensor *x, int k)
{
    return x->role != WF_ROLE_PARAM &&
           (x->ndim >= k + 2 || (wf_dtype_is_int(x->dtype) && x->ndim >= k + 1));
}

static int is_matmul(wf_op_kind k)
{
    return k == WF_OP_MATMUL || k == WF_OP_BATCH_MATMUL || k == WF_OP_LINEAR;
}

/* opts.seq_dim: ops other than matrix products never split the sequence. */
static int seq_allowed(const ol_problem *p, const wf_op *o, const wf_sbp_sig *s)
{
    int k = p->opts.seq_dim, naxes = p->mesh.naxes;
    if (k < 0 || is_matmul(o->kind))
        return 1;
    for (int j = 0; j < o->nin; j++)
        if (token_shaped(&p->g->tensors[o->in[j]], k))
            for (int a = 0; a < naxes; a++)
                if (s->in[j].ax[a] == k)
                    return 0;
    for (int j = 0; j < o->nout; j++)
        if (token_shaped(&p->g->tensors[o->out[j]], k))
            for (int a = 0; a < naxes; a++)
                if (s->out[j].ax[a] == k)
                    return 0;
    return 1;
}

/* opts.outer_dp: the op's layout on the outer axis of two is data-parallel. */
static int outer_dp_allowed(const ol_problem *p, const wf_op *o, const wf_sbp_sig *s)
{
    if (!p->opts.outer_dp || p->mesh.naxes != 2)
        return 1;
    for (int j = 0; j < o->nin; j++) {
        const wf_tensor *t = &p->g->tensors[o->in[j]];
        int8_t v = s->in[j].ax[0];
        if (t->role == WF_ROLE_PARAM ? v != WF_SBP_B : v != 0)
            return 0;
    }
    for (int j = 0; j < o->nout; j++) {
        int8_t v = s->out[j].ax[0];
        if (!(v == 0 || (p->g->tensors[o->out[j]].ndim == 0 && v == WF_SBP_P)))
            return 0;
    }
    return 1;
}

/* An op's compute time, forward plus backward, under signature s by the
 * device's measured-kernel model (src/cluster/kernel_model.c), as the cost
 * model's records charge it (cost/records.c): a memory-bound op at its
 * family's bandwidth per pass; a matrix product at its local
 * shape under the signature (a split weight or activation shrinks the
 * dimension it splits; a partial sum shrinks K), its data gradient
 * (M, K, N) and weight gradient (K, N, M), plus the framework's idle gap
 * per pass. Returns -1 where the op is a product of no such shape or the
 * device has no fit (the FLOPs table applies). */
static double shaped_time(const ol_problem *p, const wf_graph *g, int r, const wf_sbp_sig *s, wf_dtype dt,
                          const wf_op_cost *oc, double *fwd_s)
{
    const wf_device *dev = &p->c->dev;
    const wf_op *o = &g->ops[r];
    if (!wf_device_kernels(dev))
        return -1;
    const double gap = p->c->op_gap_s;
    if (!wf_op_is_matrix(o->kind)) {
        /* A memory-bound kernel per pass at its family's measured bandwidth
         * (the arithmetic hides behind the traffic unless longer), as
         * records.c's kernel_time. */
        double d = (double)s->split, vp = dev->vector_flops[dt] > 0 ? dev->vector_flops[dt]
                                                                    : dev->vector_flops[WF_DTYPE_FP32];
        wf_mb_kind mk = wf_op_mb_kind(o->kind);
        double t = 0;
        for (int bwd = 0; bwd < 2; bwd++) {
            double fl = (bwd ? oc->bwd_in_flops + oc->bwd_w_flops : oc->fwd_flops) / d;
            double by = (bwd ? oc->bwd_bytes : oc->fwd_bytes) / d;
            if (!(fl > 0) && !(by > 0))
                continue;
            double tm = wf_membound_time(dev, mk, bwd, by), tf = fl > 0 && vp > 0 ? fl / (vp * dev->vector_eff) : 0;
            double x = tm > tf ? tm : tf;
            t += (x > dev->op_overhead_s ? x : dev->op_overhead_s) + gap;
            if (!bwd)
                *fwd_s = t;
        }
        return t;
    }
    if (o->nin < 2)
        return -1;
    wf_gemm_kind kind = wf_gemm_kind_of(dt, 0);
    if (dev->gemm[kind].tile_m <= 0)
        return -1;
    int64_t ly[WF_MAX_DIMS], la[WF_MAX_DIMS], lw[WF_MAX_DIMS];
    const wf_tensor *y = &g->tensors[o->out[0]], *a = &g->tensors[o->in[0]], *w = &g->tensors[o->in[1]];
    if (wf_sbp_local_shape(&p->mesh, y, &s->out[0], ly) != WF_OK ||
        wf_sbp_local_shape(&p->mesh, a, &s->in[0], la) != WF_OK ||
        wf_sbp_local_shape(&p->mesh, w, &s->in[1], lw) != WF_OK)
        return -1;
    double ny = 1;
    for (int i = 0; i < y->ndim; i++)
        ny *= (double)ly[i];
    double M, N, K, nb = 1;
    if (o->kind == WF_OP_LINEAR && w->ndim == 2) {
        K = (double)lw[0];
        N = (double)lw[1];
        M = N > 0 ? ny / N : 0;
    } else if ((o->kind == WF_OP_MATMUL || o->kind == WF_OP_BATCH_MATMUL) && a->ndim >= 2 && y->ndim >= 2) {
        M = (double)(o->attr.trans_a ? la[a->ndim - 1] : la[a->ndim - 2]);
        K = (double)(o->attr.trans_a ? la[a->ndim - 2] : la[a->ndim - 1]);
        N = (double)ly[y->ndim - 1];
        nb = M > 0 && N > 0 ? ny / (M * N) : 0;
    } else if (o->kind == WF_OP_CONV2D && w->ndim == 4) {
        N = (double)lw[0];
        K = (double)(lw[1] * lw[2] * lw[3]);
        M = N > 0 ? ny / N : 0;
    } else {
        return -1;
    }
    if (!(M > 0 && N > 0 && K > 0 && nb > 0))
        return -1;
    double t = wf_gemm_time(dev, kind, nb, M, N, K) + gap;
    *fwd_s = t;
    double f1 = oc->fwd_flops > 0 ? oc->fwd_flops : 2.0 * nb * M * N * K;
    double nin = oc->bwd_in_flops / f1;
    if (nin > 0.25)
        t += wf_gemm_time(dev, kind, nb, M, K, N) + gap;
    if (nin > 1.25)
        t += wf_gemm_time(dev, kind, nb, K, N, M);
    if (oc->bwd_w_flops > 0)
        t += wf_gemm_time(dev, kind, nb, K, N, M) + gap;
    return t;
}

/* The time added to an edge the options forbid: larger than any plan, finite
 * so that sums and comparisons stay ordinary (an all-replicated plan never
 * pays it, so the search always has a plan without it). */
#define OL_FORBIDDEN_S 1e9

static wf_status alloc_costs(ol_problem *p, ol_var *v, int n)
{
    v->t = aalloc(p, (size_t)n, sizeof(double));
    v->tn = aalloc(p, (size_t)n, sizeof(double));
    v->sy = aalloc(p, (size_t)n, sizeof(double));
    v->tc = aalloc(p, (size_t)n, sizeof(double));
    v->m = aalloc(p, (size_t)n, sizeof(double));
    v->mw = aalloc(p, (size_t)n, sizeof(double));
    v->ma = aalloc(p, (size_t)n, sizeof(double));
    v->tf = aalloc(p, (size_t)n, sizeof(double));
    if (!v->t || !v->tn || !v->sy || !v->tc || !v->m || !v->mw || !v->ma || !v->tf)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    memset(v->tf, 0, sizeof(double) * (size_t)n);
    return WF_OK;
}

static wf_status op_unary(ol_problem *p, ol_var *v, const build_ctx *b)
{
    const wf_graph *g = p->g;
    int r = v->rep, naxes = p->mesh.naxes;
    const wf_op *o = &g->ops[r];
    int nall = wf_sbp_op_sigs(g, r, &p->mesh, NULL, 0);
    if (nall < 0)
        return (wf_status)nall;
    if (nall == 0)
        return wf_errorf(WF_INTERNAL, "oplevel: op '%s' has no signature", o->name);
    v->nall = nall;
    v->sigs = aalloc(p, (size_t)nall, sizeof *v->sigs);
    if (!v->sigs)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    wf_sbp_op_sigs(g, r, &p->mesh, v->sigs, nall);
    /* Drop the signatures the options forbid, remembering the original indices
     * (outer_dp only where the op has such a layout at all). */
    int n = nall, outer = 0;
    for (int c = 0; c < nall && !outer; c++)
        outer = p->opts.outer_dp && p->mesh.naxes == 2 && outer_dp_allowed(p, o, &v->sigs[c]);
    if (p->opts.seq_dim >= 0 || outer) {
        v->sidx = aalloc(p, (size_t)nall, sizeof(int));
        if (!v->sidx)
            return wf_errorf(WF_NOMEM, "oplevel: out of memory");
        n = 0;
        for (int c = 0; c < nall; c++)
            if (seq_allowed(p, o, &v->sigs[c]) && (!outer || outer_dp_allowed(p, o, &v->sigs[c]))) {
                v->sigs[n] = v->sigs[c];
                v->sidx[n++] = c;
            }
        if (n == 0)
            return wf_errorf(WF_INTERNAL, "oplevel: op '%s' has no signature under seq_dim=%d%s",
                             o->name, p->opts.seq_dim, outer ? " with a data-parallel outer axis" : "");
    }
    v->nch = n;
    wf_status st = alloc_costs(p, v, n);
    if (st)
        return st;

    wf_op_cost oc;
    wf_op_cost_flags(g, r, b->ng, &oc);
    wf_dtype dt = g->tensors[o->out[0]].dtype;
    for (int j = 0; j < o->nin; j++)
        if (wf_dtype_is_float(g->tensors[o->in[j]].dtype)) {
            dt = g->tensors[o->in[j]].dtype;
            break;
        }
    int matrix = wf_op_is_matrix(o->kind);
    double bwd_flops = oc.bwd_in_flops + oc.bwd_w_flops;
    wf_saved saved[WF_MAX_SAVED];
    int ns = wf_op_saved_flags(g, r, b->ng, saved);
    const wf_device *dev = &p->c->dev;
    int best_dp = -1, dp = 0;
    double mult = (double)v->mult;

    for (int c = 0; c < n; c++) {
        const wf_sbp_sig *s = &v->sigs[c];
        double d = (double)s->split;
        double tf = 0, tc = shaped_time(p, g, r, s, dt, &oc, &tf);
        if (tc < 0) {
            tc = tf = wf_compute_time(dev, matrix, dt, oc.fwd_flops / d, oc.fwd_bytes / d);
            if (bwd_flops > 0 || oc.bwd_bytes > 0)
                tc += wf_compute_time(dev, matrix, dt, bwd_flops / d, oc.bwd_bytes / d);
        }
        double tn = tc, sy = 0, mw = 0, ma = 0;
        for (int a = 0; a < naxes; a++)
            if (s->internal_bytes[a] > 0)
                tn += wf_mesh_coll_time(&p->mesh, a, WF_COLL_ALLREDUCE, s->internal_bytes[a]);
        /* Weights read by this op alone: stored as read, gradient reduced to that. */
        for (int j = 0; j < o->nin; j++) {
            int x = o->in[j];
            const wf_tensor *w = &g->tensors[x];
            if (!is_leaf(g, x) || b->ncons[x] != 1 || w->role != WF_ROLE_PARAM)
                continue;
            wf_sbp sto = wf_sbp_storage(&s->in[j], naxes);
            mw += numel_local(p, w, &sto) * state_bytes(p, w);
            if (b->ng[x]) {
                wf_sbp gl = wf_sbp_grad_of_input(s, o->nout, j, naxes);
                wf_tensor gt = grad_tensor(p, w);
                double bt = wf_sbp_boxing_time(b->cache, &gt, &gl, &sto);
                if (bt < 0)
                    return wf_errorf(WF_INTERNAL, "oplevel: op '%s': gradient of '%s' not boxable",
                                     o->name, w->name);
                sy += bt;
            }
        }
        /* Saved activations, each graph tensor counted at its first saver. */
        for (int k = 0; k < ns; k++) {
            int x = saved[k].tensor;
            if (x < 0) {
                ma += saved[k].bytes / d;
                continue;
            }
            if (g->tensors[x].role == WF_ROLE_PARAM || b->claim[x] != r)
                continue;
            const wf_sbp *lay = NULL;
            for (int j = 0; j < o->nin && !lay; j++)
                if (o->in[j] == x)
                    lay = &s->in[j];
            for (int j = 0; j < o->nout && !lay; j++)
                if (o->out[j] == x)
                    lay = &s->out[j];
            ma += lay ? saved[k].bytes / (double)wf_sbp_split_factor(&p->mesh, lay)
                      : saved[k].bytes / d;
        }
        v->tn[c] = tn * mult;
        v->sy[c] = sy * mult;
        v->t[c] = v->tn[c] + p->opts.grad_sync_scale * v->sy[c];
        v->tc[c] = tc * mult;
        v->tf[c] = tf * mult;
        v->mw[c] = mw * mult;
        v->ma[c] = ma * mult;
        v->m[c] = v->mw[c] + p->opts.act_multiplier * v->ma[c];

        /* Data-parallel score: axes on which every activation is S(0) (0-d
         * outputs anything) and every weight B. */
        int score = 0;
        for (int a = 0; a < naxes; a++) {
            if (p->mesh.size[a] == 1)
                continue;
            int ok = 1;
            for (int j = 0; j < o->nin && ok; j++) {
                const wf_tensor *x = &g->tensors[o->in[j]];
                if (x->role == WF_ROLE_PARAM)
                    ok = s->in[j].ax[a] == WF_SBP_B;
                else if (x->ndim > 0)
                    ok = s->in[j].ax[a] == 0;
            }
            for (int j = 0; j < o->nout && ok; j++)
                if (g->tensors[o->out[j]].ndim > 0)
                    ok = s->out[j].ax[a] == 0;
            score += ok;
        }
        if (score > best_dp) {
            best_dp = score;
            dp = c;
        }
    }
    v->dp = dp;
    return WF_OK;
}

static wf_status leaf_unary(ol_problem *p, ol_var *v)
{
    const wf_tensor *x = &p->g->tensors[v->rep];
    int naxes = p->mesh.naxes;
    int nvals = x->ndim + 1; /* S(0..ndim-1), B */
    int total = 1;
    for (int a = 0; a < naxes; a++)
        total *= p->mesh.size[a] > 1 ? nvals : 1;
    v->lay = aalloc(p, (size_t)total, sizeof *v->lay);
    if (!v->lay)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    wf_status st = alloc_costs(p, v, total);
    if (st)
        return st;
    int n = 0, best = -1, dp = 0;
    for (int e = 0; e < total; e++) {
        wf_sbp s = wf_sbp_broadcast();
        int rest = e;
        for (int a = naxes - 1; a >= 0; a--) {
            if (p->mesh.size[a] == 1)
                continue;
            int i = rest % nvals;
            rest /= nvals;
            s.ax[a] = i == x->ndim ? WF_SBP_B : (int8_t)i;
        }
        if (!wf_sbp_valid(&p->mesh, x->ndim, x->shape, &s))
            continue;
        v->lay[n] = s;
        v->t[n] = v->tn[n] = v->sy[n] = v->tc[n] = v->ma[n] = 0;
        v->mw[n] = x->role == WF_ROLE_PARAM ? numel_local(p, x, &s) * state_bytes(p, x) : 0;
        v->m[n] = v->mw[n];
        int score = 0;
        for (int a = 0; a < naxes; a++)
            if (p->mesh.size[a] > 1)
                score += x->role == WF_ROLE_PARAM ? s.ax[a] == WF_SBP_B : s.ax[a] == 0;
        if (score > best) {
            best = score;
            dp = n;
        }
        n++;
    }
    v->nch = n;
    v->nall = n;
    v->dp = dp;
    return WF_OK;
}

/* ---- edges ------------------------------------------------------------------------- */

typedef struct {
    int vu, ku, vv, kv; /* producer var and output (-1: leaf var), consumer var and input */
    int op, x;          /* first consumer op and the tensor */
} raw_edge;

static int cmp_raw(const void *pa, const void *pb)
{
    const raw_edge *a = pa, *b = pb;
    int d;
    if ((d = cmp_num(a->vu, b->vu)) || (d = cmp_num(a->ku, b->ku)) ||
        (d = cmp_num(a->vv, b->vv)) || (d = cmp_num(a->kv, b->kv)))
        return d;
    return cmp_num(a->op, b->op);
}

typedef struct {
    int u, v;
    double *t, *tn, *sy; /* tn, sy: NULL when the edge carries no weight-gradient reduction */
    int seq;             /* creation order: parallel edges are summed in a fixed order */
} pair_t;

static int cmp_pair(const void *pa, const void *pb)
{
    const pair_t *a = pa, *b = pb;
    int d;
    if ((d = cmp_num(a->u, b->u)) || (d = cmp_num(a->v, b->v)))
        return d;
    return cmp_num(a->seq, b->seq);
}

static int find_layout(wf_sbp *list, int *n, const wf_sbp *s, int naxes)
{
    for (int i = 0; i < *n; i++)
        if (wf_sbp_equal(&list[i], s, naxes))
            return i;
    list[*n] = *s;
    return (*n)++;
}

/* Tables [nch_u x nch_v] of one reduced edge, times `count`: the objective
 * out_t, and when out_sy is given (a weight's edge) its parts without and
 * with the weight-gradient reduction. */
static wf_status edge_table(ol_problem *p, const raw_edge *e, int count, const build_ctx *b,
                            double *out_t, double *out_tn, double *out_sy)
{
    const wf_graph *g = p->g;
    int naxes = p->mesh.naxes;
    const ol_var *U = &p->var[e->vu], *V = &p->var[e->vv];
    const wf_tensor *x = &g->tensors[e->x];
    int grad = b->ng[e->x];
    double share = 1.0;
    wf_tensor gt = *x;
    int sync = 0; /* the backward part reduces a weight's gradient */
    if (U->kind == OL_VAR_LEAF) {
        share = 1.0 / (double)b->ncons[e->x];
        if (x->role == WF_ROLE_PARAM) {
            gt = grad_tensor(p, x);
            sync = 1;
        }
    }
    int nu = U->nch, nv = V->nch, nout_v = g->ops[V->rep].nout;
    /* opts.seq_dim: a non-matmul reader takes a token-shaped activation split
     * only as its producer split it (no slicing B -> S, no reduce-scatter
     * P -> S): partial sums are all-reduced, the replicated stays replicated. */
    int follow = p->opts.seq_dim >= 0 && !is_matmul(g->ops[V->rep].kind) &&
                 token_shaped(x, p->opts.seq_dim);
    wf_sbp *pl = malloc(sizeof(wf_sbp) * (size_t)nu);
    wf_sbp *cl = malloc(sizeof(wf_sbp) * (size_t)nv * 2);
    int *pi = malloc(sizeof(int) * (size_t)nu), *ci = malloc(sizeof(int) * (size_t)nv);
    double *fw = NULL;
    wf_status st = WF_OK;
    if (!pl || !cl || !pi || !ci) {
        st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
        goto done;
    }
    int npl = 0, ncl = 0;
    for (int c = 0; c < nu; c++) {
        const wf_sbp *s = U->kind == OL_VAR_OP ? &U->sigs[c].out[e->ku] : &U->lay[c];
        pi[c] = find_layout(pl, &npl, s, naxes);
    }
    /* Consumer side: distinct (input layout, gradient layout) pairs, stored interleaved. */
    for (int c = 0; c < nv; c++) {
        wf_sbp in = V->sigs[c].in[e->kv];
        wf_sbp gl = wf_sbp_grad_of_input(&V->sigs[c], nout_v, e->kv, naxes);
        int found = -1;
        for (int i = 0; i < ncl && found < 0; i++)
            if (wf_sbp_equal(&cl[2 * i], &in, naxes) && wf_sbp_equal(&cl[2 * i + 1], &gl, naxes))
                found = i;
        if (found < 0) {
            found = ncl++;
            cl[2 * found] = in;
            cl[2 * found + 1] = gl;
        }
        ci[c] = found;
    }
    /* fw[2 k]: the part without reduction, fw[2 k + 1]: the reduction. */
    fw = malloc(sizeof(double) * (size_t)npl * (size_t)ncl * 2);
    if (!fw) {
        st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
        goto done;
    }
    for (int i = 0; i < npl; i++) {
        wf_sbp need = wf_sbp_grad_need(&pl[i], naxes);
        for (int j = 0; j < ncl; j++) {
            double f = wf_sbp_boxing_time(b->cache, x, &pl[i], &cl[2 * j]);
            double bw = grad ? wf_sbp_boxing_time(b->cache, &gt, &cl[2 * j + 1], &need) : 0.0;
            if (f < 0 || bw < 0) {
                st = wf_errorf(WF_INTERNAL, "oplevel: tensor '%s' not boxable", x->name);
                goto done;
            }
            size_t k = (size_t)i * (size_t)ncl + (size_t)j;
            if (follow)
                for (int a = 0; a < naxes; a++)
                    if (cl[2 * j].ax[a] >= 0 && cl[2 * j].ax[a] != pl[i].ax[a])
                        f += OL_FORBIDDEN_S;
            fw[2 * k] = (sync ? f : f + share * bw) * (double)count;
            fw[2 * k + 1] = sync ? share * bw * (double)count : 0.0;
        }
    }
    for (int cu = 0; cu < nu; cu++)
        for (int cv = 0; cv < nv; cv++) {
            size_t k = (size_t)pi[cu] * (size_t)ncl + (size_t)ci[cv];
            size_t o = (size_t)cu * (size_t)nv + (size_t)cv;
            out_t[o] = fw[2 * k] + p->opts.grad_sync_scale * fw[2 * k + 1];
            if (out_sy) {
                out_tn[o] = fw[2 * k];
                out_sy[o] = fw[2 * k + 1];
            }
        }
done:
    free(pl);
    free(cl);
    free(pi);
    free(ci);
    free(fw);
    return st;
}

/* The transpose of an [nu x nv] table into the arena (NULL for NULL). */
static double *transpose(ol_problem *p, const double *t, int nu, int nv)
{
    if (!t)
        return NULL;
    double *tt = aalloc(p, (size_t)nu * (size_t)nv, sizeof(double));
    if (!tt)
        return NULL;
    for (int cu = 0; cu < nu; cu++)
        for (int cv = 0; cv < nv; cv++)
            tt[(size_t)cv * (size_t)nu + (size_t)cu] = t[(size_t)cu * (size_t)nv + (size_t)cv];
    return tt;
}

static wf_status build_edges(ol_problem *p, const build_ctx *b)
{
    const wf_graph *g = p->g;
    int nraw = 0, cap = 16;
    for (int i = p->lo; i < p->hi; i++)
        cap += g->ops[i].nin;
    raw_edge *raw = malloc(sizeof *raw * (size_t)cap);
    pair_t *pairs = NULL;
    wf_status st = WF_OK;
    if (!raw)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    for (int i = p->lo; i < p->hi; i++) {
        const wf_op *o = &g->ops[i];
        for (int j = 0; j < o->nin; j++) {
            int x = o->in[j], prod = g->tensors[x].producer;
            raw_edge e = {-1, -1, p->var_of_op[i], j, i, x};
            if (prod >= p->lo && prod < p->hi) {
                e.vu = p->var_of_op[prod];
                for (int k = 0; k < g->ops[prod].nout; k++)
                    if (g->ops[prod].out[k] == x)
                        e.ku = k;
            } else if (p->var_of_leaf[x] >= 0) {
                e.vu = p->var_of_leaf[x];
            } else {
                continue; /* attached to its only consumer, or arriving from before the range */
            }
            raw[nraw++] = e;
        }
    }
    qsort(raw, (size_t)nraw, sizeof *raw, cmp_raw);
    int npairs = 0;
    pairs = malloc(sizeof *pairs * (size_t)(nraw + 1));
    if (!pairs) {
        st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
        goto done;
    }
    for (int s = 0; s < nraw;) {
        int e = s;
        while (e < nraw && raw[e].vu == raw[s].vu && raw[e].ku == raw[s].ku &&
               raw[e].vv == raw[s].vv && raw[e].kv == raw[s].kv)
            e++;
        ol_var *U = &p->var[raw[s].vu], *V = &p->var[raw[s].vv];
        size_t n = (size_t)U->nch * (size_t)V->nch;
        int sync = U->kind == OL_VAR_LEAF && g->tensors[raw[s].x].role == WF_ROLE_PARAM;
        double *t = aalloc(p, n, sizeof(double));
        double *tn = sync ? aalloc(p, n, sizeof(double)) : NULL;
        double *sy = sync ? aalloc(p, n, sizeof(double)) : NULL;
        if (!t || (sync && (!tn || !sy))) {
            st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
            goto done;
        }
        if ((st = edge_table(p, &raw[s], e - s, b, t, tn, sy)))
            goto done;
        if (raw[s].vu == raw[s].vv) {
            /* Same decision on both ends (layer l feeding layer l+1 at the same position). */
            for (int c = 0; c < U->nch; c++) {
                size_t d = (size_t)c * (size_t)U->nch + (size_t)c;
                U->t[c] += t[d];
                U->tn[c] += tn ? tn[d] : t[d];
                U->sy[c] += sy ? sy[d] : 0.0;
            }
        } else if (raw[s].vu < raw[s].vv) {
            pairs[npairs] = (pair_t){raw[s].vu, raw[s].vv, t, tn, sy, npairs};
            npairs++;
        } else {
            /* Store as [u][v] with u < v. */
            double *tt = transpose(p, t, U->nch, V->nch);
            double *ttn = transpose(p, tn, U->nch, V->nch);
            double *tsy = transpose(p, sy, U->nch, V->nch);
            if (!tt || (sync && (!ttn || !tsy))) {
                st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
                goto done;
            }
            pairs[npairs] = (pair_t){raw[s].vv, raw[s].vu, tt, ttn, tsy, npairs};
            npairs++;
        }
        s = e;
    }
    /* Merge parallel edges: one table per variable pair. */
    qsort(pairs, (size_t)npairs, sizeof *pairs, cmp_pair);
    p->edge = aalloc(p, (size_t)npairs, sizeof *p->edge);
    if (!p->edge) {
        st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
        goto done;
    }
    p->nedge = 0;
    for (int s = 0; s < npairs;) {
        int e = s + 1, any_sy = pairs[s].sy != NULL;
        size_t n = (size_t)p->var[pairs[s].u].nch * (size_t)p->var[pairs[s].v].nch;
        while (e < npairs && pairs[e].u == pairs[s].u && pairs[e].v == pairs[s].v)
            any_sy |= pairs[e++].sy != NULL;
        pair_t *P = &pairs[s];
        if (any_sy && !P->sy) {
            P->tn = aalloc(p, n, sizeof(double));
            P->sy = aalloc(p, n, sizeof(double));
            if (!P->tn || !P->sy) {
                st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
                goto done;
            }
            memcpy(P->tn, P->t, n * sizeof(double));
            memset(P->sy, 0, n * sizeof(double));
        }
        for (int q = s + 1; q < e; q++)
            for (size_t i = 0; i < n; i++) {
                P->t[i] += pairs[q].t[i];
                if (any_sy) {
                    P->tn[i] += pairs[q].tn ? pairs[q].tn[i] : pairs[q].t[i];
                    P->sy[i] += pairs[q].sy ? pairs[q].sy[i] : 0.0;
                }
            }
        p->edge[p->nedge++] = (ol_edge){P->u, P->v, P->t, P->tn, P->sy};
        s = e;
    }
    /* CSR adjacency. */
    p->adj_start = aalloc(p, (size_t)p->nvar + 1, sizeof(int));
    p->adj = aalloc(p, (size_t)p->nedge * 2 + 1, sizeof(int));
    if (!p->adj_start || !p->adj) {
        st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
        goto done;
    }
    for (int i = 0; i < p->nedge; i++) {
        p->adj_start[p->edge[i].u + 1]++;
        p->adj_start[p->edge[i].v + 1]++;
    }
    for (int v = 0; v < p->nvar; v++)
        p->adj_start[v + 1] += p->adj_start[v];
    int *fill = calloc((size_t)p->nvar + 1, sizeof(int));
    if (!fill) {
        st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
        goto done;
    }
    for (int i = 0; i < p->nedge; i++) {
        int u = p->edge[i].u, v = p->edge[i].v;
        p->adj[p->adj_start[u] + fill[u]++] = i;
        p->adj[p->adj_start[v] + fill[v]++] = i;
    }
    free(fill);
done:
    free(raw);
    free(pairs);
    return st;
}

wf_status ol_problem_build(const wf_graph *g, const wf_cluster *c, const wf_mesh *m,
                           const wf_search_oplevel_opts *o, int tie, ol_problem *p)
{
    memset(p, 0, sizeof *p);
    wf_arena_init(&p->arena, (size_t)1 << 20);
    p->g = g;
    p->c = c;
    p->mesh = *m;
    p->opts = *o;
    p->nf = g->nfwd;
    if (g->status != WF_OK)
        return wf_errorf(WF_INVAL, "oplevel: graph '%s' failed to build (%s)", g->name,
                         wf_strerror(g->status));
    if (p->nf <= 0)
        return wf_errorf(WF_INVAL, "oplevel: graph '%s' has no forward ops", g->name);
    p->lo = o->op_begin;
    p->hi = o->op_begin == 0 && o->op_end == 0 ? p->nf : o->op_end;
    if (p->lo < 0 || p->lo >= p->hi || p->hi > p->nf)
        return wf_errorf(WF_INVAL, "oplevel: op range [%d, %d) is not inside the %d forward ops of "
                                   "graph '%s'", o->op_begin, o->op_end, p->nf, g->name);
    if (m->naxes < 1 || m->naxes > WF_SBP_MAX_AXES)
        return wf_errorf(WF_INVAL, "oplevel: mesh with %d axes", m->naxes);
    for (int a = 0; a < m->naxes; a++)
        if (m->size[a] < 1 || (m->size[a] > 1 && !(m->bw_bps[a] > 0)))
            return wf_errorf(WF_INVAL, "oplevel: mesh axis %d has size %lld, bandwidth %g", a,
                             (long long)m->size[a], m->bw_bps[a]);
    int nt = g->ntensors, nf = p->nf, lo = p->lo, hi = p->hi;
    for (int i = 0; i < nf; i++) {
        const wf_op *op = &g->ops[i];
        if (op->pass != WF_PASS_FORWARD || op->kind >= WF_OP_COUNT)
            return wf_errorf(WF_INVAL, "oplevel: op %d '%s' is not a forward op", i, op->name);
        for (int j = 0; j < op->nin; j++) {
            int x = op->in[j];
            if (x < 0 || x >= nt || g->tensors[x].producer >= i)
                return wf_errorf(WF_INVAL, "oplevel: op '%s' input %d is not produced before it",
                                 op->name, j);
        }
    }
    unsigned char *ng = aalloc(p, (size_t)nt, 1);
    int *ncons = aalloc(p, (size_t)nt, sizeof(int));
    int *claim = aalloc(p, (size_t)nt, sizeof(int));
    int *rep = aalloc(p, (size_t)nf, sizeof(int));
    p->var_of_op = aalloc(p, (size_t)nf, sizeof(int));
    p->var_of_leaf = aalloc(p, (size_t)nt, sizeof(int));
    p->var = aalloc(p, (size_t)(nf + nt), sizeof(ol_var));
    if (!ng || !ncons || !claim || !rep || !p->var_of_op || !p->var_of_leaf || !p->var)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    /* Gradients over the whole graph: a stage's input needs one when the ops before it do. */
    wf_graph_grad_flags(g, nf, ng);
    for (int t = 0; t < nt; t++) {
        claim[t] = -1;
        p->var_of_leaf[t] = -1;
    }
    for (int i = 0; i < nf; i++)
        p->var_of_op[i] = -1;
    for (int i = lo; i < hi; i++) {
        const wf_op *op = &g->ops[i];
        for (int j = 0; j < op->nin; j++)
            ncons[op->in[j]]++;
        wf_saved saved[WF_MAX_SAVED];
        int ns = wf_op_saved_flags(g, i, ng, saved);
        for (int k = 0; k < ns; k++)
            if (saved[k].tensor >= 0 && claim[saved[k].tensor] < 0)
                claim[saved[k].tensor] = i;
    }
    wf_status st;
    if (tie) {
        if ((st = tie_layers(g, nf, lo, hi, ng, ncons, rep)))
            return st;
    } else {
        for (int i = 0; i < nf; i++)
            rep[i] = i;
    }
    /* Variables in topological order: a shared leaf (or a tensor arriving from
     * before the range) just before its first reader. */
    for (int i = lo; i < hi; i++) {
        const wf_op *op = &g->ops[i];
        for (int j = 0; j < op->nin; j++) {
            int x = op->in[j];
            if (g->tensors[x].producer < lo && ncons[x] >= 2 && p->var_of_leaf[x] < 0) {
                ol_var *v = &p->var[p->nvar];
                v->kind = OL_VAR_LEAF;
                v->rep = x;
                v->mult = 1;
                p->var_of_leaf[x] = p->nvar++;
            }
        }
        int r = rep[i];
        if (p->var_of_op[r] < 0) {
            ol_var *v = &p->var[p->nvar];
            v->kind = OL_VAR_OP;
            v->rep = r; /* equivalent to every member, so costing it costs them all */
            p->var_of_op[r] = p->nvar++;
        }
        p->var_of_op[i] = p->var_of_op[r];
        p->var[p->var_of_op[i]].mult++;
    }
    build_ctx b = {ng, ncons, claim, NULL};
    if ((st = wf_sbp_cache_create(m, &b.cache)))
        return st;
    for (int v = 0; v < p->nvar && st == WF_OK; v++)
        st = p->var[v].kind == OL_VAR_OP ? op_unary(p, &p->var[v], &b) : leaf_unary(p, &p->var[v]);
    if (st == WF_OK)
        st = build_edges(p, &b);
    wf_sbp_cache_free(b.cache);
    return st;
}

void ol_problem_free(ol_problem *p) { wf_arena_free(&p->arena); }

void ol_eval(const ol_problem *p, const int *assign, double *time_s, double *compute_s,
             double *memory_bytes)
{
    double t = 0, tc = 0, m = 0;
    for (int v = 0; v < p->nvar; v++) {
        t += p->var[v].t[assign[v]];
        tc += p->var[v].tc[assign[v]];
        m += p->var[v].m[assign[v]];
    }
    for (int e = 0; e < p->nedge; e++) {
        const ol_edge *E = &p->edge[e];
        t += E->t[(size_t)assign[E->u] * (size_t)p->var[E->v].nch + (size_t)assign[E->v]];
    }
    if (time_s)
        *time_s = t;
    if (compute_s)
        *compute_s = tc;
    if (memory_bytes)
        *memory_bytes = m;
}

void ol_eval_parts(const ol_problem *p, const int *assign, ol_parts *out)
{
    memset(out, 0, sizeof *out);
    for (int v = 0; v < p->nvar; v++) {
        const ol_var *V = &p->var[v];
        int c = assign[v];
        out->t += V->t[c];
        out->tn += V->tn[c];
        out->sy += V->sy[c];
        out->tc += V->tc[c];
        out->m += V->m[c];
        out->mw += V->mw[c];
        out->ma += V->ma[c];
    }
    for (int e = 0; e < p->nedge; e++) {
        const ol_edge *E = &p->edge[e];
        size_t k = (size_t)assign[E->u] * (size_t)p->var[E->v].nch + (size_t)assign[E->v];
        out->t += E->t[k];
        out->tn += E->tn ? E->tn[k] : E->t[k];
        out->sy += E->sy ? E->sy[k] : 0.0;
    }
}

/* The op a variable's costs are charged to per instance: every member op of
 * an op variable (divided by the instances), a leaf's first reader. */
static void add_share(const ol_problem *p, int v, double x, double *arr, const int *first_reader)
{
    if (!arr)
        return;
    const ol_var *V = &p->var[v];
    if (V->kind == OL_VAR_LEAF) {
        arr[first_reader[v]] += x;
        return;
    }
    double per = x / (double)V->mult;
    for (int i = p->lo; i < p->hi; i++)
        if (p->var_of_op[i] == v)
            arr[i] += per;
}

void ol_op_shares(const ol_problem *p, const int *assign, double *tn, double *sy, double *tc,
                  double *mw, double *ma)
{
    enum { K = 5 };
    double *arrs[K] = {tn, sy, mw, ma, tc};
    for (int k = 0; k < K; k++)
        if (arrs[k])
            memset(arrs[k], 0, sizeof(double) * (size_t)p->nf);
    /* Per-variable totals first, then one pass to spread them over the ops. */
    double *acc = calloc((size_t)p->nvar * K + 1, sizeof(double));
    int *first = malloc(sizeof(int) * ((size_t)p->nvar + 1));
    if (!acc || !first) {
        free(acc);
        free(first);
        return; /* costs stay 0: a proxy, and only on out-of-memory */
    }
    for (int v = 0; v < p->nvar; v++)
        first[v] = -1;
    for (int i = p->lo; i < p->hi; i++)
        for (int j = 0; j < p->g->ops[i].nin; j++) {
            int lv = p->var_of_leaf[p->g->ops[i].in[j]];
            if (lv >= 0 && first[lv] < 0)
                first[lv] = i;
        }
    for (int v = 0; v < p->nvar; v++) {
        const ol_var *V = &p->var[v];
        int c = assign[v];
        acc[K * v] += V->tn[c];
        acc[K * v + 1] += V->sy[c];
        acc[K * v + 2] += V->mw[c];
        acc[K * v + 3] += V->ma[c];
        acc[K * v + 4] += V->tc[c];
    }
    for (int e = 0; e < p->nedge; e++) {
        const ol_edge *E = &p->edge[e];
        size_t k = (size_t)assign[E->u] * (size_t)p->var[E->v].nch + (size_t)assign[E->v];
        double etn = E->tn ? E->tn[k] : E->t[k], esy = E->sy ? E->sy[k] : 0.0;
        acc[K * E->u] += 0.5 * etn;
        acc[K * E->v] += 0.5 * etn;
        acc[K * E->u + 1] += 0.5 * esy;
        acc[K * E->v + 1] += 0.5 * esy;
    }
    for (int v = 0; v < p->nvar; v++)
        for (int k = 0; k < K; k++)
            add_share(p, v, acc[K * v + k], arrs[k], first);
    free(acc);
    free(first);
}

wf_status ol_plans_push(const ol_problem *p, ol_plan **plans, int *nplans, int *cap,
                        const int *assign, wf_arena *a)
{
    if (wf_grow(plans, cap, (int64_t)*nplans + 1, sizeof **plans, 64) != 0)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    ol_plan *q = &(*plans)[*nplans];
    q->seq = (*nplans)++;
    q->assign = wf_arena_alloc(a, sizeof(int) * (size_t)p->nvar + 1);
    if (!q->assign)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    memcpy(q->assign, assign, sizeof(int) * (size_t)p->nvar);
    ol_eval(p, assign, &q->t, NULL, &q->m);
    return WF_OK;
}

/* ---- results ------------------------------------------------------------------------- */

void ol_fill_plan(const ol_problem *p, const int *assign, int *choice, wf_sbp_sig *sig,
                  wf_sbp *layout)
{
    const wf_graph *g = p->g;
    int naxes = p->mesh.naxes;
    for (int t = 0; t < g->ntensors; t++)
        layout[t] = wf_sbp_broadcast();
    for (int i = 0; i < p->nf; i++)
        if (i < p->lo || i >= p->hi) {
            choice[i] = -1;
            if (sig)
                wf_sbp_sig_replicated(g, i, &sig[i]);
        }
    /* Leaves read by one op: stored as read (first writer wins; later ones are shared leaves). */
    for (int i = p->hi - 1; i >= p->lo; i--) {
        const ol_var *v = &p->var[p->var_of_op[i]];
        int c = assign[p->var_of_op[i]];
        const wf_sbp_sig *s = &v->sigs[c];
        choice[i] = v->sidx ? v->sidx[c] : c;
        if (sig)
            sig[i] = *s;
        const wf_op *o = &g->ops[i];
        for (int k = 0; k < o->nout; k++)
            layout[o->out[k]] = s->out[k];
        for (int j = 0; j < o->nin; j++)
            if (is_leaf(g, o->in[j]) && p->var_of_leaf[o->in[j]] < 0)
                layout[o->in[j]] = wf_sbp_storage(&s->in[j], naxes);
    }
    for (int t = 0; t < g->ntensors; t++)
        if (p->var_of_leaf[t] >= 0)
            layout[t] = p->var[p->var_of_leaf[t]].lay[assign[p->var_of_leaf[t]]];
}

wf_status ol_assign_from_plan(const ol_problem *p, const int *choice, const wf_sbp *layout,
                              const unsigned char *given, int *assign, int *untied_needed)
{
    const wf_graph *g = p->g;
    int naxes = p->mesh.naxes;
    for (int v = 0; v < p->nvar; v++)
        assign[v] = -1;
    for (int i = p->lo; i < p->hi; i++) {
        int vi = p->var_of_op[i];
        const ol_var *v = &p->var[vi];
        if (choice[i] < 0 || choice[i] >= v->nall)
            return wf_errorf(WF_INVAL, "oplevel: op '%s': choice %d outside %d signatures",
                             g->ops[i].name, choice[i], v->nall);
        int c = choice[i];
        if (v->sidx) {
            c = -1;
            for (int k = 0; k < v->nch && c < 0; k++)
                if (v->sidx[k] == choice[i])
                    c = k;
            if (c < 0)
                return wf_errorf(WF_INVAL, "oplevel: op '%s': signature %d is one the options forbid "
                                           "(seq_dim=%d, outer_dp=%d)",
                                 g->ops[i].name, choice[i], p->opts.seq_dim, p->opts.outer_dp);
        }
        if (assign[vi] >= 0 && assign[vi] != c) {
            if (untied_needed)
                *untied_needed = 1;
            return wf_errorf(WF_INVAL, "oplevel: op '%s' shares a decision with '%s' but takes "
                                       "another signature", g->ops[i].name, g->ops[v->rep].name);
        }
        assign[vi] = c;
    }
    /* A shared leaf is stored as given, else as its first reader reads it. */
    for (int i = p->hi - 1; i >= p->lo; i--) {
        const wf_op *op = &g->ops[i];
        const wf_sbp_sig *s = &p->var[p->var_of_op[i]].sigs[assign[p->var_of_op[i]]];
        for (int j = 0; j < op->nin; j++) {
            int lv = p->var_of_leaf[op->in[j]];
            if (lv < 0)
                continue;
            int x = op->in[j];
            wf_sbp want = layout && (!given || given[x]) ? layout[x]
                                                         : wf_sbp_storage(&s->in[j], naxes);
            int found = -1;
            for (int k = 0; k < p->var[lv].nch && found < 0; k++)
                if (wf_sbp_equal(&p->var[lv].lay[k], &want, naxes))
                    found = k;
            if (found < 0) {
                char buf[64];
                return wf_errorf(WF_INVAL, "oplevel: layout %s of '%s' is not a storage layout",
                                 wf_sbp_str(&want, naxes, buf, sizeof buf),
                                 g->tensors[op->in[j]].name);
            }
            assign[lv] = found;
        }
    }
    return WF_OK;
}

static int cmp_plan(const void *pa, const void *pb)
{
    const ol_plan *a = pa, *b = pb;
    int d;
    if ((d = cmp_num(a->t, b->t)) || (d = cmp_num(a->m, b->m)))
        return d;
    return cmp_num(a->seq, b->seq);
}

int ol_plans_prune(ol_plan *plans, int n)
{
    qsort(plans, (size_t)n, sizeof *plans, cmp_plan);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k > 0 && plans[i].m >= plans[k - 1].m)
            continue;
        if (k > 0 && plans[i].t <= plans[k - 1].t + 1e-12 * plans[k - 1].t)
            k--;
        plans[k++] = plans[i];
    }
    return k;
}

void wf_search_oplevel_result_free(wf_search_oplevel_result *r)
{
    wf_arena_free(&r->arena);
    memset(r, 0, sizeof *r);
}

static wf_status set_point(wf_search_oplevel_result *r, const ol_problem *p, const ol_plan *q,
                           wf_search_oplevel_point *pt)
{
    pt->choice = wf_arena_alloc(&r->arena, sizeof(int) * (size_t)r->nops + 1);
    pt->layout = wf_arena_alloc(&r->arena, sizeof(wf_sbp) * (size_t)r->ntensors + 1);
    if (!pt->choice || !pt->layout)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    ol_fill_plan(p, q->assign, pt->choice, NULL, pt->layout);
    ol_eval(p, q->assign, &pt->time_s, &pt->compute_s, &pt->memory_bytes);
    return WF_OK;
}

static void adopt_point(wf_search_oplevel_result *r, const wf_search_oplevel_point *pt)
{
    memcpy(r->choice, pt->choice, sizeof(int) * (size_t)r->nops);
    memcpy(r->layout, pt->layout, sizeof(wf_sbp) * (size_t)r->ntensors);
    r->time_s = pt->time_s;
    r->compute_s = pt->compute_s;
    r->comm_s = pt->time_s - pt->compute_s;
    r->memory_bytes = pt->memory_bytes;
    r->fits = pt->memory_bytes <= r->memory_limit_bytes;
}

wf_status ol_search_run(const ol_problem *p, double mem_limit, ol_plan **plans, int *nplans,
                        int *cap, int *nfront, int *sweeps, int *conditioned, wf_arena *scratch)
{
    wf_status st = WF_OK;
    int *best = malloc(sizeof(int) * (size_t)p->nvar + 1);
    if (!best)
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    wf_search_oplevel_algo algo = p->opts.algo;
    if (algo == WF_SEARCH_OPLEVEL_CD || algo == WF_SEARCH_OPLEVEL_AUTO) {
        if ((st = ol_cd_search(p, mem_limit, best, plans, nplans, cap, sweeps, scratch)))
            goto done;
    } else {
        for (int v = 0; v < p->nvar; v++)
            best[v] = p->var[v].dp;
    }
    if (algo == WF_SEARCH_OPLEVEL_FT || algo == WF_SEARCH_OPLEVEL_AUTO) {
        int before = *nplans;
        if ((st = ol_ft_search(p, best, plans, nplans, cap, conditioned, scratch)))
            goto done;
        if (algo == WF_SEARCH_OPLEVEL_AUTO) {
            /* Polish the frontier's fastest fitting point by descent (it keeps fitting). */
            int pick = -1;
            for (int i = before; i < *nplans; i++)
                if ((*plans)[i].m <= mem_limit && (pick < 0 || (*plans)[i].t < (*plans)[pick].t))
                    pick = i;
            if (pick >= 0) {
                memcpy(best, (*plans)[pick].assign, sizeof(int) * (size_t)p->nvar);
                *sweeps += ol_cd_run(p, best, 0.0, mem_limit, p->opts.max_sweeps);
                if ((st = ol_plans_push(p, plans, nplans, cap, best, scratch)))
                    goto done;
            }
        }
    }
    /* The frontier: Pareto-prune everything met. */
    *nfront = ol_plans_prune(*plans, *nplans);
    if (*nfront < 1)
        st = wf_errorf(WF_INTERNAL, "oplevel: the search produced no plan");
done:
    free(best);
    return st;
}

wf_status wf_search_oplevel(const wf_graph *g, const wf_cluster *c, const wf_mesh *m,
                            double mem_limit_bytes, const wf_search_oplevel_opts *opts,
                            wf_search_oplevel_result *r)
{
    memset(r, 0, sizeof *r);
    wf_arena_init(&r->arena, (size_t)1 << 16);
    double t0 = wf_now_s();
    wf_search_oplevel_opts o;
    wf_status st = get_opts(opts, &o);
    if (st)
        return st;
    if (!(mem_limit_bytes > 0))
        mem_limit_bytes = c->dev.mem_bytes - c->mem_reserved_bytes;
    if (!(mem_limit_bytes > 0))
        return wf_errorf(WF_INVAL, "oplevel: memory limit %g bytes (device memory %g, reserved %g)",
                         mem_limit_bytes, c->dev.mem_bytes, c->mem_reserved_bytes);
    r->memory_limit_bytes = mem_limit_bytes;

    ol_problem p;
    ol_plan *plans = NULL;
    int nplans = 0, cap = 0, nfr = 0;
    wf_arena scratch;
    wf_arena_init(&scratch, (size_t)1 << 16);
    if ((st = ol_problem_build(g, c, m, &o, o.tie_layers, &p)))
        goto done;
    r->ndecisions = p.nvar;
    for (int v = 0; v < p.nvar; v++)
        r->nchoices += p.var[v].nch;
    if ((st = ol_search_run(&p, mem_limit_bytes, &plans, &nplans, &cap, &nfr, &r->sweeps,
                            &r->conditioned, &scratch)))
        goto done;
    r->nops = p.nf;
    r->ntensors = g->ntensors;
    r->frontier = wf_arena_alloc(&r->arena, sizeof *r->frontier * (size_t)nfr + 1);
    r->choice = wf_arena_alloc(&r->arena, sizeof(int) * (size_t)p.nf + 1);
    r->sig = wf_arena_alloc(&r->arena, sizeof(wf_sbp_sig) * (size_t)p.nf + 1);
    r->layout = wf_arena_alloc(&r->arena, sizeof(wf_sbp) * (size_t)g->ntensors + 1);
    if (!r->frontier || !r->choice || !r->sig || !r->layout) {
        st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
        goto done;
    }
    r->nfrontier = nfr;
    for (int i = 0; i < nfr; i++)
        if ((st = set_point(r, &p, &plans[i], &r->frontier[i])))
            goto done;
    /* The fastest plan that fits; else the smallest. */
    int pick = -1;
    for (int i = 0; i < nfr && pick < 0; i++)
        if (plans[i].m <= mem_limit_bytes)
            pick = i;
    if (pick < 0)
        pick = nfr - 1;
    ol_fill_plan(&p, plans[pick].assign, r->choice, r->sig, r->layout);
    adopt_point(r, &r->frontier[pick]);
    if (!r->fits)
        st = wf_errorf(WF_NOFIT,
                       "oplevel: the smallest plan found needs %.3f GiB per device, the limit is "
                       "%.3f GiB",
                       r->memory_bytes / 1073741824.0, mem_limit_bytes / 1073741824.0);
done:
    r->search_time_s = wf_now_s() - t0;
    free(plans);
    wf_arena_free(&scratch);
    ol_problem_free(&p);
    return st;
}

wf_status wf_search_oplevel_result_select(wf_search_oplevel_result *r, const wf_graph *g, const wf_mesh *m,
                                          int i)
{
    if (i < 0 || i >= r->nfrontier)
        return wf_errorf(WF_INVAL, "oplevel: frontier point %d outside [0, %d)", i, r->nfrontier);
    if (r->nops != g->nfwd || r->ntensors != g->ntensors)
        return wf_errorf(WF_INVAL, "oplevel: the result is not of graph '%s'", g->name);
    int cap = 0;
    wf_sbp_sig *buf = NULL;
    for (int op = 0; op < r->nops; op++) {
        int c = r->frontier[i].choice[op];
        if (c < 0) {
            wf_sbp_sig_replicated(g, op, &r->sig[op]); /* outside the searched range */
            continue;
        }
        int n = wf_sbp_op_sigs(g, op, m, buf, cap);
        if (n < 0) {
            free(buf);
            return (wf_status)n;
        }
        if (n > cap) {
            free(buf);
            cap = n;
            buf = malloc(sizeof *buf * (size_t)cap);
            if (!buf)
                return wf_errorf(WF_NOMEM, "oplevel: out of memory");
            wf_sbp_op_sigs(g, op, m, buf, cap);
        }
        if (c >= n) {
            free(buf);
            return wf_errorf(WF_INVAL, "oplevel: op '%s': choice %d outside %d signatures",
                             g->ops[op].name, c, n);
        }
        r->sig[op] = buf[c];
    }
    free(buf);
    adopt_point(r, &r->frontier[i]);
    return WF_OK;
}

wf_status wf_search_oplevel_evaluate(const wf_graph *g, const wf_cluster *c, const wf_mesh *m,
                                     const wf_search_oplevel_opts *opts, const int *choice,
                                     const wf_sbp *layout, double *time_s, double *compute_s,
                                     double *memory_bytes)
{
    wf_search_oplevel_opts o;
    wf_status st = get_opts(opts, &o);
    if (st)
        return st;
    ol_problem p;
    int *assign = NULL;
    if ((st = ol_problem_build(g, c, m, &o, 0, &p)))
        goto done;
    assign = calloc((size_t)p.nvar + 1, sizeof(int));
    if (!assign) {
        st = wf_errorf(WF_NOMEM, "oplevel: out of memory");
        goto done;
    }
    if ((st = ol_assign_from_plan(&p, choice, layout, NULL, assign, NULL)))
        goto done;
    ol_eval(&p, assign, time_s, compute_s, memory_bytes);
done:
    free(assign);
    ol_problem_free(&p);
    return st;
}
