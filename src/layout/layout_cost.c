/* One cost model: the estimate of an op-level plan (docs/cost-model.md, "One
 * cost model").
 *
 * An op-level plan's layouts become the cost model's layout descriptor
 * (wf_cost_layout, cost_records.h), and its keys (recompute, zero, the schedules,
 * vpp, the profile) the rest of a whole-model plan; wf_estimate_layouts then
 * composes them exactly as it composes a whole-model plan, whose descriptor
 * is Megatron's (wf_cost_layout_megatron). Nothing here prices anything: it
 * reads the layouts and says, per op of the cost context, what they divide
 * and which collectives they need where.
 *
 * The mesh: one to three axes, at most two of them model-parallel (a mixture
 * of experts: costed as the whole-model plan it lowers from, expert_layout).
 * An axis on which every activation is split by
 * the batch (S0) and every weight is replicated is the data-parallel axis
 * (the outer one of two); the other is the model-parallel axis, of tp
 * devices. Per op of the context (for a transformer the one-layer graph:
 * embedding, layer 0, head; every layer must run layer 0's layouts, as the
 * op-level search ties them), on the model-parallel axis:
 *
 *   work      divided by tp when the op's output is split or partial, or an
 *             input split (its share of the work);
 *   weights   divided by tp when split;
 *   saved     what the op keeps of its input (the context's "replicated"
 *             part) divided as that input was produced (a framework keeps
 *             the shard and re-gathers it for the weight gradient); the rest
 *             divided like the work;
 *   boxing    a tensor produced in one layout and read in another is moved
 *             by the collective of that change (P->B all-reduce, P->S
 *             reduce-scatter, S->B all-gather, S->S all-to-all; B->S and ->P
 *             are local), and its gradient, summed over the readers, by the
 *             collective of the dual change (sbp.h); an all-gathered input
 *             that a product keeps for its weight gradient is gathered again
 *             in backward. Each collective may hide behind the products
 *             beside it that do not wait for it: a reduction of a producer's
 *             partial output behind that producer's forward (reduce-scatter)
 *             and the gradient's all-gather behind its input-gradient
 *             product; a gather behind its readers' forward and, re-gathered,
 *             their input-gradient products; a gradient's reduction behind
 *             its readers' weight-gradient products. How far the framework
 *             overlaps each is its profile's (tp_overlap);
 *   in-op     a loss split by the vocabulary all-reduces its maximum, sum
 *             and target logit (3 x 4 bytes per token).
 *
 * A tensor a layer reads from the layer before arrives in the layout the
 * layer's last op produces (the steady state of the repeated block). */
#include "weft/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of layout s on axis a. */
static int8_t ax_of(const wf_sbp *s, int a) { return s->ax[a]; }

static int is_split(int8_t v) { return v >= 0; }

/* An axis is data-parallel for op i: its non-parameter operands split by
 * the batch (a scalar loss partial), its weights replicated. */
static int dp_op(const wf_graph *g, int i, const wf_sbp_sig *s, int a)
{
    const wf_op *o = &g->ops[i];
    for (int j = 0; j < o->nin; j++) {
        const wf_tensor *t = &g->tensors[o->in[j]];
        int8_t v = ax_of(&s->in[j], a);
        /* A scalar (a loss summed with another) is a partial sum. */
        if (t->role == WF_ROLE_PARAM ? v != WF_SBP_B : !(v == 0 || (t->ndim == 0 && v == WF_SBP_P)))
            return 0;
    }
    for (int j = 0; j < o->nout; j++) {
        const wf_tensor *t = &g->tensors[o->out[j]];
        int8_t v = ax_of(&s->out[j], a);
        if (!(v == 0 || (t->ndim == 0 && v == WF_SBP_P)))
            return 0;
    }
    return 1;
}

/* The op's work is divided on axis a. */
static int work_split(const wf_graph *g, int i, const wf_sbp_sig *s, int a)
{
    const wf_op *o = &g->ops[i];
    for (int j = 0; j < o->nout; j++)
        if (ax_of(&s->out[j], a) != WF_SBP_B)
            return 1;
    for (int j = 0; j < o->nin; j++)
        if (is_split(ax_of(&s->in[j], a)))
            return 1;
    return 0;
}

static int is_view(wf_op_kind k) { return k == WF_OP_RESHAPE || k == WF_OP_FLATTEN; }

/* Input slot of tensor t in op i, or -1. */
static int slot_of(const wf_graph *g, int i, int t)
{
    for (int j = 0; j < g->ops[i].nin; j++)
        if (g->ops[i].in[j] == t)
            return j;
    return -1;
}

static int has_param(const wf_graph *g, int i)
{
    for (int j = 0; j < g->ops[i].nin; j++)
        if (g->tensors[g->ops[i].in[j]].role == WF_ROLE_PARAM)
            return 1;
    return 0;
}

typedef struct {
    const wf_graph *g;
    const wf_sbp_sig *sig;  /* [nfwd] */
    const int *sec;         /* [nfwd] the op's section */
    int a;                  /* the model-parallel axis */
    int naxes;
    int64_t mb;             /* the graph's micro-batch (bytes at micro-batch 1 = bytes / mb) */
    const unsigned char *view; /* [nfwd] a reshape read and written replicated after a gather: its
                                  input's boxing is charged at its readers (Megatron gathers at the
                                  product the view feeds) */
    wf_cost_layout *L;
    int at;                 /* the op the next collective belongs to */
    int sub;                /* the axis's group: 1 + k when it is sub-axis k of two model-parallel
                               axes (wf_cost_layout.sub[k]), 0: the whole tp axis */
    const int8_t *opv;      /* [ntensors] then, each tensor's layout on the other axis */
    double ot;              /* and that axis's size */
    const int *rd_start, *rd_op, *rd_slot; /* each tensor's forward readers, in op order, with the
                                              slot it is read in first (the coster's) */
} derive;

