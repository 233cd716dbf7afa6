/* Data parallelism over MPI: the gradient reduction of one training step,
 * executed by a comm schedule with non-blocking collectives that overlap the
 * backward pass (ALGORITHMS.md §4 and §6).
 *
 * Groups come from weft/sched.h's wf_sched_build (the simulator plays the
 * same groups): the gradients in parameter order, each "ready" at the index
 * of the backward op producing its final value, with its layer (0 for the
 * parameters read before the first repeated block, block layer + 1 inside,
 * one past the last block after it). The gradient block is laid out so that
 * every group is one contiguous range (each tensor aligned to 16 floats; dear
 * pads a group to a multiple of the ranks with zeros).
 *
 *   wfbp     one MPI_Iallreduce per gradient tensor, issued right after the
 *            backward op that produced it.
 *   ddp[:MiB] buckets in reverse parameter order (the first 1 MiB, the others
 *            25 MiB by default); bucket k's MPI_Iallreduce is issued once all
 *            its gradients are ready and bucket k-1 was issued.
 *   dear[:MiB] groups of whole layers up to the threshold (25 MiB by default).
 *            During backward, each group's MPI_Ireduce_scatter_block is issued
 *            as soon as the group is ready. The step ends without waiting.
 *            In the next forward, before the first op (barrier B0): wait for
 *            every reduce-scatter, compute the gradient norm from the shards
 *            (for clipping), start the all-gather of the first group in
 *            forward order; then before the first forward op reading group g:
 *            wait for g's MPI_Iallgather, start g+1's, apply the optimizer to
 *            g's parameters, and compute. The optimizer state is kept in full
 *            on every rank (every rank updates every parameter from the same
 *            gathered gradient, so parameters stay bit-identical; with zero=1
 *            or 2 the state is sharded, see docs/runtime.md).
 *   horovod[:MiB], mgwfbp, bytescheduler[:MiB]
 *            The groups these form depend on time (Horovod's 1 ms fusion
 *            cycle, MG-WFBP's merge of a tensor whose collective would not
 *            start alpha after the previous one, ByteScheduler's priority
 *            queue), so they are formed on the predicted timeline: each
 *            gradient ready at the cost model's backward time (on the
 *            cluster's device) of every forward op from the last down to
 *            its parameter's first reader, collectives timed on the
 *            cluster's network. Every rank forms the same groups and order
 *            from the same prediction. horovod and mgwfbp groups are issued
 *            in order, each once its gradients are ready (as ddp's);
 *            ByteScheduler's chunks (parts of a tensor up to the chunk size)
 *            are issued in the order its priority queue gives on that
 *            timeline: one chunk at a time on the channel, the ready chunk
 *            of the layer nearest the input first. A fixed order keeps the
 *            ranks' non-blocking collectives matched, which an order taken
 *            from each rank's own completions would not.
 * Between kernels (the executor's after-hook) MPI_Testall lets outstanding
 * collectives progress: MPI moves data only inside MPI calls.
 *
 * Ranks of one node (every rank of the group shares memory) run the same
 * collectives through shm_coll.c instead: the reduce-scatter sums each
 * rank's slice of every rank's buffer in rank order, the all-gather copies,
 * chunk by chunk between kernels as MPI_Testall progresses MPI's; every
 * request above is then a ticket of that engine, and a group across nodes
 * keeps MPI. WEFT_COLL_SHM=0 keeps MPI on one node too (to compare).
 *
 * Gradients are averaged over the global batch: every rank's gradient is the
 * mean over its own samples (per micro-batch, accumulated), so the update
 * scales the summed gradient by 1 / (ranks x micro-batches). The gradient
 * norm for clipping is summed in a fixed order (per group, then per rank) so
 * every rank gets the same bits. With one rank nothing is sent and the same
 * code paths run (dear still defers its updates into the next forward).
 *
 * Pipeline stages (pipeline.c) take the end of the backward in parts
 * (wf_dist_finish_reduce, wf_dist_grad_get / _put, wf_dist_reduced_sumsq,
 * wf_dist_apply_update), so that the tied copies and the clipping norm span
 * the stages: every schedule and every ZeRO stage run that way, dear's
 * barrier B0 then at the end of the step rather than at the next forward's
 * start. */
#include "runtime/dist-impl.h"
#include "kernels/kernels-impl.h"
#include "runtime/shm_coll-impl.h"

#include "weft/cluster.h"
#include "weft/cost.h"
#include "weft/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN_FLOATS 16

typedef struct {
    int first, n;         /* params[first .. first+n) of d->members */
    int64_t off, count;   /* range of the gradient block: [off, off+count), count padded (dear) */
    int64_t shard_off;    /* dear: this rank's shard in d->shards, count / nranks floats */
    int first_fwd;        /* first forward op reading one of its parameters */
    int remaining;        /* gradients not ready yet in this backward */
    int issued;
} group;

struct wf_dist {
    wf_exec *e;
    wf_optim *o;
    MPI_Comm comm;
    int mpi; /* 1 when collectives are sent (an MPI group of more than one rank) */
    int rank, nranks;
    wf_comm_sched sched;
    int overlap;
    char desc[64];

    int ngroups;
    group *groups;
    int *members;      /* parameter indices, grouped */
    int *group_of;     /* [nparams] group of each parameter (its first chunk's), -1 without a gradient */
    int *chunk_next;   /* [ngroups] the group of the same tensor's next chunk, -1 none */
    int *fwd_order;    /* groups by first forward op */
    MPI_Request *req;  /* [ngroups] all-reduce or reduce-scatter */
    MPI_Request *ag;   /* [ngroups] dear all-gather */
    MPI_Status *stat;  /* [ngroups] (GCC misreads MPI_STATUSES_IGNORE's size) */
    wf_shm_coll *shm;  /* one node's shared-memory collectives (NULL: MPI's) */
    int64_t *tk_req, *tk_ag; /* shm: [ngroups] the tickets standing for req and ag (-1 none) */
    int shm_want;            /* shm not set up yet, to try at the next micro-batch */
    wf_status shm_st;        /* that setup's failure, returned by the step's end */
    float *shards;
    int64_t shard_floats;

    int fwd_active, bwd_active;
    int next_issue;
    /* dear's deferred update */
    int pending, b0_done, pos;
    int64_t pending_t;
    double pending_scale;
    double update_scale;

    double comm_s;
    double grad_norm;
    /* Sharded state (ZeRO, see the top): stage, the optimizer over this
     * rank's shard (shard_floats floats at each group's shard_off), ZeRO-3's
     * parameter shard, its parameters without a gradient (whole), and its
     * per-op gather units (the groups). */
    int zero;
    wf_optim *zo;
    float *pshard;       /* zero 3: [shard_floats] this rank's slice of every group's parameters */
    float *resident;     /* zero 3: the parameters without a gradient, whole, at [nograd_off, total) */
    int64_t nograd_off, total;
    int *need_first;     /* zero 3: [nops + 1] need[need_first[o] .. need_first[o+1]) the groups op o reads */
    int *need;
    int *next_w;         /* zero 3: [nops] the next op after o that reads a parameter (nops: none) */
    unsigned char *ustate; /* zero 3: [ngroups] 0 absent, 1 gathering, 2 resident */
    float **ubuf;        /* zero 3: [ngroups] the gathered parameters of a resident group */
    int *mark;           /* zero 3: [ngroups] scratch stamps */
    int stamp;
    int64_t gathered_floats, peak_gathered_floats;

    /* SPMD (spmd.c): each gradient float's square counts norm_weight[j] times
     * (j its index in the gradient block), summed over norm_comm (the ranks
     * holding other shards) */
    const float *norm_weight;
    MPI_Comm norm_comm;
};

/* ---- the predicted timeline (horovod, mgwfbp, bytescheduler) ---------------------------------- */

typedef struct {
    wf_cluster cl;
    wf_group g;
} coll_ctx;

static double coll_time(void *ctx, wf_coll_kind k, double bytes)
{
    const coll_ctx *c = ctx;
    return wf_coll_time(&c->cl, k, &c->g, bytes);
}

/* bwd_from[f] = predicted seconds of the backward of forward ops f..nfwd-1
 * (the time from the start of backward until op f's backward is done). */
