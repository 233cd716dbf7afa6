/* weft gpu, without a GPU: the shapes `calibrate --gpu` measures (they cover
 * the shared H100 kernel file's), nccl-tests' bus-bandwidth factors, the fit
 * from measured points to the cluster's factors (points made from known
 * factors by the closed forms the fit inverts must give those factors back),
 * the "measured" section's round trip through JSON and the cluster reader,
 * its refusals, and the refusal of the measuring calls on a machine without
 * a GPU (or a build without CUDA): one line, exit status 1.
 *
 * With WEFT_GPU_WRITE_FIXTURE=PATH it also writes the synthetic calibrated
 * cluster file (tests/data/cluster-gpu-synthetic.json is that file; the test
 * checks the committed copy is what the fit writes today). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/cost.h"
#include "weft/gpu.h"

static void assert_rel(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol * fabs(want)))
        fail_msg("got %.17g, want %.17g (tolerance %g)", got, want, tol);
}

static const char *src_path(const char *rel, char *buf, size_t cap)
{
    const char *root = getenv("WEFT_SOURCE_DIR");
    snprintf(buf, cap, "%s/%s", root ? root : ".", rel);
    return buf;
}

/* ---- shapes and factors ------------------------------------------------------------ */

static int has_shape(const wf_gpu_shape *s, int n, int64_t m, int64_t nn, int64_t k, wf_mdtype t)
{
    for (int i = 0; i < n; i++)
        if (s[i].m == m && s[i].n == nn && s[i].k == k && s[i].dtype == t)
            return 1;
    return 0;
}

static void test_shapes(void **state)
{
    (void)state;
    wf_gpu_shape s[WF_MEASURED_MAX_KERNELS];
    int n = wf_gpu_shapes(0, 9, 0, s, WF_MEASURED_MAX_KERNELS);
    /* bf16 6 squares + 3 x 18 layer shapes + 3 vocabulary, less 2048^3 and
     * 8192^3 counted twice; fp16 6 + 18 less 8192^3; fp32 and tf32 7 each;
     * fp8 5 squares + 3 x 18 less 2048^3 and 8192^3. */
    assert_int_equal(n, 61 + 23 + 14 + 57);
    assert_int_equal(wf_gpu_shapes(0, 8, 0, s, WF_MEASURED_MAX_KERNELS), 61 + 23 + 14); /* A100: no fp8 */
    assert_int_equal(wf_gpu_shapes(0, 8, 9, s, WF_MEASURED_MAX_KERNELS), n);           /* Ada: fp8 */
    n = wf_gpu_shapes(0, 9, 0, s, WF_MEASURED_MAX_KERNELS);
    for (int i = 0; i < n; i++) {
        assert_true(s[i].m >= 512 && s[i].n >= 512 && s[i].k >= 512);
        assert_true(s[i].m % 16 == 0 && s[i].n % 16 == 0 && s[i].k % 16 == 0); /* FP8's alignment */
        for (int j = 0; j < i; j++)
            assert_false(s[i].m == s[j].m && s[i].n == s[j].n && s[i].k == s[j].k && s[i].dtype == s[j].dtype);
    }
    /* Every shape of the shared H100 file is measured, so the two compare
     * point by point. */
    static const struct {
        const char *key;
        wf_mdtype t;
    } SETS[] = {{"gemm_bf16", WF_MDT_BF16},   {"gemm_fp8_e4m3", WF_MDT_FP8},
                {"gemm_fp8_e4m3_transformer_shapes", WF_MDT_FP8},
                {"gemm_fp32", WF_MDT_FP32},   {"gemm_tf32", WF_MDT_TF32}};
    char path[1024];
    cJSON *j = NULL;
    assert_int_equal(wf_json_read_file(src_path("tests/data/h100-kernels-2026-11.json", path, sizeof path), &j),
                     WF_OK);
    int checked = 0;
    for (size_t k = 0; k < sizeof SETS / sizeof SETS[0]; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, SETS[k].key), *p;
        assert_non_null(a);
        cJSON_ArrayForEach(p, a)
        {
            int64_t m = (int64_t)cJSON_GetObjectItem(p, "M")->valuedouble;
            int64_t nn = (int64_t)cJSON_GetObjectItem(p, "N")->valuedouble;
            int64_t kk = (int64_t)cJSON_GetObjectItem(p, "K")->valuedouble;
            if (!has_shape(s, n, m, nn, kk, SETS[k].t))
                fail_msg("%s %lldx%lldx%lld is not measured", SETS[k].key, (long long)m, (long long)nn,
                         (long long)kk);
            checked++;
        }
    }
    assert_int_equal(checked, 63 + 4 + 36 + 5 + 5);
    cJSON_Delete(j);
    /* quick: every dtype once, fp8 only where the device has it */
    n = wf_gpu_shapes(1, 9, 0, s, WF_MEASURED_MAX_KERNELS);
    assert_int_equal(n, 4 + 6 + 4);
    assert_int_equal(wf_gpu_shapes(1, 7, 0, s, WF_MEASURED_MAX_KERNELS), 13);
    double sizes[32];
    assert_int_equal(wf_gpu_coll_sizes(0, sizes, 32), 14); /* 4 B .. 256 MiB by 4 */
    assert_true(sizes[0] == 4 && sizes[13] == 268435456.0);
    assert_int_equal(wf_gpu_coll_sizes(1, sizes, 32), 4); /* 1 KiB .. 4 MiB by 16 */
}

