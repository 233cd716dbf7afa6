/* ONNX import: a parsed ModelProto -> the forward graph IR.
 *
 * Every ONNX value (graph input, initializer, node output) becomes a `val`:
 *   V_TENSOR  an IR tensor t, with the shape ONNX gives the value. The two
 *             shapes hold the same elements but may differ: GlobalAveragePool
 *             is [N,C,1,1] in ONNX and [N,C] in the IR; Unsqueeze and Squeeze
 *             of a tensor only relabel its shape. A consumer that needs the
 *             ONNX shape gets a reshape op (made once, cached).
 *   V_CONST   a constant known at import (an initializer, a Constant node, or
 *             folded shape arithmetic: Shape, Gather/Concat/Unsqueeze/Cast of
 *             constants). A constant used as data becomes a PARAM tensor at
 *             its first use, in the layout that use wants (a Gemm weight with
 *             transB=1 becomes [K,N] with its data transposed); the recipe is
 *             kept so wf_onnx_param_data can produce the data.
 *   V_NONE    not (yet) computed: an output the IR does not produce.
 * Nodes run in file order (ONNX requires topological order). Patterns are
 * found before the walk: x*Sigmoid(x) -> silu, the erf and tanh forms of GELU
 * -> gelu, LayerNorm decomposed below opset 17 -> layernorm, a hand-written
 * attention (matmul, scale, causal mask, softmax, matmul with its head
 * reshapes) -> attention, a zero Pad in front of a Conv -> the Conv's pads,
 * Transpose feeding SoftmaxCrossEntropyLoss -> cross_entropy over the class
 * dim as the last one. PyTorch's buffers (masks, position ids) are folded
 * where they are used and become no tensor: only weights are parameters. Every error names the file, the node (index, name,
 * op type) and the reason. */
#include "onnx/onnx-impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONST_MAX ((int64_t)1 << 22) /* most elements decoded for folding */

enum { V_NONE, V_TENSOR, V_CONST };

typedef struct {
    const char *name; /* ONNX name (points into the proto) */
    int kind;
    int t;            /* V_TENSOR: the IR tensor; V_CONST (on the root): its parameter, -1 */
    int t_onnx;       /* V_TENSOR: cached reshape of t to the ONNX shape, -1 */
    int root;         /* V_CONST: the value whose parameter this one shares (aliases of
                       * one constant share one parameter) */
    int ndim;
    int64_t shape[WF_MAX_DIMS]; /* the ONNX shape */
    int32_t type;     /* ONNX element type */
    const Onnx__TensorProto *src; /* V_CONST: the tensor holding the data, or NULL */
    double *cv;       /* V_CONST: decoded values (numel), NULL until needed */
    int player;       /* V_CONST root: the parameter holds src transposed (2-D) */
    int ctrans;       /* V_CONST: the value is src transposed (2-D) */
    int prod;         /* producing node, -1 for inputs and initializers */
    int nuse;         /* node inputs and graph outputs reading it */
    int stat;         /* known before the walk to need no graph input (initializers,
                       * Constant nodes, Shape, and nodes of such values only) */
} val;

/* Per-node results of the pattern scan. */
typedef struct {
    int skip;             /* fused into a later node */
    wf_op_kind fused;     /* SILU / GELU / LAYERNORM / ATTENTION for the node that emits a
                           * fusion (0, matmul, for none: never a fusion) */
    const char *fused_in; /* that fusion's input; SCE: the un-transposed scores */
    const char *tin[2];   /* MatMul: operand k before a fused last-two-dims Transpose */
    /* LAYERNORM: gamma, beta, epsilon. ATTENTION: the values of q, k, v
     * ([B,S,A*D] before their head reshapes), the q reshape node, the scale
     * node (-1 none), the mask node (-1 none), the dropout node (-1 none). */
    const char *aux[3];
    int qnode, snode, mnode, dnode;
    int pad_node;         /* Conv: the zero Pad node fused into its padding, -1 none */
} nodeinfo;

/* The patterns recognized by a build (counted for `weft show`). */
enum { PAT_ATTENTION, PAT_LAYERNORM, PAT_GELU_TANH, PAT_GELU_ERF, PAT_SILU, PAT_PAD, PAT_ROWS,
       PAT_COUNT };
static const char *const pat_names[PAT_COUNT] = {
    "attention (matmul, scale, mask, softmax, matmul)", "layernorm (decomposed)",
    "gelu (tanh form)", "gelu (erf form)", "silu (x*sigmoid(x))", "pad folded into conv",
    "embedding rows by constant ids"};

typedef struct {
    wf_onnx_model *m;
    const Onnx__GraphProto *gp;
    wf_graph *g;
    wf_arena arena;
    val *v;
    int nv, capv;
    int *hash;
    int hcap;
    nodeinfo *ni;
    const Onnx__NodeProto *node;
    int node_index;
    int64_t mbs;         /* the samples the graph is built for (wf_onnx_opts.mbs) */
    int64_t fixed_batch; /* > 0: a fixed first dim the build replaced by mbs */
    wf_dtype fdtype;     /* the dtype of float inputs and parameters (fp32, or the
                          * spec's dtype= override) */
    int npat[PAT_COUNT];
} ictx;

/* ---- errors --------------------------------------------------------------------------- */

static const char *node_label(const Onnx__NodeProto *n)
{
    if (n->name && *n->name)
        return n->name;
    if (n->n_output && n->output[0] && *n->output[0])
        return n->output[0];
    return "";
}

/* An error about the current node: "PATH: node I 'NAME' (OP): reason". */
static wf_status nerr(ictx *c, wf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static wf_status nerr(ictx *c, wf_status st, const char *fmt, ...)
{
    char reason[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    char hint[256] = "";
    if (c->fixed_batch > 0)
        snprintf(hint, sizeof hint, " (the model was exported with a fixed batch of %" PRId64
                                    ", rebatched to %" PRId64 ": re-export it with a dynamic batch axis, "
                                    "torch.onnx.export(..., dynamic_axes={input: {0: 'batch'}}))",
                 c->fixed_batch, c->mbs);
    st = wf_errorf(st, "%s: node %d '%s' (%s): %s%s", c->m->path, c->node_index,
                   node_label(c->node), c->node->op_type ? c->node->op_type : "?", reason, hint);
    if (c->g->status == WF_OK)
        c->g->status = st;
    return st;
}

static wf_status unsupported(ictx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static wf_status unsupported(ictx *c, const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return nerr(c, WF_INVAL, "not supported: %s", reason);
}

/* After an IR call failed: the graph's message, prefixed with the node. */
static wf_status irerr(ictx *c)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", wf_last_error());
    wf_status st = c->g->status != WF_OK ? c->g->status : WF_INTERNAL;
    c->g->status = WF_OK; /* nerr records the wrapped status */
    return nerr(c, st, "%s", msg);
}

static const char *shape_str(int nd, const int64_t *s, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? "," : "", s[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
    return buf;
}

/* ---- values ------------------------------------------------------------------------------- */

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static val *vfind(ictx *c, const char *name)
{
    if (!name || !*name || c->hcap == 0)
        return NULL;
    for (uint32_t i = hash_str(name) & (uint32_t)(c->hcap - 1);; i = (i + 1) & (uint32_t)(c->hcap - 1)) {
        int k = c->hash[i];
        if (k < 0)
            return NULL;
        if (strcmp(c->v[k].name, name) == 0)
            return &c->v[k];
    }
}

/* Adds a value (V_NONE); NULL on no memory or a duplicate name (*dup set). */
static val *vadd(ictx *c, const char *name, int *dup)
{
    *dup = 0;
    if (vfind(c, name)) {
        *dup = 1;
        return NULL;
    }
    if (wf_grow(&c->v, &c->capv, (int64_t)c->nv + 1, sizeof *c->v, 256) != 0)
        return NULL;
    if (2 * (c->nv + 1) > c->hcap) {
        int cap = c->hcap ? 2 * c->hcap : 1024;
        int *h = malloc((size_t)cap * sizeof *h);
        if (!h)
            return NULL;
        for (int i = 0; i < cap; i++)
            h[i] = -1;
        for (int k = 0; k < c->nv; k++) {
            uint32_t i = hash_str(c->v[k].name) & (uint32_t)(cap - 1);
            while (h[i] >= 0)
                i = (i + 1) & (uint32_t)(cap - 1);
            h[i] = k;
        }
        free(c->hash);
        c->hash = h;
        c->hcap = cap;
    }
    val *x = &c->v[c->nv];
    memset(x, 0, sizeof *x);
    x->name = name;
    x->kind = V_NONE;
    x->t = -1;
    x->t_onnx = -1;
    x->prod = -1;
    x->root = c->nv;
    uint32_t i = hash_str(name) & (uint32_t)(c->hcap - 1);
    while (c->hash[i] >= 0)
        i = (i + 1) & (uint32_t)(c->hcap - 1);
    c->hash[i] = c->nv++;
    return x;
}

/* Saturates at INT64_MAX (dims come from the file), which every size check
 * downstream rejects. */
static int64_t numel_of(int nd, const int64_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        if (s[i] < 0 || wf_mul_i64(n, s[i], &n) != 0)
            return INT64_MAX;
    return n;
}

static int64_t vnumel(const val *x) { return numel_of(x->ndim, x->shape); }

static int same_shape(int na, const int64_t *a, int nb, const int64_t *b)
{
    if (na != nb)
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static int is_float_type(int32_t t)
{
    return t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
           t == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16 || t == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
}

/* Node input i (NULL when absent or empty). An input that names no value is
 * a format error (recorded; *st set). */
static val *nin(ictx *c, int i, wf_status *st)
{
    const Onnx__NodeProto *n = c->node;
    if (i >= (int)n->n_input || !n->input[i] || !*n->input[i])
        return NULL;
    val *x = vfind(c, n->input[i]);
    if (!x || x->kind == V_NONE) {
        if (x && x->prod >= c->node_index)
            *st = nerr(c, WF_FORMAT, "input '%s' is produced by a later node (nodes must be in "
                                     "topological order)",
                       n->input[i]);
        else if (x)
            *st = nerr(c, WF_INVAL, "input '%s' is an output weft does not compute",
                       n->input[i]);
        else
            *st = nerr(c, WF_FORMAT, "input '%s' is not a graph input, an initializer or the "
                                     "output of an earlier node",
                       n->input[i]);
        return NULL;
    }
    return x;
}

/* A required input. */
static val *need_in(ictx *c, int i, wf_status *st)
{
    if (*st != WF_OK)
        return NULL;
    val *x = nin(c, i, st);
    if (!x && *st == WF_OK)
        *st = nerr(c, WF_FORMAT, "missing input %d", i);
    return x;
}

/* The value of node output i (NULL when the node does not name it). */
static val *nout(ictx *c, int i)
{
    const Onnx__NodeProto *n = c->node;
    if (i >= (int)n->n_output || !n->output[i] || !*n->output[i])
        return NULL;
    return vfind(c, n->output[i]);
}

/* 1 when output i is read by a later node (graph outputs do not count). */
static int out_read(ictx *c, int i)
{
    val *o = nout(c, i);
    if (!o)
        return 0;
    for (size_t k = 0; k < c->gp->n_output; k++)
        if (c->gp->output[k]->name && strcmp(c->gp->output[k]->name, o->name) == 0)
            return o->nuse > 1;
    return o->nuse > 0;
}

/* Decoded values of a constant (cached); NULL with *st set on failure. */
static const double *cval(ictx *c, val *x, wf_status *st)
{
    if (x->kind != V_CONST) {
        *st = nerr(c, WF_INVAL, "'%s' must be a constant (an initializer or computed from "
                                "constants), but it is computed at run time",
                   x->name);
        return NULL;
    }
    if (x->cv)
        return x->cv;
    int64_t n = vnumel(x);
    if (n > CONST_MAX) {
        *st = unsupported(c, "constant '%s' has %" PRId64 " elements (folding takes at most %" PRId64 ")",
                          x->name, n, CONST_MAX);
        return NULL;
    }
    double *d = wf_arena_alloc(&c->arena, (size_t)(n ? n : 1) * sizeof *d);
    if (!d) {
        *st = nerr(c, WF_NOMEM, "out of memory");
        return NULL;
    }
    wf_status s = wf_onnx_decode(x->src, c->m->dir, d, wf_onnx_numel(x->src));
    if (s != WF_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", wf_last_error());
        *st = nerr(c, s, "%s", msg);
        return NULL;
    }
    if (x->ctrans) { /* the value is src [R,C] transposed */
        double *e = wf_arena_alloc(&c->arena, (size_t)(n ? n : 1) * sizeof *e);
        if (!e) {
            *st = nerr(c, WF_NOMEM, "out of memory");
            return NULL;
        }
        int64_t R = x->shape[1], C = x->shape[0];
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++)
                e[j * R + i] = d[i * C + j];
        d = e;
    }
    x->cv = d;
    return d;
}

/* Sets node output i to a constant with values d (owned by the arena). */
static void set_const(ictx *c, int i, int32_t type, int nd, const int64_t *shape, double *d)
{
    val *o = nout(c, i);
    if (!o)
        return;
    o->kind = V_CONST;
    o->t = -1;
    o->type = type;
    o->ndim = nd;
    memcpy(o->shape, shape, sizeof(int64_t) * (size_t)nd);
    o->src = NULL;
    o->cv = d;
    o->ctrans = o->player = 0;
    o->root = (int)(o - c->v);
}

/* The value holding the parameter state of constant x. */
static val *root_of(ictx *c, val *x) { return &c->v[x->root]; }

/* 1 when constant x has no parameter yet. */
static int no_param(ictx *c, val *x) { return x->kind == V_CONST && root_of(c, x)->t < 0; }

static double *cnew(ictx *c, int64_t n, wf_status *st)
{
    double *d = wf_arena_alloc(&c->arena, (size_t)(n ? n : 1) * sizeof *d);
    if (!d)
        *st = nerr(c, WF_NOMEM, "out of memory");
    return d;
}

/* ---- IR tensors --------------------------------------------------------------------------- */

/* The IR name for the current node's ops: its first output's name plus sfx. */
static const char *opname(ictx *c, const char *sfx, int multi, char buf[WF_NAME_LEN])
{
    const Onnx__NodeProto *n = c->node;
    const char *base = n->n_output && n->output[0] && *n->output[0] ? n->output[0] : node_label(n);
    size_t reserve = strlen(sfx) + (multi ? 2 : 0);
    wf_onnx_ir_name(buf, base, reserve);
    strcat(buf, sfx);
    return buf;
}

static int add_op(ictx *c, wf_op_kind k, const char *sfx, const int *in, int nin_, const wf_op_attrs *a)
{
    char name[WF_NAME_LEN];
    int op = wf_graph_add_op(c->g, k, opname(c, sfx, k == WF_OP_SPLIT, name), in, nin_, a);
    if (op < 0)
        irerr(c);
    return op;
}

static int op1(ictx *c, wf_op_kind k, const char *sfx, const int *in, int nin_, const wf_op_attrs *a)
{
    return wf_graph_op_output(c->g, add_op(c, k, sfx, in, nin_, a), 0);
}

static int reshape_t(ictx *c, int t, int nd, const int64_t *shape, const char *sfx)
{
    if (t < 0)
        return -1;
    const wf_tensor *x = &c->g->tensors[t];
    if (same_shape(x->ndim, x->shape, nd, shape))
        return t;
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.ndim = nd;
    memcpy(a.shape, shape, sizeof(int64_t) * (size_t)nd);
    return op1(c, WF_OP_RESHAPE, sfx, &t, 1, &a);
}

static int transpose_t(ictx *c, int t, int nd, const int *perm, const char *sfx)
{
    if (t < 0)
        return -1;
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    memcpy(a.perm, perm, sizeof(int) * (size_t)nd);
    return op1(c, WF_OP_TRANSPOSE, sfx, &t, 1, &a);
}

/* Makes the parameter of constant x with IR shape (nd, shape); transpose: the
 * 2-D value [R,C] is stored as [C,R]. */
static int mkparam(ictx *c, val *x, int nd, const int64_t *shape, int transpose, double scale)
{
    wf_status st = WF_OK;
    wf_dtype dt;
    if (!is_float_type(x->type)) {
        nerr(c, WF_INVAL, "constant '%s' (%s) is used as data; only float constants become "
                          "parameters",
             x->name, wf_onnx_type_name(x->type));
        return -1;
    }
    /* double initializers become fp32 parameters (the IR has no fp64); a
     * dtype= override sets every float parameter's dtype */
    if (c->fdtype != WF_DTYPE_COUNT)
        dt = c->fdtype;
    else if (x->type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE)
        dt = WF_DTYPE_FP32;
    else if ((st = wf_onnx_dtype(x->type, x->name, &dt)) != WF_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", wf_last_error());
        return nerr(c, st, "%s", msg), -1;
    }
    wf_onnx_model *m = c->m;
    if (wf_grow(&m->recipes, &m->cap_recipes, (int64_t)m->nrecipes + 1, sizeof *m->recipes, 64) != 0)
        return nerr(c, WF_NOMEM, "out of memory"), -1;
    wf_onnx_recipe r;
    memset(&r, 0, sizeof r);
    if (x->src) {
        /* the stored layout relative to src: x is src (or src^T), maybe transposed */
        r.src = x->src;
        r.transpose = transpose ^ x->ctrans;
        if (r.transpose) {
            r.rows = x->src->dims[0];
            r.cols = x->src->dims[1];
        }
    } else {
        /* a folded constant: keep its values */
        const double *d = cval(c, x, &st);
        if (!d)
            return -1;
        int64_t n = vnumel(x);
        r.values = malloc((size_t)(n ? n : 1) * sizeof(double));
        if (!r.values)
            return nerr(c, WF_NOMEM, "out of memory"), -1;
        memcpy(r.values, d, (size_t)n * sizeof(double));
        r.transpose = transpose;
        if (transpose) {
            r.rows = x->shape[0];
            r.cols = x->shape[1];
        }
    }
    r.scale = scale;
    char name[WF_NAME_LEN];
    wf_onnx_ir_name(name, x->name, 0);
    int t = wf_graph_add_tensor(c->g, name, dt, WF_ROLE_PARAM, nd, shape);
    if (t < 0) {
        free(r.values);
        irerr(c);
        return -1;
    }
    r.tensor = t;
    m->recipes[m->nrecipes++] = r;
    val *rt = root_of(c, x);
    rt->t = t;
    rt->player = x->src ? transpose ^ x->ctrans : transpose;
    return t;
}

/* The IR tensor of x in its ONNX shape. */
static int ir(ictx *c, val *x)
{
    if (x->kind == V_CONST) {
        val *rt = root_of(c, x);
        if (rt->t < 0)
            return mkparam(c, x, x->ndim, x->shape, 0, 1.0);
        if (x->t_onnx >= 0)
            return x->t_onnx;
        int t = rt->t;
        if (x->src && rt->player != x->ctrans) {
            /* the parameter holds this value transposed: transpose back */
            int perm[2] = {1, 0};
            t = transpose_t(c, t, 2, perm, "/untranspose");
        }
        x->t_onnx = reshape_t(c, t, x->ndim, x->shape, "/reshape");
        return x->t_onnx;
    }
    const wf_tensor *tt = &c->g->tensors[x->t];
    if (same_shape(tt->ndim, tt->shape, x->ndim, x->shape))
        return x->t;
    if (x->t_onnx < 0)
        x->t_onnx = reshape_t(c, x->t, x->ndim, x->shape, "/onnx_shape");
    return x->t_onnx;
}

/* The IR tensor of x (same elements) with shape (nd, shape). */
static int ir_shaped(ictx *c, val *x, int nd, const int64_t *shape, const char *sfx)
{
    if (no_param(c, x))
        return mkparam(c, x, nd, shape, 0, 1.0);
    int t = x->kind == V_CONST ? ir(c, x) : x->t;
    return reshape_t(c, t, nd, shape, sfx);
}

/* Node output i := IR tensor t, whose ONNX shape is (nd, shape) (NULL: t's). */
static void set_out(ictx *c, int i, int t, int nd, const int64_t *shape)
{
    val *o = nout(c, i);
    if (!o || t < 0)
        return;
    const wf_tensor *tt = &c->g->tensors[t];
    o->kind = V_TENSOR;
    o->t = t;
    o->t_onnx = -1;
    o->type = wf_onnx_type_of(tt->dtype);
    if (shape) {
        o->ndim = nd;
        memcpy(o->shape, shape, sizeof(int64_t) * (size_t)nd);
    } else {
        o->ndim = tt->ndim;
        memcpy(o->shape, tt->shape, sizeof tt->shape);
    }
}

/* Node output 0 := a new IR op k over in[0, n) (nd, shape as set_out takes
 * them), unless building has already failed; the graph's status. */
static wf_status out_op(ictx *c, wf_op_kind k, const int *in, int n, const wf_op_attrs *at, int nd,
                        const int64_t *shape)
{
    if (c->g->status != WF_OK)
        return c->g->status;
    set_out(c, 0, op1(c, k, "", in, n, at), nd, shape);
    return c->g->status;
}

/* Node output i := the value x (an alias, as Identity). */
static void alias_out(ictx *c, int i, const val *x)
{
    val *o = nout(c, i);
    if (!o)
        return;
    const char *name = o->name;
    int prod = o->prod, nuse = o->nuse;
    *o = *x;
    o->name = name;
    o->prod = prod;
    o->nuse = nuse;
}

/* The IR tensor of x as it is (constants in their ONNX shape). */
static int ir_any(ictx *c, val *x) { return x->kind == V_CONST ? ir(c, x) : x->t; }

/* y = clip(alpha*x + beta, lo, hi) as node output 0. */
static wf_status clip_out(ictx *c, val *x, double alpha, double beta, double lo, double hi)
{
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.alpha = alpha;
    at.beta = beta;
    at.lo = lo;
    at.hi = hi;
    int t = ir_any(c, x);
    set_out(c, 0, op1(c, WF_OP_CLIP, "", &t, 1, &at), x->ndim, x->shape);
    return c->g->status;
}

/* ---- attribute helpers ------------------------------------------------------------------ */

static int norm_axis(int64_t axis, int nd) { return (int)(axis < 0 ? axis + nd : axis); }

/* The node's "axis" attribute (default `def`) normalized for rank r into *a;
 * it must lie in [0, r), or in [0, r] when `upto_rank`. */
static wf_status axis_attr(ictx *c, int64_t def, int r, int upto_rank, int *a)
{
    *a = norm_axis(wf_onnx_attr_i(c->node, "axis", def), r);
    if (*a < 0 || *a > r || (*a == r && !upto_rank))
        return nerr(c, WF_FORMAT, "axis out of range for rank %d", r);
    return WF_OK;
}

/* The integer list of input i (opset >= some version) or of attribute `attr`
 * (older opsets); count or -1 when neither is given. */
static int ints_from(ictx *c, int i, const char *attr, int64_t *out, int cap, wf_status *st)
{
    val *x = nin(c, i, st);
    if (*st != WF_OK)
        return -1;
    if (x) {
        const double *d = cval(c, x, st);
        if (!d)
            return -1;
        int64_t n = vnumel(x);
        if (n > cap) {
            *st = unsupported(c, "'%s' has %" PRId64 " entries (at most %d)", x->name, n, cap);
            return -1;
        }
        for (int64_t k = 0; k < n; k++)
            out[k] = wf_onnx_d2i(d[k]);
        return (int)n;
    }
    int n = wf_onnx_attr_ints(c->node, attr, out, cap);
    if (n > cap) {
        *st = unsupported(c, "attribute %s has %d entries (at most %d)", attr, n, cap);
        return -1;
    }
    return n;
}

/* The scalar value of a constant operand with one element, else 0. */
static int scalar_of(ictx *c, val *x, double *out)
{
    if (!x || x->kind != V_CONST || vnumel(x) != 1)
        return 0;
    wf_status st = WF_OK;
    const double *d = cval(c, x, &st);
    if (!d) {
        c->g->status = WF_OK; /* not a usable scalar: the caller goes on */
        return 0;
    }
    *out = d[0];
    return 1;
}

/* ---- elementwise ----------------------------------------------------------------------- */

static wf_status h_unary(ictx *c, wf_op_kind k)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    /* Elementwise: run on the IR tensor as it is, keep the ONNX shape. */
    int t = x->kind == V_CONST ? ir(c, x) : x->t;
    int y = op1(c, k, "", &t, 1, NULL);
    set_out(c, 0, y, x->ndim, x->shape);
    return c->g->status;
}

static wf_status h_identity(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (x)
        alias_out(c, 0, x);
    return st;
}

/* Numpy broadcasting of two shapes into out; 0 when they do not broadcast. */
static int broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *no, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1)
            return 0;
        out[i] = da == 1 ? db : da;
    }
    *no = n;
    return 1;
}

