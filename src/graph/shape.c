/* Shape inference for every op of WF_OP_LIST.
 *
 * wf_graph_infer checks the inputs of one op (count, dtypes, ranks, matching
 * dimensions, attributes) and computes its outputs' dtype and shape. It is the
 * single source of truth: wf_graph_add_op uses it to create outputs and
 * wf_graph_validate re-runs it to check a graph built or edited by hand.
 * Errors read "op 'NAME' (KIND): reason" with the numbers that disagree. */
#include "graph/graph-impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const wf_graph *g;
    wf_op_kind kind;
    const char *opname;
    const wf_tensor *x[WF_MAX_INPUTS];
    int nin;
    const wf_op_attrs *a;
    int nout;
    wf_tensor *out;
} ictx;

static wf_status bad(const ictx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static wf_status bad(const ictx *c, const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return wf_errorf(WF_INVAL, "op '%s' (%s): %s", c->opname ? c->opname : "?",
                     wf_op_name(c->kind), reason);
}

static const char *shp(const wf_tensor *t, char *buf) { return wf_shape_str(t, buf, 96); }

/* Output 0 gets x's dtype and shape. */
static void same_as(ictx *c, const wf_tensor *x)
{
    c->nout = 1;
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = x->ndim;
    memcpy(c->out[0].shape, x->shape, sizeof x->shape);
}

static wf_status need_float(const ictx *c, int i)
{
    if (!wf_dtype_is_float(c->x[i]->dtype))
        return bad(c, "input %d '%s' has dtype %s (expected fp32, fp16 or bf16)", i,
                   c->x[i]->name, wf_dtype_name(c->x[i]->dtype));
    return WF_OK;
}

static wf_status need_rank(const ictx *c, int i, int lo, int hi)
{
    int r = c->x[i]->ndim;
    if (r < lo || r > hi) {
        char b[96];
        if (lo == hi)
            return bad(c, "input %d '%s' has rank %d %s (expected rank %d)", i, c->x[i]->name, r,
                       shp(c->x[i], b), lo);
        return bad(c, "input %d '%s' has rank %d %s (expected rank %d to %d)", i, c->x[i]->name,
                   r, shp(c->x[i], b), lo, hi);
    }
    return WF_OK;
}

/* A 1-D per-feature vector input (bias, gamma, beta) of length n. */
static wf_status need_vec(const ictx *c, int i, int64_t n, const char *role)
{
    const wf_tensor *v = c->x[i];
    char b[96];
    if (v->ndim != 1 || v->shape[0] != n)
        return bad(c, "%s (input %d '%s') has shape %s but expected [%" PRId64 "]", role, i,
                   v->name, shp(v, b), n);
    return need_float(c, i);
}

/* b's shape must be a suffix of a's (b broadcasts over a's leading dims). */
static wf_status need_suffix(const ictx *c)
{
    const wf_tensor *a = c->x[0], *b = c->x[1];
    char ba[96], bb[96];
    int ok = b->ndim <= a->ndim;
    for (int i = 0; ok && i < b->ndim; i++)
        ok = b->shape[b->ndim - 1 - i] == a->shape[a->ndim - 1 - i];
    if (!ok)
        return bad(c, "input 1 shape %s is not a suffix of input 0 shape %s (no broadcast)",
                   shp(b, bb), shp(a, ba));
    return WF_OK;
}

static int norm_axis(int axis, int ndim) { return axis < 0 ? axis + ndim : axis; }

static wf_status infer_matmul(ictx *c)
{
    const wf_tensor *A = c->x[0], *B = c->x[1];
    wf_status st;
    char ba[96], bb[96];
    if ((st = need_float(c, 0)) || (st = need_float(c, 1)))
        return st;
    int batched = c->kind == WF_OP_BATCH_MATMUL;
    if (batched) {
        if ((st = need_rank(c, 0, 2, WF_MAX_DIMS)) || (st = need_rank(c, 1, 2, WF_MAX_DIMS)))
            return st;
        if (A->ndim != B->ndim)
            return bad(c, "operands have ranks %d %s and %d %s (batch dims must be equal)",
                       A->ndim, shp(A, ba), B->ndim, shp(B, bb));
        for (int i = 0; i < A->ndim - 2; i++)
            if (A->shape[i] != B->shape[i])
                return bad(c, "batch dim %d differs: %s vs %s", i, shp(A, ba), shp(B, bb));
    } else if ((st = need_rank(c, 0, 2, 2)) || (st = need_rank(c, 1, 2, 2))) {
        return st;
    }
    int r = A->ndim;
    int64_t M = c->a->trans_a ? A->shape[r - 1] : A->shape[r - 2];
    int64_t Ka = c->a->trans_a ? A->shape[r - 2] : A->shape[r - 1];
    int64_t Kb = c->a->trans_b ? B->shape[r - 1] : B->shape[r - 2];
    int64_t N = c->a->trans_b ? B->shape[r - 2] : B->shape[r - 1];
    if (Ka != Kb)
        return bad(c, "inner dimensions differ: A %s%s has K=%" PRId64 ", B %s%s has K=%" PRId64,
                   shp(A, ba), c->a->trans_a ? " (transposed)" : "", Ka, shp(B, bb),
                   c->a->trans_b ? " (transposed)" : "", Kb);
    same_as(c, A);
    c->out[0].shape[r - 2] = M;
    c->out[0].shape[r - 1] = N;
    return WF_OK;
}

static wf_status infer_linear(ictx *c)
{
    const wf_tensor *x = c->x[0], *W = c->x[1];
    wf_status st;
    char b[96];
    if ((st = need_float(c, 0)) || (st = need_float(c, 1)) ||
        (st = need_rank(c, 0, 1, WF_MAX_DIMS)))
        return st;
    if (W->ndim != 2)
        return bad(c, "weight (input 1 '%s') has shape %s (expected [K,N])", W->name, shp(W, b));
    int64_t K = x->shape[x->ndim - 1];
    if (K != W->shape[0])
        return bad(c, "input 0 has %" PRId64 " features but weight expects %" PRId64, K,
                   W->shape[0]);
    int64_t N = W->shape[1];
    if (c->nin == 3 && (st = need_vec(c, 2, N, "bias")))
        return st;
    same_as(c, x);
    c->out[0].shape[x->ndim - 1] = N;
    return WF_OK;
}

static wf_status infer_attention(ictx *c)
{
    const wf_tensor *q = c->x[0], *k = c->x[1], *v = c->x[2];
    wf_status st;
    char bq[96], bk[96];
    for (int i = 0; i < 3; i++)
        if ((st = need_float(c, i)) || (st = need_rank(c, i, 3, 3)))
            return st;
    int A = c->a->heads, Akv = c->a->kv_heads ? c->a->kv_heads : c->a->heads;
    if (A <= 0)
        return bad(c, "heads=%d (must be positive)", A);
    if (Akv <= 0 || A % Akv != 0)
        return bad(c, "kv_heads=%d does not divide heads=%d", Akv, A);
    if (q->shape[2] % A != 0)
        return bad(c, "q width %" PRId64 " is not a multiple of heads=%d", q->shape[2], A);
    int64_t D = q->shape[2] / A;
    if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0])
        return bad(c, "batch sizes differ: q %s, k %s, v [%" PRId64 ",...]", shp(q, bq),
                   shp(k, bk), v->shape[0]);
    if (k->shape[1] != v->shape[1])
        return bad(c, "k and v sequence lengths differ (%" PRId64 " vs %" PRId64 ")", k->shape[1],
                   v->shape[1]);
    if (k->shape[2] != Akv * D || v->shape[2] != Akv * D)
        return bad(c, "k %s / v width %" PRId64 " but kv_heads=%d x head dim %" PRId64
                      " = %" PRId64,
                   shp(k, bk), v->shape[2], Akv, D, Akv * D);
    if (!(c->a->p >= 0 && c->a->p < 1))
        return bad(c, "dropout p=%g outside [0, 1)", c->a->p);
    if (c->a->scale < 0)
        return bad(c, "scale=%g is negative", c->a->scale);
    if (c->nin == 4) {
        /* bias[Bb,A,S,Skv]: Bb divides the batch (rows b use bias[b / (B/Bb)]) */
        const wf_tensor *bi = c->x[3];
        if ((st = need_float(c, 3)) || (st = need_rank(c, 3, 4, 4)))
            return st;
        if (bi->shape[0] < 1 || q->shape[0] % bi->shape[0] != 0 || bi->shape[1] != A ||
            bi->shape[2] != q->shape[1] || bi->shape[3] != k->shape[1])
            return bad(c, "bias %s is not [Bb,%d,%" PRId64 ",%" PRId64 "] with Bb dividing the batch %" PRId64,
                       shp(bi, bq), A, q->shape[1], k->shape[1], q->shape[0]);
    }
    same_as(c, q);
    return WF_OK;
}

