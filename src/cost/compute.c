/* weft cost: compute time of one op for one pass on a device (ALGORITHMS.md
 * §1.1): FLOPs / (peak x efficiency) + memory traffic / (bandwidth x
 * efficiency), never less than the launch overhead. The sum, not the max of a pure
 * roofline: a kernel's compute and its memory traffic only partly overlap,
 * and the sum is what made Calculon accurate on A100. Matrix products run on
 * the matrix unit with an efficiency that grows with their size (the device's
 * table); everything else runs on the vector unit. */
#include "weft/cost.h"

double wf_compute_time(const wf_device *d, int matrix, wf_dtype dtype, double flops, double bytes)
{
    if (!(flops > 0) && !(bytes > 0))
        return 0;
    if ((int)dtype < 0 || dtype >= WF_DTYPE_COUNT)
        dtype = WF_DTYPE_FP32;
    const double *peaks = matrix ? d->matrix_flops : d->vector_flops;
    /* A dtype the unit lacks (bf16 on V100, fp16 on a CPU) runs at the fp32
     * rate, as frameworks upcast it. */
    double peak = peaks[dtype] > 0 ? peaks[dtype] : peaks[WF_DTYPE_FP32];
    double eff = matrix ? wf_device_matrix_eff(d, flops) : d->vector_eff;
    double t = 0;
    if (flops > 0 && peak > 0)
        t += flops / (peak * eff);
    if (bytes > 0)
        t += bytes / (d->mem_bw_bps * d->mem_eff);
    /* Kernels are launched asynchronously: the launch and the framework's
     * dispatch hide behind longer kernels and set a floor for short ones. */
    return t > d->op_overhead_s ? t : d->op_overhead_s;
}
