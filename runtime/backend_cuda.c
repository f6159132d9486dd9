/*
 * backend_cuda.c — the "cuda" backend (backend.h): device 0 through the
 * driver API (cuda_driver.c, cuda_launch.c). It runs the kernels of
 * KILN_CUDA tensors (CPU tensors keep running on llvm): each is printed
 * as CUDA C and compiled by NVRTC for the device's sm_XX (PTX for an
 * older compute_YY when NVRTC does not know the GPU), loaded once and
 * kept in the kernel cache until exit, and launched on Kiln's one stream
 * over its whole parallel range in the printer's launch shape, with the
 * host argument arrays uploaded first and the time taken from CUDA
 * events. Memory is cuMemAlloc'ed device memory behind device.c's
 * caching allocator; copies are synchronous cuMemcpy calls after the
 * stream. MATMUL goes to cuBLAS (cuda_blas.c, through blas.c's mapping of
 * row-major views) when it can run the product, else to OpenBLAS on host
 * copies, the result uploaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_blas.h"
#include "cuda_driver.h"
#include "cuda_launch.h"
#include "device.h"
#include "rt_internal.h"


/* KILN_OK when device 0 is usable, else KILN_ERR_DEVICE "no CUDA device:
 * <why>" in err. */
static int probe(char *err, size_t errlen) {
  char why[1024];
  if (rt_cuda_device_available(why, sizeof why) && rt_cuda_driver(NULL)) return KILN_OK;
  snprintf(err, errlen, "no CUDA device: %s", why);
  return KILN_ERR_DEVICE;
}

/* ------------------------------------------------ memory: device 0's */

static void release(void *p, int64_t bytes);

static int block_alloc(int64_t bytes, void **out, char *err, size_t errlen) {
  cu_deviceptr p = 0;
  int st = rt_cuda_buffer_alloc((size_t)bytes, &p, err, errlen);
  *out = (void *)(uintptr_t)p;
  return st;
}

static void block_free(void *p) { rt_cuda_buffer_free(rt_cuda_dptr(p)); }

static const rt_device_blocks blocks = {block_alloc, block_free, release};

static void release(void *p, int64_t bytes) { rt_device_cache_release(&blocks, p, bytes); }

static int alloc(int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  return rt_device_cache_alloc(&blocks, bytes, out, err, errlen);
}

static bool owns(const graph_buffer *b) { return b->free_fn == release; }

static int upload(graph_buffer *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  return rt_cuda_copy_to_device(rt_cuda_dptr(dst->data), src, (size_t)bytes, err, errlen);
}

static int download(void *dst, const graph_buffer *src, int64_t offset, int64_t bytes, char *err, size_t errlen) {
  return rt_cuda_copy_to_host(dst, rt_cuda_dptr(src->data) + (cu_deviceptr)offset, (size_t)bytes, err, errlen);
}

static int copy(graph_buffer *dst, const graph_buffer *src, char *err, size_t errlen) {
  return rt_cuda_copy_on_device(rt_cuda_dptr(dst->data), rt_cuda_dptr(src->data), (size_t)src->bytes, err, errlen);
}

/* ------------------------------------------------------------ kernels */

static int compile(const kir_kernel *k, const unsigned char *key, size_t len, rt_code *out, int64_t *load_ns,
                   char *err, size_t errlen) {
  (void)key, (void)len;
  *load_ns = 0;
  if (rt_debug_level() >= 4) rt_debug_cuda_source(k);
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
  out->dev = ck;
  return st;
}

static void unload(rt_code *code) {
  if (!code->dev) return;
  rt_cuda_kernel_unload(code->dev);
  free(code->dev);
  code->dev = NULL;
}

/* A device buffer holding `bytes` of host data (a kernel's args or
 * fargs array; at least one element, so the pointer is valid). */
static int upload_array(const void *src, int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  int st = alloc(bytes, out, err, errlen);
  return st == KILN_OK ? upload(*out, src, bytes, err, errlen) : st;
}

/* The whole parallel range in one launch, the host argument arrays
 * uploaded first; r->device_ns is the CUDA-event time. */
static int launch(const rt_launch *l, rt_launch_result *r, char *err, size_t errlen) {
  r->threads = 1;
  r->n_spans = 0;
  r->device_ns = 0;
  if (l->n_bufs > RT_CUDA_MAX_PARAMS) {
    snprintf(err, errlen, "a kernel of %d buffers (at most %d)", l->n_bufs, RT_CUDA_MAX_PARAMS);
    return KILN_ERR_UNSUPPORTED;
  }
  graph_buffer *args = NULL, *fargs = NULL;
  int st = upload_array(l->args, (int64_t)sizeof *l->args * (l->n_args > 0 ? l->n_args : 1), &args, err, errlen);
  if (st == KILN_OK)
    st = upload_array(l->fargs, (int64_t)sizeof *l->fargs * (l->n_fargs > 0 ? l->n_fargs : 1), &fargs, err, errlen);
  cu_deviceptr ptrs[RT_CUDA_MAX_PARAMS];
  for (int i = 0; st == KILN_OK && i < l->n_bufs; i++)
    ptrs[i] = rt_cuda_dptr(i == 1 ? args->data : i == 2 ? fargs->data : l->bufs[i]->data);
  float ms = 0;
  if (st == KILN_OK) st = rt_cuda_kernel_launch(l->code->dev, ptrs, l->n_bufs, 0, l->extent, &ms, err, errlen);
  r->device_ns = (int64_t)((double)ms * 1e6);
  graph_buffer_release(args);
  graph_buffer_release(fargs);
  return st;
}

/* ------------------------------------------------------- contraction */

/* cuBLAS on device memory when it can run n now (F32/F64, operands in a
 * layout it takes, 32-bit sizes, the library loaded); else the tiled GEMM
 * kernel (cuda_gemm_run.c); else OpenBLAS on host copies, the result
 * uploaded. */
static int contract(graph_node *n, graph_buffer **out, rt_extern_run *run, char *err, size_t errlen) {
  if (!rt_cublas_can_run(n)) {
    cuda_gemm_spec s;
    if (rt_cuda_gemm_spec_of(n, &s)) return rt_cuda_gemm_contract(n, &s, false, out, run, err, errlen);
    return rt_extern_on_host(n, rt_matmul_host, false, out, run, err, errlen);
  }
  int st = alloc(n->numel * graph_dtypes[n->dtype].size, out, err, errlen);
  run->on_device = true;
  run->t0 = rt_now_ns();
  if (st == KILN_OK) st = rt_cublas_matmul(n, *out, err, errlen);
  run->t1 = rt_now_ns();
  return st;
}

/* Where cuBLAS does not run n, the tiled GEMM kernel with the epilogue's
 * steps before its stores; under cuBLAS the epilogue stays a kernel. */
static int contract_epilogue(graph_node *n, const struct rt_gemm_epi *epi, graph_buffer *out, rt_extern_run *run, char *err,
                             size_t errlen) {
  if (rt_cublas_can_run(n)) return KILN_ERR_UNSUPPORTED;
  return rt_cuda_gemm_contract_epi(n, epi, false, out, run, err, errlen);
}

const rt_backend rt_backend_cuda = {
    .name = "cuda",
    .key = 2,
    .probe = probe,
    .compile = compile,
    .unload = unload,
    .launch = launch,
    .alloc = alloc,
    .owns = owns,
    .upload = upload,
    .download = download,
    .copy = copy,
    .contract = contract,
    .contract_epilogue = contract_epilogue,
};
