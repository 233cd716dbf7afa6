/* The trainer: a run of a plan on the runtime's engines (engine-impl.h:
 * replica, pipeline, SPMD), with checkpoints and resume. It picks the
 * engine once (wf_engine_select) and drives it through its interface, so
 * it never asks which engine it holds; what each engine runs is the
 * runtime's one table (runs_plan.c).
 *
 * Determinism: the data stream is a function of (spec, seed, position); the
 * dropout masks of step s are a function of (seed, s, global element index);
 * the initialization a function of the seed. So two runs, a resumed run and a
 * run on any number of ranks draw the same numbers; only the summation order
 * of the gradient reduction differs across rank counts (losses agree to
 * rounding), while a resumed run continues bit for bit.
 *
 * Errors: a rank whose data or kernels fail keeps calling the collectives
 * (its executor skips the kernels but runs the hooks), so no rank waits
 * forever; the step's gather then makes every rank return the error with the
 * message of the lowest failing rank. */
#include "runtime/engine-impl.h"
#include "kernels/kernels-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wf_train {
    wf_train_config c;
    MPI_Comm comm;               /* MPI_COMM_NULL without MPI */
    int rank, nranks;
    const wf_engine_iface *eng;  /* the engine running the plan */
    void *ctx;                   /* its state */
};

static int mpi_up(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (!init)
        return 0;
    MPI_Finalized(&fin);
    return !fin;
}

int wf_train_world_size(const wf_train_config *c)
{
    int rank = 0, nranks = 1;
    if (!c->self)
        wf_mpi_world(&rank, &nranks);
    return nranks;
}

