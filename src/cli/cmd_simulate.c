/* weft simulate: plays one training iteration of a plan out event by event
 * (docs/simulator.md): iteration time, the per-stage breakdown (compute,
 * exposed communication, bubble, idle), peak memory, the data-parallel comm
 * schedule played (--comm overrides the plan's; auto chooses by simulation),
 * with --fuse auto the operator fusions chosen jointly with the schedule's
 * tensor fusion (DisCo) and their gain, and with --trace a Chrome trace-event file that opens in Perfetto. The
 * human table goes to stdout; --json prints one object on stdout instead (the
 * table then goes to stderr). */
#include "cli/cli.h"
#include "weft/layout.h"
#include "weft/search.h"
#include "weft/sim.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static void print_table(FILE *f, const wf_cli_plan_input *in, const wf_sim_plan_result *r, const char *framework)
{
    static const char *const comm_names[] = {
#define WF_X(e, name) name,
        WF_COMM_LIST(WF_X)
#undef WF_X
    };
    wf_cli_print_plan_header(f, in, r->devices, r->micro_batches);
    if (framework[0])
        fprintf(f, "  framework          %s\n", framework);
    char s1[32], s2[32];
    fprintf(f, "  iteration time     %12s s (simulated: %lld tasks%s, %s s)\n",
            wf_cli_sig(r->iteration_time_s, s1, sizeof s1), (long long)r->tasks, r->coarse ? ", coarse" : "",
            wf_cli_sig(r->wall_s, s2, sizeof s2));
    fprintf(f, "  throughput         %12s samples/s\n", wf_cli_sig(r->samples_per_s, s1, sizeof s1));
    fprintf(f, "  peak memory        %12s GiB per device (%s)\n", wf_cli_sig(r->peak_memory_bytes / GIB, s1, sizeof s1),
            r->fits ? "fits" : "DOES NOT FIT");
    fprintf(f, "  dp comm schedule   %s", comm_names[r->comm.kind]);
    if (r->comm.threshold_bytes == WF_SCHED_UNFUSED_BYTES)
        fprintf(f, " (no tensor fusion)");
    else if (r->comm.threshold_bytes > 0)
        fprintf(f, " (threshold %.3g MiB)", r->comm.threshold_bytes / 1048576.0);
    if (r->candidates > 1)
        fprintf(f, ", chosen among %d", r->candidates);
    fprintf(f, ", %d collectives\n", r->dp_collectives);
    if (r->fusion_candidates > 0) {
        fprintf(f, "  operator fusion    %d of %d candidates fused (%d plans simulated): %.4f s -> %.4f s (%+.2f%%)\n",
                r->fusions, r->fusion_candidates, r->fusion_evals, r->unfused_time_s, r->iteration_time_s,
                100 * (r->unfused_time_s / r->iteration_time_s - 1));
        if (r->fused[0])
            fprintf(f, "    %s\n", r->fused);
        fprintf(f, "  full-overlap ideal %12.4g s (every gradient collective hidden; the result is %.1f%% above)\n",
                r->ideal_time_s, 100 * (r->iteration_time_s / r->ideal_time_s - 1));
    }
    fprintf(f, "  %-6s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "stage", "compute", "recomp", "tp_exp", "pp",
            "dp_all", "dp_exp", "optim", "bubble", "mem GiB");
    for (int s = 0; s < r->nstages; s++) {
        const wf_sim_stage_result *x = &r->stage[s];
        fprintf(f, "  %-6d %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.2f%s\n", s, x->bd.compute,
                x->bd.recompute, x->bd.tp_comm, x->bd.pp_comm, x->bd.dp_comm, x->dp_exposed_s, x->bd.optimizer,
                x->bd.bubble, x->peak_memory_bytes / GIB, s == r->critical_stage ? "  (critical)" : "");
    }
}

static wf_status load_oplevel(wf_cli_plan_input *in, wf_cost_layout *lay, char *text, size_t cap);
static wf_status simulate(const wf_cli_plan_input *pin, const wf_cost_layout *lay, const char *comm, const char *trace,
                          const char *detail, const char *fuse, const char *plot, const char *csv, int json,
                          const char *ol_text);

