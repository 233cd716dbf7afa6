/* weft graph IR: tensors, ops, shape inference, per-op FLOPs/bytes, autodiff.
 *
 * One graph value serves the cost model (metadata only: shapes, FLOPs, bytes),
 * the search, the simulator and the runtime (which attaches data). A graph is
 * a few flat arrays: tensors and ops refer to each other by index.
 *
 * Symbols in shape comments: B batch, S sequence, H hidden, A heads, D head
 * dim, V vocabulary, N/C/Hi/Wi image batch/channels/height/width; for
 * mixtures of experts E experts, K experts per token (top-k), C tokens per
 * expert (the capacity), F an expert's hidden width.
 *
 * Building is sticky-error: the first failing wf_graph_* call records its
 * status in g->status (and the message via wf_errorf); later calls return -1
 * and do nothing, so a model builder checks g->status once at the end. */
#ifndef WEFT_GRAPH_H
#define WEFT_GRAPH_H

#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WF_MAX_DIMS 8
#define WF_MAX_INPUTS 8
#define WF_MAX_OUTPUTS 8
#define WF_NAME_LEN 64

typedef enum {
    WF_DTYPE_FP32,
    WF_DTYPE_FP16,
    WF_DTYPE_BF16,
    WF_DTYPE_INT32,
    WF_DTYPE_INT64,
    WF_DTYPE_U8, /* masks (dropout) */
    WF_DTYPE_COUNT
} wf_dtype;

size_t wf_dtype_bytes(wf_dtype t);
const char *wf_dtype_name(wf_dtype t);
wf_status wf_dtype_parse(const char *text, wf_dtype *out);

typedef enum {
    WF_ROLE_INPUT,  /* data fed each step (token ids, images) */
    WF_ROLE_LABEL,  /* targets */
    WF_ROLE_PARAM,  /* trainable weights */
    WF_ROLE_ACT,    /* produced by a forward op */
    WF_ROLE_GRAD    /* produced by a backward op */
} wf_role;

/* How Megatron-style tensor parallelism treats an op (set by model builders;
 * the cost model and the runtime read it). */
typedef enum {
    WF_TP_NONE,  /* replicated on every tensor-parallel rank */
    WF_TP_COL,   /* linear with its weight split along the output features */
    WF_TP_ROW,   /* linear split along the input features: output is a partial sum */
    WF_TP_SHARD, /* works on an activation already split (per head / per feature) */
    WF_TP_VOCAB  /* embedding or logits split along the vocabulary */
} wf_tp_role;

typedef struct {
    char name[WF_NAME_LEN];
    wf_dtype dtype;
    wf_role role;
    int ndim;
    int64_t shape[WF_MAX_DIMS];
    int producer; /* op index, -1 for inputs, labels and parameters */
    int grad;     /* index of this tensor's gradient, -1 if none (yet) */
    int grad_of;  /* for gradients: the forward tensor, else -1 */
} wf_tensor;

/* Attributes; each op kind reads the fields its comment in WF_OP_LIST names. */
typedef struct {
    int trans_a, trans_b;         /* matmul, batched matmul */
    int causal;                   /* attention */
    int heads, kv_heads;          /* attention, rotary (kv_heads 0 = heads) */
    int axis;                     /* softmax, concat, split, flatten (start axis) */
    int kernel[2], stride[2], pad[2]; /* conv2d, pools */
    int ceil_mode;                /* maxpool, avgpool: output size rounded up, as PyTorch's
                                   * ceil_mode (the last window starts inside the input or
                                   * its left padding) */
    int groups;                   /* conv2d (0 = 1) */
    double eps;                   /* layernorm, rmsnorm, batchnorm */
    double p;                     /* dropout probability; attention dropout */
    double scale;                 /* mul by a constant; attention (0 = 1/sqrt(D)) */
    double base;                  /* rotary base (0 = 10000) */
    int ndim;                     /* reshape: target rank */
    int64_t shape[WF_MAX_DIMS];   /* reshape: target shape (one -1 allowed) */
    int perm[WF_MAX_DIMS];        /* transpose: permutation */
    int nsplit;                   /* split: number of outputs */
    int64_t sizes[WF_MAX_OUTPUTS];/* split: sizes along axis (all 0 = equal) */
    uint64_t seed;                /* dropout */
    int experts;                  /* router (0 = the weight's E), moe_dispatch: E */
    int top_k;                    /* router, moe_dispatch: experts per token K */
    int score;                    /* router: a wf_moe_score */
    int act;                      /* grouped_mlp: a wf_moe_act */
    double capacity_factor;       /* moe_dispatch: C = ceil(cf*T*K/E), at most T (0 = 1) */
    double alpha, beta, lo, hi;   /* clip: min(max(alpha*x + beta, lo), hi) */
    int dtype;                    /* cast: the output's wf_dtype */
    int64_t shifts[WF_MAX_DIMS];  /* roll: shift per dim (any sign; taken mod the dim) */
} wf_op_attrs;

