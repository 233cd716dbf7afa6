/* weft CLI: what the verbs share (cli.h): loading the model, the cluster and
 * the plan named by their options (a plan spec or a plan file, with a warning
 * when the file was made for something else), the header of a plan's human
 * table and the fields its --json object carries, and a cluster's
 * description with every calibration factor. */
#include "cli/cli.h"
#include "weft/search.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double wf_cli_tokens_per_s_per_device(const wf_model_config *m, const wf_estimate *e)
{
    if (!wf_model_is_transformer(m) || m->seq < 1 || e->devices < 1)
        return 0;
    return e->samples_per_s * (double)m->seq / (double)e->devices;
}

wf_status wf_cli_check_batch(int64_t batch)
{
    if (batch < 1 || batch > WF_MAX_BATCH)
        return wf_errorf(WF_INVAL, "--batch=%lld must be in [1, %lld]", (long long)batch,
                         (long long)WF_MAX_BATCH);
    return WF_OK;
}

wf_status wf_cli_load_model_cluster(const char *model, const char *cluster, int64_t batch, wf_model_config *mc,
                                    wf_cluster *c)
{
    wf_status st = wf_cli_check_batch(batch);
    if (st == WF_OK)
        st = wf_model_lookup(model, mc);
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
    } else if (wf_plan_is_oplevel_file(in->plan)) {
        /* An op-level plan of Megatron's family: the whole-model plan whose
         * lowering it is (others are named and refused). */
        wf_layout ol;
        wf_layout_init(&ol);
        wf_plan_meta meta;
        int is_ol = 0;
        st = wf_plan_read_file_any(in->plan, &in->p, &ol, &meta, &is_ol);
        if (st == WF_OK && is_ol) {
            check_meta(&meta, in, verb_ing);
            st = wf_plan_raise(&in->mc, &in->c, in->batch, &ol, &in->p);
            if (st == WF_OK)
                in->p.given |= WF_PLAN_GIVEN_DP | WF_PLAN_GIVEN_MBS;
        }
        wf_layout_free(&ol);
    } else {
        wf_plan_meta meta;
        memset(&meta, 0, sizeof meta);
        st = wf_plan_read_file(in->plan, &in->p, &meta);
        if (st == WF_OK)
            check_meta(&meta, in, verb_ing);
    }
    /* Keys left out take the defaults a user expects on this cluster and batch;
     * the output says what was assumed. */
    char note[256] = "";
    if (st == WF_OK)
        st = wf_plan_complete(&in->p, wf_cluster_devices(&in->c), in->batch, note, sizeof note);
    if (st == WF_OK) {
        char cl[160];
        wf_cli_cluster_note(in->cluster, &in->c, cl, sizeof cl);
        snprintf(in->assumed, sizeof in->assumed, "%s%s%s", note, note[0] && cl[0] ? "; " : "", cl);
        wf_plan_format(&in->p, in->canon, sizeof in->canon);
    }
    return st;
}

void wf_cli_cluster_note(const char *spec, const wf_cluster *c, char *buf, size_t cap)
{
    buf[0] = 0;
    /* A preset named without nodes= is its full size: say so. */
    if (!spec || strstr(spec, "nodes=") || strstr(spec, ".json") || access(spec, F_OK) == 0 || c->nlevels < 2)
        return;
    snprintf(buf, cap, "cluster %s: the preset's %lld nodes x %lld = %lld devices (add :nodes=N)", c->name,
             (long long)(wf_cluster_devices(c) / c->level[0].size), (long long)c->level[0].size,
             (long long)wf_cluster_devices(c));
}

/* The comm schedule the profile plays for the plan when it is not the one the
 * plan names (ZeRO-1/2 under megatron-core's distributed optimizer is DeAR's
 * schedule: wf_cost_plan_as_run), else -1. */
static int played_comm(const wf_cli_plan_input *in)
{
    wf_cost_ctx *ctx = NULL;
    if (wf_cost_ctx_create(&in->mc, &in->c, &ctx) != WF_OK) {
        wf_clear_error();
        return -1;
    }
    wf_plan run;
    wf_cost_plan_as_run(ctx, &in->p, &run);
    wf_cost_ctx_free(ctx);
    return run.comm.kind != in->p.comm.kind ? (int)run.comm.kind : -1;
}

void wf_cli_print_plan_header(FILE *f, const wf_cli_plan_input *in, int64_t devices, int64_t micro_batches)
{
    fprintf(f, "model %s on %s, batch %lld\nplan %s (%lld devices, %lld micro-batches per pipeline)\n", in->mc.name,
            in->c.name, (long long)in->batch, in->canon, (long long)devices, (long long)micro_batches);
    int played = played_comm(in);
    if (played >= 0)
        fprintf(f, "played as comm=%s: ZeRO-%d under %s reduce-scatters gradients in backward and all-gathers "
                   "parameters before the next forward (its distributed optimizer), which is DeAR's schedule\n",
                wf_comm_name((wf_comm_kind)played), in->p.zero, wf_sw_name(in->p.sw));
    if (in->assumed[0])
        fprintf(f, "assumed %s\n", in->assumed);
}

