/* The interlaced pipeline (interlace=1, SuperScaler's 1F1B+; docs/planner.md,
 * "Interlaced pipeline") and vocabulary padding in pipelined runs, against
 * one process (run by CTest under mpiexec -n 2 and -n 4).
 *
 * Every rank first trains the single-process references alone (self mode,
 * plan dp=1,mbs=2: the global batch of 8 in four micro-batches of 2): a GPT
 * of 2 layers (hidden 64, 4 heads, sequence 32, dropout on, tied word
 * embedding) with vocabulary 96, and the same with vocabulary 101. Then:
 *   2 ranks: pp=2,interlace=1 (the embedding and the head vocabulary-parallel
 *     over both ranks), with vocabulary 96 and with 101 (padded as Megatron
 *     pads it, to 128 x tp x pp = 256);
 *   4 ranks: pp=2,tp=2,interlace=1 (the ends over 4 ranks, the layers tp=2
 *     inside 2 stages) with vocabulary 96 and 101 (padded to 512), and
 *     pp=2,tp=2 (no interlace) with vocabulary 101 (padded to 256).
 * (pp=4 and pp=2,dp=2 with zero=1 interlaced pass too; left out to keep the
 * suite fast on 2 cores: tests/cli/train_interlace.sh runs pp=4.)
 * Checks, over 20 steps with AdamW and clipping: every loss within relative
 * 1e-5 of one process's; the whole model gathered identical on every rank
 * and within 1e-4 of one process's (relative to the largest; with a padded
 * vocabulary the table's first rows, the padding's rows left out); each
 * rank ran its stage's order of wf_plan_interlace_order (F and B: chunk 0;
 * EF and EB: chunk 1, forward and backward; H: chunk 2); the interlaced
 * checkpoint resumes bit for bit. Refusals in one line: interlace with
 * sp=1 and with zero=3, a model of neither GPT's nor Llama's family
 * (bert-tiny), and tp x pp not dividing the heads (Llama:
 * tests/mpi/test_interlace_llama.c). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "harness.h"
#include "weft/plan.h"
#include "weft/runtime.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 20
#define MAXP 300000
#define M96 "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=96,dtype=fp32"
#define M101 "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=101,dtype=fp32"
#define HIDDEN 64

typedef struct {
    double losses[STEPS];
    float params[MAXP];
    int64_t nparams;
} run;

static void config(wf_train_config *c, const char *model, const char *plan, int self)
{
    harness_config(c, model, plan, "wfbp", 8, WF_OPTIM_ADAMW, 3e-3, 17, self);
}

/* The order the interlaced schedule gives this rank's stage, as the trainer records it. */
static void check_order(const wf_train *t, const char *plan, int pp, int stage, int m)
{
    wf_plan_task want[64];
    wf_pipe_op got[64];
    int nw = 0, n = wf_train_pipe_order(t, got, 64);
    CHECK(wf_plan_interlace_order(pp, m, stage, want, 64, &nw) == WF_OK, "wf_plan_interlace_order failed");
    CHECK(n == nw && n == 5 * m, "%s stage %d: %d tasks ran, the schedule has %d", plan, stage, n, nw);
    for (int i = 0; i < n && i < nw; i++) {
        int k = want[i].kind;
        wf_pipe_op w = {k == WF_PTASK_BWD || k == WF_PTASK_EMB_BWD, want[i].mb,
                        k == WF_PTASK_FWD || k == WF_PTASK_BWD ? 0 : k == WF_PTASK_HEAD ? 2 : 1};
        CHECK(got[i].bwd == w.bwd && got[i].mb == w.mb && got[i].chunk == w.chunk,
              "%s stage %d task %d: ran (%d, mb%d, c%d), the schedule says %s mb%d", plan, stage, i, got[i].bwd,
              got[i].mb, got[i].chunk, wf_ptask_name(k), want[i].mb);
    }
}

/* 20 steps of c into r (losses, the gathered model); the order checked
 * when interlaced. 0, or -1 with the reason printed. */
static int train(const wf_train_config *c, run *r, int pp, int tp, int dp)
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
    if (rc == 0 && strstr(c->plan, "interlace=1"))
        check_order(t, c->plan, pp, g_rank / (tp * dp), 8 / dp / 2);
    wf_train_free(t);
    return rc;
}

/* plan on model against ref; vocab_pad: the rows the run's table has beyond
 * the reference's (its padding). */
