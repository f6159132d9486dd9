/*
 * alloc.c — the caching allocator behind every Kiln buffer.
 *
 * Freed buffers are kept by size class and handed out again, so a loop
 * that allocates the same shapes every step touches no fresh pages (the
 * first touch of a fresh large buffer faults in every page, which costs
 * more than the kernel that fills it; bench/'s repeated runs, see
 * bench/README.md, "Method", show the steady state this gives). Classes: powers of two from 64 bytes up
 * to 1 MiB (aligned_alloc, 64-byte aligned); above that, multiples of
 * 2 MiB mapped with mmap at 2 MiB alignment and advised MADV_HUGEPAGE.
 * At most KILN_CACHE_BYTES (default 2 GiB) are kept, in up to N_LARGE
 * large blocks; beyond that, frees go back to the system. (With 64
 * large blocks, the transformer job's step — over a hundred buffers of
 * 2–10 MiB — mapped about 110 fresh blocks a step, and zeroing their
 * huge pages took a fifth of its time; with 1,024 it maps none after the
 * first steps.) A block larger than RAM + swap is refused (NULL:
 * the force reports KILN_ERR_OOM). Installed into the graph layer by the first
 * realize (buffers made before keep the default allocator, which each
 * buffer records); the cache is emptied at exit. Thread-safe (one mutex).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "rt_internal.h"

#define SMALL_MAX (INT64_C(1) << 20)
#define HUGE_PAGE (INT64_C(2) << 20)
#define N_SMALL 21 /* classes 2^6 .. 2^20 use indices 6..20 */
#define N_LARGE 1024 /* cached large blocks, any size */

typedef struct free_block {
  struct free_block *next;
} free_block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static free_block *small[N_SMALL];
static struct {
  void *p;
  int64_t bytes;
} large[N_LARGE];
static int n_large;
static int64_t cached_bytes;
/* Bytes (by size class) in buffers handed out and not yet freed, and the
 * most at once since the start or rt_alloc_reset_peak. */
static atomic_int_fast64_t live_bytes, peak_bytes;
static atomic_int_fast64_t cache_limit = GRAPH_ENV_UNREAD;

