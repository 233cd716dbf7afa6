/* Per-layer plans of a mixture of experts (layout.h, docs/planner.md
 * "Per-layer plans").
 *
 * A mixture of experts with dense layers (DeepSeek-V3's first three, or every
 * other layer with moe_freq=2) may run its dense layers in other layouts than
 * its expert layers. Such an op-level plan is read as two whole-model plans
 * on one mesh: `moe`, whose lowering its embedding, head and expert layers
 * run, and `dense`, whose lowering its dense layers run (wf_plan_raise_part).
 *
 * Price, layer by layer. The cost model prices a mixture of experts by its
 * expert layer, every layer (cost/build.c: the few dense layers are costed as
 * expert layers), and that price of a whole-model plan stays as it is. A
 * per-layer plan costs
 *
 *   E(moe) + [D(dense) - D(moe)] + boxing,
 *
 * D(X) being what the dense layers cost under X's dense layouts (dp, tp, sp):
 * the estimate of the dense transformer of the model's attention and dense
 * MLP (experts 0) at L layers less the same at L - dense_layers layers, each
 * by the one cost model (wf_estimate_plan, which an op-level plan of those
 * layouts costs exactly: tests/test_onecost.c). The difference is taken of
 * the iteration time, each breakdown term and each memory term, so the dense
 * layers' own weights, gradients, optimizer state and saved activations are
 * counted by their own layout. With dense == moe's dense layouts the price
 * is E(moe), the whole-model plan's, exactly.
 *
 * Boxing: the layer's input and output, [micro-batch, seq, hidden], is laid
 * out by a plan on each mesh axis as S0 (a batch axis: dp or ep), or on the tp
 * axis (the innermost, when tp > 1) as S1 under sequence parallelism, else B.
 * Where the layout of two adjacent layers differs on an axis, the tensor is
 * moved forward by the collective of that change (S->B all-gather, B->S
 * local, S->S all-to-all) and its gradient backward by the collective of the
 * change back, on that axis's group (wf_group_place: rank order tp, ep, dp,
 * the mesh's axes innermost last), priced by the collective model
 * (wf_coll_time) and charged exposed, per micro-batch, forward again under
 * full recomputation. */
#include "weft/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_AXES 3

static int layer_has_experts(const wf_model_config *m, int64_t l)
{
    int64_t f = m->moe_freq > 0 ? m->moe_freq : 1;
    return m->experts > 0 && l >= m->first_dense && l % f == 0;
}

static int64_t dense_layer_count(const wf_model_config *m)
{
    int64_t n = 0;
    for (int64_t l = 0; l < m->layers; l++)
        n += !layer_has_experts(m, l);
    return n;
}

/* The layer input's layout on each axis of mesh size[0..naxes) under plan
 * p's dense layouts: -1 B, 0 S0 (batch), 1 S1 (sequence). */
static void layer_layout(const wf_plan *p, int naxes, int8_t *v)
{
    for (int a = 0; a < naxes; a++)
        v[a] = 0;
    if (p->tp > 1 && naxes > 0)
        v[naxes - 1] = p->sp ? 1 : -1;
}

/* One move of the layer tensor from layout u to v: forward and backward
 * seconds. */
static void switch_time(const wf_cluster *c, const int64_t *size, int naxes, const int8_t *u, const int8_t *v,
                        double full_bytes, double *fwd_s, double *bwd_s)
{
    *fwd_s = *bwd_s = 0;
    for (int a = 0; a < naxes; a++) {
        if (u[a] == v[a] || size[a] < 2)
            continue;
        /* The vector moved: the tensor's shard over the axes split in both. */
        double bytes = full_bytes;
        int64_t stride = 1;
        for (int b = 0; b < naxes; b++)
            if (b != a && u[b] >= 0 && v[b] >= 0)
                bytes /= (double)size[b];
        for (int b = a + 1; b < naxes; b++)
            stride *= size[b];
        wf_group g = wf_group_place(c, size[a], stride);
        /* Forward u -> v; backward the gradient v -> u. */
        for (int dir = 0; dir < 2; dir++) {
            int8_t from = dir ? v[a] : u[a], to = dir ? u[a] : v[a];
            double t = 0;
            if (from >= 0 && to < 0)
                t = wf_coll_time(c, WF_COLL_ALLGATHER, &g, bytes);
            else if (from >= 0 && to >= 0)
                t = wf_coll_time(c, WF_COLL_ALLTOALL, &g, bytes);
            *(dir ? bwd_s : fwd_s) += t;
        }
    }
}

