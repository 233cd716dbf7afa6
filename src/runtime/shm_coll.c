/* Shared-memory collectives among the ranks of one node (shm_coll-impl.h):
 * all-reduce, reduce-scatter and all-gather of floats, moved and summed by
 * the ranks' own cores through one segment that every rank maps
 * (MPI_Win_allocate_shared), progressed between kernels like MPI's
 * non-blocking collectives, and falling back to MPI (the caller's) when the
 * ranks do not share one node.
 *
 * Why: MPICH's all-reduce (ch4:ucx on this machine) moves a large gradient
 * at 1.5-1.6 GB/s between two ranks of one node; a reduce-scatter in which
 * each rank sums its own slice of every rank's buffer, followed by a copy of
 * every slice (the all-gather), reads and writes each byte a fixed small
 * number of times and runs at memory speed (docs/runtime.md, "The
 * shared-memory all-reduce").
 *
 * The segment: rank r owns a header (three counters, each on its own cache
 * line) and two slots of `cap` floats; chunk s of the operation stream uses
 * slot s mod 2 on every rank, so a rank may copy chunk s+1 in while another
 * still reads chunk s. The counters count chunks:
 *   copied[r]   chunks whose input rank r has copied into its slot
 *   reduced[r]  chunks whose slice r rank r has summed (into its own slot)
 *   done[r]     chunks rank r has finished (gathered, or reduced for a
 *               reduce-scatter)
 * and chunk s (0-based, counted over every operation in issue order) steps:
 *   copy    when done[q] >= s-1 for every q (slot s mod 2 is free again):
 *           copy this rank's input in; copied[r] = s+1
 *   reduce  when copied[q] >= s+1 for every q: sum slice r of every rank's
 *           slot, in rank order 0..P-1, into slice r of this rank's slot;
 *           reduced[r] = s+1 (an all-gather has nothing to sum)
 *   gather  when reduced[q] >= s+1 for every q: copy slice q of rank q's
 *           slot out, for every q; done[r] = s+1 (a reduce-scatter writes
 *           its slice out at reduce and has no gather)
 * Each step reads only what the counters it waited on publish (release
 * stores, acquire loads: C11 atomics on the shared words), so every rank
 * gets the same bits: each sum is computed once, by the slice's owner, in a
 * fixed order. A rank that completed an operation leaves the others nothing
 * to wait for on its account, so a rank blocked elsewhere (an MPI call on
 * another communicator) cannot hold up one that waits here for work it has
 * already done; a waiting rank also lets MPI progress (MPI_Iprobe) so that
 * it holds up no one either, and after a short spin yields its core
 * (sched_yield: with more ranks than free cores the peer needs it).
 *
 * This is not a general MPI replacement: one operation at a time in issue
 * order, floats only, sums only, and no operation across nodes. */
#include "runtime/shm_coll-impl.h"
#include "runtime/dist-impl.h"
#include "kernels/kernels-impl.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SHM_HDR_BYTES 4096          /* the counters, a page so the slots start aligned */
#define SHM_LINE 64
#define SHM_DEFAULT_CAP (1 << 20)   /* floats per slot: 4 MiB */
#define SHM_SLICE_ALIGN 16          /* slice boundaries in floats (one AVX-512 vector) */
#define SHM_SUM_BLOCK 1024          /* floats summed per pass over the ranks */
#define SHM_MAX_RANKS 256           /* more ranks on one node: MPI */
#define SHM_SPINS_BEFORE_YIELD 4096 /* a waiting rank keeps its core this long (tens of us: a peer
                                     * on a core answers within it; yielding at once hands the core
                                     * to other jobs for a whole time slice), then yields it (a
                                     * peer off a core needs it) */

typedef enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER } op_kind;

typedef struct {
    op_kind kind;
    const float *in;
    float *out;
    int64_t n; /* allreduce: floats; reduce_scatter and allgather: floats per rank */
} shm_op;

typedef struct {
    _Atomic int64_t *copied, *reduced, *done;
    float *slot[2];
} shm_rank;

struct wf_shm_coll {
    MPI_Comm comm;
    MPI_Win win;
    int rank, nranks;
    int64_t cap; /* floats per slot */
    shm_rank *r; /* [nranks] */
    shm_op *q;   /* the queue: q[head .. count) pending, in issue order */
    int64_t head, count, qcap;
    int64_t issued, completed; /* tickets */
    int64_t seq;   /* chunks completed by this rank over every operation */
    int64_t chunk; /* the head operation's current chunk */
    int phase;     /* 0 copy, 1 reduce, 2 gather */
};