static wf_status event(derive *d, int sec, wf_coll_kind kind, int bwd, double bytes, double times, wf_cost_win win,
                       int need, const int *ops, int nops)
{
    wf_cost_event e;
    memset(&e, 0, sizeof e);
    e.at = d->at;
    e.section = sec;
    e.kind = kind;
    e.bwd = bwd;
    e.bytes = bytes;
    e.times = times;
    e.win = win;
    e.need = need;
    e.sub = d->sub;
    e.nwop = nops < WF_COST_EVENT_OPS ? nops : WF_COST_EVENT_OPS;
    for (int j = 0; j < e.nwop; j++)
        e.wop[j] = ops[j];
    return wf_cost_layout_add_event(d->L, &e);
}

/* The collectives of tensor t: produced by op `prod` in layout value pv (on
 * the model-parallel axis), read by the forward ops of the context. */
static wf_status boxing_of(derive *d, int t, int prod, int8_t pv, int sec_override)
{
    const wf_graph *g = d->g;
    const int a = d->a;
    int readers[64], rslot[64], nr = 0;
    for (int q = d->rd_start[t]; q < d->rd_start[t + 1] && nr < 64; q++)
        if (!d->view[d->rd_op[q]]) {
            rslot[nr] = d->rd_slot[q];
            readers[nr++] = d->rd_op[q];
        }
    if (nr == 0)
        return WF_OK;
    const int sec = sec_override >= 0 ? sec_override : d->sec[readers[0]];
    d->at = readers[0];
    /* The vector moved: the tensor's shard over the other model-parallel axis. */
    const double bytes = (double)wf_tensor_bytes(&g->tensors[t]) / (double)d->mb /
                         (d->opv && is_split(d->opv[t]) ? d->ot : 1.0);
    wf_status st = WF_OK;
    /* Forward: one move per distinct layout the readers take. */
    int done[64] = {0};
    for (int r = 0; r < nr && st == WF_OK; r++) {
        if (done[r])
            continue;
        int8_t rv = ax_of(&d->sig[readers[r]].in[rslot[r]], a);
        int grp[64], ng = 0, keeps = 0;
        int keepers[64], nk = 0;
        for (int q = r; q < nr; q++) {
            int8_t qv = ax_of(&d->sig[readers[q]].in[rslot[q]], a);
            if (qv != rv)
                continue;
            done[q] = 1;
            grp[ng++] = readers[q];
            if (wf_op_is_matrix(g->ops[readers[q]].kind) && has_param(g, readers[q])) {
                keeps = 1;
                keepers[nk++] = readers[q];
            }
        }
        if (rv == pv)
            continue;
        if (pv == WF_SBP_P && rv == WF_SBP_B) {
            st = event(d, sec, WF_COLL_ALLREDUCE, 0, bytes, 1, WF_COST_WIN_NONE, 3, NULL, 0);
        } else if (pv == WF_SBP_P && is_split(rv)) {
            st = event(d, sec, WF_COLL_REDUCE_SCATTER, 0, bytes, 1, WF_COST_WIN_FWD, 2, &prod, prod >= 0);
        } else if (is_split(pv) && rv == WF_SBP_B) {
            st = event(d, sec, WF_COLL_ALLGATHER, 0, bytes, 1, WF_COST_WIN_FWD, 2, grp, ng);
            if (st == WF_OK && keeps)
                st = event(d, sec, WF_COLL_ALLGATHER, 1, bytes, 1, WF_COST_WIN_DGRAD, 1, keepers, nk);
        } else if (is_split(pv) && is_split(rv)) {
            st = event(d, sec, WF_COLL_ALLTOALL, 0, bytes, 1, WF_COST_WIN_NONE, 3, NULL, 0);
        }
    }
    wf_dtype dt = g->tensors[t].dtype;
    if (st != WF_OK || dt == WF_DTYPE_INT32 || dt == WF_DTYPE_INT64)
        return st;
    /* Backward: the readers' gradients, summed, into the layout the
     * producer needs (its output with P as B). */
    int pgr[64], np = 0, any_b = 0;
    int8_t gv = WF_SBP_B;
    int first = 1;
    for (int r = 0; r < nr; r++) {
        const wf_op *o = &g->ops[readers[r]];
        wf_sbp gs = wf_sbp_grad_of_input(&d->sig[readers[r]], o->nout, rslot[r], d->naxes);
        int8_t v = ax_of(&gs, a);
        if (v == WF_SBP_P)
            pgr[np++] = readers[r];
        if (v == WF_SBP_B)
            any_b = 1;
        if (first)
            gv = v;
        else if (v != gv)
            gv = WF_SBP_B;
        first = 0;
    }
    if (np > 0)
        gv = WF_SBP_P;
    else if (any_b)
        gv = WF_SBP_B;
    int8_t need = pv == WF_SBP_P ? WF_SBP_B : pv;
    if (gv == need)
        return WF_OK;
    if (gv == WF_SBP_P && need == WF_SBP_B)
        return event(d, sec, WF_COLL_ALLREDUCE, 1, bytes, 1, WF_COST_WIN_WGRAD, 1, pgr, np);
    if (gv == WF_SBP_P && is_split(need))
        return event(d, sec, WF_COLL_REDUCE_SCATTER, 1, bytes, 1, WF_COST_WIN_WGRAD, 1, pgr, np);
    if (is_split(gv) && need == WF_SBP_B)
        return event(d, sec, WF_COLL_ALLGATHER, 1, bytes, 1, WF_COST_WIN_DGRAD, 2, &prod, prod >= 0);
    if (is_split(gv) && is_split(need))
        return event(d, sec, WF_COLL_ALLTOALL, 1, bytes, 1, WF_COST_WIN_NONE, 3, NULL, 0);
    return WF_OK;
}

