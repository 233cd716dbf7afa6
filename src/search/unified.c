/* One search space on one cost model (docs/planner.md, "One search space").
 *
 * The candidates are op-level plans: layouts on a mesh with stages, and the
 * keys that are not layouts (recompute, ZeRO, the schedules, vpp). Two
 * searches propose layouts; one cost model (wf_estimate_layouts, through
 * wf_layout_cost) ranks every candidate:
 *
 *   Megatron's layouts   the outer search (wf_search_outer) enumerates the
 *                        whole-model space (dp x tp x pp, mbs, vpp,
 *                        recompute, ZeRO, sp, overlap) on the closed form,
 *                        which is the one model on Megatron's descriptor
 *                        (tests/test_onecost.c): its fastest plans are
 *                        candidates as they are, lowered to their layouts;
 *   other layouts        the op-level search (wf_search_opplan: per-op SBP
 *                        signatures on every mesh and stage count) proposes
 *                        layouts on its own proxy objective; each is costed
 *                        by the one model under every recomputation and
 *                        ZeRO stage it can take.
 *
 * The best is the fastest that fits the one memory budget (the device's
 * memory, the reserve counted in every plan's memory); ties go to Megatron's
 * layouts. Because the outer search's best is a candidate, the result is
 * never slower than it. */
#include "weft/layout.h"
#include "weft/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wf_search_unified_result_free(wf_search_unified_result *r)
{
    if (!r)
        return;
    wf_layout_free(&r->plan);
    memset(r, 0, sizeof *r);
}

/* Copies layouts ol (mesh, stages, signatures, storage) with micro-batch
 * count mb and keys into out. */
static int copy_layouts(const wf_layout *ol, int64_t mb, const wf_plan *keys, wf_layout *out)
{
    int ok = wf_layout_set(out, ol->mesh, ol->pp, mb) == WF_OK && wf_layout_set_keys(out, keys) == WF_OK;
    for (int i = 0; ok && i < ol->nlayouts; i++)
        ok = wf_layout_add_sig(out, ol->op[i], ol->sig[i]) == WF_OK;
    for (int i = 0; ok && i < ol->nstorage; i++)
        ok = wf_layout_add_storage(out, ol->storage_stage[i], ol->tensor[i], ol->layout[i]) == WF_OK;
    for (int s = 0; ok && s < ol->pp; s++)
        ok = ol->stage_first[s] && wf_layout_set_stage(out, s, ol->stage_first[s]) == WF_OK;
    return ok;
}

/* Costs layouts ol (their mesh and stages) under the keys of base and every
 * recomputation, ZeRO stage and micro-batch count of ms[nm]; keeps the best
 * that fits in r. The layouts are read once per micro-batch count (the
 * descriptor does not depend on recomputation or ZeRO). */
static void try_layouts(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                        double budget, const wf_layout *ol, const wf_plan *base, const int64_t *ms, int nm,
                        wf_search_unified_result *r)
{
    for (int k = 0; k < nm; k++) {
        if (ms[k] < 1 || batch % ms[k] != 0)
            continue;
        wf_layout cand;
        wf_layout_init(&cand);
        wf_cost_layout L;
        wf_plan p;
        if (!copy_layouts(ol, ms[k], base, &cand) ||
            wf_layout_descriptor(m, c, ctx, batch, &cand, &L, &p) != WF_OK) {
            wf_layout_free(&cand);
            continue;
        }
        int best_rc = -1, best_z = -1, best_n = 0;
        wf_estimate best_e;
        const int chunk = wf_model_is_transformer(m) ? (int)(m->layers / ((int64_t)p.pp * p.vpp)) : 0;
        for (int z = 0; z < 4; z++) {
            int none_fits = 0;
            for (int rc = 0; rc < 3; rc++) {
                wf_plan q = p;
                q.recompute = (wf_recompute)rc;
                q.rc_n = 0;
                q.rc_layers = 0;
                q.zero = z;
                wf_estimate e;
                if (wf_estimate_layouts(ctx, &q, &L, batch, &e) != WF_OK)
                    continue;
                r->costed++;
                int fits = e.memory_per_device_bytes <= budget;
                none_fits |= rc == WF_RECOMPUTE_NONE && fits;
                int n = 0;
                if (rc == WF_RECOMPUTE_FULL && fits && !none_fits && chunk >= 2) {
                    /* Megatron's block method: the fewest layers per chunk
                     * recomputed fully that fit (bisection, as the outer
                     * search does). */
                    int lo = 0, hi = chunk;
                    wf_estimate eb, best_b = e;
                    while (hi - lo > 1) {
                        q.rc_layers = (lo + hi) / 2;
                        if (wf_estimate_layouts(ctx, &q, &L, batch, &eb) != WF_OK)
                            break;
                        r->costed++;
                        if (eb.memory_per_device_bytes <= budget) {
                            hi = q.rc_layers;
                            best_b = eb;
                        } else {
                            lo = q.rc_layers;
                        }
                    }
                    if (hi < chunk) {
                        n = hi;
                        e = best_b;
                    }
                }
                if (fits && (!r->has_best || e.iteration_time_s < r->est.iteration_time_s) &&
                    (best_rc < 0 || e.iteration_time_s < best_e.iteration_time_s)) {
                    best_rc = rc;
                    best_z = z;
                    best_n = n;
                    best_e = e;
                }
            }
        }
        wf_cost_layout_free(&L);
        if (best_rc >= 0) {
            wf_plan keys = *base;
            keys.recompute = (wf_recompute)best_rc;
            keys.rc_layers = best_n;
            keys.rc_n = 0;
            keys.zero = best_z;
            if (wf_layout_set_keys(&cand, &keys) == WF_OK) {
                wf_layout_free(&r->plan);
                r->plan = cand;
                wf_layout_init(&cand);
                r->est = best_e;
                r->as_plan = p;
                r->as_plan.recompute = keys.recompute;
                r->as_plan.rc_layers = keys.rc_layers;
                r->as_plan.rc_n = 0;
                r->as_plan.zero = keys.zero;
                r->has_best = 1;
                r->megatron = 0;
                r->lowered = 1;
                r->perlayer = 0;
            }
        }
        wf_layout_free(&cand);
    }
    wf_clear_error();
}

