/* weft cost: the cost model's records as cost.h exports them (the model, its
 * ops, their times for one micro-batch, one pipeline message), for the
 * simulator and anything else that composes an iteration differently from
 * the estimate but must cost each op the same. The per-op time here is the
 * one function the estimate's sections (estimate.c) and the stage cut of
 * other models (generic.c) sum, so the two can never drift apart. */
#include "cost/cost-impl.h"

#include <string.h>

/* One kernel's time: wf_compute_time, or for an FP8 product the FP8 peak
 * times the matrix-efficiency curve scaled by the device's fp8_eff (what
 * Transformer Engine's FP8 GEMMs reach relative to the 16-bit ones). */
static double kernel_time(const wf_cost_ctx *ctx, const wf_cost_op *r, int bwd, double flops, double bytes)
{
    const wf_device *d = &ctx->cluster.dev;
    if (!r->matrix && wf_device_kernels(d)) {
        /* Memory-bound kernels at their measured bandwidth (the arithmetic
         * hides behind the traffic unless it is the longer). */
        if (!(flops > 0) && !(bytes > 0))
            return 0;
        /* A fused silu-and-product kernel runs at the activations' rate. */
        wf_mb_kind kind = ctx->var.fused_glu && r->glu == 2 ? WF_MB_ACT : r->mb_kind;
        double tm = wf_membound_time(d, kind, bwd, bytes);
        double vp = d->vector_flops[ctx->dtype] > 0 ? d->vector_flops[ctx->dtype] : d->vector_flops[WF_DTYPE_FP32];
        double tf = flops > 0 && vp > 0 ? flops / (vp * d->vector_eff) : 0;
        double t = tm > tf ? tm : tf;
        return t > d->op_overhead_s ? t : d->op_overhead_s;
    }
    if (!(ctx->var.fp8 && r->matrix && !r->attn_core && d->fp8_flops > 0))
        return wf_compute_time(d, r->matrix, ctx->dtype, flops, bytes);
    if (!(flops > 0) && !(bytes > 0))
        return 0;
    double t = 0;
    if (flops > 0)
        t += flops / (d->fp8_flops * wf_device_matrix_eff(d, flops) * d->fp8_eff);
    if (bytes > 0)
        t += bytes / (d->mem_bw_bps * d->mem_eff);
    return t > d->op_overhead_s ? t : d->op_overhead_s;
}

/* The measured-kernel model of a shaped product (src/cluster/kernel_model.c):
 * forward C = A B, data gradient dA = dC B^T (M, K, N), weight (or second
 * input's) gradient dB = A^T dC (K, N, M). Work divided by div, weights by
 * pdiv: the split dimension shrinks by pdiv, the rows by div / pdiv. */
static int gemm_shaped(const wf_cost_ctx *ctx, const wf_cost_op *r)
{
    return r->matrix && !r->attn_core && r->gk > 0 && r->gm > 0 && r->gn > 0 && wf_device_kernels(&ctx->cluster.dev) &&
           ctx->cluster.dev.gemm[wf_gemm_kind_of(ctx->dtype, ctx->var.fp8)].tile_m > 0;
}

