/* Model JSON files in the explicit form: leaf tensors and an op list, built
 * into a graph op by op (the format is documented in docs/model-format.md).
 *
 *   {"name": "...", "tensors": [{"name","dtype","shape","role"}, ...],
 *    "ops": [{"kind","name","inputs":[...],"attrs":{...},"block","layer","tp"}, ...],
 *    "loss": "tensor name"}
 *
 * A shape entry may be the string "B" (the batch size). Every problem (a
 * missing or unknown field, a bad value, an unknown op kind or tensor, a shape
 * that does not fit the op) is WF_FORMAT with a message naming the file and the
 * op or tensor. */
#include "models/models-impl.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CTX_LEN 512

/* Formats a message context ("file.ops[3] 'fc1'"), truncating quietly. */
static __attribute__((format(printf, 2, 3))) void ctxf(char buf[CTX_LEN], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, CTX_LEN, fmt, ap);
    va_end(ap);
}

int wf_graph_json_is_oplist(const cJSON *j)
{
    return cJSON_GetObjectItemCaseSensitive(j, "ops") != NULL ||
           cJSON_GetObjectItemCaseSensitive(j, "tensors") != NULL;
}

/* Turns an error of the graph (WF_INVAL naming the op) into WF_FORMAT naming
 * the file too. */
static wf_status file_error(wf_status st, const char *ctx)
{
    if (st != WF_INVAL)
        return st;
    char msg[CTX_LEN];
    snprintf(msg, sizeof msg, "%s", wf_last_error());
    return wf_errorf(WF_FORMAT, "%s: %s", ctx, msg);
}

static int find_tensor(const wf_graph *g, const char *name)
{
    for (int i = g->ntensors - 1; i >= 0; i--)
        if (strcmp(g->tensors[i].name, name) == 0)
            return i;
    return -1;
}

/* One dimension: a positive integer, "B"/"batch" (the batch size), or -1 when
 * allow_infer (reshape targets). */
static wf_status json_dim(const cJSON *e, const char *ctx, int64_t batch, int allow_infer,
                          int64_t *out)
{
    if (cJSON_IsString(e) &&
        (strcmp(e->valuestring, "B") == 0 || strcmp(e->valuestring, "batch") == 0)) {
        *out = batch;
        return WF_OK;
    }
    if (cJSON_IsNumber(e) && e->valuedouble == floor(e->valuedouble) &&
        ((e->valuedouble >= 1 && e->valuedouble <= 9e15) ||
         (allow_infer && e->valuedouble == -1))) {
        *out = (int64_t)e->valuedouble;
        return WF_OK;
    }
    return wf_errorf(WF_FORMAT, "%s: dimension must be a positive integer%s or \"B\"", ctx,
                     allow_infer ? ", -1" : "");
}

/* An array of dims into out[cap]; *n set. */
static wf_status json_dims(const cJSON *a, const char *ctx, int64_t batch, int allow_infer,
                           int64_t *out, int cap, int *n)
{
    if (!cJSON_IsArray(a))
        return wf_errorf(WF_FORMAT, "%s: expected an array", ctx);
    *n = 0;
    for (const cJSON *e = a->child; e; e = e->next) {
        if (*n >= cap)
            return wf_errorf(WF_FORMAT, "%s: more than %d entries", ctx, cap);
        wf_status st = json_dim(e, ctx, batch, allow_infer, &out[*n]);
        if (st != WF_OK)
            return st;
        (*n)++;
    }
    return WF_OK;
}

static wf_status json_intval(const cJSON *e, const char *ctx, int64_t lo, int64_t hi,
                             int64_t *out)
{
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
        e->valuedouble < (double)lo || e->valuedouble > (double)hi)
        return wf_errorf(WF_FORMAT, "%s: expected an integer in [%" PRId64 ", %" PRId64 "]", ctx,
                         lo, hi);
    *out = (int64_t)e->valuedouble;
    return WF_OK;
}

/* kernel/stride/pad: an integer (both dims) or [h, w]. */
static wf_status json_pair(const cJSON *e, const char *ctx, int out[2])
{
    int64_t v[2];
    if (cJSON_IsNumber(e)) {
        wf_status st = json_intval(e, ctx, 0, 1 << 20, &v[0]);
        if (st)
            return st;
        out[0] = out[1] = (int)v[0];
        return WF_OK;
    }
    if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2) {
        for (int i = 0; i < 2; i++) {
            wf_status st = json_intval(cJSON_GetArrayItem(e, i), ctx, 0, 1 << 20, &v[i]);
            if (st)
                return st;
            out[i] = (int)v[i];
        }
        return WF_OK;
    }
    return wf_errorf(WF_FORMAT, "%s: expected an integer or [h, w]", ctx);
}

