/*
 * backend_llvm.c — the "llvm" backend (backend.h): the CPU. Kernels are
 * JIT-compiled by LLVM (codegen_llvm/) — through the on-disk cache when it
 * is on (disk_cache.c, docs/cache.md) — and run on Kiln's thread pool,
 * their parallel range split into chunks when kir_splittable allows;
 * buffers are host memory from the caching allocator (alloc.c); MATMUL
 * goes to the generated GEMM (gemm.c) or OpenBLAS (blas.c) on the host,
 * as rt_matmul_host picks, split over the pool.
 *
 * The pool launch (rt_host_launch) and the LLVM build (rt_llvm_build) are
 * shared with cuda-emu, whose host builds have the same calling
 * convention and whose F16/BF16 kernels LLVM compiles. Compiled code
 * lives in the JIT until exit (llvm_shutdown).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gemm_epilogue.h"
#include "rt_internal.h"

static int probe(char *err, size_t errlen) {
  (void)err, (void)errlen;
  return KILN_OK;
}

/* ------------------------------------------------------------ kernels */

static void register_shutdown(void) { atexit(llvm_shutdown); }

int rt_llvm_build(const kir_kernel *k, const unsigned char *key, size_t len, bool disk, llvm_kernel_fn *fn,
                  int64_t *load_ns, char *err, size_t errlen) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_shutdown); /* the JIT and its code, freed at exit */
  char *ir = NULL; /* KILN_DEBUG=4 prints the LLVM IR of each compiled kernel */
  char **want_ir = rt_debug_level() >= 4 ? &ir : NULL;
  int64_t t0 = rt_now_ns(); /* a load's time: settings, JIT creation, read, check, link */
  *load_ns = 0;
  int st = disk && rt_disk_cache_on() ? rt_disk_kernel(k, key, len, fn, load_ns, want_ir, err, errlen)
                                      : llvm_compile(k, fn, want_ir, err, errlen);
  if (*load_ns > 0) *load_ns = rt_now_ns() - t0;
  if (ir) fprintf(stderr, "kiln: LLVM IR of %s\n%s\n", k->name, ir);
  free(ir);
  return st;
}

static int compile(const kir_kernel *k, const unsigned char *key, size_t len, rt_code *out, int64_t *load_ns,
                   char *err, size_t errlen) {
  int st = rt_llvm_build(k, key, len, true, &out->fn, load_ns, err, errlen);
  if (st == KILN_OK) rt_cuda_check(k); /* KILN_CUDA_CHECK: the GPU backend's code, checked */
  return st;
}

static void unload(rt_code *code) { (void)code; /* JIT code lives until llvm_shutdown */ }

int rt_cpu_target(char *cpu, size_t cpu_len, int *vector_bits, int *vector_regs, char *err, size_t errlen) {
  const char *why = llvm_target_error();
  if (why) {
    snprintf(err, errlen, "%s", why);
    return KILN_ERR_COMPILE;
  }
  if (cpu && cpu_len) snprintf(cpu, cpu_len, "%s", llvm_target_cpu());
  if (vector_bits) *vector_bits = llvm_target_vector_bits();
  if (vector_regs) *vector_regs = llvm_target_vector_regs();
  return KILN_OK;
}

int rt_host_launch(const rt_launch *l, rt_launch_result *r, char *err, size_t errlen) {
  void *bufs[3 + PASS_MAX_INPUTS];
  if (l->n_bufs > (int)(sizeof bufs / sizeof bufs[0])) {
    snprintf(err, errlen, "a kernel of %d buffers (at most %d)", l->n_bufs, (int)(sizeof bufs / sizeof bufs[0]));
    return KILN_ERR_UNSUPPORTED;
  }
  for (int i = 0; i < l->n_bufs; i++) bufs[i] = l->bufs[i] ? l->bufs[i]->data : NULL;
  bufs[1] = (void *)l->args;
  bufs[2] = (void *)l->fargs;
  r->device_ns = -1;
  r->n_spans = 0;
  if (l->extent == 0 || !l->split) {
    l->code->fn(bufs, 0, l->extent);
    r->threads = 1;
    return KILN_OK;
  }
  r->threads = rt_pool_run_timed(l->code->fn, bufs, l->extent, l->grain, l->spans, &r->n_spans);
  return KILN_OK;
}

/* ------------------------------------------------ memory: the host's */

static int alloc(int64_t bytes, graph_buffer **out, char *err, size_t errlen) {
  *out = graph_buffer_alloc(bytes);
  if (*out) return KILN_OK;
  snprintf(err, errlen, "out of memory allocating %lld bytes", (long long)bytes);
  return KILN_ERR_OOM;
}

static bool owns(const graph_buffer *b) { return b->device == KILN_CPU; }

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

static int contract(graph_node *n, graph_buffer **out, rt_extern_run *run, char *err, size_t errlen) {
  return rt_extern_on_host(n, rt_matmul_host, false, out, run, err, errlen);
}

/* The product on the generated GEMM with its epilogue fused, when that
 * GEMM is the one selected for it (rt_gemm_selected). */
static int contract_epilogue(graph_node *n, const rt_gemm_epi *epi, graph_buffer *out, rt_extern_run *run, char *err,
                             size_t errlen) {
  if (!rt_gemm_selected(n)) return KILN_ERR_UNSUPPORTED;
  const void *in[2] = {n->inputs[0].node->buffer->data, n->inputs[1].node->buffer->data};
  run->on_device = false;
  run->t0 = rt_now_ns();
  int st = rt_gemm_matmul_epi(n, in, epi, out, err, errlen);
  run->t1 = rt_now_ns();
  return st;
}

const rt_backend rt_backend_llvm = {
    .name = "llvm",
    .key = 0,
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
    .epilogue_hooks = true,
};
