/* Mixture of experts: the router, dispatch, grouped MLP and combine ops
 * (shapes, named errors, FLOPs and saved bytes against their closed forms,
 * autodiff, total vs active parameters), and the MoE zoo models' parameter
 * counts against the published totals.
 *
 * Symbols: T = B*S tokens, H hidden, E experts, K experts per token, C tokens
 * per expert, F an expert's hidden width. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "weft/graph.h"
#include "weft/models.h"

/* ---- helpers ---------------------------------------------------------------------- */

static int leaf(wf_graph *g, const char *name, wf_dtype dt, wf_role role, int ndim, int64_t d0,
                int64_t d1, int64_t d2)
{
    int64_t s[3] = {d0, d1, d2};
    return wf_graph_add_tensor(g, name, dt, role, ndim, s);
}

static void assert_shape(const wf_graph *g, int t, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    assert_true(t >= 0);
    const wf_tensor *x = &g->tensors[t];
    int64_t d[3] = {d0, d1, d2};
    assert_int_equal(x->ndim, ndim);
    for (int i = 0; i < ndim && i < 3; i++)
        assert_int_equal(x->shape[i], d[i]);
}

/* a == b as doubles (cmocka's float comparison rounds to float). */
#define assert_exact(a, b) assert_exact_at((double)(a), (double)(b), #a, __LINE__)
static void assert_exact_at(double a, double b, const char *what, int line)
{
    if (a != b)
        fail_msg("line %d: %s = %.17g, expected %.17g", line, what, a, b);
}

/* The ops of one MoE block, by op index. */
typedef struct {
    int pre, router, dispatch, experts, combine, loss;
    int x, w_router, w1, w2, weights, ids;
} moe_block;

/* ids[B,S] -> embedding [B,S,H] -> router (E experts, top-K) -> dispatch ->
 * grouped MLP (F wide) -> combine -> linear to V -> cross-entropy. The
 * embedding makes the routed tokens need gradients, as in a model. */
static void build_block(wf_graph *g, moe_block *b, int64_t B, int64_t S, int64_t H, int E, int K,
                        int64_t F, double cf, wf_moe_score score, wf_moe_act act)
{
    const int64_t V = 32;
    wf_graph_init(g, "moe");
    int ids = leaf(g, "ids", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, B, S, 0);
    int labels = leaf(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 2, B, S, 0);
    int tab = leaf(g, "embed", WF_DTYPE_FP32, WF_ROLE_PARAM, 2, V, H, 0);
    b->w_router = leaf(g, "router.w", WF_DTYPE_FP32, WF_ROLE_PARAM, 2, H, E, 0);
    int64_t g1 = act == WF_MOE_ACT_SWIGLU ? 2 * F : F;
    b->w1 = leaf(g, "experts.w1", WF_DTYPE_FP32, WF_ROLE_PARAM, 3, E, H, g1);
    b->w2 = leaf(g, "experts.w2", WF_DTYPE_FP32, WF_ROLE_PARAM, 3, E, F, H);
    int head = leaf(g, "head", WF_DTYPE_FP32, WF_ROLE_PARAM, 2, H, V, 0);

    int in[3] = {ids, tab};
    b->pre = wf_graph_add_op(g, WF_OP_EMBEDDING, "embed", in, 2, NULL);
    b->x = wf_graph_op_output(g, b->pre, 0);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.experts = E;
    a.top_k = K;
    a.score = score;
    a.act = act;
    a.capacity_factor = cf;
    in[0] = b->x;
    in[1] = b->w_router;
    b->router = wf_graph_add_op(g, WF_OP_ROUTER, "router", in, 2, &a);
    b->weights = wf_graph_op_output(g, b->router, 0);
    b->ids = wf_graph_op_output(g, b->router, 1);
    in[1] = b->ids;
    b->dispatch = wf_graph_add_op(g, WF_OP_MOE_DISPATCH, "dispatch", in, 2, &a);
    in[0] = wf_graph_op_output(g, b->dispatch, 0);
    in[1] = b->w1;
    in[2] = b->w2;
    b->experts = wf_graph_add_op(g, WF_OP_GROUPED_MLP, "experts", in, 3, &a);
    in[0] = wf_graph_op_output(g, b->experts, 0);
    in[1] = b->weights;
    in[2] = b->ids;
    b->combine = wf_graph_add_op(g, WF_OP_MOE_COMBINE, "combine", in, 3, &a);
    in[0] = wf_graph_op_output(g, b->combine, 0);
    in[1] = head;
    int logits = wf_graph_op1(g, WF_OP_LINEAR, "head", in, 2, NULL);
    in[0] = logits;
    in[1] = labels;
    b->loss = wf_graph_add_op(g, WF_OP_CROSS_ENTROPY, "loss", in, 2, NULL);
    if (g->status != WF_OK)
        fail_msg("%s", wf_last_error());
}

