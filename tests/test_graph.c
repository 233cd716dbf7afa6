/* Graph IR: shape inference of every op, named errors and sticky building,
 * FLOPs against closed forms, the Korthikanti saved-bytes identity of a GPT
 * layer, validation of malformed graphs, and autodiff's structure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "weft/graph.h"

/* ---- helpers ---------------------------------------------------------------------- */

static int leaf(wf_graph *g, const char *name, wf_dtype dt, wf_role role, int ndim, int64_t d0,
                int64_t d1, int64_t d2, int64_t d3)
{
    int64_t s[4] = {d0, d1, d2, d3};
    return wf_graph_add_tensor(g, name, dt, role, ndim, s);
}
#define IN(g, n, ...) leaf(g, n, WF_DTYPE_FP32, WF_ROLE_INPUT, __VA_ARGS__)
#define PARAM(g, n, ...) leaf(g, n, WF_DTYPE_FP32, WF_ROLE_PARAM, __VA_ARGS__)

static void assert_shape(const wf_graph *g, int t, int ndim, int64_t d0, int64_t d1, int64_t d2,
                         int64_t d3)
{
    assert_true(t >= 0);
    const wf_tensor *x = &g->tensors[t];
    int64_t d[4] = {d0, d1, d2, d3};
    assert_int_equal(x->ndim, ndim);
    for (int i = 0; i < ndim && i < 4; i++)
        assert_int_equal(x->shape[i], d[i]);
}

static int op1(wf_graph *g, wf_op_kind k, const char *name, int a, int b, int c,
               const wf_op_attrs *attr)
{
    int in[3] = {a, b, c};
    int n = b < 0 ? 1 : c < 0 ? 2 : 3;
    return wf_graph_op1(g, k, name, in, n, attr);
}

static wf_op_attrs attrs(void)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    return a;
}

/* ---- helpers and tables ------------------------------------------------------------ */

static void test_helpers(void **state)
{
    (void)state;
    assert_int_equal(wf_dtype_bytes(WF_DTYPE_FP32), 4);
    assert_int_equal(wf_dtype_bytes(WF_DTYPE_FP16), 2);
    assert_int_equal(wf_dtype_bytes(WF_DTYPE_BF16), 2);
    assert_int_equal(wf_dtype_bytes(WF_DTYPE_INT64), 8);
    assert_int_equal(wf_dtype_bytes(WF_DTYPE_U8), 1);
    for (int t = 0; t < WF_DTYPE_COUNT; t++) {
        wf_dtype back;
        assert_int_equal(wf_dtype_parse(wf_dtype_name((wf_dtype)t), &back), WF_OK);
        assert_int_equal(back, t);
    }
    wf_dtype d;
    assert_int_equal(wf_dtype_parse("bfloat16", &d), WF_OK);
    assert_int_equal(d, WF_DTYPE_BF16);
    assert_int_equal(wf_dtype_parse("fp8", &d), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "fp8"));

    for (int k = 0; k < WF_OP_COUNT; k++) {
        wf_op_kind back;
        assert_int_equal(wf_op_parse(wf_op_name((wf_op_kind)k), &back), WF_OK);
        assert_int_equal(back, k);
    }
    wf_op_kind k;
    assert_int_equal(wf_op_parse("convolution", &k), WF_INVAL);
    assert_true(wf_op_is_matrix(WF_OP_MATMUL));
    assert_true(wf_op_is_matrix(WF_OP_ATTENTION));
    assert_true(wf_op_is_matrix(WF_OP_CONV2D));
    assert_false(wf_op_is_matrix(WF_OP_GELU));

    wf_tensor t;
    memset(&t, 0, sizeof t);
    t.ndim = 3;
    t.shape[0] = 2;
    t.shape[1] = 3;
    t.shape[2] = 4;
    t.dtype = WF_DTYPE_FP16;
    char buf[64];
    assert_string_equal(wf_shape_str(&t, buf, sizeof buf), "[2,3,4]");
    assert_int_equal(wf_tensor_numel(&t), 24);
    assert_int_equal(wf_tensor_bytes(&t), 48);
    t.ndim = 0;
    assert_string_equal(wf_shape_str(&t, buf, sizeof buf), "[]");
    assert_int_equal(wf_tensor_numel(&t), 1);
}

/* ---- shape inference of every op ----------------------------------------------------- */

static void test_shapes_matrix_ops(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "shapes");
    wf_op_attrs a = attrs();
    int A = IN(&g, "A", 2, 4, 3, 0, 0), At = IN(&g, "At", 2, 3, 4, 0, 0);
    int B = PARAM(&g, "B", 2, 3, 5, 0, 0), Bt = PARAM(&g, "Bt", 2, 5, 3, 0, 0);
    assert_shape(&g, op1(&g, WF_OP_MATMUL, "mm", A, B, -1, &a), 2, 4, 5, 0, 0);
    a.trans_a = 1;
    assert_shape(&g, op1(&g, WF_OP_MATMUL, "mm_ta", At, B, -1, &a), 2, 4, 5, 0, 0);
    a.trans_b = 1;
    assert_shape(&g, op1(&g, WF_OP_MATMUL, "mm_tab", At, Bt, -1, &a), 2, 4, 5, 0, 0);

    a = attrs();
    int64_t sa[4] = {2, 7, 4, 3}, sb[4] = {2, 7, 3, 5};
    int BA = wf_graph_add_tensor(&g, "BA", WF_DTYPE_FP32, WF_ROLE_INPUT, 4, sa);
    int BB = wf_graph_add_tensor(&g, "BB", WF_DTYPE_FP32, WF_ROLE_INPUT, 4, sb);
    assert_shape(&g, op1(&g, WF_OP_BATCH_MATMUL, "bmm", BA, BB, -1, &a), 4, 2, 7, 4, 5);

    int x = IN(&g, "x", 3, 2, 3, 8, 0), W = PARAM(&g, "W", 2, 8, 16, 0, 0);
    int b = PARAM(&g, "b", 1, 16, 0, 0, 0);
    int y = op1(&g, WF_OP_LINEAR, "lin", x, W, b, NULL);
    assert_shape(&g, y, 3, 2, 3, 16, 0);
    assert_int_equal(g.tensors[y].role, WF_ROLE_ACT);
    assert_int_equal(g.tensors[y].producer, g.nops - 1);
    assert_string_equal(g.tensors[y].name, "lin");
    assert_shape(&g, op1(&g, WF_OP_LINEAR, "lin_nb", x, W, -1, NULL), 3, 2, 3, 16, 0);

    int img = IN(&g, "img", 4, 2, 3, 32, 32), cw = PARAM(&g, "cw", 4, 8, 3, 3, 3);
    int cb = PARAM(&g, "cb", 1, 8, 0, 0, 0);
    a = attrs();
    a.pad[0] = a.pad[1] = 1;
    assert_shape(&g, op1(&g, WF_OP_CONV2D, "conv", img, cw, cb, &a), 4, 2, 8, 32, 32);
    a.stride[0] = a.stride[1] = 2;
    int c2 = op1(&g, WF_OP_CONV2D, "conv_s2", img, cw, -1, &a);
    assert_shape(&g, c2, 4, 2, 8, 16, 16);
    int gw = PARAM(&g, "gw", 4, 8, 2, 3, 3);
    a = attrs();
    a.groups = 4;
    a.pad[0] = a.pad[1] = 1;
    assert_shape(&g, op1(&g, WF_OP_CONV2D, "conv_g", c2, gw, -1, &a), 4, 2, 8, 16, 16);
    int w7 = PARAM(&g, "w7", 4, 4, 3, 7, 5);
    a = attrs();
    a.stride[0] = 2;
    a.stride[1] = 3;
    a.pad[0] = 3;
    /* Ho = (32 + 6 - 7)/2 + 1 = 16; Wo = (32 - 5)/3 + 1 = 10 */
    assert_shape(&g, op1(&g, WF_OP_CONV2D, "conv_rect", img, w7, -1, &a), 4, 2, 4, 16, 10);
    assert_int_equal(g.status, WF_OK);
    wf_graph_free(&g);
}

