/* Builders of SuperScaler's example models: Swin Transformer (v1), T5 (v1.0,
 * the original checkpoints) and AlphaFold2's Evoformer trunk.
 *
 * Swin (Liu et al. 2021; torchvision's layout, torchvision/models/
 * swin_transformer.py at pytorch/vision b3054b4d): a 4x4 patch embedding
 * (conv with bias, then LayerNorm), stages of blocks at resolutions
 * image/4, /8, /16, /32 with C, 2C, 4C, 8C channels and heads doubling,
 * patch merging between stages (the 2x2 neighbours concatenated in
 * torchvision's order, LayerNorm(4C), a linear 4C -> 2C without bias), then
 * LayerNorm, average pooling and the classifier. A block is pre-LN window
 * attention (qkv and proj with biases, a relative-position bias table
 * [(2W-1)^2, heads] per block gathered by a constant index) and a GELU MLP of
 * width 4C. Odd blocks shift their windows: the image is rolled by -W/2 on
 * both spatial dims first and rolled back after, and the window attention
 * adds the shifted-window mask (a constant input, 0 or -100 as torchvision
 * builds it) to the relative-position bias. A stage whose resolution equals
 * the window neither shifts nor masks (torchvision sets the shift to 0 there).
 * Windows are laid out window-major (row w*B + b) so the per-window bias
 * [nW,A,W*W,W*W] is the attention op's grouped bias. Stochastic depth is a
 * training-time identity on the expected path and is not modelled.
 *
 * T5 (Raffel et al. 2020; Hugging Face's T5ForConditionalGeneration for the
 * t5-base/-large/-3b/-11b checkpoints): encoder and decoder of `layers`
 * layers each, d_model = hidden, heads x head_dim inner attention width, no
 * biases anywhere, RMS norms with a weight only (eps 1e-6), unscaled scores
 * (scale 1), ReLU MLPs of width ffn (v1.0; v1.1's gated GELU is not built),
 * a relative-position bias table [32 buckets, heads] in the first layer of
 * each stack shared by all of its layers (the bucket index a constant input
 * [S,S]), cross-attention without a position bias, dropout 0.1, and the
 * output head tied to the shared embedding, its input scaled by
 * d_model^-0.5.
 *
 * AlphaFold2 (Jumper et al. 2021; google-deepmind/alphafold at c77e5d2a,
 * alphafold/model/modules.py and config.py, the monomer model): the input
 * embedder (target_feat 22 and msa_feat 49 channels, the left/right single
 * projections, relative positions one-hot over 65 offsets), the recycling
 * embedder (LayerNorms of the previous MSA first row and pair, the previous
 * positions' 15-bin distogram through a linear), `layers` Evoformer blocks
 * and the distogram head (64 bins, logits symmetrized) as the loss. An
 * Evoformer block is MSA row attention with pair bias and gating, MSA column
 * attention with gating, the MSA transition, the outer product mean,
 * triangle multiplicative updates outgoing and incoming, triangle attention
 * around the starting and the ending node, and the pair transition, with
 * AF2's widths (MSA 256, pair 128, 8 MSA heads of 32, 4 triangle heads of
 * 32, outer channel 32, transitions 4x). Left out: the extra-MSA stack, the
 * template stack, the structure module with its single projection, and the
 * other heads (masked MSA, pLDDT, experimentally resolved). Op and parameter
 * names shorten AF2's module names (msa_row_attn for
 * msa_row_attention_with_pair_bias, tri_mul_out, tri_att_start, ...). The recycling
 * count (recycle=N) runs N no-gradient forwards before the one that learns
 * (NF1B): the graph is that last pass, with the recycled inputs.
 *
 * Composition of the triangle ops from the IR's ops: a triangle
 * multiplicative update is LayerNorm, four linears (two of them gated by
 * sigmoid), a per-channel batch_matmul over the shared third node (the
 * pair transposed to [B,c,i,k]), LayerNorm, a linear and a sigmoid gate;
 * triangle attention is attention with a bias (the pair projected to heads,
 * [B,A,N,N], one bias per protein shared by its N rows) and a sigmoid gate,
 * on the pair or on its transpose (ending node). */
#include "models/models-impl.h"

#include <math.h>
#include <string.h>

static int scale(wf_graph *g, const char *name, int x, double s)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.scale = s;
    return wf_model_op(g, WF_OP_MUL, name, x, -1, -1, -1, &a);
}

/* Reshape to n dims given in d[]. */
static int reshape(wf_graph *g, const char *name, int x, int n, const int64_t *d)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.ndim = n;
    for (int i = 0; i < n; i++)
        a.shape[i] = d[i];
    return wf_model_op(g, WF_OP_RESHAPE, name, x, -1, -1, -1, &a);
}

static int transpose(wf_graph *g, const char *name, int x, int n, const int *perm)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < n; i++)
        a.perm[i] = perm[i];
    return wf_model_op(g, WF_OP_TRANSPOSE, name, x, -1, -1, -1, &a);
}

static int expand(wf_graph *g, const char *name, int x, int n, const int64_t *d)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.ndim = n;
    for (int i = 0; i < n; i++)
        a.shape[i] = d[i];
    return wf_model_op(g, WF_OP_EXPAND, name, x, -1, -1, -1, &a);
}

/* Splits x along axis into 3 parts of width w each; returns the op. */
static int split3(wf_graph *g, const char *name, int x, int axis, int64_t w)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.axis = axis;
    a.nsplit = 3;
    a.sizes[0] = a.sizes[1] = a.sizes[2] = w;
    if (g->status != WF_OK)
        return -1;
    return wf_graph_add_op(g, WF_OP_SPLIT, name, &x, 1, &a);
}

