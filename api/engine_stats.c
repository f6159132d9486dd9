/*
 * engine_stats.c — kiln_engine_stats_get: what the engine holds now (graph nodes,
 * buffers, pending work, autodiff history, the runtime's caches) and the
 * process's resident set size, for finding leaks and for soak tests
 * (scripts/soak.sh). Reading the counters forces nothing.
 */
#include <stdio.h>
#include <unistd.h>

#include "api_internal.h"
#include "runtime.h"

/* Resident set size in bytes from /proc/self/statm (Linux), else -1. */
static int64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long long pages_total, pages_resident;
  int got = fscanf(f, "%lld %lld", &pages_total, &pages_resident);
  fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  return got == 2 && page > 0 ? (int64_t)pages_resident * page : -1;
}

KILN_API int kiln_engine_stats_get(kiln_engine_stats *out) {
  if (!out) return api_error(KILN_ERR_ARG, "kiln_engine_stats_get", "out is NULL");
  rt_stats rs;
  rt_stats_get(&rs);
  *out = (kiln_engine_stats){
      .live_nodes = graph_live_nodes(),
      .live_buffers = graph_live_buffers(),
      .pending_nodes = graph_pending_count(),
      .history_weight = graph_history_weight(),
      .allocator_cached_bytes = rs.allocator_cached_bytes,
      .allocator_live_bytes = rs.allocator_live_bytes,
      .allocator_peak_bytes = rs.allocator_peak_bytes,
      .kernels_cached = rs.kernels_cached,
      .schedules_cached = rs.schedules_cached,
      .schedule_bytes = rs.schedule_bytes,
      .kernels_compiled = rs.kernels_compiled,
      .rss_bytes = rss_bytes(),
  };
  return KILN_OK;
}

KILN_API void kiln_engine_stats_reset_peak(void) { rt_stats_reset_peak(); }
