/* Pipeline parallelism over MPI: the model cut into stages, each stage's
 * executor on its own ranks, micro-batches played in the order of
 * weft/sched.h's wf_pipe_order (the order the simulator plays), activations
 * and their gradients sent point to point between neighbouring stages.
 *
 * The cut. pp x vpp virtual stages; virtual stage k runs on stage k mod pp
 * as its chunk k / pp (Megatron's interleaving; vpp = 1: stage k is virtual
 * stage k). Transformers: virtual stage k holds layers [k L/(pp vpp),
 * (k+1) L/(pp vpp)) (uneven stages, stages=: the listed counts, vpp 1),
 * the first also the embedding, the last also the head
 * and the loss (src/sim/profile.c's instances, src/layout/lower.c's cut).
 * Other models: the estimate's cut (wf_cost_plan_cut: wf_estimate_plan's own
 * split of the plan under the runtime's profile, sw=weft, at the
 * micro-batch on the cost model's cluster), no interleaving.
 *
 * A stage's graph holds the forward ops of its range. The activations it
 * reads from the previous virtual stage become float inputs (received, and
 * differentiated: their gradients go back); the activations the next one
 * reads are its outputs (sent; its backward is seeded with the gradients
 * received for them). The executor's stage mode (wf_exec_create_stage) does
 * both. A parameter read by several virtual stages (GPT's tied word
 * embedding: the embedding and the head) has a copy on each; their
 * gradients are summed over the holders after the data-parallel reduction
 * (Megatron's embedding group), so the copies stay equal.
 *
 * Ranks, stage-major as Megatron-LM orders them with tp = 1: rank = stage x
 * dp + d for data-parallel index d. Stage s's data-parallel group is ranks
 * [s dp, (s+1) dp), reduced by dist.c's engine on its own communicator
 * under any of its schedules (wfbp, ddp, dear, horovod, mgwfbp,
 * bytescheduler), with zero=1, 2 or 3 sharding the optimizer state (and
 * zero=3 the parameters, gathered per op by the engine's hooks in every
 * pass) over that group;
 * pipeline d is ranks {d, dp + d, ...}, which exchange
 * activations with MPI_Isend / MPI_Irecv on a pipeline communicator (tag:
 * micro-batch, receiving virtual stage, direction, tensor).
 *
 * Tensor parallelism inside the stages (tp > 1, sp): rank = stage x (dp x
 * tp) + d x tp + t, tp innermost. The stage's tp ranks get from spmd.c
 * (wf_spmd_create_tp) the local graph of the whole model under the plan's
 * Megatron layouts, its collectives as carrier ops; that graph is cut as the
 * model is, each chunk's executor calls back into spmd.c with the offset of
 * its first op, and its parameters are shards of the single process's.
 * Activations go between the same tp index of neighbouring stages (whole
 * without sp, the sequence shard with it); the norm weights each replicated
 * float 1 / tp; tp index 0 of the last stage reports the loss.
 *
 * Memory: each chunk's executor keeps one activation slot per micro-batch
 * in flight (wf_exec_set_slots): what the micro-batch's backward reads of its
 * forward (saved tensors and kernel state, its outputs until sent, its input
 * gradients until sent) and its leaf block of inputs and seeds; forward
 * temporaries and backward scratch share one arena. A forward takes a free
 * slot, its backward releases it. The slots are the peak number in flight of
 * the order (1F1B: min(pp - stage, m) on stage `stage`; GPipe: m), as a
 * framework keeps the saved activations of each in-flight micro-batch
 * (docs/runtime.md, "Pipeline stages").
 *
 * A step: play the order; then every engine waits for its reductions (the
 * all-reduces, or the reduce-scatters of dear and ZeRO-2/3: dear's barrier
 * B0 at the end of the step), tied copies are summed (gathered from the
 * shards where they are sharded), the squares of every gradient (each
 * float weighted: a tied parameter once, a tp-replicated float 1 / tp;
 * from the shards summed over the data-parallel group) are summed over the
 * pipeline's stages in stage order, and every chunk updates with the
 * clipping factor of that norm (ZeRO: each rank its slice, then under
 * zero=1/2 the parameters all-gathered; dear: the update deferred into the chunk's next
 * forward, group by group before the first op reading it). The losses come
 * from the last stage; all ranks gather them with the statuses, so every
 * rank reports the same loss and fails together.
 *
 * The interlaced pipeline (interlace=1, docs/runtime.md "The interlaced
 * pipeline"): each rank runs three chunks, its stage's layers (ch[0], the
 * layers split evenly, from the model's or the tp local graph), and the
 * embedding (ch[1]) and the head with the loss (ch[2]) cut from a second
 * local graph, the model under Megatron's vocabulary-parallel layouts at tp
 * x pp on the pipeline's model-parallel communicator; the tasks in the order
 * of wf_plan_interlace_order (play_interlace). The tied table's two copies
 * on a rank are summed after the data-parallel reduction.
 *
 * Vocabulary padding: a vocabulary that the ranks splitting it (tp; tp x pp
 * interlaced) do not divide is padded as Megatron pads it (layout.h's
 * wf_megatron_pad_model), and the padding's logits are masked out of the
 * loss (spmd.c's vocab_total, executor.c). */
#include "runtime/pipeline-impl.h"
#include "runtime/dist-impl.h"
#include "runtime/engine-impl.h"
#include "runtime/spmd-impl.h"

#include "weft/cluster.h"
#include "weft/layout.h"
#include "weft/cost_records.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BOUNDARY 8
#define MAX_FEED 64 /* a stage's inputs besides data and labels (constants, recycled, ...) */
#define MAX_REC 4   /* recycled inputs */

typedef struct {
    int vs;                  /* virtual stage (interlaced: pp the embedding's chunk, pp + 1 the head's) */
    wf_spmd *sp;             /* the tensor-parallel graph its ops come from (NULL: the model's) */
    wf_exec *e;
    wf_optim *o;             /* NULL under ZeRO: the engine steps its shard */
    wf_dist *d;
    float *norm_w;           /* [gradient block floats] each float's weight in the clipping norm */
    float *zimg;             /* ZeRO: a checkpoint's full images (zero=3's parameters, the optimizer state) */
    int nin, nout;           /* boundary tensors received / sent */
    int in_t[MAX_BOUNDARY];  /* stage tensors of the received activations */
    int64_t in_n[MAX_BOUNDARY], out_n[MAX_BOUNDARY];
    int data_t, label_t;     /* the data input (first virtual stage) and labels (last), -1 */
    int nslots;
    int rslot;               /* recycling: the slot of the forwards without gradient (its own), else -1 */
    int *slot_of;            /* [m] slot of each micro-batch in flight, -1 */
    unsigned char *busy;     /* [nslots] */
    MPI_Request *sreq;       /* [nslots * MAX_BOUNDARY] sends out of each slot */
    int first_bwd, last_bwd; /* positions in the order of this chunk's first and last backward */
    float *pbuf;             /* replayed stages (play_pieces): per slot, the micro-batch's K pieces of its
                              * inputs, input gradients, outputs and output gradients */
    int64_t pslot;           /* floats per slot in pbuf */
    int *owner;              /* [nparams] 1 when this copy counts in the norm and the gathered model */
    double *share;           /* [nparams] its share of the norm (1 / the tp ranks holding the same shard) */
    int64_t *full_off;       /* [nparams] offset in the packed whole-model vector */
    int nfeed;               /* the model's other inputs read here (feed_inputs.c's rules): */
    int feed_t[MAX_FEED];    /* their stage tensors */
    int feed_i[MAX_FEED];    /* their index in the pipeline's fg.x */
    int nsrc;                /* recycled inputs whose source this chunk makes: */
    int src_t[MAX_REC];      /* the source's stage tensor */
    int src_r[MAX_REC];      /* the recycled input's index among the pipeline's (rec_i) */
} chunk;

typedef struct {
    int chunk, param;        /* this rank's copy: chunk index and parameter index there */
    MPI_Comm comm;           /* the holders in this pipeline */
} shared;

struct wf_pipe {
    MPI_Comm comm, dpcomm, ppcomm;
    MPI_Comm tpcomm, mpcomm; /* tp > 1: the stage's tp ranks; every stage's of this data-parallel index */
    wf_spmd *tps;            /* tp > 1: the local graph under Megatron's layouts and its collectives */
    wf_spmd *vps;            /* interlaced: the embedding and the head, vocabulary-parallel over tp x pp (mpcomm) */
    int interlace;           /* 1: ch[0] the stage's layers, ch[1] the embedding, ch[2] the head */
    wf_plan_task *itask;     /* interlaced: this rank's order of tasks (wf_plan_interlace_order) */
    int nitask;
    int ntie, tie[4][2];     /* interlaced: parameters the embedding and the head both hold (index in each) */
    int nend_out;            /* interlaced, while the embedding's chunk is made: its outputs (> 0: */
    int end_out[MAX_BOUNDARY]; /* the vocabulary-parallel graph's tensors, whole_outputs) */
    int emap[MAX_BOUNDARY];  /* interlaced: the embedding's output that stage 0's layers' input k reads */
    int epart[MAX_BOUNDARY]; /* 1: that input is a partial sum over tp (tp rank 0 takes the whole, the others 0) */
    int done_h, done_eb;     /* interlaced: heads and embedding backwards run in this step */
    int64_t vocab_valid;     /* the model's own vocabulary when it runs padded as Megatron pads it, else 0 */
    int tp, tpi;
    int zero;                /* the ZeRO stage each stage's data-parallel group shards */
    int rank, nranks, stage, pp, vpp, nvs, dp, dpi, m;
    int64_t mbs, in_numel, lab_numel, full_params;
    int replay;              /* recompute=full: each piece's forward replayed just before its backward */
    int pieces;              /* coshard=K: a micro-batch's rows run as K pieces in turn (1: whole) */
    int64_t rows;            /* the rows of one piece (mbs / pieces): the stages' graphs' batch */
    wf_pipe_kind kind;
    int nchunks;
    chunk *ch;
    int nops;
    wf_pipe_op *ops;         /* the order of this stage (wf_pipe_order) */
    int nplayed;
    wf_pipe_op *played;      /* what the last step executed, in execution order */
    int nshared;
    shared *sh;
    int in_int;              /* the data input holds int32 */
    char desc[96];
    double grad_norm;
    /* A model's inputs besides data and labels, and recycling (pipe_inputs_*) */
    wf_feed_graph fg;        /* the whole graph's inputs (fg.n 0: data and labels alone) */
    uint64_t seed;
    int recycle, nf1b;       /* recycle=N forwards without gradient per micro-batch; NF1B's order */
    int nrec;
    int rec_i[MAX_REC];      /* the recycled inputs' index in fg.x */
    int rec_from[MAX_REC];   /* the stage (ppcomm rank) making its source, -1: zeros */
    int64_t rec_off[MAX_REC];/* its [m][mbs * numel] block in rbuf and sbuf */
    float *rbuf, *sbuf;      /* first stage: the recycled values; the sources' stages: their sends */
    MPI_Request *rreq;       /* [m * MAX_REC] the sources' sends */
    unsigned char *rpend;    /* [m] first stage: the last recycling forward's values still to receive */
};

static int mpi_on(const wf_pipe *p)
{
    return p->comm != MPI_COMM_NULL;
}

static wf_status mpi_err(int rc, const char *what)
{
    return wf_errorf(WF_MPI, "%s failed (MPI error %d)", what, rc);
}

/* ---- checks and the cut --------------------------------------------------------------------- */

wf_status wf_pipe_check(const wf_plan *p, const wf_model_config *m, int nranks, int64_t batch)
{
    /* What the pipeline engine runs: the runtime's table (runs_plan.c). */
    wf_status st = wf_runtime_engine_check(WF_ENGINE_PIPELINE, p, m);
    if (st != WF_OK)
        return st;
    /* Co-shard's pieces (play_pieces). */
    if (p->coshard > 1 && p->mbs % p->coshard != 0)
        return wf_errorf(WF_INVAL, "coshard=%d does not divide the micro-batch mbs=%d (each piece takes mbs/%d rows)",
                         p->coshard, p->mbs, p->coshard);
    if (p->coshard > 1 && wf_model_is_moe(m))
        return wf_errorf(WF_INVAL, "coshard=%d: model '%s' routes tokens to experts with a capacity per batch, "
                                   "which pieces of a micro-batch change (coshard=1)", p->coshard, m->name);
    int tp = p->tp > 1 ? p->tp : 1;
    if (tp > 1) {
        /* What Megatron's layout splits tp ways (as spmd.c names it); a
         * vocabulary tp does not divide runs padded as Megatron pads it. */
        const char *what[] = {"heads", "hidden size", "MLP width"};
        int64_t dims[] = {m->heads, m->hidden, m->ffn};
        for (int k = 0; k < 3; k++)
            if (dims[k] > 0 && dims[k] % tp != 0)
                return wf_errorf(WF_INVAL, "tp=%d does not divide the %s of %s (%lld)", tp, what[k], m->name,
                                 (long long)dims[k]);
        if (p->sp && m->seq % tp != 0)
            return wf_errorf(WF_INVAL, "sp=1 with tp=%d does not divide the sequence of %s (%lld)", tp, m->name,
                             (long long)m->seq);
    }
    /* The interlaced pipeline (docs/planner.md): one chunk of layers per
     * stage in 1F1B; what else it needs of the model is runs_plan.c's rows. */
    if (p->interlace && (p->vpp > 1 || p->stage_n > 0 || p->pipe != WF_PIPE_1F1B))
        return wf_errorf(WF_INVAL, "interlace=1 runs one chunk of even stages in 1F1B (vpp=%d, stages=%s, pipe=%s)",
                         p->vpp, p->stage_n > 0 ? "given" : "none", wf_sched_pipe_name(p->pipe));
    if ((int64_t)p->pp * tp * p->dp != nranks)
        return wf_errorf(WF_INVAL, "plan pp=%d x tp=%d x dp=%d needs %lld ranks but the job has %d (run under "
                         "mpiexec -n %lld)", p->pp, tp, p->dp, (long long)p->pp * tp * p->dp, nranks,
                         (long long)p->pp * tp * p->dp);
    if (batch < 1 || batch % p->dp != 0)
        return wf_errorf(WF_INVAL, "batch %lld is not divisible by dp=%d", (long long)batch, p->dp);
    if (p->mbs < 1 || (batch / p->dp) % p->mbs != 0)
        return wf_errorf(WF_INVAL, "plan mbs=%d does not divide the %lld samples per pipeline (batch %lld / dp=%d)",
                         p->mbs, (long long)(batch / p->dp), (long long)batch, p->dp);
    int64_t mb = batch / p->dp / p->mbs;
    int transformer = wf_model_is_transformer(m);
    if (p->vpp > 1) {
        if (!transformer)
            return wf_errorf(WF_INVAL, "vpp=%d: interleaving splits repeated layers; model '%s' has none", p->vpp,
                             m->name);
        if (mb % p->pp != 0)
            return wf_errorf(WF_INVAL, "vpp=%d: interleaving needs the %lld micro-batches a multiple of pp=%d",
                             p->vpp, (long long)mb, p->pp);
    }
    int64_t nvs = (int64_t)p->pp * p->vpp;
    if (p->stage_n > 0) {
        /* Uneven stages (stages=): one chunk per stage, the layers all placed. */
        if (!transformer)
            return wf_errorf(WF_INVAL, "stages=: model '%s' is not a transformer (its stages are cut by time)",
                             m->name);
        int64_t sum = 0;
        for (int k = 0; k < p->stage_n; k++)
            sum += p->stage_layers[k];
        if (p->stage_n != p->pp || p->vpp != 1 || sum != m->layers)
            return wf_errorf(WF_INVAL, "stages=: %d stages of %lld layers in all, for pp=%d, vpp=%d and the %lld "
                             "layers of %s", p->stage_n, (long long)sum, p->pp, p->vpp, (long long)m->layers, m->name);
    } else if (transformer && (m->layers < nvs || m->layers % nvs != 0))
        return wf_errorf(WF_INVAL, "pp=%d x vpp=%d = %lld stages do not divide the %lld layers of %s", p->pp, p->vpp,
                         (long long)nvs, (long long)m->layers, m->name);
    if (mb * nvs * 2 * MAX_BOUNDARY > 32767)
        return wf_errorf(WF_INVAL, "%lld micro-batches x %lld stages: too many messages to tag (at most %lld)",
                         (long long)mb, (long long)nvs, (long long)(32767 / (2 * MAX_BOUNDARY)));
    return WF_OK;
}

