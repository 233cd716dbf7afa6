/* Reference CPU kernels (fp32 in and out, double inside): naive loops written
 * to be obviously correct, one output element at a time, straight from each
 * op's definition. They are slow on purpose and exist to test the fast path
 * of kernels.c; conventions (layouts, saved buffers, overwrite semantics) are
 * documented in kernels-impl.h. */
#include "kernels/kernels-impl.h"

#include <math.h>
#include <string.h>

/* Element (i, p) of op(A) where op(A) is [rows, cols] and A is stored
 * row-major as [rows, cols] or, transposed, as [cols, rows]. */
static int64_t at2(int trans, int64_t i, int64_t p, int64_t rows, int64_t cols)
{
    return trans ? p * rows + i : i * cols + p;
}

/* ---- matmul ------------------------------------------------------------------ */

void wf_k_matmul_fwd_ref(const float *a, const float *b, float *c, int64_t m, int64_t k,
                         int64_t n, int trans_a, int trans_b)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)a[at2(trans_a, i, p, m, k)] * b[at2(trans_b, p, j, k, n)];
            c[i * n + j] = (float)s;
        }
}

void wf_k_matmul_bwd_ref(const float *a, const float *b, const float *dc, float *da,
                         float *db, int64_t m, int64_t k, int64_t n, int trans_a, int trans_b)
{
    /* d op(A)[i,p] = sum_j dC[i,j] op(B)[p,j]; stored where op(A)[i,p] is. */
    if (da)
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++) {
                double s = 0;
                for (int64_t j = 0; j < n; j++)
                    s += (double)dc[i * n + j] * b[at2(trans_b, p, j, k, n)];
                da[at2(trans_a, i, p, m, k)] = (float)s;
            }
    /* d op(B)[p,j] = sum_i op(A)[i,p] dC[i,j]. */
    if (db)
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t i = 0; i < m; i++)
                    s += (double)a[at2(trans_a, i, p, m, k)] * dc[i * n + j];
                db[at2(trans_b, p, j, k, n)] = (float)s;
            }
}

void wf_k_batch_matmul_fwd_ref(const float *a, const float *b, float *c, int64_t batch,
                               int64_t m, int64_t k, int64_t n, int trans_a, int trans_b)
{
    for (int64_t t = 0; t < batch; t++)
        wf_k_matmul_fwd_ref(a + t * m * k, b + t * k * n, c + t * m * n, m, k, n, trans_a,
                            trans_b);
}

void wf_k_batch_matmul_bwd_ref(const float *a, const float *b, const float *dc, float *da,
                               float *db, int64_t batch, int64_t m, int64_t k, int64_t n,
                               int trans_a, int trans_b)
{
    for (int64_t t = 0; t < batch; t++)
        wf_k_matmul_bwd_ref(a + t * m * k, b + t * k * n, dc + t * m * n,
                            da ? da + t * m * k : NULL, db ? db + t * k * n : NULL, m, k, n,
                            trans_a, trans_b);
}

/* ---- linear, bias, add, mul --------------------------------------------------- */

void wf_k_linear_fwd_ref(const float *x, const float *w, const float *bias, float *y,
                         int64_t m, int64_t k, int64_t n)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = bias ? bias[j] : 0.0;
            for (int64_t p = 0; p < k; p++)
                s += (double)x[i * k + p] * w[p * n + j];
            y[i * n + j] = (float)s;
        }
}

void wf_k_linear_bwd_ref(const float *x, const float *w, const float *dy, float *dx,
                         float *dw, float *dbias, int64_t m, int64_t k, int64_t n)
{
    if (dx)
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++) {
                double s = 0;
                for (int64_t j = 0; j < n; j++)
                    s += (double)dy[i * n + j] * w[p * n + j];
                dx[i * k + p] = (float)s;
            }
    if (dw)
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t i = 0; i < m; i++)
                    s += (double)x[i * k + p] * dy[i * n + j];
                dw[p * n + j] = (float)s;
            }
    if (dbias)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t i = 0; i < m; i++)
                s += dy[i * n + j];
            dbias[j] = (float)s;
        }
}

void wf_k_bias_add_fwd_ref(const float *x, const float *b, float *y, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            y[i * n + j] = x[i * n + j] + b[j];
}

void wf_k_bias_add_bwd_ref(const float *dy, float *dx, float *db, int64_t m, int64_t n)
{
    if (dx)
        for (int64_t i = 0; i < m * n; i++)
            dx[i] = dy[i];
    if (db)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t i = 0; i < m; i++)
                s += dy[i * n + j];
            db[j] = (float)s;
        }
}

void wf_k_add_fwd_ref(const float *a, const float *b, float *y, int64_t n, int64_t nb)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i % nb];
}

void wf_k_add_bwd_ref(const float *dy, float *da, float *db, int64_t n, int64_t nb)
{
    if (da)
        for (int64_t i = 0; i < n; i++)
            da[i] = dy[i];
    if (db)
        for (int64_t j = 0; j < nb; j++) {
            double s = 0;
            for (int64_t i = j; i < n; i += nb)
                s += dy[i];
            db[j] = (float)s;
        }
}

void wf_k_mul_fwd_ref(const float *a, const float *b, float *y, int64_t n, int64_t nb,
                      float scale)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = b ? a[i] * b[i % nb] : a[i] * scale;
}

void wf_k_mul_bwd_ref(const float *a, const float *b, const float *dy, float *da, float *db,
                      int64_t n, int64_t nb, float scale)
{
    if (da)
        for (int64_t i = 0; i < n; i++)
            da[i] = b ? dy[i] * b[i % nb] : dy[i] * scale;
    if (db && b)
        for (int64_t j = 0; j < nb; j++) {
            double s = 0;
            for (int64_t i = j; i < n; i += nb)
                s += (double)dy[i] * a[i];
            db[j] = (float)s;
        }
}

/* ---- activations and dropout ---------------------------------------------------- */

