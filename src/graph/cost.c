/* Per-op FLOPs, memory traffic, saved activations and parameters, and the
 * whole-graph totals.
 *
 * Conventions (see also docs/graph.md):
 * - Matrix products: 2*M*N*K forward. Backward: the gradient w.r.t. each
 *   operand that needs one costs another 2*M*N*K; it counts as weight-gradient
 *   FLOPs when the operand is a PARAM, as input-gradient FLOPs otherwise (so a
 *   matmul of two activations has 2 x 2MNK input-gradient FLOPs). A linear's
 *   bias adds M*N forward and M*N to its weight gradient. conv2d is
 *   2*N*O*Ho*Wo*(C/groups)*KH*KW, treated the same way.
 * - Attention (dense kernel, the full S x Skv score matrix even when causal,
 *   as Megatron's 72*s*l*h^2*(1+s/6h+V/12lh) counts it): QK^T 2*B*A*S*Skv*D
 *   plus AV 2*B*A*S*Skv*D, softmax (with the scale) 5 FLOPs per score, dropout
 *   on the probabilities 2 per score when p > 0. Backward = 2 x forward, all
 *   input-gradient. An attention bias adds 1 per score forward and 1 per score
 *   to its gradient (the sum of the score gradients over the rows sharing it),
 *   weight-class when the bias is a PARAM; it is not saved (backward needs
 *   only the probabilities).
 * - Elementwise and normalization ops, per output element: add, mul, bias_add
 *   and relu 1, dropout 2 (0 when p = 0: an identity), gelu 8, silu 4,
 *   layernorm and batchnorm 8, rmsnorm 6, softmax 5, rotary 3, tanh and sigmoid 4,
 *   cross_entropy 5
 *   per logit, pools KH*KW per output, global_avgpool 1 per input element.
 *   Input gradients cost 2 x forward, except the pass-through of add and
 *   bias_add (0) and mul (1 per element per operand needing a gradient). Weight
 *   gradients of norms: 3 per element (gamma and beta; 2 for rmsnorm's gamma),
 *   of a bias / broadcast add operand 1 per element (the reduction), of an
 *   embedding table 1 per gathered element (scatter-add).
 * - Gradients exist only for tensors that need them: PARAMs and activations
 *   computed from a PARAM. INPUT and LABEL tensors and integer tensors need
 *   none; an op none of whose inputs needs a gradient has no backward cost and
 *   saves nothing. Costs assume the op is on the path to the loss.
 * - Bytes forward: inputs read + outputs written (+ the op's private buffers:
 *   dropout masks, attention scores and probabilities written and read back).
 *   reshape, flatten and split are views (0 bytes); transpose, roll and concat
 *   copy (0 FLOPs; roll saves nothing, its backward rolls the gradient back).
 *   Bytes backward: output gradients read + saved tensors read + PARAM inputs
 *   read + input gradients written (attention also writes and reads the
 *   score gradients).
 * - Saved for backward (Korthikanti et al. 2022, so a GPT layer saves exactly
 *   34*s*b*h + 5*a*s^2*b bytes in fp16): linear/matmul/conv2d save each
 *   non-PARAM operand whose partner needs a gradient (a linear saves its
 *   input); layernorm, rmsnorm, batchnorm, gelu, silu and maxpool their input;
 *   relu, softmax, tanh and sigmoid their output; dropout a 1-byte mask (U8) per element;
 *   attention q, k, v, the probabilities (dtype) and, when p > 0, the dropout
 *   mask (1 byte) and the dropped probabilities (dtype); mul (two inputs) each
 *   operand whose partner needs a gradient; embedding its ids; cross_entropy
 *   its logits and labels. add, bias_add, rotary, avgpool, global_avgpool and
 *   the shape ops save nothing. Norm statistics (a few bytes per row) are not
 *   counted. PARAMs are never "saved": they persist anyway.
 * - Mixtures of experts (T = B*S tokens, K experts per token, E experts, C
 *   tokens per expert, R = min(E*C, T*K) routed rows, s = 5 per score for a
 *   softmax router and 4 for a sigmoid one):
 *   router: the logits 2*T*H*E, then per score s (scoring) + K (top-k as K
 *   max passes) + 1 (the load-balancing loss accumulates each expert's mean
 *   probability); backward the two logit products (input and weight
 *   gradients) plus 2*(s+1) per score, input-gradient. Its logits and
 *   probabilities are written and read back (4 dt per score) and the logit
 *   gradients likewise backward; it saves its input and the probabilities.
 *   moe_dispatch: a copy, 0 FLOPs; backward R*H (each routed row added into
 *   its token's gradient); saves the expert ids.
 *   grouped_mlp: 2*E*C*H*F*(2+1) for SwiGLU (gate, up, down), 2*E*C*H*F*(1+1)
 *   for GELU, which with C = cf*T*K/E is 2*T*K*cf*(3 or 2)*H*F: the active
 *   experts only, padded to capacity. The activation is fused into the grouped
 *   GEMM's epilogue and its few FLOPs per hidden element (under 0.1% of the
 *   op) are not counted; its hidden [E,C,gF] and activated [E,C,F] tensors are
 *   written and read back, forward and (as gradients) backward. Backward is
 *   2 x forward: input gradients = forward, weight gradients = forward. Saves
 *   its input, the hidden and the activated tensors (the dense MLP's three).
 *   moe_combine: 2*R*H (scale and sum); backward R*H to the expert outputs
 *   and 2*R*H to the weights (a dot per routed row); saves each operand
 *   whose partner needs a gradient, and the expert ids.
 *   Shared experts are ordinary linears on every token.
 * - params: elements of the op's PARAM inputs. */
