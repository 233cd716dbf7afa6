/* One cost model: a whole-model plan and its op-level form cost the same.
 *
 * For every plan of both calibration files (Korthikanti et al. 2022 on DGX
 * A100, NVIDIA's H100 rows) and for a sweep of at least 200 whole-model
 * plans over the zoo's transformers, CNNs and MLPs (dp, tp, pp, mbs, vpp,
 * recompute, zero, sp, overlap, schedules), the plan is lowered to its
 * op-level form (wf_plan_lower), whose layouts are read back as the cost
 * model's descriptor (wf_layout_cost, from the SBP signatures alone)
 * and composed; the result must equal wf_estimate_plan's (Megatron's
 * descriptor, the closed form) within 1% in iteration time, in every part
 * of the breakdown and in memory. The derivation from signatures is the
 * thing tested: a collective put at the wrong tensor, the wrong overlap
 * window, a divisor off, a weight counted split, all show here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost/cost-impl.h"
#include "plan_sweep.h"
#include "weft/search.h"

static double worst_time, worst_part, worst_mem, worst_of[9];
static const char *const parts[] = {"compute", "recompute", "tp_comm",   "pp_comm", "dp_comm",
                                    "bubble",  "optimizer", "exposed",   "ep_comm"};

/* The worst relative difference of each breakdown part so far. */
static void print_parts(void)
{
    fprintf(stderr, "  worst per part:");
    for (int k = 0; k < 9; k++)
        fprintf(stderr, " %s %.1e", parts[k], worst_of[k]);
    fprintf(stderr, "\n");
}
static int compared;

/* |a - b| within 1% of a, with a floor of 1e-6 of the iteration (a part of
 * a few nanoseconds is 0 in the other model's rounding). */
static int close_to(double a, double b, double iter)
{
    return fabs(a - b) <= 0.01 * fabs(a) + 1e-6 * iter;
}

static double rel(double a, double b) { return fabs(a) > 0 ? fabs(a - b) / fabs(a) : fabs(b); }

/* Lowers p, costs it both ways, asserts agreement. Returns 0 when the
 * whole-model plan is not valid here (the sweep skips it). */
static int agree(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, const wf_plan *p, int64_t batch)
{
    wf_estimate a, b;
    if (wf_estimate_plan(ctx, p, batch, &a) != WF_OK)
        return 0;
    wf_layout ol;
    wf_layout_init(&ol);
    wf_status st = wf_plan_lower(m, c, p, batch, &ol);
    if (st != WF_OK) {
        wf_layout_free(&ol);
        return 0;
    }
    wf_plan q;
    st = wf_layout_cost(m, c, ctx, batch, &ol, &b, &q);
    char text[512];
    wf_plan_format(p, text, sizeof text);
    if (st != WF_OK)
        fprintf(stderr, "%s %s: %s\n", m->name, text, wf_last_error());
    assert_int_equal(st, WF_OK);
    wf_layout_free(&ol);
    const double T = a.iteration_time_s;
    const double *x = &a.breakdown.compute, *y = &b.breakdown.compute;
    int ok = close_to(T, b.iteration_time_s, T) && close_to(a.memory_per_device_bytes, b.memory_per_device_bytes,
                                                            a.memory_per_device_bytes);
    for (int k = 0; k < 9; k++) {
        ok = ok && close_to(x[k], y[k], T);
        if (x[k] > 1e-6 * T && rel(x[k], y[k]) > worst_part)
            worst_part = rel(x[k], y[k]);
        if (x[k] > 1e-6 * T && rel(x[k], y[k]) > worst_of[k])
            worst_of[k] = rel(x[k], y[k]);
    }
    if (!ok) {
        fprintf(stderr, "%s %s batch %lld: time %.6g vs %.6g, memory %.6g vs %.6g\n", m->name, text, (long long)batch,
                T, b.iteration_time_s, a.memory_per_device_bytes, b.memory_per_device_bytes);
        for (int k = 0; k < 9; k++)
            fprintf(stderr, "  %-10s %.6g %.6g\n", parts[k], x[k], y[k]);
    }
    assert_true(ok);
    if (rel(T, b.iteration_time_s) > worst_time)
        worst_time = rel(T, b.iteration_time_s);
    if (rel(a.memory_per_device_bytes, b.memory_per_device_bytes) > worst_mem)
        worst_mem = rel(a.memory_per_device_bytes, b.memory_per_device_bytes);
    compared++;
    return 1;
}