static void test_busbw_factors(void **state)
{
    (void)state;
    /* nccl-tests a0b82b2, src/<op>.cu, <Op>GetBw: 2(n-1)/n, (n-1)/n, (n-1)/n, (n-1)/n, 1 */
    assert_rel(wf_mcoll_busbw_factor(WF_MCOLL_ALLREDUCE, 8), 1.75, 1e-15);
    assert_rel(wf_mcoll_busbw_factor(WF_MCOLL_REDUCE_SCATTER, 8), 0.875, 1e-15);
    assert_rel(wf_mcoll_busbw_factor(WF_MCOLL_ALLGATHER, 4), 0.75, 1e-15);
    assert_rel(wf_mcoll_busbw_factor(WF_MCOLL_ALLTOALL, 2), 0.5, 1e-15);
    assert_rel(wf_mcoll_busbw_factor(WF_MCOLL_SENDRECV, 8), 1, 1e-15);
    for (int op = 0; op < WF_MCOLL_COUNT; op++) {
        wf_mcoll back;
        assert_true(wf_mcoll_parse(wf_mcoll_name((wf_mcoll)op), &back) && back == (wf_mcoll)op);
    }
    for (int t = 0; t < WF_MDT_COUNT; t++) {
        wf_mdtype back;
        assert_true(wf_mdtype_parse(wf_mdtype_name((wf_mdtype)t), &back) && back == (wf_mdtype)t);
    }
}

/* ---- synthetic points from known factors -------------------------------------------- */

/* The truth: an 8-knot curve at the FLOPs of squares 256..32768 (2 s^3). */
#define NKNOT 8
static double knot_flops(int i)
{
    double s = 256.0 * (double)(1 << i);
    return 2 * s * s * s;
}
static const double KNOT_EFF[NKNOT] = {0.04, 0.12, 0.3, 0.55, 0.78, 0.9, 0.97, 1.0};
static const double PEAK_BF16 = 800e12, PEAK_FP16 = 760e12, PEAK_FP32 = 50e12, PEAK_FP8 = 1500e12, FP8_EFF = 0.85;
static const double MEM_BW = 3.0e12, LAUNCH_S = 4.5e-6;

/* Linear in log(FLOPs) between knots, constant beyond (an independent
 * reference for the curve, not the library's interpolation). */
static double true_eff(double f)
{
    if (f <= knot_flops(0))
        return KNOT_EFF[0];
    for (int i = 1; i < NKNOT; i++)
        if (f <= knot_flops(i)) {
            double x = log(f / knot_flops(i - 1)) / log(knot_flops(i) / knot_flops(i - 1));
            return KNOT_EFF[i - 1] + x * (KNOT_EFF[i] - KNOT_EFF[i - 1]);
        }
    return KNOT_EFF[NKNOT - 1];
}