/* A mesh and stage count whose layouts the op-level search proposes. */
typedef struct {
    int64_t dp, mp;
    int pp;
    wf_plan keys; /* the outer plan it came from: its keys and micro-batch */
} shape;

static int add_shape(shape *sh, int n, int cap, int64_t dp, int64_t mp, int pp, const wf_plan *keys)
{
    if (mp < 2 || n >= cap)
        return n;
    for (int i = 0; i < n; i++)
        if (sh[i].dp == dp && sh[i].mp == mp && sh[i].pp == pp)
            return n;
    sh[n].dp = dp;
    sh[n].mp = mp;
    sh[n].pp = pp;
    sh[n].keys = *keys;
    return n + 1;
}

/* ol's layouts with the stages and vpp of the lowering of whole-model plan
 * p (a transformer's stages are layer ranges), into out. */
static wf_status with_stages_of(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_plan *p,
                                const wf_layout *ol, wf_layout *out)
{
    wf_layout low;
    wf_layout_init(&low);
    wf_plan q = *p; /* the same stages without Megatron's splits (which may not divide) */
    q.tp = 1;
    q.sp = 0;
    wf_status st = wf_plan_lower(m, c, &q, batch, &low);
    if (st == WF_OK)
        st = wf_layout_set(out, ol->mesh, low.pp, low.micro_batches);
    for (int i = 0; st == WF_OK && i < ol->nlayouts; i++)
        st = wf_layout_add_sig(out, ol->op[i], ol->sig[i]);
    for (int s = 0; st == WF_OK && s < low.pp; s++)
        st = low.stage_first[s] ? wf_layout_set_stage(out, s, low.stage_first[s]) : WF_INVAL;
    wf_layout_free(&low);
    return st;
}

/* The op-level search's layouts on mesh dp x mp (the outer axis data-
 * parallel), costed by the one model under the shape's keys, its micro-batch
 * and the search's, every recomputation and ZeRO stage. A transformer's
 * layouts are searched on one stage's mesh and run on the stages (layer
 * ranges) of the shape's plan; other models' stages are the search's. */
