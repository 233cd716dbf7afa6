/* Lowering a whole-model plan (dp, tp, pp, mbs, sp) to the op-level plan
 * that runs the same layouts (docs/plan-format.md, "Lowering"): a mesh of
 * dp x tp (outer axis dp), pp stages by layer ranges, batch / (mbs x dp)
 * micro-batches, and for every forward op the SBP signature Megatron-LM's
 * layout gives it:
 *
 *   axis dp   every activation split by the batch (S0), weights replicated;
 *   axis tp   column-parallel products (QKV, fc1, the SwiGLU gate and up):
 *             input B, output split by its last dim; row-parallel ones (the
 *             attention projection, fc2): input split by its last dim,
 *             output partial sums (P); per-head ops (attention, the split of
 *             QKV, the MLP activation): split by the last dim throughout;
 *             the vocabulary-parallel embedding: ids B, output P; the
 *             logits: input B, output split by the vocabulary; the loss:
 *             logits split by the vocabulary, labels B; everything else
 *             replicated, or with sequence parallelism split by the
 *             sequence (S1), which turns Megatron's all-reduces into the
 *             reduce-scatter / all-gather pairs (the boxing P -> S1, S1 -> B).
 *
 * The signature is picked among wf_sbp_op_sigs' candidates by those tags, so
 * a lowered plan is one the op-level model can cost and check. Expert
 * parallelism lowers to an expert axis carved out of the data-parallel ranks
 * (mesh edp x ep x tp): experts and their weights split on it, each rank's
 * tokens in its own capacity rows, the boxing between them the all-to-all.
 * The keys that are not layouts (recompute, zero, overlap, the schedules,
 * vpp, the profile) go into the plan's keys; cp has no op-level form yet and
 * is refused. */
#include "weft/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one operand must be on one axis: a tag ("S0", "B", "P") or NULL (any). */
typedef struct {
    const char *in[WF_MAX_INPUTS];
    const char *out[WF_MAX_OUTPUTS];
} want_axis;

static int is_param(const wf_graph *g, int t) { return g->tensors[t].role == WF_ROLE_PARAM; }

static const char *last_split(const wf_graph *g, int t)
{
    static const char *const S[] = {"S0", "S1", "S2", "S3", "S4", "S5", "S6", "S7"};
    int r = g->tensors[t].ndim;
    return r >= 1 && r <= 8 ? S[r - 1] : "B";
}

/* The tags of op i on a data-parallel axis: the batch split (S0) for
 * activations, weights replicated. Expert ops: the dispatch keeps each
 * rank's tokens in its own capacity rows (S1); on the expert-parallel axis
 * (ep_axis) the experts and their weights are split (S0), so the boxing
 * S1 -> S0 before them and back after is the all-to-all; on the other
 * data-parallel axis they run on the rank's rows (S1) with every expert. */
static void want_dp(const wf_graph *g, int i, int ep_axis, want_axis *w)
{
    const wf_op *o = &g->ops[i];
    memset(w, 0, sizeof *w);
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (o->kind) {
    case WF_OP_MOE_DISPATCH:
        w->in[0] = "S0";
        w->in[1] = "S0";
        w->out[0] = "S1";
        return;
    case WF_OP_GROUPED_MLP:
        w->in[0] = ep_axis ? "S0" : "S1";
        w->in[1] = ep_axis ? "S0" : "B";
        w->in[2] = ep_axis ? "S0" : "B";
        w->out[0] = ep_axis ? "S0" : "S1";
        return;
    case WF_OP_MOE_COMBINE:
        w->in[0] = "S1";
        w->in[1] = "S0";
        w->in[2] = "S0";
        w->out[0] = "S0";
        return;
    default:
        break;
    }
    /* Scalars (a loss, and the sum of two losses) have no batch dim to
     * split: their layout follows from their producers (partial sums). */
    for (int j = 0; j < o->nin; j++)
        w->in[j] = is_param(g, o->in[j]) ? "B" : g->tensors[o->in[j]].ndim == 0 ? NULL : "S0";
}

static int has_seq(const wf_graph *g, int t)
{
    const wf_tensor *x = &g->tensors[t];
    return x->ndim >= 3 || (x->ndim == 2 && (x->dtype == WF_DTYPE_INT32 || x->dtype == WF_DTYPE_INT64));
}