/* Output extent of spatial dim d (2 + d of x[N,C,H,W]) for kernel K, stride s
 * and padding p on each side, shared by conv2d and the pools. */
static wf_status spatial_out(ictx *c, const wf_tensor *x, int d, int64_t K, int64_t s, int64_t p)
{
    char bx[96];
    if (s < 0 || p < 0)
        return bad(c, "stride[%d]=%" PRId64 " / pad[%d]=%" PRId64 " is negative", d, s, d, p);
    int64_t span = x->shape[2 + d] + 2 * p - K;
    if (span < 0)
        return bad(c, "kernel %" PRId64 " larger than padded input %" PRId64 " (dim %d of %s)",
                   K, x->shape[2 + d] + 2 * p, 2 + d, shp(x, bx));
    int ceil_mode = c->kind != WF_OP_CONV2D && c->a->ceil_mode;
    c->out[0].shape[2 + d] = wf_pool_out(x->shape[2 + d], K, s, p, ceil_mode);
    return WF_OK;
}

int64_t wf_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int ceil_mode)
{
    int64_t span = in + 2 * p - k;
    if (!ceil_mode)
        return span / s + 1;
    int64_t out = (span + s - 1) / s + 1;
    /* PyTorch's rule: the last window must start inside the input or its left padding */
    if ((out - 1) * s >= in + p)
        out--;
    return out;
}

