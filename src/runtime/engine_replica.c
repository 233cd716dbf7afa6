/* The replica engine (engine-impl.h): one model replica per rank, the data-
 * parallel engine (dist.c) reducing its gradients under the run's schedule,
 * and experts split over groups of ep consecutive ranks.
 *
 * One step on each of the P ranks: take this rank's contiguous slice (b =
 * B/P samples) of the next global batch; run it as m micro-batches of mbs
 * samples (forward, backward accumulating the gradients), where the last
 * micro-batch's backward issues the comm schedule's collectives; end the
 * backward (wfbp/ddp: wait, clip, update; dear: defer); then gather every
 * rank's mean loss and status (MPI_Allgather of two doubles), so that the
 * reported loss (the mean over the global batch) and the decision to stop on
 * an error are the same on every rank. */
#include "runtime/engine-impl.h"

#include "weft/cluster.h"
#include "weft/onnx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    wf_engine_args a;
    const wf_train_config *c;
    const wf_plan *plan; /* a.plan */
    MPI_Comm epcomm;     /* the rank's expert-parallel group (ep > 1), else MPI_COMM_NULL */
    wf_exec *e;
    wf_optim *o;
    wf_dist *d;
    wf_engine_feed f;
    int64_t m, mbs;
    int in_t, lab_t;
    wf_feed_graph in; /* every input of the graph */
    int pieces;       /* co-shard: rows of a micro-batch run as this many pieces in turn */
    int replay;       /* recompute=full: each piece's forward replayed before its backward */
    float *rec;       /* recycled values of every piece of the step ([m * pieces][rows, rec_floats]) */
    int64_t steps;
    char comm_note[192];
    char init_note[160];
    wf_engine_images z;
} replica;

/* The plan's checks: what the replicas run (the runtime's table,
 * runs_plan.c), then against the job: the experts' groups, the ranks and
 * the batch. */
static wf_status resolve(replica *r)
{
    const wf_train_config *c = r->c;
    const wf_plan *p = r->plan;
    const int nranks = r->a.nranks;
    wf_status st = wf_runtime_engine_check(WF_ENGINE_REPLICA, p, &r->a.model);
    if (st != WF_OK)
        return st;
    if (p->ep > 1) {
        /* Expert groups of ep consecutive data-parallel ranks. */
        if (nranks % p->ep != 0 || r->a.model.experts % p->ep != 0)
            return wf_errorf(WF_INVAL, "ep=%d must divide the %d ranks and the %lld experts", p->ep, nranks,
                             (long long)r->a.model.experts);
        if (p->ep > WF_EXEC_MAX_EP)
            return wf_errorf(WF_INVAL, "ep=%d: the runtime splits experts over at most %d ranks", p->ep,
                             WF_EXEC_MAX_EP);
    }
    if (p->dp != nranks && p->ep > 1)
        return wf_errorf(WF_INVAL, "plan dp=%d,ep=%d but the job has %d ranks (the ep ranks are carved out of the "
                         "data-parallel ones: dp=%d,ep=%d here, or run under mpiexec -n %d)",
                         p->dp, p->ep, nranks, nranks, p->ep, p->dp);
    if (p->dp != nranks)
        return wf_errorf(WF_INVAL, "plan dp=%d but the job has %d rank%s (run under mpiexec -n %d, or use --plan auto)",
                         p->dp, nranks, nranks == 1 ? "" : "s", p->dp);
    if (c->batch < 1)
        return wf_errorf(WF_INVAL, "batch %lld must be at least 1", (long long)c->batch);
    if (c->batch % nranks != 0)
        return wf_errorf(WF_INVAL, "batch %lld is not divisible by %d ranks", (long long)c->batch, nranks);
    r->f.b = c->batch / nranks;
    r->mbs = p->mbs;
    if (r->mbs < 1 || r->f.b % r->mbs != 0)
        return wf_errorf(WF_INVAL, "plan mbs=%d does not divide the %lld samples per rank (batch %lld / %d ranks)",
                         p->mbs, (long long)r->f.b, (long long)c->batch, nranks);
    r->m = r->f.b / r->mbs;
    /* Co-shard (SuperScaler): a micro-batch's rows in K pieces run in turn,
     * each piece's forward replayed before its backward (recompute=full,
     * which wf_plan_validate requires of co-shard, runs the replay alone). */
    r->pieces = p->coshard > 1 ? p->coshard : 1;
    r->replay = p->recompute == WF_RECOMPUTE_FULL;
    /* The executor holds its graph at one piece's rows, so it splits every
     * op alike: per-op co-shard (only the chosen ops in pieces) is priced
     * by estimate, simulate and plan but not run. */
    if (wf_plan_coshard_per_op(p))
        return wf_errorf(WF_INVAL, "coshard=%d@%s: the runtime runs whole-stage co-shard only (coshard=%d with "
                                   "recompute=full, every op in pieces, the same losses); per-op co-shard is priced "
                                   "by estimate, simulate and plan but not run",
                         p->coshard, p->coshard_on, p->coshard);
    if (r->mbs % r->pieces != 0)
        return wf_errorf(WF_INVAL, "coshard=%d does not divide the micro-batch mbs=%d (each piece takes mbs/%d rows)",
                         r->pieces, p->mbs, r->pieces);
    if (r->pieces > 1 && wf_model_is_moe(&r->a.model))
        return wf_errorf(WF_INVAL, "coshard=%d: model '%s' routes tokens to experts with a capacity per batch, "
                                   "which pieces of a micro-batch change (coshard=1)", r->pieces, r->a.model.name);
    return WF_OK;
}

