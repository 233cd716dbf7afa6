/* weft plan: the plan value, its string form ("dp=8,tp=4,...", every key
 * optional), the canonical string, gradient-communication schedules
 * ("ddp:25"), and plan JSON files (docs/plan-format.md).
 *
 * Parsing checks each value's range and names the bad key; whether a plan
 * fits a model, a cluster and a batch is wf_plan_validate's job. */
#include "weft/plan.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLAN_FORMAT "weft-plan"
#define PLAN_VERSION 1
#define MIB (1024.0 * 1024.0)

static const char *const COMM_NAMES[WF_COMM_COUNT] = {
#define WF_X(e, name) name,
    WF_COMM_LIST(WF_X)
#undef WF_X
};

const char *wf_comm_name(wf_comm_kind k)
{
    if ((int)k < 0 || k >= WF_COMM_COUNT)
        return "?";
    return COMM_NAMES[k];
}

/* Schedules that group gradients by a size threshold accept ":MB". */
static int comm_takes_threshold(wf_comm_kind k)
{
    return k == WF_COMM_DDP || k == WF_COMM_HOROVOD || k == WF_COMM_DEAR ||
           k == WF_COMM_BYTESCHEDULER;
}

wf_status wf_comm_parse(const char *text, wf_comm_sched *out)
{
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "empty comm schedule (one of wfbp, ddp[:MB], horovod[:MB], "
                                   "bytescheduler[:MB], mgwfbp, dear[:MB], auto)");
    const char *colon = strchr(text, ':');
    size_t n = colon ? (size_t)(colon - text) : strlen(text);
    for (int k = 0; k < WF_COMM_COUNT; k++) {
        if (strlen(COMM_NAMES[k]) != n || strncmp(text, COMM_NAMES[k], n) != 0)
            continue;
        out->kind = (wf_comm_kind)k;
        out->threshold_bytes = 0;
        if (!colon)
            return WF_OK;
        if (!comm_takes_threshold(out->kind))
            return wf_errorf(WF_INVAL, "comm schedule '%s': %s takes no size threshold", text,
                             COMM_NAMES[k]);
        double mb = 0;
        wf_status st = wf_parse_num(colon + 1, "comm threshold (MB)", 1e-3, 1e6, &mb);
        if (st != WF_OK)
            return st;
        out->threshold_bytes = mb * MIB;
        return WF_OK;
    }
    return wf_errorf(WF_INVAL, "unknown comm schedule '%s' (one of wfbp, ddp[:MB], horovod[:MB], "
                               "bytescheduler[:MB], mgwfbp, dear[:MB], auto)", text);
}

const char *wf_recompute_name(wf_recompute r)
{
    switch (r) {
    case WF_RECOMPUTE_NONE:
        return "none";
    case WF_RECOMPUTE_SELECTIVE:
        return "selective";
    case WF_RECOMPUTE_FULL:
        return "full";
    }
    return "?";
}

const char *wf_pipe_name(wf_pipe_kind k)
{
    return k == WF_PIPE_GPIPE ? "gpipe" : k == WF_PIPE_1F1B ? "1f1b" : "?";
}

void wf_plan_default(wf_plan *p)
{
    memset(p, 0, sizeof *p);
    p->dp = p->tp = p->pp = p->mbs = p->vpp = 1;
    p->recompute = WF_RECOMPUTE_NONE;
    p->sp = 0;
    p->zero = 0;
    p->overlap = 1;
    p->pipe = WF_PIPE_1F1B;
    p->comm.kind = WF_COMM_DDP;
    p->comm.threshold_bytes = 0;
}

int64_t wf_plan_devices(const wf_plan *p)
{
    return (int64_t)p->dp * (int64_t)p->tp * (int64_t)p->pp;
}

#define PLAN_KEYS "dp, tp, pp, mbs, vpp, recompute, sp, zero, overlap, pipe, comm"

static wf_status get_int_key(wf_spec *s, const char *key, int64_t lo, int64_t hi, int *dst)
{
    int64_t v = 0;
    int r = wf_spec_get_int(s, key, lo, hi, &v);
    if (r < 0)
        return (wf_status)r;
    if (r == 1)
        *dst = (int)v;
    return WF_OK;
}

