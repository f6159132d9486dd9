/*
 * device.c — KILN_CUDA memory and kernels (device.h): the real device
 * through cuda_launch.h, the emulated one (host memory) under
 * "cuda-emu", and a caching allocator in front of both.
 *
 * The cache mirrors runtime/alloc.c: size classes (powers of two from 256
 * bytes to 1 MiB, multiples of 2 MiB above), freed blocks kept per class
 * and handed out again, up to KILN_CUDA_CACHE_BYTES (default 1 GiB) and
 * MAX_CACHED blocks. Device memory cannot hold a free-list link, so the
 * cache is a small host-side table searched linearly (a device call costs
 * far more than the search). Thread-safe (one mutex).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_launch.h"
#include "device.h"
#include "rt_internal.h"

#define SMALL_MAX (INT64_C(1) << 20)
#define LARGE_STEP (INT64_C(2) << 20)
enum { MAX_CACHED = 256 };

/* --------------------------------------------------- the two devices */

static void real_release(void *p, int64_t bytes);
static void emu_release(void *p, int64_t bytes);

static cu_deviceptr dptr(const void *p) { return (cu_deviceptr)(uintptr_t)p; }

bool rt_device_is_real(const graph_buffer *b) { return b->free_fn == real_release; }

bool rt_device_next_is_real(void) { return !rt_backend_is_emu(); }

int rt_device_ready(char *err, size_t errlen) {
  int st = rt_backend_ready(err, errlen); /* KILN_BACKEND=cuda-emu counts from the first call */
  if (st != KILN_OK) return st;
  if (rt_backend_is_emu()) return KILN_OK;
  return rt_cuda_require(err, errlen);
}

/* A fresh block of cls bytes from the device the next buffer goes to. */
static int fresh_block(int64_t cls, bool real, void **out, char *err, size_t errlen) {
  if (!real) {
    *out = aligned_alloc(64, (size_t)cls);
    if (*out) return KILN_OK;
    snprintf(err, errlen, "out of (emulated) device memory allocating %lld bytes", (long long)cls);
    return KILN_ERR_OOM;
  }
  cu_deviceptr p = 0;
  int st = rt_cuda_buffer_alloc((size_t)cls, &p, err, errlen);
  *out = (void *)(uintptr_t)p;
  return st;
}

static void free_block(void *p, bool real) {
  if (real) rt_cuda_buffer_free(dptr(p));
  else free(p);
}

/* ------------------------------------------------------------- cache */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *p;
  int64_t cls;
  bool real;
} cache[MAX_CACHED];
static int n_cached;
static rt_device_stats stats;
static int64_t cache_limit = -1;

static int64_t class_bytes(int64_t bytes) {
  if (bytes > SMALL_MAX) return (bytes + LARGE_STEP - 1) / LARGE_STEP * LARGE_STEP;
  int64_t c = 256;
  while (c < bytes) c <<= 1;
  return c;
}

static int64_t limit(void) {
  if (cache_limit < 0) {
    const char *e = getenv("KILN_CUDA_CACHE_BYTES");
    cache_limit = e ? atoll(e) : (INT64_C(1) << 30);
  }
  return cache_limit;
}

/* Under lock: a cached block of class cls from that device, or NULL. */
static void *take_cached(int64_t cls, bool real) {
  for (int i = 0; i < n_cached; i++)
    if (cache[i].cls == cls && cache[i].real == real) {
      void *p = cache[i].p;
      cache[i] = cache[--n_cached];
      stats.cached_bytes -= cls;
      return p;
    }
  return NULL;
}

static void release(void *p, int64_t bytes, bool real) {
  int64_t cls = class_bytes(bytes);
  pthread_mutex_lock(&lock);
  stats.live_bytes -= cls;
  bool keep = n_cached < MAX_CACHED && stats.cached_bytes + cls <= limit();
  if (keep) {
    cache[n_cached].p = p;
    cache[n_cached].cls = cls;
    cache[n_cached++].real = real;
    stats.cached_bytes += cls;
  }
  pthread_mutex_unlock(&lock);
  if (!keep) free_block(p, real);
}

static void real_release(void *p, int64_t bytes) { release(p, bytes, true); }
static void emu_release(void *p, int64_t bytes) { release(p, bytes, false); }

void rt_device_trim(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_cached; i++) free_block(cache[i].p, cache[i].real);
  n_cached = 0;
  stats.cached_bytes = 0;
  pthread_mutex_unlock(&lock);
}

void rt_device_get_stats(rt_device_stats *out) {
  pthread_mutex_lock(&lock);
  *out = stats;
  pthread_mutex_unlock(&lock);
}

static void register_trim(void) { atexit(rt_device_trim); }