/* The forward op of lp's graph named `name` (hint first), or -1. */
static int resolved_op(const wf_layout_plan *lp, const char *name, int hint)
{
    const wf_graph *g = &lp->graph;
    if (hint >= 0 && hint < g->nfwd && strcmp(g->ops[hint].name, name) == 0)
        return hint;
    return wf_layout_op_index(lp, name);
}

/* Every layer runs layer 0's layouts ("layers.0.X" and "layers.L.X"): each
 * layer's op of the resolved plan (every op has its signature there)
 * compared with its op in layer 0. */
static wf_status check_tied(const wf_model_config *m, const wf_layout_plan *lp)
{
    const wf_graph *g = &lp->graph;
    int per = 0; /* ops per layer: layer 0's run */
    for (int i = 0; i < g->nfwd; i++)
        per += strncmp(g->ops[i].name, "layers.0.", 9) == 0;
    for (int i = 0; i < g->nfwd && per > 0; i++) {
        const char *name = g->ops[i].name;
        if (strncmp(name, "layers.", 7) != 0)
            continue;
        char *end = NULL;
        long long l = strtoll(name + 7, &end, 10);
        if (!end || *end != '.' || l < 1 || l >= m->layers)
            continue;
        char zero[WF_NAME_LEN + 32];
        snprintf(zero, sizeof zero, "layers.0%s", end);
        int z = resolved_op(lp, zero, i - (int)l * per);
        if (z < 0 || wf_sbp_sig_equal(&lp->sig[z], &lp->sig[i], g->ops[i].nin, g->ops[i].nout, lp->mesh.naxes))
            continue;
        char a[512], b[512];
        wf_sbp_sig_str(&lp->sig[i], g->ops[i].nin, g->ops[i].nout, lp->mesh.naxes, a, sizeof a);
        wf_sbp_sig_str(&lp->sig[z], g->ops[z].nin, g->ops[z].nout, lp->mesh.naxes, b, sizeof b);
        return wf_errorf(WF_INVAL, "op-level plan: op '%s' runs %s, '%s' runs %s: the cost model ties the layers "
                                   "of a model (as weft plan --op-level does)", name, a, zero, b);
    }
    return WF_OK;
}

/* The stages of a transformer: equal layer ranges, embedding first (with
 * vpp > 1 each stage's first chunk of layers / (pp vpp)). */
static wf_status check_stages(const wf_model_config *m, const wf_layout_plan *lp, int vpp, const char *first_op)
{
    int64_t chunks = (int64_t)lp->nstages * vpp;
    if (m->layers % chunks != 0)
        return wf_errorf(WF_INVAL, "op-level plan: %lld layers do not split into pp=%d x vpp=%d chunks",
                         (long long)m->layers, lp->nstages, vpp);
    for (int s = 0; s < lp->nstages; s++) {
        char want[WF_NAME_LEN + 32];
        if (s == 0)
            snprintf(want, sizeof want, "%s", first_op);
        else
            snprintf(want, sizeof want, "layers.%lld.", (long long)(s * (m->layers / chunks)));
        const char *got = lp->graph.ops[lp->stage_first[s]].name;
        int ok = s == 0 ? strcmp(got, want) == 0 : strncmp(got, want, strlen(want)) == 0;
        if (!ok)
            return wf_errorf(WF_INVAL, "op-level plan: stage %d starts at '%s'; the cost model cuts a transformer "
                                       "into stages of equal layer ranges (stage %d starts at %s%s)", s, got, s,
                             want, s ? "ln1" : "");
    }
    return WF_OK;
}

/* An op-level plan of a mixture of experts: its expert layouts are those of
 * the whole-model plan it lowers from (wf_plan_raise: mesh edp x ep x tp,
 * the experts split over ep, and over tp or not), so it is costed as that
 * plan is, by Megatron's layouts at its tp and sp with the plan's ep: the
 * estimate of the plan string itself. Other expert layouts are refused. */
static wf_status expert_layout(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                               const wf_plan *keys, const wf_layout_plan *lp, wf_cost_layout *out,
                               wf_plan *as_plan)
{
    wf_plan p;
    wf_status st = wf_plan_raise_resolved(m, c, batch, keys, lp, &p);
    if (st != WF_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", wf_last_error());
        return wf_errorf(st, "mixture of experts '%s': the cost model takes the expert layouts of whole-model "
                             "plans (their lowering); %s", m->name, why);
    }
    if ((st = wf_cost_layout_megatron(ctx, p.tp, p.sp, out)) != WF_OK)
        return st;
    p.given |= WF_PLAN_GIVEN_DP | WF_PLAN_GIVEN_MBS;
    *as_plan = p;
    return WF_OK;
}

/* A plan's layouts held ready to be costed again and again (layout.h): the
 * graph the cost context describes, its ops' sections, the mesh, the keys,
 * each op's signature and the storage of the parameters, parsed once. */
struct wf_layout_coster {
    const wf_model_config *m;
    wf_cost_ctx *ctx;
    const wf_layout_plan *lp; /* the plan resolved (borrowed, or own) */
    wf_layout_plan own;      /* the resolution of a plan given as an op-level form */
    wf_plan keys;            /* the plan's keys (wf_layout_keys) */
    wf_mesh mesh;
    int64_t mb;              /* the micro-batch's samples */
    int transformer;
    wf_graph g;              /* the context's graph at the micro-batch */
    wf_sbp_sig *sig;         /* [g.nfwd] */
    int *sec;                /* [g.nfwd] */
    int *cut;                /* [pp + 1] models other than transformers: each stage's first op */
    int stages_checked;      /* 1: the stages passed their checks (they do not depend on the layouts) */
    unsigned char *stor_has; /* [g.ntensors] a storage layout is given (kept storage only) */
    wf_sbp *stor;            /* [g.ntensors] and that layout */
    int *rd_start;           /* [g.ntensors + 1] tensor t's forward readers: rd_op[rd_start[t] ..
                                rd_start[t + 1]), in op order, each with the slot that reads it first */
    int *rd_op, *rd_slot;
};

