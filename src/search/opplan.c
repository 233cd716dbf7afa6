/* The op-level planner: meshes x pipeline depths x micro-batches around the
 * op-level search (oplevel*.c), with Alpa's inter-operator pass
 * (pipeline_dp.c) cutting the graph into stages, and the evaluation of an
 * op-level plan file against a model and a cluster (search.h says what is
 * costed and how the stages are chosen).
 *
 * Symbols: D devices, pp stages, m micro-batches, b = batch / m samples per
 * micro-batch (the graph is built for b), L the memory limit per device.
 *
 * One rule keeps the numbers honest: a plan's numbers are the sums of its
 * stages' parts (ol_eval_parts: one micro-batch's pass tn, its weight-gradient
 * reduction sy, its computation tc, its memory m), taken on the problem of
 * each stage, built with the same options by the search and by the
 * evaluation of a plan file; so `weft plan -o` and `weft plan --verify`
 * print the same numbers, to the last bit (a test checks it). */
#include "graph/graph-impl.h"
#include "search/oplevel-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESHES 64
#define MAX_UNITS 128   /* the pipeline DP runs on at most this many op groups */
#define MAX_GRAPHS 4    /* micro-batch sizes whose graphs are kept built */
#define DESCENT_STARTS 3 /* candidates (distinct meshes) descended on the one cost model */

void wf_search_opplan_opts_default(wf_search_opplan_opts *o)
{
    memset(o, 0, sizeof *o);
    wf_search_oplevel_opts_default(&o->oplevel);
    o->top_k = 10;
}

/* ---- one stage: its problem's options, its parts -------------------------------- */

/* The options a stage's problem is built with, by the search and by the
 * evaluation alike (the restriction of seq_dim only removes choices and so
 * leaves every cost of the remaining ones as it is; see oplevel.c). */
static wf_search_oplevel_opts stage_opts(const wf_search_oplevel_opts *base, int lo, int hi, int nf, int pp,
                                  int s, int64_t m)
{
    wf_search_oplevel_opts o = *base;
    o.op_begin = lo == 0 && hi == nf ? 0 : lo;
    o.op_end = lo == 0 && hi == nf ? 0 : hi;
    int64_t inflight = pp - s < m ? pp - s : m;
    o.act_multiplier = (double)inflight;
    o.grad_sync_scale = 1.0 / (double)m;
    return o;
}

/* Bytes crossing each cut: cross_fw[j] of the tensors made by ops < j and
 * read by ops >= j (1 <= j < nf), cross_bw[j] of those of them that carry a
 * gradient back. */
static wf_status crossing_bytes(const wf_graph *g, double *cross_fw, double *cross_bw)
{
    int nf = g->nfwd;
    unsigned char *ng = malloc((size_t)g->ntensors + 1);
    int *last = malloc(sizeof(int) * ((size_t)g->ntensors + 1));
    if (!ng || !last) {
        free(ng);
        free(last);
        return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    }
    wf_graph_grad_flags(g, nf, ng);
    for (int t = 0; t < g->ntensors; t++)
        last[t] = -1;
    for (int i = 0; i < nf; i++)
        for (int j = 0; j < g->ops[i].nin; j++)
            last[g->ops[i].in[j]] = i;
    for (int j = 0; j <= nf; j++)
        cross_fw[j] = cross_bw[j] = 0;
    /* Difference arrays: a tensor made by op a, last read by op z, crosses cuts a < j <= z. */
    for (int t = 0; t < g->ntensors; t++) {
        int a = g->tensors[t].producer, z = last[t];
        if (a < 0 || a >= nf || z <= a)
            continue;
        double bytes = (double)wf_tensor_bytes(&g->tensors[t]);
        cross_fw[a + 1] += bytes;
        cross_fw[z + 1] -= bytes;
        if (ng[t]) {
            cross_bw[a + 1] += bytes;
            cross_bw[z + 1] -= bytes;
        }
    }
    for (int j = 1; j <= nf; j++) {
        cross_fw[j] += cross_fw[j - 1];
        cross_bw[j] += cross_bw[j - 1];
    }
    free(ng);
    free(last);
    return WF_OK;
}

/* The send between stage s and s+1 at cut j (ops < j before it): each of the
 * stage's devices sends its share of the crossing tensors to its peer in the
 * next stage (stride: the stage's devices), and the gradients come back. */
static double send_time(const wf_cluster *c, int64_t stage_devices, double fw_bytes,
                        double bw_bytes)
{
    if (fw_bytes <= 0 && bw_bytes <= 0)
        return 0;
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(stage_devices, 1, 1, 2, ax); /* a stage's devices, then the stages */
    wf_group grp = wf_group_place(c, 2, ax[WF_AXIS_PP].stride);
    double t = wf_coll_time(c, WF_COLL_SENDRECV, &grp, fw_bytes / (double)stage_devices);
    if (bw_bytes > 0)
        t += wf_coll_time(c, WF_COLL_SENDRECV, &grp, bw_bytes / (double)stage_devices);
    return t;
}

/* The dtype whose peak the graph's MFU is taken against: its first float weight. */
static wf_dtype graph_dtype(const wf_graph *g)
{
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].role == WF_ROLE_PARAM && wf_dtype_is_float(g->tensors[t].dtype))
            return g->tensors[t].dtype;
    return WF_DTYPE_FP32;
}

/* A point from its stages' parts. st[s].time_s etc. are filled by the caller. */
static void finish_point(wf_search_opplan_point *pt, const wf_graph *g, const wf_cluster *c,
                         const char *mesh, int64_t mesh_devices, int pp, int64_t m,
                         int64_t batch, double budget)
{
    snprintf(pt->mesh, sizeof pt->mesh, "%s", mesh);
    snprintf(pt->plan, sizeof pt->plan, "mesh=%s,pp=%d,micro_batches=%lld", mesh, pp,
             (long long)m);
    pt->pp = pp;
    pt->micro_batches = m;
    pt->devices = mesh_devices * pp;
    double sum = 0, gmax = 0, mem = 0;
    int slow = 0, fits = 1;
    for (int s = 0; s < pp; s++) {
        const wf_search_opplan_stage *S = &pt->stages[s];
        sum += S->time_s;
        if (S->time_s > pt->stages[slow].time_s)
            slow = s;
        if (S->grad_sync_s > gmax)
            gmax = S->grad_sync_s;
        if (S->memory_bytes > mem)
            mem = S->memory_bytes;
        fits &= S->memory_bytes <= budget;
    }
    const wf_search_opplan_stage *W = &pt->stages[slow];
    double md = (double)m;
    pt->iteration_time_s = sum + (md - 1) * W->time_s + gmax;
    pt->compute_s = md * W->compute_s;
    pt->pp_comm_s = md * W->send_s;
    pt->comm_s = md * (W->time_s - W->compute_s - W->send_s);
    pt->bubble_s = sum - W->time_s;
    pt->grad_sync_s = gmax;
    pt->memory_per_device_bytes = mem;
    pt->fits = fits;
    pt->samples_per_s = pt->iteration_time_s > 0 ? (double)batch / pt->iteration_time_s : 0;
    wf_graph_totals tot;
    wf_graph_totals_of(g, &tot);
    pt->model_flops_per_iteration = (tot.fwd_flops + tot.bwd_flops) * md;
    double peak = c->dev.matrix_flops[graph_dtype(g)];
    double denom = pt->iteration_time_s * (double)pt->devices;
    pt->tflops_per_device = denom > 0 ? pt->model_flops_per_iteration / denom / 1e12 : 0;
    pt->mfu = denom > 0 && peak > 0 ? pt->model_flops_per_iteration / (denom * peak) : 0;
}

static void stage_from_parts(wf_search_opplan_stage *S, const ol_parts *q, int lo, int hi, int inflight,
                             double send_s)
{
    S->first_op = lo;
    S->end_op = hi;
    S->inflight = inflight;
    S->time_s = q->tn + send_s;
    S->compute_s = q->tc;
    S->send_s = send_s;
    S->grad_sync_s = q->sy;
    S->memory_bytes = q->m;
}

/* ---- evaluation of a given plan --------------------------------------------------- */

typedef struct {
    const wf_graph *g;
    const wf_cluster *c;
    wf_mesh mesh;
    int pp;
    int64_t m, batch;
    const int *first;          /* [pp + 1] */
    const int *choice;         /* [nf] full signature indices */
    const wf_sbp *stor;        /* [pp * ntensors] storage layouts per stage, or NULL */
    const unsigned char *given;/* [pp * ntensors] which of them are given */
    wf_search_oplevel_opts base;
    double budget;
} plan_in;

/* Costs a plan stage by stage; per-op shares (computation, communication)
 * and stages when the arrays are given. */
static wf_status eval_plan(const plan_in *in, wf_search_opplan_point *pt, double *op_tc, double *op_comm,
                           int *op_stage)
{
    const wf_graph *g = in->g;
    int nf = g->nfwd, nt = g->ntensors;
    double *cfw = malloc(sizeof(double) * ((size_t)nf + 1));
    double *cbw = malloc(sizeof(double) * ((size_t)nf + 1));
    double *tn = op_tc ? malloc(sizeof(double) * (size_t)nf) : NULL;
    double *sy = op_tc ? malloc(sizeof(double) * (size_t)nf) : NULL;
    double *tc = op_tc ? malloc(sizeof(double) * (size_t)nf) : NULL;
    wf_status st = WF_OK;
    if (!cfw || !cbw || (op_tc && (!tn || !sy || !tc))) {
        st = wf_errorf(WF_NOMEM, "op-level plan: out of memory");
        goto done;
    }
    if ((st = crossing_bytes(g, cfw, cbw)))
        goto done;
    int64_t sdev = wf_mesh_devices(&in->mesh);
    for (int s = 0; s < in->pp && st == WF_OK; s++) {
        int lo = in->first[s], hi = in->first[s + 1];
        wf_search_oplevel_opts o = stage_opts(&in->base, lo, hi, nf, in->pp, s, in->m);
        o.seq_dim = -1;
        ol_problem p;
        int *assign = NULL;
        int untied = 0;
        for (int tie = o.tie_layers; tie >= 0; tie--) {
            if ((st = ol_problem_build(g, in->c, &in->mesh, &o, tie, &p)))
                break;
            assign = malloc(sizeof(int) * ((size_t)p.nvar + 1));
            if (!assign) {
                st = wf_errorf(WF_NOMEM, "op-level plan: out of memory");
                break;
            }
            untied = 0;
            st = ol_assign_from_plan(&p, in->choice, in->stor ? in->stor + (size_t)s * nt : NULL,
                                     in->given ? in->given + (size_t)s * nt : NULL, assign,
                                     &untied);
            if (st == WF_OK || !untied || tie == 0)
                break;
            /* Ops tied into one decision take different signatures: cost them apart. */
            wf_clear_error();
            free(assign);
            assign = NULL;
            ol_problem_free(&p);
        }
        if (st == WF_OK) {
            ol_parts q;
            ol_eval_parts(&p, assign, &q);
            double snd = s + 1 < in->pp ? send_time(in->c, sdev, cfw[hi], cbw[hi]) : 0;
            stage_from_parts(&pt->stages[s], &q, lo, hi, (int)o.act_multiplier, snd);
            if (op_tc) {
                ol_op_shares(&p, assign, tn, sy, tc, NULL, NULL);
                for (int i = lo; i < hi; i++) {
                    op_tc[i] = tc[i];
                    op_comm[i] = tn[i] - tc[i] + sy[i];
                    op_stage[i] = s;
                }
            }
        }
        free(assign);
        ol_problem_free(&p);
    }
    if (st == WF_OK) {
        char ms[64];
        finish_point(pt, g, in->c, wf_mesh_str(&in->mesh, ms, sizeof ms), sdev, in->pp, in->m,
                     in->batch, in->budget);
    }
done:
    free(cfw);
    free(cbw);
    free(tn);
    free(sy);
    free(tc);
    return st;
}

