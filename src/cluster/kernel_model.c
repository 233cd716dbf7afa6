/* weft cluster: the measured-kernel device model (docs/cost-model.md, "Device
 * model"): the time of a matrix product from its shape, and of a fused
 * attention call from its sequence, head dim, mask and pass. The factors of
 * each preset are fitted on measured kernel tables (H100:
 * tests/data/h100-kernels-2026-11.json; V100 products: DeepBench's,
 * tests/data/v100-deepbench-gemm.json, by scripts/fit-kernels-v100) or set
 * from published ones (tests/data/published-kernels.json); test_devmodel
 * holds them to the tables. */
#include "weft/cluster.h"

#include <math.h>

wf_gemm_kind wf_gemm_kind_of(wf_dtype dtype, int fp8)
{
    if (fp8)
        return WF_GEMM_FP8;
    return dtype == WF_DTYPE_FP16 || dtype == WF_DTYPE_BF16 ? WF_GEMM_HALF : WF_GEMM_FP32;
}

static double kind_peak(const wf_device *d, wf_gemm_kind kind)
{
    switch (kind) {
    case WF_GEMM_FP8:
        return d->fp8_flops;
    case WF_GEMM_HALF:
        return d->matrix_flops[WF_DTYPE_BF16] > 0 ? d->matrix_flops[WF_DTYPE_BF16] : d->matrix_flops[WF_DTYPE_FP16];
    case WF_GEMM_TF32:
        /* TF32 tensor peak: half the 16-bit one (A100 156 of 312, H100 494.5 of 989). */
        return d->matrix_flops[WF_DTYPE_FP16] / 2.0;
    default:
        return d->matrix_flops[WF_DTYPE_FP32];
    }
}

static double elem_bytes_of(wf_gemm_kind kind)
{
    return kind == WF_GEMM_FP8 ? 1.0 : kind == WF_GEMM_HALF ? 2.0 : 4.0;
}

/* One tile orientation: `tiles` tiles in waves over the SMs, K steps per
 * wave plus the epilogue, plus the kernel's ramp. */
static double tiled_time(const wf_device *d, const wf_gemm_fit *f, double peak, double tiles, double K,
                         double tm, double tn)
{
    double w = tiles / (double)d->sms;
    double waves = w + f->quant * (ceil(w) - w);
    double per_sm = peak / (double)d->sms * f->eff; /* FLOP/s of one SM in the K loop */
    return 2.0 * tm * tn * (waves * (K + f->wave_k) + f->ramp_k) / per_sm;
}

/* Split-K (docs/cost-model.md, "Split-K"): a product whose output tiles do
 * not fill the SMs splits its reduction into s slices, each a tile of its
 * own, and a second kernel sums the slices' fp32 partials. CUTLASS's
 * GemmSplitKParallel (include/cutlass/gemm/device/gemm_splitk_parallel.h at
 * NVIDIA/cutlass 7107b055) sizes its workspace sizeof(ElementAccumulator) x
 * M x N x splits and runs reduction::kernel::ReduceSplitK over it; the
 * SM90 stream-K scheduler (gemm/kernel/tile_scheduler_params.h, same
 * commit) likewise reduces partial accumulators through a workspace and
 * gives a unit no fewer than min_iters_per_sk_unit_ = 8 k-tiles. So: s up to
 * the split that fills the SMs (at most 32), slices of at least 8 k-tiles of
 * 32 (256), the partials written and read back at the copy bandwidth, one
 * more launch; the library takes the fastest s (s = 1 when no split helps). */
#define SPLITK_MAX 32
#define SPLITK_MIN_K 256.0

static int split_max(const wf_device *d, double tiles, double K)
{
    double s = ceil((double)d->sms / tiles);
    if (s > SPLITK_MAX)
        s = SPLITK_MAX;
    if (s > floor(K / SPLITK_MIN_K))
        s = floor(K / SPLITK_MIN_K);
    return s > 1 ? (int)s : 1;
}

/* The tile side a library picks for an output side `dim` shorter than its
 * largest tile: the smallest power of two from 16 that covers it (cuBLAS and
 * cuDNN carry 64-, 32- and 16-wide tiles for skinny products and narrow
 * convolutions; a product with N = 64 does not run on 256-wide tiles). */
static double tile_fit(double tile, double dim)
{
    double p = 16;
    while (p < dim && p < tile)
        p *= 2;
    return p < tile ? p : tile;
}