#include "graph/graph-impl.h"

#include <stdlib.h>
#include <string.h>

static double ne(const wf_graph *g, int t) { return (double)wf_tensor_numel(&g->tensors[t]); }
static double nb(const wf_graph *g, int t) { return (double)wf_tensor_bytes(&g->tensors[t]); }
static int is_param(const wf_graph *g, int t) { return g->tensors[t].role == WF_ROLE_PARAM; }

static int op_ok(const wf_graph *g, int op)
{
    if (op < 0 || op >= g->nops)
        return 0;
    const wf_op *o = &g->ops[op];
    if ((int)o->kind < 0 || o->kind >= WF_OP_COUNT || o->nin < 0 || o->nin > WF_MAX_INPUTS ||
        o->nout < 0 || o->nout > WF_MAX_OUTPUTS)
        return 0;
    /* Backward ops use -1 for gradients that do not exist. */
    int lo = o->pass == WF_PASS_BACKWARD ? -1 : 0;
    for (int i = 0; i < o->nin; i++)
        if (o->in[i] < lo || o->in[i] >= g->ntensors)
            return 0;
    for (int i = 0; i < o->nout; i++)
        if (o->out[i] < lo || o->out[i] >= g->ntensors)
            return 0;
    return 1;
}

void wf_graph_grad_flags(const wf_graph *g, int upto_op, unsigned char *ng)
{
    memset(ng, 0, (size_t)g->ntensors);
    for (int t = 0; t < g->ntensors; t++)
        ng[t] = g->tensors[t].role == WF_ROLE_PARAM && wf_dtype_is_float(g->tensors[t].dtype);
    if (upto_op > g->nfwd)
        upto_op = g->nfwd;
    for (int i = 0; i < upto_op; i++) {
        if (!op_ok(g, i) || g->ops[i].pass != WF_PASS_FORWARD)
            continue;
        const wf_op *o = &g->ops[i];
        int any = 0;
        for (int j = 0; j < o->nin; j++)
            any |= ng[o->in[j]];
        for (int j = 0; j < o->nout; j++)
            ng[o->out[j]] = (unsigned char)(any && wf_dtype_is_float(g->tensors[o->out[j]].dtype));
    }
}