static double product_time(int64_t m, int64_t n, int64_t k, wf_mdtype t)
{
    double f = 2.0 * (double)m * (double)n * (double)k;
    double bytes = (double)(m * k + k * n) * wf_mdtype_in_bytes(t) + (double)(m * n) * wf_mdtype_out_bytes(t);
    double rate = t == WF_MDT_BF16   ? PEAK_BF16 * true_eff(f)
                  : t == WF_MDT_FP8  ? PEAK_FP8 * FP8_EFF * true_eff(f)
                  : t == WF_MDT_FP16 ? PEAK_FP16
                  : t == WF_MDT_TF32 ? 2 * PEAK_FP32
                                     : PEAK_FP32;
    return f / rate + bytes / MEM_BW;
}

static void add_kernel(wf_cluster_measured *m, int64_t mm, int64_t n, int64_t k, wf_mdtype t)
{
    m->kernels[m->nkernels++] = (wf_kernel_point){mm, n, k, t, product_time(mm, n, k, t)};
}

typedef struct {
    double alpha_s, bw_eff_bps, sendrecv_bps;
} true_level;

static double lg2(int64_t p)
{
    double r = 0;
    for (int64_t x = 1; x < p; x <<= 1)
        r += 1;
    return r;
}

/* The cost model's flat closed forms (src/cost/collective.c, recursive
 * halving/doubling for the reductions and gathers, pairwise all-to-all),
 * with a send/recv at its own bandwidth. */
static double coll_time(wf_mcoll op, int64_t p, double n, const true_level *l)
{
    double pp = (double)p, a = l->alpha_s, b = 1.0 / l->bw_eff_bps;
    switch (op) {
    case WF_MCOLL_ALLREDUCE:
        return 2 * lg2(p) * a + 2 * (pp - 1) / pp * n * b;
    case WF_MCOLL_REDUCE_SCATTER:
    case WF_MCOLL_ALLGATHER:
        return lg2(p) * a + (pp - 1) / pp * n * b;
    case WF_MCOLL_ALLTOALL:
        return (pp - 1) * a + (pp - 1) / pp * n * b;
    case WF_MCOLL_SENDRECV:
    case WF_MCOLL_COUNT:
        break;
    }
    return a + n / l->sendrecv_bps;
}

static void add_scope(wf_cluster_measured *m, wf_mscope scope, int64_t p, const true_level *l)
{
    double sizes[32];
    int ns = wf_gpu_coll_sizes(0, sizes, 32);
    for (int op = 0; op < WF_MCOLL_COUNT; op++)
        for (int i = 0; i < ns; i++)
            m->coll[m->ncoll++] =
                (wf_coll_point){(wf_mcoll)op, scope, p, sizes[i], coll_time((wf_mcoll)op, p, sizes[i], l)};
}

static double best_busbw(const wf_cluster_measured *m, wf_mscope scope)
{
    double best = 0;
    for (int i = 0; i < m->ncoll; i++)
        if (m->coll[i].scope == scope) {
            double b = m->coll[i].bytes / m->coll[i].seconds * wf_mcoll_busbw_factor(m->coll[i].op, m->coll[i].ranks);
            best = b > best ? b : best;
        }
    return best;
}

static const true_level NODE_LEVEL = {2.5e-6, 315e9, 380e9}, JOB_LEVEL = {9e-6, 42e9, 45e9};

