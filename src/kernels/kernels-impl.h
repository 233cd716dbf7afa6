/* weft runtime CPU compute kernels (fp32): forward and backward for every op
 * of WF_OP_LIST, as pure functions over float arrays (no graph, no MPI).
 *
 * Each kernel comes in two versions with the same signature:
 *   wf_k_<op>_<fwd|bwd>      the fast path (kernels.c): CBLAS sgemm for
 *                            matmul, batch_matmul, linear, conv2d (im2col)
 *                            and attention; flat vectorizable loops elsewhere;
 *   wf_k_<op>_<fwd|bwd>_ref  the reference (kernels_ref.c): naive loops that
 *                            accumulate in double, kept to test the fast path.
 *
 * Conventions, shared by every kernel:
 * - Shapes are row-major and follow the comments of WF_OP_LIST in
 *   weft/graph.h; the executor flattens leading dimensions (x[...,K] is
 *   passed as M = prod(...) rows of K).
 * - Backward kernels OVERWRITE their gradient outputs (they never accumulate
 *   into them); the executor sums partial gradients with wf_k_add_fwd. Any
 *   gradient pointer may be NULL when that gradient is not needed; it is then
 *   neither computed nor written.
 * - Backward kernels take the forward inputs (and outputs, where named) as
 *   they were at forward time. A few forward kernels also write a `saved`
 *   buffer for their backward (its size in floats is given by the op's
 *   wf_k_<op>_saved_floats helper); forward may be given saved == NULL when no
 *   backward will follow (evaluation), backward needs it. Ops that save:
 *     layernorm      mean[M], rstd[M]               (2*M floats)
 *     rmsnorm        rstd[M]                        (M floats)
 *     cross_entropy  logsumexp[M] of each row        (M floats)
 *     batchnorm      mean[C], rstd[C]               (2*C floats)
 *     attention      softmax probabilities [B,A,S,S] before dropout
 *   Dropout saves no mask: keep/drop is a pure function of (seed, element
 *   index), so backward regenerates it (and results do not depend on how the
 *   work is split). Maxpool saves no argmax: backward recomputes it from x with
 *   the same first-maximum tie-break. Softmax backward uses its output y.
 * - Kernels that need temporary memory (conv2d's im2col, attention's score
 *   matrices) take a `ws` scratch buffer of wf_k_<op>_ws_floats floats; its
 *   content is undefined on entry and on return. The reference kernels accept
 *   and ignore it, so both versions are called the same way.
 * - Sizes are int64_t and must be >= 1. Kernels do not validate shapes (the
 *   graph does; conv2d and pool geometry has wf_k_conv_geom_check); the only
 *   data-dependent checks are on integer inputs (token ids, labels), whose
 *   kernels return a wf_status. Outputs must not alias inputs, except that
 *   the elementwise ops (add, mul, bias_add, activations, dropout, rotary)
 *   may write y over x.
 * - Dropout (the op and attention's) draws, for element index i (row-major
 *   position in the tensor plus `offset`), u = wf_k_rng_uniform(seed, i) in
 *   [0,1); the element is kept when u >= p and scaled by 1/(1-p). The offset
 *   lets data-parallel ranks draw the masks a single process would draw for
 *   the same global batch (offset = first local element's global index).
 */
#ifndef WEFT_RUNTIME_KERNELS_IMPL_H
#define WEFT_RUNTIME_KERNELS_IMPL_H

#include "weft/core.h"
#include "weft/graph.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Most dimensions a transposed tensor may have (as WF_MAX_DIMS of the IR). */
#define WF_K_MAX_DIMS 8

/* ---- counter-based RNG ------------------------------------------------------ */

/* splitmix64's finalizer applied to seed + (index+1) * golden ratio: a
 * stateless hash, so element i's draw depends only on (seed, i). */
static inline uint64_t wf_k_rng_u64(uint64_t seed, uint64_t index)
{
    uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0,1) with 24 random bits (exact in float). */
