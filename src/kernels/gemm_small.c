/* A GEMM for the skinny products of training (AVX-512 CPUs): one side of
 * the product 128 rows or fewer, the other wide. A batch-64 MLP layer is
 * Y[64,N] = X[64,K] W[K,N] forward, dX = dY W^T and dW = X^T dY backward;
 * OpenBLAS runs them at about 60% of its square-matrix rate, because it packs
 * the whole 64 MiB weight in a separate pass before it computes on it
 * (docs/runtime.md, "Kernels").
 *
 * Here the wide operand is packed a panel at a time, KC x 64 floats (64 KiB,
 * L2-resident), and computed on at once while it is hot: for every 64 columns
 * of C, for every KC rows of op(B): pack the panel (transposing when op(B) is
 * B^T), then run the register tile over all of C's rows, 6 rows x 64 columns
 * (24 zmm accumulators), broadcasting op(A)'s elements, which are read in
 * place (op(A) is small or streamed once per column panel). C is read and
 * written once per KC block. dX = dY W^T is computed as its transpose, W
 * times dY^T, so that W streams untransposed and only dY is packed. Every
 * element of C is the sum over k in increasing order, in FMAs: results are
 * deterministic. Measured against OpenBLAS 0.3.21 (SkylakeX kernels, one
 * thread, the mlp's shapes): 64x4096x4096 forward 160 against 140 GFLOP/s,
 * its dX 200 against 150, its dW (4096x4096x64, A transposed) 205 against 155
 * (docs/runtime.md, "Kernels").
 *
 * wf_k_gemm_small takes the product when it fits (alpha = 1, beta 0 or 1, n
 * a multiple of 64, and either m <= 128 < k or k <= 128 < m, on a CPU with
 * AVX-512 F/BW/VL/DQ); otherwise it returns 0 and the caller runs BLAS. */
#include "kernels/kernels-impl.h"

#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(WF_NO_GEMM_SMALL)

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#include <immintrin.h>

#define NB 64  /* columns of a panel: 4 zmm */
#define KC 256 /* rows of a panel */
#define MR 6   /* rows of the register tile */

/* C[mr, 64] (ldc) = (load ? C : 0) + sum_k A(r, k) Bp[k, 0..63] for k < kc,
 * A(r, k) = a[r sai + k sak]. */
#define MICRO(R)                                                                                          \
    static void micro_##R(int64_t kc, const float *a, int64_t sai, int64_t sak, const float *bp, float *c,  \
                          int64_t ldc, int load)                                                          \
    {                                                                                                     \
        __m512 acc[R][4];                                                                                 \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                               \
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) acc[r][q] =                               \
                load ? _mm512_loadu_ps(c + r * ldc + 16 * q) : _mm512_setzero_ps();                       \
        for (int64_t k = 0; k < kc; k++) {                                                                \
            const float *bk = bp + k * NB;                                                                \
            const __m512 b0 = _mm512_load_ps(bk), b1 = _mm512_load_ps(bk + 16), b2 = _mm512_load_ps(bk + 32), \
                         b3 = _mm512_load_ps(bk + 48);                                                    \
            const float *ak = a + k * sak;                                                                \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                           \
            {                                                                                             \
                const __m512 av = _mm512_set1_ps(ak[r * sai]);                                            \
                acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);                                           \
                acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);                                           \
                acc[r][2] = _mm512_fmadd_ps(av, b2, acc[r][2]);                                           \
                acc[r][3] = _mm512_fmadd_ps(av, b3, acc[r][3]);                                           \
            }                                                                                             \
        }                                                                                                 \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                               \
            _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++)                                           \
                _mm512_storeu_ps(c + r * ldc + 16 * q, acc[r][q]);                                        \
    }

MICRO(1)
MICRO(2)
MICRO(3)
MICRO(4)
MICRO(5)
MICRO(6)

typedef void (*micro_fn)(int64_t, const float *, int64_t, int64_t, const float *, float *, int64_t, int);
static const micro_fn MICROS[MR + 1] = {NULL, micro_1, micro_2, micro_3, micro_4, micro_5, micro_6};

