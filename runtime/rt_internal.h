/*
 * rt_internal.h — the runtime's own interface between its files:
 * scheduling pending nodes into kernel runs, the kernel and schedule
 * caches, extern ops, debug output and the profiler's records; the
 * backends' struct and their selection are in backend.h. Private to
 * runtime/ (and white-box tests); the layers above see runtime.h only.
 */
#ifndef KILN_RT_INTERNAL_H
#define KILN_RT_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

#include "backend.h"
#include "graph.h"
#include "kir.h"
#include "passes.h"
#include "llvm_backend.h"
#include "pool.h"
#include "runtime.h"

/** The plan of the pending nodes roots [n] need, in post-order (producers
 *  first), as rt_realize schedules them: with `passes`, after the
 *  simplifier and the fusion pass (the plan then says which nodes their
 *  readers' kernels compute). Nothing runs; free *p with pass_plan_free.
 *  KILN_OK or KILN_ERR_OOM (nothing to free). */
int rt_plan(graph_node *const *roots, int n, bool passes, pass_plan *p);

/** Backend b's compiled and loaded code for k (kernel_cache.c), from the
 *  cache (keyed by k's bytes and b) or compiled now by b->compile and
 *  cached. *cache_hit tells which; a kernel loaded from the disk cache
 *  (disk_cache.c) is a hit with its load time in *load_ns (ns; 0
 *  otherwise; load_ns may be NULL). */
int rt_kernel_get(const rt_backend *b, const kir_kernel *k, rt_code *code, bool *cache_hit, int64_t *load_ns,
                  char *err, size_t errlen);
/* ---- on-disk kernel cache (disk_cache.c, docs/cache.md) ---- */
/** True when KILN_CACHE_DIR (or its default) names a usable directory;
 *  read once (a KILN_DEBUG line says why it is off, when it is). */
bool rt_disk_cache_on(void);
/** For tests: forgets the settings, so the environment is read again. */
void rt_disk_cache_reset(void);
/** For tests: the disk cache's directory instead of KILN_CACHE_DIR's
 *  (NULL: the environment's again; "": off). Settings are read again. */
void rt_disk_cache_set_dir(const char *dir);
/** k's code from the disk cache under `key` [len] (the in-memory cache's
 *  key; the code generator's identity is added), *load_ns > 0; or, on a
 *  miss or a bad entry, compiled now (llvm_compile's results and errors)
 *  and stored, *load_ns = 0. Only when rt_disk_cache_on(). */
int rt_disk_kernel(const kir_kernel *k, const unsigned char *key, size_t len, llvm_kernel_fn *fn, int64_t *load_ns,
                   char **ir_text, char *err, size_t errlen);
/** The GEMM micro-kernel for s (an llvm_gemm_builder): from the disk
 *  cache when it is on (key: llvm_gemm_key's bytes and the code
 *  generator's identity, as rt_disk_kernel's), else compiled, then
 *  stored; *compiled says which. Errors: llvm_gemm_compile's. */
int rt_disk_gemm(const llvm_gemm_spec *s, llvm_gemm_fn *out, bool *compiled, char *err, size_t errlen);
/** A 64-bit hash of len bytes (the caches' keys). */
uint64_t rt_hash_bytes(const unsigned char *p, size_t len);
/** Number of kernels compiled so far (cache misses), for tests. */
int64_t rt_compile_count(void);
/** Compiled kernels held by the in-memory kernel cache. */
int64_t rt_kernel_cache_entries(void);
/** For tests (the allocation-failure walk): forgets every compiled
 *  kernel, so the next forces compile again (their code stays in the JIT
 *  until exit). Only while no force runs and no schedule is cached
 *  (rt_schedule_cache_clear first: cached schedules hold entry points). */
void rt_kernel_cache_clear(void);
/** Fusion on (1) or off (0: one kernel per node), overriding KILN_FUSE;
 *  -1 goes back to the environment's choice. For tests. */
void rt_set_fusion(int enabled);
/** KILN_DEBUG_CACHE=1: every schedule-cache hit is checked against a
 *  fresh fusion pass and a fresh lowering of each kernel (cache_check.c);
 *  a difference fails the force with KILN_ERR_COMPILE. */
