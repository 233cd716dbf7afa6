/* Tests of ONNX import and export.
 *
 * - Shapes: every model of libonnx-testdata (node, pytorch-converted,
 *   pytorch-operator, simple) that imports must give its outputs the dims of
 *   the reference output_N.pb; a model that does not import must fail with a
 *   user error (WF_INVAL / WF_FORMAT) whose message names the node, never a
 *   crash or an internal error.
 * - Numerics: a representative set of node models runs through the
 *   runtime's fp32 CPU kernels (a forward interpreter over the imported IR,
 *   below) on input_N.pb and matches ONNX's reference output_N.pb (rtol
 *   1e-4), which checks the importer's mapping and our kernels at once.
 * - Round trip: zoo models exported with wf_onnx_save and imported again have
 *   the same ops (kind and output shape, in order), parameter count and
 *   forward/backward FLOPs; parameter data written is read back exactly;
 *   a file exported at one batch builds at another like the zoo does.
 * - Bad files: missing, empty, garbage, truncated, an unsupported op.
 * - The zoo hook: MODEL "x.onnx" is family onnx, with a loss attached.
 * Tests that need libonnx-testdata skip (with a note) when it is absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/kernels-impl.h"
#include <cjson/cJSON.h>
#include "weft/models.h"
#include "weft/onnx.h"
#include "weft/runtime.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TESTDATA "/usr/share/libonnx-testdata/data"

static int have_testdata(void)
{
    struct stat s;
    if (stat(TESTDATA "/node", &s) == 0 && S_ISDIR(s.st_mode))
        return 1;
    printf("note: %s not found (apt install libonnx-testdata): skipped\n", TESTDATA);
    return 0;
}

static int file_exists(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0;
}

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/weft-test-onnx-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- a forward interpreter over the IR on the fp32 kernels ---------------------------- */

static int64_t numel(const wf_tensor *t) { return wf_tensor_numel(t); }

static void extents(const wf_tensor *t, int axis, int *ax, int64_t *outer, int64_t *inner)
{
    int a = axis < 0 ? axis + t->ndim : axis;
    int64_t o = 1, in = 1;
    for (int i = 0; i < a; i++)
        o *= t->shape[i];
    for (int i = a + 1; i < t->ndim; i++)
        in *= t->shape[i];
    *ax = a;
    *outer = o;
    *inner = in;
}

/* The executor's geometry of a conv2d or pool op, which must be valid here. */
static void conv_geom(const wf_graph *g, const wf_op *op, wf_k_conv_geom *c)
{
    assert_int_equal(wf_k_conv_geom_of(g, op, c), WF_OK);
}

/* Runs the forward ops of g; d[t] holds tensor t (floats, or int32 for int
 * tensors): leaves filled by the caller, the rest allocated here. */
static void interpret(const wf_graph *g, void **d)
{
    const wf_tensor *T = g->tensors;
#define F(t) ((float *)d[(t)])
    for (int o = 0; o < g->nfwd; o++) {
        const wf_op *op = &g->ops[o];
        for (int i = 0; i < op->nout; i++) {
            int t = op->out[i];
            d[t] = calloc((size_t)(numel(&T[t]) ? numel(&T[t]) : 1), sizeof(float));
        }
        const wf_tensor *x = &T[op->in[0]];
        float *y = F(op->out[0]);
        switch (op->kind) {
        case WF_OP_MATMUL: {
            int64_t m = T[op->out[0]].shape[0], n = T[op->out[0]].shape[1];
            int64_t k = op->attr.trans_a ? x->shape[0] : x->shape[1];
            wf_k_matmul_fwd(F(op->in[0]), F(op->in[1]), y, m, k, n, op->attr.trans_a, op->attr.trans_b);
            break;
        }
        case WF_OP_BATCH_MATMUL: {
            const wf_tensor *yy = &T[op->out[0]];
            int nd = yy->ndim;
            int64_t m = yy->shape[nd - 2], n = yy->shape[nd - 1];
            int64_t k = op->attr.trans_a ? x->shape[nd - 2] : x->shape[nd - 1];
            wf_k_batch_matmul_fwd(F(op->in[0]), F(op->in[1]), y, numel(yy) / (m * n), m, k, n,
                                  op->attr.trans_a, op->attr.trans_b);
            break;
        }
        case WF_OP_LINEAR: {
            const wf_tensor *w = &T[op->in[1]];
            wf_k_linear_fwd(F(op->in[0]), F(op->in[1]), op->nin > 2 ? F(op->in[2]) : NULL, y,
                            numel(x) / w->shape[0], w->shape[0], w->shape[1]);
            break;
        }
        case WF_OP_BIAS_ADD: {
            int64_t n = x->shape[x->ndim - 1];
            wf_k_bias_add_fwd(F(op->in[0]), F(op->in[1]), y, numel(x) / n, n);
            break;
        }
        case WF_OP_ADD:
            wf_k_add_fwd(F(op->in[0]), F(op->in[1]), y, numel(x), numel(&T[op->in[1]]));
            break;
        case WF_OP_MUL:
            if (op->nin > 1)
                wf_k_mul_fwd(F(op->in[0]), F(op->in[1]), y, numel(x), numel(&T[op->in[1]]), 1.0f);
            else
                wf_k_mul_fwd(F(op->in[0]), NULL, y, numel(x), numel(x), (float)op->attr.scale);
            break;
        case WF_OP_RELU: wf_k_relu_fwd(F(op->in[0]), y, numel(x)); break;
        case WF_OP_GELU: wf_k_gelu_fwd(F(op->in[0]), y, numel(x)); break;
        case WF_OP_SILU: wf_k_silu_fwd(F(op->in[0]), y, numel(x)); break;
        case WF_OP_TANH: wf_k_tanh_fwd(F(op->in[0]), y, numel(x)); break;
        case WF_OP_SIGMOID: wf_k_sigmoid_fwd(F(op->in[0]), y, numel(x)); break;
        case WF_OP_ROLL: wf_k_roll_fwd(F(op->in[0]), y, x->ndim, x->shape, op->attr.shifts); break;
        case WF_OP_HARDSWISH: wf_k_hardswish_fwd(F(op->in[0]), y, numel(x)); break;
        case WF_OP_CLIP:
            wf_k_clip_fwd(F(op->in[0]), y, numel(x), (float)op->attr.alpha, (float)op->attr.beta,
                          (float)op->attr.lo, (float)op->attr.hi);
            break;
        case WF_OP_CAST: wf_k_cast_fwd((const int32_t *)d[op->in[0]], y, numel(x)); break;
        case WF_OP_EXPAND:
            wf_k_expand_fwd(F(op->in[0]), y, x->ndim, x->shape, T[op->out[0]].ndim, T[op->out[0]].shape);
            break;
        case WF_OP_DROPOUT:
            wf_k_dropout_fwd(F(op->in[0]), y, numel(x), (float)op->attr.p, op->attr.seed, 0);
            break;
        case WF_OP_LAYERNORM: {
            int64_t h = x->shape[x->ndim - 1];
            wf_k_layernorm_fwd(F(op->in[0]), F(op->in[1]), F(op->in[2]), y, NULL, numel(x) / h, h,
                               (float)op->attr.eps);
            break;
        }
        case WF_OP_RMSNORM: {
            int64_t h = x->shape[x->ndim - 1];
            wf_k_rmsnorm_fwd(F(op->in[0]), F(op->in[1]), y, NULL, numel(x) / h, h, (float)op->attr.eps);
            break;
        }
        case WF_OP_SOFTMAX: {
            int64_t n = x->shape[x->ndim - 1];
            wf_k_softmax_fwd(F(op->in[0]), y, numel(x) / n, n);
            break;
        }
        case WF_OP_ATTENTION: {
            wf_k_attn at;
            memset(&at, 0, sizeof at);
            at.b = x->shape[0];
            at.s = x->shape[1];
            at.heads = op->attr.heads;
            at.kv_heads = op->attr.kv_heads ? op->attr.kv_heads : op->attr.heads;
            at.d = x->shape[2] / op->attr.heads;
            at.causal = op->attr.causal;
            at.scale = (float)op->attr.scale;
            float *ws = calloc(wf_k_attention_ws_floats(&at), sizeof(float));
            wf_k_attention_fwd(&at, F(op->in[0]), F(op->in[1]), F(op->in[2]), y, NULL, ws);
            free(ws);
            break;
        }
        case WF_OP_EMBEDDING: {
            const wf_tensor *tab = &T[op->in[1]];
            assert_int_equal(wf_k_embedding_fwd((const int32_t *)d[op->in[0]], F(op->in[1]), y, numel(x),
                                                tab->shape[0], tab->shape[1]),
                             WF_OK);
            break;
        }
        case WF_OP_ROTARY:
            wf_k_rotary_fwd(F(op->in[0]), y, x->shape[0], x->shape[1], op->attr.heads,
                            x->shape[2] / op->attr.heads, (float)op->attr.base);
            break;
        case WF_OP_CROSS_ENTROPY: {
            int64_t v = x->shape[x->ndim - 1];
            assert_int_equal(wf_k_cross_entropy_fwd(F(op->in[0]), (const int32_t *)d[op->in[1]], y, NULL,
                                                    numel(x) / v, v),
                             WF_OK);
            break;
        }
        case WF_OP_CONV2D: {
            wf_k_conv_geom c;
            conv_geom(g, op, &c);
            float *ws = calloc(wf_k_conv2d_ws_floats(&c), sizeof(float));
            wf_k_conv2d_fwd(&c, F(op->in[0]), F(op->in[1]), op->nin > 2 ? F(op->in[2]) : NULL, y, ws);
            free(ws);
            break;
        }
        case WF_OP_MAXPOOL:
        case WF_OP_AVGPOOL: {
            wf_k_conv_geom c;
            conv_geom(g, op, &c);
            if (op->kind == WF_OP_MAXPOOL)
                wf_k_maxpool_fwd(&c, F(op->in[0]), y);
            else
                wf_k_avgpool_fwd(&c, F(op->in[0]), y);
            break;
        }
        case WF_OP_GLOBAL_AVGPOOL: {
            int64_t nc = x->shape[0] * x->shape[1];
            wf_k_global_avgpool_fwd(F(op->in[0]), y, nc, numel(x) / nc);
            break;
        }
        case WF_OP_BATCHNORM: {
            int64_t n = x->shape[0], c = x->shape[1];
            wf_k_batchnorm_fwd(F(op->in[0]), F(op->in[1]), F(op->in[2]), y, NULL, n, c, numel(x) / (n * c),
                               (float)op->attr.eps);
            break;
        }
        case WF_OP_RESHAPE:
        case WF_OP_FLATTEN:
            memcpy(y, d[op->in[0]], (size_t)numel(x) * sizeof(float));
            break;
        case WF_OP_TRANSPOSE:
            wf_k_transpose_fwd(F(op->in[0]), y, x->ndim, x->shape, op->attr.perm);
            break;
        case WF_OP_CONCAT: {
            int ax;
            int64_t outer, inner, sizes[WF_MAX_INPUTS];
            const float *xs[WF_MAX_INPUTS];
            extents(&T[op->out[0]], op->attr.axis, &ax, &outer, &inner);
            for (int i = 0; i < op->nin; i++) {
                xs[i] = F(op->in[i]);
                sizes[i] = T[op->in[i]].shape[ax];
            }
            wf_k_concat_fwd(xs, op->nin, sizes, y, outer, inner);
            break;
        }
        case WF_OP_SPLIT: {
            int ax;
            int64_t outer, inner, sizes[WF_MAX_OUTPUTS];
            float *ys[WF_MAX_OUTPUTS];
            extents(x, op->attr.axis, &ax, &outer, &inner);
            for (int i = 0; i < op->nout; i++) {
                ys[i] = F(op->out[i]);
                sizes[i] = T[op->out[i]].shape[ax];
            }
            wf_k_split_fwd(F(op->in[0]), ys, op->nout, sizes, outer, inner);
            break;
        }
        case WF_OP_ROUTER:
        case WF_OP_MOE_DISPATCH:
        case WF_OP_GROUPED_MLP:
        case WF_OP_MOE_COMBINE: /* ONNX imports have no experts */
        case WF_OP_COUNT:
            fail_msg("bad op");
        }
    }
#undef F
}