void wf_k_relu_fwd_ref(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void wf_k_relu_bwd_ref(const float *x, const float *dy, float *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dx[i] = x[i] > 0 ? dy[i] : 0.0f;
}

static const double GELU_C = 0.7978845608028654; /* sqrt(2/pi) */

void wf_k_gelu_fwd_ref(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = (float)(0.5 * v * (1.0 + tanh(GELU_C * (v + 0.044715 * v * v * v))));
    }
}

void wf_k_gelu_bwd_ref(const float *x, const float *dy, float *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        double t = tanh(GELU_C * (v + 0.044715 * v * v * v));
        double dt = (1.0 - t * t) * GELU_C * (1.0 + 3.0 * 0.044715 * v * v);
        dx[i] = (float)(dy[i] * (0.5 * (1.0 + t) + 0.5 * v * dt));
    }
}

void wf_k_silu_fwd_ref(const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = (float)(v / (1.0 + exp(-v)));
    }
}

void wf_k_silu_bwd_ref(const float *x, const float *dy, float *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], sg = 1.0 / (1.0 + exp(-v));
        dx[i] = (float)(dy[i] * sg * (1.0 + v * (1.0 - sg)));
    }
}

void wf_k_dropout_fwd_ref(const float *x, float *y, int64_t n, float p, uint64_t seed,
                          uint64_t offset)
{
    for (int64_t i = 0; i < n; i++) {
        int keep = wf_k_rng_uniform(seed, offset + (uint64_t)i) >= p;
        y[i] = keep ? (float)((double)x[i] / (1.0 - p)) : 0.0f;
    }
}

void wf_k_dropout_bwd_ref(const float *dy, float *dx, int64_t n, float p, uint64_t seed,
                          uint64_t offset)
{
    for (int64_t i = 0; i < n; i++) {
        int keep = wf_k_rng_uniform(seed, offset + (uint64_t)i) >= p;
        dx[i] = keep ? (float)((double)dy[i] / (1.0 - p)) : 0.0f;
    }
}

/* ---- normalizations and softmax ------------------------------------------------- */

void wf_k_layernorm_fwd_ref(const float *x, const float *gamma, const float *beta, float *y,
                            float *saved, int64_t m, int64_t h, float eps)
{
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * h;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < h; j++)
            mean += xr[j];
        mean /= (double)h;
        for (int64_t j = 0; j < h; j++)
            var += (xr[j] - mean) * (xr[j] - mean);
        var /= (double)h;
        double rstd = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < h; j++)
            y[i * h + j] = (float)((xr[j] - mean) * rstd * gamma[j] + beta[j]);
        if (saved) {
            saved[i] = (float)mean;
            saved[m + i] = (float)rstd;
        }
    }
}

void wf_k_layernorm_bwd_ref(const float *x, const float *gamma, const float *dy,
                            const float *saved, float *dx, float *dgamma, float *dbeta,
                            int64_t m, int64_t h)
{
    /* xhat = (x - mean) rstd; g = dy * gamma;
     * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
    for (int64_t i = 0; i < m && dx; i++) {
        double mean = saved[i], rstd = saved[m + i], sg = 0, sgx = 0;
        for (int64_t j = 0; j < h; j++) {
            double xh = (x[i * h + j] - mean) * rstd, g = (double)dy[i * h + j] * gamma[j];
            sg += g;
            sgx += g * xh;
        }
        sg /= (double)h;
        sgx /= (double)h;
        for (int64_t j = 0; j < h; j++) {
            double xh = (x[i * h + j] - mean) * rstd, g = (double)dy[i * h + j] * gamma[j];
            dx[i * h + j] = (float)(rstd * (g - sg - xh * sgx));
        }
    }
    for (int64_t j = 0; j < h; j++) {
        double sgam = 0, sbet = 0;
        for (int64_t i = 0; i < m; i++) {
            double xh = (x[i * h + j] - (double)saved[i]) * saved[m + i];
            sgam += dy[i * h + j] * xh;
            sbet += dy[i * h + j];
        }
        if (dgamma)
            dgamma[j] = (float)sgam;
        if (dbeta)
            dbeta[j] = (float)sbet;
    }
}

void wf_k_rmsnorm_fwd_ref(const float *x, const float *gamma, float *y, float *saved,
                          int64_t m, int64_t h, float eps)
{
    for (int64_t i = 0; i < m; i++) {
        double ms = 0;
        for (int64_t j = 0; j < h; j++)
            ms += (double)x[i * h + j] * x[i * h + j];
        double rstd = 1.0 / sqrt(ms / (double)h + eps);
        for (int64_t j = 0; j < h; j++)
            y[i * h + j] = (float)(x[i * h + j] * rstd * gamma[j]);
        if (saved)
            saved[i] = (float)rstd;
    }
}

void wf_k_rmsnorm_bwd_ref(const float *x, const float *gamma, const float *dy,
                          const float *saved, float *dx, float *dgamma, int64_t m, int64_t h)
{
    /* y = x r gamma, r = (mean(x^2)+eps)^(-1/2), dr/dx_j = -r^3 x_j / H:
     * dx_j = r g_j - r^3 x_j mean(g * x), g = dy * gamma. */
    for (int64_t i = 0; i < m && dx; i++) {
        double r = saved[i], sgx = 0;
        for (int64_t j = 0; j < h; j++)
            sgx += (double)dy[i * h + j] * gamma[j] * x[i * h + j];
        sgx /= (double)h;
        for (int64_t j = 0; j < h; j++)
            dx[i * h + j] =
                (float)(r * dy[i * h + j] * gamma[j] - r * r * r * x[i * h + j] * sgx);
    }
    if (dgamma)
        for (int64_t j = 0; j < h; j++) {
            double s = 0;
            for (int64_t i = 0; i < m; i++)
                s += (double)dy[i * h + j] * x[i * h + j] * saved[i];
            dgamma[j] = (float)s;
        }
}

