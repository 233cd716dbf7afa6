/* Fast CPU kernels (fp32): matmul, batch_matmul, linear, conv2d (im2col) and
 * attention call CBLAS sgemm (OpenBLAS); the other ops are loops over
 * contiguous rows written so that the compiler vectorizes them (below). Every
 * kernel here has a reference twin in kernels_ref.c with the same signature,
 * and the tests hold the two together; conventions are documented in
 * kernels-impl.h.
 *
 * Vectorization. GCC vectorizes at -O2 only loops whose trip count is a known
 * multiple of the vector width (its "very cheap" cost model), never through a
 * call (expf, tanhf, sqrtf: errno), and never through a float comparison
 * (which may trap under the default -ftrapping-math). So the elementwise
 * loops run over blocks of VL = 16 floats with a fixed inner trip count,
 * followed by a scalar tail that runs the same per-element code; exp is
 * written inline (wf_k_expf in kernels-impl.h: Cody-Waite reduction and
 * Cephes' polynomial), comparisons are made on the floats' bits, and
 * reductions keep VL partial results (element i in partial i % VL) combined
 * in a fixed order. Every result is therefore the same whatever vector width
 * the compiler picked, whatever the alignment, and whichever ISA clone runs
 * (HOT: x86-64-v4, x86-64-v3 or the baseline, chosen at load time).
 *
 * Not here: threading outside BLAS (one rank per core is the plan under
 * MPI), fp16/bf16, in-place aliasing of inputs and outputs (only the
 * elementwise ops tolerate y == x: they read a block before writing it). */
#include "kernels/kernels-impl.h"
#include "weft/kernels.h"

#include "kernels/blas-impl.h"
#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- vectorizable building blocks --------------------------------------------------------- */

#define VL WF_K_VL
#define HOT WF_K_HOT

/* An integer whose order is the order of the floats (for every non-NaN;
 * NaNs of either sign sort beyond +-inf); its own inverse. */
static inline int32_t order_key(float x)
{
    int32_t i = wf_k_f2i(x);
    return i ^ ((i >> 31) & 0x7fffffff);
}

/* Sum of VL partials in a fixed order (pairwise). */
static inline float sum_lanes(const float *p)
{
    float s8[8];
    for (int j = 0; j < 8; j++)
        s8[j] = p[j] + p[j + 8];
    return ((s8[0] + s8[4]) + (s8[2] + s8[6])) + ((s8[1] + s8[5]) + (s8[3] + s8[7]));
}

/* sum of x[0..n) and sum of x[j] * y[j] with VL partial sums. */
static inline float vsum(const float *x, int64_t n)
{
    float acc[VL] = {0};
    int64_t i = 0;
    for (; i + VL <= n; i += VL)
        for (int j = 0; j < VL; j++)
            acc[j] += x[i + j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += x[i];
    return sum_lanes(acc);
}

static inline float vdot(const float *x, const float *y, int64_t n)
{
    float acc[VL] = {0};
    int64_t i = 0;
    for (; i + VL <= n; i += VL)
        for (int j = 0; j < VL; j++)
            acc[j] += x[i + j] * y[i + j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += x[i] * y[i];
    return sum_lanes(acc);
}

/* max of x[0..n) (n >= 1), NaN when one is NaN. */
static inline float vmax(const float *x, int64_t n)
{
    int32_t acc[VL];
    const int32_t k0 = order_key(x[0]);
    for (int j = 0; j < VL; j++)
        acc[j] = k0;
    int64_t i = 0;
    for (; i + VL <= n; i += VL)
        for (int j = 0; j < VL; j++) {
            const int32_t k = order_key(x[i + j]);
            acc[j] = k > acc[j] ? k : acc[j];
        }
    for (int j = 0; i < n; i++, j++) {
        const int32_t k = order_key(x[i]);
        acc[j] = k > acc[j] ? k : acc[j];
    }
    int32_t m = acc[0];
    for (int j = 1; j < VL; j++)
        m = acc[j] > m ? acc[j] : m;
    return wf_k_i2f(order_key(wf_k_i2f(m)));
}

/* y[j] = exp(x[j] - c) for j < n; returns their sum (VL partials). y may be x. */
static inline float vexp_shift_sum(const float *x, float *y, int64_t n, float c)
{
    float acc[VL] = {0};
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float b[VL];
        for (int j = 0; j < VL; j++)
            b[j] = wf_k_expf(x[i + j] - c);
        for (int j = 0; j < VL; j++) {
            acc[j] += b[j];
            y[i + j] = b[j];
        }
    }
    for (int j = 0; i < n; i++, j++) {
        y[i] = wf_k_expf(x[i] - c);
        acc[j] += y[i];
    }
    return sum_lanes(acc);
}

/* y[j] = x[j] * s (y may be x). */
static inline void vscale(const float *x, float *y, int64_t n, float s)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float b[VL];
        for (int j = 0; j < VL; j++)
            b[j] = x[i + j] * s;
        memcpy(y + i, b, sizeof b);
    }
    for (; i < n; i++)
        y[i] = x[i] * s;
}

/* acc[j] += x[j] */
static inline void vacc(float *acc, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float b[VL];
        for (int j = 0; j < VL; j++)
            b[j] = acc[i + j] + x[i + j];
        memcpy(acc + i, b, sizeof b);
    }
    for (; i < n; i++)
        acc[i] += x[i];
}

/* ---- BLAS control and sizes ------------------------------------------------------ */

wf_status wf_k_set_threads(int n)
{
    if (n < 1)
        return wf_errorf(WF_INVAL, "BLAS threads=%d must be at least 1", n);
#if defined(OPENBLAS_VERSION)
    openblas_set_num_threads(n);
    return WF_OK;
#elif defined(WF_BLAS_BLIS)
    bli_thread_set_num_threads(n);
    return WF_OK;
#else
    return wf_errorf(WF_NOTFOUND, "the BLAS in use cannot set its thread count (neither OpenBLAS nor BLIS)");
#endif
}

const char *wf_k_blas_info(void)
{
#if defined(OPENBLAS_VERSION)
    return openblas_get_config();
#elif defined(WF_BLAS_BLIS)
    static char buf[96];
    snprintf(buf, sizeof buf, "BLIS %s", bli_info_get_version_str());
    return buf;
#else
    return "CBLAS (neither OpenBLAS nor BLIS)";
#endif
}

const char *wf_k_blas_core(void)
{
#if defined(OPENBLAS_VERSION)
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
#elif defined(WF_BLAS_BLIS)
    const char *c = bli_arch_string(bli_arch_query_id());
    return c ? c : "unknown";
#else
    return "unknown";
#endif
}

/* Lower-case copy of s into buf (cap > 0). */
static void lower(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++)
        buf[i] = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
    buf[i] = 0;
}

int wf_k_cpu_vector_level(void)
{
#if defined(__GNUC__) && defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    if (!osxsave || !avx)
        return 0;
    /* XCR0: the OS saves the SSE and AVX state (bits 1, 2) and the AVX-512
     * opmask and ZMM state (bits 5, 6, 7) */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x6u) != 0x6u || __get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    const int avx2 = (b >> 5) & 1;
    const int avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1); /* F DQ BW VL */
    if (avx512 && (lo & 0xE0u) == 0xE0u && fma && avx2)
        return 2;
    return avx2 && fma ? 1 : 0;
#else
    return 0;
#endif
}

int wf_k_cpu_has_avx512f(void) { return wf_k_cpu_vector_level() == 2; }

/* One row per OpenBLAS core type with wide kernels (the names of `corename[]`
 * that openblas_get_corename returns in a DYNAMIC_ARCH build and that
 * OPENBLAS_CORETYPE matches case-insensitively: driver/others/dynamic.c of
 * OpenBLAS v0.3.21, commit b89fb708; SapphireRapids is a later version's):
 * the widest units their sgemm kernels use, as wf_k_cpu_vector_level counts
 * them. A core not listed counts as 0 (SSE: Prescott, Nehalem, Sandybridge's
 * AVX without FMA, ...). */
static const struct {
    const char *core; /* lower case */
    int level;
} BLAS_CORE_LEVEL[] = {
    {"skylakex", 2}, {"cooperlake", 2}, {"sapphirerapids", 2}, {"haswell", 1}, {"skylake", 1},
    {"zen", 1},      {"excavator", 1},
};