/* Folds a binary op over constants (numpy broadcasting). */
static wf_status fold_binary(ictx *c, const char *op, val *a, val *b)
{
    wf_status st = WF_OK;
    int no;
    int64_t os[WF_MAX_DIMS];
    if (!broadcast(a->ndim, a->shape, b->ndim, b->shape, &no, os))
        return nerr(c, WF_FORMAT, "shapes do not broadcast");
    const double *da = cval(c, a, &st), *db = da ? cval(c, b, &st) : NULL;
    if (!db)
        return st;
    int64_t n = numel_of(no, os);
    if (n > CONST_MAX)
        return unsupported(c, "folding %" PRId64 " elements", n);
    double *d = cnew(c, n, &st);
    if (!d)
        return st;
    int integer = !is_float_type(a->type);
    for (int64_t i = 0; i < n; i++) {
        /* index into a and b with their broadcast strides */
        int64_t r = i, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int k = no - 1; k >= 0; k--) {
            int64_t idx = r % os[k];
            r /= os[k];
            int ka = k - (no - a->ndim), kb = k - (no - b->ndim);
            if (ka >= 0) {
                ia += (a->shape[ka] == 1 ? 0 : idx) * sa;
                sa *= a->shape[ka];
            }
            if (kb >= 0) {
                ib += (b->shape[kb] == 1 ? 0 : idx) * sb;
                sb *= b->shape[kb];
            }
        }
        double x = da[ia], y = db[ib], z;
        if (strcmp(op, "Add") == 0)
            z = x + y;
        else if (strcmp(op, "Sub") == 0)
            z = x - y;
        else if (strcmp(op, "Mul") == 0)
            z = x * y;
        else {
            if (integer && y == 0)
                return nerr(c, WF_INVAL, "integer division by zero in a constant");
            z = integer ? trunc(x / y) : x / y;
        }
        d[i] = z;
    }
    set_const(c, 0, a->type, no, os, d);
    return WF_OK;
}

/* Folds a bias Add into the op producing t (linear or conv2d without a bias)
 * when t has no other reader; 1 when done. */
static int fold_bias(ictx *c, val *xa, val *b)
{
    if (xa->kind != V_TENSOR || xa->nuse != 1 || !no_param(c, b) || b->nuse != 1 ||
        !is_float_type(b->type))
        return 0;
    wf_graph *g = c->g;
    const wf_tensor *t = &g->tensors[xa->t];
    if (t->producer < 0 || !same_shape(t->ndim, t->shape, xa->ndim, xa->shape))
        return 0;
    wf_op *op = &g->ops[t->producer];
    int64_t n = vnumel(b);
    if (op->kind == WF_OP_LINEAR && op->nin == 2) {
        int64_t N = t->shape[t->ndim - 1];
        /* b is [N] or [1,...,1,N] */
        if (n != N || b->ndim > t->ndim || (b->ndim >= 1 && b->shape[b->ndim - 1] != N))
            return 0;
    } else if (op->kind == WF_OP_CONV2D && op->nin == 2) {
        int64_t O = t->shape[1];
        /* b is [O,1,1] or [1,O,1,1] */
        if (n != O || !(b->ndim == 3 || b->ndim == 4) || b->shape[b->ndim - 3] != O)
            return 0;
    } else {
        return 0;
    }
    int64_t shape[1] = {n};
    int opi = t->producer;
    int p = mkparam(c, b, 1, shape, 0, 1.0);
    if (p < 0)
        return -1;
    op = &g->ops[opi];
    op->in[2] = p;
    op->nin = 3;
    return 1;
}

static wf_status h_binary(ictx *c, const char *optype)
{
    wf_status st = WF_OK;
    val *a = need_in(c, 0, &st), *b = need_in(c, 1, &st);
    if (st != WF_OK)
        return st;
    if (a->kind == V_CONST && b->kind == V_CONST && vnumel(a) <= CONST_MAX &&
        vnumel(b) <= CONST_MAX && (!is_float_type(a->type) || (vnumel(a) <= 4096 && vnumel(b) <= 4096)))
        return fold_binary(c, optype, a, b);
    int add = strcmp(optype, "Add") == 0 || strcmp(optype, "Sum") == 0;
    int mul = strcmp(optype, "Mul") == 0, div = strcmp(optype, "Div") == 0;
    int sub = strcmp(optype, "Sub") == 0;
    double s = 0;
    /* x + c, c + x, x - c, c - x with a literal scalar c (a Constant node or
     * folded, not an initializer that may be trained): an affine clip */
    if ((add || sub) && b->prod >= 0 && a->kind == V_TENSOR && scalar_of(c, b, &s) && b->ndim <= a->ndim)
        return clip_out(c, a, 1.0, sub ? -s : s, -INFINITY, INFINITY);
    if ((add || sub) && a->prod >= 0 && b->kind == V_TENSOR && scalar_of(c, a, &s) && a->ndim <= b->ndim)
        return clip_out(c, b, sub ? -1.0 : 1.0, s, -INFINITY, INFINITY);
    /* x * scalar, scalar * x, x / scalar: mul with a scale */
    val *x = NULL;
    if ((mul || div) && scalar_of(c, b, &s))
        x = a;
    else if (mul && scalar_of(c, a, &s))
        x = b;
    if (x) {
        if (div) {
            if (s == 0)
                return unsupported(c, "division by the constant 0");
            s = 1.0 / s;
        }
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.scale = s;
        int t = x->kind == V_CONST ? ir(c, x) : x->t;
        int y = op1(c, WF_OP_MUL, "", &t, 1, &at);
        int no;
        int64_t os[WF_MAX_DIMS];
        if (!broadcast(a->ndim, a->shape, b->ndim, b->shape, &no, os))
            return nerr(c, WF_FORMAT, "shapes do not broadcast");
        if (numel_of(no, os) != vnumel(x))
            return unsupported(c, "a scalar that broadcasts the other operand");
        set_out(c, 0, y, no, os);
        return c->g->status;
    }
    if (!add && !mul && !sub) {
        char ba[96], bb[96];
        return unsupported(c, "%s of %s by %s (only division by a constant scalar has an IR "
                              "form)",
                           optype, shape_str(a->ndim, a->shape, ba, sizeof ba),
                           shape_str(b->ndim, b->shape, bb, sizeof bb));
    }
    val negb;
    if (sub) {
        /* a - b = a + (-1 * b) */
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.scale = -1.0;
        int t = ir_any(c, b);
        negb = *b;
        negb.kind = V_TENSOR;
        negb.t = op1(c, WF_OP_MUL, "/neg", &t, 1, &at);
        negb.t_onnx = -1;
        if (c->g->status != WF_OK)
            return c->g->status;
        b = &negb;
        add = 1;
    }
    if (add && !sub) {
        val *xa = a;
        int f = fold_bias(c, a, b);
        if (f == 0 && (f = fold_bias(c, b, a)) > 0)
            xa = b;
        if (f < 0)
            return c->g->status;
        if (f > 0) {
            alias_out(c, 0, xa);
            return WF_OK;
        }
    }
    int no;
    int64_t os[WF_MAX_DIMS];
    if (!broadcast(a->ndim, a->shape, b->ndim, b->shape, &no, os))
        return nerr(c, WF_FORMAT, "shapes do not broadcast");
    /* The IR broadcasts b over a when b's shape (without leading 1s) is a
     * suffix of a's: make a the full-shape operand; any other broadcast
     * expands the operands to the full shape first. */
    val *y = b;
    x = a;
    if (!same_shape(a->ndim, a->shape, no, os)) {
        x = b;
        y = a;
    }
    int in[2];
    int lead = 0;
    while (lead < y->ndim && y->shape[lead] == 1 && y->ndim - lead > 0 &&
           !(y->ndim - lead == 1 && vnumel(y) == 1 && x->ndim == 0))
        lead++;
    int ynd = y->ndim - lead, suffix = same_shape(x->ndim, x->shape, no, os);
    const int64_t *ys = y->shape + lead;
    for (int i = 0; suffix && i < ynd; i++)
        suffix = ys[i] == x->shape[x->ndim - ynd + i];
    if (suffix) {
        in[0] = ir(c, x);
        in[1] = ir_shaped(c, y, ynd, ys, "/bcast");
    } else {
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.ndim = no;
        memcpy(at.shape, os, sizeof(int64_t) * (size_t)no);
        val *ops[2] = {x, y};
        for (int k = 0; k < 2; k++) {
            int t = ir(c, ops[k]);
            if (t >= 0 && !same_shape(ops[k]->ndim, ops[k]->shape, no, os))
                t = op1(c, WF_OP_EXPAND, k ? "/expand_b" : "/expand_a", &t, 1, &at);
            in[k] = t;
        }
        ynd = 0;
    }
    if (c->g->status != WF_OK)
        return c->g->status;
    wf_op_kind k = mul ? WF_OP_MUL : WF_OP_ADD;
    /* a 1-D parameter added over the last dim is a bias */
    if (add && ynd == 1 && x->ndim >= 1 && c->g->tensors[in[1]].role == WF_ROLE_PARAM)
        k = WF_OP_BIAS_ADD;
    int out = op1(c, k, "", in, 2, NULL);
    set_out(c, 0, out, no, os);
    return c->g->status;
}

/* ---- linear algebra ------------------------------------------------------------------------ */

/* MatMul whose operands were Transposes of their last two dims (fused away):
 * matmul / batch_matmul with trans_a / trans_b, or, when the ranks do not
 * allow it, the transposes made explicit. 1 when handled here. */
static int matmul_trans(ictx *c, val *a, val *b, int ta, int tb, wf_status *st)
{
    int ra = a->ndim, rb = b->ndim;
    int ok = ra == rb && ra >= 2;
    for (int i = 0; ok && i < ra - 2; i++)
        ok = a->shape[i] == b->shape[i];
    int64_t M = a->shape[ra - (ta ? 1 : 2)], K = a->shape[ra - (ta ? 2 : 1)];
    int64_t Kb = b->shape[rb - (tb ? 1 : 2)], N = b->shape[rb - (tb ? 2 : 1)];
    if (!ok || K != Kb)
        return 0;
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.trans_a = ta;
    at.trans_b = tb;
    int in[2] = {ir(c, a), ir(c, b)};
    if (c->g->status != WF_OK) {
        *st = c->g->status;
        return 1;
    }
    int64_t os[WF_MAX_DIMS];
    memcpy(os, a->shape, sizeof os);
    os[ra - 2] = M;
    os[ra - 1] = N;
    set_out(c, 0, op1(c, ra == 2 ? WF_OP_MATMUL : WF_OP_BATCH_MATMUL, "", in, 2, &at), ra, os);
    *st = c->g->status;
    return 1;
}

static wf_status h_matmul(ictx *c)
{
    wf_status st = WF_OK;
    nodeinfo *ni = &c->ni[c->node_index];
    val *a, *b, tv[2];
    if (ni->tin[0] || ni->tin[1]) {
        int ta = ni->tin[0] != NULL, tb = ni->tin[1] != NULL;
        a = ta ? vfind(c, ni->tin[0]) : need_in(c, 0, &st);
        b = tb ? vfind(c, ni->tin[1]) : need_in(c, 1, &st);
        if (st != WF_OK)
            return st;
        if (!a || !b || a->kind == V_NONE || b->kind == V_NONE)
            return nerr(c, WF_INTERNAL, "fused transpose input missing");
        if (matmul_trans(c, a, b, ta, tb, &st))
            return st;
        /* make the transposes explicit and go on as a plain MatMul */
        val *ops[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            if (!(k ? tb : ta))
                continue;
            val *x = ops[k];
            int perm[WF_MAX_DIMS];
            for (int i = 0; i < x->ndim; i++)
                perm[i] = i;
            perm[x->ndim - 1] = x->ndim - 2;
            perm[x->ndim - 2] = x->ndim - 1;
            tv[k] = *x;
            tv[k].kind = V_TENSOR;
            tv[k].t = transpose_t(c, ir(c, x), x->ndim, perm, k ? "/b_t" : "/a_t");
            tv[k].t_onnx = -1;
            tv[k].shape[x->ndim - 1] = x->shape[x->ndim - 2];
            tv[k].shape[x->ndim - 2] = x->shape[x->ndim - 1];
            if (c->g->status != WF_OK)
                return c->g->status;
            ops[k] = &tv[k];
        }
        a = ops[0];
        b = ops[1];
    } else {
        a = need_in(c, 0, &st);
        b = need_in(c, 1, &st);
        if (st != WF_OK)
            return st;
    }
    int ra = a->ndim, rb = b->ndim;
    char ba[96], bb[96];
    if (ra < 1 || rb < 2)
        return unsupported(c, "MatMul of %s by %s (1-D right operands have no IR form)",
                           shape_str(ra, a->shape, ba, sizeof ba), shape_str(rb, b->shape, bb, sizeof bb));
    int64_t K = a->shape[ra - 1], N = b->shape[rb - 1];
    if (b->shape[rb - 2] != K)
        return nerr(c, WF_FORMAT, "MatMul of %s by %s: inner dims differ",
                    shape_str(ra, a->shape, ba, sizeof ba), shape_str(rb, b->shape, bb, sizeof bb));
    int64_t os[WF_MAX_DIMS];
    memcpy(os, a->shape, sizeof os);
    os[ra - 1] = N;
    if (rb == 2 && no_param(c, b)) {
        /* x[...,K] W[K,N]: a linear layer */
        int in[2] = {ir(c, a), mkparam(c, b, 2, b->shape, 0, 1.0)};
        return out_op(c, WF_OP_LINEAR, in, 2, NULL, ra, os);
    }
    if (rb == 2) {
        /* [...,K] -> [M,K] x [K,N] -> [M,N], shown as [...,N] */
        int64_t s2[2] = {numel_of(ra - 1, a->shape), K};
        int in[2] = {ir_shaped(c, a, 2, s2, "/rows"), ir(c, b)};
        return out_op(c, WF_OP_MATMUL, in, 2, NULL, ra, os);
    }
    if (ra == rb) {
        for (int i = 0; i < ra - 2; i++)
            if (a->shape[i] != b->shape[i])
                return unsupported(c, "MatMul of %s by %s (batch dims must be equal)",
                                   shape_str(ra, a->shape, ba, sizeof ba),
                                   shape_str(rb, b->shape, bb, sizeof bb));
        int in[2] = {ir(c, a), ir(c, b)};
        return out_op(c, WF_OP_BATCH_MATMUL, in, 2, NULL, ra, os);
    }
    return unsupported(c, "MatMul of %s by %s (batch dims must be equal)",
                       shape_str(ra, a->shape, ba, sizeof ba), shape_str(rb, b->shape, bb, sizeof bb));
}

