/* weft gpu: the human tables of `weft calibrate --gpu` (stderr). Collectives
 * read as nccl-tests prints them: size, time, algorithm and bus bandwidth. */
#include "weft/gpu.h"

static void print_time(FILE *f, double s)
{
    if (s < 1e-3)
        fprintf(f, " %9.2f us", s * 1e6);
    else
        fprintf(f, " %9.3f ms", s * 1e3);
}

void wf_gpu_print(FILE *f, const wf_cluster_measured *m, const wf_cluster *fitted)
{
    fprintf(f, "weft calibrate --gpu: %s (compute capability %d.%d, %d SMs), %d device%s on %d node%s, %s\n",
            m->device, m->cc_major, m->cc_minor, m->sms, m->devices, m->devices == 1 ? "" : "s", m->nodes,
            m->nodes == 1 ? "" : "s", m->date);
    fprintf(f, "CUDA runtime %s, driver %s, cuBLASLt %s, NCCL %s\n", m->cuda_runtime, m->cuda_driver, m->cublaslt,
            m->nccl[0] ? m->nccl : "(none)");
    fprintf(f, "\nmatrix products C[M,N] = A[M,K] x B[K,N] through cuBLASLt (median; the slowest rank)\n");
    fprintf(f, "  %-8s %6s %7s %6s %12s %10s\n", "dtype", "M", "N", "K", "time", "TFLOP/s");
    for (int i = 0; i < m->nkernels; i++) {
        const wf_kernel_point *k = &m->kernels[i];
        fprintf(f, "  %-8s %6lld %7lld %6lld", wf_mdtype_name(k->dtype), (long long)k->m, (long long)k->n,
                (long long)k->k);
        print_time(f, k->seconds);
        fprintf(f, " %10.1f\n", 2.0 * (double)k->m * (double)k->n * (double)k->k / k->seconds / 1e12);
    }
    fprintf(f, "\nmemory\n");
    fprintf(f, "  %-40s %10.1f GB/s (reads + writes of %.0f MiB)\n", "device-to-device copy",
            2 * m->copy_bytes / m->copy_s / 1e9, m->copy_bytes / 1048576.0);
    fprintf(f, "  %-40s %10.2f GiB\n", "total (cudaMemGetInfo)", m->mem_total_bytes / 1073741824.0);
    fprintf(f, "  %-40s %10.2f GiB\n", "free with this process's context", m->mem_free_bytes / 1073741824.0);
    fprintf(f, "  %-40s %10.2f GiB\n", "largest allocation that succeeded", m->mem_alloc_bytes / 1073741824.0);
    fprintf(f, "  %-40s %10.2f us\n", "launch (a tiny product, back to back)", m->launch_s * 1e6);
    if (m->nattn == 0)
        fprintf(f, "\nattention: %s\n", m->attention_note[0] ? m->attention_note : "not measured");
    if (m->ncoll > 0) {
        fprintf(f, "\ncollectives through NCCL (float sum; time averaged over the ranks; nccl-tests' algbw, busbw)\n");
        fprintf(f, "  %-15s %-5s %5s %12s %12s %10s %10s\n", "op", "scope", "ranks", "size (B)", "time",
                "algbw GB/s", "busbw GB/s");
        for (int i = 0; i < m->ncoll; i++) {
            const wf_coll_point *c = &m->coll[i];
            double algbw = c->bytes / c->seconds;
            fprintf(f, "  %-15s %-5s %5lld %12.0f", wf_mcoll_name(c->op), wf_mscope_name(c->scope),
                    (long long)c->ranks, c->bytes);
            print_time(f, c->seconds);
            fprintf(f, " %10.2f %10.2f\n", algbw / 1e9, algbw * wf_mcoll_busbw_factor(c->op, c->ranks) / 1e9);
        }
    } else {
        fprintf(f, "\ncollectives: not measured (%s)\n",
                m->devices < 2 ? "one GPU" : "weft was built without NCCL");
    }
    if (!fitted)
        return;
    const wf_device *d = &fitted->dev;
    fprintf(f, "\nfitted device model (cluster %s)\n", fitted->name);
    fprintf(f, "  matrix peak   fp32 %.1f, bf16 %.1f, fp16 %.1f, fp8 %.1f TFLOP/s (fp8_eff %.3f)\n",
            d->matrix_flops[WF_DTYPE_FP32] / 1e12, d->matrix_flops[WF_DTYPE_BF16] / 1e12,
            d->matrix_flops[WF_DTYPE_FP16] / 1e12, d->fp8_flops / 1e12, d->fp8_eff);
    fprintf(f, "  matrix_eff   ");
    for (int i = 0; i < d->neff; i++)
        fprintf(f, " >=%.2e:%.3f", d->matrix_eff[i].min_flops, d->matrix_eff[i].eff);
    fprintf(f, "\n  mem_bw_bps    %.1f GB/s, mem_bytes %.2f GiB, op_overhead_s %.2f us\n", d->mem_bw_bps / 1e9,
            d->mem_bytes / 1073741824.0, d->op_overhead_s * 1e6);
    for (int l = 0; l < fitted->nlevels; l++) {
        const wf_level *v = &fitted->level[l];
        fprintf(f, "  level %-7s size %lld, bw %.1f GB/s x eff %.3f, latency %.2f us\n", v->name,
                (long long)v->size, v->bw_bps / 1e9, v->eff, v->latency_s * 1e6);
    }
}
