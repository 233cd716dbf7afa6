/* A plan resolved once (layout.h, wf_layout_resolve): the text is read once
 * -- a plan string, a whole-model file or an op-level file -- and everything
 * a consumer needs is derived from it here, once: the whole-model keys, the
 * op-level form (a whole-model plan's lowering, wf_plan_lower, when it has
 * one), the mesh, every forward op's signature parsed and indexed by op, the
 * stage cut as op indices, the cost model's layout descriptor (Megatron's
 * for a whole-model plan, the signatures' for an op-level one) and the rank
 * groups of every parallel axis from plan.h's one generator, with the
 * cluster level each reaches. */
#include "weft/layout.h"

#include <stdlib.h>
#include <string.h>

int wf_layout_op_index(const wf_layout_plan *p, const char *name)
{
    if (!p->has_layouts || !name)
        return -1;
    for (int i = 0; i < p->graph.nfwd; i++)
        if (strcmp(p->graph.ops[i].name, name) == 0)
            return i;
    return -1;
}

void wf_layout_plan_free(wf_layout_plan *p)
{
    if (p->has_layouts && !p->graph_view)
        wf_graph_free(&p->graph);
    wf_layout_free(&p->ol);
    free(p->sig);
    free(p->sig_index);
    free(p->sig_text);
    free(p->storage);
    free(p->storage_tensor);
    free(p->storage_stage);
    free(p->stage_first);
    free(p->order);
    if (p->has_cost)
        wf_cost_layout_free(&p->cost);
    memset(p, 0, sizeof *p);
    wf_layout_init(&p->ol);
}

/* The outermost level of the cluster a group reaches (-1: one rank). */
static int group_level(const wf_cluster *c, wf_axis_ranks a)
{
    if (a.size <= 1)
        return -1;
    wf_group g = wf_group_place(c, a.size, a.stride);
    int level = -1;
    for (int l = 0; l < g.nlevels; l++)
        if (g.span[l] > 1)
            level = l;
    return level;
}

/* The index of forward op `name` in g (hint first: files list ops in order), or -1. */
static int op_named(const wf_graph *g, const char *name, int hint)
{
    if (!name)
        return -1;
    if (hint >= 0 && hint < g->nfwd && strcmp(g->ops[hint].name, name) == 0)
        return hint;
    for (int i = 0; i < g->nfwd; i++)
        if (strcmp(g->ops[i].name, name) == 0)
            return i;
    return -1;
}

/* Op i's signature: text parsed once into out->sig[i], and its index among
 * the op's signatures on the mesh (wf_sbp_op_sigs) into out->sig_index[i]. */
static wf_status read_sig(wf_layout_plan *out, int i, const char *text, int64_t mbs)
{
    const wf_graph *g = &out->graph;
    const wf_op *o = &g->ops[i];
    wf_status st = wf_sbp_sig_parse(text, o->nin, o->nout, out->mesh.naxes, &out->sig[i]);
    if (st != WF_OK) /* a layout that is no signature of the op: the plan's error */
        return wf_error_prefix(st == WF_NOMEM ? WF_NOMEM : WF_INVAL, "op-level plan");
    int n = wf_sbp_op_sigs(g, i, &out->mesh, NULL, 0);
    if (n < 0)
        return wf_error_prefix((wf_status)n, "op-level plan");
    wf_sbp_sig *all = malloc(sizeof *all * ((size_t)n + 1));
    if (!all)
        return wf_errorf(WF_NOMEM, "out of memory resolving a plan");
    wf_sbp_op_sigs(g, i, &out->mesh, all, n);
    int found = -1;
    for (int k = 0; k < n && found < 0; k++)
        if (wf_sbp_sig_equal(&all[k], &out->sig[i], o->nin, o->nout, out->mesh.naxes))
            found = k;
    free(all);
    if (found < 0) {
        char ms[64];
        return wf_errorf(WF_INVAL, "op-level plan: op '%s' (%s): signature '%s' is not one of its %d signatures on "
                         "mesh %s (micro-batches of %lld samples)", o->name, wf_op_name(o->kind), text, n,
                         wf_mesh_str(&out->mesh, ms, sizeof ms), (long long)mbs);
    }
    out->sig_index[i] = found;
    out->sig_text[i] = text;
    return WF_OK;
}

