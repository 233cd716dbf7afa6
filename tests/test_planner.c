/* Planner: the outer search (src/search/outer.c) and the pipeline-stage DP
 * (src/search/pipeline_dp.c).
 *
 * References: the winner re-estimated from scratch (identical numbers); an
 * independent brute force written here (every plan of a small space, scored
 * and ranked naively) for the best plan and the frontier; the exhaustive mode
 * of the search for the prunings; the published hand-tuned plans of
 * Korthikanti et al. 2022 (shared/data/calibration-korthikanti2022.json) for
 * quality; an enumeration of every cut for the pipeline DP. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/search.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void setup_mc(const char *model, const char *cluster, wf_model_config *m, wf_cluster *c)
{
    assert_int_equal(wf_model_lookup(model, m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, c), WF_OK);
}

static void assert_same_estimate(const wf_estimate *a, const wf_estimate *b)
{
    assert_true(a->iteration_time_s == b->iteration_time_s);
    assert_true(a->samples_per_s == b->samples_per_s);
    assert_true(a->model_flops_per_iteration == b->model_flops_per_iteration);
    assert_true(a->tflops_per_device == b->tflops_per_device);
    assert_true(a->mfu == b->mfu);
    assert_true(a->memory_per_device_bytes == b->memory_per_device_bytes);
    assert_true(a->mem_weights_bytes == b->mem_weights_bytes);
    assert_true(a->mem_activation_bytes == b->mem_activation_bytes);
    assert_true(a->mem_buffer_bytes == b->mem_buffer_bytes);
    assert_int_equal(a->fits, b->fits);
    assert_memory_equal(&a->breakdown, &b->breakdown, sizeof a->breakdown);
}

static void plan_text(const wf_plan *p, char *buf)
{
    wf_plan_format(p, buf, 256);
}

/* ---- the winner is what `weft estimate` says ------------------------------------ */

static void test_winner_reestimated(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc("gpt3-175b", "dgx-a100:nodes=8", &m, &c);
    wf_search_outer_result r;
    assert_int_equal(wf_search_outer(&m, &c, 64, NULL, &r), WF_OK);
    assert_true(r.ntop == 10);
    assert_true(r.top[0].est.fits);
    /* A fresh context, as `weft estimate` makes one. */
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    for (int i = 0; i < r.ntop; i++) {
        wf_estimate e;
        assert_int_equal(wf_estimate_plan(ctx, &r.top[i].plan, 64, &e), WF_OK);
        assert_same_estimate(&e, &r.top[i].est);
        assert_int_equal(wf_plan_validate(&r.top[i].plan, &m, &c, 64), WF_OK);
        assert_int_equal(wf_plan_devices(&r.top[i].plan), 64);
    }
    for (int i = 0; i < r.npareto; i++) {
        wf_estimate e;
        assert_int_equal(wf_estimate_plan(ctx, &r.pareto[i].plan, 64, &e), WF_OK);
        assert_same_estimate(&e, &r.pareto[i].est);
        assert_int_equal(wf_plan_validate(&r.pareto[i].plan, &m, &c, 64), WF_OK);
    }
    /* The plan string round-trips to the same plan and the same numbers. */
    char text[256];
    plan_text(&r.top[0].plan, text);
    wf_plan p;
    assert_int_equal(wf_plan_parse(text, &p), WF_OK);
    wf_estimate e;
    assert_int_equal(wf_estimate_plan(ctx, &p, 64, &e), WF_OK);
    assert_same_estimate(&e, &r.top[0].est);
    wf_cost_ctx_free(ctx);
    assert_true(r.searched > 0 && r.searched <= r.space);
    assert_int_equal(r.pruned, r.space - r.searched);
    wf_search_outer_result_free(&r);
}

/* ---- an independent brute force ---------------------------------------------------- */

typedef struct {
    wf_plan plan;
    wf_estimate est;
} cand;

/* Issue 26: of plans equal in time and memory, the one turning on fewer
 * features is shown (ZeRO counts its stage, recomputation its kind; the
 * brute force's plans have no per-stage lists, cp, ep or fp8). */
static int features(const wf_plan *p)
{
    return p->zero + (int)p->recompute + p->sp + (p->vpp > 1) + !p->overlap + (p->pipe == WF_PIPE_GPIPE);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->est.iteration_time_s != b->est.iteration_time_s)
        return a->est.iteration_time_s < b->est.iteration_time_s ? -1 : 1;
    if (a->est.memory_per_device_bytes != b->est.memory_per_device_bytes)
        return a->est.memory_per_device_bytes < b->est.memory_per_device_bytes ? -1 : 1;
    if (features(&a->plan) != features(&b->plan))
        return features(&a->plan) < features(&b->plan) ? -1 : 1;
    char sa[256], sb[256];
    plan_text(&a->plan, sa);
    plan_text(&b->plan, sb);
    return strcmp(sa, sb);
}

