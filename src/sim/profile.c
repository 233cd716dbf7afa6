/* A model on a plan as simulation units (plan-impl.h). The numbers come
 * from the cost model itself through cost.h's records (wf_cost_op_times,
 * wf_cost_op_info_of, wf_cost_model_info_of: per-op times, sections,
 * tensor-parallel points, saved tensors, bytes per parameter, optimizer
 * traffic, pipeline messages, the stage cut), so the simulator and `weft
 * estimate` cost every op identically and differ only in how they compose
 * them; the graph IR gives the parameter tensors (one gradient each) and the
 * fusion candidates.
 *
 * - Transformers: one layer built at micro-batch 1, its ops sorted into the
 *   embedding ("pre"), the tied layer and the head ("post"), as the estimate
 *   does. Split ops divide FLOPs and activation traffic by t, their weights
 *   too; with sequence parallelism the replicated ops divide their
 *   activations as well. Megatron's tensor-parallel points become steps:
 *   after a row-parallel op an all-reduce (with sp a reduce-scatter) the
 *   stream waits for; before the column-parallel ops of a point, with sp, an
 *   all-gather; in backward the input gradient's all-reduce (sp: reduce-
 *   scatter) runs alongside the weight-gradient products, and with sp the
 *   input is re-gathered alongside the input-gradient products; the
 *   vocabulary-parallel loss adds three small all-reduces. Compute slowed by
 *   overlapped communication (the cluster's overlap_slowdown) is added to the
 *   overlapped compute step.
 * - Other models: one unit per forward op (no tensor parallelism), stages cut
 *   by time as the estimate cuts them.
 * Memory per unit follows Korthikanti et al. 2022 through the saved tensors,
 * with full or selective recomputation. */
#include "sim/plan-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Removes from op i's times what its fusions save: as a consumer, the read
 * of the intermediate and one launch in forward, the write of its gradient
 * and one launch in backward; as a producer, the read of that gradient.
 * `scale` is the micro-batch over the op's activation divisor. */
static void apply_fusions(const sim_model *sm, const unsigned char *fuse, const wf_cluster *c, int i,
                          double scale, double *tf, double *tin, double *tw)
{
    if (!fuse)
        return;
    double bw = c->dev.mem_bw_bps * c->dev.mem_eff, oh = c->dev.op_overhead_s;
    double sf = 0, sb = 0;
    for (int k = 0; k < sm->nfusions; k++) {
        const sim_fusion *f = &sm->fusions[k];
        if (!fuse[k] || (f->a != i && f->b != i))
            continue;
        double t = f->inter_bytes * scale / bw;
        if (f->b == i) {
            sf += t + oh;
            sb += t + oh;
        } else {
            sb += t;
        }
    }
    *tf = *tf > sf ? *tf - sf : 0;
    double take = *tin < sb ? *tin : sb;
    *tin -= take;
    sb -= take;
    *tw = *tw > sb ? *tw - sb : 0;
}

/* ---- step lists ------------------------------------------------------------------ */

typedef struct {
    sim_step *s;
    int n, cap;
    double comp; /* compute not yet emitted */
    uint8_t comp_cat;
    const char *comp_name;
} steps;

static void emit_bytes(steps *b, int kind, int cat, double dur, double bytes, const char *name)
{
    if (b->n >= b->cap)
        return; /* capacity is sized for the worst case; never reached */
    b->s[b->n++] = (sim_step){(uint8_t)kind, (uint8_t)cat, dur, bytes, name};
}

static void emit(steps *b, int kind, int cat, double dur, const char *name)
{
    emit_bytes(b, kind, cat, dur, 0, name);
}

static void flush(steps *b)
{
    if (b->comp > 0)
        emit(b, STEP_COMPUTE, b->comp_cat, b->comp, b->comp_name);
    b->comp = 0;
}

/* Folds a step list into stream time, exposed and hidden channel time
 * (what the coarse graph uses), playing it on an idle stream and channel. */
static void fold(const sim_step *s, int n, double *comp, double *exposed, double *hidden)
{
    double T = 0, C = 0, wait = 0, bg = 0, c = 0, comm = 0;
    for (int i = 0; i < n; i++) {
        switch (s[i].kind) {
        case STEP_COMPUTE:
            T = (T > wait ? T : wait) + s[i].dur_s;
            c += s[i].dur_s;
            break;
        case STEP_COLL:
        case STEP_COLL_BG: {
            double st = T > C ? T : C;
            C = st + s[i].dur_s;
            comm += s[i].dur_s;
            if (s[i].kind == STEP_COLL)
                wait = wait > C ? wait : C;
            else
                bg = bg > C ? bg : C;
            break;
        }
        case STEP_JOIN:
            wait = wait > bg ? wait : bg;
            break;
        }
    }
    double end = T > wait ? T : wait;
    end = end > bg ? end : bg;
    *comp += c;
    *exposed += end - c;
    *hidden += comm - (end - c);
}

static void fold_unit(sim_unit *u)
{
    u->fwd_comp = u->fwd_exposed = u->rec_comp = u->rec_exposed = 0;
    u->bwd_comp = u->bwd_exposed = u->bwd_hidden = 0;
    double hid = 0;
    fold(u->fwd, u->nfwd, &u->fwd_comp, &u->fwd_exposed, &hid);
    fold(u->rec, u->nrec, &u->rec_comp, &u->rec_exposed, &hid);
    /* Forward and recomputation wait for all their collectives: hid stays 0. */
    fold(u->bwd, u->nbwd, &u->bwd_comp, &u->bwd_exposed, &u->bwd_hidden);
}