/* The op-level form ol read once, every check of it in one place: the mesh
 * (and the devices mesh x pp needs), each forward op's signature parsed and
 * indexed by op (an op the model lacks, an op with no layout, a signature
 * the op has not on the mesh: named), the stage cut, the storage layouts
 * (parsed, and checked to divide their tensors). */
static wf_status index_layouts(wf_layout_plan *out, const wf_layout *ol, const wf_model_config *m,
                               const wf_cluster *c, int64_t batch)
{
    wf_status st;
    if (batch < 1)
        return wf_errorf(WF_INVAL, "op-level plan: batch=%lld must be >= 1", (long long)batch);
    if (ol->micro_batches < 1 || batch % ol->micro_batches != 0)
        return wf_errorf(WF_INVAL, "op-level plan: micro_batches=%lld does not divide batch=%lld",
                         (long long)ol->micro_batches, (long long)batch);
    if (ol->pp < 1)
        return wf_errorf(WF_INVAL, "op-level plan: pp=%d stages", ol->pp);
    if ((st = wf_mesh_parse(ol->mesh, c, &out->mesh)) != WF_OK)
        return st;
    const int64_t md = wf_mesh_devices(&out->mesh), have = wf_cluster_devices(c);
    if (md * ol->pp > have)
        return wf_errorf(WF_INVAL, "op-level plan: mesh %s x pp=%d needs %lld devices, cluster '%s' has %lld",
                         ol->mesh, ol->pp, (long long)(md * ol->pp), c->name, (long long)have);
    const int64_t mbs = batch / ol->micro_batches;
    out->micro_batches = ol->micro_batches;
    if ((st = wf_model_build(m, mbs, &out->graph)) != WF_OK) {
        wf_graph_free(&out->graph);
        return st;
    }
    out->has_layouts = 1;
    const wf_graph *g = &out->graph;
    if (ol->pp > g->nfwd)
        return wf_errorf(WF_INVAL, "op-level plan: pp=%d stages for the %d ops of model '%s'", ol->pp, g->nfwd,
                         m->name);
    out->sig = calloc((size_t)g->nfwd + 1, sizeof *out->sig);
    out->sig_index = calloc((size_t)g->nfwd + 1, sizeof *out->sig_index);
    out->sig_text = calloc((size_t)g->nfwd + 1, sizeof *out->sig_text);
    out->stage_first = calloc((size_t)ol->pp + 1, sizeof *out->stage_first);
    out->storage = calloc((size_t)ol->nstorage + 1, sizeof *out->storage);
    out->storage_tensor = calloc((size_t)ol->nstorage + 1, sizeof *out->storage_tensor);
    out->storage_stage = calloc((size_t)ol->nstorage + 1, sizeof *out->storage_stage);
    if (!out->sig || !out->sig_index || !out->sig_text || !out->stage_first || !out->storage ||
        !out->storage_tensor || !out->storage_stage)
        return wf_errorf(WF_NOMEM, "out of memory resolving a plan");
    /* The layouts in the plan's order (its errors name the first bad one). */
    for (int k = 0; k < ol->nlayouts; k++) {
        int i = op_named(g, ol->op[k], k);
        if (i < 0)
            return wf_errorf(WF_INVAL, "op-level plan: op '%s' is not an op of model '%s'", ol->op[k], m->name);
        if ((st = read_sig(out, i, ol->sig[k], mbs)) != WF_OK)
            return st;
    }
    for (int i = 0; i < g->nfwd; i++)
        if (!out->sig_text[i])
            return wf_errorf(WF_INVAL, "op-level plan: op '%s' (%s) of model '%s' has no layout", g->ops[i].name,
                             wf_op_name(g->ops[i].kind), m->name);
    out->nstages = ol->pp;
    for (int s = 0; s < ol->pp; s++) {
        const char *name = ol->stage_first ? ol->stage_first[s] : NULL;
        if (!name) {
            if (s > 0)
                return wf_errorf(WF_INVAL, "op-level plan: stage %d has no first op", s);
            continue;
        }
        int i = op_named(g, name, -1);
        if (i < 0)
            return wf_errorf(WF_INVAL, "op-level plan: stage %d starts at op '%s', not an op of model '%s'", s,
                             name, m->name);
        if (s == 0 && i != 0)
            return wf_errorf(WF_INVAL, "op-level plan: stage 0 starts at op '%s', not at the first op '%s'", name,
                             g->ops[0].name);
        if (s > 0 && i <= out->stage_first[s - 1])
            return wf_errorf(WF_INVAL, "op-level plan: stage %d starts at op '%s', not after stage %d's first op",
                             s, name, s - 1);
        out->stage_first[s] = i;
    }
    out->stage_first[ol->pp] = g->nfwd;
    /* Storage layouts: parsed once, checked against their tensors. */
    out->nstorage = ol->nstorage;
    for (int k = 0; k < ol->nstorage; k++) {
        int t = -1;
        for (int x = 0; x < g->ntensors && t < 0; x++)
            if (strcmp(g->tensors[x].name, ol->tensor[k]) == 0)
                t = x;
        if (t < 0)
            return wf_errorf(WF_INVAL, "op-level plan: storage of '%s' (stage %d): no such tensor in model '%s'",
                             ol->tensor[k], ol->storage_stage[k], m->name);
        if ((st = wf_sbp_parse(ol->layout[k], out->mesh.naxes, &out->storage[k])) != WF_OK)
            return wf_error_prefix(WF_FORMAT, "op-level plan: storage of '%s'", ol->tensor[k]);
        const wf_tensor *x = &g->tensors[t];
        if (!wf_sbp_valid(&out->mesh, x->ndim, x->shape, &out->storage[k]))
            return wf_errorf(WF_INVAL, "op-level plan: storage %s of '%s' does not divide its shape on mesh %s",
                             ol->layout[k], x->name, ol->mesh);
        if (ol->storage_stage[k] < 0 || ol->storage_stage[k] >= ol->pp)
            return wf_errorf(WF_INVAL, "op-level plan: storage of '%s' is for stage %d; the plan has %d", x->name,
                             ol->storage_stage[k], ol->pp);
        out->storage_tensor[k] = t;
        out->storage_stage[k] = ol->storage_stage[k];
    }
    return WF_OK;
}

