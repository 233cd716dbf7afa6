/* A deterministic sweep of whole-model plans over the zoo's transformers,
 * CNNs and MLPs (dp, tp, pp, mbs, vpp, recompute, zero, sp, overlap, pipeline
 * and gradient schedules, framework profile), shared by the tests that check
 * one model of a plan against another on many plans (test_onecost: the
 * estimate of a plan and of its lowering; test_simol: the simulation of the
 * lowering). Header-only: each test is one translation unit; include it
 * after cmocka.h (sweep_each asserts). */
#ifndef WEFT_TESTS_PLAN_SWEEP_H
#define WEFT_TESTS_PLAN_SWEEP_H

#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>

#include "cost/cost-impl.h"
#include "weft/cluster.h"
#include "weft/cost.h"
#include "weft/models.h"
#include "weft/plan.h"

typedef struct {
    const char *model, *cluster;
    int64_t batch;
    int transformer;
} sweep_case;

static const sweep_case sweep_cases[] = {
    {"gpt3-1.3b", "dgx-a100:nodes=2", 64, 1},
    {"gpt2", "dgx-a100:nodes=1", 32, 1},
    {"llama2-7b:dtype=bf16", "dgx-h100:nodes=2", 64, 1},
    {"megatron-22b", "dgx-a100:nodes=2", 16, 1},
    {"bert-base:seq=128", "v100-ib100:kernel_model=0", 256, 1},
    {"gpt3-175b", "dgx-a100:nodes=8", 64, 1},
    {"resnet50", "dgx-a100:nodes=1", 256, 0},
    {"vgg16", "v100-ib100:kernel_model=0", 256, 0},
    {"mlp:sizes=1024-4096-4096-10", "dgx-a100:nodes=1", 512, 0},
};
#define SWEEP_NCASES ((int)(sizeof sweep_cases / sizeof sweep_cases[0]))
/* Devices a sweep plan uses at most. */
#define SWEEP_MAX_DEVICES 16

/* A linear congruential generator: the same plans on every run. */
typedef struct {
    uint64_t state;
} sweep_rng;

#define SWEEP_RNG_INIT {0x9E3779B97F4A7C15ull}

static inline int sweep_pick(sweep_rng *r, int n)
{
    r->state = r->state * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((r->state >> 33) % (uint64_t)n);
}

/* Draws the next plan of case sc on `devices` devices into *p: 1, or 0 when
 * its tp x pp does not divide them (skip it; the draws go on). */
static inline int sweep_draw(sweep_rng *r, const sweep_case *sc, int64_t devices, wf_plan *p)
{
    static const int tps[] = {1, 2, 4, 8}, pps[] = {1, 2, 4}, mbss[] = {1, 2, 4}, vpps[] = {1, 2};
    wf_plan_default(p);
    p->tp = sc->transformer ? tps[sweep_pick(r, 4)] : 1;
    p->pp = pps[sweep_pick(r, 3)];
    p->mbs = mbss[sweep_pick(r, 3)];
    p->vpp = sc->transformer ? vpps[sweep_pick(r, 2)] : 1;
    p->sp = sc->transformer && p->tp > 1 ? sweep_pick(r, 2) : 0;
    p->recompute = (wf_recompute)(sc->transformer ? sweep_pick(r, 3) : 2 * sweep_pick(r, 2));
    p->zero = sweep_pick(r, 4);
    p->overlap = sweep_pick(r, 4) != 0;
    p->pipe = sweep_pick(r, 4) == 0 ? WF_PIPE_GPIPE : WF_PIPE_1F1B;
    p->comm.kind = sweep_pick(r, 3) == 0 ? WF_COMM_DEAR : WF_COMM_DDP;
    if (sweep_pick(r, 3) == 0)
        p->sw = WF_SW_MEGATRON_2022;
    if (p->vpp > 1 && p->pp == 1)
        p->vpp = 1;
    int64_t per = (int64_t)p->tp * p->pp;
    if (devices % per != 0)
        return 0;
    p->dp = (int)(devices / per);
    return 1;
}

/* Draws the sweep (up to 30 plans of each case, 400 draws at most) and hands
 * each plan to fn with its case's model, cluster, cost context and batch;
 * fn returns 1 when it used the plan. *tried counts the plans drawn. */
typedef int (*sweep_fn)(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, const wf_plan *p,
                        int64_t batch, void *user);

static inline void sweep_each(sweep_fn fn, void *user, int *tried)
{
    sweep_rng rng = SWEEP_RNG_INIT;
    for (int k = 0; k < SWEEP_NCASES; k++) {
        const sweep_case *sc = &sweep_cases[k];
        wf_model_config m;
        wf_cluster c;
        assert_int_equal(wf_model_lookup(sc->model, &m), WF_OK);
        assert_int_equal(wf_cluster_lookup(sc->cluster, &c), WF_OK);
        wf_cost_ctx *ctx = NULL;
        assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
        const int64_t devices = wf_cluster_devices(&c) < SWEEP_MAX_DEVICES ? wf_cluster_devices(&c) : SWEEP_MAX_DEVICES;
        int got = 0;
        for (int n = 0; n < 400 && got < 30; n++) {
            wf_plan p;
            if (!sweep_draw(&rng, sc, devices, &p))
                continue;
            (*tried)++;
            got += fn(&m, &c, ctx, &p, sc->batch, user);
        }
        wf_cost_ctx_free(ctx);
    }
}

/* tests/data/NAME under WEFT_SOURCE_DIR (CTest sets it), into buf. */
static inline void sweep_data_file(const char *name, char *buf, size_t cap)
{
    const char *root = getenv("WEFT_SOURCE_DIR");
    snprintf(buf, cap, "%s%stests/data/%s", root ? root : "", root ? "/" : "", name);
}

/* Hands every row of a calibration table to fn on cluster preset `base`
 * with the row's node count; each must be used (fn returns 1). */
static inline void sweep_calib_rows(const wf_calib_data *d, const char *base, sweep_fn fn, void *user)
{
    for (int i = 0; i < d->ntime; i++) {
        const wf_calib_row *r = &d->time[i];
        char spec[96];
        snprintf(spec, sizeof spec, "%s:nodes=%lld", base, (long long)((wf_plan_devices(&r->plan) + 7) / 8));
        wf_cluster c;
        assert_int_equal(wf_cluster_lookup(spec, &c), WF_OK);
        const wf_model_config *m = &d->models[r->model_index];
        wf_cost_ctx *ctx = NULL;
        assert_int_equal(wf_cost_ctx_create(m, &c, &ctx), WF_OK);
        assert_int_equal(fn(m, &c, ctx, &r->plan, r->batch, user), 1);
        wf_cost_ctx_free(ctx);
    }
}

#endif
