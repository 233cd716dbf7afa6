/* Optimizers: SGD with momentum and AdamW, one parameter tensor at a time so
 * that a communication schedule can update a group of parameters as soon as
 * its gradients are reduced (DeAR updates group by group during the next
 * forward). The state is laid out like the executor's parameter block.
 *
 * SGD (PyTorch's form): g' = s g + wd p; buf = momentum buf + g'; p -= lr buf.
 * AdamW (Loshchilov & Hutter; PyTorch's order): p -= lr wd p; m = b1 m +
 * (1-b1) g'; v = b2 v + (1-b2) g'^2; p -= lr (m / (1-b1^t)) / (sqrt(v /
 * (1-b2^t)) + eps), where g' = s g and s folds the averaging over ranks and
 * micro-batches with the clipping factor. Weight decay applies to parameters
 * with ndim >= 2 only (not to biases and norm gains). */
#include "weft/runtime.h"

#include "kernels/kernels-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct wf_optim {
    wf_optim_config c;
    int nparams;
    int64_t *offset;  /* [nparams] of each parameter in the state blocks */
    int nstate;
    float *state[2];  /* adamw: m, v; sgd: momentum */
    int64_t nflat;    /* a flat (sharded) state's floats; 0 per parameter */
};

void wf_optim_defaults(wf_optim_kind kind, wf_optim_config *c)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->clip_norm = 1.0;
    if (kind == WF_OPTIM_SGD) {
        c->lr = 0.01;
        c->momentum = 0.9;
        c->weight_decay = 0.0;
    } else {
        c->lr = 1e-3;
        c->beta1 = 0.9;
        c->beta2 = 0.999;
        c->eps = 1e-8;
        c->weight_decay = 0.01;
    }
}

wf_status wf_optim_parse(const char *text, wf_optim_kind *out)
{
    if (text && strcmp(text, "adamw") == 0) {
        *out = WF_OPTIM_ADAMW;
        return WF_OK;
    }
    if (text && strcmp(text, "sgd") == 0) {
        *out = WF_OPTIM_SGD;
        return WF_OK;
    }
    return wf_errorf(WF_INVAL, "unknown optimizer '%s' (one of adamw, sgd)", text ? text : "");
}

const char *wf_optim_name(wf_optim_kind k)
{
    return k == WF_OPTIM_SGD ? "sgd" : k == WF_OPTIM_ADAMW ? "adamw" : "?";
}

wf_status wf_optim_check(const wf_optim_config *c)
{
    if (c->kind != WF_OPTIM_SGD && c->kind != WF_OPTIM_ADAMW)
        return wf_errorf(WF_INVAL, "optimizer kind %d unknown", (int)c->kind);
    if (!(c->lr > 0) || !isfinite(c->lr))
        return wf_errorf(WF_INVAL, "learning rate %g must be > 0", c->lr);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return wf_errorf(WF_INVAL, "weight decay %g must be >= 0", c->weight_decay);
    if (!(c->clip_norm >= 0) || !isfinite(c->clip_norm))
        return wf_errorf(WF_INVAL, "gradient clip %g must be >= 0 (0 = off)", c->clip_norm);
    if (c->kind == WF_OPTIM_SGD) {
        if (!(c->momentum >= 0 && c->momentum < 1))
            return wf_errorf(WF_INVAL, "momentum %g must be in [0, 1)", c->momentum);
    } else {
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return wf_errorf(WF_INVAL, "beta1 %g must be in [0, 1)", c->beta1);
        if (!(c->beta2 >= 0 && c->beta2 < 1))
            return wf_errorf(WF_INVAL, "beta2 %g must be in [0, 1)", c->beta2);
        if (!(c->eps > 0) || !isfinite(c->eps))
            return wf_errorf(WF_INVAL, "eps %g must be > 0", c->eps);
    }
    return WF_OK;
}

