/* weft outer search: every whole-model plan (wf_plan) of a model on a
 * cluster for a global batch, scored by wf_estimate_plan, the code behind
 * `weft estimate` (ALGORITHMS.md §3, "Outer enumeration").
 *
 * The space, for D devices and batch B: tp | D (tp divides the devices per
 * node unless tp_cross_node), pp | D / tp, dp = D / (tp pp) with dp | B; mbs
 * every divisor of B / dp; vpp every divisor of layers / pp (vpp > 1 only with
 * pp > 1 and micro-batches divisible by pp); recompute none, selective, full;
 * ZeRO 0..3; sp 0/1 with tp > 1; overlap 1/0; with search_comm, every
 * gradient schedule when dp > 1 and overlapped. Non-transformers take dp x pp
 * only (tp = vpp = 1, recompute none or full). The estimate checks every
 * candidate (wf_plan_validate) and rejects what the divisibility filters here
 * did not foresee; those are counted in `space` but not scored.
 *
 * Prunings (each keeps the best, the top K and the frontier of plans that
 * fit; docs/planner.md gives the arguments, and a test compares against the
 * exhaustive mode):
 *  1. Memory lower bound per (tp, pp, zero) group, transformers: weights,
 *     gradients and optimizer state of a device depend only on how the
 *     parameters are partitioned (its layers / pp, split by tp, sharded over dp
 *     by ZeRO), not on mbs, vpp, recompute, sp or overlap; the peak memory of
 *     any plan is at least that. One probe plan per group gives the number;
 *     above the budget, the group is skipped.
 *  2. Micro-batch line, transformers: with everything else fixed, memory does
 *     not decrease with mbs (activations in flight = min(k mbs, B / dp) sample
 *     activations; workspaces grow with mbs), so the first mbs that does not
 *     fit ends the line.
 *  3. Dominated points: ZeRO 1..3 over dp = 1 shard over a single rank (but
 *     under FSDP, see zero_max; the
 *     same plan as zero=0, which wins the tie on the plan string, or more
 *     memory for ZeRO-3's gather buffers); overlap=0 with dp = 1 (no
 *     data-parallel gradients, the same plan as overlap=1); GPipe has 1F1B's
 *     bubble with all micro-batches in flight instead of min(pp, m).
 * Non-transformer models keep only 3, and without GPipe: their stages are
 * split by time per micro-batch size, so neither weights per device nor memory
 * need be monotone, and their stages' unequal times can favour GPipe.
 *
 * A filter (opts->accept) narrows the space itself: the candidates it refuses
 * are neither counted, scored nor ranked, so the top K and the frontier are
 * plans it accepts. The probe of pruning 1 is estimated even when refused
 * (it bounds its group's accepted plans too) but ranked only when accepted.
 *
 * Ranking: time, then memory, then the fewer features (plan_features), then
 * the canonical plan string, so results do not depend on the enumeration
 * order. The top K holds one plan per (time, memory) point, the simplest; the
 * frontier keeps, in that order, the plans whose memory is strictly below
 * every plan before them (so one per point too). */
#include "weft/search.h"

#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define PLAN_TEXT 512

void wf_search_outer_opts_default(wf_search_outer_opts *o)
{
    memset(o, 0, sizeof *o);
    o->top_k = 10;
}

void wf_search_outer_result_free(wf_search_outer_result *r)
{
    if (!r)
        return;
    free(r->top);
    free(r->pareto);
    r->top = r->pareto = NULL;
    r->ntop = r->npareto = 0;
}

/* ---- divisors ------------------------------------------------------------------ */

typedef struct {
    int n;
    int64_t *v; /* ascending */
} divs;

static wf_status divisors(int64_t n, divs *d)
{
    int cap = 64;
    d->n = 0;
    d->v = malloc((size_t)cap * sizeof *d->v);
    if (!d->v)
        return wf_errorf(WF_NOMEM, "out of memory listing divisors of %lld", (long long)n);
    int64_t hi[2048];
    int nhi = 0;
    for (int64_t k = 1; k * k <= n; k++) {
        if (n % k != 0)
            continue;
        if (wf_grow(&d->v, &cap, (int64_t)d->n + 2, sizeof *d->v, 64) != 0)
            return wf_errorf(WF_NOMEM, "out of memory listing divisors of %lld", (long long)n);
        d->v[d->n++] = k;
        if (k != n / k && nhi < 2048)
            hi[nhi++] = n / k;
    }
    for (int i = nhi - 1; i >= 0; i--) {
        if (wf_grow(&d->v, &cap, (int64_t)d->n + 1, sizeof *d->v, 64) != 0)
            return wf_errorf(WF_NOMEM, "out of memory listing divisors of %lld", (long long)n);
        d->v[d->n++] = hi[i];
    }
    return WF_OK;
}

/* ---- ranking and frontier -------------------------------------------------------- */

/* How many features a plan turns on beyond plain data, tensor and pipeline
 * parallelism (ZeRO counts its stage, recomputation its kind): of two plans
 * equal in time and memory, the one with fewer is shown. */
static int plan_features(const wf_plan *p)
{
    return p->zero + (int)p->recompute + (p->rc_n > 0) + (p->rc_layers > 0) + (p->stage_n > 0) + (p->coshard > 1) +
           (p->dap > 1) + p->nf1b + p->interlace + p->sp +
           (p->vpp > 1) + (p->cp > 1) +
           (p->ep > 1) + (p->etp > 0 && p->etp != p->tp) + !p->overlap + (p->pipe == WF_PIPE_GPIPE) + p->fp8 +
           p->epo;
}

static int same_point(const wf_search_outer_point *a, const wf_search_outer_point *b)
{
    return a->est.iteration_time_s == b->est.iteration_time_s &&
           a->est.memory_per_device_bytes == b->est.memory_per_device_bytes;
}

