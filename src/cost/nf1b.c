/* weft cost: the pipeline of a model with recycling (NF1B) and the bytes it
 * recycles.
 *
 * A model with recycle=N (AlphaFold2: Jumper et al. 2021, supplementary
 * 1.10) runs N forwards without gradient before the forward and backward
 * that learn, each forward starting from the previous one's outputs (the
 * first MSA row, the pair representation and the predicted positions'
 * distogram). The recycled outputs leave the last pipeline stage and enter
 * the first, so a micro-batch's forwards follow each other around the
 * pipeline. Two orders of the passes per stage are played:
 *
 *   nf1b=1 (SuperScaler's NF1B, Lin et al., OSDI'23, section 5): every
 *     micro-batch's first forward without gradient, then every one's second,
 *     ..., then the pipeline that learns (1F1B or GPipe, as plan p says):
 *     round r + 1 of micro-batch i waits only for round r of i, so with at
 *     least as many micro-batches as stages the rounds stream back to back;
 *   nf1b=0: each forward that learns is preceded on its stage by the N
 *     forwards without gradient of its micro-batch (recycling as a loop
 *     inside each micro-batch's step), which drains the pipeline N times per
 *     micro-batch.
 *
 * Passes are played as generic.c plays 1F1B and GPipe: each starts when its
 * stage is free and its input is there, sweeping the stages down and up
 * until every pass has run. A forward without gradient lasts ng[k] (its
 * compute and the send to the next stage); the recycled outputs go back from
 * the last stage to the first in rsend seconds. */
#include "cost/cost-impl.h"

#include <stdlib.h>

enum { PASS_NG, PASS_F, PASS_B };

typedef struct {
    int kind, round, mb;
} pass;

/* The base schedule's pass at position pos of stage k (generic.c's order). */
static void base_pass(int k, int p, int m, int gpipe, int pos, pass *out)
{
    out->round = 0;
    if (gpipe) {
        out->kind = pos < m ? PASS_F : PASS_B;
        out->mb = pos < m ? pos : 2 * m - 1 - pos;
        return;
    }
    int w = p - 1 - k < m ? p - 1 - k : m;
    if (pos < w) {
        out->kind = PASS_F;
        out->mb = pos;
    } else if (pos < w + 2 * (m - w)) {
        int j = pos - w;
        out->kind = j & 1 ? PASS_B : PASS_F;
        out->mb = j & 1 ? j / 2 : w + j / 2;
    } else {
        out->kind = PASS_B;
        out->mb = pos - m;
    }
}

int wf_cost_nf_order(int k, int p, int m, int gpipe, int n_rec, int nf1b, int cap, int *kind, int *round, int *mb)
{
    int n = 0;
    if (nf1b)
        for (int r = 0; r < n_rec; r++)
            for (int i = 0; i < m; i++) {
                if (n >= cap)
                    return -1;
                kind[n] = PASS_NG, round[n] = r, mb[n++] = i;
            }
    for (int pos = 0; pos < 2 * m; pos++) {
        pass ps;
        base_pass(k, p, m, gpipe, pos, &ps);
        if (!nf1b && ps.kind == PASS_F)
            for (int r = 0; r < n_rec; r++) {
                if (n >= cap)
                    return -1;
                kind[n] = PASS_NG, round[n] = r, mb[n++] = ps.mb;
            }
        if (n >= cap)
            return -1;
        kind[n] = ps.kind, round[n] = 0, mb[n++] = ps.mb;
    }
    return n;
}

int wf_cost_pipeline_nf_ends(const double *fp, const double *bp, const double *ng, double rsend, int p, int m,
                             int gpipe, int n_rec, int nf1b, double *end)
{
    const int per = (n_rec + 2) * m; /* passes per stage */
    const size_t pm = (size_t)p * (size_t)m;
    double *fe = malloc(sizeof(double) * (pm * (size_t)(n_rec + 2) + 2 * (size_t)p));
    int *ord = malloc(sizeof(int) * 3 * (size_t)per * (size_t)p);
    if (!fe || !ord) {
        free(fe);
        free(ord);
        return -2;
    }
    double *be = fe + pm, *ne = be + pm;          /* [k m + i], ne[(r p + k) m + i]: pass ends, -1 not yet */
    double *free_at = ne + (size_t)n_rec * pm, *pos = free_at + p;
    for (size_t i = 0; i < pm * (size_t)(n_rec + 2); i++)
        fe[i] = -1;
    int ret = 0;
    for (int k = 0; k < p; k++) {
        int *o = ord + 3 * (size_t)per * (size_t)k;
        if (wf_cost_nf_order(k, p, m, gpipe, n_rec, nf1b, per, o, o + per, o + 2 * per) != per) {
            ret = -1;
            goto out;
        }
        free_at[k] = pos[k] = 0;
    }
    int64_t left = (int64_t)per * p;
    for (int sweep = 0, stalled = 0; left > 0; sweep++) {
        int64_t before = left;
        for (int s = 0; s < p; s++) {
            int k = sweep & 1 ? p - 1 - s : s;
            const int *o = ord + 3 * (size_t)per * (size_t)k;
            for (;;) {
                int n = (int)pos[k];
                if (n >= per)
                    break;
                int kind = o[n], r = o[per + n], i = o[2 * per + n];
                size_t at = (size_t)k * (size_t)m + (size_t)i;
                double ready, dur, *dst;
                if (kind == PASS_NG) {
                    /* Round r on stage 0 takes round r - 1's outputs from the last stage. */
                    ready = k > 0 ? ne[((size_t)r * p + k - 1) * m + i]
                          : r > 0 ? (ne[((size_t)(r - 1) * p + p - 1) * m + i] < 0
                                         ? -1 : ne[((size_t)(r - 1) * p + p - 1) * m + i] + rsend)
                                  : 0;
                    dur = ng[k];
                    dst = &ne[((size_t)r * p + k) * m + i];
                } else if (kind == PASS_F) {
                    if (k > 0)
                        ready = fe[at - (size_t)m];
                    else if (n_rec > 0) {
                        double last = ne[((size_t)(n_rec - 1) * p + p - 1) * m + i];
                        ready = last < 0 ? -1 : last + rsend;
                    } else
                        ready = 0;
                    dur = fp[k];
                    dst = &fe[at];
                } else {
                    ready = k + 1 < p ? be[at + (size_t)m] : fe[at];
                    dur = bp[k];
                    dst = &be[at];
                }
                if (ready < 0)
                    break;
                double t = (ready > free_at[k] ? ready : free_at[k]) + dur;
                *dst = t;
                free_at[k] = t;
                pos[k] = n + 1;
                left--;
            }
        }
        stalled = left == before ? stalled + 1 : 0;
        if (stalled == 2) {
            ret = -1; /* no pass could run in a down and an up sweep: a broken order */
            goto out;
        }
    }
    for (int k = 0; k < p; k++)
        end[k] = free_at[k];
out:
    free(fe);
    free(ord);
    return ret;
}

double wf_cost_recycle_bytes(const wf_model_config *m)
{
    if (m->recycle < 1 || m->family != WF_FAMILY_ALPHAFOLD)
        return 0;
    /* The builder's recycled inputs (src/models/swin_t5_af2.c): the first
     * MSA row [seq, hidden], the pair [seq, seq, pair] and the previous
     * positions' distogram [seq, seq, 15 bins], per sample. */
    double s = (double)m->seq;
    return (s * (double)m->hidden + s * s * (double)m->pair_dim + s * s * 15.0) * (double)wf_dtype_bytes(m->dtype);
}