static double default_budget(const wf_cluster *c, double mem_limit_bytes)
{
    return mem_limit_bytes > 0 ? mem_limit_bytes : c->dev.mem_bytes - c->mem_reserved_bytes;
}

/* The plan as resolved once (wf_layout_index: every check and every parse
 * of it is there) read into the arrays of plan_in: the stage cut, each op's
 * signature index, the storage layouts by stage and tensor. */
static void plan_arrays(const wf_layout_plan *lp, int pp, int *first, int *choice, wf_sbp *stor,
                        unsigned char *given)
{
    const int nf = lp->graph.nfwd, nt = lp->graph.ntensors;
    memcpy(first, lp->stage_first, sizeof *first * ((size_t)pp + 1));
    memcpy(choice, lp->sig_index, sizeof *choice * (size_t)nf);
    memset(given, 0, (size_t)pp * (size_t)nt);
    for (int k = 0; k < lp->nstorage; k++) {
        size_t at = (size_t)lp->storage_stage[k] * nt + (size_t)lp->storage_tensor[k];
        stor[at] = lp->storage[k];
        given[at] = 1;
    }
}

/* One price: the plan's figures from the one cost model (wf_layout_cost,
 * what `weft estimate` of the plan's file reports) in place of the proxy's,
 * so that the search's figure for a plan and the estimate's agree. The
 * breakdown: compute (with recomputation and the optimizer step), the
 * operator-parallel collectives, the pipeline sends, the bubble and the
 * data-parallel reduction as the estimate has them (the estimate overlaps
 * communication, so they need not add up to the time). Returns 1 when
 * priced; 0 (the proxy's figures kept, one_model = 0) when the one model does
 * not take the layouts, or on an error, which is cleared. */
static int set_one_price(wf_status st, const wf_estimate *ep, double budget, wf_search_opplan_point *pt)
{
    const wf_estimate e = *ep;
    if (!pt->one_model) {
        pt->proxy_time_s = pt->iteration_time_s;
        pt->proxy_compute_s = pt->compute_s;
        pt->proxy_comm_s = pt->comm_s;
        pt->proxy_pp_comm_s = pt->pp_comm_s;
        pt->proxy_bubble_s = pt->bubble_s;
        pt->proxy_grad_sync_s = pt->grad_sync_s;
        pt->proxy_memory_bytes = pt->memory_per_device_bytes;
        pt->proxy_fits = pt->fits;
    }
    if (st != WF_OK) {
        wf_clear_error();
        pt->one_model = 0;
        return 0;
    }
    pt->one_model = 1;
    pt->iteration_time_s = e.iteration_time_s;
    pt->samples_per_s = e.samples_per_s;
    pt->compute_s = e.breakdown.compute + e.breakdown.recompute + e.breakdown.optimizer;
    pt->recompute_s = e.breakdown.recompute;
    pt->comm_s = e.breakdown.tp_comm;
    pt->pp_comm_s = e.breakdown.pp_comm;
    pt->bubble_s = e.breakdown.bubble;
    pt->grad_sync_s = e.breakdown.dp_comm;
    pt->memory_per_device_bytes = e.memory_per_device_bytes;
    pt->fits = e.memory_per_device_bytes <= budget;
    pt->model_flops_per_iteration = e.model_flops_per_iteration;
    pt->tflops_per_device = e.tflops_per_device;
    pt->mfu = e.mfu;
    return 1;
}

/* The one price of plan as resolved (lp: its layouts as parsed there). */
static int one_price(const wf_model_config *mc, const wf_cluster *c, int64_t batch, double budget,
                     const wf_layout *plan, const wf_layout_plan *lp, wf_search_opplan_point *pt)
{
    wf_cost_ctx *ctx = NULL;
    wf_estimate e;
    memset(&e, 0, sizeof e);
    wf_status st = wf_cost_ctx_create(mc, c, &ctx);
    if (st == WF_OK)
        st = wf_layout_plan_cost(mc, c, ctx, batch, plan, lp, &e, NULL);
    wf_cost_ctx_free(ctx);
    return set_one_price(st, &e, budget, pt);
}

static void set_levers(wf_search_opplan_point *pt, int rc, int z, double rc_s);

/* Evaluates plan, resolved once here (wf_layout_index), on the op-level
 * model, and with `price` also on the one model from the same resolution
 * (one_price); *g receives the plan's graph, and keep (may be NULL) the
 * resolution itself when the plan evaluates. */
static wf_status evaluate_with(const wf_model_config *mc, const wf_cluster *c, int64_t batch,
                               const wf_layout *plan, double mem_limit_bytes,
                               const wf_search_oplevel_opts *opts, wf_arena *arena, wf_search_opplan_point *out,
                               wf_graph *g, double **op_tc, double **op_comm, int **op_stage, int price,
                               wf_layout_plan *keep)
{
    memset(out, 0, sizeof *out);
    wf_graph_init(g, mc->name);
    wf_search_oplevel_opts base;
    if (opts)
        base = *opts;
    else
        wf_search_oplevel_opts_default(&base);
    wf_layout_plan lp;
    int *first = NULL, *choice = NULL;
    wf_sbp *stor = NULL;
    unsigned char *given = NULL;
    wf_status st = wf_layout_index(plan, mc, c, batch, &lp);
    if (st)
        goto done;
    const wf_graph *lg = &lp.graph;
    int nf = lg->nfwd, nt = lg->ntensors;
    first = malloc(sizeof(int) * ((size_t)plan->pp + 1));
    choice = malloc(sizeof(int) * ((size_t)nf + 1));
    stor = malloc(sizeof(wf_sbp) * ((size_t)plan->pp * (size_t)nt + 1));
    given = malloc((size_t)plan->pp * (size_t)nt + 1);
    out->stages = wf_arena_alloc(arena, sizeof(wf_search_opplan_stage) * (size_t)plan->pp);
    if (!first || !choice || !stor || !given || !out->stages) {
        st = wf_errorf(WF_NOMEM, "op-level plan: out of memory");
        goto done;
    }
    out->nstages = plan->pp;
    plan_in in;
    memset(&in, 0, sizeof in);
    plan_arrays(&lp, plan->pp, first, choice, stor, given);
    in.mesh = lp.mesh;
    in.g = lg;
    in.c = c;
    in.pp = plan->pp;
    in.m = plan->micro_batches;
    in.batch = batch;
    in.first = first;
    in.choice = choice;
    in.stor = stor;
    in.given = given;
    in.base = base;
    in.budget = default_budget(c, mem_limit_bytes);
    if (op_tc) {
        *op_tc = wf_arena_alloc(arena, sizeof(double) * (size_t)nf + 1);
        *op_comm = wf_arena_alloc(arena, sizeof(double) * (size_t)nf + 1);
        *op_stage = wf_arena_alloc(arena, sizeof(int) * (size_t)nf + 1);
        if (!*op_tc || !*op_comm || !*op_stage) {
            st = wf_errorf(WF_NOMEM, "op-level plan: out of memory");
            goto done;
        }
    }
    st = eval_plan(&in, out, op_tc ? *op_tc : NULL, op_tc ? *op_comm : NULL,
                   op_tc ? *op_stage : NULL);
    if (st == WF_OK) {
        snprintf(out->plan, sizeof out->plan, "mesh=%s,pp=%d,micro_batches=%lld", plan->mesh,
                 plan->pp, (long long)plan->micro_batches);
        wf_plan kp; /* the memory levers among its keys, named as the search names them */
        if (wf_layout_keys(plan, &kp) == WF_OK)
            set_levers(out, kp.recompute == WF_RECOMPUTE_FULL, kp.zero, 0);
        else
            wf_clear_error();
        if (price)
            one_price(mc, c, batch, in.budget, plan, &lp, out);
    }
done:
    if (keep && st == WF_OK) {
        /* The resolution goes to the caller whole; its own graph alike. */
        *keep = lp;
        if ((st = wf_model_build(mc, batch / plan->micro_batches, g)) != WF_OK)
            wf_layout_plan_free(keep);
    } else {
        /* The graph goes to the caller; the rest of the resolution is freed. */
        *g = lp.graph;
        wf_graph_init(&lp.graph, mc->name);
        wf_layout_plan_free(&lp);
    }
    free(first);
    free(choice);
    free(stor);
    free(given);
    return st;
}

wf_status wf_search_opplan_evaluate(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                                    const wf_layout *plan, double mem_limit_bytes,
                                    const wf_search_oplevel_opts *opts, wf_arena *arena,
                                    wf_search_opplan_point *out)
{
    wf_graph g;
    wf_status st = evaluate_with(m, c, batch, plan, mem_limit_bytes, opts, arena, out, &g, NULL,
                                 NULL, NULL, 0, NULL);
    wf_graph_free(&g);
    return st;
}

/* ---- the search --------------------------------------------------------------------- */

/* A costed candidate: its point and what makes its plan. */
typedef struct {
    wf_search_opplan_point pt;
    wf_mesh mesh;
    int64_t graph_batch;   /* the micro-batch its graph is built for */
    int *first;            /* [pp + 1] */
    int *choice;           /* [nf] */
    wf_sbp *stor;          /* [pp * ntensors] */
    unsigned char *given;  /* [pp * ntensors] */
} cand;

typedef struct {
    const wf_model_config *mc;
    const wf_cluster *c;
    int64_t batch;
    wf_search_opplan_opts o;
    double budget;
    int64_t graph_batch[MAX_GRAPHS];
    wf_graph graphs[MAX_GRAPHS];
    int ngraphs;
    int64_t next_evict;
    cand *cands;
    int ncands, cap_cands;
    cand *alts;             /* the other fitting points of each single-stage search's frontier */
    int nalts, cap_alts;
    int64_t nsearched;      /* candidates (mesh, pp, micro-batches) searched */
    wf_arena a;             /* the candidates' arrays and stages */
    int64_t searches;
    double work_done, work_total;
} planner;

/* The graph for micro-batch b (built once while it is among the last
 * MAX_GRAPHS sizes used; the search asks for each size in runs). The index
 * stays valid until the next call. */
static wf_status get_graph(planner *P, int64_t b, int *idx)
{
    for (int i = 0; i < P->ngraphs; i++)
        if (P->graph_batch[i] == b) {
            *idx = i;
            return WF_OK;
        }
    int i = P->ngraphs < MAX_GRAPHS ? P->ngraphs++ : (int)(P->next_evict++ % MAX_GRAPHS);
    wf_graph_free(&P->graphs[i]);
    P->graph_batch[i] = 0;
    wf_status st = wf_model_build(P->mc, b, &P->graphs[i]);
    if (st) {
        wf_graph_free(&P->graphs[i]);
        return st;
    }
    P->graph_batch[i] = b;
    *idx = i;
    return WF_OK;
}

