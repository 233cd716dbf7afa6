/* weft ONNX: reads ONNX model files into the graph IR and writes graphs back
 * (opset 23 plus the "ai.weft" domain). A node the IR cannot express is
 * WF_INVAL naming the node and its op type; a file that is not an ONNX model
 * is WF_FORMAT; a build without protobuf-c keeps the API and every call fails
 * with "built without ONNX support" (wf_onnx_available() says 0). Only
 * src/onnx/ sees protobuf-c. How tensors and nodes map, what is folded and
 * fused: docs/interfaces.md, "onnx.h", and docs/onnx.md. */
#ifndef WEFT_ONNX_H
#define WEFT_ONNX_H

#include "weft/core.h"
#include "weft/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when weft was built with ONNX support. */
int wf_onnx_available(void);

/* A parsed ONNX file: the model and its initializer data. */
typedef struct wf_onnx_model wf_onnx_model;

typedef struct {
    /* > 0: the micro-batch, the samples the graph is built for (the graph's
     * batch dimension; never the global batch). Every input dim whose
     * dim_param also stands first in some input (or that has no value)
     * becomes `mbs`; when no input has a symbolic first dim (a model
     * exported with a fixed batch), the first dim of every input becomes
     * `mbs`. 0: the shapes of the file, with symbolic first dims set to 1. */
    int64_t mbs;
    /* "name=size,name=size": sizes of the other symbolic dims (e.g.
     * "seq=128"); NULL for none. A symbolic dim left without a size is
     * WF_INVAL naming the input, the dim and its name. */
    const char *dims;
    /* 1: when the model has no loss, attach one with wf_onnx_attach_loss to
     * its first output (what the planner and the runtime need). */
    int add_loss;
} wf_onnx_opts;

/* Reads and parses an ONNX file. WF_IO when it cannot be read, WF_FORMAT
 * when it is not an ONNX model (not a protobuf, truncated, no graph). */
wf_status wf_onnx_open(const char *path, wf_onnx_model **out);
void wf_onnx_close(wf_onnx_model *m);

/* Builds the forward graph of the model into g (initialized here; free it
 * with wf_graph_free, also after an error). The graph is named after the
 * ONNX graph (or the file). Parameter recipes of this build replace those of
 * an earlier one. */
wf_status wf_onnx_build(wf_onnx_model *m, const wf_onnx_opts *o, wf_graph *g);

/* The ONNX graph outputs of the last build: how many, and output i's tensor
 * in the graph with its shape as ONNX states it (the same elements as the
 * tensor's, possibly another shape: GlobalAveragePool gives [N,C,1,1] where
 * the IR's global_avgpool gives [N,C]). *tensor is -1 for an output the
 * graph does not compute (an unused BatchNormalization running mean; then
 * *ndim is -1 too) and for a constant output. */
int wf_onnx_noutputs(const wf_onnx_model *m);
wf_status wf_onnx_output(const wf_onnx_model *m, int i, const char **name, int *tensor,
                         int *ndim, int64_t shape[WF_MAX_DIMS]);

/* Copies the data of parameter tensor `param` of the last built graph into
 * dst[n] as fp32, in the IR's layout (a Gemm weight with transB=1 arrives
 * transposed to [K,N]; alpha and beta folded in where the build folded them).
 * n must be the tensor's element count. WF_NOTFOUND when the initializer has
 * no data (a shapes-only file), WF_INVAL for a tensor that is not a parameter
 * of this model. External data (data_location EXTERNAL) is read from the
 * file next to the model. */
wf_status wf_onnx_param_data(const wf_onnx_model *m, const wf_graph *g, int param, float *dst,
                             int64_t n);

/* Open, build, close: the forward graph of `path` for `mbs` samples (one
 * micro-batch; see wf_onnx_opts.mbs; dims NULL, no loss added). */
wf_status wf_onnx_load(const char *path, int64_t mbs, wf_graph *g);

/* The multi-node patterns the last build recognized and fused, with counts
 * ("attention (matmul, scale, mask, softmax, matmul) x2, ..."; "" for none). */
const char *wf_onnx_patterns(const wf_onnx_model *m);

/* Attaches a loss: a LABEL tensor "labels" (int32, the logits' shape without
 * its last dim) and cross_entropy(logits, labels), which becomes g->loss.
 * logits is a forward float tensor of rank >= 1, or -1 for the output of the
 * last forward op. WF_INVAL when g already has a loss or logits does not fit. */
wf_status wf_onnx_attach_loss(wf_graph *g, int logits);

/* ---- export ------------------------------------------------------------------ */

typedef struct {
    /* Parameter data for tensor `param` of g (numel floats, fp32, IR layout),
     * or NULL to write that initializer without data. A NULL callback writes
     * every parameter as shapes only (a file other tools will not run, but
     * weft reads it). */
    const float *(*param_data)(void *ctx, const wf_graph *g, int param);
    void *ctx;
} wf_onnx_save_opts;

/* Writes the forward ops of g (g->nfwd) as an ONNX model (atomically). INPUT
 * and LABEL tensors become graph inputs whose first dim is the symbolic
 * "batch"; the loss (or, without one, every tensor no op reads) becomes a
 * graph output. o may be NULL (shapes only). WF_INVAL names an op that has
 * no ONNX form. */
wf_status wf_onnx_save(const wf_graph *g, const char *path, const wf_onnx_save_opts *o);

/* ---- tensors in files --------------------------------------------------------- */

/* A TensorProto read from a file (ONNX test data sets: input_0.pb, ...).
 * Float types (float, double, float16, bfloat16) arrive as f32, integer and
 * bool types as i64; the other pointer is NULL. */
typedef struct {
    char name[WF_NAME_LEN];
    int ndim;
    int64_t shape[WF_MAX_DIMS];
    int64_t numel;
    float *f32;
    int64_t *i64;
} wf_onnx_tensor;

wf_status wf_onnx_read_tensor(const char *path, wf_onnx_tensor *t);
void wf_onnx_tensor_free(wf_onnx_tensor *t);

/* ---- the model zoo's hook --------------------------------------------------------- */

/* 1 when a MODEL spec names an ONNX file: "PATH.onnx" or
 * "PATH.onnx:name=size,..." (sizes of symbolic dims, as wf_onnx_opts.dims). */
int wf_onnx_is_spec(const char *spec);
/* Splits such a spec into the file path and the dims ("" when none); WF_INVAL
 * when a part does not fit its buffer. */
wf_status wf_onnx_split_spec(const char *spec, char *path, size_t path_cap, char *dims,
                             size_t dims_cap);

/* What the zoo calls for a MODEL spec naming an ONNX file: opens it, builds
 * the graph for `mbs` samples with the spec's dims, attaches a loss to the
 * first output when the model has none (wf_onnx_opts.add_loss), and closes it. */
wf_status wf_onnx_build_spec(const char *spec, int64_t mbs, wf_graph *g);
/* wf_onnx_build_spec that also copies wf_onnx_patterns into buf[cap]. */
wf_status wf_onnx_build_spec_patterns(const char *spec, int64_t mbs, wf_graph *g, char *buf,
                                      size_t cap);

#ifdef __cplusplus
}
#endif
#endif
