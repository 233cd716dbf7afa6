/* One training iteration of a plan as a task graph (sim.h, "one training
 * iteration of a plan"): units from profile.c laid out over pipeline stages,
 * each stage's ops in its schedule's order chained on its stream, the tensor-
 * parallel collectives of each unit on channel 0, pipeline sends on the
 * sender's stream, the data-parallel gradient collectives on channel 1 as the
 * comm schedule issues them, the tied-embedding all-reduce and the optimizer
 * step; then the per-stage breakdown, memory peak and the trace.
 *
 * Two passes when there is data parallelism: the first (without gradient
 * collectives) gives the times at which the last micro-batch's backward
 * produces each unit's gradients; the schedule groups them from those times;
 * the second plays it. */
#include "sim/plan-impl.h"
#include "weft/layout.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FINE_TASKS 300000
/* ByteScheduler's steady state: the gates settle within a microsecond, or
 * after this many passes (each pass's gates are the last one's ends). */
#define BS_SETTLED_NS 1000
#define BS_MAX_ROUNDS 12

/* A stage's data-parallel schedule and DeAR's per-group hooks. */
typedef struct {
    wf_comm_schedule sc;
    int ngroups;        /* dear: groups in forward order */
    int *group_first;   /* [ngroups] first instance of each group */
    double *group_opt_s;/* [ngroups] its optimizer step */
    double *group_bytes;/* [ngroups] its all-gather */
    int *grad_inst;     /* gradient index -> instance */
    wf_comm_schedule mp;/* the weights' partial gradients over the model-parallel axis, grouped
                           and issued as the plan's schedule does (DeAR: as DDP) */
    int *mp_inst;       /* its gradient index -> instance */
    wf_comm_schedule sub[2]; /* the same over each sub-axis of a mesh of two model-parallel axes */
    int *sub_inst[2];
    int next_group;     /* while building: the next group whose gate is due */
    int *ag_of;         /* while building: [ngroups] each group's all-gather task, -1 not issued */
    int *op_task;       /* [sc.nops] each collective's task (ByteScheduler's carry-over) */
} stage_dp;

typedef struct {
    sim_builder sb; /* the simulation being built; the first error sticks */
    const sim_profile *pr;
    const wf_plan *p;
    const wf_cluster *c;
    int m, nvs, coarse, with_dp;
    wf_comm_kind kind;
    wf_arena *a;
    /* per (vs, mb): first and last task of each op, and its send */
    int *f_first, *f_last, *f_send, *b_first, *b_last, *b_send;
    int *inst_grad_task; /* [ninst] end of the instance's backward in its last micro-batch */
    int *stage_last;     /* [p] the last stream task */
    int *stage_dp_last;  /* [p] a marker after every gradient collective of the stage */
    int *stage_end;      /* [p] the stage's last stream task, optimizer step included */
    stage_dp *dp;        /* [p] (pass 2) */
    /* ByteScheduler (bs_carry): the gradient collectives left at the end of
     * an iteration run on into the next forward, each instance's forward
     * waiting for its own (the steady state, ALGORITHMS.md §4): instance i's
     * first forward starts no earlier than bs_gate_ns[i] (its collectives'
     * end in the iteration before, on this iteration's clock), then steps its
     * own weights (bs_step_s[i]). */
    int bs_carry;
    wf_ns *bs_gate_ns;   /* [ninst] */
    double *bs_step_s;   /* [ninst] */
    /* stream state while building one stage */
    int prev;
    int wait[64], nwait;
    int bg[64], nbg;
} pb;

static int add_task(pb *b, const char *name, wf_sim_cat cat, double dur_s, int res, int mb, int layer, int chunk,
                    double bytes)
{
    wf_sim_task_desc d;
    wf_sim_task_desc_init(&d);
    d.name = name;
    d.cat = cat;
    d.dur_ns = wf_sim_ns(dur_s);
    d.nres = res >= 0;
    d.res = &res;
    d.mb = mb;
    d.layer = layer;
    d.chunk = chunk;
    d.bytes = bytes;
    if (d.dur_ns < 0 && b->sb.st == WF_OK)
        b->sb.st = wf_errorf(WF_INTERNAL, "task '%s': duration %g s is not a time", name, dur_s);
    return sim_task(&b->sb, &d);
}

static void dep(pb *b, int t, int on) { sim_dep(&b->sb, t, on); }

/* Puts task id on the stream chain: after the previous stream task and
 * every collective waited for; it becomes the chain's end. */
static int chain(pb *b, int id)
{
    dep(b, id, b->prev);
    for (int i = 0; i < b->nwait; i++)
        dep(b, id, b->wait[i]);
    b->nwait = 0;
    b->prev = id;
    return id;
}

/* A stream task after the chain and everything waited for. */
static int stream_task(pb *b, int dev, const char *name, wf_sim_cat cat, double dur, int mb, int layer, int chunk)
{
    return chain(b, add_task(b, name, cat, dur, wf_sim_stream(b->sb.s, dev), mb, layer, chunk, -1));
}

static void push_wait(pb *b, int id)
{
    if (b->nwait < 64)
        b->wait[b->nwait++] = id;
    else if (b->sb.st == WF_OK)
        b->sb.st = wf_errorf(WF_INTERNAL, "too many outstanding collectives in one unit");
}

/* Closes an op: a marker when collectives are still waited for, so that the
 * op's end is one task. */
static int close_op(pb *b)
{
    if (b->nwait == 0)
        return b->prev;
    return chain(b, add_task(b, "end", WF_SIM_CAT_MARKER, 0, -1, -1, -1, -1, -1));
}

/* Opens an op with a marker that everything in it follows (through the
 * stream chain), so that a cross-stage dependency on it holds back the whole
 * op, collectives issued first included. */
static int open_op(pb *b, const char *name, int mb, int chunk)
{
    return chain(b, add_task(b, name, WF_SIM_CAT_MARKER, 0, -1, mb, -1, chunk, -1));
}

static void run_steps(pb *b, int dev, const sim_step *s, int n, int mb, int layer, int chunk)
{
    int ch = wf_sim_channel(b->sb.s, dev, 0);
    for (int i = 0; i < n; i++) {
        switch (s[i].kind) {
        case STEP_COMPUTE:
            stream_task(b, dev, s[i].name, (wf_sim_cat)s[i].cat, s[i].dur_s, mb, layer, chunk);
            break;
        case STEP_COLL:
        case STEP_COLL_BG:
        case STEP_COLL_FREE: {
            int id = add_task(b, s[i].name, (wf_sim_cat)s[i].cat, s[i].dur_s, ch, mb, layer, chunk,
                              s[i].bytes > 0 ? s[i].bytes : -1);
            dep(b, id, b->prev);
            if (s[i].kind == STEP_COLL)
                push_wait(b, id);
            else if (s[i].kind == STEP_COLL_FREE)
                break;
            else if (b->nbg < 64)
                b->bg[b->nbg++] = id;
            else if (b->sb.st == WF_OK)
                b->sb.st = wf_errorf(WF_INTERNAL, "too many overlapped collectives in one unit");
            break;
        }
        case STEP_JOIN:
            for (int k = 0; k < b->nbg; k++)
                push_wait(b, b->bg[k]);
            b->nbg = 0;
            break;
        }
    }
}

/* DeAR: issues the all-gathers of the groups that start at group g0's first
 * instance (a layer's groups together, as a framework's forward pre-hook
 * gathers the next bucket while the current one computes), after task
 * `after` (-1: at once). */
static void dear_gather(pb *b, int dev, int g0, int after)
{
    stage_dp *d = &b->dp[dev];
    for (int g = g0; g < d->ngroups && d->group_first[g] == d->group_first[g0]; g++) {
        d->ag_of[g] = add_task(b, "dp all-gather", WF_SIM_CAT_DP_COMM,
                               wf_coll_time(b->c, WF_COLL_ALLGATHER, &b->pr->dp_group, d->group_bytes[g]),
                               wf_sim_channel(b->sb.s, dev, 1), -1, -1, -1, d->group_bytes[g]);
        dep(b, d->ag_of[g], after);
    }
}

/* DeAR: before the first forward of a group's first instance, wait for the
 * group's all-gather and step the group; once the instance's groups are
 * through, issue the next instance's all-gathers. */
/* Megatron-Core's distributed optimizer (ZeRO-1/2 with overlap_param_gather,
 * which the plan as run names DeAR): the whole sharded step after the last
 * backward, as without overlap; only the parameter all-gathers move into the
 * next forward, all issued when it opens (one after another on the channel)
 * and each waited for before its group's first forward. */
static int distopt(const pb *b)
{
    return b->kind == WF_COMM_DEAR && b->p->zero >= 1 && b->p->zero < 3 && b->pr->ag_overlap;
}

/* DeAR's all-gather half is played: not under ZeRO-3, whose gradients are
 * reduce-scattered in backward as DeAR's are, but whose sharded step leaves
 * nothing to all-gather: the next forward gathers each op's weights anyway
 * (DeepSpeed stage 3 steps the shards after the backward and has no
 * parameter all-gather of its own). The estimate counts no such gather. */
static int dear_split(const pb *b)
{
    return b->kind == WF_COMM_DEAR && b->p->zero < 3;
}

static void dear_gates(pb *b, int dev, int inst, int mb)
{
    stage_dp *d = &b->dp[dev];
    while (d->next_group < d->ngroups && d->group_first[d->next_group] <= inst) {
        int g = d->next_group++;
        int gate = add_task(b, "dear gate", WF_SIM_CAT_MARKER, 0, -1, mb, -1, -1, -1);
        dep(b, gate, d->ag_of[g]);
        chain(b, gate);
        if (distopt(b))
            continue;
        if (g + 1 < d->ngroups && d->group_first[g + 1] != d->group_first[g])
            dear_gather(b, dev, g + 1, gate);
        stream_task(b, dev, "optimizer step (group)", WF_SIM_CAT_OPTIMIZER, d->group_opt_s[g], -1, -1, -1);
    }
}

/* ByteScheduler's carry-over: before instances [lo, hi) run their first
 * forward, wait for their gradients of the iteration before (a marker not
 * before the latest of their gates) and step their weights. */