void wf_layout_coster_free(wf_layout_coster *k)
{
    if (!k)
        return;
    wf_graph_free(&k->g);
    wf_layout_plan_free(&k->own);
    free(k->sig);
    free(k->sec);
    free(k->cut);
    free(k->stor_has);
    free(k->stor);
    free(k->rd_start);
    free(k->rd_op);
    free(k->rd_slot);
    free(k);
}

const wf_graph *wf_layout_coster_graph(const wf_layout_coster *k) { return &k->g; }
const wf_mesh *wf_layout_coster_mesh(const wf_layout_coster *k) { return &k->mesh; }
wf_sbp_sig *wf_layout_coster_sigs(wf_layout_coster *k) { return k->sig; }

void wf_layout_coster_storage(wf_layout_coster *k, int t, const wf_sbp *layout)
{
    if (t < 0 || t >= k->g.ntensors || k->g.tensors[t].role != WF_ROLE_PARAM)
        return;
    k->stor_has[t] = layout != NULL;
    if (layout)
        k->stor[t] = *layout;
}

void wf_layout_coster_levers(wf_layout_coster *k, int recompute_full, int zero)
{
    k->keys.recompute = recompute_full ? WF_RECOMPUTE_FULL : WF_RECOMPUTE_NONE;
    k->keys.zero = zero;
}

/* The coster of resolved plan lp (wf_layout_index, wf_layout_resolve or
 * wf_layout_resolve_choice) with keys: its mesh, signatures and storage
 * layouts are taken as resolved there, nothing parsed. */
static wf_status coster_new(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                            const wf_plan *keys, const wf_layout_plan *lp, int keep_storage,
                            wf_layout_coster **out);

wf_status wf_layout_coster_resolved(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                    const wf_plan *keys, const wf_layout_plan *lp, int keep_storage,
                                    wf_layout_coster **out)
{
    return coster_new(m, c, ctx, batch, keys, lp, keep_storage, out);
}

/* The text's one resolution (resolve.c) and its keys, into lp and keys. */
static wf_status resolve_text(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                              wf_plan *keys, wf_layout_plan *lp)
{
    wf_status st = wf_layout_keys(ol, keys);
    if (st == WF_OK)
        st = wf_layout_index(ol, m, c, batch, lp);
    return st;
}

wf_status wf_layout_coster_new(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                               const wf_layout *ol, int keep_storage, wf_layout_coster **out)
{
    *out = NULL;
    wf_plan keys;
    wf_layout_plan lp;
    wf_status st = resolve_text(m, c, batch, ol, &keys, &lp);
    if (st == WF_OK)
        st = coster_new(m, c, ctx, batch, &keys, &lp, keep_storage, out);
    if (st != WF_OK) {
        wf_layout_plan_free(&lp);
        return st;
    }
    (*out)->own = lp; /* the coster holds the resolution (it was lp's: the address moves, not the arrays) */
    (*out)->lp = &(*out)->own;
    return WF_OK;
}

