/* The op-level planner (src/search/opplan.c): pipeline stages around the
 * op-level search, and op-level plan files.
 *
 * References: a deep MLP whose weights do not fit a device under data
 * parallelism, on nodes joined by 10 GbE, where pipelining beats splitting
 * every layer (pp > 1 comes out, with its stage boundaries); the stage DP's
 * split against every cut of the same per-op chain (brute force); the plan
 * written as a file and read back evaluates to the same numbers, bit for
 * bit; every malformed plan is an error that names the op or the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/search.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void setup_mc(const char *model, const char *cluster, wf_model_config *m, wf_cluster *c)
{
    assert_int_equal(wf_model_lookup(model, m), WF_OK);
    assert_int_equal(wf_cluster_lookup(cluster, c), WF_OK);
}

/* 15 layers 8192 x 8192 (fp32: 1 GiB of weights, gradients and Adam state
 * each), eight V100s each in its own node on 10 Gb/s Ethernet, 8 GiB each. */
#define DEEP_MLP                                                                                   \
    "mlp:sizes=8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192-8192"
#define SLOW_CLUSTER "v100-10gbe:nodes=8,devices_per_node=1"
#define BUDGET (8 * GIB)

/* The proxy's own figures of a point (the search ranks and reports the one
 * cost model's where it takes the layouts: wf_search_opplan_point.one_model). */
static wf_search_opplan_point proxy_of(const wf_search_opplan_point *a)
{
    wf_search_opplan_point p = *a;
    if (a->one_model) {
        p.one_model = 0;
        p.iteration_time_s = a->proxy_time_s;
        p.compute_s = a->proxy_compute_s;
        p.comm_s = a->proxy_comm_s;
        p.pp_comm_s = a->proxy_pp_comm_s;
        p.bubble_s = a->proxy_bubble_s;
        p.grad_sync_s = a->proxy_grad_sync_s;
        p.memory_per_device_bytes = a->proxy_memory_bytes;
        p.fits = a->proxy_fits;
    }
    return p;
}

static void assert_same_point(const wf_search_opplan_point *a, const wf_search_opplan_point *b)
{
    assert_int_equal(a->one_model, b->one_model);
    assert_string_equal(a->plan, b->plan);
    assert_true(a->iteration_time_s == b->iteration_time_s);
    assert_true(a->memory_per_device_bytes == b->memory_per_device_bytes);
    assert_true(a->compute_s == b->compute_s && a->comm_s == b->comm_s);
    assert_true(a->pp_comm_s == b->pp_comm_s && a->bubble_s == b->bubble_s);
    assert_true(a->grad_sync_s == b->grad_sync_s);
    assert_int_equal(a->fits, b->fits);
    assert_int_equal(a->nstages, b->nstages);
    for (int s = 0; s < a->nstages; s++) {
        assert_int_equal(a->stages[s].first_op, b->stages[s].first_op);
        assert_int_equal(a->stages[s].end_op, b->stages[s].end_op);
        assert_true(a->stages[s].time_s == b->stages[s].time_s);
        assert_true(a->stages[s].memory_bytes == b->stages[s].memory_bytes);
    }
}

/* The sum of the stage times + (m - 1) x the slowest, or INFINITY when a
 * stage exceeds the memory (the DP's objective, written out). */
static double chain_total(const double *t, const double *snd, const double *w, const double *a,
                          int n, const int *first, int S, int64_t m, double limit)
{
    double sum = 0, mx = 0;
    for (int s = 0; s < S; s++) {
        double ts = 0, ws = 0, as = 0;
        for (int i = first[s]; i < first[s + 1]; i++) {
            ts += t[i];
            ws += w[i];
            as += a[i];
        }
        if (s + 1 < S)
            ts += snd[first[s + 1] - 1];
        double inflight = (double)(S - s < m ? S - s : m);
        if (ws + as * inflight > limit)
            return INFINITY;
        sum += ts;
        if (ts > mx)
            mx = ts;
    }
    (void)n;
    return sum + (double)(m - 1) * mx;
}

