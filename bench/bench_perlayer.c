/* bench_perlayer: per-layer plans of mixtures of experts (docs/planner.md,
 * "Per-layer plans") as weft predicts and simulates them -- a benchmark of
 * the planner's choices, never a test.
 *
 * For each model and cluster, one search space (wf_search_unified: the
 * outer search's plans, the op-level search's layouts and the per-layer
 * plans, all on the one cost model) gives the best plan of the other kinds
 * (whole-model or op-level) and the fastest per-layer plan that fits. Both
 * are simulated: the best other plan by the simulator's play of its plan or
 * layouts (wf_sim_plan / wf_sim_oplevel), the per-layer plan by its
 * composition (wf_sim_perlayer). Predicted speedup: the other plan's
 * estimate over the per-layer plan's; simulated: the same of the simulated
 * times. A speedup below 1 is a row per-layer plans do not win.
 *
 * Usage: bench_perlayer [MODEL CLUSTER BATCH] (default: the table's rows). */
#include "weft/layout.h"
#include "weft/search.h"
#include "weft/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *cluster;
    int64_t batch;
} row;

static const row ROWS[] = {
    /* DeepSeek-V3's shape (hidden 7168, MLA, 256 experts top-8 and a
     * shared one, its first 3 layers dense), 8 layers so that one stage
     * holds it: 3 dense and 5 expert layers. */
    {"deepseek-v3:layers=8", "dgx-h100:nodes=8", 256},
    {"deepseek-v3:layers=8", "dgx-h100:nodes=16", 512},
    /* Dense and expert layers interleaved (moe_freq=2), Mixtral's layer. */
    {"mixtral-8x7b:moe_freq=2,layers=8", "dgx-h100:nodes=2", 64},
    {"mixtral-8x7b:moe_freq=2,layers=8", "dgx-h100:nodes=4", 256},
    /* The tiny test model (first layer dense). */
    {"deepseek-tiny", "dgx-h100:nodes=1", 64},
};

static int one(const row *w)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup(w->model, &m) != WF_OK || wf_cluster_lookup(w->cluster, &c) != WF_OK) {
        fprintf(stderr, "bench_perlayer: %s\n", wf_last_error());
        return 1;
    }
    wf_search_unified_result r;
    wf_status st = wf_search_unified(&m, &c, w->batch, NULL, &r);
    if (st != WF_OK) {
        fprintf(stderr, "bench_perlayer: %s on %s: %s\n", w->model, w->cluster, wf_last_error());
        wf_search_unified_result_free(&r);
        return 1;
    }
    char other[512] = "", pm[512] = "", pd[512] = "";
    double other_s = r.perlayer ? r.perlayer_whole_s : r.est.iteration_time_s, other_sim = 0;
    /* The best of the other kinds: the result's best unless the per-layer
     * plan won, then the outer search's best whole-model plan. */
    wf_sim_plan_opts so;
    memset(&so, 0, sizeof so);
    wf_sim_plan_result *sr = calloc(1, sizeof *sr);
    if (!sr) {
        wf_search_unified_result_free(&r);
        return 1;
    }
    if (!r.perlayer && r.lowered && !r.megatron) {
        wf_layout_format(&r.plan, other, sizeof other);
        if (wf_sim_oplevel(&m, &c, &r.plan, w->batch, &so, sr, NULL) == WF_OK)
            other_sim = sr->iteration_time_s;
    } else {
        wf_search_outer_opts oo;
        wf_search_outer_opts_default(&oo);
        oo.top_k = 1;
        wf_search_outer_result orr;
        const wf_plan *bp = &r.as_plan;
        if (r.perlayer && wf_search_outer(&m, &c, w->batch, &oo, &orr) == WF_OK && orr.ntop > 0) {
            wf_plan_format(&orr.top[0].plan, other, sizeof other);
            other_s = orr.top[0].est.iteration_time_s;
            if (wf_sim_plan(&m, &c, &orr.top[0].plan, w->batch, &so, sr) == WF_OK)
                other_sim = sr->iteration_time_s;
            wf_search_outer_result_free(&orr);
        } else {
            wf_plan_format(bp, other, sizeof other);
            if (wf_sim_plan(&m, &c, bp, w->batch, &so, sr) == WF_OK)
                other_sim = sr->iteration_time_s;
        }
    }
    free(sr);
    double pl_sim = 0, base_s = 0;
    if (r.perlayer_best_s > 0) {
        /* Its expert layers' plan alone, as a whole-model plan. */
        wf_cost_ctx *ctx = NULL;
        wf_estimate be;
        if (wf_cost_ctx_create(&m, &c, &ctx) == WF_OK && wf_estimate_plan(ctx, &r.perlayer_moe, w->batch, &be) == WF_OK)
            base_s = be.iteration_time_s;
        wf_cost_ctx_free(ctx);
        wf_plan_format(&r.perlayer_moe, pm, sizeof pm);
        wf_plan dense_only = wf_layout_perlayer_dense_plan(&m, &r.perlayer_dense, m.layers);
        wf_plan_format(&dense_only, pd, sizeof pd);
        wf_layout ol;
        wf_layout_init(&ol);
        wf_layout_perlayer pl;
        int is = 0;
        if (wf_layout_perlayer_lower(&m, &c, w->batch, &r.perlayer_moe, &r.perlayer_dense, &ol) == WF_OK &&
            wf_layout_perlayer_of(&m, &c, w->batch, &ol, &pl, &is) == WF_OK && is) {
            double mem;
            if (wf_sim_perlayer(&m, &c, w->batch, &pl, &pl_sim, &mem) != WF_OK) {
                fprintf(stderr, "bench_perlayer: %s: simulating the per-layer plan: %s\n", w->model, wf_last_error());
                pl_sim = 0;
            }
        }
        wf_layout_free(&ol);
    }
    printf("%s | %s | %lld | %s | %.4f s (sim %.4f) | ", w->model, w->cluster, (long long)w->batch, other, other_s,
           other_sim);
    if (r.perlayer_best_s > 0)
        printf("%s [experts %s; dense %s] | %.4f s (sim %.4f) | %.3fx | %.3fx | %lld per-layer plans costed%s; "
               "its expert plan alone %.4f s\n",
               r.perlayer_detail, pm, pd, r.perlayer_best_s, pl_sim, other_s / r.perlayer_best_s,
               pl_sim > 0 ? other_sim / pl_sim : 0.0, (long long)r.perlayer_costed,
               r.perlayer ? ", per-layer best" : "", base_s);
    else
        printf("none fits | - | - | - | %lld per-layer plans costed\n", (long long)r.perlayer_costed);
    wf_clear_error();
    wf_search_unified_result_free(&r);
    return 0;
}

int main(int argc, char **argv)
{
    printf("model | cluster | batch | best other plan | its time | best per-layer plan | its time | predicted "
           "speedup | simulated speedup | notes\n");
    if (argc == 4) {
        row w = {argv[1], argv[2], atoll(argv[3])};
        return one(&w);
    }
    int bad = 0;
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++)
        bad |= one(&ROWS[i]);
    return bad;
}