int wf_k_blas_core_level(const char *core)
{
    char lc[64];
    lower(core ? core : "", lc, sizeof lc);
    for (size_t i = 0; i < sizeof BLAS_CORE_LEVEL / sizeof BLAS_CORE_LEVEL[0]; i++)
        if (!strcmp(lc, BLAS_CORE_LEVEL[i].core))
            return BLAS_CORE_LEVEL[i].level;
    return 0;
}

const char *wf_k_blas_core_for(const char *core, int cpu_level)
{
    if (!core || !strcmp(core, "unknown") || wf_k_blas_core_level(core) >= cpu_level)
        return NULL;
    return cpu_level >= 2 ? "SkylakeX" : cpu_level == 1 ? "Haswell" : NULL;
}

const char *wf_k_blas_better_core(void)
{
#if defined(OPENBLAS_VERSION)
    return wf_k_blas_core_for(wf_k_blas_core(), wf_k_cpu_vector_level());
#else
    return NULL;
#endif
}

const char *wf_k_blas_hint(void)
{
    static char hint[400];
#if defined(WF_BLAS_BLIS)
    if (wf_k_cpu_vector_level() > 0 && !strcmp(wf_k_blas_core(), "generic")) {
        snprintf(hint, sizeof hint,
                 "this CPU has %s but BLIS runs its generic kernels (its build has no configuration for this CPU): "
                 "build with OpenBLAS (cmake -DWEFT_BLAS=openblas, the default), usually much faster",
                 wf_k_cpu_vector_level() == 2 ? "AVX-512" : "AVX2 and FMA");
        return hint;
    }
#endif
    const char *better = wf_k_blas_better_core();
    if (!better)
        return NULL;
    const char *units = wf_k_cpu_vector_level() == 2 ? "AVX-512" : "AVX2 and FMA";
    const char *env = getenv("OPENBLAS_CORETYPE");
    if (env && env[0])
        snprintf(hint, sizeof hint,
                 "this CPU has %s but OPENBLAS_CORETYPE=%s in the environment makes OpenBLAS run its %s kernels: "
                 "unset it (weft then selects %s itself) or set OPENBLAS_CORETYPE=%s, usually much faster "
                 "(compare with bench_kernels)", units, env, wf_k_blas_core(), better, better);
    else
        snprintf(hint, sizeof hint,
                 "this CPU has %s but OpenBLAS runs its %s kernels (it does not know this CPU model): "
                 "OPENBLAS_CORETYPE=%s selects faster ones (weft sets it itself at start-up)", units,
                 wf_k_blas_core(), better);
    return hint;
}

const char *wf_runtime_blas_describe(void)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%s, kernels %s", wf_k_blas_info(), wf_k_blas_core());
    return buf;
}

const char *wf_runtime_blas_hint(void) { return wf_k_blas_hint(); }

void wf_runtime_blas_fast_kernels(char **argv)
{
    const char *env = getenv("OPENBLAS_CORETYPE");
    if (env || !argv || !argv[0])
        return;
    const char *core = wf_k_blas_better_core();
    if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* no exec: run on with the library's choice */
}

size_t wf_k_layernorm_saved_floats(int64_t m) { return (size_t)(2 * m); }
size_t wf_k_rmsnorm_saved_floats(int64_t m) { return (size_t)m; }
size_t wf_k_cross_entropy_saved_floats(int64_t m) { return (size_t)m; }
size_t wf_k_batchnorm_saved_floats(int64_t c) { return (size_t)(2 * c); }

/* The keys' length Sk (0 in at: the queries' S). */
static int64_t attn_sk(const wf_k_attn *at) { return at->sk > 0 ? at->sk : at->s; }

size_t wf_k_attention_saved_floats(const wf_k_attn *at)
{
    return (size_t)(at->b * at->heads * at->s * attn_sk(at));
}

size_t wf_k_attention_ws_floats(const wf_k_attn *at) { return (size_t)(2 * at->s * attn_sk(at)); }

static int64_t groups_of(const wf_k_conv_geom *g) { return g->groups > 0 ? g->groups : 1; }

size_t wf_k_conv2d_ws_floats(const wf_k_conv_geom *g)
{
    return (size_t)(2 * (g->c / groups_of(g)) * g->kh * g->kw * g->ho * g->wo);
}

wf_status wf_k_conv_geom_check(wf_k_conv_geom *g, int pool)
{
    const char *what = pool ? "pool" : "conv2d";
    if (g->n < 1 || g->c < 1 || g->h < 1 || g->w < 1)
        return wf_errorf(WF_INVAL, "%s: input [%lld,%lld,%lld,%lld] has an empty dimension", what,
                         (long long)g->n, (long long)g->c, (long long)g->h, (long long)g->w);
    if (g->kh < 1 || g->kw < 1)
        return wf_errorf(WF_INVAL, "%s: kernel %lldx%lld must be at least 1x1", what,
                         (long long)g->kh, (long long)g->kw);
    if (g->sh < 1 || g->sw < 1)
        return wf_errorf(WF_INVAL, "%s: stride %lldx%lld must be at least 1x1", what,
                         (long long)g->sh, (long long)g->sw);
    if (g->ph < 0 || g->pw < 0 || g->ph >= g->kh || g->pw >= g->kw)
        return wf_errorf(WF_INVAL, "%s: pad %lldx%lld must be in [0, kernel %lldx%lld)", what,
                         (long long)g->ph, (long long)g->pw, (long long)g->kh, (long long)g->kw);
    if (g->h + 2 * g->ph < g->kh || g->w + 2 * g->pw < g->kw)
        return wf_errorf(WF_INVAL, "%s: kernel %lldx%lld exceeds the padded input %lldx%lld", what,
                         (long long)g->kh, (long long)g->kw, (long long)(g->h + 2 * g->ph),
                         (long long)(g->w + 2 * g->pw));
    if (!pool) {
        if (g->groups < 0)
            return wf_errorf(WF_INVAL, "conv2d: groups=%lld must be positive", (long long)g->groups);
        int64_t G = groups_of(g);
        if (g->o < 1 || g->c % G || g->o % G)
            return wf_errorf(WF_INVAL, "conv2d: groups=%lld must divide channels %lld and "
                             "outputs %lld", (long long)G, (long long)g->c, (long long)g->o);
    }
    g->ho = (g->h + 2 * g->ph - g->kh) / g->sh + 1;
    g->wo = (g->w + 2 * g->pw - g->kw) / g->sw + 1;
    return WF_OK;
}

/* ---- matmul family -------------------------------------------------------------------- */

