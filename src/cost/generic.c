/* weft cost: pipeline stages of non-transformer models (CNNs, MLPs, explicit
 * op lists). The forward ops, in graph order, are cut into pp contiguous
 * stages that balance forward + backward (+ recompute) time: the smallest
 * bound on a stage's time for which a greedy cut needs at most pp stages
 * (bisection), then a cut into exactly pp non-empty stages under it. Each
 * stage's time, saved activations, parameters, and the bytes it sends to the
 * next stage follow. */
#include "cost/cost-impl.h"

#include <stdio.h>
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
    wf_cost_split_stages_layout(ctx, b, pp, rc, NULL, NULL, out);
}

wf_status wf_cost_plan_cut(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, int nvs, int nops,
                            int *first)
{
    if (wf_model_is_transformer(m))
        return wf_errorf(WF_INVAL, "model '%s' is a transformer: its stages are cut by layers", m->name);
    if (nvs < 1 || nvs > WF_COST_MAX_STAGES)
        return wf_errorf(WF_INVAL, "pp=%d stages: between 1 and %d", nvs, WF_COST_MAX_STAGES);
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cost_ctx_create(m, c, &ctx);
    if (st != WF_OK)
        return st;
    wf_stage_split *sp = malloc(sizeof *sp);
    if (!sp) {
        wf_cost_ctx_free(ctx);
        return wf_errorf(WF_NOMEM, "out of memory cutting %s into stages", m->name);
    }
    /* The estimate's own path: the plan's profile, then its split. */
    wf_cost_ctx_use(ctx, p);
    if (ctx->nops != nops)
        st = wf_errorf(WF_INVAL, "model '%s': the cost model has %d ops, the graph %d forward ops", m->name,
                       ctx->nops, nops);
    if (st == WF_OK) {
        wf_cost_split_stages(ctx, p->mbs, nvs, p->recompute, sp);
        if (sp->nstages != nvs)
            st = wf_errorf(WF_INVAL, "pp=%d stages: model '%s' has only %d ops to cut", nvs, m->name, nops);
        for (int k = 0; st == WF_OK && k <= nvs; k++)
            first[k] = sp->first_op[k];
    }
    free(sp);
    wf_cost_ctx_free(ctx);
    return st;
}

/* Communication `comm` hidden behind `window` as far as it goes: the exposed
 * part, the compute slowed added to *slow. The pair lasts max(comm, window +
 * slow), as estimate.c's overlapped() (the slowed compute hides behind a
 * collective that outlasts it). */
static double hide(double comm, double window, double slowdown, double *slow)
{
    double h = comm < window ? comm : window;
    double s = (slowdown - 1.0) * h;
    *slow += s;
    double shown = comm - window - s;
    return shown > 0 ? shown : 0;
}

void wf_cost_split_stages_layout(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc,
                                 const wf_cost_layout *L, const int *cut, wf_stage_split *out)
{
    wf_cost_split_stages_pieces(ctx, b, pp, rc, L, cut, 1, out);
}

void wf_cost_split_stages_pieces(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc, const wf_cost_layout *L,
                                 const int *cut, int pieces, wf_stage_split *out)
{
    wf_cost_split_stages_sel(ctx, b, pp, rc, L, cut, pieces, NULL, out);
}

wf_status wf_cost_coshard_sel(const wf_cost_ctx *ctx, const wf_plan *p, unsigned char *sel)
{
    int any = 0;
    for (int i = 0; i < ctx->nops; i++) {
        sel[i] = (unsigned char)wf_plan_coshard_op(p, ctx->ops[i].name, ctx->ops[i].kind);
        any |= sel[i];
    }
    if (p->coshard > 1 && !any)
        return wf_errorf(WF_INVAL, "coshard=%d@%s: no op of model '%s' matches '%s' (op kinds such as attention, "
                                   "or globs of op names as `weft show %s --json` lists them)",
                         p->coshard, p->coshard_on, ctx->model.name, p->coshard_on, ctx->model.name);
    return WF_OK;
}