/* A node of 8 GPUs (nodes = 1), or 2 nodes of 4. */
static void synthetic(wf_cluster_measured *m, int nodes)
{
    memset(m, 0, sizeof *m);
    snprintf(m->date, sizeof m->date, "2026-11-26T12:00:00Z");
    snprintf(m->device, sizeof m->device, "Synthetic GPU 80GB");
    m->cc_major = 9;
    m->cc_minor = 0;
    m->sms = 132;
    m->nodes = nodes;
    m->devices_per_node = 8 / nodes;
    m->devices = 8;
    snprintf(m->cuda_runtime, sizeof m->cuda_runtime, "13.0");
    snprintf(m->cuda_driver, sizeof m->cuda_driver, "13.0");
    snprintf(m->cublaslt, sizeof m->cublaslt, "13.1.0");
    snprintf(m->nccl, sizeof m->nccl, "2.28.3");
    snprintf(m->attention_note, sizeof m->attention_note, "not measured");
    m->launch_s = LAUNCH_S;
    m->mem_total_bytes = 85017493504.0;
    m->mem_free_bytes = 84500000000.0;
    m->mem_alloc_bytes = 84400000000.0;
    m->copy_bytes = 1073741824.0;
    m->copy_s = 2 * m->copy_bytes / MEM_BW;
    /* bf16: every knot, one product between each pair (s x s x 2s: 4 s^3
     * FLOPs, inside (2 s^3, 16 s^3)), and shapes sharing a knot's FLOPs. */
    for (int i = 0; i < NKNOT; i++) {
        int64_t s = (int64_t)256 << i;
        add_kernel(m, s, s, s, WF_MDT_BF16);
        if (i + 1 < NKNOT)
            add_kernel(m, s, s, 2 * s, WF_MDT_BF16);
        if (i > 0)
            add_kernel(m, 2 * s, s, s / 2, WF_MDT_BF16);
    }
    for (int i = 2; i < NKNOT; i++) {
        int64_t s = (int64_t)256 << i;
        add_kernel(m, s, s, s, WF_MDT_FP8);
        add_kernel(m, s / 2, s, s, WF_MDT_FP8);
    }
    add_kernel(m, 4096, 4096, 4096, WF_MDT_FP16);
    add_kernel(m, 8192, 8192, 8192, WF_MDT_FP16);
    add_kernel(m, 4096, 4096, 4096, WF_MDT_FP32);
    add_kernel(m, 8192, 6144, 2048, WF_MDT_FP32);
    add_kernel(m, 4096, 4096, 4096, WF_MDT_TF32);
    if (nodes == 1) {
        add_scope(m, WF_MSCOPE_NODE, 8, &NODE_LEVEL);
    } else {
        add_scope(m, WF_MSCOPE_NODE, 4, &NODE_LEVEL);
        add_scope(m, WF_MSCOPE_JOB, 8, &JOB_LEVEL);
    }
}

static void test_fit_curve(void **state)
{
    (void)state;
    /* Points on the truth's knots and between them: the fit puts its knots
     * on the truth's and recovers the values. */
    double f[2 * NKNOT], e[2 * NKNOT];
    int n = 0;
    for (int i = 0; i < NKNOT; i++) {
        f[n] = knot_flops(i);
        e[n++] = KNOT_EFF[i];
        if (i + 1 < NKNOT) {
            f[n] = 2 * knot_flops(i);
            e[n] = true_eff(f[n]);
            n++;
        }
    }
    wf_eff_point out[WF_MAX_EFF];
    assert_int_equal(wf_gpu_fit_eff_curve(f, e, n, WF_MAX_EFF, out), NKNOT);
    for (int i = 0; i < NKNOT; i++) {
        assert_rel(out[i].min_flops, knot_flops(NKNOT - 1 - i), 1e-12);
        assert_rel(out[i].eff, KNOT_EFF[NKNOT - 1 - i], 1e-9);
    }
    /* Fewer knots than distinct points: a least-squares compromise, still
     * sorted descending and in (0, 1]. */
    int k = wf_gpu_fit_eff_curve(f, e, n, 3, out);
    assert_int_equal(k, 3);
    assert_true(out[0].min_flops > out[1].min_flops && out[1].min_flops > out[2].min_flops);
    for (int i = 0; i < k; i++)
        assert_true(out[i].eff > 0 && out[i].eff <= 1);
    /* One point: one knot at its value. */
    assert_int_equal(wf_gpu_fit_eff_curve(f + 3, e + 3, 1, WF_MAX_EFF, out), 1);
    assert_rel(out[0].eff, e[3], 1e-12);
    assert_true(wf_gpu_fit_eff_curve(f, e, 0, WF_MAX_EFF, out) < 0);
}

static void test_fit_alpha_beta(void **state)
{
    (void)state;
    double n[5] = {8, 4096, 1 << 20, 1 << 26, 3e8}, t[5];
    for (int i = 0; i < 5; i++)
        t[i] = 7e-6 + n[i] / 120e9;
    double a, bw;
    assert_int_equal(wf_gpu_fit_alpha_beta(n, t, 5, &a, &bw), WF_OK);
    assert_rel(a, 7e-6, 1e-9);
    assert_rel(bw, 120e9, 1e-9);
    assert_int_equal(wf_gpu_fit_alpha_beta(n, t, 1, &a, &bw), WF_INVAL);
}

static void check_level(const wf_level *l, const true_level *want, double bw_bps)
{
    assert_rel(l->latency_s, want->alpha_s, 1e-8);
    assert_rel(l->bw_bps * l->eff, want->bw_eff_bps, 1e-8);
    assert_rel(l->bw_bps, bw_bps, 1e-12);
}

