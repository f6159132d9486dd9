/*
 * env.c — settings read once from the environment (KILN_FUSE, KILN_DEBUG,
 * KILN_STREAM_BYTES, ...). The cached value is atomic: the first forces
 * of several threads may read a setting at the same time, and each then
 * computes the same value from the same environment.
 */
#include "graph.h"

int64_t graph_env_once(atomic_int_fast64_t *slot, int64_t (*read)(void)) {
  int64_t v = atomic_load_explicit(slot, memory_order_relaxed);
  if (v == GRAPH_ENV_UNREAD) {
    v = read();
    atomic_store_explicit(slot, v, memory_order_relaxed);
  }
  return v;
}