static void test_shapes_elementwise_and_norms(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "shapes");
    int x = IN(&g, "x", 3, 2, 3, 16, 0);
    int b = PARAM(&g, "b", 1, 16, 0, 0, 0), b2 = PARAM(&g, "b2", 2, 3, 16, 0, 0);
    int be = PARAM(&g, "beta", 1, 16, 0, 0, 0);
    wf_op_attrs a = attrs();
    assert_shape(&g, op1(&g, WF_OP_BIAS_ADD, "ba", x, b, -1, NULL), 3, 2, 3, 16, 0);
    assert_shape(&g, op1(&g, WF_OP_ADD, "add", x, x, -1, NULL), 3, 2, 3, 16, 0);
    assert_shape(&g, op1(&g, WF_OP_ADD, "add_bc", x, b2, -1, NULL), 3, 2, 3, 16, 0);
    assert_shape(&g, op1(&g, WF_OP_MUL, "mul", x, b, -1, NULL), 3, 2, 3, 16, 0);
    a.scale = 0.5;
    assert_shape(&g, op1(&g, WF_OP_MUL, "scale", x, -1, -1, &a), 3, 2, 3, 16, 0);
    assert_shape(&g, op1(&g, WF_OP_RELU, "relu", x, -1, -1, NULL), 3, 2, 3, 16, 0);
    assert_shape(&g, op1(&g, WF_OP_GELU, "gelu", x, -1, -1, NULL), 3, 2, 3, 16, 0);
    assert_shape(&g, op1(&g, WF_OP_SILU, "silu", x, -1, -1, NULL), 3, 2, 3, 16, 0);
    a = attrs();
    a.p = 0.1;
    assert_shape(&g, op1(&g, WF_OP_DROPOUT, "drop", x, -1, -1, &a), 3, 2, 3, 16, 0);
    a = attrs();
    a.eps = 1e-5;
    assert_shape(&g, op1(&g, WF_OP_LAYERNORM, "ln", x, b, be, &a), 3, 2, 3, 16, 0);
    assert_shape(&g, op1(&g, WF_OP_RMSNORM, "rms", x, b, -1, &a), 3, 2, 3, 16, 0);
    assert_shape(&g, op1(&g, WF_OP_SOFTMAX, "sm", x, -1, -1, NULL), 3, 2, 3, 16, 0);
    a = attrs();
    a.heads = 4; /* head dim 4 (even) */
    assert_shape(&g, op1(&g, WF_OP_ROTARY, "rope", x, -1, -1, &a), 3, 2, 3, 16, 0);

    int img = IN(&g, "img", 4, 2, 8, 16, 16);
    int gam = PARAM(&g, "gam", 1, 8, 0, 0, 0), bet = PARAM(&g, "bet", 1, 8, 0, 0, 0);
    assert_shape(&g, op1(&g, WF_OP_BATCHNORM, "bn", img, gam, bet, &a), 4, 2, 8, 16, 16);
    a = attrs();
    a.kernel[0] = a.kernel[1] = 2;
    assert_shape(&g, op1(&g, WF_OP_MAXPOOL, "mp", img, -1, -1, &a), 4, 2, 8, 8, 8);
    a.kernel[0] = a.kernel[1] = 3;
    a.stride[0] = a.stride[1] = 2;
    a.pad[0] = a.pad[1] = 1;
    /* (16 + 2 - 3)/2 + 1 = 8 */
    assert_shape(&g, op1(&g, WF_OP_AVGPOOL, "ap", img, -1, -1, &a), 4, 2, 8, 8, 8);
    assert_shape(&g, op1(&g, WF_OP_GLOBAL_AVGPOOL, "gap", img, -1, -1, NULL), 2, 2, 8, 0, 0);
    assert_int_equal(g.status, WF_OK);
    wf_graph_free(&g);
}

