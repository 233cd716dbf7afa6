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
 *                  "Plain PyTorch"); the model's dimensions as given (an
 *                  unpadded vocabulary: alignment-1 products) and the
 *                  exported script's eager elementwise chains. */
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
    int expert_loop;      /* sw=weft's grouped MLP: per-expert products, recomputed backward */
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
                    .regen_dropout = 1, .workspace = 1, .expert_loop = 1},
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
    v->expert_loop = f->expert_loop;
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

/* ---- the exported script's eager elementwise work (sw=pytorch) ------------------
 * `weft export --to ddp` (src/cli/export_pytorch.c, PT_MODEL) runs these as
 * separate eager kernels, each reading and writing whole tensors; the op
 * chains below are read off that code, their backwards off PyTorch's
 * derivatives (tools/autograd/derivatives.yaml and FunctionsManual.cpp:
 * pow_backward is grad * (2 * self.pow(1)), a copy, a scale and a product;
 * mean's backward divides the expanded gradient; a broadcast product's
 * gradient for the broadcast side is a product and a sum; a product of a
 * 16-bit and an fp32 tensor is fp32 and its gradient is cast back to the
 * 16-bit input's dtype). Bytes per element of the tensor the op works on,
 * with e the activations' element size (2 under autocast, 4 in fp32) and
 * fp32 intermediates of 4. */
typedef struct {
    double fwd_f, fwd_e, fwd_cast; /* element accesses of 4 bytes, of e, and (autocast only) casts of
                                      4 + e, per element */
    double bwd_f, bwd_e, bwd_cast;
    int fwd_kernels, bwd_kernels;
} eager_chain;

/* RMSNorm.forward: x.float() (x is the fp32 residual: no kernel), pow(2)
 * (read and write 4), mean(-1) (read 4), + eps and rsqrt (one value per
 * row), y * rsqrt (read 4, write 4), type_as(x) (no kernel), * weight (read
 * 4, write 4): 28. Backward: * weight's two gradients (2 x 4; 3 x 4 and a
 * sum over rows, 4), y * rsqrt's two (8; 12 and a row sum, 4), mean's (write
 * 4), pow's (copy 8, scale 8, product 12), the two gradients of y added
 * (12): 92. */
static const eager_chain RMSNORM_CHAIN = {7, 0, 0, 23, 0, 0, 6, 12}; /* 28 and 92 bytes */
/* rotary(x, cos, sin) with cos and sin fp32 (the script takes them .to(x.dtype)
 * of the fp32 embedding output): x.chunk(2) views; four products of a half
 * by cos or sin (read e, write 4, over half the elements: 2 (e + 4) in
 * all), a subtraction and an addition (read 8, write 4, over halves: 12),
 * torch.cat (read 4, write 4: 8), .type_as(x) (read 4, write e; autocast
 * only). Backward: the cast back (autocast), the subtraction's negation (4),
 * each product's gradient (read 4, write 4 over a half: 4 x 4, and each cast
 * to e: 4 x (4 + e) / 2, autocast only), x1's and x2's two gradients added
 * (3 e), chunk's backward, a cat (2 e). */
static const eager_chain ROTARY_CHAIN = {7, 2, 1, 5, 5, 3, 8, 9}; /* autocast: 38 and 48 bytes */

static double chain_bytes(const eager_chain *c, int bwd, double e, int autocast)
{
    return bwd ? c->bwd_f * 4.0 + c->bwd_e * e + (autocast ? c->bwd_cast * (4.0 + e) : 0)
               : c->fwd_f * 4.0 + c->fwd_e * e + (autocast ? c->fwd_cast * (4.0 + e) : 0);
}

static double eager_kernels_time(const wf_device *d, double bytes, int kernels, int bwd)
{
    double t = wf_membound_time(d, WF_MB_ELEM, bwd, bytes);
    double floor_s = (double)kernels * d->op_overhead_s;
    return t > floor_s ? t : floor_s;
}

void wf_cost_eager_time(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div, wf_cost_op_time *t)
{
    const wf_device *d = &ctx->cluster.dev;
    const int ac = ctx->var.autocast;
    const double e = ac ? ctx->elem_bytes : 4.0, s = b / div;
    switch ((wf_op_kind)r->kind) {
    case WF_OP_DROPOUT: /* the script has none */
        t->fwd_s = t->bwd_in_s = t->bwd_w_s = 0;
        return;
    case WF_OP_RMSNORM:
    case WF_OP_ROTARY: {
        const eager_chain *c = r->kind == WF_OP_RMSNORM ? &RMSNORM_CHAIN : &ROTARY_CHAIN;
        double n = (r->kind == WF_OP_RMSNORM ? r->norm_elems : r->out_bytes / ctx->elem_bytes) * s;
        if (!(n > 0))
            return;
        t->fwd_s = eager_kernels_time(d, n * chain_bytes(c, 0, e, ac), c->fwd_kernels, 0);
        t->bwd_in_s = eager_kernels_time(d, n * chain_bytes(c, 1, e, ac), c->bwd_kernels, 1);
        t->bwd_w_s = 0; /* the weight's gradient is in the chain */
        return;
    }
    default:
        break;
    }
    if (r->attn_core && r->at_heads > 0) {
        /* GQA: k.repeat_interleave and v.repeat_interleave to every head
         * (read the kv heads, write all heads); backward sums the copies */
        double q = r->at_heads * r->at_s * r->at_d * s, kv = r->kv_bytes / ctx->elem_bytes / 2.0 * s;
        if (kv > 0 && kv < q) {
            t->fwd_s += 2.0 * eager_kernels_time(d, e * (q + kv), 1, 0);
            t->bwd_in_s += 2.0 * eager_kernels_time(d, e * (q + kv), 1, 1);
        }
    }
    if (ac && r->matrix && r->in_casts > 0 && r->gk > 0) {
        /* autocast's casts of the fp32 norm output a product reads (read 4,
         * write e each) and their backwards (read e, write 4); two casts'
         * fp32 gradients are added (read 8, write 4) */
        double n = r->gm * r->gk * r->gbatch * s, k = (double)r->in_casts;
        t->fwd_s += k * eager_kernels_time(d, n * (4.0 + e), 1, 0);
        t->bwd_in_s += k * eager_kernels_time(d, n * (4.0 + e), 1, 1) +
                       (k > 1 ? eager_kernels_time(d, n * 12.0, 1, 1) : 0);
    }
}