/* The tags of op i on the tensor-parallel axis (Megatron's layout). */
static void want_tp(const wf_graph *g, int i, int sp, int etp_split, want_axis *w)
{
    const wf_op *o = &g->ops[i];
    memset(w, 0, sizeof *w);
    const char *rep = sp ? "S1" : "B";
    /* Expert ops on the tensor-parallel axis: with etp = tp each expert's
     * MLP is split like the dense one (hidden columns, partial sums out);
     * with etp = 1 the experts run whole on every tp rank. */
    if (o->kind == WF_OP_MOE_DISPATCH || o->kind == WF_OP_GROUPED_MLP || o->kind == WF_OP_MOE_COMBINE) {
        for (int j = 0; j < o->nin; j++)
            w->in[j] = "B";
        w->out[0] = "B";
        if (etp_split && o->kind == WF_OP_GROUPED_MLP) {
            w->in[1] = "S2";
            w->in[2] = "S1";
            w->out[0] = "P";
        } else if (etp_split && o->kind == WF_OP_MOE_COMBINE) {
            w->in[0] = "P";
            w->out[0] = "P";
        }
        return;
    }
    switch (o->tp) {
    case WF_TP_COL:
        for (int j = 0; j < o->nin; j++)
            if (!is_param(g, o->in[j]))
                w->in[j] = "B";
        w->out[0] = last_split(g, o->out[0]);
        return;
    case WF_TP_ROW:
        for (int j = 0; j < o->nin; j++)
            if (!is_param(g, o->in[j]))
                w->in[j] = last_split(g, o->in[j]);
        w->out[0] = "P";
        return;
    case WF_TP_SHARD:
        for (int j = 0; j < o->nin; j++)
            if (!is_param(g, o->in[j]))
                w->in[j] = last_split(g, o->in[j]);
        for (int j = 0; j < o->nout; j++)
            w->out[j] = last_split(g, o->out[j]);
        return;
    case WF_TP_VOCAB:
        if (o->kind == WF_OP_EMBEDDING) {
            w->in[0] = "B";
            w->out[0] = "P";
        } else if (o->kind == WF_OP_CROSS_ENTROPY) {
            w->in[0] = last_split(g, o->in[0]);
            w->in[1] = "B";
        } else if (o->kind == WF_OP_RESHAPE || o->kind == WF_OP_FLATTEN) {
            w->in[0] = last_split(g, o->in[0]);
            w->out[0] = last_split(g, o->out[0]);
        } else if (o->kind == WF_OP_LINEAR || o->kind == WF_OP_MATMUL) {
            for (int j = 0; j < o->nin; j++)
                if (!is_param(g, o->in[j]))
                    w->in[j] = "B";
            w->out[0] = last_split(g, o->out[0]);
        } else { /* on the split logits (BERT's output bias) */
            for (int j = 0; j < o->nin; j++)
                if (!is_param(g, o->in[j]))
                    w->in[j] = last_split(g, o->in[j]);
            w->out[0] = last_split(g, o->out[0]);
        }
        return;
    default:
        break;
    }
    /* Replicated ops; with sequence parallelism split by the sequence, except
     * where the sequence dim is gone (the flatten before the logits). */
    if (o->kind == WF_OP_RESHAPE || o->kind == WF_OP_FLATTEN)
        rep = "B";
    /* BERT's pooler takes the first token of the whole sequence: with
     * sequence parallelism Megatron-LM gathers the sequence first
     * (megatron/legacy/model/language_model.py, Pooler.forward). */
    if (o->kind == WF_OP_SPLIT)
        rep = "B";
    /* Only tensors with a sequence dim are split by it: [B,S,H] activations
     * and [B,S] token ids; [B,H] activations (BERT's pooler and
     * next-sentence head) are whole on every rank. */
    for (int j = 0; j < o->nin; j++)
        if (!is_param(g, o->in[j]))
            w->in[j] = has_seq(g, o->in[j]) ? rep : "B";
    for (int j = 0; j < o->nout; j++)
        w->out[j] = has_seq(g, o->out[j]) ? rep : "B";
}

/* Does value v (one operand on one axis) carry tag want ("S0", "B", "P";
 * NULL: any)? The tag written as the plan writes it, compared. */
static int tag_is(int8_t v, const char *want)
{
    if (!want)
        return 1;
    char t[8];
    if (v == WF_SBP_B)
        snprintf(t, sizeof t, "B");
    else if (v == WF_SBP_P)
        snprintf(t, sizeof t, "P");
    else
        snprintf(t, sizeof t, "S%d", v);
    return strcmp(t, want) == 0;
}

