/* weft plan: searches the plans of a model on a cluster (the outer search of
 * src/search/outer.c, every candidate scored by the code behind `weft
 * estimate`) and reports the fastest plans that fit, the time/memory
 * frontier, and, over a range of device counts, the best plan per count and
 * the fewest devices that meet a deadline (docs/planner.md).
 *
 * Results go to stdout (docs/cli.md, "Streams"): the human tables ending with
 * the best plan string on its own last line, or with --json one object (the
 * tables then go to stderr): best, top, pareto, searched, space,
 * pruned, search_time_s (and per_devices with --devices-range). -o writes the
 * chosen plan as a plan file (docs/plan-format.md) that `weft estimate --plan`
 * reads. No plan that fits is a user error (exit 1) naming the smallest memory
 * found and the budget.
 *
 * --op-level alone searches one space (wf_search_unified: the outer search's
 * Megatron layouts and the op-level search's layouts, ranked by the one cost
 * model; run_unified). With --mesh or --pp, a frontier to draw, or by default
 * for models the outer search does not cover (everything but transformers),
 * op-level plans come from wf_search_opplan alone: per-op SBP signatures on a
 * mesh, pipeline stages by Alpa's DP, its best also costed by the one model; the table of the
 * best plan's layouts is printed with --detail, -o writes an op-level plan file, and
 * --verify FILE checks such a file (or a whole-model one) against the model
 * and the cluster and prints its numbers as the search did. */
#include "cli/cli.h"
#include "weft/layout.h"
#include "weft/sched.h"
#include "weft/search.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define PLAN_TEXT 512
#define MAX_COUNTS 4096

/* ---- progress bar (stderr, shown once a search has run for a second) --------- */

typedef struct {
    double start_s;
    double last_s;     /* last redraw */
    int shown;
    int enabled;
    double base, span; /* maps a search's fraction into the whole run's */
} progress;

static void progress_cb(double fraction, void *user)
{
    progress *p = user;
    if (!p->enabled)
        return;
    double now = wf_now_s();
    if (now - p->start_s < 1.0 || (p->shown && now - p->last_s < 0.1 && fraction < 1.0))
        return;
    p->last_s = now;
    double f = p->base + p->span * fraction;
    int width = 40, fill = (int)(f * width + 0.5);
    if (fill > width)
        fill = width;
    fprintf(stderr, "\rsearching [");
    for (int i = 0; i < width; i++)
        fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %3.0f%% %6.1f s", 100 * f, now - p->start_s);
    fflush(stderr);
    p->shown = 1;
}

static void progress_end(progress *p)
{
    if (p->shown)
        fputc('\n', stderr);
    p->shown = 0;
}

/* ---- tables ----------------------------------------------------------------------- */

static void table_header(FILE *f, const char *first)
{
    fprintf(f, "%6s %10s %10s %6s %12s  %-21s  %s\n", first, "time (s)", "samples/s", "MFU", "memory (GiB)",
            "pipeline", "plan");
}

/* One row (the pipeline column: wf_plan_kind); with ctx, a plan whose gradient schedule is played as another
 * (ZeRO-1/2 under megatron-core is DeAR's: wf_cost_plan_as_run) says so. */
static void table_row(FILE *f, long long label, const wf_search_outer_point *pt, wf_cost_ctx *ctx)
{
    char text[PLAN_TEXT];
    wf_plan_format(&pt->plan, text, sizeof text);
    char s1[32], s2[32], s3[32], played[48] = "";
    if (ctx) {
        wf_plan run;
        wf_cost_plan_as_run(ctx, &pt->plan, &run);
        if (run.comm.kind != pt->plan.comm.kind)
            snprintf(played, sizeof played, " (played as comm=%s)", wf_comm_name(run.comm.kind));
    }
    fprintf(f, "%6lld %10s %10s %5.1f%% %12s  %-21s  %s%s\n", label, wf_cli_sig(pt->est.iteration_time_s, s1, sizeof s1),
            wf_cli_sig(pt->est.samples_per_s, s2, sizeof s2), 100 * pt->est.mfu,
            wf_cli_sig(pt->est.memory_per_device_bytes / GIB, s3, sizeof s3), wf_plan_kind(&pt->plan), text, played);
}

static void print_result(FILE *f, const wf_search_outer_result *r, int pareto, wf_cost_ctx *ctx)
{
    fprintf(f, "scored %lld of %lld candidates (%lld pruned, %lld fit) in %.3f s; budget %.2f GiB per "
               "device\n",
            (long long)r->searched, (long long)r->space, (long long)r->pruned, (long long)r->fitting,
            r->search_time_s, r->budget_bytes / GIB);
    table_header(f, "rank");
    for (int i = 0; i < r->ntop; i++)
        table_row(f, i + 1, &r->top[i], ctx);
    if (pareto) {
        fprintf(f, "time/memory frontier (%d plans: faster ones need more memory)\n", r->npareto);
        table_header(f, "#");
        for (int i = 0; i < r->npareto; i++)
            table_row(f, i + 1, &r->pareto[i], ctx);
    }
}

/* ---- JSON ----------------------------------------------------------------------------- */

static cJSON *point_json(const wf_search_outer_point *pt)
{
    cJSON *j = wf_estimate_to_json(&pt->est);
    if (!j)
        return NULL;
    char text[PLAN_TEXT];
    wf_plan_format(&pt->plan, text, sizeof text);
    cJSON_AddStringToObject(j, "plan", text);
    cJSON_AddStringToObject(j, "plan_kind", wf_plan_kind(&pt->plan));
    return j;
}

static cJSON *points_json(const wf_search_outer_point *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *p = point_json(&v[i]);
        if (!p) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, p);
    }
    return a;
}

/* best, top, pareto and the counters of one search, into j. */
static void add_result_json(cJSON *j, const wf_search_outer_result *r)
{
    cJSON_AddItemToObject(j, "best", r->ntop ? point_json(&r->top[0]) : cJSON_CreateNull());
    cJSON_AddItemToObject(j, "top", points_json(r->top, r->ntop));
    cJSON_AddItemToObject(j, "pareto", points_json(r->pareto, r->npareto));
    cJSON_AddNumberToObject(j, "devices", (double)r->devices);
    cJSON_AddNumberToObject(j, "budget_bytes", r->budget_bytes);
    cJSON_AddNumberToObject(j, "searched", (double)r->searched);
    cJSON_AddNumberToObject(j, "space", (double)r->space);
    cJSON_AddNumberToObject(j, "pruned", (double)r->pruned);
    cJSON_AddNumberToObject(j, "fitting", (double)r->fitting);
    cJSON_AddNumberToObject(j, "search_time_s", r->search_time_s);
}

/* ---- the verb ---------------------------------------------------------------------------- */

static wf_status parse_range(const char *text, int64_t *lo, int64_t *hi)
{
    const char *dash = strchr(text, '-');
    if (!dash || dash == text)
        return wf_errorf(WF_INVAL, "--devices-range=%s: expected A-B (device counts, A <= B)", text);
    char a[64];
    size_t n = (size_t)(dash - text);
    if (n >= sizeof a)
        return wf_errorf(WF_INVAL, "--devices-range=%s: expected A-B (device counts, A <= B)", text);
    memcpy(a, text, n);
    a[n] = 0;
    wf_status st;
    if ((st = wf_parse_int(a, "--devices-range start", 1, (int64_t)1 << 30, lo)) != WF_OK ||
        (st = wf_parse_int(dash + 1, "--devices-range end", 1, (int64_t)1 << 30, hi)) != WF_OK)
        return st;
    if (*lo > *hi)
        return wf_errorf(WF_INVAL, "--devices-range=%s: start %lld is above end %lld", text,
                         (long long)*lo, (long long)*hi);
    return WF_OK;
}

typedef struct {
    const char *model, *cluster, *out, *range, *mesh, *verify;
    int64_t batch, top, devices, pp;
    double max_memory_gib, deadline_s;
    int pareto, json, tp_cross_node, exhaustive, comm_search;
    int op_level, whole_model, no_seq_split, detail;
    const char *emit; /* --emit FORMAT: the chosen plan as a framework's settings */
    const char *plot, *csv; /* --plot frontier.svg, --csv frontier.csv */
} plan_args;

/* A plan string shortened for a label beside a point: keys at their
 * defaults dropped (every key of the plan-key table but the parallel
 * degrees, as the default plan's canonical string writes them),
 * "dp=2,tp=4,pp=8,mbs=2,vpp=6,recompute=selective,sp=1,zero=2,..." becomes
 * "dp2 tp4 pp8 mbs2 vpp6 selective sp z2". */
static void short_plan(const char *text, char *out, size_t cap)
{
    wf_plan dflt;
    wf_plan_default(&dflt);
    size_t n = 0;
    out[0] = 0;
    char copy[PLAN_TEXT];
    snprintf(copy, sizeof copy, "%s", text);
    for (char *tok = strtok(copy, ","); tok && n + 1 < cap; tok = strtok(NULL, ",")) {
        int skip = 0;
        for (int k = 0; k < wf_plan_nkeys() && !skip; k++) {
            wf_plan_key_view v;
            wf_plan_key_view_of(k, &dflt, &v);
            skip = !v.degree && v.text[0] && strcmp(tok, v.text) == 0;
        }
        if (skip)
            continue;
        char w[64];
        char *eq = strchr(tok, '=');
        if (eq && strncmp(tok, "recompute", 9) == 0)
            snprintf(w, sizeof w, "%s", eq + 1);
        else if (eq && strcmp(tok, "sp=1") == 0)
            snprintf(w, sizeof w, "sp");
        else if (eq && strncmp(tok, "zero", 4) == 0)
            snprintf(w, sizeof w, "z%s", eq + 1);
        else if (eq)
            snprintf(w, sizeof w, "%.*s%s", (int)(eq - tok), tok, eq + 1);
        else
            snprintf(w, sizeof w, "%s", tok);
        n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " " : "", w);
    }
}

/* One frontier series of whole-model plans; strings live in txt[n][2][PLAN_TEXT]. */
typedef struct {
    double *t, *mem;
    const char **lab, **sl;
    char (*txt)[2][PLAN_TEXT];
} series_buf;

static int series_fill(series_buf *b, wf_plot_series *s, int64_t devices, const wf_search_outer_point *pts, int n)
{
    b->t = malloc((size_t)(n + 1) * sizeof *b->t);
    b->mem = malloc((size_t)(n + 1) * sizeof *b->mem);
    b->lab = malloc((size_t)(n + 1) * sizeof *b->lab);
    b->sl = malloc((size_t)(n + 1) * sizeof *b->sl);
    b->txt = malloc((size_t)(n + 1) * sizeof *b->txt);
    if (!b->t || !b->mem || !b->lab || !b->sl || !b->txt)
        return -1;
    for (int i = 0; i < n; i++) {
        b->t[i] = pts[i].est.iteration_time_s;
        b->mem[i] = pts[i].est.memory_per_device_bytes / GIB;
        wf_plan_format(&pts[i].plan, b->txt[i][0], PLAN_TEXT);
        short_plan(b->txt[i][0], b->txt[i][1], PLAN_TEXT);
        b->lab[i] = b->txt[i][0];
        b->sl[i] = b->txt[i][1];
    }
    *s = (wf_plot_series){devices, n, b->t, b->mem, b->lab, b->sl};
    return 0;
}

