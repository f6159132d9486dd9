/*
 * fake_libcuda.c — a stand-in CUDA driver for tests on machines without a
 * GPU (test `cuda_runtime_fake`: KILN_CUDA_LIB points here). It exports
 * the entry points Kiln resolves, with the driver API's signatures, on
 * host memory: one device "Fake GPU" of compute capability 8.0, device
 * pointers are malloc'ed host pointers, copies are memcpy, events read the
 * clock. cuModuleLoadData accepts only an ELF image (what NVRTC gives for
 * sm_XX) and cuModuleGetFunction only the symbol it finds in it.
 *
 * cuLaunchKernel cannot run GPU code; it checks the launch Kiln builds
 * against the printer's calling convention and then computes the one
 * kernel the tests launch, out[i] = a[i] * 2 + 1 over F32 for i in
 * [start, end) — reading the buffers and bounds through kernelParams
 * exactly as the device would — so a wrong argument layout gives wrong
 * numbers. It also requires grid × block to cover the range at most once
 * per grid-stride step (blocks of 256 threads).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;

#define EXPORT __attribute__((visibility("default")))

enum { OK = 0, INVALID_VALUE = 1, INVALID_IMAGE = 200, NOT_FOUND = 500 };

static int module_token, function_token, stream_token, context_token;
static double event_ms[8];
static int n_events;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
  *s = r == OK ? "CUDA_SUCCESS" : r == INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_FAKE";
  return OK;
}
EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == OK ? "no error" : "fake driver error";
  return OK;
}
EXPORT CUresult cuInit(unsigned flags) { return flags == 0 ? OK : INVALID_VALUE; }
EXPORT CUresult cuDriverGetVersion(int *v) { return *v = 13000, OK; }
EXPORT CUresult cuDeviceGetCount(int *n) { return *n = 1, OK; }
EXPORT CUresult cuDeviceGet(int *d, int ordinal) { return ordinal == 0 ? (*d = 0, OK) : INVALID_VALUE; }
EXPORT CUresult cuDeviceGetName(char *name, int len, int d) {
  if (d != 0 || len < 9) return INVALID_VALUE;
  strcpy(name, "Fake GPU");
  return OK;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
  if (d != 0) return INVALID_VALUE;
  if (attr == 75) return *v = 8, OK; /* compute capability major */
  if (attr == 76) return *v = 0, OK; /* minor */
  return INVALID_VALUE;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int d) {
  if (d != 0) return INVALID_VALUE;
  *ctx = &context_token;
  return OK;
}
EXPORT CUresult cuCtxSetCurrent(void *ctx) { return ctx == &context_token ? OK : INVALID_VALUE; }

EXPORT CUresult cuModuleLoadData(void **mod, const void *image) {
  if (memcmp(image, "\177ELF", 4) != 0) return INVALID_IMAGE;
  *mod = &module_token;
  return OK;
}
EXPORT CUresult cuModuleUnload(void *mod) { return mod == &module_token ? OK : INVALID_VALUE; }
EXPORT CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
  if (mod != &module_token) return INVALID_VALUE;
  if (strcmp(name, "kiln_kernel") != 0) return NOT_FOUND;
  *fn = &function_token;
  return OK;
}

EXPORT CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
  void *m = malloc(bytes);
  if (!m) return 2;
  *p = (unsigned long long)(uintptr_t)m;
  return OK;
}
EXPORT CUresult cuMemFree_v2(unsigned long long p) { return free((void *)(uintptr_t)p), OK; }
EXPORT CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n) {
  return memcpy((void *)(uintptr_t)dst, src, n), OK;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n) {
  return memcpy(dst, (const void *)(uintptr_t)src, n), OK;
}
EXPORT CUresult cuMemcpyDtoD_v2(unsigned long long dst, unsigned long long src, size_t n) {
  return memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n), OK;
}
EXPORT CUresult cuStreamCreate(void **s, unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  *s = &stream_token;
  return OK;
}
EXPORT CUresult cuStreamSynchronize(void *s) { return s == &stream_token ? OK : INVALID_VALUE; }
EXPORT CUresult cuEventCreate(void **e, unsigned flags) {
  if (n_events == 8 || flags != 0) return INVALID_VALUE;
  *e = &event_ms[n_events++];
  return OK;
}
EXPORT CUresult cuEventRecord(void *e, void *s) {
  if (s != &stream_token) return INVALID_VALUE;
  *(double *)e = now_ms();
  return OK;
}
EXPORT CUresult cuEventSynchronize(void *e) { return e ? OK : INVALID_VALUE; }
EXPORT CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
  *ms = (float)(*(double *)b - *(double *)a);
  return OK;
}

EXPORT CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, void *stream, void **params, void **extra) {
  if (fn != &function_token || stream != &stream_token || extra || shared || gy != 1 || gz != 1 || by != 1 || bz != 1)
    return INVALID_VALUE;
  float *out = (float *)(uintptr_t) * (unsigned long long *)params[0];
  const float *a = (const float *)(uintptr_t) * (unsigned long long *)params[1];
  long long start = *(long long *)params[2], end = *(long long *)params[3];
  unsigned long long n = (unsigned long long)(end - start);
  if (bx != 256 || (unsigned long long)gx * bx < n || (gx - 1ull) * bx >= n)
    return INVALID_VALUE; /* the geometry Kiln promises for a range that fits one grid */
  for (long long i = start; i < end; i++) out[i] = a[i] * 2 + 1;
  return OK;
}
