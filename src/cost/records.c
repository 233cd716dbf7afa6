/* weft cost: the cost model's records as cost.h exports them (the model, its
 * ops, their times for one micro-batch, one pipeline message), for the
 * simulator and anything else that composes an iteration differently from
 * the estimate but must cost each op the same. The per-op time here is the
 * one function the estimate's sections (estimate.c) and the stage cut of
 * other models (generic.c) sum, so the two can never drift apart. */
#include "cost/cost-impl.h"

#include <string.h>

wf_cost_op_time wf_cost_op_time_of(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double div,
                                   double pdiv)
{
    const wf_device *d = &ctx->cluster.dev;
    wf_cost_op_time t = {0, 0, 0};
    t.fwd_s = wf_compute_time(d, r->matrix, ctx->dtype, r->fwd_flops * b / div,
                              r->fwd_act_bytes * b / div + wf_cost_fwd_weight_bytes(ctx, r) / pdiv);
    /* Backward is two products, input and weight gradient, each with its
     * share of the traffic (by FLOPs). */
    double din = r->bwd_in_flops * b / div, dw = r->bwd_w_flops * b / div;
    double bytes = r->bwd_act_bytes * b / div + wf_cost_bwd_weight_bytes(ctx, r) / pdiv;
    if (din > 0 && dw > 0) {
        double fin = din / (din + dw);
        t.bwd_in_s = wf_compute_time(d, r->matrix, ctx->dtype, din, bytes * fin);
        t.bwd_w_s = wf_compute_time(d, r->matrix, ctx->dtype, dw, bytes * (1 - fin));
    } else if (dw > 0) {
        t.bwd_w_s = wf_compute_time(d, r->matrix, ctx->dtype, dw, bytes);
    } else {
        t.bwd_in_s = wf_compute_time(d, r->matrix, ctx->dtype, din, bytes);
    }
    return t;
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
        out[i] = wf_cost_op_time_of(ctx, r, b, (r->split || sp) ? t : 1.0, r->split ? t : 1.0);
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
        out->sec[s].input_bytes = S->input_bytes;
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
    out->saved_repl_bytes = r->saved_repl;
    out->saved_split_bytes = r->saved_split;
    out->saved_scores_bytes = r->saved_scores;
    out->out_bytes = r->out_bytes;
    out->owned_params = r->owned_params;
    return WF_OK;
}

double wf_cost_p2p_time(const wf_cost_ctx *ctx, const wf_plan *p, double bytes)
{
    const wf_cluster *c = &ctx->cluster;
    const double t = (double)p->tp;
    wf_group pair = wf_group_place(c, 2, (int64_t)p->tp * p->dp);
    double time = wf_coll_time(c, WF_COLL_SENDRECV, &pair, bytes / t);
    if (p->tp > 1 && !p->sp) {
        wf_group tpg = wf_group_place(c, p->tp, 1);
        time += wf_coll_time(c, WF_COLL_ALLGATHER, &tpg, bytes);
    }
    return time;
}
