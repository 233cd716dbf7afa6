/* Per-layer plans of a mixture of experts (layout.h, wf_layout_perlayer;
 * docs/planner.md "Per-layer plans").
 *
 * A model with two layer kinds -- DeepSeek's first dense layers
 * (deepseek-tiny: layer 0 dense, layers 1-2 with experts) and interleaved
 * dense and expert layers (moe-tiny with moe_freq=2: layer 0 experts, layer 1
 * dense) -- whose dense layers run other layouts than its expert layers:
 *
 *   - the op-level plan is read back as its two whole-model plans;
 *   - the one cost model's price (wf_layout_cost) equals the sum written out
 *     here from the pieces: the expert plan's estimate (every layer as the
 *     cost model prices a mixture of experts), plus the dense transformer of
 *     the model's attention and dense MLP at L and L - n_dense layers under
 *     the dense layers' plan, less the same under the expert plan's dense
 *     layouts, plus the layout changes between the kinds, each an all-gather
 *     of the layer tensor on the mesh axis whose layout changes, priced by
 *     the collective model on that axis's group;
 *   - a plan whose layers all run the lowering of one whole-model plan costs
 *     what it costs today (the whole-model plan's estimate), and so does the
 *     per-layer form with the dense layers in the expert plan's layouts;
 *   - the simulator's composition agrees with the estimate within 3%;
 *   - layouts that are no whole-model plan's per kind, and more than one
 *     stage, are refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/cluster.h"
#include "weft/cost.h"
#include "weft/layout.h"
#include "weft/models.h"
#include "weft/plan.h"
#include "weft/sim.h"

static void load(const char *model, const char *cluster, wf_model_config *m, wf_cluster *c)
{
    assert_int_equal(wf_model_lookup(model, m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, c), WF_OK);
}

static wf_plan plan_of(const char *text, const wf_cluster *c, int64_t batch)
{
    wf_plan p;
    char note[256];
    assert_int_equal(wf_plan_parse(text, &p), WF_OK);
    assert_int_equal(wf_plan_complete(&p, wf_cluster_devices(c), batch, note, sizeof note), WF_OK);
    return p;
}

static double whole_estimate(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, int64_t batch,
                             double *mem)
{
    wf_cost_ctx *ctx = NULL;
    wf_estimate e;
    assert_int_equal(wf_cost_ctx_create(m, c, &ctx), WF_OK);
    wf_status st = wf_estimate_plan(ctx, p, batch, &e);
    if (st != WF_OK)
        fprintf(stderr, "%s: %s\n", m->name, wf_last_error());
    assert_int_equal(st, WF_OK);
    wf_cost_ctx_free(ctx);
    if (mem)
        *mem = e.memory_per_device_bytes;
    return e.iteration_time_s;
}

/* The dense transformer of the model: written out here, not taken from
 * perlayer.c. */
static double dense_estimate(const wf_model_config *m, int64_t layers, const wf_cluster *c, const char *plan,
                             int64_t batch, double *mem)
{
    wf_model_config d = *m;
    d.experts = d.top_k = d.moe_ffn = d.shared_experts = d.shared_ffn = 0;
    d.first_dense = 0;
    d.moe_freq = 1;
    d.layers = layers;
    wf_plan p = plan_of(plan, c, batch);
    return whole_estimate(&d, c, &p, batch, mem);
}

typedef struct {
    const char *model, *cluster;
    int64_t batch;
    const char *moe, *dense;         /* the two plans */
    const char *moe_dense_layouts;   /* the expert plan's dense layouts as a dense plan */
    int64_t dense_layers;
    int64_t changes;                 /* layout changes per micro-batch, each one all-gather */
    int64_t gather_group;            /* the axis whose layout changes: its size */
    int64_t other_split;             /* the other axis's size (the tensor's split on it) */
} two_kind_case;

static const two_kind_case cases[] = {
    /* Layer 0 dense (tp=4 on the inner axis), layers 1-2 experts (ep=4 on
     * it): embedding -> dense -> experts, two changes, a gather on the inner
     * axis of 4 each (forward into the dense layer, backward out of it). */
    {"deepseek-tiny", "dgx-a100:nodes=1", 64, "dp=8,tp=1,ep=4", "dp=2,tp=4,ep=1", "dp=8,tp=1", 1, 2, 4, 2},
    /* moe-tiny, moe_freq=2: layer 0 experts, layer 1 dense (tp=4), then the
     * head: two changes again. */
    {"moe-tiny:moe_freq=2", "dgx-a100:nodes=1", 64, "dp=8,tp=1,ep=4", "dp=2,tp=4,ep=1", "dp=8,tp=1", 1, 2, 4, 2},
};