/* C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, row-major, with A stored
 * [m,k] (or [k,m] when ta) and leading dimensions given. */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (wf_k_gemm_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
        return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

void wf_k_matmul_fwd(const float *a, const float *b, float *c, int64_t m, int64_t k, int64_t n,
                     int trans_a, int trans_b)
{
    gemm(trans_a, trans_b, m, n, k, 1.0f, a, trans_a ? m : k, b, trans_b ? k : n, 0.0f, c, n);
}

void wf_k_matmul_bwd(const float *a, const float *b, const float *dc, float *da, float *db,
                     int64_t m, int64_t k, int64_t n, int trans_a, int trans_b)
{
    const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
    /* d op(A) = dC op(B)^T; stored transposed when trans_a: dA = op(B) dC^T. */
    if (da) {
        if (!trans_a)
            gemm(0, !trans_b, m, k, n, 1.0f, dc, n, b, ldb, 0.0f, da, lda);
        else
            gemm(trans_b, 1, k, m, n, 1.0f, b, ldb, dc, n, 0.0f, da, lda);
    }
    /* d op(B) = op(A)^T dC; stored transposed when trans_b: dB = dC^T op(A). */
    if (db) {
        if (!trans_b)
            gemm(!trans_a, 0, k, n, m, 1.0f, a, lda, dc, n, 0.0f, db, ldb);
        else
            gemm(1, trans_a, n, k, m, 1.0f, dc, n, a, lda, 0.0f, db, ldb);
    }
}

void wf_k_batch_matmul_fwd(const float *a, const float *b, float *c, int64_t batch, int64_t m,
                           int64_t k, int64_t n, int trans_a, int trans_b)
{
    for (int64_t t = 0; t < batch; t++)
        wf_k_matmul_fwd(a + t * m * k, b + t * k * n, c + t * m * n, m, k, n, trans_a, trans_b);
}

void wf_k_batch_matmul_bwd(const float *a, const float *b, const float *dc, float *da,
                           float *db, int64_t batch, int64_t m, int64_t k, int64_t n,
                           int trans_a, int trans_b)
{
    for (int64_t t = 0; t < batch; t++)
        wf_k_matmul_bwd(a + t * m * k, b + t * k * n, dc + t * m * n, da ? da + t * m * k : NULL,
                        db ? db + t * k * n : NULL, m, k, n, trans_a, trans_b);
}

/* out[n] = sum over rows of x[m,n] (row by row, so the inner loop vectorizes;
 * each column's sum is in row order). */
static void col_sums(const float *x, float *out, int64_t m, int64_t n)
{
    memset(out, 0, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < m; i++)
        vacc(out, x + i * n, n);
}

void wf_k_linear_fwd(const float *x, const float *w, const float *bias, float *y, int64_t m,
                     int64_t k, int64_t n)
{
    /* Rows start as the bias, then the GEMM accumulates onto them (beta = 1). */
    if (bias)
        for (int64_t i = 0; i < m; i++)
            memcpy(y + i * n, bias, sizeof(float) * (size_t)n);
    gemm(0, 0, m, n, k, 1.0f, x, k, w, n, bias ? 1.0f : 0.0f, y, n);
}

void wf_k_linear_bwd(const float *x, const float *w, const float *dy, float *dx, float *dw,
                     float *dbias, int64_t m, int64_t k, int64_t n)
{
    if (dx) /* dx[m,k] = dy[m,n] w[k,n]^T */
        gemm(0, 1, m, k, n, 1.0f, dy, n, w, n, 0.0f, dx, k);
    if (dw) /* dw[k,n] = x[m,k]^T dy[m,n] */
        gemm(1, 0, k, n, m, 1.0f, x, k, dy, n, 0.0f, dw, n);
    if (dbias)
        col_sums(dy, dbias, m, n);
}

void wf_k_bias_add_fwd(const float *x, const float *b, float *y, int64_t m, int64_t n)
{
    wf_k_add_fwd(x, b, y, m * n, n);
}

void wf_k_bias_add_bwd(const float *dy, float *dx, float *db, int64_t m, int64_t n)
{
    wf_k_add_bwd(dy, dx, db, m * n, n);
}

/* y[r*nb + j] = a[r*nb + j] OP b[j], a block of VL at a time (y may be a). */
#define BROADCAST_LOOP(OP)                                                              \
    for (int64_t r = 0; r < n; r += nb) {                                               \
        const float *ar = a + r;                                                        \
        float *yr = y + r;                                                              \
        int64_t j = 0;                                                                  \
        for (; j + VL <= nb; j += VL) {                                                 \
            float t[VL];                                                                \
            for (int k = 0; k < VL; k++)                                                \
                t[k] = ar[j + k] OP b[j + k];                                           \
            memcpy(yr + j, t, sizeof t);                                                \
        }                                                                               \
        for (; j < nb; j++)                                                             \
            yr[j] = ar[j] OP b[j];                                                      \
    }

HOT void wf_k_add_fwd(const float *a, const float *b, float *y, int64_t n, int64_t nb)
{
    BROADCAST_LOOP(+)
}

void wf_k_add_bwd(const float *dy, float *da, float *db, int64_t n, int64_t nb)
{
    if (da && da != dy)
        memcpy(da, dy, sizeof(float) * (size_t)n);
    if (db)
        col_sums(dy, db, n / nb, nb);
}

HOT void wf_k_mul_fwd(const float *a, const float *b, float *y, int64_t n, int64_t nb, float scale)
{
    if (!b) {
        vscale(a, y, n, scale);
        return;
    }
    BROADCAST_LOOP(*)
}

HOT void wf_k_mul_bwd(const float *a, const float *b, const float *dy, float *da, float *db,
                      int64_t n, int64_t nb, float scale)
{
    if (da)
        wf_k_mul_fwd(dy, b, da, n, nb, scale);
    if (db && b) {
        memset(db, 0, sizeof(float) * (size_t)nb);
        for (int64_t r = 0; r < n; r += nb) {
            const float *ar = a + r, *dr = dy + r;
            int64_t j = 0;
            for (; j + VL <= nb; j += VL) {
                float t[VL];
                for (int k = 0; k < VL; k++)
                    t[k] = db[j + k] + dr[j + k] * ar[j + k];
                memcpy(db + j, t, sizeof t);
            }
            for (; j < nb; j++)
                db[j] += dr[j] * ar[j];
        }
    }
}

/* ---- activations and dropout ------------------------------------------------------------- */

/* y[i] = F(x[i]) (F an expression of the float v), a block of VL at a time;
 * y may be x. */
#define MAP_LOOP(F)                                                                     \
    do {                                                                                \
        int64_t i = 0;                                                                  \
        for (; i + VL <= n; i += VL) {                                                  \
            float t[VL];                                                                \
            for (int k = 0; k < VL; k++) {                                              \
                const float v = x[i + k];                                               \
                t[k] = (F);                                                             \
            }                                                                           \
            memcpy(y + i, t, sizeof t);                                                 \
        }                                                                               \
        for (; i < n; i++) {                                                            \
            const float v = x[i];                                                       \
            y[i] = (F);                                                                 \
        }                                                                               \
    } while (0)

/* dx[i] = dy[i] * F(x[i]) likewise; dx may be x or dy. */
#define GRAD_LOOP(F)                                                                    \
    do {                                                                                \
        int64_t i = 0;                                                                  \
        for (; i + VL <= n; i += VL) {                                                  \
            float t[VL];                                                                \
            for (int k = 0; k < VL; k++) {                                              \
                const float v = x[i + k];                                               \
                t[k] = dy[i + k] * (F);                                                 \
            }                                                                           \
            memcpy(dx + i, t, sizeof t);                                                \
        }                                                                               \
        for (; i < n; i++) {                                                            \
            const float v = x[i];                                                       \
            dx[i] = dy[i] * (F);                                                        \
        }                                                                               \
    } while (0)

/* relu on the bits: a float is > 0 exactly when its bits are a positive integer. */
HOT void wf_k_relu_fwd(const float *x, float *y, int64_t n)
{
    MAP_LOOP(wf_k_f2i(v) > 0 ? v : 0.0f);
}

HOT void wf_k_relu_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float t[VL];
        for (int k = 0; k < VL; k++) {
            const float d = dy[i + k]; /* loaded unconditionally, so the select vectorizes */
            t[k] = wf_k_f2i(x[i + k]) > 0 ? d : 0.0f;
        }
        memcpy(dx + i, t, sizeof t);
    }
    for (; i < n; i++)
        dx[i] = wf_k_f2i(x[i]) > 0 ? dy[i] : 0.0f;
}

/* gelu (tanh form) as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), since
 * 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): one exp, no cancellation for x << 0.
 * Its derivative: s + 2 x s (1 - s) u', with 1 - s = exp(-2u) s. Beyond
 * |x| = 10 the function is x (or 0) to float precision: u and the derivative's
 * x take x clamped to +-10 (on its bits; NaN passes), so x^3 cannot overflow
 * and gelu(x) = x, gelu'(x) = 1 above, and about 1e-37 below. */
#define GELU_CF 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define GELU_LIM 0x41200000 /* 10.0f */

static inline float gelu_clamp(float v)
{
    const int32_t vi = wf_k_f2i(v), av = vi & 0x7fffffff;
    return av > GELU_LIM && av <= 0x7f800000 ? wf_k_i2f((int32_t)((uint32_t)vi & 0x80000000u) | GELU_LIM) : v;
}

static inline float gelu1(float v)
{
    const float c = gelu_clamp(v);
    const float s = 1.0f / (1.0f + wf_k_expf(-2.0f * GELU_CF * (c + GELU_A * c * c * c)));
    return (wf_k_f2i(v) < 0 ? c : v) * s;
}

static inline float gelu_grad1(float v)
{
    const float c = gelu_clamp(v);
    const float e = wf_k_expf(-2.0f * GELU_CF * (c + GELU_A * c * c * c));
    const float s = 1.0f / (1.0f + e);
    const float du = GELU_CF * (1.0f + 3.0f * GELU_A * c * c);
    return s + 2.0f * c * s * (e * s) * du;
}

