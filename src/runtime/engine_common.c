/* What the runtime's engines share (engine-impl.h): the choice of the engine
 * that runs a plan, the batch buffers of the replica and pipeline engines,
 * and the checkpoint images and checksum of an engine with one executor and
 * one data-parallel engine (replica, SPMD). */
#include "runtime/engine-impl.h"
#include "runtime/spmd-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the engine of a run -------------------------------------------------------------------- */

/* The whole-model plan of a run: data parallelism over every rank for
 * "auto" (one micro-batch per rank), else the plan given with dp and mbs
 * completed from the ranks and the batch. */
static wf_status whole_plan(wf_engine_args *a)
{
    const wf_train_config *c = a->c;
    if (!c->plan || strcmp(c->plan, "auto") == 0) {
        wf_plan_default(&a->plan);
        a->plan.dp = a->nranks;
        a->plan.mbs = (int)(c->batch / a->nranks);
        if (a->plan.mbs < 1)
            a->plan.mbs = 1;
        return WF_OK;
    }
    wf_status st = wf_plan_parse(c->plan, &a->plan);
    /* dp left out is the ranks launched; mbs the whole per-rank batch. */
    if (st == WF_OK)
        st = wf_plan_complete(&a->plan, a->nranks, c->batch, a->plan_note, sizeof a->plan_note);
    return st;
}

const wf_engine_iface *wf_engine_select(wf_engine_args *a, wf_status *st)
{
    *st = WF_OK;
    if (wf_spmd_wants(a->c->plan))
        return &wf_engine_spmd;
    if ((*st = wf_model_lookup(a->c->model, &a->model)) != WF_OK || (*st = whole_plan(a)) != WF_OK)
        return NULL;
    /* A parsed plan with tp or sp is SPMD's (wf_spmd_wants took it). */
    return wf_runtime_engine_of(&a->plan) == WF_ENGINE_PIPELINE ? &wf_engine_pipeline : &wf_engine_replica;
}

/* ---- the plan line of a checkpoint (replica and pipeline engines) ---------------------------- */

void wf_engine_plan_text(const wf_plan *p, char *buf, size_t cap)
{
    if ((p->pp > 1 || p->vpp > 1) && p->tp > 1)
        snprintf(buf, cap, "pp=%d,vpp=%d,tp=%d,sp=%d,dp=%d,pipe=%s", p->pp, p->vpp, p->tp, p->sp, p->dp,
                 wf_pipe_name(p->pipe));
    else if (p->pp > 1 || p->vpp > 1)
        snprintf(buf, cap, "pp=%d,vpp=%d,dp=%d,pipe=%s", p->pp, p->vpp, p->dp, wf_pipe_name(p->pipe));
    else
        snprintf(buf, cap, "pp=1,dp=%d", p->dp);
}

/* ---- the batch of the replica and pipeline engines ------------------------------------------ */

wf_status wf_engine_feed_alloc(wf_engine_feed *f)
{
    double bytes = (double)f->b * ((double)f->in_numel * 4.0 + (double)f->lab_numel * sizeof(int32_t));
    char what[96];
    snprintf(what, sizeof what, "the input buffers of %lld samples per rank", (long long)f->b);
    wf_status st = wf_mem_check(bytes, what);
    if (st != WF_OK)
        return st;
    f->inbuf = calloc((size_t)(f->b * f->in_numel), 4);
    f->labbuf = calloc((size_t)(f->b * f->lab_numel), sizeof(int32_t));
    if (!f->inbuf || !f->labbuf)
        return wf_errorf(WF_NOMEM, "out of memory for the batch");
    return WF_OK;
}

wf_status wf_engine_feed_next(wf_engine_feed *f, int64_t batch, int part, int parts)
{
    wf_status st = wf_data_next(f->data, batch, part, parts, f->inbuf, f->labbuf);
    if (st != WF_OK) {
        memset(f->inbuf, 0, (size_t)(f->b * f->in_numel) * 4);
        memset(f->labbuf, 0, (size_t)(f->b * f->lab_numel) * sizeof(int32_t));
    }
    return st;
}

