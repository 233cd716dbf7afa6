/* The gradient all-reduce on one node: MPI's (MPI_Allreduce, and
 * MPI_Iallreduce progressed by MPI_Test as the runtime did between kernels)
 * against the runtime's shared-memory one (src/runtime/shm_coll.c), at the
 * sizes of the bench models' gradients (the mlp's 84 MB among them).
 *
 *   bench_allreduce [--ranks P] [--calls N]
 *
 * Run alone, it starts itself under mpiexec -n P (2 by default; MPIEXEC
 * names the launcher). Each row: the three methods interleaved call by call
 * (a barrier before each call, its time the slowest rank's), best and median
 * of N calls, the algorithm bandwidth (bytes / best time), the process CPU
 * time per call (rank 0) and the speedup of shm over MPI_Allreduce on the
 * median. The last row of each size, "copy in (alone)", times only the
 * shm all-reduce's first step, every rank copying its buffer into a
 * segment-sized one at once: what reading the peers' buffers in place (or
 * gradients allocated inside the segment) would save per call at most.
 * Wall-clock times: on a machine shared with other jobs, compare
 * rows of one run and report the load it prints. Numbers, not a test:
 * tests/mpi/test_shm_coll.c checks the sums. */
#include "runtime/shm_coll-impl.h"
#include "weft/runtime_io.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    return MPI_Wtime();
}

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void loadavg(char *buf, size_t n)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (!f || fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3)
        snprintf(buf, n, "unknown");
    else
        snprintf(buf, n, "%.2f %.2f %.2f (1, 5, 15 min) on %ld cores", a, b, c, sysconf(_SC_NPROCESSORS_ONLN));
    if (f)
        fclose(f);
}

enum { M_MPI, M_IMPI, M_SHM, M_COPY, NMETHODS };
static const char *const NAMES[NMETHODS] = {"MPI_Allreduce", "MPI_Iallreduce+Test", "shm", "copy in (alone)"};

/* One call of method m on buf[0, n); its wall time (the slowest rank's) and
 * this rank's CPU time. */
static void one_call(int m, wf_shm_coll *shm, float *buf, float *seg, int n, double *wall, double *cpu)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double c0 = cpu_s(), t0 = now_s();
    if (m == M_MPI) {
        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (m == M_IMPI) {
        MPI_Request r;
        int flag = 0;
        MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
        while (!flag)
            MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    } else if (m == M_COPY) {
        memcpy(seg, buf, (size_t)n * sizeof *buf);
    } else {
        int64_t t = wf_shm_coll_allreduce(shm, buf, n);
        wf_shm_coll_wait(shm, t);
    }
    double t = now_s() - t0;
    *cpu = cpu_s() - c0;
    MPI_Allreduce(&t, wall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int ranks = 2, calls = 15, child = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc)
            calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--child"))
            child = 1;
        else {
            fprintf(stderr, "usage: bench_allreduce [--ranks P] [--calls N]\n");
            return 1;
        }
    }
    if (ranks < 2 || calls < 1 || calls > 1000) {
        fprintf(stderr, "bench_allreduce: --ranks takes 2 or more, --calls 1 to 1000\n");
        return 1;
    }
    if (!child && !getenv("PMI_RANK") && !getenv("PMI_SIZE") && !getenv("OMPI_COMM_WORLD_SIZE")) {
        char self[4096], cmd[8192];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return 1;
        self[n] = 0;
        const char *mpiexec = getenv("MPIEXEC") ? getenv("MPIEXEC") : "mpiexec";
        snprintf(cmd, sizeof cmd, "%s -n %d %s --child --ranks %d --calls %d", mpiexec, ranks, self, ranks, calls);
        fflush(stdout);
        return system(cmd) == 0 ? 0 : 1;
    }
    int started = 0, rank = 0, nranks = 1;
    if (wf_mpi_start(&started) != WF_OK) {
        fprintf(stderr, "%s\n", wf_last_error());
        return 1;
    }
    wf_mpi_world(&rank, &nranks);
    wf_shm_coll *shm = NULL;
    const char *why = NULL;
    if (wf_shm_coll_create(MPI_COMM_WORLD, 0, &shm, &why) != WF_OK || !shm) {
        if (rank == 0)
            printf("bench_allreduce: no shared-memory all-reduce here (%s)\n", why ? why : wf_last_error());
        wf_mpi_stop(started);
        return 0;
    }
    char load[128];
    loadavg(load, sizeof load);
    if (rank == 0) {
        printf("all-reduce of fp32 sums on one node, %d ranks; load %s\n", nranks, load);
        printf("best and median of %d calls each (interleaved), GB/s = bytes / best, cpu: rank 0's process CPU "
               "per call (median)\n",
               calls);
        printf("%12s  %-20s %9s %9s %7s %9s %9s\n", "bytes", "method", "best_ms", "med_ms", "GB/s", "cpu_ms",
               "shm_x");
    }
    /* 1 MiB, 16 MiB, the gpt bench's 28 MB, the mlp bench's 84 MB. */
    static const int FLOATS[] = {262144, 4194304, 7432192, 21024778};
    for (size_t s = 0; s < sizeof FLOATS / sizeof *FLOATS; s++) {
        int n = FLOATS[s];
        float *buf = calloc((size_t)n, sizeof *buf), *seg = calloc((size_t)n, sizeof *seg);
        double *wall = malloc(sizeof(double) * NMETHODS * (size_t)calls);
        double *cpu = malloc(sizeof(double) * NMETHODS * (size_t)calls);
        int ok = buf && seg && wall && cpu, all_ok = 0;
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all_ok) {
            if (rank == 0)
                printf("out of memory for %d floats\n", n);
            free(buf);
            free(seg);
            free(wall);
            free(cpu);
            break;
        }
        for (int m = 0; m < NMETHODS; m++) { /* warm-up: pages, connections */
            double w, c;
            one_call(m, shm, buf, seg, n, &w, &c);
        }
        for (int i = 0; i < calls; i++)
            for (int m = 0; m < NMETHODS; m++)
                one_call(m, shm, buf, seg, n, &wall[m * calls + i], &cpu[m * calls + i]);
        double med[NMETHODS];
        for (int m = 0; m < NMETHODS; m++) {
            qsort(wall + m * calls, (size_t)calls, sizeof *wall, cmp_double);
            qsort(cpu + m * calls, (size_t)calls, sizeof *cpu, cmp_double);
            med[m] = wall[m * calls + calls / 2];
        }
        for (int m = 0; rank == 0 && m < NMETHODS; m++) {
            double best = wall[m * calls];
            printf("%12lld  %-20s %9.3f %9.3f %7.2f %9.3f", (long long)n * 4, NAMES[m], best * 1e3, med[m] * 1e3,
                   (double)n * 4 / best / 1e9, cpu[m * calls + calls / 2] * 1e3);
            if (m == M_SHM)
                printf(" %8.2fx", med[M_MPI] / med[M_SHM]);
            if (m == M_COPY)
                printf("  (%.0f%% of shm's median)", 100.0 * med[M_COPY] / med[M_SHM]);
            printf("\n");
        }
        free(buf);
        free(seg);
        free(wall);
        free(cpu);
    }
    loadavg(load, sizeof load);
    if (rank == 0)
        printf("load at the end: %s\n", load);
    wf_shm_coll_free(shm);
    wf_mpi_stop(started);
    return 0;
}