static void test_shapes_transformer_ops(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "shapes");
    int ids = leaf(&g, "ids", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, 2, 10, 0, 0);
    int tab = leaf(&g, "tab", WF_DTYPE_FP16, WF_ROLE_PARAM, 2, 100, 64, 0, 0);
    int e = op1(&g, WF_OP_EMBEDDING, "emb", ids, tab, -1, NULL);
    assert_shape(&g, e, 3, 2, 10, 64, 0);
    assert_int_equal(g.tensors[e].dtype, WF_DTYPE_FP16);

    /* Grouped-query attention: 8 query heads of dim 8, 2 kv heads. */
    int q = leaf(&g, "q", WF_DTYPE_FP16, WF_ROLE_INPUT, 3, 2, 10, 64, 0);
    int kv = leaf(&g, "kv", WF_DTYPE_FP16, WF_ROLE_INPUT, 3, 2, 10, 16, 0);
    wf_op_attrs a = attrs();
    a.heads = 8;
    a.kv_heads = 2;
    a.causal = 1;
    int at = op1(&g, WF_OP_ATTENTION, "attn", q, kv, kv, &a);
    assert_shape(&g, at, 3, 2, 10, 64, 0);
    assert_int_equal(g.tensors[at].dtype, WF_DTYPE_FP16);
    a.kv_heads = 0; /* = heads: k, v must be as wide as q */
    assert_shape(&g, op1(&g, WF_OP_ATTENTION, "mha", q, q, q, &a), 3, 2, 10, 64, 0);

    int logits = leaf(&g, "logits", WF_DTYPE_FP16, WF_ROLE_INPUT, 3, 2, 10, 100, 0);
    int lab = leaf(&g, "lab", WF_DTYPE_INT64, WF_ROLE_LABEL, 2, 2, 10, 0, 0);
    int loss = op1(&g, WF_OP_CROSS_ENTROPY, "ce", logits, lab, -1, NULL);
    assert_int_equal(g.tensors[loss].ndim, 0);
    assert_int_equal(g.tensors[loss].dtype, WF_DTYPE_FP16);
    assert_int_equal(g.loss, loss); /* the first cross-entropy becomes the loss */
    assert_int_equal(g.status, WF_OK);
    wf_graph_free(&g);
}

static void test_shapes_layout_ops(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "shapes");
    int x = IN(&g, "x", 4, 2, 8, 4, 4);
    wf_op_attrs a = attrs();
    a.ndim = 2;
    a.shape[0] = 2;
    a.shape[1] = -1;
    assert_shape(&g, op1(&g, WF_OP_RESHAPE, "rs", x, -1, -1, &a), 2, 2, 128, 0, 0);
    a.ndim = 3;
    a.shape[0] = 4;
    a.shape[1] = 4;
    a.shape[2] = 16;
    assert_shape(&g, op1(&g, WF_OP_RESHAPE, "rs3", x, -1, -1, &a), 3, 4, 4, 16, 0);
    a = attrs();
    a.perm[0] = 2;
    a.perm[1] = 0;
    a.perm[2] = 3;
    a.perm[3] = 1;
    assert_shape(&g, op1(&g, WF_OP_TRANSPOSE, "tr", x, -1, -1, &a), 4, 4, 2, 4, 8);
    a = attrs();
    assert_shape(&g, op1(&g, WF_OP_FLATTEN, "fl", x, -1, -1, &a), 2, 2, 128, 0, 0);
    a.axis = 2;
    assert_shape(&g, op1(&g, WF_OP_FLATTEN, "fl2", x, -1, -1, &a), 3, 2, 8, 16, 0);

    int c1 = IN(&g, "c1", 2, 2, 3, 0, 0), c2 = IN(&g, "c2", 2, 2, 5, 0, 0);
    a = attrs();
    a.axis = 1;
    assert_shape(&g, op1(&g, WF_OP_CONCAT, "cat", c1, c2, -1, &a), 2, 2, 8, 0, 0);
    a.axis = -1;
    assert_shape(&g, op1(&g, WF_OP_CONCAT, "cat3", c1, c2, c1, &a), 2, 2, 11, 0, 0);

    int s = IN(&g, "s", 3, 2, 5, 12, 0);
    a = attrs();
    a.axis = -1;
    a.nsplit = 3;
    int op = wf_graph_add_op(&g, WF_OP_SPLIT, "qkv", &s, 1, &a);
    assert_true(op >= 0);
    assert_int_equal(g.ops[op].nout, 3);
    for (int i = 0; i < 3; i++)
        assert_shape(&g, wf_graph_op_output(&g, op, i), 3, 2, 5, 4, 0);
    assert_string_equal(g.tensors[wf_graph_op_output(&g, op, 2)].name, "qkv.2");
    assert_int_equal(wf_graph_op_output(&g, op, 3), -1);
    assert_int_equal(wf_graph_op_output(&g, -1, 0), -1);
    a.nsplit = 2;
    a.sizes[0] = 2;
    a.sizes[1] = 10;
    op = wf_graph_add_op(&g, WF_OP_SPLIT, "uneven", &s, 1, &a);
    assert_shape(&g, wf_graph_op_output(&g, op, 0), 3, 2, 5, 2, 0);
    assert_shape(&g, wf_graph_op_output(&g, op, 1), 3, 2, 5, 10, 0);
    assert_int_equal(g.status, WF_OK);
    wf_graph_free(&g);
}

/* ---- errors ---------------------------------------------------------------------- */

