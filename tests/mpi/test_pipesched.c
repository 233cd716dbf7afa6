/* Pipeline stages and SPMD (tp x dp) plans under every gradient schedule and
 * with sharded optimizer state, against one process (run by CTest under
 * mpiexec -n 2 and -n 4).
 *
 * Every rank first trains the single-process reference alone (self mode,
 * plan dp=1,mbs=2: the global batch of 8 in four micro-batches of 2 whose
 * gradients accumulate). On 4 ranks all ranks then train gpt-tiny (dropout
 * on, tied word embedding: a copy on each of the two stages) as
 *   pp=2,dp=2 under dear, horovod, bytescheduler and mgwfbp (each stage's
 *     data-parallel group reduces under the schedule; dear's reduce-scatter
 *     shards hold the tied embedding's gradient, summed over its holders);
 *   pp=2,dp=2 with zero=1 (ddp), zero=2 (wfbp), zero=2 under dear and
 *     zero=3 (the optimizer state, and under zero=3 the parameters, sharded
 *     over each stage's data-parallel group);
 *   tp=2,dp=2 (SPMD) under bytescheduler, with zero=1 under horovod and
 *     dear, with zero=2 under mgwfbp (the schedules tests/mpi/test_spmd.c
 *     does not run; the clipping norm weights each tp-replicated float) and
 *     with zero=3 under ddp (each rank's shards sharded again);
 * and gpt-tiny with 4 layers as pp=2,vpp=2,dp=2 (two chunks per stage, each
 * its own engine) with zero=1 under dear.
 * On 2 ranks (one rank per data-parallel group: the same code, nothing
 * sent) pp=2 under dear and with zero=3, and tp=2 with zero=1 under mgwfbp.
 * Checks, over 20 steps with AdamW and clipping: every loss within relative
 * 1e-5 of the reference; the whole model gathered identical on every rank
 * (hashes) and within 1e-4 of the reference's parameters (relative to the
 * largest; AdamW's rounding near zero gradients, as
 * tests/mpi/test_pipeline.c); the schedule that ran the one asked for;
 * under ZeRO each rank's
 * optimizer state at most 1/dp (+5%) of the unsharded run's.
 * Checkpoints: pp=2,dp=2,zero=2 under dear saved at step 10 resumes to step
 * 20 bit for bit, and resumes under zero=3 (resharded: within 1e-5).
 * Refusals, on every rank
 * in one line: zero=3 with dear (with stages and with tp), zero with
 * bytescheduler's chunks. */
#include "harness.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 20
#define MAXP 300000

static void config(wf_train_config *c, const char *model, const char *plan, const char *comm, int self)
{
    harness_config(c, model, plan, comm, 8, WF_OPTIM_ADAMW, 3e-3, 17, self);
}

typedef struct {
    double losses[STEPS];
    float params[MAXP];
    int64_t nparams;
    size_t optim_bytes;
    char comm[64];      /* the schedule executed, as the trainer describes it */
} run;

/* 20 steps of c into r: losses, the gathered model, the optimizer state
 * this rank holds. 0, or -1 with the reason printed. */
static int train(const wf_train_config *c, run *r)
{
    wf_train *t = NULL;
    if (wf_train_create(c, &t) != WF_OK) {
        fprintf(stderr, "rank %d: %s\n", g_rank, wf_last_error());
        return -1;
    }
    int rc = harness_steps(t, 0, STEPS, r->losses);
    if (rc == 0 && wf_train_gather_params(t, r->params, MAXP, &r->nparams) != WF_OK) {
        fprintf(stderr, "rank %d: %s\n", g_rank, wf_last_error());
        rc = -1;
    }
    wf_train_info info;
    wf_train_info_of(t, &info);
    r->optim_bytes = info.optimizer_bytes;
    snprintf(r->comm, sizeof r->comm, "%s", info.comm);
    wf_train_free(t);
    return rc;
}

/* The unsharded run's optimizer state per rank of each plan kind
 * (pipelined, SPMD), from its first case without ZeRO. */
