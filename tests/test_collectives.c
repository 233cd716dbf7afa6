/* Collectives: every closed form of ALGORITHMS.md §1.2 at p in {2, 4, 8, 64},
 * auto = the cheaper, group placement on the hierarchy, and hierarchical
 * all-reduce beating a flat one across nodes for large vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "weft/cost.h"

#define REL(a, b) (fabs((a) - (b)) <= 1e-12 * fabs(b) + 1e-18)

static const int64_t PS[] = {2, 4, 8, 64};

static void test_flat_closed_forms(void **state)
{
    (void)state;
    const double a = 5e-6, bw = 10e9, beta = 1.0 / bw;
    const double ns[] = {1e3, 1e6, 1e9};
    for (size_t i = 0; i < sizeof PS / sizeof PS[0]; i++) {
        double p = (double)PS[i], lg = log2(p);
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
            double n = ns[j];
            struct {
                wf_coll_kind k;
                double ring, tree;
            } ref[] = {
                {WF_COLL_ALLREDUCE, 2 * (p - 1) * a + 2 * (p - 1) / p * n * beta,
                 2 * lg * a + 2 * (p - 1) / p * n * beta},
                {WF_COLL_REDUCE_SCATTER, (p - 1) * a + (p - 1) / p * n * beta,
                 lg * a + (p - 1) / p * n * beta},
                {WF_COLL_ALLGATHER, (p - 1) * a + (p - 1) / p * n * beta,
                 lg * a + (p - 1) / p * n * beta},
                {WF_COLL_ALLTOALL, (p - 1) * a + (p - 1) / p * n * beta,
                 (p - 1) * a + (p - 1) / p * n * beta},
                {WF_COLL_BROADCAST, n * beta + (p - 1) * a, lg * (a + n * beta)},
                {WF_COLL_SENDRECV, a + n * beta, a + n * beta},
            };
            for (size_t r = 0; r < sizeof ref / sizeof ref[0]; r++) {
                double ring = wf_coll_time_flat(ref[r].k, WF_ALGO_RING, PS[i], n, a, bw);
                double tree = wf_coll_time_flat(ref[r].k, WF_ALGO_TREE, PS[i], n, a, bw);
                double aut = wf_coll_time_flat(ref[r].k, WF_ALGO_AUTO, PS[i], n, a, bw);
                assert_true(REL(ring, ref[r].ring));
                assert_true(REL(tree, ref[r].tree));
                assert_true(REL(aut, fmin(ref[r].ring, ref[r].tree)));
            }
        }
        /* One member costs nothing. */
        assert_true(wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 1, 1e9, a, bw) == 0);
    }
    /* Small vectors: latency-bound, tree wins; large ones: equal bandwidth
     * terms for all-reduce, ring's broadcast wins. */
    assert_true(wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_TREE, 64, 1e3, a, bw) <
                wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_RING, 64, 1e3, a, bw));
    assert_true(wf_coll_time_flat(WF_COLL_BROADCAST, WF_ALGO_RING, 64, 1e9, a, bw) <
                wf_coll_time_flat(WF_COLL_BROADCAST, WF_ALGO_TREE, 64, 1e9, a, bw));
}

static void test_placement(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=8", &c), WF_OK);
    /* tp=8 (stride 1): one node. */
    wf_group g = wf_group_place(&c, 8, 1);
    assert_int_equal(g.span[0], 8);
    assert_int_equal(g.span[1], 1);
    /* tp=4, a dp group of 4 at stride 4: 2 per node, 2 nodes. */
    g = wf_group_place(&c, 4, 4);
    assert_int_equal(g.span[0], 2);
    assert_int_equal(g.span[1], 2);
    assert_int_equal(wf_group_size(&g), 4);
    /* pp=8 at stride tp*dp = 8: one device per node, 8 nodes. */
    g = wf_group_place(&c, 8, 8);
    assert_int_equal(g.span[0], 1);
    assert_int_equal(g.span[1], 8);
    /* dp=16 at stride 2: 4 per node over 4 nodes. */
    g = wf_group_place(&c, 16, 2);
    assert_int_equal(g.span[0], 4);
    assert_int_equal(g.span[1], 4);
    /* dp=64 at stride 1 covers the whole cluster. */
    g = wf_group_place(&c, 64, 1);
    assert_int_equal(g.span[0], 8);
    assert_int_equal(g.span[1], 8);
    /* A 3-member group at stride 3 on nodes of 8 (0, 3, 6): one node. */
    g = wf_group_place(&c, 3, 3);
    assert_int_equal(g.span[0], 3);
    assert_int_equal(g.span[1], 1);
}

