/* weft gpu: measures NVIDIA GPUs and their links into a cluster file
 * (`weft calibrate --gpu`, docs/cluster-format.md "Calibration on GPUs").
 *
 * Layering. This module measures; it never sees MPI. Only
 * src/gpu/measure_cuda.c includes CUDA, cuBLASLt and NCCL headers, and it is
 * built only when CMake finds the toolkit (WEFT_CUDA); without it
 * src/gpu/measure_off.c answers every measuring call with "built without
 * CUDA". The fit (src/gpu/fit.c), the shape list and the tables are plain C
 * and always built, so they are tested on machines without a GPU. The caller
 * (src/cli/cmd_calibrate_gpu.c) gathers: it asks the runtime (the only MPI
 * code) for the job's layout, broadcasts the NCCL id from rank 0, agrees on
 * failures between the steps, and rank 0 fits and writes. NCCL itself carries
 * the reductions of the measured points over the ranks.
 *
 * Everything here uses plain C types (include/weft/cluster_measured.h holds
 * the points). */
#ifndef WEFT_GPU_H
#define WEFT_GPU_H

#include <stdio.h>

#include "weft/cluster.h"
#include "weft/cluster_measured.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL's unique id size (NCCL_UNIQUE_ID_BYTES). */
#define WF_GPU_ID_BYTES 128

/* The job as the caller sees it: without MPI one process of rank 0 of 1 on
 * node 0 of 1 (that process then drives every visible GPU of its node for
 * the collectives); under mpiexec one rank per GPU. */
typedef struct {
    int rank, nranks;             /* this process in the job */
    int node, nodes;              /* this process's node (0-based), nodes in the job */
    int local_rank, ranks_per_node;
} wf_gpu_world;

typedef struct {
    int quick;        /* a few shapes and sizes, short trials (a smoke run: about 10 s) */
    int max_devices;  /* without MPI: the GPUs of this node to use (0: all visible) */
} wf_gpu_opts;

/* One matrix product to measure. */
typedef struct {
    int64_t m, n, k;
    wf_mdtype dtype;
} wf_gpu_shape;

/* 1 when weft was built with CUDA (WEFT_CUDA); 1 when with NCCL too. */
int wf_gpu_built(void);
int wf_gpu_built_nccl(void);

/* The products `calibrate --gpu` measures on a device of compute capability
 * cc_major.cc_minor (fp8 from 8.9 on): square sizes 512..16384 and the
 * transformer shapes of docs/cluster-format.md, per dtype. Writes at most cap
 * shapes; returns how many there are. Deterministic order. */
int wf_gpu_shapes(int quick, int cc_major, int cc_minor, wf_gpu_shape *out, int cap);
/* The collective message sizes, bytes (nccl-tests' sizes, doubling by 4). */
int wf_gpu_coll_sizes(int quick, double *out, int cap);

/* The CUDA devices visible to this process: WF_INVAL with one line naming
 * the CUDA error when there is none or no driver (or weft has no CUDA). */
wf_status wf_gpu_probe(int *ndevices);

/* Measures this process's GPU (device local_rank modulo the visible count):
 * matrix products, the device-to-device copy, the launch time, the memory a
 * process can allocate, and fills the provenance (date, device, libraries,
 * the job's layout). Not collective. */
wf_status wf_gpu_measure_device(const wf_gpu_opts *o, const wf_gpu_world *w, wf_cluster_measured *m);

/* A fresh NCCL id (rank 0 calls it; the caller broadcasts the bytes). Zeros
 * without NCCL. */
wf_status wf_gpu_comm_id(unsigned char id[WF_GPU_ID_BYTES]);

/* Collective over the job (every rank, after wf_gpu_measure_device): the
 * collectives of nccl-tests over message sizes, inside each node and, with
 * several nodes, over the whole job, each time averaged over the ranks; then
 * the device points are reduced over the ranks (the slowest time of each
 * product, copy and launch, the smallest memory), so every rank ends with
 * the same m. Nothing is measured with a single GPU, or without NCCL (then
 * m->nccl stays ""). */
wf_status wf_gpu_measure_links(const wf_gpu_opts *o, const wf_gpu_world *w, const unsigned char id[WF_GPU_ID_BYTES],
                               wf_cluster_measured *m);

/* The device model and links the points give, on top of `base` (the factors
 * not measured: overlap_slowdown, p2p_overhead_s, grad_bytes,
 * mem_reserved_bytes, vector_eff, and the links of levels no collective
 * measured). Depends only on the points; docs/cluster-format.md says how each
 * factor is fitted. */
wf_status wf_gpu_fit(const wf_cluster_measured *m, const wf_cluster *base, wf_cluster *out);

/* The piecewise-linear-in-log(FLOPs) efficiency curve through points
 * (flops[i], eff[i]): at most max_knots knots at quantiles of the distinct
 * FLOP counts, knot values by least squares of the relative error, clamped
 * to [1e-3, 1]; written to out[] sorted by min_flops descending (the cluster
 * format's order). Returns the number of knots, or a negative status. */
int wf_gpu_fit_eff_curve(const double *flops, const double *eff, int n, int max_knots, wf_eff_point *out);

/* Least-squares t = alpha + bytes / bw with relative weights (alpha >= 0). */
wf_status wf_gpu_fit_alpha_beta(const double *bytes, const double *t, int n, double *alpha_s, double *bw_bps);

/* The human tables: products, memory, collectives (nccl-tests' columns),
 * then the fitted factors. */
void wf_gpu_print(FILE *f, const wf_cluster_measured *m, const wf_cluster *fitted);

#ifdef __cplusplus
}
#endif
#endif
