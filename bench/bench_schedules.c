/* Benchmark: data-parallel gradient communication schedules compared by
 * simulation, in the DeAR paper's setting (Zhang et al. 2023): 64 V100s (16
 * nodes x 4) on 10 Gb/s Ethernet and on 100 Gb/s InfiniBand, per-GPU batches
 * ResNet-50 64, BERT-base 64 and BERT-large 32 at sequence 64. For every
 * scheduler (and `auto`) it prints the iteration time and the speedup over
 * WFBP. Then the pipeline bubble of gpt3-175b (p = 8) against the number of
 * micro-batches and chunks, next to the closed form (p-1)/(v m).
 *
 * Usage: bench_schedules [--trace-dir DIR]   (writes one trace per case) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sim.h"

typedef struct {
    const char *model;
    const char *label;
    int64_t mbs;
} bench_case;

static const bench_case CASES[] = {
    {"resnet50", "ResNet-50 b64", 64},
    {"bert-base:seq=64", "BERT-base b64 s64", 64},
    {"bert-large:seq=64", "BERT-large b32 s64", 32},
};

static const char *sched_label(const wf_comm_sched *s, char *buf, size_t cap)
{
    static const char *const names[] = {
#define WF_X(e, name) name,
        WF_COMM_LIST(WF_X)
#undef WF_X
    };
    if (s->threshold_bytes > 0)
        snprintf(buf, cap, "%s:%.3g", names[s->kind], s->threshold_bytes / 1e6);
    else
        snprintf(buf, cap, "%s", names[s->kind]);
    return buf;
}

static int run_cluster(const char *cluster_name, const char *trace_dir)
{
    wf_cluster c;
    if (wf_cluster_lookup(cluster_name, &c) != WF_OK) {
        fprintf(stderr, "bench_schedules: %s\n", wf_last_error());
        return 1;
    }
    int64_t dp = wf_cluster_devices(&c);
    printf("\n== %s: %lld GPUs data-parallel ==\n", cluster_name, (long long)dp);
    printf("%-20s %9s %9s", "model", "compute", "wfbp");
    for (int k = 1; k < WF_COMM_COUNT; k++) {
        static const char *const names[] = {
#define WF_X(e, name) name,
            WF_COMM_LIST(WF_X)
#undef WF_X
        };
        printf(" %15s", names[k]);
    }
    printf("  auto's choice\n");
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        wf_model_config mc;
        if (wf_model_lookup(CASES[i].model, &mc) != WF_OK) {
            fprintf(stderr, "bench_schedules: %s\n", wf_last_error());
            return 1;
        }
        wf_arena a;
        wf_arena_init(&a, 0);
        wf_dp_model m;
        double t0 = wf_now_s();
        if (wf_sim_dp_model_build(&mc, &c, CASES[i].mbs, dp, &a, &m) != WF_OK) {
            fprintf(stderr, "bench_schedules: %s\n", wf_last_error());
            wf_arena_free(&a);
            return 1;
        }
        wf_dp_result r[WF_COMM_COUNT];
        for (int k = 0; k < WF_COMM_COUNT; k++) {
            wf_comm_sched s = {(wf_comm_kind)k, 0};
            char path[512];
            const char *trace = NULL;
            if (trace_dir) {
                snprintf(path, sizeof path, "%s/%s-%s-%d.json", trace_dir, cluster_name, CASES[i].model, k);
                for (char *p = path + strlen(trace_dir) + 1; *p; p++)
                    if (*p == ':' || *p == '=')
                        *p = '_';
                trace = path;
            }
            if (wf_sim_dp_iteration(&m, &s, trace, &r[k]) != WF_OK) {
                fprintf(stderr, "bench_schedules: %s\n", wf_last_error());
                wf_arena_free(&a);
                return 1;
            }
        }
        double dt = wf_now_s() - t0;
        double w = r[WF_COMM_WFBP].iteration_s;
        printf("%-20s %7.1fms %7.1fms", CASES[i].label, r[0].compute_s * 1e3, w * 1e3);
        for (int k = 1; k < WF_COMM_COUNT; k++)
            printf(" %7.1fms %5.2fx", r[k].iteration_s * 1e3, w / r[k].iteration_s);
        char lab[64];
        printf("  %s (%d candidates, %d layers, %d tensors, %.2fs)\n",
               sched_label(&r[WF_COMM_AUTO].sched, lab, sizeof lab), r[WF_COMM_AUTO].candidates, m.nlayers,
               m.ngrads, dt);
        wf_arena_free(&a);
    }
    return 0;
}

/* Pipeline bubble of gpt3-175b on 64 A100s (tp 8, pp 8, full recompute):
 * the simulated bubble of the critical stage as a fraction of its busy time,
 * against (p-1)/(v m), for m micro-batches and v chunks. The embedding and
 * the head make the end stages heavier than the middle ones, so the
 * simulated fraction sits a little off the closed form. */
static int run_bubbles(void)
{
    const int p = 8;
    wf_model_config mc;
    wf_cluster c;
    if (wf_model_lookup("gpt3-175b", &mc) != WF_OK || wf_cluster_lookup("dgx-a100:nodes=8", &c) != WF_OK) {
        fprintf(stderr, "bench_schedules: %s\n", wf_last_error());
        return 1;
    }
    printf("\n== pipeline bubble, gpt3-175b on dgx-a100 (tp 8, pp %d, mbs 1, full recompute) ==\n", p);
    printf("%6s %4s %12s %12s %12s %14s %9s\n", "m", "v", "iteration s", "bubble s", "simulated", "(p-1)/(v m)",
           "wall s");
    static const int ms[] = {8, 16, 32, 64, 128};
    static const int vs[] = {1, 2, 3, 4};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        for (size_t j = 0; j < sizeof vs / sizeof vs[0]; j++) {
            int m = ms[i], v = vs[j];
            wf_plan pl;
            wf_plan_default(&pl);
            pl.tp = 8;
            pl.pp = p;
            pl.mbs = 1;
            pl.vpp = v;
            pl.recompute = WF_RECOMPUTE_FULL;
            wf_sim_plan_result r;
            if (wf_sim_plan(&mc, &c, &pl, m, NULL, &r) != WF_OK) {
                fprintf(stderr, "bench_schedules: %s\n", wf_last_error());
                return 1;
            }
            const wf_sim_stage_result *x = &r.stage[r.critical_stage];
            double busy = r.iteration_time_s - x->bd.bubble;
            printf("%6d %4d %12.3f %12.3f %12.4f %14.4f %9.3f\n", m, v, r.iteration_time_s, x->bd.bubble,
                   x->bd.bubble / busy, (double)(p - 1) / (v * m), r.wall_s);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *trace_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--trace-dir") == 0 && i + 1 < argc) {
            trace_dir = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_schedules [--trace-dir DIR]\n");
            return 1;
        }
    }
    if (run_cluster("v100-10gbe", trace_dir) || run_cluster("v100-ib100", trace_dir))
        return 1;
    return run_bubbles();
}