/* Every plan with dp x tp x pp = devices (any tp), every mbs, vpp, recompute,
 * sp, zero, overlap and pipeline schedule, scored; the ones that fit budget. */
static cand *brute_force(const wf_model_config *m, const wf_cluster *c, int64_t devices,
                         int64_t batch, double budget, int *nout)
{
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(m, c, &ctx), WF_OK);
    int cap = 1 << 16, n = 0;
    cand *v = malloc((size_t)cap * sizeof *v);
    assert_non_null(v);
    for (int tp = 1; tp <= devices; tp++)
        for (int pp = 1; pp <= devices / tp; pp++) {
            if (devices % ((int64_t)tp * pp) != 0)
                continue;
            int dp = (int)(devices / tp / pp);
            for (int mbs = 1; mbs <= batch; mbs++)
                for (int vpp = 1; vpp <= 64; vpp++)
                    for (int rc = 0; rc < 3; rc++)
                        for (int sp = 0; sp < 2; sp++)
                            for (int zero = 0; zero < 4; zero++)
                                for (int ov = 0; ov < 2; ov++)
                                    for (int pipe = 0; pipe < 2; pipe++) {
                                        wf_plan p;
                                        wf_plan_default(&p);
                                        p.dp = dp;
                                        p.tp = tp;
                                        p.pp = pp;
                                        p.mbs = mbs;
                                        p.vpp = vpp;
                                        p.recompute = (wf_recompute)rc;
                                        p.sp = sp;
                                        p.zero = zero;
                                        p.overlap = ov;
                                        p.pipe = pipe ? WF_PIPE_GPIPE : WF_PIPE_1F1B;
                                        wf_estimate e;
                                        wf_status st = wf_estimate_plan(ctx, &p, batch, &e);
                                        if (st == WF_INVAL)
                                            continue;
                                        assert_int_equal(st, WF_OK);
                                        if (!e.fits || e.memory_per_device_bytes > budget)
                                            continue;
                                        if (n == cap) {
                                            cap *= 2;
                                            v = realloc(v, (size_t)cap * sizeof *v);
                                            assert_non_null(v);
                                        }
                                        v[n].plan = p;
                                        v[n].est = e;
                                        n++;
                                    }
        }
    wf_cost_ctx_free(ctx);
    qsort(v, (size_t)n, sizeof *v, cand_cmp);
    *nout = n;
    return v;
}

/* The naive frontier of a sorted candidate list: keep strictly decreasing memory. */
static int naive_frontier(const cand *v, int n, cand *out)
{
    int k = 0;
    double minmem = INFINITY;
    for (int i = 0; i < n; i++)
        if (v[i].est.memory_per_device_bytes < minmem) {
            minmem = v[i].est.memory_per_device_bytes;
            out[k++] = v[i];
        }
    return k;
}

