/* The SPMD executor: op-level (SBP) plans run on a mesh of MPI ranks.
 *
 * The ranks form the plan's mesh, row-major (axis 0 outermost: rank =
 * sum of coord[a] x stride[a]); each mesh axis has its communicator
 * (MPI_Comm_split: the ranks that differ only in that coordinate). Every rank
 * builds its local graph from the global one (the model at the plan's
 * micro-batch) and the plan's signature per op:
 *
 *   tensors   each at its local shape (wf_sbp_local_shape of its layout);
 *             parameters and inputs in their storage layout (the plan's, else
 *             the first reader's, P stored as B);
 *   ops       the same kinds, attributes adjusted to the shard: attention and
 *             rotary heads per rank, reshape and expand target shapes, split
 *             sizes, conv groups; a vocabulary-split embedding or
 *             cross-entropy knows its shard's first row (wf_exec_spmd);
 *   boxing    where a consumer reads a tensor in another layout than it was
 *             produced in, the steps of wf_sbp_boxing_path (one mesh axis at
 *             a time; S(i) -> S(j) as S(i) -> B -> S(j)) become carrier ops:
 *             a split (the shard shrinks along dim k), a concat of p copies
 *             (it grows) or a one-way split (same shape). The executor calls
 *             back here to run them: S->B all-gather, B->S local slice, P->S
 *             reduce-scatter, S->P zero-fill, P->B all-reduce, B->P kept on
 *             the axis's first rank (zero elsewhere).
 *   backward  the dual layouts: each carrier's backward is the adjoint of its
 *             collective given the gradient's layout (an all-gather's backward
 *             is a local slice of a B gradient or a reduce-scatter of a P
 *             one; an all-reduce of a partial sum's is the identity on B; a
 *             slice's is an all-gather). The gradient a consumer produces for
 *             an input (wf_sbp_grad_of_input) is brought to the producer's
 *             canonical gradient layout (its output with P -> B: Megatron's
 *             f operator is the all-reduce this adds in backward before a
 *             column-parallel linear). A parameter's canonical gradient is
 *             its storage layout, except on the data-parallel axis (the axis
 *             splitting the batch on which every parameter is B), where it is
 *             a partial sum left to dist.c's engine (wfbp, ddp, dear) on that
 *             axis's communicator.
 *
 * Every index map is exact: a dim split by several axes is divided outer
 * axis first, and a dim split into parts (the fused qkv projection feeding a
 * split) holds its shard of each part (Megatron's interleaving), so the
 * shard of every tensor is a set of global indices computed per dim.
 * Parameters start as the single process's: the global executor initializes
 * the full tensors and each rank takes its shard. Dropout masks are drawn at
 * global element indices (wf_exec_view), and losses are partial sums on the
 * axes splitting the batch (the cross-entropy's mean scaled by 1/q), so that
 * every gradient is exact and the reduction is a plain sum: the run equals
 * the single process up to the summation order. */
#include "runtime/dist-impl.h"
#include "runtime/shm_coll-impl.h"
#include "runtime/spmd-impl.h"

#include "weft/cluster.h"
#include "weft/models.h"
#include "weft/runtime_io.h"
#include "weft/sbp.h"
#include "weft/layout.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parts of a part-blocked dim (global sizes, in order); n <= 1: none. */
typedef struct {
    int n;
    int64_t size[WF_MAX_OUTPUTS];
} part_list;

enum { A_COPY, A_ALLREDUCE, A_ROOT, A_ALLGATHER, A_REDSCAT, A_SLICE, A_ZEROFILL, A_ALLTOALL, A_ALLTOALL_BACK };

/* A carrier op of the local graph. */
typedef struct {
    int used;                     /* 1: this op is a carrier */
    int fwd;                      /* forward action */
    int axis, dim;                /* its mesh axis and (grow/shrink) tensor dim */
    int nbwd;                     /* backward actions, in order */
    int bwd[WF_SBP_MAX_AXES + 1];
    int bwd_axis[WF_SBP_MAX_AXES + 1];
    int64_t ns;                   /* grow/shrink: the small shard's extent of dim */
    int64_t *pos;                 /* [p * ns] the big index of rank r's small element i */
    int dim2;                     /* all-to-all S(dim) -> S(dim2): the dim split after */
    int64_t ns2;
    int64_t *pos2;                /* [p * ns2] as pos, for dim2 */
} box_info;

/* A callback's context: the trainer and the first local op of the graph the
 * executor runs (0, or a pipeline stage's first op). */
typedef struct {
    struct wf_spmd *S;
    int lo;
} cb_ctx;

struct wf_spmd {
    wf_train_config c;
    wf_model_config model;
    int64_t vocab_valid;          /* the model's own vocabulary when model is padded as Megatron pads
                                     it (tp does not divide it), else 0 */
    wf_layout ol;
    wf_mesh mesh;
    int naxes;
    int size[WF_SBP_MAX_AXES], coord[WF_SBP_MAX_AXES];
    MPI_Comm world;
    int rank, nranks;
    MPI_Comm group[1 << WF_SBP_MAX_AXES]; /* by mask of axes: the ranks differing only there */
    wf_shm_coll *shm[1 << WF_SBP_MAX_AXES]; /* by mask: that group's shared-memory all-reduce (NULL: MPI's) */
    signed char shm_tried[1 << WF_SBP_MAX_AXES]; /* 1: shm[mask] set up (or refused) already */

    wf_layout_plan L;             /* the op-level form resolved once (wf_layout_index): the mesh, the
                                     global graph at one micro-batch (gg), each op's signature (sig) */
    wf_graph lg;                  /* local graph (forward) */
    wf_sbp *layout;               /* [gg.ntensors] as produced / stored */
    part_list (*parts)[WF_MAX_DIMS]; /* [gg.ntensors] per dim */
    int *local_of;                /* [gg.ntensors] the local tensor holding it as produced */
    int nbox, cap_box;
    box_info *boxes;              /* [lg.nfwd] (fwd 0 for ops that are not carriers) */
    unsigned char *box_op;
    int64_t *vocab_first, *vocab_total;
    int *vocab_mask;              /* [lg ops] axes an op's in-op reduction spans */
    unsigned char *stats_split;
    unsigned char *has_view;
    wf_exec_view *view;
    int nextra;                   /* carrier name counter */
    double loss_div;              /* sum over the world / this = the loss */
    int dist_axis;                /* -1: none */

    wf_exec *e;
    wf_optim *o;
    wf_dist *d;
    float *norm_weight;           /* [gradient block floats] the clipping norm's weights */
    wf_data *data;
    wf_data_layout dl;
    int64_t B, m, gmb;            /* batch, micro-batches, samples per micro-batch */
    int64_t in_numel, lab_numel;
    void *inbuf;                  /* [B, in_numel] the whole global batch */
    int32_t *labbuf;
    int g_in, g_lab, l_in, l_lab; /* global and local input / label tensors */
    int64_t steps;
    float *scratch;
    size_t scratch_floats;
    double comm_s;
    wf_comm_sched plan_comm;      /* the whole-model plan's schedule (wfbp for op-level files) */
    int zero;                     /* the plan's ZeRO stage: the state (zero=3: and each rank's parameter
                                     shards) sharded again over the data-parallel axis */
    int64_t ncoll[5], last_ncoll[5]; /* all-gathers, reduce-scatters, all-reduces, in-op, all-to-alls */
    char plan_note[256];
    char comm_desc[64];
    cb_ctx cb[1 + WF_SPMD_MAX_STAGES]; /* the callbacks' contexts: the whole local graph, then stages */
    int ncb;
};

static int is_p(int8_t v) { return v == WF_SBP_P; }
static int is_s(int8_t v) { return v >= 0; }

/* ---- index maps ------------------------------------------------------------------------- */

/* Global index of local index i of dim k (global extent n, parts pl: NULL
 * for none) of a tensor in layout s on the rank at coords c: block b of f
 * (outer axis first) of the dim, or of each part. */
static int64_t gidx(const wf_spmd *S, const wf_sbp *s, const int *c, int k, int64_t n, const part_list *pl, int64_t i)
{
    int64_t f = 1, b = 0;
    for (int a = 0; a < S->naxes; a++)
        if (s->ax[a] == k) {
            b = b * S->size[a] + c[a];
            f *= S->size[a];
        }
    if (!pl || pl->n <= 1)
        return b * (n / f) + i;
    int64_t gcum = 0, lcum = 0;
    for (int q = 0; q < pl->n; q++) {
        int64_t ls = pl->size[q] / f;
        if (i < lcum + ls)
            return gcum + b * ls + (i - lcum);
        lcum += ls;
        gcum += pl->size[q];
    }
    return -1;
}

static int64_t local_extent(const wf_spmd *S, const wf_sbp *s, int k, int64_t n)
{
    for (int a = 0; a < S->naxes; a++)
        if (s->ax[a] == k)
            n /= S->size[a];
    return n;
}

static void coords_of(const wf_spmd *S, int rank, int *c)
{
    for (int a = S->naxes - 1; a >= 0; a--) {
        c[a] = rank % S->size[a];
        rank /= S->size[a];
    }
}

/* Copies between a global tensor (gshape) and the local block of layout s at
 * coords c (lshape): to_local 1 gathers the block, 0 scatters it. 4-byte
 * elements. */
static void copy_block(const wf_spmd *S, int t, const wf_sbp *s, const int *c, const uint32_t *src, uint32_t *dst,
                       int to_local)
{
    const wf_tensor *x = &S->L.graph.tensors[t];
    int nd = x->ndim;
    int64_t ext[WF_MAX_DIMS], gstride[WF_MAX_DIMS], n = 1, gs = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ext[d] = local_extent(S, s, d, x->shape[d]);
        gstride[d] = gs;
        gs *= x->shape[d];
        n *= ext[d];
    }
    int64_t idx[WF_MAX_DIMS] = {0};
    for (int64_t l = 0; l < n; l++) {
        int64_t g = 0;
        for (int d = 0; d < nd; d++)
            g += gidx(S, s, c, d, x->shape[d], &S->parts[t][d], idx[d]) * gstride[d];
        if (to_local)
            dst[l] = src[g];
        else
            dst[g] = src[l];
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < ext[d])
                break;
            idx[d] = 0;
        }
    }
}

/* ---- communicators ------------------------------------------------------------------------ */

static MPI_Comm group_comm(wf_spmd *S, int mask)
{
    if (S->group[mask] != MPI_COMM_NULL)
        return S->group[mask];
    return MPI_COMM_NULL;
}

