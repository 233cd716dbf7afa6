/* weft cost: one sw=pytorch training step as the CUDA caching allocator sees
 * it -- every allocation and free of the script `weft export --to ddp`
 * writes (src/cli/export_pytorch.c), in the order PyTorch makes them,
 * replayed through the allocator model (alloc.c) for a few iterations:
 * peak allocated and peak reserved bytes, and whether an allocation fails.
 *
 * The ops are weft's own: the one-layer graph the cost model is built from
 * (wf_model_build), unrolled over the model's layers, with each op's saved
 * tensors (wf_op_saved). How PyTorch runs them (docs/cost-model.md, "The
 * caching allocator", gives the sources):
 *  - Startup: the fp32 parameters, then DDP's gradient buckets
 *    (gradient_as_bucket_view=True: each .grad is a view into its bucket;
 *    the first bucket closes at 1 MiB, the others at the plan's bucket
 *    size; see buckets()).
 *  - Forward, op by op (torch.autocast in 16 bits over fp32 weights): a
 *    product casts each fp32 weight once per forward (autocast's cache,
 *    cleared when the region exits; the product keeps the copy for its
 *    backward) and each fp32 activation it reads (a fresh copy per product,
 *    kept when the product saves its input); products and attention write
 *    16 bits, embeddings and norms fp32, other ops the promoted type of their
 *    inputs (the residual stream stays fp32). An op's output is freed after
 *    its last reader unless a backward keeps it; views (reshape, split,
 *    transpose) allocate nothing. SDPA's flash kernel keeps q, k, v, its
 *    output and an fp32 log-sum-exp per head and row; the script repeats k
 *    and v to every head (repeat_interleave) and copies the output when it
 *    transposes it back (reshape of a non-contiguous tensor).
 *  - The loss: logits.float() (an fp32 copy under autocast), log_softmax
 *    (fp32, kept), nll_loss. The script's `logits` variable holds the 16-bit
 *    logits until the next forward has returned.
 *  - Backward in reverse: each op allocates its inputs' gradients (in their
 *    dtypes; autocast's casts add a 16-bit and an fp32 copy), frees its
 *    output gradients and what it saved. A view's and an add's gradient is
 *    its output's; a second gradient of a tensor is added into the first.
 *    A weight's gradient is copied into its bucket and freed. The flash
 *    backward allocates dq, dk, dv, an fp32 softmax_d and an fp32 dq
 *    accumulator (flash_api.cpp, mha_bwd).
 *  - The first step's fused AdamW allocates each parameter's step counter
 *    (a one-element fp32 tensor on the device when fused), exp_avg and
 *    exp_avg_sq (zeros_like): torch/optim/adam.py's lazy state
 *    initialization, pytorch@005941eb;
 *    clip_grad_norm_ allocates scalars only; zero_grad(set_to_none=True)
 *    frees nothing (the buckets hold the gradients). DDP rebuilds its buckets
 *    at the second forward (the new ones before the old are freed).
 *  - recompute=full wraps each block, selective the attention core, in
 *    torch.utils.checkpoint(use_reentrant=False): the checkpointed forward
 *    keeps only the region's inputs; the region runs again (a new autocast
 *    region, new weight copies) right before its backward. */
#include "cost/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph-impl.h"
#include "weft/models.h"

typedef struct {
    int64_t h;    /* allocator handle (-1 when the allocation failed) */
    int refs;     /* tensors or gradients that hold it */
} pt_buf;

typedef struct {
    const wf_cost_ctx *ctx;
    const wf_graph *g;
    wf_alloc *a;
    pt_buf *buf;
    int nbuf, capbuf;
    int failed, nomem;
    int L, nt, nk;       /* layers, graph tensors, tensor instances */
    int autocast, flash;
    double e;            /* 16-bit bytes under autocast (else the model's) */
    int64_t mbs;
    /* per tensor instance */
    int *tb;             /* its storage (buffer), -1 none */
    int *holds;          /* references to the tensor: forward value, saving ops */
    int *gb;             /* its gradient's buffer, -1 none */
    int *cast;           /* autocast's 16-bit copy (weights: this forward's cache) */
    int *last_use;       /* position of its last forward reader */
    int *castsaved;      /* how many ops keep the cast */
    char *incache;       /* the cast is in autocast's cache (the region has not exited) */
    /* per graph tensor */
    double *rb;          /* bytes per element as PyTorch holds it */
    char *tied;          /* a parameter read before and after the layers (a tied head) */
    int resid_in, layer_out;
    /* the unrolled forward: graph op and layer per position */
    int *uop, *ulay;
    int nu;
    /* per position: buffers private to the op that its backward frees */
    int *priv;           /* 4 per position */
    int *rep;            /* GQA: the op's repeated k and v (2 per position) */
    int *attn_out;       /* attention: the output buffer it keeps */
    int *acast;          /* a product's 16-bit copies of its fp32 inputs (WF_MAX_INPUTS per position) */
} pt_run;

static int sec_of(const wf_graph *g, int i, int first_layer_op)
{
    if (g->ops[i].block >= 0)
        return WF_COST_SEC_LAYER;
    return i < first_layer_op ? WF_COST_SEC_PRE : WF_COST_SEC_POST;
}

static double numel(const wf_graph *g, int t) { return (double)wf_tensor_numel(&g->tensors[t]); }

