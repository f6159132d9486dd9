/*
 * runtime.h — execution: scheduling pending nodes into kernel runs, the
 * compiled-kernel cache, and debug output. Internal.
 */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stddef.h>

#include "graph.h"
#include "kir.h"
#include "llvm_backend.h"

/** Realizes every node in nodes[0..n) and the pending nodes they need,
 *  one kernel per node, in dependency order. On failure nothing already
 *  realized is lost, the failed node stays pending, and the message is in
 *  err. Returns KILN_OK or a negative kiln_status. */
int rt_realize(graph_node *const *nodes, int n, char *err, size_t errlen);

/** Compiled entry point for k, from the cache or compiled now (then cached
 *  by kir_to_string(k)). *cache_hit tells which. */
int rt_kernel_get(const kir_kernel *k, llvm_kernel_fn *fn, bool *cache_hit, char *err, size_t errlen);
/** Number of kernels compiled so far (cache misses), for tests. */
int64_t rt_compile_count(void);
/** Fusion on (1) or off (0: one kernel per node), overriding KILN_FUSE;
 *  -1 goes back to the environment's choice. For tests. */
void rt_set_fusion(int enabled);
/** KILN_DEBUG level (read once from the environment). */
int rt_debug_level(void);

/* ---- extern ops (extern.c, blas.c) ---- */
/** Runs an EXTERN node (realizing any pending input first) into a new
 *  buffer, records its profile line, and marks it realized. */
int rt_run_extern(graph_node *n, char *err, size_t errlen);
/** MATMUL through OpenBLAS into out (contiguous [batch..., M, N]). */
int rt_blas_matmul(graph_node *n, graph_buffer *out, char *err, size_t errlen);

/* ---- caching allocator (alloc.c) ---- */
/** Makes the caching allocator the graph layer's (once; thread-safe). */
void rt_alloc_install(void);
/** Returns every cached free buffer to the system. */
void rt_alloc_trim(void);
/** Bytes held in the cache (free, ready for reuse). */
int64_t rt_alloc_cached_bytes(void);

/* ---- profiler records (profile.c) ---- */
bool rt_profiling(void);
/** CLOCK_MONOTONIC in nanoseconds. */
int64_t rt_now_ns(void);
void rt_profile_begin(void);
void rt_profile_end(void);
void rt_profile_add(const kiln_kernel_record *r);
int rt_profile_count(void);
bool rt_profile_get(int i, kiln_kernel_record *out);

#endif /* KILN_RUNTIME_H */
