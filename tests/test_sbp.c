/* SBP layouts: meshes on cluster levels, layout strings and local shapes,
 * boxing costs against the closed forms of ALGORITHMS.md §2 (each 1-D
 * conversion, the cheapest order on a 2-D mesh), signature sets and counts
 * per op kind, the gradient duals, and signatures as text (every signature
 * of every op of several zoo graphs prints, parses back and is found again). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft/models.h"
#include "weft/sbp.h"

#define REL(a, b) (fabs((double)(a) - (double)(b)) <= 1e-12 * fmax(fabs((double)(a)), fabs((double)(b))) + 1e-18)

/* A hand mesh with ring collectives (closed forms are ring's). */
static wf_mesh hand_mesh(int naxes, const int64_t *size, const double *alpha, const double *bw)
{
    wf_mesh m;
    memset(&m, 0, sizeof m);
    m.naxes = naxes;
    m.algo = WF_ALGO_RING;
    for (int a = 0; a < WF_SBP_MAX_AXES; a++) {
        m.size[a] = a < naxes ? size[a] : 1;
        m.alpha_s[a] = a < naxes ? alpha[a] : 0;
        m.bw_bps[a] = a < naxes ? bw[a] : 0;
        m.level[a] = -1;
    }
    return m;
}

static wf_sbp L(const char *text, int naxes)
{
    wf_sbp s;
    assert_int_equal(wf_sbp_parse(text, naxes, &s), WF_OK);
    return s;
}

static wf_tensor tensor2(int64_t d0, int64_t d1, wf_dtype dt)
{
    wf_tensor t;
    memset(&t, 0, sizeof t);
    strcpy(t.name, "t");
    t.dtype = dt;
    t.ndim = 2;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.producer = -1;
    return t;
}

/* One price per collective: a boxing step along a mesh axis laid on a
 * cluster costs what the estimate charges for that collective on the axis's
 * group (wf_coll_time: hierarchy, reduction arithmetic), checked against the
 * closed forms for a group inside one node and against wf_coll_time on the
 * group of the same size and stride for groups across nodes. */
static void test_one_price(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("v100-ib100:nodes=16", &c), WF_OK);
    assert_true(c.level[0].size == 4); /* 4 V100s per node */
    wf_mesh m;
    assert_int_equal(wf_mesh_parse("16x4", &c, &m), WF_OK);
    const double n = 64.0 * 1024 * 1024;
    int coll = -2;
    /* Inside a node (axis 1, stride 1): the closed forms on level 0, plus the
     * reduction arithmetic for a reduction. */
    const wf_level *l0 = &c.level[0];
    double ag = wf_coll_time_flat(WF_COLL_ALLGATHER, WF_ALGO_RING, 4, n, l0->latency_s, l0->bw_bps * l0->eff);
    assert_true(REL(wf_sbp_box_axis_time(&m, 1, 0, WF_SBP_B, n, &coll), ag));
    assert_int_equal(coll, WF_COLL_ALLGATHER);
    double ar = wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 4, n, l0->latency_s, l0->bw_bps * l0->eff);
    if (c.reduce_bps > 0)
        ar += 3.0 / 4.0 * n / c.reduce_bps;
    assert_true(REL(wf_sbp_box_axis_time(&m, 1, WF_SBP_P, WF_SBP_B, n, NULL), ar));
    /* Across nodes (axis 0, stride 4): the estimate's price of that group. */
    wf_group g0 = wf_group_place(&c, 16, 4);
    assert_true(wf_sbp_box_axis_time(&m, 0, WF_SBP_P, WF_SBP_B, n, NULL) ==
                wf_coll_time(&c, WF_COLL_ALLREDUCE, &g0, n));
    assert_true(wf_sbp_box_axis_time(&m, 0, WF_SBP_P, 0, n, NULL) ==
                wf_coll_time(&c, WF_COLL_REDUCE_SCATTER, &g0, n));
    /* Mesh 8x8: the inner axis (stride 1) spans two nodes of four. */
    wf_mesh m8;
    assert_int_equal(wf_mesh_parse("8x8", &c, &m8), WF_OK);
    wf_group g8 = wf_group_place(&c, 8, 1);
    assert_true(g8.span[0] == 4 && g8.span[1] == 2);
    assert_true(wf_sbp_box_axis_time(&m8, 1, 0, WF_SBP_B, n, NULL) == wf_coll_time(&c, WF_COLL_ALLGATHER, &g8, n));
    /* One axis over all 64 devices: hierarchical, cheaper than the flat ring
     * on the inter-node level the flat model charged. */
    wf_mesh m1;
    assert_int_equal(wf_mesh_parse("64", &c, &m1), WF_OK);
    wf_group g = wf_group_place(&c, 64, 1);
    double t = wf_sbp_box_axis_time(&m1, 0, WF_SBP_P, WF_SBP_B, n, NULL);
    assert_true(t == wf_coll_time(&c, WF_COLL_ALLREDUCE, &g, n));
    const wf_level *l1 = &c.level[1];
    double flat = wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 64, n, l1->latency_s, l1->bw_bps * l1->eff);
    assert_true(t < flat + (c.reduce_bps > 0 ? 63.0 / 64.0 * n / c.reduce_bps : 0));
    /* A mesh given by hand (no hierarchy): the flat closed forms. */
    wf_mesh h;
    memset(&h, 0, sizeof h);
    h.naxes = 1;
    h.size[0] = 4;
    h.alpha_s[0] = 1e-5;
    h.bw_bps[0] = 1e10;
    h.algo = WF_ALGO_AUTO;
    assert_true(wf_sbp_box_axis_time(&h, 0, WF_SBP_P, WF_SBP_B, n, NULL) ==
                wf_coll_time_flat(WF_COLL_ALLREDUCE, WF_ALGO_AUTO, 4, n, 1e-5, 1e10));
}

