/*
 * profiler.c — what the profiler keeps: one record per kernel run (the
 * public kiln_kernel_record), plus timed events for the trace file — the
 * run itself on the launching thread, one chunk per pool thread it used,
 * and each compile on the thread that compiled.
 *
 * Off by default: the cost when off is one branch per kernel run
 * (rt_profiling()). Everything is appended under one mutex, so kernels and
 * compiles on any thread can add. Kernel names are interned in a table
 * that lives until the next rt_profile_begin, so the `name` of a record
 * stays valid however many records follow.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_internal.h"

static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool prof_on;
static int64_t prof_begin_ns, prof_end_ns;

static kiln_kernel_record *records;
static int n_records, cap_records;
static rt_profile_event *events;
static int n_events, cap_events;

/* interned names: an open-addressing set of malloc'ed strings */
static char **names;
static size_t cap_names, n_names;

bool rt_profiling(void) { return atomic_load_explicit(&prof_on, memory_order_relaxed); }

int64_t rt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------ threads */

#define MAX_NAMED_THREADS 512
static atomic_int next_tid;
static _Thread_local int my_tid;
static char thread_names[MAX_NAMED_THREADS][32];

int rt_thread_id(void) {
  if (!my_tid) my_tid = atomic_fetch_add(&next_tid, 1) + 1;
  return my_tid;
}

void rt_thread_set_name(const char *fmt, ...) {
  int tid = rt_thread_id();
  if (tid >= MAX_NAMED_THREADS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(thread_names[tid], sizeof thread_names[tid], fmt, ap);
  va_end(ap);
}

const char *rt_thread_name(int tid) {
  return tid > 0 && tid < MAX_NAMED_THREADS && thread_names[tid][0] ? thread_names[tid] : NULL;
}

/* ------------------------------------------------------- storage */

static bool grow(void **p, int *cap, int n, size_t elem) {
  if (n < *cap) return true;
  int c = *cap ? *cap * 2 : 256;
  void *bigger = graph_realloc(*p, elem * (size_t)c);
  if (!bigger) return false;
  *p = bigger;
  *cap = c;
  return true;
}

static size_t name_slot(char **tab, size_t cap, const char *s) {
  size_t h = (size_t)rt_hash_bytes((const unsigned char *)s, strlen(s));
  size_t i = h & (cap - 1);
  while (tab[i] && strcmp(tab[i], s) != 0) i = (i + 1) & (cap - 1);
  return i;
}

/* The interned copy of s (NULL on OOM). Called under prof_lock. */
static const char *intern(const char *s) {
  if (2 * (n_names + 1) > cap_names) {
    size_t cap = cap_names ? cap_names * 2 : 64;
    char **tab = graph_calloc(cap, sizeof *tab);
    if (!tab) return NULL;
    for (size_t i = 0; i < cap_names; i++)
      if (names[i]) tab[name_slot(tab, cap, names[i])] = names[i];
    free(names);
    names = tab;
    cap_names = cap;
  }
  size_t i = name_slot(names, cap_names, s);
  if (!names[i]) {
    names[i] = graph_strdup(s);
    if (!names[i]) return NULL;
    n_names++;
  }
  return names[i];
}

static void clear(void) {
  for (size_t i = 0; i < cap_names; i++) free(names[i]);
  free(names);
  free(records);
  free(events);
  names = NULL;
  records = NULL;
  events = NULL;
  cap_names = n_names = 0;
  n_records = cap_records = n_events = cap_events = 0;
}

void rt_profile_begin(void) {
  pthread_mutex_lock(&prof_lock);
  clear();
  prof_begin_ns = rt_now_ns();
  prof_end_ns = 0;
  atomic_store(&prof_on, true);
  pthread_mutex_unlock(&prof_lock);
}

void rt_profile_end(void) {
  pthread_mutex_lock(&prof_lock);
  if (atomic_load(&prof_on)) prof_end_ns = rt_now_ns();
  atomic_store(&prof_on, false);
  pthread_mutex_unlock(&prof_lock);
}

/* Appends an event; false on OOM. Called under prof_lock. */
static bool add_event(rt_event_kind kind, int record, const char *name, int tid, int64_t start, int64_t end) {
  if (!grow((void **)&events, &cap_events, n_events, sizeof *events)) return false;
  events[n_events++] =
      (rt_profile_event){.kind = kind, .record = record, .name = name, .tid = tid, .start_ns = start, .end_ns = end};
  return true;
}

void rt_profile_add(const kiln_kernel_record *r, int64_t start_ns, const rt_pool_span *chunks, int n_chunks) {
  int tid = rt_thread_id();
  pthread_mutex_lock(&prof_lock);
  const char *name = intern(r->name ? r->name : "");
  /* a lost record is not worth failing a kernel run */
  if (name && grow((void **)&records, &cap_records, n_records, sizeof *records)) {
    int i = n_records++;
    records[i] = *r;
    records[i].name = name;
    add_event(RT_EVENT_KERNEL, i, name, tid, start_ns, start_ns + r->run_ns);
    for (int c = 0; c < n_chunks; c++)
      add_event(RT_EVENT_CHUNK, i, name, chunks[c].tid, chunks[c].start_ns, chunks[c].end_ns);
  }
  pthread_mutex_unlock(&prof_lock);
}

void rt_profile_compile(const char *kernel, int64_t start_ns, int64_t end_ns) {
  int tid = rt_thread_id();
  pthread_mutex_lock(&prof_lock);
  const char *name = intern(kernel ? kernel : "");
  if (name) add_event(RT_EVENT_COMPILE, -1, name, tid, start_ns, end_ns);
  pthread_mutex_unlock(&prof_lock);
}

int rt_profile_count(void) {
  pthread_mutex_lock(&prof_lock);
  int n = n_records;
  pthread_mutex_unlock(&prof_lock);
  return n;
}

bool rt_profile_get(int i, kiln_kernel_record *out) {
  pthread_mutex_lock(&prof_lock);
  bool ok = i >= 0 && i < n_records;
  if (ok) *out = records[i];
  pthread_mutex_unlock(&prof_lock);
  return ok;
}

bool rt_profile_snapshot(rt_profile_snapshot_t *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_lock(&prof_lock);
  s->begin_ns = prof_begin_ns;
  s->end_ns = prof_end_ns ? prof_end_ns : rt_now_ns();
  s->records = graph_malloc(sizeof *s->records * (size_t)(n_records ? n_records : 1));
  s->events = graph_malloc(sizeof *s->events * (size_t)(n_events ? n_events : 1));
  bool ok = s->records && s->events;
  if (ok) {
    memcpy(s->records, records, sizeof *records * (size_t)n_records);
    memcpy(s->events, events, sizeof *events * (size_t)n_events);
    s->n_records = n_records;
    s->n_events = n_events;
  }
  pthread_mutex_unlock(&prof_lock);
  if (!ok) rt_profile_snapshot_free(s);
  return ok;
}

void rt_profile_snapshot_free(rt_profile_snapshot_t *s) {
  free(s->records);
  free(s->events);
  memset(s, 0, sizeof *s);
}