static size_t g_unsharded[2];

static void check_case(const char *model, const run *ref, const char *plan, const char *comm, int dp)
{
    static run r;
    wf_train_config c;
    config(&c, model, plan, comm, 0);
    memset(&r, 0, sizeof r);
    if (train(&c, &r) != 0) {
        CHECK(0, "%s %s %s: run failed", model, plan, comm);
        return;
    }
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(r.losses[i] - ref->losses[i]) / fabs(ref->losses[i]);
        worst = rel > worst ? rel : worst;
        CHECK(rel <= 1e-5, "%s %s %s step %d: loss %.9g, one process %.9g (relative %.3g)", model, plan, comm, i + 1,
              r.losses[i], ref->losses[i], rel);
    }
    CHECK(r.nparams == ref->nparams, "%s %s %s: %lld parameters gathered, the model has %lld", model, plan, comm,
          (long long)r.nparams, (long long)ref->nparams);
    double dmax = 0, pmax = 0;
    for (int64_t i = 0; i < ref->nparams && r.nparams == ref->nparams; i++) {
        double d = fabs((double)r.params[i] - (double)ref->params[i]);
        dmax = d > dmax ? d : dmax;
        pmax = fabs((double)ref->params[i]) > pmax ? fabs((double)ref->params[i]) : pmax;
    }
    double tol = strncmp(model, "gpt", 3) == 0 ? 1e-4 : 1e-5;
    CHECK(dmax <= tol * pmax, "%s %s %s: parameters differ from one process's by %.3g (largest %.3g)", model, plan,
          comm, dmax, pmax);
    /* The schedule asked for is the one that ran (ZeRO-3: its units). */
    const char *want = strstr(plan, "zero=3") ? "zero-3" : comm;
    size_t nk = strcspn(want, ":");
    CHECK(strncmp(r.comm, want, nk) == 0, "%s %s: ran comm '%s', asked for %s", model, plan, r.comm, want);
    uint64_t lo, hi;
    CHECK(wf_world_minmax_u64(harness_fnv(r.params, r.nparams), &lo, &hi) == WF_OK && lo == hi,
          "%s %s %s: the gathered parameters differ across ranks", model, plan, comm);
    /* Sharded state: 1/dp of the unsharded run's, give or take each group's
     * padding to the ranks and alignment. */
    int kind = strstr(plan, "pp=") != NULL, gpt = strcmp(model, "gpt-tiny") == 0;
    double share = 1;
    if (!strstr(plan, "zero=") && gpt && !g_unsharded[kind])
        g_unsharded[kind] = r.optim_bytes;
    if (strstr(plan, "zero=") && gpt && g_unsharded[kind]) {
        share = (double)r.optim_bytes / (double)g_unsharded[kind];
        CHECK(share <= 1.0 / dp + 0.05, "%s %s: optimizer state %zu bytes on this rank, unsharded %zu", model, plan,
              r.optim_bytes, g_unsharded[kind]);
    }
    if (g_rank == 0)
        printf("%-9s %-26s %-14s ranks %d: losses %.5f -> %.5f, worst relative loss difference %.2e, parameters "
               "max |diff| %.2e (largest %.3g, relative %.2e), optimizer state %.3f of unsharded\n",
               model, plan, r.comm, g_nranks, r.losses[0], r.losses[STEPS - 1], worst, dmax, pmax, dmax / pmax, share);
}

/* plan under comm: saved at step 10, resumed to 20 bit for bit; the
 * checkpoint (full images of the state) resumed under `other` (another ZeRO
 * stage: resharded, within 1e-5). */