/* Does signature s on axis a match w? */
static int match_axis(const wf_sbp_sig *s, int a, const wf_op *o, const want_axis *w)
{
    for (int j = 0; j < o->nin; j++)
        if (!tag_is(s->in[j].ax[a], w->in[j]))
            return 0;
    for (int j = 0; j < o->nout; j++)
        if (!tag_is(s->out[j].ax[a], w->out[j]))
            return 0;
    return 1;
}

/* The first signature of op i on mesh m matching the wanted tags per axis
 * (axis_want[k] NULL: any), into *sig and as text into buf. */
static wf_status pick(const wf_graph *g, int i, const wf_mesh *m, const want_axis *const *axis_want,
                      wf_sbp_sig *sig, char *buf, size_t cap)
{
    int n = wf_sbp_op_sigs(g, i, m, NULL, 0);
    if (n < 0)
        return (wf_status)n;
    wf_sbp_sig *sigs = malloc((size_t)(n > 0 ? n : 1) * sizeof *sigs);
    if (!sigs)
        return wf_errorf(WF_NOMEM, "out of memory lowering op '%s'", g->ops[i].name);
    wf_sbp_op_sigs(g, i, m, sigs, n);
    const wf_op *o = &g->ops[i];
    wf_status st = WF_INVAL;
    for (int k = 0; k < n && st != WF_OK; k++) {
        int ok = 1;
        for (int a = 0; a < m->naxes && ok; a++)
            if (axis_want[a] && !match_axis(&sigs[k], a, o, axis_want[a]))
                ok = 0;
        if (ok) {
            *sig = sigs[k];
            wf_sbp_sig_str(&sigs[k], o->nin, o->nout, m->naxes, buf, cap);
            st = WF_OK;
        }
    }
    free(sigs);
    if (st != WF_OK)
        return wf_errorf(WF_INVAL, "lowering: op '%s' (%s) has no signature with Megatron's layout on mesh %lld axes",
                         o->name, wf_op_name(o->kind), (long long)m->naxes);
    return WF_OK;
}

/* The lowering; with sigs (may be NULL) each forward op's signature too,
 * sigs[i] for op i < nsigs of the graph at one micro-batch, whose forward
 * ops *nfwd counts, on *mesh_out (both may be NULL). */
static wf_status lower(const wf_model_config *mc, const wf_cluster *c, const wf_plan *p, int64_t batch,
                       wf_layout *out, wf_sbp_sig *sigs, int nsigs, int *nfwd, wf_mesh *mesh_out);

wf_status wf_plan_lower(const wf_model_config *mc, const wf_cluster *c, const wf_plan *p, int64_t batch,
                        wf_layout *out)
{
    return lower(mc, c, p, batch, out, NULL, 0, NULL, NULL);
}

