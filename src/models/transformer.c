/* Transformer builders: GPT (Megatron-LM layout), Llama and BERT; Llama
 * layers may be mixtures of experts (Mixtral, DeepSeek-V3) and use
 * multi-head latent attention (DeepSeek-V2/V3).
 *
 * Symbols: B batch, S sequence, H hidden, A heads, Akv key/value heads,
 * D = H/A head dim, F ffn width, V vocabulary, L layers; E experts, K
 * experts per token, Fe an expert's width, C tokens per expert.
 *
 * Every op is stamped with its Megatron tensor-parallel role: the qkv and
 * first MLP linears split their output features (COL), the attention output
 * and second MLP linears split their input features (ROW), everything between
 * them works on the split activation (SHARD), embedding and logits split the
 * vocabulary (VOCAB), and norms, residual adds and the dropouts after the row
 * linears are replicated (NONE). The router and the routed experts are
 * replicated too (no tensor parallelism inside an expert; a shared expert
 * splits like a dense MLP), as are MLA's down-projections to its latents.
 * Layer i is stamped block 0, layer i; the embedding and the head are
 * unstamped (-1, -1). */
#include "models/models-impl.h"

#include <string.h>

#define GPT_DROPOUT 0.1
#define GPT_LN_EPS 1e-5
#define BERT_LN_EPS 1e-12
#define LLAMA_NORM_EPS 1e-5

/* Short-hands over the graph's sticky-error calls; each returns a tensor. */

static int op1(wf_graph *g, wf_op_kind k, const char *name, int a, int b, int c,
               const wf_op_attrs *attr)
{
    return wf_model_op(g, k, name, a, b, c, -1, attr);
}

static int rmsnorm(wf_graph *g, const char *name, int x, int64_t H, wf_dtype dt)
{
    return wf_model_rmsnorm(g, name, x, H, LLAMA_NORM_EPS, dt);
}

static int reshape(wf_graph *g, const char *name, int x, int ndim, int64_t d0, int64_t d1,
                   int64_t d2)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.ndim = ndim;
    a.shape[0] = d0;
    a.shape[1] = d1;
    a.shape[2] = d2;
    return op1(g, WF_OP_RESHAPE, name, x, -1, -1, &a);
}

/* Splits qkv[B,S,(A+2Akv)D] into q, k, v; returns the op (outputs 0..2). */
static int split_qkv(wf_graph *g, const char *name, int qkv, int64_t qw, int64_t kvw)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.axis = 2;
    a.nsplit = 3;
    a.sizes[0] = qw;
    a.sizes[1] = kvw;
    a.sizes[2] = kvw;
    if (g->status != WF_OK)
        return -1;
    return wf_graph_add_op(g, WF_OP_SPLIT, name, &qkv, 1, &a);
}

static int attention(wf_graph *g, const char *name, int q, int k, int v, int64_t A, int64_t Akv,
                     int causal, double p)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.heads = (int)A;
    a.kv_heads = (int)Akv;
    a.causal = causal;
    a.p = p;
    a.seed = wf_model_seed(g);
    return op1(g, WF_OP_ATTENTION, name, q, k, v, &a);
}

/* Self-attention with fused qkv: x[B,S,H] -> [B,S,H] (before the residual).
 * rotary: apply rotary embeddings to q and k (Llama). */
static int self_attention(wf_graph *g, const char *pfx, int x, const wf_model_config *m, int bias,
                          int rotary, double p)
{
    char n[WF_NAME_LEN];
    int64_t H = m->hidden, A = m->heads, Akv = m->kv_heads, D = H / A;
    wf_graph_set_tp(g, WF_TP_COL);
    int qkv = wf_model_linear(g, wf_model_name(n, "%s.attn.qkv", pfx), x, H, (A + 2 * Akv) * D, bias,
                     m->dtype);
    wf_graph_set_tp(g, WF_TP_SHARD);
    int sp = split_qkv(g, wf_model_name(n, "%s.attn.split", pfx), qkv, A * D, Akv * D);
    int q = wf_graph_op_output(g, sp, 0), k = wf_graph_op_output(g, sp, 1),
        v = wf_graph_op_output(g, sp, 2);
    if (rotary) {
        wf_op_attrs a;
        memset(&a, 0, sizeof a);
        a.heads = (int)A;
        q = op1(g, WF_OP_ROTARY, wf_model_name(n, "%s.attn.rotary_q", pfx), q, -1, -1, &a);
        a.heads = (int)Akv;
        k = op1(g, WF_OP_ROTARY, wf_model_name(n, "%s.attn.rotary_k", pfx), k, -1, -1, &a);
    }
    int o = attention(g, wf_model_name(n, "%s.attn.core", pfx), q, k, v, A, Akv, m->causal, p);
    wf_graph_set_tp(g, WF_TP_ROW);
    o = wf_model_linear(g, wf_model_name(n, "%s.attn.proj", pfx), o, H, H, bias, m->dtype);
    wf_graph_set_tp(g, WF_TP_NONE);
    return o;
}

