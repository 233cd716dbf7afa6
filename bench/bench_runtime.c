/* Runtime benchmark (prints numbers; not a test): training iteration time of
 *   gpt  4 layers, hidden 256, 4 heads, seq 128, vocab 2048 (fp32), batch 8 per rank
 *   mlp  1024-4096-4096-10, batch 64 per rank
 *   moe  llama-style, 2 layers, hidden 256, 8 experts top-2 (capacity factor
 *        1), batch 4 per rank, ep=2 in the multi-rank runs
 *   moe-tiny  the zoo's, batch 16 per rank, ep=2 in the multi-rank runs
 * with one process and, per comm schedule (wfbp, ddp, dear), with 2 ranks,
 * against weft's own prediction of that iteration on this machine.
 *
 * For each model and configuration it prints the step time of the trainer
 * (wall clock: best and median of the timed steps, and the best step's CPU
 * time), the achieved GFLOP/s (training FLOPs of the graph, dense attention,
 * per rank) as a share of the measured one-core sgemm peak, for the whole step
 * and for the kernels alone (forward + backward), and the predicted iteration
 * time with its error against the best step: `est` is wf_estimate_plan of the
 * plan dp=ranks with the schedule, `sim` the simulator's data-parallel
 * iteration (wf_sim_dp_model_build + wf_sim_dp_iteration) under the schedule,
 * both on the cluster `weft calibrate` measures here (calibrated at the start
 * of each run, by the same ranks, so ranks that share cores are predicted
 * with their share; or --cluster FILE), under the runtime's own framework
 * profile (sw=weft: its attention, masks and buffers; docs/cost-model.md).
 * Every row gives each prediction's error against the best and the median
 * step, and the rows with memory the error of the predicted peak per device
 * against the most loaded rank's (docs/runtime.md, "Measured against
 * predicted": within 15% of the median step and 10% of memory).
 *
 * With one process it also prints, per model, where the time goes: every op
 * of the forward and backward pass timed alone (the fastest of the passes, in
 * thread CPU time, which a shared machine's other processes do not inflate),
 * summed by op kind and pass, beside the cost model's time of the same ops
 * (wf_cost_op_times), and the optimizer step against the cost model's
 * memory-bound optimizer time. That table is how a systematic prediction
 * error is traced to a component (docs/runtime.md, "Prediction").
 *
 * The machine may be shared: the load average is printed at the start and
 * the end, best and median are both reported, and the prediction is compared
 * with the best step (the least disturbed). Every rank runs one BLAS thread
 * (one core per rank). Run it as
 *   bench_runtime [--iters N] [--ranks P] [--full] [--cluster FILE] [--no-profile] [--only LABEL]
 * (--only gpt512: the tensor-parallel rows of the gpt with hidden 512, seq
 * 256, 8 heads (bench/peer_torch.py's gpt512) against its dp rows alone;
 * --only pipe: the pipeline rows alone; with 2 ranks pp=2 in GPipe, 1F1B
 * and interleaved with vpp=2, with --ranks 4 pp=2,dp=2)
 * which measures one process, then runs itself under $MPIEXEC (default
 * mpiexec) -n P for the data-parallel part; or directly under mpiexec.
 *
 * With 2 or more ranks it also times tensor parallelism on the SPMD
 * executor (the gpt model, global batch 8 x ranks as in its data-parallel
 * rows): tp=2 and tp=2,sp=1 with dp = ranks / 2 (tp=2,dp=2 on 4 ranks),
 * beside the estimate (wf_estimate_plan) and the simulation (wf_sim_plan) of
 * the same plan on the calibrated cluster, the memory per rank measured
 * (executor blocks and the AdamW state; and with every activation buffer
 * apart, without the memory plan's reuse) against the estimate's, the step
 * rate against the model FLOPs at the sgemm peak, and the data-parallel
 * runtime's step (wfbp) on the same ranks.
 *
 * With 2 or more ranks it also times sharded state (--only zero): the gpt
 * model with dp = ranks under zero=0..3 (ddp), beside the estimate and the
 * simulation of the same plan, with the most loaded rank's parameter,
 * gradient, optimizer and activation memory against the predicted peak per
 * device; the pipeline rows also give the step rate against the sgemm peak
 * and the data-parallel runtime's time per sample on the same ranks.
 *
 * With 4 ranks (--only oplevel): op-level plans on a 2x2 mesh that the
 * planner writes (an MLP and cnn-tiny), run by the SPMD executor, beside the
 * one cost model's estimate and the simulation from their layouts. */
#include "cli/cli.h"
#include "kernels/kernels-impl.h"
#include "weft/cost_records.h"
#include "weft/models.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"
#include "weft/search.h"
#include "weft/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *label;
    const char *spec;
    int64_t batch; /* per rank */
    int ep;        /* expert parallelism of the multi-rank runs (0: none) */
} bench_model;

static const bench_model MODELS[] = {
    {"gpt", "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=2048,dtype=fp32", 8, 0},
    {"mlp", "mlp:sizes=1024-4096-4096-10", 64, 0},
    /* A mixture of experts, its 8 experts split over 2 ranks. Capacity factor
     * 1: the experts' work the cost model charges (tokens x top_k x cf rows)
     * bounds the filled rows the runtime computes and exchanges. */
    {"moe", "llama:layers=2,hidden=256,heads=4,seq=128,vocab=2048,ffn=512,experts=8,top_k=2,moe_ffn=256,"
            "capacity=1,dtype=fp32", 4, 2},
    /* The zoo's moe-tiny (4 experts top-2, a shared expert), ep=2. */
    {"moe-tiny", "moe-tiny", 16, 2},
};
#define NMODELS 4

/* The larger gpt of the tensor-parallel rows (--only gpt512; not in MODELS,
 * whose every row it would slow 7x). */
static const bench_model GPT512 = {"gpt512", "gpt:layers=4,hidden=512,heads=8,seq=256,vocab=2048,dtype=fp32", 8, 0};

