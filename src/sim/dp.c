/* One data-parallel iteration played out under a gradient communication
 * schedule, and `auto`: the schedule chosen by simulating the candidates.
 *
 * The graph (one device stands for every data-parallel rank; collectives run
 * on its one channel for the time the callback gives for the whole group):
 *   F1[0..L) -> bwd-start marker -> B[L-1] -> ... -> B[0]   (compute stream)
 *   each collective after the backward tasks of the layers it carries (plus
 *   its issue constraints: the previous DDP bucket's issue, a Horovod tick);
 *   then the next iteration's forward F2[0..L) -> end marker.
 * The iteration time is end marker - bwd-start marker: the steady-state period
 * (every schedule here has drained the channel before the next backward, so
 * later iterations repeat it exactly). How F2 waits depends on the schedule:
 *   sync kinds    all collectives and B[0] -> one optimizer step -> F2
 *   bytescheduler per layer l: its chunks and F2[l-1] -> step of l -> F2[l]
 *   dear          barrier after B[0] and every reduce-scatter; group g (forward
 *                 order): gate_g = max(end of group g-1's forward, AG_g end);
 *                 AG_{g+1} issued at gate_g; step of g; forward of g. This is
 *                 the recurrence of ALGORITHMS.md §4 task for task. */
#include "sim/plan-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    sim_builder sb; /* the first error sticks */
    int stream, chan;
} gb;

static int task(gb *b, const char *name, wf_sim_cat cat, wf_ns dur, int on_res, const int *deps, int ndeps)
{
    wf_sim_task_desc d;
    wf_sim_task_desc_init(&d);
    d.name = name;
    d.cat = cat;
    d.dur_ns = dur;
    d.nres = on_res >= 0;
    d.res = &on_res;
    d.ndeps = ndeps;
    d.deps = deps;
    return sim_task(&b->sb, &d);
}

static void dep(gb *b, int t, int on) { sim_dep(&b->sb, t, on); }

static double coll_s(const wf_dp_model *m, wf_coll_kind k, double bytes)
{
    return m->env.coll ? m->env.coll(m->env.coll_ctx, k, bytes) : 0.0;
}

static wf_status check_model(const wf_dp_model *m)
{
    if (m->nlayers < 1)
        return wf_errorf(WF_INVAL, "dp iteration: nlayers=%d must be >= 1", m->nlayers);
    if (!m->fwd_s || !m->bwd_s)
        return wf_errorf(WF_INVAL, "dp iteration: forward and backward times are required");
    for (int l = 0; l < m->nlayers; l++) {
        if (wf_sim_ns(m->fwd_s[l]) < 0 || wf_sim_ns(m->bwd_s[l]) < 0 ||
            (m->opt_s && wf_sim_ns(m->opt_s[l]) < 0))
            return wf_errorf(WF_INVAL, "dp iteration: layer %d has a negative or non-finite time", l);
    }
    if (m->ngrads < 0 || (m->ngrads > 0 && !m->grads))
        return wf_errorf(WF_INVAL, "dp iteration: bad gradient list (n=%d)", m->ngrads);
    for (int i = 0; i < m->ngrads; i++)
        if (m->grads[i].layer < 0 || m->grads[i].layer >= m->nlayers)
            return wf_errorf(WF_INVAL, "dp iteration: gradient %d: layer=%d not in 0..%d", i, m->grads[i].layer,
                             m->nlayers - 1);
    return WF_OK;
}