static int attention(wf_graph *g, const char *name, int q, int k, int v, int bias, int64_t A, int causal,
                     double p, double sc)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.heads = (int)A;
    a.causal = causal;
    a.p = p;
    a.scale = sc;
    a.seed = p > 0 ? wf_model_seed(g) : 0;
    return wf_model_op(g, WF_OP_ATTENTION, name, q, k, v, bias, &a);
}

static int input(wf_graph *g, const char *name, wf_dtype dt, wf_role role, int n, const int64_t *d)
{
    if (g->status != WF_OK)
        return -1;
    return wf_graph_add_tensor(g, name, dt, role, n, d);
}

/* A gathered bias table[buckets, A] by a constant index [S*Skv] ->
 * [1, A, S, Skv] (Swin's relative positions, T5's buckets). */
static int gathered_bias(wf_graph *g, const char *pfx, int64_t buckets, int64_t A, int64_t S, int64_t Skv,
                         wf_dtype dt, int *index_out)
{
    char n[WF_NAME_LEN];
    int64_t id[1] = {S * Skv};
    int idx = index_out && *index_out >= 0
                  ? *index_out
                  : input(g, wf_model_name(n, "%s.index", pfx), WF_DTYPE_INT32, WF_ROLE_INPUT, 1, id);
    if (index_out)
        *index_out = idx;
    int tab = wf_model_param(g, dt, 2, buckets, A, 0, 0, "%s.table", pfx);
    int e = wf_model_binary(g, WF_OP_EMBEDDING, wf_model_name(n, "%s.gather", pfx), idx, tab); /* [S*Skv, A] */
    static const int tr[2] = {1, 0};
    e = transpose(g, wf_model_name(n, "%s.heads_first", pfx), e, 2, tr); /* [A, S*Skv] */
    int64_t d[4] = {1, A, S, Skv};
    return reshape(g, wf_model_name(n, "%s.bias", pfx), e, 4, d);
}

/* ---- Swin Transformer ---------------------------------------------------------------------- */

#define SWIN_LN_EPS 1e-5
#define SWIN_MASK 1 /* 1: shifted blocks add the window mask */

/* One Swin block on x[B,R,R,C] with window W (shifted when shift > 0). */
static int swin_block(wf_graph *g, const char *pfx, int x, int64_t B, int64_t R, int64_t C, int64_t A,
                      int64_t W, int64_t shift, wf_dtype dt)
{
    char n[WF_NAME_LEN];
    const int64_t nw = R / W, NW = nw * nw, T = W * W;
    int h = wf_model_layernorm(g, wf_model_name(n, "%s.norm1", pfx), x, C, SWIN_LN_EPS, dt);
    if (shift > 0) {
        wf_op_attrs a;
        memset(&a, 0, sizeof a);
        a.shifts[1] = a.shifts[2] = -shift;
        h = wf_model_op(g, WF_OP_ROLL, wf_model_name(n, "%s.attn.shift", pfx), h, -1, -1, -1, &a);
    }
    /* window partition, window-major: [B,nw,W,nw,W,C] -> [nw,nw,B,W,W,C] -> [NW*B,T,C] */
    int64_t d6[6] = {B, nw, W, nw, W, C};
    h = reshape(g, wf_model_name(n, "%s.attn.grid", pfx), h, 6, d6);
    static const int part[6] = {1, 3, 0, 2, 4, 5};
    h = transpose(g, wf_model_name(n, "%s.attn.partition", pfx), h, 6, part);
    int64_t d3[3] = {NW * B, T, C};
    h = reshape(g, wf_model_name(n, "%s.attn.windows", pfx), h, 3, d3);
    wf_graph_set_tp(g, WF_TP_COL);
    int qkv = wf_model_linear(g, wf_model_name(n, "%s.attn.qkv", pfx), h, C, 3 * C, 1, dt);
    wf_graph_set_tp(g, WF_TP_SHARD);
    int sp = split3(g, wf_model_name(n, "%s.attn.split", pfx), qkv, 2, C);
    wf_graph_set_tp(g, WF_TP_NONE);
    char bp[WF_NAME_LEN];
    int bias = gathered_bias(g, wf_model_name(bp, "%s.attn.relpos", pfx), (2 * W - 1) * (2 * W - 1), A, T, T, dt,
                             NULL);
    if (shift > 0 && SWIN_MASK) {
        int64_t md[4] = {NW, 1, T, T}, ed[4] = {NW, A, T, T};
        int mask = input(g, wf_model_name(n, "%s.attn.mask", pfx), dt, WF_ROLE_INPUT, 4, md);
        mask = expand(g, wf_model_name(n, "%s.attn.mask_heads", pfx), mask, 4, ed);
        int64_t bd[3] = {A, T, T};
        bias = reshape(g, wf_model_name(n, "%s.attn.relpos.flat", pfx), bias, 3, bd);
        bias = wf_model_binary(g, WF_OP_ADD, wf_model_name(n, "%s.attn.bias", pfx), mask, bias); /* [NW,A,T,T] */
    }
    wf_graph_set_tp(g, WF_TP_SHARD);
    int o = attention(g, wf_model_name(n, "%s.attn.core", pfx), wf_graph_op_output(g, sp, 0),
                      wf_graph_op_output(g, sp, 1), wf_graph_op_output(g, sp, 2), bias, A, 0, 0, 0);
    wf_graph_set_tp(g, WF_TP_ROW);
    o = wf_model_linear(g, wf_model_name(n, "%s.attn.proj", pfx), o, C, C, 1, dt);
    wf_graph_set_tp(g, WF_TP_NONE);
    /* window reverse: [NW*B,T,C] -> [nw,nw,B,W,W,C] -> [B,nw,W,nw,W,C] -> [B,R,R,C] */
    int64_t r6[6] = {nw, nw, B, W, W, C};
    o = reshape(g, wf_model_name(n, "%s.attn.unwindows", pfx), o, 6, r6);
    static const int rev[6] = {2, 0, 3, 1, 4, 5};
    o = transpose(g, wf_model_name(n, "%s.attn.merge", pfx), o, 6, rev);
    int64_t d4[4] = {B, R, R, C};
    o = reshape(g, wf_model_name(n, "%s.attn.image", pfx), o, 4, d4);
    if (shift > 0) {
        wf_op_attrs a;
        memset(&a, 0, sizeof a);
        a.shifts[1] = a.shifts[2] = shift;
        o = wf_model_op(g, WF_OP_ROLL, wf_model_name(n, "%s.attn.unshift", pfx), o, -1, -1, -1, &a);
    }
    x = wf_model_binary(g, WF_OP_ADD, wf_model_name(n, "%s.attn.residual", pfx), x, o);
    h = wf_model_layernorm(g, wf_model_name(n, "%s.norm2", pfx), x, C, SWIN_LN_EPS, dt);
    wf_graph_set_tp(g, WF_TP_COL);
    h = wf_model_linear(g, wf_model_name(n, "%s.mlp.fc1", pfx), h, C, 4 * C, 1, dt);
    wf_graph_set_tp(g, WF_TP_SHARD);
    h = wf_model_unary(g, WF_OP_GELU, wf_model_name(n, "%s.mlp.gelu", pfx), h);
    wf_graph_set_tp(g, WF_TP_ROW);
    h = wf_model_linear(g, wf_model_name(n, "%s.mlp.fc2", pfx), h, 4 * C, C, 1, dt);
    wf_graph_set_tp(g, WF_TP_NONE);
    return wf_model_binary(g, WF_OP_ADD, wf_model_name(n, "%s.mlp.residual", pfx), x, h);
}

