/* weft kernels: the fp32 CPU kernels on BLAS (fast path and naive reference),
 * with no MPI. The kernels themselves are internal (src/kernels/
 * kernels-impl.h, used by the runtime's executor); this header is the BLAS
 * library's public face: which library and kernels run, and its threads. */
#ifndef WEFT_KERNELS_H
#define WEFT_KERNELS_H

#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads of the BLAS library (OpenBLAS); WF_NOTFOUND when it cannot be told. */
wf_status wf_runtime_set_threads(int n);
/* The BLAS in use, in one line: library, version and build, and the kernels
 * it runs on this CPU ("OpenBLAS 0.3.21 ... DYNAMIC_ARCH ..., kernels
 * Cooperlake"; BLIS: its version and sub-configuration) (static string). */
const char *wf_runtime_blas_describe(void);
/* NULL, or a one-line hint when the BLAS runs kernels narrower than this
 * CPU's vector units (static string). */
const char *wf_runtime_blas_hint(void);
/* Start-up of a program that runs GEMMs (weft's main calls it first, before
 * MPI_Init): when OPENBLAS_CORETYPE is unset and the loaded OpenBLAS runs
 * kernels narrower than the CPU's units (it does not know the CPU model: cpuid
 * shows AVX-512 F/BW/VL/DQ or AVX2+FMA), sets OPENBLAS_CORETYPE to SkylakeX or
 * Haswell and re-executes /proc/self/exe with the same arguments, so that the
 * library initializes with the right kernels. Returns only when nothing is to
 * be done or the exec failed (the variable is then unset again). A variable
 * the user set is left alone (wf_runtime_blas_hint then says so). */
void wf_runtime_blas_fast_kernels(char **argv);

#ifdef __cplusplus
}
#endif

#endif
