/* The executor: one model replica on the CPU. It copies a forward graph,
 * appends its autodiff backward pass, plans memory and runs the ops one by one
 * on the fp32 kernels of kernels-impl.h (the fast path or, for tests, the
 * reference). It knows nothing of MPI, optimizers or data: the engines
 * (engine-impl.h) drive it, and the data-parallel engine (dist.c) hooks into
 * it. Its two modes live beside it (executor-impl.h): experts over ep ranks
 * (exec_experts.c, the replica engine's) and a rank's local graph of an
 * op-level plan (exec_spmd.c, the SPMD and pipeline engines'); pipeline
 * stages (wf_exec_create_stage, activation slots) are below.
 *
 * Storage, as in llm.c: every parameter lives in one block (each tensor
 * aligned to 16 floats), every parameter's final gradient in a second block
 * (whose layout a comm schedule may change, wf_exec_set_grad_layout); inputs,
 * labels, the loss and the loss's seed gradient in a small leaf block; and
 * everything else -- activations, partial and activation gradients, the state
 * a forward kernel saves for its backward -- in one arena whose offsets are
 * planned from the graph.
 *
 * The memory plan: time is the op index (forward ops, then backward ops). A
 * buffer lives from the op that writes it to the last op that reads it,
 * counting backward reads: a backward op reads the gradients of its forward
 * op's outputs and only those forward tensors its kernel needs (a linear's
 * input and weight, a relu's input, a softmax's output, nothing for an add or
 * a dropout; table need_fwd_in/need_fwd_out below). Reshape and flatten are
 * views: their output shares the input's buffer, whose life is the union.
 * Buffers are placed greedily, largest first, at the lowest offset that does
 * not overlap a placed buffer alive at the same time (first fit by size, the
 * TFLite/XLA heuristic); wf_exec_memory_of reports the arena against the sum
 * of all buffers.
 *
 * Parameter initialization (deterministic, a function of the seed, the
 * parameter's index and the element's index only): norm gains 1, biases and
 * norm shifts 0; in models with attention every matrix and table N(0, 0.02)
 * (GPT-2); otherwise weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's
 * default for linear and conv layers) and tables N(0, 0.02). */
#include "runtime/executor-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ----------------------------------------------------------------- */

static int64_t numel(const wf_tensor *t)
{
    return wf_tensor_numel(t);
}

static int64_t last_dim(const wf_tensor *t)
{
    return t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
}

static int is_int(wf_dtype d)
{
    return d == WF_DTYPE_INT32 || d == WF_DTYPE_INT64;
}

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

static int new_store(wf_exec *e, store_kind kind, size_t bytes, int def)
{
    if (wf_grow(&e->st, &e->cap_stores, (int64_t)e->nstores + 1, sizeof *e->st, 64) != 0)
        return -1;
    store *s = &e->st[e->nstores];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->bytes = bytes;
    s->param = -1;
    s->def = def;
    s->last = def;
    return e->nstores++;
}

static void use_store(wf_exec *e, int s, int when)
{
    if (s < 0)
        return;
    if (when > e->st[s].last)
        e->st[s].last = when;
    if (when < e->st[s].def)
        e->st[s].def = when;
}

/* Which forward tensors a backward kernel reads (besides the gradients of the
 * forward outputs and the saved state). */
static int need_fwd_in(wf_op_kind k, int i)
{
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (k) {
    case WF_OP_MATMUL:
    case WF_OP_BATCH_MATMUL:
    case WF_OP_MUL:
    case WF_OP_ATTENTION:
        return 1;
    case WF_OP_LINEAR:
    case WF_OP_LAYERNORM:
    case WF_OP_RMSNORM:
    case WF_OP_BATCHNORM:
    case WF_OP_CONV2D:
    case WF_OP_CROSS_ENTROPY:
    case WF_OP_EMBEDDING:
        return i <= 1; /* x and the weight (ids and table; logits and labels) */
    case WF_OP_RELU:
    case WF_OP_GELU:
    case WF_OP_SILU:
    case WF_OP_MAXPOOL:
    case WF_OP_CLIP:
    case WF_OP_HARDSWISH:
        return i == 0;
    case WF_OP_ROUTER: /* x, W (the probabilities are saved) */
    case WF_OP_GROUPED_MLP:
    case WF_OP_MOE_COMBINE:
        return 1;
    case WF_OP_MOE_DISPATCH:
        return i == 1; /* the expert ids */
    default:
        return 0;
    }
}

static int need_fwd_out(wf_op_kind k)
{
    return k == WF_OP_SOFTMAX || k == WF_OP_TANH || k == WF_OP_SIGMOID;
}

static int is_view(wf_op_kind k)
{
    return k == WF_OP_RESHAPE || k == WF_OP_FLATTEN;
}

/* ---- per-op geometry ----------------------------------------------------------------- */

static void attn_of(const wf_exec *e, const wf_op *op, wf_k_attn *at)
{
    const wf_tensor *q = &e->g.tensors[op->in[0]];
    memset(at, 0, sizeof *at);
    at->b = q->shape[0];
    at->s = q->shape[1];
    at->sk = e->g.tensors[op->in[1]].shape[1]; /* T5's cross-attention: the encoder's length */
    at->heads = op->attr.heads;
    at->kv_heads = op->attr.kv_heads > 0 ? op->attr.kv_heads : op->attr.heads;
    at->d = q->shape[2] / op->attr.heads;
    at->causal = op->attr.causal;
    at->scale = (float)op->attr.scale;
    at->p = (float)op->attr.p;
    at->seed = wf_k_seed_mix(op->attr.seed ^ e->seed, e->stream);
    at->offset = (uint64_t)e->first_sample * (uint64_t)(at->heads * at->s * at->sk);
    if (op->nin == 4) /* the caller points at->bias (and at->dbias) at the data */
        at->bias_b = e->g.tensors[op->in[3]].shape[0];
    int o = (int)(op - e->g.ops);
    if (e->has_sp && e->sp.has_view && o < e->g.nfwd && e->sp.has_view[o]) {
        /* A shard of the heads (and of the batch) of a global attention. */
        const wf_exec_view *v = &e->sp.view[o];
        at->heads_total = at->heads * (v->gshape[2] / q->shape[2]);
        at->head0 = v->start[2] / at->d;
        at->offset = ((uint64_t)e->first_sample + (uint64_t)v->start[0]) *
                     (uint64_t)(at->heads_total * at->s * at->sk);
    }
}

wf_status wf_k_conv_geom_of(const wf_graph *g, const wf_op *op, wf_k_conv_geom *c)
{
    const wf_tensor *x = &g->tensors[op->in[0]];
    memset(c, 0, sizeof *c);
    c->n = x->shape[0];
    c->c = x->shape[1];
    c->h = x->shape[2];
    c->w = x->shape[3];
    int pool = op->kind != WF_OP_CONV2D;
    if (!pool) {
        const wf_tensor *w = &g->tensors[op->in[1]];
        c->o = w->shape[0];
        c->kh = w->shape[2];
        c->kw = w->shape[3];
        c->sh = op->attr.stride[0] > 0 ? op->attr.stride[0] : 1;
        c->sw = op->attr.stride[1] > 0 ? op->attr.stride[1] : 1;
        c->groups = op->attr.groups > 0 ? op->attr.groups : 1;
    } else {
        c->o = c->c;
        c->kh = op->attr.kernel[0];
        c->kw = op->attr.kernel[1];
        c->sh = op->attr.stride[0] > 0 ? op->attr.stride[0] : c->kh;
        c->sw = op->attr.stride[1] > 0 ? op->attr.stride[1] : c->kw;
        c->groups = 1;
    }
    c->ph = op->attr.pad[0];
    c->pw = op->attr.pad[1];
    wf_status st = wf_k_conv_geom_check(c, pool);
    if (st == WF_OK && pool && op->attr.ceil_mode) {
        /* the kernels skip window cells past the input, as they do padding */
        c->ho = wf_pool_out(c->h, c->kh, c->sh, c->ph, 1);
        c->wo = wf_pool_out(c->w, c->kw, c->sw, c->pw, 1);
    }
    return st;
}

/* Normalized axis and the outer/inner extents of concat and split around it. */
static void axis_extents(const wf_tensor *t, int axis, int *ax, int64_t *outer, int64_t *inner)
{
    int a = axis < 0 ? axis + t->ndim : axis;
    int64_t o = 1, in = 1;
    for (int i = 0; i < a; i++)
        o *= t->shape[i];
    for (int i = a + 1; i < t->ndim; i++)
        in *= t->shape[i];
    *ax = a;
    *outer = o;
    *inner = in;
}

/* Floats of saved state a forward op keeps for its backward (0 for none). */
static size_t saved_floats(const wf_exec *e, const wf_op *op)
{
    const wf_tensor *x = &e->g.tensors[op->in[0]];
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (op->kind) {
    case WF_OP_LAYERNORM:
        return wf_k_layernorm_saved_floats(numel(x) / last_dim(x));
    case WF_OP_RMSNORM:
        return wf_k_rmsnorm_saved_floats(numel(x) / last_dim(x));
    case WF_OP_CROSS_ENTROPY:
        return wf_k_cross_entropy_saved_floats(numel(x) / last_dim(x));
    case WF_OP_BATCHNORM:
        return wf_k_batchnorm_saved_floats(x->shape[1]);
    case WF_OP_ATTENTION: {
        wf_k_attn at;
        attn_of(e, op, &at);
        return wf_k_attention_saved_floats(&at);
    }
    case WF_OP_ROUTER: /* the scores of every expert, per token */
        return (size_t)(numel(x) / last_dim(x) * e->g.tensors[op->in[1]].shape[1]);
    default:
        return 0;
    }
}

/* Checks what the kernels assume beyond the graph's shape rules and returns
 * the op's workspace need. */