/* ---- node models -------------------------------------------------------------------------- */

/* Imports dir/model.onnx at its own shapes and, when `numerics`, runs it on
 * test_data_set_0 and compares every output (rtol, atol). Returns WF_OK, or
 * the import's status (the model does not map). *worst: largest relative
 * error seen. */
static wf_status check_model(const char *dir, int numerics, double rtol, double *worst)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    wf_onnx_model *m = NULL;
    wf_status st = wf_onnx_open(path, &m);
    if (st != WF_OK)
        return st;
    wf_graph g;
    wf_onnx_opts o = {0, NULL, 0};
    st = wf_onnx_build(m, &o, &g);
    if (st != WF_OK) {
        const char *msg = wf_last_error();
        if (!(st == WF_INVAL || st == WF_FORMAT))
            fail_msg("%s: status %s: %s", path, wf_status_name(st), msg);
        if (!strstr(msg, "node") && !strstr(msg, "input") && !strstr(msg, "initializer") &&
            !strstr(msg, "output"))
            fail_msg("%s: message names no node or value: %s", path, msg);
        wf_graph_free(&g);
        wf_onnx_close(m);
        return st;
    }
    /* shapes: each output as the reference output file has it */
    for (int i = 0; i < wf_onnx_noutputs(m); i++) {
        char op[600];
        snprintf(op, sizeof op, "%s/test_data_set_0/output_%d.pb", dir, i);
        if (!file_exists(op))
            continue;
        wf_onnx_tensor ref;
        assert_int_equal(wf_onnx_read_tensor(op, &ref), WF_OK);
        int t, nd;
        int64_t shape[WF_MAX_DIMS];
        assert_int_equal(wf_onnx_output(m, i, NULL, &t, &nd, shape), WF_OK);
        if (nd < 0) { /* an output weft does not compute (running statistics) */
            wf_onnx_tensor_free(&ref);
            continue;
        }
        if (nd != ref.ndim)
            fail_msg("%s output %d: rank %d, reference %d", dir, i, nd, ref.ndim);
        for (int k = 0; k < nd; k++)
            if (shape[k] != ref.shape[k])
                fail_msg("%s output %d: dim %d is %lld, reference %lld", dir, i, k,
                         (long long)shape[k], (long long)ref.shape[k]);
        if (t >= 0)
            assert_int_equal(wf_tensor_numel(&g.tensors[t]), ref.numel);
        wf_onnx_tensor_free(&ref);
    }
    if (numerics) {
        void **d = calloc((size_t)g.ntensors, sizeof *d);
        int nin = 0;
        for (int t = 0; t < g.ntensors; t++) {
            const wf_tensor *x = &g.tensors[t];
            int64_t n = wf_tensor_numel(x);
            if (x->role == WF_ROLE_PARAM) {
                d[t] = calloc((size_t)(n ? n : 1), sizeof(float));
                assert_int_equal(wf_onnx_param_data(m, &g, t, d[t], n), WF_OK);
            } else if (x->role == WF_ROLE_INPUT || x->role == WF_ROLE_LABEL) {
                char ip[600];
                snprintf(ip, sizeof ip, "%s/test_data_set_0/input_%d.pb", dir, nin++);
                wf_onnx_tensor in;
                assert_int_equal(wf_onnx_read_tensor(ip, &in), WF_OK);
                assert_int_equal(in.numel, n);
                d[t] = calloc((size_t)(n ? n : 1), sizeof(float));
                for (int64_t i = 0; i < n; i++) {
                    if (in.f32)
                        ((float *)d[t])[i] = in.f32[i];
                    else
                        ((int32_t *)d[t])[i] = (int32_t)in.i64[i];
                }
                wf_onnx_tensor_free(&in);
            }
        }
        interpret(&g, d);
        for (int i = 0; i < wf_onnx_noutputs(m); i++) {
            char op[600];
            snprintf(op, sizeof op, "%s/test_data_set_0/output_%d.pb", dir, i);
            int t;
            assert_int_equal(wf_onnx_output(m, i, NULL, &t, NULL, NULL), WF_OK);
            if (t < 0 || !file_exists(op))
                continue;
            wf_onnx_tensor ref;
            assert_int_equal(wf_onnx_read_tensor(op, &ref), WF_OK);
            const float *y = d[t];
            for (int64_t k = 0; k < ref.numel; k++) {
                double want = ref.f32[k], got = y[k], err = fabs(got - want);
                double rel = err / (fabs(want) > 1e-3 ? fabs(want) : 1e-3);
                if (rel > *worst)
                    *worst = rel;
                if (err > rtol * fabs(want) + 1e-5)
                    fail_msg("%s output %d element %lld: got %.8g, reference %.8g", dir, i,
                             (long long)k, got, want);
            }
            wf_onnx_tensor_free(&ref);
        }
        for (int t = 0; t < g.ntensors; t++)
            free(d[t]);
        free(d);
    }
    wf_graph_free(&g);
    wf_onnx_close(m);
    return WF_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every test model imports or fails with a user error naming the node; the
 * ones that import have the reference output shapes. */
static void test_testdata_shapes(void **state)
{
    (void)state;
    if (!have_testdata())
        return;
    const char *sets[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
    int imported = 0, total = 0;
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        char dirp[512];
        snprintf(dirp, sizeof dirp, "%s/%s", TESTDATA, sets[s]);
        DIR *dir = opendir(dirp);
        if (!dir)
            continue;
        char *names[2048];
        int n = 0;
        struct dirent *de;
        while ((de = readdir(dir)) && n < 2048)
            if (de->d_name[0] != '.')
                names[n++] = strdup(de->d_name);
        closedir(dir);
        qsort(names, (size_t)n, sizeof names[0], by_name);
        for (int i = 0; i < n; i++) {
            char p[1024], mp[1100];
            snprintf(p, sizeof p, "%s/%s", dirp, names[i]);
            snprintf(mp, sizeof mp, "%s/model.onnx", p);
            if (file_exists(mp)) {
                double worst = 0;
                total++;
                imported += check_model(p, 0, 0, &worst) == WF_OK;
            }
            free(names[i]);
        }
    }
    printf("testdata: %d of %d models import; all have the reference output shapes\n",
           imported, total);
    assert_true(total > 900);
    assert_true(imported >= 150);
}