/* ---- graph ops --------------------------------------------------------------------- */

static void test_capacity(void **state)
{
    (void)state;
    assert_int_equal(wf_moe_capacity(16, 2, 4, 1.0), 8);   /* T*K/E */
    assert_int_equal(wf_moe_capacity(16, 2, 4, 0.0), 8);   /* 0 means 1 */
    assert_int_equal(wf_moe_capacity(16, 2, 4, 1.25), 10); /* 1.25 * 8 */
    assert_int_equal(wf_moe_capacity(10, 2, 8, 1.0), 3);   /* ceil(2.5) */
    assert_int_equal(wf_moe_capacity(4, 2, 2, 4.0), 4);    /* never more than T */
    assert_int_equal(wf_moe_capacity(0, 2, 4, 1.0), 0);
}

static void test_shapes_and_errors(void **state)
{
    (void)state;
    wf_graph g;
    moe_block b;
    build_block(&g, &b, 2, 8, 16, 4, 2, 32, 1.0, WF_MOE_SCORE_SOFTMAX, WF_MOE_ACT_SWIGLU);
    assert_shape(&g, b.weights, 3, 2, 8, 2);
    assert_int_equal(g.tensors[b.weights].dtype, WF_DTYPE_FP32);
    assert_shape(&g, b.ids, 3, 2, 8, 2);
    assert_int_equal(g.tensors[b.ids].dtype, WF_DTYPE_INT32);
    assert_shape(&g, wf_graph_op_output(&g, b.dispatch, 0), 3, 4, 8, 16); /* C = 16*2/4 */
    assert_shape(&g, wf_graph_op_output(&g, b.experts, 0), 3, 4, 8, 16);
    assert_shape(&g, wf_graph_op_output(&g, b.combine, 0), 3, 2, 8, 16);
    assert_int_equal(wf_graph_validate(&g), WF_OK);
    assert_true(wf_op_is_matrix(WF_OP_ROUTER));
    assert_true(wf_op_is_matrix(WF_OP_GROUPED_MLP));
    assert_false(wf_op_is_matrix(WF_OP_MOE_DISPATCH));
    wf_op_kind k;
    assert_int_equal(wf_op_parse("grouped_mlp", &k), WF_OK);
    assert_int_equal(k, WF_OP_GROUPED_MLP);

    /* Named errors: top_k beyond the experts, a w1 of the wrong width. */
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.top_k = 5;
    int in[3] = {b.x, b.w_router};
    assert_int_equal(wf_graph_add_op(&g, WF_OP_ROUTER, "bad_router", in, 2, &a), -1);
    assert_non_null(strstr(wf_last_error(), "top_k=5 outside [1, 4]"));
    g.status = WF_OK;
    memset(&a, 0, sizeof a);
    a.act = WF_MOE_ACT_GELU; /* w1 is [4,16,64], gelu wants [4,16,32] */
    in[0] = wf_graph_op_output(&g, b.dispatch, 0);
    in[1] = b.w1;
    in[2] = b.w2;
    assert_int_equal(wf_graph_add_op(&g, WF_OP_GROUPED_MLP, "bad_experts", in, 3, &a), -1);
    assert_non_null(strstr(wf_last_error(), "w1 [4,16,64]"));
    assert_non_null(strstr(wf_last_error(), "[4,16,32] for gelu"));
    g.status = WF_OK;
    memset(&a, 0, sizeof a);
    in[0] = b.x;
    in[1] = b.ids; /* experts unset */
    assert_int_equal(wf_graph_add_op(&g, WF_OP_MOE_DISPATCH, "bad_dispatch", in, 2, &a), -1);
    assert_non_null(strstr(wf_last_error(), "experts=0"));
    g.status = WF_OK;
    in[1] = b.weights; /* float weights where the expert ids belong */
    a.experts = 4;
    assert_int_equal(wf_graph_add_op(&g, WF_OP_MOE_DISPATCH, "bad_ids", in, 2, &a), -1);
    assert_non_null(strstr(wf_last_error(), "expected int32 or int64"));
    wf_graph_free(&g);
}

