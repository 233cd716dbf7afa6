/* weft cluster JSON: reading (every field validated, unknown fields rejected)
 * and writing of the cluster file format of docs/cluster-format.md. The same
 * format is what `weft calibrate -o` writes and what a preset prints as. */
#include "weft/cluster.h"
#include "weft/cluster_measured.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_NAME "weft-cluster"
#define FORMAT_VERSION 1

/* {"fp32": 19.5e12, "fp16": 312e12} -> flops[dtype]; absent dtypes stay 0. */
static wf_status read_flops(const cJSON *obj, const char *ctx, double flops[WF_DTYPE_COUNT])
{
    if (!cJSON_IsObject(obj))
        return wf_errorf(WF_FORMAT, "%s: expected an object of dtype -> FLOP/s", ctx);
    for (int t = 0; t < WF_DTYPE_COUNT; t++)
        flops[t] = 0;
    for (const cJSON *it = obj->child; it; it = it->next) {
        wf_dtype t;
        if (!it->string || wf_dtype_parse(it->string, &t) != WF_OK)
            return wf_errorf(WF_FORMAT, "%s: unknown dtype \"%s\"", ctx, it->string ? it->string : "?");
        double v = 0;
        wf_status st = wf_json_get_num(obj, ctx, it->string, 1, 0, 1e18, &v);
        if (st != WF_OK)
            return st;
        flops[t] = v;
    }
    return WF_OK;
}

/* A fixed-length array of numbers in [lo, hi]. */
static wf_status read_nums(const cJSON *a, const char *ctx, int n, double lo, double hi, double *out)
{
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return wf_errorf(WF_FORMAT, "%s: expected an array of %d numbers", ctx, n);
    int i = 0;
    for (const cJSON *it = a->child; it; it = it->next, i++) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= lo && it->valuedouble <= hi))
            return wf_errorf(WF_FORMAT, "%s[%d]: expected a number in [%g, %g]", ctx, i, lo, hi);
        out[i] = it->valuedouble;
    }
    return WF_OK;
}

/* The measured-kernel model (docs/cluster-format.md, "kernels"): optional;
 * without it the device is costed by its FLOPs table. */