static int point_cmp(const wf_search_outer_point *a, const wf_search_outer_point *b)
{
    if (a->est.iteration_time_s != b->est.iteration_time_s)
        return a->est.iteration_time_s < b->est.iteration_time_s ? -1 : 1;
    if (a->est.memory_per_device_bytes != b->est.memory_per_device_bytes)
        return a->est.memory_per_device_bytes < b->est.memory_per_device_bytes ? -1 : 1;
    int fa = plan_features(&a->plan), fb = plan_features(&b->plan);
    if (fa != fb)
        return fa < fb ? -1 : 1;
    char sa[PLAN_TEXT], sb[PLAN_TEXT];
    wf_plan_format(&a->plan, sa, sizeof sa);
    wf_plan_format(&b->plan, sb, sizeof sb);
    return strcmp(sa, sb);
}

/* The K best, sorted by point_cmp, one plan per (time, memory) point: of
 * plans equal in both (ZeRO-1 and ZeRO-2 where they cost the same), the
 * simplest (point_cmp's order) is kept. */
static void top_insert(wf_search_outer_point *top, int *n, int k, const wf_search_outer_point *p)
{
    for (int j = 0; j < *n; j++) {
        if (!same_point(&top[j], p))
            continue;
        if (point_cmp(p, &top[j]) >= 0)
            return;
        top[j] = *p; /* the simpler twin replaces it in place (same time and memory) */
        return;
    }
    if (*n == k && point_cmp(p, &top[k - 1]) >= 0)
        return;
    int i = *n < k ? (*n)++ : k - 1;
    while (i > 0 && point_cmp(p, &top[i - 1]) < 0) {
        top[i] = top[i - 1];
        i--;
    }
    top[i] = *p;
}

typedef struct {
    wf_search_outer_point *v; /* sorted by point_cmp, memory strictly decreasing */
    int n, cap;
} frontier;