static void test_fit_cluster(void **state)
{
    (void)state;
    wf_cluster base, c;
    assert_int_equal(wf_cluster_lookup("dgx-h100", &base), WF_OK);
    wf_cluster_measured *m = malloc(sizeof *m);
    assert_non_null(m);
    synthetic(m, 1);
    assert_int_equal(wf_gpu_fit(m, &base, &c), WF_OK);
    const wf_device *d = &c.dev;
    assert_string_equal(d->name, "Synthetic GPU 80GB");
    assert_rel(d->matrix_flops[WF_DTYPE_BF16], PEAK_BF16, 1e-9);
    assert_rel(d->matrix_flops[WF_DTYPE_FP16], PEAK_FP16, 1e-9);
    assert_rel(d->matrix_flops[WF_DTYPE_FP32], PEAK_FP32, 1e-9);
    assert_rel(d->vector_flops[WF_DTYPE_FP32], PEAK_FP32, 1e-9);
    assert_rel(d->fp8_flops * d->fp8_eff, PEAK_FP8 * FP8_EFF, 1e-9);
    assert_int_equal(d->neff, NKNOT);
    for (int i = 0; i < NKNOT; i++) {
        assert_rel(d->matrix_eff[i].min_flops, knot_flops(NKNOT - 1 - i), 1e-12);
        assert_rel(d->matrix_eff[i].eff, KNOT_EFF[NKNOT - 1 - i], 1e-8);
    }
    assert_rel(d->mem_bw_bps, MEM_BW, 1e-12);
    assert_true(d->mem_eff == 1);
    assert_rel(d->mem_bytes, m->mem_total_bytes, 1e-15); /* the total, not the largest allocation */
    assert_rel(d->op_overhead_s, LAUNCH_S, 1e-15);
    /* Through the library's own curve, every bf16 product's time comes back. */
    for (int i = 0; i < m->nkernels; i++) {
        const wf_kernel_point *k = &m->kernels[i];
        if (k->dtype != WF_MDT_BF16)
            continue;
        double f = 2.0 * (double)k->m * (double)k->n * (double)k->k;
        double bytes = (double)(k->m * k->k + k->k * k->n + k->m * k->n) * 2;
        assert_rel(f / (d->matrix_flops[WF_DTYPE_BF16] * wf_device_matrix_eff(d, f)) + bytes / d->mem_bw_bps,
                   k->seconds, 1e-8);
    }
    /* One node of 8: level 0 from the all-reduce, bw the best bus bandwidth. */
    assert_int_equal(c.level[0].size, 8);
    assert_int_equal(c.level[c.nlevels - 1].size, 1);
    check_level(&c.level[0], &NODE_LEVEL, best_busbw(m, WF_MSCOPE_NODE));
    /* The cost model's all-reduce on the fitted level is the measured one. */
    for (int i = 0; i < m->ncoll; i++)
        if (m->coll[i].op == WF_MCOLL_ALLREDUCE)
            assert_rel(wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 8, m->coll[i].bytes, c.level[0].latency_s,
                                         c.level[0].bw_bps * c.level[0].eff),
                       m->coll[i].seconds, 1e-8);
    assert_true(c.reduce_bps == 0);
    /* The unmeasured factors are the base's. */
    assert_true(c.p2p_overhead_s == base.p2p_overhead_s && c.overlap_slowdown == base.overlap_slowdown);
    assert_true(c.dev.vector_eff == base.dev.vector_eff);

    /* Two nodes of 4: level 0 from the node's all-reduce, the outer level
     * from the job's. */
    synthetic(m, 2);
    assert_int_equal(wf_gpu_fit(m, &base, &c), WF_OK);
    assert_int_equal(c.level[0].size, 4);
    assert_int_equal(c.level[c.nlevels - 1].size, 2);
    check_level(&c.level[0], &NODE_LEVEL, best_busbw(m, WF_MSCOPE_NODE));
    check_level(&c.level[c.nlevels - 1], &JOB_LEVEL, best_busbw(m, WF_MSCOPE_JOB));

    /* One GPU: no collectives, the base's links stay. */
    synthetic(m, 1);
    m->ncoll = 0;
    m->devices = m->devices_per_node = 1;
    assert_int_equal(wf_gpu_fit(m, &base, &c), WF_OK);
    assert_int_equal(c.level[0].size, 1);
    assert_true(c.level[0].bw_bps == base.level[0].bw_bps && c.level[0].latency_s == base.level[0].latency_s);

    /* Refusals: no fp32 product, no copy. */
    synthetic(m, 1);
    for (int i = 0; i < m->nkernels; i++)
        if (m->kernels[i].dtype == WF_MDT_FP32)
            m->kernels[i].dtype = WF_MDT_TF32;
    assert_int_equal(wf_gpu_fit(m, &base, &c), WF_INVAL);
    synthetic(m, 1);
    m->copy_s = 0;
    assert_int_equal(wf_gpu_fit(m, &base, &c), WF_INVAL);
    free(m);
}