static void predict_backward(const wf_graph *g, const wf_cluster *cl, double *bwd_from)
{
    double t = 0;
    bwd_from[g->nfwd] = 0;
    for (int f = g->nfwd - 1; f >= 0; f--) {
        wf_op_cost oc;
        wf_op_cost_of(g, f, &oc);
        t += wf_compute_time(&cl->dev, wf_op_is_matrix(g->ops[f].kind), WF_DTYPE_FP32,
                             oc.bwd_in_flops + oc.bwd_w_flops, oc.bwd_bytes);
        bwd_from[f] = t;
    }
}

/* ByteScheduler's issue order on the predicted timeline: one collective at a
 * time on the channel; whenever it is free, the ready chunk of the lowest
 * priority value (the layer nearest the input; ties by index) goes next, else
 * the next chunk to become ready. order[i] = the op issued i-th. */
static void bytescheduler_order(const wf_comm_schedule *cs, const wf_sched_env *env, int *order)
{
    int n = cs->nops;
    unsigned char *done = calloc((size_t)(n > 0 ? n : 1), 1);
    double t = 0;
    for (int i = 0; i < n; i++) {
        int pick = -1, next = -1;
        for (int k = 0; k < n; k++) {
            if (done && done[k])
                continue;
            const wf_comm_op *o = &cs->ops[k];
            if (o->ready_s <= t && (pick < 0 || o->priority < cs->ops[pick].priority))
                pick = k;
            if (next < 0 || o->ready_s < cs->ops[next].ready_s)
                next = k;
        }
        if (!done) { /* out of memory: the ready order */
            order[i] = i;
            continue;
        }
        if (pick < 0) {
            pick = next;
            t = cs->ops[pick].ready_s;
        }
        done[pick] = 1;
        order[i] = pick;
        t += env->coll(env->coll_ctx, WF_COLL_ALLREDUCE, cs->ops[pick].bytes);
    }
    free(done);
}

static wf_status mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "code %d", rc);
    return wf_errorf(WF_MPI, "%s failed: %s", what, msg);
}

#define MPI_TRY(call, what)                \
    do {                                   \
        int rc_ = (call);                  \
        if (rc_ != MPI_SUCCESS)            \
            return mpi_fail(rc_, (what));  \
    } while (0)

/* ---- setup ---------------------------------------------------------------------------- */

/* Layer of each parameter for dear's whole-layer groups (see the top); in a
 * graph without repeated blocks (an mlp, a small cnn) every op is its own
 * layer: the index of the first forward op reading the parameter. */
static int param_layer(const wf_graph *g, const wf_exec_param *p)
{
    if (p->first_fwd_op < 0)
        return 0;
    int max_layer = -1, before = 1;
    for (int i = 0; i < g->nfwd; i++) {
        if (g->ops[i].layer > max_layer)
            max_layer = g->ops[i].layer;
        if (i < p->first_fwd_op && g->ops[i].layer >= 0)
            before = 0;
    }
    if (max_layer < 0)
        return p->first_fwd_op;
    const wf_op *op = &g->ops[p->first_fwd_op];
    if (op->layer >= 0)
        return op->layer + 1;
    return before ? 0 : max_layer + 2;
}

/* ZeRO-3's units, FSDP's per-module wrapping at the grain of the cost model
 * (estimate.c's "the op being run and the next one with weights"): the
 * gradients whose parameters the same forward op reads first form one
 * unit, gathered whole before the ops that read them and reduce-scattered
 * whole after the backward; units in reverse forward order (the order their
 * gradients become ready). */
static wf_status zero3_units(const wf_exec *e, const wf_grad *grads, const int *gparam, int ng, wf_arena *a,
                             wf_comm_schedule *cs)
{
    memset(cs, 0, sizeof *cs);
    cs->kind = WF_COMM_WFBP;
    cs->ops = wf_arena_alloc(a, (size_t)(ng > 0 ? ng : 1) * sizeof *cs->ops);
    cs->parts = wf_arena_alloc(a, (size_t)(ng > 0 ? ng : 1) * sizeof *cs->parts);
    if (!cs->ops || !cs->parts)
        return wf_errorf(WF_NOMEM, "out of memory");
    int last = INT32_MAX;
    for (;;) {
        int f = -1; /* the largest first reader below the last unit's */
        for (int i = 0; i < ng; i++) {
            int ff = wf_exec_param_at(e, gparam[i])->first_fwd_op;
            if (ff < last && ff > f)
                f = ff;
        }
        if (f < 0 && last == -1)
            break;
        wf_comm_op *op = &cs->ops[cs->nops];
        memset(op, 0, sizeof *op);
        op->kind = WF_COLL_REDUCE_SCATTER;
        op->first_part = cs->nparts;
        op->after = op->tick = -1;
        for (int i = 0; i < ng; i++)
            if (wf_exec_param_at(e, gparam[i])->first_fwd_op == f) {
                cs->parts[cs->nparts++] = (wf_comm_part){i, 0, grads[i].bytes};
                op->bytes += grads[i].bytes;
            }
        op->nparts = cs->nparts - op->first_part;
        if (op->nparts > 0)
            cs->nops++;
        if (f < 0)
            break;
        last = f;
    }
    return WF_OK;
}

/* The sharded state, once the groups are laid out (goff: each parameter's
 * offset in the gradient block, total floats, the parameters without a
 * gradient from nograd_off): the parameter block takes the same layout, so
 * that a group's parameters are one range too; the optimizer covers this
 * rank's slice of every group. ZeRO-3 keeps that slice of the parameters
 * (and those without a gradient whole), frees the block, and lists the
 * units each op reads. */
static wf_status zero_setup(wf_dist *d, const wf_dist_config *c, const wf_comm_schedule *cs, const int *gparam,
                            const int64_t *goff, int64_t nograd_off, int64_t total)
{
    wf_exec *e = d->e;
    for (int i = 0; i < cs->nops; i++)
        for (int j = 0; j < cs->ops[i].nparts; j++) {
            const wf_comm_part *pt = &cs->parts[cs->ops[i].first_part + j];
            if (pt->offset_bytes != 0 || pt->bytes != 4.0 * (double)wf_exec_param_at(e, gparam[pt->grad])->numel)
                return wf_errorf(WF_INVAL, "zero=%d: the schedule splits a tensor across collectives", c->zero);
        }
    wf_status st = wf_exec_set_param_layout(e, goff, total);
    if (st != WF_OK)
        return st;
    if ((st = wf_optim_create_flat(c->optim, d->shard_floats, &d->zo)) != WF_OK)
        return st;
    d->o = d->zo;
    d->total = total;
    d->nograd_off = nograd_off;
    if (c->zero < 3)
        return WF_OK;
    const float *pb = wf_exec_param_block(e, NULL);
    const wf_graph *g = wf_exec_graph(e);
    int ng = d->ngroups, np = wf_exec_nparams(e);
    d->pshard = calloc((size_t)(d->shard_floats > 0 ? d->shard_floats : 1), sizeof(float));
    d->resident = calloc((size_t)(total - nograd_off > 0 ? total - nograd_off : 1), sizeof(float));
    d->ustate = calloc((size_t)(ng > 0 ? ng : 1), 1);
    d->ubuf = calloc((size_t)(ng > 0 ? ng : 1), sizeof *d->ubuf);
    d->mark = calloc((size_t)(ng > 0 ? ng : 1), sizeof *d->mark);
    d->need_first = calloc((size_t)g->nops + 1, sizeof *d->need_first);
    d->next_w = malloc((size_t)(g->nops > 0 ? g->nops : 1) * sizeof *d->next_w);
    int *tmp = malloc((size_t)(np > 0 ? np : 1) * sizeof *tmp);
    if (!d->pshard || !d->resident || !d->ustate || !d->ubuf || !d->mark || !d->need_first || !d->next_w || !tmp) {
        free(tmp);
        return wf_errorf(WF_NOMEM, "out of memory for ZeRO-3's shards");
    }
    for (int k = 0; k < ng; k++) {
        const group *gr = &d->groups[k];
        int64_t n = gr->count / d->nranks;
        memcpy(d->pshard + gr->shard_off, pb + gr->off + d->rank * n, (size_t)n * sizeof(float));
    }
    memcpy(d->resident, pb + nograd_off, (size_t)(total - nograd_off) * sizeof(float));
    /* The units each op reads: counted, then listed (an op's units in first-seen order). */
    int nneed = 0;
    for (int pass = 0; pass < 2; pass++) {
        nneed = 0;
        for (int o = 0; o < g->nops; o++) {
            d->need_first[o] = nneed;
            int n = wf_exec_op_params(e, o, tmp, np);
            d->stamp++;
            for (int q = 0; q < n && q < np; q++) {
                int k = d->group_of[tmp[q]];
                if (k < 0 || d->mark[k] == d->stamp)
                    continue;
                d->mark[k] = d->stamp;
                if (pass == 1)
                    d->need[nneed] = k;
                nneed++;
            }
        }
        d->need_first[g->nops] = nneed;
        if (pass == 0 && !(d->need = malloc((size_t)(nneed > 0 ? nneed : 1) * sizeof *d->need))) {
            free(tmp);
            return wf_errorf(WF_NOMEM, "out of memory");
        }
    }
    free(tmp);
    int nxt = g->nops;
    for (int o = g->nops - 1; o >= 0; o--) {
        d->next_w[o] = nxt;
        if (d->need_first[o + 1] > d->need_first[o])
            nxt = o;
    }
    wf_exec_release_params(e);
    for (int i = 0; i < np; i++)
        if (d->group_of[i] < 0)
            wf_exec_bind_param(e, i, d->resident + (goff[i] - nograd_off));
    return WF_OK;
}

