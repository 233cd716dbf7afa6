/* Data-parallel gradient communication schedules (ALGORITHMS.md §4): how the
 * gradient tensors of one backward pass are grouped into collectives and the
 * constraints on when each collective is issued. Pure data: the simulator
 * plays a schedule out, the runtime issues it with non-blocking MPI.
 *
 * Gradients come in parameter order (index 0 nearest the input) with the time
 * the backward produces each; "backward order" is by ready time, ties by
 * descending index (the backward walks the parameters in reverse).
 *
 *   wfbp           one all-reduce per tensor, issued when it is ready.
 *   ddp[:MiB]       buckets filled in reverse parameter order, closed once they
 *                  reach the cap (the first bucket 1 MiB, the rest 25 MiB);
 *                  bucket k is issued when all its tensors are ready and bucket
 *                  k-1 was issued.
 *   horovod[:MiB]   at every cycle tick (1 ms) the tensors ready and not yet
 *                  sent are packed in ready order into messages of at most the
 *                  threshold (128 MiB); a larger tensor goes alone.
 *   bytescheduler  tensors cut into chunks of about 4M parameters, each chunk
 *                  a collective with priority = its layer (the next forward
 *                  needs low layers first), admitted to the network through a
 *                  credit window of bytes in flight (2 chunks).
 *   mgwfbp         greedy in backward order: the next tensor joins the current
 *                  group when waiting for it costs less than one collective
 *                  start-up alpha (the group could not start before it anyway,
 *                  or only a little earlier).
 *   dear[:MiB]      groups of whole layers closed once they reach the threshold
 *                  (25 MB; dear:0, no fusion: one group per gradient); each group's reduce-scatter is issued when the group
 *                  is ready, its all-gather (same bytes) runs in the next
 *                  forward (the simulator builds those from these groups). */
#include "weft/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double wf_sched_dear_recurrence(int G, const double *r, const double *rs, const double *ag, const double *u,
                                const double *f, double bwd_end, double *rs_end, double *ag_end,
                                double *ff_end)
{
    if (G <= 0)
        return bwd_end;
    double next_rs = 0;
    double rs0 = 0;
    for (int g = G - 1; g >= 0; g--) {
        double e = (r[g] > next_rs ? r[g] : next_rs) + rs[g];
        if (rs_end)
            rs_end[g] = e;
        next_rs = e;
        if (g == 0)
            rs0 = e;
    }
    double b0 = bwd_end > rs0 ? bwd_end : rs0;
    double ag_g = b0 + ag[0];
    double prev_ff = b0;
    for (int g = 0; g < G; g++) {
        if (ag_end)
            ag_end[g] = ag_g;
        double fg = prev_ff > ag_g ? prev_ff : ag_g;
        if (g + 1 < G)
            ag_g = fg + ag[g + 1];
        prev_ff = fg + u[g] + f[g];
        if (ff_end)
            ff_end[g] = prev_ff;
    }
    return prev_ff;
}

/* ---- building ------------------------------------------------------------------ */

/* Names from plan.h's list (the plan module parses them; this file only prints). */
static const char *kind_name(wf_comm_kind k)
{
    static const char *const names[] = {
#define WF_X(e, name) name,
        WF_COMM_LIST(WF_X)
#undef WF_X
    };
    return (unsigned)k < WF_COMM_COUNT ? names[k] : "?";
}

typedef struct {
    const wf_grad *g;
    int *order;        /* backward order */
    wf_comm_schedule *out;
    int cap_ops, cap_parts;
} build_ctx;

/* Sorts idx[0..n) into backward order: a stable bottom-up merge sort keyed on
 * (ready_s, -index). */