/* Co-shard splits rows: an op that mixes the rows of a batch (batch
 * statistics) computes another function on a piece. */
static wf_status coshard_rows_independent(const replica *r, const wf_graph *g)
{
    if (r->pieces <= 1)
        return WF_OK;
    for (int o = 0; o < g->nfwd; o++)
        if (g->ops[o].kind == WF_OP_BATCHNORM)
            return wf_errorf(WF_INVAL, "coshard=%d: model '%s' normalizes by batch statistics (op '%s'), which "
                                       "pieces of a micro-batch change (coshard=1)", r->pieces, r->a.model.name,
                             g->ops[o].name);
    return WF_OK;
}

/* comm "auto" of a data-parallel run: the caller's choice (c->comm_auto). */
static wf_status choose_comm(replica *r, wf_comm_sched *out)
{
    if (!r->c->comm_auto)
        return wf_errorf(WF_INVAL, "--comm auto: nothing chooses the schedule here (weft train does, by simulation)");
    return r->c->comm_auto(&r->a.model, r->c->cluster, r->mbs, r->a.nranks, out, r->comm_note, sizeof r->comm_note);
}

/* An ONNX model starts from the initializers of its file: the model is built
 * again from the file at the micro-batch size (the same build, so the same
 * tensor indices as the executor's copy) and each parameter's data copied in
 * the IR's layout. Every rank reads the file, so they start equal. */