static wf_status coster_new(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                            const wf_plan *keys, const wf_layout_plan *lp, int keep_storage,
                            wf_layout_coster **out)
{
    *out = NULL;
    wf_layout_coster *k = calloc(1, sizeof *k);
    if (!k)
        return wf_errorf(WF_NOMEM, "out of memory costing an op-level plan");
    wf_graph_init(&k->g, "");
    wf_layout_init(&k->own.ol);
    k->m = m;
    k->ctx = ctx;
    k->lp = lp;
    k->keys = *keys;
    wf_status st = WF_OK;
    if (!lp->has_layouts || lp->graph.nfwd < 1) {
        st = wf_errorf(WF_INTERNAL, "op-level plan: costed from a resolved plan with no layouts");
        goto fail;
    }
    if (batch < 1 || lp->micro_batches < 1 || batch % lp->micro_batches != 0) {
        /* resolve.c checked the plan at its batch: costed at another is the caller's error */
        st = wf_errorf(WF_INTERNAL, "op-level plan resolved with %lld micro-batches, costed at batch %lld",
                       (long long)lp->micro_batches, (long long)batch);
        goto fail;
    }
    k->mesh = lp->mesh;
    if (wf_model_is_moe(m) && wf_model_is_transformer(m)) {
        st = wf_errorf(WF_INVAL, "mixture of experts '%s': costed as the whole-model plan its layouts raise to",
                       m->name);
        goto fail;
    }
    k->mb = batch / lp->micro_batches;
    k->transformer = wf_model_is_transformer(m);
    wf_model_config one = *m;
    if (k->transformer) {
        one.layers = 1;
        one.first_dense = 0;
    }
    wf_cost_model_info info;
    wf_cost_model_info_of(ctx, &info);
    if ((st = wf_model_build(&one, k->mb, &k->g)) != WF_OK)
        goto fail;
    const wf_graph *g = &k->g;
    k->sig = calloc((size_t)g->nfwd + 1, sizeof *k->sig);
    k->sec = calloc((size_t)g->nfwd + 1, sizeof *k->sec);
    k->cut = k->transformer ? NULL : calloc((size_t)lp->nstages + 1, sizeof *k->cut);
    k->stor_has = calloc((size_t)g->ntensors + 1, 1);
    k->stor = calloc((size_t)g->ntensors + 1, sizeof *k->stor);
    if (!k->sig || !k->sec || (!k->transformer && !k->cut) || !k->stor_has || !k->stor) {
        st = wf_errorf(WF_NOMEM, "out of memory costing an op-level plan");
        goto fail;
    }
    if (g->nfwd != info.nops) {
        st = wf_errorf(WF_INTERNAL, "model '%s': %d forward ops, the cost context has %d", m->name, g->nfwd,
                       info.nops);
        goto fail;
    }
    if (k->transformer && (st = check_tied(m, lp)) != WF_OK)
        goto fail;
    for (int i = 0; i < g->nfwd && st == WF_OK; i++) {
        /* As resolved: the op of the whole graph of the same name (a
         * transformer's one-layer graph names its layer's ops as layer 0's). */
        int j = resolved_op(lp, g->ops[i].name, i);
        if (j < 0) {
            st = wf_errorf(WF_INVAL, "op-level plan: op '%s' has no layout", g->ops[i].name);
            break;
        }
        k->sig[i] = lp->sig[j];
        wf_cost_op_info oi;
        if (st == WF_OK)
            st = wf_cost_op_info_of(ctx, i, &oi);
        k->sec[i] = st == WF_OK ? (int)oi.section : 0;
    }
    if (st != WF_OK)
        goto fail;
    /* Each tensor's readers (the derivation asks for them per tensor). */
    {
        size_t nin = 0;
        for (int i = 0; i < g->nfwd; i++)
            nin += (size_t)g->ops[i].nin;
        k->rd_start = calloc((size_t)g->ntensors + 2, sizeof(int));
        k->rd_op = malloc(sizeof(int) * (nin + 1));
        k->rd_slot = malloc(sizeof(int) * (nin + 1));
        if (!k->rd_start || !k->rd_op || !k->rd_slot) {
            st = wf_errorf(WF_NOMEM, "out of memory costing an op-level plan");
            goto fail;
        }
        for (int i = 0; i < g->nfwd; i++)
            for (int j = 0; j < g->ops[i].nin; j++)
                if (slot_of(g, i, g->ops[i].in[j]) == j)
                    k->rd_start[g->ops[i].in[j] + 1]++;
        for (int t = 0; t < g->ntensors; t++)
            k->rd_start[t + 1] += k->rd_start[t];
        int *fill = malloc(sizeof(int) * ((size_t)g->ntensors + 1));
        if (!fill) {
            st = wf_errorf(WF_NOMEM, "out of memory costing an op-level plan");
            goto fail;
        }
        memcpy(fill, k->rd_start, sizeof(int) * (size_t)g->ntensors);
        for (int i = 0; i < g->nfwd; i++)
            for (int j = 0; j < g->ops[i].nin; j++) {
                int t = g->ops[i].in[j];
                if (slot_of(g, i, t) == j) {
                    k->rd_op[fill[t]] = i;
                    k->rd_slot[fill[t]++] = j;
                }
            }
        free(fill);
    }
    /* The parameters' storage, as given (the last entry naming a tensor wins). */
    for (int q = 0; keep_storage && q < lp->nstorage; q++)
        for (int x = 0; x < g->ntensors; x++)
            if (g->tensors[x].role == WF_ROLE_PARAM &&
                strcmp(lp->graph.tensors[lp->storage_tensor[q]].name, g->tensors[x].name) == 0) {
                k->stor[x] = lp->storage[q];
                k->stor_has[x] = 1;
            }
    wf_clear_error();
    *out = k;
    return WF_OK;
fail:
    wf_layout_coster_free(k);
    return st;
}

