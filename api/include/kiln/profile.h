/*
 * kiln/profile.h — looking at what Kiln ran and holds: the profiler's
 * kernel records, its table and trace, what the engine holds now
 * (kiln_engine_stats_get) and the Graphviz dump of pending work.
 * Included by kiln/kiln.h (which defines the types used here);
 * docs/api.md, "Profiling", and docs/profiling.md describe them.
 */
#ifndef KILN_PROFILE_H
#define KILN_PROFILE_H

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ profiling */

/* kiln_kernel_record, the record of one kernel run, is in kiln/types.h. */

/** Starts recording every kernel run on any thread (clears old records). */
KILN_API void kiln_profile_begin(void);
/** Stops recording; records stay readable until the next begin. */
KILN_API void kiln_profile_end(void);
/** Number of records. */
KILN_API int kiln_profile_count(void);
/** Copies record i (0-based, in run order) to *out. KILN_ERR_INDEX when
 *  out of range, KILN_ERR_ARG for NULL out. */
KILN_API int kiln_profile_get(int i, kiln_kernel_record *out);
/** Writes the records since the last kiln_profile_begin to f as a table:
 *  a summary line (runs, time in kernels, wall time from begin to end —
 *  or to now while profiling — and kernels compiled), then one row per
 *  kernel name sorted by total run time: backend, ops fused, calls, total
 *  ms, mean µs per call, GB/s (bytes read + written per second, 10^9),
 *  GFLOP/s, % of wall time, compiles and compile ms; a total row last.
 *  Does not force anything. Returns KILN_OK; KILN_ERR_ARG for NULL f,
 *  KILN_ERR_IO when writing fails, KILN_ERR_OOM. (Torch: the table of
 *  torch.profiler's key_averages().) */
KILN_API int kiln_profile_print(FILE *f);
/** Writes the records since the last kiln_profile_begin to path as a
 *  Chrome trace-event JSON file (open it in Perfetto or chrome://tracing):
 *  one complete event ("ph": "X", category "kernel") per kernel run on
 *  the track of the thread that launched it, with the record's fields as
 *  args; one "chunk" event per pool thread a parallel run used, on that
 *  thread's track; one "compile" event per kernel compiled, on the thread
 *  that compiled it. Times in µs from kiln_profile_begin. Replaces the
 *  file. Returns KILN_OK; KILN_ERR_ARG (NULL path), KILN_ERR_IO (cannot
 *  write: no partial file is left), KILN_ERR_OOM. (Torch:
 *  torch.profiler's export_chrome_trace.) */
KILN_API int kiln_profile_write_trace(const char *path);

/** What the engine holds at one moment (kiln_engine_stats_get): counts,
 *  not a profile. A long-running program whose figures keep growing after
 *  its first iteration leaks (scripts/soak.sh checks the examples). */
typedef struct kiln_engine_stats {
  int64_t live_nodes;             /* graph nodes alive: pending work, realized values, recipes kept for kiln_grad */
  int64_t live_buffers;           /* data buffers alive (host or device) */
  int64_t pending_nodes;          /* nodes recorded and not yet forced */
  int64_t history_weight;         /* elements of the orphaned recipes kept for autodiff (docs/autodiff.md) */
  int64_t allocator_cached_bytes; /* freed buffers the caching allocator keeps for reuse, bytes */
  int64_t kernels_cached;         /* compiled kernels in the in-memory kernel cache */
  int64_t schedules_cached;       /* schedules (a graph's kernels and their order) in the schedule cache */
  int64_t schedule_bytes;         /* bytes those schedules take */
  int64_t kernels_compiled;       /* kernels compiled since the process started (cache misses) */
  int64_t rss_bytes;              /* the process's resident set size, bytes (Linux; -1 where unknown) */
  int64_t allocator_live_bytes;   /* host buffers the caching allocator handed out and not taken back,
                                     bytes (by size class: a buffer of 3 MiB counts 4; Torch:
                                     memory_allocated) */
  int64_t allocator_peak_bytes;   /* the most allocator_live_bytes was at once since the process started
                                     or the last kiln_engine_stats_reset_peak (Torch: max_memory_allocated) */
} kiln_engine_stats;

/** Fills *out with what the engine holds now (see kiln_engine_stats);
 *  forces nothing, thread-safe (each counter is read atomically; they are
 *  one snapshot when no other thread records or forces meanwhile).
 *  KILN_ERR_ARG for NULL out (then untouched). (Torch: no one call;
 *  torch.cuda.memory_stats for the allocator's part.) */
KILN_API int kiln_engine_stats_get(kiln_engine_stats *out);
/** Sets allocator_peak_bytes to allocator_live_bytes now, so that the
 *  next kiln_engine_stats_get reports the peak of what runs in between
 *  (a force's intermediates: the fused attention's test checks that no
 *  [L, S] buffer is made). Thread-safe; the peak is process-wide. (Torch:
 *  torch.cuda.reset_peak_memory_stats.) */
KILN_API void kiln_engine_stats_reset_peak(void);

/** kiln_graph_write_dot flags. */
typedef enum kiln_dot_flags {
  KILN_DOT_BEFORE_PASSES = 0, /* the pending graph as recorded */
  KILN_DOT_AFTER_PASSES = 1   /* after simplification and fusion: kernels as clusters */
} kiln_dot_flags;

/** Writes the graph of pending work that forcing ts [n] would run to path
 *  in Graphviz DOT (render with `dot -Tsvg path`). With
 *  KILN_DOT_BEFORE_PASSES: each pending node (op, dtype, sizes), the
 *  realized buffers and fill values it reads, and edges labelled with the
 *  view read when it is not the producer's plain layout. With
 *  KILN_DOT_AFTER_PASSES: the passes run (simplification and fusion, as a
 *  force would — they change no value) and each kernel is a cluster
 *  labelled with its kernel name; a producer fused into two kernels is
 *  drawn in both (it is recomputed). Nothing is computed; realized
 *  tensors have no pending work (an empty graph). Returns KILN_OK;
 *  KILN_ERR_ARG (bad list, NULL tensor or path, unknown flags), KILN_ERR_IO
 *  (cannot write; no partial file is left), KILN_ERR_OOM. */
KILN_API int kiln_graph_write_dot(kiln_tensor *const *ts, int n, const char *path, int flags);

#ifdef __cplusplus
}
#endif
#endif /* KILN_PROFILE_H */
