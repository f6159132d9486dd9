/*
 * cuda_launch.c — running a printed kernel on device 0 through the driver
 * API (cuda_driver.h): the device's primary context and one stream, device
 * buffers with host ↔ device copies, a kernel compiled by NVRTC for the
 * device's sm_XX (or PTX for the highest compute_YY below it that NVRTC
 * knows, when the GPU is newer than NVRTC) and loaded with
 * cuModuleLoadData, and a launch timed with CUDA events.
 *
 * This is the device half of the cuda backend (the CUDA C comes from
 * codegen_cuda/): backend_cuda.c runs KILN_CUDA tensors here
 * (docs/cuda.md), and device.c keeps freed buffers in its caching
 * allocator; these buffers are plain cuMemAlloc/cuMemFree.
 *
 * Launch geometry is the printer's launch rule (cuda_kernel_launch_rule in
 * cuda_backend.h, the same the emulator runs): a grid-stride kernel on
 * blocks of 256 threads, one per 256 indices up to 65,535 blocks; a
 * cooperative reduction on one block per output index (32 to 256
 * threads); a whole-tensor reduction on one block; any other kernel on one
 * thread.
 * Kernel arguments are the buffer pointers, then `long long start, end`.
 * Context, stream and events are created once, under a mutex, and never
 * released (the process owns them until exit); they belong to the driver
 * first loaded, so tests must not switch to another driver library after
 * a launch-layer call succeeded.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_driver.h"
#include "cuda_launch.h"

#define KERNEL_SYMBOL "kiln_kernel"

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool ready;
  cu_context ctx;
  cu_stream stream;
  cu_event start, stop;
} dev;

/* KILN_ERR_DEVICE with "<what>: CUDA_ERROR_X (...)" when r failed. */
static int check(cu_result r, const char *what, char *err, size_t errlen) {
  if (r == CUDA_SUCCESS) return KILN_OK;
  char buf[256];
  snprintf(err, errlen, "%s: %s", what, rt_cuda_driver_error(r, buf, sizeof buf));
  return KILN_ERR_DEVICE;
}

/* The driver, with device 0's context current on this thread. */
static const rt_cuda_driver_api *ready(rt_cuda_device_info *info, char *err, size_t errlen) {
  char why[1024];
  if (!rt_cuda_device_available(why, sizeof why)) {
    snprintf(err, errlen, "no CUDA device: %s", why);
    return NULL;
  }
  const rt_cuda_driver_api *api = rt_cuda_driver(info);
  if (!api) {
    snprintf(err, errlen, "no CUDA device: the driver was unloaded");
    return NULL;
  }
  pthread_mutex_lock(&ctx_lock);
  int st = KILN_OK;
  if (!dev.ready) {
    st = check(api->primary_ctx_retain(&dev.ctx, info->device), "cuDevicePrimaryCtxRetain", err, errlen);
    if (st == KILN_OK) st = check(api->ctx_set_current(dev.ctx), "cuCtxSetCurrent", err, errlen);
    if (st == KILN_OK) st = check(api->stream_create(&dev.stream, 0), "cuStreamCreate", err, errlen);
    if (st == KILN_OK) st = check(api->event_create(&dev.start, 0), "cuEventCreate", err, errlen);
    if (st == KILN_OK) st = check(api->event_create(&dev.stop, 0), "cuEventCreate", err, errlen);
    dev.ready = st == KILN_OK;
  } else {
    st = check(api->ctx_set_current(dev.ctx), "cuCtxSetCurrent", err, errlen);
  }
  pthread_mutex_unlock(&ctx_lock);
  return st == KILN_OK ? api : NULL;
}

int rt_cuda_buffer_alloc(size_t bytes, cu_deviceptr *out, char *err, size_t errlen) {
  *out = 0;
  rt_cuda_device_info info;
  const rt_cuda_driver_api *api = ready(&info, err, errlen);
  if (!api) return KILN_ERR_DEVICE;
  cu_result r = api->mem_alloc(out, bytes ? bytes : 1);
  if (r == 2) { /* CUDA_ERROR_OUT_OF_MEMORY */
    snprintf(err, errlen, "cuMemAlloc of %zu bytes: out of device memory", bytes);
    return KILN_ERR_OOM;
  }
  return check(r, "cuMemAlloc", err, errlen);
}

void rt_cuda_buffer_free(cu_deviceptr p) {
  const rt_cuda_driver_api *api = rt_cuda_driver(NULL);
  if (api && p) api->mem_free(p);
}

int rt_cuda_copy_to_device(cu_deviceptr dst, const void *src, size_t bytes, char *err, size_t errlen) {
  rt_cuda_device_info info;
  const rt_cuda_driver_api *api = ready(&info, err, errlen);
  if (!api) return KILN_ERR_DEVICE;
  return check(api->memcpy_htod(dst, src, bytes), "cuMemcpyHtoD", err, errlen);
}

int rt_cuda_copy_to_host(void *dst, cu_deviceptr src, size_t bytes, char *err, size_t errlen) {
  rt_cuda_device_info info;
  const rt_cuda_driver_api *api = ready(&info, err, errlen);
  if (!api) return KILN_ERR_DEVICE;
  int st = check(api->stream_synchronize(dev.stream), "cuStreamSynchronize", err, errlen); /* kernels first */
  return st == KILN_OK ? check(api->memcpy_dtoh(dst, src, bytes), "cuMemcpyDtoH", err, errlen) : st;
}

int rt_cuda_copy_on_device(cu_deviceptr dst, cu_deviceptr src, size_t bytes, char *err, size_t errlen) {
  rt_cuda_device_info info;
  const rt_cuda_driver_api *api = ready(&info, err, errlen);
  if (!api) return KILN_ERR_DEVICE;
  int st = check(api->stream_synchronize(dev.stream), "cuStreamSynchronize", err, errlen);
  return st == KILN_OK ? check(api->memcpy_dtod(dst, src, bytes), "cuMemcpyDtoD", err, errlen) : st;
}

