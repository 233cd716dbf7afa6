/* Where the data-parallel engine's timed schedules (horovod, mgwfbp,
 * bytescheduler) price their collectives: the data-parallel group laid on
 * the job's cluster from plan.h's one generator (wf_dist_group_place,
 * src/runtime/dist.c). A pipeline stage's data-parallel ranks are tp apart:
 * with tp = 8 on nodes of 8 devices its group of two crosses the network,
 * where a group of consecutive ranks stays inside one node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "runtime/dist-impl.h"
#include "weft/cluster.h"
#include "weft/cost.h"
#include "weft/plan.h"

static int same_group(wf_group a, wf_group b)
{
    if (a.nlevels != b.nlevels)
        return 0;
    for (int l = 0; l < a.nlevels; l++)
        if (a.span[l] != b.span[l])
            return 0;
    return 1;
}

static wf_dist_config config(int nranks, int64_t job, wf_axis_ranks group)
{
    wf_dist_config c;
    memset(&c, 0, sizeof c);
    c.comm = MPI_COMM_NULL;
    c.nranks = nranks;
    c.cluster = "dgx-a100:nodes=2";
    c.job_ranks = job;
    c.group = group;
    return c;
}

/* tp = 8, dp = 2, pp = 1 on two nodes of 8: the stage's data-parallel group
 * is ranks {r, r + 8}, one per node. */
static void test_pipeline_stage_group(void **state)
{
    (void)state;
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(8, 1, 2, 1, ax);
    assert_int_equal(ax[WF_AXIS_DP].size, 2);
    assert_int_equal(ax[WF_AXIS_DP].stride, 8);
    wf_dist_config c = config(2, 16, ax[WF_AXIS_DP]);
    wf_cluster cl;
    wf_group g;
    assert_int_equal(wf_dist_group_place(&c, &cl, &g), WF_OK);
    assert_int_equal(wf_cluster_devices(&cl), 16);
    wf_group want = wf_group_place(&cl, 2, 8), flat = wf_group_place(&cl, 2, 1);
    assert_true(same_group(g, want));
    assert_false(same_group(g, flat)); /* the old placement (stride 1) */
    /* Its all-reduce is the network's, slower than one inside a node. */
    double t = wf_coll_time(&cl, WF_COLL_ALLREDUCE, &g, 100e6);
    double t_in = wf_coll_time(&cl, WF_COLL_ALLREDUCE, &flat, 100e6);
    assert_true(t > 1.5 * t_in);
    assert_true(t == wf_coll_time(&cl, WF_COLL_ALLREDUCE, &want, 100e6));
}

/* tp = 2, dp = 4, pp = 2 on 16 devices: dp ranks 2 apart, inside a node. */
static void test_pipeline_small_tp(void **state)
{
    (void)state;
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(2, 1, 4, 2, ax);
    wf_dist_config c = config(4, 16, ax[WF_AXIS_DP]);
    wf_cluster cl;
    wf_group g;
    assert_int_equal(wf_dist_group_place(&c, &cl, &g), WF_OK);
    assert_true(same_group(g, wf_group_place(&cl, 4, 2)));
}

/* A replica engine's (group size 0): every rank of the job, consecutive. */
static void test_replica_default(void **state)
{
    (void)state;
    wf_axis_ranks none = {0, 0};
    wf_dist_config c = config(16, 0, none);
    wf_cluster cl;
    wf_group g;
    assert_int_equal(wf_dist_group_place(&c, &cl, &g), WF_OK);
    assert_true(same_group(g, wf_group_place(&cl, 16, 1)));
}

/* A group that does not fit the engine's ranks or the job is the engine's
 * error, named. */
static void test_inconsistent(void **state)
{
    (void)state;
    wf_axis_ranks bad = {4, 8};
    wf_dist_config c = config(2, 16, bad);
    wf_cluster cl;
    wf_group g;
    assert_int_equal(wf_dist_group_place(&c, &cl, &g), WF_INTERNAL);
    assert_non_null(strstr(wf_last_error(), "data-parallel group of 4 ranks 8 apart"));
    wf_axis_ranks wide = {2, 16};
    c = config(2, 16, wide);
    assert_int_equal(wf_dist_group_place(&c, &cl, &g), WF_INTERNAL);
    wf_clear_error();
}

/* A job wider than the local machine shares its devices: the local cluster
 * widened to one device per rank (wf_cluster_of_job), the group on it. */
static void test_local_job(void **state)
{
    (void)state;
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(4, 1, 2, 1, ax);
    wf_dist_config c = config(2, 8, ax[WF_AXIS_DP]);
    c.cluster = NULL;
    wf_cluster cl;
    wf_group g;
    assert_int_equal(wf_dist_group_place(&c, &cl, &g), WF_OK);
    assert_true(wf_cluster_devices(&cl) >= 8);
    assert_true(same_group(g, wf_group_place(&cl, 2, 4)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline_stage_group),
        cmocka_unit_test(test_pipeline_small_tp),
        cmocka_unit_test(test_replica_default),
        cmocka_unit_test(test_inconsistent),
        cmocka_unit_test(test_local_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
