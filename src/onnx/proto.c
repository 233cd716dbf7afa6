/* The file layer of the onnx module: reading and parsing ONNX files
 * (ModelProto, TensorProto), decoding tensor data in any of its encodings
 * (raw little-endian bytes, typed fields, external files), attribute access,
 * IR names for ONNX names, and parameter data of a built graph. The graph
 * mapping itself is import.c; the writer is onnx_export.c; onnx_spec.c has what works
 * without protobuf-c. */
#include "onnx/onnx-impl.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int wf_onnx_available(void) { return 1; }

/* ---- element types ------------------------------------------------------------------ */

const char *wf_onnx_type_name(int32_t t)
{
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: return "float";
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: return "uint8";
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: return "int8";
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: return "uint16";
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: return "int16";
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return "int32";
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return "int64";
    case ONNX__TENSOR_PROTO__DATA_TYPE__STRING: return "string";
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return "bool";
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: return "float16";
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: return "double";
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: return "uint32";
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: return "uint64";
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return "bfloat16";
    default: return "unknown";
    }
}

wf_status wf_onnx_dtype(int32_t t, const char *what, wf_dtype *out)
{
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *out = WF_DTYPE_FP32; return WF_OK;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: *out = WF_DTYPE_FP16; return WF_OK;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: *out = WF_DTYPE_BF16; return WF_OK;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *out = WF_DTYPE_INT32; return WF_OK;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *out = WF_DTYPE_INT64; return WF_OK;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *out = WF_DTYPE_U8; return WF_OK;
    default:
        return wf_errorf(WF_INVAL, "%s has element type %s (%d), which weft does not support",
                         what, wf_onnx_type_name(t), (int)t);
    }
}

int32_t wf_onnx_type_of(wf_dtype t)
{
    switch (t) {
    case WF_DTYPE_FP32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    case WF_DTYPE_FP16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    case WF_DTYPE_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    case WF_DTYPE_INT32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    case WF_DTYPE_INT64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    case WF_DTYPE_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
    case WF_DTYPE_COUNT: break;
    }
    return ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED;
}

/* ---- tensor data --------------------------------------------------------------------- */

int64_t wf_onnx_numel(const Onnx__TensorProto *t)
{
    int64_t n = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || (t->dims[i] > 0 && n > INT64_MAX / t->dims[i]))
            return -1;
        n *= t->dims[i];
    }
    return n;
}

static int is_external(const Onnx__TensorProto *t)
{
    return t->has_data_location &&
           t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
}

int wf_onnx_has_data(const Onnx__TensorProto *t)
{
    return is_external(t) || t->has_raw_data || t->n_float_data || t->n_int32_data ||
           t->n_int64_data || t->n_double_data || t->n_uint64_data;
}

/* Bytes per element in raw_data, 0 for types without a fixed width. */
static size_t raw_width(int32_t type)
{
    switch (type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return 1;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return 2;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: return 8;
    default: return 0;
    }
}

/* IEEE half (binary16) bits to a double. */
static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0)
        return s * ldexp(m, -24);
    if (e == 31)
        return m ? NAN : s * INFINITY;
    return s * ldexp(m + 1024, e - 25);
}

