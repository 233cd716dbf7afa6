/* Data-parallel training over MPI against one process (run by CTest under
 * mpiexec -n 2 and -n 4).
 *
 * For gpt-tiny (dropout on: the masks follow global sample indices),
 * mlp-tiny and a dropless moe-tiny (expert parallelism: test_moe_ep.c), global batch 8: every rank first trains a single-process
 * reference alone (self mode, on MPI_COMM_SELF, the same seed and global
 * batch: every rank computes it, so no rank idles in a busy-polling wait);
 * then all ranks train together under each schedule -- wfbp, ddp, dear,
 * horovod, mgwfbp and bytescheduler (chunks) with small thresholds so that
 * there are several groups (checked), plus dear with two
 * micro-batches per rank -- for 20 steps. Checks: every step's loss within
 * relative 1e-5 of the reference, and the parameter checksums identical on
 * every rank (MPI_Allreduce min/max) after the run.
 * Also: a configuration error seen by one rank only (its data file is
 * missing) makes every rank fail with that rank's message, and a batch that
 * the ranks do not divide is refused on every rank. */
#include "harness.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 20

static void config(wf_train_config *c, const char *model, const char *comm, const char *plan, int self)
{
    harness_config(c, model, plan, comm, 8, WF_OPTIM_ADAMW, 3e-3, 17, self);
}

/* Trains STEPS steps (harness_train). */
static int train(const wf_train_config *c, double *losses, uint64_t *sum, int *groups)
{
    return harness_train(c, STEPS, losses, sum, groups);
}

/* thr: the ddp and dear threshold (MiB) that splits the model into several groups. */
static void check_model(const char *model, const char *thr)
{
    double ref[STEPS], dp[STEPS];
    uint64_t sum = 0, lo, hi;
    int groups = 0;
    wf_train_config c;
    config(&c, model, "ddp", "auto", 1);
    CHECK(train(&c, ref, &sum, &groups) == 0, "%s: single-process reference failed", model);
    char comms[7][32], plan[64];
    snprintf(comms[0], sizeof comms[0], "wfbp");
    snprintf(comms[1], sizeof comms[1], "ddp:%s", thr);
    snprintf(comms[2], sizeof comms[2], "dear:%s", thr);
    snprintf(comms[3], sizeof comms[3], "dear:%s", thr);
    /* The schedules whose groups come from the predicted timeline. */
    snprintf(comms[4], sizeof comms[4], "horovod:%s", thr);
    snprintf(comms[5], sizeof comms[5], "mgwfbp");
    snprintf(comms[6], sizeof comms[6], "bytescheduler:%s", thr);
    for (int k = 0; k < 7; k++) {
        /* The last run: two micro-batches per rank (gradient accumulation). */
        if (k == 3)
            snprintf(plan, sizeof plan, "dp=%d,mbs=%d", g_nranks, 8 / g_nranks / 2 > 0 ? 8 / g_nranks / 2 : 1);
        else
            snprintf(plan, sizeof plan, "auto");
        config(&c, model, comms[k], plan, 0);
        CHECK(train(&c, dp, &sum, &groups) == 0, "%s %s: data-parallel run failed", model, comms[k]);
        /* MG-WFBP merges by predicted start-up cost: one group or several. */
        CHECK(groups >= (k == 5 ? 1 : 2), "%s %s: %d group(s), want several", model, comms[k], groups);
        double worst = 0;
        for (int i = 0; i < STEPS; i++) {
            double rel = fabs(dp[i] - ref[i]) / fabs(ref[i]);
            if (rel > worst)
                worst = rel;
            CHECK(rel <= 1e-5, "%s %s plan %s step %d: loss %.9g, one process %.9g (relative %.3g)", model, comms[k],
                  plan, i + 1, dp[i], ref[i], rel);
        }
        CHECK(wf_world_minmax_u64(sum, &lo, &hi) == WF_OK, "checksum reduction failed");
        CHECK(lo == hi, "%s %s: parameters differ across ranks (checksums %016llx .. %016llx)", model, comms[k],
              (unsigned long long)lo, (unsigned long long)hi);
        if (g_rank == 0)
            printf("%s %-10s plan %-12s ranks %d, %2d groups: losses %.5f -> %.5f, worst relative difference "
                   "%.2e\n",
                   model, comms[k], plan, g_nranks, groups, dp[0], dp[STEPS - 1], worst);
    }
    /* The loss fell in 20 steps. */
    CHECK(ref[STEPS - 1] < ref[0], "%s: loss did not fall (%g -> %g)", model, ref[0], ref[STEPS - 1]);
}

static void check_errors(void)
{
    wf_train_config c;
    wf_train *t = NULL;
    /* One rank's data file is missing: every rank fails with its message. */
    config(&c, "gpt-tiny", "dear", "auto", 0);
    if (g_rank == g_nranks - 1)
        c.data = "text:/nonexistent/weft-test-corpus.txt";
    wf_status st = wf_train_create(&c, &t);
    CHECK(st != WF_OK && t == NULL, "a missing data file on one rank was not refused on every rank");
    CHECK(strstr(wf_last_error(), "weft-test-corpus") != NULL, "message does not name the file: %s",
          wf_last_error());
    /* A batch the ranks do not divide. */
    config(&c, "mlp-tiny", "ddp", "auto", 0);
    c.batch = g_nranks * 2 + 1;
    st = wf_train_create(&c, &t);
    CHECK(st == WF_INVAL && strstr(wf_last_error(), "not divisible") != NULL, "indivisible batch: %s",
          wf_last_error());
    /* A plan for another number of ranks. */
    config(&c, "mlp-tiny", "ddp", "dp=3", 0);
    st = wf_train_create(&c, &t);
    CHECK(st == WF_INVAL && strstr(wf_last_error(), "dp=3") != NULL, "plan mismatch: %s", wf_last_error());
    /* tp plans run on the SPMD executor (test_spmd.c); an MLP has no
     * Megatron layout to lower to. */
    config(&c, "mlp-tiny", "ddp", "dp=1,tp=2", 0);
    st = wf_train_create(&c, &t);
    CHECK(st == WF_INVAL && strstr(wf_last_error(), "not a transformer") != NULL, "tp plan: %s",
          wf_last_error());
}

int main(void)
{
    int started = 0;
    if (!harness_start(&started))
        return 1;
    check_model("gpt-tiny", "0.05");
    check_model("mlp-tiny", "0.001");
    /* A mixture of experts, dropless (capacity factor 2 = E / top_k: every
     * expert can take every token, so the routing of a rank's samples is
     * the single process's). */
    check_model("moe-tiny:capacity=2", "0.01");
    check_errors();
    /* Everyone's verdict. */
    return harness_finish(started);
}