static wf_status frontier_insert(frontier *f, const wf_search_outer_point *p)
{
    int lo = 0, hi = f->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (point_cmp(&f->v[mid], p) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    int i = lo;
    double mem = p->est.memory_per_device_bytes;
    /* The predecessor has the least memory of everything ranked before p. */
    if (i > 0 && f->v[i - 1].est.memory_per_device_bytes <= mem)
        return WF_OK;
    int j = i;
    while (j < f->n && f->v[j].est.memory_per_device_bytes >= mem)
        j++;
    if (j == i) {
        if (wf_grow(&f->v, &f->cap, (int64_t)f->n + 1, sizeof *f->v, 64) != 0)
            return wf_errorf(WF_NOMEM, "out of memory growing the frontier");
        memmove(f->v + i + 1, f->v + i, (size_t)(f->n - i) * sizeof *f->v);
        f->n++;
    } else {
        memmove(f->v + i + 1, f->v + j, (size_t)(f->n - j) * sizeof *f->v);
        f->n -= j - i - 1;
    }
    f->v[i] = *p;
    return WF_OK;
}

/* ---- the search ------------------------------------------------------------------- */

/* Pipelined plans whose uneven stages the search tries (try_uneven). */
#define UNEVEN_CANDIDATES 16

typedef struct {
    const wf_model_config *m;
    const wf_cluster *c;
    wf_cost_ctx *ctx;
    int64_t batch;
    int64_t devices;
    int transformer;
    int exhaustive;
    int search_comm;
    const wf_search_outer_opts *opts;
    double budget_bytes;
    int k;
    wf_search_outer_point *top;
    int ntop;
    frontier front;
    wf_search_outer_result *r;
    int have_probe;
    int probing;          /* 1 while the probe is scored: estimated even if the filter refuses it */
    wf_search_outer_point probe; /* the group's probe, reused when the loops reach it */
    wf_search_outer_point *rtop; /* the K best fitting plans that recompute uniformly and no pruning skips:
                             what per-stage recomputation refines after the enumeration */
    int nrtop;
    wf_search_outer_point *ptop; /* the UNEVEN_CANDIDATES best fitting pipelined plans with even stages,
                             one chunk per stage, uniform recomputation and no pruning skips:
                             what uneven stages refine (a fixed count, so --top does not change
                             the best plan) */
    int nptop;
    wf_search_outer_point *itop; /* the UNEVEN_CANDIDATES fastest pipelined plans of the same shape, fitting
                             or not: what the interlaced form refines (it holds less on the end
                             stages, so a plan too big as 1F1B may fit interlaced) */
    int nitop;
} search;

/* Plans pruning 3 skips (dominated: GPipe, ZeRO or overlap=0 over one
 * data-parallel rank) derive no recomputation candidates, so that pruned
 * and exhaustive searches derive the same ones. */
static int undominated(const wf_plan *p)
{
    return p->pipe == WF_PIPE_1F1B && (p->dp > 1 || (p->zero == 0 && p->overlap == 1));
}

static int plan_equal(const wf_plan *a, const wf_plan *b)
{
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->mbs == b->mbs &&
           a->vpp == b->vpp && a->recompute == b->recompute && a->sp == b->sp &&
           a->zero == b->zero && a->overlap == b->overlap && a->pipe == b->pipe &&
           a->comm.kind == b->comm.kind && a->comm.threshold_bytes == b->comm.threshold_bytes &&
           a->cp == b->cp && a->fp8 == b->fp8 && a->attn == b->attn && a->sw == b->sw && a->ep == b->ep &&
           a->etp == b->etp && a->imb == b->imb && a->rc_layers == b->rc_layers && a->rc_n == b->rc_n &&
           (a->rc_n == 0 || (memcmp(a->rc_kind_at, b->rc_kind_at, sizeof a->rc_kind_at) == 0 &&
                             memcmp(a->rc_layers_at, b->rc_layers_at, sizeof a->rc_layers_at) == 0)) &&
           a->stage_n == b->stage_n && a->coshard == b->coshard && strcmp(a->coshard_on, b->coshard_on) == 0 &&
           a->dap == b->dap && a->nf1b == b->nf1b &&
           a->interlace == b->interlace &&
           memcmp(a->stage_layers, b->stage_layers, sizeof a->stage_layers[0] * (size_t)a->stage_n) == 0;
}

static int point_fits(const search *s, const wf_search_outer_point *p)
{
    return p->est.fits && p->est.memory_per_device_bytes <= s->budget_bytes;
}

/* 1 when the search's filter (if any) accepts plan p. */
static int accepted(const search *s, const wf_plan *p)
{
    return !s->opts->accept || s->opts->accept(p, s->opts->accept_user);
}

/* Scores one candidate. *scored = 0 when the estimate rejects the plan or
 * the filter refuses it (the probe, s->probing, is estimated all the same
 * and not ranked). */
static wf_status score(search *s, const wf_plan *plan, wf_search_outer_point *out, int *scored)
{
    *scored = 0;
    int ok = accepted(s, plan);
    if (s->have_probe && plan_equal(plan, &s->probe.plan)) {
        *out = s->probe;
        *scored = ok;
        return WF_OK;
    }
    if (!ok && !s->probing)
        return WF_OK;
    out->plan = *plan;
    wf_status st = wf_estimate_plan(s->ctx, plan, s->batch, &out->est);
    if (st == WF_INVAL) {
        wf_clear_error();
        return WF_OK;
    }
    if (st != WF_OK)
        return st;
    *scored = 1;
    if (!ok)
        return WF_OK;
    s->r->searched++;
    if (!s->r->has_min ||
        out->est.memory_per_device_bytes < s->r->min_memory.est.memory_per_device_bytes ||
        (out->est.memory_per_device_bytes == s->r->min_memory.est.memory_per_device_bytes &&
         point_cmp(out, &s->r->min_memory) < 0)) {
        s->r->min_memory = *out;
        s->r->has_min = 1;
    }
    if (s->itop && s->transformer && plan->rc_n == 0 && plan->stage_n == 0 && !plan->interlace && plan->pp > 1 &&
        plan->vpp == 1 && plan->pipe == WF_PIPE_1F1B && undominated(plan))
        top_insert(s->itop, &s->nitop, UNEVEN_CANDIDATES, out);
    if (point_fits(s, out)) {
        s->r->fitting++;
        top_insert(s->top, &s->ntop, s->k, out);
        if (s->rtop && s->transformer && plan->rc_n == 0 && plan->recompute != WF_RECOMPUTE_NONE &&
            plan->pp > 1 && undominated(plan))
            top_insert(s->rtop, &s->nrtop, s->k, out);
        if (s->ptop && s->transformer && plan->rc_n == 0 && plan->stage_n == 0 && plan->pp > 1 &&
            plan->vpp == 1 && plan->pipe == WF_PIPE_1F1B && undominated(plan))
            top_insert(s->ptop, &s->nptop, UNEVEN_CANDIDATES, out);
        if ((st = frontier_insert(&s->front, out)) != WF_OK)
            return st;
    }
    return WF_OK;
}

typedef struct {
    int tp, pp, dp, zero, cp, ep, etp;
} group;

/* Gradient schedules tried with search_comm (dp > 1, overlapped): each at its
 * default bucket size; `auto` is the simulator's choice, not a schedule. */
static const wf_comm_kind COMM_KINDS[] = {WF_COMM_DDP, WF_COMM_WFBP, WF_COMM_HOROVOD,
                                          WF_COMM_BYTESCHEDULER, WF_COMM_MGWFBP, WF_COMM_DEAR};
#define NCOMM ((int)(sizeof COMM_KINDS / sizeof COMM_KINDS[0]))

/* Candidate lists of a group that do not depend on the micro-batch size. */
typedef struct {
    int nsp, sp[2];
    int nrc;
    wf_recompute rc[3];
    divs vpp;  /* divisors of layers / pp usable with this pp */
    divs mbs;  /* divisors of B / dp */
} lists;

static int sp_ok(const search *s, int tp)
{
    return s->transformer && tp > 1 && s->m->seq % tp == 0;
}

static wf_status group_lists(const search *s, const group *g, lists *l)
{
    memset(l, 0, sizeof *l);
    l->sp[l->nsp++] = 0;
    if (sp_ok(s, g->tp))
        l->sp[l->nsp++] = 1;
    l->rc[l->nrc++] = WF_RECOMPUTE_NONE;
    if (s->transformer)
        l->rc[l->nrc++] = WF_RECOMPUTE_SELECTIVE;
    l->rc[l->nrc++] = WF_RECOMPUTE_FULL;
    wf_status st;
    if (s->transformer && g->pp > 1) {
        if ((st = divisors(s->m->layers / g->pp, &l->vpp)) != WF_OK)
            return st;
    } else {
        l->vpp.v = malloc(sizeof *l->vpp.v);
        if (!l->vpp.v)
            return wf_errorf(WF_NOMEM, "out of memory");
        l->vpp.v[0] = 1;
        l->vpp.n = 1;
    }
    return divisors(s->batch / g->dp, &l->mbs);
}

static void lists_free(lists *l)
{
    free(l->vpp.v);
    free(l->mbs.v);
}

/* Layers of each model chunk of plan p. */
static int chunk_layers(const search *s, const wf_plan *p)
{
    return (int)(s->m->layers / ((int64_t)p->pp * p->vpp));
}

/* Megatron-LM's block method (--recompute-method block): plan `full`
 * (uniform full recomputation) fits. When the same plan without
 * recomputation does not, the fewest layers N per chunk recomputed fully
 * that fit make the fastest block plan (time grows with N, memory falls):
 * a bisection over N, each step one estimate, the plan found scored as a
 * candidate of its own. */
static wf_status try_block(search *s, const wf_plan *full)
{
    int L = chunk_layers(s, full);
    if (!s->transformer || L < 2)
        return WF_OK;
    wf_plan q = *full;
    q.recompute = WF_RECOMPUTE_NONE;
    wf_estimate e;
    wf_status st = wf_estimate_plan(s->ctx, &q, s->batch, &e);
    if (st != WF_OK) {
        wf_clear_error();
        return st == WF_INVAL ? WF_OK : st;
    }
    if (e.fits && e.memory_per_device_bytes <= s->budget_bytes)
        return WF_OK; /* no recomputation fits: that plan is faster, and enumerated */
    q.recompute = WF_RECOMPUTE_FULL;
    int lo = 0, hi = L; /* N = lo does not fit, N = hi does */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        q.rc_layers = mid;
        if ((st = wf_estimate_plan(s->ctx, &q, s->batch, &e)) != WF_OK) {
            wf_clear_error();
            return st == WF_INVAL ? WF_OK : st;
        }
        if (e.fits && e.memory_per_device_bytes <= s->budget_bytes)
            hi = mid;
        else
            lo = mid;
    }
    if (hi >= L)
        return WF_OK; /* every layer: the uniform plan itself */
    q.rc_layers = hi;
    wf_search_outer_point pt;
    int scored = 0;
    return score(s, &q, &pt, &scored);
}