static void test_mesh_levels(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=2", &c), WF_OK);
    wf_mesh m;
    assert_int_equal(wf_mesh_parse("2x8", &c, &m), WF_OK);
    assert_int_equal(m.naxes, 2);
    assert_int_equal(m.level[0], 1); /* across nodes */
    assert_int_equal(m.level[1], 0); /* inside a node */
    assert_true(REL(m.alpha_s[0], c.level[1].latency_s));
    assert_true(REL(m.bw_bps[0], c.level[1].bw_bps * c.level[1].eff));
    assert_true(REL(m.bw_bps[1], c.level[0].bw_bps * c.level[0].eff));
    assert_int_equal(wf_mesh_devices(&m), 16);
    char buf[32];
    assert_string_equal(wf_mesh_str(&m, buf, sizeof buf), "2x8");

    assert_int_equal(wf_mesh_parse("16", &c, &m), WF_OK); /* one axis spanning both nodes */
    assert_int_equal(m.level[0], 1);
    assert_int_equal(wf_mesh_parse("4x2", &c, &m), WF_OK); /* 8 devices: one node */
    assert_int_equal(m.level[0], 0);
    assert_int_equal(m.level[1], 0);
    assert_int_equal(wf_mesh_parse("2x2x4", &c, &m), WF_OK);
    assert_int_equal(m.level[0], 1);
    assert_int_equal(m.level[1], 0);
    assert_int_equal(wf_mesh_default(&c, 16, &m), WF_OK);
    assert_int_equal(m.naxes, 2);
    assert_int_equal(m.size[0], 2);
    assert_int_equal(m.size[1], 8);
    assert_int_equal(wf_mesh_default(&c, 4, &m), WF_OK);
    assert_int_equal(m.naxes, 1);

    assert_int_equal(wf_mesh_parse("4x8", &c, &m), WF_INVAL); /* 32 > 16 devices */
    assert_int_equal(wf_mesh_parse("8x", &c, &m), WF_INVAL);
    assert_int_equal(wf_mesh_parse("0", &c, &m), WF_INVAL);
    assert_int_equal(wf_mesh_parse("2y8", &c, &m), WF_INVAL);
    assert_int_equal(wf_mesh_parse("", &c, &m), WF_INVAL);
    assert_int_equal(wf_mesh_parse("2x2x2x2x1", &c, &m), WF_INVAL);
    assert_int_equal(wf_mesh_default(&c, 12, &m), WF_INVAL);
}

static void test_layouts(void **state)
{
    (void)state;
    int64_t sz[2] = {2, 4};
    double al[2] = {1e-5, 1e-6}, bw[2] = {1e10, 1e11};
    wf_mesh m = hand_mesh(2, sz, al, bw);
    wf_sbp s = L("[S(0),P]", 2), t;
    char buf[64];
    assert_string_equal(wf_sbp_str(&s, 2, buf, sizeof buf), "[S(0),P]");
    assert_int_equal(wf_sbp_parse("S1,B", 2, &t), WF_OK);
    assert_string_equal(wf_sbp_str(&t, 2, buf, sizeof buf), "[S(1),B]");
    assert_int_equal(wf_sbp_parse("[S(0)]", 2, &t), WF_FORMAT);
    assert_int_equal(wf_sbp_parse("[Q,B]", 2, &t), WF_FORMAT);
    assert_int_equal(wf_sbp_parse("[S(x),B]", 2, &t), WF_FORMAT);

    wf_tensor x = tensor2(16, 12, WF_DTYPE_FP16); /* 384 bytes */
    int64_t loc[WF_MAX_DIMS];
    wf_sbp both = L("[S(0),S(0)]", 2);
    assert_int_equal(wf_sbp_local_shape(&m, &x, &both, loc), WF_OK);
    assert_int_equal(loc[0], 2); /* 16 / (2*4) */
    assert_int_equal(loc[1], 12);
    assert_true(REL(wf_sbp_local_bytes(&m, &x, &both), 48));
    assert_int_equal(wf_sbp_split_factor(&m, &both), 8);
    wf_sbp sp = L("[S(1),P]", 2);
    assert_true(REL(wf_sbp_local_bytes(&m, &x, &sp), 192)); /* P does not divide */
    wf_sbp bad = L("[B,S(1)]", 2);
    x.shape[1] = 6; /* 6 % 4 != 0 */
    assert_int_equal(wf_sbp_local_shape(&m, &x, &bad, loc), WF_INVAL);
    assert_false(wf_sbp_valid(&m, x.ndim, x.shape, &bad));
    wf_sbp rank = L("[S(2),B]", 2);
    assert_false(wf_sbp_valid(&m, x.ndim, x.shape, &rank));
}

/* Every row of the 1-D table against its closed form (ring), both through
 * the cached time and the path's steps. */