static wf_status make_groups(wf_spmd *S)
{
    for (int mask = 0; mask < (1 << S->naxes); mask++) {
        int color = 0;
        for (int a = 0; a < S->naxes; a++)
            color = color * S->size[a] + ((mask >> a) & 1 ? 0 : S->coord[a]);
        if (MPI_Comm_split(S->world, color, S->rank, &S->group[mask]) != MPI_SUCCESS)
            return wf_errorf(WF_MPI, "MPI_Comm_split of the mesh axes failed");
        MPI_Comm_set_errhandler(S->group[mask], MPI_ERRORS_RETURN);
    }
    return WF_OK;
}

static MPI_Comm axis_comm(wf_spmd *S, int a) { return group_comm(S, 1 << a); }

static float *scratch(wf_spmd *S, size_t n)
{
    if (n > S->scratch_floats) {
        float *p = realloc(S->scratch, n * sizeof(float));
        if (!p)
            return NULL;
        S->scratch = p;
        S->scratch_floats = n;
    }
    return S->scratch;
}

/* ---- the carriers' collectives (wf_exec_spmd.box) ----------------------------------------- */

static void extents(const wf_tensor *t, int k, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int d = 0; d < k; d++)
        *outer *= t->shape[d];
    for (int d = k + 1; d < t->ndim; d++)
        *inner *= t->shape[d];
}

static wf_status mpi_rc(int rc, const char *what)
{
    return rc == MPI_SUCCESS ? WF_OK : wf_errorf(WF_MPI, "%s failed (%d)", what, rc);
}

/* buf[0, n) := the sum (is_max: maximum) over the ranks of group `mask` of
 * src[0, n) (src may be buf; the shared-memory sum reads src and writes buf
 * with no copy between them). Sums go through the group's shared-memory all-reduce when its
 * ranks share one node (shm_coll.c: set up at the group's first sum, every
 * rank of the group there at once; WEFT_COLL_SHM=0 keeps MPI's): it runs at
 * memory speed where MPI's moves 8 MB between two ranks at 1.5 GB/s, and
 * every rank gets the same bits (each element summed once, in rank order).
 * Maxima, and groups across nodes, use MPI_Allreduce. */
static wf_status group_allreduce(wf_spmd *S, int mask, const float *src, float *buf, int64_t n, int is_max,
                                 const char *what)
{
    if (!is_max && !S->shm_tried[mask]) {
        int on = 1;
        wf_status st = wf_shm_coll_env(&on);
        if (st != WF_OK)
            return st;
        S->shm_tried[mask] = 1;
        if (on && (st = wf_shm_coll_create(group_comm(S, mask), 0, &S->shm[mask], NULL)) != WF_OK)
            return st;
    }
    if (!is_max && S->shm[mask]) {
        int64_t t = wf_shm_coll_allreduce_to(S->shm[mask], src, buf, n);
        if (t < 0)
            return wf_errorf(WF_NOMEM, "out of memory queueing %s", what);
        wf_shm_coll_wait(S->shm[mask], t);
        return WF_OK;
    }
    if (src != buf)
        memmove(buf, src, (size_t)n * sizeof(float));
    return mpi_rc(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, is_max ? MPI_MAX : MPI_SUM,
                                group_comm(S, mask)), what);
}

/* The all-to-all of S(di) -> S(dj) on an axis: src holds its shard of dim di
 * (ni of it; pi maps every rank's to the gathered index) and dim dj whole
 * (along this axis), dst the other way round (nj of dim dj, pj). Rank q gets
 * the elements of q's dj shard, in the row-major order of the block (dim dj
 * counted by q's shard index); the receiver places rank r's block at r's di
 * indices. dst may alias src. */
static wf_status alltoall(wf_spmd *S, int axis, int di, const int64_t *pi, int64_t ni, int dj, const int64_t *pj,
                          int64_t nj, const float *src, const wf_tensor *ts, float *dst, const wf_tensor *td)
{
    int p = S->size[axis], nd = ts->ndim;
    int64_t ext[WF_MAX_DIMS], ss[WF_MAX_DIMS], ds[WF_MAX_DIMS], blk = 1, a = 1, b = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ss[d] = a;
        ds[d] = b;
        a *= ts->shape[d];
        b *= td->shape[d];
        ext[d] = d == dj ? nj : ts->shape[d];
        blk *= ext[d];
    }
    (void)ni;
    float *send = scratch(S, (size_t)(2 * p * blk));
    if (!send)
        return wf_errorf(WF_NOMEM, "out of memory boxing");
    float *recv = send + p * blk;
    for (int q = 0; q < p; q++) {
        int64_t idx[WF_MAX_DIMS] = {0};
        for (int64_t n = 0; n < blk; n++) {
            int64_t off = 0;
            for (int d = 0; d < nd; d++)
                off += (d == dj ? pj[q * nj + idx[d]] : idx[d]) * ss[d];
            send[q * blk + n] = src[off];
            for (int d = nd - 1; d >= 0; d--) {
                if (++idx[d] < ext[d])
                    break;
                idx[d] = 0;
            }
        }
    }
    double t0 = wf_now_s();
    wf_status st = mpi_rc(MPI_Alltoall(send, (int)blk, MPI_FLOAT, recv, (int)blk, MPI_FLOAT, axis_comm(S, axis)),
                          "MPI_Alltoall (boxing)");
    S->comm_s += wf_now_s() - t0;
    S->ncoll[4]++;
    for (int r = 0; r < p && st == WF_OK; r++) {
        int64_t idx[WF_MAX_DIMS] = {0};
        for (int64_t n = 0; n < blk; n++) {
            int64_t off = 0;
            for (int d = 0; d < nd; d++)
                off += (d == di ? pi[r * ni + idx[d]] : idx[d]) * ds[d];
            dst[off] = recv[r * blk + n];
            for (int d = nd - 1; d >= 0; d--) {
                if (++idx[d] < ext[d])
                    break;
                idx[d] = 0;
            }
        }
    }
    return st;
}

/* One action from src (tensor shape ts) to dst (shape td). */
static wf_status act(wf_spmd *S, const box_info *b, int action, int axis, const float *src, const wf_tensor *ts,
                     float *dst, const wf_tensor *td)
{
    int64_t n_s = wf_tensor_numel(ts), n_d = wf_tensor_numel(td);
    int p = S->size[axis], me = S->coord[axis];
    MPI_Comm comm = axis_comm(S, axis);
    double t0 = wf_now_s();
    wf_status st = WF_OK;
    switch (action) {
    case A_COPY:
        if (dst != src)
            memmove(dst, src, (size_t)n_s * sizeof(float));
        return WF_OK;
    case A_ROOT:
        if (me == 0) {
            if (dst != src)
                memmove(dst, src, (size_t)n_s * sizeof(float));
        } else {
            memset(dst, 0, (size_t)n_d * sizeof(float));
        }
        return WF_OK;
    case A_ALLREDUCE:
        st = group_allreduce(S, 1 << axis, src, dst, n_d, 0, "the all-reduce (boxing)");
        S->ncoll[2]++;
        break;
    case A_SLICE: { /* big src -> small dst */
        int64_t O, I, nb = ts->shape[b->dim];
        extents(ts, b->dim, &O, &I);
        const int64_t *pos = b->pos + (int64_t)me * b->ns;
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < b->ns; i++)
                memcpy(dst + (o * b->ns + i) * I, src + (o * nb + pos[i]) * I, (size_t)I * sizeof(float));
        return WF_OK;
    }
    case A_ZEROFILL: { /* small src -> big dst */
        int64_t O, I, nb = td->shape[b->dim];
        extents(td, b->dim, &O, &I);
        memset(dst, 0, (size_t)n_d * sizeof(float));
        const int64_t *pos = b->pos + (int64_t)me * b->ns;
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < b->ns; i++)
                memcpy(dst + (o * nb + pos[i]) * I, src + (o * b->ns + i) * I, (size_t)I * sizeof(float));
        return WF_OK;
    }
    case A_ALLGATHER: { /* small src -> big dst */
        int64_t O, I, nb = td->shape[b->dim];
        extents(td, b->dim, &O, &I);
        float *recv = scratch(S, (size_t)(p * n_s));
        if (!recv)
            return wf_errorf(WF_NOMEM, "out of memory boxing");
        st = mpi_rc(MPI_Allgather(src, (int)n_s, MPI_FLOAT, recv, (int)n_s, MPI_FLOAT, comm), "MPI_Allgather (boxing)");
        S->ncoll[0]++;
        for (int r = 0; r < p && st == WF_OK; r++) {
            const int64_t *pos = b->pos + (int64_t)r * b->ns;
            const float *blk = recv + (int64_t)r * n_s;
            for (int64_t o = 0; o < O; o++)
                for (int64_t i = 0; i < b->ns; i++)
                    memcpy(dst + (o * nb + pos[i]) * I, blk + (o * b->ns + i) * I, (size_t)I * sizeof(float));
        }
        break;
    }
    case A_REDSCAT: { /* big src -> small dst */
        int64_t O, I, nb = ts->shape[b->dim];
        extents(ts, b->dim, &O, &I);
        float *pack = scratch(S, (size_t)(p * n_d));
        if (!pack)
            return wf_errorf(WF_NOMEM, "out of memory boxing");
        for (int r = 0; r < p; r++) {
            const int64_t *pos = b->pos + (int64_t)r * b->ns;
            float *blk = pack + (int64_t)r * n_d;
            for (int64_t o = 0; o < O; o++)
                for (int64_t i = 0; i < b->ns; i++)
                    memcpy(blk + (o * b->ns + i) * I, src + (o * nb + pos[i]) * I, (size_t)I * sizeof(float));
        }
        st = mpi_rc(MPI_Reduce_scatter_block(pack, dst, (int)n_d, MPI_FLOAT, MPI_SUM, comm),
                    "MPI_Reduce_scatter_block (boxing)");
        S->ncoll[1]++;
        break;
    }
    case A_ALLTOALL: /* S(dim) -> S(dim2) */
        return alltoall(S, axis, b->dim, b->pos, b->ns, b->dim2, b->pos2, b->ns2, src, ts, dst, td);
    case A_ALLTOALL_BACK: /* S(dim2) -> S(dim) */
        return alltoall(S, axis, b->dim2, b->pos2, b->ns2, b->dim, b->pos, b->ns, src, ts, dst, td);
    default:
        return wf_errorf(WF_INTERNAL, "boxing action %d", action);
    }
    S->comm_s += wf_now_s() - t0;
    return st;
}

