/* Graph validation: structure (indices, producers, order), shapes (shape
 * inference re-run and compared), the backward ops, and the loss.
 *
 * A graph built through wf_graph_add_op is valid by construction; validation
 * exists for graphs read from files, edited by hand, or extended by other
 * modules, and as a cheap self-check before autodiff. */
#include "graph/graph-impl.h"

#include <stdlib.h>
#include <string.h>

#define OPFMT "op %d '%s' (%s): "

static wf_status check_index(const wf_graph *g, int i, const wf_op *o, const char *what, int j,
                             int t)
{
    if (t < 0 || t >= g->ntensors)
        return wf_errorf(WF_INVAL, OPFMT "%s %d is tensor %d, not in the graph (%d tensors)", i,
                         o->name, wf_op_name(o->kind), what, j, t, g->ntensors);
    return WF_OK;
}

static int same_shape(const wf_tensor *a, const wf_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

/* Structure common to forward and backward ops: arity, indices, each input
 * available before op i (a leaf or produced by an earlier op), each output
 * produced by op i only. `producer_of` counts producing ops per tensor. */
static wf_status check_links(const wf_graph *g, int i, int *producer_of)
{
    const wf_op *o = &g->ops[i];
    wf_status st;
    if (o->nin < 0 || o->nin > WF_MAX_INPUTS || o->nout < 0 || o->nout > WF_MAX_OUTPUTS)
        return wf_errorf(WF_INVAL, OPFMT "%d inputs / %d outputs out of range", i, o->name,
                         wf_op_name(o->kind), o->nin, o->nout);
    for (int j = 0; j < o->nout; j++) {
        int t = o->out[j];
        if (t < 0 && o->pass == WF_PASS_BACKWARD)
            continue; /* an input that needs no gradient */
        if ((st = check_index(g, i, o, "output", j, t)))
            return st;
        if (producer_of[t] >= 0)
            return wf_errorf(WF_INVAL,
                             OPFMT "output %d '%s' is already produced by op %d '%s' (a tensor "
                                   "is produced at most once)",
                             i, o->name, wf_op_name(o->kind), j, g->tensors[t].name,
                             producer_of[t], g->ops[producer_of[t]].name);
        if (g->tensors[t].producer != i)
            return wf_errorf(WF_INVAL, OPFMT "output %d '%s' records producer %d", i, o->name,
                             wf_op_name(o->kind), j, g->tensors[t].name, g->tensors[t].producer);
        producer_of[t] = i;
    }
    for (int j = 0; j < o->nin; j++) {
        int t = o->in[j];
        if (t < 0 && o->pass == WF_PASS_BACKWARD)
            continue; /* an output without a gradient */
        if ((st = check_index(g, i, o, "input", j, t)))
            return st;
        int p = g->tensors[t].producer;
        if (p < 0)
            continue; /* a leaf; its role is checked with the tensors */
        if (p >= i)
            return wf_errorf(WF_INVAL,
                             OPFMT "input %d '%s' is produced by op %d, not by an earlier op "
                                   "(a cycle or misordered ops)",
                             i, o->name, wf_op_name(o->kind), j, g->tensors[t].name, p);
    }
    return WF_OK;
}

static wf_status check_forward(const wf_graph *g, int i)
{
    const wf_op *o = &g->ops[i];
    char b1[96], b2[96];
    if (o->pass != WF_PASS_FORWARD || o->fwd_op != -1)
        return wf_errorf(WF_INVAL, OPFMT "is among the first %d (forward) ops but is marked "
                                         "backward (pass %d, fwd_op %d)",
                         i, o->name, wf_op_name(o->kind), g->nfwd, (int)o->pass, o->fwd_op);
    for (int j = 0; j < o->nin; j++) {
        const wf_tensor *t = &g->tensors[o->in[j]];
        if (t->role == WF_ROLE_GRAD)
            return wf_errorf(WF_INVAL, OPFMT "input %d '%s' is a gradient", i, o->name,
                             wf_op_name(o->kind), j, t->name);
    }
    int nout = 0;
    wf_tensor outs[WF_MAX_OUTPUTS];
    wf_status st = wf_graph_infer(g, o->kind, o->name, o->in, o->nin, &o->attr, &nout, outs);
    if (st != WF_OK)
        return st;
    if (nout != o->nout)
        return wf_errorf(WF_INVAL, OPFMT "has %d outputs but its inputs give %d", i, o->name,
                         wf_op_name(o->kind), o->nout, nout);
    for (int j = 0; j < nout; j++) {
        const wf_tensor *t = &g->tensors[o->out[j]];
        if (t->role != WF_ROLE_ACT)
            return wf_errorf(WF_INVAL, OPFMT "output %d '%s' has role %d (expected an activation)",
                             i, o->name, wf_op_name(o->kind), j, t->name, (int)t->role);
        if (!same_shape(t, &outs[j]) || t->dtype != outs[j].dtype)
            return wf_errorf(WF_INVAL, OPFMT "output %d '%s' is %s %s but the inputs give %s %s",
                             i, o->name, wf_op_name(o->kind), j, t->name,
                             wf_dtype_name(t->dtype), wf_shape_str(t, b1, sizeof b1),
                             wf_dtype_name(outs[j].dtype), wf_shape_str(&outs[j], b2, sizeof b2));
    }
    return WF_OK;
}

/* grad (a GRAD tensor) must match forward tensor fwd in shape and dtype. */
static wf_status check_grad_of(const wf_graph *g, int i, const char *what, int j, int grad,
                               int fwd)
{
    const wf_op *o = &g->ops[i];
    const wf_tensor *gt = &g->tensors[grad], *ft = &g->tensors[fwd];
    char b1[96], b2[96];
    if (gt->role != WF_ROLE_GRAD)
        return wf_errorf(WF_INVAL, OPFMT "%s %d '%s' is not a gradient tensor", i, o->name,
                         wf_op_name(o->kind), what, j, gt->name);
    if (!same_shape(gt, ft) || gt->dtype != ft->dtype)
        return wf_errorf(WF_INVAL, OPFMT "%s %d '%s' is %s %s but the gradient of '%s' is %s %s",
                         i, o->name, wf_op_name(o->kind), what, j, gt->name,
                         wf_dtype_name(gt->dtype), wf_shape_str(gt, b1, sizeof b1), ft->name,
                         wf_dtype_name(ft->dtype), wf_shape_str(ft, b2, sizeof b2));
    return WF_OK;
}

static wf_status check_backward(const wf_graph *g, int i)
{
    const wf_op *o = &g->ops[i];
    wf_status st;
    char b1[96], b2[96];
    if (o->pass != WF_PASS_BACKWARD)
        return wf_errorf(WF_INVAL, OPFMT "comes after the %d forward ops but is not a backward op",
                         i, o->name, wf_op_name(o->kind), g->nfwd);
    if (o->fwd_op < 0) {
        /* Gradient accumulation: ADD of two gradients of one tensor. */
        if (o->kind != WF_OP_ADD || o->nin != 2 || o->nout != 1 || o->in[0] < 0 ||
            o->in[1] < 0 || o->out[0] < 0)
            return wf_errorf(WF_INVAL, OPFMT "a backward op without a forward op must be an add "
                                             "of two gradients",
                             i, o->name, wf_op_name(o->kind));
        const wf_tensor *y = &g->tensors[o->out[0]];
        for (int j = 0; j < 2; j++) {
            const wf_tensor *t = &g->tensors[o->in[j]];
            if (t->role != WF_ROLE_GRAD || !same_shape(t, y) || t->grad_of != y->grad_of)
                return wf_errorf(WF_INVAL, OPFMT "input %d '%s' %s does not match the sum '%s' %s",
                                 i, o->name, wf_op_name(o->kind), j, t->name,
                                 wf_shape_str(t, b1, sizeof b1), y->name,
                                 wf_shape_str(y, b2, sizeof b2));
        }
        if (y->role != WF_ROLE_GRAD)
            return wf_errorf(WF_INVAL, OPFMT "output '%s' is not a gradient tensor", i, o->name,
                             wf_op_name(o->kind), y->name);
        return WF_OK;
    }
    if (o->fwd_op >= g->nfwd)
        return wf_errorf(WF_INVAL, OPFMT "fwd_op %d is not a forward op (there are %d)", i,
                         o->name, wf_op_name(o->kind), o->fwd_op, g->nfwd);
    const wf_op *f = &g->ops[o->fwd_op];
    if (f->kind != o->kind || o->nin != f->nout || o->nout != f->nin)
        return wf_errorf(WF_INVAL,
                         OPFMT "does not mirror forward op %d '%s' (%s, %d inputs, %d outputs)", i,
                         o->name, wf_op_name(o->kind), o->fwd_op, f->name, wf_op_name(f->kind),
                         f->nin, f->nout);
    for (int j = 0; j < o->nin; j++)
        if (o->in[j] >= 0 && (st = check_grad_of(g, i, "input", j, o->in[j], f->out[j])))
            return st;
    for (int j = 0; j < o->nout; j++)
        if (o->out[j] >= 0 && (st = check_grad_of(g, i, "output", j, o->out[j], f->in[j])))
            return st;
    return WF_OK;
}

wf_status wf_graph_validate(const wf_graph *g)
{
    if (g->status != WF_OK)
        return wf_errorf(g->status, "graph '%s': building failed earlier (%s)", g->name,
                         wf_strerror(g->status));
    if (g->nfwd < 0 || g->nfwd > g->nops || g->ntensors < 0 || g->nops < 0)
        return wf_errorf(WF_INVAL, "graph '%s': nfwd=%d, nops=%d, ntensors=%d are inconsistent",
                         g->name, g->nfwd, g->nops, g->ntensors);
    int *producer_of = malloc(sizeof(int) * (size_t)(g->ntensors ? g->ntensors : 1));
    if (!producer_of)
        return wf_errorf(WF_NOMEM, "graph '%s': out of memory validating", g->name);
    for (int t = 0; t < g->ntensors; t++)
        producer_of[t] = -1;
    wf_status st = WF_OK;
    for (int i = 0; i < g->nops && st == WF_OK; i++) {
        const wf_op *o = &g->ops[i];
        if ((int)o->kind < 0 || o->kind >= WF_OP_COUNT) {
            st = wf_errorf(WF_INVAL, "op %d '%s': unknown kind %d", i, o->name, (int)o->kind);
            break;
        }
        if ((st = check_links(g, i, producer_of)))
            break;
        st = i < g->nfwd ? check_forward(g, i) : check_backward(g, i);
    }
    /* Tensors: a tensor nobody produces must be a leaf (or the loss gradient). */
    for (int t = 0; t < g->ntensors && st == WF_OK; t++) {
        const wf_tensor *x = &g->tensors[t];
        if (producer_of[t] < 0 && x->producer >= 0)
            st = wf_errorf(WF_INVAL, "tensor %d '%s' records producer op %d, which does not list "
                                     "it as an output",
                           t, x->name, x->producer);
        else if (producer_of[t] < 0 && x->role == WF_ROLE_ACT)
            st = wf_errorf(WF_INVAL, "tensor %d '%s' is an activation no op produces", t,
                           x->name);
        else if (producer_of[t] < 0 && x->role == WF_ROLE_GRAD &&
                 !(x->grad_of >= 0 && x->grad_of == g->loss))
            st = wf_errorf(WF_INVAL, "tensor %d '%s' is a gradient no op produces", t, x->name);
        else if (x->grad >= g->ntensors || x->grad_of >= g->ntensors)
            st = wf_errorf(WF_INVAL, "tensor %d '%s': grad %d / grad_of %d out of range", t,
                           x->name, x->grad, x->grad_of);
    }
    if (st == WF_OK && g->loss >= 0) {
        if (g->loss >= g->ntensors)
            st = wf_errorf(WF_INVAL, "graph '%s': loss is tensor %d, not in the graph", g->name,
                           g->loss);
        else if (g->tensors[g->loss].ndim != 0)
            st = wf_errorf(WF_INVAL, "graph '%s': loss '%s' has rank %d (must be a scalar)",
                           g->name, g->tensors[g->loss].name, g->tensors[g->loss].ndim);
        else if (producer_of[g->loss] < 0 || producer_of[g->loss] >= g->nfwd)
            st = wf_errorf(WF_INVAL, "graph '%s': loss '%s' is not produced by a forward op",
                           g->name, g->tensors[g->loss].name);
    } else if (st == WF_OK && g->loss < -1) {
        st = wf_errorf(WF_INVAL, "graph '%s': loss index %d", g->name, g->loss);
    }
    free(producer_of);
    return st;
}
