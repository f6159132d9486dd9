/*
 * fake_libcuda.c — a stand-in CUDA driver for tests on machines without a
 * GPU (test `cuda_runtime_fake`: KILN_CUDA_LIB points here). It exports
 * the entry points Kiln resolves, with the driver API's signatures, on
 * host memory: one device "Fake GPU" of compute capability 8.0 (or what
 * $KILN_FAKE_CUDA_CC says when the probe runs: "99" is 9.9, "150" 15.0 —
 * a GPU newer than NVRTC), device pointers are malloc'ed host pointers,
 * copies are memcpy, events read the clock. cuModuleLoadData accepts an
 * ELF image (what NVRTC gives for sm_XX) or PTX text (".version" and
 * ".target" lines: compute_XX) and counts which it got
 * (fake_cuda_module_loads); cuModuleGetFunction accepts only the
 * kernel's symbol.
 *
 * cuLaunchKernel cannot run GPU code; it checks the launch Kiln builds
 * against the printer's calling convention and then computes the one
 * kernel the tests launch, out[i] = a[i] * 2 + 1 over F32 for i in
 * [start, end) — reading the buffers and bounds through kernelParams
 * exactly as the device would — so a wrong argument layout gives wrong
 * numbers. It also requires grid × block × 4 to cover the range at most
 * once per grid-stride step (blocks of 256 threads, each taking 4 indices
 * a step: that kernel is in the vector form, GRID_STRIDE_VEC).
 * Any other kernel (Kiln's realize path passes out, args, fargs, inputs,
 * then start, end) puts device pointers where that kernel has its
 * bounds, so the fake keeps the size of every allocation and rejects a
 * launch whose out and a do not hold [start, end): it never writes
 * outside the memory it handed out, whatever the heap layout.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
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
/* Compute capability as major * 10 + minor: $KILN_FAKE_CUDA_CC or 80. */
static int fake_cc(void) {
  const char *e = getenv("KILN_FAKE_CUDA_CC");
  int cc = e ? atoi(e) : 0;
  return cc >= 10 ? cc : 80;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
  if (d != 0) return INVALID_VALUE;
  if (attr == 75) return *v = fake_cc() / 10, OK; /* compute capability major */
  if (attr == 76) return *v = fake_cc() % 10, OK; /* minor */
  return INVALID_VALUE;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int d) {
  if (d != 0) return INVALID_VALUE;
  *ctx = &context_token;
  return OK;
}
EXPORT CUresult cuCtxSetCurrent(void *ctx) { return ctx == &context_token ? OK : INVALID_VALUE; }

static int elf_loads, ptx_loads;
static char ptx_target[32]; /* the last PTX's ".target" operand */

/* For tests (dlsym): how many ELF and PTX images cuModuleLoadData took,
 * and the last PTX's target ("sm_90"). */
EXPORT void fake_cuda_module_loads(int *elf, int *ptx, const char **target) {
  *elf = elf_loads;
  *ptx = ptx_loads;
  *target = ptx_target;
}

/* PTX text: a ".version" line, then ".target <arch>"; false otherwise. */
static int read_ptx(const char *text) {
  const char *v = strstr(text, ".version"), *t = strstr(text, ".target");
  if (!v || !t || t < v) return 0;
  t += strlen(".target");
  while (*t == ' ' || *t == '\t') t++;
  size_t n = strcspn(t, " \t\n,");
  if (n == 0 || n >= sizeof ptx_target) return 0;
  memcpy(ptx_target, t, n);
  ptx_target[n] = 0;
  return 1;
}

EXPORT CUresult cuModuleLoadData(void **mod, const void *image) {
  if (memcmp(image, "\177ELF", 4) == 0) elf_loads++;
  else if (read_ptx(image)) ptx_loads++;
  else return INVALID_IMAGE;
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

/* The live allocations, for the launch's bounds check. */
typedef struct fake_alloc {
  unsigned long long p;
  size_t bytes;
} fake_alloc;
static fake_alloc *allocs;
static size_t n_allocs, cap_allocs;
static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether p[start, end) of floats lies inside one live allocation. */
static int holds(unsigned long long p, long long start, long long end) {
  if (start < 0 || end < start) return 0;
  int ok = 0;
  pthread_mutex_lock(&allocs_lock);
  for (size_t i = 0; i < n_allocs && !ok; i++)
    ok = p >= allocs[i].p && p - allocs[i].p <= allocs[i].bytes &&
         (unsigned long long)end <= (allocs[i].bytes - (p - allocs[i].p)) / sizeof(float);
  pthread_mutex_unlock(&allocs_lock);
  return ok;
}

EXPORT CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
  pthread_mutex_lock(&allocs_lock);
  void *m = NULL;
  if (n_allocs == cap_allocs) {
    size_t cap = cap_allocs ? cap_allocs * 2 : 64;
    fake_alloc *a = realloc(allocs, cap * sizeof *a);
    if (a) allocs = a, cap_allocs = cap;
  }
  if (n_allocs < cap_allocs) m = malloc(bytes);
  if (m) allocs[n_allocs++] = (fake_alloc){(unsigned long long)(uintptr_t)m, bytes};
  pthread_mutex_unlock(&allocs_lock);
  if (!m) return 2;
  *p = (unsigned long long)(uintptr_t)m;
  return OK;
}
EXPORT CUresult cuMemFree_v2(unsigned long long p) {
  pthread_mutex_lock(&allocs_lock);
  for (size_t i = 0; i < n_allocs; i++)
    if (allocs[i].p == p) {
      allocs[i] = allocs[--n_allocs];
      break;
    }
  pthread_mutex_unlock(&allocs_lock);
  free((void *)(uintptr_t)p);
  return OK;
}
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
  if (!holds((uintptr_t)out, start, end) || !holds((uintptr_t)a, start, end))
    return INVALID_VALUE; /* not its kernel's arguments: bounds that are not within out and a */
  unsigned long long n = (unsigned long long)(end - start);
  if (bx != 256 || 4ull * gx * bx < n || 4ull * (gx - 1ull) * bx >= n)
    return INVALID_VALUE; /* the geometry Kiln promises for a range that fits one grid */
  for (long long i = start; i < end; i++) out[i] = a[i] * 2 + 1;
  return OK;
}
