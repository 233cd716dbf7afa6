/* A model on a plan as simulation units (plan-impl.h). The numbers come
 * from the cost model itself through cost.h's records (wf_cost_op_times_layout,
 * wf_cost_op_info_of, wf_cost_model_info_of: per-op times, sections, saved
 * tensors, bytes per parameter, optimizer traffic, pipeline messages, the
 * stage cut) and its layout descriptor (wf_cost_layout: per-op work, weight
 * and saved-byte divisors, the model-parallel axis's collectives and the
 * products they overlap with), so the simulator and `weft estimate` cost
 * every op identically and differ only in how they compose them; the graph
 * IR gives the parameter tensors (one gradient each) and the fusion
 * candidates. A whole-model plan is Megatron's descriptor
 * (wf_cost_layout_megatron; other models: every op whole), an op-level plan
 * the descriptor its SBP signatures give (wf_sim_layouts): one path.
 *
 * - Transformers: one layer built at micro-batch 1, its ops sorted into the
 *   embedding ("pre"), the tied layer and the head ("post"), as the estimate
 *   does: three units, each with the descriptor's collectives of its section.
 * - Other models: one unit per forward op, with the collectives its op pays;
 *   stages as the descriptor cuts them, else by time as the estimate does.
 * Memory per unit follows Korthikanti et al. 2022 through the saved tensors,
 * with full or selective recomputation, divided as the layouts divide them. */
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
        case STEP_COLL_BG:
        case STEP_COLL_FREE: {
            double st = T > C ? T : C;
            C = st + s[i].dur_s;
            comm += s[i].dur_s;
            if (s[i].kind == STEP_COLL)
                wait = wait > C ? wait : C;
            else if (s[i].kind == STEP_COLL_BG)
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
    /* Forward and recomputation wait for their collectives but a folded
     * one's hidden part (hid), which the coarse graph leaves out. */
    fold(u->bwd, u->nbwd, &u->bwd_comp, &u->bwd_exposed, &u->bwd_hidden);
}

/* ---- units from the layouts ----------------------------------------------------------
 * A unit's steps come from the layout descriptor (wf_cost_layout): each op's
 * products at its local shape (the descriptor's work and weight divisors),
 * and the model-parallel axis's collectives where the layouts put them. A
 * collective the framework overlaps (its profile's tp_overlap reaches the
 * event's need) runs on channel 0 beside the products of its window: in
 * forward from before the first window op to after the last; in backward an
 * input gradient's reduction (a weight-gradient window) is issued once the
 * window ops' input-gradient products are done, with their weight-gradient
 * products deferred behind it, and a gather (an input-gradient window) runs
 * beside those ops' input-gradient products. Compute slowed by overlapped
 * communication (the cluster's overlap_slowdown) is added to the compute
 * beside it. A collective not overlapped is exposed: a reduction after the
 * ops whose partial output it sums, a gather before the ops that read it, one
 * with no window at its op. A collective whose window lies outside its unit
 * (an op of another model's, paid by its reader) is split as the estimate
 * splits it: the shown part exposed, the rest beside the following compute. */

enum { SEC_PRE = WF_COST_SEC_PRE, SEC_LAYER = WF_COST_SEC_LAYER, SEC_POST = WF_COST_SEC_POST, SEC_COUNT = WF_COST_SEC_COUNT };

/* One forward op of the context at the plan's micro-batch under the layouts. */
typedef struct {
    int section, attn_core;
    double tf, tin, tw;           /* forward, input- and weight-gradient products (fusions applied) */
    double repl, split_b, scores; /* saved for backward at micro-batch 1, divided as the layouts divide them */
    double ring_f, ring_b;        /* context parallelism's K/V ring around attention (plan's mbs) */
    double ep_f, ep_b;            /* the experts' all-to-alls (and etp collectives) after a dispatch */
} top;

/* One collective of the layouts at the plan's micro-batch. */
typedef struct {
    const wf_cost_event *e;
    double dur_s, bytes;  /* all `times` of it; its vector */
    int can_hide;         /* the framework overlaps it with the window's products */
    const char *name;
} lev;

/* Where a collective runs inside a unit. */
typedef struct {
    int wlo, whi;  /* the window's ops inside the unit (lowest, highest), -1 none */
    int ov;        /* beside them */
    int fold;      /* hidden behind ops outside the unit: the shown part exposed */
    double win;    /* the window's time */
    int anchor;    /* exposed or folded: at this op (-1: the pass's end) */
    int after;     /* after the anchor op (reductions) or before it (gathers) */
} lplace;

typedef struct {
    const wf_cluster *c;
    const top *ops; /* every op of the context */
    int nops;
    const lev *ev;  /* every collective of the layouts */
    const int *uev; /* the unit's collectives */
    int nuev;
    int lo, hi;     /* the unit's ops [lo, hi) */
    double slow;    /* overlap_slowdown */
    const char *fname, *bname, *rname; /* names of the unit's compute steps */
} unit_in;

static double win_time(const top *o, wf_cost_win w)
{
    return w == WF_COST_WIN_FWD ? o->tf : w == WF_COST_WIN_DGRAD ? o->tin : w == WF_COST_WIN_WGRAD ? o->tw : 0;
}

static int is_reduction(wf_coll_kind k) { return k == WF_COLL_ALLREDUCE || k == WF_COLL_REDUCE_SCATTER; }

static lplace place_of(const unit_in *u, const lev *l)
{
    const wf_cost_event *e = l->e;
    lplace q = {-1, -1, 0, 0, 0, -1, 0};
    double all = 0, in = 0;
    for (int j = 0; j < e->nwop; j++) {
        int o = e->wop[j];
        if (o < 0 || o >= u->nops)
            continue;
        double t = win_time(&u->ops[o], e->win);
        all += t;
        if (o < u->lo || o >= u->hi)
            continue;
        in += t;
        q.wlo = q.wlo < 0 || o < q.wlo ? o : q.wlo;
        q.whi = o > q.whi ? o : q.whi;
    }
    int red = is_reduction(e->kind);
    if (q.wlo >= 0) {
        q.ov = l->can_hide;
        q.win = in;
        /* In the pass's order: forward ascending, backward descending. */
        q.anchor = e->bwd ? (red ? q.wlo : q.whi) : (red ? q.whi : q.wlo);
        q.after = red;
    } else {
        q.fold = l->can_hide && all > 0;
        q.win = all;
        q.anchor = e->at >= u->lo && e->at < u->hi ? e->at : -1;
        q.after = e->bwd;
    }
    return q;
}