static double bf16_to_double(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One little-endian element of `type` at p. */
static double raw_elem(int32_t type, const uint8_t *p)
{
    switch (type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return p[0];
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: return (int8_t)p[0];
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: return (uint16_t)(p[0] | p[1] << 8);
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: return half_to_double((uint16_t)(p[0] | p[1] << 8));
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return bf16_to_double((uint16_t)(p[0] | p[1] << 8));
    default: break;
    }
    uint64_t u = 0;
    size_t w = raw_width(type);
    for (size_t i = 0; i < w; i++)
        u |= (uint64_t)p[i] << (8 * i);
    switch (type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: {
        uint32_t v = (uint32_t)u;
        float f;
        memcpy(&f, &v, 4);
        return f;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: {
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return (int32_t)(uint32_t)u;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: return (uint32_t)u;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return (double)(int64_t)u;
    default: return (double)u;
    }
}

static const char *ext_value(const Onnx__TensorProto *t, const char *key)
{
    for (size_t i = 0; i < t->n_external_data; i++)
        if (t->external_data[i]->key && strcmp(t->external_data[i]->key, key) == 0)
            return t->external_data[i]->value;
    return NULL;
}

/* Reads the external data of t (bytes [offset, offset+len) of a file next to
 * the model) into a heap buffer. */
static wf_status read_external(const Onnx__TensorProto *t, const char *dir, size_t want,
                               uint8_t **buf)
{
    const char *name = t->name ? t->name : "?";
    const char *loc = ext_value(t, "location");
    if (!dir)
        return wf_errorf(WF_NOTFOUND, "tensor '%s': external data without a model folder", name);
    if (!loc || !*loc || strstr(loc, ".."))
        return wf_errorf(WF_FORMAT, "tensor '%s': external data location '%s' is not a file "
                                    "name inside the model's folder",
                         name, loc ? loc : "");
    int64_t off = 0, len = (int64_t)want;
    const char *s;
    if ((s = ext_value(t, "offset")) &&
        wf_parse_int(s, "external data offset", 0, INT64_MAX, &off) != WF_OK)
        return WF_FORMAT;
    if ((s = ext_value(t, "length")) &&
        wf_parse_int(s, "external data length", 0, INT64_MAX, &len) != WF_OK)
        return WF_FORMAT;
    if ((size_t)len != want)
        return wf_errorf(WF_FORMAT, "tensor '%s': external data length %" PRId64
                                    " but its dims need %zu bytes",
                         name, len, want);
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, loc);
    int fd;
    size_t fsize;
    if (wf_file_open_input(path, WF_FILE_ONNX, &fd, &fsize) != WF_OK)
        return wf_error_prefix(WF_IO, "tensor '%s': external data", name);
    if ((uint64_t)off > fsize || want > fsize - (uint64_t)off) {
        close(fd);
        return wf_errorf(WF_FORMAT, "tensor '%s': %s is shorter than offset %" PRId64 " + %zu bytes",
                         name, path, off, want);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return wf_errorf(WF_IO, "tensor '%s': cannot open external data %s", name, path);
    }
    *buf = malloc(want ? want : 1);
    wf_status st = WF_OK;
    if (!*buf)
        st = wf_errorf(WF_NOMEM, "tensor '%s': out of memory for %zu bytes", name, want);
    else if (fseek(f, (long)off, SEEK_SET) != 0 || fread(*buf, 1, want, f) != want)
        st = wf_errorf(WF_FORMAT, "tensor '%s': %s is shorter than offset %" PRId64
                                  " + %zu bytes",
                       name, path, off, want);
    fclose(f);
    if (st != WF_OK) {
        free(*buf);
        *buf = NULL;
    }
    return st;
}

wf_status wf_onnx_decode(const Onnx__TensorProto *t, const char *dir, double *dst, int64_t n)
{
    const char *name = t->name ? t->name : "?";
    int32_t type = t->data_type;
    if (wf_onnx_numel(t) != n)
        return wf_errorf(WF_INTERNAL, "tensor '%s': decode of %" PRId64 " elements asked",
                         name, n);
    if (type == ONNX__TENSOR_PROTO__DATA_TYPE__STRING || raw_width(type) == 0)
        return wf_errorf(WF_FORMAT, "tensor '%s' has element type %s, not a number", name,
                         wf_onnx_type_name(type));
    size_t w = raw_width(type);
    if (is_external(t)) {
        uint8_t *buf = NULL;
        wf_status st = read_external(t, dir, (size_t)n * w, &buf);
        if (st != WF_OK)
            return st;
        for (int64_t i = 0; i < n; i++)
            dst[i] = raw_elem(type, buf + (size_t)i * w);
        free(buf);
        return WF_OK;
    }
    if (t->has_raw_data) {
        if (t->raw_data.len != (size_t)n * w)
            return wf_errorf(WF_FORMAT, "tensor '%s': raw data has %zu bytes but %" PRId64
                                        " %s elements need %zu",
                             name, t->raw_data.len, n, wf_onnx_type_name(type), (size_t)n * w);
        for (int64_t i = 0; i < n; i++)
            dst[i] = raw_elem(type, t->raw_data.data + (size_t)i * w);
        return WF_OK;
    }
    size_t have = 0;
    switch (type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        have = t->n_float_data;
        for (int64_t i = 0; i < n && (size_t)i < have; i++)
            dst[i] = t->float_data[i];
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        have = t->n_double_data;
        for (int64_t i = 0; i < n && (size_t)i < have; i++)
            dst[i] = t->double_data[i];
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        have = t->n_int64_data;
        for (int64_t i = 0; i < n && (size_t)i < have; i++)
            dst[i] = (double)t->int64_data[i];
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
        have = t->n_uint64_data;
        for (int64_t i = 0; i < n && (size_t)i < have; i++)
            dst[i] = (double)t->uint64_data[i];
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
        /* The 16-bit patterns sit in int32_data. */
        have = t->n_int32_data;
        for (int64_t i = 0; i < n && (size_t)i < have; i++) {
            uint16_t h = (uint16_t)t->int32_data[i];
            dst[i] = type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ? half_to_double(h)
                                                                    : bf16_to_double(h);
        }
        break;
    default: /* int32, int16, int8, uint16, uint8, bool */
        have = t->n_int32_data;
        for (int64_t i = 0; i < n && (size_t)i < have; i++)
            dst[i] = t->int32_data[i];
        break;
    }
    if (have == 0 && n > 0)
        return wf_errorf(WF_NOTFOUND, "tensor '%s' has no data (a shapes-only file?)", name);
    if (have != (size_t)n)
        return wf_errorf(WF_FORMAT, "tensor '%s': %zu values for %" PRId64 " elements", name,
                         have, n);
    return WF_OK;
}

/* ---- attributes ------------------------------------------------------------------------ */

const Onnx__AttributeProto *wf_onnx_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0)
            return n->attribute[i];
    return NULL;
}