static void test_levels(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=8", &c), WF_OK);
    const wf_level *nv = &c.level[0], *ib = &c.level[1];
    double n = 1e9;
    /* Inside a node: the flat closed form at NVSwitch speed x efficiency. */
    wf_group g = wf_group_place(&c, 8, 1);
    double t = wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, n);
    assert_true(REL(t, wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 8, n, nv->latency_s,
                                         nv->bw_bps * nv->eff)));
    /* One device per node: flat on InfiniBand. */
    g = wf_group_place(&c, 8, 8);
    t = wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, n);
    assert_true(REL(t, wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 8, n, ib->latency_s,
                                         ib->bw_bps * ib->eff)));
    /* The whole cluster: hierarchical = RS in node + AR of n/8 across + AG in node,
     * much cheaper than a flat ring at InfiniBand speed. */
    g = wf_group_place(&c, 64, 1);
    double flat = wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 64, n, ib->latency_s,
                                    ib->bw_bps * ib->eff);
    double hier = wf_coll_time_flat(WF_COLL_REDUCE_SCATTER, WF_ALGO_RING, 8, n, nv->latency_s,
                                    nv->bw_bps * nv->eff) +
                  wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 8, n / 8, ib->latency_s,
                                    ib->bw_bps * ib->eff) +
                  wf_coll_time_flat(WF_COLL_ALLGATHER, WF_ALGO_RING, 8, n, nv->latency_s,
                                    nv->bw_bps * nv->eff);
    t = wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, n);
    assert_true(REL(t, hier));
    assert_true(hier < 0.5 * flat);
    /* Reduce-scatter across the cluster: RS in node + RS of n/8 across. */
    double rs = wf_coll_time_flat(WF_COLL_REDUCE_SCATTER, WF_ALGO_RING, 8, n, nv->latency_s,
                                  nv->bw_bps * nv->eff) +
                wf_coll_time_flat(WF_COLL_REDUCE_SCATTER, WF_ALGO_RING, 8, n / 8, ib->latency_s,
                                  ib->bw_bps * ib->eff);
    assert_true(REL(wf_coll_time(&c, WF_COLL_REDUCE_SCATTER, &g, n), rs));
    /* GPU presets run NCCL: reduce-scatter and all-gather as rings only
     * (coll_nccl=1); coll_nccl=0 takes the cheaper of ring and recursive
     * halving, which is never dearer, and cheaper on a small vector (fewer
     * start-ups: log2(8) = 3 against 7). */
    wf_cluster c0;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=8,coll_nccl=0", &c0), WF_OK);
    double rs0 = wf_coll_time_flat(WF_COLL_REDUCE_SCATTER, WF_ALGO_AUTO, 8, 4096, nv->latency_s, nv->bw_bps * nv->eff) +
                 wf_coll_time_flat(WF_COLL_REDUCE_SCATTER, WF_ALGO_AUTO, 8, 512, ib->latency_s, ib->bw_bps * ib->eff);
    assert_true(REL(wf_coll_time(&c0, WF_COLL_REDUCE_SCATTER, &g, 4096), rs0));
    assert_true(wf_coll_time(&c0, WF_COLL_REDUCE_SCATTER, &g, 4096) < wf_coll_time(&c, WF_COLL_REDUCE_SCATTER, &g, 4096));
    assert_true(REL(wf_coll_time(&c0, WF_COLL_ALLREDUCE, &g, n), wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, n)) ||
                wf_coll_time(&c0, WF_COLL_ALLREDUCE, &g, n) < wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, n));
    /* Tiny vectors across nodes: latency-bound, never worse than flat. */
    t = wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, 64);
    assert_true(t <= wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 64, 64, ib->latency_s,
                                       ib->bw_bps * ib->eff) + 1e-15);
    /* A group of one costs nothing. */
    g = wf_group_place(&c, 1, 1);
    assert_true(wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, n) == 0);
}

static void test_shared_nic(void **state)
{
    (void)state;
    /* 10 GbE shared by 4 GPUs: 16 nodes x 4, data parallel over everything.
     * The hierarchical all-reduce moves n/4 per device across at 1.25/4 GB/s,
     * i.e. the node's whole NIC carries about 2n(N-1)/N: n = 100 MB takes ~0.15 s. */
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("v100-10gbe", &c), WF_OK);
    wf_group g = wf_group_place(&c, 64, 1);
    assert_int_equal(g.span[0], 4);
    assert_int_equal(g.span[1], 16);
    double n = 100e6;
    double t = wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, n);
    double across = 2.0 * 15.0 / 16.0 * n / (1.25e9 * c.level[1].eff);
    assert_true(t > across && t < 1.1 * across);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_closed_forms),
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_shared_nic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