static void series_free(series_buf *b)
{
    free(b->t);
    free(b->mem);
    free(b->lab);
    free(b->sl);
    free(b->txt);
    memset(b, 0, sizeof *b);
}

/* The index of the point whose plan is `chosen`'s, or -1. */
static int index_of(const wf_search_outer_point *pts, int n, const wf_search_outer_point *chosen)
{
    for (int i = 0; i < n; i++)
        if (memcmp(&pts[i].plan, &chosen->plan, sizeof chosen->plan) == 0)
            return i;
    return -1;
}

/* --plot / --csv of whole-model results: one series per result. */
static wf_status plot_results(const plan_args *a, const wf_model_config *m, const wf_search_outer_result *res,
                              const int64_t *counts, const int *use, int n, int chosen)
{
    if (!a->plot && !a->csv)
        return WF_OK;
    wf_plot_series *s = calloc((size_t)n, sizeof *s);
    series_buf *b = calloc((size_t)n, sizeof *b);
    int ns = 0, cs = -1, cp = -1;
    wf_status st = s && b ? WF_OK : wf_errorf(WF_NOMEM, "out of memory");
    for (int i = 0; st == WF_OK && i < n; i++) {
        if (!use[i])
            continue;
        if (series_fill(&b[ns], &s[ns], counts[i], res[i].pareto, res[i].npareto) != 0) {
            st = wf_errorf(WF_NOMEM, "out of memory");
            break;
        }
        if (i == chosen) {
            cs = ns;
            cp = index_of(res[i].pareto, res[i].npareto, &res[i].top[0]);
        }
        ns++;
    }
    char title[300];
    snprintf(title, sizeof title, "%s, batch %lld: time/memory frontier", m->name, (long long)a->batch);
    if (st == WF_OK)
        st = wf_plot_frontier(a->plot, a->csv, s, ns, cs, cp, res[chosen].budget_bytes / GIB, title);
    for (int i = 0; b && i < n; i++)
        series_free(&b[i]);
    free(b);
    free(s);
    if (st == WF_OK && a->plot)
        fprintf(stderr, "wrote %s\n", a->plot);
    if (st == WF_OK && a->csv)
        fprintf(stderr, "wrote %s\n", a->csv);
    return st;
}

/* Where the human tables go: stdout, or stderr when stdout carries --json or
 * --emit's output. */
static FILE *human(const plan_args *a)
{
    return a->json || a->emit ? stderr : stdout;
}

/* The plan file's record of the run: model, cluster and batch as given. */
static void plan_meta(const plan_args *a, wf_plan_meta *meta)
{
    memset(meta, 0, sizeof *meta);
    snprintf(meta->model, sizeof meta->model, "%s", a->model);
    snprintf(meta->cluster, sizeof meta->cluster, "%s", a->cluster);
    meta->batch = a->batch;
}

/* Status st of writing the plan file a->out, said on stderr when it worked. */
static wf_status wrote(const plan_args *a, wf_status st)
{
    if (st == WF_OK)
        fprintf(stderr, "wrote %s\n", a->out);
    return st;
}

/* The fields that open every JSON answer: the model, the cluster and the batch. */
static void add_run_json(cJSON *j, const char *model, const char *cluster, int64_t batch)
{
    cJSON_AddStringToObject(j, "model", model);
    cJSON_AddStringToObject(j, "cluster", cluster);
    cJSON_AddNumberToObject(j, "batch", (double)batch);
}

static wf_status write_plan(const plan_args *a, const wf_search_outer_point *pt)
{
    wf_plan_meta meta;
    plan_meta(a, &meta);
    cJSON *est = wf_estimate_to_json(&pt->est);
    if (!est)
        return wf_errorf(WF_NOMEM, "out of memory writing %s", a->out);
    wf_status st = wf_plan_write_file(a->out, &pt->plan, &meta, est);
    cJSON_Delete(est);
    return wrote(a, st);
}

static wf_status emit_best(const plan_args *a, const wf_model_config *m, const wf_cluster *c, cJSON *j,
                           const wf_search_outer_point *chosen)
{
    wf_status st = WF_OK;
    if (a->out && (st = write_plan(a, chosen)) != WF_OK)
        return st;
    if (a->json)
        return wf_cli_print_json(j);
    if (a->emit) {
        st = wf_cli_export(stdout, a->emit, &chosen->plan, m, c, a->batch);
        return st != WF_OK || fflush(stdout) == 0 ? st : wf_errorf(WF_IO, "cannot write standard output");
    }
    char text[PLAN_TEXT];
    wf_plan_format(&chosen->plan, text, sizeof text);
    printf("%s\n", text);
    return fflush(stdout) == 0 ? WF_OK : wf_errorf(WF_IO, "cannot write standard output");
}

/* --emit X: the search's filter, the plans X runs (wf_export_accepts), and
 * the first refusal met, to say why when X runs none. */
typedef struct {
    const char *target;
    const wf_model_config *m;
    char why[512];
} emit_filter;

static int emit_accept(const wf_plan *p, void *user)
{
    emit_filter *f = user;
    if (f->why[0])
        return wf_export_accepts(f->target, p, f->m, NULL, 0);
    return wf_export_accepts(f->target, p, f->m, f->why, sizeof f->why);
}

/* A search's error under --emit X says the space was X's plans. */
static wf_status emit_error(const wf_search_outer_opts *o, const wf_search_outer_result *r, wf_status st)
{
    if (!o->accept || st == WF_OK || st == WF_NOMEM)
        return st;
    const emit_filter *f = o->accept_user;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", wf_last_error());
    if (r->space == 0 && f->why[0])
        return wf_errorf(st, "--emit %s: no plan on %lld devices is one %s runs (%s)", f->target,
                         (long long)r->devices, f->target, f->why);
    return wf_errorf(st, "--emit %s (searching the plans %s runs, sw=%s): %s", f->target, f->target,
                     wf_sw_name(o->sw), msg);
}

/* --detail of a whole-model plan: each stage's order of tasks (the time part
 * of the plan), its kinds run-length coded by repeating groups: "EF x16,
 * F x7, (F H B) x9, ..." (F, B: the stage's forward and backward of a
 * micro-batch, cN for model chunk N when interleaved; EF, H, EB: the
 * interlaced pipeline's all-device segments). Written to buf (cap bytes). */
