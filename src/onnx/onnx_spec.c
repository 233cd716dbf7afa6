/* The parts of the onnx module that need no protobuf-c, compiled in every
 * build: the model spec the zoo recognizes ("PATH.onnx[:name=size,...]"),
 * attaching a training loss to an imported forward graph, and freeing a
 * tensor read from a file. */
#include "weft/onnx.h"

#include <stdlib.h>
#include <string.h>

/* Where ".onnx" ends the path part of spec (the last ".onnx" followed by the
 * end or ':'), or NULL. */
static const char *path_end(const char *spec)
{
    const char *best = NULL;
    for (const char *p = strstr(spec, ".onnx"); p; p = strstr(p + 1, ".onnx"))
        if (p[5] == 0 || p[5] == ':')
            best = p + 5;
    return best;
}

int wf_onnx_is_spec(const char *spec) { return spec && path_end(spec) != NULL; }

wf_status wf_onnx_split_spec(const char *spec, char *path, size_t path_cap, char *dims,
                             size_t dims_cap)
{
    const char *e = path_end(spec);
    if (!e)
        return wf_errorf(WF_INVAL, "'%s' is not an .onnx path", spec);
    size_t n = (size_t)(e - spec);
    const char *rest = *e == ':' ? e + 1 : "";
    if (n >= path_cap || strlen(rest) >= dims_cap)
        return wf_errorf(WF_INVAL, "ONNX model spec too long: %s", spec);
    memcpy(path, spec, n);
    path[n] = 0;
    memcpy(dims, rest, strlen(rest) + 1);
    return WF_OK;
}

wf_status wf_onnx_attach_loss(wf_graph *g, int logits)
{
    if (g->status != WF_OK)
        return g->status;
    if (g->loss >= 0)
        return wf_errorf(WF_INVAL, "graph '%s' already has a loss ('%s')", g->name,
                         g->tensors[g->loss].name);
    if (logits < 0) {
        if (g->nfwd == 0)
            return wf_errorf(WF_INVAL, "graph '%s' has no ops to attach a loss to", g->name);
        logits = g->ops[g->nfwd - 1].out[0];
    }
    if (logits >= g->ntensors)
        return wf_errorf(WF_INVAL, "graph '%s': tensor %d does not exist", g->name, logits);
    const wf_tensor *x = &g->tensors[logits];
    if (x->role != WF_ROLE_ACT || x->ndim < 1 ||
        !(x->dtype == WF_DTYPE_FP32 || x->dtype == WF_DTYPE_FP16 || x->dtype == WF_DTYPE_BF16)) {
        char b[128];
        return wf_errorf(WF_INVAL,
                         "graph '%s': cannot attach a cross-entropy loss to '%s' (%s %s): it "
                         "needs the float output of an op, of rank >= 1",
                         g->name, x->name, wf_dtype_name(x->dtype), wf_shape_str(x, b, sizeof b));
    }
    /* labels: the logits' shape without the class dim */
    int64_t shape[WF_MAX_DIMS];
    int nd = x->ndim - 1;
    memcpy(shape, x->shape, sizeof shape);
    int lab = wf_graph_add_tensor(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, nd, shape);
    int in[2] = {logits, lab};
    if (wf_graph_add_op(g, WF_OP_CROSS_ENTROPY, "loss", in, 2, NULL) < 0)
        return g->status;
    return g->status;
}

void wf_onnx_tensor_free(wf_onnx_tensor *t)
{
    free(t->f32);
    free(t->i64);
    t->f32 = NULL;
    t->i64 = NULL;
}