static int is_param(const wf_graph *g, int t) { return g->tensors[t].role == WF_ROLE_PARAM; }
static int is_act(const wf_graph *g, int t)
{
    return g->tensors[t].role != WF_ROLE_PARAM && g->tensors[t].role != WF_ROLE_INPUT &&
           g->tensors[t].role != WF_ROLE_LABEL;
}

/* Ops that allocate nothing: views, and dropout, which the exported script
 * does not have (its Block and Model call no F.dropout and nn.Dropout nowhere:
 * src/cli/export_pytorch.c, PT_MODEL), so weft's dropouts are identities
 * there, with no mask. */
static int view_op(wf_op_kind k)
{
    return k == WF_OP_RESHAPE || k == WF_OP_FLATTEN || k == WF_OP_TRANSPOSE || k == WF_OP_EXPAND ||
           k == WF_OP_DROPOUT;
}

/* A buffer of `bytes` from the allocator, with one reference. */
static int buf_new(pt_run *r, double bytes)
{
    if (wf_grow(&r->buf, &r->capbuf, (int64_t)r->nbuf + 1, sizeof *r->buf, 1024) != 0) {
        r->nomem = 1;
        return -1;
    }
    int id = r->nbuf++;
    r->buf[id].refs = 1;
    r->buf[id].h = -1;
    if (r->failed || r->nomem)
        return id;
    uint64_t b = bytes > 1 ? (uint64_t)ceil(bytes) : 1;
    int64_t h = wf_alloc_malloc(r->a, b);
    if (h == -1)
        r->failed = 1;
    else if (h < -1)
        r->nomem = 1;
    r->buf[id].h = h;
    return id;
}

static void buf_ref(pt_run *r, int id)
{
    if (id >= 0)
        r->buf[id].refs++;
}

static void buf_unref(pt_run *r, int id)
{
    if (id < 0 || r->buf[id].refs <= 0)
        return;
    if (--r->buf[id].refs == 0 && r->buf[id].h >= 0) {
        wf_alloc_release(r->a, r->buf[id].h);
        r->buf[id].h = -1;
    }
}

/* Tensor instance keys: graph tensor t of layer l (-1 outside the layers). */
/* A saved tensor t of op o (unit u, its inputs' keys ins): the key of the
 * input that is t (-1: none), and in *cj the input whose activation cast
 * is kept (-1: none). */
static int saved_input(const pt_run *r, const wf_op *o, int u, const int *ins, int t, int *cj)
{
    int k = -1;
    *cj = -1;
    for (int j = 0; j < o->nin; j++)
        if (o->in[j] == t) {
            k = ins[j];
            if (r->acast[WF_MAX_INPUTS * u + j] >= 0)
                *cj = j;
        }
    return k;
}

static int key(const pt_run *r, int t, int l) { return l < 0 ? t : r->nt * (1 + l) + t; }

/* The instance op (i, l) reads as its input t. */
static int in_key(const pt_run *r, int i, int l, int t, int sec)
{
    const wf_graph *g = r->g;
    int prod = g->tensors[t].producer;
    int prod_layer = prod >= 0 && g->ops[prod].block >= 0;
    if (sec == WF_COST_SEC_LAYER) {
        if (prod_layer)
            return key(r, t, l);
        if (t == r->resid_in && l > 0)
            return key(r, r->layer_out, l - 1);
        if (is_param(g, t))
            return key(r, t, -1);
        return key(r, t, -1);
    }
    (void)i;
    if (sec == WF_COST_SEC_POST && prod_layer)
        return key(r, t, r->L - 1);
    return key(r, t, -1);
}

static int param_key(const pt_run *r, int t, int l, int sec)
{
    /* The script's head is its own nn.Linear(HIDDEN, VOCAB) even where weft
     * ties it to the embedding (GPT): a second parameter, kept in layer 0's
     * slot of the table's key, which no layer op reads. */
    if (sec == WF_COST_SEC_POST && r->tied[t])
        return key(r, t, 0);
    return sec == WF_COST_SEC_LAYER ? key(r, t, l) : key(r, t, -1);
}

/* The input a layer instance's checkpoint keeps: the residual stream. */
static int layer_in(const pt_run *r, int l) { return l > 0 ? key(r, r->layer_out, l - 1) : key(r, r->resid_in, -1); }

/* Drops one reference to tensor instance k; at none its storage goes. */
static void drop(pt_run *r, int k)
{
    if (r->holds[k] <= 0)
        return;
    if (--r->holds[k] == 0) {
        buf_unref(r, r->tb[k]);
        r->tb[k] = -1;
    }
}

/* Adds a gradient buffer to tensor instance k's (the first one becomes it). */
static void grad_add(pt_run *r, int k, int b)
{
    if (r->gb[k] < 0)
        r->gb[k] = b;
    else
        buf_unref(r, b);
}

/* A weight's gradient (w elements) leaves its op: under autocast in 16 bits
 * and cast to fp32 (ToCopyBackward); AccumulateGrad copies it into the DDP
 * bucket view, and it is freed. */
static void weight_grad(pt_run *r, double w, int matrix)
{
    if (r->autocast && matrix) {
        int g16 = buf_new(r, w * r->e);
        int g32 = buf_new(r, w * 4.0);
        buf_unref(r, g16);
        buf_unref(r, g32);
    } else {
        buf_unref(r, buf_new(r, w * 4.0));
    }
}

