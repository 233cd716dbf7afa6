/* weft cost: the estimate of one training iteration of a plan (ALGORITHMS.md
 * §1, docs/cost-model.md).
 *
 * A cost context holds the model's ops costed once at micro-batch 1. For a
 * (micro-batch, tp, sp, recompute) it computes, once and then from a cache,
 * the time of one layer (and of the embedding and the head) for one
 * micro-batch on one device: compute per op and pass, tensor-parallel
 * collectives at Megatron's points (backward ones overlapped with the
 * weight- or input-gradient products as Megatron-LM does), recomputation, and
 * the activations kept. A plan then costs arithmetic only:
 *
 *   stage time per micro-batch S = layers/pp x layer (uneven stages, stages=:
 *   the stage's own layers) + embedding (first) or
 *                                  head (last) + pipeline sends (2 x vpp, each
 *                                  alpha + n beta + p2p_overhead_s)
 *   iteration = m x S_slowest + (S_sum - S_slowest)/vpp        (1F1B bubble)
 *             + exposed data-parallel gradient reduction (bucketed, overlapped
 *               with the last micro-batch's backward unless overlap=0)
 *             + tied-embedding gradient sync + optimizer step (memory-bound)
 *
 * Other models (CNNs, MLPs) have uneven stages and messages: each stage pays
 * one send per neighbour and direction per micro-batch, and the schedule is
 * played pass by pass (generic.c) instead of the bubble formula; the stage
 * that ends last, gradients and optimizer step included, sets the time.
 *
 * The breakdown satisfies iteration = compute + recompute + bubble +
 * optimizer + exposed_comm, where exposed_comm = tp_comm + pp_comm + the
 * exposed part of dp_comm (dp_comm is the whole data-parallel collective
 * time, hidden or not). The context is not thread-safe (its cache). */
#include "cost/cost-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

wf_status wf_cost_ctx_create(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx **out)
{
    *out = NULL;
    wf_status st = wf_cluster_check(c);
    if (st != WF_OK)
        return st;
    wf_cost_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return wf_errorf(WF_NOMEM, "out of memory creating a cost context");
    ctx->model = *m;
    ctx->cluster = *c;
    ctx->transformer = wf_model_is_transformer(m);
    ctx->dtype = m->dtype;
    ctx->elem_bytes = (double)wf_dtype_bytes(m->dtype);
    wf_plan dflt;
    wf_plan_default(&dflt);
    wf_cost_var_of(ctx, &dflt, &ctx->var);
    st = ctx->transformer ? wf_cost_build_transformer(ctx) : wf_cost_build_generic(ctx);
    if (st != WF_OK) {
        wf_cost_ctx_free(ctx);
        return st;
    }
    *out = ctx;
    return WF_OK;
}

static void drop_cache(wf_cost_ctx *ctx)
{
    for (int i = 0; i < WF_COST_CACHE; i++) {
        free(ctx->cache[i].split);
        ctx->cache[i].split = NULL;
        ctx->cache[i].valid = 0;
    }
}

void wf_cost_ctx_free(wf_cost_ctx *ctx)
{
    if (!ctx)
        return;
    drop_cache(ctx);
    for (int i = 0; i < ctx->nmlay; i++)
        wf_cost_layout_free(&ctx->mlay[i]);
    for (int i = 0; i < 4; i++)
        wf_cost_layout_free(&ctx->dap_lay[i]);
    free(ctx->pipe_buf);
    free(ctx->ops);
    free(ctx->pts);
    free(ctx);
}

void wf_cost_ctx_set_cluster(wf_cost_ctx *ctx, const wf_cluster *c)
{
    ctx->cluster = *c;
    drop_cache(ctx);
}

/* ---- one section for one micro-batch -------------------------------------------- */

/* Communication `comm` overlapped with compute `window`: returns the exposed
 * part and adds the compute the overlap slows down to *slow. The two run
 * side by side, so the pair lasts max(comm, window + slow): the compute
 * beside the collective is slowed by `slowdown` while they overlap, and when
 * the collective outlasts the compute that slower compute hides behind it
 * (only comm - window - slow shows). Charging the whole excess comm - window
 * on top of the slowed compute counted the slowdown twice where tensor-
 * parallel collectives are longer than their products (small hidden sizes);
 * the simulator plays the pair as max(comm, window + slow). */
static double overlapped(double comm, double window, double slowdown, double *slow)
{
    double hidden = comm < window ? comm : window;
    double s = (slowdown - 1.0) * hidden;
    *slow += s;
    double shown = comm - window - s;
    return shown > 0 ? shown : 0;
}

#define MAX_SECTION_OPS 512

/* Passes of a generic pipeline played exactly (2 p m); beyond, extrapolated. */
#define PIPE_PASSES (1 << 14)

static void fill_section(const wf_cost_ctx *ctx, int s, int64_t b, const wf_cost_layout *L, wf_recompute rc,
                         wf_cost_sect_time *out)
{
    memset(out, 0, sizeof *out);
    const wf_cost_section *S = &ctx->sec[s];
    const wf_cost_var *v = &ctx->var;
    const int t = L->tp, sp = L->sp;
    const double bb = (double)b, tt = (double)t, cp = (double)v->cp;
    const wf_cluster *c = &ctx->cluster;
    const double slowdown = c->overlap_slowdown;
    /* Each op's forward, input-gradient and weight-gradient times: the
     * windows the collectives beside them may hide behind. */
    double fwd_t[MAX_SECTION_OPS], din_t[MAX_SECTION_OPS], dw_t[MAX_SECTION_OPS];
    double repl = 0, split = 0, ring_fwd_slow = 0;
    wf_plan ring_plan;
    wf_plan_default(&ring_plan);
    ring_plan.tp = t;
    ring_plan.cp = v->cp;
    ring_plan.mbs = (int)b;
    for (int i = S->op0; i < S->op0 + S->nop; i++) {
        const wf_cost_op *r = &ctx->ops[i];
        /* The layouts divide the op's activation work and its weights (in
         * Megatron's: split ops do 1/t of both; with sequence parallelism
         * the replicated ones 1/t of the activation work). Expert ops
         * follow the variant's expert layout. */
        wf_cost_op_time ot = r->expert ? wf_cost_op_time_tp(ctx, r, bb, tt, sp)
                                       : wf_cost_op_time_of(ctx, r, bb, L->div[i], L->pdiv[i]);
        double tf = ot.fwd_s, tin = ot.bwd_in_s, tw = ot.bwd_w_s;
        if (v->cp > 1 && r->attn_core) {
            /* Context parallelism: K and V around the ring, behind the
             * blockwise attention (forward and backward). */
            double rf, rb, fslow = 0;
            wf_cost_cp_ring(ctx, &ring_plan, i, &rf, &rb);
            out->tp_fwd += overlapped(rf, tf, slowdown, &fslow);
            out->tp_bwd += overlapped(rb, tin + tw, slowdown, &out->slow);
            out->slow += fslow;
            ring_fwd_slow += fslow;
            if (s == WF_COST_SEC_LAYER && rc == WF_RECOMPUTE_SELECTIVE)
                out->tp_rec += overlapped(rf, tf, slowdown, &out->slow);
        }
        out->fwd += tf;
        out->bwd += tin + tw;
        if (s == WF_COST_SEC_LAYER && rc == WF_RECOMPUTE_FULL)
            out->rec += tf;
        else if (s == WF_COST_SEC_LAYER && rc == WF_RECOMPUTE_SELECTIVE && r->attn_core)
            out->rec += tf;
        if (i - S->op0 < MAX_SECTION_OPS) {
            fwd_t[i - S->op0] = tf;
            din_t[i - S->op0] = tin;
            dw_t[i - S->op0] = tw;
        }
        /* Activations kept per micro-batch (Korthikanti et al. 2022: the
         * graph's saved tensors give 34 s b h + 5 a s^2 b bytes per GPT
         * layer in fp16; flash attention keeps 34 s b h + 4 a s b), each
         * part divided as the layouts divide it. */
        /* Under the profile's rules (wf_cost_op_saved: dropout masks
         * regenerated or kept, flash or unfused scores, autocast's fp32
         * norms, fused SwiGLU, FP8 inputs). */
        double sv[3];
        wf_cost_op_saved(ctx, i, sv);
        repl += sv[0] / L->repl_div[i];
        split += (sv[1] + sv[2]) / L->split_div[i];
        if (v->workspace) {
            double wide = bb * r->out_bytes / (r->split ? L->split_div[i] : L->repl_div[i]) / cp;
            if (wide > out->work_bytes)
                out->work_bytes = wide;
            double acc = r->params * v->grad_bytes / L->pdiv[i];
            if (acc > out->acc_bytes)
                out->acc_bytes = acc;
            if (r->ws_bytes > out->ws_bytes)
                out->ws_bytes = r->ws_bytes;
        }
    }
    /* The widest op's output gradient and its input's, and the gradient of
     * the section's input (the residual stream's) carried across it. */
    if (v->workspace)
        out->work_bytes = 2.0 * out->work_bytes + bb * S->input_bytes / (L->input_div * cp);

    /* Context parallelism divides them all. Selective recomputation drops
     * the attention scores (per shard, like the rest of the split part). */
    double all = bb * (repl + split) / cp;
    if (s == WF_COST_SEC_LAYER && rc == WF_RECOMPUTE_FULL) {
        out->act_bytes = bb * S->input_bytes / (L->input_div * cp);
        out->transient_bytes = all;
    } else if (s == WF_COST_SEC_LAYER && rc == WF_RECOMPUTE_SELECTIVE) {
        double scores = 0;
        for (int i = S->op0; i < S->op0 + S->nop; i++) {
            const wf_cost_op *r = &ctx->ops[i];
            double sv[3];
            wf_cost_op_saved(ctx, i, sv);
            if (r->attn_core)
                scores += sv[2] / L->split_div[i];
        }
        out->act_bytes = bb * (repl + split - scores) / cp;
        out->transient_bytes = bb * scores / cp;
    } else {
        out->act_bytes = all;
    }

    double ef_all = 0, eb_all = 0;
    for (int i = S->op0; i < S->op0 + S->nop; i++) {
        double ef, eb;
        wf_cost_expert_comm(ctx, i, b, t, &ef, &eb);
        ef_all += ef;
        eb_all += eb;
    }
    if (ef_all + eb_all > 0) {
        double shown, eslow;
        wf_cost_expert_overlap(ctx, ef_all + eb_all, out->fwd + out->bwd, &shown, &eslow);
        double k = shown / (ef_all + eb_all);
        out->tp_fwd += k * ef_all;
        out->tp_bwd += k * eb_all;
        out->ep += shown;
        out->slow += eslow;
    }
    /* The model-parallel axis's collectives, each hidden behind the products
     * beside it as far as the framework overlaps them (tp_overlap: 1 the
     * backward ones, 2 also the forward ones, with userbuffers). */
    double tp_fwd_slow = 0;
    if (t > 1) {
        for (int k = 0; k < L->nev; k++) {
            const wf_cost_event *e = &L->ev[k];
            if (e->section != s)
                continue;
            double n = e->bytes * bb / cp;
            const wf_axis_ranks r = wf_cost_event_ranks(L, e);
            wf_group sg = wf_group_place(c, r.size, r.stride);
            double time = e->times * wf_coll_time(c, e->kind, &sg, n);
            double win = 0;
            if (v->tp_overlap >= e->need)
                for (int j = 0; j < e->nwop; j++) {
                    int w = e->wop[j] - S->op0;
                    if (w < 0 || w >= S->nop || w >= MAX_SECTION_OPS)
                        continue;
                    win += e->win == WF_COST_WIN_FWD ? fwd_t[w] : e->win == WF_COST_WIN_DGRAD ? din_t[w]
                         : e->win == WF_COST_WIN_WGRAD ? dw_t[w] : 0;
                }
            if (e->bwd)
                out->tp_bwd += overlapped(time, win, slowdown, &out->slow);
            else
                out->tp_fwd += overlapped(time, win, slowdown, &tp_fwd_slow);
        }
    }
    out->slow += tp_fwd_slow;
    if (s == WF_COST_SEC_LAYER && rc == WF_RECOMPUTE_FULL) {
        out->tp_rec += out->tp_fwd;
        out->slow += tp_fwd_slow + ring_fwd_slow;
        out->ep *= 1.5; /* the forward's half again */
    }
}

/* ---- layout descriptors ------------------------------------------------------------ */