static void schedule_summary(const wf_plan *p, int64_t m, int stage, char *buf, size_t cap)
{
    buf[0] = 0;
    if (p->pp < 2 || m < 1 || m > (1 << 20))
        return;
    int n = 0, cap_ops = (int)(5 * m * (p->vpp > 1 ? p->vpp : 1));
    char (*kind)[8] = malloc((size_t)cap_ops * sizeof *kind);
    if (!kind)
        return;
    wf_status st;
    if (p->interlace) {
        wf_plan_task *t = malloc((size_t)cap_ops * sizeof *t);
        st = t ? wf_plan_interlace_order(p->pp, (int)m, stage, t, cap_ops, &n) : WF_NOMEM;
        for (int i = 0; st == WF_OK && i < n; i++)
            snprintf(kind[i], sizeof kind[i], "%s", wf_ptask_name(t[i].kind));
        free(t);
    } else {
        wf_pipe_op *o = malloc((size_t)cap_ops * sizeof *o);
        st = o ? wf_pipe_order(p->pipe, p->pp, (int)m, p->vpp, stage, o, cap_ops, &n) : WF_NOMEM;
        for (int i = 0; st == WF_OK && i < n; i++) {
            if (p->vpp > 1)
                snprintf(kind[i], sizeof kind[i], "%sc%d", o[i].bwd ? "B" : "F", o[i].chunk);
            else
                snprintf(kind[i], sizeof kind[i], "%s", o[i].bwd ? "B" : "F");
        }
        free(o);
    }
    if (st != WF_OK) {
        wf_clear_error();
        free(kind);
        return;
    }
    size_t len = 0;
    for (int i = 0; i < n && len + 32 < cap;) {
        /* The period (1 to 4 tasks) whose repetitions cover the most here. */
        int best_q = 1, best_r = 1;
        for (int q = 1; q <= 4 && i + q <= n; q++) {
            int r = 1;
            while (i + (r + 1) * q <= n) {
                int same = 1;
                for (int k = 0; k < q && same; k++)
                    same = strcmp(kind[i + k], kind[i + r * q + k]) == 0;
                if (!same)
                    break;
                r++;
            }
            if (r > 1 && r * q > best_r * best_q) {
                best_q = q;
                best_r = r;
            }
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", best_q > 1 ? "(" : "");
        for (int k = 0; k < best_q && len + 16 < cap; k++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", k ? " " : "", kind[i + k]);
        if (len + 16 < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s", best_q > 1 ? ")" : "");
        if (best_r > 1 && len + 16 < cap)
            len += (size_t)snprintf(buf + len, cap - len, " x%d", best_r);
        i += best_q * best_r;
    }
    free(kind);
}

/* --detail: the best plan's schedule, one line per stage (stderr) and as
 * "schedule" (one string per stage) in the JSON. */
static void print_schedule(FILE *f, cJSON *j, const wf_plan *p, int64_t batch)
{
    if (p->pp < 2)
        return;
    int64_t m = batch / ((int64_t)p->mbs * p->dp);
    fprintf(f, "schedule of the best plan (%s, %lld micro-batches; F/B a stage's forward/backward%s%s):\n",
            wf_plan_kind(p), (long long)m, p->vpp > 1 ? ", cN its model chunk N" : "",
            p->interlace ? ", EF/H/EB the embedding's forward, the head with the loss, the embedding's backward "
                           "on every device" : "");
    cJSON *arr = j ? cJSON_AddArrayToObject(j, "schedule") : NULL;
    char *buf = malloc(4096);
    if (!buf)
        return;
    for (int s = 0; s < p->pp; s++) {
        schedule_summary(p, m, s, buf, 4096);
        fprintf(f, "  stage %d: %s\n", s, buf);
        if (arr)
            cJSON_AddItemToArray(arr, cJSON_CreateString(buf));
    }
    free(buf);
}

static wf_status run_one(const plan_args *a, const wf_model_config *m, const wf_cluster *c,
                         const wf_search_outer_opts *o, progress *pg)
{
    wf_search_outer_result r;
    wf_status st = wf_search_outer(m, c, a->batch, o, &r);
    progress_end(pg);
    if (st != WF_OK) {
        st = emit_error(o, &r, st);
        wf_search_outer_result_free(&r);
        return st;
    }
    fprintf(human(a), "weft plan: %s on %s (%lld devices), batch %lld\n", m->name, c->name,
            (long long)r.devices, (long long)a->batch);
    if (o->accept)
        fprintf(human(a), "searching the plans %s runs (sw=%s; docs/export.md)\n", a->emit, wf_sw_name(o->sw));
    char cl[160];
    wf_cli_cluster_note(a->cluster, c, cl, sizeof cl);
    if (cl[0])
        fprintf(human(a), "assumed %s\n", cl);
    wf_cost_ctx *rctx = NULL;
    if (wf_cost_ctx_create(m, c, &rctx) != WF_OK) /* rows then print the plan alone */
        wf_clear_error();
    print_result(human(a), &r, a->pareto, rctx);
    wf_cost_ctx_free(rctx);
    /* A mixture of experts with dense layers: the fastest per-layer plan
     * on the same price (docs/planner.md, "Per-layer plans"). */
    wf_search_unified_result pr;
    memset(&pr, 0, sizeof pr);
    if (!o->accept && r.ntop > 0 && wf_model_is_moe(m)) {
        wf_search_unified_opts uo = {o->devices, o->max_memory_bytes, -1};
        if (wf_search_perlayer(m, c, a->batch, &uo, &pr) != WF_OK)
            wf_clear_error();
        if (pr.perlayer_best_s > 0) {
            const double best = r.top[0].est.iteration_time_s;
            char pm_text[512];
            wf_plan_format(&pr.perlayer_moe, pm_text, sizeof pm_text);
            fprintf(human(a), "per-layer plan (kind per-layer; dense and expert layers in their own layouts): "
                              "%.4f s per iteration, %.2f GiB per device, %.3fx the best above%s\n  %s\n  expert "
                              "layers: %s\n",
                    pr.perlayer_best_s, pr.perlayer_best_mem_bytes / GIB, best / pr.perlayer_best_s,
                    pr.perlayer_best_s < best ? ": faster; weft plan --op-level -o FILE writes it" : "",
                    pr.perlayer_detail, pm_text);
        }
    }
    if (a->deadline_s > 0 && r.top[0].est.iteration_time_s > a->deadline_s) {
        st = wf_errorf(WF_NOFIT, "no plan on %lld devices meets the deadline of %g s per iteration "
                                 "(fastest: %.4f s)",
                       (long long)r.devices, a->deadline_s, r.top[0].est.iteration_time_s);
        wf_search_outer_result_free(&r);
        return st;
    }
    cJSON *j = cJSON_CreateObject();
    if (!j) {
        wf_search_outer_result_free(&r);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    add_run_json(j, m->name, c->name, a->batch);
    add_result_json(j, &r);
    if (pr.perlayer_best_s > 0) {
        char pm_text[512], pd_text[512];
        wf_plan_format(&pr.perlayer_moe, pm_text, sizeof pm_text);
        wf_plan dense_only = wf_layout_perlayer_dense_plan(m, &pr.perlayer_dense, m->layers);
        wf_plan_format(&dense_only, pd_text, sizeof pd_text);
        cJSON *pj = cJSON_AddObjectToObject(j, "per_layer");
        if (pj) {
            cJSON_AddStringToObject(pj, "plan_kind", "per-layer");
            cJSON_AddNumberToObject(pj, "iteration_time_s", pr.perlayer_best_s);
            cJSON_AddNumberToObject(pj, "memory_per_device_bytes", pr.perlayer_best_mem_bytes);
            cJSON_AddStringToObject(pj, "layers", pr.perlayer_detail);
            cJSON_AddStringToObject(pj, "expert_plan", pm_text);
            cJSON_AddStringToObject(pj, "dense_plan", pd_text);
            cJSON_AddNumberToObject(pj, "costed", (double)pr.perlayer_costed);
        }
    }
    wf_search_unified_result_free(&pr);
    if (a->detail)
        print_schedule(human(a), j, &r.top[0].plan, a->batch);
    int one = 1;
    int64_t devs = r.devices;
    st = plot_results(a, m, &r, &devs, &one, 1, 0);
    if (st == WF_OK)
        st = emit_best(a, m, c, j, &r.top[0]);
    cJSON_Delete(j);
    wf_search_outer_result_free(&r);
    return st;
}

/* --devices-range: one search per device count; the best per count, the
 * fastest overall and the fewest devices meeting --deadline. */
static wf_status run_range(const plan_args *a, const wf_model_config *m, const wf_cluster *c,
                           wf_search_outer_opts *o, progress *pg)
{
    int64_t lo = 0, hi = 0;
    wf_status st = parse_range(a->range, &lo, &hi);
    if (st != WF_OK)
        return st;
    int64_t have = wf_cluster_devices(c);
    if (lo > have)
        return wf_errorf(WF_INVAL, "--devices-range=%s: cluster '%s' has %lld devices", a->range,
                         c->name, (long long)have);
    int64_t *counts = malloc(MAX_COUNTS * sizeof *counts);
    wf_search_outer_result *res = calloc(MAX_COUNTS, sizeof *res);
    wf_status *sts = calloc(MAX_COUNTS, sizeof *sts);
    cJSON *j = NULL;
    if (!counts || !res || !sts) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto out;
    }
    int n = wf_search_outer_device_counts(c, lo, hi, counts, MAX_COUNTS);
    if (n == 0) {
        st = wf_errorf(WF_INVAL, "--devices-range=%s: no count in it is a whole number of nodes of "
                                 "%lld devices or a divisor of one node",
                       a->range, (long long)c->level[0].size);
        goto out;
    }
    if (n > MAX_COUNTS) {
        st = wf_errorf(WF_INVAL, "--devices-range=%s: %d device counts, at most %d", a->range, n,
                       MAX_COUNTS);
        goto out;
    }
    int best = -1, fewest = -1;
    double total_time = 0;
    int64_t searched = 0;
    for (int i = 0; i < n; i++) {
        o->devices = counts[i];
        pg->base = (double)i / n;
        pg->span = 1.0 / n;
        sts[i] = wf_search_outer(m, c, a->batch, o, &res[i]);
        total_time += res[i].search_time_s;
        searched += res[i].searched;
        if (sts[i] != WF_OK && sts[i] != WF_NOFIT && sts[i] != WF_INVAL) {
            st = sts[i];
            goto out;
        }
        wf_clear_error();
        if (sts[i] != WF_OK)
            continue;
        const wf_search_outer_point *b = &res[i].top[0];
        if (best < 0 || b->est.iteration_time_s < res[best].top[0].est.iteration_time_s)
            best = i;
        if (fewest < 0 && a->deadline_s > 0 && b->est.iteration_time_s <= a->deadline_s)
            fewest = i;
    }
    progress_end(pg);
    fprintf(human(a), "weft plan: %s on %s, %d device counts in %s, batch %lld: %lld candidates scored "
                    "in %.3f s\n",
            m->name, c->name, n, a->range, (long long)a->batch, (long long)searched, total_time);
    table_header(human(a), "devs");
    int undivided = 0;
    for (int i = 0; i < n; i++) {
        if (sts[i] == WF_OK)
            table_row(human(a), (long long)counts[i], &res[i].top[0], NULL);
        else if (sts[i] == WF_NOFIT)
            fprintf(human(a), "%6lld no plan fits\n", (long long)counts[i]);
        else
            undivided++;
    }
    if (undivided)
        fprintf(human(a), "(%d other device counts: no plan divides the model and the batch)\n", undivided);
    if (best < 0) {
        st = wf_errorf(WF_NOFIT, "no plan%s%s fits on any device count in %s (budget %.2f GiB per device)",
                       a->emit ? " that runs on " : "", a->emit ? a->emit : "", a->range,
                       res[0].budget_bytes / GIB);
        goto out;
    }
    if (a->pareto) {
        fprintf(human(a), "on %lld devices (the fastest count):\n", (long long)counts[best]);
        print_result(human(a), &res[best], 1, NULL);
    }
    if (a->deadline_s > 0) {
        if (fewest < 0) {
            st = wf_errorf(WF_NOFIT, "no device count in %s meets the deadline of %g s per iteration "
                                     "(fastest: %.4f s on %lld devices)",
                           a->range, a->deadline_s, res[best].top[0].est.iteration_time_s,
                           (long long)counts[best]);
            goto out;
        }
        fprintf(human(a), "fewest devices meeting the deadline of %g s: %lld (%.4f s)\n", a->deadline_s,
                (long long)counts[fewest], res[fewest].top[0].est.iteration_time_s);
    }
    int chosen = fewest >= 0 ? fewest : best;
    j = cJSON_CreateObject();
    if (!j) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto out;
    }
    add_run_json(j, m->name, c->name, a->batch);
    add_result_json(j, &res[chosen]);
    /* The counters cover every count searched. */
    cJSON_ReplaceItemInObject(j, "searched", cJSON_CreateNumber((double)searched));
    cJSON_ReplaceItemInObject(j, "search_time_s", cJSON_CreateNumber(total_time));
    cJSON *per = cJSON_AddArrayToObject(j, "per_devices");
    for (int i = 0; per && i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e)
            break;
        cJSON_AddNumberToObject(e, "devices", (double)counts[i]);
        cJSON_AddItemToObject(e, "best", sts[i] == WF_OK ? point_json(&res[i].top[0]) : cJSON_CreateNull());
        cJSON_AddNumberToObject(e, "searched", (double)res[i].searched);
        cJSON_AddItemToArray(per, e);
    }
    if (a->deadline_s > 0) {
        cJSON_AddNumberToObject(j, "deadline_s", a->deadline_s);
        cJSON_AddNumberToObject(j, "fewest_devices_meeting_deadline", (double)counts[fewest]);
    }
    cJSON_AddNumberToObject(j, "fastest_devices", (double)counts[best]);
    int *use = calloc((size_t)n, sizeof *use);
    if (!use) {
        st = wf_errorf(WF_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        use[i] = sts[i] == WF_OK;
    st = plot_results(a, m, res, counts, use, n, chosen);
    free(use);
    if (st == WF_OK)
        st = emit_best(a, m, c, j, &res[chosen].top[0]);
out:
    cJSON_Delete(j);
    if (res)
        for (int i = 0; i < MAX_COUNTS; i++)
            wf_search_outer_result_free(&res[i]);
    free(res);
    free(sts);
    free(counts);
    return st;
}

/* ---- op-level plans --------------------------------------------------------------------- */

static void ol_header(FILE *f, const char *first)
{
    fprintf(f, "%6s %10s %10s %6s %12s  %s\n", first, "time (s)", "samples/s", "MFU", "memory (GiB)",
            "plan");
}

static void ol_row(FILE *f, long long label, const wf_search_opplan_point *pt)
{
    fprintf(f, "%6lld %10.4f %10.3f %5.1f%% %12.2f  %s%s\n", label, pt->iteration_time_s,
            pt->samples_per_s, 100 * pt->mfu, pt->memory_per_device_bytes / GIB, pt->plan,
            pt->fits ? "" : "  (does not fit)");
}

/* The best plan: its breakdown, stages and per-op layouts. */
/* An op name for a fixed-width column: names longer than w keep their head and
 * tail around "..." (layer numbers and suffixes stay readable). */
static const char *short_name(const char *name, int w, char *buf, size_t cap)
{
    size_t n = strlen(name);
    if ((int)n <= w || w < 8 || cap <= (size_t)w)
        return name;
    int head = (w - 3) / 2, tail = w - 3 - head;
    snprintf(buf, cap, "%.*s...%s", head, name, name + n - tail);
    return buf;
}

/* The best plan's layouts resolved once (wf_layout_index: each forward op's
 * signature by op index) for the per-op table and JSON, when `need`s them;
 * nothing per op when they do not resolve (a search that found no plan).
 * Freed by the caller. */
static void ol_resolve(int need, const wf_model_config *m, const wf_cluster *c, int64_t batch,
                       wf_search_opplan_result *r, wf_layout_plan *L)
{
    if (!need) {
        memset(L, 0, sizeof *L);
        wf_layout_init(&L->ol);
        return;
    }
    if (r->has_resolved) { /* what evaluated the best: moved out, not parsed again */
        *L = r->resolved;
        r->has_resolved = 0;
        return;
    }
    if (wf_layout_index(&r->best_plan, m, c, batch, L) != WF_OK) {
        wf_layout_plan_free(L);
        wf_clear_error();
    }
}

static void ol_print_best(FILE *f, const wf_search_opplan_result *r, int detail, const wf_layout_plan *L)
{
    const wf_search_opplan_point *b = &r->best;
    const wf_graph *g = &r->graph;
    fprintf(f, "best: %s on %lld devices: %.4f s per iteration (compute %.4f, comm %.4f, pipeline "
               "sends %.4f, bubble %.4f, weight-gradient reduction %.4f), %.2f GiB per device%s\n",
            b->plan, (long long)b->devices, b->iteration_time_s, b->compute_s, b->comm_s,
            b->pp_comm_s, b->bubble_s, b->grad_sync_s, b->memory_per_device_bytes / GIB,
            b->fits ? "" : " (DOES NOT FIT)");
    if (b->nstages > 1 && b->one_model) {
        /* The stage cut; its figures are the plan's, above (one price). */
        fprintf(f, "%6s %-28s %-28s %5s %8s\n", "stage", "first op", "last op", "ops", "inflight");
        for (int s = 0; s < b->nstages; s++) {
            const wf_search_opplan_stage *S = &b->stages[s];
            char b1[32], b2[32];
            fprintf(f, "%6d %-28s %-28s %5d %8d\n", s, short_name(g->ops[S->first_op].name, 28, b1, sizeof b1),
                    short_name(g->ops[S->end_op - 1].name, 28, b2, sizeof b2), S->end_op - S->first_op, S->inflight);
        }
    } else if (b->nstages > 1) {
        fprintf(f, "%6s %-28s %-28s %5s %8s %10s %10s %10s %12s\n", "stage", "first op", "last op",
                "ops", "inflight", "time (s)", "send (s)", "grads (s)", "memory (GiB)");
        for (int s = 0; s < b->nstages; s++) {
            const wf_search_opplan_stage *S = &b->stages[s];
            char b1[32], b2[32];
            fprintf(f, "%6d %-28s %-28s %5d %8d %10.5f %10.5f %10.5f %12.2f\n", s,
                    short_name(g->ops[S->first_op].name, 28, b1, sizeof b1),
                    short_name(g->ops[S->end_op - 1].name, 28, b2, sizeof b2), S->end_op - S->first_op,
                    S->inflight, S->time_s, S->send_s, S->grad_sync_s, S->memory_bytes / GIB);
        }
    }
    if (!detail) {
        fprintf(f, "(%d ops; --detail prints each op's layout)\n", g->nfwd);
        return;
    }
    fprintf(f, "layouts (per mesh axis %s, outermost first: inputs->outputs; comm: the op's share "
               "of boxing, in-op collectives and weight-gradient reduction)\n", b->mesh);
    fprintf(f, "%-32s %-14s %5s  %-40s %12s\n", "op", "kind", "stage", "signature", "comm (s)");
    char nb[40];
    for (int i = 0; L->has_layouts && i < g->nfwd && i < L->graph.nfwd; i++)
        fprintf(f, "%-32s %-14s %5d  %-40s %12.6f\n", short_name(g->ops[i].name, 32, nb, sizeof nb),
                wf_op_name(g->ops[i].kind), r->op_stage[i], L->sig_text[i], r->op_comm_s[i]);
}

static cJSON *ol_points_json(const wf_search_opplan_point *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *p = wf_search_opplan_point_to_json(&v[i], NULL);
        if (!p) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, p);
    }
    return a;
}

/* The best point with its layouts, as `--json` prints it under "best". */
static cJSON *ol_best_json(const wf_search_opplan_result *r, const wf_layout_plan *L)
{
    cJSON *j = wf_search_opplan_point_to_json(&r->best, &r->graph);
    if (!j)
        return NULL;
    cJSON *lay = cJSON_AddArrayToObject(j, "layouts");
    const wf_graph *g = &r->graph;
    for (int i = 0; lay && i < g->nfwd; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        const char *sig = L->has_layouts && i < L->graph.nfwd ? L->sig_text[i] : NULL;
        cJSON_AddStringToObject(o, "op", g->ops[i].name);
        cJSON_AddStringToObject(o, "kind", wf_op_name(g->ops[i].kind));
        cJSON_AddStringToObject(o, "signature", sig ? sig : "");
        cJSON_AddNumberToObject(o, "stage", r->op_stage[i]);
        cJSON_AddNumberToObject(o, "compute_s", r->op_compute_s[i]);
        cJSON_AddNumberToObject(o, "comm_s", r->op_comm_s[i]);
        cJSON_AddItemToArray(lay, o);
    }
    return j;
}

/* The op-level answer on stdout: j as JSON (then freed) when json, else the
 * best plan's string alone. */
static wf_status ol_answer(int json, cJSON *j, const wf_search_opplan_result *r)
{
    wf_status st;
    if (json) {
        st = wf_cli_print_json(j);
        cJSON_Delete(j);
    } else {
        printf("%s\n", r->best.plan);
        st = fflush(stdout) == 0 ? WF_OK : wf_errorf(WF_IO, "cannot write standard output");
    }
    return st;
}

/* --plot / --csv of an op-level search: its frontier, the best plan chosen. */
static wf_status ol_plot(const plan_args *a, const wf_model_config *m, const wf_search_opplan_result *r)
{
    if (!a->plot && !a->csv)
        return WF_OK;
    int n = r->npareto;
    double *t = malloc((size_t)(n + 1) * sizeof *t), *mem = malloc((size_t)(n + 1) * sizeof *mem);
    const char **lab = malloc((size_t)(n + 1) * sizeof *lab);
    wf_status st = t && mem && lab ? WF_OK : wf_errorf(WF_NOMEM, "out of memory");
    int chosen = -1;
    for (int i = 0; st == WF_OK && i < n; i++) {
        t[i] = r->pareto[i].iteration_time_s;
        mem[i] = r->pareto[i].memory_per_device_bytes / GIB;
        lab[i] = r->pareto[i].plan;
        if (strcmp(r->pareto[i].plan, r->best.plan) == 0 && chosen < 0)
            chosen = i;
    }
    /* The best's layouts may sit on the frontier only under a memory lever
     * that dominates them (ZeRO: the same time, less memory): mark that. */
    size_t bl = strlen(r->best.plan);
    for (int i = 0; st == WF_OK && chosen < 0 && i < n; i++)
        if (strncmp(r->pareto[i].plan, r->best.plan, bl) == 0 && r->pareto[i].plan[bl] == ',')
            chosen = i;
    if (st == WF_OK) {
        wf_plot_series s = {r->devices, n, t, mem, lab, NULL};
        char title[300];
        snprintf(title, sizeof title, "%s, batch %lld: op-level time/memory frontier", m->name, (long long)a->batch);
        st = wf_plot_frontier(a->plot, a->csv, &s, 1, 0, chosen, r->budget_bytes / GIB, title);
    }
    free(t);
    free(mem);
    free(lab);
    if (st == WF_OK && a->plot)
        fprintf(stderr, "wrote %s\n", a->plot);
    if (st == WF_OK && a->csv)
        fprintf(stderr, "wrote %s\n", a->csv);
    return st;
}

static wf_status ol_write(const plan_args *a, const wf_search_opplan_result *r)
{
    wf_plan_meta meta;
    plan_meta(a, &meta);
    cJSON *est = wf_search_opplan_point_to_json(&r->best, &r->graph);
    if (!est)
        return wf_errorf(WF_NOMEM, "out of memory writing %s", a->out);
    wf_status st = wf_layout_write_file(a->out, &r->best_plan, &meta, est);
    cJSON_Delete(est);
    return wrote(a, st);
}

/* The one cost model's estimate of the op-level search's best (what
 * `weft estimate` and `weft simulate` of its file report; the search's
 * numbers are its own model's, which proposes layouts): 1 when it takes
 * the layouts, else 0 with the reason in why. */
static int one_model(const wf_model_config *m, const wf_cluster *c, int64_t batch, const wf_layout *ol,
                     wf_estimate *e, char *why, size_t cap)
{
    wf_cost_ctx *ctx = NULL;
    wf_status st = wf_cost_ctx_create(m, c, &ctx);
    if (st == WF_OK)
        st = wf_layout_cost(m, c, ctx, batch, ol, e, NULL);
    wf_cost_ctx_free(ctx);
    if (st != WF_OK)
        snprintf(why, cap, "%s", wf_last_error());
    wf_clear_error();
    return st == WF_OK;
}

/* Which model gave the figures printed: one price per plan. */
static void one_model_line(FILE *f, const wf_search_opplan_point *b, const char *why)
{
    if (b->one_model)
        fprintf(f, "priced by the one cost model (what estimate and simulate report)\n");
    else
        fprintf(f, "the one cost model does not take these layouts (%s): the figures are the op-level search's "
                   "proxy's\n", why[0] ? why : "see weft estimate");
}

static wf_status ol_opts(const plan_args *a, const wf_model_config *m, wf_search_opplan_opts *o)
{
    wf_search_opplan_opts_default(o);
    o->mesh = a->mesh;
    o->devices = a->devices;
    o->pp = (int)a->pp;
    o->max_memory_bytes = a->max_memory_gib > 0 ? a->max_memory_gib * GIB : 0;
    o->top_k = (int)a->top;
    if (a->no_seq_split) {
        if (!wf_model_is_transformer(m))
            return wf_errorf(WF_INVAL, "--no-seq-split: model '%s' is not a transformer (its "
                                       "activations have no sequence dimension)", m->name);
        o->oplevel.seq_dim = 1; /* the zoo's transformer activations are [B, S, ...] */
    }
    return WF_OK;
}

/* ---- co-shard, NF1B and DAP in the default search -------------------------------------
 * The default `weft plan` of a model other than a transformer runs the
 * op-level search, whose layouts cannot say co-shard, NF1B or DAP (whole-model
 * keys: docs/planner.md, "Co-shard and NF1B"). So it also runs the whole-
 * model search over the plans with those keys and ranks its best with the
 * op-level best on the one price (the estimate's figure, which is what the
 * op-level best's one_model figure is); a tie keeps the op-level best. Other
 * whole-model plans stay --whole-model's (the op-level search has their
 * layouts). */

static int coshard_nf1b(const wf_plan *p, void *user)
{
    (void)user;
    return p->coshard > 1 || p->nf1b || p->dap > 1;
}

/* The fastest fitting whole-model plan with co-shard, NF1B or DAP into *out: 1
 * when there is one (0 also when the search fails: none fits). */
static int whole_best(const plan_args *a, const wf_model_config *m, const wf_cluster *c, wf_search_outer_point *out)
{
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    o.top_k = 1;
    o.max_memory_bytes = a->max_memory_gib > 0 ? a->max_memory_gib * GIB : 0;
    o.devices = a->devices > 0 ? a->devices : 0;
    o.accept = coshard_nf1b;
    wf_search_outer_result r;
    int found = wf_search_outer(m, c, a->batch, &o, &r) == WF_OK && r.ntop > 0 && r.top[0].est.fits;
    if (found)
        *out = r.top[0];
    wf_search_outer_result_free(&r);
    wf_clear_error();
    return found;
}

/* The human line of that plan against the op-level best (op_s, < 0: none
 * fits); 1 when it is the answer (faster, or the only plan that fits). */
static int whole_line(FILE *f, const wf_search_outer_point *ss, double op_s)
{
    char text[PLAN_TEXT];
    wf_plan_format(&ss->plan, text, sizeof text);
    int wins = op_s < 0 || ss->est.iteration_time_s < op_s;
    fprintf(f, "co-shard / NF1B / DAP (whole-model plans no layout expresses; the one price): %s (%s): %.4f s per "
               "iteration, %.2f GiB per device: %s\n",
            text, wf_plan_kind(&ss->plan), ss->est.iteration_time_s, ss->est.memory_per_device_bytes / GIB,
            op_s < 0 ? "the only plan that fits, the answer"
            : wins   ? "faster than the op-level best, the answer"
                     : "slower than the op-level best");
    return wins;
}

/* The answer when that plan wins: its schedule (--detail), its file (-o),
 * the JSON's whole_model_best and answer (j, which this consumes), or its
 * string on stdout. */
static wf_status whole_answer(const plan_args *a, const wf_search_outer_point *ss, cJSON *j)
{
    wf_status st = WF_OK;
    if (a->detail)
        print_schedule(human(a), j, &ss->plan, a->batch);
    if (a->out)
        st = write_plan(a, ss);
    char text[PLAN_TEXT];
    wf_plan_format(&ss->plan, text, sizeof text);
    if (st == WF_OK && a->json && j) {
        cJSON_AddItemToObject(j, "whole_model_best", point_json(ss));
        cJSON_AddStringToObject(j, "answer", text);
        st = wf_cli_print_json(j);
    } else if (st == WF_OK && !a->json) {
        printf("%s\n", text);
        st = fflush(stdout) == 0 ? WF_OK : wf_errorf(WF_IO, "cannot write standard output");
    }
    cJSON_Delete(j);
    return st;
}

/* --op-level --devices-range: the op-level search (its FT frontier, the time/
 * memory trade TensorOpt explores) per device count: the best plan and the
 * frontier's size of each count, every frontier with --pareto, and the fewest
 * devices meeting --deadline. */
static wf_status run_oplevel_range(const plan_args *a, const wf_model_config *m, const wf_cluster *c)
{
    int64_t lo = 0, hi = 0;
    wf_status st = parse_range(a->range, &lo, &hi);
    if (st != WF_OK)
        return st;
    if (lo > wf_cluster_devices(c))
        return wf_errorf(WF_INVAL, "--devices-range=%s: cluster '%s' has %lld devices", a->range, c->name,
                         (long long)wf_cluster_devices(c));
    int64_t counts[MAX_COUNTS];
    int n = wf_search_outer_device_counts(c, lo, hi, counts, MAX_COUNTS);
    if (n == 0)
        return wf_errorf(WF_INVAL, "--devices-range=%s: no count in it is a whole number of nodes of %lld devices "
                                   "or a divisor of one node", a->range, (long long)c->level[0].size);
    if (n > MAX_COUNTS)
        return wf_errorf(WF_INVAL, "--devices-range=%s: %d device counts, at most %d", a->range, n, MAX_COUNTS);
    wf_search_opplan_opts o;
    if ((st = ol_opts(a, m, &o)) != WF_OK)
        return st;
    cJSON *j = a->json ? cJSON_CreateObject() : NULL, *per = NULL;
    if (a->json) {
        if (!j)
            return wf_errorf(WF_NOMEM, "out of memory");
        add_run_json(j, m->name, c->name, a->batch);
        cJSON_AddStringToObject(j, "mode", "op-level");
        per = cJSON_AddArrayToObject(j, "per_devices");
    }
    fprintf(human(a), "weft plan --op-level: %s on %s, %d device counts in %s, batch %lld\n", m->name, c->name, n,
            a->range, (long long)a->batch);
    fprintf(human(a), "%6s %10s %12s %9s  %s\n", "devs", "time (s)", "memory (GiB)", "frontier", "best plan");
    int best = -1, fewest = -1;
    double best_t = 0;
    for (int i = 0; i < n; i++) {
        o.devices = counts[i];
        wf_search_opplan_result r;
        st = wf_search_opplan(m, c, a->batch, &o, &r);
        if (st != WF_OK) {
            if (st != WF_NOFIT && st != WF_INVAL) {
                wf_search_opplan_result_free(&r);
                cJSON_Delete(j);
                return st;
            }
            fprintf(human(a), "%6lld %s\n", (long long)counts[i], st == WF_NOFIT ? "no plan fits" : "no plan divides");
            wf_clear_error();
            wf_search_opplan_result_free(&r);
            continue;
        }
        fprintf(human(a), "%6lld %10.4f %12.2f %9d  %s\n", (long long)counts[i], r.best.iteration_time_s,
                r.best.memory_per_device_bytes / GIB, r.npareto, r.best.plan);
        if (a->pareto) {
            ol_header(human(a), "#");
            for (int k = 0; k < r.npareto; k++)
                ol_row(human(a), k + 1, &r.pareto[k]);
        }
        if (best < 0 || r.best.iteration_time_s < best_t) {
            best = i;
            best_t = r.best.iteration_time_s;
        }
        if (fewest < 0 && a->deadline_s > 0 && r.best.iteration_time_s <= a->deadline_s)
            fewest = i;
        if (per) {
            cJSON *e = cJSON_CreateObject();
            if (e) {
                cJSON_AddNumberToObject(e, "devices", (double)counts[i]);
                cJSON_AddItemToObject(e, "best", wf_search_opplan_point_to_json(&r.best, NULL));
                cJSON_AddItemToObject(e, "pareto", ol_points_json(r.pareto, r.npareto));
                cJSON_AddItemToArray(per, e);
            }
        }
        wf_search_opplan_result_free(&r);
    }
    if (best < 0) {
        cJSON_Delete(j);
        return wf_errorf(WF_NOFIT, "no op-level plan fits on any device count in %s", a->range);
    }
    fprintf(human(a), "fastest: %lld devices (%.4f s)\n", (long long)counts[best], best_t);
    if (a->deadline_s > 0) {
        if (fewest < 0) {
            cJSON_Delete(j);
            return wf_errorf(WF_NOFIT, "no device count in %s meets the deadline of %g s per iteration (fastest: %.4f "
                                       "s on %lld devices)", a->range, a->deadline_s, best_t, (long long)counts[best]);
        }
        fprintf(human(a), "fewest devices meeting the deadline of %g s: %lld\n", a->deadline_s,
                (long long)counts[fewest]);
    }
    if (!j)
        return WF_OK;
    cJSON_AddNumberToObject(j, "fastest_devices", (double)counts[best]);
    if (fewest >= 0)
        cJSON_AddNumberToObject(j, "fewest_devices_meeting_deadline", (double)counts[fewest]);
    st = wf_cli_print_json(j);
    cJSON_Delete(j);
    return st;
}

static wf_status run_oplevel(const plan_args *a, const wf_model_config *m, const wf_cluster *c,
                             progress *pg)
{
    wf_search_opplan_opts o;
    wf_status st = ol_opts(a, m, &o);
    if (st != WF_OK)
        return st;
    o.progress = progress_cb;
    o.progress_user = pg;
    wf_search_opplan_result r;
    st = wf_search_opplan(m, c, a->batch, &o, &r);
    progress_end(pg);
    /* The default search (no --op-level, --mesh or --pp) of a model other
     * than a transformer: also the whole-model plans with co-shard or NF1B. */
    wf_search_outer_point ss;
    const int has_ss = !a->op_level && !a->mesh && !a->pp && !wf_model_is_transformer(m) &&
                       (st == WF_OK || st == WF_NOFIT) && whole_best(a, m, c, &ss);
    if (st != WF_OK && !(st == WF_NOFIT && r.has_best) && !(st == WF_NOFIT && has_ss)) {
        wf_search_opplan_result_free(&r);
        return st;
    }
    /* One budget in every verb: the device's memory (or --max-memory), of
     * which the framework's reserve is not the plans' (the op-level model's
     * memory leaves the reserve out; the estimate's counts it). */
    double reserve = a->max_memory_gib > 0 ? 0 : c->mem_reserved_bytes;
    fprintf(human(a), "weft plan --op-level: %s on %s (%lld devices), batch %lld: %lld candidates "
                    "(%lld op-level searches) in %.3f s; budget %.2f GiB per device",
            m->name, c->name, (long long)r.devices, (long long)a->batch, (long long)r.searched,
            (long long)r.searches, r.search_time_s, (r.budget_bytes + reserve) / GIB);
    if (reserve > 0)
        fprintf(human(a), " (%.2f GiB the framework's reserve: %.2f GiB for the plan; memory below leaves "
                          "the reserve out)", reserve / GIB, r.budget_bytes / GIB);
    fprintf(human(a), "\n");
    char cl[160];
    wf_cli_cluster_note(a->cluster, c, cl, sizeof cl);
    if (cl[0])
        fprintf(human(a), "assumed %s\n", cl);
    if (st == WF_NOFIT) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", wf_last_error());
        wf_layout_plan L;
        ol_resolve(a->detail, m, c, a->batch, &r, &L);
        ol_print_best(human(a), &r, a->detail, &L);
        wf_layout_plan_free(&L);
        wf_search_opplan_result_free(&r);
        if (has_ss && whole_line(human(a), &ss, -1)) {
            cJSON *j = NULL;
            if (a->json && (j = cJSON_CreateObject()) != NULL) {
                add_run_json(j, m->name, c->name, a->batch);
                cJSON_AddStringToObject(j, "mode", "op-level");
                cJSON_AddNullToObject(j, "best");
            }
            if (a->json && !j)
                return wf_errorf(WF_NOMEM, "out of memory");
            return whole_answer(a, &ss, j);
        }
        return wf_errorf(WF_NOFIT, "%s", msg);
    }
    ol_header(human(a), "rank");
    for (int i = 0; i < r.ntop; i++)
        ol_row(human(a), i + 1, &r.top[i]);
    if (a->pareto) {
        fprintf(human(a), "time/memory frontier (%d plans: faster ones need more memory; each figure is what "
                          "weft estimate of the plan reports)\n", r.npareto);
        ol_header(human(a), "#");
        for (int i = 0; i < r.npareto; i++)
            ol_row(human(a), i + 1, &r.pareto[i]);
    }
    wf_layout_plan L;
    ol_resolve(a->detail || a->json, m, c, a->batch, &r, &L);
    ol_print_best(human(a), &r, a->detail, &L);
    wf_estimate one;
    char why[300] = "";
    int one_ok = one_model(m, c, a->batch, &r.best_plan, &one, why, sizeof why);
    one_model_line(human(a), &r.best, why);
    /* Co-shard or NF1B on the one price against the op-level best's
     * (its own model's figure when the one model does not take its layouts). */
    const int ss_wins = has_ss && whole_line(human(a), &ss,
                                                   one_ok && one.fits ? one.iteration_time_s
                                                   : one_ok           ? -1
                                                                      : r.best.iteration_time_s);
    if ((st = ol_plot(a, m, &r)) != WF_OK || (a->out && !ss_wins && (st = ol_write(a, &r)) != WF_OK)) {
        wf_layout_plan_free(&L);
        wf_search_opplan_result_free(&r);
        return st;
    }
    cJSON *j = NULL;
    if (a->json) {
        j = cJSON_CreateObject();
        if (!j) {
            wf_layout_plan_free(&L);
            wf_search_opplan_result_free(&r);
            return wf_errorf(WF_NOMEM, "out of memory");
        }
        add_run_json(j, m->name, c->name, a->batch);
        cJSON_AddStringToObject(j, "mode", "op-level");
        cJSON *bj = ol_best_json(&r, &L);
        if (bj)
            cJSON_AddItemToObject(bj, "one_model", one_ok ? wf_estimate_to_json(&one) : cJSON_CreateNull());
        cJSON_AddItemToObject(j, "best", bj);
        cJSON_AddItemToObject(j, "top", ol_points_json(r.top, r.ntop));
        cJSON_AddItemToObject(j, "pareto", ol_points_json(r.pareto, r.npareto));
        cJSON_AddNumberToObject(j, "devices", (double)r.devices);
        cJSON_AddNumberToObject(j, "budget_bytes", r.budget_bytes);
        cJSON_AddNumberToObject(j, "searched", (double)r.searched);
        cJSON_AddNumberToObject(j, "searches", (double)r.searches);
        cJSON_AddNumberToObject(j, "search_time_s", r.search_time_s);
    }
    wf_layout_plan_free(&L);
    st = ss_wins ? whole_answer(a, &ss, j) : ol_answer(a->json, j, &r);
    wf_search_opplan_result_free(&r);
    return st;
}