static wf_status check_op(const wf_exec *e, int o, size_t *ws)
{
    const wf_op *op = &e->g.ops[o];
    const wf_tensor *T = e->g.tensors;
    *ws = 0;
    if (op->pass == WF_PASS_BACKWARD)
        return WF_OK;
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (op->kind) {
    case WF_OP_ATTENTION: {
        const wf_tensor *q = &T[op->in[0]], *k = &T[op->in[1]];
        if (q->ndim != 3 || k->ndim != 3 || (op->attr.causal && k->shape[1] != q->shape[1]))
            return wf_errorf(WF_INVAL,
                             "op '%s' (attention): the runtime needs q[B,S,A*D], k[B,Sk,Akv*D] and, when causal, "
                             "keys of the queries' length S",
                             op->name);
        wf_k_attn at;
        attn_of(e, op, &at);
        *ws = wf_k_attention_ws_floats(&at);
        return WF_OK;
    }
    case WF_OP_CROSS_ENTROPY: /* a vocabulary-split one reduces 3 floats per row (SPMD) */
        *ws = (size_t)(3 * (numel(&T[op->in[0]]) / last_dim(&T[op->in[0]])));
        return WF_OK;
    case WF_OP_BATCHNORM: /* a batch-split one reduces 2 floats per channel and the count (SPMD) */
        *ws = (size_t)(2 * T[op->in[0]].shape[1] + 1);
        return WF_OK;
    case WF_OP_CONV2D:
    case WF_OP_MAXPOOL:
    case WF_OP_AVGPOOL: {
        if (T[op->in[0]].ndim != 4)
            return wf_errorf(WF_INVAL, "op '%s' (%s): input must be [N,C,H,W]", op->name, wf_op_name(op->kind));
        wf_k_conv_geom c;
        wf_status st = wf_k_conv_geom_of(&e->g, op, &c);
        if (st != WF_OK)
            return wf_error_prefix(st, "op '%s'", op->name);
        if (op->kind == WF_OP_CONV2D)
            *ws = wf_k_conv2d_ws_floats(&c);
        return WF_OK;
    }
    case WF_OP_MATMUL:
        if (T[op->in[0]].ndim != 2 || T[op->in[1]].ndim != 2)
            return wf_errorf(WF_INVAL, "op '%s' (matmul): operands must be matrices", op->name);
        return WF_OK;
    case WF_OP_ROTARY:
        if (T[op->in[0]].ndim != 3)
            return wf_errorf(WF_INVAL, "op '%s' (rotary): input must be [B,S,A*D]", op->name);
        return WF_OK;
    case WF_OP_TRANSPOSE:
        if (T[op->in[0]].ndim > WF_K_MAX_DIMS)
            return wf_errorf(WF_INVAL, "op '%s' (transpose): too many dimensions", op->name);
        return WF_OK;
    case WF_OP_ROUTER: /* the logits' gradients of every token */
        *ws = (size_t)(numel(&T[op->in[0]]) / last_dim(&T[op->in[0]]) * T[op->in[1]].shape[1]);
        if (op->attr.top_k > 64)
            return wf_errorf(WF_INVAL, "op '%s' (router): top_k=%d, the runtime routes at most 64", op->name,
                             op->attr.top_k);
        return WF_OK;
    case WF_OP_MOE_DISPATCH:
    case WF_OP_MOE_COMBINE: {
        /* Slot table and per-expert counts, int32 in the workspace. */
        const wf_tensor *ids = &T[op->in[op->kind == WF_OP_MOE_DISPATCH ? 1 : 2]];
        const wf_tensor *rows = op->kind == WF_OP_MOE_DISPATCH ? &T[op->out[0]] : &T[op->in[0]];
        *ws = (size_t)(numel(ids) + rows->shape[0]);
        return WF_OK;
    }
    case WF_OP_GROUPED_MLP: {
        const wf_tensor *xx = &T[op->in[0]], *w2 = &T[op->in[2]];
        int64_t C = xx->shape[1], F = w2->shape[1], G = op->attr.act == WF_MOE_ACT_SWIGLU ? 2 * F : F;
        *ws = (size_t)(2 * (2 * C * G + 2 * C * F)); /* the reference's are doubles */
        return WF_OK;
    }
    case WF_OP_DROPOUT:
        if (numel(&T[op->in[0]]) % e->mbs != 0)
            return wf_errorf(WF_INVAL, "op '%s' (dropout): %lld elements are not a multiple of the batch %lld",
                             op->name, (long long)numel(&T[op->in[0]]), (long long)e->mbs);
        return WF_OK;
    default:
        return WF_OK;
    }
}

/* ---- parameter initialization --------------------------------------------------------- */

static float normal01(uint64_t seed, uint64_t j)
{
    /* Box-Muller on two independent uniforms; u1 in (0, 1]. */
    double u1 = 1.0 - (double)wf_k_rng_uniform(seed, 2 * j);
    double u2 = (double)wf_k_rng_uniform(seed, 2 * j + 1);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void init_param(wf_exec *e, int pi)
{
    wf_exec_param *p = &e->params[pi];
    const wf_op *op = p->first_fwd_op >= 0 ? &e->g.ops[p->first_fwd_op] : NULL;
    int slot = -1;
    for (int i = 0; op && i < op->nin; i++)
        if (op->in[i] == p->tensor) {
            slot = i;
            break;
        }
    /* A stage's parameter draws what the whole model's parameter of the
     * same tensor draws (its index there). */
    uint64_t index = e->init_index ? (uint64_t)e->init_index[p->tensor] : (uint64_t)pi;
    uint64_t seed = wf_k_seed_mix(e->seed, 0x1000003ull + index);
    enum { ZERO, ONE, NORMAL, UNIFORM } how = p->ndim >= 2 ? NORMAL : ZERO;
    double scale = 0.02;
    if (op) {
        _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
        switch (op->kind) {
        case WF_OP_LAYERNORM:
        case WF_OP_RMSNORM:
        case WF_OP_BATCHNORM:
            how = slot == 1 ? ONE : ZERO;
            break;
        case WF_OP_MUL:
            how = ONE;
            break;
        case WF_OP_LINEAR:
        case WF_OP_MATMUL:
        case WF_OP_CONV2D:
            if (p->ndim < 2)
                how = ZERO;
            else if (!e->transformer) {
                how = UNIFORM;
                int64_t fan_in;
                if (op->kind == WF_OP_CONV2D)
                    fan_in = p->numel / p->shape[0];
                else if (op->kind == WF_OP_LINEAR)
                    fan_in = p->shape[0];
                else /* matmul: the contracted dimension of this operand */
                    fan_in = slot == 0 ? (op->attr.trans_a ? p->shape[0] : p->shape[1])
                                       : (op->attr.trans_b ? p->shape[1] : p->shape[0]);
                scale = 1.0 / sqrt((double)(fan_in > 0 ? fan_in : 1));
            }
            break;
        default:
            break;
        }
    }
    for (int64_t j = 0; j < p->numel; j++) {
        float v = 0.0f;
        switch (how) {
        case ZERO:
            v = 0.0f;
            break;
        case ONE:
            v = 1.0f;
            break;
        case NORMAL:
            v = (float)scale * normal01(seed, (uint64_t)j);
            break;
        case UNIFORM:
            v = (float)(scale * (2.0 * (double)wf_k_rng_uniform(seed, (uint64_t)j) - 1.0));
            break;
        }
        p->data[j] = v;
    }
}

/* ---- creation --------------------------------------------------------------------------- */

static wf_status copy_graph(const wf_graph *src, wf_graph *dst)
{
    wf_graph_init(dst, src->name);
    dst->tensors = malloc((size_t)(src->ntensors > 0 ? src->ntensors : 1) * sizeof *dst->tensors);
    dst->ops = malloc((size_t)(src->nops > 0 ? src->nops : 1) * sizeof *dst->ops);
    if (!dst->tensors || !dst->ops)
        return wf_errorf(WF_NOMEM, "out of memory copying graph %s", src->name);
    memcpy(dst->tensors, src->tensors, (size_t)src->ntensors * sizeof *dst->tensors);
    memcpy(dst->ops, src->ops, (size_t)src->nops * sizeof *dst->ops);
    dst->ntensors = dst->cap_tensors = src->ntensors;
    dst->nops = dst->cap_ops = src->nops;
    dst->nfwd = src->nfwd;
    dst->loss = src->loss;
    dst->cur_block = src->cur_block;
    dst->cur_layer = src->cur_layer;
    dst->cur_tp = src->cur_tp;
    dst->status = src->status;
    if (dst->cap_tensors == 0)
        dst->cap_tensors = 1;
    if (dst->cap_ops == 0)
        dst->cap_ops = 1;
    return WF_OK;
}

/* Router, dispatch, grouped MLP and combine: planned and costed, not run. */
static wf_status check_graph(const wf_graph *g, int nouts)
{
    if (g->status != WF_OK)
        return wf_errorf(g->status, "graph %s failed to build", g->name);
    if (g->loss < 0 && nouts == 0)
        return wf_errorf(WF_INVAL, "graph %s has no loss to train", g->name);
    for (int t = 0; t < g->ntensors; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (is_int(x->dtype)) {
            /* The router's expert ids are the one integer activation. */
            int routed = x->producer >= 0 && g->ops[x->producer].kind == WF_OP_ROUTER;
            if (x->role != WF_ROLE_INPUT && x->role != WF_ROLE_LABEL && !routed)
                return wf_errorf(WF_INVAL, "tensor '%s': the runtime holds integer data only in inputs and labels",
                                 x->name);
        } else if (x->dtype != WF_DTYPE_FP32) {
            return wf_errorf(WF_INVAL,
                             "tensor '%s' is %s: the runtime computes in fp32 (add dtype=fp32 to the model spec)",
                             x->name, wf_dtype_name(x->dtype));
        }
    }
    return WF_OK;
}

/* Storage for every tensor; lifetimes from the op sequence. */
static wf_status assign_stores(wf_exec *e)
{
    wf_graph *g = &e->g;
    for (int t = 0; t < g->ntensors; t++)
        e->tstore[t] = -1;
    /* Leaves and parameter gradients first (fixed storage). */
    for (int t = 0; t < g->ntensors; t++) {
        const wf_tensor *x = &g->tensors[t];
        int s = -1;
        if (x->role == WF_ROLE_PARAM) {
            s = new_store(e, ST_PARAM, 0, 0);
            if (s >= 0)
                e->st[s].param = e->param_of_tensor[t];
        } else if (x->role == WF_ROLE_INPUT || x->role == WF_ROLE_LABEL || t == g->loss ||
                   (x->role == WF_ROLE_GRAD && x->producer < 0)) {
            /* Integers are held as int32 (4 bytes), floats as fp32. */
            s = new_store(e, ST_LEAF, (size_t)numel(x) * 4, 0);
        } else if (e->param_of_grad[t] >= 0) {
            s = new_store(e, ST_GRAD, 0, 0);
            if (s >= 0)
                e->st[s].param = e->param_of_grad[t];
        } else {
            continue;
        }
        if (s < 0)
            return wf_errorf(WF_NOMEM, "out of memory planning storage");
        e->tstore[t] = s;
    }
    /* Arena tensors in op order; views share their input's storage. */
    for (int o = 0; o < g->nops; o++) {
        const wf_op *op = &g->ops[o];
        for (int i = 0; i < op->nout; i++) {
            int t = op->out[i];
            if (t < 0 || e->tstore[t] >= 0)
                continue;
            int src = op->nin > 0 ? op->in[0] : -1;
            if (is_view(op->kind) && src >= 0 && e->tstore[src] >= 0 &&
                (e->st[e->tstore[src]].kind == ST_ARENA || op->pass == WF_PASS_FORWARD)) {
                e->tstore[t] = e->tstore[src];
                use_store(e, e->tstore[t], o);
                continue;
            }
            int s = new_store(e, ST_ARENA, round_up((size_t)numel(&g->tensors[t]) * sizeof(float), ALIGN_BYTES), o);
            if (s < 0)
                return wf_errorf(WF_NOMEM, "out of memory planning storage");
            e->tstore[t] = s;
        }
        if (op->pass == WF_PASS_FORWARD && e->bwd_of[o] >= 0) {
            size_t n = saved_floats(e, op);
            if (n > 0) {
                int s = new_store(e, ST_ARENA, round_up(n * sizeof(float), ALIGN_BYTES), o);
                if (s < 0)
                    return wf_errorf(WF_NOMEM, "out of memory planning storage");
                e->saved_store[o] = s;
                use_store(e, s, e->bwd_of[o]);
            }
        }
    }
    /* Reads. */
    for (int o = 0; o < g->nops; o++) {
        const wf_op *op = &g->ops[o];
        for (int i = 0; i < op->nin; i++)
            if (op->in[i] >= 0)
                use_store(e, e->tstore[op->in[i]], o);
        for (int i = 0; i < op->nout; i++)
            if (op->out[i] >= 0)
                use_store(e, e->tstore[op->out[i]], o);
        if (op->pass == WF_PASS_BACKWARD && op->fwd_op >= 0) {
            const wf_op *f = &g->ops[op->fwd_op];
            for (int i = 0; i < f->nin; i++)
                if (f->in[i] >= 0 && need_fwd_in(f->kind, i))
                    use_store(e, e->tstore[f->in[i]], o);
            if (need_fwd_out(f->kind))
                for (int i = 0; i < f->nout; i++)
                    if (f->out[i] >= 0)
                        use_store(e, e->tstore[f->out[i]], o);
        }
    }
    /* A stage's outputs are read after its forward, its inputs' gradients
     * after its backward. */
    for (int k = 0; k < e->nouts; k++)
        use_store(e, e->tstore[e->outs[k]], g->nfwd);
    for (int k = 0; k < e->nkept; k++)
        use_store(e, e->tstore[e->kept_t[k]], g->nfwd);
    for (int k = 0; k < e->nwrt; k++) {
        int gt = g->tensors[e->wrt[k]].grad;
        if (gt >= 0 && e->tstore[gt] >= 0)
            use_store(e, e->tstore[gt], g->nops - 1);
    }
    return WF_OK;
}

static int cmp_size_desc(const void *a, const void *b, const store *st)
{
    const store *x = &st[*(const int *)a], *y = &st[*(const int *)b];
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    if (x->def != y->def)
        return x->def < y->def ? -1 : 1;
    return *(const int *)a < *(const int *)b ? -1 : 1;
}

/* Greedy placement of the arena stores (see the top of the file): all of
 * them (which < 0), or those with kept == which into their own region. */
static wf_status place_stores(wf_exec *e, int which, size_t *bytes)
{
    int n = 0;
    int *idx = malloc((size_t)(e->nstores > 0 ? e->nstores : 1) * sizeof *idx);
    int *placed = malloc((size_t)(e->nstores > 0 ? e->nstores : 1) * sizeof *placed);
    if (!idx || !placed) {
        free(idx);
        free(placed);
        return wf_errorf(WF_NOMEM, "out of memory planning the arena");
    }
    e->unplanned_bytes = 0;
    for (int s = 0; s < e->nstores; s++)
        if (e->st[s].kind == ST_ARENA) {
            if (which < 0 || e->st[s].kept == which)
                idx[n++] = s;
            e->unplanned_bytes += e->st[s].bytes;
        }
    /* Insertion sort keeps this dependency-free and deterministic. */
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i - 1;
        while (j >= 0 && cmp_size_desc(&idx[j], &v, e->st) > 0) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
    size_t top = 0;
    int nplaced = 0;
    for (int i = 0; i < n; i++) {
        store *s = &e->st[idx[i]];
        /* Lowest offset clear of every placed store alive at the same time. */
        size_t off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int j = 0; j < nplaced; j++) {
                const store *p = &e->st[placed[j]];
                if (!(p->def <= s->last && s->def <= p->last))
                    continue;
                if (off < p->offset + p->bytes && p->offset < off + s->bytes) {
                    off = p->offset + p->bytes;
                    moved = 1;
                }
            }
        }
        s->offset = off;
        if (off + s->bytes > top)
            top = off + s->bytes;
        placed[nplaced++] = idx[i];
    }
    free(idx);
    free(placed);
    *bytes = top;
    return WF_OK;
}