static void bs_gates(pb *b, int dev, int lo, int hi, int mb)
{
    wf_ns gate = 0;
    double step = 0;
    for (int i = lo; i < hi; i++) {
        gate = b->bs_gate_ns[i] > gate ? b->bs_gate_ns[i] : gate;
        step += b->bs_step_s[i];
    }
    wf_sim_task_desc d;
    wf_sim_task_desc_init(&d);
    d.name = "bytescheduler gate";
    d.cat = WF_SIM_CAT_MARKER;
    d.mb = mb;
    d.not_before_ns = gate;
    chain(b, sim_task(&b->sb, &d));
    if (step > 0)
        stream_task(b, dev, "optimizer step (layer)", WF_SIM_CAT_OPTIMIZER, step, -1, -1, -1);
}

/* The coarse form of a run of steps: channel time `hidden` issued with the
 * stream task `comp`, then `exposed` channel time the stream waits for.
 * Returns the stream task (-1 when comp is 0). */
static int coarse_pair(pb *b, int dev, const char *name, wf_sim_cat cat, double comp, double exposed,
                       double hidden, int mb, int chunk)
{
    int ch = wf_sim_channel(b->sb.s, dev, 0);
    if (hidden > 0) {
        int h = add_task(b, "tp comm (overlapped)", WF_SIM_CAT_TP_COMM, hidden, ch, mb, -1, chunk, -1);
        dep(b, h, b->prev);
    }
    int c = comp > 0 ? stream_task(b, dev, name, cat, comp, mb, -1, chunk) : -1;
    if (exposed > 0) {
        int id = add_task(b, "tp comm", WF_SIM_CAT_TP_COMM, exposed, ch, mb, -1, chunk, -1);
        dep(b, id, b->prev);
        push_wait(b, id);
    }
    return c;
}

static void build_forward(pb *b, int dev, int vs, int mb, int chunk, int first_of_vs)
{
    const sim_profile *pr = b->pr;
    int lo = pr->vs_first[vs], hi = pr->vs_first[vs + 1];
    int start = open_op(b, "forward start", mb, chunk);
    int dear = b->with_dp && dear_split(b) && first_of_vs;
    int bs = b->with_dp && b->bs_carry && first_of_vs;
    if (b->coarse) {
        if (dear)
            dear_gates(b, dev, hi - 1, mb);
        if (bs)
            bs_gates(b, dev, lo, hi, mb);
        double comp = 0, exposed = 0;
        for (int i = lo; i < hi; i++) {
            comp += pr->unit[pr->inst[i]].fwd_comp;
            exposed += pr->unit[pr->inst[i]].fwd_exposed;
        }
        coarse_pair(b, dev, "forward", WF_SIM_CAT_FORWARD, comp, exposed, 0, mb, chunk);
    } else {
        for (int i = lo; i < hi; i++) {
            if (dear)
                dear_gates(b, dev, i, mb);
            if (bs)
                bs_gates(b, dev, i, i + 1, mb);
            const sim_unit *u = &pr->unit[pr->inst[i]];
            run_steps(b, dev, u->fwd, u->nfwd, mb, pr->inst_layer[i], chunk);
        }
    }
    b->f_last[vs * b->m + mb] = close_op(b);
    b->f_first[vs * b->m + mb] = start;
}

static void build_backward(pb *b, int dev, int vs, int mb, int chunk, int last_of_vs)
{
    const sim_profile *pr = b->pr;
    int lo = pr->vs_first[vs], hi = pr->vs_first[vs + 1];
    int start = open_op(b, "backward start", mb, chunk);
    if (b->coarse) {
        double rcomp = 0, rexp = 0, comp = 0, exposed = 0, hidden = 0, transient = 0;
        for (int i = lo; i < hi; i++) {
            const sim_unit *u = &pr->unit[pr->inst[i]];
            rcomp += u->rec_comp;
            rexp += u->rec_exposed;
            comp += u->bwd_comp;
            exposed += u->bwd_exposed;
            hidden += u->bwd_hidden;
            transient = u->transient_bytes > transient ? u->transient_bytes : transient;
        }
        coarse_pair(b, dev, "recompute", WF_SIM_CAT_RECOMPUTE, rcomp, rexp, 0, mb, chunk);
        int c = coarse_pair(b, dev, "backward", WF_SIM_CAT_BACKWARD, comp, exposed, hidden, mb, chunk);
        if (transient > 0 && b->sb.st == WF_OK)
            b->sb.st = wf_sim_add_buffer(b->sb.s, dev, (int64_t)transient, c, 0, NULL);
        if (last_of_vs)
            for (int i = lo; i < hi; i++)
                b->inst_grad_task[i] = c;
    } else {
        for (int i = hi - 1; i >= lo; i--) {
            const sim_unit *u = &pr->unit[pr->inst[i]];
            int first = wf_sim_ntasks(b->sb.s);
            run_steps(b, dev, u->rec, u->nrec, mb, pr->inst_layer[i], chunk);
            run_steps(b, dev, u->bwd, u->nbwd, mb, pr->inst_layer[i], chunk);
            if (last_of_vs)
                b->inst_grad_task[i] = b->prev;
            if (u->transient_bytes > 0 && first < wf_sim_ntasks(b->sb.s) && b->sb.st == WF_OK)
                b->sb.st = wf_sim_add_buffer(b->sb.s, dev, (int64_t)u->transient_bytes, first, 1, &b->prev);
        }
    }
    b->b_last[vs * b->m + mb] = close_op(b);
    b->b_first[vs * b->m + mb] = start;
}

/* The unit instances stage dev holds, in forward order, into out (at least
 * ninst entries): its virtual stages' and, in an interlaced pipeline, the
 * embedding (first) and the head (last) that every stage holds. */
static int stage_insts(const sim_profile *pr, const wf_plan *p, int dev, int *out)
{
    int n = 0;
    if (pr->interlace)
        out[n++] = 0;
    for (int c = 0; c < p->vpp; c++) {
        int vs = c * p->pp + dev;
        if (vs >= pr->nvs)
            continue;
        for (int i = pr->vs_first[vs]; i < pr->vs_first[vs + 1]; i++)
            out[n++] = i;
    }
    if (pr->interlace)
        out[n++] = pr->ninst - 1;
    return n;
}

/* Parameter elements held by stage dev (its virtual stages' units), or with
 * experts only, of them the expert parameters. */
static double stage_sum(const pb *b, int dev, int experts)
{
    const sim_profile *pr = b->pr;
    double sum = 0;
    for (int c = 0; c < b->p->vpp; c++) {
        int vs = c * b->p->pp + dev;
        if (vs >= b->nvs)
            continue;
        for (int i = pr->vs_first[vs]; i < pr->vs_first[vs + 1]; i++)
            sum += experts ? pr->unit[pr->inst[i]].eparams : pr->unit[pr->inst[i]].params;
    }
    if (pr->interlace && !experts) /* the embedding and the head on every stage, the tied weight once */
        sum += pr->unit[pr->inst[0]].params + pr->unit[pr->inst[pr->ninst - 1]].params - pr->shared_params;
    if (b->p->pp == 1 && !experts)
        sum -= pr->shared_params; /* one copy of the tied embedding */
    return sum;
}

static double stage_params(const pb *b, int dev) { return stage_sum(b, dev, 0); }
static double stage_eparams(const pb *b, int dev) { return stage_sum(b, dev, 1); }

/* The collectives of schedule sc over group g on channel 1 of stage dev, each
 * after the backward that made its gradients (grad_inst); `all` waits for
 * every one. */
static void play_schedule(pb *b, int dev, const wf_comm_schedule *sc, const int *grad_inst, const wf_group *g,
                          const char *ar_name, const char *rs_name, wf_sim_cat cat, int pool, int all, int *ids)
{
    int ch = wf_sim_channel(b->sb.s, dev, 1);
    int prev_issue = -1;
    for (int k = 0; k < sc->nops && b->sb.st == WF_OK; k++) {
        const wf_comm_op *op = &sc->ops[k];
        wf_sim_task_desc t;
        wf_sim_task_desc_init(&t);
        t.name = op->kind == WF_COLL_REDUCE_SCATTER ? rs_name : ar_name;
        t.cat = cat;
        t.dur_ns = wf_sim_ns(wf_coll_time(b->c, op->kind, g, op->bytes));
        t.nres = 1;
        t.res = &ch;
        t.priority = op->priority;
        t.pool = pool;
        t.pool_amount = (int64_t)ceil(op->bytes);
        t.not_before_ns = op->tick >= 0 ? wf_sim_ns(op->issue_s) : 0;
        t.layer = op->min_layer;
        t.bytes = op->bytes;
        int id = sim_task(&b->sb, &t);
        if (id < 0)
            return;
        if (ids)
            ids[k] = id;
        int gate = id;
        if (op->after >= 0) {
            gate = add_task(b, "issue", WF_SIM_CAT_MARKER, 0, -1, -1, -1, -1, -1);
            dep(b, gate, prev_issue);
            dep(b, id, gate);
            prev_issue = gate;
        }
        for (int q = 0; q < op->nparts; q++)
            dep(b, gate, b->inst_grad_task[grad_inst[sc->parts[op->first_part + q].grad]]);
        /* overlap=0 (local DDP, DeepSpeed's overlap_comm off): the
         * reduction starts when the stage's backward is over. */
        if (!b->p->overlap)
            dep(b, gate, b->stage_last[dev]);
        dep(b, all, id);
    }
}

/* Gradient collectives of one stage (pass 2), after its backward: the data-
 * parallel group's, then on the same channel the model-parallel axis's
 * reduction of the weights it holds replicated under split ops (as the
 * estimate orders them). */
static void build_dp(pb *b, int dev)
{
    stage_dp *d = &b->dp[dev];
    const wf_comm_schedule *sc = &d->sc;
    int pool = -1;
    if (sc->kind == WF_COMM_BYTESCHEDULER && sc->credit_bytes > 0 && sc->nops > 0) {
        pool = wf_sim_add_pool(b->sb.s, "credit", (int64_t)ceil(sc->credit_bytes));
        if (pool < 0 && b->sb.st == WF_OK)
            b->sb.st = pool;
    }
    int all = add_task(b, "gradients reduced", WF_SIM_CAT_MARKER, 0, -1, -1, -1, -1, -1);
    play_schedule(b, dev, sc, d->grad_inst, &b->pr->dp_group, "dp all-reduce", "dp reduce-scatter", WF_SIM_CAT_DP_COMM,
                  pool, all, d->op_task);
    play_schedule(b, dev, &d->mp, d->mp_inst, &b->pr->tp_group, "mp all-reduce (gradients)", "mp all-reduce (gradients)",
                  WF_SIM_CAT_TP_COMM, -1, all, NULL);
    for (int j = 0; j < b->pr->nsub; j++)
        play_schedule(b, dev, &d->sub[j], d->sub_inst[j], &b->pr->sub_group[j], "mp sub-axis all-reduce (gradients)",
                      "mp sub-axis all-reduce (gradients)", WF_SIM_CAT_TP_COMM, -1, all, NULL);
    b->stage_dp_last[dev] = all;
}