/* expand: x broadcast to the attribute's shape (numpy rules). */
static wf_status infer_expand(ictx *c)
{
    const wf_tensor *x = c->x[0];
    char bx[96];
    int nd = c->a->ndim;
    if (nd < x->ndim || nd > WF_MAX_DIMS)
        return bad(c, "target rank %d is below the input's rank %d or above %d", nd, x->ndim,
                   WF_MAX_DIMS);
    for (int i = 0; i < nd; i++) {
        int64_t t = c->a->shape[i];
        int k = i - (nd - x->ndim);
        if (t <= 0)
            return bad(c, "target dim %d is %" PRId64 " (must be positive)", i, t);
        if (k >= 0 && x->shape[k] != 1 && x->shape[k] != t)
            return bad(c, "cannot broadcast %s to target dim %d of size %" PRId64, shp(x, bx), i, t);
    }
    c->nout = 1;
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = nd;
    memcpy(c->out[0].shape, c->a->shape, sizeof(int64_t) * (size_t)nd);
    return WF_OK;
}

static wf_status infer_conv2d(ictx *c)
{
    const wf_tensor *x = c->x[0], *w = c->x[1];
    wf_status st;
    char bx[96], bw[96];
    if ((st = need_float(c, 0)) || (st = need_float(c, 1)) || (st = need_rank(c, 0, 4, 4)) ||
        (st = need_rank(c, 1, 4, 4)))
        return st;
    int64_t groups = c->a->groups ? c->a->groups : 1;
    if (groups < 0)
        return bad(c, "groups=%" PRId64 " is negative", groups);
    int64_t C = x->shape[1], O = w->shape[0];
    if (C % groups != 0 || O % groups != 0)
        return bad(c, "groups=%" PRId64 " does not divide input channels %" PRId64
                      " and output channels %" PRId64,
                   groups, C, O);
    if (w->shape[1] != C / groups)
        return bad(c, "weight %s expects %" PRId64 " channels per group but input %s has %" PRId64
                      " / groups=%" PRId64,
                   shp(w, bw), w->shape[1], shp(x, bx), C, groups);
    if (c->nin == 3 && (st = need_vec(c, 2, O, "bias")))
        return st;
    same_as(c, x);
    c->out[0].shape[1] = O;
    for (int d = 0; d < 2; d++) {
        int64_t K = w->shape[2 + d];
        if (c->a->kernel[d] && c->a->kernel[d] != K)
            return bad(c, "attr kernel[%d]=%d but the weight's kernel is %" PRId64, d,
                       c->a->kernel[d], K);
        int64_t s = c->a->stride[d] ? c->a->stride[d] : 1, p = c->a->pad[d];
        if ((st = spatial_out(c, x, d, K, s, p)))
            return st;
    }
    return WF_OK;
}