/* ONNX's reference outputs vs our kernels. */
static void test_testdata_numerics(void **state)
{
    (void)state;
    if (!have_testdata())
        return;
    static const char *const models[] = {
        "node/test_matmul_2d", "node/test_matmul_3d", "node/test_matmul_4d",
        "node/test_gemm_default_no_bias", "node/test_gemm_default_vector_bias",
        "node/test_gemm_default_matrix_bias", "node/test_gemm_default_scalar_bias",
        "node/test_gemm_default_single_elem_vector_bias", "node/test_gemm_default_zero_bias",
        "node/test_gemm_transposeA", "node/test_gemm_transposeB", "node/test_gemm_alpha",
        "node/test_gemm_beta", "node/test_gemm_all_attributes",
        "node/test_add", "node/test_add_bcast", "node/test_mul", "node/test_mul_bcast",
        "node/test_relu", "node/test_basic_conv_with_padding",
        "node/test_basic_conv_without_padding", "node/test_conv_with_strides_padding",
        "node/test_conv_with_strides_no_padding", "node/test_conv_with_autopad_same",
        "node/test_maxpool_2d_default", "node/test_maxpool_2d_strides",
        "node/test_maxpool_2d_precomputed_pads",
        "node/test_maxpool_1d_default", "node/test_averagepool_2d_default",
        "node/test_averagepool_2d_strides", 
        "node/test_averagepool_1d_default", "node/test_globalaveragepool",
        "node/test_globalaveragepool_precomputed", "node/test_globalmaxpool",
        "node/test_batchnorm_example_training_mode", "node/test_batchnorm_epsilon_training_mode",
        "node/test_softmax_axis_0", "node/test_softmax_axis_1", "node/test_softmax_axis_2",
        "node/test_softmax_default_axis", "node/test_softmax_negative_axis",
        "node/test_softmax_example", "node/test_softmax_large_number",
        "node/test_layer_normalization_2d_axis0", "node/test_layer_normalization_3d_axis1_epsilon",
        "node/test_layer_normalization_4d_axis_negative_1", "node/test_layer_normalization_4d_axis2",
        "node/test_layer_normalization_default_axis",
        "node/test_flatten_axis0", "node/test_flatten_axis1", "node/test_flatten_axis2",
        "node/test_flatten_default_axis", "node/test_flatten_negative_axis1",
        
        "node/test_transpose_default",
        "node/test_transpose_all_permutations_3", "node/test_concat_1d_axis_0",
        "node/test_concat_2d_axis_1", "node/test_concat_3d_axis_negative_2",
        "node/test_split_equal_parts_2d", 
        
        "node/test_sce_mean", "node/test_sce_mean_3d", 
        "pytorch-converted/test_Conv2d", "pytorch-converted/test_Conv2d_groups",
        "pytorch-converted/test_Conv2d_depthwise_padded", "pytorch-converted/test_Conv2d_strided",
        "pytorch-converted/test_Conv1d", "pytorch-converted/test_Conv1d_pad2",
        "pytorch-converted/test_Linear", "pytorch-converted/test_Linear_no_bias",
        "pytorch-converted/test_Embedding", "pytorch-converted/test_MaxPool2d",
        "pytorch-converted/test_AvgPool2d", "pytorch-converted/test_ReLU",
        "pytorch-converted/test_Softmax", "pytorch-operator/test_operator_flatten",
        "pytorch-operator/test_operator_mm", "pytorch-operator/test_operator_addmm",
        "pytorch-operator/test_operator_conv", "pytorch-operator/test_operator_maxpool",
        "pytorch-operator/test_operator_concat2", "pytorch-operator/test_operator_permute2",
        "pytorch-operator/test_operator_view",
    };
    double worst = 0;
    int ran = 0, failed = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", TESTDATA, models[i]);
        wf_status st = check_model(p, 1, 1e-4, &worst);
        if (st != WF_OK) {
            printf("FAIL: %s does not import: %s\n", models[i], wf_last_error());
            failed++;
        }
        ran++;
    }
    assert_int_equal(failed, 0);
    printf("numerics: %d models match ONNX's reference outputs (worst relative error %.2e)\n",
           ran, worst);
}

