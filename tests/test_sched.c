/* Scheduling: pipeline orderings (exact sequences, in-flight counts), the
 * gradient communication schedules' grouping (DDP buckets, Horovod ticks,
 * ByteScheduler chunks, MG-WFBP merging, DeAR groups), DeAR's recurrence
 * against a hand-computed example and against the simulator, every schedule
 * with free communication equal to pure compute, and DeAR beating WFBP and
 * DDP when communication dominates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/plan.h"
#include "weft/sched.h"
#include "weft/sim.h"

static const double MiB = 1048576.0;

/* ---- pipeline orderings ----------------------------------------------------------- */

static void expect_ops(const wf_pipe_op *ops, int n, const char *want)
{
    char got[1024] = "";
    for (int i = 0; i < n; i++) {
        char one[32];
        snprintf(one, sizeof one, "%s%c%d.%d", i ? " " : "", ops[i].bwd ? 'B' : 'F', ops[i].mb, ops[i].chunk);
        strcat(got, one);
    }
    assert_string_equal(got, want);
}

static void test_pipe_orders(void **state)
{
    (void)state;
    wf_pipe_op ops[256];
    int n = 0;
    assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, 4, 8, 1, 0, ops, 256, &n), WF_OK);
    assert_int_equal(n, 16);
    expect_ops(ops, n, "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 F6.0 B3.0 F7.0 B4.0 B5.0 B6.0 B7.0");
    assert_int_equal(wf_pipe_peak_inflight(ops, n), 4);
    assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, 4, 8, 1, 3, ops, 256, &n), WF_OK);
    expect_ops(ops, n, "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0 F4.0 B4.0 F5.0 B5.0 F6.0 B6.0 F7.0 B7.0");
    assert_int_equal(wf_pipe_peak_inflight(ops, n), 1);
    assert_int_equal(wf_pipe_order(WF_PIPE_GPIPE, 4, 3, 1, 1, ops, 256, &n), WF_OK);
    expect_ops(ops, n, "F0.0 F1.0 F2.0 B2.0 B1.0 B0.0");
    assert_int_equal(wf_pipe_peak_inflight(ops, n), 3);
    /* Interleaved, p=2, v=2, m=4, stage 0: warm-up (2-0-1)*2 + (2-1)*2 = 4. */
    assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, 2, 4, 2, 0, ops, 256, &n), WF_OK);
    expect_ops(ops, n,
               "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
    /* 1F1B peaks at min(p - stage, m); GPipe at m; every (mb, chunk) once each way. */
    for (int p = 1; p <= 8; p++) {
        for (int m = 1; m <= 12; m++) {
            for (int st = 0; st < p; st++) {
                assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, p, m, 1, st, ops, 256, &n), WF_OK);
                assert_int_equal(wf_pipe_peak_inflight(ops, n), p - st < m ? p - st : m);
                assert_int_equal(wf_pipe_order(WF_PIPE_GPIPE, p, m, 1, st, ops, 256, &n), WF_OK);
                assert_int_equal(wf_pipe_peak_inflight(ops, n), m);
                for (int v = 2; v <= 3 && m % p == 0; v++) {
                    assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, p, m, v, st, ops, 256, &n), WF_OK);
                    int seen[2][12][3];
                    memset(seen, 0, sizeof seen);
                    for (int i = 0; i < n; i++) {
                        assert_true(ops[i].mb >= 0 && ops[i].mb < m && ops[i].chunk >= 0 && ops[i].chunk < v);
                        /* A backward only after its forward. */
                        if (ops[i].bwd)
                            assert_int_equal(seen[0][ops[i].mb][ops[i].chunk], 1);
                        seen[ops[i].bwd][ops[i].mb][ops[i].chunk]++;
                    }
                    for (int b = 0; b < 2; b++)
                        for (int mb = 0; mb < m; mb++)
                            for (int c = 0; c < v; c++)
                                assert_int_equal(seen[b][mb][c], 1);
                }
            }
        }
    }
    assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, 4, 6, 2, 0, ops, 256, &n), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "m=6"));
    assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, 4, 8, 1, 4, ops, 256, &n), WF_INVAL);
    assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, 0, 8, 1, 0, ops, 256, &n), WF_INVAL);
    assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, 4, 200, 1, 0, ops, 256, &n), WF_INVAL);
}