static void test_named_errors_and_sticky(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "bad");
    int x = IN(&g, "x", 3, 2, 128, 768, 0), W = PARAM(&g, "W", 2, 1024, 3072, 0, 0);
    wf_graph_set_block(&g, 0, 0);
    assert_int_equal(op1(&g, WF_OP_LINEAR, "blk0.fc1", x, W, -1, NULL), -1);
    assert_string_equal(wf_last_error(),
                        "op 'blk0.fc1' (linear): input 0 has 768 features but weight expects 1024");
    assert_int_equal(g.status, WF_INVAL);
    /* Sticky: later calls do nothing and return -1. */
    int nt = g.ntensors, no = g.nops;
    assert_int_equal(IN(&g, "y", 1, 4, 0, 0, 0), -1);
    assert_int_equal(op1(&g, WF_OP_RELU, "r", x, -1, -1, NULL), -1);
    assert_int_equal(g.ntensors, nt);
    assert_int_equal(g.nops, no);
    assert_int_not_equal(wf_graph_validate(&g), WF_OK);
    wf_graph_free(&g);

    /* One bad case per check: each message names the op and the reason. */
    static const struct {
        const char *what;
    } cases[] = {{"suffix"}, {"ids"}, {"kv_heads"}, {"reshape"}, {"split"}, {"inputs"},
                 {"perm"},   {"labels"}, {"groups"}, {"tensor"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        wf_graph_init(&g, "bad");
        int a = IN(&g, "a", 3, 2, 3, 16, 0), b = IN(&g, "b", 2, 4, 16, 0, 0);
        wf_op_attrs at = attrs();
        int r = 0;
        const char *want = NULL;
        switch (c) {
        case 0:
            r = op1(&g, WF_OP_ADD, "res", a, b, -1, NULL);
            want = "op 'res' (add): input 1 shape [4,16] is not a suffix of input 0 shape [2,3,16]";
            break;
        case 1: {
            int t = PARAM(&g, "t", 2, 10, 16, 0, 0);
            r = op1(&g, WF_OP_EMBEDDING, "emb", a, t, -1, NULL);
            want = "op 'emb' (embedding): ids (input 0 'a') have dtype fp32";
            break;
        }
        case 2:
            at.heads = 4;
            at.kv_heads = 3;
            r = op1(&g, WF_OP_ATTENTION, "attn", a, a, a, &at);
            want = "op 'attn' (attention): kv_heads=3 does not divide heads=4";
            break;
        case 3:
            at.ndim = 2;
            at.shape[0] = 5;
            at.shape[1] = -1;
            r = op1(&g, WF_OP_RESHAPE, "rs", a, -1, -1, &at);
            want = "op 'rs' (reshape): cannot reshape [2,3,16]";
            break;
        case 4:
            at.nsplit = 3;
            at.axis = 2;
            r = wf_graph_add_op(&g, WF_OP_SPLIT, "sp", &a, 1, &at);
            want = "op 'sp' (split): dim 2 of [2,3,16] is 16, not divisible into 3 equal parts";
            break;
        case 5:
            r = op1(&g, WF_OP_LAYERNORM, "ln", a, b, -1, NULL);
            want = "op 'ln' (layernorm): takes 3 inputs, got 2";
            break;
        case 6:
            r = op1(&g, WF_OP_TRANSPOSE, "tr", a, -1, -1, &at);
            want = "op 'tr' (transpose): perm is not a permutation";
            break;
        case 7: {
            int l = leaf(&g, "l", WF_DTYPE_INT32, WF_ROLE_LABEL, 2, 2, 4, 0, 0);
            r = op1(&g, WF_OP_CROSS_ENTROPY, "ce", a, l, -1, NULL);
            want = "op 'ce' (cross_entropy): labels shape [2,4] does not match";
            break;
        }
        case 8: {
            int img = IN(&g, "img", 4, 1, 6, 8, 8), w = PARAM(&g, "w", 4, 4, 3, 3, 3);
            at.groups = 4;
            r = op1(&g, WF_OP_CONV2D, "conv", img, w, -1, &at);
            want = "op 'conv' (conv2d): groups=4 does not divide input channels 6";
            break;
        }
        case 9:
            r = IN(&g, "neg", 2, 4, -1, 0, 0);
            want = "tensor 'neg': dimension 1 is -1";
            break;
        }
        assert_int_equal(r, -1);
        assert_int_equal(g.status, WF_INVAL);
        if (strncmp(wf_last_error(), want, strlen(want)) != 0)
            fail_msg("case %s: got '%s', want prefix '%s'", cases[c].what, wf_last_error(), want);
        wf_graph_free(&g);
    }
}

/* ---- FLOPs ------------------------------------------------------------------------- */

static void test_flops_matmul_conv(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "flops");
    const double M = 64, K = 48, N = 80;
    int x = IN(&g, "x", 2, 64, 48, 0, 0), W = PARAM(&g, "W", 2, 48, 80, 0, 0);
    int bias = PARAM(&g, "bias", 1, 80, 0, 0, 0);
    wf_op_cost c;
    /* matmul with a parameter: the input needs no gradient (x is an INPUT). */
    int o = wf_graph_add_op(&g, WF_OP_MATMUL, "mm", (int[]){x, W}, 2, NULL);
    wf_op_cost_of(&g, o, &c);
    assert_float_equal(c.fwd_flops, 2 * M * N * K, 0);
    assert_float_equal(c.bwd_w_flops, 2 * M * N * K, 0);
    assert_float_equal(c.bwd_in_flops, 0, 0);
    assert_float_equal(c.params, K * N, 0);
    assert_float_equal(c.fwd_bytes, 4 * (M * K + K * N + M * N), 0);
    assert_float_equal(c.saved_bytes, 4 * M * K, 0);

    /* linear with bias on an activation: input grad, weight grad and bias. */
    int h = wf_graph_op_output(&g, o, 0);
    int W2 = PARAM(&g, "W2", 2, 80, 48, 0, 0), b2 = PARAM(&g, "b2", 1, 48, 0, 0, 0);
    o = wf_graph_add_op(&g, WF_OP_LINEAR, "lin", (int[]){h, W2, b2}, 3, NULL);
    wf_op_cost_of(&g, o, &c);
    assert_float_equal(c.fwd_flops, 2 * M * K * N + M * K, 0);
    assert_float_equal(c.bwd_in_flops, 2 * M * K * N, 0);
    assert_float_equal(c.bwd_w_flops, 2 * M * K * N + M * K, 0);
    assert_float_equal(c.params, N * K + K, 0);
    (void)bias;

    /* matmul of two activations: both gradients are input gradients. */
    int h2 = wf_graph_op_output(&g, o, 0); /* [64,48] */
    wf_op_attrs ta = attrs();
    ta.trans_b = 1;
    o = wf_graph_add_op(&g, WF_OP_MATMUL, "hh", (int[]){h2, h2}, 2, &ta); /* [64,64] */
    wf_op_cost_of(&g, o, &c);
    assert_float_equal(c.fwd_flops, 2 * M * M * K, 0);
    assert_float_equal(c.bwd_in_flops, 2 * 2 * M * M * K, 0);
    assert_float_equal(c.bwd_w_flops, 0, 0);
    assert_float_equal(c.saved_bytes, 2 * 4 * M * K, 0); /* each operand once per use */

    /* batched matmul: batch x 2MNK */
    int qa = IN(&g, "qa", 3, 6, 32, 16, 0), kb = PARAM(&g, "kb", 3, 6, 16, 24, 0);
    o = wf_graph_add_op(&g, WF_OP_BATCH_MATMUL, "bmm", (int[]){qa, kb}, 2, NULL);
    wf_op_cost_of(&g, o, &c);
    assert_float_equal(c.fwd_flops, 6.0 * 2 * 32 * 24 * 16, 0);

    /* conv2d: 2*N*O*Ho*Wo*(C/g)*KH*KW, grouped. */
    int img = IN(&g, "img", 4, 4, 16, 28, 28), cw = PARAM(&g, "cw", 4, 32, 4, 5, 3);
    wf_op_attrs ca = attrs();
    ca.groups = 4;
    ca.stride[0] = 2;
    ca.pad[1] = 1;
    o = wf_graph_add_op(&g, WF_OP_CONV2D, "conv", (int[]){img, cw}, 2, &ca);
    int co = wf_graph_op_output(&g, o, 0);
    const double Ho = (28 - 5) / 2 + 1, Wo = (28 + 2 - 3) / 1 + 1;
    assert_int_equal(g.tensors[co].shape[2], (int64_t)Ho);
    assert_int_equal(g.tensors[co].shape[3], (int64_t)Wo);
    wf_op_cost_of(&g, o, &c);
    double cf = 2.0 * 4 * 32 * Ho * Wo * (16 / 4) * 5 * 3;
    assert_float_equal(c.fwd_flops, cf, 0);
    assert_float_equal(c.bwd_w_flops, cf, 0);
    assert_float_equal(c.bwd_in_flops, 0, 0);
    assert_float_equal(c.params, 32 * 4 * 5 * 3, 0);
    assert_int_equal(g.status, WF_OK);
    wf_graph_free(&g);
}