static wf_status plan_arena(wf_exec *e)
{
    return place_stores(e, -1, &e->arena_bytes);
}

static void resolve_pointers(wf_exec *e)
{
    wf_graph *g = &e->g;
    for (int t = 0; t < g->ntensors; t++) {
        int s = e->tstore[t];
        void *p = NULL;
        if (s >= 0) {
            const store *x = &e->st[s];
            switch (x->kind) {
            case ST_ARENA:
                p = (x->kept ? e->keep : e->arena) + x->offset;
                break;
            case ST_LEAF:
                p = e->leaf + x->offset;
                break;
            case ST_PARAM:
                p = e->params[x->param].data;
                break;
            case ST_GRAD:
                p = e->params[x->param].grad;
                break;
            }
        }
        e->ptr[t] = p;
    }
    for (int o = 0; o < g->nops; o++) {
        const store *x = e->saved_store[o] >= 0 ? &e->st[e->saved_store[o]] : NULL;
        e->saved[o] = x ? (float *)((x->kept ? e->keep : e->arena) + x->offset) : NULL;
    }
}

/* Records a stage's outputs and differentiated inputs (validated against
 * the copied graph). */
static wf_status stage_setup(wf_exec *e, const wf_exec_stage *sg)
{
    const wf_graph *g = &e->g;
    e->outs = malloc((size_t)(sg->nouts + 1) * sizeof *e->outs);
    e->wrt = malloc((size_t)(sg->nwrt + 1) * sizeof *e->wrt);
    if (!e->outs || !e->wrt)
        return wf_errorf(WF_NOMEM, "out of memory creating a stage executor");
    for (int k = 0; k < sg->nouts; k++) {
        int t = sg->outs[k];
        if (t < 0 || t >= g->ntensors || g->tensors[t].producer < 0 || g->tensors[t].producer >= g->nfwd ||
            g->tensors[t].dtype != WF_DTYPE_FP32)
            return wf_errorf(WF_INVAL, "stage of graph %s: output %d is not an fp32 activation", g->name, t);
        e->outs[e->nouts++] = t;
    }
    for (int k = 0; k < sg->nwrt; k++) {
        int t = sg->wrt[k];
        if (t < 0 || t >= g->ntensors || g->tensors[t].role != WF_ROLE_INPUT || g->tensors[t].dtype != WF_DTYPE_FP32)
            return wf_errorf(WF_INVAL, "stage of graph %s: tensor %d is not an fp32 input", g->name, t);
        e->wrt[e->nwrt++] = t;
    }
    e->init_index = sg->init_index;
    return WF_OK;
}

