/* Chrome trace-event output of a simulation (opens in Perfetto and
 * chrome://tracing): one complete ("X") event per task per resource it holds,
 * with ts and dur in microseconds, pid = device (links in one extra process),
 * tid = 0 for the compute stream and 1 + c for channel c; metadata ("M")
 * events name every process and thread; counter ("C") events draw each
 * device's memory over time. Markers and timers (tasks holding no resource)
 * are left out. */
#include "sim/sim-impl.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static cJSON *meta(const char *what, int pid, int tid, const char *key, const char *sval, double nval)
{
    cJSON *e = cJSON_CreateObject();
    if (!e)
        return NULL;
    cJSON_AddStringToObject(e, "name", what);
    cJSON_AddStringToObject(e, "ph", "M");
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    cJSON *args = cJSON_AddObjectToObject(e, "args");
    if (sval)
        cJSON_AddStringToObject(args, key, sval);
    else
        cJSON_AddNumberToObject(args, key, nval);
    return e;
}

static double us(wf_ns t)
{
    return (double)t / 1e3;
}

cJSON *wf_sim_trace_json(const wf_sim *s)
{
    if (!s->ran)
        return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *ev = cJSON_AddArrayToObject(root, "traceEvents");
    if (!root || !ev) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    int link_pid = s->ndev;
    char buf[192];
    for (int d = 0; d < s->ndev; d++) {
        const sim_dev *dv = &s->dev[d];
        if (dv->replicas > 1)
            snprintf(buf, sizeof buf, "%s (x%lld devices)", dv->name, (long long)dv->replicas);
        else
            snprintf(buf, sizeof buf, "%s", dv->name);
        cJSON_AddItemToArray(ev, meta("process_name", d, 0, "name", buf, 0));
        cJSON_AddItemToArray(ev, meta("process_sort_index", d, 0, "sort_index", NULL, d));
    }
    if (s->nlink > 0) {
        cJSON_AddItemToArray(ev, meta("process_name", link_pid, 0, "name", "links", 0));
        cJSON_AddItemToArray(ev, meta("process_sort_index", link_pid, 0, "sort_index", NULL, link_pid));
    }
    for (int r = 0; r < s->nres; r++) {
        const sim_res *rs = &s->res[r];
        int pid = rs->dev >= 0 ? rs->dev : link_pid;
        int tid = rs->kind == RES_COMPUTE ? 0 : rs->kind == RES_CHANNEL ? 1 + rs->idx : rs->idx;
        cJSON_AddItemToArray(ev, meta("thread_name", pid, tid, "name", rs->name, 0));
        cJSON_AddItemToArray(ev, meta("thread_sort_index", pid, tid, "sort_index", NULL, tid));
    }
    for (int i = 0; i < s->ntask; i++) {
        const sim_task *t = &s->task[i];
        for (int k = 0; k < t->nres; k++) {
            const sim_res *rs = &s->res[s->resl[t->res_off + k]];
            int pid = rs->dev >= 0 ? rs->dev : link_pid;
            int tid = rs->kind == RES_COMPUTE ? 0 : rs->kind == RES_CHANNEL ? 1 + rs->idx : rs->idx;
            cJSON *e = cJSON_CreateObject();
            if (!e)
                goto oom;
            cJSON_AddStringToObject(e, "name", t->name);
            cJSON_AddStringToObject(e, "cat", wf_sim_cat_name((wf_sim_cat)t->cat));
            cJSON_AddStringToObject(e, "ph", "X");
            cJSON_AddNumberToObject(e, "ts", us(t->start));
            cJSON_AddNumberToObject(e, "dur", us(t->end - t->start));
            cJSON_AddNumberToObject(e, "pid", pid);
            cJSON_AddNumberToObject(e, "tid", tid);
            cJSON *args = cJSON_AddObjectToObject(e, "args");
            cJSON_AddNumberToObject(args, "task", i);
            if (t->mb >= 0)
                cJSON_AddNumberToObject(args, "mb", t->mb);
            if (t->layer >= 0)
                cJSON_AddNumberToObject(args, "layer", t->layer);
            if (t->chunk >= 0)
                cJSON_AddNumberToObject(args, "chunk", t->chunk);
            if (t->bytes >= 0)
                cJSON_AddNumberToObject(args, "bytes", t->bytes);
            cJSON_AddItemToArray(ev, e);
        }
    }
    /* Memory counters, only for devices whose memory ever changes. */
    for (int d = 0; d < s->ndev; d++) {
        int changes = 0;
        for (int i = 0; i < s->nmem; i++)
            changes += s->mem[i].dev == d && s->mem[i].t > 0;
        if (!changes)
            continue;
        for (int i = 0; i < s->nmem; i++) {
            const sim_memrec *m = &s->mem[i];
            if (m->dev != d)
                continue;
            cJSON *e = cJSON_CreateObject();
            if (!e)
                goto oom;
            cJSON_AddStringToObject(e, "name", "memory");
            cJSON_AddStringToObject(e, "ph", "C");
            cJSON_AddNumberToObject(e, "ts", us(m->t));
            cJSON_AddNumberToObject(e, "pid", d);
            cJSON *args = cJSON_AddObjectToObject(e, "args");
            cJSON_AddNumberToObject(args, "bytes", (double)m->bytes);
            cJSON_AddItemToArray(ev, e);
        }
    }
    return root;
oom:
    cJSON_Delete(root);
    return NULL;
}

wf_status wf_sim_write_trace(const wf_sim *s, const char *path)
{
    if (!s->ran)
        return wf_errorf(WF_INVAL, "trace %s: the simulation has not run", path);
    cJSON *j = wf_sim_trace_json(s);
    if (!j)
        return wf_errorf(WF_NOMEM, "out of memory building the trace for %s", path);
    char *text = wf_json_print(j, 0);
    cJSON_Delete(j);
    if (!text)
        return wf_errorf(WF_NOMEM, "out of memory printing the trace for %s", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* replaces the terminator: written with its length */
    wf_status st = wf_file_write_atomic(path, text, n + 1);
    free(text);
    return st;
}