/* A model's inputs besides data and labels, and recycling (defined below). */
static wf_status pipe_inputs_plan(wf_pipe *p, const wf_pipe_config *c, const wf_graph *g, const int *first,
                                  int *data_t);
static wf_status chunk_inputs(wf_pipe *p, chunk *ch, const wf_graph *g, const int *map, int *keep, int *nkeep);
static wf_status chunk_constants(const wf_pipe_config *c, chunk *ch);

/* first[k]: the first forward op of virtual stage k, first[nvs] = nfwd. */
static wf_status cut(const wf_graph *g, const wf_pipe_config *c, int nvs, int *first)
{
    const wf_model_config *m = c->model;
    if (wf_model_is_transformer(m)) {
        int64_t per = m->layers / nvs;
        first[0] = 0;
        for (int k = 1; k < nvs; k++) {
            /* uneven stages (stages=): after the layers of the stages before */
            int64_t l0 = c->plan->stage_n > 0 ? wf_plan_stage_first_layer(c->plan, m->layers, k) : k * per;
            first[k] = -1;
            for (int i = 0; i < g->nfwd && first[k] < 0; i++)
                if (g->ops[i].block >= 0 && g->ops[i].layer == (int)l0)
                    first[k] = i;
            if (first[k] < 0)
                return wf_errorf(WF_INVAL, "model '%s' has no layer %lld to start stage %d", m->name,
                                 (long long)l0, k);
        }
        first[nvs] = g->nfwd;
        return WF_OK;
    }
    wf_cluster cl;
    wf_status st = wf_cluster_of_job(c->cluster, c->nranks, &cl);
    if (st != WF_OK)
        return st;
    /* The estimate's cut of this plan under the runtime's own profile. */
    wf_plan q = *c->plan;
    q.sw = WF_SW_WEFT;
    return wf_cost_plan_cut(m, &cl, &q, nvs, g->nfwd, first);
}

/* The activations virtual stage k reads from earlier ones (tensor indices of
 * g, ascending), all produced by virtual stage k-1. */
static wf_status boundary(const wf_graph *g, const int *first, int k, int *bt, int *nb)
{
    *nb = 0;
    if (k == 0)
        return WF_OK;
    for (int t = 0; t < g->ntensors; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (x->producer < 0 || x->producer >= first[k])
            continue;
        int read = 0;
        for (int i = first[k]; i < first[k + 1] && !read; i++)
            for (int j = 0; j < g->ops[i].nin; j++)
                read |= g->ops[i].in[j] == t;
        if (!read)
            continue;
        if (x->producer < first[k - 1])
            return wf_errorf(WF_INVAL, "pipeline cut: '%s' is read by stage %d but made before stage %d", x->name, k,
                             k - 1);
        if (x->dtype != WF_DTYPE_FP32)
            return wf_errorf(WF_INVAL, "pipeline cut: '%s' crosses stages %d-%d but is not fp32", x->name, k - 1, k);
        if (*nb >= MAX_BOUNDARY)
            return wf_errorf(WF_INVAL, "pipeline cut: more than %d tensors cross stages %d-%d", MAX_BOUNDARY, k - 1,
                             k);
        bt[(*nb)++] = t;
    }
    return WF_OK;
}

/* The graph of ops [lo, hi) of g; map[t] = the stage's tensor of g's t. */
static wf_status build_stage(const wf_graph *g, int k, int lo, int hi, const int *bin, int nbin, wf_graph *out,
                             int *map)
{
    char name[WF_NAME_LEN];
    snprintf(name, sizeof name, "%.40s/stage%d", g->name, k);
    wf_graph_init(out, name);
    for (int t = 0; t < g->ntensors; t++)
        map[t] = -1;
    for (int b = 0; b < nbin; b++) {
        const wf_tensor *x = &g->tensors[bin[b]];
        map[bin[b]] = wf_graph_add_tensor(out, x->name, WF_DTYPE_FP32, WF_ROLE_INPUT, x->ndim, x->shape);
    }
    for (int i = lo; i < hi && out->status == WF_OK; i++) {
        const wf_op *o = &g->ops[i];
        int in[WF_MAX_INPUTS];
        for (int j = 0; j < o->nin; j++) {
            int t = o->in[j];
            if (map[t] < 0) {
                const wf_tensor *x = &g->tensors[t];
                if (x->producer >= 0)
                    return wf_errorf(WF_INTERNAL, "stage %d: '%s' is neither a leaf nor received", k, x->name);
                map[t] = wf_graph_add_tensor(out, x->name, x->dtype, x->role, x->ndim, x->shape);
            }
            in[j] = map[t];
        }
        wf_graph_set_block(out, o->block, o->layer);
        wf_graph_set_tp(out, o->tp);
        int oi = wf_graph_add_op(out, o->kind, o->name, in, o->nin, &o->attr);
        for (int j = 0; oi >= 0 && j < o->nout; j++) {
            int s = wf_graph_op_output(out, oi, j);
            map[o->out[j]] = s;
            if (s >= 0)
                memcpy(out->tensors[s].name, g->tensors[o->out[j]].name, WF_NAME_LEN);
        }
    }
    if (out->status != WF_OK)
        return wf_error_prefix(out->status, "building stage %d of %s", k, g->name);
    return WF_OK;
}

/* ---- creation -------------------------------------------------------------------------------- */