static void test_boxing_1d_table(void **state)
{
    (void)state;
    int64_t p = 8;
    double a = 1e-5, bwv = 1e10;
    wf_mesh m = hand_mesh(1, &p, &a, &bwv);
    wf_tensor x = tensor2(64, 128, WF_DTYPE_FP16);
    double T = 64.0 * 128 * 2, beta = 1.0 / bwv, f = (double)(p - 1) / (double)p;
    struct {
        const char *from, *to;
        int coll;
        double expect;
    } rows[] = {
        {"S(0)", "B", WF_COLL_ALLGATHER, (p - 1) * a + f * T * beta},
        {"S(1)", "B", WF_COLL_ALLGATHER, (p - 1) * a + f * T * beta},
        {"P", "B", WF_COLL_ALLREDUCE, 2 * (p - 1) * a + 2 * f * T * beta},
        {"P", "S(0)", WF_COLL_REDUCE_SCATTER, (p - 1) * a + f * T * beta},
        {"P", "S(1)", WF_COLL_REDUCE_SCATTER, (p - 1) * a + f * T * beta},
        {"S(0)", "S(1)", WF_COLL_ALLTOALL, (p - 1) * a + f * T / (double)p * beta},
        {"S(1)", "S(0)", WF_COLL_ALLTOALL, (p - 1) * a + f * T / (double)p * beta},
        {"B", "S(0)", -1, 0},
        {"B", "P", -1, 0},
        {"S(0)", "P", -1, 0},
        {"B", "B", -1, 0},
        {"P", "P", -1, 0},
        {"S(1)", "S(1)", -1, 0},
    };
    wf_sbp_cache *cache;
    assert_int_equal(wf_sbp_cache_create(&m, &cache), WF_OK);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        wf_sbp s = L(rows[i].from, 1), t = L(rows[i].to, 1);
        double got = wf_sbp_boxing_time(cache, &x, &s, &t);
        assert_true(REL(got, rows[i].expect));
        assert_true(REL(wf_sbp_boxing_time(cache, &x, &s, &t), rows[i].expect)); /* cached */
        wf_sbp_box_step st[4];
        double tp;
        int n = wf_sbp_boxing_path(&m, x.ndim, x.shape, 2, &s, &t, st, 4, &tp);
        assert_true(REL(tp, rows[i].expect));
        if (rows[i].coll >= 0) {
            assert_int_equal(n, 1);
            assert_int_equal(st[0].coll, rows[i].coll);
            assert_int_equal(st[0].axis, 0);
            assert_true(REL(st[0].bytes, rows[i].coll == WF_COLL_ALLTOALL ? T / p : T));
        } else if (!wf_sbp_equal(&s, &t, 1)) {
            assert_int_equal(n, 1);
            assert_int_equal(st[0].coll, -1);
        } else {
            assert_int_equal(n, 0);
        }
        int coll;
        double one = wf_sbp_box_axis_time(&m, 0, s.ax[0], t.ax[0], T, &coll);
        assert_true(REL(one, rows[i].expect));
        assert_int_equal(coll, rows[i].coll);
    }
    int64_t look, miss;
    wf_sbp_cache_stats(cache, &look, &miss);
    assert_true(look >= 26);
    assert_true(miss <= 10); /* each distinct pair computed once */
    /* An invalid layout is an error, not a cost. */
    wf_tensor odd = tensor2(6, 128, WF_DTYPE_FP16);
    wf_sbp s0 = L("S(0)", 1), b = L("B", 1);
    assert_true(wf_sbp_boxing_time(cache, &odd, &s0, &b) < 0);
    wf_sbp_cache_free(cache);
}

static double ring(wf_coll_kind k, int64_t p, double n, double a, double bw)
{
    double f = (double)(p - 1) / (double)p;
    if (k == WF_COLL_ALLREDUCE)
        return 2 * (p - 1) * a + 2 * f * n / bw;
    return (p - 1) * a + f * n / bw;
}