/* Patch merging x[B,R,R,C] -> [B,R/2,R/2,2C]: torchvision concatenates
 * x[0::2,0::2], x[1::2,0::2], x[0::2,1::2], x[1::2,1::2], i.e. the 2x2
 * neighbours ordered (column, row). */
static int swin_merge(wf_graph *g, const char *pfx, int x, int64_t B, int64_t R, int64_t C, wf_dtype dt)
{
    char n[WF_NAME_LEN];
    int64_t d6[6] = {B, R / 2, 2, R / 2, 2, C};
    x = reshape(g, wf_model_name(n, "%s.grid", pfx), x, 6, d6);
    static const int perm[6] = {0, 1, 3, 4, 2, 5};
    x = transpose(g, wf_model_name(n, "%s.gather", pfx), x, 6, perm);
    int64_t d4[4] = {B, R / 2, R / 2, 4 * C};
    x = reshape(g, wf_model_name(n, "%s.concat", pfx), x, 4, d4);
    x = wf_model_layernorm(g, wf_model_name(n, "%s.norm", pfx), x, 4 * C, SWIN_LN_EPS, dt);
    return wf_model_linear(g, wf_model_name(n, "%s.reduction", pfx), x, 4 * C, 2 * C, 0, dt);
}

wf_status wf_build_swin(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    const int64_t B = batch, C0 = m->hidden, W0 = m->window;
    const wf_dtype dt = m->dtype;
    char n[WF_NAME_LEN], pfx[WF_NAME_LEN];
    wf_graph_set_block(g, -1, -1);
    int64_t is[4] = {B, m->channels, m->image, m->image}, ls[1] = {B};
    int x = input(g, "images", dt, WF_ROLE_INPUT, 4, is);
    int labels = input(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 1, ls);
    int w = wf_model_param(g, dt, 4, C0, m->channels, 4, 4, "patch_embed.weight");
    int b = wf_model_param(g, dt, 1, C0, 0, 0, 0, "patch_embed.bias");
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.kernel[0] = a.kernel[1] = 4;
    a.stride[0] = a.stride[1] = 4;
    x = wf_model_op(g, WF_OP_CONV2D, "patch_embed", x, w, b, -1, &a); /* [B,C,R,R] */
    static const int nhwc[4] = {0, 2, 3, 1}, nchw[4] = {0, 3, 1, 2};
    x = transpose(g, "patch_embed.nhwc", x, 4, nhwc);
    x = wf_model_layernorm(g, "patch_embed.norm", x, C0, SWIN_LN_EPS, dt);
    int64_t R = m->image / 4, C = C0, A = m->heads;
    int layer = 0;
    for (int s = 0; s < m->nsizes; s++) {
        if (s > 0) {
            wf_graph_set_block(g, -1, -1);
            x = swin_merge(g, wf_model_name(pfx, "stages.%d.merge", s), x, B, R, C, dt);
            R /= 2, C *= 2, A *= 2;
        }
        const int64_t W = W0 < R ? W0 : R;
        for (int64_t i = 0; i < m->sizes[s]; i++, layer++) {
            wf_graph_set_block(g, s, layer);
            wf_model_name(pfx, "stages.%d.blocks.%d", s, (int)i);
            x = swin_block(g, pfx, x, B, R, C, A, W, i % 2 == 1 && W < R ? W / 2 : 0, dt);
        }
    }
    wf_graph_set_block(g, -1, -1);
    x = wf_model_layernorm(g, "norm", x, C, SWIN_LN_EPS, dt);
    x = transpose(g, "norm.nchw", x, 4, nchw);
    x = wf_model_unary(g, WF_OP_GLOBAL_AVGPOOL, "avgpool", x); /* [B,8C] */
    x = wf_model_linear(g, "head", x, C, m->classes, 1, dt);
    wf_model_binary(g, WF_OP_CROSS_ENTROPY, wf_model_name(n, "loss"), x, labels);
    return g->status;
}

