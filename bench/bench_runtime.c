/* Runtime benchmark (prints numbers; not a test): training iteration time of
 *   gpt  4 layers, hidden 256, 4 heads, seq 128, vocab 2048 (fp32), batch 8 per rank
 *   mlp  1024-4096-4096-10, batch 64 per rank
 * with one process and, per comm schedule (wfbp, ddp, dear), with 2 ranks;
 * the achieved GFLOP/s (training FLOPs of the graph, dense attention, per
 * rank) against the measured single-core sgemm peak, for the kernels alone
 * (forward + backward) and for the whole iteration (with the AdamW update and
 * the communication); and the iteration time the cost model predicts on the
 * machine as `weft calibrate --quick` measures it.
 *
 * Every rank runs one BLAS thread (one core per rank). Run it as
 *   bench_runtime [--iters N] [--ranks P]
 * which measures one process, then runs itself under $MPIEXEC (default
 * mpiexec) -n P for the data-parallel part; or directly under mpiexec. */
#include "runtime/kernels-impl.h"
#include "weft/cost.h"
#include "weft/models.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *label;
    const char *spec;
    int64_t batch; /* per rank */
} bench_model;

static const bench_model MODELS[] = {
    {"gpt", "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=2048,dtype=fp32", 8},
    {"mlp", "mlp:sizes=1024-4096-4096-10", 64},
};
#define NMODELS 2

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Best sgemm rate of the fast kernel over a few square sizes, FLOP/s. */
static double sgemm_peak(void)
{
    double best = 0;
    static const int64_t sizes[] = {512, 1024, 2048};
    for (int s = 0; s < 3; s++) {
        int64_t n = sizes[s];
        float *a = calloc((size_t)(n * n), sizeof(float)), *b = calloc((size_t)(n * n), sizeof(float)),
              *c = calloc((size_t)(n * n), sizeof(float));
        if (!a || !b || !c) {
            free(a);
            free(b);
            free(c);
            continue;
        }
        for (int64_t i = 0; i < n * n; i++) {
            a[i] = (float)(i % 7) * 0.1f;
            b[i] = (float)(i % 5) * 0.1f;
        }
        wf_k_matmul_fwd(a, b, c, n, n, n, 0, 0);
        for (int r = 0; r < 3; r++) {
            double t0 = wf_now_s();
            wf_k_matmul_fwd(a, b, c, n, n, n, 0, 0);
            double rate = 2.0 * (double)n * (double)n * (double)n / (wf_now_s() - t0);
            if (rate > best)
                best = rate;
        }
        free(a);
        free(b);
        free(c);
    }
    return best;
}

/* Training FLOPs of one forward + backward at `batch`. */
static double train_flops(const char *spec, int64_t batch)
{
    wf_model_config m;
    wf_graph g;
    if (wf_model_lookup(spec, &m) != WF_OK || wf_model_build(&m, batch, &g) != WF_OK)
        return 0;
    wf_graph_totals t;
    wf_graph_totals_of(&g, &t);
    wf_graph_free(&g);
    return t.fwd_flops + t.bwd_flops;
}

typedef struct {
    double step_s, compute_s, comm_s, kernels_s; /* medians */
    double best_step_s, best_kernels_s;         /* minima: this machine may be shared */
} timing;

static double minimum(const double *x, int n)
{
    double m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] < m)
            m = x[i];
    return m;
}

/* Median step time of `iters` steps after two warm-up steps; kernels_s: the
 * median of forward + backward alone on the trainer's executor. */
static wf_status time_training(const bench_model *bm, const char *comm, int self, int nranks, int iters, timing *out)
{
    wf_train_config c;
    memset(&c, 0, sizeof c);
    c.model = bm->spec;
    c.data = "synthetic";
    c.batch = bm->batch * nranks;
    c.plan = "auto";
    c.comm = comm;
    wf_optim_defaults(WF_OPTIM_ADAMW, &c.optim);
    c.seed = 1;
    c.self = self;
    wf_train *t = NULL;
    wf_status st = wf_train_create(&c, &t);
    if (st != WF_OK)
        return st;
    double *ts = calloc((size_t)iters, sizeof *ts), *cs = calloc((size_t)iters, sizeof *cs),
           *ms = calloc((size_t)iters, sizeof *ms);
    if (!ts || !cs || !ms) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < iters + 2 && st == WF_OK; i++) {
        wf_train_stats s;
        st = wf_train_step(t, &s);
        if (i >= 2) {
            ts[i - 2] = s.time_s;
            cs[i - 2] = s.compute_s;
            ms[i - 2] = s.comm_s;
        }
    }
    if (st == WF_OK)
        st = wf_train_sync(t);
    if (st != WF_OK)
        goto done;
    out->best_step_s = minimum(ts, iters);
    out->step_s = median(ts, iters);
    out->compute_s = median(cs, iters);
    out->comm_s = median(ms, iters);
    /* The kernels alone: forward + backward of one micro-batch, no hooks. */
    wf_exec *e = wf_train_exec(t);
    wf_exec_set_hooks(e, NULL);
    for (int i = 0; i < iters; i++) {
        float loss;
        double t0 = wf_now_s();
        wf_exec_forward(e, &loss);
        wf_exec_backward(e, 0);
        ts[i] = wf_now_s() - t0;
    }
    out->best_kernels_s = minimum(ts, iters);
    out->kernels_s = median(ts, iters);
