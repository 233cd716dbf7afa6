/* No unbounded wait on a peer rank (docs/runtime.md, "Ranks that stop").
 *
 * Every blocking MPI call the runtime makes (collectives, sends, receives,
 * waits) goes through the profiling interface below: the wrapper notes when
 * the calling thread started waiting, calls the PMPI_ entry point and clears
 * the note. Started by wf_mpi_start, a watchdog thread looks at that note
 * every 100 ms; when one call has waited longer than the peer timeout
 * (WEFT_PEER_TIMEOUT_S seconds, default 120), some rank has stopped answering
 * (stopped, hung, or gone on without this one): the watchdog prints one line
 * naming the call and this rank, and ends the process with exit status 1,
 * which makes the launcher end every other rank. The ranks still waiting on
 * that peer time out the same way, so the whole job exits 1 within the
 * timeout (plus the launcher's clean-up), never spinning forever.
 *
 * The wrappers keep the blocking calls (and MPI's algorithms for them): the
 * note is two stores, and the watchdog needs no MPI thread support since it
 * never calls MPI. */
#include "runtime/dist-impl.h"
#include "weft/runtime_io.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic long long g_since_ns; /* 0: not waiting */
static const char *_Atomic g_what;
static double g_timeout_s = 120.0;
static int g_rank = -1;

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void wait_begin(const char *what)
{
    atomic_store_explicit(&g_what, what, memory_order_relaxed);
    atomic_store_explicit(&g_since_ns, now_ns(), memory_order_release);
}

static void wait_end(void)
{
    atomic_store_explicit(&g_since_ns, 0, memory_order_release);
}

static void *watch(void *arg)
{
    (void)arg;
    /* Signals (SIGINT, SIGTERM: weft train's graceful stop) go to the main thread. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    const struct timespec tick = {0, 100 * 1000000L};
    for (;;) {
        nanosleep(&tick, NULL);
        long long since = atomic_load_explicit(&g_since_ns, memory_order_acquire);
        if (since == 0)
            continue;
        double waited = (double)(now_ns() - since) / 1e9;
        if (waited < g_timeout_s)
            continue;
        const char *what = atomic_load_explicit(&g_what, memory_order_relaxed);
        char line[256];
        int n = snprintf(line, sizeof line,
                         "weft: rank %d: no answer from a peer rank for %.0f s (waiting in %s): a rank stopped "
                         "or disagrees; stopping the job (WEFT_PEER_TIMEOUT_S=%g)\n",
                         g_rank, waited, what ? what : "MPI", g_timeout_s);
        if (n > 0)
            (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        _exit(1);
    }
    return NULL;
}

double wf_mpi_peer_timeout_s(void)
{
    return g_timeout_s;
}

wf_status wf_mpi_watchdog_start(int rank)
{
    static int started;
    if (started)
        return WF_OK;
    const char *env = getenv("WEFT_PEER_TIMEOUT_S");
    if (env && *env) {
        double v;
        wf_status st = wf_parse_num(env, "WEFT_PEER_TIMEOUT_S", 0.1, 1e6, &v);
        if (st != WF_OK)
            return st;
        g_timeout_s = v;
    }
    g_rank = rank;
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &at, watch, NULL);
    pthread_attr_destroy(&at);
    if (rc != 0)
        return wf_errorf(WF_INTERNAL, "cannot start the peer watchdog thread: %s", strerror(rc));
    started = 1;
    return WF_OK;
}

/* Waits outside MPI (the shared-memory collectives' spins, shm_coll.c)
 * under the same watch. */
void wf_mpi_wait_note(const char *what)
{
    if (what)
        wait_begin(what);
    else
        wait_end();
}

/* ---- the blocking calls, timed ---------------------------------------------------- */

#define TIMED(name, call)                                                                                          \
    do {                                                                                                           \
        wait_begin(name);                                                                                          \
        int rc_ = call;                                                                                            \
        wait_end();                                                                                                \
        return rc_;                                                                                                \
    } while (0)

int MPI_Allreduce(const void *sb, void *rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    TIMED("MPI_Allreduce", PMPI_Allreduce(sb, rb, n, t, op, c));
}

int MPI_Allgather(const void *sb, int sn, MPI_Datatype st, void *rb, int rn, MPI_Datatype rt, MPI_Comm c)
{
    TIMED("MPI_Allgather", PMPI_Allgather(sb, sn, st, rb, rn, rt, c));
}

int MPI_Allgatherv(const void *sb, int sn, MPI_Datatype st, void *rb, const int rn[], const int d[], MPI_Datatype rt,
                   MPI_Comm c)
{
    TIMED("MPI_Allgatherv", PMPI_Allgatherv(sb, sn, st, rb, rn, d, rt, c));
}

int MPI_Alltoall(const void *sb, int sn, MPI_Datatype st, void *rb, int rn, MPI_Datatype rt, MPI_Comm c)
{
    TIMED("MPI_Alltoall", PMPI_Alltoall(sb, sn, st, rb, rn, rt, c));
}

int MPI_Alltoallv(const void *sb, const int sn[], const int sd[], MPI_Datatype st, void *rb, const int rn[],
                  const int rd[], MPI_Datatype rt, MPI_Comm c)
{
    TIMED("MPI_Alltoallv", PMPI_Alltoallv(sb, sn, sd, st, rb, rn, rd, rt, c));
}

int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c)
{
    TIMED("MPI_Bcast", PMPI_Bcast(b, n, t, root, c));
}

