/*
 * fake_libcublas.c — a stand-in cuBLAS for tests without a GPU (ctest
 * `cuda_runtime_fake`: KILN_CUBLAS_LIB points here, KILN_CUDA_LIB at
 * fake_libcuda.c, whose device pointers are host pointers). It exports
 * the entry points Kiln resolves with cuBLAS's signatures; the GEMMs are
 * a naive column-major product honouring transa/transb, m/n/k, lda/ldb/ldc
 * (checked against cuBLAS's rules: INVALID_VALUE otherwise), alpha, beta
 * and the batch strides — so wrong arguments give wrong numbers.
 * A GEMM before cublasSetStream_v2 fails (Kiln must use its one stream).
 * fake_cublas_calls (for tests, through dlsym) counts the calls.
 */
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

typedef int cublasStatus_t;
enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, EXECUTION_FAILED = 13 };

static int handle_token;
static void *stream;
static int n_creates, n_gemms, n_batched;

EXPORT void fake_cublas_calls(int *creates, int *gemms, int *batched) {
  *creates = n_creates;
  *gemms = n_gemms;
  *batched = n_batched;
}

EXPORT cublasStatus_t cublasCreate_v2(void **h) {
  n_creates++;
  stream = NULL;
  *h = &handle_token;
  return OK;
}
EXPORT cublasStatus_t cublasDestroy_v2(void *h) { return h == &handle_token ? OK : NOT_INITIALIZED; }
EXPORT cublasStatus_t cublasSetStream_v2(void *h, void *s) {
  if (h != &handle_token) return NOT_INITIALIZED;
  stream = s;
  return OK;
}

/* Element (i, j) of op(X), X column-major with leading dimension ld. */
static double at(const void *x, int f64, int trans, int ld, long long i, long long j) {
  long long idx = trans ? j + i * ld : i + j * ld;
  return f64 ? ((const double *)x)[idx] : ((const float *)x)[idx];
}

/* C = alpha op(A) op(B) + beta C for `batch` matrices. */
static cublasStatus_t gemm(void *h, int f64, int ta, int tb, int m, int n, int k, double alpha, const void *a, int lda,
                           long long sa, const void *b, int ldb, long long sb, double beta, void *c, int ldc,
                           long long sc, int batch) {
  if (h != &handle_token) return NOT_INITIALIZED;
  if (!stream) return EXECUTION_FAILED;
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1) || m < 0 || n < 0 || k < 0 || batch < 0) return INVALID_VALUE;
  if (lda < (ta ? k : m) || lda < 1 || ldb < (tb ? n : k) || ldb < 1 || ldc < m || ldc < 1) return INVALID_VALUE;
  size_t esz = f64 ? sizeof(double) : sizeof(float);
  for (int p = 0; p < batch; p++) {
    const char *pa = (const char *)a + (size_t)(p * sa) * esz, *pb = (const char *)b + (size_t)(p * sb) * esz;
    char *pc = (char *)c + (size_t)(p * sc) * esz;
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double acc = 0;
        for (int l = 0; l < k; l++) acc += at(pa, f64, ta, lda, i, l) * at(pb, f64, tb, ldb, l, j);
        long long idx = i + (long long)j * ldc;
        double old = beta == 0 ? 0 : at(pc, f64, 0, ldc, i, j);
        if (f64) ((double *)pc)[idx] = alpha * acc + beta * old;
        else ((float *)pc)[idx] = (float)(alpha * acc + beta * old);
      }
  }
  return OK;
}

EXPORT cublasStatus_t cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *a,
                                     int lda, const float *b, int ldb, const float *beta, float *c, int ldc) {
  n_gemms++;
  return gemm(h, 0, ta, tb, m, n, k, *alpha, a, lda, 0, b, ldb, 0, *beta, c, ldc, 0, 1);
}
EXPORT cublasStatus_t cublasDgemm_v2(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
                                     const double *a, int lda, const double *b, int ldb, const double *beta, double *c,
                                     int ldc) {
  n_gemms++;
  return gemm(h, 1, ta, tb, m, n, k, *alpha, a, lda, 0, b, ldb, 0, *beta, c, ldc, 0, 1);
}
EXPORT cublasStatus_t cublasSgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                                                const float *a, int lda, long long sa, const float *b, int ldb,
                                                long long sb, const float *beta, float *c, int ldc, long long sc,
                                                int batch) {
  n_batched++;
  return gemm(h, 0, ta, tb, m, n, k, *alpha, a, lda, sa, b, ldb, sb, *beta, c, ldc, sc, batch);
}
EXPORT cublasStatus_t cublasDgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
                                                const double *a, int lda, long long sa, const double *b, int ldb,
                                                long long sb, const double *beta, double *c, int ldc, long long sc,
                                                int batch) {
  n_batched++;
  return gemm(h, 1, ta, tb, m, n, k, *alpha, a, lda, sa, b, ldb, sb, *beta, c, ldc, sc, batch);
}