static double cpu_thread_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_process_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void loadavg(char *buf, size_t cap)
{
    snprintf(buf, cap, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(buf, cap, "%.2f %.2f %.2f (1, 5, 15 min) on %ld cores", a, b, c, sysconf(_SC_NPROCESSORS_ONLN));
    fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *x, int n)
{
    double *c = malloc(sizeof *c * (size_t)n);
    if (!c)
        return x[0];
    memcpy(c, x, sizeof *c * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

static double minimum(const double *x, int n)
{
    double m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] < m)
            m = x[i];
    return m;
}

/* Best sgemm rate (thread CPU time) of the fast kernel over a few square
 * sizes, FLOP/s. */
static double sgemm_peak(void)
{
    double best = 0;
    static const int64_t sizes[] = {512, 1024, 2048};
    for (int s = 0; s < 3; s++) {
        int64_t n = sizes[s];
        float *a = calloc((size_t)(n * n), sizeof(float)), *b = calloc((size_t)(n * n), sizeof(float)),
              *c = calloc((size_t)(n * n), sizeof(float));
        if (!a || !b || !c) {
            free(a);
            free(b);
            free(c);
            continue;
        }
        for (int64_t i = 0; i < n * n; i++) {
            a[i] = (float)(i % 7) * 0.1f;
            b[i] = (float)(i % 5) * 0.1f;
        }
        wf_k_matmul_fwd(a, b, c, n, n, n, 0, 0);
        for (int r = 0; r < 4; r++) {
            double t0 = cpu_thread_s();
            wf_k_matmul_fwd(a, b, c, n, n, n, 0, 0);
            double rate = 2.0 * (double)n * (double)n * (double)n / (cpu_thread_s() - t0);
            if (rate > best)
                best = rate;
        }
        free(a);
        free(b);
        free(c);
    }
    return best;
}

/* Training FLOPs of one forward + backward at `batch`. */
static double train_flops(const char *spec, int64_t batch)
{
    wf_model_config m;
    wf_graph g;
    if (wf_model_lookup(spec, &m) != WF_OK || wf_model_build(&m, batch, &g) != WF_OK)
        return 0;
    wf_graph_totals t;
    wf_graph_totals_of(&g, &t);
    wf_graph_free(&g);
    return t.fwd_flops + t.bwd_flops;
}

/* ---- predictions ------------------------------------------------------------------------ */

typedef struct {
    double est_s;       /* wf_estimate_plan: iteration */
    double est_opt_s;   /* its optimizer part */
    double est_comm_s;  /* its exposed communication */
    double sim_s;       /* wf_sim_dp_iteration: iteration */
    double sim_comm_s;  /* its exposed communication */
    double limit_s;     /* the row's GEMM-bound limit (limit_of) */
} prediction;

/* The GEMM-bound limit of a plan's step on one rank: every op of its forward
 * and backward passes at the cost model's time on the calibrated cluster --
 * the products at the sgemm rate measured for their size (the efficiency
 * table of weft calibrate, its 64 x 4096 x 4096 entry for the mlp's
 * batch-64 layers), the memory-bound ops at the measured bandwidth -- over
 * all the rank's micro-batches (tensor-parallel: its shard), plus the AdamW
 * pass over its parameters at the measured bandwidth, and with pipeline
 * stages the bubble of the schedule; no communication. */
static double limit_of(const wf_estimate *e)
{
    const wf_breakdown *b = &e->breakdown;
    return b->compute + b->recompute + b->optimizer + b->bubble;
}

static wf_status predict(const wf_cluster *cl, const bench_model *bm, int nranks, const char *comm, prediction *out)
{
    memset(out, 0, sizeof *out);
    wf_model_config m;
    wf_status st = wf_model_lookup(bm->spec, &m);
    if (st != WF_OK)
        return st;
    wf_plan p;
    wf_plan_default(&p);
    p.dp = nranks;
    p.mbs = (int)bm->batch;
    p.sw = WF_SW_WEFT; /* the runtime's own framework profile */
    if (bm->ep > 1 && nranks % bm->ep == 0)
        p.ep = bm->ep, p.etp = 1;
    if (comm && (st = wf_comm_parse(comm, &p.comm)) != WF_OK)
        return st;
    wf_cost_ctx *ctx = NULL;
    if ((st = wf_cost_ctx_create(&m, cl, &ctx)) != WF_OK)
        return st;
    wf_estimate est;
    st = wf_estimate_plan(ctx, &p, bm->batch * nranks, &est);
    wf_cost_ctx_free(ctx);
    if (st != WF_OK)
        return st;
    out->est_s = est.iteration_time_s;
    out->est_opt_s = est.breakdown.optimizer;
    out->est_comm_s = est.breakdown.exposed_comm;
    out->limit_s = limit_of(&est);
    wf_arena a;
    wf_arena_init(&a, 1 << 16);
    wf_dp_model dm;
    st = wf_sim_dp_model_build(&m, cl, bm->batch, nranks, &a, &dm);
    if (st == WF_OK) {
        wf_dp_result r;
        st = wf_sim_dp_iteration(&dm, &p.comm, NULL, &r);
        if (st == WF_OK) {
            out->sim_s = r.iteration_s;
            out->sim_comm_s = r.exposed_comm_s;
        }
    }
    wf_arena_free(&a);
    return st;
}

/* ---- where the time goes (one process) ---------------------------------------------------- */

typedef struct {
    double t0_cpu, t0_wall;
    double *cpu, *wall; /* [nops] fastest time of each op over the passes */
} op_timer;

static wf_status timer_before(void *ctx, int op)
{
    op_timer *t = ctx;
    (void)op;
    t->t0_wall = wf_now_s();
    t->t0_cpu = cpu_thread_s();
    return WF_OK;
}

static wf_status timer_after(void *ctx, int op)
{
    op_timer *t = ctx;
    double c = cpu_thread_s() - t->t0_cpu, w = wf_now_s() - t->t0_wall;
    if (c < t->cpu[op])
        t->cpu[op] = c;
    if (w < t->wall[op])
        t->wall[op] = w;
    return WF_OK;
}

/* One row of the profile: an op kind in one pass. */
typedef struct {
    int kind;     /* wf_op_kind; WF_OP_COUNT for the backward's gradient sums */
    int bwd;
    int nops;
    double cpu_s, wall_s, pred_s;
} prof_row;

static prof_row *row_of(prof_row *rows, int *nrows, int kind, int bwd)
{
    for (int i = 0; i < *nrows; i++)
        if (rows[i].kind == kind && rows[i].bwd == bwd)
            return &rows[i];
    prof_row *r = &rows[(*nrows)++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->bwd = bwd;
    return r;
}

/* The cost model's time of every forward op of the model (and of its
 * backward), summed into rows by op kind: the context's ops are those of the
 * graph of wf_model_build at batch 1 (for transformers, of the model with one
 * layer, whose layer section counts `layers` times). */
static wf_status add_predicted(const wf_cluster *cl, const wf_model_config *m, int64_t mbs, prof_row *rows,
                               int *nrows)
{
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cost_ctx_create(m, cl, &ctx);
    if (st != WF_OK)
        return st;
    /* The runtime's own framework profile, as the estimate uses it. */
    wf_plan pl;
    wf_plan_default(&pl);
    pl.sw = WF_SW_WEFT;
    wf_cost_ctx_use(ctx, &pl);
    wf_cost_model_info info;
    wf_cost_model_info_of(ctx, &info);
    wf_model_config one = *m;
    if (info.transformer)
        one.layers = 1;
    wf_graph g;
    wf_cost_op_time *t = calloc((size_t)info.nops + 1, sizeof *t);
    if (!t) {
        wf_cost_ctx_free(ctx);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    if ((st = wf_model_build(&one, 1, &g)) != WF_OK) {
        free(t);
        wf_cost_ctx_free(ctx);
        return st;
    }
    st = wf_cost_op_times(ctx, mbs, 1, 0, t);
    int k = 0;
    for (int i = 0; st == WF_OK && i < g.nfwd; i++) {
        if (g.ops[i].pass != WF_PASS_FORWARD)
            continue;
        if (k >= info.nops) {
            st = wf_errorf(WF_INTERNAL, "the cost model has %d ops, the graph more", info.nops);
            break;
        }
        wf_cost_op_info oi;
        if ((st = wf_cost_op_info_of(ctx, k, &oi)) != WF_OK)
            break;
        double times = info.transformer && oi.section == WF_COST_SEC_LAYER ? (double)m->layers : 1.0;
        row_of(rows, nrows, g.ops[i].kind, 0)->pred_s += times * t[k].fwd_s;
        row_of(rows, nrows, g.ops[i].kind, 1)->pred_s += times * (t[k].bwd_in_s + t[k].bwd_w_s);
        k++;
    }
    wf_graph_free(&g);
    free(t);
    wf_cost_ctx_free(ctx);
    return st;
}

/* Times every op of `passes` forward + backward passes and the optimizer
 * step, and prints them beside the cost model's times. */
static wf_status profile(const wf_cluster *cl, const bench_model *bm, int passes, int nranks, int print)
{
    wf_model_config m;
    wf_graph g;
    wf_status st = wf_model_lookup(bm->spec, &m);
    if (st != WF_OK || (st = wf_model_build(&m, bm->batch, &g)) != WF_OK)
        return st;
    wf_exec_opts eo = {0, 1};
    wf_exec *e = NULL;
    st = wf_exec_create(&g, &eo, &e);
    wf_graph_free(&g);
    if (st != WF_OK)
        return st;
    const wf_graph *eg = wf_exec_graph(e);
    op_timer tm = {0, 0, malloc(sizeof(double) * (size_t)eg->nops), malloc(sizeof(double) * (size_t)eg->nops)};
    prof_row rows[2 * WF_OP_COUNT + 2];
    int nrows = 0;
    wf_optim_config oc;
    wf_optim_defaults(WF_OPTIM_ADAMW, &oc);
    wf_optim *o = NULL;
    if (!tm.cpu || !tm.wall) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto done;
    }
    if ((st = wf_optim_create(&oc, e, &o)) != WF_OK)
        goto done;
    for (int i = 0; i < eg->nops; i++)
        tm.cpu[i] = tm.wall[i] = 1e30;
    wf_exec_hooks h = {&tm, timer_before, timer_after};
    wf_exec_set_hooks(e, &h);
    double opt_cpu = 1e30, opt_wall = 1e30;
    int64_t nparams = 0;
    for (int i = 0; i < wf_exec_nparams(e); i++)
        nparams += wf_exec_param_at(e, i)->numel;
    for (int it = 0; it < passes + 1 && st == WF_OK; it++) {
        float loss;
        if ((st = wf_exec_forward(e, &loss)) != WF_OK || (st = wf_exec_backward(e, 0)) != WF_OK)
            break;
        double w0 = wf_now_s(), c0 = cpu_thread_s();
        for (int i = 0; i < wf_exec_nparams(e); i++)
            wf_optim_update(o, e, i, 1.0f, it + 1);
        double c = cpu_thread_s() - c0, w = wf_now_s() - w0;
        if (it > 0) { /* the first pass warms up (page faults, BLAS buffers) */
            opt_cpu = c < opt_cpu ? c : opt_cpu;
            opt_wall = w < opt_wall ? w : opt_wall;
        } else {
            for (int i = 0; i < eg->nops; i++)
                tm.cpu[i] = tm.wall[i] = 1e30;
        }
    }
    if (st != WF_OK)
        goto done;
    for (int i = 0; i < eg->nops; i++) {
        const wf_op *op = &eg->ops[i];
        int bwd = op->pass == WF_PASS_BACKWARD;
        int kind = !bwd ? (int)op->kind : op->fwd_op >= 0 ? (int)eg->ops[op->fwd_op].kind : WF_OP_COUNT;
        prof_row *r = row_of(rows, &nrows, kind, bwd);
        r->nops++;
        r->cpu_s += tm.cpu[i];
        r->wall_s += tm.wall[i];
    }
    if ((st = add_predicted(cl, &m, bm->batch, rows, &nrows)) != WF_OK || !print)
        goto done;
    if (nranks == 1)
        printf("\n%s, one process, batch %lld: ", bm->label, (long long)bm->batch);
    else
        printf("\n%s, %d ranks at once (rank 0's times), batch %lld per rank: ", bm->label, nranks,
               (long long)bm->batch);
    printf("each op the fastest of %d passes (thread CPU time;\nwall in brackets), summed by kind, against the cost "
           "model's time of the same ops on the calibrated cluster\n", passes);
    printf("  %-16s %4s %4s %10s %10s %10s %7s\n", "op", "pass", "ops", "cpu_ms", "(wall_ms)", "model_ms", "model/cpu");
    double tot[2][3] = {{0}};
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nrows; i++) {
            const prof_row *r = &rows[i];
            if (r->bwd != pass || (r->nops == 0 && r->pred_s == 0))
                continue;
            const char *name = r->kind == WF_OP_COUNT ? "(gradient sums)" : wf_op_name((wf_op_kind)r->kind);
            printf("  %-16s %4s %4d %10.2f %10.2f %10.2f %7.2f\n", name, pass ? "bwd" : "fwd", r->nops, 1e3 * r->cpu_s,
                   1e3 * r->wall_s, 1e3 * r->pred_s, r->cpu_s > 0 ? r->pred_s / r->cpu_s : 0);
            tot[pass][0] += r->cpu_s;
            tot[pass][1] += r->wall_s;
            tot[pass][2] += r->pred_s;
        }
    prediction pr;
    if ((st = predict(cl, bm, 1, NULL, &pr)) != WF_OK)
        goto done;
    for (int pass = 0; pass < 2; pass++)
        printf("  %-16s %4s %4s %10.2f %10.2f %10.2f %7.2f\n", pass ? "backward" : "forward", "", "", 1e3 * tot[pass][0],
               1e3 * tot[pass][1], 1e3 * tot[pass][2], tot[pass][2] / tot[pass][0]);
    printf("  %-16s %4s %4s %10.2f %10.2f %10.2f %7.2f   (%.1fM parameters: %.1f GB/s)\n", "optimizer", "", "",
           1e3 * opt_cpu, 1e3 * opt_wall, 1e3 * pr.est_opt_s, pr.est_opt_s / opt_cpu, (double)nparams / 1e6,
           28.0 * (double)nparams / opt_cpu / 1e9);
    double mc = tot[0][0] + tot[1][0] + opt_cpu, mw = tot[0][1] + tot[1][1] + opt_wall;
    printf("  %-16s %4s %4s %10.2f %10.2f %10.2f %7.2f   (estimate %.2f ms, simulator %.2f ms)\n", "total", "", "",
           1e3 * mc, 1e3 * mw, 1e3 * (tot[0][2] + tot[1][2] + pr.est_opt_s), (tot[0][2] + tot[1][2] + pr.est_opt_s) / mc,
           1e3 * pr.est_s, 1e3 * pr.sim_s);
done:
    wf_optim_free(o);
    free(tm.cpu);
    free(tm.wall);
    wf_exec_free(e);
    return st;
}

/* ---- the trainer's steps -------------------------------------------------------------------- */

typedef struct {
    double step_s, best_step_s;     /* wall: median, fastest */
    double cpu_best_s;              /* process CPU time of the fastest step */
    double comm_s;                  /* exposed communication, median */
    double kernels_s, best_kernels_s; /* forward + backward alone: median, fastest */
} timing;

/* `iters` steps after two warm-up steps; then forward + backward alone on the
 * trainer's executor. */
static wf_status time_training(const bench_model *bm, const char *comm, int self, int nranks, int iters, timing *out)
{
    wf_train_config c;
    memset(&c, 0, sizeof c);
    c.model = bm->spec;
    c.data = "synthetic";
    c.batch = bm->batch * nranks;
    char plan[64] = "auto";
    if (bm->ep > 1 && nranks % bm->ep == 0)
        snprintf(plan, sizeof plan, "dp=%d,ep=%d", nranks, bm->ep);
    c.plan = plan;
    c.comm = comm;
    wf_optim_defaults(WF_OPTIM_ADAMW, &c.optim);
    c.seed = 1;
    c.self = self;
    wf_train *t = NULL;
    wf_status st = wf_train_create(&c, &t);
    if (st != WF_OK)
        return st;
    double *ts = calloc((size_t)iters, sizeof *ts), *cs = calloc((size_t)iters, sizeof *cs),
           *ms = calloc((size_t)iters, sizeof *ms);
    if (!ts || !cs || !ms) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < iters + 2 && st == WF_OK; i++) {
        wf_train_stats s;
        double c0 = cpu_process_s();
        st = wf_train_step(t, &s);
        if (i >= 2) {
            ts[i - 2] = s.time_s;
            cs[i - 2] = cpu_process_s() - c0;
            ms[i - 2] = s.comm_s;
        }
    }
    if (st == WF_OK)
        st = wf_train_sync(t);
    if (st != WF_OK)
        goto done;
    int best = 0;
    for (int i = 1; i < iters; i++)
        if (ts[i] < ts[best])
            best = i;
    out->best_step_s = ts[best];
    out->cpu_best_s = cs[best];
    out->step_s = median(ts, iters);
    out->comm_s = median(ms, iters);
    wf_exec *e = wf_train_exec(t);
    wf_exec_set_hooks(e, NULL);
    for (int i = 0; i < iters; i++) {
        float loss;
        double t0 = wf_now_s();
        wf_exec_forward(e, &loss);
        wf_exec_backward(e, 0);
        ts[i] = wf_now_s() - t0;
    }
    out->best_kernels_s = minimum(ts, iters);
    out->kernels_s = median(ts, iters);
done:
    free(ts);
    free(cs);
    free(ms);
    wf_train_free(t);
    return st;
}

