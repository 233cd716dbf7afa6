/* Calibration of the dgx-h100 preset on NVIDIA's published H100 results
 * (NeMo 24.07 performance summary, Megatron-Core with FP8 and flash
 * attention; tests/data/calibration-h100.json, seven iteration times).
 *
 * The procedure of the dgx-a100 fit (bench_calibrate_dgx_a100.c): an
 * exhaustive grid over physical factors, each only over the range that is
 * plausible for H100, minimizing the mean absolute relative error of the
 * iteration times (plus any excess of the worst row over 6%):
 *   e_max        0.45-0.90  16-bit matrix efficiency of large GEMMs (cuBLAS
 *                           bf16 reaches 600-800 of 989 TFLOP/s); the curve
 *                           e_max F / (F + f_half) as on A100
 *   f_half       1e9-3e10   GEMM size (FLOPs) at half of e_max (H100 finishes
 *                           a GEMM 3x faster than A100, so fixed ramp-up and
 *                           tail costs weigh more FLOPs)
 *   fp8_eff      0.40-1.00  FP8 products reach fp8_eff x that curve of the
 *                           1979 TFLOP/s FP8 peak (casts, scaling, amax
 *                           bookkeeping of Transformer Engine included)
 *   mem_eff      0.55-0.95  achieved fraction of HBM3 bandwidth
 *   nvlink_eff   0.50-0.90  achieved fraction of NVSwitch bandwidth
 *   overlap      1.00-1.30  slowdown of compute that overlaps tensor-parallel
 *                           communication (Transformer Engine's userbuffers
 *                           here, NCCL on A100)
 * Held at priors: InfiniBand efficiency,
 * the launch floor and the pipeline message overhead. The rows give no
 * recomputation and the distributed optimizer as assumed settings; they run
 * as sw=megatron-core, fp8=1, zero=1.
 *
 * Run by scripts/calibrate-dgx-h100; prints the best factors, the table to
 * paste into src/cluster/cluster.c, and predicted vs measured rows.
 * Usage: bench_calibrate_dgx_h100 [DATA.json] [--check] */
/* This fits the FLOPs-table path (the preset with kernel_model=0); the
 * presets cost by the measured-kernel device model, whose software factors
 * bench/bench_calibrate_software.c fits (docs/cost-model.md). */
#include "cost/cost-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double e_max, f_half, fp8_eff, mem_eff, nvlink_eff, overlap;
} factors;

static const double POINTS[WF_MAX_EFF] = {1e13, 1e12, 3e11, 1e11, 3e10, 1e10, 1e9, 1e8};

static void apply(const wf_cluster *base, const factors *f, wf_cluster *c)
{
    *c = *base;
    wf_calib_set_curve(&c->dev, f->e_max, f->f_half);
    c->dev.fp8_eff = f->fp8_eff;
    c->dev.mem_eff = f->mem_eff;
    c->level[0].eff = f->nvlink_eff;
    c->overlap_slowdown = f->overlap;
}

static double score(const wf_calib_data *d, const double *pred, double *mean_out, double *max_out)
{
    return wf_calib_score(d, pred, mean_out, max_out);
}

static int report(const wf_calib_data *d, const wf_cluster *c, wf_cost_ctx **ctxs)
{
    double pt[WF_CALIB_MAX_ROWS], pw[WF_CALIB_MAX_ROWS], pa[WF_CALIB_MAX_ROWS];
    if (wf_calib_predict(d, c, ctxs, pt, pw, pa) != WF_OK) {
        fprintf(stderr, "predict: %s\n", wf_last_error());
        return 1;
    }
    printf("\n%-24s %5s %4s %4s %4s %4s %10s %10s %7s\n", "row", "gpus", "tp", "pp", "mbs", "vpp", "measured",
           "predicted", "error");
    for (int i = 0; i < d->ntime; i++) {
        const wf_calib_row *r = &d->time[i];
        printf("%-24s %5lld %4d %4d %4d %4d %9.3fs %9.3fs %+6.1f%%\n", r->model, (long long)wf_plan_devices(&r->plan),
               r->plan.tp, r->plan.pp, r->plan.mbs, r->plan.vpp, r->time_s, pt[i], 100 * (pt[i] / r->time_s - 1));
    }
    double mean, mx;
    score(d, pt, &mean, &mx);
    printf("iteration time: mean |error| %.2f%%, max %.2f%%\n", 100 * mean, 100 * mx);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = "tests/data/calibration-h100.json";
    int check = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0)
            check = 1;
        else
            path = argv[i];
    }
    static wf_calib_data d;
    wf_cluster base;
    if (wf_calib_load_h100(path, &d) != WF_OK || wf_cluster_lookup("dgx-h100:kernel_model=0,op_gap_s=0,overlap_slowdown=1", &base) != WF_OK) {
        fprintf(stderr, "calibrate: %s\n", wf_last_error());
        return 1;
    }
    wf_cost_ctx *ctxs[WF_CALIB_MAX_MODELS] = {NULL};
    if (check) {
        printf("dgx-h100 preset as it is:\n");
        int rc = report(&d, &base, ctxs);
        wf_calib_free(ctxs);
        return rc;
    }
    factors best = {0, 0, 0, 0, 0, 0};
    double best_score = 1e300, t0 = wf_now_s();
    long evals = 0;
    for (double em = 0.45; em <= 0.901; em += 0.05)
        for (double lf = 9.0; lf <= 10.51; lf += 0.25)
            for (double fe = 0.40; fe <= 1.001; fe += 0.02)
                for (double me = 0.55; me <= 0.951; me += 0.10)
                    for (double ne = 0.50; ne <= 0.901; ne += 0.10)
                        for (double ov = 1.00; ov <= 1.301; ov += 0.05) {
                        factors f = {em, pow(10, lf), fe, me, ne, ov};
                        wf_cluster c;
                        apply(&base, &f, &c);
                        double pt[WF_CALIB_MAX_ROWS], pw[WF_CALIB_MAX_ROWS], pa[WF_CALIB_MAX_ROWS];
                        if (wf_calib_predict(&d, &c, ctxs, pt, pw, pa) != WF_OK) {
                            fprintf(stderr, "calibrate: %s\n", wf_last_error());
                            return 1;
                        }
                        evals++;
                        double s = score(&d, pt, NULL, NULL);
                        if (s < best_score) {
                            best_score = s;
                            best = f;
                        }
                    }
    printf("grid search: %ld factor sets in %.1f s\n", evals, wf_now_s() - t0);
    printf("best: e_max %.2f, f_half %.3g FLOPs, fp8_eff %.2f, mem_eff %.2f, nvlink_eff %.2f, overlap_slowdown %.2f\n",
           best.e_max, best.f_half, best.fp8_eff, best.mem_eff, best.nvlink_eff, best.overlap);
    printf("\nfor src/cluster/cluster.c:\nstatic const wf_eff_point H100_MATRIX_EFF[] = {\n   ");
    for (int i = 0; i < WF_MAX_EFF; i++)
        printf(" {%.0e, %.3f},", POINTS[i], best.e_max * POINTS[i] / (POINTS[i] + best.f_half));
    printf("\n};\n#define H100_FP8_EFF %.2f\n#define H100_MEM_EFF %.2f\n#define H100_NVLINK_EFF %.2f\n"
           "#define H100_OVERLAP_SLOWDOWN %.2f\n",
           best.fp8_eff, best.mem_eff, best.nvlink_eff, best.overlap);
    wf_cluster c;
    apply(&base, &best, &c);
    int rc = report(&d, &c, ctxs);
    wf_calib_free(ctxs);
    return rc;
}