void wf_engine_feed_free(wf_engine_feed *f)
{
    wf_data_close(f->data);
    free(f->inbuf);
    free(f->labbuf);
    f->data = NULL;
    f->inbuf = NULL;
    f->labbuf = NULL;
}

/* ---- one executor and one data-parallel engine: checkpoints and checksum -------------------- */

wf_status wf_engine_dist_tensors(wf_exec *e, wf_optim *o, wf_dist *d, wf_engine_images *z, wf_ckpt_tensor **out,
                                 char **names, int *n)
{
    /* ZeRO: the tensors of an unsharded run, in full images the engine
     * gathers before a save and takes its shards from after a load
     * (ZeRO-1/2 keep the parameters whole in place). */
    const int zero = d ? wf_dist_zero(d) : 0;
    if (zero) {
        o = wf_dist_optim(d);
        int64_t nf = wf_dist_zero_floats(d) + 1;
        free(z->img);
        z->img = calloc((size_t)(1 + wf_optim_nstate(o)) * (size_t)nf, sizeof(float));
        if (!z->img)
            return wf_errorf(WF_NOMEM, "out of memory for the checkpoint's images");
        for (int s = 0; s < 1 + wf_optim_nstate(o); s++)
            z->ptr[s] = z->img + (size_t)s * (size_t)nf;
    }
    int np = wf_exec_nparams(e), ns = wf_optim_nstate(o);
    int total = np * (1 + ns);
    wf_ckpt_tensor *ts = calloc((size_t)(total > 0 ? total : 1), sizeof *ts);
    char *nm = calloc((size_t)(total > 0 ? total : 1), WF_NAME_LEN);
    if (!ts || !nm) {
        free(ts);
        free(nm);
        return wf_errorf(WF_NOMEM, "out of memory");
    }
    int k = 0;
    for (int i = 0; i < np; i++) {
        const wf_exec_param *p = wf_exec_param_at(e, i);
        for (int s = -1; s < ns; s++, k++) {
            char *name = nm + (size_t)k * WF_NAME_LEN;
            if (s < 0)
                snprintf(name, WF_NAME_LEN, "%s", p->name);
            else
                snprintf(name, WF_NAME_LEN, "%s.%d", wf_optim_state_name(o, s), i);
            ts[k].name = name;
            ts[k].dtype = WF_DTYPE_FP32;
            ts[k].ndim = p->ndim;
            memcpy(ts[k].shape, p->shape, sizeof ts[k].shape);
            ts[k].data = s < 0 ? (void *)p->data : (void *)wf_optim_state(o, i, s);
            if (zero && (s >= 0 || zero == 3))
                ts[k].data = z->ptr[s + 1] + p->offset;
        }
    }
    *out = ts;
    *names = nm;
    *n = total;
    return WF_OK;
}

wf_status wf_engine_dist_gather(wf_dist *d, wf_engine_images *z)
{
    return z->img ? wf_dist_zero_gather(d, z->ptr[0], z->ptr + 1) : WF_OK;
}

void wf_engine_dist_scatter(wf_dist *d, wf_engine_images *z)
{
    if (z->img)
        wf_dist_zero_scatter(d, wf_dist_zero(d) == 3 ? z->ptr[0] : NULL, (const float *const *)(z->ptr + 1));
}

void wf_engine_images_free(wf_engine_images *z)
{
    free(z->img);
    z->img = NULL;
}

uint64_t wf_engine_dist_checksum(const wf_exec *e, wf_dist *d)
{
    int64_t n = 0;
    const unsigned char *p = (const unsigned char *)wf_exec_param_block(e, &n);
    float *image = NULL;
    if (d && wf_dist_zero(d) == 3) {
        /* ZeRO-3 holds shards: the hash of the gathered block (collective). */
        n = wf_dist_zero_floats(d);
        image = calloc((size_t)(n > 0 ? n : 1), sizeof *image);
        if (!image || wf_dist_zero_gather(d, image, NULL) != WF_OK)
            n = 0;
        p = (const unsigned char *)image;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < (size_t)n * sizeof(float); i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    free(image);
    return h;
}
