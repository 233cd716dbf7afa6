/* Every op kind of WF_OP_LIST through the runtime, one graph per kind.
 *
 * For each kind k < WF_OP_COUNT the test builds a graph holding one op of
 * kind k, its float operands parameters (so that every operand gets a
 * gradient) and its integer operands inputs, and feeds the op's first float
 * output to the loss: reshaped to one row of logits and scored by
 * cross-entropy against a label (cross_entropy itself is the loss). Then:
 *   - the fast kernels against the reference kernels (wf_exec_opts.reference):
 *     the loss and every parameter gradient within relative 1e-5;
 *   - backward against central finite differences of the loss (reference
 *     kernels), on the largest gradient element of every parameter and a
 *     seeded other.
 * A kind with no case in this test fails it: BUILDERS has a row for every
 * kind, and a kind the runtime cannot run must be listed in NO_KERNEL with
 * its reason (the test checks that each listed kind is refused by
 * wf_exec_create and each unlisted one runs, so the list stays exact). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "weft/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(WF_OP_COUNT == 38, "a new op kind needs a builder in BUILDERS (or a row in NO_KERNEL)");

/* ---- graph building ------------------------------------------------------------------ */

static int param(wf_graph *g, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    int64_t s[4] = {d0, d1, d2, d3};
    return wf_graph_add_tensor(g, name, WF_DTYPE_FP32, WF_ROLE_PARAM, ndim, s);
}

static int ints(wf_graph *g, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t s[3] = {d0, d1, d2};
    return wf_graph_add_tensor(g, name, WF_DTYPE_INT32, WF_ROLE_INPUT, ndim, s);
}

/* Adds the op under test and returns its output that feeds the loss. */
static int op_out(wf_graph *g, wf_op_kind k, const int *in, int nin, const wf_op_attrs *a)
{
    int o = wf_graph_add_op(g, k, "op", in, nin, a);
    return wf_graph_op_output(g, o, 0);
}

typedef int (*builder)(wf_graph *g, wf_op_attrs *a);

static int b_matmul(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "a", 2, 3, 4, 0, 0), param(g, "b", 2, 5, 4, 0, 0)};
    a->trans_b = 1;
    return op_out(g, WF_OP_MATMUL, in, 2, a);
}

static int b_batch_matmul(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "a", 3, 2, 4, 3, 0), param(g, "b", 3, 2, 4, 2, 0)};
    a->trans_a = 1;
    return op_out(g, WF_OP_BATCH_MATMUL, in, 2, a);
}

static int b_linear(wf_graph *g, wf_op_attrs *a)
{
    int in[3] = {param(g, "x", 3, 2, 2, 4, 0), param(g, "w", 2, 4, 3, 0, 0), param(g, "bias", 1, 3, 0, 0, 0)};
    return op_out(g, WF_OP_LINEAR, in, 3, a);
}

static int b_bias_add(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "x", 2, 3, 4, 0, 0), param(g, "b", 1, 4, 0, 0, 0)};
    return op_out(g, WF_OP_BIAS_ADD, in, 2, a);
}

static int b_add(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "x", 3, 2, 3, 4, 0), param(g, "y", 2, 3, 4, 0, 0)};
    return op_out(g, WF_OP_ADD, in, 2, a);
}

static int b_mul(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "x", 3, 2, 3, 4, 0), param(g, "y", 1, 4, 0, 0, 0)};
    return op_out(g, WF_OP_MUL, in, 2, a);
}

static int unary(wf_graph *g, wf_op_kind k, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 2, 4, 6, 0, 0)};
    return op_out(g, k, in, 1, a);
}

static int b_relu(wf_graph *g, wf_op_attrs *a) { return unary(g, WF_OP_RELU, a); }
static int b_gelu(wf_graph *g, wf_op_attrs *a) { return unary(g, WF_OP_GELU, a); }
static int b_silu(wf_graph *g, wf_op_attrs *a) { return unary(g, WF_OP_SILU, a); }
static int b_tanh(wf_graph *g, wf_op_attrs *a) { return unary(g, WF_OP_TANH, a); }
static int b_hardswish(wf_graph *g, wf_op_attrs *a) { return unary(g, WF_OP_HARDSWISH, a); }
static int b_softmax(wf_graph *g, wf_op_attrs *a)
{
    a->axis = 1;
    return unary(g, WF_OP_SOFTMAX, a);
}

