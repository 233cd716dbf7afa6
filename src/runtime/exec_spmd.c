/* The executor's SPMD mode (wf_exec_spmd): what a rank's local graph of an
 * op-level plan needs beyond the kernels -- boxing ops run as the SPMD
 * engine's collectives, dropout over a local block of a global tensor, the
 * vocabulary-split embedding and cross-entropy, and batch statistics over a
 * split batch. The executor (executor.c) calls these from its passes. */
#include "runtime/executor-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void wf_exec_set_spmd(wf_exec *e, const wf_exec_spmd *s)
{
    if (s) {
        e->sp = *s;
        e->has_sp = 1;
    } else {
        memset(&e->sp, 0, sizeof e->sp);
        e->has_sp = 0;
    }
}

/* ---- SPMD: sharded dropout, vocabulary-split embedding and cross-entropy ---------------- */

int wf_exec_sp_is_box(const wf_exec *e, int o)
{
    return e->has_sp && e->sp.box_op && o >= 0 && o < e->g.nfwd && e->sp.box_op[o];
}

int wf_exec_sp_vocab_split(const wf_exec *e, int o)
{
    return e->has_sp && e->sp.vocab_first && o >= 0 && o < e->g.nfwd && e->sp.vocab_first[o] >= 0;
}

/* Dropout of forward op o over a local block of a global tensor: the block
 * is a set of runs contiguous in both (the trailing dims the block holds
 * whole, and the innermost split dim's local extent); each run takes its
 * mask at its global offset. */
int wf_exec_sp_dropout(const wf_exec *e, int o, const float *src, float *dst, int bwd)
{
    if (!e->has_sp || !e->sp.has_view || o >= e->g.nfwd || !e->sp.has_view[o])
        return 0;
    const wf_op *op = &e->g.ops[o];
    const wf_tensor *x = &e->g.tensors[op->in[0]];
    const wf_exec_view *v = &e->sp.view[o];
    int nd = x->ndim, k = nd - 1;
    while (k > 0 && x->shape[k] == v->gshape[k])
        k--;
    int64_t run = 1, gstride[WF_MAX_DIMS], gnumel = 1;
    for (int d = nd - 1; d >= 0; d--) {
        gstride[d] = gnumel;
        gnumel *= v->gshape[d];
    }
    for (int d = k; d < nd; d++)
        run *= x->shape[d];
    int64_t outer = wf_tensor_numel(x) / (run > 0 ? run : 1);
    uint64_t base = (uint64_t)e->first_sample * (uint64_t)(gnumel / v->gshape[0]);
    uint64_t seed = wf_k_seed_mix(op->attr.seed ^ e->seed, e->stream);
    int64_t idx[WF_MAX_DIMS] = {0};
    for (int64_t r = 0; r < outer; r++) {
        int64_t g = v->start[k] * gstride[k];
        for (int d = 0; d < k; d++)
            g += (v->start[d] + idx[d]) * gstride[d];
        if (bwd)
            K(e, dropout_bwd)(src + r * run, dst + r * run, run, (float)op->attr.p, seed, base + (uint64_t)g);
        else
            K(e, dropout_fwd)(src + r * run, dst + r * run, run, (float)op->attr.p, seed, base + (uint64_t)g);
        for (int d = k - 1; d >= 0; d--) {
            if (++idx[d] < x->shape[d])
                break;
            idx[d] = 0;
        }
    }
    return 1;
}

/* ids[m] over table rows [first, first + v) of a vocabulary of vt: rows of
 * other shards are zero here (the output is a partial sum). */
wf_status wf_exec_sp_embedding_fwd(const int32_t *ids, const float *table, float *y, int64_t m, int64_t v,
                                   int64_t h, int64_t first, int64_t vt)
{
    wf_status st = WF_OK;
    for (int64_t i = 0; i < m; i++) {
        int64_t r = (int64_t)ids[i] - first;
        if ((ids[i] < 0 || ids[i] >= vt) && st == WF_OK)
            st = wf_errorf(WF_INVAL, "embedding: token id %d at position %lld is outside [0, %lld)", (int)ids[i],
                           (long long)i, (long long)vt);
        if (r >= 0 && r < v)
            memcpy(y + i * h, table + r * h, sizeof(float) * (size_t)h);
        else
            memset(y + i * h, 0, sizeof(float) * (size_t)h);
    }
    return st;
}

