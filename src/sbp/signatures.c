/* SBP signatures per op kind (ALGORITHMS.md §2).
 *
 * Each op kind has a 1-D set: the ways one mesh axis may split the op, listed
 * as a layout per input and output (S(k), B or P). The n-D set is the product
 * of the 1-D sets over the mesh axes, filtered by exact divisibility of every
 * operand and by the op's own constraints (attention heads, conv groups).
 *
 * Conventions beyond the table of ALGORITHMS.md:
 * - P (partial sum) appears only where the op is linear in that operand; a
 *   parameter is never P except a bias-like addend (the bias of a row-split
 *   linear or an in-channel-split conv, a parameter added by add/bias_add),
 *   which each device holds whole and all but one treat as zero.
 * - split/concat along their own axis accept S(axis) on every part: the fused
 *   tensor is then stored part-blocked (each device holds its shard of each
 *   part, as Megatron interleaves the fused qkv projection).
 * - reshape/flatten map S(k) to the output dim that starts at the same flat
 *   offset (equal products of the leading dims): the shards are the same
 *   contiguous ranges.
 * - vocabulary-split cross-entropy and batch-split batchnorm all-reduce a few
 *   numbers per token / channel inside the op (internal_bytes). */
#include "weft/sbp.h"

#include <string.h>

enum { INTERNAL_NONE, INTERNAL_VOCAB_CE, INTERNAL_BN_STATS };

typedef struct {
    int8_t in[WF_MAX_INPUTS];
    int8_t out[WF_MAX_OUTPUTS];
    uint8_t internal;
} sig1;

#define MAX_SIG1 64

typedef struct {
    sig1 s[MAX_SIG1];
    int n, nin, nout;
} sig1_list;

#define B WF_SBP_B
#define P WF_SBP_P

/* Appends a signature with every operand set to `fill`; the caller sets the
 * operands that differ. (MAX_SIG1 exceeds the largest set, 2 * WF_MAX_DIMS + 6;
 * were it reached, the last entry would be overwritten.) */
static sig1 *add(sig1_list *l, int8_t fill)
{
    sig1 *s = &l->s[l->n < MAX_SIG1 ? l->n++ : MAX_SIG1 - 1];
    memset(s, 0, sizeof *s);
    for (int i = 0; i < WF_MAX_INPUTS; i++)
        s->in[i] = fill;
    for (int i = 0; i < WF_MAX_OUTPUTS; i++)
        s->out[i] = fill;
    return s;
}

static const wf_tensor *T(const wf_graph *g, int t) { return &g->tensors[t]; }
static int is_param(const wf_graph *g, int t) { return g->tensors[t].role == WF_ROLE_PARAM; }

/* Elementwise on every dim: S(k) -> S(k) for all k, [P -> P], B -> B. */
static void elementwise(sig1_list *l, int ndim, int allow_p)
{
    for (int k = 0; k < ndim; k++)
        add(l, (int8_t)k);
    if (allow_p)
        add(l, P);
}

/* Binary broadcast op a[...], b[suffix of a's shape] -> shape of a. */
static void broadcast_binary(const wf_graph *g, const wf_op *o, sig1_list *l, int mul)
{
    int ra = T(g, o->in[0])->ndim, rb = T(g, o->in[1])->ndim, off = ra - rb;
    for (int k = 0; k < ra; k++) {
        sig1 *s = add(l, (int8_t)k);
        s->in[1] = k >= off ? (int8_t)(k - off) : B;
    }
    if (!mul) {
        add(l, P); /* (a+b) summed over partials: both partial */
    } else {
        /* a*b is linear in each operand separately: P on one side only, and
         * never on a parameter (it would be a weight stored whole but used as
         * a partial, which splits nothing). */
        if (!is_param(g, o->in[0])) {
            sig1 *s = add(l, B);
            s->in[0] = P;
            s->out[0] = P;
        }
        if (!is_param(g, o->in[1])) {
            sig1 *s = add(l, B);
            s->in[1] = P;
            s->out[0] = P;
        }
    }
}

