/* Tests of the runtime CPU kernels (src/kernels/kernels*.c).
 *
 * For every op: the fast kernel against the reference kernel on random inputs
 * (forward outputs and every gradient, max-abs error relative to the largest
 * reference value, ~1e-5), and the backward against central finite
 * differences of L = sum(dy * y) computed with the reference forward (eps
 * 1e-3, relative tolerance ~1e-2) for a sample of each input's elements.
 * The vectorized building blocks (exp, the optimizer's square root, GELU at
 * its extremes, NaN, every tail length of the 16-lane loops) against libm
 * and the reference. Op-specific checks: the causal mask really masks,
 * dropout replays by seed
 * and offset and preserves the mean, cross-entropy against a hand-computed
 * value, conv2d with groups and stride 2, avgpool's count_include_pad; MoE
 * routing by hand (ties to the lower expert, dropped choices beyond capacity). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/kernels-impl.h"
#include "weft/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers, random numbers, comparisons ---------------------------------------- */

#define MAX_BUFS 256
static void *g_bufs[MAX_BUFS];
static int g_nbufs;
static uint64_t g_rng_seed = 12345, g_rng_ctr;

static int release_bufs(void **state)
{
    (void)state;
    for (int i = 0; i < g_nbufs; i++)
        free(g_bufs[i]);
    g_nbufs = 0;
    return 0;
}

static void *track(void *p)
{
    assert_non_null(p);
    assert_true(g_nbufs < MAX_BUFS);
    g_bufs[g_nbufs++] = p;
    return p;
}

static float *fbuf(int64_t n) { return track(calloc((size_t)(n > 0 ? n : 1), sizeof(float))); }

static float urand(void) { return wf_k_rng_uniform(g_rng_seed, g_rng_ctr++); }

/* n uniform values in [-scale, scale). */
static float *rnd(int64_t n, float scale)
{
    float *p = fbuf(n);
    for (int64_t i = 0; i < n; i++)
        p[i] = (2.0f * urand() - 1.0f) * scale;
    return p;
}

/* n values in [lo, hi) (e.g. positive gammas). */
static float *rnd_range(int64_t n, float lo, float hi)
{
    float *p = fbuf(n);
    for (int64_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * urand();
    return p;
}

static float *copy(const float *x, int64_t n)
{
    float *p = fbuf(n);
    memcpy(p, x, sizeof(float) * (size_t)n);
    return p;
}

/* max |got - want| <= rtol * max |want| (exact equality when want is all 0). */
static void expect_close(const char *what, const float *got, const float *want, int64_t n,
                         double rtol)
{
    double maxd = 0, maxw = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        assert_false(isnan(got[i]));
        if (d > maxd) {
            maxd = d;
            at = i;
        }
        maxw = fmax(maxw, fabs(want[i]));
    }
    if (maxd > rtol * maxw) {
        print_error("%s: element %lld is %.9g, reference %.9g (max diff %.3g > %.3g * %.3g)\n",
                    what, (long long)at, got[at], want[at], maxd, rtol, maxw);
        fail();
    }
}

/* ---- finite differences ------------------------------------------------------------ */

/* The forward whose gradients are checked: run() recomputes the outputs
 * y[0..ny) from the (perturbed) inputs with the reference kernel; the loss is
 * sum_t dot(dy[t], y[t]) in double. */
typedef struct {
    void (*run)(void *op);
    void *op;
    int ny;
    const float *y[4];
    const float *dy[4];
    int64_t n[4];
} fd_fn;

static double fd_loss(const fd_fn *f)
{
    f->run(f->op);
    double l = 0;
    for (int t = 0; t < f->ny; t++)
        for (int64_t i = 0; i < f->n[t]; i++)
            l += (double)f->dy[t][i] * f->y[t][i];
    return l;
}

#define FD_SAMPLES 64
#define FD_EPS 1e-3
#define FD_TOL 1e-2

/* Checks grad[n] (the analytic dL/dx) against central differences at up to
 * FD_SAMPLES elements of x spread over [0, n). Error allowed:
 * tol * (max(|fd|, |grad|) + 0.05 * max_i |grad_i|), the second term absorbing
 * float rounding on elements whose gradient is near zero. */
static void expect_grad_eps(const char *what, const fd_fn *f, float *x, int64_t n,
                            const float *grad, double eps, double tol)
{
    double gmax = 0;
    for (int64_t i = 0; i < n; i++)
        gmax = fmax(gmax, fabs(grad[i]));
    int64_t step = n > FD_SAMPLES ? n / FD_SAMPLES : 1;
    for (int64_t i = 0; i < n; i += step) {
        const float x0 = x[i], xp = (float)(x0 + eps), xm = (float)(x0 - eps);
        x[i] = xp;
        double lp = fd_loss(f);
        x[i] = xm;
        double lm = fd_loss(f);
        x[i] = x0;
        double fd = (lp - lm) / ((double)xp - (double)xm);
        double err = fabs(fd - grad[i]);
        if (err > tol * (fmax(fabs(fd), fabs(grad[i])) + 0.05 * gmax)) {
            print_error("%s: d/dx[%lld] analytic %.7g, finite difference %.7g\n", what,
                        (long long)i, grad[i], fd);
            fail();
        }
    }
    f->run(f->op); /* leave the outputs as the unperturbed forward */
}

static void expect_grad(const char *what, const fd_fn *f, float *x, int64_t n,
                        const float *grad)
{
    expect_grad_eps(what, f, x, n, grad, FD_EPS, FD_TOL);
}

/* ---- matmul, batch_matmul, linear ----------------------------------------------------- */

typedef struct {
    float *a, *b, *c;
    int64_t batch, m, k, n;
    int ta, tb;
} mm_op;

static void mm_run(void *p)
{
    mm_op *o = p;
    wf_k_batch_matmul_fwd_ref(o->a, o->b, o->c, o->batch, o->m, o->k, o->n, o->ta, o->tb);
}

/* Batched matmul at one size and transpose pair (batch 1 also drives the
 * non-batched kernels). */
static void check_matmul(int64_t batch, int64_t m, int64_t k, int64_t n, int ta, int tb,
                         int fd)
{
    char what[64];
    snprintf(what, sizeof what, "matmul b%lld %lldx%lldx%lld ta%d tb%d", (long long)batch,
             (long long)m, (long long)k, (long long)n, ta, tb);
    const int64_t na = batch * m * k, nb = batch * k * n, nc = batch * m * n;
    mm_op o = {rnd(na, 1), rnd(nb, 1), fbuf(nc), batch, m, k, n, ta, tb};
    float *c = fbuf(nc), *dc = rnd(nc, 1);
    float *da = fbuf(na), *db = fbuf(nb), *da_r = fbuf(na), *db_r = fbuf(nb);
    mm_run(&o);
    if (batch == 1) {
        wf_k_matmul_fwd(o.a, o.b, c, m, k, n, ta, tb);
        wf_k_matmul_bwd(o.a, o.b, dc, da, db, m, k, n, ta, tb);
        wf_k_matmul_bwd_ref(o.a, o.b, dc, da_r, db_r, m, k, n, ta, tb);
    } else {
        wf_k_batch_matmul_fwd(o.a, o.b, c, batch, m, k, n, ta, tb);
        wf_k_batch_matmul_bwd(o.a, o.b, dc, da, db, batch, m, k, n, ta, tb);
        wf_k_batch_matmul_bwd_ref(o.a, o.b, dc, da_r, db_r, batch, m, k, n, ta, tb);
    }
    expect_close(what, c, o.c, nc, 1e-5);
    expect_close(what, da, da_r, na, 1e-5);
    expect_close(what, db, db_r, nb, 1e-5);
    if (fd) {
        fd_fn f = {mm_run, &o, 1, {o.c}, {dc}, {nc}};
        expect_grad(what, &f, o.a, na, da_r);
        expect_grad(what, &f, o.b, nb, db_r);
    }
}

static void test_matmul(void **state)
{
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_matmul(1, 5, 7, 4, ta, tb, 1);
            check_matmul(1, 33, 70, 19, ta, tb, 0);
            check_matmul(3, 4, 6, 5, ta, tb, 1);
        }
}

typedef struct {
    float *x, *w, *b, *y;
    int64_t m, k, n;
} lin_op;

static void lin_run(void *p)
{
    lin_op *o = p;
    wf_k_linear_fwd_ref(o->x, o->w, o->b, o->y, o->m, o->k, o->n);
}

static void check_linear(int64_t m, int64_t k, int64_t n, int bias, int fd)
{
    lin_op o = {rnd(m * k, 1), rnd(k * n, 1), bias ? rnd(n, 1) : NULL, fbuf(m * n), m, k, n};
    float *y = fbuf(m * n), *dy = rnd(m * n, 1);
    float *dx = fbuf(m * k), *dw = fbuf(k * n), *db = fbuf(n);
    float *dx_r = fbuf(m * k), *dw_r = fbuf(k * n), *db_r = fbuf(n);
    lin_run(&o);
    wf_k_linear_fwd(o.x, o.w, o.b, y, m, k, n);
    expect_close("linear fwd", y, o.y, m * n, 1e-5);
    wf_k_linear_bwd(o.x, o.w, dy, dx, dw, db, m, k, n);
    wf_k_linear_bwd_ref(o.x, o.w, dy, dx_r, dw_r, db_r, m, k, n);
    expect_close("linear dx", dx, dx_r, m * k, 1e-5);
    expect_close("linear dw", dw, dw_r, k * n, 1e-5);
    expect_close("linear db", db, db_r, n, 1e-5);
    /* NULL gradients are skipped and leave nothing written. */
    float *dw2 = fbuf(k * n);
    wf_k_linear_bwd(o.x, o.w, dy, NULL, dw2, NULL, m, k, n);
    expect_close("linear dw only", dw2, dw_r, k * n, 1e-5);
    if (fd) {
        fd_fn f = {lin_run, &o, 1, {o.y}, {dy}, {m * n}};
        expect_grad("linear dx", &f, o.x, m * k, dx_r);
        expect_grad("linear dw", &f, o.w, k * n, dw_r);
        if (bias)
            expect_grad("linear db", &f, o.b, n, db_r);
    }
}

static void test_linear(void **state)
{
    (void)state;
    check_linear(6, 5, 7, 1, 1);
    check_linear(4, 3, 5, 0, 1);
    check_linear(64, 100, 50, 1, 0);
}

/* ---- bias_add, add, mul ----------------------------------------------------------------- */

typedef struct {
    int kind; /* 0 bias_add, 1 add, 2 mul, 3 mul by scale */
    float *a, *b, *y;
    int64_t n, nb;
    float scale;
} bin_op;

static void bin_run(void *p)
{
    bin_op *o = p;
    switch (o->kind) {
    case 0: wf_k_bias_add_fwd_ref(o->a, o->b, o->y, o->n / o->nb, o->nb); break;
    case 1: wf_k_add_fwd_ref(o->a, o->b, o->y, o->n, o->nb); break;
    case 2: wf_k_mul_fwd_ref(o->a, o->b, o->y, o->n, o->nb, 0.0f); break;
    default: wf_k_mul_fwd_ref(o->a, NULL, o->y, o->n, o->nb, o->scale); break;
    }
}

