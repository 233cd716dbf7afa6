/* weft cluster: the presets (DGX A100/H100, V100 Ethernet/InfiniBand, this
 * machine), preset lookup with "key=value" overrides, range checks, and the
 * device's matrix efficiency curve.
 *
 * Hardware numbers come from public specifications (shared/data/hardware.md);
 * the efficiency factors of dgx-a100 were fitted once to Korthikanti et al.
 * 2022 by scripts/calibrate-dgx-a100 (docs/cost-model.md says how). The other
 * GPU presets reuse the A100 factors as a prior until calibrated themselves.
 * A cluster JSON file (docs/cluster-format.md) overrides everything. */
#include "weft/cluster.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- presets ------------------------------------------------------------------ */

/* Factors fitted for DGX A100 by scripts/calibrate-dgx-a100 (the grid search
 * of bench/bench_calibrate_dgx_a100.c on Korthikanti et al. 2022, eight
 * iteration times, with Megatron's fp32 gradients and the 50 us pipeline
 * message prior; docs/cost-model.md lists the fit). Matrix efficiency by the
 * FLOPs of one op is the curve e_max * F / (F + f_half) with e_max 0.91 and
 * f_half 1e10 FLOPs (a GEMM loses a fixed ~35 us to ramp-up and tails),
 * sampled at these points and interpolated in log(FLOPs). */
static const wf_eff_point A100_MATRIX_EFF[] = {
    {1e13, 0.909}, {1e12, 0.901}, {3e11, 0.881}, {1e11, 0.827},
    {3e10, 0.683}, {1e10, 0.455}, {1e9, 0.083},  {1e8, 0.009},
};
#define A100_NEFF ((int)(sizeof A100_MATRIX_EFF / sizeof A100_MATRIX_EFF[0]))
/* Elementwise/normalization kernels reach 85% of HBM bandwidth. */
#define A100_MEM_EFF 0.85
#define A100_VECTOR_EFF 0.50
/* Tensor-parallel collectives (6-50 MB on 8 GPUs, next to compute) reach
 * half of NVSwitch's 300 GB/s per direction. */
#define A100_NVLINK_EFF 0.50
/* nccl-tests reach about 85% of HDR InfiniBand (a prior: not identifiable
 * from the calibration rows, which have no data parallelism). */
#define A100_IB_EFF 0.85
/* Launch and framework dispatch: the shortest an op can take. */
#define A100_OP_OVERHEAD_S 4e-6
/* Fixed cost of one pipeline send/recv beyond the wire: Megatron-LM's p2p
 * call (batch_isend_irecv, NCCL group launch), the torch.cuda.synchronize()
 * it does after every exchange, and the Python re-launch of the next chunk's
 * first kernels that the synchronization exposes. */
#define A100_P2P_OVERHEAD_S 50e-6
/* Software factors fitted on Korthikanti et al. 2022 on top of the kernel
 * model with the hardware factors pinned (bench/bench_calibrate_software
 * a100, docs/cost-model.md "Refit of the calibrated presets"): Megatron-LM's
 * compute runs 1.30x slower while its tensor-parallel all-reduce overlaps
 * it, and the GPU idles 40 us per op and pass between kernels (the score is
 * flat, within 0.1 point of mean error, from 1.25 to the grid's 1.50: the
 * interior point is taken). */
#define A100_KERNEL_OVERLAP_SLOWDOWN 1.30
/* NVSwitch efficiency on the device model, pinned by a collective
 * measurement rather than fitted on runs: nccl-tests all_reduce_perf on 8
 * A100-SXM4-80GB over NVSwitch reaches a bus bandwidth of about 200 GB/s
 * (NCCL 2.18; github.com/NVIDIA/nccl-tests/issues/149): 200 / 300 = 0.67. */
#define A100_KERNEL_NVLINK_EFF 0.67
/* The FLOPs-table fit (kernel_model=0): compute overlapped by communication
 * runs 30% slower (NCCL takes SMs and memory bandwidth). */
#define A100_OVERLAP_SLOWDOWN 1.30
#define A100_OP_GAP_S 40e-6

/* Factors fitted for DGX H100 by scripts/calibrate-dgx-h100 (the grid search
 * of bench/bench_calibrate_dgx_h100.c on NVIDIA's NeMo 24.07 H100 results,
 * Megatron-Core with FP8; docs/cost-model.md lists the fit): the 16-bit
 * matrix efficiency curve e_max F / (F + f_half), what FP8 products reach of
 * it, HBM3 and NVSwitch efficiencies, the overlap slowdown. Launch floor,
 * InfiniBand efficiency and the pipeline message overhead keep the A100
 * priors. */
static const wf_eff_point H100_MATRIX_EFF[] = {
    {1e13, 0.550}, {1e12, 0.549}, {3e11, 0.547}, {1e11, 0.540},
    {3e10, 0.519}, {1e10, 0.467}, {1e9, 0.198}, {1e8, 0.029},
};
#define H100_NEFF ((int)(sizeof H100_MATRIX_EFF / sizeof H100_MATRIX_EFF[0]))
/* Every row runs its products in FP8, so mainly e_max x fp8_eff (0.52: about
 * 1020 TFLOP/s on large FP8 GEMMs) is determined; the 16-bit e_max shows
 * only through the attention kernels, which stay in bf16. */