/* The descriptor and the plan of the coster's current signatures. */
static wf_status coster_derive(wf_layout_coster *K, wf_cost_layout *out, wf_plan *as_plan)
{
    memset(out, 0, sizeof *out);
    const wf_model_config *m = K->m;
    const wf_layout_plan *lp = K->lp;
    const int pp = lp->nstages;
    wf_cost_ctx *ctx = K->ctx;
    const wf_graph g = K->g; /* a view: freed with the coster */
    const wf_sbp_sig *sig = K->sig;
    const int *sec = K->sec;
    const wf_mesh mesh = K->mesh;
    const int64_t mb = K->mb;
    const int transformer = K->transformer;
    wf_plan p = K->keys;
    int *cut = NULL;
    wf_cost_layout L;
    memset(&L, 0, sizeof L);
    wf_status st = WF_OK;
    wf_cost_model_info info;
    wf_cost_model_info_of(ctx, &info);
    if (!transformer && !(cut = malloc(sizeof *cut * ((size_t)pp + 1))))
        return wf_errorf(WF_NOMEM, "out of memory costing an op-level plan");
    /* Which axis is data-parallel: the outer one when every op runs the
     * data-parallel layout on it (on a mesh of one axis, that axis). The
     * others are model-parallel: one (tp = its size), or both (tp = the
     * whole mesh, each axis a sub-group of it). */
    int dp_axis = -1, mpax[2], nmp = 0;
    {
        int all = 1;
        for (int i = 0; i < g.nfwd && all; i++)
            all = dp_op(&g, i, &sig[i], 0);
        if (all)
            dp_axis = 0;
        if (mesh.naxes > 3 || (mesh.naxes == 3 && dp_axis < 0)) {
            char ms[64];
            st = wf_errorf(WF_INVAL, "op-level plan: mesh %s has %d model-parallel axes; the cost model takes one "
                                     "or two (and a data-parallel outer axis)", wf_mesh_str(&mesh, ms, sizeof ms),
                           mesh.naxes - (dp_axis >= 0));
            goto done;
        }
        for (int a = 0; a < mesh.naxes; a++)
            if (a != dp_axis)
                mpax[nmp++] = a;
    }
    const int64_t dp = dp_axis >= 0 ? mesh.size[dp_axis] : 1;
    int64_t tp = 1;
    for (int k = 0; k < nmp; k++)
        tp *= mesh.size[mpax[k]];
    if (mb % dp != 0) {
        st = wf_errorf(WF_INVAL, "op-level plan: the micro-batch of %lld samples does not split over %lld "
                                 "data-parallel devices", (long long)mb, (long long)dp);
        goto done;
    }
    p.dp = (int)dp;
    p.tp = (int)tp;
    p.pp = pp;
    p.mbs = (int)(mb / dp);
    p.sp = 0;
    p.given = WF_PLAN_GIVEN_DP | WF_PLAN_GIVEN_MBS;
    if (transformer) {
        if (!K->stages_checked && (st = check_stages(m, lp, p.vpp > 1 ? p.vpp : 1, g.ops[0].name)) != WF_OK)
            goto done;
        K->stages_checked = 1;
    } else if (K->stages_checked) {
        memcpy(cut, K->cut, sizeof *cut * ((size_t)pp + 1));
    } else {
        /* Other models: the plan's stages as they are (resolved: each after
         * the one before, the first at op 0). */
        memcpy(cut, lp->stage_first, sizeof *cut * ((size_t)pp + 1));
        memcpy(K->cut, cut, sizeof *cut * ((size_t)pp + 1));
        K->stages_checked = 1;
    }
    if ((st = wf_cost_layout_init(ctx, (int)tp, &L)) != WF_OK)
        goto done;
    if (tp > 1) {
        const size_t nt = (size_t)g.ntensors + 1;
        int8_t *pv_all = malloc(2 * nt);
        int *prod_all = malloc(sizeof(int) * 2 * nt);
        unsigned char *view_all = calloc(2 * ((size_t)g.nfwd + 1), 1);
        int8_t lay_vs[2] = {WF_SBP_B, WF_SBP_B};
        if (!pv_all || !prod_all || !view_all) {
            free(pv_all);
            free(prod_all);
            free(view_all);
            st = wf_errorf(WF_NOMEM, "out of memory costing an op-level plan");
            goto done;
        }
        if (nmp == 2) {
            /* The tp axis's groups (outer mesh axis first) read as its two sub-axes. */
            L.nsub = 2;
            wf_rank_axis_split(L.axis, mesh.size[mpax[1]], L.sub);
        }
        /* The layer's output: the tensor of the layer read after it. */
        int lay_out = -1, lay_out_op = -1;
        for (int i = 0; i < g.nfwd && lay_out < 0; i++) {
            if (sec[i] != WF_COST_SEC_POST)
                continue;
            for (int j = 0; j < g.ops[i].nin; j++) {
                int x = g.ops[i].in[j], pr = g.tensors[x].producer;
                if (pr >= 0 && pr < g.nfwd && sec[pr] == WF_COST_SEC_LAYER) {
                    lay_out = x;
                    lay_out_op = pr;
                }
            }
        }
        /* Pass 1, per model-parallel axis: each tensor's layout as its
         * producer made it, and that producer (the steady state for a
         * layer's input; through transparent views). */
        for (int k = 0; k < nmp; k++) {
            const int a = mpax[k];
            int8_t *pv_of = pv_all + k * nt;
            int *prod_of = prod_all + k * nt;
            unsigned char *view = view_all + k * ((size_t)g.nfwd + 1);
            int8_t lay_v = WF_SBP_B;
            if (lay_out >= 0)
                for (int j = 0; j < g.ops[lay_out_op].nout; j++)
                    if (g.ops[lay_out_op].out[j] == lay_out)
                        lay_v = ax_of(&sig[lay_out_op].out[j], a);
            lay_vs[k] = lay_v;
            for (int x = 0; x < g.ntensors; x++) {
                pv_of[x] = WF_SBP_B;
                prod_of[x] = -1;
            }
            for (int i = 0; i < g.nfwd; i++) {
                const wf_op *o = &g.ops[i];
                for (int j = 0; j < o->nout; j++) {
                    int x = o->out[j];
                    pv_of[x] = ax_of(&sig[i].out[j], a);
                    prod_of[x] = i;
                }
                if (is_view(o->kind) && o->nout == 1 && ax_of(&sig[i].in[0], a) == WF_SBP_B &&
                    ax_of(&sig[i].out[0], a) == WF_SBP_B && is_split(pv_of[o->in[0]])) {
                    int only = 1;
                    for (int q = K->rd_start[o->in[0]]; q < K->rd_start[o->in[0] + 1]; q++)
                        if (K->rd_op[q] != i)
                            only = 0;
                    if (only) {
                        view[i] = 1;
                        pv_of[o->out[0]] = pv_of[o->in[0]];
                        prod_of[o->out[0]] = prod_of[o->in[0]];
                    }
                }
                /* A layer's input comes from the layer before. */
                for (int j = 0; j < o->nout; j++) {
                    int x = o->out[j], to_layer = 0;
                    for (int q = K->rd_start[x]; q < K->rd_start[x + 1]; q++)
                        if (sec[K->rd_op[q]] == WF_COST_SEC_LAYER)
                            to_layer = 1;
                    if (sec[i] == WF_COST_SEC_PRE && to_layer && lay_out_op >= 0) {
                        pv_of[x] = lay_v;
                        prod_of[x] = lay_out_op;
                    }
                }
            }
            if (is_split(lay_v)) {
                L.sp = 1;
                L.input_div *= (double)mesh.size[a];
            }
        }
        /* Pass 2, per model-parallel axis: divisors and collectives. A
         * collective on one axis moves the tensor's shard over the other. */
        for (int k = 0; k < nmp && st == WF_OK; k++) {
            const int a = mpax[k];
            const double t = (double)mesh.size[a];
            const int8_t *pv_of = pv_all + k * nt;
            const int *prod_of = prod_all + k * nt;
            const unsigned char *view = view_all + k * ((size_t)g.nfwd + 1);
            derive d = {&g, sig, sec, a, mesh.naxes, mb, view, &L, 0,
                        nmp == 2 ? 1 + k : 0,
                        nmp == 2 ? pv_all + (1 - k) * nt : NULL, nmp == 2 ? (double)mesh.size[mpax[1 - k]] : 1,
                        K->rd_start, K->rd_op, K->rd_slot};
            for (int i = 0; i < g.nfwd; i++) {
                const wf_op *o = &g.ops[i];
                int ws = work_split(&g, i, &sig[i], a), psplit = 0, first_act = -1;
                for (int j = 0; j < o->nin; j++) {
                    const wf_tensor *x = &g.tensors[o->in[j]];
                    if (x->role == WF_ROLE_PARAM && is_split(ax_of(&sig[i].in[j], a)))
                        psplit = 1;
                    if (x->role != WF_ROLE_PARAM && first_act < 0)
                        first_act = o->in[j];
                }
                L.div[i] *= ws || view[i] ? t : 1;
                L.pdiv[i] *= psplit ? t : 1;
                /* What the op keeps of its input: a product with weights keeps it
                 * as its producer made it (and re-gathers it for the weight
                 * gradient), any other op as it reads it. */
                int8_t iv = WF_SBP_B;
                if (first_act >= 0) {
                    int keeper = wf_op_is_matrix(o->kind) && has_param(&g, i);
                    int pr = prod_of[first_act];
                    iv = keeper && pr >= 0 ? pv_of[first_act] : ax_of(&sig[i].in[slot_of(&g, i, first_act)], a);
                    if (view[i])
                        iv = pv_of[first_act];
                }
                L.repl_div[i] *= is_split(iv) ? t : 1;
                /* The vocabulary-split loss's three all-reduces of a float per token. */
                if (o->kind == WF_OP_CROSS_ENTROPY && is_split(ax_of(&sig[i].in[0], a)) &&
                    ax_of(&sig[i].in[0], a) == g.tensors[o->in[0]].ndim - 1) {
                    double tokens = (double)wf_tensor_numel(&g.tensors[o->in[1]]) / (double)d.mb;
                    d.at = i;
                    if ((st = event(&d, sec[i], WF_COLL_ALLREDUCE, 0, 4.0 * tokens, 3, WF_COST_WIN_NONE, 3, NULL,
                                    0)) != WF_OK)
                        break;
                }
            }
            /* Boxing of every activation. */
            for (int i = 0; i < g.nfwd && st == WF_OK; i++)
                for (int j = 0; j < g.ops[i].nout && st == WF_OK; j++) {
                    int x = g.ops[i].out[j];
                    /* Every layer reads the layer before (the steady state,
                     * charged to the layer); the embedding's output, where it is
                     * laid out otherwise, reaches the first layer once per
                     * micro-batch (charged to the embedding). */
                    if (sec[i] == WF_COST_SEC_PRE && prod_of[x] != i && !view[i] &&
                        ax_of(&sig[i].out[j], a) != lay_vs[k])
                        st = boxing_of(&d, x, i, ax_of(&sig[i].out[j], a), WF_COST_SEC_PRE);
                    if (st == WF_OK)
                        st = boxing_of(&d, x, prod_of[x], pv_of[x], -1);
                }
        }
        for (int i = 0; i < g.nfwd; i++)
            L.split_div[i] = L.div[i];
        /* Parameters: local elements per section (per op for models other
         * than transformers); partial gradients, reduced over the axes they
         * are partial on. */
        if (!transformer)
            for (int i = 0; i < g.nfwd; i++)
                L.params[i] = 0;
        for (int x = 0; x < g.ntensors && st == WF_OK; x++) {
            if (g.tensors[x].role != WF_ROLE_PARAM)
                continue;
            unsigned seen = 0;
            double split_f = 1;
            int partial[2][WF_COST_SEC_COUNT] = {{0}}, any[2] = {0, 0};
            for (int k = 0; k < nmp; k++) {
                const int a = mpax[k];
                int split = -1;
                for (int q = K->rd_start[x]; q < K->rd_start[x + 1]; q++) {
                    const int i = K->rd_op[q], j = K->rd_slot[q];
                    if (split < 0)
                        split = is_split(ax_of(&sig[i].in[j], a));
                    seen |= 1u << sec[i];
                    wf_sbp gs = wf_sbp_grad_of_input(&sig[i], g.ops[i].nout, j, mesh.naxes);
                    if (ax_of(&gs, a) == WF_SBP_P)
                        partial[k][sec[i]] = any[k] = 1;
                }
                /* Kept in the plan's storage layout, else as first read. */
                if (K->stor_has[x])
                    split = is_split(ax_of(&K->stor[x], a));
                if (split > 0)
                    split_f *= (double)mesh.size[a];
            }
            double local = (double)wf_tensor_numel(&g.tensors[x]) / split_f;
            const int owner = K->rd_start[x] < K->rd_start[x + 1] ? K->rd_op[K->rd_start[x]] : -1;
            /* Partial on every model-parallel axis: reduced over the whole
             * of it; on one of two: over that sub-axis. */
            int all = 1, some = 0;
            for (int k = 0; k < nmp; k++) {
                all &= any[k];
                some |= any[k];
            }
            if (!transformer && owner >= 0) {
                L.params[owner] += local;
                if (all)
                    L.mp_grad[owner] += local;
                else if (some)
                    for (int k = 0; k < nmp; k++)
                        if (any[k])
                            L.sub_grad[k][owner] += local;
            }
            for (int s = 0; s < WF_COST_SEC_COUNT; s++)
                if (seen & (1u << s)) {
                    L.sec_params[s] += local;
                    int p_all = 1, p_some = 0;
                    for (int k = 0; k < nmp; k++) {
                        p_all &= partial[k][s];
                        p_some |= partial[k][s];
                    }
                    if (p_all)
                        L.sec_mp_grad[s] += local;
                    else if (p_some)
                        for (int k = 0; k < nmp; k++)
                            if (partial[k][s])
                                L.sec_sub_grad[k][s] += local;
                }
            if ((seen & 1u) && (seen & 4u))
                L.shared_params += local;
        }
        free(pv_all);
        free(prod_all);
        free(view_all);
    } else {
        for (int s = 0; s < WF_COST_SEC_COUNT; s++)
            L.sec_params[s] = info.sec[s].params_split + info.sec[s].params_repl;
        L.shared_params = info.shared_split_params + info.shared_repl_params;
    }
    if (st != WF_OK)
        goto done;
    p.sp = L.sp;
    *as_plan = p;
    L.cut = cut;
    cut = NULL;
    *out = L;
    memset(&L, 0, sizeof L);
done:
    wf_cost_layout_free(&L);
    free(cut);
    return st;
}