static wf_status infer_pool(ictx *c)
{
    const wf_tensor *x = c->x[0];
    wf_status st;
    if ((st = need_float(c, 0)) || (st = need_rank(c, 0, 4, 4)))
        return st;
    same_as(c, x);
    if (c->kind == WF_OP_GLOBAL_AVGPOOL) {
        c->out[0].ndim = 2;
        return WF_OK;
    }
    for (int d = 0; d < 2; d++) {
        int64_t K = c->a->kernel[d], p = c->a->pad[d];
        int64_t s = c->a->stride[d] ? c->a->stride[d] : K;
        if (K <= 0)
            return bad(c, "kernel[%d]=%" PRId64 " (must be positive)", d, K);
        if (2 * p > K)
            return bad(c, "pad[%d]=%" PRId64 " is more than half the kernel %" PRId64, d, p, K);
        if ((st = spatial_out(c, x, d, K, s, p)))
            return st;
    }
    return WF_OK;
}

static wf_status infer_reshape(ictx *c)
{
    const wf_tensor *x = c->x[0];
    char bx[96];
    int nd = c->a->ndim;
    if (nd < 0 || nd > WF_MAX_DIMS)
        return bad(c, "target rank %d outside [0, %d]", nd, WF_MAX_DIMS);
    int64_t n = wf_tensor_numel(x), known = 1;
    int infer = -1;
    for (int i = 0; i < nd; i++) {
        int64_t d = c->a->shape[i];
        if (d == -1) {
            if (infer >= 0)
                return bad(c, "more than one -1 in the target shape");
            infer = i;
        } else if (d <= 0) {
            return bad(c, "target dim %d is %" PRId64 " (must be positive or -1)", i, d);
        } else {
            if (wf_mul_i64(known, d, &known) != 0 || known > WF_MAX_NUMEL)
                return bad(c, "target shape has more than %" PRId64 " elements", WF_MAX_NUMEL);
        }
    }
    c->nout = 1;
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = nd;
    memcpy(c->out[0].shape, c->a->shape, sizeof c->a->shape);
    for (int i = nd; i < WF_MAX_DIMS; i++)
        c->out[0].shape[i] = 0;
    if (infer >= 0) {
        if (n % known != 0)
            return bad(c, "cannot reshape %s (%" PRId64 " elements) with the -1 dim: %" PRId64
                          " is not a multiple of %" PRId64,
                       shp(x, bx), n, n, known);
        c->out[0].shape[infer] = n / known;
    } else if (known != n) {
        return bad(c, "cannot reshape %s (%" PRId64 " elements) to %" PRId64 " elements",
                   shp(x, bx), n, known);
    }
    return WF_OK;
}

static wf_status infer_transpose(ictx *c)
{
    const wf_tensor *x = c->x[0];
    int seen[WF_MAX_DIMS] = {0};
    same_as(c, x);
    for (int i = 0; i < x->ndim; i++) {
        int p = c->a->perm[i];
        if (p < 0 || p >= x->ndim || seen[p])
            return bad(c, "perm is not a permutation of 0..%d (perm[%d]=%d)", x->ndim - 1, i, p);
        seen[p] = 1;
        c->out[0].shape[i] = x->shape[p];
    }
    return WF_OK;
}

static wf_status infer_flatten(ictx *c)
{
    const wf_tensor *x = c->x[0];
    int axis = c->a->axis ? c->a->axis : 1;
    if (axis < 1 || axis > x->ndim)
        return bad(c, "axis=%d outside [1, %d]", axis, x->ndim);
    same_as(c, x);
    int64_t rest = 1;
    for (int i = axis; i < x->ndim; i++)
        rest *= x->shape[i];
    c->out[0].ndim = axis + 1;
    c->out[0].shape[axis] = rest;
    for (int i = axis + 1; i < WF_MAX_DIMS; i++)
        c->out[0].shape[i] = 0;
    return WF_OK;
}

static wf_status infer_concat(ictx *c)
{
    const wf_tensor *x0 = c->x[0];
    char b0[96], bi[96];
    int axis = norm_axis(c->a->axis, x0->ndim);
    if (axis < 0 || axis >= x0->ndim)
        return bad(c, "axis=%d outside the rank %d of input 0", c->a->axis, x0->ndim);
    same_as(c, x0);
    int64_t total = 0;
    for (int i = 0; i < c->nin; i++) {
        const wf_tensor *xi = c->x[i];
        if (xi->dtype != x0->dtype)
            return bad(c, "input %d has dtype %s but input 0 has %s", i, wf_dtype_name(xi->dtype),
                       wf_dtype_name(x0->dtype));
        int ok = xi->ndim == x0->ndim;
        for (int d = 0; ok && d < x0->ndim; d++)
            ok = d == axis || xi->shape[d] == x0->shape[d];
        if (!ok)
            return bad(c, "input %d shape %s does not match input 0 shape %s outside axis %d", i,
                       shp(xi, bi), shp(x0, b0), axis);
        total += xi->shape[axis];
    }
    c->out[0].shape[axis] = total;
    return WF_OK;
}