/* ---- collectives for the tests: alpha-beta, or a table --------------------------------- */

typedef struct {
    double alpha_s, beta_s_per_byte;
} ab_ctx;

/* All-reduce a + 2 n b; reduce-scatter and all-gather half each. */
static double ab_coll(void *ctx, wf_coll_kind k, double bytes)
{
    const ab_ctx *c = ctx;
    double ar = c->alpha_s + 2 * bytes * c->beta_s_per_byte;
    return k == WF_COLL_ALLREDUCE ? ar : ar / 2;
}

static double zero_coll(void *ctx, wf_coll_kind k, double bytes)
{
    (void)ctx;
    (void)k;
    (void)bytes;
    return 0;
}

/* ---- grouping ------------------------------------------------------------------------ */

static void test_ddp_buckets(void **state)
{
    (void)state;
    /* Parameter order: five 8 MiB tensors, then three of 0.5 MiB. Reverse order
     * fills the 1 MiB first bucket with {7, 6}, the next 25 MiB bucket with
     * {5, 4, 3, 2, 1} (32.5 MiB once it reaches the cap), the last with {0}. */
    wf_grad g[8];
    for (int i = 0; i < 8; i++) {
        g[i].bytes = i < 5 ? 8 * MiB : 0.5 * MiB;
        g[i].layer = i;
        g[i].ready_s = (8 - i) * 1e-3;
    }
    wf_arena a;
    wf_arena_init(&a, 0);
    wf_comm_schedule sc;
    wf_comm_sched s = {WF_COMM_DDP, 0};
    assert_int_equal(wf_sched_build(&s, g, 8, NULL, &a, &sc), WF_OK);
    assert_int_equal(sc.nops, 3);
    assert_float_equal(sc.threshold_bytes, 25 * MiB, 0);
    int want[3][5] = {{7, 6}, {5, 4, 3, 2, 1}, {0}};
    int nwant[3] = {2, 5, 1};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(sc.ops[k].nparts, nwant[k]);
        assert_int_equal(sc.ops[k].kind, WF_COLL_ALLREDUCE);
        assert_int_equal(sc.ops[k].after, k - 1);
        for (int q = 0; q < nwant[k]; q++)
            assert_int_equal(sc.parts[sc.ops[k].first_part + q].grad, want[k][q]);
    }
    assert_float_equal(sc.ops[0].bytes, 1 * MiB, 0);
    assert_float_equal(sc.ops[1].bytes, 32.5 * MiB, 0);
    assert_float_equal(sc.ops[1].ready_s, 7e-3, 1e-15); /* its last tensor, index 1 */
    /* A bucket ready before the previous one is issued after it. */
    g[0].ready_s = 0.1e-3;
    assert_int_equal(wf_sched_build(&s, g, 8, NULL, &a, &sc), WF_OK);
    assert_float_equal(sc.ops[2].ready_s, 0.1e-3, 1e-15);
    assert_float_equal(sc.ops[2].issue_s, 7e-3, 1e-15);
    /* ddp:10 -> 10 MiB buckets after the 1 MiB one. */
    s.threshold_bytes = 10 * MiB;
    assert_int_equal(wf_sched_build(&s, g, 8, NULL, &a, &sc), WF_OK);
    assert_int_equal(sc.nops, 4); /* {7,6} {5,4,3} {2,1} {0} */
    assert_int_equal(sc.ops[1].nparts, 3);
    wf_arena_free(&a);
}