static wf_status h_gemm(ictx *c)
{
    wf_status st = WF_OK;
    val *A = need_in(c, 0, &st), *B = need_in(c, 1, &st), *C = NULL;
    if (st == WF_OK)
        C = nin(c, 2, &st);
    if (st != WF_OK)
        return st;
    if (A->ndim != 2 || B->ndim != 2)
        return nerr(c, WF_FORMAT, "Gemm operands must be 2-D (got ranks %d and %d)", A->ndim,
                    B->ndim);
    int ta = (int)wf_onnx_attr_i(c->node, "transA", 0), tb = (int)wf_onnx_attr_i(c->node, "transB", 0);
    double alpha = wf_onnx_attr_f(c->node, "alpha", 1.0), beta = wf_onnx_attr_f(c->node, "beta", 1.0);
    int64_t M = ta ? A->shape[1] : A->shape[0], K = ta ? A->shape[0] : A->shape[1];
    int64_t Kb = tb ? B->shape[1] : B->shape[0], N = tb ? B->shape[0] : B->shape[1];
    if (K != Kb)
        return nerr(c, WF_FORMAT, "Gemm inner dims differ (%" PRId64 " vs %" PRId64 ")", K, Kb);
    int64_t os[2] = {M, N};
    int y, scaled = alpha == 1.0, biased = !C || beta == 0.0;
    if (!ta && no_param(c, B)) {
        /* x[M,K] W[K,N] (+ bias[N]): a linear layer, the weight stored [K,N] */
        int64_t ws[2] = {K, N};
        double s = 1.0;
        if (!scaled && B->nuse == 1) {
            s = alpha;
            scaled = 1;
        }
        int in[3] = {ir(c, A), mkparam(c, B, 2, ws, tb, s), -1};
        int nin_ = 2;
        if (!biased && scaled && no_param(c, C) && vnumel(C) == N &&
            C->ndim >= 1 && C->shape[C->ndim - 1] == N && (beta == 1.0 || C->nuse == 1)) {
            int64_t bs[1] = {N};
            in[2] = mkparam(c, C, 1, bs, 0, beta);
            nin_ = 3;
            biased = 1;
        }
        if (c->g->status != WF_OK)
            return c->g->status;
        y = op1(c, WF_OP_LINEAR, "", in, nin_, NULL);
    } else {
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.trans_a = ta;
        at.trans_b = tb;
        int in[2] = {ir(c, A), ir(c, B)};
        if (c->g->status != WF_OK)
            return c->g->status;
        y = op1(c, WF_OP_MATMUL, "", in, 2, &at);
    }
    if (!scaled) {
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.scale = alpha;
        y = op1(c, WF_OP_MUL, "/alpha", &y, 1, &at);
    }
    if (!biased) {
        /* C broadcasts to [M,N]: [N], [1,N], [M,N] or a scalar */
        int ct;
        int64_t n = vnumel(C);
        int row = n == N && C->ndim >= 1 && C->shape[C->ndim - 1] == N;
        if (!(row || (C->ndim == 2 && C->shape[0] == M && C->shape[1] == N) || n == 1))
            return unsupported(c, "Gemm bias C of shape [%" PRId64 ",...] (expected [N], [1,N], "
                                  "[M,N] or a scalar)",
                               C->ndim ? C->shape[0] : 1);
        int64_t bs[2] = {row ? N : M, N};
        int bnd = row ? 1 : (n == 1 ? 0 : 2);
        if (no_param(c, C) && (beta == 1.0 || C->nuse == 1)) {
            ct = mkparam(c, C, bnd, bs, 0, beta);
        } else {
            ct = ir_shaped(c, C, bnd, bs, "/bias");
            if (beta != 1.0) {
                wf_op_attrs at;
                memset(&at, 0, sizeof at);
                at.scale = beta;
                ct = op1(c, WF_OP_MUL, "/beta", &ct, 1, &at);
            }
        }
        if (c->g->status != WF_OK)
            return c->g->status;
        int in[2] = {y, ct};
        int param = c->g->tensors[ct].role == WF_ROLE_PARAM;
        y = op1(c, row && param ? WF_OP_BIAS_ADD : WF_OP_ADD, "/bias_add", in, 2, NULL);
    }
    set_out(c, 0, y, 2, os);
    return c->g->status;
}

/* A scalar input i, or dflt when the input is absent; 0 when present but not
 * a constant scalar (an error recorded in *st). */
static int scalar_in(ictx *c, int i, double dflt, double *out, wf_status *st)
{
    val *x = nin(c, i, st);
    if (*st != WF_OK)
        return 0;
    if (!x) {
        *out = dflt;
        return 1;
    }
    if (!scalar_of(c, x, out)) {
        *st = unsupported(c, "input %d '%s' must be a constant scalar", i, x->name);
        return 0;
    }
    return 1;
}

/* The pads of Pad node n (input of rank r) into pads[2r]; -1 with *st set
 * when they are not constant or the padding is not zeros. */
static int pad_amounts(ictx *c, const Onnx__NodeProto *n, int r, int64_t *pads, wf_status *st)
{
    /* read (and report errors) as the Pad node, which may be fused into a later one */
    const Onnx__NodeProto *keep = c->node;
    int keep_i = c->node_index;
    c->node = n;
    for (size_t i = 0; i < c->gp->n_node; i++)
        if (c->gp->node[i] == n)
            c->node_index = (int)i;
    char buf[32];
    const char *mode = wf_onnx_attr_s(n, "mode", "constant", buf, sizeof buf);
    int k = c->m->opset >= 11 ? ints_from(c, 1, "", pads, 2 * WF_MAX_DIMS, st)
                              : wf_onnx_attr_ints(n, "pads", pads, 2 * WF_MAX_DIMS);
    double v = 0;
    if (*st == WF_OK && c->m->opset >= 11 && n->n_input > 3 && n->input[3] && *n->input[3])
        *st = unsupported(c, "Pad along chosen axes");
    else if (*st == WF_OK && c->m->opset >= 11)
        scalar_in(c, 2, 0.0, &v, st);
    else if (*st == WF_OK)
        v = wf_onnx_attr_f(n, "value", 0.0);
    if (*st == WF_OK && (strcmp(mode, "constant") != 0 || v != 0))
        *st = unsupported(c, "Pad mode '%s' value %g (weft pads with zeros)", mode, v);
    if (*st == WF_OK && k != 2 * r)
        *st = nerr(c, WF_FORMAT, "%d pads for rank %d", k, r);
    c->node = keep;
    c->node_index = keep_i;
    return *st == WF_OK ? 0 : -1;
}

/* ---- convolution and pooling ------------------------------------------------------------- */

/* Spatial geometry of Conv / pools: kernel, strides, symmetric pads for 1 or
 * 2 spatial dims (in[] is the input's spatial size). */
typedef struct {
    int nsp;
    int64_t k[2], s[2], p[2];
    int ceil_mode;
} geom;

/* The IR attributes of geometry gm; 1-D: the IR's first spatial dim is a
 * unit height. */
static void geom_attrs(const geom *gm, int nsp, wf_op_attrs *at)
{
    memset(at, 0, sizeof *at);
    at->kernel[0] = nsp == 2 ? (int)gm->k[0] : 1;
    at->kernel[1] = (int)gm->k[nsp - 1];
    at->stride[0] = nsp == 2 ? (int)gm->s[0] : 1;
    at->stride[1] = (int)gm->s[nsp - 1];
    at->pad[0] = nsp == 2 ? (int)gm->p[0] : 0;
    at->pad[1] = (int)gm->p[nsp - 1];
    at->ceil_mode = gm->ceil_mode;
}

/* Node output 0 := IR tensor y ([N,C,H,W]); with one spatial dim, the
 * unit height is dropped again ([N,C,W]). */
static wf_status set_out_from_2d(ictx *c, int y, int nsp)
{
    if (y < 0)
        return c->g->status;
    const wf_tensor *t = &c->g->tensors[y];
    int64_t os[3] = {t->shape[0], t->shape[1], t->shape[3]};
    set_out(c, 0, y, nsp == 2 ? 4 : 3, nsp == 2 ? t->shape : os);
    return c->g->status;
}

/* pool: 0 conv, 1 maxpool, 2 avgpool. */
static wf_status get_geom(ictx *c, int nsp, const int64_t *in, const int64_t *kernel, int pool,
                          geom *o)
{
    wf_status st = WF_OK;
    int64_t v[8];
    char buf[64];
    memset(o, 0, sizeof *o);
    o->nsp = nsp;
    for (int d = 0; d < nsp; d++) {
        o->k[d] = kernel[d];
        o->s[d] = 1;
    }
    int n = wf_onnx_attr_ints(c->node, "strides", v, 8);
    if (n > 0) {
        if (n != nsp)
            return nerr(c, WF_FORMAT, "strides has %d entries for %d spatial dims", n, nsp);
        for (int d = 0; d < nsp; d++)
            o->s[d] = v[d];
    }
    n = wf_onnx_attr_ints(c->node, "dilations", v, 8);
    for (int d = 0; d < n && d < 8; d++)
        if (v[d] != 1)
            return unsupported(c, "dilations (dilation %" PRId64 " in dim %d)", v[d], d);
    const char *ap = wf_onnx_attr_s(c->node, "auto_pad", "NOTSET", buf, sizeof buf);
    int64_t pb[2] = {0, 0}, pe[2] = {0, 0};
    if (strcmp(ap, "NOTSET") == 0) {
        n = wf_onnx_attr_ints(c->node, "pads", v, 8);
        if (n > 0) {
            if (n != 2 * nsp)
                return nerr(c, WF_FORMAT, "pads has %d entries for %d spatial dims", n, nsp);
            for (int d = 0; d < nsp; d++) {
                pb[d] = v[d];
                pe[d] = v[nsp + d];
            }
        }
    } else if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
        for (int d = 0; d < nsp; d++) {
            int64_t out = (in[d] + o->s[d] - 1) / o->s[d];
            int64_t total = (out - 1) * o->s[d] + o->k[d] - in[d];
            if (total < 0)
                total = 0;
            int64_t small = total / 2;
            pb[d] = ap[5] == 'U' ? small : total - small;
            pe[d] = total - pb[d];
        }
    } else if (strcmp(ap, "VALID") != 0) {
        return nerr(c, WF_FORMAT, "auto_pad '%s' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)",
                    ap);
    }
    for (int d = 0; d < nsp; d++) {
        if (o->s[d] < 1 || o->k[d] < 1 || pb[d] < 0 || pe[d] < 0)
            return nerr(c, WF_FORMAT, "kernel %" PRId64 ", stride %" PRId64 ", pads %" PRId64
                                      "/%" PRId64 " in dim %d",
                        o->k[d], o->s[d], pb[d], pe[d], d);
        if (pb[d] != pe[d])
            return unsupported(c, "asymmetric padding (%" PRId64 " before, %" PRId64
                                  " after in spatial dim %d; the IR pads both sides equally)",
                               pb[d], pe[d], d);
        o->p[d] = pb[d];
    }
    if (pool && wf_onnx_attr_i(c->node, "ceil_mode", 0)) {
        for (int d = 0; d < nsp; d++) {
            int64_t span = in[d] + 2 * o->p[d] - o->k[d];
            if (span >= 0 && wf_pool_out(in[d], o->k[d], o->s[d], o->p[d], 1) !=
                                 wf_pool_out(in[d], o->k[d], o->s[d], o->p[d], 0))
                o->ceil_mode = 1;
            if (o->ceil_mode && pool == 2)
                return unsupported(c, "AveragePool with ceil_mode=1 where it changes the output "
                                      "size (spatial dim %d: %" PRId64 " + 2x%" PRId64 " pad - "
                                      "kernel %" PRId64 " is not a multiple of stride %" PRId64
                                      "; weft's avgpool divides every window by its full size)",
                                   d, in[d], o->p[d], o->k[d], o->s[d]);
        }
    }
    return st;
}

/* For 1-D ops: the [N,C,L] value seen as [N,C,1,L]. */
static void as_2d(int nd, const int64_t *s, int64_t *o)
{
    o[0] = s[0];
    o[1] = s[1];
    o[2] = 1;
    o[3] = s[nd - 1];
}

static wf_status h_conv(ictx *c)
{
    wf_status st = WF_OK;
    int pn = c->ni[c->node_index].pad_node;
    val *x = pn >= 0 ? vfind(c, c->gp->node[pn]->input[0]) : need_in(c, 0, &st);
    val *w = need_in(c, 1, &st), *b = NULL;
    if (!x || x->kind == V_NONE)
        return st != WF_OK ? st : nerr(c, WF_INTERNAL, "padded input missing");
    if (st == WF_OK)
        b = nin(c, 2, &st);
    if (st != WF_OK)
        return st;
    if (!(x->ndim == 4 || x->ndim == 3) || w->ndim != x->ndim)
        return unsupported(c, "Conv over %d spatial dims (the IR has 2-D convolution; 1-D runs "
                              "as 2-D)",
                           x->ndim - 2);
    int nsp = x->ndim - 2;
    int64_t kernel[2], ins[2];
    for (int d = 0; d < nsp; d++) {
        kernel[d] = w->shape[2 + d];
        ins[d] = x->shape[2 + d];
    }
    int64_t ks[8];
    int nk = wf_onnx_attr_ints(c->node, "kernel_shape", ks, 8);
    for (int d = 0; d < nk && d < nsp; d++)
        if (ks[d] != kernel[d])
            return nerr(c, WF_FORMAT, "kernel_shape[%d]=%" PRId64 " but the weight's is %" PRId64,
                        d, ks[d], kernel[d]);
    geom gm;
    if ((st = get_geom(c, nsp, ins, kernel, 0, &gm)) != WF_OK)
        return st;
    if (pn >= 0) {
        /* x is Pad(x0) with zero padding: the convolution pads instead */
        int64_t pads[2 * WF_MAX_DIMS];
        if (pad_amounts(c, c->gp->node[pn], x->ndim, pads, &st) < 0)
            return st;
        int r = x->ndim;
        if (pads[0] || pads[1] || pads[r] || pads[r + 1])
            return unsupported(c, "a Pad of the batch or channel dims in front of a Conv");
        for (int d = 0; d < nsp; d++) {
            if (pads[2 + d] != pads[r + 2 + d])
                return unsupported(c, "asymmetric Pad (%" PRId64 " before, %" PRId64 " after) in "
                                      "front of a Conv", pads[2 + d], pads[r + 2 + d]);
            gm.p[d] += pads[2 + d];
        }
        c->npat[PAT_PAD]++;
    }
    wf_op_attrs at;
    geom_attrs(&gm, nsp, &at);
    at.groups = (int)wf_onnx_attr_i(c->node, "group", 1);
    int in[3];
    int64_t xs[4], ws[4];
    if (nsp == 2) {
        in[0] = ir(c, x);
        in[1] = ir(c, w);
    } else {
        as_2d(3, x->shape, xs);
        as_2d(3, w->shape, ws);
        in[0] = ir_shaped(c, x, 4, xs, "/as2d");
        in[1] = ir_shaped(c, w, 4, ws, "/w2d");
    }
    int n = 2;
    if (b) {
        int64_t bs[1] = {vnumel(b)};
        in[2] = ir_shaped(c, b, 1, bs, "/bias");
        n = 3;
    }
    if (c->g->status != WF_OK)
        return c->g->status;
    return set_out_from_2d(c, op1(c, WF_OP_CONV2D, "", in, n, &at), nsp);
}

static wf_status h_pool(ictx *c, wf_op_kind k)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    if (!(x->ndim == 4 || x->ndim == 3))
        return unsupported(c, "pooling over %d spatial dims (the IR pools 2-D; 1-D runs as 2-D)",
                           x->ndim - 2);
    if (out_read(c, 1))
        return unsupported(c, "the Indices output of MaxPool");
    int nsp = x->ndim - 2;
    int64_t kernel[8], ins[2];
    int nk = wf_onnx_attr_ints(c->node, "kernel_shape", kernel, 8);
    if (nk != nsp)
        return nerr(c, WF_FORMAT, "kernel_shape has %d entries for %d spatial dims", nk, nsp);
    for (int d = 0; d < nsp; d++)
        ins[d] = x->shape[2 + d];
    geom gm;
    if ((st = get_geom(c, nsp, ins, kernel, k == WF_OP_MAXPOOL ? 1 : 2, &gm)) != WF_OK)
        return st;
    if (k == WF_OP_AVGPOOL && !wf_onnx_attr_i(c->node, "count_include_pad", 0) &&
        (gm.p[0] || gm.p[nsp - 1]))
        return unsupported(c, "AveragePool with padding and count_include_pad=0 (the IR's "
                              "avgpool counts padding as zeros)");
    wf_op_attrs at;
    geom_attrs(&gm, nsp, &at);
    int64_t xs[4];
    as_2d(x->ndim, x->shape, xs);
    int t = nsp == 2 ? ir(c, x) : ir_shaped(c, x, 4, xs, "/as2d");
    return set_out_from_2d(c, op1(c, k, "", &t, 1, &at), nsp);
}

static wf_status h_global_pool(ictx *c, int max)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    if (!(x->ndim == 4 || x->ndim == 3))
        return unsupported(c, "global pooling of rank %d (the IR pools [N,C,H,W])", x->ndim);
    int64_t xs[4];
    as_2d(x->ndim, x->shape, xs);
    if (x->ndim == 4)
        memcpy(xs, x->shape, sizeof xs);
    int t = ir_shaped(c, x, 4, xs, "/as2d");
    int64_t os[4] = {x->shape[0], x->shape[1], 1, 1};
    int y;
    if (max) {
        /* a max pool whose window is the whole plane */
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.kernel[0] = (int)xs[2];
        at.kernel[1] = (int)xs[3];
        at.stride[0] = at.stride[1] = 1;
        y = op1(c, WF_OP_MAXPOOL, "", &t, 1, &at);
    } else {
        y = op1(c, WF_OP_GLOBAL_AVGPOOL, "", &t, 1, NULL); /* [N,C] */
    }
    set_out(c, 0, y, x->ndim, os);
    return c->g->status;
}

/* ---- reductions -------------------------------------------------------------------------
 * ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceSumSquare and ReduceL1
 * (torchvision's ShuffleNet V2 and MNASNet pool globally with x.mean([2, 3]),
 * exported as ReduceMean) over any set of axes, from the IR's pools: the kept
 * axes are moved first and the reduced last (a transpose when they are not
 * already), the value is seen as [N, P, R, 1] (N: the first axis when kept,
 * P: the other kept elements, R: the reduced ones), and
 *   mean = global average pool, sum = R x mean,
 *   max = max pool over an [R, 1] window, min = -max(-x),
 *   sum of squares = sum(x * x), L1 = sum(relu(x) + relu(-x)).
 * Axes come from the attribute (opset < 18; ReduceSum < 13) or input 1;
 * keepdims (default 1) and noop_with_empty_axes as ONNX defines them. The
 * reductions that need a square root, a logarithm or a product (ReduceL2,
 * ReduceLogSum, ReduceLogSumExp, ReduceProd) have no IR form and are refused
 * by name. */
enum { RED_MEAN, RED_SUM, RED_MAX, RED_MIN, RED_SUMSQ, RED_L1 };

static int scaled(ictx *c, int t, double scale, const char *sfx)
{
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.scale = scale;
    return op1(c, WF_OP_MUL, sfx, &t, 1, &at);
}

static wf_status h_reduce(ictx *c, int kind)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    const char *op = c->node->op_type;
    int r = x->ndim;
    int64_t axes[WF_MAX_DIMS + 1];
    int from_input = c->m->opset >= 18 || (kind == RED_SUM && c->m->opset >= 13);
    int n = from_input ? ints_from(c, 1, "", axes, WF_MAX_DIMS + 1, &st)
                       : wf_onnx_attr_ints(c->node, "axes", axes, WF_MAX_DIMS + 1);
    if (st != WF_OK)
        return st;
    if (n > WF_MAX_DIMS)
        return nerr(c, WF_FORMAT, "%d axes for rank %d", n, r);
    int keep = (int)wf_onnx_attr_i(c->node, "keepdims", 1) != 0;
    if (n <= 0 && wf_onnx_attr_i(c->node, "noop_with_empty_axes", 0)) {
        alias_out(c, 0, x);
        return WF_OK;
    }
    int red[WF_MAX_DIMS] = {0};
    if (n <= 0) {
        for (int i = 0; i < r; i++)
            red[i] = 1;
    }
    for (int i = 0; i < n; i++) {
        int a = norm_axis(axes[i], r);
        if (a < 0 || a >= r || red[a])
            return nerr(c, WF_FORMAT, "axis %" PRId64 " out of range or repeated for rank %d", axes[i], r);
        red[a] = 1;
    }
    /* Output shape; kept axes first, then the reduced ones. */
    int64_t os[WF_MAX_DIMS], N = 1, P = 1, R = 1;
    int nd = 0, perm[WF_MAX_DIMS], np_ = 0, ident = 1;
    for (int i = 0; i < r; i++) {
        if (!red[i]) {
            perm[np_++] = i;
            if (i == 0)
                N = x->shape[0];
            else
                P *= x->shape[i];
        } else {
            R *= x->shape[i];
        }
        if (!red[i] || keep)
            os[nd++] = red[i] ? 1 : x->shape[i];
    }
    for (int i = 0; i < r; i++)
        if (red[i])
            perm[np_++] = i;
    for (int i = 0; i < r; i++)
        ident &= perm[i] == i;
    if (R == 0 || N * P == 0)
        return unsupported(c, "%s of an empty tensor", op);
    int t = ir_any(c, x);
    if (!ident)
        t = transpose_t(c, t, r, perm, "/reduce_order");
    if (kind == RED_SUMSQ) {
        int in2[2] = {t, t};
        t = op1(c, WF_OP_MUL, "/square", in2, 2, NULL);
    } else if (kind == RED_L1) {
        int pos = op1(c, WF_OP_RELU, "/pos", &t, 1, NULL);
        int neg = scaled(c, t, -1.0, "/neg");
        neg = op1(c, WF_OP_RELU, "/negpart", &neg, 1, NULL);
        int in2[2] = {pos, neg};
        t = op1(c, WF_OP_ADD, "/abs", in2, 2, NULL);
    } else if (kind == RED_MIN) {
        t = scaled(c, t, -1.0, "/neg");
    }
    int64_t s4[4] = {N, P, R, 1};
    t = reshape_t(c, t, 4, s4, "/as_npr1");
    int y;
    if (kind == RED_MAX || kind == RED_MIN) {
        if (R > INT32_MAX)
            return unsupported(c, "%s over %" PRId64 " elements", op, R);
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.kernel[0] = (int)R;
        at.kernel[1] = 1;
        at.stride[0] = at.stride[1] = 1;
        y = op1(c, WF_OP_MAXPOOL, "/max", &t, 1, &at);
        if (kind == RED_MIN)
            y = scaled(c, y, -1.0, "/min");
    } else {
        y = op1(c, WF_OP_GLOBAL_AVGPOOL, "/mean", &t, 1, NULL); /* [N, P] */
        if (kind != RED_MEAN)
            y = scaled(c, y, (double)R, "/sum");
    }
    if (c->g->status != WF_OK)
        return c->g->status;
    set_out(c, 0, y, nd, os);
    return c->g->status;
}