wf_status wf_layout_coster_cost(wf_layout_coster *k, int64_t batch, wf_estimate *out)
{
    wf_cost_layout L;
    wf_plan p;
    wf_status st = coster_derive(k, &L, &p);
    if (st != WF_OK)
        return st;
    st = wf_estimate_layouts(k->ctx, &p, &L, batch, out);
    wf_cost_layout_free(&L);
    return st;
}

/* The descriptor and the plan of resolved plan lp with keys: a mixture of
 * experts as the whole-model plan it raises to, else the coster's. */
static wf_status plan_layout(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                             const wf_plan *keys, const wf_layout_plan *lp, wf_cost_layout *out,
                             wf_plan *as_plan)
{
    memset(out, 0, sizeof *out);
    if (wf_model_is_moe(m) && wf_model_is_transformer(m))
        return expert_layout(m, c, ctx, batch, keys, lp, out, as_plan);
    wf_layout_coster *k = NULL;
    wf_status st = coster_new(m, c, ctx, batch, keys, lp, 1, &k);
    if (st == WF_OK)
        st = coster_derive(k, out, as_plan);
    wf_layout_coster_free(k);
    return st;
}

/* The same of op-level form ol, resolved here once (lp NULL) or as lp. */
static wf_status text_layout(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                             const wf_layout *ol, const wf_layout_plan *lp, wf_cost_layout *out,
                             wf_plan *as_plan)
{
    memset(out, 0, sizeof *out);
    wf_plan keys;
    wf_status st;
    if (lp) {
        if ((st = wf_layout_keys(ol, &keys)) != WF_OK)
            return st;
        return plan_layout(m, c, ctx, batch, &keys, lp, out, as_plan);
    }
    wf_layout_plan own;
    st = resolve_text(m, c, batch, ol, &keys, &own);
    if (st == WF_OK)
        st = plan_layout(m, c, ctx, batch, &keys, &own, out, as_plan);
    wf_layout_plan_free(&own);
    return st;
}

