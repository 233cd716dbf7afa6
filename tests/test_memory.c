/* Memory per framework profile against closed forms written out here from
 * the frameworks' rules (docs/cost-model.md, "Memory per framework"):
 *  - sw=pytorch (plain PyTorch, autocast over fp32 weights): GPT-2 124M and a
 *    Llama-style model, weights 16 bytes per parameter (DDP's buckets hold
 *    the gradients), a layer's activations with the fp32 residual stream at
 *    the norms; the whole is the replayed caching allocator's (test_alloc.c),
 *    the simulator's peak the same;
 *  - a SwiGLU layer: its input counted once in every profile, Megatron-Core's
 *    fused bias_swiglu keeping fc1's output alone;
 *  - Transformer Engine's FP8: layer inputs kept in FP8, the weight and its
 *    transpose (2 bytes per parameter);
 *  - FSDP under pipelining: the stage's weights gathered and its gradients
 *    unsharded in fp32, no prefetch buffer;
 *  - DeepSpeed ZeRO-1/2: the contiguous-gradient buffer.
 * The profile's plan checks (data parallelism only) are tested too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cost/alloc.h"
#include "cost/cost-impl.h"
#include "weft/sim.h"

#define REL(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol) * fabs((double)(b)))
#define MIB (1024.0 * 1024.0)

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

static wf_estimate est(wf_cost_ctx *ctx, const char *plan, int64_t batch)
{
    wf_plan p;
    assert_int_equal(wf_plan_parse(plan, &p), WF_OK);
    wf_estimate e;
    if (wf_estimate_plan(ctx, &p, batch, &e) != WF_OK)
        fail_msg("estimate %s: %s", plan, wf_last_error());
    return e;
}

/* The layer section's activations per micro-batch of mbs under plan's profile. */
static double layer_act(wf_cost_ctx *ctx, const char *plan, int64_t mbs, int tp)
{
    wf_plan p;
    assert_int_equal(wf_plan_parse(plan, &p), WF_OK);
    wf_cost_ctx_use(ctx, &p);
    const wf_cost_sect_time *x = wf_cost_sections(ctx, mbs, tp, 0, WF_RECOMPUTE_NONE);
    assert_non_null(x);
    return x[WF_COST_SEC_LAYER].act_bytes;
}

/* The simulator's peak memory of the same plan. */
static double sim_peak(const char *model, const char *cluster, const char *plan, int64_t batch)
{
    wf_model_config m;
    wf_cluster c;
    wf_plan p;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, &c), WF_OK);
    assert_int_equal(wf_plan_parse(plan, &p), WF_OK);
    wf_sim_plan_result r;
    if (wf_sim_plan(&m, &c, &p, batch, NULL, &r) != WF_OK)
        fail_msg("simulate %s: %s", plan, wf_last_error());
    return r.peak_memory_bytes;
}

/* GPT-2 124M (12 layers, h 768, 12 heads, ffn 3072, seq 1024, vocab 50257,
 * tied head) in bf16 under torch.autocast, DDP, fused AdamW. */