static wf_status read_kernels(const cJSON *j, const char *ctx, wf_device *d)
{
    wf_status st;
    double sms = 0;
    if ((st = wf_json_get_num(j, ctx, "kernel_model", 0, 0, 1, &d->kernel_model)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "sms", 0, 0, 100000, &sms)) != WF_OK)
        return st;
    d->sms = (int)sms;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kernels");
    if (!k)
        return WF_OK;
    static const char *const keys[] = {"gemm", "attn", "mem", "opt_eff", NULL};
    char sub[400];
    snprintf(sub, sizeof sub, "%s.kernels", ctx);
    if ((st = wf_json_check_keys(k, sub, keys)) != WF_OK ||
        (st = wf_json_get_num(k, sub, "opt_eff", 0, 0, 1, &d->opt_eff)) != WF_OK)
        return st;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(k, "gemm"), *a = cJSON_GetObjectItemCaseSensitive(k, "attn"),
                *m = cJSON_GetObjectItemCaseSensitive(k, "mem");
    if (!cJSON_IsArray(g) || cJSON_GetArraySize(g) != WF_GEMM_KINDS || !cJSON_IsArray(a) ||
        cJSON_GetArraySize(a) != WF_ATTN_IMPL_COUNT || !cJSON_IsArray(m) || cJSON_GetArraySize(m) != WF_MB_KINDS)
        return wf_errorf(WF_FORMAT, "%s: expected gemm (%d rows), attn (%d rows) and mem (%d rows) arrays", sub,
                         WF_GEMM_KINDS, WF_ATTN_IMPL_COUNT, WF_MB_KINDS);
    for (int i = 0; i < WF_GEMM_KINDS; i++) {
        double v[8] = {0};
        snprintf(sub, sizeof sub, "%s.kernels.gemm[%d]", ctx, i);
        /* An 8th number, feed_bps, where the fit carries the smaller tiles. */
        const cJSON *row = cJSON_GetArrayItem(g, i);
        int n = cJSON_IsArray(row) ? cJSON_GetArraySize(row) : 0;
        if (n != 7 && n != 8)
            return wf_errorf(WF_FORMAT, "%s: expected an array of 7 or 8 numbers", sub);
        if ((st = read_nums(row, sub, n, 0, n == 8 ? 1e15 : 1e6, v)) != WF_OK)
            return st;
        if (v[2] > 1 || v[5] > 1 || v[6] > 1)
            return wf_errorf(WF_FORMAT, "%s: eff and quant must be in [0, 1], launch_s below 1", sub);
        if (v[0] > 1e6 || v[1] > 1e6 || v[3] > 1e6 || v[4] > 1e6)
            return wf_errorf(WF_FORMAT, "%s: tile sides and K steps must be at most 1e6", sub);
        wf_gemm_fit f = {(int)v[0], (int)v[1], v[2], v[3], v[4], v[5], v[6]};
        d->gemm[i] = f;
        d->gemm_feed_bps[i] = v[7];
    }
    for (int i = 0; i < WF_ATTN_IMPL_COUNT; i++) {
        double v[2 * WF_ATTN_HEAD_DIMS + 4];
        snprintf(sub, sizeof sub, "%s.kernels.attn[%d]", ctx, i);
        if ((st = read_nums(cJSON_GetArrayItem(a, i), sub, 2 * WF_ATTN_HEAD_DIMS + 4, 0, 1e3, v)) != WF_OK)
            return st;
        for (int h = 0; h < WF_ATTN_HEAD_DIMS; h++) {
            if (v[h] > 1 || v[WF_ATTN_HEAD_DIMS + h] > 1)
                return wf_errorf(WF_FORMAT, "%s: efficiencies must be in [0, 1]", sub);
            d->attn[i].eff_fwd[h] = v[h];
            d->attn[i].eff_bwd[h] = v[WF_ATTN_HEAD_DIMS + h];
        }
        d->attn[i].ramp_fwd = v[2 * WF_ATTN_HEAD_DIMS];
        d->attn[i].ramp_bwd = v[2 * WF_ATTN_HEAD_DIMS + 1];
        d->attn[i].launch_fwd_s = v[2 * WF_ATTN_HEAD_DIMS + 2];
        d->attn[i].launch_bwd_s = v[2 * WF_ATTN_HEAD_DIMS + 3];
    }
    for (int i = 0; i < WF_MB_KINDS; i++) {
        snprintf(sub, sizeof sub, "%s.kernels.mem[%d]", ctx, i);
        if ((st = read_nums(cJSON_GetArrayItem(m, i), sub, 2, 0, 1, d->mb_eff[i])) != WF_OK)
            return st;
    }
    return WF_OK;
}

