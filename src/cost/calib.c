/* weft cost: the published measurements the dgx-a100 preset is calibrated on
 * (Korthikanti et al. 2022, Table 5 and Figure 1), read from their JSON file,
 * and the cost model's predictions for each row. Shared by the calibration
 * fit (bench/bench_calibrate_dgx_a100.c, run by scripts/calibrate-dgx-a100)
 * and the test that asserts the fit's accuracy (tests/test_calibration.c).
 *
 * Modes: "full" = recompute=full without sequence parallelism; "seqsel" =
 * selective recomputation with sequence parallelism; "none" = neither. */
#include "cost/cost-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static wf_status set_mode(const char *mode, const char *ctx, wf_plan *p)
{
    if (strcmp(mode, "full") == 0) {
        p->recompute = WF_RECOMPUTE_FULL;
        p->sp = 0;
    } else if (strcmp(mode, "seqsel") == 0) {
        p->recompute = WF_RECOMPUTE_SELECTIVE;
        p->sp = 1;
    } else if (strcmp(mode, "none") == 0) {
        p->recompute = WF_RECOMPUTE_NONE;
        p->sp = 0;
    } else {
        return wf_errorf(WF_FORMAT, "%s.mode: '%s', expected full, seqsel or none", ctx, mode);
    }
    return WF_OK;
}

static wf_status read_row(const cJSON *r, const char *ctx, const wf_calib_data *d, int is_time,
                          wf_calib_row *row)
{
    const char *model = NULL, *mode = NULL;
    int64_t tp = 1, pp = 1, dp = 1, batch = 0, mbs = 1, vpp = 1, gpus = 0;
    wf_status st;
    memset(row, 0, sizeof *row);
    if ((st = wf_json_get_str(r, ctx, "model", 1, &model)) != WF_OK ||
        (st = wf_json_get_str(r, ctx, "mode", 1, &mode)) != WF_OK ||
        (st = wf_json_get_int(r, ctx, "tp", 1, 1, 1 << 16, &tp)) != WF_OK ||
        (st = wf_json_get_int(r, ctx, "pp", 1, 1, 1 << 16, &pp)) != WF_OK ||
        (st = wf_json_get_int(r, ctx, "dp", 0, 1, 1 << 24, &dp)) != WF_OK ||
        (st = wf_json_get_int(r, ctx, "gpus", 0, 1, 1 << 24, &gpus)) != WF_OK ||
        (st = wf_json_get_int(r, ctx, "batch", 1, 1, 1 << 30, &batch)) != WF_OK ||
        (st = wf_json_get_int(r, ctx, "mbs", 1, 1, 1 << 30, &mbs)) != WF_OK ||
        (st = wf_json_get_int(r, ctx, "vpp", 1, 1, 1 << 10, &vpp)) != WF_OK)
        return st;
    snprintf(row->model, sizeof row->model, "%s", model);
    snprintf(row->mode, sizeof row->mode, "%s", mode);
    row->model_index = -1;
    for (int i = 0; i < d->nmodels; i++)
        if (strcmp(d->models[i].name, model) == 0)
            row->model_index = i;
    if (row->model_index < 0)
        return wf_errorf(WF_FORMAT, "%s.model: '%s' is not in the file's models", ctx, model);
    wf_plan_default(&row->plan);
    row->plan.tp = (int)tp;
    row->plan.pp = (int)pp;
    row->plan.dp = (int)dp;
    row->plan.mbs = (int)mbs;
    row->plan.vpp = (int)vpp;
    /* The code these rows ran: Megatron-LM as of 2022 (unfused attention,
     * fp32 gradients, backward tensor-parallel all-reduce overlapped). */
    row->plan.sw = WF_SW_MEGATRON_2022;
    if ((st = set_mode(mode, ctx, &row->plan)) != WF_OK)
        return st;
    if (gpus && gpus != tp * pp * dp)
        return wf_errorf(WF_FORMAT, "%s: gpus=%lld but tp*pp*dp = %lld", ctx, (long long)gpus,
                         (long long)(tp * pp * dp));
    row->batch = batch;
    if (is_time)
        return wf_json_get_num(r, ctx, "time_s", 1, 1e-6, 1e6, &row->time_s);
    if ((st = wf_json_get_num(r, ctx, "params_and_optimizer", 1, 0, 1e6, &row->weights_gib)) != WF_OK)
        return st;
    return wf_json_get_num(r, ctx, "activations", 1, 0, 1e6, &row->act_gib);
}

