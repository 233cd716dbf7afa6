/* Calibration arithmetic: the alpha-beta least-squares fit against exact
 * lines, and the mapping of a (hand-written) measurement into a cluster:
 * efficiency table (each product's memory traffic taken out of its time),
 * peaks, memory bandwidth, link latency/bandwidth/efficiency, the overlap
 * slowdown, level sizes, and a cluster that passes wf_cluster_check and
 * survives its JSON. The
 * measurements themselves are exercised by tests/cli/calibrate.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "weft/cost.h"
#include "weft/runtime_io.h"

static void assert_rel(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol * fabs(want)))
        fail_msg("got %.17g, want %.17g (tolerance %g)", got, want, tol);
}

static void test_fit_exact(void **state)
{
    (void)state;
    double n[6] = {8, 1024, 65536, 1 << 20, 1 << 24, 3e7}, t[6];
    for (int i = 0; i < 6; i++)
        t[i] = 2e-6 + n[i] / 5e9;
    double a, b;
    assert_int_equal(wf_fit_alpha_beta(n, t, 6, &a, &b), WF_OK);
    assert_rel(a, 2e-6, 1e-9);
    assert_rel(b, 1 / 5e9, 1e-9);

    /* Two points determine the line. */
    double n2[2] = {0, 100}, t2[2] = {1, 3};
    assert_int_equal(wf_fit_alpha_beta(n2, t2, 2, &a, &b), WF_OK);
    assert_rel(a, 1, 1e-12);
    assert_rel(b, 0.02, 1e-12);

    /* A line through a negative intercept: alpha clamps to 0 and beta is the
     * weighted fit through the origin, sum(w n t) / sum(w n^2) with w = 1/t^2,
     * i.e. sum(n/t) / sum(n^2/t^2). */
    double n3[3] = {1, 2, 4}, t3[3] = {1, 3, 7}; /* t = 2n - 1 */
    assert_int_equal(wf_fit_alpha_beta(n3, t3, 3, &a, &b), WF_OK);
    assert_true(a == 0);
    double num = 1.0 / 1 + 2.0 / 3 + 4.0 / 7, den = 1.0 + 4.0 / 9 + 16.0 / 49;
    assert_rel(b, num / den, 1e-12);
}

static void test_fit_refuses(void **state)
{
    (void)state;
    double n[3] = {8, 8, 8}, t[3] = {1, 2, 3}, a, b;
    assert_int_equal(wf_fit_alpha_beta(n, t, 3, &a, &b), WF_INVAL);
    assert_int_equal(wf_fit_alpha_beta(n, t, 1, &a, &b), WF_INVAL);
    double n2[2] = {8, 16}, t2[2] = {1, 0};
    assert_int_equal(wf_fit_alpha_beta(n2, t2, 2, &a, &b), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "point 1"));
}

static wf_calib_result fake_result(int nranks)
{
    wf_calib_result r;
    memset(&r, 0, sizeof r);
    r.nranks = nranks;
    r.nodes = 1;
    r.ranks_per_node = nranks;
    r.threads = 1;
    static const int64_t sz[5][3] = {{32, 32, 32}, {64, 64, 64}, {256, 256, 256}, {64, 1024, 1024}, {1024, 64, 1024}};
    static const double rate[5] = {20e9, 50e9, 90e9, 100e9, 80e9};
    for (int i = 0; i < 5; i++) {
        wf_calib_gemm *g = &r.gemm[r.ngemm++];
        g->m = sz[i][0];
        g->n = sz[i][1];
        g->k = sz[i][2];
        g->flops = 2.0 * g->m * g->n * g->k;
        g->flops_per_s = rate[i];
    }
    r.gemm_peak_flops_per_s = 100e9;
    r.vector_flops_per_s = 30e9;
    r.stream_bw_bps = 40e9;
    r.copy_bw_bps = 20e9;
    r.triad_bw_bps = 15e9;
    r.mem_bytes = 8e9;
    if (nranks > 1) {
        r.p2p_alpha_s = 1e-6;
        r.p2p_bw_bps = 10e9;
        r.allreduce_alpha_s = 3e-6;
        r.allreduce_bw_bps = 4e9;
        r.allreduce_busbw_bps = 4e9 * 2.0 * (nranks - 1) / nranks;
    }
    return r;
}

