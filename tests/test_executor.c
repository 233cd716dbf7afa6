/* Tests of the executor, the optimizers and the single-process trainer
 * (src/runtime/executor.c, optim.c, train.c).
 *
 * - Whole-model gradients of gpt-tiny, mlp-tiny and cnn-tiny against central
 *   finite differences of the loss (reference kernels, dropout on: its masks
 *   are a pure function of the stream, so the loss is a fixed function), on
 *   the largest-gradient element of every parameter tensor and a few others.
 * - The fast path against the reference path: loss and every parameter
 *   gradient within relative 1e-5 (norm of the difference over the norm).
 * - The memory plan reuses memory (arena below the sum of its buffers) and
 *   the arena's content does not leak between passes (a second forward and
 *   backward give bit-identical results).
 * - Gradient accumulation: two micro-batches accumulated equal the batch's
 *   gradient (times 2, since each loss is a mean).
 * - Optimizers against hand-computed updates (SGD with momentum, AdamW with
 *   bias correction and decoupled weight decay, clipping factor).
 * - Training: the loss falls on synthetic data over 50 steps (gpt-tiny with
 *   AdamW, mlp-tiny with SGD), two runs give bit-identical losses, and dear
 *   with one process gives the losses of ddp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "weft/models.h"
#include "weft/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static wf_exec *make_exec(const char *model, int64_t batch, int reference, uint64_t seed)
{
    wf_model_config m;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    wf_graph g;
    assert_int_equal(wf_model_build(&m, batch, &g), WF_OK);
    wf_exec_opts o = {reference, seed};
    wf_exec *e = NULL;
    wf_status st = wf_exec_create(&g, &o, &e);
    if (st != WF_OK)
        fprintf(stderr, "%s\n", wf_last_error());
    assert_int_equal(st, WF_OK);
    wf_graph_free(&g);
    return e;
}

/* Fills the inputs and labels with seeded values: ids and labels below the
 * vocabulary or class count, features uniform in [-1, 1). */