static void check_against_brute_force(const char *model, const char *cluster, int64_t batch,
                                      double budget_gib)
{
    wf_model_config m;
    wf_cluster c;
    setup_mc(model, cluster, &m, &c);
    int64_t devices = wf_cluster_devices(&c);
    double budget = budget_gib > 0 ? budget_gib * GIB : c.dev.mem_bytes;
    int n = 0;
    cand *all = brute_force(&m, &c, devices, batch, budget, &n);
    assert_true(n > 0);
    cand *front = malloc((size_t)n * sizeof *front);
    assert_non_null(front);
    int nf = naive_frontier(all, n, front);
    /* The top list holds one plan per (time, memory) point: the first of
     * each run of equals in the sorted list. */
    cand *uniq = malloc((size_t)n * sizeof *uniq);
    assert_non_null(uniq);
    int nu = 0;
    for (int i = 0; i < n; i++)
        if (nu == 0 || all[i].est.iteration_time_s != uniq[nu - 1].est.iteration_time_s ||
            all[i].est.memory_per_device_bytes != uniq[nu - 1].est.memory_per_device_bytes)
            uniq[nu++] = all[i];

    for (int exhaustive = 0; exhaustive < 2; exhaustive++) {
        wf_search_outer_opts o;
        wf_search_outer_opts_default(&o);
        o.top_k = 20;
        o.max_memory_bytes = budget_gib > 0 ? budget : 0;
        o.tp_cross_node = 1; /* the brute force takes every tp */
        o.exhaustive = exhaustive;
        o.uniform_recompute = 1; /* the brute force recomputes every layer alike */
        o.even_stages = 1;       /* and splits the layers evenly */
        wf_search_outer_result r;
        assert_int_equal(wf_search_outer(&m, &c, batch, &o, &r), WF_OK);
        /* The best: the same numbers; exhaustively also the same plan. */
        assert_true(r.top[0].est.iteration_time_s == all[0].est.iteration_time_s);
        assert_true(r.top[0].est.memory_per_device_bytes == all[0].est.memory_per_device_bytes);
        char a[256], b[256];
        plan_text(&r.top[0].plan, a);
        plan_text(&all[0].plan, b);
        if (exhaustive) {
            assert_string_equal(a, b);
            assert_int_equal(r.fitting, n);
            assert_int_equal(r.ntop, nu < 20 ? nu : 20);
            for (int i = 0; i < r.ntop; i++) {
                plan_text(&r.top[i].plan, a);
                plan_text(&uniq[i].plan, b);
                assert_string_equal(a, b);
            }
        } else {
            assert_true(r.searched < r.space); /* the prunings did something */
        }
        /* The frontier: the same (time, memory) points. */
        assert_int_equal(r.npareto, nf);
        for (int i = 0; i < nf; i++) {
            assert_true(r.pareto[i].est.iteration_time_s == front[i].est.iteration_time_s);
            assert_true(r.pareto[i].est.memory_per_device_bytes == front[i].est.memory_per_device_bytes);
        }
        /* The top K is sorted and every entry is a plan of the brute force. */
        for (int i = 1; i < r.ntop; i++)
            assert_true(r.top[i - 1].est.iteration_time_s <= r.top[i].est.iteration_time_s);
        wf_search_outer_result_free(&r);
    }
    free(front);
    free(uniq);
    free(all);
}

static void test_brute_force_gpt(void **state)
{
    (void)state;
    /* gpt3-1.3b on 16 GPUs: tp up to 16, pp | 24. */
    check_against_brute_force("gpt3-1.3b", "dgx-a100:nodes=2", 32, 0);
    /* A budget that makes memory bind. */
    check_against_brute_force("gpt3-1.3b", "dgx-a100:nodes=2", 32, 20);
    check_against_brute_force("gpt3-2.7b", "dgx-a100:nodes=1", 16, 30);
}

static void test_brute_force_cnn(void **state)
{
    (void)state;
    check_against_brute_force("resnet50", "dgx-a100:nodes=1", 64, 0);
    check_against_brute_force("vgg16", "v100-10gbe:nodes=2,kernel_model=0", 32, 0);
    /* On the V100 device model the best is GPipe (pp=4, 0.017036 s against
     * 1F1B's 0.017183 s): a CNN's stages have unequal times, so the pruned
     * search must keep GPipe for it. */
    check_against_brute_force("vgg16", "v100-10gbe:nodes=2,kernel_model=1", 32, 0);
}

/* ---- pruning against the exhaustive mode on the large spaces --------------------------- */

static void compare_pruned_comm(const char *model, const char *cluster, int64_t batch,
                                double budget_gib, int search_comm)
{
    wf_model_config m;
    wf_cluster c;
    setup_mc(model, cluster, &m, &c);
    wf_search_outer_result r[2];
    for (int ex = 0; ex < 2; ex++) {
        wf_search_outer_opts o;
        wf_search_outer_opts_default(&o);
        o.exhaustive = ex;
        o.search_comm = search_comm;
        o.max_memory_bytes = budget_gib * GIB;
        assert_int_equal(wf_search_outer(&m, &c, batch, &o, &r[ex]), WF_OK);
    }
    assert_true(r[0].searched < r[1].searched);
    assert_int_equal(r[0].space, r[1].space);
    /* The same numbers; the plan may differ only in a key that changes
     * nothing (overlap with dp = 1, which the pruned search does not vary). */
    assert_same_estimate(&r[0].top[0].est, &r[1].top[0].est);
    wf_plan p0 = r[0].top[0].plan, p1 = r[1].top[0].plan;
    if (p0.dp == 1)
        p0.overlap = p1.overlap;
    char a[256], b[256];
    plan_text(&p0, a);
    plan_text(&p1, b);
    assert_string_equal(a, b);
    assert_int_equal(r[0].npareto, r[1].npareto);
    for (int i = 0; i < r[0].npareto; i++) {
        assert_true(r[0].pareto[i].est.iteration_time_s == r[1].pareto[i].est.iteration_time_s);
        assert_true(r[0].pareto[i].est.memory_per_device_bytes ==
                    r[1].pareto[i].est.memory_per_device_bytes);
    }
    wf_search_outer_result_free(&r[0]);
    wf_search_outer_result_free(&r[1]);
}