static wf_status infer_split(ictx *c)
{
    const wf_tensor *x = c->x[0];
    char bx[96];
    int n = c->a->nsplit;
    if (n < 1 || n > WF_MAX_OUTPUTS)
        return bad(c, "nsplit=%d outside [1, %d]", n, WF_MAX_OUTPUTS);
    int axis = norm_axis(c->a->axis, x->ndim);
    if (axis < 0 || axis >= x->ndim)
        return bad(c, "axis=%d outside the rank %d of the input", c->a->axis, x->ndim);
    int64_t dim = x->shape[axis], sum = 0;
    int given = 0;
    for (int i = 0; i < WF_MAX_OUTPUTS; i++)
        given |= c->a->sizes[i] != 0;
    if (given) {
        for (int i = 0; i < WF_MAX_OUTPUTS; i++) {
            if (i >= n && c->a->sizes[i] != 0)
                return bad(c, "sizes[%d]=%" PRId64 " set beyond nsplit=%d", i, c->a->sizes[i], n);
            if (i < n && c->a->sizes[i] <= 0)
                return bad(c, "sizes[%d]=%" PRId64 " (must be positive)", i, c->a->sizes[i]);
            sum += c->a->sizes[i];
        }
        if (sum != dim)
            return bad(c, "sizes add up to %" PRId64 " but dim %d of %s is %" PRId64, sum, axis,
                       shp(x, bx), dim);
    } else if (dim % n != 0) {
        return bad(c, "dim %d of %s is %" PRId64 ", not divisible into %d equal parts", axis,
                   shp(x, bx), dim, n);
    }
    for (int i = 0; i < n; i++) {
        c->out[i].dtype = x->dtype;
        c->out[i].ndim = x->ndim;
        memcpy(c->out[i].shape, x->shape, sizeof x->shape);
        c->out[i].shape[axis] = given ? c->a->sizes[i] : dim / n;
    }
    c->nout = n;
    return WF_OK;
}

/* The [B,S,K] routing tensors of moe_dispatch/moe_combine against the tokens
 * x[B,S,H] they route (dispatch) or rebuild (combine). */
static wf_status need_routing(const ictx *c, int i, const wf_tensor *ref, int is_int)
{
    const wf_tensor *r = c->x[i];
    char br[96];
    if (is_int && !wf_dtype_is_int(r->dtype))
        return bad(c, "expert ids (input %d '%s') have dtype %s (expected int32 or int64)", i,
                   r->name, wf_dtype_name(r->dtype));
    if (!is_int && !wf_dtype_is_float(r->dtype))
        return bad(c, "routing weights (input %d '%s') have dtype %s (expected a float type)", i,
                   r->name, wf_dtype_name(r->dtype));
    if (r->ndim != 3 || r->shape[0] != ref->shape[0] || r->shape[1] != ref->shape[1] ||
        r->shape[2] < 1)
        return bad(c, "input %d '%s' has shape %s but expected [%" PRId64 ",%" PRId64 ",K]", i,
                   r->name, shp(r, br), ref->shape[0], ref->shape[1]);
    return WF_OK;
}

static wf_status infer_router(ictx *c)
{
    const wf_tensor *x = c->x[0], *W = c->x[1];
    wf_status st;
    char b[96];
    if ((st = need_float(c, 0)) || (st = need_float(c, 1)) || (st = need_rank(c, 0, 3, 3)))
        return st;
    if (W->ndim != 2 || W->shape[0] != x->shape[2])
        return bad(c, "weight (input 1 '%s') has shape %s but expected [%" PRId64 ",E]", W->name,
                   shp(W, b), x->shape[2]);
    int64_t E = W->shape[1];
    if (c->a->experts != 0 && c->a->experts != E)
        return bad(c, "experts=%d but the weight scores %" PRId64, c->a->experts, E);
    if (c->a->top_k < 1 || c->a->top_k > E)
        return bad(c, "top_k=%d outside [1, %" PRId64 "] (the experts)", c->a->top_k, E);
    if (c->a->score != WF_MOE_SCORE_SOFTMAX && c->a->score != WF_MOE_SCORE_SIGMOID)
        return bad(c, "score=%d (expected %d softmax or %d sigmoid)", c->a->score,
                   WF_MOE_SCORE_SOFTMAX, WF_MOE_SCORE_SIGMOID);
    c->nout = 2;
    for (int i = 0; i < 2; i++) {
        c->out[i].dtype = i == 0 ? x->dtype : WF_DTYPE_INT32;
        c->out[i].ndim = 3;
        c->out[i].shape[0] = x->shape[0];
        c->out[i].shape[1] = x->shape[1];
        c->out[i].shape[2] = c->a->top_k;
    }
    return WF_OK;
}

