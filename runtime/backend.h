/*
 * backend.h — a backend is a struct of operations (STYLE.md 14, as
 * tinygrad's Compiled): how it compiles and loads a kernel, launches it,
 * makes and copies the buffers its kernels read, and runs a contraction.
 * One file fills each:
 *   backend_llvm.c  "llvm": the CPU, kernels JIT-compiled by LLVM
 *                   (codegen_llvm/), run on the thread pool; host memory;
 *                   MATMUL through the generated GEMM or OpenBLAS;
 *   backend_emu.c   "cuda-emu": the CUDA code path on the CPU — kernels
 *                   printed as CUDA C, checked by NVRTC/ptxas and built
 *                   for the host (codegen_cuda/cuda_emu.c), run on the
 *                   pool; KILN_CUDA buffers in emulated device memory;
 *   backend_cuda.c  "cuda": device 0 through the driver API (cuda_*.c),
 *                   kernels NVRTC builds launched on one stream; device
 *                   memory; MATMUL through cuBLAS.
 * Adding a backend adds one such file, its row in backend.c's table and,
 * when it runs some nodes or holds some device's buffers, its place in
 * the rules there (rt_backend_for, rt_backend_of).
 *
 * backend.c chooses: kiln_set_backend / $KILN_BACKEND select one
 * (rt_backend_select, rt_backend_ready); rt_backend_for says which runs a
 * node's kernel, rt_backend_of whose memory new buffers of a device come
 * from, rt_buffer_backend whose memory holds a buffer. The rest of the
 * runtime calls through the struct; only the cuBLAS path asks for one
 * backend by name (blas.c: are the operands in the cuda backend's
 * memory).
 * Internal to runtime/ (and white-box tests).
 */
#ifndef KILN_RT_BACKEND_H
#define KILN_RT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph.h"
#include "kir.h"
#include "llvm_backend.h"
#include "pool.h"
#include "runtime.h"

/** A kernel compiled and loaded by its backend: what the kernel cache
 *  keeps. */
typedef struct rt_code {
  llvm_kernel_fn fn; /* llvm, cuda-emu: the host entry kernel(bufs, start, end) */
  void *dev;         /* cuda: the loaded module (rt_cuda_kernel *) */
} rt_code;

/** One run of a compiled kernel over its parallel range [0, extent). */
typedef struct rt_launch {
  const rt_code *code;
  /* The kernel's buffers in parameter order (passes.h: out, args, fargs,
   * extra outputs, inputs), each in memory this backend's kernels read;
   * bufs[1] and bufs[2] are NULL: the argument arrays below are host
   * memory (a device backend uploads them). */
  const graph_buffer *const *bufs;
  int n_bufs;
  const int64_t *args; /* [n_args]: view offsets, integer fills (PARAM 1) */
  const double *fargs; /* [n_fargs]: float fill values (PARAM 2) */
  int n_args, n_fargs;
  int64_t extent;
  bool split;          /* chunks of the range may run apart (kir_splittable) */
  int64_t grain;       /* when split: elements one index of the range touches (the pool's cost per item) */
  rt_pool_span *spans; /* room for RT_POOL_MAX_THREADS chunk records (profiling), or NULL */
} rt_launch;

/** What a launch reports. */
typedef struct rt_launch_result {
  int threads;       /* OS threads that ran it (1 for a device launch) */
  int n_spans;       /* chunk records written to spans */
  int64_t device_ns; /* the device's own time of the run (CUDA events), or -1: the caller's clock times it */
} rt_launch_result;

/** An extern run's times (rt_now_ns) and where it ran, for its record. */
typedef struct rt_extern_run {
  int64_t t0, t1;
  bool on_device; /* on device memory (cuBLAS), not on host copies */
  bool tiled;     /* a MATMUL run by the tiled GEMM kernel (cuda_gemm_run.c), not cuBLAS */
} rt_extern_run;

struct rt_gemm_epi; /* gemm_epilogue.h */

