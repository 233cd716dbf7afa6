/* ONNX export: the forward ops of a weft graph -> an ONNX ModelProto file.
 *
 * Each IR op becomes one ONNX node where ONNX has the operator (opset 23:
 * Attention, RMSNormalization and Gelu are recent), a short chain where it
 * does not (silu = Sigmoid + Mul; global_avgpool = GlobalAveragePool +
 * Flatten, since ONNX keeps [N,C,1,1]; cross_entropy over [...,V] = Transpose
 * to [N,V,...] + SoftmaxCrossEntropyLoss), and a node of the "ai.weft"
 * domain for what ONNX cannot say (rotary embeddings, attention with dropout
 * on the probabilities). The importer maps every one of these back to the
 * same IR op, so export then import is the identity on ops, parameters and
 * FLOPs (tests/test_onnx.c checks it on the zoo).
 *
 * Shapes: graph inputs get the symbolic first dim "batch"; a reshape target
 * writes its first dim as 0 (copy) or -1 (inferred), so the file builds at
 * any batch. Parameters are initializers, with data when the caller gives it
 * (converted to the tensor's dtype) and shapes only otherwise. All messages
 * live in one arena and are packed once. */
#include "onnx/onnx-impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPSET 23
#define WEFT_DOMAIN "ai.weft"

typedef struct {
    const wf_graph *g;
    const wf_onnx_save_opts *o;
    wf_arena a;
    char **names;     /* ONNX name of each IR tensor */
    Onnx__NodeProto **nodes;
    size_t nnodes;
    int capnodes;
    Onnx__TensorProto **inits;
    size_t ninits;
    int capinits;
    int weft_domain;  /* an ai.weft node was written */
    int op;           /* the op being written, for messages */
    int fresh;        /* counter for helper value names */
} ectx;

static void *alloc(ectx *e, size_t n) { return wf_arena_alloc(&e->a, n ? n : 1); }

