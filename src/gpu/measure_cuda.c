/* weft gpu: the measurements, through the CUDA runtime, cuBLASLt and NCCL.
 * The only file of weft that includes CUDA headers; built when CMake finds
 * the toolkit (WEFT_CUDA), NCCL parts when it finds NCCL (WEFT_HAVE_NCCL).
 *
 * What it measures and how (docs/cluster-format.md, "Calibration on GPUs"):
 *  - matrix products (wf_gpu_shapes) with cublasLtMatmul, A transposed ("TN",
 *    the layout FP8 requires, used for every dtype), fp32 accumulation,
 *    alpha 1, beta 0, the heuristic's first algorithm with a 32 MiB
 *    workspace, on uniform random data in [-1, 1]; 3 warm-ups, then the
 *    median of 7 trials of back-to-back launches, each trial at least 2 ms;
 *  - a device-to-device cudaMemcpyAsync of 1 GiB (its reads + writes over
 *    the time is the memory bandwidth), and the time per launch of a tiny
 *    product back to back (the launch floor);
 *  - cudaMemGetInfo, and the largest single cudaMalloc that succeeds;
 *  - NCCL collectives as nccl-tests times them (src/common.cu at a0b82b2:
 *    wall clock over back-to-back iterations after a warm-up, divided by the
 *    iterations, averaged over the ranks; sizes and busBw factors of
 *    include/weft/cluster_measured.h).
 * Attention is not measured: cuDNN's fused attention is reachable from C
 * only through its backend graph API (the frontend is C++), not done here. */
#include "weft/gpu.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#ifdef WEFT_HAVE_NCCL
#include <nccl.h>
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORKSPACE_BYTES ((size_t)32 << 20)

static wf_status cuda_fail(cudaError_t e, const char *what)
{
    return wf_errorf(WF_IO, "--gpu: %s: %s", what, cudaGetErrorString(e));
}

static wf_status lt_fail(cublasStatus_t s, const char *what)
{
    return wf_errorf(WF_IO, "--gpu: %s: %s", what, cublasLtGetStatusString(s));
}

int wf_gpu_built(void)
{
    return 1;
}

int wf_gpu_built_nccl(void)
{
#ifdef WEFT_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

wf_status wf_gpu_probe(int *ndevices)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    *ndevices = 0;
    if (e != cudaSuccess)
        return wf_errorf(WF_INVAL, "--gpu: no usable GPU: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    if (n < 1)
        return wf_errorf(WF_INVAL, "--gpu: no usable GPU: cudaGetDeviceCount found 0 devices");
    *ndevices = n;
    return WF_OK;
}

/* ---- timing --------------------------------------------------------------------- */

typedef wf_status (*launch_fn)(void *ctx);

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median time of one launch: 3 warm-ups, then `trials` trials of `inner`
 * back-to-back launches between two events, inner chosen so a trial lasts
 * at least min_trial_s. */
static wf_status time_median(launch_fn run, void *ctx, cudaStream_t s, int quick, double min_trial_s, double *out_s)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaError_t e;
    wf_status st = WF_OK;
    if ((e = cudaEventCreate(&e0)) != cudaSuccess || (e = cudaEventCreate(&e1)) != cudaSuccess) {
        st = cuda_fail(e, "cudaEventCreate");
        goto done;
    }
    for (int i = 0; i < 3 && st == WF_OK; i++)
        st = run(ctx);
    float ms = 0;
    if (st != WF_OK)
        goto done;
    cudaEventRecord(e0, s);
    if ((st = run(ctx)) != WF_OK)
        goto done;
    cudaEventRecord(e1, s);
    if ((e = cudaEventSynchronize(e1)) != cudaSuccess || (e = cudaEventElapsedTime(&ms, e0, e1)) != cudaSuccess) {
        st = cuda_fail(e, "timing a warm-up");
        goto done;
    }
    double one = ms > 0 ? ms * 1e-3 : 1e-6;
    int inner = (int)ceil(min_trial_s / one);
    inner = inner < 1 ? 1 : inner > 2000 ? 2000 : inner;
    int trials = quick ? 3 : 7;
    double v[7];
    for (int t = 0; t < trials; t++) {
        cudaEventRecord(e0, s);
        for (int i = 0; i < inner && st == WF_OK; i++)
            st = run(ctx);
        if (st != WF_OK)
            goto done;
        cudaEventRecord(e1, s);
        if ((e = cudaEventSynchronize(e1)) != cudaSuccess ||
            (e = cudaEventElapsedTime(&ms, e0, e1)) != cudaSuccess) {
            st = cuda_fail(e, "timing a trial");
            goto done;
        }
        v[t] = ms * 1e-3 / inner;
    }
    qsort(v, (size_t)trials, sizeof v[0], cmp_double);
    *out_s = v[trials / 2];
done:
    if (e1)
        cudaEventDestroy(e1);
    if (e0)
        cudaEventDestroy(e0);
    return st;
}

