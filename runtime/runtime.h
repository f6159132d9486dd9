/*
 * runtime.h — execution: scheduling pending nodes into kernel runs, the
 * compiled-kernel cache, and debug output. Internal.
 */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stddef.h>

#include "graph.h"
#include "kir.h"
#include "lower.h"
#include "llvm_backend.h"

/** Realizes every node in nodes[0..n) and the pending nodes they need,
 *  one kernel per node, in dependency order. On failure nothing already
 *  realized is lost, the failed node stays pending, and the message is in
 *  err. Returns KILN_OK or a negative kiln_status. */
int rt_realize(graph_node *const *nodes, int n, char *err, size_t errlen);

/** Compiled entry point for k, from the cache or compiled now (then cached
 *  by kir_to_string(k)). *cache_hit tells which. */
int rt_kernel_get(const kir_kernel *k, llvm_kernel_fn *fn, bool *cache_hit, char *err, size_t errlen);
/** A 64-bit hash of len bytes (the caches' keys). */
uint64_t rt_hash_bytes(const unsigned char *p, size_t len);
/** Number of kernels compiled so far (cache misses), for tests. */
int64_t rt_compile_count(void);
/** Fusion on (1) or off (0: one kernel per node), overriding KILN_FUSE;
 *  -1 goes back to the environment's choice. For tests. */
void rt_set_fusion(int enabled);
/** KILN_DEBUG level (read once from the environment). */
int rt_debug_level(void);

/* ---- schedule cache (schedule.c) ---- */
/** One kernel of a cached schedule: the node at schedule position `pos`,
 *  lowered for `in_place`, compiled to fn, with its binding (slots say
 *  where each buffer and fill value came from: see pass_rebind). */
typedef struct rt_sched_kernel {
  int pos;
  bool in_place, split;
  int64_t extent;
  llvm_kernel_fn fn;
  char name[96];
  pass_binding binding;
} rt_sched_kernel;

typedef struct rt_schedule rt_schedule;

/** The key of the schedule `order` [n] (post-order, node->sched_pos set,
 *  sched_mark == order_epoch) for `roots`, in a per-thread buffer valid
 *  until the thread's next call; NULL on OOM. Marks external inputs with
 *  ext_epoch (scratch). */
const unsigned char *rt_schedule_key(graph_node *const *order, int n, graph_node *const *roots, int n_roots,
                                     bool fusion, int order_epoch, int ext_epoch, size_t *len);
/** The cached schedule with this key, or NULL. */
const rt_schedule *rt_schedule_find(const unsigned char *key, size_t len);
/** Sets order[i]->fused as the cached schedule decided. */
void rt_schedule_apply(const rt_schedule *s, graph_node *const *order);
/** The cached kernel rooted at schedule position pos, or NULL. */
const rt_sched_kernel *rt_schedule_kernel(const rt_schedule *s, int pos);
/** Caches a schedule (copies key): fused [n] (the fusion decision per
 *  position) and the kernels ks [nk] lowered for it. */
void rt_schedule_insert(const unsigned char *key, size_t len, const bool *fused, int n,
                        const rt_sched_kernel *ks, int nk);
/** Schedule-cache hits so far (for tests and benchmarks). */
int64_t rt_schedule_hits(void);

/* ---- extern ops (extern.c, blas.c) ---- */
/** Runs an EXTERN node (realizing any pending input first) into a new
 *  buffer, records its profile line, and marks it realized. */
int rt_run_extern(graph_node *n, char *err, size_t errlen);
/** MATMUL through OpenBLAS into out (contiguous [batch..., M, N]). */
int rt_blas_matmul(graph_node *n, graph_buffer *out, char *err, size_t errlen);
/** The SCATTER extern op (index.c): realized inputs, out a fresh buffer
 *  of n's numel; KILN_ERR_INDEX for an index out of range. */
int rt_index_scatter(graph_node *n, graph_buffer *out, char *err, size_t errlen);

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