/* The efficiency table's entry for a product measured at `rate`: its time
 * without its three matrices' traffic at bandwidth bw (at most half of it
 * taken out), as a share of the peak, at most 1 (the closed form of
 * wf_calibrate_to_cluster). */
static double eff_of(double m, double n, double k, double rate, double peak, double bw)
{
    double f = 2 * m * n * k, t = f / rate, tc = t - 4 * (m * k + k * n + m * n) / bw;
    if (tc < 0.5 * t)
        tc = 0.5 * t;
    return f / tc / peak > 1 ? 1 : f / tc / peak;
}

static void test_to_cluster(void **state)
{
    (void)state;
    wf_calib_result r = fake_result(1);
    wf_cluster c, local;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    assert_int_equal(wf_cluster_lookup("local", &local), WF_OK);
    /* The peak is the best measured rate; the bandwidth the optimizer-like
     * stream's (the triad's when the stream was not measured). */
    assert_rel(c.dev.matrix_flops[WF_DTYPE_FP32], 100e9, 1e-15);
    assert_rel(c.dev.vector_flops[WF_DTYPE_FP32], 30e9, 1e-15);
    assert_rel(c.dev.mem_bw_bps, 40e9, 1e-15);
    /* 64x1024x1024 and 1024x64x1024 share a FLOP count: their mean. */
    assert_int_equal(c.dev.neff, 4);
    const double bw = 40e9;
    double want_flops[4] = {2.0 * 64 * 1024 * 1024, 2.0 * 256 * 256 * 256, 2.0 * 64 * 64 * 64, 2.0 * 32 * 32 * 32};
    double want_eff[4] = {
        0.5 * (eff_of(64, 1024, 1024, 100e9, 100e9, bw) + eff_of(1024, 64, 1024, 80e9, 100e9, bw)),
        eff_of(256, 256, 256, 90e9, 100e9, bw), eff_of(64, 64, 64, 50e9, 100e9, bw),
        eff_of(32, 32, 32, 20e9, 100e9, bw)};
    for (int i = 0; i < 4; i++) {
        assert_rel(c.dev.matrix_eff[i].min_flops, want_flops[i], 1e-15);
        assert_rel(c.dev.matrix_eff[i].eff, want_eff[i], 1e-12);
    }
    /* The traffic taken out: 256^3 at 90 GFLOP/s moves 768 KiB (19.7 us at
     * 40 GB/s) in 372.8 us, so its compute rate is 95.0 GFLOP/s. */
    assert_rel(want_eff[1], 0.95019, 1e-4);
    /* Without the stream, the triad's bandwidth. */
    r.stream_bw_bps = 0;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    assert_rel(c.dev.mem_bw_bps, 15e9, 1e-15);
    assert_rel(c.dev.matrix_eff[1].eff, eff_of(256, 256, 256, 90e9, 100e9, 15e9), 1e-12);
    r.stream_bw_bps = 40e9;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    /* One process: links and sizes stay the preset's. */
    assert_int_equal(c.nlevels, local.nlevels);
    assert_int_equal(c.level[0].size, local.level[0].size);
    assert_rel(c.level[0].bw_bps, local.level[0].bw_bps, 1e-15);
    assert_rel(c.reduce_bps, local.reduce_bps, 1e-15);
    assert_int_equal(wf_cluster_check(&c), WF_OK);

    /* Through JSON and back. */
    cJSON *j = wf_cluster_to_json(&c);
    assert_non_null(j);
    wf_cluster back;
    assert_int_equal(wf_cluster_from_json(j, "calibrated", &back), WF_OK);
    cJSON_Delete(j);
    assert_rel(back.dev.matrix_flops[WF_DTYPE_FP32], 100e9, 1e-15);
    assert_int_equal(back.dev.neff, 4);

    /* Four ranks on two cores: each computes on half a core. The rates,
     * timed on the CPU clock, are halved; the bandwidth, timed on the wall
     * clock with every rank running, is kept, and a rank's own while it
     * runs (bw / share) is what the products' traffic is taken out at. */
    r.core_share = 0.5;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    assert_rel(c.dev.matrix_flops[WF_DTYPE_FP32], 50e9, 1e-15);
    assert_rel(c.dev.vector_flops[WF_DTYPE_FP32], 15e9, 1e-15);
    assert_rel(c.dev.mem_bw_bps, 40e9, 1e-15);
    assert_rel(c.dev.matrix_eff[1].eff, eff_of(256, 256, 256, 90e9, 100e9, 80e9), 1e-12);
}

