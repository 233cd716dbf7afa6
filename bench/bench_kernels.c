/* Benchmark of the runtime CPU kernels (prints numbers; not a test).
 *
 * 1. sgemm peak: C[1024,1024] = A[1024,1024] B[1024,1024] through
 *    wf_k_matmul_fwd (one cblas_sgemm), with 1 BLAS thread and with one per
 *    online CPU; best and median of several runs, in GFLOP/s.
 * 2. The mlp 1024-4096-4096-10 at batch 64: forward and backward of its three
 *    linear layers (x W + b), as the executor runs them: the first layer
 *    computes no input gradient (its input is data). Time per iteration,
 *    GFLOP/s and the share of the sgemm peak at the same thread count.
 * 3. For the record, two other heavy kernels at the zoo's sizes: causal
 *    attention of the small gpt (batch 8, seq 128, 4 heads of 64) and a 3x3
 *    conv2d of the small CNN (batch 64, 1->32 channels, 28x28, pad 1), forward
 *    plus backward.
 *
 * Usage: bench_kernels [repetitions] (default 5). */
#include "runtime/kernels-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_rand(int64_t n, uint64_t seed)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory for %lld floats\n", (long long)n);
        exit(2);
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = wf_k_rng_uniform(seed, (uint64_t)i) - 0.5f;
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double best_s, median_s;
} timing;

/* Runs fn(ctx) once to warm up, then reps times; best and median seconds. */
static timing time_it(void (*fn)(void *), void *ctx, int reps)
{
    double t[64];
    if (reps > 64)
        reps = 64;
    fn(ctx);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        fn(ctx);
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    return (timing){t[0], t[reps / 2]};
}

/* ---- sgemm ------------------------------------------------------------------ */

typedef struct {
    float *a, *b, *c;
    int64_t n;
} gemm_ctx;

static void run_gemm(void *p)
{
    gemm_ctx *g = p;
    wf_k_matmul_fwd(g->a, g->b, g->c, g->n, g->n, g->n, 0, 0);
}

/* ---- mlp linears -------------------------------------------------------------- */

#define MLP_LAYERS 3
static const int64_t MLP_DIMS[MLP_LAYERS + 1] = {1024, 4096, 4096, 10};
#define MLP_BATCH 64

typedef struct {
    float *act[MLP_LAYERS + 1];  /* act[l] [64, dims[l]]: input of layer l */
    float *dact[MLP_LAYERS + 1]; /* gradients of the activations */
    float *w[MLP_LAYERS], *b[MLP_LAYERS], *dw[MLP_LAYERS], *db[MLP_LAYERS];
} mlp_ctx;

static void run_mlp(void *p)
{
    mlp_ctx *m = p;
    for (int l = 0; l < MLP_LAYERS; l++)
        wf_k_linear_fwd(m->act[l], m->w[l], m->b[l], m->act[l + 1], MLP_BATCH, MLP_DIMS[l],
                        MLP_DIMS[l + 1]);
    for (int l = MLP_LAYERS - 1; l >= 0; l--)
        wf_k_linear_bwd(m->act[l], m->w[l], m->dact[l + 1], l > 0 ? m->dact[l] : NULL, m->dw[l],
                        m->db[l], MLP_BATCH, MLP_DIMS[l], MLP_DIMS[l + 1]);
}

static double mlp_flops(void)
{
    double f = 0;
    for (int l = 0; l < MLP_LAYERS; l++) {
        double mkn = 2.0 * MLP_BATCH * (double)MLP_DIMS[l] * (double)MLP_DIMS[l + 1];
        f += mkn /* forward */ + mkn /* dW */ + (l > 0 ? mkn : 0.0) /* dX */;
    }
    return f;
}

/* ---- attention and conv2d -------------------------------------------------------- */

typedef struct {
    wf_k_attn at;
    float *q, *k, *v, *o, *saved, *ws, *dq, *dk, *dv;
} attn_ctx;

static void run_attn(void *p)
{
    attn_ctx *a = p;
    wf_k_attention_fwd(&a->at, a->q, a->k, a->v, a->o, a->saved, a->ws);
    wf_k_attention_bwd(&a->at, a->q, a->k, a->v, a->o, a->saved, a->dq, a->dk, a->dv, a->ws);
}

typedef struct {
    wf_k_conv_geom g;
    float *x, *w, *b, *y, *ws, *dx, *dw, *db;
} conv_ctx;

static void run_conv(void *p)
{
    conv_ctx *c = p;
    wf_k_conv2d_fwd(&c->g, c->x, c->w, c->b, c->y, c->ws);
    wf_k_conv2d_bwd(&c->g, c->x, c->w, c->y, c->dx, c->dw, c->db, c->ws);
}