/* GELU MLP: x[B,S,H] -> [B,S,H] (before the residual). */
static int gelu_mlp(wf_graph *g, const char *pfx, int x, const wf_model_config *m)
{
    char n[WF_NAME_LEN];
    wf_graph_set_tp(g, WF_TP_COL);
    int f = wf_model_linear(g, wf_model_name(n, "%s.mlp.fc1", pfx), x, m->hidden, m->ffn, 1, m->dtype);
    wf_graph_set_tp(g, WF_TP_SHARD);
    f = wf_model_unary(g, WF_OP_GELU, wf_model_name(n, "%s.mlp.gelu", pfx), f);
    wf_graph_set_tp(g, WF_TP_ROW);
    f = wf_model_linear(g, wf_model_name(n, "%s.mlp.fc2", pfx), f, m->ffn, m->hidden, 1, m->dtype);
    wf_graph_set_tp(g, WF_TP_NONE);
    return f;
}

static void add_inputs(wf_graph *g, const wf_model_config *m, int64_t batch, int *ids, int *labels)
{
    int64_t shape[2] = {batch, m->seq};
    *ids = wf_graph_add_tensor(g, "ids", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, shape);
    *labels = wf_graph_add_tensor(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 2, shape);
}

/* Token embedding ids[B,S] with a new table[V,H] (its id into *table) ->
 * [B,S,H], split over the vocabulary. */
static int token_embedding(wf_graph *g, const wf_model_config *m, int ids, int *table)
{
    *table = wf_model_param(g, m->dtype, 2, m->vocab, m->hidden, 0, 0, "embed.tokens.weight");
    wf_graph_set_tp(g, WF_TP_VOCAB);
    int x = wf_model_binary(g, WF_OP_EMBEDDING, "embed.tokens", ids, *table);
    wf_graph_set_tp(g, WF_TP_NONE);
    return x;
}

/* x[B,S,H] + learned positions[S,H]. */
static int add_positions(wf_graph *g, const wf_model_config *m, int x)
{
    int pos = wf_model_param(g, m->dtype, 2, m->seq, m->hidden, 0, 0, "embed.positions.weight");
    return wf_model_binary(g, WF_OP_ADD, "embed.add_positions", x, pos);
}

/* The residual x + o of a layer's `part` ("attn" or "mlp"). */
static int residual(wf_graph *g, const char *pfx, const char *part, int x, int o)
{
    char n[WF_NAME_LEN];
    return wf_model_binary(g, WF_OP_ADD, wf_model_name(n, "%s.%s.residual", pfx, part), x, o);
}

/* The residual x + wf_model_dropout(o) of a layer's `part` ("attn" or "mlp"). */
static int dropout_residual(wf_graph *g, const char *pfx, const char *part, int x, int o)
{
    char n[WF_NAME_LEN];
    o = wf_model_dropout(g, wf_model_name(n, "%s.%s.dropout", pfx, part), o, GPT_DROPOUT);
    return residual(g, pfx, part, x, o);
}

/* Tied output head: x[B,S,H] . table[V,H]^T (+ bias[V]) -> logits[B,S,V] -> loss. */
static void tied_head(wf_graph *g, const wf_model_config *m, int64_t batch, int x, int table,
                      int bias, int labels)
{
    int64_t B = batch, S = m->seq, H = m->hidden, V = m->vocab;
    x = reshape(g, "head.flatten", x, 2, B * S, H, 0); /* [B*S,H] */
    wf_graph_set_tp(g, WF_TP_VOCAB);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.trans_b = 1;
    int logits = op1(g, WF_OP_MATMUL, "head.logits", x, table, -1, &a); /* [B*S,V] */
    if (bias >= 0)
        logits = wf_model_binary(g, WF_OP_BIAS_ADD, "head.bias", logits, bias);
    logits = reshape(g, "head.unflatten", logits, 3, B, S, V); /* [B,S,V] */
    wf_model_binary(g, WF_OP_CROSS_ENTROPY, "loss", logits, labels);
    wf_graph_set_tp(g, WF_TP_NONE);
}