static wf_status infer_dispatch(ictx *c)
{
    const wf_tensor *x = c->x[0];
    wf_status st;
    if ((st = need_float(c, 0)) || (st = need_rank(c, 0, 3, 3)) ||
        (st = need_routing(c, 1, x, 1)))
        return st;
    int E = c->a->experts;
    int64_t K = c->x[1]->shape[2];
    if (E < 1 || K > E)
        return bad(c, "experts=%d (must be positive and at least top_k=%" PRId64 ")", E, K);
    if (!(c->a->capacity_factor >= 0) || c->a->capacity_factor > 1e6)
        return bad(c, "capacity_factor=%g outside [0, 1e6]", c->a->capacity_factor);
    same_as(c, x);
    c->out[0].shape[0] = E;
    c->out[0].shape[1] =
        wf_moe_capacity(x->shape[0] * x->shape[1], (int)K, E, c->a->capacity_factor);
    return WF_OK;
}

static wf_status infer_grouped_mlp(ictx *c)
{
    const wf_tensor *x = c->x[0], *w1 = c->x[1], *w2 = c->x[2];
    wf_status st;
    char bx[96], b1[96], b2[96];
    for (int i = 0; i < 3; i++)
        if ((st = need_float(c, i)) || (st = need_rank(c, i, 3, 3)))
            return st;
    if (c->a->act != WF_MOE_ACT_SWIGLU && c->a->act != WF_MOE_ACT_GELU)
        return bad(c, "act=%d (expected %d swiglu or %d gelu)", c->a->act, WF_MOE_ACT_SWIGLU,
                   WF_MOE_ACT_GELU);
    int64_t E = x->shape[0], H = x->shape[2], F = w2->shape[1];
    int64_t gF = c->a->act == WF_MOE_ACT_SWIGLU ? 2 * F : F;
    if (w1->shape[0] != E || w1->shape[1] != H || w1->shape[2] != gF)
        return bad(c, "w1 %s does not match x %s and w2 %s (expected [%" PRId64 ",%" PRId64
                      ",%" PRId64 "] for %s)",
                   shp(w1, b1), shp(x, bx), shp(w2, b2), E, H, gF,
                   c->a->act == WF_MOE_ACT_SWIGLU ? "swiglu" : "gelu");
    if (w2->shape[0] != E || w2->shape[2] != H)
        return bad(c, "w2 %s does not match x %s (expected [%" PRId64 ",F,%" PRId64 "])",
                   shp(w2, b2), shp(x, bx), E, H);
    same_as(c, x);
    return WF_OK;
}

static wf_status infer_combine(ictx *c)
{
    const wf_tensor *y = c->x[0], *w = c->x[1], *ids = c->x[2];
    wf_status st;
    char bw[96], bi[96];
    if ((st = need_float(c, 0)) || (st = need_rank(c, 0, 3, 3)) || (st = need_rank(c, 1, 3, 3)) ||
        (st = need_routing(c, 1, w, 0)) || (st = need_routing(c, 2, w, 1)))
        return st;
    if (ids->shape[2] != w->shape[2])
        return bad(c, "weights %s and expert ids %s differ", shp(w, bw), shp(ids, bi));
    if (w->shape[2] > y->shape[0])
        return bad(c, "top_k=%" PRId64 " exceeds the %" PRId64 " experts of input 0",
                   w->shape[2], y->shape[0]);
    c->nout = 1;
    c->out[0].dtype = y->dtype;
    c->out[0].ndim = 3;
    c->out[0].shape[0] = w->shape[0];
    c->out[0].shape[1] = w->shape[1];
    c->out[0].shape[2] = y->shape[2];
    return WF_OK;
}