void wf_exec_sp_embedding_bwd(const int32_t *ids, const float *dy, float *dtable, int64_t m, int64_t v, int64_t h,
                              int64_t first)
{
    memset(dtable, 0, sizeof(float) * (size_t)(v * h));
    for (int64_t i = 0; i < m; i++) {
        int64_t r = (int64_t)ids[i] - first;
        if (r >= 0 && r < v)
            for (int64_t j = 0; j < h; j++)
                dtable[r * h + j] += dy[i * h + j];
    }
}

/* Megatron's vocabulary-parallel cross-entropy: logits[m, v] are columns
 * [first, first + v) of the vocabulary; the row maxima, then the sums of
 * exponentials and the target logits, are reduced over the shards, so every
 * shard gets the whole loss and saves each row's log-sum-exp. ws holds 3m
 * floats. Columns at or beyond vt are a padded vocabulary's padding
 * (spmd.c): masked out, as if their logits were -inf, so the loss is the
 * unpadded model's (Megatron's own loss takes the padding's logits in:
 * NVIDIA/Megatron-LM@d98e8a64, megatron/core/tensor_parallel/cross_entropy.py
 * normalizes over the whole partition). */
wf_status wf_exec_sp_ce_fwd(wf_exec *e, int o, const float *x, const int32_t *lab, float *loss, float *saved,
                            float *ws, int64_t m, int64_t v, int64_t first, int64_t vt)
{
    wf_status st = WF_OK;
    float *mx = ws, *se = ws + m; /* se: [sum of exp, target] per row */
    const int64_t nv = first + v <= vt ? v : vt > first ? vt - first : 0; /* this shard's valid columns */
    for (int64_t i = 0; i < m; i++)
        mx[i] = wf_k_row_max(x + i * v, nv);
    wf_status cs = e->sp.allreduce(e->sp.ctx, o, mx, m, 1);
    for (int64_t i = 0; i < m; i++) {
        se[2 * i] = wf_k_row_expsum(x + i * v, nv, mx[i]);
        int64_t r = (int64_t)lab[i] - first;
        se[2 * i + 1] = r >= 0 && r < nv ? x[i * v + r] : 0.0f;
        if ((lab[i] < 0 || lab[i] >= vt) && st == WF_OK)
            st = wf_errorf(WF_INVAL, "cross_entropy: label %d at row %lld is outside [0, %lld)", (int)lab[i],
                           (long long)i, (long long)vt);
    }
    if (cs == WF_OK)
        cs = e->sp.allreduce(e->sp.ctx, o, se, 2 * m, 0);
    if (cs != WF_OK)
        return cs;
    double total = 0;
    for (int64_t i = 0; i < m; i++) {
        float lse = mx[i] + logf(se[2 * i]);
        if (saved)
            saved[i] = lse;
        total += (double)lse - (double)se[2 * i + 1];
    }
    *loss = (float)(total / (double)m);
    return st;
}

/* The gradient of wf_exec_sp_ce_fwd's loss; the padding's columns (at or
 * beyond vt) get none. */
void wf_exec_sp_ce_bwd(const float *x, const int32_t *lab, const float *saved, float dloss, float *dx, int64_t m,
                       int64_t v, int64_t first, int64_t vt)
{
    const float c = dloss / (float)m;
    const int64_t nv = first + v <= vt ? v : vt > first ? vt - first : 0;
    for (int64_t i = 0; i < m; i++) {
        wf_k_row_scaled_exp(x + i * v, dx + i * v, nv, saved[i], c);
        if (nv < v)
            memset(dx + i * v + nv, 0, sizeof(float) * (size_t)(v - nv));
        int64_t r = (int64_t)lab[i] - first;
        if (r >= 0 && r < nv)
            dx[i * v + r] -= c;
    }
}