static int64_t class_bytes(int64_t bytes) {
  if (bytes > SMALL_MAX) return (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  int64_t c = 64;
  while (c < bytes) c <<= 1;
  return c;
}

static int small_index(int64_t cls) {
  int i = 0;
  while ((INT64_C(1) << i) < cls) i++;
  return i;
}

static int64_t read_limit(void) { return graph_env_int("KILN_CACHE_BYTES", 0, INT64_C(2) << 30, "bytes"); }

static int64_t limit(void) { return graph_env_once(&cache_limit, read_limit); }

void rt_alloc_set_cache_limit(int64_t bytes) {
  atomic_store_explicit(&cache_limit, bytes < 0 ? GRAPH_ENV_UNREAD : bytes, memory_order_relaxed);
}

/* KILN_HUGEPAGES=0 leaves large blocks on the system's default pages. */
static int64_t read_huge_pages(void) {
  const char *e = getenv("KILN_HUGEPAGES");
  return !(e && strcmp(e, "0") == 0);
}

static bool huge_pages(void) {
  static atomic_int_fast64_t on = GRAPH_ENV_UNREAD;
  return graph_env_once(&on, read_huge_pages);
}

/* 2 MiB-aligned anonymous mapping of cls bytes, advised for huge pages. */
static void *map_large(int64_t cls) {
  size_t len = (size_t)(cls + HUGE_PAGE);
  char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t start = ((uintptr_t)raw + (uintptr_t)HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
  size_t head = start - (uintptr_t)raw, tail = len - head - (size_t)cls;
  if (head) munmap(raw, head);
  if (tail) munmap((char *)start + cls, tail);
  if (huge_pages()) madvise((void *)start, (size_t)cls, MADV_HUGEPAGE);
  return (void *)start;
}

static void *take_cached(int64_t cls) {
  if (cls <= SMALL_MAX) {
    free_block *b = small[small_index(cls)];
    if (b) small[small_index(cls)] = b->next;
    if (b) cached_bytes -= cls;
    return b;
  }
  for (int i = 0; i < n_large; i++)
    if (large[i].bytes == cls) {
      void *p = large[i].p;
      large[i] = large[--n_large];
      cached_bytes -= cls;
      return p;
    }
  return NULL;
}

static void release_block(void *p, int64_t cls) {
  if (cls <= SMALL_MAX) free(p);
  else munmap(p, (size_t)cls);
}

/* RAM + swap in bytes. A block larger than that can never be filled:
 * where the kernel overcommits, mapping it would succeed and the first
 * kernel writing it would get the process killed, so it is refused as out
 * of memory (a lazy tensor that large is fine while nothing materializes
 * it). */
static int64_t read_memory_bytes(void) {
  struct sysinfo si;
  if (sysinfo(&si) != 0 || si.mem_unit == 0) return INT64_MAX;
  uint64_t units = (uint64_t)si.totalram + (uint64_t)si.totalswap;
  return units > (uint64_t)INT64_MAX / si.mem_unit ? INT64_MAX : (int64_t)(units * si.mem_unit);
}

static int64_t memory_bytes(void) {
  static atomic_int_fast64_t bytes = GRAPH_ENV_UNREAD;
  return graph_env_once(&bytes, read_memory_bytes);
}

static void count_alloc(int64_t cls) {
  int64_t live = atomic_fetch_add_explicit(&live_bytes, cls, memory_order_relaxed) + cls;
  int64_t peak = atomic_load_explicit(&peak_bytes, memory_order_relaxed);
  while (live > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, live)) {
  }
}

static void *rt_alloc(int64_t bytes) {
  if (bytes > memory_bytes()) return NULL;
  int64_t cls = class_bytes(bytes);
  pthread_mutex_lock(&lock);
  void *p = take_cached(cls);
  pthread_mutex_unlock(&lock);
  if (!p) p = cls <= SMALL_MAX ? aligned_alloc(64, (size_t)cls) : map_large(cls);
  if (p) count_alloc(cls);
  return p;
}

static void rt_free(void *p, int64_t bytes) {
  int64_t cls = class_bytes(bytes);
  atomic_fetch_sub_explicit(&live_bytes, cls, memory_order_relaxed);
  pthread_mutex_lock(&lock);
  bool keep = cached_bytes + cls <= limit() && (cls <= SMALL_MAX || n_large < N_LARGE);
  if (keep && cls <= SMALL_MAX) {
    free_block *b = p;
    b->next = small[small_index(cls)];
    small[small_index(cls)] = b;
  } else if (keep) {
    large[n_large].p = p;
    large[n_large++].bytes = cls;
  }
  if (keep) cached_bytes += cls;
  pthread_mutex_unlock(&lock);
  if (!keep) release_block(p, cls);
}

void rt_alloc_trim(void) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < N_SMALL; i++)
    while (small[i]) {
      free_block *b = small[i];
      small[i] = b->next;
      free(b);
    }
  for (int i = 0; i < n_large; i++) munmap(large[i].p, (size_t)large[i].bytes);
  n_large = 0;
  cached_bytes = 0;
  pthread_mutex_unlock(&lock);
}

int64_t rt_alloc_cached_bytes(void) { return cached_bytes; }

int64_t rt_alloc_live_bytes(void) { return atomic_load_explicit(&live_bytes, memory_order_relaxed); }

int64_t rt_alloc_peak_bytes(void) { return atomic_load_explicit(&peak_bytes, memory_order_relaxed); }

void rt_alloc_reset_peak(void) { atomic_store(&peak_bytes, atomic_load(&live_bytes)); }

static void install(void) {
  static const graph_allocator a = {rt_alloc, rt_free};
  graph_set_allocator(&a);
  atexit(rt_alloc_trim);
}

void rt_alloc_install(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, install);
}
