/*
 * fault.c — the allocation-failure hook of fault.h: one process-wide
 * counter over host, buffer and JIT allocations; the armed one fails.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "graph.h"

/* Which counted allocation fails: n ≥ 1, 0 none (counting only), -1 off. */
static atomic_int_fast64_t target = GRAPH_ENV_UNREAD;
static atomic_int_fast64_t counted, per_site[GRAPH_FAULT_SITE_COUNT];
static atomic_int fired = -1;

static int64_t read_target(void) {
  const char *e = getenv("KILN_FAULT_ALLOC");
  int64_t n;
  if (!e) return -1;
  if (graph_env_parse_int(e, 1, &n)) return n;
  fprintf(stderr, "kiln: KILN_FAULT_ALLOC=%s is not a positive integer; no allocation fails\n", e);
  return -1;
}

bool graph_fault_hit(graph_fault_site site) {
  int64_t t = graph_env_once(&target, read_target);
  if (t < 0) return false;
  int64_t k = atomic_fetch_add_explicit(&counted, 1, memory_order_relaxed) + 1;
  atomic_fetch_add_explicit(&per_site[site], 1, memory_order_relaxed);
  if (k != t) return false;
  atomic_store(&fired, (int)site);
  return true;
}

void graph_fault_arm(int64_t n) {
  atomic_store(&counted, 0);
  for (int i = 0; i < GRAPH_FAULT_SITE_COUNT; i++) atomic_store(&per_site[i], 0);
  atomic_store(&fired, -1);
  atomic_store(&target, n < 0 ? -1 : n);
}

int64_t graph_fault_count(void) { return atomic_load(&counted); }

int64_t graph_fault_site_count(graph_fault_site site) { return atomic_load(&per_site[site]); }

int graph_fault_fired(void) { return atomic_load(&fired); }

void *graph_malloc(size_t bytes) { return graph_fault_hit(GRAPH_FAULT_HOST) ? NULL : malloc(bytes); }

void *graph_calloc(size_t n, size_t size) { return graph_fault_hit(GRAPH_FAULT_HOST) ? NULL : calloc(n, size); }

void *graph_realloc(void *p, size_t bytes) { return graph_fault_hit(GRAPH_FAULT_HOST) ? NULL : realloc(p, bytes); }

char *graph_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = graph_malloc(n);
  return p ? memcpy(p, s, n) : NULL;
}
