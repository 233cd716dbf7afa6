/* Cost model: activations against Korthikanti et al.'s closed forms, weight
 * memory with ZeRO 1/2/3 against byte counts, model FLOPs against Narayanan
 * et al.'s formula, the transformer-layer weights against Korthikanti's 18
 * bytes per parameter, the pipeline message overhead (exactly 2 vpp per
 * micro-batch), the breakdown identity, the compute-time formula, sanity
 * (more dp helps until communication dominates; recomputation trades time
 * for memory; ZeRO saves memory), plan strings, files and validation (each
 * invalid plan is WF_INVAL with the values named), the estimate's JSON, the
 * exported records (per-op times add up to the section times), and the
 * pipeline of other models (closed forms of the pass-by-pass play, one send
 * per neighbour and direction). */
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
#include <unistd.h>

#include "cost/cost-impl.h"

#define REL(a, b, tol) (fabs((a) - (b)) <= (tol) * fabs(b))

static wf_cost_ctx *make_ctx(const char *model, const char *cluster)
{
    wf_model_config m;
    wf_cluster c;
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, &c), WF_OK);
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    return ctx;
}

static wf_plan plan_of(const char *text)
{
    wf_plan p;
    assert_int_equal(wf_plan_parse(text, &p), WF_OK);
    return p;
}

static wf_estimate est(wf_cost_ctx *ctx, const char *plan, int64_t batch)
{
    wf_plan p = plan_of(plan);
    wf_estimate e;
    wf_status st = wf_estimate_plan(ctx, &p, batch, &e);
    if (st != WF_OK)
        fail_msg("estimate %s: %s", plan, wf_last_error());
    return e;
}

/* ---- memory ----------------------------------------------------------------- */

static void test_korthikanti_activations(void **state)
{
    (void)state;
    /* GPT-3 175B: s=2048, h=12288, a=96 (fp16, dropout as Megatron). */
    wf_cost_ctx *ctx = make_ctx("gpt3-175b", "dgx-a100");
    const double s = 2048, h = 12288, a = 96;
    const int tps[] = {1, 2, 4, 8};
    /* Flash attention (the default profile) keeps no score matrix: q, k, v
     * as before and one fp32 log-sum-exp per row and head (4 a s b bytes). */
    for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++) {
        double t = tps[i], sbh = s * 2 * h;
        const wf_cost_sect_time *x = wf_cost_sections(ctx, 2, tps[i], 0, WF_RECOMPUTE_NONE);
        assert_non_null(x);
        assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, sbh * (10 + 24 / t) + 4 * a * s * 2 / t, 1e-9));
    }
    /* The unfused kernels of Megatron-LM 2022 keep 5 a s^2 b more. */
    wf_plan unf = plan_of("sw=megatron-2022");
    wf_cost_ctx_use(ctx, &unf);
    const int64_t bs[] = {1, 2, 4};
    for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++)
        for (size_t j = 0; j < sizeof bs / sizeof bs[0]; j++) {
            double t = tps[i], b = (double)bs[j], sbh = s * b * h;
            const wf_cost_sect_time *x = wf_cost_sections(ctx, bs[j], tps[i], 0, WF_RECOMPUTE_NONE);
            assert_non_null(x);
            assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, sbh * (10 + 24 / t + 5 * a * s / (h * t)), 1e-9));
            x = wf_cost_sections(ctx, bs[j], tps[i], 0, WF_RECOMPUTE_SELECTIVE);
            assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, sbh * (10 + 24 / t), 1e-9));
            x = wf_cost_sections(ctx, bs[j], tps[i], 0, WF_RECOMPUTE_FULL);
            assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, 2 * sbh, 1e-9));
            if (tps[i] == 1)
                continue;
            x = wf_cost_sections(ctx, bs[j], tps[i], 1, WF_RECOMPUTE_NONE);
            assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, sbh / t * (34 + 5 * a * s / h), 1e-9));
            x = wf_cost_sections(ctx, bs[j], tps[i], 1, WF_RECOMPUTE_SELECTIVE);
            assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, 34 * sbh / t, 1e-9));
            x = wf_cost_sections(ctx, bs[j], tps[i], 1, WF_RECOMPUTE_FULL);
            assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, 2 * sbh / t, 1e-9));
        }

    /* Whole device, pipelined: the first stage keeps p micro-batches of L/p
     * layers, times 1 + (p-1)/(p v) when interleaved (Korthikanti §4.2.3);
     * the embedding adds little. */
    double t = 8, p = 8, v = 3, L = 96, sbh = s * h;
    double layer = sbh * (10 + 24 / t + 5 * a * s / (h * t));
    wf_estimate e = est(ctx, "dp=1,tp=8,pp=8,mbs=1,vpp=3,sw=megatron-2022", 64);
    double ref = L / p * p * (1 + (p - 1) / (p * v)) * layer;
    assert_true(REL(e.mem_activation_bytes, ref, 0.01));
    /* Without interleaving and with fewer micro-batches than stages. */
    e = est(ctx, "dp=1,tp=8,pp=8,mbs=1,sp=1,recompute=selective,sw=megatron-2022", 4);
    ref = L / p * 4 * 34 * sbh / t;
    assert_true(REL(e.mem_activation_bytes, ref, 0.01));
    /* GPipe keeps every micro-batch: on the last stage the head's and the
     * loss's saved tensors (the logits) too, one set per micro-batch. */
    e = est(ctx, "dp=1,tp=8,pp=8,mbs=1,sp=1,recompute=selective,pipe=gpipe,sw=megatron-2022", 64);
    const wf_cost_sect_time *x = wf_cost_sections(ctx, 1, 8, 1, WF_RECOMPUTE_SELECTIVE);
    assert_non_null(x);
    ref = L / p * 64 * 34 * sbh / t + 64 * x[WF_COST_SEC_POST].act_bytes;
    assert_true(REL(e.mem_activation_bytes, ref, 0.01));
    wf_cost_ctx_free(ctx);
}

/* sw=weft, the CPU runtime's profile (fp32 here): a GPT layer keeps the
 * graph's tensors without dropout masks (regenerated from the seed) and the
 * unfused attention's probabilities alone (4 a s^2 b): 64 s b h + 4 a s^2 b
 * bytes, where the graph's Megatron count in fp32 is 66 s b h + 9 a s^2 b.
 * The runtime's own buffers: the backward's working set (the MLP hidden's
 * gradient in and out, 2 x 16 s b h, beside the residual stream's gradient,
 * 4 s b h), the attention kernel's two S x S fp32 blocks, and fc1's weight
 * and bias gradients written to a buffer before they are added. On one
 * device the whole model's: its memory is the weights (16 bytes per
 * parameter under AdamW), L layers, the embedding's ids, the head's saved
 * tensors, the logits' fp32 softmax workspace (larger than the working set
 * here) and the buffers, the largest weight gradient being the tied
 * embedding's (V h). */
static void test_weft_profile(void **state)
{
    (void)state;
    const char *spec = "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=2048,dtype=fp32";
    wf_cost_ctx *ctx = make_ctx(spec, "local");
    const double s = 128, h = 256, a = 4, V = 2048, L = 4;
    const int64_t bs[] = {1, 2, 8};
    for (int j = 0; j < 3; j++) {
        const double b = (double)bs[j], sbh = s * b * h;
        char plan[64];
        snprintf(plan, sizeof plan, "dp=1,mbs=%lld,sw=weft", (long long)bs[j]);
        (void)est(ctx, plan, bs[j]);
        const wf_cost_sect_time *x = wf_cost_sections(ctx, bs[j], 1, 0, WF_RECOMPUTE_NONE);
        assert_non_null(x);
        assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, 64 * sbh + 4 * a * s * s * b, 1e-12));
        assert_true(REL(x[WF_COST_SEC_LAYER].work_bytes, 2 * 16 * sbh + 4 * sbh, 1e-12));
        assert_true(REL(x[WF_COST_SEC_LAYER].ws_bytes, 8 * s * s, 1e-12));
        assert_true(REL(x[WF_COST_SEC_LAYER].acc_bytes, 4 * (4 * h * h + 4 * h), 1e-12));
        assert_true(REL(x[WF_COST_SEC_PRE].acc_bytes, 4 * V * h, 1e-12));
        /* Megatron-Core's profile keeps the masks and counts no buffers. */
        snprintf(plan, sizeof plan, "dp=1,mbs=%lld,attn=unfused", (long long)bs[j]);
        (void)est(ctx, plan, bs[j]);
        x = wf_cost_sections(ctx, bs[j], 1, 0, WF_RECOMPUTE_NONE);
        assert_true(REL(x[WF_COST_SEC_LAYER].act_bytes, 66 * sbh + 9 * a * s * s * b, 1e-12));
        assert_true(x[WF_COST_SEC_LAYER].work_bytes == 0 && x[WF_COST_SEC_LAYER].acc_bytes == 0);
    }
    const double b = 2, sbh = s * b * h;
    wf_estimate e = est(ctx, "dp=1,mbs=2,sw=weft", 2);
    const wf_cost_sect_time *x = wf_cost_sections(ctx, 2, 1, 0, WF_RECOMPUTE_NONE);
    double params = 0;
    wf_model_config m;
    assert_int_equal(wf_model_lookup(spec, &m), WF_OK);
    assert_int_equal(wf_model_params(&m, &params), WF_OK);
    double logits_ws = 4 * b * s * V;
    double act = L * (64 * sbh + 4 * a * s * s * b) + x[WF_COST_SEC_PRE].act_bytes + x[WF_COST_SEC_POST].act_bytes;
    double work = 36 * sbh > logits_ws ? 36 * sbh - logits_ws : 0;
    double ref = 16 * params + act + logits_ws + work + 8 * s * s + 4 * V * h + ctx->cluster.mem_reserved_bytes;
    assert_true(REL(e.memory_per_device_bytes, ref, 1e-9));
    wf_cost_ctx_free(ctx);
}

