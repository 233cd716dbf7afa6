/* SBP meshes and layouts: laying a mesh on a cluster's hierarchy, layout
 * strings, local shapes and the training duals (gradient layouts).
 * Signatures live in signatures.c, boxing in boxing.c. */
#include "weft/sbp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- meshes -------------------------------------------------------------------- */

wf_status wf_mesh_from_cluster(const wf_cluster *c, int naxes, const int64_t *sizes, wf_mesh *out)
{
    memset(out, 0, sizeof *out);
    if (naxes < 1 || naxes > WF_SBP_MAX_AXES)
        return wf_errorf(WF_INVAL, "mesh: %d axes (expected 1..%d)", naxes, WF_SBP_MAX_AXES);
    if (c->nlevels < 1)
        return wf_errorf(WF_INVAL, "mesh: cluster '%s' has no levels", c->name);
    int64_t total = 1;
    for (int a = 0; a < naxes; a++) {
        if (sizes[a] < 1 || sizes[a] > (int64_t)1 << 30)
            return wf_errorf(WF_INVAL, "mesh: axis %d has size %lld (expected >= 1)", a,
                             (long long)sizes[a]);
        total *= sizes[a];
    }
    int64_t have = wf_cluster_devices(c);
    if (total > have)
        return wf_errorf(WF_INVAL, "mesh: %lld devices but cluster '%s' has %lld",
                         (long long)total, c->name, (long long)have);
    out->naxes = naxes;
    out->algo = WF_ALGO_AUTO;
    out->net = wf_coll_net_of(c);
    int64_t stride = 1;
    for (int a = naxes - 1; a >= 0; a--) {
        out->size[a] = sizes[a];
        /* The group along axis a reaches devices up to (size-1)*stride apart:
         * it stays inside a level-l unit when size*stride fits its capacity. */
        int64_t extent = sizes[a] * stride, cap = 1;
        int lvl = c->nlevels - 1;
        for (int l = 0; l < c->nlevels; l++) {
            cap *= c->level[l].size;
            if (extent <= cap) {
                lvl = l;
                break;
            }
        }
        out->level[a] = lvl;
        out->alpha_s[a] = c->level[lvl].latency_s;
        double eff = c->level[lvl].eff > 0 ? c->level[lvl].eff : 1.0;
        out->bw_bps[a] = c->level[lvl].bw_bps * eff;
        out->group[a] = wf_group_place(c, sizes[a], stride);
        stride *= sizes[a];
    }
    for (int a = naxes; a < WF_SBP_MAX_AXES; a++) {
        out->size[a] = 1;
        out->level[a] = -1;
    }
    return WF_OK;
}

wf_status wf_mesh_parse(const char *text, const wf_cluster *c, wf_mesh *out)
{
    int64_t sizes[WF_SBP_MAX_AXES];
    int n = 0;
    const char *p = text;
    if (!text || !*text)
        return wf_errorf(WF_INVAL, "mesh '': expected sizes like 8x8");
    while (*p) {
        if (n == WF_SBP_MAX_AXES)
            return wf_errorf(WF_INVAL, "mesh '%s': more than %d axes", text, WF_SBP_MAX_AXES);
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1)
            return wf_errorf(WF_INVAL, "mesh '%s': expected positive sizes joined by 'x'", text);
        sizes[n++] = v;
        p = end;
        if (*p == 'x') {
            p++;
            if (!*p)
                return wf_errorf(WF_INVAL, "mesh '%s': trailing 'x'", text);
        } else if (*p) {
            return wf_errorf(WF_INVAL, "mesh '%s': unexpected '%c'", text, *p);
        }
    }
    return wf_mesh_from_cluster(c, n, sizes, out);
}

wf_status wf_mesh_default(const wf_cluster *c, int64_t devices, wf_mesh *out)
{
    if (devices < 1)
        return wf_errorf(WF_INVAL, "mesh: %lld devices (expected >= 1)", (long long)devices);
    int64_t per = c->nlevels > 0 ? c->level[0].size : 1;
    if (devices <= per || per <= 1)
        return wf_mesh_from_cluster(c, 1, &devices, out);
    if (devices % per != 0)
        return wf_errorf(WF_INVAL, "mesh: %lld devices is not a multiple of %lld per node",
                         (long long)devices, (long long)per);
    int64_t sizes[2] = {devices / per, per};
    return wf_mesh_from_cluster(c, 2, sizes, out);
}