static wf_status box_cb(void *ctx, int op, int backward, const float *in, float *out)
{
    const cb_ctx *cx = ctx;
    wf_spmd *S = cx->S;
    op += cx->lo;
    const wf_graph *g = &S->lg;
    const wf_op *o = &g->ops[op];
    const box_info *b = &S->boxes[op];
    const wf_tensor *tx = &g->tensors[o->in[0]], *ty = &g->tensors[o->out[0]];
    if (!backward)
        return act(S, b, b->fwd, b->axis, in, tx, out, ty);
    if (!in) {
        memset(out, 0, (size_t)wf_tensor_numel(tx) * sizeof(float));
        return WF_OK;
    }
    /* Backward: the first action maps dy (shape of y) to dx (shape of x);
     * the others (same-shape fixes of the layout) act on dx in place. */
    wf_status st = WF_OK;
    for (int k = 0; k < b->nbwd && st == WF_OK; k++)
        st = k == 0 ? act(S, b, b->bwd[k], b->bwd_axis[k], in, ty, out, tx)
                    : act(S, b, b->bwd[k], b->bwd_axis[k], out, tx, out, tx);
    if (b->nbwd == 0)
        memmove(out, in, (size_t)wf_tensor_numel(tx) * sizeof(float));
    return st;
}

static wf_status allreduce_cb(void *ctx, int op, float *buf, int64_t n, int is_max)
{
    const cb_ctx *cx = ctx;
    wf_spmd *S = cx->S;
    op += cx->lo;
    double t0 = wf_now_s();
    wf_status st = group_allreduce(S, S->vocab_mask[op], buf, buf, n, is_max,
                                   "the all-reduce inside an op (vocabulary-parallel cross-entropy, batch statistics)");
    S->comm_s += wf_now_s() - t0;
    S->ncoll[3]++;
    return st;
}

/* ---- the local graph ------------------------------------------------------------------------ */

static wf_status grow_boxes(wf_spmd *S, int n)
{
    if (wf_grow(&S->boxes, &S->cap_box, n, sizeof *S->boxes, 64) != 0)
        return wf_errorf(WF_NOMEM, "out of memory building the local graph");
    return WF_OK;
}

/* Adds a carrier op reading local tensor x; returns its first output or -1. */
static int add_carrier(wf_spmd *S, int x, int kind, int k, int64_t small, int p, const char *base, box_info *info)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    int in[WF_MAX_INPUTS];
    int nin = 1;
    in[0] = x;
    if (kind == WF_OP_SPLIT) {
        a.axis = k;
        if (small > 0) { /* shrink: [small, rest] */
            a.nsplit = 2;
            a.sizes[0] = small;
            a.sizes[1] = S->lg.tensors[x].shape[k] - small;
        } else {
            a.nsplit = 1;
        }
    } else { /* concat of p copies */
        a.axis = k;
        nin = p;
        for (int i = 0; i < p; i++)
            in[i] = x;
    }
    char name[WF_NAME_LEN];
    snprintf(name, sizeof name, "%.40s.box%d", base, S->nextra++);
    int op = wf_graph_add_op(&S->lg, (wf_op_kind)kind, name, in, nin, &a);
    if (op < 0)
        return -1;
    if (grow_boxes(S, op + 1) != WF_OK)
        return -1;
    S->boxes[op] = *info;
    S->boxes[op].used = 1;
    return wf_graph_op_output(&S->lg, op, 0);
}

/* The backward action of a boxing step (v -> w on axis a) given the gradient
 * layout after it (gw) and the wanted one before it (target); sets *gv. */
static int step_bwd(int8_t v, int8_t w, int8_t gw, int8_t target, int8_t *gv)
{
    if (is_s(v) && is_s(w)) { /* all-to-all: its inverse */
        *gv = v;
        return A_ALLTOALL_BACK;
    }
    if (is_s(v)) { /* grow: all-gather or zero-fill forward */
        *gv = v;
        return is_p(gw) ? A_REDSCAT : A_SLICE;
    }
    if (is_s(w)) { /* shrink: slice or reduce-scatter forward */
        if (!is_p(v) && is_p(target)) {
            *gv = WF_SBP_P;
            return A_ZEROFILL;
        }
        *gv = WF_SBP_B;
        return A_ALLGATHER;
    }
    /* P -> B, B -> P: the gradient of either side is B */
    *gv = WF_SBP_B;
    return is_p(gw) ? A_ALLREDUCE : A_COPY;
}

/* The big index of each rank's small elements for a grow/shrink on axis a
 * of dim k: small layout ls (S(k) on a), big lb (B on a). */
static wf_status step_pos(wf_spmd *S, int t, const wf_sbp *ls, const wf_sbp *lb, int a, int k, box_info *b)
{
    const wf_tensor *x = &S->L.graph.tensors[t];
    int64_t n = x->shape[k], nb = local_extent(S, lb, k, n), ns = local_extent(S, ls, k, n);
    const part_list *np = &S->parts[t][k];
    int p = S->size[a];
    int64_t *inv = malloc((size_t)n * sizeof *inv);
    b->pos = malloc((size_t)(p * ns) * sizeof *b->pos);
    if (!inv || !b->pos) {
        free(inv);
        return wf_errorf(WF_NOMEM, "out of memory building the local graph");
    }
    for (int64_t j = 0; j < n; j++)
        inv[j] = -1;
    for (int64_t j = 0; j < nb; j++)
        inv[gidx(S, lb, S->coord, k, n, np, j)] = j;
    int c[WF_SBP_MAX_AXES];
    memcpy(c, S->coord, sizeof c);
    wf_status st = WF_OK;
    for (int r = 0; r < p; r++) {
        c[a] = r;
        for (int64_t i = 0; i < ns; i++) {
            int64_t j = inv[gidx(S, ls, c, k, n, np, i)];
            if (j < 0)
                st = wf_errorf(WF_INTERNAL, "boxing of '%s': shard index outside the gathered block", x->name);
            b->pos[r * ns + i] = j;
        }
    }
    b->ns = ns;
    free(inv);
    return st;
}

/* The canonical layout of the gradient of global tensor t held as X. */
static wf_sbp grad_target(const wf_spmd *S, int t, const wf_sbp *X)
{
    wf_sbp T = *X;
    int param = S->L.graph.tensors[t].role == WF_ROLE_PARAM;
    for (int a = 0; a < S->naxes; a++) {
        if (is_p(T.ax[a]))
            T.ax[a] = WF_SBP_B;
        if (param && a == S->dist_axis && T.ax[a] == WF_SBP_B)
            T.ax[a] = WF_SBP_P;
    }
    return T;
}

/* The local tensor consumer input (global tensor t, produced as X) is read
 * through, in layout Y, its gradient coming back in layout G. */
static wf_status box_edge(wf_spmd *S, int t, const wf_sbp *X, const wf_sbp *Y, const wf_sbp *G, int *out)
{
    const wf_tensor *x = &S->L.graph.tensors[t];
    int cur = S->local_of[t];
    *out = cur;
    int isint = x->dtype == WF_DTYPE_INT32 || x->dtype == WF_DTYPE_INT64;
    if (isint || S->L.graph.tensors[t].role == WF_ROLE_INPUT || S->L.graph.tensors[t].role == WF_ROLE_LABEL) {
        if (!wf_sbp_equal(X, Y, S->naxes)) {
            char b1[64], b2[64];
            return wf_errorf(WF_INVAL, "op-level plan: input '%s' is read as %s and as %s (the runtime feeds each "
                             "input in one layout)", x->name, wf_sbp_str(X, S->naxes, b1, sizeof b1),
                             wf_sbp_str(Y, S->naxes, b2, sizeof b2));
        }
        return WF_OK;
    }
    /* Elementary steps, one axis each; S(i) -> S(j) through B. */
    wf_sbp_box_step path[16];
    double ts = 0;
    int np = wf_sbp_boxing_path(&S->mesh, x->ndim, x->shape, 4, X, Y, path, 16, &ts);
    if (np < 0 || np > 16)
        return wf_errorf(WF_INVAL, "op-level plan: no boxing of '%s' between its layouts", x->name);
    wf_sbp L[40];
    int ax[40], n = 0;
    L[0] = *X;
    for (int s = 0; s < np; s++) {
        int a = path[s].axis;
        int8_t v = L[n].ax[a], w = path[s].to.ax[a];
        if (v == w)
            continue;
        L[n + 1] = L[n];
        L[n + 1].ax[a] = w;
        ax[n++] = a;
    }
    /* Gradient layouts, backward from the consumer's. */
    wf_sbp T = grad_target(S, t, X), gam[41];
    int bact[40];
    gam[n] = *G;
    for (int s = n - 1; s >= 0; s--) {
        int a = ax[s];
        gam[s] = gam[s + 1];
        bact[s] = step_bwd(L[s].ax[a], L[s + 1].ax[a], gam[s + 1].ax[a], T.ax[a], &gam[s].ax[a]);
    }
    /* The fix of the gradient's layout at the producer: P -> B all-reduce,
     * B -> P kept on the axis's first rank. */
    box_info fix;
    memset(&fix, 0, sizeof fix);
    fix.fwd = A_COPY;
    for (int a = 0; a < S->naxes; a++) {
        int8_t have = gam[0].ax[a], want = T.ax[a];
        if (have == want)
            continue;
        if (is_p(have) && want == WF_SBP_B)
            fix.bwd[fix.nbwd] = A_ALLREDUCE;
        else if (have == WF_SBP_B && is_p(want))
            fix.bwd[fix.nbwd] = A_ROOT;
        else
            return wf_errorf(WF_INTERNAL, "gradient of '%s': layout %d where %d is wanted on axis %d", x->name,
                             have, want, a);
        fix.bwd_axis[fix.nbwd++] = a;
    }
    if (fix.nbwd > 0) {
        /* The first backward action maps dy to dx: a copy, then the fixes. */
        memmove(fix.bwd + 1, fix.bwd, (size_t)fix.nbwd * sizeof fix.bwd[0]);
        memmove(fix.bwd_axis + 1, fix.bwd_axis, (size_t)fix.nbwd * sizeof fix.bwd_axis[0]);
        fix.bwd[0] = A_COPY;
        fix.bwd_axis[0] = 0;
        fix.nbwd++;
        if ((cur = add_carrier(S, cur, WF_OP_SPLIT, 0, 0, 0, x->name, &fix)) < 0)
            return S->lg.status;
    }
    for (int s = 0; s < n; s++) {
        int a = ax[s];
        int8_t v = L[s].ax[a], w = L[s + 1].ax[a];
        box_info b;
        memset(&b, 0, sizeof b);
        b.axis = a;
        b.nbwd = 1;
        b.bwd[0] = bact[s];
        b.bwd_axis[0] = a;
        wf_status st;
        if (is_s(v) && is_s(w)) { /* all-to-all: dim v grows, dim w shrinks (same size) */
            wf_sbp lb = L[s];
            lb.ax[a] = WF_SBP_B;
            b.fwd = A_ALLTOALL;
            b.dim = v;
            b.dim2 = w;
            box_info b2;
            memset(&b2, 0, sizeof b2);
            if ((st = step_pos(S, t, &L[s], &lb, a, v, &b)) != WF_OK ||
                (st = step_pos(S, t, &L[s + 1], &lb, a, w, &b2)) != WF_OK) {
                free(b2.pos);
                free(b.pos);
                return st;
            }
            b.pos2 = b2.pos;
            b.ns2 = b2.ns;
            wf_op_attrs ra;
            memset(&ra, 0, sizeof ra);
            int64_t ls[WF_MAX_DIMS];
            wf_sbp_local_shape(&S->mesh, x, &L[s + 1], ls);
            ra.ndim = x->ndim;
            memcpy(ra.shape, ls, sizeof ls);
            char name[WF_NAME_LEN];
            snprintf(name, sizeof name, "%.40s.box%d", x->name, S->nextra++);
            int op = wf_graph_add_op(&S->lg, WF_OP_RESHAPE, name, &cur, 1, &ra);
            if (op < 0 || grow_boxes(S, op + 1) != WF_OK) {
                free(b.pos);
                free(b.pos2);
                return op < 0 ? S->lg.status : wf_errorf(WF_NOMEM, "out of memory building the local graph");
            }
            S->boxes[op] = b;
            S->boxes[op].used = 1;
            cur = wf_graph_op_output(&S->lg, op, 0);
        } else if (is_s(v)) { /* grow dim v */
            b.dim = v;
            b.fwd = w == WF_SBP_B ? A_ALLGATHER : A_ZEROFILL;
            if (S->size[a] > WF_MAX_INPUTS)
                return wf_errorf(WF_INVAL, "op-level plan: mesh axis %d of %d ranks (the runtime gathers over at "
                                 "most %d)", a, S->size[a], WF_MAX_INPUTS);
            if ((st = step_pos(S, t, &L[s], &L[s + 1], a, v, &b)) != WF_OK)
                return st;
            cur = add_carrier(S, cur, WF_OP_CONCAT, v, 0, S->size[a], x->name, &b);
        } else if (is_s(w)) { /* shrink dim w */
            b.dim = w;
            b.fwd = v == WF_SBP_B ? A_SLICE : A_REDSCAT;
            if ((st = step_pos(S, t, &L[s + 1], &L[s], a, w, &b)) != WF_OK)
                return st;
            cur = add_carrier(S, cur, WF_OP_SPLIT, w, b.ns, 0, x->name, &b);
        } else {
            b.fwd = is_p(v) ? A_ALLREDUCE : A_ROOT;
            cur = add_carrier(S, cur, WF_OP_SPLIT, 0, 0, 0, x->name, &b);
        }
        if (cur < 0)
            return S->lg.status;
    }
    *out = cur;
    return WF_OK;
}

