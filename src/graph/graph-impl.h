/* Private declarations of the graph module: the op table generated from
 * WF_OP_LIST, shape inference shared by wf_graph_add_op and wf_graph_validate,
 * and the saved-tensor enumeration shared by the cost code and the totals. */
#ifndef WEFT_GRAPH_IMPL_H
#define WEFT_GRAPH_IMPL_H

#include "weft/graph.h"

typedef struct {
    const char *name;
    int min_in, max_in, nout; /* nout: outputs (SPLIT: at most this many) */
    int matrix;               /* runs on the matrix unit */
} wf_op_info;

extern const wf_op_info wf_op_table[WF_OP_COUNT];

/* 1 for the integer dtypes (ids, labels); U8 masks count as not float either. */
int wf_dtype_is_int(wf_dtype t);
int wf_dtype_is_float(wf_dtype t);

/* Infers the outputs of an op of `kind` with inputs `in` (tensor indices into
 * g) and attributes `attr`: sets *nout and, for each output, dtype, ndim and
 * shape (other fields are left to the caller). `opname` only names the op in
 * the error message. WF_INVAL (message "op 'NAME' (KIND): reason") when the
 * inputs do not fit the op. */
wf_status wf_graph_infer(const wf_graph *g, wf_op_kind kind, const char *opname, const int *in,
                         int nin, const wf_op_attrs *attr, int *nout,
                         wf_tensor outs[WF_MAX_OUTPUTS]);

/* A tensor an op keeps for its backward pass. tensor >= 0 names a graph
 * tensor (counted once however many ops save it); tensor == -1 is a buffer
 * private to the op (a dropout mask, attention probabilities) of `bytes`. */
typedef struct {
    int tensor;
    double bytes;
} wf_saved;

#define WF_MAX_SAVED 12
/* Lists what forward op `op` saves for backward; returns the count. */
int wf_op_saved(const wf_graph *g, int op, wf_saved saved[WF_MAX_SAVED]);

/* ng[t] = 1 when tensor t needs a gradient, considering forward ops [0, upto_op):
 * float PARAMs, and the float outputs of ops with an input that needs one.
 * ng has g->ntensors entries. */
void wf_graph_grad_flags(const wf_graph *g, int upto_op, unsigned char *ng);
/* wf_op_saved / wf_op_cost_of with the flags already computed (O(1) per op). */
int wf_op_saved_flags(const wf_graph *g, int op, const unsigned char *ng,
                      wf_saved saved[WF_MAX_SAVED]);
void wf_op_cost_flags(const wf_graph *g, int op, const unsigned char *ng, wf_op_cost *c);

/* Append an already-filled tensor / op to the flat arrays (growing them);
 * return the index, or -1 with g->status = WF_NOMEM. */
int wf_graph_push_tensor(wf_graph *g, const wf_tensor *t);
int wf_graph_push_op(wf_graph *g, const wf_op *o);

/* Copies src into dst[WF_NAME_LEN] followed by suffix, truncating src so the
 * suffix always fits. */
void wf_name_with_suffix(char *dst, const char *src, const char *suffix);

#endif