/* The end of the iteration on every stage: tied-embedding all-reduce, the
 * optimizer step, ZeRO's all-gather of the updated weights. */
static void build_tail(pb *b)
{
    const wf_plan *p = b->p;
    const sim_profile *pr = b->pr;
    int emb = -1;
    if (p->pp > 1 && pr->shared_params > 0 && !pr->interlace) {
        int res[2] = {wf_sim_channel(b->sb.s, 0, 1), wf_sim_channel(b->sb.s, p->pp - 1, 1)};
        wf_axis_ranks ax[WF_AXIS_COUNT];
        wf_rank_axes_dense(p->tp, p->cp, p->dp, p->pp, ax);
        wf_group ends = wf_group_place(b->c, 2, ax[WF_AXIS_PP].stride * (p->pp - 1)); /* first and last stage */
        wf_sim_task_desc t;
        wf_sim_task_desc_init(&t);
        t.name = "embedding all-reduce";
        t.cat = WF_SIM_CAT_DP_COMM;
        t.dur_ns = wf_sim_ns(wf_coll_time(b->c, WF_COLL_ALLREDUCE, &ends, pr->shared_params * pr->grad_bytes));
        t.nres = 2;
        t.res = res;
        t.bytes = pr->shared_params * pr->grad_bytes;
        emb = sim_task(&b->sb, &t);
        int ends_dev[2] = {0, p->pp - 1};
        for (int e = 0; e < 2; e++) {
            dep(b, emb, b->stage_last[ends_dev[e]]);
            dep(b, emb, b->stage_dp_last[ends_dev[e]]);
        }
    }
    for (int dev = 0; dev < p->pp; dev++) {
        b->prev = b->stage_last[dev];
        b->nwait = 0;
        /* ByteScheduler's collectives run on into the next forward, which
         * steps each layer's weights (bs_gates). */
        int carry = b->with_dp && b->bs_carry;
        if (b->stage_dp_last[dev] >= 0 && !carry)
            push_wait(b, b->stage_dp_last[dev]);
        if (emb >= 0 && (dev == 0 || dev == p->pp - 1))
            push_wait(b, emb);
        if ((b->with_dp && dear_split(b) && p->dp > 1 && !distopt(b)) || carry) {
            /* DeAR stepped each group before its forward. */
            b->stage_end[dev] = close_op(b);
            continue;
        }
        double params = stage_params(b, dev);
        double shard = p->zero >= 1 ? params / (double)p->dp : params;
        stream_task(b, dev, "optimizer step", WF_SIM_CAT_OPTIMIZER, shard * pr->opt_bytes_per_param / pr->mem_bw_bps,
                    -1, -1, -1);
        if (p->zero >= 1 && p->zero < 3 && p->dp > 1 && !(b->with_dp && distopt(b))) {
            double wbytes = params * pr->elem_bytes;
            int ag = add_task(b, "dp all-gather (weights)", WF_SIM_CAT_DP_COMM,
                              wf_coll_time(b->c, WF_COLL_ALLGATHER, &pr->dp_group, wbytes),
                              wf_sim_channel(b->sb.s, dev, 1), -1, -1, -1, wbytes);
            dep(b, ag, b->prev);
        }
        b->stage_end[dev] = close_op(b);
    }
}

static int pipe_cap(const wf_plan *p, int m)
{
    return 2 * m * p->vpp;
}

/* A forward without gradient (recycling, nf1b.c) of micro-batch mb on
 * stage dev (virtual stage vs): the stage's forward folded into one task,
 * nothing kept, then its send down the pipeline, or on the last stage the
 * recycled outputs' trip back to the first (on a channel: the stage goes
 * on). *first and *end: what depends on it waits for *end. */
static void build_nograd(pb *b, int dev, int vs, int mb, int *first, int *end)
{
    const sim_profile *pr = b->pr;
    double dur = 0;
    for (int i = pr->vs_first[vs]; i < pr->vs_first[vs + 1]; i++)
        dur += pr->unit[pr->inst[i]].fwd_comp + pr->unit[pr->inst[i]].fwd_exposed;
    *first = open_op(b, "no-gradient start", mb, 0);
    *end = stream_task(b, dev, "forward (no gradient)", WF_SIM_CAT_FORWARD, dur, mb, -1, 0);
    if (vs + 1 < b->nvs) {
        *end = stream_task(b, dev, "send activation", WF_SIM_CAT_PP_COMM, pr->vs_send_s[vs], mb, -1, 0);
    } else if (b->nvs > 1) {
        int t = add_task(b, "send recycled", WF_SIM_CAT_PP_COMM, pr->rec_send_s, wf_sim_channel(b->sb.s, dev, 1), mb,
                         -1, 0, pr->rec_bytes);
        dep(b, t, *end);
        *end = t;
    }
}

/* Device dev's stream starts empty; with a data-parallel schedule its
 * groups start ungathered, and the first instance's all-gathers (DeAR's,
 * the distributed optimizer's) open the iteration. */
static void open_device(pb *b, int dev)
{
    b->prev = -1;
    b->nwait = b->nbg = 0;
    if (!b->with_dp || !b->dp)
        return;
    b->dp[dev].next_group = 0;
    for (int g = 0; g < b->dp[dev].ngroups; g++)
        b->dp[dev].ag_of[g] = -1;
    if (dear_split(b) && b->dp[dev].ngroups > 0)
        dear_gather(b, dev, 0, -1);
    for (int g = 1; distopt(b) && g < b->dp[dev].ngroups; g++)
        if (b->dp[dev].group_first[g] != b->dp[dev].group_first[g - 1])
            dear_gather(b, dev, g, b->dp[dev].ag_of[g - 1]);
}

/* One all-device segment of an interlaced pipeline on device dev: after
 * the segment's start (a marker every device's stream leads to: the
 * segment's collectives hold every device), the unit's steps on this
 * device; its end leads to the segment's end marker. Returns the device's
 * first task of it. */
static int segment_on(pb *b, int dev, int start, int end, int kind, int mb, int first)
{
    const sim_profile *pr = b->pr;
    close_op(b);
    dep(b, start, b->prev);
    b->prev = start;
    int unit_inst = kind == WF_PTASK_HEAD ? pr->ninst - 1 : 0;
    const sim_unit *u = &pr->unit[pr->inst[unit_inst]];
    int head = open_op(b, kind == WF_PTASK_EMB_FWD ? "embedding forward (all devices)"
                        : kind == WF_PTASK_HEAD    ? "head and loss (all devices)"
                                                   : "embedding backward (all devices)",
                       mb, 0);
    if (first && b->with_dp && kind != WF_PTASK_EMB_BWD) {
        if (dear_split(b))
            dear_gates(b, dev, unit_inst, mb);
        if (b->bs_carry)
            bs_gates(b, dev, unit_inst, unit_inst + 1, mb);
    }
    if (kind != WF_PTASK_EMB_BWD)
        run_steps(b, dev, u->fwd, u->nfwd, mb, -1, 0);
    if (kind != WF_PTASK_EMB_FWD) {
        int from = wf_sim_ntasks(b->sb.s);
        run_steps(b, dev, u->bwd, u->nbwd, mb, -1, 0);
        if (kind == WF_PTASK_HEAD && u->transient_bytes + u->act_bytes > 0 && b->sb.st == WF_OK &&
            from < wf_sim_ntasks(b->sb.s))
            b->sb.st = wf_sim_add_buffer(b->sb.s, dev, (int64_t)(u->transient_bytes + u->act_bytes), head, 1,
                                         &b->prev);
    }
    dep(b, end, close_op(b));
    return head;
}

/* The interlaced pipeline (plan interlace=1): each device's tasks in the
 * order wf_plan_interlace_order gives, the stages' layers as 1F1B's, the
 * segments on every device between a start and an end marker. A stage's
 * first forward of a micro-batch follows the embedding's forward of it, the
 * head follows the last stage's forward, the last stage's backward follows
 * the head, the embedding's backward follows stage 0's backward. */
