/* weft cost: framework profiles (plan key sw=NAME) and the plan keys that
 * refine them (attn, fp8, cp, grad, loss), resolved into the variant every
 * cost of the context follows. Each choice is a fact about a framework
 * version's code; docs/cost-model.md ("Framework profiles") gives the code
 * path or paper behind each one.
 *
 *   megatron-2021  Megatron-LM as of mid-2021 (Narayanan et al. 2021): the
 *                  backward tensor-parallel all-reduce synchronous; unfused
 *                  attention; fp16 gradients all-reduced in fp16 (bf16 ones
 *                  in fp32); cross-entropy in fp32; local DDP (reduction
 *                  after the whole backward) with pp > 1, PyTorch DDP
 *                  (overlapped) with pp = 1; no optimizer sharding.
 *   megatron-2022  the code Korthikanti et al. 2022 ran: backward tensor-
 *                  parallel all-reduce behind the weight-gradient GEMM;
 *                  unfused attention; fp32 gradient accumulation and
 *                  reduction; overlapped gradient reduction; ZeRO-1 at most
 *                  (distributed optimizer).
 *   megatron-core  flash attention; tensor-parallel collectives overlapped
 *                  with the GEMMs in both passes when sequence-parallel
 *                  (userbuffers); distributed optimizer with the gradient
 *                  reduce-scatter behind backward and the parameter
 *                  all-gather behind the next forward; gradients in the
 *                  model dtype (grad_reduce_in_fp32 off, the library's
 *                  default; grad=fp32 is Megatron-LM's training script with
 *                  bf16); optional FP8 and context parallelism.
 *   deepspeed      ZeRO 0-3 with overlap_comm off below stage 3 (DeepSpeed's
 *                  default) and on at stage 3; reduction in the model dtype;
 *                  unfused attention (Megatron-DeepSpeed's default); the
 *                  pipeline engine: no interleaving, ZeRO <= 1, gradients
 *                  reduced after the pipeline flushes.
 *   fsdp           PyTorch FSDP: full sharding (ZeRO-3; the plan string's
 *                  default zero with sw=fsdp), forward and backward prefetch, reduction in
 *                  fp32, flash attention (scaled_dot_product_attention),
 *                  synchronous tensor parallelism (DTensor).
 *   weft           this repository's CPU runtime (src/runtime/): unfused
 *                  attention that keeps its softmax probabilities, dropout
 *                  masks regenerated from the seed in backward (none kept);
 *                  tensor-parallel collectives synchronous (blocking MPI in
 *                  the op); gradients reduced during backward (wfbp/ddp
 *                  hooks), ZeRO's parameter all-gather in the step; fp32;
 *                  and its own buffers counted: the backward's working set,
 *                  the kernels' workspace and the buffer a parameter's
 *                  gradient is written to before it is added
 *                  (docs/runtime.md, "Memory plan").
 *   pytorch        plain PyTorch: eager kernels under torch.autocast over
 *                  fp32 weights (bf16/fp16 products, fp32 gradients and
 *                  Adam states, the weights cast to 16 bits each forward
 *                  and the casts kept for backward; the residual stream,
 *                  the norms and the loss's log-probabilities in fp32),
 *                  scaled_dot_product_attention (flash), DDP (25 MiB
 *                  buckets, the first 1 MiB, all-reduce overlapped with
 *                  backward, gradient_as_bucket_view off), clip_grad_norm_
 *                  and fused AdamW; data parallelism only (docs/cost-model.md,
 *                  "Plain PyTorch"). */
#include "cost/cost-impl.h"

#include <stdio.h>
#include <string.h>

/* When a profile's gradient reduction overlaps backward. */
typedef enum {
    DP_ALWAYS,    /* hooks reduce buckets as gradients are ready */
    DP_PP1,       /* overlapped without pipelining, after the flush with it (Megatron-LM 2021) */
    DP_ZERO3_PP1, /* overlap_comm: on at ZeRO-3 without the pipeline engine (DeepSpeed) */
} dp_rule;