static void fill_inputs(wf_exec *e, uint64_t seed)
{
    const wf_graph *g = wf_exec_graph(e);
    int64_t classes = 0;
    for (int o = 0; o < g->nfwd; o++) {
        const wf_op *op = &g->ops[o];
        if (op->kind == WF_OP_CROSS_ENTROPY) {
            const wf_tensor *l = &g->tensors[op->in[0]];
            classes = l->shape[l->ndim - 1];
        }
    }
    for (int t = 0; t < g->ntensors; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (x->role != WF_ROLE_INPUT && x->role != WF_ROLE_LABEL)
            continue;
        /* Integer inputs index the rows of the table of the embedding reading them. */
        int64_t vocab = 1;
        for (int o = 0; o < g->nfwd; o++)
            if (g->ops[o].kind == WF_OP_EMBEDDING && g->ops[o].in[0] == t)
                vocab = g->tensors[g->ops[o].in[1]].shape[0];
        void *d = wf_exec_leaf_data(e, t);
        assert_non_null(d);
        int64_t n = wf_tensor_numel(x);
        for (int64_t i = 0; i < n; i++) {
            uint64_t r = mix(seed ^ mix((uint64_t)t * 1000003u + (uint64_t)i));
            if (x->role == WF_ROLE_LABEL)
                ((int32_t *)d)[i] = (int32_t)(r % (uint64_t)classes);
            else if (x->dtype == WF_DTYPE_INT32 || x->dtype == WF_DTYPE_INT64)
                ((int32_t *)d)[i] = (int32_t)(r % (uint64_t)vocab);
            else
                ((float *)d)[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
    }
}

static float loss_of(wf_exec *e)
{
    float loss = 0;
    assert_int_equal(wf_exec_forward(e, &loss), WF_OK);
    return loss;
}

/* ---- finite differences -------------------------------------------------------------- */

static void check_fd(const char *model, int64_t batch, float eps)
{
    wf_exec *e = make_exec(model, batch, 1, 7);
    fill_inputs(e, 99);
    wf_exec_set_stream(e, 3, 0);
    float l0 = loss_of(e);
    assert_true(isfinite(l0));
    assert_int_equal(wf_exec_backward(e, 0), WF_OK);
    int np = wf_exec_nparams(e);
    int checked = 0, bad = 0;
    for (int i = 0; i < np; i++) {
        const wf_exec_param *p = wf_exec_param_at(e, i);
        /* The largest gradient element, and one seeded other. */
        int64_t best = 0;
        for (int64_t j = 1; j < p->numel; j++)
            if (fabsf(p->grad[j]) > fabsf(p->grad[best]))
                best = j;
        int64_t picks[2] = {best, (int64_t)(mix((uint64_t)i) % (uint64_t)p->numel)};
        float g[2] = {p->grad[picks[0]], p->grad[picks[1]]};
        for (int k = 0; k < 2; k++) {
            float *w = &p->data[picks[k]];
            float keep = *w;
            *w = keep + eps;
            double lp = loss_of(e);
            *w = keep - eps;
            double lm = loss_of(e);
            *w = keep;
            double fd = (lp - lm) / (2.0 * (double)eps);
            double err = fabs(fd - (double)g[k]);
            /* float losses around 1..5: the difference quotient carries about
             * 1e-7 * loss / eps of rounding. */
            double tol = 3e-2 * fmax(fabs(fd), fabs((double)g[k])) + 4e-7 * fabs((double)l0) / (double)eps;
            checked++;
            if (err > tol) {
                bad++;
                fprintf(stderr, "%s %s[%lld]: backward %.6g, finite difference %.6g\n", model, p->name,
                        (long long)picks[k], (double)g[k], fd);
            }
        }
    }
    assert_true(checked >= 2 * np);
    assert_int_equal(bad, 0);
    wf_exec_free(e);
}

static void test_fd_gpt_tiny(void **state)
{
    (void)state;
    check_fd("gpt-tiny", 2, 1e-2f);
}

static void test_fd_mlp_tiny(void **state)
{
    (void)state;
    check_fd("mlp-tiny", 4, 1e-3f);
}

static void test_fd_cnn_tiny(void **state)
{
    (void)state;
    check_fd("cnn-tiny", 2, 1e-3f);
}

static void test_fd_bert_tiny(void **state)
{
    (void)state;
    check_fd("bert-tiny", 2, 1e-2f);
}

/* Mixtures of experts: router (softmax top-2, renormalized), dispatch by
 * capacity, SwiGLU experts, combine, a shared expert. The routing is
 * piecewise constant in the weights; eps is small against the score gaps of
 * this seed, so no perturbation flips an expert. */
static void test_fd_moe_tiny(void **state)
{
    (void)state;
    check_fd("moe-tiny", 2, 3e-3f);
}

/* ---- fast path against the reference ------------------------------------------------------- */

static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

static void check_fast_vs_ref(const char *model, int64_t batch)
{
    wf_exec *f = make_exec(model, batch, 0, 11), *r = make_exec(model, batch, 1, 11);
    fill_inputs(f, 5);
    fill_inputs(r, 5);
    wf_exec_set_stream(f, 1, 0);
    wf_exec_set_stream(r, 1, 0);
    float lf = loss_of(f), lr = loss_of(r);
    assert_true(fabs((double)lf - lr) <= 1e-5 * fabs((double)lr));
    assert_int_equal(wf_exec_backward(f, 0), WF_OK);
    assert_int_equal(wf_exec_backward(r, 0), WF_OK);
    for (int i = 0; i < wf_exec_nparams(f); i++) {
        const wf_exec_param *pf = wf_exec_param_at(f, i), *pr = wf_exec_param_at(r, i);
        assert_memory_equal(pf->data, pr->data, (size_t)pf->numel * sizeof(float));
        double d = rel_diff(pf->grad, pr->grad, pf->numel);
        if (d > 1e-5)
            fprintf(stderr, "%s %s: fast vs reference gradient differ by %.3g\n", model, pf->name, d);
        assert_true(d <= 1e-5);
    }
    wf_exec_free(f);
    wf_exec_free(r);
}

static void test_fast_vs_ref(void **state)
{
    (void)state;
    check_fast_vs_ref("gpt-tiny", 3);
    check_fast_vs_ref("mlp-tiny", 8);
    check_fast_vs_ref("cnn-tiny", 3);
    check_fast_vs_ref("bert-tiny", 2);
    /* The MoE kernels (BLAS products) against their naive versions, with
     * dropped tokens (cf = 1), dropless, and a sigmoid router. */
    check_fast_vs_ref("moe-tiny", 2);
    check_fast_vs_ref("moe-tiny:capacity=2", 2);
    check_fast_vs_ref("deepseek-tiny", 2);
}

/* ---- memory plan and repeatability --------------------------------------------------------- */

static void test_memory_plan(void **state)
{
    (void)state;
    wf_exec *e = make_exec("gpt-tiny", 4, 0, 1);
    wf_exec_memory m;
    wf_exec_memory_of(e, &m);
    assert_true(m.arena_bytes > 0);
    assert_true(m.arena_bytes < m.unplanned_bytes * 3 / 4);
    assert_int_equal(m.param_bytes % 64, 0);
    fill_inputs(e, 3);
    float l1 = loss_of(e);
    assert_int_equal(wf_exec_backward(e, 0), WF_OK);
    int64_t n = 0;
    float *g = wf_exec_grad_block(e, &n);
    float *g1 = malloc((size_t)n * sizeof *g1);
    assert_non_null(g1);
    memcpy(g1, g, (size_t)n * sizeof *g1);
    float l2 = loss_of(e);
    assert_int_equal(wf_exec_backward(e, 0), WF_OK);
    assert_memory_equal(&l1, &l2, sizeof l1);
    assert_memory_equal(g1, g, (size_t)n * sizeof *g1);
    /* Accumulation adds: twice the same micro-batch doubles the gradient (a
     * backward needs its forward: the arena reuses the activations' memory). */
    loss_of(e);
    assert_int_equal(wf_exec_backward(e, 1), WF_OK);
    for (int64_t i = 0; i < n; i++)
        assert_true(g[i] == 2.0f * g1[i]);
    free(g1);
    wf_exec_free(e);
}

/* Two micro-batches of 2 accumulated against one batch of 4 (no dropout in mlp-tiny). */
static void test_accumulation(void **state)
{
    (void)state;
    wf_exec *big = make_exec("mlp-tiny", 4, 0, 9), *small = make_exec("mlp-tiny", 2, 0, 9);
    fill_inputs(big, 21);
    const wf_graph *g = wf_exec_graph(big);
    int x = wf_exec_find_tensor(big, "images"), y = wf_exec_find_tensor(big, "labels");
    assert_true(x >= 0 && y >= 0);
    int64_t nf = g->tensors[x].shape[1];
    float *xb = wf_exec_leaf_data(big, x), *xs = wf_exec_leaf_data(small, x);
    int32_t *yb = wf_exec_leaf_data(big, y), *ys = wf_exec_leaf_data(small, y);
    loss_of(big);
    assert_int_equal(wf_exec_backward(big, 0), WF_OK);
    for (int mb = 0; mb < 2; mb++) {
        memcpy(xs, xb + mb * 2 * nf, (size_t)(2 * nf) * sizeof(float));
        memcpy(ys, yb + mb * 2, 2 * sizeof(int32_t));
        loss_of(small);
        assert_int_equal(wf_exec_backward(small, mb > 0), WF_OK);
    }
    for (int i = 0; i < wf_exec_nparams(big); i++) {
        const wf_exec_param *pb = wf_exec_param_at(big, i), *ps = wf_exec_param_at(small, i);
        for (int64_t j = 0; j < pb->numel; j++)
            assert_true(fabsf(ps->grad[j] - 2.0f * pb->grad[j]) <= 1e-5f * (1.0f + fabsf(pb->grad[j])));
    }
    wf_exec_free(big);
    wf_exec_free(small);
}

/* A graph the runtime cannot run is refused with a message. */
static void test_refuses_fp16(void **state)
{
    (void)state;
    wf_model_config m;
    assert_int_equal(wf_model_lookup("gpt:layers=1,hidden=32,heads=2,seq=8,vocab=16", &m), WF_OK);
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 2, &g), WF_OK);
    wf_exec *e = NULL;
    wf_exec_opts o = {0, 1};
    wf_status st = wf_exec_create(&g, &o, &e);
    if (m.dtype != WF_DTYPE_FP32) {
        assert_int_equal(st, WF_INVAL);
        assert_non_null(strstr(wf_last_error(), "fp32"));
        assert_null(e);
    } else {
        wf_exec_free(e);
    }
    wf_graph_free(&g);
}

