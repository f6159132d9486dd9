/*
 * fault.h — allocation-failure injection, for tests (internal; not part
 * of kiln.h). As Lua's and SQLite's test allocators: one counter over the
 * allocations of every layer, and the armed one fails.
 *
 * What is counted (each is one "allocation"):
 *  - GRAPH_FAULT_HOST: the host allocations of the graph, the API, the
 *    passes and the runtime (nodes, tensors, storages, buffer headers,
 *    plan arrays, the schedule and kernel caches, the profiler, IO
 *    scratch), made through graph_malloc/calloc/realloc/strdup below;
 *  - GRAPH_FAULT_BUFFER: buffer memory (graph_buffer_alloc: the caching
 *    allocator of runtime/alloc.c once installed);
 *  - GRAPH_FAULT_JIT: one LLVM compile (codegen_llvm/llvm_jit.c: the
 *    object is built, then linking and looking it up fails).
 *
 * Armed with graph_fault_arm(n) (tests) or env KILN_FAULT_ALLOC=n (any
 * program: read once, at the first counted allocation), the n-th counted
 * allocation from then on fails, once; the count goes on, so a test can
 * read how many allocations a program made (graph_fault_count). Disarmed,
 * a counted allocation costs one relaxed atomic load. The counter is
 * process-wide: with several threads allocating, which allocation is the
 * n-th depends on their interleaving (tests walk with one thread).
 */
#ifndef KILN_GRAPH_FAULT_H
#define KILN_GRAPH_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum graph_fault_site {
  GRAPH_FAULT_HOST = 0,
  GRAPH_FAULT_BUFFER = 1,
  GRAPH_FAULT_JIT = 2,
  GRAPH_FAULT_SITE_COUNT
} graph_fault_site;

/** Counts one allocation at `site` when counting is on; true when it is
 *  the armed one, which the caller then fails as if out of memory. */
bool graph_fault_hit(graph_fault_site site);
/** n ≥ 1: the n-th counted allocation from now fails (once); 0: count
 *  only; < 0: off (nothing counted). Resets the counts. */
void graph_fault_arm(int64_t n);
/** Allocations counted since the last graph_fault_arm (all sites), or
 *  those of one site. */
int64_t graph_fault_count(void);
int64_t graph_fault_site_count(graph_fault_site site);
/** The site of the injected failure since the last arm, or -1 when it
 *  has not happened yet. */
int graph_fault_fired(void);

/** malloc, calloc, realloc and strdup that count as GRAPH_FAULT_HOST
 *  allocations (free the result with free). graph_realloc leaves p
 *  untouched when it fails, as realloc does. */
void *graph_malloc(size_t bytes);
void *graph_calloc(size_t n, size_t size);
void *graph_realloc(void *p, size_t bytes);
char *graph_strdup(const char *s);

#endif /* KILN_GRAPH_FAULT_H */