static void test_zero_bytes(void **state)
{
    (void)state;
    /* tp = pp = 1: every parameter on every device (tied embedding once). */
    wf_model_config m;
    assert_int_equal(wf_model_lookup("gpt3-1.3b", &m), WF_OK);
    double params = 0;
    assert_int_equal(wf_model_params(&m, &params), WF_OK);
    const double d = 8;
    /* Mixed-precision Adam: 2 (weight) + g (gradient: 4 with dgx-a100's fp32
     * gradient buffer, Megatron-LM's main_grad; 2 with fp16 gradients, the
     * ZeRO paper's rule) + 12 (fp32 master, m, v). ZeRO-2 shards the
     * gradients in DeepSpeed; Megatron-LM's distributed optimizer (its zero=1
     * and 2) keeps the whole gradient buffer and shards the rest: 2 + g +
     * 12/d either way (its docs: 6 + 12/d for bf16 with fp32 gradients). */
    const char *keys[] = {",grad=fp32", ",grad=fp16", ",grad=fp32,sw=deepspeed"};
    const double gbs[] = {4, 2, 4};
    wf_cost_ctx *ctx = NULL;
    for (int k = 0; k < 3; k++) {
        ctx = make_ctx("gpt3-1.3b", "dgx-a100");
        const double g = gbs[k];
        const int megatron = k < 2;
        const double ref[4] = {2 + g + 12, 2 + g + 12 / d, megatron ? 2 + g + 12 / d : 2 + (g + 12) / d,
                               (2 + g + 12) / d};
        double prev = 1e300;
        for (int z = 0; z <= 3; z++) {
            char plan[64];
            snprintf(plan, sizeof plan, "dp=8,mbs=1,zero=%d%s", z, keys[k]);
            wf_estimate e = est(ctx, plan, 64);
            assert_true(REL(e.mem_weights_bytes, params * ref[z], 1e-9));
            assert_true(megatron && z == 2 ? e.memory_per_device_bytes <= prev : e.memory_per_device_bytes < prev);
            prev = e.memory_per_device_bytes;
        }
        if (k < 2)
            wf_cost_ctx_free(ctx);
    }
    /* Splitting over tp divides the split weights (the rest is tiny). */
    wf_estimate e1 = est(ctx, "dp=1,tp=1,mbs=1", 8), e8 = est(ctx, "dp=1,tp=8,mbs=1", 8);
    assert_true(e8.mem_weights_bytes < e1.mem_weights_bytes / 7.5);
    assert_true(e8.mem_weights_bytes > e1.mem_weights_bytes / 8);
    wf_cost_ctx_free(ctx);

    /* Other models gather ZeRO-3's weights op by op (the running op and the
     * next one prefetched): never more memory than ZeRO-2. */
    char mob[1024], gpt[1024];
    const char *root = getenv("WEFT_SOURCE_DIR");
    snprintf(mob, sizeof mob, "%s%stests/data/onnx-pt/mobilenet_v2.onnx", root ? root : "", root ? "/" : "");
    snprintf(gpt, sizeof gpt, "%s%stests/data/onnx-pt/gpt.onnx", root ? root : "", root ? "/" : "");
    const char *generic[] = {"resnet50", "vgg16", mob, gpt};
    for (int k = 0; k < 4; k++) {
        wf_cost_ctx *gc = make_ctx(generic[k], "dgx-a100");
        wf_estimate z2 = est(gc, "dp=8,mbs=8,zero=2", 64), z3 = est(gc, "dp=8,mbs=8,zero=3", 64);
        assert_true(z3.memory_per_device_bytes <= z2.memory_per_device_bytes);
        wf_cost_ctx_free(gc);
    }

    /* fp32 models: 4 + 4 + 8 bytes per parameter. */
    assert_int_equal(wf_model_lookup("mlp", &m), WF_OK);
    assert_int_equal(wf_model_params(&m, &params), WF_OK);
    ctx = make_ctx("mlp", "local");
    wf_estimate e = est(ctx, "dp=1,mbs=4", 8);
    assert_true(REL(e.mem_weights_bytes, params * 16, 1e-9));
    wf_cost_ctx_free(ctx);
}

static void test_layer_weights(void **state)
{
    (void)state;
    /* Korthikanti et al. 2022 (Figure 1) count 18 bytes (2 + 4 + 12) per
     * transformer-layer parameter of a GPU: 12 h^2 / t per GPT layer (the
     * biases and norms, 13 h, are 1e-4 of it), L/p layers per stage, no
     * embedding. gpt3-175b, tp=8, pp=8: 45.56 GiB published. */
    wf_cost_ctx *ctx = make_ctx("gpt3-175b", "dgx-a100:nodes=8");
    const double h = 12288, L = 96, t = 8, p = 8, GIB = 1024.0 * 1024.0 * 1024.0;
    wf_estimate e = est(ctx, "dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=selective,sp=1,sw=megatron-2022", 64);
    double ref = 18 * L / p * 12 * h * h / t;
    assert_true(REL(e.mem_layer_weights_bytes, ref, 5e-4));
    assert_true(fabs(e.mem_layer_weights_bytes / GIB - 45.56) < 0.05);
    /* The most loaded stage (the first) also holds the embeddings: the
     * vocabulary-parallel word embedding (V h / t) and the positions (s h). */
    double emb = 18 * (51200.0 / t + 2048) * h;
    assert_true(REL(e.mem_weights_bytes - e.mem_layer_weights_bytes, emb, 0.01));
    assert_true(REL(e.memory_per_device_bytes,
                    e.mem_weights_bytes + e.mem_activation_bytes + e.mem_buffer_bytes, 1e-12));
    /* One stage: every layer, the tied embedding once. */
    e = est(ctx, "dp=8,tp=8,pp=1,mbs=1,recompute=full,sw=megatron-2022", 64);
    assert_true(REL(e.mem_layer_weights_bytes, 18 * L * 12 * h * h / t, 5e-4));
    wf_cost_ctx_free(ctx);
    /* Generic models have no embedding: the layer part is all of it. */
    ctx = make_ctx("resnet50", "dgx-a100");
    e = est(ctx, "dp=2,pp=2,mbs=8", 64);
    assert_true(e.mem_layer_weights_bytes == e.mem_weights_bytes);
    wf_cost_ctx_free(ctx);
}

/* ---- attention kinds, FP8, context parallelism (docs/cost-model.md) -------------- */

static int attention_op(const wf_cost_ctx *ctx)
{
    for (int i = 0; i < ctx->nops; i++)
        if (ctx->ops[i].attn_core)
            return i;
    fail_msg("no attention op");
    return -1;
}

/* FlashAttention-2's work: forward QK^T and PV (4 s^2 d per head) and the
 * softmax; backward the five products of the unfused backward's four plus
 * the recomputed QK^T (2.5 x the forward's products) and the softmax again;
 * a causal mask skips the blocks above the diagonal, (n + 1) / 2n of them
 * with n 128-wide blocks. It keeps q, k, v and one fp32 log-sum-exp per row
 * and head. */
static void test_flash_closed_form(void **state)
{
    (void)state;
    const char *models[] = {"gpt3-175b", "bert-large"};
    for (int k = 0; k < 2; k++) {
        wf_cost_ctx *ctx = make_ctx(models[k], "dgx-a100");
        const wf_cost_op *r = &ctx->ops[attention_op(ctx)];
        double s = (double)ctx->model.seq, a = (double)ctx->model.heads, d = (double)ctx->model.hidden / a;
        double scores = a * s * s, n = s / 128.0;
        double frac = ctx->model.causal ? (n + 1) / (2 * n) : 1.0;
        /* Softmax and scale 5 per score, dropout 2 more (GPT has it, BERT
         * here too): the graph's unfused count. */
        double sm = r->fwd_flops - 4 * scores * d;
        assert_true(REL(sm, 5 * scores, 1e-9) || REL(sm, 7 * scores, 1e-9));
        assert_true(REL(r->fl_fwd_flops, frac * (4 * scores * d + sm), 1e-12));
        assert_true(REL(r->fl_bwd_flops, frac * (10 * scores * d + 2 * sm + 5 * scores), 1e-12));
        assert_true(REL(r->fl_saved_scores, 4 * a * s, 1e-12));
        /* Unfused keeps the full score matrix (probabilities, and with
         * dropout its mask and output). */
        assert_true(r->saved_scores > 2 * scores);
        wf_cost_ctx_free(ctx);
    }
}

/* An FP8 product of large size takes, on the FLOPs table (kernel_model=0),
 * its FLOPs over (FP8 peak x the matrix efficiency x fp8_eff) plus its
 * traffic over the achieved bandwidth; on the device model, the FP8 product
 * of its shape plus Transformer Engine's quantization traffic. */