/* Whether to try the shared-memory collectives (WEFT_COLL_SHM; no
 * communication, so that creating the engine stays local). */
static wf_status shm_want(wf_dist *d)
{
    int on = 1;
    wf_status st = wf_shm_coll_env(&on);
    d->shm_want = d->mpi && on;
    return st;
}

/* The shared-memory collectives when every rank of the group is on this
 * node (collective over the group, so made at the first micro-batch, when
 * every rank has created its engine; see the top). */
static wf_status shm_setup(wf_dist *d)
{
    if (!d->shm_want)
        return WF_OK;
    d->shm_want = 0;
    wf_status st = wf_shm_coll_create(d->comm, 0, &d->shm, NULL);
    if (st != WF_OK || !d->shm)
        return st;
    d->tk_req = malloc((size_t)(d->ngroups > 0 ? d->ngroups : 1) * sizeof *d->tk_req);
    d->tk_ag = malloc((size_t)(d->ngroups > 0 ? d->ngroups : 1) * sizeof *d->tk_ag);
    if (!d->tk_req || !d->tk_ag)
        return wf_errorf(WF_NOMEM, "out of memory");
    for (int k = 0; k < d->ngroups; k++)
        d->tk_req[k] = d->tk_ag[k] = -1;
    return WF_OK;
}

const char *wf_dist_transport(const wf_dist *d)
{
    return !d->mpi ? "none" : d->shm ? "shm" : "mpi";
}

wf_status wf_dist_group_place(const wf_dist_config *c, wf_cluster *cl, wf_group *g)
{
    const int64_t job = c->job_ranks > 0 ? c->job_ranks : c->nranks;
    wf_axis_ranks a = c->group;
    if (a.size < 1) {
        wf_axis_ranks ax[WF_AXIS_COUNT];
        wf_rank_axes_dense(1, 1, c->nranks, 1, ax);
        a = ax[WF_AXIS_DP];
    }
    if (a.size != c->nranks || a.stride < 1 || (a.size - 1) * a.stride >= job)
        return wf_errorf(WF_INTERNAL, "data-parallel group of %lld ranks %lld apart in a job of %lld ranks "
                         "(the engine has %d)", (long long)a.size, (long long)a.stride, (long long)job, c->nranks);
    if (job > INT32_MAX)
        return wf_errorf(WF_INVAL, "a job of %lld ranks", (long long)job);
    wf_status st = wf_cluster_of_job(c->cluster, (int)job, cl);
    if (st != WF_OK)
        return st;
    /* A job wider than the cluster's devices shares them: the group then
     * spans what the cluster has. */
    const int64_t devs = wf_cluster_devices(cl);
    int64_t size = a.size, stride = a.stride;
    if ((size - 1) * stride >= devs) {
        stride = stride < devs ? stride : 1;
        size = (devs - 1) / stride + 1 < size ? (devs - 1) / stride + 1 : size;
    }
    *g = wf_group_place(cl, size, stride);
    return WF_OK;
}

