/*
 * runtime.h — what the layers above the runtime (api/ and up) may call:
 * forcing pending nodes, choosing the backend and thread count, device
 * memory reads, BLAS capability queries for matmul recording, runners of
 * extern ops defined above the runtime, the profiler's records and the
 * Graphviz dump. The runtime's own files share rt_internal.h, which also
 * sees the passes and code generators; nothing here exposes them.
 */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "graph.h"

/* ------------------------------------------ forcing (realize.c, dot.c) */

/** Realizes every node in nodes[0..n) and the pending nodes they need,
 *  one kernel per node, in dependency order. On failure nothing already
 *  realized is lost, the failed node stays pending, and the message is in
 *  err. Returns KILN_OK or a negative kiln_status. */
int rt_realize(graph_node *const *nodes, int n, char *err, size_t errlen);
/** Writes the graph of pending work roots [n] need as Graphviz DOT to f,
 *  before or after the passes (see dot.c). */
int rt_write_dot(graph_node *const *roots, int n, bool after_passes, FILE *f, char *err, size_t errlen);

/* ---------------------------------------------- settings (backend.c, pool.c) */

/** kiln_set_backend: "llvm", "cuda-emu" (KILN_ERR_UNSUPPORTED without
 *  NVRTC or a host C++ compiler), or "cuda" (KILN_ERR_DEVICE "no CUDA device:
 *  <why>" without a device); else KILN_ERR_ARG. Message in err. */
int rt_backend_select(const char *name, char *err, size_t errlen);
/** kiln_cpu_target: the CPU the llvm backend compiles for (KILN_CPU, else
 *  the host) into cpu[cpu_len] (truncated; skipped when cpu is NULL or
 *  cpu_len 0), its vector register width in bits and count (each out
 *  pointer may be NULL). KILN_ERR_COMPILE with the reason in err when
 *  that target is unusable (an unknown KILN_CPU); outputs untouched. */
int rt_cpu_target(char *cpu, size_t cpu_len, int *vector_bits, int *vector_regs, char *err, size_t errlen);
/** Sets the kernel thread count (n >= 1, clamped to RT_POOL_MAX_THREADS
 *  of pool.h; n < 1 is ignored). Waits for a running parallel kernel,
 *  stops the old workers; new ones start lazily at the next parallel run. */
void rt_pool_set_threads(int n);

/* --------------------------------------------------- memory (alloc.c, device.c) */

/** Makes the caching allocator the graph layer's (once; thread-safe). */
void rt_alloc_install(void);
/** KILN_OK when KILN_CUDA buffers can be made now: the emulated device
 *  under "cuda-emu" (from kiln_set_backend or $KILN_BACKEND), else device
 *  0 when present; else KILN_ERR_DEVICE "no CUDA device: <why>" (or the
 *  error of an unusable $KILN_BACKEND). */
int rt_device_ready(char *err, size_t errlen);
/** Device -> host: bytes from src at byte `offset` into dst, after every
 *  kernel on the stream finished. */
int rt_device_download(void *dst, const graph_buffer *src, int64_t offset, int64_t bytes, char *err, size_t errlen);

/* ------------------------------------------- BLAS (blas.c, backend_cuda.c) */

/** True when the last two dims of v (a matmul operand) are neither
 *  row- nor column-major with a usable leading dimension: BLAS needs a
 *  contiguous copy (the host packs one; the device path gets it from
 *  ops/linalg.c). */
bool rt_blas_view_needs_copy(const graph_view *v);

/* ------------------------------------------------- extern ops (extern.c) */

/** Runs an extern op (graph/ops.def kind EXTERN) on host memory: in[i]
 *  is the host data of input i's buffer (its view's offset not applied;
 *  an input on KILN_CUDA is copied to the host first), out a fresh host
 *  buffer of n->numel elements of n->dtype (uploaded afterwards when n is
 *  on KILN_CUDA). Returns KILN_OK or a negative kiln_status with the
 *  message in err. */
typedef int (*rt_extern_fn)(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen);
/** Fills the profiler record r of one run of n (r->run_ns is set
 *  already; the name goes into name [len], which the caller keeps while
 *  it uses r). on_device: it ran on device memory, not on host copies. */
typedef void (*rt_extern_describe_fn)(const graph_node *n, bool on_device, kiln_kernel_record *r, char *name,
                                      size_t len);
/** Makes `host` the runner of extern op `op`, its profiler record from
 *  `describe`; with `hold` it runs under rt_pool_hold (idle pool workers
 *  sleep meanwhile: for a library whose own threads or peer processes
 *  need the cores). Until an op has a runner, forcing it fails with
 *  KILN_ERR_UNSUPPORTED. Thread-safe; registering the same runner again
 *  does nothing. KILN_ERR_ARG (message in err) for an op not of kind
 *  EXTERN, one built into the runtime (MATMUL, ARGSORT, MODE), a NULL
 *  function, or an op that already has another runner. */
int rt_extern_register(graph_op op, rt_extern_fn host, rt_extern_describe_fn describe, bool hold, char *err,
                       size_t errlen);

/* ---------------------------------------------------- statistics (cache_stats.c) */

/** What the runtime's caches hold now (kiln_engine_stats_get). */
typedef struct rt_stats {
  int64_t kernels_cached, schedules_cached, schedule_bytes, kernels_compiled, allocator_cached_bytes;
  int64_t allocator_live_bytes, allocator_peak_bytes;
} rt_stats;
void rt_stats_get(rt_stats *out);
/** Sets the allocator's peak (rt_stats.allocator_peak_bytes) to the bytes
 *  live now. */
void rt_stats_reset_peak(void);

/* ------------------------------------------------- profiler (profiler.c) */

/** kiln_profile_begin/_end: start (clearing the old records) and stop
 *  recording every kernel run on any thread. */
void rt_profile_begin(void);
void rt_profile_end(void);
/** Records so far; record i (in run order) into *out, false when out of
 *  range. */
int rt_profile_count(void);
bool rt_profile_get(int i, kiln_kernel_record *out);

typedef enum rt_event_kind { RT_EVENT_KERNEL, RT_EVENT_CHUNK, RT_EVENT_COMPILE } rt_event_kind;
/** A timed event for the trace file: a kernel run (on the launching
 *  thread), one chunk of it (on the pool thread that ran it) or a
 *  compile. `record` indexes the records for runs and chunks, else -1. */
typedef struct rt_profile_event {
  rt_event_kind kind;
  int record, tid;
  const char *name; /* interned: valid until the next rt_profile_begin */
  int64_t start_ns, end_ns;
} rt_profile_event;
/** A copy of everything recorded, for printing and writing traces. */
typedef struct rt_profile_snapshot_t {
  int64_t begin_ns, end_ns; /* the profiled interval (end: now while on) */
  kiln_kernel_record *records;
  int n_records;
  rt_profile_event *events;
  int n_events;
} rt_profile_snapshot_t;
/** Copies the records and events into s (free with _free); false on OOM. */
bool rt_profile_snapshot(rt_profile_snapshot_t *s);
void rt_profile_snapshot_free(rt_profile_snapshot_t *s);
/** The name given to thread tid, or NULL. */
const char *rt_thread_name(int tid);

#endif /* KILN_RUNTIME_H */
