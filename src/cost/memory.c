/* weft cost: the memory rules of ALGORITHMS.md §1.3 that do not depend on the
 * graph: bytes per parameter for weights, gradients and Adam state with ZeRO
 * sharding, the optimizer step's memory traffic, and the micro-batches a
 * pipeline stage keeps in flight; and each framework profile's rules for
 * what an op keeps for backward (wf_cost_op_saved) and the buffers it holds
 * beside the activations (wf_cost_buffer_bytes). docs/cost-model.md,
 * "Memory per framework", gives each rule's source. Activations per layer
 * come from the graph's saved tensors, which follow Korthikanti et al. 2022
 * exactly (estimate.c), adjusted here per profile. */
#include "cost/alloc.h"
#include "cost/cost-impl.h"

#include <math.h>

#define MIB (1024.0 * 1024.0)

static int op_section(const wf_cost_ctx *ctx, int i)
{
    for (int s = 0; s < WF_COST_SEC_COUNT; s++)
        if (i >= ctx->sec[s].op0 && i < ctx->sec[s].op0 + ctx->sec[s].nop)
            return s;
    return WF_COST_SEC_LAYER;
}

void wf_cost_op_saved(const wf_cost_ctx *ctx, int i, double out[3])
{
    const wf_cost_op *r = &ctx->ops[i];
    const wf_cost_var *v = &ctx->var;
    const double e = ctx->elem_bytes;
    /* A framework that regenerates dropout masks (sw=weft) keeps none, and
     * its unfused attention the probabilities alone; the flash kernel keeps
     * one fp32 log-sum-exp per row and head instead of the scores. */
    double regen = v->regen_dropout && !(r->attn_core && v->flash) ? r->regen_bytes : 0;
    double scores = r->attn_core && v->flash ? r->fl_saved_scores : r->saved_scores;
    double repl = r->saved_repl, split = r->saved_split;
    if (r->attn_core)
        scores -= regen;
    else if (repl >= regen)
        repl -= regen;
    else
        split -= regen;
    /* Ops that keep one tensor put it wholly in one part; a change to it goes there. */
    double delta = 0;
    /* Norms under PyTorch: autocast runs layer_norm in fp32 (its input, the
     * residual stream, is fp32 already), and native_layer_norm keeps that
     * fp32 input; an eager RMSNorm (x * rsqrt(mean(x^2) + eps) * weight, as
     * torch.nn.RMSNorm composes it) keeps its fp32 input and the normalized
     * tensor the weight multiplies. */
    if (r->norm_elems > 0 && r->nsaved > 0 && (v->autocast || v->eager_norm)) {
        double per = v->autocast ? 4.0 : e;
        if (v->eager_norm && r->kind == WF_OP_RMSNORM)
            per *= 2.0;
        delta += r->norm_elems * per - r->norm_elems * e;
    }
    /* Megatron-Core's bias_swiglu keeps fc1's output (gate and up) alone: the
     * silu output the unfused mul keeps is recomputed. */
    if (v->fused_glu)
        delta -= r->glu_act_bytes;
    /* Transformer Engine's FP8 Linear and LayerNormLinear keep the FP8
     * input they multiplied (column-wise data, the transpose the weight
     * gradient needs; the local row-wise shard with sequence parallelism):
     * 1 byte per element and no 16-bit copy; a flash attention's output,
     * the projection's input, is kept by the attention too. The output
     * layer is Megatron's own (16-bit) product. */
    if (v->fp8_saved && r->lin_in_bytes > 0 && op_section(ctx, i) == WF_COST_SEC_LAYER) {
        delta += r->lin_in_bytes / e - r->lin_in_bytes;
        if (r->in_from_attn && v->flash)
            delta += r->lin_in_bytes;
    }
    /* PyTorch's cross_entropy: log_softmax (fp32 under autocast) keeps its
     * output, the fp32 log-probabilities, beside the logits the caller holds. */
    if (r->ce_logits > 0)
        delta += r->ce_logits * v->loss_saved;
    if (repl > 0 || split <= 0)
        repl += delta;
    else
        split += delta;
    out[0] = repl > 0 ? repl : 0;
    out[1] = split > 0 ? split : 0;
    out[2] = scores > 0 ? scores : 0;
}

/* PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp):
 * requests above 1 MiB (kSmallSize) are served from the large pool, either
 * from a cached block split by best fit (a remainder of at most 1 MiB is not
 * split off) or from a new segment rounded up to 2 MiB (kRoundLarge; 20 MiB,
 * kLargeBuffer, for requests under 10 MiB, which later requests share). Each
 * live block above 1 MiB thus holds up to 2 MiB it does not use; smaller
 * ones are rounded to 512 bytes inside shared 2 MiB segments. The reserve
 * is that bound over the blocks alive at the peak. */
