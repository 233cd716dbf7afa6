/* The graph builders' shared short-hands (models-impl.h): one op with up to
 * four inputs on the graph's sticky error, and the layers every family
 * writes the same way (linear, layer and RMS norms, dropout). */
#include "models/models-impl.h"

#include <string.h>

int wf_model_op(wf_graph *g, wf_op_kind k, const char *name, int a, int b, int c, int d,
                const wf_op_attrs *attr)
{
    int in[4] = {a, b, c, d};
    int n = d >= 0 ? 4 : c >= 0 ? 3 : b >= 0 ? 2 : 1;
    /* A failed earlier call leaves -1 inputs; the sticky status already says why. */
    if (g->status != WF_OK)
        return -1;
    return wf_graph_op1(g, k, name, in, n, attr);
}

int wf_model_unary(wf_graph *g, wf_op_kind k, const char *name, int x)
{
    return wf_model_op(g, k, name, x, -1, -1, -1, NULL);
}

int wf_model_binary(wf_graph *g, wf_op_kind k, const char *name, int x, int y)
{
    return wf_model_op(g, k, name, x, y, -1, -1, NULL);
}

int wf_model_linear(wf_graph *g, const char *name, int x, int64_t K, int64_t N, int bias, wf_dtype dt)
{
    int w = wf_model_param(g, dt, 2, K, N, 0, 0, "%s.weight", name);
    int b = bias ? wf_model_param(g, dt, 1, N, 0, 0, 0, "%s.bias", name) : -1;
    return wf_model_op(g, WF_OP_LINEAR, name, x, w, b, -1, NULL);
}

int wf_model_layernorm(wf_graph *g, const char *name, int x, int64_t H, double eps, wf_dtype dt)
{
    int gam = wf_model_param(g, dt, 1, H, 0, 0, 0, "%s.weight", name);
    int bet = wf_model_param(g, dt, 1, H, 0, 0, 0, "%s.bias", name);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.eps = eps;
    return wf_model_op(g, WF_OP_LAYERNORM, name, x, gam, bet, -1, &a);
}

int wf_model_rmsnorm(wf_graph *g, const char *name, int x, int64_t H, double eps, wf_dtype dt)
{
    int gam = wf_model_param(g, dt, 1, H, 0, 0, 0, "%s.weight", name);
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.eps = eps;
    return wf_model_op(g, WF_OP_RMSNORM, name, x, gam, -1, -1, &a);
}

int wf_model_dropout(wf_graph *g, const char *name, int x, double p)
{
    wf_op_attrs a;
    memset(&a, 0, sizeof a);
    a.p = p;
    a.seed = wf_model_seed(g);
    return wf_model_op(g, WF_OP_DROPOUT, name, x, -1, -1, -1, &a);
}