/* Compiles src (entry point KERNEL_SYMBOL) for the device and loads it
 * into *out (module, fn, arch). */
static int load_source(const char *src, const char *name, rt_cuda_kernel *out, char *err, size_t errlen) {
  rt_cuda_device_info info;
  const rt_cuda_driver_api *api = ready(&info, err, errlen);
  if (!api) return KILN_ERR_DEVICE;
  char *image = NULL;
  size_t image_len = 0;
  /* sm_XX (CUBIN) when NVRTC knows the device, else PTX for the highest
   * compute_YY <= XX it knows: cuModuleLoadData JIT-compiles PTX */
  int st = cuda_nvrtc_target(info.cc_major, info.cc_minor, out->arch, sizeof out->arch, err, errlen);
  if (st == KILN_OK) st = cuda_nvrtc_compile(src, name, out->arch, &image, &image_len, err, errlen);
  if (st != KILN_OK) return st;
  st = check(api->module_load_data(&out->module, image), "cuModuleLoadData", err, errlen);
  free(image);
  if (st == KILN_OK) st = check(api->module_get_function(&out->fn, out->module, KERNEL_SYMBOL), "cuModuleGetFunction",
                                err, errlen);
  return st;
}

int rt_cuda_kernel_load(const kir_kernel *k, rt_cuda_kernel *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char *src = NULL;
  int st = cuda_print_kernel(k, KERNEL_SYMBOL, &src, err, errlen);
  if (st == KILN_OK) st = load_source(src, k->name, out, err, errlen);
  free(src);
  if (st != KILN_OK) return st;
  out->splittable = cuda_kernel_splittable(k);
  out->n_params = k->n_params;
  if (cuda_kernel_launch_rule(k, &out->rule) != KILN_OK) {
    snprintf(err, errlen, "rt_cuda_kernel_load: out of memory planning the launch of %s", k->name);
    st = KILN_ERR_OOM;
  }
  return st;
}

int rt_cuda_gemm_load(cuda_gemm_variant v, rt_cuda_kernel *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char *src = NULL;
  int st = cuda_gemm_print(v, KERNEL_SYMBOL, &src, err, errlen);
  if (st == KILN_OK) st = load_source(src, "kiln_gemm", out, err, errlen);
  free(src);
  out->n_params = cuda_gemm_n_buffers(v); /* A, B, C, the parameter array, the epilogue's operands */
  cuda_gemm_launch_rule(&out->rule);
  return st;
}

int rt_cuda_kernel_launch(const rt_cuda_kernel *ck, const cu_deviceptr *bufs, int n_bufs, int64_t start, int64_t end,
                       float *ms, char *err, size_t errlen) {
  if (n_bufs != ck->n_params || n_bufs > RT_CUDA_MAX_PARAMS) {
    snprintf(err, errlen, "rt_cuda_kernel_launch: %d buffers for a kernel of %d parameters", n_bufs, ck->n_params);
    return KILN_ERR_ARG;
  }
  rt_cuda_device_info info;
  const rt_cuda_driver_api *api = ready(&info, err, errlen);
  if (!api) return KILN_ERR_DEVICE;
  cu_deviceptr ptrs[RT_CUDA_MAX_PARAMS];
  long long lo = start, hi = end;
  void *args[RT_CUDA_MAX_PARAMS + 2];
  for (int i = 0; i < n_bufs; i++) ptrs[i] = bufs[i], args[i] = &ptrs[i];
  args[n_bufs] = &lo;
  args[n_bufs + 1] = &hi;
  cuda_launch_shape shape;
  cuda_launch_rule_shape(&ck->rule, start, end, &shape);
  int st = check(api->event_record(dev.start, dev.stream), "cuEventRecord", err, errlen);
  if (st == KILN_OK)
    st = check(api->launch_kernel(ck->fn, shape.grid, 1, 1, shape.block, 1, 1, (unsigned)shape.shared_bytes, dev.stream, args, NULL), "cuLaunchKernel", err,
               errlen);
  if (st == KILN_OK) st = check(api->event_record(dev.stop, dev.stream), "cuEventRecord", err, errlen);
  if (st == KILN_OK) st = check(api->event_synchronize(dev.stop), "cuEventSynchronize (the kernel's run)", err, errlen);
  float t = 0;
  if (st == KILN_OK) st = check(api->event_elapsed_time(&t, dev.start, dev.stop), "cuEventElapsedTime", err, errlen);
  if (ms) *ms = t;
  return st;
}

void rt_cuda_kernel_unload(rt_cuda_kernel *ck) {
  const rt_cuda_driver_api *api = rt_cuda_driver(NULL);
  if (api && ck->module) api->module_unload(ck->module);
  memset(ck, 0, sizeof *ck);
}

/* For libraries that enqueue work themselves (cuBLAS, cuda_blas.c). */
int rt_cuda_stream(cu_stream *out, char *err, size_t errlen) {
  rt_cuda_device_info info;
  *out = NULL;
  if (!ready(&info, err, errlen)) return KILN_ERR_DEVICE;
  *out = dev.stream;
  return KILN_OK;
}

int rt_cuda_sync(cu_stream stream, char *err, size_t errlen) {
  const rt_cuda_driver_api *api = rt_cuda_driver(NULL);
  if (!api) {
    snprintf(err, errlen, "no CUDA device: the driver was unloaded");
    return KILN_ERR_DEVICE;
  }
  return check(api->stream_synchronize(stream), "cuStreamSynchronize", err, errlen);
}
