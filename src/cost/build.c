/* weft cost: turning a model's graph into the cost context's op records,
 * once per context. Transformers are built with one layer (embedding, the
 * block, the head) at micro-batch 1, and their ops are sorted into the
 * pre / layer / post sections with Megatron's tensor-parallel communication
 * points; other models keep their whole forward op list. Everything later is
 * arithmetic on these records. */
#include "cost/cost-impl.h"
#include "graph/graph-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double tensor_bytes(const wf_graph *g, int t) { return (double)wf_tensor_bytes(&g->tensors[t]); }
static double tensor_numel(const wf_graph *g, int t) { return (double)wf_tensor_numel(&g->tensors[t]); }

/* An attention op two ways (docs/cost-model.md, "Attention kinds").
 *
 * Unfused, as Megatron-LM's kernels run it: the graph's forward traffic
 * (baddbmm writes the scores; the fused scale-mask-softmax reads them and
 * writes the probabilities; dropout reads those and writes the dropped
 * probabilities and a 1-byte mask; the AV bmm reads them: 6 dt + 1 bytes per
 * score) and, backward, the kernels' own traffic: the AV bmm's gradient
 * writes dP (dt) and reads the dropped probabilities for dV (dt); dropout's
 * backward reads dP and the mask and writes its gradient (2 dt + 1); the
 * softmax backward reads that and the probabilities and writes the score
 * gradient (3 dt); the two QK^T gradient products read it (2 dt): 9 dt + 1
 * per score (7 dt without dropout) where the graph counts 4 dt + 1 (3 dt).
 *
 * Flash (FlashAttention-2 as Transformer Engine and PyTorch's SDPA run it):
 * reads q, k, v and writes the output and one fp32 log-sum-exp per row and
 * head forward; backward reads q, k, v, the output, its gradient and the
 * log-sum-exp and writes dq, dk, dv. It keeps no score matrix: backward
 * recomputes QK^T (2 S Skv D per head) and the softmax (5 per score) on top of
 * the unfused backward's products. A causal mask skips the key blocks above
 * the diagonal: with 128-wide blocks, (n + 1) / 2n of the work for n blocks
 * (the unfused kernels compute every score). Dropout is regenerated from the
 * RNG state, so no mask is kept either. */
static void fill_attention(const wf_graph *g, const wf_op *o, double qkv, wf_cost_op *r)
{
    const wf_tensor *q = &g->tensors[o->in[0]], *k = &g->tensors[o->in[1]];
    const double dt = (double)wf_dtype_bytes(q->dtype);
    const double B = (double)q->shape[0], S = (double)q->shape[1], Skv = (double)k->shape[1];
    const double A = o->attr.heads > 0 ? o->attr.heads : 1, D = (double)q->shape[2] / A;
    const double scores = B * A * S * Skv, p = o->attr.p;
    r->unf_bwd_extra = scores * (p > 0 ? 5.0 * dt : 4.0 * dt);
    double frac = 1.0;
    if (o->attr.causal) {
        double n = Skv / 128.0 < 1 ? 1 : Skv / 128.0;
        frac = (n + 1.0) / (2.0 * n);
    }
    double mm = 4.0 * scores * D, sm = 5.0 * scores + (p > 0 ? 2.0 * scores : 0);
    r->fl_fwd_flops = frac * (mm + sm);
    r->fl_bwd_flops = frac * (2.0 * (mm + sm) + 0.5 * mm + 5.0 * scores);
    double out = (double)wf_tensor_bytes(&g->tensors[o->out[0]]);
    double lse = B * A * S * 4.0;
    r->fl_fwd_bytes = qkv + out + lse;
    r->fl_bwd_bytes = 2.0 * qkv + 2.0 * out + lse;
    if (o->nin == 4) { /* a bias tile is read with each score tile; its gradient written back */
        double bb = (double)wf_tensor_bytes(&g->tensors[o->in[3]]);
        r->fl_fwd_flops += frac * scores;
        r->fl_bwd_flops += frac * scores;
        r->fl_fwd_bytes += bb;
        r->fl_bwd_bytes += 2.0 * bb;
    }
    r->fl_saved_scores = lse;
    r->kv_bytes = qkv - (double)wf_tensor_bytes(q);
    /* The graph keeps the probabilities, and with dropout its mask and the
     * dropped probabilities: a framework that regenerates the mask keeps the
     * probabilities alone. The weft runtime's kernel works on two S x Skv
     * fp32 blocks of one head at a time (wf_k_attention_ws_floats). */
    r->regen_bytes = p > 0 ? scores * (1.0 + dt) : 0;
    r->ws_bytes = 2.0 * S * Skv * 4.0;
    r->at_heads = B * A;
    r->at_s = S;
    r->at_skv = Skv;
    r->at_d = D;
    r->at_causal = o->attr.causal != 0;
}