static void test_horovod_ticks(void **state)
{
    (void)state;
    /* Ready at 0.3, 0.5, 1.2, 2.0, 2.2 ms with a 1 ms cycle: ticks 1, 1, 2, 2, 3.
     * A 3 MiB threshold splits tick 2's 2 + 2 MiB into two messages. */
    double ready_ms[5] = {0.3, 0.5, 1.2, 2.0, 2.2};
    wf_grad g[5];
    for (int i = 0; i < 5; i++) {
        g[4 - i].ready_s = ready_ms[i] * 1e-3;
        g[4 - i].bytes = 2 * MiB;
        g[4 - i].layer = 4 - i;
    }
    wf_arena a;
    wf_arena_init(&a, 0);
    wf_comm_schedule sc;
    wf_comm_sched s = {WF_COMM_HOROVOD, 5 * MiB};
    assert_int_equal(wf_sched_build(&s, g, 5, NULL, &a, &sc), WF_OK);
    assert_int_equal(sc.nops, 3);
    assert_int_equal(sc.ops[0].tick, 1);
    assert_int_equal(sc.ops[0].nparts, 2);
    assert_int_equal(sc.ops[1].tick, 2);
    assert_int_equal(sc.ops[1].nparts, 2);
    assert_int_equal(sc.ops[2].tick, 3);
    assert_float_equal(sc.ops[2].issue_s, 3e-3, 1e-15);
    s.threshold_bytes = 3 * MiB;
    assert_int_equal(wf_sched_build(&s, g, 5, NULL, &a, &sc), WF_OK);
    assert_int_equal(sc.nops, 5);
    assert_int_equal(sc.ops[2].tick, 2);
    assert_int_equal(sc.ops[3].tick, 2);
    s.threshold_bytes = 0; /* default 128 MiB */
    assert_int_equal(wf_sched_build(&s, g, 5, NULL, &a, &sc), WF_OK);
    assert_float_equal(sc.threshold_bytes, 128 * MiB, 0);
    assert_float_equal(sc.cycle_s, 1e-3, 0);
    wf_arena_free(&a);
}

static void test_bytescheduler_chunks(void **state)
{
    (void)state;
    /* 10M fp32 parameters (40 MiB) in 4M-parameter chunks: 16 + 16 + 8 MiB. */
    wf_grad g[2] = {{40 * MiB, 2e-3, 0}, {1 * MiB, 1e-3, 1}};
    wf_arena a;
    wf_arena_init(&a, 0);
    wf_comm_schedule sc;
    wf_comm_sched s = {WF_COMM_BYTESCHEDULER, 0};
    assert_int_equal(wf_sched_build(&s, g, 2, NULL, &a, &sc), WF_OK);
    assert_float_equal(sc.threshold_bytes, 16 * MiB, 0);
    assert_float_equal(sc.credit_bytes, 32 * MiB, 0);
    assert_int_equal(sc.nops, 4);
    /* Backward order: layer 1's tensor first (priority 1), then layer 0's chunks (priority 0). */
    assert_int_equal(sc.ops[0].priority, 1);
    assert_float_equal(sc.ops[1].bytes, 16 * MiB, 0);
    assert_float_equal(sc.parts[sc.ops[2].first_part].offset_bytes, 16 * MiB, 0);
    assert_float_equal(sc.ops[3].bytes, 8 * MiB, 0);
    assert_int_equal(sc.ops[3].priority, 0);
    wf_arena_free(&a);
}

static void test_mgwfbp_merge(void **state)
{
    (void)state;
    /* alpha = 1 ms. Tensors ready 0.2 ms apart merge (waiting costs less than
     * a start-up); a tensor 10 ms later starts its own group. */
    ab_ctx ab = {1e-3, 1e-9};
    wf_sched_env env = {ab_coll, &ab, 0, 0, 0, 0};
    wf_grad g[4] = {{1000, 10.4e-3, 0}, {1000, 0.4e-3, 1}, {1000, 0.2e-3, 2}, {1000, 0.0, 3}};
    wf_arena a;
    wf_arena_init(&a, 0);
    wf_comm_schedule sc;
    wf_comm_sched s = {WF_COMM_MGWFBP, 0};
    assert_int_equal(wf_sched_build(&s, g, 4, &env, &a, &sc), WF_OK);
    assert_int_equal(sc.nops, 2);
    assert_int_equal(sc.ops[0].nparts, 3);
    assert_int_equal(sc.ops[0].min_layer, 1);
    assert_int_equal(sc.ops[1].nparts, 1);
    /* With alpha tiny (and the channel free again before the next tensor)
     * nothing merges: wfbp. */
    env.alpha_s = 1e-9;
    ab.alpha_s = 1e-9;
    assert_int_equal(wf_sched_build(&s, g, 4, &env, &a, &sc), WF_OK);
    assert_int_equal(sc.nops, 4);
    wf_arena_free(&a);
}