static wf_status split_comms(wf_pipe *p)
{
    if (!mpi_on(p)) {
        p->dpcomm = p->ppcomm = MPI_COMM_NULL;
        return WF_OK;
    }
    /* Each axis's group (plan.h's generator): coloured by its first rank,
     * ordered by the coordinate on the axis. The model-parallel group (tp x
     * pp, the ranks of one data-parallel index) spans two axes that are not
     * adjacent in the generator's order (dp lies between them), so it is no
     * join: its first rank is the tp group's first rank within the pp
     * group's first rank, and its members are ordered stage-major, tp-minor
     * (the order of the vocabulary-parallel shards at tp x pp). */
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(p->tp, 1, p->dp, p->pp, ax);
    const int64_t r = p->rank;
    int rc = MPI_Comm_split(p->comm, (int)wf_rank_group_first(ax[WF_AXIS_DP], r), p->dpi, &p->dpcomm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split(p->comm, (int)wf_rank_group_first(ax[WF_AXIS_PP], r), p->stage, &p->ppcomm);
    if (rc == MPI_SUCCESS && p->tp > 1)
        rc = MPI_Comm_split(p->comm, (int)wf_rank_group_first(ax[WF_AXIS_TP], r), p->tpi, &p->tpcomm);
    if (rc == MPI_SUCCESS && (p->tp > 1 || p->interlace))
        rc = MPI_Comm_split(p->comm, (int)wf_rank_group_first(ax[WF_AXIS_TP], wf_rank_group_first(ax[WF_AXIS_PP], r)),
                            (int)(wf_rank_coord(ax[WF_AXIS_PP], r) * ax[WF_AXIS_TP].size +
                                  wf_rank_coord(ax[WF_AXIS_TP], r)),
                            &p->mpcomm);
    if (rc != MPI_SUCCESS)
        return mpi_err(rc, "MPI_Comm_split of the pipeline groups");
    MPI_Comm_set_errhandler(p->dpcomm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(p->ppcomm, MPI_ERRORS_RETURN);
    if (p->tp > 1)
        MPI_Comm_set_errhandler(p->tpcomm, MPI_ERRORS_RETURN);
    if (p->mpcomm != MPI_COMM_NULL)
        MPI_Comm_set_errhandler(p->mpcomm, MPI_ERRORS_RETURN);
    return WF_OK;
}

/* The peak of chunk ci's micro-batches in flight in this rank's order, and
 * the positions of its first and last backward. Interlaced: the layers' F
 * and B tasks; the embedding keeps every micro-batch from its EF (which all
 * open the step) to its EB; the head runs each micro-batch whole. */
static int chunk_slots(const wf_pipe *p, int ci, int *first_bwd, int *last_bwd)
{
    int cur = 0, peak = 0;
    *first_bwd = *last_bwd = -1;
    if (p->interlace) {
        if (ci > 0)
            return ci == 1 ? p->m : 1;
        for (int i = 0; i < p->nitask; i++) {
            int k = p->itask[i].kind;
            if (k != WF_PTASK_FWD && k != WF_PTASK_BWD)
                continue;
            cur += k == WF_PTASK_BWD ? -1 : 1;
            peak = cur > peak ? cur : peak;
            if (k == WF_PTASK_BWD) {
                if (*first_bwd < 0)
                    *first_bwd = i;
                *last_bwd = i;
            }
        }
        return peak > 0 ? peak : 1;
    }
    for (int i = 0; i < p->nops; i++) {
        if (p->ops[i].chunk != ci)
            continue;
        cur += p->ops[i].bwd ? -1 : 1;
        peak = cur > peak ? cur : peak;
        if (p->ops[i].bwd) {
            if (*first_bwd < 0)
                *first_bwd = i;
            *last_bwd = i;
        }
    }
    return peak > 0 ? peak : 1;
}

/* Chunk ci of this rank: segment seg of the nseg segments g is cut into at
 * first[] (a virtual stage; interlaced: the embedding, a stage's layers or
 * the head), its ops from sp's tensor-parallel local graph g (NULL: g is the
 * model's): its graph, executor, optimizer, engine and slots. */
static wf_status make_chunk(wf_pipe *p, const wf_pipe_config *c, const wf_graph *g, const int *first, int nseg,
                            int seg, wf_spmd *sp, const int64_t *pidx, const int64_t *poff, int data_t, int ci)
{
    chunk *ch = &p->ch[ci];
    ch->sp = sp;
    int bin[MAX_BOUNDARY], bout[MAX_BOUNDARY], nbin = 0, nbout = 0;
    wf_status st = boundary(g, first, seg, bin, &nbin);
    if (st == WF_OK && seg + 1 < nseg)
        st = boundary(g, first, seg + 1, bout, &nbout);
    if (st != WF_OK)
        return st;
    if (st == WF_OK && ci == 1 && p->nend_out > 0) { /* interlaced: the embedding's whole outputs */
        nbout = p->nend_out;
        memcpy(bout, p->end_out, (size_t)nbout * sizeof *bout);
    }
    wf_graph sg;
    int *map = malloc((size_t)g->ntensors * sizeof *map);
    int64_t *init = NULL;
    if (!map)
        return wf_errorf(WF_NOMEM, "out of memory building a stage");
    st = build_stage(g, seg, first[seg], first[seg + 1], bin, nbin, &sg, map);
    int outs[MAX_BOUNDARY], wrt[MAX_BOUNDARY];
    if (st == WF_OK) {
        for (int b = 0; b < nbout; b++) {
            outs[b] = map[bout[b]];
            ch->out_n[b] = wf_tensor_numel(&g->tensors[bout[b]]);
        }
        for (int b = 0; b < nbin; b++) {
            wrt[b] = ch->in_t[b] = map[bin[b]];
            ch->in_n[b] = wf_tensor_numel(&g->tensors[bin[b]]);
        }
        ch->nin = nbin;
        ch->nout = nbout;
        init = malloc((size_t)(sg.ntensors + 1) * sizeof *init);
        if (!init)
            st = wf_errorf(WF_NOMEM, "out of memory building a stage");
    }
    if (st == WF_OK) {
        for (int t = 0; t < sg.ntensors; t++)
            init[t] = -1;
        for (int t = 0; t < g->ntensors; t++)
            if (map[t] >= 0 && g->tensors[t].role == WF_ROLE_PARAM)
                init[map[t]] = pidx[t];
        int transformer = 0;
        for (int i = 0; i < g->nfwd; i++)
            transformer |= g->ops[i].kind == WF_OP_ATTENTION;
        /* Under tp the stage's parameters are shards: their values come from spmd.c. */
        wf_exec_stage s = {outs, nbout, wrt, nbin, sp ? NULL : init, transformer};
        int keep[MAX_REC], nkeep = 0;
        st = chunk_inputs(p, ch, g, map, keep, &nkeep);
        if (st == WF_OK)
            st = wf_exec_create_stage_keeping(&sg, &c->exec, &s, keep, nkeep, &ch->e);
    }
    if (st == WF_OK && sp) {
        wf_exec_spmd x;
        wf_spmd_stage_callbacks(sp, first[seg], &x);
        wf_exec_set_spmd(ch->e, &x);
        st = wf_spmd_init_params(sp, ch->e, &c->exec);
    }
    ch->data_t = ch->label_t = -1;
    if (st == WF_OK) {
        if (seg == 0)
            ch->data_t = map[data_t];
        const wf_graph *eg = wf_exec_graph(ch->e);
        for (int t = 0; t < eg->ntensors; t++)
            if (eg->tensors[t].role == WF_ROLE_LABEL)
                ch->label_t = t;
        int np = wf_exec_nparams(ch->e);
        ch->owner = calloc((size_t)(np + 1), sizeof *ch->owner);
        ch->full_off = calloc((size_t)(np + 1), sizeof *ch->full_off);
        ch->share = calloc((size_t)(np + 1), sizeof *ch->share);
        if (!ch->owner || !ch->full_off || !ch->share)
            st = wf_errorf(WF_NOMEM, "out of memory building a stage");
        for (int i = 0; st == WF_OK && i < np; i++) {
            const wf_exec_param *q = wf_exec_param_at(ch->e, i);
            /* The full tensor of this parameter, and the first virtual stage reading it. */
            int ft = -1;
            for (int t = 0; t < g->ntensors && ft < 0; t++)
                if (map[t] == q->tensor)
                    ft = t;
            int firstvs = -1;
            for (int k = 0; k < nseg && firstvs < 0; k++)
                for (int o = first[k]; o < first[k + 1] && firstvs < 0; o++)
                    for (int j = 0; j < g->ops[o].nin; j++)
                        if (g->ops[o].in[j] == ft)
                            firstvs = k;
            ch->owner[i] = firstvs == seg;
            ch->full_off[i] = poff[ft];
            ch->share[i] = sp ? wf_spmd_param_share(sp, q->name) : 1.0;
        }
    }
    if (st == WF_OK && seg == 0 && ch->data_t < 0)
        st = wf_errorf(WF_INTERNAL, "stage 0 does not read the data input");
    if (st == WF_OK && seg == nseg - 1 && ch->label_t < 0)
        st = wf_errorf(WF_INTERNAL, "the last stage does not read the labels");
    wf_graph_free(&sg);
    free(map);
    free(init);
    if (st != WF_OK)
        return st;
    /* ZeRO: the engine keeps the optimizer over this rank's shard of the stage's data-parallel group. */
    if (!c->plan->zero && (st = wf_optim_create(c->optim, ch->e, &ch->o)) != WF_OK)
        return st;
    wf_axis_ranks ax[WF_AXIS_COUNT]; /* the stage's data-parallel group: dp ranks tp apart */
    wf_rank_axes_dense(p->tp, 1, p->dp, p->pp, ax);
    wf_dist_config dc = {p->dpcomm, p->dpi, p->dp, c->sched, c->overlap, c->cluster, c->plan->zero, c->optim,
                         (int64_t)p->tp * p->dp * p->pp, ax[WF_AXIS_DP]};
    if ((st = wf_dist_create(ch->e, ch->o, &dc, &ch->d)) != WF_OK)
        return st;
    /* The clipping norm counts each float of the gradient block once over
     * the pipeline: owner's share (a tied copy 0 but on its first holder,
     * a tp-replicated float 1 / tp), padding 0. */
    int64_t gfloats = 0;
    float *gblock = wf_exec_grad_block(ch->e, &gfloats);
    ch->norm_w = calloc((size_t)(gfloats + 1), sizeof *ch->norm_w);
    if (!ch->norm_w)
        return wf_errorf(WF_NOMEM, "out of memory for the clipping norm's weights");
    for (int i = 0; i < wf_exec_nparams(ch->e); i++) {
        const wf_exec_param *q = wf_exec_param_at(ch->e, i);
        for (int64_t j = 0; q->has_grad && ch->owner[i] && j < q->numel; j++)
            ch->norm_w[(q->grad - gblock) + j] = (float)ch->share[i];
    }
    wf_dist_set_norm(ch->d, ch->norm_w, MPI_COMM_NULL);
    /* Slots: the peak of this chunk's micro-batches in flight in the order. */
    ch->nslots = chunk_slots(p, ci, &ch->first_bwd, &ch->last_bwd);
    /* Recycling forwards run in a slot of their own: one the schedule's
     * passes use may still be sending gradients that the neighbour takes
     * only after a recycling forward it waits for. */
    ch->rslot = p->recycle > 0 ? ch->nslots++ : -1;
    if ((st = wf_exec_set_slots(ch->e, ch->nslots)) != WF_OK)
        return st;
    ch->slot_of = malloc((size_t)p->m * sizeof *ch->slot_of);
    ch->busy = calloc((size_t)ch->nslots, 1);
    ch->sreq = malloc((size_t)ch->nslots * MAX_BOUNDARY * sizeof *ch->sreq);
    if (!ch->slot_of || !ch->busy || !ch->sreq)
        return wf_errorf(WF_NOMEM, "out of memory for the pipeline's slots");
    for (int i = 0; i < p->m; i++)
        ch->slot_of[i] = -1;
    for (int i = 0; i < ch->nslots * MAX_BOUNDARY; i++)
        ch->sreq[i] = MPI_REQUEST_NULL;
    if (p->replay) {
        int64_t nb = 0;
        for (int b = 0; b < ch->nin; b++)
            nb += 2 * ch->in_n[b];
        for (int b = 0; b < ch->nout; b++)
            nb += 2 * ch->out_n[b];
        ch->pslot = nb * p->pieces;
        ch->pbuf = calloc((size_t)(ch->pslot * ch->nslots + 1), sizeof *ch->pbuf);
        if (!ch->pbuf)
            return wf_errorf(WF_NOMEM, "out of memory for the replayed stages' pieces");
    }
    return chunk_constants(c, ch);
}

/* Parameters read by several virtual stages: a communicator of their holders
 * in this pipeline (collective over the pipeline, every rank in the same
 * order). */
static wf_status find_shared(wf_pipe *p, const wf_graph *g, const int *first)
{
    wf_status st = WF_OK;
    p->sh = calloc((size_t)g->ntensors + 1, sizeof *p->sh);
    if (!p->sh)
        return wf_errorf(WF_NOMEM, "out of memory");
    for (int t = 0; t < g->ntensors; t++) {
        if (g->tensors[t].role != WF_ROLE_PARAM)
            continue;
        int nholders = 0, mine = 0;
        shared s = {-1, -1, MPI_COMM_NULL};
        for (int k = 0; k < p->nvs; k++) {
            int reads = 0;
            for (int o = first[k]; o < first[k + 1] && !reads; o++)
                for (int j = 0; j < g->ops[o].nin; j++)
                    reads |= g->ops[o].in[j] == t;
            if (!reads)
                continue;
            nholders++;
            if (k % p->pp != p->stage)
                continue;
            chunk *ch = &p->ch[k / p->pp];
            s.chunk = k / p->pp;
            for (int i = 0; i < wf_exec_nparams(ch->e); i++)
                if (strcmp(wf_exec_param_at(ch->e, i)->name, g->tensors[t].name) == 0)
                    s.param = i;
            mine++;
        }
        if (nholders < 2)
            continue;
        /* Every rank of the pipeline takes part in the split, whatever it finds. */
        if (mine > 1 && st == WF_OK)
            st = wf_errorf(WF_INVAL, "parameter '%s' is read by two chunks of stage %d (not supported)",
                           g->tensors[t].name, p->stage);
        if (mpi_on(p)) {
            int rc = MPI_Comm_split(p->ppcomm, mine == 1 ? 0 : MPI_UNDEFINED, p->stage, &s.comm);
            if (rc != MPI_SUCCESS && st == WF_OK)
                st = mpi_err(rc, "MPI_Comm_split of a tied parameter's holders");
        }
        if (mine == 1)
            p->sh[p->nshared++] = s;
    }
    return st;
}

/* The interlaced cut of g (the model's graph or a tensor-parallel local
 * graph): segment 0 the embedding (the ops before the first layer), 1 + k
 * stage k's layers [k L/pp, (k+1) L/pp), pp + 1 the head with the loss (the
 * ops after the last layer); first[0 .. pp + 2]. */
static wf_status cut_interlace(const wf_graph *g, const wf_model_config *m, int pp, int *first)
{
    int64_t per = m->layers / pp;
    int last = -1;
    for (int i = 0; i < g->nfwd; i++)
        if (g->ops[i].block >= 0)
            last = i;
    first[0] = 0;
    for (int k = 0; k < pp; k++) {
        first[1 + k] = -1;
        for (int i = 0; i < g->nfwd && first[1 + k] < 0; i++)
            if (g->ops[i].block >= 0 && g->ops[i].layer == (int)(k * per))
                first[1 + k] = i;
        if (first[1 + k] < 0)
            return wf_errorf(WF_INVAL, "model '%s' has no layer %lld to start stage %d", m->name,
                             (long long)(k * per), k);
    }
    first[pp + 1] = last + 1;
    first[pp + 2] = g->nfwd;
    return WF_OK;
}

/* The data input of g: "ids", else its first input; -1 when it has none. */
static int data_input(const wf_graph *g)
{
    int d = -1;
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].role == WF_ROLE_INPUT && (d < 0 || strcmp(g->tensors[t].name, "ids") == 0))
            d = t;
    return d;
}

/* The whole model's parameter index and offset (gidx, goff over the model's
 * graph g) of each tensor of x, found by name; -1 for other tensors. */
static void param_map(const wf_graph *g, const int64_t *gidx, const int64_t *goff, const wf_graph *x,
                      int64_t *pidx, int64_t *poff)
{
    for (int t = 0; t < x->ntensors; t++) {
        pidx[t] = poff[t] = -1;
        if (x->tensors[t].role != WF_ROLE_PARAM)
            continue;
        for (int u = 0; u < g->ntensors && pidx[t] < 0; u++)
            if (g->tensors[u].role == WF_ROLE_PARAM && strcmp(g->tensors[u].name, x->tensors[t].name) == 0) {
                pidx[t] = gidx[u];
                poff[t] = goff[u];
            }
    }
}

/* Interlaced: what the embedding's chunk (segment 0 of the vocabulary-
 * parallel graph vg, cut at vf) hands the first stage's layers, which read
 * the tensors of wg (cut at lf) that cross into its segment 1. GPT's
 * embedding makes its output whole itself (positions added, dropout), the
 * one tensor both graphs pass. Llama's first layer reads the embedding's
 * output directly: vg then passes two tensors, the output as the
 * vocabulary-parallel lookup leaves it (a partial sum over tp x pp, which
 * vg's first residual adds as it is) and its boxing to the whole value (the
 * carrier 'NAME.boxK', an all-reduce, made in segment 0 before the layer's
 * norm). The embedding hands the layers the whole value of each tensor
 * they read: vg's carrier of it that segment 1 reads (the last of a chain),
 * else the tensor itself; out[] gets those vg tensors (each once), *n their
 * count. The layers' input k (wg's) reads out[map[k]]; part[k] = 1 when it
 * is the embedding's output as produced and that is a partial sum over tp
 * in wg (tp > 1: the lookup split over the tp ranks): tp rank 0 takes the
 * whole value and the others zeros, a partial sum of the same total. The
 * layers' input gradients are whole on every tp rank (a partial sum's
 * gradient is its total's; a whole input's gradient is made whole by the
 * carriers' reductions), so the embedding's output gradient is their sum
 * over the inputs reading it, taken from tp rank 0 (play_interlace). */
static wf_status whole_outputs(const wf_pipe *p, const wf_graph *wg, const int *lf, const wf_graph *vg,
                               const int *vf, int *out, int *n, int *map, int *part)
{
    int lin[MAX_BOUNDARY], vout[MAX_BOUNDARY], nl = 0, nv = 0;
    *n = 0;
    wf_status st = boundary(wg, lf, 1, lin, &nl);
    if (st == WF_OK)
        st = boundary(vg, vf, 1, vout, &nv);
    if (st != WF_OK)
        return st;
    for (int k = 0; k < nl; k++) {
        const wf_tensor *x = &wg->tensors[lin[k]];
        /* The embedding's tensor it carries: a carrier's input chain back to a tensor not made by a carrier. */
        int base = lin[k];
        while (wg->tensors[base].producer >= 0 && strstr(wg->ops[wg->tensors[base].producer].name, ".box") &&
               wg->ops[wg->tensors[base].producer].nin > 0)
            base = wg->ops[wg->tensors[base].producer].in[0];
        const char *name = wg->tensors[base].name;
        char pre[WF_NAME_LEN + 8];
        snprintf(pre, sizeof pre, "%.40s.box", name);
        int pick = -1;
        for (int b = 0; b < nv; b++) {
            const wf_tensor *y = &vg->tensors[vout[b]];
            if (wf_tensor_numel(y) != wf_tensor_numel(x))
                continue;
            if (strcmp(y->name, name) == 0 && pick < 0)
                pick = vout[b];
            else if (y->producer >= 0 && strncmp(vg->ops[y->producer].name, pre, strlen(pre)) == 0 &&
                     (pick < 0 || strcmp(vg->tensors[pick].name, name) == 0 || vout[b] > pick))
                pick = vout[b]; /* a carrier of it: the last one made */
        }
        if (pick < 0)
            return wf_errorf(WF_INVAL, "interlaced pipeline: the embedding makes no whole '%s' for the first "
                                       "stage's layers", name);
        int e = 0;
        while (e < *n && out[e] != pick)
            e++;
        if (e == *n)
            out[(*n)++] = pick;
        map[k] = e;
        part[k] = base == lin[k] && p->tps && wf_spmd_tensor_partial(p->tps, name);
    }
    return WF_OK;
}

/* Interlaced: the layers' chunk ch[0] (segment 1 + stage of wg), the
 * embedding's ch[1] and the head's ch[2] (segments 0 and pp + 1 of the
 * vocabulary-parallel graph vg); what crosses between them must agree, and
 * the parameters both ends hold (the tied word embedding) are tied. */