/* ---- the file ---------------------------------------------------------------------- */

static cJSON *calibrated_file(const wf_cluster_measured *m)
{
    wf_cluster base, c;
    assert_int_equal(wf_cluster_lookup("dgx-h100", &base), WF_OK);
    assert_int_equal(wf_gpu_fit(m, &base, &c), WF_OK);
    cJSON *j = wf_cluster_to_json(&c);
    assert_non_null(j);
    cJSON_AddItemToObject(j, "measured", wf_cluster_measured_to_json(m));
    return j;
}

static wf_status read_back(const cJSON *j, wf_cluster *c, wf_cluster_measured *m)
{
    char *text = wf_json_print(j, 1);
    cJSON *back = NULL;
    wf_status st = wf_json_parse(text, "c.json", &back);
    free(text);
    if (st == WF_OK)
        st = wf_cluster_from_json(back, "c.json", c);
    if (st == WF_OK && m)
        st = wf_cluster_measured_from_json(cJSON_GetObjectItem(back, "measured"), "c.json.measured", m);
    cJSON_Delete(back);
    return st;
}

/* The shape-aware products (`kernels` block) fitted from the measured
 * points: bf16 products timed by a known kernel model (the dgx-h100 bf16
 * structure with eff 0.70 of 989 TFLOP/s and a 15 us launch) come back
 * within 0.5% from the fitted cluster, its fitted launch within 2% and its
 * in-loop rate (eff x the measured peak) within 1% of the truth's; the file
 * written carries the block and reads back with the same times. */
static void test_fit_kernels(void **state)
{
    (void)state;
    wf_cluster_measured *m = malloc(sizeof *m);
    assert_non_null(m);
    synthetic(m, 1);
    wf_cluster truth;
    assert_int_equal(wf_cluster_lookup("dgx-h100", &truth), WF_OK);
    truth.dev.gemm[WF_GEMM_HALF].eff = 0.70;
    truth.dev.gemm[WF_GEMM_HALF].launch_s = 15e-6;
    static const int64_t shapes[][3] = {{1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096},
                                        {8192, 8192, 8192}, {8192, 2304, 768}, {2048, 12288, 4096},
                                        {16384, 3072, 1024}, {768, 50304, 8192}};
    int n = 0;
    /* The synthetic file's 16-bit points follow its FLOPs curve: replaced. */
    for (int i = 0; i < m->nkernels; i++)
        if (m->kernels[i].dtype != WF_MDT_BF16 && m->kernels[i].dtype != WF_MDT_FP16)
            m->kernels[n++] = m->kernels[i];
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        wf_kernel_point *k = &m->kernels[n++];
        k->m = shapes[i][0], k->n = shapes[i][1], k->k = shapes[i][2];
        k->dtype = WF_MDT_BF16;
        k->seconds = wf_gemm_time(&truth.dev, WF_GEMM_HALF, 1, (double)k->m, (double)k->n, (double)k->k);
    }
    m->nkernels = n;
    wf_cluster base, c, back;
    assert_int_equal(wf_cluster_lookup("dgx-h100", &base), WF_OK);
    assert_int_equal(wf_gpu_fit(m, &base, &c), WF_OK);
    assert_true(wf_device_kernels(&c.dev));
    assert_int_equal(c.dev.sms, 132);
    const wf_gemm_fit *f = &c.dev.gemm[WF_GEMM_HALF];
    printf("fitted bf16: eff %.3f of %.1f TFLOP/s (in-loop %.1f, truth %.1f), launch %.2f us (truth 15)\n", f->eff,
           1e-12 * c.dev.matrix_flops[WF_DTYPE_BF16], 1e-12 * f->eff * c.dev.matrix_flops[WF_DTYPE_BF16], 0.70 * 989,
           1e6 * f->launch_s);
    assert_rel(f->launch_s, 15e-6, 0.02);
    assert_rel(f->eff * c.dev.matrix_flops[WF_DTYPE_BF16], 0.70 * 989e12, 0.01);
    cJSON *j = wf_cluster_to_json(&c);
    assert_non_null(j);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "device"), "kernels"));
    assert_int_equal(read_back(j, &back, NULL), WF_OK);
    cJSON_Delete(j);
    for (int i = 0; i < m->nkernels; i++) {
        const wf_kernel_point *k = &m->kernels[i];
        if (k->dtype != WF_MDT_BF16)
            continue;
        double t = wf_gemm_time(&c.dev, WF_GEMM_HALF, 1, (double)k->m, (double)k->n, (double)k->k);
        double tb = wf_gemm_time(&back.dev, WF_GEMM_HALF, 1, (double)k->m, (double)k->n, (double)k->k);
        printf("  %lldx%lldx%lld: measured %.2f us, fitted %.2f us (%+.2f%%)\n", (long long)k->m, (long long)k->n,
               (long long)k->k, 1e6 * k->seconds, 1e6 * t, 100 * (t / k->seconds - 1));
        assert_rel(t, k->seconds, 0.005);
        assert_rel(tb, t, 1e-9);
    }
    free(m);
}