#define H100_FP8_EFF 0.94
#define H100_MEM_EFF 0.95
#define H100_NVLINK_EFF 0.50
/* Software factors fitted on NVIDIA's NeMo 24.07 rows on top of the kernel
 * model with the hardware factors pinned (bench/bench_calibrate_software
 * h100): overlapped GEMMs 5% slower, 45 us of idle GPU per op and pass (Transformer Engine's module calls and
 * FP8 scaling bookkeeping). */
#define H100_KERNEL_OVERLAP_SLOWDOWN 1.05
/* H100: NCCL's ring reaches about 370 GB/s of NVLink 4's 450 GB/s line rate
 * (protocol overhead about 20%; S. Jeaugey, NCCL maintainer,
 * github.com/NVIDIA/nccl-tests/issues/212): 370 / 450 = 0.82. */
#define H100_KERNEL_NVLINK_EFF 0.82
/* The FLOPs-table fit: Transformer Engine's userbuffers overlap does not
 * slow the GEMMs beside it (the copy engines move the data). */
#define H100_OVERLAP_SLOWDOWN 1.00
#define H100_OP_GAP_S 45e-6

/* ---- measured-kernel device model (src/cluster/kernel_model.c) ---------------------
 *
 * H100: fitted on tests/data/h100-kernels-2026-11.json (cuBLAS through
 * torch.matmul, torch._scaled_mm, PyTorch SDPA; measured 2026-11-26) by a
 * minimax fit of log(predicted / measured) per family (scripts/fit-kernels,
 * the method of scripts/fit-kernels-a100 and -v100; it prints these values'
 * errors beside a fresh fit's); tests/test_devmodel.c checks the
 * values against the file, and the fitted values, their ranges and the
 * errors are in docs/cost-model.md. */
static const wf_gemm_fit H100_GEMM[WF_GEMM_KINDS] = {
    /* tile_m, tile_n, eff, ramp_k, wave_k, quant, launch_s */
    [WF_GEMM_FP32] = {128, 128, 0.775, 252, 52, 0.93, 8.6e-6},
    [WF_GEMM_TF32] = {128, 256, 0.876, 608, 982, 0.68, 8.5e-6},
    [WF_GEMM_HALF] = {128, 256, 0.771, 1117, 296, 0.36, 8.1e-6},
    [WF_GEMM_FP8] = {128, 256, 0.706, 1089, 520, 0.20, 27.1e-6},
};
/* PyTorch 2.11 SDPA (flash backend, bf16) on H100, head dims 64..256. */
static const wf_attn_fit H100_SDPA = {{0.501, 0.548, 0.675, 0.704, 0.680},
                                      {0.484, 0.471, 0.585, 0.408, 0.463},
                                      1.40, 3.37, 33.6e-6, 99e-6};
/* Memory-bound PyTorch kernels on H100 (bf16, 16384 x 4096): achieved
 * fraction of 3350 GB/s, forward and backward, reads plus writes as the
 * graph counts them: copy 2953.6 GB/s; gelu 2509 / 2663; layer norm 1768 /
 * 1117; fused RMS norm 1784 / 1687; an elementwise product's backward from
 * silu(gate) * up (554 us less silu's backward at gelu's rate: 5 tensors in
 * 403 us); F.cross_entropy on upcast logits 2140 / 2500 GB/s (18 and 22
 * bytes per logit, see records.c); fused AdamW 1478 GB/s counted at 16
 * bytes per parameter, 2587 GB/s at the 28 it moves (reads parameter,
 * gradient and both moments, writes parameter and moments; 537M
 * parameters). Other GPUs keep these fractions (priors). */
static const double H100_MB_EFF[WF_MB_KINDS][2] = {
    [WF_MB_ELEM] = {0.88, 0.50},     [WF_MB_ACT] = {0.75, 0.79}, [WF_MB_LAYERNORM] = {0.53, 0.33},
    [WF_MB_RMSNORM] = {0.53, 0.50},  [WF_MB_LOSS] = {0.64, 0.75},
};
#define H100_OPT_EFF 0.77

/* A100 SXM (108 SMs), fitted by scripts/fit-kernels-a100 (the same minimax
 * as the H100 fit) on published tables, tests/data/a100-published-kernels.json:
 * - products: cuBLAS on A100 for m = n = k from 768 to 8192 in steps of 256
 *   (NVIDIA, "CUDA 11 Features Revealed", Figure 6, CUDA 11.0), read off the
 *   figure. The curve's saw-tooth is wave quantization on 108 SMs (NVIDIA,
 *   "Matrix Multiplication Background User's Guide", "Wave quantization"):
 *   16-bit peaks where 256 x 128 tiles fill whole waves (4608: 18 x 36 = 648
 *   tiles = 6.0 waves; 5632: 968 = 8.96) and dips just past them (4352: 578
 *   = 5.35 waves), so the 16-bit and TF32 kinds carry cuBLAS's smaller tiles
 *   (128x128, 128x64, 64x64) at the rate their operands arrive (feed_bps per
 *   SM), and strict fp32 runs 128 x 64 SIMT tiles with several blocks
 *   resident per SM, which hides the last wave (quant 0.05).
 * - FlashAttention-2, forward + backward, head dims 64 and 128, causal or
 *   not, sequence 512 to 16k (Dao 2023, arXiv:2307.08691, Figure 4; the
 *   flash-attention repository's assets/flash2_a100_fwd_bwd_benchmark.png):
 *   the H100 curve's shape by head dim scaled by 1.168 (64) and 1.051 (128
 *   and above; 96 between), forward 0.71 at head dim 128 against the
 *   paper's "up to 73%", with its own ramp and launch. */