wf_status wf_cmd_simulate(int argc, char **argv)
{
    wf_cli_plan_input in;
    memset(&in, 0, sizeof in);
    const char *comm = NULL, *trace = NULL, *detail = NULL, *fuse = NULL, *plot = NULL, *csv = NULL;
    int json = 0, help = 0, npos = 0;
    const wf_opt opts[] = {
        WF_CLI_OPT_MODEL(&in.model),
        WF_CLI_OPT_CLUSTER(&in.cluster),
        WF_CLI_OPT_BATCH(&in.batch),
        WF_CLI_OPT_PLAN(&in.plan),
        {"comm", 0, WF_OPT_STR, &comm, "S", "data-parallel schedule: wfbp, ddp[:MiB], horovod[:MiB], bytescheduler, mgwfbp, dear[:MiB], auto (overrides the plan's)", 0},
        {"trace", 0, WF_OPT_STR, &trace, "FILE", "write a Chrome trace-event JSON file (Perfetto, chrome://tracing)", 0},
        {"plot", 0, WF_OPT_STR, &plot, "FILE", "draw the iteration's timeline as SVG (streams per stage, compute and communication, the bubble)", 0},
        {"csv", 0, WF_OPT_STR, &csv, "FILE", "the timeline's tasks as CSV", 0},
        {"fuse", 0, WF_OPT_STR, &fuse, "F", "operator fusion: none (default), or auto (chosen jointly with the comm schedule's tensor fusion by simulation)", 0},
        {"detail", 0, WF_OPT_STR, &detail, "D", "task graph detail: auto (default), fine (per layer step), coarse (per micro-batch)", 0},
        WF_CLI_OPT_JSON(&json),
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, NULL, 0, &npos, &help);
    if (help) {
        wf_opts_usage(stdout, "weft simulate",
                      "Plays one training iteration of a plan out event by event.", opts);
        return WF_OK;
    }
    if (st == WF_OK && trace)
        st = wf_file_check_output(trace, "--trace");
    if (st == WF_OK && plot)
        st = wf_file_check_output(plot, "--plot");
    if (st == WF_OK && csv)
        st = wf_file_check_output(csv, "--csv");
    if (st != WF_OK)
        return st;
    /* An op-level plan file is played from its layouts (wf_sim_layouts: the
     * task graph of the descriptor its SBP signatures give, as `weft
     * estimate` costs it), whatever its layouts, when the one cost model
     * takes them; a whole-model plan plays Megatron's. */
    {
        /* A per-layer plan of a mixture of experts: priced layer by layer. */
        wf_status pst = WF_OK;
        if (wf_cli_perlayer_try(in.plan, in.model, in.cluster, in.batch, json, 1, &pst))
            return pst;
    }
    wf_cost_layout lay;
    memset(&lay, 0, sizeof lay);
    char ol_text[256] = "";
    if (in.plan && wf_plan_is_oplevel_file(in.plan))
        st = load_oplevel(&in, &lay, ol_text, sizeof ol_text);
    else
        st = wf_cli_load_plan_input(&in, "simulating");
    if (st == WF_OK)
        st = simulate(&in, ol_text[0] ? &lay : NULL, comm, trace, detail, fuse, plot, csv, json, ol_text);
    wf_cost_layout_free(&lay);
    return st;
}

/* Reads op-level plan file in->plan: its layouts into *lay, the plan its
 * keys and layouts compose into in->p. */
static wf_status load_oplevel(wf_cli_plan_input *in, wf_cost_layout *lay, char *text, size_t cap)
{
    wf_layout_plan lp;
    memset(&lp, 0, sizeof lp);
    wf_layout_init(&lp.ol);
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cli_load_model_cluster(in->model, in->cluster, in->batch, &in->mc, &in->c);
    if (st == WF_OK)
        st = wf_cost_ctx_create(&in->mc, &in->c, &ctx);
    if (st == WF_OK) {
        /* Resolved once (wf_layout_resolve): its layouts' descriptor goes to the simulator. */
        st = wf_layout_resolve(in->plan, &in->mc, &in->c, in->batch, ctx, &lp);
        if (st == WF_OK && !lp.has_cost)
            st = wf_errorf(WF_INTERNAL, "%s: resolved with no layout descriptor", in->plan);
        if (st == WF_OK) {
            wf_layout_format(&lp.ol, text, cap);
            in->p = lp.plan;
            *lay = lp.cost;
            lp.has_cost = 0; /* now the caller's */
        }
        if (st == WF_INVAL) {
            char why[512];
            snprintf(why, sizeof why, "%s", wf_last_error());
            st = wf_errorf(WF_INVAL, "%s: the simulator plays the layouts the one cost model takes: %s", in->plan, why);
        }
    }
    if (st == WF_OK)
        wf_plan_format(&in->p, in->canon, sizeof in->canon);
    wf_cost_ctx_free(ctx);
    wf_layout_plan_free(&lp);
    return st;
}