/* ---- T5 ------------------------------------------------------------------------------------ */

#define T5_EPS 1e-6
#define T5_DROPOUT 0.1
#define T5_BUCKETS 32

/* Attention sublayer: x[B,S,H] -> [B,S,H] (before the residual); kv is the
 * encoder output for cross-attention (-1: self-attention on the normed x). */
static int t5_attention(wf_graph *g, const char *pfx, int h, int kv, int64_t Skv, int bias, const wf_model_config *m,
                        int causal)
{
    char n[WF_NAME_LEN];
    const int64_t H = m->hidden, I = m->heads * m->head_dim;
    wf_graph_set_tp(g, WF_TP_COL);
    int q = wf_model_linear(g, wf_model_name(n, "%s.q", pfx), h, H, I, 0, m->dtype);
    int src = kv >= 0 ? kv : h;
    int k = wf_model_linear(g, wf_model_name(n, "%s.k", pfx), src, H, I, 0, m->dtype);
    int v = wf_model_linear(g, wf_model_name(n, "%s.v", pfx), src, H, I, 0, m->dtype);
    wf_graph_set_tp(g, WF_TP_SHARD);
    (void)Skv;
    int o = attention(g, wf_model_name(n, "%s.core", pfx), q, k, v, bias, m->heads, causal, T5_DROPOUT, 1.0);
    wf_graph_set_tp(g, WF_TP_ROW);
    o = wf_model_linear(g, wf_model_name(n, "%s.o", pfx), o, I, H, 0, m->dtype);
    wf_graph_set_tp(g, WF_TP_NONE);
    return o;
}

static int t5_residual(wf_graph *g, const char *pfx, int x, int o)
{
    char n[WF_NAME_LEN];
    o = wf_model_dropout(g, wf_model_name(n, "%s.dropout", pfx), o, T5_DROPOUT);
    return wf_model_binary(g, WF_OP_ADD, wf_model_name(n, "%s.residual", pfx), x, o);
}

static int t5_ffn(wf_graph *g, const char *pfx, int x, const wf_model_config *m)
{
    char n[WF_NAME_LEN];
    int h = wf_model_rmsnorm(g, wf_model_name(n, "%s.norm", pfx), x, m->hidden, T5_EPS, m->dtype);
    wf_graph_set_tp(g, WF_TP_COL);
    h = wf_model_linear(g, wf_model_name(n, "%s.wi", pfx), h, m->hidden, m->ffn, 0, m->dtype);
    wf_graph_set_tp(g, WF_TP_SHARD);
    h = wf_model_unary(g, WF_OP_RELU, wf_model_name(n, "%s.relu", pfx), h);
    h = wf_model_dropout(g, wf_model_name(n, "%s.inner_dropout", pfx), h, T5_DROPOUT);
    wf_graph_set_tp(g, WF_TP_ROW);
    h = wf_model_linear(g, wf_model_name(n, "%s.wo", pfx), h, m->ffn, m->hidden, 0, m->dtype);
    wf_graph_set_tp(g, WF_TP_NONE);
    return t5_residual(g, pfx, x, h);
}