void wf_cost_split_stages_sel(const wf_cost_ctx *ctx, int64_t b, int pp, wf_recompute rc, const wf_cost_layout *L,
                              const int *cut, int pieces, const unsigned char *sel, wf_stage_split *out)
{
    memset(out, 0, sizeof *out);
    int n = ctx->nops;
    if (pp > WF_COST_MAX_STAGES)
        pp = WF_COST_MAX_STAGES;
    double bb = (double)b;
    double *f = malloc(sizeof(double) * (size_t)n * 6 + 1);
    int *first = malloc(sizeof(int) * (size_t)(n + 2));
    int *stage_of = malloc(sizeof(int) * (size_t)(n + 1));
    if (!f || !first || !stage_of) {
        free(f);
        free(first);
        free(stage_of);
        return;
    }
    double *bw = f + n, *w = f + 2 * n, *din = f + 3 * n, *dw = f + 4 * n, *aop = f + 5 * n;
    for (int i = 0; i < n; i++) {
        /* Co-shard: the op as `pieces` ops on 1/pieces of its rows each, one
         * after another (smaller kernels, each with its launch). */
        const double K = pieces > 1 && (!sel || sel[i]) ? (double)pieces : 1.0;
        wf_cost_op_time t = wf_cost_op_time_of(ctx, &ctx->ops[i], bb, (L ? L->div[i] : 1.0) * K, L ? L->pdiv[i] : 1.0);
        f[i] = K * t.fwd_s;
        din[i] = K * t.bwd_in_s;
        dw[i] = K * t.bwd_w_s;
        bw[i] = din[i] + dw[i];
        w[i] = f[i] + bw[i] + (rc == WF_RECOMPUTE_FULL || (sel && sel[i] && K > 1) ? f[i] : 0);
    }
    /* Per-op co-shard (sel): a chosen op's pieces replay their forwards
     * before its backward whatever rc says. */
    const int per_op = sel != NULL && pieces > 1;
    if (cut) {
        out->nstages = pp;
        for (int k = 0; k <= pp; k++)
            first[k] = cut[k];
    } else {
        out->nstages = wf_cost_cut_stages(w, n, pp, NULL, first);
    }
    for (int k = 0; k <= out->nstages; k++)
        out->first_op[k] = first[k];
    for (int k = 0; k < out->nstages; k++) {
        for (int i = first[k]; i < first[k + 1]; i++) {
            const wf_cost_op *r = &ctx->ops[i];
            stage_of[i] = k;
            out->fwd[k] += f[i];
            out->bwd[k] += bw[i];
            out->params[k] += L ? L->params[i] : r->owned_params;
            out->mp_params[k] += L ? L->mp_grad[i] : 0;
            for (int j = 0; L && j < L->nsub; j++)
                out->sub_params[j][k] += L->sub_grad[j][i];
            double sv[3];
            wf_cost_op_saved(ctx, i, sv);
            aop[i] = (sv[0] + sv[1] + sv[2]) * ctx->saved_dedup * bb / (L ? L->repl_div[i] : 1.0);
            if (per_op && sel[i]) {
                /* One piece's activations live, during the op's backward. */
                aop[i] /= (double)pieces;
                if (rc != WF_RECOMPUTE_FULL) {
                    out->rec[k] += f[i];
                    out->transient[k] = aop[i] > out->transient[k] ? aop[i] : out->transient[k];
                    continue;
                }
            }
            out->act[k] += aop[i];
        }
        out->boundary_div[k] = 1;
        if (k + 1 < out->nstages) {
            out->boundary_bytes[k] = ctx->ops[first[k + 1] - 1].out_bytes;
            if (L)
                out->boundary_div[k] = L->div[first[k + 1] - 1];
        }
    }
    /* The model-parallel axis's collectives: each paid by the stage of its
     * op, hidden behind the products beside it as far as the framework
     * overlaps them. */
    if (L && L->tp > 1) {
        const wf_cluster *c = &ctx->cluster;
        const double slowdown = c->overlap_slowdown;
        for (int k = 0; k < L->nev; k++) {
            const wf_cost_event *e = &L->ev[k];
            if (e->at < 0 || e->at >= n)
                continue;
            int s = stage_of[e->at];
            const wf_axis_ranks r = wf_cost_event_ranks(L, e);
            wf_group sg = wf_group_place(c, r.size, r.stride);
            double time = e->times * wf_coll_time(c, e->kind, &sg, e->bytes * bb / (double)ctx->var.cp);
            double win = 0;
            if (ctx->var.tp_overlap >= e->need)
                for (int j = 0; j < e->nwop; j++) {
                    int o = e->wop[j];
                    if (o < 0 || o >= n)
                        continue;
                    win += e->win == WF_COST_WIN_FWD ? f[o] : e->win == WF_COST_WIN_DGRAD ? din[o]
                         : e->win == WF_COST_WIN_WGRAD ? dw[o] : 0;
                }
            double slow = 0, shown = hide(time, win, slowdown, &slow);
            if (e->bwd) {
                out->tpb[s] += shown;
                out->bwd[s] += slow;
            } else {
                out->tpf[s] += shown;
                out->fwd[s] += slow;
            }
        }
    }
    for (int k = 0; k < out->nstages; k++) {
        if (rc == WF_RECOMPUTE_FULL) {
            /* Keep the stage's input and each block checkpoint inside the
             * stage per micro-batch (build.c's segments: a block instance,
             * or the ops between blocks); backward replays one segment at a
             * time, so the largest segment's activations live at once. A
             * model without blocks is one segment: the whole stage. */
            out->rec[k] = out->fwd[k] + out->tpf[k];
            double seg = 0, peak = 0, ckpt = 0;
            for (int i = first[k]; i < first[k + 1]; i++) {
                if (i > first[k] && ctx->ops[i].seg_start) {
                    peak = seg > peak ? seg : peak;
                    seg = 0;
                    ckpt += ctx->ops[i].ckpt_bytes * bb / (L ? L->div[i - 1] : 1.0);
                }
                seg += aop[i];
            }
            peak = seg > peak ? seg : peak;
            /* Co-shard replays and back-propagates one piece at a time (per
             * op: the chosen ops' aop[] are one piece's already). */
            out->transient[k] = peak / (pieces > 1 && !per_op ? (double)pieces : 1.0);
            double in = (k > 0 ? out->boundary_bytes[k - 1] * bb / out->boundary_div[k - 1] : 0) + ckpt;
            out->act[k] = in < out->act[k] ? in : out->act[k];
        }
        out->stage_time[k] = out->fwd[k] + out->bwd[k] + out->rec[k] + out->tpf[k] + out->tpb[k];
    }
    free(f);
    free(first);
    free(stage_of);
}

