/* Pipeline stages with tensor parallelism inside each stage against one
 * process (run by CTest under mpiexec -n 2 and -n 4; the cases need 4
 * ranks: on 2 only the refusals run).
 *
 * Every rank first trains the single-process reference alone (self mode,
 * plan dp=1,mbs=2: the global batch of 8 in four micro-batches of 2). Then
 * the 4 ranks train gpt-tiny (dropout on, tied word embedding) as pp=2,tp=2
 * (ranks Megatron's order: tp innermost) under 1F1B and GPipe, and
 * pp=2,tp=2,sp=1. Checks, over 20 steps with AdamW and clipping: every loss
 * within relative 1e-5 of the reference; the whole model gathered from the
 * stages' shards identical on every rank and within 1e-4 of the reference's
 * parameters (relative to the largest; AdamW's rounding, as in
 * test_pipeline.c); the ops each rank executed equal weft/sched.h's order of
 * its stage. Refusals: a tp that does not divide the heads, and ranks that
 * are not pp x tp x dp, fail on every rank with one line. */
#include "harness.h"
#include "weft/runtime.h"
#include "weft/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 20
#define MAXP 200000

static void config(wf_train_config *c, const char *plan, int self)
{
    harness_config(c, "gpt-tiny", plan, "wfbp", 8, WF_OPTIM_ADAMW, 3e-3, 17, self);
}

/* 20 steps into losses; params gets the whole model after the last. */
static int train(const wf_train_config *c, double *losses, float *params, int64_t *np, wf_train **keep)
{
    wf_train *t = NULL;
    if (wf_train_create(c, &t) != WF_OK) {
        fprintf(stderr, "rank %d: %s\n", g_rank, wf_last_error());
        *keep = NULL;
        return -1;
    }
    int rc = harness_steps(t, 0, STEPS, losses);
    if (rc == 0 && wf_train_gather_params(t, params, MAXP, np) != WF_OK) {
        fprintf(stderr, "rank %d: %s\n", g_rank, wf_last_error());
        rc = -1;
    }
    *keep = t;
    return rc;
}

static void check_case(const double *ref, const float *pref, int64_t nref, const char *plan, wf_pipe_kind kind)
{
    static double got[STEPS];
    static float pgot[MAXP];
    int64_t ngot = 0;
    wf_train_config c;
    config(&c, plan, 0);
    wf_train *t = NULL;
    int rc = train(&c, got, pgot, &ngot, &t);
    CHECK(rc == 0, "%s: run failed", plan);
    if (rc != 0) {
        wf_train_free(t);
        return;
    }
    /* pp=2, tp=2, dp=1: stage = rank / 2, four micro-batches. */
    wf_pipe_op ops[64], want[64];
    int n = wf_train_pipe_order(t, ops, 64), nw = 0;
    CHECK(wf_pipe_order(kind, 2, 4, 1, g_rank / 2, want, 64, &nw) == WF_OK, "wf_pipe_order failed");
    CHECK(n == nw, "%s: %d ops executed, the schedule has %d", plan, n, nw);
    for (int i = 0; i < n && i < nw; i++)
        CHECK(ops[i].bwd == want[i].bwd && ops[i].mb == want[i].mb && ops[i].chunk == want[i].chunk,
              "%s rank %d op %d differs from the schedule", plan, g_rank, i);
    wf_train_free(t);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(got[i] - ref[i]) / fabs(ref[i]);
        worst = rel > worst ? rel : worst;
        CHECK(rel <= 1e-5, "%s step %d: loss %.9g, one process %.9g (relative %.3g)", plan, i + 1, got[i], ref[i],
              rel);
    }
    CHECK(ngot == nref, "%s: %lld parameters gathered, the model has %lld", plan, (long long)ngot, (long long)nref);
    double dmax = 0, pmax = 0;
    for (int64_t i = 0; i < nref && i < ngot; i++) {
        double d = fabs((double)pgot[i] - (double)pref[i]);
        dmax = d > dmax ? d : dmax;
        pmax = fabs((double)pref[i]) > pmax ? fabs((double)pref[i]) : pmax;
    }
    CHECK(dmax <= 1e-4 * pmax, "%s: parameters differ from one process's by %.3g (largest %.3g)", plan, dmax, pmax);
    uint64_t lo, hi;
    CHECK(wf_world_minmax_u64(harness_fnv(pgot, ngot), &lo, &hi) == WF_OK && lo == hi,
          "%s: the gathered parameters differ across ranks", plan);
    if (g_rank == 0)
        printf("gpt-tiny %-30s ranks %d: losses %.5f -> %.5f, worst relative loss difference %.2e, parameters max "
               "|diff| %.2e (largest %.3g)\n", plan, g_nranks, got[0], got[STEPS - 1], worst, dmax, pmax);
}

static void refused(const char *plan, const char *want)
{
    wf_train_config c;
    config(&c, plan, 0);
    wf_train *t = NULL;
    wf_status st = wf_train_create(&c, &t);
    CHECK(st == WF_INVAL && t == NULL && strstr(wf_last_error(), want) != NULL && !strchr(wf_last_error(), '\n'),
          "%s: status %d, message '%s' (want one line with '%s')", plan, (int)st, wf_last_error(), want);
    wf_train_free(t);
}

int main(void)
{
    int started = 0;
    if (!harness_start(&started))
        return 1;
    if (g_nranks == 4) {
        static double ref[STEPS];
        static float pref[MAXP];
        int64_t nref = 0;
        wf_train_config c;
        config(&c, "dp=1,mbs=2", 1);
        wf_train *t = NULL;
        CHECK(train(&c, ref, pref, &nref, &t) == 0, "single-process reference failed");
        wf_train_free(t);
        check_case(ref, pref, nref, "pp=2,tp=2,mbs=2,pipe=1f1b", WF_PIPE_1F1B);
        check_case(ref, pref, nref, "pp=2,tp=2,mbs=2,pipe=gpipe", WF_PIPE_GPIPE);
        check_case(ref, pref, nref, "pp=2,tp=2,sp=1,mbs=2,pipe=1f1b", WF_PIPE_1F1B);
        refused("pp=2,tp=2,dp=2,mbs=1", "needs 8 ranks");
    } else {
        refused("pp=2,tp=2,dp=1,mbs=2", "needs 4 ranks");
    }
    refused("pp=2,tp=3,dp=1,mbs=2", "tp=3 does not divide");
    return harness_finish(started);
}