wf_status wf_build_t5(const wf_model_config *m, int64_t batch, wf_graph *g)
{
    const int64_t B = batch, S = m->seq, Sd = m->dec_seq, H = m->hidden, V = m->vocab;
    const wf_dtype dt = m->dtype;
    char n[WF_NAME_LEN], pfx[WF_NAME_LEN];
    wf_graph_set_block(g, -1, -1);
    int64_t es[2] = {B, S}, ds[2] = {B, Sd};
    int ids = input(g, "ids", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, es);
    int dec_ids = input(g, "decoder_ids", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, ds);
    int labels = input(g, "labels", WF_DTYPE_INT32, WF_ROLE_LABEL, 2, ds);
    int table = wf_model_param(g, dt, 2, V, H, 0, 0, "shared.weight");
    wf_graph_set_tp(g, WF_TP_VOCAB);
    int x = wf_model_binary(g, WF_OP_EMBEDDING, "encoder.embed", ids, table);
    wf_graph_set_tp(g, WF_TP_NONE);
    x = wf_model_dropout(g, "encoder.embed.dropout", x, T5_DROPOUT);
    int ebias = gathered_bias(g, "encoder.relative_attention_bias", T5_BUCKETS, m->heads, S, S, dt, NULL);
    for (int64_t i = 0; i < m->layers; i++) {
        wf_graph_set_block(g, 0, (int)i);
        wf_model_name(pfx, "encoder.layers.%d", (int)i);
        int h = wf_model_rmsnorm(g, wf_model_name(n, "%s.attn.norm", pfx), x, H, T5_EPS, dt);
        char ap[WF_NAME_LEN];
        int o = t5_attention(g, wf_model_name(ap, "%s.attn", pfx), h, -1, S, ebias, m, 0);
        x = t5_residual(g, ap, x, o);
        x = t5_ffn(g, wf_model_name(ap, "%s.ffn", pfx), x, m);
    }
    wf_graph_set_block(g, -1, -1);
    int enc = wf_model_rmsnorm(g, "encoder.final_norm", x, H, T5_EPS, dt);
    enc = wf_model_dropout(g, "encoder.final_dropout", enc, T5_DROPOUT);

    wf_graph_set_tp(g, WF_TP_VOCAB);
    x = wf_model_binary(g, WF_OP_EMBEDDING, "decoder.embed", dec_ids, table);
    wf_graph_set_tp(g, WF_TP_NONE);
    x = wf_model_dropout(g, "decoder.embed.dropout", x, T5_DROPOUT);
    int dbias = gathered_bias(g, "decoder.relative_attention_bias", T5_BUCKETS, m->heads, Sd, Sd, dt, NULL);
    for (int64_t i = 0; i < m->layers; i++) {
        wf_graph_set_block(g, 1, (int)(m->layers + i));
        wf_model_name(pfx, "decoder.layers.%d", (int)i);
        char ap[WF_NAME_LEN];
        int h = wf_model_rmsnorm(g, wf_model_name(n, "%s.self_attn.norm", pfx), x, H, T5_EPS, dt);
        int o = t5_attention(g, wf_model_name(ap, "%s.self_attn", pfx), h, -1, Sd, dbias, m, 1);
        x = t5_residual(g, ap, x, o);
        h = wf_model_rmsnorm(g, wf_model_name(n, "%s.cross_attn.norm", pfx), x, H, T5_EPS, dt);
        o = t5_attention(g, wf_model_name(ap, "%s.cross_attn", pfx), h, enc, S, -1, m, 0);
        x = t5_residual(g, ap, x, o);
        x = t5_ffn(g, wf_model_name(ap, "%s.ffn", pfx), x, m);
    }
    wf_graph_set_block(g, -1, -1);
    x = wf_model_rmsnorm(g, "decoder.final_norm", x, H, T5_EPS, dt);
    x = wf_model_dropout(g, "decoder.final_dropout", x, T5_DROPOUT);
    x = scale(g, "head.scale", x, 1.0 / sqrt((double)H)); /* tied head: d_model^-0.5 */
    int64_t fl[2] = {B * Sd, H}, ul[3] = {B, Sd, V};
    x = reshape(g, "head.flatten", x, 2, fl);
    wf_graph_set_tp(g, WF_TP_VOCAB);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.trans_b = 1;
    int logits = wf_model_op(g, WF_OP_MATMUL, "head.logits", x, table, -1, -1, &a);
    logits = reshape(g, "head.unflatten", logits, 3, ul);
    wf_model_binary(g, WF_OP_CROSS_ENTROPY, "loss", logits, labels);
    wf_graph_set_tp(g, WF_TP_NONE);
    return g->status;
}

/* ---- AlphaFold2 ----------------------------------------------------------------------------- */

#define AF_EPS 1e-5
#define AF_TARGET_FEAT 22
#define AF_MSA_FEAT 49
#define AF_RELPOS 65   /* 2 * max_relative_feature 32 + 1 */
#define AF_PREV_BINS 15
#define AF_DISTOGRAM 64
#define AF_MSA_HEADS 8
#define AF_PAIR_HEADS 4
#define AF_OUTER 32
#define AF_ROW_DROPOUT 0.15
#define AF_PAIR_DROPOUT 0.25

/* Gated self-attention on rows x[R,L,c] (R rows of length L), heads A, an
 * optional bias [Bb,A,L,L]: q, k, v without biases (AF2's Attention), the
 * gate sigmoid(linear with bias) on the same input, the output linear with
 * bias. Returns [R,L,c]. */
static int af_gated_attention(wf_graph *g, const char *pfx, int x, int64_t c, int64_t A, int bias, wf_dtype dt)
{
    char n[WF_NAME_LEN];
    wf_graph_set_tp(g, WF_TP_COL);
    int qkv = wf_model_linear(g, wf_model_name(n, "%s.qkv", pfx), x, c, 3 * c, 0, dt);
    int gate = wf_model_linear(g, wf_model_name(n, "%s.gating", pfx), x, c, c, 1, dt);
    wf_graph_set_tp(g, WF_TP_SHARD);
    gate = wf_model_unary(g, WF_OP_SIGMOID, wf_model_name(n, "%s.gate", pfx), gate);
    int sp = split3(g, wf_model_name(n, "%s.split", pfx), qkv, 2, c);
    int o = attention(g, wf_model_name(n, "%s.core", pfx), wf_graph_op_output(g, sp, 0), wf_graph_op_output(g, sp, 1),
                      wf_graph_op_output(g, sp, 2), bias, A, 0, 0, 0);
    o = wf_model_binary(g, WF_OP_MUL, wf_model_name(n, "%s.gated", pfx), o, gate);
    wf_graph_set_tp(g, WF_TP_ROW);
    o = wf_model_linear(g, wf_model_name(n, "%s.output", pfx), o, c, c, 1, dt);
    wf_graph_set_tp(g, WF_TP_NONE);
    return o;
}

static int af_residual(wf_graph *g, const char *pfx, int x, int o, double p)
{
    char n[WF_NAME_LEN];
    if (p > 0)
        o = wf_model_dropout(g, wf_model_name(n, "%s.dropout", pfx), o, p);
    return wf_model_binary(g, WF_OP_ADD, wf_model_name(n, "%s.residual", pfx), x, o);
}