/* Attributes of global op i at the local shapes of its inputs lin[]. */
static wf_status local_attrs(const wf_spmd *S, int i, const int *lin, const int64_t (*lout)[WF_MAX_DIMS],
                             wf_op_attrs *a)
{
    const wf_op *o = &S->L.graph.ops[i];
    const wf_tensor *G = S->L.graph.tensors, *L = S->lg.tensors;
    *a = o->attr;
    _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
    switch (o->kind) {
    case WF_OP_ATTENTION:
    case WF_OP_ROTARY: {
        const wf_tensor *q = &G[o->in[0]], *lq = &L[lin[0]];
        if (lq->shape[1] != q->shape[1])
            return wf_errorf(WF_INVAL, "op-level plan: op '%s' (%s) splits the sequence (the runtime splits "
                             "attention by batch and heads)", o->name, wf_op_name(o->kind));
        int64_t f = q->shape[2] / lq->shape[2];
        a->heads = (int)(o->attr.heads / f);
        if (o->kind == WF_OP_ATTENTION && o->attr.kv_heads > 0) {
            int64_t fk = G[o->in[1]].shape[2] / L[lin[1]].shape[2];
            a->kv_heads = (int)(o->attr.kv_heads / fk);
        }
        return WF_OK;
    }
    case WF_OP_RESHAPE:
    case WF_OP_EXPAND: {
        const wf_tensor *y = &G[o->out[0]];
        a->ndim = y->ndim;
        for (int d = 0; d < y->ndim; d++)
            a->shape[d] = lout[0][d];
        return WF_OK;
    }
    case WF_OP_SPLIT: {
        int given = 0;
        for (int k = 0; k < WF_MAX_OUTPUTS; k++)
            given |= o->attr.sizes[k] != 0;
        if (given) {
            int ax = o->attr.axis < 0 ? o->attr.axis + G[o->in[0]].ndim : o->attr.axis;
            for (int k = 0; k < o->nout; k++)
                a->sizes[k] = lout[k][ax];
        }
        return WF_OK;
    }
    case WF_OP_CONV2D:
        if (o->attr.groups > 1) {
            int64_t f = G[o->in[0]].shape[1] / L[lin[0]].shape[1];
            a->groups = (int)(o->attr.groups / f);
        }
        return WF_OK;
    case WF_OP_GLOBAL_AVGPOOL:
        for (int ax = 0; ax < S->naxes; ax++)
            if (S->L.sig[i].in[0].ax[ax] >= 2)
                return wf_errorf(WF_INVAL, "op-level plan: op '%s' (global_avgpool) with a spatial split is not run "
                                 "yet (its shard's mean would need the other shards' counts)", o->name);
        return WF_OK;
    case WF_OP_ROUTER:
    case WF_OP_MOE_DISPATCH:
    case WF_OP_GROUPED_MLP:
    case WF_OP_MOE_COMBINE:
        return wf_errorf(WF_INVAL, "op-level plan: op '%s' (%s): mixture-of-experts ops run with --plan ep=N, not "
                         "under op-level plans yet", o->name, wf_op_name(o->kind));
    default:
        return WF_OK;
    }
}

/* The view (where the local block lies) of global tensor t in layout s; 0
 * when the block is not one box of the global tensor (parts). */
static int make_view(const wf_spmd *S, int t, const wf_sbp *s, wf_exec_view *v)
{
    const wf_tensor *x = &S->L.graph.tensors[t];
    memset(v, 0, sizeof *v);
    for (int d = 0; d < x->ndim; d++) {
        if (S->parts[t][d].n > 1 && local_extent(S, s, d, x->shape[d]) != x->shape[d])
            return 0;
        v->gshape[d] = x->shape[d];
        v->start[d] = gidx(S, s, S->coord, d, x->shape[d], NULL, 0);
    }
    return 1;
}

/* Part-blocked dims: a split (or concat) along a dim that some axis splits
 * holds each part's shard; the parts carry back through elementwise ops and
 * to the columns of the linear (weight and bias) producing them. */
static wf_status find_parts(wf_spmd *S)
{
    const wf_graph *g = &S->L.graph;
    for (int t = 0; t < g->ntensors; t++)
        for (int d = 0; d < WF_MAX_DIMS; d++)
            S->parts[t][d].n = 1;
    for (int i = g->nfwd - 1; i >= 0; i--) {
        const wf_op *o = &g->ops[i];
        if (o->kind == WF_OP_SPLIT || o->kind == WF_OP_CONCAT) {
            int t = o->kind == WF_OP_SPLIT ? o->in[0] : o->out[0];
            int ax = o->attr.axis < 0 ? o->attr.axis + g->tensors[t].ndim : o->attr.axis;
            const wf_sbp *s = o->kind == WF_OP_SPLIT ? &S->L.sig[i].in[0] : &S->L.sig[i].out[0];
            int64_t f = 1;
            for (int a = 0; a < S->naxes; a++)
                if (s->ax[a] == ax)
                    f *= S->size[a];
            if (f > 1) {
                part_list *pl = &S->parts[t][ax];
                pl->n = o->kind == WF_OP_SPLIT ? o->nout : o->nin;
                for (int q = 0; q < pl->n; q++) {
                    pl->size[q] = g->tensors[o->kind == WF_OP_SPLIT ? o->out[q] : o->in[q]].shape[ax];
                    if (pl->size[q] % f != 0)
                        return wf_errorf(WF_INVAL, "op-level plan: op '%s' splits part %d of '%s' (%lld) %lld ways",
                                         o->name, q, g->tensors[t].name, (long long)pl->size[q], (long long)f);
                }
            }
        }
        /* carry the parts of outputs back to inputs */
        for (int k = 0; k < o->nout; k++) {
            int y = o->out[k];
            const wf_tensor *ty = &g->tensors[y];
            for (int d = 0; d < ty->ndim; d++) {
                const part_list *pl = &S->parts[y][d];
                if (pl->n <= 1 || o->kind == WF_OP_SPLIT || o->kind == WF_OP_CONCAT)
                    continue;
                int last = d == ty->ndim - 1, carried = 0;
                _Static_assert(WF_OP_COUNT == 38, "a new op kind needs its case here: the default below would hide it");
                switch (o->kind) {
                case WF_OP_LINEAR:
                    if (last) { /* the weight's columns, the bias */
                        S->parts[o->in[1]][1] = *pl;
                        if (o->nin > 2)
                            S->parts[o->in[2]][0] = *pl;
                        carried = 1;
                    }
                    break;
                case WF_OP_MATMUL:
                    if (d == 1) { /* B's columns */
                        S->parts[o->in[1]][o->attr.trans_b ? 0 : 1] = *pl;
                        carried = 1;
                    }
                    break;
                case WF_OP_BIAS_ADD:
                case WF_OP_ADD:
                case WF_OP_MUL:
                case WF_OP_RELU:
                case WF_OP_GELU:
                case WF_OP_SILU:
                case WF_OP_DROPOUT:
                case WF_OP_TANH:
                case WF_OP_SIGMOID:
                case WF_OP_CLIP:
                case WF_OP_HARDSWISH:
                    /* elementwise: the same dim of every operand that has it */
                    for (int j = 0; j < o->nin; j++) {
                        const wf_tensor *tx = &g->tensors[o->in[j]];
                        int dx = d - (ty->ndim - tx->ndim);
                        if (dx >= 0 && tx->shape[dx] == ty->shape[d])
                            S->parts[o->in[j]][dx] = *pl;
                    }
                    carried = 1;
                    break;
                default:
                    break;
                }
                int split = 0;
                for (int a = 0; a < S->naxes; a++)
                    split |= S->L.sig[i].out[k].ax[a] == d;
                if (!carried && split)
                    return wf_errorf(WF_INVAL, "op-level plan: op '%s' (%s) produces '%s' split into parts along dim "
                                     "%d (the runtime carries parts through linear, matmul and elementwise ops)",
                                     o->name, wf_op_name(o->kind), ty->name, d);
            }
        }
    }
    return WF_OK;
}

