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

int wf_cost_cut_stages(const double *w, int n, int pp, const unsigned char *nocut, int *first)
{
    first[0] = 0;
    if (n < 1)
        return 0;
    if (pp > n)
        pp = n;
    if (pp < 1)
        pp = 1;
    double total = 0, wmax = 0;
    for (int i = 0; i < n; i++) {
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
    for (int i = 0; i < n; i++) {
        int left = n - i, stages_after = pp - 1 - s;
        if (count > 0 && s < pp - 1 && !(nocut && nocut[i]) && (cur + w[i] > hi || left == stages_after)) {
            first[++s] = i;
            count = 0;
            cur = 0;
        }
        cur += w[i];
        count++;
    }
    first[s + 1] = n;
    return s + 1;
}

void wf_cost_split_stages(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc,
                          wf_stage_split *out)
{
    memset(out, 0, sizeof *out);
    int n = ctx->nops;
    if (pp > WF_COST_MAX_STAGES)
        pp = WF_COST_MAX_STAGES;
    double bb = (double)b;
    double *f = malloc(sizeof(double) * (size_t)n * 3);
    int *first = malloc(sizeof(int) * (size_t)(n + 2));
    if (!f || !first) {
        free(f);
        free(first);
        return;
    }
    double *bw = f + n, *w = f + 2 * n;
    for (int i = 0; i < n; i++) {
        wf_cost_op_time t = wf_cost_op_time_of(ctx, &ctx->ops[i], bb, 1.0, 1.0);
        f[i] = t.fwd_s;
        bw[i] = t.bwd_in_s + t.bwd_w_s;
        w[i] = f[i] + bw[i] + (rc == WF_RECOMPUTE_FULL ? f[i] : 0);
    }
    out->nstages = wf_cost_cut_stages(w, n, pp, NULL, first);
    for (int k = 0; k < out->nstages; k++) {
        for (int i = first[k]; i < first[k + 1]; i++) {
            const wf_cost_op *r = &ctx->ops[i];
            out->fwd[k] += f[i];
            out->bwd[k] += bw[i];
            out->params[k] += r->owned_params;
            out->act[k] += r->saved_repl * ctx->saved_dedup * bb;
        }
        if (k + 1 < out->nstages)
            out->boundary_bytes[k] = ctx->ops[first[k + 1] - 1].out_bytes;
    }
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
    free(first);
}