static wf_status parse_attrs(const cJSON *a, const char *ctx, int64_t batch, wf_op_attrs *at)
{
    static const char *const keys[] = {"trans_a", "trans_b", "causal", "heads", "kv_heads",
                                       "axis",    "kernel",  "stride", "pad",   "groups",
                                       "eps",     "p",       "scale",  "base",  "shape",
                                       "perm",    "nsplit",  "sizes",  "seed",  "experts",
                                       "top_k",   "score",   "act",    "capacity_factor", "shifts", NULL};
    char c[CTX_LEN];
    wf_status st = wf_json_check_keys(a, ctx, keys);
    if (st)
        return st;
    for (const cJSON *e = a->child; e; e = e->next) {
        const char *k = e->string;
        ctxf(c, "%s.%s", ctx, k);
        int64_t v = 0;
        if (!strcmp(k, "trans_a") || !strcmp(k, "trans_b") || !strcmp(k, "causal")) {
            if ((st = json_intval(e, c, 0, 1, &v)))
                return st;
            *(!strcmp(k, "trans_a") ? &at->trans_a : !strcmp(k, "trans_b") ? &at->trans_b
                                                                             : &at->causal) =
                (int)v;
        } else if (!strcmp(k, "heads") || !strcmp(k, "kv_heads") || !strcmp(k, "groups") ||
                   !strcmp(k, "nsplit")) {
            if ((st = json_intval(e, c, 1, 1 << 24, &v)))
                return st;
            *(!strcmp(k, "heads")      ? &at->heads
              : !strcmp(k, "kv_heads") ? &at->kv_heads
              : !strcmp(k, "groups")   ? &at->groups
                                       : &at->nsplit) = (int)v;
        } else if (!strcmp(k, "experts") || !strcmp(k, "top_k")) {
            if ((st = json_intval(e, c, 1, 1 << 24, &v)))
                return st;
            *(!strcmp(k, "experts") ? &at->experts : &at->top_k) = (int)v;
        } else if (!strcmp(k, "score") || !strcmp(k, "act")) {
            /* Names, as the op table's comments give them. */
            static const char *const scores[] = {"softmax", "sigmoid"}, *const acts[] = {"swiglu", "gelu"};
            const char *const *names = !strcmp(k, "score") ? scores : acts;
            int *dst = !strcmp(k, "score") ? &at->score : &at->act;
            if (!cJSON_IsString(e) || (strcmp(e->valuestring, names[0]) && strcmp(e->valuestring, names[1])))
                return wf_errorf(WF_FORMAT, "%s: expected \"%s\" or \"%s\"", c, names[0], names[1]);
            *dst = strcmp(e->valuestring, names[0]) == 0 ? 0 : 1;
        } else if (!strcmp(k, "capacity_factor")) {
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0) || e->valuedouble > 1e6)
                return wf_errorf(WF_FORMAT, "%s: expected a number in [0, 1e6]", c);
            at->capacity_factor = e->valuedouble;
        } else if (!strcmp(k, "axis")) {
            if ((st = json_intval(e, c, -WF_MAX_DIMS, WF_MAX_DIMS, &v)))
                return st;
            at->axis = (int)v;
        } else if (!strcmp(k, "seed")) {
            if ((st = json_intval(e, c, 0, (int64_t)1 << 52, &v)))
                return st;
            at->seed = (uint64_t)v;
        } else if (!strcmp(k, "kernel") || !strcmp(k, "stride") || !strcmp(k, "pad")) {
            if ((st = json_pair(e, c, !strcmp(k, "kernel")   ? at->kernel
                                      : !strcmp(k, "stride") ? at->stride
                                                             : at->pad)))
                return st;
        } else if (!strcmp(k, "eps") || !strcmp(k, "p") || !strcmp(k, "scale") ||
                   !strcmp(k, "base")) {
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
                return wf_errorf(WF_FORMAT, "%s: expected a number", c);
            *(!strcmp(k, "eps") ? &at->eps
              : !strcmp(k, "p") ? &at->p
              : !strcmp(k, "scale") ? &at->scale
                                    : &at->base) = e->valuedouble;
        } else if (!strcmp(k, "shape")) {
            int n = 0;
            if ((st = json_dims(e, c, batch, 1, at->shape, WF_MAX_DIMS, &n)))
                return st;
            at->ndim = n;
        } else if (!strcmp(k, "perm")) {
            int n = 0;
            for (const cJSON *p = e->child; cJSON_IsArray(e) && p; p = p->next) {
                if (n >= WF_MAX_DIMS)
                    return wf_errorf(WF_FORMAT, "%s: more than %d entries", c, WF_MAX_DIMS);
                if ((st = json_intval(p, c, 0, WF_MAX_DIMS - 1, &v)))
                    return st;
                at->perm[n++] = (int)v;
            }
            if (!cJSON_IsArray(e))
                return wf_errorf(WF_FORMAT, "%s: expected an array", c);
        } else if (!strcmp(k, "shifts")) {
            int n = 0;
            for (const cJSON *p = e->child; cJSON_IsArray(e) && p; p = p->next) {
                if (n >= WF_MAX_DIMS)
                    return wf_errorf(WF_FORMAT, "%s: more than %d entries", c, WF_MAX_DIMS);
                if ((st = json_intval(p, c, -((int64_t)1 << 40), (int64_t)1 << 40, &v)))
                    return st;
                at->shifts[n++] = v;
            }
            if (!cJSON_IsArray(e))
                return wf_errorf(WF_FORMAT, "%s: expected an array", c);
        } else if (!strcmp(k, "sizes")) {
            int n = 0;
            if ((st = json_dims(e, c, batch, 0, at->sizes, WF_MAX_OUTPUTS, &n)))
                return st;
            if (at->nsplit == 0)
                at->nsplit = n;
        }
    }
    return WF_OK;
}