static void test_fp8_gemm(void **state)
{
    (void)state;
    wf_cost_ctx *kc = make_ctx("gpt3-175b", "dgx-h100-kernels:op_gap_s=0");
    {
        const wf_device *d = &kc->cluster.dev;
        int lin = -1;
        for (int i = 0; i < kc->nops && lin < 0; i++)
            if (kc->ops[i].matrix && !kc->ops[i].attn_core && kc->ops[i].params > 1e8)
                lin = i;
        assert_true(lin >= 0);
        const wf_cost_op *r = &kc->ops[lin];
        const double b = 16, M = r->gm * b;
        assert_true(r->gm == 2048 && r->gk > 0 && r->gn > 0);
        wf_plan p8 = plan_of("fp8=1"), p16 = plan_of("fp8=0");
        wf_cost_ctx_use(kc, &p8);
        wf_cost_op_time t8 = wf_cost_op_time_of(kc, r, b, 1, 1);
        double cast = (r->gsplit == 1 ? 2.0 : 4.0) * M * r->gk;
        double ref = wf_gemm_time(d, WF_GEMM_FP8, 1, M, r->gn, r->gk) + wf_membound_time(d, WF_MB_ELEM, 0, cast);
        assert_true(REL(t8.fwd_s, ref, 1e-12));
        /* Data gradient (M, K, N) with the output gradient's quantization;
         * weight gradient (K, N, M). */
        ref = wf_gemm_time(d, WF_GEMM_FP8, 1, M, r->gk, r->gn) + wf_membound_time(d, WF_MB_ELEM, 0, 4.0 * M * r->gn);
        assert_true(REL(t8.bwd_in_s, ref, 1e-12));
        assert_true(REL(t8.bwd_w_s, wf_gemm_time(d, WF_GEMM_FP8, 1, r->gk, r->gn, M), 1e-12));
        wf_cost_ctx_use(kc, &p16);
        wf_cost_op_time t16 = wf_cost_op_time_of(kc, r, b, 1, 1);
        assert_true(REL(t16.fwd_s, wf_gemm_time(d, WF_GEMM_HALF, 1, M, r->gn, r->gk), 1e-12));
        assert_true(t8.fwd_s < 0.75 * t16.fwd_s);
    }
    wf_cost_ctx_free(kc);
    wf_cost_ctx *ctx = make_ctx("gpt3-175b", "dgx-h100:kernel_model=0,op_gap_s=0");
    const wf_device *d = &ctx->cluster.dev;
    int lin = -1;
    for (int i = 0; i < ctx->nops && lin < 0; i++)
        if (ctx->ops[i].matrix && !ctx->ops[i].attn_core && ctx->ops[i].params > 1e8)
            lin = i;
    assert_true(lin >= 0);
    const wf_cost_op *r = &ctx->ops[lin];
    const double b = 16;
    wf_plan p8 = plan_of("fp8=1"), p16 = plan_of("fp8=0");
    wf_cost_ctx_use(ctx, &p8);
    wf_cost_op_time t8 = wf_cost_op_time_of(ctx, r, b, 1, 1);
    double f = r->fwd_flops * b;
    double bytes = r->fwd_act_bytes * b + r->params * ctx->elem_bytes;
    double ref = f / (d->fp8_flops * wf_device_matrix_eff(d, f) * d->fp8_eff) + bytes / (d->mem_bw_bps * d->mem_eff);
    assert_true(REL(t8.fwd_s, ref, 1e-12));
    wf_cost_ctx_use(ctx, &p16);
    wf_cost_op_time t16 = wf_cost_op_time_of(ctx, r, b, 1, 1);
    double ref16 = f / (d->matrix_flops[ctx->dtype] * wf_device_matrix_eff(d, f)) + bytes / (d->mem_bw_bps * d->mem_eff);
    assert_true(REL(t16.fwd_s, ref16, 1e-12));
    assert_true(t8.fwd_s < 0.6 * t16.fwd_s);
    /* Attention stays in 16 bits. */
    const wf_cost_op *at = &ctx->ops[attention_op(ctx)];
    wf_cost_ctx_use(ctx, &p8);
    double a8 = wf_cost_op_time_of(ctx, at, b, 1, 1).fwd_s;
    wf_cost_ctx_use(ctx, &p16);
    assert_true(REL(a8, wf_cost_op_time_of(ctx, at, b, 1, 1).fwd_s, 1e-12));
    wf_cost_ctx_free(ctx);
}

/* Context parallelism: each rank keeps 1/cp of the activations and does 1/cp
 * of the work; the ring passes its K and V chunk cp - 1 times forward and
 * K, V and their gradients backward. */
static void test_context_parallel(void **state)
{
    (void)state;
    wf_cost_ctx *ctx = make_ctx("llama2-7b:seq=32768", "dgx-h100:nodes=2");
    const int i = attention_op(ctx);
    const double kv = ctx->ops[i].kv_bytes; /* k and v of one sample, all heads */
    const double s = 32768, h = 4096;
    assert_true(REL(kv, 2 * s * h * 2, 1e-12)); /* fp16 k and v, 32 kv heads */
    wf_plan p = plan_of("dp=1,tp=2,cp=4,mbs=1");
    wf_cost_ctx_use(ctx, &p);
    double rf, rb;
    wf_cost_cp_ring(ctx, &p, i, &rf, &rb);
    wf_group ring = wf_group_place(&ctx->cluster, 4, 2);
    double chunk = kv / (2 * 4);
    assert_true(REL(rf, 3 * wf_coll_time(&ctx->cluster, WF_COLL_SENDRECV, &ring, chunk), 1e-12));
    assert_true(REL(rb, 3 * wf_coll_time(&ctx->cluster, WF_COLL_SENDRECV, &ring, 2 * chunk), 1e-12));
    /* Per-rank activations: 1/cp of cp=1's. */
    const wf_cost_sect_time *x4 = wf_cost_sections(ctx, 1, 2, 0, WF_RECOMPUTE_NONE);
    double a4 = x4[WF_COST_SEC_LAYER].act_bytes, f4 = x4[WF_COST_SEC_LAYER].fwd;
    wf_plan p1 = plan_of("dp=1,tp=2,cp=1,mbs=1");
    wf_cost_ctx_use(ctx, &p1);
    const wf_cost_sect_time *x1 = wf_cost_sections(ctx, 1, 2, 0, WF_RECOMPUTE_NONE);
    assert_true(REL(a4, x1[WF_COST_SEC_LAYER].act_bytes / 4, 1e-12));
    assert_true(f4 < x1[WF_COST_SEC_LAYER].fwd / 3.5);
    /* Gradients are reduced over dp x cp: cp=4 alone on 8 devices. */
    wf_estimate e;
    wf_plan q = plan_of("tp=2,cp=4,mbs=1");
    assert_int_equal(wf_estimate_plan(ctx, &q, 8, &e), WF_OK);
    assert_true(e.breakdown.dp_comm > 0);
    assert_int_equal(e.devices, 8);
    wf_cost_ctx_free(ctx);
}

/* Expert parallelism: each moe_dispatch's tokens (tokens x top_k x capacity x
 * h bytes, 1/tp of them per rank) cross the ep group twice per pass; expert
 * weights divide by ep x etp; with epo=1 the exchanges hide behind the
 * layer's compute up to its length. */
static void test_expert_parallel(void **state)
{
    (void)state;
    wf_cost_ctx *ctx = make_ctx("mixtral-8x7b:dtype=bf16", "dgx-h100:nodes=8");
    int d = -1;
    for (int i = 0; i < ctx->nops && d < 0; i++)
        if (ctx->ops[i].a2a_bytes > 0)
            d = i;
    assert_true(d >= 0);
    const double s = 4096, h = 4096, k = 2;
    /* capacity = ceil(cf x tokens x k / E) rows per expert, cf 1: all tokens */
    assert_true(REL(ctx->ops[d].a2a_bytes, s * k * h * 2, 1e-9));
    wf_plan p = plan_of("dp=32,tp=2,ep=8,etp=1,mbs=1");
    wf_cost_ctx_use(ctx, &p);
    double ef, eb;
    wf_cost_expert_comm(ctx, d, 1, 2, &ef, &eb);
    wf_group eg = wf_group_place(&ctx->cluster, 8, 1);
    double a2a = wf_coll_time(&ctx->cluster, WF_COLL_ALLTOALL, &eg, s * k * h * 2 / 2);
    assert_true(REL(ef, 2 * a2a, 1e-12) && REL(eb, 2 * a2a, 1e-12));
    /* Expert weights per rank: 1/8 of the experts'. */
    wf_estimate e1 = est(ctx, "dp=32,tp=2,ep=1,mbs=1", 64), e8 = est(ctx, "dp=32,tp=2,ep=8,etp=1,mbs=1", 64);
    assert_true(e8.mem_weights_bytes < e1.mem_weights_bytes / 2);
    assert_true(e8.breakdown.ep_comm > 0 && e1.breakdown.ep_comm > 0); /* etp = tp = 2: the tokens gathered */
    /* Imbalance scales the busiest rank's exchange and expert work. */
    wf_estimate eimb = est(ctx, "dp=32,tp=2,ep=8,etp=1,mbs=1,imb=1.5", 64);
    double r = eimb.breakdown.ep_comm / e8.breakdown.ep_comm; /* 1.5 on the bytes, not the latency */
    assert_true(r > 1.3 && r <= 1.5 + 1e-12);
    assert_true(eimb.breakdown.compute > e8.breakdown.compute);
    /* Overlapped: what shows is the excess over the layer's compute. */
    wf_estimate eo = est(ctx, "dp=32,tp=2,ep=8,etp=1,mbs=1,epo=1", 64);
    assert_true(eo.breakdown.ep_comm < e8.breakdown.ep_comm);
    assert_true(eo.iteration_time_s < e8.iteration_time_s);
    wf_cost_ctx_free(ctx);
}

/* ---- time -------------------------------------------------------------------- */

static void test_compute_time(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100", &c), WF_OK);
    const wf_device *d = &c.dev;
    double f = 3e11, n = 2e8;
    double ref = f / (d->matrix_flops[WF_DTYPE_FP16] * wf_device_matrix_eff(d, f)) +
                 n / (d->mem_bw_bps * d->mem_eff);
    assert_true(REL(wf_compute_time(d, 1, WF_DTYPE_FP16, f, n), ref, 1e-12));
    ref = 1e9 / (d->vector_flops[WF_DTYPE_FP32] * d->vector_eff) + n / (d->mem_bw_bps * d->mem_eff);
    assert_true(REL(wf_compute_time(d, 0, WF_DTYPE_FP32, 1e9, n), ref, 1e-12));
    /* Tiny ops cost the launch floor; nothing costs nothing. */
    assert_true(wf_compute_time(d, 0, WF_DTYPE_FP16, 10, 10) == d->op_overhead_s);
    assert_true(wf_compute_time(d, 1, WF_DTYPE_FP16, 0, 0) == 0);
}

