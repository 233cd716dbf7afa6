/* fp32 kernels of the mixture-of-experts ops (graph.h: router, moe_dispatch,
 * grouped_mlp, moe_combine), forward and backward: the router's logits and
 * the experts' products through the linear (BLAS) kernels, the rest plain
 * loops. The naive versions of the reference executor are in kernels_ref.c.
 *
 * Routing is deterministic: the top_k experts of a token by score, ties to
 * the lower index; their scores renormalized to sum 1 are the combine
 * weights. Slots: tokens in order, and for each its K experts in rank order,
 * take the next free row of their expert; a token beyond an expert's
 * capacity C is dropped there (its row stays zero and it gets nothing back
 * from that expert). Dispatch and combine recompute the same slots from the
 * expert ids, so they agree by construction. The router's auxiliary
 * load-balancing loss is not part of the graph's loss and has no gradient
 * here. Grouped MLP, SwiGLU: w1[e] = [gate | up] (first F columns the gate),
 * h = silu(x w1_gate) * (x w1_up), y = h w2[e]; GELU: y = gelu(x w1) w2. */
#include "kernels/kernels-impl.h"

#include <math.h>
#include <string.h>

/* The top k of p[E] (ties to the lower index) into idx[k]. */
static void top_k(const float *p, int64_t E, int64_t k, int32_t *idx)
{
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t q = 0; q < j; q++)
                taken |= idx[q] == (int32_t)e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        idx[j] = (int32_t)best;
    }
}

void wf_k_router_fwd(const float *x, const float *w, float *weights, int32_t *experts, float *probs, int64_t T,
                     int64_t H, int64_t E, int64_t K, int sigmoid)
{
    wf_k_linear_fwd(x, w, NULL, probs, T, H, E);
    for (int64_t t = 0; t < T; t++) {
        float *p = probs + t * E;
        if (sigmoid) {
            for (int64_t e = 0; e < E; e++)
                p[e] = 1.0f / (1.0f + expf(-p[e]));
        } else {
            float mx = p[0];
            for (int64_t e = 1; e < E; e++)
                mx = p[e] > mx ? p[e] : mx;
            double z = 0;
            for (int64_t e = 0; e < E; e++) {
                p[e] = expf(p[e] - mx);
                z += p[e];
            }
            for (int64_t e = 0; e < E; e++)
                p[e] = (float)(p[e] / z);
        }
        int32_t *id = experts + t * K;
        top_k(p, E, K, id);
        double z = 0;
        for (int64_t j = 0; j < K; j++)
            z += p[id[j]];
        for (int64_t j = 0; j < K; j++)
            weights[t * K + j] = z > 0 ? (float)(p[id[j]] / z) : 0.0f;
    }
}

void wf_k_router_bwd(const float *x, const float *w, const float *probs, const float *dweights, float *dx, float *dw,
                     float *scratch, int64_t T, int64_t H, int64_t E, int64_t K, int sigmoid)
{
    int32_t id[64];
    for (int64_t t = 0; t < T; t++) {
        const float *p = probs + t * E;
        float *dl = scratch + t * E; /* d logits of token t */
        int64_t k = K < 64 ? K : 64;
        top_k(p, E, k, id);
        double z = 0, gw = 0;
        for (int64_t j = 0; j < k; j++)
            z += p[id[j]];
        /* w_j = p_j / Z: dp_j = (g_j - sum_k g_k w_k) / Z on the chosen. */
        for (int64_t j = 0; j < k; j++)
            gw += (double)dweights[t * K + j] * (p[id[j]] / z);
        for (int64_t e = 0; e < E; e++)
            dl[e] = 0;
        for (int64_t j = 0; j < k; j++)
            dl[id[j]] = (float)((dweights[t * K + j] - gw) / z);
        if (sigmoid) {
            for (int64_t e = 0; e < E; e++)
                dl[e] *= p[e] * (1.0f - p[e]);
        } else {
            double s = 0;
            for (int64_t e = 0; e < E; e++)
                s += (double)p[e] * dl[e];
            for (int64_t e = 0; e < E; e++)
                dl[e] = (float)(p[e] * (dl[e] - s));
        }
    }
    wf_k_linear_bwd(x, w, scratch, dx, dw, NULL, T, H, E);
}

void wf_k_moe_slots(const int32_t *experts, int64_t T, int64_t K, int64_t E, int64_t C, int32_t *count, int32_t *slot)
{
    for (int64_t e = 0; e < E; e++)
        count[e] = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            int32_t e = experts[t * K + j];
            if (e < 0 || e >= E || count[e] >= C) {
                slot[t * K + j] = -1;
                continue;
            }
            slot[t * K + j] = count[e]++;
        }
}

void wf_k_moe_dispatch_fwd(const float *x, const int32_t *experts, const int32_t *slot, float *y, int64_t T,
                           int64_t K, int64_t E, int64_t C, int64_t H)
{
    memset(y, 0, sizeof(float) * (size_t)(E * C * H));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++)
            if (slot[t * K + j] >= 0)
                memcpy(y + ((int64_t)experts[t * K + j] * C + slot[t * K + j]) * H, x + t * H, sizeof(float) * (size_t)H);
}