static void check_binary(int kind, int64_t n, int64_t nb)
{
    static const char *const names[] = {"bias_add", "add", "mul", "mul scale"};
    bin_op o = {kind, rnd(n, 1), rnd(nb, 1), fbuf(n), n, nb, 0.75f};
    float *y = fbuf(n), *dy = rnd(n, 1);
    float *da = fbuf(n), *db = fbuf(nb), *da_r = fbuf(n), *db_r = fbuf(nb);
    bin_run(&o);
    switch (kind) {
    case 0:
        wf_k_bias_add_fwd(o.a, o.b, y, n / nb, nb);
        wf_k_bias_add_bwd(dy, da, db, n / nb, nb);
        wf_k_bias_add_bwd_ref(dy, da_r, db_r, n / nb, nb);
        break;
    case 1:
        wf_k_add_fwd(o.a, o.b, y, n, nb);
        wf_k_add_bwd(dy, da, db, n, nb);
        wf_k_add_bwd_ref(dy, da_r, db_r, n, nb);
        break;
    case 2:
        wf_k_mul_fwd(o.a, o.b, y, n, nb, 0.0f);
        wf_k_mul_bwd(o.a, o.b, dy, da, db, n, nb, 0.0f);
        wf_k_mul_bwd_ref(o.a, o.b, dy, da_r, db_r, n, nb, 0.0f);
        break;
    default:
        wf_k_mul_fwd(o.a, NULL, y, n, nb, o.scale);
        wf_k_mul_bwd(o.a, NULL, dy, da, NULL, n, nb, o.scale);
        wf_k_mul_bwd_ref(o.a, NULL, dy, da_r, NULL, n, nb, o.scale);
        break;
    }
    expect_close(names[kind], y, o.y, n, 1e-6);
    expect_close(names[kind], da, da_r, n, 1e-6);
    fd_fn f = {bin_run, &o, 1, {o.y}, {dy}, {n}};
    expect_grad(names[kind], &f, o.a, n, da_r);
    if (kind != 3) {
        expect_close(names[kind], db, db_r, nb, 1e-5);
        expect_grad(names[kind], &f, o.b, nb, db_r);
    }
}

static void test_binary(void **state)
{
    (void)state;
    for (int kind = 0; kind < 4; kind++) {
        check_binary(kind, 60, 5);
        check_binary(kind, 24, 24);
    }
    /* The hand example of suffix broadcasting: [2,3] + [3]. */
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, y[6];
    wf_k_add_fwd(a, b, y, 6, 3);
    assert_true(y[0] == 11 && y[4] == 25 && y[5] == 36);
}

/* ---- activations ---------------------------------------------------------------------------- */

typedef struct {
    int kind; /* 0 relu, 1 gelu, 2 silu */
    float *x, *y;
    int64_t n;
} act_op;

static void act_run(void *p)
{
    act_op *o = p;
    if (o->kind == 0)
        wf_k_relu_fwd_ref(o->x, o->y, o->n);
    else if (o->kind == 1)
        wf_k_gelu_fwd_ref(o->x, o->y, o->n);
    else
        wf_k_silu_fwd_ref(o->x, o->y, o->n);
}

static void test_activations(void **state)
{
    (void)state;
    static const char *const names[] = {"relu", "gelu", "silu"};
    const int64_t n = 200;
    for (int kind = 0; kind < 3; kind++) {
        act_op o = {kind, rnd(n, 4), fbuf(n), n};
        /* Keep relu's inputs off its kink, where the derivative does not exist. */
        for (int64_t i = 0; i < n; i++)
            if (fabsf(o.x[i]) < 0.05f)
                o.x[i] = 0.1f;
        float *y = fbuf(n), *dy = rnd(n, 1), *dx = fbuf(n), *dx_r = fbuf(n);
        act_run(&o);
        if (kind == 0) {
            wf_k_relu_fwd(o.x, y, n);
            wf_k_relu_bwd(o.x, dy, dx, n);
            wf_k_relu_bwd_ref(o.x, dy, dx_r, n);
        } else if (kind == 1) {
            wf_k_gelu_fwd(o.x, y, n);
            wf_k_gelu_bwd(o.x, dy, dx, n);
            wf_k_gelu_bwd_ref(o.x, dy, dx_r, n);
        } else {
            wf_k_silu_fwd(o.x, y, n);
            wf_k_silu_bwd(o.x, dy, dx, n);
            wf_k_silu_bwd_ref(o.x, dy, dx_r, n);
        }
        expect_close(names[kind], y, o.y, n, 1e-6);
        expect_close(names[kind], dx, dx_r, n, 1e-5);
        fd_fn f = {act_run, &o, 1, {o.y}, {dy}, {n}};
        expect_grad(names[kind], &f, o.x, n, dx_r);
    }
    /* Known values: gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715)), silu(1) = 1/(1+e^-1). */
    float one = 1.0f, g, s;
    wf_k_gelu_fwd(&one, &g, 1);
    wf_k_silu_fwd(&one, &s, 1);
    assert_float_equal(g, 0.841191990, 1e-6);
    assert_float_equal(s, 0.731058579, 1e-6);
}

/* ---- the vectorized building blocks -------------------------------------------------------------
 * The fast kernels run blocks of 16 lanes and a scalar tail, their own exp
 * and square root, and compare floats on their bits (kernels.c); these check
 * that math against libm, the extremes, NaN, and every tail length. */

static void test_vector_math(void **state)
{
    (void)state;
    /* exp within 2 ulp over the range it does not clamp. */
    double worst = 0;
    for (int i = -87000; i <= 87000; i += 7) {
        float x = (float)i / 1000.0f;
        double e = exp((double)x), rel = fabs((double)wf_k_expf(x) - e) / e;
        worst = rel > worst ? rel : worst;
    }
    assert_true(worst < 2.4e-7);
    /* Clamped at |x| = 87: finite, positive; NaN stays NaN. */
    assert_true(wf_k_expf(-INFINITY) > 0 && wf_k_expf(-INFINITY) == wf_k_expf(-87.0f));
    assert_true(isfinite(wf_k_expf(INFINITY)) && wf_k_expf(1000.0f) == wf_k_expf(87.0f));
    assert_true(isnan(wf_k_expf(NAN)));
    /* The square root of the optimizer: relative 1e-6 over 60 decades, 0 at 0. */
    for (int k = -30; k <= 30; k++)
        for (int j = 1; j < 10; j += 2) {
            float v = (float)j * powf(10.0f, (float)k);
            assert_true(fabs((double)wf_k_sqrtf(v) - sqrt((double)v)) <= 1e-6 * sqrt((double)v));
        }
    assert_true(wf_k_sqrtf(0.0f) == 0.0f);

    /* GELU and its derivative at the extremes: no NaN, the right limits. */
    float x[8] = {-1e30f, -30.0f, -10.0f, -5.0f, 5.0f, 10.0f, 30.0f, 1e30f}, y[8], dy[8], dx[8];
    for (int i = 0; i < 8; i++)
        dy[i] = 1.0f;
    wf_k_gelu_fwd(x, y, 8);
    wf_k_gelu_bwd(x, dy, dx, 8);
    for (int i = 0; i < 8; i++)
        assert_true(isfinite(y[i]) && isfinite(dx[i]));
    assert_true(y[6] == 30.0f && y[7] == 1e30f && dx[6] == 1.0f && dx[7] == 1.0f);
    for (int i = 0; i < 3; i++) /* below -10: 0 to float precision (about 1e-37) */
        assert_true(fabsf(y[i]) < 1e-30f && fabsf(dx[i]) < 1e-30f);
    /* silu likewise: x above, 0 far below. */
    wf_k_silu_fwd(x, y, 8);
    wf_k_silu_bwd(x, dy, dx, 8);
    assert_true(y[7] == 1e30f && dx[7] == 1.0f && y[6] == 30.0f);
    assert_true(fabsf(y[0]) < 1e-30f && fabsf(dx[0]) < 1e-30f && fabsf(y[1]) < 1e-11f);
    /* NaN propagates through gelu, softmax and the loss. */
    float nx[3] = {0.5f, NAN, -0.5f}, ny[3], lse[1], loss;
    int32_t lab[1] = {0};
    wf_k_gelu_fwd(nx, ny, 3);
    assert_true(isnan(ny[1]) && !isnan(ny[0]));
    wf_k_softmax_fwd(nx, ny, 1, 3);
    assert_true(isnan(ny[0]) && isnan(ny[2]));
    assert_int_equal(wf_k_cross_entropy_fwd(nx, lab, &loss, lse, 1, 3), WF_OK);
    assert_true(isnan(loss));
    /* The max of a row in any position (the 16 lanes and the tail). */
    for (int at = 0; at < 37; at++) {
        float r[37], out[37];
        for (int i = 0; i < 37; i++)
            r[i] = -1.0f - (float)i;
        r[at] = 3.0f;
        wf_k_softmax_fwd(r, out, 1, 37);
        for (int i = 0; i < 37; i++)
            assert_true(i == at ? out[i] > 0.9f : out[i] < 0.05f);
    }

    /* Every tail length, fast against reference: elementwise, broadcast, rows. */
    for (int64_t n = 1; n <= 40; n++) {
        float a[40], b[40], d[40], o1[40], o2[40], o3[40], o4[40], st1[2], st2[2];
        for (int64_t i = 0; i < n; i++) {
            a[i] = (2.0f * urand() - 1.0f) * 4.0f;
            b[i] = 2.0f * urand() - 1.0f;
            d[i] = 2.0f * urand() - 1.0f;
        }
        wf_k_gelu_fwd(a, o1, n);
        wf_k_gelu_fwd_ref(a, o2, n);
        expect_close("gelu tail", o1, o2, n, 1e-6);
        wf_k_gelu_bwd(a, d, o1, n);
        wf_k_gelu_bwd_ref(a, d, o2, n);
        expect_close("gelu bwd tail", o1, o2, n, 1e-5);
        wf_k_relu_bwd(a, d, o1, n);
        wf_k_relu_bwd_ref(a, d, o2, n);
        expect_close("relu bwd tail", o1, o2, n, 0);
        wf_k_mul_fwd(a, b, o1, n, n, 0.0f);
        wf_k_mul_fwd_ref(a, b, o2, n, n, 0.0f);
        expect_close("mul tail", o1, o2, n, 1e-7);
        wf_k_softmax_fwd(a, o1, 1, n);
        wf_k_softmax_fwd_ref(a, o2, 1, n);
        expect_close("softmax tail", o1, o2, n, 1e-6);
        wf_k_softmax_bwd(o2, d, o3, 1, n);
        wf_k_softmax_bwd_ref(o2, d, o4, 1, n);
        expect_close("softmax bwd tail", o3, o4, n, 1e-5);
        wf_k_layernorm_fwd(a, b, d, o1, st1, 1, n, 1e-5f);
        wf_k_layernorm_fwd_ref(a, b, d, o2, st2, 1, n, 1e-5f);
        expect_close("layernorm tail", o1, o2, n, 1e-5);
    }
}

/* ---- dropout --------------------------------------------------------------------------------- */

typedef struct {
    float *x, *y;
    int64_t n;
    float p;
    uint64_t seed;
} drop_op;

static void drop_run(void *p)
{
    drop_op *o = p;
    wf_k_dropout_fwd_ref(o->x, o->y, o->n, o->p, o->seed, 0);
}

