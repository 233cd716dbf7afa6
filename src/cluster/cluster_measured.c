/* weft cluster: the "measured" section of a cluster file -- the raw points of
 * `weft calibrate --gpu` (include/weft/cluster_measured.h). One table per
 * family of names (dtypes, collectives, scopes) drives parsing, printing and
 * the bus-bandwidth factors. */
#include "weft/cluster_measured.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    double in_bytes, out_bytes;
} MDTYPES[WF_MDT_COUNT] = {
    [WF_MDT_FP32] = {"fp32", 4, 4},
    [WF_MDT_TF32] = {"tf32", 4, 4},
    [WF_MDT_BF16] = {"bf16", 2, 2},
    [WF_MDT_FP16] = {"fp16", 2, 2},
    [WF_MDT_FP8] = {"fp8_e4m3", 1, 2},
};

const char *wf_mdtype_name(wf_mdtype t)
{
    return (int)t >= 0 && t < WF_MDT_COUNT ? MDTYPES[t].name : "?";
}

int wf_mdtype_parse(const char *name, wf_mdtype *out)
{
    for (int t = 0; t < WF_MDT_COUNT; t++)
        if (strcmp(name, MDTYPES[t].name) == 0) {
            *out = (wf_mdtype)t;
            return 1;
        }
    return 0;
}

double wf_mdtype_in_bytes(wf_mdtype t)
{
    return (int)t >= 0 && t < WF_MDT_COUNT ? MDTYPES[t].in_bytes : 4;
}

double wf_mdtype_out_bytes(wf_mdtype t)
{
    return (int)t >= 0 && t < WF_MDT_COUNT ? MDTYPES[t].out_bytes : 4;
}

/* nccl-tests (github.com/NVIDIA/nccl-tests at a0b82b2, src/<op>.cu, the
 * <Op>GetBw functions): busBw = algBw x factor with factor 2(n-1)/n for
 * all_reduce, (n-1)/n for reduce_scatter, all_gather and alltoall, 1 for
 * sendrecv. */
typedef enum { FACTOR_ALLREDUCE, FACTOR_SHARD, FACTOR_ONE } factor_kind;
static const struct {
    const char *name;
    factor_kind factor;
} MCOLLS[WF_MCOLL_COUNT] = {
    [WF_MCOLL_ALLREDUCE] = {"all_reduce", FACTOR_ALLREDUCE},
    [WF_MCOLL_REDUCE_SCATTER] = {"reduce_scatter", FACTOR_SHARD},
    [WF_MCOLL_ALLGATHER] = {"all_gather", FACTOR_SHARD},
    [WF_MCOLL_ALLTOALL] = {"alltoall", FACTOR_SHARD},
    [WF_MCOLL_SENDRECV] = {"sendrecv", FACTOR_ONE},
};

const char *wf_mcoll_name(wf_mcoll op)
{
    return (int)op >= 0 && op < WF_MCOLL_COUNT ? MCOLLS[op].name : "?";
}

int wf_mcoll_parse(const char *name, wf_mcoll *out)
{
    for (int t = 0; t < WF_MCOLL_COUNT; t++)
        if (strcmp(name, MCOLLS[t].name) == 0) {
            *out = (wf_mcoll)t;
            return 1;
        }
    return 0;
}

double wf_mcoll_busbw_factor(wf_mcoll op, int64_t ranks)
{
    double n = (double)(ranks > 0 ? ranks : 1);
    if ((int)op < 0 || op >= WF_MCOLL_COUNT)
        return 1;
    switch (MCOLLS[op].factor) {
    case FACTOR_ALLREDUCE:
        return 2 * (n - 1) / n;
    case FACTOR_SHARD:
        return (n - 1) / n;
    case FACTOR_ONE:
        break;
    }
    return 1;
}

static const char *const MSCOPES[WF_MSCOPE_COUNT] = {"node", "job"};

const char *wf_mscope_name(wf_mscope s)
{
    return (int)s >= 0 && s < WF_MSCOPE_COUNT ? MSCOPES[s] : "?";
}

/* ---- reading ----------------------------------------------------------------- */

static wf_status get_strbuf(const cJSON *j, const char *ctx, const char *key, int required, char *buf,
                            size_t cap)
{
    const char *s = NULL;
    wf_status st = wf_json_get_str(j, ctx, key, required, &s);
    if (st != WF_OK || !s)
        return st;
    if (strlen(s) >= cap)
        return wf_errorf(WF_FORMAT, "%s.%s: '%s' is longer than %zu characters", ctx, key, s, cap - 1);
    snprintf(buf, cap, "%s", s);
    return WF_OK;
}