static int agree_fn(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, const wf_plan *p,
                    int64_t batch, void *user)
{
    (void)user;
    return agree(m, c, ctx, p, batch);
}

static void test_calibration_rows(void **state)
{
    (void)state;
    char path[512];
    static wf_calib_data d, h;
    sweep_data_file("calibration-korthikanti2022.json", path, sizeof path);
    assert_int_equal(wf_calib_load(path, &d), WF_OK);
    sweep_calib_rows(&d, "dgx-a100", agree_fn, NULL);
    sweep_data_file("calibration-h100.json", path, sizeof path);
    assert_int_equal(wf_calib_load_h100(path, &h), WF_OK);
    sweep_calib_rows(&h, "dgx-h100", agree_fn, NULL);
    fprintf(stderr, "calibration rows: %d plans, worst time %.2e, part %.2e, memory %.2e\n", compared, worst_time,
            worst_part, worst_mem);
    print_parts();
}

static void test_sweep(void **state)
{
    (void)state;
    int before = compared, tried = 0;
    sweep_each(agree_fn, NULL, &tried);
    int swept = compared - before;
    fprintf(stderr, "sweep: %d plans compared (%d tried), worst time %.2e, part %.2e, memory %.2e\n", swept, tried,
            worst_time, worst_part, worst_mem);
    print_parts();
    assert_true(swept >= 200);
}

/* Recomputation per stage and by block (rc_layers): the lowering carries it
 * in the op-level plan's keys, and both compositions must cost it alike. */
static void test_per_stage_recompute(void **state)
{
    (void)state;
    static const struct {
        const char *model, *cluster, *plan;
        int64_t batch;
    } cases[] = {
        {"gpt3-175b", "dgx-a100:nodes=32", "dp=8,tp=8,pp=4,mbs=1,recompute=full/selective/none/none", 512},
        {"gpt3-175b", "dgx-a100:nodes=32", "dp=8,tp=8,pp=4,mbs=1,recompute=full,rc_layers=6/4/2/0,sp=1", 512},
        {"gpt3-175b", "dgx-a100:nodes=32", "dp=8,tp=8,pp=4,mbs=1,vpp=2,recompute=full,rc_layers=5,sp=1,zero=1", 512},
        {"gpt3-175b", "dgx-a100:nodes=16", "dp=2,tp=8,pp=8,mbs=2,vpp=3,recompute=full*2/selective*6,rc_layers=3/1/0*6,"
                                           "sw=megatron-2022", 256},
        {"megatron-22b", "dgx-a100:nodes=1", "dp=1,tp=4,pp=2,mbs=1,recompute=full/none,rc_layers=12", 16},
        {"megatron-22b", "dgx-a100:nodes=1", "dp=2,tp=4,pp=1,mbs=2,recompute=full,rc_layers=20,zero=3", 16},
        {"llama2-7b", "dgx-a100:nodes=1", "dp=2,tp=2,pp=2,mbs=1,recompute=selective/none,pipe=gpipe", 16},
    };
    int before = compared;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        wf_model_config m;
        wf_cluster c;
        wf_plan p;
        assert_int_equal(wf_model_lookup(cases[k].model, &m), WF_OK);
        assert_int_equal(wf_cluster_lookup(cases[k].cluster, &c), WF_OK);
        if (wf_plan_parse(cases[k].plan, &p) != WF_OK)
            fprintf(stderr, "%s: %s\n", cases[k].plan, wf_last_error());
        assert_int_equal(wf_plan_parse(cases[k].plan, &p), WF_OK);
        wf_cost_ctx *ctx = NULL;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        int ok = agree(&m, &c, ctx, &p, cases[k].batch);
        if (!ok)
            fprintf(stderr, "%s: %s\n", cases[k].plan, wf_last_error());
        assert_true(ok);
        wf_cost_ctx_free(ctx);
    }
    fprintf(stderr, "per-stage recomputation: %d plans, worst time %.2e, part %.2e, memory %.2e\n",
            compared - before, worst_time, worst_part, worst_mem);
}