/* Models that must be refused, with the node and the reason named. */
static void test_testdata_refused(void **state)
{
    (void)state;
    if (!have_testdata())
        return;
    static const struct {
        const char *model, *words[3];
    } cases[] = {
        {"node/test_sigmoid", {"Sigmoid", "node 0", "not supported"}},
        {"node/test_maxpool_2d_same_lower", {"asymmetric", "MaxPool", "node 0"}},
        {"node/test_maxpool_2d_pads", {"more than half the kernel", "MaxPool", "node 0"}},
        {"node/test_maxpool_2d_dilations", {"dilation", "MaxPool", "node 0"}},
        {"node/test_averagepool_2d_pads", {"count_include_pad", "AveragePool", "node 0"}},
        {"node/test_logsoftmax_axis_0", {"LogSoftmax", "not supported", "node 0"}},
        {"node/test_maxpool_3d_default", {"spatial", "MaxPool", "node 0"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", TESTDATA, cases[i].model);
        double worst = 0;
        wf_status st = check_model(p, 0, 0, &worst);
        if (st != WF_INVAL)
            fail_msg("%s: status %s (expected INVAL)", cases[i].model, wf_status_name(st));
        for (int k = 0; k < 3; k++)
            if (!strstr(wf_last_error(), cases[i].words[k]))
                fail_msg("%s: message lacks '%s': %s", cases[i].model, cases[i].words[k],
                         wf_last_error());
    }
}

/* ---- round trip through export ------------------------------------------------------------ */

static void assert_kinds(const wf_graph *g, const char *want)
{
    char got[512] = "";
    for (int i = 0; i < g->nfwd; i++) {
        strcat(got, i ? "," : "");
        strcat(got, wf_op_name(g->ops[i].kind));
    }
    if (strcmp(got, want) != 0)
        fail_msg("ops %s, expected %s", got, want);
}

static void build_zoo(const char *spec, int64_t batch, wf_graph *g)
{
    wf_model_config m;
    if (wf_model_lookup(spec, &m) != WF_OK)
        fail_msg("lookup %s: %s", spec, wf_last_error());
    if (wf_model_build(&m, batch, g) != WF_OK)
        fail_msg("build %s: %s", spec, wf_last_error());
}

static void assert_same_graph(const char *what, const wf_graph *a, const wf_graph *b)
{
    if (a->nfwd != b->nfwd)
        fail_msg("%s: %d forward ops, re-imported %d", what, a->nfwd, b->nfwd);
    for (int i = 0; i < a->nfwd; i++) {
        const wf_op *x = &a->ops[i], *y = &b->ops[i];
        if (x->kind != y->kind)
            fail_msg("%s: op %d '%s' is %s, re-imported %s", what, i, x->name, wf_op_name(x->kind),
                     wf_op_name(y->kind));
        if (x->nin != y->nin || x->nout != y->nout)
            fail_msg("%s: op %d '%s': inputs/outputs differ", what, i, x->name);
        for (int k = 0; k < x->nout; k++) {
            const wf_tensor *tx = &a->tensors[x->out[k]], *ty = &b->tensors[y->out[k]];
            char bx[96], by[96];
            if (strcmp(wf_shape_str(tx, bx, sizeof bx), wf_shape_str(ty, by, sizeof by)) != 0)
                fail_msg("%s: op %d '%s' output %d: %s, re-imported %s", what, i, x->name, k, bx, by);
        }
    }
    wf_graph_totals ta, tb;
    wf_graph_totals_of(a, &ta);
    wf_graph_totals_of(b, &tb);
    if (ta.params != tb.params || ta.fwd_flops != tb.fwd_flops || ta.bwd_flops != tb.bwd_flops ||
        ta.saved_bytes != tb.saved_bytes)
        fail_msg("%s: params %.0f/%.0f fwd %.6g/%.6g bwd %.6g/%.6g saved %.6g/%.6g", what,
                 ta.params, tb.params, ta.fwd_flops, tb.fwd_flops, ta.bwd_flops, tb.bwd_flops,
                 ta.saved_bytes, tb.saved_bytes);
    assert_true(b->loss >= 0);
}

static void test_roundtrip_zoo(void **state)
{
    (void)state;
    static const char *const zoo[] = {"mlp",      "cnn-tiny",  "resnet50", "vgg16",
                                      "gpt-tiny", "bert-tiny", "llama:layers=2,hidden=64,heads=4,kv_heads=2,seq=16,vocab=96,dtype=fp32"};
    for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++) {
        wf_graph a, b;
        build_zoo(zoo[i], 2, &a);
        char path[512];
        snprintf(path, sizeof path, "%s/m%zu.onnx", tmpdir, i);
        if (wf_onnx_save(&a, path, NULL) != WF_OK)
            fail_msg("save %s: %s", zoo[i], wf_last_error());
        if (wf_onnx_load(path, 2, &b) != WF_OK)
            fail_msg("re-import %s: %s", zoo[i], wf_last_error());
        assert_same_graph(zoo[i], &a, &b);
        wf_graph_free(&a);
        wf_graph_free(&b);
    }
}

/* Ops the zoo does not use, in a hand-built graph (fp16 like the large
 * zoo): each exports and comes back as itself. */
static void test_roundtrip_ops(void **state)
{
    (void)state;
    wf_graph a, b;
    wf_graph_init(&a, "ops");
    const wf_dtype h = WF_DTYPE_FP16;
    int64_t xs[3] = {2, 6, 16}, ims[4] = {2, 4, 8, 8}, gs[1] = {16};
    int x = wf_graph_add_tensor(&a, "x", h, WF_ROLE_INPUT, 3, xs);
    int im = wf_graph_add_tensor(&a, "im", h, WF_ROLE_INPUT, 4, ims);
    int gam = wf_graph_add_tensor(&a, "gamma", h, WF_ROLE_PARAM, 1, gs);
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.scale = 0.125;
    int t = wf_graph_op1(&a, WF_OP_MUL, "scaled", &x, 1, &at);
    memset(&at, 0, sizeof at);
    at.eps = 1e-6;
    int in2[2] = {t, gam};
    t = wf_graph_op1(&a, WF_OP_RMSNORM, "rms", in2, 2, &at);
    memset(&at, 0, sizeof at);
    at.heads = 4;
    at.base = 500000;
    int q = wf_graph_op1(&a, WF_OP_ROTARY, "rot", &t, 1, &at);
    memset(&at, 0, sizeof at);
    at.heads = 4;
    at.kv_heads = 2;
    at.causal = 1;
    int kv[2];
    memset(&at, 0, sizeof at);
    at.axis = 2;
    at.nsplit = 2;
    int sp = wf_graph_add_op(&a, WF_OP_SPLIT, "kv", &t, 1, &at);
    kv[0] = wf_graph_op_output(&a, sp, 0);
    kv[1] = wf_graph_op_output(&a, sp, 1);
    memset(&at, 0, sizeof at);
    at.heads = 4;
    at.kv_heads = 2;
    at.causal = 1;
    int qkv[3] = {q, kv[0], kv[1]};
    t = wf_graph_op1(&a, WF_OP_ATTENTION, "attn", qkv, 3, &at); /* no dropout: standard Attention */
    memset(&at, 0, sizeof at);
    at.trans_b = 1;
    int bm[2] = {t, t};
    t = wf_graph_op1(&a, WF_OP_BATCH_MATMUL, "scores", bm, 2, &at); /* [2,6,6] */
    memset(&at, 0, sizeof at);
    at.perm[0] = 0;
    at.perm[1] = 2;
    at.perm[2] = 1;
    t = wf_graph_op1(&a, WF_OP_TRANSPOSE, "scores_t", &t, 1, &at);
    t = wf_graph_op1(&a, WF_OP_SOFTMAX, "probs", &t, 1, NULL);
    memset(&at, 0, sizeof at);
    at.kernel[0] = at.kernel[1] = 3;
    at.stride[0] = at.stride[1] = 1;
    at.pad[0] = at.pad[1] = 1;
    int p = wf_graph_op1(&a, WF_OP_AVGPOOL, "avg", &im, 1, &at);
    int cat[2] = {p, im};
    memset(&at, 0, sizeof at);
    at.axis = 1;
    p = wf_graph_op1(&a, WF_OP_CONCAT, "cat", cat, 2, &at);
    memset(&at, 0, sizeof at);
    at.axis = 2;
    p = wf_graph_op1(&a, WF_OP_FLATTEN, "flat2", &p, 1, &at); /* [2,8,64] */
    (void)t;
    (void)p;
    if (a.status != WF_OK)
        fail_msg("%s", wf_last_error());
    char path[512];
    snprintf(path, sizeof path, "%s/ops.onnx", tmpdir);
    assert_int_equal(wf_onnx_save(&a, path, NULL), WF_OK);
    if (wf_onnx_load(path, 2, &b) != WF_OK)
        fail_msg("%s", wf_last_error());
    assert_kinds(&b, "mul,rmsnorm,rotary,split,attention,batch_matmul,transpose,softmax,avgpool,concat,reshape");
    assert_true(b.ops[0].attr.scale == 0.125);
    assert_true(b.ops[2].attr.base == 500000 && b.ops[2].attr.heads == 4);
    assert_true(b.ops[4].attr.kv_heads == 2 && b.ops[4].attr.causal == 1);
    assert_int_equal(b.ops[5].kind, WF_OP_BATCH_MATMUL);
    for (int i = 0; i < b.nfwd; i++) {
        const wf_tensor *ta = &a.tensors[a.ops[i].out[0]], *tb = &b.tensors[b.ops[i].out[0]];
        char sa[96], sb[96];
        assert_string_equal(wf_shape_str(ta, sa, sizeof sa), wf_shape_str(tb, sb, sizeof sb));
        assert_int_equal(tb->dtype, WF_DTYPE_FP16);
    }
    wf_graph_free(&a);
    wf_graph_free(&b);
}

/* A file written at batch 2 builds at batch 5 as the zoo does at 5. */
/* The ops PyTorch exports bring (tanh, clip as ReLU6 and HardSigmoid,
 * hardswish, cast of a mask, expand, ceil-mode max pooling) survive export
 * and import with their attributes. */
static void test_roundtrip_pytorch_ops(void **state)
{
    (void)state;
    wf_graph a, b;
    wf_graph_init(&a, "ptops");
    int64_t xs[3] = {2, 6, 16}, x1s[3] = {2, 1, 16}, ms[2] = {2, 6}, ims[4] = {2, 4, 7, 7};
    int x = wf_graph_add_tensor(&a, "x", WF_DTYPE_FP32, WF_ROLE_INPUT, 3, xs);
    int x1 = wf_graph_add_tensor(&a, "x1", WF_DTYPE_FP32, WF_ROLE_INPUT, 3, x1s);
    int mk = wf_graph_add_tensor(&a, "mask", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, ms);
    int im = wf_graph_add_tensor(&a, "im", WF_DTYPE_FP32, WF_ROLE_INPUT, 4, ims);
    wf_op_attrs at;
    int t = wf_graph_op1(&a, WF_OP_TANH, "tanh", &x, 1, NULL);
    memset(&at, 0, sizeof at);
    at.alpha = 1;
    at.hi = 6;
    t = wf_graph_op1(&a, WF_OP_CLIP, "relu6", &t, 1, &at);
    t = wf_graph_op1(&a, WF_OP_HARDSWISH, "hswish", &t, 1, NULL);
    memset(&at, 0, sizeof at);
    at.alpha = 1.0 / 6;
    at.beta = 0.5;
    at.hi = 1;
    t = wf_graph_op1(&a, WF_OP_CLIP, "hsigmoid", &t, 1, &at);
    memset(&at, 0, sizeof at);
    wf_graph_op1(&a, WF_OP_CAST, "maskf", &mk, 1, &at);
    memset(&at, 0, sizeof at);
    at.ndim = 3;
    memcpy(at.shape, xs, sizeof xs);
    int e = wf_graph_op1(&a, WF_OP_EXPAND, "expand", &x1, 1, &at);
    int in2[2] = {t, e};
    wf_graph_op1(&a, WF_OP_ADD, "sum", in2, 2, NULL);
    memset(&at, 0, sizeof at);
    at.kernel[0] = at.kernel[1] = 3;
    at.stride[0] = at.stride[1] = 2;
    at.ceil_mode = 1;
    int p = wf_graph_op1(&a, WF_OP_MAXPOOL, "pool", &im, 1, &at);
    if (a.status != WF_OK)
        fail_msg("%s", wf_last_error());
    assert_int_equal(a.tensors[p].shape[2], 3); /* ceil((7-3)/2)+1 = 3: the same as floor here */
    char path[512];
    snprintf(path, sizeof path, "%s/ptops.onnx", tmpdir);
    assert_int_equal(wf_onnx_save(&a, path, NULL), WF_OK);
    if (wf_onnx_load(path, 2, &b) != WF_OK)
        fail_msg("%s", wf_last_error());
    assert_kinds(&b, "tanh,clip,hardswish,clip,cast,expand,add,maxpool");
    assert_true(b.ops[1].attr.lo == 0 && b.ops[1].attr.hi == 6 && b.ops[1].attr.alpha == 1);
    assert_true(fabs(b.ops[3].attr.alpha - 1.0 / 6) < 1e-7 && b.ops[3].attr.beta == 0.5 && b.ops[3].attr.hi == 1);
    assert_int_equal(b.tensors[b.ops[4].out[0]].dtype, WF_DTYPE_FP32);
    for (int i = 0; i < b.nfwd; i++) {
        const wf_tensor *ta = &a.tensors[a.ops[i].out[0]], *tb = &b.tensors[b.ops[i].out[0]];
        char sa[96], sb[96];
        assert_string_equal(wf_shape_str(ta, sa, sizeof sa), wf_shape_str(tb, sb, sizeof sb));
    }
    wf_graph_free(&a);
    wf_graph_free(&b);
    /* ceil_mode where it changes the size: [8,8], kernel 3, stride 2 -> 4 (floor 3) */
    assert_int_equal(wf_pool_out(8, 3, 2, 0, 1), 4);
    assert_int_equal(wf_pool_out(8, 3, 2, 0, 0), 3);
    /* PyTorch's rule: a last window starting in the right padding is dropped */
    assert_int_equal(wf_pool_out(5, 2, 2, 1, 1), 3);
}

static void test_rebatch(void **state)
{
    (void)state;
    static const char *const zoo[] = {"resnet18", "gpt-tiny"};
    for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++) {
        wf_graph a, b, z;
        build_zoo(zoo[i], 2, &a);
        char path[512];
        snprintf(path, sizeof path, "%s/rb%zu.onnx", tmpdir, i);
        assert_int_equal(wf_onnx_save(&a, path, NULL), WF_OK);
        if (wf_onnx_load(path, 5, &b) != WF_OK)
            fail_msg("import %s at batch 5: %s", zoo[i], wf_last_error());
        build_zoo(zoo[i], 5, &z);
        assert_same_graph(zoo[i], &z, &b);
        wf_graph_free(&a);
        wf_graph_free(&b);
        wf_graph_free(&z);
    }
}

/* Deterministic parameter data: element i of tensor t. */
static float seeded(int t, int64_t i) { return (float)sin(0.37 * (double)t + 0.011 * (double)i); }

typedef struct {
    float *buf[4096];
} param_src;

static const float *param_data(void *ctx, const wf_graph *g, int t)
{
    param_src *s = ctx;
    int64_t n = wf_tensor_numel(&g->tensors[t]);
    s->buf[t] = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        s->buf[t][i] = seeded(t, i);
    return s->buf[t];
}