/* ---- transformers ------------------------------------------------------------------- */

enum { SEC_PRE = WF_COST_SEC_PRE, SEC_LAYER = WF_COST_SEC_LAYER, SEC_POST = WF_COST_SEC_POST, SEC_COUNT = WF_COST_SEC_COUNT };

/* One forward op of the one-layer graph at micro-batch 1. */
typedef struct {
    int section, split, attn_core, is_g, fpoint, f_first, f_last;
    double tf, tin, tw;        /* at the plan's micro-batch and tp */
    double f_bytes, g_bytes;   /* point tensors at micro-batch 1 */
    double ce_bytes;           /* vocab-parallel loss: fp32 per token */
    double repl, split_b, scores; /* saved for backward, micro-batch 1 */
    double ring_f, ring_b;     /* context parallelism's K/V ring around attention (plan's mbs) */
    double ep_f, ep_b;         /* the experts' all-to-alls (and etp collectives) after a dispatch */
} top;

static double coll_t(const wf_cluster *c, const wf_group *g, wf_coll_kind k, double bytes)
{
    return wf_coll_time(c, k, g, bytes);
}

/* Compute `dur` with a collective of `comm` running beside it (context
 * parallelism's ring, a userbuffers-overlapped tensor-parallel collective):
 * the collective in the background, the compute slowed while they overlap,
 * then a join. */
static void beside(steps *s, double comm, double bytes, double dur, double slow, const char *name)
{
    flush(s);
    emit_bytes(s, STEP_COLL_BG, WF_SIM_CAT_TP_COMM, comm, bytes, name);
    s->comp += dur + (slow - 1.0) * (comm < dur ? comm : dur);
    flush(s);
    emit(s, STEP_JOIN, 0, 0, "join");
}