static inline float wf_k_rng_uniform(uint64_t seed, uint64_t index)
{
    return (float)(wf_k_rng_u64(seed, index) >> 40) * (1.0f / 16777216.0f);
}

/* Derives an independent seed for a stream (e.g. step number or op index)
 * from a base seed, so dropout differs per step yet replays exactly. */
static inline uint64_t wf_k_seed_mix(uint64_t seed, uint64_t stream)
{
    return wf_k_rng_u64(seed ^ 0xD1B54A32D192ED03ull, stream);
}

/* ---- vectorizable math -------------------------------------------------------------------
 * Building blocks of the loops that GCC vectorizes at -O2 (kernels.c says how
 * and why): blocks of WF_K_VL floats, no calls, no float comparisons. */

#define WF_K_VL 16

/* The ISA clones of a hot loop (GCC's function multi-versioning, resolved
 * once at load time through an ifunc): x86-64-v4 (AVX-512), x86-64-v3 (AVX2)
 * and the baseline; elsewhere the baseline alone. Without FMA contraction
 * (ISO C mode, -std=c11) every clone computes the same bits. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__) && \
    defined(__linux__)
#define WF_K_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define WF_K_HOT
#endif

static inline int32_t wf_k_f2i(float x)
{
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i;
}

static inline float wf_k_i2f(int32_t i)
{
    float x;
    memcpy(&x, &i, sizeof x);
    return x;
}

/* exp(x) in float, within 2 ulp of expf, with no call and no float
 * comparison: |x| is clamped to 87 on its bits (so 2^n stays a normal float;
 * NaN passes through), n = round(x / ln 2) by the 1.5 * 2^23 shifter,
 * r = x - n ln 2 in two parts (Cody-Waite), exp(r) by Cephes' expf
 * polynomial, times 2^n built in the exponent bits. exp(-inf) gives exp(-87)
 * (1.6e-38), exp(+inf) exp(87). */
static inline float wf_k_expf(float x)
{
    const int32_t xi = wf_k_f2i(x), ax = xi & 0x7fffffff, lim = 0x42ae0000; /* 87.0f */
    x = wf_k_i2f(ax > lim && ax <= 0x7f800000 ? (int32_t)((uint32_t)xi & 0x80000000u) | lim : xi);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float t = x * 1.44269504088896341f + shifter;
    const float n = t - shifter;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * r * r + r + 1.0f;
    /* t's low mantissa bits hold n + 0x400000 */
    return e * wf_k_i2f((int32_t)(((uint32_t)wf_k_f2i(t) - 0x4B400000u + 127u) << 23));
}

/* sqrt(v) for v >= 0 (+0 gives 0) as v / sqrt(v): the reciprocal root from
 * the bit estimate and three Newton steps, relative error about 2e-7. */
static inline float wf_k_sqrtf(float v)
{
    float y = wf_k_i2f(0x5f375a86 - (wf_k_f2i(v) >> 1));
    const float h = 0.5f * v;
    y = y * (1.5f - h * y * y);
    y = y * (1.5f - h * y * y);
    y = y * (1.5f - h * y * y);
    return v * y;
}

/* ---- BLAS control ------------------------------------------------------------- */

/* Sets the number of BLAS threads (OpenBLAS); WF_INVAL for n < 1 and
 * WF_NOTFOUND when the BLAS in use cannot be told. */
wf_status wf_k_set_threads(int n);
/* A one-line description of the BLAS library (static string). */
const char *wf_k_blas_info(void);
/* The core type whose kernels OpenBLAS runs on this CPU ("Haswell",
 * "SkylakeX", ...; OPENBLAS_CORETYPE overrides its choice), "unknown" for
 * another BLAS. */
const char *wf_k_blas_core(void);
/* The widest vector units this CPU and its OS run, by cpuid and xgetbv:
 * 2 = AVX-512 F, BW, VL and DQ (with AVX2 and FMA), 1 = AVX2 and FMA, 0 =
 * neither (or not x86-64). */
