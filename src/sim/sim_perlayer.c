/* A per-layer plan of a mixture of experts simulated (sim.h,
 * wf_sim_perlayer): the composition its price is (src/layout/perlayer.c),
 * each part played by the simulator -- the expert plan's iteration
 * (wf_sim_plan, which plays the descriptor the one cost model prices that
 * plan's lowering with), plus the dense transformer's iterations at L and
 * L - dense_layers layers under the dense layers' plan, less the same under
 * the expert plan's dense layouts, plus the boxing where the layer layout
 * changes (the collective model's times, as the estimate charges them). */
#include "weft/layout.h"
#include "weft/sim.h"

#include <stdlib.h>
#include <string.h>

/* One simulated iteration of plan p of model d: time and peak memory. */
static wf_status sim_one(const wf_model_config *d, const wf_cluster *c, const wf_plan *p, int64_t batch, double *t,
                         double *mem)
{
    wf_sim_plan_opts so;
    memset(&so, 0, sizeof so);
    wf_sim_plan_result *r = calloc(1, sizeof *r);
    if (!r)
        return wf_errorf(WF_NOMEM, "out of memory simulating a per-layer plan");
    wf_status st = wf_sim_plan(d, c, p, batch, &so, r);
    if (st == WF_OK) {
        *t = r->iteration_time_s;
        *mem = r->peak_memory_bytes;
    }
    free(r);
    return st;
}

wf_status wf_sim_perlayer(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                                 const wf_layout_perlayer *pl, double *iteration_time_s, double *peak_memory_bytes)
{
    double t = 0, mem = 0;
    wf_status st = sim_one(m, c, &pl->moe, batch, &t, &mem);
    if (st != WF_OK)
        return st;
    const int64_t layers[2] = {m->layers, m->layers - pl->dense_layers};
    const wf_plan *plans[2] = {&pl->dense, &pl->moe};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++) {
            wf_model_config d = wf_layout_perlayer_dense_model(m, layers[j]);
            wf_plan p = wf_layout_perlayer_dense_plan(m, plans[k], layers[j]);
            double tt = 0, mm = 0;
            if ((st = sim_one(&d, c, &p, batch, &tt, &mm)) != WF_OK)
                return st;
            const double s = (k == 0 ? 1.0 : -1.0) * (j == 0 ? 1.0 : -1.0);
            t += s * tt;
            mem += s * mm;
        }
    int64_t per = (int64_t)pl->moe.dp * pl->moe.mbs;
    const int64_t mbs_count = per > 0 ? batch / per : 1;
    const double fwd_again = pl->moe.recompute == WF_RECOMPUTE_FULL ? 2.0 : 1.0;
    t += (double)mbs_count * (fwd_again * pl->switch_fwd_s + pl->switch_bwd_s);
    *iteration_time_s = t;
    *peak_memory_bytes = mem;
    return WF_OK;
}