static void test_round_trip(void **state)
{
    (void)state;
    wf_cluster_measured *m = malloc(sizeof *m), *m2 = malloc(sizeof *m2);
    assert_true(m && m2);
    synthetic(m, 2);
    cJSON *j = calibrated_file(m);
    wf_cluster c;
    assert_int_equal(read_back(j, &c, m2), WF_OK);
    assert_int_equal(m2->nkernels, m->nkernels);
    assert_int_equal(m2->ncoll, m->ncoll);
    assert_int_equal(m2->nattn, 0);
    /* Numbers come back to the last bit or two (cJSON prints 15 significant
     * digits when they read back within its tolerance). */
    for (int i = 0; i < m->nkernels; i++) {
        const wf_kernel_point *a = &m->kernels[i], *b = &m2->kernels[i];
        assert_true(a->m == b->m && a->n == b->n && a->k == b->k && a->dtype == b->dtype);
        assert_rel(b->seconds, a->seconds, 1e-14);
    }
    for (int i = 0; i < m->ncoll; i++) {
        const wf_coll_point *a = &m->coll[i], *b = &m2->coll[i];
        assert_true(a->op == b->op && a->scope == b->scope && a->ranks == b->ranks && a->bytes == b->bytes);
        assert_rel(b->seconds, a->seconds, 1e-14);
    }
    assert_string_equal(m2->date, m->date);
    assert_string_equal(m2->nccl, m->nccl);
    assert_true(m2->cc_major == 9 && m2->cc_minor == 0 && m2->nodes == 2 && m2->devices_per_node == 4);
    assert_rel(m2->copy_s, m->copy_s, 1e-14);
    assert_rel(m2->launch_s, m->launch_s, 1e-14);
    assert_true(m2->mem_alloc_bytes == m->mem_alloc_bytes && m2->mem_total_bytes == m->mem_total_bytes);
    /* An attention point survives too. */
    m->attn[m->nattn++] = (wf_attn_point){4, 16, 4, 2048, 128, 1, 1.7e-4, 5.9e-4};
    cJSON_Delete(j);
    j = calibrated_file(m);
    assert_int_equal(read_back(j, &c, m2), WF_OK);
    assert_int_equal(m2->nattn, 1);
    assert_true(m2->attn[0].batch == 4 && m2->attn[0].heads == 16 && m2->attn[0].kv_heads == 4 &&
                m2->attn[0].seq == 2048 && m2->attn[0].head_dim == 128 && m2->attn[0].causal == 1);
    assert_rel(m2->attn[0].fwd_s, 1.7e-4, 1e-14);
    assert_rel(m2->attn[0].bwd_s, 5.9e-4, 1e-14);

    /* Refusals name the field. */
    cJSON *meas = cJSON_GetObjectItem(j, "measured");
    cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(meas, "collectives"), 3);
    cJSON_SetNumberValue(cJSON_GetObjectItem(p0, "busbw_bps"), 1e9);
    assert_int_equal(read_back(j, &c, NULL), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "c.json.measured.collectives[3].busbw_bps"));
    /* (point 3 is the node's all-reduce over 4 ranks) */
    cJSON_SetNumberValue(cJSON_GetObjectItem(p0, "busbw_bps"), cJSON_GetObjectItem(p0, "algbw_bps")->valuedouble *
                                                                   wf_mcoll_busbw_factor(WF_MCOLL_ALLREDUCE, 4));
    assert_int_equal(read_back(j, &c, NULL), WF_OK);
    cJSON *k0 = cJSON_GetArrayItem(cJSON_GetObjectItem(meas, "kernels"), 0);
    cJSON_ReplaceItemInObject(k0, "dtype", cJSON_CreateString("int4"));
    assert_int_equal(read_back(j, &c, NULL), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "c.json.measured.kernels[0].dtype"));
    cJSON_ReplaceItemInObject(k0, "dtype", cJSON_CreateString("bf16"));
    cJSON_AddNumberToObject(meas, "colour", 1);
    assert_true(read_back(j, &c, NULL) != WF_OK);
    assert_non_null(strstr(wf_last_error(), "colour"));
    cJSON_DeleteItemFromObject(meas, "colour");
    cJSON_ReplaceItemInObject(meas, "compute_capability", cJSON_CreateString("nine"));
    assert_int_equal(read_back(j, &c, NULL), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "compute_capability"));
    cJSON_Delete(j);
    free(m);
    free(m2);
}

