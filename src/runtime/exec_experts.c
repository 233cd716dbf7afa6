/* The executor's expert parallelism (wf_exec_experts): the grouped MLP of a
 * mixture-of-experts layer with its experts split over the ep ranks of the
 * replica engine, the tokens exchanged by the engine's all-to-alls. The
 * executor (executor.c) calls wf_exec_ep_fwd and wf_exec_ep_bwd for the
 * grouped op when an expert group is set. */
#include "runtime/executor-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void wf_exec_set_experts(wf_exec *e, const wf_exec_experts *x)
{
    if (x)
        e->ex = *x;
    else
        memset(&e->ex, 0, sizeof e->ex);
}

/* ---- expert parallelism ---------------------------------------------------------------- */

/* Only the filled capacity rows travel. Slots are taken in order, so expert
 * x's filled rows are its first cnt[x] = min(C, tokens routed to x) rows; the
 * rest are zero, and so are the grouped MLP's outputs and gradients there (no
 * biases, act(0) = 0), which is what the receiving side writes. Exchanges
 * (MPI_Alltoallv over the ep group): block p of a send goes to group rank p
 * and holds, for each of p's El experts in order, this rank's filled rows of
 * it; a receive holds the same from every rank in group-rank order. Each
 * (sender, expert) block of rows runs through the expert as one GEMM pair. */
typedef struct {
    int64_t E, C, H, Fd, G, El, ep, g;
    int swiglu;
    int32_t *cnt;           /* [E] this rank's filled rows per expert */
    int32_t *rcnt;          /* [ep * El] rows of each rank for each local expert */
    int64_t *sn, *rn;       /* [ep] floats sent to and received from each rank, per row width */
    float *send, *recv[3];  /* packed rows: [E*C*H] each */
    float *tw;              /* [El*H*G + El*Fd*H] one block's weight gradients */
} ep_xchg;

/* Exchange buffers (five of n floats) and the counts, grown on demand. */
static wf_status ep_prepare(wf_exec *e, const wf_op *op, ep_xchg *x)
{
    const wf_tensor *T = e->g.tensors, *xt = &T[op->in[0]], *w2 = &T[op->in[2]];
    x->E = xt->shape[0];
    x->C = xt->shape[1];
    x->H = xt->shape[2];
    x->Fd = w2->shape[1];
    x->swiglu = op->attr.act == WF_MOE_ACT_SWIGLU;
    x->G = x->swiglu ? 2 * x->Fd : x->Fd;
    x->ep = e->ex.ep;
    x->El = x->E / x->ep;
    x->g = e->ex.group_rank;
    int d = xt->producer;
    if (d < 0 || e->g.ops[d].kind != WF_OP_MOE_DISPATCH)
        return wf_errorf(WF_INVAL, "op '%s' (grouped_mlp): expert parallelism needs its rows from a moe_dispatch",
                         op->name);
    size_t n = (size_t)(x->E * x->C * x->H), nw = (size_t)(x->El * (x->H * x->G + x->Fd * x->H));
    if (nw > n)
        n = nw;
    n = (n + 3) & ~(size_t)3; /* keeps the counts after the five buffers 8-byte aligned */
    size_t ints = (size_t)(2 * x->E), longs = (size_t)(2 * x->ep);
    size_t need = 5 * n + ints + 2 * longs; /* in floats: ints and longs fit in 1 and 2 floats each */
    if (e->exbuf_floats < need) {
        float *b = realloc(e->exbuf, need * sizeof *b);
        if (!b)
            return wf_errorf(WF_NOMEM, "out of memory exchanging tokens for op '%s'", op->name);
        e->exbuf = b;
        e->exbuf_floats = need;
    }
    float *b = e->exbuf;
    x->send = b;
    x->recv[0] = b + n;
    x->recv[1] = b + 2 * n;
    x->recv[2] = b + 3 * n;
    x->tw = b + 4 * n;
    x->sn = (int64_t *)(void *)(b + 5 * n);
    x->rn = x->sn + x->ep;
    x->cnt = (int32_t *)(void *)(x->rn + x->ep);
    x->rcnt = x->cnt + x->E;
    /* Filled rows: tokens routed to each expert, at most C. */
    const wf_tensor *ids = &T[e->g.ops[d].in[1]];
    const int32_t *id = (const int32_t *)e->ptr[e->g.ops[d].in[1]];
    for (int64_t k = 0; k < x->E; k++)
        x->cnt[k] = 0;
    for (int64_t k = 0, m = wf_tensor_numel(ids); k < m; k++)
        if (id[k] >= 0 && id[k] < x->E && x->cnt[id[k]] < x->C)
            x->cnt[id[k]]++;
    wf_status st = e->ex.alltoall_counts(e->ex.ctx, x->cnt, x->rcnt, (int)x->El);
    if (st != WF_OK)
        return st;
    for (int64_t p = 0; p < x->ep; p++) {
        x->sn[p] = x->rn[p] = 0;
        for (int64_t l = 0; l < x->El; l++) {
            x->sn[p] += x->cnt[p * x->El + l];
            x->rn[p] += x->rcnt[p * x->El + l];
        }
    }
    return WF_OK;
}