static cand *new_cand_in(planner *P, cand **arr, int *n, int *cap, int pp, const wf_graph *g)
{
    if (wf_grow(arr, cap, (int64_t)*n + 1, sizeof **arr, 64) != 0)
        return NULL;
    cand *k = &(*arr)[*n];
    memset(k, 0, sizeof *k);
    size_t nt = (size_t)g->ntensors;
    k->first = wf_arena_alloc(&P->a, sizeof(int) * ((size_t)pp + 1));
    k->choice = wf_arena_alloc(&P->a, sizeof(int) * ((size_t)g->nfwd + 1));
    k->stor = wf_arena_alloc(&P->a, sizeof(wf_sbp) * ((size_t)pp * nt + 1));
    k->given = wf_arena_alloc(&P->a, (size_t)pp * nt + 1);
    k->pt.stages = wf_arena_alloc(&P->a, sizeof(wf_search_opplan_stage) * (size_t)pp);
    if (!k->first || !k->choice || !k->stor || !k->given || !k->pt.stages)
        return NULL;
    memset(k->given, 0, (size_t)pp * nt);
    k->pt.nstages = pp;
    (*n)++;
    return k;
}

static cand *new_cand(planner *P, int pp, const wf_graph *g)
{
    return new_cand_in(P, &P->cands, &P->ncands, &P->cap_cands, pp, g);
}

static void tick(planner *P)
{
    P->work_done += 1;
    if (P->o.progress && P->work_total > 0)
        P->o.progress(P->work_done / P->work_total, P->o.progress_user);
}

/* Marks a frontier point with its levers: its keys and plan string. */
static void set_levers(wf_search_opplan_point *pt, int rc, int z, double rc_s)
{
    pt->recompute = rc;
    pt->zero = z;
    pt->recompute_s = rc_s;
    size_t n = strlen(pt->plan);
    snprintf(pt->plan + n, sizeof pt->plan - n, "%s%s%.0d", rc ? ",recompute=full" : "", z ? ",zero=" : "",
             z);
}

/* The fastest fitting plan of a search's frontier, else the smallest. */
static int pick_plan(const ol_plan *plans, int n, double limit)
{
    for (int i = 0; i < n; i++)
        if (plans[i].m <= limit)
            return i;
    return n - 1;
}

/* Searches stage [lo, hi) of graph gi on mesh with its options; records its
 * choices and storage into k, its parts into stage s, and (pp = 1) the
 * frontier's fitting points. */
static wf_status search_stage(planner *P, int gi, const wf_mesh *mesh, int pp, int s, int64_t m,
                              int lo, int hi, double send_s, wf_search_oplevel_algo algo, cand *k)
{
    const wf_graph *g = &P->graphs[gi];
    int nf = g->nfwd, nt = g->ntensors;
    wf_search_oplevel_opts o = stage_opts(&P->o.oplevel, lo, hi, nf, pp, s, m);
    o.algo = algo;
    ol_problem p;
    ol_plan *plans = NULL;
    int nplans = 0, cap = 0, nfr = 0, sweeps = 0, cond = 0;
    wf_arena scratch;
    wf_arena_init(&scratch, (size_t)1 << 16);
    int *choice = malloc(sizeof(int) * ((size_t)nf + 1));
    wf_sbp *lay = malloc(sizeof(wf_sbp) * ((size_t)nt + 1));
    wf_status st = WF_OK;
    if (!choice || !lay) {
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        goto done;
    }
    if ((st = ol_problem_build(g, P->c, mesh, &o, o.tie_layers, &p)))
        goto done;
    P->searches++;
    if ((st = ol_search_run(&p, P->budget, &plans, &nplans, &cap, &nfr, &sweeps, &cond, &scratch)))
        goto done;
    int pick = pick_plan(plans, nfr, P->budget);
    ol_parts q;
    ol_eval_parts(&p, plans[pick].assign, &q);
    stage_from_parts(&k->pt.stages[s], &q, lo, hi, (int)o.act_multiplier, send_s);
    ol_fill_plan(&p, plans[pick].assign, choice, NULL, lay);
    for (int i = lo; i < hi; i++)
        k->choice[i] = choice[i];
    for (int t = 0; t < nt; t++)
        if (p.var_of_leaf[t] >= 0) {
            k->stor[(size_t)s * nt + t] = lay[t];
            k->given[(size_t)s * nt + t] = 1;
        }
    if (pp == 1) {
        /* Every other fitting frontier point is a plan of its own (same mesh,
         * other layouts), priced by the one cost model with the rest. */
        for (int i = 0; i < nfr && st == WF_OK; i++) {
            if (i == pick || plans[i].m > P->budget)
                continue;
            cand *a = new_cand_in(P, &P->alts, &P->nalts, &P->cap_alts, 1, g);
            if (!a) {
                st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
                break;
            }
            a->mesh = *mesh;
            a->graph_batch = k->graph_batch;
            a->first[0] = 0;
            a->first[1] = nf;
            ol_eval_parts(&p, plans[i].assign, &q);
            stage_from_parts(&a->pt.stages[0], &q, lo, hi, 1, 0);
            ol_fill_plan(&p, plans[i].assign, choice, NULL, lay);
            memcpy(a->choice, choice, sizeof(int) * (size_t)nf);
            for (int t = 0; t < nt; t++)
                if (p.var_of_leaf[t] >= 0) {
                    a->stor[t] = lay[t];
                    a->given[t] = 1;
                }
            char ms[64];
            finish_point(&a->pt, g, P->c, wf_mesh_str(mesh, ms, sizeof ms), wf_mesh_devices(mesh), 1,
                         1, P->batch, P->budget);
        }
    }
done:
    free(choice);
    free(lay);
    free(plans);
    wf_arena_free(&scratch);
    ol_problem_free(&p);
    return st;
}

/* pp = 1 on one mesh. */
static wf_status plan_flat(planner *P, const wf_mesh *mesh)
{
    int gi;
    wf_status st = get_graph(P, P->batch, &gi);
    if (st)
        return st;
    const wf_graph *g = &P->graphs[gi];
    cand *k = new_cand(P, 1, g);
    if (!k)
        return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    P->nsearched++;
    k->mesh = *mesh;
    k->graph_batch = P->batch;
    k->first[0] = 0;
    k->first[1] = g->nfwd;
    if ((st = search_stage(P, gi, mesh, 1, 0, 1, 0, g->nfwd, 0, P->o.oplevel.algo, k)))
        return st;
    char ms[64];
    finish_point(&k->pt, g, P->c, wf_mesh_str(mesh, ms, sizeof ms), wf_mesh_devices(mesh), 1, 1,
                 P->batch, P->budget);
    if (mesh->naxes != 1)
        return WF_OK;
    /* Data parallelism (every op's first signature: the batch split) is a
     * plan of its own on a mesh of one axis: the proxy's frontier may pass
     * it by, and the one cost model takes it wherever the batch divides. */
    cand *d = new_cand_in(P, &P->alts, &P->nalts, &P->cap_alts, 1, g);
    if (!d)
        return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    d->mesh = *mesh;
    d->graph_batch = P->batch;
    d->first[0] = 0;
    d->first[1] = g->nfwd;
    for (int i = 0; i < g->nfwd; i++)
        d->choice[i] = 0;
    plan_in in;
    memset(&in, 0, sizeof in);
    in.g = g;
    in.c = P->c;
    in.mesh = *mesh;
    in.pp = 1;
    in.m = 1;
    in.batch = P->batch;
    in.first = d->first;
    in.choice = d->choice;
    in.stor = d->stor;
    in.given = d->given;
    in.base = P->o.oplevel;
    in.budget = P->budget;
    if (eval_plan(&in, &d->pt, NULL, NULL, NULL) != WF_OK || !d->pt.fits) {
        wf_clear_error(); /* not a legal plan here (the options, the batch): no seed */
        P->nalts--;
    }
    return WF_OK;
}

/* Units for the DP: ops, or above MAX_UNITS ops consecutive groups of about
 * equal proxy time. ufirst[u] is the first op of unit u; returns the count. */
static int make_units(const double *op_t, int nf, int *ufirst)
{
    if (nf <= MAX_UNITS) {
        for (int i = 0; i <= nf; i++)
            ufirst[i] = i;
        return nf;
    }
    double total = 0;
    for (int i = 0; i < nf; i++)
        total += op_t[i];
    int n = 0;
    double acc = 0;
    ufirst[n++] = 0;
    for (int i = 0; i < nf; i++) {
        acc += op_t[i];
        /* Close a unit once it holds its share of the time, keeping room for
         * the remaining units to hold an op each. */
        if (n < MAX_UNITS && i + 1 < nf && nf - (i + 1) >= MAX_UNITS - n &&
            (acc >= total * (double)n / MAX_UNITS || nf - (i + 1) == MAX_UNITS - n))
            ufirst[n++] = i + 1;
    }
    ufirst[n] = nf;
    return n;
}

wf_status wf_search_opplan_chain(const wf_graph *g, const wf_cluster *c, const wf_mesh *mesh, int pp,
                                 int64_t m, double mem_limit_bytes, const wf_search_oplevel_opts *opts,
                                 double *op_time_s, double *send_s, double *weight_bytes,
                                 double *act_bytes)
{
    int nf = g->nfwd;
    if (pp < 1 || m < 1)
        return wf_errorf(WF_INVAL, "op-level planner: pp=%d, m=%lld (expected >= 1)", pp,
                         (long long)m);
    wf_search_oplevel_opts base;
    if (opts)
        base = *opts;
    else
        wf_search_oplevel_opts_default(&base);
    double budget = default_budget(c, mem_limit_bytes);
    double *buf = malloc(sizeof(double) * ((size_t)nf + 1) * 4);
    ol_problem p;
    ol_plan *plans = NULL;
    wf_arena scratch;
    wf_arena_init(&scratch, (size_t)1 << 16);
    memset(&p, 0, sizeof p);
    wf_status st = WF_OK;
    if (!buf) {
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        goto done;
    }
    double *tn = buf, *sy = tn + nf + 1, *cfw = sy + nf + 1, *cbw = cfw + nf + 1;
    /* The whole graph on the stage mesh with a stage's share of memory: its
     * activations as the first stage keeps them, pp times the limit. */
    wf_search_oplevel_opts o = stage_opts(&base, 0, nf, nf, pp, 0, m);
    o.algo = WF_SEARCH_OPLEVEL_CD; /* a proxy: per-op costs for the DP, refined per stage below */
    if ((st = ol_problem_build(g, c, mesh, &o, o.tie_layers, &p)))
        goto done;
    int nplans = 0, cap = 0, nfr = 0, sweeps = 0, cond = 0;
    if ((st = ol_search_run(&p, budget * pp, &plans, &nplans, &cap, &nfr, &sweeps, &cond,
                            &scratch)))
        goto done;
    int pick = pick_plan(plans, nfr, budget * pp);
    ol_op_shares(&p, plans[pick].assign, tn, sy, NULL, weight_bytes, act_bytes);
    for (int i = 0; i < nf; i++)
        op_time_s[i] = tn[i] + sy[i] / (double)m;
    if ((st = crossing_bytes(g, cfw, cbw)))
        goto done;
    int64_t sdev = wf_mesh_devices(mesh);
    for (int i = 0; i < nf; i++)
        send_s[i] = i + 1 < nf ? send_time(c, sdev, cfw[i + 1], cbw[i + 1]) : 0;
done:
    free(buf);
    free(plans);
    wf_arena_free(&scratch);
    ol_problem_free(&p);
    return st;
}

