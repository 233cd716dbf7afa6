/* Plans on meshes of three axes are the one plan too.
 *
 * An expert-parallel plan lowers to a mesh of up to three axes (edp x ep x
 * tp: the experts and their weights split over ep, each rank's tokens in its
 * own capacity rows, the all-to-all between them; the experts split over tp
 * or not). For each plan below, over Mixtral 8x7B on 64 H100s and the tiny
 * test mixtures, the lowering must raise back to the same whole-model plan
 * (wf_plan_raise), be costed by the one cost model exactly as the plan
 * string is (wf_layout_cost against wf_estimate_plan: time, every part,
 * memory) and be simulated exactly as the plan string is (wf_sim_oplevel
 * against wf_sim_plan). Layouts outside the lowering are refused by name.
 *
 * A dense model on a mesh of three axes, the outer one data-parallel and
 * the inner two model-parallel (an op-level search's 2x2 plan replicated
 * over 2 data-parallel groups), is costed from its layouts: its compute,
 * tensor-parallel collectives and activations equal those of the 2x2 plan
 * at half the batch (the work of one data-parallel group), and its gradient
 * reduction is the data-parallel all-reduce the 2x2 plan does not have;
 * the simulator plays it within 3% of the estimate. */
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
#include "weft/models.h"
#include "weft/plan.h"
#include "weft/search.h"
#include "weft/sim.h"

typedef struct {
    const char *model, *cluster, *plan, *mesh;
    int64_t batch;
} expert_case;

static const expert_case cases[] = {
    {"mixtral-8x7b", "dgx-h100:nodes=8", "dp=16,ep=8,tp=2,pp=2", "2x8x2", 256},
    {"mixtral-8x7b", "dgx-h100:nodes=8", "dp=16,ep=8,tp=2,etp=1,pp=2,sp=1", "2x8x2", 256},
    {"mixtral-8x7b", "dgx-h100:nodes=8", "dp=8,ep=8,tp=4,pp=2,mbs=2,recompute=full", "8x4", 256},
    {"mixtral-8x7b", "dgx-h100:nodes=8", "dp=32,ep=4,tp=2,zero=1", "8x4x2", 256},
    {"moe-tiny", "dgx-a100:nodes=1", "dp=8,ep=4", "2x4", 64},
    {"moe-tiny", "dgx-a100:nodes=1", "dp=4,ep=4,pp=2", "4", 64},
    {"moe-tiny", "dgx-a100:nodes=1", "dp=4,ep=2,tp=2", "2x2x2", 64},
    {"deepseek-tiny", "dgx-a100:nodes=1", "dp=4,ep=2,tp=2,etp=1", "2x2x2", 64},
};

static void load(const expert_case *k, wf_model_config *m, wf_cluster *c, wf_plan *p)
{
    assert_int_equal(wf_model_lookup(k->model, m), WF_OK);
    assert_int_equal(wf_cluster_lookup(k->cluster, c), WF_OK);
    assert_int_equal(wf_plan_parse(k->plan, p), WF_OK);
}

static void test_raise_cost_simulate(void **state)
{
    (void)state;
    double worst = 0;
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        const expert_case *k = &cases[n];
        wf_model_config m;
        wf_cluster c;
        wf_plan p;
        load(k, &m, &c, &p);
        wf_layout ol;
        wf_layout_init(&ol);
        wf_status st = wf_plan_lower(&m, &c, &p, k->batch, &ol);
        if (st != WF_OK)
            fprintf(stderr, "%s %s: %s\n", k->model, k->plan, wf_last_error());
        assert_int_equal(st, WF_OK);
        assert_string_equal(ol.mesh, k->mesh);

        /* Raised back: the same layouts keys. */
        wf_plan r;
        assert_int_equal(wf_plan_raise(&m, &c, k->batch, &ol, &r), WF_OK);
        assert_int_equal(r.dp, p.dp);
        assert_int_equal(r.tp, p.tp);
        assert_int_equal(r.pp, p.pp);
        assert_int_equal(r.ep, p.ep);
        assert_int_equal(r.sp, p.sp);
        assert_int_equal(r.etp > 0 ? r.etp : r.tp, p.etp > 0 ? p.etp : p.tp);
        assert_int_equal(r.recompute, p.recompute);
        assert_int_equal(r.zero, p.zero);

        /* Costed as the plan string. */
        wf_cost_ctx *ctx = NULL;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        wf_estimate a, b;
        wf_plan q;
        assert_int_equal(wf_estimate_plan(ctx, &p, k->batch, &a), WF_OK);
        assert_int_equal(wf_layout_cost(&m, &c, ctx, k->batch, &ol, &b, &q), WF_OK);
        wf_cost_ctx_free(ctx);
        const double *x = &a.breakdown.compute, *y = &b.breakdown.compute;
        for (int j = 0; j < 9; j++)
            assert_true(fabs(x[j] - y[j]) <= 1e-9 * a.iteration_time_s);
        assert_true(fabs(a.iteration_time_s - b.iteration_time_s) <= 1e-9 * a.iteration_time_s);
        assert_true(fabs(a.memory_per_device_bytes - b.memory_per_device_bytes) <= 1e-9 * a.memory_per_device_bytes);
        assert_true(a.breakdown.ep_comm > 0);

        /* Simulated as the plan string. */
        wf_sim_plan_result s1, s2;
        assert_int_equal(wf_sim_plan(&m, &c, &p, k->batch, NULL, &s1), WF_OK);
        assert_int_equal(wf_sim_oplevel(&m, &c, &ol, k->batch, NULL, &s2, &q), WF_OK);
        double d = fabs(s1.iteration_time_s / s2.iteration_time_s - 1);
        worst = d > worst ? d : worst;
        assert_true(d <= 1e-9);
        assert_int_equal(q.ep, p.ep);
        fprintf(stderr, "%-14s %-42s mesh %-6s estimate %.6g s, simulated %.6g s, %.3g GiB\n", k->model, k->plan,
                ol.mesh, b.iteration_time_s, s2.iteration_time_s, b.memory_per_device_bytes / (1u << 30));
        wf_layout_free(&ol);
    }
    fprintf(stderr, "%zu expert plans: op-level form costed and simulated as the plan string (worst %.1e)\n",
            sizeof cases / sizeof cases[0], worst);
}