/* Scores per-stage plan q as its plan string reads back (the canonical
 * value: runs merged, N = 0 stages none); a plan with more runs than a
 * string holds is skipped. */
static wf_status score_canonical(search *s, const wf_plan *q)
{
    char text[PLAN_TEXT];
    wf_plan_format(q, text, sizeof text);
    wf_plan r;
    if (wf_plan_parse(text, &r) != WF_OK) {
        wf_clear_error();
        return WF_OK;
    }
    r.given = q->given;
    wf_search_outer_point pt;
    int scored = 0;
    return score(s, &r, &pt, &scored);
}

/* Recomputation per stage for a plan of the top (recompute=full, uniform or
 * by block): under 1F1B stage s holds pp - s micro-batches, so later stages
 * fit with fewer layers recomputed. From the last stage to the second, each
 * stage's N is bisected down to the fewest that keeps the plan fitting (the
 * earlier stages as they are): the steady state is set by the slowest stage,
 * so this shortens the fill and drain (the bubble) and the stages' work. */
static wf_status try_per_stage(search *s, const wf_plan *p)
{
    int L = chunk_layers(s, p);
    if (!s->transformer || p->pp < 2 || p->pp > WF_PLAN_RC_STAGES || p->rc_n > 0)
        return WF_OK;
    if (p->recompute == WF_RECOMPUTE_SELECTIVE) {
        /* Selective everywhere: from the last stage to the second, a stage
         * that fits without recomputation drops it. */
        wf_plan q = *p;
        q.rc_n = p->pp;
        for (int k = 0; k < p->pp; k++)
            q.rc_kind_at[k] = WF_RECOMPUTE_SELECTIVE;
        int changed = 0;
        wf_estimate e;
        for (int k = p->pp - 1; k >= 1; k--) {
            q.rc_kind_at[k] = WF_RECOMPUTE_NONE;
            wf_status st = wf_estimate_plan(s->ctx, &q, s->batch, &e);
            if (st != WF_OK) {
                wf_clear_error();
                return st == WF_INVAL ? WF_OK : st;
            }
            if (e.fits && e.memory_per_device_bytes <= s->budget_bytes)
                changed = 1;
            else
                q.rc_kind_at[k] = WF_RECOMPUTE_SELECTIVE;
        }
        if (!changed)
            return WF_OK;
        return score_canonical(s, &q);
    }
    if (p->recompute != WF_RECOMPUTE_FULL)
        return WF_OK;
    int n0 = p->rc_layers > 0 ? p->rc_layers : L;
    wf_plan q = *p;
    q.rc_n = p->pp;
    for (int k = 0; k < p->pp; k++) {
        q.rc_kind_at[k] = WF_RECOMPUTE_FULL;
        q.rc_layers_at[k] = n0;
    }
    wf_estimate e;
    int changed = 0;
    for (int k = p->pp - 1; k >= 1; k--) {
        int lo = -1, hi = q.rc_layers_at[k - 1]; /* lo does not fit (or none), hi does */
        while (hi - lo > 1) {
            int mid = (lo + hi) / 2;
            /* N = 0: the stage recomputes nothing. */
            q.rc_kind_at[k] = mid > 0 ? WF_RECOMPUTE_FULL : WF_RECOMPUTE_NONE;
            q.rc_layers_at[k] = mid;
            wf_status st = wf_estimate_plan(s->ctx, &q, s->batch, &e);
            if (st != WF_OK) {
                wf_clear_error();
                return st == WF_INVAL ? WF_OK : st;
            }
            if (e.fits && e.memory_per_device_bytes <= s->budget_bytes)
                hi = mid;
            else
                lo = mid;
        }
        q.rc_kind_at[k] = hi > 0 ? WF_RECOMPUTE_FULL : WF_RECOMPUTE_NONE;
        q.rc_layers_at[k] = hi;
        changed |= hi < n0;
    }
    if (!changed)
        return WF_OK;
    /* The plan value as the parser would make it (N = 0 stages are none). */
    for (int k = 0; k < q.rc_n; k++)
        if (q.rc_layers_at[k] >= L)
            q.rc_layers_at[k] = 0;
    return score_canonical(s, &q);
}

/* Uneven stages for pipelined plan p (from the top of the even ones): its
 * 1F1B pipeline without interleaving, the first stage holding f layers
 * fewer and the last e fewer than the even L/pp (f < 0: more), the layers
 * they give up spread evenly over the middle stages (splits that leave the
 * middle stages unequal are not tried: Megatron-LM's first/last-stage
 * counts cannot express them, and the estimate's fill-and-drain term, a
 * flow shop's, is optimistic for them); with two stages, what the last
 * gives up goes to the first. The
 * embedding sits on the first stage and the head with the loss on the
 * last, so a large vocabulary makes the last stage (and the first) slow and
 * heavy; each split is one estimate, scored as a candidate of its own. */
static wf_status try_uneven(search *s, const wf_plan *p)
{
    const int pp = p->pp, L = (int)s->m->layers;
    if (!s->transformer || pp < 2 || pp > WF_PLAN_RC_STAGES || p->stage_n > 0 || p->rc_n > 0 || L % pp != 0 ||
        p->interlace)
        return WF_OK;
    const int Ls = L / pp;
    wf_plan q = *p;
    q.stage_n = pp;
    for (int e = 0; e < Ls; e++)
        for (int f = -Ls / 2; f < Ls; f++) {
            if (e == 0 && f == 0)
                continue;
            int first = Ls - f, last = Ls - e, rest = L - first - last, mid = pp - 2;
            if (first < 1 || last < 1 || (mid == 0 && rest != 0) || (mid > 0 && (rest < mid || rest % mid != 0)))
                continue;
            q.stage_layers[0] = first;
            q.stage_layers[pp - 1] = last;
            for (int k = 0; k < mid; k++)
                q.stage_layers[1 + k] = rest / mid;
            wf_search_outer_point pt;
            int scored = 0;
            wf_status st = score(s, &q, &pt, &scored);
            if (st != WF_OK)
                return st;
        }
    return WF_OK;
}

