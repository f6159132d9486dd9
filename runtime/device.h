/*
 * device.h — buffers as the runtime sees them beyond one backend
 * (device.c): KILN_CUDA buffers and their caching allocator, and copies
 * between any two memories. Internal.
 *
 * Which memory a new buffer comes from is the backend struct's business
 * (backend.h): rt_backend_of(device) makes it — host memory for KILN_CPU;
 * for KILN_CUDA the emulated device under "cuda-emu" (a separate host
 * allocation), else device 0 (cuMemAlloc). A buffer remembers the
 * backend that made it (rt_buffer_backend: its owns), so it is freed and
 * copied by that one even after the selection changed.
 *
 * A KILN_CUDA graph_buffer's `data` is the device address (real) or the
 * emulated device memory (emu); host code reads it only through
 * rt_device_download.
 *
 * Freed device buffers are kept by size class and reused (the caching
 * allocator of runtime/alloc.c, for device memory): powers of two from
 * 256 bytes to 1 MiB, multiples of 2 MiB above; at most
 * KILN_CUDA_CACHE_BYTES (default 1 GiB) and 256 blocks are kept.
 * rt_device_trim (also at exit) frees them.
 */
#ifndef KILN_RUNTIME_DEVICE_H
#define KILN_RUNTIME_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph.h"
#include "runtime.h"

/** A new uninitialised buffer of `bytes` on `device`, from the memory of
 *  rt_backend_of(device) (KILN_CUDA only once rt_device_ready).
 *  KILN_ERR_DEVICE / KILN_ERR_OOM. */
int rt_buffer_alloc(kiln_device device, int64_t bytes, graph_buffer **out, char *err, size_t errlen);
/** rt_buffer_alloc on KILN_CUDA: from the cache when a freed block of its
 *  class is there. */
int rt_device_alloc(int64_t bytes, graph_buffer **out, char *err, size_t errlen);
/** Host -> device: bytes from src into dst (a KILN_CUDA buffer). */
int rt_device_upload(graph_buffer *dst, const void *src, int64_t bytes, char *err, size_t errlen);
/** A copy of b's bytes in a new buffer on `device` (either direction, or
 *  within one device). */
int rt_buffer_copy_to(const graph_buffer *b, kiln_device device, graph_buffer **out, char *err, size_t errlen);

/* ---- the cache, for the backends whose memory is a device's (backend_*.c) ---- */

/** The raw memory of a device backend: blocks the cache holds. */
typedef struct rt_device_blocks {
  /** A fresh block of `bytes`. KILN_ERR_OOM / KILN_ERR_DEVICE. */
  int (*alloc)(int64_t bytes, void **out, char *err, size_t errlen);
  void (*free)(void *p);
  /** The free_fn of its buffers: rt_device_cache_release(these blocks,
   *  p, bytes). Its owns() compares a buffer's free_fn with it. */
  void (*release)(void *p, int64_t bytes);
} rt_device_blocks;

/** A KILN_CUDA buffer of `bytes` over a block of m, from the cache when a
 *  freed block of its class is there. */
int rt_device_cache_alloc(const rt_device_blocks *m, int64_t bytes, graph_buffer **out, char *err, size_t errlen);
/** Gives block p (of a buffer of `bytes`) back to the cache, or to m when
 *  the cache is full. */
void rt_device_cache_release(const rt_device_blocks *m, void *p, int64_t bytes);

/** Counters of the device allocator since the start of the process. */
typedef struct rt_device_stats {
  int64_t allocs;       /* blocks obtained from the device (cache misses) */
  int64_t reuses;       /* allocations served from the cache */
  int64_t cached_bytes; /* freed bytes kept for reuse now */
  int64_t live_bytes;   /* bytes held by live buffers now */
} rt_device_stats;
void rt_device_get_stats(rt_device_stats *out);
/** Frees every cached device block. */
void rt_device_trim(void);

#endif /* KILN_RUNTIME_DEVICE_H */