int wf_exec_sp_stats_split(const wf_exec *e, int o)
{
    return e->has_sp && e->sp.stats_split && o >= 0 && o < e->g.nfwd && e->sp.stats_split[o];
}

/* Batchnorm over a shard of the batch: the kernels' two-pass statistics with
 * each pass's per-channel sums (and the element count) reduced over the
 * shards; ws holds 2c + 1 floats. */
wf_status wf_exec_sp_bn_fwd(wf_exec *e, int o, const float *x, const float *gamma, const float *beta, float *y,
                            float *saved, float *ws, int64_t n, int64_t c, int64_t s)
{
    for (int64_t ch = 0; ch < c; ch++) {
        double sum = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++)
                sum += (double)x[(i * c + ch) * s + t];
        ws[ch] = (float)sum;
    }
    ws[c] = (float)(n * s);
    wf_status st = e->sp.allreduce(e->sp.ctx, o, ws, c + 1, 0);
    if (st != WF_OK)
        return st;
    const float cnt = ws[c];
    for (int64_t ch = 0; ch < c; ch++) {
        const float mean = ws[ch] / cnt;
        double var = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++) {
                float d = x[(i * c + ch) * s + t] - mean;
                var += (double)(d * d);
            }
        ws[c + 1 + ch] = (float)var;
        ws[ch] = mean;
    }
    if ((st = e->sp.allreduce(e->sp.ctx, o, ws + c + 1, c, 0)) != WF_OK)
        return st;
    for (int64_t ch = 0; ch < c; ch++) {
        const float mean = ws[ch], rstd = 1.0f / sqrtf(ws[c + 1 + ch] / cnt + (float)e->g.ops[o].attr.eps);
        const float a = rstd * gamma[ch], b = beta[ch] - mean * a;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++)
                y[(i * c + ch) * s + t] = x[(i * c + ch) * s + t] * a + b;
        saved[ch] = mean;
        saved[c + ch] = rstd;
    }
    return WF_OK;
}

/* Backward: the per-channel sums of dy and dy * xhat reduced over the shards
 * for dx; dgamma and dbeta stay this shard's (partial sums). ws: 2c floats. */
wf_status wf_exec_sp_bn_bwd(wf_exec *e, int o, const float *x, const float *gamma, const float *dy,
                            const float *saved, float *dx, float *dgamma, float *dbeta, float *ws, int64_t n,
                            int64_t c, int64_t s)
{
    for (int64_t ch = 0; ch < c; ch++) {
        const float mean = saved[ch], rstd = saved[c + ch];
        double sd = 0, sdx = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++) {
                float d = dy[(i * c + ch) * s + t];
                sd += (double)d;
                sdx += (double)(d * (x[(i * c + ch) * s + t] - mean));
            }
        ws[ch] = (float)sd;
        ws[c + ch] = (float)sdx * rstd;
        if (dgamma)
            dgamma[ch] = ws[c + ch];
        if (dbeta)
            dbeta[ch] = ws[ch];
    }
    float cnt = (float)(n * s);
    wf_status st = e->sp.allreduce(e->sp.ctx, o, &cnt, 1, 0);
    if (st == WF_OK)
        st = e->sp.allreduce(e->sp.ctx, o, ws, 2 * c, 0);
    if (st != WF_OK || !dx)
        return st;
    for (int64_t ch = 0; ch < c; ch++) {
        const float mean = saved[ch], rstd = saved[c + ch];
        const float a = gamma[ch] * rstd, md = ws[ch] / cnt, mdx = ws[c + ch] / cnt;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++) {
                int64_t k = (i * c + ch) * s + t;
                dx[k] = a * (dy[k] - md - (x[k] - mean) * rstd * mdx);
            }
    }
    return WF_OK;
}
