/* Machine calibration for `weft calibrate`: measures what the cost model needs
 * to know about this machine (or this MPI job) and turns it into a cluster.
 *
 * Measured, on every rank at once (so shared caches and memory are contended
 * as in training) and averaged over ranks:
 *   - sgemm (CBLAS, row-major) GFLOP/s at several cubes and rectangles: the
 *     best one is the device's fp32 matrix peak, each size's share of it an
 *     entry of the matrix efficiency table, keyed by the op's FLOPs;
 *   - vector throughput: saxpy on L1-resident vectors;
 *   - memory bandwidth: memcpy and the STREAM triad on arrays far beyond cache.
 * Under mpiexec with two ranks or more:
 *   - ping-pong between rank 0 and a rank on its node (and one on another
 *     node, when there is one), and MPI_Allreduce over all ranks, at several
 *     message sizes; alpha (latency) and bandwidth by least squares.
 * Each measurement repeats a kernel until it runs for a minimum time and keeps
 * the best of three trials, so one interruption does not skew it. This file
 * measures; it does not decide plans. */
#include "weft/runtime_io.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
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

/* Runs fn until one trial of `reps` calls lasts at least min_s, then keeps the
 * best of three trials; returns seconds per call. */
static double time_kernel(kernel_fn fn, void *ctx, double min_s)
{
    fn(ctx); /* warm-up: page faults, caches, BLAS buffers */
    long reps = 1;
    double t;
    for (;;) {
        double t0 = wf_now_s();
        for (long i = 0; i < reps; i++)
            fn(ctx);
        t = wf_now_s() - t0;
        if (t >= min_s || reps >= (1L << 30))
            break;
        double grow = t > 0 ? 1.3 * min_s / t : 16;
        reps = (long)((double)reps * (grow < 2 ? 2 : grow > 16 ? 16 : grow));
    }
    double best = t / (double)reps;
    for (int trial = 0; trial < 2; trial++) {
        double t0 = wf_now_s();
        for (long i = 0; i < reps; i++)
            fn(ctx);
        double per = (wf_now_s() - t0) / (double)reps;
        if (per < best)
            best = per;
    }
    return best;
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

static void gemm_kernel(void *p)
{
    gemm_ctx *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n, g->k, 1.0f, g->a, g->k, g->b, g->n, 0.0f,
                g->c, g->n);
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (float)((i * 2654435761u) % 1000) / 1000.0f;
}

static wf_status measure_gemm(int m, int n, int k, double min_s, double *flops_per_s)
{
    gemm_ctx g = {m, n, k, malloc(sizeof(float) * (size_t)m * k), malloc(sizeof(float) * (size_t)k * n),
                  malloc(sizeof(float) * (size_t)m * n)};
    wf_status st = WF_OK;
    if (!g.a || !g.b || !g.c) {
        st = wf_errorf(WF_NOMEM, "calibrate: out of memory for a %dx%dx%d sgemm", m, n, k);
    } else {
        fill(g.a, (size_t)m * k, 1.0f);
        fill(g.b, (size_t)k * n, 0.5f);
        double t = time_kernel(gemm_kernel, &g, min_s);
        *flops_per_s = 2.0 * m * n * k / t;
    }
    free(g.a);
    free(g.b);
    free(g.c);
    return st;
}

typedef struct {
    int n;
    float *x, *y;
} axpy_ctx;

static void axpy_kernel(void *p)
{
    axpy_ctx *a = p;
    cblas_saxpy(a->n, 1e-7f, a->x, 1, a->y, 1);
}

typedef struct {
    size_t n; /* multiple of 16 */
    float *restrict a, *restrict b, *restrict c;
} stream_ctx;

/* a = b + s c, in blocks of 16 so the compiler vectorizes at -O2. */
static void triad_kernel(void *p)
{
    stream_ctx *s = p;
    float *restrict a = s->a;
    const float *restrict b = s->b, *restrict c = s->c;
    for (size_t i = 0; i < s->n; i += 16)
        for (int j = 0; j < 16; j++)
            a[i + j] = b[i + j] + 0.5f * c[i + j];
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
} allreduce_ctx;