static void header(void)
{
    printf("\nwall-clock step times: best and median of the timed steps; cpu: the best step's process CPU time;\n"
           "est/sim: predicted iteration and its error against the best and the median step; GF/s and %%peak: the\n"
           "step at its best; kern: forward + backward alone at their best; lim: the step's GEMM-bound limit (its\n"
           "products at the sgemm rate calibrated for their size, memory-bound ops and AdamW at the measured\n"
           "bandwidth, no communication) and %%lim = lim / median step, %%lcpu = lim / cpu (a loaded machine's\n"
           "other processes take wall time, not this process's CPU time; MPI's waits spin, so they count)\n");
    printf("%-4s %-5s %5s %-5s %8s %8s %8s %8s %8s %6s %6s %8s %6s %6s %7s %6s %8s %7s %6s %8s %5s %5s\n", "mdl", "ranks",
           "batch", "comm", "best_ms", "med_ms", "cpu_ms", "comm_ms", "est_ms", "e/best", "e/med", "sim_ms", "e/best",
           "e/med", "GF/s", "%peak", "kern_ms", "GF/s", "%peak", "lim_ms", "%lim", "%lcpu");
}

static void row(const bench_model *bm, int nranks, const char *comm, const timing *t, double peak,
                const prediction *p)
{
    double f = train_flops(bm->spec, bm->batch);
    printf("%-4s %-5d %5lld %-5s %8.1f %8.1f %8.1f %8.1f %8.1f %+5.0f%% %+5.0f%% %8.1f %+5.0f%% %+5.0f%% %7.1f %5.0f%% "
           "%8.1f %7.1f %5.0f%% %8.1f %4.0f%% %4.0f%%\n",
           bm->label, nranks, (long long)(bm->batch * nranks), comm ? comm : "-", 1e3 * t->best_step_s,
           1e3 * t->step_s, 1e3 * t->cpu_best_s, 1e3 * t->comm_s, 1e3 * p->est_s,
           100.0 * (p->est_s / t->best_step_s - 1), 100.0 * (p->est_s / t->step_s - 1), 1e3 * p->sim_s,
           100.0 * (p->sim_s / t->best_step_s - 1), 100.0 * (p->sim_s / t->step_s - 1), f / t->best_step_s / 1e9,
           100.0 * f / t->best_step_s / peak, 1e3 * t->best_kernels_s, f / t->best_kernels_s / 1e9,
           100.0 * f / t->best_kernels_s / peak, 1e3 * p->limit_s, 100.0 * p->limit_s / t->step_s,
           100.0 * p->limit_s / t->cpu_best_s);
    fflush(stdout);
}