static void test_dear_groups(void **state)
{
    (void)state;
    /* 6 layers of 10 MB, layer 2 with two tensors of 10 MB: 25 MB groups in
     * backward order close at a layer boundary once they reach 25 MB:
     * {5,4,3} {2,2'} -> 20 MB, joins layer 1 -> {2,2',1} 30 MB, {0}. */
    wf_grad g[7];
    int layer[7] = {0, 1, 2, 2, 3, 4, 5};
    for (int i = 0; i < 7; i++) {
        g[i].bytes = 10e6;
        g[i].layer = layer[i];
        g[i].ready_s = (6 - layer[i]) * 1e-3;
    }
    wf_arena a;
    wf_arena_init(&a, 0);
    wf_comm_schedule sc;
    wf_comm_sched s = {WF_COMM_DEAR, 0};
    assert_int_equal(wf_sched_build(&s, g, 7, NULL, &a, &sc), WF_OK);
    assert_int_equal(sc.nops, 3);
    assert_int_equal(sc.ops[0].kind, WF_COLL_REDUCE_SCATTER);
    assert_int_equal(sc.ops[0].nparts, 3);
    assert_int_equal(sc.ops[0].min_layer, 3);
    assert_int_equal(sc.ops[1].nparts, 3);
    assert_int_equal(sc.ops[1].min_layer, 1);
    assert_int_equal(sc.ops[1].max_layer, 2);
    assert_int_equal(sc.ops[2].min_layer, 0);
    wf_arena_free(&a);
}

/* dear:0 is DeAR without tensor fusion: every gradient its own reduce-
 * scatter (and all-gather), even two of one layer; :0 is dear's alone
 * (ddp:0, horovod:0 and bytescheduler:0 are refused), as are thresholds under
 * 0.001 MiB. */
static void test_dear_unfused(void **state)
{
    (void)state;
    wf_grad g[7];
    int layer[7] = {0, 1, 2, 2, 3, 4, 5};
    for (int i = 0; i < 7; i++) {
        g[i].bytes = 10e6;
        g[i].layer = layer[i];
        g[i].ready_s = (6 - layer[i]) * 1e-3;
    }
    wf_arena a;
    wf_arena_init(&a, 0);
    wf_comm_schedule sc;
    wf_comm_sched s;
    assert_int_equal(wf_comm_parse("dear:0", &s), WF_OK);
    assert_int_equal(s.kind, WF_COMM_DEAR);
    assert_true(s.threshold_bytes == WF_SCHED_UNFUSED_BYTES);
    assert_int_equal(wf_sched_build(&s, g, 7, NULL, &a, &sc), WF_OK);
    assert_int_equal(sc.nops, 7);
    for (int k = 0; k < 7; k++) {
        assert_int_equal(sc.ops[k].nparts, 1);
        assert_int_equal(sc.ops[k].kind, WF_COLL_REDUCE_SCATTER);
        assert_float_equal(sc.ops[k].bytes, 10e6, 0);
    }
    /* Backward order: layer 5 first, layer 0 last. */
    assert_int_equal(sc.ops[0].min_layer, 5);
    assert_int_equal(sc.ops[6].min_layer, 0);
    assert_int_equal(wf_comm_parse("ddp:0", &s), WF_INVAL);
    assert_int_equal(wf_comm_parse("horovod:0", &s), WF_INVAL);
    assert_int_equal(wf_comm_parse("dear:25", &s), WF_OK);
    assert_float_equal(s.threshold_bytes, 25 * MiB, 0);
    assert_int_not_equal(wf_comm_parse("bytescheduler:0", &s), WF_OK);
    assert_int_not_equal(wf_comm_parse("dear:0.0001", &s), WF_OK);
    assert_int_not_equal(wf_comm_parse("dear:-1", &s), WF_OK);
    wf_arena_free(&a);
}