/* ---- data ------------------------------------------------------------------------ */

static uint64_t next_random(uint64_t *x)
{
    /* splitmix64 */
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* One element of uniform(-1, 1) in the dtype's encoding (bf16 by truncation,
 * fp16 and E4M3 by truncation with tiny values flushed to zero). */
static void encode(float x, wf_mdtype t, unsigned char *p)
{
    uint32_t u = float_bits(x), sign = u >> 31;
    int e = (int)((u >> 23) & 0xff) - 127;
    uint32_t man = u & 0x7fffff;
    switch (t) {
    case WF_MDT_FP32:
    case WF_MDT_TF32:
        memcpy(p, &u, 4);
        break;
    case WF_MDT_BF16: {
        uint16_t h = (uint16_t)(u >> 16);
        memcpy(p, &h, 2);
        break;
    }
    case WF_MDT_FP16: {
        uint16_t h = (uint16_t)(sign << 15);
        if (e >= -14)
            h |= (uint16_t)(((uint32_t)(e + 15) << 10) | (man >> 13));
        memcpy(p, &h, 2);
        break;
    }
    case WF_MDT_FP8:
        *p = (unsigned char)(sign << 7);
        if (e >= -6)
            *p |= (unsigned char)(((uint32_t)(e + 7) << 3) | (man >> 20));
        break;
    case WF_MDT_COUNT:
        break;
    }
}

/* Fills `bytes` of device memory with random elements of dtype t, from a
 * 16 MiB host block copied over and over. */