/* Attention dimensions from q [B,S,A*D] and k [B,Skv,Akv*D]. */
typedef struct {
    double B, S, Skv, A, D, scores; /* scores = B*A*S*Skv */
} attn_dims;

static attn_dims attn_of(const wf_graph *g, const wf_op *o)
{
    attn_dims d;
    const wf_tensor *q = &g->tensors[o->in[0]], *k = &g->tensors[o->in[1]];
    d.B = (double)q->shape[0];
    d.S = (double)q->shape[1];
    d.Skv = (double)k->shape[1];
    d.A = o->attr.heads > 0 ? o->attr.heads : 1;
    d.D = (double)q->shape[2] / d.A;
    d.scores = d.B * d.A * d.S * d.Skv;
    return d;
}

/* Mixture-of-experts dimensions of a router, dispatch, grouped MLP or combine
 * op; fields an op cannot see are 0 (a grouped MLP knows no tokens). */
typedef struct {
    double T, H, E, K, C, F, gF, R, dt;
} moe_dims;

static moe_dims moe_of(const wf_graph *g, const wf_op *o)
{
    moe_dims d;
    memset(&d, 0, sizeof d);
    const wf_tensor *x = &g->tensors[o->in[0]];
    d.dt = (double)wf_dtype_bytes(x->dtype);
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (o->kind) {
    case WF_OP_ROUTER: {
        const wf_tensor *y = &g->tensors[o->out[0]];
        d.T = (double)(x->shape[0] * x->shape[1]);
        d.H = (double)x->shape[2];
        d.E = (double)g->tensors[o->in[1]].shape[1];
        d.K = (double)y->shape[2];
        break;
    }
    case WF_OP_MOE_DISPATCH: {
        const wf_tensor *y = &g->tensors[o->out[0]];
        d.T = (double)(x->shape[0] * x->shape[1]);
        d.H = (double)x->shape[2];
        d.K = (double)g->tensors[o->in[1]].shape[2];
        d.E = (double)y->shape[0];
        d.C = (double)y->shape[1];
        break;
    }
    case WF_OP_GROUPED_MLP:
        d.E = (double)x->shape[0];
        d.C = (double)x->shape[1];
        d.H = (double)x->shape[2];
        d.F = (double)g->tensors[o->in[2]].shape[1];
        d.gF = (double)g->tensors[o->in[1]].shape[2];
        break;
    case WF_OP_MOE_COMBINE: {
        const wf_tensor *w = &g->tensors[o->in[1]];
        d.E = (double)x->shape[0];
        d.C = (double)x->shape[1];
        d.H = (double)x->shape[2];
        d.T = (double)(w->shape[0] * w->shape[1]);
        d.K = (double)w->shape[2];
        break;
    }
    default:
        break;
    }
    d.R = d.E * d.C < d.T * d.K ? d.E * d.C : d.T * d.K;
    return d;
}

static int any_input_needs(const wf_op *o, const unsigned char *ng)
{
    for (int j = 0; j < o->nin; j++)
        if (ng[o->in[j]])
            return 1;
    return 0;
}

static int add_saved(wf_saved *s, int n, int tensor, double bytes)
{
    if (n < WF_MAX_SAVED) {
        s[n].tensor = tensor;
        s[n].bytes = bytes;
        n++;
    }
    return n;
}

/* Saves non-PARAM operand a when its partner b needs a gradient. */
static int save_partner(const wf_graph *g, const unsigned char *ng, wf_saved *s, int n, int a,
                        int b)
{
    if (!is_param(g, a) && ng[b])
        n = add_saved(s, n, a, nb(g, a));
    return n;
}