static double total_params(const wf_cost_ctx *ctx)
{
    const wf_cost_section *S = ctx->sec;
    if (!ctx->transformer)
        return S[WF_COST_SEC_LAYER].params_repl;
    return S[WF_COST_SEC_PRE].params_split + S[WF_COST_SEC_PRE].params_repl +
           (double)ctx->model.layers * (S[WF_COST_SEC_LAYER].params_split + S[WF_COST_SEC_LAYER].params_repl +
                                        S[WF_COST_SEC_LAYER].params_expert) +
           S[WF_COST_SEC_POST].params_split + S[WF_COST_SEC_POST].params_repl - ctx->shared_split - ctx->shared_repl;
}

static double allocator_reserve(const wf_cost_ctx *ctx, const wf_plan *p, double mbs)
{
    double blocks = 4.0 * ctx->big_param_tensors; /* weight, gradient, Adam's two moments */
    if (ctx->var.autocast)
        blocks += ctx->cast_tensors;
    if (p->dp > 1) /* DDP's flat buckets */
        blocks += 1.0 + ceil(total_params(ctx) * ctx->var.grad_bytes / WF_SCHED_DDP_BUCKET_BYTES);
    for (int s = 0; s < WF_COST_SEC_COUNT; s++) {
        double times = s == WF_COST_SEC_LAYER && ctx->transformer ? (double)ctx->model.layers : 1.0;
        for (int i = ctx->sec[s].op0; i < ctx->sec[s].op0 + ctx->sec[s].nop; i++) {
            const wf_cost_op *r = &ctx->ops[i];
            const wf_cost_var *v = &ctx->var;
            double n = 0;
            if (r->attn_core && v->flash) {
                /* q, k, v and the log-sum-exp; no score matrices */
                for (int k = 0; k < r->nsaved && k < 3; k++)
                    n += r->saved_sz[k] * mbs > MIB;
                n += r->fl_saved_scores * mbs > MIB;
            } else if (r->norm_elems > 0 && r->nsaved > 0) {
                /* the fp32 input (and an eager RMSNorm's normalized tensor) */
                double per = v->autocast ? 4.0 : ctx->elem_bytes;
                n += (r->norm_elems * per * mbs > MIB) * (v->eager_norm && r->kind == WF_OP_RMSNORM ? 2.0 : 1.0);
            } else {
                for (int k = 0; k < r->nsaved; k++)
                    n += r->saved_sz[k] * mbs > MIB;
            }
            if (r->ce_logits > 0 && ctx->var.loss_saved > 0)
                n += 3; /* the log-probabilities and the backward's two gradients */
            blocks += times * n;
        }
    }
    return blocks * 2.0 * MIB;
}

/* Plain PyTorch's memory on one device: the caching allocator's peak
 * reserve over three replayed iterations (alloc_step.c) plus the CUDA
 * context; -1 where the replay does not apply (attn=unfused, recomputation
 * per stage, mixtures of experts, models other than transformers). The replay runs against the
 * device's capacity less the context, as cudaMalloc would refuse: when an
 * allocation fails even after the cache is released, the answer is the
 * larger of the unbounded replay's peak and what the failing allocation
 * asked for, beyond the capacity either way. */
double wf_cost_pytorch_memory(const wf_cost_ctx *ctx, const wf_plan *p, int64_t mbs)
{
    const double cap = ctx->cluster.dev.mem_bytes - WF_PT_CONTEXT_BYTES;
    wf_pt_step_memory m;
    if (ctx->var.sw != WF_SW_PYTORCH || !(cap > 0) ||
        wf_cost_pytorch_step_memory(ctx, p, mbs, WF_PT_ITERATIONS, cap, &m) != WF_OK || !m.applies)
        return -1;
    double peak = m.peak_reserved;
    if (!m.fits) {
        wf_pt_step_memory u;
        if (wf_cost_pytorch_step_memory(ctx, p, mbs, WF_PT_ITERATIONS, 0, &u) == WF_OK && u.peak_reserved > peak)
            peak = u.peak_reserved;
        if (peak <= cap)
            peak = cap + 1.0;
    }
    return peak + WF_PT_CONTEXT_BYTES;
}