static wf_status create(const wf_graph *src, const wf_exec_opts *o, const wf_exec_stage *sg, const int *keep, int nkeep,
                        wf_exec **out)
{
    *out = NULL;
    wf_status st = check_graph(src, sg ? sg->nouts : 0);
    if (st != WF_OK)
        return st;
    wf_exec *e = calloc(1, sizeof *e);
    if (!e)
        return wf_errorf(WF_NOMEM, "out of memory creating the executor");
    e->reference = o ? o->reference : 0;
    e->seed = o ? o->seed : 0;
    st = copy_graph(src, &e->g);
    if (st != WF_OK)
        goto fail;
    if (nkeep > 0) {
        e->kept_t = malloc((size_t)nkeep * sizeof *e->kept_t);
        if (!e->kept_t) {
            st = wf_errorf(WF_NOMEM, "out of memory creating the executor");
            goto fail;
        }
        for (int k = 0; k < nkeep; k++) {
            int t = keep[k];
            if (t < 0 || t >= e->g.ntensors || e->g.tensors[t].producer < 0 ||
                e->g.tensors[t].producer >= e->g.nfwd || e->g.tensors[t].dtype != WF_DTYPE_FP32) {
                st = wf_errorf(WF_INVAL, "graph %s: kept tensor %d is not an fp32 activation", e->g.name, t);
                goto fail;
            }
            e->kept_t[e->nkept++] = t;
        }
    }
    if (sg && (st = stage_setup(e, sg)) != WF_OK)
        goto fail;
    if (e->g.nops == e->g.nfwd) {
        st = e->nouts > 0 || e->nwrt > 0 ? wf_graph_autodiff_outputs(&e->g, e->outs, e->nouts, e->wrt, e->nwrt)
                          : wf_graph_autodiff(&e->g);
        if (st != WF_OK)
            goto fail;
    }
    wf_graph *g = &e->g;
    int nt = g->ntensors, no = g->nops;
    e->tstore = malloc((size_t)nt * sizeof *e->tstore);
    e->param_of_tensor = malloc((size_t)nt * sizeof *e->param_of_tensor);
    e->param_of_grad = malloc((size_t)nt * sizeof *e->param_of_grad);
    e->ptr = calloc((size_t)nt, sizeof *e->ptr);
    e->saved_store = malloc((size_t)no * sizeof *e->saved_store);
    e->bwd_of = malloc((size_t)no * sizeof *e->bwd_of);
    e->saved = calloc((size_t)no, sizeof *e->saved);
    if (!e->tstore || !e->param_of_tensor || !e->param_of_grad || !e->ptr || !e->saved_store || !e->bwd_of ||
        !e->saved) {
        st = wf_errorf(WF_NOMEM, "out of memory creating the executor");
        goto fail;
    }
    for (int i = 0; i < no; i++) {
        e->saved_store[i] = -1;
        e->bwd_of[i] = -1;
    }
    for (int i = 0; i < no; i++)
        if (g->ops[i].pass == WF_PASS_BACKWARD && g->ops[i].fwd_op >= 0)
            e->bwd_of[g->ops[i].fwd_op] = i;

    /* The batch: axis 0 of the data input (the one named ids, else the first). */
    e->mbs = 0;
    for (int t = 0; t < nt; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (x->role == WF_ROLE_INPUT && x->ndim >= 1 && (e->mbs == 0 || strcmp(x->name, "ids") == 0))
            e->mbs = x->shape[0];
    }
    if (e->mbs < 1) {
        st = wf_errorf(WF_INVAL, "graph %s has no input tensor with a batch axis", g->name);
        goto fail;
    }
    for (int i = 0; i < g->nfwd; i++)
        if (g->ops[i].kind == WF_OP_ATTENTION)
            e->transformer = 1;
    if (sg && sg->transformer >= 0)
        e->transformer = sg->transformer;

    /* Parameters, one block. */
    for (int t = 0; t < nt; t++) {
        e->param_of_tensor[t] = -1;
        e->param_of_grad[t] = -1;
        if (g->tensors[t].role == WF_ROLE_PARAM)
            e->nparams++;
    }
    e->params = calloc((size_t)(e->nparams > 0 ? e->nparams : 1), sizeof *e->params);
    if (!e->params) {
        st = wf_errorf(WF_NOMEM, "out of memory creating the executor");
        goto fail;
    }
    int pi = 0;
    int64_t off = 0;
    for (int t = 0; t < nt; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (x->role != WF_ROLE_PARAM)
            continue;
        wf_exec_param *p = &e->params[pi];
        p->name = x->name;
        p->tensor = t;
        p->ndim = x->ndim;
        memcpy(p->shape, x->shape, sizeof p->shape);
        p->numel = numel(x);
        p->decay = x->ndim >= 2;
        p->first_fwd_op = -1;
        p->grad_op = -1;
        p->offset = off;
        p->grad_offset = off;
        off += (int64_t)round_up((size_t)p->numel, ALIGN_FLOATS);
        e->param_of_tensor[t] = pi;
        if (x->grad >= 0) {
            p->has_grad = 1;
            e->param_of_grad[x->grad] = pi;
            p->grad_op = g->tensors[x->grad].producer;
        }
        pi++;
    }
    for (int i = g->nfwd - 1; i >= 0; i--)
        for (int j = 0; j < g->ops[i].nin; j++) {
            int t = g->ops[i].in[j];
            if (t >= 0 && e->param_of_tensor[t] >= 0)
                e->params[e->param_of_tensor[t]].first_fwd_op = i;
        }
    e->pfloats = off;
    e->gfloats = off;
    e->pblock = calloc((size_t)(off > 0 ? off : 1), sizeof(float));
    e->gblock = calloc((size_t)(off > 0 ? off : 1), sizeof(float));
    if (!e->pblock || !e->gblock) {
        st = wf_errorf(WF_NOMEM, "out of memory allocating %lld parameters", (long long)off);
        goto fail;
    }
    for (int i = 0; i < e->nparams; i++) {
        e->params[i].data = e->pblock + e->params[i].offset;
        e->params[i].grad = e->gblock + e->params[i].grad_offset;
    }

    /* Kernel checks and workspace. */
    for (int i = 0; i < no; i++) {
        size_t ws = 0;
        st = check_op(e, i, &ws);
        if (st != WF_OK)
            goto fail;
        if (ws > e->ws_floats)
            e->ws_floats = ws;
    }
    /* Accumulation buffer: the parameter gradients one backward op writes. */
    for (int i = g->nfwd; i < no; i++) {
        size_t n = 0;
        for (int j = 0; j < g->ops[i].nout; j++) {
            int t = g->ops[i].out[j];
            if (t >= 0 && e->param_of_grad[t] >= 0)
                n += round_up((size_t)numel(&g->tensors[t]), ALIGN_FLOATS);
        }
        if (n > e->acc_floats)
            e->acc_floats = n;
    }

    st = assign_stores(e);
    if (st != WF_OK)
        goto fail;
    st = plan_arena(e);
    if (st != WF_OK)
        goto fail;
    size_t leaf = 0;
    for (int s = 0; s < e->nstores; s++)
        if (e->st[s].kind == ST_LEAF) {
            e->st[s].offset = leaf;
            leaf += round_up(e->st[s].bytes, ALIGN_BYTES);
        }
    e->leaf_bytes = leaf;
    /* Sized before allocated: a batch too large for the machine is refused
     * in one line (the caller names the batch), not an allocator failure. */
    if ((st = wf_mem_check((double)e->arena_bytes + (double)leaf + 4.0 * ((double)e->ws_floats + (double)e->acc_floats),
                           "the activations of one micro-batch")) != WF_OK)
        goto fail;
    e->arena = aligned_alloc(ALIGN_BYTES, e->arena_bytes > 0 ? e->arena_bytes : ALIGN_BYTES);
    e->leaf = calloc(leaf > 0 ? leaf : 1, 1);
    e->ws = malloc((e->ws_floats > 0 ? e->ws_floats : 1) * sizeof(float));
    e->acc = malloc((e->acc_floats > 0 ? e->acc_floats : 1) * sizeof(float));
    if (!e->arena || !e->leaf || !e->ws || !e->acc) {
        st = wf_errorf(WF_NOMEM, "out of memory allocating %zu bytes of activations", e->arena_bytes);
        goto fail;
    }
    memset(e->arena, 0, e->arena_bytes);
    resolve_pointers(e);
    /* The loss's seed gradient is 1. */
    for (int t = 0; t < nt; t++)
        if (g->tensors[t].role == WF_ROLE_GRAD && g->tensors[t].producer < 0 && e->ptr[t])
            *(float *)e->ptr[t] = 1.0f;
    for (int i = 0; i < e->nparams; i++)
        init_param(e, i);
    e->init_index = NULL;
    e->own_arena = e->arena;
    e->own_leaf = e->leaf;
    *out = e;
    return WF_OK;
fail:
    wf_exec_free(e);
    return st;
}

wf_status wf_exec_create(const wf_graph *src, const wf_exec_opts *o, wf_exec **out)
{
    return create(src, o, NULL, NULL, 0, out);
}

wf_status wf_exec_create_keeping(const wf_graph *src, const wf_exec_opts *o, const int *keep, int nkeep,
                                 wf_exec **out)
{
    *out = NULL;
    if (nkeep < 0 || (nkeep > 0 && !keep))
        return wf_errorf(WF_INVAL, "graph %s: bad list of kept tensors", src->name);
    return create(src, o, NULL, keep, nkeep, out);
}

wf_status wf_exec_create_stage(const wf_graph *src, const wf_exec_opts *o, const wf_exec_stage *sg, wf_exec **out)
{
    *out = NULL;
    if (!sg || sg->nouts < 0 || sg->nwrt < 0 || (sg->nouts > 0 && !sg->outs) || (sg->nwrt > 0 && !sg->wrt))
        return wf_errorf(WF_INVAL, "stage of graph %s: bad outputs or inputs", src->name);
    if (sg->nouts > 0 && src->loss >= 0)
        return wf_errorf(WF_INVAL, "stage of graph %s: a stage ends at its outputs or at the loss, not both",
                         src->name);
    return create(src, o, sg, NULL, 0, out);
}

wf_status wf_exec_create_stage_keeping(const wf_graph *src, const wf_exec_opts *o, const wf_exec_stage *sg,
                                       const int *keep, int nkeep, wf_exec **out)
{
    *out = NULL;
    if (nkeep < 0 || (nkeep > 0 && !keep))
        return wf_errorf(WF_INVAL, "graph %s: bad list of kept tensors", src->name);
    if (nkeep == 0)
        return wf_exec_create_stage(src, o, sg, out);
    if (!sg || sg->nouts < 0 || sg->nwrt < 0 || (sg->nouts > 0 && !sg->outs) || (sg->nwrt > 0 && !sg->wrt))
        return wf_errorf(WF_INVAL, "stage of graph %s: bad outputs or inputs", src->name);
    if (sg->nouts > 0 && src->loss >= 0)
        return wf_errorf(WF_INVAL, "stage of graph %s: a stage ends at its outputs or at the loss, not both",
                         src->name);
    return create(src, o, sg, keep, nkeep, out);
}

void wf_exec_free(wf_exec *e)
{
    if (!e)
        return;
    if (e->own_arena) {
        e->arena = e->own_arena;
        e->leaf = e->own_leaf;
    }
    free(e->outs);
    free(e->kept_t);
    free(e->wrt);
    for (int k = 0; e->slots && k < 2 * e->nslots; k++)
        if (k != 1)
            free(e->slots[k]);
    free(e->slots);
    wf_graph_free(&e->g);
    free(e->st);
    free(e->tstore);
    free(e->saved_store);
    free(e->bwd_of);
    free(e->ptr);
    free(e->saved);
    if (!e->arena_shared)
        free(e->arena);
    free(e->leaf);
    free(e->pblock);
    free(e->gblock);
    if (!e->scratch_shared) {
        free(e->ws);
        free(e->acc);
    }
    free(e->exbuf);
    free(e->params);
    free(e->param_of_tensor);
    free(e->param_of_grad);
    free(e);
}

/* ---- pipeline stages ------------------------------------------------------------------------ */

float *wf_exec_output(wf_exec *e, int k)
{
    return k >= 0 && k < e->nouts ? e->ptr[e->outs[k]] : NULL;
}

float *wf_exec_output_grad(wf_exec *e, int k)
{
    if (k < 0 || k >= e->nouts)
        return NULL;
    /* The seed autodiff gave the output (a gradient tensor no op makes):
     * an output the stage also reads itself has as its final gradient the
     * sum of the seed and the stage's own partials, which the backward
     * computes (writing the received gradient there would lose it). */
    const int out = e->outs[k];
    for (int t = 0; t < e->g.ntensors; t++) {
        const wf_tensor *x = &e->g.tensors[t];
        if (x->role == WF_ROLE_GRAD && x->grad_of == out && x->producer < 0)
            return e->ptr[t];
    }
    return NULL;
}

float *wf_exec_input_grad(wf_exec *e, int k)
{
    if (k < 0 || k >= e->nwrt)
        return NULL;
    int gt = e->g.tensors[e->wrt[k]].grad;
    return gt >= 0 ? e->ptr[gt] : NULL;
}