static wf_status lower(const wf_model_config *mc, const wf_cluster *c, const wf_plan *p, int64_t batch,
                       wf_layout *out, wf_sbp_sig *sigs, int nsigs, int *nfwd, wf_mesh *mesh_out)
{
    wf_status st = wf_plan_validate(p, mc, c, batch);
    if (st != WF_OK)
        return st;
    if (p->interlace)
        return wf_errorf(WF_INVAL, "lowering: interlace=1 has no op-level form (the op-level plan runs every stage "
                                   "on one mesh; the interlaced embedding and head span every stage)");
    if (p->cp > 1)
        return wf_errorf(WF_INVAL, "lowering: cp=%d has no op-level form yet (the op-level plan has no sequence "
                                   "ring)", p->cp);
    if (p->dap > 1)
        return wf_errorf(WF_INVAL, "lowering: dap=%d has no op-level form (DAP's all-to-alls turn row-sharded into "
                                   "column-sharded activations inside a block; estimate it as a plan string)", p->dap);
    const int etp = p->etp > 0 ? p->etp : p->tp;
    if (p->ep > 1 && (p->dp % p->ep != 0 || (etp != 1 && etp != p->tp)))
        return wf_errorf(WF_INVAL, "lowering: ep=%d, etp=%d: the op-level form lays experts over the data-parallel "
                                   "ranks (ep dividing dp=%d) with etp 1 or tp", p->ep, etp, p->dp);
    int64_t micro = batch / ((int64_t)p->mbs * p->dp);
    /* Mesh axes, outermost first: expert-data-parallel, expert-parallel
     * (ep > 1), tensor-parallel; axes of size 1 left out. */
    int sizes[3], kinds[3], naxes = 0; /* kinds: 0 data, 1 expert, 2 tensor */
    int ep = p->ep > 1 ? p->ep : 1;
    if (p->dp / ep > 1)
        sizes[naxes] = p->dp / ep, kinds[naxes++] = 0;
    if (ep > 1)
        sizes[naxes] = ep, kinds[naxes++] = 1;
    if (p->tp > 1)
        sizes[naxes] = p->tp, kinds[naxes++] = 2;
    if (naxes == 0)
        sizes[naxes] = 1, kinds[naxes++] = 0;
    char mesh_text[64];
    size_t ml = 0;
    for (int a = 0; a < naxes && ml < sizeof mesh_text; a++)
        ml += (size_t)snprintf(mesh_text + ml, sizeof mesh_text - ml, "%s%d", a ? "x" : "", sizes[a]);
    wf_mesh mesh;
    if ((st = wf_mesh_parse(mesh_text, c, &mesh)) != WF_OK)
        return st;
    wf_graph g;
    if ((st = wf_model_build(mc, batch / micro, &g)) != WF_OK) {
        wf_graph_free(&g);
        return st;
    }
    if (nfwd)
        *nfwd = g.nfwd;
    if (mesh_out)
        *mesh_out = mesh;
    if ((st = wf_layout_set(out, mesh_text, p->pp, micro)) != WF_OK ||
        (st = wf_layout_set_keys(out, p)) != WF_OK) {
        wf_graph_free(&g);
        return st;
    }
    for (int i = 0; i < g.nfwd && st == WF_OK; i++) {
        want_axis w[3];
        const want_axis *axes[WF_SBP_MAX_AXES] = {NULL};
        for (int a = 0; a < naxes; a++) {
            if (kinds[a] == 2)
                want_tp(&g, i, p->sp, etp > 1, &w[a]);
            else if (sizes[a] > 1)
                want_dp(&g, i, kinds[a] == 1, &w[a]);
            else
                continue;
            axes[a] = &w[a];
        }
        char sig[512];
        wf_sbp_sig ps;
        if ((st = pick(&g, i, &mesh, axes, &ps, sig, sizeof sig)) == WF_OK)
            st = wf_layout_add_sig(out, g.ops[i].name, sig);
        if (st == WF_OK && sigs && i < nsigs)
            sigs[i] = ps;
        /* A weight of a replicated op read split (the position table under
         * sequence parallelism: each rank adds its rows) is kept whole, as
         * Megatron keeps it. */
        if (st == WF_OK && g.ops[i].tp == WF_TP_NONE && p->tp > 1 && p->sp) {
            for (int j = 0; j < g.ops[i].nin && st == WF_OK; j++) {
                const wf_tensor *x = &g.tensors[g.ops[i].in[j]];
                if (x->role != WF_ROLE_PARAM || ps.in[j].ax[mesh.naxes - 1] < 0)
                    continue;
                char lay[64] = "";
                size_t n = 0;
                for (int a = 0; a < mesh.naxes; a++)
                    n += (size_t)snprintf(lay + n, sizeof lay - n, "%sB", a ? "," : "");
                st = wf_layout_add_storage(out, 0, x->name, lay);
            }
        }
    }
    /* Other models: the estimate's cut, balancing each stage's forward and
     * backward time at the plan's micro-batch (wf_cost_cut_stages). */
    if (st == WF_OK && !wf_model_is_transformer(mc) && p->pp > 1) {
        wf_cost_ctx *ctx = NULL;
        double *w = malloc((size_t)(g.nfwd + 1) * sizeof *w);
        wf_cost_op_time *t = malloc((size_t)(g.nfwd + 1) * sizeof *t);
        int *first = malloc((size_t)(p->pp + 1) * sizeof *first);
        if (!w || !t || !first)
            st = wf_errorf(WF_NOMEM, "out of memory lowering a plan");
        if (st == WF_OK)
            st = wf_cost_ctx_create(mc, c, &ctx);
        if (st == WF_OK) {
            wf_cost_ctx_use(ctx, p);
            st = wf_cost_op_times(ctx, p->mbs, 1, 0, t);
        }
        if (st == WF_OK) {
            /* A fully recomputed stage runs its forward twice. */
            for (int i = 0; i < g.nfwd; i++)
                w[i] = t[i].fwd_s + t[i].bwd_in_s + t[i].bwd_w_s +
                       (p->recompute == WF_RECOMPUTE_FULL ? t[i].fwd_s : 0);
            int ns = wf_cost_cut_stages(w, g.nfwd, p->pp, NULL, first);
            if (ns != p->pp)
                st = wf_errorf(WF_INVAL, "lowering: model '%s' cuts into %d stages, not pp=%d", mc->name, ns, p->pp);
            for (int k = 0; k < ns && st == WF_OK; k++)
                st = wf_layout_set_stage(out, k, g.ops[first[k]].name);
        }
        wf_cost_ctx_free(ctx);
        free(w);
        free(t);
        free(first);
        wf_graph_free(&g);
        return st;
    }
    /* Stages by layer ranges: stage s starts at layer s x layers / pp (with
     * vpp > 1 its first chunk at layer s x layers / (pp vpp): Megatron's
     * interleaving gives stage s the chunks s, s + pp, ...). */
    if (st == WF_OK) {
        st = wf_layout_set_stage(out, 0, g.ops[0].name);
        int64_t per = mc->layers / ((int64_t)p->pp * (p->vpp > 1 ? p->vpp : 1));
        for (int s = 1; s < p->pp && st == WF_OK; s++) {
            /* uneven stages (stages=): after the layers of the stages before */
            int64_t l0 = p->stage_n > 0 ? wf_plan_stage_first_layer(p, mc->layers, s) : s * per;
            int first = -1;
            for (int i = 0; i < g.nfwd && first < 0; i++)
                if (g.ops[i].block >= 0 && g.ops[i].layer == (int)l0)
                    first = i;
            if (first < 0)
                st = wf_errorf(WF_INVAL, "lowering: model '%s' has no layer %lld to start stage %d", mc->name,
                               (long long)l0, s);
            else
                st = wf_layout_set_stage(out, s, g.ops[first].name);
        }
    }
    wf_graph_free(&g);
    return st;
}