void wf_k_softmax_fwd_ref(const float *x, float *y, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++) {
        double mx = x[i * n], s = 0;
        for (int64_t j = 1; j < n; j++)
            mx = fmax(mx, x[i * n + j]);
        for (int64_t j = 0; j < n; j++)
            s += exp(x[i * n + j] - mx);
        for (int64_t j = 0; j < n; j++)
            y[i * n + j] = (float)(exp(x[i * n + j] - mx) / s);
    }
}

void wf_k_softmax_bwd_ref(const float *y, const float *dy, float *dx, int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; i++) {
        double dot = 0;
        for (int64_t j = 0; j < n; j++)
            dot += (double)dy[i * n + j] * y[i * n + j];
        for (int64_t j = 0; j < n; j++)
            dx[i * n + j] = (float)(y[i * n + j] * (dy[i * n + j] - dot));
    }
}

/* ---- attention ------------------------------------------------------------------- */

static double attn_scale(const wf_k_attn *at)
{
    return at->scale != 0 ? (double)at->scale : 1.0 / sqrt((double)at->d);
}

/* The keys' length Sk (0 in at: the queries' S). */
static int64_t attn_keys(const wf_k_attn *at) { return at->sk > 0 ? at->sk : at->s; }

/* Dropout factor of probability (b,h,i,j): 0 or 1/(1-p). */
static double attn_drop(const wf_k_attn *at, int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (at->p <= 0)
        return 1.0;
    const int64_t At = at->heads_total > 0 ? at->heads_total : at->heads;
    uint64_t idx = at->offset + (uint64_t)(((b * At + at->head0 + h) * at->s + i) * attn_keys(at) + j);
    return wf_k_rng_uniform(at->seed, idx) >= at->p ? 1.0 / (1.0 - at->p) : 0.0;
}

/* Query i of S reads keys j < Sk (causal: j <= i, with Sk = S). */
void wf_k_attention_fwd_ref(const wf_k_attn *at, const float *q, const float *k,
                            const float *v, float *out, float *saved, float *ws)
{
    (void)ws;
    const int64_t B = at->b, S = at->s, Sk = attn_keys(at), A = at->heads, Akv = at->kv_heads, D = at->d;
    const int64_t grp = A / Akv;
    const double scale = attn_scale(at);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < A; h++) {
            const int64_t g = h / grp;
            const float *bias = at->bias ? at->bias + wf_k_attn_bias_off(at, b, h) : NULL;
            for (int64_t i = 0; i < S; i++) {
                const float *qi = q + (b * S + i) * A * D + h * D;
                const int64_t last = at->causal ? i : Sk - 1;
                double sc[Sk], mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= last; j++) {
                    const float *kj = k + (b * Sk + j) * Akv * D + g * D;
                    double dot = 0;
                    for (int64_t t = 0; t < D; t++)
                        dot += (double)qi[t] * kj[t];
                    sc[j] = dot * scale + (bias ? (double)bias[i * Sk + j] : 0.0);
                    mx = fmax(mx, sc[j]);
                }
                for (int64_t j = 0; j <= last; j++)
                    sum += exp(sc[j] - mx);
                for (int64_t j = 0; j < Sk; j++)
                    sc[j] = j <= last ? exp(sc[j] - mx) / sum : 0.0;
                if (saved)
                    for (int64_t j = 0; j < Sk; j++)
                        saved[((b * A + h) * S + i) * Sk + j] = (float)sc[j];
                for (int64_t t = 0; t < D; t++) {
                    double o = 0;
                    for (int64_t j = 0; j <= last; j++)
                        o += sc[j] * attn_drop(at, b, h, i, j) *
                             v[(b * Sk + j) * Akv * D + g * D + t];
                    out[(b * S + i) * A * D + h * D + t] = (float)o;
                }
            }
        }
}

void wf_k_attention_bwd_ref(const wf_k_attn *at, const float *q, const float *k,
                            const float *v, const float *dout, const float *saved, float *dq,
                            float *dk, float *dv, float *ws)
{
    (void)ws;
    const int64_t B = at->b, S = at->s, Sk = attn_keys(at), A = at->heads, Akv = at->kv_heads, D = at->d;
    const int64_t grp = A / Akv;
    const double scale = attn_scale(at);
    if (dk)
        memset(dk, 0, sizeof(float) * (size_t)(B * Sk * Akv * D));
    if (dv)
        memset(dv, 0, sizeof(float) * (size_t)(B * Sk * Akv * D));
    if (at->dbias)
        memset(at->dbias, 0, sizeof(float) * (size_t)(at->bias_b * A * S * Sk));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < A; h++) {
            const int64_t g = h / grp;
            const float *P = saved + (b * A + h) * S * Sk;
            float *dbias = at->dbias ? at->dbias + wf_k_attn_bias_off(at, b, h) : NULL;
            for (int64_t i = 0; i < S; i++) {
                const float *doi = dout + (b * S + i) * A * D + h * D;
                /* dP[j] = drop(i,j) * <dO_i, V_j>; dS[j] = P[j] (dP[j] - sum_l P[l] dP[l]) */
                double dp[Sk], dot = 0;
                for (int64_t j = 0; j < Sk; j++) {
                    double s = 0;
                    for (int64_t t = 0; t < D; t++)
                        s += (double)doi[t] * v[(b * Sk + j) * Akv * D + g * D + t];
                    dp[j] = s * attn_drop(at, b, h, i, j);
                    dot += dp[j] * P[i * Sk + j];
                }
                for (int64_t j = 0; j < Sk; j++) {
                    double ds = P[i * Sk + j] * (dp[j] - dot) * scale;
                    if (dbias)
                        dbias[i * Sk + j] += (float)(P[i * Sk + j] * (dp[j] - dot));
                    double pd = P[i * Sk + j] * attn_drop(at, b, h, i, j);
                    for (int64_t t = 0; t < D; t++) {
                        int64_t qo = (b * S + i) * A * D + h * D + t;
                        int64_t ko = (b * Sk + j) * Akv * D + g * D + t;
                        if (dk)
                            dk[ko] += (float)(ds * q[qo]);
                        if (dv)
                            dv[ko] += (float)(pd * doi[t]);
                    }
                }
                if (dq)
                    for (int64_t t = 0; t < D; t++) {
                        double s = 0;
                        for (int64_t j = 0; j < Sk; j++)
                            s += P[i * Sk + j] * (dp[j] - dot) * scale *
                                 k[(b * Sk + j) * Akv * D + g * D + t];
                        dq[(b * S + i) * A * D + h * D + t] = (float)s;
                    }
            }
        }
}