/* The mesh's axis sizes (wf_plan_lower's "AxBxC"). */
static int mesh_sizes(const char *mesh, int64_t *size)
{
    long long x[3] = {1, 1, 1};
    char tail = 0;
    int n = sscanf(mesh, "%lldx%lldx%lld%c", &x[0], &x[1], &x[2], &tail);
    if (n < 1 || n > MAX_AXES)
        return 0;
    for (int a = 0; a < n; a++) {
        if (x[a] < 1)
            return 0;
        size[a] = x[a];
    }
    return n;
}

wf_status wf_layout_perlayer_of(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                                wf_layout_perlayer *out, int *is)
{
    *is = 0;
    memset(out, 0, sizeof *out);
    if (!wf_model_is_moe(m) || !wf_model_is_transformer(m))
        return WF_OK;
    const int64_t nd = dense_layer_count(m);
    if (nd == 0 || nd == m->layers)
        return WF_OK;
    /* One pass over the whole-model plans of the mesh: the whole plan's
     * lowering (not a per-layer plan), the expert layers' and the dense
     * layers'. */
    wf_plan got[3];
    int found[3];
    wf_status st = wf_plan_raise_parts(m, c, batch, ol, got, found);
    if (st != WF_OK)
        return st;
    /* The lowering of one plan; or expert layers in no whole-model plan's
     * layouts: not a per-layer plan (the one cost model refuses such
     * layouts as it refuses any). */
    if (found[0] || !found[1])
        return WF_OK;
    if (!found[2]) {
        char why[640];
        snprintf(why, sizeof why, "%s", wf_plan_raise_part(m, c, batch, ol, 2, &got[2]) != WF_OK ? wf_last_error()
                                                                                                : "");
        return wf_errorf(WF_INVAL, "mixture of experts '%s': its dense layers are the lowering of no whole-model "
                                   "plan on mesh %s; %s", m->name, ol->mesh, why);
    }
    const wf_plan pm = got[1], pd = got[2];
    if ((st = wf_layout_perlayer_make(m, c, batch, &pm, &pd, ol, out)) == WF_OK)
        *is = 1;
    return st;
}

wf_status wf_layout_perlayer_make(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_plan *moe,
                                  const wf_plan *dense, const wf_layout *ol, wf_layout_perlayer *out)
{
    const wf_plan pm = *moe, pd = *dense;
    memset(out, 0, sizeof *out);
    if (ol->pp > 1)
        return wf_errorf(WF_INVAL, "mixture of experts '%s': a per-layer plan (dense layers tp=%d, expert layers' "
                                   "tp=%d) is costed on one stage, not pp=%d", m->name, pd.tp, pm.tp, ol->pp);
    if (ol->micro_batches < 1 || batch % ol->micro_batches != 0)
        return wf_errorf(WF_INVAL, "op-level plan: micro_batches=%lld does not divide the batch %lld",
                         (long long)ol->micro_batches, (long long)batch);
    int64_t size[MAX_AXES] = {1, 1, 1};
    const int naxes = mesh_sizes(ol->mesh, size);
    if (naxes == 0)
        return wf_errorf(WF_INVAL, "op-level plan mesh=%s: expected one to three axes", ol->mesh);
    out->moe = pm;
    out->dense = pd;
    out->dense_layers = dense_layer_count(m);
    /* Layout changes along embedding, layers, head (the ends laid out as moe's). */
    int prev_dense = 0;
    for (int64_t l = 0; l <= m->layers; l++) {
        int d = l < m->layers && !layer_has_experts(m, l);
        out->to_dense += d && !prev_dense;
        out->to_moe += !d && prev_dense;
        prev_dense = d;
    }
    int8_t um[MAX_AXES], ud[MAX_AXES];
    layer_layout(&pm, naxes, um);
    layer_layout(&pd, naxes, ud);
    const double full = (double)(batch / ol->micro_batches) * (double)m->seq * (double)m->hidden *
                        (double)wf_dtype_bytes(m->dtype);
    double f1, b1, f2, b2;
    switch_time(c, size, naxes, um, ud, full, &f1, &b1);
    switch_time(c, size, naxes, ud, um, full, &f2, &b2);
    out->switch_fwd_s = (double)out->to_dense * f1 + (double)out->to_moe * f2;
    out->switch_bwd_s = (double)out->to_dense * b1 + (double)out->to_moe * b2;
    return WF_OK;
}