/* One search space (--op-level without --mesh or --pp): the outer search's
 * best (Megatron's layouts) and the op-level search's layouts, every
 * candidate ranked by the one cost model within the device's memory
 * (wf_search_unified). The answer on stdout is the best's op-level plan
 * string (or its whole-model string when it has no op-level form). */
static wf_status run_unified(const plan_args *a, const wf_model_config *m, const wf_cluster *c)
{
    wf_search_unified_opts uo = {a->devices > 0 ? a->devices : 0, a->max_memory_gib > 0 ? a->max_memory_gib * GIB : 0, -1};
    wf_search_unified_result r;
    wf_status st = wf_search_unified(m, c, a->batch, &uo, &r);
    if (st != WF_OK) {
        wf_search_unified_result_free(&r);
        return st;
    }
    FILE *h = human(a);
    char pl_note[64] = "";
    if (r.perlayer_costed > 0)
        snprintf(pl_note, sizeof pl_note, ", %lld per-layer plans", (long long)r.perlayer_costed);
    fprintf(h, "weft plan --op-level: %s on %s, batch %lld: one search space (Megatron's layouts from the "
               "outer search, the op-level search's layouts, one cost model): %lld op-level candidates costed "
               "(%lld op-level searches%s) in %.3f s; budget %.2f GiB per device\n",
            m->name, c->name, (long long)a->batch, (long long)r.costed, (long long)r.searches, pl_note,
            r.search_time_s, r.budget_bytes / GIB);
    char cl[160];
    wf_cli_cluster_note(a->cluster, c, cl, sizeof cl);
    if (cl[0])
        fprintf(h, "assumed %s\n", cl);
    char whole[512], ol_text[256] = "";
    wf_plan_format(&r.as_plan, whole, sizeof whole);
    if (r.lowered)
        wf_layout_format(&r.plan, ol_text, sizeof ol_text);
    const wf_estimate *e = &r.est;
    fprintf(h, "outer search's best (Megatron's layouts): %.4f s per iteration\n", r.outer_best_s);
    fprintf(h, "best: %s (%s) on %lld devices: %.4f s per iteration, %.2f GiB per device%s\n",
            r.lowered ? ol_text : whole, r.megatron ? "Megatron's layouts" : "op-level layouts",
            (long long)wf_plan_devices(&r.as_plan), e->iteration_time_s, e->memory_per_device_bytes / GIB,
            r.megatron ? "" : ", faster than every plan of Megatron's family");
    if (r.perlayer_best_s > 0) {
        char pm_text[512], pd_text[512];
        wf_plan_format(&r.perlayer_moe, pm_text, sizeof pm_text);
        wf_plan dense_only = wf_layout_perlayer_dense_plan(m, &r.perlayer_dense, m->layers);
        wf_plan_format(&dense_only, pd_text, sizeof pd_text);
        fprintf(h, "%s per-layer plan: %.4f s per iteration, %.2f GiB per device, %.3fx the best of the others "
                   "(%.4f s): %s\n  expert layers: %s\n  dense layers: %s\n",
                r.perlayer ? "best (kind per-layer)," : "fastest", r.perlayer_best_s,
                r.perlayer_best_mem_bytes / GIB, r.perlayer_whole_s / r.perlayer_best_s, r.perlayer_whole_s,
                r.perlayer_detail, pm_text, pd_text);
    }
    if (r.megatron)
        fprintf(h, "  as a whole-model plan: %s\n", whole);
    else /* not Megatron's layouts: the string only names the composition */
        fprintf(h, "  composed as dp x model-parallel devices (tp) with its keys: %s\n", whole);
    fprintf(h, "  breakdown (s): compute %.4f, recompute %.4f, tp_comm %.4f, pp_comm %.4f, dp_comm %.4f, "
               "bubble %.4f, optimizer %.4f, exposed_comm %.4f\n",
            e->breakdown.compute, e->breakdown.recompute, e->breakdown.tp_comm, e->breakdown.pp_comm,
            e->breakdown.dp_comm, e->breakdown.bubble, e->breakdown.optimizer, e->breakdown.exposed_comm);
    if (a->detail && r.lowered) {
        fprintf(h, "layouts (per mesh axis %s, outermost first: inputs->outputs)\n", r.plan.mesh);
        for (int i = 0; i < r.plan.nlayouts; i++)
            fprintf(h, "%-40s %s\n", r.plan.op[i], r.plan.sig[i]);
    } else if (r.lowered) {
        fprintf(h, "(%d ops; --detail prints each op's layout)\n", r.plan.nlayouts);
    }
    if (a->out) {
        wf_plan_meta meta;
        plan_meta(a, &meta);
        cJSON *est = wf_estimate_to_json(e);
        if (!est)
            st = wf_errorf(WF_NOMEM, "out of memory writing %s", a->out);
        else if (r.lowered)
            st = wrote(a, wf_layout_write_file(a->out, &r.plan, &meta, est));
        else
            st = wrote(a, wf_plan_write_file(a->out, &r.as_plan, &meta, est));
        cJSON_Delete(est);
    }
    if (st == WF_OK && a->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON *b = j ? wf_estimate_to_json(e) : NULL;
        if (!b) {
            cJSON_Delete(j);
            wf_search_unified_result_free(&r);
            return wf_errorf(WF_NOMEM, "out of memory");
        }
        add_run_json(j, m->name, c->name, a->batch);
        cJSON_AddStringToObject(j, "mode", "one-space");
        cJSON_AddStringToObject(b, "oplevel_plan", ol_text);
        cJSON_AddStringToObject(b, r.megatron ? "whole_model_plan" : "composed_plan", whole);
        cJSON_AddBoolToObject(b, "megatron_layouts", r.megatron);
        cJSON_AddStringToObject(b, "plan_kind", r.perlayer ? "per-layer" : wf_plan_kind(&r.as_plan));
        if (r.perlayer_best_s > 0) {
            char pm_text[512], pd_text[512];
            wf_plan_format(&r.perlayer_moe, pm_text, sizeof pm_text);
            wf_plan dense_only = wf_layout_perlayer_dense_plan(m, &r.perlayer_dense, m->layers);
            wf_plan_format(&dense_only, pd_text, sizeof pd_text);
            cJSON *pj = cJSON_AddObjectToObject(j, "per_layer");
            if (pj) {
                cJSON_AddNumberToObject(pj, "iteration_time_s", r.perlayer_best_s);
                cJSON_AddNumberToObject(pj, "memory_per_device_bytes", r.perlayer_best_mem_bytes);
                cJSON_AddNumberToObject(pj, "others_best_s", r.perlayer_whole_s);
                cJSON_AddStringToObject(pj, "layers", r.perlayer_detail);
                cJSON_AddStringToObject(pj, "expert_plan", pm_text);
                cJSON_AddStringToObject(pj, "dense_plan", pd_text);
                cJSON_AddBoolToObject(pj, "best", r.perlayer);
                cJSON_AddNumberToObject(pj, "costed", (double)r.perlayer_costed);
            }
        }
        if (r.lowered) {
            cJSON *lay = cJSON_AddObjectToObject(b, "layouts");
            for (int i = 0; lay && i < r.plan.nlayouts; i++)
                cJSON_AddStringToObject(lay, r.plan.op[i], r.plan.sig[i]);
        }
        cJSON_AddItemToObject(j, "best", b);
        cJSON_AddNumberToObject(j, "outer_best_s", r.outer_best_s);
        cJSON_AddNumberToObject(j, "budget_bytes", r.budget_bytes);
        cJSON_AddNumberToObject(j, "costed", (double)r.costed);
        cJSON_AddNumberToObject(j, "searches", (double)r.searches);
        cJSON_AddNumberToObject(j, "search_time_s", r.search_time_s);
        st = wf_cli_print_json(j);
        cJSON_Delete(j);
    } else if (st == WF_OK) {
        printf("%s\n", r.lowered ? ol_text : whole);
        st = fflush(stdout) == 0 ? WF_OK : wf_errorf(WF_IO, "cannot write standard output");
    }
    wf_search_unified_result_free(&r);
    return st;
}

