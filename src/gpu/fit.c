/* weft gpu: the fit from measured points to the cluster's factors (plain C,
 * no CUDA). It depends only on the points of wf_cluster_measured, and
 * targets the device model of src/cost/compute.c as it stands:
 *
 *   matrix product   t = F / (matrix_flops[dtype] x eff(F)) + bytes / mem_bw
 *   collective       flat alpha-beta closed forms of src/cost/collective.c
 *                    on a level's latency_s and bw_bps x eff
 *
 *   kernel model     the shape-aware products of src/cluster/kernel_model.c: per
 *                    gemm kind measured, eff and launch_s fitted on its
 *                    points (least squares in log time) on the base's tile
 *                    structure; memory-bound fractions and attention
 *                    efficiencies rescaled to the measured peaks
 *
 * docs/cluster-format.md ("Calibration on GPUs") states each step; the
 * points themselves go into the file too. */
#include "weft/gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small least squares --------------------------------------------------- */

/* Solves a x = b in place (n <= 8, Gaussian elimination with partial
 * pivoting). Returns 0 when singular. */
static int solve(double *a, double *b, int n)
{
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        if (!(fabs(a[p * n + c]) > 1e-300))
            return 0;
        if (p != c) {
            for (int k = 0; k < n; k++) {
                double t = a[c * n + k];
                a[c * n + k] = a[p * n + k];
                a[p * n + k] = t;
            }
            double t = b[c];
            b[c] = b[p];
            b[p] = t;
        }
        for (int r = c + 1; r < n; r++) {
            double f = a[r * n + c] / a[c * n + c];
            for (int k = c; k < n; k++)
                a[r * n + k] -= f * a[c * n + k];
            b[r] -= f * b[c];
        }
    }
    for (int c = n - 1; c >= 0; c--) {
        double s = b[c];
        for (int k = c + 1; k < n; k++)
            s -= a[c * n + k] * b[k];
        b[c] = s / a[c * n + c];
    }
    return 1;
}

wf_status wf_gpu_fit_alpha_beta(const double *bytes, const double *t, int n, double *alpha_s, double *bw_bps)
{
    /* Weights 1/t^2: relative residuals, so small messages fix alpha and
     * large ones the bandwidth. */
    double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        if (!(t[i] > 0) || !(bytes[i] > 0))
            return wf_errorf(WF_INVAL, "fit: collective point %d has %g bytes in %g s", i, bytes[i], t[i]);
        if (bytes[i] != bytes[0])
            distinct = 1;
        double w = 1.0 / (t[i] * t[i]);
        s00 += w;
        s01 += w * bytes[i];
        s11 += w * bytes[i] * bytes[i];
        r0 += w * t[i];
        r1 += w * bytes[i] * t[i];
    }
    if (n < 2 || !distinct)
        return wf_errorf(WF_INVAL, "fit: a collective needs two message sizes or more, got %d points", n);
    double det = s00 * s11 - s01 * s01;
    double a = (s11 * r0 - s01 * r1) / det, b = (s00 * r1 - s01 * r0) / det;
    if (a < 0) {
        a = 0;
        b = r1 / s11;
    }
    if (!(b > 0))
        return wf_errorf(WF_INVAL, "fit: collective times do not grow with the message size");
    *alpha_s = a;
    *bw_bps = 1.0 / b;
    return WF_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The weights of the knots at log-FLOPs x (the hat functions of linear
 * interpolation, constant beyond the ends: what wf_device_matrix_eff does). */
static void hat_weights(const double *knot, int k, double x, double *w)
{
    for (int i = 0; i < k; i++)
        w[i] = 0;
    if (k == 1 || x <= knot[0]) {
        w[0] = 1;
        return;
    }
    if (x >= knot[k - 1]) {
        w[k - 1] = 1;
        return;
    }
    int i = 0;
    while (x > knot[i + 1])
        i++;
    double f = (x - knot[i]) / (knot[i + 1] - knot[i]);
    w[i] = 1 - f;
    w[i + 1] = f;
}