static void test_pytorch_gpt2(void **state)
{
    (void)state;
    const char *model = "gpt2:dtype=bf16", *cluster = "dgx-h100:nodes=1";
    wf_cost_ctx *ctx = make_ctx(model, cluster);
    const double L = 12, H = 768, A = 12, F = 3072, s = 1024, V = 50257, b = 8;
    /* Parameters: per layer two LayerNorms (2H each), qkv (3H^2 + 3H), proj
     * (H^2 + H), fc1 (HF + F), fc2 (FH + H); the token and position tables
     * and the final LayerNorm. */
    const double lin = 3 * H * H + 3 * H + H * H + H + H * F + F + F * H + H;
    const double P = L * (4 * H + lin) + V * H + s * H + 2 * H;
    wf_model_config m;
    double params = 0;
    assert_int_equal(wf_model_lookup(model, &m), WF_OK);
    assert_int_equal(wf_model_params(&m, &params), WF_OK);
    assert_true(REL(params, P, 1e-12));
    /* autocast casts every product's weight and bias, and the tied table
     * the head multiplies; not the norms nor the position table. */
    const double Pcast = L * lin + V * H;

    const double sbh = s * b * H;
    /* A layer: ln1's fp32 input (4), qkv's 16-bit input (2), q, k, v (6),
     * the flash kernel's fp32 log-sum-exp per head and row, proj's input
     * (2), a dropout mask (1), ln2's fp32 input (4), fc1's input (2), gelu's
     * input (2 x 4), fc2's input (2 x 4), a dropout mask (1). */
    const double layer = 38 * sbh + 4 * A * s * b;
    assert_true(REL(layer_act(ctx, "dp=1,mbs=8,sw=pytorch", 8, 1), layer, 1e-12));
    /* Embedding: its int32 ids and the dropout mask. Head: the final norm's
     * fp32 input, the head's 16-bit input, the bf16 logits, the int32
     * labels and log_softmax's fp32 output. */
    const double pre = 4 * s * b + sbh;
    const double post = 4 * sbh + 2 * sbh + 2 * s * b * V + 4 * s * b + 4 * s * b * V;
    const double loss_ws = 8 * s * b * V; /* nll_loss's and log_softmax's fp32 gradients */
    (void)pre;
    (void)post;
    (void)loss_ws;
    (void)Pcast;
    /* The whole: the caching allocator's peak reserve over the replayed
     * step plus the CUDA context (tests/test_alloc.c checks the replay);
     * the weights 16 bytes per parameter, the simulator the same. */
    wf_plan pl;
    assert_int_equal(wf_plan_parse("dp=1,mbs=8,sw=pytorch", &pl), WF_OK);
    wf_cost_ctx_use(ctx, &pl);
    double ref = wf_cost_pytorch_memory(ctx, &pl, 8);
    assert_true(ref > 16 * P + L * layer);
    wf_estimate e = est(ctx, "dp=1,mbs=8,sw=pytorch", 8);
    printf("gpt2 bf16 sw=pytorch mbs 8: %.3f GiB (weights %.3f, activations %.3f, buffers %.3f)\n",
           e.memory_per_device_bytes / (1 << 30), e.mem_weights_bytes / (1 << 30),
           e.mem_activation_bytes / (1 << 30), e.mem_buffer_bytes / (1 << 30));
    assert_true(REL(e.mem_weights_bytes, 16 * P, 1e-12));
    assert_true(REL(e.memory_per_device_bytes, ref, 1e-9));
    assert_true(REL(sim_peak(model, cluster, "dp=1,mbs=8,sw=pytorch", 8), ref, 1e-6));

    /* DDP over 8 GPUs: the script's gradient_as_bucket_view=True makes each
     * gradient a view into its bucket (no second copy): the same 16 bytes
     * per parameter and the same replay. */
    e = est(ctx, "dp=8,mbs=8,sw=pytorch", 64);
    assert_int_equal(wf_plan_parse("dp=8,mbs=8,sw=pytorch", &pl), WF_OK);
    wf_cost_ctx_use(ctx, &pl);
    ref = wf_cost_pytorch_memory(ctx, &pl, 8);
    assert_true(REL(e.mem_weights_bytes, 16 * P, 1e-12));
    assert_true(REL(e.memory_per_device_bytes, ref, 1e-9));
    assert_true(REL(sim_peak(model, cluster, "dp=8,mbs=8,sw=pytorch", 64), ref, 1e-6));

    /* Outside the replay (unfused attention) the bound of 2 MiB per live
     * block stays, with the cluster's reserve. */
    e = est(ctx, "dp=1,mbs=8,attn=unfused,sw=pytorch", 8);
    assert_true(e.mem_buffer_bytes > ctx->cluster.mem_reserved_bytes + 2 * Pcast);

    /* Pure fp32 (no autocast): the same 16 bytes per parameter, no casts,
     * 4-byte activations: the Korthikanti count of 34 s b h with 4-byte
     * elements and the two 1-byte masks (66 s b h), and the log-sum-exp. */
    wf_cost_ctx_free(ctx);
    ctx = make_ctx("gpt2:dtype=fp32", cluster);
    assert_true(REL(layer_act(ctx, "dp=1,mbs=8,sw=pytorch", 8, 1), 66 * sbh + 4 * A * s * b, 1e-12));
    e = est(ctx, "dp=1,mbs=8,sw=pytorch", 8);
    assert_true(REL(e.mem_weights_bytes, 16 * P, 1e-12));
    wf_cost_ctx_free(ctx);
}

/* A Llama-style model (RMSNorm, rotary, 8 of 32 heads for k and v, SwiGLU,
 * untied head) under every profile's SwiGLU and norm rules. */