int rt_device_alloc(int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  *out = NULL;
  int st = rt_device_ready(err, errlen);
  if (st != KILN_OK) return st;
  pthread_once(&once, register_trim);
  bool real = rt_device_next_is_real();
  int64_t cls = class_bytes(bytes > 0 ? bytes : 1);
  pthread_mutex_lock(&lock);
  void *p = take_cached(cls, real);
  pthread_mutex_unlock(&lock);
  bool reused = p != NULL;
  if (!p && (st = fresh_block(cls, real, &p, err, errlen)) != KILN_OK) return st;
  pthread_mutex_lock(&lock);
  if (reused) stats.reuses++;
  else stats.allocs++;
  stats.live_bytes += cls;
  pthread_mutex_unlock(&lock);
  *out = graph_buffer_own(p, bytes, KILN_CUDA, real ? real_release : emu_release);
  if (!*out) {
    release(p, bytes > 0 ? bytes : 1, real);
    snprintf(err, errlen, "out of memory");
    return KILN_ERR_OOM;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------- copies */

int rt_device_upload(graph_buffer *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  if (bytes <= 0) return KILN_OK;
  if (!rt_device_is_real(dst)) {
    memcpy(dst->data, src, (size_t)bytes);
    return KILN_OK;
  }
  return rt_cuda_copy_to_device(dptr(dst->data), src, (size_t)bytes, err, errlen);
}

int rt_device_download(void *dst, const graph_buffer *src, int64_t offset, int64_t bytes, char *err, size_t errlen) {
  if (bytes <= 0) return KILN_OK;
  if (!rt_device_is_real(src)) {
    memcpy(dst, (const char *)src->data + offset, (size_t)bytes);
    return KILN_OK;
  }
  return rt_cuda_copy_to_host(dst, dptr(src->data) + (cu_deviceptr)offset, (size_t)bytes, err, errlen);
}

static int host_alloc(int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  *out = graph_buffer_alloc(bytes);
  if (*out) return KILN_OK;
  snprintf(err, errlen, "out of memory allocating %lld bytes", (long long)bytes);
  return KILN_ERR_OOM;
}

/* Device to device (copy-on-write of in-place writes): cuMemcpyDtoD on
 * the real device, memcpy on the emulated one; through the host only
 * between the two (a buffer left from before a backend switch). */
int rt_buffer_copy_to(const graph_buffer *b, kiln_device device, graph_buffer **out, char *err, size_t errlen) {
  int st = device == KILN_CUDA ? rt_device_alloc(b->bytes, out, err, errlen) : host_alloc(b->bytes, out, err, errlen);
  if (st != KILN_OK) return st;
  if (b->device == KILN_CPU) return rt_device_upload(*out, b->data, b->bytes, err, errlen);
  if (device == KILN_CPU) return rt_device_download((*out)->data, b, 0, b->bytes, err, errlen);
  if (b->bytes <= 0) return KILN_OK;
  bool real = rt_device_is_real(b);
  if (real && rt_device_is_real(*out))
    return rt_cuda_copy_on_device(dptr((*out)->data), dptr(b->data), (size_t)b->bytes, err, errlen);
  if (!real && !rt_device_is_real(*out)) {
    memcpy((*out)->data, b->data, (size_t)b->bytes);
    return KILN_OK;
  }
  graph_buffer *host = NULL;
  st = host_alloc(b->bytes, &host, err, errlen);
  if (st == KILN_OK) st = rt_device_download(host->data, b, 0, b->bytes, err, errlen);
  if (st == KILN_OK) st = rt_device_upload(*out, host->data, b->bytes, err, errlen);
  graph_buffer_release(host);
  return st;
}

/* ------------------------------------------------------------ kernels */

int rt_device_kernel_load(const kir_kernel *k, void **handle, char *err, size_t errlen) {
  rt_cuda_kernel *ck = malloc(sizeof *ck);
  if (!ck) {
    snprintf(err, errlen, "out of memory");
    return KILN_ERR_OOM;
  }
  int st = rt_cuda_kernel_load(k, ck, err, errlen);
  static _Atomic bool told;
  if (st == KILN_OK && strncmp(ck->arch, "compute_", 8) == 0 && rt_debug_level() >= 1 && !told) {
    told = true; /* once: every kernel takes the same target */
    fprintf(stderr, "kiln: NVRTC does not know this GPU's sm_XX: kernels are PTX for %s, JIT-compiled by the driver\n",
            ck->arch);
  }
  if (st != KILN_OK) {
    rt_cuda_kernel_unload(ck);
    free(ck);
    ck = NULL;
  }
  *handle = ck;
  return st;
}

void rt_device_kernel_free(void *handle) {
  if (!handle) return;
  rt_cuda_kernel_unload(handle);
  free(handle);
}

int rt_device_launch(void *handle, const graph_buffer *const *bufs, int n, int64_t start, int64_t end, int64_t *ns,
                     char *err, size_t errlen) {
  cu_deviceptr ptrs[RT_CUDA_MAX_PARAMS];
  if (n > RT_CUDA_MAX_PARAMS) {
    snprintf(err, errlen, "a kernel of %d buffers (at most %d)", n, RT_CUDA_MAX_PARAMS);
    return KILN_ERR_UNSUPPORTED;
  }
  for (int i = 0; i < n; i++) ptrs[i] = dptr(bufs[i]->data);
  float ms = 0;
  int st = rt_cuda_kernel_launch(handle, ptrs, n, start, end, &ms, err, errlen);
  *ns = (int64_t)((double)ms * 1e6);
  return st;
}