/* The model's dense transformer at `layers` layers: its attention and dense
 * MLP, no experts. */
wf_model_config wf_layout_perlayer_dense_model(const wf_model_config *m, int64_t layers)
{
    wf_model_config d = *m;
    d.experts = d.top_k = d.moe_ffn = d.shared_experts = d.shared_ffn = 0;
    d.first_dense = 0;
    d.moe_freq = 1;
    d.layers = layers;
    snprintf(d.name, sizeof d.name, "%.100s:dense", m->name);
    return d;
}

/* X's dense layouts as a plan of the dense transformer at `layers` layers:
 * at m's layers with x's recomputation; at fewer (the model without its
 * dense layers), Megatron's block method's count less the dense layers among
 * the layers it recomputes (the first rc_layers of the one stage). */
wf_plan wf_layout_perlayer_dense_plan(const wf_model_config *m, const wf_plan *x, int64_t layers)
{
    wf_plan p = *x;
    p.ep = 1;
    p.etp = 0;
    if (layers < m->layers && p.recompute == WF_RECOMPUTE_FULL && p.rc_layers > 0) {
        int64_t rc = p.rc_layers;
        for (int64_t l = 0; l < m->layers && l < p.rc_layers; l++)
            rc -= !layer_has_experts(m, l);
        if (rc > 0) {
            p.rc_layers = (int)rc;
        } else {
            p.recompute = WF_RECOMPUTE_NONE;
            p.rc_layers = 0;
        }
    }
    return p;
}

/* The estimate of the dense transformer of m at `layers` layers under plan x. */
static wf_status dense_estimate(const wf_model_config *m, const wf_cluster *c, int64_t layers, const wf_plan *x,
                                int64_t batch, wf_estimate *out)
{
    wf_model_config d = wf_layout_perlayer_dense_model(m, layers);
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cost_ctx_create(&d, c, &ctx);
    wf_plan p = wf_layout_perlayer_dense_plan(m, x, layers);
    if (st == WF_OK)
        st = wf_estimate_plan(ctx, &p, batch, out);
    wf_cost_ctx_free(ctx);
    return st;
}

/* e += s x (a - b), field by field (times, memory, breakdown). */
static void add_diff(wf_estimate *e, const wf_estimate *a, const wf_estimate *b, double s)
{
#define ADD(f) e->f += s * (a->f - b->f)
    ADD(iteration_time_s);
    ADD(memory_per_device_bytes);
    ADD(mem_weights_bytes);
    ADD(mem_activation_bytes);
    ADD(mem_buffer_bytes);
    ADD(mem_layer_weights_bytes);
    ADD(breakdown.compute);
    ADD(breakdown.recompute);
    ADD(breakdown.tp_comm);
    ADD(breakdown.pp_comm);
    ADD(breakdown.dp_comm);
    ADD(breakdown.bubble);
    ADD(breakdown.optimizer);
    ADD(breakdown.exposed_comm);
#undef ADD
}

