/* The SPMD engine (engine-impl.h): op-level plans, and whole-model plans
 * with tp or sp lowered to them, run on a mesh of ranks, each its local
 * graph (spmd.c). This file answers the trainer for it: its checkpoints are
 * this rank's shards, with ZeRO's images over the mesh's data-parallel axis,
 * and a line naming the layouts, which a resume must match. */
#include "runtime/engine-impl.h"
#include "runtime/spmd-impl.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    wf_spmd *s;
    wf_engine_images z;
} spmd_engine;

static void destroy(void *eng)
{
    spmd_engine *e = eng;
    if (!e)
        return;
    wf_spmd_free(e->s);
    wf_engine_images_free(&e->z);
    free(e);
}

static wf_status create(const wf_engine_args *a, void **out)
{
    *out = NULL;
    spmd_engine *e = calloc(1, sizeof *e);
    if (!e)
        return wf_errorf(WF_NOMEM, "out of memory creating the trainer");
    wf_status st = wf_spmd_create(a->c, a->comm, a->rank, a->nranks, &e->s);
    if (st != WF_OK) {
        destroy(e);
        return st;
    }
    *out = e;
    return WF_OK;
}

static wf_spmd *of(const void *eng) { return ((const spmd_engine *)eng)->s; }

static wf_status step(void *eng, wf_train_stats *s) { return wf_spmd_step(of(eng), s); }

static wf_status sync(void *eng) { return wf_spmd_sync(of(eng)); }

static int64_t steps_done(const void *eng) { return wf_spmd_steps_done(of(eng)); }

static wf_exec *exec_of(const void *eng) { return wf_spmd_exec(of(eng)); }

static void info(const void *eng, wf_train_info *out) { wf_spmd_info_of(of(eng), out); }

static wf_status gather_params(void *eng, float *out, int64_t cap, int64_t *n)
{
    return wf_spmd_gather_params(of(eng), out, cap, n);
}

static uint64_t checksum(const void *eng)
{
    wf_spmd_ckpt v;
    wf_spmd_ckpt_view(of(eng), &v);
    return wf_engine_dist_checksum(v.e, v.d);
}

static int trace(const void *eng, wf_pipe_op *ops, int cap)
{
    (void)eng;
    (void)ops;
    (void)cap;
    return 0; /* one stage */
}

static void ckpt_view(void *eng, wf_engine_ckpt *v)
{
    wf_spmd_ckpt s;
    wf_spmd_ckpt_view(of(eng), &s);
    *v = (wf_engine_ckpt){s.data, s.steps, s.m, s.model, ""};
    snprintf(v->run, sizeof v->run, "%s\n", s.layouts);
}

static wf_status ckpt_tensors(void *eng, wf_ckpt_tensor **out, char **names, int *n)
{
    spmd_engine *e = eng;
    wf_spmd_ckpt s;
    wf_spmd_ckpt_view(e->s, &s);
    return wf_engine_dist_tensors(s.e, s.o, s.d, &e->z, out, names, n);
}

static wf_status ckpt_gather(void *eng)
{
    spmd_engine *e = eng;
    wf_spmd_ckpt s;
    wf_spmd_ckpt_view(e->s, &s);
    return wf_engine_dist_gather(s.d, &e->z);
}

static void ckpt_scatter(void *eng)
{
    spmd_engine *e = eng;
    wf_spmd_ckpt s;
    wf_spmd_ckpt_view(e->s, &s);
    wf_engine_dist_scatter(s.d, &e->z);
}

static void ckpt_release(void *eng) { wf_engine_images_free(&((spmd_engine *)eng)->z); }

const wf_engine_iface wf_engine_spmd = {
    "spmd",       create,        destroy,  step,  sync,      steps_done,   exec_of,     info,
    gather_params, checksum,     trace,    ckpt_view, ckpt_tensors, ckpt_gather, ckpt_scatter, ckpt_release,
};