wf_status wf_dist_create(wf_exec *e, wf_optim *o, const wf_dist_config *c, wf_dist **out)
{
    *out = NULL;
    const wf_comm_kind kind = c->sched.kind;
    if (kind != WF_COMM_WFBP && kind != WF_COMM_DDP && kind != WF_COMM_DEAR && kind != WF_COMM_HOROVOD &&
        kind != WF_COMM_MGWFBP && kind != WF_COMM_BYTESCHEDULER)
        return wf_errorf(WF_INVAL, "comm schedule '%s' is not executed by the runtime (use wfbp, ddp[:MiB], "
                         "dear[:MiB], horovod[:MiB], mgwfbp or bytescheduler[:MiB])",
                         wf_comm_name(kind));
    if (c->zero < 0 || c->zero > 3)
        return wf_errorf(WF_INVAL, "zero=%d: the ZeRO stage is 0, 1, 2 or 3", c->zero);
    if (c->zero && (!c->optim || o))
        return wf_errorf(WF_INTERNAL, "zero=%d: the engine shards its own optimizer", c->zero);
    /* ZeRO with the schedule: the runtime's table (runs_plan.c). */
    wf_status zs = wf_runtime_schedule_check(c->zero, kind);
    if (zs != WF_OK)
        return zs;
    const int timed = c->zero != 3 && (kind == WF_COMM_HOROVOD || kind == WF_COMM_MGWFBP ||
                                       kind == WF_COMM_BYTESCHEDULER);
    coll_ctx cc;
    memset(&cc, 0, sizeof cc);
    if (timed) {
        wf_status cst = wf_dist_group_place(c, &cc.cl, &cc.g);
        if (cst != WF_OK)
            return cst;
    }
    wf_dist *d = calloc(1, sizeof *d);
    if (!d)
        return wf_errorf(WF_NOMEM, "out of memory");
    d->e = e;
    d->o = o;
    d->comm = c->comm;
    d->rank = c->rank;
    d->nranks = c->nranks;
    d->mpi = c->comm != MPI_COMM_NULL && c->nranks > 1;
    d->sched = c->sched;
    d->overlap = c->overlap;
    d->zero = c->zero;

    const wf_graph *g = wf_exec_graph(e);
    int np = wf_exec_nparams(e);
    wf_grad *grads = calloc((size_t)(np > 0 ? np : 1), sizeof *grads);
    int *gparam = calloc((size_t)(np > 0 ? np : 1), sizeof *gparam);
    double *bwd_from = calloc((size_t)g->nfwd + 1, sizeof *bwd_from);
    d->group_of = malloc((size_t)(np > 0 ? np : 1) * sizeof *d->group_of);
    wf_status st = WF_OK;
    wf_arena arena;
    wf_arena_init(&arena, 1 << 16);
    int64_t *goff = NULL;
    int *order = NULL;
    if (!grads || !gparam || !bwd_from || !d->group_of) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto done;
    }
    if (timed)
        predict_backward(g, &cc.cl, bwd_from);
    int ng = 0;
    for (int i = 0; i < np; i++) {
        const wf_exec_param *p = wf_exec_param_at(e, i);
        d->group_of[i] = -1;
        if (!p->has_grad)
            continue;
        grads[ng].bytes = (double)p->numel * 4.0;
        grads[ng].ready_s = 1e-6 * (double)(p->grad_op - g->nfwd + 1);
        if (timed)
            grads[ng].ready_s = bwd_from[p->first_fwd_op >= 0 ? p->first_fwd_op : 0];
        grads[ng].layer = param_layer(g, p);
        gparam[ng++] = i;
    }
    wf_sched_env env;
    memset(&env, 0, sizeof env);
    env.coll = coll_time;
    env.coll_ctx = &cc;
    /* ByteScheduler's chunks: whole floats (every chunk boundary exact). */
    wf_comm_sched sched = c->sched;
    if (kind == WF_COMM_BYTESCHEDULER && sched.threshold_bytes > 0)
        sched.threshold_bytes = sched.threshold_bytes < 4 ? 4 : floor(sched.threshold_bytes / 4) * 4;
    wf_comm_schedule cs;
    if (c->zero == 3)
        st = zero3_units(e, grads, gparam, ng, &arena, &cs);
    else
        st = wf_sched_build(&sched, grads, ng, timed ? &env : NULL, &arena, &cs);
    if (st != WF_OK)
        goto done;
    /* Issue order: the schedule's, except ByteScheduler's priority queue. */
    order = malloc((size_t)(cs.nops > 0 ? cs.nops : 1) * sizeof *order);
    d->members = malloc((size_t)(cs.nparts > 0 ? cs.nparts : 1) * sizeof *d->members);
    d->chunk_next = malloc((size_t)(cs.nops > 0 ? cs.nops : 1) * sizeof *d->chunk_next);
    if (!order || !d->members || !d->chunk_next) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < cs.nops; k++)
        order[k] = k;
    if (kind == WF_COMM_BYTESCHEDULER)
        bytescheduler_order(&cs, &env, order);
    d->ngroups = cs.nops;
    d->groups = calloc((size_t)(cs.nops > 0 ? cs.nops : 1), sizeof *d->groups);
    d->fwd_order = malloc((size_t)(cs.nops > 0 ? cs.nops : 1) * sizeof *d->fwd_order);
    d->req = malloc((size_t)(cs.nops > 0 ? cs.nops : 1) * sizeof *d->req);
    d->ag = malloc((size_t)(cs.nops > 0 ? cs.nops : 1) * sizeof *d->ag);
    d->stat = malloc((size_t)(cs.nops > 0 ? cs.nops : 1) * sizeof *d->stat);
    goff = calloc((size_t)(np > 0 ? np : 1), sizeof *goff);
    if (!d->groups || !d->fwd_order || !d->req || !d->ag || !d->stat || !goff) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto done;
    }
    /* Lay the groups out in the schedule's order (a chunked tensor once, at
     * its first chunk), then number them in issue order; parameters without a
     * gradient last. A group is the range from its first part to its last. */
    int64_t off = 0;
    int nm = 0;
    for (int i = 0; i < cs.nops; i++) {
        const wf_comm_op *op = &cs.ops[i];
        int64_t start = off;
        for (int j = 0; j < op->nparts; j++) {
            int pi = gparam[cs.parts[op->first_part + j].grad];
            if (d->group_of[pi] >= 0)
                continue;
            d->group_of[pi] = cs.nops; /* placed; its group is set below */
            goff[pi] = off;
            off += (wf_exec_param_at(e, pi)->numel + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
        }
        if (kind == WF_COMM_DEAR || c->zero) { /* room for the padding to a multiple of the ranks */
            int64_t P = c->nranks, n = (off - start + P - 1) / P * P;
            off = start + (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
        }
    }
    for (int i = 0; i < np; i++)
        if (d->group_of[i] >= 0)
            d->group_of[i] = -1;
    for (int k = 0; k < cs.nops; k++) {
        group *gr = &d->groups[k];
        const wf_comm_op *op = &cs.ops[order[k]];
        gr->first = nm;
        gr->first_fwd = g->nfwd;
        d->chunk_next[k] = -1;
        int64_t lo = INT64_MAX, hi = 0;
        for (int j = 0; j < op->nparts; j++) {
            const wf_comm_part *pt = &cs.parts[op->first_part + j];
            int pi = gparam[pt->grad];
            const wf_exec_param *p = wf_exec_param_at(e, pi);
            d->members[nm++] = pi;
            if (d->group_of[pi] < 0) {
                d->group_of[pi] = k;
            } else { /* a later chunk of the tensor: chain it */
                int q = d->group_of[pi];
                while (d->chunk_next[q] >= 0)
                    q = d->chunk_next[q];
                d->chunk_next[q] = k;
            }
            int64_t a = goff[pi] + (int64_t)(pt->offset_bytes / 4.0), b = a + (int64_t)(pt->bytes / 4.0);
            lo = a < lo ? a : lo;
            hi = b > hi ? b : hi;
            if (p->first_fwd_op >= 0 && p->first_fwd_op < gr->first_fwd)
                gr->first_fwd = p->first_fwd_op;
        }
        gr->n = nm - gr->first;
        gr->off = op->nparts > 0 ? lo : off;
        gr->count = op->nparts > 0 ? hi - lo : 0;
        if (c->sched.kind == WF_COMM_DEAR || c->zero) {
            int64_t P = c->nranks;
            gr->count = (gr->count + P - 1) / P * P;
            gr->shard_off = d->shard_floats;
            d->shard_floats += gr->count / P;
        }
        if (gr->count > INT32_MAX) {
            st = wf_errorf(WF_INVAL, "gradient group %d has %lld floats, more than one MPI message holds", k,
                           (long long)gr->count);
            goto done;
        }
    }
    const int64_t nograd_off = off;
    for (int i = 0; i < np; i++)
        if (d->group_of[i] < 0) {
            goff[i] = off;
            off += (wf_exec_param_at(e, i)->numel + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
        }
    st = wf_exec_set_grad_layout(e, goff, off);
    if (st != WF_OK)
        goto done;
    /* Forward order of the groups: by first forward op, ties by index. */
    for (int k = 0; k < d->ngroups; k++) {
        int v = k, j = k - 1;
        while (j >= 0 && d->groups[d->fwd_order[j]].first_fwd > d->groups[v].first_fwd) {
            d->fwd_order[j + 1] = d->fwd_order[j];
            j--;
        }
        d->fwd_order[j + 1] = v;
    }
    if (c->zero && (st = zero_setup(d, c, &cs, gparam, goff, nograd_off, off)) != WF_OK)
        goto done;
    /* DeAR all-gathers gradients from its shards; ZeRO-2/3 reduce-scatter in
     * place (each rank's reduced slice at the start of the group's range, as
     * Megatron's distributed optimizer reduce-scatters within its buffer). */
    if (d->shard_floats > 0 && kind == WF_COMM_DEAR) {
        d->shards = calloc((size_t)d->shard_floats, sizeof(float));
        if (!d->shards) {
            st = wf_errorf(WF_NOMEM, "out of memory for dear's shards");
            goto done;
        }
    }
    for (int k = 0; k < d->ngroups; k++)
        d->req[k] = d->ag[k] = MPI_REQUEST_NULL;
    if ((st = shm_want(d)) != WF_OK)
        goto done;
    if (c->zero == 3)
        snprintf(d->desc, sizeof d->desc, "zero-3 units (one per first reading op)");
    else if (c->sched.kind == WF_COMM_WFBP || c->sched.kind == WF_COMM_MGWFBP)
        snprintf(d->desc, sizeof d->desc, "%s", wf_comm_name(c->sched.kind));
    else
        snprintf(d->desc, sizeof d->desc, "%s:%.3g (MiB)", wf_comm_name(c->sched.kind), cs.threshold_bytes / 1048576.0);
done:
    wf_arena_free(&arena);
    free(grads);
    free(gparam);
    free(goff);
    free(bwd_from);
    free(order);
    if (st != WF_OK) {
        wf_dist_free(d);
        return st;
    }
    d->update_scale = 1.0;
    *out = d;
    return WF_OK;
}

void wf_dist_free(wf_dist *d)
{
    if (!d)
        return;
    wf_shm_coll_free(d->shm);
    if (d->mpi) {
        /* Nothing should be outstanding; complete anything that is. */
        if (d->req && d->stat)
            MPI_Waitall(d->ngroups, d->req, d->stat);
        if (d->ag && d->stat)
            MPI_Waitall(d->ngroups, d->ag, d->stat);
    }
    if (d->e)
        wf_exec_set_hooks(d->e, NULL);
    if (d->ubuf)
        for (int k = 0; k < d->ngroups; k++)
            free(d->ubuf[k]);
    free(d->ubuf);
    free(d->ustate);
    free(d->mark);
    free(d->need_first);
    free(d->need);
    free(d->next_w);
    free(d->pshard);
    free(d->resident);
    if (d->zero)
        wf_optim_free(d->zo);
    free(d->groups);
    free(d->members);
    free(d->group_of);
    free(d->chunk_next);
    free(d->fwd_order);
    free(d->req);
    free(d->ag);
    free(d->stat);
    free(d->tk_req);
    free(d->tk_ag);
    free(d->shards);
    free(d);
}

/* ---- collectives --------------------------------------------------------------------------- */

static float *grad_at(const wf_dist *d, int64_t off)
{
    return wf_exec_grad_block(d->e, NULL) + off;
}

static wf_status issue(wf_dist *d, int k)
{
    group *g = &d->groups[k];
    g->issued = 1;
    if (!d->mpi)
        return WF_OK;
    double t0 = wf_now_s();
    if (d->shm) {
        float *x = grad_at(d, g->off);
        if (d->sched.kind == WF_COMM_DEAR)
            d->tk_req[k] = wf_shm_coll_reduce_scatter(d->shm, x, d->shards + g->shard_off, g->count / d->nranks);
        else if (d->zero >= 2)
            d->tk_req[k] = wf_shm_coll_reduce_scatter(d->shm, x, x, g->count / d->nranks);
        else
            d->tk_req[k] = wf_shm_coll_allreduce(d->shm, x, g->count);
        if (d->tk_req[k] < 0)
            return wf_errorf(WF_NOMEM, "out of memory queueing a collective");
        wf_shm_coll_progress(d->shm); /* the copy in, while the gradient is in cache */
    } else if (d->sched.kind == WF_COMM_DEAR) {
        MPI_TRY(MPI_Ireduce_scatter_block(grad_at(d, g->off), d->shards + g->shard_off, (int)(g->count / d->nranks),
                                          MPI_FLOAT, MPI_SUM, d->comm, &d->req[k]),
                "MPI_Ireduce_scatter_block");
    } else if (d->zero >= 2) {
        MPI_TRY(MPI_Ireduce_scatter_block(MPI_IN_PLACE, grad_at(d, g->off), (int)(g->count / d->nranks), MPI_FLOAT,
                                          MPI_SUM, d->comm, &d->req[k]),
                "MPI_Ireduce_scatter_block");
    } else {
        MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, grad_at(d, g->off), (int)g->count, MPI_FLOAT, MPI_SUM, d->comm,
                               &d->req[k]),
                "MPI_Iallreduce");
    }
    d->comm_s += wf_now_s() - t0;
    return WF_OK;
}

