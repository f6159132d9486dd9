/*
 * cuda_blas.c — cuBLAS loaded with dlopen (cuda_blas.h), so Kiln neither
 * links against it nor needs it: without it, matrix products of CUDA
 * tensors are generated kernels (ops/linalg.c).
 *
 * Loading: libcublas.so.13, libcublas.so.12, libcublas.so — each through
 * the dynamic linker's path, then under /usr/local/cuda/lib64 and
 * /usr/local/cuda/targets/x86_64-linux/lib (as codegen_cuda/cuda_nvrtc.c does).
 * $KILN_CUBLAS_LIB, when set, is the only library tried. A missing
 * symbol, a failing cublasCreate_v2 or cublasSetStream_v2 means "no
 * cuBLAS" (the reason kept for KILN_DEBUG and tests), never an error.
 *
 * One handle, created on device 0's primary context with Kiln's stream
 * (cuda_launch.c) and kept until rt_cuda_blas_shutdown; calls through it are
 * serialized by a mutex (a handle is not meant for concurrent use).
 * Signatures are from NVIDIA's documented cuBLAS API (cublasStatus_t an
 * int enum, CUBLAS_STATUS_SUCCESS = 0; cublasOperation_t N = 0, T = 1;
 * cudaStream_t the driver's CUstream; alpha/beta host pointers, the
 * default pointer mode).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_blas.h"
#include "cuda_dl.h"
#include "cuda_launch.h"

typedef int cublas_status;
typedef struct cublas_ctx_s *cublas_handle;

typedef struct cublas_api {
  cublas_status (*create)(cublas_handle *);
  cublas_status (*destroy)(cublas_handle);
  cublas_status (*set_stream)(cublas_handle, cu_stream);
  cublas_status (*sgemm)(cublas_handle, int, int, int, int, int, const float *, const float *, int, const float *,
                         int, const float *, float *, int);
  cublas_status (*dgemm)(cublas_handle, int, int, int, int, int, const double *, const double *, int, const double *,
                         int, const double *, double *, int);
  cublas_status (*sgemm_batched)(cublas_handle, int, int, int, int, int, const float *, const float *, int, long long,
                                 const float *, int, long long, const float *, float *, int, long long, int);
  cublas_status (*dgemm_batched)(cublas_handle, int, int, int, int, int, const double *, const double *, int,
                                 long long, const double *, int, long long, const double *, double *, int, long long,
                                 int);
} cublas_api;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool tried, ok;
  cublas_api api;
  cublas_handle handle;
  cu_stream stream;
  char why[1024];
} g;

static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
static const char *const toolkit_dirs[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", NULL};

static const char *status_name(cublas_status s) {
  switch (s) {
  case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
  case 7: return "CUBLAS_STATUS_INVALID_VALUE";
  case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "CUBLAS_STATUS_(unknown)";
  }
}

static bool resolve(void *h, const char *lib) {
  static const cuda_dl_sym syms[] = {
      {"cublasCreate_v2", offsetof(cublas_api, create)},
      {"cublasDestroy_v2", offsetof(cublas_api, destroy)},
      {"cublasSetStream_v2", offsetof(cublas_api, set_stream)},
      {"cublasSgemm_v2", offsetof(cublas_api, sgemm)},
      {"cublasDgemm_v2", offsetof(cublas_api, dgemm)},
      {"cublasSgemmStridedBatched", offsetof(cublas_api, sgemm_batched)},
      {"cublasDgemmStridedBatched", offsetof(cublas_api, dgemm_batched)},
  };
  const char *missing = cuda_dl_resolve(h, syms, sizeof syms / sizeof syms[0], &g.api);
  if (missing) snprintf(g.why, sizeof g.why, "%s has no symbol %s", lib, missing);
  return missing == NULL;
}

/* One name, bare and under each toolkit folder; appends to tried. */
static void *try_open(const char *name, char *tried, size_t len) {
  size_t used = strlen(tried);
  snprintf(tried + used, len - used, "%s%s", used ? ", " : "", name);
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  for (int d = 0; !h && !strchr(name, '/') && toolkit_dirs[d]; d++) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", toolkit_dirs[d], name);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  return h;
}