static const wf_gemm_fit A100_GEMM[WF_GEMM_KINDS] = {
    /* tile_m, tile_n, eff, ramp_k, wave_k, quant, launch_s */
    [WF_GEMM_FP32] = {128, 64, 0.918, 21, 29, 0.05, 4.9e-6},
    [WF_GEMM_TF32] = {128, 256, 0.823, 325, 123, 0.95, 11.2e-6},
    [WF_GEMM_HALF] = {128, 256, 0.936, 346, 361, 0.67, 4.9e-6},
};
/* Operand feed per SM of the kinds that carry the smaller tiles (bytes/s). */
static const double A100_GEMM_FEED_BPS[WF_GEMM_KINDS] = {[WF_GEMM_TF32] = 47.5e9, [WF_GEMM_HALF] = 53.1e9};
static const wf_attn_fit A100_FA2 = {{0.585, 0.608, 0.709, 0.740, 0.715},
                                     {0.565, 0.523, 0.615, 0.429, 0.487},
                                     1.73, 1.06, 20.7e-6, 64.7e-6};

/* Scale of an attention fit's efficiencies (forward and backward) for
 * another implementation or device, from a published peak of that kernel. */
static wf_attn_fit attn_scaled(const wf_attn_fit *base, double fwd, double bwd, double cap)
{
    wf_attn_fit f = *base;
    for (int i = 0; i < WF_ATTN_HEAD_DIMS; i++) {
        /* Three decimals, as the fits are quoted (and a cluster file keeps them). */
        f.eff_fwd[i] = round(1000.0 * (base->eff_fwd[i] * fwd < cap ? base->eff_fwd[i] * fwd : cap)) / 1000.0;
        f.eff_bwd[i] = round(1000.0 * (base->eff_bwd[i] * bwd < cap ? base->eff_bwd[i] * bwd : cap)) / 1000.0;
    }
    return f;
}

static void set_eff_table(wf_device *d, const wf_eff_point *pts, int n)
{
    d->neff = n;
    for (int i = 0; i < n; i++)
        d->matrix_eff[i] = pts[i];
}

static void set_levels(wf_cluster *c, int64_t per_node, double node_bw, double node_lat,
                       double node_eff, int64_t nodes, double net_bw, double net_lat,
                       double net_eff)
{
    c->nlevels = 2;
    snprintf(c->level[0].name, sizeof c->level[0].name, "node");
    c->level[0].size = per_node;
    c->level[0].bw_bps = node_bw;
    c->level[0].latency_s = node_lat;
    c->level[0].eff = node_eff;
    snprintf(c->level[1].name, sizeof c->level[1].name, "cluster");
    c->level[1].size = nodes;
    c->level[1].bw_bps = net_bw;
    c->level[1].latency_s = net_lat;
    c->level[1].eff = net_eff;
}

/* A GPU device with the A100-fitted efficiencies as its prior. */
static void gpu_device(wf_device *d, const char *name, double fp16_tensor, double fp32,
                       double fp16_vector, int bf16, double mem_gib, double bw)
{
    snprintf(d->name, sizeof d->name, "%s", name);
    d->matrix_flops[WF_DTYPE_FP16] = fp16_tensor;
    d->matrix_flops[WF_DTYPE_BF16] = bf16 ? fp16_tensor : 0;
    d->matrix_flops[WF_DTYPE_FP32] = fp32; /* strict fp32 (no TF32), as frameworks default to */
    d->vector_flops[WF_DTYPE_FP16] = fp16_vector;
    d->vector_flops[WF_DTYPE_BF16] = bf16 ? fp16_vector : 0;
    d->vector_flops[WF_DTYPE_FP32] = fp32;
    d->mem_bytes = mem_gib * GIB;
    d->mem_bw_bps = bw;
    d->mem_eff = A100_MEM_EFF;
    d->vector_eff = A100_VECTOR_EFF;
    d->op_overhead_s = A100_OP_OVERHEAD_S;
    d->fp8_flops = 0;
    d->fp8_eff = 1;
    set_eff_table(d, A100_MATRIX_EFF, A100_NEFF);
    for (int k = 0; k < WF_MB_KINDS; k++)
        for (int b = 0; b < 2; b++)
            d->mb_eff[k][b] = H100_MB_EFF[k][b];
    d->opt_eff = H100_OPT_EFF;
}

static void gpu_factors(wf_cluster *c)
{
    c->overlap_slowdown = A100_OVERLAP_SLOWDOWN;
    c->reduce_bps = 0; /* NCCL reduces at memory speed, hidden behind the transfers */
    c->mem_reserved_bytes = 2.0 * GIB;
    c->grad_bytes = 2; /* fp16 gradients: 2 + 2 + 12 bytes per parameter (ZeRO accounting) */
    c->p2p_overhead_s = A100_P2P_OVERHEAD_S;
    c->op_gap_s = 0;
    c->coll_nccl = 1; /* GPU clusters communicate through NCCL */
}