/* The gradients' element size, before the grad= key and fp32 models. */
typedef enum {
    GRAD_FP32,          /* fp32 accumulation and reduction */
    GRAD_MODEL,         /* the model's dtype */
    GRAD_FP16_OR_FP32,  /* fp16 gradients in fp16, bf16 ones in fp32 (Megatron-LM 2021) */
} grad_rule;

/* Tensor-parallel collectives: synchronous, backward ones overlapped, or
 * with sequence parallelism also the forward ones (userbuffers). */
typedef enum { TP_SYNC, TP_BACKWARD, TP_GEMM_WITH_SP } tp_rule;

/* One row per profile (the comment at the top of this file says what each
 * choice is and docs/cost-model.md where it comes from). */
typedef struct {
    int flash;            /* fused attention unless attn= says otherwise */
    tp_rule tp;
    dp_rule dp;
    int ag_overlap;       /* ZeRO-1/2's parameter all-gather behind the next forward */
    grad_rule grad;
    wf_attn_impl fused;   /* the fused attention kernels it runs (when flash) */
    int regen_dropout, workspace; /* sw=weft's runtime */
    int autocast;         /* torch.autocast over fp32 weights (with a 16-bit model) */
    int eager_norm;
    int fp32_weights;     /* stored weights fp32 whatever the model's dtype */
    double loss_saved;    /* per logit, saved beyond the logits */
    double loss_ws;       /* per logit, the loss's backward workspace (0: one buffer in the loss precision) */
    int fused_glu;
    int fp8_saved;        /* FP8 layers keep their inputs in FP8 (with fp8) */
    int unpadded;         /* dimensions as the model gives them (no padded vocabulary) */
    int eager_elem;       /* the exported script's eager elementwise chains, no dropout */
} sw_profile;

_Static_assert(WF_SW_COUNT == 7, "a new framework profile needs a row in PROFILES");
static const sw_profile PROFILES[WF_SW_COUNT] = {
    /* DistributedDataParallelConfig.grad_reduce_in_fp32 is off by default:
     * gradients kept and reduced in the model's dtype. bias_swiglu_impl
     * (megatron/core/fusions/fused_bias_swiglu.py) saves fc1's output alone;
     * Transformer Engine's FP8 layers keep their inputs in FP8
     * (docs/cost-model.md, "Memory per framework"). */
    [WF_SW_MEGATRON_CORE] = {.flash = 1, .tp = TP_GEMM_WITH_SP, .dp = DP_ALWAYS, .ag_overlap = 1,
                             .grad = GRAD_MODEL, .fused = WF_ATTN_IMPL_TE, .fused_glu = 1, .fp8_saved = 1},
    [WF_SW_MEGATRON_2022] = {.flash = 0, .tp = TP_BACKWARD, .dp = DP_ALWAYS, .grad = GRAD_FP32,
                             .fused = WF_ATTN_IMPL_FA2},
    [WF_SW_MEGATRON_2021] = {.flash = 0, .tp = TP_SYNC, .dp = DP_PP1, .grad = GRAD_FP16_OR_FP32,
                             .fused = WF_ATTN_IMPL_FA2},
    [WF_SW_DEEPSPEED] = {.flash = 0, .tp = TP_BACKWARD, .dp = DP_ZERO3_PP1, .grad = GRAD_MODEL,
                         .fused = WF_ATTN_IMPL_FA2},
    [WF_SW_FSDP] = {.flash = 1, .tp = TP_SYNC, .dp = DP_ALWAYS, .grad = GRAD_FP32, .fused = WF_ATTN_IMPL_SDPA},
    [WF_SW_WEFT] = {.flash = 0, .tp = TP_SYNC, .dp = DP_ALWAYS, .grad = GRAD_FP32, .fused = WF_ATTN_IMPL_SDPA,
                    .regen_dropout = 1, .workspace = 1},
    /* torch.nn.functional.scaled_dot_product_attention (flash backend),
     * DDP's reducer hooks (overlapped), fp32 parameters and so fp32
     * gradients; log_softmax and nll_loss run in fp32 under autocast, and
     * their backwards (at::nll_loss_backward, then
     * _log_softmax_backward_data) each write an fp32 gradient of the
     * logits' size, both alive at once. */
    [WF_SW_PYTORCH] = {.flash = 1, .tp = TP_SYNC, .dp = DP_ALWAYS, .grad = GRAD_FP32,
                       .fused = WF_ATTN_IMPL_SDPA, .autocast = 1, .eager_norm = 1, .fp32_weights = 1,
                       .loss_saved = 4, .loss_ws = 8, .unpadded = 1, .eager_elem = 1},
};

