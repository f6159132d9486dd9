/*
 * clock.c — the benchmarks' clock (bench.h): monotonic nanoseconds, shared
 * by kiln_bench and gemm_tune (with peak.c's roofline).
 */
#include <time.h>

#include "bench.h"

int64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
