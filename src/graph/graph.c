/* Graph IR storage: dtypes, the op table, building a graph (tensors and ops in
 * flat realloc'd arrays, sticky errors), and small tensor helpers.
 *
 * Shape inference lives in shape.c, costs in cost.c, validation in
 * graph_validate.c and the backward pass in autodiff.c. */
#include "graph/graph-impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* ---- dtypes ------------------------------------------------------------------ */

static const struct {
    const char *name;
    size_t bytes;
} g_dtypes[WF_DTYPE_COUNT] = {
    [WF_DTYPE_FP32] = {"fp32", 4}, [WF_DTYPE_FP16] = {"fp16", 2},
    [WF_DTYPE_BF16] = {"bf16", 2}, [WF_DTYPE_INT32] = {"int32", 4},
    [WF_DTYPE_INT64] = {"int64", 8}, [WF_DTYPE_U8] = {"u8", 1},
};

size_t wf_dtype_bytes(wf_dtype t)
{
    if ((int)t < 0 || t >= WF_DTYPE_COUNT)
        return 0;
    return g_dtypes[t].bytes;
}

const char *wf_dtype_name(wf_dtype t)
{
    if ((int)t < 0 || t >= WF_DTYPE_COUNT)
        return "?";
    return g_dtypes[t].name;
}

wf_status wf_dtype_parse(const char *text, wf_dtype *out)
{
    static const struct {
        const char *alias;
        wf_dtype t;
    } aliases[] = {
        {"fp32", WF_DTYPE_FP32},   {"float32", WF_DTYPE_FP32}, {"f32", WF_DTYPE_FP32},
        {"fp16", WF_DTYPE_FP16},   {"float16", WF_DTYPE_FP16}, {"f16", WF_DTYPE_FP16},
        {"half", WF_DTYPE_FP16},   {"bf16", WF_DTYPE_BF16},    {"bfloat16", WF_DTYPE_BF16},
        {"int32", WF_DTYPE_INT32}, {"i32", WF_DTYPE_INT32},    {"int64", WF_DTYPE_INT64},
        {"i64", WF_DTYPE_INT64},   {"u8", WF_DTYPE_U8},        {"uint8", WF_DTYPE_U8},
    };
    if (text)
        for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
            if (strcmp(text, aliases[i].alias) == 0) {
                *out = aliases[i].t;
                return WF_OK;
            }
    return wf_errorf(WF_INVAL, "unknown dtype '%s' (expected fp32, fp16, bf16, int32, int64 or u8)",
                     text ? text : "(null)");
}

int wf_dtype_is_int(wf_dtype t) { return t == WF_DTYPE_INT32 || t == WF_DTYPE_INT64; }
int wf_dtype_is_float(wf_dtype t)
{
    return t == WF_DTYPE_FP32 || t == WF_DTYPE_FP16 || t == WF_DTYPE_BF16;
}

/* ---- the op table ------------------------------------------------------------- */

const wf_op_info wf_op_table[WF_OP_COUNT] = {
#define WF_X(e, nm, mi, ma, no, mx) [WF_OP_##e] = {nm, mi, ma, no, mx},
    WF_OP_LIST(WF_X)
#undef WF_X
};

#define WF_X(e, nm, mi, ma, no, mx) +1
_Static_assert(0 WF_OP_LIST(WF_X) == WF_OP_COUNT, "op table out of sync with WF_OP_LIST");
#undef WF_X

const char *wf_op_name(wf_op_kind k)
{
    if ((int)k < 0 || k >= WF_OP_COUNT)
        return "?";
    return wf_op_table[k].name;
}

wf_status wf_op_parse(const char *name, wf_op_kind *out)
{
    if (name)
        for (int k = 0; k < WF_OP_COUNT; k++)
            if (strcmp(name, wf_op_table[k].name) == 0) {
                *out = (wf_op_kind)k;
                return WF_OK;
            }
    return wf_errorf(WF_INVAL, "unknown op kind '%s'", name ? name : "(null)");
}

int wf_op_is_matrix(wf_op_kind k)
{
    if ((int)k < 0 || k >= WF_OP_COUNT)
        return 0;
    return wf_op_table[k].matrix;
}

int64_t wf_moe_capacity(int64_t tokens, int top_k, int experts, double capacity_factor)
{
    if (tokens <= 0 || top_k <= 0 || experts <= 0)
        return 0;
    double cf = capacity_factor > 0 ? capacity_factor : 1.0;
    /* The product is rounded once: cf*T*K/E is exact for the usual powers of two. */
    double c = ceil(cf * (double)tokens * (double)top_k / (double)experts);
    return c > (double)tokens ? tokens : (int64_t)c;
}

/* ---- tensors -------------------------------------------------------------------- */