static void test_dropout(void **state)
{
    (void)state;
    /* Mean preserving: x = 1 everywhere, the output's mean stays 1 and the
     * fraction dropped is p (binomial standard error ~0.0015 here). */
    const int64_t n = 100000;
    const float p = 0.3f;
    float *ones = fbuf(n), *y = fbuf(n), *y2 = fbuf(n), *y3 = fbuf(n);
    for (int64_t i = 0; i < n; i++)
        ones[i] = 1.0f;
    wf_k_dropout_fwd(ones, y, n, p, 42, 0);
    double sum = 0;
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += y[i];
        dropped += y[i] == 0.0f;
        assert_true(y[i] == 0.0f || fabsf(y[i] - 1.0f / 0.7f) < 1e-6f);
    }
    assert_float_equal(sum / (double)n, 1.0, 0.01);
    assert_float_equal((double)dropped / (double)n, p, 0.01);
    /* Reproducible by seed, different with another seed, equal to the reference. */
    wf_k_dropout_fwd(ones, y2, n, p, 42, 0);
    assert_memory_equal(y, y2, sizeof(float) * (size_t)n);
    wf_k_dropout_fwd_ref(ones, y2, n, p, 42, 0);
    expect_close("dropout ref", y, y2, n, 1e-6);
    wf_k_dropout_fwd(ones, y3, n, p, 43, 0);
    assert_memory_not_equal(y, y3, sizeof(float) * (size_t)n);
    /* Offset: two halves with offsets reproduce the whole (how data-parallel
     * ranks draw the masks of one process). */
    wf_k_dropout_fwd(ones, y3, n / 2, p, 42, 0);
    wf_k_dropout_fwd(ones, y3 + n / 2, n - n / 2, p, 42, (uint64_t)(n / 2));
    assert_memory_equal(y, y3, sizeof(float) * (size_t)n);
    /* p = 1 drops everything. */
    wf_k_dropout_fwd(ones, y3, 1000, 1.0f, 42, 0);
    for (int64_t i = 0; i < 1000; i++)
        assert_true(y3[i] == 0.0f);
    /* p = 0 is the identity; in place works. */
    float *x = rnd(100, 1), *xc = copy(x, 100);
    wf_k_dropout_fwd(x, x, 100, 0.0f, 7, 0);
    assert_memory_equal(x, xc, sizeof(float) * 100);
    /* Backward applies the forward's mask, against the reference and finite differences. */
    drop_op o = {rnd(300, 1), fbuf(300), 300, 0.4f, 99};
    float *dy = rnd(300, 1), *dx = fbuf(300), *dx_r = fbuf(300);
    drop_run(&o);
    wf_k_dropout_bwd(dy, dx, 300, o.p, o.seed, 0);
    wf_k_dropout_bwd_ref(dy, dx_r, 300, o.p, o.seed, 0);
    expect_close("dropout bwd", dx, dx_r, 300, 1e-6);
    for (int64_t i = 0; i < 300; i++)
        assert_true((o.y[i] == 0.0f) == (dx[i] == 0.0f));
    fd_fn f = {drop_run, &o, 1, {o.y}, {dy}, {300}};
    expect_grad("dropout", &f, o.x, 300, dx_r);
    /* Seeds derived per step differ and replay. */
    assert_true(wf_k_seed_mix(1, 0) != wf_k_seed_mix(1, 1));
    assert_true(wf_k_seed_mix(1, 5) == wf_k_seed_mix(1, 5));
}

/* ---- layernorm, rmsnorm, softmax ----------------------------------------------------------- */

typedef struct {
    int kind; /* 0 layernorm, 1 rmsnorm, 2 softmax */
    float *x, *gamma, *beta, *y, *saved;
    int64_t m, h;
    float eps;
} norm_op;

static void norm_run(void *p)
{
    norm_op *o = p;
    if (o->kind == 0)
        wf_k_layernorm_fwd_ref(o->x, o->gamma, o->beta, o->y, o->saved, o->m, o->h, o->eps);
    else if (o->kind == 1)
        wf_k_rmsnorm_fwd_ref(o->x, o->gamma, o->y, o->saved, o->m, o->h, o->eps);
    else
        wf_k_softmax_fwd_ref(o->x, o->y, o->m, o->h);
}

static void check_norm(int kind, int64_t m, int64_t h, int fd)
{
    static const char *const names[] = {"layernorm", "rmsnorm", "softmax"};
    const char *what = names[kind];
    const int64_t n = m * h;
    norm_op o = {kind, rnd(n, 2), rnd_range(h, 0.5f, 1.5f), rnd(h, 1), fbuf(n), fbuf(2 * m), m,
                 h, 1e-5f};
    float *y = fbuf(n), *saved = fbuf(2 * m), *dy = rnd(n, 1);
    float *dx = fbuf(n), *dg = fbuf(h), *db = fbuf(h), *dx_r = fbuf(n), *dg_r = fbuf(h),
          *db_r = fbuf(h);
    norm_run(&o);
    if (kind == 0) {
        assert_int_equal(wf_k_layernorm_saved_floats(m), 2 * m);
        wf_k_layernorm_fwd(o.x, o.gamma, o.beta, y, saved, m, h, o.eps);
        expect_close(what, saved, o.saved, 2 * m, 1e-5);
        wf_k_layernorm_bwd(o.x, o.gamma, dy, saved, dx, dg, db, m, h);
        wf_k_layernorm_bwd_ref(o.x, o.gamma, dy, o.saved, dx_r, dg_r, db_r, m, h);
    } else if (kind == 1) {
        assert_int_equal(wf_k_rmsnorm_saved_floats(m), m);
        wf_k_rmsnorm_fwd(o.x, o.gamma, y, saved, m, h, o.eps);
        expect_close(what, saved, o.saved, m, 1e-5);
        wf_k_rmsnorm_bwd(o.x, o.gamma, dy, saved, dx, dg, m, h);
        wf_k_rmsnorm_bwd_ref(o.x, o.gamma, dy, o.saved, dx_r, dg_r, m, h);
    } else {
        wf_k_softmax_fwd(o.x, y, m, h);
        wf_k_softmax_bwd(y, dy, dx, m, h);
        wf_k_softmax_bwd_ref(o.y, dy, dx_r, m, h);
    }
    expect_close(what, y, o.y, n, 1e-5);
    expect_close(what, dx, dx_r, n, 1e-5);
    if (kind < 2)
        expect_close(what, dg, dg_r, h, 1e-5);
    if (kind == 0)
        expect_close(what, db, db_r, h, 1e-5);
    if (!fd)
        return;
    fd_fn f = {norm_run, &o, 1, {o.y}, {dy}, {n}};
    expect_grad(what, &f, o.x, n, dx_r);
    if (kind < 2)
        expect_grad(what, &f, o.gamma, h, dg_r);
    if (kind == 0)
        expect_grad(what, &f, o.beta, h, db_r);
}

static void test_norms_softmax(void **state)
{
    (void)state;
    for (int kind = 0; kind < 3; kind++) {
        check_norm(kind, 4, 8, 1);
        check_norm(kind, 3, 5, 1);
        check_norm(kind, 37, 300, 0);
    }
    /* Softmax rows sum to 1 and are invariant to a shift. */
    float x[4] = {1000, 1001, 1002, 1003}, y[4];
    wf_k_softmax_fwd(x, y, 1, 4);
    assert_float_equal(y[0] + y[1] + y[2] + y[3], 1.0, 1e-6);
    assert_float_equal(y[3], exp(3.0) / (1 + exp(1.0) + exp(2.0) + exp(3.0)), 1e-6);
}

/* ---- attention --------------------------------------------------------------------------------- */

typedef struct {
    wf_k_attn at;
    float *q, *k, *v, *out, *saved;
} attn_op;

static void attn_run(void *p)
{
    attn_op *o = p;
    wf_k_attention_fwd_ref(&o->at, o->q, o->k, o->v, o->out, o->saved, NULL);
}

static void check_attention(wf_k_attn at, int fd)
{
    char what[112];
    const int64_t sk = at.sk > 0 ? at.sk : at.s;
    snprintf(what, sizeof what, "attention B%lld S%lld Sk%lld A%lld/%lld D%lld causal%d p%.2f",
             (long long)at.b, (long long)at.s, (long long)sk, (long long)at.heads, (long long)at.kv_heads,
             (long long)at.d, at.causal, (double)at.p);
    const int64_t nq = at.b * at.s * at.heads * at.d, nk = at.b * sk * at.kv_heads * at.d;
    const int64_t np = (int64_t)wf_k_attention_saved_floats(&at);
    assert_int_equal(np, at.b * at.heads * at.s * sk);
    attn_op o = {at, rnd(nq, 1), rnd(nk, 1), rnd(nk, 1), fbuf(nq), fbuf(np)};
    float *out = fbuf(nq), *saved = fbuf(np), *ws = fbuf((int64_t)wf_k_attention_ws_floats(&at));
    float *dout = rnd(nq, 1);
    float *dq = fbuf(nq), *dk = fbuf(nk), *dv = fbuf(nk);
    float *dq_r = fbuf(nq), *dk_r = fbuf(nk), *dv_r = fbuf(nk);
    attn_run(&o);
    wf_k_attention_fwd(&at, o.q, o.k, o.v, out, saved, ws);
    expect_close(what, out, o.out, nq, 1e-5);
    expect_close(what, saved, o.saved, np, 1e-5);
    /* Forward without a saved buffer (evaluation) gives the same output. */
    float *out2 = fbuf(nq);
    wf_k_attention_fwd(&at, o.q, o.k, o.v, out2, NULL, ws);
    assert_memory_equal(out, out2, sizeof(float) * (size_t)nq);
    wf_k_attention_bwd(&at, o.q, o.k, o.v, dout, saved, dq, dk, dv, ws);
    wf_k_attention_bwd_ref(&at, o.q, o.k, o.v, dout, o.saved, dq_r, dk_r, dv_r, NULL);
    expect_close(what, dq, dq_r, nq, 1e-5);
    expect_close(what, dk, dk_r, nk, 1e-5);
    expect_close(what, dv, dv_r, nk, 1e-5);
    if (!fd)
        return;
    fd_fn f = {attn_run, &o, 1, {o.out}, {dout}, {nq}};
    expect_grad(what, &f, o.q, nq, dq_r);
    expect_grad(what, &f, o.k, nk, dk_r);
    expect_grad(what, &f, o.v, nk, dv_r);
}

static void test_attention(void **state)
{
    (void)state;
    /* b, s, heads, kv_heads, d, causal, scale, p, seed, offset, heads_total, head0 */
    check_attention((wf_k_attn){2, 5, 4, 2, 3, 1, 0.0f, 0.0f, 0, 0, 0, 0, NULL, NULL, 0, 0}, 1);
    check_attention((wf_k_attn){1, 6, 2, 2, 4, 0, 0.7f, 0.0f, 0, 0, 0, 0, NULL, NULL, 0, 0}, 1);
    check_attention((wf_k_attn){2, 4, 4, 1, 2, 1, 0.0f, 0.25f, 17, 3, 0, 0, NULL, NULL, 0, 0}, 1);
    check_attention((wf_k_attn){2, 33, 4, 2, 16, 1, 0.0f, 0.1f, 5, 0, 0, 0, NULL, NULL, 0, 0}, 0);
    /* Keys of another length than the queries (T5's cross-attention: the
     * decoder's queries over the encoder's keys), shorter and longer. */
    check_attention((wf_k_attn){2, 3, 4, 2, 3, 0, 0.0f, 0.0f, 0, 0, 0, 0, NULL, NULL, 0, 7}, 1);
    check_attention((wf_k_attn){1, 6, 2, 2, 4, 0, 0.0f, 0.25f, 11, 5, 0, 0, NULL, NULL, 0, 4}, 1);
    check_attention((wf_k_attn){2, 17, 4, 4, 16, 0, 0.0f, 0.1f, 5, 0, 0, 0, NULL, NULL, 0, 40}, 0);
}

