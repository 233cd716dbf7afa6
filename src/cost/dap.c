/* Dynamic Axial Parallelism (DAP) for AlphaFold2-shaped models: the layout
 * descriptor of plan key dap=K (docs/planner.md, "DAP").
 *
 * FastFold (Cheng et al., "FastFold: Reducing AlphaFold Training Time from 11
 * Days to 67 Hours", arXiv 2203.00854; hpcaitech/FastFold at eba4968,
 * fastfold/model/fastnn/evoformer.py, msa.py, triangle.py, ops.py) shards
 * each Evoformer block's activations along one axis over the DAP group: the
 * MSA [S, N, c_m] along its sequences for the row-wise ops and along its
 * residues for the column-wise ones, the pair [N, N, c_z] along its rows or
 * its columns. What crosses the group, per block and sample (forward):
 *
 *   MSA row attention     all-gather of the pair bias [heads, N, N]
 *   MSA row -> column     all-to-all of the MSA (MSACore's row_to_col)
 *   outer product mean    all-gather of the right projection [S, N, 32]
 *   MSA column -> row     all-to-all of the MSA (Evoformer's All_to_All_Async,
 *                         issued before the pair stack)
 *   triangle updates      all-gather of the right (outgoing) and the left
 *                         (incoming) projection [N, N, c_z]
 *   triangle attention    all-gather of each bias [4, N, N]
 *   pair row <-> column   four all-to-alls of the pair (PairCore: after the
 *                         outgoing and the incoming update, after the
 *                         attention around the starting node, after the
 *                         transition)
 *
 * and in backward the adjoints: an all-gather's gradient is reduce-scattered,
 * an all-to-all's is all-to-all'ed back. The first block scatters the MSA
 * and the pair (a slice: free; its backward gathers their gradients) and
 * the last gathers them for the head (its backward slices). The embedders
 * and the head run whole on every rank of the group (FastFold scatters
 * inside the first block and gathers inside the last).
 *
 * So every op of a block has its work, what it saves and its output divided
 * by K; its weights are whole on every rank and their gradients are partial
 * sums over the group (each rank saw 1/K of the rows), reduced over it as
 * data parallelism reduces. The collectives are priced exposed: FastFold's
 * Duality Async Operation overlaps some of them with compute, which weft
 * does not model (an upper bound on DAP's cost). The bytes are the graph's
 * own tensors at micro-batch 1 (the whole vector of each collective). */
#include "cost-impl.h"

#include <stdlib.h>
#include <string.h>