int wf_k_cpu_vector_level(void);
/* 1 when wf_k_cpu_vector_level() is 2. */
int wf_k_cpu_has_avx512f(void);
/* The vector level (as wf_k_cpu_vector_level) of an OpenBLAS core type's
 * kernels, by name, case-insensitive; 0 for an unlisted core. */
int wf_k_blas_core_level(const char *core);
/* The OPENBLAS_CORETYPE that runs the kernels of a CPU of vector level
 * cpu_level when OpenBLAS chose `core`: "SkylakeX" (level 2) or "Haswell"
 * (level 1) when core's kernels are narrower than the CPU's units, else NULL
 * (also for "unknown" or NULL). */
const char *wf_k_blas_core_for(const char *core, int cpu_level);
/* wf_k_blas_core_for of the loaded OpenBLAS's core and this CPU; NULL with
 * another BLAS. */
const char *wf_k_blas_better_core(void);
/* NULL, or a one-line hint when the BLAS leaves this CPU's units unused:
 * OPENBLAS_CORETYPE names a narrower core (Haswell on an AVX-512 CPU), or
 * OpenBLAS does not know the CPU model and falls back to one (static
 * string). */
const char *wf_k_blas_hint(void);

/* ---- skinny products (gemm_small.c) ------------------------------------------ */

/* C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C (row-major; A stored [m,k],
 * or [k,m] when ta; B [k,n], or [n,k] when tb) by the panel kernel for
 * skinny products, when it applies: an AVX-512 CPU, alpha 1, beta 0 or 1, n
 * a multiple of 64, and m <= 128 < k (op(B) not transposed, or m a multiple
 * of 64) or k <= 128 < m (op(B) not transposed). Returns 1 when it computed
 * C, 0 when the caller must (BLAS). */
