/* The measured-kernel device model against the kernels it was fitted on
 * (tests/data/h100-kernels-2026-11.json, one H100 SXM, 2026-11-26): every
 * point of every kernel family of the file is predicted by dgx-h100 with
 * kernel_model=1 and compared with its measured time. Prints the tables
 * docs/cost-model.md quotes ("Device model") and asserts, per family, the
 * worst |error| and the mean |error| (errors as predicted / measured - 1).
 *
 * The bounds are what a physical model can reach on this file, not 10%
 * everywhere: the file holds repeated shapes measured in different sessions
 * that differ by up to 17% (8192^3 bf16: 1.414 and 1.653 ms; 2048^3: 43.4
 * and 50.4 us), so no deterministic model fits every point within 10%
 * (docs/cost-model.md lists the points outside and why). */
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

#include "weft/cluster.h"
#include "weft/core.h"

static cJSON *kernels_file(void)
{
    const char *root = getenv("WEFT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s%stests/data/h100-kernels-2026-11.json", root ? root : "", root ? "/" : "");
    cJSON *j = NULL;
    if (wf_json_read_file(path, &j) != WF_OK)
        fail_msg("%s", wf_last_error());
    return j;
}

static wf_device h100(void)
{
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-h100:kernel_model=1", &c), WF_OK);
    assert_true(wf_device_kernels(&c.dev));
    return c.dev;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x))
        fail_msg("kernel file: missing number \"%s\"", k);
    return x->valuedouble;
}

typedef struct {
    const char *name;
    int n;
    double sum, worst;
    double measured_s, predicted_s; /* the family's times summed over the file */
} family;

static void point(family *f, const char *what, double measured_s, double predicted_s)
{
    double e = predicted_s / measured_s - 1.0;
    printf("  %-40s %11.1f us %11.1f us %+7.1f%%\n", what, 1e6 * measured_s, 1e6 * predicted_s, 100 * e);
    f->n++;
    f->sum += fabs(e);
    f->measured_s += measured_s;
    f->predicted_s += predicted_s;
    if (fabs(e) > f->worst)
        f->worst = fabs(e);
}

static void report(const family *f, double max_bound, double mean_bound)
{
    double mean = f->n ? f->sum / f->n : 0;
    double total = f->measured_s > 0 ? f->predicted_s / f->measured_s - 1 : 0;
    printf("%s: %d points, mean |error| %.1f%% (bound %.0f%%), max %.1f%% (bound %.0f%%), whole file %+.1f%% "
           "(bound 10%%)\n\n",
           f->name, f->n, 100 * mean, 100 * mean_bound, 100 * f->worst, 100 * max_bound, 100 * total);
    assert_true(f->n > 0);
    /* The test: the family's predicted time within 10% of the
     * measured over the whole file. */
    assert_true(fabs(total) <= 0.10);
    assert_true(mean <= mean_bound);
    assert_true(f->worst <= max_bound);
}

static void gemm_family(const cJSON *j, const char *key, wf_gemm_kind kind, family *f)
{
    const wf_device d = h100();
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    assert_true(cJSON_IsArray(a));
    for (const cJSON *e = a->child; e; e = e->next) {
        double M = num(e, "M"), N = num(e, "N"), K = num(e, "K");
        char what[96];
        snprintf(what, sizeof what, "%s %gx%gx%g", key, M, N, K);
        point(f, what, num(e, "seconds"), wf_gemm_time(&d, kind, 1, M, N, K));
    }
}

static void test_gemm_half(void **state)
{
    (void)state;
    cJSON *j = kernels_file();
    family f = {"gemm bf16 (cuBLAS, forward and both gradients)", 0, 0, 0, 0, 0};
    printf("%-42s %14s %14s %8s\n", "bf16 product", "measured", "predicted", "error");
    gemm_family(j, "gemm_bf16", WF_GEMM_HALF, &f);
    /* A linear layer's three products: forward (tokens, out, in), data
     * gradient (tokens, in, out), weight gradient (out, in, tokens). */
    const wf_device d = h100();
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "gemm_bf16_forward_and_backward");
    assert_true(cJSON_IsArray(a));
    for (const cJSON *e = a->child; e; e = e->next) {
        double T = num(e, "tokens"), O = num(e, "out"), I = num(e, "inp"), fl = 2.0 * T * O * I;
        char what[96];
        snprintf(what, sizeof what, "linear %gx%gx%g fwd", T, O, I);
        point(&f, what, fl / (1e12 * num(e, "fwd_tflops")), wf_gemm_time(&d, WF_GEMM_HALF, 1, T, O, I));
        snprintf(what, sizeof what, "linear %gx%gx%g dgrad", T, O, I);
        point(&f, what, fl / (1e12 * num(e, "dgrad_tflops")), wf_gemm_time(&d, WF_GEMM_HALF, 1, T, I, O));
        snprintf(what, sizeof what, "linear %gx%gx%g wgrad", T, O, I);
        point(&f, what, fl / (1e12 * num(e, "wgrad_tflops")), wf_gemm_time(&d, WF_GEMM_HALF, 1, I, O, T));
    }
    report(&f, 0.13, 0.06);
    cJSON_Delete(j);
}