/* 1 when op name ends in suffix. */
static int ends_with(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

static double out_bytes(const wf_graph *g, int op)
{
    return (double)wf_tensor_bytes(&g->tensors[g->ops[op].out[0]]);
}

static double in_bytes(const wf_graph *g, int op)
{
    return (double)wf_tensor_bytes(&g->tensors[g->ops[op].in[0]]);
}

/* A forward collective at op `at` and its backward adjoint (kind_bwd; a
 * count of 0 leaves it out) of the same bytes, both exposed. */
static wf_status pair_ev(wf_cost_layout *l, int at, wf_coll_kind fwd, wf_coll_kind bwd, int with_fwd, int with_bwd,
                         double bytes)
{
    wf_cost_event e;
    memset(&e, 0, sizeof e);
    e.section = WF_COST_SEC_LAYER;
    e.bytes = bytes;
    e.times = 1;
    e.win = WF_COST_WIN_NONE;
    e.need = 3; /* never hidden */
    e.at = at;
    wf_status st = WF_OK;
    if (with_fwd) {
        e.kind = fwd;
        e.bwd = 0;
        st = wf_cost_layout_add_event(l, &e);
    }
    if (st == WF_OK && with_bwd) {
        e.kind = bwd;
        e.bwd = 1;
        st = wf_cost_layout_add_event(l, &e);
    }
    return st;
}

wf_status wf_cost_layout_dap(const wf_cost_ctx *ctx, int dap, wf_cost_layout *out)
{
    const wf_model_config *m = &ctx->model;
    memset(out, 0, sizeof *out);
    if (m->family != WF_FAMILY_ALPHAFOLD || ctx->transformer)
        return wf_errorf(WF_INVAL, "dap=%d: model '%s' is not AlphaFold2-shaped (Dynamic Axial Parallelism shards "
                                   "the Evoformer's MSA and pair)", dap, m->name);
    if (dap < 2)
        return wf_errorf(WF_INVAL, "dap=%d: a DAP layout needs 2 or more devices", dap);
    wf_graph g;
    wf_status st = wf_model_build(m, 1, &g);
    if (st == WF_OK && g.nfwd != ctx->nops)
        st = wf_errorf(WF_INTERNAL, "model '%s': %d forward ops, %d cost records", m->name, g.nfwd, ctx->nops);
    if (st == WF_OK)
        st = wf_cost_layout_init(ctx, dap, out);
    if (st != WF_OK) {
        wf_graph_free(&g);
        return st;
    }
    const double K = (double)dap;
    int first = -1, last = -1;
    for (int i = 0; i < ctx->nops; i++) {
        if (g.ops[i].block < 0)
            continue;
        if (first < 0)
            first = i;
        last = i;
        out->div[i] = K;
        out->repl_div[i] = K;
        out->split_div[i] = K;
        out->mp_grad[i] = out->params[i];
    }
    const wf_coll_kind AG = WF_COLL_ALLGATHER, RS = WF_COLL_REDUCE_SCATTER, A2A = WF_COLL_ALLTOALL;
    for (int i = 0; st == WF_OK && i < ctx->nops; i++) {
        const char *n = g.ops[i].name;
        if (g.ops[i].block < 0)
            continue;
        if (ends_with(n, ".msa_row_attn.bias") || ends_with(n, ".tri_att_start.bias") ||
            ends_with(n, ".tri_att_end.bias") || ends_with(n, ".outer.right_projection") ||
            ends_with(n, ".tri_mul_out.right_projection") || ends_with(n, ".tri_mul_in.left_projection"))
            st = pair_ev(out, i, AG, RS, 1, 1, out_bytes(&g, i));
        else if (ends_with(n, ".msa_col_attn.columns_first") || ends_with(n, ".tri_mul_out.norm_in") ||
                 ends_with(n, ".tri_mul_in.norm_in") || ends_with(n, ".tri_att_start.query_norm") ||
                 ends_with(n, ".tri_att_end.swap"))
            /* tri_mul_out.norm_in: the MSA's way back to rows (its input
             * is the pair; the MSA's bytes are the block input's). */
            st = pair_ev(out, i, A2A, A2A, 1, 1, ends_with(n, ".tri_mul_out.norm_in") ? -1 : in_bytes(&g, i));
    }
    /* The MSA's way back and the pair's last all-to-all (after the
     * transition) take the MSA's and the pair's bytes: the block input's
     * two activations (build.c's checkpoint bytes of the block's first op
     * are exactly them from the second block on; the first block's are
     * the recycled MSA and pair, the same shapes). */
    for (int k = 0; st == WF_OK && k < out->nev; k++)
        if (out->ev[k].bytes < 0) {
            int i = out->ev[k].at, b0 = i;
            while (b0 > 0 && g.ops[b0 - 1].block == g.ops[i].block && g.ops[b0 - 1].layer == g.ops[i].layer)
                b0--;
            double pair = in_bytes(&g, i); /* tri_mul_out.norm_in reads the pair */
            out->ev[k].bytes = ctx->ops[b0].ckpt_bytes - pair;
            /* The pair's all-to-all back to rows at the block's end. */
            int e = i;
            while (e + 1 < ctx->nops && g.ops[e + 1].block == g.ops[i].block && g.ops[e + 1].layer == g.ops[i].layer)
                e++;
            if (out->ev[k].bwd == 0)
                st = pair_ev(out, e, A2A, A2A, 1, 1, pair);
        }
    /* The scatter into the first block (its backward gathers the gradients
     * of the MSA and the pair) and the gather out of the last (its backward
     * slices). */
    if (st == WF_OK && first >= 0)
        st = pair_ev(out, first, AG, AG, 0, 1, ctx->ops[first].ckpt_bytes);
    if (st == WF_OK && last >= 0 && last + 1 < ctx->nops)
        st = pair_ev(out, last, AG, AG, 1, 0, ctx->ops[last + 1].ckpt_bytes);
    wf_graph_free(&g);
    if (st != WF_OK)
        wf_cost_layout_free(out);
    return st;
}