/* Attention with an additive bias [Bb,A,S,S] (relative-position, pair or
 * window biases): the fast kernel against the reference, and the reference's
 * gradients of q, k, v and the bias against finite differences. Row b adds
 * bias block b / (B/Bb). */
typedef struct {
    wf_k_attn at;
    float *q, *k, *v, *out, *saved;
} attn_bias_op;

static void attn_bias_run(void *p)
{
    attn_bias_op *o = p;
    wf_k_attention_fwd_ref(&o->at, o->q, o->k, o->v, o->out, o->saved, NULL);
}

static void check_attention_bias(wf_k_attn at)
{
    char what[112];
    snprintf(what, sizeof what, "biased attention B%lld Bb%lld S%lld A%lld D%lld causal%d p%.2f",
             (long long)at.b, (long long)at.bias_b, (long long)at.s, (long long)at.heads,
             (long long)at.d, at.causal, (double)at.p);
    const int64_t sk = at.sk > 0 ? at.sk : at.s;
    const int64_t nq = at.b * at.s * at.heads * at.d, nk = at.b * sk * at.kv_heads * at.d;
    const int64_t nb = at.bias_b * at.heads * at.s * sk;
    const int64_t np = (int64_t)wf_k_attention_saved_floats(&at);
    float *bias = rnd(nb, 2);
    at.bias = bias;
    attn_bias_op o = {at, rnd(nq, 1), rnd(nk, 1), rnd(nk, 1), fbuf(nq), fbuf(np)};
    float *out = fbuf(nq), *saved = fbuf(np), *saved_r = fbuf(np);
    float *ws = fbuf((int64_t)wf_k_attention_ws_floats(&at)), *dout = rnd(nq, 1);
    float *dq = fbuf(nq), *dk = fbuf(nk), *dv = fbuf(nk), *db = fbuf(nb);
    float *dq_r = fbuf(nq), *dk_r = fbuf(nk), *dv_r = fbuf(nk), *db_r = fbuf(nb);
    wf_k_attention_fwd_ref(&at, o.q, o.k, o.v, o.out, saved_r, NULL);
    wf_k_attention_fwd(&at, o.q, o.k, o.v, out, saved, ws);
    expect_close(what, out, o.out, nq, 1e-5);
    wf_k_attn ab = at;
    ab.dbias = db;
    wf_k_attention_bwd(&ab, o.q, o.k, o.v, dout, saved, dq, dk, dv, ws);
    ab.dbias = db_r;
    wf_k_attention_bwd_ref(&ab, o.q, o.k, o.v, dout, saved_r, dq_r, dk_r, dv_r, NULL);
    expect_close(what, dq, dq_r, nq, 1e-5);
    expect_close(what, dk, dk_r, nk, 1e-5);
    expect_close(what, dv, dv_r, nk, 1e-5);
    expect_close(what, db, db_r, nb, 1e-5);
    /* Only the bias gradient asked for: the same dbias. */
    float *db2 = fbuf(nb);
    ab.dbias = db2;
    wf_k_attention_bwd(&ab, o.q, o.k, o.v, dout, saved, NULL, NULL, NULL, ws);
    expect_close(what, db2, db_r, nb, 1e-6);
    fd_fn f = {attn_bias_run, &o, 1, {o.out}, {dout}, {nq}};
    expect_grad(what, &f, o.q, nq, dq_r);
    expect_grad(what, &f, o.k, nk, dk_r);
    expect_grad(what, &f, o.v, nk, dv_r);
    expect_grad(what, &f, bias, nb, db_r);
    /* A zero bias is no bias. */
    float *zero = fbuf(nb), *plain = fbuf(nq);
    at.bias = NULL;
    wf_k_attention_fwd_ref(&at, o.q, o.k, o.v, plain, NULL, NULL);
    at.bias = zero;
    wf_k_attention_fwd_ref(&at, o.q, o.k, o.v, out, NULL, NULL);
    expect_close(what, out, plain, nq, 1e-7);
}

static void test_attention_bias(void **state)
{
    (void)state;
    wf_k_attn at;
    memset(&at, 0, sizeof at);
    at.b = 2, at.s = 5, at.heads = 3, at.kv_heads = 3, at.d = 4, at.bias_b = 1;
    check_attention_bias(at); /* one bias for every row (relative positions) */
    at.bias_b = 2, at.causal = 1;
    check_attention_bias(at); /* one per row (a pair bias per sample) */
    at.b = 4, at.bias_b = 2, at.causal = 0, at.p = 0.2f, at.seed = 9, at.kv_heads = 1;
    check_attention_bias(at); /* rows grouped in pairs (windows of a shifted image), GQA, dropout */
    at.sk = 3;
    check_attention_bias(at); /* a bias [S,Sk] over keys of another length */
}

/* sigmoid against its closed form and finite differences; roll against
 * torch.roll's definition on a small case, and its gradient (a permutation)
 * against finite differences. */
typedef struct {
    float *x, *y;
    int64_t n;
    int nd;
    int64_t dims[3], shifts[3];
    int roll;
} gate_op;

static void gate_run(void *p)
{
    gate_op *o = p;
    if (o->roll)
        wf_k_roll_fwd(o->x, o->y, o->nd, o->dims, o->shifts);
    else
        wf_k_sigmoid_fwd(o->x, o->y, o->n);
}

static void test_sigmoid_roll(void **state)
{
    (void)state;
    const int64_t n = 120;
    gate_op s = {rnd(n, 6), fbuf(n), n, 0, {0}, {0}, 0};
    float *dy = rnd(n, 1), *dx = fbuf(n);
    gate_run(&s);
    for (int64_t i = 0; i < n; i++)
        assert_float_equal(s.y[i], 1.0 / (1.0 + exp(-(double)s.x[i])), 1e-6);
    wf_k_sigmoid_bwd(s.y, dy, dx, n);
    fd_fn f = {gate_run, &s, 1, {s.y}, {dy}, {n}};
    expect_grad("sigmoid", &f, s.x, n, dx);

    /* torch.roll(x, shifts=(1, -1), dims=(0, 1)) of x = [[0,1,2],[3,4,5]] is
     * [[4,5,3],[1,2,0]]. */
    float x6[6] = {0, 1, 2, 3, 4, 5}, y6[6], back[6];
    const float want[6] = {4, 5, 3, 1, 2, 0};
    int64_t d2[2] = {2, 3}, sh2[2] = {1, -1};
    wf_k_roll_fwd(x6, y6, 2, d2, sh2);
    assert_memory_equal(y6, want, sizeof want);
    wf_k_roll_bwd(y6, back, 2, d2, sh2);
    assert_memory_equal(back, x6, sizeof x6);
    /* Shifts beyond the dim wrap: 7 on a dim of 3 is 1. */
    int64_t sh7[2] = {3, 5};
    wf_k_roll_fwd(x6, y6, 2, d2, sh7);
    int64_t sh1[2] = {1, -1};
    wf_k_roll_fwd(x6, back, 2, d2, sh1);
    assert_memory_equal(y6, back, sizeof back);

    gate_op r = {rnd(n, 1), fbuf(n), n, 3, {2, 6, 10}, {0, -3, 4}, 1};
    gate_run(&r);
    wf_k_roll_bwd(dy, dx, r.nd, r.dims, r.shifts);
    fd_fn fr = {gate_run, &r, 1, {r.y}, {dy}, {n}};
    expect_grad("roll", &fr, r.x, n, dx);
}

static void test_attention_causal_mask(void **state)
{
    (void)state;
    /* Changing key/value at position j must not change outputs at positions
     * i < j, and must change position j itself. */
    wf_k_attn at = {2, 8, 4, 2, 4, 1, 0.0f, 0.0f, 0, 0, 0, 0, NULL, NULL, 0, 0};
    const int64_t nq = at.b * at.s * at.heads * at.d, nk = at.b * at.s * at.kv_heads * at.d;
    const int64_t row_q = at.heads * at.d, row_k = at.kv_heads * at.d, j = 5;
    float *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1);
    float *ws = fbuf((int64_t)wf_k_attention_ws_floats(&at));
    float *o1 = fbuf(nq), *o2 = fbuf(nq), *o3 = fbuf(nq), *r1 = fbuf(nq);
    wf_k_attention_fwd(&at, q, k, v, o1, NULL, ws);
    wf_k_attention_fwd_ref(&at, q, k, v, r1, NULL, NULL);
    for (int64_t b = 0; b < at.b; b++)
        for (int64_t t = 0; t < row_k; t++) {
            k[(b * at.s + j) * row_k + t] += 3.0f;
            v[(b * at.s + j) * row_k + t] -= 2.0f;
        }
    wf_k_attention_fwd(&at, q, k, v, o2, NULL, ws);
    wf_k_attention_fwd_ref(&at, q, k, v, o3, NULL, NULL);
    for (int64_t b = 0; b < at.b; b++) {
        const int64_t base = b * at.s * row_q;
        assert_memory_equal(o1 + base, o2 + base, sizeof(float) * (size_t)(j * row_q));
        assert_memory_equal(r1 + base, o3 + base, sizeof(float) * (size_t)(j * row_q));
        assert_memory_not_equal(o1 + base + j * row_q, o2 + base + j * row_q,
                                sizeof(float) * (size_t)row_q);
    }
    /* Without the mask the earlier positions do change. */
    at.causal = 0;
    wf_k_attention_fwd(&at, q, k, v, o3, NULL, ws);
    assert_memory_not_equal(o2, o3, sizeof(float) * (size_t)row_q);
}

/* ---- embedding, rotary, cross-entropy ---------------------------------------------------------- */

typedef struct {
    const int32_t *ids;
    float *table, *y;
    int64_t m, v, h;
} emb_op;

static void emb_run(void *p)
{
    emb_op *o = p;
    assert_int_equal(wf_k_embedding_fwd_ref(o->ids, o->table, o->y, o->m, o->v, o->h), WF_OK);
}

static void test_embedding(void **state)
{
    (void)state;
    const int32_t ids[7] = {3, 0, 3, 5, 1, 3, 0};
    emb_op o = {ids, rnd(6 * 4, 1), fbuf(7 * 4), 7, 6, 4};
    float *y = fbuf(7 * 4), *dy = rnd(7 * 4, 1), *dt = rnd(6 * 4, 1), *dt_r = fbuf(6 * 4);
    emb_run(&o);
    assert_int_equal(wf_k_embedding_fwd(ids, o.table, y, 7, 6, 4), WF_OK);
    assert_memory_equal(y, o.y, sizeof(float) * 28);
    assert_memory_equal(y + 3 * 4, o.table + 5 * 4, sizeof(float) * 4);
    wf_k_embedding_bwd(ids, dy, dt, 7, 6, 4);
    wf_k_embedding_bwd_ref(ids, dy, dt_r, 7, 6, 4);
    expect_close("embedding dtable", dt, dt_r, 24, 1e-6);
    for (int j = 0; j < 4; j++) /* id 2 and 4 never appear: zero rows (overwrite) */
        assert_true(dt[2 * 4 + j] == 0.0f && dt[4 * 4 + j] == 0.0f);
    fd_fn f = {emb_run, &o, 1, {o.y}, {dy}, {28}};
    expect_grad("embedding", &f, o.table, 24, dt_r);
    /* Out-of-range ids are refused with a message naming the id. */
    const int32_t bad[2] = {1, 6};
    assert_int_equal(wf_k_embedding_fwd(bad, o.table, y, 2, 6, 4), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "6"));
    const int32_t neg[1] = {-1};
    assert_int_equal(wf_k_embedding_fwd_ref(neg, o.table, y, 1, 6, 4), WF_INVAL);
}