static void gemm_op_time(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div, double pdiv,
                         wf_cost_op_time *t)
{
    const wf_device *d = &ctx->cluster.dev;
    wf_gemm_kind kind = wf_gemm_kind_of(ctx->dtype, ctx->var.fp8 && d->fp8_flops > 0);
    double M = r->gm * b * pdiv / div, N = r->gn, K = r->gk, nb = r->gbatch;
    if (r->gsplit == 2)
        K /= pdiv;
    else
        N /= pdiv;
    double f1 = 2.0 * r->gbatch * r->gm * r->gn * r->gk; /* one product at micro-batch 1 */
    t->fwd_s = wf_gemm_time(d, kind, nb, M, N, K);
    /* Input gradients: one product per activation input that needs one (a
     * matmul of two activations has two). */
    double nin = f1 > 0 ? r->bwd_in_flops / f1 : 0;
    t->bwd_in_s = 0;
    if (nin > 0.5)
        t->bwd_in_s += wf_gemm_time(d, kind, nb, M, K, N);
    if (nin > 1.5)
        t->bwd_in_s += wf_gemm_time(d, kind, nb, K, N, M);
    t->bwd_w_s = r->bwd_w_flops > 0 ? wf_gemm_time(d, kind, nb, K, N, M) : 0;
    if (ctx->var.unpadded && r->params > 0) /* unaligned dimensions: alignment-1 kernels (framework.c) */
        wf_cost_unaligned_gemm(ctx, kind, nb, M, N, K, t);
    if (kind == WF_GEMM_FP8) {
        /* Transformer Engine quantizes each FP8 product's input row-wise
         * and, for the weight gradient, column-wise (a transposed copy):
         * read 2 bytes, write 1 + 1 (transformer_engine/pytorch/module/
         * linear.py at d0067d0, input_quantizer.set_usage(rowwise=True,
         * columnwise=backward_needs_input)); after a norm (LayerNormLinear,
         * the column-parallel products) the norm writes the row-wise FP8
         * itself and only the transposed copy is made (read 1, write 1).
         * Backward quantizes the output gradient the same two ways. The
         * weights' FP8 copies are made once per step (is_first_microbatch). */
        double in_b = (r->gsplit == 1 ? 2.0 : 4.0) * nb * M * K;
        t->fwd_s += wf_membound_time(d, WF_MB_ELEM, 0, in_b);
        if (t->bwd_in_s > 0 || t->bwd_w_s > 0)
            t->bwd_in_s += wf_membound_time(d, WF_MB_ELEM, 0, 4.0 * nb * M * N);
    }
}

/* Attention by the device's kernel fits: fused kernels by implementation,
 * or unfused as its batched products plus the score traffic. Context
 * parallelism runs cp chunk kernels per rank (Megatron-Core's ring with the
 * load-balanced causal split: one causal chunk and cp - 1 half-masked ones),
 * each on the chunk's curve. Returns 0 when the device has no fit. */
static int attn_op_time(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div, double fb,
                        double bb, wf_cost_op_time *t)
{
    const wf_device *d = &ctx->cluster.dev;
    if (!wf_device_kernels(d) || !(r->at_d > 0) || !(r->at_s > 0))
        return 0;
    const double cp = (double)ctx->var.cp;
    double bh = r->at_heads * b * cp / div, S = r->at_s / cp, Skv = r->at_skv, D = r->at_d;
    wf_attn_impl impl = ctx->var.flash ? ctx->var.attn_impl : WF_ATTN_IMPL_UNFUSED;
    if (impl != WF_ATTN_IMPL_UNFUSED) {
        double pass[2];
        for (int bwd = 0; bwd < 2; bwd++) {
            double x;
            if (cp > 1) {
                double c = Skv / cp;
                x = wf_attn_time(d, impl, bh, S, c, D, r->at_causal, bwd);
                double y = wf_attn_time(d, impl, bh, S, c, D, 0, bwd);
                x = x < 0 || y < 0 ? -1 : x + (cp - 1.0) * (r->at_causal ? 0.5 : 1.0) * y;
            } else {
                x = wf_attn_time(d, impl, bh, S, Skv, D, r->at_causal, bwd);
            }
            if (x < 0)
                return 0;
            pass[bwd] = x;
        }
        t->fwd_s = pass[0];
        t->bwd_in_s = pass[1];
        t->bwd_w_s = 0;
        return 1;
    }
    wf_gemm_kind kind = wf_gemm_kind_of(ctx->dtype, 0);
    if (d->gemm[kind].tile_m <= 0)
        return 0;
    /* QK^T (S, Skv, D) and PV (S, D, Skv); backward dV = P^T dO, dP = dO V^T,
     * dQ = dS K, dK = dS^T Q. The softmax, mask and dropout traffic at the
     * memory bandwidth. */
    double qk = wf_gemm_time(d, kind, bh, S, Skv, D), pv = wf_gemm_time(d, kind, bh, S, D, Skv);
    double kv = wf_gemm_time(d, kind, bh, Skv, D, S);
    t->fwd_s = qk + pv + wf_compute_time(d, 0, ctx->dtype, 0, fb);
    t->bwd_in_s = 2.0 * kv + qk + pv + wf_compute_time(d, 0, ctx->dtype, 0, bb);
    t->bwd_w_s = 0;
    return 1;
}