static void test_gemm_fp8(void **state)
{
    (void)state;
    cJSON *j = kernels_file();
    family f = {"gemm fp8 e4m3 (torch._scaled_mm)", 0, 0, 0, 0, 0};
    gemm_family(j, "gemm_fp8_e4m3", WF_GEMM_FP8, &f);
    gemm_family(j, "gemm_fp8_e4m3_transformer_shapes", WF_GEMM_FP8, &f);
    report(&f, 0.12, 0.06);
    cJSON_Delete(j);
}

static void test_gemm_fp32(void **state)
{
    (void)state;
    cJSON *j = kernels_file();
    family f = {"gemm tf32", 0, 0, 0, 0, 0};
    gemm_family(j, "gemm_tf32", WF_GEMM_TF32, &f);
    report(&f, 0.10, 0.07);
    family g = {"gemm fp32 (SIMT)", 0, 0, 0, 0, 0};
    gemm_family(j, "gemm_fp32", WF_GEMM_FP32, &g);
    report(&g, 0.05, 0.03);
    cJSON_Delete(j);
}

static void attn_point(const wf_device *d, family *f, double B, double H, double S, double D, int causal,
                       double fwd_s, double bwd_s)
{
    char what[96];
    snprintf(what, sizeof what, "B%g H%g S%g D%g %s fwd", B, H, S, D, causal ? "causal" : "full");
    point(f, what, fwd_s, wf_attn_time(d, WF_ATTN_IMPL_SDPA, B * H, S, S, D, causal, 0));
    snprintf(what, sizeof what, "B%g H%g S%g D%g %s bwd", B, H, S, D, causal ? "causal" : "full");
    point(f, what, bwd_s, wf_attn_time(d, WF_ATTN_IMPL_SDPA, B * H, S, S, D, causal, 1));
}

static void test_attention_sdpa(void **state)
{
    (void)state;
    cJSON *j = kernels_file();
    const wf_device d = h100();
    family f = {"attention (PyTorch SDPA, bf16)", 0, 0, 0, 0, 0};
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "attention_sdpa_bf16_by_shape");
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next)
        attn_point(&d, &f, num(e, "batch"), num(e, "heads"), num(e, "seq"), num(e, "head_dim"),
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "causal")), num(e, "fwd_s"), num(e, "bwd_s"));
    a = cJSON_GetObjectItemCaseSensitive(j, "attention_sdpa_bf16_head_dims");
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next)
        attn_point(&d, &f, num(e, "batch"), num(e, "heads"), num(e, "seq"), num(e, "head_dim"),
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "causal")), num(e, "fwd_s"), num(e, "bwd_s"));
    /* The first session's table: causal, forward and forward + backward. */
    a = cJSON_GetObjectItemCaseSensitive(j, "attention_sdpa_causal_bf16");
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next)
        attn_point(&d, &f, num(e, "batch"), num(e, "heads"), num(e, "seq"), num(e, "head_dim"), 1,
                   num(e, "fwd_seconds"), num(e, "fwd_bwd_seconds") - num(e, "fwd_seconds"));
    assert_int_equal(f.n, 2 * (27 + 10 + 5));
    report(&f, 0.10, 0.05);
    cJSON_Delete(j);
}

/* Memory-bound kernels, bytes as the cost model counts them (reads plus
 * writes of bf16 [tokens, hidden] tensors). */