static wf_status load_onnx_weights(replica *r)
{
    char path[1024], dims[512];
    wf_status st = wf_onnx_split_spec(r->a.model.name, path, sizeof path, dims, sizeof dims);
    wf_onnx_model *m = NULL;
    if (st == WF_OK)
        st = wf_onnx_open(path, &m);
    if (st != WF_OK)
        return st;
    wf_graph g;
    wf_onnx_opts o = {r->mbs, dims, 1};
    st = wf_onnx_build(m, &o, &g);
    int64_t n = 0;
    for (int i = 0; st == WF_OK && i < wf_exec_nparams(r->e); i++) {
        const wf_exec_param *p = wf_exec_param_at(r->e, i);
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
        snprintf(r->init_note, sizeof r->init_note, "the weights in the .onnx file (%lld values)",
                 (long long)n);
    return st;
}

/* The expert exchanges over the rank's ep group (wf_exec_experts): the row
 * counts, then the rows. */
static wf_status ep_alltoall_counts(void *ctx, const int32_t *send, int32_t *recv, int n)
{
    replica *r = ctx;
    int rc = MPI_Alltoall(send, n, MPI_INT32_T, recv, n, MPI_INT32_T, r->epcomm);
    return rc == MPI_SUCCESS ? WF_OK
                             : wf_errorf(WF_MPI, "MPI_Alltoall of the experts' row counts failed (%d)", rc);
}

static wf_status ep_alltoallv(void *ctx, const float *send, const int64_t *send_n, float *recv, const int64_t *recv_n)
{
    replica *r = ctx;
    int sc[WF_EXEC_MAX_EP], sd[WF_EXEC_MAX_EP], rc_[WF_EXEC_MAX_EP], rd[WF_EXEC_MAX_EP];
    int64_t so = 0, ro = 0;
    for (int p = 0; p < r->plan->ep; p++) {
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
    int rc = MPI_Alltoallv(send, sc, sd, MPI_FLOAT, recv, rc_, rd, MPI_FLOAT, r->epcomm);
    return rc == MPI_SUCCESS ? WF_OK : wf_errorf(WF_MPI, "MPI_Alltoallv of the experts' tokens failed (%d)", rc);
}

static wf_status setup(replica *r)
{
    const wf_train_config *c = r->c;
    const wf_plan *plan = r->plan;
    wf_status st = resolve(r);
    if (st != WF_OK)
        return st;
    /* Expert groups: ep consecutive ranks (every rank resolves the same plan,
     * so all reach this split). */
    wf_axis_ranks eax[WF_AXIS_COUNT];
    wf_rank_axes_expert(1, 1, r->a.nranks, 1, plan->ep, 1, eax);
    if (plan->ep > 1 && MPI_Comm_split(r->a.comm, (int)wf_rank_group_first(eax[WF_AXIS_EP], r->a.rank), r->a.rank,
                                       &r->epcomm) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Comm_split of the expert groups failed");
    wf_comm_sched cs = plan->comm;
    if (c->comm && (st = wf_comm_parse(c->comm, &cs)) != WF_OK)
        return st;
    if (cs.kind == WF_COMM_AUTO && (st = choose_comm(r, &cs)) != WF_OK)
        return st;
    /* The executor holds one piece: the micro-batch's rows / coshard. */
    wf_graph g;
    st = wf_model_build(&r->a.model, r->mbs / r->pieces, &g);
    if (st == WF_OK)
        st = coshard_rows_independent(r, &g);
    if (st == WF_OK)
        st = wf_feed_graph_plan(&r->a.model, &g, &r->in);
    if (st == WF_OK)
        st = wf_data_layout_from_input(&g, r->in.in_t, &r->f.layout);
    if (st == WF_OK) {
        wf_exec_opts eo = {c->reference, c->seed};
        st = wf_exec_create_keeping(&g, &eo, r->in.keep, r->in.nkeep, &r->e);
    }
    wf_graph_free(&g);
    if (st != WF_OK)
        return st;
    if (plan->ep > 1) {
        wf_exec_experts x = {plan->ep, (int)wf_rank_coord(eax[WF_AXIS_EP], r->a.rank), r, ep_alltoall_counts,
                             ep_alltoallv};
        wf_exec_set_experts(r->e, &x);
    }
    snprintf(r->init_note, sizeof r->init_note, "random (seed %llu)", (unsigned long long)c->seed);
    if (r->a.model.family == WF_FAMILY_ONNX && !c->init_random && (st = load_onnx_weights(r)) != WF_OK)
        return st;
    if ((st = wf_data_open(c->data, &r->f.layout, c->seed, &r->f.data)) != WF_OK)
        return st;
    /* ZeRO: the engine keeps the optimizer over this rank's shard. */
    if (!plan->zero && (st = wf_optim_create(&c->optim, r->e, &r->o)) != WF_OK)
        return st;
    wf_dist_config dc = {r->a.comm, r->a.rank, r->a.nranks, cs, plan->overlap, c->cluster, plan->zero, &c->optim, 0, {0, 0}};
    if ((st = wf_dist_create(r->e, r->o, &dc, &r->d)) != WF_OK)
        return st;
    /* The loader feeds the input named ids (else the first data input) and
     * the labels; the model's constants, recycled and derived inputs come
     * from feed_inputs.c. */
    const wf_graph *eg = wf_exec_graph(r->e);
    r->in_t = r->in.in_t;
    r->lab_t = r->in.lab_t;
    r->f.in_numel = wf_data_layout_input_numel(&r->f.layout);
    r->f.lab_numel = wf_data_layout_label_numel(&r->f.layout);
    const int64_t rows = r->in.rows;
    if (rows * r->pieces != r->mbs || wf_tensor_numel(&eg->tensors[r->in_t]) != rows * r->f.in_numel ||
        wf_tensor_numel(&eg->tensors[r->lab_t]) != rows * r->f.lab_numel)
        return wf_errorf(WF_INVAL, "model %s: its inputs do not match the data layout", r->a.model.name);
    if ((st = wf_feed_graph_constants(&r->in, &r->a.model, r->e)) != WF_OK)
        return st;
    if (r->in.rec_floats > 0) {
        /* Every piece's recycled values: NF1B runs all recycling forwards
         * first, and a replayed forward takes the values its first forward took. */
        double n = (double)r->m * (double)r->mbs * (double)r->in.rec_floats;
        if ((st = wf_mem_check(n * sizeof(float), "the recycled values of a step")) != WF_OK)
            return st;
        r->rec = calloc((size_t)n, sizeof(float));
        if (!r->rec)
            return wf_errorf(WF_NOMEM, "out of memory for the recycled values of a step");
    }
    return wf_engine_feed_alloc(&r->f);
}

static void destroy(void *eng)
{
    replica *r = eng;
    if (!r)
        return;
    wf_dist_free(r->d);
    wf_optim_free(r->o);
    wf_exec_free(r->e);
    wf_engine_feed_free(&r->f);
    wf_feed_graph_free(&r->in);
    free(r->rec);
    wf_engine_images_free(&r->z);
    int up = 0, fin = 0;
    MPI_Initialized(&up);
    if (up)
        MPI_Finalized(&fin);
    if (r->epcomm != MPI_COMM_NULL && up && !fin)
        MPI_Comm_free(&r->epcomm);
    free(r);
}

static wf_status create(const wf_engine_args *a, void **out)
{
    *out = NULL;
    replica *r = calloc(1, sizeof *r);
    if (!r)
        return wf_errorf(WF_NOMEM, "out of memory creating the trainer");
    r->a = *a;
    r->c = a->c;
    r->plan = &r->a.plan;
    r->epcomm = MPI_COMM_NULL;
    wf_status st = setup(r);
    if (st != WF_OK) {
        destroy(r);
        return st;
    }
    *out = r;
    return WF_OK;
}

/* One pass of piece u (rows [u * rows, (u + 1) * rows) of the rank's batch):
 * its rows and recycled values in, then forward (and the backward when
 * bwd). Recycling pass k of N (k = N: the one that learns) draws its own
 * dropout masks: stream step * (N + 1) + k (the step alone without
 * recycling). *st keeps the first data or kernel error (the ranks go on to
 * keep their collectives matched); a communication or backward error is
 * returned. */
typedef struct {
    int64_t first;  /* the rank's first global sample */
    int fwd_first;  /* the step's first forward is still to come */
    int64_t units;  /* pieces in the step */
    double loss_sum;
    wf_status st;
} step_state;

static wf_status run_pass(replica *r, step_state *ss, int64_t u, int k, int learn, int bwd)
{
    const int64_t rows = r->in.rows;
    const int N = r->in.recycle;
    float *rec = r->rec ? r->rec + u * rows * r->in.rec_floats : NULL;
    wf_feed_graph_rows(&r->in, r->e, &r->f, u * rows, ss->first + u * rows, r->c->seed);
    if (rec)
        wf_feed_graph_recycled_load(&r->in, r->e, rec);
    uint64_t stream = N > 0 ? (uint64_t)r->steps * (uint64_t)(N + 1) + (uint64_t)k : (uint64_t)r->steps;
    wf_exec_set_stream(r->e, stream, ss->first + u * rows);
    wf_dist_begin_micro(r->d, ss->fwd_first, bwd && u == ss->units - 1);
    ss->fwd_first = 0;
    float loss = 0;
    wf_status fs = wf_exec_forward(r->e, &loss);
    if (fs == WF_MPI)
        return fs;
    if (ss->st == WF_OK)
        ss->st = fs;
    if (!learn && rec && fs == WF_OK) {
        wf_status rs = wf_feed_graph_recycled_save(&r->in, r->e, rec);
        if (ss->st == WF_OK)
            ss->st = rs;
    }
    if (learn && !(r->replay && bwd))
        ss->loss_sum += (double)loss;
    if (bwd) {
        wf_status bs = wf_exec_backward(r->e, u > 0);
        if (bs != WF_OK)
            return bs;
    }
    return WF_OK;
}

/* The N forwards without gradient of pieces [lo, hi), from zeros. */
static wf_status recycle_pieces(replica *r, step_state *ss, int64_t lo, int64_t hi)
{
    for (int64_t u = lo; u < hi; u++) {
        if (r->rec)
            memset(r->rec + u * r->in.rows * r->in.rec_floats, 0,
                   (size_t)(r->in.rows * r->in.rec_floats) * sizeof(float));
        for (int k = 0; k < r->in.recycle; k++) {
            wf_status st = run_pass(r, ss, u, k, 0, 0);
            if (st != WF_OK)
                return st;
        }
    }
    return WF_OK;
}

static wf_status step(void *eng, wf_train_stats *s)
{
    replica *r = eng;
    const int64_t batch = r->c->batch;
    const int rank = r->a.rank, nranks = r->a.nranks;
    double t0 = wf_now_s();
    memset(s, 0, sizeof *s);
    step_state ss;
    memset(&ss, 0, sizeof ss);
    ss.st = wf_engine_feed_next(&r->f, batch, rank, nranks);
    int64_t count;
    wf_data_slice(batch, rank, nranks, &ss.first, &count);
    ss.fwd_first = 1;
    const int64_t K = r->pieces, U = r->m * K, N = r->in.recycle;
    ss.units = U;
    wf_status ps = WF_OK;
    /* NF1B: the recycling forwards of every micro-batch first. */
    if (N > 0 && r->plan->nf1b)
        ps = recycle_pieces(r, &ss, 0, U);
    for (int64_t j = 0; j < r->m && ps == WF_OK; j++) {
        if (N > 0 && !r->plan->nf1b)
            ps = recycle_pieces(r, &ss, j * K, (j + 1) * K);
        /* The pieces' forwards (with their backwards unless replayed)... */
        for (int64_t u = j * K; u < (j + 1) * K && ps == WF_OK; u++)
            ps = run_pass(r, &ss, u, (int)N, 1, !r->replay);
        /* ...then each piece's forward again, just before its backward. */
        for (int64_t u = j * K; u < (j + 1) * K && ps == WF_OK && r->replay; u++)
            ps = run_pass(r, &ss, u, (int)N, 1, 1);
    }
    if (ps != WF_OK)
        return ps;
    wf_status st = ss.st;
    double loss_sum = ss.loss_sum;
    const int64_t in_numel = r->f.in_numel;
    wf_status es = wf_dist_end_backward(r->d, r->steps + 1, 1.0 / ((double)nranks * (double)U));
    if (es != WF_OK)
        return es;
    /* Every rank's loss and status, in rank order. */
    double mine[2] = {loss_sum / (double)U, (double)st};
    double *all = malloc((size_t)nranks * 2 * sizeof *all);
    if (!all)
        return wf_errorf(WF_NOMEM, "out of memory");
    wf_status gs = wf_dist_allgather(r->d, mine, 2, all);
    double loss = 0;
    int worst = WF_OK;
    for (int k = 0; k < nranks; k++) {
        loss += all[2 * k];
        if ((int)all[2 * k + 1] < worst)
            worst = (int)all[2 * k + 1];
    }
    free(all);
    if (gs != WF_OK)
        return gs;
    if (worst != WF_OK)
        return wf_mpi_agree_on(r->a.comm, rank, nranks, st);
    r->steps++;
    s->step = r->steps;
    s->loss = loss / (double)nranks;
    s->time_s = wf_now_s() - t0;
    s->comm_s = wf_dist_take_comm_s(r->d);
    s->compute_s = s->time_s - s->comm_s;
    s->grad_norm = wf_dist_grad_norm(r->d);
    s->samples = batch;
    s->tokens = r->f.layout.input_dtype == WF_DTYPE_INT32 ? batch * in_numel : 0;
    return WF_OK;
}

static wf_status sync(void *eng)
{
    replica *r = eng;
    wf_status st = wf_dist_sync(r->d);
    wf_dist_take_comm_s(r->d);
    return wf_mpi_agree_on(r->a.comm, r->a.rank, r->a.nranks, st);
}

static int64_t steps_done(const void *eng) { return ((const replica *)eng)->steps; }

static wf_exec *exec_of(const void *eng) { return ((const replica *)eng)->e; }

static void info(const void *eng, wf_train_info *out)
{
    const replica *r = eng;
    memset(out, 0, sizeof *out);
    out->rank = r->a.rank;
    out->nranks = r->a.nranks;
    out->local_batch = r->f.b;
    out->micro_batches = r->m;
    out->micro_batch = r->mbs;
    out->tokens_per_sample = r->f.layout.input_dtype == WF_DTYPE_INT32 ? r->f.in_numel : 0;
    out->ngroups = wf_dist_ngroups(r->d);
    for (int i = 0; i < wf_exec_nparams(r->e); i++)
        out->params += wf_exec_param_at(r->e, i)->numel;
    snprintf(out->comm, sizeof out->comm, "%s", wf_dist_describe(r->d));
    snprintf(out->comm_note, sizeof out->comm_note, "%s", r->comm_note);
    snprintf(out->plan_note, sizeof out->plan_note, "%s", r->a.plan_note);
    snprintf(out->model, sizeof out->model, "%s", r->a.model.name);
    snprintf(out->data, sizeof out->data, "%s", wf_data_describe(r->f.data));
    snprintf(out->init, sizeof out->init, "%s", r->init_note);
    wf_exec_memory_of(r->e, &out->memory);
    out->zero = r->plan->zero;
    wf_dist_memory(r->d, &out->memory.param_bytes, &out->memory.grad_bytes, &out->optimizer_bytes);
}

static wf_status gather_params(void *eng, float *out, int64_t cap, int64_t *n)
{
    replica *r = eng;
    wf_status st = sync(r);
    /* ZeRO-3 holds shards: gather the block first. */
    float *image = NULL;
    if (st == WF_OK && wf_dist_zero(r->d) == 3) {
        image = calloc((size_t)wf_dist_zero_floats(r->d) + 1, sizeof *image);
        st = image ? WF_OK : wf_errorf(WF_NOMEM, "out of memory gathering the parameters");
        st = wf_mpi_agree_on(r->a.comm, r->a.rank, r->a.nranks, st);
        if (st == WF_OK)
            st = wf_dist_zero_gather(r->d, image, NULL);
    }
    *n = 0;
    for (int i = 0; i < wf_exec_nparams(r->e) && st == WF_OK; i++) {
        const wf_exec_param *p = wf_exec_param_at(r->e, i);
        if (out && *n + p->numel <= cap)
            memcpy(out + *n, image ? image + p->offset : p->data, (size_t)p->numel * sizeof(float));
        *n += p->numel;
    }
    free(image);
    return st;
}

static uint64_t checksum(const void *eng)
{
    const replica *r = eng;
    return wf_engine_dist_checksum(r->e, r->d);
}

static int trace(const void *eng, wf_pipe_op *ops, int cap)
{
    (void)eng;
    (void)ops;
    (void)cap;
    return 0; /* no stages */
}

static void ckpt_view(void *eng, wf_engine_ckpt *v)
{
    replica *r = eng;
    char plan[96];
    wf_engine_plan_text(r->plan, plan, sizeof plan);
    *v = (wf_engine_ckpt){r->f.data, &r->steps, r->m, r->a.model.name, ""};
    snprintf(v->run, sizeof v->run, "plan=%s\n", plan);
}

static wf_status ckpt_tensors(void *eng, wf_ckpt_tensor **out, char **names, int *n)
{
    replica *r = eng;
    return wf_engine_dist_tensors(r->e, r->o, r->d, &r->z, out, names, n);
}

static wf_status ckpt_gather(void *eng)
{
    replica *r = eng;
    return wf_engine_dist_gather(r->d, &r->z);
}

static void ckpt_scatter(void *eng)
{
    replica *r = eng;
    wf_engine_dist_scatter(r->d, &r->z);
}

static void ckpt_release(void *eng) { wf_engine_images_free(&((replica *)eng)->z); }

const wf_engine_iface wf_engine_replica = {
    "replica",  create,        destroy,      step,         sync,        steps_done,   exec_of,
    info,       gather_params, checksum,     trace,        ckpt_view,   ckpt_tensors, ckpt_gather,
    ckpt_scatter, ckpt_release,
};