/* Every way to cut n ops into S stages (first[0] = 0, first[S] = n). */
static double brute_cuts(const double *t, const double *snd, const double *w, const double *a,
                         int n, int S, int64_t m, double limit, int *best_first)
{
    int first[64];
    first[0] = 0;
    first[S] = n;
    for (int s = 1; s < S; s++)
        first[s] = s;
    double best = INFINITY;
    for (;;) {
        double v = chain_total(t, snd, w, a, n, first, S, m, limit);
        if (v < best) {
            best = v;
            memcpy(best_first, first, sizeof(int) * (size_t)(S + 1));
        }
        /* next combination of S - 1 cuts in 1..n-1 */
        int k = S - 1;
        while (k >= 1 && first[k] == n - (S - k))
            k--;
        if (k < 1)
            break;
        first[k]++;
        for (int j = k + 1; j < S; j++)
            first[j] = first[j - 1] + 1;
    }
    return best;
}

/* Pipelining rediscovered: data parallelism does not fit (every device would
 * hold 15 GiB of weights and state), splitting every layer over 10 GbE is
 * slow; the planner cuts the MLP into stages, each fitting, and reports its
 * boundaries. The stage split is the optimum of the DP's chain (brute force
 * over every cut). */
static void test_pipeline_mlp(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc(DEEP_MLP, SLOW_CLUSTER, &m, &c);
    /* Data parallelism on all eight devices: signature 0 of every op. */
    wf_graph g;
    assert_int_equal(wf_model_build(&m, 512, &g), WF_OK);
    wf_mesh mesh8;
    assert_int_equal(wf_mesh_parse("8", &c, &mesh8), WF_OK);
    int *dp = calloc((size_t)g.nfwd, sizeof(int));
    double mem_dp;
    assert_int_equal(wf_search_oplevel_evaluate(&g, &c, &mesh8, NULL, dp, NULL, NULL, NULL, &mem_dp),
                     WF_OK);
    assert_true(mem_dp > 15 * GIB && mem_dp > BUDGET);
    free(dp);
    wf_graph_free(&g);

    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.max_memory_bytes = BUDGET;
    wf_search_opplan_result r;
    assert_int_equal(wf_search_opplan(&m, &c, 512, &o, &r), WF_OK);
    assert_true(r.has_best);
    /* The proxy's figures (the stages are the proxy's). */
    const wf_search_opplan_point bp = proxy_of(&r.best);
    const wf_search_opplan_point *b = &bp;
    assert_true(b->pp > 1);
    assert_true(b->fits);
    assert_true(b->memory_per_device_bytes <= BUDGET);
    assert_int_equal(b->devices, 8);
    /* The stages tile the ops in order. */
    assert_int_equal(b->nstages, b->pp);
    assert_int_equal(b->stages[0].first_op, 0);
    assert_int_equal(b->stages[b->pp - 1].end_op, r.graph.nfwd);
    double sum = 0, slow = 0, gmax = 0;
    for (int s = 0; s < b->pp; s++) {
        const wf_search_opplan_stage *S = &b->stages[s];
        assert_true(S->end_op > S->first_op);
        if (s > 0)
            assert_int_equal(S->first_op, b->stages[s - 1].end_op);
        assert_true(S->memory_bytes <= BUDGET);
        int inflight = b->pp - s < b->micro_batches ? b->pp - s : (int)b->micro_batches;
        assert_int_equal(S->inflight, inflight);
        assert_true(s + 1 < b->pp ? S->send_s > 0 : S->send_s == 0);
        sum += S->time_s;
        slow = fmax(slow, S->time_s);
        gmax = fmax(gmax, S->grad_sync_s);
        /* The plan file names the first op of each stage. */
        assert_string_equal(r.best_plan.stage_first[s], r.graph.ops[S->first_op].name);
    }
    double m1 = (double)(b->micro_batches - 1);
    assert_true(fabs(b->iteration_time_s - (sum + m1 * slow + gmax)) <= 1e-12 * b->iteration_time_s);
    assert_true(fabs(b->compute_s + b->comm_s + b->pp_comm_s + b->bubble_s + b->grad_sync_s -
                     b->iteration_time_s) <= 1e-12 * b->iteration_time_s);
    assert_true(b->bubble_s > 0);
    /* The ranking's head is the best, and faster than any single-stage plan. */
    assert_true(r.ntop >= 1);
    assert_string_equal(r.top[0].plan, b->plan);
    assert_true(r.top[0].iteration_time_s == r.best.iteration_time_s);
    wf_search_opplan_opts o1 = o;
    o1.pp = 1;
    wf_search_opplan_result r1;
    wf_status st1 = wf_search_opplan(&m, &c, 512, &o1, &r1);
    assert_true(st1 == WF_OK || st1 == WF_NOFIT);
    if (st1 == WF_OK)
        assert_true(r1.best.iteration_time_s > 1.5 * r.best.iteration_time_s);
    fprintf(stderr, "deep MLP on 8 x 10 GbE nodes, 8 GiB: %s %.4f s (%d stages at ops", b->plan,
            b->iteration_time_s, b->pp);
    for (int s = 0; s < b->pp; s++)
        fprintf(stderr, " %s", r.graph.ops[b->stages[s].first_op].name);
    fprintf(stderr, "); best single stage %.4f s; data parallelism needs %.1f GiB\n",
            st1 == WF_OK ? r1.best.iteration_time_s : NAN, mem_dp / GIB);
    wf_search_opplan_result_free(&r1);

    /* The DP's split is the best of every cut of its chain. */
    wf_mesh sm;
    assert_int_equal(wf_mesh_parse(b->mesh, &c, &sm), WF_OK);
    const wf_graph *gg = &r.graph;
    int n = gg->nfwd;
    double *t = calloc((size_t)n * 4, sizeof(double));
    double *snd = t + n, *w = snd + n, *a = w + n;
    assert_int_equal(wf_search_opplan_chain(gg, &c, &sm, b->pp, b->micro_batches, BUDGET, NULL, t, snd,
                                     w, a),
                     WF_OK);
    int bf[64], got[64];
    double best = brute_cuts(t, snd, w, a, n, b->pp, b->micro_batches, BUDGET, bf);
    for (int s = 0; s < b->pp; s++)
        got[s] = b->stages[s].first_op;
    got[b->pp] = n;
    double mine = chain_total(t, snd, w, a, n, got, b->pp, b->micro_batches, BUDGET);
    assert_true(isfinite(best));
    assert_true(fabs(mine - best) <= 1e-12 * best);
    wf_stage_plan sp;
    assert_int_equal(wf_pipeline_dp(n, t, snd, w, a, b->pp, b->micro_batches, BUDGET, &sp), WF_OK);
    assert_true(fabs(sp.time_s - best) <= 1e-12 * best);
    free(t);
    wf_search_opplan_result_free(&r);
}