static void compare_pruned(const char *model, const char *cluster, int64_t batch, double budget_gib)
{
    compare_pruned_comm(model, cluster, batch, budget_gib, 0);
}

static void test_pruning_keeps_best(void **state)
{
    (void)state;
    compare_pruned_comm("gpt3-13b", "dgx-a100:nodes=4", 256, 0, 1);
    compare_pruned_comm("resnet50", "v100-10gbe", 512, 0, 1);
    compare_pruned("gpt3-175b", "dgx-a100:nodes=8", 64, 0);
    compare_pruned("gpt3-175b", "dgx-a100:nodes=8", 64, 60);
    compare_pruned("gpt3-175b", "dgx-a100:nodes=128", 1536, 0);
    compare_pruned("megatron-1t", "dgx-a100:nodes=64", 512, 0);
    compare_pruned("llama2-70b", "dgx-a100:nodes=8", 128, 0);
    compare_pruned("bert-large", "dgx-a100:nodes=2", 256, 0);
}

/* ---- the frontier --------------------------------------------------------------------------- */

/* uniform: the space of uniform recomputation, where the frontier answers
 * every budget exactly; otherwise the block and per-stage candidates are
 * derived for the budget searched (the fewest layers that fit it), so a
 * tighter budget may find a plan faster than the wider search's frontier
 * point, never a slower one. */
static void check_pareto(int uniform)
{
    wf_model_config m;
    wf_cluster c;
    setup_mc("gpt3-175b", "dgx-a100:nodes=8", &m, &c);
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    o.top_k = 200;
    o.uniform_recompute = uniform;
    wf_search_outer_result r;
    assert_int_equal(wf_search_outer(&m, &c, 64, &o, &r), WF_OK);
    assert_true(r.npareto >= 3);
    /* The fastest plan is the frontier's first point. */
    assert_same_estimate(&r.pareto[0].est, &r.top[0].est);
    for (int i = 0; i < r.npareto; i++) {
        const wf_estimate *e = &r.pareto[i].est;
        assert_true(e->fits && e->memory_per_device_bytes <= c.dev.mem_bytes);
        if (i > 0) {
            assert_true(r.pareto[i - 1].est.iteration_time_s <= e->iteration_time_s);
            assert_true(r.pareto[i - 1].est.memory_per_device_bytes > e->memory_per_device_bytes);
        }
        /* Non-dominated: no plan of the top 200 is at least as good on both
         * axes and better on one. */
        for (int k = 0; k < r.ntop; k++) {
            const wf_estimate *f = &r.top[k].est;
            int dominates = f->iteration_time_s <= e->iteration_time_s &&
                            f->memory_per_device_bytes <= e->memory_per_device_bytes &&
                            (f->iteration_time_s < e->iteration_time_s ||
                             f->memory_per_device_bytes < e->memory_per_device_bytes);
            assert_false(dominates);
        }
    }
    /* The frontier answers every budget: searching with a frontier point's
     * memory as the budget finds that point's time. */
    for (int i = 0; i < r.npareto; i += 3) {
        wf_search_outer_opts ob;
        wf_search_outer_opts_default(&ob);
        ob.max_memory_bytes = r.pareto[i].est.memory_per_device_bytes;
        ob.uniform_recompute = uniform;
        wf_search_outer_result rb;
        assert_int_equal(wf_search_outer(&m, &c, 64, &ob, &rb), WF_OK);
        if (uniform)
            assert_true(rb.top[0].est.iteration_time_s == r.pareto[i].est.iteration_time_s);
        else
            assert_true(rb.top[0].est.iteration_time_s <= r.pareto[i].est.iteration_time_s);
        assert_true(rb.top[0].est.memory_per_device_bytes <= ob.max_memory_bytes);
        wf_search_outer_result_free(&rb);
    }
    wf_search_outer_result_free(&r);
}

static void test_pareto(void **state)
{
    (void)state;
    check_pareto(1);
    check_pareto(0);
}

static void test_max_memory(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc("gpt3-175b", "dgx-a100:nodes=8", &m, &c);
    const double budgets[] = {80, 75, 70, 65, 60, 55, 52, 50};
    double prev = 0;
    for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
        wf_search_outer_opts o;
        wf_search_outer_opts_default(&o);
        o.max_memory_bytes = budgets[i] * GIB;
        wf_search_outer_result r;
        assert_int_equal(wf_search_outer(&m, &c, 64, &o, &r), WF_OK);
        assert_true(r.budget_bytes == budgets[i] * GIB);
        for (int k = 0; k < r.ntop; k++)
            assert_true(r.top[k].est.memory_per_device_bytes <= budgets[i] * GIB);
        assert_true(r.top[0].est.iteration_time_s >= prev);
        prev = r.top[0].est.iteration_time_s;
        wf_search_outer_result_free(&r);
    }
}