static wf_cost_op_time op_time_kernels(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div,
                                       double pdiv);

/* Op r's kernels plus the framework's idle gap between them (op_gap_s) in
 * every pass that runs. */
wf_cost_op_time wf_cost_op_time_of(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div,
                                   double pdiv)
{
    wf_cost_op_time t = op_time_kernels(ctx, r, b, div, pdiv);
    if (ctx->var.eager_elem) /* the exported script's eager chains (framework.c) */
        wf_cost_eager_time(ctx, r, b, div * (double)ctx->var.cp, &t);
    const double gap = ctx->cluster.op_gap_s;
    if (gap > 0) {
        t.fwd_s += t.fwd_s > 0 ? gap : 0;
        t.bwd_in_s += t.bwd_in_s > 0 ? gap : 0;
        t.bwd_w_s += t.bwd_w_s > 0 ? gap : 0;
    }
    return t;
}

/* One product C[m,n] = A[m,k] B[k,n] of the expert loop: its FLOPs at the
 * rate the calibrated table gives its own size, plus its three matrices'
 * traffic (what calibrate.c took out of each measured rate). */
static double loop_gemm_time(const wf_cost_ctx *ctx, double m, double n, double k)
{
    const double eb = ctx->elem_bytes;
    return wf_compute_time(&ctx->cluster.dev, 1, ctx->dtype, 2.0 * m * n * k, eb * (m * k + k * n + m * n));
}

/* The grouped MLP as weft's runtime runs it (expert_loop, sw=weft):
 * wf_k_grouped_mlp_fwd in kernels_moe.c runs, per expert, a = x w1 ([M,H] x
 * [H,G]), h = act(a) ([M,F]; SwiGLU: silu(gate) * up, G = 2F), y = h w2; and
 * wf_k_grouped_mlp_bwd recomputes a and h from the rows before dh = dy w2^T,
 * dw2 = h^T dy, the activation's gradient da, dx = da w1^T and dw1 = x^T da.
 * A loop of small products, each at its own size's rate: the op's total
 * FLOPs would price them as one large product. Per rank a pass runs E
 * products of each kind (under expert parallelism E/ep experts, each on the
 * rows of each of ep ranks in turn: exec_experts.c), M = C b etp / div rows
 * each, F / etp wide. The activation: the graph's FLOPs per element (silu 4
 * and the product 1, GELU 8), its gradient twice that; reads a, writes h
 * (backward reads dh and a, writes da). */
static void expert_loop_time(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div,
                             wf_cost_op_time *t)
{
    const wf_device *d = &ctx->cluster.dev;
    const double eb = ctx->elem_bytes, etp = ctx->var.etp > 1 ? (double)ctx->var.etp : 1.0;
    const double E = r->moe_e, H = r->moe_h, M = r->moe_c * b * etp / div, F = r->moe_f / etp,
                 G = r->moe_g / etp;
    const int glu = G > 1.5 * F;
    const double act_f = wf_compute_time(d, 0, ctx->dtype, M * F * (glu ? 5.0 : 8.0), eb * M * (G + F));
    const double act_b = wf_compute_time(d, 0, ctx->dtype, M * F * (glu ? 10.0 : 16.0), eb * M * (F + 2.0 * G));
    const double up = loop_gemm_time(ctx, M, G, H), down = loop_gemm_time(ctx, M, H, F);
    t->fwd_s = E * (up + act_f + down);
    t->bwd_in_s = E * (up + act_f + loop_gemm_time(ctx, M, F, H) + act_b + loop_gemm_time(ctx, M, H, G));
    t->bwd_w_s = E * (loop_gemm_time(ctx, F, H, M) + loop_gemm_time(ctx, H, G, M));
}