/* On a 2-D mesh the order matters; the path takes the cheaper one. */
static void test_boxing_2d_order(void **state)
{
    (void)state;
    int64_t sz[2] = {2, 4};
    double al[2] = {2e-5, 1e-6}, bw[2] = {1e9, 1e11};
    wf_mesh m = hand_mesh(2, sz, al, bw);
    wf_tensor x = tensor2(64, 256, WF_DTYPE_FP32);
    double T = 64.0 * 256 * 4;
    wf_sbp_box_step st[8];
    double t;

    /* [P, S(0)] -> [B, B]: all-reduce the quarter on the slow axis first, then
     * all-gather on the fast one; the other order all-reduces the whole tensor. */
    wf_sbp from = L("[P,S(0)]", 2), to = L("[B,B]", 2);
    double a_first = ring(WF_COLL_ALLREDUCE, 2, T / 4, al[0], bw[0]) +
                     ring(WF_COLL_ALLGATHER, 4, T, al[1], bw[1]);
    double b_first = ring(WF_COLL_ALLGATHER, 4, T, al[1], bw[1]) +
                     ring(WF_COLL_ALLREDUCE, 2, T, al[0], bw[0]);
    assert_true(a_first < b_first);
    int n = wf_sbp_boxing_path(&m, 2, x.shape, 4, &from, &to, st, 8, &t);
    assert_int_equal(n, 2);
    assert_true(REL(t, a_first));
    assert_int_equal(st[0].axis, 0);
    assert_int_equal(st[0].coll, WF_COLL_ALLREDUCE);
    assert_true(REL(st[0].bytes, T / 4));
    assert_int_equal(st[1].axis, 1);
    assert_int_equal(st[1].coll, WF_COLL_ALLGATHER);
    assert_true(wf_sbp_equal(&st[1].to, &to, 2));

    /* [B, B] -> anything split is a local slice. */
    wf_sbp bb = L("[B,B]", 2), ss = L("[S(0),S(1)]", 2);
    assert_int_equal(wf_sbp_boxing_path(&m, 2, x.shape, 4, &bb, &ss, st, 8, &t), 2);
    assert_true(t == 0);

    /* [S(0), B] -> [B, S(0)]: a dim split on both axes is split outer first,
     * so slicing the fast axis (to [S(0),S(0)]) and gathering the slow one
     * would leave each rank blocks c0 x 4 + c1, not [B,S(0)]'s block c1:
     * the slow axis is gathered while the fast one is whole, then sliced. */
    from = L("[S(0),B]", 2);
    to = L("[B,S(0)]", 2);
    n = wf_sbp_boxing_path(&m, 2, x.shape, 4, &from, &to, st, 8, &t);
    assert_true(REL(t, ring(WF_COLL_ALLGATHER, 2, T, al[0], bw[0])));
    assert_int_equal(n, 2);
    assert_int_equal(st[0].coll, WF_COLL_ALLGATHER);
    assert_int_equal(st[0].axis, 0);
    assert_int_equal(st[1].coll, -1);
    assert_int_equal(st[1].axis, 1);

    /* Both axes partial -> both split along different dims: reduce-scatter each. */
    from = L("[P,P]", 2);
    to = L("[S(0),S(1)]", 2);
    n = wf_sbp_boxing_path(&m, 2, x.shape, 4, &from, &to, st, 8, &t);
    double rs = fmin(ring(WF_COLL_REDUCE_SCATTER, 2, T, al[0], bw[0]) +
                         ring(WF_COLL_REDUCE_SCATTER, 4, T / 2, al[1], bw[1]),
                     ring(WF_COLL_REDUCE_SCATTER, 4, T, al[1], bw[1]) +
                         ring(WF_COLL_REDUCE_SCATTER, 2, T / 4, al[0], bw[0]));
    assert_true(REL(t, rs));

    /* Every pair of valid layouts has a path, even where the direct moves
     * would split a dim more than it divides (112 splits 8 ways, not 64):
     * [S(2),S(3)] -> [S(3),S(2)] goes through B. */
    {
        int64_t s88[2] = {8, 8};
        double a88[2] = {1e-5, 1e-6}, b88[2] = {1e10, 1e11};
        wf_mesh m88 = hand_mesh(2, s88, a88, b88);
        int64_t shape[4] = {64, 64, 112, 112};
        int8_t vals[6] = {WF_SBP_B, WF_SBP_P, 0, 1, 2, 3};
        int pairs = 0;
        for (int i = 0; i < 36; i++)
            for (int j = 0; j < 36; j++) {
                wf_sbp f = wf_sbp_broadcast(), g = wf_sbp_broadcast();
                f.ax[0] = vals[i / 6];
                f.ax[1] = vals[i % 6];
                g.ax[0] = vals[j / 6];
                g.ax[1] = vals[j % 6];
                if (!wf_sbp_valid(&m88, 4, shape, &f) || !wf_sbp_valid(&m88, 4, shape, &g))
                    continue;
                double tt;
                assert_true(wf_sbp_boxing_path(&m88, 4, shape, 2, &f, &g, NULL, 0, &tt) >= 0);
                assert_true(tt >= 0);
                pairs++;
            }
        assert_true(pairs > 600);
        wf_sbp f = L("[S(2),S(3)]", 2), g = L("[S(3),S(2)]", 2);
        assert_int_equal(wf_sbp_boxing_path(&m88, 4, shape, 2, &f, &g, st, 8, &t), 3);
    }

    /* The cache agrees with the path. */
    wf_sbp_cache *cache;
    assert_int_equal(wf_sbp_cache_create(&m, &cache), WF_OK);
    assert_true(REL(wf_sbp_boxing_time(cache, &x, &from, &to), rs));
    wf_sbp_cache_free(cache);
}

/* ---- signatures ------------------------------------------------------------------- */

static int count_sigs(const wf_graph *g, int op, const wf_mesh *m) { return wf_sbp_op_sigs(g, op, m, NULL, 0); }

static void test_matmul_signature_counts(void **state)
{
    (void)state;
    int64_t p4 = 4, sz22[2] = {2, 2};
    double a = 1e-6, bw = 1e10, a2[2] = {1e-6, 1e-6}, bw2[2] = {1e10, 1e10};
    wf_mesh m1 = hand_mesh(1, &p4, &a, &bw), m2 = hand_mesh(2, sz22, a2, bw2);
    wf_graph g;
    wf_graph_init(&g, "mm");
    int64_t xs[2] = {8, 16}, ws[2] = {16, 32};
    int x = wf_graph_add_tensor(&g, "x", WF_DTYPE_FP16, WF_ROLE_INPUT, 2, xs);
    int y = wf_graph_add_tensor(&g, "y", WF_DTYPE_FP16, WF_ROLE_INPUT, 2, ws);
    int w = wf_graph_add_tensor(&g, "w", WF_DTYPE_FP16, WF_ROLE_PARAM, 2, ws);
    int in_act[2] = {x, y}, in_par[2] = {x, w};
    int op_act = wf_graph_add_op(&g, WF_OP_MATMUL, "act", in_act, 2, NULL);
    int op_par = wf_graph_add_op(&g, WF_OP_MATMUL, "par", in_par, 2, NULL);
    assert_int_equal(g.status, WF_OK);
    /* Two activations: all six of ALGORITHMS.md §2. A weight is never P. */
    assert_int_equal(count_sigs(&g, op_act, &m1), 6);
    assert_int_equal(count_sigs(&g, op_par, &m1), 5);
    assert_int_equal(count_sigs(&g, op_act, &m2), 36);
    assert_int_equal(count_sigs(&g, op_par, &m2), 25);
    wf_sbp_sig s[6];
    assert_int_equal(wf_sbp_op_sigs(&g, op_act, &m1, s, 6), 6);
    const char *want[6][3] = {{"S(0)", "B", "S(0)"}, {"B", "S(1)", "S(1)"}, {"S(1)", "S(0)", "P"},
                              {"P", "B", "P"},       {"B", "P", "P"},       {"B", "B", "B"}};
    char b0[32], b1[32], b2[32];
    for (int i = 0; i < 6; i++) {
        wf_sbp_str(&s[i].in[0], 1, b0, 32);
        wf_sbp_str(&s[i].in[1], 1, b1, 32);
        wf_sbp_str(&s[i].out[0], 1, b2, 32);
        char expect[32];
        snprintf(expect, sizeof expect, "[%s]", want[i][0]);
        assert_string_equal(b0, expect);
        snprintf(expect, sizeof expect, "[%s]", want[i][1]);
        assert_string_equal(b1, expect);
        snprintf(expect, sizeof expect, "[%s]", want[i][2]);
        assert_string_equal(b2, expect);
        /* work split: 4 when any operand is S, else replicated */
        assert_int_equal(s[i].split, i < 3 ? 4 : 1);
    }
    /* Divisibility: M = 2 rows cannot split 4 ways. */
    wf_graph h;
    wf_graph_init(&h, "small");
    int64_t xs2[2] = {2, 16};
    int x2 = wf_graph_add_tensor(&h, "x", WF_DTYPE_FP16, WF_ROLE_INPUT, 2, xs2);
    int y2 = wf_graph_add_tensor(&h, "y", WF_DTYPE_FP16, WF_ROLE_INPUT, 2, ws);
    int in2[2] = {x2, y2};
    int op2 = wf_graph_add_op(&h, WF_OP_MATMUL, "mm", in2, 2, NULL);
    assert_int_equal(count_sigs(&h, op2, &m1), 5);
    /* transposed B: [N,K] */
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.trans_b = 1;
    int64_t wt[2] = {32, 16};
    int y3 = wf_graph_add_tensor(&h, "yt", WF_DTYPE_FP16, WF_ROLE_INPUT, 2, wt);
    int in3[2] = {x2, y3};
    int op3 = wf_graph_add_op(&h, WF_OP_MATMUL, "mmt", in3, 2, &at);
    assert_int_equal(wf_sbp_op_sigs(&h, op3, &m1, s, 6), 5);
    assert_int_equal(s[0].in[1].ax[0], 0); /* (B, S(N) -> S(1)): N is dim 0 of B^T */
    assert_int_equal(s[0].out[0].ax[0], 1);
    assert_int_equal(s[1].in[0].ax[0], 1); /* K split: dim 1 of A, dim 1 of B^T */
    assert_int_equal(s[1].in[1].ax[0], 1);
    wf_graph_free(&h);
    wf_graph_free(&g);
}