/* The six matmul signatures on the last two dims (M, K) x (K, N) -> (M, N),
 * with the operands' dim indices given (transposes already resolved). Batch
 * dims (if any) stay B. */
static void matmul_core(const wf_graph *g, const wf_op *o, sig1_list *l, int am, int ak, int bk,
                        int bn, int ym, int yn)
{
    sig1 *s = add(l, B); /* (S(M), B -> S(M)) */
    s->in[0] = (int8_t)am;
    s->out[0] = (int8_t)ym;
    s = add(l, B); /* (B, S(N) -> S(N)) */
    s->in[1] = (int8_t)bn;
    s->out[0] = (int8_t)yn;
    s = add(l, B); /* (S(K), S(K) -> P) */
    s->in[0] = (int8_t)ak;
    s->in[1] = (int8_t)bk;
    s->out[0] = P;
    if (!is_param(g, o->in[0])) { /* (P, B -> P) */
        s = add(l, B);
        s->in[0] = P;
        s->out[0] = P;
    }
    if (!is_param(g, o->in[1])) { /* (B, P -> P) */
        s = add(l, B);
        s->in[1] = P;
        s->out[0] = P;
    }
}

/* reshape / flatten: input dim k maps to the output dim with the same
 * product of leading dims (the same flat offset), sizes > 1. */
static void reshape_sigs(const wf_graph *g, const wf_op *o, sig1_list *l)
{
    const wf_tensor *x = T(g, o->in[0]), *y = T(g, o->out[0]);
    int64_t px = 1;
    for (int k = 0; k < x->ndim; k++) {
        if (x->shape[k] > 1) {
            int64_t py = 1;
            for (int j = 0; j < y->ndim; j++) {
                if (py == px && y->shape[j] > 1) {
                    sig1 *s = add(l, B);
                    s->in[0] = (int8_t)k;
                    s->out[0] = (int8_t)j;
                    break;
                }
                py *= y->shape[j];
                if (py > px)
                    break;
            }
        }
        px *= x->shape[k];
    }
    add(l, P);
}