static void propose(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch, double budget,
                    const wf_search_unified_opts *opts, const shape *sh, wf_search_unified_result *r)
{
    const int tf = wf_model_is_transformer(m);
    char mesh[64];
    if (sh->dp > 1)
        snprintf(mesh, sizeof mesh, "%lldx%lld", (long long)sh->dp, (long long)sh->mp);
    else
        snprintf(mesh, sizeof mesh, "%lld", (long long)sh->mp);
    wf_search_opplan_opts po;
    wf_search_opplan_opts_default(&po);
    po.devices = sh->dp * sh->mp * (tf ? 1 : sh->pp);
    po.max_memory_bytes = tf ? 1e30 : budget; /* layouts only: the one model checks memory */
    po.mesh = mesh;
    po.pp = tf ? 1 : sh->pp;
    po.oplevel.outer_dp = 1;
    po.no_point_layouts = 1;
    /* No kicks: this search proposes at one micro-batch with no memory
     * limit, and a plan kicked faster there was found slower at the whole
     * batch under the budget (tests/test_unified.c, BERT-Large on one V100
     * per node: op-level layouts at 0.4745 s without kicks; with them the
     * op-level proposal lost to Megatron's layouts, 0.4981 s). */
    po.descent_kicks = -1;
    if (opts && opts->seq_dim >= 0)
        po.oplevel.seq_dim = opts->seq_dim;
    /* A transformer's layouts are searched at the shape's micro-batch (mbs
     * samples on each of the dp rows of the mesh). */
    int64_t sb = tf && sh->keys.mbs > 0 ? (int64_t)sh->keys.mbs * sh->dp : batch;
    wf_search_opplan_result pr;
    wf_status pst = wf_search_opplan(m, c, sb, &po, &pr);
    r->searches += pr.searches;
    if ((pst == WF_OK || pst == WF_NOFIT) && pr.has_best) {
        wf_plan keys = sh->keys;
        wf_layout staged;
        wf_layout_init(&staged);
        const wf_layout *ol = &pr.best_plan;
        if (!tf)
            keys.vpp = 1;
        else if (with_stages_of(m, c, batch, &sh->keys, &pr.best_plan, &staged) == WF_OK)
            ol = &staged;
        else
            ol = NULL;
        if (ol) {
            int64_t ms[2] = {ol->micro_batches, 0};
            int nm = 1;
            int64_t mk = sh->keys.mbs > 0 ? batch / ((int64_t)sh->keys.mbs * sh->dp) : 0;
            if (mk >= 1 && mk != ms[0])
                ms[nm++] = mk;
            try_layouts(m, c, ctx, batch, budget, ol, &keys, ms, nm, r);
        }
        wf_layout_free(&staged);
    }
    wf_search_opplan_result_free(&pr);
    wf_clear_error();
}

/* The plan whose lowering runs dense layouts (dp, tp, sp) on the mesh p
 * lowers to, with p's micro-batch count and keys: 1 and *out, or 0 (none). */
static int dense_on_mesh(const wf_plan *p, int64_t dp, int tp, int sp, wf_plan *out)
{
    const int64_t n = (int64_t)p->dp * p->tp;
    if (dp * tp != n || (sp && tp < 2))
        return 0;
    const int64_t mb = (int64_t)p->dp * p->mbs; /* samples per micro-batch */
    if (mb % dp != 0)
        return 0;
    *out = *p;
    out->dp = (int)dp;
    out->tp = tp;
    out->sp = sp;
    out->mbs = (int)(mb / dp);
    out->ep = 1;
    out->etp = 0;
    return 1;
}

/* Per-layer plans of a mixture of experts with dense layers (layout.h,
 * wf_layout_perlayer): each of the outer search's fastest one-stage plans
 * keeps its expert layers, and its dense layers take each other dense layout
 * on its mesh -- on one axis of n devices data-parallel or tensor-parallel
 * (with or without sp), on two axes a x b dp=a x tp=b (sp or not) or
 * data-parallel over both -- written as the op-level plan
 * (wf_layout_perlayer_lower) and priced by the one cost model (wf_layout_cost:
 * layer by layer). The fastest that fits replaces r's best when faster. */
/* The outer search's plans a per-layer plan may keep the expert layers of:
 * one stage, and a mesh of one or two axes (edp x ep x tp with one of them
 * 1), on which the dense layers have another layout. */
static int perlayer_base(const wf_plan *p, void *user)
{
    (void)user;
    const int ep = p->ep > 1 ? p->ep : 1, edp = p->dp / ep;
    return p->pp == 1 && p->cp <= 1 && p->vpp <= 1 && !(edp > 1 && ep > 1 && p->tp > 1);
}