int wf_gpu_fit_eff_curve(const double *flops, const double *eff, int n, int max_knots, wf_eff_point *out)
{
    if (n < 1 || max_knots < 1 || max_knots > WF_MAX_EFF)
        return wf_errorf(WF_INVAL, "fit: %d efficiency points for %d knots", n, max_knots);
    double *lf = malloc(sizeof(double) * (size_t)n);
    if (!lf)
        return wf_errorf(WF_NOMEM, "fit: out of memory");
    for (int i = 0; i < n; i++) {
        if (!(flops[i] > 0) || !(eff[i] > 0)) {
            free(lf);
            return wf_errorf(WF_INVAL, "fit: efficiency point %d is {%g FLOPs, %g}", i, flops[i], eff[i]);
        }
        lf[i] = log(flops[i]);
    }
    qsort(lf, (size_t)n, sizeof lf[0], cmp_double);
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (nd == 0 || lf[i] != lf[nd - 1])
            lf[nd++] = lf[i];
    /* Knots at quantiles of the distinct FLOP counts: every knot is a
     * measured point, so each hat function has data and the system is
     * regular. */
    int k = nd < max_knots ? nd : max_knots;
    double knot[WF_MAX_EFF];
    for (int i = 0; i < k; i++)
        knot[i] = lf[k == 1 ? 0 : (int)lround((double)i * (nd - 1) / (k - 1))];
    free(lf);
    /* Normal equations of sum_i ((sum_j w_ij e_j - eff_i) / eff_i)^2. */
    double a[WF_MAX_EFF * WF_MAX_EFF] = {0}, b[WF_MAX_EFF] = {0}, w[WF_MAX_EFF];
    for (int i = 0; i < n; i++) {
        hat_weights(knot, k, log(flops[i]), w);
        double r = 1.0 / (eff[i] * eff[i]);
        for (int p = 0; p < k; p++) {
            b[p] += r * w[p] * eff[i];
            for (int q = 0; q < k; q++)
                a[p * k + q] += r * w[p] * w[q];
        }
    }
    if (!solve(a, b, k))
        return wf_errorf(WF_INTERNAL, "fit: singular efficiency system (%d knots)", k);
    for (int i = 0; i < k; i++) {
        double e = b[k - 1 - i];
        out[i].min_flops = exp(knot[k - 1 - i]);
        out[i].eff = e > 1 ? 1 : e < 1e-3 ? 1e-3 : e;
    }
    return k;
}

/* ---- matrix products ----------------------------------------------------------- */

/* Bytes a product moves: both inputs and the output. */
static double product_bytes(const wf_kernel_point *k)
{
    return (double)(k->m * k->k + k->k * k->n) * wf_mdtype_in_bytes(k->dtype) +
           (double)(k->m * k->n) * wf_mdtype_out_bytes(k->dtype);
}

/* The product's rate with its memory traffic taken out, as the cost model
 * adds it back (at most half of the time is taken out). */
static double compute_rate(const wf_kernel_point *k, double mem_bw_bps)
{
    double flops = 2.0 * (double)k->m * (double)k->n * (double)k->k;
    double t = k->seconds, tc = t - product_bytes(k) / mem_bw_bps;
    return flops / (tc > 0.5 * t ? tc : 0.5 * t);
}

static double kernel_flops(const wf_kernel_point *k)
{
    return 2.0 * (double)k->m * (double)k->n * (double)k->k;
}

/* ---- collectives ------------------------------------------------------------------ */

static double log2_rounds(int64_t p)
{
    double r = 0;
    for (int64_t x = 1; x < p; x <<= 1)
        r += 1;
    return r;
}

/* One level from the collectives of one scope: the all-reduce's alpha-beta
 * fit, read through the cost model's closed form for p ranks (recursive
 * halving and doubling, 2 log2(p) latency steps and 2 (p-1)/p n bytes per
 * device: the bandwidth term equals the ring's), sets latency_s and
 * bw_bps x eff; bw_bps is the best bus bandwidth any collective of the
 * scope reached (at least that product), eff the all-reduce's share of it. */