/* A plan trained for 2 warm-up and `iters` timed steps (synthetic data,
 * AdamW, seed 1): each timed step's time and exposed communication, and the
 * trainer's info after them. */
typedef struct {
    double *ts, *ms;    /* [iters] */
    wf_train_info info; /* valid when the run worked */
} timed_run;

static wf_status train_timed(const char *spec, int64_t batch, const char *plan, const char *comm, int iters,
                             timed_run *r)
{
    memset(r, 0, sizeof *r);
    wf_train_config c;
    memset(&c, 0, sizeof c);
    c.model = spec;
    c.data = "synthetic";
    c.batch = batch;
    c.plan = plan;
    c.comm = comm;
    wf_optim_defaults(WF_OPTIM_ADAMW, &c.optim);
    c.seed = 1;
    r->ts = calloc((size_t)iters, sizeof *r->ts);
    r->ms = calloc((size_t)iters, sizeof *r->ms);
    if (!r->ts || !r->ms)
        return wf_errorf(WF_NOMEM, "out of memory timing %s", plan);
    wf_train *t = NULL;
    wf_status st = wf_train_create(&c, &t);
    for (int i = 0; i < iters + 2 && st == WF_OK; i++) {
        wf_train_stats s;
        st = wf_train_step(t, &s);
        if (i >= 2) {
            r->ts[i - 2] = s.time_s;
            r->ms[i - 2] = s.comm_s;
        }
    }
    if (st == WF_OK)
        wf_train_info_of(t, &r->info);
    wf_train_free(t);
    return st;
}

static void timed_free(timed_run *r)
{
    free(r->ts);
    free(r->ms);
    memset(r, 0, sizeof *r);
}

/* The estimate and the simulation of plan string `plan` of model `spec` at
 * `batch` on cluster cl (mbs > 0 and comm override the string's). */
static wf_status predict_plan(const wf_cluster *cl, const char *spec, const char *plan, int mbs, const char *comm,
                              int64_t batch, wf_estimate *est, wf_sim_plan_result *sr)
{
    memset(est, 0, sizeof *est);
    memset(sr, 0, sizeof *sr);
    wf_model_config m;
    wf_plan p;
    wf_status st = wf_model_lookup(spec, &m);
    if (st == WF_OK)
        st = wf_plan_parse(plan, &p);
    if (st == WF_OK && mbs > 0)
        p.mbs = mbs;
    if (st == WF_OK)
        p.sw = WF_SW_WEFT; /* the runtime's own framework profile */
    if (st == WF_OK && comm)
        st = wf_comm_parse(comm, &p.comm);
    wf_cost_ctx *ctx = NULL;
    if (st == WF_OK && (st = wf_cost_ctx_create(&m, cl, &ctx)) == WF_OK)
        st = wf_estimate_plan(ctx, &p, batch, est);
    wf_cost_ctx_free(ctx);
    wf_sim_plan_opts so;
    memset(&so, 0, sizeof so);
    if (st == WF_OK)
        st = wf_sim_plan(&m, cl, &p, batch, &so, sr);
    return st;
}


/* ---- pipeline stages ---------------------------------------------------------------------- */

/* The pipelined rows: the gpt model cut into stages, global batch 8 per
 * pipeline in micro-batches of 2 (m = 4), measured against the estimate and
 * the simulator of the same plan (wf_estimate_plan, wf_sim_plan) on the same
 * cluster, time and memory: the most loaded rank's parameters, gradients,
 * AdamW state, activation slots (arena and leaves times the micro-batches in
 * flight) and kernel scratch, against the predicted peak per device. */
typedef struct {
    const char *label;
    int pp, vpp, dp, tp;
    const char *pipe;
} pipe_case;