static void test_nofit_and_invalid(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc("gpt3-175b", "dgx-a100:nodes=8", &m, &c);
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    o.max_memory_bytes = 10 * GIB;
    wf_search_outer_result r;
    assert_int_equal(wf_search_outer(&m, &c, 64, &o, &r), WF_NOFIT);
    assert_non_null(strstr(wf_last_error(), "smallest memory"));
    assert_non_null(strstr(wf_last_error(), "10.00 GiB"));
    assert_true(r.has_min);
    assert_true(r.min_memory.est.memory_per_device_bytes > 10 * GIB);
    assert_int_equal(r.ntop, 0);
    wf_search_outer_result_free(&r);

    /* 175B on one node: weights alone exceed the memory everywhere. */
    setup_mc("gpt3-175b", "dgx-a100:nodes=1", &m, &c);
    assert_int_equal(wf_search_outer(&m, &c, 8, NULL, &r), WF_NOFIT);
    wf_search_outer_result_free(&r);

    /* More devices than the cluster has; a bad batch; nothing divides. */
    setup_mc("gpt3-1.3b", "dgx-a100:nodes=1", &m, &c);
    wf_search_outer_opts_default(&o);
    o.devices = 16;
    assert_int_equal(wf_search_outer(&m, &c, 32, &o, &r), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "devices=16"));
    wf_search_outer_result_free(&r);
    assert_int_equal(wf_search_outer(&m, &c, 0, NULL, &r), WF_INVAL);
    wf_search_outer_result_free(&r);
    o.devices = 7; /* tp = pp = 1 (24 layers, 8 per node), dp = 7 does not divide 32 */
    assert_int_equal(wf_search_outer(&m, &c, 32, &o, &r), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "no plan divides"));
    wf_search_outer_result_free(&r);
    o.devices = 0;
    o.top_k = 0;
    assert_int_equal(wf_search_outer(&m, &c, 32, &o, &r), WF_INVAL);
    wf_search_outer_result_free(&r);
}

static void test_devices_and_determinism(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc("gpt3-13b", "dgx-a100:nodes=4", &m, &c);
    /* A subset of the cluster. */
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    o.devices = 8;
    wf_search_outer_result r1, r2;
    assert_int_equal(wf_search_outer(&m, &c, 64, &o, &r1), WF_OK);
    assert_int_equal(r1.devices, 8);
    for (int i = 0; i < r1.ntop; i++)
        assert_int_equal(wf_plan_devices(&r1.top[i].plan), 8);
    assert_int_equal(wf_search_outer(&m, &c, 64, &o, &r2), WF_OK);
    assert_int_equal(r1.ntop, r2.ntop);
    assert_int_equal(r1.npareto, r2.npareto);
    assert_int_equal(r1.searched, r2.searched);
    for (int i = 0; i < r1.ntop; i++) {
        char a[256], b[256];
        plan_text(&r1.top[i].plan, a);
        plan_text(&r2.top[i].plan, b);
        assert_string_equal(a, b);
        assert_same_estimate(&r1.top[i].est, &r2.top[i].est);
    }
    /* tp stays within a node unless asked. */
    wf_search_outer_opts_default(&o);
    o.top_k = 1000;
    wf_search_outer_result r3;
    assert_int_equal(wf_search_outer(&m, &c, 64, &o, &r3), WF_OK);
    for (int i = 0; i < r3.ntop; i++)
        assert_true(r3.top[i].plan.tp <= 8);
    wf_search_outer_result_free(&r1);
    wf_search_outer_result_free(&r2);
    wf_search_outer_result_free(&r3);

    int64_t counts[16];
    setup_mc("gpt3-13b", "dgx-a100", &m, &c);
    assert_int_equal(wf_search_outer_device_counts(&c, 1, 20, counts, 16), 5);
    const int64_t want1[] = {1, 2, 4, 8, 16};
    assert_memory_equal(counts, want1, sizeof want1);
    assert_int_equal(wf_search_outer_device_counts(&c, 12, 40, counts, 16), 4);
    const int64_t want2[] = {16, 24, 32, 40};
    assert_memory_equal(counts, want2, sizeof want2);
    assert_int_equal(wf_search_outer_device_counts(&c, 500, 9999, counts, 16), 2); /* 504, 512 */
    assert_int_equal(counts[1], 512);
}