/* Whether op `name` is compared by a raise of `part` (wf_plan_raise_part):
 * 0 every op; 1 all but the dense layers' ops; 2 the dense layers' only. */
static int in_part(const wf_model_config *m, const char *name, int part)
{
    if (part == 0)
        return 1;
    int dense = 0;
    if (strncmp(name, "layers.", 7) == 0) {
        char *end = NULL;
        long long l = strtoll(name + 7, &end, 10);
        int64_t f = m->moe_freq > 0 ? m->moe_freq : 1;
        dense = end && *end == '.' && !(m->experts > 0 && l >= m->first_dense && l % f == 0);
    }
    return part == 2 ? dense : !dense;
}

/* Resolved plan a holds the layouts of lowering b (its signatures bs[nb],
 * on mesh bm): mesh, stages, micro-batches and the signature of every op of
 * `part` (in_part). Names the first difference. */
static int same_layouts(const wf_model_config *m, int part, const wf_layout_plan *a, const wf_layout *b,
                        const wf_sbp_sig *bs, int nb, const wf_mesh *bm, char *diff, size_t cap)
{
    int same_mesh = a->mesh.naxes == bm->naxes;
    for (int x = 0; x < bm->naxes && same_mesh; x++)
        same_mesh = a->mesh.size[x] == bm->size[x];
    if (!same_mesh || a->nstages != b->pp || a->micro_batches != b->micro_batches) {
        snprintf(diff, cap, "mesh, stages or micro-batches");
        return 0;
    }
    const wf_graph *g = &a->graph;
    for (int s = 0; s < b->pp; s++)
        if (!b->stage_first[s] || strcmp(g->ops[a->stage_first[s]].name, b->stage_first[s]) != 0) {
            snprintf(diff, cap, "stage %d's first op", s);
            return 0;
        }
    if (nb != g->nfwd) {
        snprintf(diff, cap, "the graph's ops");
        return 0;
    }
    for (int i = 0; i < nb; i++) {
        const wf_op *o = &g->ops[i];
        if (!in_part(m, o->name, part))
            continue;
        if (!wf_sbp_sig_equal(&a->sig[i], &bs[i], o->nin, o->nout, bm->naxes)) {
            char u[256], v[256];
            wf_sbp_sig_str(&a->sig[i], o->nin, o->nout, bm->naxes, u, sizeof u);
            wf_sbp_sig_str(&bs[i], o->nin, o->nout, bm->naxes, v, sizeof v);
            snprintf(diff, cap, "op '%s' runs %s where the lowering runs %s", o->name, u, v);
            return 0;
        }
    }
    return 1;
}