static wf_status build_local(wf_spmd *S)
{
    const wf_graph *g = &S->L.graph;
    int nt = g->ntensors, nf = g->nfwd;
    char b1[96], b2[96];
    S->layout = calloc((size_t)nt, sizeof *S->layout);
    S->parts = calloc((size_t)nt, sizeof *S->parts);
    S->local_of = malloc((size_t)nt * sizeof *S->local_of);
    if (!S->layout || !S->parts || !S->local_of)
        return wf_errorf(WF_NOMEM, "out of memory building the local graph");
    /* The signatures, resolved once (S->L): what this runtime needs of them. */
    for (int i = 0; i < nf; i++) {
        /* Every split must divide its dim: the runtime cuts whole shards. */
        for (int j = 0; j < g->ops[i].nin + g->ops[i].nout; j++) {
            int t = j < g->ops[i].nin ? g->ops[i].in[j] : g->ops[i].out[j - g->ops[i].nin];
            const wf_sbp *l = j < g->ops[i].nin ? &S->L.sig[i].in[j] : &S->L.sig[i].out[j - g->ops[i].nin];
            const wf_tensor *x = &g->tensors[t];
            for (int d = 0; d < x->ndim; d++) {
                int64_t f = 1;
                for (int a = 0; a < S->naxes; a++)
                    if (l->ax[a] == d)
                        f *= S->size[a];
                if (x->shape[d] % f != 0)
                    return wf_errorf(WF_INVAL, "op-level plan: op '%s' splits dim %d of tensor '%s' %s (%s) %lld ways, "
                                     "which does not divide %lld", g->ops[i].name, d, x->name,
                                     wf_shape_str(x, b1, sizeof b1), wf_sbp_str(l, S->naxes, b2, sizeof b2),
                                     (long long)f, (long long)x->shape[d]);
            }
        }
    }
    wf_status pst = find_parts(S);
    if (pst != WF_OK)
        return pst;
    /* Storage of leaves: the plan's, else as the first reader reads them. */
    for (int t = 0; t < nt; t++) {
        S->local_of[t] = -1;
        S->layout[t] = wf_sbp_broadcast();
    }
    for (int t = 0; t < nt; t++) {
        if (g->tensors[t].producer >= 0)
            continue;
        int found = 0;
        for (int k = 0; k < S->L.nstorage && !found; k++) /* as resolved (S->L parsed them) */
            if (strcmp(S->L.graph.tensors[S->L.storage_tensor[k]].name, g->tensors[t].name) == 0) {
                S->layout[t] = S->L.storage[k];
                found = 1;
            }
        for (int i = 0; i < nf && !found; i++)
            for (int j = 0; j < g->ops[i].nin && !found; j++)
                if (g->ops[i].in[j] == t) {
                    S->layout[t] = wf_sbp_storage(&S->L.sig[i].in[j], S->naxes);
                    found = 1;
                }
    }
    /* The data-parallel axis: the loss's batch split, every parameter B. */
    S->dist_axis = -1;
    int loss_op = g->tensors[g->loss].producer;
    for (int a = 0; a < S->naxes && S->dist_axis < 0; a++) {
        if (loss_op < 0 || S->L.sig[loss_op].in[0].ax[a] != 0)
            continue;
        int all_b = 1;
        for (int t = 0; t < nt; t++)
            if (g->tensors[t].role == WF_ROLE_PARAM && S->layout[t].ax[a] != WF_SBP_B)
                all_b = 0;
        if (all_b)
            S->dist_axis = a;
    }
    /* Leaves of the local graph. */
    wf_graph_init(&S->lg, g->name);
    for (int t = 0; t < nt; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (x->producer >= 0 || x->role == WF_ROLE_GRAD)
            continue;
        int64_t ls[WF_MAX_DIMS];
        wf_status st = wf_sbp_local_shape(&S->mesh, x, &S->layout[t], ls);
        if (st != WF_OK)
            return wf_error_prefix(WF_INVAL, "op-level plan: tensor '%s' %s as %s", x->name,
                                   wf_shape_str(x, b1, sizeof b1), wf_sbp_str(&S->layout[t], S->naxes, b2, sizeof b2));
        S->local_of[t] = wf_graph_add_tensor(&S->lg, x->name, x->dtype, x->role, x->ndim, ls);
        if (S->local_of[t] < 0)
            return S->lg.status;
    }
    S->loss_div = (double)S->nranks;
    int local_loss = -1;
    /* Ops in order, each input boxed to its signature's layout. */
    for (int i = 0; i < nf; i++) {
        const wf_op *o = &g->ops[i];
        const wf_sbp_sig *sg = &S->L.sig[i];
        int lin[WF_MAX_INPUTS];
        for (int j = 0; j < o->nin; j++) {
            int t = o->in[j];
            wf_sbp G = wf_sbp_grad_of_input(sg, o->nout, j, S->naxes);
            wf_status st = box_edge(S, t, &S->layout[t], &sg->in[j], &G, &lin[j]);
            if (st != WF_OK)
                return st;
        }
        int64_t lout[WF_MAX_OUTPUTS][WF_MAX_DIMS];
        wf_sbp outl[WF_MAX_OUTPUTS];
        for (int k = 0; k < o->nout; k++) {
            outl[k] = sg->out[k];
            wf_status st = wf_sbp_local_shape(&S->mesh, &g->tensors[o->out[k]], &outl[k], lout[k]);
            if (st != WF_OK)
                return wf_error_prefix(WF_INVAL, "op-level plan: op '%s' output '%s'", o->name,
                                       g->tensors[o->out[k]].name);
        }
        wf_op_attrs a;
        wf_status st = local_attrs(S, i, lin, (const int64_t(*)[WF_MAX_DIMS])lout, &a);
        if (st != WF_OK)
            return st;
        wf_graph_set_block(&S->lg, o->block, o->layer);
        wf_graph_set_tp(&S->lg, o->tp);
        int lop = wf_graph_add_op(&S->lg, o->kind, o->name, lin, o->nin, &a);
        if (lop < 0)
            return wf_error_prefix(WF_INVAL, "op-level plan: op '%s' at its local shapes", o->name);
        for (int k = 0; k < o->nout; k++) {
            int lt = wf_graph_op_output(&S->lg, lop, k);
            const wf_tensor *y = &S->lg.tensors[lt];
            for (int d = 0; d < y->ndim; d++)
                if (y->shape[d] != lout[k][d])
                    return wf_errorf(WF_INVAL, "op-level plan: op '%s' gives its output %s locally where its "
                                     "layout %s needs %lld in dim %d", o->name, wf_shape_str(y, b1, sizeof b1),
                                     wf_sbp_str(&outl[k], S->naxes, b2, sizeof b2), (long long)lout[k][d], d);
            S->local_of[o->out[k]] = lt;
            S->layout[o->out[k]] = outl[k];
        }
        if (grow_boxes(S, lop + 1) != WF_OK)
            return wf_errorf(WF_NOMEM, "out of memory building the local graph");
        /* Vocabulary splits (the last dim of a cross-entropy's logits, the
         * rows of an embedding's table). */
        int vt = -1, vd = 0;
        if (o->kind == WF_OP_EMBEDDING)
            vt = o->in[1], vd = 0;
        else if (o->kind == WF_OP_CROSS_ENTROPY)
            vt = o->in[0], vd = g->tensors[o->in[0]].ndim - 1;
        if (vt >= 0) {
            int mask = 0;
            for (int ax = 0; ax < S->naxes; ax++)
                if (sg->in[o->kind == WF_OP_EMBEDDING ? 1 : 0].ax[ax] == vd)
                    mask |= 1 << ax;
            if (mask) {
                S->vocab_first[lop] = gidx(S, &sg->in[o->kind == WF_OP_EMBEDDING ? 1 : 0], S->coord, vd,
                                           g->tensors[vt].shape[vd], NULL, 0);
                /* The ids and labels lie below the model's own vocabulary;
                 * columns of the padding beyond it are masked (executor.c). */
                S->vocab_total[lop] = S->vocab_valid > 0 ? S->vocab_valid : g->tensors[vt].shape[vd];
                S->vocab_mask[lop] = mask;
                if (S->parts[vt][vd].n > 1)
                    return wf_errorf(WF_INVAL, "op-level plan: op '%s' splits a part-blocked vocabulary", o->name);
            }
            if (o->kind == WF_OP_CROSS_ENTROPY) {
                /* The whole loss on vocabulary axes; a partial sum where
                 * the rows are split: the shard's mean times 1/q. */
                int64_t q = 1;
                for (int ax = 0; ax < S->naxes; ax++) {
                    if (mask >> ax & 1)
                        S->layout[o->out[0]].ax[ax] = WF_SBP_B;
                    else if (is_s(sg->in[0].ax[ax]))
                        q *= S->size[ax];
                    else
                        S->layout[o->out[0]].ax[ax] = WF_SBP_B;
                }
                local_loss = S->local_of[o->out[0]];
                if (q > 1 && o->out[0] == g->loss) {
                    wf_op_attrs ma;
                    memset(&ma, 0, sizeof ma);
                    ma.scale = 1.0 / (double)q;
                    char name[WF_NAME_LEN];
                    snprintf(name, sizeof name, "%.40s.shard_mean", o->name);
                    int in1 = local_loss;
                    local_loss = wf_graph_op1(&S->lg, WF_OP_MUL, name, &in1, 1, &ma);
                    if (local_loss < 0)
                        return S->lg.status;
                }
                if (o->out[0] == g->loss)
                    S->loss_div = (double)S->nranks / (double)q;
            }
        }
        if (o->kind == WF_OP_BATCHNORM) {
            /* Batch statistics over the axes splitting dims other than the channels. */
            int mask = 0;
            for (int ax = 0; ax < S->naxes; ax++)
                if (is_s(sg->in[0].ax[ax]) && sg->in[0].ax[ax] != 1)
                    mask |= 1 << ax;
            S->vocab_mask[lop] = mask;
            S->stats_split[lop] = mask != 0;
        }
        if (o->kind == WF_OP_DROPOUT || (o->kind == WF_OP_ATTENTION && o->attr.p > 0)) {
            if (make_view(S, o->in[0], &sg->in[0], &S->view[lop]))
                S->has_view[lop] = 1;
            else if (o->attr.p > 0)
                return wf_errorf(WF_INVAL, "op-level plan: op '%s' draws dropout on a part-blocked shard", o->name);
        }
    }
    if (grow_boxes(S, S->lg.nops + 1) != WF_OK)
        return wf_errorf(WF_NOMEM, "out of memory building the local graph");
    if (local_loss < 0)
        return wf_errorf(WF_INVAL, "op-level plan: the loss of model '%s' is not a cross-entropy", S->model.name);
    S->lg.loss = local_loss;
    return S->lg.status;
}

