/*
 * cache_stats.c — what the runtime's caches hold now, for kiln_engine_stats_get
 * (api/engine_stats.c): compiled kernels, schedules, compiles so far, the
 * bytes the caching allocator keeps for reuse and those it handed out. Each figure is read under
 * its own cache's lock (the allocator's live and peak bytes are atomic
 * counters); together they are a snapshot only when no other
 * thread forces meanwhile.
 */
#include "rt_internal.h"

void rt_stats_get(rt_stats *out) {
  out->kernels_cached = rt_kernel_cache_entries();
  rt_schedule_cache_size(&out->schedules_cached, &out->schedule_bytes);
  out->kernels_compiled = rt_compile_count();
  out->allocator_cached_bytes = rt_alloc_cached_bytes();
  out->allocator_live_bytes = rt_alloc_live_bytes();
  out->allocator_peak_bytes = rt_alloc_peak_bytes();
}

void rt_stats_reset_peak(void) { rt_alloc_reset_peak(); }