static void preset_dgx_a100_device(wf_cluster *c)
{
    /* A100 SXM 80GB: 312 TFLOP/s fp16 tensor, 19.5 fp32, 78 fp16 vector, 2039 GB/s. */
    gpu_device(&c->dev, "A100-SXM-80GB", 312e12, 19.5e12, 78e12, 1, 80, 2039e9);
    /* Kernel model: 108 SMs, the products and FlashAttention-2 fitted on
     * published A100 tables (A100_GEMM, A100_FA2 above). PyTorch's SDPA and
     * Transformer Engine run FlashAttention-2 class kernels on Ampere. */
    c->dev.sms = 108;
    c->dev.mem_eff = A100_MEM_EFF;
    for (int k = 0; k < WF_GEMM_KINDS; k++) {
        c->dev.gemm[k] = A100_GEMM[k];
        c->dev.gemm_feed_bps[k] = A100_GEMM_FEED_BPS[k];
    }
    c->dev.attn[WF_ATTN_IMPL_FA2] = A100_FA2;
    c->dev.attn[WF_ATTN_IMPL_SDPA] = A100_FA2;
    c->dev.attn[WF_ATTN_IMPL_TE] = A100_FA2;
    /* NVSwitch 300 GB/s each direction per GPU; one 200 Gb/s HDR NIC per GPU. */
    set_levels(c, 8, 300e9, 3e-6, A100_NVLINK_EFF, 64, 25e9, 6e-6, A100_IB_EFF);
    gpu_factors(c);
    /* Megatron-LM accumulates and reduces gradients in an fp32 buffer
     * (main_grad): 2 + 4 + 12 = 18 bytes per parameter, exactly what
     * Korthikanti et al. 2022 (Figure 1) report for the transformer layers. */
    c->grad_bytes = 4;
}

/* dgx-a100 as the FLOPs table costs it (`kernel_model=0`): the software
 * factors fitted on that path. */
static void preset_dgx_a100_flops(wf_cluster *c)
{
    preset_dgx_a100_device(c);
    c->overlap_slowdown = A100_OVERLAP_SLOWDOWN;
}

/* dgx-a100: costed by the measured-kernel device model, with the software
 * factors fitted on it (docs/cost-model.md, "Refit of the calibrated
 * presets"). */
static void preset_dgx_a100(wf_cluster *c)
{
    preset_dgx_a100_device(c);
    c->dev.kernel_model = 1;
    c->level[0].eff = A100_KERNEL_NVLINK_EFF;
    c->overlap_slowdown = A100_KERNEL_OVERLAP_SLOWDOWN;
    c->op_gap_s = A100_OP_GAP_S;
}

static void preset_dgx_h100_flops(wf_cluster *c)
{
    /* H100 SXM 80GB: 989 TFLOP/s fp16 tensor, 67 fp32, 134 fp16 vector, 3350 GB/s. */
    gpu_device(&c->dev, "H100-SXM-80GB", 989e12, 67e12, 134e12, 1, 80, 3350e9);
    c->dev.mem_bytes = 85017493504.0; /* what CUDA sees (cudaMemGetInfo total, 79.18 GiB): h100-kernels-2026-11.json */
    c->dev.fp8_flops = 1979e12; /* dense FP8 (E4M3/E5M2) tensor peak */
    c->dev.fp8_eff = H100_FP8_EFF;
    c->dev.mem_eff = H100_MEM_EFF;
    set_eff_table(&c->dev, H100_MATRIX_EFF, H100_NEFF);
    c->dev.sms = 132;
    for (int k = 0; k < WF_GEMM_KINDS; k++)
        c->dev.gemm[k] = H100_GEMM[k];
    c->dev.attn[WF_ATTN_IMPL_SDPA] = H100_SDPA;
    /* Transformer Engine's fused attention runs cuDNN's flash kernels, the
     * ones PyTorch's SDPA dispatches to on Hopper (the measured curve reaches
     * 668 TFLOP/s forward, FlashAttention-3 class: Shah et al. 2024,
     * arXiv:2407.08608, report up to 740 TFLOP/s, 75% of peak). */
    c->dev.attn[WF_ATTN_IMPL_TE] = H100_SDPA;
    /* FlashAttention-2 on H100: FlashAttention-3 is 1.5-2.0x faster (same
     * source): 740 / 1.75 = 423 TFLOP/s, 0.43 of peak at head dim 128. */
    c->dev.attn[WF_ATTN_IMPL_FA2] = attn_scaled(&H100_SDPA, 0.43 / 0.675, 0.43 / 0.675, 1.0);
    /* NVSwitch 450 GB/s each direction per GPU; one 400 Gb/s NDR NIC per GPU. */
    set_levels(c, 8, 450e9, 3e-6, H100_NVLINK_EFF, 64, 50e9, 6e-6, A100_IB_EFF);
    gpu_factors(c);
    c->overlap_slowdown = H100_OVERLAP_SLOWDOWN;
}

/* dgx-h100 costed by the measured-kernel device model (the default), with
 * the software factors fitted on it. */
static void preset_dgx_h100(wf_cluster *c)
{
    preset_dgx_h100_flops(c);
    c->dev.kernel_model = 1;
    c->level[0].eff = H100_KERNEL_NVLINK_EFF;
    c->overlap_slowdown = H100_KERNEL_OVERLAP_SLOWDOWN;
    c->op_gap_s = H100_OP_GAP_S;
}

/* V100 products fitted by the same minimax on Baidu's DeepBench V100 GEMM
 * tables (tests/data/v100-deepbench-gemm.json: DGX-1 V100, CUDA 10.1, cuBLAS;
 * the 74 of 160 points per precision with at least 1 GFLOP and both output
 * sides >= 512, docs/cost-model.md): strict fp32 (SIMT) on 128 x 128 tiles
 * reaches 0.927 of 15.7 TFLOP/s in the K loop (14.8 TFLOP/s measured at
 * 4096x7000x4096), fp16 tensor products 0.856 of 125 (112.3 measured). quant
 * (fp32) and ramp_k and launch_s (fp16) are held at mid-range and H100
 * values, which the tables do not determine. */