/* A plan the descriptor path refused with `why`: a per-layer plan of a
 * mixture of experts (its dense layers in other layouts than its expert
 * layers: src/layout/perlayer.c) is costed layer by layer (as_plan: the
 * expert layers' whole-model plan); any other keeps the refusal. */
static wf_status perlayer_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                               const wf_layout *ol, wf_estimate *out, wf_plan *as_plan, wf_status why)
{
    if (why != WF_INVAL || !wf_model_is_moe(m) || !wf_model_is_transformer(m))
        return why;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", wf_last_error());
    wf_layout_perlayer pl;
    int is = 0;
    wf_status st = wf_layout_perlayer_of(m, c, batch, ol, &pl, &is);
    if (st != WF_OK)
        return st;
    if (!is)
        return wf_errorf(why, "%s", msg);
    if ((st = wf_layout_perlayer_cost(m, c, ctx, batch, &pl, out)) == WF_OK && as_plan)
        *as_plan = pl.moe;
    return st;
}

wf_status wf_layout_descriptor(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                               const wf_layout *ol, wf_cost_layout *out, wf_plan *as_plan)
{
    return text_layout(m, c, ctx, batch, ol, NULL, out, as_plan);
}

wf_status wf_layout_plan_descriptor(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                    const wf_layout *ol, const wf_layout_plan *lp, wf_cost_layout *out,
                                    wf_plan *as_plan)
{
    return text_layout(m, c, ctx, batch, ol, lp, out, as_plan);
}

wf_status wf_layout_plan_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                              const wf_layout *ol, const wf_layout_plan *lp, wf_estimate *out,
                              wf_plan *as_plan)
{
    wf_cost_layout L;
    wf_plan p;
    wf_status st = text_layout(m, c, ctx, batch, ol, lp, &L, &p);
    if (st != WF_OK)
        return perlayer_cost(m, c, ctx, batch, ol, out, as_plan, st);
    st = wf_estimate_layouts(ctx, &p, &L, batch, out);
    wf_cost_layout_free(&L);
    if (st == WF_OK && as_plan)
        *as_plan = p;
    return st;
}

wf_status wf_layout_resolved_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                  const wf_plan *keys, const wf_layout_plan *lp, wf_estimate *out)
{
    wf_cost_layout L;
    wf_plan p;
    wf_status st = plan_layout(m, c, ctx, batch, keys, lp, &L, &p);
    if (st != WF_OK)
        return st;
    st = wf_estimate_layouts(ctx, &p, &L, batch, out);
    wf_cost_layout_free(&L);
    return st;
}

wf_status wf_layout_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                         const wf_layout *ol, wf_estimate *out, wf_plan *as_plan)
{
    return wf_layout_plan_cost(m, c, ctx, batch, ol, NULL, out, as_plan);
}