static void test_model_flops_and_identity(void **state)
{
    (void)state;
    const char *models[] = {"gpt3-175b", "megatron-22b", "gpt3-1.3b"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        wf_model_config m;
        assert_int_equal(wf_model_lookup(models[i], &m), WF_OK);
        wf_cost_ctx *ctx = make_ctx(models[i], "dgx-a100");
        const int64_t B = 64;
        wf_estimate e = est(ctx, "dp=8,tp=1,mbs=1", B);
        double s = (double)m.seq, h = (double)m.hidden, l = (double)m.layers, V = (double)m.vocab;
        /* Narayanan et al. 2021 without recomputation: 72 B s l h^2 (1 + s/6h + V/12lh). */
        double ref = 72 * (double)B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
        assert_true(REL(e.model_flops_per_iteration, ref, 0.01));
        /* The breakdown adds up to the iteration time. */
        const char *plans[] = {"dp=8,tp=1,mbs=1", "dp=2,tp=4,pp=1,mbs=2,zero=1",
                               "dp=1,tp=2,pp=4,mbs=1,vpp=2,recompute=full",
                               "dp=2,tp=4,pp=2,mbs=1,sp=1,recompute=selective,overlap=0"};
        for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
            wf_estimate x = est(ctx, plans[k], B);
            const wf_breakdown *b = &x.breakdown;
            double sum = b->compute + b->recompute + b->bubble + b->optimizer + b->exposed_comm;
            assert_true(REL(x.iteration_time_s, sum, 1e-12));
            assert_true(b->exposed_comm >= b->tp_comm + b->pp_comm - 1e-15);
            assert_true(x.iteration_time_s > 0 && x.mfu > 0 && x.mfu < 1);
            assert_true(REL(x.samples_per_s, (double)B / x.iteration_time_s, 1e-12));
            assert_true(REL(x.tflops_per_device,
                            x.model_flops_per_iteration / x.iteration_time_s / (double)x.devices / 1e12,
                            1e-12));
        }
        wf_cost_ctx_free(ctx);
    }
}

static void test_pipeline(void **state)
{
    (void)state;
    wf_cost_ctx *ctx = make_ctx("gpt3-175b", "dgx-a100");
    /* Bubble (p-1)/v of a stage's time per micro-batch: interleaving divides it. */
    wf_estimate v1 = est(ctx, "dp=1,tp=8,pp=8,mbs=1,vpp=1", 64);
    wf_estimate v3 = est(ctx, "dp=1,tp=8,pp=8,mbs=1,vpp=3", 64);
    assert_true(REL(v1.breakdown.bubble / v3.breakdown.bubble, 3.0, 0.05));
    /* Bubble share (p-1)/(m + ...) shrinks with more micro-batches. */
    wf_estimate m128 = est(ctx, "dp=1,tp=8,pp=8,mbs=1,vpp=1", 128);
    assert_true(m128.breakdown.bubble / m128.iteration_time_s < v1.breakdown.bubble / v1.iteration_time_s);
    assert_true(REL(v1.breakdown.bubble / (v1.iteration_time_s - v1.breakdown.bubble), 7.0 / 64.0, 0.1));
    /* Interleaving sends v times more messages (Megatron-LM 2022, whose
     * sends wait for the wire). */
    wf_estimate w1 = est(ctx, "dp=1,tp=8,pp=8,mbs=1,vpp=1,sw=megatron-2022", 64);
    wf_estimate w3 = est(ctx, "dp=1,tp=8,pp=8,mbs=1,vpp=3,sw=megatron-2022", 64);
    assert_true(w3.breakdown.pp_comm > 2.5 * w1.breakdown.pp_comm);
    /* Megatron-Core overlaps the interleaved sends with compute: each of
     * the 2 v exchanges of a micro-batch costs the call's fixed overhead,
     * one fewer on the critical stage, an end stage (the head's). */
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100", &c), WF_OK);
    assert_true(REL(v3.breakdown.pp_comm, 64 * (2 * 3 - 1) * c.p2p_overhead_s, 1e-9));
    wf_cost_ctx_free(ctx);

    /* Non-transformers: pipeline stages split by time; more stages than ops fails. */
    ctx = make_ctx("resnet50", "dgx-a100");
    wf_estimate r1 = est(ctx, "dp=1,mbs=32", 256), r4 = est(ctx, "dp=1,pp=4,mbs=32", 256);
    assert_true(r4.iteration_time_s < r1.iteration_time_s / 2.5);
    assert_true(r4.mem_weights_bytes < r1.mem_weights_bytes);
    wf_plan p = plan_of("dp=1,pp=200,mbs=1");
    wf_estimate e;
    assert_int_equal(wf_estimate_plan(ctx, &p, 200, &e), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "pp=200"));
    wf_cost_ctx_free(ctx);
}

static void test_p2p_overhead(void **state)
{
    (void)state;
    /* A pipeline send costs alpha + n beta (+ the tp all-gather) plus the
     * cluster's p2p_overhead_s; 2 vpp sends per micro-batch and stage, one
     * fewer on the end stages (the critical one here, with the head), so
     * pp_comm grows by exactly m x (2 vpp - 1) x overhead. */
    wf_cluster c0, c1;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=8,p2p_overhead_s=0", &c0), WF_OK);
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=8,p2p_overhead_s=1e-3", &c1), WF_OK);
    wf_group pair = wf_group_place(&c0, 2, 8);
    const double n = 2048.0 * 12288 * 2 / 8;
    const wf_level *ib = &c0.level[1];
    double wire = wf_coll_time_flat(WF_COLL_SENDRECV, WF_ALGO_AUTO, 2, n, ib->latency_s, ib->bw_bps * ib->eff);
    assert_true(REL(wf_coll_time(&c0, WF_COLL_SENDRECV, &pair, n), wire, 1e-12));
    assert_true(REL(wf_coll_time(&c1, WF_COLL_SENDRECV, &pair, n), wire + 1e-3, 1e-12));
    /* Collectives do not pay it; a group of one sends nothing. */
    wf_group tp8 = wf_group_place(&c0, 8, 1), one = wf_group_place(&c0, 1, 1);
    assert_true(wf_coll_time(&c0, WF_COLL_ALLREDUCE, &tp8, n) == wf_coll_time(&c1, WF_COLL_ALLREDUCE, &tp8, n));
    assert_true(wf_coll_time(&c1, WF_COLL_SENDRECV, &one, n) == 0);

    wf_model_config m;
    assert_int_equal(wf_model_lookup("gpt3-175b", &m), WF_OK);
    wf_cost_ctx *a = NULL, *b = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c0, &a), WF_OK);
    assert_int_equal(wf_cost_ctx_create(&m, &c1, &b), WF_OK);
    const char *plans[] = {"dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full", "dp=1,tp=8,pp=8,mbs=1,vpp=12,recompute=selective,sp=1",
                           "dp=2,tp=4,pp=8,mbs=1,vpp=1,recompute=selective,sp=1"};
    const double vpps[] = {3, 12, 1}, ms[] = {64, 64, 32};
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        wf_estimate e0 = est(a, plans[i], 64), e1 = est(b, plans[i], 64);
        assert_true(REL(e1.breakdown.pp_comm - e0.breakdown.pp_comm, ms[i] * (2 * vpps[i] - 1) * 1e-3, 1e-6));
        assert_true(e1.breakdown.bubble > e0.breakdown.bubble);
        assert_true(e1.breakdown.compute == e0.breakdown.compute);
    }
    /* Without pipelining nothing changes. */
    wf_estimate e0 = est(a, "dp=8,tp=8,pp=1,mbs=1,recompute=full", 64);
    wf_estimate e1 = est(b, "dp=8,tp=8,pp=1,mbs=1,recompute=full", 64);
    assert_true(e0.iteration_time_s == e1.iteration_time_s);
    wf_cost_ctx_free(a);
    wf_cost_ctx_free(b);

    /* Overrides and files: range-checked, named, round-tripped. */
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:p2p_overhead_s=2", &c), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "p2p_overhead_s"));
    assert_int_equal(wf_cluster_lookup("dgx-a100:p2p_overhead_s=-1e-6", &c), WF_INVAL);
    cJSON *j = wf_cluster_to_json(&c1);
    assert_true(cJSON_GetObjectItemCaseSensitive(j, "p2p_overhead_s")->valuedouble == 1e-3);
    assert_int_equal(wf_cluster_from_json(j, "c.json", &c), WF_OK);
    assert_true(c.p2p_overhead_s == 1e-3);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "p2p_overhead_s", cJSON_CreateNumber(-1));
    assert_int_equal(wf_cluster_from_json(j, "c.json", &c), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "p2p_overhead_s"));
    /* Absent from a file: 0 (the wire alone). */
    cJSON_DeleteItemFromObjectCaseSensitive(j, "p2p_overhead_s");
    assert_int_equal(wf_cluster_from_json(j, "c.json", &c), WF_OK);
    assert_true(c.p2p_overhead_s == 0);
    cJSON_Delete(j);
}

