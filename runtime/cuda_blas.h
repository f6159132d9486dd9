/*
 * cuda_blas.h — cuBLAS (libcublas, loaded with dlopen like libcuda and
 * libnvrtc) for matrix products of KILN_CUDA tensors on the real device
 * (cuda_blas.c). blas.c maps Kiln's row-major views onto it. Internal to
 * runtime/ (and white-box tests).
 */
#ifndef KILN_RT_CUDA_BLAS_H
#define KILN_RT_CUDA_BLAS_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda_driver.h"

/** True when cuBLAS can run products on device 0: libcublas loads
 *  (libcublas.so.13, .so.12, .so, each also under the toolkit's library
 *  folders; only $KILN_CUBLAS_LIB when set), every entry point resolves,
 *  and cublasCreate and cublasSetStream (Kiln's one stream) succeed.
 *  Probed once (thread-safe); on false, why (if non-NULL) says why. Never
 *  an error: the caller falls back to a generated kernel. */
bool rt_cuda_blas_available(char *why, size_t len);

/** One column-major product, cuBLAS's convention, on device pointers:
 *    C[m, n] = op(A)[m, k] · op(B)[k, n]    (alpha 1, beta 0)
 *  op(X) is X or X^T (trans_x); lda/ldb/ldc are leading dimensions in
 *  elements. batch > 1 runs the strided-batched form: matrix i of X starts
 *  stride_x elements after matrix i-1 (0 repeats it). Waits for the
 *  stream. KILN_ERR_DEVICE with "cublasSgemm_v2: CUBLAS_STATUS_X" on
 *  failure, or when rt_cuda_blas_available is false. */
typedef struct rt_cuda_gemm {
  bool f64, trans_a, trans_b;
  int m, n, k, lda, ldb, ldc, batch;
  cu_deviceptr a, b, c;
  long long stride_a, stride_b, stride_c;
} rt_cuda_gemm;
int rt_cuda_blas_gemm(const rt_cuda_gemm *g, char *err, size_t errlen);

/** Destroys the handle and forgets the probe (the library stays mapped);
 *  the next call probes again and reads $KILN_CUBLAS_LIB again. */
void rt_cuda_blas_shutdown(void);

#endif /* KILN_RT_CUDA_BLAS_H */