static void test_flops_attention_gqa(void **state)
{
    (void)state;
    const int B = 2, S = 64, A = 8, Akv = 2, D = 16;
    for (int p = 0; p < 2; p++) {
        wf_graph g;
        wf_graph_init(&g, "attn");
        int x = leaf(&g, "x", WF_DTYPE_FP16, WF_ROLE_INPUT, 3, B, S, A * D, 0);
        int Wq = leaf(&g, "Wq", WF_DTYPE_FP16, WF_ROLE_PARAM, 2, A * D, A * D, 0, 0);
        int Wkv = leaf(&g, "Wkv", WF_DTYPE_FP16, WF_ROLE_PARAM, 2, A * D, Akv * D, 0, 0);
        int q = op1(&g, WF_OP_LINEAR, "q", x, Wq, -1, NULL);
        int k = op1(&g, WF_OP_LINEAR, "k", x, Wkv, -1, NULL);
        int v = op1(&g, WF_OP_LINEAR, "v", x, Wkv, -1, NULL);
        assert_shape(&g, k, 3, B, S, Akv * D, 0);
        wf_op_attrs a = attrs();
        a.heads = A;
        a.kv_heads = Akv;
        a.causal = 1;
        a.p = p ? 0.1 : 0;
        int o = wf_graph_add_op(&g, WF_OP_ATTENTION, "attn", (int[]){q, k, v}, 3, &a);
        assert_true(o >= 0);
        assert_shape(&g, wf_graph_op_output(&g, o, 0), 3, B, S, A * D, 0);
        wf_op_cost c;
        wf_op_cost_of(&g, o, &c);
        double scores = (double)B * A * S * S; /* full S x S even when causal */
        double fwd = 2 * scores * D + 2 * scores * D + 5 * scores + (p ? 2 * scores : 0);
        assert_float_equal(c.fwd_flops, fwd, 0);
        assert_float_equal(c.bwd_in_flops, 2 * fwd, 0);
        assert_float_equal(c.bwd_w_flops, 0, 0);
        double qkv = 2.0 * B * S * (A * D + 2 * Akv * D);
        double probs = 2 * scores + (p ? 3 * scores : 0);
        assert_float_equal(c.saved_bytes, qkv + probs, 0);
        wf_graph_free(&g);
    }
}

/* ---- the GPT layer identity (Korthikanti et al. 2022) ----------------------------------- */

typedef struct {
    int in, out;
    int h_attn; /* the first residual sum: feeds layernorm 2 and the second add */
} gpt_layer;

static gpt_layer build_gpt_layer(wf_graph *g, int x, int64_t h, int heads, double p, int l)
{
    char n[WF_NAME_LEN];
    wf_dtype dt = WF_DTYPE_FP16;
#define P1(name, d0) (snprintf(n, sizeof n, "l%d." name, l), leaf(g, n, dt, WF_ROLE_PARAM, 1, d0, 0, 0, 0))
#define P2(name, d0, d1) (snprintf(n, sizeof n, "l%d." name, l), leaf(g, n, dt, WF_ROLE_PARAM, 2, d0, d1, 0, 0))
#define NM(name) (snprintf(n, sizeof n, "l%d." name, l), n)
    wf_graph_set_block(g, 0, l);
    wf_op_attrs a = attrs();
    a.eps = 1e-5;
    int ln1 = op1(g, WF_OP_LAYERNORM, NM("ln1"), x, P1("ln1.g", h), P1("ln1.b", h), &a);
    wf_graph_set_tp(g, WF_TP_COL);
    int qkv = op1(g, WF_OP_LINEAR, NM("qkv"), ln1, P2("qkv.w", h, 3 * h), P1("qkv.b", 3 * h), NULL);
    a = attrs();
    a.axis = 2;
    a.nsplit = 3;
    int sp = wf_graph_add_op(g, WF_OP_SPLIT, NM("split"), &qkv, 1, &a);
    wf_graph_set_tp(g, WF_TP_SHARD);
    a = attrs();
    a.heads = heads;
    a.causal = 1;
    a.p = p;
    int at = op1(g, WF_OP_ATTENTION, NM("attn"), wf_graph_op_output(g, sp, 0),
                 wf_graph_op_output(g, sp, 1), wf_graph_op_output(g, sp, 2), &a);
    wf_graph_set_tp(g, WF_TP_ROW);
    int proj = op1(g, WF_OP_LINEAR, NM("proj"), at, P2("proj.w", h, h), P1("proj.b", h), NULL);
    wf_graph_set_tp(g, WF_TP_NONE);
    a = attrs();
    a.p = p;
    int d1 = op1(g, WF_OP_DROPOUT, NM("drop1"), proj, -1, -1, &a);
    int r1 = op1(g, WF_OP_ADD, NM("res1"), x, d1, -1, NULL);
    a = attrs();
    a.eps = 1e-5;
    int ln2 = op1(g, WF_OP_LAYERNORM, NM("ln2"), r1, P1("ln2.g", h), P1("ln2.b", h), &a);
    wf_graph_set_tp(g, WF_TP_COL);
    int fc1 = op1(g, WF_OP_LINEAR, NM("fc1"), ln2, P2("fc1.w", h, 4 * h), P1("fc1.b", 4 * h), NULL);
    wf_graph_set_tp(g, WF_TP_SHARD);
    int ge = op1(g, WF_OP_GELU, NM("gelu"), fc1, -1, -1, NULL);
    wf_graph_set_tp(g, WF_TP_ROW);
    int fc2 = op1(g, WF_OP_LINEAR, NM("fc2"), ge, P2("fc2.w", 4 * h, h), P1("fc2.b", h), NULL);
    wf_graph_set_tp(g, WF_TP_NONE);
    a = attrs();
    a.p = p;
    int d2 = op1(g, WF_OP_DROPOUT, NM("drop2"), fc2, -1, -1, &a);
    int r2 = op1(g, WF_OP_ADD, NM("res2"), r1, d2, -1, NULL);
    wf_graph_set_block(g, -1, -1);
#undef P1
#undef P2
#undef NM
    gpt_layer L = {x, r2, r1};
    return L;
}