static wf_cost_op_time op_time_kernels(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div,
                                       double pdiv)
{
    if (ctx->var.expert_loop && r->moe_e > 0 && r->moe_c > 0) {
        wf_cost_op_time t = {0, 0, 0};
        expert_loop_time(ctx, r, b, div * (double)ctx->var.cp, &t);
        return t;
    }
    wf_cost_op_time t = {0, 0, 0};
    /* Context parallelism divides every op's activation work (attention's
     * too: each rank's queries against all keys) but no weight. */
    div *= (double)ctx->var.cp;
    const int fuse = ctx->var.fused_glu && r->glu && wf_device_kernels(&ctx->cluster.dev);
    if (fuse && (r->glu == 1 || r->glu == 4))
        return t; /* runs inside the fused kernel or GEMM of its partner */
    if (gemm_shaped(ctx, r)) {
        if (fuse && r->glu == 3) {
            /* Gate and up projections as one GEMM of twice the width. */
            wf_cost_op rr = *r;
            rr.gn *= 2;
            rr.fwd_flops *= 2;
            rr.bwd_in_flops *= 2;
            rr.bwd_w_flops *= 2;
            gemm_op_time(ctx, &rr, b, div, pdiv, &t);
        } else {
            gemm_op_time(ctx, r, b, div, pdiv, &t);
        }
        return t;
    }
    if (r->attn_core && attn_op_time(ctx, r, b, div, r->fwd_act_bytes * b / div,
                                     (r->bwd_act_bytes + r->unf_bwd_extra) * b / div, &t))
        return t;
    double ff = r->fwd_flops, fb = r->fwd_act_bytes, bin = r->bwd_in_flops, bb = r->bwd_act_bytes;
    if (r->attn_core && ctx->var.flash) {
        ff = r->fl_fwd_flops;
        fb = r->fl_fwd_bytes;
        bin = r->fl_bwd_flops;
        bb = r->fl_bwd_bytes;
    } else if (r->attn_core) {
        bb += r->unf_bwd_extra;
    }
    if (r->loss_logits > 0) {
        /* The loss in loss_bytes precision (fp32: Megatron's vocabulary-
         * parallel cross-entropy on logits.float()): cast (read dt, write
         * L), max (read L), subtract (read and write L), exp (read and
         * write L), sum (read L); backward the softmax minus the target in
         * place (read and write L) and the cast back (read L, write dt). */
        double L = ctx->var.loss_bytes, e = ctx->elem_bytes;
        fb = r->loss_logits * (e + 7.0 * L);
        bb = r->loss_logits * (3.0 * L + e);
        wf_sw sw = ctx->var.sw;
        if (wf_device_kernels(&ctx->cluster.dev) && sw != WF_SW_MEGATRON_2021 && sw != WF_SW_MEGATRON_2022 &&
            sw != WF_SW_MEGATRON_CORE && sw != WF_SW_DEEPSPEED && sw != WF_SW_WEFT) {
            /* PyTorch's F.cross_entropy(logits.float()): the cast (read dt,
             * write L), log_softmax (reads each row twice, writes L);
             * backward the nll gradient (write L), log_softmax's (read 2 L,
             * write L) and the cast back (read L, write dt). */
            fb = r->loss_logits * (e + 4.0 * L);
            bb = r->loss_logits * (5.0 * L + e);
        }
    }
    t.fwd_s = kernel_time(ctx, r, 0, ff * b / div, fb * b / div + wf_cost_fwd_weight_bytes(ctx, r) / pdiv);
    /* Backward is two products, input and weight gradient, each with its
     * share of the traffic (by FLOPs). */
    double din = bin * b / div, dw = r->bwd_w_flops * b / div;
    double bytes = bb * b / div + wf_cost_bwd_weight_bytes(ctx, r) / pdiv;
    if (din > 0 && dw > 0) {
        double fin = din / (din + dw);
        t.bwd_in_s = kernel_time(ctx, r, 1, din, bytes * fin);
        t.bwd_w_s = kernel_time(ctx, r, 1, dw, bytes * (1 - fin));
    } else if (dw > 0) {
        t.bwd_w_s = kernel_time(ctx, r, 1, dw, bytes);
    } else {
        t.bwd_in_s = kernel_time(ctx, r, 1, din, bytes);
    }
    return t;
}