/* Searching the gradient schedules too: a superset, so never slower; each
 * plan still re-estimates to the same numbers. */
static void test_search_comm(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc("bert-large", "v100-10gbe", &m, &c);
    wf_search_outer_result r0, r1;
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    assert_int_equal(wf_search_outer(&m, &c, 512, &o, &r0), WF_OK);
    o.search_comm = 1;
    o.top_k = 100;
    assert_int_equal(wf_search_outer(&m, &c, 512, &o, &r1), WF_OK);
    assert_true(r1.space > r0.space);
    assert_true(r1.top[0].est.iteration_time_s <= r0.top[0].est.iteration_time_s);
    int kinds = 0;
    unsigned seen = 0;
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    for (int i = 0; i < r1.ntop; i++) {
        const wf_plan *p = &r1.top[i].plan;
        if (!(seen & (1u << p->comm.kind)))
            kinds++;
        seen |= 1u << p->comm.kind;
        if (p->dp == 1 || !p->overlap)
            assert_int_equal(p->comm.kind, WF_COMM_DDP);
        wf_estimate e;
        assert_int_equal(wf_estimate_plan(ctx, p, 512, &e), WF_OK);
        assert_same_estimate(&e, &r1.top[i].est);
    }
    assert_true(kinds >= 2);
    wf_cost_ctx_free(ctx);
    wf_search_outer_result_free(&r0);
    wf_search_outer_result_free(&r1);
}

static void test_non_transformer(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc("vgg16", "dgx-a100:nodes=2", &m, &c);
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    o.top_k = 50;
    wf_search_outer_result r;
    assert_int_equal(wf_search_outer(&m, &c, 256, &o, &r), WF_OK);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    for (int i = 0; i < r.ntop; i++) {
        const wf_plan *p = &r.top[i].plan;
        assert_int_equal(p->tp, 1);
        assert_int_equal(p->vpp, 1);
        assert_int_equal(p->sp, 0);
        assert_true(p->recompute != WF_RECOMPUTE_SELECTIVE);
        assert_int_equal(wf_plan_devices(p), 16);
        wf_estimate e;
        assert_int_equal(wf_estimate_plan(ctx, p, 256, &e), WF_OK);
        assert_same_estimate(&e, &r.top[i].est);
    }
    wf_cost_ctx_free(ctx);
    wf_search_outer_result_free(&r);
}

/* ---- quality: at least as fast as the published hand-tuned plans ------------------------- */

static void test_quality_calibration(void **state)
{
    (void)state;
    const char *src = getenv("WEFT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/calibration-korthikanti2022.json", src ? src : ".");
    cJSON *j = NULL;
    assert_int_equal(wf_json_read_file(path, &j), WF_OK);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "iteration_time_s");
    assert_true(cJSON_IsArray(rows));
    int nrows = 0;
    print_message("%-14s %5s %6s %-8s %12s %12s %9s  %s\n", "model", "gpus", "batch", "mode",
                  "published s", "ours s", "speedup", "our plan");
    const cJSON *row;
    cJSON_ArrayForEach(row, rows)
    {
        const char *model = cJSON_GetObjectItemCaseSensitive(row, "model")->valuestring;
        const char *mode = cJSON_GetObjectItemCaseSensitive(row, "mode")->valuestring;
#define NUM(k) ((int)cJSON_GetObjectItemCaseSensitive(row, k)->valuedouble)
        int gpus = NUM("gpus"), batch = NUM("batch");
        wf_plan pub;
        wf_plan_default(&pub);
        pub.tp = NUM("tp");
        pub.pp = NUM("pp");
        pub.dp = NUM("dp");
        pub.mbs = NUM("mbs");
        pub.vpp = NUM("vpp");
#undef NUM
        if (strcmp(mode, "full") == 0) {
            pub.recompute = WF_RECOMPUTE_FULL;
        } else {
            assert_string_equal(mode, "seqsel");
            pub.recompute = WF_RECOMPUTE_SELECTIVE;
            pub.sp = 1;
        }
        char cluster[64];
        snprintf(cluster, sizeof cluster, "dgx-a100:nodes=%d", gpus / 8);
        wf_model_config m;
        wf_cluster c;
        setup_mc(model, cluster, &m, &c);
        wf_cost_ctx *ctx = NULL;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        wf_estimate pe;
        assert_int_equal(wf_estimate_plan(ctx, &pub, batch, &pe), WF_OK);
        wf_cost_ctx_free(ctx);

        wf_search_outer_result r;
        assert_int_equal(wf_search_outer(&m, &c, batch, NULL, &r), WF_OK);
        const wf_search_outer_point *best = &r.top[0];
        char text[256];
        plan_text(&best->plan, text);
        print_message("%-14s %5d %6d %-8s %12.3f %12.3f %8.3fx  %s\n", model, gpus, batch, mode,
                      pe.iteration_time_s, best->est.iteration_time_s,
                      pe.iteration_time_s / best->est.iteration_time_s, text);
        assert_true(best->est.fits);
        assert_true(best->est.memory_per_device_bytes <= c.dev.mem_bytes);
        assert_true(best->est.iteration_time_s <= pe.iteration_time_s);
        assert_int_equal(wf_plan_devices(&best->plan), gpus);
        wf_search_outer_result_free(&r);
        nrows++;
    }
    assert_int_equal(nrows, 8);
    cJSON_Delete(j);
}

