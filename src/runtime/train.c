/* The trainer: a data loader, an executor, an optimizer and the data-parallel
 * engine put together into training steps, with checkpoints and resume.
 *
 * One step on each of the P ranks: take this rank's contiguous slice (b =
 * B/P samples) of the next global batch; run it as m micro-batches of mbs
 * samples (forward, backward accumulating the gradients), where the last
 * micro-batch's backward issues the comm schedule's collectives; end the
 * backward (wfbp/ddp: wait, clip, update; dear: defer); then gather every
 * rank's mean loss and status (MPI_Allgather of two doubles), so that the
 * reported loss (the mean over the global batch) and the decision to stop on
 * an error are the same on every rank.
 *
 * Determinism: the data stream is a function of (spec, seed, position); the
 * dropout masks of step s are a function of (seed, s, global element index);
 * the initialization a function of the seed. So two runs, a resumed run and a
 * run on any number of ranks draw the same numbers; only the summation order
 * of the gradient reduction differs across rank counts (losses agree to
 * rounding), while a resumed run continues bit for bit.
 *
 * Errors: a rank whose data or kernels fail keeps calling the collectives
 * (its executor skips the kernels but runs the hooks), so no rank waits
 * forever; the step's gather then makes every rank return the error with the
 * message of the lowest failing rank. */
#include "runtime/dist-impl.h"
#include "kernels/kernels-impl.h"
#include "runtime/spmd-impl.h"
#include "runtime/pipeline-impl.h"

#include "weft/cluster.h"
#include "weft/models.h"
#include "weft/onnx.h"
#include "weft/runtime_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wf_train {
    wf_train_config c;
    wf_model_config model;
    wf_plan plan;
    int rank, nranks;
    MPI_Comm comm;       /* MPI_COMM_NULL without MPI */
    MPI_Comm epcomm;     /* the rank's expert-parallel group (ep > 1), else MPI_COMM_NULL */
    wf_exec *e;
    wf_optim *o;
    wf_dist *d;
    wf_data *data;
    wf_data_layout layout;
    int64_t b, m, mbs;
    int64_t in_numel, lab_numel; /* per sample */
    void *inbuf;                 /* [b, in_numel] float or int32 */
    int32_t *labbuf;             /* [b, lab_numel] */
    int in_t, lab_t;
    int64_t steps;
    char comm_note[192];
    char plan_note[256];
    char init_note[160];
    wf_spmd *spmd;       /* op-level / tensor-parallel plans (spmd.c); then the rest is unused */
    wf_pipe *pipe;               /* pipeline stages (pp > 1, pipeline.c), else NULL */
    float *zimg;                 /* ZeRO: a checkpoint's full images (parameters, state k) */
    float *zptr[3];              /* into zimg: [0] parameters (zero=3), [1 + k] optimizer state k */
};

static wf_dist *ckpt_dist(const wf_train *t);

static int mpi_up(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (!init)
        return 0;
    MPI_Finalized(&fin);
    return !fin;
}

/* ---- pipeline stages (pipeline.c) ------------------------------------------------------------ */

/* Plans with pp > 1: pp x dp ranks, B / dp samples per pipeline in
 * micro-batches of mbs. */
static wf_status pipe_resolve(wf_train *t)
{
    wf_status st = wf_pipe_check(&t->plan, &t->model, t->nranks, t->c.batch);
    if (st != WF_OK)
        return st;
    t->b = t->c.batch / t->plan.dp;
    t->mbs = t->plan.mbs;
    t->m = t->b / t->mbs;
    return WF_OK;
}

/* This rank's batch buffers (inputs and labels of its share of the batch),
 * sized before they are allocated. */
static wf_status batch_buffers_fit(const wf_train *t)
{
    double bytes = (double)t->b * ((double)t->in_numel * 4.0 + (double)t->lab_numel * sizeof(int32_t));
    char what[96];
    snprintf(what, sizeof what, "the input buffers of %lld samples per rank", (long long)t->b);
    return wf_mem_check(bytes, what);
}

/* Setup of a pipelined run: the stages (wf_pipe_create), the data loader
 * and this pipeline's batch buffers. comm auto takes ddp (the simulator's
 * choice is made for whole replicas, not for a stage's data-parallel
 * group). */
static wf_status pipe_setup(wf_train *t, wf_comm_sched cs)
{
    const wf_train_config *c = &t->c;
    if (cs.kind == WF_COMM_AUTO) {
        cs.kind = WF_COMM_DDP;
        cs.threshold_bytes = 0;
        snprintf(t->comm_note, sizeof t->comm_note, "auto with pp=%d: ddp (each stage's data-parallel group)",
                 t->plan.pp);
    }
    if (t->model.family == WF_FAMILY_ONNX && !c->init_random)
        return wf_errorf(WF_INVAL, "pp=%d: pipeline stages start from the seed (--init random), not from the "
                                   "weights of an .onnx file", t->plan.pp);
    wf_pipe_config pc = {t->comm, t->rank, t->nranks, &t->model, &t->plan, c->cluster, c->batch,
                         {c->reference, c->seed}, &c->optim, cs, t->plan.overlap};
    wf_status st = wf_pipe_create(&pc, &t->pipe);
    if (st != WF_OK)
        return st;
    wf_graph g;
    st = wf_model_build(&t->model, t->mbs, &g);
    if (st == WF_OK)
        st = wf_data_layout_from_graph(&g, &t->layout);
    wf_graph_free(&g);
    if (st != WF_OK)
        return st;
    snprintf(t->init_note, sizeof t->init_note, "random (seed %llu)", (unsigned long long)c->seed);
    if ((st = wf_data_open(c->data, &t->layout, c->seed, &t->data)) != WF_OK)
        return st;
    t->in_numel = wf_data_layout_input_numel(&t->layout);
    t->lab_numel = wf_data_layout_label_numel(&t->layout);
    if ((st = batch_buffers_fit(t)) != WF_OK)
        return st;
    t->inbuf = calloc((size_t)(t->b * t->in_numel), 4);
    t->labbuf = calloc((size_t)(t->b * t->lab_numel), sizeof(int32_t));
    if (!t->inbuf || !t->labbuf)
        return wf_errorf(WF_NOMEM, "out of memory for the batch");
    return WF_OK;
}