/* Bytes per element of every graph tensor as PyTorch holds it. */
static void dtypes(pt_run *r)
{
    const wf_graph *g = r->g;
    for (int t = 0; t < g->ntensors; t++) {
        double n = numel(g, t);
        r->rb[t] = n > 0 ? (double)wf_tensor_bytes(&g->tensors[t]) / n : 0;
        if (is_param(g, t))
            r->rb[t] = 4.0;
    }
    for (int i = 0; i < g->nfwd; i++) {
        const wf_op *o = &g->ops[i];
        double b;
        if (view_op(o->kind) || o->kind == WF_OP_SPLIT) {
            b = r->rb[o->in[0]];
        } else if (!r->autocast) {
            continue;
        } else if (wf_op_is_matrix(o->kind)) {
            b = r->e;
        } else if (o->kind == WF_OP_EMBEDDING || o->kind == WF_OP_LAYERNORM || o->kind == WF_OP_RMSNORM ||
                   o->kind == WF_OP_CROSS_ENTROPY || o->kind == WF_OP_SOFTMAX) {
            b = 4.0;
        } else {
            b = r->e;
            for (int j = 0; j < o->nin; j++)
                if (is_param(g, o->in[j]) || (is_act(g, o->in[j]) && r->rb[o->in[j]] >= 4.0))
                    b = 4.0;
        }
        for (int j = 0; j < o->nout; j++)
            r->rb[o->out[j]] = b;
    }
}

/* Op i's output is split (weft's fused qkv). */
static int feeds_split(const wf_graph *g, int i)
{
    for (int j = i + 1; j < g->nfwd; j++)
        if (g->ops[j].kind == WF_OP_SPLIT && g->ops[j].in[0] == g->ops[i].out[0])
            return 1;
    return 0;
}

/* The saved entries of op i under PyTorch: tensors (>= 0) and private
 * buffers (bytes in priv_bytes). */
static int op_saves(const pt_run *r, int i, int *tens, double *priv_bytes, int *npriv)
{
    const wf_graph *g = r->g;
    const wf_op *o = &g->ops[i];
    wf_saved sv[WF_MAX_SAVED];
    int ns = wf_op_saved(g, i, sv), nt = 0;
    *npriv = 0;
    if (o->kind == WF_OP_DROPOUT)
        return 0; /* not in the script (view_op) */
    for (int k = 0; k < ns; k++) {
        if (o->kind == WF_OP_CROSS_ENTROPY && sv[k].tensor == o->in[0])
            continue; /* log_softmax keeps its output, not the logits */
        if (sv[k].tensor >= 0) {
            int dup = 0;
            for (int q = 0; q < nt; q++)
                dup |= tens[q] == sv[k].tensor;
            if (!dup && !is_param(g, sv[k].tensor))
                tens[nt++] = sv[k].tensor;
        } else if (o->kind != WF_OP_ATTENTION && *npriv < 3) {
            priv_bytes[(*npriv)++] = sv[k].bytes;
        }
    }
    /* SDPA keeps the repeated k and v (its own buffers), not the originals */
    if (o->kind == WF_OP_ATTENTION)
        for (int q = 0; q < nt; q++)
            for (int j = 1; j < 3 && j < o->nin; j++)
                if (tens[q] == o->in[j] && numel(g, o->in[j]) < numel(g, o->in[0]))
                    tens[q--] = tens[--nt];
    if (o->kind == WF_OP_ATTENTION)
        priv_bytes[(*npriv)++] = r->ctx->ops[i].fl_saved_scores * (double)r->mbs; /* fp32 log-sum-exp */
    if (o->kind == WF_OP_CROSS_ENTROPY)
        priv_bytes[(*npriv)++] = numel(g, o->in[0]) * 4.0; /* log_softmax's fp32 output */
    if (o->kind == WF_OP_RMSNORM)
        priv_bytes[(*npriv)++] = numel(g, o->in[0]) * 4.0; /* the normalized fp32 tensor */
    if (r->autocast && o->kind == WF_OP_LINEAR && r->rb[o->in[0]] >= 4.0 && feeds_split(g, i) && *npriv < 4)
        /* weft's fused qkv is the script's wq and wkv: two products, each
         * casting the fp32 norm output for itself and keeping its copy
         * (autocast caches casts of leaf tensors only) */
        priv_bytes[(*npriv)++] = numel(g, o->in[0]) * r->e;
    return nt;
}

/* How forward_op runs an op: as usual; inside torch.utils.checkpoint
 * (non-reentrant: its saved tensors are not kept); or recomputed before its
 * backward (kept again; only the tensors the recomputed region made are
 * freed at their last read, and an output read after the region is not
 * kept). */
enum { FWD_RUN, FWD_NOSAVE, FWD_RECOMPUTE };

/* Releases autocast's cache: its reference to every weight copy. */
static void cache_exit(pt_run *r, const int *pkey, int np)
{
    for (int q = 0; q < np; q++) {
        int k = pkey[q];
        if (!r->incache[k])
            continue;
        r->incache[k] = 0;
        buf_unref(r, r->cast[k]);
        if (r->castsaved[k] == 0)
            r->cast[k] = -1;
    }
}

/* The forward of the instance at position u (mode: FWD_*; a recomputed
 * region ends at position rend). */