/* GPT (Megatron-LM): pre-LN layers, GELU MLP, learned positions, tied head. */
wf_status wf_build_gpt(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    int64_t H = m->hidden;
    wf_dtype dt = m->dtype;
    char n[WF_NAME_LEN], pfx[WF_NAME_LEN];
    int ids, labels;
    wf_graph_set_block(g, -1, -1);
    add_inputs(g, m, batch, &ids, &labels);
    int wte; /* [V,H] */
    int x = token_embedding(g, m, ids, &wte); /* [B,S,H] */
    x = add_positions(g, m, x);
    x = wf_model_dropout(g, "embed.dropout", x, GPT_DROPOUT);
    for (int64_t i = 0; i < m->layers; i++) {
        wf_graph_set_block(g, 0, (int)i);
        wf_model_name(pfx, "layers.%d", (int)i);
        int h = wf_model_layernorm(g, wf_model_name(n, "%s.ln1", pfx), x, H, GPT_LN_EPS, dt);
        int o = self_attention(g, pfx, h, m, 1, 0, GPT_DROPOUT);
        x = dropout_residual(g, pfx, "attn", x, o);
        h = wf_model_layernorm(g, wf_model_name(n, "%s.ln2", pfx), x, H, GPT_LN_EPS, dt);
        o = gelu_mlp(g, pfx, h, m);
        x = dropout_residual(g, pfx, "mlp", x, o);
    }
    wf_graph_set_block(g, -1, -1);
    x = wf_model_layernorm(g, "final.ln", x, H, GPT_LN_EPS, dt);
    tied_head(g, m, batch, x, wte, -1, labels);
    return g->status;
}

/* SwiGLU MLP down(silu(gate(x)) * up(x)): x[B,S,H] -> [B,S,H] (before the
 * residual); `part` names it ("mlp" or "moe.shared"). */
static int swiglu_mlp(wf_graph *g, const char *pfx, const char *part, int x, int64_t H, int64_t F,
                      wf_dtype dt)
{
    char n[WF_NAME_LEN];
    wf_graph_set_tp(g, WF_TP_COL);
    int gate = wf_model_linear(g, wf_model_name(n, "%s.%s.gate", pfx, part), x, H, F, 0, dt); /* [B,S,F] */
    int up = wf_model_linear(g, wf_model_name(n, "%s.%s.up", pfx, part), x, H, F, 0, dt);
    wf_graph_set_tp(g, WF_TP_SHARD);
    gate = wf_model_unary(g, WF_OP_SILU, wf_model_name(n, "%s.%s.silu", pfx, part), gate);
    int o = wf_model_binary(g, WF_OP_MUL, wf_model_name(n, "%s.%s.mul", pfx, part), gate, up);
    wf_graph_set_tp(g, WF_TP_ROW);
    o = wf_model_linear(g, wf_model_name(n, "%s.%s.down", pfx, part), o, F, H, 0, dt);
    wf_graph_set_tp(g, WF_TP_NONE);
    return o;
}

/* Mixture-of-experts MLP: x[B,S,H] -> router -> dispatch [E,C,H] -> grouped
 * SwiGLU experts -> combine [B,S,H] (+ the shared expert on every token). */