wf_status wf_optim_create(const wf_optim_config *c, const wf_exec *e, wf_optim **out)
{
    /* The state of every parameter, laid out as the parameter block. */
    int64_t total = 0;
    wf_exec_param_block(e, &total);
    wf_status st = wf_optim_create_flat(c, total, out);
    if (st != WF_OK)
        return st;
    wf_optim *o = *out;
    o->nflat = 0;
    o->nparams = wf_exec_nparams(e);
    o->offset = malloc((size_t)(o->nparams > 0 ? o->nparams : 1) * sizeof *o->offset);
    if (!o->offset) {
        wf_optim_free(o);
        *out = NULL;
        return wf_errorf(WF_NOMEM, "out of memory creating the optimizer");
    }
    for (int i = 0; i < o->nparams; i++)
        o->offset[i] = wf_exec_param_at(e, i)->offset;
    return WF_OK;
}

wf_status wf_optim_create_flat(const wf_optim_config *c, int64_t nfloats, wf_optim **out)
{
    *out = NULL;
    wf_status st = wf_optim_check(c);
    if (st != WF_OK)
        return st;
    wf_optim *o = calloc(1, sizeof *o);
    if (!o)
        return wf_errorf(WF_NOMEM, "out of memory creating the optimizer");
    o->c = *c;
    o->nstate = c->kind == WF_OPTIM_ADAMW ? 2 : 1;
    o->nflat = nfloats;
    for (int k = 0; k < o->nstate; k++)
        o->state[k] = calloc((size_t)(nfloats > 0 ? nfloats : 1), sizeof(float));
    if (!o->state[0] || (o->nstate > 1 && !o->state[1])) {
        wf_optim_free(o);
        return wf_errorf(WF_NOMEM, "out of memory for %lld floats of optimizer state", (long long)nfloats);
    }
    *out = o;
    return WF_OK;
}

void wf_optim_free(wf_optim *o)
{
    if (!o)
        return;
    free(o->offset);
    free(o->state[0]);
    free(o->state[1]);
    free(o);
}

const wf_optim_config *wf_optim_config_of(const wf_optim *o)
{
    return &o->c;
}

double wf_optim_clip_factor(const wf_optim_config *c, double grad_norm)
{
    if (c->clip_norm <= 0 || !(grad_norm > c->clip_norm))
        return 1.0;
    return c->clip_norm / grad_norm;
}

/* AdamW on n elements in one pass (read w, g, m, v; write w, m, v: 28 bytes
 * per element, the least there is), a block of WF_K_VL at a time so that it
 * vectorizes; the root is wf_k_sqrtf (sqrtf would not vectorize, for errno's
 * sake). Every element's arithmetic is the same in the blocks and the tail. */
static inline float adamw1(float w, float g, float *m, float *v, float scale, float b1, float b2, float step,
                           float rc2, float eps, float decay)
{
    const float gj = scale * g;
    const float mj = b1 * *m + (1.0f - b1) * gj;
    const float vj = b2 * *v + (1.0f - b2) * gj * gj;
    *m = mj;
    *v = vj;
    return w * decay - step * mj / (wf_k_sqrtf(vj) * rc2 + eps);
}

WF_K_HOT static void adamw(float *w, const float *g, float *m, float *v, int64_t n, float scale, float b1, float b2,
                           float step, float rc2, float eps, float decay)
{
    int64_t j = 0;
    for (; j + WF_K_VL <= n; j += WF_K_VL) {
        float tw[WF_K_VL], tm[WF_K_VL], tv[WF_K_VL];
        memcpy(tm, m + j, sizeof tm);
        memcpy(tv, v + j, sizeof tv);
        for (int k = 0; k < WF_K_VL; k++)
            tw[k] = adamw1(w[j + k], g[j + k], &tm[k], &tv[k], scale, b1, b2, step, rc2, eps, decay);
        memcpy(w + j, tw, sizeof tw);
        memcpy(m + j, tm, sizeof tm);
        memcpy(v + j, tv, sizeof tv);
    }
    for (; j < n; j++)
        w[j] = adamw1(w[j], g[j], &m[j], &v[j], scale, b1, b2, step, rc2, eps, decay);
}