static wf_status section_steps(const wf_cluster *c, const sim_profile *pr, const wf_plan *p, const top *ops,
                               int n, int npoints, int section, wf_arena *a, sim_unit *u)
{
    const double b = (double)p->mbs, slow = c->overlap_slowdown >= 1 ? c->overlap_slowdown : 1.0;
    const int t = p->tp, sp = p->sp;
    /* Tensor-parallel overlap as the framework runs it (wf_cost_var): 0
     * synchronous, 1 backward collectives behind the GEMMs beside them, 2
     * also the forward ones (userbuffers, with sequence parallelism). */
    const int bwd_ov = pr->tp_overlap >= 1, fwd_ov = pr->tp_overlap >= 2 && sp;
    const wf_group *tg = &pr->tp_group;
    int cap = 8 * n + 16;
    steps f = {wf_arena_alloc(a, (size_t)cap * sizeof(sim_step)), 0, cap, 0, WF_SIM_CAT_FORWARD, "forward"};
    steps r = {wf_arena_alloc(a, (size_t)cap * sizeof(sim_step)), 0, cap, 0, WF_SIM_CAT_RECOMPUTE, "recompute"};
    steps w = {wf_arena_alloc(a, (size_t)cap * sizeof(sim_step)), 0, cap, 0, WF_SIM_CAT_BACKWARD, "backward"};
    double *dwin = wf_arena_alloc(a, (size_t)(npoints + 1) * sizeof *dwin);
    double *wwin = wf_arena_alloc(a, (size_t)(npoints + 1) * sizeof *wwin);
    if (!f.s || !r.s || !w.s || !dwin || !wwin)
        return wf_errorf(WF_NOMEM, "out of memory building simulation units");

    /* Forward (and, with full recomputation of the layer, the same again). */
    int full = section == SEC_LAYER && p->recompute == WF_RECOMPUTE_FULL;
    for (int pass = 0; pass < 1 + full; pass++) {
        steps *s = pass ? &r : &f;
        double ag = 0, ag_win = 0; /* an overlapped all-gather and the compute beside it */
        for (int i = 0; i < n; i++) {
            const top *o = &ops[i];
            if (t > 1 && sp && o->fpoint >= 0 && o->f_first) {
                flush(s);
                ag = coll_t(c, tg, WF_COLL_ALLGATHER, o->f_bytes * b);
                emit_bytes(s, fwd_ov ? STEP_COLL_BG : STEP_COLL, WF_SIM_CAT_TP_COMM, ag, o->f_bytes * b,
                           "tp all-gather");
                ag_win = 0;
            }
            if (o->ring_f > 0) {
                beside(s, o->ring_f, 0, o->tf, slow, "cp ring");
            } else if (t > 1 && o->is_g && fwd_ov) {
                double rs = coll_t(c, tg, WF_COLL_REDUCE_SCATTER, o->g_bytes * b);
                beside(s, rs, o->g_bytes * b, o->tf, slow, "tp reduce-scatter");
            } else {
                s->comp += o->tf;
                if (t > 1 && o->is_g) {
                    flush(s);
                    emit_bytes(s, STEP_COLL, WF_SIM_CAT_TP_COMM,
                               coll_t(c, tg, sp ? WF_COLL_REDUCE_SCATTER : WF_COLL_ALLREDUCE, o->g_bytes * b),
                               o->g_bytes * b, sp ? "tp reduce-scatter" : "tp all-reduce");
                }
            }
            if (t > 1 && sp && fwd_ov && o->fpoint >= 0) {
                ag_win += o->tf;
                if (o->f_last) {
                    s->comp += (slow - 1.0) * (ag < ag_win ? ag : ag_win);
                    flush(s);
                    emit(s, STEP_JOIN, 0, 0, "join");
                }
            }
            if (t > 1 && o->ce_bytes > 0) {
                flush(s);
                emit(s, STEP_COLL, WF_SIM_CAT_TP_COMM, 3.0 * coll_t(c, tg, WF_COLL_ALLREDUCE, o->ce_bytes * b),
                     "vocab-parallel loss all-reduces");
            }
            if (o->ep_f > 0) {
                flush(s);
                emit(s, STEP_COLL, WF_SIM_CAT_TP_COMM, o->ep_f, "expert all-to-all");
            }
        }
        flush(s);
    }
    if (section == SEC_LAYER && p->recompute == WF_RECOMPUTE_SELECTIVE) {
        for (int i = 0; i < n; i++) {
            if (!ops[i].attn_core)
                continue;
            if (ops[i].ring_f > 0)
                beside(&r, ops[i].ring_f, 0, ops[i].tf, slow, "cp ring");
            else
                r.comp += ops[i].tf;
        }
        flush(&r);
    }

    /* Backward, ops in reverse. */
    for (int k = 0; k < npoints; k++)
        dwin[k] = wwin[k] = 0;
    for (int i = n - 1; i >= 0; i--) {
        const top *o = &ops[i];
        if (t > 1 && sp && o->is_g && fwd_ov && o->fpoint < 0 && o->ring_b <= 0) {
            /* Userbuffers: the output gradient's all-gather pipelined with
             * this row-parallel product's input-gradient GEMM. */
            beside(&w, coll_t(c, tg, WF_COLL_ALLGATHER, o->g_bytes * b), o->g_bytes * b, o->tin, slow,
                   "tp all-gather");
            w.comp += o->tw;
            continue;
        }
        if (t > 1 && sp && o->is_g) {
            flush(&w);
            emit_bytes(&w, STEP_COLL, WF_SIM_CAT_TP_COMM, coll_t(c, tg, WF_COLL_ALLGATHER, o->g_bytes * b),
                       o->g_bytes * b, "tp all-gather");
        }
        if (t > 1 && o->fpoint >= 0) {
            int k = o->fpoint;
            double ag = sp ? coll_t(c, tg, WF_COLL_ALLGATHER, o->f_bytes * b) : 0;
            if (sp && o->f_last) {
                flush(&w);
                emit_bytes(&w, bwd_ov ? STEP_COLL_BG : STEP_COLL, WF_SIM_CAT_TP_COMM, ag, o->f_bytes * b,
                           "tp re-gather");
            }
            w.comp += o->tin;
            dwin[k] += o->tin;
            wwin[k] += o->tw;
            if (o->f_first) {
                if (sp && bwd_ov)
                    w.comp += (slow - 1.0) * (ag < dwin[k] ? ag : dwin[k]);
                flush(&w);
                if (sp && bwd_ov)
                    emit(&w, STEP_JOIN, 0, 0, "join");
                double gc = coll_t(c, tg, sp ? WF_COLL_REDUCE_SCATTER : WF_COLL_ALLREDUCE, o->f_bytes * b);
                emit_bytes(&w, bwd_ov ? STEP_COLL_BG : STEP_COLL, WF_SIM_CAT_TP_COMM, gc, o->f_bytes * b,
                           sp ? "tp reduce-scatter" : "tp all-reduce");
                double hid = bwd_ov ? (gc < wwin[k] ? gc : wwin[k]) : 0;
                emit(&w, STEP_COMPUTE, WF_SIM_CAT_BACKWARD, wwin[k] + (slow - 1.0) * hid, "weight gradients");
                if (bwd_ov)
                    emit(&w, STEP_JOIN, 0, 0, "join");
            }
        } else if (o->ring_b > 0) {
            beside(&w, o->ring_b, 0, o->tin + o->tw, slow, "cp ring");
        } else {
            w.comp += o->tin + o->tw;
        }
        if (o->ep_b > 0) {
            flush(&w);
            emit(&w, STEP_COLL, WF_SIM_CAT_TP_COMM, o->ep_b, "expert all-to-all");
        }
    }
    flush(&w);
    u->fwd = f.s;
    u->nfwd = f.n;
    u->rec = r.s;
    u->nrec = r.n;
    u->bwd = w.s;
    u->nbwd = w.n;
    return WF_OK;
}

/* One unit per op of a transformer without tensor parallelism (the
 * data-parallel model's granularity: each gradient ready when its op's
 * backward ends): the embedding's ops, each layer's ops, the head's ops. */