HOT void wf_k_gelu_fwd(const float *x, float *y, int64_t n)
{
    MAP_LOOP(gelu1(v));
}

HOT void wf_k_gelu_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
    GRAD_LOOP(gelu_grad1(v));
}

/* silu = x sigmoid(x); below x = -87 (where exp clamps) it is 0 to float
 * precision, so the factor x is clamped there too (as gelu's). */
static inline float silu_clamp(float v)
{
    const int32_t vi = wf_k_f2i(v), lim = 0x42ae0000; /* 87.0f */
    return vi < 0 && (vi & 0x7fffffff) > lim && (vi & 0x7fffffff) <= 0x7f800000 ? -87.0f : v;
}

static inline float silu1(float v)
{
    return silu_clamp(v) / (1.0f + wf_k_expf(-v));
}

static inline float silu_grad1(float v)
{
    const float sg = 1.0f / (1.0f + wf_k_expf(-v));
    return sg * (1.0f + silu_clamp(v) * (1.0f - sg));
}

HOT void wf_k_silu_fwd(const float *x, float *y, int64_t n)
{
    MAP_LOOP(silu1(v));
}

HOT void wf_k_silu_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
    GRAD_LOOP(silu_grad1(v));
}

/* y[i] = keep(i) ? x[i] / (1-p) : 0 (shared by forward and backward, which
 * applies the same mask to dy); y may be x. keep(i) is wf_k_rng_uniform(seed,
 * offset + i) >= p, tested on the integer: the uniform is k / 2^24 exactly,
 * so it is >= p exactly when k >= ceil(p 2^24). */
static HOT void dropout_apply(const float *x, float *y, int64_t n, float p, uint64_t seed,
                              uint64_t offset)
{
    const float inv = (float)(1.0 / (1.0 - (double)p));
    const uint64_t thr = (uint64_t)ceil((double)p * 16777216.0);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float t[VL];
        for (int k = 0; k < VL; k++) {
            const float v = x[i + k] * inv;
            t[k] = wf_k_rng_u64(seed, offset + (uint64_t)(i + k)) >> 40 >= thr ? v : 0.0f;
        }
        memcpy(y + i, t, sizeof t);
    }
    for (; i < n; i++) {
        const float v = x[i] * inv;
        y[i] = wf_k_rng_u64(seed, offset + (uint64_t)i) >> 40 >= thr ? v : 0.0f;
    }
}

void wf_k_dropout_fwd(const float *x, float *y, int64_t n, float p, uint64_t seed,
                      uint64_t offset)
{
    dropout_apply(x, y, n, p, seed, offset);
}

void wf_k_dropout_bwd(const float *dy, float *dx, int64_t n, float p, uint64_t seed,
                      uint64_t offset)
{
    dropout_apply(dy, dx, n, p, seed, offset);
}

/* ---- normalizations and softmax ------------------------------------------------------------ */

HOT void wf_k_layernorm_fwd(const float *x, const float *gamma, const float *beta, float *y,
                            float *saved, int64_t m, int64_t h, float eps)
{
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * h;
        float *yr = y + i * h;
        const float mean = vsum(xr, h) / (float)h;
        float acc[VL] = {0};
        int64_t j = 0;
        for (; j + VL <= h; j += VL)
            for (int k = 0; k < VL; k++)
                acc[k] += (xr[j + k] - mean) * (xr[j + k] - mean);
        for (int k = 0; j < h; j++, k++)
            acc[k] += (xr[j] - mean) * (xr[j] - mean);
        const float rstd = 1.0f / sqrtf(sum_lanes(acc) / (float)h + eps);
        j = 0;
        for (; j + VL <= h; j += VL) {
            float t[VL];
            for (int k = 0; k < VL; k++)
                t[k] = (xr[j + k] - mean) * rstd * gamma[j + k] + beta[j + k];
            memcpy(yr + j, t, sizeof t);
        }
        for (; j < h; j++)
            yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
        if (saved) {
            saved[i] = mean;
            saved[m + i] = rstd;
        }
    }
}

/* Per row: g = dy * gamma, xh = (x - mean) rstd; dx = rstd (g - mean(g) - xh
 * mean(g xh)); dgamma += dy xh and dbeta += dy over the rows (in row order). */
HOT void wf_k_layernorm_bwd(const float *x, const float *gamma, const float *dy, const float *saved,
                            float *dx, float *dgamma, float *dbeta, int64_t m, int64_t h)
{
    if (dgamma)
        memset(dgamma, 0, sizeof(float) * (size_t)h);
    if (dbeta)
        memset(dbeta, 0, sizeof(float) * (size_t)h);
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * h, *dr = dy + i * h;
        const float mean = saved[i], rstd = saved[m + i];
        if (dgamma) {
            int64_t j = 0;
            for (; j + VL <= h; j += VL) {
                float t[VL];
                for (int k = 0; k < VL; k++)
                    t[k] = dgamma[j + k] + dr[j + k] * ((xr[j + k] - mean) * rstd);
                memcpy(dgamma + j, t, sizeof t);
            }
            for (; j < h; j++)
                dgamma[j] += dr[j] * ((xr[j] - mean) * rstd);
        }
        if (dbeta)
            vacc(dbeta, dr, h);
        if (!dx)
            continue;
        float sg[VL] = {0}, sgx[VL] = {0};
        int64_t j = 0;
        for (; j + VL <= h; j += VL)
            for (int k = 0; k < VL; k++) {
                const float g = dr[j + k] * gamma[j + k];
                sg[k] += g;
                sgx[k] += g * ((xr[j + k] - mean) * rstd);
            }
        for (int k = 0; j < h; j++, k++) {
            const float g = dr[j] * gamma[j];
            sg[k] += g;
            sgx[k] += g * ((xr[j] - mean) * rstd);
        }
        const float mg = sum_lanes(sg) / (float)h, mgx = sum_lanes(sgx) / (float)h;
        float *dxr = dx + i * h;
        j = 0;
        for (; j + VL <= h; j += VL) {
            float t[VL];
            for (int k = 0; k < VL; k++)
                t[k] = rstd * (dr[j + k] * gamma[j + k] - mg - ((xr[j + k] - mean) * rstd) * mgx);
            memcpy(dxr + j, t, sizeof t);
        }
        for (; j < h; j++)
            dxr[j] = rstd * (dr[j] * gamma[j] - mg - ((xr[j] - mean) * rstd) * mgx);
    }
}

HOT void wf_k_rmsnorm_fwd(const float *x, const float *gamma, float *y, float *saved, int64_t m,
                          int64_t h, float eps)
{
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * h;
        float *yr = y + i * h;
        const float rstd = 1.0f / sqrtf(vdot(xr, xr, h) / (float)h + eps);
        int64_t j = 0;
        for (; j + VL <= h; j += VL) {
            float t[VL];
            for (int k = 0; k < VL; k++)
                t[k] = xr[j + k] * rstd * gamma[j + k];
            memcpy(yr + j, t, sizeof t);
        }
        for (; j < h; j++)
            yr[j] = xr[j] * rstd * gamma[j];
        if (saved)
            saved[i] = rstd;
    }
}

HOT void wf_k_rmsnorm_bwd(const float *x, const float *gamma, const float *dy, const float *saved,
                          float *dx, float *dgamma, int64_t m, int64_t h)
{
    if (dgamma)
        memset(dgamma, 0, sizeof(float) * (size_t)h);
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * h, *dr = dy + i * h;
        const float r = saved[i];
        float acc[VL] = {0};
        int64_t j = 0;
        for (; j + VL <= h; j += VL)
            for (int k = 0; k < VL; k++)
                acc[k] += dr[j + k] * gamma[j + k] * xr[j + k];
        for (int k = 0; j < h; j++, k++)
            acc[k] += dr[j] * gamma[j] * xr[j];
        if (dgamma) {
            for (j = 0; j + VL <= h; j += VL) {
                float t[VL];
                for (int k = 0; k < VL; k++)
                    t[k] = dgamma[j + k] + dr[j + k] * xr[j + k] * r;
                memcpy(dgamma + j, t, sizeof t);
            }
            for (; j < h; j++)
                dgamma[j] += dr[j] * xr[j] * r;
        }
        if (!dx)
            continue;
        const float c = r * r * r * sum_lanes(acc) / (float)h;
        float *dxr = dx + i * h;
        for (j = 0; j + VL <= h; j += VL) {
            float t[VL];
            for (int k = 0; k < VL; k++)
                t[k] = r * dr[j + k] * gamma[j + k] - c * xr[j + k];
            memcpy(dxr + j, t, sizeof t);
        }
        for (; j < h; j++)
            dxr[j] = r * dr[j] * gamma[j] - c * xr[j];
    }
}