static void propose_perlayer(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                             double budget, const wf_search_outer_opts *base_opts, wf_search_unified_result *r)
{
    enum { TRY = 8 };
    r->perlayer_whole_s = r->has_best ? r->est.iteration_time_s : 0;
    wf_search_outer_opts oo = *base_opts;
    oo.top_k = TRY;
    oo.accept = perlayer_base;
    wf_search_outer_result orr0;
    if (wf_search_outer(m, c, batch, &oo, &orr0) != WF_OK) {
        wf_search_outer_result_free(&orr0);
        wf_clear_error();
        return;
    }
    const wf_search_outer_result *orr = &orr0;
    for (int i = 0; i < orr->ntop; i++) {
        const wf_plan *pm = &orr->top[i].plan;
        wf_layout low;
        wf_layout_init(&low);
        if (wf_plan_lower(m, c, pm, batch, &low) != WF_OK) {
            wf_layout_free(&low);
            continue;
        }
        int64_t size[3] = {1, 1, 1};
        char tail = 0;
        long long x[3] = {1, 1, 1};
        int naxes = sscanf(low.mesh, "%lldx%lldx%lld%c", &x[0], &x[1], &x[2], &tail);
        wf_layout_free(&low);
        for (int a = 0; a < naxes && a < 3; a++)
            size[a] = x[a];
        /* The dense layouts of that mesh: (dp, tp) pairs. */
        int64_t opt[3][2];
        int no = 0;
        if (naxes == 1) {
            opt[no][0] = size[0], opt[no][1] = 1, no++;
            opt[no][0] = 1, opt[no][1] = size[0], no++;
        } else if (naxes == 2) {
            opt[no][0] = size[0], opt[no][1] = size[1], no++;
            opt[no][0] = size[0] * size[1], opt[no][1] = 1, no++;
        }
        for (int k = 0; k < no; k++)
            for (int sp = 0; sp <= 1; sp++) {
                wf_plan pd;
                if (!dense_on_mesh(pm, opt[k][0], (int)opt[k][1], sp, &pd))
                    continue;
                /* The lowering of a plan of dp x 1 on a x b needs an expert axis of b. */
                if (naxes == 2 && pd.tp == 1)
                    pd.ep = (int)size[1];
                if (pd.tp == pm->tp && pd.sp == pm->sp)
                    continue;
                wf_layout cand;
                wf_layout_init(&cand);
                wf_estimate e;
                wf_layout_perlayer pl;
                /* Built as the file reads back (wf_layout_perlayer_of; tests/test_perlayer.c),
                 * priced as wf_layout_cost prices the file. */
                if (wf_layout_perlayer_lower(m, c, batch, pm, &pd, &cand) == WF_OK &&
                    wf_layout_perlayer_make(m, c, batch, pm, &pd, &cand, &pl) == WF_OK &&
                    wf_layout_perlayer_cost(m, c, ctx, batch, &pl, &e) == WF_OK) {
                    r->perlayer_costed++;
                    if (e.memory_per_device_bytes <= budget &&
                        (r->perlayer_best_s <= 0 || e.iteration_time_s < r->perlayer_best_s)) {
                        r->perlayer_best_s = e.iteration_time_s;
                        r->perlayer_best_mem_bytes = e.memory_per_device_bytes;
                        r->perlayer_moe = *pm;
                        r->perlayer_dense = pd;
                        wf_layout_perlayer_describe(&pl, r->perlayer_detail, sizeof r->perlayer_detail);
                    }
                    if (e.memory_per_device_bytes <= budget &&
                        (!r->has_best || e.iteration_time_s < r->est.iteration_time_s)) {
                        wf_layout_free(&r->plan);
                        r->plan = cand;
                        wf_layout_init(&cand);
                        r->est = e;
                        r->as_plan = *pm;
                        r->has_best = 1;
                        r->megatron = 0;
                        r->lowered = 1;
                        r->perlayer = 1;
                    }
                }
                wf_layout_free(&cand);
                wf_clear_error();
            }
    }
    wf_search_outer_result_free(&orr0);
}

wf_status wf_search_perlayer(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                             const wf_search_unified_opts *opts, wf_search_unified_result *r)
{
    memset(r, 0, sizeof *r);
    wf_layout_init(&r->plan);
    if (!wf_model_is_moe(m) || !wf_model_is_transformer(m))
        return WF_OK;
    const double t0 = wf_now_s();
    const double budget = opts && opts->max_memory_bytes > 0 ? opts->max_memory_bytes : c->dev.mem_bytes;
    r->budget_bytes = budget;
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cost_ctx_create(m, c, &ctx);
    if (st != WF_OK)
        return st;
    wf_search_outer_opts oo;
    wf_search_outer_opts_default(&oo);
    oo.devices = opts && opts->devices > 0 ? opts->devices : wf_cluster_devices(c);
    oo.max_memory_bytes = budget;
    propose_perlayer(m, c, ctx, batch, budget, &oo, r);
    wf_cost_ctx_free(ctx);
    r->search_time_s = wf_now_s() - t0;
    return WF_OK;
}