static wf_status op_level_units(const wf_plan *p, const top *ops, int n, const int *first, const int *count,
                                const double *tens, const int *tens_sec, const int *tens_op, int ntens,
                                int64_t layers, wf_arena *a, sim_profile *pr)
{
    const double b = (double)p->mbs;
    pr->nunits = n;
    pr->unit = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *pr->unit);
    sim_step *stp = wf_arena_alloc(a, (size_t)(3 * n + 1) * sizeof *stp);
    if (!pr->unit || !stp)
        return wf_errorf(WF_NOMEM, "out of memory building simulation units");
    for (int i = 0; i < n; i++) {
        const top *o = &ops[i];
        sim_unit *u = &pr->unit[i];
        u->name = o->section == SEC_PRE ? "embedding op" : o->section == SEC_LAYER ? "layer op" : "head op";
        u->fwd = &stp[3 * i];
        u->bwd = &stp[3 * i + 1];
        u->rec = &stp[3 * i + 2];
        u->fwd[0] = (sim_step){STEP_COMPUTE, WF_SIM_CAT_FORWARD, o->tf, 0, "forward"};
        u->bwd[0] = (sim_step){STEP_COMPUTE, WF_SIM_CAT_BACKWARD, o->tin + o->tw, 0, "backward"};
        u->rec[0] = (sim_step){STEP_COMPUTE, WF_SIM_CAT_RECOMPUTE, o->tf, 0, "recompute"};
        u->nfwd = u->nbwd = 1;
        u->nrec = o->section == SEC_LAYER && (p->recompute == WF_RECOMPUTE_FULL ||
                                             (p->recompute == WF_RECOMPUTE_SELECTIVE && o->attn_core));
        u->act_bytes = b * (o->repl + o->split_b + o->scores);
        for (int k = 0; k < ntens; k++)
            u->ntensors += tens_op[k] == i && tens_sec[k] >= 0;
        u->tensor_params = wf_arena_alloc(a, (size_t)(u->ntensors + 1) * sizeof *u->tensor_params);
        if (!u->tensor_params)
            return wf_errorf(WF_NOMEM, "out of memory building simulation units");
        u->ntensors = 0;
        for (int k = 0; k < ntens; k++)
            if (tens_op[k] == i && tens_sec[k] >= 0) {
                u->tensor_params[u->ntensors++] = tens[k];
                u->params += tens[k];
            }
        fold_unit(u);
    }
    int L = (int)layers, nl = count[SEC_LAYER], npre = count[SEC_PRE], npost = count[SEC_POST];
    pr->ninst = npre + L * nl + npost;
    pr->inst = wf_arena_alloc(a, (size_t)pr->ninst * sizeof *pr->inst);
    pr->inst_layer = wf_arena_alloc(a, (size_t)pr->ninst * sizeof *pr->inst_layer);
    pr->nvs = p->pp * p->vpp;
    pr->vs_first = wf_arena_alloc(a, (size_t)(pr->nvs + 1) * sizeof *pr->vs_first);
    if (!pr->inst || !pr->inst_layer || !pr->vs_first)
        return wf_errorf(WF_NOMEM, "out of memory building simulation units");
    int k = 0;
    for (int i = 0; i < npre; i++, k++) {
        pr->inst[k] = first[SEC_PRE] + i;
        pr->inst_layer[k] = -1;
    }
    for (int l = 0; l < L; l++)
        for (int i = 0; i < nl; i++, k++) {
            pr->inst[k] = first[SEC_LAYER] + i;
            pr->inst_layer[k] = l;
        }
    for (int i = 0; i < npost; i++, k++) {
        pr->inst[k] = first[SEC_POST] + i;
        pr->inst_layer[k] = -1;
    }
    int per = L / pr->nvs;
    pr->vs_first[0] = 0;
    for (int v = 1; v < pr->nvs; v++)
        pr->vs_first[v] = npre + v * per * nl;
    pr->vs_first[pr->nvs] = pr->ninst;
    return WF_OK;
}