/* pp > 1 with m micro-batches on stage mesh `mesh`. */
static wf_status plan_pipelined(planner *P, int pp, int64_t m, const wf_mesh *mesh)
{
    int gi;
    wf_status st = get_graph(P, P->batch / m, &gi);
    if (st)
        return st;
    const wf_graph *g = &P->graphs[gi];
    int nf = g->nfwd;
    if (pp > nf || pp > WF_PIPELINE_MAX_STAGES)
        return WF_OK; /* more stages than ops: not a candidate */
    int64_t sdev = wf_mesh_devices(mesh);
    double *buf = calloc((size_t)(nf + 1) * 8, sizeof(double));
    int *ufirst = malloc(sizeof(int) * ((size_t)nf + 2));
    if (!buf || !ufirst) {
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        goto done;
    }
    double *opt = buf, *osend = opt + nf + 1, *mw = osend + nf + 1, *ma = mw + nf + 1;
    double *ut = ma + nf + 1, *us = ut + nf + 1, *uw = us + nf + 1, *ua = uw + nf + 1;
    P->searches++;
    if ((st = wf_search_opplan_chain(g, P->c, mesh, pp, m, P->budget, &P->o.oplevel, opt, osend, mw, ma)))
        goto done;
    int nu = make_units(opt, nf, ufirst);
    if (pp > nu)
        goto done;
    for (int u = 0; u < nu; u++) {
        ut[u] = uw[u] = ua[u] = 0;
        for (int i = ufirst[u]; i < ufirst[u + 1]; i++) {
            ut[u] += opt[i];
            uw[u] += mw[i];
            ua[u] += ma[i];
        }
        us[u] = osend[ufirst[u + 1] - 1];
    }
    wf_stage_plan sp;
    st = wf_pipeline_dp(nu, ut, us, uw, ua, pp, m, P->budget, &sp);
    if (st == WF_NOFIT) {
        /* Nothing fits by the proxy: take the fastest split and let the stages' own
         * searches say how much memory they need. */
        wf_clear_error();
        st = wf_pipeline_dp(nu, ut, us, uw, ua, pp, m, 0, &sp);
    }
    if (st)
        goto done;
    cand *k = new_cand(P, pp, g);
    if (!k) {
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        goto done;
    }
    P->nsearched++;
    k->mesh = *mesh;
    k->graph_batch = P->batch / m;
    for (int s = 0; s <= pp; s++)
        k->first[s] = ufirst[sp.first[s]];
    /* Stages by descent (a fraction of frontier tracking's time on stage
     * ranges, within a fraction of a percent on the zoo); the best pipelined
     * plans are searched again with the configured algorithm (polish()). */
    for (int s = 0; s < pp && st == WF_OK; s++) {
        int lo = k->first[s], hi = k->first[s + 1];
        st = search_stage(P, gi, mesh, pp, s, m, lo, hi, s + 1 < pp ? osend[hi - 1] : 0,
                          WF_SEARCH_OPLEVEL_CD, k);
    }
    if (st == WF_OK) {
        char ms[64];
        finish_point(&k->pt, g, P->c, wf_mesh_str(mesh, ms, sizeof ms), sdev, pp, m, P->batch,
                     P->budget);
    }
done:
    free(buf);
    free(ufirst);
    return st;
}

/* Searches the stages of pipelined candidate i again with the configured
 * algorithm; keeps the result when it is faster (fitting as before). */
static wf_status polish(planner *P, int i)
{
    cand *k = &P->cands[i];
    if (k->pt.pp < 2 || P->o.oplevel.algo == WF_SEARCH_OPLEVEL_CD)
        return WF_OK;
    int gi;
    wf_status st = get_graph(P, k->graph_batch, &gi);
    if (st)
        return st;
    const wf_graph *g = &P->graphs[gi];
    cand *n = new_cand(P, k->pt.pp, g);
    if (!n)
        return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    k = &P->cands[i]; /* new_cand may move the array */
    P->ncands--;      /* n is scratch: kept only by copying into k */
    n->mesh = k->mesh;
    n->graph_batch = k->graph_batch;
    int pp = k->pt.pp;
    memcpy(n->first, k->first, sizeof(int) * ((size_t)pp + 1));
    for (int s = 0; s < pp && st == WF_OK; s++)
        st = search_stage(P, gi, &k->mesh, pp, s, k->pt.micro_batches, k->first[s],
                          k->first[s + 1], k->pt.stages[s].send_s, P->o.oplevel.algo, n);
    if (st)
        return st;
    char ms[64];
    finish_point(&n->pt, g, P->c, wf_mesh_str(&k->mesh, ms, sizeof ms), wf_mesh_devices(&k->mesh),
                 pp, k->pt.micro_batches, P->batch, P->budget);
    if ((n->pt.fits || !k->pt.fits) && n->pt.iteration_time_s < k->pt.iteration_time_s)
        *k = *n;
    return st;
}

/* Micro-batch counts for pp stages: pp, 2 pp, 4 pp where they divide the
 * batch; else the largest divisor of the batch up to 4 pp. */
static int micro_counts(int64_t batch, int pp, int64_t *out)
{
    int n = 0;
    for (int64_t f = 1; f <= 4; f *= 2)
        if ((int64_t)pp * f <= batch && batch % ((int64_t)pp * f) == 0)
            out[n++] = (int64_t)pp * f;
    if (n == 0) {
        int64_t best = 1;
        for (int64_t d = 1; d <= 4 * (int64_t)pp && d <= batch; d++)
            if (batch % d == 0)
                best = d;
        out[n++] = best;
    }
    return n;
}

static int cmp_point(const wf_search_opplan_point *a, const wf_search_opplan_point *b)
{
    if (a->iteration_time_s != b->iteration_time_s)
        return a->iteration_time_s < b->iteration_time_s ? -1 : 1;
    if (a->memory_per_device_bytes != b->memory_per_device_bytes)
        return a->memory_per_device_bytes < b->memory_per_device_bytes ? -1 : 1;
    return strcmp(a->plan, b->plan);
}

static int cmp_cand(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->pt.fits != b->pt.fits)
        return a->pt.fits ? -1 : 1;
    /* Plans the one cost model prices rank before those it does not take
     * (priced by the op-level model, as `weft estimate` prices them too). */
    if (a->pt.one_model != b->pt.one_model)
        return a->pt.one_model ? -1 : 1;
    return cmp_point(&a->pt, &b->pt);
}


static int cmp_group(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->pt.pp != b->pt.pp)
        return a->pt.pp < b->pt.pp ? -1 : 1;
    if (a->graph_batch != b->graph_batch)
        return a->graph_batch < b->graph_batch ? -1 : 1;
    int c = strcmp(a->pt.mesh, b->pt.mesh);
    return c ? c : cmp_cand(pa, pb);
}

/* Each forward op's signatures on a mesh (wf_sbp_op_sigs), enumerated once
 * per kind of op: an op of a transformer's layer l > 0 shares the list of
 * its op in layer 0 when their kinds and shapes agree (the builder makes
 * every layer alike). */
typedef struct {
    int *rep;           /* [nfwd] the op whose list op i uses */
    int *n;             /* [nfwd] list sizes (of the representatives) */
    wf_sbp_sig **list;  /* [nfwd] lists (of the representatives; NULL elsewhere) */
    int nf;
} sig_lists;

static void sig_lists_free(sig_lists *L)
{
    for (int i = 0; L->list && i < L->nf; i++)
        free(L->list[i]);
    free(L->list);
    free(L->rep);
    free(L->n);
    memset(L, 0, sizeof *L);
}

static int same_shape_op(const wf_graph *g, int a, int b)
{
    const wf_op *x = &g->ops[a], *y = &g->ops[b];
    if (x->kind != y->kind || x->nin != y->nin || x->nout != y->nout)
        return 0;
    for (int j = 0; j < x->nin + x->nout; j++) {
        const wf_tensor *u = &g->tensors[j < x->nin ? x->in[j] : x->out[j - x->nin]];
        const wf_tensor *v = &g->tensors[j < x->nin ? y->in[j] : y->out[j - x->nin]];
        if (u->ndim != v->ndim || u->dtype != v->dtype || u->role != v->role ||
            memcmp(u->shape, v->shape, sizeof(u->shape[0]) * (size_t)u->ndim) != 0)
            return 0;
    }
    return 1;
}

static wf_status sig_lists_make(const wf_graph *g, const wf_mesh *mesh, sig_lists *L)
{
    memset(L, 0, sizeof *L);
    L->nf = g->nfwd;
    L->rep = malloc(sizeof(int) * ((size_t)g->nfwd + 1));
    L->n = calloc((size_t)g->nfwd + 1, sizeof(int));
    L->list = calloc((size_t)g->nfwd + 1, sizeof *L->list);
    if (!L->rep || !L->n || !L->list) {
        sig_lists_free(L);
        return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    }
    for (int i = 0; i < g->nfwd; i++) {
        L->rep[i] = i;
        const char *name = g->ops[i].name;
        if (strncmp(name, "layers.", 7) == 0 && strncmp(name, "layers.0.", 9) != 0) {
            const char *dot = strchr(name + 7, '.');
            char key[WF_NAME_LEN + 32];
            if (dot) {
                snprintf(key, sizeof key, "layers.0%s", dot);
                for (int j = 0; j < i; j++)
                    if (L->rep[j] == j && strcmp(g->ops[j].name, key) == 0) {
                        if (same_shape_op(g, i, j))
                            L->rep[i] = j;
                        break;
                    }
            }
        }
        if (L->rep[i] != i)
            continue;
        int n = wf_sbp_op_sigs(g, i, mesh, NULL, 0);
        if (n < 0) {
            sig_lists_free(L);
            return (wf_status)n;
        }
        L->n[i] = n;
        if (!(L->list[i] = malloc(sizeof(wf_sbp_sig) * ((size_t)n + 1)))) {
            sig_lists_free(L);
            return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        }
        wf_sbp_op_sigs(g, i, mesh, L->list[i], n);
    }
    return WF_OK;
}