wf_status wf_train_create(const wf_train_config *c, wf_train **out)
{
    *out = NULL;
    wf_train *t = calloc(1, sizeof *t);
    if (!t)
        return wf_errorf(WF_NOMEM, "out of memory creating the trainer");
    t->c = *c;
    t->comm = MPI_COMM_NULL;
    t->rank = 0;
    t->nranks = 1;
    if (mpi_up()) {
        if (MPI_Comm_dup(c->self ? MPI_COMM_SELF : MPI_COMM_WORLD, &t->comm) != MPI_SUCCESS) {
            free(t);
            return wf_errorf(WF_MPI, "MPI_Comm_dup failed");
        }
        MPI_Comm_set_errhandler(t->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(t->comm, &t->rank);
        MPI_Comm_size(t->comm, &t->nranks);
    }
    wf_engine_args *a = calloc(1, sizeof *a);
    wf_status st = a ? WF_OK : wf_errorf(WF_NOMEM, "out of memory creating the trainer");
    if (a) {
        a->c = &t->c;
        a->comm = t->comm;
        a->rank = t->rank;
        a->nranks = t->nranks;
        const wf_engine_iface *eng = wf_engine_select(a, &st);
        if (eng && (st = eng->create(a, &t->ctx)) == WF_OK)
            t->eng = eng;
        free(a);
    }
    /* Sizes refused before allocation name the batch that asked for them. */
    if (st == WF_NOFIT)
        wf_error_prefix(st, "--batch %lld on %d rank%s", (long long)c->batch, t->nranks, t->nranks == 1 ? "" : "s");
    st = wf_mpi_agree_on(t->comm, t->rank, t->nranks, st);
    if (st != WF_OK) {
        wf_train_free(t);
        return st;
    }
    *out = t;
    return WF_OK;
}

void wf_train_free(wf_train *t)
{
    if (!t)
        return;
    if (t->eng)
        t->eng->destroy(t->ctx);
    if (t->comm != MPI_COMM_NULL && mpi_up())
        MPI_Comm_free(&t->comm);
    free(t);
}

/* ---- steps and reports: the engine's ----------------------------------------------------------- */

wf_status wf_train_step(wf_train *t, wf_train_stats *s) { return t->eng->step(t->ctx, s); }

wf_status wf_train_sync(wf_train *t) { return t->eng->sync(t->ctx); }

int64_t wf_train_steps_done(const wf_train *t) { return t->eng->steps_done(t->ctx); }

uint64_t wf_train_checksum(const wf_train *t) { return t->eng->checksum(t->ctx); }

wf_exec *wf_train_exec(const wf_train *t) { return t->eng->exec(t->ctx); }

wf_status wf_train_gather_params(wf_train *t, float *out, int64_t cap, int64_t *n)
{
    return t->eng->gather_params(t->ctx, out, cap, n);
}

int wf_train_pipe_order(const wf_train *t, wf_pipe_op *ops, int cap) { return t->eng->trace(t->ctx, ops, cap); }

void wf_train_info_of(const wf_train *t, wf_train_info *out) { t->eng->info(t->ctx, out); }

/* ---- checkpoints ------------------------------------------------------------------------------ */

/* What a resumed run must share with the run that saved (checked on load). */
static void ckpt_rng(const wf_train *t, const wf_engine_ckpt *v, uint64_t rng[4])
{
    rng[0] = t->c.seed;
    rng[1] = (uint64_t)t->c.optim.kind;
    rng[2] = (uint64_t)t->c.batch;
    rng[3] = (uint64_t)v->m;
}

/* The run's settings a resume must match, as "key=value" lines, ending with
 * the engine's (its plan, or an SPMD run's layouts: each rank's shards are
 * those of its plan). */
static void ckpt_run(const wf_train *t, const wf_engine_ckpt *v, char *buf, size_t cap)
{
    snprintf(buf, cap, "data=%s\noptimizer=%s\nseed=%llu\nbatch=%lld\nmicro-batches per step=%lld\n%s",
             t->c.data ? t->c.data : "", wf_optim_name(t->c.optim.kind), (unsigned long long)t->c.seed,
             (long long)t->c.batch, (long long)v->m, v->run);
}

/* The first key whose value differs between two run descriptions, named in
 * a message; WF_OK when they agree (or the checkpoint recorded none). */
static wf_status compare_run(const char *dir, const char *saved, const char *now)
{
    for (const char *line = now; *line;) {
        const char *eq = strchr(line, '='), *nl = strchr(line, '\n');
        if (!eq || !nl)
            break;
        size_t klen = (size_t)(eq - line) + 1;
        /* the same key in the saved description */
        const char *s = saved;
        while (*s && strncmp(s, line, klen) != 0) {
            const char *snl = strchr(s, '\n');
            s = snl ? snl + 1 : s + strlen(s);
        }
        if (*s) {
            const char *snl = strchr(s, '\n');
            size_t slen = snl ? (size_t)(snl - s) : strlen(s);
            size_t nlen = (size_t)(nl - line);
            if (slen != nlen || strncmp(s, line, nlen) != 0)
                return wf_errorf(WF_INVAL, "checkpoint %s was written with %.*s, this run has %.*s", dir,
                                 (int)slen, s, (int)nlen, line);
        }
        line = nl + 1;
    }
    return WF_OK;
}

static int self_alone(const wf_train *t)
{
    int wr, wn;
    wf_mpi_world(&wr, &wn);
    return t->c.self && wn > 1;
}

/* What save and load do first, on every rank: refuse a rank alone (`verb`
 * says what the world does with checkpoints), sync the weights, and list the
 * tensors into *ts (names in *names), agreed on by the world. On an error
 * nothing is left to free. */
static wf_status ckpt_begin(wf_train *t, const char *verb, wf_ckpt_tensor **ts, char **names,
                            int *n)
{
    if (self_alone(t))
        return wf_errorf(WF_INVAL, "checkpoints are %s by the whole MPI world, not by one rank alone",
                         verb);
    wf_status st = wf_train_sync(t);
    if (st != WF_OK)
        return st;
    st = t->eng->ckpt_tensors(t->ctx, ts, names, n);
    st = wf_mpi_agree(st);
    if (st != WF_OK) {
        free(*ts);
        free(*names);
        *ts = NULL;
        *names = NULL;
        return st;
    }
    return WF_OK;
}

wf_status wf_train_save(wf_train *t, const char *dir)
{
    wf_ckpt_tensor *ts = NULL;
    char *names = NULL;
    int n = 0;
    wf_status st = ckpt_begin(t, "written", &ts, &names, &n);
    if (st != WF_OK)
        return st;
    /* ZeRO: the full images of the state (and ZeRO-3's parameters) from the shards. */
    st = t->eng->ckpt_gather(t->ctx);
    if (st != WF_OK) {
        t->eng->ckpt_release(t->ctx);
        free(ts);
        free(names);
        return st;
    }
    wf_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    wf_engine_ckpt v;
    t->eng->ckpt_view(t->ctx, &v);
    meta.step = *v.steps;
    meta.data_position = wf_data_position(v.data);
    ckpt_rng(t, &v, meta.rng);
    snprintf(meta.model, sizeof meta.model, "%s", v.model);
    ckpt_run(t, &v, meta.run, sizeof meta.run);
    st = wf_ckpt_save(dir, &meta, ts, n);
    free(ts);
    free(names);
    t->eng->ckpt_release(t->ctx);
    return st;
}

wf_status wf_train_load(wf_train *t, const char *dir)
{
    wf_ckpt_tensor *ts = NULL;
    char *names = NULL;
    int n = 0;
    wf_status st = ckpt_begin(t, "read", &ts, &names, &n);
    if (st != WF_OK)
        return st;
    /* Name what differs between the checkpoint's run and this one before
     * comparing tensors (another optimizer has other tensors). */
    wf_engine_ckpt v;
    t->eng->ckpt_view(t->ctx, &v);
    wf_ckpt_meta saved;
    st = wf_ckpt_peek(dir, &saved);
    if (st == WF_OK && strcmp(saved.model, v.model) != 0)
        st = wf_errorf(WF_INVAL, "checkpoint %s was written for model %s, this run trains %s", dir, saved.model,
                       v.model);
    if (st == WF_OK) {
        char now[sizeof saved.run];
        ckpt_run(t, &v, now, sizeof now);
        st = compare_run(dir, saved.run, now);
        /* Shards of an SPMD run and whole replicas do not mix (no resharding yet). */
        const char *sl = strstr(saved.run, "layouts="), *nl = strstr(now, "layouts=");
        if (st == WF_OK && (!sl) != (!nl))
            st = wf_errorf(WF_INVAL, "checkpoint %s holds %s, this run %s: resume with the plan that wrote it "
                           "(resharding between plans is not supported)", dir,
                           sl ? "the shards of an SPMD (tensor or op-level) plan" : "whole data-parallel replicas",
                           nl ? "runs an SPMD plan" : "is data-parallel");
    }
    st = wf_mpi_agree(st);
    if (st != WF_OK) {
        free(ts);
        free(names);
        return st;
    }
    /* Load into scratch copies first, so a checkpoint of another run leaves
     * this trainer untouched. */
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += wf_ckpt_tensor_bytes(&ts[i]);
    char *scratch = malloc(bytes > 0 ? bytes : 1);
    void **dest = malloc((size_t)(n > 0 ? n : 1) * sizeof *dest);
    st = scratch && dest ? WF_OK : wf_errorf(WF_NOMEM, "out of memory loading a checkpoint");
    st = wf_mpi_agree(st);
    if (st == WF_OK) {
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            dest[i] = ts[i].data;
            ts[i].data = scratch + off;
            off += wf_ckpt_tensor_bytes(&ts[i]);
        }
        wf_ckpt_meta meta;
        st = wf_ckpt_load(dir, v.model, &meta, ts, n);
        if (st == WF_OK) {
            uint64_t want[4];
            ckpt_rng(t, &v, want);
            static const char *const what[4] = {"seed", "optimizer", "batch", "micro-batches per step"};
            for (int k = 0; k < 4 && st == WF_OK; k++)
                if (meta.rng[k] != want[k])
                    st = wf_errorf(WF_INVAL, "checkpoint %s was written with %s %llu, this run has %llu", dir, what[k],
                                   (unsigned long long)meta.rng[k], (unsigned long long)want[k]);
        }
        if (st == WF_OK)
            st = wf_data_seek(v.data, meta.data_position);
        st = wf_mpi_agree(st);
        if (st == WF_OK) {
            for (int i = 0; i < n; i++)
                memcpy(dest[i], ts[i].data, wf_ckpt_tensor_bytes(&ts[i]));
            t->eng->ckpt_scatter(t->ctx);
            *v.steps = meta.step;
        }
    }
    free(scratch);
    free(dest);
    free(ts);
    free(names);
    t->eng->ckpt_release(t->ctx);
    return st;
}

wf_status wf_runtime_set_threads(int n)
{
    return wf_k_set_threads(n);
}

/* ---- world helpers ------------------------------------------------------------------------------ */

wf_status wf_world_minmax_u64(uint64_t v, uint64_t *min, uint64_t *max)
{
    *min = *max = v;
    if (!mpi_up())
        return WF_OK;
    unsigned long long x = v, lo = 0, hi = 0;
    if (MPI_Allreduce(&x, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Allreduce(&x, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return wf_errorf(WF_MPI, "MPI_Allreduce failed");
    *min = lo;
    *max = hi;
    return WF_OK;
}

wf_status wf_world_barrier(void)
{
    if (!mpi_up())
        return WF_OK;
    return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? WF_OK : wf_errorf(WF_MPI, "MPI_Barrier failed");
}