/* Softmax of one row of n values in place over its first `len` entries; the
 * entries from len on are set to 0 (causal masking). */
static HOT void softmax_row(float *r, int64_t len, int64_t n)
{
    const float mx = vmax(r, len);
    const float sum = vexp_shift_sum(r, r, len, mx);
    vscale(r, r, len, 1.0f / sum);
    if (n > len)
        memset(r + len, 0, sizeof(float) * (size_t)(n - len));
}

HOT void wf_k_softmax_fwd(const float *x, float *y, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++) {
        if (y != x)
            memcpy(y + i * n, x + i * n, sizeof(float) * (size_t)n);
        softmax_row(y + i * n, n, n);
    }
}

/* dx = y * (dy - <dy, y>) over each row; dx may be dy. */
static inline void softmax_grad_row(const float *yr, const float *dr, float *dxr, int64_t n)
{
    const float dot = vdot(dr, yr, n);
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        float t[VL];
        for (int k = 0; k < VL; k++)
            t[k] = yr[j + k] * (dr[j + k] - dot);
        memcpy(dxr + j, t, sizeof t);
    }
    for (; j < n; j++)
        dxr[j] = yr[j] * (dr[j] - dot);
}

HOT void wf_k_softmax_bwd(const float *y, const float *dy, float *dx, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++)
        softmax_grad_row(y + i * n, dy + i * n, dx + i * n, n);
}

/* ---- attention ---------------------------------------------------------------------------------
 * Per (batch b, head h) with kv head g = h / (A/Akv), the head's rows are
 * strided views: Q_bh = q + b*S*A*D + h*D with row stride A*D, K_bg and V_bg
 * (Sk rows) with row stride Akv*D, so sgemm reads them in place:
 *   P   = softmax(scale Q K^T, causal)     [S,Sk]  (saved)
 *   Pd  = P .* drop / (1-p)                [S,Sk]  (ws)
 *   O   = Pd V                             [S,D]
 * and backward:
 *   dPd = dO V^T, dP = dPd .* drop/(1-p), dS = P .* (dP - rowsum(dP .* P))
 *   dQ = scale dS K, dK += scale dS^T Q, dV += Pd^T dO   (GQA heads sum into g).
 * A bias is added to the scaled scores before the softmax; its gradient is
 * dS, summed over the rows b that share a bias block. Causal attention has
 * Sk = S (the executor checks it). */

static float attn_scale_f(const wf_k_attn *at)
{
    return at->scale != 0 ? at->scale : (float)(1.0 / sqrt((double)at->d));
}

/* Applies head (b,h)'s dropout mask to src[S,Sk] into dst (scaled by 1/(1-p)).
 * With a causal mask only each row's first i+1 entries are drawn: the others
 * are zero in the probabilities (dst's are set to 0), and in backward they
 * meet a zero probability (softmax_grad_row reads only the first i+1). */
static void attn_dropout(const wf_k_attn *at, int64_t b, int64_t h, const float *src,
                         float *dst)
{
    const int64_t S = at->s, Sk = attn_sk(at);
    const int64_t At = at->heads_total > 0 ? at->heads_total : at->heads;
    const uint64_t base = at->offset + (uint64_t)((b * At + at->head0 + h) * S * Sk);
    if (!at->causal) {
        dropout_apply(src, dst, S * Sk, at->p, at->seed, base);
        return;
    }
    for (int64_t i = 0; i < S; i++) {
        dropout_apply(src + i * Sk, dst + i * Sk, i + 1, at->p, at->seed, base + (uint64_t)(i * Sk));
        if (i + 1 < Sk)
            memset(dst + i * Sk + i + 1, 0, sizeof(float) * (size_t)(Sk - i - 1));
    }
}

HOT void wf_k_attention_fwd(const wf_k_attn *at, const float *q, const float *k, const float *v,
                        float *out, float *saved, float *ws)
{
    const int64_t B = at->b, S = at->s, Sk = attn_sk(at), A = at->heads, Akv = at->kv_heads, D = at->d;
    const int64_t grp = A / Akv, ldq = A * D, ldk = Akv * D;
    const float scale = attn_scale_f(at);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < A; h++) {
            const int64_t g = h / grp;
            const float *qb = q + b * S * ldq + h * D;
            const float *kb = k + b * Sk * ldk + g * D, *vb = v + b * Sk * ldk + g * D;
            float *P = saved ? saved + (b * A + h) * S * Sk : ws;
            gemm(0, 1, S, Sk, D, scale, qb, ldq, kb, ldk, 0.0f, P, Sk);
            if (at->bias)
                vacc(P, at->bias + wf_k_attn_bias_off(at, b, h), S * Sk);
            for (int64_t i = 0; i < S; i++)
                softmax_row(P + i * Sk, at->causal ? i + 1 : Sk, Sk);
            const float *Pd = P;
            if (at->p > 0) {
                attn_dropout(at, b, h, P, ws + S * Sk);
                Pd = ws + S * Sk;
            }
            gemm(0, 0, S, D, Sk, 1.0f, Pd, Sk, vb, ldk, 0.0f, out + b * S * ldq + h * D, ldq);
        }
}

HOT void wf_k_attention_bwd(const wf_k_attn *at, const float *q, const float *k, const float *v,
                        const float *dout, const float *saved, float *dq, float *dk, float *dv,
                        float *ws)
{
    const int64_t B = at->b, S = at->s, Sk = attn_sk(at), A = at->heads, Akv = at->kv_heads, D = at->d;
    const int64_t grp = A / Akv, ldq = A * D, ldk = Akv * D;
    const float scale = attn_scale_f(at);
    float *dP = ws, *Pd = ws + S * Sk;
    if (dk)
        memset(dk, 0, sizeof(float) * (size_t)(B * Sk * ldk));
    if (dv)
        memset(dv, 0, sizeof(float) * (size_t)(B * Sk * ldk));
    if (at->dbias)
        memset(at->dbias, 0, sizeof(float) * (size_t)(at->bias_b * A * S * Sk));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < A; h++) {
            const int64_t g = h / grp;
            const float *qb = q + b * S * ldq + h * D, *dob = dout + b * S * ldq + h * D;
            const float *kb = k + b * Sk * ldk + g * D, *vb = v + b * Sk * ldk + g * D;
            const float *P = saved + (b * A + h) * S * Sk;
            if (dv) {
                const float *pd = P;
                if (at->p > 0) {
                    attn_dropout(at, b, h, P, Pd);
                    pd = Pd;
                }
                gemm(1, 0, Sk, D, S, 1.0f, pd, Sk, dob, ldq, 1.0f, dv + b * Sk * ldk + g * D, ldk);
            }
            if (!dq && !dk && !at->dbias)
                continue;
            gemm(0, 1, S, Sk, D, 1.0f, dob, ldq, vb, ldk, 0.0f, dP, Sk);
            if (at->p > 0)
                attn_dropout(at, b, h, dP, dP);
            for (int64_t i = 0; i < S; i++) {
                /* Causal rows are zero past the diagonal in P, so in dS too. */
                const int64_t len = at->causal ? i + 1 : Sk;
                softmax_grad_row(P + i * Sk, dP + i * Sk, dP + i * Sk, len);
                if (len < Sk)
                    memset(dP + i * Sk + len, 0, sizeof(float) * (size_t)(Sk - len));
            }
            if (at->dbias) /* the score gradients, summed over the rows sharing the bias */
                vacc(at->dbias + wf_k_attn_bias_off(at, b, h), dP, S * Sk);
            if (dq)
                gemm(0, 0, S, D, Sk, scale, dP, Sk, kb, ldk, 0.0f, dq + b * S * ldq + h * D, ldq);
            if (dk)
                gemm(1, 0, Sk, D, S, scale, dP, Sk, qb, ldq, 1.0f, dk + b * Sk * ldk + g * D, ldk);
        }
}

/* ---- embedding, rotary, cross-entropy ----------------------------------------------------------- */

