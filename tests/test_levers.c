/* The op-level frontier's memory levers (src/search/oplevel_levers.c):
 * full recomputation and ZeRO on a small GPT, data-parallel on four V100s,
 * against closed forms: each layer keeps one [B, S, H] input as its
 * checkpoint, recomputes its forward (the ops' forward times summed from
 * their FLOPs and bytes, the device model off), and ZeRO stage z frees
 * 3/4 of the optimizer state (1), and of the gradients (2), and of the
 * weights (3) of every parameter the model has. A recomputed plan has less
 * memory and more time than the same layout without it, by exactly those
 * amounts, and the search's frontier shows such points. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph-impl.h"
#include "search/oplevel-impl.h"
#include "weft/cost.h"
#include "weft/layout.h"
#include "weft/models.h"
#include "weft/search.h"

#define REL(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol) * fmax(fabs((double)(a)), fabs((double)(b))) + 1e-12)

enum { B = 8, S = 64, H = 256, LAYERS = 2, D = 4 };
#define MODEL "gpt:layers=2,hidden=256,heads=4,seq=64,vocab=512,dtype=fp32"
#define CLUSTER "v100-ib100:nodes=1,kernel_model=0"
/* The frontier's setting: docs/seeds.md's TensorOpt table (GPT-2 fp32 on a
 * node of four V100s, batch 16), where the one model's ZeRO saves memory. */
#define FRONT_MODEL "gpt2:dtype=fp32"
#define FRONT_CLUSTER "v100-ib100:nodes=1"
#define FRONT_BATCH 16

static void test_closed_forms(void **state)
{
    (void)state;
    wf_model_config mc;
    wf_graph g;
    wf_cluster c;
    wf_mesh mesh;
    assert_int_equal(wf_model_lookup(MODEL, &mc), WF_OK);
    assert_int_equal(wf_model_build(&mc, B, &g), WF_OK);
    assert_int_equal(wf_cluster_lookup(CLUSTER, &c), WF_OK);
    assert_int_equal(wf_mesh_parse("4", &c, &mesh), WF_OK);
    wf_search_oplevel_opts o;
    wf_search_oplevel_opts_default(&o);
    ol_problem p;
    assert_int_equal(ol_problem_build(&g, &c, &mesh, &o, 0, &p), WF_OK);
    /* Data parallelism: every variable's data-parallel choice. */
    int *assign = malloc(sizeof(int) * (size_t)p.nvar);
    for (int v = 0; v < p.nvar; v++)
        assign[v] = p.var[v].dp;
    ol_parts q;
    ol_eval_parts(&p, assign, &q);
    ol_levers lv;
    assert_int_equal(ol_eval_levers(&p, assign, &lv), WF_OK);

    /* Recomputation: two layers, each checkpointing its [B, S, H] fp32
     * input split four ways, and of equal activations. */
    assert_int_equal(lv.layers, LAYERS);
    assert_true(REL(lv.ck, LAYERS * (double)B * S * H * 4 / D, 1e-12));
    assert_true(REL(lv.ma_peak * LAYERS, lv.ma_block, 1e-12));
    /* The forward of every op of the layers, at a quarter of the batch. */
    unsigned char *ng = malloc((size_t)g.ntensors + 1);
    wf_graph_grad_flags(&g, g.nfwd, ng);
    double tf = 0;
    for (int i = 0; i < g.nfwd; i++) {
        if (g.ops[i].block < 0)
            continue;
        wf_op_cost oc;
        wf_op_cost_flags(&g, i, ng, &oc);
        tf += wf_compute_time(&c.dev, wf_op_is_matrix(g.ops[i].kind), WF_DTYPE_FP32, oc.fwd_flops / D,
                              oc.fwd_bytes / D);
    }
    free(ng);
    assert_true(tf > 0);
    assert_true(REL(lv.tf_rc, tf, 1e-12));
    ol_parts v;
    double rc_s;
    assert_int_equal(ol_lever_parts(&q, &lv, 1, 0, &v, &rc_s), 1);
    assert_true(v.m < q.m && v.t > q.t);
    assert_true(REL(v.t - q.t, tf, 1e-9));
    assert_true(REL(rc_s, tf, 1e-12));
    assert_true(REL(q.m - v.m, lv.ma_block - lv.ck - lv.ma_peak, 1e-9));

    /* ZeRO: every weight replicated four ways (data parallelism); fp32
     * Adam keeps 8 bytes of state per parameter, the gradient 4, the weight 4. */
    double params = 0;
    assert_int_equal(wf_model_params(&mc, &params), WF_OK);
    const double keep = 1.0 - 1.0 / D;
    assert_true(REL(lv.zsave[1], params * 8 * keep, 1e-12));
    assert_true(REL(lv.zsave[2], params * 12 * keep, 1e-12));
    assert_true(REL(lv.zsave[3], params * 16 * keep, 1e-12));
    for (int z = 1; z <= 3; z++) {
        assert_int_equal(ol_lever_parts(&q, &lv, 0, z, &v, &rc_s), 1);
        assert_true(REL(q.m - v.m, lv.zsave[z], 1e-12));
        assert_true(v.t >= q.t);
    }
    /* ZeRO-3 gathers each weight twice a pass: more time than ZeRO-2. */
    ol_parts v2;
    ol_lever_parts(&q, &lv, 0, 2, &v2, &rc_s);
    ol_lever_parts(&q, &lv, 0, 3, &v, &rc_s);
    assert_true(REL(v.t - v2.t, lv.z3_s, 1e-9) && lv.z3_s > 0);
    /* Both levers: their savings add. */
    ol_lever_parts(&q, &lv, 1, 3, &v, &rc_s);
    assert_true(REL(q.m - v.m, lv.ma_block - lv.ck - lv.ma_peak + lv.zsave[3], 1e-9));

    free(assign);
    ol_problem_free(&p);
    wf_graph_free(&g);
}