static wf_status build_transformer(sim_model *sm, const unsigned char *fuse, int op_level,
                                   const wf_model_config *m, const wf_cluster *c, const wf_plan *p, wf_arena *a,
                                   sim_profile *pr)
{
    const wf_cost_model_info *mi = &sm->info;
    const wf_graph *g = &sm->g;
    wf_status st = WF_OK;
    int n = g->nfwd, ntens = 0;
    const double b = (double)p->mbs, t = (double)p->tp;
    top *ops = calloc((size_t)n + 1, sizeof *ops);
    wf_cost_op_time *times = malloc(((size_t)n + 1) * sizeof *times);
    int *pt_first = malloc(((size_t)sm->npoints + 1) * sizeof *pt_first);
    int *pt_last = malloc(((size_t)sm->npoints + 1) * sizeof *pt_last);
    unsigned char *seen = calloc((size_t)g->ntensors + 1, 1);
    /* Parameter tensors per section, in the order first read (local elements). */
    double *tens = malloc(((size_t)g->ntensors + 1) * sizeof *tens);
    int *tens_sec = malloc(((size_t)g->ntensors + 1) * sizeof *tens_sec); /* section, -1 dropped */
    int *tens_op = malloc(((size_t)g->ntensors + 1) * sizeof *tens_op);  /* the op that reads it first */
    if (!ops || !times || !pt_first || !pt_last || !seen || !tens || !tens_sec || !tens_op) {
        st = wf_errorf(WF_NOMEM, "out of memory building simulation units of %s", m->name);
        goto done;
    }
    if ((st = wf_cost_op_times(sm->ctx, p->mbs, p->tp, p->sp, times)))
        goto done;
    /* Expert gradients are reduced over the expert-data-parallel ranks
     * (stride ep x etp), not the dp group the simulator's gradient channel
     * plays: their sizes are scaled by the ratio of the two groups' times
     * for the layer's expert gradients, so each takes its own group's time
     * (memory keeps the true sizes, u->eparams). */
    double egrad = 1.0;
    if (mi->ep * mi->etp > 1 && p->dp > 1) {
        int64_t epx = (int64_t)mi->ep * mi->etp, edp = (int64_t)p->tp * p->dp / epx;
        wf_group eg = wf_group_place(c, edp >= 1 ? edp : 1, epx);
        double ref = mi->sec[SEC_LAYER].params_expert * pr->grad_bytes;
        wf_coll_kind k = p->zero >= 1 ? WF_COLL_REDUCE_SCATTER : WF_COLL_ALLREDUCE;
        double tdp = wf_coll_time(c, k, &pr->dp_group, ref);
        egrad = tdp > 0 && ref > 0 ? wf_coll_time(c, k, &eg, ref) / tdp : 1.0;
    }
    int first[SEC_COUNT], count[SEC_COUNT];
    for (int s = 0; s < SEC_COUNT; s++) {
        count[s] = mi->sec[s].nop;
        first[s] = count[s] > 0 ? mi->sec[s].op0 : -1;
    }
    for (int k = 0; k < sm->npoints; k++)
        pt_first[k] = pt_last[k] = -1;
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g->ops[i];
        const wf_cost_op_info *ci = &sm->ops[i];
        int s = (int)ci->section;
        top *r = &ops[i];
        r->section = s;
        r->split = ci->split;
        r->attn_core = ci->attn_core;
        for (int j = 0; j < o->nin; j++) {
            const wf_tensor *x = &g->tensors[o->in[j]];
            unsigned bit = s == SEC_PRE ? 1u : s == SEC_LAYER ? 2u : 4u;
            if (x->role != WF_ROLE_PARAM || (seen[o->in[j]] & bit))
                continue;
            seen[o->in[j]] |= (unsigned char)bit;
            double ne = (double)wf_tensor_numel(x);
            /* With one stage the tied embedding is one tensor. */
            int dup = s == SEC_POST && (seen[o->in[j]] & 1) && p->pp == 1;
            tens[ntens] = ci->expert ? ne / ((double)mi->ep * (double)mi->etp) * egrad : r->split ? ne / t : ne;
            tens_op[ntens] = i;
            tens_sec[ntens++] = dup ? -1 : s;
        }
        double div = (r->split || p->sp) ? t : 1.0;
        r->tf = times[i].fwd_s;
        r->tin = times[i].bwd_in_s;
        r->tw = times[i].bwd_w_s;
        apply_fusions(sm, fuse, c, i, b / div, &r->tf, &r->tin, &r->tw);
        r->repl = ci->saved_repl_bytes;
        r->split_b = ci->saved_split_bytes;
        r->scores = ci->saved_scores_bytes;
        r->fpoint = ci->f_point;
        r->f_bytes = ci->f_bytes;
        r->is_g = ci->g_point >= 0;
        r->g_bytes = ci->g_bytes;
        r->ce_bytes = ci->ce_bytes;
        wf_cost_expert_comm(sm->ctx, i, p->mbs, p->tp, &r->ep_f, &r->ep_b);
        if (mi->cp > 1 && ci->attn_core) {
            wf_plan rp = *p;
            rp.cp = mi->cp;
            wf_cost_cp_ring(sm->ctx, &rp, i, &r->ring_f, &r->ring_b);
        }
        if (r->fpoint >= 0) {
            if (pt_first[r->fpoint] < 0)
                pt_first[r->fpoint] = i;
            pt_last[r->fpoint] = i;
        }
    }
    /* epo=1: each section's expert all-to-alls hide behind another
     * micro-batch's compute of the section; the cost model's split of what
     * shows and what it slows (cross-micro-batch overlap is not played step
     * by step) scales each exchange. */
    for (int sct = 0; sct < SEC_COUNT; sct++) {
        double comm = 0, window = 0;
        for (int i = first[sct]; i >= 0 && i < first[sct] + count[sct]; i++) {
            comm += ops[i].ep_f + ops[i].ep_b;
            window += ops[i].tf + ops[i].tin + ops[i].tw;
        }
        if (!(comm > 0))
            continue;
        double shown, eslow;
        wf_cost_expert_overlap(sm->ctx, comm, window, &shown, &eslow);
        for (int i = first[sct]; i < first[sct] + count[sct]; i++) {
            double share = (ops[i].ep_f + ops[i].ep_b) / comm;
            ops[i].ep_f *= shown / comm;
            ops[i].ep_b *= shown / comm;
            ops[i].tf += share * eslow;
        }
    }
    /* The first and the last reader (in forward order) of each point. */
    for (int i = 0; i < n; i++) {
        if (ops[i].fpoint < 0)
            continue;
        ops[i].f_first = pt_first[ops[i].fpoint] == i;
        ops[i].f_last = pt_last[ops[i].fpoint] == i;
    }
    const double layer_input = mi->sec[SEC_LAYER].input_bytes;
    pr->shared_params = mi->shared_split_params / t + mi->shared_repl_params;
    if (op_level) {
        st = op_level_units(p, ops, n, first, count, tens, tens_sec, tens_op, ntens, m->layers, a, pr);
        if (st)
            goto done;
        goto sends;
    }
    pr->nunits = SEC_COUNT;
    pr->unit = wf_arena_alloc(a, SEC_COUNT * sizeof *pr->unit);
    if (!pr->unit) {
        st = wf_errorf(WF_NOMEM, "out of memory building simulation units");
        goto done;
    }
    static const char *const names[SEC_COUNT] = {"embedding", "layer", "head"};
    double rdiv = p->sp ? t : 1.0;
    for (int s = 0; s < SEC_COUNT; s++) {
        sim_unit *u = &pr->unit[s];
        u->name = names[s];
        if (count[s] > 0 && (st = section_steps(c, pr, p, &ops[first[s]], count[s], sm->npoints, s, a, u)))
            goto done;
        u->params = mi->sec[s].params_split / t + mi->sec[s].params_repl + mi->sec[s].params_expert;
        u->eparams = mi->sec[s].params_expert;
        double repl = 0, split = 0, scores = 0;
        for (int i = first[s]; i >= 0 && i < first[s] + count[s]; i++) {
            repl += ops[i].repl;
            split += ops[i].split_b;
            scores += ops[i].scores;
        }
        double all = b * (repl / rdiv + split / t + scores / t);
        if (s == SEC_LAYER && p->recompute == WF_RECOMPUTE_FULL) {
            u->act_bytes = b * layer_input / rdiv;
            u->transient_bytes = all;
        } else if (s == SEC_LAYER && p->recompute == WF_RECOMPUTE_SELECTIVE) {
            u->act_bytes = b * (repl / rdiv + split / t);
            u->transient_bytes = b * scores / t;
        } else {
            u->act_bytes = all;
        }
        if (s == SEC_POST)
            u->transient_bytes += b * mi->logits_per_sample / t / (double)mi->cp * mi->loss_elem_bytes;
        fold_unit(u);
    }
    for (int s = 0; s < SEC_COUNT; s++) {
        sim_unit *u = &pr->unit[s];
        int k = 0;
        for (int i = 0; i < ntens; i++)
            k += tens_sec[i] == s;
        u->tensor_params = wf_arena_alloc(a, (size_t)(k + 1) * sizeof *u->tensor_params);
        if (!u->tensor_params) {
            st = wf_errorf(WF_NOMEM, "out of memory building simulation units");
            goto done;
        }
        for (int i = 0; i < ntens; i++)
            if (tens_sec[i] == s)
                u->tensor_params[u->ntensors++] = tens[i];
    }

    /* Instances: embedding, L layers, head; virtual stage k holds L/(p v)
     * layers, the first also the embedding, the last also the head. */
    int64_t L = m->layers;
    pr->ninst = (int)L + 2;
    pr->inst = wf_arena_alloc(a, (size_t)pr->ninst * sizeof *pr->inst);
    pr->inst_layer = wf_arena_alloc(a, (size_t)pr->ninst * sizeof *pr->inst_layer);
    pr->nvs = p->pp * p->vpp;
    pr->vs_first = wf_arena_alloc(a, (size_t)(pr->nvs + 1) * sizeof *pr->vs_first);
    if (!pr->inst || !pr->inst_layer || !pr->vs_first) {
        st = wf_errorf(WF_NOMEM, "out of memory building simulation units");
        goto done;
    }
    for (int i = 0; i < pr->ninst; i++) {
        pr->inst[i] = i == 0 ? SEC_PRE : i == pr->ninst - 1 ? SEC_POST : SEC_LAYER;
        pr->inst_layer[i] = i == 0 || i == pr->ninst - 1 ? -1 : i - 1;
    }
    int64_t per = L / pr->nvs;
    pr->vs_first[0] = 0;
    for (int k = 1; k < pr->nvs; k++)
        pr->vs_first[k] = (int)(1 + k * per);
    pr->vs_first[pr->nvs] = pr->ninst;