wf_mb_kind wf_op_mb_kind(wf_op_kind kind)
{
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (kind) {
    case WF_OP_LAYERNORM:
    case WF_OP_BATCHNORM:
        return WF_MB_LAYERNORM;
    case WF_OP_RMSNORM:
        return WF_MB_RMSNORM;
    case WF_OP_GELU:
    case WF_OP_SILU:
    case WF_OP_RELU:
    case WF_OP_TANH:
    case WF_OP_SIGMOID:
    case WF_OP_HARDSWISH:
        return WF_MB_ACT;
    case WF_OP_CROSS_ENTROPY:
    case WF_OP_SOFTMAX:
        return WF_MB_LOSS;
    default:
        return WF_MB_ELEM;
    }
}

/* The shape of a matrix product (docs/cost-model.md, "Device model"): a
 * linear layer X[M, K] W[K, N]; a (batched) matmul A[.., M, K] B[.., K, N];
 * a convolution as its implicit GEMM (M = batch x output pixels, N = output
 * channels, K = input channels x kernel window). */
static void fill_shape(const wf_graph *g, const wf_op *o, wf_cost_op *r)
{
    const wf_tensor *y = &g->tensors[o->out[0]];
    double ny = (double)wf_tensor_numel(y);
    if (o->kind == WF_OP_LINEAR) {
        const wf_tensor *w = &g->tensors[o->in[1]];
        r->gk = (double)w->shape[0];
        r->gn = (double)w->shape[1];
        r->gbatch = 1;
    } else if (o->kind == WF_OP_MATMUL || o->kind == WF_OP_BATCH_MATMUL) {
        const wf_tensor *a = &g->tensors[o->in[0]];
        if (a->ndim < 2 || y->ndim < 2)
            return;
        double M = (double)(o->attr.trans_a ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2]);
        double K = (double)(o->attr.trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1]);
        double N = (double)y->shape[y->ndim - 1];
        r->gk = K;
        r->gn = N;
        r->gbatch = M > 0 && N > 0 ? ny / (M * N) : 0;
        r->gm = M;
        r->gsplit = o->tp == WF_TP_COL || o->tp == WF_TP_VOCAB ? 1 : o->tp == WF_TP_ROW ? 2 : 0;
        return;
    } else if (o->kind == WF_OP_CONV2D) {
        const wf_tensor *w = &g->tensors[o->in[1]];
        r->gn = (double)w->shape[0];
        r->gk = (double)(w->shape[1] * w->shape[2] * w->shape[3]);
        r->gbatch = 1;
    } else {
        return;
    }
    r->gm = r->gn > 0 ? ny / r->gn : 0;
    r->gsplit = o->tp == WF_TP_COL || o->tp == WF_TP_VOCAB ? 1 : o->tp == WF_TP_ROW ? 2 : 0;
}

_Static_assert(WF_MAX_SAVED <= (int)(sizeof ((wf_cost_op *)0)->saved_sz / sizeof(double)),
               "wf_cost_op.saved_sz holds every tensor an op saves");

/* The op producing tensor t, or NULL. */
static const wf_op *producer(const wf_graph *g, int t)
{
    int p = t >= 0 ? g->tensors[t].producer : -1;
    return p >= 0 ? &g->ops[p] : NULL;
}