/* The frontier of `weft plan --op-level --pareto` holds recomputed and
 * ZeRO points, priced by the one cost model with those keys (the figures
 * are wf_layout_cost's of the point's plan, keys and all, and differ
 * from those of the same layouts without them); time ascending, memory
 * strictly descending, and the smallest memory on it is a recomputed one. */
static void test_frontier_has_levers(void **state)
{
    (void)state;
    wf_model_config mc;
    wf_cluster c;
    assert_int_equal(wf_model_lookup(FRONT_MODEL, &mc), WF_OK);
    assert_int_equal(wf_cluster_lookup(FRONT_CLUSTER, &c), WF_OK);
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.mesh = "4";
    o.pp = 1;
    o.devices = D;
    wf_search_opplan_result r;
    assert_int_equal(wf_search_opplan(&mc, &c, FRONT_BATCH, &o, &r), WF_OK);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&mc, &c, &ctx), WF_OK);
    int rc = 0, zero = 0, plain = -1;
    for (int i = 0; i < r.npareto; i++) {
        const wf_search_opplan_point *pt = &r.pareto[i];
        rc += pt->recompute;
        zero += pt->zero > 0;
        assert_true((strstr(pt->plan, "recompute=full") != NULL) == (pt->recompute == 1));
        assert_true(pt->recompute_s == 0 || pt->recompute);
        if (i > 0) { /* time ascending, memory strictly descending */
            assert_true(pt->iteration_time_s >= r.pareto[i - 1].iteration_time_s);
            assert_true(pt->memory_per_device_bytes < r.pareto[i - 1].memory_per_device_bytes);
        }
        if (!pt->recompute && plain < 0)
            plain = i;
        /* Its figures: the one model's of its plan, levers as keys. */
        assert_true(pt->one_model && pt->layouts);
        wf_estimate e, e0;
        assert_int_equal(wf_layout_cost(&mc, &c, ctx, FRONT_BATCH, pt->layouts, &e, NULL), WF_OK);
        assert_true(REL(e.iteration_time_s, pt->iteration_time_s, 1e-9));
        assert_true(REL(e.memory_per_device_bytes, pt->memory_per_device_bytes, 1e-9));
        if (pt->recompute || pt->zero) {
            assert_true(strlen(pt->layouts->keys) > 0);
            wf_layout bare = *pt->layouts;
            bare.keys[0] = 0; /* the same layouts, no levers: more memory */
            assert_int_equal(wf_layout_cost(&mc, &c, ctx, FRONT_BATCH, &bare, &e0, NULL), WF_OK);
            assert_true(e0.memory_per_device_bytes > e.memory_per_device_bytes);
            if (pt->recompute)
                assert_true(e.iteration_time_s > e0.iteration_time_s && e.breakdown.recompute > 0);
        } else {
            assert_true(pt->layouts->keys[0] == 0);
        }
    }
    assert_true(rc > 0 && zero > 0);
    assert_true(r.pareto[r.npareto - 1].recompute == 1);
    assert_true(plain >= 0 && r.pareto[r.npareto - 1].memory_per_device_bytes <
                                  r.pareto[plain].memory_per_device_bytes);
    wf_cost_ctx_free(ctx);
    wf_search_opplan_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_forms),
        cmocka_unit_test(test_frontier_has_levers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