wf_status wf_calib_load(const char *path, wf_calib_data *out)
{
    memset(out, 0, sizeof *out);
    cJSON *j = NULL;
    wf_status st = wf_json_read_file(path, &j);
    if (st != WF_OK)
        return st;
    char ctx[512];
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(j, "models");
    const cJSON *times = cJSON_GetObjectItemCaseSensitive(j, "iteration_time_s");
    const cJSON *mems = cJSON_GetObjectItemCaseSensitive(j, "memory_per_gpu_gib");
    if (!cJSON_IsObject(models) || !cJSON_IsArray(times) || !cJSON_IsArray(mems)) {
        cJSON_Delete(j);
        return wf_errorf(WF_FORMAT, "%s: expected \"models\" (object), \"iteration_time_s\" and "
                                    "\"memory_per_gpu_gib\" (arrays)", path);
    }
    for (const cJSON *m = models->child; m && st == WF_OK; m = m->next) {
        if (out->nmodels == WF_CALIB_MAX_MODELS) {
            st = wf_errorf(WF_FORMAT, "%s: more than %d models", path, WF_CALIB_MAX_MODELS);
            break;
        }
        wf_model_config *mc = &out->models[out->nmodels];
        if ((st = wf_model_lookup(m->string, mc)) != WF_OK)
            break;
        /* The zoo entry must be the model that was measured. */
        static const char *const keys[] = {"hidden", "heads", "layers", "seq", "vocab"};
        const int64_t have[] = {mc->hidden, mc->heads, mc->layers, mc->seq, mc->vocab};
        snprintf(ctx, sizeof ctx, "%s: models.%s", path, m->string);
        for (int k = 0; k < 5 && st == WF_OK; k++) {
            int64_t v = 0;
            st = wf_json_get_int(m, ctx, keys[k], 1, 1, (int64_t)1 << 40, &v);
            if (st == WF_OK && v != have[k])
                st = wf_errorf(WF_FORMAT, "%s.%s = %lld but the zoo's %s has %lld", ctx, keys[k],
                               (long long)v, m->string, (long long)have[k]);
        }
        out->nmodels++;
    }
    for (int i = 0; st == WF_OK && i < cJSON_GetArraySize(times); i++) {
        if (out->ntime == WF_CALIB_MAX_ROWS)
            return wf_errorf(WF_FORMAT, "%s: too many rows", path);
        snprintf(ctx, sizeof ctx, "%s: iteration_time_s[%d]", path, i);
        st = read_row(cJSON_GetArrayItem(times, i), ctx, out, 1, &out->time[out->ntime++]);
    }
    for (int i = 0; st == WF_OK && i < cJSON_GetArraySize(mems); i++) {
        if (out->nmem == WF_CALIB_MAX_ROWS)
            return wf_errorf(WF_FORMAT, "%s: too many rows", path);
        snprintf(ctx, sizeof ctx, "%s: memory_per_gpu_gib[%d]", path, i);
        st = read_row(cJSON_GetArrayItem(mems, i), ctx, out, 0, &out->mem[out->nmem++]);
    }
    cJSON_Delete(j);
    return st;
}