/* Fills the parts of a cost op that do not depend on sections. `kept`
 * (one flag per graph tensor, or NULL) marks the tensors an earlier op of
 * the section saves: autograd keeps one reference to a tensor however many
 * ops save it (a SwiGLU's gate and up products both save their input), so
 * it is counted at its first saver only. */
static void fill_op(const wf_graph *g, int i, wf_cost_op *r, unsigned char *kept)
{
    const wf_op *o = &g->ops[i];
    wf_op_cost c;
    wf_op_cost_of(g, i, &c);
    memset(r, 0, sizeof *r);
    r->kind = (int)o->kind;
    snprintf(r->name, sizeof r->name, "%s", o->name);
    wf_saved sv[WF_MAX_SAVED];
    int ns = wf_op_saved(g, i, sv);
    unsigned char counted[WF_MAX_SAVED] = {0};
    for (int k = 0; k < ns; k++) {
        if (kept && sv[k].tensor >= 0) {
            if (kept[sv[k].tensor]) {
                c.saved_bytes -= sv[k].bytes;
                continue;
            }
            kept[sv[k].tensor] = 1;
        }
        counted[k] = 1;
        r->saved_sz[r->nsaved++] = sv[k].bytes;
    }
    if (c.saved_bytes < 0)
        c.saved_bytes = 0;
    if (o->kind == WF_OP_LAYERNORM || o->kind == WF_OP_RMSNORM)
        r->norm_elems = tensor_numel(g, o->in[0]);
    if (o->kind == WF_OP_MUL && o->nin == 2)
        for (int j = 0; j < 2; j++) {
            const wf_op *q = producer(g, o->in[j]);
            if (q && q->kind == WF_OP_SILU)
                for (int k = 0; k < ns; k++)
                    if (sv[k].tensor == o->in[j] && counted[k])
                        r->glu_act_bytes += sv[k].bytes;
        }
    if (o->kind == WF_OP_CROSS_ENTROPY)
        r->ce_logits = tensor_numel(g, o->in[0]);
    r->fpoint = -1;
    r->gpoint = -1;
    r->matrix = wf_op_is_matrix(o->kind);
    r->split = o->tp != WF_TP_NONE;
    r->attn_core = o->kind == WF_OP_ATTENTION;
    r->expert = o->kind == WF_OP_MOE_DISPATCH || o->kind == WF_OP_GROUPED_MLP || o->kind == WF_OP_MOE_COMBINE;
    if (o->kind == WF_OP_MOE_DISPATCH)
        r->a2a_bytes = (double)wf_tensor_bytes(&g->tensors[o->out[0]]);
    if (o->kind == WF_OP_GROUPED_MLP && o->nin >= 3) {
        const wf_tensor *x = &g->tensors[o->in[0]], *w1 = &g->tensors[o->in[1]], *w2 = &g->tensors[o->in[2]];
        if (x->ndim == 3 && w1->ndim == 3 && w2->ndim == 3) {
            r->moe_e = (double)x->shape[0];
            r->moe_c = (double)x->shape[1];
            r->moe_h = (double)x->shape[2];
            r->moe_g = (double)w1->shape[2];
            r->moe_f = (double)w2->shape[1];
        }
    }
    r->fwd_flops = c.fwd_flops;
    r->bwd_in_flops = c.bwd_in_flops;
    r->bwd_w_flops = c.bwd_w_flops;
    if (r->matrix)
        fill_shape(g, o, r);
    r->mb_kind = wf_op_mb_kind(o->kind);
    double pb = 0;
    for (int j = 0; j < o->nin; j++)
        if (g->tensors[o->in[j]].role == WF_ROLE_PARAM) {
            pb += tensor_bytes(g, o->in[j]);
            r->params += tensor_numel(g, o->in[j]);
        }
    /* The graph counts a weight read forward, and read plus its gradient
     * written backward; the rest of the traffic is activations. */
    double fpb = pb < c.fwd_bytes ? pb : c.fwd_bytes;
    double bpb = c.bwd_bytes > 0 ? (2 * pb < c.bwd_bytes ? 2 * pb : c.bwd_bytes) : 0;
    r->fwd_act_bytes = c.fwd_bytes - fpb;
    r->bwd_act_bytes = c.bwd_bytes - bpb;
    r->has_wgrad = c.bwd_bytes > 0 && pb > 0;
    if (pb > 0 && (o->kind == WF_OP_LINEAR || o->kind == WF_OP_MATMUL))
        for (int k = 0; k < ns; k++)
            if (sv[k].tensor == o->in[0] && counted[k]) {
                const wf_op *q = producer(g, o->in[0]);
                r->lin_in_bytes = sv[k].bytes;
                r->in_from_attn = q && q->kind == WF_OP_ATTENTION;
            }
    if (pb > 0 && r->matrix) {
        /* Under autocast a product casts an fp32 input (a norm's output)
         * itself; weft's fused qkv is two products in PyTorch scripts (wq,
         * wkv), each casting it (framework.c, wf_cost_eager_time). */
        const wf_op *q = producer(g, o->in[0]);
        while (q && (q->kind == WF_OP_RESHAPE || q->kind == WF_OP_FLATTEN)) /* the head's flatten */
            q = producer(g, q->in[0]);
        if (q && (q->kind == WF_OP_LAYERNORM || q->kind == WF_OP_RMSNORM)) {
            r->in_casts = 1;
            for (int j = i + 1; j < g->nfwd; j++)
                if (g->ops[j].kind == WF_OP_SPLIT && g->ops[j].in[0] == o->out[0])
                    r->in_casts = 2;
        }
    }
    for (int j = 0; j < o->nout; j++)
        r->out_bytes += tensor_bytes(g, o->out[j]);
    /* What the op keeps for backward, by how tensor parallelism divides it. */
    if (o->kind == WF_OP_ATTENTION) {
        double qkv = 0;
        for (int j = 0; j < 3; j++) /* q, k, v (a bias is not saved) */
            if (g->tensors[o->in[j]].role != WF_ROLE_PARAM)
                qkv += tensor_bytes(g, o->in[j]);
        r->saved_split = qkv < c.saved_bytes ? qkv : c.saved_bytes;
        r->saved_scores = c.saved_bytes - r->saved_split;
        fill_attention(g, o, qkv, r);
    } else if (r->expert) {
        /* Expert activations live with the tokens a rank holds. */
        r->saved_split = c.saved_bytes;
    } else if (o->tp == WF_TP_NONE || o->tp == WF_TP_COL ||
               (o->tp == WF_TP_VOCAB && (o->kind == WF_OP_LINEAR || o->kind == WF_OP_MATMUL ||
                                         o->kind == WF_OP_EMBEDDING))) {
        /* Norm inputs, dropout masks, and the replicated input of a
         * column-parallel (or vocabulary-parallel) product. */
        r->saved_repl = c.saved_bytes;
    } else {
        r->saved_split = c.saved_bytes;
    }
    if (o->kind == WF_OP_DROPOUT)
        r->regen_bytes = c.saved_bytes; /* the mask */
}