wf_status wf_k_embedding_fwd(const int32_t *ids, const float *table, float *y, int64_t m,
                             int64_t v, int64_t h)
{
    for (int64_t i = 0; i < m; i++) {
        if (ids[i] < 0 || ids[i] >= v)
            return wf_errorf(WF_INVAL, "embedding: token id %d at position %lld is outside "
                             "[0, %lld)", (int)ids[i], (long long)i, (long long)v);
        memcpy(y + i * h, table + (int64_t)ids[i] * h, sizeof(float) * (size_t)h);
    }
    return WF_OK;
}

void wf_k_embedding_bwd(const int32_t *ids, const float *dy, float *dtable, int64_t m,
                        int64_t v, int64_t h)
{
    memset(dtable, 0, sizeof(float) * (size_t)(v * h));
    for (int64_t i = 0; i < m; i++)
        vacc(dtable + (int64_t)ids[i] * h, dy + i * h, h);
}

/* One angle per (position, pair), shared by every batch row and head: the
 * pair's frequency once (pow), then cos and sin of s times it by the angle
 * sum from position s - 1, in double (its rounding after 64k positions is
 * far below float's), rather than pow, cos and sin per position and pair
 * (which took as long as the rotation on a small model). Pairs beyond
 * ROT_PAIRS fall back to the direct formula. */
#define ROT_PAIRS 512
static void rotary(const float *x, float *y, int64_t B, int64_t S, int64_t A, int64_t D,
                   float base, double sign)
{
    const double bs = base != 0 ? (double)base : 10000.0;
    const int64_t P = D / 2, tab = P < ROT_PAIRS ? P : ROT_PAIRS;
    double dc[ROT_PAIRS], ds[ROT_PAIRS], cc[ROT_PAIRS], cs[ROT_PAIRS];
    float c[ROT_PAIRS], sn[ROT_PAIRS];
    for (int64_t i = 0; i < tab; i++) {
        const double w = sign * pow(bs, -2.0 * (double)i / (double)D);
        dc[i] = cos(w);
        ds[i] = sin(w);
        cc[i] = 1.0;
        cs[i] = 0.0;
    }
    for (int64_t s = 0; s < S; s++) {
        for (int64_t i = 0; i < tab; i++) {
            if (s > 0) {
                const double nc = cc[i] * dc[i] - cs[i] * ds[i], ns = cs[i] * dc[i] + cc[i] * ds[i];
                cc[i] = nc;
                cs[i] = ns;
            }
            c[i] = (float)cc[i];
            sn[i] = (float)cs[i];
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < A; h++) {
                const float *xr = x + (b * S + s) * A * D + h * D;
                float *yr = y + (b * S + s) * A * D + h * D;
                for (int64_t i = 0; i < tab; i++) {
                    const float x0 = xr[2 * i], x1 = xr[2 * i + 1];
                    yr[2 * i] = x0 * c[i] - x1 * sn[i];
                    yr[2 * i + 1] = x0 * sn[i] + x1 * c[i];
                }
                for (int64_t i = tab; i < P; i++) {
                    const double ang = sign * (double)s * pow(bs, -2.0 * (double)i / (double)D);
                    const float ci = (float)cos(ang), si = (float)sin(ang), x0 = xr[2 * i], x1 = xr[2 * i + 1];
                    yr[2 * i] = x0 * ci - x1 * si;
                    yr[2 * i + 1] = x0 * si + x1 * ci;
                }
            }
    }
}

void wf_k_rotary_fwd(const float *x, float *y, int64_t b, int64_t s, int64_t heads, int64_t d,
                     float base)
{
    rotary(x, y, b, s, heads, d, base, 1.0);
}

void wf_k_rotary_bwd(const float *dy, float *dx, int64_t b, int64_t s, int64_t heads,
                     int64_t d, float base)
{
    rotary(dy, dx, b, s, heads, d, base, -1.0);
}

/* sum of exp(x[j] - c) for j < n (VL partials). */
static inline float vexp_sum(const float *x, int64_t n, float c)
{
    float acc[VL] = {0};
    int64_t i = 0;
    for (; i + VL <= n; i += VL)
        for (int j = 0; j < VL; j++)
            acc[j] += wf_k_expf(x[i + j] - c);
    for (int j = 0; i < n; i++, j++)
        acc[j] += wf_k_expf(x[i] - c);
    return sum_lanes(acc);
}

HOT float wf_k_row_max(const float *x, int64_t n)
{
    return n > 0 ? vmax(x, n) : -INFINITY;
}

HOT float wf_k_row_expsum(const float *x, int64_t n, float c)
{
    return vexp_sum(x, n, c);
}

HOT void wf_k_row_scaled_exp(const float *x, float *y, int64_t n, float sub, float c)
{
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        float t[VL];
        for (int k = 0; k < VL; k++)
            t[k] = c * wf_k_expf(x[j + k] - sub);
        memcpy(y + j, t, sizeof t);
    }
    for (; j < n; j++)
        y[j] = c * wf_k_expf(x[j] - sub);
}

HOT wf_status wf_k_cross_entropy_fwd(const float *logits, const int32_t *labels, float *loss,
                                     float *saved, int64_t m, int64_t v)
{
    double total = 0;
    for (int64_t i = 0; i < m; i++) {
        if (labels[i] < 0 || labels[i] >= v)
            return wf_errorf(WF_INVAL, "cross_entropy: label %d at row %lld is outside "
                             "[0, %lld)", (int)labels[i], (long long)i, (long long)v);
        const float *r = logits + i * v;
        const float mx = vmax(r, v);
        const float lse = mx + logf(vexp_sum(r, v, mx));
        if (saved)
            saved[i] = lse;
        total += (double)lse - (double)r[labels[i]];
    }
    *loss = (float)(total / (double)m);
    return WF_OK;
}

HOT void wf_k_cross_entropy_bwd(const float *logits, const int32_t *labels, const float *saved,
                                float dloss, float *dlogits, int64_t m, int64_t v)
{
    const float c = dloss / (float)m;
    for (int64_t i = 0; i < m; i++) {
        const float *r = logits + i * v;
        float *d = dlogits + i * v;
        wf_k_row_scaled_exp(r, d, v, saved[i], c);
        d[labels[i]] -= c;
    }
}

/* ---- convolution (im2col + sgemm) --------------------------------------------------------------- */

/* Output columns [*lo, *hi) whose input column ow*stride - pad + k lies in
 * [0, size). */
static void valid_range(int64_t size, int64_t out, int64_t stride, int64_t pad, int64_t k,
                        int64_t *lo, int64_t *hi)
{
    int64_t first = pad - k > 0 ? (pad - k + stride - 1) / stride : 0;
    int64_t last = size - 1 + pad - k; /* ow*stride <= last */
    int64_t end = last < 0 ? 0 : last / stride + 1;
    if (end > out)
        end = out;
    *lo = first < end ? first : end;
    *hi = end;
}

/* col[(c*KH+kh)*KW+kw, oh*Wo+ow] = x[c, oh*sh-ph+kh, ow*sw-pw+kw] (0 outside)
 * for the cg channels of x starting at xc ([cg,H,W]). */
static void im2col(const wf_k_conv_geom *g, const float *xc, int64_t cg, float *col)
{
    const int64_t howo = g->ho * g->wo;
    for (int64_t c = 0; c < cg; c++)
        for (int64_t kh = 0; kh < g->kh; kh++)
            for (int64_t kw = 0; kw < g->kw; kw++) {
                float *row = col + ((c * g->kh + kh) * g->kw + kw) * howo;
                int64_t lo, hi;
                valid_range(g->w, g->wo, g->sw, g->pw, kw, &lo, &hi);
                for (int64_t oh = 0; oh < g->ho; oh++) {
                    float *r = row + oh * g->wo;
                    const int64_t ih = oh * g->sh - g->ph + kh;
                    if (ih < 0 || ih >= g->h) {
                        memset(r, 0, sizeof(float) * (size_t)g->wo);
                        continue;
                    }
                    const float *src = xc + (c * g->h + ih) * g->w - g->pw + kw;
                    for (int64_t ow = 0; ow < lo; ow++)
                        r[ow] = 0.0f;
                    if (g->sw == 1)
                        memcpy(r + lo, src + lo, sizeof(float) * (size_t)(hi - lo));
                    else
                        for (int64_t ow = lo; ow < hi; ow++)
                            r[ow] = src[ow * g->sw];
                    for (int64_t ow = hi; ow < g->wo; ow++)
                        r[ow] = 0.0f;
                }
            }
}