typedef struct {
    float *x, *y;
    int64_t b, s, heads, d;
    float base;
} rot_op;

static void rot_run(void *p)
{
    rot_op *o = p;
    wf_k_rotary_fwd_ref(o->x, o->y, o->b, o->s, o->heads, o->d, o->base);
}

static void test_rotary(void **state)
{
    (void)state;
    const int64_t B = 2, S = 5, A = 3, D = 6, n = B * S * A * D;
    rot_op o = {rnd(n, 1), fbuf(n), B, S, A, D, 0.0f};
    float *y = fbuf(n), *dy = rnd(n, 1), *dx = fbuf(n), *dx_r = fbuf(n), *back = fbuf(n);
    rot_run(&o);
    wf_k_rotary_fwd(o.x, y, B, S, A, D, 0.0f);
    expect_close("rotary fwd", y, o.y, n, 1e-6);
    wf_k_rotary_bwd(dy, dx, B, S, A, D, 0.0f);
    wf_k_rotary_bwd_ref(dy, dx_r, B, S, A, D, 0.0f);
    expect_close("rotary bwd", dx, dx_r, n, 1e-6);
    fd_fn f = {rot_run, &o, 1, {o.y}, {dy}, {n}};
    expect_grad("rotary", &f, o.x, n, dx_r);
    /* The backward of the forward is the identity (orthogonal rotation). */
    wf_k_rotary_bwd(y, back, B, S, A, D, 0.0f);
    expect_close("rotary inverse", back, o.x, n, 1e-6);
    /* Position 0 is unrotated; position 1, pair 0 turns by 1 radian; pair 1 by
     * base^(-2/D) = 10000^(-1/3) radians. */
    assert_memory_equal(y, o.x, sizeof(float) * (size_t)(A * D));
    const float *x1 = o.x + A * D, *y1 = y + A * D;
    assert_float_equal(y1[0], x1[0] * cos(1.0) - x1[1] * sin(1.0), 1e-6);
    assert_float_equal(y1[1], x1[0] * sin(1.0) + x1[1] * cos(1.0), 1e-6);
    const double a1 = pow(10000.0, -2.0 / 6.0);
    assert_float_equal(y1[2], x1[2] * cos(a1) - x1[3] * sin(a1), 1e-6);
}

typedef struct {
    float *logits, *loss, *saved;
    const int32_t *labels;
    int64_t m, v;
} ce_op;

static void ce_run(void *p)
{
    ce_op *o = p;
    assert_int_equal(wf_k_cross_entropy_fwd_ref(o->logits, o->labels, o->loss, o->saved, o->m,
                                                o->v),
                     WF_OK);
}

static void test_cross_entropy(void **state)
{
    (void)state;
    /* By hand: rows [1,2,3] label 2 and [1,1,1] label 0:
     * (log(e + e^2 + e^3) - 3 + log 3) / 2 = (0.4076059644 + 1.0986122887) / 2. */
    float lg[6] = {1, 2, 3, 1, 1, 1}, loss = 0, saved[2];
    const int32_t lab[2] = {2, 0};
    assert_int_equal(wf_k_cross_entropy_fwd(lg, lab, &loss, saved, 2, 3), WF_OK);
    assert_float_equal(loss, 0.7531091265, 1e-6);
    assert_int_equal(wf_k_cross_entropy_fwd_ref(lg, lab, &loss, saved, 2, 3), WF_OK);
    assert_float_equal(loss, 0.7531091265, 1e-6);
    assert_int_equal(wf_k_cross_entropy_saved_floats(2), 2);
    /* Gradient by hand on row 2: (softmax - onehot) / M = (1/3 - 1, 1/3, 1/3) / 2. */
    float d[6];
    wf_k_cross_entropy_bwd(lg, lab, saved, 1.0f, d, 2, 3);
    assert_float_equal(d[3], (1.0 / 3 - 1) / 2, 1e-6);
    assert_float_equal(d[4], (1.0 / 3) / 2, 1e-6);

    /* Random: fast vs reference, and finite differences of dloss * loss. */
    const int64_t m = 5, v = 11;
    const int32_t labels[5] = {0, 10, 3, 3, 7};
    ce_op o = {rnd(m * v, 3), fbuf(1), fbuf(m), labels, m, v};
    float *sv = fbuf(m), *dl = fbuf(m * v), *dl_r = fbuf(m * v);
    float dloss = 1.7f;
    ce_run(&o);
    assert_int_equal(wf_k_cross_entropy_fwd(o.logits, labels, &loss, sv, m, v), WF_OK);
    assert_float_equal(loss, o.loss[0], 1e-6 * fabs(o.loss[0]));
    expect_close("cross_entropy saved", sv, o.saved, m, 1e-6);
    wf_k_cross_entropy_bwd(o.logits, labels, sv, dloss, dl, m, v);
    wf_k_cross_entropy_bwd_ref(o.logits, labels, o.saved, dloss, dl_r, m, v);
    expect_close("cross_entropy bwd", dl, dl_r, m * v, 1e-5);
    /* The loss is one float: its rounding (~1e-7 relative) over 2 eps would
     * swamp gradients of ~1e-3 at eps = 1e-3, so this smooth op uses 1e-2. */
    fd_fn f = {ce_run, &o, 1, {o.loss}, {&dloss}, {1}};
    expect_grad_eps("cross_entropy", &f, o.logits, m * v, dl_r, 1e-2, FD_TOL);
    /* Bad labels are refused with a message naming the label. */
    const int32_t bad[1] = {11};
    assert_int_equal(wf_k_cross_entropy_fwd(o.logits, bad, &loss, sv, 1, v), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "label 11"));
    assert_int_equal(wf_k_cross_entropy_fwd_ref(o.logits, bad, &loss, sv, 1, v), WF_INVAL);
}

/* The row helpers of the vocabulary-parallel cross-entropy (wf_k_row_*)
 * against naive double-precision loops, at lengths around the vector
 * width, with the empty row (a shard of padding only). */
static void test_row_helpers(void **state)
{
    (void)state;
    static const int64_t lens[] = {0, 1, 7, 16, 17, 33, 1000};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const int64_t n = lens[k];
        float *x = rnd(n, 8.0f), *y = fbuf(n);
        double mx = -INFINITY, se = 0;
        for (int64_t j = 0; j < n; j++)
            mx = x[j] > mx ? x[j] : mx;
        assert_true(wf_k_row_max(x, n) == (float)mx);
        const float c = n > 0 ? (float)mx : 0.0f;
        for (int64_t j = 0; j < n; j++)
            se += exp((double)x[j] - (double)c);
        assert_float_equal(wf_k_row_expsum(x, n, c), se, 2e-6 * (se > 1 ? se : 1));
        wf_k_row_scaled_exp(x, y, n, c, 0.25f);
        for (int64_t j = 0; j < n; j++)
            assert_float_equal(y[j], 0.25 * exp((double)x[j] - (double)c), 2e-7);
    }
}

/* ---- conv2d ------------------------------------------------------------------------------------------ */

typedef struct {
    wf_k_conv_geom g;
    float *x, *w, *b, *y;
} conv_op;

static void conv_run(void *p)
{
    conv_op *o = p;
    wf_k_conv2d_fwd_ref(&o->g, o->x, o->w, o->b, o->y, NULL);
}

static void check_conv(wf_k_conv_geom g, int bias, int fd)
{
    char what[128];
    assert_int_equal(wf_k_conv_geom_check(&g, 0), WF_OK);
    const int64_t G = g.groups > 0 ? g.groups : 1;
    snprintf(what, sizeof what, "conv2d [%lld,%lld,%lld,%lld] o%lld k%lldx%lld s%lld p%lld g%lld",
             (long long)g.n, (long long)g.c, (long long)g.h, (long long)g.w, (long long)g.o,
             (long long)g.kh, (long long)g.kw, (long long)g.sh, (long long)g.ph, (long long)G);
    const int64_t nx = g.n * g.c * g.h * g.w, nw = g.o * (g.c / G) * g.kh * g.kw;
    const int64_t ny = g.n * g.o * g.ho * g.wo;
    conv_op o = {g, rnd(nx, 1), rnd(nw, 1), bias ? rnd(g.o, 1) : NULL, fbuf(ny)};
    float *y = fbuf(ny), *dy = rnd(ny, 1), *ws = fbuf((int64_t)wf_k_conv2d_ws_floats(&g));
    float *dx = rnd(nx, 1), *dw = rnd(nw, 1), *db = rnd(g.o, 1); /* garbage: overwritten */
    float *dx_r = fbuf(nx), *dw_r = fbuf(nw), *db_r = fbuf(g.o);
    conv_run(&o);
    wf_k_conv2d_fwd(&g, o.x, o.w, o.b, y, ws);
    expect_close(what, y, o.y, ny, 1e-5);
    wf_k_conv2d_bwd(&g, o.x, o.w, dy, dx, dw, bias ? db : NULL, ws);
    wf_k_conv2d_bwd_ref(&g, o.x, o.w, dy, dx_r, dw_r, bias ? db_r : NULL, NULL);
    expect_close(what, dx, dx_r, nx, 1e-5);
    expect_close(what, dw, dw_r, nw, 1e-5);
    if (bias)
        expect_close(what, db, db_r, g.o, 1e-5);
    if (!fd)
        return;
    fd_fn f = {conv_run, &o, 1, {o.y}, {dy}, {ny}};
    expect_grad(what, &f, o.x, nx, dx_r);
    expect_grad(what, &f, o.w, nw, dw_r);
    if (bias)
        expect_grad(what, &f, o.b, g.o, db_r);
}

static void test_conv2d(void **state)
{
    (void)state;
    /* n, c, h, w, o, kh, kw, sh, sw, ph, pw, groups */
    check_conv((wf_k_conv_geom){2, 4, 7, 6, 6, 3, 3, 2, 2, 1, 1, 2, 0, 0}, 1, 1);
    check_conv((wf_k_conv_geom){2, 3, 6, 5, 4, 3, 2, 1, 1, 0, 1, 1, 0, 0}, 0, 1);
    check_conv((wf_k_conv_geom){2, 4, 5, 5, 4, 3, 3, 1, 2, 2, 1, 4, 0, 0}, 1, 1); /* depthwise */
    check_conv((wf_k_conv_geom){2, 6, 4, 3, 4, 1, 1, 1, 1, 0, 0, 2, 0, 0}, 1, 1); /* pointwise */
    check_conv((wf_k_conv_geom){3, 8, 14, 14, 16, 5, 5, 2, 2, 2, 2, 2, 0, 0}, 1, 0);
    check_conv((wf_k_conv_geom){2, 16, 8, 8, 8, 1, 1, 1, 1, 0, 0, 1, 0, 0}, 0, 0);
}