int wf_op_saved_flags(const wf_graph *g, int op, const unsigned char *ng,
                      wf_saved saved[WF_MAX_SAVED])
{
    if (!op_ok(g, op) || g->ops[op].pass != WF_PASS_FORWARD)
        return 0;
    const wf_op *o = &g->ops[op];
    if (!any_input_needs(o, ng))
        return 0;
    int n = 0;
    int x = o->in[0];
    switch (o->kind) {
    case WF_OP_MATMUL:
    case WF_OP_BATCH_MATMUL:
    case WF_OP_LINEAR:
    case WF_OP_CONV2D:
        n = save_partner(g, ng, saved, n, o->in[0], o->in[1]);
        n = save_partner(g, ng, saved, n, o->in[1], o->in[0]);
        break;
    case WF_OP_MUL:
        if (o->nin == 2) {
            n = save_partner(g, ng, saved, n, o->in[0], o->in[1]);
            n = save_partner(g, ng, saved, n, o->in[1], o->in[0]);
        }
        break;
    case WF_OP_LAYERNORM:
    case WF_OP_RMSNORM:
    case WF_OP_BATCHNORM:
    case WF_OP_GELU:
    case WF_OP_SILU:
    case WF_OP_MAXPOOL:
    case WF_OP_CLIP:
    case WF_OP_HARDSWISH:
        if (!is_param(g, x))
            n = add_saved(saved, n, x, nb(g, x));
        break;
    case WF_OP_RELU:
    case WF_OP_SOFTMAX:
    case WF_OP_TANH:
    case WF_OP_SIGMOID:
        n = add_saved(saved, n, o->out[0], nb(g, o->out[0]));
        break;
    case WF_OP_DROPOUT:
        if (o->attr.p > 0)
            n = add_saved(saved, n, -1, ne(g, x) * wf_dtype_bytes(WF_DTYPE_U8));
        break;
    case WF_OP_ATTENTION: {
        attn_dims d = attn_of(g, o);
        double dt = (double)wf_dtype_bytes(g->tensors[x].dtype);
        for (int j = 0; j < 3; j++)
            if (!is_param(g, o->in[j]))
                n = add_saved(saved, n, o->in[j], nb(g, o->in[j]));
        n = add_saved(saved, n, -1, d.scores * dt); /* softmax probabilities */
        if (o->attr.p > 0) {
            n = add_saved(saved, n, -1, d.scores * wf_dtype_bytes(WF_DTYPE_U8)); /* mask */
            n = add_saved(saved, n, -1, d.scores * dt); /* dropped probabilities */
        }
        break;
    }
    case WF_OP_EMBEDDING:
        n = add_saved(saved, n, x, nb(g, x));
        break;
    case WF_OP_ROUTER: {
        moe_dims d = moe_of(g, o);
        n = save_partner(g, ng, saved, n, o->in[0], o->in[1]);
        n = add_saved(saved, n, -1, d.T * d.E * d.dt); /* probabilities */
        break;
    }
    case WF_OP_MOE_DISPATCH:
        n = add_saved(saved, n, o->in[1], nb(g, o->in[1]));
        break;
    case WF_OP_GROUPED_MLP: {
        moe_dims d = moe_of(g, o);
        if (!is_param(g, x))
            n = add_saved(saved, n, x, nb(g, x));
        n = add_saved(saved, n, -1, d.E * d.C * d.gF * d.dt); /* hidden */
        n = add_saved(saved, n, -1, d.E * d.C * d.F * d.dt);  /* activated */
        break;
    }
    case WF_OP_MOE_COMBINE:
        n = save_partner(g, ng, saved, n, o->in[0], o->in[1]);
        n = save_partner(g, ng, saved, n, o->in[1], o->in[0]);
        n = add_saved(saved, n, o->in[2], nb(g, o->in[2]));
        break;
    case WF_OP_CROSS_ENTROPY:
        n = add_saved(saved, n, o->in[0], nb(g, o->in[0]));
        n = add_saved(saved, n, o->in[1], nb(g, o->in[1]));
        break;
    case WF_OP_BIAS_ADD:
    case WF_OP_ADD:
    case WF_OP_ROTARY:
    case WF_OP_AVGPOOL:
    case WF_OP_GLOBAL_AVGPOOL:
    case WF_OP_RESHAPE:
    case WF_OP_TRANSPOSE:
    case WF_OP_FLATTEN:
    case WF_OP_CONCAT:
    case WF_OP_SPLIT:
    case WF_OP_CAST:
    case WF_OP_EXPAND:
    case WF_OP_ROLL:
    case WF_OP_COUNT:
        break;
    }
    return n;
}