wf_status wf_exec_set_slots(wf_exec *e, int n)
{
    if (n < 1 || e->nslots > 0)
        return wf_errorf(WF_INVAL, "activation slots: %d slots (at least 1, set once)", n);
    if (n == 1)
        return WF_OK;
    /* What a micro-batch keeps from its forward to its backward (alive across
     * the boundary op nfwd), the stage's outputs until their send completes
     * and its input gradients until theirs: one kept block per slot. The
     * rest (forward temporaries, backward scratch) shares the arena. */
    const wf_graph *g = &e->g;
    for (int s = 0; s < e->nstores; s++)
        e->st[s].kept = e->st[s].kind == ST_ARENA && e->st[s].def < g->nfwd && e->st[s].last >= g->nfwd;
    for (int k = 0; k < e->nwrt; k++) {
        int gt = g->tensors[e->wrt[k]].grad;
        if (gt >= 0 && e->tstore[gt] >= 0 && e->st[e->tstore[gt]].kind == ST_ARENA)
            e->st[e->tstore[gt]].kept = 1;
    }
    size_t work = 0, keep = 0, unplanned = e->unplanned_bytes;
    wf_status st = place_stores(e, 0, &work);
    if (st == WF_OK)
        st = place_stores(e, 1, &keep);
    e->unplanned_bytes = unplanned;
    if (st != WF_OK)
        return st;
    e->slots = calloc((size_t)2 * (size_t)n, sizeof *e->slots);
    char *arena = aligned_alloc(ALIGN_BYTES, work > 0 ? round_up(work, ALIGN_BYTES) : ALIGN_BYTES);
    if (!e->slots || !arena) {
        free(arena);
        return wf_errorf(WF_NOMEM, "out of memory for %d activation slots", n);
    }
    memset(arena, 0, work);
    free(e->own_arena);
    e->own_arena = e->arena = arena;
    e->arena_bytes = work;
    e->keep_bytes = keep;
    e->nslots = n;
    e->slots[1] = e->own_leaf;
    for (int k = 0; k < n; k++) {
        /* A slot's leaf block starts as the executor's own: the loss seed 1. */
        e->slots[2 * k] = aligned_alloc(ALIGN_BYTES, keep > 0 ? round_up(keep, ALIGN_BYTES) : ALIGN_BYTES);
        if (k > 0)
            e->slots[2 * k + 1] = malloc(e->leaf_bytes > 0 ? e->leaf_bytes : 1);
        if (!e->slots[2 * k] || !e->slots[2 * k + 1])
            return wf_errorf(WF_NOMEM, "out of memory for %d activation slots of %zu bytes", n, keep);
        memset(e->slots[2 * k], 0, keep);
        if (k > 0)
            memcpy(e->slots[2 * k + 1], e->own_leaf, e->leaf_bytes);
    }
    wf_exec_use_slot(e, 0);
    return WF_OK;
}

void wf_exec_use_slot(wf_exec *e, int k)
{
    if (e->nslots < 2)
        return;
    if (k < 0 || k >= e->nslots)
        k = 0;
    e->keep = e->slots[2 * k];
    e->leaf = e->slots[2 * k + 1];
    resolve_pointers(e);
}

/* Grows *buf (owned, *have units of `unit` bytes) to `need` units. */
static wf_status grow(void **buf, size_t *have, size_t need, size_t unit, size_t align)
{
    if (need <= *have)
        return WF_OK;
    void *b = align ? aligned_alloc(align, round_up(need * unit, align)) : malloc(need * unit);
    if (!b)
        return wf_errorf(WF_NOMEM, "out of memory for %zu bytes of shared scratch", need * unit);
    memset(b, 0, need * unit);
    free(*buf);
    *buf = b;
    *have = need;
    return WF_OK;
}

wf_status wf_exec_share_scratch(wf_exec *e, wf_exec *with)
{
    if (e == with || e->scratch_shared || with->scratch_shared || with->arena_shared)
        return wf_errorf(WF_INVAL, "shared scratch: an executor shares with one owner, once");
    void *ws = with->ws, *acc = with->acc;
    wf_status st = grow(&ws, &with->ws_floats, e->ws_floats, sizeof(float), 0);
    with->ws = ws;
    if (st == WF_OK)
        st = grow(&acc, &with->acc_floats, e->acc_floats, sizeof(float), 0);
    with->acc = acc;
    if (st != WF_OK)
        return st;
    free(e->ws);
    free(e->acc);
    e->ws = with->ws;
    e->acc = with->acc;
    e->scratch_shared = 1;
    /* The work arena holds nothing from one pass to the next only when the
     * kept tensors have their own blocks (two slots or more on both). */
    if (e->nslots > 1 && with->nslots > 1) {
        void *a = with->arena;
        size_t have = with->arena_bytes;
        if ((st = grow(&a, &have, e->arena_bytes, 1, ALIGN_BYTES)) != WF_OK)
            return st;
        with->own_arena = with->arena = a;
        with->arena_bytes = have;
        free(e->arena);
        e->own_arena = e->arena = with->arena;
        e->arena_shared = 1;
        resolve_pointers(with);
    }
    resolve_pointers(e);
    return WF_OK;
}

size_t wf_exec_slot_bytes(const wf_exec *e)
{
    return (e->nslots > 1 ? e->keep_bytes : e->arena_bytes) + e->leaf_bytes;
}

/* ---- accessors -------------------------------------------------------------------------- */

const wf_graph *wf_exec_graph(const wf_exec *e)
{
    return &e->g;
}

int64_t wf_exec_batch(const wf_exec *e)
{
    return e->mbs;
}

int wf_exec_nparams(const wf_exec *e)
{
    return e->nparams;
}

const wf_exec_param *wf_exec_param_at(const wf_exec *e, int i)
{
    return i >= 0 && i < e->nparams ? &e->params[i] : NULL;
}

int wf_exec_param_of_tensor(const wf_exec *e, int t)
{
    return t >= 0 && t < e->g.ntensors ? e->param_of_tensor[t] : -1;
}

int wf_exec_param_of_grad(const wf_exec *e, int t)
{
    return t >= 0 && t < e->g.ntensors ? e->param_of_grad[t] : -1;
}

float *wf_exec_param_block(const wf_exec *e, int64_t *nfloats)
{
    if (nfloats)
        *nfloats = e->pfloats;
    return e->pblock;
}

float *wf_exec_grad_block(const wf_exec *e, int64_t *nfloats)
{
    if (nfloats)
        *nfloats = e->gfloats;
    return e->gblock;
}

wf_status wf_exec_set_grad_layout(wf_exec *e, const int64_t *grad_off, int64_t total)
{
    /* Check bounds and that no two ranges overlap (sort by offset). */
    int n = e->nparams;
    int *ord = malloc((size_t)(n > 0 ? n : 1) * sizeof *ord);
    if (!ord)
        return wf_errorf(WF_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        ord[i] = i;
        if (grad_off[i] < 0 || grad_off[i] + e->params[i].numel > total) {
            free(ord);
            return wf_errorf(WF_INVAL, "gradient layout: parameter %s at %lld does not fit %lld floats",
                             e->params[i].name, (long long)grad_off[i], (long long)total);
        }
    }
    for (int i = 1; i < n; i++) {
        int v = ord[i], j = i - 1;
        while (j >= 0 && grad_off[ord[j]] > grad_off[v]) {
            ord[j + 1] = ord[j];
            j--;
        }
        ord[j + 1] = v;
    }
    for (int i = 1; i < n; i++) {
        int a = ord[i - 1], b = ord[i];
        if (grad_off[a] + e->params[a].numel > grad_off[b]) {
            free(ord);
            return wf_errorf(WF_INVAL, "gradient layout: parameters %s and %s overlap", e->params[a].name,
                             e->params[b].name);
        }
    }
    free(ord);
    float *nb = calloc((size_t)(total > 0 ? total : 1), sizeof(float));
    if (!nb)
        return wf_errorf(WF_NOMEM, "out of memory allocating %lld gradient floats", (long long)total);
    for (int i = 0; i < n; i++) {
        memcpy(nb + grad_off[i], e->params[i].grad, (size_t)e->params[i].numel * sizeof(float));
        e->params[i].grad_offset = grad_off[i];
        e->params[i].grad = nb + grad_off[i];
    }
    free(e->gblock);
    e->gblock = nb;
    e->gfloats = total;
    resolve_pointers(e);
    return WF_OK;
}

wf_status wf_exec_set_param_layout(wf_exec *e, const int64_t *off, int64_t total)
{
    /* Bounds only: the caller (dist.c) passes the offsets it gave
     * wf_exec_set_grad_layout, which checked them for overlap. */
    int n = e->nparams;
    for (int i = 0; i < n; i++)
        if (off[i] < 0 || off[i] + e->params[i].numel > total)
            return wf_errorf(WF_INVAL, "parameter layout: %s at %lld does not fit %lld floats", e->params[i].name,
                             (long long)off[i], (long long)total);
    float *nb = calloc((size_t)(total > 0 ? total : 1), sizeof(float));
    if (!nb)
        return wf_errorf(WF_NOMEM, "out of memory allocating %lld parameter floats", (long long)total);
    for (int i = 0; i < n; i++) {
        if (e->params[i].data)
            memcpy(nb + off[i], e->params[i].data, (size_t)e->params[i].numel * sizeof(float));
        e->params[i].offset = off[i];
        e->params[i].data = nb + off[i];
    }
    free(e->pblock);
    e->pblock = nb;
    e->pfloats = total;
    resolve_pointers(e);
    return WF_OK;
}

void wf_exec_bind_param(wf_exec *e, int i, float *data)
{
    if (i < 0 || i >= e->nparams)
        return;
    e->params[i].data = data;
    for (int t = 0; t < e->g.ntensors; t++) {
        int s = e->tstore[t];
        if (s >= 0 && e->st[s].kind == ST_PARAM && e->st[s].param == i)
            e->ptr[t] = data;
    }
}

void wf_exec_release_params(wf_exec *e)
{
    for (int i = 0; i < e->nparams; i++)
        wf_exec_bind_param(e, i, NULL);
    free(e->pblock);
    e->pblock = NULL;
    e->pfloats = 0;
}

int wf_exec_op_params(const wf_exec *e, int o, int *out, int cap)
{
    int n = 0;
    if (o < 0 || o >= e->g.nops)
        return 0;
    const wf_op *ops[2] = {&e->g.ops[o], e->g.ops[o].fwd_op >= 0 ? &e->g.ops[e->g.ops[o].fwd_op] : NULL};
    for (int k = 0; k < 2; k++)
        for (int j = 0; ops[k] && j < ops[k]->nin; j++) {
            int t = ops[k]->in[j], s = t >= 0 ? e->tstore[t] : -1;
            if (s < 0 || e->st[s].kind != ST_PARAM)
                continue;
            int pi = e->st[s].param, seen = 0;
            for (int q = 0; q < n && q < cap; q++)
                seen |= out[q] == pi;
            if (!seen) {
                if (n < cap)
                    out[n] = pi;
                n++;
            }
        }
    return n;
}

void wf_exec_zero_grads(wf_exec *e)
{
    memset(e->gblock, 0, (size_t)e->gfloats * sizeof(float));
}

int wf_exec_find_tensor(const wf_exec *e, const char *name)
{
    for (int t = 0; t < e->g.ntensors; t++)
        if (strcmp(e->g.tensors[t].name, name) == 0)
            return t;
    return -1;
}

void *wf_exec_leaf_data(wf_exec *e, int t)
{
    if (t < 0 || t >= e->g.ntensors || e->tstore[t] < 0)
        return NULL;
    store_kind k = e->st[e->tstore[t]].kind;
    return k == ST_LEAF || k == ST_PARAM ? e->ptr[t] : NULL;
}

