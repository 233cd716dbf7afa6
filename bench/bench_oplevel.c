/* Benchmark of the op-level search (not a test): wall time, decisions and
 * frontier sizes for
 *   - bert-large, batch 256, on 16 A100s (dgx-a100:nodes=2, mesh 2x8 and 16),
 *   - gpt3-175b, batch 4 (the largest whose op-level plan fits 80 GB without
 *     pipelining), on 64 A100s (dgx-a100:nodes=8, mesh 8x8): its time/memory
 *     frontier,
 *   - vgg16, batch 128, on 64 A100s (mesh 64),
 * each with the default options (descent, frontier tracking, descent again)
 * and each algorithm alone. Targets (issue 4): under 1 s each on one core.
 * The time is wf_search_oplevel's (building the decision problem included);
 * building the model's graph is reported apart.
 * Run: build/bench_oplevel [repeats] */
#include <stdio.h>
#include <stdlib.h>

#include "weft/models.h"
#include "weft/search.h"

typedef struct {
    const char *model;
    int64_t batch;
    const char *cluster;
    const char *mesh;
} bench_case;

static int run(const bench_case *bc, wf_search_oplevel_algo algo, int repeats, int print_frontier)
{
    wf_model_config mc;
    wf_graph g;
    wf_cluster c;
    wf_mesh m;
    double tb = wf_now_s();
    if (wf_model_lookup(bc->model, &mc) || wf_model_build(&mc, bc->batch, &g)) {
        fprintf(stderr, "bench_oplevel: %s\n", wf_last_error());
        return 1;
    }
    if (wf_cluster_lookup(bc->cluster, &c) || wf_mesh_parse(bc->mesh, &c, &m)) {
        fprintf(stderr, "bench_oplevel: %s\n", wf_last_error());
        wf_graph_free(&g);
        return 1;
    }
    tb = wf_now_s() - tb;
    wf_search_oplevel_opts o;
    wf_search_oplevel_opts_default(&o);
    o.algo = algo;
    double best_s = 1e30, cpu0 = wf_cpu_s();
    wf_search_oplevel_result r;
    wf_status st = WF_OK;
    for (int i = 0; i < repeats; i++) {
        st = wf_search_oplevel(&g, &c, &m, 0, &o, &r);
        if (r.search_time_s < best_s)
            best_s = r.search_time_s;
        if (i + 1 < repeats)
            wf_search_oplevel_result_free(&r);
    }
    double cpu = (wf_cpu_s() - cpu0) / repeats;
    static const char *names[] = {"auto", "cd", "ft"};
    printf("%-11s b=%-4lld %-18s mesh %-4s %-4s  %7.3f s (cpu %6.3f s, graph %5.3f s)  ops %5d  "
           "decisions %3d  choices %5lld  sweeps %4d  cond %d  frontier %3d  plan %.4f s  %.2f GiB%s\n",
           bc->model, (long long)bc->batch, bc->cluster, bc->mesh, names[algo], best_s, cpu, tb,
           g.nfwd, r.ndecisions, (long long)r.nchoices, r.sweeps, r.conditioned, r.nfrontier,
           r.time_s, r.memory_bytes / 1073741824.0,
           st == WF_NOFIT ? " (does not fit)" : st ? " (error)" : "");
    if (print_frontier)
        for (int i = 0; i < r.nfrontier; i++)
            printf("    frontier %2d: %.4f s  %.3f GiB\n", i, r.frontier[i].time_s,
                   r.frontier[i].memory_bytes / 1073741824.0);
    wf_search_oplevel_result_free(&r);
    wf_graph_free(&g);
    return st == WF_OK || st == WF_NOFIT ? 0 : 1;
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 3;
    if (repeats < 1)
        repeats = 1;
    const bench_case cases[] = {
        {"bert-large", 256, "dgx-a100:nodes=2", "2x8"},
        {"bert-large", 256, "dgx-a100:nodes=2", "16"},
        {"gpt3-175b", 4, "dgx-a100:nodes=8", "8x8"},
        {"vgg16", 128, "dgx-a100:nodes=8", "64"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int a = 0; a < 3; a++)
            bad |= run(&cases[i], (wf_search_oplevel_algo)a, repeats, a == 0 && i == 2);
    return bad;
}
