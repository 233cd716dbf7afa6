/* weft gpu without CUDA: built when CMake did not find the CUDA toolkit (or
 * WEFT_CUDA=OFF). Every measuring call answers that weft has no CUDA; the
 * fit, the shape list and the tables (fit.c, shapes.c, print.c) are built
 * either way. */
#include "weft/gpu.h"

#include <string.h>

static wf_status no_cuda(void)
{
    return wf_errorf(WF_INVAL, "--gpu: weft was built without CUDA (configure with the CUDA toolkit "
                               "installed and -DWEFT_CUDA=ON)");
}

int wf_gpu_built(void)
{
    return 0;
}

int wf_gpu_built_nccl(void)
{
    return 0;
}

wf_status wf_gpu_probe(int *ndevices)
{
    *ndevices = 0;
    return no_cuda();
}

wf_status wf_gpu_measure_device(const wf_gpu_opts *o, const wf_gpu_world *w, wf_cluster_measured *m)
{
    return no_cuda();
}

wf_status wf_gpu_comm_id(unsigned char id[WF_GPU_ID_BYTES])
{
    memset(id, 0, WF_GPU_ID_BYTES);
    return no_cuda();
}

wf_status wf_gpu_measure_links(const wf_gpu_opts *o, const wf_gpu_world *w, const unsigned char id[WF_GPU_ID_BYTES],
                               wf_cluster_measured *m)
{
    return no_cuda();
}