static int moe_mlp(wf_graph *g, const char *pfx, int x, const wf_model_config *m)
{
    char n[WF_NAME_LEN];
    int64_t H = m->hidden, E = m->experts, Fe = m->moe_ffn;
    wf_dtype dt = m->dtype;
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.experts = (int)E;
    a.top_k = (int)m->top_k;
    a.score = m->moe_score;
    a.act = WF_MOE_ACT_SWIGLU;
    a.capacity_factor = m->capacity_factor;
    int wr = wf_model_param(g, dt, 2, H, E, 0, 0, "%s.moe.router.weight", pfx); /* [H,E] */
    int w1 = wf_model_param(g, dt, 3, E, H, 2 * Fe, 0, "%s.moe.experts.w1", pfx); /* [E,H,2Fe] */
    int w2 = wf_model_param(g, dt, 3, E, Fe, H, 0, "%s.moe.experts.w2", pfx);     /* [E,Fe,H] */
    if (g->status != WF_OK)
        return -1;
    int in[3] = {x, wr, -1};
    int r = wf_graph_add_op(g, WF_OP_ROUTER, wf_model_name(n, "%s.moe.router", pfx), in, 2, &a);
    int weights = wf_graph_op_output(g, r, 0), ids = wf_graph_op_output(g, r, 1); /* [B,S,K] */
    int xe = op1(g, WF_OP_MOE_DISPATCH, wf_model_name(n, "%s.moe.dispatch", pfx), x, ids, -1,
                 &a); /* [E,C,H] */
    int ye = op1(g, WF_OP_GROUPED_MLP, wf_model_name(n, "%s.moe.experts", pfx), xe, w1, w2, &a);
    int o = op1(g, WF_OP_MOE_COMBINE, wf_model_name(n, "%s.moe.combine", pfx), ye, weights, ids,
                &a); /* [B,S,H] */
    int64_t Fs = m->shared_ffn;
    if (Fs > 0) {
        int sh = swiglu_mlp(g, pfx, "moe.shared", x, H, Fs, dt);
        o = wf_model_binary(g, WF_OP_ADD, wf_model_name(n, "%s.moe.add_shared", pfx), o, sh);
    }
    return o;
}

/* Multi-head latent attention (DeepSeek-V2/V3) in a stand-in form that
 * keeps its parameters and projections exact: q = q_b(rmsnorm(q_a(x)))
 * [B,S,A*(nope+rope)] (or one projection when q_lora is 0); kv_a(x) gives
 * the latent [B,S,kv_lora] and a rope key [B,S,rope] shared by the heads;
 * kv_b(rmsnorm(latent)) gives per-head keys and values [B,S,A*(nope+v)].
 * The attention core runs on the rotary-free parts with head dim nope = v
 * (q_nope, k_nope, v): weft's attention op has one head dim for q, k and v,
 * so the rope half of each score (rope/(nope+rope) of QK^T, 1/3 for
 * DeepSeek-V3) and the rotary of the rope parts are not costed, and the
 * rope slices of q and kv_a's output feed nothing. Output o[A*v] -> H. */
static int mla_attention(wf_graph *g, const char *pfx, int x, const wf_model_config *m)
{
    char n[WF_NAME_LEN];
    int64_t H = m->hidden, A = m->heads, nope = m->qk_nope, rope = m->qk_rope, vd = m->v_head;
    wf_dtype dt = m->dtype;
    int q;
    if (m->q_lora > 0) {
        q = wf_model_linear(g, wf_model_name(n, "%s.attn.q_a", pfx), x, H, m->q_lora, 0, dt);
        q = rmsnorm(g, wf_model_name(n, "%s.attn.q_norm", pfx), q, m->q_lora, dt);
        wf_graph_set_tp(g, WF_TP_COL);
        q = wf_model_linear(g, wf_model_name(n, "%s.attn.q_b", pfx), q, m->q_lora, A * (nope + rope), 0, dt);
    } else {
        wf_graph_set_tp(g, WF_TP_COL);
        q = wf_model_linear(g, wf_model_name(n, "%s.attn.q", pfx), x, H, A * (nope + rope), 0, dt);
    }
    wf_graph_set_tp(g, WF_TP_NONE);
    int kva = wf_model_linear(g, wf_model_name(n, "%s.attn.kv_a", pfx), x, H, m->kv_lora + rope, 0, dt);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.axis = 2;
    a.nsplit = 2;
    a.sizes[0] = m->kv_lora;
    a.sizes[1] = rope;
    int sp = g->status == WF_OK ? wf_graph_add_op(g, WF_OP_SPLIT,
                                                  wf_model_name(n, "%s.attn.kv_a_split", pfx),
                                                  &kva, 1, &a)
                                : -1;
    int lat = rmsnorm(g, wf_model_name(n, "%s.attn.kv_norm", pfx), wf_graph_op_output(g, sp, 0),
                      m->kv_lora, dt);
    wf_graph_set_tp(g, WF_TP_COL);
    int kv = wf_model_linear(g, wf_model_name(n, "%s.attn.kv_b", pfx), lat, m->kv_lora, A * (nope + vd), 0,
                    dt);
    wf_graph_set_tp(g, WF_TP_SHARD);
    a.sizes[0] = A * nope;
    a.sizes[1] = A * rope;
    int qs = g->status == WF_OK ? wf_graph_add_op(g, WF_OP_SPLIT,
                                                  wf_model_name(n, "%s.attn.q_split", pfx), &q,
                                                  1, &a)
                                : -1;
    a.sizes[0] = A * nope;
    a.sizes[1] = A * vd;
    int kvs = g->status == WF_OK ? wf_graph_add_op(g, WF_OP_SPLIT,
                                                   wf_model_name(n, "%s.attn.kv_split", pfx), &kv,
                                                   1, &a)
                                 : -1;
    int o = attention(g, wf_model_name(n, "%s.attn.core", pfx), wf_graph_op_output(g, qs, 0),
                      wf_graph_op_output(g, kvs, 0), wf_graph_op_output(g, kvs, 1), A, A,
                      m->causal, 0.0);
    wf_graph_set_tp(g, WF_TP_ROW);
    o = wf_model_linear(g, wf_model_name(n, "%s.attn.proj", pfx), o, A * vd, H, 0, dt);
    wf_graph_set_tp(g, WF_TP_NONE);
    return o;
}