/* Co-shard pieces the search tries (powers of two up to this). */
#define COSHARD_MAX 64

/* Per-op co-shard (coshard=K@PATTERN): the ops whose activations the
 * search splits into pieces, per model family. SuperScaler co-shards the
 * attention of Swin, and AlphaFold2's attentions, triangle ops and outer
 * product mean (Lin et al., OSDI'23, section 5), leaving the rest whole.
 * A family's first pattern is its widest (it matches every op the others
 * do), so it holds the least memory of them. */
static const struct {
    wf_family family;
    const char *pattern;
} COSHARD_OPS[] = {
    {WF_FAMILY_SWIN, "attention"},
    {WF_FAMILY_ALPHAFOLD, "attention+*.tri_*+*.outer.*"},
    {WF_FAMILY_ALPHAFOLD, "attention"},
};
#define NCOSHARD_OPS ((int)(sizeof COSHARD_OPS / sizeof COSHARD_OPS[0]))
/* Pieces per-op co-shard tries (powers of two up to this): the chosen ops
 * keep nothing whatever K, so more pieces only shrink one piece's buffer. */
#define COSHARD_OPS_MAX 8

/* The per-op co-shard form of q with pattern j of COSHARD_OPS and k pieces. */
static wf_plan per_op_variant(const wf_plan *q, int j, int k)
{
    wf_plan v = *q;
    v.coshard = k;
    snprintf(v.coshard_on, sizeof v.coshard_on, "%s", COSHARD_OPS[j].pattern);
    return v;
}

/* Per-op co-shard variants of q (its nf1b kept) for each pattern of the
 * model's family: 2, 4, ... pieces until one fits. The most pieces hold
 * the least memory (the chosen ops keep nothing; one piece lives), so a
 * pattern whose COSHARD_OPS_MAX pieces do not fit is not tried further, and
 * when the family's widest does not, no pattern is. */
static wf_status try_per_op(search *s, const wf_plan *q)
{
    for (int j = 0; j < NCOSHARD_OPS; j++) {
        if (COSHARD_OPS[j].family != s->m->family)
            continue;
        const int widest = j == 0 || COSHARD_OPS[j - 1].family != s->m->family;
        wf_plan v = per_op_variant(q, j, COSHARD_OPS_MAX);
        wf_search_outer_point pt;
        int scored = 0;
        wf_status st = score(s, &v, &pt, &scored);
        if (st != WF_OK)
            return st;
        /* The widest pattern's most pieces do not fit: nothing narrower will. */
        if ((!scored || !point_fits(s, &pt)) && widest)
            return WF_OK;
        if (!scored || !point_fits(s, &pt))
            continue;
        for (int k = 2; k < COSHARD_OPS_MAX; k *= 2) {
            v = per_op_variant(q, j, k);
            if ((st = score(s, &v, &pt, &scored)) != WF_OK)
                return st;
            if (scored && point_fits(s, &pt))
                break;
        }
    }
    return WF_OK;
}

/* The per-op variants try_per_op may score that the filter takes. */
static int64_t count_per_op(const search *s, const wf_plan *q)
{
    int64_t n = 0;
    for (int j = 0; j < NCOSHARD_OPS; j++)
        for (int k = 2; COSHARD_OPS[j].family == s->m->family && k <= COSHARD_OPS_MAX; k *= 2) {
            wf_plan v = per_op_variant(q, j, k);
            n += accepted(s, &v);
        }
    return n;
}

/* Other models: SuperScaler's plans around candidate p (scored already;
 * fits says whether it fit). A model with recycling also runs NF1B (its
 * forwards without gradient pipelined over every micro-batch first); a plan
 * that recomputes fully and does not fit is co-sharded into 2, 4, ... pieces
 * until it fits (more pieces are only slower: smaller kernels, one more
 * launch each), with and without NF1B. */
static wf_status try_recycle_coshard(search *s, const wf_plan *p, int fits)
{
    if (s->transformer)
        return WF_OK;
    const int nf_max = s->m->recycle > 0 ? 1 : 0;
    for (int nf = 0; nf <= nf_max; nf++) {
        wf_plan q = *p;
        q.nf1b = nf;
        wf_search_outer_point pt;
        int scored = 0, ok = fits;
        wf_status st;
        if (nf > 0) {
            if ((st = score(s, &q, &pt, &scored)) != WF_OK)
                return st;
            ok = scored && point_fits(s, &pt);
        }
        /* A plan that does not fit: its chosen ops in pieces (per-op
         * co-shard, with or without full recomputation of the rest), from
         * the plans pruning 3 keeps (undominated), without NF1B (which
         * would double the search's estimates for a model with recycling). */
        if (!ok && q.coshard <= 1 && !q.nf1b && undominated(&q) && (st = try_per_op(s, &q)) != WF_OK)
            return st;
        if (ok || q.recompute != WF_RECOMPUTE_FULL)
            continue;
        for (int k = 2; k <= COSHARD_MAX; k *= 2) {
            q.coshard = k;
            if ((st = score(s, &q, &pt, &scored)) != WF_OK)
                return st;
            if (scored && point_fits(s, &pt))
                break;
        }
    }
    return WF_OK;
}

/* DAP group sizes the search tries (powers of two within a node, up to this). */
#define DAP_MAX 8

/* The largest DAP group of the search: a node's devices (FastFold's DAP runs
 * inside a node), at most DAP_MAX; 1 for models DAP does not shard. */
static int dap_max(const search *s)
{
    if (s->transformer || s->m->family != WF_FAMILY_ALPHAFOLD)
        return 1;
    int64_t node = s->c->nlevels > 0 ? s->c->level[0].size : 1;
    return node < DAP_MAX ? (int)node : DAP_MAX;
}

/* AlphaFold2: Dynamic Axial Parallelism (dap.c) carved out of candidate p's
 * data-parallel devices, 2, 4, ... per group, each scored with its NF1B and
 * co-shard variants (try_recycle_coshard), where it may pay: p does not
 * fit (DAP divides a block's activations), or p is pipelined (fewer data-
 * parallel replicas, more micro-batches per pipeline, a smaller bubble). A
 * plan of one stage that fits only loses to its DAP form: the same work in
 * smaller kernels, and the group's collectives on top. */