static char *str(ectx *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *str(ectx *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = alloc(e, (size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static int push(void ***arr, size_t *n, int *cap, void *x)
{
    if (!x)
        return -1;
    if (wf_grow(arr, cap, (int64_t)*n + 1, sizeof **arr, 64) != 0)
        return -1;
    (*arr)[(*n)++] = x;
    return 0;
}

/* A fresh value name derived from an IR tensor name. */
static char *fresh(ectx *e, const char *base, const char *what)
{
    return str(e, "%s/%s.%d", base, what, e->fresh++);
}

/* ---- nodes and attributes ------------------------------------------------------------- */

#define MAX_ATTRS 8

static Onnx__NodeProto *node(ectx *e, const char *type, int weft, const char *const *in, int nin,
                             const char *const *out, int nout)
{
    Onnx__NodeProto *n = alloc(e, sizeof *n);
    if (!n)
        return NULL;
    onnx__node_proto__init(n);
    n->op_type = str(e, "%s", type);
    n->name = str(e, "%s", out[0]);
    if (weft) {
        n->domain = str(e, WEFT_DOMAIN);
        e->weft_domain = 1;
    }
    n->input = alloc(e, sizeof(char *) * (size_t)nin);
    n->output = alloc(e, sizeof(char *) * (size_t)nout);
    n->attribute = alloc(e, sizeof(Onnx__AttributeProto *) * MAX_ATTRS);
    if (!n->op_type || !n->name || !n->input || !n->output || !n->attribute)
        return NULL;
    for (int i = 0; i < nin; i++)
        n->input[i] = str(e, "%s", in[i]);
    for (int i = 0; i < nout; i++)
        n->output[i] = str(e, "%s", out[i]);
    n->n_input = (size_t)nin;
    n->n_output = (size_t)nout;
    if (push((void ***)&e->nodes, &e->nnodes, &e->capnodes, n) != 0)
        return NULL;
    return n;
}

static Onnx__AttributeProto *attr(ectx *e, Onnx__NodeProto *n, const char *name,
                                  Onnx__AttributeProto__AttributeType type)
{
    if (!n || n->n_attribute >= MAX_ATTRS)
        return NULL;
    Onnx__AttributeProto *a = alloc(e, sizeof *a);
    if (!a)
        return NULL;
    onnx__attribute_proto__init(a);
    a->name = str(e, "%s", name);
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void attr_i(ectx *e, Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) {
        a->has_i = 1;
        a->i = v;
    }
}

static void attr_f(ectx *e, Onnx__NodeProto *n, const char *name, double v)
{
    Onnx__AttributeProto *a = attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) {
        a->has_f = 1;
        a->f = (float)v;
    }
}

static void attr_s(ectx *e, Onnx__NodeProto *n, const char *name, const char *v)
{
    Onnx__AttributeProto *a = attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (a) {
        a->has_s = 1;
        a->s.data = (uint8_t *)str(e, "%s", v);
        a->s.len = strlen(v);
    }
}

static void attr_ints(ectx *e, Onnx__NodeProto *n, const char *name, const int64_t *v, int k)
{
    Onnx__AttributeProto *a = attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (a) {
        a->ints = alloc(e, sizeof(int64_t) * (size_t)k);
        if (!a->ints)
            return;
        memcpy(a->ints, v, sizeof(int64_t) * (size_t)k);
        a->n_ints = (size_t)k;
    }
}

/* ---- initializers ------------------------------------------------------------------------ */

static Onnx__TensorProto *tensor(ectx *e, const char *name, int32_t type, int nd,
                                 const int64_t *dims)
{
    Onnx__TensorProto *t = alloc(e, sizeof *t);
    if (!t)
        return NULL;
    onnx__tensor_proto__init(t);
    t->name = str(e, "%s", name);
    t->has_data_type = 1;
    t->data_type = type;
    t->dims = alloc(e, sizeof(int64_t) * (size_t)nd);
    if (!t->dims)
        return NULL;
    memcpy(t->dims, dims, sizeof(int64_t) * (size_t)nd);
    t->n_dims = (size_t)nd;
    if (push((void ***)&e->inits, &e->ninits, &e->capinits, t) != 0)
        return NULL;
    return t;
}

/* A 1-D int64 constant (shapes, split sizes); returns its name. */
static const char *const_i64(ectx *e, const char *base, const char *what, int n, const int64_t *v)
{
    char *name = fresh(e, base, what);
    int64_t dims[1] = {n};
    Onnx__TensorProto *t = name ? tensor(e, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims) : NULL;
    if (!t)
        return NULL;
    t->int64_data = alloc(e, sizeof(int64_t) * (size_t)n);
    if (!t->int64_data)
        return NULL;
    memcpy(t->int64_data, v, sizeof(int64_t) * (size_t)n);
    t->n_int64_data = (size_t)n;
    return name;
}

static uint16_t float_to_half(float f);
static uint16_t float_to_bf16(float f);

/* A constant of type float, half, bfloat16 or bool: a scalar (nd = 0) or a
 * vector of n copies. */
static const char *const_f(ectx *e, const char *base, const char *what, int32_t type, int nd,
                           int64_t n, double v)
{
    char *name = fresh(e, base, what);
    int64_t dims[1] = {n};
    Onnx__TensorProto *t = name ? tensor(e, name, type, nd, dims) : NULL;
    if (!t)
        return NULL;
    int64_t k = nd ? n : 1;
    if (type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL || type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
        type == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16) {
        /* bools and the 16-bit patterns of half floats go in int32_data */
        int32_t x = type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL      ? v != 0
                    : type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ? float_to_half((float)v)
                                                                     : float_to_bf16((float)v);
        t->int32_data = alloc(e, sizeof(int32_t) * (size_t)k);
        if (!t->int32_data)
            return NULL;
        for (int64_t i = 0; i < k; i++)
            t->int32_data[i] = x;
        t->n_int32_data = (size_t)k;
    } else {
        t->float_data = alloc(e, sizeof(float) * (size_t)k);
        if (!t->float_data)
            return NULL;
        for (int64_t i = 0; i < k; i++)
            t->float_data[i] = (float)v;
        t->n_float_data = (size_t)k;
    }
    return name;
}

static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t e = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t m = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) /* inf, nan */
        return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        m |= 0x800000;
        int shift = 14 - e;
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent: still right */
    return (uint16_t)(sign | h);
}

static uint16_t float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static wf_status param_init(ectx *e, int t)
{
    const wf_tensor *x = &e->g->tensors[t];
    int32_t type = wf_onnx_type_of(x->dtype);
    Onnx__TensorProto *p = tensor(e, e->names[t], type, x->ndim, x->shape);
    if (!p)
        return wf_errorf(WF_NOMEM, "ONNX export: out of memory");
    const float *d = e->o && e->o->param_data ? e->o->param_data(e->o->ctx, e->g, t) : NULL;
    if (!d)
        return WF_OK; /* shapes only */
    int64_t n = wf_tensor_numel(x);
    size_t w = wf_dtype_bytes(x->dtype);
    uint8_t *raw = alloc(e, (size_t)n * w);
    if (!raw)
        return wf_errorf(WF_NOMEM, "ONNX export: out of memory for '%s'", x->name);
    for (int64_t i = 0; i < n; i++) {
        uint8_t *q = raw + (size_t)i * w;
        if (x->dtype == WF_DTYPE_FP32) {
            uint32_t u;
            memcpy(&u, &d[i], 4);
            for (int b = 0; b < 4; b++)
                q[b] = (uint8_t)(u >> (8 * b));
        } else if (x->dtype == WF_DTYPE_FP16 || x->dtype == WF_DTYPE_BF16) {
            uint16_t h = x->dtype == WF_DTYPE_FP16 ? float_to_half(d[i]) : float_to_bf16(d[i]);
            q[0] = (uint8_t)h;
            q[1] = (uint8_t)(h >> 8);
        } else {
            return wf_errorf(WF_INVAL, "ONNX export: parameter '%s' has dtype %s (float "
                                       "parameters only)",
                             x->name, wf_dtype_name(x->dtype));
        }
    }
    p->has_raw_data = 1;
    p->raw_data.data = raw;
    p->raw_data.len = (size_t)n * w;
    return WF_OK;
}

static Onnx__ValueInfoProto *value_info(ectx *e, int t, int batch_dim)
{
    const wf_tensor *x = &e->g->tensors[t];
    Onnx__ValueInfoProto *v = alloc(e, sizeof *v);
    Onnx__TypeProto *tp = alloc(e, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = alloc(e, sizeof *tt);
    Onnx__TensorShapeProto *sp = alloc(e, sizeof *sp);
    if (!v || !tp || !tt || !sp)
        return NULL;
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    v->name = e->names[t];
    v->type = tp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    tt->has_elem_type = 1;
    tt->elem_type = wf_onnx_type_of(x->dtype);
    tt->shape = sp;
    sp->dim = alloc(e, sizeof(Onnx__TensorShapeProto__Dimension *) * (size_t)x->ndim);
    if (!sp->dim)
        return NULL;
    for (int i = 0; i < x->ndim; i++) {
        Onnx__TensorShapeProto__Dimension *d = alloc(e, sizeof *d);
        if (!d)
            return NULL;
        onnx__tensor_shape_proto__dimension__init(d);
        if (i == 0 && batch_dim) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = str(e, "batch");
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = x->shape[i];
        }
        sp->dim[i] = d;
    }
    sp->n_dim = (size_t)x->ndim;
    return v;
}

/* ---- ops ---------------------------------------------------------------------------------- */

/* A Reshape of tensor `in` (name) to IR shape (nd, shape): the first dim is
 * written 0 (copy the input's) or -1 (inferred) so the file rebatches. */
static wf_status reshape(ectx *e, const char *in, int in_t, const char *out, int nd,
                         const int64_t *shape)
{
    int64_t s[WF_MAX_DIMS];
    memcpy(s, shape, sizeof(int64_t) * (size_t)nd);
    int has_infer = 0;
    for (int i = 0; i < nd; i++)
        has_infer |= s[i] == -1;
    if (nd > 0 && e->g->tensors[in_t].ndim > 0 && s[0] == e->g->tensors[in_t].shape[0])
        s[0] = 0;
    else if (nd > 0 && !has_infer)
        s[0] = -1;
    const char *sh = const_i64(e, out, "shape", nd, s);
    const char *ins[2] = {in, sh};
    if (!sh || !node(e, "Reshape", 0, ins, 2, &out, 1))
        return wf_errorf(WF_NOMEM, "ONNX export: out of memory");
    return WF_OK;
}

static wf_status emit(ectx *e, int opi)
{
    const wf_graph *g = e->g;
    const wf_op *op = &g->ops[opi];
    const wf_op_attrs *a = &op->attr;
    const char *in[WF_MAX_INPUTS], *out[WF_MAX_OUTPUTS];
    for (int i = 0; i < op->nin; i++)
        in[i] = e->names[op->in[i]];
    for (int i = 0; i < op->nout; i++)
        out[i] = e->names[op->out[i]];
    const wf_tensor *x0 = &g->tensors[op->in[0]];
    const wf_tensor *y0 = &g->tensors[op->out[0]];
    Onnx__NodeProto *n = NULL;
    switch (op->kind) {
    case WF_OP_MATMUL:
        if (a->trans_a || a->trans_b) {
            n = node(e, "Gemm", 0, in, 2, out, 1);
            if (a->trans_a)
                attr_i(e, n, "transA", 1);
            if (a->trans_b)
                attr_i(e, n, "transB", 1);
        } else {
            n = node(e, "MatMul", 0, in, 2, out, 1);
        }
        break;
    case WF_OP_BATCH_MATMUL: {
        const char *ins[2] = {in[0], in[1]};
        for (int k = 0; k < 2; k++) {
            if (!(k == 0 ? a->trans_a : a->trans_b))
                continue;
            const wf_tensor *x = &g->tensors[op->in[k]];
            int64_t perm[WF_MAX_DIMS];
            for (int i = 0; i < x->ndim; i++)
                perm[i] = i;
            perm[x->ndim - 1] = x->ndim - 2;
            perm[x->ndim - 2] = x->ndim - 1;
            const char *t = fresh(e, out[0], "transposed");
            Onnx__NodeProto *tn = node(e, "Transpose", 0, &ins[k], 1, &t, 1);
            attr_ints(e, tn, "perm", perm, x->ndim);
            ins[k] = t;
        }
        n = node(e, "MatMul", 0, ins, 2, out, 1);
        break;
    }
    case WF_OP_LINEAR:
        if (x0->ndim == 2) {
            n = node(e, "Gemm", 0, in, op->nin, out, 1);
        } else if (op->nin == 3) {
            const char *mm = fresh(e, out[0], "matmul");
            const char *ins[2] = {mm, in[2]};
            node(e, "MatMul", 0, in, 2, &mm, 1);
            n = node(e, "Add", 0, ins, 2, out, 1);
        } else {
            n = node(e, "MatMul", 0, in, 2, out, 1);
        }
        break;
    case WF_OP_BIAS_ADD:
    case WF_OP_ADD:
        n = node(e, "Add", 0, in, 2, out, 1);
        break;
    case WF_OP_MUL:
        if (op->nin == 2) {
            n = node(e, "Mul", 0, in, 2, out, 1);
        } else {
            const char *ins[2] = {in[0], const_f(e, out[0], "scale", wf_onnx_type_of(x0->dtype), 0, 1, a->scale)};
            n = ins[1] ? node(e, "Mul", 0, ins, 2, out, 1) : NULL;
        }
        break;
    case WF_OP_RELU:
        n = node(e, "Relu", 0, in, 1, out, 1);
        break;
    case WF_OP_GELU:
        n = node(e, "Gelu", 0, in, 1, out, 1);
        attr_s(e, n, "approximate", "tanh");
        break;
    case WF_OP_SILU: {
        const char *sg = fresh(e, out[0], "sigmoid");
        const char *ins[2] = {in[0], sg};
        node(e, "Sigmoid", 0, in, 1, &sg, 1);
        n = node(e, "Mul", 0, ins, 2, out, 1);
        break;
    }
    case WF_OP_DROPOUT: {
        const char *ins[3] = {in[0],
                              const_f(e, out[0], "ratio", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, 1, a->p),
                              const_f(e, out[0], "training", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, 1, 1)};
        n = ins[1] && ins[2] ? node(e, "Dropout", 0, ins, 3, out, 1) : NULL;
        attr_i(e, n, "seed", (int64_t)a->seed);
        break;
    }
    case WF_OP_LAYERNORM:
    case WF_OP_RMSNORM:
        n = node(e, op->kind == WF_OP_LAYERNORM ? "LayerNormalization" : "RMSNormalization", 0, in,
                 op->nin, out, 1);
        attr_i(e, n, "axis", -1);
        attr_f(e, n, "epsilon", a->eps);
        break;
    case WF_OP_SOFTMAX:
        n = node(e, "Softmax", 0, in, 1, out, 1);
        attr_i(e, n, "axis", -1);
        break;
    case WF_OP_ATTENTION: {
        if (op->nin == 4)
            return wf_errorf(WF_INVAL, "ONNX export: op '%s' (attention with a bias): weft does not "
                             "write the bias as ONNX Attention's attn_mask", op->name);
        int weft = a->p != 0;
        n = node(e, "Attention", weft, in, 3, out, 1);
        attr_i(e, n, "q_num_heads", a->heads);
        attr_i(e, n, "kv_num_heads", a->kv_heads ? a->kv_heads : a->heads);
        if (a->causal)
            attr_i(e, n, "is_causal", 1);
        if (a->scale != 0)
            attr_f(e, n, "scale", a->scale);
        if (weft) {
            attr_f(e, n, "dropout", a->p);
            attr_i(e, n, "seed", (int64_t)a->seed);
        }
        break;
    }
    case WF_OP_EMBEDDING: {
        const char *ins[2] = {in[1], in[0]};
        n = node(e, "Gather", 0, ins, 2, out, 1);
        break;
    }
    case WF_OP_ROTARY:
        n = node(e, "Rotary", 1, in, 1, out, 1);
        attr_i(e, n, "heads", a->heads);
        if (a->base != 0)
            attr_f(e, n, "base", a->base);
        break;
    case WF_OP_CROSS_ENTROPY: {
        if (x0->ndim < 2)
            return wf_errorf(WF_INVAL, "ONNX export: op '%s' (cross_entropy) over rank-%d logits "
                                       "(SoftmaxCrossEntropyLoss needs [N,C,...])",
                             op->name, x0->ndim);
        const char *ins[2] = {in[0], in[1]};
        if (x0->ndim > 2) {
            int64_t perm[WF_MAX_DIMS];
            perm[0] = 0;
            perm[1] = x0->ndim - 1;
            for (int i = 2; i < x0->ndim; i++)
                perm[i] = i - 1;
            const char *t = fresh(e, out[0], "classes_second");
            Onnx__NodeProto *tn = node(e, "Transpose", 0, ins, 1, &t, 1);
            attr_ints(e, tn, "perm", perm, x0->ndim);
            ins[0] = t;
        }
        n = node(e, "SoftmaxCrossEntropyLoss", 0, ins, 2, out, 1);
        attr_s(e, n, "reduction", "mean");
        break;
    }
    case WF_OP_CONV2D: {
        const wf_tensor *w = &g->tensors[op->in[1]];
        n = node(e, "Conv", 0, in, op->nin, out, 1);
        int64_t k[2] = {w->shape[2], w->shape[3]};
        int64_t s[2] = {a->stride[0] ? a->stride[0] : 1, a->stride[1] ? a->stride[1] : 1};
        int64_t p[4] = {a->pad[0], a->pad[1], a->pad[0], a->pad[1]};
        attr_ints(e, n, "kernel_shape", k, 2);
        attr_ints(e, n, "strides", s, 2);
        attr_ints(e, n, "pads", p, 4);
        attr_i(e, n, "group", a->groups ? a->groups : 1);
        break;
    }
    case WF_OP_MAXPOOL:
    case WF_OP_AVGPOOL: {
        n = node(e, op->kind == WF_OP_MAXPOOL ? "MaxPool" : "AveragePool", 0, in, 1, out, 1);
        if (a->ceil_mode)
            attr_i(e, n, "ceil_mode", 1);
        int64_t k[2] = {a->kernel[0], a->kernel[1]};
        int64_t s[2] = {a->stride[0] ? a->stride[0] : a->kernel[0],
                        a->stride[1] ? a->stride[1] : a->kernel[1]};
        int64_t p[4] = {a->pad[0], a->pad[1], a->pad[0], a->pad[1]};
        attr_ints(e, n, "kernel_shape", k, 2);
        attr_ints(e, n, "strides", s, 2);
        attr_ints(e, n, "pads", p, 4);
        if (op->kind == WF_OP_AVGPOOL)
            attr_i(e, n, "count_include_pad", 1);
        break;
    }
    case WF_OP_GLOBAL_AVGPOOL: {
        const char *t = fresh(e, out[0], "pooled");
        node(e, "GlobalAveragePool", 0, in, 1, &t, 1);
        n = node(e, "Flatten", 0, &t, 1, out, 1);
        attr_i(e, n, "axis", 1);
        break;
    }
    case WF_OP_BATCHNORM: {
        /* ONNX wants running statistics; the IR normalizes with batch ones
         * (training_mode = 1), so they are zeros and ones, never read back. */
        int64_t C = x0->shape[1];
        int32_t type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT; /* T2 may differ from X's */
        const char *ins[5] = {in[0], in[1], in[2], const_f(e, out[0], "running_mean", type, 1, C, 0),
                              const_f(e, out[0], "running_var", type, 1, C, 1)};
        n = ins[3] && ins[4] ? node(e, "BatchNormalization", 0, ins, 5, out, 1) : NULL;
        attr_f(e, n, "epsilon", a->eps);
        attr_i(e, n, "training_mode", 1);
        break;
    }
    case WF_OP_RESHAPE:
        return reshape(e, in[0], op->in[0], out[0], y0->ndim, y0->shape);
    case WF_OP_TRANSPOSE: {
        int64_t perm[WF_MAX_DIMS];
        for (int i = 0; i < x0->ndim; i++)
            perm[i] = a->perm[i];
        n = node(e, "Transpose", 0, in, 1, out, 1);
        attr_ints(e, n, "perm", perm, x0->ndim);
        break;
    }
    case WF_OP_FLATTEN:
        if ((a->axis ? a->axis : 1) != 1)
            return reshape(e, in[0], op->in[0], out[0], y0->ndim, y0->shape);
        n = node(e, "Flatten", 0, in, 1, out, 1);
        attr_i(e, n, "axis", 1);
        break;
    case WF_OP_CONCAT:
        n = node(e, "Concat", 0, in, op->nin, out, 1);
        attr_i(e, n, "axis", a->axis);
        break;
    case WF_OP_SPLIT: {
        int64_t sizes[WF_MAX_OUTPUTS];
        int ax = a->axis < 0 ? a->axis + x0->ndim : a->axis;
        for (int i = 0; i < op->nout; i++)
            sizes[i] = g->tensors[op->out[i]].shape[ax];
        const char *ins[2] = {in[0], const_i64(e, out[0], "split", op->nout, sizes)};
        n = ins[1] ? node(e, "Split", 0, ins, 2, out, op->nout) : NULL;
        attr_i(e, n, "axis", ax);
        break;
    }
    case WF_OP_TANH:
        n = node(e, "Tanh", 0, in, 1, out, 1);
        break;
    case WF_OP_SIGMOID:
        n = node(e, "Sigmoid", 0, in, 1, out, 1);
        break;
    case WF_OP_ROLL:
        /* torch.roll exports as Slice and Concat pairs; weft does not write them. */
        return wf_errorf(WF_INVAL, "ONNX export: op '%s' (roll): ONNX has no roll operator", op->name);
    case WF_OP_HARDSWISH:
        n = node(e, "HardSwish", 0, in, 1, out, 1);
        break;
    case WF_OP_CLIP: {
        if (a->lo == 0.0 && a->hi == 1.0) {
            n = node(e, "HardSigmoid", 0, in, 1, out, 1);
            attr_f(e, n, "alpha", a->alpha);
            attr_f(e, n, "beta", a->beta);
            break;
        }
        /* Mul and Add for the affine part (when not the identity), then Clip */
        int32_t ft = wf_onnx_type_of(x0->dtype);
        const char *cur = in[0];
        if (a->alpha != 1.0) {
            const char *ins[2] = {cur, const_f(e, out[0], "alpha", ft, 0, 1, a->alpha)};
            const char *o = fresh(e, out[0], "scaled");
            cur = ins[1] && o && node(e, "Mul", 0, ins, 2, &o, 1) ? o : NULL;
        }
        if (cur && a->beta != 0.0) {
            const char *ins[2] = {cur, const_f(e, out[0], "beta", ft, 0, 1, a->beta)};
            const char *o = fresh(e, out[0], "shifted");
            cur = ins[1] && o && node(e, "Add", 0, ins, 2, &o, 1) ? o : NULL;
        }
        const char *ins[3] = {cur, const_f(e, out[0], "lo", ft, 0, 1, a->lo), const_f(e, out[0], "hi", ft, 0, 1, a->hi)};
        n = cur && ins[1] && ins[2] ? node(e, "Clip", 0, ins, 3, out, 1) : NULL;
        break;
    }
    case WF_OP_CAST:
        n = node(e, "Cast", 0, in, 1, out, 1);
        attr_i(e, n, "to", wf_onnx_type_of(y0->dtype));
        break;
    case WF_OP_EXPAND: {
        const char *ins[2] = {in[0], const_i64(e, out[0], "shape", y0->ndim, y0->shape)};
        n = ins[1] ? node(e, "Expand", 0, ins, 2, out, 1) : NULL;
        break;
    }
    case WF_OP_ROUTER:
    case WF_OP_MOE_DISPATCH:
    case WF_OP_GROUPED_MLP:
    case WF_OP_MOE_COMBINE:
        /* ONNX has no standard top-k routing or grouped GEMM operator. */
        return wf_errorf(WF_INVAL, "ONNX export: op '%s' (%s): ONNX has no standard mixture-of-experts "
                                   "operator", op->name, wf_op_name(op->kind));
    case WF_OP_COUNT:
        break;
    }
    if (!n)
        return wf_errorf(WF_NOMEM, "ONNX export: out of memory at op '%s'", op->name);
    return WF_OK;
}

/* ---- the model ------------------------------------------------------------------------------ */

/* Unique ONNX names for the IR tensors (a repeated IR name gets "#k"). */
static wf_status name_tensors(ectx *e)
{
    const wf_graph *g = e->g;
    e->names = alloc(e, sizeof(char *) * (size_t)g->ntensors);
    if (!e->names)
        return wf_errorf(WF_NOMEM, "ONNX export: out of memory");
    int cap = 16;
    while (cap < 2 * g->ntensors)
        cap *= 2;
    int *h = malloc(sizeof(int) * (size_t)cap);
    if (!h)
        return wf_errorf(WF_NOMEM, "ONNX export: out of memory");
    for (int i = 0; i < cap; i++)
        h[i] = -1;
    for (int t = 0; t < g->ntensors; t++) {
        const char *base = g->tensors[t].name;
        char *nm = str(e, "%s", base);
        for (int k = 1; nm; k++) {
            uint32_t x = 2166136261u;
            for (const char *p = nm; *p; p++)
                x = (x ^ (uint8_t)*p) * 16777619u;
            uint32_t i = x & (uint32_t)(cap - 1);
            int dup = 0;
            while (h[i] >= 0 && !(dup = strcmp(e->names[h[i]], nm) == 0))
                i = (i + 1) & (uint32_t)(cap - 1);
            if (!dup) {
                h[i] = t;
                break;
            }
            nm = str(e, "%s#%d", base, k);
        }
        if (!nm) {
            free(h);
            return wf_errorf(WF_NOMEM, "ONNX export: out of memory");
        }
        e->names[t] = nm;
    }
    free(h);
    return WF_OK;
}

wf_status wf_onnx_save(const wf_graph *g, const char *path, const wf_onnx_save_opts *o)
{
    if (g->status != WF_OK)
        return wf_errorf(WF_INVAL, "ONNX export: graph '%s' has a build error", g->name);
    ectx e;
    memset(&e, 0, sizeof e);
    e.g = g;
    e.o = o;
    wf_arena_init(&e.a, 1 << 20);
    wf_status st = name_tensors(&e);
    Onnx__ValueInfoProto **ins = NULL, **outs = NULL;
    size_t nins = 0, nouts = 0;
    int capins = 0, capouts = 0;
    unsigned char *read = wf_calloc((size_t)g->ntensors + 1, 1);
    if (st == WF_OK && !read)
        st = wf_errorf(WF_NOMEM, "ONNX export: out of memory");
    for (int i = 0; st == WF_OK && i < g->nfwd; i++)
        for (int k = 0; k < g->ops[i].nin; k++)
            read[g->ops[i].in[k]] = 1;
    for (int t = 0; st == WF_OK && t < g->ntensors; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (x->role == WF_ROLE_PARAM && read[t])
            st = param_init(&e, t);
        else if ((x->role == WF_ROLE_INPUT || x->role == WF_ROLE_LABEL) &&
                 push((void ***)&ins, &nins, &capins, value_info(&e, t, x->ndim > 0)) != 0)
            st = wf_errorf(WF_NOMEM, "ONNX export: out of memory");
    }
    for (int i = 0; st == WF_OK && i < g->nfwd; i++) {
        e.op = i;
        st = emit(&e, i);
    }
    /* outputs: the loss, or every forward tensor no op reads */
    for (int i = 0; st == WF_OK && i < g->nfwd; i++)
        for (int k = 0; k < g->ops[i].nout; k++) {
            int t = g->ops[i].out[k];
            if ((g->loss >= 0 ? t == g->loss : !read[t]) &&
                push((void ***)&outs, &nouts, &capouts, value_info(&e, t, 0)) != 0)
                st = wf_errorf(WF_NOMEM, "ONNX export: out of memory");
        }
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
    Onnx__OperatorSetIdProto ops[2] = {ONNX__OPERATOR_SET_ID_PROTO__INIT,
                                       ONNX__OPERATOR_SET_ID_PROTO__INIT};
    Onnx__OperatorSetIdProto *opp[2] = {&ops[0], &ops[1]};
    uint8_t *buf = NULL;
    if (st == WF_OK) {
        m.has_ir_version = 1;
        m.ir_version = 10;
        m.producer_name = "weft";
        m.producer_version = "0.1";
        ops[0].domain = "";
        ops[0].has_version = 1;
        ops[0].version = OPSET;
        ops[1].domain = WEFT_DOMAIN;
        ops[1].has_version = 1;
        ops[1].version = 1;
        m.opset_import = opp;
        m.n_opset_import = e.weft_domain ? 2 : 1;
        m.graph = &gp;
        gp.name = (char *)g->name;
        gp.node = e.nodes;
        gp.n_node = e.nnodes;
        gp.initializer = e.inits;
        gp.n_initializer = e.ninits;
        gp.input = ins;
        gp.n_input = nins;
        gp.output = outs;
        gp.n_output = nouts;
        size_t len = onnx__model_proto__get_packed_size(&m);
        buf = malloc(len ? len : 1);
        if (!buf)
            st = wf_errorf(WF_NOMEM, "ONNX export: out of memory for %zu bytes", len);
        else if (onnx__model_proto__pack(&m, buf) != len)
            st = wf_errorf(WF_INTERNAL, "ONNX export: packing gave a different size");
        else
            st = wf_file_write_atomic(path, buf, len);
    }
    free(buf);
    free(read);
    free(ins);
    free(outs);
    free(e.nodes);
    free(e.inits);
    wf_arena_free(&e.a);
    return st;
}