static void test_closed_form(void **state)
{
    (void)state;
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        const two_kind_case *k = &cases[n];
        wf_model_config m;
        wf_cluster c;
        load(k->model, k->cluster, &m, &c);
        wf_plan pm = plan_of(k->moe, &c, k->batch), pd = plan_of(k->dense, &c, k->batch);
        wf_layout ol;
        wf_layout_init(&ol);
        assert_int_equal(wf_layout_perlayer_lower(&m, &c, k->batch, &pm, &pd, &ol), WF_OK);
        assert_string_equal(ol.mesh, "2x4");
        /* Read back as its two plans. */
        wf_layout_perlayer pl;
        int is = 0;
        assert_int_equal(wf_layout_perlayer_of(&m, &c, k->batch, &ol, &pl, &is), WF_OK);
        assert_int_equal(is, 1);
        assert_int_equal(pl.moe.dp, 8);
        assert_int_equal(pl.moe.tp, 1);
        assert_int_equal(pl.moe.ep, 4);
        assert_int_equal(pl.dense.tp, 4);
        assert_int_equal(pl.dense.dp, 2);
        assert_int_equal(pl.dense_layers, k->dense_layers);
        assert_int_equal(pl.to_dense + pl.to_moe, k->changes);
        /* The one cost model's price. */
        wf_cost_ctx *ctx = NULL;
        wf_estimate e;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        wf_status st = wf_layout_cost(&m, &c, ctx, k->batch, &ol, &e, NULL);
        if (st != WF_OK)
            fprintf(stderr, "%s: %s\n", k->model, wf_last_error());
        assert_int_equal(st, WF_OK);
        /* The search's candidate (built, not read back) costs the same. */
        wf_layout_perlayer made;
        wf_estimate e2;
        assert_int_equal(wf_layout_perlayer_make(&m, &c, k->batch, &pm, &pd, &ol, &made), WF_OK);
        assert_int_equal(wf_layout_perlayer_cost(&m, &c, ctx, k->batch, &made, &e2), WF_OK);
        assert_true(e2.iteration_time_s == e.iteration_time_s);
        assert_true(e2.memory_per_device_bytes == e.memory_per_device_bytes);
        wf_cost_ctx_free(ctx);
        /* The sum from the pieces. */
        double mm, m1, m2, m3, m4;
        const double em = whole_estimate(&m, &c, &pm, k->batch, &mm);
        const int64_t L = m.layers, R = m.layers - k->dense_layers;
        const double d1 = dense_estimate(&m, L, &c, k->dense, k->batch, &m1);
        const double d2 = dense_estimate(&m, R, &c, k->dense, k->batch, &m2);
        const double d3 = dense_estimate(&m, L, &c, k->moe_dense_layouts, k->batch, &m3);
        const double d4 = dense_estimate(&m, R, &c, k->moe_dense_layouts, k->batch, &m4);
        const int64_t micro_batches = k->batch / ((int64_t)pm.dp * pm.mbs);
        const double tensor = (double)(k->batch / micro_batches) * (double)m.seq * (double)m.hidden *
                              (double)wf_dtype_bytes(m.dtype);
        wf_group inner = wf_group_place(&c, k->gather_group, 1);
        const double gather = wf_coll_time(&c, WF_COLL_ALLGATHER, &inner, tensor / (double)k->other_split);
        const double want = em + (d1 - d2) - (d3 - d4) + (double)micro_batches * (double)k->changes * gather;
        fprintf(stderr, "%s: per-layer %.9f s = %.9f + (%.9f - %.9f) - (%.9f - %.9f) + %lld x %lld x %.3g\n",
                k->model, e.iteration_time_s, em, d1, d2, d3, d4, (long long)micro_batches,
                (long long)k->changes, gather);
        assert_true(gather > 0);
        assert_true(fabs(e.iteration_time_s - want) <= 1e-12 * want);
        assert_true(fabs(e.iteration_time_s - em) > 1e-9 * em); /* not the whole-model price */
        const double want_mem = mm + (m1 - m2) - (m3 - m4);
        assert_true(fabs(e.memory_per_device_bytes - want_mem) <= 1e-9 * want_mem);
        assert_true(fabs(e.samples_per_s - (double)k->batch / e.iteration_time_s) <= 1e-9 * e.samples_per_s);
        wf_layout_free(&ol);
    }
}

/* Every layer in one whole-model plan's lowering: today's price, exactly. */
static void test_whole_model_unchanged(void **state)
{
    (void)state;
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        const two_kind_case *k = &cases[n];
        wf_model_config m;
        wf_cluster c;
        load(k->model, k->cluster, &m, &c);
        const char *plans[] = {k->moe, k->dense};
        for (int i = 0; i < 2; i++) {
            wf_plan p = plan_of(plans[i], &c, k->batch);
            double mem;
            const double want = whole_estimate(&m, &c, &p, k->batch, &mem);
            for (int form = 0; form < 2; form++) {
                /* form 0: the lowering; 1: the per-layer form with the dense
                 * layers in the plan's own dense layouts (the same file). */
                wf_layout ol;
                wf_layout_init(&ol);
                if (form == 0)
                    assert_int_equal(wf_plan_lower(&m, &c, &p, k->batch, &ol), WF_OK);
                else
                    assert_int_equal(wf_layout_perlayer_lower(&m, &c, k->batch, &p, &p, &ol), WF_OK);
                wf_layout_perlayer pl;
                int is = 1;
                assert_int_equal(wf_layout_perlayer_of(&m, &c, k->batch, &ol, &pl, &is), WF_OK);
                assert_int_equal(is, 0);
                wf_cost_ctx *ctx = NULL;
                wf_estimate e;
                assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
                assert_int_equal(wf_layout_cost(&m, &c, ctx, k->batch, &ol, &e, NULL), WF_OK);
                wf_cost_ctx_free(ctx);
                assert_true(e.iteration_time_s == want);
                assert_true(e.memory_per_device_bytes == mem);
                wf_layout_free(&ol);
            }
        }
    }
}

