/* The constant inputs of the zoo's Swin, T5 and AlphaFold2 graphs: what a
 * runtime feeds them besides the data (src/models/swin_t5_af2.c makes them
 * graph inputs, so that the gathers and masks are ops the cost model and
 * the executor see). Each is defined by the reference implementation it
 * follows:
 *
 *   Swin "<block>.attn.relpos.index" [T*T], T = W*W: the relative-position
 *     index of torchvision's ShiftedWindowAttention.define_relative_coords
 *     (torchvision/models/swin_transformer.py, pytorch/vision 005bb13b): for
 *     window tokens i = (yi, xi) and j, (yi - yj + W - 1) (2W - 1) +
 *     (xi - xj + W - 1);
 *   Swin "<block>.attn.mask" [NW, 1, T, T]: the shifted-window mask of
 *     torchvision's shifted_window_attention (same file): the R x R grid cut
 *     into the regions [0, R-W), [R-W, R-s), [R-s, R) on each axis (s = W/2,
 *     the shift), labelled 3 h + w; windows in row-major order (the graph's
 *     window-major layout); 0 where two tokens of a window share a label,
 *     -100 elsewhere;
 *   T5 "encoder|decoder.relative_attention_bias.index" [S*S]: the bucket of
 *     memory position - query position, T5Attention._relative_position_bucket
 *     (src/transformers/models/t5/modeling_t5.py, huggingface/transformers
 *     001359e3): 32 buckets up to distance 128, bidirectional in the encoder;
 *   AlphaFold2 "relpos_onehot" [B, N, N, 65]: one_hot(clip(i - j + 32, 0, 64))
 *     of a single chain's residue indices (alphafold/model/modules.py,
 *     EmbeddingsAndEvoformer, google-deepmind/alphafold: max_relative_feature
 *     32).
 * The values are in the tensor's dtype: int32 indices, fp32 masks and
 * one-hots (the runtime's); another float dtype is refused. */
#include "weft/models.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define T5_BUCKETS 32
#define T5_MAX_DISTANCE 128
#define AF_MAX_REL 32

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* The integer r with r * r == n, or -1. */
static int64_t exact_sqrt(int64_t n)
{
    int64_t r = (int64_t)llround(sqrt((double)n));
    for (int64_t k = r > 1 ? r - 1 : 0; k <= r + 1; k++)
        if (k * k == n)
            return k;
    return -1;
}

typedef enum { CONST_NONE, CONST_SWIN_INDEX, CONST_SWIN_MASK, CONST_T5_INDEX, CONST_AF2_RELPOS } const_kind;

static const_kind kind_of(const wf_model_config *m, const wf_tensor *x)
{
    if (x->role != WF_ROLE_INPUT)
        return CONST_NONE;
    if (m->family == WF_FAMILY_SWIN && ends_with(x->name, ".attn.relpos.index"))
        return CONST_SWIN_INDEX;
    if (m->family == WF_FAMILY_SWIN && ends_with(x->name, ".attn.mask"))
        return CONST_SWIN_MASK;
    if (m->family == WF_FAMILY_T5 && ends_with(x->name, ".relative_attention_bias.index"))
        return CONST_T5_INDEX;
    if (m->family == WF_FAMILY_ALPHAFOLD && strcmp(x->name, "relpos_onehot") == 0)
        return CONST_AF2_RELPOS;
    return CONST_NONE;
}

int wf_model_is_constant_input(const wf_model_config *m, const wf_graph *g, int t)
{
    return t >= 0 && t < g->ntensors && kind_of(m, &g->tensors[t]) != CONST_NONE;
}

/* T5's bucket of relative position rel (memory - query). */
static int32_t t5_bucket(int64_t rel, int bidirectional)
{
    int32_t nb = T5_BUCKETS, bucket = 0;
    if (bidirectional) {
        nb /= 2;
        bucket += rel > 0 ? nb : 0;
        rel = rel < 0 ? -rel : rel;
    } else {
        rel = rel < 0 ? -rel : 0;
    }
    const int32_t exact = nb / 2;
    if (rel < exact)
        return bucket + (int32_t)rel;
    /* float32 as the reference computes it, truncated toward zero */
    float large = (float)exact + (float)(logf((float)rel / (float)exact) / logf((float)T5_MAX_DISTANCE / (float)exact) *
                                          (float)(nb - exact));
    int32_t b = (int32_t)large;
    return bucket + (b < nb - 1 ? b : nb - 1);
}

/* The region label of grid row (or column) r of R for window W, shift s. */
static int region(int64_t r, int64_t R, int64_t W, int64_t s) { return r < R - W ? 0 : r < R - s ? 1 : 2; }

