/* `weft train --plan auto`: the runtime runs what the planner finds. The
 * whole space of plans is searched on the cluster the user names (or the
 * local preset) for exactly the ranks launched, ranked by the estimate, and
 * the fastest plan the runtime executes is taken, each plan costed under the
 * runtime's own framework profile (sw=weft). The trainer passes its own
 * check as `runnable`, so auto never picks a plan that train would refuse. */
#include "runtime/autoplan-impl.h"

#include "weft/cluster.h"
#include "weft/search.h"

#include <stdio.h>
#include <string.h>

/* The cluster the plan is searched on: the spec, or the local preset widened
 * to one device per rank when the job has more ranks than it has devices
 * (ranks then share cores, as the trainer's comm "auto" assumes too). */
static wf_status auto_cluster(const char *spec, int nranks, wf_cluster *cl, char *name, size_t cap)
{
    const char *s = spec ? spec : "local";
    wf_status st = wf_cluster_lookup(s, cl);
    if (st != WF_OK)
        return st;
    snprintf(name, cap, "%s", s);
    if (wf_cluster_devices(cl) >= nranks)
        return WF_OK;
    if (spec)
        return wf_errorf(WF_INVAL, "--plan auto: cluster %s has %lld devices, the job has %d ranks", spec,
                         (long long)wf_cluster_devices(cl), nranks);
    snprintf(name, cap, "local:devices_per_node=%d", nranks);
    return wf_cluster_lookup(name, cl);
}

wf_status wf_runtime_auto_plan(const wf_model_config *m, const char *spec, int nranks, int64_t batch,
                               wf_runnable_fn runnable, void *user, wf_plan *out, char *note, size_t cap)
{
    wf_cluster cl;
    char cname[96];
    wf_status st = auto_cluster(spec, nranks, &cl, cname, sizeof cname);
    if (st != WF_OK)
        return st;
    wf_outer_opts o;
    wf_outer_opts_default(&o);
    o.devices = nranks;
    o.top_k = 1 << 16; /* every fitting plan, in the search's order */
    o.tp_cross_node = 1;
    o.cp = 1;
    o.sw = WF_SW_WEFT; /* ranked as this runtime runs them (its attention, masks and buffers) */
    wf_outer_result r;
    memset(&r, 0, sizeof r);
    st = wf_outer_search(m, &cl, batch, &o, &r);
    if (st != WF_OK) {
        wf_outer_result_free(&r);
        return wf_error_prefix(st, "--plan auto on %d rank%s of cluster %s", nranks, nranks == 1 ? "" : "s", cname);
    }
    int pick = -1;
    for (int i = 0; i < r.ntop && pick < 0; i++)
        if (runnable(&r.top[i].plan, user))
            pick = i;
    if (pick < 0) {
        int n = r.ntop;
        wf_outer_result_free(&r);
        return wf_errorf(WF_INVAL, "--plan auto: none of the %d plans that fit %d ranks of cluster %s is one the "
                         "runtime executes", n, nranks, cname);
    }
    *out = r.top[pick].plan;
    char ps[512];
    wf_plan_format(out, ps, sizeof ps);
    snprintf(note, cap, "auto: %s, rank %d of %d fitting plans on %s (%.3g ms estimated)", ps, pick + 1, r.ntop,
             cname, 1e3 * r.top[pick].est.iteration_time_s);
    wf_outer_result_free(&r);
    return WF_OK;
}