/* SwiGLU's parts: a product of silu(gate projection) and the up projection
 * (models/transformer.c, swiglu_mlp), so a fusing profile can cost them as
 * it runs them. */
static void mark_swiglu(const wf_graph *g, int n, const int *rec_of, wf_cost_op *ops)
{
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g->ops[i];
        if (o->kind != WF_OP_MUL || o->nin != 2 || rec_of[i] < 0)
            continue;
        int s = g->tensors[o->in[0]].producer, u = g->tensors[o->in[1]].producer;
        if (s < 0 || s >= n || u < 0 || u >= n || g->ops[s].kind != WF_OP_SILU || g->ops[u].kind != WF_OP_LINEAR)
            continue;
        int gl = g->tensors[g->ops[s].in[0]].producer;
        if (gl < 0 || gl >= n || g->ops[gl].kind != WF_OP_LINEAR || rec_of[s] < 0 || rec_of[u] < 0 || rec_of[gl] < 0)
            continue;
        ops[rec_of[s]].glu = 1;
        ops[rec_of[i]].glu = 2;
        ops[rec_of[gl]].glu = 3;
        ops[rec_of[u]].glu = 4;
    }
}

static int is_f_op(const wf_op *o)
{
    return o->tp == WF_TP_COL ||
           (o->tp == WF_TP_VOCAB && (o->kind == WF_OP_LINEAR || o->kind == WF_OP_MATMUL));
}