static void pipe_rows(const wf_cluster *cluster, double peak, int nranks, int rank, int iters)
{
    /* The runtime keeps no framework reservation (a device context, allocator
     * slack): predict without the cluster's mem_reserved_bytes. */
    wf_cluster local = *cluster;
    local.mem_reserved_bytes = 0;
    const wf_cluster *cl = &local;
    static const pipe_case cases[] = {
        {"pp2 gpipe", 2, 1, 1, 1, "gpipe"}, {"pp2 1f1b", 2, 1, 1, 1, "1f1b"}, {"pp2 vpp2", 2, 2, 1, 1, "1f1b"},
        {"pp2 dp2", 2, 1, 2, 1, "1f1b"},    {"pp2 tp2", 2, 1, 1, 2, "1f1b"},
    };
    const bench_model *bm = &MODELS[0];
    /* The data-parallel runtime on the same ranks (ddp, batch 8 per rank):
     * vs_dp compares the time per sample. */
    timing dp;
    memset(&dp, 0, sizeof dp);
    if (time_training(bm, "ddp", 0, nranks, iters, &dp) != WF_OK && rank == 0)
        fprintf(stderr, "pipe: the data-parallel reference: %s\n", wf_last_error());
    if (rank == 0) {
        printf("\npipeline stages (%s, mbs 2, 4 micro-batches per pipeline, ddp within each stage's dp group):\n"
               "mem: the most loaded rank (parameters, gradients, AdamW state, activation slots, scratch) "
               "against the predicted peak per device without the cluster's reserved memory; GF/s and %%peak: the "
               "model FLOPs per rank at the sgemm peak; bub_ms: the estimate's longest stage wait, bubble_max_s (against "
               "comm_ms, the first stage's measured wait; the first stage waits longest beside a heavy head); "
               "vs_dp: time per sample over the data-parallel runtime's "
               "(ddp, %lld per rank, best %.1f ms)\n", bm->label, (long long)bm->batch, 1e3 * dp.best_step_s);
        printf("%-10s %5s %5s %8s %8s %8s %8s %6s %6s %8s %6s %6s %7s %6s %6s %7s %7s %7s %7s %8s %8s %6s %8s "
               "%6s %8s %5s %7s\n",
               "plan", "ranks", "batch", "best_ms", "med_ms", "comm_ms", "est_ms", "e/best", "e/med", "sim_ms",
               "e/best", "e/med", "GF/s", "%peak", "vs_dp", "param", "grad", "optim", "act", "mem_MiB", "est_MiB",
               "err", "sim_MiB", "err", "lim_ms", "%lim", "bub_ms");
    }
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const pipe_case *pc = &cases[k];
        if (pc->pp * pc->dp * pc->tp != nranks)
            continue;
        char plan[96];
        snprintf(plan, sizeof plan, "pp=%d,vpp=%d,dp=%d,tp=%d,mbs=2,pipe=%s,comm=ddp", pc->pp, pc->vpp, pc->dp, pc->tp,
                 pc->pipe);
        int64_t batch = 8 * pc->dp;
        timed_run run;
        wf_status st = train_timed(bm->spec, batch, plan, NULL, iters, &run);
        double *ts = run.ts, *ms = run.ms;
        const wf_train_info info = run.info;
        /* Each block's largest over the ranks, and the largest total. AdamW
         * keeps two values per parameter. */
        uint64_t blk[5] = {0}, hib[5] = {0}, lo = 0, hi = 0;
        if (st == WF_OK) {
            const wf_exec_memory *m = &info.memory;
            blk[0] = m->param_bytes;
            blk[1] = m->grad_bytes;
            blk[2] = 2 * m->param_bytes;
            blk[3] = m->leaf_bytes + m->arena_bytes + m->scratch_bytes;
            blk[4] = blk[0] + blk[1] + blk[2] + blk[3];
        }
        for (int b = 0; b < 5; b++)
            wf_world_minmax_u64(blk[b], &lo, &hib[b]);
        hi = hib[4];
        /* Each rank's median wait (comm_s: time blocked in MPI), gathered
         * rank by rank; with one rank per stage, rank k is stage k. */
        double waits[8] = {0};
        const uint64_t my_wait_ns = st == WF_OK ? (uint64_t)(1e9 * median(ms, iters)) : 0;
        for (int r = 0; r < nranks && r < 8; r++) {
            uint64_t wlo = 0, whi = 0;
            wf_world_minmax_u64(rank == r ? my_wait_ns : 0, &wlo, &whi);
            waits[r] = (double)whi / 1e9;
        }
        wf_estimate est;
        wf_sim_plan_result sr;
        if (st == WF_OK)
            st = predict_plan(cl, bm->spec, plan, 0, NULL, batch, &est, &sr);
        if (st != WF_OK) {
            if (rank == 0)
                fprintf(stderr, "%s: %s\n", pc->label, wf_last_error());
        } else if (rank == 0) {
            double best = minimum(ts, iters), med = median(ts, iters), mib = 1048576.0;
            double flops = train_flops(bm->spec, batch) / (double)nranks;
            double dp_per_sample = dp.best_step_s / (double)(bm->batch * nranks);
            double vs_dp = dp.best_step_s > 0 ? best / (double)batch / dp_per_sample : 0;
            printf("%-10s %5d %5lld %8.1f %8.1f %8.1f %8.1f %+5.0f%% %+5.0f%% %8.1f %+5.0f%% %+5.0f%% %7.1f %5.0f%% "
                   "%5.2fx %7.2f %7.2f %7.2f %7.2f %8.2f %8.2f %+5.0f%% %8.2f %+5.0f%% %8.1f %4.0f%% %7.1f\n",
                   pc->label, nranks, (long long)batch, 1e3 * best, 1e3 * med, 1e3 * median(ms, iters),
                   1e3 * est.iteration_time_s, 100.0 * (est.iteration_time_s / best - 1),
                   100.0 * (est.iteration_time_s / med - 1), 1e3 * sr.iteration_time_s,
                   100.0 * (sr.iteration_time_s / best - 1), 100.0 * (sr.iteration_time_s / med - 1), flops / best / 1e9,
                   100.0 * flops / best / peak, vs_dp, (double)hib[0] / mib, (double)hib[1] / mib,
                   (double)hib[2] / mib, (double)hib[3] / mib, (double)hi / mib, est.memory_per_device_bytes / mib,
                   100.0 * (est.memory_per_device_bytes / (double)hi - 1), sr.peak_memory_bytes / mib,
                   100.0 * (sr.peak_memory_bytes / (double)hi - 1), 1e3 * limit_of(&est), 100.0 * limit_of(&est) / med,
                   1e3 * est.bubble_max_s);
            /* The wait of each stage against the simulator's: the time it
             * is neither computing nor sending (its idle, the fill and drain
             * and the wait for a slower neighbour) plus its exposed
             * communication. The estimate's bubble_max_s is the longest of
             * them: the slowest stage's idle (breakdown.bubble) and, for a
             * faster stage, the wait for the slower one m times over. */
            if (nranks == pc->pp && sr.nstages == pc->pp && pc->pp <= 8) {
                printf("%-10s wait per stage, measured (median) against the simulation's idle + exposed comm:",
                       "");
                for (int q = 0; q < pc->pp; q++) {
                    double pw = sr.stage[q].bd.bubble + sr.stage[q].bd.exposed_comm;
                    printf("  stage %d %.1f / %.1f ms (%+.0f%%)", q, 1e3 * waits[q], 1e3 * pw,
                           waits[q] > 0 ? 100.0 * (pw / waits[q] - 1) : 0.0);
                }
                printf("\n");
            }
            fflush(stdout);
        }
        timed_free(&run);
    }
}

/* ---- sharded data-parallel state (ZeRO) ----------------------------------------------------- */

/* The gpt model, global batch 8 x ranks, dp = ranks under zero=0 (the
 * baseline: vs_dp is each row's best step over its best), 1, 2 and 3 (ddp
 * buckets; ZeRO-3 its per-op units), zero=1 under dear (each rank steps its
 * shard, the all-gather moves parameters), on 4 ranks ZeRO over each
 * pipeline stage's data-parallel group (pp=2,dp=2, zero=1 and zero=2 under
 * dear), and the plan `--plan auto` picks for these ranks (on the local
 * preset); each against the estimate and the simulation of the same plan on
 * the calibrated cluster without its reserved memory; memory: the most
 * loaded rank's parameters (ZeRO-3: its shard and the peak of units
 * gathered), gradients (the local block and the reduced shard), optimizer
 * state and activations (arena, leaves, scratch), against the predicted peak
 * per device. */
