/* The task graph of one pipeline (one data-parallel replica): p stages, one
 * simulated device each, executing wf_pipe_order's ops chained on their
 * compute stream. A forward of virtual stage k (chunk k / p on stage k mod p)
 * needs the forward of virtual stage k-1 for the same micro-batch, a backward
 * needs the backward of virtual stage k+1 (the last virtual stage: its own
 * forward). Crossing stages costs p2p_ns on a channel of the sender: channel 1
 * for activations going down the pipeline, channel 2 for gradients coming
 * back (links are full duplex; channel 0 is left to collectives). Each
 * forward's activations (act_bytes) live until its backward finishes. */
#include "weft/sim.h"

#include <stdio.h>
#include <stdlib.h>

wf_status wf_sim_pipeline(const wf_sim_pipe_desc *d, wf_sim_pipe_result *res, wf_sim **keep)
{
    if (keep)
        *keep = NULL;
    int p = d->p, m = d->m, v = d->v;
    if (p < 1 || p > WF_SIM_MAX_STAGES)
        return wf_errorf(WF_INVAL, "pipeline: p=%d stages must be in 1..%d", p, WF_SIM_MAX_STAGES);
    if (m < 1 || v < 1 || (int64_t)m * v * p > 50000000)
        return wf_errorf(WF_INVAL, "pipeline: m=%d, v=%d out of range", m, v);
    if (!d->fwd_ns || !d->bwd_ns)
        return wf_errorf(WF_INVAL, "pipeline: forward and backward times are required");
    if (d->p2p_ns < 0)
        return wf_errorf(WF_INVAL, "pipeline: p2p time %lld ns must be >= 0", (long long)d->p2p_ns);
    int nvs = p * v;
    for (int k = 0; k < nvs; k++) {
        if (d->fwd_ns[k] < 0 || d->bwd_ns[k] < 0)
            return wf_errorf(WF_INVAL, "pipeline: virtual stage %d has a negative time", k);
        if (d->act_bytes && d->act_bytes[k] < 0)
            return wf_errorf(WF_INVAL, "pipeline: virtual stage %d has negative activation bytes", k);
    }
    int nops = 2 * m * v;
    wf_pipe_op *ops = malloc((size_t)nops * sizeof *ops);
    int *tf = malloc((size_t)nvs * (size_t)m * sizeof *tf); /* forward task of (vs, mb) */
    int *tb = malloc((size_t)nvs * (size_t)m * sizeof *tb); /* backward task */
    wf_sim *s = NULL;
    wf_status st = WF_OK;
    if (!ops || !tf || !tb) {
        st = wf_errorf(WF_NOMEM, "out of memory building a pipeline");
        goto out;
    }
    if ((st = wf_sim_create(&s)))
        goto out;
    for (int i = 0; i < p; i++) {
        char name[48];
        snprintf(name, sizeof name, "stage %d", i);
        int dv = wf_sim_add_device(s, name, 3, 1);
        if (dv < 0) {
            st = dv;
            goto out;
        }
    }
    /* Compute tasks, stage by stage in schedule order, chained on the stream. */
    for (int i = 0; i < p; i++) {
        int n = 0;
        if ((st = wf_pipe_order(d->kind, p, m, v, i, ops, nops, &n)))
            goto out;
        int stream = wf_sim_stream(s, i);
        int prev = -1;
        for (int k = 0; k < n; k++) {
            int vs = ops[k].chunk * p + i;
            char name[64];
            snprintf(name, sizeof name, "%s mb%d c%d", ops[k].bwd ? "B" : "F", ops[k].mb, ops[k].chunk);
            wf_sim_task_desc t;
            wf_sim_task_desc_init(&t);
            t.name = name;
            t.cat = ops[k].bwd ? WF_SIM_CAT_BACKWARD : WF_SIM_CAT_FORWARD;
            t.dur_ns = ops[k].bwd ? d->bwd_ns[vs] : d->fwd_ns[vs];
            t.nres = 1;
            t.res = &stream;
            t.ndeps = prev >= 0;
            t.deps = &prev;
            t.mb = ops[k].mb;
            t.chunk = ops[k].chunk;
            int id = wf_sim_add_task(s, &t);
            if (id < 0) {
                st = id;
                goto out;
            }
            (ops[k].bwd ? tb : tf)[(size_t)vs * m + ops[k].mb] = id;
            prev = id;
        }
    }
    /* Cross-stage dependencies, through a send on the sender's channel 1 or 2. */
    for (int vs = 0; vs < nvs; vs++) {
        for (int mb = 0; mb < m; mb++) {
            int f = tf[(size_t)vs * m + mb], b = tb[(size_t)vs * m + mb];
            if (vs == nvs - 1 && (st = wf_sim_add_dep(s, b, f)))
                goto out;
            for (int dir = 0; dir < 2; dir++) {
                /* dir 0: forward vs -> vs+1; dir 1: backward vs+1 -> vs. */
                if (vs + 1 >= nvs)
                    break;
                int from = dir == 0 ? f : tb[(size_t)(vs + 1) * m + mb];
                int to = dir == 0 ? tf[(size_t)(vs + 1) * m + mb] : b;
                int src_dev = dir == 0 ? vs % p : (vs + 1) % p;
                int dst_dev = dir == 0 ? (vs + 1) % p : vs % p;
                if (d->p2p_ns > 0 && src_dev != dst_dev) {
                    char name[64];
                    snprintf(name, sizeof name, "send %s mb%d", dir == 0 ? "act" : "grad", mb);
                    int ch = wf_sim_channel(s, src_dev, 1 + dir);
                    wf_sim_task_desc t;
                    wf_sim_task_desc_init(&t);
                    t.name = name;
                    t.cat = WF_SIM_CAT_PP_COMM;
                    t.dur_ns = d->p2p_ns;
                    t.nres = 1;
                    t.res = &ch;
                    t.ndeps = 1;
                    t.deps = &from;
                    t.mb = mb;
                    int id = wf_sim_add_task(s, &t);
                    if (id < 0) {
                        st = id;
                        goto out;
                    }
                    from = id;
                }
                if ((st = wf_sim_add_dep(s, to, from)))
                    goto out;
            }
            if (d->act_bytes && d->act_bytes[vs] > 0 &&
                (st = wf_sim_add_buffer(s, vs % p, d->act_bytes[vs], f, 1, &b)))
                goto out;
        }
    }
    if ((st = wf_sim_run(s)))
        goto out;
    res->iteration_ns = wf_sim_makespan_ns(s);
    for (int i = 0; i < p; i++) {
        wf_sim_device_stats ds;
        wf_sim_device_stats_of(s, i, &ds);
        res->bubble_ns[i] = wf_sim_ns(ds.compute_idle_s);
        res->peak_mem_bytes[i] = ds.peak_mem_bytes;
    }
out:
    free(ops);
    free(tf);
    free(tb);
    if (st == WF_OK && keep)
        *keep = s;
    else
        wf_sim_free(s);
    return st;
}
