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
 * 4. The row and elementwise kernels of the small gpt (batch 8, seq 128, hidden
 *    256, vocab 2048) and the AdamW step of the mlp's 21M parameters, fast
 *    path against the reference kernel, in thread CPU time (a shared
 *    machine's other processes do not count), one BLAS thread: ns per
 *    element, the speedup, and AdamW's bandwidth at its 28 bytes per
 *    parameter.
 *
 * Usage: bench_kernels [repetitions] (default 5). */
#include "kernels/kernels-impl.h"
#include "weft/models.h"
#include "weft/runtime.h"

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

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best thread CPU time of fn(ctx) over reps runs after a warm-up. */
static double best_cpu(void (*fn)(void *), void *ctx, int reps)
{
    fn(ctx);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_s();
        fn(ctx);
        double t = cpu_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

/* ---- row and elementwise kernels (section 4) ------------------------------------- */

typedef struct {
    int ref;
    int64_t m, n;  /* rows, row length */
    float *x, *y, *dy, *dx, *g, *b, *dg, *db, *saved;
    int32_t *labels;
    wf_k_attn at;
    float *q, *k, *v, *o, *ws, *dq, *dk, *dv;
} row_ctx;

static void run_gelu_fwd(void *p)
{
    row_ctx *c = p;
    (c->ref ? wf_k_gelu_fwd_ref : wf_k_gelu_fwd)(c->x, c->y, c->m * c->n);
}

static void run_gelu_bwd(void *p)
{
    row_ctx *c = p;
    (c->ref ? wf_k_gelu_bwd_ref : wf_k_gelu_bwd)(c->x, c->dy, c->dx, c->m * c->n);
}

static void run_ln_fwd(void *p)
{
    row_ctx *c = p;
    (c->ref ? wf_k_layernorm_fwd_ref : wf_k_layernorm_fwd)(c->x, c->g, c->b, c->y, c->saved, c->m, c->n, 1e-5f);
}

static void run_ln_bwd(void *p)
{
    row_ctx *c = p;
    (c->ref ? wf_k_layernorm_bwd_ref : wf_k_layernorm_bwd)(c->x, c->g, c->dy, c->saved, c->dx, c->dg, c->db, c->m,
                                                           c->n);
}

static void run_softmax(void *p)
{
    row_ctx *c = p;
    (c->ref ? wf_k_softmax_fwd_ref : wf_k_softmax_fwd)(c->x, c->y, c->m, c->n);
    (c->ref ? wf_k_softmax_bwd_ref : wf_k_softmax_bwd)(c->y, c->dy, c->dx, c->m, c->n);
}

static void run_xent(void *p)
{
    row_ctx *c = p;
    float loss;
    (c->ref ? wf_k_cross_entropy_fwd_ref : wf_k_cross_entropy_fwd)(c->x, c->labels, &loss, c->saved, c->m, c->n);
    (c->ref ? wf_k_cross_entropy_bwd_ref : wf_k_cross_entropy_bwd)(c->x, c->labels, c->saved, 1.0f, c->dx, c->m, c->n);
}

static void run_attn_drop(void *p)
{
    row_ctx *c = p;
    (c->ref ? wf_k_attention_fwd_ref : wf_k_attention_fwd)(&c->at, c->q, c->k, c->v, c->o, c->saved, c->ws);
    (c->ref ? wf_k_attention_bwd_ref : wf_k_attention_bwd)(&c->at, c->q, c->k, c->v, c->o, c->saved, c->dq, c->dk,
                                                           c->dv, c->ws);
}

typedef struct {
    wf_exec *e;
    wf_optim *o;
    int64_t t;
} adam_ctx;

static void run_adam(void *p)
{
    adam_ctx *a = p;
    a->t++;
    for (int i = 0; i < wf_exec_nparams(a->e); i++)
        wf_optim_update(a->o, a->e, i, 1.0f, a->t);
}

static void row_kernels(int reps)
{
    enum { M = 1024, H = 256, F = 1024, V = 2048, SM = 4096, S = 128 };
    row_ctx c;
    memset(&c, 0, sizeof c);
    const int64_t big = (int64_t)M * V; /* the largest buffer: logits [1024, 2048] */
    c.x = alloc_rand(big, 90);
    c.y = alloc_rand(big, 91);
    c.dy = alloc_rand(big, 92);
    c.dx = alloc_rand(big, 93);
    c.g = alloc_rand(H, 94);
    c.b = alloc_rand(H, 95);
    c.dg = alloc_rand(H, 96);
    c.db = alloc_rand(H, 97);
    c.saved = alloc_rand(8 * 4 * 128 * 128, 98);
    c.labels = malloc(sizeof(int32_t) * M);
    for (int i = 0; i < M; i++)
        c.labels[i] = (int32_t)((i * 7919) % V);
    c.at = (wf_k_attn){8, S, 4, 4, 64, 1, 0.0f, 0.1f, 7, 0, 0, 0, NULL, NULL, 0, 0};
    const int64_t nq = 8 * S * 256;
    c.q = alloc_rand(nq, 100);
    c.k = alloc_rand(nq, 101);
    c.v = alloc_rand(nq, 102);
    c.o = alloc_rand(nq, 103);
    c.dq = alloc_rand(nq, 104);
    c.dk = alloc_rand(nq, 105);
    c.dv = alloc_rand(nq, 106);
    c.ws = alloc_rand((int64_t)wf_k_attention_ws_floats(&c.at), 107);
    struct {
        const char *name;
        void (*fn)(void *);
        int64_t m, n;
    } k[] = {
        {"gelu fwd [1024,1024]", run_gelu_fwd, M, F},
        {"gelu bwd [1024,1024]", run_gelu_bwd, M, F},
        {"layernorm fwd [1024,256]", run_ln_fwd, M, H},
        {"layernorm bwd [1024,256]", run_ln_bwd, M, H},
        {"softmax fwd+bwd [4096,128]", run_softmax, SM, S},
        {"cross-entropy fwd+bwd [1024,2048]", run_xent, M, V},
        {"attention p=0.1 fwd+bwd [8x4x128x128]", run_attn_drop, 8 * 4 * S, S},
    };
    printf("\ngpt row and elementwise kernels, thread CPU time, best of %d:\n", reps);
    printf("  %-38s %10s %10s %10s %8s\n", "kernel", "fast_ms", "ref_ms", "ns/elem", "speedup");
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        c.m = k[i].m;
        c.n = k[i].n;
        c.ref = 0;
        double tf = best_cpu(k[i].fn, &c, reps);
        c.ref = 1;
        double tr = best_cpu(k[i].fn, &c, reps < 3 ? reps : 3);
        printf("  %-38s %10.3f %10.3f %10.2f %7.1fx\n", k[i].name, tf * 1e3, tr * 1e3,
               tf * 1e9 / (double)(k[i].m * k[i].n), tr / tf);
    }
    float *bufs[] = {c.x, c.y, c.dy, c.dx, c.g, c.b, c.dg, c.db, c.saved, c.q, c.k, c.v, c.o, c.dq, c.dk, c.dv, c.ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(c.labels);

    /* AdamW over the mlp 1024-4096-4096-10's parameters, as the trainer runs it. */
    wf_model_config mc;
    wf_graph g;
    adam_ctx a = {NULL, NULL, 0};
    wf_exec_opts eo = {0, 1};
    wf_optim_config oc;
    wf_optim_defaults(WF_OPTIM_ADAMW, &oc);
    if (wf_model_lookup("mlp:sizes=1024-4096-4096-10", &mc) != WF_OK || wf_model_build(&mc, 1, &g) != WF_OK) {
        printf("  adamw: %s\n", wf_last_error());
        return;
    }
    wf_status st = wf_exec_create(&g, &eo, &a.e);
    wf_graph_free(&g);
    if (st == WF_OK)
        st = wf_optim_create(&oc, a.e, &a.o);
    if (st == WF_OK) {
        int64_t np = 0;
        for (int i = 0; i < wf_exec_nparams(a.e); i++)
            np += wf_exec_param_at(a.e, i)->numel;
        double t = best_cpu(run_adam, &a, reps);
        printf("  %-38s %10.3f %10s %10.2f   (%.1f GB/s at 28 bytes per parameter)\n", "adamw, 21M parameters",
               t * 1e3, "-", t * 1e9 / (double)np, 28.0 * (double)np / t / 1e9);
    } else {
        printf("  adamw: %s\n", wf_last_error());
    }
    wf_optim_free(a.o);
    wf_exec_free(a.e);
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
    printf("blas: %s (core %s)\n", wf_k_blas_info(), wf_k_blas_core());
    if (wf_k_blas_hint())
        printf("hint: %s\n", wf_k_blas_hint());
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

    wf_k_set_threads(1);
    row_kernels(reps);

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