int wf_k_gemm_small(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* ---- geometry of conv2d and the pools --------------------------------------- */

typedef struct {
    int64_t n, c, h, w; /* input x[N,C,H,W] */
    int64_t o;          /* conv2d output channels; pools: set to c */
    int64_t kh, kw;     /* kernel */
    int64_t sh, sw;     /* stride */
    int64_t ph, pw;     /* zero padding on each side */
    int64_t groups;     /* conv2d groups (0 = 1), dividing c and o; pools ignore */
    int64_t ho, wo;     /* output size: set by wf_k_conv_geom_check */
} wf_k_conv_geom;

/* Validates the geometry (positive sizes, pad < kernel, kernel within the
 * padded input, groups dividing c and o) and sets ho = (h+2ph-kh)/sh+1 and
 * wo likewise. `pool` != 0 skips the checks on o and groups. WF_INVAL with a
 * message naming the bad value. */
wf_status wf_k_conv_geom_check(wf_k_conv_geom *g, int pool);

/* The geometry of a graph's conv2d or pool op (x's shape, the weight's kernel,
 * the op's stride/pad/groups with their defaults), checked. Defined in
 * executor.c, the bridge from the graph to these kernels; the kernels
 * themselves never see a graph. */
wf_status wf_k_conv_geom_of(const wf_graph *g, const wf_op *op, wf_k_conv_geom *c);

/* ---- attention ---------------------------------------------------------------- */

typedef struct {
    int64_t b, s;            /* batch B, sequence S (the queries'; keys: Sk, last field) */
    int64_t heads, kv_heads; /* A, Akv (Akv divides A; head h reads kv head h/(A/Akv)) */
    int64_t d;               /* head dim D */
    int causal;              /* key j > query i is masked */
    float scale;             /* score scale (0 = 1/sqrt(D)) */
    float p;                 /* dropout probability on the probabilities, [0,1] */
    uint64_t seed, offset;   /* dropout: element (b,h,i,j) has index
                              * offset + ((b*At + h0 + h)*S + i)*S + j */
    int64_t heads_total;     /* At: heads of the whole layer (0 = heads) */
    int64_t head0;           /* h0: the first of this shard's heads (SPMD) */
    /* An additive bias on the scaled scores (NULL: none): bias[Bb,A,S,S] of
     * this shard's A heads, Bb = bias_b dividing B; row b adds bias[b/(B/Bb)].
     * Backward writes its gradient into dbias (same shape; NULL: not needed). */
    const float *bias;
    float *dbias;
    int64_t bias_b;
    /* Sk: the keys' and values' length (0 = S; T5's cross-attention reads the
     * encoder's keys from the decoder's queries); causal needs Sk = S. Every
     * [S,S] above is [S,Sk]. */
    int64_t sk;
} wf_k_attn;

size_t wf_k_attention_saved_floats(const wf_k_attn *at); /* B*A*S*Sk */
/* Row (b, head h)'s bias block [S,S] within at->bias (at->bias non-NULL). */
static inline int64_t wf_k_attn_bias_off(const wf_k_attn *at, int64_t b, int64_t h)
{
    return ((b / (at->b / at->bias_b)) * at->heads + h) * at->s * (at->sk > 0 ? at->sk : at->s);
}
size_t wf_k_attention_ws_floats(const wf_k_attn *at);    /* 2*S*Sk */

/* ---- declarations, generated once for the fast and the reference versions -- */

#define WF_K_DECLARE(SFX)                                                                    \
    /* a[M,K] (trans_a: [K,M]) x b[K,N] (trans_b: [N,K]) -> c[M,N]; da, db in the         \
     * stored layout of a and b. */                                                         \
    void wf_k_matmul_fwd##SFX(const float *a, const float *b, float *c, int64_t m,          \
                              int64_t k, int64_t n, int trans_a, int trans_b);              \
    void wf_k_matmul_bwd##SFX(const float *a, const float *b, const float *dc, float *da,   \
                              float *db, int64_t m, int64_t k, int64_t n, int trans_a,      \
                              int trans_b);                                                 \
    /* batch independent matmuls: a[batch,M,K], b[batch,K,N] -> c[batch,M,N] */             \
    void wf_k_batch_matmul_fwd##SFX(const float *a, const float *b, float *c, int64_t batch, \
                                    int64_t m, int64_t k, int64_t n, int trans_a,           \
                                    int trans_b);                                           \
    void wf_k_batch_matmul_bwd##SFX(const float *a, const float *b, const float *dc,        \
                                    float *da, float *db, int64_t batch, int64_t m,         \
                                    int64_t k, int64_t n, int trans_a, int trans_b);        \
    /* x[M,K] w[K,N] + bias[N] (bias may be NULL) -> y[M,N] */                              \
    void wf_k_linear_fwd##SFX(const float *x, const float *w, const float *bias, float *y,  \
                              int64_t m, int64_t k, int64_t n);                             \
    void wf_k_linear_bwd##SFX(const float *x, const float *w, const float *dy, float *dx,   \
                              float *dw, float *dbias, int64_t m, int64_t k, int64_t n);    \
    /* x[M,N] + b[N] -> y[M,N] */                                                           \
    void wf_k_bias_add_fwd##SFX(const float *x, const float *b, float *y, int64_t m,        \
                                int64_t n);                                                 \
    void wf_k_bias_add_bwd##SFX(const float *dy, float *dx, float *db, int64_t m,           \
                                int64_t n);                                                 \
    /* a[n] + b[nb] -> y[n], b repeated (nb divides n: b's shape a suffix of a's) */        \
    void wf_k_add_fwd##SFX(const float *a, const float *b, float *y, int64_t n, int64_t nb); \
    void wf_k_add_bwd##SFX(const float *dy, float *da, float *db, int64_t n, int64_t nb);   \
    /* a[n] * b[nb] (broadcast as add) -> y[n]; with b == NULL, a * scale (scale is        \
     * used only when b is NULL) */                                                         \
    void wf_k_mul_fwd##SFX(const float *a, const float *b, float *y, int64_t n, int64_t nb, \
                           float scale);                                                    \
    void wf_k_mul_bwd##SFX(const float *a, const float *b, const float *dy, float *da,      \
                           float *db, int64_t n, int64_t nb, float scale);                  \
    /* elementwise x[n] -> y[n]; backward from x. gelu is the tanh approximation          \
     * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); silu is x sigmoid(x). */           \
    void wf_k_relu_fwd##SFX(const float *x, float *y, int64_t n);                           \
    void wf_k_relu_bwd##SFX(const float *x, const float *dy, float *dx, int64_t n);         \
    void wf_k_gelu_fwd##SFX(const float *x, float *y, int64_t n);                           \
    void wf_k_gelu_bwd##SFX(const float *x, const float *dy, float *dx, int64_t n);         \
    void wf_k_silu_fwd##SFX(const float *x, float *y, int64_t n);                           \
    void wf_k_silu_bwd##SFX(const float *x, const float *dy, float *dx, int64_t n);         \
    /* y[i] = keep(seed, offset+i) ? x[i]/(1-p) : 0; p in [0,1] (1 drops all) */                          \
    void wf_k_dropout_fwd##SFX(const float *x, float *y, int64_t n, float p, uint64_t seed, \
                               uint64_t offset);                                            \
    void wf_k_dropout_bwd##SFX(const float *dy, float *dx, int64_t n, float p,              \
                               uint64_t seed, uint64_t offset);                             \
    /* x[M,H], gamma[H], beta[H] -> y[M,H]; saved: mean[M], rstd[M] */                      \
    void wf_k_layernorm_fwd##SFX(const float *x, const float *gamma, const float *beta,     \
                                 float *y, float *saved, int64_t m, int64_t h, float eps);  \
    void wf_k_layernorm_bwd##SFX(const float *x, const float *gamma, const float *dy,       \
                                 const float *saved, float *dx, float *dgamma,              \
                                 float *dbeta, int64_t m, int64_t h);                       \
    /* x[M,H], gamma[H] -> y = x * rstd * gamma, rstd = 1/sqrt(mean(x^2)+eps);            \
     * saved: rstd[M] */                                                                    \
    void wf_k_rmsnorm_fwd##SFX(const float *x, const float *gamma, float *y, float *saved,  \
                               int64_t m, int64_t h, float eps);                            \
    void wf_k_rmsnorm_bwd##SFX(const float *x, const float *gamma, const float *dy,         \
                               const float *saved, float *dx, float *dgamma, int64_t m,     \
                               int64_t h);                                                  \
    /* softmax over rows: x[M,N] -> y[M,N]; backward from y */                              \
    void wf_k_softmax_fwd##SFX(const float *x, float *y, int64_t m, int64_t n);             \
    void wf_k_softmax_bwd##SFX(const float *y, const float *dy, float *dx, int64_t m,       \
                               int64_t n);                                                  \
    /* q[B,S,A*D], k[B,S,Akv*D], v[B,S,Akv*D] -> out[B,S,A*D];                            \
     * saved: probabilities [B,A,S,S] (may be NULL in forward) */                           \
    void wf_k_attention_fwd##SFX(const wf_k_attn *at, const float *q, const float *k,       \
                                 const float *v, float *out, float *saved, float *ws);      \
    void wf_k_attention_bwd##SFX(const wf_k_attn *at, const float *q, const float *k,       \
                                 const float *v, const float *dout, const float *saved,     \
                                 float *dq, float *dk, float *dv, float *ws);               \
    /* ids[M] (int32, in [0,V)), table[V,H] -> y[M,H]; WF_INVAL names a bad id.           \
     * Backward: dtable[V,H] (rows of absent ids are zero); ids were checked. */           \
    wf_status wf_k_embedding_fwd##SFX(const int32_t *ids, const float *table, float *y,     \
                                      int64_t m, int64_t v, int64_t h);                     \
    void wf_k_embedding_bwd##SFX(const int32_t *ids, const float *dy, float *dtable,        \
                                 int64_t m, int64_t v, int64_t h);                          \
    /* x[B,S,A*D] -> y: in each head, pair (2i, 2i+1) at position s is rotated by         \
     * angle s * base^(-2i/D) (base 0 = 10000; D even). Backward rotates back. */          \
    void wf_k_rotary_fwd##SFX(const float *x, float *y, int64_t b, int64_t s,               \
                              int64_t heads, int64_t d, float base);                        \
    void wf_k_rotary_bwd##SFX(const float *dy, float *dx, int64_t b, int64_t s,             \
                              int64_t heads, int64_t d, float base);                        \
    /* logits[M,V], labels[M] (int32 in [0,V)) -> *loss = mean over rows of               \
     * logsumexp(row) - row[label]; saved: logsumexp[M]. WF_INVAL names a bad label.      \
     * Backward: dlogits = dloss * (softmax - onehot) / M. */                              \
    wf_status wf_k_cross_entropy_fwd##SFX(const float *logits, const int32_t *labels,       \
                                          float *loss, float *saved, int64_t m, int64_t v); \
    void wf_k_cross_entropy_bwd##SFX(const float *logits, const int32_t *labels,            \
                                     const float *saved, float dloss, float *dlogits,       \
                                     int64_t m, int64_t v);                                 \
    /* x[N,C,H,W], w[O,C/groups,KH,KW], bias[O] (may be NULL) -> y[N,O,Ho,Wo] */           \
    void wf_k_conv2d_fwd##SFX(const wf_k_conv_geom *g, const float *x, const float *w,      \
                              const float *bias, float *y, float *ws);                      \
    void wf_k_conv2d_bwd##SFX(const wf_k_conv_geom *g, const float *x, const float *w,      \
                              const float *dy, float *dx, float *dw, float *dbias,          \
                              float *ws);                                                   \
    /* x[N,C,H,W] -> y[N,C,Ho,Wo]. maxpool ignores padding (first maximum wins);         \
     * avgpool counts padding as zeros: always divides by KH*KW                            \
     * (count_include_pad = 1). */                                                          \
    void wf_k_maxpool_fwd##SFX(const wf_k_conv_geom *g, const float *x, float *y);          \
    void wf_k_maxpool_bwd##SFX(const wf_k_conv_geom *g, const float *x, const float *dy,    \
                               float *dx);                                                  \
    void wf_k_avgpool_fwd##SFX(const wf_k_conv_geom *g, const float *x, float *y);          \
    void wf_k_avgpool_bwd##SFX(const wf_k_conv_geom *g, const float *dy, float *dx);        \
    /* x[NC, HW] -> y[NC] (mean of each plane) */                                           \
    void wf_k_global_avgpool_fwd##SFX(const float *x, float *y, int64_t nc, int64_t hw);    \
    void wf_k_global_avgpool_bwd##SFX(const float *dy, float *dx, int64_t nc, int64_t hw);  \
    /* x[N,C,S] (S = product of spatial dims, 1 for x[N,C]), gamma[C], beta[C];            \
     * training mode: batch mean and biased variance over N and S; saved: mean[C],        \
     * rstd[C] */                                                                           \
    void wf_k_batchnorm_fwd##SFX(const float *x, const float *gamma, const float *beta,     \
                                 float *y, float *saved, int64_t n, int64_t c, int64_t s,   \
                                 float eps);                                                \
    void wf_k_batchnorm_bwd##SFX(const float *x, const float *gamma, const float *dy,       \
                                 const float *saved, float *dx, float *dgamma,              \
                                 float *dbeta, int64_t n, int64_t c, int64_t s);            \
    /* x of shape xshape[ndim] (ndim <= WF_K_MAX_DIMS) -> y with y.shape[i] = xshape[perm[i]]; backward takes     \
     * dy (shape of y) and writes dx (shape xshape) */                                      \
    void wf_k_transpose_fwd##SFX(const float *x, float *y, int ndim, const int64_t *xshape, \
                                 const int *perm);                                          \
    void wf_k_transpose_bwd##SFX(const float *dy, float *dx, int ndim,                      \
                                 const int64_t *xshape, const int *perm);                   \
    /* nx tensors xs[i] [outer, sizes[i], inner] -> y[outer, sum(sizes), inner].          \
     * Backward: dxs[i] may be NULL (skipped). */                                           \
    void wf_k_concat_fwd##SFX(const float *const *xs, int nx, const int64_t *sizes,         \
                              float *y, int64_t outer, int64_t inner);                      \
    void wf_k_concat_bwd##SFX(const float *dy, float *const *dxs, int nx,                   \
                              const int64_t *sizes, int64_t outer, int64_t inner);          \
    /* x[outer, sum(sizes), inner] -> ny tensors ys[i] [outer, sizes[i], inner].          \
     * Backward: dys[i] may be NULL (an unused output: its part of dx is zero). */         \
    void wf_k_split_fwd##SFX(const float *x, float *const *ys, int ny, const int64_t *sizes, \
                             int64_t outer, int64_t inner);                                 \
    void wf_k_split_bwd##SFX(const float *const *dys, float *dx, int ny,                    \
                             const int64_t *sizes, int64_t outer, int64_t inner);