/* An exposed collective, or a folded one (shown part exposed, the rest on
 * the channel beside what follows, slowing it). */
static void exposed(steps *s, const unit_in *u, const lev *l, const lplace *q)
{
    flush(s);
    double hid = q->fold ? (l->dur_s < q->win ? l->dur_s : q->win) : 0;
    if (l->dur_s - hid > 0)
        emit_bytes(s, STEP_COLL, WF_SIM_CAT_TP_COMM, l->dur_s - hid, l->bytes, l->name);
    if (hid > 0) {
        emit_bytes(s, STEP_COLL_FREE, WF_SIM_CAT_TP_COMM, hid, l->bytes, l->name);
        s->comp += (u->slow - 1.0) * hid;
    }
}

/* Compute `dur` with a collective of `comm` running beside it (context
 * parallelism's ring): the collective in the background, the compute slowed
 * while they overlap, then a join. */
static void beside(steps *s, double comm, double dur, double slow, const char *name)
{
    flush(s);
    emit(s, STEP_COLL_BG, WF_SIM_CAT_TP_COMM, comm, name);
    s->comp += dur + (slow - 1.0) * (comm < dur ? comm : dur);
    flush(s);
    emit(s, STEP_JOIN, 0, 0, "join");
}

/* The overlapped collectives of the forward (bwd 0) or of the backward's
 * input gradients (bwd 1) whose window ends at op i: the compute beside
 * each is slowed for the part they overlap, and the stream joins them. */
static void join_overlaps(const unit_in *u, const lplace *pl, int i, int bwd, steps *s)
{
    int join = 0;
    for (int k = 0; k < u->nuev; k++) {
        const lev *l = &u->ev[u->uev[k]];
        const lplace *q = &pl[k];
        if (!q->ov || l->e->bwd != bwd || (bwd ? l->e->win == WF_COST_WIN_WGRAD || q->wlo != i : q->whi != i))
            continue;
        s->comp += (u->slow - 1.0) * (l->dur_s < q->win ? l->dur_s : q->win);
        join = 1;
    }
    if (join) {
        flush(s);
        emit(s, STEP_JOIN, 0, 0, "join");
    }
}

/* The forward pass of a unit (again as a recomputation: cat RECOMPUTE). */
static void forward_steps(const unit_in *u, const lplace *pl, steps *s)
{
    for (int i = u->lo; i < u->hi; i++) {
        const top *o = &u->ops[i];
        for (int k = 0; k < u->nuev; k++) {
            const lev *l = &u->ev[u->uev[k]];
            const lplace *q = &pl[k];
            if (l->e->bwd)
                continue;
            if (q->ov && q->wlo == i) {
                flush(s);
                emit_bytes(s, STEP_COLL_BG, WF_SIM_CAT_TP_COMM, l->dur_s, l->bytes, l->name);
            } else if (!q->ov && q->anchor == i && !q->after) {
                exposed(s, u, l, q);
            }
        }
        if (o->ring_f > 0)
            beside(s, o->ring_f, o->tf, u->slow, "cp ring");
        else
            s->comp += o->tf;
        join_overlaps(u, pl, i, 0, s);
        for (int k = 0; k < u->nuev; k++) {
            const lev *l = &u->ev[u->uev[k]];
            if (!l->e->bwd && !pl[k].ov && pl[k].anchor == i && pl[k].after)
                exposed(s, u, l, &pl[k]);
        }
        if (o->ep_f > 0) {
            flush(s);
            emit(s, STEP_COLL, WF_SIM_CAT_TP_COMM, o->ep_f, "expert all-to-all");
        }
    }
    for (int k = 0; k < u->nuev; k++)
        if (!u->ev[u->uev[k]].e->bwd && !pl[k].ov && pl[k].anchor < 0)
            exposed(s, u, &u->ev[u->uev[k]], &pl[k]);
    flush(s);
}

/* The backward pass of a unit, ops in reverse. claim[i - lo]: the
 * weight-gradient window (unit collective k) that defers op i's weight-
 * gradient product, -1 none. */