static void forward_op(pt_run *r, int u, int first_layer_op, int *privs, int mode, int rend)
{
    const wf_graph *g = r->g;
    int i = r->uop[u], l = r->ulay[u], sec = sec_of(g, i, first_layer_op);
    const wf_op *o = &g->ops[i];
    int matrix = wf_op_is_matrix(o->kind);
    int saved[WF_MAX_SAVED];
    double pb[4];
    int np = 0;
    int ns = op_saves(r, i, saved, pb, &np);
    if (mode == FWD_NOSAVE)
        ns = 0;
    int ins[WF_MAX_INPUTS];
    for (int j = 0; j < o->nin; j++)
        ins[j] = is_param(g, o->in[j]) ? param_key(r, o->in[j], l, sec) : in_key(r, i, l, o->in[j], sec);
    /* autocast's casts */
    if (r->autocast && matrix)
        for (int j = 0; j < o->nin; j++) {
            int k = ins[j], t = o->in[j];
            if (is_param(g, t)) {
                if (r->cast[k] < 0) {
                    r->cast[k] = buf_new(r, numel(g, t) * r->e);
                    r->castsaved[k] = 0;
                    r->incache[k] = 1;
                } else if (!r->incache[k]) { /* a new region's cache casts again */
                    int c = buf_new(r, numel(g, t) * r->e);
                    if (r->castsaved[k] == 0)
                        r->cast[k] = c;
                    else
                        buf_unref(r, c); /* (kept copies are one per use; the model keeps the first) */
                    r->incache[k] = r->castsaved[k] == 0;
                }
                if (g->tensors[t].ndim >= 2 && mode != FWD_NOSAVE) { /* the weight, kept for the data gradient */
                    buf_ref(r, r->cast[k]);
                    r->castsaved[k]++;
                }
            } else if (is_act(g, t) && r->rb[t] >= 4.0) {
                r->acast[WF_MAX_INPUTS * u + j] = buf_new(r, numel(g, t) * r->e);
            }
        }
    /* SDPA's inputs repeated to every head (GQA), kept by it */
    if (o->kind == WF_OP_ATTENTION) {
        double nq = numel(g, o->in[0]);
        for (int j = 1; j < 3 && j < o->nin; j++)
            r->rep[2 * u + j - 1] = numel(g, o->in[j]) < nq ? buf_new(r, nq * r->rb[o->in[j]]) : -1;
    }
    /* outputs */
    for (int j = 0; j < o->nout; j++) {
        int k = key(r, o->out[j], sec == WF_COST_SEC_LAYER ? l : -1), t = o->out[j];
        if (r->holds[k] > 0) { /* an earlier instance still held: let it go */
            r->holds[k] = 1;
            drop(r, k);
        }
        if (view_op(o->kind) || o->kind == WF_OP_SPLIT) {
            r->tb[k] = r->tb[ins[0]];
            buf_ref(r, r->tb[k]);
        } else {
            r->tb[k] = buf_new(r, numel(g, t) * r->rb[t]);
        }
        r->holds[k] = 1;
    }
    /* the loss: logits.float() (a copy under autocast), then log_softmax */
    int fcopy = -1;
    if (o->kind == WF_OP_CROSS_ENTROPY && r->rb[o->in[0]] < 4.0)
        fcopy = buf_new(r, numel(g, o->in[0]) * 4.0);
    for (int q = 0; q < np; q++)
        privs[4 * u + q] = buf_new(r, pb[q]);
    if (mode == FWD_NOSAVE)
        for (int q = 0; q < np; q++) {
            buf_unref(r, privs[4 * u + q]);
            privs[4 * u + q] = -1;
        }
    if (o->kind == WF_OP_RMSNORM) /* y.pow(2), freed once averaged */
        buf_unref(r, buf_new(r, numel(g, o->in[0]) * 4.0));
    buf_unref(r, fcopy);
    /* SDPA keeps its output. The flash kernel writes it in q's memory
     * layout, (batch, seq, heads, head dim) here (at::empty_like of the
     * transposed q in _flash_attention_forward), so the script's
     * y.transpose(1, 2).reshape(b, s, H) is a view of it, not a copy:
     * the next product reads (and keeps) the same storage. */
    if (o->kind == WF_OP_ATTENTION) {
        int k = key(r, o->out[0], sec == WF_COST_SEC_LAYER ? l : -1);
        r->attn_out[u] = r->tb[k];
        if (mode == FWD_RECOMPUTE && rend == u)
            r->tb[k] = -1;
        else
            buf_ref(r, r->tb[k]);
        if (r->tb[k] < 0)
            r->holds[k] = 0;
        if (mode == FWD_NOSAVE) {
            buf_unref(r, r->attn_out[u]);
            r->attn_out[u] = -1;
            for (int j = 0; j < 2; j++) {
                buf_unref(r, r->rep[2 * u + j]);
                r->rep[2 * u + j] = -1;
            }
        }
    }
    /* saved tensors: one more reference each (a product's fp32 input: its cast) */
    for (int q = 0; q < ns; q++) {
        int cj, k = saved_input(r, o, u, ins, saved[q], &cj);
        if (k < 0)
            continue;
        if (cj >= 0)
            continue; /* the cast is kept (its reference is the op's) */
        r->holds[k]++;
    }
    /* activation casts not kept go now */
    for (int j = 0; j < o->nin; j++) {
        int t = o->in[j], keep = 0, *c = &r->acast[WF_MAX_INPUTS * u + j];
        if (*c < 0)
            continue;
        for (int q = 0; q < ns; q++)
            keep |= saved[q] == t;
        if (!keep) {
            buf_unref(r, *c);
            *c = -1;
        }
    }
    /* inputs read for the last time (recomputing: only those the region made) */
    for (int j = 0; j < o->nin; j++) {
        int k = ins[j], t = o->in[j], pr = g->tensors[t].producer;
        if (is_param(g, t) || o->kind == WF_OP_CROSS_ENTROPY)
            continue;
        if (mode == FWD_RECOMPUTE && (rend == u || pr < 0 || g->ops[pr].block < 0 || sec != WF_COST_SEC_LAYER))
            continue;
        if (r->last_use[k] == u)
            drop(r, k);
    }
    /* recomputing: outputs read after the region are not kept */
    if (mode == FWD_RECOMPUTE)
        for (int j = 0; j < o->nout; j++) {
            int k = key(r, o->out[j], sec == WF_COST_SEC_LAYER ? l : -1);
            if (r->holds[k] > 0 && (r->last_use[k] > rend || r->last_use[k] < 0))
                drop(r, k);
        }
}