static const wf_gemm_fit V100_GEMM_FP32 = {128, 128, 0.927, 39, 135, 0.50, 13.8e-6};
static const wf_gemm_fit V100_GEMM_HALF = {128, 256, 0.856, 233, 70, 0.42, 8.1e-6};

static void v100_device(wf_device *d)
{
    /* V100 SXM2 32GB: 125 TFLOP/s fp16 tensor, 15.7 fp32, 31.4 fp16 vector, 900 GB/s;
     * no bf16. */
    gpu_device(d, "V100-SXM2-32GB", 125e12, 15.7e12, 31.4e12, 0, 32, 900e9);
    /* Kernel model (the default; `kernel_model=0` for the FLOPs table): 80
     * SMs, its own product fits (above), split-K for the products whose
     * tiles underfill the SMs (convolution weight gradients). Its
     * memory-bound fractions are still the H100's (no V100 table of those is
     * in the repository). No fused attention kernel (FlashAttention needs
     * sm80): attention is costed unfused. */
    d->kernel_model = 1;
    d->sms = 80;
    d->gemm[WF_GEMM_HALF] = V100_GEMM_HALF;
    d->gemm[WF_GEMM_FP32] = V100_GEMM_FP32;
}

static void preset_v100_10gbe(wf_cluster *c)
{
    v100_device(&c->dev);
    /* NVLink 150 GB/s each direction; 10 Gb/s Ethernet per node shared by its
     * 4 GPUs: 1.25 GB/s / 4 per device, TCP latency. */
    set_levels(c, 4, 150e9, 5e-6, A100_NVLINK_EFF, 16, 1.25e9 / 4, 50e-6, 0.90);
    gpu_factors(c);
}

static void preset_v100_ib100(wf_cluster *c)
{
    v100_device(&c->dev);
    /* 100 Gb/s InfiniBand per node shared by its 4 GPUs: 12.5 GB/s / 4 per device. */
    set_levels(c, 4, 150e9, 5e-6, A100_NVLINK_EFF, 16, 12.5e9 / 4, 5e-6, A100_IB_EFF);
    gpu_factors(c);
}

/* Total memory of this machine from /proc/meminfo, or 24 GiB when unreadable. */
static double local_mem_bytes(void)
{
    double kib = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemTotal: %lf kB", &kib) == 1)
                break;
        fclose(f);
    }
    return kib > 0 ? kib * 1024.0 : 24.0 * GIB;
}

static void preset_local(wf_cluster *c)
{
    /* One "device" per core: each MPI rank runs single-threaded BLAS. sgemm
     * reaches about 100 GFLOP/s per core (AVX-512, 1024^3); memory is shared by
     * the ranks; MPI between local processes moves about 1.2 GB/s. `weft
     * calibrate` measures these on the machine at hand. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t cores = ncpu >= 1 ? (int64_t)ncpu : 2;
    wf_device *d = &c->dev;
    snprintf(d->name, sizeof d->name, "cpu-core");
    d->matrix_flops[WF_DTYPE_FP32] = 100e9;
    d->vector_flops[WF_DTYPE_FP32] = 20e9;
    d->mem_bytes = local_mem_bytes() / (double)cores;
    d->mem_bw_bps = 12e9;
    d->mem_eff = 0.8;
    d->vector_eff = 0.5;
    d->op_overhead_s = 2e-6;
    d->fp8_eff = 1;
    static const wf_eff_point cpu_eff[] = {
        {1e9, 0.95}, {1e8, 0.85}, {1e7, 0.6}, {1e6, 0.3}, {1e5, 0.1},
    };
    set_eff_table(d, cpu_eff, (int)(sizeof cpu_eff / sizeof cpu_eff[0]));
    set_levels(c, cores, 1.2e9, 20e-6, 1.0, 1, 1.2e9, 20e-6, 1.0);
    c->overlap_slowdown = 1.10; /* progress calls and copies steal the core */
    c->reduce_bps = 4e9;        /* the reduction runs on the CPU */
    c->mem_reserved_bytes = 0.25 * GIB;
    c->grad_bytes = 4; /* fp32 training */
    c->p2p_overhead_s = 0; /* the measured MPI latency already holds the software cost */
}

/* Each preset, and the same cluster as the FLOPs table costs it (the
 * software factors fitted on that path), which `kernel_model=0` selects;
 * NULL where the preset is costed by the FLOPs table already. */
typedef struct {
    const char *name;
    const char *summary;
    void (*fill)(wf_cluster *c);
    void (*flops_fill)(wf_cluster *c);
} preset_def;

static const preset_def PRESETS[] = {
    {"dgx-a100", "64 nodes x 8 A100 80GB, NVSwitch 300 GB/s, 8x HDR 200 Gb/s IB per node (calibrated)",
     preset_dgx_a100, preset_dgx_a100_flops},
    {"dgx-h100", "64 nodes x 8 H100 80GB, NVSwitch 450 GB/s, 8x NDR 400 Gb/s IB per node (calibrated)",
     preset_dgx_h100, preset_dgx_h100_flops},
    {"dgx-a100-kernels", "dgx-a100 (a former name, from when the device model was not the default)",
     preset_dgx_a100, preset_dgx_a100_flops},
    {"dgx-h100-kernels", "dgx-h100 (a former name, from when the device model was not the default)",
     preset_dgx_h100, preset_dgx_h100_flops},
    {"v100-10gbe", "16 nodes x 4 V100 32GB, NVLink, 10 Gb/s Ethernet per node (shared)",
     preset_v100_10gbe, NULL},
    {"v100-ib100", "16 nodes x 4 V100 32GB, NVLink, 100 Gb/s InfiniBand per node (shared)",
     preset_v100_ib100, NULL},
    {"local", "this machine: one device per core, OpenBLAS sgemm, MPI over shared memory",
     preset_local, NULL},
};
#define NPRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