static void test_op_constraints(void **state)
{
    (void)state;
    int64_t p4 = 4;
    double a = 1e-6, bw = 1e10;
    wf_mesh m = hand_mesh(1, &p4, &a, &bw);
    wf_graph g;
    wf_graph_init(&g, "attn");
    int64_t qs[3] = {8, 16, 24};
    int q = wf_graph_add_tensor(&g, "q", WF_DTYPE_FP16, WF_ROLE_INPUT, 3, qs);
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.heads = 6; /* 24 splits 4 ways but 6 heads do not */
    int in[3] = {q, q, q};
    int op6 = wf_graph_add_op(&g, WF_OP_ATTENTION, "a6", in, 3, &at);
    at.heads = 4;
    int op4 = wf_graph_add_op(&g, WF_OP_ATTENTION, "a4", in, 3, &at);
    assert_int_equal(g.status, WF_OK);
    /* batch, query rows, [heads], all-B */
    assert_int_equal(count_sigs(&g, op6, &m), 3);
    assert_int_equal(count_sigs(&g, op4, &m), 4);
    /* layernorm / softmax split only the non-normalized dims */
    int64_t hs[1] = {24};
    int gam = wf_graph_add_tensor(&g, "gamma", WF_DTYPE_FP16, WF_ROLE_PARAM, 1, hs);
    int bet = wf_graph_add_tensor(&g, "beta", WF_DTYPE_FP16, WF_ROLE_PARAM, 1, hs);
    int lin[3] = {q, gam, bet};
    int ln = wf_graph_add_op(&g, WF_OP_LAYERNORM, "ln", lin, 3, NULL);
    int sm = wf_graph_add_op(&g, WF_OP_SOFTMAX, "sm", &q, 1, NULL);
    assert_int_equal(g.status, WF_OK);
    wf_sbp_sig s[8];
    assert_int_equal(wf_sbp_op_sigs(&g, ln, &m, s, 8), 3);
    for (int i = 0; i < 3; i++) {
        assert_true(s[i].in[0].ax[0] != 2);
        assert_int_equal(s[i].in[1].ax[0], WF_SBP_B);
    }
    assert_int_equal(count_sigs(&g, sm, &m), 3);
    wf_graph_free(&g);
}

/* Every op of every zoo model (and a hand graph with the kinds the zoo does
 * not use) has a signature set: valid, without repeats, data-parallel first
 * where the batch splits, all-B last. */
static void check_graph_sigs(const wf_graph *g, const wf_mesh *m, int *seen)
{
    for (int op = 0; op < g->nfwd; op++) {
        const wf_op *o = &g->ops[op];
        int n = wf_sbp_op_sigs(g, op, m, NULL, 0);
        assert_true(n >= 1);
        wf_sbp_sig *s = test_calloc((size_t)n, sizeof *s);
        assert_int_equal(wf_sbp_op_sigs(g, op, m, s, n), n);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < o->nin; j++) {
                const wf_tensor *t = &g->tensors[o->in[j]];
                assert_true(wf_sbp_valid(m, t->ndim, t->shape, &s[i].in[j]));
                if (t->role == WF_ROLE_PARAM && s[i].in[j].ax[0] == WF_SBP_P)
                    assert_true(o->kind == WF_OP_LINEAR || o->kind == WF_OP_CONV2D ||
                                o->kind == WF_OP_ADD || o->kind == WF_OP_BIAS_ADD);
            }
            for (int j = 0; j < o->nout; j++) {
                const wf_tensor *t = &g->tensors[o->out[j]];
                assert_true(wf_sbp_valid(m, t->ndim, t->shape, &s[i].out[j]));
            }
            for (int k = 0; k < i; k++) {
                int same = 1;
                for (int j = 0; j < o->nin; j++)
                    same &= wf_sbp_equal(&s[i].in[j], &s[k].in[j], m->naxes);
                for (int j = 0; j < o->nout; j++)
                    same &= wf_sbp_equal(&s[i].out[j], &s[k].out[j], m->naxes);
                assert_false(same);
            }
        }
        for (int j = 0; j < o->nin; j++)
            assert_int_equal(s[n - 1].in[j].ax[0], WF_SBP_B);
        for (int j = 0; j < o->nout; j++)
            assert_int_equal(s[n - 1].out[j].ax[0], WF_SBP_B);
        assert_int_equal(s[n - 1].split, 1);
        seen[o->kind] = 1;
        test_free(s);
    }
}