static void backward_steps(const unit_in *u, const lplace *pl, const int *claim, steps *s)
{
    for (int i = u->hi - 1; i >= u->lo; i--) {
        const top *o = &u->ops[i];
        for (int k = 0; k < u->nuev; k++) {
            const lev *l = &u->ev[u->uev[k]];
            const lplace *q = &pl[k];
            if (!l->e->bwd)
                continue;
            if (q->ov && l->e->win != WF_COST_WIN_WGRAD && q->whi == i) {
                flush(s);
                emit_bytes(s, STEP_COLL_BG, WF_SIM_CAT_TP_COMM, l->dur_s, l->bytes, l->name);
            } else if (!q->ov && q->anchor == i && !q->after) {
                exposed(s, u, l, q);
            }
        }
        int own_w = claim[i - u->lo] < 0;
        if (o->ring_b > 0) {
            beside(s, o->ring_b, o->tin + (own_w ? o->tw : 0), u->slow, "cp ring");
            own_w = 0;
        } else {
            s->comp += o->tin;
        }
        /* The gathers beside the input-gradient products end here. */
        join_overlaps(u, pl, i, 1, s);
        /* An input gradient complete: its reduction, and the weight-gradient
         * products deferred behind it. */
        for (int k = 0; k < u->nuev; k++) {
            const lev *l = &u->ev[u->uev[k]];
            const lplace *q = &pl[k];
            if (!l->e->bwd || l->e->win != WF_COST_WIN_WGRAD || q->wlo != i)
                continue;
            flush(s);
            emit_bytes(s, q->ov ? STEP_COLL_BG : STEP_COLL, WF_SIM_CAT_TP_COMM, l->dur_s, l->bytes, l->name);
            double w = 0;
            for (int j = u->lo; j < u->hi; j++)
                if (claim[j - u->lo] == k)
                    w += u->ops[j].tw;
            if (q->ov)
                w += (u->slow - 1.0) * (l->dur_s < q->win ? l->dur_s : q->win);
            if (w > 0)
                emit(s, STEP_COMPUTE, WF_SIM_CAT_BACKWARD, w, "weight gradients");
            if (q->ov)
                emit(s, STEP_JOIN, 0, 0, "join");
        }
        for (int k = 0; k < u->nuev; k++) {
            const lev *l = &u->ev[u->uev[k]];
            const lplace *q = &pl[k];
            if (l->e->bwd && !q->ov && q->anchor == i && q->after &&
                !(l->e->win == WF_COST_WIN_WGRAD && q->wlo == i))
                exposed(s, u, l, q);
        }
        if (own_w)
            s->comp += o->tw;
        if (o->ep_b > 0) {
            flush(s);
            emit(s, STEP_COLL, WF_SIM_CAT_TP_COMM, o->ep_b, "expert all-to-all");
        }
    }
    for (int k = 0; k < u->nuev; k++)
        if (u->ev[u->uev[k]].e->bwd && !pl[k].ov && pl[k].anchor < 0)
            exposed(s, u, &u->ev[u->uev[k]], &pl[k]);
    flush(s);
}

/* The steps of a unit: forward, backward and recomputation (rc: full
 * replays the forward with its collectives, selective the attention core). */
static wf_status unit_steps(const unit_in *in, wf_recompute rc, wf_arena *a, sim_unit *u)
{
    const int n = in->hi - in->lo;
    int cap = 8 * n + 6 * in->nuev + 16;
    steps f = {wf_arena_alloc(a, (size_t)cap * sizeof(sim_step)), 0, cap, 0, WF_SIM_CAT_FORWARD, in->fname};
    steps r = {wf_arena_alloc(a, (size_t)cap * sizeof(sim_step)), 0, cap, 0, WF_SIM_CAT_RECOMPUTE, in->rname};
    steps w = {wf_arena_alloc(a, (size_t)cap * sizeof(sim_step)), 0, cap, 0, WF_SIM_CAT_BACKWARD, in->bname};
    lplace *pl = malloc(((size_t)in->nuev + 1) * sizeof *pl);
    int *claim = malloc(((size_t)n + 1) * sizeof *claim);
    if (!f.s || !r.s || !w.s || !pl || !claim) {
        free(pl);
        free(claim);
        return wf_errorf(WF_NOMEM, "out of memory building simulation units");
    }
    for (int k = 0; k < in->nuev; k++)
        pl[k] = place_of(in, &in->ev[in->uev[k]]);
    /* Each weight-gradient product waits behind the first reduction (in
     * backward order) whose window holds it. */
    for (int j = 0; j < n; j++)
        claim[j] = -1;
    for (int i = in->hi - 1; i >= in->lo; i--)
        for (int k = 0; k < in->nuev; k++) {
            const wf_cost_event *e = in->ev[in->uev[k]].e;
            if (!e->bwd || e->win != WF_COST_WIN_WGRAD || pl[k].wlo != i)
                continue;
            for (int j = 0; j < e->nwop; j++) {
                int o = e->wop[j];
                if (o >= in->lo && o < in->hi && claim[o - in->lo] < 0)
                    claim[o - in->lo] = k;
            }
        }
    forward_steps(in, pl, &f);
    if (rc == WF_RECOMPUTE_FULL) {
        forward_steps(in, pl, &r);
    } else if (rc == WF_RECOMPUTE_SELECTIVE) {
        for (int i = in->lo; i < in->hi; i++) {
            const top *o = &in->ops[i];
            if (!o->attn_core)
                continue;
            if (o->ring_f > 0)
                beside(&r, o->ring_f, o->tf, in->slow, "cp ring");
            else
                r.comp += o->tf;
        }
        flush(&r);
    }
    backward_steps(in, pl, claim, &w);
    free(pl);
    free(claim);
    u->fwd = f.s;
    u->nfwd = f.n;
    u->rec = r.s;
    u->nrec = r.n;
    u->bwd = w.s;
    u->nbwd = w.n;
    return f.n <= cap && r.n <= cap && w.n <= cap ? WF_OK
                                                  : wf_errorf(WF_INTERNAL, "simulation unit: step lists overflow");
}

static const char *coll_name(const wf_cost_event *e)
{
    if (e->times > 1)
        return "vocab-parallel loss all-reduces"; /* the only repeated collective: the loss's three */
    switch (e->kind) {
    case WF_COLL_ALLREDUCE:
        return "tp all-reduce";
    case WF_COLL_REDUCE_SCATTER:
        return "tp reduce-scatter";
    case WF_COLL_ALLGATHER:
        return e->bwd && e->win == WF_COST_WIN_DGRAD && e->need == 1 ? "tp re-gather" : "tp all-gather";
    case WF_COLL_ALLTOALL:
        return "tp all-to-all";
    default:
        return "tp collective";
    }
}

/* The collectives of layouts L at micro-batch b (an array of L->nev). */
static lev *layout_events(const wf_cluster *c, const sim_profile *pr, const wf_cost_layout *L, double b, double cp,
                          int tp_overlap)
{
    lev *ev = malloc(((size_t)L->nev + 1) * sizeof *ev);
    if (!ev)
        return NULL;
    for (int k = 0; k < L->nev; k++) {
        const wf_cost_event *e = &L->ev[k];
        ev[k].e = e;
        ev[k].bytes = e->bytes * b / cp;
        wf_group g = e->sub >= 1 && e->sub <= pr->nsub ? pr->sub_group[e->sub - 1] : pr->tp_group;
        ev[k].dur_s = L->tp > 1 ? e->times * wf_coll_time(c, e->kind, &g, ev[k].bytes) : 0;
        ev[k].can_hide = tp_overlap >= e->need && e->win != WF_COST_WIN_NONE;
        ev[k].name = coll_name(e);
    }
    return ev;
}