/* ---- normalization ---------------------------------------------------------------------- */

static wf_status h_batchnorm(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st), *gm = need_in(c, 1, &st), *bt = need_in(c, 2, &st);
    if (st != WF_OK)
        return st;
    if (c->m->opset < 9 && !wf_onnx_attr_i(c->node, "spatial", 1))
        return unsupported(c, "spatial=0 (per-position statistics)");
    for (int i = 1; i < (int)c->node->n_output; i++)
        if (out_read(c, i))
            return unsupported(c, "reading BatchNormalization output %d (running statistics)", i);
    if (x->ndim < 2)
        return nerr(c, WF_FORMAT, "input of rank %d (expected [N,C,...])", x->ndim);
    int64_t C[1] = {x->shape[1]};
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.eps = wf_onnx_attr_f(c->node, "epsilon", 1e-5);
    /* mean and var (inputs 3, 4) are the inference statistics: the IR's
     * batchnorm normalizes with batch statistics (training), so they are
     * not tensors of the graph. */
    int in[3] = {ir(c, x), ir_shaped(c, gm, 1, C, "/gamma"), ir_shaped(c, bt, 1, C, "/beta")};
    return out_op(c, WF_OP_BATCHNORM, in, 3, &at, x->ndim, x->shape);
}

/* LayerNormalization / RMSNormalization over dims [axis, rank). */
static wf_status h_norm(ictx *c, wf_op_kind k)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st), *gm = need_in(c, 1, &st), *bt = NULL;
    if (st == WF_OK && k == WF_OP_LAYERNORM)
        bt = nin(c, 2, &st);
    if (st != WF_OK)
        return st;
    if (k == WF_OP_LAYERNORM && !bt)
        return unsupported(c, "LayerNormalization without a bias B (the IR's layernorm has one)");
    for (int i = 1; i < (int)c->node->n_output; i++)
        if (out_read(c, i))
            return unsupported(c, "reading output %d (mean / inverse std)", i);
    int r = x->ndim;
    int a;
    if ((st = axis_attr(c, -1, r, 0, &a)) != WF_OK)
        return st;
    int64_t H = numel_of(r - a, x->shape + a);
    if (vnumel(gm) != H || (bt && vnumel(bt) != H))
        return unsupported(c, "scale or bias that broadcasts over the normalized dims (expected "
                              "%" PRId64 " elements)",
                           H);
    int64_t xs[WF_MAX_DIMS], hs[1] = {H};
    memcpy(xs, x->shape, sizeof(int64_t) * (size_t)a);
    xs[a] = H;
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.eps = wf_onnx_attr_f(c->node, "epsilon", 1e-5);
    int in[3] = {ir_shaped(c, x, a + 1, xs, "/rows"), ir_shaped(c, gm, 1, hs, "/gamma"), -1};
    if (bt)
        in[2] = ir_shaped(c, bt, 1, hs, "/beta");
    return out_op(c, k, in, bt ? 3 : 2, &at, r, x->shape);
}

static wf_status h_softmax(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int r = x->ndim;
    if (r < 1)
        return nerr(c, WF_FORMAT, "softmax of a scalar");
    int a;
    if ((st = axis_attr(c, c->m->opset >= 13 ? -1 : 1, r, 0, &a)) != WF_OK)
        return st;
    int y;
    if (a == r - 1) {
        int t = ir(c, x);
        y = op1(c, WF_OP_SOFTMAX, "", &t, 1, NULL);
    } else if (c->m->opset < 13) {
        /* opset < 13: softmax of the 2-D view [prod(:axis), prod(axis:)] */
        int64_t s2[2] = {numel_of(a, x->shape), numel_of(r - a, x->shape + a)};
        int t = ir_shaped(c, x, 2, s2, "/rows");
        y = op1(c, WF_OP_SOFTMAX, "", &t, 1, NULL);
    } else {
        /* over one inner axis: swap it with the last, softmax, swap back */
        int perm[WF_MAX_DIMS];
        for (int i = 0; i < r; i++)
            perm[i] = i;
        perm[a] = r - 1;
        perm[r - 1] = a;
        int t = transpose_t(c, ir(c, x), r, perm, "/to_last");
        t = op1(c, WF_OP_SOFTMAX, "/softmax", &t, 1, NULL);
        y = transpose_t(c, t, r, perm, "");
    }
    set_out(c, 0, y, r, x->shape);
    return c->g->status;
}

/* ---- shapes ----------------------------------------------------------------------------- */

/* Node output 0 := x with another shape (same elements): a relabel of a
 * constant, an alias when the IR tensor has that shape, else a reshape op
 * (or flatten when `flatten` and it fits). */
static wf_status reshape_out(ictx *c, val *x, int nd, const int64_t *shape, int flatten)
{
    if (numel_of(nd, shape) != vnumel(x)) {
        char ba[96], bb[96];
        return nerr(c, WF_INVAL, "cannot reshape %s to %s", shape_str(x->ndim, x->shape, ba, sizeof ba),
                    shape_str(nd, shape, bb, sizeof bb));
    }
    if (nd > WF_MAX_DIMS)
        return unsupported(c, "rank %d (at most %d)", nd, WF_MAX_DIMS);
    if (no_param(c, x) && !x->ctrans) {
        alias_out(c, 0, x);
        val *o = nout(c, 0);
        if (o) {
            o->t_onnx = -1;
            o->ndim = nd;
            memcpy(o->shape, shape, sizeof(int64_t) * (size_t)nd);
        }
        return WF_OK;
    }
    int t = x->kind == V_CONST ? ir(c, x) : x->t;
    if (t < 0)
        return c->g->status;
    const wf_tensor *tt = &c->g->tensors[t];
    if (same_shape(tt->ndim, tt->shape, nd, shape)) {
        set_out(c, 0, t, nd, shape);
        return WF_OK;
    }
    int y;
    if (flatten && nd == 2 && same_shape(tt->ndim, tt->shape, x->ndim, x->shape) &&
        tt->ndim > 2 && shape[0] == tt->shape[0]) {
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.axis = 1;
        y = op1(c, WF_OP_FLATTEN, "", &t, 1, &at);
    } else {
        y = reshape_t(c, t, nd, shape, "");
    }
    set_out(c, 0, y, nd, shape);
    return c->g->status;
}

static wf_status h_flatten(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int r = x->ndim;
    int a;
    if ((st = axis_attr(c, 1, r, 1, &a)) != WF_OK)
        return st;
    int64_t s[2] = {numel_of(a, x->shape), numel_of(r - a, x->shape + a)};
    return reshape_out(c, x, 2, s, 1);
}

static wf_status h_reshape(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int64_t s[WF_MAX_DIMS + 1];
    int n;
    if (c->m->opset < 5)
        n = wf_onnx_attr_ints(c->node, "shape", s, WF_MAX_DIMS + 1);
    else
        n = ints_from(c, 1, "", s, WF_MAX_DIMS + 1, &st);
    if (st != WF_OK)
        return st;
    if (n < 0)
        return nerr(c, WF_FORMAT, "no target shape");
    if (n > WF_MAX_DIMS)
        return unsupported(c, "rank %d (at most %d)", n, WF_MAX_DIMS);
    int allowzero = (int)wf_onnx_attr_i(c->node, "allowzero", 0);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < n; i++) {
        if (s[i] == 0 && !allowzero) {
            if (i >= x->ndim)
                return nerr(c, WF_FORMAT, "shape[%d]=0 copies a dim the input does not have", i);
            s[i] = x->shape[i];
        }
        if (s[i] == -1) {
            if (infer >= 0)
                return nerr(c, WF_FORMAT, "more than one -1 in the target shape");
            infer = i;
        } else if (s[i] <= 0) {
            return unsupported(c, "target dim %d is %" PRId64, i, s[i]);
        } else if (wf_mul_i64(known, s[i], &known) != 0 || known > WF_MAX_NUMEL) {
            return nerr(c, WF_INVAL, "target shape has more than %" PRId64 " elements", WF_MAX_NUMEL);
        }
    }
    if (infer >= 0) {
        if (known == 0 || vnumel(x) % known != 0)
            return nerr(c, WF_INVAL, "cannot infer the -1 dim: %" PRId64 " elements, %" PRId64
                                     " known",
                        vnumel(x), known);
        s[infer] = vnumel(x) / known;
    }
    return reshape_out(c, x, n, s, 0);
}

static wf_status h_squeeze(ictx *c, int unsqueeze)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int64_t axes[WF_MAX_DIMS + 1];
    int n = c->m->opset >= 13 ? ints_from(c, 1, "", axes, WF_MAX_DIMS + 1, &st)
                              : wf_onnx_attr_ints(c->node, "axes", axes, WF_MAX_DIMS + 1);
    if (st != WF_OK)
        return st;
    int64_t s[WF_MAX_DIMS];
    int nd = 0;
    if (unsqueeze) {
        if (n < 0)
            return nerr(c, WF_FORMAT, "no axes");
        int r = x->ndim + n;
        if (r > WF_MAX_DIMS)
            return unsupported(c, "rank %d (at most %d)", r, WF_MAX_DIMS);
        int ins[WF_MAX_DIMS] = {0};
        for (int i = 0; i < n; i++) {
            int a = norm_axis(axes[i], r);
            if (a < 0 || a >= r || ins[a])
                return nerr(c, WF_FORMAT, "axis %" PRId64 " out of range or repeated", axes[i]);
            ins[a] = 1;
        }
        for (int i = 0, j = 0; i < r; i++)
            s[nd++] = ins[i] ? 1 : x->shape[j++];
    } else {
        int del[WF_MAX_DIMS] = {0};
        for (int i = 0; i < n; i++) {
            int a = norm_axis(axes[i], x->ndim);
            if (a < 0 || a >= x->ndim || x->shape[a] != 1)
                return nerr(c, WF_FORMAT, "axis %" PRId64 " is not a dim of size 1", axes[i]);
            del[a] = 1;
        }
        for (int i = 0; i < x->ndim; i++)
            if (!(n < 0 ? x->shape[i] == 1 : del[i]))
                s[nd++] = x->shape[i];
    }
    if (x->kind == V_TENSOR) {
        /* only the ONNX shape changes */
        alias_out(c, 0, x);
        val *o = nout(c, 0);
        if (o) {
            o->ndim = nd;
            memcpy(o->shape, s, sizeof(int64_t) * (size_t)nd);
            o->t_onnx = -1;
        }
        return WF_OK;
    }
    return reshape_out(c, x, nd, s, 0);
}

static wf_status h_transpose(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int r = x->ndim;
    int64_t p[WF_MAX_DIMS + 1];
    int n = wf_onnx_attr_ints(c->node, "perm", p, WF_MAX_DIMS + 1);
    if (n < 0) {
        n = r;
        for (int i = 0; i < r; i++)
            p[i] = r - 1 - i;
    }
    if (n != r)
        return nerr(c, WF_FORMAT, "perm has %d entries for rank %d", n, r);
    int perm[WF_MAX_DIMS], ident = 1;
    int64_t s[WF_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        perm[i] = (int)p[i];
        if (p[i] < 0 || p[i] >= r)
            return nerr(c, WF_FORMAT, "perm[%d]=%" PRId64 " out of range", i, p[i]);
        s[i] = x->shape[p[i]];
        ident &= p[i] == i;
    }
    if (ident) {
        alias_out(c, 0, x);
        return WF_OK;
    }
    if (x->kind == V_CONST && no_param(c, x) && !is_float_type(x->type) && vnumel(x) <= CONST_MAX) {
        /* integer constants (shape and pad arithmetic): folded */
        const double *v = cval(c, x, &st);
        double *o = v ? cnew(c, vnumel(x), &st) : NULL;
        if (!o)
            return st;
        for (int64_t i = 0; i < vnumel(x); i++) {
            /* output element i at output index (j_0..j_{r-1}) reads input index j_perm^-1 */
            int64_t rem = i, src = 0, in_stride[WF_MAX_DIMS];
            int64_t acc = 1;
            for (int k = r - 1; k >= 0; k--) {
                in_stride[k] = acc;
                acc *= x->shape[k];
            }
            for (int k = r - 1; k >= 0; k--) {
                int64_t idx = rem % s[k];
                rem /= s[k];
                src += idx * in_stride[perm[k]];
            }
            o[i] = v[src];
        }
        set_const(c, 0, x->type, r, s, o);
        return WF_OK;
    }
    if (no_param(c, x) && r == 2 && !x->cv) {
        /* a transposed weight: the parameter will be stored transposed */
        alias_out(c, 0, x);
        val *o = nout(c, 0);
        if (o) {
            o->t_onnx = -1;
            o->ctrans = !x->ctrans;
            o->shape[0] = x->shape[1];
            o->shape[1] = x->shape[0];
        }
        return WF_OK;
    }
    set_out(c, 0, transpose_t(c, ir(c, x), r, perm, ""), r, s);
    return c->g->status;
}

static wf_status h_concat(ictx *c)
{
    wf_status st = WF_OK;
    int n = (int)c->node->n_input;
    if (n < 1)
        return nerr(c, WF_FORMAT, "no inputs");
    val *xs[256];
    if (n > 256)
        return unsupported(c, "%d inputs (at most 256)", n);
    int allconst = 1;
    for (int i = 0; i < n; i++) {
        if (!(xs[i] = need_in(c, i, &st)))
            return st;
        allconst &= xs[i]->kind == V_CONST && (vnumel(xs[i]) <= 4096 || !is_float_type(xs[i]->type));
    }
    int r = xs[0]->ndim;
    int a;
    if ((st = axis_attr(c, 0, r, 0, &a)) != WF_OK)
        return st;
    int64_t os[WF_MAX_DIMS];
    memcpy(os, xs[0]->shape, sizeof os);
    os[a] = 0;
    for (int i = 0; i < n; i++) {
        if (xs[i]->ndim != r)
            return nerr(c, WF_FORMAT, "input %d has rank %d, input 0 rank %d", i, xs[i]->ndim, r);
        os[a] += xs[i]->shape[a];
    }
    if (allconst) {
        int64_t outer = numel_of(a, os), inner = numel_of(r - a - 1, os + a + 1);
        double *d = cnew(c, numel_of(r, os), &st);
        if (!d)
            return st;
        int64_t off = 0;
        for (int i = 0; i < n; i++) {
            const double *v = cval(c, xs[i], &st);
            if (!v)
                return st;
            int64_t w = xs[i]->shape[a] * inner;
            for (int64_t o = 0; o < outer; o++)
                memcpy(d + o * os[a] * inner + off, v + o * w, (size_t)w * sizeof *d);
            off += w;
        }
        set_const(c, 0, xs[0]->type, r, os, d);
        return WF_OK;
    }
    /* chain concats of at most WF_MAX_INPUTS; skip empty inputs */
    int acc = -1, in[WF_MAX_INPUTS], k = 0;
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.axis = a;
    for (int i = 0; i < n; i++) {
        if (vnumel(xs[i]) == 0)
            continue;
        if (k == WF_MAX_INPUTS) {
            acc = op1(c, WF_OP_CONCAT, "/part", in, k, &at);
            k = 0;
            in[k++] = acc;
        }
        in[k++] = ir(c, xs[i]);
    }
    if (c->g->status != WF_OK)
        return c->g->status;
    set_out(c, 0, k == 1 ? in[0] : op1(c, WF_OP_CONCAT, "", in, k, &at), r, os);
    return c->g->status;
}

static wf_status h_split(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int nout_ = (int)c->node->n_output;
    int r = x->ndim;
    int a;
    if ((st = axis_attr(c, 0, r, 0, &a)) != WF_OK)
        return st;
    int64_t sizes[WF_MAX_OUTPUTS + 1];
    int n = c->m->opset >= 13 ? ints_from(c, 1, "", sizes, WF_MAX_OUTPUTS + 1, &st)
                              : wf_onnx_attr_ints(c->node, "split", sizes, WF_MAX_OUTPUTS + 1);
    if (st != WF_OK)
        return st;
    if (nout_ > WF_MAX_OUTPUTS || n > WF_MAX_OUTPUTS)
        return unsupported(c, "%d outputs (the IR's split has at most %d)", nout_ > n ? nout_ : n,
                           WF_MAX_OUTPUTS);
    int64_t dim = x->shape[a];
    if (n < 0) {
        /* equal parts; opset 18's num_outputs lets the last be smaller */
        if (nout_ < 1)
            return nerr(c, WF_FORMAT, "Split with no outputs and no split sizes");
        n = nout_;
        int64_t part = (dim + n - 1) / n;
        for (int i = 0; i < n; i++)
            sizes[i] = i < n - 1 ? part : dim - part * (n - 1);
    }
    if (n != nout_)
        return nerr(c, WF_FORMAT, "%d split sizes for %d outputs", n, nout_);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] <= 0)
            return unsupported(c, "split size %" PRId64 " (parts must be non-empty)", sizes[i]);
        if (sizes[i] > dim)
            return nerr(c, WF_FORMAT, "split size %" PRId64 " is larger than the dim %" PRId64, sizes[i], dim);
        sum += sizes[i];
    }
    if (sum != dim)
        return nerr(c, WF_FORMAT, "split sizes add up to %" PRId64 " but the dim is %" PRId64, sum, dim);
    if (n == 1) {
        alias_out(c, 0, x);
        return WF_OK;
    }
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.axis = a;
    at.nsplit = n;
    int equal = 1;
    for (int i = 0; i < n; i++)
        equal &= sizes[i] == sizes[0];
    for (int i = 0; i < n && !equal; i++)
        at.sizes[i] = sizes[i];
    int t = ir(c, x);
    int op = add_op(c, WF_OP_SPLIT, "", &t, 1, &at);
    if (op < 0)
        return c->g->status;
    for (int i = 0; i < n; i++)
        set_out(c, i, wf_graph_op_output(c->g, op, i), 0, NULL);
    return WF_OK;
}

/* table[V,H] (an initializer: a trainable embedding) indexed by constant ids
 * (position ids from a range or a buffer, token types of zeros): the rows
 * k0..k0+m-1 of the table, repeated over the ids' leading dims. The table
 * stays one parameter; the ids become no tensor. */
static wf_status gather_rows(ictx *c, val *d, val *ix, int nd, const int64_t *os)
{
    wf_status st = WF_OK;
    const double *iv = cval(c, ix, &st);
    if (!iv)
        return st;
    int64_t n = vnumel(ix), V = d->shape[0];
    if (n == 0)
        return unsupported(c, "Gather with no indices");
    for (int64_t q = 0; q < n; q++) {
        int64_t k = wf_onnx_d2i(iv[q]);
        if (k < -V || k >= V)
            return nerr(c, WF_INVAL, "index %" PRId64 " out of range [0, %" PRId64 ")", k, V);
    }
    int64_t k0 = wf_onnx_d2i(iv[0]);
    if (k0 < 0)
        k0 += V;
    int64_t m = ix->ndim ? ix->shape[ix->ndim - 1] : 1;
    for (int pass = 0; pass < 2; pass++) {
        int ok = m >= 1 && k0 >= 0 && k0 + m <= V;
        for (int64_t q = 0; ok && q < n; q++) {
            int64_t k = wf_onnx_d2i(iv[q]);
            ok = (k < 0 ? k + V : k) == k0 + q % m;
        }
        if (ok)
            break;
        if (pass == 1 || m == 1)
            return unsupported(c, "Gather of a parameter table by constant indices that are not "
                                  "consecutive rows (as position ids are)");
        m = 1;
    }
    int t = ir(c, d);
    if (t < 0)
        return c->g->status;
    if (m < V) {
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.axis = 0;
        if (k0 > 0)
            at.sizes[at.nsplit++] = k0;
        int part = at.nsplit;
        at.sizes[at.nsplit++] = m;
        if (V - k0 - m > 0)
            at.sizes[at.nsplit++] = V - k0 - m;
        t = wf_graph_op_output(c->g, add_op(c, WF_OP_SPLIT, "/rows", &t, 1, &at), part);
    }
    if (t < 0)
        return c->g->status;
    c->npat[PAT_ROWS]++;
    if (n == m) {
        set_out(c, 0, t, nd, os);
        return WF_OK;
    }
    /* rows [m,H] repeated over the leading dims of the ids: [...,m,H] */
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.ndim = nd;
    memcpy(at.shape, os, sizeof(int64_t) * (size_t)nd);
    set_out(c, 0, op1(c, WF_OP_EXPAND, "/repeat", &t, 1, &at), nd, os);
    return c->g->status;
}