/* Bp[k, j] = op(B)[k0 + k, j0 + j] for k < kc, j < 64. */
static void pack_panel(float *restrict bp, const float *restrict b, int64_t ldb, int tb, int64_t k0, int64_t j0,
                       int64_t kc)
{
    if (!tb) {
        for (int64_t k = 0; k < kc; k++) {
            const float *src = b + (k0 + k) * ldb + j0;
            float *dst = bp + k * NB;
            for (int q = 0; q < 4; q++)
                _mm512_store_ps(dst + 16 * q, _mm512_loadu_ps(src + 16 * q));
        }
        return;
    }
    /* op(B) = B^T: B[j, k] at b[j ldb + k]; read rows of B, write columns of Bp */
    for (int64_t j = 0; j < NB; j++) {
        const float *src = b + (j0 + j) * ldb + k0;
        for (int64_t k = 0; k < kc; k++)
            bp[k * NB + j] = src[k];
    }
}

static void gemm_panels(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                        const float *b, int64_t ldb, int beta1, float *c, int64_t ldc, float *bp)
{
    const int64_t sai = ta ? 1 : lda, sak = ta ? lda : 1;
    for (int64_t j0 = 0; j0 < n; j0 += NB)
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            const int64_t kc = k - k0 < KC ? k - k0 : KC;
            pack_panel(bp, b, ldb, tb, k0, j0, kc);
            const int load = k0 > 0 || beta1;
            for (int64_t i0 = 0; i0 < m; i0 += MR) {
                const int mr = (int)(m - i0 < MR ? m - i0 : MR);
                MICROS[mr](kc, a + i0 * sai + k0 * sak, sai, sak, bp, c + i0 * ldc + j0, ldc, load);
            }
        }
}

#pragma GCC pop_options

/* The panel and (for dX) C^T: one workspace per thread, grown as needed and
 * kept (a fresh 1 MiB buffer per product would be mapped and faulted in
 * every time). NULL when out of memory. */
static float *workspace(size_t floats)
{
    static _Thread_local float *ws;
    static _Thread_local size_t cap;
    if (floats > cap) {
        free(ws);
        cap = 0;
        ws = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
        if (ws)
            cap = floats;
    }
    return ws;
}

int wf_k_gemm_small(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    static int level = -1;
    if (level < 0) { /* WEFT_GEMM_SMALL=0: BLAS for every product (to compare) */
        const char *env = getenv("WEFT_GEMM_SMALL");
        level = env && !strcmp(env, "0") ? 0 : wf_k_cpu_vector_level();
    }
    if (level < 2 || alpha != 1.0f || (beta != 0.0f && beta != 1.0f) || n % NB != 0 || n < NB)
        return 0;
    if (!((m <= 128 && k > 128) || (k <= 128 && m > 128)))
        return 0;
    if (tb && !(!ta && m <= 128 && m % NB == 0))
        return 0; /* a transposed wide operand: BLAS packs it faster */
    const int ct_path = tb != 0;
    float *bp = workspace((size_t)(KC * NB) + (ct_path ? (size_t)(n * m) : 0));
    if (!bp)
        return 0;
    if (!ct_path) {
        gemm_panels(ta, tb, m, n, k, a, lda, b, ldb, beta != 0.0f, c, ldc, bp);
        return 1;
    }
    /* dX = dY W^T with a small dY: C^T[n, m] = B[n, k] A^T[k, m], so the wide
     * operand W streams once, untransposed, and only the small one is packed
     * transposed; C^T goes through the workspace */
    float *ct = bp + KC * NB;
    gemm_panels(0, 1, n, m, k, b, ldb, a, lda, 0, ct, m, bp);
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        if (beta != 0.0f)
            for (int64_t j = 0; j < n; j++)
                ci[j] += ct[j * m + i];
        else
            for (int64_t j = 0; j < n; j++)
                ci[j] = ct[j * m + i];
    }
    return 1;
}

#else

int wf_k_gemm_small(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta;
    (void)c, (void)ldc;
    return 0;
}

#endif
