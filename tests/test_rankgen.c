/* Rank groups (plan.h): the one generator in Megatron-Core's order
 * tp-cp-ep-dp-pp against a direct transcription of Megatron-Core's
 * generate_masked_orthogonal_rank_groups (megatron/core/parallel_state.py,
 * NVIDIA/Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553) and the
 * worked example of its docstring; and sched's one list of --comm auto
 * candidates (wf_comm_candidates) against the lists it replaced. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft/plan.h"
#include "weft/sched.h"

/* Megatron-Core's algorithm for a mask of one axis, written from its
 * equations: the group of index gi holds, for each rank_in_group k, the rank
 * sum(decompose(k, masked) x masked_stride) + sum(decompose(gi, unmasked) x
 * unmasked_stride), strides the prefix products of the ordered sizes.
 * Writes groups[gi][k]; returns the group count. */
static int megatron_groups(const int64_t *size, int n, int axis, int64_t *groups, int64_t *gsize)
{
    int64_t stride[8], world = 1;
    for (int a = 0; a < n; a++) {
        stride[a] = world;
        world *= size[a];
    }
    *gsize = size[axis];
    int ngroups = (int)(world / size[axis]);
    for (int gi = 0; gi < ngroups; gi++) {
        int64_t base = 0, rest = gi;
        for (int a = 0; a < n; a++) {
            if (a == axis)
                continue;
            base += (rest % size[a]) * stride[a];
            rest /= size[a];
        }
        for (int64_t k = 0; k < size[axis]; k++)
            groups[gi * size[axis] + k] = base + k * stride[axis];
    }
    return ngroups;
}

/* Every axis of a generator: each rank's group (its first rank, then
 * `size` members `stride` apart) is one of Megatron's groups, in the same
 * order, and the rank's coordinate is its index there. */
static void check_against_megatron(const int64_t size[WF_AXIS_COUNT])
{
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_generator(size, ax);
    int64_t world = 1;
    for (int a = 0; a < WF_AXIS_COUNT; a++)
        world *= size[a];
    int64_t *groups = malloc((size_t)world * sizeof *groups);
    assert_non_null(groups);
    for (int a = 0; a < WF_AXIS_COUNT; a++) {
        int64_t gs;
        int ng = megatron_groups(size, WF_AXIS_COUNT, a, groups, &gs);
        assert_int_equal(ax[a].size, gs);
        for (int gi = 0; gi < ng; gi++)
            for (int64_t k = 0; k < gs; k++) {
                int64_t r = groups[gi * gs + k];
                assert_int_equal(wf_rank_coord(ax[a], r), k);
                assert_int_equal(wf_rank_group_first(ax[a], r), groups[gi * gs]);
                assert_int_equal(wf_rank_group_first(ax[a], r) + k * ax[a].stride, r);
            }
    }
    free(groups);
}