/* ---- pipeline-stage DP against every cut -------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Cost of the split given by first[] (nstages + 1 entries); *mem_ok when it fits. */
static double split_cost(int n, const double *t, const double *snd, const double *w,
                         const double *act, int S, int64_t micro, double limit, const int *first,
                         int *mem_ok, double *maxmem)
{
    double sum = 0, mx = 0;
    *mem_ok = 1;
    *maxmem = 0;
    for (int s = 0; s < S; s++) {
        double ts = 0, ws = 0, as = 0;
        for (int i = first[s]; i < first[s + 1]; i++) {
            ts += t[i];
            ws += w[i];
            as += act[i];
        }
        if (first[s + 1] < n && snd)
            ts += snd[first[s + 1] - 1];
        double inflight = (double)(S - s < micro ? S - s : micro);
        double mem = ws + as * inflight;
        if (limit > 0 && mem > limit)
            *mem_ok = 0;
        if (mem > *maxmem)
            *maxmem = mem;
        sum += ts;
        if (ts > mx)
            mx = ts;
    }
    return sum + (double)(micro - 1) * mx;
}

static void test_pipeline_dp(void **state)
{
    (void)state;
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + (int)(urand() * 9);
        int S = 1 + (int)(urand() * (n < 5 ? n : 5));
        int64_t micro = (int64_t)1 << (int)(urand() * 4);
        double t[16], snd[16], w[16], act[16];
        for (int i = 0; i < n; i++) {
            t[i] = 0.1 + urand();
            snd[i] = 0.3 * urand();
            w[i] = urand();
            act[i] = urand();
        }
        int use_send = trial % 2, use_mem = (trial / 2) % 2;
        double limit = use_mem ? 0.8 + 2.0 * urand() : 0;
        /* Every cut: stage boundaries are a (S-1)-subset of {1..n-1}. */
        double best = INFINITY;
        int first[17];
        for (unsigned mask = 0; mask < (1u << (n - 1)); mask++) {
            if (__builtin_popcount(mask) != S - 1)
                continue;
            int k = 0;
            first[k++] = 0;
            for (int i = 1; i < n; i++)
                if (mask & (1u << (i - 1)))
                    first[k++] = i;
            first[k] = n;
            int ok;
            double mm;
            double cost = split_cost(n, t, use_send ? snd : NULL, w, act, S, micro, limit, first, &ok, &mm);
            if (ok && cost < best)
                best = cost;
        }
        wf_stage_plan sp;
        wf_status st = wf_pipeline_dp(n, t, use_send ? snd : NULL, w, act, S, micro, limit, &sp);
        if (best == INFINITY) {
            assert_int_equal(st, WF_NOFIT);
            continue;
        }
        assert_int_equal(st, WF_OK);
        assert_int_equal(sp.nstages, S);
        assert_true(fabs(sp.time_s - best) <= 1e-12 * best);
        /* The split returned costs what it says and fits. */
        assert_int_equal(sp.first[0], 0);
        assert_int_equal(sp.first[S], n);
        for (int s = 0; s < S; s++)
            assert_true(sp.first[s] < sp.first[s + 1]);
        int ok;
        double mm;
        double own = split_cost(n, t, use_send ? snd : NULL, w, act, S, micro, limit, sp.first, &ok, &mm);
        assert_true(ok);
        assert_true(fabs(own - sp.time_s) <= 1e-12 * own);
        assert_true(fabs(mm - sp.max_memory_bytes) <= 1e-12 * mm + 1e-300);
    }
    /* A closed form: 8 equal layers, 4 stages, no sends: 2 layers per stage,
     * time = 4 x 2 + (m-1) x 2. */
    double t[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    wf_stage_plan sp;
    assert_int_equal(wf_pipeline_dp(8, t, NULL, NULL, NULL, 4, 16, 0, &sp), WF_OK);
    assert_true(sp.time_s == 8 + 15 * 2);
    assert_true(sp.max_stage_s == 2);
    const int want[] = {0, 2, 4, 6, 8};
    assert_memory_equal(sp.first, want, sizeof want);
    /* Bad input. */
    assert_int_equal(wf_pipeline_dp(8, t, NULL, NULL, NULL, 9, 16, 0, &sp), WF_INVAL);
    assert_int_equal(wf_pipeline_dp(8, t, NULL, NULL, NULL, 0, 16, 0, &sp), WF_INVAL);
    assert_int_equal(wf_pipeline_dp(8, t, NULL, NULL, NULL, 2, 0, 0, &sp), WF_INVAL);
    t[3] = -1;
    assert_int_equal(wf_pipeline_dp(8, t, NULL, NULL, NULL, 2, 4, 0, &sp), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "layer 3"));
}