static void test_gpt_layer_saved_bytes(void **state)
{
    (void)state;
    const double s = 128, b = 2, h = 256, a = 4;
    wf_graph g;
    wf_graph_init(&g, "gpt-layer");
    int x = leaf(&g, "x", WF_DTYPE_FP16, WF_ROLE_INPUT, 3, 2, 128, 256, 0);
    gpt_layer L = build_gpt_layer(&g, x, 256, 4, 0.1, 0);
    assert_int_equal(g.status, WF_OK);
    assert_shape(&g, L.out, 3, 2, 128, 256, 0);
    wf_graph_totals t;
    wf_graph_totals_of(&g, &t);
    assert_float_equal(t.saved_bytes, 34 * s * b * h + 5 * a * s * s * b, 0);
    assert_float_equal(t.params, 12 * h * h + 13 * h, 0);

    /* Matrix-unit FLOPs of the layer: 24 B s h^2 + 4 B s^2 h (Megatron). */
    double mm = 0;
    for (int i = 0; i < g.nfwd; i++)
        if (wf_op_is_matrix(g.ops[i].kind)) {
            wf_op_cost c;
            wf_op_cost_of(&g, i, &c);
            double bias = g.ops[i].kind == WF_OP_LINEAR && g.ops[i].nin == 3
                              ? (double)wf_tensor_numel(&g.tensors[g.ops[i].out[0]])
                              : 0;
            mm += c.fwd_flops - bias;
            if (g.ops[i].kind == WF_OP_ATTENTION)
                mm -= 5 * a * s * s * b + 2 * a * s * s * b; /* softmax, dropout */
        }
    assert_float_equal(mm, 24 * b * s * h * h + 4 * b * s * s * h, 0);

    /* Stamps: every op of the layer is block 0 layer 0, and the block totals match. */
    for (int i = 0; i < g.nfwd; i++) {
        assert_int_equal(g.ops[i].block, 0);
        assert_int_equal(g.ops[i].layer, 0);
    }
    assert_int_equal(g.ops[1].tp, WF_TP_COL);
    wf_graph_totals tb;
    wf_graph_block_totals_of(&g, 0, 0, &tb);
    assert_float_equal(tb.saved_bytes, t.saved_bytes, 0);
    assert_float_equal(tb.fwd_flops, t.fwd_flops, 0);
    wf_graph_block_totals_of(&g, 0, 1, &tb);
    assert_float_equal(tb.saved_bytes, 0, 0);
    wf_graph_free(&g);

    /* Without dropout: 32 s b h (no masks) + q, k, v, probabilities: 2 a s^2 b. */
    wf_graph_init(&g, "gpt-layer-nodrop");
    x = leaf(&g, "x", WF_DTYPE_FP16, WF_ROLE_INPUT, 3, 2, 128, 256, 0);
    build_gpt_layer(&g, x, 256, 4, 0.0, 0);
    wf_graph_totals_of(&g, &t);
    assert_float_equal(t.saved_bytes, 32 * s * b * h + 2 * a * s * s * b, 0);
    wf_graph_free(&g);

    /* Two layers: exactly twice one layer (the shared residual is saved once). */
    wf_graph_init(&g, "gpt-2layers");
    x = leaf(&g, "x", WF_DTYPE_FP16, WF_ROLE_INPUT, 3, 2, 128, 256, 0);
    L = build_gpt_layer(&g, x, 256, 4, 0.1, 0);
    build_gpt_layer(&g, L.out, 256, 4, 0.1, 1);
    wf_graph_totals_of(&g, &t);
    assert_float_equal(t.saved_bytes, 2 * (34 * s * b * h + 5 * a * s * s * b), 0);
    wf_graph_block_totals_of(&g, 0, 1, &tb);
    assert_float_equal(tb.saved_bytes, 34 * s * b * h + 5 * a * s * s * b, 0);
    wf_graph_free(&g);
}

/* A tensor saved by two ops counts once in the totals. */
static void test_saved_dedup(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "dedup");
    int x = IN(&g, "x", 2, 8, 16, 0, 0);
    int W = PARAM(&g, "W", 2, 16, 16, 0, 0), V = PARAM(&g, "V", 2, 16, 16, 0, 0);
    int y1 = op1(&g, WF_OP_LINEAR, "a", x, W, -1, NULL);
    int y2 = op1(&g, WF_OP_LINEAR, "b", x, V, -1, NULL);
    op1(&g, WF_OP_ADD, "s", y1, y2, -1, NULL);
    wf_graph_totals t;
    wf_graph_totals_of(&g, &t);
    assert_float_equal(t.saved_bytes, 8 * 16 * 4, 0);
    assert_float_equal(t.params, 2 * 16 * 16, 0);
    assert_float_equal(t.fwd_flops, 2 * (2.0 * 8 * 16 * 16) + 8 * 16, 0);
    assert_float_equal(t.bwd_flops, 2 * (2.0 * 8 * 16 * 16), 0);
    wf_graph_free(&g);
}

/* ---- validation -------------------------------------------------------------------- */

static void build_mlp(wf_graph *g)
{
    wf_graph_init(g, "mlp");
    int x = IN(g, "x", 2, 4, 8, 0, 0);
    int lab = leaf(g, "lab", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, 4, 0, 0, 0);
    int W1 = PARAM(g, "W1", 2, 8, 16, 0, 0), b1 = PARAM(g, "b1", 1, 16, 0, 0, 0);
    int W2 = PARAM(g, "W2", 2, 16, 3, 0, 0);
    int h = op1(g, WF_OP_LINEAR, "fc1", x, W1, b1, NULL);
    int r = op1(g, WF_OP_RELU, "relu", h, -1, -1, NULL);
    int o = op1(g, WF_OP_LINEAR, "fc2", r, W2, -1, NULL);
    op1(g, WF_OP_CROSS_ENTROPY, "loss", o, lab, -1, NULL);
}