static void test_build_errors(void **state)
{
    (void)state;
    wf_grad g[1] = {{-5, 0, 0}};
    wf_arena a;
    wf_arena_init(&a, 0);
    wf_comm_schedule sc;
    wf_comm_sched s = {WF_COMM_WFBP, 0};
    assert_int_equal(wf_sched_build(&s, g, 1, NULL, &a, &sc), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "bytes=-5"));
    g[0].bytes = 1;
    s.kind = WF_COMM_AUTO;
    assert_int_equal(wf_sched_build(&s, g, 1, NULL, &a, &sc), WF_INVAL);
    s.kind = WF_COMM_DDP;
    s.threshold_bytes = -1;
    assert_int_equal(wf_sched_build(&s, g, 1, NULL, &a, &sc), WF_INVAL);
    wf_arena_free(&a);
}

/* ---- DeAR's recurrence ---------------------------------------------------------------- */

static void test_dear_recurrence_hand(void **state)
{
    (void)state;
    /* Three groups (forward order). Backward finishes group 2 at 3, group 1 at
     * 6, group 0 at 9. By hand:
     *   rs_end[2] = max(3, 0) + 1 = 4; rs_end[1] = max(6, 4) + 4 = 10;
     *   rs_end[0] = max(9, 10) + 2 = 12; B0 = max(9, 12) = 12;
     *   ag_end[0] = 12 + 3 = 15; f0 = max(12, 15) = 15; ag_end[1] = 15 + 1 = 16;
     *   ff_end[0] = 15 + 1 + 2 = 18; f1 = max(18, 16) = 18; ag_end[2] = 18 + 2 = 20;
     *   ff_end[1] = 18 + 1 + 5 = 24; f2 = max(24, 20) = 24; ff_end[2] = 24 + 1 + 1 = 26. */
    double r[3] = {9, 6, 3}, rs[3] = {2, 4, 1}, ag[3] = {3, 1, 2}, u[3] = {1, 1, 1}, f[3] = {2, 5, 1};
    double rse[3], age[3], ffe[3];
    double end = wf_sched_dear_recurrence(3, r, rs, ag, u, f, 9, rse, age, ffe);
    assert_float_equal(end, 26, 0);
    double want_rs[3] = {12, 10, 4}, want_ag[3] = {15, 16, 20}, want_ff[3] = {18, 24, 26};
    for (int i = 0; i < 3; i++) {
        assert_float_equal(rse[i], want_rs[i], 0);
        assert_float_equal(age[i], want_ag[i], 0);
        assert_float_equal(ffe[i], want_ff[i], 0);
    }
}

/* The same example through the simulator, in milliseconds: three layers, one
 * group each, collective times from a table keyed by bytes. */
static double table_coll(void *ctx, wf_coll_kind k, double bytes)
{
    (void)ctx;
    int i = (int)(bytes / 100) - 1; /* 100, 200, 300 bytes -> groups 0, 1, 2 */
    static const double rs[3] = {2, 4, 1}, ag[3] = {3, 1, 2};
    if (i < 0 || i > 2)
        return 0;
    return (k == WF_COLL_REDUCE_SCATTER ? rs[i] : k == WF_COLL_ALLGATHER ? ag[i] : rs[i] + ag[i]) * 1e-3;
}

static void test_dear_sim_hand(void **state)
{
    (void)state;
    double fwd[3] = {2e-3, 5e-3, 1e-3}, bwd[3] = {3e-3, 3e-3, 3e-3}, opt[3] = {1e-3, 1e-3, 1e-3};
    wf_grad g[3] = {{100, 0, 0}, {200, 0, 1}, {300, 0, 2}};
    wf_dp_model m = {3, fwd, bwd, opt, 3, g, {table_coll, NULL, 0, 0, 0, 0}};
    wf_comm_sched s = {WF_COMM_DEAR, 1};
    wf_dp_result r;
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &r), WF_OK);
    assert_float_equal(r.iteration_s, 26e-3, 1e-12);
    assert_float_equal(r.compute_s, 20e-3, 1e-12);
    assert_float_equal(r.exposed_comm_s, 6e-3, 1e-12);
    assert_int_equal(r.ncollectives, 6);
    assert_float_equal(r.comm_s, 13e-3, 1e-12);
}

/* Random models: the simulated DeAR iteration equals the recurrence fed with
 * the schedule's groups. */