int wf_op_saved(const wf_graph *g, int op, wf_saved saved[WF_MAX_SAVED])
{
    if (!op_ok(g, op) || g->ntensors == 0)
        return 0;
    unsigned char *ng = malloc((size_t)g->ntensors);
    if (!ng)
        return 0;
    wf_graph_grad_flags(g, op, ng);
    int n = wf_op_saved_flags(g, op, ng, saved);
    free(ng);
    return n;
}

/* Adds the gradient cost of operand t (when it needs one) to the weight or
 * the input class. */
static void grad_cost(const wf_graph *g, const unsigned char *ng, int t, double flops,
                      wf_op_cost *c)
{
    if (!ng[t])
        return;
    if (is_param(g, t))
        c->bwd_w_flops += flops;
    else
        c->bwd_in_flops += flops;
}

/* Per-element forward FLOPs of the simple ops (per output element). */
static double elem_flops(const wf_op *o)
{
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (o->kind) {
    case WF_OP_BIAS_ADD:
    case WF_OP_ADD:
    case WF_OP_MUL:
    case WF_OP_RELU:
        return 1;
    case WF_OP_DROPOUT:
        return o->attr.p > 0 ? 2 : 0;
    case WF_OP_GELU:
        return 8;
    case WF_OP_SILU:
        return 4;
    case WF_OP_LAYERNORM:
    case WF_OP_BATCHNORM:
        return 8;
    case WF_OP_RMSNORM:
        return 6;
    case WF_OP_SOFTMAX:
        return 5;
    case WF_OP_ROTARY:
        return 3;
    case WF_OP_TANH:
    case WF_OP_SIGMOID:
        return 4;
    case WF_OP_CLIP:
        return 3;
    case WF_OP_HARDSWISH:
        return 5;
    default:
        return 0;
    }
}

