/* Coordinate descent over signatures (AutoDDL, Chen et al. 2023).
 *
 * Start from data parallelism (every variable's data-parallel choice); sweep
 * the variables in topological order, then in reverse, alternating; each takes
 * the choice minimizing its own time + the pairwise times to its neighbours'
 * current choices + lambda x its memory. Every accepted move strictly lowers
 * time + lambda x memory of the whole plan, so the descent terminates; a sweep
 * that changes nothing ends it. While the plan does not fit, lambda grows
 * (x4 per round, from 1e-3 x time/memory); once it fits, moves must keep it
 * fitting and a final pass at lambda 0 spends the spare memory on speed. */
#include "search/oplevel-impl.h"

#include <math.h>
#include <string.h>

/* Time terms involving variable v at choice c (neighbours at their choices). */
static double var_time(const ol_problem *p, const int *assign, int v, int c)
{
    double t = p->var[v].t[c];
    for (int k = p->adj_start[v]; k < p->adj_start[v + 1]; k++) {
        const ol_edge *e = &p->edge[p->adj[k]];
        size_t nv = (size_t)p->var[e->v].nch;
        if (e->u == v)
            t += e->t[(size_t)c * nv + (size_t)assign[e->v]];
        else
            t += e->t[(size_t)assign[e->u] * nv + (size_t)c];
    }
    return t;
}

int ol_cd_run(const ol_problem *p, int *assign, double lambda, double mem_cap, int max_sweeps)
{
    double mem = 0;
    for (int v = 0; v < p->nvar; v++)
        mem += p->var[v].m[assign[v]];
    int sweeps = 0;
    for (int s = 0; s < max_sweeps; s++) {
        int changed = 0;
        sweeps++;
        for (int i = 0; i < p->nvar; i++) {
            int v = s % 2 == 0 ? i : p->nvar - 1 - i;
            const ol_var *V = &p->var[v];
            int cur = assign[v];
            int fit_mode = mem_cap >= 0 && mem <= mem_cap;
            int best = cur;
            double bestv = var_time(p, assign, v, cur) + lambda * V->m[cur];
            for (int c = 0; c < V->nch; c++) {
                if (c == cur)
                    continue;
                if (fit_mode && mem - V->m[cur] + V->m[c] > mem_cap)
                    continue;
                double val = var_time(p, assign, v, c) + lambda * V->m[c];
                /* Strictly better beyond rounding noise: no cycling between ties. */
                if (val < bestv - 1e-12 * fabs(bestv)) {
                    best = c;
                    bestv = val;
                }
            }
            if (best != cur) {
                mem += V->m[best] - V->m[cur];
                assign[v] = best;
                changed = 1;
            }
        }
        if (!changed)
            break;
    }
    return sweeps;
}

wf_status ol_cd_search(const ol_problem *p, double mem_limit, int *best_assign, ol_plan **plans,
                       int *nplans, int *cap_plans, int *sweeps, wf_arena *a)
{
    int n = p->nvar, max_sweeps = p->opts.max_sweeps;
    for (int v = 0; v < n; v++)
        best_assign[v] = p->var[v].dp;
    int first = *nplans;
    wf_status st;
    *sweeps += ol_cd_run(p, best_assign, 0.0, mem_limit, max_sweeps);
    if ((st = ol_plans_push(p, plans, nplans, cap_plans, best_assign, a)))
        return st;
    double t, m;
    ol_eval(p, best_assign, &t, NULL, &m);
    if (m > mem_limit) {
        double lambda = 1e-3 * (t > 0 ? t : 1e-9) / (m > 0 ? m : 1.0);
        for (int round = 0; round < 64 && m > mem_limit; round++) {
            *sweeps += ol_cd_run(p, best_assign, lambda, mem_limit, max_sweeps);
            if ((st = ol_plans_push(p, plans, nplans, cap_plans, best_assign, a)))
                return st;
            ol_eval(p, best_assign, &t, NULL, &m);
            lambda *= 4;
        }
        if (m <= mem_limit) {
            *sweeps += ol_cd_run(p, best_assign, 0.0, mem_limit, max_sweeps);
            if ((st = ol_plans_push(p, plans, nplans, cap_plans, best_assign, a)))
                return st;
        }
    }
    /* The best met: fastest fitting, else smallest. */
    int pick = -1;
    for (int i = first; i < *nplans; i++) {
        const ol_plan *q = &(*plans)[i];
        const ol_plan *b = pick >= 0 ? &(*plans)[pick] : NULL;
        int qf = q->m <= mem_limit, bf = b && b->m <= mem_limit;
        if (!b || (qf && !bf) || (qf && bf && q->t < b->t) || (!qf && !bf && q->m < b->m))
            pick = i;
    }
    memcpy(best_assign, (*plans)[pick].assign, sizeof(int) * (size_t)n);
    return WF_OK;
}