/* Megatron's padded vocabulary (megatron/core/tokenizers/utils/
 * build_tokenizer.py vocab_size_with_padding at Megatron-LM d98e8a64: a
 * multiple of 128 x tp): BERT's 30522 at tp=4 is 30720, GPT-2's 50257 at tp=8
 * 51200 (GPT-3's table in zoo.c); a vocabulary tp does not divide lowers
 * as the padded model, whose op-level plan costs as its whole-model plan. */
static void test_megatron_vocab(void **state)
{
    (void)state;
    assert_int_equal(wf_megatron_padded_vocab(30522, 4, 128), 30720);
    assert_int_equal(wf_megatron_padded_vocab(50257, 8, 128), 51200);
    assert_int_equal(wf_megatron_padded_vocab(30522, 1, 128), 30592);
    assert_int_equal(wf_megatron_padded_vocab(51200, 8, 128), 51200);
    wf_model_config m, pm;
    wf_cluster c;
    wf_plan p;
    assert_int_equal(wf_model_lookup("bert-base-pretrain", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("v100-ib100", &c), WF_OK);
    assert_int_equal(wf_megatron_pad_model(&m, 2, &pm), 0); /* 2 divides 30522 */
    assert_int_equal(pm.vocab, 30522);
    assert_int_equal(wf_megatron_pad_model(&m, 4, &pm), 1);
    assert_int_equal(pm.vocab, 30720);
    assert_string_equal(pm.name, "bert-base-pretrain:vocab=30720");
    wf_model_config named;
    assert_int_equal(wf_model_lookup(pm.name, &named), WF_OK);
    assert_int_equal(named.vocab, 30720);
    assert_int_equal(wf_plan_parse("dp=16,tp=4", &p), WF_OK);
    wf_layout ol;
    wf_layout_init(&ol);
    /* The model as given does not lower at tp=4; the padded one does. */
    assert_int_not_equal(wf_plan_lower(&m, &c, &p, 512, &ol), WF_OK);
    wf_layout_free(&ol);
    wf_layout_init(&ol);
    assert_int_equal(wf_plan_lower(&pm, &c, &p, 512, &ol), WF_OK);
    const char *emb = wf_layout_sig_of(&ol, "embed.tokens");
    assert_non_null(emb);
    wf_layout_free(&ol);
    /* Costed as the padded model's op-level plan, and as its whole-model
     * plan: the same within 1% (their tensor-parallel parts differ by 2%
     * here, 0.1% of the iteration). */
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&pm, &c, &ctx), WF_OK);
    wf_estimate a, b;
    wf_plan q;
    assert_int_equal(wf_estimate_plan(ctx, &p, 512, &a), WF_OK);
    wf_layout_init(&ol);
    assert_int_equal(wf_plan_lower(&pm, &c, &p, 512, &ol), WF_OK);
    assert_int_equal(wf_layout_cost(&pm, &c, ctx, 512, &ol, &b, &q), WF_OK);
    assert_true(rel(a.iteration_time_s, b.iteration_time_s) < 0.01);
    assert_true(rel(a.memory_per_device_bytes, b.memory_per_device_bytes) < 0.01);
    wf_layout_free(&ol);
    wf_cost_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_megatron_vocab),
        cmocka_unit_test(test_per_stage_recompute),
        cmocka_unit_test(test_calibration_rows),
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