static cJSON *nums_json(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static void kernels_json(cJSON *d, const wf_device *dev)
{
    cJSON_AddNumberToObject(d, "kernel_model", dev->kernel_model);
    cJSON_AddNumberToObject(d, "sms", dev->sms);
    if (dev->sms <= 0)
        return;
    cJSON *k = cJSON_AddObjectToObject(d, "kernels");
    if (!k)
        return;
    cJSON *g = cJSON_AddArrayToObject(k, "gemm");
    for (int i = 0; g && i < WF_GEMM_KINDS; i++) {
        const wf_gemm_fit *f = &dev->gemm[i];
        double v[8] = {f->tile_m, f->tile_n, f->eff, f->ramp_k, f->wave_k, f->quant, f->launch_s,
                       dev->gemm_feed_bps[i]};
        cJSON_AddItemToArray(g, nums_json(v, v[7] > 0 ? 8 : 7));
    }
    cJSON *a = cJSON_AddArrayToObject(k, "attn");
    for (int i = 0; a && i < WF_ATTN_IMPL_COUNT; i++) {
        const wf_attn_fit *f = &dev->attn[i];
        double v[2 * WF_ATTN_HEAD_DIMS + 4];
        for (int h = 0; h < WF_ATTN_HEAD_DIMS; h++) {
            v[h] = f->eff_fwd[h];
            v[WF_ATTN_HEAD_DIMS + h] = f->eff_bwd[h];
        }
        v[2 * WF_ATTN_HEAD_DIMS] = f->ramp_fwd;
        v[2 * WF_ATTN_HEAD_DIMS + 1] = f->ramp_bwd;
        v[2 * WF_ATTN_HEAD_DIMS + 2] = f->launch_fwd_s;
        v[2 * WF_ATTN_HEAD_DIMS + 3] = f->launch_bwd_s;
        cJSON_AddItemToArray(a, nums_json(v, 2 * WF_ATTN_HEAD_DIMS + 4));
    }
    cJSON *m = cJSON_AddArrayToObject(k, "mem");
    for (int i = 0; m && i < WF_MB_KINDS; i++)
        cJSON_AddItemToArray(m, nums_json(dev->mb_eff[i], 2));
    cJSON_AddNumberToObject(k, "opt_eff", dev->opt_eff);
}

static wf_status read_device(const cJSON *j, const char *ctx, wf_device *d)
{
    static const char *const keys[] = {"name",       "matrix_flops", "vector_flops", "mem_bytes",
                                       "mem_bw_bps", "mem_eff",      "vector_eff",   "matrix_eff",
                                       "op_overhead_s", "fp8_flops", "fp8_eff", "kernel_model", "sms",
                                       "kernels", NULL};
    wf_status st = wf_json_check_keys(j, ctx, keys);
    if (st != WF_OK)
        return st;
    const char *name = NULL;
    char sub[320];
    if ((st = wf_json_get_str(j, ctx, "name", 1, &name)) != WF_OK)
        return st;
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(sub, sizeof sub, "%s.matrix_flops", ctx);
    const cJSON *mf = cJSON_GetObjectItemCaseSensitive(j, "matrix_flops");
    if (!mf)
        return wf_errorf(WF_FORMAT, "%s: missing field \"matrix_flops\"", ctx);
    if ((st = read_flops(mf, sub, d->matrix_flops)) != WF_OK)
        return st;
    snprintf(sub, sizeof sub, "%s.vector_flops", ctx);
    const cJSON *vf = cJSON_GetObjectItemCaseSensitive(j, "vector_flops");
    if (!vf)
        return wf_errorf(WF_FORMAT, "%s: missing field \"vector_flops\"", ctx);
    if ((st = read_flops(vf, sub, d->vector_flops)) != WF_OK)
        return st;
    if ((st = wf_json_get_num(j, ctx, "mem_bytes", 1, 1e6, 1e15, &d->mem_bytes)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "mem_bw_bps", 1, 1e6, 1e15, &d->mem_bw_bps)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "mem_eff", 1, 1e-3, 1, &d->mem_eff)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "vector_eff", 1, 1e-3, 1, &d->vector_eff)) != WF_OK)
        return st;
    d->op_overhead_s = 0;
    if ((st = wf_json_get_num(j, ctx, "op_overhead_s", 0, 0, 1, &d->op_overhead_s)) != WF_OK)
        return st;
    d->fp8_flops = 0;
    d->fp8_eff = 1;
    if ((st = wf_json_get_num(j, ctx, "fp8_flops", 0, 0, 1e18, &d->fp8_flops)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "fp8_eff", 0, 1e-3, 1, &d->fp8_eff)) != WF_OK)
        return st;
    if ((st = read_kernels(j, ctx, d)) != WF_OK)
        return st;
    const cJSON *me = cJSON_GetObjectItemCaseSensitive(j, "matrix_eff");
    if (!cJSON_IsArray(me))
        return wf_errorf(WF_FORMAT, "%s.matrix_eff: expected an array of {min_flops, eff}", ctx);
    int n = cJSON_GetArraySize(me);
    if (n < 1 || n > WF_MAX_EFF)
        return wf_errorf(WF_FORMAT, "%s.matrix_eff: %d points, expected 1..%d", ctx, n, WF_MAX_EFF);
    d->neff = n;
    for (int i = 0; i < n; i++) {
        static const char *const pkeys[] = {"min_flops", "eff", NULL};
        const cJSON *p = cJSON_GetArrayItem(me, i);
        snprintf(sub, sizeof sub, "%s.matrix_eff[%d]", ctx, i);
        if ((st = wf_json_check_keys(p, sub, pkeys)) != WF_OK ||
            (st = wf_json_get_num(p, sub, "min_flops", 1, 0, 1e18, &d->matrix_eff[i].min_flops)) != WF_OK ||
            (st = wf_json_get_num(p, sub, "eff", 1, 1e-3, 1, &d->matrix_eff[i].eff)) != WF_OK)
            return st;
    }
    return WF_OK;
}