static wf_status make_interlaced(wf_pipe *p, const wf_pipe_config *c, const wf_graph *wg, const int64_t *pidx,
                                 const int64_t *poff, const wf_graph *vg, const int64_t *vidx, const int64_t *voff)
{
    int *lf = malloc((size_t)(p->pp + 3) * sizeof *lf), *vf = malloc((size_t)(p->pp + 3) * sizeof *vf);
    wf_status st = lf && vf ? WF_OK : wf_errorf(WF_NOMEM, "out of memory");
    if (st == WF_OK)
        st = cut_interlace(wg, c->model, p->pp, lf);
    if (st == WF_OK)
        st = cut_interlace(vg, c->model, p->pp, vf);
    const int nseg = p->pp + 2;
    p->ch[0].vs = p->stage;
    p->ch[1].vs = p->pp;
    p->ch[2].vs = p->pp + 1;
    if (st == WF_OK)
        st = make_chunk(p, c, wg, lf, nseg, 1 + p->stage, p->tps, pidx, poff, -1, 0);
    if (st == WF_OK)
        st = whole_outputs(p, wg, lf, vg, vf, p->end_out, &p->nend_out, p->emap, p->epart);
    if (st == WF_OK)
        st = make_chunk(p, c, vg, vf, nseg, 0, p->vps, vidx, voff, data_input(vg), 1);
    p->nend_out = 0;
    if (st == WF_OK)
        st = make_chunk(p, c, vg, vf, nseg, nseg - 1, p->vps, vidx, voff, -1, 2);
    for (int k = 1; st == WF_OK && k < 3; k++)
        st = wf_exec_share_scratch(p->ch[k].e, p->ch[0].e);
    free(lf);
    free(vf);
    if (st != WF_OK)
        return st;
    const chunk *L = &p->ch[0], *E = &p->ch[1], *H = &p->ch[2];
    int ok = 1;
    if (p->stage == 0)
        for (int k = 0; ok && k < L->nin; k++)
            ok &= p->emap[k] < E->nout && L->in_n[k] == E->out_n[p->emap[k]];
    if (p->stage == p->pp - 1) {
        ok &= L->nout == H->nin;
        for (int k = 0; ok && k < L->nout; k++)
            ok &= L->out_n[k] == H->in_n[k];
    }
    if (!ok) {
        /* What the layers read from before them (or the head from them) is
         * not what the vocabulary-parallel ends make at their shapes: a
         * tensor made before the layers and read inside them at the layers'
         * own split (BERT's attention mask, rotary tables). */
        const wf_graph *sg = wf_exec_graph(L->e);
        int t = p->stage == 0 && L->nin > 0 ? L->in_t[0] : -1;
        return wf_errorf(WF_INVAL, "interlace=1: model '%s': stage %d's layers read %d tensor(s) from the "
                                   "embedding (%s%s), which makes %d at tp x pp = %d; the runtime's interlaced "
                                   "pipeline passes one activation each way (GPT's)", c->model->name, p->stage,
                         L->nin, t >= 0 ? sg->tensors[t].name : "", L->nin > 1 ? ", ..." : "", E->nout,
                         p->tp * p->pp);
    }
    for (int i = 0; i < wf_exec_nparams(E->e); i++)
        for (int j = 0; j < wf_exec_nparams(H->e); j++)
            if (strcmp(wf_exec_param_at(E->e, i)->name, wf_exec_param_at(H->e, j)->name) == 0) {
                if (p->ntie == 4)
                    return wf_errorf(WF_INVAL, "interlaced pipeline: more than 4 parameters tied");
                p->tie[p->ntie][0] = i;
                p->tie[p->ntie++][1] = j;
            }
    return WF_OK;
}

wf_status wf_pipe_create(const wf_pipe_config *c, wf_pipe **out)
{
    *out = NULL;
    wf_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return wf_errorf(WF_NOMEM, "out of memory creating the pipeline");
    const wf_plan *pl = c->plan;
    p->comm = c->comm;
    p->rank = c->rank;
    p->nranks = c->nranks;
    p->pp = pl->pp;
    p->vpp = pl->vpp > 0 ? pl->vpp : 1;
    p->nvs = p->pp * p->vpp;
    p->dp = pl->dp;
    p->tp = pl->tp > 1 ? pl->tp : 1;
    p->zero = pl->zero;
    p->interlace = pl->interlace;
    /* Megatron's order (plan.h's generator): tp innermost, then data-parallel, then stages. */
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(p->tp, 1, p->dp, p->pp, ax);
    p->stage = (int)wf_rank_coord(ax[WF_AXIS_PP], p->rank);
    p->dpi = (int)wf_rank_coord(ax[WF_AXIS_DP], p->rank);
    p->tpi = (int)wf_rank_coord(ax[WF_AXIS_TP], p->rank);
    p->mbs = pl->mbs;
    p->m = (int)(c->batch / p->dp / p->mbs);
    p->replay = pl->recompute == WF_RECOMPUTE_FULL;
    p->pieces = pl->coshard > 1 ? pl->coshard : 1;
    p->rows = p->mbs / p->pieces;
    p->kind = pl->pipe;
    p->nchunks = p->interlace ? 3 : p->vpp;
    p->dpcomm = p->ppcomm = p->tpcomm = p->mpcomm = MPI_COMM_NULL;
    *out = p;
    wf_status st = wf_pipe_check(pl, c->model, c->nranks, c->batch);
    if (st == WF_OK && (p->tp > 1 || p->interlace) && !mpi_on(p))
        st = wf_errorf(WF_INVAL, "pp=%d,tp=%d%s needs MPI (run under mpiexec)", p->pp, p->tp,
                       p->interlace ? ",interlace=1" : "");
    if (st == WF_OK)
        st = split_comms(p);
    if (st != WF_OK)
        return st;
    /* The model as it runs: a vocabulary its vocabulary-parallel ranks (tp,
     * interlaced tp x pp) do not divide is padded as Megatron pads it
     * (src/layout/vocab_pad.c); the padding's logits are masked out of the
     * loss (executor.c), so the losses are the unpadded model's. */
    wf_model_config mm;
    if (wf_megatron_pad_model(c->model, p->interlace ? p->tp * p->pp : p->tp, &mm))
        p->vocab_valid = c->model->vocab;
    wf_plan whole = *pl;
    whole.interlace = 0;
    if (p->tp > 1) {
        st = wf_spmd_create_tp(&mm, p->vocab_valid, &whole, p->mbs, p->tpcomm, &p->tps);
        if ((st = wf_mpi_agree_on(p->comm, p->rank, p->nranks, st)) != WF_OK)
            return st;
    }
    if (p->interlace) {
        /* The embedding and the head: Megatron's vocabulary-parallel layouts at tp x pp. */
        wf_plan ends = whole;
        ends.tp = p->tp * p->pp;
        ends.sp = 0;
        st = wf_spmd_create_tp(&mm, p->vocab_valid, &ends, p->mbs, p->mpcomm, &p->vps);
        if ((st = wf_mpi_agree_on(p->comm, p->rank, p->nranks, st)) != WF_OK)
            return st;
    }
    int cap = 2 * p->m * p->vpp > 5 * p->m ? 2 * p->m * p->vpp : 5 * p->m;
    p->ops = malloc((size_t)cap * sizeof *p->ops);
    p->played = malloc((size_t)cap * sizeof *p->played);
    p->itask = p->interlace ? malloc((size_t)cap * sizeof *p->itask) : NULL;
    p->ch = calloc((size_t)p->nchunks, sizeof *p->ch);
    if (!p->ops || !p->played || !p->ch || (p->interlace && !p->itask))
        return wf_errorf(WF_NOMEM, "out of memory creating the pipeline");
    if (p->interlace)
        st = wf_plan_interlace_order(p->pp, p->m, p->stage, p->itask, cap, &p->nitask);
    else
        st = wf_pipe_order(p->kind, p->pp, p->m, p->vpp, p->stage, p->ops, 2 * p->m * p->vpp, &p->nops);
    if (st != WF_OK)
        return st;
    wf_graph g;
    int *first = malloc((size_t)(p->nvs + 1) * sizeof *first);
    int64_t *pidx = NULL, *poff = NULL, *gidx = NULL, *goff = NULL, *vidx = NULL, *voff = NULL;
    if (!first)
        return wf_errorf(WF_NOMEM, "out of memory");
    /* Co-shard: the stages' graphs hold one piece (mbs / coshard rows). */
    st = wf_model_build(&mm, p->rows, &g);
    for (int i = 0; st == WF_OK && p->pieces > 1 && i < g.nfwd; i++)
        if (g.ops[i].kind == WF_OP_BATCHNORM)
            st = wf_errorf(WF_INVAL, "coshard=%d: model '%s' normalizes by batch statistics (op '%s'), which pieces "
                                     "of a micro-batch change (coshard=1)", p->pieces, c->model->name, g.ops[i].name);
    /* The graph cut into stages: the model's, or under tp this rank's local graph (its tensors at their local
     * shapes, the carriers of Megatron's collectives among its ops); interlaced, the embedding and the head
     * come from the vocabulary-parallel local graph vg. */
    const wf_graph *wg = p->tps ? wf_spmd_local_graph(p->tps) : &g;
    const wf_graph *vg = p->vps ? wf_spmd_local_graph(p->vps) : NULL;
    if (st == WF_OK) {
        pidx = malloc((size_t)wg->ntensors * sizeof *pidx);
        poff = malloc((size_t)wg->ntensors * sizeof *poff);
        gidx = malloc((size_t)g.ntensors * sizeof *gidx);
        goff = malloc((size_t)g.ntensors * sizeof *goff);
        vidx = malloc((size_t)(vg ? vg->ntensors : 1) * sizeof *vidx);
        voff = malloc((size_t)(vg ? vg->ntensors : 1) * sizeof *voff);
        if (!pidx || !poff || !gidx || !goff || !vidx || !voff)
            st = wf_errorf(WF_NOMEM, "out of memory");
    }
    const wf_graph *dg = vg ? vg : wg; /* the graph whose first chunk reads the data */
    int data_t = -1;
    if (st == WF_OK) {
        /* The whole model's parameter index and offset of each tensor of g, then of wg's (and vg's) by name. */
        int64_t k = 0, off = 0;
        for (int t = 0; t < g.ntensors; t++) {
            gidx[t] = goff[t] = -1;
            const wf_tensor *x = &g.tensors[t];
            if (x->role == WF_ROLE_PARAM) {
                gidx[t] = k++;
                goff[t] = off;
                off += wf_tensor_numel(x);
            }
        }
        param_map(&g, gidx, goff, wg, pidx, poff);
        if (vg)
            param_map(&g, gidx, goff, vg, vidx, voff);
        data_t = data_input(dg);
        p->full_params = off;
        p->in_int = data_t >= 0 && dg->tensors[data_t].dtype != WF_DTYPE_FP32;
        if (data_t < 0)
            st = wf_errorf(WF_INVAL, "model %s has no data input", c->model->name);
    }
    if (st == WF_OK && p->interlace) {
        st = make_interlaced(p, c, wg, pidx, poff, vg, vidx, voff);
    } else {
        if (st == WF_OK)
            st = cut(wg, c, p->nvs, first);
        /* A model's inputs besides data and labels (tp = 1: the runs_plan rows refuse the rest). */
        if (st == WF_OK && !p->tps)
            st = pipe_inputs_plan(p, c, wg, first, &data_t);
        for (int k = 0; st == WF_OK && k < p->nchunks; k++) {
            p->ch[k].vs = k * p->pp + p->stage;
            st = make_chunk(p, c, wg, first, p->nvs, p->ch[k].vs, p->tps, pidx, poff, data_t, k);
            /* A rank runs one chunk's pass at a time: one set of scratch. */
            if (st == WF_OK && k > 0)
                st = wf_exec_share_scratch(p->ch[k].e, p->ch[0].e);
        }
    }
    /* Every rank reaches the holders' splits (the communicators above are set). */
    st = mpi_on(p) ? wf_mpi_agree_on(p->comm, p->rank, p->nranks, st) : st;
    if (st == WF_OK && !p->interlace)
        st = find_shared(p, wg, first);
    if (st == WF_OK) {
        p->in_numel = wf_tensor_numel(&dg->tensors[data_t]) / p->rows;
        for (int t = 0; t < g.ntensors; t++)
            if (g.tensors[t].role == WF_ROLE_LABEL)
                p->lab_numel = wf_tensor_numel(&g.tensors[t]) / p->rows;
        char tps[24] = "";
        if (p->tp > 1)
            snprintf(tps, sizeof tps, "tp=%d,%s", p->tp, pl->sp ? "sp=1," : "");
        snprintf(p->desc, sizeof p->desc, "pp=%d,vpp=%d,%sdp=%d,pipe=%s%s,%s", p->pp, p->vpp, tps, p->dp,
                 wf_sched_pipe_name(p->kind), p->interlace ? ",interlace=1" : "", wf_dist_describe(p->ch[0].d));
    }
    wf_graph_free(&g);
    free(first);
    free(pidx);
    free(poff);
    free(gidx);
    free(goff);
    free(vidx);
    free(voff);
    return st;
}

/* Sends a step that failed left behind: cancelled and freed. */
static void cancel_pending(MPI_Request *r, int n)
{
    for (int i = 0; i < n; i++)
        if (r[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&r[i]);
            MPI_Request_free(&r[i]);
        }
}

void wf_pipe_free(wf_pipe *p)
{
    if (!p)
        return;
    for (int k = 0; p->ch && k < p->nchunks; k++) {
        chunk *ch = &p->ch[k];
        cancel_pending(ch->sreq, ch->sreq ? ch->nslots * MAX_BOUNDARY : 0);
        wf_dist_free(ch->d);
        wf_optim_free(ch->o);
        free(ch->norm_w);
        free(ch->zimg);
        wf_exec_free(ch->e);
        free(ch->slot_of);
        free(ch->busy);
        free(ch->sreq);
        free(ch->pbuf);
        free(ch->owner);
        free(ch->share);
        free(ch->full_off);
    }
    for (int i = 0; p->sh && i < p->nshared; i++)
        if (p->sh[i].comm != MPI_COMM_NULL)
            MPI_Comm_free(&p->sh[i].comm);
    if (p->dpcomm != MPI_COMM_NULL)
        MPI_Comm_free(&p->dpcomm);
    if (p->ppcomm != MPI_COMM_NULL)
        MPI_Comm_free(&p->ppcomm);
    wf_spmd_free(p->tps);
    wf_spmd_free(p->vps);
    if (p->tpcomm != MPI_COMM_NULL)
        MPI_Comm_free(&p->tpcomm);
    if (p->mpcomm != MPI_COMM_NULL)
        MPI_Comm_free(&p->mpcomm);
    cancel_pending(p->rreq, p->rreq ? p->m * MAX_REC : 0);
    free(p->rreq);
    free(p->rbuf);
    free(p->sbuf);
    free(p->rpend);
    wf_feed_graph_free(&p->fg);
    free(p->sh);
    free(p->ch);
    free(p->ops);
    free(p->played);
    free(p->itask);
    free(p);
}