WF_K_HOT static void sgd(float *w, const float *g, float *buf, int64_t n, float scale, float mu, float lr, float wd)
{
    int64_t j = 0;
    for (; j + WF_K_VL <= n; j += WF_K_VL) {
        float tw[WF_K_VL], tb[WF_K_VL];
        for (int k = 0; k < WF_K_VL; k++) {
            tb[k] = mu * buf[j + k] + (scale * g[j + k] + wd * w[j + k]);
            tw[k] = w[j + k] - lr * tb[k];
        }
        memcpy(buf + j, tb, sizeof tb);
        memcpy(w + j, tw, sizeof tw);
    }
    for (; j < n; j++) {
        buf[j] = mu * buf[j] + (scale * g[j] + wd * w[j]);
        w[j] -= lr * buf[j];
    }
}

void wf_optim_update(wf_optim *o, wf_exec *e, int param, float grad_scale, int64_t t)
{
    const wf_exec_param *p = wf_exec_param_at(e, param);
    if (!p || !p->has_grad)
        return;
    const float lr = (float)o->c.lr;
    const float wd = p->decay ? (float)o->c.weight_decay : 0.0f;
    if (o->c.kind == WF_OPTIM_SGD) {
        sgd(p->data, p->grad, o->state[0] + o->offset[param], p->numel, grad_scale, (float)o->c.momentum, lr, wd);
        return;
    }
    /* Bias corrections in double, folded into the step size and the root:
     * m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) = (1/(1-b1^t)) m / (sqrt(v) / sqrt(1-b2^t) + eps). */
    const double c1 = 1.0 - pow(o->c.beta1, (double)t), c2 = 1.0 - pow(o->c.beta2, (double)t);
    adamw(p->data, p->grad, o->state[0] + o->offset[param], o->state[1] + o->offset[param], p->numel, grad_scale,
          (float)o->c.beta1, (float)o->c.beta2, (float)(o->c.lr / c1), (float)(1.0 / sqrt(c2)), (float)o->c.eps,
          1.0f - lr * wd);
}

void wf_optim_update_flat(wf_optim *o, float *w, const float *g, int64_t state_off, int64_t n, int decay,
                          float grad_scale, int64_t t)
{
    const float lr = (float)o->c.lr;
    const float wd = decay ? (float)o->c.weight_decay : 0.0f;
    if (o->c.kind == WF_OPTIM_SGD) {
        sgd(w, g, o->state[0] + state_off, n, grad_scale, (float)o->c.momentum, lr, wd);
        return;
    }
    const double c1 = 1.0 - pow(o->c.beta1, (double)t), c2 = 1.0 - pow(o->c.beta2, (double)t);
    adamw(w, g, o->state[0] + state_off, o->state[1] + state_off, n, grad_scale, (float)o->c.beta1,
          (float)o->c.beta2, (float)(o->c.lr / c1), (float)(1.0 / sqrt(c2)), (float)o->c.eps, 1.0f - lr * wd);
}

float *wf_optim_state_block(const wf_optim *o, int k, int64_t *nfloats)
{
    if (nfloats)
        *nfloats = o->nflat;
    return k >= 0 && k < o->nstate ? o->state[k] : NULL;
}

int wf_optim_nstate(const wf_optim *o)
{
    return o->nstate;
}

const char *wf_optim_state_name(const wf_optim *o, int k)
{
    if (o->c.kind == WF_OPTIM_SGD)
        return k == 0 ? "momentum" : "?";
    return k == 0 ? "m" : k == 1 ? "v" : "?";
}

float *wf_optim_state(const wf_optim *o, int param, int k)
{
    if (param < 0 || param >= o->nparams || k < 0 || k >= o->nstate)
        return NULL;
    return o->state[k] + o->offset[param];
}