static void test_validate(void **state)
{
    (void)state;
    wf_graph g;
    build_mlp(&g);
    assert_int_equal(g.status, WF_OK);
    assert_int_equal(wf_graph_validate(&g), WF_OK);

    /* A cycle: fc1 reads relu's output (produced later). */
    int saved = g.ops[0].in[0];
    g.ops[0].in[0] = g.ops[1].out[0];
    assert_int_equal(wf_graph_validate(&g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "op 0 'fc1' (linear)"));
    assert_non_null(strstr(wf_last_error(), "not by an earlier op"));
    g.ops[0].in[0] = saved;
    assert_int_equal(wf_graph_validate(&g), WF_OK);

    /* A double producer: relu also claims fc1's output. */
    int r = g.ops[1].out[0];
    g.ops[1].out[0] = g.ops[0].out[0];
    assert_int_equal(wf_graph_validate(&g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "op 1 'relu' (relu)"));
    assert_non_null(strstr(wf_last_error(), "already produced by op 0 'fc1'"));
    g.ops[1].out[0] = r;
    assert_int_equal(wf_graph_validate(&g), WF_OK);

    /* A shape mismatch: relu's output edited to [4,15]. */
    g.tensors[r].shape[1] = 15;
    assert_int_equal(wf_graph_validate(&g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "op 1 'relu' (relu): output 0 'relu' is fp32 [4,15] "
                                            "but the inputs give fp32 [4,16]"));
    g.tensors[r].shape[1] = 16;

    /* An input/weight mismatch found by re-running inference. */
    g.tensors[2].shape[0] = 9; /* W1 */
    assert_int_equal(wf_graph_validate(&g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "op 'fc1' (linear): input 0 has 8 features but "
                                            "weight expects 9"));
    g.tensors[2].shape[0] = 8;

    /* The loss must be a scalar produced by an op. */
    int loss = g.loss;
    g.loss = r;
    assert_int_equal(wf_graph_validate(&g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "must be a scalar"));
    g.loss = loss;
    assert_int_equal(wf_graph_validate(&g), WF_OK);
    wf_graph_free(&g);
}

/* ---- autodiff ---------------------------------------------------------------------- */

static void test_autodiff_mlp(void **state)
{
    (void)state;
    wf_graph g;
    build_mlp(&g);
    int nfwd = g.nfwd;
    assert_int_equal(wf_graph_autodiff(&g), WF_OK);
    assert_int_equal(g.nfwd, nfwd);
    assert_int_equal(g.nops, 2 * nfwd); /* no tensor used twice */
    assert_int_equal(wf_graph_validate(&g), WF_OK);
    /* Reverse order: loss, fc2, relu, fc1. */
    for (int i = 0; i < nfwd; i++) {
        const wf_op *o = &g.ops[nfwd + i];
        assert_int_equal(o->pass, WF_PASS_BACKWARD);
        assert_int_equal(o->fwd_op, nfwd - 1 - i);
        assert_int_equal(o->kind, g.ops[o->fwd_op].kind);
        assert_int_equal(o->nin, g.ops[o->fwd_op].nout);
        assert_int_equal(o->nout, g.ops[o->fwd_op].nin);
    }
    const wf_op *ce = &g.ops[nfwd], *fc1 = &g.ops[2 * nfwd - 1];
    int seed = g.tensors[g.loss].grad;
    assert_true(seed >= 0);
    assert_int_equal(g.tensors[seed].role, WF_ROLE_GRAD);
    assert_int_equal(g.tensors[seed].producer, -1);
    assert_int_equal(g.tensors[seed].ndim, 0);
    assert_int_equal(ce->in[0], seed);
    assert_int_equal(ce->out[1], -1); /* labels need no gradient */
    assert_int_equal(fc1->out[0], -1); /* x is an input */
    assert_true(fc1->out[1] >= 0 && fc1->out[2] >= 0);
    assert_int_equal(g.tensors[g.ops[0].in[1]].grad, fc1->out[1]);
    assert_int_equal(g.tensors[fc1->out[1]].grad_of, g.ops[0].in[1]);
    assert_int_equal(wf_graph_autodiff(&g), WF_INVAL); /* already differentiated */

    /* Backward ops carry the forward op's backward costs. */
    wf_op_cost fc, bc;
    wf_op_cost_of(&g, 0, &fc);
    wf_op_cost_of(&g, 2 * nfwd - 1, &bc);
    assert_float_equal(bc.fwd_flops, 0, 0);
    assert_float_equal(bc.bwd_w_flops, fc.bwd_w_flops, 0);
    assert_float_equal(bc.bwd_in_flops, fc.bwd_in_flops, 0);
    assert_float_equal(fc.bwd_w_flops, 2.0 * 4 * 8 * 16 + 4 * 16, 0);
    wf_graph_free(&g);

    /* A tensor used twice by one op (h*h): two partials and one accumulation. */
    wf_graph_init(&g, "square");
    int xi = IN(&g, "x", 2, 4, 8, 0, 0), W = PARAM(&g, "W", 2, 8, 3, 0, 0);
    int lab = leaf(&g, "lab", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, 4, 0, 0, 0);
    int hh = op1(&g, WF_OP_LINEAR, "h", xi, W, -1, NULL);
    int sq = op1(&g, WF_OP_MUL, "sq", hh, hh, -1, NULL);
    op1(&g, WF_OP_CROSS_ENTROPY, "loss", sq, lab, -1, NULL);
    assert_int_equal(wf_graph_autodiff(&g), WF_OK);
    assert_int_equal(wf_graph_validate(&g), WF_OK);
    /* loss.bwd, sq.bwd, the sum of h's two partials, h.bwd */
    assert_int_equal(g.nops, 3 + 4);
    const wf_op *mb = &g.ops[4], *acc = &g.ops[5];
    assert_int_equal(mb->fwd_op, 1);
    assert_true(mb->out[0] >= 0 && mb->out[1] >= 0 && mb->out[0] != mb->out[1]);
    assert_int_equal(acc->fwd_op, -1);
    assert_int_equal(acc->kind, WF_OP_ADD);
    assert_int_equal(acc->in[0], mb->out[0]);
    assert_int_equal(acc->in[1], mb->out[1]);
    assert_int_equal(g.tensors[hh].grad, acc->out[0]);
    assert_int_equal(g.ops[6].in[0], acc->out[0]);
    assert_int_equal(g.tensors[W].grad, g.ops[6].out[1]);
    wf_graph_free(&g);

    /* No loss: an error naming the graph. */
    wf_graph_init(&g, "noloss");
    int x = IN(&g, "x", 1, 4, 0, 0, 0);
    op1(&g, WF_OP_RELU, "r", x, -1, -1, NULL);
    assert_int_equal(wf_graph_autodiff(&g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "no loss"));
    wf_graph_free(&g);
}

