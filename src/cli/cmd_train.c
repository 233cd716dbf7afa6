/* weft train: trains a model for real on CPUs, as one process or under
 * mpiexec (data parallelism over every rank, the gradients reduced by the
 * comm schedule). Rank 0 prints one line per step on stderr (step, loss,
 * samples/s or tokens/s, the time split between compute and exposed
 * communication) and, with --log, appends one JSON object per step to a file
 * (each line flushed as it is written; a resumed run appends to the same
 * file). With --json the run's summary is the one JSON object on stdout.
 *
 * Every rank parses the same arguments and runs the same checks; statuses are
 * agreed across ranks before anyone stops, so a bad input ends every rank
 * with exit 1 and no rank is left waiting. Only rank 0 prints the error line:
 * the other ranks close their stderr before returning the agreed status. */
#include "cli/cli.h"
#include "weft/layout.h"
#include "weft/search.h"
#include "weft/runtime.h"
#include "weft/runtime_io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *model, *data, *plan, *comm, *cluster, *optimizer, *checkpoint, *log, *init;
    int64_t batch, steps, seed, every, threads, print_every;
    double lr, clip, wd;
    int resume, json, reference, help;
} train_args;

static wf_status check_args(train_args *a, wf_optim_config *oc)
{
    wf_status bst = wf_cli_check_batch(a->batch);
    if (bst != WF_OK)
        return bst;
    if (a->steps < 1)
        return wf_errorf(WF_INVAL, "--steps=%lld must be at least 1", (long long)a->steps);
    if (a->seed < 0)
        return wf_errorf(WF_INVAL, "--seed=%lld must be >= 0", (long long)a->seed);
    if (a->every < 0)
        return wf_errorf(WF_INVAL, "--checkpoint-every=%lld must be >= 0", (long long)a->every);
    if (a->every > 0 && !a->checkpoint)
        return wf_errorf(WF_INVAL, "--checkpoint-every needs --checkpoint DIR");
    if (a->resume && !a->checkpoint)
        return wf_errorf(WF_INVAL, "--resume needs --checkpoint DIR");
    if (a->init && strcmp(a->init, "file") != 0 && strcmp(a->init, "random") != 0)
        return wf_errorf(WF_INVAL, "--init=%s (allowed: file, random)", a->init);
    if (a->threads != INT64_MIN && (a->threads < 1 || a->threads > 1024))
        return wf_errorf(WF_INVAL, "--threads=%lld must be in [1, 1024]", (long long)a->threads);
    if (a->cluster) {
        wf_cluster cl;
        wf_status cs = wf_cluster_lookup(a->cluster, &cl);
        if (cs != WF_OK)
            return cs;
    }
    /* Output paths are checked before any work. */
    if (a->checkpoint) {
        wf_status cs = wf_file_check_output_dir(a->checkpoint, "--checkpoint");
        if (cs != WF_OK)
            return cs;
    }
    if (a->log) {
        wf_status cs = wf_file_check_output(a->log, "--log");
        if (cs != WF_OK)
            return cs;
    }
    if (a->print_every < 1)
        return wf_errorf(WF_INVAL, "--print-every=%lld must be at least 1", (long long)a->print_every);
    wf_optim_kind k;
    wf_status st = wf_optim_parse(a->optimizer, &k);
    if (st != WF_OK)
        return st;
    wf_optim_defaults(k, oc);
    if (!isnan(a->lr))
        oc->lr = a->lr;
    if (!isnan(a->clip))
        oc->clip_norm = a->clip;
    if (!isnan(a->wd))
        oc->weight_decay = a->wd;
    return wf_optim_check(oc);
}

/* ---- stopping on SIGINT / SIGTERM ----------------------------------------------
 * The first signal asks the run to stop after the step in progress: every rank
 * agrees on it at the end of the step, the checkpoint is written on every rank
 * (with --checkpoint), and weft exits 130. A second signal exits at once; the
 * last complete checkpoint stays intact (checkpoints are written atomically). */