void wf_pipe_dp_of(const wf_pipe *p, int *dp_index, int *dp)
{
    *dp_index = p->dpi;
    *dp = p->dp;
}

/* ---- a step ------------------------------------------------------------------------------------ */

static int tag_of(const wf_pipe *p, int mb, int vs, int dir, int k)
{
    return ((mb * p->nvs + vs) * 2 + dir) * MAX_BOUNDARY + k;
}

static wf_status wait_sends(chunk *ch, int slot, double *comm_s)
{
    MPI_Status ss[MAX_BOUNDARY]; /* (GCC misreads MPI_STATUSES_IGNORE's size) */
    double t0 = wf_now_s();
    int rc = MPI_Waitall(MAX_BOUNDARY, ch->sreq + (size_t)slot * MAX_BOUNDARY, ss);
    *comm_s += wf_now_s() - t0;
    return rc == MPI_SUCCESS ? WF_OK : mpi_err(rc, "MPI_Waitall of a stage's sends");
}

static wf_status recv_all(wf_pipe *p, float **buf, const int64_t *n, int cnt, int from, int mb, int vs, int dir,
                          double *comm_s)
{
    MPI_Request r[MAX_BOUNDARY];
    for (int k = 0; k < cnt; k++) {
        int rc = MPI_Irecv(buf[k], (int)n[k], MPI_FLOAT, from, tag_of(p, mb, vs, dir, k), p->ppcomm, &r[k]);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, "MPI_Irecv of a stage's activations");
    }
    MPI_Status ss[MAX_BOUNDARY];
    double t0 = wf_now_s();
    int rc = MPI_Waitall(cnt, r, ss);
    *comm_s += wf_now_s() - t0;
    return rc == MPI_SUCCESS ? WF_OK : mpi_err(rc, "MPI_Waitall of a stage's receives");
}

/* ---- a model's other inputs and recycling on stages ------------------------------------------
 * The rules of feed_inputs.c (constants, noise, T5's shifted labels, zeros)
 * per stage, and AlphaFold2's recycling: each forward without gradient of a
 * micro-batch sends the recycled sources (made on a later stage) back to the
 * first stage, which takes them in its next forward of that micro-batch.
 * NF1B (nf1b=1) runs the N recycling forwards of every micro-batch, in
 * micro-batch order, before the schedule; nf1b=0 runs a micro-batch's just
 * before each stage's forward of it that learns. */

static int tag_rec(const wf_pipe *p, int mb, int r)
{
    return p->m * p->nvs * 2 * MAX_BOUNDARY + mb * MAX_REC + r;
}

/* The dropout stream of pass k (N: the one that learns) of a step. */
static uint64_t stream_of(const wf_pipe *p, int64_t step, int k)
{
    return p->recycle > 0 ? (uint64_t)step * (uint64_t)(p->recycle + 1) + (uint64_t)k : (uint64_t)step;
}

/* The inputs of the whole graph g (tp = 1); data_t becomes the loader's. */
static wf_status pipe_inputs_plan(wf_pipe *p, const wf_pipe_config *c, const wf_graph *g, const int *first,
                                  int *data_t)
{
    wf_status st = wf_feed_graph_plan(c->model, g, &p->fg);
    if (st != WF_OK)
        return st;
    *data_t = p->fg.in_t;
    p->seed = c->exec.seed;
    p->recycle = p->fg.recycle;
    p->nf1b = c->plan->nf1b;
    for (int k = 0; k < p->fg.n; k++) {
        const wf_feed_input *x = &p->fg.x[k];
        if (x->kind != WF_FEED_RECYCLED)
            continue;
        if (p->nrec >= MAX_REC)
            return wf_errorf(WF_INVAL, "model %s: more than %d recycled inputs", c->model->name, MAX_REC);
        int r = p->nrec++;
        p->rec_i[r] = k;
        p->rec_from[r] = -1;
        for (int v = 0; x->src >= 0 && v < p->nvs; v++)
            if (g->tensors[x->src].producer >= first[v] && g->tensors[x->src].producer < first[v + 1])
                p->rec_from[r] = v % p->pp;
        p->rec_off[r] = r == 0 ? 0 : p->rec_off[r - 1] + (int64_t)p->m * p->mbs * p->fg.x[p->rec_i[r - 1]].numel;
    }
    if (p->nrec > 0) {
        if (p->vpp > 1)
            return wf_errorf(WF_INVAL, "vpp=%d: model %s recycles activations; the runtime pipelines it with one "
                                       "chunk per stage (vpp=1)", p->vpp, c->model->name);
        if (tag_rec(p, p->m, 0) > 32767)
            return wf_errorf(WF_INVAL, "%d micro-batches: too many recycling messages to tag", p->m);
        int64_t n = p->rec_off[p->nrec - 1] + (int64_t)p->m * p->mbs * p->fg.x[p->rec_i[p->nrec - 1]].numel;
        p->rbuf = calloc((size_t)n + 1, sizeof(float));
        p->sbuf = calloc((size_t)n + 1, sizeof(float));
        p->rreq = malloc((size_t)p->m * MAX_REC * sizeof *p->rreq);
        p->rpend = calloc((size_t)p->m, 1);
        if (!p->rbuf || !p->sbuf || !p->rreq || !p->rpend)
            return wf_errorf(WF_NOMEM, "out of memory for the recycled values");
        for (int i = 0; i < p->m * MAX_REC; i++)
            p->rreq[i] = MPI_REQUEST_NULL;
    }
    return WF_OK;
}

/* Chunk ch's inputs among them (map: g's tensor -> the stage's) and the
 * recycled sources it makes, which its executor keeps (keep[*nkeep]). */
static wf_status chunk_inputs(wf_pipe *p, chunk *ch, const wf_graph *g, const int *map, int *keep, int *nkeep)
{
    *nkeep = 0;
    ch->nfeed = ch->nsrc = 0;
    for (int k = 0; k < p->fg.n; k++) {
        int t = map[p->fg.x[k].t];
        if (t < 0)
            continue;
        if (ch->nfeed >= MAX_FEED)
            return wf_errorf(WF_INVAL, "stage %d of %s reads more than %d model inputs", ch->vs, g->name, MAX_FEED);
        ch->feed_t[ch->nfeed] = t;
        ch->feed_i[ch->nfeed++] = k;
    }
    for (int r = 0; r < p->nrec; r++) {
        int src = p->fg.x[p->rec_i[r]].src;
        if (src < 0 || map[src] < 0 || g->tensors[src].producer < 0 || p->rec_from[r] != p->stage)
            continue;
        ch->src_t[ch->nsrc] = map[src];
        ch->src_r[ch->nsrc++] = r;
        keep[(*nkeep)++] = map[src];
    }
    return WF_OK;
}

/* The constants into every slot's leaves (once). */
static wf_status chunk_constants(const wf_pipe_config *c, chunk *ch)
{
    const wf_graph *sg = wf_exec_graph(ch->e);
    for (int s = 0; s < ch->nslots; s++) {
        wf_exec_use_slot(ch->e, s);
        for (int k = 0; k < ch->nfeed; k++) {
            if (!wf_model_is_constant_input(c->model, sg, ch->feed_t[k]))
                continue;
            wf_status st = wf_model_constant_input(c->model, sg, ch->feed_t[k], wf_exec_leaf_data(ch->e, ch->feed_t[k]));
            if (st != WF_OK)
                return st;
        }
    }
    return WF_OK;
}

/* Before a forward of micro-batch mb on chunk ch (its slot in use): the
 * model's other inputs, and on the first stage the recycled values (those
 * of the last recycling forward received first). */
static wf_status chunk_feed(wf_pipe *p, chunk *ch, int mb, const int32_t *lab, int64_t first_sample,
                            double *comm_s);

/* chunk_feed for rows [off, off + rows) of micro-batch mb (a co-shard
 * piece; off 0 and rows mbs: the whole micro-batch). The recycled values
 * arrive whole for the micro-batch, before its first piece. */
static wf_status chunk_feed_rows(wf_pipe *p, chunk *ch, int mb, int64_t off, int64_t rows, const int32_t *lab,
                                 int64_t first_sample, double *comm_s)
{
    if (ch->vs == 0 && p->nrec > 0 && p->rpend[mb]) {
        for (int r = 0; r < p->nrec; r++) {
            if (p->rec_from[r] < 0 || p->rec_from[r] == p->stage)
                continue;
            const int64_t n = p->mbs * p->fg.x[p->rec_i[r]].numel;
            double t0 = wf_now_s();
            int rc = MPI_Recv(p->rbuf + p->rec_off[r] + mb * n, (int)n, MPI_FLOAT, p->rec_from[r], tag_rec(p, mb, r),
                              p->ppcomm, MPI_STATUS_IGNORE);
            *comm_s += wf_now_s() - t0;
            if (rc != MPI_SUCCESS)
                return mpi_err(rc, "MPI_Recv of the recycled values");
        }
        p->rpend[mb] = 0;
    }
    for (int k = 0; k < ch->nfeed; k++) {
        const wf_feed_input *x = &p->fg.x[ch->feed_i[k]];
        void *leaf = wf_exec_leaf_data(ch->e, ch->feed_t[k]);
        if (x->kind == WF_FEED_RECYCLED) {
            int r = 0;
            while (r < p->nrec && p->rec_i[r] != ch->feed_i[k])
                r++;
            const int64_t n = p->mbs * x->numel;
            memcpy(leaf, p->rbuf + p->rec_off[r] + mb * n + off * x->numel, (size_t)(rows * x->numel) * sizeof(float));
        } else {
            const int64_t row0 = (int64_t)mb * p->mbs + off;
            wf_feed_input_fill(x, leaf, rows, lab + row0 * p->lab_numel, first_sample + row0, p->seed);
        }
    }
    return WF_OK;
}

/* A forward whose kernel error is kept in *kst (the first one) for the step
 * to report after its collectives; WF_MPI (the job cannot go on) is returned. */
static wf_status forward_keep(wf_exec *e, float *loss, wf_status *kst)
{
    wf_status fs = wf_exec_forward(e, loss);
    if (fs == WF_MPI)
        return fs;
    if (*kst == WF_OK)
        *kst = fs;
    return WF_OK;
}

/* The chunk's inputs from the previous virtual stage vs - 1, for micro-batch
 * mb, into the executor's current slot (none on the first chunk). */
static wf_status chunk_recv_inputs(wf_pipe *p, chunk *ch, int mb, int vs, double *comm_s)
{
    if (ch->nin <= 0)
        return WF_OK;
    float *buf[MAX_BOUNDARY];
    for (int b = 0; b < ch->nin; b++)
        buf[b] = wf_exec_leaf_data(ch->e, ch->in_t[b]);
    return recv_all(p, buf, ch->in_n, ch->nin, (vs - 1) % p->pp, mb, vs, 0, comm_s);
}

/* The chunk's data and labels: rows [row0, row0 + rows) of this pipeline's
 * batch into the executor's current slot. */
static void chunk_load_rows(const wf_pipe *p, chunk *ch, const void *in, const int32_t *lab, int64_t row0,
                            int64_t rows)
{
    if (ch->data_t >= 0)
        memcpy(wf_exec_leaf_data(ch->e, ch->data_t), (const char *)in + (size_t)(row0 * p->in_numel) * 4,
               (size_t)(rows * p->in_numel) * 4);
    if (ch->label_t >= 0)
        memcpy(wf_exec_leaf_data(ch->e, ch->label_t), lab + row0 * p->lab_numel,
               (size_t)(rows * p->lab_numel) * sizeof(int32_t));
}

static wf_status chunk_feed(wf_pipe *p, chunk *ch, int mb, const int32_t *lab, int64_t first_sample,
                            double *comm_s)
{
    return chunk_feed_rows(p, ch, mb, 0, p->mbs, lab, first_sample, comm_s);
}

/* After a recycling forward of mb (of piece u of p->pieces: its rows): the
 * sources this chunk made go to the first stage (copied in place there),
 * one message per micro-batch after its last piece. */
static wf_status chunk_send_recycled(wf_pipe *p, chunk *ch, int mb, int u)
{
    for (int k = 0; k < ch->nsrc; k++) {
        int r = ch->src_r[k];
        const wf_feed_input *x = &p->fg.x[p->rec_i[r]];
        const float *src = wf_exec_kept_data(ch->e, ch->src_t[k]);
        if (!src)
            return wf_errorf(WF_INTERNAL, "recycled source of stage %d was not kept", ch->vs);
        const int64_t n = p->mbs * x->numel;
        MPI_Request *rq = &p->rreq[mb * MAX_REC + r];
        if (*rq != MPI_REQUEST_NULL) {
            int rc = MPI_Wait(rq, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS)
                return mpi_err(rc, "MPI_Wait of a recycled send");
        }
        float *dst = (p->stage == 0 ? p->rbuf : p->sbuf) + p->rec_off[r] + mb * n;
        for (int64_t row = 0; row < p->rows; row++)
            memcpy(dst + (u * p->rows + row) * x->numel, src + row * x->src_numel, (size_t)x->numel * sizeof(float));
        if (p->stage != 0 && u == p->pieces - 1) {
            int rc = MPI_Isend(dst, (int)n, MPI_FLOAT, 0, tag_rec(p, mb, r), p->ppcomm, rq);
            if (rc != MPI_SUCCESS)
                return mpi_err(rc, "MPI_Isend of the recycled values");
        }
    }
    return WF_OK;
}

/* Recycling forward k of micro-batch mb on this rank's chunk (vpp = 1):
 * its pieces in turn under co-shard (one piece of p->rows rows each; the
 * whole micro-batch otherwise), each sending its outputs on (the next
 * stage takes them piece by piece, in order) and its recycled sources
 * into the micro-batch's block (sent after the last piece). */