/* How a router scores experts: softmax over the E logits (Mixtral, Qwen2-MoE)
 * or a sigmoid per logit, the chosen K renormalized (DeepSeek-V3). */
typedef enum { WF_MOE_SCORE_SOFTMAX, WF_MOE_SCORE_SIGMOID } wf_moe_score;
/* An expert MLP: SwiGLU, down(silu(gate) * up) with fc1 = [gate|up] of width
 * 2F, or GELU, fc2(gelu(fc1)) with fc1 of width F. */
typedef enum { WF_MOE_ACT_SWIGLU, WF_MOE_ACT_GELU } wf_moe_act;

/* Tokens per expert: C = min(T, ceil(cf*T*K/E)) for T tokens (cf 0 = 1). An
 * expert sees a token at most once, so more than T is never used. */
int64_t wf_moe_capacity(int64_t tokens, int top_k, int experts, double capacity_factor);

/* The op table. X(ENUM, "name", min_inputs, max_inputs, outputs, matrix_unit)
 * Inputs are listed in order; [] marks optional ones. Shapes are row-major. */
#define WF_OP_LIST(X)                                                                     \
    /* A[M,K] (trans_a: [K,M]) x B[K,N] (trans_b: [N,K]) -> [M,N] */                      \
    X(MATMUL, "matmul", 2, 2, 1, 1)                                                       \
    /* A[...,M,K] x B[...,K,N] -> [...,M,N]; transposes as matmul; equal batch dims */    \
    X(BATCH_MATMUL, "batch_matmul", 2, 2, 1, 1)                                           \
    /* x[...,K], W[K,N], [bias[N]] -> [...,N] */                                          \
    X(LINEAR, "linear", 2, 3, 1, 1)                                                       \
    /* x[...,N], b[N] -> [...,N] */                                                       \
    X(BIAS_ADD, "bias_add", 2, 2, 1, 0)                                                   \
    /* a, b (b's shape a suffix of a's: broadcast) -> shape of a */                       \
    X(ADD, "add", 2, 2, 1, 0)                                                             \
    /* a, [b] -> a*b (broadcast as add), or a*scale with one input */                     \
    X(MUL, "mul", 1, 2, 1, 0)                                                             \
    X(RELU, "relu", 1, 1, 1, 0)                                                           \
    X(GELU, "gelu", 1, 1, 1, 0)                                                           \
    X(SILU, "silu", 1, 1, 1, 0)                                                           \
    /* x -> x * mask / (1-p); p, seed */                                                  \
    X(DROPOUT, "dropout", 1, 1, 1, 0)                                                     \
    /* x[...,H], gamma[H], beta[H] -> [...,H]; eps */                                     \
    X(LAYERNORM, "layernorm", 3, 3, 1, 0)                                                 \
    /* x[...,H], gamma[H] -> [...,H]; eps */                                              \
    X(RMSNORM, "rmsnorm", 2, 2, 1, 0)                                                     \
    /* x -> softmax over the last axis */                                                 \
    X(SOFTMAX, "softmax", 1, 1, 1, 0)                                                     \
    /* q[B,S,A*D], k[B,Skv,Akv*D], v[B,Skv,Akv*D], [bias[Bb,A,S,Skv]] -> [B,S,A*D];      \
     * heads, kv_heads, causal, p (dropout on the probabilities), scale. The bias is     \
     * added to the scaled scores before the softmax (a relative-position bias, a pair   \
     * bias, a window mask): Bb divides B and rows b use bias[b / (B/Bb)] (Bb 1: one    \
     * bias for every row; Bb = B: one per row) */                                       \
    X(ATTENTION, "attention", 3, 4, 1, 1)                                                 \
    /* ids[B,S] (int), table[V,H] -> [B,S,H] */                                           \
    X(EMBEDDING, "embedding", 2, 2, 1, 0)                                                 \
    /* x[B,S,A*D] -> same; heads, base */                                                 \
    X(ROTARY, "rotary", 1, 1, 1, 0)                                                       \
    /* logits[...,V], labels[...] (int) -> loss[] (mean over the labels) */               \
    X(CROSS_ENTROPY, "cross_entropy", 2, 2, 1, 0)                                         \
    /* x[N,C,Hi,Wi], w[O,C/groups,KH,KW], [bias[O]] -> [N,O,Ho,Wo]; stride, pad, groups */ \
    X(CONV2D, "conv2d", 2, 3, 1, 1)                                                       \
    /* x[N,C,Hi,Wi] -> [N,C,Ho,Wo]; kernel, stride, pad */                                \
    X(MAXPOOL, "maxpool", 1, 1, 1, 0)                                                     \
    X(AVGPOOL, "avgpool", 1, 1, 1, 0)                                                     \
    /* x[N,C,Hi,Wi] -> [N,C] */                                                           \
    X(GLOBAL_AVGPOOL, "global_avgpool", 1, 1, 1, 0)                                       \
    /* x[N,C,...], gamma[C], beta[C] -> same (batch statistics); eps */                   \
    X(BATCHNORM, "batchnorm", 3, 3, 1, 0)                                                 \
    /* x -> shape (ndim, shape; one -1 inferred) */                                       \
    X(RESHAPE, "reshape", 1, 1, 1, 0)                                                     \
    /* x -> permuted by perm */                                                           \
    X(TRANSPOSE, "transpose", 1, 1, 1, 0)                                                 \
    /* x[d0..d(axis-1), ...] -> [d0..d(axis-1), prod(rest)]; axis (0 = 1) */              \
    X(FLATTEN, "flatten", 1, 1, 1, 0)                                                     \
    /* x0, x1, ... -> concatenated along axis */                                          \
    X(CONCAT, "concat", 1, WF_MAX_INPUTS, 1, 0)                                           \
    /* x -> nsplit outputs along axis (sizes or equal) */                                 \
    X(SPLIT, "split", 1, 1, WF_MAX_OUTPUTS, 0)                                           \
    /* x[B,S,H], W[H,E] -> weights[B,S,K] (x's dtype), experts[B,S,K] (int32): logits  \
     * x.W scored by `score`, the top_k experts per token (ties to the lower index)    \
     * and their weights, renormalized to sum 1; the auxiliary load-balancing loss is  \
     * computed inside (counted in the op's FLOPs and bytes, not a graph output);      \
     * experts, top_k, score */                                                        \
    X(ROUTER, "router", 2, 2, 2, 1)                                                       \
    /* x[B,S,H], experts[B,S,K] (int) -> [E,C,H]: each token copied to the rows of its  \
     * K experts, C = wf_moe_capacity(B*S, K, E, cf), overflow dropped, the rest       \
     * padded; experts (E), capacity_factor */                                         \
    X(MOE_DISPATCH, "moe_dispatch", 2, 2, 1, 0)                                           \
    /* x[E,C,H], w1[E,H,2F] (swiglu) or [E,H,F] (gelu), w2[E,F,H] -> [E,C,H]: one MLP   \
     * per expert on its C rows (a grouped GEMM); act */                               \
    X(GROUPED_MLP, "grouped_mlp", 3, 3, 1, 1)                                             \
    /* y[E,C,H], weights[B,S,K], experts[B,S,K] (int) -> [B,S,H]: each token's K      \
     * expert outputs gathered back and summed, weighted by the router */             \
    X(MOE_COMBINE, "moe_combine", 3, 3, 1, 0)                                             \
    /* x -> tanh(x) */                                                                    \
    X(TANH, "tanh", 1, 1, 1, 0)                                                           \
    /* x -> min(max(alpha*x + beta, lo), hi): ReLU6 (1, 0, 0, 6), HardSigmoid (1/6,     \
     * 1/2, 0, 1), an affine map (lo -inf, hi +inf); alpha, beta, lo, hi */              \
    X(CLIP, "clip", 1, 1, 1, 0)                                                           \
    /* x -> x * min(max(x/6 + 1/2, 0), 1) */                                              \
    X(HARDSWISH, "hardswish", 1, 1, 1, 0)                                                 \
    /* x (int) -> the same values as floats of dtype; no gradient */                      \
    X(CAST, "cast", 1, 1, 1, 0)                                                           \
    /* x -> broadcast (numpy rules) to (ndim, shape); x's rank at most ndim */           \
    X(EXPAND, "expand", 1, 1, 1, 0)                                                       \
    /* x -> 1 / (1 + exp(-x)) (gating: AlphaFold's gated attention and triangle        \
     * updates) */                                                                     \
    X(SIGMOID, "sigmoid", 1, 1, 1, 0)                                                     \
    /* x -> y[i_0..] = x[(i_0 - shifts[0]) mod d_0, ...]: torch.roll along each dim by  \
     * shifts[d] (Swin's shifted windows); shifts */                                   \
    X(ROLL, "roll", 1, 1, 1, 0)