/* Plays one schedule. */
static wf_status play(const wf_dp_model *m, const wf_comm_sched *cs, const char *trace_path, wf_dp_result *out)
{
    int L = m->nlayers;
    wf_status st;
    wf_arena a;
    wf_arena_init(&a, 1 << 16);
    wf_sim *s = NULL;
    gb b = {0};
    char name[96];

    wf_ns *fwd = wf_arena_alloc(&a, (size_t)L * sizeof *fwd);
    wf_ns *bwd = wf_arena_alloc(&a, (size_t)L * sizeof *bwd);
    wf_ns *opt = wf_arena_alloc(&a, (size_t)L * sizeof *opt);
    wf_grad *g = wf_arena_alloc(&a, (size_t)(m->ngrads + 1) * sizeof *g);
    int *tB = wf_arena_alloc(&a, (size_t)L * sizeof *tB);
    int *tF2 = wf_arena_alloc(&a, (size_t)L * sizeof *tF2);
    if (!fwd || !bwd || !opt || !g || !tB || !tF2) {
        st = wf_errorf(WF_NOMEM, "out of memory simulating a dp iteration");
        goto done;
    }
    /* Ready times from the backward timeline (backward starts at 0). */
    wf_ns t = 0, compute = 0;
    for (int l = 0; l < L; l++) {
        fwd[l] = wf_sim_ns(m->fwd_s[l]);
        bwd[l] = wf_sim_ns(m->bwd_s[l]);
        opt[l] = m->opt_s ? wf_sim_ns(m->opt_s[l]) : 0;
        compute += fwd[l] + bwd[l] + opt[l];
    }
    wf_ns *ready = wf_arena_alloc(&a, (size_t)L * sizeof *ready);
    if (!ready) {
        st = wf_errorf(WF_NOMEM, "out of memory simulating a dp iteration");
        goto done;
    }
    for (int l = L - 1; l >= 0; l--) {
        t += bwd[l];
        ready[l] = t;
    }
    for (int i = 0; i < m->ngrads; i++) {
        g[i] = m->grads[i];
        g[i].ready_s = (double)ready[g[i].layer] / 1e9;
    }
    wf_comm_schedule sc;
    if ((st = wf_sched_build(cs, g, m->ngrads, &m->env, &a, &sc)))
        goto done;

    if ((st = wf_sim_create(&s)))
        goto done;
    b.sb.s = s;
    int dev = wf_sim_add_device(s, "data-parallel rank", 1, 1);
    if (dev < 0) {
        st = dev;
        goto done;
    }
    b.stream = wf_sim_stream(s, dev);
    b.chan = wf_sim_channel(s, dev, 0);
    int pool = -1;
    if (sc.kind == WF_COMM_BYTESCHEDULER) {
        pool = wf_sim_add_pool(s, "credit", (int64_t)ceil(sc.credit_bytes));
        if (pool < 0) {
            st = pool;
            goto done;
        }
    }

    /* This iteration's forward, the backward-start marker, the backward. */
    int prev = -1;
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "F%d", l);
        prev = task(&b, name, WF_SIM_CAT_FORWARD, fwd[l], b.stream, &prev, prev >= 0);
    }
    int m1 = task(&b, "backward start", WF_SIM_CAT_MARKER, 0, -1, &prev, 1);
    prev = m1;
    for (int l = L - 1; l >= 0; l--) {
        snprintf(name, sizeof name, "B%d", l);
        prev = tB[l] = task(&b, name, WF_SIM_CAT_BACKWARD, bwd[l], b.stream, &prev, 1);
    }
    int b0 = prev;

    /* The collectives in issue order. */
    int *top = wf_arena_alloc(&a, (size_t)(sc.nops + 1) * sizeof *top);
    int *ticks = wf_arena_alloc(&a, (size_t)(sc.nops + 1) * sizeof *ticks); /* timer per op's tick */
    char *seen = wf_arena_alloc(&a, (size_t)L);
    if (!top || !ticks || !seen) {
        st = wf_errorf(WF_NOMEM, "out of memory simulating a dp iteration");
        goto done;
    }
    int prev_issue = -1, last_timer = -1, last_tick = -1;
    double comm_ns = 0;
    for (int k = 0; k < sc.nops; k++) {
        const wf_comm_op *op = &sc.ops[k];
        memset(seen, 0, (size_t)L);
        int gate = -1;
        if (op->after >= 0 || op->tick >= 0) {
            /* An issue marker: after the members, the previous issue, the tick. */
            snprintf(name, sizeof name, "issue %d", k);
            gate = task(&b, name, WF_SIM_CAT_MARKER, 0, -1, NULL, 0);
            if (op->after >= 0)
                dep(&b, gate, prev_issue);
            if (op->tick >= 0) {
                if (op->tick != last_tick) {
                    snprintf(name, sizeof name, "tick %d", op->tick);
                    last_timer = task(&b, name, WF_SIM_CAT_MARKER, wf_sim_ns(op->issue_s), -1, &m1, 1);
                    last_tick = op->tick;
                }
                dep(&b, gate, last_timer);
            }
            prev_issue = gate;
        }
        snprintf(name, sizeof name, "%s %d", op->kind == WF_COLL_REDUCE_SCATTER ? "reduce-scatter" : "all-reduce",
                 k);
        wf_sim_task_desc d;
        wf_sim_task_desc_init(&d);
        d.name = name;
        d.cat = WF_SIM_CAT_DP_COMM;
        double secs = coll_s(m, op->kind, op->bytes);
        d.dur_ns = wf_sim_ns(secs);
        d.nres = 1;
        d.res = &b.chan;
        d.priority = op->priority;
        d.pool = pool;
        d.pool_amount = (int64_t)ceil(op->bytes);
        d.layer = op->min_layer;
        d.bytes = op->bytes;
        if (b.sb.st == WF_OK && d.dur_ns < 0)
            b.sb.st = wf_errorf(WF_INVAL, "collective time %g s for %g bytes is not a time", secs, op->bytes);
        top[k] = sim_task(&b.sb, &d);
        comm_ns += (double)d.dur_ns;
        dep(&b, top[k], gate);
        for (int q = 0; q < op->nparts; q++) {
            int layer = g[sc.parts[op->first_part + q].grad].layer;
            if (!seen[layer]) {
                seen[layer] = 1;
                dep(&b, gate >= 0 ? gate : top[k], tB[layer]);
            }
        }
    }
    int ncoll = sc.nops;

    /* The next forward. */
    prev = -1;
    if (sc.kind == WF_COMM_BYTESCHEDULER) {
        /* Per layer: its chunks, then its step, then its forward. */
        int *ops_of = wf_arena_alloc(&a, (size_t)(sc.nparts + 1) * sizeof *ops_of);
        int *off = wf_arena_alloc(&a, (size_t)(L + 1) * sizeof *off);
        if (!ops_of || !off) {
            st = wf_errorf(WF_NOMEM, "out of memory simulating a dp iteration");
            goto done;
        }
        for (int k = 0; k < sc.nops; k++)
            off[sc.ops[k].min_layer + 1]++;
        for (int l = 0; l < L; l++)
            off[l + 1] += off[l];
        int *fill = wf_arena_alloc(&a, (size_t)(L + 1) * sizeof *fill);
        if (!fill) {
            st = wf_errorf(WF_NOMEM, "out of memory simulating a dp iteration");
            goto done;
        }
        for (int k = 0; k < sc.nops; k++) {
            int l = sc.ops[k].min_layer;
            ops_of[off[l] + fill[l]++] = top[k];
        }
        prev = b0;
        for (int l = 0; l < L; l++) {
            snprintf(name, sizeof name, "step %d", l);
            int u = task(&b, name, WF_SIM_CAT_OPTIMIZER, opt[l], b.stream, &prev, 1);
            for (int i = off[l]; i < off[l + 1]; i++)
                dep(&b, u, ops_of[i]);
            snprintf(name, sizeof name, "F%d", l);
            prev = tF2[l] = task(&b, name, WF_SIM_CAT_FORWARD, fwd[l], b.stream, &u, 1);
        }
    } else if (sc.kind == WF_COMM_DEAR) {
        int G = sc.nops;
        ncoll = 2 * G;
        int barrier = task(&b, "barrier", WF_SIM_CAT_MARKER, 0, -1, &b0, 1);
        for (int k = 0; k < sc.nops; k++)
            dep(&b, barrier, top[k]);
        int gate_prev = barrier, ff_prev = barrier, ag = -1;
        for (int gi = 0; gi < G; gi++) {
            const wf_comm_op *op = &sc.ops[G - 1 - gi]; /* forward order */
            int lo = gi == 0 ? 0 : op->min_layer;
            int hi = gi + 1 < G ? sc.ops[G - 2 - gi].min_layer : L;
            if (gi == 0) {
                snprintf(name, sizeof name, "all-gather %d", gi);
                ag = task(&b, name, WF_SIM_CAT_DP_COMM, wf_sim_ns(coll_s(m, WF_COLL_ALLGATHER, op->bytes)), b.chan,
                          &gate_prev, 1);
            }
            comm_ns += b.sb.st ? 0 : (double)wf_sim_ns(coll_s(m, WF_COLL_ALLGATHER, op->bytes));
            snprintf(name, sizeof name, "gate %d", gi);
            int gate = task(&b, name, WF_SIM_CAT_MARKER, 0, -1, &ag, 1);
            dep(&b, gate, ff_prev);
            if (gi + 1 < G) {
                const wf_comm_op *nx = &sc.ops[G - 2 - gi];
                snprintf(name, sizeof name, "all-gather %d", gi + 1);
                ag = task(&b, name, WF_SIM_CAT_DP_COMM, wf_sim_ns(coll_s(m, WF_COLL_ALLGATHER, nx->bytes)), b.chan,
                          &gate, 1);
            }
            wf_ns u = 0;
            for (int l = lo; l < hi; l++)
                u += opt[l];
            snprintf(name, sizeof name, "step group %d", gi);
            prev = task(&b, name, WF_SIM_CAT_OPTIMIZER, u, b.stream, &gate, 1);
            for (int l = lo; l < hi; l++) {
                snprintf(name, sizeof name, "F%d", l);
                prev = tF2[l] = task(&b, name, WF_SIM_CAT_FORWARD, fwd[l], b.stream, &prev, 1);
            }
            ff_prev = prev;
            gate_prev = gate;
        }
        if (G == 0) {
            prev = barrier;
            for (int l = 0; l < L; l++) {
                snprintf(name, sizeof name, "F%d", l);
                prev = tF2[l] = task(&b, name, WF_SIM_CAT_FORWARD, fwd[l], b.stream, &prev, 1);
            }
        }
    } else {
        wf_ns u = 0;
        for (int l = 0; l < L; l++)
            u += opt[l];
        int step = task(&b, "step", WF_SIM_CAT_OPTIMIZER, u, b.stream, &b0, 1);
        for (int k = 0; k < sc.nops; k++)
            dep(&b, step, top[k]);
        prev = step;
        for (int l = 0; l < L; l++) {
            snprintf(name, sizeof name, "F%d", l);
            prev = tF2[l] = task(&b, name, WF_SIM_CAT_FORWARD, fwd[l], b.stream, &prev, 1);
        }
    }
    int m2 = task(&b, "next backward start", WF_SIM_CAT_MARKER, 0, -1, &prev, 1);
    if ((st = b.sb.st))
        goto done;
    if ((st = wf_sim_run(s)))
        goto done;
    wf_ns it = wf_sim_task_start_ns(s, m2) - wf_sim_task_start_ns(s, m1);
    memset(out, 0, sizeof *out);
    out->sched.kind = sc.kind;
    out->sched.threshold_bytes = sc.threshold_bytes;
    out->iteration_s = (double)it / 1e9;
    out->compute_s = (double)compute / 1e9;
    out->comm_s = comm_ns / 1e9;
    out->exposed_comm_s = out->iteration_s - out->compute_s;
    out->ncollectives = ncoll;
    out->candidates = 1;
    if (trace_path)
        st = wf_sim_write_trace(s, trace_path);