/* Op r's times at micro-batch b under tp t: split ops do 1/t of the work and
 * read 1/t of the weights, replicated ones 1/t of the work with sequence
 * parallelism. Expert ops: the stage's tokens spread over all its ranks
 * (their work 1/t here, 1/cp inside), each rank reading its experts' weights
 * (1/(ep x etp)); the busiest rank does imb times the mean. */
wf_cost_op_time wf_cost_op_time_tp(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double t, int sp)
{
    const wf_cost_var *v = &ctx->var;
    if (!r->expert)
        return wf_cost_op_time_of(ctx, r, b, (r->split || sp) ? t : 1.0, r->split ? t : 1.0);
    wf_cost_op_time ot = wf_cost_op_time_of(ctx, r, b, t, (double)v->ep * (double)v->etp);
    ot.fwd_s *= v->imb;
    ot.bwd_in_s *= v->imb;
    ot.bwd_w_s *= v->imb;
    return ot;
}

void wf_cost_expert_comm(const wf_cost_ctx *ctx, int i, int64_t mbs, int tp, double *fwd_s, double *bwd_s)
{
    *fwd_s = *bwd_s = 0;
    const wf_cost_var *v = &ctx->var;
    if (i < 0 || i >= ctx->nops || !(ctx->ops[i].a2a_bytes > 0) || (v->ep <= 1 && v->etp <= 1))
        return;
    const wf_cluster *c = &ctx->cluster;
    wf_axis_ranks eax[WF_AXIS_COUNT];
    wf_rank_axes_expert(tp, v->cp, 1, 1, v->ep, v->etp, eax);
    wf_group eg = wf_group_place(c, eax[WF_AXIS_EP].size, eax[WF_AXIS_EP].stride),
             xg = wf_group_place(c, eax[WF_AXIS_TP].size, eax[WF_AXIS_TP].stride);
    double n = ctx->ops[i].a2a_bytes * (double)mbs / ((double)tp * (double)v->cp) * v->imb;
    double a2a = v->ep > 1 ? wf_coll_time(c, WF_COLL_ALLTOALL, &eg, n) : 0;
    double tpx = v->etp > 1 ? wf_coll_time(c, WF_COLL_ALLGATHER, &xg, n * v->etp) +
                                  wf_coll_time(c, WF_COLL_REDUCE_SCATTER, &xg, n * v->etp)
                            : 0;
    *fwd_s = 2.0 * a2a + tpx;
    *bwd_s = 2.0 * a2a + tpx;
}

wf_status wf_cost_op_times(const wf_cost_ctx *ctx, int64_t mbs, int tp, int sp, wf_cost_op_time *out)
{
    if (mbs < 1 || tp < 1)
        return wf_errorf(WF_INVAL, "op times at mbs=%lld, tp=%d: both must be at least 1", (long long)mbs, tp);
    if (!ctx->transformer && (tp > 1 || sp))
        return wf_errorf(WF_INVAL, "tp=%d, sp=%d: model '%s' has no tensor-parallel ops", tp, sp,
                         ctx->model.name);
    const double b = (double)mbs, t = (double)tp;
    for (int i = 0; i < ctx->nops; i++) {
        const wf_cost_op *r = &ctx->ops[i];
        out[i] = wf_cost_op_time_tp(ctx, r, b, t, sp);
    }
    return WF_OK;
}