typedef enum {
#define WF_X(e, name, mi, ma, no, mx) WF_OP_##e,
    WF_OP_LIST(WF_X)
#undef WF_X
    WF_OP_COUNT
} wf_op_kind;

const char *wf_op_name(wf_op_kind k);
wf_status wf_op_parse(const char *name, wf_op_kind *out);
/* 1 when the op runs on the matrix unit (tensor cores / GEMM). */
int wf_op_is_matrix(wf_op_kind k);

typedef enum { WF_PASS_FORWARD, WF_PASS_BACKWARD } wf_pass;

/* A forward op, or (pass == BACKWARD) the gradient op of forward op fwd_op:
 * a backward op's inputs are the gradients of fwd_op's outputs (in order,
 * -1 where an output has no gradient); its outputs are the gradients of
 * fwd_op's inputs (in order, -1 where an input needs none: int ids, labels).
 * The forward tensors it needs are fwd_op's inputs and outputs. An ADD with
 * pass BACKWARD and fwd_op -1 sums two partial gradients of one tensor. */
typedef struct {
    wf_op_kind kind;
    wf_pass pass;
    char name[WF_NAME_LEN];
    int nin, nout;
    int in[WF_MAX_INPUTS];
    int out[WF_MAX_OUTPUTS];
    wf_op_attrs attr;
    int fwd_op;     /* backward ops: the forward op; else -1 */
    int block;      /* repeated block kind (e.g. 0 = transformer layer), -1 none */
    int layer;      /* which instance of the block, -1 none */
    wf_tp_role tp;  /* tensor-parallel treatment */
} wf_op;