double wf_cost_buffer_bytes(const wf_cost_ctx *ctx, const wf_plan *p, int64_t mbs)
{
    double b = 0;
    if (ctx->var.sw == WF_SW_PYTORCH) {
        double t = wf_cost_pytorch_memory(ctx, p, mbs);
        if (t > 0) {
            /* The replay's whole memory less what the estimate counts
             * beside the buffers (docs/cost-model.md, "The caching allocator"). */
            wf_cost_ctx *mc = (wf_cost_ctx *)ctx; /* its section cache */
            const wf_cost_sect_time *S = wf_cost_sections(mc, mbs, 1, p->sp, p->recompute);
            if (S) {
                double act = S[WF_COST_SEC_PRE].act_bytes + (double)ctx->model.layers * S[WF_COST_SEC_LAYER].act_bytes +
                             S[WF_COST_SEC_POST].act_bytes + S[WF_COST_SEC_LAYER].transient_bytes +
                             (double)mbs * ctx->logits_per_sample * ctx->var.loss_ws;
                return t - ctx->cluster.mem_reserved_bytes - total_params(ctx) * wf_cost_bytes_per_param(ctx, 0, p->dp) -
                       act;
            }
        }
    }
    /* autocast's 16-bit weight copies, made in the forward and kept for the
     * products' backward (the autocast cache holds them for the region). */
    if (ctx->var.autocast)
        b += ctx->cast_params * ctx->elem_bytes;
    if (ctx->var.sw == WF_SW_PYTORCH)
        b += allocator_reserve(ctx, p, (double)mbs);
    /* DeepSpeed's ZeRO-1/2 optimizer (deepspeed/runtime/zero/stage_1_and_2.py)
     * allocates its contiguous-gradient buffer of reduce_bucket_size (5e8)
     * elements in the model dtype at each backward, two with overlap_comm; with
     * pipeline parallelism only after the pipeline has flushed. */
    if (ctx->var.sw == WF_SW_DEEPSPEED && (p->zero == 1 || p->zero == 2) && p->pp == 1)
        b += 5e8 * ctx->elem_bytes * (ctx->var.dp_overlap ? 2.0 : 1.0);
    return b;
}

int wf_cost_zero3_prefetch(const wf_cost_ctx *ctx, const wf_plan *p)
{
    /* torchtitan leaves reshard_after_forward off under pipelining: every
     * layer of the stage stays gathered (wf_cost_bytes_per_param counts it). */
    return p->zero == 3 && !(ctx->var.sw == WF_SW_FSDP && ctx->var.pp > 1);
}

/* Mixed precision (fp16/bf16 weights): the weight (2 bytes), the gradient
 * (the framework profile's: 2, or 4 when the framework accumulates in fp32
 * as Megatron-LM does) and Adam's fp32 master weight, first and second moment
 * (12). Pure fp32: weight 4, gradient 4, moments 8. ZeRO stage 1 shards the
 * optimizer state over dp, stage 2 also the gradients, stage 3 also the
 * weights. */
double wf_cost_bytes_per_param(const wf_cost_ctx *ctx, int zero, int dp)
{
    double w, g, o;
    double d = dp > 0 ? (double)dp : 1;
    if (ctx->var.sw == WF_SW_PYTORCH) {
        /* fp32 weights, gradients and Adam moments, bf16 or not (autocast's
         * casts are buffers). The exported script builds DDP with
         * gradient_as_bucket_view=True (src/cli/export_pytorch.c): each
         * .grad is a view into its bucket, no second copy. The profile runs
         * zero=0. */
        (void)d;
        return 4.0 + 4.0 + 8.0;
    }
    if (ctx->dtype == WF_DTYPE_FP32) {
        w = 4;
        g = 4;
        o = 8;
    } else {
        w = ctx->elem_bytes;
        g = wf_cost_grad_elem_bytes(ctx);
        o = 12;
    }
    /* FP8: each weight's FP8 copy, cached across the micro-batches of an
     * iteration. Transformer Engine (Megatron-Core) quantizes a weight with
     * row-wise and column-wise usage (transformer_engine/pytorch/module/
     * linear.py: the backward's data-gradient product needs the transpose on
     * Hopper) and saves both: 2 bytes. */
    double f8 = ctx->var.fp8 ? (ctx->var.sw == WF_SW_MEGATRON_CORE ? 2.0 : 1.0) : 0.0;
    switch (zero) {
    case 0:
        return w + g + o + f8;
    case 1:
        return w + g + o / d + f8;
    case 2:
        /* Megatron-LM's distributed optimizer (the form zero=1 and 2 take
         * there) keeps the whole gradient buffer and reduce-scatters within
         * it: only the optimizer state (fp32 main weights and moments) is
         * sharded (its docs: 6 + 12/d bytes per parameter for bf16 weights
         * with fp32 gradients). DeepSpeed and FSDP shard the gradients too. */
        if (ctx->var.sw == WF_SW_MEGATRON_CORE || ctx->var.sw == WF_SW_MEGATRON_2022 ||
            ctx->var.sw == WF_SW_MEGATRON_2021 || ctx->var.sw == WF_SW_WEFT)
            return w + g + o / d + f8;
        return w + (g + o) / d + f8;
    default:
        /* The weft runtime's backward writes every gradient into its whole
         * block and reduce-scatters each unit within it (dist.c): ZeRO-3
         * shards its weights and optimizer state, not its gradients. */
        if (ctx->var.sw == WF_SW_WEFT)
            return (w + o + f8) / d + g;
        if (ctx->var.sw == WF_SW_FSDP) {
            /* FSDP2 shards the fp32 parameter itself (the master weight, in
             * o) and gathers it cast to bf16 (MixedPrecisionPolicy): no
             * sharded 16-bit copy. Under pipelining torchtitan turns
             * reshard_after_forward off (torchtitan/distributed/fsdp.py,
             * get_fsdp_reshard_after_forward_policy) and the pipeline stage
             * runs every backward with set_reshard_after_backward(False) and
             * set_requires_gradient_sync(False) (torch/distributed/pipelining/
             * stage.py): the stage's weights stay gathered (bf16) and its
             * gradients accumulate unsharded in the reduce dtype (fp32, g)
             * until the last micro-batch. */
            double sharded = (ctx->dtype == WF_DTYPE_FP32 ? w + g + o + f8 : g + o + f8) / d;
            return ctx->var.pp > 1 ? w + g + sharded : sharded;
        }
        return (w + g + o + f8) / d;
    }
}