/* Fills the 1-D set of op o (the all-B signature last). */
static void sigs_1d(const wf_graph *g, const wf_op *o, sig1_list *l)
{
    memset(l, 0, sizeof *l);
    l->nin = o->nin;
    l->nout = o->nout;
    const wf_tensor *x = T(g, o->in[0]);
    int r = x->ndim;
    sig1 *s;
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its SBP signatures here");
    switch (o->kind) {
    case WF_OP_MATMUL: {
        /* A[M,K] (trans_a: [K,M]) x B[K,N] (trans_b: [N,K]) -> Y[M,N] */
        int ta = o->attr.trans_a, tb = o->attr.trans_b;
        matmul_core(g, o, l, ta ? 1 : 0, ta ? 0 : 1, tb ? 1 : 0, tb ? 0 : 1, 0, 1);
        break;
    }
    case WF_OP_BATCH_MATMUL: {
        /* A[...,M,K] x B[...,K,N] -> [...,M,N]: batch dims split on both sides. */
        int ta = o->attr.trans_a, tb = o->attr.trans_b, nb = r - 2;
        for (int k = 0; k < nb; k++)
            add(l, (int8_t)k);
        matmul_core(g, o, l, nb + (ta ? 1 : 0), nb + (ta ? 0 : 1), nb + (tb ? 1 : 0),
                    nb + (tb ? 0 : 1), nb, nb + 1);
        break;
    }
    case WF_OP_LINEAR: {
        /* x[...,K], W[K,N], [bias[N]] -> [...,N] */
        int has_b = o->nin == 3;
        for (int k = 0; k < r - 1; k++) { /* split rows (batch, sequence) */
            s = add(l, B);
            s->in[0] = (int8_t)k;
            s->out[0] = (int8_t)k;
        }
        s = add(l, B); /* columns: W S(1), bias S(0) -> S(last) */
        s->in[1] = 1;
        if (has_b)
            s->in[2] = 0;
        s->out[0] = (int8_t)(r - 1);
        s = add(l, B); /* rows: x S(last), W S(0) -> P, bias added once */
        s->in[0] = (int8_t)(r - 1);
        s->in[1] = 0;
        if (has_b)
            s->in[2] = P;
        s->out[0] = P;
        if (!is_param(g, o->in[0])) { /* partial input: (P, B, P -> P) */
            s = add(l, B);
            s->in[0] = P;
            if (has_b)
                s->in[2] = P;
            s->out[0] = P;
        }
        break;
    }
    case WF_OP_BIAS_ADD:
        /* x[...,N], b[N] -> [...,N] */
        for (int k = 0; k < r; k++) {
            s = add(l, (int8_t)k);
            s->in[1] = k == r - 1 ? 0 : B;
        }
        add(l, P);
        break;
    case WF_OP_ADD:
        broadcast_binary(g, o, l, 0);
        break;
    case WF_OP_MUL:
        if (o->nin == 1)
            elementwise(l, r, 1); /* by a constant: linear */
        else
            broadcast_binary(g, o, l, 1);
        break;
    case WF_OP_RELU:
    case WF_OP_GELU:
    case WF_OP_SILU:
    case WF_OP_DROPOUT:
    case WF_OP_TANH:
    case WF_OP_CLIP:
    case WF_OP_HARDSWISH:
    case WF_OP_CAST:
        elementwise(l, r, 0);
        break;
    case WF_OP_EXPAND: {
        /* x broadcast to y: a dim x has whole (not broadcast) splits on both
         * sides; a broadcast copy of a partial sum is a partial sum. */
        const wf_tensor *y = T(g, o->out[0]);
        int off = y->ndim - r;
        for (int k = 0; k < r; k++)
            if (x->shape[k] == y->shape[k + off]) {
                s = add(l, B);
                s->in[0] = (int8_t)k;
                s->out[0] = (int8_t)(k + off);
            }
        s = add(l, B);
        s->in[0] = P;
        s->out[0] = P;
        break;
    }
    case WF_OP_LAYERNORM:
    case WF_OP_RMSNORM:
    case WF_OP_SOFTMAX:
        /* Normalized over the last dim: split only the others; gamma/beta whole. */
        for (int k = 0; k < r - 1; k++) {
            s = add(l, B);
            s->in[0] = (int8_t)k;
            s->out[0] = (int8_t)k;
        }
        break;
    case WF_OP_ATTENTION: {
        /* q[B,S,A*D], k[B,Skv,Akv*D], v -> [B,S,A*D]: batch, heads, or query rows.
         * A bias[Bb,A,S,Skv] splits with them: by its rows when it has one per
         * group of batch rows (Bb > 1; a split of Bb keeps the groups whole),
         * whole when one bias serves every row, by heads, by query rows. */
        int has_bias = o->nin == 4, per_row = has_bias && T(g, o->in[3])->shape[0] > 1;
        s = add(l, 0);
        if (has_bias && !per_row)
            s->in[3] = B;
        s = add(l, 2);
        if (has_bias)
            s->in[3] = 1;
        s = add(l, B);
        s->in[0] = 1;
        if (has_bias)
            s->in[3] = 2;
        s->out[0] = 1;
        break;
    }
    case WF_OP_SIGMOID:
        elementwise(l, r, 0);
        break;
    case WF_OP_ROLL:
        /* A permutation along the rolled dims: split only the others. Linear,
         * so a partial sum rolls to a partial sum. */
        for (int k = 0; k < r; k++)
            if (o->attr.shifts[k] % x->shape[k] == 0)
                add(l, (int8_t)k);
        add(l, P);
        break;
    case WF_OP_EMBEDDING:
        /* ids[B,S], table[V,H] -> [B,S,H] */
        for (int k = 0; k < r; k++) {
            s = add(l, B);
            s->in[0] = (int8_t)k;
            s->out[0] = (int8_t)k;
        }
        s = add(l, B); /* vocabulary split: rows of the table, partial output */
        s->in[1] = 0;
        s->out[0] = P;
        s = add(l, B); /* hidden split: columns of the table */
        s->in[1] = 1;
        s->out[0] = (int8_t)r;
        break;
    case WF_OP_ROTARY:
        elementwise(l, r, 0);
        break;
    case WF_OP_CROSS_ENTROPY: {
        /* logits[...,V], labels[...] -> loss[] (mean): a split gives a partial loss. */
        for (int k = 0; k < r - 1; k++) {
            s = add(l, B);
            s->in[0] = (int8_t)k;
            s->in[1] = (int8_t)k;
            s->out[0] = P;
        }
        s = add(l, B); /* vocabulary split (Megatron): max, sum and target all-reduced */
        s->in[0] = (int8_t)(r - 1);
        s->out[0] = P;
        s->internal = INTERNAL_VOCAB_CE;
        break;
    }
    case WF_OP_CONV2D: {
        /* x[N,C,Hi,Wi], w[O,C/groups,KH,KW], [bias[O]] -> [N,O,Ho,Wo] */
        int has_b = o->nin == 3, groups = o->attr.groups > 1 ? o->attr.groups : 1;
        s = add(l, B); /* batch */
        s->in[0] = 0;
        s->out[0] = 0;
        if (groups == 1) {
            s = add(l, B); /* out-channels */
            s->in[1] = 0;
            if (has_b)
                s->in[2] = 0;
            s->out[0] = 1;
            s = add(l, B); /* in-channels: partial output */
            s->in[0] = 1;
            s->in[1] = 1;
            if (has_b)
                s->in[2] = P;
            s->out[0] = P;
            if (!is_param(g, o->in[0])) {
                s = add(l, B);
                s->in[0] = P;
                if (has_b)
                    s->in[2] = P;
                s->out[0] = P;
            }
        } else {
            s = add(l, B); /* whole groups: channels of x and out, filters of w */
            s->in[0] = 1;
            s->in[1] = 0;
            if (has_b)
                s->in[2] = 0;
            s->out[0] = 1;
        }
        break;
    }
    case WF_OP_MAXPOOL:
        add(l, 0);
        add(l, 1);
        break;
    case WF_OP_AVGPOOL:
        add(l, 0);
        add(l, 1);
        add(l, P);
        break;
    case WF_OP_GLOBAL_AVGPOOL:
        /* x[N,C,Hi,Wi] -> [N,C]; a spatial split gives partial means. */
        add(l, 0);
        add(l, 1);
        for (int k = 2; k < r; k++) {
            s = add(l, B);
            s->in[0] = (int8_t)k;
            s->out[0] = P;
        }
        add(l, P);
        break;
    case WF_OP_BATCHNORM:
        /* x[N,C,...], gamma[C], beta[C]: channels split gamma/beta; any other
         * split all-reduces the batch statistics. */
        for (int k = 0; k < r; k++) {
            s = add(l, B);
            s->in[0] = (int8_t)k;
            s->out[0] = (int8_t)k;
            if (k == 1) {
                s->in[1] = 0;
                s->in[2] = 0;
            } else {
                s->internal = INTERNAL_BN_STATS;
            }
        }
        break;
    case WF_OP_RESHAPE:
    case WF_OP_FLATTEN:
        reshape_sigs(g, o, l);
        break;
    case WF_OP_TRANSPOSE: {
        const wf_tensor *y = T(g, o->out[0]);
        for (int j = 0; j < y->ndim; j++) {
            s = add(l, B);
            s->in[0] = (int8_t)o->attr.perm[j];
            s->out[0] = (int8_t)j;
        }
        add(l, P);
        break;
    }
    case WF_OP_CONCAT:
    case WF_OP_SPLIT:
        /* Any dim (the op's own axis part-blocked, see the top comment). */
        elementwise(l, r, 1);
        break;
    case WF_OP_ROUTER:
        /* x[B,S,H], W[H,E] -> weights, ids [B,S,K]: tokens only (top-k needs
         * every expert's score of a token). */
        for (int k = 0; k < 2; k++) {
            s = add(l, B);
            s->in[0] = (int8_t)k;
            s->out[0] = (int8_t)k;
            s->out[1] = (int8_t)k;
        }
        break;
    case WF_OP_MOE_DISPATCH:
        /* x[B,S,H], ids[B,S,K] -> [E,C,H]: each device dispatches its own
         * tokens into its share of every expert's capacity, or a slice of the
         * hidden features. */
        for (int k = 0; k < 2; k++) {
            s = add(l, B);
            s->in[0] = (int8_t)k;
            s->in[1] = (int8_t)k;
            s->out[0] = 1;
        }
        s = add(l, B);
        s->in[0] = 2;
        s->out[0] = 2;
        break;
    case WF_OP_GROUPED_MLP:
        /* x[E,C,H], w1[E,H,gF], w2[E,F,H] -> [E,C,H]: capacity rows; whole
         * experts (expert parallelism); or the hidden width F, w1's [gate|up]
         * stored part-blocked, with a partial output. */
        s = add(l, B);
        s->in[0] = 1;
        s->out[0] = 1;
        add(l, 0);
        s = add(l, B);
        s->in[1] = 2;
        s->in[2] = 1;
        s->out[0] = P;
        break;
    case WF_OP_MOE_COMBINE:
        /* y[E,C,H], weights, ids [B,S,K] -> [B,S,H]: the mirror of dispatch;
         * split experts give partial sums (linear in y). */
        for (int k = 0; k < 2; k++) {
            s = add(l, B);
            s->in[0] = 1;
            s->in[1] = (int8_t)k;
            s->in[2] = (int8_t)k;
            s->out[0] = (int8_t)k;
        }
        s = add(l, B);
        s->in[0] = 2;
        s->out[0] = 2;
        s = add(l, B);
        s->in[0] = 0;
        s->out[0] = P;
        s = add(l, B);
        s->in[0] = P;
        s->out[0] = P;
        break;
    case WF_OP_COUNT:
        break;
    }
    add(l, B); /* replicated: always possible */
    /* Drop repeats (keep the first) so the n-D product has no duplicates. */
    int n = 0;
    for (int i = 0; i < l->n; i++) {
        int dup = 0;
        for (int j = 0; j < n && !dup; j++)
            dup = memcmp(&l->s[i], &l->s[j], sizeof(sig1)) == 0;
        if (!dup)
            l->s[n++] = l->s[i];
    }
    l->n = n;
}

