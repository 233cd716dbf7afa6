/* CPU kernels of the ops that imported ONNX models bring (tanh, clip,
 * hardswish, cast, expand), in one version: they are elementwise or copies,
 * so a naive loop is both the reference and fast enough. The executor calls
 * them on either path. Gradients overwrite dx, as the other kernels do.
 *
 * Symbols: n elements; for expand, y[ny] the broadcast of x (ranks aligned
 * on the right, dims of size 1 repeated). */
#include "kernels/kernels-impl.h"

#include <math.h>
#include <string.h>

void wf_k_tanh_fwd(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = tanhf(x[i]);
}

/* From the output: d tanh = 1 - y^2. */
void wf_k_tanh_bwd(const float *y, const float *dy, float *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

void wf_k_clip_fwd(const float *x, float *y, int64_t n, float alpha, float beta, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) {
        float v = alpha * x[i] + beta;
        y[i] = v < lo ? lo : (v > hi ? hi : v);
    }
}

/* The gradient passes (times alpha) where the affine value lies strictly
 * inside (lo, hi), as PyTorch's hardtanh; at a bound it is 0. */
void wf_k_clip_bwd(const float *x, const float *dy, float *dx, int64_t n, float alpha, float beta,
                   float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) {
        float v = alpha * x[i] + beta;
        dx[i] = v > lo && v < hi ? alpha * dy[i] : 0.0f;
    }
}

void wf_k_hardswish_fwd(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = v <= -3.0f ? 0.0f : (v >= 3.0f ? v : v * (v + 3.0f) / 6.0f);
    }
}

/* PyTorch's: 0 below -3, (2x + 3) / 6 in [-3, 3], 1 above. */
void wf_k_hardswish_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        dx[i] = v < -3.0f ? 0.0f : (v <= 3.0f ? dy[i] * (2.0f * v + 3.0f) / 6.0f : dy[i]);
    }
}

void wf_k_cast_fwd(const int32_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)x[i];
}

/* The flat index in x of output element i, ranks aligned on the right. */
static int64_t expand_src(int64_t i, int xnd, const int64_t *xs, int ynd, const int64_t *ys)
{
    int64_t src = 0, stride = 1;
    for (int k = ynd - 1; k >= 0; k--) {
        int64_t idx = i % ys[k];
        i /= ys[k];
        int j = k - (ynd - xnd);
        if (j < 0)
            continue;
        src += (xs[j] == 1 ? 0 : idx) * stride;
        stride *= xs[j];
    }
    return src;
}

void wf_k_expand_fwd(const float *x, float *y, int xnd, const int64_t *xs, int ynd, const int64_t *ys)
{
    int64_t ny = 1;
    for (int k = 0; k < ynd; k++)
        ny *= ys[k];
    for (int64_t i = 0; i < ny; i++)
        y[i] = x[expand_src(i, xnd, xs, ynd, ys)];
}

/* dx sums dy over the broadcast copies. */
void wf_k_expand_bwd(const float *dy, float *dx, int xnd, const int64_t *xs, int ynd, const int64_t *ys)
{
    int64_t nx = 1, ny = 1;
    for (int k = 0; k < xnd; k++)
        nx *= xs[k];
    for (int k = 0; k < ynd; k++)
        ny *= ys[k];
    memset(dx, 0, sizeof(float) * (size_t)nx);
    for (int64_t i = 0; i < ny; i++)
        dx[expand_src(i, xnd, xs, ynd, ys)] += dy[i];
}