wf_status wf_spmd_init_params(wf_spmd *S, wf_exec *e, const wf_exec_opts *eo)
{
    wf_exec *ge = NULL;
    wf_status st = wf_exec_create(&S->L.graph, eo, &ge);
    for (int i = 0; st == WF_OK && i < wf_exec_nparams(e); i++) {
        const wf_exec_param *lp = wf_exec_param_at(e, i);
        int gt = wf_exec_find_tensor(ge, lp->name);
        int gp = gt >= 0 ? wf_exec_param_of_tensor(ge, gt) : -1;
        if (gp < 0) {
            st = wf_errorf(WF_INTERNAL, "parameter '%s' not in the global graph", lp->name);
            break;
        }
        copy_block(S, gt, &S->layout[gt], S->coord, (const uint32_t *)wf_exec_param_at(ge, gp)->data,
                   (uint32_t *)lp->data, 1);
    }
    wf_exec_free(ge);
    return st;
}

void wf_spmd_stage_callbacks(wf_spmd *S, int lo, wf_exec_spmd *out)
{
    int k = 0;
    while (k < S->ncb && S->cb[k].lo != lo)
        k++;
    assert(k < 1 + WF_SPMD_MAX_STAGES);
    if (k == S->ncb)
        S->cb[S->ncb++] = (cb_ctx){S, lo};
    *out = (wf_exec_spmd){&S->cb[k],           S->box_op + lo,      box_cb,         S->vocab_first + lo,
                          S->vocab_total + lo, allreduce_cb,        S->stats_split + lo, S->has_view + lo,
                          S->view + lo};
}

/* ---- setup -------------------------------------------------------------------------------------- */

int wf_spmd_wants(const char *plan)
{
    if (!plan || strcmp(plan, "auto") == 0)
        return 0;
    if (wf_plan_is_oplevel_file(plan))
        return 1;
    wf_plan p;
    if (wf_plan_parse(plan, &p) != WF_OK) {
        wf_clear_error();
        return 0;
    }
    return wf_runtime_engine_of(&p) == WF_ENGINE_SPMD; /* with stages: the pipeline engine */
}

/* The op-level plan: a file as it is, or a whole-model plan lowered. */
static wf_status read_plan(wf_spmd *S, const wf_cluster *cl)
{
    const wf_train_config *c = &S->c;
    wf_layout_init(&S->ol);
    wf_comm_parse("wfbp", &S->plan_comm);
    if (wf_plan_is_oplevel_file(c->plan)) {
        wf_plan whole;
        wf_plan_meta meta;
        int is_ol = 0;
        wf_status st = wf_plan_read_file_any(c->plan, &whole, &S->ol, &meta, &is_ol);
        if (st != WF_OK)
            return st;
        snprintf(S->plan_note, sizeof S->plan_note, "op-level plan %s", c->plan);
    } else {
        wf_plan p;
        wf_status st = wf_plan_parse(c->plan, &p);
        if (st == WF_OK)
            st = wf_plan_complete(&p, S->nranks, c->batch, S->plan_note, sizeof S->plan_note);
        if (st != WF_OK)
            return st;
        S->plan_comm = p.comm;
        /* What the SPMD engine runs: the runtime's table (runs_plan.c). */
        if ((st = wf_runtime_engine_check(WF_ENGINE_SPMD, &p, &S->model)) != WF_OK)
            return st;
        S->zero = p.zero;
        if ((int64_t)p.dp * p.tp != S->nranks)
            return wf_errorf(WF_INVAL, "plan dp=%d,tp=%d needs %d ranks but the job has %d", p.dp, p.tp, p.dp * p.tp,
                             S->nranks);
        /* A vocabulary tp does not divide runs padded as Megatron pads it
         * (src/search/vocab_pad.c); the padding's logits are masked out of
         * the loss (executor.c), so the losses are the unpadded model's. */
        wf_model_config padded;
        if (wf_megatron_pad_model(&S->model, p.tp, &padded)) {
            S->vocab_valid = S->model.vocab;
            S->model = padded;
        }
        /* What Megatron's layout splits tp ways, named before the lowering. */
        const char *what[] = {"vocabulary", "heads", "hidden size", "MLP width"};
        const wf_model_config *mc = &S->model;
        int64_t dims[] = {mc->vocab, mc->heads, mc->hidden, mc->ffn};
        for (int k = 0; k < 4 && wf_model_is_transformer(mc); k++)
            if (dims[k] > 0 && dims[k] % p.tp != 0)
                return wf_errorf(WF_INVAL, "tp=%d does not divide the %s of %s (%lld)", p.tp, what[k], mc->name,
                                 (long long)dims[k]);
        if (p.sp && wf_model_is_transformer(mc) && mc->seq % p.tp != 0)
            return wf_errorf(WF_INVAL, "sp=1 with tp=%d does not divide the sequence of %s (%lld)", p.tp, mc->name,
                             (long long)mc->seq);
        if ((st = wf_plan_lower(&S->model, cl, &p, c->batch, &S->ol)) != WF_OK)
            return st;
        char text[128];
        wf_layout_format(&S->ol, text, sizeof text);
        char pt[160];
        wf_plan_format(&p, pt, sizeof pt);
        size_t n = strlen(S->plan_note);
        snprintf(S->plan_note + n, sizeof S->plan_note - n, "%s%s lowered to %s", n ? "; " : "", pt, text);
    }
    if (S->ol.pp != 1)
        return wf_errorf(WF_INVAL, "op-level plan %s has pp=%d stages: the SPMD runtime runs one stage", c->plan,
                         S->ol.pp);
    return WF_OK;
}

/* The mesh of the op-level plan S->ol on the S->nranks ranks of S->world,
 * its communicators, the global graph at S->gmb samples and the rank's local
 * graph with its carriers. */
static wf_status build_mesh_local(wf_spmd *S, const wf_cluster *clp)
{
    wf_cluster cl = *clp;
    wf_status st;
    /* The op-level form resolved once: the mesh, the global graph at one
     * micro-batch, each op's signature (layout.h). */
    if ((st = wf_layout_index(&S->ol, &S->model, &cl, S->B, &S->L)) != WF_OK)
        return st;
    S->mesh = S->L.mesh;
    int64_t dev = wf_mesh_devices(&S->mesh);
    if (dev != S->nranks)
        return wf_errorf(WF_INVAL, "op-level plan mesh=%s has %lld devices but the job has %d ranks (run under "
                         "mpiexec -n %lld)", S->ol.mesh, (long long)dev, S->nranks, (long long)dev);
    S->naxes = S->mesh.naxes;
    for (int a = 0; a < S->naxes; a++)
        S->size[a] = (int)S->mesh.size[a];
    coords_of(S, S->rank, S->coord);
    if ((st = make_groups(S)) != WF_OK)
        return st;
    if ((st = wf_data_layout_from_graph(&S->L.graph, &S->dl)) != WF_OK)
        return st;
    if (S->vocab_valid > 0) { /* the data know the model's own vocabulary, not the padding */
        if (S->dl.vocab == S->model.vocab)
            S->dl.vocab = S->vocab_valid;
        if (S->dl.classes == S->model.vocab)
            S->dl.classes = S->vocab_valid;
    }
    /* Per local op arrays sized generously: carriers add ops. */
    int cap = 8 * S->L.graph.nfwd + 64;
    S->vocab_first = malloc((size_t)cap * sizeof *S->vocab_first);
    S->vocab_total = calloc((size_t)cap, sizeof *S->vocab_total);
    S->vocab_mask = calloc((size_t)cap, sizeof *S->vocab_mask);
    S->has_view = calloc((size_t)cap, 1);
    S->stats_split = calloc((size_t)cap, 1);
    S->view = calloc((size_t)cap, sizeof *S->view);
    if (!S->vocab_first || !S->vocab_total || !S->vocab_mask || !S->has_view || !S->view || !S->stats_split)
        return wf_errorf(WF_NOMEM, "out of memory");
    for (int i = 0; i < cap; i++)
        S->vocab_first[i] = -1;
    if ((st = build_local(S)) != WF_OK)
        return st;
    if (S->lg.nops > cap)
        return wf_errorf(WF_INTERNAL, "local graph of %d ops (room for %d)", S->lg.nops, cap);
    S->box_op = calloc((size_t)cap, 1);
    if (!S->box_op)
        return wf_errorf(WF_NOMEM, "out of memory");
    for (int i = 0; i < S->lg.nops; i++)
        S->box_op[i] = (unsigned char)S->boxes[i].used;
    return WF_OK;
}