static void build_graph_interlaced(pb *b)
{
    const wf_plan *p = b->p;
    const sim_profile *pr = b->pr;
    const int P = p->pp, m = b->m, n5 = 5 * m;
    wf_plan_task *ops = malloc((size_t)n5 * sizeof *ops);
    int *seg = malloc((size_t)WF_PTASK_COUNT * (size_t)m * 2 * sizeof *seg); /* start, end per (kind, mb) */
    int *emb_first = malloc((size_t)P * (size_t)m * sizeof *emb_first);   /* each device's EF(j) */
    if (!ops || !seg || !emb_first) {
        free(ops);
        free(seg);
        free(emb_first);
        b->sb.st = wf_errorf(WF_NOMEM, "out of memory building a plan's task graph");
        return;
    }
    for (int k = 0; k < WF_PTASK_COUNT * m; k++) {
        seg[2 * k] = add_task(b, "segment start", WF_SIM_CAT_MARKER, 0, -1, -1, -1, -1, -1);
        seg[2 * k + 1] = add_task(b, "segment end", WF_SIM_CAT_MARKER, 0, -1, -1, -1, -1, -1);
    }
#define SEG_START(kind, mb) seg[2 * ((kind) * m + (mb))]
#define SEG_END(kind, mb) seg[2 * ((kind) * m + (mb)) + 1]
    for (int dev = 0; dev < P && b->sb.st == WF_OK; dev++) {
        char name[64];
        snprintf(name, sizeof name, "stage %d", dev);
        int d = wf_sim_add_device(b->sb.s, name, 2, (int64_t)p->tp * p->dp);
        if (d < 0)
            b->sb.st = d;
    }
    const double emb_act = pr->unit[pr->inst[0]].act_bytes;
    for (int dev = 0; dev < P && b->sb.st == WF_OK; dev++) {
        b->sb.st = wf_sim_set_mem_base(b->sb.s, dev, (int64_t)(stage_params(b, dev) * pr->bytes_per_param +
                                                              pr->buffer_bytes));
        int n = 0;
        if (b->sb.st == WF_OK)
            b->sb.st = wf_plan_interlace_order(P, m, dev, ops, n5, &n);
        if (b->sb.st)
            break;
        open_device(b, dev);
        int seen[WF_PTASK_COUNT] = {0};
        for (int k = 0; k < n && b->sb.st == WF_OK; k++) {
            const wf_plan_task t = ops[k];
            if (wf_ptask_all_devices(t.kind)) {
                int h = segment_on(b, dev, SEG_START(t.kind, t.mb), SEG_END(t.kind, t.mb), t.kind, t.mb,
                                   !seen[t.kind]++);
                if (t.kind == WF_PTASK_EMB_FWD)
                    emb_first[dev * m + t.mb] = h;
                else if (t.kind == WF_PTASK_EMB_BWD && emb_act > 0 && b->sb.st == WF_OK)
                    b->sb.st = wf_sim_add_buffer(b->sb.s, dev, (int64_t)emb_act, emb_first[dev * m + t.mb], 1,
                                                 &b->prev);
                continue;
            }
            if (t.kind == WF_PTASK_FWD) {
                build_forward(b, dev, dev, t.mb, 0, t.mb == 0);
                if (dev + 1 < P)
                    b->f_send[dev * m + t.mb] = stream_task(b, dev, "send activation", WF_SIM_CAT_PP_COMM,
                                                            pr->vs_send_s[dev], t.mb, -1, 0);
            } else {
                build_backward(b, dev, dev, t.mb, 0, t.mb == m - 1);
                if (dev > 0)
                    b->b_send[dev * m + t.mb] = stream_task(b, dev, "send gradient", WF_SIM_CAT_PP_COMM,
                                                            pr->vs_send_s[dev - 1], t.mb, -1, 0);
            }
        }
        b->stage_last[dev] = close_op(b);
    }
    /* The segments' inputs, the stages' across devices. */
    for (int mb = 0; mb < m && b->sb.st == WF_OK; mb++) {
        dep(b, SEG_START(WF_PTASK_HEAD, mb), b->f_last[(P - 1) * m + mb]);
        dep(b, SEG_START(WF_PTASK_EMB_BWD, mb), b->b_last[mb]);
        for (int vs = 0; vs < P; vs++) {
            int i = vs * m + mb;
            dep(b, b->f_first[i], vs == 0 ? SEG_END(WF_PTASK_EMB_FWD, mb) : b->f_send[(vs - 1) * m + mb]);
            dep(b, b->b_first[i], vs == P - 1 ? SEG_END(WF_PTASK_HEAD, mb) : b->b_send[(vs + 1) * m + mb]);
            double act = 0;
            for (int k = pr->vs_first[vs]; k < pr->vs_first[vs + 1]; k++)
                act += pr->unit[pr->inst[k]].act_bytes;
            if (act > 0 && b->sb.st == WF_OK)
                b->sb.st = wf_sim_add_buffer(b->sb.s, vs, (int64_t)act, b->f_first[i], 1, &b->b_last[i]);
        }
        /* Stage 0 keeps the embedding's output until its forward takes it. */
        if (pr->x0_bytes > 0 && b->sb.st == WF_OK)
            b->sb.st = wf_sim_add_buffer(b->sb.s, 0, (int64_t)pr->x0_bytes, SEG_END(WF_PTASK_EMB_FWD, mb), 1,
                                         &b->f_first[mb]);
    }
    /* The segments' gradients are made by the last of each. */
    b->inst_grad_task[0] = SEG_END(WF_PTASK_EMB_BWD, m - 1);
    b->inst_grad_task[pr->ninst - 1] = SEG_END(WF_PTASK_HEAD, m - 1);
#undef SEG_START
#undef SEG_END
    free(ops);
    free(seg);
    free(emb_first);
    for (int dev = 0; dev < P; dev++) {
        b->stage_dp_last[dev] = -1;
        if (b->with_dp && b->sb.st == WF_OK)
            build_dp(b, dev);
    }
    if (b->sb.st == WF_OK)
        build_tail(b);
}

/* Builds the whole graph into b->sb.s (fresh). */
static void build_graph(pb *b)
{
    if (b->pr->interlace) {
        build_graph_interlaced(b);
        return;
    }
    const wf_plan *p = b->p;
    const sim_profile *pr = b->pr;
    int P = p->pp, m = b->m, nvs = b->nvs;
    /* Recycling: the order has n_rec forwards without gradient per
     * micro-batch besides the forward and the backward (nf1b.c). */
    const int nr = pr->n_rec > 0 && p->vpp == 1 ? pr->n_rec : 0;
    int cap = pipe_cap(p, m) + nr * m;
    wf_pipe_op *ops = malloc((size_t)cap * sizeof *ops);
    int *last_b = malloc((size_t)(p->vpp + 1) * sizeof *last_b);
    int *first_f = malloc((size_t)(p->vpp + 1) * sizeof *first_f);
    int *ngr = nr ? malloc((size_t)cap * 3 * sizeof *ngr) : NULL; /* [cap] the round of a no-gradient pass, else -1 */
    size_t nng = (size_t)nr * (size_t)nvs * (size_t)m;
    int *ng_first = nr ? malloc(2 * nng * sizeof *ng_first) : NULL, *ng_end = ng_first + nng;
    if (!ops || !last_b || !first_f || (nr && (!ngr || !ng_first))) {
        free(ops);
        free(last_b);
        free(first_f);
        free(ngr);
        free(ng_first);
        b->sb.st = wf_errorf(WF_NOMEM, "out of memory building a plan's task graph");
        return;
    }
    for (int dev = 0; dev < P && b->sb.st == WF_OK; dev++) {
        char name[64];
        snprintf(name, sizeof name, "stage %d", dev);
        int d = wf_sim_add_device(b->sb.s, name, 2, (int64_t)p->tp * p->dp);
        if (d < 0) {
            b->sb.st = d;
            break;
        }
    }
    for (int dev = 0; dev < P && b->sb.st == WF_OK; dev++) {
        double params = stage_params(b, dev), eparams = stage_eparams(b, dev);
        b->sb.st = wf_sim_set_mem_base(b->sb.s, dev,
                                       (int64_t)((params - eparams) * pr->bytes_per_param +
                                                 eparams * pr->expert_bytes_per_param + pr->buffer_bytes));
        int n = 0;
        if (b->sb.st == WF_OK && nr) {
            int *kind = ngr + cap, *mbs = ngr + 2 * cap;
            n = wf_cost_nf_order(dev, P, m, p->pipe == WF_PIPE_GPIPE, nr, p->nf1b, cap, kind, ngr, mbs);
            if (n < 0)
                b->sb.st = wf_errorf(WF_INTERNAL, "pipeline order of %d recycles: %d passes are too many", nr, cap);
            for (int k = 0; k < n; k++) {
                ops[k].mb = mbs[k];
                ops[k].chunk = 0;
                ops[k].bwd = kind[k] == 2;
                if (kind[k] != 0)
                    ngr[k] = -1;
            }
        } else if (b->sb.st == WF_OK) {
            b->sb.st = wf_pipe_order(p->pipe, P, m, p->vpp, dev, ops, cap, &n);
        }
        if (b->sb.st)
            break;
        for (int c = 0; c < p->vpp; c++)
            last_b[c] = first_f[c] = -1;
        for (int k = 0; k < n; k++) {
            if (ngr && ngr[k] >= 0)
                continue;
            if (ops[k].bwd)
                last_b[ops[k].chunk] = k;
            else if (first_f[ops[k].chunk] < 0)
                first_f[ops[k].chunk] = k;
        }
        open_device(b, dev);
        /* ZeRO-3: each op's weights gathered one op ahead. */
        int zero3 = p->zero == 3 && p->dp > 1;
        int prev_end[2] = {-1, -1};
        for (int k = 0; k < n && b->sb.st == WF_OK; k++) {
            int vs = ops[k].chunk * P + dev, mb = ops[k].mb;
            if (ngr && ngr[k] >= 0) {
                size_t at = ((size_t)ngr[k] * (size_t)nvs + (size_t)vs) * (size_t)m + (size_t)mb;
                build_nograd(b, dev, vs, mb, &ng_first[at], &ng_end[at]);
                continue;
            }
            int gather = -1;
            if (zero3) {
                double wb = 0, ewb = 0;
                for (int i = pr->vs_first[vs]; i < pr->vs_first[vs + 1]; i++) {
                    wb += pr->unit[pr->inst[i]].params * pr->elem_bytes;
                    ewb += pr->unit[pr->inst[i]].eparams * pr->elem_bytes;
                }
                if (P == 1)
                    wb -= pr->shared_params * pr->elem_bytes; /* one copy of the tied embedding */
                /* Expert weights are sharded over the expert-data-parallel
                 * ranks (stride ep x etp), so their gather runs over that
                 * group, the dense weights' over the data-parallel group,
                 * as their memory is counted (expert_bytes_per_param) and
                 * the estimate gathers them (cost/estimate.c, add_zero3). */
                double gt = wf_coll_time(b->c, WF_COLL_ALLGATHER, &pr->dp_group, wb - ewb);
                if (ewb > 0)
                    gt += wf_coll_time(b->c, WF_COLL_ALLGATHER, &pr->edp_group, ewb);
                gather = add_task(b, "zero-3 all-gather", WF_SIM_CAT_DP_COMM, gt,
                                  wf_sim_channel(b->sb.s, dev, 1), mb, -1, ops[k].chunk, wb);
                dep(b, gather, prev_end[0]);
                push_wait(b, gather);
            }
            if (!ops[k].bwd) {
                build_forward(b, dev, vs, mb, ops[k].chunk, k == first_f[ops[k].chunk]);
                if (vs + 1 < nvs && (vs + 1) % P != dev) {
                    b->f_send[vs * m + mb] = stream_task(b, dev, "send activation", WF_SIM_CAT_PP_COMM,
                                                         pr->vs_send_s[vs], mb, -1, ops[k].chunk);
                }
            } else {
                build_backward(b, dev, vs, mb, ops[k].chunk, k == last_b[ops[k].chunk]);
                if (vs > 0 && (vs - 1) % P != dev) {
                    b->b_send[vs * m + mb] = stream_task(b, dev, "send gradient", WF_SIM_CAT_PP_COMM,
                                                         pr->vs_send_s[vs - 1], mb, -1, ops[k].chunk);
                }
            }
            prev_end[0] = prev_end[1];
            prev_end[1] = b->prev;
        }
        b->stage_last[dev] = close_op(b);
    }
    free(ops);
    free(last_b);
    free(first_f);
    free(ngr);
    /* Recycling: round r of a micro-batch on a stage after round r on the
     * stage before; on the first stage after round r - 1 came back from the
     * last; its forward that learns after the last round came back. The
     * first stage holds the recycled outputs from the first round to that
     * forward. */
    for (int r = 0; nr && r < nr && b->sb.st == WF_OK; r++)
        for (int vs = 0; vs < nvs; vs++)
            for (int mb = 0; mb < m; mb++) {
                size_t at = ((size_t)r * (size_t)nvs + (size_t)vs) * (size_t)m + (size_t)mb;
                if (vs > 0)
                    dep(b, ng_first[at], ng_end[at - (size_t)m]);
                else if (r > 0)
                    dep(b, ng_first[at], ng_end[((size_t)(r - 1) * (size_t)nvs + (size_t)nvs - 1) * (size_t)m + mb]);
                if (r == nr - 1 && vs == nvs - 1) {
                    dep(b, b->f_first[mb], ng_end[at]);
                    if (pr->rec_bytes > 0 && b->sb.st == WF_OK)
                        b->sb.st = wf_sim_add_buffer(b->sb.s, 0, (int64_t)pr->rec_bytes, ng_first[mb], 1,
                                                     &b->f_first[mb]);
                }
            }
    free(ng_first);
    if (b->sb.st)
        return;
    /* Across stages: a forward needs the previous virtual stage's forward (its
     * send when on another device); a backward the next one's backward. */
    for (int vs = 0; vs < nvs; vs++) {
        for (int mb = 0; mb < m; mb++) {
            int i = vs * m + mb;
            if (vs > 0) {
                int from = b->f_send[(vs - 1) * m + mb] >= 0 ? b->f_send[(vs - 1) * m + mb]
                                                               : b->f_last[(vs - 1) * m + mb];
                dep(b, b->f_first[i], from);
            }
            if (vs + 1 < nvs) {
                int from = b->b_send[(vs + 1) * m + mb] >= 0 ? b->b_send[(vs + 1) * m + mb]
                                                               : b->b_last[(vs + 1) * m + mb];
                dep(b, b->b_first[i], from);
            } else {
                dep(b, b->b_first[i], b->f_last[i]);
            }
            double act = 0;
            for (int k = pr->vs_first[vs]; k < pr->vs_first[vs + 1]; k++)
                act += pr->unit[pr->inst[k]].act_bytes;
            if (act > 0 && b->sb.st == WF_OK)
                b->sb.st = wf_sim_add_buffer(b->sb.s, vs % P, (int64_t)act, b->f_first[i], 1, &b->b_last[i]);
        }
    }
    for (int dev = 0; dev < P; dev++) {
        b->stage_dp_last[dev] = -1;
        if (b->with_dp && b->sb.st == WF_OK)
            build_dp(b, dev);
    }
    if (b->sb.st == WF_OK)
        build_tail(b);
}