static wf_cluster_preset PRESET_INFO[NPRESETS];

int wf_cluster_preset_count(void) { return NPRESETS; }

const wf_cluster_preset *wf_cluster_preset_at(int i)
{
    if (i < 0 || i >= NPRESETS)
        return NULL;
    PRESET_INFO[i].name = PRESETS[i].name;
    PRESET_INFO[i].summary = PRESETS[i].summary;
    return &PRESET_INFO[i];
}

static wf_status preset_fill(const char *name, int flops, wf_cluster *out);

wf_status wf_cluster_from_preset(const char *name, wf_cluster *out) { return preset_fill(name, 0, out); }

/* The preset `name`; flops: as the FLOPs table costs it (kernel_model=0). */
static wf_status preset_fill(const char *name, int flops, wf_cluster *out)
{
    const char *cands[NPRESETS];
    for (int i = 0; i < NPRESETS; i++)
        cands[i] = PRESETS[i].name;
    int folded = wf_resolve_fold(name, cands, NPRESETS); /* "DGX_A100" is dgx-a100 */
    for (int i = 0; i < NPRESETS; i++) {
        if (strcmp(PRESETS[i].name, name) != 0 && i != folded)
            continue;
        name = PRESETS[i].name;
        memset(out, 0, sizeof *out);
        if (flops && PRESETS[i].flops_fill)
            PRESETS[i].flops_fill(out);
        else
            PRESETS[i].fill(out);
        snprintf(out->name, sizeof out->name, "%s", name);
        return WF_OK;
    }
    char names[256] = "";
    for (int i = 0; i < NPRESETS; i++) {
        strncat(names, PRESETS[i].name, sizeof names - strlen(names) - 1);
        if (i + 1 < NPRESETS)
            strncat(names, ", ", sizeof names - strlen(names) - 1);
    }
    char dym[96];
    return wf_errorf(WF_NOTFOUND, "unknown cluster '%s' (presets: %s; or a .json file)%s", name, names,
                     wf_did_you_mean(wf_suggest(name, cands, NPRESETS), dym, sizeof dym));
}

/* ---- overrides ------------------------------------------------------------------ */

/* Scalar calibration factors settable by name, with their ranges. */
static const wf_cluster_factor FACTORS[] = {
    {"mem_eff", offsetof(wf_cluster, dev.mem_eff), 1e-3, 1, "", "achieved fraction of the memory bandwidth (memory-bound ops)"},
    {"vector_eff", offsetof(wf_cluster, dev.vector_eff), 1e-3, 1, "", "achieved fraction of the vector unit's peak"},
    {"op_overhead_s", offsetof(wf_cluster, dev.op_overhead_s), 0, 1, "s", "shortest time of one op and pass (launch, dispatch)"},
    {"fp8_flops", offsetof(wf_cluster, dev.fp8_flops), 0, 1e18, "FLOP/s", "dense FP8 peak of the matrix unit (0: none)"},
    {"fp8_eff", offsetof(wf_cluster, dev.fp8_eff), 1e-3, 1, "", "FP8 products reach this x the matrix efficiency curve"},
    {"mem_bw_bps", offsetof(wf_cluster, dev.mem_bw_bps), 1e6, 1e15, "B/s", "device memory bandwidth"},
    {"mem_bytes", offsetof(wf_cluster, dev.mem_bytes), 1e6, 1e15, "bytes", "device memory"},
    {"overlap_slowdown", offsetof(wf_cluster, overlap_slowdown), 1, 10, "", "compute time x this while communication overlaps it"},
    {"reduce_bps", offsetof(wf_cluster, reduce_bps), 0, 1e15, "B/s", "speed of the reduction arithmetic in collectives (0: hidden)"},
    {"mem_reserved_bytes", offsetof(wf_cluster, mem_reserved_bytes), 0, 1e15, "bytes", "memory the framework keeps (context, allocator slack)"},
    {"grad_bytes", offsetof(wf_cluster, grad_bytes), 2, 4, "", "bytes per gradient element kept and reduced (2 fp16, 4 fp32)"},
    {"p2p_overhead_s", offsetof(wf_cluster, p2p_overhead_s), 0, 1, "s", "fixed software cost of one pipeline send/recv"},
    {"kernel_model", offsetof(wf_cluster, dev.kernel_model), 0, 1, "", "1: cost ops by the measured-kernel device model (0: the FLOPs table)"},
    {"op_gap_s", offsetof(wf_cluster, op_gap_s), 0, 1, "s", "GPU idle time per op and pass (framework dispatch, hooks, FP8 bookkeeping)"},
    {"coll_nccl", offsetof(wf_cluster, coll_nccl), 0, 1, "", "1: collectives as NCCL runs them (reduce-scatter, all-gather, broadcast as rings only; 0: the cheaper of ring and tree)"},
};
#define NFACTORS ((int)(sizeof FACTORS / sizeof FACTORS[0]))

int wf_cluster_factor_count(void) { return NFACTORS; }

const wf_cluster_factor *wf_cluster_factor_at(int i) { return i >= 0 && i < NFACTORS ? &FACTORS[i] : NULL; }

double wf_cluster_factor_value(const wf_cluster *c, const wf_cluster_factor *f)
{
    return *(const double *)((const char *)c + f->offset);
}

