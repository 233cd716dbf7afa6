/* bench_planner: speed of the planner's searches on one core (a benchmark, never
 * a test; numbers go in the closing notes and docs/planner.md).
 *
 *  1. gpt3-175b on dgx-a100:nodes=128 (1024 GPUs), batch 1536: the whole outer
 *     space (target: under 1 s), pruned and exhaustive.
 *  2. gpt3-175b on 64 GPUs, batch 64: the time/memory frontier (target: under
 *     1 s), pruned and exhaustive.
 *  3. The pipeline-stage DP on a 152-layer chain into 8 stages.
 *  4. The op-level planner (`weft plan --op-level`: every mesh, pipeline depth
 *     and micro-batch count, stages by the DP, every stage searched): vgg16 on
 *     64 GPUs, bert-large and resnet50 on 16, gpt3-175b on 1024, a deep MLP
 *     pipelined over 10 GbE.
 * Each search is repeated and the median wall time printed, with the
 * candidates scored. */
#include "weft/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPEAT 5

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run(const char *model, const char *cluster, int64_t batch, int exhaustive)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup(model, &m) != WF_OK || wf_cluster_lookup(cluster, &c) != WF_OK) {
        fprintf(stderr, "bench_planner: %s\n", wf_last_error());
        return 1;
    }
    double times[REPEAT];
    wf_search_outer_result r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < REPEAT; i++) {
        wf_search_outer_result_free(&r);
        wf_search_outer_opts o;
        wf_search_outer_opts_default(&o);
        o.exhaustive = exhaustive;
        double t0 = wf_now_s();
        wf_status st = wf_search_outer(&m, &c, batch, &o, &r);
        times[i] = wf_now_s() - t0;
        if (st != WF_OK) {
            fprintf(stderr, "bench_planner: %s\n", wf_last_error());
            wf_search_outer_result_free(&r);
            return 1;
        }
    }
    qsort(times, REPEAT, sizeof times[0], cmp_double);
    char text[256];
    wf_plan_format(&r.top[0].plan, text, sizeof text);
    printf("%-10s %-22s batch %5lld %-10s: %7lld of %7lld candidates scored, frontier %3d plans, "
           "%8.4f s (median of %d)\n",
           model, cluster, (long long)batch, exhaustive ? "exhaustive" : "pruned", (long long)r.searched,
           (long long)r.space, r.npareto, times[REPEAT / 2], REPEAT);
    printf("    best %.4f s/iteration, %.2f GiB, MFU %.1f%%: %s\n", r.top[0].est.iteration_time_s,
           r.top[0].est.memory_per_device_bytes / (1024.0 * 1024.0 * 1024.0), 100 * r.top[0].est.mfu,
           text);
    wf_search_outer_result_free(&r);
    return 0;
}

static int run_dp(void)
{
    enum { N = 152, S = 8 };
    double t[N], snd[N], w[N], a[N];
    for (int i = 0; i < N; i++) {
        t[i] = 1e-3 * (1.0 + (double)((i * 37) % 11) / 10.0);
        snd[i] = 1e-4 * (double)((i * 13) % 7) / 7.0;
        w[i] = 1e8;
        a[i] = 5e7;
    }
    double t0 = wf_now_s();
    wf_stage_plan sp;
    wf_status st = wf_pipeline_dp(N, t, snd, w, a, S, 64, 0, &sp);
    double dt = wf_now_s() - t0;
    if (st != WF_OK) {
        fprintf(stderr, "bench_planner: %s\n", wf_last_error());
        return 1;
    }
    printf("pipeline DP: %d layers into %d stages, 64 micro-batches: %.4f s (slowest stage %.4g s)\n",
           N, S, dt, sp.max_stage_s);
    return 0;
}