/* One pipelined step: this pipeline's slice of the global batch through the
 * stages (wf_pipe_step); every rank reports the same loss and status. */
static wf_status pipe_step(wf_train *t, wf_train_stats *s)
{
    double t0 = wf_now_s();
    int dpi, dp;
    wf_pipe_dp_of(t->pipe, &dpi, &dp);
    wf_status st = wf_data_next(t->data, t->c.batch, dpi, dp, t->inbuf, t->labbuf);
    if (st != WF_OK) {
        memset(t->inbuf, 0, (size_t)(t->b * t->in_numel) * 4);
        memset(t->labbuf, 0, (size_t)(t->b * t->lab_numel) * sizeof(int32_t));
    }
    int64_t first, count;
    wf_data_slice(t->c.batch, dpi, dp, &first, &count);
    double loss = 0, comm_s = 0, norm = 0;
    wf_status worst = WF_OK;
    wf_status ps = wf_pipe_step(t->pipe, t->inbuf, t->labbuf, first, t->steps, &loss, &worst, &comm_s, &norm);
    if (ps != WF_OK)
        return ps;
    if (worst != WF_OK || st != WF_OK)
        return wf_mpi_agree_on(t->comm, t->rank, t->nranks, st != WF_OK ? st : worst);
    t->steps++;
    s->step = t->steps;
    s->loss = loss;
    s->time_s = wf_now_s() - t0;
    s->comm_s = comm_s;
    s->compute_s = s->time_s - s->comm_s;
    s->grad_norm = norm;
    s->samples = t->c.batch;
    s->tokens = t->layout.input_dtype == WF_DTYPE_INT32 ? t->c.batch * t->in_numel : 0;
    return WF_OK;
}

/* The plan the runtime executes: data parallelism over every rank. */
static wf_status resolve_plan(wf_train *t)
{
    const wf_train_config *c = &t->c;
    if (!c->plan || strcmp(c->plan, "auto") == 0) {
        wf_plan_default(&t->plan);
        t->plan.dp = t->nranks;
        t->plan.mbs = (int)(c->batch / t->nranks);
        if (t->plan.mbs < 1)
            t->plan.mbs = 1;
    } else {
        wf_status st = wf_plan_parse(c->plan, &t->plan);
        /* dp left out is the ranks launched; mbs the whole per-rank batch. */
        if (st == WF_OK)
            st = wf_plan_complete(&t->plan, t->nranks, c->batch, t->plan_note, sizeof t->plan_note);
        if (st != WF_OK)
            return st;
    }
    const wf_plan *p = &t->plan;
    if (p->coshard > 1 || p->nf1b)
        return wf_errorf(WF_INVAL, "%s: co-shard and NF1B are planned and simulated, not run by the runtime",
                         p->coshard > 1 ? "coshard" : "nf1b");
    if (p->pp > 1 || (p->vpp > 1 && p->tp <= 1))
        return pipe_resolve(t);
    if (p->tp > 1 || p->pp > 1 || p->vpp > 1)
        return wf_errorf(WF_INVAL, "the runtime executes data parallelism only (tp=%d, pp=%d, vpp=%d)", p->tp, p->pp,
                         p->vpp);
    if (p->cp > 1 || p->fp8)
        return wf_errorf(WF_INVAL, "the runtime executes data and expert parallelism only (cp=%d, fp8=%d: context "
                                   "parallelism and FP8 are planned and simulated, not run)",
                         p->cp, p->fp8);
    if (p->etp > 1)
        return wf_errorf(WF_INVAL, "etp=%d: the runtime splits whole experts over the ep ranks (expert tensor "
                         "parallelism is planned and simulated, not run)", p->etp);
    if (p->ep > 1) {
        /* Expert groups of ep consecutive data-parallel ranks. */
        if (!wf_model_is_moe(&t->model))
            return wf_errorf(WF_INVAL, "ep=%d: model '%s' has no experts", p->ep, t->model.name);
        if (t->nranks % p->ep != 0 || t->model.experts % p->ep != 0)
            return wf_errorf(WF_INVAL, "ep=%d must divide the %d ranks and the %lld experts", p->ep, t->nranks,
                             (long long)t->model.experts);
        if (p->ep > WF_EXEC_MAX_EP)
            return wf_errorf(WF_INVAL, "ep=%d: the runtime splits experts over at most %d ranks", p->ep,
                             WF_EXEC_MAX_EP);
    }
    if (p->sp || p->recompute != WF_RECOMPUTE_NONE)
        return wf_errorf(WF_INVAL, "the runtime executes data parallelism without sp and recomputation (sp=%d, "
                         "recompute=%s)", p->sp, wf_recompute_name(p->recompute));
    if (p->zero && p->ep > 1)
        return wf_errorf(WF_INVAL, "zero=%d with ep=%d: the runtime shards the state of plain data parallelism only",
                         p->zero, p->ep);
    if (p->dp != t->nranks && p->ep > 1)
        return wf_errorf(WF_INVAL, "plan dp=%d,ep=%d but the job has %d ranks (the ep ranks are carved out of the "
                         "data-parallel ones: dp=%d,ep=%d here, or run under mpiexec -n %d)",
                         p->dp, p->ep, t->nranks, t->nranks, p->ep, p->dp);
    if (p->dp != t->nranks)
        return wf_errorf(WF_INVAL, "plan dp=%d but the job has %d rank%s (run under mpiexec -n %d, or use --plan auto)",
                         p->dp, t->nranks, t->nranks == 1 ? "" : "s", p->dp);
    if (c->batch < 1)
        return wf_errorf(WF_INVAL, "batch %lld must be at least 1", (long long)c->batch);
    if (c->batch % t->nranks != 0)
        return wf_errorf(WF_INVAL, "batch %lld is not divisible by %d ranks", (long long)c->batch, t->nranks);
    t->b = c->batch / t->nranks;
    t->mbs = p->mbs;
    if (t->mbs < 1 || t->b % t->mbs != 0)
        return wf_errorf(WF_INVAL, "plan mbs=%d does not divide the %lld samples per rank (batch %lld / %d ranks)",
                         p->mbs, (long long)t->b, (long long)c->batch, t->nranks);
    t->m = t->b / t->mbs;
    return WF_OK;
}