/* The backward of the instance at position u. */
static void backward_op(pt_run *r, int u, int first_layer_op, int *privs)
{
    const wf_graph *g = r->g;
    int i = r->uop[u], l = r->ulay[u], sec = sec_of(g, i, first_layer_op);
    const wf_op *o = &g->ops[i];
    int matrix = wf_op_is_matrix(o->kind);
    int ins[WF_MAX_INPUTS], outk[WF_MAX_OUTPUTS];
    for (int j = 0; j < o->nin; j++)
        ins[j] = is_param(g, o->in[j]) ? param_key(r, o->in[j], l, sec) : in_key(r, i, l, o->in[j], sec);
    for (int j = 0; j < o->nout; j++)
        outk[j] = key(r, o->out[j], sec == WF_COST_SEC_LAYER ? l : -1);
    int gout = r->gb[outk[0]];
    if (o->kind == WF_OP_CROSS_ENTROPY) {
        double n = numel(g, o->in[0]);
        int dlp = buf_new(r, n * 4.0);  /* nll_loss_backward */
        int dx = buf_new(r, n * 4.0);   /* log_softmax_backward_data */
        buf_unref(r, dlp);
        buf_unref(r, privs[4 * u]);
        privs[4 * u] = -1;
        if (r->rb[o->in[0]] < 4.0) {
            int d16 = buf_new(r, n * r->rb[o->in[0]]);
            buf_unref(r, dx);
            dx = d16;
        }
        grad_add(r, ins[0], dx);
    } else if (view_op(o->kind)) {
        if (gout >= 0 && is_act(g, o->in[0])) {
            buf_ref(r, gout);
            grad_add(r, ins[0], gout);
        }
    } else if (o->kind == WF_OP_SPLIT) {
        if (is_act(g, o->in[0]))
            grad_add(r, ins[0], buf_new(r, numel(g, o->in[0]) * r->rb[o->in[0]]));
    } else if (o->kind == WF_OP_ATTENTION) {
        double nq = numel(g, o->in[0]);
        int d[3];
        for (int j = 0; j < 3; j++)
            d[j] = buf_new(r, nq * r->rb[o->in[0]]);
        /* softmax_d (b, h, s rounded to 128) and the fp32 dq accumulator
         * (b, s rounded, h, head dim rounded to 32): sizes at the model's
         * multiples of 128 and 32 are the log-sum-exp's and q's */
        int sd = buf_new(r, r->ctx->ops[i].fl_saved_scores * (double)r->mbs);
        int acc = r->rb[o->in[0]] < 4.0 ? buf_new(r, nq * 4.0) : -1;
        buf_unref(r, acc);
        buf_unref(r, sd);
        for (int j = 0; j < 3 && j < o->nin; j++) {
            int t = o->in[j];
            if (!is_act(g, t)) {
                buf_unref(r, d[j]);
                continue;
            }
            if (numel(g, t) < nq) { /* repeat_interleave's backward sums the heads */
                int s = buf_new(r, numel(g, t) * r->rb[t]);
                buf_unref(r, d[j]);
                d[j] = s;
            }
            grad_add(r, ins[j], d[j]);
        }
        for (int j = 0; j < 2; j++) {
            buf_unref(r, r->rep[2 * u + j]);
            r->rep[2 * u + j] = -1;
        }
        buf_unref(r, r->attn_out[u]);
        r->attn_out[u] = -1;
    } else {
        int add = o->kind == WF_OP_ADD || o->kind == WF_OP_BIAS_ADD;
        for (int j = 0; j < o->nin; j++) {
            int t = o->in[j], k = ins[j];
            if (is_param(g, t)) {
                weight_grad(r, numel(g, t), matrix);
                continue;
            }
            if (!is_act(g, t))
                continue;
            if (add && gout >= 0 && numel(g, t) == numel(g, o->out[0]) && r->rb[t] == r->rb[o->out[0]]) {
                buf_ref(r, gout);
                grad_add(r, k, gout);
            } else if (r->autocast && matrix && r->rb[t] >= 4.0) {
                int g16 = buf_new(r, numel(g, t) * r->e);
                int g32 = buf_new(r, numel(g, t) * 4.0);
                buf_unref(r, g16);
                grad_add(r, k, g32);
            } else {
                grad_add(r, k, buf_new(r, numel(g, t) * r->rb[t]));
            }
        }
    }
    /* what the op kept, and its outputs' gradients */
    for (int q = 0; q < 4; q++) {
        buf_unref(r, privs[4 * u + q]);
        privs[4 * u + q] = -1;
    }
    int saved[WF_MAX_SAVED];
    double pb[4];
    int np = 0, ns = op_saves(r, i, saved, pb, &np);
    for (int q = 0; q < ns; q++) {
        int cj, k = saved_input(r, o, u, ins, saved[q], &cj);
        if (k < 0)
            continue;
        if (cj >= 0) {
            buf_unref(r, r->acast[WF_MAX_INPUTS * u + cj]);
            r->acast[WF_MAX_INPUTS * u + cj] = -1;
        } else {
            drop(r, k);
        }
    }
    if (r->autocast && matrix)
        for (int j = 0; j < o->nin; j++) {
            int k = ins[j], t = o->in[j];
            if (is_param(g, t) && g->tensors[t].ndim >= 2 && r->cast[k] >= 0 && r->castsaved[k] > 0) {
                r->castsaved[k]--;
                buf_unref(r, r->cast[k]);
                if (r->castsaved[k] == 0)
                    r->cast[k] = -1;
            }
        }
    for (int j = 0; j < o->nout; j++) {
        buf_unref(r, r->gb[outk[j]]);
        r->gb[outk[j]] = -1;
    }
}