/* ---- schedules per stage ---------------------------------------------------------------- */

/* Stage dev's partial gradients over the model-parallel axis (which < 0:
 * the whole axis; else sub-axis `which` of a mesh of two model-parallel
 * axes), one per unit instance, grouped by schedule cs over that group
 * (DeAR's, whose halves gate the next forward, as DDP's buckets). */
static wf_status mp_schedule(pb *b, int dev, const wf_comm_sched *cs, const wf_ns *ready_ns, wf_arena *a,
                             stage_dp *d, int which)
{
    const wf_plan *p = b->p;
    const sim_profile *pr = b->pr;
    wf_comm_schedule *out = which < 0 ? &d->mp : &d->sub[which];
    int **inst = which < 0 ? &d->mp_inst : &d->sub_inst[which];
    memset(out, 0, sizeof *out);
    *inst = wf_arena_alloc(a, (size_t)(pr->ninst + 1) * sizeof **inst);
    wf_grad *grads = wf_arena_alloc(a, (size_t)(pr->ninst + 1) * sizeof *grads);
    if (!*inst || !grads)
        return wf_errorf(WF_NOMEM, "out of memory scheduling gradients");
    int n = 0;
    int *own = wf_arena_alloc(a, (size_t)(pr->ninst + 1) * sizeof *own);
    if (!own)
        return wf_errorf(WF_NOMEM, "out of memory scheduling gradients");
    int nown = p->tp > 1 ? stage_insts(pr, p, dev, own) : 0;
    for (int q = 0; q < nown; q++) {
        int i = own[q];
        const sim_unit *u = &pr->unit[pr->inst[i]];
        double e = which < 0 ? u->mp_params : u->sub_params[which];
        if (!(e > 0))
            continue;
        grads[n].bytes = e * pr->grad_bytes;
        grads[n].ready_s = (double)ready_ns[i] / 1e9;
        grads[n].layer = i;
        (*inst)[n++] = i;
    }
    if (n == 0)
        return WF_OK;
    wf_comm_sched ms = *cs;
    if (ms.kind == WF_COMM_DEAR)
        ms = (wf_comm_sched){WF_COMM_DDP, 0};
    wf_sched_env env;
    wf_status st = sim_coll_env(b->c, which < 0 ? &pr->tp_group : &pr->sub_group[which], pr->grad_bytes, a, &env);
    return st ? st : wf_sched_build(&ms, grads, n, &env, a, out);
}

/* Groups each stage's gradients by the schedule, from the ready times of
 * the first pass. */
static wf_status plan_schedules(pb *b, const wf_comm_sched *cs, const wf_ns *ready_ns, wf_arena *a)
{
    const wf_plan *p = b->p;
    const sim_profile *pr = b->pr;
    b->dp = wf_arena_alloc(a, (size_t)p->pp * sizeof *b->dp);
    int ntens = 0;
    for (int i = 0; i < pr->ninst; i++)
        ntens += pr->unit[pr->inst[i]].ntensors;
    wf_grad *grads = wf_arena_alloc(a, (size_t)(ntens + 1) * sizeof *grads);
    if (!b->dp || !grads)
        return wf_errorf(WF_NOMEM, "out of memory scheduling gradients");
    wf_sched_env env;
    wf_status st = sim_coll_env(b->c, &pr->dp_group, pr->grad_bytes, a, &env);
    if (st)
        return st;
    for (int dev = 0; dev < p->pp; dev++) {
        stage_dp *d = &b->dp[dev];
        d->grad_inst = wf_arena_alloc(a, (size_t)(ntens + 1) * sizeof *d->grad_inst);
        if (!d->grad_inst)
            return wf_errorf(WF_NOMEM, "out of memory scheduling gradients");
        int n = 0;
        int *own = wf_arena_alloc(a, (size_t)(pr->ninst + 1) * sizeof *own);
        if (!own)
            return wf_errorf(WF_NOMEM, "out of memory scheduling gradients");
        int nown = stage_insts(pr, p, dev, own);
        for (int q = 0; q < nown; q++) {
            int i = own[q];
            const sim_unit *u = &pr->unit[pr->inst[i]];
            for (int k = 0; k < u->ntensors && p->dp > 1; k++) {
                if (u->tensor_params[k] <= 0)
                    continue;
                grads[n].bytes = u->tensor_params[k] * pr->grad_bytes;
                grads[n].ready_s = (double)ready_ns[i] / 1e9;
                grads[n].layer = i;
                d->grad_inst[n++] = i;
            }
        }
        st = wf_sched_build(cs, grads, n, &env, a, &d->sc);
        if (st == WF_OK) {
            d->op_task = wf_arena_alloc(a, (size_t)(d->sc.nops + 1) * sizeof *d->op_task);
            if (!d->op_task)
                return wf_errorf(WF_NOMEM, "out of memory scheduling gradients");
            for (int k = 0; k < d->sc.nops; k++)
                d->op_task[k] = -1;
        }
        for (int w = -1; w < pr->nsub && st == WF_OK; w++)
            st = mp_schedule(b, dev, cs, ready_ns, a, d, w);
        if (st)
            return st;
        if (p->zero >= 1)
            for (int k = 0; k < d->sc.nops; k++)
                d->sc.ops[k].kind = WF_COLL_REDUCE_SCATTER;
        if (cs->kind == WF_COMM_DEAR && p->zero < 3) {
            /* Groups in forward order: the reduce-scatters were issued last group first. */
            int G = d->sc.nops;
            d->ngroups = G;
            d->group_first = wf_arena_alloc(a, (size_t)(G + 1) * sizeof *d->group_first);
            d->group_opt_s = wf_arena_alloc(a, (size_t)(G + 1) * sizeof *d->group_opt_s);
            d->group_bytes = wf_arena_alloc(a, (size_t)(G + 1) * sizeof *d->group_bytes);
            d->ag_of = wf_arena_alloc(a, (size_t)(G + 1) * sizeof *d->ag_of);
            if (!d->group_first || !d->group_opt_s || !d->group_bytes || !d->ag_of)
                return wf_errorf(WF_NOMEM, "out of memory scheduling gradients");
            for (int g = 0; g < G; g++) {
                const wf_comm_op *op = &d->sc.ops[G - 1 - g];
                d->group_first[g] = op->min_layer;
                d->group_bytes[g] = p->zero >= 1 ? op->bytes / pr->grad_bytes * pr->elem_bytes : op->bytes;
                double params = op->bytes / pr->grad_bytes;
                if (p->zero >= 1)
                    params /= (double)p->dp;
                d->group_opt_s[g] = params * pr->opt_bytes_per_param / pr->mem_bw_bps;
            }
        }
    }
    return WF_OK;
}

/* ---- running ------------------------------------------------------------------------------ */