static void test_memory_bound(void **state)
{
    (void)state;
    cJSON *j = kernels_file();
    const wf_device d = h100();
    family f = {"memory-bound kernels (PyTorch eager, bf16)", 0, 0, 0, 0, 0};
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "memory_bound_ops_bf16");
    assert_true(cJSON_IsArray(a));
    for (const cJSON *e = a->child; e; e = e->next) {
        const char *op = cJSON_GetObjectItemCaseSensitive(e, "op")->valuestring;
        char what[96];
        if (strcmp(op, "cross_entropy_fp32_upcast") == 0) {
            /* 18 bytes per logit forward, 22 backward (cost/records.c). */
            double L = num(e, "tokens") * num(e, "vocab");
            snprintf(what, sizeof what, "cross-entropy V=%g fwd", num(e, "vocab"));
            point(&f, what, num(e, "fwd_s"), wf_membound_time(&d, WF_MB_LOSS, 0, 18.0 * L));
            snprintf(what, sizeof what, "cross-entropy V=%g bwd", num(e, "vocab"));
            point(&f, what, num(e, "bwd_s"), wf_membound_time(&d, WF_MB_LOSS, 1, 22.0 * L));
            continue;
        }
        double t = 2.0 * num(e, "tokens") * num(e, "hidden"); /* bytes of one tensor */
        if (strcmp(op, "layernorm_fwd") == 0 || strcmp(op, "rmsnorm_fused_fwd") == 0) {
            wf_mb_kind k = op[0] == 'l' ? WF_MB_LAYERNORM : WF_MB_RMSNORM;
            snprintf(what, sizeof what, "%s", op);
            point(&f, what, num(e, "fwd_s"), wf_membound_time(&d, k, 0, 2 * t));
            snprintf(what, sizeof what, "%s (its backward)", op);
            point(&f, what, num(e, "bwd_s"), wf_membound_time(&d, k, 1, 3 * t));
        } else if (strcmp(op, "gelu_tanh_fwd") == 0) {
            point(&f, "gelu fwd", num(e, "fwd_s"), wf_membound_time(&d, WF_MB_ACT, 0, 2 * t));
            point(&f, "gelu bwd", num(e, "bwd_s"), wf_membound_time(&d, WF_MB_ACT, 1, 3 * t));
        } else if (strcmp(op, "silu_mul_fwd") == 0) {
            /* Two eager kernels: silu (2 tensors), the product (3); backward
             * the product's (5) and silu's (3). */
            point(&f, "silu(gate) * up fwd", num(e, "fwd_s"),
                  wf_membound_time(&d, WF_MB_ACT, 0, 2 * t) + wf_membound_time(&d, WF_MB_ELEM, 0, 3 * t));
            point(&f, "silu(gate) * up bwd", num(e, "bwd_s"),
                  wf_membound_time(&d, WF_MB_ACT, 1, 3 * t) + wf_membound_time(&d, WF_MB_ELEM, 1, 5 * t));
        } else {
            /* add_fwd (3678 GB/s, above the copy's 2954 and HBM's 3350) and
             * the eager RMS norm (a chain of Python ops) are reported in
             * docs/cost-model.md, not modeled. */
            printf("  %-40s (not modeled)\n", op);
        }
    }
    a = cJSON_GetObjectItemCaseSensitive(j, "copy");
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next)
        point(&f, "device-to-device copy", num(e, "seconds"), wf_membound_time(&d, WF_MB_ELEM, 0, 2 * num(e, "bytes")));
    report(&f, 0.10, 0.05);
    /* Fused AdamW: the file counts 16 bytes per parameter; the step moves
     * 28 (reads parameter, gradient, both moments; writes parameter and
     * moments), as the cost model counts it. The two large steps. */
    family o = {"fused AdamW step (fp32)", 0, 0, 0, 0, 0};
    a = cJSON_GetObjectItemCaseSensitive(j, "adamw_fused_fp32");
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next) {
        double p = num(e, "params");
        char what[96];
        snprintf(what, sizeof what, "AdamW %g parameters", p);
        if (p < 1e8) {
            printf("  %-40s (launch-bound, not modeled)\n", what);
            continue;
        }
        point(&o, what, num(e, "seconds"), 28.0 * p / wf_device_opt_bps(&d));
    }
    report(&o, 0.05, 0.05);
    cJSON_Delete(j);
}

/* V100 products against Baidu's DeepBench V100 GEMM tables (cuBLAS, CUDA
 * 10.1, DGX-1; tests/data/v100-deepbench-gemm.json): the points of at least
 * 1 GFLOP whose output sides are both >= 512 (training-sized products; the
 * skinny ones, N = 16..256, run on smaller tiles or split K, which the
 * model's one tile shape does not describe, and are listed, not asserted). */