int64_t wf_onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = wf_onnx_attr(n, name);
    return a ? a->i : dflt;
}

double wf_onnx_attr_f(const Onnx__NodeProto *n, const char *name, double dflt)
{
    const Onnx__AttributeProto *a = wf_onnx_attr(n, name);
    return a ? (double)a->f : dflt;
}

const char *wf_onnx_attr_s(const Onnx__NodeProto *n, const char *name, const char *dflt,
                           char *buf, size_t cap)
{
    const Onnx__AttributeProto *a = wf_onnx_attr(n, name);
    if (!a)
        return dflt;
    size_t len = a->s.len < cap - 1 ? a->s.len : cap - 1;
    if (len)
        memcpy(buf, a->s.data, len);
    buf[len] = 0;
    return buf;
}

int wf_onnx_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int cap)
{
    const Onnx__AttributeProto *a = wf_onnx_attr(n, name);
    if (!a)
        return -1;
    for (size_t i = 0; i < a->n_ints && (int)i < cap; i++)
        out[i] = a->ints[i];
    return (int)a->n_ints;
}

/* ---- names ---------------------------------------------------------------------------- */

void wf_onnx_ir_name(char *dst, const char *onnx_name, size_t reserve)
{
    const char *s = onnx_name && *onnx_name ? onnx_name : "unnamed";
    size_t n = strlen(s), cap = WF_NAME_LEN - 1 - reserve;
    if (n <= cap) {
        memcpy(dst, s, n + 1);
        return;
    }
    /* FNV-1a of the whole name, then as much of its tail as fits. */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    char head[16];
    int k = snprintf(head, sizeof head, "~%08x~", (unsigned)h);
    size_t tail = cap - (size_t)k;
    memcpy(dst, head, (size_t)k);
    memcpy(dst + k, s + n - tail, tail + 1);
}

/* ---- files ----------------------------------------------------------------------------- */