wf_status wf_calib_predict(const wf_calib_data *d, const wf_cluster *c, wf_cost_ctx **ctxs,
                           double *pred_time, double *pred_weights, double *pred_act)
{
    wf_status st;
    for (int i = 0; i < d->nmodels; i++) {
        if (!ctxs[i]) {
            if ((st = wf_cost_ctx_create(&d->models[i], c, &ctxs[i])) != WF_OK)
                return st;
        } else {
            wf_cost_ctx_set_cluster(ctxs[i], c);
        }
    }
    wf_estimate e;
    for (int i = 0; i < d->ntime; i++) {
        const wf_calib_row *r = &d->time[i];
        if ((st = wf_estimate_plan(ctxs[r->model_index], &r->plan, r->batch, &e)) != WF_OK)
            return st;
        pred_time[i] = e.iteration_time_s;
    }
    for (int i = 0; i < d->nmem; i++) {
        const wf_calib_row *r = &d->mem[i];
        if ((st = wf_estimate_plan(ctxs[r->model_index], &r->plan, r->batch, &e)) != WF_OK)
            return st;
        /* Figure 1's "params_and_optimizer" counts the transformer layers of
         * a GPU (18 bytes per parameter), not the embedding or the head. */
        pred_weights[i] = e.mem_layer_weights_bytes / GIB;
        pred_act[i] = e.mem_activation_bytes / GIB;
    }
    return WF_OK;
}

void wf_calib_free(wf_cost_ctx **ctxs)
{
    for (int i = 0; i < WF_CALIB_MAX_MODELS; i++) {
        wf_cost_ctx_free(ctxs[i]);
        ctxs[i] = NULL;
    }
}

/* ---- NVIDIA's H100 results (calibration-h100.json) ------------------------------
 * Rows of {id, gpus, model: {spec}, plan: {dp, tp, pp, mbs, vpp, sp, ...},
 * batch, measured: {iteration_time_s}}: NeMo 24.07 on Megatron-Core with
 * FP8 and flash attention. The rows state the distributed optimizer and no
 * recomputation as assumed; they are run as sw=megatron-core, fp8=1,
 * zero=1, recompute=none. */
