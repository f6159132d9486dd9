/*
 * profile.c — kernel-run records for the profiler API. Off by default:
 * the cost when off is one branch per kernel run (rt_profiling()).
 * Records are appended under a mutex, so kernels on any thread can add.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime.h"

typedef struct rt_record {
  kiln_kernel_record rec;
  char name[96];
} rt_record;

static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
static bool prof_on;
static rt_record *records;
static int n_records, cap_records;

bool rt_profiling(void) { return prof_on; }

int64_t rt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void rt_profile_begin(void) {
  pthread_mutex_lock(&prof_lock);
  free(records);
  records = NULL;
  n_records = cap_records = 0;
  prof_on = true;
  pthread_mutex_unlock(&prof_lock);
}

void rt_profile_end(void) { prof_on = false; }

void rt_profile_add(const kiln_kernel_record *r) {
  pthread_mutex_lock(&prof_lock);
  if (n_records == cap_records) {
    int cap = cap_records ? cap_records * 2 : 256;
    rt_record *bigger = realloc(records, sizeof *bigger * (size_t)cap);
    if (!bigger) {
      pthread_mutex_unlock(&prof_lock);
      return; /* a lost record is not worth failing a kernel run */
    }
    /* names point into the array: re-point them after moving */
    for (int i = 0; i < n_records; i++) bigger[i].rec.name = bigger[i].name;
    records = bigger;
    cap_records = cap;
  }
  rt_record *dst = &records[n_records++];
  dst->rec = *r;
  strncpy(dst->name, r->name ? r->name : "", sizeof dst->name - 1);
  dst->name[sizeof dst->name - 1] = 0;
  dst->rec.name = dst->name;
  pthread_mutex_unlock(&prof_lock);
}

int rt_profile_count(void) { return n_records; }

bool rt_profile_get(int i, kiln_kernel_record *out) {
  pthread_mutex_lock(&prof_lock);
  bool ok = i >= 0 && i < n_records;
  if (ok) *out = records[i].rec;
  pthread_mutex_unlock(&prof_lock);
  return ok;
}