#undef B
#undef P

/* Op-specific constraints on the n-D signature beyond divisibility. */
static int op_allows(const wf_graph *g, const wf_op *o, const wf_mesh *m, const wf_sbp_sig *s)
{
    int64_t f = 1;
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (o->kind) {
    case WF_OP_ATTENTION: {
        /* Heads split whole: the q (and k/v) hidden dims split by f need A % f == 0. */
        int heads = o->attr.heads > 0 ? o->attr.heads : 1;
        int kv = o->attr.kv_heads > 0 ? o->attr.kv_heads : heads;
        for (int a = 0; a < m->naxes; a++)
            if (s->in[0].ax[a] == 2)
                f *= m->size[a];
        return heads % f == 0 && kv % f == 0;
    }
    case WF_OP_ROTARY: {
        int heads = o->attr.heads > 0 ? o->attr.heads : 1;
        for (int a = 0; a < m->naxes; a++)
            if (s->in[0].ax[a] == 2)
                f *= m->size[a];
        return heads % f == 0;
    }
    case WF_OP_CONV2D: {
        int groups = o->attr.groups > 1 ? o->attr.groups : 1;
        if (groups == 1)
            return 1;
        for (int a = 0; a < m->naxes; a++)
            if (s->in[0].ax[a] == 1)
                f *= m->size[a];
        return groups % f == 0;
    }
    default:
        return 1;
    }
}