wf_status wf_cost_op_times_layout(const wf_cost_ctx *ctx, int64_t mbs, const wf_cost_layout *l,
                                  wf_cost_op_time *out)
{
    if (mbs < 1 || l->nops != ctx->nops)
        return wf_errorf(WF_INVAL, "op times at mbs=%lld under layouts of %d ops (model '%s' has %d)",
                         (long long)mbs, l->nops, ctx->model.name, ctx->nops);
    const double b = (double)mbs;
    for (int i = 0; i < ctx->nops; i++) {
        const wf_cost_op *r = &ctx->ops[i];
        out[i] = r->expert ? wf_cost_op_time_tp(ctx, r, b, (double)l->tp, l->sp)
                           : wf_cost_op_time_of(ctx, r, b, l->div[i], l->pdiv[i]);
    }
    return WF_OK;
}

void wf_cost_model_info_of(const wf_cost_ctx *ctx, wf_cost_model_info *out)
{
    memset(out, 0, sizeof *out);
    out->transformer = ctx->transformer;
    out->nops = ctx->nops;
    out->dtype = ctx->dtype;
    out->elem_bytes = ctx->elem_bytes;
    out->grad_elem_bytes = wf_cost_grad_elem_bytes(ctx);
    out->cp = ctx->var.cp;
    out->tp_overlap = ctx->var.tp_overlap;
    out->ag_overlap = ctx->var.ag_overlap;
    out->ep = ctx->var.ep;
    out->etp = ctx->var.etp;
    out->loss_elem_bytes = ctx->var.loss_bytes;
    out->loss_ws_bytes = ctx->var.loss_ws;
    out->logits_per_sample = ctx->logits_per_sample;
    out->model_flops_per_sample = ctx->model_flops_per_sample;
    out->saved_dedup = ctx->transformer ? 1.0 : ctx->saved_dedup;
    out->shared_split_params = ctx->shared_split;
    out->shared_repl_params = ctx->shared_repl;
    for (int s = 0; s < WF_COST_SEC_COUNT; s++) {
        const wf_cost_section *S = &ctx->sec[s];
        out->sec[s].op0 = S->op0;
        out->sec[s].nop = S->nop;
        out->sec[s].params_split = S->params_split;
        out->sec[s].params_repl = S->params_repl;
        out->sec[s].params_expert = S->params_expert / ((double)ctx->var.ep * (double)ctx->var.etp);
        out->sec[s].input_bytes = S->input_bytes / (double)ctx->var.cp;
        out->sec[s].flops = S->flops;
    }
}

wf_status wf_cost_op_info_of(const wf_cost_ctx *ctx, int i, wf_cost_op_info *out)
{
    if (i < 0 || i >= ctx->nops)
        return wf_errorf(WF_INVAL, "op %d: model '%s' has %d costed ops", i, ctx->model.name, ctx->nops);
    const wf_cost_op *r = &ctx->ops[i];
    memset(out, 0, sizeof *out);
    out->section = WF_COST_SEC_LAYER;
    for (int s = 0; s < WF_COST_SEC_COUNT; s++)
        if (i >= ctx->sec[s].op0 && i < ctx->sec[s].op0 + ctx->sec[s].nop)
            out->section = (wf_cost_sec)s;
    out->matrix = r->matrix;
    out->split = r->split;
    out->attn_core = r->attn_core;
    out->f_point = r->fpoint;
    out->f_bytes = r->fpoint >= 0 ? ctx->pts[r->fpoint].bytes : 0;
    out->g_point = r->gpoint;
    out->g_bytes = r->gpoint >= 0 ? ctx->pts[r->gpoint].bytes : 0;
    out->ce_bytes = r->ce_bytes;
    /* Under the variant in use: per context-parallel rank, and the flash
     * kernel's log-sum-exp instead of the score matrices. */
    const double cp = (double)ctx->var.cp;
    out->f_bytes /= cp;
    out->g_bytes /= cp;
    out->ce_bytes /= cp;
    double sv[3];
    wf_cost_op_saved(ctx, i, sv);
    out->saved_repl_bytes = sv[0] / cp;
    out->saved_split_bytes = sv[1] / cp;
    out->saved_scores_bytes = sv[2] / cp;
    out->out_bytes = r->out_bytes / cp;
    out->expert = r->expert;
    out->owned_params = r->owned_params;
    out->seg_start = r->seg_start;
    out->ckpt_bytes = r->ckpt_bytes / cp;
    return WF_OK;
}