/* ---- embedding, rotary, cross-entropy --------------------------------------------- */

wf_status wf_k_embedding_fwd_ref(const int32_t *ids, const float *table, float *y, int64_t m,
                                 int64_t v, int64_t h)
{
    for (int64_t i = 0; i < m; i++) {
        if (ids[i] < 0 || ids[i] >= v)
            return wf_errorf(WF_INVAL, "embedding: token id %d at position %lld is outside "
                             "[0, %lld)", (int)ids[i], (long long)i, (long long)v);
        for (int64_t j = 0; j < h; j++)
            y[i * h + j] = table[(int64_t)ids[i] * h + j];
    }
    return WF_OK;
}

void wf_k_embedding_bwd_ref(const int32_t *ids, const float *dy, float *dtable, int64_t m,
                            int64_t v, int64_t h)
{
    for (int64_t r = 0; r < v; r++)
        for (int64_t j = 0; j < h; j++) {
            double s = 0;
            for (int64_t i = 0; i < m; i++)
                if (ids[i] == r)
                    s += dy[i * h + j];
            dtable[r * h + j] = (float)s;
        }
}

static void rotary_ref(const float *x, float *y, int64_t B, int64_t S, int64_t A, int64_t D,
                       float base, double sign)
{
    const double bs = base != 0 ? (double)base : 10000.0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < A; h++)
                for (int64_t i = 0; i < D / 2; i++) {
                    double ang = sign * (double)s * pow(bs, -2.0 * (double)i / (double)D);
                    int64_t o = (b * S + s) * A * D + h * D + 2 * i;
                    double x0 = x[o], x1 = x[o + 1];
                    y[o] = (float)(x0 * cos(ang) - x1 * sin(ang));
                    y[o + 1] = (float)(x0 * sin(ang) + x1 * cos(ang));
                }
}

void wf_k_rotary_fwd_ref(const float *x, float *y, int64_t b, int64_t s, int64_t heads,
                         int64_t d, float base)
{
    rotary_ref(x, y, b, s, heads, d, base, 1.0);
}

void wf_k_rotary_bwd_ref(const float *dy, float *dx, int64_t b, int64_t s, int64_t heads,
                         int64_t d, float base)
{
    /* The rotation is orthogonal: its transpose is the rotation by -angle. */
    rotary_ref(dy, dx, b, s, heads, d, base, -1.0);
}

wf_status wf_k_cross_entropy_fwd_ref(const float *logits, const int32_t *labels, float *loss,
                                     float *saved, int64_t m, int64_t v)
{
    double total = 0;
    for (int64_t i = 0; i < m; i++) {
        if (labels[i] < 0 || labels[i] >= v)
            return wf_errorf(WF_INVAL, "cross_entropy: label %d at row %lld is outside "
                             "[0, %lld)", (int)labels[i], (long long)i, (long long)v);
        const float *row = logits + i * v;
        double mx = row[0], s = 0;
        for (int64_t j = 1; j < v; j++)
            mx = fmax(mx, row[j]);
        for (int64_t j = 0; j < v; j++)
            s += exp(row[j] - mx);
        double lse = mx + log(s);
        if (saved)
            saved[i] = (float)lse;
        total += lse - row[labels[i]];
    }
    *loss = (float)(total / (double)m);
    return WF_OK;
}

void wf_k_cross_entropy_bwd_ref(const float *logits, const int32_t *labels,
                                const float *saved, float dloss, float *dlogits, int64_t m,
                                int64_t v)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < v; j++) {
            double pr = exp((double)logits[i * v + j] - saved[i]);
            dlogits[i * v + j] = (float)((double)dloss * (pr - (j == labels[i])) / (double)m);
        }
}

/* ---- convolution and pools ---------------------------------------------------------- */

void wf_k_conv2d_fwd_ref(const wf_k_conv_geom *g, const float *x, const float *w,
                         const float *bias, float *y, float *ws)
{
    (void)ws;
    const int64_t G = g->groups > 0 ? g->groups : 1, cg = g->c / G, og = g->o / G;
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t o = 0; o < g->o; o++)
            for (int64_t oh = 0; oh < g->ho; oh++)
                for (int64_t ow = 0; ow < g->wo; ow++) {
                    double s = bias ? bias[o] : 0.0;
                    int64_t grp = o / og;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t kh = 0; kh < g->kh; kh++)
                            for (int64_t kw = 0; kw < g->kw; kw++) {
                                int64_t ih = oh * g->sh - g->ph + kh;
                                int64_t iw = ow * g->sw - g->pw + kw;
                                if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w)
                                    continue;
                                s += (double)x[((n * g->c + grp * cg + c) * g->h + ih) * g->w +
                                               iw] *
                                     w[((o * cg + c) * g->kh + kh) * g->kw + kw];
                            }
                    y[((n * g->o + o) * g->ho + oh) * g->wo + ow] = (float)s;
                }
}