/* Parameters written with data come back bit-exact (fp32), in the IR layout. */
static void test_param_data(void **state)
{
    (void)state;
    wf_graph a, b;
    build_zoo("gpt-tiny", 1, &a);
    param_src src;
    memset(&src, 0, sizeof src);
    wf_onnx_save_opts so = {param_data, &src};
    char path[512];
    snprintf(path, sizeof path, "%s/data.onnx", tmpdir);
    assert_int_equal(wf_onnx_save(&a, path, &so), WF_OK);
    wf_onnx_model *m;
    assert_int_equal(wf_onnx_open(path, &m), WF_OK);
    wf_onnx_opts o = {1, NULL, 0};
    assert_int_equal(wf_onnx_build(m, &o, &b), WF_OK);
    int checked = 0;
    for (int t = 0; t < b.ntensors; t++) {
        if (b.tensors[t].role != WF_ROLE_PARAM)
            continue;
        int ta = -1;
        for (int k = 0; k < a.ntensors && ta < 0; k++)
            if (strcmp(a.tensors[k].name, b.tensors[t].name) == 0)
                ta = k;
        assert_true(ta >= 0);
        int64_t n = wf_tensor_numel(&b.tensors[t]);
        float *d = malloc((size_t)n * sizeof(float));
        assert_int_equal(wf_onnx_param_data(m, &b, t, d, n), WF_OK);
        for (int64_t i = 0; i < n; i++)
            if (d[i] != seeded(ta, i))
                fail_msg("%s[%lld] = %g, written %g", b.tensors[t].name, (long long)i, d[i],
                         seeded(ta, i));
        free(d);
        checked++;
    }
    assert_true(checked > 10);
    /* a shapes-only file has no data to give */
    snprintf(path, sizeof path, "%s/shapes.onnx", tmpdir);
    assert_int_equal(wf_onnx_save(&a, path, NULL), WF_OK);
    wf_onnx_model *m2;
    wf_graph c;
    assert_int_equal(wf_onnx_open(path, &m2), WF_OK);
    assert_int_equal(wf_onnx_build(m2, &o, &c), WF_OK);
    for (int t = 0; t < c.ntensors; t++)
        if (c.tensors[t].role == WF_ROLE_PARAM) {
            float x[1];
            assert_int_equal(wf_onnx_param_data(m2, &c, t, x, 0), WF_INVAL); /* wrong count */
            int64_t n = wf_tensor_numel(&c.tensors[t]);
            float *d = malloc((size_t)n * sizeof(float));
            assert_int_equal(wf_onnx_param_data(m2, &c, t, d, n), WF_NOTFOUND);
            free(d);
            break;
        }
    wf_graph_free(&c);
    wf_onnx_close(m2);
    for (int t = 0; t < 4096; t++)
        free(src.buf[t]);
    wf_graph_free(&a);
    wf_graph_free(&b);
    wf_onnx_close(m);
}

/* The runtime runs an imported model with its ONNX weights: a zoo model's
 * parameters (as the executor initialized them) written to a file, read
 * back into a second executor of the imported graph, give the same loss on
 * the same batch. */
typedef struct {
    wf_exec *e;
} exec_src;

static const float *exec_param(void *ctx, const wf_graph *g, int t)
{
    exec_src *s = ctx;
    (void)g;
    int i = wf_exec_param_of_tensor(s->e, t);
    return i >= 0 ? wf_exec_param_at(s->e, i)->data : NULL;
}

static void fill_tokens(wf_exec *e, uint32_t seed)
{
    const char *names[2] = {"ids", "labels"};
    for (int k = 0; k < 2; k++) {
        int t = wf_exec_find_tensor(e, names[k]);
        assert_true(t >= 0);
        int32_t *d = wf_exec_leaf_data(e, t);
        int64_t n = wf_tensor_numel(&wf_exec_graph(e)->tensors[t]);
        uint32_t x = seed + (uint32_t)k;
        for (int64_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            d[i] = (int32_t)((x >> 8) % 96);
        }
    }
}

static void test_runtime_weights(void **state)
{
    (void)state;
    wf_graph a, b;
    build_zoo("gpt-tiny", 2, &a);
    wf_exec_opts eo = {0, 7};
    wf_exec *ea = NULL, *eb = NULL;
    assert_int_equal(wf_exec_create(&a, &eo, &ea), WF_OK);
    exec_src src = {ea};
    wf_onnx_save_opts so = {exec_param, &src};
    char path[512];
    snprintf(path, sizeof path, "%s/trained.onnx", tmpdir);
    assert_int_equal(wf_onnx_save(&a, path, &so), WF_OK);

    wf_onnx_model *m;
    assert_int_equal(wf_onnx_open(path, &m), WF_OK);
    wf_onnx_opts o = {2, NULL, 1};
    assert_int_equal(wf_onnx_build(m, &o, &b), WF_OK);
    /* the same seed (dropout masks depend on it), every parameter scrambled
     * and then loaded from the file */
    assert_int_equal(wf_exec_create(&b, &eo, &eb), WF_OK);
    assert_int_equal(wf_exec_nparams(eb), wf_exec_nparams(ea));
    for (int i = 0; i < wf_exec_nparams(eb); i++) {
        const wf_exec_param *p = wf_exec_param_at(eb, i);
        for (int64_t k = 0; k < p->numel; k++)
            p->data[k] = 0.5f;
        assert_int_equal(wf_onnx_param_data(m, &b, p->tensor, p->data, p->numel), WF_OK);
    }
    fill_tokens(ea, 11);
    fill_tokens(eb, 11);
    float la = 0, lb = 0;
    assert_int_equal(wf_exec_forward(ea, &la), WF_OK);
    assert_int_equal(wf_exec_forward(eb, &lb), WF_OK);
    printf("gpt-tiny loss %.7f, re-imported with its weights %.7f\n", la, lb);
    assert_true(isfinite(la) && la > 1.0f);
    assert_true(fabsf(la - lb) <= 1e-5f * fabsf(la));
    wf_exec_free(ea);
    wf_exec_free(eb);
    wf_onnx_close(m);
    wf_graph_free(&a);
    wf_graph_free(&b);
}

/* ---- bad input ------------------------------------------------------------------------------- */

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void test_bad_files(void **state)
{
    (void)state;
    wf_graph g;
    char p[512];
    snprintf(p, sizeof p, "%s/missing.onnx", tmpdir);
    assert_int_equal(wf_onnx_load(p, 1, &g), WF_IO);
    wf_graph_free(&g);

    snprintf(p, sizeof p, "%s/garbage.onnx", tmpdir);
    const char text[] = "this is not a protobuf \xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
    write_file(p, text, sizeof text);
    assert_int_equal(wf_onnx_load(p, 1, &g), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "garbage.onnx"));
    wf_graph_free(&g);

    snprintf(p, sizeof p, "%s/empty.onnx", tmpdir);
    write_file(p, "", 0);
    assert_int_equal(wf_onnx_load(p, 1, &g), WF_FORMAT);
    wf_graph_free(&g);

    /* a real file cut short: every prefix is refused or (rarely) parses
     * into a smaller model; none crashes */
    wf_graph a;
    build_zoo("cnn-tiny", 1, &a);
    char full[512];
    snprintf(full, sizeof full, "%s/full.onnx", tmpdir);
    assert_int_equal(wf_onnx_save(&a, full, NULL), WF_OK);
    wf_graph_free(&a);
    FILE *f = fopen(full, "rb");
    assert_non_null(f);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 100 && n < sizeof buf);
    int refused = 0;
    for (size_t cut = 1; cut < n; cut += 7) {
        snprintf(p, sizeof p, "%s/cut.onnx", tmpdir);
        write_file(p, buf, cut);
        wf_status st = wf_onnx_load(p, 1, &g);
        assert_true(st == WF_OK || st == WF_FORMAT || st == WF_INVAL);
        refused += st != WF_OK;
        wf_graph_free(&g);
    }
    assert_true(refused > 0);
    snprintf(p, sizeof p, "%s/cut.onnx", tmpdir);
    write_file(p, buf, n / 2);
    assert_int_equal(wf_onnx_load(p, 1, &g), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "not an ONNX model"));
    wf_graph_free(&g);
}

static void test_zoo_hook(void **state)
{
    (void)state;
    wf_graph a, b;
    build_zoo("resnet18", 1, &a);
    char path[512];
    snprintf(path, sizeof path, "%s/r18.onnx", tmpdir);
    assert_int_equal(wf_onnx_save(&a, path, NULL), WF_OK);
    wf_graph_free(&a);
    wf_model_config m;
    assert_int_equal(wf_model_lookup(path, &m), WF_OK);
    assert_int_equal(m.family, WF_FAMILY_ONNX);
    assert_string_equal(wf_family_name(m.family), "onnx");
    assert_string_equal(m.path, path);
    assert_int_equal(m.dtype, WF_DTYPE_FP16);
    double params = 0;
    assert_int_equal(wf_model_params(&m, &params), WF_OK);
    assert_true(params == 11689512.0);
    assert_int_equal(wf_model_build(&m, 3, &b), WF_OK);
    assert_true(b.loss >= 0);
    wf_graph_free(&b);
    /* symbolic dims given that the file does not have */
    char spec[600];
    snprintf(spec, sizeof spec, "%s:seq=4", path);
    assert_int_equal(wf_model_lookup(spec, &m), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "seq"));
    /* a model without a loss gets one on its first output */
    wf_graph c;
    if (have_testdata()) {
        assert_int_equal(wf_model_lookup(TESTDATA "/pytorch-converted/test_Linear/model.onnx", &m), WF_OK);
        assert_int_equal(wf_model_build(&m, 4, &c), WF_OK);
        assert_true(c.loss >= 0);
        assert_int_equal(c.tensors[c.loss].ndim, 0);
        wf_graph_free(&c);
    }
    /* attach_loss refuses a second loss */
    build_zoo("mlp-tiny", 1, &a);
    assert_int_equal(wf_onnx_attach_loss(&a, -1), WF_INVAL);
    wf_graph_free(&a);
}

/* ---- hand-written models: patterns, folding, symbolic dims -------------------------------- */

/* A minimal protobuf writer, enough to write ONNX models the tests design
 * (tests do not see protobuf-c: only src/onnx/ does). */
typedef struct {
    uint8_t *b;
    size_t n, cap;
} pb;

static void pb_raw(pb *p, const void *d, size_t n)
{
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2 + 64;
        p->b = realloc(p->b, p->cap);
        assert_non_null(p->b);
    }
    memcpy(p->b + p->n, d, n);
    p->n += n;
}

static void pb_varint(pb *p, uint64_t v)
{
    uint8_t c[10];
    int k = 0;
    do {
        c[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            c[k] |= 0x80;
        k++;
    } while (v);
    pb_raw(p, c, (size_t)k);
}

static void pb_int(pb *p, int field, int64_t v)
{
    pb_varint(p, (uint64_t)field << 3);
    pb_varint(p, (uint64_t)v);
}

static void pb_bytes(pb *p, int field, const void *d, size_t n)
{
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, n);
    pb_raw(p, d, n);
}