static wf_status try_dap(search *s, const wf_plan *p, int fits)
{
    const int kmax = fits && p->pp == 1 ? 1 : dap_max(s);
    for (int k = 2; k <= kmax && p->dap <= 1 && p->dp % k == 0; k *= 2) {
        wf_plan q = *p;
        q.dp = p->dp / k;
        q.dap = k;
        wf_search_outer_point pt;
        int scored = 0;
        wf_status st = score(s, &q, &pt, &scored);
        if (st == WF_OK)
            st = try_recycle_coshard(s, &q, scored && point_fits(s, &pt));
        if (st != WF_OK)
            return st;
    }
    return WF_OK;
}

/* The candidates try_recycle_coshard derives from q (q among them) that
 * the filter takes. */
static int64_t count_variants(const search *s, const wf_plan *q)
{
    int64_t n = 0;
    for (int nf = 0; nf <= (s->m->recycle > 0 ? 1 : 0); nf++) {
        wf_plan v = *q;
        v.nf1b = nf;
        n += accepted(s, &v);
        if (q->coshard <= 1 && !v.nf1b && undominated(&v))
            n += count_per_op(s, &v);
        for (int k = 2; q->recompute == WF_RECOMPUTE_FULL && k <= COSHARD_MAX; k *= 2) {
            v.coshard = k;
            n += accepted(s, &v);
        }
    }
    return n;
}

/* The interlaced form of pipelined plan p (docs/planner.md): the embedding
 * and the head over every device of the pipeline; one estimate (the
 * validation refuses what it cannot run), scored as a candidate. */
static wf_status try_interlace(search *s, const wf_plan *p)
{
    if (!s->transformer || p->interlace || wf_model_is_moe(s->m))
        return WF_OK;
    wf_plan q = *p;
    q.interlace = 1;
    wf_search_outer_point pt;
    int scored = 0;
    return score(s, &q, &pt, &scored);
}

/* One line of candidates: plan p with every micro-batch size (ascending). */
static wf_status walk_line(search *s, const wf_plan *p, const divs *mbs, int eval, int mem_prune,
                           int64_t *count)
{
    for (int im = 0; im < mbs->n; im++) {
        int64_t micro = s->batch / ((int64_t)p->dp * mbs->v[im]);
        if (p->vpp > 1 && micro % p->pp != 0)
            continue;
        wf_plan q = *p;
        q.mbs = (int)mbs->v[im];
        if (!eval) {
            /* Other models: also NF1B (with recycling) and, recomputing
             * fully, each co-shard count (try_recycle_coshard), each
             * counted when the filter takes it (a filter may take the
             * variants alone: the default plan's co-shard / NF1B search). */
            if (s->transformer) {
                *count += accepted(s, &q);
                continue;
            }
            *count += count_variants(s, &q);
            for (int k = 2; k <= dap_max(s) && q.dp % k == 0; k *= 2) {
                wf_plan v = q;
                v.dp = q.dp / k;
                v.dap = k;
                *count += count_variants(s, &v);
            }
            continue;
        }
        wf_search_outer_point pt;
        int scored = 0;
        wf_status st = score(s, &q, &pt, &scored);
        if (st != WF_OK)
            return st;
        if ((st = try_recycle_coshard(s, &q, scored && point_fits(s, &pt))) != WF_OK ||
            (st = try_dap(s, &q, scored && point_fits(s, &pt))) != WF_OK)
            return st;
        /* Block recomputation from the plans no pruning skips (pruning 3's
         * dominated points derive nothing), so that pruned and exhaustive
         * searches derive the same candidates. */
        if (scored && q.recompute == WF_RECOMPUTE_FULL && point_fits(s, &pt) && !s->opts->uniform_recompute &&
            undominated(&q) && (st = try_block(s, &q)) != WF_OK)
            return st;
        /* Pruning 2: memory does not decrease with mbs. */
        if (mem_prune && scored && !point_fits(s, &pt))
            break;
    }
    return WF_OK;
}

/* Walks the candidates of one group. With eval == 0 it only counts them
 * (the whole divisible space, no pruning); otherwise it scores them, pruning
 * unless the search is exhaustive. */
static wf_status walk_group(search *s, const group *g, int eval, int64_t *count)
{
    lists l;
    wf_status st = group_lists(s, g, &l);
    if (st != WF_OK) {
        lists_free(&l);
        return st;
    }
    int prune = eval && !s->exhaustive;
    int mem_prune = prune && s->transformer;
    wf_plan base;
    wf_plan_default(&base);
    base.dp = g->dp;
    base.tp = g->tp;
    base.pp = g->pp;
    base.zero = g->zero;
    base.cp = g->cp;
    base.ep = g->ep;
    base.etp = g->etp;
    base.sw = s->opts->sw;
    base.fp8 = s->opts->fp8;
    base.attn = s->opts->attn;
    s->have_probe = 0;
    if (mem_prune) {
        /* Pruning 1: the probe (mbs 1, no interleaving, full recomputation,
         * sp when possible) gives the group's weights + gradients + optimizer
         * state per device. */
        wf_plan probe = base;
        probe.recompute = WF_RECOMPUTE_FULL;
        probe.sp = sp_ok(s, g->tp);
        int scored = 0;
        s->probing = 1;
        st = score(s, &probe, &s->probe, &scored);
        s->probing = 0;
        if (st != WF_OK)
            goto done;
        if (!scored)
            goto done; /* the estimate rejects the group's degrees */
        s->have_probe = 1;
        if (s->probe.est.mem_weights_bytes > s->budget_bytes)
            goto done;
    }
    int nover = prune && g->dp == 1 ? 1 : 2;
    for (int isp = 0; isp < l.nsp; isp++)
        for (int iv = 0; iv < l.vpp.n; iv++) {
            int vpp = (int)l.vpp.v[iv];
            /* GPipe ties 1F1B's bubble only on equal stages; a model that is
             * not a transformer has stages of unequal time, where GPipe's
             * flow shop can end first (VGG-16 on 2 V100 nodes, pp=4: 0.9%). */
            int npipe = (prune && s->transformer) || vpp > 1 ? 1 : 2;
            for (int ipipe = 0; ipipe < npipe; ipipe++)
                for (int io = 0; io < nover; io++) {
                    int overlap = 1 - io;
                    int ncomm = s->search_comm && g->dp > 1 && overlap ? NCOMM : 1;
                    for (int ic = 0; ic < ncomm; ic++)
                        for (int irc = 0; irc < l.nrc; irc++) {
                            wf_plan p = base;
                            p.sp = l.sp[isp];
                            p.vpp = vpp;
                            p.pipe = ipipe ? WF_PIPE_GPIPE : WF_PIPE_1F1B;
                            p.overlap = overlap;
                            p.comm.kind = COMM_KINDS[ic];
                            p.recompute = l.rc[irc];
                            if ((st = walk_line(s, &p, &l.mbs, eval, mem_prune, count)) != WF_OK)
                                goto done;
                        }
                }
        }
done:
    s->have_probe = 0;
    lists_free(&l);
    return st;
}