const float *wf_exec_kept_data(wf_exec *e, int t)
{
    for (int k = 0; k < e->nkept; k++)
        if (e->kept_t[k] == t)
            return F(t);
    return NULL;
}

void wf_exec_set_stream(wf_exec *e, uint64_t stream, int64_t first_sample)
{
    e->stream = stream;
    e->first_sample = first_sample;
}

void wf_exec_set_hooks(wf_exec *e, const wf_exec_hooks *h)
{
    if (h) {
        e->hooks = *h;
        e->has_hooks = 1;
    } else {
        memset(&e->hooks, 0, sizeof e->hooks);
        e->has_hooks = 0;
    }
}

void wf_exec_memory_of(const wf_exec *e, wf_exec_memory *m)
{
    m->param_bytes = (size_t)e->pfloats * sizeof(float);
    m->grad_bytes = (size_t)e->gfloats * sizeof(float);
    m->leaf_bytes = e->leaf_bytes;
    m->arena_bytes = (e->arena_shared ? 0 : e->arena_bytes) + e->keep_bytes;
    m->unplanned_bytes = e->unplanned_bytes;
    m->scratch_bytes = e->scratch_shared ? 0 : (e->ws_floats + e->acc_floats) * sizeof(float);
}

/* ---- forward ------------------------------------------------------------------------------ */


static uint64_t dropout_seed(const wf_exec *e, const wf_op *op)
{
    return wf_k_seed_mix(op->attr.seed ^ e->seed, e->stream);
}

static uint64_t dropout_offset(const wf_exec *e, const wf_tensor *x)
{
    return (uint64_t)e->first_sample * (uint64_t)(numel(x) / e->mbs);
}

static wf_status run_fwd(wf_exec *e, int o)
{
    const wf_op *op = &e->g.ops[o];
    const wf_tensor *T = e->g.tensors;
    const wf_tensor *x = &T[op->in[0]];
    int yt = op->nout > 0 ? op->out[0] : -1;
    float *y = yt >= 0 ? F(yt) : NULL;
    float *sv = e->saved[o];
    if (wf_exec_sp_is_box(e, o))
        return e->sp.box(e->sp.ctx, o, 0, F(op->in[0]), y);
    if (wf_exec_sp_vocab_split(e, o) && op->kind == WF_OP_EMBEDDING) {
        const wf_tensor *tab = &T[op->in[1]];
        wf_status st = wf_exec_sp_embedding_fwd(I32(op->in[0]), F(op->in[1]), y, numel(x), tab->shape[0], tab->shape[1],
                                           e->sp.vocab_first[o], e->sp.vocab_total[o]);
        return st == WF_OK ? WF_OK : wf_error_prefix(st, "op '%s'", op->name);
    }
    if (wf_exec_sp_vocab_split(e, o) && op->kind == WF_OP_CROSS_ENTROPY) {
        int64_t v = last_dim(x);
        wf_status st = wf_exec_sp_ce_fwd(e, o, F(op->in[0]), I32(op->in[1]), y, sv, e->ws, numel(x) / v, v,
                                    e->sp.vocab_first[o], e->sp.vocab_total[o]);
        return st == WF_OK || st == WF_MPI ? st : wf_error_prefix(st, "op '%s'", op->name);
    }
    if (op->kind == WF_OP_DROPOUT && wf_exec_sp_dropout(e, o, F(op->in[0]), y, 0))
        return WF_OK;
    if (op->kind == WF_OP_BATCHNORM && wf_exec_sp_stats_split(e, o)) {
        int64_t n = x->shape[0], c = x->shape[1];
        return wf_exec_sp_bn_fwd(e, o, F(op->in[0]), F(op->in[1]), F(op->in[2]), y, sv, e->ws, n, c, numel(x) / (n * c));
    }
    switch (op->kind) {
    case WF_OP_MATMUL: {
        const wf_tensor *yy = &T[yt];
        int64_t m = yy->shape[0], n = yy->shape[1], k = op->attr.trans_a ? x->shape[0] : x->shape[1];
        K(e, matmul_fwd)(F(op->in[0]), F(op->in[1]), y, m, k, n, op->attr.trans_a, op->attr.trans_b);
        return WF_OK;
    }
    case WF_OP_BATCH_MATMUL: {
        const wf_tensor *yy = &T[yt];
        int nd = yy->ndim;
        int64_t m = yy->shape[nd - 2], n = yy->shape[nd - 1];
        int64_t k = op->attr.trans_a ? x->shape[nd - 2] : x->shape[nd - 1];
        int64_t count = numel(yy) / (m * n);
        K(e, batch_matmul_fwd)(F(op->in[0]), F(op->in[1]), y, count, m, k, n, op->attr.trans_a,
                               op->attr.trans_b);
        return WF_OK;
    }
    case WF_OP_LINEAR: {
        const wf_tensor *w = &T[op->in[1]];
        int64_t k = w->shape[0], n = w->shape[1];
        K(e, linear_fwd)(F(op->in[0]), F(op->in[1]), op->nin > 2 && op->in[2] >= 0 ? F(op->in[2]) : NULL, y,
                         numel(x) / k, k, n);
        return WF_OK;
    }
    case WF_OP_BIAS_ADD: {
        int64_t n = last_dim(x);
        K(e, bias_add_fwd)(F(op->in[0]), F(op->in[1]), y, numel(x) / n, n);
        return WF_OK;
    }
    case WF_OP_ADD:
        K(e, add_fwd)(F(op->in[0]), F(op->in[1]), y, numel(x), numel(&T[op->in[1]]));
        return WF_OK;
    case WF_OP_MUL:
        if (op->nin > 1 && op->in[1] >= 0)
            K(e, mul_fwd)(F(op->in[0]), F(op->in[1]), y, numel(x), numel(&T[op->in[1]]), 1.0f);
        else
            K(e, mul_fwd)(F(op->in[0]), NULL, y, numel(x), numel(x), (float)op->attr.scale);
        return WF_OK;
    case WF_OP_RELU:
        K(e, relu_fwd)(F(op->in[0]), y, numel(x));
        return WF_OK;
    case WF_OP_GELU:
        K(e, gelu_fwd)(F(op->in[0]), y, numel(x));
        return WF_OK;
    case WF_OP_SILU:
        K(e, silu_fwd)(F(op->in[0]), y, numel(x));
        return WF_OK;
    case WF_OP_TANH:
        wf_k_tanh_fwd(F(op->in[0]), y, numel(x));
        return WF_OK;
    case WF_OP_SIGMOID:
        wf_k_sigmoid_fwd(F(op->in[0]), y, numel(x));
        return WF_OK;
    case WF_OP_ROLL:
        wf_k_roll_fwd(F(op->in[0]), y, x->ndim, x->shape, op->attr.shifts);
        return WF_OK;
    case WF_OP_CLIP:
        wf_k_clip_fwd(F(op->in[0]), y, numel(x), (float)op->attr.alpha, (float)op->attr.beta,
                      (float)op->attr.lo, (float)op->attr.hi);
        return WF_OK;
    case WF_OP_HARDSWISH:
        wf_k_hardswish_fwd(F(op->in[0]), y, numel(x));
        return WF_OK;
    case WF_OP_CAST:
        wf_k_cast_fwd(I32(op->in[0]), y, numel(x));
        return WF_OK;
    case WF_OP_EXPAND:
        wf_k_expand_fwd(F(op->in[0]), y, x->ndim, x->shape, T[yt].ndim, T[yt].shape);
        return WF_OK;
    case WF_OP_DROPOUT:
        K(e, dropout_fwd)(F(op->in[0]), y, numel(x), (float)op->attr.p, dropout_seed(e, op), dropout_offset(e, x));
        return WF_OK;
    case WF_OP_LAYERNORM: {
        int64_t h = last_dim(x);
        K(e, layernorm_fwd)(F(op->in[0]), F(op->in[1]), F(op->in[2]), y, sv, numel(x) / h, h, (float)op->attr.eps);
        return WF_OK;
    }
    case WF_OP_RMSNORM: {
        int64_t h = last_dim(x);
        K(e, rmsnorm_fwd)(F(op->in[0]), F(op->in[1]), y, sv, numel(x) / h, h, (float)op->attr.eps);
        return WF_OK;
    }
    case WF_OP_SOFTMAX: {
        int64_t n = last_dim(x);
        K(e, softmax_fwd)(F(op->in[0]), y, numel(x) / n, n);
        return WF_OK;
    }
    case WF_OP_ATTENTION: {
        wf_k_attn at;
        attn_of(e, op, &at);
        if (op->nin == 4)
            at.bias = F(op->in[3]);
        K(e, attention_fwd)(&at, F(op->in[0]), F(op->in[1]), F(op->in[2]), y, sv, e->ws);
        return WF_OK;
    }
    case WF_OP_EMBEDDING: {
        const wf_tensor *tab = &T[op->in[1]];
        wf_status st = K(e, embedding_fwd)(I32(op->in[0]), F(op->in[1]), y, numel(x), tab->shape[0], tab->shape[1]);
        return st == WF_OK ? WF_OK : wf_error_prefix(st, "op '%s'", op->name);
    }
    case WF_OP_ROTARY: {
        int64_t heads = op->attr.heads;
        K(e, rotary_fwd)(F(op->in[0]), y, x->shape[0], x->shape[1], heads, x->shape[2] / heads, (float)op->attr.base);
        return WF_OK;
    }
    case WF_OP_CROSS_ENTROPY: {
        int64_t v = last_dim(x);
        wf_status st = K(e, cross_entropy_fwd)(F(op->in[0]), I32(op->in[1]), y, sv, numel(x) / v, v);
        return st == WF_OK ? WF_OK : wf_error_prefix(st, "op '%s'", op->name);
    }
    case WF_OP_CONV2D: {
        wf_k_conv_geom c;
        wf_k_conv_geom_of(&e->g, op, &c);
        K(e, conv2d_fwd)(&c, F(op->in[0]), F(op->in[1]), op->nin > 2 && op->in[2] >= 0 ? F(op->in[2]) : NULL, y,
                         e->ws);
        return WF_OK;
    }
    case WF_OP_MAXPOOL: {
        wf_k_conv_geom c;
        wf_k_conv_geom_of(&e->g, op, &c);
        K(e, maxpool_fwd)(&c, F(op->in[0]), y);
        return WF_OK;
    }
    case WF_OP_AVGPOOL: {
        wf_k_conv_geom c;
        wf_k_conv_geom_of(&e->g, op, &c);
        K(e, avgpool_fwd)(&c, F(op->in[0]), y);
        return WF_OK;
    }
    case WF_OP_GLOBAL_AVGPOOL: {
        int64_t nc = x->shape[0] * x->shape[1];
        K(e, global_avgpool_fwd)(F(op->in[0]), y, nc, numel(x) / nc);
        return WF_OK;
    }
    case WF_OP_BATCHNORM: {
        int64_t n = x->shape[0], c = x->shape[1];
        K(e, batchnorm_fwd)(F(op->in[0]), F(op->in[1]), F(op->in[2]), y, sv, n, c, numel(x) / (n * c),
                            (float)op->attr.eps);
        return WF_OK;
    }
    case WF_OP_RESHAPE:
    case WF_OP_FLATTEN:
        if (y != F(op->in[0]))
            memcpy(y, F(op->in[0]), (size_t)numel(x) * sizeof(float));
        return WF_OK;
    case WF_OP_TRANSPOSE:
        K(e, transpose_fwd)(F(op->in[0]), y, x->ndim, x->shape, op->attr.perm);
        return WF_OK;
    case WF_OP_CONCAT: {
        int ax;
        int64_t outer, inner, sizes[WF_MAX_INPUTS];
        const float *xs[WF_MAX_INPUTS];
        axis_extents(&T[yt], op->attr.axis, &ax, &outer, &inner);
        for (int i = 0; i < op->nin; i++) {
            xs[i] = F(op->in[i]);
            sizes[i] = T[op->in[i]].shape[ax];
        }
        K(e, concat_fwd)(xs, op->nin, sizes, y, outer, inner);
        return WF_OK;
    }
    case WF_OP_SPLIT: {
        int ax;
        int64_t outer, inner, sizes[WF_MAX_OUTPUTS];
        float *ys[WF_MAX_OUTPUTS];
        axis_extents(x, op->attr.axis, &ax, &outer, &inner);
        for (int i = 0; i < op->nout; i++) {
            ys[i] = F(op->out[i]);
            sizes[i] = T[op->out[i]].shape[ax];
        }
        K(e, split_fwd)(F(op->in[0]), ys, op->nout, sizes, outer, inner);
        return WF_OK;
    }
    case WF_OP_ROUTER: {
        const wf_tensor *w = &T[op->in[1]];
        int64_t H = w->shape[0], E = w->shape[1], Kk = op->attr.top_k;
        K(e, router_fwd)(F(op->in[0]), F(op->in[1]), y, (int32_t *)e->ptr[op->out[1]], sv, numel(x) / H, H, E, Kk,
                        op->attr.score == WF_MOE_SCORE_SIGMOID);
        return WF_OK;
    }
    case WF_OP_MOE_DISPATCH: {
        const wf_tensor *yy = &T[yt], *ids = &T[op->in[1]];
        int64_t E = yy->shape[0], C = yy->shape[1], H = yy->shape[2], Kk = ids->shape[2], Tn = numel(ids) / Kk;
        int32_t *count = (int32_t *)e->ws, *slot = count + E;
        K(e, moe_slots)(I32(op->in[1]), Tn, Kk, E, C, count, slot);
        K(e, moe_dispatch_fwd)(F(op->in[0]), I32(op->in[1]), slot, y, Tn, Kk, E, C, H);
        return WF_OK;
    }
    case WF_OP_GROUPED_MLP: {
        const wf_tensor *w2 = &T[op->in[2]];
        if (e->ex.ep > 1)
            return wf_exec_ep_fwd(e, op, y);
        K(e, grouped_mlp_fwd)(F(op->in[0]), F(op->in[1]), F(op->in[2]), y, e->ws, x->shape[0], x->shape[1],
                             x->shape[2], w2->shape[1], op->attr.act == WF_MOE_ACT_SWIGLU);
        return WF_OK;
    }
    case WF_OP_MOE_COMBINE: {
        const wf_tensor *ids = &T[op->in[2]];
        int64_t E = x->shape[0], C = x->shape[1], H = x->shape[2], Kk = ids->shape[2], Tn = numel(ids) / Kk;
        int32_t *count = (int32_t *)e->ws, *slot = count + E;
        K(e, moe_slots)(I32(op->in[2]), Tn, Kk, E, C, count, slot);
        K(e, moe_combine_fwd)(F(op->in[0]), F(op->in[1]), I32(op->in[2]), slot, y, Tn, Kk, C, H);
        return WF_OK;
    }
    case WF_OP_COUNT:
        break;
    }
    return wf_errorf(WF_INTERNAL, "op '%s': kind %d has no kernel", op->name, (int)op->kind);
}