/* Transition: LayerNorm, c -> 4c with ReLU, 4c -> c. */
static int af_transition(wf_graph *g, const char *pfx, int x, int64_t c, wf_dtype dt)
{
    char n[WF_NAME_LEN];
    int h = wf_model_layernorm(g, wf_model_name(n, "%s.norm_in", pfx), x, c, AF_EPS, dt);
    wf_graph_set_tp(g, WF_TP_COL);
    h = wf_model_linear(g, wf_model_name(n, "%s.transition1", pfx), h, c, 4 * c, 1, dt);
    wf_graph_set_tp(g, WF_TP_SHARD);
    h = wf_model_unary(g, WF_OP_RELU, wf_model_name(n, "%s.relu", pfx), h);
    wf_graph_set_tp(g, WF_TP_ROW);
    h = wf_model_linear(g, wf_model_name(n, "%s.transition2", pfx), h, 4 * c, c, 1, dt);
    wf_graph_set_tp(g, WF_TP_NONE);
    return af_residual(g, pfx, x, h, 0);
}

/* Pair [B,N,N,c] -> its transpose over the two residue dims. */
static int af_swap(wf_graph *g, const char *name, int z)
{
    static const int perm[4] = {0, 2, 1, 3};
    return transpose(g, name, z, 4, perm);
}

/* Triangle multiplicative update on z[B,N,N,c]: outgoing
 * out[i,j] = sum_k a[i,k] b[j,k], incoming out[i,j] = sum_k a[k,i] b[k,j],
 * per channel. */
static int af_tri_mul(wf_graph *g, const char *pfx, int z, int64_t B, int64_t N, int64_t c, int incoming, wf_dtype dt)
{
    char n[WF_NAME_LEN];
    int h = wf_model_layernorm(g, wf_model_name(n, "%s.norm_in", pfx), z, c, AF_EPS, dt);
    int a = wf_model_linear(g, wf_model_name(n, "%s.left_projection", pfx), h, c, c, 1, dt);
    int ag = wf_model_linear(g, wf_model_name(n, "%s.left_gate", pfx), h, c, c, 1, dt);
    a = wf_model_binary(g, WF_OP_MUL, wf_model_name(n, "%s.left", pfx), a,
               wf_model_unary(g, WF_OP_SIGMOID, wf_model_name(n, "%s.left_sigmoid", pfx), ag));
    int b = wf_model_linear(g, wf_model_name(n, "%s.right_projection", pfx), h, c, c, 1, dt);
    int bg = wf_model_linear(g, wf_model_name(n, "%s.right_gate", pfx), h, c, c, 1, dt);
    b = wf_model_binary(g, WF_OP_MUL, wf_model_name(n, "%s.right", pfx), b,
               wf_model_unary(g, WF_OP_SIGMOID, wf_model_name(n, "%s.right_sigmoid", pfx), bg));
    static const int chan_first[4] = {0, 3, 1, 2}, chan_last[4] = {0, 2, 3, 1};
    a = transpose(g, wf_model_name(n, "%s.left_cf", pfx), a, 4, chan_first);  /* [B,c,i,k] or [B,c,k,i] */
    b = transpose(g, wf_model_name(n, "%s.right_cf", pfx), b, 4, chan_first); /* [B,c,j,k] or [B,c,k,j] */
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    if (incoming)
        at.trans_a = 1; /* a^T b: [i,k] x [k,j] */
    else
        at.trans_b = 1; /* a b^T: [i,k] x [k,j] */
    int o = wf_model_op(g, WF_OP_BATCH_MATMUL, wf_model_name(n, "%s.triangle", pfx), a, b, -1, -1, &at); /* [B,c,i,j] */
    o = transpose(g, wf_model_name(n, "%s.channels_last", pfx), o, 4, chan_last);
    (void)B, (void)N;
    o = wf_model_layernorm(g, wf_model_name(n, "%s.center_norm", pfx), o, c, AF_EPS, dt);
    o = wf_model_linear(g, wf_model_name(n, "%s.out_proj", pfx), o, c, c, 1, dt);
    int gt = wf_model_linear(g, wf_model_name(n, "%s.gating_linear", pfx), h, c, c, 1, dt);
    o = wf_model_binary(g, WF_OP_MUL, wf_model_name(n, "%s.gated", pfx), o,
               wf_model_unary(g, WF_OP_SIGMOID, wf_model_name(n, "%s.gate", pfx), gt));
    return af_residual(g, pfx, z, o, AF_PAIR_DROPOUT);
}

/* Triangle attention around the starting node on z[B,N,N,c] (ending node:
 * on the transpose, transposed back): rows i attend over j with the bias
 * b[j,k] projected from the pair, one per protein. */
static int af_tri_att(wf_graph *g, const char *pfx, int z, int64_t B, int64_t N, int64_t c, int ending, wf_dtype dt)
{
    char n[WF_NAME_LEN];
    int x = ending ? af_swap(g, wf_model_name(n, "%s.swap", pfx), z) : z;
    int h = wf_model_layernorm(g, wf_model_name(n, "%s.query_norm", pfx), x, c, AF_EPS, dt);
    int bias = wf_model_linear(g, wf_model_name(n, "%s.feat_2d", pfx), h, c, AF_PAIR_HEADS, 0, dt); /* [B,N,N,A] */
    static const int heads_first[4] = {0, 3, 1, 2};
    bias = transpose(g, wf_model_name(n, "%s.bias", pfx), bias, 4, heads_first); /* [B,A,N,N] */
    int64_t rows[3] = {B * N, N, c}, back[4] = {B, N, N, c};
    h = reshape(g, wf_model_name(n, "%s.rows", pfx), h, 3, rows);
    int o = af_gated_attention(g, wf_model_name(n, "%s.attention", pfx), h, c, AF_PAIR_HEADS, bias, dt);
    o = reshape(g, wf_model_name(n, "%s.pair", pfx), o, 4, back);
    if (ending)
        o = af_swap(g, wf_model_name(n, "%s.unswap", pfx), o);
    return af_residual(g, pfx, z, o, AF_PAIR_DROPOUT);
}