int wf_mesh_candidates(const wf_cluster *c, int64_t devices, wf_mesh *out, int cap)
{
    if (devices < 1 || devices > wf_cluster_devices(c))
        return wf_errorf(WF_INVAL, "mesh: %lld devices, cluster '%s' has %lld", (long long)devices,
                         c->name, (long long)wf_cluster_devices(c));
    int n = 0;
    wf_status st;
    if (n < cap && (st = wf_mesh_from_cluster(c, 1, &devices, &out[n])))
        return st;
    n++;
    for (int64_t a = 2; a < devices; a++) {
        if (devices % a != 0)
            continue;
        int64_t sizes[2] = {a, devices / a};
        if (n < cap && (st = wf_mesh_from_cluster(c, 2, sizes, &out[n])))
            return st;
        n++;
    }
    return n;
}

int64_t wf_mesh_devices(const wf_mesh *m)
{
    int64_t n = 1;
    for (int a = 0; a < m->naxes; a++)
        n *= m->size[a];
    return n;
}

const char *wf_mesh_str(const wf_mesh *m, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap == 0)
        return buf;
    buf[0] = 0;
    for (int a = 0; a < m->naxes && used < cap; a++) {
        int w = snprintf(buf + used, cap - used, "%s%lld", a ? "x" : "", (long long)m->size[a]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    return buf;
}

/* ---- layouts ------------------------------------------------------------------------ */

wf_sbp wf_sbp_broadcast(void)
{
    wf_sbp s;
    for (int a = 0; a < WF_SBP_MAX_AXES; a++)
        s.ax[a] = WF_SBP_B;
    return s;
}

int wf_sbp_equal(const wf_sbp *a, const wf_sbp *b, int naxes)
{
    for (int i = 0; i < naxes; i++)
        if (a->ax[i] != b->ax[i])
            return 0;
    return 1;
}

const char *wf_sbp_str(const wf_sbp *s, int naxes, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap == 0)
        return buf;
    buf[0] = 0;
    int w = snprintf(buf, cap, "[");
    used = w > 0 ? (size_t)w : 0;
    for (int a = 0; a < naxes && used < cap; a++) {
        const char *sep = a ? "," : "";
        if (s->ax[a] == WF_SBP_B)
            w = snprintf(buf + used, cap - used, "%sB", sep);
        else if (s->ax[a] == WF_SBP_P)
            w = snprintf(buf + used, cap - used, "%sP", sep);
        else
            w = snprintf(buf + used, cap - used, "%sS(%d)", sep, s->ax[a]);
        if (w < 0)
            return buf;
        used += (size_t)w;
    }
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
    return buf;
}

wf_status wf_sbp_parse(const char *text, int naxes, wf_sbp *out)
{
    *out = wf_sbp_broadcast();
    if (!text)
        return wf_errorf(WF_FORMAT, "layout: missing");
    const char *p = text;
    int n = 0;
    while (*p == ' ' || *p == '[')
        p++;
    while (*p && *p != ']') {
        if (n == naxes)
            return wf_errorf(WF_FORMAT, "layout '%s': more than %d entries", text, naxes);
        if (*p == 'B') {
            out->ax[n++] = WF_SBP_B;
            p++;
        } else if (*p == 'P') {
            out->ax[n++] = WF_SBP_P;
            p++;
        } else if (*p == 'S') {
            p++;
            int paren = *p == '(';
            if (paren)
                p++;
            char *end;
            long k = strtol(p, &end, 10);
            if (end == p || k < 0 || k >= WF_MAX_DIMS)
                return wf_errorf(WF_FORMAT, "layout '%s': bad split dim at '%s'", text, p);
            p = end;
            if (paren) {
                if (*p != ')')
                    return wf_errorf(WF_FORMAT, "layout '%s': missing ')'", text);
                p++;
            }
            out->ax[n++] = (int8_t)k;
        } else {
            return wf_errorf(WF_FORMAT, "layout '%s': unexpected '%c' (expected S(k), B or P)",
                             text, *p);
        }
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
        while (*p == ' ')
            p++;
    }
    if (n != naxes)
        return wf_errorf(WF_FORMAT, "layout '%s': %d entries for a %d-axis mesh", text, n, naxes);
    return WF_OK;
}

int wf_sbp_valid(const wf_mesh *m, int ndim, const int64_t *shape, const wf_sbp *s)
{
    int64_t div[WF_MAX_DIMS];
    for (int k = 0; k < WF_MAX_DIMS; k++)
        div[k] = 1;
    for (int a = 0; a < m->naxes; a++) {
        int8_t v = s->ax[a];
        if (v == WF_SBP_B || v == WF_SBP_P)
            continue;
        if (v < 0 || v >= ndim)
            return 0;
        div[v] *= m->size[a];
    }
    for (int k = 0; k < ndim; k++)
        if (div[k] > 1 && shape[k] % div[k] != 0)
            return 0;
    return 1;
}

