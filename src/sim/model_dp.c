/* A data-parallel iteration model (wf_dp_model) of a model on a cluster: one
 * "layer" per forward op of the model's graph at the per-device micro-batch,
 * its forward and backward times from the cost model (wf_compute_time), one
 * gradient per parameter tensor (ready when the backward of the first op that
 * reads it is done; cluster.grad_bytes per element), the optimizer step of
 * each op's parameters (memory-bound Adam), and collective times over the
 * data-parallel group placed on the cluster (wf_coll_time). This is what the
 * schedule comparisons (bench_schedules, `weft simulate` on data-parallel
 * plans) feed to wf_sim_dp_iteration. */
#include "weft/sim.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    wf_cluster cluster;
    wf_group group;
} dp_coll_ctx;

static double dp_coll(void *ctx, wf_coll_kind kind, double bytes)
{
    const dp_coll_ctx *c = ctx;
    return wf_coll_time(&c->cluster, kind, &c->group, bytes);
}

/* Adam on fp32 master weights reads the weight, the gradient and both
 * moments and writes the weight and the moments (7 x 4 bytes per
 * parameter), plus the fp16 copy of the weight when the model is fp16. */
static double adam_bytes_per_param(wf_dtype dtype)
{
    return 28.0 + (dtype == WF_DTYPE_FP32 ? 0.0 : (double)wf_dtype_bytes(dtype));
}

wf_status wf_sim_dp_model_build(const wf_model_config *mc, const wf_cluster *c, int64_t mbs, int64_t dp,
                                wf_arena *a, wf_dp_model *out)
{
    memset(out, 0, sizeof *out);
    if (mbs < 1)
        return wf_errorf(WF_INVAL, "dp model: micro-batch %lld must be >= 1", (long long)mbs);
    if (dp < 1 || dp > wf_cluster_devices(c))
        return wf_errorf(WF_INVAL, "dp model: dp=%lld must be in 1..%lld (devices of %s)", (long long)dp,
                         (long long)wf_cluster_devices(c), c->name);
    wf_graph g;
    wf_status st = wf_model_build(mc, mbs, &g);
    if (st) {
        wf_graph_free(&g);
        return st;
    }
    int n = g.nfwd;
    double *fwd = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *fwd);
    double *bwd = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *bwd);
    double *opt = wf_arena_alloc(a, (size_t)(n + 1) * sizeof *opt);
    int *first_use = malloc((size_t)(g.ntensors + 1) * sizeof *first_use);
    dp_coll_ctx *cc = wf_arena_alloc(a, sizeof *cc);
    if (!fwd || !bwd || !opt || !first_use || !cc) {
        free(first_use);
        wf_graph_free(&g);
        return wf_errorf(WF_NOMEM, "out of memory building the dp model of %s", mc->name);
    }
    for (int t = 0; t < g.ntensors; t++)
        first_use[t] = -1;
    double mem_bps = c->dev.mem_bw_bps * (c->dev.mem_eff > 0 ? c->dev.mem_eff : 1.0);
    double gb = c->grad_bytes > 0 ? c->grad_bytes : 4.0;
    double adam = adam_bytes_per_param(mc->dtype);
    int ngrads = 0;
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g.ops[i];
        wf_op_cost oc;
        wf_op_cost_of(&g, i, &oc);
        int mx = wf_op_is_matrix(o->kind);
        fwd[i] = wf_compute_time(&c->dev, mx, mc->dtype, oc.fwd_flops, oc.fwd_bytes);
        bwd[i] = wf_compute_time(&c->dev, mx, mc->dtype, oc.bwd_in_flops + oc.bwd_w_flops, oc.bwd_bytes);
        for (int j = 0; j < o->nin; j++) {
            int p = o->in[j];
            if (g.tensors[p].role == WF_ROLE_PARAM && first_use[p] < 0) {
                first_use[p] = i;
                ngrads++;
                opt[i] += (double)wf_tensor_numel(&g.tensors[p]) * adam / mem_bps;
            }
        }
    }
    wf_grad *grads = wf_arena_alloc(a, (size_t)(ngrads + 1) * sizeof *grads);
    if (!grads) {
        free(first_use);
        wf_graph_free(&g);
        return wf_errorf(WF_NOMEM, "out of memory building the dp model of %s", mc->name);
    }
    int k = 0;
    for (int t = 0; t < g.ntensors; t++) {
        if (first_use[t] < 0)
            continue;
        grads[k].bytes = (double)wf_tensor_numel(&g.tensors[t]) * gb;
        grads[k].layer = first_use[t];
        grads[k].ready_s = 0;
        k++;
    }
    free(first_use);
    wf_graph_free(&g);
    cc->cluster = *c;
    cc->group = wf_group_place(c, dp, 1);
    out->nlayers = n;
    out->fwd_s = fwd;
    out->bwd_s = bwd;
    out->opt_s = opt;
    out->ngrads = ngrads;
    out->grads = grads;
    out->env.coll = dp_coll;
    out->env.coll_ctx = cc;
    out->env.elem_bytes = gb;
    return WF_OK;
}