wf_status wf_cli_verify_oplevel(const char *model, const char *cluster, int64_t batch,
                                const char *path, double max_memory_gib, int json)
{
    return wf_cli_verify_plan(model, cluster, batch, path, max_memory_gib, json, NULL);
}

wf_status wf_cli_verify_plan(const char *model, const char *cluster, int64_t batch, const char *path,
                             double max_memory_gib, int json, const char *out)
{
    wf_model_config m;
    wf_cluster c;
    wf_status st;
    {
        /* A per-layer plan of a mixture of experts: priced layer by layer. */
        wf_status pst = WF_OK;
        if (wf_cli_perlayer_try(path, model, cluster, batch, json, 0, &pst))
            return pst;
    }
    if ((st = wf_model_lookup(model, &m)) != WF_OK || (st = wf_cluster_lookup(cluster, &c)) != WF_OK)
        return st;
    wf_layout pl;
    wf_layout_init(&pl);
    wf_plan_meta meta;
    memset(&meta, 0, sizeof meta);
    wf_plan whole;
    int is_ol = 0;
    if (wf_plan_is_oplevel_file(path)) {
        if ((st = wf_plan_read_file_any(path, &whole, &pl, &meta, &is_ol)) != WF_OK) {
            wf_layout_free(&pl);
            return st;
        }
    } else if ((st = wf_plan_parse(path, &whole)) != WF_OK) {
        return st;
    }
    FILE *h = json ? stderr : stdout;
    cJSON *whole_j = NULL;
    if (!is_ol) {
        /* A whole-model plan (string or file): the estimate's numbers, then
         * its lowering to the op-level plan of the same layouts. */
        char note[256];
        if ((st = wf_plan_complete(&whole, wf_cluster_devices(&c), batch, note, sizeof note)) != WF_OK)
            return st;
        wf_cost_ctx *ctx = NULL;
        wf_estimate e;
        if ((st = wf_cost_ctx_create(&m, &c, &ctx)) == WF_OK)
            st = wf_estimate_plan(ctx, &whole, batch, &e);
        wf_cost_ctx_free(ctx);
        if (st != WF_OK)
            return st;
        char text[PLAN_TEXT], head[2 * PLAN_TEXT + 512];
        wf_plan_format(&whole, text, sizeof text);
        /* Printed once the lowering is known (an error leaves stdout empty). */
        snprintf(head, sizeof head, "whole-model plan %s\n%s%s%s", text, note[0] ? "assumed " : "", note,
                 note[0] ? "\n" : "");
        if (json) {
            whole_j = wf_estimate_to_json(&e);
            if (!whole_j)
                return wf_errorf(WF_NOMEM, "out of memory");
            cJSON_AddStringToObject(whole_j, "plan", text);
        }
        /* Co-shard runs ops as pieces in turn, which no op-level layout
         * says: lowered, the plan would lose its pieces and be priced
         * without them. So verify prices it as the whole-model plan it is
         * (the estimate's one number) and refuses the op-level form. */
        if (whole.coshard > 1) {
            if (out) {
                cJSON_Delete(whole_j);
                return wf_errorf(WF_INVAL, "-o with --verify: %s has co-shard (coshard=%d), which an op-level plan "
                                           "cannot say (its layouts split ops across devices, not into pieces in "
                                           "turn); verify it without -o", text, whole.coshard);
            }
            fputs(head, h);
            fprintf(h, "%.4f s per iteration, %.2f GiB per device (%s); priced as the whole-model plan: co-shard "
                       "has no op-level form, so it is not lowered\n",
                    e.iteration_time_s, e.memory_per_device_bytes / GIB, e.fits ? "fits" : "DOES NOT FIT");
            if (!json)
                return WF_OK;
            cJSON *j = cJSON_CreateObject();
            if (!j || !cJSON_AddStringToObject(j, "plan", text) || !cJSON_AddBoolToObject(j, "lowered", 0)) {
                cJSON_Delete(j);
                cJSON_Delete(whole_j);
                return wf_errorf(WF_NOMEM, "out of memory");
            }
            add_run_json(j, m.name, c.name, batch);
            cJSON_AddItemToObject(j, "whole_model", whole_j);
            st = wf_cli_print_json(j);
            cJSON_Delete(j);
            return st;
        }
        /* Megatron pads a vocabulary tp does not divide; the op-level plan
         * is the padded model's, and is checked against it below. */
        wf_model_config padded;
        if (wf_megatron_pad_model(&m, whole.tp, &padded)) {
            char pn[256];
            snprintf(pn, sizeof pn,
                     "vocabulary %lld padded to %lld as Megatron pads it (--make-vocab-size-divisible-by %d x tp %d): "
                     "the op-level plan is %s's\n",
                     (long long)m.vocab, (long long)padded.vocab, WF_MEGATRON_VOCAB_DIVISIBLE_BY, whole.tp,
                     padded.name);
            size_t hl = strlen(head);
            snprintf(head + hl, sizeof head - hl, "%s", pn);
            m = padded;
        }
        st = wf_plan_lower(&m, &c, &whole, batch, &pl);
        if (st != WF_OK) {
            wf_layout_free(&pl);
            if (out || !json) {
                cJSON_Delete(whole_j);
                return st;
            }
            /* --json without -o: the estimate's numbers still answer. */
            fputs(head, h);
            fprintf(h, "%.4f s per iteration, %.2f GiB per device (%s); not lowered: %s\n", e.iteration_time_s,
                    e.memory_per_device_bytes / GIB, e.fits ? "fits" : "DOES NOT FIT", wf_last_error());
            st = wf_cli_print_json(whole_j);
            cJSON_Delete(whole_j);
            return st;
        }
        char ol_text[PLAN_TEXT];
        wf_layout_format(&pl, ol_text, sizeof ol_text);
        fputs(head, h);
        fprintf(h, "lowered to the op-level plan %s%s%s (docs/plan-format.md, \"Lowering\")\n", ol_text,
                pl.keys[0] ? " with keys " : "", pl.keys);
        snprintf(meta.model, sizeof meta.model, "%s", m.name);
        snprintf(meta.cluster, sizeof meta.cluster, "%s", c.name);
        meta.batch = batch;
    } else {
        if (out) {
            wf_layout_free(&pl);
            return wf_errorf(WF_INVAL, "-o with --verify writes the op-level form of a whole-model plan; %s is one "
                                       "already", path);
        }
        if (meta.model[0] && strcmp(meta.model, model) != 0 && strcmp(meta.model, m.name) != 0)
            wf_log(WF_LOG_WARN, "plan file was made for model '%s', checking it against '%s'",
                   meta.model, model);
        if (meta.batch > 0 && meta.batch != batch)
            wf_log(WF_LOG_WARN, "plan file was made for batch %lld, checking it with batch %lld",
                   (long long)meta.batch, (long long)batch);
    }
    wf_search_opplan_opts o;
    wf_search_opplan_opts_default(&o);
    o.max_memory_bytes = max_memory_gib > 0 ? max_memory_gib * GIB : 0;
    wf_search_opplan_result r;
    st = wf_search_opplan_verify(&m, &c, batch, &pl, &o, &r);
    if (st == WF_OK && out) {
        cJSON *est = wf_search_opplan_point_to_json(&r.best, &r.graph);
        st = est ? wf_layout_write_file(out, &pl, &meta, est) : wf_errorf(WF_NOMEM, "out of memory writing %s", out);
        cJSON_Delete(est);
        if (st == WF_OK)
            fprintf(stderr, "wrote %s\n", out);
    }
    wf_layout_free(&pl);
    if (st != WF_OK) {
        cJSON_Delete(whole_j);
        wf_search_opplan_result_free(&r);
        return st;
    }
    fprintf(h, "%s: op-level plan of %s on %s, batch %lld: valid\n", is_ol ? path : "lowered", m.name, c.name,
            (long long)batch);
    wf_layout_plan L;
    ol_resolve(json, &m, &c, batch, &r, &L);
    ol_print_best(h, &r, 0, &L);
    if (!r.best.one_model)
        one_model_line(h, &r.best, "");
    cJSON *j = NULL;
    if (json) {
        j = ol_best_json(&r, &L);
        if (!j) {
            wf_layout_plan_free(&L);
            cJSON_Delete(whole_j);
            wf_search_opplan_result_free(&r);
            return wf_errorf(WF_NOMEM, "out of memory");
        }
        add_run_json(j, m.name, c.name, batch);
        if (whole_j)
            cJSON_AddItemToObject(j, "whole_model", whole_j);
    }
    wf_layout_plan_free(&L);
    st = ol_answer(json, j, &r);
    wf_search_opplan_result_free(&r);
    return st;
}