wf_status wf_model_constant_input(const wf_model_config *m, const wf_graph *g, int t, void *out)
{
    if (t < 0 || t >= g->ntensors)
        return wf_errorf(WF_INVAL, "tensor %d: graph %s has %d tensors", t, g->name, g->ntensors);
    const wf_tensor *x = &g->tensors[t];
    const_kind k = kind_of(m, x);
    if (k == CONST_NONE)
        return wf_errorf(WF_INVAL, "input '%s' of graph %s is data, not a constant the model defines", x->name,
                         g->name);
    const int isint = k == CONST_SWIN_INDEX || k == CONST_T5_INDEX;
    if (x->dtype != (isint ? WF_DTYPE_INT32 : WF_DTYPE_FP32))
        return wf_errorf(WF_INVAL, "constant input '%s' is %s: filled as %s only", x->name, wf_dtype_name(x->dtype),
                         isint ? "int32" : "fp32");
    int32_t *iv = out;
    float *fv = out;
    switch (k) {
    case CONST_SWIN_INDEX: {
        /* [T*T], T = W*W */
        int64_t T = exact_sqrt(x->shape[0]), W = T > 0 ? exact_sqrt(T) : -1;
        if (x->ndim != 1 || W < 1)
            return wf_errorf(WF_INVAL, "'%s': %lld elements are not (W*W)^2", x->name, (long long)x->shape[0]);
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++)
                iv[i * T + j] = (int32_t)((i / W - j / W + W - 1) * (2 * W - 1) + (i % W - j % W + W - 1));
        return WF_OK;
    }
    case CONST_SWIN_MASK: {
        /* [NW, 1, T, T]: NW = (R/W)^2 windows of T = W*W tokens, shift W/2 */
        int64_t NW = x->shape[0], T = x->shape[2], W = exact_sqrt(T), nw = exact_sqrt(NW);
        if (x->ndim != 4 || x->shape[1] != 1 || x->shape[3] != T || W < 1 || nw < 1)
            return wf_errorf(WF_INVAL, "'%s': not [NW, 1, W*W, W*W] with NW a square", x->name);
        const int64_t R = nw * W, s = W / 2;
        for (int64_t w = 0; w < NW; w++) {
            int64_t wy = w / nw, wx = w % nw;
            for (int64_t a = 0; a < T; a++) {
                int64_t ya = wy * W + a / W, xa = wx * W + a % W;
                int la = 3 * region(ya, R, W, s) + region(xa, R, W, s);
                for (int64_t b = 0; b < T; b++) {
                    int64_t yb = wy * W + b / W, xb = wx * W + b % W;
                    int lb = 3 * region(yb, R, W, s) + region(xb, R, W, s);
                    fv[(w * T + a) * T + b] = la == lb ? 0.0f : -100.0f;
                }
            }
        }
        return WF_OK;
    }
    case CONST_T5_INDEX: {
        int64_t S = exact_sqrt(x->shape[0]);
        if (x->ndim != 1 || S < 1)
            return wf_errorf(WF_INVAL, "'%s': %lld elements are not S^2", x->name, (long long)x->shape[0]);
        int bidirectional = starts_with(x->name, "encoder.");
        for (int64_t q = 0; q < S; q++)
            for (int64_t kv = 0; kv < S; kv++)
                iv[q * S + kv] = t5_bucket(kv - q, bidirectional);
        return WF_OK;
    }
    case CONST_AF2_RELPOS: {
        /* [B, N, N, 65] */
        if (x->ndim != 4 || x->shape[1] != x->shape[2] || x->shape[3] != 2 * AF_MAX_REL + 1)
            return wf_errorf(WF_INVAL, "'%s': not [B, N, N, %d]", x->name, 2 * AF_MAX_REL + 1);
        const int64_t B = x->shape[0], N = x->shape[1], C = x->shape[3];
        memset(out, 0, (size_t)(B * N * N * C) * sizeof(float));
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < N; j++) {
                    int64_t c = i - j + AF_MAX_REL;
                    c = c < 0 ? 0 : c > 2 * AF_MAX_REL ? 2 * AF_MAX_REL : c;
                    fv[((b * N + i) * N + j) * C + c] = 1.0f;
                }
        return WF_OK;
    }
    case CONST_NONE:
        break;
    }
    return wf_errorf(WF_INTERNAL, "constant input '%s': no rule", x->name);
}

/* ---- inputs made from the run: recycled activations, shifted labels ---- */

/* The graph's forward op named `name`, -1 when none. */
static int op_named(const wf_graph *g, const char *name)
{
    for (int o = 0; o < g->nfwd; o++)
        if (strcmp(g->ops[o].name, name) == 0)
            return o;
    return -1;
}

/* AlphaFold2 (alphafold/model/modules.py at c77e5d2a, AlphaFold.__call__ and
 * EmbeddingsAndEvoformer): the recycled values are the final
 * representations' msa_first_row (row 0 of the MSA after the last Evoformer
 * block) and pair, and the pseudo-beta positions of the structure module.
 * In weft's graph (swin_t5_af2.c) the MSA after the last block is what that
 * block's outer product mean normalizes (the Evoformer's MSA part ends
 * before it), and the final pair is what the distogram head projects. */
int wf_model_recycled_source(const wf_model_config *m, const wf_graph *g, int t)
{
    if (m->family != WF_FAMILY_ALPHAFOLD || t < 0 || t >= g->ntensors || g->tensors[t].role != WF_ROLE_INPUT)
        return -2;
    const char *name = g->tensors[t].name;
    char opname[WF_NAME_LEN];
    int o = -1;
    if (strcmp(name, "prev_msa_first_row") == 0) {
        if (m->layers < 1)
            return -1;
        snprintf(opname, sizeof opname, "evoformer.%d.outer.norm_in", (int)(m->layers - 1));
        o = op_named(g, opname);
    } else if (strcmp(name, "prev_pair") == 0) {
        o = op_named(g, "distogram_head.half_logits");
    } else if (strcmp(name, "prev_pos_distogram") == 0) {
        return -1;
    } else {
        return -2;
    }
    return o >= 0 && g->ops[o].nin > 0 ? g->ops[o].in[0] : -3;
}

/* Hugging Face's T5PreTrainedModel._shift_right (modeling_t5.py at
 * huggingface/transformers 001359e3): decoder_start_token_id (the pad id 0
 * of the t5-* configurations), then labels[..., :-1]. */
int wf_model_shifted_labels_input(const wf_model_config *m, const wf_graph *g, int t)
{
    return m->family == WF_FAMILY_T5 && t >= 0 && t < g->ntensors && g->tensors[t].role == WF_ROLE_INPUT &&
           strcmp(g->tensors[t].name, "decoder_ids") == 0;
}