static int is_g_op(const wf_op *o)
{
    return o->tp == WF_TP_ROW || (o->tp == WF_TP_VOCAB && o->kind == WF_OP_EMBEDDING);
}

wf_status wf_cost_build_transformer(wf_cost_ctx *ctx)
{
    wf_model_config one = ctx->model;
    one.layers = 1;
    /* A mixture of experts is costed by its expert layer: the few leading
     * dense layers (DeepSeek-V3's 3 of 61) are costed as expert layers. */
    one.first_dense = 0;
    wf_graph g;
    wf_status st = wf_model_build(&one, 1, &g);
    if (st != WF_OK) {
        wf_graph_free(&g);
        return st;
    }
    int n = g.nfwd;
    ctx->ops = calloc((size_t)(n > 0 ? n : 1), sizeof *ctx->ops);
    ctx->pts = calloc((size_t)(2 * n + 1), sizeof *ctx->pts);
    int *pt_of = malloc(sizeof(int) * (size_t)(g.ntensors > 0 ? g.ntensors : 1));
    int *rec_of = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    unsigned char *seen = calloc((size_t)(g.ntensors > 0 ? g.ntensors : 1), 1);
    signed char *param_split = calloc((size_t)(g.ntensors > 0 ? g.ntensors : 1), 1);
    unsigned char *kept = calloc((size_t)(g.ntensors > 0 ? g.ntensors : 1), 1);
    unsigned char *cast = calloc((size_t)(g.ntensors > 0 ? g.ntensors : 1), 1);
    if (!ctx->ops || !ctx->pts || !pt_of || !seen || !param_split || !kept || !cast || !rec_of) {
        free(pt_of);
        free(rec_of);
        free(seen);
        free(param_split);
        free(kept);
        free(cast);
        wf_graph_free(&g);
        return wf_errorf(WF_NOMEM, "out of memory costing model '%s'", ctx->model.name);
    }
    for (int t = 0; t < g.ntensors; t++)
        pt_of[t] = -1;
    for (int i = 0; i < n; i++)
        rec_of[i] = -1;
    memset(ctx->sec, 0, sizeof ctx->sec);
    int sec = WF_COST_SEC_PRE, started = 0;
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g.ops[i];
        if (o->pass != WF_PASS_FORWARD)
            continue;
        int s = o->block >= 0 ? WF_COST_SEC_LAYER : (started ? WF_COST_SEC_POST : WF_COST_SEC_PRE);
        if (o->block >= 0)
            started = 1;
        if (s != sec) {
            /* Sections arrive in order pre, layer, post; points do not cross them. */
            sec = s;
            ctx->sec[s].op0 = ctx->nops;
            ctx->sec[s].pt0 = ctx->npts;
            for (int t = 0; t < g.ntensors; t++)
                pt_of[t] = -1;
            memset(kept, 0, (size_t)g.ntensors);
            if (s == WF_COST_SEC_LAYER)
                ctx->sec[s].input_bytes = tensor_bytes(&g, o->in[0]);
        }
        wf_cost_section *S = &ctx->sec[s];
        rec_of[i] = ctx->nops;
        wf_cost_op *r = &ctx->ops[ctx->nops++];
        S->nop++;
        fill_op(&g, i, r, kept);
        if (r->matrix)
            S->flops += r->fwd_flops + r->bwd_in_flops + r->bwd_w_flops;
        for (int j = 0; j < o->nin; j++) {
            int p = o->in[j];
            if (g.tensors[p].role != WF_ROLE_PARAM)
                continue;
            const double times = s == WF_COST_SEC_LAYER ? (double)ctx->model.layers : 1.0;
            if (r->matrix && !cast[p]) {
                /* autocast's 16-bit copy of a weight a product reads */
                cast[p] = 1;
                ctx->cast_params += times * tensor_numel(&g, p);
                ctx->cast_tensors += times * (tensor_numel(&g, p) * 2.0 > 1048576.0);
            }
            unsigned bit = s == WF_COST_SEC_PRE ? 1u : s == WF_COST_SEC_LAYER ? 2u : 4u;
            if (!(seen[p] & 7u)) {
                ctx->big_param_tensors += times * (tensor_numel(&g, p) * 4.0 > 1048576.0);
                ctx->param_tensors += times;
                ctx->param_elems += times * tensor_numel(&g, p);
            }
            if (seen[p] & bit)
                continue;
            seen[p] |= (unsigned char)bit;
            if (!(seen[p] & ~bit))
                param_split[p] = (signed char)r->split;
            if (r->expert)
                S->params_expert += tensor_numel(&g, p);
            else if (r->split)
                S->params_split += tensor_numel(&g, p);
            else
                S->params_repl += tensor_numel(&g, p);
        }
        if (is_f_op(o)) {
            int x = o->in[0];
            if (pt_of[x] < 0) {
                pt_of[x] = ctx->npts;
                ctx->pts[ctx->npts].is_f = 1;
                ctx->pts[ctx->npts].bytes = tensor_bytes(&g, x);
                ctx->npts++;
                S->npt++;
            }
            r->fpoint = pt_of[x];
        }
        if (is_g_op(o)) {
            r->gpoint = ctx->npts;
            ctx->pts[ctx->npts].is_f = 0;
            ctx->pts[ctx->npts].bytes = tensor_bytes(&g, o->out[0]);
            ctx->npts++;
            S->npt++;
        }
        if (o->kind == WF_OP_CROSS_ENTROPY) {
            if (o->tp == WF_TP_VOCAB) {
                r->ce_bytes = tensor_numel(&g, o->in[1]) * 4.0; /* fp32 per token */
                S->ce_bytes += r->ce_bytes;
            }
            ctx->logits_per_sample += tensor_numel(&g, o->in[0]);
            r->loss_logits = tensor_numel(&g, o->in[0]);
        }
    }
    mark_swiglu(&g, n, rec_of, ctx->ops);
    free(rec_of);
    /* Tied weights (the embedding reused by the head) live on both the first
     * and the last stage; with one stage they are one copy. */
    for (int t = 0; t < g.ntensors; t++)
        if ((seen[t] & 1) && (seen[t] & 4)) {
            if (param_split[t])
                ctx->shared_split += tensor_numel(&g, t);
            else
                ctx->shared_repl += tensor_numel(&g, t);
        }
    ctx->model_flops_per_sample = ctx->sec[WF_COST_SEC_PRE].flops +
                                  (double)ctx->model.layers * ctx->sec[WF_COST_SEC_LAYER].flops +
                                  ctx->sec[WF_COST_SEC_POST].flops;
    free(pt_of);
    free(seen);
    free(param_split);
    free(kept);
    free(cast);
    wf_graph_free(&g);
    if (ctx->sec[WF_COST_SEC_LAYER].nop == 0)
        return wf_errorf(WF_INTERNAL, "model '%s': no repeated layer found in its graph",
                         ctx->model.name);
    return WF_OK;
}