wf_status wf_sbp_local_shape(const wf_mesh *m, const wf_tensor *t, const wf_sbp *s,
                             int64_t local[WF_MAX_DIMS])
{
    for (int k = 0; k < WF_MAX_DIMS; k++)
        local[k] = k < t->ndim ? t->shape[k] : 1;
    for (int a = 0; a < m->naxes; a++) {
        int8_t v = s->ax[a];
        if (v == WF_SBP_B || v == WF_SBP_P)
            continue;
        if (v < 0 || v >= t->ndim)
            return wf_errorf(WF_INVAL, "layout: S(%d) on axis %d of tensor '%s' of rank %d", v, a,
                             t->name, t->ndim);
        if (local[v] % m->size[a] != 0)
            return wf_errorf(WF_INVAL, "layout: dim %d of tensor '%s' (%lld) does not split %lld ways",
                             v, t->name, (long long)t->shape[v], (long long)m->size[a]);
        local[v] /= m->size[a];
    }
    return WF_OK;
}

int64_t wf_sbp_split_factor(const wf_mesh *m, const wf_sbp *s)
{
    int64_t f = 1;
    for (int a = 0; a < m->naxes; a++)
        if (s->ax[a] >= 0)
            f *= m->size[a];
    return f;
}

double wf_sbp_local_bytes(const wf_mesh *m, const wf_tensor *t, const wf_sbp *s)
{
    return (double)wf_tensor_bytes(t) / (double)wf_sbp_split_factor(m, s);
}

/* ---- training duals ------------------------------------------------------------------ */

wf_sbp wf_sbp_grad_of_input(const wf_sbp_sig *sig, int nout, int i, int naxes)
{
    wf_sbp g = wf_sbp_broadcast();
    for (int a = 0; a < naxes; a++) {
        int8_t v = sig->in[i].ax[a];
        if (v >= 0) {
            g.ax[a] = v;
        } else if (v == WF_SBP_P) {
            g.ax[a] = WF_SBP_B; /* d(sum of partials)/d(partial) = the whole gradient */
        } else {
            /* A replicated input whose output is split or partial on this axis:
             * each device sees only its part of the output gradient, so the
             * input's gradient is a partial sum. */
            int decomposed = 0;
            for (int j = 0; j < nout; j++)
                if (sig->out[j].ax[a] != WF_SBP_B)
                    decomposed = 1;
            g.ax[a] = decomposed ? WF_SBP_P : WF_SBP_B;
        }
    }
    return g;
}

wf_sbp wf_sbp_grad_need(const wf_sbp *s, int naxes)
{
    wf_sbp g = *s;
    for (int a = 0; a < naxes; a++)
        if (g.ax[a] == WF_SBP_P)
            g.ax[a] = WF_SBP_B;
    for (int a = naxes; a < WF_SBP_MAX_AXES; a++)
        g.ax[a] = WF_SBP_B;
    return g;
}

wf_sbp wf_sbp_storage(const wf_sbp *s, int naxes) { return wf_sbp_grad_need(s, naxes); }

/* ---- signatures as text ------------------------------------------------------------- */

static int put_val(char *buf, size_t cap, size_t *used, int8_t v, const char *sep)
{
    int w;
    if (v == WF_SBP_B)
        w = snprintf(buf + *used, cap - *used, "%sB", sep);
    else if (v == WF_SBP_P)
        w = snprintf(buf + *used, cap - *used, "%sP", sep);
    else
        w = snprintf(buf + *used, cap - *used, "%sS%d", sep, v);
    if (w < 0 || (size_t)w >= cap - *used) {
        *used = cap - 1;
        return 0;
    }
    *used += (size_t)w;
    return 1;
}

const char *wf_sbp_sig_str(const wf_sbp_sig *s, int nin, int nout, int naxes, char *buf,
                           size_t cap)
{
    if (cap == 0)
        return buf;
    buf[0] = 0;
    size_t used = 0;
    for (int a = 0; a < naxes; a++) {
        for (int j = 0; j < nin; j++)
            if (!put_val(buf, cap, &used, s->in[j].ax[a], j ? "," : a ? "|" : ""))
                return buf;
        for (int j = 0; j < nout; j++)
            if (!put_val(buf, cap, &used, s->out[j].ax[a], j ? "," : "->"))
                return buf;
    }
    return buf;
}

/* One value "S<k>", "S(k)", "B" or "P" at *p (spaces skipped). */
static wf_status parse_val(const char *text, const char **p, int8_t *out)
{
    while (**p == ' ')
        (*p)++;
    if (**p == 'B' || **p == 'P') {
        *out = **p == 'B' ? WF_SBP_B : WF_SBP_P;
        (*p)++;
    } else if (**p == 'S') {
        (*p)++;
        int paren = **p == '(';
        if (paren)
            (*p)++;
        char *end;
        long k = strtol(*p, &end, 10);
        if (end == *p || k < 0 || k >= WF_MAX_DIMS)
            return wf_errorf(WF_FORMAT, "signature '%s': bad split dim at '%s'", text, *p);
        *p = end;
        if (paren) {
            if (**p != ')')
                return wf_errorf(WF_FORMAT, "signature '%s': missing ')'", text);
            (*p)++;
        }
        *out = (int8_t)k;
    } else {
        return wf_errorf(WF_FORMAT, "signature '%s': expected S<k>, B or P at '%s'", text, *p);
    }
    while (**p == ' ')
        (*p)++;
    return WF_OK;
}

