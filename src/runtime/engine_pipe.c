/* The pipeline engine (engine-impl.h): plans with pp > 1 (pp x dp ranks,
 * tensor parallelism inside the stages) run the model cut into stages
 * (pipeline.c), B / dp samples per pipeline in micro-batches of mbs. This
 * file feeds the stages their slice of the batch and answers the trainer;
 * pipeline.c runs the stages. */
#include "runtime/engine-impl.h"
#include "runtime/pipeline-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    wf_engine_args a;
    const wf_train_config *c;
    wf_pipe *pipe;
    wf_engine_feed f;
    int64_t m, mbs;
    int64_t steps;
    char comm_note[192];
    char init_note[160];
} pipe_engine;

/* Setup of a pipelined run: the plan's checks, the stages (wf_pipe_create),
 * the data loader and this pipeline's batch buffers. comm auto takes ddp
 * (the simulator's choice is made for whole replicas, not for a stage's
 * data-parallel group). */
static wf_status setup(pipe_engine *e)
{
    const wf_train_config *c = e->c;
    const wf_plan *plan = &e->a.plan;
    wf_status st = wf_pipe_check(plan, &e->a.model, e->a.nranks, c->batch);
    if (st != WF_OK)
        return st;
    e->f.b = c->batch / plan->dp;
    e->mbs = plan->mbs;
    e->m = e->f.b / e->mbs;
    wf_comm_sched cs = plan->comm;
    if (c->comm && (st = wf_comm_parse(c->comm, &cs)) != WF_OK)
        return st;
    if (cs.kind == WF_COMM_AUTO) {
        cs.kind = WF_COMM_DDP;
        cs.threshold_bytes = 0;
        snprintf(e->comm_note, sizeof e->comm_note, "auto with pp=%d: ddp (each stage's data-parallel group)",
                 plan->pp);
    }
    if (e->a.model.family == WF_FAMILY_ONNX && !c->init_random)
        return wf_errorf(WF_INVAL, "pp=%d: pipeline stages start from the seed (--init random), not from the "
                                   "weights of an .onnx file", plan->pp);
    wf_pipe_config pc = {e->a.comm, e->a.rank, e->a.nranks, &e->a.model, plan, c->cluster, c->batch,
                         {c->reference, c->seed}, &c->optim, cs, plan->overlap};
    if ((st = wf_pipe_create(&pc, &e->pipe)) != WF_OK)
        return st;
    /* The loader's input as the replica engine picks it (feed_inputs.c). */
    wf_graph g;
    wf_feed_graph fg;
    memset(&fg, 0, sizeof fg);
    st = wf_model_build(&e->a.model, e->mbs, &g);
    if (st == WF_OK)
        st = wf_feed_graph_plan(&e->a.model, &g, &fg);
    if (st == WF_OK)
        st = wf_data_layout_from_input(&g, fg.in_t, &e->f.layout);
    wf_feed_graph_free(&fg);
    wf_graph_free(&g);
    if (st != WF_OK)
        return st;
    snprintf(e->init_note, sizeof e->init_note, "random (seed %llu)", (unsigned long long)c->seed);
    if ((st = wf_data_open(c->data, &e->f.layout, c->seed, &e->f.data)) != WF_OK)
        return st;
    e->f.in_numel = wf_data_layout_input_numel(&e->f.layout);
    e->f.lab_numel = wf_data_layout_label_numel(&e->f.layout);
    return wf_engine_feed_alloc(&e->f);
}

static void destroy(void *eng)
{
    pipe_engine *e = eng;
    if (!e)
        return;
    wf_pipe_free(e->pipe);
    wf_engine_feed_free(&e->f);
    free(e);
}

static wf_status create(const wf_engine_args *a, void **out)
{
    *out = NULL;
    pipe_engine *e = calloc(1, sizeof *e);
    if (!e)
        return wf_errorf(WF_NOMEM, "out of memory creating the trainer");
    e->a = *a;
    e->c = a->c;
    wf_status st = setup(e);
    if (st != WF_OK) {
        destroy(e);
        return st;
    }
    *out = e;
    return WF_OK;
}

/* One pipelined step: this pipeline's slice of the global batch through the
 * stages (wf_pipe_step); every rank reports the same loss and status. */
