/* weft CLI: what the verbs that evaluate one plan share (cli.h): loading the
 * model, the cluster and the plan named by their options (a plan spec or a
 * plan file, with a warning when the file was made for something else), the
 * header of their human tables and the fields their --json objects carry. */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <string.h>

wf_status wf_cli_load_model_cluster(const char *model, const char *cluster, int64_t batch, wf_model_config *mc,
                                    wf_cluster *c)
{
    if (batch < 1)
        return wf_errorf(WF_INVAL, "--batch=%lld must be >= 1", (long long)batch);
    wf_status st = wf_model_lookup(model, mc);
    return st != WF_OK ? st : wf_cluster_lookup(cluster, c);
}

/* A plan file may record what it was made for; a mismatch is worth a warning
 * (the plan is validated against what was given anyway). */
static void check_meta(const wf_plan_meta *meta, const wf_cli_plan_input *in, const char *verb_ing)
{
    if (meta->model[0] && strcmp(meta->model, in->model) != 0 && strcmp(meta->model, in->mc.name) != 0)
        wf_log(WF_LOG_WARN, "plan file was made for model '%s', %s it for '%s'", meta->model, verb_ing, in->model);
    if (meta->cluster[0] && strcmp(meta->cluster, in->cluster) != 0)
        wf_log(WF_LOG_WARN, "plan file was made for cluster '%s', %s it on '%s'", meta->cluster, verb_ing,
               in->cluster);
    if (meta->batch > 0 && meta->batch != in->batch)
        wf_log(WF_LOG_WARN, "plan file was made for batch %lld, %s it for batch %lld", (long long)meta->batch,
               verb_ing, (long long)in->batch);
}

wf_status wf_cli_load_plan_input(wf_cli_plan_input *in, const char *verb_ing)
{
    wf_status st = wf_cli_load_model_cluster(in->model, in->cluster, in->batch, &in->mc, &in->c);
    if (st != WF_OK)
        return st;
    if (strchr(in->plan, '=')) {
        st = wf_plan_parse(in->plan, &in->p);
    } else {
        wf_plan_meta meta;
        memset(&meta, 0, sizeof meta);
        st = wf_plan_read_file(in->plan, &in->p, &meta);
        if (st == WF_OK)
            check_meta(&meta, in, verb_ing);
    }
    if (st == WF_OK)
        wf_plan_format(&in->p, in->canon, sizeof in->canon);
    return st;
}

void wf_cli_print_plan_header(FILE *f, const wf_cli_plan_input *in, int64_t devices, int64_t micro_batches)
{
    fprintf(f, "model %s on %s, batch %lld\nplan %s (%lld devices, %lld micro-batches per pipeline)\n", in->mc.name,
            in->c.name, (long long)in->batch, in->canon, (long long)devices, (long long)micro_batches);
}

void wf_cli_add_plan_fields(cJSON *j, const wf_cli_plan_input *in)
{
    cJSON_AddStringToObject(j, "plan", in->canon);
    cJSON_AddStringToObject(j, "model", in->mc.name);
    cJSON_AddStringToObject(j, "cluster", in->c.name);
    cJSON_AddNumberToObject(j, "batch", (double)in->batch);
}