static int run_oplevel(const char *model, const char *cluster, int64_t batch, double mem_gib)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup(model, &m) != WF_OK || wf_cluster_lookup(cluster, &c) != WF_OK) {
        fprintf(stderr, "bench_planner: %s\n", wf_last_error());
        return 1;
    }
    int reps = 3;
    double times[3], cpu[3];
    wf_search_opplan_result r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < reps; i++) {
        wf_search_opplan_result_free(&r);
        wf_search_opplan_opts o;
        wf_search_opplan_opts_default(&o);
        o.max_memory_bytes = mem_gib * 1024.0 * 1024.0 * 1024.0;
        double t0 = wf_now_s();
        clock_t c0 = clock();
        wf_status st = wf_search_opplan(&m, &c, batch, &o, &r);
        cpu[i] = (double)(clock() - c0) / CLOCKS_PER_SEC;
        times[i] = wf_now_s() - t0;
        if (st != WF_OK && st != WF_NOFIT) {
            fprintf(stderr, "bench_planner: %s\n", wf_last_error());
            wf_search_opplan_result_free(&r);
            return 1;
        }
    }
    qsort(times, (size_t)reps, sizeof times[0], cmp_double);
    qsort(cpu, (size_t)reps, sizeof cpu[0], cmp_double);
    printf("op-level %-10.10s %-22s batch %5lld: %4lld candidates, %5lld searches, %8.4f s "
           "(cpu %.4f s, medians of %d)\n    best %.4f s/iteration, %.2f GiB%s: %s\n",
           model, cluster, (long long)batch, (long long)r.searched, (long long)r.searches,
           times[reps / 2], cpu[reps / 2], reps, r.best.iteration_time_s,
           r.best.memory_per_device_bytes / (1024.0 * 1024.0 * 1024.0),
           r.best.fits ? "" : " (no plan fits)", r.best.plan);
    wf_search_opplan_result_free(&r);
    return 0;
}

/* The one search space (wf_search_unified): the outer search (its top 16),
 * the op-level search's proposals on the fastest shapes, every candidate
 * costed by the one model. */
static int run_unified(const char *model, const char *cluster, int64_t batch)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup(model, &m) != WF_OK || wf_cluster_lookup(cluster, &c) != WF_OK) {
        fprintf(stderr, "bench_planner: %s\n", wf_last_error());
        return 1;
    }
    enum { REPS = 3 };
    double times[REPS];
    wf_search_unified_result r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < REPS; i++) {
        wf_search_unified_result_free(&r);
        double t0 = wf_now_s();
        wf_status st = wf_search_unified(&m, &c, batch, NULL, &r);
        times[i] = wf_now_s() - t0;
        if (st != WF_OK) {
            fprintf(stderr, "bench_planner: %s\n", wf_last_error());
            wf_search_unified_result_free(&r);
            return 1;
        }
    }
    qsort(times, REPS, sizeof times[0], cmp_double);
    char ol[256] = "";
    wf_layout_format(&r.plan, ol, sizeof ol);
    printf("one space %-12.12s %-22s batch %5lld: %4lld costed, %3lld op-level searches, %8.4f s (median of %d)\n"
           "    outer best %.4f s, best %.4f s (%s) %s\n",
           model, cluster, (long long)batch, (long long)r.costed, (long long)r.searches, times[REPS / 2], REPS,
           r.outer_best_s, r.est.iteration_time_s, r.megatron ? "Megatron's layouts" : "op-level layouts", ol);
    wf_search_unified_result_free(&r);
    return 0;
}

int main(void)
{
    printf("bench_planner: one core, wall clock\n");
    int rc = 0;
    rc |= run("gpt3-175b", "dgx-a100:nodes=128", 1536, 0);
    rc |= run("gpt3-175b", "dgx-a100:nodes=128", 1536, 1);
    rc |= run("gpt3-175b", "dgx-a100:nodes=8", 64, 0);
    rc |= run("gpt3-175b", "dgx-a100:nodes=8", 64, 1);
    rc |= run_dp();
    rc |= run_oplevel("vgg16", "dgx-a100:nodes=8", 128, 0);
    rc |= run_oplevel("bert-large", "dgx-a100:nodes=2", 256, 0);
    rc |= run_oplevel("resnet50", "dgx-a100:nodes=2", 256, 0);
    rc |= run_oplevel("mlp:sizes=8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-"
                      "8192-8192-8192", "v100-10gbe:nodes=8,devices_per_node=1", 512, 8);
    rc |= run_oplevel("gpt3-175b", "dgx-a100:nodes=128", 1536, 0);
    rc |= run_unified("gpt3-175b", "dgx-a100:nodes=128", 1536);
    rc |= run_unified("gpt3-175b", "dgx-a100:nodes=8", 64);
    rc |= run_unified("megatron-1t", "dgx-a100:nodes=64", 512);
    rc |= run_unified("mlp:sizes=1024-16384-16384-10", "v100-10gbe:nodes=4", 256);
    printf("for scale: a published Python analytical planner needs about 11 minutes for the "
           "64-GPU gpt3-175b space\n");
    return rc;
}
