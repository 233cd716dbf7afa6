/* The CBLAS the runtime calls: OpenBLAS's cblas.h, or BLIS's (blis.h carries
 * its CBLAS layer) when the build chose BLIS (cmake -DWEFT_BLAS=blis, which
 * defines WF_BLAS_BLIS). Internal to src/kernels. */
#ifndef WF_RUNTIME_BLAS_IMPL_H
#define WF_RUNTIME_BLAS_IMPL_H

#if defined(WF_BLAS_BLIS)
#include <blis.h>
#else
#include <cblas.h>
#endif

#endif