typedef struct rt_backend {
  const char *name;  /* kiln_set_backend's name, and the profiler records' backend */
  unsigned char key; /* its byte in kernel- and schedule-cache keys: one backend's builds never serve another */

  /** KILN_OK when the backend can be selected now; else the error
   *  kiln_set_backend gives, the message in err. */
  int (*probe)(char *err, size_t errlen);

  /* ---- kernels ---- */
  /** Compiles k and loads the result into *out, on a kernel-cache miss
   *  (kernel_cache.c calls it; nothing else should). key [len] is the
   *  cache's key of k, under which the LLVM backend files its code on
   *  disk. *load_ns > 0 (ns) when the code was loaded from the disk
   *  cache rather than compiled. Errors: KILN_ERR_COMPILE, _DEVICE, ... */
  int (*compile)(const kir_kernel *k, const unsigned char *key, size_t len, rt_code *out, int64_t *load_ns,
                 char *err, size_t errlen);
  /** Frees what compile loaded (at exit, when the cache is cleared, or
   *  when another thread cached the same kernel first). Host code stays
   *  mapped until exit. */
  void (*unload)(rt_code *code);
  /** Runs l (realize.c binds its buffers) and waits for it: on the
   *  calling thread or split over the pool for the CPU backends, on the
   *  stream for a device. */
  int (*launch)(const rt_launch *l, rt_launch_result *r, char *err, size_t errlen);

  /* ---- memory: the buffers its kernels read (llvm: host memory, KILN_CPU;
   * cuda-emu: emulated device memory, KILN_CUDA; cuda: device 0, KILN_CUDA).
   * A buffer is freed through its own free_fn (graph_buffer_release): host
   * buffers go back to alloc.c's cache, device ones to device.c's. ---- */
  /** A new uninitialised buffer of `bytes`. KILN_ERR_OOM, _DEVICE. */
  int (*alloc)(int64_t bytes, graph_buffer **out, char *err, size_t errlen);
  /** True when b lives in this backend's memory (it made b). */
  bool (*owns)(const graph_buffer *b);
  /** Host -> dst (one of its buffers): bytes from src. */
  int (*upload)(graph_buffer *dst, const void *src, int64_t bytes, char *err, size_t errlen);
  /** src (one of its buffers) from byte `offset` -> host, after every
   *  kernel it queued finished. */
  int (*download)(void *dst, const graph_buffer *src, int64_t offset, int64_t bytes, char *err, size_t errlen);
  /** src's bytes into dst, both its buffers, dst at least as large. */
  int (*copy)(graph_buffer *dst, const graph_buffer *src, char *err, size_t errlen);

  /* ---- contraction ---- */
  /** Runs a MATMUL node n (graph/ops.def; ops/linalg.c records it for
   *  F32 and F64 only) whose inputs are realized: inputs[0] is A viewed
   *  [batch..., M, K] and inputs[1] B viewed [batch..., K, N] — strided
   *  views in elements, offset included, any layout (a transposed view,
   *  batch dims broadcast with stride 0), their buffers on n's device
   *  (for a KILN_CUDA n, a layout the device path cannot take was made
   *  contiguous by ops/linalg.c: rt_blas_view_needs_copy). It allocates
   *  *out, a new contiguous buffer [batch..., M, N] of n's dtype on n's
   *  device, computes C = A·B into it (alpha 1, beta 0: no epilogue; the
   *  elementwise consumers fuse into the next kernel, or into
   *  contract_epilogue's GEMM), and sets run's
   *  times and where it ran. llvm and cuda-emu: on the host, split over
   *  Kiln's pool, through the generated GEMM (gemm.c) or OpenBLAS
   *  (blas.c) as KILN_GEMM or the auto rule picks (rt_matmul_host; a
   *  KILN_CUDA n's result is uploaded); cuda: cuBLAS on device memory
   *  when it can run the product (rt_cublas_can_run), else that host
   *  path. */
  int (*contract)(graph_node *n, graph_buffer **out, rt_extern_run *run, char *err, size_t errlen);
  /** The same product with a fused epilogue (gemm_epilogue.h) into out
   *  (a buffer of the epilogue's result, [M, N] of n's dtype, on n's
   *  device), its inputs realized on this backend; NULL where the
   *  backend has none. llvm: the generated GEMM, steps or an after hook
   *  (a general epilogue); cuda-emu, and cuda where cuBLAS is absent:
   *  the tiled GEMM kernel, steps only (rt_cuda_gemm_contract_epi).
   *  KILN_ERR_UNSUPPORTED, nothing written, when it would not run this
   *  product on a GEMM that fuses (llvm: KILN_GEMM=blas, or the auto
   *  rule picks OpenBLAS; cuda: cuBLAS runs it) or cannot take the
   *  epilogue; else contract's errors. */
  int (*contract_epilogue)(graph_node *n, const struct rt_gemm_epi *epi, graph_buffer *out, rt_extern_run *run,
                           char *err, size_t errlen);
  /** contract_epilogue takes an after hook (rt_gemm_epi.after: a
   *  general epilogue, the fuser's kernel run on each tile of the host
   *  GEMM, gemm_group.c). */
  bool epilogue_hooks;
} rt_backend;