/* ---- plan files ------------------------------------------------------------------------ */

/* Writes the best plan, reads it back and evaluates it: the same numbers,
 * bit for bit (the search's are computed by the evaluation's code). */
static void roundtrip(const char *model, const char *cluster, int64_t batch, double budget, int pp,
                      int seq_dim)
{
    wf_model_config m;
    wf_cluster c;
    setup_mc(model, cluster, &m, &c);
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.max_memory_bytes = budget;
    o.pp = pp;
    o.oplevel.seq_dim = seq_dim;
    wf_search_opplan_result r;
    assert_int_equal(wf_search_opplan(&m, &c, batch, &o, &r), WF_OK);
    /* best = top[0] as the search ranked it */
    assert_true(r.ntop >= 1);
    assert_same_point(&r.best, &r.top[0]);
    char path[] = "/tmp/weft-opplan-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    wf_plan_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "%s", model);
    meta.batch = batch;
    assert_int_equal(wf_layout_write_file(path, &r.best_plan, &meta, NULL), WF_OK);
    wf_layout pl;
    wf_layout_init(&pl);
    wf_plan whole;
    wf_plan_meta meta2;
    int is_ol = 0;
    assert_int_equal(wf_plan_read_file_any(path, &whole, &pl, &meta2, &is_ol), WF_OK);
    assert_int_equal(is_ol, 1);
    assert_int_equal(wf_plan_is_oplevel_file(path), 1);
    assert_int_equal(pl.nlayouts, r.graph.nfwd);
    assert_int_equal(pl.nstorage, r.best_plan.nstorage);
    wf_arena a;
    wf_arena_init(&a, 1 << 12);
    wf_search_opplan_point pt;
    assert_int_equal(wf_search_opplan_evaluate(&m, &c, batch, &pl, budget, NULL, &a, &pt), WF_OK);
    wf_search_opplan_point proxy = proxy_of(&r.best);
    assert_same_point(&pt, &proxy);
    /* wf_search_opplan_verify gives the same as well. */
    wf_search_opplan_result v;
    assert_int_equal(wf_search_opplan_verify(&m, &c, batch, &pl, &o, &v), WF_OK);
    assert_same_point(&v.best, &r.best);
    for (int i = 0; i < r.graph.nfwd; i++) {
        assert_true(v.op_comm_s[i] == r.op_comm_s[i]);
        assert_int_equal(v.op_stage[i], r.op_stage[i]);
    }
    /* The whole-model readers refuse it, naming --verify. */
    assert_int_equal(wf_plan_read_file(path, &whole, NULL), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "--verify"));
    assert_int_equal(wf_plan_parse(r.best.plan, &whole), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "op-level"));
    wf_search_opplan_result_free(&v);
    wf_arena_free(&a);
    wf_layout_free(&pl);
    unlink(path);
    wf_search_opplan_result_free(&r);
}