bool rt_debug_cache(void);
/** 1 turns the check on, 0 off, -1 goes back to KILN_DEBUG_CACHE. */
void rt_set_debug_cache(int enabled);
/* ---- KILN_DEBUG output (debug.c) ---- */
/** KILN_DEBUG level (read once from the environment). */
int rt_debug_level(void);
/** "[4096, 4096]" (sizes [ndim]) into buf; returns buf. */
const char *rt_fmt_sizes(char *buf, size_t len, int ndim, const int64_t *sizes);
/** Level 1: the line of one kernel run; sizes [ndim] is its output shape. */
void rt_debug_kernel(const kiln_kernel_record *r, int ndim, const int64_t *sizes);
/** Level 2: the schedule of a realize (its plan, fusion decided). */
void rt_debug_schedule(const pass_plan *p, bool cache_hit);
/** Level 4 on the CUDA backends: the CUDA C of k, as it is built. */
void rt_debug_cuda_source(const kir_kernel *k);

/* ---- schedule cache (schedule.c) ---- */
/** One kernel of a cached schedule: the node at schedule position `pos`,
 *  lowered for `in_place`, compiled by `backend` to `code`, with its
 *  binding (slots say where each buffer and fill value came from: see
 *  pass_rebind). */
typedef struct rt_sched_kernel {
  int pos;
  bool in_place, split;
  int64_t extent;
  const rt_backend *backend; /* rt_backend_for(the node): compiles, launches */
  rt_code code;
  char name[96];
  pass_binding binding;
} rt_sched_kernel;

typedef struct rt_schedule rt_schedule;

/** The key of the schedule of plan p (collected, not yet fused) for
 *  `roots`, in a per-thread buffer valid until the thread's next call;
 *  NULL on OOM. Called once per collect: it numbers the pending fill and
 *  arange sources p's nodes read in their plan marks; it writes no other
 *  node (none realized). */
const unsigned char *rt_schedule_key(const pass_plan *p, graph_node *const *roots, int n_roots, bool fusion,
                                     size_t *len);
/** The cached schedule with this key, or NULL. */
const rt_schedule *rt_schedule_find(const unsigned char *key, size_t len);
/** The scheduler's decision for one schedule position: fused into its
 *  readers, and the position of the multi-output kernel that stores it
 *  (the plan's pass_host), -1 for none. */
typedef struct rt_decision {
  bool fused;
  uint8_t n_inputs; /* the node's inputs when it was scheduled: slots are checked against it */
  int32_t host;
} rt_decision;

/** Fills d [p->n] from the plan (after pass_fuse). */
void rt_decisions_get(const pass_plan *p, rt_decision *d);
/** Sets the plan's fusion and multi-output decisions as the cached
 *  schedule decided (the plan has the cached schedule's key). */
void rt_schedule_apply(const rt_schedule *s, pass_plan *p);
/** The cached decisions (*d, [return value] positions). */
int rt_schedule_decisions(const rt_schedule *s, const rt_decision **d);
/** The cached kernel rooted at schedule position pos, or NULL. */
const rt_sched_kernel *rt_schedule_kernel(const rt_schedule *s, int pos);
/** Caches a schedule (copies key): decided [n] (the decisions per
 *  position) and the kernels ks [nk] lowered for it. An entry whose
 *  positions or binding slots fall outside the schedule is not cached. */
void rt_schedule_insert(const unsigned char *key, size_t len, const rt_decision *decided, int n,
                        const rt_sched_kernel *ks, int nk);
/** Schedule-cache hits so far (for tests and benchmarks). */
int64_t rt_schedule_hits(void);
/** Lowering fallbacks so far: kernels whose group did not fit one kernel
 *  at run time, so that their inputs were realized first in a nested
 *  force (realize.c) and the schedule was not cached (for tests: the
 *  fusion pass should leave none, fuse.c rule 6 and fit_rows). */