sends:
    /* A pipeline send: the layer's input b s h (the cost model's message). */
    if (p->pp > 1)
        pr->p2p_s = wf_cost_p2p_time(sm->ctx, p, layer_input * b);
    if (p->tp > 1)
        pr->buffer_bytes += layer_input * b; /* all-gather / all-reduce buffer */
    if (p->zero == 3)
        pr->buffer_bytes += 2.0 * pr->unit[SEC_LAYER].params * pr->elem_bytes;
done:
    free(ops);
    free(times);
    free(pt_first);
    free(pt_last);
    free(seen);
    free(tens);
    free(tens_sec);
    free(tens_op);
    return st;
}

/* ---- other models: one unit per op -------------------------------------------------- */

static wf_status build_generic(const sim_model *sm, const unsigned char *fuse, const wf_model_config *m,
                               const wf_cluster *c, const wf_plan *p, wf_arena *a, sim_profile *pr)
{
    const wf_graph *g = &sm->g;
    const int n = g->nfwd;
    const double b = (double)p->mbs;
    wf_status st = WF_OK;
    /* A fused op's gradients are ready with its producer's: owner[i] is the
     * first op of i's fused chain, which lists i's parameter tensors. */
    int *owner = malloc(((size_t)n + 1) * sizeof *owner);
    int *ntens_of = calloc((size_t)n + 1, sizeof *ntens_of);
    unsigned char *joined = calloc((size_t)n + 1, 1); /* op i fused to op i-1 */
    double *w = malloc(((size_t)n + 1) * sizeof *w);
    wf_cost_op_time *times = malloc(((size_t)n + 1) * sizeof *times);
    unsigned char *seen = calloc((size_t)g->ntensors + 1, 1);
    pr->nunits = pr->ninst = n;
    pr->unit = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *pr->unit);
    pr->inst = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *pr->inst);
    pr->inst_layer = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *pr->inst_layer);
    sim_step *stp = wf_arena_alloc(a, (size_t)(3 * n + 1) * sizeof *stp);
    int pp = p->pp < n ? p->pp : n;
    pr->vs_first = wf_arena_alloc(a, (size_t)(pp + 1) * sizeof *pr->vs_first);
    pr->vs_send_s = wf_arena_alloc(a, (size_t)(pp + 1) * sizeof *pr->vs_send_s);
    if (!owner || !ntens_of || !joined || !w || !times || !seen || !pr->unit || !pr->inst || !pr->inst_layer ||
        !stp || !pr->vs_first || !pr->vs_send_s) {
        st = wf_errorf(WF_NOMEM, "out of memory building simulation units of %s", m->name);
        goto done;
    }
    if ((st = wf_cost_op_times(sm->ctx, p->mbs, 1, 0, times)))
        goto done;
    for (int k = 0; fuse && k < sm->nfusions; k++)
        if (fuse[k] && sm->fusions[k].b == sm->fusions[k].a + 1)
            joined[sm->fusions[k].b] = 1;
    for (int i = 0; i < n; i++)
        owner[i] = i > 0 && joined[i] ? owner[i - 1] : i;
    /* Parameter tensors, each counted once, listed on their owner's unit. */
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g->ops[i];
        for (int j = 0; j < o->nin; j++) {
            const wf_tensor *x = &g->tensors[o->in[j]];
            if (x->role == WF_ROLE_PARAM && !seen[o->in[j]]) {
                seen[o->in[j]] = 1;
                pr->unit[i].params += (double)wf_tensor_numel(x);
                ntens_of[owner[i]]++;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        pr->unit[i].tensor_params = wf_arena_alloc(a, (size_t)(ntens_of[i] + 1) * sizeof(double));
        if (!pr->unit[i].tensor_params) {
            st = wf_errorf(WF_NOMEM, "out of memory building simulation units of %s", m->name);
            goto done;
        }
    }
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g->ops[i];
        sim_unit *ou = &pr->unit[owner[i]];
        for (int j = 0; j < o->nin; j++) {
            const wf_tensor *x = &g->tensors[o->in[j]];
            if (x->role == WF_ROLE_PARAM && seen[o->in[j]] == 1) {
                seen[o->in[j]] = 2; /* listed */
                ou->tensor_params[ou->ntensors++] = (double)wf_tensor_numel(x);
            }
        }
    }
    for (int i = 0; i < n; i++) {
        sim_unit *u = &pr->unit[i];
        u->name = wf_arena_strdup(a, g->ops[i].name);
        double tf = times[i].fwd_s, tin = times[i].bwd_in_s, tw = times[i].bwd_w_s;
        apply_fusions(sm, fuse, c, i, b, &tf, &tin, &tw);
        u->fwd = &stp[3 * i];
        u->bwd = &stp[3 * i + 1];
        u->rec = &stp[3 * i + 2];
        u->fwd[0] = (sim_step){STEP_COMPUTE, WF_SIM_CAT_FORWARD, tf, 0, u->name};
        u->bwd[0] = (sim_step){STEP_COMPUTE, WF_SIM_CAT_BACKWARD, tin + tw, 0, u->name};
        u->rec[0] = (sim_step){STEP_COMPUTE, WF_SIM_CAT_RECOMPUTE, tf, 0, u->name};
        u->nfwd = u->nbwd = 1;
        u->nrec = p->recompute == WF_RECOMPUTE_FULL;
        u->act_bytes = sm->ops[i].saved_repl_bytes * sm->info.saved_dedup * b;
        w[i] = tf + tin + tw + (u->nrec ? tf : 0);
        pr->inst[i] = i;
        pr->inst_layer[i] = i;
    }
    for (int i = 0; i < n; i++) {
        if (p->recompute == WF_RECOMPUTE_FULL) {
            pr->unit[i].transient_bytes = pr->unit[i].act_bytes;
            pr->unit[i].act_bytes = 0;
        }
        fold_unit(&pr->unit[i]);
    }

    /* Stages as the estimate cuts them (never between fused ops); each sends
     * its last op's output to the next. */
    pr->nvs = wf_cost_cut_stages(w, n, pp, joined, pr->vs_first);
    for (int k = 0; k + 1 < pr->nvs; k++) {
        int i = pr->vs_first[k + 1];
        double bytes = sm->ops[i - 1].out_bytes * b;
        pr->vs_send_s[k] = wf_cost_p2p_time(sm->ctx, p, bytes);
        if (p->recompute == WF_RECOMPUTE_FULL)
            pr->unit[i].act_bytes += bytes; /* the stage keeps its input */
    }
    if (p->zero == 3) {
        /* The op being run and the next one with weights, prefetched (as
         * the estimate holds them). */
        double pair = 0, prev = 0;
        for (int i = 0; i < pr->nunits; i++) {
            double pw = pr->unit[i].params;
            if (pw <= 0)
                continue;
            pair = prev + pw > pair ? prev + pw : pair;
            prev = pw;
        }
        pr->buffer_bytes += pair * pr->elem_bytes;
    }