static wf_status start_allgather(wf_dist *d, int k)
{
    group *g = &d->groups[k];
    if (!d->mpi)
        return WF_OK;
    int n = (int)(g->count / d->nranks);
    if (d->shm) {
        if ((d->tk_ag[k] = wf_shm_coll_allgather(d->shm, d->shards + g->shard_off, grad_at(d, g->off), n)) < 0)
            return wf_errorf(WF_NOMEM, "out of memory queueing a collective");
        return WF_OK;
    }
    MPI_TRY(MPI_Iallgather(d->shards + g->shard_off, n, MPI_FLOAT, grad_at(d, g->off), n, MPI_FLOAT, d->comm,
                           &d->ag[k]),
            "MPI_Iallgather");
    return WF_OK;
}

/* shm: the ticket standing for request r (of d->req or d->ag). */
static int64_t *ticket(wf_dist *d, MPI_Request *r)
{
    return r >= d->req && r < d->req + d->ngroups ? &d->tk_req[r - d->req] : &d->tk_ag[r - d->ag];
}

static wf_status wait_one(wf_dist *d, MPI_Request *r)
{
    if (d->shm) {
        int64_t *t = ticket(d, r);
        if (*t >= 0) {
            double t0 = wf_now_s();
            wf_shm_coll_wait(d->shm, *t);
            d->comm_s += wf_now_s() - t0;
            *t = -1;
        }
        return WF_OK;
    }
    if (!d->mpi || *r == MPI_REQUEST_NULL)
        return WF_OK;
    double t0 = wf_now_s();
    int rc = MPI_Wait(r, MPI_STATUS_IGNORE);
    d->comm_s += wf_now_s() - t0;
    return rc == MPI_SUCCESS ? WF_OK : mpi_fail(rc, "MPI_Wait");
}

static wf_status wait_all(wf_dist *d, MPI_Request *r)
{
    if (d->shm) {
        int64_t last = -1, *t = ticket(d, r);
        for (int k = 0; k < d->ngroups; k++) {
            last = t[k] > last ? t[k] : last;
            t[k] = -1;
        }
        if (last >= 0) { /* in issue order: the last one completes them all */
            double t0 = wf_now_s();
            wf_shm_coll_wait(d->shm, last);
            d->comm_s += wf_now_s() - t0;
        }
        return WF_OK;
    }
    if (!d->mpi)
        return WF_OK;
    double t0 = wf_now_s();
    int rc = MPI_Waitall(d->ngroups, r, d->stat);
    d->comm_s += wf_now_s() - t0;
    return rc == MPI_SUCCESS ? WF_OK : mpi_fail(rc, "MPI_Waitall");
}

/* Lets outstanding collectives progress. */
static wf_status progress(wf_dist *d)
{
    if (!d->mpi)
        return WF_OK;
    double t0 = wf_now_s();
    if (d->shm) {
        wf_shm_coll_progress(d->shm);
        d->comm_s += wf_now_s() - t0;
        return WF_OK;
    }
    int flag = 0;
    MPI_TRY(MPI_Testall(d->ngroups, d->req, &flag, d->stat), "MPI_Testall");
    MPI_TRY(MPI_Testall(d->ngroups, d->ag, &flag, d->stat), "MPI_Testall");
    d->comm_s += wf_now_s() - t0;
    return WF_OK;
}

wf_status wf_dist_allgather(wf_dist *d, const double *in, int n, double *out)
{
    if (!d->mpi) {
        memcpy(out, in, (size_t)n * sizeof *in);
        return WF_OK;
    }
    double t0 = wf_now_s();
    int rc = MPI_Allgather(in, n, MPI_DOUBLE, out, n, MPI_DOUBLE, d->comm);
    d->comm_s += wf_now_s() - t0;
    return rc == MPI_SUCCESS ? WF_OK : mpi_fail(rc, "MPI_Allgather");
}

/* ---- updates ---------------------------------------------------------------------------------- */

/* Sum of squares in double, 32 partial sums in a fixed order (the same bits
 * on every rank for the same input, whichever ISA clone runs; enough
 * independent sums that the add latency does not bound the pass, which then
 * streams at memory speed). */
#define SUMSQ_LANES 32

WF_K_HOT static double sumsq(const float *x, int64_t n)
{
    double s[SUMSQ_LANES] = {0};
    int64_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
        for (int k = 0; k < SUMSQ_LANES; k++)
            s[k] += (double)x[i + k] * (double)x[i + k];
    for (int k = 0; i < n; i++, k++)
        s[k] += (double)x[i] * (double)x[i];
    for (int w = SUMSQ_LANES / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; k++)
            s[k] += s[k + w];
    return s[0];
}

static void update_group(wf_dist *d, int k, int64_t t, float scale)
{
    const group *g = &d->groups[k];
    for (int j = 0; j < g->n; j++) {
        int pi = d->members[g->first + j];
        if (d->group_of[pi] == k) /* a chunked tensor once, with its first chunk */
            wf_optim_update(d->o, d->e, pi, scale, t);
    }
}

/* ---- sharded state (ZeRO) ----------------------------------------------------------------------- */

static float update_scale(wf_dist *d, double sum_sq, double grad_scale);
static double wsumsq(const float *x, const float *w, int64_t n);
static wf_status dear_next(wf_dist *d, int k);

/* This rank's slice of group k: its reduced gradient (the reduce-scatter's
 * shard, or the slice of the all-reduced whole under zero=1; with one rank
 * the whole group) and its parameters (the block's slice, or ZeRO-3's
 * shard). */
static float *zero_grad_shard(wf_dist *d, int k)
{
    const group *g = &d->groups[k];
    if (d->mpi && d->sched.kind == WF_COMM_DEAR)
        return d->shards + g->shard_off;
    if (d->mpi && d->zero >= 2)
        return grad_at(d, g->off); /* reduce-scattered in place */
    return grad_at(d, g->off + d->rank * (g->count / d->nranks));
}

static float *zero_param_shard(wf_dist *d, int k)
{
    const group *g = &d->groups[k];
    if (d->zero == 3)
        return d->pshard + g->shard_off;
    return wf_exec_param_block(d->e, NULL) + g->off + d->rank * (g->count / d->nranks);
}

/* Steps this rank's slice of group k: each parameter's part of it, with its
 * weight decay (the padding between tensors is left alone, zero). */