done:
    free(ts);
    free(cs);
    free(ms);
    wf_train_free(t);
    return st;
}

/* The cost model's iteration time on the calibrated machine. */
static double predict(const wf_cluster *cl, const bench_model *bm, int nranks, const char *comm)
{
    wf_model_config m;
    if (wf_model_lookup(bm->spec, &m) != WF_OK)
        return 0;
    wf_cost_ctx *ctx = NULL;
    if (wf_cost_ctx_create(&m, cl, &ctx) != WF_OK)
        return 0;
    wf_plan p;
    wf_plan_default(&p);
    p.dp = nranks;
    p.mbs = (int)bm->batch;
    if (comm && wf_comm_parse(comm, &p.comm) != WF_OK)
        p.comm.kind = WF_COMM_DDP;
    wf_estimate est;
    double r = wf_estimate_plan(ctx, &p, bm->batch * nranks, &est) == WF_OK ? est.iteration_time_s : 0;
    wf_cost_ctx_free(ctx);
    return r;
}

static int calibrated(wf_cluster *cl)
{
    wf_calib_opts o = {1, 1};
    wf_calib_result r;
    if (wf_calibrate_run(&o, &r) != WF_OK)
        return 0;
    return wf_calibrate_to_cluster(&r, cl) == WF_OK;
}

static void header(void)
{
    printf("medians of the timed iterations; best_*: the fastest iteration; %%peak: kernels (forward + backward)\n"
           "at their best against the sgemm peak\n");
    printf("%-4s %-5s %5s %-9s %8s %8s %8s %8s %8s %8s %7s %8s %6s %8s\n", "mdl", "ranks", "batch", "comm", "iter_ms",
           "best_ms", "compute", "comm_exp", "kern_ms", "kbest_ms", "GF/s", "kern_GF/s", "%peak", "pred_ms");
}

static void row(const bench_model *bm, int nranks, const char *comm, const timing *t, double peak, double pred)
{
    double f = train_flops(bm->spec, bm->batch);
    printf("%-4s %-5d %5lld %-9s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %7.1f %8.1f %5.0f%% %8.1f\n", bm->label, nranks,
           (long long)(bm->batch * nranks), comm ? comm : "-", 1e3 * t->step_s, 1e3 * t->best_step_s,
           1e3 * t->compute_s, 1e3 * t->comm_s, 1e3 * t->kernels_s, 1e3 * t->best_kernels_s, f / t->step_s / 1e9,
           f / t->best_kernels_s / 1e9, 100.0 * f / t->best_kernels_s / peak, 1e3 * pred);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int iters = 5, ranks = 2, child = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--child"))
            child = 1;
        else {
            fprintf(stderr, "usage: bench_runtime [--iters N] [--ranks P]\n");
            return 1;
        }
    }
    if (iters < 1)
        iters = 1;
    wf_runtime_set_threads(1);
    int started = 0;
    if (wf_mpi_start(&started) != WF_OK) {
        fprintf(stderr, "%s\n", wf_last_error());
        return 1;
    }
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    double peak = sgemm_peak();
    wf_cluster cl;
    int have_cl = calibrated(&cl);
    if (rank == 0) {
        if (!child) {
            printf("BLAS: %s\none-core sgemm peak: %.1f GFLOP/s; %d timed iterations (median), AdamW\n", wf_k_blas_info(),
                   peak / 1e9, iters);
            for (int k = 0; k < NMODELS; k++)
                printf("%s: %s, %.2f GFLOP per rank per iteration\n", MODELS[k].label, MODELS[k].spec,
                       train_flops(MODELS[k].spec, MODELS[k].batch) / 1e9);
            header();
        }
        if (!have_cl)
            fprintf(stderr, "calibration failed (%s): no prediction\n", wf_last_error());
    }
    static const char *const comms[] = {"wfbp", "ddp", "dear"};
    for (int k = 0; k < NMODELS; k++) {
        timing t;
        if (nranks == 1) {
            if (time_training(&MODELS[k], NULL, 1, 1, iters, &t) != WF_OK) {
                fprintf(stderr, "%s: %s\n", MODELS[k].label, wf_last_error());
                continue;
            }
            row(&MODELS[k], 1, NULL, &t, peak, have_cl ? predict(&cl, &MODELS[k], 1, NULL) : 0);
            continue;
        }
        for (int c = 0; c < 3; c++) {
            wf_status st = time_training(&MODELS[k], comms[c], 0, nranks, iters, &t);
            if (st != WF_OK) {
                if (rank == 0)
                    fprintf(stderr, "%s %s: %s\n", MODELS[k].label, comms[c], wf_last_error());
                continue;
            }
            double pred = have_cl ? predict(&cl, &MODELS[k], nranks, comms[c]) : 0;
            if (rank == 0)
                row(&MODELS[k], nranks, comms[c], &t, peak, pred);
        }
    }
    wf_mpi_stop(started);
    if (nranks == 1 && !child && ranks > 1) {
        char self[4096], cmd[8192];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return 0;
        self[n] = 0;
        const char *mpiexec = getenv("MPIEXEC") ? getenv("MPIEXEC") : "mpiexec";
        snprintf(cmd, sizeof cmd, "%s -n %d %s --child --iters %d", mpiexec, ranks, self, iters);
        fflush(stdout);
        if (system(cmd) != 0)
            fprintf(stderr, "the data-parallel part failed: %s\n", cmd);
    }
    return 0;
}