done:
    free(owner);
    free(ntens_of);
    free(joined);
    free(w);
    free(times);
    free(seen);
    return st;
}

static int is_elementwise(wf_op_kind k)
{
    return k == WF_OP_RELU || k == WF_OP_GELU || k == WF_OP_SILU || k == WF_OP_DROPOUT || k == WF_OP_ADD ||
           k == WF_OP_MUL || k == WF_OP_BIAS_ADD;
}

/* The fusion rule that joins ops a and a+1, or -1. */
static int fusion_rule(const wf_graph *g, int a, const int *readers)
{
    const wf_op *x = &g->ops[a], *y = &g->ops[a + 1];
    if (x->nout != 1 || readers[x->out[0]] != 1 || x->block != y->block || x->layer != y->layer)
        return -1;
    int reads = 0;
    for (int j = 0; j < y->nin; j++)
        reads |= y->in[j] == x->out[0];
    if (!reads)
        return -1;
    int act = y->kind == WF_OP_RELU || y->kind == WF_OP_GELU || y->kind == WF_OP_SILU;
    if ((x->kind == WF_OP_MATMUL || x->kind == WF_OP_LINEAR || x->kind == WF_OP_BATCH_MATMUL) &&
        (y->kind == WF_OP_BIAS_ADD || act))
        return SIM_FUSE_MATMUL_EPILOGUE;
    if (x->kind == WF_OP_ADD && (y->kind == WF_OP_LAYERNORM || y->kind == WF_OP_RMSNORM))
        return SIM_FUSE_ADD_NORM;
    if (is_elementwise(x->kind) && is_elementwise(y->kind))
        return SIM_FUSE_ELEMENTWISE;
    return -1;
}

