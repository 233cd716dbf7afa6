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
    if (p->has_layouts)
        wf_graph_free(&p->graph);
    wf_plan_oplevel_free(&p->ol);
    free(p->sig);
    free(p->sig_text);
    free(p->stage_first);
    free(p->order);
    if (p->has_cost)
        wf_cost_layout_free(&p->cost);
    memset(p, 0, sizeof *p);
    wf_plan_oplevel_init(&p->ol);
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

/* The op-level form ol read once: the mesh, each forward op's signature by
 * index (parsed, and checked to be one of the op's on the mesh), the stage
 * cut. */
static wf_status index_layouts(wf_layout_plan *out, const wf_plan_oplevel *ol, const wf_model_config *m,
                               const wf_cluster *c, int64_t batch)
{
    wf_status st;
    if (batch < 1 || ol->micro_batches < 1 || batch % ol->micro_batches != 0)
        return wf_errorf(WF_INVAL, "op-level plan: micro_batches=%lld does not divide the batch %lld",
                         (long long)ol->micro_batches, (long long)batch);
    if ((st = wf_mesh_parse(ol->mesh, c, &out->mesh)) != WF_OK)
        return st;
    if ((st = wf_model_build(m, batch / ol->micro_batches, &out->graph)) != WF_OK) {
        wf_graph_free(&out->graph);
        return st;
    }
    out->has_layouts = 1;
    const wf_graph *g = &out->graph;
    out->sig = calloc((size_t)g->nfwd + 1, sizeof *out->sig);
    out->sig_text = calloc((size_t)g->nfwd + 1, sizeof *out->sig_text);
    out->stage_first = calloc((size_t)ol->pp + 1, sizeof *out->stage_first);
    if (!out->sig || !out->sig_text || !out->stage_first)
        return wf_errorf(WF_NOMEM, "out of memory resolving a plan");
    for (int i = 0; i < g->nfwd; i++) {
        const char *text = wf_plan_oplevel_layout_of(ol, g->ops[i].name);
        if (!text)
            return wf_errorf(WF_INVAL, "op-level plan: op '%s' has no layout", g->ops[i].name);
        out->sig_text[i] = text;
        if ((st = wf_sbp_sig_parse(text, g->ops[i].nin, g->ops[i].nout, out->mesh.naxes, &out->sig[i])) != WF_OK)
            return st;
        int k = wf_sbp_sig_find(g, i, &out->mesh, text);
        if (k < 0)
            return (wf_status)k;
    }
    out->nstages = ol->pp;
    for (int s = 0; s < ol->pp; s++) {
        const char *name = ol->stage_first ? ol->stage_first[s] : NULL;
        int i = s == 0 && !name ? 0 : wf_layout_op_index(out, name);
        if (i < 0)
            return wf_errorf(WF_INVAL, "op-level plan: stage %d starts at '%s', no forward op of %s", s,
                             name ? name : "(none)", m->name);
        if (s > 0 && i <= out->stage_first[s - 1])
            return wf_errorf(WF_INVAL, "op-level plan: stage %d starts at '%s', not after stage %d's first op", s,
                             name, s - 1);
        out->stage_first[s] = i;
    }
    out->stage_first[ol->pp] = g->nfwd;
    return WF_OK;
}

wf_status wf_layout_index(const wf_plan_oplevel *ol, const wf_model_config *m, const wf_cluster *c, int64_t batch,
                          wf_layout_plan *out)
{
    memset(out, 0, sizeof *out);
    wf_plan_oplevel_init(&out->ol);
    return index_layouts(out, ol, m, c, batch);
}

wf_status wf_layout_resolve(const char *text, const wf_model_config *m, const wf_cluster *c, int64_t batch,
                            wf_cost_ctx *ctx, wf_layout_plan *out)
{
    memset(out, 0, sizeof *out);
    wf_plan_oplevel_init(&out->ol);
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
            if ((st = wf_oplevel_plan_layout(m, c, ctx, batch, &out->ol, &out->cost, &out->plan)) != WF_OK)
                return st;
            out->has_cost = 1;
        } else {
            wf_cost_ctx *own = NULL;
            if ((st = wf_cost_ctx_create(m, c, &own)) != WF_OK)
                return st;
            wf_cost_layout L;
            st = wf_oplevel_plan_layout(m, c, own, batch, &out->ol, &L, &out->plan);
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