static void pb_str(pb *p, int field, const char *s) { pb_bytes(p, field, s, strlen(s)); }

/* Appends message m as field `field` of p and frees m. */
static void pb_msg(pb *p, int field, pb *m)
{
    pb_bytes(p, field, m->b, m->n);
    free(m->b);
    memset(m, 0, sizeof *m);
}

/* ONNX messages (field numbers of onnx.proto). */
static void attr_i(pb *node, const char *name, int64_t v)
{
    pb a = {0};
    pb_str(&a, 1, name);
    pb_int(&a, 20, 2); /* INT */
    pb_int(&a, 3, v);
    pb_msg(node, 5, &a);
}

static void attr_ints(pb *node, const char *name, int n, const int64_t *v)
{
    pb a = {0};
    pb_str(&a, 1, name);
    pb_int(&a, 20, 7); /* INTS */
    for (int i = 0; i < n; i++)
        pb_int(&a, 8, v[i]);
    pb_msg(node, 5, &a);
}

/* A node: op type, inputs and outputs as comma-separated lists; returns it
 * for attributes; add it with pb_msg(graph, 1, &node). */
static pb mk_node(const char *op, const char *ins, const char *outs)
{
    pb n = {0};
    char buf[512];
    const char *lists[2] = {ins, outs};
    for (int k = 0; k < 2; k++) {
        snprintf(buf, sizeof buf, "%s", lists[k]);
        for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
            pb_str(&n, k + 1, t);
    }
    pb_str(&n, 4, op);
    return n;
}

static void add_node(pb *g, const char *op, const char *ins, const char *outs)
{
    pb n = mk_node(op, ins, outs);
    pb_msg(g, 1, &n);
}

/* A float initializer with data f(i) = 0.01 * (i % 17) - 0.05, or an int64
 * one with the given values. */
static void add_init(pb *g, const char *name, int nd, const int64_t *dims, const int64_t *ivals)
{
    pb t = {0};
    int64_t n = 1;
    for (int i = 0; i < nd; i++) {
        pb_int(&t, 1, dims[i]);
        n *= dims[i];
    }
    pb_int(&t, 2, ivals ? 7 : 1);
    pb_str(&t, 8, name);
    if (ivals) {
        for (int64_t i = 0; i < n; i++)
            pb_int(&t, 7, ivals[i]);
    } else {
        float *f = malloc((size_t)n * sizeof *f);
        for (int64_t i = 0; i < n; i++)
            f[i] = 0.01f * (float)(i % 17) - 0.05f;
        pb_bytes(&t, 9, f, (size_t)n * sizeof *f);
        free(f);
    }
    pb_msg(g, 5, &t);
}

/* A graph input or output (field 11 / 12): dims "N,3,8,8", a name for a
 * symbolic dim. */
static void add_value(pb *g, int field, const char *name, int elem, const char *dims)
{
    pb shape = {0}, tt = {0}, tp = {0}, vi = {0};
    char buf[128];
    snprintf(buf, sizeof buf, "%s", dims);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        pb d = {0};
        if (t[0] >= '0' && t[0] <= '9')
            pb_int(&d, 1, atoll(t));
        else
            pb_str(&d, 2, t);
        pb_msg(&shape, 1, &d);
    }
    pb_int(&tt, 1, elem);
    pb_msg(&tt, 2, &shape);
    pb_msg(&tp, 1, &tt);
    pb_str(&vi, 1, name);
    pb_msg(&vi, 2, &tp);
    pb_msg(g, field, &vi);
}

static void write_model(const char *path, pb *g, int opset)
{
    pb m = {0}, o = {0};
    pb_int(&m, 1, 8); /* ir_version */
    pb_str(&o, 1, "");
    pb_int(&o, 2, opset);
    pb_msg(&m, 8, &o);
    pb_msg(&m, 7, g);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(m.b, 1, m.n, f), m.n);
    fclose(f);
    free(m.b);
}


/* A PyTorch-style CNN: Conv without bias + Add of a [1,O,1,1] bias (folded
 * into the conv), x.view(x.size(0), -1) as Shape/Gather/Unsqueeze/Concat/
 * Reshape (folded to one reshape), a Linear as Transpose(W) + MatMul + Add
 * (one linear; the weight stored transposed). */
static void test_pytorch_cnn(void **state)
{
    (void)state;
    pb g = {0};
    int64_t w[4] = {4, 3, 3, 3}, b[4] = {1, 4, 1, 1}, fc[2] = {10, 64}, fb[1] = {10};
    int64_t one[1] = {1}, zero[1] = {0}, minus1[1] = {-1}, scalar0[1] = {0};
    add_init(&g, "conv.w", 4, w, NULL);
    add_init(&g, "conv.b", 4, b, NULL);
    add_init(&g, "fc.w", 2, fc, NULL);
    add_init(&g, "fc.b", 1, fb, NULL);
    add_init(&g, "zero", 0, one, scalar0);
    add_init(&g, "axes0", 1, one, zero);
    add_init(&g, "minus1", 1, one, minus1);
    add_value(&g, 11, "x", 1, "N,3,8,8");
    pb n = mk_node("Conv", "x,conv.w", "c");
    int64_t pads[4] = {1, 1, 1, 1}, k[2] = {2, 2};
    attr_ints(&n, "pads", 4, pads);
    pb_msg(&g, 1, &n);
    add_node(&g, "Add", "c,conv.b", "cb");
    add_node(&g, "Relu", "cb", "r");
    n = mk_node("MaxPool", "r", "p");
    attr_ints(&n, "kernel_shape", 2, k);
    attr_ints(&n, "strides", 2, k);
    pb_msg(&g, 1, &n);
    add_node(&g, "Shape", "p", "s");
    add_node(&g, "Gather", "s,zero", "n0");
    add_node(&g, "Unsqueeze", "n0,axes0", "n1");
    n = mk_node("Concat", "n1,minus1", "target");
    attr_i(&n, "axis", 0);
    pb_msg(&g, 1, &n);
    add_node(&g, "Reshape", "p,target", "flat");
    add_node(&g, "Transpose", "fc.w", "fc.wt");
    add_node(&g, "MatMul", "flat,fc.wt", "mm");
    add_node(&g, "Add", "mm,fc.b", "y");
    add_value(&g, 12, "y", 1, "N,10");
    char path[512];
    snprintf(path, sizeof path, "%s/cnn.onnx", tmpdir);
    write_model(path, &g, 13);

    wf_onnx_model *m;
    wf_graph gr;
    assert_int_equal(wf_onnx_open(path, &m), WF_OK);
    wf_onnx_opts o = {3, NULL, 0};
    if (wf_onnx_build(m, &o, &gr) != WF_OK)
        fail_msg("%s", wf_last_error());
    assert_kinds(&gr, "conv2d,relu,maxpool,reshape,linear");
    assert_int_equal(gr.ops[0].nin, 3);                   /* the bias folded in */
    assert_int_equal(gr.ops[4].nin, 3);
    assert_int_equal(gr.tensors[gr.ops[3].out[0]].shape[0], 3); /* view(x.size(0), -1) */
    assert_int_equal(gr.tensors[gr.ops[3].out[0]].shape[1], 64);
    wf_graph_totals t;
    wf_graph_totals_of(&gr, &t);
    assert_true(t.params == 4 * 3 * 3 * 3 + 4 + 64 * 10 + 10);
    assert_int_equal(gr.loss, -1);
    /* the linear weight is fc.w^T: [64,10] with W[j][i] = fc.w[i][j] */
    int wt = gr.ops[4].in[1];
    assert_int_equal(gr.tensors[wt].shape[0], 64);
    float d[640];
    assert_int_equal(wf_onnx_param_data(m, &gr, wt, d, 640), WF_OK);
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 64; j++)
            assert_true(d[j * 10 + i] == 0.01f * (float)((i * 64 + j) % 17) - 0.05f);
    /* the conv bias [1,4,1,1] as the IR's [4] */
    float cb[4];
    assert_int_equal(wf_onnx_param_data(m, &gr, gr.ops[0].in[2], cb, 4), WF_OK);
    assert_true(cb[3] == 0.01f * 3 - 0.05f);
    /* the output, as ONNX shapes it */
    int ot, nd;
    int64_t os[WF_MAX_DIMS];
    assert_int_equal(wf_onnx_output(m, 0, NULL, &ot, &nd, os), WF_OK);
    assert_int_equal(ot, gr.ops[4].out[0]);
    assert_int_equal(nd, 2);
    assert_true(os[0] == 3 && os[1] == 10);
    /* attaching a loss: labels [3] */
    assert_int_equal(wf_onnx_attach_loss(&gr, ot), WF_OK);
    assert_int_equal(gr.tensors[gr.ops[gr.nfwd - 1].in[1]].shape[0], 3);
    assert_int_equal(wf_graph_validate(&gr), WF_OK);
    wf_graph_free(&gr);
    wf_onnx_close(m);
}

/* Erf GELU and x*Sigmoid(x) as single ops, an opset-11 softmax over a
 * flattened view, an embedding, and symbolic dims given by name. */