wf_status sim_model_init(const wf_model_config *m, const wf_cluster *c, sim_model *out)
{
    memset(out, 0, sizeof *out);
    out->transformer = wf_model_is_transformer(m);
    wf_status st = wf_cost_ctx_create(m, c, &out->ctx);
    if (st)
        return st;
    wf_model_config one = *m;
    if (out->transformer) {
        one.layers = 1;
        one.first_dense = 0; /* the layer the cost context costs (cost/build.c) */
    }
    st = wf_model_build(&one, 1, &out->g);
    wf_cost_model_info_of(out->ctx, &out->info);
    if (st == WF_OK && out->g.nfwd != out->info.nops)
        st = wf_errorf(WF_INTERNAL, "model '%s': %d cost records for %d forward ops", m->name, out->info.nops,
                       out->g.nfwd);
    int n = out->g.nfwd;
    int *readers = st ? NULL : calloc((size_t)out->g.ntensors + 1, sizeof *readers);
    out->fusions = st ? NULL : calloc((size_t)n + 1, sizeof *out->fusions);
    out->ops = st ? NULL : calloc((size_t)n + 1, sizeof *out->ops);
    if (st == WF_OK && (!readers || !out->fusions || !out->ops))
        st = wf_errorf(WF_NOMEM, "out of memory building simulation units of %s", m->name);
    /* The cost model's record of each op; its tensor-parallel points. */
    for (int i = 0; i < n && st == WF_OK; i++) {
        st = wf_cost_op_info_of(out->ctx, i, &out->ops[i]);
        int k = out->ops[i].f_point > out->ops[i].g_point ? out->ops[i].f_point : out->ops[i].g_point;
        if (k + 1 > out->npoints)
            out->npoints = k + 1;
    }
    if (st) {
        free(readers);
        sim_model_free(out);
        return st;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < out->g.ops[i].nin; j++)
            readers[out->g.ops[i].in[j]]++;
    for (int i = 0; i + 1 < n; i++) {
        int rule = fusion_rule(&out->g, i, readers);
        if (rule < 0)
            continue;
        sim_fusion *f = &out->fusions[out->nfusions++];
        f->a = i;
        f->b = i + 1;
        f->rule = rule;
        f->inter_bytes = (double)wf_tensor_bytes(&out->g.tensors[out->g.ops[i].out[0]]);
        snprintf(f->name, sizeof f->name, "%s+%s", out->g.ops[i].name, out->g.ops[i + 1].name);
    }
    free(readers);
    return WF_OK;
}

void sim_model_free(sim_model *sm)
{
    wf_cost_ctx_free(sm->ctx);
    wf_graph_free(&sm->g);
    free(sm->fusions);
    free(sm->ops);
    memset(sm, 0, sizeof *sm);
}

wf_status sim_profile_build(sim_model *sm, const wf_model_config *m, const wf_cluster *c, const wf_plan *p,
                            const unsigned char *fuse, int op_level, wf_arena *a, sim_profile *out)
{
    memset(out, 0, sizeof *out);
    /* The records under the cost context's variant in use (the caller set
     * it with wf_cost_plan_as_run, or it is the default profile's). */
    wf_cost_model_info_of(sm->ctx, &sm->info);
    for (int i = 0; i < sm->info.nops; i++) {
        wf_status rs = wf_cost_op_info_of(sm->ctx, i, &sm->ops[i]);
        if (rs)
            return rs;
    }
    out->cp = sm->info.cp;
    out->tp_overlap = sm->info.tp_overlap;
    out->transformer = sm->transformer;
    out->elem_bytes = (double)wf_dtype_bytes(m->dtype);
    out->grad_bytes = sm->info.grad_elem_bytes;
    out->bytes_per_param = wf_cost_bytes_per_param(sm->ctx, p->zero, p->dp);
    int64_t epx = (int64_t)sm->info.ep * sm->info.etp, edp = (int64_t)p->tp * p->dp / (epx > 0 ? epx : 1);
    out->expert_bytes_per_param = wf_cost_bytes_per_param(sm->ctx, p->zero, edp >= 1 ? (int)edp : 1);
    out->opt_bytes_per_param = wf_cost_optimizer_bytes_per_param(sm->ctx);
    out->mem_bw_bps = c->dev.mem_bw_bps * c->dev.mem_eff;
    out->buffer_bytes = c->mem_reserved_bytes;
    out->dp_group = wf_group_place(c, p->dp, p->tp);
    out->tp_group = wf_group_place(c, p->tp, 1);
    if (op_level && p->tp > 1)
        return wf_errorf(WF_INVAL, "op-level units need tp=1 (tp=%d)", p->tp);
    wf_status st = sm->transformer ? build_transformer(sm, fuse, op_level, m, c, p, a, out)
                                   : build_generic(sm, fuse, m, c, p, a, out);
    if (st)
        return st;
    if (!out->vs_send_s) {
        out->vs_send_s = wf_arena_alloc(a, (size_t)(out->nvs + 1) * sizeof *out->vs_send_s);
        if (!out->vs_send_s)
            return wf_errorf(WF_NOMEM, "out of memory building simulation units");
        for (int k = 0; k < out->nvs; k++)
            out->vs_send_s[k] = out->p2p_s;
    }
    return WF_OK;
}