static wf_status get_int32(const cJSON *j, const char *ctx, const char *key, int required, int64_t lo,
                           int64_t hi, int *out)
{
    int64_t v = *out;
    wf_status st = wf_json_get_int(j, ctx, key, required, lo, hi, &v);
    if (st == WF_OK)
        *out = (int)v;
    return st;
}

static const cJSON *get_array(const cJSON *j, const char *ctx, const char *key, int max, int *n, wf_status *st)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    *st = WF_OK;
    *n = 0;
    if (!a)
        return NULL;
    if (!cJSON_IsArray(a)) {
        *st = wf_errorf(WF_FORMAT, "%s.%s: expected an array", ctx, key);
        return NULL;
    }
    *n = cJSON_GetArraySize(a);
    if (*n > max) {
        *st = wf_errorf(WF_FORMAT, "%s.%s: %d points, at most %d", ctx, key, *n, max);
        return NULL;
    }
    return a;
}

static wf_status read_kernel(const cJSON *p, const char *ctx, wf_kernel_point *k)
{
    static const char *const keys[] = {"m", "n", "k", "dtype", "seconds", NULL};
    const char *dt = NULL;
    wf_status st;
    if ((st = wf_json_check_keys(p, ctx, keys)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "m", 1, 1, 1 << 24, &k->m)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "n", 1, 1, 1 << 24, &k->n)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "k", 1, 1, 1 << 24, &k->k)) != WF_OK ||
        (st = wf_json_get_str(p, ctx, "dtype", 1, &dt)) != WF_OK ||
        (st = wf_json_get_num(p, ctx, "seconds", 1, 1e-9, 1e4, &k->seconds)) != WF_OK)
        return st;
    if (!wf_mdtype_parse(dt, &k->dtype))
        return wf_errorf(WF_FORMAT, "%s.dtype: unknown dtype \"%s\" (fp32, tf32, bf16, fp16, fp8_e4m3)", ctx, dt);
    return WF_OK;
}

static wf_status read_attn(const cJSON *p, const char *ctx, wf_attn_point *a)
{
    static const char *const keys[] = {"batch", "heads", "kv_heads", "seq", "head_dim",
                                       "causal", "dtype", "fwd_s", "bwd_s", NULL};
    const char *dt = NULL;
    wf_status st;
    if ((st = wf_json_check_keys(p, ctx, keys)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "batch", 1, 1, 1 << 24, &a->batch)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "heads", 1, 1, 1 << 16, &a->heads)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "kv_heads", 1, 1, 1 << 16, &a->kv_heads)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "seq", 1, 1, 1 << 24, &a->seq)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "head_dim", 1, 1, 1 << 12, &a->head_dim)) != WF_OK ||
        (st = wf_json_get_str(p, ctx, "dtype", 1, &dt)) != WF_OK ||
        (st = wf_json_get_num(p, ctx, "fwd_s", 1, 1e-9, 1e4, &a->fwd_s)) != WF_OK ||
        (st = wf_json_get_num(p, ctx, "bwd_s", 1, 1e-9, 1e4, &a->bwd_s)) != WF_OK)
        return st;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(p, "causal");
    if (!cJSON_IsBool(c))
        return wf_errorf(WF_FORMAT, "%s.causal: expected true or false", ctx);
    a->causal = cJSON_IsTrue(c);
    if (strcmp(dt, "bf16") != 0)
        return wf_errorf(WF_FORMAT, "%s.dtype: \"%s\", attention points are bf16", ctx, dt);
    if (a->heads % a->kv_heads != 0)
        return wf_errorf(WF_FORMAT, "%s: kv_heads=%lld does not divide heads=%lld", ctx, (long long)a->kv_heads,
                         (long long)a->heads);
    return WF_OK;
}

/* The written bandwidths must be what bytes, seconds and the op's factor give:
 * a hand-edited point that changed one and not the other is an error. */
static wf_status check_derived(const cJSON *p, const char *ctx, const char *key, double want)
{
    double got = want;
    wf_status st = wf_json_get_num(p, ctx, key, 1, 0, 1e18, &got);
    if (st != WF_OK)
        return st;
    if (fabs(got - want) > 1e-6 * want)
        return wf_errorf(WF_FORMAT, "%s.%s=%g, but bytes / seconds gives %g (nccl-tests' convention)", ctx, key,
                         got, want);
    return WF_OK;
}

