/* The scaffolding the MPI tests share (tests/mpi/test_*.c, each run by CTest
 * under mpiexec -n 2 and -n 4): this rank and the world's size, a CHECK that
 * records a failure and goes on (so every rank keeps making the same
 * collectives), the start, and one verdict agreed by every rank. */
#ifndef WEFT_TESTS_MPI_HARNESS_H
#define WEFT_TESTS_MPI_HARNESS_H

#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_fail, g_rank, g_nranks;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "rank %d: %s:%d: ", g_rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            g_fail = 1;                                                      \
        }                                                                    \
    } while (0)

/* Starts MPI when launched by mpiexec and sets g_rank, g_nranks; 0 (the
 * reason printed) when it cannot. */
static int harness_start(int *started)
{
    *started = 0;
    if (wf_mpi_start(started) != WF_OK) {
        fprintf(stderr, "%s\n", wf_last_error());
        return 0;
    }
    wf_mpi_world(&g_rank, &g_nranks);
    return 1;
}

/* The training run every MPI test compares: model on synthetic data, batch
 * samples, the plan and schedule given, optimizer `optim` at learning rate
 * lr (AdamW's or SGD's other defaults), clipping at norm 1, seed `seed`;
 * self: one process alone (the single-process reference). */
static inline void harness_config(wf_train_config *c, const char *model, const char *plan, const char *comm,
                                  int64_t batch, wf_optim_kind optim, double lr, uint64_t seed, int self)
{
    memset(c, 0, sizeof *c);
    c->model = model;
    c->data = "synthetic";
    c->batch = batch;
    c->plan = plan;
    c->comm = comm;
    wf_optim_defaults(optim, &c->optim);
    c->optim.lr = lr;
    c->optim.clip_norm = 1.0;
    c->seed = seed;
    c->self = self;
}

/* A configuration the trainer must refuse: WF_INVAL, no trainer, one line
 * naming `want`. */
static inline void harness_refused(const wf_train_config *c, const char *want)
{
    wf_train *t = NULL;
    wf_status st = wf_train_create(c, &t);
    CHECK(st == WF_INVAL && t == NULL && strstr(wf_last_error(), want) != NULL && !strchr(wf_last_error(), '\n'),
          "%s %s: status %d, message '%s' (want one line with '%s')", c->model, c->plan ? c->plan : "", (int)st,
          wf_last_error(), want);
    wf_train_free(t);
}

