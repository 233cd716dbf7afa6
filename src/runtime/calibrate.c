/* Machine calibration for `weft calibrate`: measures what the cost model needs
 * to know about this machine (or this MPI job) and turns it into a cluster.
 *
 * Measured, on every rank at once (so shared caches and memory are contended
 * as in training) and averaged over ranks:
 *   - sgemm (the runtime's product: CBLAS, or gemm_small.c for skinny shapes;
 *     row-major) GFLOP/s at sizes shaped like training's
 *     products (small cubes, attention heads, token-major products of a
 *     transformer, a batch-64 MLP layer, a large product): the best one is
 *     the measured sgemm peak;
 *   - vector throughput: the runtime's own GELU forward (the graph's FLOPs of
 *     it per element) on L1-resident data;
 *   - memory bandwidth: an optimizer-like stream (4 arrays read, 3 written,
 *     as the fused AdamW pass does) on arrays far beyond cache, counted as
 *     that pass's 28 bytes per element; memcpy and the STREAM triad, printed
 *     for reference; the best of three rounds spread over the run.
 * Each of these repeats a kernel until it runs for a minimum time, then runs
 * five trials in step on every rank and keeps the best (time_kernel); with
 * one BLAS thread compute is timed on the thread's CPU clock, so on a machine
 * shared with other jobs the time a kernel spent descheduled is not counted
 * (their contention for caches and memory is); with two ranks or more the
 * memory kernels are timed as one trial of all ranks at once.
 * Under mpiexec with two ranks or more:
 *   - ping-pong between rank 0 and a rank on its node (and one on another
 *     node, when there is one), and MPI_Allreduce over all ranks, at several
 *     message sizes up to 64 MiB, each the fastest of many calls timed one
 *     by one; the latency from a least-squares fit, the bandwidth from the
 *     largest message (fit_link says why).
 *
 * Also measured with two ranks or more: how much a collective in flight
 * slows the compute that it overlaps (the cluster's overlap_slowdown).
 *
 * wf_calibrate_to_cluster turns these into the cost model's terms. The cost
 * model adds an op's memory traffic (bytes / bandwidth) to its FLOPs over the
 * unit's rate, so each measured sgemm's own traffic (its three matrices) is
 * taken out of its time before its rate enters the efficiency table: the
 * model then reproduces the measured products whose matrices stream from
 * memory. This file measures; it does not decide plans. */
#include "weft/cost.h"
#include "weft/runtime_io.h"

#include "kernels/kernels-impl.h"
#include "runtime/shm_coll-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* ---- fitting ------------------------------------------------------------------------ */

wf_status wf_fit_alpha_beta(const double *n, const double *t, int k, double *alpha, double *beta)
{
    /* Weighted least squares with weights 1/t^2: minimizes the relative
     * residuals. Normal equations of [1 n] w = t. */
    double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
    int distinct = 0;
    for (int i = 0; i < k; i++) {
        if (!(t[i] > 0) || !(n[i] >= 0))
            return wf_errorf(WF_INVAL, "fit: point %d has time %g and size %g (need time > 0, size >= 0)", i,
                             t[i], n[i]);
        if (i > 0 && n[i] != n[0])
            distinct = 1;
        double w = 1.0 / (t[i] * t[i]);
        s00 += w;
        s01 += w * n[i];
        s11 += w * n[i] * n[i];
        r0 += w * t[i];
        r1 += w * n[i] * t[i];
    }
    if (k < 2 || !distinct)
        return wf_errorf(WF_INVAL, "fit: need at least two distinct sizes, got %d points", k);
    double det = s00 * s11 - s01 * s01;
    double a = (s11 * r0 - s01 * r1) / det;
    double b = (s00 * r1 - s01 * r0) / det;
    if (a < 0) {
        /* A negative latency is noise: fit through the origin instead. */
        a = 0;
        b = r1 / s11;
    }
    *alpha = a;
    *beta = b;
    return WF_OK;
}

/* ---- timing helpers --------------------------------------------------------------------- */

typedef void (*kernel_fn)(void *ctx);

static double cpu_thread_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mpi_on(void)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    return nranks > 1;
}

static void barrier(void)
{
    if (mpi_on())
        MPI_Barrier(MPI_COMM_WORLD);
}

typedef enum { TRIALS_OWN, TRIALS_IN_STEP } trial_stat;

/* Seconds per call of fn. The repetitions grow until one trial lasts at least
 * min_s; every rank then runs the same number (the most any rank needed) in
 * five trials that start together after a barrier, so the ranks' kernels
 * overlap in time as they do in training. TRIALS_OWN (compute): each rank's
 * best trial on its own clock -- this thread's CPU clock when `cpu` (valid
 * when the work runs on this thread alone: one BLAS thread), else the wall
 * clock. TRIALS_IN_STEP (memory, with two ranks or more): a trial's time is
 * the slowest rank's wall time and the best trial is kept, i.e. one in which
 * every rank streamed for the whole trial at once and none was descheduled
 * (a rank streaming while its peers wait for a core would see a machine's
 * bandwidth to itself, which training's ranks, in step, never do). With one
 * rank TRIALS_IN_STEP is TRIALS_OWN. */