static void test_matches_megatron(void **state)
{
    (void)state;
    static const int64_t cases[][WF_AXIS_COUNT] = {
        {2, 1, 1, 3, 4}, {8, 1, 1, 16, 8}, {2, 2, 1, 2, 2}, {1, 1, 4, 2, 3}, {4, 2, 1, 1, 2}, {1, 1, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_against_megatron(cases[i]);
}

/* The docstring's example: parallel_size [tp, dp, pp] = [2, 3, 4], the dp
 * groups: dp_group[0] = [0, 2, 4], dp_group[1] = [1, 3, 5], dp_group[7] =
 * [19, 21, 23]. */
static void test_docstring_example(void **state)
{
    (void)state;
    wf_axis_ranks ax[WF_AXIS_COUNT];
    wf_rank_axes_dense(2, 1, 3, 4, ax);
    assert_int_equal(ax[WF_AXIS_DP].size, 3);
    assert_int_equal(ax[WF_AXIS_DP].stride, 2);
    assert_int_equal(ax[WF_AXIS_PP].stride, 6);
    assert_int_equal(wf_rank_group_first(ax[WF_AXIS_DP], 4), 0);
    assert_int_equal(wf_rank_group_first(ax[WF_AXIS_DP], 5), 1);
    assert_int_equal(wf_rank_group_first(ax[WF_AXIS_DP], 23), 19);
    assert_int_equal(wf_rank_coord(ax[WF_AXIS_DP], 21), 1);
}

/* Megatron-Core's 'dp-cp' group and the expert layers' folding: with tp 2,
 * cp 2, dp 2 the gradient group of rank 1 is {1, 3, 5, 7} (stride tp); the
 * expert generator with etp 1 and ep 4 over those 8 ranks puts ep on
 * consecutive ranks and edp = 2 at stride 4. */
static void test_join_and_experts(void **state)
{
    (void)state;
    wf_axis_ranks ax[WF_AXIS_COUNT], eax[WF_AXIS_COUNT];
    wf_rank_axes_dense(2, 2, 2, 1, ax);
    wf_axis_ranks dpcp = wf_rank_axes_join(ax, WF_AXIS_CP, WF_AXIS_DP);
    assert_int_equal(dpcp.size, 4);
    assert_int_equal(dpcp.stride, 2);
    assert_int_equal(wf_rank_group_first(dpcp, 7), 1);
    wf_rank_axes_expert(2, 2, 2, 1, 4, 1, eax);
    assert_int_equal(eax[WF_AXIS_TP].size, 1);
    assert_int_equal(eax[WF_AXIS_EP].size, 4);
    assert_int_equal(eax[WF_AXIS_EP].stride, 1);
    assert_int_equal(eax[WF_AXIS_DP].size, 2);
    assert_int_equal(eax[WF_AXIS_DP].stride, 4);
    /* etp 2, ep 2 over tp 2 x dp 4: ep stride etp, edp = 8 / 4 = 2 at stride 4. */
    wf_rank_axes_expert(2, 1, 4, 1, 2, 2, eax);
    assert_int_equal(eax[WF_AXIS_EP].stride, 2);
    assert_int_equal(eax[WF_AXIS_DP].size, 2);
    assert_int_equal(eax[WF_AXIS_DP].stride, 4);
}

/* The full sweep: 53 schedules in the order the simulator played them
 * (wfbp; ddp 1-100 MiB; horovod 16-256 MiB; bytescheduler 1-16 Mi
 * parameters; mgwfbp; dear 2^(k/4) MB for k = 0..32, and DeAR's default
 * 25 MB); the short list: 10. */
static void test_comm_candidates(void **state)
{
    (void)state;
    const double MiB = 1048576.0;
    wf_comm_sched c[WF_COMM_CANDIDATES_MAX];
    int n = wf_comm_candidates(1, 2.0, c, WF_COMM_CANDIDATES_MAX);
    assert_int_equal(n, 53);
    assert_int_equal(c[0].kind, WF_COMM_WFBP);
    assert_int_equal(c[1].kind, WF_COMM_DDP);
    assert_true(c[1].threshold_bytes == 1 * MiB);
    assert_true(c[7].threshold_bytes == 100 * MiB);
    assert_int_equal(c[8].kind, WF_COMM_HOROVOD);
    assert_true(c[12].threshold_bytes == 256 * MiB);
    assert_int_equal(c[13].kind, WF_COMM_BYTESCHEDULER);
    assert_true(c[13].threshold_bytes == 1 * MiB * 2.0);
    assert_int_equal(c[18].kind, WF_COMM_MGWFBP);
    assert_int_equal(c[19].kind, WF_COMM_DEAR);
    assert_true(c[19].threshold_bytes == 1e6);
    assert_true(fabs(c[51].threshold_bytes - 256e6) < 1e-6);
    assert_int_equal(c[52].kind, WF_COMM_DEAR);
    assert_true(c[52].threshold_bytes == 25e6);
    n = wf_comm_candidates(0, 2.0, c, WF_COMM_CANDIDATES_MAX);
    assert_int_equal(n, 10);
    static const wf_comm_kind want[] = {WF_COMM_WFBP, WF_COMM_DDP, WF_COMM_DDP, WF_COMM_DDP, WF_COMM_HOROVOD,
                                        WF_COMM_BYTESCHEDULER, WF_COMM_MGWFBP, WF_COMM_DEAR, WF_COMM_DEAR,
                                        WF_COMM_DEAR};
    static const double thr[] = {0, 1 * 1048576.0, 25 * 1048576.0, 100 * 1048576.0, 0, 0, 0, 5e6, 25e6, 100e6};
    for (int i = 0; i < 10; i++) {
        assert_int_equal(c[i].kind, want[i]);
        assert_true(c[i].threshold_bytes == thr[i]);
    }
    /* cap bounds what is written. */
    assert_int_equal(wf_comm_candidates(1, 4.0, c, 5), 5);
}

/* The inverse of a join: a tp group of 8 read as an outer sub-axis of 4 and
 * an inner one of 2 (an op-level mesh 4x2 of model-parallel axes) is the
 * generator's tp and cp axes of sizes 2 and 4 (the join of which is the
 * group), and joining them back gives the group. */
static void test_axis_split(void **state)
{
    (void)state;
    wf_axis_ranks ax[WF_AXIS_COUNT], sub[2];
    wf_rank_axes_dense(8, 1, 2, 3, ax);
    wf_rank_axis_split(ax[WF_AXIS_TP], 2, sub);
    const int64_t size[WF_AXIS_COUNT] = {2, 4, 1, 2, 3};
    wf_axis_ranks fine[WF_AXIS_COUNT];
    wf_rank_generator(size, fine);
    assert_int_equal(sub[1].size, fine[WF_AXIS_TP].size);
    assert_int_equal(sub[1].stride, fine[WF_AXIS_TP].stride);
    assert_int_equal(sub[0].size, fine[WF_AXIS_CP].size);
    assert_int_equal(sub[0].stride, fine[WF_AXIS_CP].stride);
    wf_axis_ranks j = wf_rank_axes_join(fine, WF_AXIS_TP, WF_AXIS_CP);
    assert_int_equal(j.size, ax[WF_AXIS_TP].size);
    assert_int_equal(j.stride, ax[WF_AXIS_TP].stride);
    /* A split of a strided axis (dp of tp = 4: stride 4) keeps its stride inside. */
    wf_rank_axes_dense(4, 1, 6, 1, ax);
    wf_rank_axis_split(ax[WF_AXIS_DP], 3, sub);
    assert_int_equal(sub[1].size, 3);
    assert_int_equal(sub[1].stride, 4);
    assert_int_equal(sub[0].size, 2);
    assert_int_equal(sub[0].stride, 12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_megatron),
        cmocka_unit_test(test_docstring_example),
        cmocka_unit_test(test_join_and_experts),
        cmocka_unit_test(test_comm_candidates),
        cmocka_unit_test(test_axis_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