static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    if (g_stop)
        _exit(130);
    g_stop = 1;
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* "42 s", "12 min 5 s", "3 h 20 min" */
static const char *fmt_dur(double s, char *buf, size_t cap)
{
    long long t = (long long)(s + 0.5);
    if (t < 60)
        snprintf(buf, cap, "%lld s", t);
    else if (t < 3600)
        snprintf(buf, cap, "%lld min %lld s", t / 60, t % 60);
    else
        snprintf(buf, cap, "%lld h %lld min", t / 3600, t % 3600 / 60);
    return buf;
}

static double per_s(double n, double s)
{
    return s > 0 ? n / s : 0.0;
}

/* One JSON line per step. */
static int log_step(FILE *f, const wf_train_stats *s, int tokens)
{
    fprintf(f,
            "{\"step\":%lld,\"loss\":%.17g,\"time_s\":%.9g,\"compute_s\":%.9g,\"comm_s\":%.9g,"
            "\"samples_per_s\":%.9g",
            (long long)s->step, s->loss, s->time_s, s->compute_s, s->comm_s, per_s((double)s->samples, s->time_s));
    if (tokens)
        fprintf(f, ",\"tokens_per_s\":%.9g", per_s((double)s->tokens, s->time_s));
    fprintf(f, ",\"grad_norm\":%.9g}\n", s->grad_norm);
    return fflush(f);
}

/* On resume, cuts the log back to the checkpoint's step: the rows a crashed
 * or stopped run wrote after its last checkpoint are dropped (they are
 * replayed, bit-identically, by the resumed run), and so is a torn last line.
 * The cut log replaces the old one atomically. */
static wf_status cut_log(const char *path, int64_t step)
{
    if (access(path, F_OK) != 0)
        return WF_OK;
    char *text = NULL;
    size_t len = 0;
    wf_status st = wf_file_read_kind(path, WF_FILE_DATA, &text, &len);
    if (st != WF_OK)
        return st;
    size_t keep = 0;
    for (size_t i = 0; i < len;) {
        char *nl = memchr(text + i, '\n', len - i);
        if (!nl)
            break; /* a torn last line */
        /* The step read in place: sscanf would measure the rest of the log
         * on every line (quadratic in its length). */
        static const char head[] = "{\"step\":";
        const char *q = text + i, *end = nl;
        if ((size_t)(end - q) <= sizeof head - 1 || memcmp(q, head, sizeof head - 1) != 0)
            break;
        q += sizeof head - 1;
        long long s = 0;
        int digits = 0;
        for (; q < end && *q >= '0' && *q <= '9' && digits < 18; q++, digits++)
            s = s * 10 + (*q - '0');
        if (digits == 0 || s > step)
            break;
        i = (size_t)(nl - text) + 1;
        keep = i;
    }
    if (keep != len)
        st = wf_file_write_atomic(path, text, keep);
    free(text);
    return st;
}

static void describe(const wf_train_info *in, const train_args *a, const wf_optim_config *oc)
{
    fprintf(stderr, "model      %s (%.3g M parameters)\n", in->model, (double)in->params / 1e6);
    fprintf(stderr, "data       %s\n", in->data);
    fprintf(stderr, "init       %s\n", in->init);
    if (in->mesh[0])
        fprintf(stderr, "ranks      %d on mesh %s, SPMD (each rank its local graph); global batch %lld = %lld "
                "micro-batch(es) of %lld\n", in->nranks, in->mesh, (long long)a->batch, (long long)in->micro_batches,
                (long long)in->micro_batch);
    else
        fprintf(stderr, "ranks      %d, global batch %lld = %d x %lld micro-batch(es) of %lld\n", in->nranks,
                (long long)a->batch, in->nranks, (long long)in->micro_batches, (long long)in->micro_batch);
    fprintf(stderr, "comm       %s (%d collective group%s per step)%s%s\n", in->comm, in->ngroups,
            in->ngroups == 1 ? "" : "s", in->comm_note[0] ? "; " : "", in->comm_note);
    if (in->plan_note[0])
        fprintf(stderr, "assumed    %s\n", in->plan_note);
    fprintf(stderr, "optimizer  %s lr %g, weight decay %g, clip %g\n", wf_optim_name(oc->kind), oc->lr,
            oc->weight_decay, oc->clip_norm);
    fprintf(stderr, "blas       %s\n", wf_runtime_blas_describe());
    if (wf_runtime_blas_hint())
        fprintf(stderr, "hint       %s\n", wf_runtime_blas_hint());
    fprintf(stderr, "memory     parameters %.1f MiB, gradients %.1f MiB, optimizer %.1f MiB, activations %.1f MiB "
            "(%.1f MiB unplanned)%s\n",
            (double)in->memory.param_bytes / 1048576.0, (double)in->memory.grad_bytes / 1048576.0,
            (double)in->optimizer_bytes / 1048576.0, (double)in->memory.arena_bytes / 1048576.0,
            (double)in->memory.unplanned_bytes / 1048576.0,
            in->zero == 3 ? " on rank 0, ZeRO-3" : in->zero ? " on rank 0, ZeRO sharded" : "");
}