/* One Evoformer block on m[B,S,N,cm] and z[B,N,N,cz]. */
static void af_evoformer(wf_graph *g, const char *pfx, int *msa, int *pair, const wf_model_config *mc, int64_t B)
{
    char n[WF_NAME_LEN], p2[WF_NAME_LEN];
    const int64_t S = mc->msa, N = mc->seq, cm = mc->hidden, cz = mc->pair_dim;
    const wf_dtype dt = mc->dtype;
    int m = *msa, z = *pair;
    /* MSA row attention with pair bias: rows s of protein b attend over residues. */
    wf_model_name(p2, "%s.msa_row_attn", pfx);
    int h = wf_model_layernorm(g, wf_model_name(n, "%s.query_norm", p2), m, cm, AF_EPS, dt);
    int zb = wf_model_layernorm(g, wf_model_name(n, "%s.feat_2d_norm", p2), z, cz, AF_EPS, dt);
    zb = wf_model_linear(g, wf_model_name(n, "%s.feat_2d", p2), zb, cz, AF_MSA_HEADS, 0, dt);
    static const int heads_first[4] = {0, 3, 1, 2};
    zb = transpose(g, wf_model_name(n, "%s.bias", p2), zb, 4, heads_first); /* [B,A,N,N] */
    int64_t rows[3] = {B * S, N, cm}, back[4] = {B, S, N, cm};
    h = reshape(g, wf_model_name(n, "%s.rows", p2), h, 3, rows);
    int o = af_gated_attention(g, wf_model_name(n, "%s.attention", p2), h, cm, AF_MSA_HEADS, zb, dt);
    o = reshape(g, wf_model_name(n, "%s.msa", p2), o, 4, back);
    m = af_residual(g, p2, m, o, AF_ROW_DROPOUT);
    /* MSA column attention: residues attend over the sequences. */
    wf_model_name(p2, "%s.msa_col_attn", pfx);
    static const int swap[4] = {0, 2, 1, 3};
    h = transpose(g, wf_model_name(n, "%s.columns_first", p2), m, 4, swap); /* [B,N,S,cm] */
    h = wf_model_layernorm(g, wf_model_name(n, "%s.query_norm", p2), h, cm, AF_EPS, dt);
    int64_t cols[3] = {B * N, S, cm}, cback[4] = {B, N, S, cm};
    h = reshape(g, wf_model_name(n, "%s.rows", p2), h, 3, cols);
    o = af_gated_attention(g, wf_model_name(n, "%s.attention", p2), h, cm, AF_MSA_HEADS, -1, dt);
    o = reshape(g, wf_model_name(n, "%s.columns", p2), o, 4, cback);
    o = transpose(g, wf_model_name(n, "%s.msa", p2), o, 4, swap);
    m = af_residual(g, p2, m, o, 0);
    m = af_transition(g, wf_model_name(p2, "%s.msa_transition", pfx), m, cm, dt);
    /* Outer product mean: z[i,j] += W . mean_s a[s,i] (x) b[s,j]. */
    wf_model_name(p2, "%s.outer", pfx);
    h = wf_model_layernorm(g, wf_model_name(n, "%s.norm_in", p2), m, cm, AF_EPS, dt);
    int a = wf_model_linear(g, wf_model_name(n, "%s.left_projection", p2), h, cm, AF_OUTER, 1, dt);
    int b = wf_model_linear(g, wf_model_name(n, "%s.right_projection", p2), h, cm, AF_OUTER, 1, dt);
    int64_t flat[3] = {B, S, N * AF_OUTER};
    a = reshape(g, wf_model_name(n, "%s.left_flat", p2), a, 3, flat);
    b = reshape(g, wf_model_name(n, "%s.right_flat", p2), b, 3, flat);
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.trans_a = 1;
    o = wf_model_op(g, WF_OP_BATCH_MATMUL, wf_model_name(n, "%s.outer", p2), a, b, -1, -1, &at); /* [B,N*32,N*32] */
    int64_t o5[5] = {B, N, AF_OUTER, N, AF_OUTER};
    o = reshape(g, wf_model_name(n, "%s.outer5", p2), o, 5, o5);
    static const int pairs[5] = {0, 1, 3, 2, 4};
    o = transpose(g, wf_model_name(n, "%s.outer_pairs", p2), o, 5, pairs);
    int64_t o4[4] = {B, N, N, AF_OUTER * AF_OUTER};
    o = reshape(g, wf_model_name(n, "%s.outer_flat", p2), o, 4, o4);
    o = wf_model_linear(g, wf_model_name(n, "%s.output", p2), o, AF_OUTER * AF_OUTER, cz, 1, dt);
    o = scale(g, wf_model_name(n, "%s.mean", p2), o, 1.0 / (double)S);
    z = af_residual(g, p2, z, o, 0);
    /* Pair stack. */
    z = af_tri_mul(g, wf_model_name(p2, "%s.tri_mul_out", pfx), z, B, N, cz, 0, dt);
    z = af_tri_mul(g, wf_model_name(p2, "%s.tri_mul_in", pfx), z, B, N, cz, 1, dt);
    z = af_tri_att(g, wf_model_name(p2, "%s.tri_att_start", pfx), z, B, N, cz, 0, dt);
    z = af_tri_att(g, wf_model_name(p2, "%s.tri_att_end", pfx), z, B, N, cz, 1, dt);
    z = af_transition(g, wf_model_name(p2, "%s.pair_transition", pfx), z, cz, dt);
    *msa = m;
    *pair = z;
}