/* One pass: builds and runs; on success returns the simulation in *keep. */
static wf_status run_pass(pb *b, wf_sim **keep)
{
    *keep = NULL;
    wf_status st = wf_sim_create(&b->sb.s);
    if (st)
        return st;
    size_t n = (size_t)b->nvs * (size_t)b->m;
    int *ids = malloc(6 * n * sizeof *ids);
    if (!ids) {
        wf_sim_free(b->sb.s);
        return wf_errorf(WF_NOMEM, "out of memory building a plan's task graph");
    }
    for (size_t i = 0; i < 6 * n; i++)
        ids[i] = -1;
    b->f_first = ids;
    b->f_last = ids + n;
    b->f_send = ids + 2 * n;
    b->b_first = ids + 3 * n;
    b->b_last = ids + 4 * n;
    b->b_send = ids + 5 * n;
    for (int i = 0; i < b->pr->ninst; i++)
        b->inst_grad_task[i] = -1;
    b->sb.st = WF_OK;
    build_graph(b);
    free(ids);
    st = b->sb.st;
    if (st == WF_OK)
        st = wf_sim_run(b->sb.s);
    if (st) {
        wf_sim_free(b->sb.s);
        b->sb.s = NULL;
        return st;
    }
    *keep = b->sb.s;
    return WF_OK;
}

/* The iteration: the whole graph; under ByteScheduler's carry-over the
 * period, the last stage's stream end (its collectives left running are the
 * next iteration's, which the gates of its forward wait for). */
static wf_ns pass_time(const pb *b, wf_sim *s)
{
    if (!(b->with_dp && b->bs_carry))
        return wf_sim_makespan_ns(s);
    wf_ns t = 0;
    for (int dev = 0; dev < b->p->pp; dev++) {
        wf_ns e = wf_sim_task_end_ns(s, b->stage_end[dev]);
        t = e > t ? e : t;
    }
    return t;
}

/* ByteScheduler: the gates of the next pass from this one, each instance's
 * collectives' end less the period. Returns the largest change (ns). */
static wf_ns bs_regate(pb *b, wf_sim *s)
{
    const sim_profile *pr = b->pr;
    wf_ns T = pass_time(b, s), moved = 0;
    wf_ns *end = calloc((size_t)pr->ninst + 1, sizeof *end);
    if (!end) {
        if (b->sb.st == WF_OK)
            b->sb.st = wf_errorf(WF_NOMEM, "out of memory simulating a plan");
        return 0;
    }
    for (int dev = 0; dev < b->p->pp; dev++) {
        const stage_dp *d = &b->dp[dev];
        for (int k = 0; k < d->sc.nops; k++) {
            const wf_comm_op *op = &d->sc.ops[k];
            wf_ns e = wf_sim_task_end_ns(s, d->op_task[k]);
            for (int q = 0; q < op->nparts; q++) {
                int i = d->grad_inst[d->sc.parts[op->first_part + q].grad];
                end[i] = e > end[i] ? e : end[i];
            }
        }
    }
    for (int i = 0; i < pr->ninst; i++) {
        wf_ns g = end[i] > T ? end[i] - T : 0;
        wf_ns delta = g > b->bs_gate_ns[i] ? g - b->bs_gate_ns[i] : b->bs_gate_ns[i] - g;
        moved = delta > moved ? delta : moved;
        b->bs_gate_ns[i] = g;
    }
    free(end);
    return moved;
}

static void fill_result(const pb *b, wf_sim *s, wf_sim_plan_result *r)
{
    const wf_plan *p = b->p;
    r->iteration_time_s = (double)pass_time(b, s) / 1e9;
    r->nstages = p->pp;
    r->tasks = wf_sim_ntasks(s);
    r->coarse = b->coarse;
    /* The maxima below start from nothing: callers may pass a result they reuse. */
    r->peak_memory_bytes = 0;
    r->critical_stage = 0;
    double best = -1;
    for (int dev = 0; dev < p->pp; dev++) {
        wf_sim_device_stats ds;
        wf_sim_device_stats_of(s, dev, &ds);
        wf_sim_stage_result *x = &r->stage[dev];
        memset(x, 0, sizeof *x);
        wf_breakdown *bd = &x->bd;
        bd->compute = ds.busy_s[WF_SIM_CAT_FORWARD] + ds.busy_s[WF_SIM_CAT_BACKWARD];
        bd->recompute = ds.busy_s[WF_SIM_CAT_RECOMPUTE];
        bd->tp_comm = ds.exposed_s[WF_SIM_CAT_TP_COMM];
        bd->pp_comm = ds.busy_s[WF_SIM_CAT_PP_COMM];
        bd->dp_comm = ds.busy_s[WF_SIM_CAT_DP_COMM];
        bd->optimizer = ds.busy_s[WF_SIM_CAT_OPTIMIZER];
        bd->bubble = ds.idle_s;
        bd->exposed_comm = bd->pp_comm + ds.exposed_comm_s;
        x->busy_s = bd->compute + bd->recompute + bd->pp_comm + bd->optimizer;
        x->peak_memory_bytes = (double)ds.peak_mem_bytes;
        x->dp_comm_s = bd->dp_comm;
        x->dp_exposed_s = ds.exposed_s[WF_SIM_CAT_DP_COMM];
        if (x->busy_s > best) {
            best = x->busy_s;
            r->critical_stage = dev;
        }
        if (x->peak_memory_bytes > r->peak_memory_bytes)
            r->peak_memory_bytes = x->peak_memory_bytes;
    }
    r->breakdown = r->stage[r->critical_stage].bd;
    r->fits = r->peak_memory_bytes <= b->c->dev.mem_bytes;
    r->dp_collectives = 0;
    if (b->with_dp && b->dp) {
        const stage_dp *d = &b->dp[r->critical_stage];
        r->dp_collectives = d->sc.nops * (dear_split(b) ? 2 : 1);
    }
}

/* Plays the profile under each candidate schedule (one pass without data
 * parallelism) and keeps the fastest in *out (and its trace). */
static wf_status play_profile(const sim_profile *pr, const wf_plan *p, const wf_cluster *c, int64_t mm, int detail,
                              const wf_comm_sched *cand, int nc, const char *trace, wf_sim_plan_result *out)
{
    wf_arena a;
    wf_arena_init(&a, 1 << 16);
    pb b;
    memset(&b, 0, sizeof b);
    b.pr = pr;
    b.p = p;
    b.c = c;
    b.m = (int)mm;
    b.nvs = pr->nvs;
    b.a = &a;
    b.inst_grad_task = wf_arena_alloc(&a, (size_t)(pr->ninst + 1) * sizeof *b.inst_grad_task);
    b.stage_last = wf_arena_alloc(&a, (size_t)(p->pp + 1) * sizeof *b.stage_last);
    b.stage_dp_last = wf_arena_alloc(&a, (size_t)(p->pp + 1) * sizeof *b.stage_dp_last);
    b.stage_end = wf_arena_alloc(&a, (size_t)(p->pp + 1) * sizeof *b.stage_end);
    b.bs_gate_ns = wf_arena_alloc(&a, (size_t)(pr->ninst + 1) * sizeof *b.bs_gate_ns);
    b.bs_step_s = wf_arena_alloc(&a, (size_t)(pr->ninst + 1) * sizeof *b.bs_step_s);
    wf_ns *ready = wf_arena_alloc(&a, (size_t)(pr->ninst + 1) * sizeof *ready);
    if (!b.inst_grad_task || !b.stage_last || !b.stage_dp_last || !b.stage_end || !b.bs_gate_ns || !b.bs_step_s ||
        !ready) {
        wf_arena_free(&a);
        return wf_errorf(WF_NOMEM, "out of memory simulating a plan");
    }
    /* Fine or coarse. */
    double fine = 0;
    for (int i = 0; i < pr->ninst; i++) {
        const sim_unit *u = &pr->unit[pr->inst[i]];
        fine += u->nfwd + u->nbwd + u->nrec + 2;
    }
    fine *= (double)mm;
    b.coarse = detail == 2 || (detail == 0 && fine > MAX_FINE_TASKS);

    /* Pass 1: no gradient collectives; the gradients' ready times. */
    wf_sim *s = NULL;
    wf_status st;
    b.with_dp = 0;
    if ((st = run_pass(&b, &s)))
        goto done;
    int mp = 0;
    for (int u = 0; u < pr->nunits && p->tp > 1; u++)
        mp |= pr->unit[u].mp_params > 0 || pr->unit[u].sub_params[0] > 0 || pr->unit[u].sub_params[1] > 0;
    out->ideal_time_s = (double)wf_sim_makespan_ns(s) / 1e9;
    if (p->dp <= 1 && !mp) {
        out->comm = p->comm;
        out->candidates = 1;
        fill_result(&b, s, out);
        goto trace;
    }
    for (int i = 0; i < pr->ninst; i++)
        ready[i] = b.inst_grad_task[i] >= 0 ? wf_sim_task_end_ns(s, b.inst_grad_task[i]) : 0;
    wf_sim_free(s);
    s = NULL;
    /* ByteScheduler's per-layer steps: each instance's share of its stage's
     * step (the tied embedding's one copy spread over the stage). */
    for (int dev = 0; dev < p->pp; dev++) {
        double own = 0, held = stage_params(&b, dev);
        for (int cc = 0; cc < p->vpp; cc++) {
            int vs = cc * p->pp + dev;
            for (int i = vs < pr->nvs ? pr->vs_first[vs] : 0; vs < pr->nvs && i < pr->vs_first[vs + 1]; i++)
                own += pr->unit[pr->inst[i]].params;
        }
        for (int cc = 0; cc < p->vpp; cc++) {
            int vs = cc * p->pp + dev;
            for (int i = vs < pr->nvs ? pr->vs_first[vs] : 0; vs < pr->nvs && i < pr->vs_first[vs + 1]; i++)
                b.bs_step_s[i] = own > 0 ? pr->unit[pr->inst[i]].params * (held / own) * pr->opt_bytes_per_param /
                                               pr->mem_bw_bps
                                         : 0;
        }
    }

    /* Pass 2 per candidate schedule. */
    {
        int best = -1;
        wf_ns best_t = 0;
        wf_sim *best_s = NULL;
        stage_dp *best_dp = NULL;
        int best_carry = 0;
        for (int k = 0; k < nc; k++) {
            b.kind = cand[k].kind;
            b.with_dp = 1;
            if ((st = plan_schedules(&b, &cand[k], ready, &a))) {
                wf_sim_free(best_s);
                goto done;
            }
            /* ByteScheduler (with overlapped, unsharded data parallelism
             * and no model-parallel gradient reductions): its collectives
             * run on into the next forward. The steady state is the fixed
             * point of the gates: from none, each pass's collectives' ends
             * less its period gate the next pass, until they stop moving. */
            b.bs_carry = cand[k].kind == WF_COMM_BYTESCHEDULER && p->overlap && p->zero == 0 && p->dp > 1;
            for (int dev = 0; dev < p->pp && b.bs_carry; dev++)
                b.bs_carry = b.dp[dev].mp.nops == 0 && b.dp[dev].sub[0].nops == 0 && b.dp[dev].sub[1].nops == 0;
            for (int i = 0; i < pr->ninst; i++)
                b.bs_gate_ns[i] = 0;
            for (int round = 0;; round++) {
                if ((st = run_pass(&b, &s))) {
                    wf_sim_free(best_s);
                    goto done;
                }
                wf_ns moved = b.bs_carry ? bs_regate(&b, s) : 0;
                if ((st = b.sb.st)) {
                    wf_sim_free(s);
                    wf_sim_free(best_s);
                    s = NULL;
                    goto done;
                }
                if (moved <= BS_SETTLED_NS || round + 1 >= BS_MAX_ROUNDS)
                    break;
                wf_sim_free(s);
                s = NULL;
            }
            if (best < 0 || pass_time(&b, s) < best_t) {
                best = k;
                best_t = pass_time(&b, s);
                wf_sim_free(best_s);
                best_s = s;
                best_dp = b.dp;
                best_carry = b.bs_carry;
            } else {
                wf_sim_free(s);
            }
            s = NULL;
        }
        s = best_s;
        b.dp = best_dp;
        b.kind = cand[best].kind;
        b.bs_carry = best_carry;
        out->comm = cand[best];
        out->comm.threshold_bytes = b.dp[0].sc.threshold_bytes;
        out->candidates = nc;
        fill_result(&b, s, out);
    }
trace:
    if (trace)
        st = wf_sim_write_trace(s, trace);
done:
    wf_sim_free(s);
    wf_arena_free(&a);
    return st;
}