/* The best candidate's plan as names and signature strings. */
static wf_status build_plan(const cand *k, const wf_graph *g, wf_layout *out)
{
    char ms[64];
    wf_status st = wf_layout_set(out, wf_mesh_str(&k->mesh, ms, sizeof ms), k->pt.pp,
                                       k->pt.micro_batches);
    if (st == WF_OK && (k->pt.recompute || k->pt.zero)) /* the memory levers, as plan keys */
        snprintf(out->keys, sizeof out->keys, "%s%s%.0d", k->pt.recompute ? "recompute=full" : "",
                 k->pt.zero ? (k->pt.recompute ? ",zero=" : "zero=") : "", k->pt.zero);
    for (int s = 0; st == WF_OK && s < k->pt.pp; s++)
        st = wf_layout_set_stage(out, s, g->ops[k->first[s]].name);
    sig_lists SL;
    memset(&SL, 0, sizeof SL);
    if (st == WF_OK)
        st = sig_lists_make(g, &k->mesh, &SL);
    for (int i = 0; st == WF_OK && i < g->nfwd; i++) {
        int n = SL.n[SL.rep[i]];
        if (k->choice[i] < 0 || k->choice[i] >= n) {
            st = wf_errorf(WF_INTERNAL, "op-level planner: op '%s' has no choice", g->ops[i].name);
            break;
        }
        char text[512];
        wf_sbp_sig_str(&SL.list[SL.rep[i]][k->choice[i]], g->ops[i].nin, g->ops[i].nout, k->mesh.naxes, text,
                       sizeof text);
        st = wf_layout_add_sig(out, g->ops[i].name, text);
    }
    sig_lists_free(&SL);
    for (int s = 0; st == WF_OK && s < k->pt.pp; s++)
        for (int t = 0; st == WF_OK && t < g->ntensors; t++)
            if (k->given[(size_t)s * g->ntensors + t]) {
                char text[64];
                wf_sbp_str(&k->stor[(size_t)s * g->ntensors + t], k->mesh.naxes, text, sizeof text);
                st = wf_layout_add_storage(out, s, g->tensors[t].name, text);
            }
    return st;
}

/* ---- the one price: the search on the cost `weft estimate` reports ---------------- */

/* Candidate k's plan resolved in memory (wf_layout_resolve_choice: what
 * wf_layout_index makes of the plan build_plan writes, with nothing written
 * or parsed), into lp, and its keys (the memory levers) into keys. g is its
 * graph (P->graphs); lp borrows it. */
static wf_status resolve_cand(const planner *P, const cand *k, const wf_graph *g, int with_storage,
                              wf_layout_plan *lp, wf_plan *keys)
{
    memset(lp, 0, sizeof *lp);
    wf_layout_init(&lp->ol);
    wf_plan_default(keys);
    if (k->pt.recompute)
        keys->recompute = WF_RECOMPUTE_FULL;
    keys->zero = k->pt.zero;
    if (k->graph_batch * k->pt.micro_batches != P->batch)
        return wf_errorf(WF_INTERNAL, "op-level planner: a graph of %lld samples for %lld micro-batches of %lld",
                         (long long)k->graph_batch, (long long)k->pt.micro_batches, (long long)P->batch);
    sig_lists SL;
    memset(&SL, 0, sizeof SL);
    wf_sbp_sig *sig = malloc(sizeof *sig * ((size_t)g->nfwd + 1));
    wf_status st = sig ? sig_lists_make(g, &k->mesh, &SL) : wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    for (int i = 0; st == WF_OK && i < g->nfwd; i++) {
        if (k->choice[i] < 0 || k->choice[i] >= SL.n[SL.rep[i]]) {
            st = wf_errorf(WF_INTERNAL, "op-level planner: op '%s' has no choice", g->ops[i].name);
            break;
        }
        sig[i] = SL.list[SL.rep[i]][k->choice[i]];
    }
    if (st == WF_OK) {
        wf_layout_choice ch = {k->mesh, k->pt.pp, k->pt.micro_batches, g, k->first, sig, k->choice,
                               with_storage ? k->given : NULL, k->stor};
        st = wf_layout_resolve_choice(&ch, P->c, P->batch, lp);
    }
    sig_lists_free(&SL);
    free(sig);
    return st;
}

/* Candidate k priced by the one cost model (its figures in k->pt, the
 * proxy's kept as proxy_*): its plan resolved in memory. */
static wf_status price_cand(planner *P, wf_cost_ctx *ctx, cand *k)
{
    int gi;
    wf_status st = get_graph(P, k->graph_batch, &gi);
    if (st != WF_OK)
        return st;
    wf_layout_plan lp;
    wf_plan keys;
    wf_estimate e;
    memset(&e, 0, sizeof e);
    wf_status pst = resolve_cand(P, k, &P->graphs[gi], 1, &lp, &keys);
    if (pst == WF_INTERNAL || pst == WF_NOMEM) { /* the search's own failure, not the plan's */
        wf_layout_plan_free(&lp);
        return pst;
    }
    if (pst == WF_OK)
        pst = ctx ? wf_layout_resolved_cost(P->mc, P->c, ctx, P->batch, &keys, &lp, &e) : WF_NOMEM;
    wf_layout_plan_free(&lp);
    set_one_price(pst, &e, P->budget, &k->pt);
    return WF_OK;
}

/* Prices many single-stage plans of one mesh and micro-batch on one coster
 * (the layouts set from each candidate's choices): the same numbers as
 * price_cand, without reading each plan's text again. */
typedef struct {
    wf_layout_coster *K;
    wf_layout_plan lp;      /* the plan the coster was made from, resolved in memory (it must outlive it) */
    wf_plan keys;           /* and its keys */
    int open;               /* 1: a group is open (mesh, graph_batch) */
    int ok;                 /* 1: K prices this group; 0: each candidate goes through price_cand */
    wf_mesh mesh;
    int64_t graph_batch;
    int gi;
    int *full_of;           /* [g1.nfwd] the full graph's op of each op of the cost graph */
    int *tfull_of;          /* [g1.ntensors] and of each parameter (-1: none) */
    int *one_of;            /* [g.nfwd] the cost graph's op of each op of the full graph */
    wf_sbp_sig **sigs;      /* [g1.nfwd] the signatures of each op */
} price_group;

static void price_group_free(price_group *G)
{
    if (G->sigs && G->K)
        for (int j = 0; j < wf_layout_coster_graph(G->K)->nfwd; j++)
            free(G->sigs[j]);
    free(G->sigs);
    free(G->full_of);
    free(G->tfull_of);
    free(G->one_of);
    wf_layout_coster_free(G->K);
    wf_layout_plan_free(&G->lp);
    memset(G, 0, sizeof *G);
    wf_layout_init(&G->lp.ol);
}

static int one_op_of(const wf_graph *g1, const char *name);

static wf_status price_group_open(planner *P, wf_cost_ctx *ctx, const cand *k, price_group *G)
{
    price_group_free(G);
    G->open = 1;
    G->mesh = k->mesh;
    G->graph_batch = k->graph_batch;
    wf_status st = get_graph(P, k->graph_batch, &G->gi);
    if (st)
        return st;
    st = resolve_cand(P, k, &P->graphs[G->gi], 1, &G->lp, &G->keys);
    if (st == WF_INTERNAL || st == WF_NOMEM)
        return st;
    if (st != WF_OK ||
        wf_layout_coster_resolved(P->mc, P->c, ctx, P->batch, &G->keys, &G->lp, 1, &G->K) != WF_OK) {
        wf_clear_error();
        return WF_OK; /* G->ok = 0 */
    }
    const wf_graph *g = &P->graphs[G->gi], *g1 = wf_layout_coster_graph(G->K);
    G->full_of = malloc(sizeof(int) * ((size_t)g1->nfwd + 1));
    G->tfull_of = malloc(sizeof(int) * ((size_t)g1->ntensors + 1));
    G->one_of = malloc(sizeof(int) * ((size_t)g->nfwd + 1));
    G->sigs = calloc((size_t)g1->nfwd + 1, sizeof *G->sigs);
    if (!G->full_of || !G->tfull_of || !G->one_of || !G->sigs)
        return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    for (int j = 0; j < g1->nfwd; j++)
        G->full_of[j] = -1;
    for (int f = 0; f < g->nfwd; f++) {
        int j = one_op_of(g1, g->ops[f].name);
        G->one_of[f] = j;
        if (j < 0)
            return WF_OK;
        if (strcmp(g1->ops[j].name, g->ops[f].name) == 0)
            G->full_of[j] = f;
    }
    for (int j = 0; j < g1->nfwd; j++) {
        int f = G->full_of[j];
        if (f < 0)
            return WF_OK;
        int n = wf_sbp_op_sigs(g, f, &k->mesh, NULL, 0);
        if (n < 0)
            return (wf_status)n;
        if (!(G->sigs[j] = malloc(sizeof(wf_sbp_sig) * ((size_t)n + 1))))
            return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        wf_sbp_op_sigs(g, f, &k->mesh, G->sigs[j], n);
    }
    for (int t = 0; t < g1->ntensors; t++) {
        G->tfull_of[t] = -1;
        if (g1->tensors[t].role != WF_ROLE_PARAM)
            continue;
        for (int u = 0; u < g->ntensors && G->tfull_of[t] < 0; u++)
            if (strcmp(g->tensors[u].name, g1->tensors[t].name) == 0)
                G->tfull_of[t] = u;
    }
    G->ok = 1;
    return WF_OK;
}

static wf_status price_fast(planner *P, wf_cost_ctx *ctx, cand *k, price_group *G)
{
    if (!ctx || k->pt.pp != 1)
        return price_cand(P, ctx, k);
    char a[64], b[64];
    if (!G->open || G->graph_batch != k->graph_batch ||
        strcmp(wf_mesh_str(&G->mesh, a, sizeof a), wf_mesh_str(&k->mesh, b, sizeof b)) != 0) {
        wf_status st = price_group_open(P, ctx, k, G);
        if (st)
            return st;
    }
    if (!G->ok)
        return price_cand(P, ctx, k);
    const wf_graph *g = &P->graphs[G->gi], *g1 = wf_layout_coster_graph(G->K);
    /* Tied: every op runs its counterpart's signature (else the text path says why not). */
    for (int f = 0; f < g->nfwd; f++) {
        int j = G->one_of[f];
        if (k->choice[f] != k->choice[G->full_of[j]])
            return price_cand(P, ctx, k);
    }
    wf_sbp_sig *sig = wf_layout_coster_sigs(G->K);
    for (int j = 0; j < g1->nfwd; j++)
        sig[j] = G->sigs[j][k->choice[G->full_of[j]]];
    for (int t = 0; t < g1->ntensors; t++)
        if (G->tfull_of[t] >= 0)
            wf_layout_coster_storage(G->K, t, k->given[G->tfull_of[t]] ? &k->stor[G->tfull_of[t]] : NULL);
    wf_layout_coster_levers(G->K, k->pt.recompute, k->pt.zero);
    wf_estimate e;
    memset(&e, 0, sizeof e);
    wf_status st = wf_layout_coster_cost(G->K, P->batch, &e);
    set_one_price(st, &e, P->budget, &k->pt);
    return WF_OK;
}

/* The memory levers (TensorOpt's: full recomputation, ZeRO 1-3) as plans of
 * their own: every single-stage candidate the one cost model prices enters
 * again under each lever, its plan carrying recompute=full / zero=N and
 * priced by the one model with those keys; a variant is kept where that
 * price says it saves memory (what it costs in time is the price too). */
