/*
 * device.c — KILN_CUDA buffers (device.h): whether they can be made now,
 * a caching allocator in front of the device backends' memory (the real
 * device's cuMemAlloc, the emulated device's host blocks: backend_cuda.c,
 * backend_emu.c), and copies between any two memories through the
 * backends that hold them (backend.h).
 *
 * The cache mirrors runtime/alloc.c: size classes (powers of two from 256
 * bytes to 1 MiB, multiples of 2 MiB above), freed blocks kept per class
 * and memory and handed out again, up to KILN_CUDA_CACHE_BYTES (default
 * 1 GiB) and MAX_CACHED blocks. Device memory cannot hold a free-list
 * link, so the cache is a small host-side table searched linearly (a
 * device call costs far more than the search). Thread-safe (one mutex).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "device.h"
#include "rt_internal.h"

#define SMALL_MAX (INT64_C(1) << 20)
#define LARGE_STEP (INT64_C(2) << 20)
enum { MAX_CACHED = 256 };

/* KILN_OK when KILN_CUDA buffers can be made now: the selected backend's
 * own memory was probed when it was selected; another one (the real
 * device while "llvm" is selected) is probed now. */
int rt_device_ready(char *err, size_t errlen) {
  int st = rt_backend_ready(err, errlen); /* KILN_BACKEND=cuda-emu counts from the first call */
  if (st != KILN_OK) return st;
  const rt_backend *b = rt_backend_of(KILN_CUDA);
  return b == rt_backend_selected() ? KILN_OK : b->probe(err, errlen);
}

/* ------------------------------------------------------------- cache */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *p;
  int64_t cls;
  const rt_device_blocks *m;
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

/* Under lock: a cached block of class cls from memory m, or NULL. */
static void *take_cached(int64_t cls, const rt_device_blocks *m) {
  for (int i = 0; i < n_cached; i++)
    if (cache[i].cls == cls && cache[i].m == m) {
      void *p = cache[i].p;
      cache[i] = cache[--n_cached];
      stats.cached_bytes -= cls;
      return p;
    }
  return NULL;
}

void rt_device_cache_release(const rt_device_blocks *m, void *p, int64_t bytes) {
  int64_t cls = class_bytes(bytes);
  pthread_mutex_lock(&lock);
  stats.live_bytes -= cls;
  bool keep = n_cached < MAX_CACHED && stats.cached_bytes + cls <= limit();
  if (keep) {
    cache[n_cached].p = p;
    cache[n_cached].cls = cls;
    cache[n_cached++].m = m;
    stats.cached_bytes += cls;
  }
  pthread_mutex_unlock(&lock);
  if (!keep) m->free(p);
}

void rt_device_trim(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_cached; i++) cache[i].m->free(cache[i].p);
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

int rt_device_cache_alloc(const rt_device_blocks *m, int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  *out = NULL;
  pthread_once(&once, register_trim);
  int64_t cls = class_bytes(bytes > 0 ? bytes : 1);
  pthread_mutex_lock(&lock);
  void *p = take_cached(cls, m);
  pthread_mutex_unlock(&lock);
  bool reused = p != NULL;
  int st = KILN_OK;
  if (!p && (st = m->alloc(cls, &p, err, errlen)) != KILN_OK) return st;
  pthread_mutex_lock(&lock);
  if (reused) stats.reuses++;
  else stats.allocs++;
  stats.live_bytes += cls;
  pthread_mutex_unlock(&lock);
  *out = graph_buffer_own(p, bytes, KILN_CUDA, m->release);
  if (!*out) {
    rt_device_cache_release(m, p, bytes > 0 ? bytes : 1);
    snprintf(err, errlen, "out of memory");
    return KILN_ERR_OOM;
  }
  return KILN_OK;
}

/* ------------------------------------------------- buffers and copies */

int rt_buffer_alloc(kiln_device device, int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  *out = NULL;
  int st = device == KILN_CUDA ? rt_device_ready(err, errlen) : KILN_OK;
  return st == KILN_OK ? rt_backend_of(device)->alloc(bytes, out, err, errlen) : st;
}

int rt_device_alloc(int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  return rt_buffer_alloc(KILN_CUDA, bytes, out, err, errlen);
}

int rt_device_upload(graph_buffer *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  return bytes <= 0 ? KILN_OK : rt_buffer_backend(dst)->upload(dst, src, bytes, err, errlen);
}

int rt_device_download(void *dst, const graph_buffer *src, int64_t offset, int64_t bytes, char *err, size_t errlen) {
  return bytes <= 0 ? KILN_OK : rt_buffer_backend(src)->download(dst, src, offset, bytes, err, errlen);
}

/* Within one memory (copy-on-write of an in-place write: cuMemcpyDtoD on
 * the real device, memcpy elsewhere) by its backend; from or to the host
 * by the device side's upload or download; between two device memories
 * (a buffer left from before a backend switch) through the host. */
int rt_buffer_copy_to(const graph_buffer *b, kiln_device device, graph_buffer **out, char *err, size_t errlen) {
  int st = rt_buffer_alloc(device, b->bytes, out, err, errlen);
  if (st != KILN_OK || b->bytes <= 0) return st;
  const rt_backend *from = rt_buffer_backend(b), *to = rt_buffer_backend(*out);
  if (from == to) return to->copy(*out, b, err, errlen);
  if (b->device == KILN_CPU) return to->upload(*out, b->data, b->bytes, err, errlen);
  if (device == KILN_CPU) return from->download((*out)->data, b, 0, b->bytes, err, errlen);
  graph_buffer *host = NULL;
  st = rt_buffer_alloc(KILN_CPU, b->bytes, &host, err, errlen);
  if (st == KILN_OK) st = from->download(host->data, b, 0, b->bytes, err, errlen);
  if (st == KILN_OK) st = to->upload(*out, host->data, b->bytes, err, errlen);
  graph_buffer_release(host);
  return st;
}