double wf_cost_p2p_time(const wf_cost_ctx *ctx, const wf_plan *p, double bytes)
{
    const wf_cluster *c = &ctx->cluster;
    const double t = (double)p->tp;
    const int64_t cp = p->cp > 1 ? p->cp : 1;
    bytes /= (double)cp; /* each context-parallel rank sends its part of the sequence */
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(p->tp, cp, p->dp, p->pp, ax);
    wf_group pair = wf_group_place(c, 2, ax[WF_AXIS_PP].stride); /* neighbouring stages */
    /* Megatron-Core's interleaved schedule overlaps the sends with the next
     * chunk's compute (overlap_p2p_comm): only the call's fixed cost shows. */
    if (ctx->var.sw == WF_SW_MEGATRON_CORE && p->vpp > 1)
        return c->p2p_overhead_s;
    double time = wf_coll_time(c, WF_COLL_SENDRECV, &pair, bytes / t);
    if (p->tp > 1 && !p->sp) {
        wf_group tpg = wf_group_place(c, ax[WF_AXIS_TP].size, ax[WF_AXIS_TP].stride);
        time += wf_coll_time(c, WF_COLL_ALLGATHER, &tpg, bytes);
    }
    return time;
}

void wf_cost_cp_ring(const wf_cost_ctx *ctx, const wf_plan *p, int i, double *fwd_s, double *bwd_s)
{
    *fwd_s = *bwd_s = 0;
    if (p->cp <= 1 || i < 0 || i >= ctx->nops || !ctx->ops[i].attn_core)
        return;
    const wf_cluster *c = &ctx->cluster;
    /* The cp ranks of one tensor-parallel rank: stride tp (Megatron-Core's
     * order tp, cp, dp, pp). Each of the cp - 1 steps sends this rank's K and
     * V chunk to the next rank while receiving the previous one's. */
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(p->tp, p->cp, p->dp, p->pp, ax);
    wf_group ring = wf_group_place(c, ax[WF_AXIS_CP].size, ax[WF_AXIS_CP].stride);
    double chunk = ctx->ops[i].kv_bytes * (double)p->mbs / ((double)p->tp * (double)p->cp);
    double steps = (double)(p->cp - 1);
    *fwd_s = steps * wf_coll_time(c, WF_COLL_SENDRECV, &ring, chunk);
    /* Backward passes K and V again with their gradients (dK, dV travel
     * back around the ring with them). */
    *bwd_s = steps * wf_coll_time(c, WF_COLL_SENDRECV, &ring, 2.0 * chunk);
}

void wf_cost_expert_overlap(const wf_cost_ctx *ctx, double comm, double window, double *exposed, double *slow)
{
    if (!ctx->var.epo) {
        *exposed = comm;
        *slow = 0;
        return;
    }
    double hidden = comm < window ? comm : window;
    *exposed = comm - hidden;
    *slow = (ctx->cluster.overlap_slowdown - 1.0) * hidden;
}