int MPI_Barrier(MPI_Comm c)
{
    TIMED("MPI_Barrier", PMPI_Barrier(c));
}

int MPI_Gather(const void *sb, int sn, MPI_Datatype st, void *rb, int rn, MPI_Datatype rt, int root, MPI_Comm c)
{
    TIMED("MPI_Gather", PMPI_Gather(sb, sn, st, rb, rn, rt, root, c));
}

int MPI_Reduce_scatter_block(const void *sb, void *rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    TIMED("MPI_Reduce_scatter_block", PMPI_Reduce_scatter_block(sb, rb, n, t, op, c));
}

int MPI_Send(const void *b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c)
{
    TIMED("MPI_Send", PMPI_Send(b, n, t, dest, tag, c));
}

int MPI_Recv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status *s)
{
    TIMED("MPI_Recv", PMPI_Recv(b, n, t, src, tag, c, s));
}

int MPI_Wait(MPI_Request *r, MPI_Status *s)
{
    TIMED("MPI_Wait", PMPI_Wait(r, s));
}

int MPI_Waitall(int n, MPI_Request r[], MPI_Status s[])
{
    TIMED("MPI_Waitall", PMPI_Waitall(n, r, s));
}

int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *out)
{
    TIMED("MPI_Comm_split", PMPI_Comm_split(c, color, key, out));
}

int MPI_Comm_dup(MPI_Comm c, MPI_Comm *out)
{
    TIMED("MPI_Comm_dup", PMPI_Comm_dup(c, out));
}

/* ---- ranks agree on their arguments -------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

wf_status wf_mpi_agree_fields(const char *const names[], const char *const values[], int n)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    if (nranks == 1 || n <= 0)
        return WF_OK;
    uint64_t *all = malloc((size_t)nranks * (size_t)n * sizeof *all);
    uint64_t *mine = malloc((size_t)n * sizeof *mine);
    char(*vals)[64] = malloc((size_t)nranks * sizeof *vals);
    int ok = all && mine && vals;
    for (int i = 0; ok && i < n; i++)
        mine[i] = fnv1a(values[i] ? values[i] : "");
    /* Every rank takes part in the same collectives whatever its own state. */
    int mine_ok = ok, all_ok = 0;
    if (MPI_Allreduce(&mine_ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS || !all_ok) {
        free(all), free(mine), free(vals);
        return wf_errorf(WF_NOMEM, "out of memory comparing the ranks' arguments");
    }
    wf_status st = WF_OK;
    if (MPI_Allgather(mine, n, MPI_UINT64_T, all, n, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS) {
        st = wf_errorf(WF_MPI, "MPI_Allgather failed comparing the ranks' arguments");
        goto done;
    }
    for (int f = 0; f < n; f++) {
        int differ = 0;
        for (int r = 1; r < nranks; r++)
            differ |= all[(size_t)r * (size_t)n + (size_t)f] != all[f];
        if (!differ)
            continue;
        /* The values themselves, to name them (each cut to 63 bytes). */
        char v[64];
        snprintf(v, sizeof v, "%s", values[f] ? values[f] : "");
        if (MPI_Allgather(v, (int)sizeof v, MPI_CHAR, vals, (int)sizeof v, MPI_CHAR, MPI_COMM_WORLD) != MPI_SUCCESS) {
            st = wf_errorf(WF_MPI, "MPI_Allgather failed comparing the ranks' arguments");
            goto done;
        }
        char msg[768];
        size_t k = (size_t)snprintf(msg, sizeof msg, "the ranks disagree on %s: rank 0 has '%s'", names[f],
                                    vals[0][0] ? vals[0] : "(not given)");
        int shown = 0;
        for (int r = 1; r < nranks && k < sizeof msg; r++) {
            if (all[(size_t)r * (size_t)n + (size_t)f] == all[f])
                continue;
            if (shown == 3) {
                k += (size_t)snprintf(msg + k, sizeof msg - k, ", ...");
                break;
            }
            k += (size_t)snprintf(msg + k, sizeof msg - k, ", rank %d '%s'", r, vals[r][0] ? vals[r] : "(not given)");
            shown++;
        }
        st = wf_errorf(WF_INVAL, "%s (every rank must be started with the same arguments)", msg);
        break;
    }
done:
    free(all), free(mine), free(vals);
    return st;
}