/* DDP's buckets (torch/nn/parallel/distributed.py, pytorch@0028a164:
 * _ddp_init_helper builds the Reducer at any world size, its buckets
 * assigned by dist._compute_bucket_assignment_by_size with the limits
 * [_DEFAULT_FIRST_BUCKET_BYTES (1 MiB), bucket_bytes_cap]: a bucket closes
 * once it holds at least its limit). At construction the parameters go in
 * definition order (here: the forward's first reads) and the buckets are
 * allocated in reverse; the rebuild at the second forward groups them in the
 * order their gradients became ready (the backward's: reverse) and
 * allocates before the old ones are freed. Returns how many into ids. */
static int buckets(pt_run *r, const double *pbytes, int np, double cap, int rebuilt, int *ids)
{
    double *grp = malloc((size_t)(np + 1) * sizeof *grp);
    if (!grp) {
        r->nomem = 1;
        return 0;
    }
    int nb = 0;
    double cur = 0, limit = 1048576.0;
    for (int q = 0; q < np; q++) {
        cur += pbytes[rebuilt ? np - 1 - q : q];
        if (cur >= limit || q == np - 1) {
            grp[nb++] = cur;
            cur = 0;
            limit = cap;
        }
    }
    for (int q = 0; q < nb; q++)
        ids[q] = buf_new(r, grp[rebuilt ? q : nb - 1 - q]);
    free(grp);
    return nb;
}