wf_status wf_cmd_plan(int argc, char **argv)
{
    plan_args a;
    memset(&a, 0, sizeof a);
    a.top = 10;
    const char *tokens_text = NULL, *days_text = NULL;
    const char *max_memory_text = NULL, *deadline_text = NULL, *devices_text = NULL,
               *pp_text = NULL, *sw_text = NULL, *attn_text = NULL, *cp_text = NULL;
    int help = 0, npos = 0, fp8 = 0;
    const wf_opt opts[] = {
        {"model", 0, WF_OPT_STR, &a.model, "M", "zoo name, family with overrides, or model JSON file", 1},
        {"cluster", 0, WF_OPT_STR, &a.cluster, "C", "preset with overrides (dgx-a100:nodes=16) or cluster JSON file", 1},
        {"batch", 0, WF_OPT_INT, &a.batch, "B", "global batch size (samples per iteration)", 1},
        {"top", 0, WF_OPT_INT, &a.top, "K", "plans listed, fastest first (default 10)", 0},
        {"pareto", 0, WF_OPT_FLAG, &a.pareto, NULL, "also print the time/memory frontier", 0},
        {"max-memory", 0, WF_OPT_STR, &max_memory_text, "GiB", "memory budget per device (default: the device's memory)", 0},
        {"devices", 0, WF_OPT_STR, &devices_text, "N", "devices the plans use (default: all of the cluster's)", 0},
        {"devices-range", 0, WF_OPT_STR, &a.range, "A-B", "search every device count in A..B (whole nodes, or a divisor of one node)", 0},
        {"deadline", 0, WF_OPT_STR, &deadline_text, "S", "iteration time to meet; with --devices-range, the fewest devices that meet it", 0},
        {"tokens", 0, WF_OPT_STR, &tokens_text, "T", "tokens to train on (with --days: the deadline per iteration they imply, e.g. 300e9)", 0},
        {"days", 0, WF_OPT_STR, &days_text, "D", "days to train --tokens in", 0},
        {"tp-cross-node", 0, WF_OPT_FLAG, &a.tp_cross_node, NULL, "let tensor parallelism span nodes", 0},
        {"comm-search", 0, WF_OPT_FLAG, &a.comm_search, NULL, "also try every data-parallel gradient schedule", 0},
        {"sw", 0, WF_OPT_STR, &sw_text, "NAME", "framework profile of the plans: megatron-core (default), megatron-2022, megatron-2021, deepspeed, fsdp, weft (this runtime) or pytorch (plain DDP + autocast; docs/cost-model.md)", 0},
        {"fp8", 0, WF_OPT_FLAG, &fp8, NULL, "matrix products in FP8 (a device with an FP8 unit)", 0},
        {"attn", 0, WF_OPT_STR, &attn_text, "KIND", "attention kernels: flash or unfused (default: the profile's)", 0},
        {"cp", 0, WF_OPT_STR, &cp_text, "N", "context parallelism (default: searched for sequences of 8192 tokens or more)", 0},
        {"exhaustive", 0, WF_OPT_FLAG, &a.exhaustive, NULL, "score every candidate (no pruning)", 0},
        {"op-level", 0, WF_OPT_FLAG, &a.op_level, NULL, "search one space: Megatron's layouts and per-op SBP layouts on one cost model (with --mesh/--pp: the op-level search alone, as by default for models that are not transformers)", 0},
        {"whole-model", 0, WF_OPT_FLAG, &a.whole_model, NULL, "plan dp x pp for models that are not transformers (the estimate's model)", 0},
        {"mesh", 0, WF_OPT_STR, &a.mesh, "M", "op-level: the mesh of each stage, e.g. 8x8 (default: every factoring)", 0},
        {"pp", 0, WF_OPT_STR, &pp_text, "N", "op-level: pipeline stages (default: 1 and every divisor of the devices)", 0},
        {"no-seq-split", 0, WF_OPT_FLAG, &a.no_seq_split, NULL, "op-level, transformers: no sequence splits outside matmuls (Megatron without sequence parallelism)", 0},
        {"verify", 0, WF_OPT_STR, &a.verify, "PLAN", "check a plan (string or file) against the model and cluster and print its numbers; a whole-model plan is also lowered to its op-level form (-o FILE writes it)", 0},
        {"detail", 0, WF_OPT_FLAG, &a.detail, NULL, "op-level: also print every op's layout; whole-model: the best plan's schedule, each stage's order of tasks", 0},
        {"plot", 0, WF_OPT_STR, &a.plot, "FILE", "draw the time/memory frontier as SVG (one series per device count with --devices-range)", 0},
        {"csv", 0, WF_OPT_STR, &a.csv, "FILE", "the frontier's points as CSV", 0},
        {"emit", 0, WF_OPT_STR, &a.emit, "FORMAT", "search only the plans megatron, deepspeed, torchtitan or fsdp runs, priced under its profile, and print the chosen one as its settings (docs/export.md)", 0},
        {"json", 0, WF_OPT_FLAG, &a.json, NULL, "print one JSON object on stdout", 0},
        {"output", 'o', WF_OPT_STR, &a.out, "FILE", "write the best plan (or the deadline's) as a plan file", 0},
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    wf_status st = wf_opts_parse(opts, argc, argv, 1, NULL, 0, &npos, &help);
    if (help) {
        wf_opts_usage(stdout, "weft plan",
                      "Searches the parallel plans of a model on a cluster: the fastest that fit, and "
                      "the time/memory frontier.", opts);
        return WF_OK;
    }
    if (st != WF_OK)
        return st;
    if ((st = wf_cli_check_batch(a.batch)) != WF_OK)
        return st;
    if ((a.out && (st = wf_file_check_output(a.out, "-o")) != WF_OK) ||
        (a.plot && (st = wf_file_check_output(a.plot, "--plot")) != WF_OK) ||
        (a.csv && (st = wf_file_check_output(a.csv, "--csv")) != WF_OK))
        return st;
    if (a.emit && (st = wf_cli_export_check_format(a.emit, "--emit")) != WF_OK)
        return st;
    if (a.top < 1 || a.top > 100000)
        return wf_errorf(WF_INVAL, "--top=%lld: expected 1..100000", (long long)a.top);
    /* Given values must be positive (absent ones take the defaults). */
    if (max_memory_text &&
        (st = wf_parse_num(max_memory_text, "--max-memory", 1e-9, 1e9, &a.max_memory_gib)) != WF_OK)
        return st;
    if (deadline_text &&
        (st = wf_parse_num(deadline_text, "--deadline", 1e-12, 1e12, &a.deadline_s)) != WF_OK)
        return st;
    if (devices_text &&
        (st = wf_parse_int(devices_text, "--devices", 1, (int64_t)1 << 30, &a.devices)) != WF_OK)
        return st;
    if (a.range && devices_text)
        return wf_errorf(WF_INVAL, "--devices and --devices-range exclude each other");
    if (pp_text && (st = wf_parse_int(pp_text, "--pp", 1, 4096, &a.pp)) != WF_OK)
        return st;
    if (a.op_level && a.whole_model)
        return wf_errorf(WF_INVAL, "--op-level and --whole-model exclude each other");
    if (a.verify) {
        if (a.range || a.op_level || a.whole_model || a.mesh || pp_text)
            return wf_errorf(WF_INVAL, "--verify PLAN takes --model, --cluster, --batch, --max-memory, "
                                       "--json and -o only");
        if (a.out && (st = wf_file_check_output(a.out, "-o")) != WF_OK)
            return st;
        return wf_cli_verify_plan(a.model, a.cluster, a.batch, a.verify, a.max_memory_gib, a.json, a.out);
    }

    wf_model_config m;
    wf_cluster c;
    if ((st = wf_model_lookup(a.model, &m)) != WF_OK || (st = wf_cluster_lookup(a.cluster, &c)) != WF_OK)
        return st;
    /* Tokens in days: the deadline per iteration they imply. */
    if ((tokens_text != NULL) != (days_text != NULL))
        return wf_errorf(WF_INVAL, "--tokens and --days go together");
    if (tokens_text) {
        double tokens, days;
        if (deadline_text)
            return wf_errorf(WF_INVAL, "--tokens/--days and --deadline exclude each other");
        if ((st = wf_parse_num(tokens_text, "--tokens", 1, 1e18, &tokens)) != WF_OK ||
            (st = wf_parse_num(days_text, "--days", 1e-6, 1e6, &days)) != WF_OK)
            return st;
        if (!wf_model_is_transformer(&m) || m.seq < 1)
            return wf_errorf(WF_INVAL, "--tokens: model '%s' does not read token sequences", m.name);
        double per_iter = (double)a.batch * (double)m.seq, iters = tokens / per_iter;
        a.deadline_s = days * 86400.0 / iters;
        deadline_text = tokens_text; /* a whole-model search option, as --deadline is */
        fprintf(human(&a), "%g tokens in %g days at batch %lld x sequence %lld = %.4g tokens per "
                           "iteration: %.4g iterations, each within %.4f s\n",
                tokens, days, (long long)a.batch, (long long)m.seq, per_iter, iters, a.deadline_s);
    }
    /* Op-level when asked, or for a model the outer search does not cover,
     * unless an option of the whole-model search is given. */
    const char *whole_only = a.range && !a.op_level ? "--devices-range"
                             : deadline_text && !(a.op_level && a.range) ? "--deadline"
                             : a.tp_cross_node ? "--tp-cross-node" : a.comm_search ? "--comm-search"
                             : a.exhaustive ? "--exhaustive" : sw_text ? "--sw" : fp8 ? "--fp8"
                             : attn_text ? "--attn" : cp_text ? "--cp" : NULL;
    const char *ol_only = a.mesh ? "--mesh" : pp_text ? "--pp" : a.no_seq_split ? "--no-seq-split"
                                                                                : NULL;
    if (a.op_level && whole_only)
        return wf_errorf(WF_INVAL, "%s works with whole-model plans, not with --op-level", whole_only);
    if (a.whole_model && ol_only)
        return wf_errorf(WF_INVAL, "%s works with op-level plans, not with --whole-model", ol_only);
    int op_level = a.op_level || (!a.whole_model && !whole_only &&
                                  (ol_only || !wf_model_is_transformer(&m)));
    if (!op_level && ol_only)
        return wf_errorf(WF_INVAL, "%s works with op-level plans (add --op-level)", ol_only);
    if (op_level && a.emit)
        return wf_errorf(WF_INVAL, "--emit %s: an op-level plan (per-op layouts) has no framework form; "
                                   "add --whole-model for a plan of dp, tp and pp degrees", a.emit);
    if (a.op_level && a.range) {
        if (a.plot || a.csv || a.out)
            return wf_errorf(WF_INVAL, "--op-level --devices-range prints a table (and --json); --plot, --csv and -o "
                                       "take one device count");
        return run_oplevel_range(&a, &m, &c);
    }
    /* --op-level alone searches the one space; with --mesh or --pp (or a
     * frontier to draw) the op-level search explores layouts on its own. */
    if (a.op_level && !ol_only && !a.pareto && !a.plot && !a.csv)
        return run_unified(&a, &m, &c);
    if (op_level) {
        progress pg = {wf_now_s(), 0, 0, isatty(STDERR_FILENO), 0, 1};
        return run_oplevel(&a, &m, &c, &pg);
    }
    wf_search_outer_opts o;
    wf_search_outer_opts_default(&o);
    /* The profile keys every plan of the search carries, read as a plan
     * string reads them. */
    if (sw_text || attn_text || fp8 || cp_text) {
        char keys[256];
        snprintf(keys, sizeof keys, "sw=%s,attn=%s,fp8=%d,cp=%s", sw_text ? sw_text : "megatron-core",
                 attn_text ? attn_text : "flash", fp8, cp_text ? cp_text : "1");
        wf_plan k;
        if ((st = wf_plan_parse(keys, &k)) != WF_OK)
            return st;
        o.sw = k.sw;
        o.fp8 = k.fp8;
        o.attn = attn_text ? k.attn : WF_ATTN_AUTO;
        o.cp = cp_text ? k.cp : 0;
    }
    /* --emit X: the plans X runs, priced under X's profile unless --sw says
     * otherwise (docs/export.md, "plan --emit"). */
    emit_filter ef;
    memset(&ef, 0, sizeof ef);
    if (a.emit) {
        wf_sw sw;
        if ((st = wf_export_target(a.emit, &sw)) != WF_OK)
            return st;
        if (!sw_text)
            o.sw = sw;
        ef.target = a.emit;
        ef.m = &m;
        o.accept = emit_accept;
        o.accept_user = &ef;
    }
    o.top_k = (int)a.top;
    o.max_memory_bytes = a.max_memory_gib > 0 ? a.max_memory_gib * GIB : 0;
    o.devices = a.devices > 0 ? a.devices : 0;
    o.tp_cross_node = a.tp_cross_node;
    o.exhaustive = a.exhaustive;
    o.search_comm = a.comm_search;
    progress pg = {wf_now_s(), 0, 0, isatty(STDERR_FILENO), 0, 1}; /* a bar only on a terminal */
    o.progress = progress_cb;
    o.progress_user = &pg;
    return a.range ? run_range(&a, &m, &c, &o, &pg) : run_one(&a, &m, &c, &o, &pg);
}