extern const rt_backend rt_backend_llvm, rt_backend_emu, rt_backend_cuda;

/* ------------------------------------------------ selection (backend.c) */

/** Called by rt_realize: KILN_OK once a backend is selected; when none
 *  was, selects $KILN_BACKEND (unset or empty: "llvm") with the same
 *  errors as rt_backend_select, repeated at every call until it succeeds. */
int rt_backend_ready(char *err, size_t errlen);
/** The selected backend (llvm until one is). */
const rt_backend *rt_backend_selected(void);
/** The backend that runs n's kernel (and its contraction): cuda-emu for
 *  every node while it is selected; otherwise rt_backend_of(n->device) —
 *  a KILN_CUDA node on the real device (cuda), CPU nodes on llvm. */
const rt_backend *rt_backend_for(const graph_node *n);
/** The backend whose memory new buffers on `device` come from: llvm's
 *  host memory for KILN_CPU; for KILN_CUDA the emulated device while
 *  cuda-emu is selected, else the real one (cuda). */
const rt_backend *rt_backend_of(kiln_device device);
/** The backend whose memory holds b (owns(b)); llvm for a host buffer
 *  Kiln did not make (from_blob). */
const rt_backend *rt_buffer_backend(const graph_buffer *b);
/** For tests: forgets the selection (the next realize reads
 *  $KILN_BACKEND again). */
void rt_backend_reset(void);

/* ------------------------------- what the backends share (their files) */

/** The CPU launch (backend_llvm.c; cuda-emu's host builds use it too):
 *  the buffers' data pointers in parameter order, then the code's host
 *  entry on the calling thread (a range that cannot split, or is empty)
 *  or over the pool in chunks. */
int rt_host_launch(const rt_launch *l, rt_launch_result *r, char *err, size_t errlen);
/** The host build of k by LLVM (backend_llvm.c): through the disk cache
 *  when `disk` and it is on (then *load_ns > 0: loaded, not compiled),
 *  with its LLVM IR printed at KILN_DEBUG=4. */
int rt_llvm_build(const kir_kernel *k, const unsigned char *key, size_t len, bool disk, llvm_kernel_fn *fn,
                  int64_t *load_ns, char *err, size_t errlen);
/** Runs extern op n on host copies of its inputs with fn (extern.c), into
 *  *out, a new buffer on n's device (the host result uploaded for a
 *  KILN_CUDA n); hold runs it under rt_pool_hold. */
int rt_extern_on_host(graph_node *n, rt_extern_fn fn, bool hold, graph_buffer **out, rt_extern_run *run, char *err,
                      size_t errlen);

#endif /* KILN_RT_BACKEND_H */