static void test_sanity(void **state)
{
    (void)state;
    /* More data parallelism gives more samples/s (weak scaling: 8 samples per
     * device) with non-increasing efficiency on InfiniBand; over 10 Gb/s
     * Ethernet, leaving the node makes communication dominate. */
    const int dps[] = {1, 2, 4, 8, 16, 32, 64};
    const char *clusters[] = {"v100-ib100", "v100-10gbe"};
    wf_cost_ctx *ctx = NULL;
    for (int ci = 0; ci < 2; ci++) {
        ctx = make_ctx("gpt2", clusters[ci]);
        double prev = 0, eff_prev = 2, base = 0;
        for (size_t i = 0; i < sizeof dps / sizeof dps[0]; i++) {
            char plan[64];
            snprintf(plan, sizeof plan, "dp=%d,mbs=8", dps[i]);
            wf_estimate e = est(ctx, plan, 8 * dps[i]);
            if (i == 0)
                base = e.samples_per_s;
            double eff = e.samples_per_s / (base * dps[i]);
            assert_true(eff <= eff_prev + 1e-9);
            if (ci == 0)
                assert_true(e.samples_per_s > prev);
            if (dps[i] == 4) /* inside a node: NVLink */
                assert_true(eff > 0.9);
            if (ci == 0 && dps[i] == 64)
                assert_true(eff > 0.5);
            if (ci == 1 && dps[i] == 8) /* two nodes over Ethernet: no gain */
                assert_true(eff < 0.6);
            if (ci == 1 && dps[i] == 64) {
                assert_true(e.breakdown.exposed_comm > e.breakdown.compute);
                assert_true(eff < 0.4);
            }
            prev = e.samples_per_s;
            eff_prev = eff;
        }
        if (ci == 0)
            wf_cost_ctx_free(ctx);
    }
    /* Without overlap the reduction is fully exposed. */
    wf_estimate ov = est(ctx, "dp=64,mbs=8", 512), no = est(ctx, "dp=64,mbs=8,overlap=0", 512);
    assert_true(no.iteration_time_s > ov.iteration_time_s);
    assert_true(REL(no.breakdown.exposed_comm, no.breakdown.dp_comm, 1e-9));
    wf_cost_ctx_free(ctx);

    /* Recomputation: full uses less memory and more time than none; selective
     * sits between them in memory. ZeRO-1 saves memory. */
    ctx = make_ctx("gpt3-13b", "dgx-a100");
    wf_estimate none = est(ctx, "dp=4,tp=8,pp=2,mbs=1", 128);
    wf_estimate sel = est(ctx, "dp=4,tp=8,pp=2,mbs=1,recompute=selective", 128);
    wf_estimate full = est(ctx, "dp=4,tp=8,pp=2,mbs=1,recompute=full", 128);
    assert_true(full.memory_per_device_bytes < sel.memory_per_device_bytes);
    assert_true(sel.memory_per_device_bytes < none.memory_per_device_bytes);
    assert_true(full.iteration_time_s > sel.iteration_time_s);
    assert_true(sel.iteration_time_s > none.iteration_time_s);
    assert_true(full.breakdown.recompute > 0 && none.breakdown.recompute == 0);
    wf_estimate z1 = est(ctx, "dp=4,tp=8,pp=2,mbs=1,zero=1", 128);
    assert_true(z1.memory_per_device_bytes < none.memory_per_device_bytes);
    assert_true(z1.mem_weights_bytes < none.mem_weights_bytes);
    /* Sequence parallelism saves activation memory. */
    wf_estimate sp = est(ctx, "dp=4,tp=8,pp=2,mbs=1,sp=1", 128);
    assert_true(sp.mem_activation_bytes < none.mem_activation_bytes);
    /* Bigger micro-batches: fewer, larger products; more activation memory. */
    wf_estimate b4 = est(ctx, "dp=4,tp=8,pp=2,mbs=4", 128);
    assert_true(b4.mem_activation_bytes > none.mem_activation_bytes);
    /* Too big a model for too few devices does not fit. */
    wf_cost_ctx_free(ctx);
    ctx = make_ctx("gpt3-175b", "dgx-a100");
    wf_estimate big = est(ctx, "dp=8,mbs=1", 8);
    assert_false(big.fits);
    wf_cost_ctx_free(ctx);
}

/* ---- plans ------------------------------------------------------------------------- */

static void test_plan_strings(void **state)
{
    (void)state;
    wf_plan p, q;
    wf_plan_default(&p);
    assert_int_equal(p.dp * p.tp * p.pp * p.mbs * p.vpp, 1);
    assert_int_equal(p.recompute, WF_RECOMPUTE_NONE);
    assert_int_equal(p.overlap, 1);
    assert_int_equal(p.comm.kind, WF_COMM_DDP);
    assert_int_equal(wf_plan_parse("dp=24,tp=8,pp=8,mbs=2,vpp=2,recompute=full,zero=1,sp=1,"
                                   "overlap=0,pipe=gpipe,comm=ddp:25", &p), WF_OK);
    assert_int_equal(p.dp, 24);
    assert_int_equal(p.vpp, 2);
    assert_int_equal(p.recompute, WF_RECOMPUTE_FULL);
    assert_int_equal(p.zero, 1);
    assert_int_equal(p.sp, 1);
    assert_int_equal(p.overlap, 0);
    assert_int_equal(p.pipe, WF_PIPE_GPIPE);
    assert_true(p.comm.threshold_bytes == 25.0 * 1024 * 1024);
    assert_int_equal(wf_plan_devices(&p), 24 * 8 * 8);
    char buf[256];
    wf_plan_format(&p, buf, sizeof buf);
    assert_string_equal(buf, "dp=24,tp=8,pp=8,mbs=2,vpp=2,recompute=full,sp=1,zero=1,overlap=0,"
                             "pipe=gpipe,comm=ddp:25");
    assert_int_equal(wf_plan_parse(buf, &q), WF_OK);
    assert_memory_equal(&p, &q, sizeof p);
    wf_plan_default(&p);
    wf_plan_format(&p, buf, sizeof buf);
    assert_string_equal(buf, "dp=1,tp=1,pp=1,mbs=1,vpp=1,recompute=none,sp=0,zero=0,overlap=1,"
                             "pipe=1f1b,comm=ddp");

    wf_comm_sched cs;
    assert_int_equal(wf_comm_parse("dear", &cs), WF_OK);
    assert_int_equal(cs.kind, WF_COMM_DEAR);
    assert_true(cs.threshold_bytes == 0);
    assert_int_equal(wf_comm_parse("horovod:64", &cs), WF_OK);
    assert_true(cs.threshold_bytes == 64.0 * 1024 * 1024);
    assert_int_equal(wf_comm_parse("wfbp:3", &cs), WF_INVAL);
    assert_int_equal(wf_comm_parse("ddp:x", &cs), WF_INVAL);
    assert_int_equal(wf_comm_parse("nccl", &cs), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "nccl"));
    for (int k = 0; k < WF_COMM_COUNT; k++) {
        assert_int_equal(wf_comm_parse(wf_comm_name((wf_comm_kind)k), &cs), WF_OK);
        assert_int_equal(cs.kind, k);
    }

    const char *bad[] = {"dp=0", "tp=x", "zero=4", "sp=2", "recompute=some", "pipe=zb",
                         "bogus=1", "dp=1,dp=2", "", "dp", "vpp=0", "comm=ddp:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(wf_plan_parse(bad[i], &p), WF_INVAL);
    assert_int_equal(wf_plan_parse("bogus=1", &p), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "bogus"));
    assert_int_equal(wf_plan_parse("recompute=some", &p), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "some"));
}

/* Uneven stages: stages=a/b/... parses (runs as recompute lists do), sets pp,
 * prints back in the canonical string, and is checked against the model. */
static void test_plan_uneven_stages(void **state)
{
    (void)state;
    wf_plan p, q;
    assert_int_equal(wf_plan_parse("dp=2,tp=4,stages=2/6*6/2", &p), WF_OK);
    assert_int_equal(p.pp, 8);
    assert_int_equal(p.stage_n, 8);
    assert_int_equal(p.stage_layers[0], 2);
    assert_int_equal(p.stage_layers[3], 6);
    assert_int_equal(p.stage_layers[7], 2);
    assert_int_equal(wf_plan_stage_layers(&p, 40, 7), 2);
    assert_int_equal(wf_plan_stage_first_layer(&p, 40, 2), 8);
    assert_string_equal(wf_plan_kind(&p), "uneven 1F1B");
    char buf[512];
    wf_plan_format(&p, buf, sizeof buf);
    assert_non_null(strstr(buf, ",stages=2/6*6/2,"));
    assert_int_equal(wf_plan_parse(buf, &q), WF_OK);
    q.given = p.given;
    assert_memory_equal(&p, &q, sizeof p);
    /* Bad lists: a count that disagrees with pp, a stage of 0 layers, one stage. */
    assert_int_equal(wf_plan_parse("pp=4,stages=10/10/20", &p), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "3 stages for pp=4"));
    assert_int_equal(wf_plan_parse("stages=10/0/30", &p), WF_INVAL);
    assert_int_equal(wf_plan_parse("stages=40", &p), WF_INVAL);
    /* Against the model: the layers must add up, one chunk per stage, one recompute value. */
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("gpt3-13b", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("v100-10gbe", &c), WF_OK);
    assert_int_equal(wf_plan_parse("dp=2,tp=4,mbs=1,stages=2/6*6/2", &p), WF_OK);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_OK);
    assert_int_equal(wf_plan_parse("dp=2,tp=4,mbs=1,stages=2/6*6/3", &p), WF_OK);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "places 41 layers"));
    assert_int_equal(wf_plan_parse("dp=2,tp=4,mbs=1,vpp=2,stages=2/6*6/2", &p), WF_OK);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_INVAL);
    assert_int_equal(wf_plan_parse("dp=2,tp=4,mbs=1,recompute=full,rc_layers=1,stages=2/6*6/2", &p), WF_OK);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_INVAL);
    assert_int_equal(wf_model_lookup("resnet50", &m), WF_OK);
    assert_int_equal(wf_plan_parse("dp=4,stages=1/1", &p), WF_OK);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_INVAL);
    /* Even stages written as a list cost the same as none. */
    assert_int_equal(wf_model_lookup("gpt3-13b", &m), WF_OK);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    wf_estimate a, b;
    assert_int_equal(wf_plan_parse("dp=2,tp=4,pp=8,mbs=1,sp=1,zero=1", &p), WF_OK);
    assert_int_equal(wf_estimate_plan(ctx, &p, 64, &a), WF_OK);
    assert_int_equal(wf_plan_parse("dp=2,tp=4,pp=8,mbs=1,sp=1,zero=1,stages=5*8", &p), WF_OK);
    assert_int_equal(wf_estimate_plan(ctx, &p, 64, &b), WF_OK);
    assert_true(fabs(a.iteration_time_s / b.iteration_time_s - 1) < 1e-9);
    assert_true(a.memory_per_device_bytes == b.memory_per_device_bytes);
    wf_cost_ctx_free(ctx);
}

