/* Expert parallelism over MPI against one process (issue 15; run by CTest
 * under mpiexec -n 2 and -n 4).
 *
 * Every rank first trains the single-process reference alone (on
 * MPI_COMM_SELF, the same seed and global batch), then all ranks train
 * together with the experts of each MoE layer split over groups of ep ranks
 * (plan dp=P,ep=E: the ep ranks are carved out of the P data-parallel ones,
 * as in Megatron-Core's folding; with P = 4 and ep = 2 there are two groups
 * holding the same experts). 20 steps each; checks: every step's loss within
 * relative 1e-5 of the reference and the parameters bit-identical on every
 * rank afterwards.
 *
 *   moe-tiny:capacity=2  dropless (cf = E / top_k): a rank's routing is the
 *                        single process's whatever the batch split;
 *   moe-tiny             cf = 1: experts overflow and tokens are dropped.
 *                        Capacity is per micro-batch (C = ceil(cf T K / E)
 *                        of the tokens one replica routes at a time), so the
 *                        reference takes one micro-batch per rank's slice
 *                        (mbs = B / P) and drops the same tokens; the first
 *                        loss differs from the dropless one (tokens were
 *                        dropped);
 *   deepseek-tiny        sigmoid router, 8 experts (ep = 2 and, on 4 ranks,
 *                        ep = 4: two experts per rank), a dense first layer. */
#include "harness.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 20
#define BATCH 8

static void config(wf_train_config *c, const char *model, const char *plan, int self)
{
    harness_config(c, model, plan, "ddp", BATCH, WF_OPTIM_ADAMW, 3e-3, 23, self);
}

/* Trains STEPS steps (harness_train). */
static int train(const wf_train_config *c, double *losses, uint64_t *sum)
{
    return harness_train(c, STEPS, losses, sum, NULL);
}

/* Trains model with dp=P,ep=ep against the single process under ref_plan;
 * first[] gets the step losses of the reference. Returns the worst relative
 * difference. */
static double check(const char *model, int ep, const char *ref_plan, double *ref)
{
    double run[STEPS];
    uint64_t sum = 0, lo, hi;
    wf_train_config c;
    config(&c, model, ref_plan, 1);
    CHECK(train(&c, ref, &sum) == 0, "%s: single-process reference (%s) failed", model, ref_plan);
    char plan[64];
    snprintf(plan, sizeof plan, "dp=%d,ep=%d", g_nranks, ep);
    config(&c, model, plan, 0);
    CHECK(train(&c, run, &sum) == 0, "%s %s: expert-parallel run failed", model, plan);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(run[i] - ref[i]) / fabs(ref[i]);
        worst = rel > worst ? rel : worst;
        CHECK(rel <= 1e-5, "%s %s step %d: loss %.9g, one process %.9g (relative %.3g)", model, plan, i + 1, run[i],
              ref[i], rel);
    }
    CHECK(wf_world_minmax_u64(sum, &lo, &hi) == WF_OK, "checksum reduction failed");
    CHECK(lo == hi, "%s %s: parameters differ across ranks (checksums %016llx .. %016llx)", model, plan,
          (unsigned long long)lo, (unsigned long long)hi);
    CHECK(ref[STEPS - 1] < ref[0], "%s: loss did not fall (%g -> %g)", model, ref[0], ref[STEPS - 1]);
    if (g_rank == 0)
        printf("%-20s plan %-10s ranks %d (reference %-12s): losses %.5f -> %.5f, worst relative difference "
               "%.2e\n",
               model, plan, g_nranks, ref_plan, run[0], run[STEPS - 1], worst);
    return worst;
}

int main(void)
{
    int started = 0;
    if (!harness_start(&started))
        return 1;
    if (g_nranks % 2 != 0 || BATCH % g_nranks != 0) {
        if (g_rank == 0)
            fprintf(stderr, "run with 2 or 4 ranks\n");
        wf_mpi_stop(started);
        return 1;
    }
    double dropless[STEPS], drop[STEPS], ds[STEPS];
    check("moe-tiny:capacity=2", 2, "auto", dropless);
    char mb[32];
    snprintf(mb, sizeof mb, "dp=1,mbs=%d", BATCH / g_nranks);
    check("moe-tiny", 2, mb, drop);
    /* cf = 1 dropped tokens: the first step (same weights, same batch) differs. */
    CHECK(fabs(drop[0] - dropless[0]) > 1e-6 * fabs(dropless[0]), "cf=1 dropped no token (first loss %.9g both)",
          drop[0]);
    check("deepseek-tiny", 2, mb, ds);
    if (g_nranks >= 4)
        check("deepseek-tiny", 4, mb, ds);
    return harness_finish(started);
}