int64_t rt_lowering_fallbacks(void);
/** Schedules held by the schedule cache, and their bytes. */
void rt_schedule_cache_size(int64_t *entries, int64_t *bytes);
/** For tests: empties the schedule cache. Only while no force runs. */
void rt_schedule_cache_clear(void);

/* ---- KILN_DEBUG_CACHE checks of schedule-cache hits (cache_check.c) ---- */
/** Compares the cached decisions (applied to p) with a fresh pass_fuse
 *  over p (whose result then stays in p). KILN_OK, or KILN_ERR_COMPILE
 *  naming the first position that differs. */
int rt_check_cached_decisions(const rt_schedule *s, pass_plan *p, graph_node *const *roots, int n_roots, bool fusion,
                              char *err, size_t errlen);
/** Lowers n (position of p) again and compares the kernel (its compiled
 *  entry point, through the kernel cache) and its binding with k, the
 *  cached kernel rebound to this force. KILN_OK or KILN_ERR_COMPILE. */
int rt_check_cached_kernel(const pass_plan *p, const graph_node *n, const rt_sched_kernel *k, char *err,
                           size_t errlen);

/* ---- CUDA check of CPU kernels (device_check.c) ---- */
/** What the CUDA check has done since the start (or rt_cuda_check_reset). */
typedef struct rt_cuda_check_stats {
  int64_t kernels;     /* distinct kernels checked */
  int64_t compiles;    /* kernel × arch checks run (sm_80 CUBIN, compute_90 PTX + ptxas) */
  int64_t failures;    /* checks the toolchain rejected */
  int64_t unavailable; /* kernels skipped because NVRTC could not be loaded */
  char first_error[1024];
} rt_cuda_check_stats;
/** Checks k (just compiled for the CPU) with the CUDA toolchain when the
 *  check is on; failures are counted and printed, never returned. */
void rt_cuda_check(const kir_kernel *k);
/** 1 turns the check on, 0 off, -1 goes back to KILN_CUDA_CHECK. */
void rt_set_cuda_check(int enabled);
void rt_cuda_check_get(rt_cuda_check_stats *out);
/** Zeroes the counters and forgets which kernels were checked. */
void rt_cuda_check_reset(void);

/* ---- extern ops (extern.c, blas.c; MATMUL through the backend's contract) ---- */
/** Runs an EXTERN node (realizing any pending input first) into a new
 *  buffer, records its profile line, and marks it realized. */
int rt_run_extern(graph_node *n, char *err, size_t errlen);
/** MATMUL through OpenBLAS into out (contiguous [batch..., M, N]); in[i]:
 *  host data of input i's buffer (its view's offset not applied). Split
 *  over Kiln's pool (batches, else blocks of C's rows or columns), each
 *  part one single-threaded OpenBLAS call: the first call sets OpenBLAS to
 *  one thread, process-wide (a host program's own OpenBLAS calls become
 *  single-threaded too). */