static wf_status read_coll(const cJSON *p, const char *ctx, wf_coll_point *c)
{
    static const char *const keys[] = {"op", "scope", "ranks", "bytes", "seconds", "algbw_bps", "busbw_bps", NULL};
    const char *op = NULL, *scope = NULL;
    wf_status st;
    if ((st = wf_json_check_keys(p, ctx, keys)) != WF_OK || (st = wf_json_get_str(p, ctx, "op", 1, &op)) != WF_OK ||
        (st = wf_json_get_str(p, ctx, "scope", 1, &scope)) != WF_OK ||
        (st = wf_json_get_int(p, ctx, "ranks", 1, 2, 1 << 24, &c->ranks)) != WF_OK ||
        (st = wf_json_get_num(p, ctx, "bytes", 1, 1, 1e15, &c->bytes)) != WF_OK ||
        (st = wf_json_get_num(p, ctx, "seconds", 1, 1e-9, 1e4, &c->seconds)) != WF_OK)
        return st;
    if (!wf_mcoll_parse(op, &c->op))
        return wf_errorf(WF_FORMAT,
                         "%s.op: unknown collective \"%s\" (all_reduce, reduce_scatter, all_gather, alltoall, "
                         "sendrecv)", ctx, op);
    int s = 0;
    while (s < WF_MSCOPE_COUNT && strcmp(scope, MSCOPES[s]) != 0)
        s++;
    if (s == WF_MSCOPE_COUNT)
        return wf_errorf(WF_FORMAT, "%s.scope: \"%s\", expected \"node\" or \"job\"", ctx, scope);
    c->scope = (wf_mscope)s;
    double algbw = c->bytes / c->seconds;
    if ((st = check_derived(p, ctx, "algbw_bps", algbw)) != WF_OK ||
        (st = check_derived(p, ctx, "busbw_bps", algbw * wf_mcoll_busbw_factor(c->op, c->ranks))) != WF_OK)
        return st;
    return WF_OK;
}