WF_K_DECLARE()
WF_K_DECLARE(_ref)

/* ---- rows of a vocabulary shard (the vocabulary-parallel cross-entropy,
 * src/runtime/exec_spmd.c; one version for both paths) ---- */

/* max of x[0, n) (NaN when one is; -inf when n = 0) */
float wf_k_row_max(const float *x, int64_t n);
/* sum of exp(x[j] - c) over j < n, in the kernels' fixed order (VL partial
 * sums, as the cross-entropy's) */
float wf_k_row_expsum(const float *x, int64_t n, float c);
/* y[j] = c * exp(x[j] - sub) for j < n */
void wf_k_row_scaled_exp(const float *x, float *y, int64_t n, float sub, float c);

/* ---- sizes of saved and scratch buffers ------------------------------------- */

size_t wf_k_layernorm_saved_floats(int64_t m);     /* 2*M */
size_t wf_k_rmsnorm_saved_floats(int64_t m);       /* M */
size_t wf_k_cross_entropy_saved_floats(int64_t m); /* M */
size_t wf_k_batchnorm_saved_floats(int64_t c);     /* 2*C */
/* 2 * (C/groups)*KH*KW * Ho*Wo: one image's im2col matrix and its gradient
 * (forward uses the first half). */
size_t wf_k_conv2d_ws_floats(const wf_k_conv_geom *g);