static wf_status parse_tp(const char *s, const char *ctx, wf_tp_role *out)
{
    static const char *const names[] = {"none", "col", "row", "shard", "vocab"};
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (wf_tp_role)i;
            return WF_OK;
        }
    return wf_errorf(WF_FORMAT, "%s.tp=\"%s\": expected none, col, row, shard or vocab", ctx, s);
}

static wf_status add_tensors(const cJSON *arr, const char *ctx, int64_t batch, wf_graph *g)
{
    static const char *const keys[] = {"name", "dtype", "shape", "role", NULL};
    char c[CTX_LEN];
    if (!cJSON_IsArray(arr))
        return wf_errorf(WF_FORMAT, "%s.tensors: expected an array", ctx);
    int i = 0;
    for (const cJSON *t = arr->child; t; t = t->next, i++) {
        wf_status st;
        const char *name = NULL, *dts = NULL, *roles = NULL;
        ctxf(c, "%s.tensors[%d]", ctx, i);
        if ((st = wf_json_check_keys(t, c, keys)) || (st = wf_json_get_str(t, c, "name", 1, &name)) ||
            (st = wf_json_get_str(t, c, "dtype", 1, &dts)) ||
            (st = wf_json_get_str(t, c, "role", 1, &roles)))
            return st;
        ctxf(c, "%s.tensors[%d] '%s'", ctx, i, name);
        wf_dtype dt;
        if (wf_dtype_parse(dts, &dt) != WF_OK)
            return wf_errorf(WF_FORMAT, "%s: unknown dtype \"%s\"", c, dts);
        wf_role role;
        if (!strcmp(roles, "input"))
            role = WF_ROLE_INPUT;
        else if (!strcmp(roles, "label"))
            role = WF_ROLE_LABEL;
        else if (!strcmp(roles, "param"))
            role = WF_ROLE_PARAM;
        else
            return wf_errorf(WF_FORMAT, "%s: role \"%s\" (expected input, label or param)", c,
                             roles);
        int64_t shape[WF_MAX_DIMS];
        int nd = 0;
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
        if (!sh)
            return wf_errorf(WF_FORMAT, "%s: missing field \"shape\"", c);
        char cs[CTX_LEN];
        ctxf(cs, "%s.shape", c);
        if ((st = json_dims(sh, cs, batch, 0, shape, WF_MAX_DIMS, &nd)))
            return st;
        if (find_tensor(g, name) >= 0)
            return wf_errorf(WF_FORMAT, "%s: tensor name given twice", c);
        if (wf_graph_add_tensor(g, name, dt, role, nd, shape) < 0)
            return file_error(g->status, ctx);
    }
    return WF_OK;
}