wf_status wf_cluster_measured_from_json(const cJSON *j, const char *ctx, wf_cluster_measured *out)
{
    static const char *const keys[] = {"date",     "device",      "compute_capability",
                                       "sms",      "devices",     "nodes",
                                       "devices_per_node", "libraries", "attention_note",
                                       "launch_s", "memory",      "kernels",
                                       "attention", "collectives", NULL};
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(j))
        return wf_errorf(WF_FORMAT, "%s: expected an object", ctx);
    wf_status st = wf_json_check_keys(j, ctx, keys);
    char sub[256];
    char cc[16] = "";
    if (st != WF_OK || (st = get_strbuf(j, ctx, "date", 1, out->date, sizeof out->date)) != WF_OK ||
        (st = get_strbuf(j, ctx, "device", 1, out->device, sizeof out->device)) != WF_OK ||
        (st = get_strbuf(j, ctx, "compute_capability", 1, cc, sizeof cc)) != WF_OK ||
        (st = get_int32(j, ctx, "sms", 1, 1, 1 << 16, &out->sms)) != WF_OK ||
        (st = get_int32(j, ctx, "devices", 1, 1, 1 << 24, &out->devices)) != WF_OK ||
        (st = get_int32(j, ctx, "nodes", 1, 1, 1 << 24, &out->nodes)) != WF_OK ||
        (st = get_int32(j, ctx, "devices_per_node", 1, 1, 1 << 16, &out->devices_per_node)) != WF_OK ||
        (st = get_strbuf(j, ctx, "attention_note", 0, out->attention_note, sizeof out->attention_note)) != WF_OK ||
        (st = wf_json_get_num(j, ctx, "launch_s", 1, 1e-9, 1, &out->launch_s)) != WF_OK)
        return st;
    char tail = 0;
    if (sscanf(cc, "%d.%d%c", &out->cc_major, &out->cc_minor, &tail) != 2 || out->cc_major < 1 || out->cc_minor < 0)
        return wf_errorf(WF_FORMAT, "%s.compute_capability: \"%s\", expected MAJOR.MINOR (\"9.0\")", ctx, cc);
    if ((int64_t)out->nodes * out->devices_per_node < out->devices)
        return wf_errorf(WF_FORMAT, "%s: devices=%d is more than nodes=%d x devices_per_node=%d", ctx, out->devices,
                         out->nodes, out->devices_per_node);

    static const char *const lkeys[] = {"cuda_runtime", "cuda_driver", "cublaslt", "nccl", NULL};
    const cJSON *lib = cJSON_GetObjectItemCaseSensitive(j, "libraries");
    snprintf(sub, sizeof sub, "%s.libraries", ctx);
    if (!cJSON_IsObject(lib))
        return wf_errorf(WF_FORMAT, "%s: expected an object of library -> version", sub);
    if ((st = wf_json_check_keys(lib, sub, lkeys)) != WF_OK ||
        (st = get_strbuf(lib, sub, "cuda_runtime", 1, out->cuda_runtime, sizeof out->cuda_runtime)) != WF_OK ||
        (st = get_strbuf(lib, sub, "cuda_driver", 1, out->cuda_driver, sizeof out->cuda_driver)) != WF_OK ||
        (st = get_strbuf(lib, sub, "cublaslt", 1, out->cublaslt, sizeof out->cublaslt)) != WF_OK ||
        (st = get_strbuf(lib, sub, "nccl", 0, out->nccl, sizeof out->nccl)) != WF_OK)
        return st;

    static const char *const mkeys[] = {"total_bytes", "free_bytes", "alloc_bytes", "copy_bytes", "copy_s", NULL};
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "memory");
    snprintf(sub, sizeof sub, "%s.memory", ctx);
    if (!cJSON_IsObject(mem))
        return wf_errorf(WF_FORMAT, "%s: expected an object", sub);
    if ((st = wf_json_check_keys(mem, sub, mkeys)) != WF_OK ||
        (st = wf_json_get_num(mem, sub, "total_bytes", 1, 1e6, 1e15, &out->mem_total_bytes)) != WF_OK ||
        (st = wf_json_get_num(mem, sub, "free_bytes", 1, 0, 1e15, &out->mem_free_bytes)) != WF_OK ||
        (st = wf_json_get_num(mem, sub, "alloc_bytes", 1, 1e6, 1e15, &out->mem_alloc_bytes)) != WF_OK ||
        (st = wf_json_get_num(mem, sub, "copy_bytes", 1, 1, 1e15, &out->copy_bytes)) != WF_OK ||
        (st = wf_json_get_num(mem, sub, "copy_s", 1, 1e-9, 1e4, &out->copy_s)) != WF_OK)
        return st;
    if (out->mem_free_bytes > out->mem_total_bytes || out->mem_alloc_bytes > out->mem_total_bytes)
        return wf_errorf(WF_FORMAT, "%s: free_bytes and alloc_bytes must be at most total_bytes=%.0f", sub,
                         out->mem_total_bytes);

    int n = 0;
    const cJSON *a = get_array(j, ctx, "kernels", WF_MEASURED_MAX_KERNELS, &n, &st);
    if (st != WF_OK)
        return st;
    if (!a || n < 1)
        return wf_errorf(WF_FORMAT, "%s.kernels: expected an array of at least one matrix product", ctx);
    for (int i = 0; i < n; i++) {
        snprintf(sub, sizeof sub, "%s.kernels[%d]", ctx, i);
        if ((st = read_kernel(cJSON_GetArrayItem(a, i), sub, &out->kernels[i])) != WF_OK)
            return st;
    }
    out->nkernels = n;
    a = get_array(j, ctx, "attention", WF_MEASURED_MAX_ATTN, &n, &st);
    if (st != WF_OK)
        return st;
    for (int i = 0; a && i < n; i++) {
        snprintf(sub, sizeof sub, "%s.attention[%d]", ctx, i);
        if ((st = read_attn(cJSON_GetArrayItem(a, i), sub, &out->attn[i])) != WF_OK)
            return st;
    }
    out->nattn = n;
    a = get_array(j, ctx, "collectives", WF_MEASURED_MAX_COLL, &n, &st);
    if (st != WF_OK)
        return st;
    for (int i = 0; a && i < n; i++) {
        snprintf(sub, sizeof sub, "%s.collectives[%d]", ctx, i);
        if ((st = read_coll(cJSON_GetArrayItem(a, i), sub, &out->coll[i])) != WF_OK)
            return st;
    }
    out->ncoll = n;
    return WF_OK;
}

wf_status wf_cluster_measured_load(const char *path, wf_cluster_measured *out)
{
    cJSON *j = NULL;
    wf_status st = wf_json_read_file(path, &j);
    if (st != WF_OK)
        return st;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "measured");
    char ctx[512];
    snprintf(ctx, sizeof ctx, "%s.measured", path);
    if (!m)
        st = wf_errorf(WF_NOTFOUND, "%s: no \"measured\" section (written by weft calibrate --gpu)", path);
    else
        st = wf_cluster_measured_from_json(m, ctx, out);
    cJSON_Delete(j);
    return st;
}