static void test_autodiff_gpt(void **state)
{
    (void)state;
    wf_graph g;
    wf_graph_init(&g, "gpt");
    const int64_t B = 2, S = 16, H = 32, V = 50;
    int ids = leaf(&g, "ids", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, B, S, 0, 0);
    int lab = leaf(&g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 2, B, S, 0, 0);
    int wte = leaf(&g, "wte", WF_DTYPE_FP16, WF_ROLE_PARAM, 2, V, H, 0, 0);
    int wpe = leaf(&g, "wpe", WF_DTYPE_FP16, WF_ROLE_PARAM, 2, S, H, 0, 0);
    int e = op1(&g, WF_OP_EMBEDDING, "emb", ids, wte, -1, NULL);
    int x = op1(&g, WF_OP_ADD, "pos", e, wpe, -1, NULL);
    gpt_layer L0 = build_gpt_layer(&g, x, H, 4, 0.1, 0);
    gpt_layer L1 = build_gpt_layer(&g, L0.out, H, 4, 0.1, 1);
    wf_op_attrs a = attrs();
    a.ndim = 2;
    a.shape[0] = B * S;
    a.shape[1] = H;
    int hf = op1(&g, WF_OP_RESHAPE, "flat", L1.out, -1, -1, &a);
    a = attrs();
    a.trans_b = 1; /* tied embedding: logits = h wte^T */
    int logits = op1(&g, WF_OP_MATMUL, "logits", hf, wte, -1, &a);
    a = attrs();
    a.ndim = 3;
    a.shape[0] = B;
    a.shape[1] = S;
    a.shape[2] = V;
    int l3 = op1(&g, WF_OP_RESHAPE, "logits3", logits, -1, -1, &a);
    int loss = op1(&g, WF_OP_CROSS_ENTROPY, "loss", l3, lab, -1, NULL);
    assert_int_equal(g.status, WF_OK);
    assert_int_equal(g.loss, loss);
    int nfwd = g.nfwd, ntfwd = g.ntensors;

    assert_int_equal(wf_graph_autodiff(&g), WF_OK);
    assert_int_equal(wf_graph_validate(&g), WF_OK);
    assert_int_equal(g.nfwd, nfwd);

    /* Every parameter: exactly one final gradient tensor, of its shape. */
    int nparams = 0;
    for (int t = 0; t < ntfwd; t++) {
        const wf_tensor *p = &g.tensors[t];
        if (p->role != WF_ROLE_PARAM)
            continue;
        nparams++;
        assert_true(p->grad >= ntfwd);
        const wf_tensor *gt = &g.tensors[p->grad];
        assert_int_equal(gt->role, WF_ROLE_GRAD);
        assert_int_equal(gt->grad_of, t);
        assert_int_equal(gt->ndim, p->ndim);
        for (int d = 0; d < p->ndim; d++)
            assert_int_equal(gt->shape[d], p->shape[d]);
        assert_true(gt->producer >= nfwd);
        /* Final: no accumulation reads it. */
        for (int i = nfwd; i < g.nops; i++)
            if (g.ops[i].fwd_op < 0) {
                assert_int_not_equal(g.ops[i].in[0], p->grad);
                assert_int_not_equal(g.ops[i].in[1], p->grad);
            }
    }
    assert_int_equal(nparams, 2 + 2 * 12);
    /* ids and labels get none. */
    assert_int_equal(g.tensors[ids].grad, -1);
    assert_int_equal(g.tensors[lab].grad, -1);

    /* Tensors used twice are accumulated by ADD ops with fwd_op -1: the tied
     * table (embedding + logits), each layer input (ln1 + residual) and each
     * first residual sum (ln2 + second residual). */
    int acc_of_wte = 0, acc_of_r1 = 0, acc_of_x = 0, nacc = 0;
    for (int i = nfwd; i < g.nops; i++) {
        const wf_op *o = &g.ops[i];
        if (o->fwd_op >= 0)
            continue;
        nacc++;
        assert_int_equal(o->kind, WF_OP_ADD);
        assert_int_equal(o->pass, WF_PASS_BACKWARD);
        int of = g.tensors[o->out[0]].grad_of;
        acc_of_wte += of == wte;
        acc_of_r1 += of == L0.h_attn || of == L1.h_attn;
        acc_of_x += of == x || of == L0.out;
    }
    assert_int_equal(acc_of_wte, 1);
    assert_int_equal(acc_of_r1, 2);
    assert_int_equal(acc_of_x, 2);
    assert_int_equal(nacc, 5);
    assert_int_equal(g.ops[g.tensors[g.tensors[wte].grad].producer].fwd_op, -1);
    /* One backward op per forward op: all lead to the loss and need gradients. */
    assert_int_equal(g.nops, 2 * nfwd + nacc);
    /* The backward op of layer 1's fc1 keeps its stamps. */
    for (int i = nfwd; i < g.nops; i++)
        if (g.ops[i].fwd_op >= 0) {
            const wf_op *f = &g.ops[g.ops[i].fwd_op];
            assert_int_equal(g.ops[i].block, f->block);
            assert_int_equal(g.ops[i].layer, f->layer);
            assert_int_equal(g.ops[i].tp, f->tp);
        }
    wf_graph_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_shapes_matrix_ops),
        cmocka_unit_test(test_shapes_elementwise_and_norms),
        cmocka_unit_test(test_shapes_transformer_ops),
        cmocka_unit_test(test_shapes_layout_ops),
        cmocka_unit_test(test_named_errors_and_sticky),
        cmocka_unit_test(test_flops_matmul_conv),
        cmocka_unit_test(test_flops_attention_gqa),
        cmocka_unit_test(test_gpt_layer_saved_bytes),
        cmocka_unit_test(test_saved_dedup),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_autodiff_mlp),
        cmocka_unit_test(test_autodiff_gpt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