static void test_plan_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/weft-plan-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    wf_plan p = plan_of("dp=2,tp=4,pp=2,mbs=2,recompute=selective,sp=1,comm=dear:8"), q;
    wf_plan_meta meta, got;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "gpt3-13b");
    snprintf(meta.cluster, sizeof meta.cluster, "dgx-a100:nodes=2");
    meta.batch = 32;
    cJSON *est_j = cJSON_CreateObject();
    cJSON_AddNumberToObject(est_j, "iteration_time_s", 1.5);
    assert_int_equal(wf_plan_write_file(path, &p, &meta, est_j), WF_OK);
    cJSON_Delete(est_j);
    assert_int_equal(wf_plan_read_file(path, &q, &got), WF_OK);
    assert_memory_equal(&p, &q, sizeof p);
    assert_string_equal(got.model, "gpt3-13b");
    assert_string_equal(got.cluster, "dgx-a100:nodes=2");
    assert_int_equal(got.batch, 32);
    /* wf_plan_parse takes the file name too. */
    memset(&q, 0, sizeof q);
    assert_int_equal(wf_plan_parse(path, &q), WF_OK);
    assert_memory_equal(&p, &q, sizeof p);

    /* Malformed files name the problem. */
    const char *bad[] = {
        "{\"format\":\"weft-plan\",\"version\":1}",
        "{\"format\":\"weft-plan\",\"version\":2,\"plan\":\"dp=1\"}",
        "{\"format\":\"other\",\"version\":1,\"plan\":\"dp=1\"}",
        "{\"format\":\"weft-plan\",\"version\":1,\"plan\":\"dp=0\"}",
        "{\"format\":\"weft-plan\",\"version\":1,\"plan\":\"dp=1\",\"extra\":1}",
        "{\"format\":\"weft-plan\",\"version\":1,\"plan\":\"dp=1\",\"batch\":-3}",
        "{\"format\":\"weft-plan\",\"version\":1,\"plan\":\"dp=1\",\"estimate\":3}",
        "{\"format\":\"weft-plan\",",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i], f);
        fclose(f);
        assert_int_equal(wf_plan_read_file(path, &q, &got), WF_FORMAT);
        assert_non_null(strstr(wf_last_error(), path));
    }
    assert_int_not_equal(wf_plan_parse("/nonexistent/plan.json", &q), WF_OK);
    unlink(path);
    rmdir(dir);
}

static void expect_invalid(wf_cost_ctx *ctx, const char *plan, int64_t batch, const char *words)
{
    wf_plan p = plan_of(plan);
    wf_estimate e;
    wf_status st = wf_estimate_plan(ctx, &p, batch, &e);
    if (st != WF_INVAL)
        fail_msg("plan %s batch %lld: expected WF_INVAL, got %d", plan, (long long)batch, st);
    /* Every listed word (values, names) is in the one-line reason. */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", words);
    for (char *w = strtok(buf, " "); w; w = strtok(NULL, " "))
        if (!strstr(wf_last_error(), w))
            fail_msg("plan %s: reason '%s' lacks '%s'", plan, wf_last_error(), w);
    assert_null(strchr(wf_last_error(), '\n'));
}

static void test_validation(void **state)
{
    (void)state;
    /* dgx-a100:nodes=8 = 64 devices; gpt3-175b: 96 heads, 96 layers. */
    wf_cost_ctx *ctx = make_ctx("gpt3-175b", "dgx-a100:nodes=8");
    expect_invalid(ctx, "tp=7,dp=1,pp=8", 64, "tp=7 heads=96");
    expect_invalid(ctx, "tp=8,pp=5", 64, "layers=96 pp*vpp 5*1");
    expect_invalid(ctx, "tp=8,pp=4,vpp=5", 64, "layers=96 4*5");
    expect_invalid(ctx, "tp=8,dp=2,mbs=3", 64, "batch=64 mbs*dp 3*2");
    expect_invalid(ctx, "tp=8,dp=2,pp=8", 64, "128 devices 64");
    expect_invalid(ctx, "tp=8,vpp=2", 64, "vpp=2 pp");
    expect_invalid(ctx, "tp=1,sp=1", 64, "sp=1 tp=1");
    expect_invalid(ctx, "tp=8,pp=8,vpp=2", 4, "vpp=2 4 pp=8");
    expect_invalid(ctx, "tp=8,pp=4,vpp=2,pipe=gpipe", 64, "vpp=2 gpipe");
    wf_plan p = plan_of("tp=8");
    wf_estimate e;
    assert_int_equal(wf_estimate_plan(ctx, &p, 0, &e), WF_INVAL);
    assert_int_equal(wf_plan_validate(&p, &ctx->model, &ctx->cluster, 64), WF_OK);
    wf_cost_ctx_free(ctx);

    /* Grouped-query attention: tp divides the key/value heads too. */
    ctx = make_ctx("llama2-70b", "dgx-a100");
    expect_invalid(ctx, "tp=16", 64, "tp=16 kv_heads=8");
    assert_int_equal(wf_estimate_plan(ctx, &(wf_plan){0}, 64, &e), WF_INVAL);
    wf_cost_ctx_free(ctx);

    /* Non-transformers take dp and pp only. */
    ctx = make_ctx("resnet50", "dgx-a100");
    expect_invalid(ctx, "tp=2", 64, "tp=2 transformer");
    expect_invalid(ctx, "recompute=selective", 64, "selective");
    expect_invalid(ctx, "pp=2,vpp=2", 64, "vpp=2");
    assert_int_equal(wf_estimate_plan(ctx, &(wf_plan){.dp = 2, .tp = 1, .pp = 2, .mbs = 4, .vpp = 1,
                                                        .overlap = 1},
                                      64, &e),
                     WF_OK);
    wf_cost_ctx_free(ctx);
}

static void test_estimate_json(void **state)
{
    (void)state;
    wf_cost_ctx *ctx = make_ctx("gpt3-175b", "dgx-a100:nodes=8");
    wf_estimate e = est(ctx, "dp=1,tp=8,pp=8,mbs=1,vpp=3,recompute=full", 64);
    cJSON *j = wf_estimate_to_json(&e);
    assert_non_null(j);
    const char *top[] = {"iteration_time_s", "samples_per_s", "model_flops_per_iteration",
                         "tflops_per_device", "mfu", "memory_per_device_bytes"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, top[i]);
        assert_true(cJSON_IsNumber(it));
        assert_true(it->valuedouble > 0);
    }
    assert_true(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(j, "fits")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "fits")));
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "breakdown");
    const char *parts[] = {"compute", "recompute", "tp_comm", "pp_comm",
                           "dp_comm", "bubble",    "optimizer", "exposed_comm"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(b, parts[i]);
        assert_true(cJSON_IsNumber(it));
        assert_true(it->valuedouble >= 0);
    }
    assert_true(cJSON_GetObjectItemCaseSensitive(j, "iteration_time_s")->valuedouble == e.iteration_time_s);
    cJSON_Delete(j);
    wf_cost_ctx_free(ctx);
}

static void test_cache_consistency(void **state)
{
    (void)state;
    /* An estimate does not depend on what was estimated before it. */
    wf_cost_ctx *a = make_ctx("gpt3-13b", "dgx-a100");
    wf_cost_ctx *b = make_ctx("gpt3-13b", "dgx-a100");
    const char *plans[] = {"dp=8,tp=4,pp=2,mbs=2", "dp=4,tp=8,pp=2,mbs=1,sp=1,recompute=selective",
                           "dp=16,tp=2,pp=2,mbs=1,zero=2", "dp=8,tp=4,pp=2,mbs=2"};
    wf_estimate first = est(a, plans[0], 256);
    for (size_t i = 1; i < sizeof plans / sizeof plans[0]; i++)
        est(a, plans[i], 256);
    wf_estimate again = est(a, plans[0], 256), fresh = est(b, plans[0], 256);
    assert_memory_equal(&first, &again, sizeof first);
    assert_memory_equal(&first, &fresh, sizeof first);
    wf_cost_ctx_free(a);
    wf_cost_ctx_free(b);
}


/* ---- the exported records (cost.h) ------------------------------------------ */

/* The per-op times sum to the cached section times (the same function makes
 * both), the model and op records describe a Megatron GPT layer (two f and
 * two g points, the vocabulary-parallel loss, 12 h^2 + 13 h parameters), a
 * pipeline message is the cost model's send-receive, and the stage cut is
 * the balanced contiguous partition. */