static wf_status recycle_forward(wf_pipe *p, int mb, int k, const void *in, const int32_t *lab,
                                 int64_t first_sample, int64_t step, wf_status *kst, double *comm_s)
{
    chunk *ch = &p->ch[0];
    int vs = ch->vs;
    wf_status st;
    int slot = ch->rslot;
    if (slot < 0)
        return wf_errorf(WF_INTERNAL, "pipeline: no slot for a recycling forward");
    if (vs == 0 && k == 0) {
        /* The first forward of the step's micro-batch recycles zeros. */
        for (int r = 0; r < p->nrec; r++) {
            const int64_t n = p->mbs * p->fg.x[p->rec_i[r]].numel;
            memset(p->rbuf + p->rec_off[r] + mb * n, 0, (size_t)n * sizeof(float));
        }
        p->rpend[mb] = 0;
    }
    for (int u = 0; u < p->pieces; u++) {
        const int64_t off = u * p->rows, row0 = (int64_t)mb * p->mbs + off;
        /* The slot's outputs of the previous piece (or pass) are sent before they are overwritten. */
        if ((st = wait_sends(ch, slot, comm_s)) != WF_OK)
            return st;
        wf_exec_use_slot(ch->e, slot);
        chunk_load_rows(p, ch, in, lab, row0, p->rows);
        if ((st = chunk_feed_rows(p, ch, mb, off, p->rows, lab, first_sample, comm_s)) != WF_OK)
            return st;
        if ((st = chunk_recv_inputs(p, ch, mb, vs, comm_s)) != WF_OK)
            return st;
        wf_exec_set_stream(ch->e, stream_of(p, step, k), first_sample + row0);
        wf_dist_begin_micro(ch->d, 1, 0);
        float loss = 0;
        wf_status fs = forward_keep(ch->e, &loss, kst);
        if (fs != WF_OK)
            return fs;
        for (int b = 0; b < ch->nout; b++) {
            int rc = MPI_Isend(wf_exec_output(ch->e, b), (int)ch->out_n[b], MPI_FLOAT, (vs + 1) % p->pp,
                               tag_of(p, mb, vs + 1, 0, b), p->ppcomm, &ch->sreq[(size_t)slot * MAX_BOUNDARY + b]);
            if (rc != MPI_SUCCESS)
                return mpi_err(rc, "MPI_Isend of a stage's activations");
        }
        if ((st = chunk_send_recycled(p, ch, mb, u)) != WF_OK)
            return st;
    }
    if (vs == 0)
        p->rpend[mb] = 1;
    return WF_OK;
}

static wf_status recycle_all(wf_pipe *p, int mb, const void *in, const int32_t *lab, int64_t first_sample,
                             int64_t step, wf_status *kst, double *comm_s)
{
    wf_status st = WF_OK;
    for (int k = 0; k < p->recycle && st == WF_OK; k++)
        st = recycle_forward(p, mb, k, in, lab, first_sample, step, kst, comm_s);
    return st;
}

/* The recycled sends of the step, done. */
static wf_status recycle_wait(wf_pipe *p, double *comm_s)
{
    if (!p->rreq)
        return WF_OK;
    double t0 = wf_now_s();
    int rc = MPI_SUCCESS;
    for (int i = 0; i < p->m * MAX_REC && rc == MPI_SUCCESS; i++)
        if (p->rreq[i] != MPI_REQUEST_NULL)
            rc = MPI_Wait(&p->rreq[i], MPI_STATUS_IGNORE);
    *comm_s += wf_now_s() - t0;
    return rc == MPI_SUCCESS ? WF_OK : mpi_err(rc, "MPI_Wait of the recycled sends");
}

/* A replayed stage's op (recompute=full; coshard=K splits each micro-batch's
 * rows into K pieces, SuperScaler's co-shard): the stage's executor holds
 * one piece (rows = mbs / K). A forward receives the micro-batch's inputs
 * whole (the K pieces' rows in turn, as the previous stage sent them) into
 * its slot's block of pbuf, runs the K pieces' forwards one after another in
 * the slot (dropout drawn at each piece's first sample, so the masks are one
 * process's) and sends the K outputs as one message; nothing of its
 * activations is kept for the backward but those inputs. A backward
 * receives the K output gradients, and for each piece replays its forward
 * (same inputs, same stream) just before its backward, which accumulates
 * into the parameters' gradients; the K input gradients go back as one
 * message. The last stage's loss is each piece's mean; the step divides by
 * m K (finish). Recycling runs its forwards piece by piece as well
 * (recycle_forward); the micro-batch's recycled values stay in rbuf from
 * its forward to its backward's replays. */
static wf_status play_pieces(wf_pipe *p, const wf_pipe_op *op, int pos, const void *in, const int32_t *lab,
                             int64_t first_sample, int64_t step, double *loss_sum, wf_status *kst, double *comm_s)
{
    chunk *ch = &p->ch[op->chunk];
    const int vs = ch->vs, mb = op->mb, K = p->pieces;
    const int64_t rows = p->rows;
    int64_t kin[MAX_BOUNDARY], kout[MAX_BOUNDARY];
    float *xin[MAX_BOUNDARY], *gin[MAX_BOUNDARY], *yout[MAX_BOUNDARY], *gout[MAX_BOUNDARY];
    wf_status st;
    p->played[p->nplayed++] = (wf_pipe_op){op->bwd, mb, op->chunk};
    int slot = -1;
    if (!op->bwd) {
        for (int s = 0; s < ch->nslots && slot < 0; s++)
            if (!ch->busy[s])
                slot = s;
        if (slot < 0)
            return wf_errorf(WF_INTERNAL, "pipeline: no free activation slot for micro-batch %d", mb);
    } else if ((slot = ch->slot_of[mb]) < 0) {
        return wf_errorf(WF_INTERNAL, "pipeline: backward of micro-batch %d before its forward", mb);
    }
    /* The slot's last sends (of an earlier micro-batch) are done before its block is written. */
    if ((st = wait_sends(ch, slot, comm_s)) != WF_OK)
        return st;
    float *blk = ch->pbuf + ch->pslot * slot;
    for (int b = 0; b < ch->nin; b++) {
        kin[b] = K * ch->in_n[b];
        xin[b] = blk;
        gin[b] = blk + kin[b];
        blk += 2 * kin[b];
    }
    for (int b = 0; b < ch->nout; b++) {
        kout[b] = K * ch->out_n[b];
        yout[b] = blk;
        gout[b] = blk + kout[b];
        blk += 2 * kout[b];
    }
    if (!op->bwd) {
        ch->busy[slot] = 1;
        ch->slot_of[mb] = slot;
        if (ch->nin > 0 && (st = recv_all(p, xin, kin, ch->nin, (vs - 1) % p->pp, mb, vs, 0, comm_s)) != WF_OK)
            return st;
    } else if (ch->nout > 0 && (st = recv_all(p, gout, kout, ch->nout, (vs + 1) % p->pp, mb, vs, 1, comm_s)) != WF_OK) {
        return st;
    }
    wf_exec_use_slot(ch->e, slot);
    for (int u = 0; u < K; u++) {
        const int64_t row0 = (int64_t)mb * p->mbs + u * rows; /* the piece's first row in this pipeline's batch */
        chunk_load_rows(p, ch, in, lab, row0, rows);
        /* The model's other inputs, and the recycled values of the micro-batch's last recycling forward. */
        if (ch->nfeed > 0 && (st = chunk_feed_rows(p, ch, mb, u * rows, rows, lab, first_sample, comm_s)) != WF_OK)
            return st;
        for (int b = 0; b < ch->nin; b++)
            memcpy(wf_exec_leaf_data(ch->e, ch->in_t[b]), xin[b] + u * ch->in_n[b],
                   (size_t)ch->in_n[b] * sizeof(float));
        wf_exec_set_stream(ch->e, stream_of(p, step, p->recycle), first_sample + row0);
        /* dear: the previous step's deferred update completes in this chunk's first forward. */
        if (u == 0)
            wf_dist_begin_micro(ch->d, !op->bwd, 0);
        float loss = 0;
        wf_status fs = forward_keep(ch->e, &loss, kst);
        if (fs != WF_OK)
            return fs;
        if (!op->bwd) {
            if (vs == p->nvs - 1)
                *loss_sum += (double)loss;
            for (int b = 0; b < ch->nout; b++)
                memcpy(yout[b] + u * ch->out_n[b], wf_exec_output(ch->e, b), (size_t)ch->out_n[b] * sizeof(float));
            continue;
        }
        /* The replay done: this piece's backward. */
        for (int b = 0; b < ch->nout; b++)
            memcpy(wf_exec_output_grad(ch->e, b), gout[b] + u * ch->out_n[b], (size_t)ch->out_n[b] * sizeof(float));
        wf_dist_begin_micro(ch->d, 0, pos == ch->last_bwd && u == K - 1);
        if ((st = wf_exec_backward(ch->e, pos != ch->first_bwd || u > 0)) != WF_OK)
            return st;
        for (int b = 0; b < ch->nin; b++) {
            const float *gx = wf_exec_input_grad(ch->e, b);
            if (gx)
                memcpy(gin[b] + u * ch->in_n[b], gx, (size_t)ch->in_n[b] * sizeof(float));
            else /* no gradient reaches this input: zeros */
                memset(gin[b] + u * ch->in_n[b], 0, (size_t)ch->in_n[b] * sizeof(float));
        }
    }
    const int n = op->bwd ? ch->nin : ch->nout;
    for (int b = 0; b < n; b++) {
        int to = op->bwd ? (vs - 1) % p->pp : (vs + 1) % p->pp;
        int rc = MPI_Isend(op->bwd ? gin[b] : yout[b], (int)(op->bwd ? kin[b] : kout[b]), MPI_FLOAT, to,
                           tag_of(p, mb, op->bwd ? vs - 1 : vs + 1, op->bwd, b), p->ppcomm,
                           &ch->sreq[(size_t)slot * MAX_BOUNDARY + b]);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, op->bwd ? "MPI_Isend of a stage's input gradients" : "MPI_Isend of a stage's activations");
    }
    if (op->bwd) {
        ch->busy[slot] = 0;
        ch->slot_of[mb] = -1;
    }
    return WF_OK;
}

/* Runs op i of the order. */
static wf_status play(wf_pipe *p, const wf_pipe_op *op, int pos, const void *in, const int32_t *lab,
                      int64_t first_sample, int64_t step, double *loss_sum, wf_status *kst, double *comm_s)
{
    chunk *ch = &p->ch[op->chunk];
    int vs = ch->vs, mb = op->mb;
    wf_status st;
    /* The record of what ran (the test compares it with the schedule). */
    p->played[p->nplayed++] = (wf_pipe_op){op->bwd, mb, op->chunk};
    if (!op->bwd) {
        int slot = -1;
        for (int s = 0; s < ch->nslots && slot < 0; s++)
            if (!ch->busy[s] && s != ch->rslot)
                slot = s;
        if (slot < 0)
            return wf_errorf(WF_INTERNAL, "pipeline: no free activation slot for micro-batch %d", mb);
        /* The slot's last sends (input gradients of an earlier micro-batch) are done. */
        if ((st = wait_sends(ch, slot, comm_s)) != WF_OK)
            return st;
        ch->busy[slot] = 1;
        ch->slot_of[mb] = slot;
        wf_exec_use_slot(ch->e, slot);
        chunk_load_rows(p, ch, in, lab, (int64_t)mb * p->mbs, p->mbs);
        if (ch->nfeed > 0 && (st = chunk_feed(p, ch, mb, lab, first_sample, comm_s)) != WF_OK)
            return st;
        if ((st = chunk_recv_inputs(p, ch, mb, vs, comm_s)) != WF_OK)
            return st;
        wf_exec_set_stream(ch->e, stream_of(p, step, p->recycle), first_sample + mb * p->mbs);
        /* dear: the previous step's deferred update completes in this chunk's first forward. */
        wf_dist_begin_micro(ch->d, 1, 0);
        float loss = 0;
        wf_status fs = forward_keep(ch->e, &loss, kst);
        if (fs != WF_OK)
            return fs;
        if (vs == p->nvs - 1)
            *loss_sum += (double)loss;
        for (int k = 0; k < ch->nout; k++) {
            int rc = MPI_Isend(wf_exec_output(ch->e, k), (int)ch->out_n[k], MPI_FLOAT, (vs + 1) % p->pp,
                               tag_of(p, mb, vs + 1, 0, k), p->ppcomm, &ch->sreq[(size_t)slot * MAX_BOUNDARY + k]);
            if (rc != MPI_SUCCESS)
                return mpi_err(rc, "MPI_Isend of a stage's activations");
        }
        return WF_OK;
    }
    int slot = ch->slot_of[mb];
    if (slot < 0)
        return wf_errorf(WF_INTERNAL, "pipeline: backward of micro-batch %d before its forward", mb);
    wf_exec_use_slot(ch->e, slot);
    if ((st = wait_sends(ch, slot, comm_s)) != WF_OK)
        return st;
    if (ch->nout > 0) {
        float *buf[MAX_BOUNDARY];
        for (int k = 0; k < ch->nout; k++)
            buf[k] = wf_exec_output_grad(ch->e, k);
        if ((st = recv_all(p, buf, ch->out_n, ch->nout, (vs + 1) % p->pp, mb, vs, 1, comm_s)) != WF_OK)
            return st;
    }
    wf_exec_set_stream(ch->e, stream_of(p, step, p->recycle), first_sample + mb * p->mbs);
    wf_dist_begin_micro(ch->d, 0, pos == ch->last_bwd);
    if ((st = wf_exec_backward(ch->e, pos != ch->first_bwd)) != WF_OK)
        return st;
    for (int k = 0; k < ch->nin; k++) {
        float *gx = wf_exec_input_grad(ch->e, k);
        if (!gx) {
            /* No gradient reaches this input: send zeros, from the leaf it came in. */
            gx = wf_exec_leaf_data(ch->e, ch->in_t[k]);
            memset(gx, 0, (size_t)ch->in_n[k] * sizeof(float));
        }
        int rc = MPI_Isend(gx, (int)ch->in_n[k], MPI_FLOAT, (vs - 1) % p->pp, tag_of(p, mb, vs - 1, 1, k), p->ppcomm,
                           &ch->sreq[(size_t)slot * MAX_BOUNDARY + k]);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, "MPI_Isend of a stage's input gradients");
    }
    ch->busy[slot] = 0;
    ch->slot_of[mb] = -1;
    return WF_OK;
}