static void test_roundtrip(void **state)
{
    (void)state;
    roundtrip("vgg16", "dgx-a100:nodes=2", 64, 0, 0, -1);
    roundtrip(DEEP_MLP, SLOW_CLUSTER, 512, BUDGET, 0, -1);
    /* tied embeddings (a weight read by two ops: its storage is recorded), a
     * pipeline, and the sequence restriction (costs of what remains unchanged) */
    roundtrip("gpt:layers=4,hidden=256,heads=8,seq=128,vocab=1024", "dgx-a100:nodes=1", 16, 0, 1,
              -1);
    roundtrip("gpt:layers=4,hidden=256,heads=8,seq=128,vocab=1024", "dgx-a100:nodes=1", 16, 0, 2,
              1);
}

/* Every way a plan can disagree with the model or the cluster is an error
 * naming what disagrees. */
static void expect_err(const wf_model_config *m, const wf_cluster *c, int64_t batch,
                       const wf_layout *pl, wf_status want, const char *needle)
{
    wf_arena a;
    wf_arena_init(&a, 1 << 12);
    wf_search_opplan_point pt;
    wf_status st = wf_search_opplan_evaluate(m, c, batch, pl, 0, NULL, &a, &pt);
    if (st != want || !strstr(wf_last_error(), needle))
        fail_msg("status %d (want %d), message '%s' (want '%s')", st, want, wf_last_error(), needle);
    wf_arena_free(&a);
}

static void copy_plan(const wf_layout *src, wf_layout *dst, const char *mesh, int pp,
                      int64_t micro, int skip_op, const char *sig_of, const char *sig)
{
    wf_layout_init(dst);
    assert_int_equal(wf_layout_set(dst, mesh, pp, micro), WF_OK);
    for (int s = 0; s < pp && s < src->pp; s++)
        if (src->stage_first[s])
            assert_int_equal(wf_layout_set_stage(dst, s, src->stage_first[s]), WF_OK);
    for (int i = 0; i < src->nlayouts; i++) {
        if (i == skip_op)
            continue;
        const char *x = sig_of && strcmp(src->op[i], sig_of) == 0 ? sig : src->sig[i];
        assert_int_equal(wf_layout_add_sig(dst, src->op[i], x), WF_OK);
    }
}