static void cost_forward(const wf_graph *g, int op, const unsigned char *ng, wf_op_cost *c)
{
    const wf_op *o = &g->ops[op];
    int x = o->in[0], y = o->out[0];
    double E = ne(g, y);
    int needs = any_input_needs(o, ng);
    double extra_fwd_bytes = 0, extra_bwd_bytes = 0;
    int view = 0;

    for (int j = 0; j < o->nin; j++)
        if (is_param(g, o->in[j]))
            c->params += ne(g, o->in[j]);

    switch (o->kind) {
    case WF_OP_MATMUL:
    case WF_OP_BATCH_MATMUL: {
        const wf_tensor *A = &g->tensors[x];
        double K = (double)(o->attr.trans_a ? A->shape[A->ndim - 2] : A->shape[A->ndim - 1]);
        double f = 2.0 * E * K; /* E = batch*M*N */
        c->fwd_flops = f;
        grad_cost(g, ng, o->in[0], f, c);
        grad_cost(g, ng, o->in[1], f, c);
        break;
    }
    case WF_OP_LINEAR: {
        double K = (double)g->tensors[o->in[1]].shape[0];
        double f = 2.0 * E * K; /* E = M*N */
        c->fwd_flops = f;
        grad_cost(g, ng, o->in[0], f, c);
        grad_cost(g, ng, o->in[1], f, c);
        if (o->nin == 3) {
            c->fwd_flops += E;
            grad_cost(g, ng, o->in[2], E, c);
        }
        break;
    }
    case WF_OP_CONV2D: {
        const wf_tensor *w = &g->tensors[o->in[1]];
        double f = 2.0 * E * (double)(w->shape[1] * w->shape[2] * w->shape[3]);
        c->fwd_flops = f;
        grad_cost(g, ng, o->in[0], f, c);
        grad_cost(g, ng, o->in[1], f, c);
        if (o->nin == 3) {
            c->fwd_flops += E;
            grad_cost(g, ng, o->in[2], E, c);
        }
        break;
    }
    case WF_OP_ATTENTION: {
        attn_dims d = attn_of(g, o);
        double dt = (double)wf_dtype_bytes(g->tensors[x].dtype);
        double mm = 4.0 * d.scores * d.D; /* QK^T + AV */
        double f = mm + 5.0 * d.scores + (o->attr.p > 0 ? 2.0 * d.scores : 0);
        c->fwd_flops = f;
        if (needs)
            c->bwd_in_flops = 2.0 * f;
        if (o->nin == 4) { /* the bias: one add per score; its gradient sums the score gradients */
            c->fwd_flops += d.scores;
            grad_cost(g, ng, o->in[3], d.scores, c);
        }
        /* Scores written and read by softmax; probabilities written and read by AV. */
        extra_fwd_bytes = 4.0 * dt * d.scores;
        if (o->attr.p > 0) /* mask written; dropped probabilities written and read */
            extra_fwd_bytes += d.scores * (1.0 + 2.0 * dt);
        extra_bwd_bytes = 2.0 * dt * d.scores; /* score gradients written and read */
        break;
    }
    case WF_OP_BIAS_ADD:
        c->fwd_flops = E;
        grad_cost(g, ng, o->in[1], E, c);
        break;
    case WF_OP_ADD:
        c->fwd_flops = E;
        if (ne(g, o->in[1]) < E)
            grad_cost(g, ng, o->in[1], E, c);
        break;
    case WF_OP_MUL:
        c->fwd_flops = E;
        grad_cost(g, ng, o->in[0], E, c);
        if (o->nin == 2)
            grad_cost(g, ng, o->in[1], ne(g, o->in[1]) < E ? 2.0 * E : E, c);
        break;
    case WF_OP_LAYERNORM:
    case WF_OP_BATCHNORM:
    case WF_OP_RMSNORM: {
        double f = elem_flops(o) * E;
        c->fwd_flops = f;
        grad_cost(g, ng, x, 2.0 * f, c);
        grad_cost(g, ng, o->in[1], 2.0 * E, c);
        if (o->nin == 3)
            grad_cost(g, ng, o->in[2], E, c);
        break;
    }
    case WF_OP_RELU:
    case WF_OP_GELU:
    case WF_OP_SILU:
    case WF_OP_DROPOUT:
    case WF_OP_SOFTMAX:
    case WF_OP_ROTARY:
    case WF_OP_TANH:
    case WF_OP_SIGMOID:
    case WF_OP_CLIP:
    case WF_OP_HARDSWISH: {
        double f = elem_flops(o) * E;
        c->fwd_flops = f;
        grad_cost(g, ng, x, 2.0 * f, c);
        if (o->kind == WF_OP_DROPOUT && o->attr.p > 0)
            extra_fwd_bytes = E; /* the mask written */
        break;
    }
    case WF_OP_EMBEDDING:
        c->fwd_flops = 0;
        grad_cost(g, ng, o->in[1], E, c);
        break;
    case WF_OP_CROSS_ENTROPY: {
        double f = 5.0 * ne(g, x);
        c->fwd_flops = f;
        grad_cost(g, ng, x, 2.0 * f, c);
        break;
    }
    case WF_OP_MAXPOOL:
    case WF_OP_AVGPOOL: {
        double f = E * (double)o->attr.kernel[0] * (double)o->attr.kernel[1];
        c->fwd_flops = f;
        grad_cost(g, ng, x, 2.0 * f, c);
        break;
    }
    case WF_OP_GLOBAL_AVGPOOL: {
        double f = ne(g, x);
        c->fwd_flops = f;
        grad_cost(g, ng, x, 2.0 * f, c);
        break;
    }
    case WF_OP_ROUTER: {
        moe_dims d = moe_of(g, o);
        double s = o->attr.score == WF_MOE_SCORE_SIGMOID ? 4.0 : 5.0;
        double mm = 2.0 * d.T * d.H * d.E;
        c->fwd_flops = mm + d.T * d.E * (s + d.K + 1.0);
        grad_cost(g, ng, o->in[0], mm, c);
        grad_cost(g, ng, o->in[1], mm, c);
        if (needs)
            c->bwd_in_flops += 2.0 * (s + 1.0) * d.T * d.E;
        extra_fwd_bytes = 4.0 * d.dt * d.T * d.E; /* logits and probabilities */
        extra_bwd_bytes = 2.0 * d.dt * d.T * d.E; /* logit gradients */
        break;
    }
    case WF_OP_MOE_DISPATCH: {
        moe_dims d = moe_of(g, o);
        grad_cost(g, ng, x, d.R * d.H, c);
        break;
    }
    case WF_OP_GROUPED_MLP: {
        moe_dims d = moe_of(g, o);
        double f1 = 2.0 * d.E * d.C * d.H * d.gF, f2 = 2.0 * d.E * d.C * d.F * d.H;
        c->fwd_flops = f1 + f2;
        grad_cost(g, ng, x, f1 + f2, c);
        grad_cost(g, ng, o->in[1], f1, c);
        grad_cost(g, ng, o->in[2], f2, c);
        extra_fwd_bytes = 2.0 * d.dt * d.E * d.C * (d.gF + d.F);
        extra_bwd_bytes = extra_fwd_bytes;
        break;
    }
    case WF_OP_MOE_COMBINE: {
        moe_dims d = moe_of(g, o);
        c->fwd_flops = 2.0 * d.R * d.H;
        grad_cost(g, ng, x, d.R * d.H, c);
        grad_cost(g, ng, o->in[1], 2.0 * d.R * d.H, c);
        break;
    }
    case WF_OP_RESHAPE:
    case WF_OP_FLATTEN:
    case WF_OP_SPLIT:
        view = 1;
        break;
    case WF_OP_CAST:
        c->fwd_flops = E; /* one conversion per element; ids need no gradient */
        break;
    case WF_OP_EXPAND:
        /* a copy forward; backward sums the broadcast copies (one add each) */
        grad_cost(g, ng, x, E, c);
        break;
    case WF_OP_TRANSPOSE:
    case WF_OP_CONCAT:
    case WF_OP_ROLL: /* a copy; backward rolls the gradient back */
    case WF_OP_COUNT:
        break;
    }

    if (!view) {
        double bytes = extra_fwd_bytes;
        for (int j = 0; j < o->nin; j++)
            bytes += nb(g, o->in[j]);
        for (int j = 0; j < o->nout; j++)
            bytes += nb(g, o->out[j]);
        c->fwd_bytes = bytes;
    }

    wf_saved saved[WF_MAX_SAVED];
    int ns = wf_op_saved_flags(g, op, ng, saved);
    for (int i = 0; i < ns; i++)
        c->saved_bytes += saved[i].bytes;

    if (needs && !view) {
        double bytes = extra_bwd_bytes + c->saved_bytes;
        for (int j = 0; j < o->nout; j++)
            bytes += nb(g, o->out[j]); /* output gradients read */
        for (int j = 0; j < o->nin; j++) {
            if (is_param(g, o->in[j]))
                bytes += nb(g, o->in[j]); /* weights read */
            if (ng[o->in[j]])
                bytes += nb(g, o->in[j]); /* input gradients written */
        }
        c->bwd_bytes = bytes;
    }
}