/* A free activation slot of ch for micro-batch mb, taken; -1 when none. */
static int take_slot(chunk *ch, int mb)
{
    for (int s = 0; s < ch->nslots; s++)
        if (!ch->busy[s]) {
            ch->busy[s] = 1;
            ch->slot_of[mb] = s;
            return s;
        }
    return -1;
}

/* The interlaced pipeline's task t, at position pos of this rank's order
 * (docs/planner.md, "Interlaced pipeline"): ch[0] the stage's layers, ch[1]
 * the embedding and ch[2] the head, both vocabulary-parallel over the tp x
 * pp ranks of this pipeline (mpcomm, its rank stage x tp + t). The
 * embedding's output reaches stage 0 on the rank itself (every rank holds
 * it whole after the embedding's reduction); the last stage's output
 * reaches every rank by a broadcast from its tp rank 0, and the head's
 * input gradient (whole on every rank after its reduction) seeds the last
 * stage's backward; stage 0's input gradient reaches every rank's
 * embedding backward by a broadcast from its tp rank 0. */
static wf_status play_interlace(wf_pipe *p, const wf_plan_task *t, int pos, const void *in, const int32_t *lab,
                                int64_t first_sample, int64_t step, double *loss_sum, wf_status *kst,
                                double *comm_s)
{
    chunk *L = &p->ch[0], *E = &p->ch[1], *H = &p->ch[2];
    const int mb = t->mb, last = p->pp - 1;
    const int64_t sample = first_sample + mb * p->mbs;
    wf_status st;
    float loss = 0;
    if (t->kind == WF_PTASK_EMB_FWD) {
        p->played[p->nplayed++] = (wf_pipe_op){0, mb, 1};
        int slot = take_slot(E, mb);
        if (slot < 0)
            return wf_errorf(WF_INTERNAL, "interlaced pipeline: no free embedding slot for micro-batch %d", mb);
        wf_exec_use_slot(E->e, slot);
        memcpy(wf_exec_leaf_data(E->e, E->data_t), (const char *)in + (size_t)(mb * p->mbs * p->in_numel) * 4,
               (size_t)(p->mbs * p->in_numel) * 4);
        wf_exec_set_stream(E->e, (uint64_t)step, sample);
        wf_dist_begin_micro(E->d, 1, 0);
        wf_status fs = forward_keep(E->e, &loss, kst);
        if (fs != WF_OK)
            return fs;
        return WF_OK;
    }
    if (t->kind == WF_PTASK_FWD) {
        p->played[p->nplayed++] = (wf_pipe_op){0, mb, 0};
        int slot = -1;
        for (int s = 0; s < L->nslots && slot < 0; s++)
            if (!L->busy[s])
                slot = s;
        if (slot < 0)
            return wf_errorf(WF_INTERNAL, "pipeline: no free activation slot for micro-batch %d", mb);
        if ((st = wait_sends(L, slot, comm_s)) != WF_OK)
            return st;
        take_slot(L, mb);
        wf_exec_use_slot(L->e, slot);
        if (p->stage == 0) {
            if (E->slot_of[mb] < 0)
                return wf_errorf(WF_INTERNAL, "interlaced pipeline: stage 0 runs micro-batch %d before its "
                                              "embedding", mb);
            wf_exec_use_slot(E->e, E->slot_of[mb]);
            for (int k = 0; k < L->nin; k++) {
                float *dst = wf_exec_leaf_data(L->e, L->in_t[k]);
                if (p->epart[k] && p->tpi != 0) /* a partial sum over tp: the whole on tp rank 0 */
                    memset(dst, 0, (size_t)L->in_n[k] * sizeof(float));
                else
                    memcpy(dst, wf_exec_output(E->e, p->emap[k]), (size_t)L->in_n[k] * sizeof(float));
            }
        } else {
            float *buf[MAX_BOUNDARY];
            for (int k = 0; k < L->nin; k++)
                buf[k] = wf_exec_leaf_data(L->e, L->in_t[k]);
            if ((st = recv_all(p, buf, L->in_n, L->nin, p->stage - 1, mb, p->stage, 0, comm_s)) != WF_OK)
                return st;
        }
        wf_exec_set_stream(L->e, (uint64_t)step, sample);
        wf_dist_begin_micro(L->d, 1, 0);
        wf_status fs = forward_keep(L->e, &loss, kst);
        if (fs != WF_OK)
            return fs;
        for (int k = 0; p->stage < last && k < L->nout; k++) {
            int rc = MPI_Isend(wf_exec_output(L->e, k), (int)L->out_n[k], MPI_FLOAT, p->stage + 1,
                               tag_of(p, mb, p->stage + 1, 0, k), p->ppcomm, &L->sreq[(size_t)slot * MAX_BOUNDARY + k]);
            if (rc != MPI_SUCCESS)
                return mpi_err(rc, "MPI_Isend of a stage's activations");
        }
        return WF_OK;
    }
    if (t->kind == WF_PTASK_HEAD) {
        p->played[p->nplayed++] = (wf_pipe_op){0, mb, 2};
        wf_exec_use_slot(H->e, 0);
        if (p->stage == last && p->tpi == 0) {
            if (L->slot_of[mb] < 0)
                return wf_errorf(WF_INTERNAL, "interlaced pipeline: the head of micro-batch %d before its layers",
                                 mb);
            wf_exec_use_slot(L->e, L->slot_of[mb]);
            for (int k = 0; k < H->nin; k++)
                memcpy(wf_exec_leaf_data(H->e, H->in_t[k]), wf_exec_output(L->e, k),
                       (size_t)H->in_n[k] * sizeof(float));
        }
        double t0 = wf_now_s();
        for (int k = 0; k < H->nin; k++) {
            int rc = MPI_Bcast(wf_exec_leaf_data(H->e, H->in_t[k]), (int)H->in_n[k], MPI_FLOAT, last * p->tp,
                               p->mpcomm);
            if (rc != MPI_SUCCESS)
                return mpi_err(rc, "MPI_Bcast of the last stage's output");
        }
        *comm_s += wf_now_s() - t0;
        memcpy(wf_exec_leaf_data(H->e, H->label_t), lab + mb * p->mbs * p->lab_numel,
               (size_t)(p->mbs * p->lab_numel) * sizeof(int32_t));
        wf_exec_set_stream(H->e, (uint64_t)step, sample);
        wf_dist_begin_micro(H->d, 1, 0);
        wf_status fs = forward_keep(H->e, &loss, kst);
        if (fs != WF_OK)
            return fs;
        *loss_sum += (double)loss;
        wf_dist_begin_micro(H->d, 0, p->done_h == p->m - 1);
        if ((st = wf_exec_backward(H->e, p->done_h > 0)) != WF_OK)
            return st;
        p->done_h++;
        if (p->stage == last) {
            wf_exec_use_slot(L->e, L->slot_of[mb]);
            for (int k = 0; k < L->nout; k++) {
                const float *gx = wf_exec_input_grad(H->e, k);
                float *dst = wf_exec_output_grad(L->e, k);
                if (gx)
                    memcpy(dst, gx, (size_t)L->out_n[k] * sizeof(float));
                else
                    memset(dst, 0, (size_t)L->out_n[k] * sizeof(float));
            }
        }
        return WF_OK;
    }
    if (t->kind == WF_PTASK_BWD) {
        p->played[p->nplayed++] = (wf_pipe_op){1, mb, 0};
        int slot = L->slot_of[mb];
        if (slot < 0)
            return wf_errorf(WF_INTERNAL, "pipeline: backward of micro-batch %d before its forward", mb);
        wf_exec_use_slot(L->e, slot);
        if ((st = wait_sends(L, slot, comm_s)) != WF_OK)
            return st;
        if (p->stage < last) {
            float *buf[MAX_BOUNDARY];
            for (int k = 0; k < L->nout; k++)
                buf[k] = wf_exec_output_grad(L->e, k);
            if ((st = recv_all(p, buf, L->out_n, L->nout, p->stage + 1, mb, p->stage, 1, comm_s)) != WF_OK)
                return st;
        }
        wf_exec_set_stream(L->e, (uint64_t)step, sample);
        wf_dist_begin_micro(L->d, 0, pos == L->last_bwd);
        if ((st = wf_exec_backward(L->e, pos != L->first_bwd)) != WF_OK)
            return st;
        if (p->stage == 0) { /* the embedding's output gradients: the sum over the inputs reading each */
            wf_exec_use_slot(E->e, E->slot_of[mb]);
            for (int k = 0; k < E->nout; k++)
                memset(wf_exec_output_grad(E->e, k), 0, (size_t)E->out_n[k] * sizeof(float));
        }
        for (int k = 0; k < L->nin; k++) {
            float *gx = wf_exec_input_grad(L->e, k);
            if (!gx) {
                gx = wf_exec_leaf_data(L->e, L->in_t[k]);
                memset(gx, 0, (size_t)L->in_n[k] * sizeof(float));
            }
            if (p->stage == 0) {
                float *eg = wf_exec_output_grad(E->e, p->emap[k]);
                for (int64_t i = 0; i < L->in_n[k]; i++)
                    eg[i] += gx[i];
                continue;
            }
            int rc = MPI_Isend(gx, (int)L->in_n[k], MPI_FLOAT, p->stage - 1, tag_of(p, mb, p->stage - 1, 1, k),
                               p->ppcomm, &L->sreq[(size_t)slot * MAX_BOUNDARY + k]);
            if (rc != MPI_SUCCESS)
                return mpi_err(rc, "MPI_Isend of a stage's input gradients");
        }
        L->busy[slot] = 0;
        L->slot_of[mb] = -1;
        return WF_OK;
    }
    /* WF_PTASK_EMB_BWD */
    p->played[p->nplayed++] = (wf_pipe_op){1, mb, 1};
    int slot = E->slot_of[mb];
    if (slot < 0)
        return wf_errorf(WF_INTERNAL, "interlaced pipeline: the embedding's backward of micro-batch %d before its "
                                      "forward", mb);
    wf_exec_use_slot(E->e, slot);
    double t0 = wf_now_s();
    for (int k = 0; k < E->nout; k++) {
        int rc = MPI_Bcast(wf_exec_output_grad(E->e, k), (int)E->out_n[k], MPI_FLOAT, 0, p->mpcomm);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, "MPI_Bcast of stage 0's input gradient");
    }
    *comm_s += wf_now_s() - t0;
    wf_exec_set_stream(E->e, (uint64_t)step, sample);
    wf_dist_begin_micro(E->d, 0, p->done_eb == p->m - 1);
    if ((st = wf_exec_backward(E->e, p->done_eb > 0)) != WF_OK)
        return st;
    p->done_eb++;
    E->busy[slot] = 0;
    E->slot_of[mb] = -1;
    return WF_OK;
}

/* After the order: reductions, tied copies, the norm over the pipeline, the
 * updates (dear: deferred into the next step's forwards). */
static wf_status finish(wf_pipe *p, int64_t step, double *comm_s)
{
    wf_status st;
    /* The engines' waits in the passes (dear's all-gathers), then this whole phase. */
    for (int k = 0; k < p->nchunks; k++)
        *comm_s += wf_dist_take_comm_s(p->ch[k].d);
    double t0 = wf_now_s();
    for (int k = 0; k < p->nchunks; k++) {
        chunk *ch = &p->ch[k];
        for (int s = 0; s < ch->nslots; s++)
            if ((st = wait_sends(ch, s, comm_s)) != WF_OK)
                return st;
        if ((st = wf_dist_finish_reduce(ch->d)) != WF_OK)
            return st;
    }
    /* A tied parameter's copies: each holder's reduced gradient whole (from
     * its shards under dear and ZeRO-2/3), summed over the holders, its part
     * put back. */
    for (int i = 0; i < p->nshared; i++) {
        const shared *s = &p->sh[i];
        wf_dist *d = p->ch[s->chunk].d;
        const wf_exec_param *q = wf_exec_param_at(p->ch[s->chunk].e, s->param);
        if (s->comm == MPI_COMM_NULL || !q->has_grad)
            continue;
        float *full = malloc((size_t)q->numel * sizeof *full);
        if (!full)
            return wf_errorf(WF_NOMEM, "out of memory summing a tied parameter's gradient");
        st = wf_dist_grad_get(d, s->param, full);
        int rc = st == WF_OK ? MPI_Allreduce(MPI_IN_PLACE, full, (int)q->numel, MPI_FLOAT, MPI_SUM, s->comm)
                             : MPI_SUCCESS;
        if (st == WF_OK && rc == MPI_SUCCESS)
            st = wf_dist_grad_put(d, s->param, full);
        free(full);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, "MPI_Allreduce of a tied parameter's gradient");
        if (st != WF_OK)
            return st;
    }
    /* Interlaced: the parameters the embedding and the head both hold (the
     * tied word embedding's shard): their reduced gradients summed, both
     * copies given the sum, so the two stay one parameter. */
    for (int i = 0; i < p->ntie; i++) {
        const wf_exec_param *q = wf_exec_param_at(p->ch[1].e, p->tie[i][0]);
        if (!q->has_grad || !wf_exec_param_at(p->ch[2].e, p->tie[i][1])->has_grad)
            continue;
        float *a = malloc((size_t)q->numel * sizeof *a), *b = malloc((size_t)q->numel * sizeof *b);
        st = a && b ? wf_dist_grad_get(p->ch[1].d, p->tie[i][0], a)
                    : wf_errorf(WF_NOMEM, "out of memory summing a tied parameter's gradient");
        if (st == WF_OK)
            st = wf_dist_grad_get(p->ch[2].d, p->tie[i][1], b);
        for (int64_t j = 0; st == WF_OK && j < q->numel; j++)
            a[j] += b[j];
        if (st == WF_OK)
            st = wf_dist_grad_put(p->ch[1].d, p->tie[i][0], a);
        if (st == WF_OK)
            st = wf_dist_grad_put(p->ch[2].d, p->tie[i][1], a);
        free(a);
        free(b);
        if (st != WF_OK)
            return st;
    }
    /* Squares of every gradient, each float once (the chunks' weights), summed over the stages. The
     * squares and the updates are this rank's compute, not a wait: their time is taken out of the
     * phase's (the waits inside the updates, ZeRO's and DeAR's collectives, are put back). */
    double tc = wf_now_s();
    double mine = 0;
    for (int k = 0; k < p->nchunks; k++) {
        double s = 0;
        if ((st = wf_dist_reduced_sumsq(p->ch[k].d, &s)) != WF_OK)
            return st;
        mine += s;
    }
    double compute_s = wf_now_s() - tc;
    double total = mine;
    if (mpi_on(p)) {
        /* Over the stages (and their tp ranks), in rank order. */
        double all[4096];
        int n = p->pp * p->tp;
        if (n > 4096)
            return wf_errorf(WF_INVAL, "pp=%d x tp=%d: too many ranks per pipeline", p->pp, p->tp);
        int rc = MPI_Allgather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, p->tp > 1 ? p->mpcomm : p->ppcomm);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, "MPI_Allgather of the gradient norm");
        total = 0;
        for (int s = 0; s < n; s++)
            total += all[s];
    }
    double scale = 1.0 / ((double)p->dp * (double)p->m * (double)p->pieces);
    for (int k = 0; k < p->nchunks; k++)
        wf_dist_take_comm_s(p->ch[k].d); /* the waits so far: counted in this phase */
    double tu = wf_now_s(), update_waits_s = 0;
    for (int k = 0; k < p->nchunks; k++)
        if ((st = wf_dist_apply_update(p->ch[k].d, step + 1, scale, total)) != WF_OK)
            return st;
    compute_s += wf_now_s() - tu;
    for (int k = 0; k < p->nchunks; k++)
        update_waits_s += wf_dist_take_comm_s(p->ch[k].d);
    double phase_s = wf_now_s() - t0 - compute_s + update_waits_s;
    *comm_s += phase_s > 0 ? phase_s : 0;
    p->grad_norm = sqrt(total) * scale;
    return WF_OK;
}