/* ---- chunk geometry ----------------------------------------------------------------------------- */

/* Floats per chunk of an operation: an all-reduce's whole slot; a
 * reduce-scatter's slot holds one piece per rank. */
static int64_t chunk_max(const wf_shm_coll *s, const shm_op *op)
{
    return op->kind == OP_REDUCE_SCATTER ? s->cap / s->nranks : s->cap;
}

static int64_t nchunks(const wf_shm_coll *s, const shm_op *op)
{
    int64_t m = chunk_max(s, op);
    return (op->n + m - 1) / m;
}

/* An all-reduce chunk of L floats: rank q's slice [lo, hi). */
static void slice(int64_t L, int P, int q, int64_t *lo, int64_t *hi)
{
    int64_t per = (L + P - 1) / P;
    per = (per + SHM_SLICE_ALIGN - 1) / SHM_SLICE_ALIGN * SHM_SLICE_ALIGN;
    *lo = (int64_t)q * per < L ? (int64_t)q * per : L;
    *hi = *lo + per < L ? *lo + per : L;
}

/* out[i] = src[0][i] + src[1][i] + ... + src[P-1][i], summed in that order
 * (P >= 2); out may be one of the sources. */
WF_K_HOT static void sum_ranks(float *out, const float *const *src, int P, int64_t n)
{
    float tmp[SHM_SUM_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += SHM_SUM_BLOCK) {
        int64_t m = n - i0 < SHM_SUM_BLOCK ? n - i0 : SHM_SUM_BLOCK;
        const float *a = src[0] + i0, *b = src[1] + i0;
        for (int64_t i = 0; i < m; i++)
            tmp[i] = a[i] + b[i];
        for (int q = 2; q < P; q++) {
            const float *c = src[q] + i0;
            for (int64_t i = 0; i < m; i++)
                tmp[i] += c[i];
        }
        memcpy(out + i0, tmp, (size_t)m * sizeof *out);
    }
}

/* ---- the steps ---------------------------------------------------------------------------------- */

static int all_reached(const wf_shm_coll *s, int which, int64_t v)
{
    for (int q = 0; q < s->nranks; q++) {
        const shm_rank *r = &s->r[q];
        _Atomic int64_t *c = which == 0 ? r->copied : which == 1 ? r->reduced : r->done;
        if (atomic_load_explicit(c, memory_order_acquire) < v)
            return 0;
    }
    return 1;
}

/* One step of the head operation's current chunk; 0 when it must wait for
 * the other ranks. */
static int step(wf_shm_coll *s)
{
    const shm_op *op = &s->q[s->head];
    const int P = s->nranks, me = s->rank;
    const int64_t sq = s->seq, m = chunk_max(s, op), j0 = s->chunk * m;
    const int64_t L = op->n - j0 < m ? op->n - j0 : m;
    const int b = (int)(sq & 1);
    shm_rank *mine = &s->r[me];
    float *slot = mine->slot[b];
    if (s->phase == 0) {
        if (!all_reached(s, 2, sq - 1))
            return 0;
        if (op->kind == OP_REDUCE_SCATTER)
            for (int q = 0; q < P; q++)
                memcpy(slot + (int64_t)q * L, op->in + (int64_t)q * op->n + j0, (size_t)L * sizeof *slot);
        else
            memcpy(slot, op->in + j0, (size_t)L * sizeof *slot);
        atomic_store_explicit(mine->copied, sq + 1, memory_order_release);
        if (op->kind == OP_ALLGATHER)
            atomic_store_explicit(mine->reduced, sq + 1, memory_order_release);
        s->phase = op->kind == OP_ALLGATHER ? 2 : 1;
        return 1;
    }
    if (s->phase == 1) {
        if (!all_reached(s, 0, sq + 1))
            return 0;
        const float *srcp[SHM_MAX_RANKS];
        if (op->kind == OP_REDUCE_SCATTER) {
            for (int q = 0; q < P; q++)
                srcp[q] = s->r[q].slot[b] + (int64_t)me * L;
            sum_ranks(op->out + j0, srcp, P, L);
            atomic_store_explicit(mine->reduced, sq + 1, memory_order_release);
            atomic_store_explicit(mine->done, sq + 1, memory_order_release);
        } else {
            int64_t lo, hi;
            slice(L, P, me, &lo, &hi);
            for (int q = 0; q < P; q++)
                srcp[q] = s->r[q].slot[b] + lo;
            sum_ranks(slot + lo, srcp, P, hi - lo);
            atomic_store_explicit(mine->reduced, sq + 1, memory_order_release);
        }
        s->phase = op->kind == OP_REDUCE_SCATTER ? 3 : 2;
        return 1;
    }
    if (s->phase == 2) {
        if (!all_reached(s, 1, sq + 1))
            return 0;
        for (int q = 0; q < P; q++) {
            const float *from = s->r[q].slot[b];
            if (op->kind == OP_ALLGATHER) {
                memcpy(op->out + (int64_t)q * op->n + j0, from, (size_t)L * sizeof *from);
            } else {
                int64_t lo, hi;
                slice(L, P, q, &lo, &hi);
                memcpy(op->out + j0 + lo, from + lo, (size_t)(hi - lo) * sizeof *from);
            }
        }
        atomic_store_explicit(mine->done, sq + 1, memory_order_release);
        s->phase = 3;
        return 1;
    }
    /* phase 3: the chunk is finished on this rank */
    s->seq++;
    s->chunk++;
    s->phase = 0;
    if (s->chunk >= nchunks(s, op)) {
        s->chunk = 0;
        s->head++;
        s->completed++;
        if (s->head == s->count)
            s->head = s->count = 0;
    }
    return 1;
}