/* FLOPs of each op against its closed form (docs in src/graph/cost.c). */
static void check_flops(int64_t B, int64_t S, int64_t H, int E, int K, int64_t F, double cf,
                        wf_moe_score score, wf_moe_act act)
{
    wf_graph g;
    moe_block b;
    build_block(&g, &b, B, S, H, E, K, F, cf, score, act);
    double T = (double)(B * S), mats = act == WF_MOE_ACT_SWIGLU ? 3.0 : 2.0;
    double s = score == WF_MOE_SCORE_SOFTMAX ? 5.0 : 4.0;
    wf_op_cost c;

    wf_op_cost_of(&g, b.router, &c);
    assert_exact(c.fwd_flops, 2.0 * T * H * E + T * E * (s + K + 1));
    assert_exact(c.bwd_w_flops, 2.0 * T * H * E);
    assert_exact(c.bwd_in_flops, 2.0 * T * H * E + 2.0 * (s + 1) * T * E);
    assert_exact(c.params, (double)(H * E));

    /* The active experts only: tokens x top_k x capacity factor. */
    double rows = T * K * cf;
    wf_op_cost_of(&g, b.experts, &c);
    assert_exact(c.fwd_flops, 2.0 * rows * mats * H * F);
    assert_exact(c.bwd_in_flops, c.fwd_flops);
    assert_exact(c.bwd_w_flops, c.fwd_flops);
    assert_exact(c.params, (double)E * mats * H * F);
    double C = rows / E, gF = act == WF_MOE_ACT_SWIGLU ? 2.0 * F : (double)F;
    assert_exact(c.saved_bytes, 4.0 * E * C * (H + gF + F));

    wf_op_cost_of(&g, b.dispatch, &c);
    double R = rows < T * K ? rows : T * K; /* rows that carry a token */
    assert_exact(c.fwd_flops, 0);
    assert_exact(c.bwd_in_flops, R * H);
    assert_true(c.fwd_bytes > 0);

    wf_op_cost_of(&g, b.combine, &c);
    assert_exact(c.fwd_flops, 2.0 * R * H);
    assert_exact(c.bwd_in_flops, 3.0 * R * H);
    wf_graph_free(&g);
}

static void test_flops(void **state)
{
    (void)state;
    check_flops(2, 8, 16, 4, 2, 32, 1.0, WF_MOE_SCORE_SOFTMAX, WF_MOE_ACT_SWIGLU);
    check_flops(2, 8, 16, 4, 2, 32, 1.25, WF_MOE_SCORE_SOFTMAX, WF_MOE_ACT_SWIGLU);
    check_flops(4, 16, 32, 8, 1, 24, 2.0, WF_MOE_SCORE_SIGMOID, WF_MOE_ACT_GELU);
}