/* One whole-model plan a mesh may be the lowering of: dp, tp, ep (1 without
 * experts) and etp (0: tp). */
typedef struct {
    int dp, tp, ep, etp;
} raise_cand;

/* The whole-model plans whose lowering has mesh ax[0..naxes) (wf_plan_lower's
 * axes, outermost first: edp = dp / ep, ep, tp; those of size 1 left out):
 * dp x tp, or one of them; with experts also edp x ep, ep x tp, edp x ep x tp,
 * the experts split by tp or not (etp tp or 1). Returns how many. */
static int raise_cands(const int64_t *ax, int naxes, int moe, raise_cand *out)
{
    int n = 0;
    const int a = (int)ax[0], b = naxes > 1 ? (int)ax[1] : 1, c3 = naxes > 2 ? (int)ax[2] : 1;
    if (naxes == 1) {
        out[n++] = (raise_cand){a, 1, 1, 0};
        out[n++] = (raise_cand){1, a, 1, 0};
        if (moe)
            out[n++] = (raise_cand){a, 1, a, 0};
    } else if (naxes == 2) {
        out[n++] = (raise_cand){a, b, 1, 0};
        if (moe) {
            out[n++] = (raise_cand){a * b, 1, b, 0};
            out[n++] = (raise_cand){a, b, a, 0};
            out[n++] = (raise_cand){a, b, a, 1};
        }
    } else if (moe) {
        out[n++] = (raise_cand){a * b, c3, b, 0};
        out[n++] = (raise_cand){a * b, c3, b, 1};
    }
    return n;
}

/* A mesh a whole-model plan lowers to: one to three axes, three only with
 * experts. */
static wf_status raise_mesh_check(const wf_model_config *m, const wf_mesh *mesh)
{
    char ms[64];
    wf_mesh_str(mesh, ms, sizeof ms);
    if (mesh->naxes < 1 || mesh->naxes > 3)
        return wf_errorf(WF_INVAL, "op-level plan mesh=%s: expected one to three axes", ms);
    if (mesh->naxes == 3 && !wf_model_is_moe(m))
        return wf_errorf(WF_INVAL, "op-level plan mesh=%s: three axes are the lowering of an expert-parallel plan, "
                                   "and model '%s' has no experts", ms, m->name);
    return WF_OK;
}

static wf_status raise_parts(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_plan *keys,
                             const wf_layout_plan *lp, unsigned mask, wf_plan *out, int *found);

/* Resolves op-level form ol (its keys and indexed layouts), the mesh's
 * refusals first, as raise_parts words them; lp to free by the caller on OK. */
static wf_status raise_resolve(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                               wf_plan *keys, wf_layout_plan *lp)
{
    wf_status st = wf_layout_keys(ol, keys);
    if (st != WF_OK)
        return st;
    wf_mesh mesh;
    if ((st = wf_mesh_parse(ol->mesh, c, &mesh)) != WF_OK)
        return st;
    if ((st = raise_mesh_check(m, &mesh)) != WF_OK)
        return st;
    if ((st = wf_layout_index(ol, m, c, batch, lp)) != WF_OK)
        wf_layout_plan_free(lp);
    return st;
}

wf_status wf_plan_raise(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                        wf_plan *out)
{
    return wf_plan_raise_part(m, c, batch, ol, 0, out);
}

wf_status wf_plan_raise_part(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                             int part, wf_plan *out)
{
    if (part < 0 || part > 2)
        return wf_errorf(WF_INTERNAL, "wf_plan_raise_part: part %d", part);
    wf_plan keys;
    wf_layout_plan lp;
    wf_status st = raise_resolve(m, c, batch, ol, &keys, &lp);
    if (st != WF_OK)
        return st;
    int found[3] = {0, 0, 0};
    wf_plan got[3];
    st = raise_parts(m, c, batch, &keys, &lp, 1u << part, got, found);
    wf_layout_plan_free(&lp);
    if (st == WF_OK)
        *out = got[part];
    return st;
}