static void check_checkpoint(const char *plan, const char *comm, const char *other, const char *other_comm)
{
    char dir[128];
    uint64_t id = 0, idmax = 0;
    wf_world_minmax_u64((uint64_t)getppid(), &id, &idmax); /* one name, agreed */
    snprintf(dir, sizeof dir, "/tmp/weft-test-pipesched-%d-%llu", g_nranks, (unsigned long long)id);
    double a[STEPS];
    wf_train_config c;
    config(&c, "gpt-tiny", plan, comm, 0);
    harness_resume_check(&c, dir, 10, STEPS, a);
    config(&c, "gpt-tiny", other, other_comm, 0);
    harness_reshard_check(&c, dir, plan, 10, STEPS, a);
    if (g_rank == 0)
        printf("checkpoint of %s --comm %s at step 10: resumed bit-identically; resharded into %s --comm %s\n", plan,
               comm, other, other_comm);
}

static void refused(const char *plan, const char *comm, const char *want)
{
    wf_train_config c;
    config(&c, "gpt-tiny", plan, comm, 0);
    harness_refused(&c, want);
}

int main(void)
{
    int started = 0;
    if (!harness_start(&started))
        return 1;
    static run ref, mref;
    wf_train_config c;
    config(&c, "gpt-tiny", "dp=1,mbs=2", "wfbp", 1);
    CHECK(train(&c, &ref) == 0, "gpt-tiny: single-process reference failed");
    if (g_nranks == 4) {
        static const char *const comms[] = {"dear:0.05", "horovod", "bytescheduler:0.05", "mgwfbp"};
        for (int k = 0; k < 4; k++)
            check_case("gpt-tiny", &ref, "pp=2,dp=2,mbs=2", comms[k], 2);
        check_case("gpt-tiny", &ref, "pp=2,dp=2,mbs=2,zero=1", "ddp:0.05", 2);
        check_case("gpt-tiny", &ref, "pp=2,dp=2,mbs=2,zero=2", "wfbp", 2);
        check_case("gpt-tiny", &ref, "pp=2,dp=2,mbs=2,zero=2", "dear:0.05", 2);
        check_case("gpt-tiny", &ref, "pp=2,dp=2,mbs=2,zero=3", "wfbp", 2);
        check_case("gpt-tiny", &ref, "tp=2,dp=2,mbs=2", "bytescheduler:0.05", 2);
        check_case("gpt-tiny", &ref, "tp=2,dp=2,mbs=2,zero=1", "horovod", 2);
        check_case("gpt-tiny", &ref, "tp=2,dp=2,mbs=2,zero=1", "dear:0.05", 2);
        check_case("gpt-tiny", &ref, "tp=2,dp=2,mbs=2,zero=2", "mgwfbp", 2);
        check_case("gpt-tiny", &ref, "tp=2,dp=2,mbs=2,zero=3", "ddp:0.05", 2);
        /* Interleaved: two chunks per stage, each its own engine and shards. */
        config(&c, "gpt-tiny:layers=4", "dp=1,mbs=2", "wfbp", 1);
        CHECK(train(&c, &mref) == 0, "gpt-tiny:layers=4: single-process reference failed");
        check_case("gpt-tiny:layers=4", &mref, "pp=2,vpp=2,dp=2,mbs=2,zero=1", "dear:0.05", 2);
        check_checkpoint("pp=2,dp=2,mbs=2,zero=2", "dear:0.05", "pp=2,dp=2,mbs=2,zero=3", "wfbp");
    } else if (g_nranks == 2) {
        check_case("gpt-tiny", &ref, "pp=2,mbs=2", "dear:0.05", 1);
        check_case("gpt-tiny", &ref, "pp=2,mbs=2,zero=3", "wfbp", 1);
        check_case("gpt-tiny", &ref, "tp=2,mbs=2,zero=1", "mgwfbp", 1);
    }
    refused("pp=2,mbs=1,zero=3", "dear", "zero=3 with dear");
    refused("tp=2,mbs=1,zero=3", "dear", "zero=3 with dear");
    refused(g_nranks == 4 ? "pp=2,dp=2,mbs=1,zero=1" : "pp=2,mbs=1,zero=1", "bytescheduler",
            "zero=1 with bytescheduler");
    return harness_finish(started);
}