/* Steps while the others allow; with `block`, until ticket t completed. */
static void run(wf_shm_coll *s, int block, int64_t t)
{
    unsigned spins = 0;
    while (s->head < s->count && (!block || s->completed <= t)) {
        if (nchunks(s, &s->q[s->head]) == 0) { /* nothing to move: done on every rank alike */
            s->head++;
            s->completed++;
            if (s->head == s->count)
                s->head = s->count = 0;
            continue;
        }
        if (step(s)) {
            spins = 0;
            continue;
        }
        if (!block)
            return;
        if (++spins % 64 == 0) {
            int flag;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->comm, &flag, MPI_STATUS_IGNORE);
        }
        if (spins > SHM_SPINS_BEFORE_YIELD)
            sched_yield();
    }
}

/* ---- the interface ------------------------------------------------------------------------------ */

wf_status wf_shm_coll_env(int *on)
{
    const char *env = getenv("WEFT_COLL_SHM");
    *on = 1;
    if (!env || !strcmp(env, "1"))
        return WF_OK;
    if (!strcmp(env, "0")) {
        *on = 0;
        return WF_OK;
    }
    return wf_errorf(WF_INVAL, "WEFT_COLL_SHM=%s: use 0 (MPI's collectives) or 1 (shared memory on one node, the "
                     "default)", env);
}

wf_status wf_shm_coll_create(MPI_Comm comm, int64_t chunk_floats, wf_shm_coll **out, const char **why)
{
    *out = NULL;
    int rank = 0, nranks = 1;
    if (comm == MPI_COMM_NULL) {
        if (why)
            *why = "no communicator";
        return WF_OK;
    }
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &nranks);
    if (nranks < 2 || nranks > SHM_MAX_RANKS) {
        if (why)
            *why = nranks < 2 ? "one rank" : "more ranks than the shared all-reduce takes";
        return WF_OK;
    }
    int64_t cap = chunk_floats > 0 ? chunk_floats : SHM_DEFAULT_CAP;
    if (cap < (int64_t)SHM_SLICE_ALIGN * nranks)
        cap = (int64_t)SHM_SLICE_ALIGN * nranks;
    cap = (cap + SHM_SLICE_ALIGN - 1) / SHM_SLICE_ALIGN * SHM_SLICE_ALIGN;

    /* Every rank of comm on this rank's node? (The answer is the same on
     * every rank: across nodes each node's part is smaller than comm.) */
    MPI_Comm node = MPI_COMM_NULL;
    int ok = 1, node_size = 0;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS ||
        node == MPI_COMM_NULL)
        ok = 0;
    else {
        MPI_Comm_size(node, &node_size);
        ok = node_size == nranks;
        MPI_Comm_free(&node);
    }
    int all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Allreduce of the shared-memory check failed");
    if (!all_ok) {
        if (why)
            *why = "the ranks are not on one node";
        return WF_OK;
    }

    wf_shm_coll *s = calloc(1, sizeof *s);
    shm_rank *r = calloc((size_t)nranks, sizeof *r);
    ok = s && r;
    /* The window: refused (no shared memory) returns rather than aborts. */
    MPI_Errhandler old;
    MPI_Comm_get_errhandler(comm, &old);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    void *base = NULL;
    MPI_Win win = MPI_WIN_NULL;
    const MPI_Aint bytes = (MPI_Aint)SHM_HDR_BYTES + 2 * (MPI_Aint)cap * (MPI_Aint)sizeof(float);
    int rc = MPI_Win_allocate_shared(ok ? bytes : 0, 1, MPI_INFO_NULL, comm, &base, &win);
    if (rc != MPI_SUCCESS)
        ok = 0;
    for (int q = 0; ok && q < nranks; q++) {
        MPI_Aint sz = 0;
        int du = 0;
        void *p = NULL;
        if (MPI_Win_shared_query(win, q, &sz, &du, &p) != MPI_SUCCESS || !p || sz < bytes) {
            ok = 0;
            break;
        }
        char *c = p;
        r[q].copied = (_Atomic int64_t *)(void *)c;
        r[q].reduced = (_Atomic int64_t *)(void *)(c + SHM_LINE);
        r[q].done = (_Atomic int64_t *)(void *)(c + 2 * SHM_LINE);
        r[q].slot[0] = (float *)(void *)(c + SHM_HDR_BYTES);
        r[q].slot[1] = r[q].slot[0] + cap;
    }
    if (ok) {
        atomic_init(r[rank].copied, 0);
        atomic_init(r[rank].reduced, 0);
        atomic_init(r[rank].done, 0);
        atomic_thread_fence(memory_order_seq_cst);
    }
    /* Agree: [0] every rank set up, [1] every rank holds the window. */
    int mine[2] = {ok, win != MPI_WIN_NULL}, all[2] = {0, 0};
    rc = MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, comm);
    MPI_Comm_set_errhandler(comm, old);
    MPI_Errhandler_free(&old);
    if (rc != MPI_SUCCESS || !all[0]) {
        /* Free the window together where every rank holds one (where some
         * rank's allocation failed, the others' stays until MPI_Finalize:
         * a collective free would wait for that rank forever). */
        if (rc == MPI_SUCCESS && all[1])
            MPI_Win_free(&win);
        free(r);
        free(s);
        if (why)
            *why = "the shared segment was refused";
        return WF_OK;
    }
    s->comm = comm;
    s->win = win;
    s->rank = rank;
    s->nranks = nranks;
    s->cap = cap;
    s->r = r;
    if (why)
        *why = NULL;
    *out = s;
    return WF_OK;
}