static wf_status fit_level(const wf_cluster_measured *m, wf_mscope scope, wf_level *l)
{
    double bytes[WF_MEASURED_MAX_COLL], t[WF_MEASURED_MAX_COLL], best_busbw = 0;
    int n = 0;
    int64_t p = 0;
    for (int i = 0; i < m->ncoll; i++) {
        const wf_coll_point *c = &m->coll[i];
        if (c->scope != scope)
            continue;
        double busbw = c->bytes / c->seconds * wf_mcoll_busbw_factor(c->op, c->ranks);
        if (busbw > best_busbw)
            best_busbw = busbw;
        if (c->op == WF_MCOLL_ALLREDUCE) {
            if (p && c->ranks != p)
                return wf_errorf(WF_INVAL, "fit: %s all_reduce points over %lld and %lld ranks",
                                 wf_mscope_name(scope), (long long)p, (long long)c->ranks);
            p = c->ranks;
            bytes[n] = c->bytes;
            t[n++] = c->seconds;
        }
    }
    if (n == 0)
        return WF_NOTFOUND;
    double alpha = 0, bw = 0;
    wf_status st = wf_gpu_fit_alpha_beta(bytes, t, n, &alpha, &bw);
    if (st != WF_OK)
        return st;
    double eff_bw = bw * 2.0 * (double)(p - 1) / (double)p; /* the level's bw_bps x eff */
    l->latency_s = alpha / (2.0 * log2_rounds(p));
    l->bw_bps = best_busbw > eff_bw ? best_busbw : eff_bw;
    l->eff = eff_bw / l->bw_bps;
    if (l->eff < 1e-3)
        l->eff = 1e-3;
    return WF_OK;
}

/* ---- the shape-aware products ----------------------------------------------------------- */

/* The gemm kind a measured dtype runs as. */
static wf_gemm_kind mdtype_kind(wf_mdtype t)
{
    switch (t) {
    case WF_MDT_FP8:
        return WF_GEMM_FP8;
    case WF_MDT_BF16:
    case WF_MDT_FP16:
        return WF_GEMM_HALF;
    case WF_MDT_TF32:
        return WF_GEMM_TF32;
    default:
        return WF_GEMM_FP32;
    }
}

/* The peak wf_gemm_time charges a kind against (kernels.c's kind_peak). */
static double gemm_peak(const wf_device *d, wf_gemm_kind k)
{
    switch (k) {
    case WF_GEMM_FP8:
        return d->fp8_flops;
    case WF_GEMM_HALF:
        return d->matrix_flops[WF_DTYPE_BF16] > 0 ? d->matrix_flops[WF_DTYPE_BF16] : d->matrix_flops[WF_DTYPE_FP16];
    case WF_GEMM_TF32:
        return d->matrix_flops[WF_DTYPE_FP16] / 2.0;
    default:
        return d->matrix_flops[WF_DTYPE_FP32];
    }
}

/* Sum of squared log(predicted / measured) over the kind's points. */
static double gemm_loss(const wf_device *d, const wf_cluster_measured *m, wf_gemm_kind kind)
{
    double s = 0;
    for (int i = 0; i < m->nkernels; i++) {
        const wf_kernel_point *k = &m->kernels[i];
        if (mdtype_kind(k->dtype) != kind)
            continue;
        double r = log(wf_gemm_time(d, kind, 1, (double)k->m, (double)k->n, (double)k->k) / k->seconds);
        s += r * r;
    }
    return s;
}

/* Golden-section search of one factor of d->gemm[kind] over [lo, hi]. */
static void golden(wf_device *d, const wf_cluster_measured *m, wf_gemm_kind kind, double *x, double lo, double hi)
{
    const double g = 0.6180339887498949;
    double a = lo, b = hi, c = b - g * (b - a), e = a + g * (b - a);
    *x = c;
    double fc = gemm_loss(d, m, kind);
    *x = e;
    double fe = gemm_loss(d, m, kind);
    for (int it = 0; it < 60; it++) {
        if (fc < fe) {
            b = e, e = c, fe = fc;
            c = b - g * (b - a);
            *x = c;
            fc = gemm_loss(d, m, kind);
        } else {
            a = c, c = e, fc = fe;
            e = a + g * (b - a);
            *x = e;
            fe = gemm_loss(d, m, kind);
        }
    }
    *x = fc < fe ? c : e;
}

/* Fits each measured kind's products: the base's tile structure (tiles,
 * fill and drain, epilogue, wave quantization; a generic Hopper-class one
 * where the base has none) with eff in (0.05, 1] and launch_s in [0, 100 us]
 * set by coordinate descent on the points' log errors. Returns the number of
 * kinds fitted. */
