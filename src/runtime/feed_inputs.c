/* Every input a model's graph declares, fed by the replica engine
 * (engine-impl.h, wf_feed_graph): the loader's input and the labels, the
 * model's constants (wf_model_constant_input: Swin's relative-position index
 * and window masks, T5's buckets, AlphaFold2's relative positions), inputs
 * made from the labels (T5's decoder ids: the labels shifted right), the
 * recycled inputs of a model with recycling (AlphaFold2's previous first MSA
 * row, pair and positions' distogram), AlphaFold2's other float input, which
 * gets seeded noise (msa_feat beside the loader's target_feat), and integer
 * inputs beside the loader's ids, which stay 0 (BERT's token_types: every
 * token in segment A). Any other input is refused by name.
 *
 * Determinism: the noise of global sample p is a function of (seed, p, the
 * input's index among the graph's tensors), so data-parallel ranks and
 * co-shard pieces draw what one process draws for the whole batch. */
#include "runtime/engine-impl.h"

#include <stdlib.h>
#include <string.h>

#define STREAM_EXTRA 0x4558545241ull /* the noise inputs */

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t per_sample(const wf_tensor *x)
{
    int64_t n = 1;
    for (int d = 1; d < x->ndim; d++)
        n *= x->shape[d];
    return n;
}

wf_status wf_feed_graph_plan(const wf_model_config *m, const wf_graph *g, wf_feed_graph *f)
{
    memset(f, 0, sizeof *f);
    f->in_t = f->lab_t = -1;
    f->recycle = m->recycle > 0 ? (int)m->recycle : 0;
    int ids = -1, first = -1, nin = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (x->role == WF_ROLE_LABEL)
            f->lab_t = t;
        if (x->role != WF_ROLE_INPUT)
            continue;
        nin++;
        if (strcmp(x->name, "ids") == 0)
            ids = t;
        else if (first < 0 && !wf_model_is_constant_input(m, g, t) && wf_model_recycled_source(m, g, t) == -2 &&
                 !wf_model_shifted_labels_input(m, g, t))
            first = t;
    }
    f->in_t = ids >= 0 ? ids : first;
    if (f->in_t < 0 || f->lab_t < 0)
        return wf_errorf(WF_INVAL, "model %s: its graph has no data input or no labels for the loader", m->name);
    f->x = calloc((size_t)(nin > 0 ? nin : 1), sizeof *f->x);
    f->keep = calloc((size_t)(nin > 0 ? nin : 1), sizeof *f->keep);
    if (!f->x || !f->keep)
        return wf_errorf(WF_NOMEM, "out of memory planning the model's inputs");
    f->rows = g->tensors[f->in_t].shape[0];
    for (int t = 0; t < g->ntensors; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (x->role != WF_ROLE_INPUT || t == f->in_t)
            continue;
        wf_feed_input *in = &f->x[f->n++];
        in->t = t;
        in->numel = per_sample(x);
        in->src = -1;
        if (wf_model_is_constant_input(m, g, t)) {
            in->kind = WF_FEED_CONST;
            continue;
        }
        /* every other input carries the batch on axis 0 */
        if (x->ndim < 1 || x->shape[0] != f->rows)
            return wf_errorf(WF_INVAL, "model %s: input '%s' does not have the batch %lld on its first axis",
                             m->name, x->name, (long long)f->rows);
        int src = wf_model_recycled_source(m, g, t);
        if (src == -3)
            return wf_errorf(WF_INVAL, "model %s: recycled input '%s' has no activation to take in this graph",
                             m->name, x->name);
        if (src != -2) {
            in->kind = WF_FEED_RECYCLED;
            in->src = src;
            in->off = f->rec_floats;
            f->rec_floats += in->numel;
            if (src >= 0) {
                const wf_tensor *s = &g->tensors[src];
                in->src_numel = per_sample(s);
                if (s->dtype != WF_DTYPE_FP32 || x->dtype != WF_DTYPE_FP32 || s->shape[0] != f->rows ||
                    in->src_numel < in->numel)
                    return wf_errorf(WF_INVAL, "model %s: recycled input '%s' does not fit its source '%s'", m->name,
                                     x->name, s->name);
                f->keep[f->nkeep++] = src;
            }
        } else if (wf_model_shifted_labels_input(m, g, t)) {
            const wf_tensor *l = &g->tensors[f->lab_t];
            if (x->dtype != WF_DTYPE_INT32 && x->dtype != WF_DTYPE_INT64)
                return wf_errorf(WF_INVAL, "model %s: input '%s' takes the labels but is not integer", m->name,
                                 x->name);
            if (l->ndim < 1 || l->shape[0] != f->rows || per_sample(l) != in->numel)
                return wf_errorf(WF_INVAL, "model %s: input '%s' takes the shifted labels, which have another shape",
                                 m->name, x->name);
            in->kind = WF_FEED_SHIFTED;
        } else if (x->dtype == WF_DTYPE_FP32 && m->family == WF_FAMILY_ALPHAFOLD) {
            in->kind = WF_FEED_NOISE; /* msa_feat: the loader fills target_feat */
        } else if (x->dtype != WF_DTYPE_FP32 && ids >= 0) {
            /* integer ids beside the loader's (BERT's token_types): id 0 */
            in->kind = WF_FEED_ZERO;
        } else {
            return wf_errorf(WF_INVAL, "model %s: input '%s' is neither the loader's ('%s'), a constant, recycled nor "
                                       "made from the labels: the runtime has nothing to feed it", m->name, x->name,
                             g->tensors[f->in_t].name);
        }
    }
    return WF_OK;
}

