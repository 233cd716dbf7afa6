/* The memory levers of an op-level plan, in closed form on the proxy's own
 * parts (ol_eval_parts): full recomputation of the repeated blocks and ZeRO's
 * sharding of the replicated training state. TensorOpt (Cai et al., TPDS
 * 2022, arXiv 2004.10856) trades time for memory through both. The op-level
 * search's frontier (opplan.c, add_levers) prices each plan's variants under
 * them on the one cost model, not on these closed forms, which are the
 * proxy's account of the levers (tests/test_levers.c).
 *
 * Recomputation ("full", as Megatron's per-layer checkpointing): each
 * instance of a repeated block (ops with block >= 0: a transformer layer)
 * keeps only its input activations as its checkpoint; its other saved
 * activations are dropped after the forward and made again by running its
 * forward once more in the backward pass. Per micro-batch in flight the
 * stage then keeps ma - ma_block + ck, plus one instance's activations
 * (ma_peak) while that instance's backward runs; its pass takes tf_rc
 * longer (the blocks' forward compute, as the proxy prices it).
 *
 * ZeRO (Rajbhandari et al., SC'20): a weight stored replicated over mesh
 * axes (B on them) has r = the product of those axes' sizes copies of its
 * state; stage 1 keeps 1/r of the optimizer state per device, stage 2 also
 * of the gradient, stage 3 also of the weight. Stages 1 and 2 reduce-scatter
 * the gradient and all-gather the updated weight in place of the gradient's
 * all-reduce: z12_s, the difference of their prices (about one collective's
 * start-up per weight and axis, the bytes moved being the same); stage 3 all-gathers each weight before its
 * forward and again before its backward: z3_s per pass, each replicated
 * axis's all-gather of the stored weight priced on its own (an upper bound
 * for weights replicated on both axes of a 2-D mesh). */
#include "graph/graph-impl.h"
#include "search/oplevel-impl.h"

#include <stdlib.h>
#include <string.h>

wf_status ol_eval_levers(const ol_problem *p, const int *assign, ol_levers *out)
{
    const wf_graph *g = p->g;
    memset(out, 0, sizeof *out);
    int nt = g->ntensors;
    int *stamp = malloc(sizeof(int) * ((size_t)nt + 1));
    int *choice = malloc(sizeof(int) * ((size_t)p->nf + 1));
    wf_sbp *lay = malloc(sizeof(wf_sbp) * ((size_t)nt + 1));
    if (!stamp || !choice || !lay) {
        free(stamp);
        free(choice);
        free(lay);
        return wf_errorf(WF_NOMEM, "oplevel: out of memory");
    }
    for (int t = 0; t < nt; t++)
        stamp[t] = -1;

    /* Recomputation: per block instance (a run of ops with one block and
     * layer), its forward compute, its saved activations and its input. */
    int inst = -1, cur_block = -1, cur_layer = -1;
    double inst_ma = 0;
    for (int i = p->lo; i < p->hi; i++) {
        const wf_op *o = &g->ops[i];
        if (o->block < 0)
            continue;
        int v = p->var_of_op[i];
        const ol_var *V = &p->var[v];
        int c = assign[v];
        if (o->block != cur_block || o->layer != cur_layer) {
            if (inst >= 0 && inst_ma > out->ma_peak)
                out->ma_peak = inst_ma;
            inst++;
            inst_ma = 0;
            cur_block = o->block;
            cur_layer = o->layer;
        }
        double per = 1.0 / (double)V->mult; /* a tied variable's costs are its instances' sum */
        out->tf_rc += V->tf[c] * per;
        out->ma_block += V->ma[c] * per;
        inst_ma += V->ma[c] * per;
        const wf_sbp_sig *s = &V->sigs[c];
        for (int j = 0; j < o->nin; j++) {
            int x = o->in[j];
            const wf_tensor *X = &g->tensors[x];
            if (X->role == WF_ROLE_PARAM || stamp[x] == inst)
                continue;
            int pr = X->producer;
            if (pr >= 0 && g->ops[pr].block == o->block && g->ops[pr].layer == o->layer)
                continue; /* made inside the instance: recomputed */
            stamp[x] = inst;
            out->ck += (double)wf_tensor_bytes(X) / (double)wf_sbp_split_factor(&p->mesh, &s->in[j]);
        }
    }
    if (inst >= 0 && inst_ma > out->ma_peak)
        out->ma_peak = inst_ma;
    out->layers = inst + 1;

    /* ZeRO: every weight the range reads, in its storage layout. */
    ol_fill_plan(p, assign, choice, NULL, lay);
    for (int t = 0; t < nt; t++)
        stamp[t] = 0;
    for (int i = p->lo; i < p->hi; i++)
        for (int j = 0; j < g->ops[i].nin; j++) {
            int x = g->ops[i].in[j];
            const wf_tensor *w = &g->tensors[x];
            if (w->role != WF_ROLE_PARAM || w->producer >= 0 || stamp[x])
                continue;
            stamp[x] = 1;
            double r = 1;
            for (int a = 0; a < p->mesh.naxes; a++)
                if (lay[x].ax[a] == WF_SBP_B)
                    r *= (double)p->mesh.size[a];
            if (r <= 1)
                continue;
            double nl = (double)wf_tensor_numel(w) / (double)wf_sbp_split_factor(&p->mesh, &lay[x]);
            double wb, gb, ob;
            ol_state_parts(p, w, &wb, &gb, &ob);
            double keep = 1.0 - 1.0 / r;
            out->zsave[1] += nl * ob * keep;
            out->zsave[2] += nl * (ob + gb) * keep;
            out->zsave[3] += nl * (ob + gb + wb) * keep;
            for (int a = 0; a < p->mesh.naxes; a++)
                if (lay[x].ax[a] == WF_SBP_B && p->mesh.size[a] > 1) {
                    out->z3_s += 2.0 * wf_mesh_coll_time(&p->mesh, a, WF_COLL_ALLGATHER, nl * wb);
                    out->z12_s += wf_mesh_coll_time(&p->mesh, a, WF_COLL_REDUCE_SCATTER, nl * gb) +
                                  wf_mesh_coll_time(&p->mesh, a, WF_COLL_ALLGATHER, nl * wb) -
                                  wf_mesh_coll_time(&p->mesh, a, WF_COLL_ALLREDUCE, nl * gb);
                }
        }
    free(stamp);
    free(choice);
    free(lay);
    return WF_OK;
}

/* The parts of a one-stage plan (pp = 1: one micro-batch in flight) under
 * the levers: rc = 1 full recomputation, z the ZeRO stage (rc = z = 0:
 * the plan itself). Returns 0 where a lever saves no memory. */
int ol_lever_parts(const ol_parts *q, const ol_levers *lv, int rc, int z, ol_parts *v, double *rc_s)
{
    *v = *q;
    *rc_s = 0;
    if (rc) {
        double ma = q->ma - lv->ma_block + lv->ck;
        double m = q->mw + ma + lv->ma_peak;
        if (lv->layers < 1 || !(m < q->m))
            return 0;
        v->ma = ma;
        v->m = m;
        v->tn += lv->tf_rc;
        v->t += lv->tf_rc;
        v->tc += lv->tf_rc;
        *rc_s = lv->tf_rc;
    }
    if (z) {
        if (!(lv->zsave[z] > 0))
            return 0;
        v->m -= lv->zsave[z];
        v->mw -= lv->zsave[z];
        double zt = lv->z12_s + (z == 3 ? lv->z3_s : 0);
        v->tn += zt;
        v->t += zt;
    }
    return 1;
}