static wf_status add_levers(planner *P, wf_cost_ctx *ctx)
{
    int n0 = P->ncands;
    price_group G;
    memset(&G, 0, sizeof G);
    wf_layout_init(&G.lp.ol);
    wf_status st = WF_OK;
    for (int i = 0; i < n0 && st == WF_OK; i++) {
        if (!P->cands[i].pt.one_model || P->cands[i].pt.pp != 1 || P->cands[i].pt.recompute ||
            P->cands[i].pt.zero)
            continue;
        for (int rc = 0; rc < 2 && st == WF_OK; rc++)
            for (int z = 0; z < 4 && st == WF_OK; z++) {
                if (!rc && !z)
                    continue;
                if (wf_grow(&P->cands, &P->cap_cands, (int64_t)P->ncands + 1, sizeof *P->cands, 64) != 0) {
                    st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
                    break;
                }
                const cand *b = &P->cands[i];
                cand *v = &P->cands[P->ncands];
                *v = *b; /* its arrays are the base's: read, never written */
                set_levers(&v->pt, rc, z, 0);
                if ((st = price_fast(P, ctx, v, &G)) != WF_OK)
                    break;
                if (v->pt.one_model && v->pt.memory_per_device_bytes < b->pt.memory_per_device_bytes)
                    P->ncands++;
            }
    }
    price_group_free(&G);
    return st;
}

/* a is better than b on the one model: fits where b does not, else faster
 * (fitting) or smaller (neither fitting), beyond rounding. */
static int one_better(double ta, double ma, double tb, double mb, double budget)
{
    int fa = ma <= budget, fb = mb <= budget;
    if (fa != fb)
        return fa;
    return fa ? ta < tb * (1 - 1e-12) : ma < mb * (1 - 1e-12);
}

/* The op of the one model's graph g1 that op `name` of the full graph runs
 * as: itself, or for a transformer's layer l its op in layer 0. */
static int one_op_of(const wf_graph *g1, const char *name)
{
    char key[WF_NAME_LEN + 32];
    snprintf(key, sizeof key, "%s", name);
    if (strncmp(name, "layers.", 7) == 0) {
        const char *dot = strchr(name + 7, '.');
        if (dot)
            snprintf(key, sizeof key, "layers.0%s", dot);
    }
    for (int i = 0; i < g1->nfwd; i++)
        if (strcmp(g1->ops[i].name, key) == 0)
            return i;
    return -1;
}

#define DESCENT_SWEEPS 4
/* The descents' work, in ops costed (evaluations x the cost graph's ops): a
 * transformer's one-layer graph takes tens of thousands of evaluations
 * within it, a ResNet-50 (its whole graph) a few thousand. */
#define DESCENT_WORK 200000

#define DESCENT_KICKS 8 /* kicks from the fastest descended plan (on a work budget of their own) */

static uint64_t next_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Op j's signatures on the mesh into *buf (grown as needed): their count,
 * or a negative wf_status. */
static int op_sigs(const wf_graph *g1, int j, const wf_mesh *mesh, wf_sbp_sig **buf, int *cap)
{
    int n = wf_sbp_op_sigs(g1, j, mesh, NULL, 0);
    if (n < 0)
        return n;
    if (n > *cap) {
        free(*buf);
        *cap = 0;
        if (!(*buf = malloc(sizeof **buf * (size_t)n)))
            return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        *cap = n;
    }
    wf_sbp_op_sigs(g1, j, mesh, *buf, *cap);
    return n;
}

/* Sweeps of coordinate descent on coster K from its current signatures,
 * priced (*bt, *bm): op by op, every signature of the op, the best kept,
 * until a sweep changes nothing (DESCENT_SWEEPS at most). *moved: 1 when a
 * signature changed. */
static wf_status sweeps(planner *P, wf_layout_coster *K, double *bt, double *bm, wf_sbp_sig **buf, int *cap,
                        int64_t *work, int64_t budget, int *moved)
{
    const wf_graph *g1 = wf_layout_coster_graph(K);
    const wf_mesh *mesh = wf_layout_coster_mesh(K);
    wf_sbp_sig *sig = wf_layout_coster_sigs(K);
    wf_estimate e;
    for (int sweep = 0; sweep < DESCENT_SWEEPS; sweep++) {
        int any = 0;
        for (int j = 0; j < g1->nfwd; j++) {
            int n = op_sigs(g1, j, mesh, buf, cap);
            if (n < 0)
                return (wf_status)n;
            const wf_sbp_sig cur = sig[j];
            int best = -1;
            for (int x = 0; x < n && *work < budget; x++) {
                if (wf_sbp_sig_equal(&(*buf)[x], &cur, g1->ops[j].nin, g1->ops[j].nout, mesh->naxes))
                    continue;
                *work += g1->nfwd;
                sig[j] = (*buf)[x];
                if (wf_layout_coster_cost(K, P->batch, &e) != WF_OK) {
                    wf_clear_error();
                    continue;
                }
                if (one_better(e.iteration_time_s, e.memory_per_device_bytes, *bt, *bm, P->budget)) {
                    *bt = e.iteration_time_s;
                    *bm = e.memory_per_device_bytes;
                    best = x;
                }
            }
            sig[j] = best >= 0 ? (*buf)[best] : cur;
            any |= best >= 0;
        }
        *moved |= any;
        if (!any)
            break;
    }
    return WF_OK;
}

/* Coordinate descent on the one cost model from candidate i's layouts: op
 * by op of the model's cost graph (a transformer's ops of one layer stand
 * for every layer, as the search ties them), every signature of the op on
 * the mesh, the best kept (fitting first, then time), until a sweep changes
 * nothing; then `kicks` kicks (1 to 3 ops drawn at random from the best,
 * descended again, kept when better). Parameters are kept as their first reader reads them. The
 * result, when the one model prices it better than candidate i, is added
 * as a candidate of its own (same mesh, stages and micro-batches). */
static wf_status descend(planner *P, wf_cost_ctx *ctx, int i, int64_t *work, int64_t budget, int kicks)
{
    cand start = P->cands[i];
    if (!start.pt.one_model || start.pt.pp != 1)
        return WF_OK;
    int gi;
    wf_status st = get_graph(P, start.graph_batch, &gi);
    if (st)
        return st;
    const wf_graph *g = &P->graphs[gi];
    wf_layout_plan lp; /* the start resolved in memory (its storage ignored: keep_storage 0) */
    wf_plan keys;
    wf_layout_coster *K = NULL;
    wf_sbp_sig *buf = NULL;
    int cap = 0;
    st = resolve_cand(P, &start, g, 0, &lp, &keys);
    if (st == WF_INTERNAL || st == WF_NOMEM)
        goto done;
    if (st != WF_OK || wf_layout_coster_resolved(P->mc, P->c, ctx, P->batch, &keys, &lp, 0, &K) != WF_OK) {
        st = WF_OK;
        wf_clear_error(); /* not the one model's layouts: nothing to descend on */
        goto done;
    }
    const wf_graph *g1 = wf_layout_coster_graph(K);
    const wf_mesh *mesh = wf_layout_coster_mesh(K);
    wf_sbp_sig *sig = wf_layout_coster_sigs(K);
    wf_estimate e;
    if (wf_layout_coster_cost(K, P->batch, &e) != WF_OK) {
        wf_clear_error();
        goto done;
    }
    double bt = e.iteration_time_s, bm = e.memory_per_device_bytes;
    int changed = 0;
    st = sweeps(P, K, &bt, &bm, &buf, &cap, work, budget, &changed);
    /* Kicks (an iterated local search on the one model): from the best so
     * far, 1 to 3 ops drawn at random (a fixed sequence per start), descended
     * again; kept when better. */
    wf_sbp_sig *best = st == WF_OK ? malloc(sizeof *best * ((size_t)g1->nfwd + 1)) : NULL;
    if (st == WF_OK && !best)
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)i;
    for (int kick = 0; st == WF_OK && kick < kicks && *work < budget; kick++) {
        memcpy(best, sig, sizeof *best * (size_t)g1->nfwd);
        const int nk = 1 + (int)(next_rand(&seed) % 3);
        for (int q = 0; q < nk && st == WF_OK; q++) {
            int j = (int)(next_rand(&seed) % (uint64_t)g1->nfwd);
            int n = op_sigs(g1, j, mesh, &buf, &cap);
            if (n > 0)
                sig[j] = buf[next_rand(&seed) % (uint64_t)n];
            else if (n < 0)
                st = (wf_status)n;
        }
        double kt = 1e300, km = 1e300;
        *work += g1->nfwd;
        if (st == WF_OK && wf_layout_coster_cost(K, P->batch, &e) == WF_OK) {
            kt = e.iteration_time_s;
            km = e.memory_per_device_bytes;
        } else {
            wf_clear_error();
        }
        int moved = 0;
        if (st == WF_OK)
            st = sweeps(P, K, &kt, &km, &buf, &cap, work, budget, &moved);
        if (st == WF_OK && km < 1e300 && one_better(kt, km, bt, bm, P->budget)) {
            bt = kt;
            bm = km;
            changed = 1;
        } else {
            memcpy(sig, best, sizeof *best * (size_t)g1->nfwd);
        }
    }
    free(best);
    if (st || !changed)
        goto done;
    /* The descended layouts as a candidate: each op's signature index in the
     * full graph, each stored parameter as its first reader reads it. */
    {
        cand *n = new_cand(P, 1, g);
        if (!n) {
            st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
            goto done;
        }
        start = P->cands[i]; /* new_cand may move the array */
        n->mesh = start.mesh;
        n->graph_batch = start.graph_batch;
        n->first[0] = 0;
        n->first[1] = g->nfwd;
        const int nt = g->ntensors;
        memcpy(n->given, start.given, (size_t)nt);
        memcpy(n->stor, start.stor, sizeof(wf_sbp) * (size_t)nt);
        sig_lists SL;
        if ((st = sig_lists_make(g, &start.mesh, &SL)) != WF_OK) {
            P->ncands--;
            goto done;
        }
        for (int f = 0; f < g->nfwd && st == WF_OK; f++) {
            int j = one_op_of(g1, g->ops[f].name);
            int m = SL.n[SL.rep[f]];
            const wf_sbp_sig *lst = SL.list[SL.rep[f]];
            if (j < 0) {
                st = wf_errorf(WF_INTERNAL, "op-level planner: op '%s' has no counterpart in the cost model's "
                                            "graph", g->ops[f].name);
                break;
            }
            n->choice[f] = -1;
            for (int x = 0; x < m && n->choice[f] < 0; x++)
                if (wf_sbp_sig_equal(&lst[x], &sig[j], g->ops[f].nin, g->ops[f].nout, start.mesh.naxes))
                    n->choice[f] = x;
            if (n->choice[f] < 0)
                st = wf_errorf(WF_INTERNAL, "op-level planner: op '%s': the descended signature is not one of its "
                                            "signatures", g->ops[f].name);
            if (st)
                break;
            for (int q = 0; q < g->ops[f].nin; q++) {
                int t = g->ops[f].in[q];
                if (g->tensors[t].role == WF_ROLE_PARAM && n->given[t] == 2)
                    continue; /* an earlier reader set it */
                if (g->tensors[t].role == WF_ROLE_PARAM && n->given[t]) {
                    n->stor[t] = lst[n->choice[f]].in[q];
                    n->given[t] = 2;
                }
            }
        }
        sig_lists_free(&SL);
        for (int t = 0; t < nt; t++)
            n->given[t] = n->given[t] ? 1 : 0;
        if (st) {
            P->ncands--;
            goto done;
        }
        /* Its proxy figures (stages, per-op shares) and its one price. */
        plan_in in;
        memset(&in, 0, sizeof in);
        in.g = g;
        in.c = P->c;
        in.mesh = n->mesh;
        in.pp = 1;
        in.m = 1;
        in.batch = P->batch;
        in.first = n->first;
        in.choice = n->choice;
        in.stor = n->stor;
        in.given = n->given;
        in.base = P->o.oplevel;
        in.budget = P->budget;
        if ((st = eval_plan(&in, &n->pt, NULL, NULL, NULL)) == WF_OK) {
            set_levers(&n->pt, start.pt.recompute, start.pt.zero, 0); /* the start's keys */
            st = price_cand(P, ctx, n);
        }
        if (st || !n->pt.one_model ||
            !one_better(n->pt.iteration_time_s, n->pt.memory_per_device_bytes, start.pt.iteration_time_s,
                        start.pt.memory_per_device_bytes, P->budget))
            P->ncands--; /* no better on the one model as written: dropped */
    }