/* ---- optimizers ----------------------------------------------------------------------------- */

static void test_optimizers(void **state)
{
    (void)state;
    wf_exec *e = make_exec("mlp-tiny", 2, 0, 4);
    const wf_exec_param *p = wf_exec_param_at(e, 0); /* fc1.weight, decayed */
    assert_true(p->decay);
    for (int64_t j = 0; j < p->numel; j++)
        p->grad[j] = 0.5f;
    float w0 = p->data[0];

    wf_optim_config c;
    wf_optim_defaults(WF_OPTIM_SGD, &c);
    c.lr = 0.1;
    c.momentum = 0.5;
    c.weight_decay = 0.0;
    wf_optim *o = NULL;
    assert_int_equal(wf_optim_create(&c, e, &o), WF_OK);
    wf_optim_update(o, e, 0, 2.0f, 1); /* g' = 1: buf = 1, w -= 0.1 */
    assert_true(fabsf(p->data[0] - (w0 - 0.1f)) < 1e-6f);
    wf_optim_update(o, e, 0, 2.0f, 2); /* buf = 1.5, w -= 0.15 */
    assert_true(fabsf(p->data[0] - (w0 - 0.25f)) < 1e-6f);
    assert_true(fabsf(wf_optim_state(o, 0, 0)[0] - 1.5f) < 1e-6f);
    wf_optim_free(o);

    p->data[0] = w0 = 0.25f;
    wf_optim_defaults(WF_OPTIM_ADAMW, &c);
    c.lr = 0.01;
    c.weight_decay = 0.1;
    assert_int_equal(wf_optim_create(&c, e, &o), WF_OK);
    assert_int_equal(wf_optim_nstate(o), 2);
    wf_optim_update(o, e, 0, 1.0f, 1);
    /* Step 1: m/(1-b1) = g, v/(1-b2) = g^2, so the step is lr * g/(|g|+eps) = lr. */
    double want = w0 * (1 - 0.01 * 0.1) - 0.01 * 0.5 / (0.5 + 1e-8);
    assert_true(fabs(p->data[0] - want) < 1e-6);
    wf_optim_update(o, e, 0, 1.0f, 2);
    double m2 = 0.9 * 0.05 + 0.1 * 0.5, v2 = 0.999 * 0.00025 + 0.001 * 0.25;
    double want2 = want * (1 - 0.001) - 0.01 * (m2 / (1 - 0.81)) / (sqrt(v2 / (1 - 0.998001)) + 1e-8);
    assert_true(fabs(p->data[0] - want2) < 1e-6);
    wf_optim_free(o);

    assert_true(fabs(wf_optim_clip_factor(&c, 4.0) - 0.25) < 1e-12);
    assert_true(wf_optim_clip_factor(&c, 0.5) == 1.0);
    c.lr = -1;
    assert_int_equal(wf_optim_check(&c), WF_INVAL);
    wf_optim_kind k;
    assert_int_equal(wf_optim_parse("adam", &k), WF_INVAL);
    wf_exec_free(e);
}