/* Sends the filled rows of rows[E,C,H] into recv (row counts x->sn / x->rn). */
static wf_status ep_send_rows(wf_exec *e, ep_xchg *x, const float *rows, float *recv)
{
    int64_t at = 0, sn[WF_EXEC_MAX_EP], rn[WF_EXEC_MAX_EP];
    for (int64_t k = 0; k < x->E; k++) {
        memcpy(x->send + at, rows + k * x->C * x->H, sizeof(float) * (size_t)(x->cnt[k] * x->H));
        at += x->cnt[k] * x->H;
    }
    for (int64_t p = 0; p < x->ep; p++) {
        sn[p] = x->sn[p] * x->H;
        rn[p] = x->rn[p] * x->H;
    }
    return e->ex.alltoallv(e->ex.ctx, x->send, sn, recv, rn);
}

/* Returns the rows this rank computed (laid out as received) to their ranks
 * and unpacks them into out[E,C,H], zero beyond each expert's filled rows. */
static wf_status ep_return_rows(wf_exec *e, ep_xchg *x, const float *rows, float *out)
{
    int64_t sn[WF_EXEC_MAX_EP], rn[WF_EXEC_MAX_EP];
    for (int64_t p = 0; p < x->ep; p++) {
        sn[p] = x->rn[p] * x->H;
        rn[p] = x->sn[p] * x->H;
    }
    wf_status st = e->ex.alltoallv(e->ex.ctx, rows, sn, x->send, rn);
    if (st != WF_OK)
        return st;
    memset(out, 0, sizeof(float) * (size_t)(x->E * x->C * x->H));
    int64_t at = 0;
    for (int64_t k = 0; k < x->E; k++) {
        memcpy(out + k * x->C * x->H, x->send + at, sizeof(float) * (size_t)(x->cnt[k] * x->H));
        at += x->cnt[k] * x->H;
    }
    return WF_OK;
}

/* The grouped MLP under expert parallelism: every rank's filled rows go to
 * their experts' ranks, each rank runs its El experts on what it received,
 * and the outputs come back. */
wf_status wf_exec_ep_fwd(wf_exec *e, const wf_op *op, float *y)
{
    ep_xchg x;
    wf_status st = ep_prepare(e, op, &x);
    if (st == WF_OK)
        st = ep_send_rows(e, &x, F(op->in[0]), x.recv[0]);
    if (st != WF_OK)
        return st;
    int64_t at = 0;
    for (int64_t s = 0; s < x.ep; s++)
        for (int64_t l = 0; l < x.El; l++) {
            int64_t r = x.rcnt[s * x.El + l], k = x.g * x.El + l;
            if (r > 0)
                K(e, grouped_mlp_fwd)(x.recv[0] + at, F(op->in[1]) + k * x.H * x.G, F(op->in[2]) + k * x.Fd * x.H,
                                     x.recv[1] + at, e->ws, 1, r, x.H, x.Fd, x.swiglu);
            at += r * x.H;
        }
    return ep_return_rows(e, &x, x.recv[1], y);
}

/* Its backward: the rows and their output gradients go to the experts'
 * ranks, which recompute from the rows, accumulate their slice of the weight
 * gradients (zero elsewhere: the data-parallel reduction sums each slice over
 * the ranks that own it) and send the rows' input gradients back. */
wf_status wf_exec_ep_bwd(wf_exec *e, const wf_op *f, const float *dy, float *d0, float *d1, float *d2)
{
    ep_xchg x;
    wf_status st = ep_prepare(e, f, &x);
    if (st == WF_OK)
        st = ep_send_rows(e, &x, F(f->in[0]), x.recv[0]);
    if (st == WF_OK)
        st = ep_send_rows(e, &x, dy, x.recv[1]);
    if (st != WF_OK)
        return st;
    int64_t n1 = x.H * x.G, n2 = x.Fd * x.H;
    if (d1)
        memset(d1, 0, sizeof(float) * (size_t)(x.E * n1));
    if (d2)
        memset(d2, 0, sizeof(float) * (size_t)(x.E * n2));
    int64_t at = 0;
    for (int64_t s = 0; s < x.ep; s++)
        for (int64_t l = 0; l < x.El; l++) {
            int64_t r = x.rcnt[s * x.El + l], k = x.g * x.El + l;
            if (r > 0) {
                K(e, grouped_mlp_bwd)(x.recv[0] + at, F(f->in[1]) + k * n1, F(f->in[2]) + k * n2, x.recv[1] + at,
                                     x.recv[2] + at, d1 ? x.tw : NULL, d2 ? x.tw + n1 : NULL, e->ws, 1, r, x.H,
                                     x.Fd, x.swiglu);
                for (int64_t j = 0; d1 && j < n1; j++)
                    d1[k * n1 + j] += x.tw[j];
                for (int64_t j = 0; d2 && j < n2; j++)
                    d2[k * n2 + j] += x.tw[n1 + j];
            }
            at += r * x.H;
        }
    /* Every rank takes part in the return exchange, d0 wanted or not. */
    float *dx = d0 ? d0 : x.recv[0];
    return ep_return_rows(e, &x, x.recv[2], dx);
}