typedef struct {
    char name[WF_NAME_LEN];
    wf_tensor *tensors;
    int ntensors, cap_tensors;
    wf_op *ops;
    int nops, cap_ops;
    int nfwd;         /* ops [0, nfwd) are the forward pass, the rest backward */
    int loss;         /* tensor index of the scalar loss, -1 if none */
    int cur_block;    /* block/layer stamped on ops as they are added */
    int cur_layer;
    wf_tp_role cur_tp;/* tp role stamped on ops as they are added */
    wf_status status; /* first error while building (sticky) */
} wf_graph;

void wf_graph_init(wf_graph *g, const char *name);
void wf_graph_free(wf_graph *g);

/* Adds an input, label or parameter tensor; returns its index or -1. */
int wf_graph_add_tensor(wf_graph *g, const char *name, wf_dtype dtype, wf_role role,
                        int ndim, const int64_t *shape);
/* Adds a forward op; its outputs are created by shape inference, named
 * "<name>" (one output) or "<name>.<i>". Returns the op index or -1.
 * The first cross_entropy added becomes g->loss unless g->loss is already set. */
int wf_graph_add_op(wf_graph *g, wf_op_kind kind, const char *name, const int *in, int nin,
                    const wf_op_attrs *attr);
/* Output i of op (a tensor index), or -1 when op < 0. */
int wf_graph_op_output(const wf_graph *g, int op, int i);
/* Convenience: adds a one-output op and returns its output tensor (or -1). */
int wf_graph_op1(wf_graph *g, wf_op_kind kind, const char *name, const int *in, int nin,
                 const wf_op_attrs *attr);