static void test_simulate(void **state)
{
    (void)state;
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        const two_kind_case *k = &cases[n];
        wf_model_config m;
        wf_cluster c;
        load(k->model, k->cluster, &m, &c);
        wf_plan pm = plan_of(k->moe, &c, k->batch), pd = plan_of(k->dense, &c, k->batch);
        wf_layout ol;
        wf_layout_init(&ol);
        assert_int_equal(wf_layout_perlayer_lower(&m, &c, k->batch, &pm, &pd, &ol), WF_OK);
        wf_layout_perlayer pl;
        int is = 0;
        assert_int_equal(wf_layout_perlayer_of(&m, &c, k->batch, &ol, &pl, &is), WF_OK);
        wf_cost_ctx *ctx = NULL;
        wf_estimate e;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        assert_int_equal(wf_layout_perlayer_cost(&m, &c, ctx, k->batch, &pl, &e), WF_OK);
        wf_cost_ctx_free(ctx);
        double t = 0, mem = 0;
        assert_int_equal(wf_sim_perlayer(&m, &c, k->batch, &pl, &t, &mem), WF_OK);
        fprintf(stderr, "%s: simulated %.6f s, estimated %.6f s (%+.2f%%)\n", k->model, t, e.iteration_time_s,
                100 * (t / e.iteration_time_s - 1));
        assert_true(fabs(t / e.iteration_time_s - 1) <= 0.03);
        assert_true(mem > 0);
        wf_layout_free(&ol);
    }
}

static void test_refusals(void **state)
{
    (void)state;
    const two_kind_case *k = &cases[0];
    wf_model_config m;
    wf_cluster c;
    load(k->model, k->cluster, &m, &c);
    wf_plan pm = plan_of(k->moe, &c, k->batch), pd = plan_of(k->dense, &c, k->batch);
    wf_layout ol;
    wf_layout_init(&ol);
    assert_int_equal(wf_layout_perlayer_lower(&m, &c, k->batch, &pm, &pd, &ol), WF_OK);
    /* A dense layer's op in a layout no whole-model plan gives. */
    for (int i = 0; i < ol.nlayouts; i++)
        if (strcmp(ol.op[i], "layers.0.mlp.down") == 0) {
            static const char mixed[] = "S0,B->S0|S0,B->S0"; /* data-parallel in a tp=4 layer */
            char *d = malloc(sizeof mixed);
            assert_non_null(d);
            memcpy(d, mixed, sizeof mixed);
            free(ol.sig[i]);
            ol.sig[i] = d;
        }
    wf_layout_perlayer pl;
    int is = 0;
    assert_int_equal(wf_layout_perlayer_of(&m, &c, k->batch, &ol, &pl, &is), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "dense layers are the lowering of no whole-model plan"));
    assert_null(strchr(wf_last_error(), '\n'));
    wf_cost_ctx *ctx = NULL;
    wf_estimate e;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    assert_int_equal(wf_layout_cost(&m, &c, ctx, k->batch, &ol, &e, NULL), WF_INVAL);
    wf_layout_free(&ol);
    /* Two stages (moe-tiny's two layers, one per stage). */
    wf_cost_ctx_free(ctx);
    ctx = NULL;
    load(cases[1].model, cases[1].cluster, &m, &c);
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    wf_plan pm2 = plan_of("dp=4,tp=1,ep=4,pp=2,mbs=4", &c, k->batch),
           pd2 = plan_of("dp=1,tp=4,pp=2,mbs=16", &c, k->batch);
    wf_layout_init(&ol);
    assert_int_equal(wf_layout_perlayer_lower(&m, &c, k->batch, &pm2, &pd2, &ol), WF_OK);
    assert_int_equal(wf_layout_perlayer_of(&m, &c, k->batch, &ol, &pl, &is), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "costed on one stage, not pp=2"));
    assert_int_equal(wf_layout_cost(&m, &c, ctx, k->batch, &ol, &e, NULL), WF_INVAL);
    wf_layout_free(&ol);
    /* A dense layers' plan on another mesh. */
    load(k->model, k->cluster, &m, &c);
    wf_plan pd3 = plan_of("dp=4,tp=2", &c, k->batch);
    wf_layout_init(&ol);
    assert_int_equal(wf_layout_perlayer_lower(&m, &c, k->batch, &pm, &pd3, &ol), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "lowers to mesh 4x2, the experts' to 2x4"));
    wf_layout_free(&ol);
    wf_cost_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_form),
        cmocka_unit_test(test_whole_model_unchanged),
        cmocka_unit_test(test_simulate),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