/* Whether layer i of m has experts (see wf_model_config). */
static int moe_layer(const wf_model_config *m, int64_t i)
{
    int64_t f = m->moe_freq > 0 ? m->moe_freq : 1;
    return m->experts > 0 && i >= m->first_dense && i % f == 0;
}

/* Llama: pre-RMSNorm layers, rotary q/k, grouped-query attention (or MLA),
 * SwiGLU MLP (down(silu(gate) * up)) or a mixture of SwiGLU experts, no
 * biases, no dropout, an untied output head unless m->tie_embeddings. */
wf_status wf_build_llama(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    int64_t H = m->hidden, V = m->vocab, F = m->ffn;
    wf_dtype dt = m->dtype;
    char n[WF_NAME_LEN], pfx[WF_NAME_LEN];
    int ids, labels;
    wf_graph_set_block(g, -1, -1);
    add_inputs(g, m, batch, &ids, &labels);
    int tab; /* [V,H] */
    int x = token_embedding(g, m, ids, &tab); /* [B,S,H] */
    for (int64_t i = 0; i < m->layers; i++) {
        wf_graph_set_block(g, 0, (int)i);
        wf_model_name(pfx, "layers.%d", (int)i);
        int h = rmsnorm(g, wf_model_name(n, "%s.attn_norm", pfx), x, H, dt);
        int o = m->kv_lora > 0 ? mla_attention(g, pfx, h, m) : self_attention(g, pfx, h, m, 0, 1, 0.0);
        x = residual(g, pfx, "attn", x, o);
        h = rmsnorm(g, wf_model_name(n, "%s.mlp_norm", pfx), x, H, dt);
        o = moe_layer(m, i) ? moe_mlp(g, pfx, h, m) : swiglu_mlp(g, pfx, "mlp", h, H, F, dt);
        x = residual(g, pfx, "mlp", x, o);
    }
    wf_graph_set_block(g, -1, -1);
    x = rmsnorm(g, "final.norm", x, H, dt);
    if (m->tie_embeddings) { /* the head reads the embedding's table (Llama 3.2 1B/3B, small Qwen2.5) */
        tied_head(g, m, batch, x, tab, -1, labels);
        return g->status;
    }
    wf_graph_set_tp(g, WF_TP_VOCAB);
    int logits = wf_model_linear(g, "head.logits", x, H, V, 0, dt); /* [B,S,V] */
    wf_model_binary(g, WF_OP_CROSS_ENTROPY, "loss", logits, labels);
    wf_graph_set_tp(g, WF_TP_NONE);
    return g->status;
}

/* BertForPreTraining's second task: the pooler (dense and tanh on the first
 * token's hidden state) and the next-sentence classifier (2 classes) with its
 * own cross-entropy over nsp_labels[B]; the loss is the sum of the masked-LM
 * loss and this one, as BertForPreTraining adds them (Hugging Face
 * transformers, models/bert/modeling_bert.py, BertPooler and
 * BertOnlyNSPHead/BertPreTrainingHeads). enc is the encoder output [B,S,H]. */