wf_status wf_plan_raise_parts(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                              wf_plan out[3], int found[3])
{
    found[0] = found[1] = found[2] = 0;
    wf_plan keys;
    wf_layout_plan lp;
    wf_status st = raise_resolve(m, c, batch, ol, &keys, &lp);
    if (st == WF_OK) {
        st = raise_parts(m, c, batch, &keys, &lp, 7u, out, found);
        wf_layout_plan_free(&lp);
    }
    if (st == WF_INVAL)
        wf_clear_error();
    return st == WF_INVAL ? WF_OK : st;
}

wf_status wf_plan_raise_resolved(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_plan *keys,
                                 const wf_layout_plan *lp, wf_plan *out)
{
    int found[3] = {0, 0, 0};
    wf_plan got[3];
    wf_status st = raise_parts(m, c, batch, keys, lp, 1u, got, found);
    if (st == WF_OK)
        *out = got[0];
    return st;
}

/* The raise of the parts in mask (bit k: part k; in_part), each candidate
 * lowered once: found[k] and out[k] for each part a candidate matches (the
 * first); WF_OK when every part of mask is found, else WF_INVAL naming the
 * first part's (lowest bit's) first difference. */
static wf_status raise_parts(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_plan *keys,
                             const wf_layout_plan *lp, unsigned mask, wf_plan *out, int *found)
{
    char ms[64];
    wf_mesh_str(&lp->mesh, ms, sizeof ms);
    const int naxes = lp->mesh.naxes;
    wf_status mst = raise_mesh_check(m, &lp->mesh);
    if (mst != WF_OK)
        return mst;
    if (!lp->has_layouts || lp->micro_batches < 1)
        return wf_errorf(WF_INTERNAL, "op-level plan mesh=%s: raised from a resolved plan with no layouts", ms);
    int64_t ax[3] = {0, 0, 0};
    for (int a = 0; a < naxes; a++)
        ax[a] = lp->mesh.size[a];
    const int moe = wf_model_is_moe(m);
    const int nf = lp->graph.nfwd;
    wf_sbp_sig *low_sig = malloc(sizeof *low_sig * ((size_t)nf + 1));
    if (!low_sig)
        return wf_errorf(WF_NOMEM, "out of memory raising an op-level plan");
    raise_cand cand[8];
    const int nc = raise_cands(ax, naxes, moe, cand);
    char diff[640] = "its layouts", best[640] = "";
    for (int k = 0; k < nc; k++) {
        int64_t per = (int64_t)cand[k].dp * lp->micro_batches;
        if (per <= 0 || batch % per != 0)
            continue;
        for (int sp = 0; sp <= 1; sp++) {
            wf_plan p = *keys;
            p.dp = cand[k].dp;
            p.tp = cand[k].tp;
            p.ep = cand[k].ep;
            p.etp = cand[k].etp;
            p.pp = lp->nstages;
            p.sp = sp;
            p.mbs = (int)(batch / per);
            if (sp && p.tp < 2)
                continue;
            wf_layout low;
            wf_layout_init(&low);
            wf_mesh low_mesh;
            int low_nf = 0;
            wf_status st = lower(m, c, &p, batch, &low, low_sig, nf, &low_nf, &low_mesh);
            int all = st == WF_OK;
            for (int part = 0; part < 3 && st == WF_OK; part++) {
                if (!(mask & (1u << part)) || found[part])
                    continue;
                const int first = (mask & ((1u << part) - 1u)) == 0; /* the lowest part of mask */
                char d[640];
                if (same_layouts(m, part, lp, &low, low_sig, low_nf, &low_mesh, d, sizeof d)) {
                    out[part] = p;
                    found[part] = 1;
                } else if (first) {
                    snprintf(diff, sizeof diff, "%s", d);
                    if (!best[0])
                        snprintf(best, sizeof best, "%s", d);
                }
            }
            wf_layout_free(&low);
            for (int part = 0; part < 3 && all; part++)
                all = !(mask & (1u << part)) || found[part];
            if (all) {
                free(low_sig);
                wf_clear_error();
                return WF_OK;
            }
        }
    }
    free(low_sig);
    return wf_errorf(WF_INVAL, "op-level plan %s is not the lowering of a whole-model plan (dp, tp, pp, sp%s): %s",
                     ms, moe ? ", ep, etp" : "", best[0] ? best : diff);
}