double wf_gemm_time(const wf_device *d, wf_gemm_kind kind, double count, double M, double N, double K)
{
    if (!(count > 0 && M > 0 && N > 0 && K > 0))
        return 0;
    double flops = 2.0 * count * M * N * K;
    double peak = kind_peak(d, kind);
    const wf_gemm_fit *f = (int)kind >= 0 && kind < WF_GEMM_KINDS ? &d->gemm[kind] : NULL;
    if (!wf_device_kernels(d) || !f || f->tile_m <= 0 || !(peak > 0)) {
        /* No kernel fit: the FLOPs table (fp8 scaled by fp8_eff). */
        if (kind == WF_GEMM_FP8 && d->fp8_flops > 0)
            return flops / (d->fp8_flops * wf_device_matrix_eff(d, flops) * d->fp8_eff);
        double p = kind_peak(d, kind == WF_GEMM_TF32 ? WF_GEMM_FP32 : kind);
        if (!(p > 0))
            p = d->matrix_flops[WF_DTYPE_FP32];
        double t = flops / (p * wf_device_matrix_eff(d, flops));
        return t > d->op_overhead_s ? t : d->op_overhead_s;
    }
    double eb = elem_bytes_of(kind), ob = kind == WF_GEMM_FP32 || kind == WF_GEMM_TF32 ? 4.0 : 2.0;
    /* Memory: A and B read once, C written once in 16 bits (fp32 output for
     * fp32 kinds), at the copy bandwidth; a split writes fp32 partials
     * instead, and its reduction reads them and writes C. */
    double ce = d->mb_eff[WF_MB_ELEM][0] > 0 ? d->mb_eff[WF_MB_ELEM][0] : d->mem_eff;
    double bw = d->mem_bw_bps * ce, ab = count * (M * K + K * N) * eb, mn = count * M * N;
    double best = HUGE_VAL;
    /* The fitted tile, and where the library carries them the smaller
     * tiles too; the fastest in either orientation and split. */
    static const double SMALL[][2] = {{128, 128}, {128, 64}, {64, 64}};
    const double feed = d->gemm_feed_bps[kind];
    const double per_sm = peak / (double)d->sms * f->eff;
    int nt = feed > 0 ? 4 : 1;
    for (int i = 0; i < nt; i++) {
        double t1 = i ? SMALL[i - 1][0] : f->tile_m, t2 = i ? SMALL[i - 1][1] : f->tile_n;
        for (int o = 0; o < 2; o++) {
            double tm = tile_fit(o ? t2 : t1, M), tn = tile_fit(o ? t1 : t2, N);
            /* The K loop runs no faster than its operands arrive. */
            double fed = feed > 0 ? 2.0 * tm * tn / ((tm + tn) * eb) * feed : HUGE_VAL;
            double slow = fed < per_sm ? per_sm / fed : 1.0;
            double tiles = count * ceil(M / tm) * ceil(N / tn);
            int smax = split_max(d, tiles, K);
            for (int s = 1; s <= smax; s++) {
                double t = tiled_time(d, f, peak, tiles * s, ceil(K / s), tm, tn) * slow;
                double tmem = (ab + mn * (s > 1 ? 4.0 * s : ob)) / bw;
                if (tmem > t)
                    t = tmem;
                if (s > 1)
                    t += f->launch_s + mn * (4.0 * s + ob) / bw;
                if (t < best)
                    best = t;
            }
        }
    }
    return f->launch_s + best;
}

static double head_dim_eff(const double *e, double D)
{
    static const double HD[WF_ATTN_HEAD_DIMS] = {64, 96, 128, 192, 256};
    if (D <= HD[0])
        return e[0];
    for (int i = 1; i < WF_ATTN_HEAD_DIMS; i++)
        if (D <= HD[i]) {
            double f = (D - HD[i - 1]) / (HD[i] - HD[i - 1]);
            return e[i - 1] + f * (e[i] - e[i - 1]);
        }
    return e[WF_ATTN_HEAD_DIMS - 1];
}

double wf_attn_time(const wf_device *d, wf_attn_impl impl, double bh, double S, double Skv, double D,
                    int causal, int bwd)
{
    if ((int)impl < 0 || impl >= WF_ATTN_IMPL_COUNT || impl == WF_ATTN_IMPL_UNFUSED || !wf_device_kernels(d))
        return -1;
    const wf_attn_fit *f = &d->attn[impl];
    double e = head_dim_eff(bwd ? f->eff_bwd : f->eff_fwd, D);
    double peak = kind_peak(d, WF_GEMM_HALF);
    if (!(e > 0) || !(peak > 0))
        return -1;
    if (!(bh > 0 && S > 0 && Skv > 0 && D > 0))
        return 0;
    const double blk = 128.0;
    double nq = ceil(S / blk), nk = ceil(Skv / blk);
    /* Causal: query block i sees the key blocks up to the diagonal (queries
     * aligned to the end of the keys, as with a KV cache or a chunk). */
    double kv;
    if (causal) {
        double off = nk - nq > 0 ? nk - nq : 0;
        kv = nq * off + nq * (nq + 1.0) / 2.0;
    } else {
        kv = nq * nk;
    }
    double units = bh * (kv + (bwd ? f->ramp_bwd : f->ramp_fwd) * nq);
    /* QK^T and PV per block pair: 4 x 128 x 128 x D FLOPs; backward 2.5x. */
    double flops = units * 4.0 * blk * blk * D * (bwd ? 2.5 : 1.0);
    return (bwd ? f->launch_bwd_s : f->launch_fwd_s) + flops / (peak * e);
}

const char *wf_attn_impl_name(wf_attn_impl impl)
{
    static const char *const N[WF_ATTN_IMPL_COUNT] = {"unfused", "flash-attn-2", "sdpa", "te-fused"};
    return (int)impl >= 0 && impl < WF_ATTN_IMPL_COUNT ? N[impl] : "?";
}

int wf_device_kernels(const wf_device *d) { return d->kernel_model > 0 && d->sms > 0; }

double wf_membound_time(const wf_device *d, wf_mb_kind kind, int bwd, double bytes)
{
    if (!(bytes > 0))
        return 0;
    double e = wf_device_kernels(d) && (int)kind >= 0 && kind < WF_MB_KINDS ? d->mb_eff[kind][bwd ? 1 : 0] : 0;
    if (!(e > 0))
        e = d->mem_eff;
    return bytes / (d->mem_bw_bps * e);
}

double wf_device_opt_bps(const wf_device *d)
{
    return d->mem_bw_bps * (wf_device_kernels(d) && d->opt_eff > 0 ? d->opt_eff : d->mem_eff);
}