static void test_every_op_kind(void **state)
{
    (void)state;
    int64_t p2 = 2;
    double a = 1e-6, bw = 1e10;
    wf_mesh m = hand_mesh(1, &p2, &a, &bw);
    int seen[WF_OP_COUNT] = {0};
    const char *models[] = {"gpt-tiny", "bert-tiny", "llama2-7b:layers=1,hidden=64,heads=4,kv_heads=2,ffn=128,seq=16,vocab=64",
                            "resnet18:image=32", "vgg:depth=11,image=32", "cnn-tiny", "mlp-tiny"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        wf_model_config mc;
        wf_graph g;
        assert_int_equal(wf_model_lookup(models[i], &mc), WF_OK);
        assert_int_equal(wf_model_build(&mc, 4, &g), WF_OK);
        check_graph_sigs(&g, &m, seen);
        wf_graph_free(&g);
    }
    /* The kinds no zoo model uses. */
    wf_graph g;
    wf_graph_init(&g, "rest");
    int64_t xs[3] = {4, 6, 8}, ys[3] = {4, 8, 6};
    int x = wf_graph_add_tensor(&g, "x", WF_DTYPE_FP32, WF_ROLE_INPUT, 3, xs);
    int y = wf_graph_add_tensor(&g, "y", WF_DTYPE_FP32, WF_ROLE_PARAM, 3, ys);
    int in[2] = {x, y};
    int z = wf_graph_op1(&g, WF_OP_BATCH_MATMUL, "bmm", in, 2, NULL); /* [4,6,6] */
    z = wf_graph_op1(&g, WF_OP_SOFTMAX, "softmax", &z, 1, NULL);
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.perm[0] = 0;
    at.perm[1] = 2;
    at.perm[2] = 1;
    z = wf_graph_op1(&g, WF_OP_TRANSPOSE, "transpose", &z, 1, &at);
    int cat[2] = {z, x};
    memset(&at, 0, sizeof at);
    at.axis = 2;
    z = wf_graph_op1(&g, WF_OP_CONCAT, "concat", cat, 2, &at); /* [4,6,14] */
    int64_t is[4] = {4, 2, 8, 8};
    int img = wf_graph_add_tensor(&g, "img", WF_DTYPE_FP32, WF_ROLE_INPUT, 4, is);
    memset(&at, 0, sizeof at);
    at.kernel[0] = at.kernel[1] = 2;
    at.stride[0] = at.stride[1] = 2;
    wf_graph_op1(&g, WF_OP_AVGPOOL, "avgpool", &img, 1, &at);
    wf_graph_op1(&g, WF_OP_MUL, "scale", &z, 1, NULL);
    /* A mixture-of-experts MLP on x[4,6,8]: 4 experts, top-2, hidden width 16. */
    int64_t rs[2] = {8, 4}, w1s[3] = {4, 8, 32}, w2s[3] = {4, 16, 8};
    int rw = wf_graph_add_tensor(&g, "router.w", WF_DTYPE_FP32, WF_ROLE_PARAM, 2, rs);
    int w1 = wf_graph_add_tensor(&g, "experts.w1", WF_DTYPE_FP32, WF_ROLE_PARAM, 3, w1s);
    int w2 = wf_graph_add_tensor(&g, "experts.w2", WF_DTYPE_FP32, WF_ROLE_PARAM, 3, w2s);
    memset(&at, 0, sizeof at);
    at.top_k = 2;
    at.experts = 4;
    int rin[2] = {x, rw};
    int ro = wf_graph_add_op(&g, WF_OP_ROUTER, "router", rin, 2, &at);
    int wts = wf_graph_op_output(&g, ro, 0), ids = wf_graph_op_output(&g, ro, 1);
    int din[2] = {x, ids};
    int xe = wf_graph_op1(&g, WF_OP_MOE_DISPATCH, "dispatch", din, 2, &at); /* [4,12,8] */
    int gin[3] = {xe, w1, w2};
    int ye = wf_graph_op1(&g, WF_OP_GROUPED_MLP, "experts", gin, 3, &at);
    int cin[3] = {ye, wts, ids};
    wf_graph_op1(&g, WF_OP_MOE_COMBINE, "combine", cin, 3, &at);
    /* The ops of imported ONNX models: activations, a cast of ids, an expand
     * of [4,1,8] to [4,6,8] (dim 1 broadcast, so never split there). */
    wf_graph_op1(&g, WF_OP_TANH, "tanh", &x, 1, NULL);
    wf_graph_op1(&g, WF_OP_HARDSWISH, "hardswish", &x, 1, NULL);
    memset(&at, 0, sizeof at);
    at.alpha = 1.0 / 6;
    at.beta = 0.5;
    at.hi = 1;
    wf_graph_op1(&g, WF_OP_CLIP, "hardsigmoid", &x, 1, &at);
    int64_t idss[2] = {4, 6}, xs1[3] = {4, 1, 8};
    int tok = wf_graph_add_tensor(&g, "mask", WF_DTYPE_INT32, WF_ROLE_INPUT, 2, idss);
    memset(&at, 0, sizeof at);
    wf_graph_op1(&g, WF_OP_CAST, "cast", &tok, 1, &at);
    int x1 = wf_graph_add_tensor(&g, "x1", WF_DTYPE_FP32, WF_ROLE_INPUT, 3, xs1);
    at.ndim = 3;
    at.shape[0] = 4;
    at.shape[1] = 6;
    at.shape[2] = 8;
    wf_graph_op1(&g, WF_OP_EXPAND, "expand", &x1, 1, &at);
    /* Swin's and AlphaFold's ops: a gate, a roll of dim 1, and attention with
     * a bias per pair of batch rows (Bb 2 of 4). */
    wf_graph_op1(&g, WF_OP_SIGMOID, "sigmoid", &x, 1, NULL);
    memset(&at, 0, sizeof at);
    at.shifts[1] = -2;
    wf_graph_op1(&g, WF_OP_ROLL, "roll", &x, 1, &at);
    int64_t bs[4] = {2, 2, 6, 6};
    int bias = wf_graph_add_tensor(&g, "bias", WF_DTYPE_FP32, WF_ROLE_PARAM, 4, bs);
    memset(&at, 0, sizeof at);
    at.heads = 2;
    int ain[4] = {x, x, x, bias};
    wf_graph_op1(&g, WF_OP_ATTENTION, "biased_attention", ain, 4, &at);
    if (g.status != WF_OK)
        fail_msg("%s", wf_last_error());
    check_graph_sigs(&g, &m, seen);
    wf_graph_free(&g);
    for (int k = 0; k < WF_OP_COUNT; k++)
        if (!seen[k])
            fail_msg("op kind %s has no signature test", wf_op_name((wf_op_kind)k));
}