wf_status wf_layout_index(const wf_layout *ol, const wf_model_config *m, const wf_cluster *c, int64_t batch,
                          wf_layout_plan *out)
{
    memset(out, 0, sizeof *out);
    wf_layout_init(&out->ol);
    return index_layouts(out, ol, m, c, batch);
}

wf_status wf_layout_resolve(const char *text, const wf_model_config *m, const wf_cluster *c, int64_t batch,
                            wf_cost_ctx *ctx, wf_layout_plan *out)
{
    memset(out, 0, sizeof *out);
    wf_layout_init(&out->ol);
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "empty plan");
    wf_status st;
    if (wf_plan_is_oplevel_file(text)) {
        wf_plan_meta meta;
        wf_plan whole;
        if ((st = wf_plan_read_file_any(text, &whole, &out->ol, &meta, &out->oplevel)) != WF_OK)
            return st;
    } else {
        if ((st = wf_plan_parse(text, &out->plan)) != WF_OK)
            return st;
        if ((st = wf_plan_validate(&out->plan, m, c, batch)) != WF_OK)
            return st;
        /* The op-level form where a whole-model plan has one. */
        if (wf_model_is_transformer(m) && !wf_model_is_moe(m) && out->plan.cp <= 1 && !out->plan.interlace) {
            if ((st = wf_plan_lower(m, c, &out->plan, batch, &out->ol)) != WF_OK)
                return st;
        }
    }
    if (out->oplevel || out->ol.nlayouts > 0) {
        if ((st = index_layouts(out, &out->ol, m, c, batch)) != WF_OK)
            return st;
    }
    if (out->oplevel) {
        /* The whole-model plan its layouts compose, and their descriptor. */
        if (ctx) {
            if ((st = wf_layout_plan_descriptor(m, c, ctx, batch, &out->ol, out, &out->cost, &out->plan)) != WF_OK)
                return st;
            out->has_cost = 1;
        } else {
            wf_cost_ctx *own = NULL;
            if ((st = wf_cost_ctx_create(m, c, &own)) != WF_OK)
                return st;
            wf_cost_layout L;
            st = wf_layout_plan_descriptor(m, c, own, batch, &out->ol, out, &L, &out->plan);
            if (st == WF_OK)
                wf_cost_layout_free(&L);
            wf_cost_ctx_free(own);
            if (st != WF_OK)
                return st;
        }
    } else if (ctx) {
        wf_cost_ctx_use(ctx, &out->plan);
        if ((st = wf_cost_layout_megatron(ctx, out->plan.tp, out->plan.sp, &out->cost)) != WF_OK)
            return st;
        out->has_cost = 1;
    }
    const wf_plan *p = &out->plan;
    const int etp = p->etp > 0 ? p->etp : p->tp;
    wf_rank_axes_dense(p->tp, p->cp, p->dp, p->pp, out->axes);
    wf_rank_axes_expert(p->tp, p->cp, p->dp, p->pp, p->ep, etp, out->expert_axes);
    for (int a = 0; a < WF_AXIS_COUNT; a++)
        out->level[a] = group_level(c, out->axes[a]);
    if (p->interlace) {
        /* Space: the embedding and the head over the tp x pp ranks; time:
         * each stage's order of tasks. */
        out->nsegments = 2;
        for (int k = 0; k < 2; k++) {
            out->segment[k].section = k == 0 ? WF_COST_SEC_PRE : WF_COST_SEC_POST;
            out->segment[k].size = (int64_t)p->tp * p->pp;
            out->segment[k].axes[0] = out->axes[WF_AXIS_TP];
            out->segment[k].axes[1] = out->axes[WF_AXIS_PP];
        }
        int64_t mb = batch / ((int64_t)p->mbs * p->dp);
        if (mb > (1 << 20))
            return wf_errorf(WF_INVAL, "interlace=1: %lld micro-batches, at most %d", (long long)mb, 1 << 20);
        out->micro_batches = mb;
        out->order = malloc(sizeof *out->order * (size_t)p->pp * 5 * (size_t)mb);
        if (!out->order)
            return wf_errorf(WF_NOMEM, "out of memory resolving an interlaced plan");
        for (int s = 0; s < p->pp; s++) {
            int n = 0;
            if ((st = wf_plan_interlace_order(p->pp, (int)mb, s, out->order + (size_t)s * 5 * mb, (int)(5 * mb),
                                              &n)) != WF_OK)
                return st;
        }
    }
    return WF_OK;
}