static void test_conv_geom_check(void **state)
{
    (void)state;
    wf_k_conv_geom g = {1, 3, 28, 28, 8, 5, 5, 2, 2, 2, 2, 1, 0, 0};
    assert_int_equal(wf_k_conv_geom_check(&g, 0), WF_OK);
    assert_int_equal(g.ho, 14);
    assert_int_equal(g.wo, 14);
    wf_k_conv_geom bad = g;
    bad.groups = 2; /* does not divide 3 channels */
    assert_int_equal(wf_k_conv_geom_check(&bad, 0), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "groups=2"));
    assert_int_equal(wf_k_conv_geom_check(&bad, 1), WF_OK); /* pools ignore groups */
    bad = g;
    bad.sh = 0;
    assert_int_equal(wf_k_conv_geom_check(&bad, 0), WF_INVAL);
    bad = g;
    bad.ph = 5;
    assert_int_equal(wf_k_conv_geom_check(&bad, 1), WF_INVAL);
    bad = g;
    bad.h = 2;
    bad.ph = 1;
    assert_int_equal(wf_k_conv_geom_check(&bad, 0), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "exceeds"));
}

/* ---- pools and batchnorm ------------------------------------------------------------------------- */

typedef struct {
    int kind; /* 0 maxpool, 1 avgpool, 2 global avgpool */
    wf_k_conv_geom g;
    float *x, *y;
} pool_op;

static void pool_run(void *p)
{
    pool_op *o = p;
    if (o->kind == 0)
        wf_k_maxpool_fwd_ref(&o->g, o->x, o->y);
    else if (o->kind == 1)
        wf_k_avgpool_fwd_ref(&o->g, o->x, o->y);
    else
        wf_k_global_avgpool_fwd_ref(o->x, o->y, o->g.n * o->g.c, o->g.h * o->g.w);
}

static void check_pool(int kind, wf_k_conv_geom g)
{
    static const char *const names[] = {"maxpool", "avgpool", "global_avgpool"};
    const char *what = names[kind];
    assert_int_equal(wf_k_conv_geom_check(&g, 1), WF_OK);
    const int64_t nx = g.n * g.c * g.h * g.w;
    const int64_t ny = kind == 2 ? g.n * g.c : g.n * g.c * g.ho * g.wo;
    pool_op o = {kind, g, fbuf(nx), fbuf(ny)};
    /* Distinct values at least 0.01 apart (a shuffled ramp), so that the max
     * of every window stays put under the finite-difference perturbation. */
    for (int64_t i = 0; i < nx; i++)
        o.x[i] = 0.01f * (float)i - 0.005f * (float)nx;
    for (int64_t i = nx - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (float)(i + 1)) % (i + 1);
        float t = o.x[i];
        o.x[i] = o.x[j];
        o.x[j] = t;
    }
    float *y = fbuf(ny), *dy = rnd(ny, 1), *dx = rnd(nx, 1), *dx_r = fbuf(nx);
    pool_run(&o);
    if (kind == 0) {
        wf_k_maxpool_fwd(&g, o.x, y);
        wf_k_maxpool_bwd(&g, o.x, dy, dx);
        wf_k_maxpool_bwd_ref(&g, o.x, dy, dx_r);
    } else if (kind == 1) {
        wf_k_avgpool_fwd(&g, o.x, y);
        wf_k_avgpool_bwd(&g, dy, dx);
        wf_k_avgpool_bwd_ref(&g, dy, dx_r);
    } else {
        wf_k_global_avgpool_fwd(o.x, y, g.n * g.c, g.h * g.w);
        wf_k_global_avgpool_bwd(dy, dx, g.n * g.c, g.h * g.w);
        wf_k_global_avgpool_bwd_ref(dy, dx_r, g.n * g.c, g.h * g.w);
    }
    expect_close(what, y, o.y, ny, 1e-6);
    expect_close(what, dx, dx_r, nx, 1e-6);
    fd_fn f = {pool_run, &o, 1, {o.y}, {dy}, {ny}};
    expect_grad(what, &f, o.x, nx, dx_r);
}

static void test_pools(void **state)
{
    (void)state;
    /* n, c, h, w, o, kh, kw, sh, sw, ph, pw */
    for (int kind = 0; kind < 3; kind++) {
        check_pool(kind, (wf_k_conv_geom){2, 3, 7, 6, 3, 3, 3, 2, 2, 1, 1, 0, 0, 0});
        check_pool(kind, (wf_k_conv_geom){1, 2, 8, 8, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0});
        check_pool(kind, (wf_k_conv_geom){2, 2, 5, 7, 2, 3, 2, 1, 3, 1, 1, 0, 0, 0});
    }
    /* count_include_pad = 1: the top-left 3x3 window with pad 1 holds 4 input
     * elements and divides their sum by 9. */
    wf_k_conv_geom g = {1, 1, 4, 4, 1, 3, 3, 2, 2, 1, 1, 0, 0, 0};
    assert_int_equal(wf_k_conv_geom_check(&g, 1), WF_OK);
    float x[16], y[4], ym[4];
    for (int i = 0; i < 16; i++)
        x[i] = (float)(i + 1);
    wf_k_avgpool_fwd(&g, x, y);
    assert_float_equal(y[0], (1 + 2 + 5 + 6) / 9.0, 1e-6);
    wf_k_maxpool_fwd(&g, x, ym);
    assert_float_equal(ym[0], 6, 0);
    assert_float_equal(ym[3], 16, 0);
    /* Ties (maxpool after relu sees many zeros): the gradient goes to the
     * first maximum in row-major order, in both versions. */
    wf_k_conv_geom gt = {2, 3, 6, 6, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0};
    assert_int_equal(wf_k_conv_geom_check(&gt, 1), WF_OK);
    const int64_t nx = 2 * 3 * 36, ny = 2 * 3 * gt.ho * gt.wo;
    float *xt = rnd(nx, 1), *dyt = rnd(ny, 1), *dxt = fbuf(nx), *dxt_r = fbuf(nx);
    for (int64_t i = 0; i < nx; i++)
        xt[i] = xt[i] > 0.3f ? 0.5f : 0.0f;
    wf_k_maxpool_bwd(&gt, xt, dyt, dxt);
    wf_k_maxpool_bwd_ref(&gt, xt, dyt, dxt_r);
    assert_memory_equal(dxt, dxt_r, sizeof(float) * (size_t)nx);
    float tie[4] = {2, 2, 2, 2}, one = 1.0f, dtie[4];
    wf_k_conv_geom g1 = {1, 1, 2, 2, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0};
    assert_int_equal(wf_k_conv_geom_check(&g1, 1), WF_OK);
    wf_k_maxpool_bwd(&g1, tie, &one, dtie);
    assert_true(dtie[0] == 1.0f && dtie[1] == 0.0f && dtie[2] == 0.0f && dtie[3] == 0.0f);
}

typedef struct {
    float *x, *gamma, *beta, *y, *saved;
    int64_t n, c, s;
} bn_op;

static void bn_run(void *p)
{
    bn_op *o = p;
    wf_k_batchnorm_fwd_ref(o->x, o->gamma, o->beta, o->y, o->saved, o->n, o->c, o->s, 1e-5f);
}

static void check_batchnorm(int64_t n, int64_t c, int64_t s, int fd)
{
    const int64_t nx = n * c * s;
    bn_op o = {rnd(nx, 2), rnd_range(c, 0.5f, 1.5f), rnd(c, 1), fbuf(nx), fbuf(2 * c), n, c, s};
    for (int64_t i = 0; i < nx; i++) /* per-channel offsets, so the means differ */
        o.x[i] += (float)((i / s) % c);
    float *y = fbuf(nx), *saved = fbuf(2 * c), *dy = rnd(nx, 1);
    float *dx = fbuf(nx), *dg = fbuf(c), *db = fbuf(c), *dx_r = fbuf(nx), *dg_r = fbuf(c),
          *db_r = fbuf(c);
    assert_int_equal(wf_k_batchnorm_saved_floats(c), 2 * c);
    bn_run(&o);
    wf_k_batchnorm_fwd(o.x, o.gamma, o.beta, y, saved, n, c, s, 1e-5f);
    expect_close("batchnorm fwd", y, o.y, nx, 1e-5);
    expect_close("batchnorm saved", saved, o.saved, 2 * c, 1e-5);
    wf_k_batchnorm_bwd(o.x, o.gamma, dy, saved, dx, dg, db, n, c, s);
    wf_k_batchnorm_bwd_ref(o.x, o.gamma, dy, o.saved, dx_r, dg_r, db_r, n, c, s);
    expect_close("batchnorm dx", dx, dx_r, nx, 1e-5);
    expect_close("batchnorm dgamma", dg, dg_r, c, 1e-5);
    expect_close("batchnorm dbeta", db, db_r, c, 1e-5);
    if (!fd)
        return;
    fd_fn f = {bn_run, &o, 1, {o.y}, {dy}, {nx}};
    expect_grad("batchnorm dx", &f, o.x, nx, dx_r);
    expect_grad("batchnorm dgamma", &f, o.gamma, c, dg_r);
    expect_grad("batchnorm dbeta", &f, o.beta, c, db_r);
}

static void test_batchnorm(void **state)
{
    (void)state;
    check_batchnorm(3, 4, 5, 1);
    check_batchnorm(6, 3, 1, 1); /* x[N,C] after a linear */
    check_batchnorm(8, 16, 49, 0);
}

/* ---- transpose, concat, split -------------------------------------------------------------------- */

typedef struct {
    float *x, *y;
    int ndim;
    const int64_t *shape;
    const int *perm;
} tr_op;

static void tr_run(void *p)
{
    tr_op *o = p;
    wf_k_transpose_fwd_ref(o->x, o->y, o->ndim, o->shape, o->perm);
}

static void check_transpose(int ndim, const int64_t *shape, const int *perm)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    tr_op o = {rnd(n, 1), fbuf(n), ndim, shape, perm};
    float *y = fbuf(n), *dy = rnd(n, 1), *dx = fbuf(n), *dx_r = fbuf(n), *back = fbuf(n);
    tr_run(&o);
    wf_k_transpose_fwd(o.x, y, ndim, shape, perm);
    assert_memory_equal(y, o.y, sizeof(float) * (size_t)n);
    wf_k_transpose_bwd(dy, dx, ndim, shape, perm);
    wf_k_transpose_bwd_ref(dy, dx_r, ndim, shape, perm);
    assert_memory_equal(dx, dx_r, sizeof(float) * (size_t)n);
    wf_k_transpose_bwd(y, back, ndim, shape, perm);
    assert_memory_equal(back, o.x, sizeof(float) * (size_t)n);
    fd_fn f = {tr_run, &o, 1, {o.y}, {dy}, {n}};
    expect_grad("transpose", &f, o.x, n, dx_r);
}

static void test_transpose(void **state)
{
    (void)state;
    const int64_t s2[2] = {3, 5}, s3[3] = {2, 3, 4}, s4[4] = {2, 3, 4, 5};
    const int p2[2] = {1, 0}, p3[3] = {2, 0, 1}, p4a[4] = {0, 2, 1, 3}, p4b[4] = {3, 1, 0, 2};
    check_transpose(2, s2, p2);
    check_transpose(3, s3, p3);
    check_transpose(4, s4, p4a);
    check_transpose(4, s4, p4b);
    /* By hand: [[1,2,3],[4,5,6]]^T = [[1,4],[2,5],[3,6]]. */
    const int64_t sh[2] = {2, 3};
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
    wf_k_transpose_fwd(x, y, 2, sh, p2);
    assert_true(y[0] == 1 && y[1] == 4 && y[2] == 2 && y[5] == 6);
}