typedef struct {
    char plan[160];
    const char *comm;
    int mbs; /* the prediction's micro-batch: 0 = the plan's */
} zero_case;

static void zero_rows(const wf_cluster *cluster, double peak, int iters, int rank, int nranks)
{
    wf_cluster local = *cluster;
    local.mem_reserved_bytes = 0;
    const wf_cluster *cl = &local;
    const bench_model *bm = &MODELS[0];
    int64_t batch = bm->batch * nranks;
    double flops = train_flops(bm->spec, batch) / (double)nranks, base = 0, mib = 1048576.0;
    zero_case cases[10];
    int nc = 0;
    for (int z = 0; z <= 3; z++) {
        snprintf(cases[nc].plan, sizeof cases[nc].plan, "dp=%d,zero=%d", nranks, z);
        cases[nc].comm = "ddp";
        cases[nc++].mbs = (int)bm->batch;
    }
    snprintf(cases[nc].plan, sizeof cases[nc].plan, "dp=%d,zero=1", nranks);
    cases[nc].comm = "dear";
    cases[nc++].mbs = (int)bm->batch;
    if (nranks == 4) {
        /* Global batch 32: 16 per pipeline in 4 micro-batches of 4. */
        snprintf(cases[nc].plan, sizeof cases[nc].plan, "pp=2,dp=2,mbs=4,zero=1");
        cases[nc].comm = "ddp";
        cases[nc++].mbs = 0;
        snprintf(cases[nc].plan, sizeof cases[nc].plan, "pp=2,dp=2,mbs=4,zero=2");
        cases[nc].comm = "dear";
        cases[nc++].mbs = 0;
    }
    {
        wf_train_config ac;
        memset(&ac, 0, sizeof ac);
        ac.model = bm->spec;
        ac.batch = batch;
        char note[320];
        if (wf_cli_auto_plan(&ac, cases[nc].plan, sizeof cases[nc].plan, note, sizeof note) == WF_OK) {
            cases[nc].comm = NULL;
            cases[nc++].mbs = 0;
            if (rank == 0)
                printf("\n--plan auto on %d ranks: %s\n", nranks, note);
        } else if (rank == 0) {
            fprintf(stderr, "--plan auto: %s\n", wf_last_error());
        }
    }
    if (rank == 0) {
        printf("\nsharded state (ZeRO), %s, global batch %lld on %d ranks; memory: the most loaded rank's "
               "blocks (MiB) against the predicted peak per device\n",
               bm->label, (long long)batch, nranks);
        printf("%-24s %-5s %8s %8s %8s %8s %6s %6s %8s %6s %6s %7s %6s %6s %7s %7s %7s %7s %8s %8s %6s %8s %6s\n",
               "plan", "comm", "best_ms", "med_ms", "comm_ms", "est_ms", "e/best", "e/med", "sim_ms", "e/best",
               "e/med", "GF/s", "%peak", "vs_dp", "param", "grad", "optim", "act", "mem_MiB", "est_MiB", "err",
               "sim_MiB", "err");
    }
    for (int k = 0; k < nc; k++) {
        const char *plan = cases[k].plan;
        timed_run run;
        wf_status st = train_timed(bm->spec, batch, plan, cases[k].comm, iters, &run);
        double *ts = run.ts, *ms = run.ms;
        const wf_train_info info = run.info;
        const wf_exec_memory *m = &info.memory;
        uint64_t blk[5] = {m->param_bytes, m->grad_bytes, info.optimizer_bytes,
                           m->leaf_bytes + m->arena_bytes + m->scratch_bytes, 0}, hi[5];
        blk[4] = blk[0] + blk[1] + blk[2] + blk[3];
        for (int j = 0; j < 5; j++) {
            uint64_t lo;
            wf_world_minmax_u64(blk[j], &lo, &hi[j]);
        }
        wf_estimate est;
        wf_sim_plan_result sr;
        wf_status ps = predict_plan(cl, bm->spec, plan, cases[k].mbs, cases[k].comm, batch, &est, &sr);
        if (st == WF_OK && rank == 0) {
            double best = minimum(ts, iters), med = median(ts, iters);
            if (k == 0)
                base = best;
            printf("%-24s %-5s %8.1f %8.1f %8.1f %8.1f %+5.0f%% %+5.0f%% %8.1f %+5.0f%% %+5.0f%% %7.1f %5.0f%% "
                   "%5.2fx %7.2f %7.2f %7.2f %7.2f %8.2f %8.2f %+5.0f%% %8.2f %+5.0f%%%s\n",
                   cases[k].comm ? plan : "auto (above)", cases[k].comm ? cases[k].comm : "plan", 1e3 * best, 1e3 * med, 1e3 * median(ms, iters),
                   1e3 * est.iteration_time_s, 100.0 * (est.iteration_time_s / best - 1),
                   100.0 * (est.iteration_time_s / med - 1), 1e3 * sr.iteration_time_s,
                   100.0 * (sr.iteration_time_s / best - 1), 100.0 * (sr.iteration_time_s / med - 1),
                   flops / best / 1e9, 100.0 * flops / best / peak, best / base, (double)hi[0] / mib,
                   (double)hi[1] / mib, (double)hi[2] / mib, (double)hi[3] / mib, (double)hi[4] / mib,
                   est.memory_per_device_bytes / mib, 100.0 * (est.memory_per_device_bytes / (double)hi[4] - 1),
                   sr.peak_memory_bytes / mib, 100.0 * (sr.peak_memory_bytes / (double)hi[4] - 1),
                   ps == WF_OK ? "" : "  (no prediction)");
            fflush(stdout);
        } else if (st != WF_OK && rank == 0) {
            fprintf(stderr, "zero %s: %s\n", plan, wf_last_error());
        }
        timed_free(&run);
    }
}

/* ---- tensor parallelism on the SPMD executor ----------------------------------------------- */

