/* Runtime I/O under mpiexec (2 and 4 ranks): the MPI-world helpers, agreement
 * on a failure of one rank, checkpoints with one shard per rank (round trip,
 * a corrupt shard of the last rank refused on every rank, nothing
 * overwritten), data slices that gather to the one-process batch, and the
 * job's layout over nodes with a byte broadcast (calibrate --gpu's). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/runtime_io.h"

static int g_rank;

/* A failed check stops the whole job (a test must not hang the others). */
#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s (last error: %s)\n", g_rank,       \
                    __FILE__, __LINE__, #cond, wf_last_error());                                 \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
        }                                                                                        \
    } while (0)

static void fill(float *w, int n, int rank, int step)
{
    for (int i = 0; i < n; i++)
        w[i] = (float)(rank * 1000 + step * 10 + i) * 0.25f;
}

/* One machine: one node holding every rank, in rank order; a broadcast of
 * bytes from the last rank reaches every rank. */
static void test_layout(int rank, int nranks)
{
    wf_mpi_job job;
    CHECK(wf_mpi_layout(&job) == WF_OK);
    CHECK(job.rank == rank && job.nranks == nranks);
    CHECK(job.node == 0 && job.nodes == 1);
    CHECK(job.local_rank == rank && job.ranks_per_node == nranks);
    unsigned char id[128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(rank == nranks - 1 ? 255 - i : 0);
    CHECK(wf_mpi_bcast_bytes(id, sizeof id, nranks - 1) == WF_OK);
    for (int i = 0; i < 128; i++)
        CHECK(id[i] == (unsigned char)(255 - i));
}

static void test_agree(int rank, int nranks)
{
    CHECK(wf_mpi_agree(WF_OK) == WF_OK);
    wf_status st = WF_OK;
    if (rank == nranks - 1)
        st = wf_errorf(WF_IO, "disk full here");
    st = wf_mpi_agree(st);
    CHECK(st == WF_IO);
    if (rank == nranks - 1) {
        CHECK(strcmp(wf_last_error(), "disk full here") == 0);
    } else {
        char want[64];
        snprintf(want, sizeof want, "rank %d: disk full here", nranks - 1);
        CHECK(strcmp(wf_last_error(), want) == 0);
    }
    /* The lowest failing rank's message wins; the most negative status. */
    st = rank == 1 ? wf_errorf(WF_FORMAT, "bad one") : rank == 0 ? wf_errorf(WF_INVAL, "bad zero") : WF_OK;
    CHECK(wf_mpi_agree(st) == WF_FORMAT);
}

static void test_checkpoint(int rank, int nranks)
{
    char dir[64];
    if (rank == 0)
        snprintf(dir, sizeof dir, "/tmp/weft-mpi-ckpt-%ld", (long)getpid());
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);

    float w[10], shared[3] = {1.5f, -2.0f, 0.0f}, got_w[10], got_s[3];
    fill(w, 10, rank, 1);
    wf_ckpt_tensor t[2] = {{"w", WF_DTYPE_FP32, 1, {10}, w}, {"shared", WF_DTYPE_FP32, 1, {3}, shared}};
    wf_ckpt_tensor g[2] = {{"w", WF_DTYPE_FP32, 1, {10}, got_w}, {"shared", WF_DTYPE_FP32, 1, {3}, got_s}};
    wf_ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.step = 1;
    m.data_position = 32;
    m.rng[0] = (uint64_t)rank; /* per-rank RNG state */
    snprintf(m.model, sizeof m.model, "mlp-tiny");
    CHECK(wf_ckpt_save(dir, &m, t, 2) == WF_OK);
    CHECK(wf_ckpt_exists(dir));

    wf_ckpt_meta lm;
    CHECK(wf_ckpt_load(dir, "mlp-tiny", &lm, g, 2) == WF_OK);
    CHECK(memcmp(got_w, w, sizeof w) == 0 && memcmp(got_s, shared, sizeof shared) == 0);
    CHECK(lm.step == 1 && lm.data_position == 32 && lm.rng[0] == (uint64_t)rank);

    /* Step 2; then the last rank's shard is corrupted: every rank refuses, and
     * no rank's buffers change. */
    fill(w, 10, rank, 2);
    m.step = 2;
    CHECK(wf_ckpt_save(dir, &m, t, 2) == WF_OK);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        char p[128];
        snprintf(p, sizeof p, "%s/rank-%d.g2.bin", dir, nranks - 1);
        FILE *f = fopen(p, "r+b");
        CHECK(f != NULL);
        fseek(f, -8, SEEK_END);
        int c = fgetc(f);
        fseek(f, -8, SEEK_END);
        fputc(c ^ 1, f);
        fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    memset(got_w, 0x7f, sizeof got_w);
    float before[10];
    memcpy(before, got_w, sizeof before);
    CHECK(wf_ckpt_load(dir, "mlp-tiny", &lm, g, 2) == WF_FORMAT);
    CHECK(strstr(wf_last_error(), "CRC32") != NULL);
    if (rank != nranks - 1) {
        char want[32];
        snprintf(want, sizeof want, "rank %d: ", nranks - 1);
        CHECK(strncmp(wf_last_error(), want, strlen(want)) == 0);
    }
    CHECK(memcmp(got_w, before, sizeof before) == 0);

    /* A fresh save repairs it. */
    m.step = 3;
    CHECK(wf_ckpt_save(dir, &m, t, 2) == WF_OK);
    CHECK(wf_ckpt_load(dir, "mlp-tiny", &lm, g, 2) == WF_OK);
    CHECK(lm.step == 3 && memcmp(got_w, w, sizeof w) == 0);

    /* A shape only one rank gets wrong fails everywhere. */
    wf_ckpt_tensor bad[2];
    memcpy(bad, g, sizeof bad);
    if (rank == 0)
        bad[1].shape[0] = 4;
    CHECK(wf_ckpt_load(dir, "mlp-tiny", &lm, bad, 2) == WF_INVAL);

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
    }
}