static void test_concat_split(void **state)
{
    (void)state;
    /* Three tensors [2, s_i, 3] concatenated along the middle axis. */
    const int64_t outer = 2, inner = 3, sizes[3] = {1, 4, 2}, total = 7;
    float *xs[3], *dxs[3], *dxs_r[3], *ys[3];
    for (int t = 0; t < 3; t++) {
        xs[t] = rnd(outer * sizes[t] * inner, 1);
        dxs[t] = fbuf(outer * sizes[t] * inner);
        dxs_r[t] = fbuf(outer * sizes[t] * inner);
        ys[t] = fbuf(outer * sizes[t] * inner);
    }
    const int64_t n = outer * total * inner;
    float *y = fbuf(n), *y_r = fbuf(n), *dy = rnd(n, 1), *back = fbuf(n);
    wf_k_concat_fwd((const float *const *)xs, 3, sizes, y, outer, inner);
    wf_k_concat_fwd_ref((const float *const *)xs, 3, sizes, y_r, outer, inner);
    assert_memory_equal(y, y_r, sizeof(float) * (size_t)n);
    /* Row 1 of the output starts with x0's row 1, then x1's row 1. */
    assert_true(y[total * inner] == xs[0][inner] && y[(total + 1) * inner] == xs[1][4 * inner]);
    wf_k_concat_bwd(dy, dxs, 3, sizes, outer, inner);
    wf_k_concat_bwd_ref(dy, dxs_r, 3, sizes, outer, inner);
    for (int t = 0; t < 3; t++)
        assert_memory_equal(dxs[t], dxs_r[t], sizeof(float) * (size_t)(outer * sizes[t] * inner));
    /* split is concat's inverse; its backward with an unused output gives zeros there. */
    wf_k_split_fwd(y, ys, 3, sizes, outer, inner);
    for (int t = 0; t < 3; t++)
        assert_memory_equal(ys[t], xs[t], sizeof(float) * (size_t)(outer * sizes[t] * inner));
    wf_k_split_fwd_ref(y, dxs_r, 3, sizes, outer, inner);
    for (int t = 0; t < 3; t++)
        assert_memory_equal(dxs_r[t], xs[t], sizeof(float) * (size_t)(outer * sizes[t] * inner));
    const float *dys[3] = {xs[0], NULL, xs[2]};
    wf_k_split_bwd(dys, back, 3, sizes, outer, inner);
    wf_k_split_bwd_ref(dys, y_r, 3, sizes, outer, inner);
    assert_memory_equal(back, y_r, sizeof(float) * (size_t)n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = sizes[0] * inner; i < (sizes[0] + sizes[1]) * inner; i++)
            assert_true(back[o * total * inner + i] == 0.0f);
    /* concat backward skips NULL gradients. */
    float *skip[3] = {dxs[0], NULL, dxs[2]};
    wf_k_concat_bwd(dy, skip, 3, sizes, outer, inner);
}

/* ---- mixtures of experts -------------------------------------------------------------------- */

/* Routing by hand: equal scores go to the lower experts; a tie for second
 * place too; weights renormalized over the chosen. */
static void test_moe_routing(void **state)
{
    (void)state;
    /* H = 1, x = 1: the logits are w. Token 0: all equal; token 1 (x = 1
     * against the same w) is the same, so a second w row is not needed. */
    float x[2] = {1, 1}, w0[4] = {0, 0, 0, 0}, w1[4] = {0.5f, 2.0f, 0.5f, 2.0f};
    float wt[4], pr[8];
    int32_t id[4];
    for (int ref = 0; ref < 2; ref++) {
        (ref ? wf_k_router_fwd_ref : wf_k_router_fwd)(x, w0, wt, id, pr, 2, 1, 4, 2, 0);
        assert_true(id[0] == 0 && id[1] == 1 && id[2] == 0 && id[3] == 1);
        assert_true(fabsf(wt[0] - 0.5f) < 1e-7f && fabsf(wt[1] - 0.5f) < 1e-7f);
        /* Experts 1 and 3 tie at the top: 1 first, then 3. */
        (ref ? wf_k_router_fwd_ref : wf_k_router_fwd)(x, w1, wt, id, pr, 2, 1, 4, 2, 1);
        assert_true(id[0] == 1 && id[1] == 3);
        assert_true(fabsf(wt[0] - 0.5f) < 1e-7f);
    }
    /* Slots: T = 4, K = 2, E = 3, C = 2; the third choice of expert 0 and
     * of expert 1 are dropped. */
    const int32_t ex[8] = {0, 1, 0, 2, 0, 1, 1, 2};
    const int32_t want[8] = {0, 0, 1, 0, -1, 1, -1, 1};
    int32_t slot[8], count[3];
    for (int ref = 0; ref < 2; ref++) {
        (ref ? wf_k_moe_slots_ref : wf_k_moe_slots)(ex, 4, 2, 3, 2, count, slot);
        assert_memory_equal(slot, want, sizeof want);
        assert_true(count[0] == 2 && count[1] == 2 && count[2] == 2);
    }
}

typedef struct {
    float *x, *w, *wt, *pr;
    int32_t *id;
    int64_t T, H, E, K;
    int sigmoid;
} router_op;

static void router_run(void *p)
{
    router_op *o = p;
    wf_k_router_fwd_ref(o->x, o->w, o->wt, o->id, o->pr, o->T, o->H, o->E, o->K, o->sigmoid);
}

static void check_router(int64_t T, int64_t H, int64_t E, int64_t K, int sigmoid)
{
    char what[64];
    snprintf(what, sizeof what, "router T%lld H%lld E%lld K%lld %s", (long long)T, (long long)H, (long long)E,
             (long long)K, sigmoid ? "sigmoid" : "softmax");
    router_op o = {rnd(T * H, 1), rnd(H * E, 1), fbuf(T * K), fbuf(T * E), track(calloc((size_t)(T * K), 4)),
                   T, H, E, K, sigmoid};
    float *wt = fbuf(T * K), *pr = fbuf(T * E), *dwt = rnd(T * K, 1), *sc = fbuf(T * E);
    int32_t *id = track(calloc((size_t)(T * K), 4));
    float *dx = fbuf(T * H), *dw = fbuf(H * E), *dx_r = fbuf(T * H), *dw_r = fbuf(H * E);
    router_run(&o);
    wf_k_router_fwd(o.x, o.w, wt, id, pr, T, H, E, K, sigmoid);
    assert_memory_equal(id, o.id, sizeof(int32_t) * (size_t)(T * K));
    expect_close(what, wt, o.wt, T * K, 1e-5);
    expect_close(what, pr, o.pr, T * E, 1e-5);
    wf_k_router_bwd(o.x, o.w, pr, dwt, dx, dw, sc, T, H, E, K, sigmoid);
    wf_k_router_bwd_ref(o.x, o.w, o.pr, dwt, dx_r, dw_r, sc, T, H, E, K, sigmoid);
    expect_close(what, dx, dx_r, T * H, 1e-5);
    expect_close(what, dw, dw_r, H * E, 1e-5);
    /* The choices are piecewise constant; eps is far below this seed's score gaps. */
    fd_fn f = {router_run, &o, 1, {o.wt}, {dwt}, {T * K}};
    expect_grad_eps(what, &f, o.x, T * H, dx_r, 1e-3, 2e-2);
    expect_grad_eps(what, &f, o.w, H * E, dw_r, 1e-3, 2e-2);
}

typedef struct {
    float *x, *y, *wt, *out;
    const int32_t *id, *slot;
    int64_t T, K, E, C, H;
} route_op;

static void dispatch_combine_run(void *p)
{
    route_op *o = p;
    wf_k_moe_dispatch_fwd_ref(o->x, o->id, o->slot, o->y, o->T, o->K, o->E, o->C, o->H);
    wf_k_moe_combine_fwd_ref(o->y, o->wt, o->id, o->slot, o->out, o->T, o->K, o->C, o->H);
}

static void combine_run(void *p)
{
    route_op *o = p;
    wf_k_moe_combine_fwd_ref(o->y, o->wt, o->id, o->slot, o->out, o->T, o->K, o->C, o->H);
}

/* Dispatch and combine with drops (C below the busiest expert's load). */
static void test_moe_dispatch_combine(void **state)
{
    (void)state;
    const int64_t T = 9, K = 2, E = 4, C = 4, H = 5;
    int32_t id[18], slot[18], slot_r[18], count[4], count_r[4];
    for (int64_t i = 0; i < T * K; i++) /* expert 0 chosen by most tokens */
        id[i] = (int32_t)(i % K == 0 ? (i / K) % 3 == 0 ? 1 : 0 : 2 + (i / K) % 2);
    wf_k_moe_slots(id, T, K, E, C, count, slot);
    wf_k_moe_slots_ref(id, T, K, E, C, count_r, slot_r);
    assert_memory_equal(slot, slot_r, sizeof slot);
    assert_memory_equal(count, count_r, sizeof count);
    int dropped = 0;
    for (int64_t i = 0; i < T * K; i++)
        dropped += slot[i] < 0;
    assert_true(dropped > 0);
    route_op o = {rnd(T * H, 1), fbuf(E * C * H), rnd(T * K, 1), fbuf(T * H), id, slot, T, K, E, C, H};
    float *y = fbuf(E * C * H), *out = fbuf(T * H), *dout = rnd(T * H, 1), *dyc = rnd(E * C * H, 1);
    float *dx = fbuf(T * H), *dx_r = fbuf(T * H), *dy = fbuf(E * C * H), *dy_r = fbuf(E * C * H);
    float *dwt = fbuf(T * K), *dwt_r = fbuf(T * K);
    dispatch_combine_run(&o);
    wf_k_moe_dispatch_fwd(o.x, id, slot, y, T, K, E, C, H);
    assert_memory_equal(y, o.y, sizeof(float) * (size_t)(E * C * H));
    wf_k_moe_combine_fwd(o.y, o.wt, id, slot, out, T, K, C, H);
    expect_close("combine", out, o.out, T * H, 1e-6);
    wf_k_moe_dispatch_bwd(dyc, id, slot, dx, T, K, C, H);
    wf_k_moe_dispatch_bwd_ref(dyc, id, slot, dx_r, T, K, C, H);
    expect_close("dispatch backward", dx, dx_r, T * H, 1e-6);
    wf_k_moe_combine_bwd(o.y, o.wt, id, slot, dout, dy, dwt, T, K, E, C, H);
    wf_k_moe_combine_bwd_ref(o.y, o.wt, id, slot, dout, dy_r, dwt_r, T, K, E, C, H);
    expect_close("combine backward (rows)", dy, dy_r, E * C * H, 1e-6);
    expect_close("combine backward (weights)", dwt, dwt_r, T * K, 1e-6);
    /* Finite differences: dispatch then combine (d out / d x through both),
     * and combine alone in its rows and weights. */
    float *dxy = fbuf(T * H);
    wf_k_moe_combine_bwd_ref(o.y, o.wt, id, slot, dout, dy_r, NULL, T, K, E, C, H);
    wf_k_moe_dispatch_bwd_ref(dy_r, id, slot, dxy, T, K, C, H);
    fd_fn f = {dispatch_combine_run, &o, 1, {o.out}, {dout}, {T * H}};
    expect_grad("dispatch+combine", &f, o.x, T * H, dxy);
    fd_fn g = {combine_run, &o, 1, {o.out}, {dout}, {T * H}};
    expect_grad("combine rows", &g, o.y, E * C * H, dy_r);
    expect_grad("combine weights", &g, o.wt, T * K, dwt_r);
}