/* The committed fixture (used by tests/cli/calibrate_gpu.sh) is what the fit
 * writes from the synthetic points today. */
static void test_fixture(void **state)
{
    (void)state;
    wf_cluster_measured *m = malloc(sizeof *m);
    assert_non_null(m);
    synthetic(m, 1);
    cJSON *j = calibrated_file(m);
    const char *out = getenv("WEFT_GPU_WRITE_FIXTURE");
    if (out)
        assert_int_equal(wf_json_write_file(out, j), WF_OK);
    char path[1024];
    cJSON *committed = NULL;
    assert_int_equal(wf_json_read_file(src_path("tests/data/cluster-gpu-synthetic.json", path, sizeof path),
                                       &committed),
                     WF_OK);
    if (!cJSON_Compare(j, committed, 1))
        fail_msg("tests/data/cluster-gpu-synthetic.json differs from the fit's output (regenerate it with "
                 "WEFT_GPU_WRITE_FIXTURE=tests/data/cluster-gpu-synthetic.json build/test_gpu)");
    cJSON_Delete(committed);
    cJSON_Delete(j);
    free(m);
}

/* ---- refusal without a GPU ---------------------------------------------------------- */

static void test_refusal(void **state)
{
    (void)state;
    int n = -1;
    wf_status st = wf_gpu_probe(&n);
    if (!wf_gpu_built()) {
        assert_int_equal(st, WF_INVAL);
        assert_non_null(strstr(wf_last_error(), "built without CUDA"));
    } else if (st != WF_OK) {
        /* No driver or no device: one line naming the CUDA call. */
        assert_int_equal(st, WF_INVAL);
        assert_int_equal(n, 0);
        assert_non_null(strstr(wf_last_error(), "cudaGetDeviceCount"));
    } else {
        assert_true(n >= 1); /* a machine with a GPU */
        return;
    }
    assert_int_equal(wf_exit_code(st), 1);
    assert_null(strchr(wf_last_error(), '\n'));
    wf_gpu_opts o = {1, 0};
    wf_gpu_world w = {0, 1, 0, 1, 0, 1};
    wf_cluster_measured *m = malloc(sizeof *m);
    assert_non_null(m);
    assert_int_equal(wf_gpu_measure_device(&o, &w, m), WF_INVAL);
    assert_null(strchr(wf_last_error(), '\n'));
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),      cmocka_unit_test(test_busbw_factors), cmocka_unit_test(test_fit_curve),
        cmocka_unit_test(test_fit_alpha_beta), cmocka_unit_test(test_fit_cluster), cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_fixture),     cmocka_unit_test(test_refusal),
        cmocka_unit_test(test_fit_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