int64_t wf_tensor_numel(const wf_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t wf_tensor_bytes(const wf_tensor *t)
{
    return (size_t)wf_tensor_numel(t) * wf_dtype_bytes(t->dtype);
}

const char *wf_shape_str(const wf_tensor *t, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return "";
    size_t n = 0;
    int w = snprintf(buf, cap, "[");
    n = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < t->ndim && n < cap; i++) {
        w = snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", t->shape[i]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

void wf_name_with_suffix(char *dst, const char *src, const char *suffix)
{
    size_t ls = strlen(suffix);
    size_t keep = strlen(src);
    if (ls > WF_NAME_LEN - 1)
        ls = WF_NAME_LEN - 1;
    if (keep + ls > WF_NAME_LEN - 1)
        keep = WF_NAME_LEN - 1 - ls;
    memmove(dst, src, keep);
    memcpy(dst + keep, suffix, ls);
    dst[keep + ls] = 0;
}

/* ---- building --------------------------------------------------------------------- */

void wf_graph_init(wf_graph *g, const char *name)
{
    memset(g, 0, sizeof *g);
    if (name) {
        size_t n = strlen(name);
        if (n > WF_NAME_LEN - 1)
            n = WF_NAME_LEN - 1;
        memcpy(g->name, name, n);
    }
    g->loss = -1;
    g->cur_block = -1;
    g->cur_layer = -1;
    g->cur_tp = WF_TP_NONE;
    g->status = WF_OK;
}

void wf_graph_free(wf_graph *g)
{
    free(g->tensors);
    free(g->ops);
    g->tensors = NULL;
    g->ops = NULL;
    g->ntensors = g->cap_tensors = 0;
    g->nops = g->cap_ops = g->nfwd = 0;
    g->loss = -1;
}

/* Records the first error and returns -1 (the building functions' failure). */
static int fail(wf_graph *g, wf_status st)
{
    if (g->status == WF_OK)
        g->status = st;
    return -1;
}

static int grow_tensors(wf_graph *g, int extra)
{
    if (g->ntensors + extra <= g->cap_tensors)
        return 0;
    return wf_grow(&g->tensors, &g->cap_tensors, (int64_t)g->ntensors + extra, sizeof *g->tensors, 64);
}

static int grow_ops(wf_graph *g, int extra)
{
    if (g->nops + extra <= g->cap_ops)
        return 0;
    return wf_grow(&g->ops, &g->cap_ops, (int64_t)g->nops + extra, sizeof *g->ops, 64);
}

/* Appends a tensor (already filled) and returns its index, or -1 on no memory. */
int wf_graph_push_tensor(wf_graph *g, const wf_tensor *t)
{
    if (grow_tensors(g, 1) != 0)
        return fail(g, wf_errorf(WF_NOMEM, "graph '%s': out of memory adding tensor '%s'",
                                 g->name, t->name));
    g->tensors[g->ntensors] = *t;
    return g->ntensors++;
}

/* Appends an op (already filled) and returns its index, or -1 on no memory. */
int wf_graph_push_op(wf_graph *g, const wf_op *o)
{
    if (grow_ops(g, 1) != 0)
        return fail(g, wf_errorf(WF_NOMEM, "graph '%s': out of memory adding op '%s'", g->name,
                                 o->name));
    g->ops[g->nops] = *o;
    return g->nops++;
}

static int check_name(wf_graph *g, const char *what, const char *name, size_t reserve)
{
    if (!name || !name[0])
        return fail(g, wf_errorf(WF_INVAL, "graph '%s': %s with an empty name", g->name, what));
    if (strlen(name) + reserve > WF_NAME_LEN - 1)
        return fail(g, wf_errorf(WF_INVAL, "graph '%s': %s name '%s' is longer than %d characters",
                                 g->name, what, name, (int)(WF_NAME_LEN - 1 - reserve)));
    return 0;
}

int wf_graph_add_tensor(wf_graph *g, const char *name, wf_dtype dtype, wf_role role, int ndim,
                        const int64_t *shape)
{
    if (g->status != WF_OK)
        return -1;
    if (check_name(g, "tensor", name, 0) != 0)
        return -1;
    if (g->nops > g->nfwd)
        return fail(g, wf_errorf(WF_INVAL, "tensor '%s': graph '%s' already has a backward pass",
                                 name, g->name));
    if ((int)dtype < 0 || dtype >= WF_DTYPE_COUNT)
        return fail(g, wf_errorf(WF_INVAL, "tensor '%s': bad dtype %d", name, (int)dtype));
    if (role != WF_ROLE_INPUT && role != WF_ROLE_LABEL && role != WF_ROLE_PARAM)
        return fail(g, wf_errorf(WF_INVAL,
                                 "tensor '%s': role %d cannot be added directly (only input, "
                                 "label or param; activations come from ops)",
                                 name, (int)role));
    if (ndim < 0 || ndim > WF_MAX_DIMS)
        return fail(g, wf_errorf(WF_INVAL, "tensor '%s': rank %d outside [0, %d]", name, ndim,
                                 WF_MAX_DIMS));
    if (ndim > 0 && !shape)
        return fail(g, wf_errorf(WF_INVAL, "tensor '%s': rank %d without a shape", name, ndim));
    wf_tensor t;
    memset(&t, 0, sizeof t);
    memcpy(t.name, name, strlen(name) + 1);
    t.dtype = dtype;
    t.role = role;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return fail(g, wf_errorf(WF_INVAL, "tensor '%s': dimension %d is %" PRId64
                                               " (must be positive)",
                                     name, i, shape[i]));
        t.shape[i] = shape[i];
    }
    int64_t numel;
    if (wf_checked_product(t.shape, ndim, WF_MAX_NUMEL, name, &numel) != WF_OK)
        return fail(g, wf_errorf(WF_INVAL, "tensor '%s': more than %" PRId64 " elements", name,
                                 WF_MAX_NUMEL));
    t.producer = -1;
    t.grad = -1;
    t.grad_of = -1;
    return wf_graph_push_tensor(g, &t);
}

int wf_graph_add_op(wf_graph *g, wf_op_kind kind, const char *name, const int *in, int nin,
                    const wf_op_attrs *attr)
{
    if (g->status != WF_OK)
        return -1;
    if ((int)kind < 0 || kind >= WF_OP_COUNT)
        return fail(g, wf_errorf(WF_INVAL, "op '%s': unknown op kind %d", name ? name : "?",
                                 (int)kind));
    if (check_name(g, "op", name, wf_op_table[kind].nout > 1 ? 2 : 0) != 0)
        return -1;
    if (g->nops > g->nfwd)
        return fail(g, wf_errorf(WF_INVAL, "op '%s': graph '%s' already has a backward pass", name,
                                 g->name));
    wf_op_attrs zero;
    memset(&zero, 0, sizeof zero);
    if (!attr)
        attr = &zero;
    int nout = 0;
    wf_tensor outs[WF_MAX_OUTPUTS];
    wf_status st = wf_graph_infer(g, kind, name, in, nin, attr, &nout, outs);
    if (st != WF_OK)
        return fail(g, st);
    for (int i = 0; i < nout; i++) {
        int64_t numel;
        if (wf_checked_product(outs[i].shape, outs[i].ndim, WF_MAX_NUMEL, name, &numel) != WF_OK)
            return fail(g, wf_errorf(WF_INVAL, "op '%s': output %d has more than %" PRId64
                                               " elements (inputs too large)",
                                     name, i, WF_MAX_NUMEL));
    }

    wf_op o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.pass = WF_PASS_FORWARD;
    memcpy(o.name, name, strlen(name) + 1);
    o.nin = nin;
    o.nout = nout;
    for (int i = 0; i < WF_MAX_INPUTS; i++)
        o.in[i] = i < nin ? in[i] : -1;
    for (int i = 0; i < WF_MAX_OUTPUTS; i++)
        o.out[i] = -1;
    o.attr = *attr;
    o.fwd_op = -1;
    o.block = g->cur_block;
    o.layer = g->cur_layer;
    o.tp = g->cur_tp;

    if (grow_tensors(g, nout) != 0 || grow_ops(g, 1) != 0)
        return fail(g, wf_errorf(WF_NOMEM, "op '%s': out of memory", name));
    int opi = g->nops;
    for (int i = 0; i < nout; i++) {
        wf_tensor *t = &outs[i];
        if (nout == 1 && wf_op_table[kind].nout == 1) {
            memcpy(t->name, name, strlen(name) + 1);
        } else {
            char sfx[16];
            snprintf(sfx, sizeof sfx, ".%d", i);
            wf_name_with_suffix(t->name, name, sfx);
        }
        t->role = WF_ROLE_ACT;
        t->producer = opi;
        t->grad = -1;
        t->grad_of = -1;
        o.out[i] = wf_graph_push_tensor(g, t);
    }
    wf_graph_push_op(g, &o);
    g->nfwd = g->nops;
    /* The first cross-entropy becomes the loss unless the builder chose one. */
    if (kind == WF_OP_CROSS_ENTROPY && g->loss < 0)
        g->loss = o.out[0];
    return opi;
}

int wf_graph_op_output(const wf_graph *g, int op, int i)
{
    if (op < 0 || op >= g->nops || i < 0 || i >= g->ops[op].nout)
        return -1;
    return g->ops[op].out[i];
}

int wf_graph_op1(wf_graph *g, wf_op_kind kind, const char *name, const int *in, int nin,
                 const wf_op_attrs *attr)
{
    return wf_graph_op_output(g, wf_graph_add_op(g, kind, name, in, nin, attr), 0);
}

void wf_graph_set_block(wf_graph *g, int block, int layer)
{
    g->cur_block = block;
    g->cur_layer = layer;
}

void wf_graph_set_tp(wf_graph *g, wf_tp_role tp) { g->cur_tp = tp; }