static void test_dear_sim_matches_recurrence(void **state)
{
    (void)state;
    uint64_t rng = 12345;
    for (int rep = 0; rep < 40; rep++) {
        int L = 3 + (int)(rng % 30);
        double fwd[40], bwd[40], opt[40];
        wf_grad g[40];
        for (int l = 0; l < L; l++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            fwd[l] = (double)(1 + (rng >> 33) % 5000) * 1e-6;
            bwd[l] = 2 * fwd[l];
            opt[l] = (double)((rng >> 20) % 300) * 1e-6;
            g[l].bytes = (double)(1 + (rng >> 40) % 20) * 1e6;
            g[l].layer = l;
        }
        ab_ctx ab = {50e-6, 1.0 / 5e9};
        wf_dp_model m = {L, fwd, bwd, opt, L, g, {ab_coll, &ab, 0, 0, 0, 0}};
        wf_comm_sched s = {WF_COMM_DEAR, (double)(1 + rep % 8) * 8e6};
        wf_dp_result r;
        assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &r), WF_OK);

        /* The recurrence from the same groups (built here the same way). */
        wf_grad gr[40];
        double t = 0, ready[40];
        for (int l = L - 1; l >= 0; l--) {
            t += bwd[l];
            ready[l] = t;
        }
        for (int l = 0; l < L; l++) {
            gr[l] = g[l];
            gr[l].ready_s = ready[l];
        }
        wf_arena a;
        wf_arena_init(&a, 0);
        wf_comm_schedule sc;
        assert_int_equal(wf_sched_build(&s, gr, L, &m.env, &a, &sc), WF_OK);
        int G = sc.nops;
        double rr[40], rs[40], ag[40], u[40], f[40];
        for (int gi = 0; gi < G; gi++) {
            const wf_comm_op *op = &sc.ops[G - 1 - gi];
            int lo = gi == 0 ? 0 : op->min_layer;
            int hi = gi + 1 < G ? sc.ops[G - 2 - gi].min_layer : L;
            rr[gi] = op->ready_s;
            rs[gi] = ab_coll(&ab, WF_COLL_REDUCE_SCATTER, op->bytes);
            ag[gi] = ab_coll(&ab, WF_COLL_ALLGATHER, op->bytes);
            u[gi] = f[gi] = 0;
            for (int l = lo; l < hi; l++) {
                u[gi] += opt[l];
                f[gi] += fwd[l];
            }
        }
        double want = wf_sched_dear_recurrence(G, rr, rs, ag, u, f, t, NULL, NULL, NULL);
        /* Each time is rounded to a nanosecond in the simulator. */
        assert_float_equal(r.iteration_s, want, (4.0 * L + 4.0 * G) * 1e-9);
        wf_arena_free(&a);
    }
}

/* ---- data-parallel iterations -------------------------------------------------------- */

static void test_zero_comm_is_compute(void **state)
{
    (void)state;
    double fwd[5] = {1e-3, 2e-3, 3e-3, 1e-3, 0.5e-3}, bwd[5] = {2e-3, 4e-3, 6e-3, 2e-3, 1e-3};
    double opt[5] = {0.1e-3, 0.1e-3, 0.2e-3, 0, 0.1e-3};
    wf_grad g[6] = {{4e6, 0, 0}, {8e6, 0, 1}, {1e5, 0, 1}, {30e6, 0, 2}, {2e6, 0, 3}, {1e6, 0, 4}};
    wf_dp_model m = {5, fwd, bwd, opt, 6, g, {zero_coll, NULL, 1e-6, 0, 0, 0}};
    double compute = 0;
    for (int l = 0; l < 5; l++)
        compute += fwd[l] + bwd[l] + opt[l];
    for (int k = 0; k < WF_COMM_COUNT; k++) {
        wf_comm_sched s = {(wf_comm_kind)k, 0};
        wf_dp_result r;
        assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &r), WF_OK);
        assert_float_equal(r.iteration_s, compute, 1e-12);
        assert_float_equal(r.exposed_comm_s, 0, 1e-12);
    }
}

/* A communication-bound model: 24 layers of 1 ms forward / 2 ms backward with
 * 16 MB of gradients each on a 10 GbE-like alpha-beta link. */
static void comm_bound(double *fwd, double *bwd, double *opt, wf_grad *g, int L)
{
    for (int l = 0; l < L; l++) {
        fwd[l] = 1e-3;
        bwd[l] = 2e-3;
        opt[l] = 0.05e-3;
        g[l].bytes = 16e6;
        g[l].layer = l;
        g[l].ready_s = 0;
    }
}