static void test_to_cluster_links(void **state)
{
    (void)state;
    /* Two ranks: bus bandwidth 4 GB/s below the 10 GB/s ping-pong: the level
     * keeps the ping-pong rate, with efficiency 0.4. */
    wf_calib_result r = fake_result(2);
    wf_cluster c;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    assert_int_equal(c.level[0].size, 2);
    assert_int_equal(c.level[c.nlevels - 1].size, 1);
    assert_rel(c.level[0].latency_s, 1e-6, 1e-15);
    assert_rel(c.level[0].bw_bps, 10e9, 1e-15);
    assert_rel(c.level[0].eff, 0.4, 1e-12);
    assert_true(c.reduce_bps == 0);
    assert_rel(c.dev.mem_bytes, 8e9, 1e-15);
    assert_non_null(strstr(c.name, "ranks=2"));
    /* The measured overlap slowdown replaces the preset's; unmeasured (0) keeps it. */
    wf_cluster local;
    assert_int_equal(wf_cluster_lookup("local", &local), WF_OK);
    assert_rel(c.overlap_slowdown, local.overlap_slowdown, 1e-15);
    r.overlap_slowdown = 1.9;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    assert_rel(c.overlap_slowdown, 1.9, 1e-15);

    /* Four ranks on two cores: a small all-reduce between bursts of
     * compute cost 2 ms; the node's latency makes an 8-byte all-reduce over
     * the four cost that (the bandwidth term is nanoseconds). */
    r = fake_result(4);
    r.core_share = 0.5;
    r.shared_sync_s = 2e-3;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    double t8 = wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 4, 8, c.level[0].latency_s,
                                  c.level[0].bw_bps * c.level[0].eff);
    assert_rel(t8, 2e-3, 1e-5);
    /* Below the fitted latency's cost it changes nothing. */
    r.shared_sync_s = 1e-9;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    assert_rel(c.level[0].latency_s, 1e-6, 1e-15);

    /* Four ranks whose all-reduce beats the ping-pong (bus bandwidth
     * 4e9 * 1.5 = 6 GB/s > 5 GB/s): bandwidth = the bus bandwidth, eff 1. */
    r = fake_result(4);
    r.p2p_bw_bps = 5e9;
    assert_int_equal(wf_calibrate_to_cluster(&r, &c), WF_OK);
    assert_int_equal(c.level[0].size, 4);
    assert_rel(c.level[0].bw_bps, 6e9, 1e-12);
    assert_rel(c.level[0].eff, 1.0, 1e-12);
    assert_int_equal(wf_cluster_check(&c), WF_OK);

    /* Nothing measured: refused. */
    wf_calib_result empty;
    memset(&empty, 0, sizeof empty);
    assert_int_equal(wf_calibrate_to_cluster(&empty, &c), WF_INVAL);
}

/* Repeats of a 2-rank measurement whose factors are scaled per repeat:
 * gemm[i] x g[i], memory bandwidth x bw[i], all-reduce times / ar[i]. */
static void fake_repeats(wf_calib_result *rs, int n, const double *g, const double *bw, const double *ar)
{
    for (int i = 0; i < n; i++) {
        rs[i] = fake_result(2);
        for (int j = 0; j < rs[i].ngemm; j++)
            rs[i].gemm[j].flops_per_s *= g[i];
        rs[i].stream_bw_bps *= bw[i];
        rs[i].nmsg = 3;
        const double bytes[3] = {1024, 1 << 20, 16 << 20};
        for (int m = 0; m < 3; m++) {
            rs[i].msg_bytes[m] = bytes[m];
            rs[i].pingpong_s[m] = 1e-6 + bytes[m] / 10e9;
            rs[i].allreduce_s[m] = (3e-6 + bytes[m] / 4e9) / ar[i];
        }
        rs[i].overlap_slowdown = 1.5;
        rs[i].cores = 2;
    }
}