static void test_patterns_and_dims(void **state)
{
    (void)state;
    pb g = {0};
    int64_t emb[2] = {50, 16}, one[1] = {1};
    add_init(&g, "emb", 2, emb, NULL);
    add_value(&g, 11, "ids", 7, "batch,seq");
    add_node(&g, "Gather", "emb,ids", "x");
    /* constants as Constant nodes: sqrt(2), 1, 0.5 */
    const float cs[3] = {1.41421356f, 1.0f, 0.5f};
    const char *cn[3] = {"sqrt2", "one", "half"};
    for (int i = 0; i < 3; i++) {
        pb n = mk_node("Constant", "", cn[i]), a = {0}, t = {0};
        pb_int(&t, 2, 1);
        pb_bytes(&t, 9, &cs[i], 4);
        pb_str(&a, 1, "value");
        pb_int(&a, 20, 4); /* TENSOR */
        pb_msg(&a, 5, &t);
        pb_msg(&n, 5, &a);
        pb_msg(&g, 1, &n);
    }
    add_node(&g, "Div", "x,sqrt2", "d");
    add_node(&g, "Erf", "d", "e");
    add_node(&g, "Add", "e,one", "a");
    add_node(&g, "Mul", "x,a", "m");
    add_node(&g, "Mul", "m,half", "gelu");
    add_node(&g, "Sigmoid", "gelu", "sg");
    add_node(&g, "Mul", "gelu,sg", "silu");
    add_node(&g, "Softmax", "silu", "y"); /* opset 11: axis 1, over [B, S*16] */
    add_value(&g, 12, "y", 1, "batch,seq,16");
    (void)one;
    char path[512];
    snprintf(path, sizeof path, "%s/pat.onnx", tmpdir);
    write_model(path, &g, 11);

    wf_onnx_model *m;
    wf_graph gr;
    assert_int_equal(wf_onnx_open(path, &m), WF_OK);
    wf_onnx_opts o = {2, "seq=7", 0};
    if (wf_onnx_build(m, &o, &gr) != WF_OK)
        fail_msg("%s", wf_last_error());
    assert_kinds(&gr, "embedding,gelu,silu,reshape,softmax");
    const wf_tensor *ids = &gr.tensors[gr.ops[0].in[0]];
    assert_true(ids->shape[0] == 2 && ids->shape[1] == 7);
    const wf_tensor *sm = &gr.tensors[gr.ops[4].out[0]];
    assert_true(sm->ndim == 2 && sm->shape[0] == 2 && sm->shape[1] == 7 * 16);
    int nd;
    int64_t os[WF_MAX_DIMS];
    assert_int_equal(wf_onnx_output(m, 0, NULL, NULL, &nd, os), WF_OK);
    assert_true(nd == 3 && os[0] == 2 && os[1] == 7 && os[2] == 16);
    wf_graph_free(&gr);
    /* seq without a size, and a dims key the model lacks, are named */
    wf_onnx_opts o2 = {2, NULL, 0};
    assert_int_equal(wf_onnx_build(m, &o2, &gr), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "'seq'"));
    wf_graph_free(&gr);
    wf_onnx_opts o3 = {2, "seq=7,heads=2", 0};
    assert_int_equal(wf_onnx_build(m, &o3, &gr), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "heads"));
    wf_graph_free(&gr);
    wf_onnx_close(m);
    /* the zoo spec carries the dims */
    char spec[600];
    snprintf(spec, sizeof spec, "%s:seq=5", path);
    wf_model_config mc;
    assert_int_equal(wf_model_lookup(spec, &mc), WF_OK);
    assert_int_equal(wf_model_build(&mc, 3, &gr), WF_OK);
    assert_true(gr.tensors[gr.ops[0].in[0]].shape[1] == 5 && gr.loss >= 0);
    wf_graph_free(&gr);
}

/* One initializer read through an Identity and directly is one parameter;
 * an unsupported node in the middle is named by index, name and type. */
static void test_shared_and_errors(void **state)
{
    (void)state;
    pb g = {0};
    int64_t w[2] = {8, 8};
    add_init(&g, "w", 2, w, NULL);
    add_value(&g, 11, "x", 1, "N,8");
    add_node(&g, "MatMul", "x,w", "h");
    add_node(&g, "Identity", "w", "w2");
    add_node(&g, "MatMul", "h,w2", "y");
    add_value(&g, 12, "y", 1, "N,8");
    char path[512];
    snprintf(path, sizeof path, "%s/shared.onnx", tmpdir);
    write_model(path, &g, 17);
    wf_graph gr;
    if (wf_onnx_load(path, 4, &gr) != WF_OK)
        fail_msg("%s", wf_last_error());
    assert_kinds(&gr, "linear,matmul");
    assert_int_equal(gr.ops[0].in[1], gr.ops[1].in[1]);
    wf_graph_totals t;
    wf_graph_totals_of(&gr, &t);
    assert_true(t.params == 64);
    wf_graph_free(&gr);

    /* MatMul of a transposed run-time tensor: a trans flag where the ranks
     * allow, else an explicit transpose */
    pb f = {0}, n;
    int64_t perm[3] = {0, 2, 1};
    add_value(&f, 11, "x", 1, "N,4,8");
    add_value(&f, 11, "m", 1, "4,3");
    add_value(&f, 11, "z", 1, "N,4,8");
    n = mk_node("Transpose", "x", "xt");
    attr_ints(&n, "perm", 3, perm);
    pb_msg(&f, 1, &n);
    add_node(&f, "MatMul", "xt,m", "y"); /* [N,8,4] x [4,3]: an explicit transpose */
    n = mk_node("Transpose", "z", "zt");
    attr_ints(&n, "perm", 3, perm);
    pb_msg(&f, 1, &n);
    add_node(&f, "MatMul", "zt,z", "y3"); /* [N,8,4] x [N,4,8]: trans_a */
    add_value(&f, 12, "y", 1, "N,8,3");
    add_value(&f, 12, "y3", 1, "N,8,8");
    snprintf(path, sizeof path, "%s/trans.onnx", tmpdir);
    write_model(path, &f, 17);
    if (wf_onnx_load(path, 2, &gr) != WF_OK)
        fail_msg("%s", wf_last_error());
    assert_kinds(&gr, "transpose,reshape,matmul,batch_matmul");
    assert_true(gr.ops[3].attr.trans_a == 1 && gr.ops[3].attr.trans_b == 0);
    assert_int_equal(gr.tensors[gr.ops[3].out[0]].shape[1], 8);
    wf_graph_free(&gr);

    pb h = {0};
    add_value(&h, 11, "x", 1, "N,8");
    add_node(&h, "Relu", "x", "r");
    n = mk_node("Sin", "r", "t");
    pb_str(&n, 3, "act2");
    pb_msg(&h, 1, &n);
    add_value(&h, 12, "t", 1, "N,8");
    snprintf(path, sizeof path, "%s/sin.onnx", tmpdir);
    write_model(path, &h, 17);
    assert_int_equal(wf_onnx_load(path, 1, &gr), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "node 1 'act2' (Sin)"));
    wf_graph_free(&gr);
}

/* ---- models as PyTorch exports them (tests/data/onnx-pt, issue 14) ------------------------ */

#define PTDATA "tests/data/onnx-pt"

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    assert_non_null(j);
    return j;
}

/* Fills leaf tensor t (floats, or int32 for integer tensors) from a reference
 * array {"shape": [...], "data": [...]}. */
static void fill_leaf(const wf_tensor *x, void *dst, const cJSON *ref)
{
    const cJSON *data = cJSON_GetObjectItem(ref, "data");
    assert_int_equal(cJSON_GetArraySize(data), numel(x));
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, data)
    {
        if (x->dtype == WF_DTYPE_FP32)
            ((float *)dst)[i++] = (float)v->valuedouble;
        else
            ((int32_t *)dst)[i++] = (int32_t)v->valuedouble;
    }
}

typedef struct {
    const char *name;
    double loss_rtol; /* weft's first loss against PyTorch's */
    double out_atol;  /* outputs, absolute (logits of order 1) */
} pt_case;

/* Imports the model at the reference batch with a loss, and checks its
 * parameter count, its outputs through the forward interpreter and its
 * first loss through the executor, both from the file's weights, against
 * PyTorch's. */
static void check_pt_model(const pt_case *pc)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", PTDATA, pc->name);
    cJSON *ref = read_json(path);
    snprintf(path, sizeof path, "%s/%s.onnx", PTDATA, pc->name);
    const cJSON *inputs = cJSON_GetObjectItem(ref, "inputs");
    int64_t B = (int64_t)cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "labels"), "shape"), 0)
                    ->valuedouble;
    wf_onnx_model *m = NULL;
    assert_int_equal(wf_onnx_open(path, &m), WF_OK);
    wf_graph g;
    wf_onnx_opts o = {B, NULL, 1};
    if (wf_onnx_build(m, &o, &g) != WF_OK)
        fail_msg("%s: %s", pc->name, wf_last_error());
    wf_graph_totals t;
    wf_graph_totals_of(&g, &t);
    double params = cJSON_GetObjectItem(ref, "params")->valuedouble;
    if (t.params != params)
        fail_msg("%s: %.0f parameters, PyTorch counts %.0f", pc->name, t.params, params);

    /* outputs through the interpreter */
    void **d = calloc((size_t)g.ntensors, sizeof *d);
    assert_non_null(d);
    for (int i = 0; i < g.ntensors; i++) {
        const wf_tensor *x = &g.tensors[i];
        if (x->producer >= 0 || x->role == WF_ROLE_LABEL)
            continue;
        d[i] = calloc((size_t)(numel(x) ? numel(x) : 1), sizeof(float));
        assert_non_null(d[i]);
        if (x->role == WF_ROLE_PARAM)
            assert_int_equal(wf_onnx_param_data(m, &g, i, d[i], numel(x)), WF_OK);
        else
            fill_leaf(x, d[i], cJSON_GetObjectItem(inputs, x->name));
    }
    /* the forward ops up to the loss (which reads labels the interpreter has not) */
    int nf = g.nfwd;
    g.nfwd = nf - 1;
    interpret(&g, d);
    g.nfwd = nf;
    const char *oname;
    int ot, ond;
    int64_t os[WF_MAX_DIMS];
    assert_int_equal(wf_onnx_output(m, 0, &oname, &ot, &ond, os), WF_OK);
    const cJSON *out = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "output"), "data");
    assert_int_equal(cJSON_GetArraySize(out), numel(&g.tensors[ot]));
    double worst = 0;
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, out)
    {
        double e = fabs((double)((float *)d[ot])[i++] - v->valuedouble);
        worst = e > worst ? e : worst;
    }
    for (int k = 0; k < g.ntensors; k++)
        free(d[k]);
    free(d);

    /* the first loss through the executor, from the file's weights */
    wf_exec_opts eo = {1, 0};
    wf_exec *e = NULL;
    if (wf_exec_create(&g, &eo, &e) != WF_OK)
        fail_msg("%s: %s", pc->name, wf_last_error());
    for (int k = 0; k < wf_exec_nparams(e); k++) {
        const wf_exec_param *p = wf_exec_param_at(e, k);
        assert_int_equal(wf_onnx_param_data(m, &g, p->tensor, p->data, p->numel), WF_OK);
    }
    const wf_graph *eg = wf_exec_graph(e);
    for (int k = 0; k < eg->ntensors; k++) {
        const wf_tensor *x = &eg->tensors[k];
        if (x->role == WF_ROLE_INPUT)
            fill_leaf(x, wf_exec_leaf_data(e, k), cJSON_GetObjectItem(inputs, x->name));
        else if (x->role == WF_ROLE_LABEL)
            fill_leaf(x, wf_exec_leaf_data(e, k), cJSON_GetObjectItem(ref, "labels"));
    }
    float loss = 0;
    assert_int_equal(wf_exec_forward(e, &loss), WF_OK);
    double want = cJSON_GetObjectItem(ref, "loss")->valuedouble;
    printf("%-14s params %8.0f  outputs max |err| %.2e  loss %.7f (PyTorch %.7f)\n", pc->name, t.params,
           worst, loss, want);
    if (worst > pc->out_atol)
        fail_msg("%s: outputs differ from PyTorch's by %g (allowed %g)", pc->name, worst, pc->out_atol);
    if (fabs(loss - want) > pc->loss_rtol * fabs(want))
        fail_msg("%s: first loss %.7f, PyTorch %.7f", pc->name, loss, want);
    wf_exec_free(e);
    wf_onnx_close(m);
    wf_graph_free(&g);
    cJSON_Delete(ref);
}