static void test_plan_errors(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc("mlp:sizes=256-256-256-10", "dgx-a100:nodes=1", &m, &c);
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.mesh = "2x4";
    wf_search_opplan_result r;
    assert_int_equal(wf_search_opplan(&m, &c, 64, &o, &r), WF_OK);
    const wf_layout *good = &r.best_plan;
    assert_string_equal(good->mesh, "2x4");
    wf_layout pl;
    /* a signature the op does not have on the mesh */
    copy_plan(good, &pl, "2x4", 1, 1, -1, "relu1", "S1->S0|B->B");
    expect_err(&m, &c, 64, &pl, WF_INVAL, "op 'relu1' (relu): signature 'S1->S0|B->B'");
    wf_layout_free(&pl);
    /* one axis too few */
    copy_plan(good, &pl, "2x4", 1, 1, -1, "relu1", "S0->S0");
    expect_err(&m, &c, 64, &pl, WF_INVAL, "signature 'S0->S0': 1 axis part(s) for a 2-axis mesh");
    wf_layout_free(&pl);
    /* an op of another model */
    copy_plan(good, &pl, "2x4", 1, 1, -1, NULL, NULL);
    assert_int_equal(wf_layout_add_sig(&pl, "conv9", "B->B|B->B"), WF_OK);
    expect_err(&m, &c, 64, &pl, WF_INVAL, "op 'conv9' is not an op of model");
    wf_layout_free(&pl);
    /* an op without a layout */
    copy_plan(good, &pl, "2x4", 1, 1, 2, NULL, NULL);
    expect_err(&m, &c, 64, &pl, WF_INVAL, "op 'fc2' (linear) of model");
    wf_layout_free(&pl);
    /* more devices than the cluster */
    copy_plan(good, &pl, "2x4", 2, 1, -1, NULL, NULL);
    assert_int_equal(wf_layout_set_stage(&pl, 0, "fc1"), WF_OK);
    assert_int_equal(wf_layout_set_stage(&pl, 1, "fc2"), WF_OK);
    expect_err(&m, &c, 64, &pl, WF_INVAL, "mesh 2x4 x pp=2 needs 16 devices, cluster");
    wf_layout_free(&pl);
    /* a mesh larger than the cluster, and a malformed one */
    copy_plan(good, &pl, "4x4", 1, 1, -1, NULL, NULL);
    expect_err(&m, &c, 64, &pl, WF_INVAL, "16");
    wf_layout_free(&pl);
    copy_plan(good, &pl, "2y4", 1, 1, -1, NULL, NULL);
    wf_arena a;
    wf_arena_init(&a, 1 << 12);
    wf_search_opplan_point pt;
    assert_true(wf_search_opplan_evaluate(&m, &c, 64, &pl, 0, NULL, &a, &pt) < 0);
    wf_arena_free(&a);
    wf_layout_free(&pl);
    /* micro-batches that do not divide the batch */
    copy_plan(good, &pl, "2x4", 1, 3, -1, NULL, NULL);
    expect_err(&m, &c, 64, &pl, WF_INVAL, "micro_batches=3 does not divide batch=64");
    wf_layout_free(&pl);
    /* stages out of order, and not starting at the first op */
    wf_cluster c16;
    assert_int_equal(wf_cluster_lookup("dgx-a100:nodes=2", &c16), WF_OK);
    copy_plan(good, &pl, "2x4", 2, 2, -1, NULL, NULL);
    assert_int_equal(wf_layout_set_stage(&pl, 0, "fc1"), WF_OK);
    assert_int_equal(wf_layout_set_stage(&pl, 1, "fc1"), WF_OK);
    expect_err(&m, &c16, 64, &pl, WF_INVAL, "stage 1 starts at op 'fc1', not after");
    assert_int_equal(wf_layout_set_stage(&pl, 0, "relu1"), WF_OK);
    expect_err(&m, &c16, 64, &pl, WF_INVAL, "stage 0 starts at op 'relu1', not at the first op");
    wf_layout_free(&pl);
    /* a storage layout that does not divide the tensor */
    copy_plan(good, &pl, "2x4", 1, 1, -1, NULL, NULL);
    assert_int_equal(wf_layout_add_storage(&pl, 0, "fc3.bias", "S0,S0"), WF_OK);
    expect_err(&m, &c, 64, &pl, WF_INVAL, "storage S0,S0 of 'fc3.bias' does not divide");
    wf_layout_free(&pl);
    /* a repeated op name */
    copy_plan(good, &pl, "2x4", 1, 1, -1, NULL, NULL);
    assert_int_equal(wf_layout_add_sig(&pl, "fc1", "B,B,B->B|B,B,B->B"), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "'fc1' appears twice"));
    wf_layout_free(&pl);

    /* JSON: unknown fields, wrong stage counts, a bad plan string. */
    cJSON *j = wf_layout_to_json(good, NULL, NULL);
    assert_non_null(j);
    cJSON_AddNumberToObject(j, "extra", 1);
    wf_layout_init(&pl);
    assert_int_equal(wf_layout_from_json(j, "p.json", &pl, NULL), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "extra"));
    cJSON_DeleteItemFromObject(j, "extra");
    assert_int_equal(wf_layout_from_json(j, "p.json", &pl, NULL), WF_OK);
    cJSON_ReplaceItemInObject(j, "plan", cJSON_CreateString("mesh=2x4,pp=2,micro_batches=1"));
    assert_int_equal(wf_layout_from_json(j, "p.json", &pl, NULL), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "p.json.stages"));
    cJSON_ReplaceItemInObject(j, "plan", cJSON_CreateString("mesh=2x4,tp=2"));
    assert_int_equal(wf_layout_from_json(j, "p.json", &pl, NULL), WF_FORMAT);
    assert_non_null(strstr(wf_last_error(), "tp"));
    cJSON_Delete(j);
    wf_layout_free(&pl);
    wf_search_opplan_result_free(&r);
}