/* An op-level plan file of Megatron's family as the whole-model plan string
 * whose lowering it is (buf); other op-level plans are refused naming the
 * first op whose layout the runtime cannot run. */
static wf_status raise_oplevel(const train_args *a, char *buf, size_t cap)
{
    wf_model_config m;
    wf_cluster cl;
    wf_status st;
    if ((st = wf_model_lookup(a->model, &m)) != WF_OK ||
        (st = wf_cluster_of_job(a->cluster, 1, &cl)) != WF_OK)
        return st;
    wf_layout ol;
    wf_layout_init(&ol);
    wf_plan whole;
    wf_plan_meta meta;
    int is_ol = 0;
    st = wf_plan_read_file_any(a->plan, &whole, &ol, &meta, &is_ol);
    if (st == WF_OK)
        st = wf_plan_raise(&m, &cl, a->batch, &ol, &whole);
    wf_layout_free(&ol);
    if (st == WF_OK)
        wf_plan_format(&whole, buf, cap);
    return st;
}

static wf_status run(train_args *a, const wf_optim_config *oc, int rank)
{
    wf_train_config c;
    memset(&c, 0, sizeof c);
    c.model = a->model;
    c.data = a->data;
    c.batch = a->batch;
    c.plan = a->plan;
    c.cluster = a->cluster;
    c.comm = a->comm; /* the auto plan must be one that runs with it */
    char autoplan[256], note[320] = "";
    if (a->plan && strcmp(a->plan, "auto") == 0) {
        /* The planner's fastest plan that the runtime executes here. */
        wf_status ast = wf_cli_auto_plan(&c, autoplan, sizeof autoplan, note, sizeof note);
        if (ast != WF_OK)
            return ast;
        c.plan = autoplan;
    }
    char raised[256];
    if (a->plan && wf_plan_is_oplevel_file(a->plan)) {
        /* A data-parallel plan's op-level form runs on the data-parallel
         * runtime; any other op-level plan runs its layouts as they are on
         * the SPMD executor (docs/runtime.md). */
        /* A per-layer plan of a mixture of experts (its dense layers in
         * other layouts than its expert layers): no engine runs one. */
        wf_model_config pm;
        wf_cluster pc;
        wf_layout pol;
        wf_layout_perlayer ppl;
        wf_status pst = WF_OK;
        wf_layout_init(&pol);
        int per = wf_cli_perlayer_read(a->plan, a->model, a->cluster, a->batch, &pm, &pc,
                                       &pol, &ppl, &pst);
        wf_layout_free(&pol);
        if (per < 0)
            return pst;
        if (per > 0) {
            char detail[256];
            wf_layout_perlayer_describe(&ppl, detail, sizeof detail);
            return wf_errorf(WF_INVAL, "%s: a per-layer plan (%s): the runtime runs a mixture of experts with one "
                                       "layout for every layer (--plan dp=..,ep=..); per-layer plans are planned, "
                                       "estimated and simulated, not run", a->plan, detail);
        }
        wf_plan dp;
        if (raise_oplevel(a, raised, sizeof raised) == WF_OK && wf_plan_parse(raised, &dp) == WF_OK && dp.tp == 1 &&
            !dp.sp) {
            if (rank == 0)
                fprintf(stderr, "plan       %s: the op-level form of %s\n", a->plan, raised);
            c.plan = raised;
        } else {
            wf_clear_error();
            if (rank == 0)
                fprintf(stderr, "plan       %s: op-level layouts, run SPMD (each rank its local graph)\n", a->plan);
        }
    }
    c.comm = a->comm;
    c.comm_auto = wf_cli_comm_auto;
    c.cluster = a->cluster;
    c.optim = *oc;
    c.seed = (uint64_t)a->seed;
    c.reference = a->reference;
    c.init_random = a->init && strcmp(a->init, "random") == 0;
    wf_train *t = NULL;
    wf_status st = wf_train_create(&c, &t);
    if (st != WF_OK)
        return st;
    if (a->resume) {
        st = wf_train_load(t, a->checkpoint);
        if (st == WF_NOTFOUND)
            st = wf_errorf(WF_NOTFOUND, "--resume: no checkpoint in %s", a->checkpoint);
        if (st != WF_OK) {
            wf_train_free(t);
            return st;
        }
    }
    if (wf_train_steps_done(t) >= a->steps) {
        int64_t done = wf_train_steps_done(t);
        wf_train_free(t);
        return wf_errorf(WF_INVAL, "--steps=%lld: the checkpoint in %s is already at step %lld", (long long)a->steps,
                         a->checkpoint, (long long)done);
    }
    wf_train_info info;
    wf_train_info_of(t, &info);
    int tokens = info.tokens_per_sample > 0;
    /* The log is opened after a resume has succeeded: a refused checkpoint
     * leaves every file as it was. */
    FILE *log = NULL;
    st = WF_OK;
    if (a->log && rank == 0 && a->resume)
        st = cut_log(a->log, wf_train_steps_done(t));
    if (a->log && rank == 0 && st == WF_OK) {
        log = fopen(a->log, a->resume ? "a" : "w");
        if (!log)
            st = wf_errorf(WF_IO, "--log: cannot open %s: %s", a->log, strerror(errno));
    }
    st = wf_mpi_agree(st);
    if (st != WF_OK) {
        wf_train_free(t);
        return st;
    }
    if (rank == 0 && note[0])
        fprintf(stderr, "plan       %s\n", note);
    if (rank == 0)
        describe(&info, a, oc);
    int64_t start = wf_train_steps_done(t);
    if (rank == 0 && start > 0)
        fprintf(stderr, "resumed    from step %lld of %s\n", (long long)start, a->checkpoint);
    double first_loss = NAN, last_loss = NAN, time_s = 0, comm_s = 0, compute_s = 0;
    int64_t samples = 0, ntok = 0, nsteps = 0;
    int log_err = 0;
    int on_tty = isatty(STDERR_FILENO);
    double run_start_s = wf_now_s();
    char d1[32], d2[32];
    for (int64_t i = start; i < a->steps && st == WF_OK; i++) {
        wf_train_stats s;
        st = wf_train_step(t, &s);
        if (st != WF_OK)
            break;
        /* A diverged run stops here on every rank, before a checkpoint could
         * save its non-finite state: the last checkpoint stays the last good one. */
        if (!isfinite(s.loss))
            st = wf_errorf(WF_INVAL, "step %lld: the loss is %g; stopping (try a lower --lr)%s%s%s",
                           (long long)s.step, s.loss, a->checkpoint ? "; the checkpoint in " : "",
                           a->checkpoint ? a->checkpoint : "", a->checkpoint ? " is left as it was" : "");
        if ((st = wf_mpi_agree(st)) != WF_OK)
            break;
        if (isnan(first_loss))
            first_loss = s.loss;
        last_loss = s.loss;
        /* The first step of a run pays for warming up; leave it out of the means. */
        if (i > start || a->steps - start == 1) {
            time_s += s.time_s;
            comm_s += s.comm_s;
            compute_s += s.compute_s;
            samples += s.samples;
            ntok += s.tokens;
            nsteps++;
        }
        if (rank == 0 && ((s.step % a->print_every) == 0 || s.step == a->steps || i == start)) {
            fprintf(stderr, "step %6lld/%lld  loss %.5f  %s %9.0f  compute %.4f s  comm %.4f s", (long long)s.step,
                    (long long)a->steps, s.loss, tokens ? "tokens/s" : "samples/s",
                    per_s((double)(tokens ? s.tokens : s.samples), s.time_s), s.compute_s, s.comm_s);
            /* Elapsed time and ETA (from the mean step so far) on a terminal only. */
            if (on_tty) {
                double el = wf_now_s() - run_start_s;
                double eta = el / (double)(i - start + 1) * (double)(a->steps - 1 - i);
                fprintf(stderr, "  elapsed %s", fmt_dur(el, d1, sizeof d1));
                fprintf(stderr, "  ETA %s", fmt_dur(eta, d2, sizeof d2));
            }
            fputc('\n', stderr);
        }
        if (log && log_step(log, &s, tokens) != 0)
            log_err = 1;
        int saved = 0;
        if (a->checkpoint && ((a->every > 0 && s.step % a->every == 0) || s.step == a->steps)) {
            st = wf_train_save(t, a->checkpoint);
            saved = st == WF_OK;
            if (st == WF_OK && rank == 0)
                fprintf(stderr, "checkpoint step %lld -> %s\n", (long long)s.step, a->checkpoint);
        }
        /* A signal: stop after this step on every rank, saving it first. */
        wf_status stop = st == WF_OK && g_stop ? WF_INTERRUPTED : WF_OK;
        if (st == WF_OK && wf_mpi_agree(stop) == WF_INTERRUPTED) {
            if (a->checkpoint && !saved)
                st = wf_train_save(t, a->checkpoint);
            if (st == WF_OK)
                st = a->checkpoint
                         ? wf_errorf(WF_INTERRUPTED, "interrupted: stopped after step %lld and saved it in %s "
                                                     "(continue with --resume)",
                                     (long long)s.step, a->checkpoint)
                         : wf_errorf(WF_INTERRUPTED, "interrupted: stopped after step %lld (nothing saved: "
                                                     "no --checkpoint)",
                                     (long long)s.step);
        }
    }
    if (st == WF_OK)
        st = wf_train_sync(t);
    if (log) {
        if (fflush(log) != 0 || fsync(fileno(log)) != 0 || ferror(log))
            log_err = 1;
        if (fclose(log) != 0)
            log_err = 1;
    }
    wf_status ls = log_err ? wf_errorf(WF_IO, "--log: writing %s failed", a->log) : WF_OK;
    ls = wf_mpi_agree(ls);
    if (st == WF_OK)
        st = ls;
    uint64_t sum = wf_train_checksum(t);
    wf_train_free(t);
    if (st != WF_OK)
        return st;
    if (rank == 0) {
        double step_s = nsteps > 0 ? time_s / (double)nsteps : 0;
        fprintf(a->json ? stderr : stdout, "done       %lld steps, loss %.5f -> %.5f, %.4f s/step (compute %.4f, comm %.4f)\n",
                (long long)(a->steps - start), first_loss, last_loss, step_s,
                nsteps ? compute_s / (double)nsteps : 0.0, nsteps ? comm_s / (double)nsteps : 0.0);
        if (a->json) {
            cJSON *j = cJSON_CreateObject();
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)sum);
            cJSON_AddStringToObject(j, "model", info.model);
            cJSON_AddStringToObject(j, "comm", info.comm);
            cJSON_AddStringToObject(j, "init", info.init);
            cJSON_AddNumberToObject(j, "ranks", info.nranks);
            cJSON_AddNumberToObject(j, "batch", (double)a->batch);
            cJSON_AddNumberToObject(j, "steps", (double)a->steps);
            cJSON_AddNumberToObject(j, "first_step", (double)start + 1);
            cJSON_AddNumberToObject(j, "first_loss", first_loss);
            cJSON_AddNumberToObject(j, "final_loss", last_loss);
            cJSON_AddNumberToObject(j, "step_time_s", step_s);
            cJSON_AddNumberToObject(j, "compute_s", nsteps ? compute_s / (double)nsteps : 0.0);
            cJSON_AddNumberToObject(j, "comm_s", nsteps ? comm_s / (double)nsteps : 0.0);
            cJSON_AddNumberToObject(j, "samples_per_s", per_s((double)samples, time_s));
            if (tokens)
                cJSON_AddNumberToObject(j, "tokens_per_s", per_s((double)ntok, time_s));
            cJSON_AddNumberToObject(j, "params", (double)info.params);
            /* Rank 0's memory: under ZeRO what it holds of each block. */
            cJSON_AddNumberToObject(j, "zero", info.zero);
            cJSON_AddNumberToObject(j, "param_bytes", (double)info.memory.param_bytes);
            cJSON_AddNumberToObject(j, "grad_bytes", (double)info.memory.grad_bytes);
            cJSON_AddNumberToObject(j, "optimizer_bytes", (double)info.optimizer_bytes);
            cJSON_AddStringToObject(j, "param_checksum", hex);
            st = wf_cli_print_json(j);
            cJSON_Delete(j);
        }
    }
    return st;
}

