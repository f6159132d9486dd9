/*
 * device.h — the CUDA device as the runtime sees it (device.c): memory,
 * copies and kernels for tensors on KILN_CUDA. Internal.
 *
 * Two implementations behind one interface:
 *  - real: device 0 through cuda_launch.h (cuMemAlloc
 *    buffers, synchronous host <-> device copies, kernels compiled by
 *    NVRTC for the device's sm_XX, launched on the one stream and timed
 *    with CUDA events; F32/F64 matmuls through cuBLAS, runtime/blas.c);
 *  - emu: under the "cuda-emu" backend, device memory is a separate host
 *    allocation and kernels are the cuda-emu host builds run by
 *    realize.c on the thread pool like any CPU kernel (no launch here).
 * Which one serves a new buffer is decided when it is allocated: emu when
 * "cuda-emu" is selected, else real when a device is present; a buffer
 * remembers its implementation, so it is freed and copied by the one that
 * made it.
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
#include "kir.h"
#include "runtime.h"

/** True when the buffer was made by the real device (kernels for it run
 *  through rt_device_launch; the emu's run on the host). */
bool rt_device_is_real(const graph_buffer *b);
/** True when the next KILN_CUDA buffer will be on the real device. */
bool rt_device_next_is_real(void);

/** A KILN_CUDA buffer of `bytes` (uninitialised), from the cache when a
 *  freed block of its class is there. KILN_ERR_DEVICE / KILN_ERR_OOM. */
int rt_device_alloc(int64_t bytes, graph_buffer **out, char *err, size_t errlen);
/** Host -> device: bytes from src into dst (a KILN_CUDA buffer). */
int rt_device_upload(graph_buffer *dst, const void *src, int64_t bytes, char *err, size_t errlen);
/** A copy of b's bytes in a new buffer on `device` (either direction, or
 *  device to device). */
int rt_buffer_copy_to(const graph_buffer *b, kiln_device device, graph_buffer **out, char *err, size_t errlen);

/** The real device's build of k (NVRTC for sm_XX, or PTX for an older
 *  compute_YY when NVRTC does not know the GPU — said once under
 *  KILN_DEBUG — loaded), as an opaque handle the kernel cache keeps for
 *  the life of the process. */
int rt_device_kernel_load(const kir_kernel *k, void **handle, char *err, size_t errlen);
/** Unloads a handle of rt_device_kernel_load (NULL-safe). */
void rt_device_kernel_free(void *handle);
/** Runs a loaded kernel over [start, end) with bufs [n] (KILN_CUDA
 *  buffers, in parameter order; host args/fargs arrays are uploaded by
 *  the caller), waits for it and stores its CUDA-event time in *ns. */
int rt_device_launch(void *handle, const graph_buffer *const *bufs, int n, int64_t start, int64_t end, int64_t *ns,
                     char *err, size_t errlen);

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
