/* Benchmark (not a test): does proposing layouts on the op-level model and
 * descending on the one cost model find what a search descending from every
 * proposal finds? Each case runs wf_search_opplan twice:
 *   default -- the proxy proposes; the fastest 3 of distinct meshes are
 *              descended on the one model (200000 ops costed at most);
 *   all     -- every single-stage candidate (each frontier point of each
 *              mesh) descended on the one model, with 20 times the budget;
 * and prints the best's time on the one model (what `weft estimate` of its
 * file reports), its plan and the search's wall time. Then proposals made on
 * the one model itself, with no proxy: on the default best's mesh and
 * micro-batches, RESTARTS starts (RESTARTS_WHOLE for models other than
 * transformers) descended op by op on the one model until a sweep changes
 * nothing: half random layouts (each op of the one model's graph a signature
 * drawn uniformly from its signatures on the mesh), half the search's best
 * with 1 to 4 ops drawn at random (a fixed seed); the best of them that fits
 * against the search's, and how many ended priced and fitting (the one model
 * refuses most random layouts: a descent from a refused start moves only
 * where one op's change makes the whole plan one it takes).
 * Run: build/bench_proposals */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/layout.h"
#include "weft/search.h"

#define RESTARTS 200      /* a transformer's (its one-layer graph) */
#define RESTARTS_WHOLE 10 /* other models' (the whole graph) */

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static int better(double ta, double ma, double tb, double mb, double budget)
{
    int fa = ma <= budget, fb = mb <= budget;
    if (fa != fb)
        return fa;
    return fa ? ta < tb * (1 - 1e-12) : ma < mb;
}

/* The best of the restarts descended on the one model (coster of
 * plan ol), into *best_s (a huge value when none fits); *evals the costs. */
static int restarts(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                    double budget, double *best_s, long *evals, double *wall_s, int *feasible)
{
    wf_cost_ctx *ctx = NULL;
    wf_layout_coster *K = NULL;
    *best_s = 1e300;
    *evals = 0;
    double t0 = wf_now_s();
    if (wf_cost_ctx_create(m, c, &ctx) != WF_OK || wf_layout_coster_new(m, c, ctx, batch, ol, 0, &K) != WF_OK) {
        fprintf(stderr, "bench_proposals: %s\n", wf_last_error());
        wf_cost_ctx_free(ctx);
        return 1;
    }
    const wf_graph *g = wf_layout_coster_graph(K);
    const wf_mesh *mesh = wf_layout_coster_mesh(K);
    wf_sbp_sig *sig = wf_layout_coster_sigs(K);
    wf_sbp_sig **all = calloc((size_t)g->nfwd, sizeof *all);
    int *n = calloc((size_t)g->nfwd, sizeof *n);
    for (int j = 0; j < g->nfwd; j++) {
        n[j] = wf_sbp_op_sigs(g, j, mesh, NULL, 0);
        all[j] = malloc(sizeof **all * (size_t)(n[j] > 0 ? n[j] : 1));
        wf_sbp_op_sigs(g, j, mesh, all[j], n[j]);
    }
    uint64_t seed = 12345;
    const int nr = wf_model_is_transformer(m) ? RESTARTS : RESTARTS_WHOLE;
    wf_sbp_sig *home = malloc(sizeof *home * (size_t)g->nfwd);
    memcpy(home, sig, sizeof *home * (size_t)g->nfwd);
    *feasible = 0;
    for (int r = 0; r < nr; r++) {
        /* Even restarts: every op drawn at random; odd ones: the search's
         * best with 1 to 4 ops drawn at random (a kick). */
        if (r % 2 == 0) {
            for (int j = 0; j < g->nfwd; j++)
                sig[j] = all[j][rng_next(&seed) % (uint64_t)n[j]];
        } else {
            memcpy(sig, home, sizeof *home * (size_t)g->nfwd);
            int kicks = 1 + (int)(rng_next(&seed) % 4);
            for (int q = 0; q < kicks; q++) {
                int j = (int)(rng_next(&seed) % (uint64_t)g->nfwd);
                sig[j] = all[j][rng_next(&seed) % (uint64_t)n[j]];
            }
        }
        wf_estimate e;
        double bt = 1e300, bm = 1e300;
        if (wf_layout_coster_cost(K, batch, &e) == WF_OK) {
            bt = e.iteration_time_s;
            bm = e.memory_per_device_bytes;
        } else {
            wf_clear_error();
        }
        (*evals)++;
        for (int moved = 1, sweep = 0; moved && sweep < 50; sweep++) {
            moved = 0;
            for (int j = 0; j < g->nfwd; j++) {
                const wf_sbp_sig cur = sig[j];
                int best = -1;
                for (int x = 0; x < n[j]; x++) {
                    sig[j] = all[j][x];
                    (*evals)++;
                    if (wf_layout_coster_cost(K, batch, &e) != WF_OK) {
                        wf_clear_error();
                        continue;
                    }
                    if (better(e.iteration_time_s, e.memory_per_device_bytes, bt, bm, budget)) {
                        bt = e.iteration_time_s;
                        bm = e.memory_per_device_bytes;
                        best = x;
                    }
                }
                sig[j] = best >= 0 ? all[j][best] : cur;
                moved |= best >= 0;
            }
        }
        if (bm <= budget && bt < *best_s)
            *best_s = bt;
        *feasible += bm <= budget;
    }
    free(home);
    for (int j = 0; j < g->nfwd; j++)
        free(all[j]);
    free(all);
    free(n);
    wf_layout_coster_free(K);
    wf_cost_ctx_free(ctx);
    *wall_s = wf_now_s() - t0;
    return 0;
}