/* ---- training -------------------------------------------------------------------------------- */

static void run_losses(const char *model, const char *optim, double lr, const char *comm, int64_t batch, int steps,
                       double *losses)
{
    wf_train_config c;
    memset(&c, 0, sizeof c);
    c.model = model;
    c.data = "synthetic";
    c.batch = batch;
    c.plan = "auto";
    c.comm = comm;
    wf_optim_kind k;
    assert_int_equal(wf_optim_parse(optim, &k), WF_OK);
    wf_optim_defaults(k, &c.optim);
    c.optim.lr = lr;
    c.seed = 5;
    wf_train *t = NULL;
    wf_status st = wf_train_create(&c, &t);
    if (st != WF_OK)
        fprintf(stderr, "%s\n", wf_last_error());
    assert_int_equal(st, WF_OK);
    for (int i = 0; i < steps; i++) {
        wf_train_stats s;
        assert_int_equal(wf_train_step(t, &s), WF_OK);
        assert_int_equal(s.step, i + 1);
        losses[i] = s.loss;
    }
    assert_int_equal(wf_train_sync(t), WF_OK);
    wf_train_free(t);
}

static double mean(const double *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    return s / n;
}

static void test_loss_falls(void **state)
{
    (void)state;
    double a[50], b[50];
    run_losses("gpt-tiny", "adamw", 3e-3, NULL, 8, 50, a);
    fprintf(stderr, "gpt-tiny: first %.4f last %.4f\n", a[0], a[49]);
    assert_true(mean(a + 45, 5) < 0.6 * mean(a, 5));
    run_losses("gpt-tiny", "adamw", 3e-3, NULL, 8, 50, b);
    assert_memory_equal(a, b, sizeof a);
    run_losses("mlp-tiny", "sgd", 0.05, "dear:0.01", 16, 50, a);
    fprintf(stderr, "mlp-tiny: first %.4f last %.4f\n", a[0], a[49]);
    assert_true(mean(a + 45, 5) < 0.5 * mean(a, 5));
}

/* dear (deferred, per-group updates) computes the losses of ddp in one process. */
static void test_dear_equals_ddp_single(void **state)
{
    (void)state;
    double a[8], b[8];
    run_losses("gpt-tiny", "adamw", 1e-3, "ddp:0.02", 4, 8, a);
    run_losses("gpt-tiny", "adamw", 1e-3, "dear:0.02", 4, 8, b);
    for (int i = 0; i < 8; i++)
        assert_true(fabs(a[i] - b[i]) <= 1e-6 * fabs(a[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_gpt_tiny),
        cmocka_unit_test(test_fd_mlp_tiny),
        cmocka_unit_test(test_fd_cnn_tiny),
        cmocka_unit_test(test_fd_bert_tiny),
        cmocka_unit_test(test_fd_moe_tiny),
        cmocka_unit_test(test_fast_vs_ref),
        cmocka_unit_test(test_memory_plan),
        cmocka_unit_test(test_accumulation),
        cmocka_unit_test(test_refuses_fp16),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_loss_falls),
        cmocka_unit_test(test_dear_equals_ddp_single),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