/* ---- ops of imported ONNX models (kernels_ext.c; one version for both paths) ---- */

void wf_k_tanh_fwd(const float *x, float *y, int64_t n);
void wf_k_tanh_bwd(const float *y, const float *dy, float *dx, int64_t n);
/* y = min(max(alpha*x + beta, lo), hi) */
void wf_k_clip_fwd(const float *x, float *y, int64_t n, float alpha, float beta, float lo, float hi);
void wf_k_clip_bwd(const float *x, const float *dy, float *dx, int64_t n, float alpha, float beta,
                   float lo, float hi);
void wf_k_hardswish_fwd(const float *x, float *y, int64_t n);
void wf_k_hardswish_bwd(const float *x, const float *dy, float *dx, int64_t n);
void wf_k_cast_fwd(const int32_t *x, float *y, int64_t n);
/* x[xs] broadcast to y[ys] (numpy rules, ranks aligned on the right) */
void wf_k_expand_fwd(const float *x, float *y, int xnd, const int64_t *xs, int ynd, const int64_t *ys);
void wf_k_expand_bwd(const float *dy, float *dx, int xnd, const int64_t *xs, int ynd, const int64_t *ys);

/* ---- gating and shifted windows (kernels_gate.c; one version for both paths) ---- */

void wf_k_sigmoid_fwd(const float *x, float *y, int64_t n);
void wf_k_sigmoid_bwd(const float *y, const float *dy, float *dx, int64_t n);
/* x of rank nd with dims[] -> y rolled by shifts[] per dim (torch.roll); backward rolls back */
void wf_k_roll_fwd(const float *x, float *y, int nd, const int64_t *dims, const int64_t *shifts);
void wf_k_roll_bwd(const float *dy, float *dx, int nd, const int64_t *dims, const int64_t *shifts);