typedef struct {
    const char *model, *cluster;
    int64_t batch;
    const char *mesh; /* NULL: every mesh */
    int pp;           /* 0: every depth */
} bench_case;

static int run(const bench_case *k, int all, double *best_s, double *wall_s, char *plan, size_t cap,
               double *rs_s, long *rs_evals, double *rs_wall, int *rs_feasible)
{
    wf_model_config m;
    wf_cluster c;
    if (wf_model_lookup(k->model, &m) != WF_OK || wf_cluster_lookup(k->cluster, &c) != WF_OK) {
        fprintf(stderr, "bench_proposals: %s\n", wf_last_error());
        return 1;
    }
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.mesh = k->mesh;
    o.pp = k->pp;
    o.no_point_layouts = 1;
    if (all) {
        o.descent_starts = -1;
        o.descent_work = 20 * 200000;
    }
    wf_search_opplan_result r;
    double t0 = wf_now_s();
    wf_status st = wf_search_opplan(&m, &c, k->batch, &o, &r);
    *wall_s = wf_now_s() - t0;
    if (st != WF_OK) {
        fprintf(stderr, "bench_proposals: %s on %s: %s\n", k->model, k->cluster, wf_last_error());
        wf_search_opplan_result_free(&r);
        return 1;
    }
    *best_s = r.best.iteration_time_s;
    snprintf(plan, cap, "%s%s%s", r.best.plan, r.best.one_model ? "" : " (op-level model)", "");
    int rc = 0;
    *rs_s = 0;
    *rs_evals = 0;
    *rs_wall = 0;
    if (r.best.one_model && r.best.pp == 1 && !wf_model_is_moe(&m))
        rc = restarts(&m, &c, k->batch, &r.best_plan, r.budget_bytes, rs_s, rs_evals, rs_wall, rs_feasible);
    wf_search_opplan_result_free(&r);
    return rc;
}

int main(void)
{
    static const bench_case cases[] = {
        {"bert-large", "v100-ib100:nodes=16", 512, "8x8", 0},
        {"bert-large", "v100-ib100:nodes=16", 512, NULL, 1},
        {"gpt2", "dgx-a100:nodes=1", 16, NULL, 1},
        {"bert-large", "dgx-h100:nodes=2", 64, NULL, 1},
        {"gpt2", "v100-10gbe:nodes=8,devices_per_node=1", 16, NULL, 1},
        {"gpt2:dtype=fp32", "v100-ib100:nodes=1", 16, "4", 1},
        {"resnet50", "dgx-a100:nodes=2", 256, NULL, 0},
        {"vgg16", "dgx-a100:nodes=8", 128, NULL, 0},
        {"mlp", "dgx-h100:nodes=1", 64, NULL, 0},
    };
    printf("| model, batch | cluster, options | default best (s) | all best (s) | all / default | default wall (s) "
           "| all wall (s) | restarts best (s) | restarts / default | restarts priced and fitting | evaluations "
           "| restarts wall (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bench_case *k = &cases[i];
        double b0, b1, w0, w1, rs, rw, d1, d2;
        long re, e1;
        int rf = 0, f1 = 0;
        char p0[512], p1[512];
        if (run(k, 0, &b0, &w0, p0, sizeof p0, &rs, &re, &rw, &rf) ||
            run(k, 1, &b1, &w1, p1, sizeof p1, &d1, &e1, &d2, &f1)) {
            rc = 1;
            continue;
        }
        char opts[64];
        snprintf(opts, sizeof opts, "%s%s%s", k->mesh ? "--mesh " : "", k->mesh ? k->mesh : "",
                 k->pp ? (k->mesh ? ", --pp 1" : "--pp 1") : "");
        char rcol[96];
        if (re > 0 && rs < 1e299)
            snprintf(rcol, sizeof rcol, "%.5f | %.4f | %d | %ld | %.2f", rs, rs / b0, rf, re, rw);
        else
            snprintf(rcol, sizeof rcol, "%s | | 0 | %ld | ", re > 0 ? "none priced" : "(not priced: pipelined)", re);
        printf("| %s, %lld | %s%s%s | %.5f | %.5f | %.4f | %.2f | %.2f | %s |\n", k->model, (long long)k->batch,
               k->cluster, opts[0] ? ", " : "", opts, b0, b1, b1 / b0, w0, w1, rcol);
        if (strcmp(p0, p1) != 0)
            printf("|  | default: %s; all: %s | | | | | | | | | | |\n", p0, p1);
        fflush(stdout);
    }
    return rc;
}