done:
    wf_sim_free(s);
    wf_arena_free(&a);
    return st;
}

wf_status wf_sim_dp_iteration(const wf_dp_model *m, const wf_comm_sched *s, const char *trace_path,
                              wf_dp_result *out)
{
    wf_status st = check_model(m);
    if (st)
        return st;
    if ((unsigned)s->kind >= WF_COMM_COUNT)
        return wf_errorf(WF_INVAL, "comm schedule kind %d unknown", (int)s->kind);
    if (s->kind != WF_COMM_AUTO)
        return play(m, s, trace_path, out);

    /* auto: every scheduler, with a sweep of its threshold (sched's one list). */
    wf_comm_sched cand[WF_COMM_CANDIDATES_MAX];
    int nc = wf_comm_candidates(1, m->env.elem_bytes, cand, WF_COMM_CANDIDATES_MAX);
    int best = -1;
    wf_dp_result r, br;
    memset(&br, 0, sizeof br);
    for (int i = 0; i < nc; i++) {
        if ((st = play(m, &cand[i], NULL, &r)))
            return st;
        if (best < 0 || r.iteration_s < br.iteration_s) {
            best = i;
            br = r;
        }
    }
    if (trace_path && (st = play(m, &cand[best], trace_path, &br)))
        return st;
    br.candidates = nc;
    *out = br;
    return WF_OK;
}