/* The noise verdict on injected series (no timing): a quiet series is
 * combined into its medians and not noisy; one far outlier among five is
 * rejected and the verdict stays quiet; a series spread evenly beyond 10% is
 * noisy and names the factor; with three repeats a value 18% off the median
 * is kept and makes the run noisy; a load average above the cores makes any
 * series noisy. */
static void test_combine_noise(void **state)
{
    (void)state;
    wf_calib_result rs[WF_CALIB_MAX_REPEATS], r;
    const double one[5] = {1, 1, 1, 1, 1};

    const double quiet[5] = {1.00, 1.02, 0.99, 1.01, 0.98};
    fake_repeats(rs, 5, quiet, one, one);
    wf_calibrate_combine(rs, 5, 0.5, &r);
    assert_int_equal(r.repeats, 5);
    assert_int_equal(r.noisy, 0);
    assert_int_equal(r.outliers, 0);
    assert_rel(r.gemm[2].flops_per_s, 90e9 * 1.00, 1e-12); /* median of the five */
    assert_rel(r.gemm_peak_flops_per_s, 100e9 * 1.00, 1e-12);
    assert_rel(r.spread, 0.04, 1e-9);                       /* (1.02 - 0.98) / 1.00 */
    assert_rel(r.load_avg, 0.5, 0);
    assert_rel(r.allreduce_bw_bps, 4e9, 1e-6);

    /* One repeat's all-reduce 3x slower (a peer descheduled): rejected. */
    const double slow[5] = {1, 1.01, 1 / 3.0, 0.99, 1};
    fake_repeats(rs, 5, one, one, slow);
    wf_calibrate_combine(rs, 5, 0.5, &r);
    assert_int_equal(r.noisy, 0);
    assert_int_equal(r.outliers, 3); /* that repeat's three message sizes */
    assert_rel(r.allreduce_bw_bps, 4e9, 0.02);

    /* Bandwidth spread evenly over +-15%: nothing to reject, too noisy. */
    const double wide[5] = {0.85, 0.93, 1.0, 1.07, 1.15};
    fake_repeats(rs, 5, one, wide, one);
    wf_calibrate_combine(rs, 5, 1.0, &r);
    assert_int_equal(r.noisy, 1);
    assert_int_equal(r.noisy_load, 0);
    assert_string_equal(r.spread_factor, "memory bandwidth");
    assert_rel(r.spread, 0.30, 1e-9);
    assert_rel(r.stream_bw_bps, 40e9, 1e-12);

    /* Three repeats (--quick): 18% off the median is within the 2 x 10% rule,
     * kept, and the spread is over 10%; 25% off is rejected. */
    const double q20[3] = {1.0, 1.18, 1.0}, q25[3] = {1.0, 1.25, 1.0};
    fake_repeats(rs, 3, q20, one, one);
    wf_calibrate_combine(rs, 3, 1.0, &r);
    assert_int_equal(r.noisy, 1);
    assert_string_equal(r.spread_factor, "sgemm peak");
    fake_repeats(rs, 3, q25, one, one);
    wf_calibrate_combine(rs, 3, 1.0, &r);
    assert_int_equal(r.noisy, 0);
    assert_int_equal(r.outliers, r.ngemm);
    assert_rel(r.gemm_peak_flops_per_s, 100e9, 1e-12);

    /* Repeats that agree, on a machine whose load average exceeds its 2
     * cores: noisy by the load; at the cores exactly, not. */
    fake_repeats(rs, 5, quiet, one, one);
    wf_calibrate_combine(rs, 5, 2.5, &r);
    assert_int_equal(r.noisy, 1);
    assert_int_equal(r.noisy_load, 1);
    assert_true(r.spread <= WF_CALIB_NOISY);
    wf_calibrate_combine(rs, 5, 2.0, &r);
    assert_int_equal(r.noisy, 0);
    assert_int_equal(r.noisy_load, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_exact),
        cmocka_unit_test(test_fit_refuses),
        cmocka_unit_test(test_to_cluster),
        cmocka_unit_test(test_to_cluster_links),
        cmocka_unit_test(test_combine_noise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