/* ---- backward ------------------------------------------------------------------------------ */

/* Gradient output i of backward op o: its buffer, or the accumulation buffer
 * when it is a parameter's final gradient and gradients accumulate. */
static float *grad_out(wf_exec *e, const wf_op *op, int i, size_t *acc_used)
{
    if (i >= op->nout || op->out[i] < 0)
        return NULL;
    int t = op->out[i];
    if (e->accumulate && e->param_of_grad[t] >= 0) {
        float *p = e->acc + *acc_used;
        *acc_used += round_up((size_t)numel(&e->g.tensors[t]), ALIGN_FLOATS);
        return p;
    }
    return F(t);
}

static const float *grad_in(const wf_exec *e, const wf_op *op, int i)
{
    return i < op->nin && op->in[i] >= 0 ? F(op->in[i]) : NULL;
}

static void run_bwd(wf_exec *e, int o)
{
    const wf_op *op = &e->g.ops[o];
    const wf_tensor *T = e->g.tensors;
    size_t acc = 0;
    if (op->fwd_op < 0) {
        /* Accumulation of two partial gradients. */
        float *y = grad_out(e, op, 0, &acc);
        K(e, add_fwd)(F(op->in[0]), F(op->in[1]), y, numel(&T[op->in[0]]), numel(&T[op->in[0]]));
        goto accumulate;
    }
    const wf_op *f = &e->g.ops[op->fwd_op];
    const wf_tensor *x = &T[f->in[0]];
    const float *dy = grad_in(e, op, 0);
    const float *sv = e->saved[op->fwd_op];
    float *d0 = grad_out(e, op, 0, &acc);
    float *d1 = grad_out(e, op, 1, &acc);
    float *d2 = grad_out(e, op, 2, &acc);
    if (wf_exec_sp_is_box(e, op->fwd_op)) {
        /* A boxing step: the gradient of input 0; its other inputs are copies. */
        e->bwd_status = e->sp.box(e->sp.ctx, op->fwd_op, 1, dy, d0);
        size_t acc2 = acc;
        for (int i = 1; i < op->nout; i++) {
            float *di = i < 3 ? (i == 1 ? d1 : d2) : grad_out(e, op, i, &acc2);
            if (di)
                memset(di, 0, (size_t)numel(&T[op->out[i]]) * sizeof(float));
        }
        acc = acc2;
        goto accumulate;
    }
    if (wf_exec_sp_vocab_split(e, op->fwd_op) && f->kind == WF_OP_EMBEDDING) {
        const wf_tensor *tab = &T[f->in[1]];
        if (d1)
            wf_exec_sp_embedding_bwd(I32(f->in[0]), dy, d1, numel(x), tab->shape[0], tab->shape[1],
                                e->sp.vocab_first[op->fwd_op]);
        goto accumulate;
    }
    if (wf_exec_sp_vocab_split(e, op->fwd_op) && f->kind == WF_OP_CROSS_ENTROPY) {
        int64_t v = last_dim(x);
        wf_exec_sp_ce_bwd(F(f->in[0]), I32(f->in[1]), sv, dy ? dy[0] : 1.0f, d0, numel(x) / v, v,
                          e->sp.vocab_first[op->fwd_op], e->sp.vocab_total[op->fwd_op]);
        goto accumulate;
    }
    if (f->kind == WF_OP_DROPOUT && wf_exec_sp_dropout(e, op->fwd_op, dy, d0, 1))
        goto accumulate;
    if (f->kind == WF_OP_BATCHNORM && wf_exec_sp_stats_split(e, op->fwd_op)) {
        int64_t n = x->shape[0], c = x->shape[1];
        e->bwd_status = wf_exec_sp_bn_bwd(e, op->fwd_op, F(f->in[0]), F(f->in[1]), dy, sv, d0, d1, d2, e->ws, n, c,
                                     numel(x) / (n * c));
        goto accumulate;
    }
    switch (f->kind) {
    case WF_OP_MATMUL: {
        const wf_tensor *yy = &T[f->out[0]];
        int64_t m = yy->shape[0], n = yy->shape[1], k = f->attr.trans_a ? x->shape[0] : x->shape[1];
        K(e, matmul_bwd)(F(f->in[0]), F(f->in[1]), dy, d0, d1, m, k, n, f->attr.trans_a, f->attr.trans_b);
        break;
    }
    case WF_OP_BATCH_MATMUL: {
        const wf_tensor *yy = &T[f->out[0]];
        int nd = yy->ndim;
        int64_t m = yy->shape[nd - 2], n = yy->shape[nd - 1];
        int64_t k = f->attr.trans_a ? x->shape[nd - 2] : x->shape[nd - 1];
        K(e, batch_matmul_bwd)(F(f->in[0]), F(f->in[1]), dy, d0, d1, numel(yy) / (m * n), m, k, n,
                               f->attr.trans_a, f->attr.trans_b);
        break;
    }
    case WF_OP_LINEAR: {
        const wf_tensor *w = &T[f->in[1]];
        int64_t k = w->shape[0], n = w->shape[1];
        K(e, linear_bwd)(F(f->in[0]), F(f->in[1]), dy, d0, d1, f->nin > 2 ? d2 : NULL, numel(x) / k, k, n);
        break;
    }
    case WF_OP_BIAS_ADD: {
        int64_t n = last_dim(x);
        K(e, bias_add_bwd)(dy, d0, d1, numel(x) / n, n);
        break;
    }
    case WF_OP_ADD:
        K(e, add_bwd)(dy, d0, d1, numel(x), numel(&T[f->in[1]]));
        break;
    case WF_OP_MUL:
        if (f->nin > 1 && f->in[1] >= 0)
            K(e, mul_bwd)(F(f->in[0]), F(f->in[1]), dy, d0, d1, numel(x), numel(&T[f->in[1]]), 1.0f);
        else
            K(e, mul_bwd)(F(f->in[0]), NULL, dy, d0, NULL, numel(x), numel(x), (float)f->attr.scale);
        break;
    case WF_OP_RELU:
        K(e, relu_bwd)(F(f->in[0]), dy, d0, numel(x));
        break;
    case WF_OP_GELU:
        K(e, gelu_bwd)(F(f->in[0]), dy, d0, numel(x));
        break;
    case WF_OP_SILU:
        K(e, silu_bwd)(F(f->in[0]), dy, d0, numel(x));
        break;
    case WF_OP_TANH:
        wf_k_tanh_bwd(F(f->out[0]), dy, d0, numel(x));
        break;
    case WF_OP_SIGMOID:
        wf_k_sigmoid_bwd(F(f->out[0]), dy, d0, numel(x));
        break;
    case WF_OP_ROLL:
        wf_k_roll_bwd(dy, d0, x->ndim, x->shape, f->attr.shifts);
        break;
    case WF_OP_CLIP:
        wf_k_clip_bwd(F(f->in[0]), dy, d0, numel(x), (float)f->attr.alpha, (float)f->attr.beta,
                      (float)f->attr.lo, (float)f->attr.hi);
        break;
    case WF_OP_HARDSWISH:
        wf_k_hardswish_bwd(F(f->in[0]), dy, d0, numel(x));
        break;
    case WF_OP_CAST: /* integer input: no gradient */
        break;
    case WF_OP_EXPAND: {
        const wf_tensor *yy = &T[f->out[0]];
        wf_k_expand_bwd(dy, d0, x->ndim, x->shape, yy->ndim, yy->shape);
        break;
    }
    case WF_OP_DROPOUT:
        K(e, dropout_bwd)(dy, d0, numel(x), (float)f->attr.p, dropout_seed(e, f), dropout_offset(e, x));
        break;
    case WF_OP_LAYERNORM: {
        int64_t h = last_dim(x);
        K(e, layernorm_bwd)(F(f->in[0]), F(f->in[1]), dy, sv, d0, d1, d2, numel(x) / h, h);
        break;
    }
    case WF_OP_RMSNORM: {
        int64_t h = last_dim(x);
        K(e, rmsnorm_bwd)(F(f->in[0]), F(f->in[1]), dy, sv, d0, d1, numel(x) / h, h);
        break;
    }
    case WF_OP_SOFTMAX: {
        int64_t n = last_dim(x);
        K(e, softmax_bwd)(F(f->out[0]), dy, d0, numel(x) / n, n);
        break;
    }
    case WF_OP_ATTENTION: {
        wf_k_attn at;
        attn_of(e, f, &at);
        if (f->nin == 4) {
            at.bias = F(f->in[3]);
            at.dbias = grad_out(e, op, 3, &acc);
        }
        K(e, attention_bwd)(&at, F(f->in[0]), F(f->in[1]), F(f->in[2]), dy, sv, d0, d1, d2, e->ws);
        break;
    }
    case WF_OP_EMBEDDING: {
        const wf_tensor *tab = &T[f->in[1]];
        K(e, embedding_bwd)(I32(f->in[0]), dy, d1, numel(x), tab->shape[0], tab->shape[1]);
        break;
    }
    case WF_OP_ROTARY: {
        int64_t heads = f->attr.heads;
        K(e, rotary_bwd)(dy, d0, x->shape[0], x->shape[1], heads, x->shape[2] / heads, (float)f->attr.base);
        break;
    }
    case WF_OP_CROSS_ENTROPY: {
        int64_t v = last_dim(x);
        K(e, cross_entropy_bwd)(F(f->in[0]), I32(f->in[1]), sv, dy ? dy[0] : 1.0f, d0, numel(x) / v, v);
        break;
    }
    case WF_OP_CONV2D: {
        wf_k_conv_geom c;
        wf_k_conv_geom_of(&e->g, f, &c);
        K(e, conv2d_bwd)(&c, F(f->in[0]), F(f->in[1]), dy, d0, d1, f->nin > 2 ? d2 : NULL, e->ws);
        break;
    }
    case WF_OP_MAXPOOL: {
        wf_k_conv_geom c;
        wf_k_conv_geom_of(&e->g, f, &c);
        K(e, maxpool_bwd)(&c, F(f->in[0]), dy, d0);
        break;
    }
    case WF_OP_AVGPOOL: {
        wf_k_conv_geom c;
        wf_k_conv_geom_of(&e->g, f, &c);
        K(e, avgpool_bwd)(&c, dy, d0);
        break;
    }
    case WF_OP_GLOBAL_AVGPOOL: {
        int64_t nc = x->shape[0] * x->shape[1];
        K(e, global_avgpool_bwd)(dy, d0, nc, numel(x) / nc);
        break;
    }
    case WF_OP_BATCHNORM: {
        int64_t n = x->shape[0], c = x->shape[1];
        K(e, batchnorm_bwd)(F(f->in[0]), F(f->in[1]), dy, sv, d0, d1, d2, n, c, numel(x) / (n * c));
        break;
    }
    case WF_OP_RESHAPE:
    case WF_OP_FLATTEN:
        if (d0 && d0 != dy)
            memcpy(d0, dy, (size_t)numel(x) * sizeof(float));
        break;
    case WF_OP_TRANSPOSE:
        K(e, transpose_bwd)(dy, d0, x->ndim, x->shape, f->attr.perm);
        break;
    case WF_OP_CONCAT: {
        int ax;
        int64_t outer, inner, sizes[WF_MAX_INPUTS];
        float *dxs[WF_MAX_INPUTS];
        size_t acc2 = 0;
        axis_extents(&T[f->out[0]], f->attr.axis, &ax, &outer, &inner);
        for (int i = 0; i < f->nin; i++) {
            dxs[i] = grad_out(e, op, i, &acc2);
            sizes[i] = T[f->in[i]].shape[ax];
        }
        acc = acc2;
        K(e, concat_bwd)(dy, dxs, f->nin, sizes, outer, inner);
        break;
    }
    case WF_OP_SPLIT: {
        int ax;
        int64_t outer, inner, sizes[WF_MAX_OUTPUTS];
        const float *dys[WF_MAX_OUTPUTS];
        axis_extents(x, f->attr.axis, &ax, &outer, &inner);
        for (int i = 0; i < f->nout; i++) {
            dys[i] = grad_in(e, op, i);
            sizes[i] = T[f->out[i]].shape[ax];
        }
        K(e, split_bwd)(dys, d0, f->nout, sizes, outer, inner);
        break;
    }
    case WF_OP_ROUTER: {
        const wf_tensor *w = &T[f->in[1]];
        int64_t H = w->shape[0], E = w->shape[1], Kk = f->attr.top_k;
        if (dy)
            K(e, router_bwd)(F(f->in[0]), F(f->in[1]), sv, dy, d0, d1, e->ws, numel(x) / H, H, E, Kk,
                            f->attr.score == WF_MOE_SCORE_SIGMOID);
        break;
    }
    case WF_OP_MOE_DISPATCH: {
        const wf_tensor *yy = &T[f->out[0]], *ids = &T[f->in[1]];
        int64_t E = yy->shape[0], C = yy->shape[1], H = yy->shape[2], Kk = ids->shape[2], Tn = numel(ids) / Kk;
        int32_t *count = (int32_t *)e->ws, *slot = count + E;
        K(e, moe_slots)(I32(f->in[1]), Tn, Kk, E, C, count, slot);
        if (d0)
            K(e, moe_dispatch_bwd)(dy, I32(f->in[1]), slot, d0, Tn, Kk, C, H);
        break;
    }
    case WF_OP_GROUPED_MLP: {
        const wf_tensor *w2 = &T[f->in[2]];
        if (e->ex.ep > 1) {
            e->bwd_status = wf_exec_ep_bwd(e, f, dy, d0, d1, d2);
            break;
        }
        K(e, grouped_mlp_bwd)(F(f->in[0]), F(f->in[1]), F(f->in[2]), dy, d0, d1, d2, e->ws, x->shape[0], x->shape[1],
                             x->shape[2], w2->shape[1], f->attr.act == WF_MOE_ACT_SWIGLU);
        break;
    }
    case WF_OP_MOE_COMBINE: {
        const wf_tensor *ids = &T[f->in[2]];
        int64_t E = x->shape[0], C = x->shape[1], H = x->shape[2], Kk = ids->shape[2], Tn = numel(ids) / Kk;
        int32_t *count = (int32_t *)e->ws, *slot = count + E;
        K(e, moe_slots)(I32(f->in[2]), Tn, Kk, E, C, count, slot);
        K(e, moe_combine_bwd)(F(f->in[0]), F(f->in[1]), I32(f->in[2]), slot, dy, d0, d1, Tn, Kk, E, C, H);
        break;
    }
    case WF_OP_COUNT:
        break;
    }
accumulate:
    if (!e->accumulate || acc == 0)
        return;
    /* Add the parameter gradients written to the accumulation buffer. */
    size_t used = 0;
    for (int i = 0; i < op->nout; i++) {
        int t = op->out[i];
        if (t < 0 || e->param_of_grad[t] < 0)
            continue;
        int64_t n = numel(&T[t]);
        float *dst = F(t);
        const float *src = e->acc + used;
        for (int64_t j = 0; j < n; j++)
            dst[j] += src[j];
        used += round_up((size_t)n, ALIGN_FLOATS);
    }
}