void wf_k_conv2d_bwd_ref(const wf_k_conv_geom *g, const float *x, const float *w,
                         const float *dy, float *dx, float *dw, float *dbias, float *ws)
{
    (void)ws;
    const int64_t G = g->groups > 0 ? g->groups : 1, cg = g->c / G, og = g->o / G;
    /* dx[n,ci,ih,iw] = sum over (o in ci's group, kh, kw) with ih = oh*sh-ph+kh,
     * iw = ow*sw-pw+kw of dy[n,o,oh,ow] w[o,ci-grp*cg,kh,kw]. */
    if (dx)
        for (int64_t n = 0; n < g->n; n++)
            for (int64_t ci = 0; ci < g->c; ci++)
                for (int64_t ih = 0; ih < g->h; ih++)
                    for (int64_t iw = 0; iw < g->w; iw++) {
                        int64_t grp = ci / cg;
                        double s = 0;
                        for (int64_t o = grp * og; o < (grp + 1) * og; o++)
                            for (int64_t kh = 0; kh < g->kh; kh++)
                                for (int64_t kw = 0; kw < g->kw; kw++) {
                                    int64_t th = ih + g->ph - kh, tw = iw + g->pw - kw;
                                    if (th < 0 || tw < 0 || th % g->sh || tw % g->sw)
                                        continue;
                                    int64_t oh = th / g->sh, ow = tw / g->sw;
                                    if (oh >= g->ho || ow >= g->wo)
                                        continue;
                                    s += (double)dy[((n * g->o + o) * g->ho + oh) * g->wo + ow] *
                                         w[((o * cg + ci - grp * cg) * g->kh + kh) * g->kw + kw];
                                }
                        dx[((n * g->c + ci) * g->h + ih) * g->w + iw] = (float)s;
                    }
    if (dw)
        for (int64_t o = 0; o < g->o; o++)
            for (int64_t c = 0; c < cg; c++)
                for (int64_t kh = 0; kh < g->kh; kh++)
                    for (int64_t kw = 0; kw < g->kw; kw++) {
                        int64_t grp = o / og;
                        double s = 0;
                        for (int64_t n = 0; n < g->n; n++)
                            for (int64_t oh = 0; oh < g->ho; oh++)
                                for (int64_t ow = 0; ow < g->wo; ow++) {
                                    int64_t ih = oh * g->sh - g->ph + kh;
                                    int64_t iw = ow * g->sw - g->pw + kw;
                                    if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w)
                                        continue;
                                    s += (double)dy[((n * g->o + o) * g->ho + oh) * g->wo + ow] *
                                         x[((n * g->c + grp * cg + c) * g->h + ih) * g->w + iw];
                                }
                        dw[((o * cg + c) * g->kh + kh) * g->kw + kw] = (float)s;
                    }
    if (dbias)
        for (int64_t o = 0; o < g->o; o++) {
            double s = 0;
            for (int64_t n = 0; n < g->n; n++)
                for (int64_t t = 0; t < g->ho * g->wo; t++)
                    s += dy[(n * g->o + o) * g->ho * g->wo + t];
            dbias[o] = (float)s;
        }
}

/* Index (into the plane) of the first maximum of pooling window (oh, ow), or -1
 * when the window holds no input element. */
static int64_t maxpool_arg_ref(const wf_k_conv_geom *g, const float *plane, int64_t oh,
                               int64_t ow)
{
    int64_t best = -1;
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            int64_t ih = oh * g->sh - g->ph + kh, iw = ow * g->sw - g->pw + kw;
            if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w)
                continue;
            if (best < 0 || plane[ih * g->w + iw] > plane[best])
                best = ih * g->w + iw;
        }
    return best;
}

void wf_k_maxpool_fwd_ref(const wf_k_conv_geom *g, const float *x, float *y)
{
    for (int64_t p = 0; p < g->n * g->c; p++)
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                const float *plane = x + p * g->h * g->w;
                int64_t a = maxpool_arg_ref(g, plane, oh, ow);
                y[(p * g->ho + oh) * g->wo + ow] = a >= 0 ? plane[a] : 0.0f;
            }
}

void wf_k_maxpool_bwd_ref(const wf_k_conv_geom *g, const float *x, const float *dy, float *dx)
{
    memset(dx, 0, sizeof(float) * (size_t)(g->n * g->c * g->h * g->w));
    for (int64_t p = 0; p < g->n * g->c; p++)
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                int64_t a = maxpool_arg_ref(g, x + p * g->h * g->w, oh, ow);
                if (a >= 0)
                    dx[p * g->h * g->w + a] += dy[(p * g->ho + oh) * g->wo + ow];
            }
}

void wf_k_avgpool_fwd_ref(const wf_k_conv_geom *g, const float *x, float *y)
{
    for (int64_t p = 0; p < g->n * g->c; p++)
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                double s = 0;
                for (int64_t kh = 0; kh < g->kh; kh++)
                    for (int64_t kw = 0; kw < g->kw; kw++) {
                        int64_t ih = oh * g->sh - g->ph + kh, iw = ow * g->sw - g->pw + kw;
                        if (ih >= 0 && ih < g->h && iw >= 0 && iw < g->w)
                            s += x[(p * g->h + ih) * g->w + iw];
                    }
                y[(p * g->ho + oh) * g->wo + ow] = (float)(s / (double)(g->kh * g->kw));
            }
}

void wf_k_avgpool_bwd_ref(const wf_k_conv_geom *g, const float *dy, float *dx)
{
    memset(dx, 0, sizeof(float) * (size_t)(g->n * g->c * g->h * g->w));
    for (int64_t p = 0; p < g->n * g->c; p++)
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                float d = (float)(dy[(p * g->ho + oh) * g->wo + ow] / (double)(g->kh * g->kw));
                for (int64_t kh = 0; kh < g->kh; kh++)
                    for (int64_t kw = 0; kw < g->kw; kw++) {
                        int64_t ih = oh * g->sh - g->ph + kh, iw = ow * g->sw - g->pw + kw;
                        if (ih >= 0 && ih < g->h && iw >= 0 && iw < g->w)
                            dx[(p * g->h + ih) * g->w + iw] += d;
                    }
            }
}

void wf_k_global_avgpool_fwd_ref(const float *x, float *y, int64_t nc, int64_t hw)
{
    for (int64_t p = 0; p < nc; p++) {
        double s = 0;
        for (int64_t t = 0; t < hw; t++)
            s += x[p * hw + t];
        y[p] = (float)(s / (double)hw);
    }
}

