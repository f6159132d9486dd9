/*
 * cache_check.c — KILN_DEBUG_CACHE=1: every schedule-cache hit is checked
 * against what a miss would have done. The fusion pass runs again over
 * the plan and must reach the cached decisions; each kernel taken from
 * the cache is lowered again and must compile to the same entry point
 * (the kernel cache is keyed by the kernel IR's text, so equal code is
 * the same entry point) with the same binding (buffers, fill values,
 * offsets) as the cached kernel rebound to this force. A difference is a
 * bug in the schedule key or in pass_rebind: the force fails with
 * KILN_ERR_COMPILE and a message naming the position, so a test or a
 * user can report it instead of computing with a wrong kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

static atomic_int_fast64_t debug_cache = GRAPH_ENV_UNREAD;

void rt_set_debug_cache(int enabled) {
  atomic_store_explicit(&debug_cache, enabled < 0 ? GRAPH_ENV_UNREAD : enabled, memory_order_relaxed);
}

static int64_t read_debug_cache(void) {
  const char *e = getenv("KILN_DEBUG_CACHE");
  return e && strcmp(e, "1") == 0;
}

bool rt_debug_cache(void) { return graph_env_once(&debug_cache, read_debug_cache); }

static int mismatch(char *err, size_t errlen, int pos, const char *what) {
  snprintf(err, errlen, "KILN_DEBUG_CACHE: the cached schedule differs from a fresh one at position %d: %s", pos,
           what);
  return KILN_ERR_COMPILE;
}

int rt_check_cached_decisions(const rt_schedule *s, pass_plan *p, graph_node *const *roots, int n_roots, bool fusion,
                              char *err, size_t errlen) {
  const rt_decision *cached;
  int n = rt_schedule_decisions(s, &cached);
  if (n != p->n) return mismatch(err, errlen, -1, "schedule length");
  pass_fuse(p, roots, n_roots, fusion);
  for (int i = 0; i < n; i++) {
    if (cached[i].fused != p->e[i].fused) return mismatch(err, errlen, i, "fusion decision");
    if (cached[i].host != p->e[i].host) return mismatch(err, errlen, i, "multi-output host");
    if (cached[i].n_inputs != p->order[i]->n_inputs) return mismatch(err, errlen, i, "input count");
  }
  return KILN_OK;
}

/* The first field in which two bindings of the same kernel differ, or
 * NULL when they agree. */
static const char *binding_diff(const pass_binding *a, const pass_binding *b) {
  if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs) return "buffer count";
  for (int i = 0; i < a->n_inputs; i++)
    if (a->inputs[i] != b->inputs[i]) return "input buffer";
  for (int j = 0; j < a->n_outputs; j++)
    if (a->outputs[j] != b->outputs[j]) return "extra output";
  if (a->n_args != b->n_args || memcmp(a->args, b->args, sizeof *a->args * (size_t)a->n_args))
    return "integer arguments (offsets, integer fills)";
  if (a->n_fargs != b->n_fargs || memcmp(a->fargs, b->fargs, sizeof *a->fargs * (size_t)a->n_fargs))
    return "float arguments (fill values)";
  if (a->n_ops != b->n_ops || a->bytes_read != b->bytes_read) return "ops or bytes read";
  return NULL;
}

int rt_check_cached_kernel(const pass_plan *p, const graph_node *n, const rt_sched_kernel *k, char *err,
                           size_t errlen) {
  int pos = pass_pos(p, n);
  kir_kernel fresh;
  pass_binding b;
  char why[256];
  int st = pass_lower_node(p, n, k->in_place, &fresh, &b, why, sizeof why);
  if (st != KILN_OK) return mismatch(err, errlen, pos, why);
  rt_code code = {0};
  bool hit;
  st = rt_kernel_get(k->backend, &fresh, &code, &hit, NULL, why, sizeof why);
  bool same_name = strcmp(fresh.name, k->name) == 0;
  kir_free(&fresh);
  if (st != KILN_OK) return mismatch(err, errlen, pos, why);
  if (!same_name) return mismatch(err, errlen, pos, "kernel name");
  if (code.fn != k->code.fn || code.dev != k->code.dev) return mismatch(err, errlen, pos, "kernel code");
  const char *diff = binding_diff(&b, &k->binding);
  return diff ? mismatch(err, errlen, pos, diff) : KILN_OK;
}