int main(int argc, char **argv)
{
    int reps = 5;
    if (argc > 1) {
        char *end;
        long r = strtol(argv[1], &end, 10);
        if (*end || r < 1 || r > 64) {
            fprintf(stderr, "bench_kernels: repetitions '%s' must be an integer in [1, 64]\n",
                    argv[1]);
            return 1;
        }
        reps = (int)r;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        ncpu = 1;
    printf("blas: %s\n", wf_k_blas_info());
    printf("cpus online: %ld, repetitions: %d (best and median reported)\n", ncpu, reps);

    const int64_t n = 1024;
    gemm_ctx g = {alloc_rand(n * n, 1), alloc_rand(n * n, 2), alloc_rand(n * n, 3), n};
    mlp_ctx m;
    memset(&m, 0, sizeof m);
    for (int l = 0; l <= MLP_LAYERS; l++) {
        m.act[l] = alloc_rand(MLP_BATCH * MLP_DIMS[l], 10 + (uint64_t)l);
        m.dact[l] = alloc_rand(MLP_BATCH * MLP_DIMS[l], 20 + (uint64_t)l);
    }
    for (int l = 0; l < MLP_LAYERS; l++) {
        m.w[l] = alloc_rand(MLP_DIMS[l] * MLP_DIMS[l + 1], 30 + (uint64_t)l);
        m.dw[l] = alloc_rand(MLP_DIMS[l] * MLP_DIMS[l + 1], 40 + (uint64_t)l);
        m.b[l] = alloc_rand(MLP_DIMS[l + 1], 50 + (uint64_t)l);
        m.db[l] = alloc_rand(MLP_DIMS[l + 1], 60 + (uint64_t)l);
    }
    attn_ctx a = {.at = {8, 128, 4, 4, 64, 1, 0.0f, 0.0f, 0, 0}};
    const int64_t nq = 8 * 128 * 256;
    a.q = alloc_rand(nq, 70);
    a.k = alloc_rand(nq, 71);
    a.v = alloc_rand(nq, 72);
    a.o = alloc_rand(nq, 73);
    a.dq = alloc_rand(nq, 74);
    a.dk = alloc_rand(nq, 75);
    a.dv = alloc_rand(nq, 76);
    a.saved = alloc_rand((int64_t)wf_k_attention_saved_floats(&a.at), 77);
    a.ws = alloc_rand((int64_t)wf_k_attention_ws_floats(&a.at), 78);
    /* attention FLOPs: forward QK^T and PV, backward four GEMMs of the same size */
    const double attn_flops = 6.0 * 2.0 * 8 * 4 * 128.0 * 128.0 * 64.0;
    conv_ctx c = {.g = {64, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 0, 0}};
    if (wf_k_conv_geom_check(&c.g, 0) != WF_OK) {
        fprintf(stderr, "bench_kernels: %s\n", wf_last_error());
        return 2;
    }
    c.x = alloc_rand(64 * 28 * 28, 80);
    c.dx = alloc_rand(64 * 28 * 28, 81);
    c.w = alloc_rand(32 * 9, 82);
    c.dw = alloc_rand(32 * 9, 83);
    c.b = alloc_rand(32, 84);
    c.db = alloc_rand(32, 85);
    c.y = alloc_rand(64 * 32 * 28 * 28, 86);
    c.ws = alloc_rand((int64_t)wf_k_conv2d_ws_floats(&c.g), 87);
    /* conv FLOPs: forward, dW and dX are each 2 * N*O*Ho*Wo * C*KH*KW */
    const double conv_flops = 3.0 * 2.0 * 64 * 32 * 28 * 28 * 9.0;

    int nthreads[2] = {1, (int)ncpu};
    for (int t = 0; t < (ncpu > 1 ? 2 : 1); t++) {
        if (wf_k_set_threads(nthreads[t]) != WF_OK)
            printf("note: %s\n", wf_last_error());
        timing tg = time_it(run_gemm, &g, reps);
        double gf = 2.0 * (double)n * n * n;
        double peak = gf / tg.best_s * 1e-9;
        printf("sgemm %lldx%lldx%lld threads=%d: best %.2f ms = %.1f GFLOP/s, median %.1f "
               "GFLOP/s\n",
               (long long)n, (long long)n, (long long)n, nthreads[t], tg.best_s * 1e3, peak,
               gf / tg.median_s * 1e-9);
        timing tm = time_it(run_mlp, &m, reps);
        double mf = mlp_flops(), mg = mf / tm.best_s * 1e-9;
        printf("mlp 1024-4096-4096-10 batch %d linear fwd+bwd threads=%d: best %.2f ms/iter "
               "(median %.2f), %.2f GFLOP/iter, %.1f GFLOP/s = %.0f%% of sgemm peak\n",
               MLP_BATCH, nthreads[t], tm.best_s * 1e3, tm.median_s * 1e3, mf * 1e-9, mg,
               100.0 * mg / peak);
        timing ta = time_it(run_attn, &a, reps);
        printf("attention B8 S128 A4 D64 causal fwd+bwd threads=%d: best %.2f ms, %.1f GFLOP/s "
               "(GEMM FLOPs)\n",
               nthreads[t], ta.best_s * 1e3, attn_flops / ta.best_s * 1e-9);
        timing tc = time_it(run_conv, &c, reps);
        printf("conv2d N64 1->32 28x28 k3 p1 fwd+bwd threads=%d: best %.2f ms, %.1f GFLOP/s\n",
               nthreads[t], tc.best_s * 1e3, conv_flops / tc.best_s * 1e-9);
    }

    free(g.a);
    free(g.b);
    free(g.c);
    for (int l = 0; l <= MLP_LAYERS; l++) {
        free(m.act[l]);
        free(m.dact[l]);
    }
    for (int l = 0; l < MLP_LAYERS; l++) {
        free(m.w[l]);
        free(m.dw[l]);
        free(m.b[l]);
        free(m.db[l]);
    }
    float *abufs[] = {a.q, a.k, a.v, a.o, a.dq, a.dk, a.dv, a.saved, a.ws};
    for (size_t i = 0; i < sizeof abufs / sizeof abufs[0]; i++)
        free(abufs[i]);
    float *cbufs[] = {c.x, c.dx, c.w, c.dw, c.b, c.db, c.y, c.ws};
    for (size_t i = 0; i < sizeof cbufs / sizeof cbufs[0]; i++)
        free(cbufs[i]);
    return 0;
}