typedef struct {
    float *x, *w1, *w2, *y, *sc;
    int64_t E, C, H, F;
    int swiglu;
} gmlp_op;

static void gmlp_run(void *p)
{
    gmlp_op *o = p;
    wf_k_grouped_mlp_fwd_ref(o->x, o->w1, o->w2, o->y, o->sc, o->E, o->C, o->H, o->F, o->swiglu);
}

static void check_grouped_mlp(int64_t E, int64_t C, int64_t H, int64_t F, int swiglu)
{
    char what[64];
    snprintf(what, sizeof what, "grouped_mlp E%lld C%lld H%lld F%lld %s", (long long)E, (long long)C,
             (long long)H, (long long)F, swiglu ? "swiglu" : "gelu");
    const int64_t G = swiglu ? 2 * F : F, nx = E * C * H, n1 = E * H * G, n2 = E * F * H;
    const int64_t nsc = 2 * (2 * C * G + 2 * C * F);
    gmlp_op o = {rnd(nx, 1), rnd(n1, 0.5f), rnd(n2, 0.5f), fbuf(nx), fbuf(nsc), E, C, H, F, swiglu};
    float *y = fbuf(nx), *dy = rnd(nx, 1), *sc = fbuf(nsc);
    float *dx = fbuf(nx), *d1 = fbuf(n1), *d2 = fbuf(n2), *dx_r = fbuf(nx), *d1_r = fbuf(n1), *d2_r = fbuf(n2);
    gmlp_run(&o);
    wf_k_grouped_mlp_fwd(o.x, o.w1, o.w2, y, sc, E, C, H, F, swiglu);
    expect_close(what, y, o.y, nx, 1e-5);
    wf_k_grouped_mlp_bwd(o.x, o.w1, o.w2, dy, dx, d1, d2, sc, E, C, H, F, swiglu);
    wf_k_grouped_mlp_bwd_ref(o.x, o.w1, o.w2, dy, dx_r, d1_r, d2_r, o.sc, E, C, H, F, swiglu);
    expect_close(what, dx, dx_r, nx, 1e-5);
    expect_close(what, d1, d1_r, n1, 1e-5);
    expect_close(what, d2, d2_r, n2, 1e-5);
    fd_fn f = {gmlp_run, &o, 1, {o.y}, {dy}, {nx}};
    expect_grad(what, &f, o.x, nx, dx_r);
    expect_grad(what, &f, o.w1, n1, d1_r);
    expect_grad(what, &f, o.w2, n2, d2_r);
}

static void test_moe_kernels(void **state)
{
    (void)state;
    check_router(7, 6, 5, 2, 0);
    check_router(6, 4, 8, 3, 1);
    check_grouped_mlp(3, 5, 6, 4, 1);
    check_grouped_mlp(2, 4, 5, 3, 0);
}

/* ---- BLAS control ------------------------------------------------------------------------------- */

static void test_blas_control(void **state)
{
    (void)state;
    assert_int_equal(wf_k_set_threads(0), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "threads=0"));
    wf_status st = wf_k_set_threads(1);
    assert_true(st == WF_OK || st == WF_NOTFOUND);
    assert_true(strlen(wf_k_blas_info()) > 0);
}

/* The panel kernel for skinny products against a naive product in double:
 * every path (small m, small k, dX as its transpose), beta 0 and 1, row
 * tails of the register tile, KC tails, and the shapes it must decline. */
static void check_gemm_small(int ta, int tb, int64_t m, int64_t n, int64_t k, float beta, int want)
{
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n));
    float *c = malloc(sizeof(float) * (size_t)(m * n));
    double *ref = malloc(sizeof(double) * (size_t)(m * n));
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(ref);
    for (int64_t i = 0; i < m * k; i++)
        a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (int64_t i = 0; i < k * n; i++)
        b[i] = (float)((i * 104729) % 997) / 997.0f - 0.5f;
    for (int64_t i = 0; i < m * n; i++)
        c[i] = (float)(i % 13) - 6.0f;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = beta != 0.0f ? (double)c[i * n + j] : 0.0;
            for (int64_t p = 0; p < k; p++)
                acc += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (double)(tb ? b[j * ldb + p] : b[p * ldb + j]);
            ref[i * n + j] = acc;
        }
    int took = wf_k_gemm_small(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n);
    if (wf_k_cpu_vector_level() < 2)
        want = 0;
    assert_int_equal(took, want);
    if (took)
        for (int64_t i = 0; i < m * n; i++)
            assert_true(fabs((double)c[i] - ref[i]) <= 1e-5 * (double)k);
    free(a);
    free(b);
    free(c);
    free(ref);
}

static void test_gemm_small(void **state)
{
    (void)state;
    check_gemm_small(0, 0, 64, 128, 300, 0.0f, 1);  /* forward of a batch-64 layer; a KC tail */
    check_gemm_small(0, 0, 13, 64, 600, 1.0f, 1);   /* bias-initialized C; row tail 1 */
    check_gemm_small(0, 0, 128, 192, 257, 0.0f, 1); /* row tail 2, KC tail 1 */
    check_gemm_small(0, 1, 64, 192, 300, 0.0f, 1);  /* dX = dY W^T, as its transpose */
    check_gemm_small(0, 1, 128, 64, 260, 1.0f, 1);
    check_gemm_small(1, 0, 300, 128, 64, 0.0f, 1);  /* dW = X^T dY */
    check_gemm_small(1, 0, 131, 64, 17, 1.0f, 1);
    check_gemm_small(0, 0, 200, 192, 64, 0.0f, 1);  /* k small, A untransposed */
    check_gemm_small(0, 0, 64, 100, 300, 0.0f, 0);  /* n not a multiple of 64 */
    check_gemm_small(0, 0, 200, 128, 200, 0.0f, 0); /* neither side skinny */
    check_gemm_small(0, 1, 32, 128, 300, 0.0f, 0);  /* dX of 32 rows: BLAS */
    check_gemm_small(1, 1, 300, 128, 64, 0.0f, 0);  /* transposed wide B with small k */
    check_gemm_small(0, 0, 64, 128, 300, 0.5f, 0);  /* beta other than 0 or 1 */
}

/* The core type weft sets before OpenBLAS initializes: only when the chosen
 * kernels are narrower than the CPU's units, never a downgrade. */
static void test_blas_core_choice(void **state)
{
    (void)state;
    assert_string_equal(wf_k_blas_core_for("Prescott", 2), "SkylakeX");
    assert_string_equal(wf_k_blas_core_for("Haswell", 2), "SkylakeX");
    assert_string_equal(wf_k_blas_core_for("zen", 2), "SkylakeX");
    assert_string_equal(wf_k_blas_core_for("Nehalem", 1), "Haswell");
    assert_string_equal(wf_k_blas_core_for("Sandybridge", 1), "Haswell");
    assert_null(wf_k_blas_core_for("Cooperlake", 2));
    assert_null(wf_k_blas_core_for("SkylakeX", 2));
    assert_null(wf_k_blas_core_for("SkylakeX", 1)); /* wider than the CPU: OpenBLAS's own business */
    assert_null(wf_k_blas_core_for("Haswell", 1));
    assert_null(wf_k_blas_core_for("Prescott", 0));
    assert_null(wf_k_blas_core_for("unknown", 2));
    assert_null(wf_k_blas_core_for(NULL, 2));
    assert_int_equal(wf_k_blas_core_level("SAPPHIRERAPIDS"), 2);
    assert_int_equal(wf_k_blas_core_level("Zen"), 1);
    assert_int_equal(wf_k_blas_core_level("Prescott"), 0);
    /* cpuid against the compiler's own reading of it */
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    const int v4 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    assert_int_equal(wf_k_cpu_vector_level(), v4 && v3 ? 2 : v3 ? 1 : 0);
#endif
    /* with OPENBLAS_CORETYPE unset the running process already had the fix
     * (weft's main); here the hint is there exactly when a better core is */
#if !defined(WF_BLAS_BLIS)
    assert_true((wf_k_blas_hint() != NULL) == (wf_k_blas_better_core() != NULL));
#endif
    /* a variable the user set is left alone: no exec, the process goes on */
    const char *was = getenv("OPENBLAS_CORETYPE");
    char saved[64] = "";
    if (was)
        snprintf(saved, sizeof saved, "%s", was);
    char arg0[] = "test_kernels", *argv[] = {arg0, NULL};
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    wf_runtime_blas_fast_kernels(argv);
    assert_string_equal(getenv("OPENBLAS_CORETYPE"), "Prescott");
    if (was)
        setenv("OPENBLAS_CORETYPE", saved, 1);
    else
        unsetenv("OPENBLAS_CORETYPE");
    /* unset with kernels as wide as the CPU's: nothing to do either */
    if (!was && !wf_k_blas_better_core()) {
        wf_runtime_blas_fast_kernels(argv);
        assert_null(getenv("OPENBLAS_CORETYPE"));
    }
    wf_runtime_blas_fast_kernels(NULL); /* no arguments: nothing to re-execute */
    assert_true(strlen(wf_runtime_blas_describe()) > 0);
    assert_non_null(strstr(wf_runtime_blas_describe(), wf_k_blas_core()));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_core_choice),
        cmocka_unit_test(test_gemm_small),
        cmocka_unit_test_teardown(test_matmul, release_bufs),
        cmocka_unit_test_teardown(test_linear, release_bufs),
        cmocka_unit_test_teardown(test_binary, release_bufs),
        cmocka_unit_test_teardown(test_activations, release_bufs),
        cmocka_unit_test_teardown(test_vector_math, release_bufs),
        cmocka_unit_test_teardown(test_dropout, release_bufs),
        cmocka_unit_test_teardown(test_norms_softmax, release_bufs),
        cmocka_unit_test_teardown(test_attention, release_bufs),
        cmocka_unit_test_teardown(test_attention_causal_mask, release_bufs),
        cmocka_unit_test_teardown(test_embedding, release_bufs),
        cmocka_unit_test_teardown(test_rotary, release_bufs),
        cmocka_unit_test_teardown(test_cross_entropy, release_bufs),
        cmocka_unit_test_teardown(test_row_helpers, release_bufs),
        cmocka_unit_test_teardown(test_conv2d, release_bufs),
        cmocka_unit_test_teardown(test_conv_geom_check, release_bufs),
        cmocka_unit_test_teardown(test_pools, release_bufs),
        cmocka_unit_test_teardown(test_batchnorm, release_bufs),
        cmocka_unit_test_teardown(test_transpose, release_bufs),
        cmocka_unit_test_teardown(test_concat_split, release_bufs),
        cmocka_unit_test_teardown(test_moe_routing, release_bufs),
        cmocka_unit_test_teardown(test_moe_dispatch_combine, release_bufs),
        cmocka_unit_test_teardown(test_moe_kernels, release_bufs),
        cmocka_unit_test_teardown(test_blas_control, release_bufs),
        cmocka_unit_test_teardown(test_attention_bias, release_bufs),
        cmocka_unit_test_teardown(test_sigmoid_roll, release_bufs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
