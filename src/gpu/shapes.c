/* weft gpu: what `calibrate --gpu` measures -- the matrix-product shapes per
 * dtype and the collective message sizes. Plain C (no CUDA): the lists are
 * the same on every build and are tested without a GPU.
 *
 * The shapes are those of /work/shared/data/h100-kernels-2026-11.json
 * (tests/data/h100-kernels-2026-11.json), so a calibration compares point by
 * point with it: square products 512..16384, and the products of a
 * transformer layer C[M,N] = A[M,K] x B[K,N] with M the tokens of a
 * micro-batch (2048, 8192, 16384) and (N, K) the QKV, attention output and
 * MLP projections of hidden sizes 768..8192, plus three vocabulary
 * projections. */
#include "weft/gpu.h"

/* (N, K) of a layer with hidden size h: QKV (3h, h), output (h, h), MLP up
 * (4h, h) and the square (h, h) projections, as the kernel file lists them. */
static const int64_t LAYER_NK[][2] = {
    {2304, 768},   {3072, 768},   {768, 768},    {3072, 1024},  {4096, 1024},  {1024, 1024},
    {6144, 2048},  {8192, 2048},  {2048, 2048},  {9216, 3072},  {12288, 3072}, {3072, 3072},
    {12288, 4096}, {16384, 4096}, {4096, 4096},  {24576, 8192}, {32768, 8192}, {8192, 8192},
};
#define NLAYER ((int)(sizeof LAYER_NK / sizeof LAYER_NK[0]))

static const int64_t VOCAB_MNK[][3] = {{8192, 50304, 768}, {8192, 128256, 2048}, {16384, 128256, 4096}};
static const int64_t TOKENS[] = {2048, 8192, 16384};
/* fp32 and tf32: the kernel file's five shapes plus squares (each product
 * is 8-15x slower than bf16, so fewer of them). */
static const int64_t FP32_MNK[][3] = {
    {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192},
    {8192, 6144, 2048}, {8192, 16384, 4096}, {2048, 4096, 1024},
};

typedef struct {
    wf_gpu_shape *out;
    int cap, n;
} shape_list;

/* Appends a shape once (a layer shape can be a square one: 2048^3, 8192^3). */
static void add(shape_list *l, int64_t m, int64_t n, int64_t k, wf_mdtype t)
{
    for (int i = 0; i < l->n && i < l->cap; i++)
        if (l->out[i].m == m && l->out[i].n == n && l->out[i].k == k && l->out[i].dtype == t)
            return;
    if (l->n < l->cap)
        l->out[l->n] = (wf_gpu_shape){m, n, k, t};
    l->n++;
}

static void add_squares(shape_list *l, int64_t from, int64_t to, wf_mdtype t)
{
    for (int64_t s = from; s <= to; s *= 2)
        add(l, s, s, s, t);
}

int wf_gpu_shapes(int quick, int cc_major, int cc_minor, wf_gpu_shape *out, int cap)
{
    shape_list l = {out, cap, 0};
    const int fp8 = cc_major > 8 || (cc_major == 8 && cc_minor >= 9);
    if (quick) {
        /* Enough for the fit (distinct FLOP counts over three decades) and
         * every dtype once. */
        add_squares(&l, 512, 4096, WF_MDT_BF16);
        for (int i = 0; i < 6; i++)
            add(&l, 2048, LAYER_NK[i][0], LAYER_NK[i][1], WF_MDT_BF16);
        add(&l, 2048, 2048, 2048, WF_MDT_FP16);
        add(&l, 1024, 1024, 1024, WF_MDT_FP32);
        add(&l, 1024, 1024, 1024, WF_MDT_TF32);
        if (fp8)
            add(&l, 2048, 2048, 2048, WF_MDT_FP8);
        return l.n;
    }
    /* bf16, the training dtype the device curve is fitted on: everything. */
    add_squares(&l, 512, 16384, WF_MDT_BF16);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < NLAYER; i++)
            add(&l, TOKENS[t], LAYER_NK[i][0], LAYER_NK[i][1], WF_MDT_BF16);
    for (int i = 0; i < 3; i++)
        add(&l, VOCAB_MNK[i][0], VOCAB_MNK[i][1], VOCAB_MNK[i][2], WF_MDT_BF16);
    /* fp16: squares and one token count. */
    add_squares(&l, 512, 16384, WF_MDT_FP16);
    for (int i = 0; i < NLAYER; i++)
        add(&l, 8192, LAYER_NK[i][0], LAYER_NK[i][1], WF_MDT_FP16);
    for (int t = WF_MDT_FP32; t <= WF_MDT_TF32; t++)
        for (int i = 0; i < (int)(sizeof FP32_MNK / sizeof FP32_MNK[0]); i++)
            add(&l, FP32_MNK[i][0], FP32_MNK[i][1], FP32_MNK[i][2], (wf_mdtype)t);
    if (fp8) {
        add_squares(&l, 1024, 16384, WF_MDT_FP8);
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < NLAYER; i++)
                add(&l, TOKENS[t], LAYER_NK[i][0], LAYER_NK[i][1], WF_MDT_FP8);
    }
    return l.n;
}

int wf_gpu_coll_sizes(int quick, double *out, int cap)
{
    /* One float .. 256 MiB by 4x
     * (quick: 1 KiB .. 4 MiB by 16x). */
    double from = quick ? 1024 : 4, to = quick ? 16777216.0 : 268435456.0, step = quick ? 16 : 4;
    int n = 0;
    for (double b = from; b <= to; b *= step) {
        if (n < cap)
            out[n] = b;
        n++;
    }
    return n;
}