static void nsp_head(wf_graph *g, const wf_model_config *m, int64_t batch, int enc)
{
    int64_t B = batch, S = m->seq, H = m->hidden;
    wf_dtype dt = m->dtype;
    int mlm = g->loss;
    int cls = enc;
    if (S > 1) {
        wf_op_attrs a;
        memset(&a, 0, sizeof a);
        a.axis = 1;
        a.nsplit = 2;
        a.sizes[0] = 1;
        a.sizes[1] = S - 1;
        int in[1] = {enc};
        cls = wf_graph_op_output(g, wf_graph_add_op(g, WF_OP_SPLIT, "pooler.first_token", in, 1, &a), 0);
    }
    cls = reshape(g, "pooler.flatten", cls, 2, B, H, 0);              /* [B,H] */
    cls = wf_model_linear(g, "pooler.dense", cls, H, H, 1, dt);                 /* [B,H] */
    cls = wf_model_unary(g, WF_OP_TANH, "pooler.tanh", cls);
    int logits = wf_model_linear(g, "nsp.logits", cls, H, 2, 1, dt);           /* [B,2] */
    int nsp_labels = wf_graph_add_tensor(g, "nsp_labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, &B);
    int nsp = wf_model_binary(g, WF_OP_CROSS_ENTROPY, "nsp.loss", logits, nsp_labels);
    int total = wf_model_binary(g, WF_OP_ADD, "loss.total", mlm, nsp);
    if (g->status == WF_OK)
        g->loss = total;
}

/* BERT: word + position + token-type embeddings, post-LN encoder layers with
 * bidirectional attention, and the masked-LM head (dense, GELU, LayerNorm,
 * decoder tied to the word embedding plus a bias). The loss is taken over
 * every position (the cost of a 15% mask differs only in the head's loss). */
wf_status wf_build_bert(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    int64_t H = m->hidden, S = m->seq, V = m->vocab;
    wf_dtype dt = m->dtype;
    char n[WF_NAME_LEN], pfx[WF_NAME_LEN];
    int ids, labels;
    wf_graph_set_block(g, -1, -1);
    add_inputs(g, m, batch, &ids, &labels);
    int64_t tshape[2] = {batch, S};
    int types = wf_graph_add_tensor(g, "token_types", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, tshape);
    int word; /* [V,H] */
    int x = token_embedding(g, m, ids, &word); /* [B,S,H] */
    x = add_positions(g, m, x);
    int ttab = wf_model_param(g, dt, 2, 2, H, 0, 0, "embed.token_types.weight"); /* [2,H] */
    int t = wf_model_binary(g, WF_OP_EMBEDDING, "embed.token_types", types, ttab);
    x = wf_model_binary(g, WF_OP_ADD, "embed.add_token_types", x, t);
    x = wf_model_layernorm(g, "embed.ln", x, H, BERT_LN_EPS, dt);
    x = wf_model_dropout(g, "embed.dropout", x, GPT_DROPOUT);
    for (int64_t i = 0; i < m->layers; i++) {
        wf_graph_set_block(g, 0, (int)i);
        wf_model_name(pfx, "layers.%d", (int)i);
        int o = self_attention(g, pfx, x, m, 1, 0, GPT_DROPOUT);
        x = dropout_residual(g, pfx, "attn", x, o);
        x = wf_model_layernorm(g, wf_model_name(n, "%s.ln1", pfx), x, H, BERT_LN_EPS, dt);
        o = gelu_mlp(g, pfx, x, m);
        x = dropout_residual(g, pfx, "mlp", x, o);
        x = wf_model_layernorm(g, wf_model_name(n, "%s.ln2", pfx), x, H, BERT_LN_EPS, dt);
    }
    wf_graph_set_block(g, -1, -1);
    int enc = x; /* [B,S,H] */
    x = wf_model_linear(g, "head.dense", x, H, H, 1, dt);
    x = wf_model_unary(g, WF_OP_GELU, "head.gelu", x);
    x = wf_model_layernorm(g, "head.ln", x, H, BERT_LN_EPS, dt);
    int bias = wf_model_param(g, dt, 1, V, 0, 0, 0, "head.logits.bias"); /* [V] */
    tied_head(g, m, batch, x, word, bias, labels);
    if (m->nsp && g->status == WF_OK)
        nsp_head(g, m, batch, enc);
    return g->status;
}