wf_status wf_cluster_apply_overrides(wf_cluster *c, wf_spec *s)
{
    int64_t v = 0;
    int r = wf_spec_get_int(s, "nodes", 1, 1 << 20, &v);
    if (r < 0)
        return (wf_status)r;
    if (r == 1) {
        if (c->nlevels < 2)
            return wf_errorf(WF_INVAL, "cluster '%s' has no node level to set nodes=%lld on",
                             c->name, (long long)v);
        c->level[1].size = v;
    }
    r = wf_spec_get_int(s, "devices_per_node", 1, 1 << 16, &v);
    if (r < 0)
        return (wf_status)r;
    if (r == 1)
        c->level[0].size = v;
    for (int i = 0; i < NFACTORS; i++) {
        double x = 0;
        r = wf_spec_get_num(s, FACTORS[i].key, FACTORS[i].lo, FACTORS[i].hi, &x);
        if (r < 0)
            return (wf_status)r;
        if (r == 1)
            *(double *)((char *)c + FACTORS[i].offset) = x;
    }
    for (int l = 0; l < c->nlevels; l++) {
        char key[64];
        double x = 0;
        snprintf(key, sizeof key, "%s_bw_bps", c->level[l].name);
        if ((r = wf_spec_get_num(s, key, 1e3, 1e15, &x)) < 0)
            return (wf_status)r;
        if (r == 1)
            c->level[l].bw_bps = x;
        snprintf(key, sizeof key, "%s_latency_s", c->level[l].name);
        if ((r = wf_spec_get_num(s, key, 0, 1, &x)) < 0)
            return (wf_status)r;
        if (r == 1)
            c->level[l].latency_s = x;
        snprintf(key, sizeof key, "%s_eff", c->level[l].name);
        if ((r = wf_spec_get_num(s, key, 1e-3, 1, &x)) < 0)
            return (wf_status)r;
        if (r == 1)
            c->level[l].eff = x;
    }
    /* The accepted keys, for the message about an unknown one. */
    char hint[512] = "nodes, devices_per_node";
    for (int i = 0; i < NFACTORS; i++) {
        strncat(hint, ", ", sizeof hint - strlen(hint) - 1);
        strncat(hint, FACTORS[i].key, sizeof hint - strlen(hint) - 1);
    }
    strncat(hint, ", <level>_bw_bps, <level>_latency_s, <level>_eff with <level> node or cluster",
            sizeof hint - strlen(hint) - 1);
    return wf_spec_check_unused(s, "cluster", hint);
}