/* The optimizer step is memory-bound. Mixed precision (Megatron-LM's and
 * apex's fp16 optimizer): copy the half-precision gradient into an fp32 one
 * (read g, write 4, unless already fp32), unscale it and check for overflow
 * (read 4, write 4), take its norm for clipping (read 4), Adam (read the fp32
 * weight, gradient, m and v: 16; write weight, m and v: 12), copy the weight
 * back to half precision (read 4, write e), zero the gradient (write g): 54
 * bytes per parameter with fp16 gradients. Pure fp32: norm (4) and Adam (28);
 * nothing zeroes the gradient (weft's backward overwrites it, PyTorch 2's
 * zero_grad drops it), measured at 28 bytes per parameter for the runtime's
 * fused AdamW. */
double wf_cost_optimizer_bytes_per_param(const wf_cost_ctx *ctx)
{
    /* Plain PyTorch: clip_grad_norm_ reads every gradient for the norm and
     * scales it in place (torch.nn.utils.clip_grad_norm_ multiplies by the
     * clamped coefficient always: read 4, write 4), fused AdamW reads the
     * fp32 weight, gradient and moments and writes weight and moments (28);
     * fp16 adds GradScaler's unscale (read 4, write 4). zero_grad frees. */
    if (ctx->var.sw == WF_SW_PYTORCH)
        return 4 + 8 + 28 + (ctx->dtype == WF_DTYPE_FP16 ? 8 : 0);
    if (ctx->dtype == WF_DTYPE_FP32)
        return 4 + 28;
    double g = wf_cost_grad_elem_bytes(ctx), e = ctx->elem_bytes;
    double to_fp32 = g < 4 ? g + 4 : 0;
    return to_fp32 + 8 + 4 + 28 + (4 + e) + g;
}

/* GPipe keeps every micro-batch's activations until the backward pass; 1F1B
 * keeps at most p on the first stage; interleaving (v > 1) keeps
 * (1 + (p-1)/(p v)) times more (Korthikanti et al. 2022, §4.2.3). */
double wf_cost_inflight(const wf_plan *p, int64_t micro_batches)
{
    double m = (double)micro_batches;
    if (p->pipe == WF_PIPE_GPIPE)
        return m;
    double n = (double)p->pp < m ? (double)p->pp : m;
    if (p->vpp > 1)
        n *= 1.0 + ((double)p->pp - 1.0) / ((double)p->pp * (double)p->vpp);
    return n;
}

/* Micro-batches whose activations pipeline stage s holds at once. The first
 * stage: wf_cost_inflight. GPipe: all m. A later stage s: 1F1B's warm-up
 * leaves pp - s in flight (at most m; the last stage one); interleaved 1F1B
 * (Megatron-LM's schedule) runs 2 (pp - s - 1) + (v - 1) pp warm-up chunks
 * and one more in flight, (that + 1) / v stages' worth, which for s = 0 is
 * the first stage's pp (1 + (pp-1)/(pp v)) and for the last ((v-1) pp + 1) / v
 * (it was the first stage's count: an overestimate that only showed once a
 * last stage could recompute less than the first). */
double wf_cost_inflight_stage(const wf_plan *p, int64_t micro_batches, int s)
{
    double m = (double)micro_batches;
    if (s <= 0)
        return wf_cost_inflight(p, micro_batches);
    if (p->pipe == WF_PIPE_GPIPE)
        return m;
    double pp = (double)p->pp, v = (double)p->vpp, n;
    if (p->vpp > 1)
        n = (2.0 * (pp - (double)s - 1.0) + (v - 1.0) * pp + 1.0) / v;
    else
        n = pp - (double)s;
    return n < m ? n : m;
}