static void allreduce_kernel(void *p)
{
    allreduce_ctx *c = p;
    MPI_Allreduce(c->in, c->out, c->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* Seconds per call of a collective kernel (ping-pong round trip, all-reduce):
 * the best of five trials. A trial runs chunks of calls, each chunk timed
 * between a barrier and an all-reduce of its slowest rank's time, until the
 * chunks add up to min_s; the chunk doubles while it is short. Every rank sees
 * the same reduced times, so all agree on when to stop, and a descheduled
 * rank stretches a trial by at most one chunk. */
static double time_collective(kernel_fn fn, void *ctx, double min_s)
{
    fn(ctx); /* warm-up: connections, buffers */
    long chunk = 1;
    double best = INFINITY;
    for (int trial = 0; trial < 5; trial++) {
        double total = 0;
        long calls = 0;
        while (total < min_s) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = wf_now_s();
            for (long i = 0; i < chunk; i++)
                fn(ctx);
            double t = wf_now_s() - t0, tmax = 0;
            MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            total += tmax;
            calls += chunk;
            if (tmax < min_s / 8 && chunk < (1L << 20))
                chunk *= 2;
        }
        double per = total / (double)calls;
        if (per < best)
            best = per;
    }
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
 * longer than a bigger one), then the alpha-beta fit. When the fit has no
 * positive slope (noise), the bandwidth is the largest message's rate; when
 * its intercept clamps at 0, the latency is the smallest message's time. */
static void fit_link(const double *n, const double *t, int k, double *alpha_s, double *bw_bps)
{
    double env[WF_CALIB_MAX_MSG];
    for (int i = k - 1; i >= 0; i--)
        env[i] = i == k - 1 || t[i] < env[i + 1] ? t[i] : env[i + 1];
    double a = 0, b = 0;
    if (wf_fit_alpha_beta(n, env, k, &a, &b) == WF_OK && b > 0) {
        *bw_bps = 1.0 / b;
    } else {
        wf_clear_error();
        a = 0;
        *bw_bps = n[k - 1] / env[k - 1];
    }
    *alpha_s = a > 0 ? a : env[0];
}

/* ---- the run ----------------------------------------------------------------------------------- */

typedef struct {
    int m, n, k;
} gemm_size;

static const gemm_size GEMM_QUICK[] = {{32, 32, 32},   {64, 64, 64},   {128, 128, 128},
                                       {256, 256, 256}, {512, 512, 512}, {64, 1024, 1024}};
static const gemm_size GEMM_FULL[] = {{32, 32, 32},    {64, 64, 64},     {128, 128, 128},  {256, 256, 256},
                                      {512, 512, 512}, {64, 4096, 1024}, {1024, 1024, 1024}, {2048, 2048, 2048}};
_Static_assert(sizeof GEMM_FULL / sizeof GEMM_FULL[0] <= WF_CALIB_MAX_GEMM, "gemm table too long");
_Static_assert(sizeof GEMM_FULL / sizeof GEMM_FULL[0] <= WF_MAX_EFF, "one efficiency entry per gemm");

static const double MSG_QUICK[] = {8, 1024, 65536, 1048576};
static const double MSG_FULL[] = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216};
_Static_assert(sizeof MSG_FULL / sizeof MSG_FULL[0] <= WF_CALIB_MAX_MSG, "message table too long");

wf_status wf_calibrate_run(const wf_calib_opts *o, wf_calib_result *r)
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
#ifdef OPENBLAS_VERSION
    openblas_set_num_threads(o->threads);