static wf_status h_gather(ictx *c)
{
    wf_status st = WF_OK;
    val *d = need_in(c, 0, &st), *ix = need_in(c, 1, &st);
    if (st != WF_OK)
        return st;
    int r = d->ndim;
    int a;
    if ((st = axis_attr(c, 0, r, 0, &a)) != WF_OK)
        return st;
    int64_t os[WF_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < a; i++)
        os[nd++] = d->shape[i];
    if (r - 1 + ix->ndim > WF_MAX_DIMS)
        return unsupported(c, "output rank %d", r - 1 + ix->ndim);
    for (int i = 0; i < ix->ndim; i++)
        os[nd++] = ix->shape[i];
    for (int i = a + 1; i < r; i++)
        os[nd++] = d->shape[i];
    if (d->kind == V_CONST && ix->kind == V_CONST && is_float_type(d->type) && a == 0 && r == 2 &&
        d->src && !d->ctrans)
        return gather_rows(c, d, ix, nd, os);
    if (d->kind == V_CONST && ix->kind == V_CONST && vnumel(d) <= CONST_MAX &&
        (!is_float_type(d->type) || vnumel(d) <= 4096)) {
        const double *dv = cval(c, d, &st), *iv = dv ? cval(c, ix, &st) : NULL;
        if (!iv)
            return st;
        int64_t outer = numel_of(a, d->shape), inner = numel_of(r - a - 1, d->shape + a + 1);
        int64_t ni = vnumel(ix), da = d->shape[a];
        double *o = cnew(c, outer * ni * inner, &st);
        if (!o)
            return st;
        for (int64_t p = 0; p < outer; p++)
            for (int64_t q = 0; q < ni; q++) {
                int64_t k = wf_onnx_d2i(iv[q]);
                if (k < 0)
                    k += da;
                if (k < 0 || k >= da)
                    return nerr(c, WF_INVAL, "index %" PRId64 " out of range [0, %" PRId64 ")",
                                wf_onnx_d2i(iv[q]), da);
                memcpy(o + (p * ni + q) * inner, dv + (p * da + k) * inner,
                       (size_t)inner * sizeof *o);
            }
        set_const(c, 0, d->type, nd, os, o);
        return WF_OK;
    }
    if (a == 0 && r == 2 && d->kind == V_CONST && ix->kind != V_CONST) {
        /* ids[...] into table[V,H]: an embedding */
        int in[2] = {ir(c, ix), ir(c, d)};
        return out_op(c, WF_OP_EMBEDDING, in, 2, NULL, nd, os);
    }
    double k;
    if (ix->kind == V_CONST && ix->ndim == 0 && scalar_of(c, ix, &k)) {
        /* x[..., k, ...] along axis a: a split that keeps one part */
        int64_t da = d->shape[a], i = (int64_t)k < 0 ? (int64_t)k + da : (int64_t)k;
        if (i < 0 || i >= da)
            return nerr(c, WF_INVAL, "index %" PRId64 " out of range [0, %" PRId64 ")", (int64_t)k, da);
        int t = ir(c, d);
        if (da > 1) {
            wf_op_attrs at;
            memset(&at, 0, sizeof at);
            at.axis = a;
            int part = 0;
            if (i > 0)
                at.sizes[at.nsplit++] = i;
            part = at.nsplit;
            at.sizes[at.nsplit++] = 1;
            if (da - i - 1 > 0)
                at.sizes[at.nsplit++] = da - i - 1;
            t = wf_graph_op_output(c->g, add_op(c, WF_OP_SPLIT, "/select", &t, 1, &at), part);
        }
        if (t < 0)
            return c->g->status;
        set_out(c, 0, t, nd, os);
        return WF_OK;
    }
    return unsupported(c, "Gather along axis %d of a %s tensor with %s indices (an embedding "
                          "needs a constant [V,H] table and run-time ids)",
                       a, d->kind == V_CONST ? "constant" : "run-time",
                       ix->kind == V_CONST ? "constant" : "run-time");
}

/* ---- constants ---------------------------------------------------------------------------- */

static wf_status h_constant(ictx *c)
{
    wf_status st = WF_OK;
    const Onnx__NodeProto *n = c->node;
    const Onnx__AttributeProto *at;
    val *o = nout(c, 0);
    if (!o)
        return WF_OK;
    if ((at = wf_onnx_attr(n, "value")) && at->t) {
        const Onnx__TensorProto *t = at->t;
        if (t->n_dims > WF_MAX_DIMS || wf_onnx_numel(t) < 0)
            return unsupported(c, "a constant of rank %zu", t->n_dims);
        o->kind = V_CONST;
        o->t = -1;
        o->src = t;
        o->cv = NULL;
        o->type = t->data_type;
        o->ndim = (int)t->n_dims;
        for (int i = 0; i < o->ndim; i++)
            o->shape[i] = t->dims[i];
        return WF_OK;
    }
    double *d = NULL;
    int64_t shape[1] = {0};
    if ((at = wf_onnx_attr(n, "value_float"))) {
        if (!(d = cnew(c, 1, &st)))
            return st;
        d[0] = at->f;
        set_const(c, 0, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, shape, d);
    } else if ((at = wf_onnx_attr(n, "value_int"))) {
        if (!(d = cnew(c, 1, &st)))
            return st;
        d[0] = (double)at->i;
        set_const(c, 0, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, shape, d);
    } else if ((at = wf_onnx_attr(n, "value_floats"))) {
        shape[0] = (int64_t)at->n_floats;
        if (!(d = cnew(c, shape[0], &st)))
            return st;
        for (size_t i = 0; i < at->n_floats; i++)
            d[i] = at->floats[i];
        set_const(c, 0, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, shape, d);
    } else if ((at = wf_onnx_attr(n, "value_ints"))) {
        shape[0] = (int64_t)at->n_ints;
        if (!(d = cnew(c, shape[0], &st)))
            return st;
        for (size_t i = 0; i < at->n_ints; i++)
            d[i] = (double)at->ints[i];
        set_const(c, 0, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, shape, d);
    } else {
        return unsupported(c, "a Constant without value, value_float(s) or value_int(s)");
    }
    return WF_OK;
}

static wf_status h_shape(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int r = x->ndim;
    int s = norm_axis(wf_onnx_attr_i(c->node, "start", 0), r);
    int e = norm_axis(wf_onnx_attr_i(c->node, "end", r), r);
    s = s < 0 ? 0 : (s > r ? r : s);
    e = e < 0 ? 0 : (e > r ? r : e);
    int64_t n[1] = {e > s ? e - s : 0};
    double *d = cnew(c, n[0], &st);
    if (!d)
        return st;
    for (int i = s; i < e; i++)
        d[i - s] = (double)x->shape[i];
    set_const(c, 0, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, n, d);
    return WF_OK;
}

static wf_status h_constant_of_shape(ictx *c)
{
    wf_status st = WF_OK;
    int64_t s[WF_MAX_DIMS + 1];
    int n = ints_from(c, 0, "", s, WF_MAX_DIMS + 1, &st);
    if (st != WF_OK)
        return st;
    if (n < 0 || n > WF_MAX_DIMS)
        return unsupported(c, "rank %d", n);
    double v = 0;
    int32_t type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    const Onnx__AttributeProto *at = wf_onnx_attr(c->node, "value");
    if (at && at->t) {
        type = at->t->data_type;
        if (wf_onnx_numel(at->t) != 1)
            return nerr(c, WF_FORMAT, "value must have one element");
        if ((st = wf_onnx_decode(at->t, NULL, &v, 1)) != WF_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", wf_last_error());
            return nerr(c, st, "%s", msg);
        }
    }
    int64_t total = numel_of(n, s);
    if (total > CONST_MAX)
        return unsupported(c, "a constant of %" PRId64 " elements", total);
    double *d = cnew(c, total, &st);
    if (!d)
        return st;
    for (int64_t i = 0; i < total; i++)
        d[i] = v;
    set_const(c, 0, type, n, s, d);
    return WF_OK;
}

static wf_status h_cast(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int32_t to = (int32_t)wf_onnx_attr_i(c->node, "to", 0);
    if (x->kind == V_CONST && (vnumel(x) <= 4096 || !is_float_type(x->type))) {
        const double *v = cval(c, x, &st);
        if (!v)
            return st;
        int64_t n = vnumel(x);
        double *d = cnew(c, n, &st);
        if (!d)
            return st;
        for (int64_t i = 0; i < n; i++)
            d[i] = is_float_type(to) ? v[i] : trunc(v[i]);
        set_const(c, 0, to, x->ndim, x->shape, d);
        return WF_OK;
    }
    if (to == x->type || (is_float_type(to) && is_float_type(x->type)) ||
        (!is_float_type(to) && !is_float_type(x->type))) {
        /* same kind of number: the IR keeps the tensor's dtype */
        alias_out(c, 0, x);
        return WF_OK;
    }
    if (is_float_type(to) && x->kind == V_TENSOR) {
        /* ids or a 0/1 mask to floats (an attention_mask input) */
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.dtype = c->fdtype != WF_DTYPE_COUNT ? (int)c->fdtype : (int)WF_DTYPE_FP32;
        set_out(c, 0, op1(c, WF_OP_CAST, "", &x->t, 1, &at), x->ndim, x->shape);
        val *o = nout(c, 0);
        if (o)
            o->type = to;
        return c->g->status;
    }
    return unsupported(c, "Cast of a run-time %s tensor to %s", wf_onnx_type_name(x->type),
                       wf_onnx_type_name(to));
}

/* ---- training ops -------------------------------------------------------------------------- */

static wf_status h_dropout(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    if (out_read(c, 1))
        return unsupported(c, "reading the Dropout mask output");
    double p = 0.5;
    if (c->m->opset < 12) {
        p = wf_onnx_attr_f(c->node, "ratio", 0.5);
    } else {
        val *r = nin(c, 1, &st);
        if (st != WF_OK)
            return st;
        if (r && !scalar_of(c, r, &p))
            return unsupported(c, "a run-time dropout ratio");
    }
    if (!(p >= 0 && p < 1))
        return nerr(c, WF_INVAL, "dropout ratio %g outside [0, 1)", p);
    if (p == 0) {
        alias_out(c, 0, x);
        return WF_OK;
    }
    /* The IR runs dropout as in training (the ratio ONNX gives). */
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.p = p;
    at.seed = (uint64_t)wf_onnx_attr_i(c->node, "seed", c->node_index + 1);
    int t = x->kind == V_CONST ? ir(c, x) : x->t;
    set_out(c, 0, op1(c, WF_OP_DROPOUT, "", &t, 1, &at), x->ndim, x->shape);
    return c->g->status;
}

static wf_status h_sce(ictx *c)
{
    wf_status st = WF_OK;
    nodeinfo *ni = &c->ni[c->node_index];
    /* scores: a fused Transpose's input (class dim last), else input 0 */
    val *x = ni->fused_in ? vfind(c, ni->fused_in) : need_in(c, 0, &st);
    val *lab = need_in(c, 1, &st), *w = NULL;
    if (st == WF_OK)
        w = nin(c, 2, &st);
    if (st != WF_OK)
        return st;
    char buf[32];
    const char *red = wf_onnx_attr_s(c->node, "reduction", "mean", buf, sizeof buf);
    if (w)
        return unsupported(c, "class weights");
    if (strcmp(red, "mean") != 0)
        return unsupported(c, "reduction '%s' (the IR's cross_entropy is the mean)", red);
    if (wf_onnx_attr(c->node, "ignore_index"))
        return unsupported(c, "ignore_index");
    if (out_read(c, 1))
        return unsupported(c, "reading the log_prob output");
    if (!x || x->kind == V_NONE)
        return nerr(c, WF_INTERNAL, "scores missing");
    int r = x->ndim, t;
    if (r < 2 || lab->ndim != r - 1)
        return nerr(c, WF_FORMAT, "scores of rank %d with labels of rank %d", r, lab->ndim);
    if (ni->fused_in || r == 2) {
        t = ir(c, x);
    } else {
        int perm[WF_MAX_DIMS];
        perm[0] = 0;
        for (int i = 1; i < r - 1; i++)
            perm[i] = i + 1;
        perm[r - 1] = 1;
        t = transpose_t(c, ir(c, x), r, perm, "/classes_last");
    }
    int in[2] = {t, ir(c, lab)};
    return out_op(c, WF_OP_CROSS_ENTROPY, in, 2, NULL, 0, NULL);
}

static wf_status h_attention(ictx *c, int weft)
{
    wf_status st = WF_OK;
    val *q = need_in(c, 0, &st), *k = need_in(c, 1, &st), *v = need_in(c, 2, &st);
    if (st != WF_OK)
        return st;
    for (int i = 3; i < (int)c->node->n_input; i++)
        if (c->node->input[i] && *c->node->input[i])
            return unsupported(c, "Attention input %d (masks and caches)", i);
    for (int i = 1; i < (int)c->node->n_output; i++)
        if (out_read(c, i))
            return unsupported(c, "Attention output %d", i);
    if (q->ndim != 3)
        return unsupported(c, "Attention on rank-%d inputs (the IR takes [B,S,A*D])", q->ndim);
    if (wf_onnx_attr_f(c->node, "softcap", 0) != 0 || wf_onnx_attr_i(c->node, "qk_matmul_output_mode", 0))
        return unsupported(c, "softcap / qk_matmul_output_mode");
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.heads = (int)wf_onnx_attr_i(c->node, "q_num_heads", 0);
    at.kv_heads = (int)wf_onnx_attr_i(c->node, "kv_num_heads", 0);
    at.causal = (int)wf_onnx_attr_i(c->node, "is_causal", 0);
    at.scale = wf_onnx_attr_f(c->node, "scale", 0);
    if (weft)
        at.p = wf_onnx_attr_f(c->node, "dropout", 0);
    at.seed = (uint64_t)wf_onnx_attr_i(c->node, "seed", c->node_index + 1);
    if (at.heads <= 0)
        return nerr(c, WF_FORMAT, "q_num_heads is required for 3-D inputs");
    int in[3] = {ir(c, q), ir(c, k), ir(c, v)};
    return out_op(c, WF_OP_ATTENTION, in, 3, &at, 0, NULL);
}

static wf_status h_rotary(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.heads = (int)wf_onnx_attr_i(c->node, "heads", 0);
    at.base = wf_onnx_attr_f(c->node, "base", 0);
    int t = ir(c, x);
    set_out(c, 0, op1(c, WF_OP_ROTARY, "", &t, 1, &at), 0, NULL);
    return c->g->status;
}

static wf_status h_gelu(ictx *c)
{
    char buf[16];
    const char *ap = wf_onnx_attr_s(c->node, "approximate", "none", buf, sizeof buf);
    if (strcmp(ap, "none") != 0 && strcmp(ap, "tanh") != 0)
        return nerr(c, WF_FORMAT, "approximate '%s' (expected none or tanh)", ap);
    return h_unary(c, WF_OP_GELU);
}

/* A fused pattern's emitting node: op(kind) of the pattern's input. */
static wf_status h_fused(ictx *c, wf_op_kind k, const char *in_name)
{
    val *x = vfind(c, in_name);
    if (!x || x->kind == V_NONE)
        return nerr(c, WF_INTERNAL, "fused input '%s' missing", in_name);
    int t = x->kind == V_CONST ? ir(c, x) : x->t;
    set_out(c, 0, op1(c, k, "", &t, 1, NULL), x->ndim, x->shape);
    return c->g->status;
}

/* ---- PyTorch export patterns: ranges, slices, masks, activations ----------------------- */

/* Clip (ReLU6 as PyTorch exports it): min/max from inputs (opset >= 11) or
 * attributes; Clip(x, 0, +inf) is a relu. */
static wf_status h_clip(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    double lo = -INFINITY, hi = INFINITY;
    if (c->m->opset >= 11) {
        if (!scalar_in(c, 1, -INFINITY, &lo, &st) || !scalar_in(c, 2, INFINITY, &hi, &st))
            return st;
    } else {
        lo = wf_onnx_attr_f(c->node, "min", -INFINITY);
        hi = wf_onnx_attr_f(c->node, "max", INFINITY);
    }
    if (lo == 0 && hi == INFINITY) {
        int t = ir_any(c, x);
        set_out(c, 0, op1(c, WF_OP_RELU, "", &t, 1, NULL), x->ndim, x->shape);
        return c->g->status;
    }
    return clip_out(c, x, 1.0, 0.0, lo, hi);
}

static wf_status h_hardsigmoid(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    return clip_out(c, x, wf_onnx_attr_f(c->node, "alpha", 0.2), wf_onnx_attr_f(c->node, "beta", 0.5),
                    0.0, 1.0);
}

/* Range(start, limit, delta) of constants: folded. */
static wf_status h_range(ictx *c)
{
    wf_status st = WF_OK;
    val *a = need_in(c, 0, &st), *b = need_in(c, 1, &st), *d = need_in(c, 2, &st);
    if (st != WF_OK)
        return st;
    double s, l, dl;
    if (!scalar_of(c, a, &s) || !scalar_of(c, b, &l) || !scalar_of(c, d, &dl))
        return unsupported(c, "Range of run-time values (start, limit and delta must be "
                              "constants, as with a fixed sequence length)");
    if (dl == 0)
        return nerr(c, WF_FORMAT, "Range with delta 0");
    double nn = ceil((l - s) / dl);
    int64_t n = nn > 0 ? (int64_t)nn : 0;
    if (n > CONST_MAX)
        return unsupported(c, "a Range of %" PRId64 " elements", n);
    double *o = cnew(c, n, &st);
    if (!o)
        return st;
    for (int64_t i = 0; i < n; i++)
        o[i] = s + (double)i * dl;
    int64_t os[1] = {n};
    set_const(c, 0, a->type, 1, os, o);
    return WF_OK;
}

/* Equal, Not, Where, Less, Greater of constants: folded (bool as 0/1). */
static wf_status h_logic(ictx *c, const char *op)
{
    wf_status st = WF_OK;
    int n = !strcmp(op, "Not") ? 1 : !strcmp(op, "Where") ? 3 : 2;
    val *x[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n; i++)
        if (!(x[i] = need_in(c, i, &st)))
            return st;
    for (int i = 0; i < n; i++)
        if (x[i]->kind != V_CONST)
            return unsupported(c, "%s of a run-time tensor ('%s'; weft folds %s over constants, "
                                  "and recognizes masks inside attention)",
                               op, x[i]->name, op);
    int no = x[0]->ndim;
    int64_t os[WF_MAX_DIMS];
    memcpy(os, x[0]->shape, sizeof os);
    for (int i = 1; i < n; i++)
        if (!broadcast(no, os, x[i]->ndim, x[i]->shape, &no, os))
            return nerr(c, WF_FORMAT, "shapes do not broadcast");
    int64_t total = numel_of(no, os);
    if (total > CONST_MAX)
        return unsupported(c, "folding %" PRId64 " elements", total);
    const double *v[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n; i++)
        if (!(v[i] = cval(c, x[i], &st)))
            return st;
    double *d = cnew(c, total, &st);
    if (!d)
        return st;
    for (int64_t i = 0; i < total; i++) {
        double e[3];
        for (int k = 0; k < n; k++) {
            /* broadcast index of element i into x[k] */
            int64_t r = i, idx = 0, stride = 1;
            for (int j = no - 1; j >= 0; j--) {
                int64_t p = r % os[j];
                r /= os[j];
                int jk = j - (no - x[k]->ndim);
                if (jk < 0)
                    continue;
                idx += (x[k]->shape[jk] == 1 ? 0 : p) * stride;
                stride *= x[k]->shape[jk];
            }
            e[k] = v[k][idx];
        }
        if (n == 1)
            d[i] = e[0] == 0;
        else if (n == 3)
            d[i] = e[0] != 0 ? e[1] : e[2];
        else if (!strcmp(op, "Equal"))
            d[i] = e[0] == e[1];
        else if (!strcmp(op, "Less"))
            d[i] = e[0] < e[1];
        else
            d[i] = e[0] > e[1];
    }
    int32_t type = n == 3 ? x[1]->type : ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    set_const(c, 0, type, no, os, d);
    return WF_OK;
}