static int b_dropout(wf_graph *g, wf_op_attrs *a)
{
    a->p = 0.25;
    a->seed = 11;
    return unary(g, WF_OP_DROPOUT, a);
}

static int b_clip(wf_graph *g, wf_op_attrs *a)
{
    a->alpha = 2.0;
    a->beta = 0.1;
    a->lo = -0.05;
    a->hi = 0.08;
    return unary(g, WF_OP_CLIP, a);
}

static int b_layernorm(wf_graph *g, wf_op_attrs *a)
{
    int in[3] = {param(g, "x", 2, 3, 6, 0, 0), param(g, "gamma", 1, 6, 0, 0, 0), param(g, "beta", 1, 6, 0, 0, 0)};
    a->eps = 1e-5;
    return op_out(g, WF_OP_LAYERNORM, in, 3, a);
}

static int b_rmsnorm(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "x", 2, 3, 6, 0, 0), param(g, "gamma", 1, 6, 0, 0, 0)};
    a->eps = 1e-5;
    return op_out(g, WF_OP_RMSNORM, in, 2, a);
}

/* With the optional additive bias [Bb,A,S,S] (one per pair of batch rows),
 * so the executor's bias gradient is checked too (the plain form runs in
 * every transformer test). */
static int b_attention(wf_graph *g, wf_op_attrs *a)
{
    int in[4] = {param(g, "q", 3, 2, 4, 8, 0), param(g, "k", 3, 2, 4, 4, 0), param(g, "v", 3, 2, 4, 4, 0),
                 param(g, "bias", 4, 1, 2, 4, 4)};
    a->heads = 2;
    a->kv_heads = 1;
    a->causal = 1;
    return op_out(g, WF_OP_ATTENTION, in, 4, a);
}

static int b_sigmoid(wf_graph *g, wf_op_attrs *a) { return unary(g, WF_OP_SIGMOID, a); }

static int b_roll(wf_graph *g, wf_op_attrs *a)
{
    a->shifts[0] = 1;
    a->shifts[1] = -2;
    return unary(g, WF_OP_ROLL, a);
}

static int b_embedding(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {ints(g, "tokens", 2, 2, 3, 0), param(g, "table", 2, 7, 4, 0, 0)};
    return op_out(g, WF_OP_EMBEDDING, in, 2, a);
}

static int b_rotary(wf_graph *g, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 3, 1, 4, 8, 0)};
    a->heads = 2;
    return op_out(g, WF_OP_ROTARY, in, 1, a);
}

/* The loss itself: no reshape and no second cross-entropy. */
static int b_cross_entropy(wf_graph *g, wf_op_attrs *a)
{
    int64_t s[1] = {3};
    int in[2] = {param(g, "logits", 2, 3, 5, 0, 0), wf_graph_add_tensor(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, s)};
    wf_graph_add_op(g, WF_OP_CROSS_ENTROPY, "op", in, 2, a);
    return -1;
}

static int b_conv2d(wf_graph *g, wf_op_attrs *a)
{
    int in[3] = {param(g, "x", 4, 1, 2, 5, 5), param(g, "w", 4, 3, 2, 3, 3), param(g, "bias", 1, 3, 0, 0, 0)};
    a->stride[0] = a->stride[1] = 2;
    a->pad[0] = a->pad[1] = 1;
    return op_out(g, WF_OP_CONV2D, in, 3, a);
}

static int pool(wf_graph *g, wf_op_kind k, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 4, 1, 2, 4, 4)};
    a->kernel[0] = a->kernel[1] = 2;
    a->stride[0] = a->stride[1] = 2;
    return op_out(g, k, in, 1, a);
}