static int valid_for(const wf_mesh *m, const wf_tensor *t, const wf_sbp *s)
{
    for (int a = 0; a < m->naxes; a++)
        if (s->ax[a] >= 0 && s->ax[a] >= t->ndim)
            return 0;
    return wf_sbp_valid(m, t->ndim, t->shape, s);
}

/* Elements of tensor t on one device under layout s. */
static double local_numel(const wf_mesh *m, const wf_tensor *t, const wf_sbp *s)
{
    return (double)wf_tensor_numel(t) / (double)wf_sbp_split_factor(m, s);
}

void wf_sbp_sig_replicated(const wf_graph *g, int op, wf_sbp_sig *out)
{
    memset(out, 0, sizeof *out);
    const wf_op *o = &g->ops[op];
    for (int i = 0; i < WF_MAX_INPUTS; i++)
        out->in[i] = wf_sbp_broadcast();
    for (int i = 0; i < WF_MAX_OUTPUTS; i++)
        out->out[i] = wf_sbp_broadcast();
    (void)o;
    out->split = 1;
}

int wf_sbp_op_sigs(const wf_graph *g, int op, const wf_mesh *m, wf_sbp_sig *out, int cap)
{
    if (op < 0 || op >= g->nops)
        return wf_errorf(WF_INVAL, "sbp: op %d outside the graph's %d ops", op, g->nops);
    const wf_op *o = &g->ops[op];
    if (o->kind >= WF_OP_COUNT || o->nin < 1 || o->nout < 1)
        return wf_errorf(WF_INVAL, "sbp: op '%s' is malformed", o->name);
    if (m->naxes < 1 || m->naxes > WF_SBP_MAX_AXES)
        return wf_errorf(WF_INVAL, "sbp: mesh with %d axes", m->naxes);
    sig1_list l;
    sigs_1d(g, o, &l);
    int all_b = l.n - 1; /* add(l, B) came last and survives deduplication last */
    /* Odometer over one 1-D signature per axis (axes of size 1: all-B only). */
    int idx[WF_SBP_MAX_AXES] = {0};
    for (int a = 0; a < m->naxes; a++)
        idx[a] = m->size[a] > 1 ? 0 : all_b;
    int count = 0;
    for (;;) {
        wf_sbp_sig s;
        memset(&s, 0, sizeof s);
        for (int i = 0; i < WF_MAX_INPUTS; i++)
            s.in[i] = wf_sbp_broadcast();
        for (int i = 0; i < WF_MAX_OUTPUTS; i++)
            s.out[i] = wf_sbp_broadcast();
        s.split = 1;
        for (int a = 0; a < m->naxes; a++) {
            const sig1 *t = &l.s[idx[a]];
            int any_s = 0;
            for (int i = 0; i < o->nin; i++) {
                s.in[i].ax[a] = t->in[i];
                any_s |= t->in[i] >= 0;
            }
            for (int i = 0; i < o->nout; i++) {
                s.out[i].ax[a] = t->out[i];
                any_s |= t->out[i] >= 0;
            }
            if (any_s)
                s.split *= m->size[a];
        }
        int ok = op_allows(g, o, m, &s);
        for (int i = 0; ok && i < o->nin; i++)
            ok = valid_for(m, T(g, o->in[i]), &s.in[i]);
        for (int i = 0; ok && i < o->nout; i++)
            ok = valid_for(m, T(g, o->out[i]), &s.out[i]);
        if (ok) {
            for (int a = 0; a < m->naxes; a++) {
                const sig1 *t = &l.s[idx[a]];
                if (t->internal == INTERNAL_VOCAB_CE) {
                    /* max, sum of exponentials and the target logit per token, fp32 */
                    s.internal_bytes[a] = 3.0 * 4.0 * local_numel(m, T(g, o->in[1]), &s.in[1]);
                } else if (t->internal == INTERNAL_BN_STATS) {
                    /* mean and variance per channel forward, two sums backward, fp32 */
                    const wf_tensor *x = T(g, o->in[0]);
                    double c = (double)x->shape[1];
                    for (int b = 0; b < m->naxes; b++)
                        if (s.in[0].ax[b] == 1)
                            c /= (double)m->size[b];
                    s.internal_bytes[a] = 4.0 * 4.0 * c;
                }
            }
            if (count < cap)
                out[count] = s;
            count++;
        }
        /* next combination */
        int a = m->naxes - 1;
        while (a >= 0) {
            if (m->size[a] > 1 && idx[a] + 1 < l.n) {
                idx[a]++;
                break;
            }
            idx[a] = m->size[a] > 1 ? 0 : all_b;
            a--;
        }
        if (a < 0)
            break;
    }
    return count;
}