int rt_blas_matmul(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
/** Pool threads the calling thread's last rt_blas_matmul ran on. */
int rt_blas_last_threads(void);
/** MATMUL on the host through the GEMM KILN_GEMM or the auto rule picks
 *  (matmul_host.c): rt_gemm_matmul or rt_blas_matmul, same arguments and
 *  errors. The llvm and cuda-emu backends' contraction. */
int rt_matmul_host(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
/** What the calling thread's last rt_matmul_host ran: *jit when the
 *  generated GEMM; returns the pool threads it used. */
int rt_matmul_host_last(bool *jit);
/** True when rt_matmul_host runs n (an F32/F64 MATMUL) with the
 *  generated GEMM: KILN_GEMM=jit, or auto and the rule says so. */
bool rt_gemm_selected(const graph_node *n);
/** For tests and benchmarks: 0 auto, 1 jit, 2 blas instead of KILN_GEMM;
 *  -1 goes back to the environment's. */
void rt_gemm_set_mode(int mode);
/** MATMUL through the generated GEMM (gemm.c: the LLVM micro-kernel in
 *  BLIS's loops, split over the pool) into out (contiguous [batch..., M,
 *  N]); in[i]: host data of input i's buffer (its view's offset not
 *  applied). F32/F64, any sizes (K = 0 zeroes out) and strides.
 *  KILN_ERR_OOM when packing scratch cannot be allocated (out is then
 *  partly written; the caller releases it), KILN_ERR_COMPILE when the
 *  micro-kernel does not compile. The first call per variant compiles
 *  it (llvm_gemm_kernel). */
int rt_gemm_matmul(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
/** Pool threads the calling thread's last rt_gemm_matmul ran on. */
int rt_gemm_last_threads(void);
/** Parts along K of the calling thread's last rt_gemm_matmul (1: K was
 *  not cut; gemm.c, plan_k_parts). */
int rt_gemm_last_k_parts(void);
/** Whether the calling thread's last rt_gemm_matmul stored C with
 *  streaming stores (gemm.c, plan_stream). */
bool rt_gemm_last_streamed(void);
/** Nanoseconds the calling thread's last rt_gemm_matmul spent compiling
 *  its micro-kernel (0: it was compiled already); while profiling, that
 *  compile is also an event (`gemm_ukr_f32_14x32`). */
int64_t rt_gemm_last_compile_ns(void);
/** Nanoseconds the calling thread's last rt_gemm_matmul spent loading its
 *  micro-kernel from the disk cache (0: not loaded by that call). */
int64_t rt_gemm_last_load_ns(void);
/** The generated GEMM's cache blocking (elements): MC rows of A and NC
 *  columns of B per packed block, KC of K per block. */
typedef struct rt_gemm_blocking {
  int64_t mc, kc, nc;
} rt_gemm_blocking;
/** The blocking for a micro-kernel of mr × nr and esz-byte elements,
 *  from the host's cache sizes (read once) or rt_gemm_set_blocking. */
rt_gemm_blocking rt_gemm_blocking_for(int mr, int nr, int esz);
/** For tuning and tests: MC, KC, NC instead of the cache rule's (0: the
 *  rule's). Set it between products, not during one. */
void rt_gemm_set_blocking(int64_t mc, int64_t kc, int64_t nc);
/** The generated micro-kernel for products run on the calling thread
 *  over packed panels (rt_gemm_block_panels): the fused attention
 *  kernels' block products (attention_kernels.c). */
typedef struct rt_gemm_block {
  llvm_gemm_spec spec;
  llvm_gemm_fn ukr;
  int esz;
} rt_gemm_block;
/** The target's micro-kernel for dtype (F32/F64), compiled or loaded at
 *  its first use. Errors as rt_gemm_matmul's. */
int rt_gemm_block_init(rt_gemm_block *g, kiln_dtype dtype, char *err, size_t errlen);
/** Packs A [m, k] at src (strides rs, cs) into g's MR-row panels: panel
 *  p (rows p·MR..) at dst + p·k·MR elements, [k, MR] each, rows past m
 *  zero. */
void rt_gemm_block_pack_a(const rt_gemm_block *g, void *dst, const void *src, int64_t rs, int64_t cs, int64_t m,
                          int64_t k);
/** Packs B [k, n] at src into g's NR-column panels: panel q (columns
 *  q·NR..) at dst + q·k·NR elements, [k, NR] each (row r of a panel at
 *  r·NR: rows [r0, r0 + k') of it are a panel of k' rows). */
void rt_gemm_block_pack_b(const rt_gemm_block *g, void *dst, const void *src, int64_t rs, int64_t cs, int64_t k,
                          int64_t n);
/** C [m, n] (row stride ldc) = A·B, or += with acc, from packed panels on
 *  the calling thread: A's panel p at a + p·as elements ([k, MR]), B's
 *  panel q at b + q·bs ([k, NR], 64-byte aligned). */
void rt_gemm_block_panels(const rt_gemm_block *g, int64_t m, int64_t n, int64_t k, const void *a, int64_t as,
                          const void *b, int64_t bs, void *c, int64_t ldc, bool acc);
/** When input i of n (an F32/F64 MATMUL on the CPU) is a reshape copy
 *  (a CAST of the same dtype) of a realized host buffer, and n's view of
 *  it splits over the copy's input (graph_view_split, into *s when s is
 *  not NULL): that buffer's data, from which the generated GEMM can pack
 *  the operand (gemm_pack.c), the copy unwritten. Else NULL. The copy's
 *  own state is not looked at: an operand reads through exactly when its
 *  host data (rt_extern's in[i]) is this pointer. */
const void *rt_gemm_copy_source(const graph_node *n, int i, graph_split_view *s);
/** Some input of n is such a copy, still pending. */
bool rt_gemm_pending_copy(const graph_node *n);
/** Input i is such a copy, still pending, and the generated GEMM runs n:
 *  rt_run_extern leaves it pending and the GEMM reads through it. */
bool rt_gemm_reads_through(const graph_node *n, int i);
/** Packs `lines` lines (along outer dim ldim of s, from l0) × kc (along
 *  outer dim kdim, from k0) of the split operand at base (the copy's
 *  input's data, s->offset and the batch's offset applied) into panels
 *  of ld lines: panel p at dst + p·ld·kc elements, dst[k·ld + l], lines
 *  past the end zero. esz 4 or 8; ld ≤ LLVM_GEMM_MAX_NR. */
void rt_gemm_pack_split(char *dst, const char *base, const graph_split_view *s, int ldim, int64_t l0,
                        int64_t lines, int64_t ld, int kdim, int64_t k0, int64_t kc, int esz);
/** True when n (a MATMUL on KILN_CUDA) can run through cuBLAS now: F32 or
 *  F64, inputs realized on the real device (the cuda backend's memory),
 *  no operand to pack, 32-bit sizes, cuBLAS available. */
bool rt_cublas_can_run(const graph_node *n);
/** MATMUL through cuBLAS into out (a device buffer, contiguous [batch...,
 *  M, N]), waiting for the stream; only when rt_cublas_can_run(n). */
int rt_cublas_matmul(graph_node *n, graph_buffer *out, char *err, size_t errlen);
struct cuda_gemm_spec; /* codegen_cuda/cuda_backend.h */
/** MATMUL n as a tiled GEMM product (cuda_gemm_run.c): false for other
 *  dtypes than F32/F64, an empty product, an operand not realized (read
 *  through a pending copy) or batch dims no single stride steps. */
bool rt_cuda_gemm_spec_of(const graph_node *n, struct cuda_gemm_spec *s);
/** Runs n (rt_cuda_gemm_spec_of gave s) through the tiled GEMM kernel of
 *  its variant — under cuda-emu (emu) or on the device — into a new
 *  buffer *out of n's device; sets run's times, on_device and tiled.
 *  Errors: the kernel's build or launch, KILN_ERR_OOM. */
int rt_cuda_gemm_contract(graph_node *n, const struct cuda_gemm_spec *s, bool emu, graph_buffer **out,
                          rt_extern_run *run, char *err, size_t errlen);
struct rt_gemm_epi; /* gemm_epilogue.h */
/** The same with the fused epilogue epi (the contract_epilogue of cuda
 *  and cuda-emu) into out (the epilogue's result, [batch..., M, N] of
 *  n's dtype on n's device): each step applied to C's element before
 *  its store. KILN_ERR_UNSUPPORTED, nothing run, when the tiled GEMM
 *  cannot take n (rt_cuda_gemm_spec_of) or the epilogue (an after hook,
 *  a batched operand no single stride steps); else as
 *  rt_cuda_gemm_contract. */
int rt_cuda_gemm_contract_epi(graph_node *n, const struct rt_gemm_epi *epi, bool emu, graph_buffer *out,
                              rt_extern_run *run, char *err, size_t errlen);
/** One operand of a fused attention: element (r, c) of batch i at
 *  base[mm_batch_offset(view, nb, i) + r·rs + c·cs] (elements; base: the
 *  data with the view's offset, and any column shift, applied). */
typedef struct rt_attention_operand {
  const char *base;
  const graph_view *view; /* for its batch dims' strides */
  int64_t rs, cs;
} rt_attention_operand;
/** One attention softmax(q·kᵀ·scale + mask)·v over `batches` batches (nb
 *  batch dims): q [L, E], k [S, E], v [S, Ev], mask [L, S] (BOOL when
 *  bool_mask, else dtype) per batch; for the backward also dO [L, Ev]
 *  and D = rowsum(dO ∘ O) [L, 1]. */
typedef struct rt_attention {
  kiln_dtype dtype; /* F32 or F64 */
  int nb, kind;     /* GRAPH_ATTENTION_* (graph.h) */
  int64_t batches, L, S, E, Ev;
  double scale;
  bool bool_mask;
  rt_attention_operand q, k, v, mask, dout, dsum;
} rt_attention;
/** The fused forward of a (attention_kernels.c): O into out (contiguous
 *  [batches, L, Ev]), and the rows' log-sum-exp into lse [batches, L]
 *  when not NULL. KILN_ERR_OOM when an item's blocks cannot be
 *  allocated, KILN_ERR_COMPILE when the micro-kernel does not compile. */
int rt_attention_run(const rt_attention *a, void *out, void *lse, char *err, size_t errlen);
/** Computes o, the last matmul of a hand-written attention the fusion
 *  pass planned (pass_attention_planned gave m), with the fused forward:
 *  realizes q, k, v and the mask where still pending, sets o's buffer;
 *  the chain's nodes stay pending. Errors as rt_attention_run's. */
int rt_attention_matmul(graph_node *o, const graph_attention *m, char *err, size_t errlen);
/** The ATTENTION and ATTENTION_BWD extern ops (attention_kernels.c; layouts in
 *  graph/ops.def): in[i] the host data of input i's buffer, out a fresh
 *  buffer of n's numel. Errors as rt_attention_run's. */
int rt_attention_forward(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
int rt_attention_backward(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
/** Their profiler record (rt_extern_describe_fn): attention_BxLxSxE or
 *  attention_bwd_..., the products' multiply-adds as flops. */
void rt_attention_describe(const graph_node *n, bool on_device, kiln_kernel_record *r, char *name, size_t len);
/** The ARGSORT and MODE extern ops (sort_loops.c): in[0] the host data of the
 *  input's buffer, out a fresh buffer of n's numel (I64). KILN_ERR_OOM
 *  when a row's scratch cannot be allocated. */
int rt_sort_argsort(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
int rt_sort_mode(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
/** Threads the calling thread's last ARGSORT/MODE loop ran on (for its
 *  profiler record). */
int rt_sort_last_threads(void);

/* ---- caching allocator (alloc.c) ---- */
/** Returns every cached free buffer to the system. */
void rt_alloc_trim(void);
/** Bytes held in the cache (free, ready for reuse). */
int64_t rt_alloc_cached_bytes(void);
/** Bytes (by size class) in host buffers handed out and not freed yet,
 *  and the most at once since the start or the last rt_alloc_reset_peak
 *  (which sets it to the bytes live now). */
int64_t rt_alloc_live_bytes(void);
int64_t rt_alloc_peak_bytes(void);
void rt_alloc_reset_peak(void);
/** At most `bytes` of freed buffers are kept (overriding env
 *  KILN_CACHE_BYTES, a non-negative integer; default 2 GiB); -1 goes back
 *  to the environment's value. For tests. */
void rt_alloc_set_cache_limit(int64_t bytes);

/* ---- profiler records (profiler.c) ---- */
/** True between rt_profile_begin and rt_profile_end (one relaxed load). */
bool rt_profiling(void);
/** CLOCK_MONOTONIC in nanoseconds. */
int64_t rt_now_ns(void);
/** Adds the record of one kernel run that started at start_ns on this
 *  thread, with the chunks [n_chunks] the pool ran it as (0 when it ran
 *  inline). r->name is copied (interned). */
void rt_profile_add(const kiln_kernel_record *r, int64_t start_ns, const rt_pool_span *chunks, int n_chunks);
/** Adds a compile event of `kernel` on this thread. */
void rt_profile_compile(const char *kernel, int64_t start_ns, int64_t end_ns);

/** Small positive id of the calling thread (1, 2, ... in order of first
 *  use), the trace file's track number. */
int rt_thread_id(void);
/** Names the calling thread's track in trace files (printf format). */
void rt_thread_set_name(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* KILN_RT_INTERNAL_H */