done:
    free(buf);
    wf_layout_coster_free(K);
    wf_layout_plan_free(&lp);
    return st;
}

/* Copies a point's stages into the result's arena. */
static wf_status keep_point(wf_search_opplan_result *r, const wf_search_opplan_point *src, wf_search_opplan_point *dst)
{
    *dst = *src;
    dst->layouts = NULL;
    dst->stages = wf_arena_alloc(&r->arena, sizeof(wf_search_opplan_stage) * (size_t)src->nstages + 1);
    if (!dst->stages)
        return wf_errorf(WF_NOMEM, "op-level planner: out of memory");
    memcpy(dst->stages, src->stages, sizeof(wf_search_opplan_stage) * (size_t)src->nstages);
    return WF_OK;
}

/* A candidate's point with its plan (r->point_plans holds room for every
 * point kept). */
static wf_status keep_cand(planner *P, wf_search_opplan_result *r, const cand *k, wf_search_opplan_point *dst)
{
    wf_status st = keep_point(r, &k->pt, dst);
    int gi;
    if (st || (st = get_graph(P, k->graph_batch, &gi)))
        return st;
    if (P->o.no_point_layouts)
        return WF_OK;
    wf_layout *pl = &r->point_plans[r->npoint_plans++];
    wf_layout_init(pl);
    if ((st = build_plan(k, &P->graphs[gi], pl)) == WF_OK)
        dst->layouts = pl;
    return st;
}

void wf_search_opplan_result_free(wf_search_opplan_result *r)
{
    for (int i = 0; i < r->npoint_plans; i++)
        wf_layout_free(&r->point_plans[i]);
    free(r->point_plans);
    wf_layout_free(&r->best_plan);
    wf_graph_free(&r->graph);
    wf_arena_free(&r->arena);
    if (r->has_resolved)
        wf_layout_plan_free(&r->resolved);
    memset(r, 0, sizeof *r);
}

wf_status wf_search_opplan(const wf_model_config *mc, const wf_cluster *c, int64_t batch,
                           const wf_search_opplan_opts *opts, wf_search_opplan_result *r)
{
    memset(r, 0, sizeof *r);
    wf_arena_init(&r->arena, (size_t)1 << 16);
    wf_layout_init(&r->best_plan);
    wf_graph_init(&r->graph, "");
    double t0 = wf_now_s();
    planner P;
    memset(&P, 0, sizeof P);
    P.mc = mc;
    P.c = c;
    P.batch = batch;
    if (opts)
        P.o = *opts;
    else
        wf_search_opplan_opts_default(&P.o);
    wf_arena_init(&P.a, (size_t)1 << 16);
    for (int i = 0; i < MAX_GRAPHS; i++)
        wf_graph_init(&P.graphs[i], "");
    wf_status st = WF_OK;
    int64_t have = wf_cluster_devices(c);
    int64_t D = P.o.devices > 0 ? P.o.devices : have;
    wf_mesh *meshes = malloc(sizeof *meshes * MAX_MESHES);
    int64_t *pps = malloc(sizeof *pps * 4096);
    if (!meshes || !pps) {
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        goto out;
    }
    if (batch < 1) {
        st = wf_errorf(WF_INVAL, "op-level planner: batch=%lld must be >= 1", (long long)batch);
        goto out;
    }
    if (D > have) {
        st = wf_errorf(WF_INVAL, "op-level planner: %lld devices, cluster '%s' has %lld",
                       (long long)D, c->name, (long long)have);
        goto out;
    }
    if (P.o.top_k < 1) {
        st = wf_errorf(WF_INVAL, "op-level planner: top_k=%d (expected >= 1)", P.o.top_k);
        goto out;
    }
    P.budget = default_budget(c, P.o.max_memory_bytes);
    if (!(P.budget > 0)) {
        st = wf_errorf(WF_INVAL, "op-level planner: memory budget %g bytes", P.budget);
        goto out;
    }
    r->devices = D;
    r->budget_bytes = P.budget;
    /* Pipeline depths: 1 and the divisors of D (or the one asked for, or the one a
     * given mesh leaves). */
    wf_mesh given;
    int npp = 0;
    if (P.o.mesh) {
        if ((st = wf_mesh_parse(P.o.mesh, c, &given)))
            goto out;
        int64_t md = wf_mesh_devices(&given);
        if (D % md != 0) {
            st = wf_errorf(WF_INVAL, "--mesh %s: its %lld devices do not divide the %lld devices",
                           P.o.mesh, (long long)md, (long long)D);
            goto out;
        }
        if (P.o.pp > 0 && P.o.pp != D / md) {
            st = wf_errorf(WF_INVAL, "--mesh %s with pp=%d needs %lld devices, not %lld", P.o.mesh,
                           P.o.pp, (long long)(md * P.o.pp), (long long)D);
            goto out;
        }
        pps[npp++] = D / md;
    } else if (P.o.pp > 0) {
        if (D % P.o.pp != 0) {
            st = wf_errorf(WF_INVAL, "pp=%d does not divide the %lld devices", P.o.pp,
                           (long long)D);
            goto out;
        }
        pps[npp++] = P.o.pp;
    } else {
        for (int64_t d = 1; d <= D && npp < 4096; d++)
            if (D % d == 0)
                pps[npp++] = d;
    }
    /* The work, for the progress bar. */
    for (int i = 0; i < npp; i++) {
        int64_t micro[3];
        int nm = pps[i] == 1 ? 1 : micro_counts(batch, (int)pps[i], micro);
        int nms = P.o.mesh ? 1 : wf_mesh_candidates(c, D / pps[i], NULL, 0);
        P.work_total += (double)nm * (nms > 0 ? nms : 1);
    }
    for (int i = 0; i < npp && st == WF_OK; i++) {
        int pp = (int)pps[i];
        int nms = 1;
        if (P.o.mesh) {
            meshes[0] = given;
        } else {
            nms = wf_mesh_candidates(c, D / pp, meshes, MAX_MESHES);
            if (nms < 0) {
                st = (wf_status)nms;
                break;
            }
            if (nms > MAX_MESHES)
                nms = MAX_MESHES;
        }
        if (pp == 1) {
            for (int k = 0; k < nms && st == WF_OK; k++) {
                st = plan_flat(&P, &meshes[k]);
                tick(&P);
            }
            continue;
        }
        int64_t micro[3];
        int nm = micro_counts(batch, pp, micro);
        for (int j = 0; j < nm && st == WF_OK; j++)
            for (int k = 0; k < nms && st == WF_OK; k++) {
                st = plan_pipelined(&P, pp, micro[j], &meshes[k]);
                tick(&P);
            }
    }
    if (st)
        goto out;
    r->searched = P.nsearched;
    r->searches = P.searches;
    if (P.ncands == 0) {
        st = wf_errorf(WF_INVAL, "op-level planner: no candidate for model '%s' on %lld devices "
                                 "with batch %lld (pipeline stages need at least one op each)",
                       mc->name, (long long)D, (long long)batch);
        goto out;
    }
    /* Rank: fitting first, then time, memory, plan string; polish the two
     * fastest pipelined candidates and rank again. */
    qsort(P.cands, (size_t)P.ncands, sizeof *P.cands, cmp_cand);
    for (int i = 0, done = 0; i < P.ncands && done < 2 && st == WF_OK; i++)
        if (P.cands[i].pt.pp > 1) {
            st = polish(&P, i);
            done++;
        }
    if (st)
        goto out;
    /* One price: every candidate and every other fitting point of the
     * single-stage searches' frontiers is priced by the one cost model (the
     * figure `weft estimate` reports for its plan); the fastest few are
     * descended on it; the ranking, the frontier and the choice are on it. */
    for (int i = 0; i < P.nalts && st == WF_OK; i++) {
        if (wf_grow(&P.cands, &P.cap_cands, (int64_t)P.ncands + 1, sizeof *P.cands, 64) != 0)
            st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        else
            P.cands[P.ncands++] = P.alts[i];
    }
    {
        wf_cost_ctx *ctx = NULL;
        if (wf_cost_ctx_create(mc, c, &ctx) != WF_OK) {
            wf_clear_error();
            ctx = NULL;
        }
        /* Grouped by (stages, micro-batch, mesh), each group priced on one coster. */
        qsort(P.cands, (size_t)P.ncands, sizeof *P.cands, cmp_group);
        price_group G;
        memset(&G, 0, sizeof G);
        wf_layout_init(&G.lp.ol);
        for (int i = 0; i < P.ncands && st == WF_OK; i++)
            st = price_fast(&P, ctx, &P.cands[i], &G);
        price_group_free(&G);
        if (st == WF_OK && ctx) {
            qsort(P.cands, (size_t)P.ncands, sizeof *P.cands, cmp_cand);
            /* The fastest DESCENT_STARTS candidates of distinct meshes. */
            int n0 = P.ncands;
            int64_t work = 0;
            const int starts = P.o.descent_starts > 0 ? P.o.descent_starts
                             : P.o.descent_starts < 0 ? n0 : DESCENT_STARTS;
            const int64_t budget = P.o.descent_work > 0 ? P.o.descent_work
                                 : P.o.descent_work < 0 ? INT64_MAX : DESCENT_WORK;
            for (int i = 0, done = 0; i < n0 && done < starts && work < budget && st == WF_OK; i++) {
                int dup = 0;
                for (int q = 0; q < i && !dup && P.o.descent_starts >= 0; q++)
                    dup = strcmp(P.cands[q].pt.plan, P.cands[i].pt.plan) == 0;
                if (dup || !P.cands[i].pt.one_model || P.cands[i].pt.pp != 1)
                    continue;
                st = descend(&P, ctx, i, &work, budget, 0);
                done++;
            }
            /* Then kicks from the fastest descended plan, on a budget of their own. */
            qsort(P.cands, (size_t)P.ncands, sizeof *P.cands, cmp_cand);
            int64_t kwork = 0;
            const int kicks = P.o.descent_kicks > 0 ? P.o.descent_kicks : P.o.descent_kicks < 0 ? 0 : DESCENT_KICKS;
            for (int i = 0; i < P.ncands && st == WF_OK && kicks > 0; i++)
                if (P.cands[i].pt.one_model && P.cands[i].pt.pp == 1 && !P.cands[i].pt.recompute &&
                    !P.cands[i].pt.zero) {
                    st = descend(&P, ctx, i, &kwork, budget, kicks);
                    break;
                }
        }
        if (st == WF_OK && ctx)
            st = add_levers(&P, ctx);
        wf_cost_ctx_free(ctx);
        wf_clear_error();
        if (st)
            goto out;
        qsort(P.cands, (size_t)P.ncands, sizeof *P.cands, cmp_cand);
    }
    int nfit = 0;
    while (nfit < P.ncands && P.cands[nfit].pt.fits)
        nfit++;
    /* The memory levers are for memory: the ranking and the choice are the
     * plans without them while one of those fits (lev = 0), else with them;
     * the frontier takes the lever variants that run no faster than the
     * chosen plan (the one model prices ZeRO's sharded optimizer step a
     * little faster than a data-parallel plan's own). */
    int lev = 1;
    for (int i = 0; i < nfit && lev; i++)
        lev = P.cands[i].pt.recompute || P.cands[i].pt.zero;
#define HAS_LEVERS(k) ((k)->pt.recompute || (k)->pt.zero)
    r->point_plans = calloc((size_t)P.o.top_k + (size_t)nfit + 1, sizeof *r->point_plans);
    if (!r->point_plans) {
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        goto out;
    }
    /* The ranking: the fastest plan of each (mesh, pp, micro-batches), with
     * or without the memory levers. */
    r->top = wf_arena_alloc(&r->arena, sizeof *r->top * ((size_t)P.o.top_k + 1));
    if (!r->top) {
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        goto out;
    }
    for (int i = 0; i < nfit && r->ntop < P.o.top_k && st == WF_OK; i++) {
        if (!lev && HAS_LEVERS(&P.cands[i]))
            continue;
        int dup = 0;
        for (int q = 0; q < r->ntop && !dup; q++)
            dup = strcmp(r->top[q].mesh, P.cands[i].pt.mesh) == 0 && r->top[q].pp == P.cands[i].pt.pp &&
                  r->top[q].micro_batches == P.cands[i].pt.micro_batches;
        if (!dup)
            st = keep_cand(&P, r, &P.cands[i], &r->top[r->ntop++]);
    }
    /* The frontier: every fitting plan whose memory is strictly below that
     * of every faster one. */
    r->pareto = wf_arena_alloc(&r->arena, sizeof *r->pareto * ((size_t)nfit + 1));
    if (!r->pareto) {
        st = wf_errorf(WF_NOMEM, "op-level planner: out of memory");
        goto out;
    }
    double t_chosen = 0;
    for (int i = 0; i < nfit; i++)
        if (lev || !HAS_LEVERS(&P.cands[i])) {
            t_chosen = P.cands[i].pt.iteration_time_s;
            break;
        }
    for (int i = 0; i < nfit && st == WF_OK; i++) {
        if (HAS_LEVERS(&P.cands[i]) && !lev && P.cands[i].pt.iteration_time_s < t_chosen)
            continue;
        if (r->npareto > 0 &&
            P.cands[i].pt.memory_per_device_bytes >= r->pareto[r->npareto - 1].memory_per_device_bytes)
            continue;
        st = keep_cand(&P, r, &P.cands[i], &r->pareto[r->npareto++]);
    }
    if (st)
        goto out;
    /* The chosen plan: the fastest that fits, else the smallest. */
    int chosen = 0;
    while (chosen < nfit && !lev && HAS_LEVERS(&P.cands[chosen]))
        chosen++;
    if (nfit == 0)
        for (int i = 1; i < P.ncands; i++)
            if (P.cands[i].pt.memory_per_device_bytes <
                P.cands[chosen].pt.memory_per_device_bytes)
                chosen = i;
    const cand *k = &P.cands[chosen];
    int gi;
    if ((st = get_graph(&P, k->graph_batch, &gi)) ||
        (st = build_plan(k, &P.graphs[gi], &r->best_plan)))
        goto out;
    /* Its numbers and per-op shares come from evaluating the plan just built,
     * as `weft plan --verify` will. */
    wf_search_oplevel_opts eo = P.o.oplevel;
    st = evaluate_with(mc, c, batch, &r->best_plan, P.budget, &eo, &r->arena, &r->best, &r->graph,
                       &r->op_compute_s, &r->op_comm_s, &r->op_stage, 1, &r->resolved);
    if (st)
        goto out;
    r->has_resolved = 1;
    r->best.layouts = &r->best_plan;
    r->has_best = 1;
    if (!r->best.fits)
        st = wf_errorf(WF_NOFIT, "no op-level plan fits: the smallest memory found is %.2f GiB per "
                                 "device (%s), the budget is %.2f GiB",
                       r->best.memory_per_device_bytes / 1073741824.0, r->best.plan,
                       P.budget / 1073741824.0);
out:
    r->search_time_s = wf_now_s() - t0;
    for (int i = 0; i < MAX_GRAPHS; i++)
        wf_graph_free(&P.graphs[i]);
    free(P.cands);
    free(P.alts);
    wf_arena_free(&P.a);
    free(meshes);
    free(pps);
    return st;
}