void wf_op_cost_flags(const wf_graph *g, int op, const unsigned char *ng, wf_op_cost *c)
{
    memset(c, 0, sizeof *c);
    if (!op_ok(g, op))
        return;
    const wf_op *o = &g->ops[op];
    if (o->pass == WF_PASS_BACKWARD) {
        if (o->fwd_op >= 0 && o->fwd_op < g->nfwd &&
            g->ops[o->fwd_op].pass == WF_PASS_FORWARD) {
            /* A gradient op carries its forward op's backward costs. */
            wf_op_cost f;
            wf_op_cost_flags(g, o->fwd_op, ng, &f);
            c->bwd_in_flops = f.bwd_in_flops;
            c->bwd_w_flops = f.bwd_w_flops;
            c->bwd_bytes = f.bwd_bytes;
            c->params = f.params;
        } else if (o->nout >= 1 && o->out[0] >= 0) {
            /* Gradient accumulation: one add per element, two reads and a write. */
            c->bwd_in_flops = ne(g, o->out[0]);
            c->bwd_bytes = 3.0 * nb(g, o->out[0]);
        }
        return;
    }
    cost_forward(g, op, ng, c);
}

void wf_op_cost_of(const wf_graph *g, int op, wf_op_cost *c)
{
    memset(c, 0, sizeof *c);
    if (!op_ok(g, op) || g->ntensors == 0)
        return;
    unsigned char *ng = malloc((size_t)g->ntensors);
    if (!ng)
        return;
    int f = g->ops[op].pass == WF_PASS_BACKWARD ? g->ops[op].fwd_op : op;
    wf_graph_grad_flags(g, f < 0 ? 0 : f, ng);
    wf_op_cost_flags(g, op, ng, c);
    free(ng);
}