/* Expand: constants folded; a run-time tensor becomes an expand op (or
 * itself, when the shape does not change). */
static wf_status h_expand(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int64_t s[WF_MAX_DIMS + 1];
    int n = ints_from(c, 1, "", s, WF_MAX_DIMS + 1, &st);
    if (st != WF_OK)
        return st;
    if (n < 0 || n > WF_MAX_DIMS)
        return unsupported(c, "Expand to rank %d", n);
    int no;
    int64_t os[WF_MAX_DIMS];
    if (!broadcast(x->ndim, x->shape, n, s, &no, os))
        return nerr(c, WF_FORMAT, "shapes do not broadcast");
    if (same_shape(x->ndim, x->shape, no, os)) {
        alias_out(c, 0, x);
        return WF_OK;
    }
    if (x->kind == V_CONST && !is_float_type(x->type)) {
        int64_t total = numel_of(no, os);
        if (total > CONST_MAX)
            return unsupported(c, "folding %" PRId64 " elements", total);
        const double *v = cval(c, x, &st);
        double *d = v ? cnew(c, total, &st) : NULL;
        if (!d)
            return st;
        for (int64_t i = 0; i < total; i++) {
            int64_t r = i, idx = 0, stride = 1;
            for (int j = no - 1; j >= 0; j--) {
                int64_t p = r % os[j];
                r /= os[j];
                int jk = j - (no - x->ndim);
                if (jk < 0)
                    continue;
                idx += (x->shape[jk] == 1 ? 0 : p) * stride;
                stride *= x->shape[jk];
            }
            d[i] = v[idx];
        }
        set_const(c, 0, x->type, no, os, d);
        return WF_OK;
    }
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.ndim = no;
    memcpy(at.shape, os, sizeof(int64_t) * (size_t)no);
    int t = ir_any(c, x);
    set_out(c, 0, op1(c, WF_OP_EXPAND, "", &t, 1, &at), no, os);
    return c->g->status;
}

/* The begin and end (exclusive) of a step-1 slice of a dim of size d, or of
 * any step: the first index and the count, as ONNX clamps them. */
static void slice_range(int64_t d, int64_t b, int64_t e, int64_t step, int64_t *first, int64_t *count)
{
    b = b < 0 ? b + d : b;
    e = e < 0 ? e + d : e;
    int64_t n = 0;
    if (step > 0) {
        b = b < 0 ? 0 : (b > d ? d : b);
        e = e < 0 ? 0 : (e > d ? d : e);
        n = e > b ? (e - b + step - 1) / step : 0;
    } else {
        b = b < 0 ? -1 : (b > d - 1 ? d - 1 : b);
        e = e < -1 ? -1 : (e > d - 1 ? d - 1 : e);
        n = b > e ? (b - e + (-step) - 1) / (-step) : 0;
    }
    *first = b;
    *count = n;
}

/* Slice: constants of any rank are folded; a run-time tensor is cut by split
 * ops (step 1 on each sliced axis: q, k, v out of a packed projection). */
static wf_status h_slice(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int r = x->ndim;
    int64_t s[WF_MAX_DIMS], e[WF_MAX_DIMS], ax[WF_MAX_DIMS], stp[WF_MAX_DIMS];
    int ns, ne, na = -1, nst = -1;
    if (c->m->opset >= 10) {
        ns = ints_from(c, 1, "", s, WF_MAX_DIMS, &st);
        ne = ints_from(c, 2, "", e, WF_MAX_DIMS, &st);
        na = ints_from(c, 3, "", ax, WF_MAX_DIMS, &st);
        nst = ints_from(c, 4, "", stp, WF_MAX_DIMS, &st);
    } else {
        ns = wf_onnx_attr_ints(c->node, "starts", s, WF_MAX_DIMS);
        ne = wf_onnx_attr_ints(c->node, "ends", e, WF_MAX_DIMS);
        na = wf_onnx_attr_ints(c->node, "axes", ax, WF_MAX_DIMS);
    }
    if (st != WF_OK)
        return st;
    if (ns < 1 || ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns) || ns > r)
        return nerr(c, WF_FORMAT, "Slice with %d starts, %d ends, %d axes and %d steps for rank %d",
                    ns, ne, na, nst, r);
    /* per dim: first index, count, step */
    int64_t first[WF_MAX_DIMS], cnt[WF_MAX_DIMS], step[WF_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        first[i] = 0;
        cnt[i] = x->shape[i];
        step[i] = 1;
    }
    for (int i = 0; i < ns; i++) {
        int a = norm_axis(na >= 0 ? ax[i] : i, r);
        int64_t sp = nst >= 0 ? stp[i] : 1;
        if (a < 0 || a >= r || sp == 0)
            return nerr(c, WF_FORMAT, "Slice axis %d or step %" PRId64 " out of range", a, sp);
        step[a] = sp;
        slice_range(x->shape[a], s[i], e[i], sp, &first[a], &cnt[a]);
    }
    if (x->kind == V_CONST && (!is_float_type(x->type) || vnumel(x) <= 4096 || x->nuse == 1) &&
        vnumel(x) <= CONST_MAX && no_param(c, x)) {
        const double *v = cval(c, x, &st);
        if (!v)
            return st;
        int64_t total = numel_of(r, cnt);
        double *o = cnew(c, total, &st);
        if (!o)
            return st;
        for (int64_t i = 0; i < total; i++) {
            int64_t rem = i, src = 0, stride = 1;
            for (int k = r - 1; k >= 0; k--) {
                int64_t p = rem % cnt[k];
                rem /= cnt[k];
                src += (first[k] + p * step[k]) * stride;
                stride *= x->shape[k];
            }
            o[i] = v[src];
        }
        set_const(c, 0, x->type, r, cnt, o);
        return WF_OK;
    }
    int t = ir_any(c, x);
    int64_t cur[WF_MAX_DIMS];
    memcpy(cur, x->shape, sizeof cur);
    for (int a = 0; a < r && t >= 0; a++) {
        if (cnt[a] == x->shape[a] && (step[a] == 1 || cnt[a] <= 1))
            continue;
        if (step[a] != 1 && cnt[a] > 1)
            return unsupported(c, "Slice of a run-time tensor with step %" PRId64 " on axis %d",
                               step[a], a);
        if (cnt[a] == 0)
            return unsupported(c, "an empty Slice of a run-time tensor (axis %d)", a);
        wf_op_attrs at;
        memset(&at, 0, sizeof at);
        at.axis = a;
        int part = 0;
        if (first[a] > 0)
            at.sizes[at.nsplit++] = first[a];
        part = at.nsplit;
        at.sizes[at.nsplit++] = cnt[a];
        if (x->shape[a] - first[a] - cnt[a] > 0)
            at.sizes[at.nsplit++] = x->shape[a] - first[a] - cnt[a];
        char sfx[32];
        snprintf(sfx, sizeof sfx, "/axis%d", a);
        t = wf_graph_op_output(c->g, add_op(c, WF_OP_SPLIT, sfx, &t, 1, &at), part);
        cur[a] = cnt[a];
    }
    if (c->g->status != WF_OK)
        return c->g->status;
    set_out(c, 0, t, r, cur);
    return WF_OK;
}

/* Pad: zero padding of nothing is the input itself; zero spatial padding in
 * front of a Conv is folded into the Conv (pattern scan). */
static wf_status h_pad(ictx *c)
{
    wf_status st = WF_OK;
    val *x = need_in(c, 0, &st);
    if (!x)
        return st;
    int64_t pads[2 * WF_MAX_DIMS];
    if (pad_amounts(c, c->node, x->ndim, pads, &st) < 0)
        return st;
    for (int i = 0; i < 2 * x->ndim; i++)
        if (pads[i] != 0)
            return unsupported(c, "Pad of %" PRId64 " on dim %d that no Conv takes over (weft "
                                  "folds zero padding into the convolution that reads it)",
                               pads[i], i % x->ndim);
    alias_out(c, 0, x);
    return WF_OK;
}

/* The attention subgraph found by the scan: q, k, v [B,S,A*D] with A from
 * the q reshape, the scale, a causal or absent mask, and dropout. */
static wf_status h_attention_fused(ictx *c)
{
    wf_status st = WF_OK;
    nodeinfo *ni = &c->ni[c->node_index];
    val *q = vfind(c, ni->aux[0]), *k = vfind(c, ni->aux[1]), *v = vfind(c, ni->aux[2]);
    if (!q || !k || !v || q->kind == V_NONE || k->kind == V_NONE || v->kind == V_NONE)
        return nerr(c, WF_INTERNAL, "attention inputs missing");
    if (q->ndim != 3 || !same_shape(3, q->shape, 3, k->shape) || !same_shape(3, q->shape, 3, v->shape))
        return unsupported(c, "attention whose q, k, v are not [B,S,A*D] of one shape");
    const Onnx__NodeProto *keep = c->node;
    int keep_i = c->node_index;
    /* heads: the q reshape's target [B,S,A,D] */
    c->node = c->gp->node[ni->qnode];
    c->node_index = ni->qnode;
    int64_t rs[WF_MAX_DIMS + 1];
    int nr = ints_from(c, 1, "", rs, WF_MAX_DIMS + 1, &st);
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.seed = (uint64_t)keep_i + 1;
    double sc = 1.0, p = 0;
    if (st == WF_OK && ni->snode >= 0) {
        c->node = c->gp->node[ni->snode];
        c->node_index = ni->snode;
        /* the scores operand was fused away: only the constant is read */
        val *a = vfind(c, c->node->input[0]), *b = vfind(c, c->node->input[1]);
        double s;
        if (scalar_of(c, b, &s) || scalar_of(c, a, &s))
            sc = strcmp(c->node->op_type, "Div") == 0 ? 1.0 / s : s;
        else
            st = unsupported(c, "an attention scale that is not a constant scalar");
    }
    if (st == WF_OK && ni->mnode >= 0) {
        /* the mask: causal (key j > query i masked) or nothing masked */
        c->node = c->gp->node[ni->mnode];
        c->node_index = ni->mnode;
        int where = strcmp(c->node->op_type, "Where") == 0;
        val *m = vfind(c, c->node->input[where ? 0 : 1]), *f = where ? vfind(c, c->node->input[1]) : NULL;
        if (!where && m && m->kind != V_CONST)
            m = vfind(c, c->node->input[0]);
        double fill = 0;
        if (!m || m->kind != V_CONST || (where && !scalar_of(c, f, &fill)))
            st = unsupported(c, "an attention mask computed at run time (weft's attention op "
                                "takes causal masks only)");
        const double *mv = st == WF_OK ? cval(c, m, &st) : NULL;
        int64_t S = q->shape[1];
        if (mv && (m->ndim < 2 || m->shape[m->ndim - 1] != S || m->shape[m->ndim - 2] != S))
            st = unsupported(c, "an attention mask that is not [...,S,S]");
        int causal = 1, none = 1;
        for (int64_t i = 0; mv && st == WF_OK && i < vnumel(m); i++) {
            int64_t col = i % S, row = (i / S) % S;
            int masked = where ? mv[i] != 0 && fill <= -1e4 : mv[i] <= -1e4;
            int kept = where ? mv[i] == 0 : mv[i] == 0;
            if (!masked && !kept)
                causal = none = 0;
            causal &= col > row ? masked : kept;
            none &= kept;
        }
        if (st == WF_OK && !causal && !none)
            st = unsupported(c, "an attention mask that is neither causal nor empty");
        at.causal = causal && !none;
    }
    if (st == WF_OK && ni->dnode >= 0) {
        c->node = c->gp->node[ni->dnode];
        c->node_index = ni->dnode;
        val *r = nin(c, 1, &st);
        if (st == WF_OK && r && !scalar_of(c, r, &p))
            st = unsupported(c, "a run-time dropout ratio");
    }
    c->node = keep;
    c->node_index = keep_i;
    if (st != WF_OK)
        return st;
    if (nr != 4 || rs[2] <= 0 || q->shape[2] % rs[2] != 0)
        return unsupported(c, "attention heads from a reshape to %d dims", nr);
    at.heads = (int)rs[2];
    int64_t D = q->shape[2] / rs[2];
    at.scale = fabs(sc - 1.0 / sqrt((double)D)) <= 1e-6 * sc ? 0.0 : sc;
    at.p = p;
    int in[3] = {ir_any(c, q), ir_any(c, k), ir_any(c, v)};
    if (c->g->status != WF_OK)
        return c->g->status;
    c->npat[PAT_ATTENTION]++;
    return out_op(c, WF_OP_ATTENTION, in, 3, &at, 3, q->shape);
}

/* LayerNorm decomposed (opset < 17): ReduceMean, Sub, Pow, ReduceMean, Add
 * eps, Sqrt, Div, Mul gamma, Add beta; the scan found it. */
static wf_status h_layernorm_fused(ictx *c)
{
    nodeinfo *ni = &c->ni[c->node_index];
    val *x = vfind(c, ni->fused_in), *gm = vfind(c, ni->aux[0]), *bt = vfind(c, ni->aux[1]),
        *ep = vfind(c, ni->aux[2]);
    double eps;
    if (!x || !gm || !bt || !ep || x->kind == V_NONE)
        return nerr(c, WF_INTERNAL, "layernorm inputs missing");
    if (!scalar_of(c, ep, &eps))
        return unsupported(c, "a layernorm epsilon that is not a constant scalar");
    int64_t H = x->ndim ? x->shape[x->ndim - 1] : 0, hs[1] = {H};
    if (vnumel(gm) != H || vnumel(bt) != H || gm->kind != V_CONST || bt->kind != V_CONST)
        return unsupported(c, "a decomposed layernorm whose scale or bias is not a constant [H]");
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.eps = eps;
    int in[3] = {ir_any(c, x), ir_shaped(c, gm, 1, hs, "/gamma"), ir_shaped(c, bt, 1, hs, "/beta")};
    c->npat[PAT_LAYERNORM]++;
    return out_op(c, WF_OP_LAYERNORM, in, 3, &at, x->ndim, x->shape);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

static int is_op(const Onnx__NodeProto *n, const char *type)
{
    return n && n->op_type && strcmp(n->op_type, type) == 0;
}

/* The dispatch table: one row per ONNX operator type, its handler and the
 * handler's argument (an op kind, a reduction, a flag). Handlers that take no
 * argument or the node's own type are wrapped to the one signature. */
typedef wf_status (*node_fn)(ictx *c, int arg);

static wf_status d_unary(ictx *c, int k) { return h_unary(c, (wf_op_kind)k); }
static wf_status d_gelu(ictx *c, int arg) { return h_gelu(c); }
static wf_status d_identity(ictx *c, int arg) { return h_identity(c); }
static wf_status d_binary(ictx *c, int arg) { return h_binary(c, c->node->op_type); }
static wf_status d_matmul(ictx *c, int arg) { return h_matmul(c); }
static wf_status d_gemm(ictx *c, int arg) { return h_gemm(c); }
static wf_status d_conv(ictx *c, int arg) { return h_conv(c); }
static wf_status d_pool(ictx *c, int k) { return h_pool(c, (wf_op_kind)k); }
static wf_status d_global_pool(ictx *c, int max) { return h_global_pool(c, max); }
static wf_status d_reduce(ictx *c, int kind) { return h_reduce(c, kind); }
static wf_status d_batchnorm(ictx *c, int arg) { return h_batchnorm(c); }
static wf_status d_norm(ictx *c, int k) { return h_norm(c, (wf_op_kind)k); }
static wf_status d_softmax(ictx *c, int arg) { return h_softmax(c); }
static wf_status d_flatten(ictx *c, int arg) { return h_flatten(c); }
static wf_status d_reshape(ictx *c, int arg) { return h_reshape(c); }
static wf_status d_squeeze(ictx *c, int unsqueeze) { return h_squeeze(c, unsqueeze); }
static wf_status d_transpose(ictx *c, int arg) { return h_transpose(c); }
static wf_status d_concat(ictx *c, int arg) { return h_concat(c); }
static wf_status d_split(ictx *c, int arg) { return h_split(c); }
static wf_status d_gather(ictx *c, int arg) { return h_gather(c); }
static wf_status d_constant(ictx *c, int arg) { return h_constant(c); }
static wf_status d_constant_of_shape(ictx *c, int arg) { return h_constant_of_shape(c); }
static wf_status d_shape(ictx *c, int arg) { return h_shape(c); }
static wf_status d_cast(ictx *c, int arg) { return h_cast(c); }
static wf_status d_slice(ictx *c, int arg) { return h_slice(c); }
static wf_status d_range(ictx *c, int arg) { return h_range(c); }
static wf_status d_clip(ictx *c, int arg) { return h_clip(c); }
static wf_status d_hardsigmoid(ictx *c, int arg) { return h_hardsigmoid(c); }
static wf_status d_expand(ictx *c, int arg) { return h_expand(c); }
static wf_status d_pad(ictx *c, int arg) { return h_pad(c); }
static wf_status d_logic(ictx *c, int arg) { return h_logic(c, c->node->op_type); }
static wf_status d_dropout(ictx *c, int arg) { return h_dropout(c); }
static wf_status d_sce(ictx *c, int arg) { return h_sce(c); }
static wf_status d_attention(ictx *c, int weft) { return h_attention(c, weft); }
static wf_status d_rotary(ictx *c, int arg) { return h_rotary(c); }

/* Sum of two inputs is Add, of one the identity; other arities have no IR op. */
static wf_status d_sum(ictx *c, int arg)
{
    if (c->node->n_input == 2)
        return h_binary(c, "Add");
    if (c->node->n_input == 1)
        return h_identity(c);
    return unsupported(c, "op type '%s' has no weft IR op", c->node->op_type);
}

static wf_status d_no_ir(ictx *c, int arg)
{
    return unsupported(c, "%s (the IR has no square root, logarithm or product to build it from)",
                       c->node->op_type);
}

typedef struct {
    const char *name;
    node_fn fn;
    int arg;
} node_handler;

/* The standard operators (domain "" or ai.onnx). */
static const node_handler ONNX_OPS[] = {
    {"Relu", d_unary, WF_OP_RELU},
    {"Tanh", d_unary, WF_OP_TANH},
    {"HardSwish", d_unary, WF_OP_HARDSWISH},
    {"Gelu", d_gelu, 0},
    {"Identity", d_identity, 0},
    {"Add", d_binary, 0},
    {"Mul", d_binary, 0},
    {"Sub", d_binary, 0},
    {"Div", d_binary, 0},
    {"Sum", d_sum, 0},
    {"MatMul", d_matmul, 0},
    {"Gemm", d_gemm, 0},
    {"Conv", d_conv, 0},
    {"MaxPool", d_pool, WF_OP_MAXPOOL},
    {"AveragePool", d_pool, WF_OP_AVGPOOL},
    {"GlobalAveragePool", d_global_pool, 0},
    {"GlobalMaxPool", d_global_pool, 1},
    {"ReduceMean", d_reduce, RED_MEAN},
    {"ReduceSum", d_reduce, RED_SUM},
    {"ReduceMax", d_reduce, RED_MAX},
    {"ReduceMin", d_reduce, RED_MIN},
    {"ReduceSumSquare", d_reduce, RED_SUMSQ},
    {"ReduceL1", d_reduce, RED_L1},
    {"ReduceL2", d_no_ir, 0},
    {"ReduceLogSum", d_no_ir, 0},
    {"ReduceLogSumExp", d_no_ir, 0},
    {"ReduceProd", d_no_ir, 0},
    {"BatchNormalization", d_batchnorm, 0},
    {"LayerNormalization", d_norm, WF_OP_LAYERNORM},
    {"RMSNormalization", d_norm, WF_OP_RMSNORM},
    {"Softmax", d_softmax, 0},
    {"Flatten", d_flatten, 0},
    {"Reshape", d_reshape, 0},
    {"Squeeze", d_squeeze, 0},
    {"Unsqueeze", d_squeeze, 1},
    {"Transpose", d_transpose, 0},
    {"Concat", d_concat, 0},
    {"Split", d_split, 0},
    {"Gather", d_gather, 0},
    {"Constant", d_constant, 0},
    {"ConstantOfShape", d_constant_of_shape, 0},
    {"Shape", d_shape, 0},
    {"Cast", d_cast, 0},
    {"Slice", d_slice, 0},
    {"Range", d_range, 0},
    {"Clip", d_clip, 0},
    {"HardSigmoid", d_hardsigmoid, 0},
    {"Expand", d_expand, 0},
    {"Pad", d_pad, 0},
    {"Equal", d_logic, 0},
    {"Not", d_logic, 0},
    {"Where", d_logic, 0},
    {"Less", d_logic, 0},
    {"Greater", d_logic, 0},
    {"Dropout", d_dropout, 0},
    {"SoftmaxCrossEntropyLoss", d_sce, 0},
    {"Attention", d_attention, 0},
};

/* weft's own operators (domain ai.weft). */
static const node_handler WEFT_OPS[] = {
    {"Attention", d_attention, 1},
    {"Rotary", d_rotary, 0},
};

static const node_handler *find_handler(const node_handler *t, size_t n, const char *op)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(op, t[i].name) == 0)
            return &t[i];
    return NULL;
}

