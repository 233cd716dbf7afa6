/* The onnx module in a build without protobuf-c or onnx.proto (CMake compiles
 * this file instead of the others): the API stays, and every call that would
 * read or write a file fails with WF_INVAL "built without ONNX support", so a
 * MODEL ending in .onnx is a clear user error rather than an unknown name.
 * The spec helpers and wf_onnx_attach_loss (onnx_spec.c) work in both builds. */
#include "weft/onnx.h"

#include <string.h>

static wf_status off(const char *what)
{
    return wf_errorf(WF_INVAL, "%s: weft was built without ONNX support (install "
                               "protobuf-c-compiler, libprotobuf-c-dev and libonnx-dev, then "
                               "rebuild)",
                     what);
}

int wf_onnx_available(void) { return 0; }

wf_status wf_onnx_open(const char *path, wf_onnx_model **out)
{
    *out = NULL;
    return off(path);
}

void wf_onnx_close(wf_onnx_model *m) { (void)m; }

wf_status wf_onnx_build(wf_onnx_model *m, const wf_onnx_opts *o, wf_graph *g)
{
    (void)m;
    (void)o;
    wf_graph_init(g, "onnx");
    return g->status = off("ONNX model");
}

int wf_onnx_noutputs(const wf_onnx_model *m)
{
    (void)m;
    return 0;
}

wf_status wf_onnx_output(const wf_onnx_model *m, int i, const char **name, int *tensor,
                         int *ndim, int64_t shape[WF_MAX_DIMS])
{
    (void)m, (void)i, (void)name, (void)tensor, (void)ndim, (void)shape;
    return off("ONNX output");
}

wf_status wf_onnx_param_data(const wf_onnx_model *m, const wf_graph *g, int param, float *dst,
                             int64_t n)
{
    (void)m, (void)g, (void)param, (void)dst, (void)n;
    return off("ONNX parameter data");
}

wf_status wf_onnx_load(const char *path, int64_t mbs, wf_graph *g)
{
    (void)mbs;
    wf_graph_init(g, "onnx");
    return g->status = off(path);
}

wf_status wf_onnx_save(const wf_graph *g, const char *path, const wf_onnx_save_opts *o)
{
    (void)g;
    (void)o;
    return off(path);
}

wf_status wf_onnx_read_tensor(const char *path, wf_onnx_tensor *t)
{
    memset(t, 0, sizeof *t);
    return off(path);
}

wf_status wf_onnx_build_spec(const char *spec, int64_t mbs, wf_graph *g)
{
    (void)mbs;
    wf_graph_init(g, "onnx");
    return g->status = off(spec);
}

wf_status wf_onnx_build_spec_patterns(const char *spec, int64_t mbs, wf_graph *g, char *buf,
                                      size_t cap)
{
    if (buf && cap)
        buf[0] = 0;
    return wf_onnx_build_spec(spec, mbs, g);
}

const char *wf_onnx_patterns(const wf_onnx_model *m)
{
    (void)m;
    return "";
}