void wf_k_global_avgpool_bwd_ref(const float *dy, float *dx, int64_t nc, int64_t hw)
{
    for (int64_t p = 0; p < nc; p++)
        for (int64_t t = 0; t < hw; t++)
            dx[p * hw + t] = (float)(dy[p] / (double)hw);
}

void wf_k_batchnorm_fwd_ref(const float *x, const float *gamma, const float *beta, float *y,
                            float *saved, int64_t n, int64_t c, int64_t s, float eps)
{
    const double cnt = (double)(n * s);
    for (int64_t ch = 0; ch < c; ch++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++)
                mean += x[(i * c + ch) * s + t];
        mean /= cnt;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++) {
                double d = x[(i * c + ch) * s + t] - mean;
                var += d * d;
            }
        var /= cnt;
        double rstd = 1.0 / sqrt(var + eps);
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++) {
                int64_t o = (i * c + ch) * s + t;
                y[o] = (float)((x[o] - mean) * rstd * gamma[ch] + beta[ch]);
            }
        if (saved) {
            saved[ch] = (float)mean;
            saved[c + ch] = (float)rstd;
        }
    }
}

void wf_k_batchnorm_bwd_ref(const float *x, const float *gamma, const float *dy,
                            const float *saved, float *dx, float *dgamma, float *dbeta,
                            int64_t n, int64_t c, int64_t s)
{
    /* Same algebra as layernorm, with the statistics taken per channel over
     * N and S: dx = gamma rstd (dy - mean(dy) - xhat mean(dy xhat)). */
    const double cnt = (double)(n * s);
    for (int64_t ch = 0; ch < c; ch++) {
        double mean = saved[ch], rstd = saved[c + ch], sd = 0, sdx = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < s; t++) {
                int64_t o = (i * c + ch) * s + t;
                sd += dy[o];
                sdx += dy[o] * (x[o] - mean) * rstd;
            }
        if (dgamma)
            dgamma[ch] = (float)sdx;
        if (dbeta)
            dbeta[ch] = (float)sd;
        if (dx)
            for (int64_t i = 0; i < n; i++)
                for (int64_t t = 0; t < s; t++) {
                    int64_t o = (i * c + ch) * s + t;
                    double xh = (x[o] - mean) * rstd;
                    dx[o] = (float)(gamma[ch] * rstd * (dy[o] - sd / cnt - xh * sdx / cnt));
                }
    }
}

/* ---- data movement -------------------------------------------------------------------- */

/* Visits every element of x (shape xshape) in row-major order and moves it to
 * or from its place in y = transpose(x, perm). */
static void transpose_ref(const float *src, float *dst, int ndim, const int64_t *xshape,
                          const int *perm, int to_y)
{
    int64_t n = 1, st = 1, ystride[WF_K_MAX_DIMS], idx[WF_K_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        n *= xshape[d];
        idx[d] = 0;
    }
    for (int d = ndim - 1; d >= 0; d--) {
        ystride[d] = st;
        st *= xshape[perm[d]];
    }
    for (int64_t xi = 0; xi < n; xi++) {
        /* idx is the multi-index of xi in x; y's index i is idx[perm[i]]. */
        int64_t yi = 0;
        for (int d = 0; d < ndim; d++)
            yi += idx[perm[d]] * ystride[d];
        if (to_y)
            dst[yi] = src[xi];
        else
            dst[xi] = src[yi];
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < xshape[d])
                break;
            idx[d] = 0;
        }
    }
}

void wf_k_transpose_fwd_ref(const float *x, float *y, int ndim, const int64_t *xshape,
                            const int *perm)
{
    transpose_ref(x, y, ndim, xshape, perm, 1);
}

void wf_k_transpose_bwd_ref(const float *dy, float *dx, int ndim, const int64_t *xshape,
                            const int *perm)
{
    transpose_ref(dy, dx, ndim, xshape, perm, 0);
}

void wf_k_concat_fwd_ref(const float *const *xs, int nx, const int64_t *sizes, float *y,
                         int64_t outer, int64_t inner)
{
    int64_t total = 0;
    for (int t = 0; t < nx; t++)
        total += sizes[t];
    for (int64_t o = 0; o < outer; o++) {
        int64_t at = 0;
        for (int t = 0; t < nx; t++) {
            for (int64_t a = 0; a < sizes[t]; a++)
                for (int64_t i = 0; i < inner; i++)
                    y[(o * total + at + a) * inner + i] = xs[t][(o * sizes[t] + a) * inner + i];
            at += sizes[t];
        }
    }
}

void wf_k_concat_bwd_ref(const float *dy, float *const *dxs, int nx, const int64_t *sizes,
                         int64_t outer, int64_t inner)
{
    int64_t total = 0;
    for (int t = 0; t < nx; t++)
        total += sizes[t];
    for (int64_t o = 0; o < outer; o++) {
        int64_t at = 0;
        for (int t = 0; t < nx; t++) {
            for (int64_t a = 0; a < sizes[t] && dxs[t]; a++)
                for (int64_t i = 0; i < inner; i++)
                    dxs[t][(o * sizes[t] + a) * inner + i] = dy[(o * total + at + a) * inner + i];
            at += sizes[t];
        }
    }
}

void wf_k_split_fwd_ref(const float *x, float *const *ys, int ny, const int64_t *sizes,
                        int64_t outer, int64_t inner)
{
    wf_k_concat_bwd_ref(x, ys, ny, sizes, outer, inner);
}

void wf_k_split_bwd_ref(const float *const *dys, float *dx, int ny, const int64_t *sizes,
                        int64_t outer, int64_t inner)
{
    int64_t total = 0;
    for (int t = 0; t < ny; t++)
        total += sizes[t];
    for (int64_t o = 0; o < outer; o++) {
        int64_t at = 0;
        for (int t = 0; t < ny; t++) {
            for (int64_t a = 0; a < sizes[t]; a++)
                for (int64_t i = 0; i < inner; i++)
                    dx[(o * total + at + a) * inner + i] =
                        dys[t] ? dys[t][(o * sizes[t] + a) * inner + i] : 0.0f;
            at += sizes[t];
        }
    }
}