#endif
    const double min_s = o->quick ? 0.02 : 0.2;
    wf_status st = WF_OK;

    /* sgemm */
    const gemm_size *sizes = o->quick ? GEMM_QUICK : GEMM_FULL;
    int nsizes = o->quick ? (int)(sizeof GEMM_QUICK / sizeof GEMM_QUICK[0])
                          : (int)(sizeof GEMM_FULL / sizeof GEMM_FULL[0]);
    for (int i = 0; i < nsizes; i++) {
        barrier();
        double fps = 0;
        st = wf_mpi_agree(measure_gemm(sizes[i].m, sizes[i].n, sizes[i].k, min_s, &fps));
        if (st != WF_OK)
            return st;
        wf_calib_gemm *g = &r->gemm[r->ngemm++];
        g->m = sizes[i].m;
        g->n = sizes[i].n;
        g->k = sizes[i].k;
        g->flops = 2.0 * g->m * g->n * g->k;
        g->flops_per_s = mean_over_ranks(fps);
        if (g->flops_per_s > r->gemm_peak_flops_per_s)
            r->gemm_peak_flops_per_s = g->flops_per_s;
    }

    /* vector: saxpy on 2 x 8 KiB, resident in L1 */
    {
        axpy_ctx a = {2048, malloc(2048 * sizeof(float)), malloc(2048 * sizeof(float))};
        st = a.x && a.y ? WF_OK : wf_errorf(WF_NOMEM, "calibrate: out of memory");
        st = wf_mpi_agree(st);
        if (st == WF_OK) {
            fill(a.x, 2048, 1.0f);
            fill(a.y, 2048, 1.0f);
            barrier();
            double t = time_kernel(axpy_kernel, &a, min_s);
            r->vector_flops_per_s = mean_over_ranks(2.0 * a.n / t);
        }
        free(a.x);
        free(a.y);
        if (st != WF_OK)
            return st;
    }

    /* memory: three arrays of 32 MiB (quick) or 128 MiB, far beyond any cache */
    {
        size_t n = (o->quick ? 8u : 32u) << 20;
        stream_ctx s = {n, malloc(n * sizeof(float)), malloc(n * sizeof(float)), malloc(n * sizeof(float))};
        st = s.a && s.b && s.c ? WF_OK : wf_errorf(WF_NOMEM, "calibrate: out of memory for the bandwidth arrays");
        st = wf_mpi_agree(st);
        if (st == WF_OK) {
            fill(s.a, n, 1.0f);
            fill(s.b, n, 1.0f);
            fill(s.c, n, 1.0f);
            barrier();
            double t = time_kernel(copy_kernel, &s, min_s);
            r->copy_bw_bps = mean_over_ranks(2.0 * (double)n * sizeof(float) / t);
            barrier();
            t = time_kernel(triad_kernel, &s, min_s);
            r->triad_bw_bps = mean_over_ranks(3.0 * (double)n * sizeof(float) / t);
        }
        free(s.a);
        free(s.b);
        free(s.c);
        if (st != WF_OK)
            return st;
    }
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
    const double *msg = o->quick ? MSG_QUICK : MSG_FULL;
    r->nmsg = o->quick ? (int)(sizeof MSG_QUICK / sizeof MSG_QUICK[0]) : (int)(sizeof MSG_FULL / sizeof MSG_FULL[0]);
    for (int i = 0; i < r->nmsg; i++)
        r->msg_bytes[i] = msg[i];
    size_t maxb = (size_t)r->msg_bytes[r->nmsg - 1];
    char *buf = calloc(1, maxb);
    float *in = calloc(maxb / sizeof(float), sizeof(float)), *out = calloc(maxb / sizeof(float), sizeof(float));
    st = wf_mpi_agree(buf && in && out ? WF_OK : wf_errorf(WF_NOMEM, "calibrate: out of memory for messages"));
    if (st == WF_OK) {
        double mmin_s = o->quick ? 0.01 : 0.1;
        if (intra_peer >= 0)
            pingpong_series(intra_peer, r, mmin_s, r->pingpong_s, buf);
        if (inter_peer >= 0)
            pingpong_series(inter_peer, r, mmin_s, r->pingpong_inter_s, buf);
        for (int i = 0; i < r->nmsg; i++) {
            allreduce_ctx c = {in, out, (int)(r->msg_bytes[i] / sizeof(float))};
            r->allreduce_s[i] = time_collective(allreduce_kernel, &c, mmin_s);
        }
        if (intra_peer >= 0)
            fit_link(r->msg_bytes, r->pingpong_s, r->nmsg, &r->p2p_alpha_s, &r->p2p_bw_bps);
        if (inter_peer >= 0)
            fit_link(r->msg_bytes, r->pingpong_inter_s, r->nmsg, &r->inter_alpha_s, &r->inter_bw_bps);
        fit_link(r->msg_bytes, r->allreduce_s, r->nmsg, &r->allreduce_alpha_s, &r->allreduce_bw_bps);
        r->allreduce_busbw_bps = r->allreduce_bw_bps * 2.0 * (nranks - 1) / nranks;
    }
    free(buf);
    free(in);
    free(out);
    if (st != WF_OK)
        return st;
    /* Every rank returns rank 0's view (the ping-pong times live there). */
    MPI_Bcast(r, (int)sizeof *r, MPI_BYTE, 0, MPI_COMM_WORLD);
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
    d->matrix_flops[WF_DTYPE_FP32] = r->gemm_peak_flops_per_s;
    /* The efficiency table: one point per distinct measured FLOPs (the mean
     * where several sizes share a FLOP count), sorted by FLOPs descending. */
    wf_eff_point pts[WF_CALIB_MAX_GEMM];
    int cnt[WF_CALIB_MAX_GEMM], np = 0;
    for (int i = 0; i < r->ngemm; i++) {
        int j = 0;
        while (j < np && pts[j].min_flops != r->gemm[i].flops)
            j++;
        if (j == np) {
            pts[np].min_flops = r->gemm[i].flops;
            pts[np].eff = 0;
            cnt[np++] = 0;
        }
        pts[j].eff += r->gemm[i].flops_per_s / r->gemm_peak_flops_per_s;
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
    d->vector_flops[WF_DTYPE_FP32] = r->vector_flops_per_s;
    d->vector_eff = 1.0;
    d->mem_bw_bps = r->triad_bw_bps;
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
        /* The all-reduce fit includes the reduction arithmetic: do not count it twice. */
        c->reduce_bps = 0;
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
    fprintf(f, "\n  %-28s %10.1f GFLOP/s\n", "sgemm peak", r->gemm_peak_flops_per_s / 1e9);
    fprintf(f, "  %-28s %10.1f GFLOP/s\n", "vector (saxpy, in L1)", r->vector_flops_per_s / 1e9);
    fprintf(f, "  %-28s %10.2f GB/s\n", "memory copy (read+write)", r->copy_bw_bps / 1e9);
    fprintf(f, "  %-28s %10.2f GB/s\n", "memory triad (a = b + s c)", r->triad_bw_bps / 1e9);
    fprintf(f, "  %-28s %10.2f GiB\n", "memory per rank", r->mem_bytes / (1024.0 * 1024 * 1024));
    if (r->nranks < 2) {
        fprintf(f, "\n(one process: run under mpiexec -n 2 or more to measure communication)\n");
        return;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && (long)r->ranks_per_node * r->threads > cores)
        fprintf(f, "\nwarning: %d ranks x %d threads on a node of %ld cores: the timings include waiting for a core\n",
                r->ranks_per_node, r->threads, cores);
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
    fprintf(f, "  allreduce:     alpha %.2f us, algorithm bandwidth %.2f GB/s, bus bandwidth %.2f GB/s\n",
            r->allreduce_alpha_s * 1e6, r->allreduce_bw_bps / 1e9, r->allreduce_busbw_bps / 1e9);
}