/* ZeRO stages a group takes: 0..3 with dp > 1; with dp = 1 sharding is over
 * one rank, the same plan as zero=0 (pruning 3) unless exhaustive. Not under
 * FSDP: there a sharded model keeps its fp32 parameters as the shard and no
 * 16-bit copy (docs/cost-model.md, "Memory per framework"), so zero=2/3 at
 * dp = 1 holds less than zero=0 and is a point of its own. */
static int zero_max(const search *s, int dp, int exhaustive)
{
    return dp > 1 || exhaustive || s->opts->sw == WF_SW_FSDP ? 3 : 0;
}

wf_status wf_search_outer(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                          const wf_search_outer_opts *opts, wf_search_outer_result *r)
{
    memset(r, 0, sizeof *r);
    wf_search_outer_opts dflt;
    if (!opts) {
        wf_search_outer_opts_default(&dflt);
        opts = &dflt;
    }
    if (batch < 1)
        return wf_errorf(WF_INVAL, "batch=%lld must be >= 1", (long long)batch);
    if (opts->top_k < 1 || opts->top_k > 1000000)
        return wf_errorf(WF_INVAL, "top=%d: expected 1..1000000 plans", opts->top_k);
    int64_t have = wf_cluster_devices(c);
    int64_t n = opts->devices > 0 ? opts->devices : have;
    if (opts->devices < 0 || n > have)
        return wf_errorf(WF_INVAL, "devices=%lld: cluster '%s' has %lld devices",
                         (long long)opts->devices, c->name, (long long)have);
    int64_t per_node = c->level[0].size;
    double t0 = wf_now_s();

    search s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.c = c;
    s.batch = batch;
    s.devices = n;
    s.transformer = wf_model_is_transformer(m);
    s.exhaustive = opts->exhaustive;
    s.search_comm = opts->search_comm;
    s.opts = opts;
    s.budget_bytes = opts->max_memory_bytes > 0 ? opts->max_memory_bytes : c->dev.mem_bytes;
    s.k = opts->top_k;
    s.r = r;
    r->devices = n;
    r->budget_bytes = s.budget_bytes;

    wf_status st = wf_cost_ctx_create(m, c, &s.ctx);
    if (st != WF_OK)
        return st;
    s.top = calloc((size_t)s.k, sizeof *s.top);
    if (!opts->uniform_recompute)
        s.rtop = calloc((size_t)s.k, sizeof *s.rtop);
    if (!opts->even_stages) {
        s.ptop = calloc(UNEVEN_CANDIDATES, sizeof *s.ptop);
        s.itop = calloc(UNEVEN_CANDIDATES, sizeof *s.itop);
    }
    divs tps = {0, NULL}, pps = {0, NULL};
    group *groups = NULL;
    int64_t *gspace = NULL;
    int ngroups = 0, capg = 0;
    if (!s.top || (!opts->uniform_recompute && !s.rtop) || (!opts->even_stages && (!s.ptop || !s.itop))) {
        st = wf_errorf(WF_NOMEM, "out of memory for the top %d plans", s.k);
        goto out;
    }

    /* The groups, in a fixed order: tp, then pp, then ZeRO stage. */
    if ((st = divisors(n, &tps)) != WF_OK)
        goto out;
    for (int it = 0; it < tps.n; it++) {
        int64_t tp = tps.v[it];
        if (!s.transformer && tp > 1)
            break;
        if (!opts->tp_cross_node && per_node % tp != 0)
            continue;
        if (s.transformer && (m->heads % tp != 0 || m->hidden % tp != 0 ||
                              (m->kv_heads > 0 && m->kv_heads % tp != 0) ||
                              (m->ffn > 0 && m->ffn % tp != 0)))
            continue;
        /* Context parallelism: searched for long sequences where the
         * profile has it (the ring pays off once attention dominates). */
        int cps[5] = {opts->cp >= 1 ? opts->cp : 1}, ncp = 1;
        if (opts->cp == 0 && s.transformer && m->seq >= 8192 &&
            (opts->sw == WF_SW_MEGATRON_CORE || opts->sw == WF_SW_FSDP))
            for (int cp = 2; cp <= 16; cp *= 2)
                if (m->seq % (2 * cp) == 0)
                    cps[ncp++] = cp;
        for (int ic = 0; ic < ncp; ic++) {
        int64_t cp = cps[ic];
        if ((n / tp) % cp != 0)
            continue;
        free(pps.v);
        pps.v = NULL;
        if ((st = divisors(n / tp / cp, &pps)) != WF_OK)
            goto out;
        for (int ip = 0; ip < pps.n; ip++) {
            int64_t pp = pps.v[ip], dp = n / tp / cp / pp;
            if (s.transformer && m->layers % pp != 0)
                continue;
            if (batch % dp != 0)
                continue;
            /* Expert parallelism for models with experts: ep = 1 (experts
             * split like the MLP over tp), or ep | experts over the stage's
             * ranks with etp = 1 (Megatron-Core's usual MoE recipe). */
            int eps[16] = {1}, nep = 1;
            if (wf_model_is_moe(m))
                for (int64_t e = 2; e <= m->experts && nep < 16; e++)
                    if (m->experts % e == 0 && (tp * cp * dp) % e == 0)
                        eps[nep++] = (int)e;
            for (int ie = 0; ie < nep; ie++)
            for (int z = 0; z <= 3; z++) {
                if (ngroups == capg) {
                    /* Two arrays of one capacity: each grows from a copy of it. */
                    int cg = capg, cs = capg;
                    if (wf_grow(&groups, &cg, (int64_t)ngroups + 1, sizeof *groups, 64) != 0 ||
                        wf_grow(&gspace, &cs, (int64_t)ngroups + 1, sizeof *gspace, 64) != 0) {
                        st = wf_errorf(WF_NOMEM, "out of memory listing plan groups");
                        goto out;
                    }
                    capg = cg;
                }
                group g = {(int)tp, (int)pp, (int)dp, z, (int)cp, eps[ie], eps[ie] > 1 ? 1 : 0};
                gspace[ngroups] = 0;
                if ((st = walk_group(&s, &g, 0, &gspace[ngroups])) != WF_OK)
                    goto out;
                r->space += gspace[ngroups];
                groups[ngroups++] = g;
            }
        }
        }
    }
    if (r->space == 0 && opts->accept) {
        st = wf_errorf(WF_INVAL, "no plan of model '%s' over %lld devices with batch=%lld passes the plan "
                                 "filter", m->name, (long long)n, (long long)batch);
        goto out;
    }
    if (r->space == 0) {
        st = wf_errorf(WF_INVAL, "no plan divides model '%s' (heads=%lld, layers=%lld) over %lld "
                                 "devices with batch=%lld (tp within a node of %lld)",
                       m->name, (long long)m->heads, (long long)m->layers, (long long)n,
                       (long long)batch, (long long)per_node);
        goto out;
    }

    int64_t done_space = 0;
    for (int i = 0; i < ngroups; i++) {
        if (groups[i].zero <= zero_max(&s, groups[i].dp, s.exhaustive) &&
            (st = walk_group(&s, &groups[i], 1, NULL)) != WF_OK)
            goto out;
        done_space += gspace[i];
        if (opts->progress)
            opts->progress((double)done_space / (double)r->space, opts->progress_user);
    }
    /* Recomputation per stage for the plans of the top that recompute. */
    if (s.nrtop > 0) {
        int ncand = s.nrtop;
        wf_plan *cand = malloc((size_t)ncand * sizeof *cand);
        if (!cand) {
            st = wf_errorf(WF_NOMEM, "out of memory refining recomputation");
            goto out;
        }
        for (int i = 0; i < ncand; i++)
            cand[i] = s.rtop[i].plan;
        free(s.rtop);
        s.rtop = NULL;
        for (int i = 0; i < ncand && st == WF_OK; i++)
            st = try_per_stage(&s, &cand[i]);
        free(cand);
        if (st != WF_OK)
            goto out;
    }
    /* The interlaced form of the fastest pipelined plans (fitting or not). */
    if (s.nitop > 0) {
        int ncand = s.nitop;
        wf_plan *cand = malloc((size_t)ncand * sizeof *cand);
        if (!cand) {
            st = wf_errorf(WF_NOMEM, "out of memory refining pipeline stages");
            goto out;
        }
        for (int i = 0; i < ncand; i++)
            cand[i] = s.itop[i].plan;
        free(s.itop);
        s.itop = NULL;
        for (int i = 0; i < ncand && st == WF_OK; i++)
            st = try_interlace(&s, &cand[i]);
        free(cand);
        if (st != WF_OK)
            goto out;
    }
    /* Uneven stages for the best pipelined plans. */
    if (s.nptop > 0) {
        int ncand = s.nptop;
        wf_plan *cand = malloc((size_t)ncand * sizeof *cand);
        if (!cand) {
            st = wf_errorf(WF_NOMEM, "out of memory refining pipeline stages");
            goto out;
        }
        for (int i = 0; i < ncand; i++)
            cand[i] = s.ptop[i].plan;
        free(s.ptop);
        s.ptop = NULL;
        for (int i = 0; i < ncand && st == WF_OK; i++)
            st = try_uneven(&s, &cand[i]);
        free(cand);
        if (st != WF_OK)
            goto out;
    }
    r->pruned = r->space - r->searched;
    if (r->pruned < 0)
        r->pruned = 0;

    r->ntop = s.ntop;
    r->top = s.top;
    s.top = NULL;
    r->npareto = s.front.n;
    r->pareto = s.front.v;
    s.front.v = NULL;
    r->search_time_s = wf_now_s() - t0;
    if (r->ntop == 0) {
        if (!r->has_min) {
            st = wf_errorf(WF_INVAL, "no plan of model '%s' over %lld devices with batch=%lld passes "
                                     "the estimate's checks", m->name, (long long)n, (long long)batch);
            goto out;
        }
        char text[PLAN_TEXT];
        wf_plan_format(&r->min_memory.plan, text, sizeof text);
        st = wf_errorf(WF_NOFIT, "no plan fits: the smallest memory found is %.2f GiB per device "
                                 "(%s), the budget is %.2f GiB",
                       r->min_memory.est.memory_per_device_bytes / GIB, text, s.budget_bytes / GIB);
    }
out:
    free(s.top);
    free(s.rtop);
    free(s.ptop);
    free(s.itop);
    free(s.front.v);
    free(tps.v);
    free(pps.v);
    free(groups);
    free(gspace);
    wf_cost_ctx_free(s.ctx);
    if (!r->search_time_s)
        r->search_time_s = wf_now_s() - t0;
    return st;
}

int wf_search_outer_device_counts(const wf_cluster *c, int64_t lo, int64_t hi, int64_t *out, int cap)
{
    int64_t have = wf_cluster_devices(c), per_node = c->level[0].size;
    int count = 0;
    if (lo < 1)
        lo = 1;
    if (hi > have)
        hi = have;
    for (int64_t k = lo; k <= hi; k++) {
        int whole = k % per_node == 0;
        int part = k < per_node && per_node % k == 0;
        if (!whole && !part)
            continue;
        if (count < cap)
            out[count] = k;
        count++;
    }
    return count;
}