void wf_cli_add_plan_fields(cJSON *j, const wf_cli_plan_input *in)
{
    cJSON_AddStringToObject(j, "plan", in->canon);
    cJSON_AddStringToObject(j, "plan_kind", wf_plan_kind(&in->p));
    int played = played_comm(in);
    if (played >= 0)
        cJSON_AddStringToObject(j, "comm_played", wf_comm_name((wf_comm_kind)played));
    /* The breakdown's parts add up to iteration_time_s; exposed_comm is one of
     * them and a subtotal of its own (docs/cost-model.md). */
    cJSON *sub = cJSON_AddObjectToObject(j, "breakdown_subtotals");
    if (sub) {
        cJSON_AddStringToObject(sub, "iteration_time_s", "compute + recompute + bubble + optimizer + exposed_comm");
        cJSON_AddStringToObject(sub, "exposed_comm", "tp_comm + pp_comm + the exposed part of dp_comm");
    }
    cJSON_AddStringToObject(j, "model", in->mc.name);
    cJSON_AddStringToObject(j, "cluster", in->c.name);
    cJSON_AddNumberToObject(j, "batch", (double)in->batch);
    if (in->assumed[0])
        cJSON_AddStringToObject(j, "assumed", in->assumed);
}

/* A factor's value in its unit: microseconds for short times, GiB for
 * memory, GB/s for bandwidths. */
static void factor_text(const wf_cluster_factor *f, double v, char *out, size_t n)
{
    if (strcmp(f->unit, "s") == 0)
        snprintf(out, n, "%g us", v * 1e6);
    else if (strcmp(f->unit, "bytes") == 0)
        snprintf(out, n, "%.2f GiB", v / (1024.0 * 1024.0 * 1024.0));
    else if (strcmp(f->unit, "B/s") == 0)
        snprintf(out, n, v > 0 ? "%g GB/s" : "0", v / 1e9);
    else
        snprintf(out, n, "%g", v);
}

void wf_cli_print_cluster(FILE *f, const wf_cluster *c)
{
    const wf_device *d = &c->dev;
    fprintf(f, "cluster %s: %lld devices of %s\n", c->name, (long long)wf_cluster_devices(c), d->name);
    fprintf(f, "  device memory %.1f GiB, bandwidth %.0f GB/s (eff %.2f)\n",
            d->mem_bytes / (1024.0 * 1024.0 * 1024.0), d->mem_bw_bps / 1e9, d->mem_eff);
    for (int t = 0; t < WF_DTYPE_COUNT; t++)
        if (d->matrix_flops[t] > 0 || d->vector_flops[t] > 0)
            fprintf(f, "  %-5s matrix %8.1f TFLOP/s   vector %7.1f TFLOP/s\n",
                    wf_dtype_name((wf_dtype)t), d->matrix_flops[t] / 1e12, d->vector_flops[t] / 1e12);
    fprintf(f, "  matrix efficiency by op FLOPs:");
    for (int i = 0; i < d->neff; i++)
        fprintf(f, " >=%.0e:%.2f", d->matrix_eff[i].min_flops, d->matrix_eff[i].eff);
    fprintf(f, "\n  %-8s %10s %12s %12s %6s\n", "level", "size", "GB/s/device", "latency_us", "eff");
    for (int l = 0; l < c->nlevels; l++)
        fprintf(f, "  %-8s %10lld %12.3f %12.1f %6.2f\n", c->level[l].name, (long long)c->level[l].size,
                c->level[l].bw_bps / 1e9, c->level[l].latency_s * 1e6, c->level[l].eff);
    fprintf(f, "  factors (preset:key=value overrides them, as do a cluster file's fields):\n");
    for (int i = 0; i < wf_cluster_factor_count(); i++) {
        const wf_cluster_factor *x = wf_cluster_factor_at(i);
        char v[64];
        factor_text(x, wf_cluster_factor_value(c, x), v, sizeof v);
        fprintf(f, "    %-20s %-12s %s\n", x->key, v, x->help);
    }
}

/* Bytes are whole: every number under a key ending in "_bytes" is rounded
 * to an integer (a per-device share of a divided buffer can come out
 * fractional: 58410869333.333336). */
static void whole_bytes(cJSON *j)
{
    for (cJSON *it = j ? j->child : NULL; it; it = it->next) {
        size_t n = it->string ? strlen(it->string) : 0;
        if (cJSON_IsNumber(it) && n >= 6 && strcmp(it->string + n - 6, "_bytes") == 0 && isfinite(it->valuedouble))
            cJSON_SetNumberValue(it, round(it->valuedouble));
        else if (cJSON_IsObject(it) || cJSON_IsArray(it))
            whole_bytes(it);
    }
}

wf_status wf_cli_print_json(const cJSON *j)
{
    whole_bytes((cJSON *)j);
    char *s = cJSON_Print(j);
    if (!s)
        return wf_errorf(WF_NOMEM, "out of memory printing JSON");
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
    return fflush(stdout) == 0 ? WF_OK : wf_errorf(WF_IO, "cannot write standard output");
}

const char *wf_cli_sig(double v, char *buf, size_t cap)
{
    if (!isfinite(v) || v == 0) {
        snprintf(buf, cap, isfinite(v) ? "0" : "%g", v);
        return buf;
    }
    /* Fixed notation with 4 significant digits: 0.5629, 113.7, 14550. */
    int mag = (int)floor(log10(fabs(v)));
    if (mag >= 3) {
        double unit = pow(10.0, mag - 3);
        snprintf(buf, cap, "%.0f", round(v / unit) * unit);
    } else {
        int dec = 3 - mag;
        snprintf(buf, cap, "%.*f", dec > 9 ? 9 : dec, v);
    }
    return buf;
}