/* ---- the pipeline of uneven stages ------------------------------------------------
 * Stages of other models differ in time, and so do the messages between them
 * (a CNN's early activations are large), so no closed form of the bubble
 * holds for them. This plays the schedule's order (the one wf_pipe_order
 * gives: 1F1B with min(p-1-k, m) warm-up forwards on stage k, or GPipe) as a
 * longest-path recurrence over the 2 p m passes: a pass starts when its
 * stage is free and its input is there (a forward: the previous stage's
 * forward and send of that micro-batch; a backward: the next stage's
 * backward and send, or on the last stage its own forward), and lasts fp[k]
 * (forward + activation send) or bp[k] (recomputation + backward + gradient
 * send). Sends block their stage (Megatron waits for each batched
 * send/receive); the receiver pays nothing for them beyond waiting. Stages
 * are swept alternately downward (forwards flow down) and upward (backwards
 * flow up), each advancing while its next pass is ready: O(p m) work. */

/* Stage k's pass at position pos: *bwd and its micro-batch. */
static int pass_at(int k, int p, int m, int gpipe, int pos, int *bwd)
{
    if (gpipe) {
        *bwd = pos >= m;
        return pos < m ? pos : 2 * m - 1 - pos;
    }
    int w = p - 1 - k < m ? p - 1 - k : m;
    if (pos < w) {
        *bwd = 0;
        return pos;
    }
    if (pos < w + 2 * (m - w)) {
        int j = pos - w;
        *bwd = j & 1;
        return *bwd ? j / 2 : w + j / 2;
    }
    *bwd = 1;
    return pos - m;
}

int wf_cost_pipeline_ends(const double *fp, const double *bp, int p, int m, int gpipe, double *buf, double *end)
{
    double *fe = buf, *be = buf + (size_t)p * (size_t)m;           /* [k m + i]: end of the pass, -1 not yet */
    double *free_at = be + (size_t)p * (size_t)m;                  /* [p] */
    double *pos = free_at + p;                                     /* [p] passes done (as doubles) */
    for (size_t i = 0; i < 2 * (size_t)p * (size_t)m; i++)
        buf[i] = -1;
    for (int k = 0; k < p; k++)
        free_at[k] = pos[k] = 0;
    int64_t left = 2 * (int64_t)p * m;
    for (int sweep = 0, stalled = 0; left > 0; sweep++) {
        int64_t before = left;
        for (int s = 0; s < p; s++) {
            int k = sweep & 1 ? p - 1 - s : s;
            for (;;) {
                int n = (int)pos[k], bwd;
                if (n >= 2 * m)
                    break;
                int i = pass_at(k, p, m, gpipe, n, &bwd);
                size_t at = (size_t)k * (size_t)m + (size_t)i;
                double ready = bwd ? (k + 1 < p ? be[at + (size_t)m] : fe[at]) : (k > 0 ? fe[at - (size_t)m] : 0);
                if (ready < 0)
                    break;
                double t = (ready > free_at[k] ? ready : free_at[k]) + (bwd ? bp[k] : fp[k]);
                (bwd ? be : fe)[at] = t;
                free_at[k] = t;
                pos[k] = n + 1;
                left--;
            }
        }
        stalled = left == before ? stalled + 1 : 0;
        if (stalled == 2)
            return -1; /* no pass could run in a down and an up sweep: a broken order */
    }
    for (int k = 0; k < p; k++)
        end[k] = free_at[k];
    return 0;
}