/* The frontier and the ranking: sorted, fitting, the best first; the same
 * result twice. */
static void test_ranking_frontier(void **state)
{
    (void)state;
    wf_model_config m;
    wf_cluster c;
    setup_mc("vgg16", "dgx-a100:nodes=2", &m, &c);
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.top_k = 100;
    wf_search_opplan_result r, r2;
    assert_int_equal(wf_search_opplan(&m, &c, 64, &o, &r), WF_OK);
    assert_int_equal(wf_search_opplan(&m, &c, 64, &o, &r2), WF_OK);
    assert_true(r.ntop >= 2 && r.npareto >= 2);
    assert_int_equal(r.ntop, r2.ntop);
    for (int i = 0; i < r.ntop; i++) {
        assert_true(r.top[i].fits);
        assert_same_point(&r.top[i], &r2.top[i]);
        if (i)
            assert_true(r.top[i].iteration_time_s >= r.top[i - 1].iteration_time_s);
    }
    /* The frontier is the proxy's: its head is the proxy's fastest. */
    for (int i = 0; i < r.ntop; i++)
        assert_true(r.pareto[0].iteration_time_s <= proxy_of(&r.top[i]).iteration_time_s);
    assert_true(r.best.one_model);
    assert_true(r.best.iteration_time_s == r.top[0].iteration_time_s);
    for (int i = 1; i < r.npareto; i++) {
        assert_true(r.pareto[i].iteration_time_s >= r.pareto[i - 1].iteration_time_s);
        assert_true(r.pareto[i].memory_per_device_bytes < r.pareto[i - 1].memory_per_device_bytes);
    }
    /* Every candidate (mesh, pp, micro-batches) appears once in the ranking. */
    for (int i = 0; i < r.ntop; i++)
        for (int k = 0; k < i; k++)
            assert_string_not_equal(r.top[i].plan, r.top[k].plan);
    assert_true(r.searched >= r.ntop && r.searches >= r.searched);
    wf_search_opplan_result_free(&r);
    wf_search_opplan_result_free(&r2);
    /* A budget nothing meets: the smallest plan and NOFIT. */
    o.max_memory_bytes = 1e6;
    assert_int_equal(wf_search_opplan(&m, &c, 64, &o, &r), WF_NOFIT);
    assert_true(r.has_best && !r.best.fits);
    assert_non_null(strstr(wf_last_error(), "smallest memory found"));
    wf_search_opplan_result_free(&r);
    /* Bad options */
    wf_search_opplan_opts_default(&o);
    o.mesh = "3x3";
    assert_int_equal(wf_search_opplan(&m, &c, 64, &o, &r), WF_INVAL);
    wf_search_opplan_result_free(&r);
    wf_search_opplan_opts_default(&o);
    o.pp = 3;
    assert_int_equal(wf_search_opplan(&m, &c, 64, &o, &r), WF_INVAL);
    assert_non_null(strstr(wf_last_error(), "pp=3"));
    wf_search_opplan_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline_mlp),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_ranking_frontier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