static int b_maxpool(wf_graph *g, wf_op_attrs *a) { return pool(g, WF_OP_MAXPOOL, a); }
static int b_avgpool(wf_graph *g, wf_op_attrs *a) { return pool(g, WF_OP_AVGPOOL, a); }
static int b_global_avgpool(wf_graph *g, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 4, 2, 3, 2, 2)};
    return op_out(g, WF_OP_GLOBAL_AVGPOOL, in, 1, a);
}

static int b_batchnorm(wf_graph *g, wf_op_attrs *a)
{
    int in[3] = {param(g, "x", 4, 2, 3, 2, 2), param(g, "gamma", 1, 3, 0, 0, 0), param(g, "beta", 1, 3, 0, 0, 0)};
    a->eps = 1e-5;
    return op_out(g, WF_OP_BATCHNORM, in, 3, a);
}

static int b_reshape(wf_graph *g, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 2, 2, 6, 0, 0)};
    a->ndim = 3;
    a->shape[0] = 3;
    a->shape[1] = -1;
    a->shape[2] = 2;
    return op_out(g, WF_OP_RESHAPE, in, 1, a);
}

static int b_transpose(wf_graph *g, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 3, 2, 3, 4, 0)};
    a->perm[0] = 2;
    a->perm[1] = 0;
    a->perm[2] = 1;
    return op_out(g, WF_OP_TRANSPOSE, in, 1, a);
}

static int b_flatten(wf_graph *g, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 3, 2, 3, 2, 0)};
    a->axis = 1;
    return op_out(g, WF_OP_FLATTEN, in, 1, a);
}

static int b_concat(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "x", 2, 2, 3, 0, 0), param(g, "y", 2, 2, 2, 0, 0)};
    a->axis = 1;
    return op_out(g, WF_OP_CONCAT, in, 2, a);
}

/* The first of two outputs feeds the loss (the second's gradient is zero). */
static int b_split(wf_graph *g, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 2, 2, 6, 0, 0)};
    a->axis = 1;
    a->nsplit = 2;
    a->sizes[0] = 4;
    a->sizes[1] = 2;
    return op_out(g, WF_OP_SPLIT, in, 1, a);
}

/* T = 4 tokens, H = 4, E = 4 experts, K = 2. */
static int b_router(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "x", 3, 1, 4, 4, 0), param(g, "w", 2, 4, 4, 0, 0)};
    a->top_k = 2;
    return op_out(g, WF_OP_ROUTER, in, 2, a);
}

static int b_moe_dispatch(wf_graph *g, wf_op_attrs *a)
{
    int in[2] = {param(g, "x", 3, 1, 4, 4, 0), ints(g, "experts", 3, 1, 4, 2)};
    a->experts = 4;
    a->top_k = 2;
    return op_out(g, WF_OP_MOE_DISPATCH, in, 2, a);
}

static int b_grouped_mlp(wf_graph *g, wf_op_attrs *a)
{
    int in[3] = {param(g, "x", 3, 2, 3, 4, 0), param(g, "w1", 3, 2, 4, 6, 0), param(g, "w2", 3, 2, 3, 4, 0)};
    a->act = WF_MOE_ACT_SWIGLU;
    return op_out(g, WF_OP_GROUPED_MLP, in, 3, a);
}

static int b_moe_combine(wf_graph *g, wf_op_attrs *a)
{
    int64_t cap = wf_moe_capacity(4, 2, 4, 0);
    int in[3] = {param(g, "y", 3, 4, cap, 4, 0), param(g, "weights", 3, 1, 4, 2, 0), ints(g, "experts", 3, 1, 4, 2)};
    return op_out(g, WF_OP_MOE_COMBINE, in, 3, a);
}

/* An integer input as floats. Cast has no gradient and a loss must depend on
 * a parameter, so a parameter is added to its output: the cast's values reach
 * the loss and that parameter's gradient (both checked). */
static int b_cast(wf_graph *g, wf_op_attrs *a)
{
    int in[1] = {ints(g, "n", 2, 2, 3, 0)};
    a->dtype = WF_DTYPE_FP32;
    int sum[2] = {op_out(g, WF_OP_CAST, in, 1, a), param(g, "shift", 1, 3, 0, 0, 0)};
    wf_op_attrs none;
    memset(&none, 0, sizeof none);
    return wf_graph_op1(g, WF_OP_ADD, "shifted", sum, 2, &none);
}