static wf_status simulate(const wf_cli_plan_input *pin, const wf_cost_layout *lay, const char *comm, const char *trace,
                          const char *detail, const char *fuse, const char *plot, const char *csv, int json,
                          const char *ol_text)
{
    wf_cli_plan_input in = *pin;
    wf_status st = WF_OK;
    wf_sim_plan_opts so = {.detail = 0, .trace_path = trace, .fuse = 0, .fuse_budget = 0};
    if (fuse) {
        if (strcmp(fuse, "auto") == 0)
            so.fuse = 1;
        else if (strcmp(fuse, "none") != 0)
            return wf_errorf(WF_INVAL, "--fuse=%s: expected none or auto", fuse);
    }
    if (detail) {
        if (strcmp(detail, "auto") == 0)
            so.detail = 0;
        else if (strcmp(detail, "fine") == 0)
            so.detail = 1;
        else if (strcmp(detail, "coarse") == 0)
            so.detail = 2;
        else
            return wf_errorf(WF_INVAL, "--detail=%s: expected auto, fine or coarse", detail);
    }
    if (comm && (st = wf_comm_parse(comm, &in.p.comm)) != WF_OK)
        return st;
    wf_plan_format(&in.p, in.canon, sizeof in.canon);

    /* The pictures are drawn from the simulator's trace: a temporary one when
     * --trace is not asked for. */
    char tmp_trace[64] = "";
    if ((plot || csv) && !trace) {
        snprintf(tmp_trace, sizeof tmp_trace, "/tmp/weft-timeline-XXXXXX");
        int fd = mkstemp(tmp_trace);
        if (fd < 0)
            return wf_errorf(WF_IO, "cannot create a temporary trace file in /tmp");
        close(fd);
        so.trace_path = tmp_trace;
    }
    wf_sim_plan_result r;
    st = lay ? wf_sim_layouts(&in.mc, &in.c, &in.p, lay, in.batch, &so, &r)
             : wf_sim_plan(&in.mc, &in.c, &in.p, in.batch, &so, &r);
    if (st == WF_OK && (plot || csv)) {
        char title[1024];
        snprintf(title, sizeof title, "%s on %s, batch %lld: %.4g s per iteration\n%s", in.mc.name, in.c.name,
                 (long long)in.batch, r.iteration_time_s, in.canon);
        st = wf_plot_timeline(so.trace_path, plot, csv, title);
        if (st == WF_OK && plot)
            fprintf(stderr, "wrote %s\n", plot);
        if (st == WF_OK && csv)
            fprintf(stderr, "wrote %s\n", csv);
    }
    if (tmp_trace[0])
        unlink(tmp_trace);
    if (st != WF_OK)
        return st;
    /* The framework profile the plan ran under, as `weft estimate` names it. */
    char framework[320] = "";
    wf_cost_ctx *ctx = NULL;
    if (wf_cost_ctx_create(&in.mc, &in.c, &ctx) == WF_OK)
        wf_cost_profile_line(ctx, &in.p, framework, sizeof framework);
    wf_cost_ctx_free(ctx);
    print_table(json ? stderr : stdout, &in, &r, framework);
    if (lay)
        fprintf(json ? stderr : stdout, "  op-level plan %s: played from its layouts (the task graph of its SBP "
                                        "signatures, as the plan above)\n", ol_text);
    if (trace)
        fprintf(stderr, "trace written to %s\n", trace);
    if (!json)
        return WF_OK;
    cJSON *j = wf_sim_plan_to_json(&r);
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory");
    wf_cli_add_plan_fields(j, &in);
    if (framework[0])
        cJSON_AddStringToObject(j, "framework", framework);
    if (lay)
        cJSON_AddStringToObject(j, "op_level_plan", ol_text);
    if (trace)
        cJSON_AddStringToObject(j, "trace", trace);
    st = wf_cli_print_json(j);
    cJSON_Delete(j);
    return st;
}
