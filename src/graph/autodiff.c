/* Reverse-mode autodiff: appends the backward pass of g->loss to the graph.
 *
 * Representation (fixed by graph.h): one backward op per forward op that
 * leads to the loss and has an input needing a gradient. It has the forward
 * op's kind, pass WF_PASS_BACKWARD and fwd_op = the forward index; its inputs
 * are the (final) gradients of the forward outputs, -1 where an output has
 * none; its outputs are new GRAD tensors, one per forward input that needs a
 * gradient (same shape and dtype as that input, grad_of set), -1 for the
 * others. When a tensor feeds several ops its partial gradients are summed by
 * ADD ops (pass BACKWARD, fwd_op -1) as soon as a second partial appears, so
 * every tensor ends with one gradient tensor, recorded in its .grad.
 * The loss's gradient is a GRAD scalar with no producer (the seed, 1).
 * Ops are emitted in reverse topological order (reverse forward order); each
 * backward op carries its forward op's block/layer/tp stamps. */
#include "graph/graph-impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    wf_graph *g;
    int *cur;     /* per forward tensor: its gradient so far, -1 none */
    int *nparts;  /* per forward tensor: partial gradients seen */
} adctx;

/* New GRAD tensor for forward tensor f; returns its index or -1. */
static int new_grad(wf_graph *g, int f, const char *suffix)
{
    wf_tensor t = g->tensors[f];
    wf_name_with_suffix(t.name, g->tensors[f].name, suffix);
    t.role = WF_ROLE_GRAD;
    t.producer = -1;
    t.grad = -1;
    t.grad_of = f;
    return wf_graph_push_tensor(g, &t);
}

static void stamp(wf_op *o, const wf_op *from)
{
    o->block = from->block;
    o->layer = from->layer;
    o->tp = from->tp;
}

/* Adds partial gradient `part` of forward tensor f, summing with the
 * gradient so far when there is one. `from` is the forward op whose backward
 * produced the partial (for the stamps). */
static wf_status accumulate(adctx *c, int f, int part, const wf_op *from_in)
{
    wf_graph *g = c->g;
    c->nparts[f]++;
    if (c->cur[f] < 0) {
        c->cur[f] = part;
        return WF_OK;
    }
    wf_op from = *from_in; /* the ops array may move below */
    char sfx[24];
    snprintf(sfx, sizeof sfx, ".grad.sum%d", c->nparts[f] - 1);
    int sum = new_grad(g, f, sfx);
    if (sum < 0)
        return g->status;
    wf_op o;
    memset(&o, 0, sizeof o);
    o.kind = WF_OP_ADD;
    o.pass = WF_PASS_BACKWARD;
    wf_name_with_suffix(o.name, g->tensors[f].name, sfx);
    o.nin = 2;
    o.nout = 1;
    for (int i = 0; i < WF_MAX_INPUTS; i++)
        o.in[i] = -1;
    for (int i = 0; i < WF_MAX_OUTPUTS; i++)
        o.out[i] = -1;
    o.in[0] = c->cur[f];
    o.in[1] = part;
    o.out[0] = sum;
    o.fwd_op = -1;
    stamp(&o, &from);
    int oi = wf_graph_push_op(g, &o);
    if (oi < 0)
        return g->status;
    g->tensors[sum].producer = oi;
    c->cur[f] = sum;
    return WF_OK;
}

/* The backward pass of roots[0 .. nroots) (the loss, or a pipeline stage's
 * outputs), each seeded by a GRAD tensor with no producer; float tensors
 * wrt[0 .. nwrt) get gradients as parameters do. */