static int b_expand(wf_graph *g, wf_op_attrs *a)
{
    int in[1] = {param(g, "x", 2, 1, 3, 0, 0)};
    a->ndim = 3;
    a->shape[0] = 2;
    a->shape[1] = 4;
    a->shape[2] = 3;
    return op_out(g, WF_OP_EXPAND, in, 1, a);
}

static const builder BUILDERS[WF_OP_COUNT] = {
    [WF_OP_MATMUL] = b_matmul,
    [WF_OP_BATCH_MATMUL] = b_batch_matmul,
    [WF_OP_LINEAR] = b_linear,
    [WF_OP_BIAS_ADD] = b_bias_add,
    [WF_OP_ADD] = b_add,
    [WF_OP_MUL] = b_mul,
    [WF_OP_RELU] = b_relu,
    [WF_OP_GELU] = b_gelu,
    [WF_OP_SILU] = b_silu,
    [WF_OP_DROPOUT] = b_dropout,
    [WF_OP_LAYERNORM] = b_layernorm,
    [WF_OP_RMSNORM] = b_rmsnorm,
    [WF_OP_SOFTMAX] = b_softmax,
    [WF_OP_ATTENTION] = b_attention,
    [WF_OP_EMBEDDING] = b_embedding,
    [WF_OP_ROTARY] = b_rotary,
    [WF_OP_CROSS_ENTROPY] = b_cross_entropy,
    [WF_OP_CONV2D] = b_conv2d,
    [WF_OP_MAXPOOL] = b_maxpool,
    [WF_OP_AVGPOOL] = b_avgpool,
    [WF_OP_GLOBAL_AVGPOOL] = b_global_avgpool,
    [WF_OP_BATCHNORM] = b_batchnorm,
    [WF_OP_RESHAPE] = b_reshape,
    [WF_OP_TRANSPOSE] = b_transpose,
    [WF_OP_FLATTEN] = b_flatten,
    [WF_OP_CONCAT] = b_concat,
    [WF_OP_SPLIT] = b_split,
    [WF_OP_ROUTER] = b_router,
    [WF_OP_MOE_DISPATCH] = b_moe_dispatch,
    [WF_OP_GROUPED_MLP] = b_grouped_mlp,
    [WF_OP_MOE_COMBINE] = b_moe_combine,
    [WF_OP_TANH] = b_tanh,
    [WF_OP_CLIP] = b_clip,
    [WF_OP_HARDSWISH] = b_hardswish,
    [WF_OP_CAST] = b_cast,
    [WF_OP_EXPAND] = b_expand,
    [WF_OP_SIGMOID] = b_sigmoid,
    [WF_OP_ROLL] = b_roll,
};

/* Kinds the runtime has no kernel for, with the reason; wf_exec_create must
 * refuse each (today every kind runs, so the list is empty). */
static const struct {
    wf_op_kind kind;
    const char *reason;
} NO_KERNEL[] = {
    {WF_OP_COUNT, NULL}, /* end */
};

static int listed_no_kernel(wf_op_kind k)
{
    for (size_t i = 0; NO_KERNEL[i].kind != WF_OP_COUNT; i++)
        if (NO_KERNEL[i].kind == k)
            return 1;
    return 0;
}

