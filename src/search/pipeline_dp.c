/* weft pipeline-stage DP: Alpa's inter-operator pass on a chain of layers
 * (ALGORITHMS.md §3, "Pipeline stages").
 *
 * Symbols: n layers, S stages, m micro-batches. A split cuts the chain into S
 * contiguous, non-empty stages; stage s has time T_s (its layers' times plus
 * the send of its boundary activation when it is not the last stage) and
 * memory W_s + A_s x min(S - s, m) (weights, plus activations of the
 * micro-batches a 1F1B stage holds). The pipeline's time is
 *   sum_s T_s + (m - 1) x max_s T_s
 * (the first micro-batch crosses every stage, the other m - 1 follow at the
 * pace of the slowest). Since the sum depends on where the sends fall, both
 * terms matter: for each bound t_max on the slowest stage (every distinct
 * stage time, ascending), a DP over (stages used, layers covered) minimizes
 * the sum of stage times with every stage <= t_max and within memory; the
 * candidate is sum + (m - 1) x t_max. The enumeration starts at the smallest
 * feasible bound (bisection: feasibility grows with the bound) and stops once
 * max(least unbounded sum, t_max) + (m - 1) x t_max, a lower bound on every
 * split whose slowest stage is t_max or more, reaches the best found (Alpa's
 * early exit, tightened). Cost: O(n^2) bounds x O(S n^2) DP in the worst
 * case, a handful of DPs in practice.
 *
 * What it is not: the sub-mesh choice per stage (every stage gets the same
 * devices here; the outer search picks dp x pp around it). */
#include "weft/search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The DP for one bound: the least sum of stage times over splits of the n
 * layers into S stages, each stage's time <= tmax and memory within the limit
 * (INFINITY when none). F[k * (n+1) + j]: layers [0, j) in k stages; arg: where
 * stage k starts. Stage times are SEG_TIME below. */
static double dp_fill(int n, int S, int64_t micro, double tmax, const double *send_s,
                      const double *pt, const double *pw, const double *pa, double mem_limit_bytes,
                      double *F, int *arg)
{
    size_t n1 = (size_t)n + 1;
    for (size_t x = 0; x < (size_t)(S + 1) * n1; x++)
        F[x] = INFINITY;
    F[0] = 0;
    for (int k = 1; k <= S; k++) {
        double inflight = (double)(S - (k - 1) < micro ? S - (k - 1) : micro);
        /* Stage k-1 covers [i, j); the remaining S-k stages need S-k layers. */
        for (int j = k; j <= n - (S - k); j++) {
            double fbest = INFINITY;
            int abest = -1;
            double snd = j < n && send_s ? send_s[j - 1] : 0;
            for (int i = j - 1; i >= k - 1; i--) {
                double t = pt[j] - pt[i] + snd;
                if (t > tmax)
                    break; /* longer stages only get slower */
                double prev = F[(size_t)(k - 1) * n1 + (size_t)i];
                if (prev == INFINITY)
                    continue;
                if (mem_limit_bytes > 0 &&
                    pw[j] - pw[i] + (pa[j] - pa[i]) * inflight > mem_limit_bytes)
                    continue;
                if (prev + t < fbest) {
                    fbest = prev + t;
                    abest = i;
                }
            }
            F[(size_t)k * n1 + (size_t)j] = fbest;
            arg[(size_t)k * n1 + (size_t)j] = abest;
        }
    }
    return F[(size_t)S * n1 + (size_t)n];
}