static void test_data_slices(int rank, int nranks)
{
    enum { F = 12, B = 10 };
    wf_data_layout l;
    memset(&l, 0, sizeof l);
    l.input_dtype = WF_DTYPE_FP32;
    l.input_ndim = 1;
    l.input_shape[0] = F;
    l.classes = 4;
    wf_data *d;
    CHECK(wf_data_open("synthetic", &l, 99, &d) == WF_OK);
    float x[B * F], all[B * F], ref[B * F];
    int32_t y[B], ally[B], refy[B];
    int counts[64], displs[64], countsy[64], displsy[64];
    for (int r = 0; r < nranks; r++) {
        int64_t first, count;
        wf_data_slice(B, r, nranks, &first, &count);
        counts[r] = (int)(count * F);
        displs[r] = (int)(first * F);
        countsy[r] = (int)count;
        displsy[r] = (int)first;
    }
    wf_data *one = NULL;
    if (rank == 0)
        CHECK(wf_data_open("synthetic", &l, 99, &one) == WF_OK);
    for (int step = 0; step < 3; step++) {
        CHECK(wf_data_next(d, B, rank, nranks, x, y) == WF_OK);
        MPI_Gatherv(x, counts[rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
        MPI_Gatherv(y, countsy[rank], MPI_INT32_T, ally, countsy, displsy, MPI_INT32_T, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            CHECK(wf_data_next(one, B, 0, 1, ref, refy) == WF_OK);
            CHECK(memcmp(all, ref, sizeof ref) == 0);
            CHECK(memcmp(ally, refy, sizeof refy) == 0);
        }
    }
    wf_data_close(one);
    wf_data_close(d);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    g_rank = rank;
    int r2, n2;
    MPI_Comm_rank(MPI_COMM_WORLD, &r2);
    MPI_Comm_size(MPI_COMM_WORLD, &n2);
    CHECK(rank == r2 && nranks == n2 && nranks >= 2 && nranks <= 64);
    CHECK(wf_mpi_launched());
    int started = -1;
    CHECK(wf_mpi_start(&started) == WF_OK && started == 0); /* already up: nothing to do */
    test_agree(rank, nranks);
    test_layout(rank, nranks);
    test_checkpoint(rank, nranks);
    test_data_slices(rank, nranks);
    if (rank == 0)
        printf("test_runtime_io: %d ranks ok\n", nranks);
    MPI_Finalize();
    return 0;
}
