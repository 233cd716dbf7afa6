/* weft estimate: predicts the iteration time, throughput, MFU and memory per
 * device of one plan for a model on a cluster (the cost model of
 * docs/cost-model.md). The human table goes to stdout; --json prints one
 * object on stdout instead (the table then goes to stderr). An invalid plan is a user error (exit 1) whose one-line
 * message names the values that disagree. */
#include "cli/cli.h"
#include "weft/cost.h"
#include "weft/layout.h"
#include "weft/search.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static void print_table(FILE *f, const wf_cli_plan_input *in, const wf_estimate *e, const char *framework)
{
    const wf_breakdown *b = &e->breakdown;
    wf_cli_print_plan_header(f, in, e->devices, e->micro_batches);
    fprintf(f, "  framework          %s\n", framework);
    char s1[32], s2[32], s3[32];
#define SIG(v, b) wf_cli_sig((v), (b), sizeof(b))
    fprintf(f, "  iteration time     %12s s\n", SIG(e->iteration_time_s, s1));
    fprintf(f, "  throughput         %12s samples/s\n", SIG(e->samples_per_s, s1));
    /* In users' units, for models that read tokens. */
    double tps = wf_cli_tokens_per_s_per_device(&in->mc, e);
    if (tps > 0)
        fprintf(f, "  tokens             %12s per s per device, %s days per trillion tokens\n", SIG(tps, s1),
                SIG(1e12 / (tps * (double)e->devices) / 86400.0, s2));
    fprintf(f, "  model FLOPs        %12.4g per iteration\n", e->model_flops_per_iteration);
    fprintf(f, "  per device         %12s TFLOP/s (MFU %.1f%%)\n", SIG(e->tflops_per_device, s1), 100 * e->mfu);
    /* The parts that add up to the iteration, then what exposed_comm sums
     * (a subtotal: tp and pp communication and the exposed part of dp_comm,
     * which itself counts every data-parallel collective, hidden or not). */
    double t = e->iteration_time_s;
    fprintf(f, "  breakdown (s): the parts add up to the iteration time\n");
    const struct {
        const char *name;
        double v;
    } rows[] = {
        {"compute", b->compute}, {"recompute", b->recompute}, {"bubble", b->bubble},
        {"optimizer", b->optimizer}, {"exposed_comm", b->exposed_comm},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        fprintf(f, "    %-14s %12s  %5.1f%%%s\n", rows[i].name, SIG(rows[i].v, s1), t > 0 ? 100 * rows[i].v / t : 0.0,
                i == 4 ? "  subtotal of:" : "");
    fprintf(f, "      %-12s %12s  %5.1f%%\n", "tp_comm", SIG(b->tp_comm, s1), t > 0 ? 100 * b->tp_comm / t : 0.0);
    if (b->ep_comm > 0)
        fprintf(f, "        %-10s %12s  %5.1f%%  (of tp_comm: expert all-to-all)\n", "ep_comm", SIG(b->ep_comm, s1),
                t > 0 ? 100 * b->ep_comm / t : 0.0);
    fprintf(f, "      %-12s %12s  %5.1f%%\n", "pp_comm", SIG(b->pp_comm, s1), t > 0 ? 100 * b->pp_comm / t : 0.0);
    double dp_exposed = b->exposed_comm - b->tp_comm - b->pp_comm;
    fprintf(f, "      %-12s %12s  %5.1f%%  (of dp_comm %s s; the rest is hidden behind the backward)\n", "dp_exposed",
            SIG(dp_exposed > 0 ? dp_exposed : 0.0, s1), t > 0 && dp_exposed > 0 ? 100 * dp_exposed / t : 0.0,
            SIG(b->dp_comm, s2));
    char s4[32];
    fprintf(f, "  memory per device  %12s GiB (%s): weights+grads+optimizer %s, activations %s, buffers %s\n",
            SIG(e->memory_per_device_bytes / GIB, s1), e->fits ? "fits" : "DOES NOT FIT",
            SIG(e->mem_weights_bytes / GIB, s2), SIG(e->mem_activation_bytes / GIB, s3),
            SIG(e->mem_buffer_bytes / GIB, s4));
#undef SIG
}

wf_status wf_cmd_estimate(int argc, char **argv)
{
    wf_cli_plan_input in;
    memset(&in, 0, sizeof in);
    int json = 0, help = 0, npos = 0;
    const wf_opt opts[] = {
        WF_CLI_OPT_MODEL(&in.model),
        WF_CLI_OPT_CLUSTER(&in.cluster),
        WF_CLI_OPT_BATCH(&in.batch),
        WF_CLI_OPT_PLAN(&in.plan),
        WF_CLI_OPT_JSON(&json),
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, NULL, 0, &npos, &help);
    if (help) {
        wf_opts_usage(stdout, "weft estimate",
                      "Predicts the iteration time and the memory per device of one plan.", opts);
        return WF_OK;
    }
    if (st != WF_OK)
        return st;
    /* An op-level plan file (per-op SBP layouts) is resolved once
     * (wf_layout_resolve: its layouts parsed and checked, the descriptor
     * they give) and costed by the one cost model (wf_estimate_layouts: its
     * layouts composed as a whole-model plan's). Layouts it does not take
     * yet (a non-transformer split by more than the batch, untied layers)
     * are costed by the op-level search's model, and the output says so and
     * why. */
    {
        /* A per-layer plan of a mixture of experts: priced layer by layer. */
        wf_status pst = WF_OK;
        if (wf_cli_perlayer_try(in.plan, in.model, in.cluster, in.batch, json, 0, &pst))
            return pst;
    }
    const int oplevel = in.plan && wf_plan_is_oplevel_file(in.plan);
    char ol_text[256] = "";
    if (oplevel) {
        if ((st = wf_cli_load_model_cluster(in.model, in.cluster, in.batch, &in.mc, &in.c)) != WF_OK)
            return st;
    } else if ((st = wf_cli_load_plan_input(&in, "estimating")) != WF_OK) {
        return st;
    }

    wf_cost_ctx *ctx = NULL;
    if ((st = wf_cost_ctx_create(&in.mc, &in.c, &ctx)) != WF_OK)
        return st;
    wf_estimate e;
    char framework[320];
    if (oplevel) {
        wf_layout_plan lp;
        st = wf_layout_resolve(in.plan, &in.mc, &in.c, in.batch, ctx, &lp);
        if (st == WF_OK && !lp.has_cost)
            st = wf_errorf(WF_INTERNAL, "%s: resolved with no layout descriptor", in.plan);
        if (st == WF_OK) {
            wf_layout_format(&lp.ol, ol_text, sizeof ol_text);
            in.p = lp.plan;
            st = wf_estimate_layouts(ctx, &lp.plan, &lp.cost, in.batch, &e);
        }
        wf_layout_plan_free(&lp);
        if (st == WF_INVAL) {
            char why[512];
            snprintf(why, sizeof why, "%s", wf_last_error());
            wf_cost_ctx_free(ctx);
            wf_clear_error();
            wf_log(WF_LOG_WARN, "%s: %s; costed by the op-level search's model instead", in.plan, why);
            return wf_cli_verify_oplevel(in.model, in.cluster, in.batch, in.plan, 0, json);
        }
        if (st == WF_OK)
            wf_plan_format(&in.p, in.canon, sizeof in.canon);
    } else {
        st = wf_estimate_plan(ctx, &in.p, in.batch, &e);
    }
    wf_cost_profile_line(ctx, &in.p, framework, sizeof framework);
    wf_cost_ctx_free(ctx);
    if (st != WF_OK)
        return st;

    print_table(json ? stderr : stdout, &in, &e, framework);
    if (ol_text[0])
        fprintf(json ? stderr : stdout, "  op-level plan %s: its layouts costed by the one cost model (as the plan "
                                        "above)\n", ol_text);
    if (!json)
        return WF_OK;
    cJSON *j = wf_estimate_to_json(&e);
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory");
    wf_cli_add_plan_fields(j, &in);
    if (ol_text[0])
        cJSON_AddStringToObject(j, "op_level_plan", ol_text);
    cJSON_AddStringToObject(j, "framework", framework);
    double tps = wf_cli_tokens_per_s_per_device(&in.mc, &e);
    if (tps > 0) {
        cJSON_AddNumberToObject(j, "tokens_per_s_per_device", tps);
        cJSON_AddNumberToObject(j, "days_per_trillion_tokens", 1e12 / (tps * (double)e.devices) / 86400.0);
    }
    st = wf_cli_print_json(j);
    cJSON_Delete(j);
    return st;
}