/* ---- mixtures of experts ------------------------------------------------------------------
 * The definitions kernels_moe.c implements (its header comment has the
 * conventions), element by element: top-k by repeated selection of the
 * largest score not taken yet (ties to the lower expert index), slots by
 * counting the earlier choices of the same expert, the experts' products as
 * plain sums in double (their scratch: 2 C (2 G + F) floats, as doubles). */

static double ref_sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* The router's scores p[T,E] of x[T,H] w[H,E]. */
static void ref_router_probs(const float *x, const float *w, float *probs, int64_t T, int64_t H, int64_t E,
                             int sigmoid)
{
    for (int64_t t = 0; t < T; t++) {
        float *p = probs + t * E;
        double mx = -INFINITY, z = 0;
        for (int64_t e = 0; e < E; e++) {
            double s = 0;
            for (int64_t h = 0; h < H; h++)
                s += (double)x[t * H + h] * w[h * E + e];
            p[e] = (float)s;
            mx = s > mx ? s : mx;
        }
        if (sigmoid) {
            for (int64_t e = 0; e < E; e++)
                p[e] = (float)ref_sigmoid(p[e]);
            continue;
        }
        for (int64_t e = 0; e < E; e++)
            z += exp(p[e] - mx);
        for (int64_t e = 0; e < E; e++)
            p[e] = (float)(exp(p[e] - mx) / z);
    }
}

/* Position q of token t's choice: the q-th largest of p[E], ties to the
 * lower index (e beats f when p[e] > p[f], or p[e] == p[f] and e < f). */
static int32_t ref_choice(const float *p, int64_t E, int64_t q)
{
    for (int64_t e = 0; e < E; e++) {
        int64_t above = 0;
        for (int64_t f = 0; f < E; f++)
            above += p[f] > p[e] || (p[f] == p[e] && f < e);
        if (above == q)
            return (int32_t)e;
    }
    return -1;
}

void wf_k_router_fwd_ref(const float *x, const float *w, float *weights, int32_t *experts, float *probs, int64_t T,
                         int64_t H, int64_t E, int64_t K, int sigmoid)
{
    ref_router_probs(x, w, probs, T, H, E, sigmoid);
    for (int64_t t = 0; t < T; t++) {
        double z = 0;
        for (int64_t j = 0; j < K; j++) {
            experts[t * K + j] = ref_choice(probs + t * E, E, j);
            z += probs[t * E + experts[t * K + j]];
        }
        for (int64_t j = 0; j < K; j++)
            weights[t * K + j] = z > 0 ? (float)(probs[t * E + experts[t * K + j]] / z) : 0.0f;
    }
}

/* weights_j = p_j / sum_k p_k over the chosen: d p_e = (g_j - sum_k g_k
 * weights_k) / Z for e the j-th choice, 0 elsewhere; then through the
 * softmax or the sigmoid to the logits, and the logits' linear. */
void wf_k_router_bwd_ref(const float *x, const float *w, const float *probs, const float *dweights, float *dx,
                         float *dw, float *scratch, int64_t T, int64_t H, int64_t E, int64_t K, int sigmoid)
{
    for (int64_t t = 0; t < T; t++) {
        const float *p = probs + t * E;
        float *dl = scratch + t * E; /* d p first, then d logits in place */
        double z = 0, gw = 0, s = 0;
        int32_t id[64]; /* the executor routes at most 64 choices */
        for (int64_t j = 0; j < K; j++) {
            id[j] = ref_choice(p, E, j);
            z += p[id[j]];
        }
        for (int64_t j = 0; j < K; j++)
            gw += (double)dweights[t * K + j] * p[id[j]] / z;
        for (int64_t e = 0; e < E; e++)
            dl[e] = 0;
        for (int64_t j = 0; j < K; j++)
            dl[id[j]] = (float)((dweights[t * K + j] - gw) / z);
        for (int64_t f = 0; f < E; f++)
            s += (double)p[f] * dl[f];
        /* sigmoid: dl_e = dp_e p_e (1 - p_e); softmax: p_e (dp_e - sum_f p_f dp_f) */
        for (int64_t e = 0; e < E; e++)
            dl[e] = sigmoid ? (float)(dl[e] * p[e] * (1.0 - p[e])) : (float)(p[e] * (dl[e] - s));
    }
    wf_k_linear_bwd_ref(x, w, scratch, dx, dw, NULL, T, H, E);
}

void wf_k_moe_slots_ref(const int32_t *experts, int64_t T, int64_t K, int64_t E, int64_t C, int32_t *count,
                        int32_t *slot)
{
    for (int64_t e = 0; e < E; e++)
        count[e] = 0;
    for (int64_t i = 0; i < T * K; i++) {
        int64_t before = 0;
        for (int64_t q = 0; q < i; q++)
            before += experts[q] == experts[i];
        int ok = experts[i] >= 0 && experts[i] < E && before < C;
        slot[i] = ok ? (int32_t)before : -1;
        if (ok)
            count[experts[i]]++;
    }
}

/* Row c of expert e holds the token whose choice has slot c at e, else 0. */
void wf_k_moe_dispatch_fwd_ref(const float *x, const int32_t *experts, const int32_t *slot, float *y, int64_t T,
                               int64_t K, int64_t E, int64_t C, int64_t H)
{
    for (int64_t e = 0; e < E; e++)
        for (int64_t c = 0; c < C; c++) {
            int64_t src = -1;
            for (int64_t i = 0; i < T * K; i++)
                if (experts[i] == e && slot[i] == c)
                    src = i / K;
            for (int64_t h = 0; h < H; h++)
                y[(e * C + c) * H + h] = src >= 0 ? x[src * H + h] : 0.0f;
        }
}