void wf_cost_var_of(const wf_cost_ctx *ctx, const wf_plan *p, wf_cost_var *v)
{
    const int half = ctx->dtype != WF_DTYPE_FP32;
    const sw_profile *f = &PROFILES[(int)p->sw >= 0 && p->sw < WF_SW_COUNT ? p->sw : WF_SW_MEGATRON_CORE];
    /* Zeroed whole (padding too), so that the cost cache can compare variants with memcmp. */
    memset(v, 0, sizeof *v);
    v->sw = p->sw;
    v->fp8 = p->fp8 && half;
    v->cp = p->cp > 1 ? p->cp : 1;
    v->ep = p->ep > 1 ? p->ep : 1;
    v->etp = p->etp > 0 ? p->etp : (p->tp > 0 ? p->tp : 1);
    v->imb = p->imb >= 1.0 ? p->imb : 1.0;
    v->epo = p->epo != 0;
    v->zero = p->zero;
    v->loss_bytes = 4; /* every profile computes the loss in fp32 */
    v->pp = p->pp > 1 ? p->pp : 1;
    v->dp = p->dp > 1 ? p->dp : 1;
    v->flash = f->flash;
    v->tp_overlap = f->tp == TP_GEMM_WITH_SP ? (p->sp ? 2 : 1) : f->tp == TP_BACKWARD ? 1 : 0;
    v->dp_overlap = f->dp == DP_PP1 ? p->pp == 1 : f->dp == DP_ZERO3_PP1 ? p->zero == 3 && p->pp == 1 : 1;
    v->ag_overlap = f->ag_overlap;
    v->grad_bytes = f->grad == GRAD_MODEL           ? ctx->elem_bytes
                    : f->grad == GRAD_FP16_OR_FP32 ? (ctx->dtype == WF_DTYPE_FP16 ? 2 : 4)
                                                    : 4;
    v->regen_dropout = f->regen_dropout;
    v->workspace = f->workspace;
    v->autocast = f->autocast && half;
    v->eager_norm = f->eager_norm;
    v->w_bytes = f->fp32_weights ? 4 : ctx->elem_bytes;
    v->loss_saved = f->loss_saved;
    v->fused_glu = f->fused_glu;
    v->fp8_saved = f->fp8_saved && v->fp8;
    v->unpadded = f->unpadded;
    v->eager_elem = f->eager_elem;
    if (!p->overlap)
        v->dp_overlap = 0, v->ag_overlap = 0;
    if (p->attn != WF_ATTN_AUTO)
        v->flash = p->attn == WF_ATTN_FLASH;
    if (p->grad_dtype >= 0)
        v->grad_bytes = (double)wf_dtype_bytes((wf_dtype)p->grad_dtype);
    if (p->loss_dtype >= 0)
        v->loss_bytes = (double)wf_dtype_bytes((wf_dtype)p->loss_dtype);
    if (!half) {
        v->grad_bytes = 4;
        v->loss_bytes = 4;
    }
    /* The loss's backward workspace per logit: one buffer in the loss
     * precision, unless the profile's row says otherwise. */
    v->loss_ws = f->loss_ws > 0 ? f->loss_ws : v->loss_bytes;
    /* Which fused attention kernels run (docs/cost-model.md, "Device model"):
     * Megatron-Core through Transformer Engine's fused (cuDNN) attention;
     * older Megatron-LM and DeepSpeed, when asked for flash, through the
     * flash-attn package (FlashAttention-2); PyTorch-native stacks (fsdp,
     * torchtitan, plain PyTorch) through scaled_dot_product_attention. */
    v->attn_impl = v->flash ? f->fused : WF_ATTN_IMPL_UNFUSED;
}