/* An expert op laid out otherwise than any whole-model plan lays it: refused,
 * naming the op; a dense model's three-axis mesh: refused. */
static void test_refusals(void **state)
{
    (void)state;
    const expert_case *k = &cases[6];
    wf_model_config m;
    wf_cluster c;
    wf_plan p;
    load(k, &m, &c, &p);
    wf_layout ol;
    wf_layout_init(&ol);
    assert_int_equal(wf_plan_lower(&m, &c, &p, k->batch, &ol), WF_OK);
    int changed = -1;
    for (int i = 0; i < ol.nlayouts && changed < 0; i++)
        if (strstr(ol.op[i], "experts"))
            changed = i;
    assert_true(changed >= 0);
    char was[256];
    snprintf(was, sizeof was, "%s", ol.sig[changed]);
    /* Every operand replicated on every axis: the experts run whole on
     * every rank, which no lowering does. */
    char all_b[256] = "";
    size_t n = 0;
    for (const char *q = was; *q && n + 1 < sizeof all_b;) {
        if (*q == 'S' || *q == 'P') {
            all_b[n++] = 'B';
            q++;
            while (*q >= '0' && *q <= '9')
                q++;
        } else {
            all_b[n++] = *q++;
        }
    }
    all_b[n] = 0;
    char *copy = malloc(strlen(all_b) + 1);
    assert_non_null(copy);
    memcpy(copy, all_b, strlen(all_b) + 1);
    free(ol.sig[changed]);
    ol.sig[changed] = copy;
    const char *now = wf_layout_sig_of(&ol, ol.op[changed]);
    assert_non_null(now);
    assert_string_equal(now, all_b);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    wf_estimate e;
    wf_status st = wf_layout_cost(&m, &c, ctx, k->batch, &ol, &e, NULL);
    wf_cost_ctx_free(ctx);
    assert_int_equal(st, WF_INVAL);
    fprintf(stderr, "refused: %s\n", wf_last_error());
    assert_non_null(strstr(wf_last_error(), ol.op[changed]));
    wf_layout_free(&ol);

    wf_model_config g;
    assert_int_equal(wf_model_lookup("gpt-tiny", &g), WF_OK);
    wf_layout d;
    wf_layout_init(&d);
    assert_int_equal(wf_layout_set(&d, "2x2x2", 1, 1), WF_OK);
    wf_plan r;
    assert_int_equal(wf_plan_raise(&g, &c, 8, &d, &r), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "no experts"));
    wf_layout_free(&d);
}

/* The data-parallel signature of op i (its signature on a one-axis mesh
 * of the lowering of dp=2) prefixed to its 2x2 signature: "dp|mp|mp". */