/* The plans the runtime executes (resolve_plan's, pipeline.c's and
 * spmd.c's checks, before the world's rank count, which the search fixes);
 * every plan it runs it also checkpoints. comm: the schedule --comm names
 * (NULL: the plan's), which the run uses in place of the plan's, so the
 * check sees it. */
int wf_runtime_runs_plan(const wf_plan *plan, const wf_comm_sched *comm)
{
    wf_plan q = *plan;
    const wf_plan *p = &q;
    if (comm)
        q.comm = *comm;
    if (p->recompute != WF_RECOMPUTE_NONE || p->cp > 1 || p->fp8 || p->etp > 1)
        return 0;
    const int spmd = p->tp > 1 || p->sp, piped = p->pp > 1;
    /* Sharded state (dist.c) over the data-parallel group of plain data
     * parallelism, of each pipeline stage and of the SPMD mesh's
     * data-parallel axis: not ZeRO-3 with dear, no ByteScheduler chunks, no
     * experts. */
    if (p->zero > 0 && (p->ep > 1 || p->comm.kind == WF_COMM_BYTESCHEDULER ||
                        (p->zero == 3 && p->comm.kind == WF_COMM_DEAR)))
        return 0;
    if ((spmd || piped) && p->ep > 1)
        return 0; /* SPMD layouts and pipelines without experts */
    if (spmd && piped && p->tp < 2)
        return 0; /* stages with tensor parallelism: sp only with tp */
    return p->vpp == 1 || piped;
}

int wf_train_world_size(const wf_train_config *c)
{
    int rank = 0, nranks = 1;
    if (!c->self)
        wf_mpi_world(&rank, &nranks);
    return nranks;
}

/* comm "auto" of a data-parallel run: the caller's choice (c->comm_auto). */
static wf_status choose_comm(wf_train *t, wf_comm_sched *out)
{
    if (!t->c.comm_auto)
        return wf_errorf(WF_INVAL, "--comm auto: nothing chooses the schedule here (weft train does, by simulation)");
    return t->c.comm_auto(&t->model, t->c.cluster, t->mbs, t->nranks, out, t->comm_note, sizeof t->comm_note);
}

/* An ONNX model starts from the initializers of its file: the model is built
 * again from the file at the micro-batch size (the same build, so the same
 * tensor indices as the executor's copy) and each parameter's data copied in
 * the IR's layout. Every rank reads the file, so they start equal. */
static wf_status load_onnx_weights(wf_train *t)
{
    char path[1024], dims[512];
    wf_status st = wf_onnx_split_spec(t->model.name, path, sizeof path, dims, sizeof dims);
    wf_onnx_model *m = NULL;
    if (st == WF_OK)
        st = wf_onnx_open(path, &m);
    if (st != WF_OK)
        return st;
    wf_graph g;
    wf_onnx_opts o = {t->mbs, dims, 1};
    st = wf_onnx_build(m, &o, &g);
    int64_t n = 0;
    for (int i = 0; st == WF_OK && i < wf_exec_nparams(t->e); i++) {
        const wf_exec_param *p = wf_exec_param_at(t->e, i);
        if (p->tensor >= g.ntensors || strcmp(g.tensors[p->tensor].name, p->name) != 0)
            st = wf_errorf(WF_INTERNAL, "%s: parameter '%s' not found again in the file", path, p->name);
        else if ((st = wf_onnx_param_data(m, &g, p->tensor, p->data, p->numel)) == WF_NOTFOUND)
            st = wf_errorf(WF_INVAL, "%s: parameter '%s' has no data in the file (a shapes-only "
                                     "export): train it with --init random",
                           path, p->name);
        n += p->numel;
    }
    wf_graph_free(&g);
    wf_onnx_close(m);
    if (st == WF_OK)
        snprintf(t->init_note, sizeof t->init_note, "the weights in the .onnx file (%lld values)",
                 (long long)n);
    return st;
}

/* The expert exchanges over the rank's ep group (wf_exec_experts): the row
 * counts, then the rows. */
static wf_status ep_alltoall_counts(void *ctx, const int32_t *send, int32_t *recv, int n)
{
    wf_train *t = ctx;
    int rc = MPI_Alltoall(send, n, MPI_INT32_T, recv, n, MPI_INT32_T, t->epcomm);
    return rc == MPI_SUCCESS ? WF_OK
                             : wf_errorf(WF_MPI, "MPI_Alltoall of the experts' row counts failed (%d)", rc);
}