/* Every rank must run the same training: the arguments that shape the model,
 * the plan, the batches, the schedule, the random streams, the optimizer, the
 * data and the checkpoint are compared across the ranks before any work. */
static wf_status agree_args(const train_args *a)
{
    char batch[24], steps[24], seed[24], every[24], lr[32], clip[32], wd[32];
    snprintf(batch, sizeof batch, "%lld", (long long)a->batch);
    snprintf(steps, sizeof steps, "%lld", (long long)a->steps);
    snprintf(seed, sizeof seed, "%lld", (long long)a->seed);
    snprintf(every, sizeof every, "%lld", (long long)a->every);
    /* "" when not given (the defaults are the same on every rank) */
    lr[0] = clip[0] = wd[0] = 0;
    if (!isnan(a->lr))
        snprintf(lr, sizeof lr, "%.17g", a->lr);
    if (!isnan(a->clip))
        snprintf(clip, sizeof clip, "%.17g", a->clip);
    if (!isnan(a->wd))
        snprintf(wd, sizeof wd, "%.17g", a->wd);
    const char *const names[] = {"--model", "--plan", "--batch", "--steps", "--comm", "--cluster", "--seed",
                                 "--optimizer", "--lr", "--clip", "--weight-decay", "--data", "--init",
                                 "--checkpoint", "--checkpoint-every", "--resume", "--reference"};
    const char *const values[] = {a->model, a->plan, batch, steps, a->comm, a->cluster, seed, a->optimizer, lr,
                                  clip, wd, a->data, a->init, a->checkpoint, every, a->resume ? "yes" : "",
                                  a->reference ? "yes" : ""};
    return wf_mpi_agree_fields(names, values, (int)(sizeof names / sizeof names[0]));
}