static int fit_gemm_kinds(wf_device *d, const wf_cluster_measured *m)
{
    int fitted = 0;
    for (int kind = 0; kind < WF_GEMM_KINDS; kind++) {
        int n = 0;
        for (int i = 0; i < m->nkernels; i++)
            n += mdtype_kind(m->kernels[i].dtype) == (wf_gemm_kind)kind;
        if (n == 0 || !(gemm_peak(d, (wf_gemm_kind)kind) > 0))
            continue;
        wf_gemm_fit *f = &d->gemm[kind];
        if (f->tile_m <= 0) {
            const wf_gemm_fit generic = {128, kind == WF_GEMM_FP32 ? 128 : 256, 0.8, 1000, 300, 0.5, 10e-6};
            *f = generic;
        }
        /* eff is of the best whole-product rate measured (the peak), which
         * the K loop's rate can exceed: capped at 1 there. */
        for (int round = 0; round < 6; round++) {
            golden(d, m, (wf_gemm_kind)kind, &f->eff, 0.05, 1.0);
            golden(d, m, (wf_gemm_kind)kind, &f->launch_s, 0, 100e-6);
        }
        /* Quoted as the presets quote them (and a cluster file keeps them). */
        f->eff = round(1000.0 * f->eff) / 1000.0;
        f->launch_s = round(1e8 * f->launch_s) / 1e8;
        fitted++;
    }
    return fitted;
}

/* ---- the cluster ----------------------------------------------------------------- */