static wf_status ep_alltoallv(void *ctx, const float *send, const int64_t *send_n, float *recv, const int64_t *recv_n)
{
    wf_train *t = ctx;
    int sc[WF_EXEC_MAX_EP], sd[WF_EXEC_MAX_EP], rc_[WF_EXEC_MAX_EP], rd[WF_EXEC_MAX_EP];
    int64_t so = 0, ro = 0;
    for (int p = 0; p < t->plan.ep; p++) {
        if (so + send_n[p] > INT32_MAX || ro + recv_n[p] > INT32_MAX)
            return wf_errorf(WF_INVAL, "expert exchange of more than %d floats per rank is too large for MPI",
                             INT32_MAX);
        sc[p] = (int)send_n[p];
        sd[p] = (int)so;
        rc_[p] = (int)recv_n[p];
        rd[p] = (int)ro;
        so += send_n[p];
        ro += recv_n[p];
    }
    int rc = MPI_Alltoallv(send, sc, sd, MPI_FLOAT, recv, rc_, rd, MPI_FLOAT, t->epcomm);
    return rc == MPI_SUCCESS ? WF_OK : wf_errorf(WF_MPI, "MPI_Alltoallv of the experts' tokens failed (%d)", rc);
}

static wf_status setup(wf_train *t)
{
    const wf_train_config *c = &t->c;
    wf_status st = wf_model_lookup(c->model, &t->model);
    if (st != WF_OK)
        return st;
    if ((st = resolve_plan(t)) != WF_OK)
        return st;
    if (t->plan.pp > 1 || t->plan.vpp > 1) {
        wf_comm_sched pcs = t->plan.comm;
        if (c->comm && (st = wf_comm_parse(c->comm, &pcs)) != WF_OK)
            return st;
        return pipe_setup(t, pcs);
    }
    /* Expert groups: ep consecutive ranks (every rank resolves the same plan,
     * so all reach this split). */
    wf_axis_ranks eax[WF_AXIS_COUNT];
    wf_rank_axes_expert(1, 1, t->nranks, 1, t->plan.ep, 1, eax);
    if (t->plan.ep > 1 &&
        MPI_Comm_split(t->comm, (int)wf_rank_group_first(eax[WF_AXIS_EP], t->rank), t->rank, &t->epcomm) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Comm_split of the expert groups failed");
    wf_comm_sched cs = t->plan.comm;
    if (c->comm && (st = wf_comm_parse(c->comm, &cs)) != WF_OK)
        return st;
    if (cs.kind == WF_COMM_AUTO && (st = choose_comm(t, &cs)) != WF_OK)
        return st;
    wf_graph g;
    st = wf_model_build(&t->model, t->mbs, &g);
    if (st == WF_OK)
        st = wf_data_layout_from_graph(&g, &t->layout);
    if (st == WF_OK) {
        wf_exec_opts eo = {c->reference, c->seed};
        st = wf_exec_create(&g, &eo, &t->e);
    }
    wf_graph_free(&g);
    if (st != WF_OK)
        return st;
    if (t->plan.ep > 1) {
        wf_exec_experts x = {t->plan.ep, (int)wf_rank_coord(eax[WF_AXIS_EP], t->rank), t, ep_alltoall_counts,
                             ep_alltoallv};
        wf_exec_set_experts(t->e, &x);
    }
    snprintf(t->init_note, sizeof t->init_note, "random (seed %llu)", (unsigned long long)c->seed);
    if (t->model.family == WF_FAMILY_ONNX && !c->init_random && (st = load_onnx_weights(t)) != WF_OK)
        return st;
    if ((st = wf_data_open(c->data, &t->layout, c->seed, &t->data)) != WF_OK)
        return st;
    /* ZeRO: the engine keeps the optimizer over this rank's shard. */
    if (!t->plan.zero && (st = wf_optim_create(&c->optim, t->e, &t->o)) != WF_OK)
        return st;
    wf_dist_config dc = {t->comm, t->rank, t->nranks, cs, t->plan.overlap, c->cluster, t->plan.zero, &c->optim};
    if ((st = wf_dist_create(t->e, t->o, &dc, &t->d)) != WF_OK)
        return st;
    /* The loader feeds the input named ids (else the only input) and the labels. */
    const wf_graph *eg = wf_exec_graph(t->e);
    t->in_t = t->lab_t = -1;
    for (int i = 0; i < eg->ntensors; i++) {
        const wf_tensor *x = &eg->tensors[i];
        if (x->role == WF_ROLE_LABEL)
            t->lab_t = i;
        if (x->role == WF_ROLE_INPUT && (t->in_t < 0 || strcmp(x->name, "ids") == 0))
            t->in_t = i;
    }
    t->in_numel = wf_data_layout_input_numel(&t->layout);
    t->lab_numel = wf_data_layout_label_numel(&t->layout);
    if (t->in_t < 0 || t->lab_t < 0 || wf_tensor_numel(&eg->tensors[t->in_t]) != t->mbs * t->in_numel ||
        wf_tensor_numel(&eg->tensors[t->lab_t]) != t->mbs * t->lab_numel)
        return wf_errorf(WF_INVAL, "model %s: its inputs do not match the data layout", t->model.name);
    if ((st = batch_buffers_fit(t)) != WF_OK)
        return st;
    t->inbuf = calloc((size_t)(t->b * t->in_numel), 4);
    t->labbuf = calloc((size_t)(t->b * t->lab_numel), sizeof(int32_t));
    if (!t->inbuf || !t->labbuf)
        return wf_errorf(WF_NOMEM, "out of memory for the batch");
    return WF_OK;
}

wf_status wf_train_create(const wf_train_config *c, wf_train **out)
{
    *out = NULL;
    wf_train *t = calloc(1, sizeof *t);
    if (!t)
        return wf_errorf(WF_NOMEM, "out of memory creating the trainer");
    t->c = *c;
    t->comm = MPI_COMM_NULL;
    t->epcomm = MPI_COMM_NULL;
    t->rank = 0;
    t->nranks = 1;
    if (mpi_up()) {
        if (MPI_Comm_dup(c->self ? MPI_COMM_SELF : MPI_COMM_WORLD, &t->comm) != MPI_SUCCESS) {
            free(t);
            return wf_errorf(WF_MPI, "MPI_Comm_dup failed");
        }
        MPI_Comm_set_errhandler(t->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(t->comm, &t->rank);
        MPI_Comm_size(t->comm, &t->nranks);
    }
    wf_status st;
    if (wf_spmd_wants(c->plan))
        st = wf_spmd_create(c, t->comm, t->rank, t->nranks, &t->spmd);
    else
        st = setup(t);
    /* Sizes refused before allocation name the batch that asked for them. */
    if (st == WF_NOFIT)
        wf_error_prefix(st, "--batch %lld on %d rank%s", (long long)c->batch, t->nranks, t->nranks == 1 ? "" : "s");
    st = wf_mpi_agree_on(t->comm, t->rank, t->nranks, st);
    if (st != WF_OK) {
        wf_train_free(t);
        return st;
    }
    *out = t;
    return WF_OK;
}

void wf_train_free(wf_train *t)
{
    if (!t)
        return;
    wf_spmd_free(t->spmd);
    wf_pipe_free(t->pipe);
    wf_dist_free(t->d);
    wf_optim_free(t->o);
    wf_exec_free(t->e);
    wf_data_close(t->data);
    free(t->inbuf);
    free(t->labbuf);
    free(t->zimg);
    if (t->epcomm != MPI_COMM_NULL && mpi_up())
        MPI_Comm_free(&t->epcomm);
    if (t->comm != MPI_COMM_NULL && mpi_up())
        MPI_Comm_free(&t->comm);
    free(t);
}

/* ---- steps ---------------------------------------------------------------------------------- */

wf_status wf_train_step(wf_train *t, wf_train_stats *s)
{
    if (t->spmd)
        return wf_spmd_step(t->spmd, s);
    double t0 = wf_now_s();
    memset(s, 0, sizeof *s);
    if (t->pipe)
        return pipe_step(t, s);
    wf_status st = wf_data_next(t->data, t->c.batch, t->rank, t->nranks, t->inbuf, t->labbuf);
    if (st != WF_OK) {
        memset(t->inbuf, 0, (size_t)(t->b * t->in_numel) * 4);
        memset(t->labbuf, 0, (size_t)(t->b * t->lab_numel) * sizeof(int32_t));
    }
    int64_t first, count;
    wf_data_slice(t->c.batch, t->rank, t->nranks, &first, &count);
    void *in = wf_exec_leaf_data(t->e, t->in_t);
    int32_t *lab = wf_exec_leaf_data(t->e, t->lab_t);
    double loss_sum = 0;
    for (int64_t j = 0; j < t->m; j++) {
        memcpy(in, (char *)t->inbuf + (size_t)(j * t->mbs * t->in_numel) * 4, (size_t)(t->mbs * t->in_numel) * 4);
        memcpy(lab, t->labbuf + j * t->mbs * t->lab_numel, (size_t)(t->mbs * t->lab_numel) * sizeof(int32_t));
        wf_exec_set_stream(t->e, (uint64_t)t->steps, first + j * t->mbs);
        wf_dist_begin_micro(t->d, j == 0, j == t->m - 1);
        float loss = 0;
        wf_status fs = wf_exec_forward(t->e, &loss);
        if (fs == WF_MPI)
            return fs;
        if (st == WF_OK)
            st = fs;
        wf_status bs = wf_exec_backward(t->e, j > 0);
        if (bs != WF_OK)
            return bs;
        loss_sum += (double)loss;
    }
    wf_status es = wf_dist_end_backward(t->d, t->steps + 1, 1.0 / ((double)t->nranks * (double)t->m));
    if (es != WF_OK)
        return es;
    /* Every rank's loss and status, in rank order. */
    double mine[2] = {loss_sum / (double)t->m, (double)st};
    double *all = malloc((size_t)t->nranks * 2 * sizeof *all);
    if (!all)
        return wf_errorf(WF_NOMEM, "out of memory");
    wf_status gs = wf_dist_allgather(t->d, mine, 2, all);
    double loss = 0;
    int worst = WF_OK;
    for (int r = 0; r < t->nranks; r++) {
        loss += all[2 * r];
        if ((int)all[2 * r + 1] < worst)
            worst = (int)all[2 * r + 1];
    }
    free(all);
    if (gs != WF_OK)
        return gs;
    if (worst != WF_OK)
        return wf_mpi_agree_on(t->comm, t->rank, t->nranks, st);
    t->steps++;
    s->step = t->steps;
    s->loss = loss / (double)t->nranks;
    s->time_s = wf_now_s() - t0;
    s->comm_s = wf_dist_take_comm_s(t->d);
    s->compute_s = s->time_s - s->comm_s;
    s->grad_norm = wf_dist_grad_norm(t->d);
    s->samples = t->c.batch;
    s->tokens = t->layout.input_dtype == WF_DTYPE_INT32 ? t->c.batch * t->in_numel : 0;
    return WF_OK;
}

wf_status wf_train_sync(wf_train *t)
{
    if (t->spmd)
        return wf_spmd_sync(t->spmd);
    if (t->pipe)
        return wf_mpi_agree_on(t->comm, t->rank, t->nranks, wf_pipe_sync(t->pipe));
    wf_status st = wf_dist_sync(t->d);
    wf_dist_take_comm_s(t->d);
    return wf_mpi_agree_on(t->comm, t->rank, t->nranks, st);
}

int64_t wf_train_steps_done(const wf_train *t)
{
    if (t->spmd)
        return wf_spmd_steps_done(t->spmd);
    return t->steps;
}

uint64_t wf_train_checksum(const wf_train *t)
{
    if (t->pipe)
        return wf_pipe_checksum(t->pipe);
    int64_t n = 0;
    const unsigned char *p = (const unsigned char *)wf_exec_param_block(wf_train_exec(t), &n);
    float *image = NULL;
    wf_dist *zd = ckpt_dist(t);
    if (zd && wf_dist_zero(zd) == 3) {
        /* ZeRO-3 holds shards: the hash of the gathered block (collective). */
        n = wf_dist_zero_floats(zd);
        image = calloc((size_t)(n > 0 ? n : 1), sizeof *image);
        if (!image || wf_dist_zero_gather(zd, image, NULL) != WF_OK)
            n = 0;
        p = (const unsigned char *)image;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < (size_t)n * sizeof(float); i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    free(image);
    return h;
}

wf_exec *wf_train_exec(const wf_train *t)
{
    return t->spmd ? wf_spmd_exec(t->spmd) : t->pipe ? wf_pipe_exec(t->pipe, 0) : t->e;
}

wf_status wf_train_gather_params(wf_train *t, float *out, int64_t cap, int64_t *n)
{
    if (t->spmd)
        return wf_spmd_gather_params(t->spmd, out, cap, n);
    if (t->pipe)
        return wf_pipe_gather_params(t->pipe, out, cap, n);
    wf_status st = wf_train_sync(t);
    /* ZeRO-3 holds shards: gather the block first. */
    float *image = NULL;
    if (st == WF_OK && wf_dist_zero(t->d) == 3) {
        image = calloc((size_t)wf_dist_zero_floats(t->d) + 1, sizeof *image);
        st = image ? WF_OK : wf_errorf(WF_NOMEM, "out of memory gathering the parameters");
        st = wf_mpi_agree_on(t->comm, t->rank, t->nranks, st);
        if (st == WF_OK)
            st = wf_dist_zero_gather(t->d, image, NULL);
    }
    *n = 0;
    for (int i = 0; i < wf_exec_nparams(t->e) && st == WF_OK; i++) {
        const wf_exec_param *p = wf_exec_param_at(t->e, i);
        if (out && *n + p->numel <= cap)
            memcpy(out + *n, image ? image + p->offset : p->data, (size_t)p->numel * sizeof(float));
        *n += p->numel;
    }
    free(image);
    return st;
}

int wf_train_pipe_order(const wf_train *t, wf_pipe_op *ops, int cap)
{
    return t->pipe ? wf_pipe_trace(t->pipe, ops, cap) : 0;
}

void wf_train_info_of(const wf_train *t, wf_train_info *out)
{
    if (t->spmd) {
        wf_spmd_info_of(t->spmd, out);
        return;
    }
    memset(out, 0, sizeof *out);
    out->rank = t->rank;
    out->nranks = t->nranks;
    out->local_batch = t->b;
    out->micro_batches = t->m;
    out->micro_batch = t->mbs;
    out->tokens_per_sample = t->layout.input_dtype == WF_DTYPE_INT32 ? t->in_numel : 0;
    if (t->pipe) {
        wf_pipe_info(t->pipe, out);
        snprintf(out->comm_note, sizeof out->comm_note, "%s", t->comm_note);
        snprintf(out->plan_note, sizeof out->plan_note, "%s", t->plan_note);
        snprintf(out->model, sizeof out->model, "%s", t->model.name);
        snprintf(out->data, sizeof out->data, "%s", wf_data_describe(t->data));
        snprintf(out->init, sizeof out->init, "%s", t->init_note);
        return;
    }
    out->ngroups = wf_dist_ngroups(t->d);
    for (int i = 0; i < wf_exec_nparams(t->e); i++)
        out->params += wf_exec_param_at(t->e, i)->numel;
    snprintf(out->comm, sizeof out->comm, "%s", wf_dist_describe(t->d));
    snprintf(out->comm_note, sizeof out->comm_note, "%s", t->comm_note);
    snprintf(out->plan_note, sizeof out->plan_note, "%s", t->plan_note);
    snprintf(out->model, sizeof out->model, "%s", t->model.name);
    snprintf(out->data, sizeof out->data, "%s", wf_data_describe(t->data));
    snprintf(out->init, sizeof out->init, "%s", t->init_note);
    wf_exec_memory_of(t->e, &out->memory);
    out->zero = t->plan.zero;
    wf_dist_memory(t->d, &out->memory.param_bytes, &out->memory.grad_bytes, &out->optimizer_bytes);
}

/* ---- checkpoints ------------------------------------------------------------------------------ */

/* What a checkpoint saves and restores: the trainer's own executor,
 * optimizer, data, steps and micro-batches, or the SPMD trainer's (its shards,
 * and a line naming its layouts). */
typedef struct {
    wf_exec *e;
    wf_optim *o;
    wf_data *data;
    int64_t *steps;
    int64_t m;
    const char *model;
    char layouts[160];
} ckpt_view;

static void view_of(wf_train *t, ckpt_view *v)
{
    if (t->spmd) {
        wf_spmd_ckpt s;
        wf_spmd_ckpt_view(t->spmd, &s);
        *v = (ckpt_view){s.e, s.o, s.data, s.steps, s.m, s.model, ""};
        snprintf(v->layouts, sizeof v->layouts, "%s", s.layouts);
        return;
    }
    *v = (ckpt_view){t->e, t->o, t->data, &t->steps, t->m, t->model.name, ""};
}

/* The engine whose ZeRO shards a checkpoint gathers and scatters (the data-
 * parallel trainer's or the SPMD trainer's; NULL for pipelines, whose
 * chunks do their own). */
static wf_dist *ckpt_dist(const wf_train *t)
{
    if (t->spmd) {
        wf_spmd_ckpt s;
        wf_spmd_ckpt_view(t->spmd, &s);
        return s.d;
    }
    return t->pipe ? NULL : t->d;
}

/* The tensors of a checkpoint: every parameter under its graph name, then the
 * optimizer's state per parameter ("<state>.<index>"). names holds the
 * generated names. */
static wf_status ckpt_tensors(wf_train *t, wf_ckpt_tensor **out, char **names, int *n)
{
    if (t->pipe)
        return wf_pipe_ckpt_tensors(t->pipe, out, names, n);
    ckpt_view v;
    view_of(t, &v);
    /* ZeRO: the tensors of an unsharded run, in full images the engine
     * gathers before a save and takes its shards from after a load
     * (ZeRO-1/2 keep the parameters whole in place). */
    wf_dist *zd = ckpt_dist(t);
    const int zero = zd ? wf_dist_zero(zd) : 0;
    if (zero) {
        v.o = wf_dist_optim(zd);
        int64_t nf = wf_dist_zero_floats(zd) + 1;
        free(t->zimg);
        t->zimg = calloc((size_t)(1 + wf_optim_nstate(v.o)) * (size_t)nf, sizeof(float));
        if (!t->zimg)
            return wf_errorf(WF_NOMEM, "out of memory for the checkpoint's images");
        for (int s = 0; s < 1 + wf_optim_nstate(v.o); s++)
            t->zptr[s] = t->zimg + (size_t)s * (size_t)nf;
    }
    int np = wf_exec_nparams(v.e), ns = wf_optim_nstate(v.o);
    int total = np * (1 + ns);
    wf_ckpt_tensor *ts = calloc((size_t)(total > 0 ? total : 1), sizeof *ts);
    char *nm = calloc((size_t)(total > 0 ? total : 1), WF_NAME_LEN);
    if (!ts || !nm) {
        free(ts);
        free(nm);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    int k = 0;
    for (int i = 0; i < np; i++) {
        const wf_exec_param *p = wf_exec_param_at(v.e, i);
        for (int s = -1; s < ns; s++, k++) {
            char *name = nm + (size_t)k * WF_NAME_LEN;
            if (s < 0)
                snprintf(name, WF_NAME_LEN, "%s", p->name);
            else
                snprintf(name, WF_NAME_LEN, "%s.%d", wf_optim_state_name(v.o, s), i);
            ts[k].name = name;
            ts[k].dtype = WF_DTYPE_FP32;
            ts[k].ndim = p->ndim;
            memcpy(ts[k].shape, p->shape, sizeof ts[k].shape);
            ts[k].data = s < 0 ? (void *)p->data : (void *)wf_optim_state(v.o, i, s);
            if (zero && (s >= 0 || zero == 3))
                ts[k].data = t->zptr[s + 1] + p->offset;
        }
    }
    *out = ts;
    *names = nm;
    *n = total;
    return WF_OK;
}

/* What a resumed run must share with the run that saved (checked on load). */
static void ckpt_rng(wf_train *t, uint64_t rng[4])
{
    ckpt_view v;
    view_of(t, &v);
    rng[0] = t->c.seed;
    rng[1] = (uint64_t)t->c.optim.kind;
    rng[2] = (uint64_t)t->c.batch;
    rng[3] = (uint64_t)v.m;
}

/* The run's settings a resume must match, as "key=value" lines (SPMD runs
 * add their layouts: each rank's shards are those of its plan). */
static void ckpt_run(wf_train *t, char *buf, size_t cap)
{
    ckpt_view v;
    view_of(t, &v);
    char plan[96] = "";
    if (!t->spmd)
        wf_pipe_plan_text(&t->plan, plan, sizeof plan);
    snprintf(buf, cap, "data=%s\noptimizer=%s\nseed=%llu\nbatch=%lld\nmicro-batches per step=%lld\n%s%s%s%s",
             t->c.data ? t->c.data : "", wf_optim_name(t->c.optim.kind), (unsigned long long)t->c.seed,
             (long long)t->c.batch, (long long)v.m, plan[0] ? "plan=" : "", plan, plan[0] ? "\n" : "", v.layouts);
    if (v.layouts[0])
        snprintf(buf + strlen(buf), cap - strlen(buf), "\n");
}

/* The first key whose value differs between two run descriptions, named in
 * a message; WF_OK when they agree (or the checkpoint recorded none). */
static wf_status compare_run(const char *dir, const char *saved, const char *now)
{
    for (const char *line = now; *line;) {
        const char *eq = strchr(line, '='), *nl = strchr(line, '\n');
        if (!eq || !nl)
            break;
        size_t klen = (size_t)(eq - line) + 1;
        /* the same key in the saved description */
        const char *s = saved;
        while (*s && strncmp(s, line, klen) != 0) {
            const char *snl = strchr(s, '\n');
            s = snl ? snl + 1 : s + strlen(s);
        }
        if (*s) {
            const char *snl = strchr(s, '\n');
            size_t slen = snl ? (size_t)(snl - s) : strlen(s);
            size_t nlen = (size_t)(nl - line);
            if (slen != nlen || strncmp(s, line, nlen) != 0)
                return wf_errorf(WF_INVAL, "checkpoint %s was written with %.*s, this run has %.*s", dir,
                                 (int)slen, s, (int)nlen, line);
        }
        line = nl + 1;
    }
    return WF_OK;
}

static int self_alone(const wf_train *t)
{
    int wr, wn;
    wf_mpi_world(&wr, &wn);
    return t->c.self && wn > 1;
}

/* What save and load do first, on every rank: refuse a rank alone (`verb`
 * says what the world does with checkpoints), sync the weights, and list the
 * tensors into *ts (names in *names), agreed on by the world. On an error
 * nothing is left to free. */
static wf_status ckpt_begin(wf_train *t, const char *verb, wf_ckpt_tensor **ts, char **names,
                            int *n)
{
    if (self_alone(t))
        return wf_errorf(WF_INVAL, "checkpoints are %s by the whole MPI world, not by one rank alone",
                         verb);
    wf_status st = wf_train_sync(t);
    if (st != WF_OK)
        return st;
    st = ckpt_tensors(t, ts, names, n);
    st = wf_mpi_agree(st);
    if (st != WF_OK) {
        free(*ts);
        free(*names);
        *ts = NULL;
        *names = NULL;
        return st;
    }
    return WF_OK;
}

wf_status wf_train_save(wf_train *t, const char *dir)
{
    wf_ckpt_tensor *ts = NULL;
    char *names = NULL;
    int n = 0;
    wf_status st = ckpt_begin(t, "written", &ts, &names, &n);
    if (st != WF_OK)
        return st;
    /* ZeRO: the full images of the state (and ZeRO-3's parameters) from the shards. */
    if (t->pipe)
        st = wf_pipe_zero_gather(t->pipe);
    else if (t->zimg)
        st = wf_dist_zero_gather(ckpt_dist(t), t->zptr[0], t->zptr + 1);
    if (st != WF_OK) {
        if (t->pipe)
            wf_pipe_zero_release(t->pipe);
        free(ts);
        free(names);
        return st;
    }
    wf_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    ckpt_view v;
    view_of(t, &v);
    meta.step = *v.steps;
    meta.data_position = wf_data_position(v.data);
    ckpt_rng(t, meta.rng);
    snprintf(meta.model, sizeof meta.model, "%s", v.model);
    ckpt_run(t, meta.run, sizeof meta.run);
    st = wf_ckpt_save(dir, &meta, ts, n);
    free(ts);
    free(names);
    free(t->zimg);
    t->zimg = NULL;
    if (t->pipe)
        wf_pipe_zero_release(t->pipe);
    return st;
}

wf_status wf_train_load(wf_train *t, const char *dir)
{
    wf_ckpt_tensor *ts = NULL;
    char *names = NULL;
    int n = 0;
    wf_status st = ckpt_begin(t, "read", &ts, &names, &n);
    if (st != WF_OK)
        return st;
    /* Name what differs between the checkpoint's run and this one before
     * comparing tensors (another optimizer has other tensors). */
    ckpt_view v;
    view_of(t, &v);
    wf_ckpt_meta saved;
    st = wf_ckpt_peek(dir, &saved);
    if (st == WF_OK && strcmp(saved.model, v.model) != 0)
        st = wf_errorf(WF_INVAL, "checkpoint %s was written for model %s, this run trains %s", dir, saved.model,
                       v.model);
    if (st == WF_OK) {
        char now[sizeof saved.run];
        ckpt_run(t, now, sizeof now);
        st = compare_run(dir, saved.run, now);
        /* Shards of an SPMD run and whole replicas do not mix (no resharding yet). */
        const char *sl = strstr(saved.run, "layouts="), *nl = strstr(now, "layouts=");
        if (st == WF_OK && (!sl) != (!nl))
            st = wf_errorf(WF_INVAL, "checkpoint %s holds %s, this run %s: resume with the plan that wrote it "
                           "(resharding between plans is not supported)", dir,
                           sl ? "the shards of an SPMD (tensor or op-level) plan" : "whole data-parallel replicas",
                           nl ? "runs an SPMD plan" : "is data-parallel");
    }
    st = wf_mpi_agree(st);
    if (st != WF_OK) {
        free(ts);
        free(names);
        return st;
    }
    /* Load into scratch copies first, so a checkpoint of another run leaves
     * this trainer untouched. */
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += wf_ckpt_tensor_bytes(&ts[i]);
    char *scratch = malloc(bytes > 0 ? bytes : 1);
    void **dest = malloc((size_t)(n > 0 ? n : 1) * sizeof *dest);
    st = scratch && dest ? WF_OK : wf_errorf(WF_NOMEM, "out of memory loading a checkpoint");
    st = wf_mpi_agree(st);
    if (st == WF_OK) {
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            dest[i] = ts[i].data;
            ts[i].data = scratch + off;
            off += wf_ckpt_tensor_bytes(&ts[i]);
        }
        wf_ckpt_meta meta;
        st = wf_ckpt_load(dir, v.model, &meta, ts, n);
        if (st == WF_OK) {
            uint64_t want[4];
            ckpt_rng(t, want);
            static const char *const what[4] = {"seed", "optimizer", "batch", "micro-batches per step"};
            for (int k = 0; k < 4 && st == WF_OK; k++)
                if (meta.rng[k] != want[k])
                    st = wf_errorf(WF_INVAL, "checkpoint %s was written with %s %llu, this run has %llu", dir, what[k],
                                   (unsigned long long)meta.rng[k], (unsigned long long)want[k]);
        }
        if (st == WF_OK)
            st = wf_data_seek(v.data, meta.data_position);
        st = wf_mpi_agree(st);
        if (st == WF_OK) {
            for (int i = 0; i < n; i++)
                memcpy(dest[i], ts[i].data, wf_ckpt_tensor_bytes(&ts[i]));
            if (t->zimg)
                wf_dist_zero_scatter(ckpt_dist(t), wf_dist_zero(ckpt_dist(t)) == 3 ? t->zptr[0] : NULL,
                                     (const float *const *)(t->zptr + 1));
            if (t->pipe)
                wf_pipe_zero_scatter(t->pipe);
            *v.steps = meta.step;
        }
    }
    free(scratch);
    free(dest);
    free(ts);
    free(names);
    free(t->zimg);
    t->zimg = NULL;
    if (t->pipe)
        wf_pipe_zero_release(t->pipe);
    return st;
}

wf_status wf_runtime_set_threads(int n)
{
    return wf_k_set_threads(n);
}

/* ---- world helpers ------------------------------------------------------------------------------ */

wf_status wf_world_minmax_u64(uint64_t v, uint64_t *min, uint64_t *max)
{
    *min = *max = v;
    if (!mpi_up())
        return WF_OK;
    unsigned long long x = v, lo = 0, hi = 0;
    if (MPI_Allreduce(&x, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Allreduce(&x, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Allreduce failed");
    *min = lo;
    *max = hi;
    return WF_OK;
}

wf_status wf_world_barrier(void)
{
    if (!mpi_up())
        return WF_OK;
    return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? WF_OK : wf_errorf(WF_MPI, "MPI_Barrier failed");
}
