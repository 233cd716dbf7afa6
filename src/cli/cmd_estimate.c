/* weft estimate: predicts the iteration time, throughput, MFU and memory per
 * device of one plan for a model on a cluster (the cost model of
 * docs/cost-model.md). The human table goes to stderr; --json prints one
 * object on stdout. An invalid plan is a user error (exit 1) whose one-line
 * message names the values that disagree. */
#include "cli/cli.h"
#include "weft/cost.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static void print_table(FILE *f, const char *model, const char *cluster, int64_t batch,
                        const char *plan, const wf_estimate *e)
{
    const wf_breakdown *b = &e->breakdown;
    fprintf(f, "model %s on %s, batch %lld\nplan %s (%lld devices, %lld micro-batches per pipeline)\n",
            model, cluster, (long long)batch, plan, (long long)e->devices, (long long)e->micro_batches);
    fprintf(f, "  iteration time     %12.4f s\n", e->iteration_time_s);
    fprintf(f, "  throughput         %12.2f samples/s\n", e->samples_per_s);
    fprintf(f, "  model FLOPs        %12.4g per iteration\n", e->model_flops_per_iteration);
    fprintf(f, "  per device         %12.1f TFLOP/s (MFU %.1f%%)\n", e->tflops_per_device, 100 * e->mfu);
    fprintf(f, "  breakdown (s):\n");
    const struct {
        const char *name;
        double v;
    } rows[] = {
        {"compute", b->compute},   {"recompute", b->recompute},       {"tp_comm", b->tp_comm},
        {"pp_comm", b->pp_comm},   {"bubble", b->bubble},             {"dp_comm", b->dp_comm},
        {"optimizer", b->optimizer}, {"exposed_comm", b->exposed_comm},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        fprintf(f, "    %-14s %12.4f  %5.1f%%\n", rows[i].name, rows[i].v,
                100 * rows[i].v / e->iteration_time_s);
    fprintf(f, "  memory per device  %12.2f GiB (%s): weights+grads+optimizer %.2f, activations %.2f, "
               "buffers %.2f\n",
            e->memory_per_device_bytes / GIB, e->fits ? "fits" : "DOES NOT FIT",
            e->mem_weights_bytes / GIB, e->mem_activation_bytes / GIB, e->mem_buffer_bytes / GIB);
}

/* A plan file may record what it was made for; a mismatch is worth a warning
 * (the plan is validated against what was given anyway). */
static void check_meta(const wf_plan_meta *meta, const char *model, const wf_model_config *mc,
                       const char *cluster, int64_t batch)
{
    if (meta->model[0] && strcmp(meta->model, model) != 0 && strcmp(meta->model, mc->name) != 0)
        wf_log(WF_LOG_WARN, "plan file was made for model '%s', estimating it for '%s'", meta->model,
               model);
    if (meta->cluster[0] && strcmp(meta->cluster, cluster) != 0)
        wf_log(WF_LOG_WARN, "plan file was made for cluster '%s', estimating it on '%s'",
               meta->cluster, cluster);
    if (meta->batch > 0 && meta->batch != batch)
        wf_log(WF_LOG_WARN, "plan file was made for batch %lld, estimating it for batch %lld",
               (long long)meta->batch, (long long)batch);
}

wf_status wf_cmd_estimate(int argc, char **argv)
{
    const char *model = NULL, *cluster = NULL, *plan_text = NULL;
    int64_t batch = 0;
    int json = 0, help = 0, npos = 0;
    const wf_opt opts[] = {
        {"model", 0, WF_OPT_STR, &model, "M", "zoo name, family with overrides, or model JSON file", 1},
        {"cluster", 0, WF_OPT_STR, &cluster, "C", "preset with overrides (dgx-a100:nodes=16) or cluster JSON file", 1},
        {"batch", 0, WF_OPT_INT, &batch, "B", "global batch size (samples per iteration)", 1},
        {"plan", 0, WF_OPT_STR, &plan_text, "P", "dp=..,tp=..,pp=..,mbs=..,vpp=..,recompute=..,sp=..,zero=.. or a plan file", 1},
        {"json", 0, WF_OPT_FLAG, &json, NULL, "print one JSON object on stdout", 0},
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, NULL, 0, &npos, &help);
    if (help) {
        wf_opts_usage(stdout, "weft estimate --model M --cluster C --batch B --plan P [--json]",
                      "Predicts the iteration time and the memory per device of one plan.", opts);
        return WF_OK;
    }
    if (st != WF_OK)
        return st;
    if (batch < 1)
        return wf_errorf(WF_INVAL, "--batch=%lld must be >= 1", (long long)batch);

    wf_model_config mc;
    wf_cluster c;
    wf_plan p;
    wf_plan_meta meta;
    memset(&meta, 0, sizeof meta);
    if ((st = wf_model_lookup(model, &mc)) != WF_OK || (st = wf_cluster_lookup(cluster, &c)) != WF_OK)
        return st;
    if (strchr(plan_text, '=')) {
        st = wf_plan_parse(plan_text, &p);
    } else {
        st = wf_plan_read_file(plan_text, &p, &meta);
        if (st == WF_OK)
            check_meta(&meta, model, &mc, cluster, batch);
    }
    if (st != WF_OK)
        return st;

    wf_cost_ctx *ctx = NULL;
    if ((st = wf_cost_ctx_create(&mc, &c, &ctx)) != WF_OK)
        return st;
    wf_estimate e;
    st = wf_estimate_plan(ctx, &p, batch, &e);
    wf_cost_ctx_free(ctx);
    if (st != WF_OK)
        return st;

    char canon[256];
    wf_plan_format(&p, canon, sizeof canon);
    print_table(stderr, mc.name, c.name, batch, canon, &e);
    if (!json)
        return WF_OK;
    cJSON *j = wf_estimate_to_json(&e);
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory");
    cJSON_AddStringToObject(j, "plan", canon);
    cJSON_AddStringToObject(j, "model", mc.name);
    cJSON_AddStringToObject(j, "cluster", c.name);
    cJSON_AddNumberToObject(j, "batch", (double)batch);
    st = wf_cli_print_json(j);
    cJSON_Delete(j);
    return st;
}