/* ---- mixtures of experts (kernels_moe.c; the naive versions, _ref, in kernels_ref.c) --- */
/* Scratch: router_bwd T*E floats; grouped_mlp 2*(2*C*G + 2*C*F) floats (G = 2F for SwiGLU, else F). */
void wf_k_router_fwd(const float *x, const float *w, float *weights, int32_t *experts, float *probs, int64_t T,
                     int64_t H, int64_t E, int64_t K, int sigmoid);
void wf_k_router_bwd(const float *x, const float *w, const float *probs, const float *dweights, float *dx, float *dw,
                     float *scratch, int64_t T, int64_t H, int64_t E, int64_t K, int sigmoid);
void wf_k_moe_slots(const int32_t *experts, int64_t T, int64_t K, int64_t E, int64_t C, int32_t *count, int32_t *slot);
void wf_k_moe_dispatch_fwd(const float *x, const int32_t *experts, const int32_t *slot, float *y, int64_t T,
                           int64_t K, int64_t E, int64_t C, int64_t H);
void wf_k_moe_dispatch_bwd(const float *dy, const int32_t *experts, const int32_t *slot, float *dx, int64_t T,
                           int64_t K, int64_t C, int64_t H);
void wf_k_moe_combine_fwd(const float *y, const float *weights, const int32_t *experts, const int32_t *slot,
                          float *out, int64_t T, int64_t K, int64_t C, int64_t H);