static wf_status fill(void *dev, size_t bytes, wf_mdtype t, uint64_t seed)
{
    const size_t block = (size_t)16 << 20;
    unsigned char *h = malloc(block);
    if (!h)
        return wf_errorf(WF_NOMEM, "--gpu: out of host memory");
    size_t es = (size_t)wf_mdtype_in_bytes(t);
    for (size_t i = 0; i + es <= block; i += es) {
        float x = (float)((double)(next_random(&seed) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
        encode(x, t, h + i);
    }
    wf_status st = WF_OK;
    for (size_t off = 0; off < bytes && st == WF_OK; off += block) {
        size_t n = bytes - off < block ? bytes - off : block;
        cudaError_t e = cudaMemcpy((unsigned char *)dev + off, h, n, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            st = cuda_fail(e, "filling device memory");
    }
    free(h);
    return st;
}

/* ---- matrix products -------------------------------------------------------------- */

typedef struct {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *a, *b, *c, *ws;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    float alpha, beta;
} gemm_ctx;

static wf_status gemm_launch(void *p)
{
    gemm_ctx *g = p;
    cublasStatus_t s = cublasLtMatmul(g->lt, g->op, &g->alpha, g->a, g->la, g->b, g->lb, &g->beta, g->c, g->lc, g->c,
                                      g->lc, &g->algo, g->ws, WORKSPACE_BYTES, g->stream);
    return s == CUBLAS_STATUS_SUCCESS ? WF_OK : lt_fail(s, "cublasLtMatmul");
}

static void gemm_free_descs(gemm_ctx *g)
{
    if (g->la)
        cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb)
        cublasLtMatrixLayoutDestroy(g->lb);
    if (g->lc)
        cublasLtMatrixLayoutDestroy(g->lc);
    if (g->op)
        cublasLtMatmulDescDestroy(g->op);
    g->la = g->lb = g->lc = NULL;
    g->op = NULL;
}

/* Sets up C[M,N] (column-major, ld M) = op(A) B with A stored K x M (ld K,
 * transposed) and B stored K x N (ld K). *found = 0 when cuBLASLt has no
 * algorithm for it. */
static wf_status gemm_setup(gemm_ctx *g, const wf_gpu_shape *s, int *found)
{
    static const struct {
        cudaDataType_t ab, c;
        cublasComputeType_t compute;
    } TYPES[WF_MDT_COUNT] = {
        [WF_MDT_FP32] = {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F},
        [WF_MDT_TF32] = {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
        [WF_MDT_BF16] = {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F},
        [WF_MDT_FP16] = {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F},
        [WF_MDT_FP8] = {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F},
    };
    cublasStatus_t r;
    *found = 0;
    g->alpha = 1;
    g->beta = 0;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    uint64_t m = (uint64_t)s->m, n = (uint64_t)s->n, k = (uint64_t)s->k;
    if ((r = cublasLtMatmulDescCreate(&g->op, TYPES[s->dtype].compute, CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS ||
        (r = cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) !=
            CUBLAS_STATUS_SUCCESS ||
        (r = cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) !=
            CUBLAS_STATUS_SUCCESS ||
        (r = cublasLtMatrixLayoutCreate(&g->la, TYPES[s->dtype].ab, k, m, (int64_t)k)) != CUBLAS_STATUS_SUCCESS ||
        (r = cublasLtMatrixLayoutCreate(&g->lb, TYPES[s->dtype].ab, k, n, (int64_t)k)) != CUBLAS_STATUS_SUCCESS ||
        (r = cublasLtMatrixLayoutCreate(&g->lc, TYPES[s->dtype].c, m, n, (int64_t)m)) != CUBLAS_STATUS_SUCCESS)
        return lt_fail(r, "setting up a matrix product");
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws = WORKSPACE_BYTES;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    memset(&res, 0, sizeof res);
    if ((r = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS ||
        (r = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) !=
            CUBLAS_STATUS_SUCCESS) {
        if (pref)
            cublasLtMatmulPreferenceDestroy(pref);
        return lt_fail(r, "cublasLtMatmulPreference");
    }
    r = cublasLtMatmulAlgoGetHeuristic(g->lt, g->op, g->la, g->lb, g->lc, g->lc, pref, 1, &res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (r == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
        g->algo = res.algo;
        *found = 1;
    }
    return WF_OK;
}

/* The largest A (which 0), B (1) or C (2) of the shapes of dtype t (all
 * dtypes: WF_MDT_COUNT). */
static size_t max_bytes_of(const wf_gpu_shape *s, int n, int which, wf_mdtype t)
{
    size_t best = 0;
    for (int i = 0; i < n; i++) {
        if (t != WF_MDT_COUNT && s[i].dtype != t)
            continue;
        double b = which == 0   ? (double)(s[i].m * s[i].k) * wf_mdtype_in_bytes(s[i].dtype)
                   : which == 1 ? (double)(s[i].k * s[i].n) * wf_mdtype_in_bytes(s[i].dtype)
                                : (double)(s[i].m * s[i].n) * wf_mdtype_out_bytes(s[i].dtype);
        if ((size_t)b > best)
            best = (size_t)b;
    }
    return best;
}

static size_t max_bytes(const wf_gpu_shape *s, int n, int which)
{
    return max_bytes_of(s, n, which, WF_MDT_COUNT);
}

static wf_status measure_products(const wf_gpu_opts *o, gemm_ctx *g, const wf_gpu_shape *shapes, int nshapes,
                                  wf_cluster_measured *m)
{
    wf_status st = WF_OK;
    wf_mdtype filled = WF_MDT_COUNT;
    for (int i = 0; i < nshapes && st == WF_OK; i++) {
        const wf_gpu_shape *s = &shapes[i];
        /* A and B get random elements of this dtype, as far as its products
         * reach (C is written); tf32 reads fp32 data. */
        wf_mdtype enc = s->dtype == WF_MDT_TF32 ? WF_MDT_FP32 : s->dtype;
        if (enc != filled) {
            size_t na = 0, nb = 0;
            for (int t = 0; t < WF_MDT_COUNT; t++)
                if (t == (int)s->dtype || (enc == WF_MDT_FP32 && (t == WF_MDT_FP32 || t == WF_MDT_TF32))) {
                    size_t x = max_bytes_of(shapes, nshapes, 0, (wf_mdtype)t);
                    size_t y = max_bytes_of(shapes, nshapes, 1, (wf_mdtype)t);
                    na = x > na ? x : na;
                    nb = y > nb ? y : nb;
                }
            if ((st = fill(g->a, na, enc, 1 + (uint64_t)enc)) != WF_OK ||
                (st = fill(g->b, nb, enc, 101 + (uint64_t)enc)) != WF_OK)
                break;
            filled = enc;
        }
        int found = 0;
        if ((st = gemm_setup(g, s, &found)) == WF_OK && found) {
            double t = 0;
            st = time_median(gemm_launch, g, g->stream, o->quick, o->quick ? 2e-4 : 2e-3, &t);
            if (st == WF_OK && m->nkernels < WF_MEASURED_MAX_KERNELS)
                m->kernels[m->nkernels++] = (wf_kernel_point){s->m, s->n, s->k, s->dtype, t};
        } else if (st == WF_OK) {
            fprintf(stderr, "--gpu: cuBLASLt has no algorithm for %s %lldx%lldx%lld; not measured\n",
                    wf_mdtype_name(s->dtype), (long long)s->m, (long long)s->n, (long long)s->k);
        }
        gemm_free_descs(g);
    }
    return st;
}

/* ---- copy, launch, capacity --------------------------------------------------------- */

typedef struct {
    void *dst, *src;
    size_t bytes;
    cudaStream_t stream;
} copy_ctx;

static wf_status copy_launch(void *p)
{
    copy_ctx *c = p;
    cudaError_t e = cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, c->stream);
    return e == cudaSuccess ? WF_OK : cuda_fail(e, "cudaMemcpyAsync");
}

static wf_status measure_capacity(wf_cluster_measured *m)
{
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaMemGetInfo");
    m->mem_total_bytes = (double)total_b;
    m->mem_free_bytes = (double)free_b;
    /* The largest single allocation: from the free bytes down by 64 MiB. */
    const size_t step = (size_t)64 << 20;
    for (size_t want = free_b; want > step; want -= step) {
        void *p = NULL;
        if (cudaMalloc(&p, want) == cudaSuccess) {
            cudaFree(p);
            m->mem_alloc_bytes = (double)want;
            break;
        }
        (void)cudaGetLastError(); /* clear the allocation failure */
    }
    if (!(m->mem_alloc_bytes > 0))
        return wf_errorf(WF_IO, "--gpu: no allocation of more than 64 MiB succeeded (%.0f bytes free)",
                         (double)free_b);
    return WF_OK;
}

static void version_string(char *buf, size_t cap, int v, int major_div)
{
    /* CUDA: 1000 major + 10 minor; cuBLASLt and NCCL: 10000 major + 100 minor + patch. */
    if (v <= 0)
        snprintf(buf, cap, "%s", "none");
    else if (major_div == 1000)
        snprintf(buf, cap, "%d.%d", v / 1000, (v % 1000) / 10);
    else
        snprintf(buf, cap, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
}

wf_status wf_gpu_measure_device(const wf_gpu_opts *o, const wf_gpu_world *w, wf_cluster_measured *m)
{
    int ndev = 0;
    wf_status st = wf_gpu_probe(&ndev);
    if (st != WF_OK)
        return st;
    memset(m, 0, sizeof *m);
    const int dev = w->local_rank % ndev;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaSetDevice");
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
        return cuda_fail(e, "cudaGetDeviceProperties");
    snprintf(m->device, sizeof m->device, "%.63s", prop.name);
    m->cc_major = prop.major;
    m->cc_minor = prop.minor;
    m->sms = prop.multiProcessorCount;
    m->devices = w->nranks;
    m->nodes = w->nodes;
    m->devices_per_node = w->ranks_per_node;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(m->date, sizeof m->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int v = 0;
    cudaRuntimeGetVersion(&v);
    version_string(m->cuda_runtime, sizeof m->cuda_runtime, v, 1000);
    v = 0;
    cudaDriverGetVersion(&v);
    version_string(m->cuda_driver, sizeof m->cuda_driver, v, 1000);
    version_string(m->cublaslt, sizeof m->cublaslt, (int)cublasLtGetVersion(), 10000);
#ifdef WEFT_HAVE_NCCL
    v = 0;
    ncclGetVersion(&v);
    version_string(m->nccl, sizeof m->nccl, v, 10000);
#endif
    snprintf(m->attention_note, sizeof m->attention_note, "%s",
             "not measured: cuDNN fused attention is reachable from C only through its backend graph API; "
             "the profile's attention model is kept");

    wf_gpu_shape *shapes = malloc(sizeof *shapes * WF_MEASURED_MAX_KERNELS);
    if (!shapes)
        return wf_errorf(WF_NOMEM, "--gpu: out of memory");
    int nshapes = wf_gpu_shapes(o->quick, m->cc_major, m->cc_minor, shapes, WF_MEASURED_MAX_KERNELS);
    if (nshapes > WF_MEASURED_MAX_KERNELS)
        nshapes = WF_MEASURED_MAX_KERNELS;
    gemm_ctx g;
    memset(&g, 0, sizeof g);
    copy_ctx c = {0};
    cublasStatus_t r = cublasLtCreate(&g.lt);
    if (r != CUBLAS_STATUS_SUCCESS) {
        free(shapes);
        return lt_fail(r, "cublasLtCreate");
    }
    if ((e = cudaStreamCreate(&g.stream)) != cudaSuccess ||
        (e = cudaMalloc(&g.a, max_bytes(shapes, nshapes, 0))) != cudaSuccess ||
        (e = cudaMalloc(&g.b, max_bytes(shapes, nshapes, 1))) != cudaSuccess ||
        (e = cudaMalloc(&g.c, max_bytes(shapes, nshapes, 2))) != cudaSuccess ||
        (e = cudaMalloc(&g.ws, WORKSPACE_BYTES)) != cudaSuccess) {
        st = cuda_fail(e, "allocating the matrices");
        goto done;
    }
    if ((st = measure_products(o, &g, shapes, nshapes, m)) != WF_OK)
        goto done;
    /* The launch floor: a 64x64x64 bf16 product back to back. */
    {
        wf_gpu_shape tiny = {64, 64, 64, WF_MDT_BF16};
        int found = 0;
        if ((st = fill(g.a, 64 * 64 * 2, WF_MDT_BF16, 7)) != WF_OK || (st = fill(g.b, 64 * 64 * 2, WF_MDT_BF16, 8)) != WF_OK ||
            (st = gemm_setup(&g, &tiny, &found)) != WF_OK)
            goto done;
        if (!found) {
            st = wf_errorf(WF_IO, "--gpu: cuBLASLt has no algorithm for a 64x64x64 bf16 product");
            goto done;
        }
        st = time_median(gemm_launch, &g, g.stream, o->quick, 2e-3, &m->launch_s);
        gemm_free_descs(&g);
        if (st != WF_OK)
            goto done;
    }
    cudaFree(g.a);
    cudaFree(g.b);
    cudaFree(g.c);
    g.a = g.b = g.c = NULL;
    /* Device-to-device copy. */
    c.bytes = o->quick ? (size_t)64 << 20 : (size_t)1 << 30;
    c.stream = g.stream;
    if ((e = cudaMalloc(&c.src, c.bytes)) != cudaSuccess || (e = cudaMalloc(&c.dst, c.bytes)) != cudaSuccess) {
        st = cuda_fail(e, "allocating the copy buffers");
        goto done;
    }
    if ((st = fill(c.src, c.bytes, WF_MDT_FP32, 11)) != WF_OK)
        goto done;
    m->copy_bytes = (double)c.bytes;
    if ((st = time_median(copy_launch, &c, c.stream, o->quick, o->quick ? 2e-4 : 2e-3, &m->copy_s)) != WF_OK)
        goto done;
    cudaFree(c.src);
    cudaFree(c.dst);
    cudaFree(g.ws);
    c.src = c.dst = g.ws = NULL;
    st = measure_capacity(m);
done:
    gemm_free_descs(&g);
    if (c.src)
        cudaFree(c.src);
    if (c.dst)
        cudaFree(c.dst);
    if (g.a)
        cudaFree(g.a);
    if (g.b)
        cudaFree(g.b);
    if (g.c)
        cudaFree(g.c);
    if (g.ws)
        cudaFree(g.ws);
    if (g.stream)
        cudaStreamDestroy(g.stream);
    cublasLtDestroy(g.lt);
    free(shapes);
    return st;
}

/* ---- collectives -------------------------------------------------------------------- */

#ifndef WEFT_HAVE_NCCL

wf_status wf_gpu_comm_id(unsigned char id[WF_GPU_ID_BYTES])
{
    memset(id, 0, WF_GPU_ID_BYTES);
    return WF_OK;
}

wf_status wf_gpu_measure_links(const wf_gpu_opts *o, const wf_gpu_world *w, const unsigned char id[WF_GPU_ID_BYTES],
                               wf_cluster_measured *m)
{
    /* Without NCCL nothing is measured and the device points stay this
     * rank's (the caller writes rank 0's). */
    return WF_OK;
}

#else

static wf_status nccl_fail(ncclResult_t r, const char *what)
{
    return wf_errorf(WF_IO, "--gpu: %s: %s", what, ncclGetErrorString(r));
}

wf_status wf_gpu_comm_id(unsigned char id[WF_GPU_ID_BYTES])
{
    ncclUniqueId uid;
    ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess)
        return nccl_fail(r, "ncclGetUniqueId");
    memcpy(id, uid.internal, WF_GPU_ID_BYTES);
    return WF_OK;
}

typedef struct {
    int n;                 /* communicators this process drives */
    ncclComm_t *comm;      /* (n) */
    int *dev;              /* (n) device of each */
    cudaStream_t *stream;  /* (n) */
    void **send, **recv;   /* (n) buffers of max_bytes */
} local_set;

/* Enqueues one collective on communicator c (rank r of p), nccl-tests' way:
 * bytes is the full vector (see wf_mcoll_busbw_factor). */
static ncclResult_t enqueue(wf_mcoll op, ncclComm_t c, int r, int p, void *s, void *d, size_t bytes,
                            cudaStream_t st)
{
    size_t count = bytes / 4, shard = count / (size_t)p;
    ncclResult_t res = ncclSuccess, end = ncclSuccess;
    switch (op) {
    case WF_MCOLL_ALLREDUCE:
        return ncclAllReduce(s, d, count, ncclFloat, ncclSum, c, st);
    case WF_MCOLL_REDUCE_SCATTER:
        return ncclReduceScatter(s, d, shard, ncclFloat, ncclSum, c, st);
    case WF_MCOLL_ALLGATHER:
        return ncclAllGather(s, d, shard, ncclFloat, c, st);
    case WF_MCOLL_ALLTOALL:
        if ((res = ncclGroupStart()) != ncclSuccess)
            return res;
        for (int q = 0; q < p && res == ncclSuccess; q++) {
            res = ncclSend((char *)s + (size_t)q * shard * 4, shard, ncclFloat, q, c, st);
            if (res == ncclSuccess)
                res = ncclRecv((char *)d + (size_t)q * shard * 4, shard, ncclFloat, q, c, st);
        }
        end = ncclGroupEnd();
        return res != ncclSuccess ? res : end;
    case WF_MCOLL_SENDRECV:
        if ((res = ncclGroupStart()) != ncclSuccess)
            return res;
        res = ncclSend(s, count, ncclFloat, (r + 1) % p, c, st);
        if (res == ncclSuccess)
            res = ncclRecv(d, count, ncclFloat, (r + p - 1) % p, c, st);
        end = ncclGroupEnd();
        return res != ncclSuccess ? res : end;
    case WF_MCOLL_COUNT:
        break;
    }
    return ncclInvalidArgument;
}

static wf_status run_group(const local_set *ls, ncclComm_t *comms, wf_mcoll op, int p, size_t bytes)
{
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < ls->n && r == ncclSuccess; i++) {
        int rank = 0;
        ncclCommUserRank(comms[i], &rank);
        r = enqueue(op, comms[i], rank, p, ls->send[i], ls->recv[i], bytes, ls->stream[i]);
    }
    ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess || end != ncclSuccess)
        return nccl_fail(r != ncclSuccess ? r : end, wf_mcoll_name(op));
    return WF_OK;
}

static wf_status sync_all(const local_set *ls)
{
    for (int i = 0; i < ls->n; i++) {
        cudaSetDevice(ls->dev[i]);
        cudaError_t e = cudaStreamSynchronize(ls->stream[i]);
        if (e != cudaSuccess)
            return cuda_fail(e, "cudaStreamSynchronize");
    }
    return WF_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One scope: every op over every size on `comms` (p ranks each). */
static wf_status measure_scope(const wf_gpu_opts *o, const local_set *ls, ncclComm_t *comms, int p,
                               wf_mscope scope, wf_cluster_measured *m)
{
    double sizes[32];
    int nsizes = wf_gpu_coll_sizes(o->quick, sizes, 32);
    for (int op = 0; op < WF_MCOLL_COUNT; op++)
        for (int i = 0; i < nsizes; i++) {
            /* Round to whole floats per rank, as nccl-tests' counts are. */
            int shard_op = op == WF_MCOLL_REDUCE_SCATTER || op == WF_MCOLL_ALLGATHER || op == WF_MCOLL_ALLTOALL;
            size_t unit = shard_op ? 4 * (size_t)p : 4;
            size_t bytes = (size_t)sizes[i] / unit * unit;
            if (bytes < unit)
                bytes = unit;
            int iters = o->quick ? 5 : bytes <= ((size_t)1 << 20) ? 50 : bytes <= ((size_t)32 << 20) ? 20 : 5;
            wf_status st;
            for (int w = 0; w < 2; w++)
                if ((st = run_group(ls, comms, (wf_mcoll)op, p, bytes)) != WF_OK)
                    return st;
            if ((st = sync_all(ls)) != WF_OK)
                return st;
            double t0 = now_s();
            for (int it = 0; it < iters; it++)
                if ((st = run_group(ls, comms, (wf_mcoll)op, p, bytes)) != WF_OK)
                    return st;
            if ((st = sync_all(ls)) != WF_OK)
                return st;
            double t = (now_s() - t0) / iters;
            if (m->ncoll < WF_MEASURED_MAX_COLL)
                m->coll[m->ncoll++] = (wf_coll_point){(wf_mcoll)op, scope, p, (double)bytes, t};
        }
    return WF_OK;
}

/* In place over the world communicators: v[0..n) reduced with `op` (each
 * local communicator contributes the same host values). */
static wf_status reduce_doubles(const local_set *ls, double *v, int n, ncclRedOp_t op)
{
    size_t bytes = sizeof(double) * (size_t)n;
    cudaError_t e;
    for (int i = 0; i < ls->n; i++) {
        cudaSetDevice(ls->dev[i]);
        if ((e = cudaMemcpy(ls->send[i], v, bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
            return cuda_fail(e, "cudaMemcpy");
    }
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < ls->n && r == ncclSuccess; i++)
        r = ncclAllReduce(ls->send[i], ls->recv[i], (size_t)n, ncclDouble, op, ls->comm[i], ls->stream[i]);
    ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess || end != ncclSuccess)
        return nccl_fail(r != ncclSuccess ? r : end, "reducing the measurements");
    wf_status st = sync_all(ls);
    if (st != WF_OK)
        return st;
    cudaSetDevice(ls->dev[0]);
    if ((e = cudaMemcpy(v, ls->recv[0], bytes, cudaMemcpyDeviceToHost)) != cudaSuccess)
        return cuda_fail(e, "cudaMemcpy");
    return WF_OK;
}

/* Every rank ends with the same device points: the slowest time of each, the
 * smallest memory. */
static wf_status reduce_device_points(const local_set *ls, wf_cluster_measured *m)
{
    int n = m->nkernels;
    double *v = malloc(sizeof(double) * (size_t)(n + 4));
    if (!v)
        return wf_errorf(WF_NOMEM, "--gpu: out of memory");
    v[0] = n;
    v[1] = -n;
    v[2] = m->copy_s;
    v[3] = m->launch_s;
    for (int i = 0; i < n; i++)
        v[4 + i] = m->kernels[i].seconds;
    wf_status st = reduce_doubles(ls, v, n + 4, ncclMax);
    if (st == WF_OK && (v[0] != n || -v[1] != n))
        st = wf_errorf(WF_INVAL, "--gpu: the ranks measured %g to %g products: mixed GPU kinds "
                                 "(a cluster file describes one)", -v[1], v[0]);
    if (st == WF_OK) {
        m->copy_s = v[2];
        m->launch_s = v[3];
        for (int i = 0; i < n; i++)
            m->kernels[i].seconds = v[4 + i];
        v[0] = m->mem_total_bytes;
        v[1] = m->mem_free_bytes;
        v[2] = m->mem_alloc_bytes;
        st = reduce_doubles(ls, v, 3, ncclMin);
        if (st == WF_OK) {
            m->mem_total_bytes = v[0];
            m->mem_free_bytes = v[1];
            m->mem_alloc_bytes = v[2];
        }
    }
    free(v);
    return st;
}

static wf_status average_times(const local_set *ls, wf_cluster_measured *m, int total)
{
    double v[WF_MEASURED_MAX_COLL];
    for (int i = 0; i < m->ncoll; i++)
        v[i] = m->coll[i].seconds;
    wf_status st = m->ncoll > 0 ? reduce_doubles(ls, v, m->ncoll, ncclSum) : WF_OK;
    for (int i = 0; st == WF_OK && i < m->ncoll; i++)
        m->coll[i].seconds = v[i] / total;
    return st;
}

wf_status wf_gpu_measure_links(const wf_gpu_opts *o, const wf_gpu_world *w, const unsigned char id[WF_GPU_ID_BYTES],
                               wf_cluster_measured *m)
{
    int ndev = 0;
    wf_status st = wf_gpu_probe(&ndev);
    if (st != WF_OK)
        return st;
    /* Without MPI this process drives the node's GPUs; under MPI one each. */
    const int nlocal = w->nranks > 1 ? 1 : (o->max_devices > 0 && o->max_devices < ndev ? o->max_devices : ndev);
    const int total = w->nranks * nlocal;
    m->devices = total;
    m->nodes = w->nodes;
    m->devices_per_node = w->nranks > 1 ? w->ranks_per_node : nlocal;
    if (total < 2)
        return WF_OK;
    ncclUniqueId uid;
    if (w->nranks > 1) {
        memcpy(uid.internal, id, WF_GPU_ID_BYTES);
    } else {
        ncclResult_t r0 = ncclGetUniqueId(&uid);
        if (r0 != ncclSuccess)
            return nccl_fail(r0, "ncclGetUniqueId");
    }
    local_set ls = {0};
    ls.n = nlocal;
    ncclComm_t node_comm = NULL;
    const size_t max_b = o->quick ? (size_t)16 << 20 : (size_t)256 << 20;
    ls.comm = calloc((size_t)nlocal, sizeof *ls.comm);
    ls.dev = calloc((size_t)nlocal, sizeof *ls.dev);
    ls.stream = calloc((size_t)nlocal, sizeof *ls.stream);
    ls.send = calloc((size_t)nlocal, sizeof *ls.send);
    ls.recv = calloc((size_t)nlocal, sizeof *ls.recv);
    if (!ls.comm || !ls.dev || !ls.stream || !ls.send || !ls.recv) {
        st = wf_errorf(WF_NOMEM, "--gpu: out of memory");
        goto done;
    }
    for (int i = 0; i < nlocal; i++) {
        ls.dev[i] = w->nranks > 1 ? w->local_rank % ndev : i;
        cudaError_t e;
        if ((e = cudaSetDevice(ls.dev[i])) != cudaSuccess || (e = cudaStreamCreate(&ls.stream[i])) != cudaSuccess ||
            (e = cudaMalloc(&ls.send[i], max_b)) != cudaSuccess || (e = cudaMalloc(&ls.recv[i], max_b)) != cudaSuccess ||
            (e = cudaMemset(ls.send[i], 0, max_b)) != cudaSuccess) {
            st = cuda_fail(e, "setting up the collective buffers");
            goto done;
        }
    }
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < nlocal && r == ncclSuccess; i++) {
        cudaSetDevice(ls.dev[i]);
        r = ncclCommInitRank(&ls.comm[i], total, uid, w->rank * nlocal + i);
    }
    ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess || end != ncclSuccess) {
        st = nccl_fail(r != ncclSuccess ? r : end, "ncclCommInitRank");
        goto done;
    }
    if (w->nodes > 1) {
        /* One communicator per node, for the level-0 points. */
        cudaSetDevice(ls.dev[0]);
        if ((r = ncclCommSplit(ls.comm[0], w->node, w->rank, &node_comm, NULL)) != ncclSuccess) {
            st = nccl_fail(r, "ncclCommSplit");
            goto done;
        }
        if (w->ranks_per_node > 1 && (st = measure_scope(o, &ls, &node_comm, w->ranks_per_node, WF_MSCOPE_NODE, m)) !=
                                         WF_OK)
            goto done;
        if ((st = measure_scope(o, &ls, ls.comm, total, WF_MSCOPE_JOB, m)) != WF_OK)
            goto done;
    } else if ((st = measure_scope(o, &ls, ls.comm, total, WF_MSCOPE_NODE, m)) != WF_OK) {
        goto done;
    }
    if ((st = average_times(&ls, m, total)) != WF_OK)
        goto done;
    if (w->nranks > 1)
        st = reduce_device_points(&ls, m);
done:
    if (node_comm)
        ncclCommDestroy(node_comm);
    for (int i = 0; i < nlocal && ls.comm && ls.dev; i++) {
        cudaSetDevice(ls.dev[i]);
        if (ls.comm[i])
            ncclCommDestroy(ls.comm[i]);
        if (ls.send && ls.send[i])
            cudaFree(ls.send[i]);
        if (ls.recv && ls.recv[i])
            cudaFree(ls.recv[i]);
        if (ls.stream && ls.stream[i])
            cudaStreamDestroy(ls.stream[i]);
    }
    free(ls.comm);
    free(ls.dev);
    free(ls.stream);
    free(ls.send);
    free(ls.recv);
    return st;
}

#endif /* WEFT_HAVE_NCCL */