wf_status wf_pipeline_dp(int n, const double *layer_time_s, const double *send_s,
                         const double *weight_bytes, const double *act_bytes, int nstages,
                         int64_t micro, double mem_limit_bytes, wf_stage_plan *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1 || !layer_time_s)
        return wf_errorf(WF_INVAL, "pipeline DP: %d layers (expected >= 1 with times)", n);
    int smax = n < WF_PIPELINE_MAX_STAGES ? n : WF_PIPELINE_MAX_STAGES;
    if (nstages < 1 || nstages > smax)
        return wf_errorf(WF_INVAL, "pipeline DP: stages=%d, expected 1..%d for %d layers", nstages,
                         smax, n);
    if (micro < 1)
        return wf_errorf(WF_INVAL, "pipeline DP: micro-batches=%lld, expected >= 1",
                         (long long)micro);
    for (int i = 0; i < n; i++) {
        double snd = send_s ? send_s[i] : 0;
        double w = weight_bytes ? weight_bytes[i] : 0, a = act_bytes ? act_bytes[i] : 0;
        if (!(layer_time_s[i] >= 0) || !(snd >= 0) || !(w >= 0) || !(a >= 0) ||
            !isfinite(layer_time_s[i] + snd + w + a))
            return wf_errorf(WF_INVAL, "pipeline DP: layer %d has a negative or non-finite cost "
                                       "(time %g s, send %g s, weights %g B, activations %g B)",
                             i, layer_time_s[i], snd, w, a);
    }
    int S = nstages;
    size_t n1 = (size_t)n + 1;
    /* Prefix sums: pt = times, pw = weights, pa = activations. */
    double *pt = calloc(3 * n1, sizeof *pt);
    /* Candidate bounds: every segment's stage time. */
    size_t nseg = (size_t)n * n1 / 2;
    double *bounds = malloc(nseg * sizeof *bounds);
    /* F[k * n1 + j]: least sum for layers [0, j) in k stages; arg: where stage k starts. */
    double *F = malloc((size_t)(S + 1) * n1 * sizeof *F);
    int *arg = malloc((size_t)(S + 1) * n1 * sizeof *arg);
    int *best_first = malloc(((size_t)S + 1) * sizeof *best_first);
    wf_status st = WF_OK;
    if (!pt || !bounds || !F || !arg || !best_first) {
        st = wf_errorf(WF_NOMEM, "pipeline DP: out of memory for %d layers", n);
        goto out;
    }
    double *pw = pt + n1, *pa = pw + n1;
    for (int i = 0; i < n; i++) {
        pt[i + 1] = pt[i] + layer_time_s[i];
        pw[i + 1] = pw[i] + (weight_bytes ? weight_bytes[i] : 0);
        pa[i + 1] = pa[i] + (act_bytes ? act_bytes[i] : 0);
    }
#define SEG_TIME(i, j) (pt[j] - pt[i] + ((j) < n && send_s ? send_s[(j) - 1] : 0))
    size_t nb = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j <= n; j++)
            bounds[nb++] = SEG_TIME(i, j);
    qsort(bounds, nb, sizeof *bounds, cmp_double);

    double best = INFINITY, best_max = 0, best_mem = 0;
    double mm1 = (double)(micro - 1);
    /* The least sum with no bound: every split's sum is at least this, so a
     * split whose slowest stage is t costs at least max(sum_min, t) + (m-1) t. */
    double sum_min = dp_fill(n, S, micro, INFINITY, send_s, pt, pw, pa, mem_limit_bytes, F, arg);
    /* Feasibility is monotone in the bound: bisect for the smallest feasible
     * one, where the enumeration starts. */
    size_t lo = 0, hi = sum_min < INFINITY ? nb : 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (dp_fill(n, S, micro, bounds[mid], send_s, pt, pw, pa, mem_limit_bytes, F, arg) < INFINITY)
            hi = mid;
        else
            lo = mid + 1;
    }
    for (size_t b = lo; b < nb; b++) {
        double tmax = bounds[b];
        if (b > lo && tmax == bounds[b - 1])
            continue;
        if ((sum_min > tmax ? sum_min : tmax) + mm1 * tmax >= best)
            break;
        double sum = dp_fill(n, S, micro, tmax, send_s, pt, pw, pa, mem_limit_bytes, F, arg);
        if (sum == INFINITY)
            continue;
        double total = sum + mm1 * tmax;
        if (total < best) {
            best = total;
            /* Walk the choices back; record the true slowest stage and memory. */
            int j = n;
            best_first[S] = n;
            for (int k = S; k >= 1; k--) {
                int i = arg[(size_t)k * n1 + (size_t)j];
                best_first[k - 1] = i;
                j = i;
            }
            best_max = 0;
            best_mem = 0;
            for (int s = 0; s < S; s++) {
                int i0 = best_first[s], i1 = best_first[s + 1];
                double t = SEG_TIME(i0, i1);
                double inflight = (double)(S - s < micro ? S - s : micro);
                double mem = pw[i1] - pw[i0] + (pa[i1] - pa[i0]) * inflight;
                if (t > best_max)
                    best_max = t;
                if (mem > best_mem)
                    best_mem = mem;
            }
        }
    }
#undef SEG_TIME
    if (best == INFINITY) {
        st = wf_errorf(WF_NOFIT, "pipeline DP: no split of %d layers into %d stages fits %.4g bytes "
                                 "per stage", n, S, mem_limit_bytes);
        goto out;
    }
    out->nstages = S;
    memcpy(out->first, best_first, ((size_t)S + 1) * sizeof *best_first);
    /* The bound that produced the best equals the split's slowest stage (a
     * smaller bound would have produced a cheaper candidate), so this is exact. */
    out->max_stage_s = best_max;
    out->time_s = best;
    out->max_memory_bytes = best_mem;
out:
    free(pt);
    free(bounds);
    free(F);
    free(arg);
    free(best_first);
    return st;
}