static double time_kernel(kernel_fn fn, void *ctx, double min_s, int cpu, trial_stat stat)
{
    const int in_step = stat == TRIALS_IN_STEP && mpi_on();
    double (*clock_s)(void) = cpu && !in_step ? cpu_thread_s : wf_now_s;
    fn(ctx); /* warm-up: page faults, caches, BLAS buffers */
    long reps = 1;
    for (;;) {
        double t0 = clock_s();
        for (long i = 0; i < reps; i++)
            fn(ctx);
        double t = clock_s() - t0;
        if (t >= min_s || reps >= (1L << 30))
            break;
        double grow = t > 0 ? 1.3 * min_s / t : 16;
        reps = (long)((double)reps * (grow < 2 ? 2 : grow > 16 ? 16 : grow));
    }
    if (mpi_on()) {
        long most = reps;
        MPI_Allreduce(&reps, &most, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
        reps = most;
    }
    double per[5];
    for (int trial = 0; trial < 5; trial++) {
        barrier();
        double t0 = clock_s();
        for (long i = 0; i < reps; i++)
            fn(ctx);
        per[trial] = (clock_s() - t0) / (double)reps;
    }
    if (in_step)
        MPI_Allreduce(MPI_IN_PLACE, per, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double best = per[0];
    for (int i = 1; i < 5; i++)
        best = per[i] < best ? per[i] : best;
    return best;
}

/* The mean of a value over ranks. */
static double mean_over_ranks(double v)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    if (nranks == 1)
        return v;
    double sum = 0;
    MPI_Allreduce(&v, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / nranks;
}

/* ---- compute and memory kernels ------------------------------------------------------------ */

typedef struct {
    int m, n, k;
    float *a, *b, *c; /* A[m,k], B[k,n], C[m,n] */
} gemm_ctx;

/* The runtime's own product (kernels.c: BLAS, or gemm_small.c's panel
 * kernel for skinny shapes), so the rates are those training gets. */
static void gemm_kernel(void *p)
{
    gemm_ctx *g = p;
    wf_k_matmul_fwd(g->a, g->b, g->c, g->m, g->k, g->n, 0, 0);
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (float)((i * 2654435761u) % 1000) / 1000.0f;
}

/* Collective: every rank measures the same product at once. */
static wf_status measure_gemm(int m, int n, int k, double min_s, int cpu, double *flops_per_s)
{
    gemm_ctx g = {m, n, k, malloc(sizeof(float) * (size_t)m * k), malloc(sizeof(float) * (size_t)k * n),
                  malloc(sizeof(float) * (size_t)m * n)};
    /* Collective from here (time_kernel keeps the ranks in step): agree first. */
    wf_status st = wf_mpi_agree(g.a && g.b && g.c ? WF_OK
                                                  : wf_errorf(WF_NOMEM, "calibrate: out of memory for a %dx%dx%d sgemm",
                                                              m, n, k));
    if (st == WF_OK) {
        fill(g.a, (size_t)m * k, 1.0f);
        fill(g.b, (size_t)k * n, 0.5f);
        double t = time_kernel(gemm_kernel, &g, min_s, cpu, TRIALS_OWN);
        *flops_per_s = 2.0 * m * n * k / t;
    }
    free(g.a);
    free(g.b);
    free(g.c);
    return st;
}

typedef struct {
    int64_t n;
    float *x, *y;
} gelu_ctx;

static void gelu_kernel(void *p)
{
    gelu_ctx *g = p;
    wf_k_gelu_fwd(g->x, g->y, g->n);
}

/* FLOPs per element of a GELU forward as the graph counts them (what the cost
 * model divides by the vector rate). */
static double gelu_flops_per_elem(void)
{
    wf_graph g;
    wf_graph_init(&g, "calibrate-gelu");
    const int64_t shape[1] = {1024};
    int x = wf_graph_add_tensor(&g, "x", WF_DTYPE_FP32, WF_ROLE_INPUT, 1, shape);
    int op = wf_graph_add_op(&g, WF_OP_GELU, "gelu", &x, 1, NULL);
    double f = 0;
    if (g.status == WF_OK && op >= 0) {
        wf_op_cost c;
        wf_op_cost_of(&g, op, &c);
        f = c.fwd_flops / 1024.0;
    }
    wf_graph_free(&g);
    wf_clear_error();
    return f > 0 ? f : 1.0;
}

typedef struct {
    size_t n; /* multiple of 16 */
    float *a, *b, *c, *d;
} stream_ctx;

/* a = b + s c, in blocks of 16 so the compiler vectorizes at -O2 (restrict
 * parameters: GCC does not trust restrict locals loaded from a struct). */
static void triad(float *restrict a, const float *restrict b, const float *restrict c, int64_t n)
{
    for (int64_t i = 0; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            a[i + j] = b[i + j] + 0.5f * c[i + j];
}

static void triad_kernel(void *p)
{
    stream_ctx *s = p;
    triad(s->a, s->b, s->c, (int64_t)s->n);
}

/* The memory traffic of the fused AdamW pass (optim.c): read a weight, its
 * gradient and two moments, write the weight and the moments. */
static void optimizer_stream(float *restrict w, const float *restrict g, float *restrict m, float *restrict v,
                             int64_t n)
{
    for (int64_t i = 0; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) {
            const float gj = g[i + j];
            const float mj = 0.9f * m[i + j] + 0.1f * gj;
            m[i + j] = mj;
            v[i + j] = 0.999f * v[i + j] + 0.001f * gj * gj;
            w[i + j] = 0.999f * w[i + j] - 1e-9f * mj;
        }
}

static void optimizer_stream_kernel(void *p)
{
    stream_ctx *s = p;
    optimizer_stream(s->a, s->b, s->c, s->d, (int64_t)s->n);
}

static void copy_kernel(void *p)
{
    stream_ctx *s = p;
    memcpy(s->a, s->b, s->n * sizeof(float));
}

/* ---- message passing ------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    int bytes;
    int peer;   /* the other rank of the pair, -1 when this rank is not in it */
    int leader; /* 1 on the rank that starts each round trip */
} pingpong_ctx;

static void pingpong_kernel(void *p)
{
    pingpong_ctx *c = p;
    if (c->peer < 0)
        return;
    if (c->leader) {
        MPI_Send(c->buf, c->bytes, MPI_BYTE, c->peer, 7, MPI_COMM_WORLD);
        MPI_Recv(c->buf, c->bytes, MPI_BYTE, c->peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(c->buf, c->bytes, MPI_BYTE, c->peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(c->buf, c->bytes, MPI_BYTE, c->peer, 7, MPI_COMM_WORLD);
    }
}

typedef struct {
    float *in, *out;
    int count;
    wf_shm_coll *shm; /* the runtime's shared-memory all-reduce (in place on out), NULL: MPI's */
} allreduce_ctx;

static void allreduce_kernel(void *p)
{
    allreduce_ctx *c = p;
    if (c->shm)
        wf_shm_coll_wait(c->shm, wf_shm_coll_allreduce(c->shm, c->out, c->count));
    else
        MPI_Allreduce(c->in, c->out, c->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

#define COLL_MAX_CALLS 1000

/* Seconds per call of a collective kernel (ping-pong round trip, all-reduce),
 * robust to a machine shared with other jobs: calls are timed one by one,
 * each after a barrier; a call's time is its slowest rank's, and the result
 * is the fastest call (one in which no rank was descheduled). The number of
 * calls is enough for min_s (at least 5, at most COLL_MAX_CALLS), from the
 * slowest rank's first estimate, so every rank makes the same calls. */
static double time_collective(kernel_fn fn, void *ctx, double min_s)
{
    static double ts[COLL_MAX_CALLS];
    fn(ctx); /* warm-up: connections, buffers */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = wf_now_s();
    for (int i = 0; i < 3; i++)
        fn(ctx);
    double est = (wf_now_s() - t0) / 3, est_max = 0;
    MPI_Allreduce(&est, &est_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double want = est_max > 0 ? min_s / est_max : COLL_MAX_CALLS;
    int calls = want < 5 ? 5 : want > COLL_MAX_CALLS ? COLL_MAX_CALLS : (int)want;
    for (int i = 0; i < calls; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = wf_now_s();
        fn(ctx);
        ts[i] = wf_now_s() - t0;
    }
    MPI_Allreduce(MPI_IN_PLACE, ts, calls, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double best = ts[0];
    for (int i = 1; i < calls; i++)
        if (ts[i] < best)
            best = ts[i];
    return best;
}

/* Node structure: nodes, ranks on this node, and the partners of rank 0 for
 * the ping-pongs (-1 when there is none). */
static wf_status node_layout(int *nodes, int *per_node, int *intra_peer, int *inter_peer)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    int lrank, lsize;
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    /* Each rank's node id = the world rank of its node's local rank 0. */
    int leader = lrank == 0 ? rank : -1;
    MPI_Bcast(&leader, 1, MPI_INT, 0, local);
    int *ids = malloc(sizeof(int) * (size_t)nranks);
    wf_status st = wf_mpi_agree(ids ? WF_OK : wf_errorf(WF_NOMEM, "calibrate: out of memory"));
    if (st != WF_OK) {
        free(ids);
        MPI_Comm_free(&local);
        return st;
    }
    MPI_Allgather(&leader, 1, MPI_INT, ids, 1, MPI_INT, MPI_COMM_WORLD);
    *nodes = 0;
    *intra_peer = *inter_peer = -1;
    for (int r = 0; r < nranks; r++) {
        if (ids[r] == r)
            (*nodes)++;
        if (r > 0 && ids[r] == ids[0] && *intra_peer < 0)
            *intra_peer = r;
        if (ids[r] != ids[0] && *inter_peer < 0)
            *inter_peer = r;
    }
    free(ids);
    /* Ranks per node: the largest node (equal in a regular launch). */
    MPI_Allreduce(&lsize, per_node, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Comm_free(&local);
    return WF_OK;
}

static void pingpong_series(int peer, const wf_calib_result *r, double min_s, double *one_way_s, char *buf)
{
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    for (int i = 0; i < r->nmsg; i++) {
        pingpong_ctx c = {buf, (int)r->msg_bytes[i], -1, 0};
        if (rank == 0) {
            c.peer = peer;
            c.leader = 1;
        } else if (rank == peer) {
            c.peer = 0;
        }
        one_way_s[i] = time_collective(pingpong_kernel, &c, min_s) / 2;
    }
}

/* Latency and bandwidth of a series of message times t[i] at sizes n[i]
 * (ascending). Interference (a descheduled rank) only ever adds time, so the
 * times first become their lower monotone envelope (a message never takes
 * longer than a bigger one). The latency is the intercept of the alpha-beta
 * fit (relative residuals, so the small messages fix it), or the smallest
 * message's time when the fit has none. The bandwidth is the largest
 * message's, after that latency: the largest message is sized beyond the
 * caches, as a training step's gradient buckets are, and a copy through
 * memory is slower than one between caches (a fit through every size would
 * blend the two). */
static void fit_link(const double *n, const double *t, int k, double *alpha_s, double *bw_bps)
{
    double env[WF_CALIB_MAX_MSG];
    for (int i = k - 1; i >= 0; i--)
        env[i] = i == k - 1 || t[i] < env[i + 1] ? t[i] : env[i + 1];
    double a = 0, b = 0;
    if (wf_fit_alpha_beta(n, env, k, &a, &b) != WF_OK)
        wf_clear_error();
    *alpha_s = a > 0 ? a : env[0];
    double rest = env[k - 1] - *alpha_s;
    *bw_bps = n[k - 1] / (rest > 0.5 * env[k - 1] ? rest : env[k - 1]);
}

/* ---- overlap -------------------------------------------------------------------------------- */

typedef struct {
    gemm_ctx g;
    int gemms;
    float *buf;
    int count;
    int overlap; /* 1: an MPI_Iallreduce of buf in flight during the products */
    wf_shm_coll *shm; /* the runtime's all-reduce instead (progressed between the products) */
} overlap_ctx;

/* `gemms` products, each followed by MPI_Test as the executor's hook does
 * between kernels; with `overlap`, an all-reduce in flight from the start. */
static void overlap_kernel(void *p)
{
    overlap_ctx *o = p;
    MPI_Request req = MPI_REQUEST_NULL;
    int flag = 0;
    if (o->shm) {
        int64_t t = o->overlap ? wf_shm_coll_allreduce(o->shm, o->buf, o->count) : -1;
        for (int i = 0; i < o->gemms; i++) {
            gemm_kernel(&o->g);
            wf_shm_coll_progress(o->shm);
        }
        if (t >= 0)
            wf_shm_coll_wait(o->shm, t);
        return;
    }
    if (o->overlap)
        MPI_Iallreduce(MPI_IN_PLACE, o->buf, o->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    for (int i = 0; i < o->gemms; i++) {
        gemm_kernel(&o->g);
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    }
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static void blocking_allreduce_kernel(void *p)
{
    overlap_ctx *o = p;
    if (o->shm)
        wf_shm_coll_wait(o->shm, wf_shm_coll_allreduce(o->shm, o->buf, o->count));
    else
        MPI_Allreduce(MPI_IN_PLACE, o->buf, o->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* The cluster's overlap_slowdown: compute time x this while communication
 * overlaps it. An all-reduce of `bytes` alone takes T_m; products with
 * MPI_Test between them, about twice as long, take T_c; the same products
 * with the all-reduce in flight take T_o. Hidden for free, T_o would be T_c;
 * the cost model charges T_c + (s - 1) T_m, so s = 1 + (T_o - T_c) / T_m
 * (in [1, 3]). On CPUs without an offload engine or a progress thread the
 * ranks' own cores copy and reduce the messages, inside the MPI calls, so s
 * comes out near 2: the communication adds to the compute instead of hiding
 * behind it. */
static wf_status measure_overlap(double bytes, double min_s, wf_shm_coll *shm, double *slowdown)
{
    overlap_ctx o;
    memset(&o, 0, sizeof o);
    o.shm = shm;
    o.g.m = o.g.n = o.g.k = 256;
    o.count = (int)(bytes / sizeof(float));
    o.g.a = malloc(sizeof(float) * 256 * 256);
    o.g.b = malloc(sizeof(float) * 256 * 256);
    o.g.c = malloc(sizeof(float) * 256 * 256);
    o.buf = calloc((size_t)o.count, sizeof(float));
    wf_status st = o.g.a && o.g.b && o.g.c && o.buf ? WF_OK : wf_errorf(WF_NOMEM, "calibrate: out of memory");
    st = wf_mpi_agree(st);
    if (st == WF_OK) {
        fill(o.g.a, 256 * 256, 1.0f);
        fill(o.g.b, 256 * 256, 0.5f);
        double tm = time_collective(blocking_allreduce_kernel, &o, min_s);
        o.gemms = 1;
        double tg = time_collective(overlap_kernel, &o, min_s);
        double want = 2.0 * tm / (tg > 0 ? tg : 1e-6);
        o.gemms = want < 1 ? 1 : want > 100000 ? 100000 : (int)want;
        double tc = time_collective(overlap_kernel, &o, min_s);
        o.overlap = 1;
        double to = time_collective(overlap_kernel, &o, min_s);
        double s = tm > 0 ? 1.0 + (to - tc) / tm : 1.0;
        *slowdown = s < 1 ? 1 : s > 3 ? 3 : s;
    }
    free(o.g.a);
    free(o.g.b);
    free(o.g.c);
    free(o.buf);
    return st;
}

/* ---- ranks sharing cores ------------------------------------------------------------ */

typedef struct {
    gemm_ctx g;
    int gemms;  /* products per burst */
    int rounds; /* bursts, each followed by a small all-reduce */
    double x;
} sync_ctx;

static void burst_kernel(void *p)
{
    sync_ctx *s = p;
    for (int i = 0; i < s->gemms; i++)
        gemm_kernel(&s->g);
}

static void burst_sync_kernel(void *p)
{
    sync_ctx *s = p;
    for (int r = 0; r < s->rounds; r++) {
        burst_kernel(s);
        MPI_Allreduce(MPI_IN_PLACE, &s->x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
}

/* Ranks that outnumber the cores: a training step alternates compute with
 * blocking collectives, and a rank that reaches one waits (polling) for
 * peers that are off a core. Every rank runs bursts of about 2 ms of
 * products (C on its CPU clock) each followed by an 8-byte all-reduce;
 * on the wall clock a round takes T, where C / share is the compute a rank
 * gets of its core share: the excess T - C / share is what the all-reduce
 * costs under the sharing. The fastest of the trials (time_collective). */
static wf_status measure_shared_sync(double share, double min_s, double *sync_s)
{
    sync_ctx s;
    memset(&s, 0, sizeof s);
    s.g.m = s.g.n = s.g.k = 128;
    s.g.a = malloc(sizeof(float) * 128 * 128);
    s.g.b = malloc(sizeof(float) * 128 * 128);
    s.g.c = malloc(sizeof(float) * 128 * 128);
    wf_status st = wf_mpi_agree(s.g.a && s.g.b && s.g.c ? WF_OK : wf_errorf(WF_NOMEM, "calibrate: out of memory"));
    if (st == WF_OK) {
        fill(s.g.a, 128 * 128, 1.0f);
        fill(s.g.b, 128 * 128, 0.5f);
        s.gemms = 1;
        double one = time_kernel(burst_kernel, &s, min_s, 1, TRIALS_OWN), most = one;
        MPI_Allreduce(&one, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        s.gemms = most > 0 ? (int)(2e-3 / most) + 1 : 1;
        double c = time_kernel(burst_kernel, &s, min_s, 1, TRIALS_OWN), cmax = c;
        MPI_Allreduce(&c, &cmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        s.rounds = 20;
        double t = time_collective(burst_sync_kernel, &s, min_s) / s.rounds;
        double excess = t - cmax / share;
        *sync_s = excess > 0 ? excess : 0;
    }
    free(s.g.a);
    free(s.g.b);
    free(s.g.c);
    return st;
}

/* ---- memory bandwidth ---------------------------------------------------------------- */

/* Collective: four arrays of n floats on every rank (agreed). */
static wf_status stream_alloc(stream_ctx *s, size_t n)
{
    s->n = n;
    s->a = malloc(n * sizeof(float));
    s->b = malloc(n * sizeof(float));
    s->c = malloc(n * sizeof(float));
    s->d = malloc(n * sizeof(float));
    wf_status st = s->a && s->b && s->c && s->d
                       ? WF_OK
                       : wf_errorf(WF_NOMEM, "calibrate: out of memory for the bandwidth arrays");
    if ((st = wf_mpi_agree(st)) == WF_OK) {
        fill(s->a, n, 1.0f);
        fill(s->b, n, 1.0f);
        fill(s->c, n, 1.0f);
        fill(s->d, n, 1.0f);
    }
    return st;
}

static void stream_free(stream_ctx *s)
{
    free(s->a);
    free(s->b);
    free(s->c);
    free(s->d);
    memset(s, 0, sizeof *s);
}

static void keep_max(double *best, double v)
{
    if (v > *best)
        *best = v;
}

/* Collective. One round of the memory kernels, keeping in r the best rate of
 * every round so far. The run makes three rounds, spread over it (before the
 * products, between them and the vector kernel, at the end): a machine shared
 * with other jobs has spells of memory traffic that no clock excludes, and
 * the best round is the machine's own bandwidth. */
static wf_status stream_round(stream_ctx *s, double min_s, int cpu, wf_calib_result *r)
{
    const double n = (double)s->n;
    barrier();
    double t = time_kernel(optimizer_stream_kernel, s, min_s, cpu, TRIALS_IN_STEP);
    keep_max(&r->stream_bw_bps, mean_over_ranks(28.0 * n / t));
    barrier();
    t = time_kernel(copy_kernel, s, min_s, cpu, TRIALS_IN_STEP);
    keep_max(&r->copy_bw_bps, mean_over_ranks(2.0 * n * sizeof(float) / t));
    barrier();
    t = time_kernel(triad_kernel, s, min_s, cpu, TRIALS_IN_STEP);
    keep_max(&r->triad_bw_bps, mean_over_ranks(3.0 * n * sizeof(float) / t));
    return WF_OK;
}

/* ---- the run ----------------------------------------------------------------------------------- */

typedef struct {
    int m, n, k;
} gemm_size;

/* C[m,n] = A[m,k] B[k,n] at shapes like training's products, one per FLOP
 * count: small cubes, an attention head (S=128, D=64), token-major products
 * of a transformer (1024 tokens, hidden 256, 4h = 1024), a batch-64 MLP layer
 * with a 64 MiB weight, and a large product. --quick runs them shorter. */
static const gemm_size GEMMS[] = {{32, 32, 32},       {64, 64, 64},       {128, 128, 64},   {256, 256, 256},
                                  {1024, 256, 256},   {1024, 1024, 256},  {64, 4096, 4096}, {2048, 2048, 1024}};
#define NGEMMS ((int)(sizeof GEMMS / sizeof GEMMS[0]))
_Static_assert(sizeof GEMMS / sizeof GEMMS[0] <= WF_CALIB_MAX_GEMM, "gemm table too long");
_Static_assert(sizeof GEMMS / sizeof GEMMS[0] <= WF_MAX_EFF, "one efficiency entry per gemm");

/* Message sizes: the largest, 64 MiB, is beyond the caches (as a step's
 * gradient buckets are); its rate is the link's bandwidth (fit_link). */
static const double MSG_QUICK[] = {8, 65536, 1048576, 67108864};
static const double MSG_FULL[] = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 67108864};
_Static_assert(sizeof MSG_FULL / sizeof MSG_FULL[0] <= WF_CALIB_MAX_MSG, "message table too long");

/* One whole measurement (wf_calibrate_run repeats it). */
static wf_status calibrate_once(const wf_calib_opts *o, wf_calib_result *r)
{
    memset(r, 0, sizeof *r);
    if (o->threads < 1 || o->threads > 1024)
        return wf_errorf(WF_INVAL, "calibrate: threads=%d must be in [1, 1024]", o->threads);
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    r->nranks = nranks;
    r->nodes = 1;
    r->ranks_per_node = 1;
    r->threads = o->threads;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    r->cores = online > 0 ? (int)online : 1;
    r->core_share = (double)r->cores / (double)r->threads < 1 ? (double)r->cores / (double)r->threads : 1.0;
    (void)wf_k_set_threads(o->threads); /* WF_NOTFOUND with a BLAS that cannot be told */
    const double min_s = o->quick ? 0.02 : 0.2;
    const int cpu = o->threads == 1;
    r->cpu_clock = cpu;
    snprintf(r->blas_core, sizeof r->blas_core, "%s", wf_k_blas_core());
    wf_status st = WF_OK;

    /* memory, first round: four arrays of 32 MiB (quick) or 128 MiB each, far
     * beyond any cache */
    stream_ctx mem;
    if ((st = stream_alloc(&mem, (size_t)(o->quick ? 8u : 32u) << 20)) != WF_OK ||
        (st = stream_round(&mem, min_s, cpu, r)) != WF_OK) {
        stream_free(&mem);
        return st;
    }

    /* sgemm */
    for (int i = 0; i < NGEMMS; i++) {
        barrier();
        double fps = 0;
        st = measure_gemm(GEMMS[i].m, GEMMS[i].n, GEMMS[i].k, min_s, cpu, &fps);
        if (st != WF_OK) {
            stream_free(&mem);
            return st;
        }
        wf_calib_gemm *g = &r->gemm[r->ngemm++];
        g->m = GEMMS[i].m;
        g->n = GEMMS[i].n;
        g->k = GEMMS[i].k;
        g->flops = 2.0 * g->m * g->n * g->k;
        g->flops_per_s = mean_over_ranks(fps);
        if (g->flops_per_s > r->gemm_peak_flops_per_s)
            r->gemm_peak_flops_per_s = g->flops_per_s;
    }

    /* memory, second round */
    if ((st = stream_round(&mem, min_s, cpu, r)) != WF_OK) {
        stream_free(&mem);
        return st;
    }

    /* vector: the runtime's GELU forward on 2 x 16 KiB, resident in L1 */
    {
        gelu_ctx gc = {4096, malloc(4096 * sizeof(float)), malloc(4096 * sizeof(float))};
        st = wf_mpi_agree(gc.x && gc.y ? WF_OK : wf_errorf(WF_NOMEM, "calibrate: out of memory"));
        if (st == WF_OK) {
            fill(gc.x, 4096, 4.0f);
            barrier();
            double t = time_kernel(gelu_kernel, &gc, min_s, cpu, TRIALS_OWN);
            r->vector_flops_per_s = mean_over_ranks(gelu_flops_per_elem() * (double)gc.n / t);
        }
        free(gc.x);
        free(gc.y);
        if (st != WF_OK) {
            stream_free(&mem);
            return st;
        }
    }

    /* memory: the third of three rounds (stream_round says why) */
    if ((st = stream_round(&mem, min_s, cpu, r)) != WF_OK) {
        stream_free(&mem);
        return st;
    }
    stream_free(&mem);
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);

    if (nranks == 1) {
        r->mem_bytes = phys;
        return WF_OK;
    }

    /* message passing */
    int intra_peer, inter_peer;
    if ((st = node_layout(&r->nodes, &r->ranks_per_node, &intra_peer, &inter_peer)) != WF_OK)
        return st;
    r->mem_bytes = phys / r->ranks_per_node;
    {
        double want = (double)r->ranks_per_node * (double)r->threads;
        r->core_share = want > (double)r->cores ? (double)r->cores / want : 1.0;
    }
    const double *msg = o->quick ? MSG_QUICK : MSG_FULL;
    r->nmsg = o->quick ? (int)(sizeof MSG_QUICK / sizeof MSG_QUICK[0]) : (int)(sizeof MSG_FULL / sizeof MSG_FULL[0]);
    for (int i = 0; i < r->nmsg; i++)
        r->msg_bytes[i] = msg[i];
    size_t maxb = (size_t)r->msg_bytes[r->nmsg - 1];
    char *buf = calloc(1, maxb);
    float *in = calloc(maxb / sizeof(float), sizeof(float)), *out = calloc(maxb / sizeof(float), sizeof(float));
    st = wf_mpi_agree(buf && in && out ? WF_OK : wf_errorf(WF_NOMEM, "calibrate: out of memory for messages"));
    /* The all-reduce the runtime runs (dist.c): on one node, the
     * shared-memory one unless WEFT_COLL_SHM=0. */
    wf_shm_coll *shm = NULL;
    int shm_on = 1;
    if (st == WF_OK)
        st = wf_mpi_agree(wf_shm_coll_env(&shm_on));
    if (st == WF_OK && shm_on)
        st = wf_mpi_agree(wf_shm_coll_create(MPI_COMM_WORLD, 0, &shm, NULL));
    r->allreduce_shm = shm != NULL;
    if (st == WF_OK) {
        double mmin_s = o->quick ? 0.01 : 0.1;
        if (intra_peer >= 0)
            pingpong_series(intra_peer, r, mmin_s, r->pingpong_s, buf);
        if (inter_peer >= 0)
            pingpong_series(inter_peer, r, mmin_s, r->pingpong_inter_s, buf);
        for (int i = 0; i < r->nmsg; i++) {
            allreduce_ctx c = {in, out, (int)(r->msg_bytes[i] / sizeof(float)), shm};
            r->allreduce_s[i] = time_collective(allreduce_kernel, &c, mmin_s);
        }
        if (intra_peer >= 0)
            fit_link(r->msg_bytes, r->pingpong_s, r->nmsg, &r->p2p_alpha_s, &r->p2p_bw_bps);
        if (inter_peer >= 0)
            fit_link(r->msg_bytes, r->pingpong_inter_s, r->nmsg, &r->inter_alpha_s, &r->inter_bw_bps);
        fit_link(r->msg_bytes, r->allreduce_s, r->nmsg, &r->allreduce_alpha_s, &r->allreduce_bw_bps);
        r->allreduce_busbw_bps = r->allreduce_bw_bps * 2.0 * (nranks - 1) / nranks;
        /* A quarter second per kernel (about ten calls each): one noisy call
         * among five would move the slowdown a lot. */
        st = measure_overlap(16777216.0, mmin_s > 0.25 ? mmin_s : 0.25, shm, &r->overlap_slowdown);
        if (st == WF_OK && r->core_share < 1)
            st = measure_shared_sync(r->core_share, mmin_s > 0.25 ? mmin_s : 0.25, &r->shared_sync_s);
    }
    wf_shm_coll_free(shm);
    free(buf);
    free(in);
    free(out);
    if (st != WF_OK)
        return st;
    /* Every rank returns rank 0's view (the ping-pong times live there). */
    MPI_Bcast(r, (int)sizeof *r, MPI_BYTE, 0, MPI_COMM_WORLD);
    return WF_OK;
}

/* ---- repeats ------------------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The median of x[0..n-1] after rejecting outliers: values further from the
 * median than WF_CALIB_OUTLIER_MADS scaled median absolute deviations (1.4826
 * MAD estimates a normal sigma) or, with 3 repeats or fewer, than twice
 * WF_CALIB_NOISY of the median (a MAD of 3 values is the distance to the
 * nearest one, too small to judge by). *spread: (max - min) / median of the
 * values kept; *rejected: how many were dropped. */
static double robust_median(const double *x, int n, double *spread, int *rejected)
{
    double v[WF_CALIB_MAX_REPEATS], d[WF_CALIB_MAX_REPEATS];
    memcpy(v, x, sizeof(double) * (size_t)n);
    double med = median_of(v, n);
    for (int i = 0; i < n; i++)
        d[i] = fabs(x[i] - med);
    double mad = median_of(d, n);
    double lim = n > 3 ? WF_CALIB_OUTLIER_MADS * 1.4826 * mad : 2.0 * WF_CALIB_NOISY * fabs(med);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (fabs(x[i] - med) <= lim || lim <= 0)
            v[k++] = x[i];
    if (k == 0) {
        memcpy(v, x, sizeof(double) * (size_t)n);
        k = n;
    }
    *rejected = n - k;
    double m = median_of(v, k);
    *spread = m != 0 ? (v[k - 1] - v[0]) / fabs(m) : 0;
    return m;
}

/* Field f of every repeat into its robust median; `name` (a factor the cost
 * model uses) takes part in the noise verdict. */
static void combine(wf_calib_result *out, const wf_calib_result *rs, int n, size_t off, const char *name)
{
    double x[WF_CALIB_MAX_REPEATS];
    for (int i = 0; i < n; i++)
        memcpy(&x[i], (const char *)&rs[i] + off, sizeof(double));
    double spread;
    int rej;
    double m = robust_median(x, n, &spread, &rej);
    memcpy((char *)out + off, &m, sizeof m);
    out->outliers += rej;
    if (name && spread > out->spread) {
        out->spread = spread;
        snprintf(out->spread_factor, sizeof out->spread_factor, "%s", name);
    }
}

#define COMBINE(field, name) combine(r, rs, n, offsetof(wf_calib_result, field), name)

/* The repeats rs[0..n-1] into one result (every factor its robust median)
 * and the noise verdict; no timing, so a test can hand it any series. */
void wf_calibrate_combine(const wf_calib_result *rs, int n, double load_avg, wf_calib_result *r)
{
    if (n < 1) {
        memset(r, 0, sizeof *r);
        return;
    }
    if (n > WF_CALIB_MAX_REPEATS)
        n = WF_CALIB_MAX_REPEATS;
    *r = rs[0]; /* the layout: sizes, counts, ranks and cores */
    r->repeats = n;
    r->load_avg = load_avg;
    r->spread = 0;
    r->outliers = 0;
    r->spread_factor[0] = 0;
    for (int g = 0; g < r->ngemm; g++)
        COMBINE(gemm[g].flops_per_s, g == r->ngemm - 1 ? "sgemm peak" : NULL);
    r->gemm_peak_flops_per_s = 0;
    for (int g = 0; g < r->ngemm; g++)
        if (r->gemm[g].flops_per_s > r->gemm_peak_flops_per_s)
            r->gemm_peak_flops_per_s = r->gemm[g].flops_per_s;
    COMBINE(vector_flops_per_s, "vector rate");
    COMBINE(stream_bw_bps, "memory bandwidth");
    COMBINE(copy_bw_bps, NULL);
    COMBINE(triad_bw_bps, NULL);
    if (r->nranks > 1) {
        for (int m = 0; m < r->nmsg; m++) {
            const int last = m == r->nmsg - 1;
            COMBINE(pingpong_s[m], last ? "point-to-point bandwidth" : NULL);
            COMBINE(pingpong_inter_s[m], NULL);
            COMBINE(allreduce_s[m], last ? "all-reduce bandwidth" : NULL);
        }
        if (r->pingpong_s[0] > 0)
            fit_link(r->msg_bytes, r->pingpong_s, r->nmsg, &r->p2p_alpha_s, &r->p2p_bw_bps);
        if (r->pingpong_inter_s[0] > 0)
            fit_link(r->msg_bytes, r->pingpong_inter_s, r->nmsg, &r->inter_alpha_s, &r->inter_bw_bps);
        fit_link(r->msg_bytes, r->allreduce_s, r->nmsg, &r->allreduce_alpha_s, &r->allreduce_bw_bps);
        r->allreduce_busbw_bps = r->allreduce_bw_bps * 2.0 * (r->nranks - 1) / r->nranks;
        COMBINE(overlap_slowdown, "overlap slowdown");
        COMBINE(shared_sync_s, NULL);
    }
    /* More runnable processes than cores: the compute, timed on the thread
     * CPU clock, is still right, but every message and wait is timed on the
     * wall clock and takes the scheduler's delays in (the repeats can agree
     * with each other and all be wrong). */
    r->noisy_load = r->cores > 0 && load_avg > (double)r->cores;
    r->noisy = r->spread > WF_CALIB_NOISY || r->noisy_load;
}

wf_status wf_calibrate_run(const wf_calib_opts *o, wf_calib_result *r)
{
    if (o->threads < 1 || o->threads > 1024) {
        memset(r, 0, sizeof *r);
        return wf_errorf(WF_INVAL, "calibrate: threads=%d must be in [1, 1024]", o->threads);
    }
    const int n = o->quick ? WF_CALIB_REPEATS_QUICK : WF_CALIB_REPEATS;
    wf_calib_result *rs = calloc((size_t)n, sizeof *rs);
    if (!rs)
        return wf_errorf(WF_NOMEM, "calibrate: out of memory");
    double load = 0;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) != 1)
            load = 0;
        fclose(lf);
    }
    wf_status st = WF_OK;
    for (int i = 0; i < n && st == WF_OK; i++)
        st = calibrate_once(o, &rs[i]);
    if (st != WF_OK) {
        *r = rs[0];
        free(rs);
        return st;
    }
    wf_calibrate_combine(rs, n, load, r);
    free(rs);
    return WF_OK;
}

/* ---- into a cluster ------------------------------------------------------------------------------ */

static int cmp_eff_desc(const void *a, const void *b)
{
    double x = ((const wf_eff_point *)a)->min_flops, y = ((const wf_eff_point *)b)->min_flops;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* A level's numbers from a ping-pong fit and the all-reduce bus bandwidth: the
 * bandwidth is the better of the two rates, the efficiency the share of it the
 * all-reduce achieves, so bw x eff reproduces the measured all-reduce. */
static void set_level(wf_level *l, double alpha_s, double p2p_bw, double busbw)
{
    l->latency_s = alpha_s;
    double bw = p2p_bw > busbw ? p2p_bw : busbw;
    if (bw > 0) {
        l->bw_bps = bw;
        l->eff = busbw > 0 ? busbw / bw : 1.0;
    }
}

wf_status wf_calibrate_to_cluster(const wf_calib_result *r, wf_cluster *c)
{
    if (r->ngemm < 1 || !(r->gemm_peak_flops_per_s > 0) || !(r->triad_bw_bps > 0) || !(r->vector_flops_per_s > 0))
        return wf_errorf(WF_INVAL, "calibrate: no measurements to turn into a cluster");
    wf_status st = wf_cluster_lookup("local", c);
    if (st != WF_OK)
        return st;
    snprintf(c->name, sizeof c->name, "local-calibrated:ranks=%d,nodes=%d", r->nranks, r->nodes);
    wf_device *d = &c->dev;
    /* The bandwidth of memory-bound work: the optimizer-like stream when it
     * was measured, else the triad. */
    const double bw = r->stream_bw_bps > 0 ? r->stream_bw_bps : r->triad_bw_bps;
    /* Each product's rate without its memory traffic: the cost model adds
     * bytes / bandwidth to FLOPs / (peak x eff), so the rate that makes the
     * sum equal the measured time t is FLOPs / (t - bytes / bw), bytes being
     * its three matrices (at most half of t is taken out, should the
     * bandwidth be underestimated). The peak stays the best measured rate
     * (what MFU is relative to), and each product's efficiency is its rate's
     * share of it, at most 1: exact for the products whose matrices stream
     * from memory (the large ones), while a small product held in L1 keeps
     * efficiency 1 and the model charges its bytes anyway. The table has one
     * point per distinct measured FLOPs (the mean where several sizes share
     * a FLOP count), sorted by FLOPs descending. */
    const double peak = r->gemm_peak_flops_per_s;
    /* Ranks that outnumber the cores get this share of one (the products
     * were timed on the CPU clock, the memory on the wall clock: a rank's
     * own bandwidth while it runs is bw / share). */
    const double share = r->core_share > 0 && r->core_share < 1 ? r->core_share : 1.0;
    double rate[WF_CALIB_MAX_GEMM];
    for (int i = 0; i < r->ngemm && i < WF_CALIB_MAX_GEMM; i++) {
        const wf_calib_gemm *g = &r->gemm[i];
        double t = g->flops / g->flops_per_s;
        double tc = t - 4.0 * (double)(g->m * g->k + g->k * g->n + g->m * g->n) / (bw / share);
        rate[i] = g->flops / (tc > 0.5 * t ? tc : 0.5 * t);
        if (rate[i] > peak)
            rate[i] = peak;
    }
    d->matrix_flops[WF_DTYPE_FP32] = peak * share;
    wf_eff_point pts[WF_CALIB_MAX_GEMM];
    int cnt[WF_CALIB_MAX_GEMM], np = 0;
    for (int i = 0; i < r->ngemm && i < WF_CALIB_MAX_GEMM; i++) {
        int j = 0;
        while (j < np && pts[j].min_flops != r->gemm[i].flops)
            j++;
        if (j == np) {
            pts[np].min_flops = r->gemm[i].flops;
            pts[np].eff = 0;
            cnt[np++] = 0;
        }
        pts[j].eff += rate[i] / peak;
        cnt[j]++;
    }
    for (int j = 0; j < np; j++)
        pts[j].eff /= cnt[j];
    qsort(pts, (size_t)np, sizeof pts[0], cmp_eff_desc);
    d->neff = np < WF_MAX_EFF ? np : WF_MAX_EFF;
    for (int j = 0; j < d->neff; j++) {
        d->matrix_eff[j] = pts[j];
        if (d->matrix_eff[j].eff > 1)
            d->matrix_eff[j].eff = 1;
    }
    /* Achieved rates are measured directly, so their efficiency factors are 1. */
    d->vector_flops[WF_DTYPE_FP32] = r->vector_flops_per_s * share;
    d->vector_eff = 1.0;
    d->mem_bw_bps = bw;
    d->mem_eff = 1.0;
    if (r->nranks > 1) {
        d->mem_bytes = r->mem_bytes;
        if (c->nlevels >= 1)
            c->level[0].size = r->ranks_per_node;
        if (c->nlevels >= 2)
            c->level[c->nlevels - 1].size = r->nodes;
        /* The all-reduce spans the outermost level that the job spans. */
        if (r->nodes > 1 && c->nlevels >= 2) {
            if (r->p2p_bw_bps > 0)
                set_level(&c->level[0], r->p2p_alpha_s, r->p2p_bw_bps, 0);
            set_level(&c->level[c->nlevels - 1], r->inter_alpha_s, r->inter_bw_bps, r->allreduce_busbw_bps);
        } else {
            set_level(&c->level[0], r->p2p_alpha_s, r->p2p_bw_bps, r->allreduce_busbw_bps);
        }
        /* Ranks sharing cores: a small all-reduce costs shared_sync_s (the
         * wait for peers off a core), counted as the node level's latency. */
        if (r->shared_sync_s > 0) {
            wf_level *l = &c->level[0];
            double steps = wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, r->ranks_per_node, 8, 1.0, 1e30);
            if (steps > 0 && r->shared_sync_s / steps > l->latency_s)
                l->latency_s = r->shared_sync_s / steps;
        }
        /* The all-reduce fit includes the reduction arithmetic: do not count it twice. */
        c->reduce_bps = 0;
        if (r->overlap_slowdown >= 1)
            c->overlap_slowdown = r->overlap_slowdown;
    }
    if (c->mem_reserved_bytes >= d->mem_bytes)
        c->mem_reserved_bytes = 0.1 * d->mem_bytes;
    return wf_cluster_check(c);
}

/* ---- the human table ------------------------------------------------------------------------------ */

static void fmt_time(char *buf, size_t cap, double s)
{
    if (s < 1e-3)
        snprintf(buf, cap, "%8.2f us", s * 1e6);
    else
        snprintf(buf, cap, "%8.3f ms", s * 1e3);
}

void wf_calibrate_print(FILE *f, const wf_calib_result *r)
{
    fprintf(f, "weft calibrate: %d rank%s on %d node%s, %d BLAS thread%s per rank\n", r->nranks,
            r->nranks == 1 ? "" : "s", r->nodes, r->nodes == 1 ? "" : "s", r->threads, r->threads == 1 ? "" : "s");
    fprintf(f, "\nsgemm fp32 (per rank%s)\n", r->nranks > 1 ? ", mean over ranks, all running" : "");
    fprintf(f, "  %6s %6s %6s %12s %10s %8s\n", "m", "n", "k", "FLOPs", "GFLOP/s", "of peak");
    for (int i = 0; i < r->ngemm; i++) {
        const wf_calib_gemm *g = &r->gemm[i];
        fprintf(f, "  %6lld %6lld %6lld %12.3e %10.1f %8.2f\n", (long long)g->m, (long long)g->n, (long long)g->k,
                g->flops, g->flops_per_s / 1e9, g->flops_per_s / r->gemm_peak_flops_per_s);
    }
    fprintf(f, "\n  %-34s %10.1f GFLOP/s\n", "sgemm peak", r->gemm_peak_flops_per_s / 1e9);
    fprintf(f, "  %-34s %10.1f GFLOP/s (graph FLOPs)\n", "vector (GELU forward, in L1)", r->vector_flops_per_s / 1e9);
    fprintf(f, "  %-34s %10.2f GB/s\n", "memory, optimizer stream (4r + 3w)", r->stream_bw_bps / 1e9);
    fprintf(f, "  %-34s %10.2f GB/s\n", "memory copy (read+write)", r->copy_bw_bps / 1e9);
    fprintf(f, "  %-34s %10.2f GB/s\n", "memory triad (a = b + s c)", r->triad_bw_bps / 1e9);
    fprintf(f, "  %-34s %10.2f GiB\n", "memory per rank", r->mem_bytes / (1024.0 * 1024 * 1024));
    fprintf(f, "  (compute and memory timed on the %s clock)\n", r->cpu_clock ? "thread CPU" : "wall");
    fprintf(f, "  (each the median of %d repeats, %d outlier%s rejected; the widest spread: %s, %.0f%%; load "
               "average %.2f)\n", r->repeats, r->outliers, r->outliers == 1 ? "" : "s",
            r->spread_factor[0] ? r->spread_factor : "-", 100 * r->spread, r->load_avg);
    if (r->noisy && r->spread > WF_CALIB_NOISY)
        fprintf(f, "warning: the machine is too noisy to calibrate: %s varied by %.0f%% over %d repeats (more "
                   "than %.0f%%; load average %.2f); calibrate again when it is quieter\n",
                r->spread_factor, 100 * r->spread, r->repeats, 100 * WF_CALIB_NOISY, r->load_avg);
    if (r->noisy_load)
        fprintf(f, "warning: the machine is too noisy to calibrate: load average %.2f on %d cores (other processes "
                   "compete for them, so messages wait for descheduled peers); calibrate again when it is "
                   "quieter\n", r->load_avg, r->cores);
    fprintf(f, "\nBLAS: %s, core %s\n", wf_k_blas_info(), r->blas_core[0] ? r->blas_core : "unknown");
    const char *hint = wf_k_blas_hint();
    if (hint)
        fprintf(f, "hint: %s\n", hint);
    if (r->nranks < 2) {
        fprintf(f, "\n(one process: run under mpiexec -n 2 or more to measure communication)\n");
        return;
    }
    if (r->core_share > 0 && r->core_share < 1)
        fprintf(f, "\n%d ranks x %d threads on a node of %d cores: each rank computes on %.2f of a core; the "
                   "cluster's matrix and vector rates are the per-core rates above times that (the memory and "
                   "the messages are timed with every rank running)\n",
                r->ranks_per_node, r->threads, r->cores, r->core_share);
    int inter = r->inter_bw_bps > 0;
    fprintf(f, "\nmessages (one-way ping-pong time; MPI_Allreduce of floats over %d ranks)\n", r->nranks);
    fprintf(f, "  %10s %14s %14s %14s\n", "bytes", "p2p in node", inter ? "p2p across" : "", "allreduce");
    for (int i = 0; i < r->nmsg; i++) {
        char a[32] = "", b[32] = "", c[32];
        if (r->pingpong_s[i] > 0)
            fmt_time(a, sizeof a, r->pingpong_s[i]);
        if (inter)
            fmt_time(b, sizeof b, r->pingpong_inter_s[i]);
        fmt_time(c, sizeof c, r->allreduce_s[i]);
        fprintf(f, "  %10.0f %14s %14s %14s\n", r->msg_bytes[i], a, b, c);
    }
    if (r->p2p_bw_bps > 0)
        fprintf(f, "\n  p2p in node:   alpha %.2f us, bandwidth %.2f GB/s\n", r->p2p_alpha_s * 1e6,
                r->p2p_bw_bps / 1e9);
    if (inter)
        fprintf(f, "  p2p across:    alpha %.2f us, bandwidth %.2f GB/s\n", r->inter_alpha_s * 1e6,
                r->inter_bw_bps / 1e9);
    fprintf(f, "  allreduce:     alpha %.2f us, algorithm bandwidth %.2f GB/s, bus bandwidth %.2f GB/s (%s)\n",
            r->allreduce_alpha_s * 1e6, r->allreduce_bw_bps / 1e9, r->allreduce_busbw_bps / 1e9,
            r->allreduce_shm ? "the runtime's shared-memory all-reduce" : "MPI_Allreduce");
    fprintf(f, "  overlap:       compute x %.2f while a 16 MiB all-reduce is in flight (1: hidden for free)\n",
            r->overlap_slowdown);
    if (r->shared_sync_s > 0)
        fprintf(f, "  sharing:       a small all-reduce between 2 ms bursts of compute costs %.2f ms (peers off a "
                   "core)\n", r->shared_sync_s * 1e3);
}