wf_status wf_layout_resolve_choice(const wf_layout_choice *ch, const wf_cluster *c, int64_t batch,
                                   wf_layout_plan *out)
{
    memset(out, 0, sizeof *out);
    wf_layout_init(&out->ol);
    const wf_graph *g = ch->graph;
    if (batch < 1 || ch->micro_batches < 1 || batch % ch->micro_batches != 0)
        return wf_errorf(WF_INVAL, "op-level plan: micro_batches=%lld does not divide batch=%lld",
                         (long long)ch->micro_batches, (long long)batch);
    if (ch->pp < 1 || ch->pp > g->nfwd)
        return wf_errorf(WF_INVAL, "op-level plan: pp=%d stages for the %d ops of graph '%s'", ch->pp, g->nfwd,
                         g->name);
    const int64_t md = wf_mesh_devices(&ch->mesh), have = wf_cluster_devices(c);
    if (md * ch->pp > have) {
        char ms[64];
        return wf_errorf(WF_INVAL, "op-level plan: mesh %s x pp=%d needs %lld devices, cluster '%s' has %lld",
                         wf_mesh_str(&ch->mesh, ms, sizeof ms), ch->pp, (long long)(md * ch->pp), c->name,
                         (long long)have);
    }
    out->mesh = ch->mesh;
    out->graph = *g; /* a view: the caller's graph */
    out->graph_view = 1;
    out->has_layouts = 1;
    out->micro_batches = ch->micro_batches;
    const int nf = g->nfwd, nt = g->ntensors;
    int ns = 0;
    for (size_t q = 0; ch->given && q < (size_t)ch->pp * (size_t)nt; q++)
        ns += ch->given[q] != 0;
    out->sig = malloc(sizeof *out->sig * ((size_t)nf + 1));
    out->sig_index = malloc(sizeof *out->sig_index * ((size_t)nf + 1));
    out->sig_text = calloc((size_t)nf + 1, sizeof *out->sig_text);
    out->stage_first = malloc(sizeof *out->stage_first * ((size_t)ch->pp + 1));
    out->storage = calloc((size_t)ns + 1, sizeof *out->storage);
    out->storage_tensor = calloc((size_t)ns + 1, sizeof *out->storage_tensor);
    out->storage_stage = calloc((size_t)ns + 1, sizeof *out->storage_stage);
    if (!out->sig || !out->sig_index || !out->sig_text || !out->stage_first || !out->storage ||
        !out->storage_tensor || !out->storage_stage)
        return wf_errorf(WF_NOMEM, "out of memory resolving a plan");
    memcpy(out->sig, ch->sig, sizeof *out->sig * (size_t)nf);
    memcpy(out->sig_index, ch->sig_index, sizeof *out->sig_index * (size_t)nf);
    /* The stage cut, checked as index_layouts checks a file's. */
    out->nstages = ch->pp;
    for (int s = 0; s < ch->pp; s++) {
        int i = ch->stage_first[s];
        if (i < 0 || i >= nf || (s == 0 && i != 0) || (s > 0 && i <= out->stage_first[s - 1]))
            return wf_errorf(WF_INVAL, "op-level plan: stage %d starts at op %d (stages start at op 0 and rise)",
                             s, i);
        out->stage_first[s] = i;
    }
    out->stage_first[ch->pp] = nf;
    /* Storage layouts by stage, then tensor (the order the search writes them). */
    for (int s = 0; ch->given && s < ch->pp; s++)
        for (int t = 0; t < nt; t++) {
            size_t at = (size_t)s * nt + (size_t)t;
            if (!ch->given[at])
                continue;
            const wf_tensor *x = &g->tensors[t];
            if (!wf_sbp_valid(&out->mesh, x->ndim, x->shape, &ch->storage[at])) {
                char lay[64], ms[64];
                return wf_errorf(WF_INVAL, "op-level plan: storage %s of '%s' does not divide its shape on mesh %s",
                                 wf_sbp_str(&ch->storage[at], out->mesh.naxes, lay, sizeof lay), x->name,
                                 wf_mesh_str(&out->mesh, ms, sizeof ms));
            }
            out->storage[out->nstorage] = ch->storage[at];
            out->storage_tensor[out->nstorage] = t;
            out->storage_stage[out->nstorage++] = s;
        }
    return WF_OK;
}

wf_status wf_layout_validate(const wf_layout *ol, const wf_model_config *m, const wf_cluster *c, int64_t batch)
{
    wf_plan keys;
    wf_status st = wf_layout_keys(ol, &keys);
    if (st != WF_OK)
        return st;
    wf_layout_plan lp;
    st = wf_layout_index(ol, m, c, batch, &lp);
    wf_layout_plan_free(&lp);
    return st;
}