void wf_shm_coll_free(wf_shm_coll *s)
{
    if (!s)
        return;
    wf_shm_coll_wait(s, -1);
    /* The others may still read this rank's last slots: free together. */
    MPI_Barrier(s->comm);
    MPI_Win_free(&s->win);
    free(s->q);
    free(s->r);
    free(s);
}

static int64_t enqueue(wf_shm_coll *s, op_kind kind, const float *in, float *out, int64_t n)
{
    if (s->count == s->qcap) {
        if (s->head > 0) {
            memmove(s->q, s->q + s->head, (size_t)(s->count - s->head) * sizeof *s->q);
            s->count -= s->head;
            s->head = 0;
        } else {
            int64_t nc = s->qcap ? 2 * s->qcap : 64;
            shm_op *q = realloc(s->q, (size_t)nc * sizeof *q);
            if (!q)
                return -1;
            s->q = q;
            s->qcap = nc;
        }
    }
    s->q[s->count++] = (shm_op){kind, in, out, n};
    return s->issued++;
}

int64_t wf_shm_coll_allreduce(wf_shm_coll *s, float *buf, int64_t n)
{
    return enqueue(s, OP_ALLREDUCE, buf, buf, n);
}

int64_t wf_shm_coll_allreduce_to(wf_shm_coll *s, const float *in, float *out, int64_t n)
{
    return enqueue(s, OP_ALLREDUCE, in, out, n);
}

int64_t wf_shm_coll_reduce_scatter(wf_shm_coll *s, const float *in, float *out, int64_t n)
{
    return enqueue(s, OP_REDUCE_SCATTER, in, out, n);
}

int64_t wf_shm_coll_allgather(wf_shm_coll *s, const float *in, float *out, int64_t n)
{
    return enqueue(s, OP_ALLGATHER, in, out, n);
}

void wf_shm_coll_progress(wf_shm_coll *s)
{
    run(s, 0, 0);
}

int wf_shm_coll_done(const wf_shm_coll *s, int64_t t)
{
    return s->completed > t;
}

void wf_shm_coll_wait(wf_shm_coll *s, int64_t t)
{
    if (t < 0)
        t = s->issued - 1;
    if (s->completed > t)
        return;
    wf_mpi_wait_note("the shared-memory collectives");
    run(s, 1, t);
    wf_mpi_wait_note(NULL);
}

int wf_shm_coll_pending(const wf_shm_coll *s)
{
    return (int)(s->issued - s->completed);
}