wf_status wf_cost_layout_init(const wf_cost_ctx *ctx, int tp, wf_cost_layout *out)
{
    memset(out, 0, sizeof *out);
    int n = ctx->nops > 0 ? ctx->nops : 1;
    out->tp = tp >= 1 ? tp : 1;
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(out->tp, 1, 1, 1, ax);
    out->axis = ax[WF_AXIS_TP];
    out->nops = ctx->nops;
    out->input_div = 1;
    out->div = malloc(sizeof(double) * 8 * (size_t)n);
    if (!out->div)
        return wf_errorf(WF_NOMEM, "out of memory describing layouts");
    out->pdiv = out->div + n;
    out->repl_div = out->div + 2 * n;
    out->split_div = out->div + 3 * n;
    out->params = out->div + 4 * n;
    out->mp_grad = out->div + 5 * n;
    out->sub_grad[0] = out->div + 6 * n;
    out->sub_grad[1] = out->div + 7 * n;
    for (int i = 0; i < 4 * n; i++)
        out->div[i] = 1;
    for (int i = 0; i < n; i++) {
        out->params[i] = i < ctx->nops ? ctx->ops[i].owned_params : 0;
        out->mp_grad[i] = out->sub_grad[0][i] = out->sub_grad[1][i] = 0;
    }
    return WF_OK;
}

wf_axis_ranks wf_cost_event_ranks(const wf_cost_layout *l, const wf_cost_event *e)
{
    return e->sub >= 1 && e->sub <= l->nsub ? l->sub[e->sub - 1] : l->axis;
}

void wf_cost_layout_free(wf_cost_layout *l)
{
    if (!l)
        return;
    free(l->div);
    free(l->ev);
    free(l->cut);
    memset(l, 0, sizeof *l);
}

wf_status wf_cost_layout_add_event(wf_cost_layout *l, const wf_cost_event *ev)
{
    if (wf_grow(&l->ev, &l->cap_ev, (int64_t)l->nev + 1, sizeof *l->ev, 16) != 0)
        return wf_errorf(WF_NOMEM, "out of memory describing layouts");
    l->ev[l->nev++] = *ev;
    return WF_OK;
}

static wf_status add_ev(wf_cost_layout *l, int sec, wf_coll_kind kind, int bwd, double bytes, double times,
                        wf_cost_win win, int need, const int *wop, int nwop)
{
    wf_cost_event e;
    memset(&e, 0, sizeof e);
    e.section = sec;
    e.kind = kind;
    e.bwd = bwd;
    e.bytes = bytes;
    e.times = times;
    e.win = win;
    e.need = need;
    e.nwop = nwop < WF_COST_EVENT_OPS ? nwop : WF_COST_EVENT_OPS;
    for (int j = 0; j < e.nwop; j++)
        e.wop[j] = wop[j];
    /* The op it belongs to: its point's first op (the loss's: none, the end
     * of its section). */
    e.at = e.nwop > 0 ? e.wop[0] : -1;
    return wf_cost_layout_add_event(l, &e);
}

/* Megatron-LM's layouts: column-, row-, vocabulary-parallel and per-head ops
 * split over tp, the rest replicated (split along the sequence with sp); an
 * f point before column-parallel products (identity forward and all-reduce
 * backward; with sp an all-gather forward, the re-gather for the weight
 * gradient and a reduce-scatter backward), a g point after a row-parallel
 * product (all-reduce forward; with sp a reduce-scatter forward and an
 * all-gather backward), three all-reduces in the vocabulary-parallel loss. */
wf_status wf_cost_layout_megatron(const wf_cost_ctx *ctx, int tp, int sp, wf_cost_layout *out)
{
    wf_status st = wf_cost_layout_init(ctx, tp, out);
    if (st != WF_OK)
        return st;
    const double t = (double)out->tp;
    out->sp = tp > 1 ? sp : 0;
    out->input_div = sp ? t : 1;
    for (int i = 0; i < ctx->nops; i++) {
        const wf_cost_op *r = &ctx->ops[i];
        out->div[i] = (r->split || sp) ? t : 1;
        out->pdiv[i] = r->split ? t : 1;
        out->repl_div[i] = sp ? t : 1;
        out->split_div[i] = t;
    }
    for (int s = 0; s < WF_COST_SEC_COUNT; s++) {
        const wf_cost_section *S = &ctx->sec[s];
        out->sec_params[s] = S->params_split / t + S->params_repl;
        /* The embedding's position table is added before the sequence is
         * scattered: its gradient is whole (no reduction over tp). */
        out->sec_mp_grad[s] = tp > 1 && sp && s != WF_COST_SEC_PRE ? S->params_repl : 0;
        if (tp <= 1)
            continue;
        for (int k = 0; k < S->npt; k++) {
            const wf_tp_point *pt = &ctx->pts[S->pt0 + k];
            int ops[WF_COST_EVENT_OPS], n = 0;
            for (int i = S->op0; i < S->op0 + S->nop; i++) {
                const wf_cost_op *r = &ctx->ops[i];
                if ((pt->is_f ? r->fpoint : r->gpoint) == S->pt0 + k && n < WF_COST_EVENT_OPS)
                    ops[n++] = i;
            }
            if (pt->is_f && sp) {
                st = add_ev(out, s, WF_COLL_ALLGATHER, 0, pt->bytes, 1, WF_COST_WIN_FWD, 2, ops, n);
                if (st == WF_OK)
                    st = add_ev(out, s, WF_COLL_ALLGATHER, 1, pt->bytes, 1, WF_COST_WIN_DGRAD, 1, ops, n);
                if (st == WF_OK)
                    st = add_ev(out, s, WF_COLL_REDUCE_SCATTER, 1, pt->bytes, 1, WF_COST_WIN_WGRAD, 1, ops, n);
            } else if (pt->is_f) {
                st = add_ev(out, s, WF_COLL_ALLREDUCE, 1, pt->bytes, 1, WF_COST_WIN_WGRAD, 1, ops, n);
            } else if (sp) {
                st = add_ev(out, s, WF_COLL_REDUCE_SCATTER, 0, pt->bytes, 1, WF_COST_WIN_FWD, 2, ops, n);
                if (st == WF_OK)
                    st = add_ev(out, s, WF_COLL_ALLGATHER, 1, pt->bytes, 1, WF_COST_WIN_DGRAD, 2, ops, n);
            } else {
                st = add_ev(out, s, WF_COLL_ALLREDUCE, 0, pt->bytes, 1, WF_COST_WIN_NONE, 3, ops, n);
            }
            if (st != WF_OK)
                break;
        }
        if (st == WF_OK && S->ce_bytes > 0)
            st = add_ev(out, s, WF_COLL_ALLREDUCE, 0, S->ce_bytes, 3, WF_COST_WIN_NONE, 3, NULL, 0);
        if (st != WF_OK)
            break;
    }
    out->shared_params = ctx->shared_split / t + ctx->shared_repl;
    if (st != WF_OK)
        wf_cost_layout_free(out);
    return st;
}

/* ---- cache -------------------------------------------------------------------------- */

/* Megatron's layouts for (tp, sp), built once per context. */
static const wf_cost_layout *megatron_layout(wf_cost_ctx *ctx, int t, int sp)
{
    sp = t > 1 && sp ? 1 : 0;
    for (int i = 0; i < ctx->nmlay; i++)
        if (ctx->mlay[i].tp == t && ctx->mlay[i].sp == sp)
            return &ctx->mlay[i];
    if (ctx->nmlay == WF_COST_MLAYOUTS) {
        for (int i = 0; i < ctx->nmlay; i++)
            wf_cost_layout_free(&ctx->mlay[i]);
        ctx->nmlay = 0;
    }
    if (wf_cost_layout_megatron(ctx, t, sp, &ctx->mlay[ctx->nmlay]) != WF_OK)
        return NULL;
    return &ctx->mlay[ctx->nmlay++];
}