static void test_reshape_and_split_mapping(void **state)
{
    (void)state;
    int64_t p2 = 2;
    double a = 1e-6, bw = 1e10;
    wf_mesh m = hand_mesh(1, &p2, &a, &bw);
    wf_graph g;
    wf_graph_init(&g, "views");
    int64_t xs[3] = {4, 6, 8};
    int x = wf_graph_add_tensor(&g, "x", WF_DTYPE_FP32, WF_ROLE_INPUT, 3, xs);
    wf_op_attrs at;
    memset(&at, 0, sizeof at);
    at.ndim = 2;
    at.shape[0] = 24;
    at.shape[1] = 8;
    int r = wf_graph_add_op(&g, WF_OP_RESHAPE, "merge", &x, 1, &at); /* [4,6,8] -> [24,8] */
    wf_sbp_sig s[8];
    /* S0 -> S0, S2 -> S1, P, B; S1 (the middle of a merged dim) does not map */
    assert_int_equal(wf_sbp_op_sigs(&g, r, &m, s, 8), 4);
    assert_int_equal(s[0].in[0].ax[0], 0);
    assert_int_equal(s[0].out[0].ax[0], 0);
    assert_int_equal(s[1].in[0].ax[0], 2);
    assert_int_equal(s[1].out[0].ax[0], 1);
    assert_int_equal(s[2].in[0].ax[0], WF_SBP_P);
    int y = wf_graph_op_output(&g, r, 0);
    memset(&at, 0, sizeof at);
    at.ndim = 3;
    at.shape[0] = 4;
    at.shape[1] = 6;
    at.shape[2] = 8;
    int u = wf_graph_add_op(&g, WF_OP_RESHAPE, "unmerge", &y, 1, &at); /* [24,8] -> [4,6,8] */
    assert_int_equal(wf_sbp_op_sigs(&g, u, &m, s, 8), 4);
    assert_int_equal(s[1].in[0].ax[0], 1);
    assert_int_equal(s[1].out[0].ax[0], 2);
    /* split along the last axis: every dim, the axis part-blocked */
    memset(&at, 0, sizeof at);
    at.axis = 2;
    at.nsplit = 2;
    int sp = wf_graph_add_op(&g, WF_OP_SPLIT, "split", &x, 1, &at);
    int n = wf_sbp_op_sigs(&g, sp, &m, s, 8);
    assert_int_equal(n, 5); /* S0, S1, S2, P, B */
    assert_int_equal(s[2].out[1].ax[0], 2);
    assert_int_equal(g.status, WF_OK);
    wf_graph_free(&g);
}

static void test_grad_duals(void **state)
{
    (void)state;
    wf_sbp_sig s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < WF_MAX_INPUTS; i++)
        s.in[i] = wf_sbp_broadcast();
    for (int i = 0; i < WF_MAX_OUTPUTS; i++)
        s.out[i] = wf_sbp_broadcast();
    /* data parallel (S0, B -> S0): the weight's gradient is partial: all-reduce */
    s.in[0].ax[0] = 0;
    s.out[0].ax[0] = 0;
    assert_int_equal(wf_sbp_grad_of_input(&s, 1, 1, 1).ax[0], WF_SBP_P);
    assert_int_equal(wf_sbp_grad_of_input(&s, 1, 0, 1).ax[0], 0);
    /* column split (B, S1 -> S1): the input's gradient is partial, the weight's split */
    s.in[0].ax[0] = WF_SBP_B;
    s.in[1].ax[0] = 1;
    s.out[0].ax[0] = 1;
    assert_int_equal(wf_sbp_grad_of_input(&s, 1, 0, 1).ax[0], WF_SBP_P);
    assert_int_equal(wf_sbp_grad_of_input(&s, 1, 1, 1).ax[0], 1);
    /* (P, B -> P): the partial input gets the whole gradient, the weight a partial one */
    s.in[0].ax[0] = WF_SBP_P;
    s.in[1].ax[0] = WF_SBP_B;
    s.out[0].ax[0] = WF_SBP_P;
    assert_int_equal(wf_sbp_grad_of_input(&s, 1, 0, 1).ax[0], WF_SBP_B);
    assert_int_equal(wf_sbp_grad_of_input(&s, 1, 1, 1).ax[0], WF_SBP_P);
    /* replicated: nothing to reduce */
    s.in[0].ax[0] = WF_SBP_B;
    s.out[0].ax[0] = WF_SBP_B;
    assert_int_equal(wf_sbp_grad_of_input(&s, 1, 1, 1).ax[0], WF_SBP_B);
    wf_sbp pb = L("[P,S(1)]", 2);
    wf_sbp need = wf_sbp_grad_need(&pb, 2);
    assert_int_equal(need.ax[0], WF_SBP_B);
    assert_int_equal(need.ax[1], 1);
    assert_int_equal(wf_sbp_storage(&pb, 2).ax[0], WF_SBP_B);
}