wf_status wf_cmd_train(int argc, char **argv)
{
    train_args a;
    memset(&a, 0, sizeof a);
    a.optimizer = "adamw";
    a.lr = a.clip = a.wd = NAN;
    a.print_every = 1;
    a.threads = INT64_MIN; /* not given */
    const wf_opt opts[] = {
        {"model", 0, WF_OPT_STR, &a.model, "M", "model: zoo name, family with overrides, or model JSON", 1},
        {"data", 0, WF_OPT_STR, &a.data, "D", "synthetic, fashion-mnist, text:PATH, text:fortunes, or a path", 1},
        {"batch", 0, WF_OPT_INT, &a.batch, "B", "global batch (divided among the ranks)", 1},
        {"plan", 0, WF_OPT_STR, &a.plan, "P", "plan string or file (dp = ranks; mbs for micro-batches), or auto: the planner's fastest plan "
         "that the runtime runs", 1},
        {"steps", 0, WF_OPT_INT, &a.steps, "N", "train until step N (a resumed run continues to N)", 1},
        {"comm", 0, WF_OPT_STR, &a.comm, "S",
         "gradient schedule: wfbp, ddp[:MiB], dear[:MiB], or auto (default: the plan's, ddp)", 0},
        {"cluster", 0, WF_OPT_STR, &a.cluster, "C", "cluster that --comm auto simulates (default local)", 0},
        {"optimizer", 0, WF_OPT_STR, &a.optimizer, "O", "adamw (default) or sgd", 0},
        {"lr", 0, WF_OPT_NUM, &a.lr, "X", "learning rate (adamw 1e-3, sgd 0.01)", 0},
        {"clip", 0, WF_OPT_NUM, &a.clip, "X", "clip the global gradient norm to X (default 1; 0 = off)", 0},
        {"weight-decay", 0, WF_OPT_NUM, &a.wd, "X", "weight decay of matrices (adamw 0.01, sgd 0)", 0},
        {"seed", 0, WF_OPT_INT, &a.seed, "N", "seed of initialization, data order and dropout (default 0)", 0},
        {"init", 0, WF_OPT_STR, &a.init, "FROM", "an .onnx model's parameters: file (its weights, the default) or random (from --seed)", 0},
        {"checkpoint", 0, WF_OPT_STR, &a.checkpoint, "DIR", "write a checkpoint to DIR at the end (and every K steps)", 0},
        {"checkpoint-every", 0, WF_OPT_INT, &a.every, "K", "also checkpoint every K steps", 0},
        {"resume", 0, WF_OPT_FLAG, &a.resume, NULL, "continue from the checkpoint in DIR (bit-identical losses)", 0},
        {"log", 0, WF_OPT_STR, &a.log, "FILE", "one JSON object per step (on --resume, cut back to the checkpoint's step, then appended)", 0},
        {"print-every", 0, WF_OPT_INT, &a.print_every, "K", "print one line every K steps (default 1)", 0},
        {"threads", 0, WF_OPT_INT, &a.threads, "N", "BLAS threads per rank (default: 1 under mpiexec, else BLAS's)", 0},
        {"reference", 0, WF_OPT_FLAG, &a.reference, NULL, "run the naive reference kernels (slow; for checking)", 0},
        {"json", 0, WF_OPT_FLAG, &a.json, NULL, "print the run's summary as one JSON object on stdout", 0},
        {NULL, 0, WF_OPT_FLAG, NULL, NULL, NULL, 0},
    };
    int started = 0, npos = 0;
    catch_signals();
    wf_status st = wf_mpi_start(&started);
    if (st != WF_OK)
        return st;
    int rank, nranks;
    wf_mpi_world(&rank, &nranks);
    st = wf_opts_parse(opts, argc, argv, 1, NULL, 0, &npos, &a.help);
    if (st == WF_OK && a.help) {
        if (rank == 0)
            wf_opts_usage(stdout, "weft train",
                          "Trains the model on this machine's CPUs. Under mpiexec -n N the global batch is\n"
                          "split over N ranks (data parallelism) and the gradients are reduced by the comm\n"
                          "schedule, overlapping the backward pass (dear also overlaps the next forward).\n"
                          "A plan with pp > 1 (e.g. pp=2,mbs=2) cuts the model into pipeline stages over\n"
                          "pp x dp ranks (GPipe, 1F1B, or interleaved with vpp).",
                          opts);
        wf_mpi_stop(started);
        return WF_OK;
    }
    wf_optim_config oc;
    if (st == WF_OK)
        st = check_args(&a, &oc);
    /* One BLAS thread per rank under mpiexec unless told otherwise. */
    if (st == WF_OK && a.threads != INT64_MIN)
        st = wf_runtime_set_threads((int)a.threads);
    else if (st == WF_OK && nranks > 1)
        (void)wf_runtime_set_threads(1);
    st = wf_mpi_agree(st);
    if (st == WF_OK)
        st = agree_args(&a);
    if (st == WF_OK)
        st = run(&a, &oc, rank);
    wf_mpi_stop(started);
    if (st != WF_OK && rank != 0 && !freopen("/dev/null", "w", stderr))
        return st;
    return st;
}