wf_status wf_cluster_check(const wf_cluster *c)
{
    const wf_device *d = &c->dev;
    if (c->nlevels < 1 || c->nlevels > WF_MAX_LEVELS)
        return wf_errorf(WF_FORMAT, "cluster '%s': %d levels, expected 1..%d", c->name, c->nlevels,
                         WF_MAX_LEVELS);
    int any = 0;
    for (int t = 0; t < WF_DTYPE_COUNT; t++) {
        if (!(d->matrix_flops[t] >= 0) || !(d->vector_flops[t] >= 0))
            return wf_errorf(WF_FORMAT, "cluster '%s': negative peak FLOP/s for %s", c->name,
                             wf_dtype_name((wf_dtype)t));
        any |= d->matrix_flops[t] > 0;
    }
    if (!any || d->matrix_flops[WF_DTYPE_FP32] <= 0 || d->vector_flops[WF_DTYPE_FP32] <= 0)
        return wf_errorf(WF_FORMAT, "cluster '%s': device needs fp32 matrix and vector peaks > 0",
                         c->name);
    if (!(d->mem_bytes > 0) || !(d->mem_bw_bps > 0))
        return wf_errorf(WF_FORMAT, "cluster '%s': device memory (%g bytes) and bandwidth (%g B/s) "
                                    "must be > 0", c->name, d->mem_bytes, d->mem_bw_bps);
    if (!(d->mem_eff > 0 && d->mem_eff <= 1) || !(d->vector_eff > 0 && d->vector_eff <= 1))
        return wf_errorf(WF_FORMAT, "cluster '%s': mem_eff=%g and vector_eff=%g must be in (0, 1]",
                         c->name, d->mem_eff, d->vector_eff);
    if (!(d->op_overhead_s >= 0 && d->op_overhead_s < 1))
        return wf_errorf(WF_FORMAT, "cluster '%s': op_overhead_s=%g must be in [0, 1)", c->name,
                         d->op_overhead_s);
    if (!(d->fp8_flops >= 0 && d->fp8_flops < 1e18) || !(d->fp8_eff > 0 && d->fp8_eff <= 1))
        return wf_errorf(WF_FORMAT, "cluster '%s': fp8_flops=%g must be >= 0 and fp8_eff=%g in (0, 1]",
                         c->name, d->fp8_flops, d->fp8_eff);
    if (d->neff < 1 || d->neff > WF_MAX_EFF)
        return wf_errorf(WF_FORMAT, "cluster '%s': matrix efficiency table has %d points, expected "
                                    "1..%d", c->name, d->neff, WF_MAX_EFF);
    for (int i = 0; i < d->neff; i++) {
        const wf_eff_point *e = &d->matrix_eff[i];
        if (!(e->eff > 0 && e->eff <= 1) || !(e->min_flops >= 0))
            return wf_errorf(WF_FORMAT, "cluster '%s': matrix_eff[%d] = {min_flops %g, eff %g}: "
                                        "eff must be in (0, 1], min_flops >= 0", c->name, i,
                             e->min_flops, e->eff);
        if (i > 0 && !(e->min_flops < d->matrix_eff[i - 1].min_flops))
            return wf_errorf(WF_FORMAT, "cluster '%s': matrix_eff must be sorted by min_flops, "
                                        "descending (entry %d: %g after %g)", c->name, i,
                             e->min_flops, d->matrix_eff[i - 1].min_flops);
    }
    for (int l = 0; l < c->nlevels; l++) {
        const wf_level *v = &c->level[l];
        if (v->size < 1 || !(v->bw_bps > 0) || !(v->latency_s >= 0) || !(v->eff > 0 && v->eff <= 1))
            return wf_errorf(WF_FORMAT, "cluster '%s': level '%s' needs size >= 1 (%lld), "
                                        "bw_bps > 0 (%g), latency_s >= 0 (%g), eff in (0, 1] (%g)",
                             c->name, v->name, (long long)v->size, v->bw_bps, v->latency_s, v->eff);
    }
    if (!(c->overlap_slowdown >= 1 && c->overlap_slowdown <= 10))
        return wf_errorf(WF_FORMAT, "cluster '%s': overlap_slowdown=%g must be in [1, 10]", c->name,
                         c->overlap_slowdown);
    if (!(c->reduce_bps >= 0) || !(c->mem_reserved_bytes >= 0) || c->mem_reserved_bytes >= d->mem_bytes)
        return wf_errorf(WF_FORMAT, "cluster '%s': reduce_bps=%g must be >= 0 and "
                                    "mem_reserved_bytes=%g in [0, mem_bytes)", c->name, c->reduce_bps,
                         c->mem_reserved_bytes);
    if (!(c->p2p_overhead_s >= 0 && c->p2p_overhead_s < 1))
        return wf_errorf(WF_FORMAT, "cluster '%s': p2p_overhead_s=%g must be in [0, 1)", c->name,
                         c->p2p_overhead_s);
    if (c->grad_bytes != 2 && c->grad_bytes != 4)
        return wf_errorf(WF_FORMAT, "cluster '%s': grad_bytes=%g must be 2 or 4", c->name,
                         c->grad_bytes);
    if (wf_cluster_devices(c) > WF_MAX_DEVICES)
        return wf_errorf(WF_FORMAT, "cluster '%s': its level sizes multiply to more than the %lld "
                                    "devices weft supports",
                         c->name, (long long)WF_MAX_DEVICES);
    return WF_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

wf_status wf_cluster_lookup(const char *spec, wf_cluster *out)
{
    if (!spec || !*spec)
        return wf_errorf(WF_INVAL, "empty cluster name");
    if (ends_with(spec, ".json") || access(spec, F_OK) == 0) {
        struct cJSON *j = NULL;
        wf_status st = wf_json_read_file(spec, &j);
        if (st != WF_OK)
            return st;
        st = wf_cluster_from_json(j, spec, out);
        cJSON_Delete(j);
        if (st == WF_OK && !out->name[0])
            snprintf(out->name, sizeof out->name, "%s", spec);
        return st;
    }
    wf_spec s;
    wf_status st = wf_spec_parse(spec, &s);
    if (st != WF_OK)
        return st;
    if (!s.name[0])
        return wf_errorf(WF_INVAL, "cluster '%s': expected a preset name before the overrides", spec);
    /* kernel_model=0 selects the preset as the FLOPs table costs it, with
     * the software factors fitted on that path (overrides still apply). */
    double km = 1;
    int r = wf_spec_get_num(&s, "kernel_model", 0, 1, &km);
    if (r < 0)
        return (wf_status)r;
    st = preset_fill(s.name, r == 1 && km == 0, out);
    if (st != WF_OK)
        return st;
    st = wf_cluster_apply_overrides(out, &s);
    if (st != WF_OK)
        return st;
    snprintf(out->name, sizeof out->name, "%s", spec);
    return wf_cluster_check(out);
}

wf_status wf_cluster_of_job(const char *spec, int nranks, wf_cluster *out)
{
    wf_status st = wf_cluster_lookup(spec ? spec : "local", out);
    if (st != WF_OK || spec || wf_cluster_devices(out) >= nranks)
        return st;
    char wide[64];
    snprintf(wide, sizeof wide, "local:devices_per_node=%d", nranks);
    return wf_cluster_lookup(wide, out);
}

int64_t wf_cluster_devices(const wf_cluster *c)
{
    /* Saturates: a product past int64 reads as INT64_MAX, which the device cap
     * in wf_cluster_check rejects. */
    int64_t n = 1;
    for (int l = 0; l < c->nlevels; l++)
        if (wf_mul_i64(n, c->level[l].size, &n) != 0)
            return INT64_MAX;
    return n;
}

double wf_device_matrix_eff(const wf_device *d, double flops)
{
    if (d->neff <= 0)
        return 1.0;
    if (flops >= d->matrix_eff[0].min_flops)
        return d->matrix_eff[0].eff;
    for (int i = 1; i < d->neff; i++) {
        const wf_eff_point *hi = &d->matrix_eff[i - 1], *lo = &d->matrix_eff[i];
        if (flops < lo->min_flops)
            continue;
        /* Between two points: linear in log(FLOPs); a point at 0 FLOPs is a floor. */
        if (lo->min_flops <= 0 || flops <= 0)
            return lo->eff;
        double f = log(flops / lo->min_flops) / log(hi->min_flops / lo->min_flops);
        return lo->eff + f * (hi->eff - lo->eff);
    }
    return d->matrix_eff[d->neff - 1].eff;
}
