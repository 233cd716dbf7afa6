/* `weft train --plan auto` and `--comm auto`: the CLI chooses, the runtime
 * runs what it is given. The runtime includes neither the search nor the
 * simulator (docs/architecture.md); it exports the one table of what it
 * executes (wf_runtime_runs_model_plan) and asks for a data-parallel run's comm
 * schedule through wf_train_config.comm_auto, which is wf_cli_comm_auto.
 *
 * --plan auto: the whole space of plans is searched (wf_search_outer) on
 * the job's cluster (wf_cluster_of_job) for exactly the ranks launched,
 * ranked by the estimate under the runtime's own framework profile (sw=weft),
 * and the fastest plan the runtime executes is taken, in the search's order
 * (time, memory, plan string), so every rank picks the same plan.
 *
 * --comm auto: one data-parallel iteration of the model at the micro-batch
 * is simulated on the job's cluster under each of sched's candidates
 * (wf_comm_candidates, the full sweep: what `weft simulate --comm auto`
 * plays for a data-parallel plan), and the fastest is taken (ties: the
 * earlier candidate). */
#include "cli/cli.h"

#include "weft/cluster.h"
#include "weft/runtime.h"
#include "weft/search.h"
#include "weft/sim.h"

#include <stdio.h>
#include <string.h>

wf_status wf_cli_auto_plan(const wf_train_config *c, char *plan, size_t cap, char *note, size_t note_cap)
{
    const int nranks = wf_train_world_size(c);
    wf_model_config m;
    wf_status st = wf_model_lookup(c->model, &m);
    if (st != WF_OK)
        return st;
    wf_comm_sched cs;
    const int given = c->comm && strcmp(c->comm, "auto") != 0;
    if (given && (st = wf_comm_parse(c->comm, &cs)) != WF_OK)
        return st;
    wf_cluster cl;
    if ((st = wf_cluster_of_job(c->cluster, nranks, &cl)) != WF_OK)
        return st;
    const char *cname = cl.name;
    if (wf_cluster_devices(&cl) < nranks)
        return wf_errorf(WF_INVAL, "--plan auto: cluster %s has %lld devices, the job has %d ranks", cname,
                         (long long)wf_cluster_devices(&cl), nranks);
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    o.devices = nranks;
    o.top_k = 1 << 16; /* every fitting plan, in the search's order */
    o.tp_cross_node = 1;
    o.cp = 1;
    o.sw = WF_SW_WEFT; /* ranked as this runtime runs them (its attention, masks and buffers) */
    wf_search_outer_result r;
    memset(&r, 0, sizeof r);
    st = wf_search_outer(&m, &cl, c->batch, &o, &r);
    int pick = -1;
    for (int i = 0; st == WF_OK && i < r.ntop && pick < 0; i++)
        if (wf_runtime_runs_model_plan(&r.top[i].plan, &m, given ? &cs : NULL))
            pick = i;
    if (st != WF_OK)
        st = wf_error_prefix(st, "--plan auto on %d rank%s of cluster %s", nranks, nranks == 1 ? "" : "s", cname);
    else if (pick < 0)
        st = wf_errorf(WF_INVAL, "--plan auto: none of the %d plans that fit %d ranks of cluster %s is one the "
                       "runtime executes", r.ntop, nranks, cname);
    if (st != WF_OK) {
        wf_search_outer_result_free(&r);
        if (c->batch % nranks == 0)
            return st;
        char why[256];
        snprintf(why, sizeof why, "%s", wf_last_error());
        return wf_errorf(st, "%s (batch %lld is not divisible by %d ranks for data parallelism)", why,
                         (long long)c->batch, nranks);
    }
    wf_plan p = r.top[pick].plan;
    char ps[512];
    wf_plan_format(&p, ps, sizeof ps);
    snprintf(note, note_cap, "auto: %s, rank %d of %d fitting plans on %s (%.3g ms estimated)", ps, pick + 1,
             r.ntop, cname, 1e3 * r.top[pick].est.iteration_time_s);
    wf_search_outer_result_free(&r);
    wf_plan_format(&p, plan, cap);
    return WF_OK;
}

wf_status wf_cli_comm_auto(const wf_model_config *m, const char *cluster, int64_t mbs, int nranks,
                           wf_comm_sched *out, char *note, size_t cap)
{
    wf_cluster cl;
    wf_status st = wf_cluster_of_job(cluster, nranks, &cl);
    if (st != WF_OK)
        return st;
    wf_arena a;
    wf_arena_init(&a, 1 << 16);
    wf_dp_model dm;
    wf_dp_result r;
    st = wf_sim_dp_model_build(m, &cl, mbs, nranks, &a, &dm);
    if (st == WF_OK) {
        const wf_comm_sched aut = {WF_COMM_AUTO, 0};
        st = wf_sim_dp_iteration(&dm, &aut, NULL, &r);
    }
    wf_arena_free(&a);
    if (st != WF_OK)
        return wf_error_prefix(st, "--comm auto: simulating on cluster %s", cl.name);
    *out = r.sched;
    snprintf(note, cap, "auto: the fastest of %d schedules simulated on cluster %s (%.3g ms)", r.candidates,
             cl.name, 1e3 * r.iteration_s);
    return WF_OK;
}