static wf_status differentiate(wf_graph *g, const int *roots, int nroots, const int *wrt, int nwrt)
{
    wf_status st = WF_OK;
    if (g->nops > g->nfwd)
        return wf_errorf(WF_INVAL, "graph '%s': already has a backward pass", g->name);
    int nt = g->ntensors, nf = g->nfwd;
    unsigned char *ng = malloc((size_t)nt);
    unsigned char *reach = calloc((size_t)nt, 1);
    unsigned char *onpath = calloc((size_t)(nf ? nf : 1), 1);
    adctx c = {g, malloc(sizeof(int) * (size_t)nt), calloc((size_t)nt, sizeof(int))};
    if (!ng || !reach || !onpath || !c.cur || !c.nparts) {
        st = wf_errorf(WF_NOMEM, "graph '%s': out of memory in autodiff", g->name);
        goto done;
    }
    for (int t = 0; t < nt; t++)
        c.cur[t] = -1;
    wf_graph_grad_flags(g, nf, ng);
    if (nwrt > 0) {
        /* Inputs differentiated as parameters are: their float consumers too. */
        for (int k = 0; k < nwrt; k++)
            ng[wrt[k]] = 1;
        for (int i = 0; i < nf; i++) {
            const wf_op *o = &g->ops[i];
            int any = 0;
            for (int j = 0; j < o->nin; j++)
                any |= ng[o->in[j]];
            for (int j = 0; j < o->nout; j++)
                if (any && wf_dtype_is_float(g->tensors[o->out[j]].dtype))
                    ng[o->out[j]] = 1;
        }
    }

    /* Which ops lead to the roots: walk back from them. */
    for (int r = 0; r < nroots; r++)
        reach[roots[r]] = 1;
    for (int i = nf - 1; i >= 0; i--) {
        const wf_op *o = &g->ops[i];
        int leads = 0;
        for (int j = 0; j < o->nout; j++)
            leads |= reach[o->out[j]];
        if (!leads)
            continue;
        int needs = 0;
        for (int j = 0; j < o->nin; j++) {
            reach[o->in[j]] = 1;
            needs |= ng[o->in[j]];
        }
        onpath[i] = (unsigned char)needs;
    }
    for (int r = 0; r < nroots; r++)
        if (!ng[roots[r]]) {
            st = wf_errorf(WF_INVAL, "graph '%s': %s '%s' does not depend on any parameter", g->name,
                           roots[r] == g->loss ? "loss" : "output", g->tensors[roots[r]].name);
            goto done;
        }

    /* The seeds: d loss / d loss (1), or the gradient a caller gives an output. */
    for (int r = 0; r < nroots; r++) {
        int seed = new_grad(g, roots[r], ".grad");
        if (seed < 0) {
            st = g->status;
            goto done;
        }
        c.cur[roots[r]] = seed;
        c.nparts[roots[r]] = 1;
    }

    for (int i = nf - 1; i >= 0; i--) {
        if (!onpath[i])
            continue;
        wf_op f = g->ops[i]; /* a copy: pushing may move the array */
        wf_op o;
        memset(&o, 0, sizeof o);
        o.kind = f.kind;
        o.pass = WF_PASS_BACKWARD;
        wf_name_with_suffix(o.name, f.name, ".bwd");
        o.nin = f.nout;
        o.nout = f.nin;
        for (int j = 0; j < WF_MAX_INPUTS; j++)
            o.in[j] = -1;
        for (int j = 0; j < WF_MAX_OUTPUTS; j++)
            o.out[j] = -1;
        /* Consumers come later in forward order, so these gradients are final. */
        for (int j = 0; j < f.nout; j++)
            o.in[j] = c.cur[f.out[j]];
        o.attr = f.attr;
        o.fwd_op = i;
        stamp(&o, &f);
        int parts[WF_MAX_INPUTS];
        for (int j = 0; j < f.nin; j++) {
            parts[j] = -1;
            int x = f.in[j];
            if (!ng[x])
                continue;
            /* The same tensor twice among the inputs gets two partials. */
            char sfx[24];
            int k = c.nparts[x];
            for (int jj = 0; jj < j; jj++)
                k += f.in[jj] == x && parts[jj] >= 0;
            if (k == 0)
                snprintf(sfx, sizeof sfx, ".grad");
            else
                snprintf(sfx, sizeof sfx, ".grad.%d", k);
            parts[j] = new_grad(g, x, sfx);
            if (parts[j] < 0) {
                st = g->status;
                goto done;
            }
            o.out[j] = parts[j];
        }
        int oi = wf_graph_push_op(g, &o);
        if (oi < 0) {
            st = g->status;
            goto done;
        }
        for (int j = 0; j < f.nin; j++) {
            if (parts[j] < 0)
                continue;
            g->tensors[parts[j]].producer = oi;
            if ((st = accumulate(&c, f.in[j], parts[j], &f)) != WF_OK)
                goto done;
        }
    }
    for (int t = 0; t < nt; t++)
        if (c.cur[t] >= 0)
            g->tensors[t].grad = c.cur[t];
    st = WF_OK;
done:
    free(ng);
    free(reach);
    free(onpath);
    free(c.cur);
    free(c.nparts);
    /* A failure after the graph grew leaves it half-differentiated: sticky. */
    if (st != WF_OK && g->status == WF_OK && (g->nops != nf || g->ntensors != nt))
        g->status = st;
    return st;
}

wf_status wf_graph_autodiff(wf_graph *g)
{
    wf_status st = wf_graph_validate(g);
    if (st != WF_OK)
        return st;
    if (g->loss < 0)
        return wf_errorf(WF_INVAL, "graph '%s': no loss to differentiate", g->name);
    return differentiate(g, &g->loss, 1, NULL, 0);
}

wf_status wf_graph_autodiff_outputs(wf_graph *g, const int *outs, int nouts, const int *wrt, int nwrt)
{
    wf_status st = wf_graph_validate(g);
    if (st != WF_OK)
        return st;
    if (nouts < 1 && g->loss < 0)
        return wf_errorf(WF_INVAL, "graph '%s': no output or loss to differentiate", g->name);
    for (int k = 0; k < nouts; k++)
        if (outs[k] < 0 || outs[k] >= g->ntensors || g->tensors[outs[k]].producer < 0 ||
            !wf_dtype_is_float(g->tensors[outs[k]].dtype))
            return wf_errorf(WF_INVAL, "graph '%s': output %d is not a float tensor an op produces", g->name, outs[k]);
    for (int k = 0; k < nwrt; k++)
        if (wrt[k] < 0 || wrt[k] >= g->ntensors || g->tensors[wrt[k]].role != WF_ROLE_INPUT ||
            !wf_dtype_is_float(g->tensors[wrt[k]].dtype))
            return wf_errorf(WF_INVAL, "graph '%s': tensor %d is not a float input to differentiate by", g->name,
                             wrt[k]);
    return nouts > 0 ? differentiate(g, outs, nouts, wrt, nwrt) : differentiate(g, &g->loss, 1, wrt, nwrt);
}