void wf_k_moe_combine_bwd(const float *y, const float *weights, const int32_t *experts, const int32_t *slot,
                          const float *dout, float *dy, float *dweights, int64_t T, int64_t K, int64_t E, int64_t C,
                          int64_t H);
void wf_k_grouped_mlp_fwd(const float *x, const float *w1, const float *w2, float *y, float *scratch, int64_t E,
                          int64_t C, int64_t H, int64_t F, int swiglu);
void wf_k_grouped_mlp_bwd(const float *x, const float *w1, const float *w2, const float *dy, float *dx, float *dw1,
                          float *dw2, float *scratch, int64_t E, int64_t C, int64_t H, int64_t F, int swiglu);

void wf_k_router_fwd_ref(const float *x, const float *w, float *weights, int32_t *experts, float *probs, int64_t T,
                         int64_t H, int64_t E, int64_t K, int sigmoid);
void wf_k_router_bwd_ref(const float *x, const float *w, const float *probs, const float *dweights, float *dx,
                         float *dw, float *scratch, int64_t T, int64_t H, int64_t E, int64_t K, int sigmoid);
void wf_k_moe_slots_ref(const int32_t *experts, int64_t T, int64_t K, int64_t E, int64_t C, int32_t *count,
                        int32_t *slot);
void wf_k_moe_dispatch_fwd_ref(const float *x, const int32_t *experts, const int32_t *slot, float *y, int64_t T,
                               int64_t K, int64_t E, int64_t C, int64_t H);
void wf_k_moe_dispatch_bwd_ref(const float *dy, const int32_t *experts, const int32_t *slot, float *dx, int64_t T,
                               int64_t K, int64_t C, int64_t H);
void wf_k_moe_combine_fwd_ref(const float *y, const float *weights, const int32_t *experts, const int32_t *slot,
                              float *out, int64_t T, int64_t K, int64_t C, int64_t H);
void wf_k_moe_combine_bwd_ref(const float *y, const float *weights, const int32_t *experts, const int32_t *slot,
                              const float *dout, float *dy, float *dweights, int64_t T, int64_t K, int64_t E, int64_t C,
                              int64_t H);
void wf_k_grouped_mlp_fwd_ref(const float *x, const float *w1, const float *w2, float *y, float *scratch, int64_t E,
                              int64_t C, int64_t H, int64_t F, int swiglu);
void wf_k_grouped_mlp_bwd_ref(const float *x, const float *w1, const float *w2, const float *dy, float *dx, float *dw1,
                              float *dw2, float *scratch, int64_t E, int64_t C, int64_t H, int64_t F, int swiglu);

#endif