static wf_cost_entry *lookup(wf_cost_ctx *ctx, int64_t mbs, int t, int sp, int pp, wf_recompute rc)
{
    wf_cost_key k;
    memset(&k, 0, sizeof k);
    k.mbs = mbs;
    k.tp = t;
    k.sp = sp;
    k.pp = pp;
    k.rc = rc;
    memcpy(&k.var, &ctx->var, sizeof k.var);
    k.var.dp = k.var.pp = k.var.zero = k.var.dp_overlap = 0;
    /* The slot: a multiply-xorshift over the key's words; the key is compared whole. */
    uint64_t w[sizeof k / 8 + 1] = {0}, h = 0x9E3779B97F4A7C15ull;
    memcpy(w, &k, sizeof k);
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        h ^= w[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    wf_cost_entry *e = &ctx->cache[h % WF_COST_CACHE];
    if (e->valid && memcmp(&e->key, &k, sizeof k) == 0)
        return e;
    e->valid = 0;
    memcpy(&e->key, &k, sizeof k); /* padding too: the next lookup compares it */
    if (ctx->transformer) {
        const wf_cost_layout *L = megatron_layout(ctx, t, sp);
        if (!L)
            return NULL;
        for (int s = 0; s < WF_COST_SEC_COUNT; s++)
            fill_section(ctx, s, mbs, L, rc, &e->s[s]);
    } else {
        if (!e->split)
            e->split = malloc(sizeof *e->split);
        if (!e->split)
            return NULL;
        wf_cost_split_stages(ctx, mbs, pp, rc, e->split);
    }
    e->valid = 1;
    return e;
}

const wf_cost_sect_time *wf_cost_sections(wf_cost_ctx *ctx, int64_t mbs, int tp, int sp, wf_recompute rc)
{
    if (!ctx->transformer)
        return NULL;
    wf_cost_entry *e = lookup(ctx, mbs, tp, sp, 0, rc);
    return e ? e->s : NULL;
}

/* ---- data-parallel gradients ---------------------------------------------------- */

/* Bucket (fusion) size of a schedule: the last bucket's reduction cannot hide
 * behind backward. */
static double bucket_bytes(const wf_plan *p, double layer_grad_bytes)
{
    if (p->comm.threshold_bytes > 0)
        return p->comm.threshold_bytes;
    switch (p->comm.kind) {
    case WF_COMM_HOROVOD:
        return 128 * MIB;
    case WF_COMM_WFBP:
    case WF_COMM_MGWFBP:
        return layer_grad_bytes;
    case WF_COMM_BYTESCHEDULER:
        return 4e6 * 4; /* 4M-parameter chunks */
    case WF_COMM_DEAR:
        return 25e6; /* DeAR's 25 MB groups */
    default:
        return 25 * MIB;
    }
}

typedef struct {
    double total;   /* all data-parallel collective time */
    double exposed; /* not hidden behind computation */
    double slow;    /* compute slowed by the hidden part */
    double edge;    /* of exposed, what shows however long the backward: the
                       reduction of the bucket the backward makes last */
} dp_cost;

/* DeAR's per-group optimizer steps run in the next forward (each group's
 * just before its layers' forward), not after the backward: DeAR's own
 * schedule, and ZeRO-1/2 under it unless the profile is Megatron-Core's
 * distributed optimizer (which steps whole after the backward and only
 * moves the parameter all-gathers into the forward). ZeRO-3 has no
 * all-gather half (the next forward gathers every op's weights anyway). */
static int dear_steps(const wf_cost_ctx *ctx, const wf_plan *p)
{
    return p->comm.kind == WF_COMM_DEAR && p->overlap && p->dp > 1 && p->zero < 3 &&
           !(p->zero >= 1 && ctx->var.ag_overlap);
}

/* The optimizer step of `params` local parameters (ZeRO: its shard). */
static double step_time(const wf_cost_ctx *ctx, const wf_plan *p, double params)
{
    const wf_cluster *c = &ctx->cluster;
    if (p->zero >= 1)
        params /= (double)p->dp;
    return params * wf_cost_optimizer_bytes_per_param(ctx) / wf_device_opt_bps(&c->dev);
}

/* Gradient reduction of `params` local parameters over the dp group;
 * `window` is the backward time it may hide behind, `fwd_window` the
 * forward time the all-gather half may hide behind (DeAR, Megatron-Core's
 * parameter gather). `edge_params` are the parameters the forward opens with
 * (the embedding), whose gradients the backward makes last: the group that
 * holds them (a bucket, at least those tensors, which are never split) can
 * neither be reduced behind the backward nor gathered behind the forward. */
/* An interleaved stage's model chunks (vpp > 1), as Megatron-LM's
 * interleaved schedule syncs them (forward_backward_pipelining_with_
 * interleaving in megatron/core/pipeline_parallel/schedules.py at
 * d98e8a64ddf34856e74b24714e3bedb2f5a39553): a chunk's gradients are
 * reduced once its last micro-batch's backward is done (grad_sync_func per
 * chunk), which the cooldown reaches for chunk c about c x pp chunk
 * backwards before the stage's last; a chunk's parameters are gathered
 * before its first forward, which the warm-up reaches for chunk c about
 * c x pp chunk forwards after the stage's first (param_sync_func). The
 * simulator plays both (each instance's gradients ready at its chunk's last
 * backward; each group's gather waited for before its first forward). */
typedef struct {
    int n;               /* chunks, 0: none (the stage's gradients as one) */
    double share[WF_PLAN_RC_STAGES]; /* each chunk's part of the stage's parameters */
    double rs_step;      /* time between chunk c's and chunk c-1's last backward */
    double ag_step;      /* time between chunk c-1's and chunk c's first forward */
} dp_chunks;

static dp_cost dp_reduce_chunked(const wf_cost_ctx *ctx, const wf_plan *p, const wf_group *g, double params,
                                 double layer_params, double edge_params, double window, double fwd_window,
                                 const dp_chunks *ch);

static dp_cost dp_reduce(const wf_cost_ctx *ctx, const wf_plan *p, const wf_group *g, double params,
                         double layer_params, double edge_params, double window, double fwd_window)
{
    return dp_reduce_chunked(ctx, p, g, params, layer_params, edge_params, window, fwd_window, NULL);
}

static dp_cost dp_reduce_chunked(const wf_cost_ctx *ctx, const wf_plan *p, const wf_group *g, double params,
                                 double layer_params, double edge_params, double window, double fwd_window,
                                 const dp_chunks *ch)
{
    dp_cost r = {0, 0, 0, 0};
    if (p->dp <= 1 || params <= 0)
        return r;
    const wf_cluster *c = &ctx->cluster;
    const double bwd_window = window;
    double gb = wf_cost_grad_elem_bytes(ctx);
    double grads = params * gb, weights = params * ctx->elem_bytes;
    double edge = bucket_bytes(p, layer_params * gb);
    if (edge < edge_params * gb)
        edge = edge_params * gb;
    /* ByteScheduler: the first layer's chunks preempt everything queued, so
     * the edge is that layer's gradients alone. */
    if (p->comm.kind == WF_COMM_BYTESCHEDULER && edge_params > 0)
        edge = edge_params * gb;
    if (edge > grads)
        edge = grads;
    const int dear = p->comm.kind == WF_COMM_DEAR && p->zero < 3;
    double first_half, first_edge, second_half = 0, second_edge = 0, second_window = 0;
    if (p->zero >= 1) {
        /* ZeRO: reduce-scatter the gradients, all-gather the updated weights
         * after the (sharded) optimizer step. Under DeAR's schedule (and
         * Megatron-Core's distributed optimizer, overlap_param_gather, which
         * the plan as run names DeAR) the gathers run behind the next
         * forward. */
        first_half = wf_coll_time(c, WF_COLL_REDUCE_SCATTER, g, grads);
        first_edge = wf_coll_time(c, WF_COLL_REDUCE_SCATTER, g, edge);
        second_half = wf_coll_time(c, WF_COLL_ALLGATHER, g, p->zero == 3 ? 0 : weights);
        second_edge = wf_coll_time(c, WF_COLL_ALLGATHER, g, edge / gb * ctx->elem_bytes);
    } else if (dear) {
        /* DeAR: reduce-scatter in backward, all-gather behind the next forward. */
        first_half = wf_coll_time(c, WF_COLL_REDUCE_SCATTER, g, grads);
        first_edge = wf_coll_time(c, WF_COLL_REDUCE_SCATTER, g, edge);
        second_half = wf_coll_time(c, WF_COLL_ALLGATHER, g, grads);
        second_edge = wf_coll_time(c, WF_COLL_ALLGATHER, g, edge);
    } else {
        first_half = wf_coll_time(c, WF_COLL_ALLREDUCE, g, grads);
        first_edge = wf_coll_time(c, WF_COLL_ALLREDUCE, g, edge);
    }
    /* The bucket at the head's end is the first the backward completes and
     * the last the forward reaches (DDP's first bucket is small, 1 MiB):
     * the reduction starts only once the backward has made it, and no
     * gather is left to hide behind its forward. Both windows lose that
     * share of their compute (gradients taken as made at an even rate). */
    double lead = bucket_bytes(p, layer_params * gb);
    if (p->comm.kind == WF_COMM_DDP && lead > 1 * MIB)
        lead = 1 * MIB; /* PyTorch DDP's first bucket (sched's WF_SCHED_DDP_FIRST_BYTES) */
    lead = lead < grads ? lead / grads : 1.0;
    window *= 1.0 - lead;
    if (dear) {
        /* Each group's all-gather waits for the group before it to pass its
         * gate, then runs beside that group's forward (and, with DeAR's own
         * steps, beside the step of the group before it). */
        second_window = fwd_window;
        if (dear_steps(ctx, p))
            second_window += step_time(ctx, p, params);
        second_window *= 1.0 - lead;
    }
    r.total = first_half + second_half;
    if (!p->overlap) {
        r.exposed = r.total;
        return r;
    }
    double exposed = window < first_half ? first_half - window : 0;
    if (p->comm.kind == WF_COMM_BYTESCHEDULER && p->zero == 0) {
        /* ByteScheduler (Peng et al., SOSP'19, §3-4): chunks of the layers
         * the next forward needs first preempt the rest, and what is left
         * at the end of the backward runs on into the next forward, each
         * layer's forward (after its own step) waiting only for its own
         * chunks. In the steady state the channel has the last backward,
         * the first forward and the steps to hide behind; what it cannot
         * hide shows, and never less than the edge (the first layers'
         * gradients, made last and needed first). The simulator plays it
         * chunk by chunk (plan.c, bs_gates). */
        double step = step_time(ctx, p, params);
        double hide = bwd_window + fwd_window + step;
        /* One collective per chunk, each tensor cut alone: every one pays
         * the collective's start-up (its time for one byte). Tensors are
         * taken as held by the stages in proportion to their parameters. */
        double share = ctx->param_elems > 0 ? params / ctx->param_elems : 1.0;
        double chunks = ctx->param_tensors * (share < 1 ? share : 1) + floor(grads / bucket_bytes(p, 0));
        if (chunks > 1) {
            double startup = wf_coll_time(c, WF_COLL_ALLREDUCE, g, 1.0);
            first_half += (chunks - 1) * startup;
            r.total += (chunks - 1) * startup;
        }
        exposed = first_half > hide ? first_half - hide : 0;
        if (ctx->transformer) {
            /* Even layers: what the backward leaves queued is paced by the
             * forward, each layer's forward waiting for its share of it. */
            double left = first_half - first_edge - bwd_window;
            double rate = first_half > 0 ? (fwd_window + step) / first_half : 1;
            double paced = left > 0 && rate < 1 ? first_edge + left * (1 - rate) : first_edge;
            exposed = paced > exposed ? paced : exposed;
        }
    }
    if (ch && ch->n > 1 && p->comm.kind != WF_COMM_BYTESCHEDULER) {
        /* Chunks: chunk c's reductions are released c steps before the
         * stage's last backward ends (chunk 0: its own window) and run one
         * after another on the channel, the later chunks first: what shows
         * is the largest excess of the work released from chunk c on over
         * the time left after its release. */
        double cum = 0, worst = 0;
        for (int k = 0; k < ch->n; k++) {
            cum += ch->share[k] * first_half;
            double slack = k == 0 ? window : (double)k * ch->rs_step;
            worst = cum - slack > worst ? cum - slack : worst;
        }
        exposed = worst;
    }
    if (exposed < first_edge)
        exposed = first_edge;
    r.edge = first_edge;
    /* Data-parallel collectives run beside the compute without slowing it
     * (as the simulator plays them; overlap_slowdown is calibrated on the
     * tensor-parallel overlaps inside a layer, which the A100 rows measure).
     * Nothing runs before the first group's all-gather: it shows. */
    if (second_window > 0 && ch && ch->n > 1) {
        /* Chunks: every gather issued at the start, in chunk order; chunk
         * c's waited for at its first forward, c steps in (chunk 0: the
         * whole-stage form on its own share). */
        double a0 = ch->share[0] * second_half, e0 = second_edge < a0 ? second_edge : a0;
        double shown = e0 + overlapped(a0 - e0, second_window / (double)ch->n, 1.0, &r.slow), cum = a0;
        for (int k = 1; k < ch->n; k++) {
            cum += ch->share[k] * second_half;
            double late = cum - (double)k * ch->ag_step;
            shown = late > shown ? late : shown;
        }
        exposed += shown;
    } else if (second_window > 0) {
        if (second_edge > second_half)
            second_edge = second_half;
        exposed += second_edge + overlapped(second_half - second_edge, second_window, 1.0, &r.slow);
    } else {
        exposed += second_half;
    }
    r.exposed = exposed;
    return r;
}

/* ---- the estimate --------------------------------------------------------------------- */

typedef struct {
    double comp, rec, tpc, ppc, zc; /* per micro-batch: compute, recompute, tp, pp, ZeRO-3 (exposed) */
    double zc_total;                /* per micro-batch: ZeRO-3's gathers, all of them */
    double bwd_window, fwd_window;  /* last micro-batch's backward / first forward */
    double params;                  /* local parameter elements */
    double block_params;            /* of them, the repeated blocks' (transformer layers) */
    double layer_params;
    double eparams;                 /* local expert parameter elements (not in params) */
    double epc;                     /* per micro-batch: the experts' collectives (in tpc) */
    double act, transient;          /* bytes */
    double z3_pass;                 /* ZeRO-3 gathering per op (sw=weft): one pass's gathers; 0: one
                                       gather of the stage's weights per pass */
} stage_cost;

static double stage_total(const stage_cost *s) { return s->comp + s->rec + s->tpc + s->ppc + s->zc; }

static void add_section(stage_cost *st, const wf_cost_sect_time *x, double times)
{
    st->comp += times * (x->fwd + x->bwd + x->slow);
    st->rec += times * x->rec;
    st->tpc += times * (x->tp_fwd + x->tp_bwd + x->tp_rec);
    st->epc += times * x->ep;
    st->bwd_window += times * (x->bwd + x->rec + x->tp_bwd + x->tp_rec);
    st->fwd_window += times * (x->fwd + x->tp_fwd);
}

/* ZeRO-3 gathers a stage's weights before its forward and again before its
 * backward, every micro-batch, prefetched one pass ahead. */
static void add_zero3(const wf_cost_ctx *ctx, const wf_plan *p, const wf_group *dpg, const wf_group *edpg,
                      stage_cost *s, double *slow_total)
{
    if (p->zero != 3 || p->dp <= 1)
        return;
    double gather = s->z3_pass > 0 ? 2.0 * s->z3_pass
                                   : 2.0 * wf_coll_time(&ctx->cluster, WF_COLL_ALLGATHER, dpg, s->params * ctx->elem_bytes);
    if (s->eparams > 0 && edpg)
        gather += 2.0 * wf_coll_time(&ctx->cluster, WF_COLL_ALLGATHER, edpg, s->eparams * ctx->elem_bytes);
    double slow = 0;
    s->zc_total = gather;
    /* Prefetched one layer ahead on the communication channel, as the
     * simulator plays it: hidden behind the compute without slowing it (the
     * gather is a copy; the reduction's SM use is what overlap_slowdown
     * charges elsewhere). */
    /* The backward's gather runs beside the forward, the next forward's
     * beside the backward (one stage pass ahead). */
    /* The weft runtime (sw=weft) has no progress thread or copy engine: a
     * prefetched gather moves inside the MPI calls on the rank's own core,
     * and slows the compute it hides behind as any overlapped collective
     * (the cluster's overlap_slowdown). */
    double half = 0.5 * gather, gs = ctx->var.workspace ? ctx->cluster.overlap_slowdown : 1.0;
    s->zc = overlapped(half, s->fwd_window, gs, &slow) + overlapped(half, s->bwd_window, gs, &slow);
    *slow_total = slow;
}

/* One stage (pp 1) under ZeRO-3, played pass by pass as the simulator
 * plays it (sim/plan_tasks.c): each pass's gather (half a micro-batch's
 * gathers) is issued once the pass two before it has ended (one pass of
 * prefetch) and the channel is free; the pass starts once the pass before
 * it has ended and its gather has arrived. The passes take the stage's
 * work (`busy` over m micro-batches) split as its forward and backward
 * windows; in 1F1B order (a forward, then its backward) or GPipe's (every
 * forward, then every backward). Returns when the last backward ends: the
 * iteration is no shorter (its reductions' last bucket after it). With a
 * mixture of experts the gathers of the expert shards over their
 * expert-data-parallel ranks can outlast the passes they hide behind, and
 * the passes then wait for them. */
static double zero3_replay(const stage_cost *s, int64_t m, int gpipe, double busy)
{
    double win = s->fwd_window + s->bwd_window;
    if (!(win > 0) || m < 1)
        return 0;
    double per = busy / (double)m, f = per * s->fwd_window / win, b = per - f, g = 0.5 * s->zc_total;
    double chan = 0, e1 = 0, e2 = 0;
    for (int64_t k = 0; k < 2 * m; k++) {
        int bwd = gpipe ? k >= m : (int)(k & 1);
        double gs = chan > e2 ? chan : e2, ge = gs + g;
        chan = ge;
        double st = e1 > ge ? e1 : ge;
        e2 = e1;
        e1 = st + (bwd ? b : f);
    }
    return e1;
}

static void finish(const wf_cost_ctx *ctx, const wf_plan *p, int64_t batch, int64_t m,
                   const stage_cost *st, int nst, int crit, double bubble, dp_cost dp,
                   double emb_sync, double opt_params, double buffers_extra, wf_estimate *out)
{
    const wf_cluster *c = &ctx->cluster;
    double mm = (double)m;
    const stage_cost *s = &st[crit];
    memset(out, 0, sizeof *out);
    wf_breakdown *bd = &out->breakdown;
    bd->compute = mm * s->comp + dp.slow;
    bd->recompute = mm * s->rec;
    bd->tp_comm = mm * s->tpc;
    bd->pp_comm = mm * s->ppc;
    bd->bubble = bubble;
    /* dp_comm is the data-parallel collectives' whole time, as the simulator
     * counts it: ZeRO-3's two gathers of every micro-batch included, hidden or
     * not (only their exposed part is in exposed_comm). */
    bd->dp_comm = dp.total + emb_sync + mm * s->zc_total;
    bd->optimizer = opt_params * wf_cost_optimizer_bytes_per_param(ctx) / wf_device_opt_bps(&c->dev);
    bd->exposed_comm = bd->tp_comm + bd->pp_comm + mm * s->zc + dp.exposed + emb_sync;
    out->iteration_time_s = bd->compute + bd->recompute + bd->bubble + bd->optimizer + bd->exposed_comm;
    /* Each stage waits the pipeline's span less its own passes. */
    out->bubble_max_s = p->pp > 1 ? bubble : 0;
    for (int k = 0; p->pp > 1 && k < nst; k++) {
        double w = mm * (stage_total(s) - stage_total(&st[k])) + bubble;
        if (w > out->bubble_max_s)
            out->bubble_max_s = w;
    }
    out->samples_per_s = (double)batch / out->iteration_time_s;
    out->model_flops_per_iteration = ctx->model_flops_per_sample * (double)batch;
    double devices = (double)wf_plan_devices(p);
    out->tflops_per_device = out->model_flops_per_iteration / out->iteration_time_s / devices / 1e12;
    double peak = c->dev.matrix_flops[ctx->dtype] > 0 ? c->dev.matrix_flops[ctx->dtype]
                                                      : c->dev.matrix_flops[WF_DTYPE_FP32];
    out->mfu = out->tflops_per_device * 1e12 / peak;
    /* Memory: the most loaded stage. */
    double bpp = wf_cost_bytes_per_param(ctx, p->zero, p->dp);
    /* Expert weights shard over the expert-data-parallel ranks. */
    double epx = (double)ctx->var.ep * (double)ctx->var.etp;
    double edp = (double)p->tp * (double)p->dp / epx;
    double ebpp = wf_cost_bytes_per_param(ctx, p->zero, edp >= 1 ? (int)edp : 1);
    double best = -1;
    bd->ep_comm = mm * s->epc;
    for (int k = 0; k < nst; k++) {
        double w = st[k].params * bpp + st[k].eparams * ebpp;
        double buf = c->mem_reserved_bytes + st[k].transient + buffers_extra;
        double total = w + st[k].act + buf;
        if (total > best) {
            best = total;
            out->mem_weights_bytes = w;
            out->mem_layer_weights_bytes = st[k].block_params * bpp + st[k].eparams * ebpp;
            out->mem_activation_bytes = st[k].act;
            out->mem_buffer_bytes = buf;
        }
    }
    out->memory_per_device_bytes = best;
    out->fits = best <= c->dev.mem_bytes;
    out->devices = wf_plan_devices(p);
    out->micro_batches = m;
}

/* The estimate's tail after finish: the model-parallel all-reduce of the
 * replicated weights' partial gradients (mp_sync, exposed: it runs after
 * the backward, on the stage that ends the iteration) added to the time,
 * then the rates of the new time: samples/s, TFLOP/s per device, MFU. */
static void add_mp_sync(const wf_cost_ctx *ctx, int64_t batch, double mp_sync, wf_estimate *out)
{
    const wf_cluster *c = &ctx->cluster;
    out->breakdown.tp_comm += mp_sync;
    out->breakdown.exposed_comm += mp_sync;
    out->iteration_time_s += mp_sync;
    out->samples_per_s = (double)batch / out->iteration_time_s;
    out->tflops_per_device = out->model_flops_per_iteration / out->iteration_time_s / (double)out->devices / 1e12;
    double peak = c->dev.matrix_flops[ctx->dtype] > 0 ? c->dev.matrix_flops[ctx->dtype]
                                                      : c->dev.matrix_flops[WF_DTYPE_FP32];
    out->mfu = out->tflops_per_device * 1e12 / peak;
}

/* The buffers a runtime keeps beside the activations (profiles with
 * var.workspace: sw=weft) on a stage holding the layer section and, when
 * `first` / `last`, the pre / post section: the backward's working set
 * (on the last stage the head's softmax workspace, already counted, stands
 * for it when larger: the two are not alive at once), the largest kernel
 * workspace and the largest op's weight-gradient buffer. */
static double runtime_buffers(const wf_cost_sect_time *sect, int first, int last, double logits_ws)
{
    const wf_cost_sect_time *lay = &sect[WF_COST_SEC_LAYER];
    double work = lay->work_bytes, ws = lay->ws_bytes, acc = lay->acc_bytes;
    for (int s = 0; s < WF_COST_SEC_COUNT; s++) {
        if (s == WF_COST_SEC_LAYER || (s == WF_COST_SEC_PRE && !first) || (s == WF_COST_SEC_POST && !last))
            continue;
        ws = sect[s].ws_bytes > ws ? sect[s].ws_bytes : ws;
        acc = sect[s].acc_bytes > acc ? sect[s].acc_bytes : acc;
    }
    if (last)
        work = work > logits_ws ? work - logits_ws : 0;
    return work + ws + acc;
}

/* 1 when every layer of plan p recomputes as p->recompute says (the layer
 * section under that kind serves every stage); with uneven stages the block
 * method (rc_layers) makes the mix stage-dependent. */
static int rc_uniform(const wf_cost_ctx *ctx, const wf_plan *p)
{
    if (p->stage_n > 0)
        return p->rc_n == 0 && (p->recompute != WF_RECOMPUTE_FULL || p->rc_layers <= 0);
    return wf_plan_rc_uniform(p, (int)(ctx->model.layers / ((int64_t)p->pp * p->vpp)));
}

/* The composition of a transformer plan: sections (the per-op terms of
 * layouts L at p's micro-batch and recomputation) into stages, the pipeline,
 * the data-parallel reduction, the optimizer step and memory. p's tp and sp
 * are L's. */
static wf_status estimate_transformer(wf_cost_ctx *ctx, const wf_plan *p, int64_t batch, const wf_cost_layout *L,
                                      const wf_cost_sect_time *sect, const wf_cost_sect_time *const *lay_rc,
                                      wf_estimate *out)
{
    const wf_cluster *c = &ctx->cluster;
    const wf_cost_sect_time *pre = &sect[WF_COST_SEC_PRE], *lay = &sect[WF_COST_SEC_LAYER],
                            *post = &sect[WF_COST_SEC_POST];
    const int64_t m = batch / ((int64_t)p->mbs * p->dp);
    const double tt = (double)p->tp, pp = (double)p->pp, v = (double)p->vpp, bb = (double)p->mbs;
    const double Ls = (double)ctx->model.layers / pp;
    const wf_cost_section *S = ctx->sec;
    double lay_params = L->sec_params[WF_COST_SEC_LAYER];
    double pre_params = L->sec_params[WF_COST_SEC_PRE];
    double post_params = L->sec_params[WF_COST_SEC_POST];
    double shared = L->shared_params;

    /* Pipeline sends: the layer input b*s*h, 1/t of it per rank when tp > 1
     * (scattered, then all-gathered on arrival unless sequence-parallel). One
     * exchange forward and one backward per micro-batch and model chunk, each
     * paying the cluster's p2p_overhead_s on top of the wire (wf_coll_time):
     * 2 vpp fixed costs per micro-batch is what bounds useful interleaving. */
    double ppc = p->pp > 1 ? 2.0 * v * wf_cost_p2p_time(ctx, p, S[WF_COST_SEC_LAYER].input_bytes * bb) : 0;

    /* Stages: first (embedding), middle, last (head); one stage holds all.
     * With recomputation per stage (or Megatron's block method) each stage
     * holds its own mix of layers recomputed fully, selectively and not at
     * all (wf_plan_stage_rc): a per-stage list makes every stage its own
     * (nst = pp), a mix that every stage shares keeps the three. rep[k] is
     * the pipeline stage st[k] stands for, cnt[k] how many it stands for. */
    const int chunk_layers = (int)(ctx->model.layers / ((int64_t)p->pp * p->vpp));
    const int uniform = rc_uniform(ctx, p);
    /* Uneven stages (stages=): every stage its own, with its own layers. */
    const int uneven = p->stage_n > 0;
    const int per_stage = (!uniform && p->rc_n > 0) || uneven;
    stage_cost st[WF_PLAN_RC_STAGES];
    int rep[WF_PLAN_RC_STAGES];
    double cnt[WF_PLAN_RC_STAGES], Lk[WF_PLAN_RC_STAGES];
    int nst = per_stage ? p->pp : p->pp == 1 ? 1 : p->pp == 2 ? 2 : 3;
    if (nst > WF_PLAN_RC_STAGES)
        return wf_errorf(WF_INVAL, "recompute per stage: pp=%d, at most %d stages", p->pp, WF_PLAN_RC_STAGES);
    memset(st, 0, sizeof st[0] * (size_t)nst);
    for (int k = 0; k < nst; k++) {
        rep[k] = per_stage ? k : k == 0 ? 0 : k == nst - 1 ? p->pp - 1 : 1;
        cnt[k] = per_stage || nst < 3 || k != 1 ? 1.0 : pp - 2;
        Lk[k] = uneven ? (double)p->stage_layers[k] : Ls;
    }
    const double lay_eparams = S[WF_COST_SEC_LAYER].params_expert / ((double)ctx->var.ep * (double)ctx->var.etp);
    double per_layer_act[WF_PLAN_RC_STAGES];
    for (int k = 0; k < nst; k++) {
        if (uniform) {
            add_section(&st[k], lay, Lk[k]);
            st[k].transient = lay->transient_bytes;
            per_layer_act[k] = Lk[k] * lay->act_bytes;
        } else {
            /* Layers per chunk recomputed fully, selectively, not at all; a
             * stage holds vpp chunks (uneven stages: one, of its layers). */
            int nf, ns, cl = uneven ? p->stage_layers[k] : chunk_layers;
            wf_plan_stage_rc(p, rep[k], cl, &nf, &ns);
            const double n_rc[3] = {v * (double)(cl - nf - ns), v * (double)ns, v * (double)nf};
            per_layer_act[k] = 0;
            for (int r = 0; r < 3; r++) {
                if (!(n_rc[r] > 0))
                    continue;
                add_section(&st[k], lay_rc[r], n_rc[r]);
                per_layer_act[k] += n_rc[r] * lay_rc[r]->act_bytes;
                /* One layer rematerializes at a time: the largest workspace. */
                if (lay_rc[r]->transient_bytes > st[k].transient)
                    st[k].transient = lay_rc[r]->transient_bytes;
            }
        }
        st[k].ppc = ppc;
        st[k].eparams = Lk[k] * lay_eparams;
        st[k].params = Lk[k] * lay_params;
        st[k].block_params = st[k].params;
        st[k].layer_params = lay_params;
    }
    stage_cost *first = &st[0], *last = &st[nst - 1];
    /* The end stages send one message fewer per micro-batch: the first
     * chunk of the first stage has no stage before it to send a gradient
     * to, the last chunk of the last stage none after it to send an
     * activation to (2 vpp - 1 sends, as the simulator plays them). */
    if (nst > 1) {
        first->ppc *= (2.0 * v - 1.0) / (2.0 * v);
        last->ppc *= (2.0 * v - 1.0) / (2.0 * v);
    }
    add_section(first, pre, 1);
    first->params += pre_params;
    add_section(last, post, 1);
    last->params += post_params;
    if (nst == 1)
        first->params -= shared;
    /* The head's fp32 softmax workspace on the last stage. */
    const double logits_ws = bb * ctx->logits_per_sample / tt / (double)p->cp * ctx->var.loss_ws;
    last->transient += logits_ws;
    if (ctx->var.workspace)
        for (int k = 0; k < nst; k++)
            st[k].transient += runtime_buffers(&sect[0], k == 0, &st[k] == last, logits_ws);

    /* Activations: stage s keeps the micro-batches 1F1B has in flight on it
     * (wf_cost_inflight_stage: the first min(pp, m), more when interleaved;
     * the last one; GPipe all of them) times its layers' activations under
     * their recomputation. */
    for (int k = 0; k < nst; k++) {
        double per = per_layer_act[k] + (k == 0 ? pre->act_bytes : 0);
        st[k].act = wf_cost_inflight_stage(p, m, rep[k]) * per;
    }
    /* The head's and the loss's saved tensors (the logits) are kept by
     * every micro-batch in flight on the stage that holds them: all of them
     * under GPipe; under 1F1B, interleaved or not, the last model chunk runs
     * each micro-batch's backward right after its forward. */
    last->act += (p->pipe == WF_PIPE_GPIPE ? (double)m : 1.0) * post->act_bytes;

    /* Gradients are reduced (and ZeRO shards) over dp x cp ranks, stride tp:
     * from here on pg is the plan as its data-parallel group sees it. */
    wf_plan pgv = *p;
    pgv.dp = p->dp * p->cp;
    pgv.cp = 1;
    const wf_plan *pg = &pgv;
    /* The plan's rank groups (plan.h's generator, order tp-cp-ep-dp-pp): the
     * dense layers' and the expert layers'. */
    wf_axis_ranks ax[WF_AXIS_COUNT], eax[WF_AXIS_COUNT];
    wf_rank_axes_dense(p->tp, p->cp, p->dp, p->pp, ax);
    wf_rank_axes_expert(p->tp, p->cp, p->dp, p->pp, ctx->var.ep, ctx->var.etp, eax);
    const wf_axis_ranks dpa = wf_rank_axes_join(ax, WF_AXIS_CP, WF_AXIS_DP);
    wf_group dpg = wf_group_place(c, dpa.size, dpa.stride);
    /* Expert weights: their gradients are reduced (and ZeRO shards) over the
     * expert-data-parallel ranks, stride ep x etp. */
    const int edp = (int)eax[WF_AXIS_DP].size;
    wf_group edpg = wf_group_place(c, eax[WF_AXIS_DP].size, eax[WF_AXIS_DP].stride);
    /* The weft runtime gathers ZeRO-3's weights per op (a unit per op that
     * first reads them, dist.c), each unit a collective of its own: one pass
     * is the sum over the stage's ops with weights (a tied head's weight is
     * the embedding's unit when one stage holds both). */
    if (p->zero == 3 && pg->dp > 1 && ctx->var.workspace)
        for (int k = 0; k < nst; k++)
            for (int s = 0; s < WF_COST_SEC_COUNT; s++) {
                if ((s == WF_COST_SEC_PRE && k != 0) || (s == WF_COST_SEC_POST && &st[k] != last))
                    continue;
                double times = s == WF_COST_SEC_LAYER ? Lk[k] : 1.0;
                for (int i = S[s].op0; i < S[s].op0 + S[s].nop; i++) {
                    const wf_cost_op *r = &ctx->ops[i];
                    if (!(r->params > 0) || r->expert ||
                        (s == WF_COST_SEC_POST && nst == 1 && shared > 0 && r->params <= shared * L->pdiv[i]))
                        continue;
                    st[k].z3_pass += times * wf_coll_time(c, WF_COLL_ALLGATHER, &dpg,
                                                          r->params / L->pdiv[i] * ctx->elem_bytes);
                }
            }
    double z3slow = 0;
    for (int k = 0; k < nst; k++) {
        double sl = 0;
        /* The gathers, prefetched on the data-parallel channel, also hide
         * behind the stage's pipeline sends (another channel), half in each
         * pass, as the simulator plays them (without interleaving: the
         * chunks' passes then follow each other without a wait). */
        stage_cost zs = st[k];
        if (v == 1) {
            zs.fwd_window += 0.5 * st[k].ppc;
            zs.bwd_window += 0.5 * st[k].ppc;
        }
        add_zero3(ctx, pg, &dpg, &edpg, &zs, &sl);
        st[k].zc = zs.zc;
        st[k].zc_total = zs.zc_total;
        if (k == 0)
            z3slow = sl;
    }

    int crit = 0;
    double smax = -1, ssum = 0;
    for (int k = 0; k < nst; k++) {
        double sk = stage_total(&st[k]);
        if (sk > smax) {
            smax = sk;
            crit = k;
        }
    }
    /* The fill and the drain pass through every stage but the slowest once
     * (a flow shop): (pp-1) S with uniform stages, no more when one stage
     * (a heavy head) is the slowest. Those passes do not wait for ZeRO-3's
     * gathers: a stage in the fill or the drain waits for its neighbour, and
     * the gather of its next pass, issued one pass ahead, runs meanwhile (the
     * first stage's first gather is charged below); only the steady state
     * (m x S_slowest) shows them. */
    double pass[WF_PLAN_RC_STAGES];
    for (int k = 0; k < nst; k++) {
        pass[k] = stage_total(&st[k]) - st[k].zc;
        ssum += cnt[k] * pass[k];
    }
    double bubble = p->pp > 1 ? (ssum - pass[crit]) / v : 0;

    /* In 1F1B the first stage finishes its backward last: its gradient
     * reduction and optimizer step end the iteration. Interleaved, its
     * chunks reduce and gather apart (dp_chunks). */
    dp_chunks chunks;
    memset(&chunks, 0, sizeof chunks);
    if (p->vpp > 1 && !uneven && first->params > 0 && p->vpp <= WF_PLAN_RC_STAGES) {
        chunks.n = p->vpp;
        double per_chunk = (first->params - pre_params) / v;
        for (int k = 0; k < p->vpp; k++)
            chunks.share[k] = (per_chunk + (k == 0 ? pre_params : 0)) / first->params;
        /* (chunk 0's own window: its last backward without the recomputation
         * before it, which precedes every gradient it makes) */
        chunks.rs_step = pp * first->bwd_window / v;
        chunks.ag_step = pp * first->fwd_window / v;
    }
    if (chunks.n > 1 && !uniform && nst > 1 && (double)m * v <= 2.0 * (pp - 1.0) + (v - 1.0) * pp) {
        /* Recomputation per stage, interleaved, every forward of the first
         * stage in its warm-up (m vpp <= 2 (pp - 1) + (vpp - 1) pp): it runs
         * every backward in its cooldown on its own, so what it recomputes
         * beyond the least of the other
         * stages shows in full; the bubble term, a flow shop's, sees 1/vpp
         * of it (GPT-3 13B 256k, recompute=full/none*7: 5% under the
         * simulator without this). */
        double least = st[1].rec;
        for (int k = 2; k < nst; k++)
            least = st[k].rec < least ? st[k].rec : least;
        if (first->rec > least)
            bubble += (double)m * (first->rec - least) * (1.0 - 1.0 / v);
    }
    dp_cost dp = dp_reduce_chunked(ctx, pg, &dpg, first->params, lay_params, pre_params,
                                   chunks.n > 1 ? (first->bwd_window - first->rec) / v : first->bwd_window,
                                   first->fwd_window,
                                   chunks.n > 1 ? &chunks : NULL);
    double eedge = 0; /* the experts' last bucket, reduced over their own ranks */
    if (first->eparams > 0 && edp > 1) {
        /* After the dense gradients on the same channel. */
        wf_plan ep_plan = *pg;
        ep_plan.dp = edp;
        double win = first->bwd_window > dp.total ? first->bwd_window - dp.total : 0;
        dp_cost de = dp_reduce(ctx, &ep_plan, &edpg, first->eparams, lay_eparams, 0, win, first->fwd_window);
        dp.total += de.total;
        dp.exposed += de.exposed;
        dp.slow += de.slow;
        eedge = de.edge;
    }
    dp.slow += z3slow * (double)m;
    /* Uneven stages: a later stage ends its last backward earlier, by the
     * last micro-batch's backward on the stages before it, but may hold
     * more gradients to reduce and more parameters to step than the first
     * (a first stage of one layer and the embedding): the stage whose
     * reduction and step end last ends the iteration. */
    /* The tied embedding's gradient is all-reduced between the first and
     * the last stage (Megatron's embedding group), after their reductions. */
    double emb_sync = 0;
    if (p->pp > 1 && shared > 0) {
        /* The first and the last stage: pp - 1 pipeline strides apart. */
        wf_group ends = wf_group_place(c, 2, ax[WF_AXIS_PP].stride * (p->pp - 1));
        double gb = wf_cost_grad_elem_bytes(ctx);
        emb_sync = wf_coll_time(c, WF_COLL_ALLREDUCE, &ends, shared * gb);
    }
    int dp_stage = 0;
    if (uneven && pg->dp > 1 && first->eparams == 0 && p->zero < 3) {
        double lag = 0, best = dp.exposed + dp.slow + step_time(ctx, pg, first->params) + emb_sync;
        for (int k = 1; k < nst; k++) {
            lag += st[k - 1].bwd_window + 0.5 * ppc; /* its backward and the send of its gradient */
            dp_cost d = dp_reduce(ctx, pg, &dpg, st[k].params, lay_params, 0, st[k].bwd_window, st[k].fwd_window);
            double val = d.exposed + d.slow + step_time(ctx, pg, st[k].params) - lag + (k == nst - 1 ? emb_sync : 0);
            if (val > best) {
                best = val;
                dp_stage = k;
                dp = d;
                dp.exposed = d.exposed > lag ? d.exposed - lag : 0;
            }
        }
        if (dp_stage > 0 && dp_stage < nst - 1)
            emb_sync = 0; /* a middle stage ends the iteration: no embedding group there */
    }
    if (p->zero == 3 && pg->dp > 1) {
        /* Nothing runs before the iteration's first gather: it shows. */
        dp.exposed += 0.5 * first->zc_total;
        /* The channel carries every gather and the reduce-scatter: when that
         * is more than the stream's work, the difference shows. */
        double busy = (double)m * (stage_total(first) - first->zc);
        double channel = (double)m * first->zc_total + dp.total;
        double shown = (double)m * first->zc + dp.exposed;
        if (channel - busy > shown)
            dp.exposed += channel - busy - shown;
        /* And when the channel is the bottleneck it runs without a break
         * (each gather issued as the one before it ends): the iteration is
         * the channel's work plus the last bucket's reduction, which only
         * the end of the backward lets start. The exposed parts above, each
         * charged against its own window, count the same wait twice there
         * (the backward's window hides the gathers and the reduce-scatter
         * alike). With a pipeline the stages' waits for each other enter
         * (the bubble, played apart), and without overlap nothing hides:
         * there the sum stands. */
        double upper = channel - busy + dp.edge;
        /* But the channel does break: the gradients' reductions start only
         * with the last backward, which waits for its own gather, the
         * channel's last (every gather of the iteration before it). So the
         * iteration is no shorter than the gathers, the last backward and its
         * last bucket's reduction (a mixture of experts' expert shards,
         * gathered over their expert-data-parallel ranks, make this the
         * longer of the two). */
        double lower = p->pp == 1 && p->overlap ? zero3_replay(first, m, p->pipe == WF_PIPE_GPIPE, busy) + (dp.edge > eedge ? dp.edge : eedge) - busy
                                                 : 0;
        if (upper < lower)
            upper = lower;
        if (p->pp == 1 && p->overlap && channel > busy && shown > upper) {
            double cut = shown - upper, from_dp = cut < dp.exposed ? cut : dp.exposed;
            dp.exposed -= from_dp;
            cut -= from_dp;
            if (cut > 0)
                first->zc = first->zc > cut / (double)m ? first->zc - cut / (double)m : 0;
            shown = upper;
        }
        if (shown < lower)
            dp.exposed += lower - shown;
    }
    /* Replicated weights of split ops (layer norms under sequence
     * parallelism) hold partial gradients: one all-reduce over the model-
     * parallel axis after backward (Megatron's finalize_model_grads), on the
     * stage that ends the iteration. */
    double mp_sync = 0;
    if (p->tp > 1) {
        double n = Lk[0] * L->sec_mp_grad[WF_COST_SEC_LAYER] + L->sec_mp_grad[WF_COST_SEC_PRE] +
                   (nst == 1 ? L->sec_mp_grad[WF_COST_SEC_POST] : 0);
        if (n > 0) {
            wf_group tpg = wf_group_place(c, ax[WF_AXIS_TP].size, ax[WF_AXIS_TP].stride);
            mp_sync = wf_coll_time(c, WF_COLL_ALLREDUCE, &tpg, n * wf_cost_grad_elem_bytes(ctx));
        }
        for (int j = 0; j < L->nsub; j++) {
            double ns = Lk[0] * L->sec_sub_grad[j][WF_COST_SEC_LAYER] + L->sec_sub_grad[j][WF_COST_SEC_PRE] +
                        (nst == 1 ? L->sec_sub_grad[j][WF_COST_SEC_POST] : 0);
            if (ns > 0) {
                wf_group sg = wf_group_place(c, L->sub[j].size, L->sub[j].stride);
                mp_sync += wf_coll_time(c, WF_COLL_ALLREDUCE, &sg, ns * wf_cost_grad_elem_bytes(ctx));
            }
        }
    }
    const stage_cost *big = first->params + first->eparams > last->params + last->eparams ? first : last;
    if (uneven && dp_stage > 0) /* the stage whose reduction and step end last (above) */
        big = &st[dp_stage];
    double opt_params = big->params, opt_eparams = big->eparams;
    if (p->zero >= 1) {
        opt_params /= (double)pg->dp;
        opt_eparams /= edp >= 1 ? (double)edp : 1.0;
    }
    opt_params += opt_eparams;
    if (p->pp > 1 && dear_steps(ctx, pg)) {
        /* DeAR steps each group just before its layers' first forward (a
         * forward pre-hook), which on a pipeline stage waits for the first
         * micro-batch's activation: the first micro-batch's way through the
         * fill carries every stage's steps, one of which `optimizer` counts. */
        double steps = 0;
        for (int k = 0; k < nst; k++)
            steps += cnt[k] * step_time(ctx, pg, st[k].params + st[k].eparams);
        double counted = step_time(ctx, pg, big->params + big->eparams);
        if (steps > counted)
            bubble += steps - counted;
    }
    double buffers = 0;
    if (p->tp > 1)
        buffers += S[WF_COST_SEC_LAYER].input_bytes * bb / (double)p->cp; /* all-gather / all-reduce buffer */
    if (wf_cost_zero3_prefetch(ctx, p))
        buffers += 2.0 * lay_params * ctx->elem_bytes; /* gathered weights, prefetched */
    buffers += wf_cost_buffer_bytes(ctx, pg, p->mbs);
    finish(ctx, pg, batch, m, st, nst, crit, bubble, dp, emb_sync, opt_params, buffers, out);
    add_mp_sync(ctx, batch, mp_sync, out);
    return WF_OK;
}

/* The interlaced pipeline (interlace=1, docs/planner.md): the layers split
 * evenly over pp stages of one chunk, 1F1B; the embedding (pre) and the
 * head with the loss (post) tensor-parallel over the tp x pp ranks of a
 * pipeline (seg: their sections under Megatron's layouts at tp x pp, with
 * their collectives on that group), run by every device between the
 * stages' steps. The time is the interlaced orders played with each task's
 * time (wf_plan_interlace_play: a segment waits for every device), then the
 * data-parallel reduction of a device's gradients (its layers and its
 * 1/(tp pp) of the embedding and the head, the tied weight once: no
 * embedding group), the optimizer step and the model-parallel reduction,
 * as for a transformer plan. Every device holds the same parameters; stage
 * 0 makes its last gradients (its layers' and the embedding's) last, so it
 * ends the iteration. */
static wf_status estimate_interlaced(wf_cost_ctx *ctx, const wf_plan *p, int64_t batch, const wf_cost_layout *L,
                                     const wf_cost_sect_time *sect, const wf_cost_sect_time *seg,
                                     const double seg_params[2], double seg_shared, wf_estimate *out)
{
    const wf_cluster *c = &ctx->cluster;
    const wf_cost_sect_time *lay = &sect[WF_COST_SEC_LAYER], *pre = &seg[WF_COST_SEC_PRE],
                            *post = &seg[WF_COST_SEC_POST];
    const int64_t m = batch / ((int64_t)p->mbs * p->dp);
    const int P = p->pp;
    const double bb = (double)p->mbs, Ls = (double)ctx->model.layers / (double)P;
    const wf_cost_section *S = ctx->sec;
    const double lay_params = L->sec_params[WF_COST_SEC_LAYER];
    if (P > WF_PLAN_RC_STAGES)
        return wf_errorf(WF_INVAL, "interlace=1: pp=%d, at most %d stages", P, WF_PLAN_RC_STAGES);
    if (m > (1 << 20))
        return wf_errorf(WF_INVAL, "interlace=1: %lld micro-batches, at most %d", (long long)m, 1 << 20);
    const double send = wf_cost_p2p_time(ctx, p, S[WF_COST_SEC_LAYER].input_bytes * bb);
    stage_cost st[WF_PLAN_RC_STAGES];
    double fs[WF_PLAN_RC_STAGES], bs[WF_PLAN_RC_STAGES];
    memset(st, 0, sizeof st[0] * (size_t)P);
    const double ef = pre->fwd + pre->tp_fwd, eb = pre->bwd + pre->slow + pre->tp_bwd;
    const double hd = post->fwd + post->bwd + post->slow + post->tp_fwd + post->tp_bwd;
    const double logits_ws = bb * ctx->logits_per_sample / ((double)p->tp * P) * ctx->var.loss_ws;
    for (int k = 0; k < P; k++) {
        add_section(&st[k], lay, Ls);
        /* A stage sends its activation on (not the last) and its gradient
         * back (not the first): the segments carry the rest. */
        st[k].ppc = (k < P - 1 ? send : 0) + (k > 0 ? send : 0);
        fs[k] = Ls * (lay->fwd + lay->tp_fwd) + (k < P - 1 ? send : 0);
        bs[k] = Ls * (lay->bwd + lay->slow + lay->rec + lay->tp_bwd + lay->tp_rec) + (k > 0 ? send : 0);
        add_section(&st[k], pre, 1);
        add_section(&st[k], post, 1);
        /* The windows the data-parallel halves hide behind: the last
         * backward and the embedding's backwards after it (its gradients,
         * made last, are the edge), the embedding's forwards and the first
         * forward (the gathers of the head's weights hide until the first
         * head, later still). */
        st[k].bwd_window = bs[k] + (double)m * eb;
        st[k].fwd_window = (double)m * ef + fs[k];
        st[k].params = Ls * lay_params + seg_params[0] + seg_params[1] - seg_shared;
        st[k].block_params = Ls * lay_params;
        st[k].layer_params = lay_params;
        /* Activations: the stage's layers for the micro-batches 1F1B keeps
         * in flight on it; the embedding's for every micro-batch (all its
         * forwards open the iteration, all its backwards close it), and on
         * stage 0 the embedding's outputs not yet taken by its first
         * forwards (m less those 1F1B has in flight at the end of the fill);
         * the head's live inside its segment, with the loss's workspace. */
        double inflight = wf_cost_inflight_stage(p, m, k);
        st[k].act = inflight * Ls * lay->act_bytes + (double)m * pre->act_bytes;
        if (k == 0 && (double)m > inflight)
            st[k].act += ((double)m - inflight) * bb * S[WF_COST_SEC_LAYER].input_bytes / L->input_div;
        double ht = post->act_bytes + post->transient_bytes + logits_ws;
        st[k].transient = lay->transient_bytes > ht ? lay->transient_bytes : ht;
        if (ctx->var.workspace)
            st[k].transient += runtime_buffers(sect, 0, 0, 0);
    }
    double span = 0;
    wf_status pst = wf_plan_interlace_play(P, (int)m, fs, bs, ef, hd, eb, NULL, &span);
    if (pst != WF_OK)
        return pst;
    int crit = 0;
    for (int k = 1; k < P; k++)
        if (stage_total(&st[k]) > stage_total(&st[crit]))
            crit = k;
    double bubble = span - (double)m * stage_total(&st[crit]);
    if (bubble < 0)
        bubble = 0;

    wf_plan pgv = *p;
    pgv.dp = p->dp * p->cp;
    pgv.cp = 1;
    const wf_plan *pg = &pgv;
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(p->tp, p->cp, p->dp, p->pp, ax);
    const wf_axis_ranks dpa = wf_rank_axes_join(ax, WF_AXIS_CP, WF_AXIS_DP);
    wf_group dpg = wf_group_place(c, dpa.size, dpa.stride);
    /* Stage 0: its layers' gradients and the embedding's are made last. */
    dp_cost dp = dp_reduce(ctx, pg, &dpg, st[0].params, lay_params, seg_params[0], st[0].bwd_window,
                           st[0].fwd_window);
    double mp_sync = 0;
    if (p->tp > 1) {
        double n = Ls * L->sec_mp_grad[WF_COST_SEC_LAYER];
        if (n > 0) {
            wf_group tpg = wf_group_place(c, ax[WF_AXIS_TP].size, ax[WF_AXIS_TP].stride);
            mp_sync = wf_coll_time(c, WF_COLL_ALLREDUCE, &tpg, n * wf_cost_grad_elem_bytes(ctx));
        }
    }
    double opt_params = st[0].params;
    if (p->zero >= 1)
        opt_params /= (double)pg->dp;
    double buffers = 0;
    if (p->tp > 1)
        buffers += S[WF_COST_SEC_LAYER].input_bytes * bb; /* all-gather / all-reduce buffer */
    buffers += wf_cost_buffer_bytes(ctx, pg, p->mbs);
    finish(ctx, pg, batch, m, st, P, crit, bubble, dp, 0, opt_params, buffers, out);
    add_mp_sync(ctx, batch, mp_sync, out);
    return WF_OK;
}

/* DeAR's groups over a generic model's stage (ops [lo, hi)), played as its
 * recurrence (ALGORITHMS.md 4) rather than against one window: a CNN's
 * parameters sit at its end (vgg16's first classifier layer holds 74% of
 * them) and its compute at its start, so a group's all-gather hides only
 * behind the forward of the groups before it, and its reduce-scatter starts
 * only once the backward has made it. Groups are whole ops of at least the
 * threshold, closed in backward order (sched's DeAR grouping); each op's
 * gradient is ready when its backward (after its recomputation) ends in the
 * last micro-batch; the gathers open the first micro-batch's forward, each
 * waited for before its group's first op: all issued at once under Megatron-
 * Core's distributed optimizer (which steps whole after the backward), one
 * group ahead under DeAR's own schedule, which steps each group after its
 * gate, beside the next gather. Returns the exposed reduce-scatter and
 * all-gather time in *rs_shown and *ag_shown, and their totals. */
static wf_status dear_generic(const wf_cost_ctx *ctx, const wf_plan *p, const wf_group *g, const wf_cost_layout *L,
                              int lo, int hi, wf_recompute rc, double start, double *rs_total, double *ag_total,
                              double *rs_shown, double *ag_shown)
{
    const wf_cluster *c = &ctx->cluster;
    const double gb = wf_cost_grad_elem_bytes(ctx), bb = (double)p->mbs;
    const double wb = p->zero >= 1 ? ctx->elem_bytes : gb; /* what the all-gather carries per element */
    const double thr = bucket_bytes(p, 0);
    const int steps = dear_steps(ctx, p);
    const int n = hi > lo ? hi - lo : 0;
    *rs_total = *ag_total = *rs_shown = *ag_shown = 0;
    int *gfirst = malloc(sizeof(int) * (size_t)(n + 1));
    double *gelems = malloc(sizeof(double) * (size_t)(2 * n + 1));
    if (!gfirst || !gelems) {
        free(gfirst);
        free(gelems);
        return wf_errorf(WF_NOMEM, "out of memory estimating a plan");
    }
    double *ag_end = gelems + n;
    /* Backward: groups closed in reverse op order (gfirst: a group's lowest
     * op); the reduce-scatters one after another, each once its group is
     * ready. */
    double t = 0, rs_end = 0, ready = 0;
    int ng = 0, open = 0;
    for (int i = hi - 1; i >= lo; i--) {
        double w = L ? L->params[i] : ctx->ops[i].owned_params;
        if (open && w > 0 && gelems[ng - 1] * gb >= thr) {
            double rs = wf_coll_time(c, WF_COLL_REDUCE_SCATTER, g, gelems[ng - 1] * gb);
            rs_end = (rs_end > ready ? rs_end : ready) + rs;
            *rs_total += rs;
            open = 0;
        }
        wf_cost_op_time ot = wf_cost_op_time_of(ctx, &ctx->ops[i], bb, L ? L->div[i] : 1.0, L ? L->pdiv[i] : 1.0);
        t += ot.bwd_in_s + ot.bwd_w_s + (rc == WF_RECOMPUTE_FULL ? ot.fwd_s : 0);
        if (w > 0) {
            if (!open) {
                gelems[ng++] = 0;
                open = 1;
            }
            gelems[ng - 1] += w;
            gfirst[ng - 1] = i;
            ready = t;
        }
    }
    if (open) {
        double rs = wf_coll_time(c, WF_COLL_REDUCE_SCATTER, g, gelems[ng - 1] * gb);
        rs_end = (rs_end > ready ? rs_end : ready) + rs;
        *rs_total += rs;
    }
    *rs_shown = rs_end > t ? rs_end - t : 0;
    /* Forward of the first micro-batch: group k (forward order) is group
     * ng-1-k of the backward's. */
    double chan = 0;
    for (int k = 0; k < ng; k++) {
        double ag = wf_coll_time(c, WF_COLL_ALLGATHER, g, gelems[ng - 1 - k] * wb);
        *ag_total += ag;
        chan += ag;
        ag_end[k] = steps ? (k == 0 ? ag : 0) : chan;
    }
    /* The stage's first forward starts at `start` (its wait for the fill),
     * which the gathers run beside. */
    double ft = start, busy = start;
    int k = 0;
    for (int i = lo; i < hi; i++) {
        if (k < ng && gfirst[ng - 1 - k] == i) {
            ft = ft > ag_end[k] ? ft : ag_end[k];
            if (steps) {
                double u = step_time(ctx, p, gelems[ng - 1 - k]);
                if (k + 1 < ng)
                    ag_end[k + 1] = ft + wf_coll_time(c, WF_COLL_ALLGATHER, g, gelems[ng - 2 - k] * wb);
                ft += u;
                busy += u;
            }
            k++;
        }
        double f = wf_cost_op_time_of(ctx, &ctx->ops[i], bb, L ? L->div[i] : 1.0, L ? L->pdiv[i] : 1.0).fwd_s;
        ft += f;
        busy += f;
    }
    *ag_shown = ft > busy ? ft - busy : 0;
    free(gfirst);
    free(gelems);
    return WF_OK;
}

/* Other models: stages of uneven ops, played pass by pass. L (may be NULL:
 * the estimate's layouts, data parallelism) and cut (may be NULL: the
 * estimate's balanced cut) come from an op-level plan. */
static wf_status estimate_generic(wf_cost_ctx *ctx, const wf_plan *p, int64_t batch, const wf_cost_layout *L,
                                  const int *cut, wf_estimate *out)
{
    const wf_cluster *c = &ctx->cluster;
    if (p->pp > ctx->nops || p->pp > WF_COST_MAX_STAGES)
        return wf_errorf(WF_INVAL, "pp=%d: model '%s' has only %d ops to split into pipeline stages",
                         p->pp, ctx->model.name, ctx->nops < WF_COST_MAX_STAGES ? ctx->nops : WF_COST_MAX_STAGES);
    wf_stage_split *own = NULL;
    const wf_stage_split *sp;
    if (L || cut || p->coshard > 1) {
        own = malloc(sizeof *own);
        unsigned char *sel = wf_plan_coshard_per_op(p) ? malloc((size_t)ctx->nops + 1) : NULL;
        if (!own || (wf_plan_coshard_per_op(p) && !sel)) {
            free(own);
            free(sel);
            return wf_errorf(WF_NOMEM, "out of memory estimating a plan");
        }
        /* Per-op co-shard: the ops its pattern matches run as pieces. */
        wf_status cs = sel ? wf_cost_coshard_sel(ctx, p, sel) : WF_OK;
        if (cs != WF_OK) {
            free(own);
            free(sel);
            return cs;
        }
        wf_cost_split_stages_sel(ctx, p->mbs, p->pp, p->recompute, L, cut, p->coshard, sel, own);
        free(sel);
        sp = own;
    } else {
        wf_cost_entry *e = lookup(ctx, p->mbs, 1, 0, p->pp, p->recompute);
        if (!e)
            return wf_errorf(WF_NOMEM, "out of memory estimating a plan");
        sp = e->split;
    }
    const int tp = L ? L->tp : 1;
    const int64_t m = batch / ((int64_t)p->mbs * p->dp);
    const double bb = (double)p->mbs;
    int nst = sp->nstages;
    stage_cost *st = calloc((size_t)nst, sizeof *st);
    double *sends = calloc((size_t)nst * 5 + 1, sizeof *sends);
    if (!st || !sends) {
        free(st);
        free(sends);
        free(own);
        return wf_errorf(WF_NOMEM, "out of memory estimating a plan");
    }
    double inflight = wf_cost_inflight(p, m);
    /* Sends carry each rank's part of the boundary (the layouts divide it). */
    wf_plan p1 = *p;
    p1.tp = 1;
    p1.sp = 0;
    /* Per stage and micro-batch: fwd_part = forward + activation send,
     * bwd_part = recomputation + backward + gradient send. */
    double *fwd_part = sends + nst, *bwd_part = sends + 2 * nst, *ends = sends + 3 * nst, *z3slow = sends + 4 * nst;
    for (int k = 0; k + 1 < nst; k++)
        sends[k] = wf_cost_p2p_time(ctx, &p1, sp->boundary_bytes[k] * bb / sp->boundary_div[k]);
    for (int k = 0; k < nst; k++) {
        st[k].comp = sp->fwd[k] + sp->bwd[k];
        st[k].rec = sp->rec[k];
        st[k].tpc = sp->tpf[k] + sp->tpb[k];
        st[k].bwd_window = sp->bwd[k] + sp->rec[k] + sp->tpb[k];
        st[k].fwd_window = sp->fwd[k] + sp->tpf[k];
        st[k].params = sp->params[k];
        st[k].block_params = sp->params[k];
        st[k].layer_params = sp->params[k];
        /* Stage k sends its output activation forward and its input
         * gradient backward, once each per micro-batch; a receive is the
         * neighbour's send, so it costs nothing more than the wait. */
        st[k].ppc = (k > 0 ? sends[k - 1] : 0) + sends[k];
        /* 1F1B: stage k keeps min(pp - k, m) micro-batches; GPipe all. */
        double n = p->pipe == WF_PIPE_GPIPE ? (double)m
                                             : ((double)(nst - k) < (double)m ? (double)(nst - k) : (double)m);
        if (k == 0)
            n = inflight;
        st[k].act = n * sp->act[k];
        st[k].transient = sp->transient[k];
    }
    if (nst > 0)
        st[nst - 1].transient += bb * ctx->logits_per_sample * ctx->var.loss_ws;
    /* Recycling: the first stage holds the recycled outputs of each
     * micro-batch from its first forward without gradient to its forward
     * that learns: all m under NF1B, one at a time otherwise. */
    const int n_rec = (int)ctx->model.recycle;
    const double rec_bytes = wf_cost_recycle_bytes(&ctx->model) * bb;
    if (n_rec > 0 && nst > 0)
        st[0].act += (p->nf1b ? (double)m : 1.0) * rec_bytes;
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(tp, 1, p->dp, p->pp, ax);
    wf_group dpg = wf_group_place(c, ax[WF_AXIS_DP].size, ax[WF_AXIS_DP].stride),
             mpg = wf_group_place(c, ax[WF_AXIS_TP].size, ax[WF_AXIS_TP].stride);
    for (int k = 0; k < nst; k++) {
        /* The gathers, prefetched on the data-parallel channel, also hide
         * behind the pass's pipeline sends (another channel), as the
         * simulator plays them. */
        stage_cost zs = st[k];
        zs.fwd_window += sends[k];
        zs.bwd_window += k > 0 ? sends[k - 1] : 0;
        add_zero3(ctx, p, &dpg, NULL, &zs, &z3slow[k]);
        st[k].zc = zs.zc;
        st[k].zc_total = zs.zc_total;
        /* ZeRO-3 gathers before the forward and before the backward. */
        fwd_part[k] = sp->fwd[k] + sp->tpf[k] + sends[k] + 0.5 * st[k].zc;
        bwd_part[k] = sp->bwd[k] + sp->tpb[k] + sp->rec[k] + (k > 0 ? sends[k - 1] : 0) + 0.5 * st[k].zc;
    }

    /* The pipeline, played pass by pass (generic.c): when each stage ends. A
     * long pipeline (more than PIPE_PASSES passes) is played with fewer
     * micro-batches and the rest added at the steady-state rate: the slowest
     * stage's time per micro-batch (1F1B), or the slowest forward plus the
     * slowest backward (GPipe: a forward and a backward flow shop). */
    const double mm = (double)m;
    int64_t m_play = m;
    if (2 * (int64_t)nst * m > PIPE_PASSES) {
        m_play = PIPE_PASSES / 2 / nst;
        if (m_play < 4 * (int64_t)nst)
            m_play = 4 * (int64_t)nst;
        if (m_play > m)
            m_play = m;
    }
    size_t need = 2 * (size_t)nst * (size_t)m_play + 2 * (size_t)nst;
    wf_status status = WF_OK;
    if (ctx->pipe_buf_n < need) {
        double *nb = realloc(ctx->pipe_buf, need * sizeof *nb);
        if (!nb) {
            status = wf_errorf(WF_NOMEM, "out of memory estimating a plan");
            goto done;
        }
        ctx->pipe_buf = nb;
        ctx->pipe_buf_n = need;
    }
    int gpipe = p->pipe == WF_PIPE_GPIPE;
    double ng_sum = 0, ng_max = 0; /* a forward without gradient: stage sum and slowest */
    const double rsend = n_rec > 0 && nst > 1 ? wf_cost_p2p_time(ctx, &p1, rec_bytes) : 0;
    if (n_rec > 0) {
        /* Forwards without gradient (nf1b.c): the forward and its send, no
         * recomputation, nothing kept; the recycled outputs return from the
         * last stage to the first. */
        double *ng = malloc(sizeof *ng * (size_t)nst);
        if (!ng) {
            status = wf_errorf(WF_NOMEM, "out of memory estimating a plan");
            goto done;
        }
        for (int k = 0; k < nst; k++) {
            ng[k] = fwd_part[k] - 0.5 * st[k].zc;
            ng_sum += ng[k];
            ng_max = ng[k] > ng_max ? ng[k] : ng_max;
        }
        int r = wf_cost_pipeline_nf_ends(fwd_part, bwd_part, ng, rsend, nst, (int)m_play, gpipe, n_rec, p->nf1b,
                                         ends);
        free(ng);
        if (r != 0) {
            status = r == -2 ? wf_errorf(WF_NOMEM, "out of memory estimating a plan")
                             : wf_errorf(WF_INTERNAL, "pipeline of %d stages, %lld micro-batches, %d recycles: the "
                                                      "schedule cannot run", nst, (long long)m_play, n_rec);
            goto done;
        }
    } else if (wf_cost_pipeline_ends(fwd_part, bwd_part, nst, (int)m_play, gpipe, ctx->pipe_buf, ends) != 0) {
        status = wf_errorf(WF_INTERNAL, "pipeline of %d stages, %lld micro-batches: the schedule cannot run", nst,
                           (long long)m_play);
        goto done;
    }
    if (m_play < m) {
        double fmax = 0, bmax = 0, smax = 0;
        for (int k = 0; k < nst; k++) {
            fmax = fwd_part[k] > fmax ? fwd_part[k] : fmax;
            bmax = bwd_part[k] > bmax ? bwd_part[k] : bmax;
            smax = fwd_part[k] + bwd_part[k] > smax ? fwd_part[k] + bwd_part[k] : smax;
        }
        for (int k = 0; k < nst; k++)
            ends[k] += (double)(m - m_play) * ((gpipe ? fmax + bmax : smax) + (double)n_rec * ng_max);
    }

    /* Each stage ends its last backward at ends[k]; then its gradients are
     * reduced (the part not hidden behind that backward is exposed) and it
     * steps its optimizer. The stage that ends last sets the iteration and
     * the breakdown (its idle time is the bubble). */
    int crit = 0;
    double end_max = -1;
    dp_cost dp = {0, 0, 0, 0};
    double opt_params = 0;
    const double opt_s_per_param = wf_cost_optimizer_bytes_per_param(ctx) / wf_device_opt_bps(&c->dev);
    double fill = 0; /* when stage k's first forward can start: its wait for the fill */
    for (int k = 0; k < nst; k++) {
        /* ByteScheduler's edge: the stage's first op with weights. */
        double lead_params = 0;
        for (int i = sp->first_op[k]; p->comm.kind == WF_COMM_BYTESCHEDULER && i < sp->first_op[k + 1]; i++) {
            lead_params = L ? L->params[i] : ctx->ops[i].owned_params;
            if (lead_params > 0)
                break;
        }
        dp_cost d = dp_reduce(ctx, p, &dpg, st[k].params, st[k].params / 4.0, lead_params, st[k].bwd_window,
                              st[k].fwd_window);
        if (p->comm.kind == WF_COMM_DEAR && p->zero < 3 && p->overlap && p->dp > 1 && st[k].params > 0) {
            double rs, ag, rs_shown, ag_shown;
            status = dear_generic(ctx, p, &dpg, L, sp->first_op[k], sp->first_op[k + 1], p->recompute, fill, &rs, &ag,
                                  &rs_shown, &ag_shown);
            if (status != WF_OK)
                goto done;
            d.total = rs + ag;
            d.exposed = rs_shown + ag_shown;
            d.slow = 0;
        }
        if (sp->mp_params[k] > 0) {
            /* Weights replicated over the model-parallel axis under batch-
             * split ops: reduced over it as data parallelism reduces, after
             * the dp group's on the same channel. */
            wf_plan mp = *p;
            mp.dp = tp;
            mp.zero = 0;
            if (mp.comm.kind == WF_COMM_DEAR) /* all-reduced in buckets, as DDP (the simulator's) */
                mp.comm.kind = WF_COMM_DDP;
            double win = st[k].bwd_window > d.total ? st[k].bwd_window - d.total : 0;
            dp_cost dm = dp_reduce(ctx, &mp, &mpg, sp->mp_params[k], sp->mp_params[k] / 4.0, 0, win, st[k].fwd_window);
            d.total += dm.total;
            d.exposed += dm.exposed;
            d.slow += dm.slow;
        }
        for (int j = 0; L && j < L->nsub; j++) {
            if (!(sp->sub_params[j][k] > 0))
                continue;
            /* Partial over one sub-axis of a two-axis model-parallel mesh:
             * reduced over that sub-axis's group, after the rest. */
            wf_plan mp = *p;
            mp.dp = (int)L->sub[j].size;
            mp.zero = 0;
            if (mp.comm.kind == WF_COMM_DEAR)
                mp.comm.kind = WF_COMM_DDP;
            wf_group sg = wf_group_place(c, L->sub[j].size, L->sub[j].stride);
            double win = st[k].bwd_window > d.total ? st[k].bwd_window - d.total : 0;
            dp_cost dm = dp_reduce(ctx, &mp, &sg, sp->sub_params[j][k], sp->sub_params[j][k] / 4.0, 0, win,
                                   st[k].fwd_window);
            d.total += dm.total;
            d.exposed += dm.exposed;
            d.slow += dm.slow;
        }
        fill += fwd_part[k];
        d.slow += z3slow[k] * mm;
        /* Nothing runs before the first stage's first ZeRO-3 gather: it
         * shows (later stages wait for their input meanwhile). */
        if (k == 0 && p->zero == 3 && p->dp > 1)
            d.exposed += 0.5 * st[k].zc_total;
        double op = p->zero >= 1 ? st[k].params / (double)p->dp : st[k].params;
        double end = ends[k] + d.slow + d.exposed + op * opt_s_per_param;
        if (end > end_max) {
            end_max = end;
            crit = k;
            dp = d;
            opt_params = op;
        }
    }
    /* The forwards without gradient count as compute, their sends as
     * pipeline communication (the recycled outputs' on the last stage). */
    for (int k = 0; n_rec > 0 && k < nst; k++) {
        st[k].comp += (double)n_rec * sp->fwd[k];
        st[k].tpc += (double)n_rec * sp->tpf[k];
        st[k].ppc += (double)n_rec * (sends[k] + (k == nst - 1 ? rsend : 0));
    }
    double bubble = ends[crit] - mm * stage_total(&st[crit]);
    if (bubble < 0)
        bubble = 0;
    /* ZeRO-3 holds gathered the op being run and the next one with weights,
     * prefetched (FSDP's per-module units), not the whole stage. */
    double pair = 0, prev = 0;
    for (int i = 0; i < ctx->nops; i++) {
        double w = ctx->ops[i].owned_params;
        if (w <= 0)
            continue;
        pair = prev + w > pair ? prev + w : pair;
        prev = w;
    }
    double buffers = wf_cost_zero3_prefetch(ctx, p) ? pair * ctx->elem_bytes : 0;
    buffers += wf_cost_buffer_bytes(ctx, p, p->mbs);
    finish(ctx, p, batch, m, st, nst, crit, bubble, dp, 0, opt_params, buffers, out);
done:
    free(st);
    free(sends);
    free(own);
    return status;
}

void wf_cost_plan_as_run(wf_cost_ctx *ctx, const wf_plan *p, wf_plan *out)
{
    wf_cost_ctx_use(ctx, p);
    *out = *p;
    out->zero = ctx->var.zero;
    out->overlap = ctx->var.dp_overlap;
    if (out->cp < 1)
        out->cp = 1;
    /* Megatron-Core's distributed optimizer with overlap_param_gather is
     * DeAR's schedule with ZeRO: gradients reduce-scattered bucket by bucket
     * in backward, each bucket's parameters all-gathered before its layers'
     * next forward (the simulator plays it as such; the estimate's ZeRO
     * branch hides the gather behind the forward). */
    if (ctx->var.ag_overlap && (out->zero == 1 || out->zero == 2) && out->comm.kind == WF_COMM_DDP)
        out->comm.kind = WF_COMM_DEAR;
}

wf_status wf_estimate_plan(wf_cost_ctx *ctx, const wf_plan *p, int64_t batch, wf_estimate *out)
{
    wf_status st = wf_plan_validate(p, &ctx->model, &ctx->cluster, batch);
    if (st != WF_OK)
        return st;
    wf_plan q;
    wf_cost_plan_as_run(ctx, p, &q);
    if (!ctx->transformer && q.dap > 1) {
        /* DAP: the group is the layouts' model-parallel axis (dap.c), the
         * descriptors of the last four group sizes kept in the context
         * (slot by the size's low bits: 2, 4, 8, 16 each their own). */
        int slot = 0;
        while (slot < 3 && (q.dap >> (slot + 1)) > 1)
            slot++;
        if (ctx->dap_k[slot] != q.dap) {
            wf_cost_layout_free(&ctx->dap_lay[slot]);
            ctx->dap_k[slot] = 0;
            if ((st = wf_cost_layout_dap(ctx, q.dap, &ctx->dap_lay[slot])) != WF_OK)
                return st;
            ctx->dap_k[slot] = q.dap;
        }
        q.tp = q.dap;
        q.dap = 1;
        return estimate_generic(ctx, &q, batch, &ctx->dap_lay[slot], NULL, out);
    }
    if (!ctx->transformer)
        return estimate_generic(ctx, &q, batch, NULL, NULL, out);
    if (q.interlace) {
        /* The segments' sections at tp x pp, copied before the stages'
         * lookup (the cache is direct-mapped, a lookup may evict another). */
        int all = q.tp * q.pp;
        wf_cost_entry *es = lookup(ctx, q.mbs, all, q.sp, 0, WF_RECOMPUTE_NONE);
        const wf_cost_layout *Ls = es ? megatron_layout(ctx, all, q.sp) : NULL;
        if (!Ls)
            return wf_errorf(WF_NOMEM, "out of memory estimating a plan");
        wf_cost_sect_time seg[WF_COST_SEC_COUNT];
        memcpy(seg, es->s, sizeof seg);
        double seg_params[2] = {Ls->sec_params[WF_COST_SEC_PRE], Ls->sec_params[WF_COST_SEC_POST]};
        double seg_shared = Ls->shared_params;
        wf_cost_entry *e = lookup(ctx, q.mbs, q.tp, q.sp, 0, q.recompute);
        const wf_cost_layout *L = e ? megatron_layout(ctx, q.tp, q.sp) : NULL;
        if (!L)
            return wf_errorf(WF_NOMEM, "out of memory estimating a plan");
        return estimate_interlaced(ctx, &q, batch, L, e->s, seg, seg_params, seg_shared, out);
    }
    wf_cost_entry *e = lookup(ctx, q.mbs, q.tp, q.sp, 0, q.recompute);
    const wf_cost_layout *L = e ? megatron_layout(ctx, q.tp, q.sp) : NULL;
    if (!L)
        return wf_errorf(WF_NOMEM, "out of memory estimating a plan");
    if (rc_uniform(ctx, &q))
        return estimate_transformer(ctx, &q, batch, L, e->s, NULL, out);
    /* Recomputation per stage: the layer under each kind (copied: the
     * cache is direct-mapped, a lookup may evict another). */
    wf_cost_sect_time sect[WF_COST_SEC_COUNT], lay[3];
    const wf_cost_sect_time *lay_rc[3];
    memcpy(sect, e->s, sizeof sect);
    for (int r = 0; r < 3; r++) {
        wf_cost_entry *er = lookup(ctx, q.mbs, q.tp, q.sp, 0, (wf_recompute)r);
        if (!er)
            return wf_errorf(WF_NOMEM, "out of memory estimating a plan");
        lay[r] = er->s[WF_COST_SEC_LAYER];
        lay_rc[r] = &lay[r];
    }
    return estimate_transformer(ctx, &q, batch, L, sect, lay_rc, out);
}

wf_status wf_estimate_layouts(wf_cost_ctx *ctx, const wf_plan *p, const wf_cost_layout *l, int64_t batch,
                              wf_estimate *out)
{
    if (l->nops != ctx->nops)
        return wf_errorf(WF_INVAL, "layouts describe %d ops, model '%s' has %d", l->nops, ctx->model.name,
                         ctx->nops);
    wf_plan r = *p;
    r.tp = l->tp;
    r.sp = l->sp;
    /* Models other than transformers have no whole-model tp: their model-
     * parallel axis is checked here, the rest as a plan without it. */
    wf_plan v = r;
    if (!ctx->transformer) {
        v.tp = 1;
        v.sp = 0;
        if (wf_plan_devices(&r) > wf_cluster_devices(&ctx->cluster))
            return wf_errorf(WF_INVAL, "layouts on %lld devices, cluster %s has %lld", (long long)wf_plan_devices(&r),
                             ctx->cluster.name, (long long)wf_cluster_devices(&ctx->cluster));
    }
    wf_status st = wf_plan_validate(&v, &ctx->model, &ctx->cluster, batch);
    if (st != WF_OK)
        return st;
    wf_plan q;
    wf_cost_plan_as_run(ctx, &r, &q);
    if (q.interlace)
        return wf_errorf(WF_INVAL, "interlace=1: an interlaced plan has no op-level form (its embedding and head "
                                   "span other devices than their stage's mesh); estimate it as a plan string");
    if (!ctx->transformer)
        return estimate_generic(ctx, &q, batch, l, l->cut, out);
    wf_cost_sect_time sect[WF_COST_SEC_COUNT];
    for (int s = 0; s < WF_COST_SEC_COUNT; s++)
        fill_section(ctx, s, q.mbs, l, q.recompute, &sect[s]);
    if (rc_uniform(ctx, &q))
        return estimate_transformer(ctx, &q, batch, l, sect, NULL, out);
    /* Recomputation per stage: the layer under each kind. */
    wf_cost_sect_time lay[3];
    const wf_cost_sect_time *lay_rc[3];
    for (int k = 0; k < 3; k++) {
        fill_section(ctx, WF_COST_SEC_LAYER, q.mbs, l, (wf_recompute)k, &lay[k]);
        lay_rc[k] = &lay[k];
    }
    return estimate_transformer(ctx, &q, batch, l, sect, lay_rc, out);
}

cJSON *wf_breakdown_to_json(const wf_breakdown *b)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddNumberToObject(j, "compute", b->compute);
    cJSON_AddNumberToObject(j, "recompute", b->recompute);
    cJSON_AddNumberToObject(j, "tp_comm", b->tp_comm);
    cJSON_AddNumberToObject(j, "pp_comm", b->pp_comm);
    cJSON_AddNumberToObject(j, "dp_comm", b->dp_comm);
    cJSON_AddNumberToObject(j, "bubble", b->bubble);
    cJSON_AddNumberToObject(j, "optimizer", b->optimizer);
    cJSON_AddNumberToObject(j, "exposed_comm", b->exposed_comm);
    cJSON_AddNumberToObject(j, "ep_comm", b->ep_comm);
    return j;
}