/* The adjoint of im2col: dxc[c, ih, iw] += every col entry that read it. */
static void col2im(const wf_k_conv_geom *g, const float *col, int64_t cg, float *dxc)
{
    const int64_t howo = g->ho * g->wo;
    for (int64_t c = 0; c < cg; c++)
        for (int64_t kh = 0; kh < g->kh; kh++)
            for (int64_t kw = 0; kw < g->kw; kw++) {
                const float *row = col + ((c * g->kh + kh) * g->kw + kw) * howo;
                int64_t lo, hi;
                valid_range(g->w, g->wo, g->sw, g->pw, kw, &lo, &hi);
                for (int64_t oh = 0; oh < g->ho; oh++) {
                    const int64_t ih = oh * g->sh - g->ph + kh;
                    if (ih < 0 || ih >= g->h)
                        continue;
                    const float *r = row + oh * g->wo;
                    float *dst = dxc + (c * g->h + ih) * g->w - g->pw + kw;
                    for (int64_t ow = lo; ow < hi; ow++)
                        dst[ow * g->sw] += r[ow];
                }
            }
}

/* A 1x1 kernel with stride 1 and no padding reads x as its own im2col matrix. */
static int conv_is_pointwise(const wf_k_conv_geom *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

void wf_k_conv2d_fwd(const wf_k_conv_geom *g, const float *x, const float *w, const float *bias,
                     float *y, float *ws)
{
    const int64_t G = groups_of(g), cg = g->c / G, og = g->o / G;
    const int64_t howo = g->ho * g->wo, kk = cg * g->kh * g->kw;
    const int pointwise = conv_is_pointwise(g);
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t grp = 0; grp < G; grp++) {
            const float *xc = x + (n * g->c + grp * cg) * g->h * g->w;
            float *yg = y + (n * g->o + grp * og) * howo;
            const float *col = xc;
            if (!pointwise) {
                im2col(g, xc, cg, ws);
                col = ws;
            }
            if (bias)
                for (int64_t o = 0; o < og; o++)
                    for (int64_t t = 0; t < howo; t++)
                        yg[o * howo + t] = bias[grp * og + o];
            /* y_g[og, HoWo] = w_g[og, cg*KH*KW] col[cg*KH*KW, HoWo] */
            gemm(0, 0, og, howo, kk, 1.0f, w + grp * og * kk, kk, col, howo, bias ? 1.0f : 0.0f,
                 yg, howo);
        }
}

void wf_k_conv2d_bwd(const wf_k_conv_geom *g, const float *x, const float *w, const float *dy,
                     float *dx, float *dw, float *dbias, float *ws)
{
    const int64_t G = groups_of(g), cg = g->c / G, og = g->o / G;
    const int64_t howo = g->ho * g->wo, kk = cg * g->kh * g->kw;
    const int pointwise = conv_is_pointwise(g);
    float *col = ws, *dcol = ws + kk * howo;
    if (dx && !pointwise)
        memset(dx, 0, sizeof(float) * (size_t)(g->n * g->c * g->h * g->w));
    if (dbias)
        memset(dbias, 0, sizeof(float) * (size_t)g->o);
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t grp = 0; grp < G; grp++) {
            const float *xc = x + (n * g->c + grp * cg) * g->h * g->w;
            const float *dyg = dy + (n * g->o + grp * og) * howo;
            const float *wg = w + grp * og * kk;
            if (dw) {
                /* dw_g[og, kk] (+)= dy_g[og, HoWo] col[kk, HoWo]^T, summed over images */
                const float *cm = xc;
                if (!pointwise) {
                    im2col(g, xc, cg, col);
                    cm = col;
                }
                gemm(0, 1, og, kk, howo, 1.0f, dyg, howo, cm, howo, n ? 1.0f : 0.0f,
                     dw + grp * og * kk, kk);
            }
            if (dx) {
                /* dcol[kk, HoWo] = w_g^T dy_g, scattered back onto the image */
                float *dxc = dx + (n * g->c + grp * cg) * g->h * g->w;
                if (pointwise) {
                    gemm(1, 0, kk, howo, og, 1.0f, wg, kk, dyg, howo, 0.0f, dxc, howo);
                } else {
                    gemm(1, 0, kk, howo, og, 1.0f, wg, kk, dyg, howo, 0.0f, dcol, howo);
                    col2im(g, dcol, cg, dxc);
                }
            }
            if (dbias)
                for (int64_t o = 0; o < og; o++) {
                    const float *restrict r = dyg + o * howo;
                    float s = 0.0f;
                    for (int64_t t = 0; t < howo; t++)
                        s += r[t];
                    dbias[grp * og + o] += s;
                }
        }
}

/* ---- pools ---------------------------------------------------------------------------------- */

/* Window bounds of output (oh, ow), clipped to the input. */
typedef struct {
    int64_t h0, h1, w0, w1;
} window;

static window window_of(const wf_k_conv_geom *g, int64_t oh, int64_t ow)
{
    window wd;
    wd.h0 = oh * g->sh - g->ph;
    wd.w0 = ow * g->sw - g->pw;
    wd.h1 = wd.h0 + g->kh < g->h ? wd.h0 + g->kh : g->h;
    wd.w1 = wd.w0 + g->kw < g->w ? wd.w0 + g->kw : g->w;
    wd.h0 = wd.h0 > 0 ? wd.h0 : 0;
    wd.w0 = wd.w0 > 0 ? wd.w0 : 0;
    return wd;
}

/* Plane index of the first maximum of window wd (row-major scan; -1 if empty). */
static int64_t window_argmax(const wf_k_conv_geom *g, const float *plane, window wd)
{
    int64_t best = -1;
    float bv = 0.0f;
    for (int64_t ih = wd.h0; ih < wd.h1; ih++)
        for (int64_t iw = wd.w0; iw < wd.w1; iw++) {
            const float val = plane[ih * g->w + iw];
            if (best < 0 || val > bv) {
                best = ih * g->w + iw;
                bv = val;
            }
        }
    return best;
}

void wf_k_maxpool_fwd(const wf_k_conv_geom *g, const float *x, float *y)
{
    for (int64_t p = 0; p < g->n * g->c; p++) {
        const float *plane = x + p * g->h * g->w;
        float *yp = y + p * g->ho * g->wo;
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                int64_t a = window_argmax(g, plane, window_of(g, oh, ow));
                yp[oh * g->wo + ow] = a >= 0 ? plane[a] : 0.0f;
            }
    }
}

void wf_k_maxpool_bwd(const wf_k_conv_geom *g, const float *x, const float *dy, float *dx)
{
    memset(dx, 0, sizeof(float) * (size_t)(g->n * g->c * g->h * g->w));
    for (int64_t p = 0; p < g->n * g->c; p++) {
        const float *plane = x + p * g->h * g->w;
        const float *dyp = dy + p * g->ho * g->wo;
        float *dxp = dx + p * g->h * g->w;
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                int64_t a = window_argmax(g, plane, window_of(g, oh, ow));
                if (a >= 0)
                    dxp[a] += dyp[oh * g->wo + ow];
            }
    }
}

void wf_k_avgpool_fwd(const wf_k_conv_geom *g, const float *x, float *y)
{
    const float inv = 1.0f / (float)(g->kh * g->kw);
    for (int64_t p = 0; p < g->n * g->c; p++) {
        const float *plane = x + p * g->h * g->w;
        float *yp = y + p * g->ho * g->wo;
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                window wd = window_of(g, oh, ow);
                float s = 0.0f;
                for (int64_t ih = wd.h0; ih < wd.h1; ih++)
                    for (int64_t iw = wd.w0; iw < wd.w1; iw++)
                        s += plane[ih * g->w + iw];
                yp[oh * g->wo + ow] = s * inv;
            }
    }
}

void wf_k_avgpool_bwd(const wf_k_conv_geom *g, const float *dy, float *dx)
{
    const float inv = 1.0f / (float)(g->kh * g->kw);
    memset(dx, 0, sizeof(float) * (size_t)(g->n * g->c * g->h * g->w));
    for (int64_t p = 0; p < g->n * g->c; p++) {
        const float *dyp = dy + p * g->ho * g->wo;
        float *dxp = dx + p * g->h * g->w;
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                window wd = window_of(g, oh, ow);
                const float d = dyp[oh * g->wo + ow] * inv;
                for (int64_t ih = wd.h0; ih < wd.h1; ih++)
                    for (int64_t iw = wd.w0; iw < wd.w1; iw++)
                        dxp[ih * g->w + iw] += d;
            }
    }
}