static void zero_update_group(wf_dist *d, int k, int64_t t, float scale)
{
    const group *g = &d->groups[k];
    int64_t n = g->count / d->nranks, lo = g->off + d->rank * n, hi = lo + n;
    float *w = zero_param_shard(d, k), *gs = zero_grad_shard(d, k);
    for (int j = 0; j < g->n; j++) {
        const wf_exec_param *p = wf_exec_param_at(d->e, d->members[g->first + j]);
        int64_t a = p->grad_offset > lo ? p->grad_offset : lo;
        int64_t b = p->grad_offset + p->numel < hi ? p->grad_offset + p->numel : hi;
        if (a < b)
            wf_optim_update_flat(d->zo, w + (a - lo), gs + (a - lo), g->shard_off + (a - lo), b - a, p->decay, scale,
                                 t);
    }
}

/* ZeRO-1/2: every rank's updated slice of group k's parameters to every rank
 * (in place in the parameter block). */
static wf_status zero_gather_params(wf_dist *d, int k)
{
    const group *g = &d->groups[k];
    if (!d->mpi)
        return WF_OK;
    if (d->shm) {
        float *p = wf_exec_param_block(d->e, NULL) + g->off;
        int64_t n = g->count / d->nranks;
        if ((d->tk_ag[k] = wf_shm_coll_allgather(d->shm, p + d->rank * n, p, n)) < 0)
            return wf_errorf(WF_NOMEM, "out of memory queueing a collective");
        return WF_OK;
    }
    MPI_TRY(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, wf_exec_param_block(d->e, NULL) + g->off,
                           (int)(g->count / d->nranks), MPI_FLOAT, d->comm, &d->ag[k]),
            "MPI_Iallgather");
    return WF_OK;
}

/* The sum of squares of the reduced gradient from the shards: each rank's
 * part, gathered, summed in rank order (the same bits on every rank). */
static wf_status shard_sumsq(wf_dist *d, double *total)
{
    double mine = 0;
    for (int k = 0; k < d->ngroups; k++) {
        const group *g = &d->groups[k];
        if (d->norm_weight)
            mine += d->mpi ? wsumsq(zero_grad_shard(d, k),
                                    d->norm_weight + g->off + d->rank * (g->count / d->nranks), g->count / d->nranks)
                           : wsumsq(grad_at(d, g->off), d->norm_weight + g->off, g->count);
        else
            mine += d->mpi ? sumsq(zero_grad_shard(d, k), g->count / d->nranks)
                           : sumsq(grad_at(d, g->off), g->count);
    }
    *total = mine;
    if (!d->mpi)
        return WF_OK;
    double *all = malloc((size_t)d->nranks * sizeof *all);
    if (!all)
        return wf_errorf(WF_NOMEM, "out of memory");
    wf_status st = wf_dist_allgather(d, &mine, 1, all);
    *total = 0;
    for (int r = 0; r < d->nranks; r++)
        *total += all[r];
    free(all);
    return st;
}

/* ZeRO-3: group k's gather into a buffer of its own; finishing binds its
 * parameters there; releasing unbinds and frees it. */
static wf_status unit_start(wf_dist *d, int k)
{
    const group *g = &d->groups[k];
    int64_t n = g->count / d->nranks;
    float *buf = malloc((size_t)(g->count > 0 ? g->count : 1) * sizeof(float));
    if (!buf)
        return wf_errorf(WF_NOMEM, "out of memory gathering %lld parameters", (long long)g->count);
    d->ubuf[k] = buf;
    d->ustate[k] = 1;
    d->gathered_floats += g->count;
    if (d->gathered_floats > d->peak_gathered_floats)
        d->peak_gathered_floats = d->gathered_floats;
    if (!d->mpi) {
        memcpy(buf, d->pshard + g->shard_off, (size_t)n * sizeof(float));
        return WF_OK;
    }
    double t0 = wf_now_s();
    if (d->shm) {
        if ((d->tk_ag[k] = wf_shm_coll_allgather(d->shm, d->pshard + g->shard_off, buf, n)) < 0)
            return wf_errorf(WF_NOMEM, "out of memory queueing a collective");
        wf_shm_coll_progress(d->shm);
        d->comm_s += wf_now_s() - t0;
        return WF_OK;
    }
    MPI_TRY(MPI_Iallgather(d->pshard + g->shard_off, (int)n, MPI_FLOAT, buf, (int)n, MPI_FLOAT, d->comm, &d->ag[k]),
            "MPI_Iallgather");
    d->comm_s += wf_now_s() - t0;
    return WF_OK;
}

static wf_status unit_finish(wf_dist *d, int k)
{
    wf_status st = wait_one(d, &d->ag[k]);
    if (st != WF_OK)
        return st;
    const group *g = &d->groups[k];
    for (int j = 0; j < g->n; j++) {
        int pi = d->members[g->first + j];
        wf_exec_bind_param(d->e, pi, d->ubuf[k] + (wf_exec_param_at(d->e, pi)->grad_offset - g->off));
    }
    d->ustate[k] = 2;
    return WF_OK;
}

static wf_status unit_release(wf_dist *d, int k)
{
    if (d->ustate[k] == 0)
        return WF_OK;
    wf_status st = wait_one(d, &d->ag[k]);
    const group *g = &d->groups[k];
    for (int j = 0; j < g->n; j++)
        wf_exec_bind_param(d->e, d->members[g->first + j], NULL);
    free(d->ubuf[k]);
    d->ubuf[k] = NULL;
    d->ustate[k] = 0;
    d->gathered_floats -= g->count;
    return st;
}

/* Before op `op` (any pass, every micro-batch): the units it reads resident,
 * the next reading op's prefetched, every other unit freed. */
static wf_status zero3_before(wf_dist *d, int op)
{
    const int *nd = d->need + d->need_first[op];
    int n = d->need_first[op + 1] - d->need_first[op];
    if (n == 0)
        return WF_OK;
    const wf_graph *g = wf_exec_graph(d->e);
    int nx = d->next_w[op];
    const int *nnd = nx < g->nops ? d->need + d->need_first[nx] : NULL;
    int nn = nx < g->nops ? d->need_first[nx + 1] - d->need_first[nx] : 0;
    d->stamp++;
    for (int q = 0; q < n; q++)
        d->mark[nd[q]] = d->stamp;
    for (int q = 0; q < nn; q++)
        d->mark[nnd[q]] = d->stamp;
    wf_status st;
    for (int k = 0; k < d->ngroups; k++)
        if (d->ustate[k] && d->mark[k] != d->stamp && (st = unit_release(d, k)) != WF_OK)
            return st;
    for (int q = 0; q < n; q++)
        if (d->ustate[nd[q]] == 0 && (st = unit_start(d, nd[q])) != WF_OK)
            return st;
    for (int q = 0; q < nn; q++)
        if (d->ustate[nnd[q]] == 0 && (st = unit_start(d, nnd[q])) != WF_OK)
            return st;
    for (int q = 0; q < n; q++)
        if (d->ustate[nd[q]] == 1 && (st = unit_finish(d, nd[q])) != WF_OK)
            return st;
    return WF_OK;
}

static wf_status zero3_release_all(wf_dist *d)
{
    wf_status st = WF_OK;
    for (int k = 0; k < d->ngroups; k++) {
        wf_status s1 = unit_release(d, k);
        if (st == WF_OK)
            st = s1;
    }
    return st;
}

/* The reduced gradient lies in shards (dear's reduce-scatters, or ZeRO-2's
 * and ZeRO-3's in place): each rank holds its slice of every group. */
static int sharded(const wf_dist *d)
{
    return d->mpi && (d->sched.kind == WF_COMM_DEAR || d->zero >= 2);
}

/* The squares of the reduced gradient (each float weighted by norm_weight
 * when set), over this data-parallel group: from the shards (gathered,
 * summed in rank order) or from the whole gradient every rank holds. */
static wf_status reduced_sumsq(wf_dist *d, double *s)
{
    if (sharded(d))
        return shard_sumsq(d, s);
    *s = 0;
    for (int k = 0; k < d->ngroups; k++) {
        const group *g = &d->groups[k];
        *s += d->norm_weight ? wsumsq(grad_at(d, g->off), d->norm_weight + g->off, g->count)
                             : sumsq(grad_at(d, g->off), g->count);
    }
    return WF_OK;
}