static void spmd_rows(const bench_model *bm, const wf_cluster *cluster, double peak, int iters, int rank, int nranks)
{
    /* The runtime keeps no framework reservation (as the pipeline rows). */
    wf_cluster local = *cluster;
    local.mem_reserved_bytes = 0;
    const wf_cluster *cl = &local;
    int64_t batch = bm->batch * nranks;
    timing dp;
    if (time_training(bm, "wfbp", 0, nranks, iters, &dp) != WF_OK) {
        if (rank == 0)
            fprintf(stderr, "spmd: the data-parallel reference: %s\n", wf_last_error());
        return;
    }
    if (rank == 0) {
        printf("\ntensor parallelism (SPMD executor), %s, global batch %lld on %d ranks; dp: the data-parallel "
               "runtime (wfbp) on the same ranks, best %.1f ms, median %.1f ms; thr: the throughput against "
               "it, dp's median step / the row's\n",
               bm->label, (long long)batch, nranks, 1e3 * dp.best_step_s, 1e3 * dp.step_s);
        printf("%-18s %8s %8s %8s %8s %6s %6s %8s %6s %6s %7s %6s %6s %8s %8s %8s %6s %8s %6s %8s %5s %5s\n", "plan",
               "best_ms", "med_ms", "comm_ms", "est_ms", "e/best", "e/med", "sim_ms", "e/best", "e/med", "GF/s",
               "%peak", "vs_dp", "mem_MiB", "unpl_MiB", "est_MiB", "err", "sim_MiB", "err", "lim_ms", "%lim", "thr");
    }
    double flops = train_flops(bm->spec, batch) / (double)nranks;
    for (int sp = 0; sp <= 1; sp++) {
        char plan[64];
        snprintf(plan, sizeof plan, "dp=%d,tp=2,sp=%d", nranks / 2, sp);
        timed_run run;
        wf_status st = train_timed(bm->spec, batch, plan, "wfbp", iters, &run);
        double *ts = run.ts, *ms = run.ms;
        const wf_train_info info = run.info;
        /* The prediction of the same plan on the calibrated cluster. */
        wf_estimate est;
        wf_sim_plan_result sr;
        wf_status ps = predict_plan(cl, bm->spec, plan, (int)(batch / (nranks / 2)), "wfbp", batch, &est, &sr);
        if (st == WF_OK && rank == 0) {
            double best = minimum(ts, iters), med = median(ts, iters);
            const wf_exec_memory *mm = &info.memory;
            double mem = (double)(mm->param_bytes + mm->grad_bytes + mm->leaf_bytes + mm->arena_bytes +
                                  mm->scratch_bytes) +
                         2.0 * (double)mm->param_bytes;
            double unplanned = mem - (double)mm->arena_bytes + (double)mm->unplanned_bytes;
            printf("%-18s %8.1f %8.1f %8.1f %8.1f %+5.0f%% %+5.0f%% %8.1f %+5.0f%% %+5.0f%% %7.1f %5.0f%% %5.2fx "
                   "%8.1f %8.1f %8.1f %+5.0f%% %8.1f %+5.0f%% %8.1f %4.0f%% %5.2f%s\n",
                   plan, 1e3 * best, 1e3 * med, 1e3 * median(ms, iters), 1e3 * est.iteration_time_s,
                   100.0 * (est.iteration_time_s / best - 1), 100.0 * (est.iteration_time_s / med - 1),
                   1e3 * sr.iteration_time_s, 100.0 * (sr.iteration_time_s / best - 1),
                   100.0 * (sr.iteration_time_s / med - 1), flops / best / 1e9, 100.0 * flops / best / peak,
                   best / dp.best_step_s, mem / 1048576.0, unplanned / 1048576.0, est.memory_per_device_bytes / 1048576.0,
                   100.0 * (est.memory_per_device_bytes / mem - 1), sr.peak_memory_bytes / 1048576.0,
                   100.0 * (sr.peak_memory_bytes / mem - 1), 1e3 * limit_of(&est), 100.0 * limit_of(&est) / med,
                   dp.step_s / med, ps == WF_OK ? "" : "  (no prediction)");
            fflush(stdout);
        } else if (st != WF_OK && rank == 0) {
            fprintf(stderr, "spmd %s: %s\n", plan, wf_last_error());
        }
        timed_free(&run);
    }
}

/* ---- op-level plans on a 2x2 mesh (SPMD executor) ------------------------------------------- */

/* The planner's op-level plan for model `spec` on a mesh of two by two
 * (the bench's cluster with four devices per node), trained by the SPMD
 * executor on 4 ranks against its estimate and simulation from its layouts. */
static void oplevel_row(const wf_cluster *cl, double peak, int iters, int rank, int nranks, const char *spec,
                        int64_t batch, double dp_best)
{
    wf_model_config m;
    wf_cluster c4 = *cl;
    c4.level[0].size = nranks;
    c4.mem_reserved_bytes = 0; /* the CPU runtime keeps none (as the pipeline rows predict) */
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.mesh = "2x2";
    o.pp = 1;
    wf_search_opplan_result r;
    wf_status st = wf_model_lookup(spec, &m);
    if (st == WF_OK)
        st = wf_search_opplan(&m, &c4, batch, &o, &r);
    if (st != WF_OK) {
        if (rank == 0)
            fprintf(stderr, "oplevel %s: %s\n", spec, wf_last_error());
        return;
    }
    /* Every rank writes the same file in its own name; the plan is read from it. */
    char path[256];
    snprintf(path, sizeof path, "/tmp/weft-bench-oplevel-%d-%d.json", (int)getpid(), rank);
    wf_plan_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model, sizeof meta.model, "%s", spec);
    snprintf(meta.cluster, sizeof meta.cluster, "%s", "local");
    meta.batch = batch;
    st = wf_layout_write_file(path, &r.best_plan, &meta, NULL);
    wf_estimate est;
    wf_sim_plan_result sr;
    memset(&est, 0, sizeof est);
    memset(&sr, 0, sizeof sr);
    wf_cost_ctx *ctx = NULL;
    wf_status ps = wf_cost_ctx_create(&m, &c4, &ctx);
    if (ps == WF_OK)
        ps = wf_layout_cost(&m, &c4, ctx, batch, &r.best_plan, &est, NULL);
    wf_cost_ctx_free(ctx);
    wf_sim_plan_opts so;
    memset(&so, 0, sizeof so);
    if (ps == WF_OK)
        ps = wf_sim_oplevel(&m, &c4, &r.best_plan, batch, &so, &sr, NULL);
    timed_run run;
    memset(&run, 0, sizeof run);
    if (st == WF_OK)
        st = train_timed(spec, batch, path, "wfbp", iters, &run);
    double *ts = run.ts, *ms = run.ms;
    const wf_train_info info = run.info;
    if (st == WF_OK && rank == 0) {
        double best = minimum(ts, iters), med = median(ts, iters);
        double flops = train_flops(spec, batch) / (double)nranks;
        const wf_exec_memory *mm = &info.memory;
        double mem = (double)(mm->param_bytes + mm->grad_bytes + mm->leaf_bytes + mm->arena_bytes +
                              mm->scratch_bytes) +
                     2.0 * (double)mm->param_bytes;
        printf("%-26s %-30s %8.2f %8.2f %8.2f %8.2f %+5.0f%% %+5.0f%% %8.2f %+5.0f%% %+5.0f%% %7.1f %5.0f%% %5.2fx "
               "%8.2f %8.2f %+5.0f%%%s\n",
               spec, r.best_plan.mesh[0] ? r.best.plan : "", 1e3 * best, 1e3 * med, 1e3 * median(ms, iters),
               1e3 * est.iteration_time_s, 100.0 * (est.iteration_time_s / best - 1),
               100.0 * (est.iteration_time_s / med - 1), 1e3 * sr.iteration_time_s,
               100.0 * (sr.iteration_time_s / best - 1), 100.0 * (sr.iteration_time_s / med - 1), flops / best / 1e9,
               100.0 * flops / best / peak, dp_best > 0 ? best / dp_best : 0, mem / 1048576.0,
               est.memory_per_device_bytes / 1048576.0, 100.0 * (est.memory_per_device_bytes / mem - 1),
               ps == WF_OK ? "" : "  (no prediction)");
        fflush(stdout);
    } else if (st != WF_OK && rank == 0) {
        fprintf(stderr, "oplevel %s: %s\n", spec, wf_last_error());
    }
    timed_free(&run);
    remove(path);
    wf_search_opplan_result_free(&r);
}

