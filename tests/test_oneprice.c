/* One price per plan (issue 23, item 2): any plan the op-level search
 * returns -- its best, every plan of its ranking and every point of its
 * time/memory frontier -- written to a plan file and estimated as `weft
 * estimate --plan FILE` estimates it (src/cli/cmd_estimate.c: the one cost
 * model, wf_layout_cost; where that does not take the layouts, the
 * op-level model of `weft plan --verify`, wf_search_opplan_verify) gives the
 * search's own figures within 0.1% -- the frontier's points under the memory
 * levers too, their recompute and zero keys in the file. Models: GPT, BERT, ResNet and an MLP;
 * clusters: V100 (4 per node, and 1 per node on 10 GbE), A100 and H100 (8
 * per node).
 *
 * The reference is the estimate of the file read back: the search's
 * figures must be that number, not a proxy's. The ranking is checked
 * against it too: no point of the frontier that the one model prices is
 * faster than the best. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/search.h"

typedef struct {
    const char *model, *cluster;
    int64_t batch;
    const char *mesh; /* NULL: every mesh */
    int pp;           /* 0: every depth */
    int levers;       /* 1: the frontier holds a recomputed and a ZeRO point (their keys in the file) */
} one_case;

/* The estimate of the plan in file `path`, as `weft estimate` computes it. */
static void estimate_file(const wf_model_config *m, const wf_cluster *c, int64_t batch, const char *path,
                          double *time_s, double *mem_bytes, int *one_model)
{
    wf_plan whole;
    wf_layout ol;
    wf_layout_init(&ol);
    wf_plan_meta meta;
    int is_ol = 0;
    assert_int_equal(wf_plan_read_file_any(path, &whole, &ol, &meta, &is_ol), WF_OK);
    assert_int_equal(is_ol, 1);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(m, c, &ctx), WF_OK);
    wf_estimate e;
    wf_status st = wf_layout_cost(m, c, ctx, batch, &ol, &e, NULL);
    wf_cost_ctx_free(ctx);
    if (st == WF_OK) {
        *time_s = e.iteration_time_s;
        *mem_bytes = e.memory_per_device_bytes;
        *one_model = 1;
    } else {
        /* estimate's fallback: the op-level model (weft plan --verify) */
        assert_int_equal(st, WF_INVAL);
        wf_clear_error();
        wf_search_opplan_result v;
        assert_int_equal(wf_search_opplan_verify(m, c, batch, &ol, NULL, &v), WF_OK);
        *time_s = v.best.iteration_time_s;
        *mem_bytes = v.best.memory_per_device_bytes;
        *one_model = v.best.one_model;
        wf_search_opplan_result_free(&v);
    }
    wf_layout_free(&ol);
}

static int check_point(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_search_opplan_point *pt,
                       const char *what)
{
    assert_non_null(pt->layouts);
    char path[] = "/tmp/weft-oneprice-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    wf_plan_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "%s", m->name);
    meta.batch = batch;
    assert_int_equal(wf_layout_write_file(path, pt->layouts, &meta, NULL), WF_OK);
    double t = 0, mem = 0;
    int one = 0;
    estimate_file(m, c, batch, path, &t, &mem, &one);
    unlink(path);
    double dt = fabs(pt->iteration_time_s / t - 1), dm = fabs(pt->memory_per_device_bytes / mem - 1);
    if (dt > 1e-3 || dm > 1e-3 || one != pt->one_model)
        fprintf(stderr, "%s %s: search %.6g s %.6g B (%s), estimate of its file %.6g s %.6g B (%s)\n", m->name,
                what, pt->iteration_time_s, pt->memory_per_device_bytes, pt->one_model ? "one model" : "op-level",
                t, mem, one ? "one model" : "op-level");
    assert_true(dt <= 1e-3);
    assert_true(dm <= 1e-3);
    assert_int_equal(one, pt->one_model);
    return one;
}