wf_status wf_cost_build_generic(wf_cost_ctx *ctx)
{
    wf_graph g;
    wf_status st = wf_model_build(&ctx->model, 1, &g);
    if (st != WF_OK) {
        wf_graph_free(&g);
        return st;
    }
    int n = g.nfwd;
    ctx->ops = calloc((size_t)(n > 0 ? n : 1), sizeof *ctx->ops);
    unsigned char *seen = calloc((size_t)(g.ntensors > 0 ? g.ntensors : 1), 1);
    if (!ctx->ops || !seen) {
        free(seen);
        wf_graph_free(&g);
        return wf_errorf(WF_NOMEM, "out of memory costing model '%s'", ctx->model.name);
    }
    double saved_sum = 0;
    for (int i = 0; i < n; i++) {
        const wf_op *o = &g.ops[i];
        if (o->pass != WF_PASS_FORWARD)
            continue;
        wf_cost_op *r = &ctx->ops[ctx->nops++];
        fill_op(&g, i, r, NULL);
        /* No tensor parallelism here: everything is per device as built. */
        r->split = 0;
        r->saved_repl += r->saved_split + r->saved_scores;
        r->saved_split = r->saved_scores = 0;
        saved_sum += r->saved_repl;
        /* Each parameter is held once, by the first op that reads it. */
        for (int j = 0; j < o->nin; j++) {
            int p = o->in[j];
            if (g.tensors[p].role == WF_ROLE_PARAM && !seen[p]) {
                seen[p] = 1;
                r->owned_params += tensor_numel(&g, p);
                ctx->big_param_tensors += tensor_numel(&g, p) * 4.0 > 1048576.0;
                ctx->param_tensors += 1;
                ctx->param_elems += tensor_numel(&g, p);
            }
            if (g.tensors[p].role == WF_ROLE_PARAM && r->matrix && !(seen[p] & 2)) {
                seen[p] |= 2; /* autocast's 16-bit copy of a weight a product reads */
                ctx->cast_params += tensor_numel(&g, p);
                ctx->cast_tensors += tensor_numel(&g, p) * 2.0 > 1048576.0;
            }
        }
        if (r->matrix)
            ctx->model_flops_per_sample += r->fwd_flops + r->bwd_in_flops + r->bwd_w_flops;
        ctx->sec[WF_COST_SEC_LAYER].params_repl += r->owned_params;
        if (o->kind == WF_OP_CROSS_ENTROPY)
            ctx->logits_per_sample += tensor_numel(&g, o->in[0]);
    }
    /* Block checkpoints: each run of ops of one block instance (an Evoformer
     * block, a Swin block), and each run of ops between blocks, starts a
     * segment; full recomputation keeps the activations a segment reads
     * from earlier ops (AlphaFold2 checkpoints every Evoformer block's MSA
     * and pair, as torch.utils.checkpoint around each block does). */
    int *stamp = calloc((size_t)(g.ntensors > 0 ? g.ntensors : 1), sizeof *stamp);
    if (!stamp) {
        free(seen);
        wf_graph_free(&g);
        return wf_errorf(WF_NOMEM, "out of memory costing model '%s'", ctx->model.name);
    }
    for (int j = 0; j < ctx->nops;) {
        int e = j + 1;
        while (e < ctx->nops && g.ops[e].block == g.ops[j].block && g.ops[e].layer == g.ops[j].layer)
            e++;
        ctx->ops[j].seg_start = 1;
        for (int i = j; i < e; i++)
            for (int k = 0; k < g.ops[i].nin; k++) {
                int t = g.ops[i].in[k];
                if (t >= 0 && g.tensors[t].producer >= 0 && g.tensors[t].producer < j && stamp[t] != j + 1) {
                    stamp[t] = j + 1;
                    ctx->ops[j].ckpt_bytes += (double)wf_tensor_bytes(&g.tensors[t]);
                }
            }
        j = e;
    }
    free(stamp);
    /* Tensors saved by two ops (a relu output that the next conv also keeps)
     * count once: scale the per-op sums by the graph's deduplicated total. */
    wf_graph_totals tot;
    wf_graph_totals_of(&g, &tot);
    ctx->saved_dedup = saved_sum > 0 ? tot.saved_bytes / saved_sum : 1.0;
    /* One section holds every op. */
    ctx->sec[WF_COST_SEC_LAYER].op0 = 0;
    ctx->sec[WF_COST_SEC_LAYER].nop = ctx->nops;
    ctx->sec[WF_COST_SEC_LAYER].flops = ctx->model_flops_per_sample;
    if (ctx->saved_dedup > 1)
        ctx->saved_dedup = 1;
    free(seen);
    wf_graph_free(&g);
    if (ctx->nops == 0)
        return wf_errorf(WF_INVAL, "model '%s' has no forward ops to cost", ctx->model.name);
    return WF_OK;
}