/* ---- passes ----------------------------------------------------------------------------------- */

wf_status wf_exec_forward(wf_exec *e, float *loss)
{
    wf_status st = WF_OK;
    for (int o = 0; o < e->g.nfwd; o++) {
        if (e->has_hooks && e->hooks.before) {
            wf_status h = e->hooks.before(e->hooks.ctx, o);
            if (h != WF_OK)
                return h;
        }
        if (st == WF_OK) {
            st = run_fwd(e, o);
        } else if (wf_exec_sp_is_box(e, o) || (wf_exec_sp_vocab_split(e, o) && e->g.ops[o].kind == WF_OP_CROSS_ENTROPY) ||
                   wf_exec_sp_stats_split(e, o)) {
            /* The collectives of the other ranks wait for this one's. */
            wf_status cs = run_fwd(e, o);
            if (cs == WF_MPI)
                return cs;
        }
        if (e->has_hooks && e->hooks.after) {
            wf_status h = e->hooks.after(e->hooks.ctx, o);
            if (h != WF_OK)
                return h;
        }
    }
    if (loss)
        *loss = st != WF_OK ? NAN : e->g.loss >= 0 ? F(e->g.loss)[0] : 0.0f;
    return st;
}

wf_status wf_exec_backward(wf_exec *e, int accumulate)
{
    e->accumulate = accumulate != 0;
    e->bwd_status = WF_OK;
    for (int o = e->g.nfwd; o < e->g.nops; o++) {
        if (e->has_hooks && e->hooks.before) {
            wf_status h = e->hooks.before(e->hooks.ctx, o);
            if (h != WF_OK)
                return h;
        }
        run_bwd(e, o);
        if (e->bwd_status != WF_OK)
            return e->bwd_status;
        if (e->has_hooks && e->hooks.after) {
            wf_status h = e->hooks.after(e->hooks.ctx, o);
            if (h != WF_OK)
                return h;
        }
    }
    e->accumulate = 0;
    return WF_OK;
}