static wf_status copy_plan(const wf_layout *src, wf_layout *dst)
{
    wf_status st = wf_layout_set(dst, src->mesh, src->pp, src->micro_batches);
    if (st == WF_OK) /* the keys too: the levers are priced from them */
        snprintf(dst->keys, sizeof dst->keys, "%s", src->keys);
    for (int s = 0; st == WF_OK && s < src->pp; s++)
        if (src->stage_first && src->stage_first[s])
            st = wf_layout_set_stage(dst, s, src->stage_first[s]);
    for (int i = 0; st == WF_OK && i < src->nlayouts; i++)
        st = wf_layout_add_sig(dst, src->op[i], src->sig[i]);
    for (int i = 0; st == WF_OK && i < src->nstorage; i++)
        st = wf_layout_add_storage(dst, src->storage_stage[i], src->tensor[i],
                                         src->layout[i]);
    return st;
}

wf_status wf_search_opplan_verify(const wf_model_config *mc, const wf_cluster *c, int64_t batch,
                                  const wf_layout *plan, const wf_search_opplan_opts *opts,
                                  wf_search_opplan_result *r)
{
    memset(r, 0, sizeof *r);
    wf_arena_init(&r->arena, (size_t)1 << 16);
    wf_layout_init(&r->best_plan);
    wf_graph_init(&r->graph, "");
    double t0 = wf_now_s();
    wf_search_opplan_opts o;
    if (opts)
        o = *opts;
    else
        wf_search_opplan_opts_default(&o);
    r->budget_bytes = default_budget(c, o.max_memory_bytes);
    wf_status st = copy_plan(plan, &r->best_plan);
    if (st == WF_OK)
        st = evaluate_with(mc, c, batch, &r->best_plan, r->budget_bytes, &o.oplevel, &r->arena, &r->best,
                           &r->graph, &r->op_compute_s, &r->op_comm_s, &r->op_stage, 1, &r->resolved);
    if (st == WF_OK) {
        r->has_resolved = 1; /* it reads r->best_plan's strings, which live as long */
        r->best.layouts = &r->best_plan;
        r->has_best = 1;
        r->devices = r->best.devices;
        r->ntop = 1;
        r->top = wf_arena_alloc(&r->arena, sizeof *r->top);
        if (!r->top || (st = keep_point(r, &r->best, &r->top[0])))
            st = st ? st : wf_errorf(WF_NOMEM, "op-level plan: out of memory");
        else
            r->top[0].layouts = &r->best_plan;
    }
    r->search_time_s = wf_now_s() - t0;
    return st;
}

/* ---- JSON ------------------------------------------------------------------------------ */

cJSON *wf_search_opplan_point_to_json(const wf_search_opplan_point *pt, const wf_graph *g)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "plan", pt->plan);
    cJSON_AddNumberToObject(j, "iteration_time_s", pt->iteration_time_s);
    cJSON_AddNumberToObject(j, "samples_per_s", pt->samples_per_s);
    cJSON_AddNumberToObject(j, "memory_per_device_bytes", pt->memory_per_device_bytes);
    cJSON_AddBoolToObject(j, "fits", pt->fits);
    cJSON_AddStringToObject(j, "priced_by", pt->one_model ? "one_model" : "proxy");
    cJSON *b = cJSON_AddObjectToObject(j, "breakdown");
    if (b) {
        cJSON_AddNumberToObject(b, "compute", pt->compute_s - pt->recompute_s);
        cJSON_AddNumberToObject(b, "comm", pt->comm_s);
        cJSON_AddNumberToObject(b, "pp_comm", pt->pp_comm_s);
        cJSON_AddNumberToObject(b, "bubble", pt->bubble_s);
        cJSON_AddNumberToObject(b, "grad_sync", pt->grad_sync_s);
        /* The estimate contract's keys (ARCHITECTURE.md), mapped from the op-level
         * model: in-op and boxing collectives are the operator-parallel (tp) traffic,
         * the weight-gradient reduction is the data-parallel one; the op-level model
         * recomputes only in a frontier point's levers, charges no optimizer step and
         * overlaps no communication. */
        cJSON_AddNumberToObject(b, "recompute", pt->recompute_s);
        cJSON_AddNumberToObject(b, "tp_comm", pt->comm_s);
        cJSON_AddNumberToObject(b, "dp_comm", pt->grad_sync_s);
        cJSON_AddNumberToObject(b, "optimizer", 0.0);
        cJSON_AddNumberToObject(b, "exposed_comm", pt->comm_s + pt->pp_comm_s + pt->grad_sync_s);
    }
    cJSON_AddStringToObject(j, "recompute", pt->recompute ? "full" : "none");
    cJSON_AddNumberToObject(j, "zero", pt->zero);
    cJSON_AddStringToObject(j, "mesh", pt->mesh);
    cJSON_AddNumberToObject(j, "pp", pt->pp);
    cJSON_AddNumberToObject(j, "micro_batches", (double)pt->micro_batches);
    cJSON_AddNumberToObject(j, "devices", (double)pt->devices);
    cJSON_AddNumberToObject(j, "model_flops_per_iteration", pt->model_flops_per_iteration);
    cJSON_AddNumberToObject(j, "tflops_per_device", pt->tflops_per_device);
    cJSON_AddNumberToObject(j, "mfu", pt->mfu);
    cJSON *st = cJSON_AddArrayToObject(j, "stages");
    for (int s = 0; st && s < pt->nstages; s++) {
        const wf_search_opplan_stage *S = &pt->stages[s];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        if (g && S->first_op < g->nfwd && S->end_op >= 1) {
            cJSON_AddStringToObject(o, "first_op", g->ops[S->first_op].name);
            cJSON_AddStringToObject(o, "last_op", g->ops[S->end_op - 1].name);
        }
        cJSON_AddNumberToObject(o, "ops", S->end_op - S->first_op);
        cJSON_AddNumberToObject(o, "inflight", S->inflight);
        cJSON_AddNumberToObject(o, "time_s", S->time_s);
        cJSON_AddNumberToObject(o, "compute_s", S->compute_s);
        cJSON_AddNumberToObject(o, "send_s", S->send_s);
        cJSON_AddNumberToObject(o, "grad_sync_s", S->grad_sync_s);
        cJSON_AddNumberToObject(o, "memory_bytes", S->memory_bytes);
        cJSON_AddItemToArray(st, o);
    }
    return j;
}
