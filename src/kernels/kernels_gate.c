/* CPU kernels of the ops the Swin, T5 and AlphaFold2 builders bring
 * (sigmoid, roll), in one version: elementwise or a copy, so the naive loop
 * is both the reference and fast enough. The executor calls them on either
 * path. Gradients overwrite dx, as the other kernels do.
 *
 * Symbols: n elements; for roll, x of rank nd with dims dims[] and a shift
 * per dim (any sign, taken mod the dim). */
#include "kernels/kernels-impl.h"

#include <math.h>
#include <string.h>

void wf_k_sigmoid_fwd(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)(1.0 / (1.0 + exp(-(double)x[i])));
}

/* From the output: d sigmoid = y (1 - y). */
void wf_k_sigmoid_bwd(const float *y, const float *dy, float *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

/* y[i] = x[i - shift] along every dim (mod the dim), as torch.roll; sign -1
 * rolls back (the gradient of a roll is the roll by the opposite shifts). */
static void roll(const float *x, float *y, int nd, const int64_t *dims, const int64_t *shifts,
                 int sign)
{
    int64_t n = 1, sh[WF_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        n *= dims[d];
        int64_t s = (sign * shifts[d]) % dims[d];
        sh[d] = s < 0 ? s + dims[d] : s;
    }
    for (int64_t i = 0; i < n; i++) {
        /* the source index of output element i, dim by dim from the last */
        int64_t rem = i, src = 0, stride = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t c = rem % dims[d];
            rem /= dims[d];
            int64_t sc = c - sh[d];
            if (sc < 0)
                sc += dims[d];
            src += sc * stride;
            stride *= dims[d];
        }
        y[i] = x[src];
    }
}

void wf_k_roll_fwd(const float *x, float *y, int nd, const int64_t *dims, const int64_t *shifts)
{
    roll(x, y, nd, dims, shifts, 1);
}

void wf_k_roll_bwd(const float *dy, float *dx, int nd, const int64_t *dims, const int64_t *shifts)
{
    roll(dy, dx, nd, dims, shifts, -1);
}
