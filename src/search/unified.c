/* One search space on one cost model (docs/planner.md, "One search space").
 *
 * The candidates are op-level plans: layouts on a mesh with stages, and the
 * keys that are not layouts (recompute, ZeRO, the schedules, vpp). Two
 * searches propose layouts; one cost model (wf_estimate_layouts, through
 * wf_oplevel_plan_cost) ranks every candidate:
 *
 *   Megatron's layouts   the outer search (wf_outer_search) enumerates the
 *                        whole-model space (dp x tp x pp, mbs, vpp,
 *                        recompute, ZeRO, sp, overlap) on the closed form,
 *                        which is the one model on Megatron's descriptor
 *                        (tests/test_onecost.c): its fastest plans are
 *                        candidates as they are, lowered to their layouts;
 *   other layouts        the op-level search (wf_opplan_search: per-op SBP
 *                        signatures on every mesh and stage count) proposes
 *                        layouts on its own proxy objective; each is costed
 *                        by the one model under every recomputation and
 *                        ZeRO stage it can take.
 *
 * The best is the fastest that fits the one memory budget (the device's
 * memory, the reserve counted in every plan's memory); ties go to Megatron's
 * layouts. Because the outer search's best is a candidate, the result is
 * never slower than it. */
#include "weft/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wf_unified_result_free(wf_unified_result *r)
{
    if (!r)
        return;
    wf_plan_oplevel_free(&r->plan);
    memset(r, 0, sizeof *r);
}

/* Costs layouts ol under every recomputation and ZeRO stage; keeps the best
 * that fits in r (returns 1 when it replaced r's plan). */
static int try_layouts(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                       double budget, const wf_plan_oplevel *ol, wf_unified_result *r)
{
    int better = 0;
    wf_plan base;
    if (wf_plan_oplevel_keys(ol, &base) != WF_OK)
        return 0;
    for (int rc = 0; rc < 3; rc++)
        for (int z = 0; z < 4; z++) {
            wf_plan_oplevel cand;
            wf_plan_oplevel_init(&cand);
            wf_plan keys = base;
            keys.recompute = (wf_recompute)rc;
            keys.zero = z;
            wf_estimate e;
            wf_plan as;
            int ok = 0;
            if (wf_plan_oplevel_set(&cand, ol->mesh, ol->pp, ol->micro_batches) == WF_OK &&
                wf_plan_oplevel_set_keys(&cand, &keys) == WF_OK) {
                ok = 1;
                for (int i = 0; ok && i < ol->nlayouts; i++)
                    ok = wf_plan_oplevel_add_layout(&cand, ol->op[i], ol->sig[i]) == WF_OK;
                for (int i = 0; ok && i < ol->nstorage; i++)
                    ok = wf_plan_oplevel_add_storage(&cand, ol->storage_stage[i], ol->tensor[i], ol->layout[i]) ==
                         WF_OK;
                for (int s = 0; ok && s < ol->pp; s++)
                    ok = ol->stage_first[s] && wf_plan_oplevel_set_stage(&cand, s, ol->stage_first[s]) == WF_OK;
            }
            if (ok)
                ok = wf_oplevel_plan_cost(m, c, ctx, batch, &cand, &e, &as) == WF_OK;
            r->costed += ok;
            if (ok && e.memory_per_device_bytes <= budget &&
                (!r->has_best || e.iteration_time_s < r->est.iteration_time_s)) {
                wf_plan_oplevel_free(&r->plan);
                r->plan = cand;
                r->est = e;
                r->as_plan = as;
                r->has_best = 1;
                r->megatron = 0;
                better = 1;
            } else {
                wf_plan_oplevel_free(&cand);
            }
        }
    wf_clear_error();
    return better;
}

wf_status wf_unified_search(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                            const wf_unified_opts *opts, wf_unified_result *r)
{
    memset(r, 0, sizeof *r);
    wf_plan_oplevel_init(&r->plan);
    double t0 = wf_now_s();
    int64_t devices = opts && opts->devices > 0 ? opts->devices : wf_cluster_devices(c);
    double budget = opts && opts->max_memory_bytes > 0 ? opts->max_memory_bytes : c->dev.mem_bytes;
    r->budget_bytes = budget;
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cost_ctx_create(m, c, &ctx);
    if (st != WF_OK)
        return st;

    /* Megatron's layouts: the outer search's best, lowered. */
    wf_outer_opts oo;
    wf_outer_opts_default(&oo);
    oo.devices = devices;
    oo.max_memory_bytes = budget;
    oo.top_k = 1;
    wf_outer_result orr;
    wf_status ost = wf_outer_search(m, c, batch, &oo, &orr);
    if (ost == WF_OK && orr.ntop > 0) {
        r->outer_best_s = orr.top[0].est.iteration_time_s;
        r->has_outer = 1;
        if (wf_plan_lower(m, c, &orr.top[0].plan, batch, &r->plan) == WF_OK) {
            r->est = orr.top[0].est;
            r->as_plan = orr.top[0].plan;
            r->has_best = 1;
            r->megatron = 1;
        } else {
            wf_plan_oplevel_free(&r->plan);
            wf_plan_oplevel_init(&r->plan);
        }
    }
    wf_outer_result_free(&orr);
    wf_clear_error();

    /* Other layouts: the op-level search's best on every stage count, and
     * without pipelining. */
    for (int pass = 0; pass < 2; pass++) {
        wf_opplan_opts po;
        wf_opplan_opts_default(&po);
        po.devices = devices;
        po.max_memory_bytes = budget;
        po.pp = pass == 0 ? 0 : 1;
        if (opts && opts->seq_dim >= 0)
            po.oplevel.seq_dim = opts->seq_dim;
        wf_opplan_result pr;
        wf_status pst = wf_opplan_search(m, c, batch, &po, &pr);
        r->searches += pr.searches;
        if ((pst == WF_OK || pst == WF_NOFIT) && pr.has_best)
            try_layouts(m, c, ctx, batch, budget, &pr.best_plan, r);
        wf_opplan_result_free(&pr);
        wf_clear_error();
    }
    wf_cost_ctx_free(ctx);
    r->search_time_s = wf_now_s() - t0;
    if (!r->has_best)
        return wf_errorf(WF_NOFIT, "no plan of model '%s' fits %.2f GiB per device on %lld devices", m->name,
                         budget / 1073741824.0, (long long)devices);
    return WF_OK;
}
