/* Speed of wf_estimate_plan: gpt3-175b on 1024 A100s, called in a loop as the
 * search does. Prints microseconds of CPU per estimate for (a) one plan
 * repeated (all cached), (b) a sweep over many plans (dp x tp x pp x mbs x
 * vpp x recompute x sp x zero; cached after the first visit of each
 * (mbs, tp, sp, recompute)), and (c) the first, uncached estimate of a fresh
 * context. A benchmark, never a test: it prints numbers. */
#include <stdio.h>

#include "weft/cost.h"

int main(void)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup("gpt3-175b", &m) != WF_OK || wf_cluster_lookup("dgx-a100:nodes=128", &c) != WF_OK) {
        fprintf(stderr, "bench_estimate: %s\n", wf_last_error());
        return 1;
    }
    wf_cost_ctx *ctx = NULL;
    double t0 = wf_cpu_s();
    if (wf_cost_ctx_create(&m, &c, &ctx) != WF_OK) {
        fprintf(stderr, "bench_estimate: %s\n", wf_last_error());
        return 1;
    }
    double t_ctx = wf_cpu_s() - t0;
    wf_plan p;
    wf_plan_default(&p);
    p.dp = 16;
    p.tp = 8;
    p.pp = 8;
    p.mbs = 1;
    p.vpp = 3;
    p.recompute = WF_RECOMPUTE_SELECTIVE;
    p.sp = 1;
    const int64_t batch = 1536;
    wf_estimate e;
    t0 = wf_cpu_s();
    if (wf_estimate_plan(ctx, &p, batch, &e) != WF_OK) {
        fprintf(stderr, "bench_estimate: %s\n", wf_last_error());
        return 1;
    }
    double t_first = wf_cpu_s() - t0;

    /* (a) the same plan, cached. */
    const int reps = 2000000;
    double sink = 0;
    t0 = wf_cpu_s();
    for (int i = 0; i < reps; i++) {
        wf_estimate_plan(ctx, &p, batch, &e);
        sink += e.iteration_time_s;
    }
    double t_same = (wf_cpu_s() - t0) / reps;

    /* (b) a sweep like the search's outer enumeration on 1024 devices. */
    static const int tps[] = {1, 2, 4, 8}, pps[] = {1, 2, 4, 8, 16, 32}, mbss[] = {1, 2, 4, 8};
    long n = 0, valid = 0;
    t0 = wf_cpu_s();
    for (int rep = 0; rep < 20; rep++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 6; b++)
                for (int k = 0; k < 4; k++)
                    for (int v = 1; v <= 3; v++)
                        for (int r = 0; r < 3; r++)
                            for (int sp = 0; sp <= 1; sp++)
                                for (int z = 0; z <= 1; z++) {
                                    wf_plan q = p;
                                    q.tp = tps[a];
                                    q.pp = pps[b];
                                    q.dp = 1024 / (q.tp * q.pp);
                                    q.mbs = mbss[k];
                                    q.vpp = v;
                                    q.recompute = (wf_recompute)r;
                                    q.sp = sp;
                                    q.zero = z;
                                    n++;
                                    if (wf_estimate_plan(ctx, &q, batch, &e) == WF_OK) {
                                        valid++;
                                        sink += e.iteration_time_s;
                                    }
                                }
    double t_sweep = (wf_cpu_s() - t0) / (double)n;
    printf("gpt3-175b on dgx-a100 (1024 devices), batch %lld\n", (long long)batch);
    printf("  context creation (one layer's graph costed)  %10.1f us\n", t_ctx * 1e6);
    printf("  first estimate (fills the layer cache)        %10.2f us\n", t_first * 1e6);
    printf("  estimate, same plan in a loop                 %10.3f us per estimate\n", t_same * 1e6);
    printf("  estimate, sweep of %ld plans (%ld valid)      %10.3f us per estimate\n", n, valid,
           t_sweep * 1e6);
    printf("  (checksum %.6g)\n", sink);
    wf_cost_ctx_free(ctx);
    return 0;
}