static void test_records(void **state)
{
    (void)state;
    wf_cost_ctx *ctx = make_ctx("gpt3-175b", "dgx-a100");
    wf_cost_model_info mi;
    wf_cost_model_info_of(ctx, &mi);
    const double h = 12288;
    assert_true(mi.transformer);
    assert_true(REL(mi.sec[WF_COST_SEC_LAYER].params_split + mi.sec[WF_COST_SEC_LAYER].params_repl,
                    12 * h * h + 13 * h, 1e-12));
    assert_true(REL(mi.sec[WF_COST_SEC_LAYER].input_bytes, 2048 * h * 2, 1e-12));
    assert_int_equal(mi.sec[WF_COST_SEC_PRE].op0 + mi.sec[WF_COST_SEC_PRE].nop, mi.sec[WF_COST_SEC_LAYER].op0);
    assert_int_equal(mi.sec[WF_COST_SEC_POST].op0 + mi.sec[WF_COST_SEC_POST].nop, mi.nops);
    assert_true(mi.grad_elem_bytes == 2); /* megatron-core: fp16 models reduce fp16 gradients */
    wf_plan m22 = plan_of("sw=megatron-2022");
    wf_cost_ctx_use(ctx, &m22);
    wf_cost_model_info_of(ctx, &mi);
    assert_true(mi.grad_elem_bytes == 4); /* Megatron-LM 2022's fp32 main_grad */
    int nf = 0, ng = 0, nce = 0;
    for (int i = mi.sec[WF_COST_SEC_LAYER].op0; i < mi.sec[WF_COST_SEC_LAYER].op0 + mi.sec[WF_COST_SEC_LAYER].nop;
         i++) {
        wf_cost_op_info oi;
        assert_int_equal(wf_cost_op_info_of(ctx, i, &oi), WF_OK);
        assert_int_equal(oi.section, WF_COST_SEC_LAYER);
        if (oi.g_point >= 0) {
            ng++;
            assert_true(REL(oi.g_bytes, 2048 * h * 2, 1e-12));
        }
        nf += oi.f_point >= 0 && oi.f_bytes == 2048 * h * 2;
    }
    for (int i = 0; i < mi.nops; i++) {
        wf_cost_op_info oi;
        assert_int_equal(wf_cost_op_info_of(ctx, i, &oi), WF_OK);
        nce += oi.ce_bytes == 2048 * 4.0;
    }
    assert_int_equal(ng, 2);
    assert_true(nf >= 2); /* q, k, v (or qkv) read one point; fc1 another */
    assert_int_equal(nce, 1);
    wf_cost_op_info oi;
    assert_int_equal(wf_cost_op_info_of(ctx, mi.nops, &oi), WF_INVAL);

    wf_cost_op_time *t = calloc((size_t)mi.nops, sizeof *t);
    assert_non_null(t);
    static const int tps[] = {1, 2, 8};
    for (size_t k = 0; k < 3; k++)
        for (int sp = 0; sp <= (tps[k] > 1); sp++) {
            assert_int_equal(wf_cost_op_times(ctx, 2, tps[k], sp, t), WF_OK);
            const wf_cost_sect_time *x = wf_cost_sections(ctx, 2, tps[k], sp, WF_RECOMPUTE_FULL);
            assert_non_null(x);
            for (int s = 0; s < WF_COST_SEC_COUNT; s++) {
                double f = 0, b = 0;
                for (int i = mi.sec[s].op0; i < mi.sec[s].op0 + mi.sec[s].nop; i++) {
                    f += t[i].fwd_s;
                    b += t[i].bwd_in_s + t[i].bwd_w_s;
                }
                assert_true(REL(x[s].fwd, f, 1e-12));
                assert_true(REL(x[s].bwd, b, 1e-12));
                if (s == WF_COST_SEC_LAYER)
                    assert_true(REL(x[s].rec, f, 1e-12));
            }
        }
    free(t);

    wf_plan p = plan_of("dp=2,tp=4,pp=4,mbs=1");
    wf_group pair = wf_group_place(&ctx->cluster, 2, 8), tpg = wf_group_place(&ctx->cluster, 4, 1);
    double n = 2048 * h * 2;
    assert_true(REL(wf_cost_p2p_time(ctx, &p, n),
                    wf_coll_time(&ctx->cluster, WF_COLL_SENDRECV, &pair, n / 4) +
                        wf_coll_time(&ctx->cluster, WF_COLL_ALLGATHER, &tpg, n),
                    1e-12));
    p.sp = 1;
    assert_true(REL(wf_cost_p2p_time(ctx, &p, n), wf_coll_time(&ctx->cluster, WF_COLL_SENDRECV, &pair, n / 4), 1e-12));
    wf_cost_ctx_free(ctx);

    /* Other models: one section of every op, no tensor parallelism. */
    ctx = make_ctx("resnet50", "v100-10gbe");
    wf_cost_model_info_of(ctx, &mi);
    assert_false(mi.transformer);
    assert_int_equal(mi.sec[WF_COST_SEC_LAYER].op0, 0);
    assert_int_equal(mi.sec[WF_COST_SEC_LAYER].nop, mi.nops);
    assert_true(REL(mi.sec[WF_COST_SEC_LAYER].params_repl, 25557032.0, 1e-3)); /* ResNet-50 v1.5 */
    assert_true(mi.saved_dedup > 0 && mi.saved_dedup <= 1);
    t = calloc((size_t)mi.nops, sizeof *t);
    assert_non_null(t);
    assert_int_equal(wf_cost_op_times(ctx, 4, 2, 0, t), WF_INVAL);
    assert_int_equal(wf_cost_op_times(ctx, 4, 1, 0, t), WF_OK);
    free(t);
    wf_cost_ctx_free(ctx);

    /* The cut: balanced, contiguous, exactly min(pp, n) stages, never before a
     * forbidden op. */
    int first[8];
    const double w4[] = {1, 1, 1, 1}, w5[] = {4, 1, 1, 1, 1};
    assert_int_equal(wf_cost_cut_stages(w4, 4, 2, NULL, first), 2);
    assert_int_equal(first[1], 2);
    assert_int_equal(first[2], 4);
    assert_int_equal(wf_cost_cut_stages(w5, 5, 2, NULL, first), 2);
    assert_int_equal(first[1], 1);
    assert_int_equal(wf_cost_cut_stages(w4, 4, 9, NULL, first), 4);
    assert_int_equal(first[3], 3);
    const unsigned char nocut[] = {0, 0, 1, 0};
    assert_int_equal(wf_cost_cut_stages(w4, 4, 2, nocut, first), 2);
    assert_int_equal(first[1], 3);
}

/* Pipelines of other models: the pass-by-pass play against closed forms
 * (uniform stages: (m + p - 1)(F + B) for 1F1B and GPipe alike; one
 * micro-batch: down and up once), and each stage paying one send per
 * neighbour and direction per micro-batch (an MLP cut in two: m sends). */
static void test_generic_pipeline(void **state)
{
    (void)state;
    double buf[2 * 8 * 16 + 2 * 8], end[8];
    const double fp[4] = {1, 1, 1, 1}, bp[4] = {2, 2, 2, 2};
    for (int gpipe = 0; gpipe <= 1; gpipe++) {
        assert_int_equal(wf_cost_pipeline_ends(fp, bp, 4, 8, gpipe, buf, end), 0);
        assert_true(end[0] == (8 + 4 - 1) * 3.0);
        assert_int_equal(wf_cost_pipeline_ends(fp, bp, 4, 2, gpipe, buf, end), 0);
        assert_true(end[0] == (2 + 4 - 1) * 3.0);
    }
    const double uf[3] = {1, 5, 2}, ub[3] = {3, 1, 4};
    assert_int_equal(wf_cost_pipeline_ends(uf, ub, 3, 1, 0, buf, end), 0);
    assert_true(end[0] == 1 + 5 + 2 + 3 + 1 + 4);
    assert_true(end[2] == 1 + 5 + 2 + 4);
    /* Uneven stages, many micro-batches: the slowest stage (6 per
     * micro-batch) sets the rate. */
    assert_int_equal(wf_cost_pipeline_ends(uf, ub, 3, 16, 0, buf, end), 0);
    double e16 = end[0];
    assert_int_equal(wf_cost_pipeline_ends(uf, ub, 3, 15, 0, buf, end), 0);
    assert_true(e16 - end[0] == 6);

    wf_cost_ctx *ctx = make_ctx("mlp", "v100-10gbe");
    wf_estimate e = est(ctx, "dp=16,pp=2,mbs=64", 4096);
    wf_plan p = plan_of("dp=16,pp=2,mbs=64");
    wf_stage_split *split = malloc(sizeof *split);
    assert_non_null(split);
    wf_cost_split_stages(ctx, 64, 2, WF_RECOMPUTE_NONE, split);
    assert_int_equal(split->nstages, 2);
    double m = 4096.0 / (16 * 64), send = wf_cost_p2p_time(ctx, &p, split->boundary_bytes[0] * 64);
    assert_true(REL(e.breakdown.pp_comm, m * send, 1e-12)); /* was 2 m sends */
    free(split);
    assert_true(REL(e.iteration_time_s, e.breakdown.compute + e.breakdown.recompute + e.breakdown.bubble +
                                            e.breakdown.optimizer + e.breakdown.exposed_comm,
                    1e-12));
    wf_cost_ctx_free(ctx);
}

/* ---- recomputation per stage ------------------------------------------------ */

/* Closed forms of recomputation per stage and by block (rc_layers): the
 * block method with every layer is recompute=full and with none the base;
 * a per-stage plan's peak memory is the largest of its stages' (weights,
 * the micro-batches 1F1B holds on the stage times its layers' activations
 * under its recomputation, workspaces), its recomputation time the slowest
 * stage's, and its bubble the other stages' times, all from the section
 * records. */