static void test_autodiff_and_params(void **state)
{
    (void)state;
    wf_graph g;
    moe_block b;
    const int64_t H = 16, F = 32, E = 4, K = 2;
    build_block(&g, &b, 2, 8, H, (int)E, (int)K, F, 1.0, WF_MOE_SCORE_SOFTMAX, WF_MOE_ACT_SWIGLU);
    wf_graph_totals t;
    wf_graph_totals_of(&g, &t);
    double experts = (double)(E * 3 * H * F), dense = 32.0 * H + H * E + H * 32.0;
    assert_exact(t.params, dense + experts);
    assert_exact(t.active_params, dense + experts * K / E);

    int nfwd = g.nops;
    assert_int_equal(wf_graph_autodiff(&g), WF_OK);
    assert_int_equal(wf_graph_validate(&g), WF_OK);
    int seen[WF_OP_COUNT] = {0};
    for (int i = nfwd; i < g.nops; i++) {
        const wf_op *o = &g.ops[i];
        if (o->fwd_op < 0)
            continue;
        seen[o->kind] = 1;
        wf_op_cost c;
        wf_op_cost_of(&g, i, &c);
        assert_true(isfinite(c.bwd_in_flops) && isfinite(c.bwd_w_flops) && isfinite(c.bwd_bytes));
        assert_true(c.bwd_in_flops + c.bwd_w_flops > 0);
    }
    assert_true(seen[WF_OP_ROUTER] && seen[WF_OP_MOE_DISPATCH] && seen[WF_OP_GROUPED_MLP] &&
                seen[WF_OP_MOE_COMBINE]);
    /* Gradients reach every weight, and none the integer expert ids. */
    assert_true(g.tensors[b.w_router].grad >= 0);
    assert_true(g.tensors[b.w1].grad >= 0);
    assert_true(g.tensors[b.w2].grad >= 0);
    assert_int_equal(g.tensors[b.ids].grad, -1);
    /* The routing weights get theirs from the combine. */
    int gw = g.tensors[b.weights].grad;
    assert_true(gw >= 0);
    assert_int_equal(g.ops[g.tensors[gw].producer].kind, WF_OP_MOE_COMBINE);
    wf_graph_free(&g);
}

/* ---- zoo models ----------------------------------------------------------------- */

static void model_counts(const char *spec, double *params, double *active)
{
    wf_model_config m;
    if (wf_model_lookup(spec, &m) != WF_OK)
        fail_msg("%s: %s", spec, wf_last_error());
    assert_int_equal(wf_model_params(&m, params), WF_OK);
    assert_int_equal(wf_model_active_params(&m, active), WF_OK);
}

/* |got - published| within rel of published. */
static void assert_near_rel(double got, double published, double rel, const char *what)
{
    if (!(fabs(got - published) <= rel * published))
        fail_msg("%s: %.0f is not within %g%% of the published %.0f", what, got, 100 * rel,
                 published);
}

static void test_zoo_params(void **state)
{
    (void)state;
    double p, a;
    /* Mixtral 8x7B, per layer: attention 2*H^2 + 2*H*(8*128), 8 experts of
     * 3*H*14336, router H*8, two norms; embedding and head 32000*H. The model
     * card's 46.7B total and 12.9B active are these, rounded. */
    const double H = 4096, L = 32, V = 32000, F = 14336;
    double attn = 2 * H * H + 2 * H * 1024, expert = 3 * H * F, other = attn + 8 * H + 2 * H;
    model_counts("mixtral-8x7b", &p, &a);
    assert_exact(p, L * (other + 8 * expert) + 2 * V * H + H);
    assert_exact(p, 46702792704.0);
    assert_exact(a, L * (other + 2 * expert) + 2 * V * H + H);
    assert_near_rel(p, 46.7e9, 0.01, "mixtral-8x7b total");
    assert_near_rel(a, 12.9e9, 0.01, "mixtral-8x7b active");

    model_counts("mixtral-8x22b", &p, &a);
    assert_exact(p, 140630071296.0);
    assert_near_rel(p, 141e9, 0.01, "mixtral-8x22b total");
    assert_near_rel(a, 39e9, 0.01, "mixtral-8x22b active");

    /* DeepSeek-V3: 671B without the multi-token-prediction module (the
     * sigmoid router's 256 bias terms per layer are not modelled: 14,848 in
     * all). Active per token we count 37.55B: every non-expert weight in full,
     * the input embedding's 0.93B included (as Mixtral's 12.9B includes its
     * own); without it 36.63B. The report's "37B" lies between the two, so the
     * check allows 2%. */
    model_counts("deepseek-v3", &p, &a);
    assert_exact(p, 671026404352.0);
    assert_near_rel(p, 671e9, 0.01, "deepseek-v3 total");
    assert_near_rel(a, 37e9, 0.02, "deepseek-v3 active");

    /* moe-tiny, exactly: H 64, 4 heads, 2 layers, 4 experts of 96 top-2, a
     * shared expert of 96, vocabulary 96. */
    const double h = 64, e = 3 * h * 96;
    double layer = 4 * h * h + 2 * h + h * 4 + 3 * h * 96;
    model_counts("moe-tiny", &p, &a);
    assert_exact(p, 2 * (layer + 4 * e) + 2 * 96 * h + h);
    assert_exact(a, 2 * (layer + 2 * e) + 2 * 96 * h + h);

    /* A dense model uses all of its weights. */
    model_counts("gpt-tiny", &p, &a);
    assert_exact(a, p);
}