void wf_cost_ctx_use(wf_cost_ctx *ctx, const wf_plan *p)
{
    wf_cost_var_of(ctx, p, &ctx->var);
}

int wf_cost_profile_line(const wf_cost_ctx *ctx, const wf_plan *p, char *buf, size_t cap)
{
    wf_cost_var v;
    wf_cost_var_of(ctx, p, &v);
    static const char *const TP[] = {"tp collectives synchronous", "tp collectives backward overlapped",
                                     "tp collectives overlapped with GEMMs"};
    char mmb[48];
    snprintf(mmb, sizeof mmb, "%s%s", v.fp8 ? "fp8" : wf_dtype_name(ctx->dtype),
             v.autocast ? " (autocast over fp32 weights)" : "");
    const char *mm = mmb;
    const char *attn = !ctx->transformer ? "no" : v.flash ? "flash" : "unfused";
    return snprintf(buf, cap,
                    "%s%s: %s attention, %s matrix products, %s, gradients %s in %s%s, "
                    "loss in %s",
                    wf_sw_name(p->sw), p->sw == WF_SW_MEGATRON_CORE ? " (default)" : "",
                    attn, mm, p->tp > 1 ? TP[v.tp_overlap] : "no tensor parallelism",
                    v.dp_overlap ? "reduced during backward" : "reduced after backward",
                    v.grad_bytes >= 4 ? "fp32" : wf_dtype_name(ctx->dtype),
                    v.zero ? (v.zero == 3 ? ", ZeRO-3" : v.zero == 2 ? ", ZeRO-2" : ", ZeRO-1") : "",
                    v.loss_bytes >= 4 ? "fp32" : wf_dtype_name(ctx->dtype));
}

/* Plain PyTorch runs the model's dimensions as given: the exported script's
 * head is nn.Linear(HIDDEN, VOCAB) with the tokenizer's vocabulary
 * (src/cli/export_pytorch.c), where Megatron-LM pads it to a multiple of 128
 * (--make-vocab-size-divisible-by; src/layout/vocab_pad.c). A product whose
 * leading dimensions cuBLAS cannot load 16 bytes at a time runs on the
 * alignment-1 fallback kernels (src/cluster/gemm_align.c): each pass takes
 * the slower of the two models. */
void wf_cost_unaligned_gemm(const wf_cost_ctx *ctx, wf_gemm_kind kind, double nb, double M, double N, double K,
                            wf_cost_op_time *t)
{
    const wf_device *d = &ctx->cluster.dev;
    wf_gemm_layout L[3];
    wf_gemm_linear_layouts(K, N, L);
    if (wf_gemm_layout_aligned(kind, &L[0]))
        return; /* the three passes share the two dimensions */
    const double shape[3][3] = {{M, N, K}, {M, K, N}, {K, N, M}};
    double *pass[3] = {&t->fwd_s, &t->bwd_in_s, &t->bwd_w_s};
    for (int i = 0; i < 3; i++) {
        if (!(*pass[i] > 0))
            continue;
        double a = wf_gemm_align1_time(d, kind, nb, shape[i][0], shape[i][1], shape[i][2], &L[i]);
        if (a > *pass[i])
            *pass[i] = a;
    }
}