static void test_recompute_per_stage(void **state)
{
    (void)state;
    wf_cost_ctx *ctx = make_ctx("gpt3-175b", "dgx-a100:nodes=32");
    const char *base = "dp=8,tp=8,pp=4,mbs=1";
    char a[256], b[256];
    const int64_t B = 512, m = 64;
    /* N = every layer of a chunk (96 / 4) is full; N = 0 is none. */
    snprintf(a, sizeof a, "%s,recompute=full,rc_layers=24", base);
    snprintf(b, sizeof b, "%s,recompute=full", base);
    wf_estimate x = est(ctx, a, B), y = est(ctx, b, B);
    assert_true(x.iteration_time_s == y.iteration_time_s && x.memory_per_device_bytes == y.memory_per_device_bytes);
    snprintf(a, sizeof a, "%s,recompute=full,rc_layers=0", base);
    snprintf(b, sizeof b, "%s,recompute=none", base);
    x = est(ctx, a, B), y = est(ctx, b, B);
    assert_true(x.iteration_time_s == y.iteration_time_s && x.memory_per_device_bytes == y.memory_per_device_bytes);
    /* The block method lies between none and full, monotone in N. */
    double prev_t = 0, prev_m = 1e300;
    for (int n = 0; n <= 24; n += 6) {
        snprintf(a, sizeof a, "%s,recompute=full,rc_layers=%d", base, n);
        x = est(ctx, a, B);
        assert_true(x.iteration_time_s > prev_t && x.memory_per_device_bytes < prev_m);
        prev_t = x.iteration_time_s;
        prev_m = x.memory_per_device_bytes;
    }

    /* full/full/none/full: stage 2 holds 2 micro-batches without
     * recomputation and is the most loaded. */
    snprintf(a, sizeof a, "%s,recompute=full*2/none/full", base);
    wf_plan p = plan_of(a);
    wf_estimate e = est(ctx, a, B);
    wf_cost_model_info info;
    wf_cost_model_info_of(ctx, &info);
    wf_cost_sect_time sec[3][WF_COST_SEC_COUNT];
    for (int r = 0; r < 3; r++)
        memcpy(sec[r], wf_cost_sections(ctx, 1, 8, 0, (wf_recompute)r), sizeof sec[r]);
    const int kind[4] = {WF_RECOMPUTE_FULL, WF_RECOMPUTE_FULL, WF_RECOMPUTE_NONE, WF_RECOMPUTE_FULL};
    const double Ls = 24, t = 8, inflight[4] = {4, 3, 2, 1};
    const wf_cluster *c = &ctx->cluster;
    double bpp = wf_cost_bytes_per_param(ctx, 0, 8);
    double lay_params = info.sec[WF_COST_SEC_LAYER].params_split / t + info.sec[WF_COST_SEC_LAYER].params_repl;
    double pre_params = info.sec[WF_COST_SEC_PRE].params_split / t + info.sec[WF_COST_SEC_PRE].params_repl;
    double post_params = info.sec[WF_COST_SEC_POST].params_split / t + info.sec[WF_COST_SEC_POST].params_repl;
    double ppc = 2.0 * wf_cost_p2p_time(ctx, &p, info.sec[WF_COST_SEC_LAYER].input_bytes);
    double peak = 0, S[4], smax = 0, ssum = 0;
    int crit = 0;
    for (int s = 0; s < 4; s++) {
        const wf_cost_sect_time *L = &sec[kind[s]][WF_COST_SEC_LAYER];
        double w = (Ls * lay_params + (s == 0 ? pre_params : 0) + (s == 3 ? post_params : 0)) * bpp;
        double act = inflight[s] * (Ls * L->act_bytes + (s == 0 ? sec[0][WF_COST_SEC_PRE].act_bytes : 0)) +
                     (s == 3 ? sec[0][WF_COST_SEC_POST].act_bytes : 0);
        double trans = L->transient_bytes + (s == 3 ? info.logits_per_sample / t * ctx->var.loss_bytes : 0);
        double mem = w + act + trans + c->mem_reserved_bytes + info.sec[WF_COST_SEC_LAYER].input_bytes;
        peak = mem > peak ? mem : peak;
        /* The end stages send one message fewer per micro-batch (2 vpp - 1). */
        S[s] = Ls * (L->fwd + L->bwd + L->slow + L->rec + L->tp_fwd + L->tp_bwd + L->tp_rec) +
               (s == 0 || s == 3 ? 0.5 : 1.0) * ppc;
        const wf_cost_sect_time *E = s == 0 ? &sec[0][WF_COST_SEC_PRE] : s == 3 ? &sec[0][WF_COST_SEC_POST] : NULL;
        if (E)
            S[s] += E->fwd + E->bwd + E->slow + E->rec + E->tp_fwd + E->tp_bwd + E->tp_rec;
        if (S[s] > smax) {
            smax = S[s];
            crit = s;
        }
        ssum += S[s];
    }
    assert_true(REL(e.memory_per_device_bytes, peak, 1e-12));
    /* Stage 2 (no recomputation, 2 in flight) is the peak; with none
     * everywhere the first stage is, and more. */
    snprintf(b, sizeof b, "%s,recompute=none", base);
    assert_true(e.memory_per_device_bytes < est(ctx, b, B).memory_per_device_bytes);
    assert_true(REL(e.breakdown.recompute, (double)m * Ls * sec[kind[crit]][WF_COST_SEC_LAYER].rec, 1e-12));
    assert_true(REL(e.breakdown.bubble, ssum - smax, 1e-9));
    /* Faster than full recomputation everywhere (the bubble is shorter), and
     * prints and parses back to the same plan. */
    snprintf(b, sizeof b, "%s,recompute=full", base);
    assert_true(e.iteration_time_s < est(ctx, b, B).iteration_time_s);
    char text[512];
    wf_plan_format(&p, text, sizeof text);
    wf_plan q = plan_of(text);
    assert_int_equal(q.rc_n, 4);
    assert_memory_equal(q.rc_kind_at, p.rc_kind_at, sizeof p.rc_kind_at);
    assert_memory_equal(q.rc_layers_at, p.rc_layers_at, sizeof p.rc_layers_at);
    assert_int_equal(q.recompute, WF_RECOMPUTE_FULL);
    wf_cost_ctx_free(ctx);
}

/* wf_cost_plan_cut (the runtime's pipeline cut of a non-transformer) is the
 * best contiguous cut of the ops' forward + backward times under the plan's
 * profile: its slowest stage equals the brute-force minimum over every cut
 * into 2 and 3 stages; transformers are refused (cut by layers). */
static void test_plan_cut_balanced(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("mlp:sizes=1024-4096-4096-2048-10", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("local", &c), WF_OK);
    wf_cost_ctx *ctx = NULL;
    assert_int_equal(wf_cost_ctx_create(&m, &c, &ctx), WF_OK);
    for (int pp = 2; pp <= 3; pp++) {
        char text[64];
        snprintf(text, sizeof text, "pp=%d,mbs=16,sw=weft", pp);
        wf_plan p = plan_of(text);
        wf_cost_ctx_use(ctx, &p);
        wf_cost_op_time t[64];
        assert_int_equal(wf_cost_op_times(ctx, 16, 1, 0, t), WF_OK);
        int n = 0;
        double w[64];
        wf_graph g;
        assert_int_equal(wf_model_build(&m, 16, &g), WF_OK);
        n = g.nfwd;
        wf_graph_free(&g);
        assert_true(n >= 4 && n <= 64);
        for (int i = 0; i < n; i++)
            w[i] = t[i].fwd_s + t[i].bwd_in_s + t[i].bwd_w_s;
        int first[4];
        assert_int_equal(wf_cost_plan_cut(&m, &c, &p, pp, n, first), WF_OK);
        assert_int_equal(first[0], 0);
        assert_int_equal(first[pp], n);
        double got = 0;
        for (int k = 0; k < pp; k++) {
            assert_true(first[k] < first[k + 1]);
            double sk = 0;
            for (int i = first[k]; i < first[k + 1]; i++)
                sk += w[i];
            got = sk > got ? sk : got;
        }
        double best = 1e300;
        /* Every cut: stage 0 = [0, a), stage 1 = [a, b), stage 2 = [b, n) (b = n with 2 stages). */
        for (int a = 1; a < n; a++)
            for (int b = pp == 2 ? n : a + 1; b <= (pp == 2 ? n : n - 1); b++) {
                double s0 = 0, s1 = 0, s2 = 0;
                for (int i = 0; i < n; i++)
                    *(i < a ? &s0 : i < b ? &s1 : &s2) += w[i];
                double mx = s0 > s1 ? s0 : s1;
                mx = s2 > mx ? s2 : mx;
                best = mx < best ? mx : best;
            }
        assert_true(fabs(got - best) <= 1e-9 * best);
    }
    wf_plan p = plan_of("pp=2,mbs=1,sw=weft");
    assert_int_equal(wf_cost_plan_cut(&m, &c, &p, 2, 3, (int[3]){0}), WF_INVAL); /* op count checked */
    assert_non_null(strstr(wf_last_error(), "forward ops"));
    wf_model_config gm;
    assert_int_equal(wf_model_lookup("gpt-tiny", &gm), WF_OK);
    assert_int_equal(wf_cost_plan_cut(&gm, &c, &p, 2, 10, (int[3]){0}), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "cut by layers"));
    wf_cost_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_korthikanti_activations),
        cmocka_unit_test(test_plan_cut_balanced),
        cmocka_unit_test(test_zero_bytes),
        cmocka_unit_test(test_weft_profile),
        cmocka_unit_test(test_layer_weights),
        cmocka_unit_test(test_compute_time),
        cmocka_unit_test(test_model_flops_and_identity),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_p2p_overhead),
        cmocka_unit_test(test_sanity),
        cmocka_unit_test(test_plan_strings),
        cmocka_unit_test(test_plan_uneven_stages),
        cmocka_unit_test(test_plan_files),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_estimate_json),
        cmocka_unit_test(test_cache_consistency),
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_flash_closed_form),
        cmocka_unit_test(test_fp8_gemm),
        cmocka_unit_test(test_context_parallel),
        cmocka_unit_test(test_expert_parallel),
        cmocka_unit_test(test_generic_pipeline),
        cmocka_unit_test(test_recompute_per_stage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