/* The data-parallel schedules a run plays: auto's list, or the plan's; with
 * `joint` (fusion search) the plan's kind at a sweep of its threshold. */
static int comm_candidates(const wf_plan *p, int joint, wf_comm_sched *cand)
{
    int nc = 0;
    if (p->dp <= 1) {
        cand[nc++] = p->comm;
    } else if (p->comm.kind == WF_COMM_AUTO) {
        nc = wf_comm_candidates(0, 0, cand, WF_COMM_CANDIDATES_MAX);
    } else if (joint && (p->comm.kind == WF_COMM_DDP || p->comm.kind == WF_COMM_HOROVOD ||
                         p->comm.kind == WF_COMM_DEAR || p->comm.kind == WF_COMM_BYTESCHEDULER)) {
        double base = p->comm.threshold_bytes;
        if (base <= 0)
            base = p->comm.kind == WF_COMM_DDP       ? WF_SCHED_DDP_BUCKET_BYTES
                   : p->comm.kind == WF_COMM_HOROVOD ? WF_SCHED_HOROVOD_BYTES
                   : p->comm.kind == WF_COMM_DEAR    ? WF_SCHED_DEAR_BYTES
                                                     : WF_SCHED_BYTESCHED_PARAMS * 4.0;
        static const double mult[] = {0.25, 0.5, 1, 2, 4};
        for (int i = 0; i < 5; i++)
            cand[nc++] = (wf_comm_sched){p->comm.kind, base * mult[i]};
    } else {
        cand[nc++] = p->comm;
    }
    return nc;
}

/* ---- joint operator and tensor fusion (DisCo) --------------------------------------------
 * A backtracking search over the fusion candidates (fuse first, then not),
 * each complete choice scored by simulating the plan under the tensor-fusion
 * candidates. A branch is pruned when its lower bound, the busiest stage's
 * stream time with every undecided candidate fused (fusion only removes
 * compute), is no better than the best found; a candidate that cannot delay
 * any gradient (its consumer holds no parameters, or the model's layer is one
 * unit) is always fused, since fusing it only removes compute. A budget caps
 * the simulations. */
typedef struct {
    sim_model *sm;
    const wf_model_config *m;
    const wf_cluster *c;
    const wf_plan *p;
    const wf_cost_layout *L; /* an op-level plan's layouts, or NULL */
    int64_t mm;
    int detail;
    const wf_comm_sched *cand;
    int nc;
    unsigned char *cur, *best;
    unsigned char *free_edge; /* always fused */
    double best_t;
    int evals, budget;
    wf_status st;
} fuse_search;

static double stream_bound(const sim_profile *pr, const wf_plan *p, int64_t mm)
{
    double worst = 0;
    for (int dev = 0; dev < p->pp; dev++) {
        double t = 0, params = 0;
        for (int cc = 0; cc < p->vpp; cc++) {
            int vs = cc * p->pp + dev;
            if (vs >= pr->nvs)
                continue;
            for (int i = pr->vs_first[vs]; i < pr->vs_first[vs + 1]; i++) {
                const sim_unit *u = &pr->unit[pr->inst[i]];
                t += (double)mm * (u->fwd_comp + u->rec_comp + u->bwd_comp);
                params += u->params;
            }
        }
        t += params * pr->opt_bytes_per_param / pr->mem_bw_bps / (p->zero >= 1 ? (double)p->dp : 1.0);
        worst = t > worst ? t : worst;
    }
    return worst;
}

static double fuse_eval(fuse_search *f, const unsigned char *mask, int bound_only)
{
    wf_arena a;
    wf_arena_init(&a, 1 << 16);
    sim_profile pr;
    double t = -1;
    f->st = sim_profile_build(f->sm, f->m, f->c, f->p, f->L, mask, 0, &a, &pr);
    if (f->st == WF_OK) {
        if (bound_only) {
            t = stream_bound(&pr, f->p, f->mm);
        } else {
            wf_sim_plan_result r;
            f->st = play_profile(&pr, f->p, f->c, f->mm, f->detail, f->cand, f->nc, NULL, &r);
            t = r.iteration_time_s;
            f->evals++;
        }
    }
    wf_arena_free(&a);
    return t;
}

static void fuse_dfs(fuse_search *f, int k)
{
    int E = f->sm->nfusions;
    if (f->st || f->evals >= f->budget)
        return;
    if (k == E) {
        double t = fuse_eval(f, f->cur, 0);
        if (f->st == WF_OK && t < f->best_t) {
            f->best_t = t;
            memcpy(f->best, f->cur, (size_t)E);
        }
        return;
    }
    for (int choice = 1; choice >= 0; choice--) {
        if (choice == 0 && f->free_edge[k])
            break;
        f->cur[k] = (unsigned char)choice;
        /* Lower bound: the undecided ones fused. */
        for (int j = k + 1; j < E; j++)
            f->cur[j] = 1;
        if (choice == 0 && f->best_t < 1e300) {
            double lb = fuse_eval(f, f->cur, 1);
            if (f->st || lb >= f->best_t)
                continue;
        }
        fuse_dfs(f, k + 1);
    }
    f->cur[k] = 1;
}

/* Many candidates that can delay a gradient (a CNN's conv+BN pairs): from
 * everything fused, each such candidate in turn from the output end (whose
 * gradients the backward makes first, so that its delay meets the most
 * communication) is left unfused when the simulation says that is faster:
 * the compute the fusion saves weighed against the communication it delays. */
static void fuse_greedy(fuse_search *f)
{
    int E = f->sm->nfusions;
    memset(f->cur, 1, (size_t)E);
    double t = fuse_eval(f, f->cur, 0);
    if (f->st)
        return;
    if (t < f->best_t) {
        f->best_t = t;
        memcpy(f->best, f->cur, (size_t)E);
    }
    for (int k = E - 1; k >= 0 && f->evals < f->budget; k--) {
        if (f->free_edge[k])
            continue;
        f->cur[k] = 0;
        double u = fuse_eval(f, f->cur, 0);
        if (f->st)
            return;
        if (u < t)
            t = u;
        else
            f->cur[k] = 1;
        if (t < f->best_t) {
            f->best_t = t;
            memcpy(f->best, f->cur, (size_t)E);
        }
    }
}

/* Exhaustive (with pruning) up to this many candidates that can delay a
 * gradient, greedy beyond. */
#define FUSE_EXACT_MAX 8

/* Simulates plan p (validated) under layouts L (NULL: the whole-model
 * plan's). */