/* The graph of kind k with its loss; 0 when the builder failed. */
static int build(wf_op_kind k, wf_graph *g)
{
    wf_graph_init(g, wf_op_name(k));
    /* The batch axis the executor sizes dropout streams by: one sample. */
    int64_t one[1] = {1};
    wf_graph_add_tensor(g, "ids", WF_DTYPE_INT32, WF_ROLE_INPUT, 1, one);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    int y = BUILDERS[k](g, &a);
    if (y >= 0) {
        wf_op_attrs r;
        memset(&r, 0, sizeof r);
        r.ndim = 2;
        r.shape[0] = 1;
        r.shape[1] = -1;
        int row = wf_graph_op1(g, WF_OP_RESHAPE, "row", &y, 1, &r);
        int64_t s[1] = {1};
        int in[2] = {row, wf_graph_add_tensor(g, "label", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, s)};
        wf_op_attrs c;
        memset(&c, 0, sizeof c);
        wf_graph_add_op(g, WF_OP_CROSS_ENTROPY, "loss", in, 2, &c);
    }
    return g->status == WF_OK && wf_graph_validate(g) == WF_OK;
}

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Integer inputs: token ids below the table's rows; expert ids two distinct
 * experts per token (of the op's E); labels below the logits' width; other
 * integers small counts. Parameters: uniform in [-1, 1) (norm scales around 1). */
static void fill(wf_exec *e)
{
    const wf_graph *g = wf_exec_graph(e);
    for (int t = 0; t < g->ntensors; t++) {
        const wf_tensor *x = &g->tensors[t];
        int64_t n = wf_tensor_numel(x);
        if (x->role == WF_ROLE_PARAM) {
            const wf_exec_param *p = wf_exec_param_at(e, wf_exec_param_of_tensor(e, t));
            int scale = strcmp(x->name, "gamma") == 0;
            for (int64_t i = 0; i < n; i++)
                p->data[i] = (float)((double)(mix((uint64_t)t * 7919u + (uint64_t)i) >> 11) / 9007199254740992.0 * 2.0 -
                                     1.0) * 0.5f + (float)scale;
            continue;
        }
        if (x->role != WF_ROLE_INPUT && x->role != WF_ROLE_LABEL)
            continue;
        int32_t *d = wf_exec_leaf_data(e, t);
        assert_non_null(d);
        int64_t bound = 3;
        for (int o = 0; o < g->nfwd; o++) {
            const wf_op *op = &g->ops[o];
            if (op->kind == WF_OP_EMBEDDING && op->in[0] == t)
                bound = g->tensors[op->in[1]].shape[0];
            if (op->kind == WF_OP_CROSS_ENTROPY && op->in[1] == t) {
                const wf_tensor *l = &g->tensors[op->in[0]];
                bound = l->shape[l->ndim - 1];
            }
        }
        int experts = strcmp(x->name, "experts") == 0;
        for (int64_t i = 0; i < n; i++) {
            uint64_t r = mix((uint64_t)t * 104729u + (uint64_t)i);
            if (experts) /* token i/2's two choices: e and e+1 (mod 4), never equal */
                d[i] = (int32_t)(((i / 2) + (i % 2)) % 4);
            else
                d[i] = (int32_t)(r % (uint64_t)bound);
        }
    }
}

static wf_exec *exec_of(const wf_graph *g, int reference, wf_status *st)
{
    wf_exec_opts o = {reference, 5};
    wf_exec *e = NULL;
    *st = wf_exec_create(g, &o, &e);
    if (*st == WF_OK) {
        fill(e);
        wf_exec_set_stream(e, 2, 0);
    }
    return e;
}

static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* Fast against reference, and reference backward against finite differences;
 * returns the number of failed checks (each printed). */
static int check_kind(wf_op_kind k, int *fd_checked)
{
    const char *name = wf_op_name(k);
    wf_graph g;
    if (!build(k, &g)) {
        fprintf(stderr, "%s: the test's graph does not build: %s\n", name, wf_last_error());
        wf_graph_free(&g);
        return 1;
    }
    wf_status sf, sr;
    wf_exec *fast = exec_of(&g, 0, &sf), *ref = exec_of(&g, 1, &sr);
    wf_graph_free(&g);
    int bad = 0;
    if (listed_no_kernel(k)) {
        if (sf == WF_OK || sr == WF_OK) {
            fprintf(stderr, "%s: listed in NO_KERNEL, but the runtime runs it\n", name);
            bad++;
        }
        wf_exec_free(fast);
        wf_exec_free(ref);
        return bad;
    }
    if (sf != WF_OK || sr != WF_OK) {
        fprintf(stderr, "%s: the runtime refuses it (%s): list it in NO_KERNEL with the reason\n", name,
                wf_last_error());
        wf_exec_free(fast);
        wf_exec_free(ref);
        return 1;
    }
    float lf = 0, lr = 0;
    assert_int_equal(wf_exec_forward(fast, &lf), WF_OK);
    assert_int_equal(wf_exec_forward(ref, &lr), WF_OK);
    assert_int_equal(wf_exec_backward(fast, 0), WF_OK);
    assert_int_equal(wf_exec_backward(ref, 0), WF_OK);
    if (!isfinite(lr) || fabs((double)lf - lr) > 1e-5 * fmax(1.0, fabs((double)lr))) {
        fprintf(stderr, "%s: loss %.9g fast, %.9g reference\n", name, (double)lf, (double)lr);
        bad++;
    }
    int np = wf_exec_nparams(ref);
    for (int i = 0; i < np; i++) {
        const wf_exec_param *pf = wf_exec_param_at(fast, i), *pr = wf_exec_param_at(ref, i);
        double d = rel_diff(pf->grad, pr->grad, pr->numel);
        if (d > 1e-5) {
            fprintf(stderr, "%s: gradient of %s: fast vs reference relative %.3g\n", name, pr->name, d);
            bad++;
        }
    }
    /* Central differences on the reference path. */
    const float eps = 1e-3f;
    for (int i = 0; i < np; i++) {
        const wf_exec_param *p = wf_exec_param_at(ref, i);
        int64_t best = 0;
        for (int64_t j = 1; j < p->numel; j++)
            if (fabsf(p->grad[j]) > fabsf(p->grad[best]))
                best = j;
        int64_t picks[2] = {best, (int64_t)(mix((uint64_t)i + 17u) % (uint64_t)p->numel)};
        float gk[2] = {p->grad[picks[0]], p->grad[picks[1]]};
        for (int q = 0; q < 2; q++) {
            float *w = &p->data[picks[q]];
            float keep = *w, lp = 0, lm = 0;
            *w = keep + eps;
            assert_int_equal(wf_exec_forward(ref, &lp), WF_OK);
            *w = keep - eps;
            assert_int_equal(wf_exec_forward(ref, &lm), WF_OK);
            *w = keep;
            double fd = ((double)lp - lm) / (2.0 * (double)eps);
            double tol = 3e-2 * fmax(fabs(fd), fabs((double)gk[q])) + 4e-7 * fabs((double)lr) / (double)eps + 1e-6;
            (*fd_checked)++;
            if (fabs(fd - gk[q]) > tol) {
                fprintf(stderr, "%s: %s[%lld]: backward %.6g, finite difference %.6g\n", name, p->name,
                        (long long)picks[q], (double)gk[q], fd);
                bad++;
            }
        }
    }
    wf_exec_free(fast);
    wf_exec_free(ref);
    return bad;
}

static void test_every_op_kind(void **state)
{
    (void)state;
    int bad = 0, fd_checked = 0, ran = 0;
    for (int k = 0; k < WF_OP_COUNT; k++) {
        if (!BUILDERS[k]) {
            fprintf(stderr, "%s: no case in this test (add a builder to BUILDERS)\n", wf_op_name((wf_op_kind)k));
            bad++;
            continue;
        }
        int b = check_kind((wf_op_kind)k, &fd_checked);
        bad += b;
        ran += !listed_no_kernel((wf_op_kind)k);
    }
    /* Every graph has a float parameter: two differences each at least. */
    fprintf(stderr, "%d op kinds run, %d finite differences\n", ran, fd_checked);
    assert_true(fd_checked >= 2 * ran);
    assert_int_equal(bad, 0);
}

/* A kind missing from the builder table is a failure, not a skip (named by
 * the check above); every NO_KERNEL row gives its reason. */
static void test_table_is_complete(void **state)
{
    (void)state;
    int missing = 0;
    for (int k = 0; k < WF_OP_COUNT; k++)
        missing += BUILDERS[k] == NULL;
    assert_int_equal(missing, 0);
    for (size_t i = 0; NO_KERNEL[i].kind != WF_OP_COUNT; i++)
        assert_non_null(NO_KERNEL[i].reason);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_complete),
        cmocka_unit_test(test_every_op_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