wf_status wf_build_alphafold(const wf_model_config *mc, int64_t batch, wf_graph *g)
{
    const int64_t B = batch, S = mc->msa, N = mc->seq, cm = mc->hidden, cz = mc->pair_dim;
    const wf_dtype dt = mc->dtype;
    char pfx[WF_NAME_LEN];
    wf_graph_set_block(g, -1, -1);
    int64_t tf[3] = {B, N, AF_TARGET_FEAT}, mf[4] = {B, S, N, AF_MSA_FEAT}, rp[4] = {B, N, N, AF_RELPOS};
    int64_t pm[3] = {B, N, cm}, pp[4] = {B, N, N, cz}, pd[4] = {B, N, N, AF_PREV_BINS}, lb[3] = {B, N, N};
    int target = input(g, "target_feat", dt, WF_ROLE_INPUT, 3, tf);
    int msa_feat = input(g, "msa_feat", dt, WF_ROLE_INPUT, 4, mf);
    int relpos = input(g, "relpos_onehot", dt, WF_ROLE_INPUT, 4, rp);
    int prev_msa = input(g, "prev_msa_first_row", dt, WF_ROLE_INPUT, 3, pm);
    int prev_pair = input(g, "prev_pair", dt, WF_ROLE_INPUT, 4, pp);
    int prev_dist = input(g, "prev_pos_distogram", dt, WF_ROLE_INPUT, 4, pd);
    int labels = input(g, "distogram_bins", WF_DTYPE_INT32, WF_ROLE_LABEL, 3, lb);
    /* Input embedder: msa = preprocess_msa(msa_feat) + preprocess_1d(target) per sequence. */
    int t1 = wf_model_linear(g, "preprocess_1d", target, AF_TARGET_FEAT, cm, 1, dt);
    int64_t r1[4] = {B, 1, N, cm}, e1[4] = {B, S, N, cm};
    t1 = reshape(g, "preprocess_1d.row", t1, 4, r1);
    t1 = expand(g, "preprocess_1d.rows", t1, 4, e1);
    int m = wf_model_linear(g, "preprocess_msa", msa_feat, AF_MSA_FEAT, cm, 1, dt);
    m = wf_model_binary(g, WF_OP_ADD, "msa_activations", m, t1);
    /* pair = left_single[i] + right_single[j] + relpos */
    int l = wf_model_linear(g, "left_single", target, AF_TARGET_FEAT, cz, 1, dt);
    int r = wf_model_linear(g, "right_single", target, AF_TARGET_FEAT, cz, 1, dt);
    int64_t li[4] = {B, N, 1, cz}, rj[4] = {B, 1, N, cz}, full[4] = {B, N, N, cz};
    l = expand(g, "left_single.rows", reshape(g, "left_single.col", l, 4, li), 4, full);
    r = expand(g, "right_single.cols", reshape(g, "right_single.row", r, 4, rj), 4, full);
    int z = wf_model_binary(g, WF_OP_ADD, "pair_activations", l, r);
    z = wf_model_binary(g, WF_OP_ADD, "pair_activations.relpos", z, wf_model_linear(g, "pair_activiations", relpos, AF_RELPOS, cz, 1, dt));
    /* Recycling embedder: the previous iteration's first MSA row, pair and positions. */
    int pr = wf_model_layernorm(g, "prev_msa_first_row_norm", prev_msa, cm, AF_EPS, dt);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.axis = 1;
    a.nsplit = 2;
    a.sizes[0] = 1;
    a.sizes[1] = S - 1;
    int sp = g->status == WF_OK && S > 1 ? wf_graph_add_op(g, WF_OP_SPLIT, "msa_first_row", &m, 1, &a) : -1;
    int first = S > 1 ? wf_graph_op_output(g, sp, 0) : m;
    int64_t fr[4] = {B, 1, N, cm};
    first = wf_model_binary(g, WF_OP_ADD, "msa_first_row.recycled", first, reshape(g, "prev_msa_first_row.row", pr, 4, fr));
    if (S > 1) {
        int cat[2] = {first, wf_graph_op_output(g, sp, 1)};
        memset(&a, 0, sizeof a);
        a.axis = 1;
        m = g->status == WF_OK ? wf_graph_op1(g, WF_OP_CONCAT, "msa_recycled", cat, 2, &a) : -1;
    } else {
        m = first;
    }
    z = wf_model_binary(g, WF_OP_ADD, "pair_recycled", z, wf_model_layernorm(g, "prev_pair_norm", prev_pair, cz, AF_EPS, dt));
    z = wf_model_binary(g, WF_OP_ADD, "pair_recycled_pos", z, wf_model_linear(g, "prev_pos_linear", prev_dist, AF_PREV_BINS, cz, 1, dt));
    for (int64_t i = 0; i < mc->layers; i++) {
        wf_graph_set_block(g, 0, (int)i);
        af_evoformer(g, wf_model_name(pfx, "evoformer.%d", (int)i), &m, &z, mc, B);
    }
    wf_graph_set_block(g, -1, -1);
    /* Distogram head: symmetrized logits over 64 distance bins. */
    int hl = wf_model_linear(g, "distogram_head.half_logits", z, cz, AF_DISTOGRAM, 1, dt);
    int logits = wf_model_binary(g, WF_OP_ADD, "distogram_head.logits", hl, af_swap(g, "distogram_head.transpose", hl));
    wf_model_binary(g, WF_OP_CROSS_ENTROPY, "loss", logits, labels);
    return g->status;
}
