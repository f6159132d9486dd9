/*
 * pool.h — the CPU thread pool: splits a compiled kernel's parallel range
 * [0, extent) into contiguous chunks, one per thread, the calling thread
 * taking chunk 0. Internal.
 *
 * Chunking is static and deterministic: for a given extent, work size and
 * thread count the chunks are always the same, so every output element is
 * computed by exactly one chunk in a fixed order (reductions stay
 * bit-identical from run to run).
 */
#ifndef KILN_POOL_H
#define KILN_POOL_H

#include <stdint.h>

#include "llvm_backend.h"
#include "runtime.h"

/** Below this many elements touched (extent × cost_per_item) a kernel runs
 *  inline on the caller: waking a second thread costs more than it saves
 *  (pool.c says how to re-time it). */
#define RT_POOL_MIN_WORK ((int64_t)32768)
/** Largest thread count rt_pool_set_threads accepts (larger is clamped). */
#define RT_POOL_MAX_THREADS 256

/** Runs fn(bufs, start, end) over [0, extent) split into contiguous chunks
 *  and returns the number of threads used (1 when it ran inline). Inline
 *  (no synchronisation at all) when extent < 2, when extent × cost_per_item
 *  < RT_POOL_MIN_WORK, when the pool has one thread, or when called from
 *  inside a pool kernel; extent 0 calls fn(bufs, 0, 0) once. Each thread
 *  gets at least RT_POOL_MIN_WORK / 2 work. Safe to call from several
 *  threads at once: parallel runs are serialised (one at a time). Never
 *  fails: if worker threads cannot be created it runs inline. */
int rt_pool_run(llvm_kernel_fn fn, void *const *bufs, int64_t extent, int64_t cost_per_item);

/** One chunk of a parallel run, for the profiler's trace: the thread
 *  (rt_thread_id) that ran it and when. */
typedef struct rt_pool_span {
  int64_t start_ns, end_ns;
  int tid;
} rt_pool_span;

/** rt_pool_run that also times each chunk into spans[RT_POOL_MAX_THREADS]
 *  (when not NULL) and sets *n_spans: the number of chunks when the run
 *  was split across threads, else 0. */
int rt_pool_run_timed(llvm_kernel_fn fn, void *const *bufs, int64_t extent, int64_t cost_per_item,
                      rt_pool_span *spans, int *n_spans);


/** Holds the pool for a library call that leaves the cores to others
 *  (an MPI collective, runtime/extern.c): waits for a running parallel kernel,
 *  keeps other threads' parallel kernels from starting until
 *  rt_pool_release, and makes idle workers sleep at once instead of
 *  spinning for their next job, so the library's threads and peers have the cores.
 *  Not from inside a pool kernel. */
void rt_pool_hold(void);
void rt_pool_release(void);

/** Current thread count: as set, else env KILN_NUM_THREADS (≥ 1), else the
 *  number of online CPUs. */
int rt_pool_threads(void);

#endif /* KILN_POOL_H */