static wf_status setup(wf_spmd *S)
{
    const wf_train_config *c = &S->c;
    wf_status st = wf_model_lookup(c->model, &S->model);
    if (st != WF_OK)
        return st;
    if (S->model.family == WF_FAMILY_ONNX)
        return wf_errorf(WF_INVAL, "model %s: ONNX models run data-parallel only", S->model.name);
    wf_cluster cl;
    if ((st = wf_cluster_of_job(S->c.cluster, S->nranks, &cl)) != WF_OK)
        return st;
    if ((st = read_plan(S, &cl)) != WF_OK)
        return st;
    if (c->batch < 1 || S->ol.micro_batches < 1 || c->batch % S->ol.micro_batches != 0)
        return wf_errorf(WF_INVAL, "batch %lld is not divisible into the plan's %lld micro-batches",
                         (long long)c->batch, (long long)S->ol.micro_batches);
    S->B = c->batch;
    S->m = S->ol.micro_batches;
    S->gmb = S->B / S->m;
    if ((st = build_mesh_local(S, &cl)) != WF_OK)
        return st;
    /* The executor, its parameters the shards of the single process's. */
    wf_exec_opts eo = {c->reference, c->seed};
    if ((st = wf_exec_create(&S->lg, &eo, &S->e)) != WF_OK)
        return st;
    wf_exec_spmd x;
    wf_spmd_stage_callbacks(S, 0, &x);
    wf_exec_set_spmd(S->e, &x);
    if ((st = wf_spmd_init_params(S, S->e, &eo)) != WF_OK)
        return st;
    if ((st = wf_data_open(c->data, &S->dl, c->seed, &S->data)) != WF_OK)
        return st;
    /* ZeRO: the engine keeps the optimizer over this rank's shard of the data-parallel axis. */
    if (!S->zero && (st = wf_optim_create(&c->optim, S->e, &S->o)) != WF_OK)
        return st;
    /* Gradient reduction on the data-parallel axis (dist.c), and the norm
     * for clipping over the other axes. */
    /* The schedule: --comm, else the plan's; auto (not simulated for SPMD
     * plans yet) is wfbp. */
    wf_comm_sched cs = S->plan_comm;
    if (c->comm && (st = wf_comm_parse(c->comm, &cs)) != WF_OK)
        return st;
    if (cs.kind == WF_COMM_AUTO)
        wf_comm_parse("wfbp", &cs);
    int other = ((1 << S->naxes) - 1) & ~(S->dist_axis >= 0 ? 1 << S->dist_axis : 0);
    int nother = 1;
    for (int a = 0; a < S->naxes; a++)
        if (other >> a & 1)
            nother *= S->size[a];
    wf_dist_config dc = {MPI_COMM_NULL, 0, 1, cs, 1, S->c.cluster, S->zero, &c->optim, 0, {0, 0}};
    if (S->dist_axis >= 0) {
        dc.comm = axis_comm(S, S->dist_axis);
        dc.rank = S->coord[S->dist_axis];
        dc.nranks = S->size[S->dist_axis];
    }
    if ((st = wf_dist_create(S->e, S->o, &dc, &S->d)) != WF_OK)
        return st;
    /* Each float of a parameter's gradient counts once over the ranks
     * holding the same shard: 1 / (the sizes of the other axes on which the
     * parameter is not split); padding 0. */
    int64_t gfloats = 0;
    float *gblock = wf_exec_grad_block(S->e, &gfloats);
    S->norm_weight = calloc((size_t)(gfloats + 1), sizeof *S->norm_weight);
    if (!S->norm_weight)
        return wf_errorf(WF_NOMEM, "out of memory");
    for (int i = 0; i < wf_exec_nparams(S->e); i++) {
        const wf_exec_param *lp = wf_exec_param_at(S->e, i);
        int gt = -1;
        for (int t = 0; t < S->L.graph.ntensors && gt < 0; t++)
            if (S->L.graph.tensors[t].role == WF_ROLE_PARAM && strcmp(S->L.graph.tensors[t].name, lp->name) == 0)
                gt = t;
        double w = 1;
        for (int a = 0; a < S->naxes; a++)
            if ((other >> a & 1) && gt >= 0 && !is_s(S->layout[gt].ax[a]))
                w /= S->size[a];
        for (int64_t j = 0; j < lp->numel; j++)
            S->norm_weight[(lp->grad - gblock) + j] = (float)w;
    }
    wf_dist_set_norm(S->d, S->norm_weight, nother > 1 ? group_comm(S, other) : MPI_COMM_NULL);
    /* The loader's tensors. */
    S->g_in = S->g_lab = -1;
    for (int i = 0; i < S->L.graph.ntensors; i++) {
        const wf_tensor *t = &S->L.graph.tensors[i];
        if (t->role == WF_ROLE_LABEL)
            S->g_lab = i;
        if (t->role == WF_ROLE_INPUT && (S->g_in < 0 || strcmp(t->name, "ids") == 0))
            S->g_in = i;
    }
    if (S->g_in < 0 || S->g_lab < 0)
        return wf_errorf(WF_INVAL, "model %s: no input or labels", S->model.name);
    S->l_in = S->local_of[S->g_in];
    S->l_lab = S->local_of[S->g_lab];
    S->in_numel = wf_data_layout_input_numel(&S->dl);
    S->lab_numel = wf_data_layout_label_numel(&S->dl);
    S->inbuf = calloc((size_t)(S->B * S->in_numel), 4);
    S->labbuf = calloc((size_t)(S->B * S->lab_numel), 4);
    if (!S->inbuf || !S->labbuf)
        return wf_errorf(WF_NOMEM, "out of memory for the batch");
    snprintf(S->comm_desc, sizeof S->comm_desc, "%s", wf_dist_describe(S->d));
    return WF_OK;
}

wf_status wf_spmd_create(const wf_train_config *c, MPI_Comm comm, int rank, int nranks, wf_spmd **out)
{
    *out = NULL;
    wf_spmd *S = calloc(1, sizeof *S);
    if (!S)
        return wf_errorf(WF_NOMEM, "out of memory creating the SPMD trainer");
    S->c = *c;
    S->world = comm;
    S->rank = rank;
    S->nranks = nranks;
    for (int k = 0; k < (1 << WF_SBP_MAX_AXES); k++)
        S->group[k] = MPI_COMM_NULL;
    wf_status st = comm == MPI_COMM_NULL ? wf_errorf(WF_INVAL, "an op-level plan needs MPI (run under mpiexec)")
                                         : setup(S);
    st = wf_mpi_agree_on(comm, rank, nranks, st);
    if (st != WF_OK) {
        wf_spmd_free(S);
        return st;
    }
    *out = S;
    return WF_OK;
}

void wf_spmd_free(wf_spmd *S)
{
    if (!S)
        return;
    wf_dist_free(S->d);
    wf_optim_free(S->o);
    wf_exec_free(S->e);
    wf_data_close(S->data);
    wf_layout_plan_free(&S->L);
    wf_graph_free(&S->lg);
    wf_layout_free(&S->ol);
    for (int i = 0; i < S->cap_box; i++)
    {
        free(S->boxes[i].pos);
        free(S->boxes[i].pos2);
    }
    free(S->boxes);
    free(S->box_op);
    free(S->vocab_first);
    free(S->vocab_total);
    free(S->vocab_mask);
    free(S->has_view);
    free(S->stats_split);
    free(S->view);
    free(S->layout);
    free(S->parts);
    free(S->local_of);
    free(S->norm_weight);
    free(S->inbuf);
    free(S->labbuf);
    free(S->scratch);
    int fin = 0;
    MPI_Finalized(&fin);
    for (int k = 0; k < (1 << WF_SBP_MAX_AXES) && !fin; k++)
        wf_shm_coll_free(S->shm[k]);
    for (int k = 0; k < (1 << WF_SBP_MAX_AXES) && !fin; k++)
        if (S->group[k] != MPI_COMM_NULL)
            MPI_Comm_free(&S->group[k]);
    free(S);
}

/* ---- steps ---------------------------------------------------------------------------------------- */

wf_status wf_spmd_step(wf_spmd *S, wf_train_stats *s)
{
    double t0 = wf_now_s();
    memset(s, 0, sizeof *s);
    S->comm_s = 0;
    memset(S->ncoll, 0, sizeof S->ncoll);
    wf_status st = wf_data_next(S->data, S->B, 0, 1, S->inbuf, S->labbuf);
    if (st != WF_OK) {
        memset(S->inbuf, 0, (size_t)(S->B * S->in_numel) * 4);
        memset(S->labbuf, 0, (size_t)(S->B * S->lab_numel) * 4);
    }
    uint32_t *in = wf_exec_leaf_data(S->e, S->l_in);
    uint32_t *lab = wf_exec_leaf_data(S->e, S->l_lab);
    double loss_sum = 0;
    for (int64_t j = 0; j < S->m; j++) {
        copy_block(S, S->g_in, &S->layout[S->g_in], S->coord,
                   (const uint32_t *)S->inbuf + j * S->gmb * S->in_numel, in, 1);
        copy_block(S, S->g_lab, &S->layout[S->g_lab], S->coord, (const uint32_t *)S->labbuf + j * S->gmb * S->lab_numel,
                   lab, 1);
        wf_exec_set_stream(S->e, (uint64_t)S->steps, j * S->gmb);
        wf_dist_begin_micro(S->d, j == 0, j == S->m - 1);
        float loss = 0;
        wf_status fs = wf_exec_forward(S->e, &loss);
        if (fs == WF_MPI)
            return fs;
        if (st == WF_OK)
            st = fs;
        wf_status bs = wf_exec_backward(S->e, j > 0);
        if (bs != WF_OK)
            return bs;
        loss_sum += (double)loss;
    }
    wf_status es = wf_dist_end_backward(S->d, S->steps + 1, 1.0 / (double)S->m);
    if (es != WF_OK)
        return es;
    /* The loss (partial sums over the batch-split axes) and the worst status. */
    double v[2] = {loss_sum / (double)S->m, st == WF_OK ? 0.0 : 1.0};
    double t1 = wf_now_s();
    if (MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, S->world) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Allreduce of the loss failed");
    S->comm_s += wf_now_s() - t1;
    if (v[1] > 0)
        return wf_mpi_agree_on(S->world, S->rank, S->nranks, st == WF_OK ? WF_INVAL : st);
    S->steps++;
    memcpy(S->last_ncoll, S->ncoll, sizeof S->ncoll);
    s->step = S->steps;
    s->loss = v[0] / S->loss_div;
    s->time_s = wf_now_s() - t0;
    s->comm_s = S->comm_s + wf_dist_take_comm_s(S->d);
    s->compute_s = s->time_s - s->comm_s;
    s->grad_norm = wf_dist_grad_norm(S->d);
    s->samples = S->B;
    s->tokens = S->dl.input_dtype == WF_DTYPE_INT32 ? S->B * S->in_numel : 0;
    return WF_OK;
}

wf_status wf_spmd_sync(wf_spmd *S)
{
    wf_status st = wf_dist_sync(S->d);
    wf_dist_take_comm_s(S->d);
    return wf_mpi_agree_on(S->world, S->rank, S->nranks, st);
}

