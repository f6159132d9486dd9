/*
 * backend_emu.c — the "cuda-emu" backend (backend.h): the CUDA code path
 * run on the CPU, for machines without a GPU. Every kernel, of KILN_CPU
 * and KILN_CUDA tensors alike, is printed as CUDA C, checked by NVRTC and
 * ptxas, and that source built for the host by the system C++ compiler
 * (codegen_cuda/cuda_emu.c); its launches run on the launcher of
 * cuda_emu_run.c (cooperative blocks as fibers). The host build has the
 * CPU calling convention, so it is launched like an LLVM kernel, split
 * over the pool (rt_host_launch): each chunk is one launch in the
 * kernel's real launch shape. F16/BF16 kernels, which the emulator does
 * not build, are checked and then compiled by LLVM (not through the disk
 * cache, which holds the llvm backend's code only).
 *
 * Memory: KILN_CUDA buffers are emulated device memory — host blocks
 * (64-byte aligned) behind device.c's caching allocator, allocated apart
 * from host buffers; copies are memcpy. MATMUL of F32/F64 runs the
 * tiled GEMM kernel the cuda backend runs without cuBLAS (cuda_gemm_run.c),
 * of KILN_CPU and KILN_CUDA tensors alike; a product it does not take (an
 * operand read through a pending copy, batch dims without one stride) runs
 * on the host like llvm's (rt_matmul_host).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"
#include "cuda_emu_run.h"
#include "device.h"
#include "rt_internal.h"

static int probe(char *err, size_t errlen) {
  return cuda_emu_available(err, errlen) ? KILN_OK : KILN_ERR_UNSUPPORTED;
}

/* ------------------------------------------------------------ kernels */

static int compile(const kir_kernel *k, const unsigned char *key, size_t len, rt_code *out, int64_t *load_ns,
                   char *err, size_t errlen) {
  *load_ns = 0;
  if (rt_debug_level() >= 4) rt_debug_cuda_source(k);
  int st = cuda_emu_compile(k, &rt_cuda_emu_launcher, &out->fn, err, errlen);
  if (st == KILN_OK && !out->fn) st = rt_llvm_build(k, key, len, false, &out->fn, load_ns, err, errlen);
  return st;
}

static void unload(rt_code *code) { (void)code; /* host builds stay mapped until exit */ }

/* ------------------------------------ memory: emulated device memory */

static void release(void *p, int64_t bytes);

static int block_alloc(int64_t bytes, void **out, char *err, size_t errlen) {
  *out = aligned_alloc(64, (size_t)bytes);
  if (*out) return KILN_OK;
  snprintf(err, errlen, "out of (emulated) device memory allocating %lld bytes", (long long)bytes);
  return KILN_ERR_OOM;
}

static void block_free(void *p) { free(p); }

static const rt_device_blocks blocks = {block_alloc, block_free, release};

static void release(void *p, int64_t bytes) { rt_device_cache_release(&blocks, p, bytes); }

static int alloc(int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  return rt_device_cache_alloc(&blocks, bytes, out, err, errlen);
}

static bool owns(const graph_buffer *b) { return b->free_fn == release; }

static int upload(graph_buffer *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  (void)err, (void)errlen;
  memcpy(dst->data, src, (size_t)bytes);
  return KILN_OK;
}

static int download(void *dst, const graph_buffer *src, int64_t offset, int64_t bytes, char *err, size_t errlen) {
  (void)err, (void)errlen;
  memcpy(dst, (const char *)src->data + offset, (size_t)bytes);
  return KILN_OK;
}

static int copy(graph_buffer *dst, const graph_buffer *src, char *err, size_t errlen) {
  return upload(dst, src->data, src->bytes, err, errlen);
}

/* ------------------------------------------------------- contraction */

/* The tiled GEMM kernel, from its CUDA C (cuda_gemm_run.c); on the host
 * as llvm's for the products it does not take. */
static int contract(graph_node *n, graph_buffer **out, rt_extern_run *run, char *err, size_t errlen) {
  cuda_gemm_spec s;
  if (rt_cuda_gemm_spec_of(n, &s)) return rt_cuda_gemm_contract(n, &s, true, out, run, err, errlen);
  return rt_extern_on_host(n, rt_matmul_host, false, out, run, err, errlen);
}

/* The tiled GEMM kernel with the epilogue's steps before its stores. */
static int contract_epilogue(graph_node *n, const struct rt_gemm_epi *epi, graph_buffer *out, rt_extern_run *run, char *err,
                             size_t errlen) {
  return rt_cuda_gemm_contract_epi(n, epi, true, out, run, err, errlen);
}

const rt_backend rt_backend_emu = {
    .name = "cuda-emu",
    .key = 1,
    .probe = probe,
    .compile = compile,
    .unload = unload,
    .launch = rt_host_launch,
    .alloc = alloc,
    .owns = owns,
    .upload = upload,
    .download = download,
    .copy = copy,
    .contract = contract,
    .contract_epilogue = contract_epilogue,
};