wf_status wf_onnx_open(const char *path, wf_onnx_model **out)
{
    *out = NULL;
    if (strlen(path) >= sizeof((wf_onnx_model *)0)->path)
        return wf_errorf(WF_INVAL, "ONNX path too long: %s", path);
    char *data = NULL;
    size_t len = 0;
    wf_status st = wf_file_read_kind(path, WF_FILE_ONNX, &data, &len);
    if (st != WF_OK)
        return st;
    Onnx__ModelProto *p = onnx__model_proto__unpack(NULL, len, (const uint8_t *)data);
    free(data);
    if (!p)
        return wf_errorf(WF_FORMAT, "%s: not an ONNX model (the protobuf does not parse: "
                                    "truncated or another format)",
                         path);
    if (!p->graph || !p->has_ir_version) {
        const char *missing = p->graph ? "ir_version" : "graph";
        onnx__model_proto__free_unpacked(p, NULL);
        return wf_errorf(WF_FORMAT, "%s: not an ONNX model (no %s)", path, missing);
    }
    wf_onnx_model *m = wf_calloc(1, sizeof *m);
    if (!m) {
        onnx__model_proto__free_unpacked(p, NULL);
        return wf_errorf(WF_NOMEM, "%s: out of memory", path);
    }
    m->proto = p;
    snprintf(m->path, sizeof m->path, "%s", path);
    snprintf(m->dir, sizeof m->dir, "%s", path);
    char *slash = strrchr(m->dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(m->dir, sizeof m->dir, ".");
    /* The default domain's opset; a model without one predates opset
     * imports (IR version 1-2) and reads as opset 1. */
    m->opset = 1;
    for (size_t i = 0; i < p->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = p->opset_import[i];
        if ((!o->domain || !*o->domain || strcmp(o->domain, "ai.onnx") == 0) && o->has_version)
            m->opset = o->version;
    }
    *out = m;
    return WF_OK;
}

void wf_onnx_reset_build(wf_onnx_model *m)
{
    for (int i = 0; i < m->nrecipes; i++)
        free(m->recipes[i].values);
    free(m->recipes);
    free(m->outs);
    m->recipes = NULL;
    m->nrecipes = m->cap_recipes = 0;
    m->outs = NULL;
    m->nouts = 0;
}

void wf_onnx_close(wf_onnx_model *m)
{
    if (!m)
        return;
    wf_onnx_reset_build(m);
    if (m->proto)
        onnx__model_proto__free_unpacked(m->proto, NULL);
    free(m);
}

int wf_onnx_noutputs(const wf_onnx_model *m) { return m ? m->nouts : 0; }

wf_status wf_onnx_output(const wf_onnx_model *m, int i, const char **name, int *tensor,
                         int *ndim, int64_t shape[WF_MAX_DIMS])
{
    if (!m || i < 0 || i >= m->nouts)
        return wf_errorf(WF_INVAL, "ONNX output %d: the model has %d outputs", i,
                         m ? m->nouts : 0);
    const wf_onnx_out *o = &m->outs[i];
    if (name)
        *name = o->name;
    if (tensor)
        *tensor = o->tensor;
    if (ndim)
        *ndim = o->ndim;
    if (shape)
        memcpy(shape, o->shape, sizeof o->shape);
    return WF_OK;
}

wf_status wf_onnx_param_data(const wf_onnx_model *m, const wf_graph *g, int param, float *dst,
                             int64_t n)
{
    if (param < 0 || param >= g->ntensors || g->tensors[param].role != WF_ROLE_PARAM)
        return wf_errorf(WF_INVAL, "tensor %d is not a parameter of graph '%s'", param, g->name);
    const wf_tensor *t = &g->tensors[param];
    const wf_onnx_recipe *r = NULL;
    for (int i = 0; i < m->nrecipes && !r; i++)
        if (m->recipes[i].tensor == param)
            r = &m->recipes[i];
    if (!r)
        return wf_errorf(WF_INVAL, "parameter '%s' does not come from %s", t->name, m->path);
    if (n < 0 || wf_tensor_numel(t) != n)
        return wf_errorf(WF_INVAL, "parameter '%s' has %" PRId64 " elements, not %" PRId64,
                         t->name, wf_tensor_numel(t), n);
    if (r->src && wf_onnx_numel(r->src) != n)
        return wf_errorf(WF_INTERNAL, "parameter '%s': initializer has %" PRId64 " elements",
                         t->name, wf_onnx_numel(r->src));
    double *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return wf_errorf(WF_NOMEM, "parameter '%s': out of memory", t->name);
    wf_status st = WF_OK;
    if (r->src)
        st = wf_onnx_decode(r->src, m->dir, tmp, n);
    else
        memcpy(tmp, r->values, (size_t)n * sizeof *tmp);
    if (st == WF_OK) {
        if (r->transpose) {
            /* src [R,C] -> dst [C,R] */
            int64_t R = r->rows, C = r->cols;
            for (int64_t i = 0; i < R; i++)
                for (int64_t j = 0; j < C; j++)
                    dst[j * R + i] = (float)(tmp[i * C + j] * r->scale);
        } else {
            for (int64_t i = 0; i < n; i++)
                dst[i] = (float)(tmp[i] * r->scale);
        }
    }
    free(tmp);
    return st;
}

wf_status wf_onnx_load(const char *path, int64_t mbs, wf_graph *g)
{
    wf_onnx_model *m = NULL;
    wf_status st = wf_onnx_open(path, &m);
    if (st != WF_OK) {
        wf_graph_init(g, path);
        return g->status = st;
    }
    wf_onnx_opts o = {mbs, NULL, 0};
    st = wf_onnx_build(m, &o, g);
    wf_onnx_close(m);
    return st;
}

const char *wf_onnx_patterns(const wf_onnx_model *m) { return m->patterns; }

wf_status wf_onnx_build_spec(const char *spec, int64_t mbs, wf_graph *g)
{
    return wf_onnx_build_spec_patterns(spec, mbs, g, NULL, 0);
}

wf_status wf_onnx_build_spec_patterns(const char *spec, int64_t mbs, wf_graph *g, char *buf,
                                      size_t cap)
{
    char path[1024], dims[512];
    wf_status st = wf_onnx_split_spec(spec, path, sizeof path, dims, sizeof dims);
    wf_onnx_model *m = NULL;
    if (st == WF_OK)
        st = wf_onnx_open(path, &m);
    if (st != WF_OK) {
        wf_graph_init(g, spec);
        return g->status = st;
    }
    wf_onnx_opts o = {mbs, dims, 1};
    st = wf_onnx_build(m, &o, g);
    if (buf && cap)
        snprintf(buf, cap, "%s", m->patterns);
    wf_onnx_close(m);
    return st;
}

/* ---- tensor files ------------------------------------------------------------------------ */

wf_status wf_onnx_read_tensor(const char *path, wf_onnx_tensor *t)
{
    memset(t, 0, sizeof *t);
    char *data = NULL;
    size_t len = 0;
    wf_status st = wf_file_read_kind(path, WF_FILE_ONNX, &data, &len);
    if (st != WF_OK)
        return st;
    Onnx__TensorProto *p = onnx__tensor_proto__unpack(NULL, len, (const uint8_t *)data);
    free(data);
    if (!p)
        return wf_errorf(WF_FORMAT, "%s: not an ONNX TensorProto", path);
    if (p->n_dims > WF_MAX_DIMS || wf_onnx_numel(p) < 0) {
        st = wf_errorf(WF_FORMAT, "%s: %zu dims (at most %d, none negative)", path, p->n_dims,
                       WF_MAX_DIMS);
        goto done;
    }
    snprintf(t->name, sizeof t->name, "%s", p->name ? p->name : "");
    t->ndim = (int)p->n_dims;
    for (int i = 0; i < t->ndim; i++)
        t->shape[i] = p->dims[i];
    t->numel = wf_onnx_numel(p);
    double *tmp = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *tmp);
    int is_float = p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
                   p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ||
                   p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
                   p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    if (is_float)
        t->f32 = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *t->f32);
    else
        t->i64 = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *t->i64);
    if (!tmp || (!t->f32 && !t->i64)) {
        st = wf_errorf(WF_NOMEM, "%s: out of memory", path);
    } else if ((st = wf_onnx_decode(p, NULL, tmp, t->numel)) == WF_OK) {
        for (int64_t i = 0; i < t->numel; i++) {
            if (is_float)
                t->f32[i] = (float)tmp[i];
            else
                t->i64[i] = wf_onnx_d2i(tmp[i]);
        }
    }
    free(tmp);
    if (st != WF_OK)
        wf_onnx_tensor_free(t);
done:
    onnx__tensor_proto__free_unpacked(p, NULL);
    return st;
}
