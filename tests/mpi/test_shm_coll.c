/* The shared-memory collectives (src/runtime/shm_coll.c) against a naive
 * reference: every rank generates every rank's input, sums it in rank order
 * in fp32 (the order the engine promises) and expects the same bits. Odd
 * sizes, chunk sizes that split them unevenly, several operations queued
 * before any wait, in-place layouts, on groups of 2, 3 and 4 ranks (the
 * world of mpiexec -n 2 or -n 4 and its subgroups). */
#include "harness.h"
#include "runtime/shm_coll-impl.h"

#include <mpi.h>

/* Rank q's input value i of operation `op` (varied exponents, both signs, so
 * the rounding of the sums depends on their order). */
static float value(int op, int q, int64_t i)
{
    uint64_t h = (uint64_t)op * 0x9E3779B97F4A7C15ull ^ (uint64_t)q * 0xBF58476D1CE4E5B9ull ^ (uint64_t)i * 0x94D049BB133111EBull;
    h ^= h >> 31;
    h *= 0xD6E8FEB86659FD39ull;
    h ^= h >> 28;
    float m = (float)(h & 0xFFFFFF) / (float)0x1000000 - 0.5f;
    int e = (int)((h >> 24) % 20) - 10;
    return ldexpf(m, e);
}

static float ref_sum(int op, int P, int64_t i)
{
    float acc = value(op, 0, i) + value(op, 1, i);
    for (int q = 2; q < P; q++)
        acc += value(op, q, i);
    return acc;
}

static int64_t mismatches(const float *got, const float *want, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
    return bad;
}

/* All-reduce (in place and out of place: allreduce_to, its input left as
 * it was), reduce-scatter (out of place and in place) and all-gather (out of
 * place and in place) of n floats on comm, with slots of chunk floats; the
 * first three are queued before any wait. */
static void check_group(MPI_Comm comm, wf_shm_coll *s, int64_t chunk, int64_t n, int tag)
{
    int r, P;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &P);
    float *ar = malloc((size_t)(n + 1) * sizeof *ar);
    float *rs_in = malloc((size_t)(P * n + 1) * sizeof *rs_in);
    float *rs_out = malloc((size_t)(n + 1) * sizeof *rs_out);
    float *rs_ip = malloc((size_t)(P * n + 1) * sizeof *rs_ip);
    float *ag_out = malloc((size_t)(P * n + 1) * sizeof *ag_out);
    float *ag_ip = malloc((size_t)(P * n + 1) * sizeof *ag_ip);
    float *want = malloc((size_t)(P * n + 1) * sizeof *want);
    float *ag_in = malloc((size_t)(n + 1) * sizeof *ag_in);
    float *at_in = malloc((size_t)(n + 1) * sizeof *at_in), *at_out = malloc((size_t)(n + 1) * sizeof *at_out);
    if (!ar || !rs_in || !rs_out || !rs_ip || !ag_out || !ag_ip || !want || !ag_in || !at_in || !at_out) {
        CHECK(0, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        ar[i] = value(tag, r, i);
        at_in[i] = value(tag, r, i);
        at_out[i] = -1.0f;
    }
    for (int64_t i = 0; i < P * n; i++) {
        rs_in[i] = value(tag + 1, r, i);
        rs_ip[i] = rs_in[i];
        ag_ip[i] = -1.0f;
    }
    for (int64_t i = 0; i < n; i++) {
        ag_in[i] = value(tag + 2, r, i);
        ag_ip[(int64_t)r * n + i] = ag_in[i];
    }
    int64_t t0 = wf_shm_coll_allreduce(s, ar, n);
    int64_t t1 = wf_shm_coll_reduce_scatter(s, rs_in, rs_out, n);
    int64_t t2 = wf_shm_coll_allgather(s, ag_in, ag_out, n);
    CHECK(t0 >= 0 && t1 == t0 + 1 && t2 == t1 + 1, "tickets %lld %lld %lld", (long long)t0, (long long)t1,
          (long long)t2);
    wf_shm_coll_progress(s); /* some steps now, the rest in the waits */
    wf_shm_coll_wait(s, t1);
    CHECK(wf_shm_coll_done(s, t0) && wf_shm_coll_done(s, t1), "P=%d: tickets 0 and 1 not done after wait", P);
    int64_t t3 = wf_shm_coll_reduce_scatter(s, rs_ip, rs_ip, n);
    int64_t t4 = wf_shm_coll_allgather(s, ag_ip + (int64_t)r * n, ag_ip, n);
    int64_t t5 = wf_shm_coll_allreduce_to(s, at_in, at_out, n);
    wf_shm_coll_wait(s, -1);
    CHECK(wf_shm_coll_pending(s) == 0 && wf_shm_coll_done(s, t5) && t3 == t2 + 1 && t5 == t4 + 1,
          "P=%d: operations left", P);

    for (int64_t i = 0; i < n; i++)
        want[i] = ref_sum(tag, P, i);
    int64_t bad = mismatches(ar, want, n);
    CHECK(bad == 0, "P=%d n=%lld chunk=%lld: all-reduce differs from the rank-order sum at %lld floats", P,
          (long long)n, (long long)chunk, (long long)bad);
    bad = mismatches(at_out, want, n);
    for (int64_t i = 0; i < n; i++)
        bad += at_in[i] != value(tag, r, i);
    CHECK(bad == 0, "P=%d n=%lld chunk=%lld: allreduce_to differs (or wrote its input) at %lld floats", P,
          (long long)n, (long long)chunk, (long long)bad);
    for (int64_t i = 0; i < n; i++)
        want[i] = ref_sum(tag + 1, P, (int64_t)r * n + i);
    bad = mismatches(rs_out, want, n) + mismatches(rs_ip, want, n);
    CHECK(bad == 0, "P=%d n=%lld chunk=%lld: reduce-scatter differs at %lld floats", P, (long long)n,
          (long long)chunk, (long long)bad);
    for (int q = 0; q < P; q++)
        for (int64_t i = 0; i < n; i++)
            want[(int64_t)q * n + i] = value(tag + 2, q, i);
    bad = mismatches(ag_out, want, P * n) + mismatches(ag_ip, want, P * n);
    CHECK(bad == 0, "P=%d n=%lld chunk=%lld: all-gather differs at %lld floats", P, (long long)n,
          (long long)chunk, (long long)bad);
    /* Every rank holds the same all-reduce bits (the sum was made once). */
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)ar;
    for (int64_t i = 0; i < n * 4; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    uint64_t hmin = 0, hmax = 0;
    MPI_Allreduce(&h, &hmin, 1, MPI_UINT64_T, MPI_MIN, comm);
    MPI_Allreduce(&h, &hmax, 1, MPI_UINT64_T, MPI_MAX, comm);
    CHECK(hmin == hmax, "P=%d: ranks hold different all-reduce bits", P);
out:
    free(ar);
    free(rs_in);
    free(rs_out);
    free(rs_ip);
    free(ag_out);
    free(ag_ip);
    free(want);
    free(ag_in);
    free(at_in);
    free(at_out);
}