static wf_status parse_string(const char *text, wf_plan *out)
{
    wf_spec s;
    wf_status st = wf_spec_parse(text, &s);
    if (st != WF_OK)
        return st;
    if (s.name[0])
        return wf_errorf(WF_INVAL, "plan '%s': expected key=value pairs (%s), or a plan file",
                         text, PLAN_KEYS);
    wf_plan p;
    wf_plan_default(&p);
    if ((st = get_int_key(&s, "dp", 1, 1 << 24, &p.dp)) != WF_OK ||
        (st = get_int_key(&s, "tp", 1, 1 << 16, &p.tp)) != WF_OK ||
        (st = get_int_key(&s, "pp", 1, 1 << 16, &p.pp)) != WF_OK ||
        (st = get_int_key(&s, "mbs", 1, 1 << 24, &p.mbs)) != WF_OK ||
        (st = get_int_key(&s, "vpp", 1, 1 << 10, &p.vpp)) != WF_OK ||
        (st = get_int_key(&s, "sp", 0, 1, &p.sp)) != WF_OK ||
        (st = get_int_key(&s, "zero", 0, 3, &p.zero)) != WF_OK ||
        (st = get_int_key(&s, "overlap", 0, 1, &p.overlap)) != WF_OK)
        return st;
    const char *v = NULL;
    if (wf_spec_get_str(&s, "recompute", &v) == 1) {
        if (strcmp(v, "none") == 0)
            p.recompute = WF_RECOMPUTE_NONE;
        else if (strcmp(v, "selective") == 0)
            p.recompute = WF_RECOMPUTE_SELECTIVE;
        else if (strcmp(v, "full") == 0)
            p.recompute = WF_RECOMPUTE_FULL;
        else
            return wf_errorf(WF_INVAL, "recompute=%s: expected none, selective or full", v);
    }
    if (wf_spec_get_str(&s, "pipe", &v) == 1) {
        if (strcmp(v, "1f1b") == 0)
            p.pipe = WF_PIPE_1F1B;
        else if (strcmp(v, "gpipe") == 0)
            p.pipe = WF_PIPE_GPIPE;
        else
            return wf_errorf(WF_INVAL, "pipe=%s: expected 1f1b or gpipe", v);
    }
    if (wf_spec_get_str(&s, "comm", &v) == 1 && (st = wf_comm_parse(v, &p.comm)) != WF_OK)
        return st;
    if ((st = wf_spec_check_unused(&s, "plan", PLAN_KEYS)) != WF_OK)
        return st;
    *out = p;
    return WF_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

wf_status wf_plan_parse(const char *text, wf_plan *out)
{
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "empty plan (expected %s=... pairs, or a plan file)", "dp");
    if (!strchr(text, '=') && (ends_with(text, ".json") || access(text, F_OK) == 0))
        return wf_plan_read_file(text, out, NULL);
    if (!strchr(text, '='))
        return wf_errorf(WF_INVAL, "plan '%s': not a plan string (key=value pairs: %s) and no "
                                   "such file", text, PLAN_KEYS);
    return parse_string(text, out);
}

int wf_plan_format(const wf_plan *p, char *buf, size_t cap)
{
    char comm[64];
    if (p->comm.threshold_bytes > 0)
        snprintf(comm, sizeof comm, "%s:%.15g", wf_comm_name(p->comm.kind),
                 p->comm.threshold_bytes / MIB);
    else
        snprintf(comm, sizeof comm, "%s", wf_comm_name(p->comm.kind));
    return snprintf(buf, cap,
                    "dp=%d,tp=%d,pp=%d,mbs=%d,vpp=%d,recompute=%s,sp=%d,zero=%d,overlap=%d,"
                    "pipe=%s,comm=%s",
                    p->dp, p->tp, p->pp, p->mbs, p->vpp, wf_recompute_name(p->recompute), p->sp,
                    p->zero, p->overlap, wf_pipe_name(p->pipe), comm);
}

/* ---- files ------------------------------------------------------------------------ */