wf_status wf_pipe_sync(wf_pipe *p)
{
    wf_status st = WF_OK;
    for (int k = 0; k < p->nchunks && st == WF_OK; k++) {
        st = wf_dist_sync(p->ch[k].d);
        wf_dist_take_comm_s(p->ch[k].d);
    }
    return st;
}

wf_status wf_pipe_step(wf_pipe *p, const void *in, const int32_t *lab, int64_t first_sample, int64_t step,
                       double *loss, wf_status *status, double *comm_s, double *grad_norm)
{
    *comm_s = 0;
    double loss_sum = 0;
    wf_status kst = WF_OK, st = WF_OK;
    p->nplayed = 0;
    p->done_h = p->done_eb = 0;
    /* Recycling: NF1B's forwards of every micro-batch first; else each micro-batch's before its forward. */
    for (int mb = 0; p->recycle > 0 && p->nf1b && mb < p->m && st == WF_OK; mb++)
        st = recycle_all(p, mb, in, lab, first_sample, step, &kst, comm_s);
    for (int i = 0; !p->interlace && i < p->nops && st == WF_OK; i++) {
        if (p->recycle > 0 && !p->nf1b && !p->ops[i].bwd)
            st = recycle_all(p, p->ops[i].mb, in, lab, first_sample, step, &kst, comm_s);
        if (st == WF_OK)
            st = p->replay ? play_pieces(p, &p->ops[i], i, in, lab, first_sample, step, &loss_sum, &kst, comm_s)
                           : play(p, &p->ops[i], i, in, lab, first_sample, step, &loss_sum, &kst, comm_s);
    }
    for (int i = 0; p->interlace && i < p->nitask && st == WF_OK; i++)
        st = play_interlace(p, &p->itask[i], i, in, lab, first_sample, step, &loss_sum, &kst, comm_s);
    if (st == WF_OK)
        st = recycle_wait(p, comm_s);
    if (st == WF_OK)
        st = finish(p, step, comm_s);
    if (st != WF_OK)
        return st;
    /* Every rank's loss contribution (the last stage's mean) and status. */
    /* Every tp rank of the last stage holds the whole loss (the vocabulary-parallel cross-entropy): one counts. */
    /* Interlaced: every rank runs the head; the same one counts. */
    int last = p->stage == (p->nvs - 1) % p->pp && p->tpi == 0;
    double mine[2] = {last ? loss_sum / ((double)p->m * (double)p->pieces) : 0.0, (double)kst};
    double total = mine[0];
    int worst = kst;
    if (mpi_on(p)) {
        double *all = malloc((size_t)p->nranks * 2 * sizeof *all);
        if (!all)
            return wf_errorf(WF_NOMEM, "out of memory");
        double t0 = wf_now_s();
        int rc = MPI_Allgather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, p->comm);
        *comm_s += wf_now_s() - t0;
        if (rc != MPI_SUCCESS) {
            free(all);
            return mpi_err(rc, "MPI_Allgather of the losses");
        }
        total = 0;
        for (int r = 0; r < p->nranks; r++) {
            total += all[2 * r];
            if ((int)all[2 * r + 1] < worst)
                worst = (int)all[2 * r + 1];
        }
        free(all);
    }
    *loss = total / (double)p->dp;
    *status = (wf_status)worst;
    *grad_norm = p->grad_norm;
    return WF_OK;
}

/* ---- info, checkpoints, the gathered model -------------------------------------------------- */

void wf_pipe_info(const wf_pipe *p, wf_train_info *out)
{
    out->ngroups = 0;
    out->params = p->full_params; /* the whole model's, as without stages */
    memset(&out->memory, 0, sizeof out->memory);
    for (int k = 0; k < p->nchunks; k++) {
        const chunk *ch = &p->ch[k];
        out->ngroups += wf_dist_ngroups(ch->d);
        wf_exec_memory m;
        wf_exec_memory_of(ch->e, &m);
        size_t pb, gb, ob;
        wf_dist_memory(ch->d, &pb, &gb, &ob);
        /* Under ZeRO what the rank holds (zero=3: its shard and the peak of gathered units). */
        out->memory.param_bytes += p->zero ? pb : m.param_bytes;
        out->memory.grad_bytes += p->zero ? gb : m.grad_bytes;
        out->optimizer_bytes += ob;
        /* The shared arena and one slot's kept block, then the other slots. */
        size_t kept = wf_exec_slot_bytes(ch->e) - m.leaf_bytes;
        out->memory.leaf_bytes += m.leaf_bytes * (size_t)ch->nslots;
        out->memory.arena_bytes += m.arena_bytes + kept * (size_t)(ch->nslots - 1);
        out->memory.unplanned_bytes += m.unplanned_bytes * (size_t)ch->nslots;
        out->memory.scratch_bytes += m.scratch_bytes;
    }
    out->zero = p->zero;
    snprintf(out->comm, sizeof out->comm, "%s", wf_dist_describe(p->ch[0].d));
}

const char *wf_pipe_describe(const wf_pipe *p)
{
    return p->desc;
}

wf_exec *wf_pipe_exec(const wf_pipe *p, int chunk_index)
{
    return chunk_index >= 0 && chunk_index < p->nchunks ? p->ch[chunk_index].e : NULL;
}

int wf_pipe_trace(const wf_pipe *p, wf_pipe_op *ops, int cap)
{
    int n = p->nplayed < cap ? p->nplayed : cap;
    memcpy(ops, p->played, (size_t)n * sizeof *ops);
    return p->nplayed;
}

wf_status wf_pipe_ckpt_tensors(wf_pipe *p, wf_ckpt_tensor **out, char **names, int *n)
{
    int total = 0;
    for (int k = 0; k < p->nchunks; k++)
        total += wf_exec_nparams(p->ch[k].e) * (1 + wf_optim_nstate(wf_dist_optim(p->ch[k].d)));
    wf_ckpt_tensor *ts = calloc((size_t)(total > 0 ? total : 1), sizeof *ts);
    char *nm = calloc((size_t)(total > 0 ? total : 1), WF_NAME_LEN);
    if (!ts || !nm) {
        free(ts);
        free(nm);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    int j = 0;
    for (int k = 0; k < p->nchunks; k++) {
        chunk *ch = &p->ch[k];
        const wf_optim *o = wf_dist_optim(ch->d);
        int ns = wf_optim_nstate(o);
        /* ZeRO: the state as the full images of an unsharded run (gathered
         * before a save, the shards taken back after a load). */
        int64_t nf = wf_dist_zero_floats(ch->d) + 1;
        if (p->zero) {
            free(ch->zimg);
            ch->zimg = calloc((size_t)(1 + ns) * (size_t)nf, sizeof(float));
            if (!ch->zimg) {
                free(ts);
                free(nm);
                return wf_errorf(WF_NOMEM, "out of memory for the checkpoint's images");
            }
        }
        for (int i = 0; i < wf_exec_nparams(ch->e); i++) {
            const wf_exec_param *q = wf_exec_param_at(ch->e, i);
            for (int s = -1; s < ns; s++, j++) {
                char *name = nm + (size_t)j * WF_NAME_LEN;
                if (s < 0)
                    snprintf(name, WF_NAME_LEN, "c%d/%.50s", ch->vs, q->name);
                else
                    snprintf(name, WF_NAME_LEN, "c%d/%s.%d", ch->vs, wf_optim_state_name(o, s), i);
                ts[j].name = name;
                ts[j].dtype = WF_DTYPE_FP32;
                ts[j].ndim = q->ndim;
                memcpy(ts[j].shape, q->shape, sizeof ts[j].shape);
                ts[j].data = s < 0 ? (void *)q->data : (void *)wf_optim_state(o, i, s);
                if (p->zero && (s >= 0 || p->zero == 3))
                    ts[j].data = ch->zimg + (size_t)(s + 1) * (size_t)nf + q->offset;
            }
        }
    }
    *out = ts;
    *names = nm;
    *n = total;
    return WF_OK;
}

/* The images of chunk k (ZeRO): [0] the parameters (zero=3), [1 + s] state s. */
static void zero_images(const wf_pipe *p, int k, float **img)
{
    const chunk *ch = &p->ch[k];
    int64_t nf = wf_dist_zero_floats(ch->d) + 1;
    for (int s = 0; s < 1 + wf_optim_nstate(wf_dist_optim(ch->d)); s++)
        img[s] = ch->zimg + (size_t)s * (size_t)nf;
}

wf_status wf_pipe_zero_gather(wf_pipe *p)
{
    wf_status st = WF_OK;
    for (int k = 0; p->zero && k < p->nchunks && st == WF_OK; k++) {
        float *img[4];
        zero_images(p, k, img);
        if (p->ch[k].zimg)
            st = wf_dist_zero_gather(p->ch[k].d, p->zero == 3 ? img[0] : NULL, img + 1);
    }
    return st;
}

void wf_pipe_zero_scatter(wf_pipe *p)
{
    for (int k = 0; p->zero && k < p->nchunks; k++) {
        float *img[4];
        zero_images(p, k, img);
        if (p->ch[k].zimg)
            wf_dist_zero_scatter(p->ch[k].d, p->zero == 3 ? img[0] : NULL, (const float *const *)(img + 1));
    }
}

/* Chunk k's parameters, laid out as its parameter block: the block, or
 * under ZeRO-3 (which holds shards) a gathered image the caller frees in
 * *owned (collective over the chunk's data-parallel group). */
static wf_status chunk_params(const wf_pipe *p, int k, const float **out, float **owned)
{
    *owned = NULL;
    *out = wf_exec_param_block(p->ch[k].e, NULL);
    if (p->zero != 3)
        return WF_OK;
    float *img = calloc((size_t)wf_dist_zero_floats(p->ch[k].d) + 1, sizeof *img);
    wf_status st = img ? wf_dist_zero_gather(p->ch[k].d, img, NULL)
                       : wf_errorf(WF_NOMEM, "out of memory gathering a stage's parameters");
    *owned = img;
    *out = img;
    return st;
}

void wf_pipe_zero_release(wf_pipe *p)
{
    for (int k = 0; k < p->nchunks; k++) {
        free(p->ch[k].zimg);
        p->ch[k].zimg = NULL;
    }
}

wf_status wf_pipe_gather_params(wf_pipe *p, float *out, int64_t cap, int64_t *n)
{
    *n = p->full_params;
    /* dear's deferred update applied first (every rank; no early return before it). */
    wf_status st = wf_pipe_sync(p);
    if (mpi_on(p))
        st = wf_mpi_agree_on(p->comm, p->rank, p->nranks, st);
    if (st != WF_OK)
        return st;
    if (cap < p->full_params)
        return wf_errorf(WF_INVAL, "the model has %lld parameters, %lld given", (long long)p->full_params,
                         (long long)cap);
    memset(out, 0, (size_t)p->full_params * sizeof *out);
    for (int k = 0; k < p->nchunks && st == WF_OK; k++) {
        chunk *ch = &p->ch[k];
        const float *block;
        float *owned;
        st = chunk_params(p, k, &block, &owned); /* every rank: ZeRO-3 gathers over the stage's dp group */
        for (int i = 0; st == WF_OK && p->dpi == 0 && i < wf_exec_nparams(ch->e); i++)
            if (ch->owner[i]) {
                const wf_exec_param *q = wf_exec_param_at(ch->e, i);
                if (ch->sp)
                    wf_spmd_put_param(ch->sp, q->name, block + q->offset, out + ch->full_off[i]);
                else
                    memcpy(out + ch->full_off[i], block + q->offset, (size_t)q->numel * sizeof *out);
            }
        free(owned);
    }
    if (mpi_on(p))
        st = wf_mpi_agree_on(p->comm, p->rank, p->nranks, st);
    if (st != WF_OK)
        return st;
    if (!mpi_on(p))
        return WF_OK;
    /* One rank holds each value, the others zeros: the sum is exact. */
    for (int64_t off = 0; off < p->full_params; off += 1 << 24) {
        int cnt = (int)(p->full_params - off < (1 << 24) ? p->full_params - off : (1 << 24));
        int rc = MPI_Allreduce(MPI_IN_PLACE, out + off, cnt, MPI_FLOAT, MPI_SUM, p->comm);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, "MPI_Allreduce gathering the parameters");
    }
    return WF_OK;
}

uint64_t wf_pipe_checksum(const wf_pipe *p)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < p->nchunks; k++) {
        int64_t n = 0;
        wf_exec_param_block(p->ch[k].e, &n);
        const float *block;
        float *owned;
        if (p->zero == 3)
            n = wf_dist_zero_floats(p->ch[k].d);
        if (chunk_params(p, k, &block, &owned) != WF_OK || !block)
            n = 0;
        const unsigned char *b = (const unsigned char *)block;
        for (size_t i = 0; i < (size_t)n * sizeof(float); i++) {
            h ^= b[i];
            h *= 0x100000001b3ull;
        }
        free(owned);
    }
    return h;
}