wf_status wf_search_unified(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                            const wf_search_unified_opts *opts, wf_search_unified_result *r)
{
    memset(r, 0, sizeof *r);
    wf_layout_init(&r->plan);
    double t0 = wf_now_s();
    int64_t devices = opts && opts->devices > 0 ? opts->devices : wf_cluster_devices(c);
    double budget = opts && opts->max_memory_bytes > 0 ? opts->max_memory_bytes : c->dev.mem_bytes;
    r->budget_bytes = budget;
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cost_ctx_create(m, c, &ctx);
    if (st != WF_OK)
        return st;

    /* Megatron's layouts: the outer search's best, lowered; its fastest
     * plans' shapes are where the op-level search proposes layouts. */
    enum { TOP = 16, MAX_SHAPES = 6, CROSS_MP = 8 };
    shape sh[MAX_SHAPES];
    int nsh = 0;
    wf_search_outer_opts oo;
    wf_search_outer_opts_default(&oo);
    oo.devices = devices;
    oo.max_memory_bytes = budget;
    oo.top_k = TOP;
    wf_search_outer_result orr;
    wf_status ost = wf_search_outer(m, c, batch, &oo, &orr);
    if (ost == WF_OK && orr.ntop > 0) {
        r->outer_best_s = orr.top[0].est.iteration_time_s;
        r->has_outer = 1;
        /* A plan with no op-level form yet (context parallelism) stays the
         * best as its whole-model plan (lowered = 0). */
        r->est = orr.top[0].est;
        r->as_plan = orr.top[0].plan;
        r->has_best = 1;
        r->megatron = 1;
        r->lowered = wf_plan_lower(m, c, &orr.top[0].plan, batch, &r->plan) == WF_OK;
        if (!r->lowered) {
            wf_layout_free(&r->plan);
            wf_layout_init(&r->plan);
        }
        /* Transformers: the model-parallel axis of the fastest plans (tp). */
        for (int i = 0; i < orr.ntop && nsh < 3; i++) {
            const wf_plan *p = &orr.top[i].plan;
            nsh = add_shape(sh, nsh, 3, p->dp, p->tp, p->pp, p);
        }
        /* Every model: a model-parallel axis carved out of the best plan's
         * data-parallel devices, within a node (the layouts Megatron's
         * family does not have for CNNs and MLPs). */
        /* A mixture of experts with dense layers: per-layer plans. */
        if (wf_model_is_moe(m) && wf_model_is_transformer(m))
            propose_perlayer(m, c, ctx, batch, budget, &oo, r);
        const wf_plan *b0 = &orr.top[0].plan;
        const int64_t per_node = c->nlevels > 0 ? c->level[0].size : 1;
        /* With one device per node there is no node to carve within: the
         * axis then spans nodes (AutoDDL's multi-node single-GPU system,
         * arXiv 2301.06813), up to CROSS_MP nodes. */
        const int64_t mp_max = per_node > 1 ? per_node : CROSS_MP;
        for (int64_t k = 2; k <= mp_max && nsh < MAX_SHAPES; k *= 2)
            if ((int64_t)b0->dp * b0->tp % k == 0 && b0->tp < k && k % b0->tp == 0)
                nsh = add_shape(sh, nsh, MAX_SHAPES, (int64_t)b0->dp * b0->tp / k, k, b0->pp, b0);
    }
    wf_search_outer_result_free(&orr);
    wf_clear_error();

    /* Other layouts: the op-level search's on each shape. */
    for (int i = 0; i < nsh; i++)
        propose(m, c, ctx, batch, budget, opts, &sh[i], r);
    /* Models other than transformers (small graphs, fast to search): also
     * the op-level search's own best over every mesh and stage count, both
     * axes free (the one model takes two model-parallel axes). */
    if (!wf_model_is_transformer(m) && r->has_outer) {
        wf_search_opplan_opts po;
        wf_search_opplan_opts_default(&po);
        po.devices = devices;
        po.max_memory_bytes = budget;
        po.no_point_layouts = 1;
        wf_search_opplan_result pr;
        wf_status pst = wf_search_opplan(m, c, batch, &po, &pr);
        r->searches += pr.searches;
        if ((pst == WF_OK || pst == WF_NOFIT) && pr.has_best) {
            int64_t ms[1] = {pr.best_plan.micro_batches};
            try_layouts(m, c, ctx, batch, budget, &pr.best_plan, &r->as_plan, ms, 1, r);
        }
        wf_search_opplan_result_free(&pr);
        wf_clear_error();
    }
    wf_cost_ctx_free(ctx);
    r->search_time_s = wf_now_s() - t0;
    if (!r->has_best)
        return wf_errorf(WF_NOFIT, "no plan of model '%s' fits %.2f GiB per device on %lld devices", m->name,
                         budget / 1073741824.0, (long long)devices);
    return WF_OK;
}