cJSON *wf_estimate_to_json(const wf_estimate *e)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddNumberToObject(j, "iteration_time_s", e->iteration_time_s);
    cJSON_AddNumberToObject(j, "samples_per_s", e->samples_per_s);
    cJSON_AddNumberToObject(j, "model_flops_per_iteration", e->model_flops_per_iteration);
    cJSON_AddNumberToObject(j, "tflops_per_device", e->tflops_per_device);
    cJSON_AddNumberToObject(j, "mfu", e->mfu);
    cJSON_AddNumberToObject(j, "memory_per_device_bytes", e->memory_per_device_bytes);
    cJSON_AddBoolToObject(j, "fits", e->fits);
    cJSON_AddNumberToObject(j, "devices", (double)e->devices);
    cJSON_AddNumberToObject(j, "micro_batches", (double)e->micro_batches);
    cJSON *b = wf_breakdown_to_json(&e->breakdown);
    if (b)
        cJSON_AddItemToObject(j, "breakdown", b);
    cJSON *mem = cJSON_AddObjectToObject(j, "memory");
    if (mem) {
        cJSON_AddNumberToObject(mem, "weights_bytes", e->mem_weights_bytes);
        cJSON_AddNumberToObject(mem, "layer_weights_bytes", e->mem_layer_weights_bytes);
        cJSON_AddNumberToObject(mem, "activation_bytes", e->mem_activation_bytes);
        cJSON_AddNumberToObject(mem, "buffer_bytes", e->mem_buffer_bytes);
    }
    return j;
}