static wf_status read_level(const cJSON *j, const char *ctx, wf_level *v)
{
    static const char *const keys[] = {"name", "size", "bw_bps", "latency_s", "eff", NULL};
    wf_status st = wf_json_check_keys(j, ctx, keys);
    if (st != WF_OK)
        return st;
    const char *name = NULL;
    if ((st = wf_json_get_str(j, ctx, "name", 1, &name)) != WF_OK)
        return st;
    if (!name[0] || strlen(name) >= sizeof v->name)
        return wf_errorf(WF_FORMAT, "%s.name: '%s' must be 1..%zu characters", ctx, name,
                         sizeof v->name - 1);
    snprintf(v->name, sizeof v->name, "%s", name);
    if ((st = wf_json_get_int(j, ctx, "size", 1, 1, 1 << 24, &v->size)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "bw_bps", 1, 1e3, 1e15, &v->bw_bps)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "latency_s", 1, 0, 1, &v->latency_s)) != WF_OK)
        return st;
    v->eff = 1.0;
    return wf_json_get_num(j, ctx, "eff", 0, 1e-3, 1, &v->eff);
}

wf_status wf_cluster_from_json(const cJSON *j, const char *ctx, wf_cluster *out)
{
    static const char *const keys[] = {"format",           "version",    "name",
                                       "device",           "levels",     "overlap_slowdown",
                                       "reduce_bps",       "mem_reserved_bytes", "grad_bytes",
                                       "p2p_overhead_s",   "op_gap_s",   "coll_nccl",  "measured",   NULL};
    memset(out, 0, sizeof *out);
    wf_status st = wf_json_check_keys(j, ctx, keys);
    if (st != WF_OK)
        return st;
    const char *fmt = NULL;
    int64_t version = 0;
    if ((st = wf_json_get_str(j, ctx, "format", 1, &fmt)) != WF_OK)
        return st;
    if (strcmp(fmt, FORMAT_NAME) != 0)
        return wf_errorf(WF_FORMAT, "%s.format: \"%s\", expected \"%s\"", ctx, fmt, FORMAT_NAME);
    if ((st = wf_json_get_int(j, ctx, "version", 1, 1, 1000, &version)) != WF_OK)
        return st;
    if (version != FORMAT_VERSION)
        return wf_errorf(WF_FORMAT, "%s.version: %lld, this weft reads version %d", ctx,
                         (long long)version, FORMAT_VERSION);
    const char *name = "";
    if ((st = wf_json_get_str(j, ctx, "name", 0, &name)) != WF_OK)
        return st;
    snprintf(out->name, sizeof out->name, "%s", name);

    char sub[192];
    snprintf(sub, sizeof sub, "%s.device", ctx);
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(j, "device");
    if (!dev)
        return wf_errorf(WF_FORMAT, "%s: missing field \"device\"", ctx);
    if ((st = read_device(dev, sub, &out->dev)) != WF_OK)
        return st;
    const cJSON *levels = cJSON_GetObjectItemCaseSensitive(j, "levels");
    if (!cJSON_IsArray(levels))
        return wf_errorf(WF_FORMAT, "%s.levels: expected an array (innermost level first)", ctx);
    int n = cJSON_GetArraySize(levels);
    if (n < 1 || n > WF_MAX_LEVELS)
        return wf_errorf(WF_FORMAT, "%s.levels: %d levels, expected 1..%d", ctx, n, WF_MAX_LEVELS);
    out->nlevels = n;
    for (int l = 0; l < n; l++) {
        snprintf(sub, sizeof sub, "%s.levels[%d]", ctx, l);
        if ((st = read_level(cJSON_GetArrayItem(levels, l), sub, &out->level[l])) != WF_OK)
            return st;
        for (int k = 0; k < l; k++)
            if (strcmp(out->level[k].name, out->level[l].name) == 0)
                return wf_errorf(WF_FORMAT, "%s.name: level name '%s' used twice", sub,
                                 out->level[l].name);
    }
    out->overlap_slowdown = 1.0;
    out->grad_bytes = 2;
    if ((st = wf_json_get_num(j, ctx, "overlap_slowdown", 0, 1, 10, &out->overlap_slowdown)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "reduce_bps", 0, 0, 1e15, &out->reduce_bps)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "mem_reserved_bytes", 0, 0, 1e15, &out->mem_reserved_bytes)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "grad_bytes", 0, 2, 4, &out->grad_bytes)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "p2p_overhead_s", 0, 0, 1, &out->p2p_overhead_s)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "op_gap_s", 0, 0, 1, &out->op_gap_s)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "coll_nccl", 0, 0, 1, &out->coll_nccl)) != WF_OK)
        return st;
    /* The points `weft calibrate --gpu` measured: checked here, read by
     * wf_cluster_measured_from_json where they are used (they are not part
     * of wf_cluster). */
    const cJSON *measured = cJSON_GetObjectItemCaseSensitive(j, "measured");
    if (measured) {
        wf_cluster_measured *m = malloc(sizeof *m);
        if (!m)
            return wf_errorf(WF_NOMEM, "%s.measured: out of memory", ctx);
        snprintf(sub, sizeof sub, "%s.measured", ctx);
        st = wf_cluster_measured_from_json(measured, sub, m);
        free(m);
        if (st != WF_OK)
            return st;
    }
    st = wf_cluster_check(out);
    if (st != WF_OK) {
        /* Re-word the check's message with the file as context. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", wf_last_error());
        return wf_errorf(st, "%s: %s", ctx, msg);
    }
    return WF_OK;
}

static cJSON *flops_json(const double flops[WF_DTYPE_COUNT])
{
    cJSON *o = cJSON_CreateObject();
    for (int t = 0; t < WF_DTYPE_COUNT && o; t++)
        if (flops[t] > 0)
            cJSON_AddNumberToObject(o, wf_dtype_name((wf_dtype)t), flops[t]);
    return o;
}

cJSON *wf_cluster_to_json(const wf_cluster *c)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "format", FORMAT_NAME);
    cJSON_AddNumberToObject(j, "version", FORMAT_VERSION);
    cJSON_AddStringToObject(j, "name", c->name);
    cJSON *d = cJSON_AddObjectToObject(j, "device");
    if (d) {
        cJSON_AddStringToObject(d, "name", c->dev.name);
        cJSON_AddItemToObject(d, "matrix_flops", flops_json(c->dev.matrix_flops));
        cJSON_AddItemToObject(d, "vector_flops", flops_json(c->dev.vector_flops));
        cJSON_AddNumberToObject(d, "mem_bytes", c->dev.mem_bytes);
        cJSON_AddNumberToObject(d, "mem_bw_bps", c->dev.mem_bw_bps);
        cJSON_AddNumberToObject(d, "mem_eff", c->dev.mem_eff);
        cJSON_AddNumberToObject(d, "vector_eff", c->dev.vector_eff);
        cJSON_AddNumberToObject(d, "op_overhead_s", c->dev.op_overhead_s);
        cJSON_AddNumberToObject(d, "fp8_flops", c->dev.fp8_flops);
        cJSON_AddNumberToObject(d, "fp8_eff", c->dev.fp8_eff);
        kernels_json(d, &c->dev);
        cJSON *me = cJSON_AddArrayToObject(d, "matrix_eff");
        for (int i = 0; me && i < c->dev.neff; i++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "min_flops", c->dev.matrix_eff[i].min_flops);
            cJSON_AddNumberToObject(p, "eff", c->dev.matrix_eff[i].eff);
            cJSON_AddItemToArray(me, p);
        }
    }
    cJSON *ls = cJSON_AddArrayToObject(j, "levels");
    for (int l = 0; ls && l < c->nlevels; l++) {
        cJSON *v = cJSON_CreateObject();
        cJSON_AddStringToObject(v, "name", c->level[l].name);
        cJSON_AddNumberToObject(v, "size", (double)c->level[l].size);
        cJSON_AddNumberToObject(v, "bw_bps", c->level[l].bw_bps);
        cJSON_AddNumberToObject(v, "latency_s", c->level[l].latency_s);
        cJSON_AddNumberToObject(v, "eff", c->level[l].eff);
        cJSON_AddItemToArray(ls, v);
    }
    cJSON_AddNumberToObject(j, "overlap_slowdown", c->overlap_slowdown);
    cJSON_AddNumberToObject(j, "reduce_bps", c->reduce_bps);
    cJSON_AddNumberToObject(j, "mem_reserved_bytes", c->mem_reserved_bytes);
    cJSON_AddNumberToObject(j, "grad_bytes", c->grad_bytes);
    cJSON_AddNumberToObject(j, "p2p_overhead_s", c->p2p_overhead_s);
    cJSON_AddNumberToObject(j, "op_gap_s", c->op_gap_s);
    cJSON_AddNumberToObject(j, "coll_nccl", c->coll_nccl);
    return j;
}