void wf_feed_graph_free(wf_feed_graph *f)
{
    free(f->x);
    free(f->keep);
    memset(f, 0, sizeof *f);
    f->in_t = f->lab_t = -1;
}

wf_status wf_feed_graph_constants(const wf_feed_graph *f, const wf_model_config *m, wf_exec *e)
{
    const wf_graph *g = wf_exec_graph(e);
    for (int k = 0; k < f->n; k++) {
        if (f->x[k].kind != WF_FEED_CONST)
            continue;
        void *dst = wf_exec_leaf_data(e, f->x[k].t);
        if (!dst)
            return wf_errorf(WF_INTERNAL, "constant input '%s' has no storage", g->tensors[f->x[k].t].name);
        wf_status st = wf_model_constant_input(m, g, f->x[k].t, dst);
        if (st != WF_OK)
            return st;
    }
    return WF_OK;
}

void wf_feed_input_fill(const wf_feed_input *x, void *leaf, int64_t rows, const int32_t *lab, int64_t global0,
                        uint64_t seed)
{
    if (x->kind == WF_FEED_SHIFTED) {
        int32_t *dst = leaf;
        for (int64_t r = 0; r < rows; r++) {
            dst[r * x->numel] = 0; /* T5's decoder start token: the pad id */
            for (int64_t j = 1; j < x->numel; j++)
                dst[r * x->numel + j] = lab[r * x->numel + j - 1];
        }
    } else if (x->kind == WF_FEED_NOISE) {
        float *dst = leaf;
        for (int64_t r = 0; r < rows; r++) {
            uint64_t s = mix64(seed ^ mix64(STREAM_EXTRA ^ mix64((uint64_t)(global0 + r) * 0x10001ull + (uint64_t)x->t)));
            for (int64_t j = 0; j < x->numel; j++) {
                s += 0x9e3779b97f4a7c15ull;
                uint64_t z = mix64(s);
                dst[r * x->numel + j] = (float)(z >> 40) * (1.0f / 16777216.0f) - 0.5f;
            }
        }
    } else if (x->kind == WF_FEED_ZERO) {
        memset(leaf, 0, (size_t)(rows * x->numel) * 4);
    }
}

void wf_feed_graph_rows(const wf_feed_graph *f, wf_exec *e, const wf_engine_feed *fd, int64_t row0,
                        int64_t global0, uint64_t seed)
{
    const int64_t rows = f->rows, in_numel = fd->in_numel, lab_numel = fd->lab_numel;
    void *in = wf_exec_leaf_data(e, f->in_t);
    int32_t *lab = wf_exec_leaf_data(e, f->lab_t);
    memcpy(in, (const char *)fd->inbuf + (size_t)(row0 * in_numel) * 4, (size_t)(rows * in_numel) * 4);
    memcpy(lab, fd->labbuf + row0 * lab_numel, (size_t)(rows * lab_numel) * sizeof(int32_t));
    for (int k = 0; k < f->n; k++)
        wf_feed_input_fill(&f->x[k], wf_exec_leaf_data(e, f->x[k].t), rows, lab, global0, seed);
}

void wf_feed_graph_recycled_load(const wf_feed_graph *f, wf_exec *e, const float *buf)
{
    for (int k = 0; k < f->n; k++) {
        const wf_feed_input *x = &f->x[k];
        if (x->kind != WF_FEED_RECYCLED)
            continue;
        float *dst = wf_exec_leaf_data(e, x->t);
        for (int64_t r = 0; r < f->rows; r++)
            memcpy(dst + r * x->numel, buf + r * f->rec_floats + x->off, (size_t)x->numel * sizeof(float));
    }
}

wf_status wf_feed_graph_recycled_save(const wf_feed_graph *f, wf_exec *e, float *buf)
{
    for (int k = 0; k < f->n; k++) {
        const wf_feed_input *x = &f->x[k];
        if (x->kind != WF_FEED_RECYCLED)
            continue;
        const float *src = x->src >= 0 ? wf_exec_kept_data(e, x->src) : NULL;
        if (x->src >= 0 && !src)
            return wf_errorf(WF_INTERNAL, "recycled input %d: its source was not kept", x->t);
        for (int64_t r = 0; r < f->rows; r++) {
            float *dst = buf + r * f->rec_floats + x->off;
            if (src)
                memcpy(dst, src + r * x->src_numel, (size_t)x->numel * sizeof(float));
            else
                memset(dst, 0, (size_t)x->numel * sizeof(float));
        }
    }
    return WF_OK;
}
