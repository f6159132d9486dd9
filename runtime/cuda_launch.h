/*
 * cuda_launch.h — running kernels printed by codegen_cuda on CUDA device 0
 * (cuda_launch.c): buffers, copies, NVRTC compile + cuModuleLoadData, a
 * timed launch. The rest of the runtime reaches it through the cuda
 * backend (backend_cuda.c; device.c adds the caching allocator). Every call
 * without a device returns KILN_ERR_DEVICE "no CUDA device: <why>".
 * Internal to runtime/ (and white-box tests).
 */
#ifndef KILN_RT_CUDA_LAUNCH_H
#define KILN_RT_CUDA_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_backend.h"
#include "cuda_driver.h"
#include "kir.h"

enum { RT_CUDA_MAX_PARAMS = 64 };

/** A KILN_CUDA buffer's data pointer as the driver's device pointer. */
static inline cu_deviceptr rt_cuda_dptr(const void *p) { return (cu_deviceptr)(uintptr_t)p; }

/** A kernel loaded on the device: its module and entry point. */
typedef struct rt_cuda_kernel {
  cu_module module;
  cu_function fn;
  bool splittable;        /* cuda_kernel_splittable: [start, end) may be split */
  int n_params;
  cuda_launch_rule rule;  /* the launch shape (cuda_backend.h) */
  char arch[16];          /* what NVRTC compiled for: "sm_XX" (CUBIN) or "compute_YY" (PTX) */
} rt_cuda_kernel;

/** Device memory of `bytes` bytes (cuMemAlloc; KILN_ERR_OOM when the device
 *  is full). Release with rt_cuda_buffer_free. */
int rt_cuda_buffer_alloc(size_t bytes, cu_deviceptr *out, char *err, size_t errlen);
void rt_cuda_buffer_free(cu_deviceptr p);
/** Host → device copy (synchronous). */
int rt_cuda_copy_to_device(cu_deviceptr dst, const void *src, size_t bytes, char *err, size_t errlen);
/** Device → host copy after every launch on the stream has finished. */
int rt_cuda_copy_to_host(void *dst, cu_deviceptr src, size_t bytes, char *err, size_t errlen);
/** Device → device copy (cuMemcpyDtoD) after every launch on the stream
 *  has finished; later launches and copies see it. */
int rt_cuda_copy_on_device(cu_deviceptr dst, cu_deviceptr src, size_t bytes, char *err, size_t errlen);

/** Prints k, compiles it with NVRTC for the device's sm_XX (a CUBIN) or,
 *  when NVRTC does not know that architecture, for the highest compute_YY
 *  it knows below it (PTX, JIT-compiled by the driver; cuda_nvrtc_target),
 *  and loads it. Release with rt_cuda_kernel_unload. */
int rt_cuda_kernel_load(const kir_kernel *k, rt_cuda_kernel *out, char *err, size_t errlen);
void rt_cuda_kernel_unload(rt_cuda_kernel *ck);
/** The same for the tiled GEMM kernel of variant v (cuda_gemm_print;
 *  its cuda_gemm_n_buffers parameters):
 *  parameters A, B, C and the product's parameter array, launched over
 *  the product's tiles. */
int rt_cuda_gemm_load(cuda_gemm_variant v, rt_cuda_kernel *out, char *err, size_t errlen);
/** Runs ck over its parallel range [start, end) with one device pointer
 *  per kernel parameter (in order) on the stream, in the shape of its
 *  launch rule (cuda_launch_rule_shape), waits for it, and
 *  stores its run time from CUDA events in *ms (if non-NULL). */
int rt_cuda_kernel_launch(const rt_cuda_kernel *ck, const cu_deviceptr *bufs, int n_bufs, int64_t start, int64_t end,
                       float *ms, char *err, size_t errlen);

/** Kiln's one stream, with device 0's context current on this thread
 *  (created on first use), for libraries that enqueue work on it
 *  (cuBLAS). KILN_ERR_DEVICE without a device. */
int rt_cuda_stream(cu_stream *out, char *err, size_t errlen);
/** Waits for everything enqueued on stream (cuStreamSynchronize). */
int rt_cuda_sync(cu_stream stream, char *err, size_t errlen);

#endif /* KILN_RT_CUDA_LAUNCH_H */
