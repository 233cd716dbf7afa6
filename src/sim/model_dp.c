/* A data-parallel iteration model (wf_dp_model) of a model on a cluster,
 * from the same units the plan simulation uses (profile.c): one "layer" per
 * unit instance (a transformer's embedding, each layer and the head; one op
 * of another model), its forward and backward times at the per-device
 * micro-batch, one gradient per parameter tensor (ready when its unit's
 * backward is done), the optimizer step of the unit's parameters, and
 * collective times over the data-parallel group placed on the cluster
 * (wf_coll_time). This is what the schedule comparisons (bench_schedules)
 * feed to wf_sim_dp_iteration. */
#include "sim/plan-impl.h"

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

wf_status sim_coll_env(const wf_cluster *c, const wf_group *g, double elem_bytes, wf_arena *a, wf_sched_env *env)
{
    memset(env, 0, sizeof *env);
    dp_coll_ctx *cc = wf_arena_alloc(a, sizeof *cc);
    if (!cc)
        return wf_errorf(WF_NOMEM, "out of memory scheduling gradients");
    cc->cluster = *c;
    cc->group = *g;
    env->coll = dp_coll;
    env->coll_ctx = cc;
    env->elem_bytes = elem_bytes;
    return WF_OK;
}

wf_status wf_sim_dp_model_build(const wf_model_config *mc, const wf_cluster *c, int64_t mbs, int64_t dp,
                                wf_arena *a, wf_dp_model *out)
{
    memset(out, 0, sizeof *out);
    if (mbs < 1 || mbs > 1 << 20)
        return wf_errorf(WF_INVAL, "dp model: micro-batch %lld must be in 1..%d", (long long)mbs, 1 << 20);
    if (dp < 1 || dp > wf_cluster_devices(c))
        return wf_errorf(WF_INVAL, "dp model: dp=%lld must be in 1..%lld (devices of %s)", (long long)dp,
                         (long long)wf_cluster_devices(c), c->name);
    wf_plan p;
    wf_plan_default(&p);
    p.dp = (int)dp;
    p.mbs = (int)mbs;
    sim_model sm;
    sim_profile pr;
    wf_status st = sim_model_init(mc, c, &sm);
    if (st)
        return st;
    st = sim_profile_build(&sm, mc, c, &p, NULL, NULL, 1, a, &pr);
    sim_model_free(&sm);
    if (st)
        return st;
    int L = pr.ninst, ng = 0;
    for (int i = 0; i < L; i++)
        ng += pr.unit[pr.inst[i]].ntensors;
    double *fwd = wf_arena_alloc(a, (size_t)(L + 1) * sizeof *fwd);
    double *bwd = wf_arena_alloc(a, (size_t)(L + 1) * sizeof *bwd);
    double *opt = wf_arena_alloc(a, (size_t)(L + 1) * sizeof *opt);
    wf_grad *grads = wf_arena_alloc(a, (size_t)(ng + 1) * sizeof *grads);
    if (!fwd || !bwd || !opt || !grads)
        return wf_errorf(WF_NOMEM, "out of memory building the dp model of %s", mc->name);
    int k = 0;
    for (int i = 0; i < L; i++) {
        const sim_unit *u = &pr.unit[pr.inst[i]];
        fwd[i] = u->fwd_comp + u->fwd_exposed;
        bwd[i] = u->bwd_comp + u->bwd_exposed;
        opt[i] = 0;
        for (int j = 0; j < u->ntensors; j++) {
            if (u->tensor_params[j] <= 0)
                continue;
            opt[i] += u->tensor_params[j] * pr.opt_bytes_per_param / pr.mem_bw_bps;
            grads[k].bytes = u->tensor_params[j] * pr.grad_bytes;
            grads[k].layer = i;
            grads[k].ready_s = 0;
            k++;
        }
    }
    out->nlayers = L;
    out->fwd_s = fwd;
    out->bwd_s = bwd;
    out->opt_s = opt;
    out->ngrads = k;
    out->grads = grads;
    return sim_coll_env(c, &pr.dp_group, pr.grad_bytes, a, &out->env);
}