static void test_swiglu_layer(void **state)
{
    (void)state;
    const char *model = "llama:layers=2,hidden=2048,heads=32,kv_heads=8,seq=2048,vocab=32000,ffn=8192,dtype=bf16";
    wf_cost_ctx *ctx = make_ctx(model, "dgx-h100:nodes=1");
    const double H = 2048, A = 32, kv = 8 * 64, F = 8192, s = 2048, b = 2;
    const double sbh = s * b * H, sbF = s * b * F, lse = 4 * A * s * b;
    /* q, k and v as the attention keeps them (16 bits). */
    const double qkv = 2 * s * b * (H + 2 * kv);
    /* Megatron-Core (TE LayerNormLinear, bias_swiglu): the norms' inputs (2
     * + 2), qkv's and fc1's inputs (2 + 2; gate and up are one fc1 whose
     * input is kept once), proj's input (2), fc1's output (2 x 2F: what
     * bias_swiglu keeps), fc2's input (2F). */
    const double core = 10 * sbh + qkv + lse + 6 * sbF;
    assert_true(REL(layer_act(ctx, "dp=1,mbs=2", 2, 1), core, 1e-12));
    /* Unfused SwiGLU (DeepSpeed, Megatron-DeepSpeed's silu(x0) * x1): the
     * gate and up outputs, the silu output, the product: 4F at 2 bytes. */
    assert_true(REL(layer_act(ctx, "dp=1,mbs=2,sw=deepspeed,attn=flash", 2, 1), 10 * sbh + qkv + lse + 8 * sbF,
                    1e-12));
    /* Plain PyTorch: each RMSNorm keeps its fp32 input and the fp32
     * normalized tensor (8 + 8), the rest as eager DeepSpeed's. */
    assert_true(REL(layer_act(ctx, "dp=1,mbs=2,sw=pytorch", 2, 1), 6 * sbh + 16 * sbh + qkv + lse + 8 * sbF, 1e-12));
    /* Tensor parallelism divides the split parts and not the replicated
     * ones (norm inputs and the column-parallel inputs). */
    assert_true(REL(layer_act(ctx, "dp=1,tp=2,mbs=2", 2, 2), 8 * sbh + (2 * sbh + qkv + lse + 6 * sbF) / 2, 1e-12));
    /* FP8 (Transformer Engine): qkv's, proj's, fc1's and fc2's inputs at
     * 1 byte; proj's input is the flash attention's output, which the
     * attention keeps in 16 bits too (2 + 1). */
    const double fp8 = 2 * sbh + sbh + qkv + lse + 3 * sbh + 2 * sbh + sbh + 4 * sbF + sbF;
    assert_true(REL(layer_act(ctx, "dp=1,mbs=2,fp8=1", 2, 1), fp8, 1e-12));
    /* With unfused attention the projection keeps only the FP8 copy; the
     * scores: probabilities at 2 bytes per score (no dropout in Llama). */
    const double scores = 2 * A * s * s * b;
    assert_true(REL(layer_act(ctx, "dp=1,mbs=2,fp8=1,attn=unfused", 2, 1), fp8 - 2 * sbh - lse + scores, 1e-12));
    wf_cost_ctx_free(ctx);
}

/* Bytes per parameter: Transformer Engine's FP8 weight and transpose;
 * FSDP2 (fp32 shards, bf16 gathers) with and without pipelining; plain
 * PyTorch; DeepSpeed's ZeRO-1/2 gradient buffer. */
