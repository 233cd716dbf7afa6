/* Per-layer plan files of a mixture of experts in `weft estimate`, `weft
 * simulate` and `weft plan --verify` (cli.h; layout.h, wf_layout_perlayer):
 * read once, priced layer by layer by the one cost model, or simulated as
 * that price composes (wf_sim_perlayer). */
#include "cli/cli.h"
#include "weft/layout.h"
#include "weft/sim.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#define GIB 1073741824.0

int wf_cli_perlayer_read(const char *path, const char *model, const char *cluster, int64_t batch,
                         wf_model_config *m, wf_cluster *c, wf_layout *ol, wf_layout_perlayer *pl, wf_status *st)
{
    *st = WF_OK;
    if (!path || !wf_plan_is_oplevel_file(path))
        return 0;
    if ((*st = wf_model_lookup(model, m)) != WF_OK || (cluster && (*st = wf_cluster_lookup(cluster, c)) != WF_OK))
        return -1;
    if (!wf_model_is_moe(m))
        return 0;
    wf_plan whole;
    wf_plan_meta meta;
    memset(&meta, 0, sizeof meta);
    int is_ol = 0, is = 0;
    if ((*st = wf_plan_read_file_any(path, &whole, ol, &meta, &is_ol)) != WF_OK)
        return -1;
    if (!is_ol)
        return 0;
    if (!cluster) {
        /* This machine as a job of the plan's ranks (mesh x stages). */
        long long x[3] = {1, 1, 1};
        int n = sscanf(ol->mesh, "%lldx%lldx%lld", &x[0], &x[1], &x[2]);
        int64_t ranks = (int64_t)ol->pp;
        for (int a = 0; a < n && a < 3; a++)
            ranks *= x[a] > 0 ? x[a] : 1;
        if ((*st = wf_cluster_of_job(NULL, (int)ranks, c)) != WF_OK)
            return -1;
    }
    if ((*st = wf_layout_perlayer_of(m, c, batch, ol, pl, &is)) != WF_OK) {
        char why[768];
        snprintf(why, sizeof why, "%s", wf_last_error());
        *st = wf_errorf(*st, "%s: %s", path, why);
        return -1;
    }
    return is;
}

wf_status wf_cli_perlayer_report(int json, int simulate, const char *path, const wf_model_config *m,
                                 const wf_cluster *c, int64_t batch, const wf_layout *ol,
                                 const wf_layout_perlayer *pl)
{
    wf_cost_ctx *ctx = NULL;
    wf_estimate e;
    wf_status st = wf_cost_ctx_create(m, c, &ctx);
    if (st == WF_OK)
        st = wf_layout_perlayer_cost(m, c, ctx, batch, pl, &e);
    wf_cost_ctx_free(ctx);
    if (st != WF_OK)
        return st;
    double sim_s = 0, sim_mem = 0;
    if (simulate && (st = wf_sim_perlayer(m, c, batch, pl, &sim_s, &sim_mem)) != WF_OK)
        return st;
    char text[256], detail[256], moe[512], dense[512];
    wf_layout_format(ol, text, sizeof text);
    wf_layout_perlayer_describe(pl, detail, sizeof detail);
    wf_plan_format(&pl->moe, moe, sizeof moe);
    wf_plan dp = wf_layout_perlayer_dense_plan(m, &pl->dense, m->layers);
    wf_plan_format(&dp, dense, sizeof dense);
    FILE *h = json ? stderr : stdout;
    fprintf(h, "%s: per-layer op-level plan %s of %s on %s, batch %lld\n", path, text, m->name, c->name,
            (long long)batch);
    fprintf(h, "  layers: %s\n  expert layers, embedding and head: the lowering of %s\n  dense layers: the "
               "lowering of %s\n", detail, moe, dense);
    if (simulate)
        fprintf(h, "simulated: %.6f s per iteration, %.2f GiB per device peak (estimate %.6f s, %+.2f%%)\n", sim_s,
                sim_mem / GIB, e.iteration_time_s, 100.0 * (sim_s / e.iteration_time_s - 1.0));
    else
        fprintf(h, "%.6f s per iteration, %.2f GiB per device (%s), costed layer by layer by the one cost model\n",
                e.iteration_time_s, e.memory_per_device_bytes / GIB, e.fits ? "fits" : "DOES NOT FIT");
    if (!json)
        return WF_OK;
    cJSON *j = simulate ? cJSON_CreateObject() : wf_estimate_to_json(&e);
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory");
    if (simulate) {
        /* simulate's own figures under simulate's names (wf_sim_plan_to_json). */
        cJSON_AddNumberToObject(j, "iteration_time_s", sim_s);
        cJSON_AddNumberToObject(j, "samples_per_s", (double)batch / sim_s);
        cJSON_AddNumberToObject(j, "peak_memory_bytes", sim_mem);
        cJSON_AddBoolToObject(j, "fits", sim_mem <= c->dev.mem_bytes);
        cJSON_AddNumberToObject(j, "estimate_s", e.iteration_time_s);
    }
    cJSON_AddStringToObject(j, "model", m->name);
    cJSON_AddStringToObject(j, "cluster", c->name);
    cJSON_AddNumberToObject(j, "batch", (double)batch);
    cJSON_AddStringToObject(j, "plan_kind", "per-layer");
    cJSON_AddStringToObject(j, "op_level_plan", text);
    cJSON_AddStringToObject(j, "per_layer", detail);
    cJSON_AddStringToObject(j, "expert_plan", moe);
    cJSON_AddStringToObject(j, "dense_plan", dense);
    st = wf_cli_print_json(j);
    cJSON_Delete(j);
    return st;
}

int wf_cli_perlayer_try(const char *path, const char *model, const char *cluster, int64_t batch, int json,
                        int simulate, wf_status *st)
{
    wf_model_config m;
    wf_cluster c;
    wf_layout ol;
    wf_layout_perlayer pl;
    *st = WF_OK;
    wf_layout_init(&ol);
    int per = wf_cli_perlayer_read(path, model, cluster, batch, &m, &c, &ol, &pl, st);
    if (per > 0)
        *st = wf_cli_perlayer_report(json, simulate, path, &m, &c, batch, &ol, &pl);
    wf_layout_free(&ol);
    if (per == 0)
        wf_clear_error();
    return per != 0;
}