/* Each op's times and records under the layouts (fusions applied). */
static wf_status layout_ops(const sim_model *sm, const unsigned char *fuse, const wf_cluster *c, const wf_plan *p,
                            const wf_cost_layout *L, top *ops)
{
    const wf_cost_model_info *mi = &sm->info;
    const int n = mi->nops;
    const double b = (double)p->mbs;
    wf_cost_op_time *times = malloc(((size_t)n + 1) * sizeof *times);
    if (!times)
        return wf_errorf(WF_NOMEM, "out of memory building simulation units");
    wf_status st = wf_cost_op_times_layout(sm->ctx, p->mbs, L, times);
    for (int i = 0; i < n && st == WF_OK; i++) {
        const wf_cost_op_info *ci = &sm->ops[i];
        top *r = &ops[i];
        memset(r, 0, sizeof *r);
        r->section = (int)ci->section;
        r->attn_core = ci->attn_core;
        r->tf = times[i].fwd_s;
        r->tin = times[i].bwd_in_s;
        r->tw = times[i].bwd_w_s;
        apply_fusions(sm, fuse, c, i, b / L->div[i], &r->tf, &r->tin, &r->tw);
        r->repl = ci->saved_repl_bytes * mi->saved_dedup / L->repl_div[i];
        r->split_b = ci->saved_split_bytes / L->split_div[i];
        r->scores = ci->saved_scores_bytes / L->split_div[i];
        wf_cost_expert_comm(sm->ctx, i, p->mbs, L->tp, &r->ep_f, &r->ep_b);
        if (mi->cp > 1 && ci->attn_core) {
            wf_plan rp = *p;
            rp.cp = mi->cp;
            rp.tp = L->tp;
            wf_cost_cp_ring(sm->ctx, &rp, i, &r->ring_f, &r->ring_b);
        }
    }
    free(times);
    return st;
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
        u->act_bytes = b * (o->repl + o->split_b);
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

/* Scales tensors [0, n) (those with sel[k] == want) so that they sum to
 * `target`: the layouts' count of local parameter elements, which the per-op
 * weight divisor reproduces only up to how each weight is stored. */
static void scale_tensors(double *tens, const int *sel, int want, int n, double target)
{
    double sum = 0;
    for (int k = 0; k < n; k++)
        if (sel[k] == want)
            sum += tens[k];
    if (!(sum > 0) || fabs(target / sum - 1.0) < 1e-9)
        return;
    for (int k = 0; k < n; k++)
        if (sel[k] == want)
            tens[k] *= target / sum;
}

static wf_status build_transformer(sim_model *sm, const unsigned char *fuse, int op_level,
                                   const wf_model_config *m, const wf_cluster *c, const wf_plan *p,
                                   const wf_cost_layout *L, wf_arena *a, sim_profile *pr)
{
    const wf_cost_model_info *mi = &sm->info;
    const wf_graph *g = &sm->g;
    wf_status st = WF_OK;
    int n = g->nfwd, ntens = 0;
    const double b = (double)p->mbs, t = (double)L->tp;
    top *ops = calloc((size_t)n + 1, sizeof *ops);
    unsigned char *seen = calloc((size_t)g->ntensors + 1, 1);
    /* Parameter tensors per section, in the order first read (local elements). */
    double *tens = malloc(((size_t)g->ntensors + 1) * sizeof *tens);
    int *tens_sec = malloc(((size_t)g->ntensors + 1) * sizeof *tens_sec); /* section, -1 dropped */
    int *tens_all = malloc(((size_t)g->ntensors + 1) * sizeof *tens_all); /* section, -1 expert */
    int *tens_op = malloc(((size_t)g->ntensors + 1) * sizeof *tens_op);  /* the op that reads it first */
    int *uev = malloc(((size_t)L->nev + 1) * sizeof *uev);
    lev *ev = layout_events(c, pr, L, b, (double)mi->cp, pr->tp_overlap);
    if (!ops || !seen || !tens || !tens_sec || !tens_all || !tens_op || !uev || !ev) {
        st = wf_errorf(WF_NOMEM, "out of memory building simulation units of %s", m->name);
        goto done;
    }
    if ((st = layout_ops(sm, fuse, c, p, L, ops)))
        goto done;
    /* Expert gradients are reduced over the expert-data-parallel ranks
     * (stride ep x etp), not the dp group the simulator's gradient channel
     * plays: their sizes are scaled by the ratio of the two groups' times
     * for the layer's expert gradients, so each takes its own group's time
     * (memory keeps the true sizes, u->eparams). */
    double egrad = 1.0;
    if (mi->ep * mi->etp > 1 && p->dp > 1) {
        wf_axis_ranks eax[WF_AXIS_COUNT];
        wf_rank_axes_expert(p->tp, p->cp, p->dp, p->pp, mi->ep, mi->etp, eax);
        wf_group eg = wf_group_place(c, eax[WF_AXIS_DP].size, eax[WF_AXIS_DP].stride);
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
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g->ops[i];
        const wf_cost_op_info *ci = &sm->ops[i];
        int s = (int)ci->section;
        for (int j = 0; j < o->nin; j++) {
            const wf_tensor *x = &g->tensors[o->in[j]];
            unsigned bit = s == SEC_PRE ? 1u : s == SEC_LAYER ? 2u : 4u;
            if (x->role != WF_ROLE_PARAM || (seen[o->in[j]] & bit))
                continue;
            seen[o->in[j]] |= (unsigned char)bit;
            double ne = (double)wf_tensor_numel(x);
            /* With one stage the tied embedding is one tensor. */
            int dup = s == SEC_POST && (seen[o->in[j]] & 1) && p->pp == 1;
            tens[ntens] = ci->expert ? ne / ((double)mi->ep * (double)mi->etp) * egrad : ne / L->pdiv[i];
            tens_op[ntens] = i;
            tens_all[ntens] = ci->expert ? -1 : s;
            tens_sec[ntens++] = dup ? -1 : s;
        }
    }
    for (int s = 0; s < SEC_COUNT; s++)
        scale_tensors(tens, tens_all, s, ntens, L->sec_params[s]);
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
    const double layer_input = mi->sec[SEC_LAYER].input_bytes;
    pr->shared_params = L->shared_params;
    if (op_level) {
        st = op_level_units(p, ops, n, first, count, tens, tens_sec, tens_op, ntens, m->layers, a, pr);
        if (st)
            goto done;
        goto sends;
    }
    /* Recomputation per stage or by block: three more layer units, the
     * layer under none, selective and full recomputation (SEC_COUNT + kind),
     * each layer instance on the one its stage and place in its chunk say. */
    const int chunk = (int)(m->layers / ((int64_t)p->pp * p->vpp));
    /* Uneven stages (stages=, vpp 1): the block method's mix depends on the
     * stage's layers, so it splits the layer unit as per-stage lists do. */
    const int rc_split = p->stage_n > 0 ? p->rc_n > 0 || (p->recompute == WF_RECOMPUTE_FULL && p->rc_layers > 0)
                                        : !wf_plan_rc_uniform(p, chunk);
    pr->nunits = rc_split ? SEC_COUNT + 3 : SEC_COUNT;
    pr->unit = wf_arena_alloc(a, (size_t)pr->nunits * sizeof *pr->unit);
    if (!pr->unit) {
        st = wf_errorf(WF_NOMEM, "out of memory building simulation units");
        goto done;
    }
    static const char *const names[SEC_COUNT] = {"embedding", "layer", "head"};
    static const char *const rc_names[3] = {"layer", "layer (selective recompute)", "layer (recomputed)"};
    for (int ui = 0; ui < pr->nunits; ui++) {
        const int s = ui < SEC_COUNT ? ui : SEC_LAYER;
        sim_unit *u = &pr->unit[ui];
        u->name = ui < SEC_COUNT ? names[s] : rc_names[ui - SEC_COUNT];
        int nu = 0;
        for (int k = 0; k < L->nev; k++)
            if (L->ev[k].section == s)
                uev[nu++] = k;
        unit_in in = {c, ops, n, ev, uev, nu, first[s], first[s] + count[s],
                      c->overlap_slowdown >= 1 ? c->overlap_slowdown : 1.0, "forward", "backward", "recompute"};
        wf_recompute rc = ui >= SEC_COUNT ? (wf_recompute)(ui - SEC_COUNT)
                        : s == SEC_LAYER ? p->recompute : WF_RECOMPUTE_NONE;
        if (count[s] > 0 && (st = unit_steps(&in, rc, a, u)))
            goto done;
        u->params = L->sec_params[s] + mi->sec[s].params_expert;
        u->eparams = mi->sec[s].params_expert;
        u->mp_params = t > 1 ? L->sec_mp_grad[s] : 0;
        for (int j = 0; j < L->nsub; j++)
            u->sub_params[j] = L->sec_sub_grad[j][s];
        /* Activations as the estimate keeps them (cost/estimate.c). */
        double saved = 0, scores = 0;
        for (int i = first[s]; i >= 0 && i < first[s] + count[s]; i++) {
            saved += ops[i].repl + ops[i].split_b + ops[i].scores;
            scores += ops[i].attn_core ? ops[i].scores : 0;
        }
        if (rc == WF_RECOMPUTE_FULL) {
            u->act_bytes = b * layer_input / L->input_div;
            u->transient_bytes = b * saved;
        } else if (rc == WF_RECOMPUTE_SELECTIVE) {
            u->act_bytes = b * (saved - scores);
            u->transient_bytes = b * scores;
        } else {
            u->act_bytes = b * saved;
        }
        if (s == SEC_POST)
            u->transient_bytes += b * mi->logits_per_sample / t / (double)mi->cp * mi->loss_ws_bytes;
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
    for (int ui = SEC_COUNT; ui < pr->nunits; ui++) {
        pr->unit[ui].tensor_params = pr->unit[SEC_LAYER].tensor_params;
        pr->unit[ui].ntensors = pr->unit[SEC_LAYER].ntensors;
    }

    /* Instances: embedding, L layers, head; virtual stage k holds L/(p v)
     * layers, the first also the embedding, the last also the head. */
    int64_t nl = m->layers;
    pr->ninst = (int)nl + 2;
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
    int64_t per = nl / pr->nvs;
    pr->vs_first[0] = 0;
    for (int k = 1; k < pr->nvs; k++) /* uneven stages: after the layers of the stages before */
        pr->vs_first[k] = (int)(1 + (p->stage_n > 0 ? wf_plan_stage_first_layer(p, nl, k) : k * per));
    pr->vs_first[pr->nvs] = pr->ninst;
    if (pr->nunits > SEC_COUNT)
        for (int i = 1; i + 1 < pr->ninst; i++) {
            /* Layer i - 1 is on virtual stage vs (device vs % pp), place j of its chunk. */
            int l = i - 1, vs = (int)(l / per), j = (int)(l % per), cl = (int)per, nf, ns;
            if (p->stage_n > 0) {
                for (vs = 0; vs + 1 < pr->nvs && pr->vs_first[vs + 1] <= i; vs++)
                    ;
                j = i - pr->vs_first[vs];
                cl = p->stage_layers[vs];
            }
            wf_plan_stage_rc(p, vs % p->pp, cl, &nf, &ns);
            pr->inst[i] = SEC_COUNT + (j < nf ? WF_RECOMPUTE_FULL : j < nf + ns ? WF_RECOMPUTE_SELECTIVE
                                                                               : WF_RECOMPUTE_NONE);
        }

sends:
    /* A pipeline send: the layer's input b s h (the cost model's message). */
    if (p->pp > 1)
        pr->p2p_s = wf_cost_p2p_time(sm->ctx, p, layer_input * b);
    if (L->tp > 1)
        pr->buffer_bytes += layer_input * b; /* all-gather / all-reduce buffer */
    if (wf_cost_zero3_prefetch(sm->ctx, p))
        pr->buffer_bytes += 2.0 * pr->unit[SEC_LAYER].params * pr->elem_bytes;
done:
    free(ops);
    free(seen);
    free(tens);
    free(tens_sec);
    free(tens_all);
    free(tens_op);
    free(uev);
    free(ev);
    return st;
}

/* ---- other models: one unit per op -------------------------------------------------- */

/* Co-shard (plan coshard=K): each op runs as K pieces on 1/K of its rows,
 * one after another, so its times are K times a piece's (the estimate's
 * wf_cost_split_stages_pieces). */
static wf_status coshard_ops(const sim_model *sm, const unsigned char *fuse, const wf_cluster *c, const wf_plan *p,
                             const wf_cost_layout *L, const unsigned char *sel, top *ops)
{
    const int n = sm->info.nops;
    wf_cost_layout piece = *L;
    double *div = malloc(((size_t)n + 1) * sizeof *div);
    wf_cost_op_time *times = malloc(((size_t)n + 1) * sizeof *times);
    if (!div || !times) {
        free(div);
        free(times);
        return wf_errorf(WF_NOMEM, "out of memory building simulation units");
    }
    for (int i = 0; i < n; i++)
        div[i] = L->div[i] * (sel[i] ? (double)p->coshard : 1.0);
    piece.div = div;
    wf_status st = wf_cost_op_times_layout(sm->ctx, p->mbs, &piece, times);
    for (int i = 0; i < n && st == WF_OK; i++) {
        if (!sel[i])
            continue;
        const double K = (double)p->coshard;
        top *r = &ops[i];
        r->tf = times[i].fwd_s;
        r->tin = times[i].bwd_in_s;
        r->tw = times[i].bwd_w_s;
        apply_fusions(sm, fuse, c, i, (double)p->mbs / div[i], &r->tf, &r->tin, &r->tw);
        r->tf *= K;
        r->tin *= K;
        r->tw *= K;
    }
    free(div);
    free(times);
    return st;
}

static wf_status build_generic(const sim_model *sm, const unsigned char *fuse, const wf_model_config *m,
                               const wf_cluster *c, const wf_plan *p, const wf_cost_layout *L, wf_arena *a,
                               sim_profile *pr)
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
    top *ops = calloc((size_t)n + 1, sizeof *ops);
    double *tens = malloc(((size_t)g->ntensors + 1) * sizeof *tens);
    int *tens_op = malloc(((size_t)g->ntensors + 1) * sizeof *tens_op);
    int *uev = malloc(((size_t)L->nev + 1) * sizeof *uev);
    lev *ev = layout_events(c, pr, L, b, 1.0, pr->tp_overlap);
    unsigned char *seen = calloc((size_t)g->ntensors + 1, 1);
    unsigned char *sel = NULL; /* co-shard: the ops run as pieces */
    pr->nunits = pr->ninst = n;
    pr->unit = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *pr->unit);
    pr->inst = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *pr->inst);
    pr->inst_layer = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *pr->inst_layer);
    int pp = p->pp < n ? p->pp : n;
    pr->vs_first = wf_arena_alloc(a, (size_t)(pp + 1) * sizeof *pr->vs_first);
    pr->vs_send_s = wf_arena_alloc(a, (size_t)(pp + 1) * sizeof *pr->vs_send_s);
    if (!owner || !ntens_of || !joined || !w || !ops || !tens || !tens_op || !uev || !ev || !seen || !pr->unit ||
        !pr->inst || !pr->inst_layer || !pr->vs_first || !pr->vs_send_s) {
        st = wf_errorf(WF_NOMEM, "out of memory building simulation units of %s", m->name);
        goto done;
    }
    if ((st = layout_ops(sm, fuse, c, p, L, ops)))
        goto done;
    /* The ops run as co-shard pieces: all (whole-stage) or the chosen. */
    if (p->coshard > 1 && (!(sel = malloc((size_t)n + 1)) || (st = wf_cost_coshard_sel(sm->ctx, p, sel)) ||
                           (st = coshard_ops(sm, fuse, c, p, L, sel, ops)))) {
        if (!sel)
            st = wf_errorf(WF_NOMEM, "out of memory building simulation units of %s", m->name);
        goto done;
    }
    const int per_op = wf_plan_coshard_per_op(p);
    for (int k = 0; fuse && k < sm->nfusions; k++)
        if (fuse[k] && sm->fusions[k].b == sm->fusions[k].a + 1)
            joined[sm->fusions[k].b] = 1;
    for (int i = 0; i < n; i++)
        owner[i] = i > 0 && joined[i] ? owner[i - 1] : i;
    /* Parameter tensors, each counted once at its first reader (its local
     * elements as the layouts hold them), listed on their owner's unit. */
    int ntens = 0;
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g->ops[i];
        int t0 = ntens;
        for (int j = 0; j < o->nin; j++) {
            const wf_tensor *x = &g->tensors[o->in[j]];
            if (x->role == WF_ROLE_PARAM && !seen[o->in[j]]) {
                seen[o->in[j]] = 1;
                tens[ntens] = (double)wf_tensor_numel(x) / L->pdiv[i];
                tens_op[ntens++] = i;
                ntens_of[owner[i]]++;
            }
        }
        scale_tensors(tens + t0, tens_op + t0, i, ntens - t0, L->params[i]);
        pr->unit[i].params = L->params[i];
        pr->unit[i].mp_params = L->tp > 1 ? L->mp_grad[i] : 0;
        for (int j = 0; j < L->nsub; j++)
            pr->unit[i].sub_params[j] = L->sub_grad[j][i];
    }
    for (int i = 0; i < n; i++) {
        pr->unit[i].tensor_params = wf_arena_alloc(a, (size_t)(ntens_of[i] + 1) * sizeof(double));
        if (!pr->unit[i].tensor_params) {
            st = wf_errorf(WF_NOMEM, "out of memory building simulation units of %s", m->name);
            goto done;
        }
    }
    for (int k = 0; k < ntens; k++) {
        sim_unit *ou = &pr->unit[owner[tens_op[k]]];
        ou->tensor_params[ou->ntensors++] = tens[k];
    }
    const double slow = c->overlap_slowdown >= 1 ? c->overlap_slowdown : 1.0;
    for (int i = 0; i < n && st == WF_OK; i++) {
        sim_unit *u = &pr->unit[i];
        u->name = wf_arena_strdup(a, g->ops[i].name);
        /* The collectives its op pays (the layouts' `at`). */
        int nu = 0;
        for (int k = 0; k < L->nev; k++)
            if (L->ev[k].at == i)
                uev[nu++] = k;
        unit_in in = {c, ops, n, ev, uev, nu, i, i + 1, slow, u->name, u->name, u->name};
        /* A per-op co-shard's chosen op replays its own pieces. */
        const int replay = p->recompute == WF_RECOMPUTE_FULL || (per_op && sel[i]);
        st = unit_steps(&in, replay ? WF_RECOMPUTE_FULL : WF_RECOMPUTE_NONE, a, u);
        u->act_bytes = ops[i].repl * b;
        w[i] = ops[i].tf + ops[i].tin + ops[i].tw + (replay ? ops[i].tf : 0);
        pr->inst[i] = i;
        pr->inst_layer[i] = i;
    }
    if (st)
        goto done;
    for (int i = 0; i < n; i++) {
        if (p->recompute == WF_RECOMPUTE_FULL || (per_op && sel[i])) {
            /* Co-shard replays and back-propagates one piece at a time
             * (per op: the chosen ops only, and without recompute=full one
             * piece's activations live during that op's backward alone). */
            pr->unit[i].transient_bytes = pr->unit[i].act_bytes / (sel && sel[i] ? (double)p->coshard : 1.0);
            pr->unit[i].act_bytes = 0;
        }
        fold_unit(&pr->unit[i]);
    }

    /* Stages: the plan's cut when its layouts carry one, else as the
     * estimate cuts them (never between fused ops); each sends its last
     * op's output (each rank its part) to the next. */
    if (L->cut) {
        pr->nvs = p->pp;
        for (int k = 0; k <= p->pp; k++)
            pr->vs_first[k] = L->cut[k];
    } else {
        pr->nvs = wf_cost_cut_stages(w, n, pp, joined, pr->vs_first);
    }
    /* Full recomputation replays a stage's forward before its backward one
     * segment (a block instance, or the ops between blocks: the estimate's
     * block checkpoints) at a time: the largest segment's activations live
     * at once (co-shard: one piece's), held by the stage's last op, whose
     * backward runs first; each checkpoint inside the stage is kept per
     * micro-batch by its segment's first op. */
    for (int k = 0; p->recompute == WF_RECOMPUTE_FULL && k < pr->nvs; k++) {
        double seg = 0, peak = 0;
        for (int i = pr->vs_first[k]; i < pr->vs_first[k + 1]; i++) {
            if (i > pr->vs_first[k] && sm->ops[i].seg_start) {
                peak = seg > peak ? seg : peak;
                seg = 0;
                pr->unit[i].act_bytes += sm->ops[i].ckpt_bytes * b / L->div[i - 1];
            }
            seg += pr->unit[i].transient_bytes;
            pr->unit[i].transient_bytes = 0;
        }
        peak = seg > peak ? seg : peak;
        if (pr->vs_first[k + 1] > pr->vs_first[k])
            pr->unit[pr->vs_first[k + 1] - 1].transient_bytes = peak;
    }
    wf_plan p1 = *p;
    p1.tp = 1;
    p1.sp = 0;
    for (int k = 0; k + 1 < pr->nvs; k++) {
        int i = pr->vs_first[k + 1];
        double bytes = sm->ops[i - 1].out_bytes * b / L->div[i - 1];
        pr->vs_send_s[k] = wf_cost_p2p_time(sm->ctx, &p1, bytes);
        if (p->recompute == WF_RECOMPUTE_FULL)
            pr->unit[i].act_bytes += bytes; /* the stage keeps its input */
    }
    /* Recycling: N forwards without gradient per micro-batch (nf1b.c). */
    pr->n_rec = (int)m->recycle;
    pr->rec_bytes = wf_cost_recycle_bytes(m) * b;
    pr->rec_send_s = pr->n_rec > 0 && pr->nvs > 1 ? wf_cost_p2p_time(sm->ctx, &p1, pr->rec_bytes) : 0;
    if (wf_cost_zero3_prefetch(sm->ctx, p)) {
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
    free(sel);
    free(owner);
    free(ntens_of);
    free(joined);
    free(w);
    free(ops);
    free(tens);
    free(tens_op);
    free(uev);
    free(ev);
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
    /* What XLA-style compilers fuse beyond elementwise chains (DisCo, Sec. 2):
     * a convolution with the batch norm after it and the norm with its
     * activation (conv+BN+ReLU is the two joined), and an attention block
     * written out op by op. */
    if (x->kind == WF_OP_CONV2D && y->kind == WF_OP_BATCHNORM)
        return SIM_FUSE_CONV_BN;
    if ((x->kind == WF_OP_BATCHNORM || x->kind == WF_OP_LAYERNORM || x->kind == WF_OP_RMSNORM) && act)
        return SIM_FUSE_NORM_ACT;
    if ((x->kind == WF_OP_BATCH_MATMUL && (y->kind == WF_OP_SOFTMAX || y->kind == WF_OP_MUL)) ||
        (x->kind == WF_OP_MUL && y->kind == WF_OP_SOFTMAX) ||
        (x->kind == WF_OP_SOFTMAX && (y->kind == WF_OP_DROPOUT || y->kind == WF_OP_BATCH_MATMUL)) ||
        (x->kind == WF_OP_DROPOUT && y->kind == WF_OP_BATCH_MATMUL))
        return SIM_FUSE_ATTENTION;
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
                            const wf_cost_layout *layouts, const unsigned char *fuse, int op_level, wf_arena *a,
                            sim_profile *out)
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
    if (layouts && layouts->nops != sm->info.nops)
        return wf_errorf(WF_INVAL, "layouts describe %d ops, model '%s' has %d", layouts->nops, m->name,
                         sm->info.nops);
    if (layouts && layouts->tp != p->tp)
        return wf_errorf(WF_INVAL, "layouts on a model-parallel axis of %d devices, plan tp=%d", layouts->tp, p->tp);
    /* A whole-model plan plays Megatron's layouts (other models: data
     * parallelism, every op whole). */
    wf_cost_layout own;
    memset(&own, 0, sizeof own);
    const wf_cost_layout *L = layouts;
    if (!L) {
        wf_status ls = sm->transformer ? wf_cost_layout_megatron(sm->ctx, p->tp, p->sp, &own)
                                       : wf_cost_layout_init(sm->ctx, 1, &own);
        if (ls)
            return ls;
        L = &own;
    }
    out->cp = sm->info.cp;
    out->tp_overlap = sm->info.tp_overlap;
    out->ag_overlap = sm->info.ag_overlap;
    out->transformer = sm->transformer;
    out->elem_bytes = (double)wf_dtype_bytes(m->dtype);
    out->grad_bytes = sm->info.grad_elem_bytes;
    out->bytes_per_param = wf_cost_bytes_per_param(sm->ctx, p->zero, p->dp);
    int64_t epx = (int64_t)sm->info.ep * sm->info.etp, edp = (int64_t)p->tp * p->dp / (epx > 0 ? epx : 1);
    out->expert_bytes_per_param = wf_cost_bytes_per_param(sm->ctx, p->zero, edp >= 1 ? (int)edp : 1);
    out->opt_bytes_per_param = wf_cost_optimizer_bytes_per_param(sm->ctx);
    out->mem_bw_bps = wf_device_opt_bps(&c->dev);
    out->buffer_bytes = c->mem_reserved_bytes + wf_cost_buffer_bytes(sm->ctx, p, p->mbs);
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(p->tp, p->cp, p->dp, p->pp, ax);
    const wf_axis_ranks dpa = wf_rank_axes_join(ax, WF_AXIS_CP, WF_AXIS_DP);
    out->dp_group = wf_group_place(c, dpa.size, dpa.stride);
    out->tp_group = wf_group_place(c, ax[WF_AXIS_TP].size, ax[WF_AXIS_TP].stride);
    out->edp_group = out->dp_group;
    if (epx > 1) {
        wf_axis_ranks eax[WF_AXIS_COUNT];
        wf_rank_axes_expert(p->tp, p->cp, p->dp, p->pp, sm->info.ep, sm->info.etp, eax);
        out->edp_group = wf_group_place(c, eax[WF_AXIS_DP].size, eax[WF_AXIS_DP].stride);
    }
    out->nsub = L->nsub;
    for (int j = 0; j < L->nsub; j++)
        out->sub_group[j] = wf_group_place(c, L->sub[j].size, L->sub[j].stride);
    wf_status st = WF_OK;
    if (op_level && p->tp > 1)
        st = wf_errorf(WF_INVAL, "op-level units need tp=1 (tp=%d)", p->tp);
    if (st == WF_OK)
        st = sm->transformer ? build_transformer(sm, fuse, op_level, m, c, p, L, a, out)
                             : build_generic(sm, fuse, m, c, p, L, a, out);
    wf_cost_layout_free(&own);
    if (st)
        return st;
    if (p->interlace && sm->transformer) {
        /* The interlaced pipeline: the embedding and the head as one stage
         * of tp x pp ranks lays them out (their collectives on that group),
         * outside the virtual stages. */
        if (layouts)
            return wf_errorf(WF_INVAL, "interlace=1: an interlaced plan has no op-level layouts");
        wf_plan q = *p;
        q.tp = p->tp * p->pp;
        q.pp = 1;
        q.interlace = 0;
        sim_profile seg;
        if ((st = sim_profile_build(sm, m, c, &q, NULL, fuse, 0, a, &seg)) != WF_OK)
            return st;
        out->unit[SEC_PRE] = seg.unit[SEC_PRE];
        out->unit[SEC_POST] = seg.unit[SEC_POST];
        for (int s = SEC_PRE; s <= SEC_POST; s += SEC_POST - SEC_PRE) {
            /* Their replicated weights' partial gradients (the final norm's)
             * are not reduced over tp x pp here; the estimate leaves them
             * out too. */
            out->unit[s].mp_params = 0;
            out->unit[s].sub_params[0] = out->unit[s].sub_params[1] = 0;
        }
        out->shared_params = seg.shared_params;
        out->interlace = 1;
        out->x0_bytes = sm->info.sec[SEC_LAYER].input_bytes * (double)p->mbs / (p->sp && p->tp > 1 ? p->tp : 1);
        out->vs_first[0] = 1;
        out->vs_first[out->nvs] = out->ninst - 1;
    }
    if (!out->vs_send_s) {
        out->vs_send_s = wf_arena_alloc(a, (size_t)(out->nvs + 1) * sizeof *out->vs_send_s);
        if (!out->vs_send_s)
            return wf_errorf(WF_NOMEM, "out of memory building simulation units");
        for (int k = 0; k < out->nvs; k++)
            out->vs_send_s[k] = out->p2p_s;
    }
    return WF_OK;
}