int64_t wf_spmd_steps_done(const wf_spmd *S) { return S->steps; }

wf_exec *wf_spmd_exec(const wf_spmd *S) { return S->e; }

void wf_spmd_ckpt_view(wf_spmd *S, wf_spmd_ckpt *out)
{
    out->e = S->e;
    out->o = S->o;
    out->d = S->d;
    out->data = S->data;
    out->steps = &S->steps;
    out->m = S->m;
    out->model = S->model.name;
    /* The layouts as one FNV-1a hash of the plan: its summary, then every
     * op's signature and every stored layout, each string with its end. */
    char head[160];
    wf_layout_format(&S->ol, head, sizeof head);
    uint64_t h = 1469598103934665603ull;
    const wf_layout *p = &S->ol;
    for (int k = -1; k < 2 * p->nlayouts + 2 * p->nstorage; k++) {
        const char *c = k < 0                 ? head
                        : k < 2 * p->nlayouts ? (k % 2 ? p->sig[k / 2] : p->op[k / 2])
                        : ((k - 2 * p->nlayouts) % 2 ? p->layout : p->tensor)[(k - 2 * p->nlayouts) / 2];
        for (; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ 0xffu) * 1099511628211ull;
    }
    snprintf(out->layouts, sizeof out->layouts, "layouts=mesh %s, plan fnv %016llx", S->ol.mesh,
             (unsigned long long)h);
}

void wf_spmd_info_of(const wf_spmd *S, wf_train_info *out)
{
    memset(out, 0, sizeof *out);
    out->rank = S->rank;
    out->nranks = S->nranks;
    int64_t q = 1;
    if (S->dist_axis >= 0)
        q = S->size[S->dist_axis];
    out->local_batch = S->B / q;
    out->micro_batches = S->m;
    out->micro_batch = S->gmb;
    out->tokens_per_sample = S->dl.input_dtype == WF_DTYPE_INT32 ? S->in_numel : 0;
    out->ngroups = wf_dist_ngroups(S->d);
    for (int t = 0; t < S->L.graph.ntensors; t++)
        if (S->L.graph.tensors[t].role == WF_ROLE_PARAM)
            out->params += wf_tensor_numel(&S->L.graph.tensors[t]);
    snprintf(out->comm, sizeof out->comm, "%s", S->comm_desc);
    snprintf(out->plan_note, sizeof out->plan_note, "%s", S->plan_note);
    snprintf(out->model, sizeof out->model, "%s", S->model.name);
    snprintf(out->data, sizeof out->data, "%s", wf_data_describe(S->data));
    snprintf(out->init, sizeof out->init, "random (seed %llu), each rank its shard",
             (unsigned long long)S->c.seed);
    wf_exec_memory_of(S->e, &out->memory);
    out->zero = S->zero;
    wf_dist_memory(S->d, &out->memory.param_bytes, &out->memory.grad_bytes, &out->optimizer_bytes);
    if (S->dist_axis >= 0)
        snprintf(out->mesh, sizeof out->mesh, "%s (data-parallel axis %d)", S->ol.mesh, S->dist_axis);
    else
        snprintf(out->mesh, sizeof out->mesh, "%s (no data-parallel axis)", S->ol.mesh);
    out->spmd_allgathers = S->last_ncoll[0];
    out->spmd_reduce_scatters = S->last_ncoll[1];
    out->spmd_allreduces = S->last_ncoll[2];
    out->spmd_inop_allreduces = S->last_ncoll[3];
    out->spmd_alltoalls = S->last_ncoll[4];
}

wf_status wf_spmd_gather_params(wf_spmd *S, float *out, int64_t cap, int64_t *n)
{
    wf_status st = wf_spmd_sync(S);
    if (st != WF_OK)
        return st;
    /* ZeRO-3 holds shards of this rank's parameters: its block gathered over the data-parallel axis first. */
    float *image = NULL;
    if (S->zero == 3) {
        image = calloc((size_t)wf_dist_zero_floats(S->d) + 1, sizeof *image);
        st = image ? WF_OK : wf_errorf(WF_NOMEM, "out of memory gathering the parameters");
        st = wf_mpi_agree_on(S->world, S->rank, S->nranks, st);
        if (st == WF_OK)
            st = wf_dist_zero_gather(S->d, image, NULL);
        if (st != WF_OK) {
            free(image);
            return st;
        }
    }
    int64_t off = 0;
    for (int t = 0; t < S->L.graph.ntensors && st == WF_OK; t++) {
        const wf_tensor *x = &S->L.graph.tensors[t];
        if (x->role != WF_ROLE_PARAM)
            continue;
        int64_t gn = wf_tensor_numel(x);
        int lp = wf_exec_param_of_tensor(S->e, S->local_of[t]);
        const wf_exec_param *p = wf_exec_param_at(S->e, lp);
        float *all = malloc((size_t)(p->numel * S->nranks + 1) * sizeof *all);
        if (!all) {
            free(image);
            return wf_errorf(WF_NOMEM, "out of memory gathering parameters");
        }
        if (MPI_Allgather(image ? image + p->offset : p->data, (int)p->numel, MPI_FLOAT, all, (int)p->numel, MPI_FLOAT, S->world) != MPI_SUCCESS)
            st = wf_errorf(WF_MPI, "MPI_Allgather of the parameters failed");
        if (out && off + gn <= cap)
            for (int r = 0; r < S->nranks && st == WF_OK; r++) {
                int c[WF_SBP_MAX_AXES];
                coords_of(S, r, c);
                copy_block(S, t, &S->layout[t], c, (const uint32_t *)(all + (int64_t)r * p->numel),
                           (uint32_t *)(out + off), 0);
            }
        free(all);
        off += gn;
    }
    free(image);
    *n = off;
    return st;
}

/* ---- tensor parallelism inside pipeline stages (pipeline.c) ------------------------------------ */

static int global_param(const wf_spmd *S, const char *name)
{
    for (int t = 0; t < S->L.graph.ntensors; t++)
        if (S->L.graph.tensors[t].role == WF_ROLE_PARAM && strcmp(S->L.graph.tensors[t].name, name) == 0)
            return t;
    return -1;
}

static wf_status create_tp(wf_spmd *S, const wf_plan *whole, int64_t mbs)
{
    wf_cluster cl;
    wf_status st = wf_cluster_of_job(S->c.cluster, S->nranks, &cl);
    if (st != WF_OK)
        return st;
    /* The stage's share of the plan: tp (and sp) on these ranks, one micro-batch. */
    wf_plan p = *whole;
    p.pp = p.vpp = p.dp = 1;
    p.mbs = (int)mbs;
    wf_layout_init(&S->ol);
    if ((st = wf_plan_lower(&S->model, &cl, &p, mbs, &S->ol)) != WF_OK)
        return st;
    S->B = S->gmb = mbs;
    S->m = 1;
    if (S->ol.micro_batches != 1 || S->ol.pp != 1)
        return wf_errorf(WF_INTERNAL, "tp=%d lowered to %lld micro-batches and pp=%d", p.tp,
                         (long long)S->ol.micro_batches, S->ol.pp);
    if ((st = build_mesh_local(S, &cl)) != WF_OK)
        return st;
    if (S->loss_div != (double)S->nranks)
        return wf_errorf(WF_INVAL, "tp=%d inside pipeline stages: the loss is split over the tp ranks", p.tp);
    /* The stages load the whole micro-batch on every tp rank. */
    for (int t = 0; t < S->L.graph.ntensors; t++) {
        const wf_tensor *x = &S->L.graph.tensors[t];
        if ((x->role == WF_ROLE_INPUT || x->role == WF_ROLE_LABEL) && S->local_of[t] >= 0 &&
            wf_tensor_numel(&S->lg.tensors[S->local_of[t]]) != wf_tensor_numel(x))
            return wf_errorf(WF_INVAL, "tp=%d inside pipeline stages: input '%s' is split over the tp ranks", p.tp,
                             x->name);
    }
    return WF_OK;
}

wf_status wf_spmd_create_tp(const wf_model_config *m, int64_t vocab_valid, const wf_plan *whole, int64_t mbs,
                            MPI_Comm comm, wf_spmd **out)
{
    *out = NULL;
    wf_spmd *S = calloc(1, sizeof *S);
    if (!S)
        return wf_errorf(WF_NOMEM, "out of memory creating the stage's tensor parallelism");
    S->model = *m;
    S->vocab_valid = vocab_valid > 0 && vocab_valid < m->vocab ? vocab_valid : 0;
    S->world = comm;
    MPI_Comm_rank(comm, &S->rank);
    MPI_Comm_size(comm, &S->nranks);
    for (int k = 0; k < (1 << WF_SBP_MAX_AXES); k++)
        S->group[k] = MPI_COMM_NULL;
    wf_status st = create_tp(S, whole, mbs);
    if (st != WF_OK) {
        wf_spmd_free(S);
        return st;
    }
    *out = S;
    return WF_OK;
}

const wf_graph *wf_spmd_local_graph(const wf_spmd *S) { return &S->lg; }

double wf_spmd_param_share(const wf_spmd *S, const char *name)
{
    int gt = global_param(S, name);
    double w = 1;
    for (int a = 0; a < S->naxes && gt >= 0; a++)
        if (!is_s(S->layout[gt].ax[a]))
            w /= S->size[a];
    return w;
}

int wf_spmd_tensor_partial(const wf_spmd *S, const char *name)
{
    const wf_graph *g = &S->L.graph;
    for (int t = 0; t < g->ntensors; t++) {
        if (strcmp(g->tensors[t].name, name) != 0)
            continue;
        for (int a = 0; a < S->naxes; a++)
            if (is_p(S->layout[t].ax[a]))
                return 1;
        return 0;
    }
    return 0;
}

int wf_spmd_put_param(const wf_spmd *S, const char *name, const float *local, float *full)
{
    int gt = global_param(S, name);
    if (gt < 0)
        return 0;
    for (int a = 0; a < S->naxes; a++)
        if (!is_s(S->layout[gt].ax[a]) && S->coord[a] != 0)
            return 0;
    copy_block(S, gt, &S->layout[gt], S->coord, (const uint32_t *)local, (uint32_t *)full, 0);
    return 1;
}

void wf_spmd_collectives(const wf_spmd *S, int64_t *ncoll)
{
    memcpy(ncoll, S->ncoll, sizeof S->ncoll);
}