/* ---- recomputation by block and per stage ------------------------------------------------ */

/* Where memory is tight the search finds plans that recompute some layers
 * or some stages only: each fits, and is faster than the best plan that
 * recomputes every layer alike (the search with uniform_recompute) and than
 * its own degrees with full recomputation everywhere. */
static void rc_case(const char *model, const char *cluster, int64_t batch, double budget_gib, int want_stages)
{
    wf_model_config m;
    wf_cluster c;
    setup_mc(model, cluster, &m, &c);
    wf_search_outer_result r[2];
    for (int uni = 0; uni < 2; uni++) {
        wf_search_outer_opts o;
        wf_search_outer_opts_default(&o);
        o.max_memory_bytes = budget_gib * GIB;
        o.attn = WF_ATTN_UNFUSED;
        o.uniform_recompute = uni;
        assert_int_equal(wf_search_outer(&m, &c, batch, &o, &r[uni]), WF_OK);
    }
    const wf_search_outer_point *best = &r[0].top[0];
    char text[512];
    wf_plan_format(&best->plan, text, sizeof text);
    fprintf(stderr, "%s, %.0f GiB: %s %.4f s %.2f GiB; uniform best %.4f s\n", model, budget_gib, text,
            best->est.iteration_time_s, best->est.memory_per_device_bytes / GIB, r[1].top[0].est.iteration_time_s);
    if (want_stages)
        assert_true(best->plan.rc_n == best->plan.pp);
    else
        assert_true(best->plan.rc_n == 0 && best->plan.rc_layers > 0);
    assert_true(best->est.fits && best->est.memory_per_device_bytes <= budget_gib * GIB);
    assert_true(best->est.iteration_time_s < r[1].top[0].est.iteration_time_s);
    /* The same degrees with full recomputation everywhere: slower. */
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    wf_plan full = best->plan;
    full.recompute = WF_RECOMPUTE_FULL;
    full.rc_n = 0;
    full.rc_layers = 0;
    wf_estimate e;
    assert_int_equal(wf_estimate_plan(ctx, &full, batch, &e), WF_OK);
    assert_true(best->est.iteration_time_s < e.iteration_time_s);
    /* Re-estimated from its string, the same numbers. */
    wf_plan back;
    assert_int_equal(wf_plan_parse(text, &back), WF_OK);
    assert_int_equal(wf_estimate_plan(ctx, &back, batch, &e), WF_OK);
    assert_same_estimate(&e, &best->est);
    wf_cost_ctx_free(ctx);
    wf_search_outer_result_free(&r[0]);
    wf_search_outer_result_free(&r[1]);
}

static void test_recompute_per_stage(void **state)
{
    (void)state;
    /* Block: 47 of 48 layers recomputed fits 45 GiB, selective does not. */
    rc_case("megatron-22b", "dgx-a100:nodes=1", 32, 45, 0);
    /* Per stage: the last stages hold fewer micro-batches and skip the
     * selective recomputation. */
    rc_case("gpt3-175b", "dgx-a100:nodes=8", 64, 54, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_winner_reestimated),
        cmocka_unit_test(test_brute_force_gpt),
        cmocka_unit_test(test_brute_force_cnn),
        cmocka_unit_test(test_pruning_keeps_best),
        cmocka_unit_test(test_pareto),
        cmocka_unit_test(test_max_memory),
        cmocka_unit_test(test_nofit_and_invalid),
        cmocka_unit_test(test_devices_and_determinism),
        cmocka_unit_test(test_search_comm),
        cmocka_unit_test(test_non_transformer),
        cmocka_unit_test(test_quality_calibration),
        cmocka_unit_test(test_pipeline_dp),
        cmocka_unit_test(test_recompute_per_stage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