void wf_k_moe_dispatch_bwd(const float *dy, const int32_t *experts, const int32_t *slot, float *dx, int64_t T,
                           int64_t K, int64_t C, int64_t H)
{
    memset(dx, 0, sizeof(float) * (size_t)(T * H));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            if (slot[t * K + j] < 0)
                continue;
            const float *row = dy + ((int64_t)experts[t * K + j] * C + slot[t * K + j]) * H;
            for (int64_t h = 0; h < H; h++)
                dx[t * H + h] += row[h];
        }
}

void wf_k_moe_combine_fwd(const float *y, const float *weights, const int32_t *experts, const int32_t *slot,
                          float *out, int64_t T, int64_t K, int64_t C, int64_t H)
{
    memset(out, 0, sizeof(float) * (size_t)(T * H));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            if (slot[t * K + j] < 0)
                continue;
            const float *row = y + ((int64_t)experts[t * K + j] * C + slot[t * K + j]) * H;
            float wt = weights[t * K + j];
            for (int64_t h = 0; h < H; h++)
                out[t * H + h] += wt * row[h];
        }
}

void wf_k_moe_combine_bwd(const float *y, const float *weights, const int32_t *experts, const int32_t *slot,
                          const float *dout, float *dy, float *dweights, int64_t T, int64_t K, int64_t E, int64_t C,
                          int64_t H)
{
    if (dy)
        memset(dy, 0, sizeof(float) * (size_t)(E * C * H));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            int32_t s = slot[t * K + j];
            if (dweights)
                dweights[t * K + j] = 0;
            if (s < 0)
                continue;
            int64_t r = ((int64_t)experts[t * K + j] * C + s) * H;
            double d = 0;
            for (int64_t h = 0; h < H; h++) {
                d += (double)dout[t * H + h] * y[r + h];
                if (dy)
                    dy[r + h] += weights[t * K + j] * dout[t * H + h];
            }
            if (dweights)
                dweights[t * K + j] = (float)d;
        }
}

/* h = act(a) ([C, F]; a is [C, G], G = 2F for SwiGLU), a row at a time
 * through the executor's vectorized activation kernels (kernels.c): with
 * libm's expf in a scalar loop this took as long as the expert products. */
static void expert_act(const float *a, float *hid, int64_t C, int64_t F, int swiglu)
{
    int64_t G = swiglu ? 2 * F : F;
    for (int64_t c = 0; c < C; c++) {
        const float *ar = a + c * G;
        float *h = hid + c * F;
        if (!swiglu) {
            wf_k_gelu_fwd(ar, h, F);
            continue;
        }
        wf_k_silu_fwd(ar, h, F);
        for (int64_t f = 0; f < F; f++)
            h[f] *= ar[F + f];
    }
}

/* da from dh ([C, F]) and a: SwiGLU's gate gets dh u silu'(g) and its up
 * dh silu(g) (the up half first holds dh u); GELU's dh gelu'(a). */
static void expert_act_bwd(const float *a, const float *dh, float *da, int64_t C, int64_t F, int swiglu)
{
    int64_t G = swiglu ? 2 * F : F;
    for (int64_t c = 0; c < C; c++) {
        const float *ar = a + c * G, *dhr = dh + c * F;
        float *dar = da + c * G;
        if (!swiglu) {
            wf_k_gelu_bwd(ar, dhr, dar, F);
            continue;
        }
        float *up = dar + F;
        for (int64_t f = 0; f < F; f++)
            up[f] = dhr[f] * ar[F + f];
        wf_k_silu_bwd(ar, up, dar, F);
        wf_k_silu_fwd(ar, up, F);
        for (int64_t f = 0; f < F; f++)
            up[f] *= dhr[f];
    }
}

void wf_k_grouped_mlp_fwd(const float *x, const float *w1, const float *w2, float *y, float *scratch, int64_t E,
                          int64_t C, int64_t H, int64_t F, int swiglu)
{
    int64_t G = swiglu ? 2 * F : F;
    float *a = scratch, *hid = scratch + C * G;
    for (int64_t e = 0; e < E; e++) {
        wf_k_linear_fwd(x + e * C * H, w1 + e * H * G, NULL, a, C, H, G);
        expert_act(a, hid, C, F, swiglu);
        wf_k_linear_fwd(hid, w2 + e * F * H, NULL, y + e * C * H, C, F, H);
    }
}

void wf_k_grouped_mlp_bwd(const float *x, const float *w1, const float *w2, const float *dy, float *dx, float *dw1,
                          float *dw2, float *scratch, int64_t E, int64_t C, int64_t H, int64_t F, int swiglu)
{
    int64_t G = swiglu ? 2 * F : F;
    float *a = scratch, *hid = a + C * G, *dh = hid + C * F, *da = dh + C * F;
    for (int64_t e = 0; e < E; e++) {
        const float *xe = x + e * C * H, *w1e = w1 + e * H * G, *w2e = w2 + e * F * H, *dye = dy + e * C * H;
        /* Recompute the hidden activations from the rows. */
        wf_k_linear_fwd(xe, w1e, NULL, a, C, H, G);
        expert_act(a, hid, C, F, swiglu);
        /* dh = dy w2^T, dw2 = hid^T dy */
        wf_k_linear_bwd(hid, w2e, dye, dh, dw2 ? dw2 + e * F * H : NULL, NULL, C, F, H);
        expert_act_bwd(a, dh, da, C, F, swiglu);
        /* dx = da w1^T, dw1 = x^T da */
        wf_k_linear_bwd(xe, w1e, da, dx ? dx + e * C * H : NULL, dw1 ? dw1 + e * H * G : NULL, NULL, C, H, G);
    }
}