wf_status wf_graph_infer(const wf_graph *g, wf_op_kind kind, const char *opname, const int *in,
                         int nin, const wf_op_attrs *attr, int *nout,
                         wf_tensor outs[WF_MAX_OUTPUTS])
{
    wf_op_attrs zero;
    memset(&zero, 0, sizeof zero);
    ictx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.kind = kind;
    c.opname = opname;
    c.a = attr ? attr : &zero;
    c.out = outs;
    c.nin = nin;
    memset(outs, 0, sizeof(wf_tensor) * WF_MAX_OUTPUTS);
    *nout = 0;
    if ((int)kind < 0 || kind >= WF_OP_COUNT)
        return wf_errorf(WF_INVAL, "op '%s': unknown op kind %d", opname ? opname : "?",
                         (int)kind);
    const wf_op_info *info = &wf_op_table[kind];
    if (nin < info->min_in || nin > info->max_in) {
        if (info->min_in == info->max_in)
            return bad(&c, "takes %d inputs, got %d", info->min_in, nin);
        return bad(&c, "takes %d to %d inputs, got %d", info->min_in, info->max_in, nin);
    }
    if (nin > 0 && !in)
        return bad(&c, "no input list");
    for (int i = 0; i < nin; i++) {
        if (in[i] < 0 || in[i] >= g->ntensors)
            return bad(&c, "input %d is tensor %d, not in the graph (%d tensors)", i, in[i],
                       g->ntensors);
        c.x[i] = &g->tensors[in[i]];
    }

    const wf_tensor *x = c.x[0];
    wf_status st = WF_OK;
    char b0[96], b1[96];
    switch (kind) {
    case WF_OP_MATMUL:
    case WF_OP_BATCH_MATMUL:
        st = infer_matmul(&c);
        break;
    case WF_OP_LINEAR:
        st = infer_linear(&c);
        break;
    case WF_OP_BIAS_ADD:
        if ((st = need_float(&c, 0)) || (st = need_rank(&c, 0, 1, WF_MAX_DIMS)) ||
            (st = need_vec(&c, 1, x->shape[x->ndim - 1], "bias")))
            break;
        same_as(&c, x);
        break;
    case WF_OP_ADD:
    case WF_OP_MUL:
        if ((st = need_float(&c, 0)))
            break;
        if (nin == 2 && ((st = need_float(&c, 1)) || (st = need_suffix(&c))))
            break;
        same_as(&c, x);
        break;
    case WF_OP_DROPOUT:
        if (!(c.a->p >= 0 && c.a->p < 1)) {
            st = bad(&c, "dropout p=%g outside [0, 1)", c.a->p);
            break;
        }
        /* fall through */
    case WF_OP_RELU:
    case WF_OP_GELU:
    case WF_OP_SILU:
    case WF_OP_TANH:
    case WF_OP_CLIP:
    case WF_OP_HARDSWISH:
    case WF_OP_SIGMOID:
        if ((st = need_float(&c, 0)))
            break;
        same_as(&c, x);
        break;
    case WF_OP_ROLL:
        if ((st = need_float(&c, 0)))
            break;
        for (int d = x->ndim; d < WF_MAX_DIMS; d++)
            if (c.a->shifts[d] != 0) {
                st = bad(&c, "shifts[%d]=%" PRId64 " names a dim past the input's rank %d", d,
                         c.a->shifts[d], x->ndim);
                break;
            }
        if (st == WF_OK)
            same_as(&c, x);
        break;
    case WF_OP_CAST:
        if (wf_dtype_is_float(x->dtype) || !wf_dtype_is_float((wf_dtype)c.a->dtype)) {
            st = bad(&c, "casts an integer tensor to a float dtype (got %s to %s)",
                     wf_dtype_name(x->dtype), wf_dtype_name((wf_dtype)c.a->dtype));
            break;
        }
        same_as(&c, x);
        c.out[0].dtype = (wf_dtype)c.a->dtype;
        break;
    case WF_OP_EXPAND:
        st = infer_expand(&c);
        break;
    case WF_OP_LAYERNORM:
    case WF_OP_RMSNORM:
        if ((st = need_float(&c, 0)) || (st = need_rank(&c, 0, 1, WF_MAX_DIMS)) ||
            (st = need_vec(&c, 1, x->shape[x->ndim - 1], "gamma")))
            break;
        if (kind == WF_OP_LAYERNORM && (st = need_vec(&c, 2, x->shape[x->ndim - 1], "beta")))
            break;
        if (c.a->eps < 0) {
            st = bad(&c, "eps=%g is negative", c.a->eps);
            break;
        }
        same_as(&c, x);
        break;
    case WF_OP_SOFTMAX: {
        if ((st = need_float(&c, 0)) || (st = need_rank(&c, 0, 1, WF_MAX_DIMS)))
            break;
        /* Softmax runs over the last axis; axis may say so as 0 (unset), -1 or ndim-1. */
        int ax = c.a->axis;
        if (ax != 0 && ax != -1 && ax != x->ndim - 1) {
            st = bad(&c, "axis=%d: softmax runs over the last axis only (%d)", ax, x->ndim - 1);
            break;
        }
        same_as(&c, x);
        break;
    }
    case WF_OP_ATTENTION:
        st = infer_attention(&c);
        break;
    case WF_OP_EMBEDDING: {
        const wf_tensor *tab = c.x[1];
        if (!wf_dtype_is_int(x->dtype)) {
            st = bad(&c, "ids (input 0 '%s') have dtype %s (expected int32 or int64)", x->name,
                     wf_dtype_name(x->dtype));
            break;
        }
        if ((st = need_float(&c, 1)))
            break;
        if (tab->ndim != 2) {
            st = bad(&c, "table (input 1 '%s') has shape %s (expected [V,H])", tab->name,
                     shp(tab, b1));
            break;
        }
        if (x->ndim + 1 > WF_MAX_DIMS) {
            st = bad(&c, "ids of rank %d leave no room for the hidden dim", x->ndim);
            break;
        }
        same_as(&c, x);
        c.out[0].dtype = tab->dtype;
        c.out[0].ndim = x->ndim + 1;
        c.out[0].shape[x->ndim] = tab->shape[1];
        break;
    }
    case WF_OP_ROTARY: {
        if ((st = need_float(&c, 0)) || (st = need_rank(&c, 0, 3, 3)))
            break;
        int A = c.a->heads;
        if (A <= 0) {
            st = bad(&c, "heads=%d (must be positive)", A);
            break;
        }
        if (x->shape[2] % A != 0 || (x->shape[2] / A) % 2 != 0) {
            st = bad(&c, "width %" PRId64 " is not heads=%d times an even head dim", x->shape[2],
                     A);
            break;
        }
        if (c.a->base < 0) {
            st = bad(&c, "base=%g is negative", c.a->base);
            break;
        }
        same_as(&c, x);
        break;
    }
    case WF_OP_CROSS_ENTROPY: {
        const wf_tensor *lab = c.x[1];
        if ((st = need_float(&c, 0)) || (st = need_rank(&c, 0, 1, WF_MAX_DIMS)))
            break;
        if (!wf_dtype_is_int(lab->dtype)) {
            st = bad(&c, "labels (input 1 '%s') have dtype %s (expected int32 or int64)",
                     lab->name, wf_dtype_name(lab->dtype));
            break;
        }
        int ok = lab->ndim == x->ndim - 1;
        for (int i = 0; ok && i < lab->ndim; i++)
            ok = lab->shape[i] == x->shape[i];
        if (!ok) {
            st = bad(&c, "labels shape %s does not match logits shape %s without its last dim",
                     shp(lab, b1), shp(x, b0));
            break;
        }
        c.nout = 1;
        c.out[0].dtype = x->dtype;
        c.out[0].ndim = 0;
        break;
    }
    case WF_OP_CONV2D:
        st = infer_conv2d(&c);
        break;
    case WF_OP_MAXPOOL:
    case WF_OP_AVGPOOL:
    case WF_OP_GLOBAL_AVGPOOL:
        st = infer_pool(&c);
        break;
    case WF_OP_BATCHNORM:
        if ((st = need_float(&c, 0)) || (st = need_rank(&c, 0, 2, WF_MAX_DIMS)) ||
            (st = need_vec(&c, 1, x->shape[1], "gamma")) ||
            (st = need_vec(&c, 2, x->shape[1], "beta")))
            break;
        if (c.a->eps < 0) {
            st = bad(&c, "eps=%g is negative", c.a->eps);
            break;
        }
        same_as(&c, x);
        break;
    case WF_OP_RESHAPE:
        st = infer_reshape(&c);
        break;
    case WF_OP_TRANSPOSE:
        st = infer_transpose(&c);
        break;
    case WF_OP_FLATTEN:
        st = infer_flatten(&c);
        break;
    case WF_OP_CONCAT:
        st = infer_concat(&c);
        break;
    case WF_OP_SPLIT:
        st = infer_split(&c);
        break;
    case WF_OP_ROUTER:
        st = infer_router(&c);
        break;
    case WF_OP_MOE_DISPATCH:
        st = infer_dispatch(&c);
        break;
    case WF_OP_GROUPED_MLP:
        st = infer_grouped_mlp(&c);
        break;
    case WF_OP_MOE_COMBINE:
        st = infer_combine(&c);
        break;
    case WF_OP_COUNT:
        st = bad(&c, "not an op");
        break;
    }
    if (st != WF_OK) {
        *nout = 0;
        return st;
    }
    *nout = c.nout;
    return WF_OK;
}