static void test_pytorch_exports(void **state)
{
    (void)state;
    /* BERT uses the erf GELU, weft's kernel the tanh form: a 1e-3 difference
     * per activation at most, hence the looser bounds there. */
    static const pt_case cases[] = {
        {"gpt", 1e-5, 1e-4},          {"gpt_opset14", 1e-5, 1e-4},  {"gpt_fixed_batch", 1e-5, 1e-4},
        {"gpt2_additive_mask", 1e-5, 1e-4},
        {"bert", 1e-3, 1e-2},         {"torch_encoder", 1e-5, 1e-4}, {"mobilenet_v2", 1e-5, 1e-4},
        {"mobilenet_v3", 1e-5, 1e-4}, {"squeezenet", 1e-5, 1e-4},   {"densenet", 1e-5, 1e-4},
        /* issue 26: torchvision's ShuffleNet V2 (global pooling by ReduceMean), and
         * ReduceSum, ReduceMax, ReduceMin and ReduceMean over other axes */
        {"shufflenet_v2", 1e-5, 1e-4}, {"reductions", 1e-5, 1e-4},
        /* ReduceL1, ReduceSumSquare, ReduceMax, ReduceMin, ReduceSum (keepdims), axes
         * as attributes and (opset 18) as an input; references from numpy */
        {"reduce_ops", 1e-5, 1e-4}, {"reduce_ops_opset18", 1e-5, 1e-4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_pt_model(&cases[i]);
}

/* What the import makes of the PyTorch-specific parts: the recognized
 * patterns, the buffers kept out of the parameters, LSTM named. */
static void test_pytorch_patterns(void **state)
{
    (void)state;
    wf_graph g;
    char pat[512];
    /* nanoGPT: attention with its causal mask buffer, tanh GELU, wpe(arange) */
    assert_int_equal(wf_onnx_build_spec_patterns(PTDATA "/gpt.onnx", 2, &g, pat, sizeof pat), WF_OK);
    assert_non_null(strstr(pat, "attention (matmul, scale, mask, softmax, matmul) x2"));
    assert_non_null(strstr(pat, "gelu (tanh form) x2"));
    int natt = 0;
    for (int i = 0; i < g.nfwd; i++)
        if (g.ops[i].kind == WF_OP_ATTENTION) {
            natt++;
            assert_int_equal(g.ops[i].attr.causal, 1);
            assert_int_equal(g.ops[i].attr.heads, 2);
        }
    assert_int_equal(natt, 2);
    /* the mask buffers ("transformer.h.N.attn.bias") are no tensors at all */
    for (int i = 0; i < g.ntensors; i++)
        assert_true(strcmp(g.tensors[i].name, "transformer.h.0.attn.bias") != 0 &&
                    strcmp(g.tensors[i].name, "transformer.h.1.attn.bias") != 0);
    /* FLOPs of the matrix products against a hand count: B=2, T=8, C=32,
     * V=64, L=2, ffn 4C; per layer c_attn C->3C, c_proj C->C, c_fc C->4C,
     * mlp c_proj 4C->C (each 2*B*T*in*out plus B*T*out for the bias), and
     * lm_head C->V without bias; attention QK^T and AV 4*B*A*T*T*D. */
    double B = 2, T = 8, C = 32, V = 64, L = 2, A = 2, D = 16;
    double lin = L * (2 * B * T * (C * 3 * C + C * C + C * 4 * C + 4 * C * C) + B * T * (3 * C + C + 4 * C + C)) +
                 2 * B * T * C * V;
    double got = 0, att = 0;
    for (int i = 0; i < g.nfwd; i++) {
        wf_op_cost c;
        wf_op_cost_of(&g, i, &c);
        if (g.ops[i].kind == WF_OP_LINEAR || g.ops[i].kind == WF_OP_MATMUL)
            got += c.fwd_flops;
        if (g.ops[i].kind == WF_OP_ATTENTION)
            att += c.fwd_flops;
    }
    printf("gpt: matrix FLOPs %.0f (hand count %.0f), attention %.0f (products %.0f)\n", got, lin, att,
           L * 4 * B * A * T * T * D);
    assert_true(got == lin);
    assert_true(att >= L * 4 * B * A * T * T * D && att <= 1.5 * L * 4 * B * A * T * T * D);
    wf_graph_free(&g);

    /* GPT-2's additive -inf mask buffer is causal attention too, and no parameter */
    assert_int_equal(wf_onnx_build_spec_patterns(PTDATA "/gpt2_additive_mask.onnx", 2, &g, pat, sizeof pat), WF_OK);
    assert_non_null(strstr(pat, "attention (matmul, scale, mask, softmax, matmul) x2"));
    wf_graph_totals tt;
    wf_graph_totals_of(&g, &tt);
    assert_true(tt.params == 28032);
    wf_graph_free(&g);

    /* opset 14: five decomposed LayerNorms become layernorm ops */
    assert_int_equal(wf_onnx_build_spec_patterns(PTDATA "/gpt_opset14.onnx", 2, &g, pat, sizeof pat), WF_OK);
    assert_non_null(strstr(pat, "layernorm (decomposed) x5"));
    wf_graph_free(&g);

    /* BERT: position_ids and token_type_ids buffers are no tensors */
    assert_int_equal(wf_onnx_build_spec_patterns(PTDATA "/bert.onnx", 2, &g, pat, sizeof pat), WF_OK);
    for (int i = 0; i < g.ntensors; i++)
        if (g.tensors[i].role == WF_ROLE_PARAM)
            assert_null(strstr(g.tensors[i].name, "_ids"));
    wf_graph_free(&g);

    /* a fixed-batch export rebatches once the reshapes are inside attention */
    assert_int_equal(wf_onnx_build_spec(PTDATA "/gpt_fixed_batch.onnx", 4, &g), WF_OK);
    assert_int_equal(g.tensors[g.loss].ndim, 0);
    wf_graph_free(&g);

    /* mixed precision */
    assert_int_equal(wf_onnx_build_spec(PTDATA "/mobilenet_v3.onnx:dtype=bf16", 2, &g), WF_OK);
    for (int i = 0; i < g.ntensors; i++)
        if (g.tensors[i].role == WF_ROLE_PARAM)
            assert_int_equal(g.tensors[i].dtype, WF_DTYPE_BF16);
    wf_graph_free(&g);
    assert_int_equal(wf_onnx_build_spec(PTDATA "/gpt.onnx:dtype=int8", 2, &g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "allowed: fp32, fp16, bf16"));
    wf_graph_free(&g);

    /* LSTM: refused by name, before the weight slicing in front of it */
    assert_int_equal(wf_onnx_build_spec(PTDATA "/lstm_lm.onnx", 2, &g), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "op type 'LSTM' (node"));
    assert_non_null(strstr(wf_last_error(), "is not supported"));
    wf_graph_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_testdata_shapes),
        cmocka_unit_test(test_testdata_numerics),
        cmocka_unit_test(test_testdata_refused),
        cmocka_unit_test(test_roundtrip_zoo),
        cmocka_unit_test(test_roundtrip_ops),
        cmocka_unit_test(test_roundtrip_pytorch_ops),
        cmocka_unit_test(test_rebatch),
        cmocka_unit_test(test_param_data),
        cmocka_unit_test(test_runtime_weights),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_zoo_hook),
        cmocka_unit_test(test_pytorch_cnn),
        cmocka_unit_test(test_patterns_and_dims),
        cmocka_unit_test(test_shared_and_errors),
        cmocka_unit_test(test_pytorch_exports),
        cmocka_unit_test(test_pytorch_patterns),
    };
    if (!wf_onnx_available()) {
        /* without protobuf-c an .onnx MODEL is a clear user error */
        wf_model_config m;
        if (wf_model_lookup("model.onnx", &m) != WF_INVAL ||
            !strstr(wf_last_error(), "without ONNX support")) {
            printf("FAIL: lookup of model.onnx without ONNX support: %s\n", wf_last_error());
            return 1;
        }
        printf("note: weft was built without ONNX support: only the error path tested\n");
        return 0;
    }
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