static wf_status simulate(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, const wf_cost_layout *L,
                          int64_t batch, const wf_sim_plan_opts *opts, wf_sim_plan_result *out)
{
    double t0 = wf_now_s();
    memset(out, 0, sizeof *out);
    wf_status st = WF_OK;
    if (p->pp > WF_SIM_MAX_STAGES)
        return wf_errorf(WF_INVAL, "pp=%d: the simulator handles at most %d stages", p->pp, WF_SIM_MAX_STAGES);
    int64_t mm = batch / ((int64_t)p->mbs * p->dp);
    if (mm < 1 || mm > 1000000)
        return wf_errorf(WF_INVAL, "batch %lld gives %lld micro-batches per pipeline", (long long)batch,
                         (long long)mm);
    int detail = opts ? opts->detail : 0;
    int fuse = opts ? opts->fuse : 0;
    const char *trace = opts ? opts->trace_path : NULL;
    if (detail < 0 || detail > 2)
        return wf_errorf(WF_INVAL, "simulation detail %d: expected 0 (auto), 1 (fine) or 2 (coarse)", detail);
    sim_model sm;
    if ((st = sim_model_init(m, c, &sm)))
        return st;
    /* The plan as its framework profile runs it (ZeRO stage, overlap), seen
     * by its data-parallel group: gradients are reduced over dp x cp ranks
     * (the per-rank sizes of context parallelism are in the cost records). */
    wf_plan run;
    wf_cost_plan_as_run(sm.ctx, p, &run);
    run.dp = p->dp * run.cp;
    run.cp = 1;
    /* Without overlap nothing of the reduction hides, DeAR's all-gathers
     * behind the next forward neither (Megatron-Core gathers parameters
     * behind the forward only with overlapped gradient reduction): its
     * collectives run after the backward, as DDP's do. */
    if (!run.overlap && run.comm.kind == WF_COMM_DEAR)
        run.comm.kind = WF_COMM_DDP;
    p = &run;
    wf_comm_sched cand[WF_COMM_CANDIDATES_MAX];
    int nc = comm_candidates(p, fuse, cand);
    unsigned char *mask = NULL;
    if (fuse && sm.nfusions > 0) {
        int E = sm.nfusions;
        fuse_search f;
        memset(&f, 0, sizeof f);
        f.sm = &sm;
        f.m = m;
        f.c = c;
        f.p = p;
        f.L = L;
        f.mm = mm;
        f.detail = detail;
        f.cand = cand;
        f.nc = nc;
        f.budget = opts->fuse_budget > 0 ? opts->fuse_budget : 64;
        f.cur = calloc((size_t)E, 1);
        f.best = calloc((size_t)E, 1);
        f.free_edge = calloc((size_t)E, 1);
        if (!f.cur || !f.best || !f.free_edge) {
            st = wf_errorf(WF_NOMEM, "out of memory searching fusions");
        } else {
            for (int k = 0; k < E; k++) {
                const wf_op *ob = &sm.g.ops[sm.fusions[k].b];
                int params = 0;
                for (int j = 0; j < ob->nin; j++)
                    params |= sm.g.tensors[ob->in[j]].role == WF_ROLE_PARAM;
                f.free_edge[k] = sm.transformer || !params;
            }
            int delaying = 0;
            for (int k = 0; k < E; k++)
                delaying += !f.free_edge[k];
            if (opts->fuse_budget <= 0 && delaying + 2 > f.budget)
                f.budget = delaying + 2;
            /* The baseline: no operator fusion, tensor fusion searched. */
            out->unfused_time_s = fuse_eval(&f, f.best, 0);
            f.best_t = out->unfused_time_s;
            st = f.st;
            if (st == WF_OK && delaying <= FUSE_EXACT_MAX)
                fuse_dfs(&f, 0);
            else if (st == WF_OK)
                fuse_greedy(&f);
            st = st ? st : f.st;
        }
        if (st == WF_OK) {
            int n = 0;
            size_t len = 0;
            for (int k = 0; k < E; k++) {
                if (!f.best[k])
                    continue;
                n++;
                if (len + 1 >= sizeof out->fused)
                    continue; /* the list is full; the count goes on */
                int w = snprintf(out->fused + len, sizeof out->fused - len, "%s%s", len ? "; " : "",
                                 sm.fusions[k].name);
                len = w < 0 || (size_t)w >= sizeof out->fused - len ? sizeof out->fused - 1 : len + (size_t)w;
            }
            out->fusions = n;
            out->fusion_candidates = E;
            out->fusion_evals = f.evals;
            mask = f.best;
            f.best = NULL;
        }
        free(f.cur);
        free(f.best);
        free(f.free_edge);
    }
    if (st == WF_OK) {
        wf_arena a;
        wf_arena_init(&a, 1 << 16);
        sim_profile pr;
        double unfused = out->unfused_time_s;
        int nfu = out->fusions, nfc = out->fusion_candidates, nev = out->fusion_evals;
        char fused[sizeof out->fused];
        memcpy(fused, out->fused, sizeof fused);
        st = sim_profile_build(&sm, m, c, p, L, mask, 0, &a, &pr);
        if (st == WF_OK)
            st = play_profile(&pr, p, c, mm, detail, cand, nc, trace, out);
        out->unfused_time_s = unfused;
        out->fusions = nfu;
        out->fusion_candidates = nfc;
        out->fusion_evals = nev;
        memcpy(out->fused, fused, sizeof fused);
        wf_arena_free(&a);
    }
    free(mask);
    sim_model_free(&sm);
    if (st == WF_OK) {
        out->micro_batches = mm;
        out->devices = wf_plan_devices(p);
        out->samples_per_s = (double)batch / out->iteration_time_s;
        out->wall_s = wf_now_s() - t0;
    }
    return st;
}

wf_status wf_sim_plan(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, int64_t batch,
                      const wf_sim_plan_opts *opts, wf_sim_plan_result *out)
{
    memset(out, 0, sizeof *out);
    wf_status st = wf_plan_validate(p, m, c, batch);
    if (st != WF_OK || p->dap <= 1 || wf_model_is_transformer(m))
        return st ? st : simulate(m, c, p, NULL, batch, opts, out);
    /* DAP: the estimate's layouts (wf_cost_layout_dap), the group as their
     * model-parallel axis. */
    wf_cost_ctx *ctx = NULL;
    wf_cost_layout L;
    memset(&L, 0, sizeof L);
    if ((st = wf_cost_ctx_create(m, c, &ctx)) == WF_OK)
        st = wf_cost_layout_dap(ctx, p->dap, &L);
    wf_cost_ctx_free(ctx);
    wf_plan r = *p;
    r.tp = p->dap;
    r.dap = 1;
    if (st == WF_OK)
        st = simulate(m, c, &r, &L, batch, opts, out);
    wf_cost_layout_free(&L);
    return st;
}

wf_status wf_sim_layouts(const wf_model_config *m, const wf_cluster *c, const wf_plan *p, const wf_cost_layout *l,
                         int64_t batch, const wf_sim_plan_opts *opts, wf_sim_plan_result *out)
{
    memset(out, 0, sizeof *out);
    wf_plan r = *p;
    r.tp = l->tp;
    r.sp = l->sp;
    /* As wf_estimate_layouts checks it: models other than transformers have
     * no whole-model tp, their model-parallel axis is checked here. */
    wf_plan v = r;
    if (!wf_model_is_transformer(m)) {
        v.tp = 1;
        v.sp = 0;
        if (wf_plan_devices(&r) > wf_cluster_devices(c))
            return wf_errorf(WF_INVAL, "layouts on %lld devices, cluster %s has %lld", (long long)wf_plan_devices(&r),
                             c->name, (long long)wf_cluster_devices(c));
    }
    wf_status st = wf_plan_validate(&v, m, c, batch);
    return st ? st : simulate(m, c, &r, l, batch, opts, out);
}

wf_status wf_sim_oplevel(const wf_model_config *m, const wf_cluster *c, const wf_layout *ol, int64_t batch,
                         const wf_sim_plan_opts *opts, wf_sim_plan_result *out, wf_plan *as_plan)
{
    memset(out, 0, sizeof *out);
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cost_ctx_create(m, c, &ctx);
    if (st)
        return st;
    wf_cost_layout L;
    wf_plan p;
    st = wf_layout_descriptor(m, c, ctx, batch, ol, &L, &p);
    wf_cost_ctx_free(ctx);
    if (st)
        return st;
    st = wf_sim_layouts(m, c, &p, &L, batch, opts, out);
    wf_cost_layout_free(&L);
    if (st == WF_OK && as_plan)
        *as_plan = p;
    return st;
}

cJSON *wf_sim_plan_to_json(const wf_sim_plan_result *r)
{
    static const char *const names[] = {
#define WF_X(e, name) name,
        WF_COMM_LIST(WF_X)
#undef WF_X
    };
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddNumberToObject(j, "iteration_time_s", r->iteration_time_s);
    cJSON_AddNumberToObject(j, "samples_per_s", r->samples_per_s);
    cJSON_AddNumberToObject(j, "memory_per_device_bytes", r->peak_memory_bytes); /* the key of estimate */
    cJSON_AddBoolToObject(j, "fits", r->fits);
    cJSON_AddNumberToObject(j, "devices", (double)r->devices);
    cJSON_AddNumberToObject(j, "micro_batches", (double)r->micro_batches);
    cJSON_AddNumberToObject(j, "critical_stage", r->critical_stage);
    for (int s = -1; s < r->nstages; s++) {
        cJSON *o = wf_breakdown_to_json(s < 0 ? &r->breakdown : &r->stage[s].bd);
        if (s < 0) {
            cJSON_AddItemToObject(j, "breakdown", o);
            cJSON_AddArrayToObject(j, "stages");
        } else {
            cJSON *st = cJSON_CreateObject();
            cJSON_AddNumberToObject(st, "stage", s);
            cJSON_AddNumberToObject(st, "memory_per_device_bytes", r->stage[s].peak_memory_bytes);
            cJSON_AddItemToObject(st, "breakdown", o);
            cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(j, "stages"), st);
        }
    }
    cJSON *c = cJSON_AddObjectToObject(j, "comm");
    cJSON_AddStringToObject(c, "schedule", (unsigned)r->comm.kind < WF_COMM_COUNT ? names[r->comm.kind] : "?");
    cJSON_AddNumberToObject(c, "threshold_bytes", r->comm.threshold_bytes);
    cJSON_AddNumberToObject(c, "collectives", r->dp_collectives);
    cJSON_AddNumberToObject(c, "dp_comm_s", r->stage[r->critical_stage].dp_comm_s);
    cJSON_AddNumberToObject(c, "dp_exposed_s", r->stage[r->critical_stage].dp_exposed_s);
    if (r->candidates > 1)
        cJSON_AddNumberToObject(c, "candidates", r->candidates);
    if (r->fusion_candidates > 0) {
        cJSON *f = cJSON_AddObjectToObject(j, "fusion");
        cJSON_AddNumberToObject(f, "candidates", r->fusion_candidates);
        cJSON_AddNumberToObject(f, "fused", r->fusions);
        cJSON_AddStringToObject(f, "ops", r->fused);
        cJSON_AddNumberToObject(f, "unfused_time_s", r->unfused_time_s);
        cJSON_AddNumberToObject(f, "ideal_time_s", r->ideal_time_s);
        cJSON_AddNumberToObject(f, "gain", r->unfused_time_s / r->iteration_time_s - 1);
        cJSON_AddNumberToObject(f, "simulations", r->fusion_evals);
    }
    cJSON *sim = cJSON_AddObjectToObject(j, "simulation");
    cJSON_AddNumberToObject(sim, "tasks", (double)r->tasks);
    cJSON_AddBoolToObject(sim, "coarse", r->coarse);
    cJSON_AddNumberToObject(sim, "wall_s", r->wall_s);
    return j;
}