wf_status wf_gpu_fit(const wf_cluster_measured *m, const wf_cluster *base, wf_cluster *out)
{
    if (!(m->copy_s > 0) || !(m->copy_bytes > 0))
        return wf_errorf(WF_INVAL, "fit: no device-to-device copy measured");
    if (!(m->mem_alloc_bytes > 0))
        return wf_errorf(WF_INVAL, "fit: no device memory measured");
    *out = *base;
    wf_device *d = &out->dev;
    snprintf(out->name, sizeof out->name, "calibrated:%.60s x%d (%.10s)", m->device, m->devices, m->date);
    snprintf(d->name, sizeof d->name, "%.47s", m->device);

    /* Memory: the copy reads and writes copy_bytes each. */
    d->mem_bw_bps = 2.0 * m->copy_bytes / m->copy_s;
    d->mem_eff = 1.0;
    /* The device's whole memory (cudaMemGetInfo's total), as the presets
     * quote it: each profile takes out what it holds itself (sw=pytorch the
     * CUDA context, the others mem_reserved_bytes). The largest allocation
     * that succeeded already has this process's context taken out, and
     * charging the context again counted it twice. Older measurements
     * without the total keep the largest allocation. */
    d->mem_bytes = m->mem_total_bytes > 0 ? m->mem_total_bytes : m->mem_alloc_bytes;
    if (out->mem_reserved_bytes >= 0.5 * d->mem_bytes)
        out->mem_reserved_bytes = 0.1 * d->mem_bytes;
    d->op_overhead_s = m->launch_s;

    /* Peaks: the best compute rate per dtype. */
    double peak[WF_MDT_COUNT] = {0};
    for (int i = 0; i < m->nkernels; i++) {
        double r = compute_rate(&m->kernels[i], d->mem_bw_bps);
        if (r > peak[m->kernels[i].dtype])
            peak[m->kernels[i].dtype] = r;
    }
    if (!(peak[WF_MDT_FP32] > 0))
        return wf_errorf(WF_INVAL, "fit: no fp32 matrix product measured");
    const wf_mdtype ref = peak[WF_MDT_BF16] > 0 ? WF_MDT_BF16 : peak[WF_MDT_FP16] > 0 ? WF_MDT_FP16 : WF_MDT_FP32;
    const double base_vec32 = base->dev.vector_flops[WF_DTYPE_FP32];
    for (int t = 0; t < WF_DTYPE_COUNT; t++) {
        d->matrix_flops[t] = 0;
        /* The vector unit is not measured apart: the fp32 product without
         * tensor cores runs on it, so its rate is the fp32 vector peak, and
         * the other dtypes keep the base's ratio to fp32. */
        d->vector_flops[t] = base_vec32 > 0 ? base->dev.vector_flops[t] / base_vec32 * peak[WF_MDT_FP32] : 0;
    }
    d->vector_flops[WF_DTYPE_FP32] = peak[WF_MDT_FP32];
    d->matrix_flops[WF_DTYPE_FP32] = peak[WF_MDT_FP32];
    d->matrix_flops[WF_DTYPE_BF16] = peak[WF_MDT_BF16];
    d->matrix_flops[WF_DTYPE_FP16] = peak[WF_MDT_FP16];

    /* The efficiency curve of the reference dtype: each product's rate as a
     * share of the peak, at its FLOPs. */
    double *fl = malloc(sizeof(double) * (size_t)m->nkernels), *ef = malloc(sizeof(double) * (size_t)m->nkernels);
    if (!fl || !ef) {
        free(fl);
        free(ef);
        return wf_errorf(WF_NOMEM, "fit: out of memory");
    }
    int n = 0;
    for (int i = 0; i < m->nkernels; i++)
        if (m->kernels[i].dtype == ref) {
            fl[n] = kernel_flops(&m->kernels[i]);
            ef[n++] = compute_rate(&m->kernels[i], d->mem_bw_bps) / peak[ref];
        }
    int k = wf_gpu_fit_eff_curve(fl, ef, n, WF_MAX_EFF, d->matrix_eff);
    if (k < 0) {
        free(fl);
        free(ef);
        return (wf_status)k;
    }
    d->neff = k;

    /* FP8: the best rate is the peak; fp8_eff the geometric mean of what the
     * products reach of the curve on it (1 when they follow the curve). */
    d->fp8_flops = peak[WF_MDT_FP8];
    d->fp8_eff = 1.0;
    double slog = 0;
    n = 0;
    for (int i = 0; i < m->nkernels; i++)
        if (m->kernels[i].dtype == WF_MDT_FP8) {
            double f = kernel_flops(&m->kernels[i]);
            slog += log(compute_rate(&m->kernels[i], d->mem_bw_bps) / (d->fp8_flops * wf_device_matrix_eff(d, f)));
            n++;
        }
    free(fl);
    free(ef);
    if (n > 0) {
        double e = exp(slog / n);
        d->fp8_eff = e > 1 ? 1 : e < 1e-3 ? 1e-3 : e;
    }

    /* The shape-aware device model: the products of each measured kind
     * fitted on their points; the memory-bound kernels' and the optimizer's
     * fractions (of the base's bandwidth) and the attention kernels'
     * efficiencies (of its 16-bit peak) carried over to the measured
     * bandwidth and peak, so their times stay the base's. */
    if (m->sms > 0) {
        d->sms = m->sms;
        double bw_ratio = base->dev.mem_bw_bps / d->mem_bw_bps;
        for (int mk = 0; mk < WF_MB_KINDS; mk++)
            for (int b = 0; b < 2; b++)
                if (d->mb_eff[mk][b] > 0)
                    d->mb_eff[mk][b] = fmin(1.0, round(1000.0 * d->mb_eff[mk][b] * bw_ratio) / 1000.0);
        if (d->opt_eff > 0)
            d->opt_eff = fmin(1.0, round(1000.0 * d->opt_eff * bw_ratio) / 1000.0);
        double p0 = gemm_peak(&base->dev, WF_GEMM_HALF), p1 = gemm_peak(d, WF_GEMM_HALF);
        if (p0 > 0 && p1 > 0)
            for (int a = 0; a < WF_ATTN_IMPL_COUNT; a++)
                for (int h = 0; h < WF_ATTN_HEAD_DIMS; h++) {
                    wf_attn_fit *af = &d->attn[a];
                    if (af->eff_fwd[h] > 0)
                        af->eff_fwd[h] = fmin(1.0, round(1000.0 * af->eff_fwd[h] * p0 / p1) / 1000.0);
                    if (af->eff_bwd[h] > 0)
                        af->eff_bwd[h] = fmin(1.0, round(1000.0 * af->eff_bwd[h] * p0 / p1) / 1000.0);
                }
        d->kernel_model = fit_gemm_kinds(d, m) > 0 ? 1 : 0;
    }

    /* Links: the measured job's shape, then each measured scope's level. */
    if (m->nodes > 1 && out->nlevels < 2)
        return wf_errorf(WF_INVAL, "fit: %d nodes measured, but the base cluster '%s' has one level", m->nodes,
                         base->name);
    out->level[0].size = m->devices_per_node;
    for (int l = 1; l < out->nlevels; l++)
        out->level[l].size = l == out->nlevels - 1 ? m->nodes : 1;
    wf_status st = fit_level(m, WF_MSCOPE_NODE, &out->level[0]);
    if (st != WF_OK && st != WF_NOTFOUND)
        return st;
    if (out->nlevels > 1) {
        st = fit_level(m, WF_MSCOPE_JOB, &out->level[out->nlevels - 1]);
        if (st != WF_OK && st != WF_NOTFOUND)
            return st;
    }
    /* NCCL reduces on the GPU inside the measured time. */
    out->reduce_bps = 0;
    return wf_cluster_check(out);
}