static void test_dear_beats_wfbp_ddp(void **state)
{
    (void)state;
    enum { L = 24 };
    double fwd[L], bwd[L], opt[L];
    wf_grad g[L];
    comm_bound(fwd, bwd, opt, g, L);
    ab_ctx ab = {100e-6, 1.0 / 1.25e9}; /* all-reduce of 16 MB: about 25.7 ms */
    wf_dp_model m = {L, fwd, bwd, opt, L, g, {ab_coll, &ab, 0, 0, 0, 0}};
    wf_dp_result wfbp, ddp, dear, autos;
    wf_comm_sched s = {WF_COMM_WFBP, 0};
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &wfbp), WF_OK);
    s.kind = WF_COMM_DDP;
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &ddp), WF_OK);
    s.kind = WF_COMM_DEAR;
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &dear), WF_OK);
    s.kind = WF_COMM_AUTO;
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &autos), WF_OK);
    /* WFBP: the backward's collectives run back to back after the first
     * gradient is ready (2 ms): 24 all-reduces, then the step and the forward. */
    double ar = ab_coll(&ab, WF_COLL_ALLREDUCE, 16e6);
    double want_wfbp = 2e-3 + L * ar + L * 0.05e-3 + L * 1e-3;
    assert_float_equal(wfbp.iteration_s, want_wfbp, 1e-7);
    assert_int_equal(wfbp.ncollectives, L);
    assert_true(dear.iteration_s < wfbp.iteration_s);
    assert_true(dear.iteration_s < ddp.iteration_s);
    assert_true(autos.iteration_s <= dear.iteration_s);
    assert_true(autos.candidates > 30);
    printf("comm-bound: wfbp %.2f ms, ddp %.2f ms, dear %.2f ms, auto %s:%.0f %.2f ms\n", wfbp.iteration_s * 1e3,
           ddp.iteration_s * 1e3, dear.iteration_s * 1e3, autos.sched.kind == WF_COMM_DEAR ? "dear" : "other",
           autos.sched.threshold_bytes, autos.iteration_s * 1e3);
}

static void test_bytescheduler_priority_overlaps_forward(void **state)
{
    (void)state;
    /* With priority, layer 0's gradient goes first once ready, so the next
     * forward of the low layers overlaps the high layers' reduction; the
     * iteration is no slower than WFBP's. */
    enum { L = 12 };
    double fwd[L], bwd[L], opt[L];
    wf_grad g[L];
    comm_bound(fwd, bwd, opt, g, L);
    ab_ctx ab = {100e-6, 1.0 / 5e9};
    wf_dp_model m = {L, fwd, bwd, opt, L, g, {ab_coll, &ab, 0, 0, 0, 0}};
    wf_dp_result wfbp, bs;
    wf_comm_sched s = {WF_COMM_WFBP, 0};
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &wfbp), WF_OK);
    s.kind = WF_COMM_BYTESCHEDULER;
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &bs), WF_OK);
    assert_true(bs.iteration_s < wfbp.iteration_s);
    assert_true(bs.ncollectives >= L);
}

static void test_dp_errors(void **state)
{
    (void)state;
    double fwd[2] = {1e-3, 1e-3}, bwd[2] = {1e-3, -1};
    wf_grad g[1] = {{1e6, 0, 0}};
    wf_dp_model m = {2, fwd, bwd, NULL, 1, g, {zero_coll, NULL, 0, 0, 0, 0}};
    wf_comm_sched s = {WF_COMM_WFBP, 0};
    wf_dp_result r;
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &r), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "layer 1"));
    bwd[1] = 1e-3;
    g[0].layer = 5;
    assert_int_equal(wf_sim_dp_iteration(&m, &s, NULL, &r), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "layer=5"));
}

/* The interlaced pipeline's orders (plan.h): every stage's own tasks in
 * 1F1B's order (wf_pipe_order), the segments in the same order on every
 * stage, the embedding's forwards first and backwards last; the player
 * against closed forms: with segments of no time 1F1B's (m + p - 1)(f + b)
 * for one micro-batch and no less for more, with segments alone
 * m (ef + h + eb), the embedding's segments adding m ef + m eb. */