static void test_dense_three_axes(void **state)
{
    (void)state;
    static const char *const models[] = {"mlp", "gpt-tiny"};
    for (int n = 0; n < 2; n++) {
        wf_model_config m;
        wf_cluster c;
        assert_int_equal(wf_model_lookup(models[n], &m), WF_OK);
        assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=1", &c), WF_OK);
        const int64_t B = 64;
        wf_search_opplan_opts o;
        wf_search_opplan_opts_default(&o);
        o.mesh = "2x2";
        o.devices = 4;
        o.pp = 1;
        wf_search_opplan_result r;
        assert_int_equal(wf_search_opplan(&m, &c, B / 2, &o, &r), WF_OK);
        assert_true(r.has_best);
        /* Layouts with both axes model-parallel: the search's frontier
         * holds them (its best may run data parallelism on the outer axis). */
        const wf_layout *mp = NULL;
        {
            wf_cost_ctx *cx = NULL;
            assert_int_equal(wf_cost_ctx_create(&m, &c, &cx), WF_OK);
            for (int k = 0; k < r.npareto && !mp; k++) {
                wf_estimate ek;
                wf_plan qk;
                assert_non_null(r.pareto[k].layouts);
                if (wf_layout_cost(&m, &c, cx, B / 2, r.pareto[k].layouts, &ek, &qk) == WF_OK && qk.dp == 1 &&
                    qk.tp == 4)
                    mp = r.pareto[k].layouts;
                wf_clear_error();
            }
            wf_cost_ctx_free(cx);
        }
        assert_non_null(mp);
        assert_int_equal(mp->micro_batches, 1);
        wf_plan dp2;
        assert_int_equal(wf_plan_parse("dp=2", &dp2), WF_OK);
        wf_layout low, three;
        wf_layout_init(&low);
        wf_layout_init(&three);
        assert_int_equal(wf_plan_lower(&m, &c, &dp2, B, &low), WF_OK);
        assert_int_equal(wf_layout_set(&three, "2x2x2", 1, 1), WF_OK);
        assert_int_equal(wf_layout_set_stage(&three, 0, mp->stage_first[0]), WF_OK);
        for (int i = 0; i < mp->nlayouts; i++) {
            const char *d = wf_layout_sig_of(&low, mp->op[i]);
            assert_non_null(d);
            char sig[512];
            snprintf(sig, sizeof sig, "%s|%s", d, mp->sig[i]);
            assert_int_equal(wf_layout_add_sig(&three, mp->op[i], sig), WF_OK);
        }
        for (int q = 0; q < mp->nstorage; q++) {
            /* "[x,y]" on the 2x2 mesh: "[B,x,y]" on 2x2x2 (the layout's
             * written form, wf_sbp_str; the storage is read, not dropped). */
            char lay[64];
            snprintf(lay, sizeof lay, "[B,%s", mp->layout[q][0] == '[' ? mp->layout[q] + 1 : mp->layout[q]);
            assert_int_equal(wf_layout_add_storage(&three, 0, mp->tensor[q], lay), WF_OK);
        }
        wf_cost_ctx *ctx = NULL;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        wf_estimate e3, e2;
        wf_plan q3, q2;
        wf_status st = wf_layout_cost(&m, &c, ctx, B, &three, &e3, &q3);
        if (st != WF_OK)
            fprintf(stderr, "%s 2x2x2: %s\n", models[n], wf_last_error());
        assert_int_equal(st, WF_OK);
        assert_int_equal(wf_layout_cost(&m, &c, ctx, B / 2, mp, &e2, &q2), WF_OK);
        wf_cost_ctx_free(ctx);
        assert_int_equal(q3.dp, 2);
        assert_int_equal(q3.tp, 4);
        assert_int_equal(q2.dp, 1);
        const double T = e3.iteration_time_s;
        assert_true(fabs(e3.breakdown.compute - e2.breakdown.compute) <= 1e-9 * T);
        assert_true(fabs(e3.breakdown.tp_comm - e2.breakdown.tp_comm) <= 1e-9 * T);
        assert_true(fabs(e3.mem_activation_bytes - e2.mem_activation_bytes) <= 1e-9 * e2.mem_activation_bytes);
        assert_true(e2.breakdown.dp_comm == 0 && e3.breakdown.dp_comm > 0);
        wf_sim_plan_result s3;
        wf_plan qs;
        assert_int_equal(wf_sim_oplevel(&m, &c, &three, B, NULL, &s3, &qs), WF_OK);
        double d = fabs(s3.iteration_time_s / T - 1);
        fprintf(stderr, "%-8s 2x2x2 (dp x 2x2): estimate %.6g s (2x2 at half the batch %.6g s; dp_comm %.3g s), "
                        "simulated %.6g s (%+.2f%%)\n", models[n], T, e2.iteration_time_s, e3.breakdown.dp_comm,
                s3.iteration_time_s, 100 * (s3.iteration_time_s / T - 1));
        assert_true(d <= 0.03);
        wf_layout_free(&low);
        wf_layout_free(&three);
        wf_search_opplan_result_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raise_cost_simulate),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_dense_three_axes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