wf_status wf_calib_load_h100(const char *path, wf_calib_data *out)
{
    memset(out, 0, sizeof *out);
    cJSON *j = NULL;
    wf_status st = wf_json_read_file(path, &j);
    if (st != WF_OK)
        return st;
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "rows");
    if (!cJSON_IsArray(rows)) {
        cJSON_Delete(j);
        return wf_errorf(WF_FORMAT, "%s: expected \"rows\" (an array)", path);
    }
    char ctx[512];
    for (int i = 0; st == WF_OK && i < cJSON_GetArraySize(rows); i++) {
        const cJSON *r = cJSON_GetArrayItem(rows, i);
        snprintf(ctx, sizeof ctx, "%s: rows[%d]", path, i);
        if (out->ntime == WF_CALIB_MAX_ROWS) {
            st = wf_errorf(WF_FORMAT, "%s: more than %d rows", path, WF_CALIB_MAX_ROWS);
            break;
        }
        const char *id = NULL, *spec = NULL;
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(r, "model");
        const cJSON *plan = cJSON_GetObjectItemCaseSensitive(r, "plan");
        const cJSON *meas = cJSON_GetObjectItemCaseSensitive(r, "measured");
        if (!cJSON_IsObject(model) || !cJSON_IsObject(plan) || !cJSON_IsObject(meas)) {
            st = wf_errorf(WF_FORMAT, "%s: expected objects \"model\", \"plan\" and \"measured\"", ctx);
            break;
        }
        int64_t gpus = 0, batch = 0, dp = 1, tp = 1, pp = 1, mbs = 1, vpp = 1, sp = 0;
        wf_calib_row *row = &out->time[out->ntime];
        memset(row, 0, sizeof *row);
        char sub[560];
        snprintf(sub, sizeof sub, "%s.plan", ctx);
        if ((st = wf_json_get_str(r, ctx, "id", 1, &id)) != WF_OK ||
            (st = wf_json_get_int(r, ctx, "gpus", 1, 1, 1 << 24, &gpus)) != WF_OK ||
            (st = wf_json_get_int(r, ctx, "batch", 1, 1, 1 << 30, &batch)) != WF_OK ||
            (st = wf_json_get_str(model, ctx, "spec", 1, &spec)) != WF_OK ||
            (st = wf_json_get_int(plan, sub, "dp", 1, 1, 1 << 24, &dp)) != WF_OK ||
            (st = wf_json_get_int(plan, sub, "tp", 1, 1, 1 << 16, &tp)) != WF_OK ||
            (st = wf_json_get_int(plan, sub, "pp", 1, 1, 1 << 16, &pp)) != WF_OK ||
            (st = wf_json_get_int(plan, sub, "mbs", 1, 1, 1 << 20, &mbs)) != WF_OK ||
            (st = wf_json_get_int(plan, sub, "vpp", 1, 1, 1 << 10, &vpp)) != WF_OK ||
            (st = wf_json_get_int(plan, sub, "sp", 1, 0, 1, &sp)) != WF_OK)
            break;
        snprintf(sub, sizeof sub, "%s.measured", ctx);
        if ((st = wf_json_get_num(meas, sub, "iteration_time_s", 1, 1e-6, 1e6, &row->time_s)) != WF_OK)
            break;
        if (gpus != dp * tp * pp) {
            st = wf_errorf(WF_FORMAT, "%s: gpus=%lld but dp*tp*pp = %lld", ctx, (long long)gpus,
                           (long long)(dp * tp * pp));
            break;
        }
        snprintf(row->model, sizeof row->model, "%s", id);
        row->model_index = -1;
        for (int k = 0; k < out->nmodels; k++)
            if (strcmp(out->spec[k], spec) == 0)
                row->model_index = k;
        if (row->model_index < 0) {
            if (out->nmodels == WF_CALIB_MAX_MODELS) {
                st = wf_errorf(WF_FORMAT, "%s: more than %d models", path, WF_CALIB_MAX_MODELS);
                break;
            }
            if ((st = wf_model_lookup(spec, &out->models[out->nmodels])) != WF_OK)
                break;
            /* NeMo trains these in bf16. */
            out->models[out->nmodels].dtype = WF_DTYPE_BF16;
            snprintf(out->spec[out->nmodels], sizeof out->spec[0], "%s", spec);
            row->model_index = out->nmodels++;
        }
        wf_plan_default(&row->plan);
        row->plan.dp = (int)dp;
        row->plan.tp = (int)tp;
        row->plan.pp = (int)pp;
        row->plan.mbs = (int)mbs;
        row->plan.vpp = (int)vpp;
        row->plan.sp = (int)sp;
        row->plan.zero = 1;
        row->plan.fp8 = 1;
        row->plan.sw = WF_SW_MEGATRON_CORE;
        row->batch = batch;
        snprintf(row->mode, sizeof row->mode, "fp8");
        out->ntime++;
    }
    cJSON_Delete(j);
    return st;
}

double wf_calib_score(const wf_calib_data *d, const double *pred, double *mean_out, double *max_out)
{
    double sum = 0, mx = 0;
    for (int i = 0; i < d->ntime; i++) {
        double e = fabs(pred[i] / d->time[i].time_s - 1);
        sum += e;
        mx = e > mx ? e : mx;
    }
    double mean = d->ntime > 0 ? sum / d->ntime : 0;
    if (mean_out)
        *mean_out = mean;
    if (max_out)
        *max_out = mx;
    return mean + (mx > 0.06 ? mx - 0.06 : 0);
}

void wf_calib_set_curve(wf_device *dev, double e_max, double f_half)
{
    static const double POINTS[WF_MAX_EFF] = {1e13, 1e12, 3e11, 1e11, 3e10, 1e10, 1e9, 1e8};
    dev->neff = WF_MAX_EFF;
    for (int i = 0; i < WF_MAX_EFF; i++) {
        dev->matrix_eff[i].min_flops = POINTS[i];
        dev->matrix_eff[i].eff = e_max * POINTS[i] / (POINTS[i] + f_half);
    }
}