void wf_k_moe_dispatch_bwd_ref(const float *dy, const int32_t *experts, const int32_t *slot, float *dx, int64_t T,
                               int64_t K, int64_t C, int64_t H)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            double s = 0;
            for (int64_t j = 0; j < K; j++)
                if (slot[t * K + j] >= 0)
                    s += dy[((int64_t)experts[t * K + j] * C + slot[t * K + j]) * H + h];
            dx[t * H + h] = (float)s;
        }
}

void wf_k_moe_combine_fwd_ref(const float *y, const float *weights, const int32_t *experts, const int32_t *slot,
                              float *out, int64_t T, int64_t K, int64_t C, int64_t H)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            double s = 0;
            for (int64_t j = 0; j < K; j++)
                if (slot[t * K + j] >= 0)
                    s += (double)weights[t * K + j] * y[((int64_t)experts[t * K + j] * C + slot[t * K + j]) * H + h];
            out[t * H + h] = (float)s;
        }
}

void wf_k_moe_combine_bwd_ref(const float *y, const float *weights, const int32_t *experts, const int32_t *slot,
                              const float *dout, float *dy, float *dweights, int64_t T, int64_t K, int64_t E,
                              int64_t C, int64_t H)
{
    if (dy)
        for (int64_t e = 0; e < E; e++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t h = 0; h < H; h++) {
                    double s = 0;
                    for (int64_t i = 0; i < T * K; i++)
                        if (experts[i] == e && slot[i] == c)
                            s += (double)weights[i] * dout[(i / K) * H + h];
                    dy[(e * C + c) * H + h] = (float)s;
                }
    if (dweights)
        for (int64_t i = 0; i < T * K; i++) {
            double s = 0;
            for (int64_t h = 0; slot[i] >= 0 && h < H; h++)
                s += (double)dout[(i / K) * H + h] * y[((int64_t)experts[i] * C + slot[i]) * H + h];
            dweights[i] = (float)s;
        }
}

/* a = x w1[e] ([C, G]), hid = silu(a_gate) a_up or gelu(a) ([C, F]). */
static void ref_expert_hidden(const float *x, const float *w1, double *a, double *hid, int64_t C, int64_t H,
                              int64_t F, int swiglu)
{
    int64_t G = swiglu ? 2 * F : F;
    for (int64_t c = 0; c < C; c++) {
        for (int64_t k = 0; k < G; k++) {
            double s = 0;
            for (int64_t h = 0; h < H; h++)
                s += (double)x[c * H + h] * w1[h * G + k];
            a[c * G + k] = s;
        }
        for (int64_t f = 0; f < F; f++) {
            double g = a[c * G + f];
            hid[c * F + f] = swiglu ? g * ref_sigmoid(g) * a[c * G + F + f]
                                    : 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
        }
    }
}

void wf_k_grouped_mlp_fwd_ref(const float *x, const float *w1, const float *w2, float *y, float *scratch, int64_t E,
                              int64_t C, int64_t H, int64_t F, int swiglu)
{
    int64_t G = swiglu ? 2 * F : F;
    double *a = (double *)(void *)scratch, *hid = a + C * G;
    for (int64_t e = 0; e < E; e++) {
        ref_expert_hidden(x + e * C * H, w1 + e * H * G, a, hid, C, H, F, swiglu);
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++) {
                double s = 0;
                for (int64_t f = 0; f < F; f++)
                    s += hid[c * F + f] * w2[(e * F + f) * H + h];
                y[(e * C + c) * H + h] = (float)s;
            }
    }
}

void wf_k_grouped_mlp_bwd_ref(const float *x, const float *w1, const float *w2, const float *dy, float *dx,
                              float *dw1, float *dw2, float *scratch, int64_t E, int64_t C, int64_t H, int64_t F,
                              int swiglu)
{
    int64_t G = swiglu ? 2 * F : F;
    double *a = (double *)(void *)scratch, *hid = a + C * G, *da = hid + C * F;
    for (int64_t e = 0; e < E; e++) {
        const float *xe = x + e * C * H, *w1e = w1 + e * H * G, *w2e = w2 + e * F * H, *dye = dy + e * C * H;
        ref_expert_hidden(xe, w1e, a, hid, C, H, F, swiglu);
        for (int64_t c = 0; c < C; c++)
            for (int64_t f = 0; f < F; f++) {
                double dh = 0; /* dy w2^T */
                for (int64_t h = 0; h < H; h++)
                    dh += (double)dye[c * H + h] * w2e[f * H + h];
                double g = a[c * G + f], sg = ref_sigmoid(g);
                if (swiglu) {
                    da[c * G + f] = dh * a[c * G + F + f] * sg * (1.0 + g * (1.0 - sg));
                    da[c * G + F + f] = dh * g * sg;
                } else {
                    double u = 0.7978845608028654 * (g + 0.044715 * g * g * g), th = tanh(u);
                    da[c * G + f] = dh * (0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * 0.7978845608028654 *
                                                                 (1.0 + 3.0 * 0.044715 * g * g));
                }
            }
        for (int64_t c = 0; dx && c < C; c++)
            for (int64_t h = 0; h < H; h++) {
                double s = 0;
                for (int64_t k = 0; k < G; k++)
                    s += da[c * G + k] * w1e[h * G + k];
                dx[(e * C + c) * H + h] = (float)s;
            }
        for (int64_t h = 0; dw1 && h < H; h++)
            for (int64_t k = 0; k < G; k++) {
                double s = 0;
                for (int64_t c = 0; c < C; c++)
                    s += (double)xe[c * H + h] * da[c * G + k];
                dw1[(e * H + h) * G + k] = (float)s;
            }
        for (int64_t f = 0; dw2 && f < F; f++)
            for (int64_t h = 0; h < H; h++) {
                double s = 0;
                for (int64_t c = 0; c < C; c++)
                    s += hid[c * F + f] * dye[c * H + h];
                dw2[(e * F + f) * H + h] = (float)s;
            }
    }
}