static void v100_family(const cJSON *j, const char *key, wf_gemm_kind kind, family *f)
{
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("v100-ib100:kernel_model=1", &c), WF_OK);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    assert_true(cJSON_IsArray(a));
    int skipped = 0;
    for (const cJSON *e = a->child; e; e = e->next) {
        double M = num(e, "M"), N = num(e, "N"), K = num(e, "K");
        if (2.0 * M * N * K < 1e9 || M < 512 || N < 512) {
            skipped++;
            continue;
        }
        char what[96];
        snprintf(what, sizeof what, "%s %gx%gx%g", key, M, N, K);
        point(f, what, 1e-3 * num(e, "ms"), wf_gemm_time(&c.dev, kind, 1, M, N, K));
    }
    printf("  (%d skinny or sub-GFLOP points not asserted)\n", skipped);
}

static void test_v100_deepbench(void **state)
{
    (void)state;
    const char *root = getenv("WEFT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s%stests/data/v100-deepbench-gemm.json", root ? root : "", root ? "/" : "");
    cJSON *j = NULL;
    if (wf_json_read_file(path, &j) != WF_OK)
        fail_msg("%s", wf_last_error());
    family f = {"V100 gemm fp32 (DeepBench, cuBLAS)", 0, 0, 0, 0, 0};
    v100_family(j, "gemm_fp32", WF_GEMM_FP32, &f);
    assert_int_equal(f.n, 74);
    report(&f, 0.10, 0.05);
    family h = {"V100 gemm fp16 tensor cores (DeepBench, cuBLAS)", 0, 0, 0, 0, 0};
    v100_family(j, "gemm_fp16", WF_GEMM_HALF, &h);
    assert_int_equal(h.n, 74);
    report(&h, 0.10, 0.05);

    /* Split-K (src/cluster/kernel_model.c): the fp32 products whose 128 x
     * 128 tiles do not fill the 80 SMs and whose reduction is long (K >=
     * 2048; M x N down to 512 x 8, K up to 500,000), outside the fit. cuBLAS
     * splits their reduction; priced as whole-K tiles on a few SMs they came
     * out at +123% over the family (mean 63.6%, max 358%). The bounds are
     * what the one tile family reaches on kernels it does not describe
     * exactly (cuBLAS also runs narrower SIMT tiles here). */
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("v100-ib100", &c), WF_OK);
    family sk = {"V100 gemm fp32 skinny, long K (split-K; DeepBench)", 0, 0, 0, 0, 0};
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "gemm_fp32");
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next) {
        double M = num(e, "M"), N = num(e, "N"), K = num(e, "K");
        if ((2.0 * M * N * K >= 1e9 && M >= 512 && N >= 512) || K < 2048 || ceil(M / 128) * ceil(N / 128) >= 80)
            continue;
        char what[96];
        snprintf(what, sizeof what, "gemm_fp32 %gx%gx%g", M, N, K);
        point(&sk, what, 1e-3 * num(e, "ms"), wf_gemm_time(&c.dev, WF_GEMM_FP32, 1, M, N, K));
    }
    assert_int_equal(sk.n, 54);
    report(&sk, 0.45, 0.20);
    cJSON_Delete(j);
}

/* dgx-a100 against published A100 kernel tables
 * (tests/data/a100-published-kernels.json): cuBLAS products m = n = k from
 * 768 to 8192 read off NVIDIA's figure (below 768 a read-off pixel is more
 * than 2% of the value), two best-shape bf16 products of Bekman's
 * brute-force search (not fitted on: a cross-check), and FlashAttention-2's
 * forward + backward by sequence, head dim and mask (Dao 2023, Figure 4). */
static void a100_gemm_family(const cJSON *t, const char *key, wf_gemm_kind kind, const wf_device *d, family *f)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(t, key);
    assert_true(cJSON_IsArray(a));
    for (const cJSON *e = a->child; e; e = e->next) {
        double M = num(e, "M"), N = num(e, "N"), K = num(e, "K");
        if (M < 768)
            continue;
        char what[96];
        snprintf(what, sizeof what, "A100 %s %gx%gx%g", key, M, N, K);
        point(f, what, 2.0 * M * N * K / (1e12 * num(e, "tflops")), wf_gemm_time(d, kind, 1, M, N, K));
    }
}