void wf_k_global_avgpool_fwd(const float *x, float *y, int64_t nc, int64_t hw)
{
    for (int64_t p = 0; p < nc; p++) {
        const float *restrict r = x + p * hw;
        float s = 0.0f;
        for (int64_t t = 0; t < hw; t++)
            s += r[t];
        y[p] = s / (float)hw;
    }
}

void wf_k_global_avgpool_bwd(const float *dy, float *dx, int64_t nc, int64_t hw)
{
    for (int64_t p = 0; p < nc; p++) {
        const float d = dy[p] / (float)hw;
        float *restrict r = dx + p * hw;
        for (int64_t t = 0; t < hw; t++)
            r[t] = d;
    }
}

/* ---- batchnorm -------------------------------------------------------------------------------- */

void wf_k_batchnorm_fwd(const float *x, const float *gamma, const float *beta, float *y,
                        float *saved, int64_t n, int64_t c, int64_t s, float eps)
{
    const float cnt = (float)(n * s);
    for (int64_t ch = 0; ch < c; ch++) {
        float sum = 0.0f, var = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            const float *restrict r = x + (i * c + ch) * s;
            for (int64_t t = 0; t < s; t++)
                sum += r[t];
        }
        const float mean = sum / cnt;
        for (int64_t i = 0; i < n; i++) {
            const float *restrict r = x + (i * c + ch) * s;
            for (int64_t t = 0; t < s; t++)
                var += (r[t] - mean) * (r[t] - mean);
        }
        const float rstd = 1.0f / sqrtf(var / cnt + eps);
        const float a = rstd * gamma[ch], b = beta[ch] - mean * a;
        for (int64_t i = 0; i < n; i++) {
            const float *restrict r = x + (i * c + ch) * s;
            float *restrict yr = y + (i * c + ch) * s;
            for (int64_t t = 0; t < s; t++)
                yr[t] = r[t] * a + b;
        }
        if (saved) {
            saved[ch] = mean;
            saved[c + ch] = rstd;
        }
    }
}

void wf_k_batchnorm_bwd(const float *x, const float *gamma, const float *dy, const float *saved,
                        float *dx, float *dgamma, float *dbeta, int64_t n, int64_t c, int64_t s)
{
    const float cnt = (float)(n * s);
    for (int64_t ch = 0; ch < c; ch++) {
        const float mean = saved[ch], rstd = saved[c + ch];
        float sd = 0.0f, sdx = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            const float *restrict r = x + (i * c + ch) * s, *restrict d = dy + (i * c + ch) * s;
            for (int64_t t = 0; t < s; t++) {
                sd += d[t];
                sdx += d[t] * (r[t] - mean);
            }
        }
        sdx *= rstd;
        if (dgamma)
            dgamma[ch] = sdx;
        if (dbeta)
            dbeta[ch] = sd;
        if (!dx)
            continue;
        const float a = gamma[ch] * rstd, md = sd / cnt, mdx = sdx / cnt;
        for (int64_t i = 0; i < n; i++) {
            const float *restrict r = x + (i * c + ch) * s, *restrict d = dy + (i * c + ch) * s;
            float *restrict dr = dx + (i * c + ch) * s;
            for (int64_t t = 0; t < s; t++)
                dr[t] = a * (d[t] - md - (r[t] - mean) * rstd * mdx);
        }
    }
}

/* ---- data movement --------------------------------------------------------------------------- */

/* Writes dst in row-major order of shape dshape[ndim], reading src at strides
 * sstride (src's stride for each of dst's dimensions); the innermost dimension
 * is a strided copy loop. */
static void strided_copy(const float *src, float *dst, int ndim, const int64_t *dshape,
                         const int64_t *sstride)
{
    int64_t idx[WF_K_MAX_DIMS] = {0}, outer = 1;
    const int64_t inner = dshape[ndim - 1], is = sstride[ndim - 1];
    for (int d = 0; d < ndim - 1; d++)
        outer *= dshape[d];
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = 0;
        for (int d = 0; d < ndim - 1; d++)
            off += idx[d] * sstride[d];
        const float *s = src + off;
        float *out = dst + o * inner;
        if (is == 1)
            memcpy(out, s, sizeof(float) * (size_t)inner);
        else
            for (int64_t t = 0; t < inner; t++)
                out[t] = s[t * is];
        for (int d = ndim - 2; d >= 0; d--) {
            if (++idx[d] < dshape[d])
                break;
            idx[d] = 0;
        }
    }
}

static void row_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = st;
        st *= shape[d];
    }
}

void wf_k_transpose_fwd(const float *x, float *y, int ndim, const int64_t *xshape,
                        const int *perm)
{
    /* y[i0..] = x[...] with y's dimension d walking x's dimension perm[d]. */
    int64_t xs[WF_K_MAX_DIMS], yshape[WF_K_MAX_DIMS], ss[WF_K_MAX_DIMS];
    if (ndim == 0) {
        y[0] = x[0];
        return;
    }
    row_strides(ndim, xshape, xs);
    for (int d = 0; d < ndim; d++) {
        yshape[d] = xshape[perm[d]];
        ss[d] = xs[perm[d]];
    }
    strided_copy(x, y, ndim, yshape, ss);
}

void wf_k_transpose_bwd(const float *dy, float *dx, int ndim, const int64_t *xshape,
                        const int *perm)
{
    /* dx = transpose(dy) by the inverse permutation: dx's dimension perm[d] is
     * dy's dimension d. */
    int64_t yshape[WF_K_MAX_DIMS], ys[WF_K_MAX_DIMS], ss[WF_K_MAX_DIMS];
    if (ndim == 0) {
        dx[0] = dy[0];
        return;
    }
    for (int d = 0; d < ndim; d++)
        yshape[d] = xshape[perm[d]];
    row_strides(ndim, yshape, ys);
    for (int d = 0; d < ndim; d++)
        ss[perm[d]] = ys[d];
    strided_copy(dy, dx, ndim, xshape, ss);
}

void wf_k_concat_fwd(const float *const *xs, int nx, const int64_t *sizes, float *y,
                     int64_t outer, int64_t inner)
{
    int64_t total = 0;
    for (int t = 0; t < nx; t++)
        total += sizes[t];
    for (int64_t o = 0; o < outer; o++) {
        float *dst = y + o * total * inner;
        for (int t = 0; t < nx; t++) {
            const size_t len = (size_t)(sizes[t] * inner);
            memcpy(dst, xs[t] + o * (int64_t)len, sizeof(float) * len);
            dst += len;
        }
    }
}

void wf_k_concat_bwd(const float *dy, float *const *dxs, int nx, const int64_t *sizes,
                     int64_t outer, int64_t inner)
{
    int64_t total = 0;
    for (int t = 0; t < nx; t++)
        total += sizes[t];
    for (int64_t o = 0; o < outer; o++) {
        const float *src = dy + o * total * inner;
        for (int t = 0; t < nx; t++) {
            const size_t len = (size_t)(sizes[t] * inner);
            if (dxs[t])
                memcpy(dxs[t] + o * (int64_t)len, src, sizeof(float) * len);
            src += len;
        }
    }
}

void wf_k_split_fwd(const float *x, float *const *ys, int ny, const int64_t *sizes,
                    int64_t outer, int64_t inner)
{
    wf_k_concat_bwd(x, ys, ny, sizes, outer, inner);
}

void wf_k_split_bwd(const float *const *dys, float *dx, int ny, const int64_t *sizes,
                    int64_t outer, int64_t inner)
{
    int64_t total = 0;
    for (int t = 0; t < ny; t++)
        total += sizes[t];
    for (int64_t o = 0; o < outer; o++) {
        float *dst = dx + o * total * inner;
        for (int t = 0; t < ny; t++) {
            const size_t len = (size_t)(sizes[t] * inner);
            if (dys[t])
                memcpy(dst, dys[t] + o * (int64_t)len, sizeof(float) * len);
            else
                memset(dst, 0, sizeof(float) * len);
            dst += len;
        }
    }
}