static wf_status add_ops(const cJSON *arr, const char *ctx, int64_t batch, wf_graph *g)
{
    static const char *const keys[] = {"kind", "name", "inputs", "attrs", "block",
                                       "layer", "tp",  NULL};
    char c[CTX_LEN];
    if (!cJSON_IsArray(arr))
        return wf_errorf(WF_FORMAT, "%s.ops: expected an array", ctx);
    int i = 0;
    for (const cJSON *o = arr->child; o; o = o->next, i++) {
        wf_status st;
        const char *kinds = NULL, *name = NULL, *tps = NULL;
        ctxf(c, "%s.ops[%d]", ctx, i);
        if ((st = wf_json_check_keys(o, c, keys)) || (st = wf_json_get_str(o, c, "kind", 1, &kinds)) ||
            (st = wf_json_get_str(o, c, "name", 1, &name)) ||
            (st = wf_json_get_str(o, c, "tp", 0, &tps)))
            return st;
        ctxf(c, "%s.ops[%d] '%s'", ctx, i, name);
        wf_op_kind kind;
        if (wf_op_parse(kinds, &kind) != WF_OK)
            return wf_errorf(WF_FORMAT, "%s: unknown op kind \"%s\"", c, kinds);
        int64_t block = -1, layer = -1;
        if ((st = wf_json_get_int(o, c, "block", 0, -1, 1 << 20, &block)) ||
            (st = wf_json_get_int(o, c, "layer", 0, -1, 1 << 20, &layer)))
            return st;
        wf_tp_role tp = WF_TP_NONE;
        if (tps && (st = parse_tp(tps, c, &tp)))
            return st;
        const cJSON *ins = cJSON_GetObjectItemCaseSensitive(o, "inputs");
        if (!cJSON_IsArray(ins))
            return wf_errorf(WF_FORMAT, "%s: \"inputs\" must be an array of tensor names", c);
        int in[WF_MAX_INPUTS], nin = 0;
        for (const cJSON *e = ins->child; e; e = e->next) {
            if (!cJSON_IsString(e))
                return wf_errorf(WF_FORMAT, "%s: \"inputs\" must be an array of tensor names", c);
            if (nin >= WF_MAX_INPUTS)
                return wf_errorf(WF_FORMAT, "%s: more than %d inputs", c, WF_MAX_INPUTS);
            int t = find_tensor(g, e->valuestring);
            if (t < 0)
                return wf_errorf(WF_FORMAT, "%s: unknown input tensor \"%s\"", c, e->valuestring);
            in[nin++] = t;
        }
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(o, "attrs");
        if (attrs) {
            char ca[CTX_LEN];
            ctxf(ca, "%s.attrs", c);
            if ((st = parse_attrs(attrs, ca, batch, &at)))
                return st;
        }
        if (find_tensor(g, name) >= 0)
            return wf_errorf(WF_FORMAT, "%s: op name clashes with an existing tensor", c);
        wf_graph_set_block(g, (int)block, (int)layer);
        wf_graph_set_tp(g, tp);
        if (wf_graph_add_op(g, kind, name, in, nin, &at) < 0)
            return file_error(g->status, ctx);
    }
    wf_graph_set_block(g, -1, -1);
    wf_graph_set_tp(g, WF_TP_NONE);
    return WF_OK;
}

wf_status wf_build_json_graph(const cJSON *j, const char *ctx, int64_t batch, wf_graph *g)
{
    static const char *const keys[] = {"name", "description", "tensors", "ops", "loss", NULL};
    wf_status st = wf_json_check_keys(j, ctx, keys);
    const char *loss = NULL;
    if (st || (st = wf_json_get_str(j, ctx, "loss", 0, &loss)))
        return g->status = st;
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(j, "tensors");
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(j, "ops");
    if (!tensors || !ops)
        return g->status = wf_errorf(WF_FORMAT, "%s: an op list needs both \"tensors\" and \"ops\"",
                                     ctx);
    if ((st = add_tensors(tensors, ctx, batch, g)) || (st = add_ops(ops, ctx, batch, g))) {
        if (g->status == WF_OK)
            g->status = st;
        return st;
    }
    if (loss) {
        int t = find_tensor(g, loss);
        if (t < 0 || g->tensors[t].producer < 0)
            return g->status = wf_errorf(WF_FORMAT, "%s: loss \"%s\" is not the output of an op",
                                         ctx, loss);
        if (g->tensors[t].ndim != 0)
            return g->status = wf_errorf(WF_FORMAT, "%s: loss \"%s\" is not a scalar", ctx, loss);
        g->loss = t;
    }
    if (g->loss < 0)
        return g->status = wf_errorf(WF_FORMAT,
                                     "%s: no loss (add a cross_entropy op or name it in \"loss\")",
                                     ctx);
    st = wf_graph_validate(g);
    if (st != WF_OK)
        return g->status = file_error(st, ctx);
    return WF_OK;
}