static void sort_bwd(const wf_grad *g, int *idx, int n, int *tmp)
{
    for (int width = 1; width < n; width *= 2) {
        for (int lo = 0; lo < n; lo += 2 * width) {
            int mid = lo + width < n ? lo + width : n;
            int hi = lo + 2 * width < n ? lo + 2 * width : n;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int x = idx[i], y = idx[j];
                int take_y = g[y].ready_s < g[x].ready_s || (g[y].ready_s == g[x].ready_s && y > x);
                tmp[k++] = take_y ? idx[j++] : idx[i++];
            }
            while (i < mid)
                tmp[k++] = idx[i++];
            while (j < hi)
                tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

static wf_comm_op *new_op(build_ctx *c, wf_coll_kind kind)
{
    wf_comm_schedule *o = c->out;
    if (o->nops >= c->cap_ops)
        return NULL;
    wf_comm_op *op = &o->ops[o->nops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->first_part = o->nparts;
    op->min_layer = -1;
    op->max_layer = -1;
    op->tick = -1;
    op->after = -1;
    return op;
}

static int add_part(build_ctx *c, wf_comm_op *op, int gi, double off, double bytes)
{
    wf_comm_schedule *o = c->out;
    if (o->nparts >= c->cap_parts)
        return -1;
    o->parts[o->nparts++] = (wf_comm_part){gi, off, bytes};
    op->nparts++;
    op->bytes += bytes;
    const wf_grad *g = &c->g[gi];
    if (op->min_layer < 0 || g->layer < op->min_layer)
        op->min_layer = g->layer;
    if (g->layer > op->max_layer)
        op->max_layer = g->layer;
    if (g->ready_s > op->ready_s)
        op->ready_s = g->ready_s;
    return 0;
}

static double coll(const wf_sched_env *env, wf_coll_kind k, double bytes)
{
    return env->coll ? env->coll(env->coll_ctx, k, bytes) : 0.0;
}

/* One table of the candidates of --comm auto: per row a scheduler and its
 * thresholds, in the unit the row names; `full` rows are the sweep, `short`
 * rows the plan simulator's list. */
typedef enum { THR_NONE, THR_MIB, THR_MB, THR_MPARAMS, THR_MB_POW2_QUARTER } thr_unit;

static const struct {
    int full; /* 1: in the sweep; 0: in the short list */
    wf_comm_kind kind;
    thr_unit unit;
    int n;
    double v[8]; /* THR_MB_POW2_QUARTER: v[0]..v[1] are the first and last k of 2^(k/4) MB */
} cand_rows[] = {
    {1, WF_COMM_WFBP, THR_NONE, 1, {0}},
    {1, WF_COMM_DDP, THR_MIB, 7, {1, 2, 5, 10, 25, 50, 100}},
    {1, WF_COMM_HOROVOD, THR_MIB, 5, {16, 32, 64, 128, 256}},
    {1, WF_COMM_BYTESCHEDULER, THR_MPARAMS, 5, {1, 2, 4, 8, 16}},
    {1, WF_COMM_MGWFBP, THR_NONE, 1, {0}},
    {1, WF_COMM_DEAR, THR_MB_POW2_QUARTER, 2, {0, 32}},
    {1, WF_COMM_DEAR, THR_MB, 1, {25}}, /* DeAR's own default (dear/dopt_rsag.py THRESHOLD = 25), off the grid */
    {0, WF_COMM_WFBP, THR_NONE, 1, {0}},
    {0, WF_COMM_DDP, THR_MIB, 3, {1, 25, 100}},
    {0, WF_COMM_HOROVOD, THR_NONE, 1, {0}},
    {0, WF_COMM_BYTESCHEDULER, THR_NONE, 1, {0}},
    {0, WF_COMM_MGWFBP, THR_NONE, 1, {0}},
    {0, WF_COMM_DEAR, THR_MB, 3, {5, 25, 100}},
};

int wf_comm_candidates(int full, double elem_bytes, wf_comm_sched *out, int cap)
{
    const double MiB = 1048576.0, MB = 1e6;
    double elem = elem_bytes > 0 ? elem_bytes : 4.0;
    int n = 0;
    for (size_t r = 0; r < sizeof cand_rows / sizeof cand_rows[0]; r++) {
        if (cand_rows[r].full != (full != 0))
            continue;
        if (cand_rows[r].unit == THR_MB_POW2_QUARTER) {
            for (int k = (int)cand_rows[r].v[0]; k <= (int)cand_rows[r].v[1]; k++)
                if (n < cap)
                    out[n++] = (wf_comm_sched){cand_rows[r].kind, pow(2.0, k / 4.0) * MB};
            continue;
        }
        for (int i = 0; i < cand_rows[r].n && n < cap; i++) {
            double v = cand_rows[r].v[i];
            double t = cand_rows[r].unit == THR_MIB       ? v * MiB
                       : cand_rows[r].unit == THR_MB      ? v * MB
                       : cand_rows[r].unit == THR_MPARAMS ? v * MiB * elem
                                                          : 0;
            out[n++] = (wf_comm_sched){cand_rows[r].kind, t};
        }
    }
    return n;
}

wf_status wf_sched_build(const wf_comm_sched *s, const wf_grad *grads, int ngrads, const wf_sched_env *env,
                         wf_arena *a, wf_comm_schedule *out)
{
    memset(out, 0, sizeof *out);
    if ((unsigned)s->kind >= WF_COMM_COUNT)
        return wf_errorf(WF_INVAL, "comm schedule kind %d unknown", (int)s->kind);
    if (s->kind == WF_COMM_AUTO)
        return wf_errorf(WF_INVAL, "comm schedule 'auto' is chosen by simulation (wf_sim_dp_iteration), "
                                   "not built directly");
    if (!(s->threshold_bytes >= 0) || !isfinite(s->threshold_bytes))
        return wf_errorf(WF_INVAL, "comm schedule %s: threshold %g bytes must be >= 0", kind_name(s->kind),
                         s->threshold_bytes);
    if (ngrads < 0 || (ngrads > 0 && !grads))
        return wf_errorf(WF_INVAL, "comm schedule: bad gradient list (n=%d)", ngrads);
    for (int i = 0; i < ngrads; i++) {
        if (!(grads[i].bytes > 0) || !isfinite(grads[i].bytes))
            return wf_errorf(WF_INVAL, "gradient %d: bytes=%g must be > 0", i, grads[i].bytes);
        if (!(grads[i].ready_s >= 0) || !isfinite(grads[i].ready_s))
            return wf_errorf(WF_INVAL, "gradient %d: ready_s=%g must be >= 0", i, grads[i].ready_s);
        if (grads[i].layer < 0)
            return wf_errorf(WF_INVAL, "gradient %d: layer=%d must be >= 0", i, grads[i].layer);
    }
    double elem = env && env->elem_bytes > 0 ? env->elem_bytes : 4.0;
    double cycle = env && env->cycle_s > 0 ? env->cycle_s : WF_SCHED_HOROVOD_CYCLE_S;
    out->kind = s->kind;

    /* Threshold per kind (0 = the scheduler's default). */
    double thr = s->threshold_bytes;
    switch (s->kind) {
    case WF_COMM_DDP:
        thr = thr > 0 ? thr : WF_SCHED_DDP_BUCKET_BYTES;
        break;
    case WF_COMM_HOROVOD:
        thr = thr > 0 ? thr : WF_SCHED_HOROVOD_BYTES;
        out->cycle_s = cycle;
        break;
    case WF_COMM_BYTESCHEDULER:
        thr = thr > 0 ? thr : WF_SCHED_BYTESCHED_PARAMS * elem;
        out->credit_bytes = env && env->credit_bytes > 0 ? env->credit_bytes : 2 * thr;
        break;
    case WF_COMM_DEAR:
        thr = thr > 0 ? thr : WF_SCHED_DEAR_BYTES;
        break;
    default:
        thr = 0;
        break;
    }
    out->threshold_bytes = thr;

    /* Capacity: one op and one part per tensor, except chunking. */
    int64_t cap_parts = ngrads;
    if (s->kind == WF_COMM_BYTESCHEDULER) {
        cap_parts = 0;
        for (int i = 0; i < ngrads; i++)
            cap_parts += (int64_t)ceil(grads[i].bytes / thr);
        if (cap_parts > INT32_MAX / 2)
            return wf_errorf(WF_INVAL, "bytescheduler: chunk of %g bytes makes too many chunks", thr);
    }
    build_ctx c = {grads, NULL, out, (int)cap_parts, (int)cap_parts};
    out->ops = wf_arena_alloc(a, (size_t)(cap_parts > 0 ? cap_parts : 1) * sizeof *out->ops);
    out->parts = wf_arena_alloc(a, (size_t)(cap_parts > 0 ? cap_parts : 1) * sizeof *out->parts);
    int *order = wf_arena_alloc(a, (size_t)(ngrads > 0 ? ngrads : 1) * sizeof *order);
    int *tmp = malloc((size_t)(ngrads > 0 ? ngrads : 1) * sizeof *tmp);
    if (!out->ops || !out->parts || !order || !tmp) {
        free(tmp);
        return wf_errorf(WF_NOMEM, "out of memory building a comm schedule");
    }
    for (int i = 0; i < ngrads; i++)
        order[i] = i;
    sort_bwd(grads, order, ngrads, tmp);
    free(tmp);
    c.order = order;

    switch (s->kind) {
    case WF_COMM_WFBP:
        for (int i = 0; i < ngrads; i++) {
            wf_comm_op *op = new_op(&c, WF_COLL_ALLREDUCE);
            add_part(&c, op, order[i], 0, grads[order[i]].bytes);
            op->issue_s = op->ready_s;
        }
        break;
    case WF_COMM_DDP: {
        double first = WF_SCHED_DDP_FIRST_BYTES < thr ? WF_SCHED_DDP_FIRST_BYTES : thr;
        wf_comm_op *op = NULL;
        for (int i = ngrads - 1; i >= 0; i--) {
            if (!op)
                op = new_op(&c, WF_COLL_ALLREDUCE);
            add_part(&c, op, i, 0, grads[i].bytes);
            if (op->bytes >= (out->nops == 1 ? first : thr))
                op = NULL;
        }
        for (int k = 0; k < out->nops; k++) {
            wf_comm_op *o = &out->ops[k];
            o->after = k - 1;
            o->issue_s = o->ready_s;
            if (k > 0 && out->ops[k - 1].issue_s > o->issue_s)
                o->issue_s = out->ops[k - 1].issue_s;
        }
        break;
    }
    case WF_COMM_HOROVOD: {
        int next = 0;
        while (next < ngrads) {
            /* The first tick at or after the next tensor's ready time. */
            double r = grads[order[next]].ready_s;
            int64_t k = (int64_t)ceil(r / cycle);
            if (k > 0 && (double)(k - 1) * cycle >= r)
                k--;
            double tick = (double)k * cycle;
            wf_comm_op *op = NULL;
            while (next < ngrads && grads[order[next]].ready_s <= tick) {
                int gi = order[next++];
                if (op && op->bytes + grads[gi].bytes > thr)
                    op = NULL;
                if (!op) {
                    op = new_op(&c, WF_COLL_ALLREDUCE);
                    op->tick = (int)k;
                    op->issue_s = tick;
                }
                add_part(&c, op, gi, 0, grads[gi].bytes);
            }
        }
        break;
    }
    case WF_COMM_BYTESCHEDULER:
        for (int i = 0; i < ngrads; i++) {
            int gi = order[i];
            double left = grads[gi].bytes, off = 0;
            while (left > 0) {
                double part = left < thr ? left : thr;
                wf_comm_op *op = new_op(&c, WF_COLL_ALLREDUCE);
                add_part(&c, op, gi, off, part);
                op->issue_s = op->ready_s;
                op->priority = grads[gi].layer;
                off += part;
                left -= part;
            }
        }
        break;
    case WF_COMM_MGWFBP: {
        double alpha = env && env->alpha_s > 0 ? env->alpha_s : coll(env, WF_COLL_ALLREDUCE, 0);
        double prev_end = 0;
        wf_comm_op *op = NULL;
        for (int i = 0; i < ngrads; i++) {
            int gi = order[i];
            if (op) {
                double start = op->ready_s > prev_end ? op->ready_s : prev_end;
                if (grads[gi].ready_s - start < alpha) {
                    add_part(&c, op, gi, 0, grads[gi].bytes);
                    continue;
                }
                prev_end = start + coll(env, WF_COLL_ALLREDUCE, op->bytes);
            }
            op = new_op(&c, WF_COLL_ALLREDUCE);
            add_part(&c, op, gi, 0, grads[gi].bytes);
        }
        for (int k = 0; k < out->nops; k++)
            out->ops[k].issue_s = out->ops[k].ready_s;
        break;
    }
    case WF_COMM_DEAR: {
        wf_comm_op *op = NULL;
        for (int i = 0; i < ngrads; i++) {
            int gi = order[i];
            /* A group closes at a layer boundary once it holds the
                 * threshold; unfused (dear:0), after every gradient. */
            if (op && op->bytes >= thr && (grads[gi].layer < op->min_layer || thr <= WF_SCHED_UNFUSED_BYTES))
                op = NULL;
            if (!op)
                op = new_op(&c, WF_COLL_REDUCE_SCATTER);
            add_part(&c, op, gi, 0, grads[gi].bytes);
        }
        for (int k = 0; k < out->nops; k++)
            out->ops[k].issue_s = out->ops[k].ready_s;
        break;
    }
    default:
        return wf_errorf(WF_INTERNAL, "comm schedule %s not handled", kind_name(s->kind));
    }
    return WF_OK;
}