/* One engine per slot size, every size through it (the tickets and chunk
 * counts carry over from one size to the next, as over a training run). */
static void check_comm(MPI_Comm comm, int tag)
{
    static const int64_t sizes[] = {0, 1, 7, 1001, 65537, 1000003};
    static const int64_t chunks[] = {64, 1000, 0};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        wf_shm_coll *s = NULL;
        const char *why = NULL;
        wf_status st = wf_shm_coll_create(comm, chunks[c], &s, &why);
        CHECK(st == WF_OK && s, "no shared engine (%s)", why ? why : wf_last_error());
        if (!s)
            continue;
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            if ((chunks[c] == 64 && sizes[k] > 1001) || (chunks[c] == 1000 && sizes[k] > 65537))
                continue; /* thousands of handshakes: slow with more ranks than cores, nothing new */
            check_group(comm, s, chunks[c], sizes[k], tag + 10 * (int)(c * 8 + k));
        }
        wf_shm_coll_free(s);
    }
}

int main(void)
{
    int started = 0;
    if (!harness_start(&started))
        return 1;
    if (g_nranks < 2) {
        fprintf(stderr, "test_shm_coll: needs 2 or more ranks (mpiexec -n 2)\n");
        return 1;
    }
    check_comm(MPI_COMM_WORLD, 0);
    /* A group of 3 (ranks 0-2 of 4) and groups of 2. */
    if (g_nranks >= 4) {
        MPI_Comm three, two;
        MPI_Comm_split(MPI_COMM_WORLD, g_rank < 3 ? 0 : MPI_UNDEFINED, g_rank, &three);
        if (three != MPI_COMM_NULL) {
            check_comm(three, 1000);
            MPI_Comm_free(&three);
        }
        MPI_Comm_split(MPI_COMM_WORLD, g_rank / 2, g_rank, &two);
        check_comm(two, 2000);
        MPI_Comm_free(&two);
    }
    /* One rank: no engine (the caller keeps its own path). */
    MPI_Comm self;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank, 0, &self);
    wf_shm_coll *s1 = NULL;
    const char *why = NULL;
    CHECK(wf_shm_coll_create(self, 0, &s1, &why) == WF_OK && !s1 && why, "one rank: an engine was made");
    MPI_Comm_free(&self);
    return harness_finish(started);
}