static void run_case(const one_case *k)
{
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup(k->model, &m), WF_OK);
    assert_int_equal(wf_cluster_lookup(k->cluster, &c), WF_OK);
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.mesh = k->mesh;
    o.pp = k->pp;
    o.top_k = 5;
    wf_search_opplan_result r;
    assert_int_equal(wf_search_opplan(&m, &c, k->batch, &o, &r), WF_OK);
    assert_true(r.has_best && r.ntop >= 1 && r.npareto >= 1);
    int ones = check_point(&m, &c, k->batch, &r.best, "best");
    /* The best is the ranking's head, with the same figures. */
    assert_string_equal(r.top[0].plan, r.best.plan);
    assert_true(fabs(r.top[0].iteration_time_s / r.best.iteration_time_s - 1) <= 1e-12);
    for (int i = 0; i < r.ntop; i++) {
        char what[32];
        snprintf(what, sizeof what, "top %d", i + 1);
        ones += check_point(&m, &c, k->batch, &r.top[i], what);
    }
    for (int i = 0; i < r.npareto; i++) {
        char what[32];
        snprintf(what, sizeof what, "frontier point %d", i + 1);
        ones += check_point(&m, &c, k->batch, &r.pareto[i], what);
        /* Time ascending, memory strictly descending. */
        if (i > 0) {
            assert_true(r.pareto[i].iteration_time_s >= r.pareto[i - 1].iteration_time_s ||
                        r.pareto[i].one_model != r.pareto[i - 1].one_model);
            assert_true(r.pareto[i].memory_per_device_bytes < r.pareto[i - 1].memory_per_device_bytes);
        }
        /* No plan the one model prices beats the best it prices. */
        if (r.best.one_model && r.pareto[i].one_model)
            assert_true(r.pareto[i].iteration_time_s >= r.best.iteration_time_s * (1 - 1e-12));
    }
    if (k->levers) {
        int rc = 0, zero = 0;
        for (int i = 0; i < r.npareto; i++) {
            rc += r.pareto[i].recompute == 1 && strstr(r.pareto[i].layouts->keys, "recompute=full") != NULL;
            zero += r.pareto[i].zero > 0 && strstr(r.pareto[i].layouts->keys, "zero=") != NULL;
        }
        assert_true(rc > 0 && zero > 0);
    }
    fprintf(stderr, "%-11s %-38s %-6s best %-36s %.6g s (%s); %d top, %d frontier points, %d priced by the one "
                    "model; %.3f s\n",
            k->model, k->cluster, k->mesh ? k->mesh : "any", r.best.plan, r.best.iteration_time_s,
            r.best.one_model ? "one model" : "op-level", r.ntop, r.npareto, ones, r.search_time_s);
    /* A model the one model costs gets its best from it. */
    assert_true(r.best.one_model);
    wf_search_opplan_result_free(&r);
}

static void test_oneprice_transformers(void **state)
{
    (void)state;
    static const one_case cases[] = {
        {"gpt2", "dgx-a100:nodes=1", 16, NULL, 1, 0},
        {"gpt2", "v100-10gbe:nodes=8,devices_per_node=1", 16, NULL, 1, 0},
        {"bert-large", "v100-ib100:nodes=16", 512, "8x8", 0, 0},
        {"bert-large", "dgx-h100:nodes=2", 64, NULL, 1, 0},
        /* The memory levers on the frontier (recompute=full, zero=N): the
         * setting of docs/seeds.md's TensorOpt table. */
        {"gpt2:dtype=fp32", "v100-ib100:nodes=1", 16, "4", 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
}

static void test_oneprice_cnn_mlp(void **state)
{
    (void)state;
    static const one_case cases[] = {
        {"resnet50", "dgx-a100:nodes=1", 256, NULL, 0, 0},
        {"resnet50", "v100-10gbe:nodes=8,devices_per_node=1", 256, NULL, 0, 0},
        {"mlp", "dgx-h100:nodes=1", 64, NULL, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oneprice_transformers),
        cmocka_unit_test(test_oneprice_cnn_mlp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