/* Stamps subsequently added ops with a repeated-block id and instance. */
void wf_graph_set_block(wf_graph *g, int block, int layer);
void wf_graph_set_tp(wf_graph *g, wf_tp_role tp);

/* Checks shapes against the op table, acyclicity (every input produced by an
 * earlier op or a leaf), that every tensor is produced at most once, and the
 * loss. An error names the op and the reason. */
wf_status wf_graph_validate(const wf_graph *g);

/* Appends the backward pass for g->loss: one backward op per forward op that
 * leads to the loss and needs gradients, plus ADD ops accumulating gradients of
 * tensors used more than once. Parameters' gradients get role WF_ROLE_GRAD. */
wf_status wf_graph_autodiff(wf_graph *g);
/* The backward pass of a graph cut out of a larger one (a pipeline stage):
 * from outs[0 .. nouts) (float tensors forward ops produce), each seeded by a
 * GRAD tensor of its shape with no producer that the caller fills (the
 * gradient received for that output), instead of from g->loss (nouts 0:
 * from the loss, as wf_graph_autodiff); the float
 * INPUT tensors wrt[0 .. nwrt) get gradients (tensor .grad) like parameters. */
wf_status wf_graph_autodiff_outputs(wf_graph *g, const int *outs, int nouts, const int *wrt, int nwrt);

/* Per-op costs for one execution at the graph's shapes. */
typedef struct {
    double fwd_flops;     /* forward */
    double bwd_in_flops;  /* gradient w.r.t. inputs (activations) */
    double bwd_w_flops;   /* gradient w.r.t. weights */
    double fwd_bytes;     /* memory traffic of forward: inputs read + outputs written */
    double bwd_bytes;     /* memory traffic of backward */
    double saved_bytes;   /* activation bytes kept for backward (attributed to this op) */
    double params;        /* parameter elements read by this op */
} wf_op_cost;

void wf_op_cost_of(const wf_graph *g, int op, wf_op_cost *c);

/* Whole-graph totals over forward ops (0 for blocks means all ops;
 * otherwise only ops of layer == layer, block == block). */
typedef struct {
    double params;         /* parameter elements (each parameter tensor once) */
    double active_params;  /* those one token uses: routed experts count top_k/E
                            * of their weights (a grouped_mlp fed by a
                            * moe_dispatch), everything else in full */
    double fwd_flops;
    double bwd_flops;      /* input + weight gradients */
    double fwd_bytes;
    double saved_bytes;    /* union of tensors saved for backward, counted once */
} wf_graph_totals;

void wf_graph_totals_of(const wf_graph *g, wf_graph_totals *t);
/* Totals over the forward ops of one repeated-block instance (ops with
 * block == block and layer == layer); block < 0 means all forward ops, which
 * is what wf_graph_totals_of computes. */
void wf_graph_block_totals_of(const wf_graph *g, int block, int layer, wf_graph_totals *t);

/* Output size of a pool (or, ceil_mode 0, a convolution) along one spatial
 * dim: floor((in + 2p - k) / s) + 1, or with ceil_mode the ceiling, less one
 * when the last window would start in the right padding (PyTorch's rule). */
int64_t wf_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int ceil_mode);

int64_t wf_tensor_numel(const wf_tensor *t);
size_t wf_tensor_bytes(const wf_tensor *t);
/* "[2,3,4]" into buf. */
const char *wf_shape_str(const wf_tensor *t, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