/* ---- writing ----------------------------------------------------------------- */

cJSON *wf_cluster_measured_to_json(const wf_cluster_measured *m)
{
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", m->cc_major, m->cc_minor);
    cJSON_AddStringToObject(j, "date", m->date);
    cJSON_AddStringToObject(j, "device", m->device);
    cJSON_AddStringToObject(j, "compute_capability", cc);
    cJSON_AddNumberToObject(j, "sms", m->sms);
    cJSON_AddNumberToObject(j, "devices", m->devices);
    cJSON_AddNumberToObject(j, "nodes", m->nodes);
    cJSON_AddNumberToObject(j, "devices_per_node", m->devices_per_node);
    cJSON *lib = cJSON_AddObjectToObject(j, "libraries");
    if (lib) {
        cJSON_AddStringToObject(lib, "cuda_runtime", m->cuda_runtime);
        cJSON_AddStringToObject(lib, "cuda_driver", m->cuda_driver);
        cJSON_AddStringToObject(lib, "cublaslt", m->cublaslt);
        if (m->nccl[0])
            cJSON_AddStringToObject(lib, "nccl", m->nccl);
    }
    if (m->attention_note[0])
        cJSON_AddStringToObject(j, "attention_note", m->attention_note);
    cJSON_AddNumberToObject(j, "launch_s", m->launch_s);
    cJSON *mem = cJSON_AddObjectToObject(j, "memory");
    if (mem) {
        cJSON_AddNumberToObject(mem, "total_bytes", m->mem_total_bytes);
        cJSON_AddNumberToObject(mem, "free_bytes", m->mem_free_bytes);
        cJSON_AddNumberToObject(mem, "alloc_bytes", m->mem_alloc_bytes);
        cJSON_AddNumberToObject(mem, "copy_bytes", m->copy_bytes);
        cJSON_AddNumberToObject(mem, "copy_s", m->copy_s);
    }
    cJSON *ks = cJSON_AddArrayToObject(j, "kernels");
    for (int i = 0; ks && i < m->nkernels; i++) {
        const wf_kernel_point *k = &m->kernels[i];
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "m", (double)k->m);
        cJSON_AddNumberToObject(p, "n", (double)k->n);
        cJSON_AddNumberToObject(p, "k", (double)k->k);
        cJSON_AddStringToObject(p, "dtype", wf_mdtype_name(k->dtype));
        cJSON_AddNumberToObject(p, "seconds", k->seconds);
        cJSON_AddItemToArray(ks, p);
    }
    cJSON *as = cJSON_AddArrayToObject(j, "attention");
    for (int i = 0; as && i < m->nattn; i++) {
        const wf_attn_point *a = &m->attn[i];
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "batch", (double)a->batch);
        cJSON_AddNumberToObject(p, "heads", (double)a->heads);
        cJSON_AddNumberToObject(p, "kv_heads", (double)a->kv_heads);
        cJSON_AddNumberToObject(p, "seq", (double)a->seq);
        cJSON_AddNumberToObject(p, "head_dim", (double)a->head_dim);
        cJSON_AddBoolToObject(p, "causal", a->causal);
        cJSON_AddStringToObject(p, "dtype", "bf16");
        cJSON_AddNumberToObject(p, "fwd_s", a->fwd_s);
        cJSON_AddNumberToObject(p, "bwd_s", a->bwd_s);
        cJSON_AddItemToArray(as, p);
    }
    cJSON *cs = cJSON_AddArrayToObject(j, "collectives");
    for (int i = 0; cs && i < m->ncoll; i++) {
        const wf_coll_point *c = &m->coll[i];
        cJSON *p = cJSON_CreateObject();
        double algbw = c->bytes / c->seconds;
        cJSON_AddStringToObject(p, "op", wf_mcoll_name(c->op));
        cJSON_AddStringToObject(p, "scope", wf_mscope_name(c->scope));
        cJSON_AddNumberToObject(p, "ranks", (double)c->ranks);
        cJSON_AddNumberToObject(p, "bytes", c->bytes);
        cJSON_AddNumberToObject(p, "seconds", c->seconds);
        cJSON_AddNumberToObject(p, "algbw_bps", algbw);
        cJSON_AddNumberToObject(p, "busbw_bps", algbw * wf_mcoll_busbw_factor(c->op, c->ranks));
        cJSON_AddItemToArray(cs, p);
    }
    return j;
}