static void test_framework_weights(void **state)
{
    (void)state;
    const char *model = "llama:layers=8,hidden=2048,heads=32,kv_heads=8,seq=2048,vocab=32000,ffn=8192,dtype=bf16";
    wf_cost_ctx *ctx = make_ctx(model, "dgx-h100:nodes=2");
    wf_plan p;
    const double d = 8;
    assert_int_equal(wf_plan_parse("dp=8,mbs=1,zero=1,fp8=1", &p), WF_OK);
    wf_cost_ctx_use(ctx, &p);
    /* bf16 weight 2, bf16 gradient 2, 12 / d sharded, FP8 weight + transpose 2 */
    assert_true(REL(wf_cost_bytes_per_param(ctx, 1, 8), 2 + 2 + 12 / d + 2, 1e-12));
    assert_int_equal(wf_plan_parse("dp=8,mbs=1,sw=fsdp", &p), WF_OK);
    wf_cost_ctx_use(ctx, &p);
    assert_true(REL(wf_cost_bytes_per_param(ctx, 3, 8), 16 / d, 1e-12));
    assert_true(wf_cost_zero3_prefetch(ctx, &p));
    assert_int_equal(wf_plan_parse("dp=8,pp=2,mbs=1,sw=fsdp", &p), WF_OK);
    wf_cost_ctx_use(ctx, &p);
    /* gathered bf16 weight 2, unsharded fp32 gradient 4, then the shards */
    assert_true(REL(wf_cost_bytes_per_param(ctx, 3, 8), 2 + 4 + 16 / d, 1e-12));
    assert_false(wf_cost_zero3_prefetch(ctx, &p));
    assert_int_equal(wf_plan_parse("dp=16,mbs=1,sw=pytorch", &p), WF_OK);
    wf_cost_ctx_use(ctx, &p);
    assert_true(REL(wf_cost_bytes_per_param(ctx, 0, 16), 16, 1e-12));
    assert_true(REL(wf_cost_optimizer_bytes_per_param(ctx), 40, 1e-12));

    /* The estimate: FSDP's stage weights with pp = 2 against pp = 1 (whose
     * gather buffer holds two layers' bf16 weights). */
    wf_estimate e1 = est(ctx, "dp=16,mbs=1,sw=fsdp", 32);
    wf_estimate e2 = est(ctx, "dp=8,pp=2,mbs=1,sw=fsdp", 32);
    const wf_cost_section *S = ctx->sec;
    double layer = S[WF_COST_SEC_LAYER].params_split + S[WF_COST_SEC_LAYER].params_repl;
    double first = 4 * layer + S[WF_COST_SEC_PRE].params_split + S[WF_COST_SEC_PRE].params_repl;
    double last = 4 * layer + S[WF_COST_SEC_POST].params_split + S[WF_COST_SEC_POST].params_repl;
    double stage = first > last ? first : last;
    printf("fsdp pp=2: weights %.6g, stage first %.6g last %.6g params\n", e2.mem_weights_bytes, first, last);
    assert_true(REL(e2.mem_weights_bytes, first * (6 + 16 / 8.0), 1e-12) ||
                REL(e2.mem_weights_bytes, last * (6 + 16 / 8.0), 1e-12));
    assert_true(e2.mem_weights_bytes <= stage * (6 + 16 / 8.0) * (1 + 1e-12));
    double all = first + last; /* every parameter once (untied head) */
    assert_true(REL(e1.mem_weights_bytes, all * 16 / 16.0, 1e-12));
    assert_true(e1.mem_buffer_bytes - e2.mem_buffer_bytes > 2 * layer * 2 * 0.99);

    /* DeepSpeed's contiguous gradients at ZeRO-1/2 (overlap_comm off below
     * stage 3): one buffer of 5e8 bf16 elements, none at ZeRO-0 or 3. */
    wf_estimate z0 = est(ctx, "dp=16,mbs=1,sw=deepspeed", 32);
    wf_estimate z1 = est(ctx, "dp=16,mbs=1,zero=1,sw=deepspeed", 32);
    assert_true(REL(z1.mem_buffer_bytes - z0.mem_buffer_bytes, 1e9, 1e-12));
    wf_cost_ctx_free(ctx);
}

/* sw=pytorch is data parallelism alone; it says so in one line. */
static void test_pytorch_plans(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    assert_int_equal(wf_model_lookup("gpt2:dtype=bf16", &m), WF_OK);
    assert_int_equal(wf_cluster_lookup("dgx-h100:nodes=1", &c), WF_OK);
    const char *bad[] = {"dp=4,tp=2,mbs=1,sw=pytorch", "dp=4,pp=2,mbs=1,sw=pytorch", "dp=8,zero=1,mbs=1,sw=pytorch",
                         "dp=8,mbs=1,fp8=1,sw=pytorch"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        wf_plan p;
        assert_int_equal(wf_plan_parse(bad[i], &p), WF_OK);
        assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_INVAL);
        assert_non_null(strstr(wf_last_error(), "sw=pytorch"));
        assert_null(strchr(wf_last_error(), '\n'));
    }
    wf_plan p;
    assert_int_equal(wf_plan_parse("dp=8,mbs=2,recompute=full,sw=pytorch", &p), WF_OK);
    assert_int_equal(wf_plan_validate(&p, &m, &c, 64), WF_OK);
    /* The plan string keeps the profile. */
    char buf[256];
    wf_plan_format(&p, buf, sizeof buf);
    assert_non_null(strstr(buf, "sw=pytorch"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_gpt2),
        cmocka_unit_test(test_swiglu_layer),
        cmocka_unit_test(test_framework_weights),
        cmocka_unit_test(test_pytorch_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