cJSON *wf_plan_to_json(const wf_plan *p, const wf_plan_meta *meta, const cJSON *estimate)
{
    char text[256];
    wf_plan_format(p, text, sizeof text);
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "format", PLAN_FORMAT);
    cJSON_AddNumberToObject(j, "version", PLAN_VERSION);
    cJSON_AddStringToObject(j, "plan", text);
    if (meta && meta->model[0])
        cJSON_AddStringToObject(j, "model", meta->model);
    if (meta && meta->cluster[0])
        cJSON_AddStringToObject(j, "cluster", meta->cluster);
    if (meta && meta->batch > 0)
        cJSON_AddNumberToObject(j, "batch", (double)meta->batch);
    if (estimate) {
        cJSON *e = cJSON_Duplicate(estimate, 1);
        if (!e) {
            cJSON_Delete(j);
            return NULL;
        }
        cJSON_AddItemToObject(j, "estimate", e);
    }
    return j;
}

wf_status wf_plan_from_json(const cJSON *j, const char *ctx, wf_plan *out, wf_plan_meta *meta)
{
    static const char *const keys[] = {"format", "version", "plan",     "model",
                                       "cluster", "batch",  "estimate", NULL};
    wf_status st = wf_json_check_keys(j, ctx, keys);
    if (st != WF_OK)
        return st;
    const char *fmt = NULL, *text = NULL, *model = "", *cluster = "";
    int64_t version = 0, batch = 0;
    if ((st = wf_json_get_str(j, ctx, "format", 1, &fmt)) != WF_OK)
        return st;
    if (strcmp(fmt, PLAN_FORMAT) != 0)
        return wf_errorf(WF_FORMAT, "%s.format: \"%s\", expected \"%s\"", ctx, fmt, PLAN_FORMAT);
    if ((st = wf_json_get_int(j, ctx, "version", 1, 1, 1000, &version)) != WF_OK)
        return st;
    if (version != PLAN_VERSION)
        return wf_errorf(WF_FORMAT, "%s.version: %lld, this weft reads version %d", ctx,
                         (long long)version, PLAN_VERSION);
    if ((st = wf_json_get_str(j, ctx, "plan", 1, &text)) != WF_OK ||
        (st = wf_json_get_str(j, ctx, "model", 0, &model)) != WF_OK ||
        (st = wf_json_get_str(j, ctx, "cluster", 0, &cluster)) != WF_OK ||
        (st = wf_json_get_int(j, ctx, "batch", 0, 1, (int64_t)1 << 40, &batch)) != WF_OK)
        return st;
    const cJSON *est = cJSON_GetObjectItemCaseSensitive(j, "estimate");
    if (est && !cJSON_IsObject(est))
        return wf_errorf(WF_FORMAT, "%s.estimate: expected an object", ctx);
    if (!strchr(text, '='))
        return wf_errorf(WF_FORMAT, "%s.plan: '%s' is not a plan string (key=value pairs)", ctx, text);
    if ((st = parse_string(text, out)) != WF_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", wf_last_error());
        return wf_errorf(WF_FORMAT, "%s.plan: %s", ctx, msg);
    }
    if (meta) {
        memset(meta, 0, sizeof *meta);
        if (strlen(model) >= sizeof meta->model || strlen(cluster) >= sizeof meta->cluster)
            return wf_errorf(WF_FORMAT, "%s: model or cluster name longer than %zu characters", ctx,
                             sizeof meta->model - 1);
        snprintf(meta->model, sizeof meta->model, "%s", model);
        snprintf(meta->cluster, sizeof meta->cluster, "%s", cluster);
        meta->batch = batch;
    }
    return WF_OK;
}

wf_status wf_plan_read_file(const char *path, wf_plan *out, wf_plan_meta *meta)
{
    cJSON *j = NULL;
    wf_status st = wf_json_read_file(path, &j);
    if (st != WF_OK)
        return st;
    st = wf_plan_from_json(j, path, out, meta);
    cJSON_Delete(j);
    return st;
}

wf_status wf_plan_write_file(const char *path, const wf_plan *p, const wf_plan_meta *meta,
                             const cJSON *estimate)
{
    cJSON *j = wf_plan_to_json(p, meta, estimate);
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory writing plan file %s", path);
    wf_status st = wf_json_write_file(path, j);
    cJSON_Delete(j);
    return st;
}