static wf_status run_node(ictx *c)
{
    const Onnx__NodeProto *n = c->node;
    const char *op = n->op_type ? n->op_type : "";
    const char *dom = n->domain ? n->domain : "";
    nodeinfo *ni = &c->ni[c->node_index];
    if (ni->fused == WF_OP_SILU || ni->fused == WF_OP_GELU)
        return h_fused(c, ni->fused, ni->fused_in);
    if (ni->fused == WF_OP_LAYERNORM)
        return h_layernorm_fused(c);
    if (ni->fused == WF_OP_ATTENTION)
        return h_attention_fused(c);
    const node_handler *h;
    if (strcmp(dom, "ai.weft") == 0) {
        if ((h = find_handler(WEFT_OPS, sizeof WEFT_OPS / sizeof WEFT_OPS[0], op)))
            return h->fn(c, h->arg);
        return unsupported(c, "op '%s' of domain ai.weft", op);
    }
    if (*dom && strcmp(dom, "ai.onnx") != 0)
        return unsupported(c, "domain '%s' (only the standard ONNX operators and ai.weft)", dom);
    if ((h = find_handler(ONNX_OPS, sizeof ONNX_OPS / sizeof ONNX_OPS[0], op)))
        return h->fn(c, h->arg);
    return unsupported(c, "op type '%s' has no weft IR op", op);
}

/* ---- patterns -------------------------------------------------------------------------------- */

/* A scalar constant known before the walk (initializer or Constant node). */
static int pre_scalar(ictx *c, const char *name, double *out)
{
    val *x = vfind(c, name);
    if (!x)
        return 0;
    const Onnx__TensorProto *t = NULL;
    if (x->kind == V_CONST)
        t = x->src;
    else if (x->prod >= 0 && is_op(c->gp->node[x->prod], "Constant")) {
        const Onnx__NodeProto *n = c->gp->node[x->prod];
        const Onnx__AttributeProto *a = wf_onnx_attr(n, "value");
        if (a && a->t)
            t = a->t;
        else if ((a = wf_onnx_attr(n, "value_float"))) {
            *out = a->f;
            return 1;
        }
    }
    if (!t || wf_onnx_numel(t) != 1)
        return 0;
    if (wf_onnx_decode(t, c->m->dir, out, 1) != WF_OK) {
        wf_clear_error();
        return 0;
    }
    return 1;
}

static const Onnx__NodeProto *producer(ictx *c, const char *name, int *idx)
{
    val *x = vfind(c, name);
    if (!x || x->prod < 0)
        return NULL;
    *idx = x->prod;
    return c->gp->node[x->prod];
}

/* The only node reading value `name` (NULL when none or several). */
static const Onnx__NodeProto *sole_reader(ictx *c, const char *name, int *idx)
{
    val *x = vfind(c, name);
    if (!x || x->nuse != 1)
        return NULL;
    for (size_t i = 0; i < c->gp->n_node; i++) {
        const Onnx__NodeProto *n = c->gp->node[i];
        for (size_t j = 0; j < n->n_input; j++)
            if (n->input[j] && strcmp(n->input[j], name) == 0) {
                *idx = (int)i;
                return n;
            }
    }
    return NULL;
}

/* The other input of a 2-input node than `name`, NULL if name is not one. */
static const char *other_in(const Onnx__NodeProto *n, const char *name)
{
    if (n->n_input != 2 || !n->input[0] || !n->input[1])
        return NULL;
    if (strcmp(n->input[0], name) == 0)
        return n->input[1];
    if (strcmp(n->input[1], name) == 0)
        return n->input[0];
    return NULL;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-4 * fabs(b); }

/* Marks the values known before the walk to need no graph input: the
 * initializers, and the outputs of nodes that read only such values (Shape
 * reads no data). Masks and scales of attention must be such values. */
static void mark_static(ictx *c)
{
    for (int k = 0; k < c->nv; k++)
        c->v[k].stat = c->v[k].kind == V_CONST;
    for (size_t i = 0; i < c->gp->n_node; i++) {
        const Onnx__NodeProto *n = c->gp->node[i];
        int st = 1;
        for (size_t j = 0; !is_op(n, "Shape") && j < n->n_input; j++) {
            val *x = vfind(c, n->input[j]);
            if (x && !x->stat)
                st = 0;
        }
        for (size_t j = 0; j < n->n_output; j++) {
            val *x = vfind(c, n->output[j]);
            if (x)
                x->stat = st;
        }
    }
}

static int is_static(ictx *c, const char *name)
{
    val *x = vfind(c, name);
    return x && x->stat;
}

static int nuse_of(ictx *c, const char *name)
{
    val *x = vfind(c, name);
    return x ? x->nuse : -1;
}

/* The producer of `name` when it is op `type` and `name` has one reader. */
static const Onnx__NodeProto *only_from(ictx *c, const char *name, const char *type, int *idx)
{
    if (nuse_of(c, name) != 1)
        return NULL;
    const Onnx__NodeProto *p = producer(c, name, idx);
    return p && is_op(p, type) && (!p->domain || !*p->domain) ? p : NULL;
}

/* 1 when Transpose node t has exactly the permutation want[0..r). */
static int perm_is(const Onnx__NodeProto *t, int r, const int64_t *want)
{
    int64_t p[WF_MAX_DIMS + 1];
    int n = wf_onnx_attr_ints(t, "perm", p, WF_MAX_DIMS + 1);
    if (n != r)
        return 0;
    for (int i = 0; i < r; i++)
        if (p[i] != want[i])
            return 0;
    return 1;
}

/* The i-th node reading `name` (in file order), NULL when fewer. */
static const Onnx__NodeProto *reader_k(ictx *c, const char *name, int which, int *idx)
{
    for (size_t i = 0; i < c->gp->n_node; i++) {
        const Onnx__NodeProto *n = c->gp->node[i];
        for (size_t j = 0; j < n->n_input; j++)
            if (n->input[j] && strcmp(n->input[j], name) == 0) {
                if (which-- == 0) {
                    *idx = (int)i;
                    return n;
                }
                break;
            }
    }
    return NULL;
}

/* The attention subgraph as PyTorch exports a hand-written attention
 * (nanoGPT, minGPT, GPT-2): at MatMul i = probs @ v,
 *   q = Transpose[0,2,1,3](Reshape(Xq)), k^T = Transpose[0,2,3,1](Reshape(Xk))
 *   (or Transpose[0,1,3,2] of Transpose[0,2,1,3]), v likewise as q;
 *   s = MatMul(q, k^T), [Mul|Div by a constant], [Where(mask, fill, s) | Add(s,
 *   mask) with a constant mask], Softmax, [Dropout], MatMul with v, then
 *   Transpose[0,2,1,3] and Reshape to [B,S,A*D].
 * Every value inside has one reader. Marks the nodes; 1 when found. */
static int scan_attention(ictx *c, int i)
{
    static const int64_t P0213[4] = {0, 2, 1, 3}, P0231[4] = {0, 2, 3, 1}, P0132[4] = {0, 1, 3, 2};
    const Onnx__NodeProto *n2 = c->gp->node[i];
    if (n2->n_input != 2 || n2->n_output != 1)
        return 0;
    int kd = -1, km = -1, ks = -1, ksm, kmm, k;
    const char *p = n2->input[0];
    const Onnx__NodeProto *pn = only_from(c, p, "Dropout", &k);
    if (pn) {
        if (pn->n_output > 1 && nuse_of(c, pn->output[1]) > 0)
            return 0;
        kd = k;
        p = pn->input[0];
    }
    pn = only_from(c, p, "Softmax", &ksm);
    if (!pn || wf_onnx_attr_i(pn, "axis", -1) != -1 || c->m->opset < 13)
        return 0;
    const char *s = pn->input[0];
    const Onnx__NodeProto *mn = NULL;
    if ((mn = only_from(c, s, "Where", &k)) && mn->n_input == 3 && is_static(c, mn->input[0]) &&
        is_static(c, mn->input[1])) {
        km = k;
        s = mn->input[2];
    } else if ((mn = only_from(c, s, "Add", &k)) && mn->n_input == 2 &&
               (is_static(c, mn->input[0]) || is_static(c, mn->input[1]))) {
        if (is_static(c, mn->input[0]) && is_static(c, mn->input[1]))
            return 0;
        km = k;
        s = is_static(c, mn->input[1]) ? mn->input[0] : mn->input[1];
    }
    const Onnx__NodeProto *sn = only_from(c, s, "Mul", &k);
    if (!sn)
        sn = only_from(c, s, "Div", &k);
    if (sn && sn->n_input == 2 && (is_static(c, sn->input[1]) || (is_op(sn, "Mul") && is_static(c, sn->input[0])))) {
        ks = k;
        s = is_static(c, sn->input[1]) ? sn->input[0] : sn->input[1];
    }
    const Onnx__NodeProto *mm = only_from(c, s, "MatMul", &kmm);
    if (!mm || mm->n_input != 2)
        return 0;
    int kqt, kqr, kkt, kk2 = -1, kkr, kvt, kvr, kot, kor;
    const Onnx__NodeProto *qt = only_from(c, mm->input[0], "Transpose", &kqt);
    const Onnx__NodeProto *qr = qt && perm_is(qt, 4, P0213) ? only_from(c, qt->input[0], "Reshape", &kqr) : NULL;
    const Onnx__NodeProto *kt = only_from(c, mm->input[1], "Transpose", &kkt), *kr = NULL;
    if (kt && perm_is(kt, 4, P0231)) {
        kr = only_from(c, kt->input[0], "Reshape", &kkr);
    } else if (kt && perm_is(kt, 4, P0132)) {
        const Onnx__NodeProto *k2 = only_from(c, kt->input[0], "Transpose", &kk2);
        kr = k2 && perm_is(k2, 4, P0213) ? only_from(c, k2->input[0], "Reshape", &kkr) : NULL;
    }
    const Onnx__NodeProto *vt = only_from(c, n2->input[1], "Transpose", &kvt);
    const Onnx__NodeProto *vr = vt && perm_is(vt, 4, P0213) ? only_from(c, vt->input[0], "Reshape", &kvr) : NULL;
    const Onnx__NodeProto *ot = nuse_of(c, n2->output[0]) == 1 ? sole_reader(c, n2->output[0], &kot) : NULL;
    if (ot && !(is_op(ot, "Transpose") && perm_is(ot, 4, P0213)))
        ot = NULL;
    const Onnx__NodeProto *orr = ot && nuse_of(c, ot->output[0]) == 1 ? sole_reader(c, ot->output[0], &kor) : NULL;
    if (!qr || !kr || !vr || !orr || !is_op(orr, "Reshape") || orr->input[0] == NULL ||
        strcmp(orr->input[0], ot->output[0]) != 0)
        return 0;
    int skip[] = {kd, ksm, km, ks, kmm, kqt, kqr, kkt, kk2, kkr, kvt, kvr, i, kot};
    for (size_t j = 0; j < sizeof skip / sizeof skip[0]; j++)
        if (skip[j] >= 0)
            c->ni[skip[j]].skip = 1;
    nodeinfo *ni = &c->ni[kor];
    ni->fused = WF_OP_ATTENTION;
    ni->aux[0] = qr->input[0];
    ni->aux[1] = kr->input[0];
    ni->aux[2] = vr->input[0];
    ni->qnode = kqr;
    ni->snode = ks;
    ni->mnode = km;
    ni->dnode = kd;
    return 1;
}

/* LayerNorm as PyTorch exports it below opset 17, from ReduceMean node i:
 * m = ReduceMean(x, -1); d = x - m; v = ReduceMean(d^2, -1);
 * y = d / Sqrt(v + eps) * gamma + beta. */
static int reduce_last(const Onnx__NodeProto *n)
{
    int64_t ax[2];
    return is_op(n, "ReduceMean") && wf_onnx_attr_ints(n, "axes", ax, 2) == 1 && ax[0] == -1 &&
           wf_onnx_attr_i(n, "keepdims", 1) == 1 && n->n_input == 1;
}

static int scan_layernorm(ictx *c, int i)
{
    const Onnx__NodeProto *n = c->gp->node[i];
    if (!reduce_last(n) || n->n_output != 1)
        return 0;
    const char *x = n->input[0];
    int ksub, kpw, km2, kad, ksq, kdv, kmu, kba, k0 = -1, k1 = -1;
    const Onnx__NodeProto *sub = nuse_of(c, n->output[0]) == 1 ? sole_reader(c, n->output[0], &ksub) : NULL;
    if (!sub || !is_op(sub, "Sub") || sub->n_input != 2 || strcmp(sub->input[0], x) != 0 ||
        strcmp(sub->input[1], n->output[0]) != 0)
        return 0;
    const char *d = sub->output[0];
    if (nuse_of(c, d) != 2)
        return 0;
    const Onnx__NodeProto *r0 = reader_k(c, d, 0, &k0), *r1 = reader_k(c, d, 1, &k1);
    const Onnx__NodeProto *pw = r0 && is_op(r0, "Pow") ? r0 : (r1 && is_op(r1, "Pow") ? r1 : NULL);
    const Onnx__NodeProto *dv = r0 && is_op(r0, "Div") ? r0 : (r1 && is_op(r1, "Div") ? r1 : NULL);
    double e;
    if (!pw || !dv || pw->n_input != 2 || !pre_scalar(c, pw->input[1], &e) || e != 2.0 ||
        strcmp(dv->input[0], d) != 0)
        return 0;
    kpw = pw == r0 ? k0 : k1;
    kdv = dv == r0 ? k0 : k1;
    const Onnx__NodeProto *m2 = nuse_of(c, pw->output[0]) == 1 ? sole_reader(c, pw->output[0], &km2) : NULL;
    if (!m2 || !reduce_last(m2))
        return 0;
    const Onnx__NodeProto *ad = nuse_of(c, m2->output[0]) == 1 ? sole_reader(c, m2->output[0], &kad) : NULL;
    const char *eps = ad && is_op(ad, "Add") ? other_in(ad, m2->output[0]) : NULL;
    if (!eps || !pre_scalar(c, eps, &e))
        return 0;
    const Onnx__NodeProto *sq = nuse_of(c, ad->output[0]) == 1 ? sole_reader(c, ad->output[0], &ksq) : NULL;
    if (!sq || !is_op(sq, "Sqrt") || nuse_of(c, sq->output[0]) != 1 || strcmp(dv->input[1], sq->output[0]) != 0)
        return 0;
    const Onnx__NodeProto *mu = nuse_of(c, dv->output[0]) == 1 ? sole_reader(c, dv->output[0], &kmu) : NULL;
    const char *gamma = mu && is_op(mu, "Mul") ? other_in(mu, dv->output[0]) : NULL;
    const Onnx__NodeProto *ba = gamma && nuse_of(c, mu->output[0]) == 1 ? sole_reader(c, mu->output[0], &kba) : NULL;
    const char *beta = ba && is_op(ba, "Add") ? other_in(ba, mu->output[0]) : NULL;
    val *gv = gamma ? vfind(c, gamma) : NULL, *bv = beta ? vfind(c, beta) : NULL;
    if (!gv || !bv || gv->kind != V_CONST || bv->kind != V_CONST)
        return 0;
    int skip[] = {i, ksub, kpw, km2, kad, ksq, kdv, kmu};
    for (size_t j = 0; j < sizeof skip / sizeof skip[0]; j++)
        c->ni[skip[j]].skip = 1;
    nodeinfo *ni = &c->ni[kba];
    ni->fused = WF_OP_LAYERNORM;
    ni->fused_in = x;
    ni->aux[0] = gamma;
    ni->aux[1] = beta;
    ni->aux[2] = eps;
    return 1;
}

/* GELU in its tanh form as minGPT / GPT-2 write it and PyTorch exports it:
 * 0.5*x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), from Tanh node i. */
static int scan_gelu_tanh(ictx *c, int i)
{
    const Onnx__NodeProto *t = c->gp->node[i];
    int ks, ka, kq, kp, k1, kf, kh;
    double v;
    if (t->n_input != 1 || t->n_output != 1)
        return 0;
    const Onnx__NodeProto *sn = only_from(c, t->input[0], "Mul", &ks);
    if (!sn || sn->n_input != 2)
        return 0;
    const char *r = pre_scalar(c, sn->input[1], &v) && near(v, 0.7978845608028654 /* sqrt(2/pi) */) ? sn->input[0]
                    : pre_scalar(c, sn->input[0], &v) && near(v, 0.7978845608028654 /* sqrt(2/pi) */) ? sn->input[1]
                                                                                    : NULL;
    const Onnx__NodeProto *an = r ? only_from(c, r, "Add", &ka) : NULL;
    if (!an || an->n_input != 2)
        return 0;
    const char *x = NULL;
    for (int j = 0; j < 2 && !x; j++) {
        const Onnx__NodeProto *qn = only_from(c, an->input[1 - j], "Mul", &kq);
        const char *pv = qn && qn->n_input == 2 && pre_scalar(c, qn->input[1], &v) && near(v, 0.044715)
                             ? qn->input[0]
                             : NULL;
        const Onnx__NodeProto *pn = pv ? only_from(c, pv, "Pow", &kp) : NULL;
        if (pn && pn->n_input == 2 && strcmp(pn->input[0], an->input[j]) == 0 &&
            pre_scalar(c, pn->input[1], &v) && v == 3.0)
            x = an->input[j];
    }
    if (!x)
        return 0;
    const Onnx__NodeProto *un = nuse_of(c, t->output[0]) == 1 ? sole_reader(c, t->output[0], &k1) : NULL;
    const char *one = un && is_op(un, "Add") ? other_in(un, t->output[0]) : NULL;
    if (!one || !pre_scalar(c, one, &v) || v != 1.0)
        return 0;
    const Onnx__NodeProto *mn = nuse_of(c, un->output[0]) == 1 ? sole_reader(c, un->output[0], &kf) : NULL;
    const char *h = mn && is_op(mn, "Mul") && mn->n_output == 1 ? other_in(mn, un->output[0]) : NULL;
    const Onnx__NodeProto *hn = h ? only_from(c, h, "Mul", &kh) : NULL;
    const char *half = hn ? other_in(hn, x) : NULL;
    if (!half || !pre_scalar(c, half, &v) || v != 0.5)
        return 0;
    int skip[] = {ks, ka, kq, kp, i, k1, kh};
    for (size_t j = 0; j < sizeof skip / sizeof skip[0]; j++)
        c->ni[skip[j]].skip = 1;
    c->ni[kf].fused = WF_OP_GELU;
    c->ni[kf].fused_in = x;
    return 1;
}

