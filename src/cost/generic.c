/* weft cost: pipeline stages of non-transformer models (CNNs, MLPs, explicit
 * op lists). The forward ops, in graph order, are cut into pp contiguous
 * stages that balance forward + backward (+ recompute) time: the smallest
 * bound on a stage's time for which a greedy cut needs at most pp stages
 * (bisection), then a cut into exactly pp non-empty stages under it. Each
 * stage's time, saved activations, parameters, and the bytes it sends to the
 * next stage follow. */
#include "cost/cost-impl.h"

#include <stdlib.h>
#include <string.h>

/* Times of op r at micro-batch b: forward, backward. */
static void op_times(const wf_cost_ctx *ctx, const wf_cost_op *r, double b, double *f, double *bw)
{
    const wf_device *d = &ctx->cluster.dev;
    *f = wf_compute_time(d, r->matrix, ctx->dtype, r->fwd_flops * b, r->fwd_act_bytes * b + wf_cost_fwd_weight_bytes(ctx, r));
    double din = r->bwd_in_flops * b, dw = r->bwd_w_flops * b;
    double bytes = r->bwd_act_bytes * b + wf_cost_bwd_weight_bytes(ctx, r);
    if (din > 0 && dw > 0) {
        double fin = din / (din + dw);
        *bw = wf_compute_time(d, r->matrix, ctx->dtype, din, bytes * fin) +
              wf_compute_time(d, r->matrix, ctx->dtype, dw, bytes * (1 - fin));
    } else {
        *bw = wf_compute_time(d, r->matrix, ctx->dtype, din + dw, bytes);
    }
}

static int greedy_parts(const double *w, int n, double bound)
{
    int parts = 1;
    double cur = 0;
    for (int i = 0; i < n; i++) {
        if (w[i] > bound)
            return n + 1;
        if (cur > 0 && cur + w[i] > bound) {
            parts++;
            cur = w[i];
        } else {
            cur += w[i];
        }
    }
    return parts;
}

void wf_cost_split_stages(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc,
                          wf_stage_split *out)
{
    memset(out, 0, sizeof *out);
    int n = ctx->nops;
    if (pp > n)
        pp = n;
    if (pp > WF_COST_MAX_STAGES)
        pp = WF_COST_MAX_STAGES;
    if (pp < 1)
        pp = 1;
    double bb = (double)b;
    double *f = malloc(sizeof(double) * (size_t)n * 3);
    if (!f)
        return;
    double *bw = f + n, *w = f + 2 * n;
    double total = 0, wmax = 0;
    for (int i = 0; i < n; i++) {
        op_times(ctx, &ctx->ops[i], bb, &f[i], &bw[i]);
        w[i] = f[i] + bw[i] + (rc == WF_RECOMPUTE_FULL ? f[i] : 0);
        total += w[i];
        if (w[i] > wmax)
            wmax = w[i];
    }
    double lo = wmax, hi = total > wmax ? total : wmax;
    for (int it = 0; it < 60 && hi - lo > 1e-12 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        if (greedy_parts(w, n, mid) <= pp)
            hi = mid;
        else
            lo = mid;
    }
    /* Cut into exactly pp stages under the bound: close a stage when the next
     * op would exceed it, or when the ops left are just enough for one per
     * remaining stage. */
    int s = 0, count = 0;
    double cur = 0;
    int last_op_of_stage = -1;
    for (int i = 0; i < n; i++) {
        int left = n - i, stages_after = pp - 1 - s;
        if (count > 0 && s < pp - 1 && (cur + w[i] > hi || left == stages_after)) {
            out->boundary_bytes[s] = ctx->ops[last_op_of_stage].out_bytes;
            s++;
            count = 0;
            cur = 0;
        }
        const wf_cost_op *r = &ctx->ops[i];
        cur += w[i];
        count++;
        last_op_of_stage = i;
        out->fwd[s] += f[i];
        out->bwd[s] += bw[i];
        out->params[s] += r->owned_params;
        out->act[s] += r->saved_repl * ctx->saved_dedup * bb;
    }
    out->nstages = s + 1;
    for (int k = 0; k < out->nstages; k++) {
        if (rc == WF_RECOMPUTE_FULL) {
            /* Keep only the stage's input per micro-batch; rebuild the rest. */
            out->rec[k] = out->fwd[k];
            out->transient[k] = out->act[k];
            double in = k > 0 ? out->boundary_bytes[k - 1] * bb : 0;
            out->act[k] = in < out->act[k] ? in : out->act[k];
        }
        out->stage_time[k] = out->fwd[k] + out->bwd[k] + out->rec[k];
    }
    free(f);
}