wf_status wf_sbp_sig_parse(const char *text, int nin, int nout, int naxes, wf_sbp_sig *s)
{
    memset(s, 0, sizeof *s);
    for (int j = 0; j < WF_MAX_INPUTS; j++)
        s->in[j] = wf_sbp_broadcast();
    for (int j = 0; j < WF_MAX_OUTPUTS; j++)
        s->out[j] = wf_sbp_broadcast();
    s->split = 1;
    if (!text)
        return wf_errorf(WF_FORMAT, "signature: missing");
    if (nin < 0 || nin > WF_MAX_INPUTS || nout < 1 || nout > WF_MAX_OUTPUTS || naxes < 1 ||
        naxes > WF_SBP_MAX_AXES)
        return wf_errorf(WF_INVAL, "signature '%s': %d inputs, %d outputs, %d axes", text, nin,
                         nout, naxes);
    const char *p = text;
    wf_status st;
    for (int a = 0; a < naxes; a++) {
        if (a) {
            while (*p == ' ')
                p++;
            if (*p != '|')
                return wf_errorf(WF_FORMAT, "signature '%s': %d axis part(s) for a %d-axis mesh "
                                            "(parts are separated by '|')", text, a, naxes);
            p++;
        }
        for (int j = 0; j < nin; j++) {
            if ((st = parse_val(text, &p, &s->in[j].ax[a])))
                return st;
            if (j + 1 < nin) {
                if (*p != ',')
                    return wf_errorf(WF_FORMAT, "signature '%s': axis %d has fewer than %d inputs",
                                     text, a, nin);
                p++;
            }
        }
        if (p[0] != '-' || p[1] != '>')
            return wf_errorf(WF_FORMAT, "signature '%s': axis %d: expected %d input(s), then '->'",
                             text, a, nin);
        p += 2;
        for (int j = 0; j < nout; j++) {
            if ((st = parse_val(text, &p, &s->out[j].ax[a])))
                return st;
            if (j + 1 < nout) {
                if (*p != ',')
                    return wf_errorf(WF_FORMAT, "signature '%s': axis %d has fewer than %d outputs",
                                     text, a, nout);
                p++;
            }
        }
    }
    while (*p == ' ')
        p++;
    if (*p)
        return wf_errorf(WF_FORMAT, "signature '%s': unexpected '%s' after %d axis part(s)", text,
                         p, naxes);
    return WF_OK;
}

int wf_sbp_sig_equal(const wf_sbp_sig *a, const wf_sbp_sig *b, int nin, int nout, int naxes)
{
    for (int j = 0; j < nin; j++)
        if (!wf_sbp_equal(&a->in[j], &b->in[j], naxes))
            return 0;
    for (int j = 0; j < nout; j++)
        if (!wf_sbp_equal(&a->out[j], &b->out[j], naxes))
            return 0;
    return 1;
}

int wf_sbp_sig_find(const wf_graph *g, int op, const wf_mesh *m, const char *text)
{
    if (op < 0 || op >= g->nfwd)
        return wf_errorf(WF_INVAL, "signature: op %d is not a forward op of graph '%s'", op,
                         g->name);
    const wf_op *o = &g->ops[op];
    wf_sbp_sig want;
    wf_status st = wf_sbp_sig_parse(text, o->nin, o->nout, m->naxes, &want);
    if (st)
        return st;
    int n = wf_sbp_op_sigs(g, op, m, NULL, 0);
    if (n < 0)
        return n;
    wf_sbp_sig *all = malloc(sizeof *all * (size_t)(n + 1));
    if (!all)
        return wf_errorf(WF_NOMEM, "signature: out of memory");
    wf_sbp_op_sigs(g, op, m, all, n);
    int found = -1;
    for (int c = 0; c < n && found < 0; c++)
        if (wf_sbp_sig_equal(&all[c], &want, o->nin, o->nout, m->naxes))
            found = c;
    free(all);
    if (found < 0) {
        char ms[64];
        return wf_errorf(WF_INVAL, "op '%s' (%s): signature '%s' is not one of its %d signatures "
                                   "on mesh %s", o->name, wf_op_name(o->kind), text, n,
                         wf_mesh_str(m, ms, sizeof ms));
    }
    return found;
}
