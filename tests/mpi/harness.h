/* The scaffolding the MPI tests share (tests/mpi/test_*.c, each run by CTest
 * under mpiexec -n 2 and -n 4): this rank and the world's size, a CHECK that
 * records a failure and goes on (so every rank keeps making the same
 * collectives), the start, and one verdict agreed by every rank. */
#ifndef WEFT_TESTS_MPI_HARNESS_H
#define WEFT_TESTS_MPI_HARNESS_H

#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <stdint.h>
#include <stdio.h>
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