/* The tiny models build, validate, differentiate and cost to finite numbers;
 * DeepSeek's first layer is dense and its others have experts. */
static void test_tiny_models(void **state)
{
    (void)state;
    const char *names[] = {"moe-tiny", "deepseek-tiny", "mixtral-8x7b:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16,vocab=64,capacity=1.5"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        wf_model_config m;
        wf_graph g;
        if (wf_model_lookup(names[i], &m) != WF_OK)
            fail_msg("%s: %s", names[i], wf_last_error());
        assert_true(wf_model_is_moe(&m));
        assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
        int routers[4] = {0};
        for (int k = 0; k < g.nops; k++)
            if (g.ops[k].kind == WF_OP_ROUTER && g.ops[k].layer >= 0 && g.ops[k].layer < 4)
                routers[g.ops[k].layer]++;
        if (i == 1) {
            assert_int_equal(routers[0], 0);
            assert_int_equal(routers[1], 1);
            assert_int_equal(routers[2], 1);
        } else {
            assert_int_equal(routers[0], 1);
        }
        assert_int_equal(wf_graph_autodiff(&g), WF_OK);
        assert_int_equal(wf_graph_validate(&g), WF_OK);
        wf_graph_totals t;
        wf_graph_totals_of(&g, &t);
        assert_true(isfinite(t.fwd_flops) && t.fwd_flops > 0);
        assert_true(isfinite(t.bwd_flops) && t.bwd_flops > t.fwd_flops);
        assert_true(isfinite(t.saved_bytes) && t.saved_bytes > 0);
        assert_true(t.active_params < t.params);
        wf_graph_free(&g);
    }
}

static void test_config_errors(void **state)
{
    (void)state;
    wf_model_config m;
    assert_int_equal(wf_model_lookup("mixtral-8x7b:top_k=9", &m), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "top_k=9 exceeds experts=8"));
    assert_int_equal(wf_model_lookup("llama:shared_experts=1", &m), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "without experts"));
    assert_int_equal(wf_model_lookup("deepseek-v3:v_head=64", &m), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "v_head=64 differs from qk_nope=128"));
    assert_int_equal(wf_model_lookup("mixtral-8x7b:router=relu", &m), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "router=relu"));
    assert_int_equal(wf_model_lookup("mixtral-8x7b:capacity=0", &m), WF_INVAL);
    /* experts=0 makes Mixtral a dense Mistral-shaped model. */
    assert_int_equal(wf_model_lookup("mixtral-8x7b:experts=0", &m), WF_OK);
    assert_false(wf_model_is_moe(&m));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_shapes_and_errors),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_autodiff_and_params),
        cmocka_unit_test(test_zoo_params),
        cmocka_unit_test(test_tiny_models),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