static void test_a100_published(void **state)
{
    (void)state;
    const char *root = getenv("WEFT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s%stests/data/a100-published-kernels.json", root ? root : "", root ? "/" : "");
    cJSON *j = NULL;
    if (wf_json_read_file(path, &j) != WF_OK)
        fail_msg("%s", wf_last_error());
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100", &c), WF_OK);
    assert_true(wf_device_kernels(&c.dev));
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "gemm_cublas_square");
    family h = {"A100 gemm bf16 (cuBLAS, NVIDIA; Bekman's best shapes)", 0, 0, 0, 0, 0};
    a100_gemm_family(g, "bf16", WF_GEMM_HALF, &c.dev, &h);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "gemm_mamf"), "points");
    for (const cJSON *e = m ? m->child : NULL; e; e = e->next) {
        double M = num(e, "M"), N = num(e, "N"), K = num(e, "K");
        char what[96];
        snprintf(what, sizeof what, "A100 bf16 best shape %gx%gx%g", M, N, K);
        point(&h, what, 2.0 * M * N * K / (1e12 * num(e, "tflops")), wf_gemm_time(&c.dev, WF_GEMM_HALF, 1, M, N, K));
    }
    assert_int_equal(h.n, 30 + 2);
    report(&h, 0.10, 0.05);
    family s = {"A100 gemm fp32 (SIMT, cuBLAS)", 0, 0, 0, 0, 0};
    a100_gemm_family(g, "fp32", WF_GEMM_FP32, &c.dev, &s);
    report(&s, 0.10, 0.05);
    /* TF32: cuBLAS 11.0's choices leave dips the fastest-tile model does not
     * make (2048: 85 TFLOP/s between 104 and 110; 6656: 106.6 between 129.5
     * and 130.9); docs/cost-model.md lists them. */
    family t = {"A100 gemm tf32 (cuBLAS)", 0, 0, 0, 0, 0};
    a100_gemm_family(g, "tf32", WF_GEMM_TF32, &c.dev, &t);
    report(&t, 0.14, 0.07);
    family fa = {"A100 FlashAttention-2 forward + backward", 0, 0, 0, 0, 0};
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "attention_flash2_fwd_bwd"),
                                                      "points");
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next) {
        double B = num(e, "batch"), H = num(e, "heads"), S = num(e, "seq"), D = num(e, "head_dim");
        int causal = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "causal"));
        double flops = 3.5 * 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0);
        double pred = wf_attn_time(&c.dev, WF_ATTN_IMPL_FA2, B * H, S, S, D, causal, 0) +
                      wf_attn_time(&c.dev, WF_ATTN_IMPL_FA2, B * H, S, S, D, causal, 1);
        char what[96];
        snprintf(what, sizeof what, "FA2 S%g D%g %s", S, D, causal ? "causal" : "full");
        point(&fa, what, flops / (1e12 * num(e, "fwd_bwd_tflops")), pred);
    }
    assert_int_equal(fa.n, 23);
    report(&fa, 0.10, 0.05);
    cJSON_Delete(j);
}

/* The device model is the DGX presets' default (V100's keep the FLOPs table
 * until their memory-bound kernels are measured: kernel_model=1 there); with kernel_model=0 the
 * FLOPs table applies (with the software factors fitted on it) and nothing
 * of the kernel model shows. */
static void test_switch(void **state)
{
    (void)state;
    wf_cluster c;
    static const char *const ON[] = {"dgx-a100", "dgx-h100", "v100-ib100:kernel_model=1"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(wf_cluster_lookup(ON[i], &c), WF_OK);
        assert_true(wf_device_kernels(&c.dev));
    }
    assert_int_equal(wf_cluster_lookup("dgx-a100:kernel_model=0", &c), WF_OK);
    assert_false(wf_device_kernels(&c.dev));
    assert_true(c.overlap_slowdown == 1.30 && c.op_gap_s == 0);
    assert_int_equal(wf_cluster_lookup("dgx-h100:kernel_model=0", &c), WF_OK);
    assert_false(wf_device_kernels(&c.dev));
    double f = 2.0 * 8192.0 * 8192.0 * 8192.0;
    double ref = f / (c.dev.matrix_flops[WF_DTYPE_BF16] * wf_device_matrix_eff(&c.dev, f));
    assert_true(fabs(wf_gemm_time(&c.dev, WF_GEMM_HALF, 1, 8192, 8192, 8192) / ref - 1) < 1e-12);
    assert_true(wf_attn_time(&c.dev, WF_ATTN_IMPL_SDPA, 32, 2048, 2048, 128, 1, 0) < 0);
    assert_true(wf_membound_time(&c.dev, WF_MB_LAYERNORM, 0, 1e9) == 1e9 / (c.dev.mem_bw_bps * c.dev.mem_eff));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_half),      cmocka_unit_test(test_gemm_fp8),
        cmocka_unit_test(test_gemm_fp32),      cmocka_unit_test(test_attention_sdpa),
        cmocka_unit_test(test_memory_bound),   cmocka_unit_test(test_switch),
        cmocka_unit_test(test_v100_deepbench), cmocka_unit_test(test_a100_published),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