static void oplevel_rows(const wf_cluster *cl, double peak, int iters, int rank, int nranks)
{
    if (nranks != 4)
        return;
    static const struct {
        const char *spec;
        int64_t batch;
    } rows[] = {{"mlp:sizes=512-2048-2048-10", 256}, {"cnn-tiny", 64}};
    if (rank == 0) {
        printf("\nop-level plans on a 2x2 mesh (SPMD executor, the planner's layouts: weft plan --op-level --mesh "
               "2x2 --pp 1), 4 ranks; vs_dp: the data-parallel runtime on the same ranks and batch\n");
        printf("%-26s %-30s %8s %8s %8s %8s %6s %6s %8s %6s %6s %7s %6s %6s %8s %8s %6s\n", "model", "plan",
               "best_ms", "med_ms", "comm_ms", "est_ms", "e/best", "e/med", "sim_ms", "e/best", "e/med", "GF/s",
               "%peak", "vs_dp", "mem_MiB", "est_MiB", "err");
    }
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        bench_model bm = {rows[k].spec, rows[k].spec, rows[k].batch / nranks, 0};
        timing dp;
        double dp_best = time_training(&bm, "wfbp", 0, nranks, iters, &dp) == WF_OK ? dp.best_step_s : 0;
        oplevel_row(cl, peak, iters, rank, nranks, rows[k].spec, rows[k].batch, dp_best);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_runtime [--iters N] [--ranks P] [--full] [--cluster FILE] [--no-profile] "
                    "[--only LABEL]\n");
}

int main(int argc, char **argv)
{
    int iters = 5, ranks = 2, child = 0, full = 0, prof = 1;
    const char *cluster_file = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cluster") && i + 1 < argc)
            cluster_file = argv[++i];
        else if (!strcmp(argv[i], "--full"))
            full = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--no-profile"))
            prof = 0;
        else if (!strcmp(argv[i], "--child"))
            child = 1;
        else {
            usage();
            return 1;
        }
    }
    if (iters < 1)
        iters = 1;
    wf_runtime_set_threads(1);
    int started = 0;
    if (wf_mpi_start(&started) != WF_OK) {
        fprintf(stderr, "%s\n", wf_last_error());
        return 1;
    }
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    char load[128];
    loadavg(load, sizeof load);
    double peak = sgemm_peak();
    /* The cluster: a file, or this machine measured now by these ranks. */
    wf_cluster cl;
    wf_status st;
    if (cluster_file) {
        st = wf_cluster_lookup(cluster_file, &cl);
    } else {
        wf_calib_opts o = {!full, 1};
        wf_calib_result r;
        st = wf_calibrate_run(&o, &r);
        if (st == WF_OK)
            st = wf_calibrate_to_cluster(&r, &cl);
    }
    if (st != WF_OK) {
        if (rank == 0)
            fprintf(stderr, "bench_runtime: no cluster to predict on: %s\n", wf_last_error());
        wf_mpi_stop(started);
        return 1;
    }
    wf_runtime_set_threads(1);
    if (rank == 0) {
        if (!child) {
            const char *hint = wf_k_blas_hint();
            printf("load: %s\n", load);
            printf("BLAS: %s (core %s)\n", wf_k_blas_info(), wf_k_blas_core());
            if (hint)
                printf("hint: %s\n", hint);
            printf("one-core sgemm peak (best of 512^3, 1024^3, 2048^3, thread CPU time): %.1f GFLOP/s; "
                   "%d timed steps, AdamW\n", peak / 1e9, iters);
            for (int k = 0; k < NMODELS; k++)
                printf("%s: %s, %.2f GFLOP per rank per iteration\n", MODELS[k].label, MODELS[k].spec,
                       train_flops(MODELS[k].spec, MODELS[k].batch) / 1e9);
        } else {
            printf("(%d ranks: load %s)\n", nranks, load);
        }
        printf("cluster (%s): %s; sgemm peak %.1f GFLOP/s, vector %.1f GFLOP/s, memory %.1f GB/s, "
               "link %.2f GB/s + %.1f us, overlap slowdown %.2f\n",
               cluster_file ? "file" : full ? "calibrated now" : "calibrated now, --quick", cl.name,
               cl.dev.matrix_flops[WF_DTYPE_FP32] / 1e9, cl.dev.vector_flops[WF_DTYPE_FP32] / 1e9,
               cl.dev.mem_bw_bps * cl.dev.mem_eff / 1e9, cl.level[0].bw_bps * cl.level[0].eff / 1e9,
               cl.level[0].latency_s * 1e6, cl.overlap_slowdown);
        header();
    }
    static const char *const comms[] = {"wfbp", "ddp", "dear"};
    for (int k = 0; k < NMODELS; k++) {
        if (only && strcmp(only, MODELS[k].label) != 0)
            continue;
        timing t;
        prediction p;
        if (nranks == 1) {
            if ((st = time_training(&MODELS[k], NULL, 1, 1, iters, &t)) != WF_OK ||
                (st = predict(&cl, &MODELS[k], 1, NULL, &p)) != WF_OK) {
                fprintf(stderr, "%s: %s\n", MODELS[k].label, wf_last_error());
                continue;
            }
            row(&MODELS[k], 1, NULL, &t, peak, &p);
            continue;
        }
        for (int c = 0; c < 3; c++) {
            st = time_training(&MODELS[k], comms[c], 0, nranks, iters, &t);
            if (st == WF_OK)
                st = predict(&cl, &MODELS[k], nranks, comms[c], &p);
            if (st != WF_OK) {
                if (rank == 0)
                    fprintf(stderr, "%s %s: %s\n", MODELS[k].label, comms[c], wf_last_error());
                continue;
            }
            if (rank == 0)
                row(&MODELS[k], nranks, comms[c], &t, peak, &p);
        }
    }
    if (nranks >= 2 && nranks % 2 == 0 && (!only || strcmp(only, "spmd") == 0 || strcmp(only, "gpt") == 0))
        spmd_rows(&MODELS[0], &cl, peak, iters, rank, nranks);
    if (nranks >= 2 && nranks % 2 == 0 && only && !strcmp(only, GPT512.label))
        spmd_rows(&GPT512, &cl, peak, iters, rank, nranks);
    if (nranks > 1 && (!only || !strcmp(only, "pipe") || !strcmp(only, MODELS[0].label)))
        pipe_rows(&cl, peak, nranks, rank, iters);
    if (nranks > 1 && (!only || !strcmp(only, "zero") || !strcmp(only, MODELS[0].label)))
        zero_rows(&cl, peak, iters, rank, nranks);
    if (nranks == 4 && (!only || !strcmp(only, "oplevel")))
        oplevel_rows(&cl, peak, iters, rank, nranks);
    /* Every rank profiles at once (ranks share the machine's caches and memory
     * as in training); rank 0 prints. */
    if (prof)
        for (int k = 0; k < NMODELS; k++) {
            if (only && strcmp(only, MODELS[k].label) != 0)
                continue;
            wf_world_barrier();
            if (profile(&cl, &MODELS[k], iters, nranks, rank == 0) != WF_OK)
                fprintf(stderr, "%s profile: %s\n", MODELS[k].label, wf_last_error());
        }
    loadavg(load, sizeof load);
    if (rank == 0)
        printf("load at the end%s: %s\n", child ? " (ranks)" : "", load);
    wf_mpi_stop(started);
    if (nranks == 1 && !child && ranks > 1) {
        char self[4096], cmd[8192];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return 0;
        self[n] = 0;
        const char *mpiexec = getenv("MPIEXEC") ? getenv("MPIEXEC") : "mpiexec";
        int len = snprintf(cmd, sizeof cmd, "%s -n %d %s --child --iters %d%s%s", mpiexec, ranks, self, iters,
                           full ? " --full" : "", prof ? "" : " --no-profile");
        if (cluster_file && len > 0 && (size_t)len < sizeof cmd)
            len += snprintf(cmd + len, sizeof cmd - (size_t)len, " --cluster '%s'", cluster_file);
        if (only && len > 0 && (size_t)len < sizeof cmd)
            snprintf(cmd + len, sizeof cmd - (size_t)len, " --only '%s'", only);
        fflush(stdout);
        if (system(cmd) != 0)
            fprintf(stderr, "the data-parallel part failed: %s\n", cmd);
    }
    return 0;
}