wf_status wf_layout_perlayer_cost(const wf_model_config *m, const wf_cluster *c, wf_cost_ctx *ctx, int64_t batch,
                                  const wf_layout_perlayer *pl, wf_estimate *out)
{
    wf_cost_layout L;
    wf_plan pm = pl->moe;
    wf_status st;
    /* The expert plan as the one cost model prices its lowering (layout_cost.c,
     * expert_layout). */
    pm.given |= WF_PLAN_GIVEN_DP | WF_PLAN_GIVEN_MBS;
    if ((st = wf_cost_layout_megatron(ctx, pm.tp, pm.sp, &L)) != WF_OK)
        return st;
    st = wf_estimate_layouts(ctx, &pm, &L, batch, out);
    wf_cost_layout_free(&L);
    if (st != WF_OK)
        return st;
    const int64_t nl = m->layers, rest = m->layers - pl->dense_layers;
    wf_estimate dl, dr, ml, mr;
    if ((st = dense_estimate(m, c, nl, &pl->dense, batch, &dl)) != WF_OK ||
        (st = dense_estimate(m, c, rest, &pl->dense, batch, &dr)) != WF_OK ||
        (st = dense_estimate(m, c, nl, &pl->moe, batch, &ml)) != WF_OK ||
        (st = dense_estimate(m, c, rest, &pl->moe, batch, &mr)) != WF_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", wf_last_error());
        return wf_errorf(st, "per-layer plan of '%s': its dense layers: %s", m->name, why);
    }
    const double t0 = out->iteration_time_s;
    add_diff(out, &dl, &dr, 1);
    add_diff(out, &ml, &mr, -1);
    const int64_t mbs_count = out->micro_batches > 0 ? out->micro_batches : 1;
    const double fwd_again = pm.recompute == WF_RECOMPUTE_FULL ? 2.0 : 1.0;
    const double sw = (double)mbs_count * (fwd_again * pl->switch_fwd_s + pl->switch_bwd_s);
    out->iteration_time_s += sw;
    out->breakdown.tp_comm += sw;
    out->breakdown.exposed_comm += sw;
    if (out->iteration_time_s <= 0)
        return wf_errorf(WF_INTERNAL, "per-layer plan of '%s': a time of %g s", m->name, out->iteration_time_s);
    out->samples_per_s = (double)batch / out->iteration_time_s;
    out->tflops_per_device = out->model_flops_per_iteration / out->iteration_time_s /
                             (double)(out->devices > 0 ? out->devices : 1) / 1e12;
    out->mfu *= t0 / out->iteration_time_s;
    out->fits = out->memory_per_device_bytes <= c->dev.mem_bytes;
    return WF_OK;
}

/* Sets op `name`'s signature in ol to sig (it has one). */
static wf_status set_sig(wf_layout *ol, const char *name, const char *sig)
{
    for (int i = 0; i < ol->nlayouts; i++)
        if (strcmp(ol->op[i], name) == 0) {
            size_t n = strlen(sig) + 1;
            char *d = malloc(n);
            if (!d)
                return wf_errorf(WF_NOMEM, "out of memory writing a per-layer plan");
            memcpy(d, sig, n);
            free(ol->sig[i]);
            ol->sig[i] = d;
            return WF_OK;
        }
    return wf_errorf(WF_INTERNAL, "per-layer plan: op '%s' has no layout in the lowering", name);
}

wf_status wf_layout_perlayer_lower(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                                   const wf_plan *moe, const wf_plan *dense, wf_layout *out)
{
    wf_status st = wf_plan_lower(m, c, moe, batch, out);
    if (st != WF_OK)
        return st;
    wf_layout d;
    wf_layout_init(&d);
    if ((st = wf_plan_lower(m, c, dense, batch, &d)) == WF_OK && strcmp(d.mesh, out->mesh) != 0)
        st = wf_errorf(WF_INVAL, "per-layer plan: the dense layers' plan lowers to mesh %s, the experts' to %s",
                       d.mesh, out->mesh);
    if (st == WF_OK && d.micro_batches != out->micro_batches)
        st = wf_errorf(WF_INVAL, "per-layer plan: the dense layers' plan runs %lld micro-batches, the experts' %lld",
                       (long long)d.micro_batches, (long long)out->micro_batches);
    for (int i = 0; i < d.nlayouts && st == WF_OK; i++) {
        const char *name = d.op[i];
        if (strncmp(name, "layers.", 7) != 0)
            continue;
        char *end = NULL;
        long long l = strtoll(name + 7, &end, 10);
        if (!end || *end != '.' || layer_has_experts(m, l))
            continue;
        st = set_sig(out, name, d.sig[i]);
    }
    wf_layout_free(&d);
    return st;
}

void wf_layout_perlayer_describe(const wf_layout_perlayer *pl, char *buf, size_t cap)
{
    snprintf(buf, cap, "%lld dense layers dp=%d tp=%d%s; expert layers dp=%d tp=%d%s ep=%d etp=%d; "
                       "%lld+%lld layout changes per micro-batch",
             (long long)pl->dense_layers, pl->dense.dp, pl->dense.tp, pl->dense.sp ? " sp" : "", pl->moe.dp,
             pl->moe.tp, pl->moe.sp ? " sp" : "", pl->moe.ep, pl->moe.etp > 0 ? pl->moe.etp : pl->moe.tp,
             (long long)pl->to_dense, (long long)pl->to_moe);
}