/* ZeRO (not dear), once the norm is known: each rank's slices stepped, and
 * under zero=1 and 2 the updated parameters gathered (ZeRO-3 gathers them op
 * by op in the next passes). */
static wf_status zero_apply(wf_dist *d, int64_t t, float scale)
{
    wf_status st;
    const int in_place = d->mpi && d->zero >= 2 && d->sched.kind != WF_COMM_DEAR;
    for (int k = 0; k < d->ngroups; k++) {
        zero_update_group(d, k, t, scale);
        /* The in-place reduce-scatter left this rank's reduced slice at the
         * group's start (over other tensors' positions and the block's
         * gaps, which no backward writes) and scratch after it: clear the
         * range so the next step's gradients start from zero. */
        if (in_place)
            memset(grad_at(d, d->groups[k].off), 0, (size_t)d->groups[k].count * sizeof(float));
        if (d->zero < 3 && (st = zero_gather_params(d, k)) != WF_OK)
            return st;
    }
    return d->zero < 3 ? wait_all(d, d->ag) : WF_OK;
}

/* The update's gradient scale: averaging times the clipping factor of the
 * averaged gradient's norm, from the sum of squares of the summed gradient. */
static float update_scale(wf_dist *d, double sum_sq, double grad_scale)
{
    d->grad_norm = sqrt(sum_sq) * grad_scale;
    double f = wf_optim_clip_factor(wf_optim_config_of(d->o), d->grad_norm);
    return (float)(grad_scale * f);
}

/* Weighted sum of squares (SPMD norms). */
static double wsumsq(const float *x, const float *w, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)w[i] * (double)x[i] * (double)x[i];
    return s;
}

/* The squared norm of the whole model's gradient under an op-level plan:
 * each float weighted by the share of the ranks of norm_comm that hold the
 * same element, summed over norm_comm. */
static wf_status spmd_norm_sum(wf_dist *d, double *s)
{
    if (d->norm_comm != MPI_COMM_NULL)
        MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, s, 1, MPI_DOUBLE, MPI_SUM, d->norm_comm), "MPI_Allreduce of the norm");
    return WF_OK;
}

void wf_dist_set_norm(wf_dist *d, const float *weight, MPI_Comm comm)
{
    d->norm_weight = weight;
    d->norm_comm = comm;
}

/* Issues what has not gone yet and ends the backward's collectives. */
static wf_status issue_rest(wf_dist *d)
{
    wf_status st;
    for (int k = d->next_issue; k < d->ngroups; k++)
        if ((st = issue(d, k)) != WF_OK)
            return st;
    d->next_issue = d->ngroups;
    d->bwd_active = 0;
    return WF_OK;
}

/* dear's deferral, once the norm is known: the update scale set, the first
 * group's all-gather started (with ZeRO: its slice stepped, its parameters
 * gathered); the rest before the forward ops that read them. */
static wf_status dear_start(wf_dist *d, int64_t t, double grad_scale, double sum_sq)
{
    d->pending = 1;
    d->pending_t = t;
    d->pending_scale = grad_scale;
    d->update_scale = update_scale(d, sum_sq, grad_scale);
    d->b0_done = 1;
    d->pos = 0;
    if (d->ngroups == 0) {
        d->pending = 0;
        return WF_OK;
    }
    return dear_next(d, d->fwd_order[0]);
}

wf_status wf_dist_end_backward(wf_dist *d, int64_t t, double grad_scale)
{
    if (d->shm_st != WF_OK)
        return d->shm_st;
    wf_status st = issue_rest(d);
    if (st != WF_OK)
        return st;
    if (d->sched.kind == WF_COMM_DEAR) {
        d->pending = 1;
        d->b0_done = 0;
        d->pos = 0;
        d->pending_t = t;
        d->pending_scale = grad_scale;
        return WF_OK;
    }
    if ((st = wait_all(d, d->req)) != WF_OK)
        return st;
    /* Identical gradients (or shards) on every rank: the same norm in the same order. */
    double s = 0;
    if ((st = reduced_sumsq(d, &s)) != WF_OK)
        return st;
    if (d->norm_weight && (st = spmd_norm_sum(d, &s)) != WF_OK)
        return st;
    float scale = update_scale(d, s, grad_scale);
    if (d->zero)
        return zero_apply(d, t, scale);
    for (int k = 0; k < d->ngroups; k++)
        update_group(d, k, t, scale);
    return WF_OK;
}

/* ---- the update in parts (pipeline stages) ------------------------------------------------------ */

wf_status wf_dist_finish_reduce(wf_dist *d)
{
    if (d->shm_st != WF_OK)
        return d->shm_st;
    wf_status st = issue_rest(d);
    return st == WF_OK ? wait_all(d, d->req) : st;
}

wf_status wf_dist_reduced_sumsq(wf_dist *d, double *sum_sq)
{
    return reduced_sumsq(d, sum_sq);
}

/* Where parameter i's reduced gradient lies: its group *k and this rank's
 * part [*a, *b) of it in gradient block positions (the whole tensor when
 * the gradient is not sharded; empty when the rank's slice misses it). */
static wf_status grad_range(wf_dist *d, int i, int *k, int64_t *a, int64_t *b)
{
    const wf_exec_param *p = wf_exec_param_at(d->e, i);
    *k = d->group_of[i];
    *a = p->grad_offset;
    *b = p->grad_offset + p->numel;
    if (!sharded(d))
        return WF_OK;
    if (*k < 0 || d->chunk_next[*k] >= 0)
        return wf_errorf(WF_INTERNAL, "parameter '%s' is not one range of one group", p->name);
    const group *g = &d->groups[*k];
    int64_t n = g->count / d->nranks, lo = g->off + d->rank * n;
    *a = *a > lo ? *a : lo;
    *b = *b < lo + n ? *b : lo + n;
    if (*b < *a)
        *b = *a;
    return WF_OK;
}

wf_status wf_dist_grad_get(wf_dist *d, int i, float *full)
{
    const wf_exec_param *p = wf_exec_param_at(d->e, i);
    int k;
    int64_t a, b;
    wf_status st = grad_range(d, i, &k, &a, &b);
    if (st != WF_OK)
        return st;
    if (!sharded(d)) {
        memcpy(full, p->grad, (size_t)p->numel * sizeof(float));
        return WF_OK;
    }
    /* Every rank's part, in rank order (the parts tile the tensor). */
    const group *g = &d->groups[k];
    int64_t n = g->count / d->nranks;
    int *cnt = malloc((size_t)d->nranks * 2 * sizeof *cnt);
    if (!cnt)
        return wf_errorf(WF_NOMEM, "out of memory");
    for (int r = 0; r < d->nranks; r++) {
        int64_t lo = g->off + r * n, x = p->grad_offset > lo ? p->grad_offset : lo;
        int64_t y = p->grad_offset + p->numel < lo + n ? p->grad_offset + p->numel : lo + n;
        cnt[r] = (int)(y > x ? y - x : 0);
        cnt[d->nranks + r] = (int)(y > x ? x - p->grad_offset : 0);
    }
    const float *mine = zero_grad_shard(d, k) + (a - (g->off + d->rank * n));
    double t0 = wf_now_s();
    int rc = MPI_Allgatherv(mine, (int)(b - a), MPI_FLOAT, full, cnt, cnt + d->nranks, MPI_FLOAT, d->comm);
    d->comm_s += wf_now_s() - t0;
    free(cnt);
    return rc == MPI_SUCCESS ? WF_OK : mpi_fail(rc, "MPI_Allgatherv of a reduced gradient");
}

wf_status wf_dist_grad_put(wf_dist *d, int i, const float *full)
{
    const wf_exec_param *p = wf_exec_param_at(d->e, i);
    int k;
    int64_t a, b;
    wf_status st = grad_range(d, i, &k, &a, &b);
    if (st != WF_OK)
        return st;
    if (!sharded(d)) {
        memcpy(p->grad, full, (size_t)p->numel * sizeof(float));
        return WF_OK;
    }
    const group *g = &d->groups[k];
    float *mine = zero_grad_shard(d, k) + (a - (g->off + d->rank * (g->count / d->nranks)));
    memcpy(mine, full + (a - p->grad_offset), (size_t)(b - a) * sizeof(float));
    return WF_OK;
}