/* Every signature of every op on a 1-D and a 2-D mesh: its text parses back
 * to the same layouts, and wf_sbp_sig_find returns a signature with them. */
static void test_sig_text(void **state)
{
    (void)state;
    wf_cluster c;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=1", &c), WF_OK);
    const char *models[] = {"gpt-tiny", "resnet18:image=32", "mlp-tiny"};
    const char *meshes[] = {"4", "2x4"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        wf_model_config mc;
        wf_graph g;
        assert_int_equal(wf_model_lookup(models[i], &mc), WF_OK);
        assert_int_equal(wf_model_build(&mc, 8, &g), WF_OK);
        for (size_t k = 0; k < 2; k++) {
            wf_mesh m;
            assert_int_equal(wf_mesh_parse(meshes[k], &c, &m), WF_OK);
            for (int op = 0; op < g.nfwd; op++) {
                const wf_op *o = &g.ops[op];
                int n = wf_sbp_op_sigs(&g, op, &m, NULL, 0);
                wf_sbp_sig *s = malloc(sizeof *s * (size_t)n);
                wf_sbp_op_sigs(&g, op, &m, s, n);
                for (int q = 0; q < n; q++) {
                    char text[512];
                    wf_sbp_sig_str(&s[q], o->nin, o->nout, m.naxes, text, sizeof text);
                    wf_sbp_sig back;
                    assert_int_equal(wf_sbp_sig_parse(text, o->nin, o->nout, m.naxes, &back), WF_OK);
                    for (int j = 0; j < o->nin; j++)
                        assert_true(wf_sbp_equal(&back.in[j], &s[q].in[j], m.naxes));
                    for (int j = 0; j < o->nout; j++)
                        assert_true(wf_sbp_equal(&back.out[j], &s[q].out[j], m.naxes));
                    int f = wf_sbp_sig_find(&g, op, &m, text);
                    assert_true(f >= 0 && f <= q);
                    for (int j = 0; j < o->nin; j++)
                        assert_true(wf_sbp_equal(&s[f].in[j], &s[q].in[j], m.naxes));
                }
                free(s);
            }
        }
        wf_graph_free(&g);
    }
    /* The form: one part per axis, inputs -> outputs; S(k) and spaces accepted. */
    wf_sbp_sig s;
    assert_int_equal(wf_sbp_sig_parse(" S0 , B,B -> S0 | B,S(1),S0->S2 ", 3, 1, 2, &s), WF_OK);
    assert_int_equal(s.in[0].ax[0], 0);
    assert_int_equal(s.in[1].ax[0], WF_SBP_B);
    assert_int_equal(s.in[1].ax[1], 1);
    assert_int_equal(s.in[2].ax[1], 0);
    assert_int_equal(s.out[0].ax[1], 2);
    char text[128];
    assert_string_equal(wf_sbp_sig_str(&s, 3, 1, 2, text, sizeof text), "S0,B,B->S0|B,S1,S0->S2");
    const char *bad[] = {"S0,B->S0", "S0,B,B,B->S0|B,B,B->B", "S0,B,B->S0|", "S0,B,B S0|B,B,B->B",
                         "Q,B,B->S0|B,B,B->B", "S0,B,B->S0|B,B,B->B|B,B,B->B", "S9,B,B->S0|B,B,B->B"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (wf_sbp_sig_parse(bad[i], 3, 1, 2, &s) != WF_FORMAT)
            fail_msg("'%s' parsed", bad[i]);
    /* A signature the op does not have names the op. */
    wf_model_config mc;
    wf_graph g;
    assert_int_equal(wf_model_lookup("mlp-tiny", &mc), WF_OK);
    assert_int_equal(wf_model_build(&mc, 8, &g), WF_OK);
    wf_mesh m;
    assert_int_equal(wf_mesh_parse("4", &c, &m), WF_OK);
    assert_int_equal(wf_sbp_sig_find(&g, 0, &m, "P,P,P->S0"), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), g.ops[0].name));
    wf_graph_free(&g);
    /* The planner's meshes: [8], then [a, 8/a]. */
    wf_mesh ms[8];
    assert_int_equal(wf_mesh_candidates(&c, 8, ms, 8), 3);
    assert_int_equal(ms[0].naxes, 1);
    assert_int_equal(ms[1].size[0], 2);
    assert_int_equal(ms[1].size[1], 4);
    assert_int_equal(ms[2].size[0], 4);
    assert_int_equal(wf_mesh_candidates(&c, 1, ms, 8), 1);
    assert_int_equal(wf_mesh_candidates(&c, 16, ms, 8), WF_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_levels),
        cmocka_unit_test(test_one_price),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_boxing_1d_table),
        cmocka_unit_test(test_boxing_2d_order),
        cmocka_unit_test(test_matmul_signature_counts),
        cmocka_unit_test(test_op_constraints),
        cmocka_unit_test(test_every_op_kind),
        cmocka_unit_test(test_reshape_and_split_mapping),
        cmocka_unit_test(test_grad_duals),
        cmocka_unit_test(test_sig_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
