/* Private declarations of the onnx module: the model value, tensor decoding,
 * attribute access and names, shared by the importer (import.c), the
 * exporter (onnx_export.c) and the file layer (proto.c). The only header of weft
 * that includes protobuf-c (through the code generated from onnx.proto). */
#ifndef WEFT_ONNX_IMPL_H
#define WEFT_ONNX_IMPL_H

#include "weft/onnx.h"

#include "onnx.pb-c.h"

/* How a parameter's data derives from its initializer (set by the build). */
typedef struct {
    int tensor;                   /* parameter tensor in the built graph */
    const Onnx__TensorProto *src; /* the initializer (or Constant value), or NULL */
    double *values;               /* folded constant values when src is NULL (owned) */
    int64_t rows, cols;           /* transpose: the source is [rows, cols] */
    int transpose;                /* 1: the 2-D source [rows,cols] is stored as [cols,rows] */
    double scale;                 /* multiplies every element (Gemm alpha/beta) */
} wf_onnx_recipe;

typedef struct {
    char name[256];
    int tensor;                   /* in the last built graph, -1 when not computed */
    int ndim;
    int64_t shape[WF_MAX_DIMS];   /* as ONNX states it */
} wf_onnx_out;

struct wf_onnx_model {
    char path[1024];
    char dir[1024];               /* folder of path, for external data */
    Onnx__ModelProto *proto;
    int64_t opset;                /* of the default domain */
    wf_onnx_recipe *recipes;
    int nrecipes, cap_recipes;
    wf_onnx_out *outs;
    int nouts;
    char patterns[512];           /* the patterns the last build recognized ("" none) */
};

/* Forgets the recipes and outputs of an earlier build. */
void wf_onnx_reset_build(wf_onnx_model *m);

/* ---- tensors --------------------------------------------------------------------- */

/* The IR dtype of an ONNX element type; WF_INVAL names `what` and the type. */
wf_status wf_onnx_dtype(int32_t onnx_type, const char *what, wf_dtype *out);
/* The ONNX element type of an IR dtype. */
int32_t wf_onnx_type_of(wf_dtype t);
const char *wf_onnx_type_name(int32_t onnx_type);

int64_t wf_onnx_numel(const Onnx__TensorProto *t);
/* 1 when the tensor carries its data (raw, typed fields or external). */
int wf_onnx_has_data(const Onnx__TensorProto *t);
/* Decodes n = numel elements into doubles (any numeric type, exact for
 * integers up to 2^53). dir: folder for external data (may be NULL: then
 * external data is WF_NOTFOUND). WF_NOTFOUND without data, WF_FORMAT when the
 * data does not match the dims. */
wf_status wf_onnx_decode(const Onnx__TensorProto *t, const char *dir, double *dst, int64_t n);

/* ---- attributes --------------------------------------------------------------------- */

const Onnx__AttributeProto *wf_onnx_attr(const Onnx__NodeProto *n, const char *name);
int64_t wf_onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt);
double wf_onnx_attr_f(const Onnx__NodeProto *n, const char *name, double dflt);
/* A string attribute into buf (dflt when absent). */
const char *wf_onnx_attr_s(const Onnx__NodeProto *n, const char *name, const char *dflt,
                           char *buf, size_t cap);
/* An ints attribute: count (-1 when absent), values into out[cap]. */
int wf_onnx_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int cap);

/* ---- names ------------------------------------------------------------------------------ */

/* An IR name (< WF_NAME_LEN - reserve characters) for an ONNX name: the name
 * itself when it fits, else its tail after a hash of the whole name, so
 * distinct long names stay distinct. */
void wf_onnx_ir_name(char *dst, const char *onnx_name, size_t reserve);

/* A decoded value as an int64 without undefined behaviour: NaN and values
 * outside int64's range saturate (INT64_MIN, INT64_MAX), so the caller's
 * range check rejects them. */
static inline int64_t wf_onnx_d2i(double v)
{
    if (!(v >= -9223372036854775808.0))
        return INT64_MIN;
    if (v >= 9223372036854775808.0)
        return INT64_MAX;
    return (int64_t)v;
}

#endif