wf_status wf_dist_apply_update(wf_dist *d, int64_t t, double grad_scale, double sum_sq)
{
    if (d->sched.kind == WF_COMM_DEAR)
        return dear_start(d, t, grad_scale, sum_sq);
    float scale = update_scale(d, sum_sq, grad_scale);
    if (d->zero)
        return zero_apply(d, t, scale);
    for (int k = 0; k < d->ngroups; k++)
        update_group(d, k, t, scale);
    return WF_OK;
}

/* dear's next group in forward order: its gradient's all-gather, or with
 * ZeRO its slice stepped and its parameters' all-gather. */
static wf_status dear_next(wf_dist *d, int k)
{
    if (!d->zero)
        return start_allgather(d, k);
    zero_update_group(d, k, d->pending_t, (float)d->update_scale);
    return zero_gather_params(d, k);
}

/* dear's barrier B0: every reduce-scatter done, the norm, the first
 * all-gather (with ZeRO: the first group's slice stepped, its parameters
 * gathered). */
static wf_status dear_b0(wf_dist *d)
{
    wf_status st = wait_all(d, d->req);
    if (st != WF_OK)
        return st;
    double total = 0;
    if ((st = shard_sumsq(d, &total)) != WF_OK)
        return st;
    if (d->norm_weight && (st = spmd_norm_sum(d, &total)) != WF_OK)
        return st;
    return dear_start(d, d->pending_t, d->pending_scale, total);
}

/* Completes dear's deferred update for the groups first read at or before
 * forward op `op` (all of them for op = INT32_MAX). */
static wf_status dear_advance(wf_dist *d, int op)
{
    wf_status st;
    if (!d->b0_done && (st = dear_b0(d)) != WF_OK)
        return st;
    while (d->pos < d->ngroups && d->groups[d->fwd_order[d->pos]].first_fwd <= op) {
        int k = d->fwd_order[d->pos];
        if ((st = wait_one(d, &d->ag[k])) != WF_OK)
            return st;
        if (d->pos + 1 < d->ngroups && (st = dear_next(d, d->fwd_order[d->pos + 1])) != WF_OK)
            return st;
        if (!d->zero)
            update_group(d, k, d->pending_t, (float)d->update_scale);
        d->pos++;
    }
    if (d->pos == d->ngroups)
        d->pending = 0;
    return WF_OK;
}

wf_status wf_dist_sync(wf_dist *d)
{
    if (!d->pending)
        return WF_OK;
    return dear_advance(d, INT32_MAX);
}

/* ---- executor hooks ------------------------------------------------------------------------------ */

static wf_status hook_before(void *ctx, int op)
{
    wf_dist *d = ctx;
    const wf_graph *g = wf_exec_graph(d->e);
    if (d->zero == 3)
        return zero3_before(d, op);
    if (op < g->nfwd && d->fwd_active && d->pending)
        return dear_advance(d, op);
    return WF_OK;
}

static wf_status hook_after(void *ctx, int op)
{
    wf_dist *d = ctx;
    const wf_graph *g = wf_exec_graph(d->e);
    wf_status st;
    if (op >= g->nfwd && d->bwd_active) {
        const wf_op *o = &g->ops[op];
        for (int i = 0; i < o->nout; i++) {
            int pi = wf_exec_param_of_grad(d->e, o->out[i]);
            for (int k = pi >= 0 ? d->group_of[pi] : -1; k >= 0; k = d->chunk_next[k])
                d->groups[k].remaining--;
        }
        /* Issue in index order: a group goes once it is ready and its
         * predecessor went (ddp's rule; wfbp and dear groups are in ready order). */
        while (d->overlap && d->next_issue < d->ngroups && d->groups[d->next_issue].remaining == 0) {
            if ((st = issue(d, d->next_issue)) != WF_OK)
                return st;
            d->next_issue++;
        }
    }
    if (d->zero == 3 && op == g->nops - 1 && (st = zero3_release_all(d)) != WF_OK)
        return st;
    return progress(d);
}

void wf_dist_begin_micro(wf_dist *d, int first, int last)
{
    if (d->shm_want && d->shm_st == WF_OK)
        d->shm_st = shm_setup(d);
    d->fwd_active = first;
    d->bwd_active = last;
    if (last) {
        for (int k = 0; k < d->ngroups; k++) {
            d->groups[k].remaining = d->groups[k].n;
            d->groups[k].issued = 0;
        }
        d->next_issue = 0;
    }
    wf_exec_hooks h = {d, hook_before, hook_after};
    wf_exec_set_hooks(d->e, &h);
}

double wf_dist_take_comm_s(wf_dist *d)
{
    double s = d->comm_s;
    d->comm_s = 0;
    return s;
}

double wf_dist_grad_norm(const wf_dist *d)
{
    return d->grad_norm;
}

int wf_dist_ngroups(const wf_dist *d)
{
    return d->ngroups;
}

const char *wf_dist_describe(const wf_dist *d)
{
    return d->desc;
}

/* ---- sharded state: images and memory ------------------------------------------------------------- */

int wf_dist_zero(const wf_dist *d)
{
    return d->zero;
}

wf_optim *wf_dist_optim(const wf_dist *d)
{
    return d->o;
}

int64_t wf_dist_zero_floats(const wf_dist *d)
{
    return d->zero ? d->total : 0;
}

/* Every rank's slice of each group of `shard` (laid out as the shards) into
 * the image's group ranges. */
static wf_status gather_image(wf_dist *d, const float *shard, float *image)
{
    for (int k = 0; k < d->ngroups; k++) {
        const group *g = &d->groups[k];
        int n = (int)(g->count / d->nranks);
        if (!d->mpi) {
            memcpy(image + g->off, shard + g->shard_off, (size_t)n * sizeof(float));
            continue;
        }
        MPI_TRY(MPI_Allgather(shard + g->shard_off, n, MPI_FLOAT, image + g->off, n, MPI_FLOAT, d->comm),
                "MPI_Allgather");
    }
    return WF_OK;
}

wf_status wf_dist_zero_gather(wf_dist *d, float *params, float *const *state)
{
    if (!d->zero)
        return WF_OK;
    wf_status st = wf_dist_sync(d);
    for (int s = 0; state && s < wf_optim_nstate(d->zo) && st == WF_OK; s++)
        st = gather_image(d, wf_optim_state_block(d->zo, s, NULL), state[s]);
    if (st == WF_OK && d->zero == 3 && params) {
        st = gather_image(d, d->pshard, params);
        memcpy(params + d->nograd_off, d->resident, (size_t)(d->total - d->nograd_off) * sizeof(float));
    }
    return st;
}

void wf_dist_zero_scatter(wf_dist *d, const float *params, const float *const *state)
{
    if (!d->zero)
        return;
    for (int k = 0; k < d->ngroups; k++) {
        const group *g = &d->groups[k];
        int64_t n = g->count / d->nranks, at = g->off + d->rank * n;
        for (int s = 0; state && s < wf_optim_nstate(d->zo); s++)
            memcpy(wf_optim_state_block(d->zo, s, NULL) + g->shard_off, state[s] + at, (size_t)n * sizeof(float));
        if (d->zero == 3 && params)
            memcpy(d->pshard + g->shard_off, params + at, (size_t)n * sizeof(float));
    }
    if (d->zero == 3 && params)
        memcpy(d->resident, params + d->nograd_off, (size_t)(d->total - d->nograd_off) * sizeof(float));
}

void wf_dist_memory(const wf_dist *d, size_t *param_bytes, size_t *grad_bytes, size_t *optim_bytes)
{
    int64_t pf = 0, gf = 0;
    wf_exec_param_block(d->e, &pf);
    wf_exec_grad_block(d->e, &gf);
    if (d->zero == 3)
        pf = d->shard_floats + (d->total - d->nograd_off) + d->peak_gathered_floats;
    if (d->shards)
        gf += d->shard_floats;
    int64_t of = 0;
    if (d->zero)
        of = (int64_t)wf_optim_nstate(d->zo) * d->shard_floats;
    else if (d->o)
        of = (int64_t)wf_optim_nstate(d->o) * pf;
    *param_bytes = (size_t)pf * sizeof(float);
    *grad_bytes = (size_t)gf * sizeof(float);
    *optim_bytes = (size_t)of * sizeof(float);
}
