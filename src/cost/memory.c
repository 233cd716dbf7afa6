/* weft cost: the memory rules of ALGORITHMS.md §1.3 that do not depend on the
 * graph: bytes per parameter for weights, gradients and Adam state with ZeRO
 * sharding, the optimizer step's memory traffic, and the micro-batches a
 * pipeline stage keeps in flight. Activations per layer come from the graph's
 * saved tensors, which follow Korthikanti et al. 2022 exactly (estimate.c). */
#include "cost/cost-impl.h"

/* Mixed precision (fp16/bf16 weights): the weight (2 bytes), the gradient
 * (the framework profile's: 2, or 4 when the framework accumulates in fp32
 * as Megatron-LM does) and Adam's fp32 master weight, first and second moment
 * (12). Pure fp32: weight 4, gradient 4, moments 8. ZeRO stage 1 shards the
 * optimizer state over dp, stage 2 also the gradients, stage 3 also the
 * weights. */
double wf_cost_bytes_per_param(const wf_cost_ctx *ctx, int zero, int dp)
{
    double w, g, o;
    if (ctx->dtype == WF_DTYPE_FP32) {
        w = 4;
        g = 4;
        o = 8;
    } else {
        w = ctx->elem_bytes;
        g = wf_cost_grad_elem_bytes(ctx);
        o = 12;
    }
    double d = dp > 0 ? (double)dp : 1;
    /* FP8 (Transformer Engine): each weight's FP8 copy, cached across the
     * micro-batches of an iteration (its transpose for the backward GEMMs is
     * made per layer, a transient). */
    double f8 = ctx->var.fp8 ? 1.0 : 0.0;
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