static void check_case(const char *model, const run *ref, const char *plan, int pp, int tp, int dp, int64_t vocab_pad)
{
    static run r;
    wf_train_config c;
    config(&c, model, plan, 0);
    memset(&r, 0, sizeof r);
    if (train(&c, &r, pp, tp, dp) != 0) {
        CHECK(0, "%s %s: run failed", model, plan);
        return;
    }
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(r.losses[i] - ref->losses[i]) / fabs(ref->losses[i]);
        worst = rel > worst ? rel : worst;
        CHECK(rel <= 1e-5, "%s %s step %d: loss %.9g, one process %.9g (relative %.3g)", model, plan, i + 1,
              r.losses[i], ref->losses[i], rel);
    }
    /* The word embedding [vocab, hidden] is the model's first parameter: the
     * padded run's table holds vocab_pad more rows after the reference's. */
    const int64_t pad = vocab_pad * HIDDEN;
    CHECK(r.nparams == ref->nparams + pad, "%s %s: %lld parameters gathered, want %lld (%lld of padding)", model,
          plan, (long long)r.nparams, (long long)(ref->nparams + pad), (long long)pad);
    const int64_t vocab = strstr(model, "vocab=101") ? 101 : 96;
    double dmax = 0, pmax = 0;
    for (int64_t i = 0; i < ref->nparams && r.nparams == ref->nparams + pad; i++) {
        int64_t j = i < vocab * HIDDEN ? i : i + pad;
        double d = fabs((double)r.params[j] - (double)ref->params[i]);
        dmax = d > dmax ? d : dmax;
        pmax = fabs((double)ref->params[i]) > pmax ? fabs((double)ref->params[i]) : pmax;
    }
    CHECK(dmax <= 1e-4 * pmax, "%s %s: parameters differ from one process's by %.3g (largest %.3g)", model, plan,
          dmax, pmax);
    uint64_t lo, hi;
    CHECK(wf_world_minmax_u64(harness_fnv(r.params, r.nparams), &lo, &hi) == WF_OK && lo == hi,
          "%s %s: the gathered parameters differ across ranks", model, plan);
    if (g_rank == 0)
        printf("vocab %3lld %-34s ranks %d: losses %.5f -> %.5f, worst relative loss difference %.2e, parameters "
               "max |diff| %.2e (relative %.2e)\n",
               (long long)vocab, plan, g_nranks, r.losses[0], r.losses[STEPS - 1], worst, dmax, dmax / pmax);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void refused(const char *model, const char *plan, const char *want)
{
    wf_train_config c;
    config(&c, model, plan, 0);
    harness_refused(&c, want);
}

int main(void)
{
    int started = 0;
    if (!harness_start(&started))
        return 1;
    static run ref96, ref101;
    wf_train_config c;
    config(&c, M96, "dp=1,mbs=2", 1);
    CHECK(train(&c, &ref96, 1, 1, 1) == 0, "vocabulary 96: single-process reference failed");
    config(&c, M101, "dp=1,mbs=2", 1);
    CHECK(train(&c, &ref101, 1, 1, 1) == 0, "vocabulary 101: single-process reference failed");
    if (g_nranks == 2) {
        check_case(M96, &ref96, "pp=2,mbs=2,interlace=1", 2, 1, 1, 0);
        check_case(M101, &ref101, "pp=2,mbs=2,interlace=1", 2, 1, 1, 256 - 101);
        /* The interlaced checkpoint: saved at step 10, resumed to 20 bit for bit. */
        char dir[128];
        uint64_t id = 0, idmax = 0;
        wf_world_minmax_u64((uint64_t)getppid(), &id, &idmax);
        snprintf(dir, sizeof dir, "/tmp/weft-test-interlace-%d-%llu", g_nranks, (unsigned long long)id);
        double a[STEPS];
        config(&c, M96, "pp=2,mbs=2,interlace=1", 0);
        harness_resume_check(&c, dir, 10, STEPS, a);
        /* ... and a plain pipeline does not take it. */
        config(&c, M96, "pp=2,mbs=2", 0);
        wf_train *t = NULL;
        wf_status st = wf_train_create(&c, &t);
        if (st == WF_OK)
            st = wf_train_load(t, dir);
        CHECK(st == WF_INVAL && strstr(wf_last_error(), "interlace=1") && !strchr(wf_last_error(), '\n'),
              "the interlaced checkpoint under pp=2: status %d, '%s'", (int)st, wf_last_error());
        wf_train_free(t);
        wf_world_minmax_u64(0, &id, &idmax); /* every rank done with the checkpoint */
        if (g_rank == 0)
            nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
        refused("bert-tiny", "pp=2,mbs=2,interlace=1",
                "interlace=1: model 'bert-tiny' is neither GPT- nor Llama-shaped");
        refused("gpt:layers=2,hidden=64,heads=1,seq=32,vocab=96,dtype=fp32", "pp=2,mbs=2,interlace=1",
                "tp x pp = 2 does not divide the heads");
    } else if (g_nranks == 4) {
        check_case(M96, &ref96, "pp=2,tp=2,mbs=2,interlace=1", 2, 2, 1, 0);
        check_case(M101, &ref101, "pp=2,tp=2,mbs=2,interlace=1", 2, 2, 1, 512 - 101);
        check_case(M101, &ref101, "pp=2,tp=2,mbs=2", 2, 2, 1, 256 - 101);
        refused(M96, "pp=2,tp=2,sp=1,mbs=2,interlace=1", "interlace=1 with sp=1");
        refused(M96, "pp=2,dp=2,mbs=2,zero=3,interlace=1", "interlace=1 with zero=3");
    }
    return harness_finish(started);
}