wf_status wf_cost_pytorch_step_memory(const wf_cost_ctx *ctx, const wf_plan *p, int64_t mbs, int iters,
                                      double cap_bytes, wf_pt_step_memory *out)
{
    memset(out, 0, sizeof *out);
    const wf_cost_var *v = &ctx->var;
    if (!ctx->transformer || v->sw != WF_SW_PYTORCH || !v->flash || p->rc_n > 0 || p->rc_layers > 0 ||
        p->tp > 1 || p->pp > 1 || p->cp > 1 || ctx->model.experts > 0 || mbs < 1)
        return WF_OK;
    /* the script's checkpoints (src/cli/export_pytorch.c): recompute=full
     * wraps each block, selective the attention core, in
     * torch.utils.checkpoint(use_reentrant=False) */
    const int full = p->recompute == WF_RECOMPUTE_FULL, selective = p->recompute == WF_RECOMPUTE_SELECTIVE;
    wf_model_config one = ctx->model;
    one.layers = 1;
    one.first_dense = 0;
    wf_graph g;
    wf_status st = wf_model_build(&one, mbs, &g);
    if (st != WF_OK) {
        wf_graph_free(&g);
        return st;
    }
    pt_run R;
    memset(&R, 0, sizeof R);
    pt_run *r = &R;
    r->ctx = ctx;
    r->g = &g;
    r->L = (int)ctx->model.layers;
    r->nt = g.ntensors;
    r->nk = r->nt * (r->L + 1);
    r->autocast = v->autocast;
    r->flash = v->flash;
    r->e = ctx->elem_bytes;
    r->mbs = mbs;
    r->resid_in = r->layer_out = -1;
    int first_layer_op = g.nfwd, last_layer_op = -1, nlay = 0;
    for (int i = 0; i < g.nfwd; i++)
        if (g.ops[i].block >= 0) {
            first_layer_op = i < first_layer_op ? i : first_layer_op;
            last_layer_op = i;
            nlay++;
        }
    r->nu = (g.nfwd - nlay) + nlay * r->L;
    size_t nk = (size_t)r->nk, nu = (size_t)r->nu;
    r->tb = malloc(nk * sizeof(int));
    r->holds = calloc(nk, sizeof(int));
    r->gb = malloc(nk * sizeof(int));
    r->cast = malloc(nk * sizeof(int));
    r->castsaved = calloc(nk, sizeof(int));
    r->incache = calloc(nk, 1);
    r->last_use = malloc(nk * sizeof(int));
    r->rb = calloc((size_t)r->nt, sizeof(double));
    r->tied = calloc((size_t)r->nt, 1);
    r->acast = malloc(WF_MAX_INPUTS * nu * sizeof(int));
    r->uop = malloc(nu * sizeof(int));
    r->ulay = malloc(nu * sizeof(int));
    r->priv = malloc(4 * nu * sizeof(int));
    r->rep = malloc(2 * nu * sizeof(int));
    r->attn_out = malloc(nu * sizeof(int));
    double *pbytes = malloc(nk * sizeof(double));
    int *pkey = malloc(nk * sizeof(int));
    int *bk = malloc((nk + 2) * sizeof(int)), *bk2 = malloc((nk + 2) * sizeof(int));
    char *pseen = calloc(nk, 1);
    if (!r->tb || !r->holds || !r->gb || !r->cast || !r->castsaved || !r->incache || !r->last_use || !r->rb || !r->tied ||
        !r->acast ||
        !r->uop || !r->ulay || !r->priv || !r->rep || !r->attn_out || !pbytes || !pkey || !bk || !bk2 || !pseen) {
        st = wf_errorf(WF_NOMEM, "out of memory replaying the allocator for model '%s'", ctx->model.name);
        goto done;
    }
    dtypes(r);
    {
        /* parameters read both before the layers and after them */
        char *pre = calloc((size_t)r->nt, 1);
        if (!pre) {
            st = wf_errorf(WF_NOMEM, "out of memory replaying the allocator for model '%s'", ctx->model.name);
            goto done;
        }
        for (int i = 0; i < g.nfwd; i++)
            if (g.ops[i].block < 0)
                for (int j = 0; j < g.ops[i].nin; j++) {
                    int t = g.ops[i].in[j];
                    if (!is_param(&g, t))
                        continue;
                    if (i < first_layer_op)
                        pre[t] = 1;
                    else if (pre[t])
                        r->tied[t] = 1;
                }
        free(pre);
    }
    /* the layer's residual input and output */
    for (int i = first_layer_op; i <= last_layer_op; i++)
        for (int j = 0; j < g.ops[i].nin; j++) {
            int t = g.ops[i].in[j], pr = g.tensors[t].producer;
            if (is_act(&g, t) && (pr < 0 || g.ops[pr].block < 0) && r->resid_in < 0)
                r->resid_in = t;
        }
    for (int i = last_layer_op + 1; i < g.nfwd; i++)
        for (int j = 0; j < g.ops[i].nin; j++) {
            int t = g.ops[i].in[j], pr = g.tensors[t].producer;
            if (pr >= 0 && g.ops[pr].block >= 0)
                r->layer_out = t;
        }
    /* the unrolled forward */
    int u = 0;
    for (int i = 0; i < first_layer_op; i++, u++) {
        r->uop[u] = i;
        r->ulay[u] = -1;
    }
    for (int l = 0; l < r->L; l++)
        for (int i = first_layer_op; i <= last_layer_op; i++)
            if (g.ops[i].block >= 0) {
                r->uop[u] = i;
                r->ulay[u++] = l;
            }
    for (int i = last_layer_op + 1; i < g.nfwd; i++, u++) {
        r->uop[u] = i;
        r->ulay[u] = -1;
    }
    r->nu = u;
    /* last readers (a view holds its source's storage itself), parameters
     * in the order the forward first reads them */
    for (size_t k = 0; k < nk; k++)
        r->last_use[k] = -1;
    int np = 0;
    for (u = 0; u < r->nu; u++) {
        int i = r->uop[u], l = r->ulay[u], sec = sec_of(&g, i, first_layer_op);
        const wf_op *o = &g.ops[i];
        for (int j = 0; j < o->nin; j++) {
            int t = o->in[j];
            if (is_param(&g, t)) {
                int k = param_key(r, t, l, sec);
                if (!pseen[k]) {
                    pseen[k] = 1;
                    pkey[np] = k;
                    pbytes[np++] = numel(&g, t) * 4.0;
                }
                continue;
            }
            int k = in_key(r, i, l, t, sec);
            r->last_use[k] = u;
        }
    }
    {
        double cap = ctx->var.dp > 0 && p->comm.threshold_bytes > 0 ? p->comm.threshold_bytes : WF_SCHED_DDP_BUCKET_BYTES;
        uint64_t capb = cap_bytes > 0 ? (uint64_t)cap_bytes : 0;
        r->a = wf_alloc_new(capb);
        if (!r->a) {
            st = wf_errorf(WF_NOMEM, "out of memory replaying the allocator for model '%s'", ctx->model.name);
            goto done;
        }
        for (size_t k = 0; k < nk; k++)
            r->tb[k] = r->gb[k] = r->cast[k] = -1;
        for (size_t q = 0; q < 4 * nu; q++)
            r->priv[q] = -1;
        for (size_t q = 0; q < 2 * nu; q++)
            r->rep[q] = -1;
        for (size_t q = 0; q < nu; q++)
            r->attn_out[q] = -1;
        for (size_t q = 0; q < WF_MAX_INPUTS * nu; q++)
            r->acast[q] = -1;
        /* Model().to(device): the fp32 parameters; DDP: its buckets */
        for (int q = 0; q < np; q++)
            (void)buf_new(r, pbytes[q]);
        int nb = buckets(r, pbytes, np, cap, 0, bk);
        double persistent = (double)wf_alloc_stats_of(r->a)->allocated;
        int prev_logits = -1, prev_in[2] = {-1, -1};
        for (int it = 0; it < iters && !r->failed && !r->nomem; it++) {
            /* the batch: next(data) */
            int ids = -1, labels = -1;
            for (int t = 0; t < g.ntensors; t++) {
                if (g.tensors[t].role == WF_ROLE_INPUT || g.tensors[t].role == WF_ROLE_LABEL) {
                    int b = buf_new(r, (double)wf_tensor_bytes(&g.tensors[t]));
                    r->tb[key(r, t, -1)] = b;
                    r->holds[key(r, t, -1)] = 1;
                    if (g.tensors[t].role == WF_ROLE_INPUT)
                        ids = b;
                    else
                        labels = b;
                }
            }
            buf_unref(r, prev_in[0]);
            buf_unref(r, prev_in[1]);
            prev_in[0] = ids;
            prev_in[1] = labels;
            for (int t = 0; t < g.ntensors; t++)
                if (g.tensors[t].role == WF_ROLE_INPUT || g.tensors[t].role == WF_ROLE_LABEL)
                    buf_ref(r, r->tb[key(r, t, -1)]);
            if (it == 1) { /* Reducer::rebuild_buckets at the second forward */
                int nb2 = buckets(r, pbytes, np, cap, 1, bk2);
                for (int q = 0; q < nb; q++)
                    buf_unref(r, bk[q]);
                memcpy(bk, bk2, (size_t)nb2 * sizeof *bk);
                nb = nb2;
            }
            int loss_u = -1;
            for (u = 0; u < r->nu; u++) {
                if (g.ops[r->uop[u]].kind == WF_OP_CROSS_ENTROPY) {
                    /* model(inputs) has returned: autocast's cache goes, and
                     * `logits` lets the previous step's go */
                    cache_exit(r, pkey, np);
                    int lk = in_key(r, r->uop[u], -1, g.ops[r->uop[u]].in[0], WF_COST_SEC_POST);
                    buf_unref(r, prev_logits);
                    prev_logits = r->tb[lk];
                    buf_ref(r, prev_logits);
                    loss_u = u;
                }
                int ui = r->uop[u], ul = r->ulay[u];
                int ck = full && ul >= 0;
                int sel = selective && g.ops[ui].kind == WF_OP_ATTENTION;
                if (ck && ui == first_layer_op) /* checkpoint keeps the block's input */
                    r->holds[layer_in(r, ul)]++;
                if (sel) /* checkpoint keeps q, k and v */
                    for (int j = 0; j < 3 && j < g.ops[ui].nin; j++)
                        r->holds[in_key(r, ui, ul, g.ops[ui].in[j], WF_COST_SEC_LAYER)]++;
                forward_op(r, u, first_layer_op, r->priv, ck || sel ? FWD_NOSAVE : FWD_RUN, -1);
            }
            if (loss_u >= 0) { /* loss.backward(): the seed gradient */
                int ok = key(r, g.ops[r->uop[loss_u]].out[0], -1);
                r->gb[ok] = buf_new(r, 4.0);
            }
            for (u = r->nu - 1; u >= 0; u--) {
                int ui = r->uop[u], ul = r->ulay[u];
                int ck = full && ul >= 0;
                int sel = selective && g.ops[ui].kind == WF_OP_ATTENTION;
                if (ck && ui == last_layer_op) { /* the block runs again, then its backward */
                    for (int w = u - nlay + 1; w <= u; w++)
                        forward_op(r, w, first_layer_op, r->priv, FWD_RECOMPUTE, u);
                    cache_exit(r, pkey, np);
                }
                if (sel) {
                    forward_op(r, u, first_layer_op, r->priv, FWD_RECOMPUTE, u);
                    cache_exit(r, pkey, np);
                }
                backward_op(r, u, first_layer_op, r->priv);
                if (ck && ui == first_layer_op)
                    drop(r, layer_in(r, ul));
                if (sel)
                    for (int j = 0; j < 3 && j < g.ops[ui].nin; j++)
                        drop(r, in_key(r, ui, ul, g.ops[ui].in[j], WF_COST_SEC_LAYER));
            }
            /* everything the step held goes with it */
            for (size_t k = 0; k < nk; k++) {
                if (r->gb[k] >= 0) {
                    buf_unref(r, r->gb[k]);
                    r->gb[k] = -1;
                }
                if (r->holds[k] > 0 && r->tb[k] >= 0 && !(is_param(&g, (int)(k % (size_t)r->nt)))) {
                    r->holds[k] = 0;
                    buf_unref(r, r->tb[k]);
                    r->tb[k] = -1;
                }
            }
            if (it == 0) /* fused AdamW's state: step, exp_avg, exp_avg_sq */
                for (int q = 0; q < np; q++) {
                    (void)buf_new(r, 4.0);
                    (void)buf_new(r, pbytes[q]);
                    (void)buf_new(r, pbytes[q]);
                }
        }
        const wf_alloc_stats *s = wf_alloc_stats_of(r->a);
        if (r->nomem) {
            st = wf_errorf(WF_NOMEM, "out of memory replaying the allocator for model '%s'", ctx->model.name);
            goto done;
        }
        out->applies = 1;
        out->fits = !r->failed;
        out->stats = *s;
        out->peak_allocated = (double)s->peak_allocated;
        out->peak_reserved = (double)s->peak_reserved;
        if (r->failed && (double)(s->oom_reserved + s->oom_request) > out->peak_reserved)
            out->peak_reserved = (double)(s->oom_reserved + s->oom_request);
        double moments = 0;
        for (int q = 0; q < np; q++)
            moments += 2.0 * pbytes[q];
        out->persistent = persistent + moments;
    }
done:
    wf_alloc_free_all(r->a);
    free(r->buf);
    free(r->tb);
    free(r->holds);
    free(r->gb);
    free(r->cast);
    free(r->castsaved);
    free(r->incache);
    free(r->last_use);
    free(r->rb);
    free(r->tied);
    free(r->acast);
    free(r->uop);
    free(r->ulay);
    free(r->priv);
    free(r->rep);
    free(r->attn_out);
    free(pbytes);
    free(pkey);
    free(bk);
    free(bk2);
    free(pseen);
    wf_graph_free(&g);
    return st;
}