/* Under lock: the handle on Kiln's stream. */
static bool create_handle(void) {
  char err[1024];
  if (rt_cuda_stream(&g.stream, err, sizeof err) != KILN_OK) {
    snprintf(g.why, sizeof g.why, "%s", err);
    return false;
  }
  cublas_status s = g.api.create(&g.handle);
  if (s != 0) {
    g.handle = NULL;
    snprintf(g.why, sizeof g.why, "cublasCreate_v2 failed: %s (%d)", status_name(s), s);
    return false;
  }
  s = g.api.set_stream(g.handle, g.stream);
  if (s != 0) {
    snprintf(g.why, sizeof g.why, "cublasSetStream_v2 failed: %s (%d)", status_name(s), s);
    g.api.destroy(g.handle);
    g.handle = NULL;
    return false;
  }
  return true;
}

/* Under lock. The library stays mapped (cuBLAS holds driver state). */
static void load(void) {
  if (g.tried) return;
  g.tried = true;
  const char *env = getenv("KILN_CUBLAS_LIB");
  const char *only[] = {env, NULL};
  const char *const *list = env && *env ? only : names;
  char tried[700] = "";
  void *h = NULL;
  const char *lib = NULL;
  for (int i = 0; !h && list[i]; i++) h = try_open(lib = list[i], tried, sizeof tried);
  if (!h) {
    const char *dl = dlerror();
    snprintf(g.why, sizeof g.why, "libcublas not found (tried %s; set KILN_CUBLAS_LIB)%s%s", tried,
             dl ? "; last error: " : "", dl ? dl : "");
    return;
  }
  g.ok = resolve(h, lib) && create_handle();
}

bool rt_cuda_blas_available(char *why, size_t len) {
  pthread_mutex_lock(&lock);
  load();
  bool ok = g.ok;
  if (!ok && why && len) snprintf(why, len, "%s", g.why);
  pthread_mutex_unlock(&lock);
  return ok;
}

/* Under lock: the call cuBLAS names for g->f64 and g->batch. */
static cublas_status call(const rt_cuda_gemm *c) {
  int ta = c->trans_a ? 1 : 0, tb = c->trans_b ? 1 : 0; /* CUBLAS_OP_T : CUBLAS_OP_N */
  static const float one_f = 1, zero_f = 0;
  static const double one_d = 1, zero_d = 0;
  void *a = (void *)(uintptr_t)c->a, *b = (void *)(uintptr_t)c->b, *out = (void *)(uintptr_t)c->c;
  if (c->f64 && c->batch > 1)
    return g.api.dgemm_batched(g.handle, ta, tb, c->m, c->n, c->k, &one_d, a, c->lda, c->stride_a, b, c->ldb,
                               c->stride_b, &zero_d, out, c->ldc, c->stride_c, c->batch);
  if (c->batch > 1)
    return g.api.sgemm_batched(g.handle, ta, tb, c->m, c->n, c->k, &one_f, a, c->lda, c->stride_a, b, c->ldb,
                               c->stride_b, &zero_f, out, c->ldc, c->stride_c, c->batch);
  if (c->f64) return g.api.dgemm(g.handle, ta, tb, c->m, c->n, c->k, &one_d, a, c->lda, b, c->ldb, &zero_d, out, c->ldc);
  return g.api.sgemm(g.handle, ta, tb, c->m, c->n, c->k, &one_f, a, c->lda, b, c->ldb, &zero_f, out, c->ldc);
}

int rt_cuda_blas_gemm(const rt_cuda_gemm *c, char *err, size_t errlen) {
  char why[1024];
  if (!rt_cuda_blas_available(why, sizeof why)) {
    snprintf(err, errlen, "cuBLAS not available: %s", why);
    return KILN_ERR_DEVICE;
  }
  pthread_mutex_lock(&lock);
  cublas_status s = g.ok ? call(c) : 1;
  cu_stream stream = g.stream;
  pthread_mutex_unlock(&lock);
  if (s != 0) {
    snprintf(err, errlen, "cublas%cgemm%s: %s (%d)", c->f64 ? 'D' : 'S', c->batch > 1 ? "StridedBatched" : "_v2",
             status_name(s), s);
    return KILN_ERR_DEVICE;
  }
  return rt_cuda_sync(stream, err, errlen);
}

void rt_cuda_blas_shutdown(void) {
  pthread_mutex_lock(&lock);
  if (g.handle) g.api.destroy(g.handle);
  memset(&g, 0, sizeof g);
  pthread_mutex_unlock(&lock);
}