static wf_status step(void *eng, wf_train_stats *s)
{
    pipe_engine *e = eng;
    const int64_t batch = e->c->batch;
    memset(s, 0, sizeof *s);
    double t0 = wf_now_s();
    int dpi, dp;
    wf_pipe_dp_of(e->pipe, &dpi, &dp);
    wf_status st = wf_engine_feed_next(&e->f, batch, dpi, dp);
    int64_t first, count;
    wf_data_slice(batch, dpi, dp, &first, &count);
    double loss = 0, comm_s = 0, norm = 0;
    wf_status worst = WF_OK;
    wf_status ps = wf_pipe_step(e->pipe, e->f.inbuf, e->f.labbuf, first, e->steps, &loss, &worst, &comm_s, &norm);
    if (ps != WF_OK)
        return ps;
    if (worst != WF_OK || st != WF_OK)
        return wf_mpi_agree_on(e->a.comm, e->a.rank, e->a.nranks, st != WF_OK ? st : worst);
    e->steps++;
    s->step = e->steps;
    s->loss = loss;
    s->time_s = wf_now_s() - t0;
    s->comm_s = comm_s;
    s->compute_s = s->time_s - s->comm_s;
    s->grad_norm = norm;
    s->samples = batch;
    s->tokens = e->f.layout.input_dtype == WF_DTYPE_INT32 ? batch * e->f.in_numel : 0;
    return WF_OK;
}

static wf_status sync(void *eng)
{
    pipe_engine *e = eng;
    return wf_mpi_agree_on(e->a.comm, e->a.rank, e->a.nranks, wf_pipe_sync(e->pipe));
}

static int64_t steps_done(const void *eng) { return ((const pipe_engine *)eng)->steps; }

static wf_exec *exec_of(const void *eng) { return wf_pipe_exec(((const pipe_engine *)eng)->pipe, 0); }

static void info(const void *eng, wf_train_info *out)
{
    const pipe_engine *e = eng;
    memset(out, 0, sizeof *out);
    out->rank = e->a.rank;
    out->nranks = e->a.nranks;
    out->local_batch = e->f.b;
    out->micro_batches = e->m;
    out->micro_batch = e->mbs;
    out->tokens_per_sample = e->f.layout.input_dtype == WF_DTYPE_INT32 ? e->f.in_numel : 0;
    wf_pipe_info(e->pipe, out);
    snprintf(out->comm_note, sizeof out->comm_note, "%s", e->comm_note);
    snprintf(out->plan_note, sizeof out->plan_note, "%s", e->a.plan_note);
    snprintf(out->model, sizeof out->model, "%s", e->a.model.name);
    snprintf(out->data, sizeof out->data, "%s", wf_data_describe(e->f.data));
    snprintf(out->init, sizeof out->init, "%s", e->init_note);
}

static wf_status gather_params(void *eng, float *out, int64_t cap, int64_t *n)
{
    return wf_pipe_gather_params(((pipe_engine *)eng)->pipe, out, cap, n);
}

static uint64_t checksum(const void *eng) { return wf_pipe_checksum(((const pipe_engine *)eng)->pipe); }

static int trace(const void *eng, wf_pipe_op *ops, int cap)
{
    return wf_pipe_trace(((const pipe_engine *)eng)->pipe, ops, cap);
}

static void ckpt_view(void *eng, wf_engine_ckpt *v)
{
    pipe_engine *e = eng;
    char plan[96];
    wf_engine_plan_text(&e->a.plan, plan, sizeof plan);
    if (e->a.plan.interlace) /* the interlaced pipeline's tensors are not a plain pipeline's */
        snprintf(plan + strlen(plan), sizeof plan - strlen(plan), ",interlace=1");
    *v = (wf_engine_ckpt){e->f.data, &e->steps, e->m, e->a.model.name, ""};
    snprintf(v->run, sizeof v->run, "plan=%s\n", plan);
}

static wf_status ckpt_tensors(void *eng, wf_ckpt_tensor **out, char **names, int *n)
{
    return wf_pipe_ckpt_tensors(((pipe_engine *)eng)->pipe, out, names, n);
}

static wf_status ckpt_gather(void *eng) { return wf_pipe_zero_gather(((pipe_engine *)eng)->pipe); }

static void ckpt_scatter(void *eng) { wf_pipe_zero_scatter(((pipe_engine *)eng)->pipe); }

static void ckpt_release(void *eng) { wf_pipe_zero_release(((pipe_engine *)eng)->pipe); }

const wf_engine_iface wf_engine_pipeline = {
    "pipeline",   create,        destroy,  step,  sync,      steps_done,   exec_of,     info,
    gather_params, checksum,     trace,    ckpt_view, ckpt_tensors, ckpt_gather, ckpt_scatter, ckpt_release,
};