/* FNV-1a of n floats' bytes (every rank's copy of a block compared). */
static inline uint64_t harness_fnv(const float *x, int64_t n)
{
    const unsigned char *p = (const unsigned char *)x;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < (size_t)n * sizeof *x; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Steps [from, to) of trainer t, losses[i] each step's loss, then a sync:
 * 0, or -1 with the reason printed. */
static inline int harness_steps(wf_train *t, int from, int to, double *losses)
{
    wf_status st = WF_OK;
    for (int i = from; i < to && st == WF_OK; i++) {
        wf_train_stats s;
        st = wf_train_step(t, &s);
        losses[i] = s.loss;
    }
    if (st == WF_OK)
        st = wf_train_sync(t);
    if (st != WF_OK)
        fprintf(stderr, "rank %d: %s\n", g_rank, wf_last_error());
    return st == WF_OK ? 0 : -1;
}

/* Trains `steps` steps of c: losses[] every step's loss, *sum the model's
 * checksum after them, *groups (may be NULL) the collectives per step.
 * 0, or -1 with the reason printed. */
static inline int harness_train(const wf_train_config *c, int steps, double *losses, uint64_t *sum, int *groups)
{
    wf_train *t = NULL;
    wf_status st = wf_train_create(c, &t);
    if (st != WF_OK) {
        fprintf(stderr, "rank %d: %s\n", g_rank, wf_last_error());
        return -1;
    }
    int rc = harness_steps(t, 0, steps, losses);
    *sum = wf_train_checksum(t);
    if (groups) {
        wf_train_info info;
        wf_train_info_of(t, &info);
        *groups = info.ngroups;
    }
    wf_train_free(t);
    return rc;
}


/* Trains c to `steps`, saving into dir at `save_at`; a new trainer loads dir
 * and must reproduce steps save_at+1 .. steps bit for bit, and the final
 * parameters. a[] (steps) gets the uninterrupted run's losses. */
static inline void harness_resume_check(const wf_train_config *c, const char *dir, int save_at, int steps, double *a)
{
    const char *plan = c->plan ? c->plan : "";
    wf_train *t = NULL;
    if (wf_train_create(c, &t) != WF_OK) {
        CHECK(0, "checkpoint run %s: %s", plan, wf_last_error());
        return;
    }
    CHECK(harness_steps(t, 0, save_at, a) == 0, "%s: the first %d steps failed", plan, save_at);
    CHECK(wf_train_save(t, dir) == WF_OK, "save: %s", wf_last_error());
    CHECK(harness_steps(t, save_at, steps, a) == 0, "%s: the last steps failed", plan);
    uint64_t sa = wf_train_checksum(t);
    wf_train_free(t);
    t = NULL;
    if (wf_train_create(c, &t) != WF_OK) {
        CHECK(0, "resumed run %s: %s", plan, wf_last_error());
        return;
    }
    double *b = calloc((size_t)steps, sizeof *b);
    CHECK(b != NULL, "out of memory");
    if (b) {
        CHECK(wf_train_load(t, dir) == WF_OK, "load: %s", wf_last_error());
        CHECK(wf_train_steps_done(t) == save_at, "resumed at step %lld", (long long)wf_train_steps_done(t));
        CHECK(harness_steps(t, save_at, steps, b) == 0, "%s: resumed steps failed", plan);
        for (int i = save_at; i < steps; i++)
            CHECK(memcmp(&a[i], &b[i], sizeof a[i]) == 0, "%s resumed step %d: loss %.17g, uninterrupted %.17g",
                  plan, i + 1, b[i], a[i]);
        CHECK(wf_train_checksum(t) == sa, "%s: resumed parameters differ from the uninterrupted run's", plan);
    }
    free(b);
    wf_train_free(t);
}

/* Run c (another plan or ZeRO stage than the one that wrote the checkpoint
 * in dir at step `from`, named `was`) resumes it: steps [from, steps) give
 * the uninterrupted run's losses a[] within relative 1e-5 (a reshard). */
static inline void harness_reshard_check(const wf_train_config *c, const char *dir, const char *was, int from,
                                         int steps, const double *a)
{
    double b[64];
    if (steps > 64) {
        CHECK(0, "harness_reshard_check: %d steps, at most 64", steps);
        return;
    }
    wf_train *t = NULL;
    if (wf_train_create(c, &t) != WF_OK) {
        CHECK(0, "%s: %s", c->plan, wf_last_error());
        return;
    }
    CHECK(wf_train_load(t, dir) == WF_OK, "%s resuming %s's checkpoint: %s", c->plan, was, wf_last_error());
    CHECK(harness_steps(t, from, steps, b) == 0, "%s: resumed steps failed", c->plan);
    for (int i = from; i < steps; i++)
        CHECK(fabs(a[i] - b[i]) <= 1e-5 * fabs(a[i]), "%s resuming %s: step %d loss %.9g, %.9g", c->plan, was,
              i + 1, b[i], a[i]);
    wf_train_free(t);
}

/* Every rank's verdict (failed anywhere: 1), printed by rank 0; stops MPI. */
static int harness_finish(int started)
{
    uint64_t lo, hi;
    wf_world_minmax_u64((uint64_t)g_fail, &lo, &hi);
    wf_mpi_stop(started);
    if (g_rank == 0)
        printf("%s\n", hi ? "FAILED" : "passed");
    return hi ? 1 : 0;
}

#endif