/* The share of an op's weights one token uses: K/E for the routed experts (a
 * grouped MLP fed by a dispatch of K of E experts), else 1. */
static double expert_share(const wf_graph *g, const wf_op *o)
{
    if (o->kind != WF_OP_GROUPED_MLP)
        return 1.0;
    int p = g->tensors[o->in[0]].producer;
    if (p < 0 || p >= g->nops || g->ops[p].kind != WF_OP_MOE_DISPATCH)
        return 1.0;
    moe_dims d = moe_of(g, &g->ops[p]);
    return d.E > 0 ? d.K / d.E : 1.0;
}

void wf_graph_block_totals_of(const wf_graph *g, int block, int layer, wf_graph_totals *t)
{
    memset(t, 0, sizeof *t);
    if (g->ntensors == 0)
        return;
    unsigned char *ng = malloc((size_t)g->ntensors);
    unsigned char *seen = calloc((size_t)g->ntensors, 1);
    if (!ng || !seen) {
        free(ng);
        free(seen);
        return;
    }
    wf_graph_grad_flags(g, g->nfwd, ng);
    for (int i = 0; i < g->nfwd && i < g->nops; i++) {
        const wf_op *o = &g->ops[i];
        if (!op_ok(g, i) || o->pass != WF_PASS_FORWARD)
            continue;
        if (block >= 0 && (o->block != block || o->layer != layer))
            continue;
        wf_op_cost c;
        wf_op_cost_flags(g, i, ng, &c);
        t->fwd_flops += c.fwd_flops;
        t->bwd_flops += c.bwd_in_flops + c.bwd_w_flops;
        t->fwd_bytes += c.fwd_bytes;
        double active = expert_share(g, o);
        for (int j = 0; j < o->nin; j++) {
            int p = o->in[j];
            if (is_param(g, p) && !(seen[p] & 1)) {
                seen[p] |= 1;
                t->params += ne(g, p);
                t->active_params += (j > 0 ? active : 1.0) * ne(g, p);
            }
        }
        wf_saved s[WF_MAX_SAVED];
        int ns = wf_op_saved_flags(g, i, ng, s);
        for (int k = 0; k < ns; k++) {
            if (s[k].tensor < 0) {
                t->saved_bytes += s[k].bytes; /* private to the op */
            } else if (!(seen[s[k].tensor] & 2)) {
                seen[s[k].tensor] |= 2;
                t->saved_bytes += s[k].bytes;
            }
        }
    }
    free(ng);
    free(seen);
}

void wf_graph_totals_of(const wf_graph *g, wf_graph_totals *t)
{
    wf_graph_block_totals_of(g, -1, -1, t);
}