static void find_patterns(ictx *c)
{
    const Onnx__GraphProto *gp = c->gp;
    mark_static(c);
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = gp->node[i];
        if (n->domain && *n->domain)
            continue;
        int k = -1;
        if (c->ni[i].skip)
            continue;
        if (is_op(n, "MatMul") && scan_attention(c, (int)i))
            continue;
        if (is_op(n, "ReduceMean") && scan_layernorm(c, (int)i))
            continue;
        if (is_op(n, "Tanh") && scan_gelu_tanh(c, (int)i)) {
            c->npat[PAT_GELU_TANH]++;
            continue;
        }
        if (is_op(n, "Pad") && n->n_output == 1 && nuse_of(c, n->output[0]) == 1) {
            const Onnx__NodeProto *r = sole_reader(c, n->output[0], &k);
            if (r && is_op(r, "Conv") && strcmp(r->input[0], n->output[0]) == 0) {
                c->ni[i].skip = 1;
                c->ni[k].pad_node = (int)i;
            }
            continue;
        }
        if (is_op(n, "Sigmoid") && n->n_input == 1 && n->n_output == 1) {
            /* silu: Mul(x, Sigmoid(x)) */
            const Onnx__NodeProto *m = sole_reader(c, n->output[0], &k);
            const char *o = m && is_op(m, "Mul") ? other_in(m, n->output[0]) : NULL;
            if (o && strcmp(o, n->input[0]) == 0) {
                c->ni[i].skip = 1;
                c->ni[k].fused = WF_OP_SILU;
                c->ni[k].fused_in = n->input[0];
                c->npat[PAT_SILU]++;
            }
        } else if (is_op(n, "Erf") && n->n_input == 1 && n->n_output == 1) {
            /* gelu: x * 0.5 * (1 + erf(x / sqrt(2))) in PyTorch's orders */
            int kd, ka, km, kf;
            double s;
            const Onnx__NodeProto *d = producer(c, n->input[0], &kd);
            if (!d || d->n_input != 2 || d->n_output != 1)
                continue;
            const char *x = d->input[0];
            int okd = (is_op(d, "Div") && pre_scalar(c, d->input[1], &s) && near(s, sqrt(2.0))) ||
                      (is_op(d, "Mul") && pre_scalar(c, d->input[1], &s) && near(s, sqrt(0.5)));
            val *dv = vfind(c, d->output[0]);
            if (!okd || !dv || dv->nuse != 1)
                continue;
            const Onnx__NodeProto *a = sole_reader(c, n->output[0], &ka);
            const char *one = a && is_op(a, "Add") && a->n_output == 1 ? other_in(a, n->output[0]) : NULL;
            if (!one || !pre_scalar(c, one, &s) || s != 1.0)
                continue;
            const Onnx__NodeProto *m = sole_reader(c, a->output[0], &km);
            const char *o = m && is_op(m, "Mul") && m->n_output == 1 ? other_in(m, a->output[0]) : NULL;
            if (!o)
                continue;
            if (strcmp(o, x) == 0) {
                /* Mul(x, 1+erf) then Mul(., 0.5) */
                const Onnx__NodeProto *f = sole_reader(c, m->output[0], &kf);
                const char *h = f && is_op(f, "Mul") ? other_in(f, m->output[0]) : NULL;
                if (!h || !pre_scalar(c, h, &s) || s != 0.5)
                    continue;
                c->ni[km].skip = 1;
            } else {
                /* Mul(Mul(x, 0.5), 1+erf) */
                int kh;
                const Onnx__NodeProto *hn = producer(c, o, &kh);
                const char *h = hn && is_op(hn, "Mul") ? other_in(hn, x) : NULL;
                val *hv = vfind(c, o);
                if (!h || !pre_scalar(c, h, &s) || s != 0.5 || !hv || hv->nuse != 1)
                    continue;
                c->ni[kh].skip = 1;
                kf = km;
            }
            c->ni[kd].skip = c->ni[i].skip = c->ni[ka].skip = 1;
            c->ni[kf].fused = WF_OP_GELU;
            c->ni[kf].fused_in = x;
            c->npat[PAT_GELU_ERF]++;
        } else if (is_op(n, "MatMul") && n->n_input == 2) {
            /* MatMul(Transpose(x) swapping the last two dims): trans flags */
            for (int j = 0; j < 2; j++) {
                const Onnx__NodeProto *t = producer(c, n->input[j], &k);
                val *tv = vfind(c, n->input[j]);
                if (!t || !is_op(t, "Transpose") || (t->domain && *t->domain) || !tv ||
                    tv->nuse != 1 || t->n_input != 1)
                    continue;
                int kc;
                val *src = vfind(c, t->input[0]);
                const Onnx__NodeProto *pc = producer(c, t->input[0], &kc);
                if (!src || src->kind == V_CONST || (pc && is_op(pc, "Constant")))
                    continue; /* a transposed weight: the parameter is stored transposed */
                int64_t p[WF_MAX_DIMS + 1];
                int r = wf_onnx_attr_ints(t, "perm", p, WF_MAX_DIMS + 1);
                int ok = r >= 2 && r <= WF_MAX_DIMS && p[r - 1] == r - 2 && p[r - 2] == r - 1;
                for (int d = 0; ok && d < r - 2; d++)
                    ok = p[d] == d;
                if (ok) {
                    c->ni[k].skip = 1;
                    c->ni[i].tin[j] = t->input[0];
                }
            }
        } else if (is_op(n, "SoftmaxCrossEntropyLoss") && n->n_input >= 2) {
            /* Transpose(perm [0, r-1, 1..r-2]) feeding the scores */
            const Onnx__NodeProto *t = producer(c, n->input[0], &k);
            val *tv = vfind(c, n->input[0]);
            if (!t || !is_op(t, "Transpose") || !tv || tv->nuse != 1 || t->n_input != 1 ||
                !t->input[0])
                continue;
            int64_t p[WF_MAX_DIMS + 1];
            int r = wf_onnx_attr_ints(t, "perm", p, WF_MAX_DIMS + 1);
            int ok = r >= 3 && r <= WF_MAX_DIMS && p[0] == 0 && p[1] == r - 1;
            for (int j = 2; ok && j < r; j++)
                ok = p[j] == j - 1;
            if (ok) {
                c->ni[k].skip = 1;
                c->ni[i].fused_in = t->input[0];
            }
        }
    }
}

/* ---- graph inputs --------------------------------------------------------------------------- */

static int is_initializer(const Onnx__GraphProto *gp, const char *name)
{
    for (size_t i = 0; i < gp->n_initializer; i++)
        if (gp->initializer[i]->name && strcmp(gp->initializer[i]->name, name) == 0)
            return 1;
    return 0;
}

/* 1 when graph input `name` is read as the labels of a loss. */
static int is_label(const Onnx__GraphProto *gp, const char *name)
{
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = gp->node[i];
        if ((is_op(n, "SoftmaxCrossEntropyLoss") || is_op(n, "NegativeLogLikelihoodLoss")) &&
            n->n_input >= 2 && strcmp(n->input[1], name) == 0)
            return 1;
    }
    return 0;
}

typedef enum { DIM_VALUE, DIM_PARAM, DIM_UNKNOWN } dimkind;

static dimkind dim_kind(const Onnx__TensorShapeProto__Dimension *d)
{
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
        return DIM_VALUE;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
        *d->dim_param)
        return DIM_PARAM;
    return DIM_UNKNOWN;
}

static wf_status add_inputs(ictx *c, const wf_onnx_opts *o)
{
    const Onnx__GraphProto *gp = c->gp;
    wf_status st = WF_OK;
    wf_spec dims;
    memset(&dims, 0, sizeof dims);
    if (o->dims && *o->dims) {
        if ((st = wf_spec_parse(o->dims, &dims)) != WF_OK)
            return st;
        if (dims.name[0])
            return wf_errorf(WF_INVAL, "%s: dims '%s': expected name=size,...", c->m->path,
                             o->dims);
        /* dtype=fp16|bf16|fp32: the float parameters and inputs (mixed precision) */
        const char *dts = NULL;
        if (wf_spec_get_str(&dims, "dtype", &dts) == 1) {
            wf_dtype dt;
            if (wf_dtype_parse(dts, &dt) != WF_OK || !(dt == WF_DTYPE_FP32 || dt == WF_DTYPE_FP16 ||
                                                       dt == WF_DTYPE_BF16))
                return wf_errorf(WF_INVAL, "%s: dtype=%s (allowed: fp32, fp16, bf16)", c->m->path, dts);
            c->fdtype = dt;
        }
    }
    /* Does any input have a symbolic first dim? */
    int sym_batch = 0;
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || is_initializer(gp, vi->name) || !vi->type ||
            vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
            !vi->type->tensor_type->shape || vi->type->tensor_type->shape->n_dim == 0)
            continue;
        sym_batch |= dim_kind(vi->type->tensor_type->shape->dim[0]) != DIM_VALUE;
    }
    int64_t mbs = o->mbs > 0 ? o->mbs : 1;
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || !*vi->name)
            return wf_errorf(WF_FORMAT, "%s: graph input %zu has no name", c->m->path, i);
        if (is_initializer(gp, vi->name))
            continue; /* an initializer listed as an input (IR version < 4) */
        if (!vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
            return wf_errorf(WF_INVAL, "%s: graph input '%s' is not a tensor", c->m->path,
                             vi->name);
        const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
        const Onnx__TensorShapeProto *sp = tt->shape;
        if (!sp)
            return wf_errorf(WF_INVAL, "%s: graph input '%s' has no shape", c->m->path, vi->name);
        if (sp->n_dim > WF_MAX_DIMS)
            return wf_errorf(WF_INVAL, "%s: graph input '%s' has rank %zu (at most %d)",
                             c->m->path, vi->name, sp->n_dim, WF_MAX_DIMS);
        char what[1400];
        snprintf(what, sizeof what, "%s: graph input '%s'", c->m->path, vi->name);
        wf_dtype dt;
        if ((st = wf_onnx_dtype(tt->elem_type, what, &dt)) != WF_OK)
            return st;
        if (c->fdtype != WF_DTYPE_COUNT && is_float_type(tt->elem_type))
            dt = c->fdtype;
        int64_t shape[WF_MAX_DIMS];
        for (size_t j = 0; j < sp->n_dim; j++) {
            const Onnx__TensorShapeProto__Dimension *d = sp->dim[j];
            dimkind k = dim_kind(d);
            if (k == DIM_VALUE) {
                shape[j] = d->dim_value;
                if (j == 0 && o->mbs > 0 && !sym_batch) {
                    /* a fixed-batch export, rebatched */
                    if (shape[j] != mbs && c->fixed_batch == 0)
                        c->fixed_batch = shape[j];
                    shape[j] = mbs;
                }
                if (shape[j] <= 0)
                    return wf_errorf(WF_INVAL, "%s: graph input '%s' dim %zu is %" PRId64
                                               " (weft needs positive sizes)",
                                     c->m->path, vi->name, j, shape[j]);
                continue;
            }
            /* symbolic: the micro-batch when it stands first in some input */
            int is_batch = j == 0 && k == DIM_UNKNOWN;
            for (size_t a = 0; !is_batch && k == DIM_PARAM && a < gp->n_input; a++) {
                const Onnx__ValueInfoProto *u = gp->input[a];
                if (u->type && u->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
                    u->type->tensor_type->shape && u->type->tensor_type->shape->n_dim > 0 &&
                    !is_initializer(gp, u->name)) {
                    const Onnx__TensorShapeProto__Dimension *d0 = u->type->tensor_type->shape->dim[0];
                    is_batch = dim_kind(d0) == DIM_PARAM && strcmp(d0->dim_param, d->dim_param) == 0;
                }
            }
            if (is_batch) {
                shape[j] = mbs;
                continue;
            }
            int64_t v = 0;
            int got = k == DIM_PARAM ? wf_spec_get_int(&dims, d->dim_param, 1, (int64_t)1 << 40, &v) : 0;
            if (got < 0)
                return got;
            if (got == 0)
                return wf_errorf(WF_INVAL,
                                 "%s: graph input '%s' dim %zu is symbolic ('%s'): give its size "
                                 "as %s:%s=N",
                                 c->m->path, vi->name, j, k == DIM_PARAM ? d->dim_param : "?",
                                 c->m->path, k == DIM_PARAM ? d->dim_param : "?");
            shape[j] = v;
        }
        char name[WF_NAME_LEN];
        wf_onnx_ir_name(name, vi->name, 0);
        wf_role role = is_label(gp, vi->name) ? WF_ROLE_LABEL : WF_ROLE_INPUT;
        int t = wf_graph_add_tensor(c->g, name, dt, role, (int)sp->n_dim, shape);
        if (t < 0)
            return c->g->status;
        val *x = vfind(c, vi->name);
        if (!x)
            return wf_errorf(WF_INTERNAL, "input '%s' lost", vi->name);
        x->kind = V_TENSOR;
        x->t = t;
        x->type = tt->elem_type;
        x->ndim = (int)sp->n_dim;
        memcpy(x->shape, shape, sizeof shape);
    }
    char allowed[512] = "";
    size_t k = 0;
    for (size_t i = 0; i < gp->n_input && k < sizeof allowed; i++) {
        const Onnx__TensorShapeProto *sp = gp->input[i]->type && gp->input[i]->type->value_case ==
                                                   ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE
                                               ? gp->input[i]->type->tensor_type->shape
                                               : NULL;
        for (size_t j = 0; sp && j < sp->n_dim && k < sizeof allowed; j++)
            if (dim_kind(sp->dim[j]) == DIM_PARAM && !strstr(allowed, sp->dim[j]->dim_param))
                k += (size_t)snprintf(allowed + k, sizeof allowed - k, "%s%s", k ? ", " : "",
                                      sp->dim[j]->dim_param);
    }
    char what[1400];
    snprintf(what, sizeof what, "%s dims", c->m->path);
    if (k < sizeof allowed)
        snprintf(allowed + k, sizeof allowed - k, "%sdtype", k ? ", " : "");
    return wf_spec_check_unused(&dims, what, allowed);
}

/* ---- the build -------------------------------------------------------------------------------- */

wf_status wf_onnx_build(wf_onnx_model *m, const wf_onnx_opts *opts, wf_graph *g)
{
    wf_onnx_opts dflt = {0, NULL, 0};
    const wf_onnx_opts *o = opts ? opts : &dflt;
    const Onnx__GraphProto *gp = m->proto->graph;
    const char *base = strrchr(m->path, '/') ? strrchr(m->path, '/') + 1 : m->path;
    wf_graph_init(g, gp->name && *gp->name ? gp->name : base);
    wf_onnx_reset_build(m);
    if (o->mbs < 0)
        return g->status = wf_errorf(WF_INVAL, "mbs=%" PRId64 " (must be 0 or positive)",
                                     o->mbs);
    ictx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.gp = gp;
    c.g = g;
    c.mbs = o->mbs;
    wf_arena_init(&c.arena, 1 << 20);
    wf_status st = WF_OK;
    int dup = 0;
    c.fdtype = WF_DTYPE_COUNT;
    c.ni = wf_calloc(gp->n_node ? gp->n_node : 1, sizeof *c.ni);
    if (!c.ni) {
        st = wf_errorf(WF_NOMEM, "%s: out of memory", m->path);
        goto done;
    }
    for (size_t i = 0; i < gp->n_node; i++)
        c.ni[i].pad_node = c.ni[i].qnode = c.ni[i].snode = c.ni[i].mnode = c.ni[i].dnode = -1;
    /* initializers */
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        if (!t->name || !*t->name) {
            st = wf_errorf(WF_FORMAT, "%s: initializer %zu has no name", m->path, i);
            goto done;
        }
        if (t->n_dims > WF_MAX_DIMS || wf_onnx_numel(t) < 0) {
            st = wf_errorf(WF_INVAL, "%s: initializer '%s' has rank %zu (at most %d)", m->path,
                           t->name, t->n_dims, WF_MAX_DIMS);
            goto done;
        }
        val *x = vadd(&c, t->name, &dup);
        if (!x) {
            st = dup ? wf_errorf(WF_FORMAT, "%s: initializer '%s' defined twice", m->path, t->name)
                     : wf_errorf(WF_NOMEM, "%s: out of memory", m->path);
            goto done;
        }
        x->kind = V_CONST;
        x->src = t;
        x->type = t->data_type;
        x->ndim = (int)t->n_dims;
        for (int j = 0; j < x->ndim; j++)
            x->shape[j] = t->dims[j];
    }
    /* graph inputs (values; tensors come in add_inputs) */
    for (size_t i = 0; i < gp->n_input; i++) {
        const char *nm = gp->input[i]->name;
        if (!nm || !*nm || is_initializer(gp, nm))
            continue;
        if (!vadd(&c, nm, &dup)) {
            st = dup ? wf_errorf(WF_FORMAT, "%s: graph input '%s' listed twice", m->path, nm)
                     : wf_errorf(WF_NOMEM, "%s: out of memory", m->path);
            goto done;
        }
    }
    /* node outputs, with their producers; uses */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = gp->node[i];
        for (size_t j = 0; j < n->n_output; j++) {
            if (!n->output[j] || !*n->output[j])
                continue;
            val *x = vadd(&c, n->output[j], &dup);
            if (!x) {
                st = dup ? wf_errorf(WF_FORMAT, "%s: node %zu '%s' (%s): value '%s' is defined "
                                                "twice",
                                     m->path, i, node_label(n), n->op_type ? n->op_type : "?",
                                     n->output[j])
                         : wf_errorf(WF_NOMEM, "%s: out of memory", m->path);
                goto done;
            }
            x->prod = (int)i;
        }
    }
    for (size_t i = 0; i < gp->n_node; i++)
        for (size_t j = 0; j < gp->node[i]->n_input; j++) {
            val *x = vfind(&c, gp->node[i]->input[j]);
            if (x)
                x->nuse++;
        }
    for (size_t i = 0; i < gp->n_output; i++) {
        val *x = vfind(&c, gp->output[i]->name);
        if (x)
            x->nuse++;
    }
    /* Ops weft does not run at all (recurrences, control flow) are named before
     * anything else: the ops in front of them (an LSTM's weight slicing) would
     * otherwise fail first with a less telling reason. */
    static const char *const never[] = {"LSTM", "GRU", "RNN", "Loop", "If", "Scan"};
    for (size_t i = 0; i < gp->n_node; i++)
        for (size_t k = 0; k < sizeof never / sizeof never[0]; k++)
            if (is_op(gp->node[i], never[k])) {
                st = wf_errorf(WF_INVAL, "%s: op type '%s' (node %zu '%s') is not supported", c.m->path, never[k], i,
                               node_label(gp->node[i]));
                goto done;
            }
    if ((st = add_inputs(&c, o)) != WF_OK)
        goto done;
    find_patterns(&c);
    for (size_t i = 0; i < gp->n_node; i++) {
        c.node = gp->node[i];
        c.node_index = (int)i;
        if (c.ni[i].skip)
            continue;
        if ((st = run_node(&c)) != WF_OK)
            goto done;
        if (g->status != WF_OK) {
            st = g->status;
            goto done;
        }
        /* every output the node names must now exist, unless nothing reads it */
        for (size_t j = 0; j < c.node->n_output; j++) {
            val *x = nout(&c, (int)j);
            if (x && x->kind == V_NONE && out_read(&c, (int)j)) {
                st = nerr(&c, WF_INVAL, "not supported: output %zu '%s'", j, x->name);
                goto done;
            }
        }
    }
    /* outputs */
    m->outs = wf_calloc(gp->n_output ? gp->n_output : 1, sizeof *m->outs);
    if (!m->outs) {
        st = wf_errorf(WF_NOMEM, "%s: out of memory", m->path);
        goto done;
    }
    for (size_t i = 0; i < gp->n_output; i++) {
        wf_onnx_out *out = &m->outs[m->nouts++];
        const char *nm = gp->output[i]->name ? gp->output[i]->name : "";
        snprintf(out->name, sizeof out->name, "%s", nm);
        val *x = vfind(&c, nm);
        out->tensor = -1;
        out->ndim = -1;
        if (!x) {
            st = wf_errorf(WF_FORMAT, "%s: graph output '%s' is not computed by any node", m->path,
                           nm);
            goto done;
        }
        if (x->kind == V_TENSOR)
            out->tensor = x->t;
        else if (x->kind == V_CONST)
            out->tensor = root_of(&c, x)->t;
        if (x->kind != V_NONE) {
            out->ndim = x->ndim;
            memcpy(out->shape, x->shape, sizeof x->shape);
        }
    }
    if (o->add_loss && g->loss < 0) {
        int t = m->nouts > 0 ? m->outs[0].tensor : -1;
        if (t < 0) {
            st = wf_errorf(WF_INVAL, "%s: no computed output to attach a loss to", m->path);
            goto done;
        }
        if ((st = wf_onnx_attach_loss(g, t)) != WF_OK)
            goto done;
    }
    if (g->nfwd == 0) {
        st = wf_errorf(WF_INVAL, "%s: the graph computes nothing (no node maps to an op)", m->path);
        goto done;
    }
    st = wf_graph_validate(g);
    /* the recognized patterns, for `weft show` */
    size_t pk = 0;
    m->patterns[0] = 0;
    for (int i = 0; i < PAT_COUNT && pk < sizeof m->patterns; i++)
        if (c.npat[i])
            pk += (size_t)snprintf(m->patterns + pk, sizeof m->patterns - pk, "%s%s x%d",
                                   pk ? ", " : "", pat_names[i], c.npat[i]);
done:
    if (st != WF_OK && g->status == WF_OK)
        g->status = st;
    if (st == WF_OK && g->status != WF_OK)
        st = g->status;
    free(c.v);
    free(c.hash);
    free(c.ni);
    wf_arena_free(&c.arena);
    return st;
}