static void test_interlace_orders(void **state)
{
    (void)state;
    static const int P[] = {2, 3, 4, 8}, M[] = {1, 3, 8, 16};
    for (int a = 0; a < 4; a++)
        for (int c = 0; c < 4; c++) {
            int p = P[a], m = M[c], n = 0, segs0 = 0;
            wf_plan_task t[80], seg0[80];
            wf_pipe_op ops[32];
            for (int s = 0; s < p; s++) {
                assert_int_equal(wf_plan_interlace_order(p, m, s, t, 80, &n), WF_OK);
                assert_int_equal(n, 5 * m);
                int no = 0, k = 0, ns = 0;
                assert_int_equal(wf_pipe_order(WF_PIPE_1F1B, p, m, 1, s, ops, 32, &no), WF_OK);
                for (int i = 0; i < n; i++) {
                    if (wf_ptask_all_devices(t[i].kind)) {
                        if (s == 0)
                            seg0[segs0++] = t[i];
                        else {
                            assert_int_equal(t[i].kind, seg0[ns].kind);
                            assert_int_equal(t[i].mb, seg0[ns].mb);
                        }
                        ns++;
                        continue;
                    }
                    assert_int_equal(t[i].kind == WF_PTASK_BWD, ops[k].bwd);
                    assert_int_equal(t[i].mb, ops[k].mb);
                    k++;
                }
                assert_int_equal(k, 2 * m);
                assert_int_equal(ns, 3 * m);
                for (int j = 0; j < m; j++) {
                    assert_int_equal(t[j].kind, WF_PTASK_EMB_FWD);
                    assert_int_equal(t[n - m + j].kind, WF_PTASK_EMB_BWD);
                }
            }
            double f[8], b[8], mk = -1;
            for (int s = 0; s < p; s++)
                f[s] = 1.0, b[s] = 2.0;
            /* A head, even of no time, holds every device at once: it can
             * only delay 1F1B (one micro-batch: nothing to delay). */
            assert_int_equal(wf_plan_interlace_play(p, m, f, b, 0, 0, 0, NULL, &mk), WF_OK);
            assert_true(mk > (m + p - 1) * 3.0 - 1e-9 && (m > 1 || fabs(mk - p * 3.0) < 1e-9));
            double z[8] = {0};
            assert_int_equal(wf_plan_interlace_play(p, m, z, z, 0.5, 0.25, 0.125, NULL, &mk), WF_OK);
            assert_true(fabs(mk - m * 0.875) < 1e-9);
            assert_int_equal(wf_plan_interlace_play(p, m, f, b, 0.5, 0, 0.25, NULL, &mk), WF_OK);
            double plain = -1;
            assert_int_equal(wf_plan_interlace_play(p, m, f, b, 0, 0, 0, NULL, &plain), WF_OK);
            assert_true(fabs(mk - (m * 0.5 + plain + m * 0.25)) < 1e-9);
        }
    int n = 0;
    wf_plan_task t[8];
    assert_int_equal(wf_plan_interlace_order(1, 4, 0, t, 8, &n), WF_INVAL);
    assert_int_equal(wf_plan_interlace_order(2, 4, 0, t, 8, &n), WF_INVAL); /* 20 tasks, cap 8 */
    assert_int_equal(wf_plan_interlace_order(2, 1, 2, t, 8, &n), WF_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipe_orders),
        cmocka_unit_test(test_ddp_buckets),
        cmocka_unit_test(test_horovod_ticks),
        cmocka_unit_test(test_bytescheduler_chunks),
        cmocka_unit_test(test_mgwfbp_merge),
        cmocka_unit_test(test_dear_groups),
        cmocka_unit_test(test_dear_unfused),
        cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_dear_recurrence_hand),
        cmocka_unit_test(test_dear_sim_hand),
        cmocka_unit_test(test_dear_sim_matches_recurrence),
        cmocka_unit_test(test_zero_comm_is_compute),
        cmocka_unit_test(test_dear_beats_wfbp_ddp),
        cmocka_unit_test(test_bytescheduler_priority_overlaps_forward),
        cmocka_unit_test(test_dp_errors),
        cmocka_unit_test(test_interlace_orders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
