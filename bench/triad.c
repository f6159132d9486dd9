/*
 * triad.c — the machine's memory-bandwidth limit, measured the way STREAM
 * does: a[i] = b[i] + s*c[i] over F32 arrays far bigger than the last-level
 * cache, split evenly over `threads` pthreads, best of `reps` runs.
 *
 * Bytes per run = 3 arrays × n × 4 (two reads, one write; the write-allocate
 * read is not counted, as in STREAM and as in Kiln's workload figures).
 * bench_read is the read-only limit (reductions only read, and this
 * machine reads faster than it reads-and-writes): the sum of all three
 * arrays, each thread summing its slices of each, with 64-byte vectors
 * and four independent accumulators so neither the adds' latency nor the
 * vector width bounds it. Bytes per run = 3 × n × 4.
 *
 * Each thread first-touches its own slices so pages sit near the thread that
 * uses them. Thread 0 is the caller; runs are separated by barriers and
 * timed by thread 0 between them.
 *
 * The arrays are 2 MiB aligned and advised to use transparent huge pages,
 * as Kiln's allocator does, so the limit is not handicapped by 4 KiB pages
 * (hardware prefetchers stop at page boundaries). They are kept between
 * calls, so a measurement at the start and one at the end of a run use the
 * same memory; bench_triad_free releases them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

typedef struct triad_job {
  float *restrict a, *restrict b, *restrict c;
  int64_t lo, hi; /* this thread's element range [lo, hi) */
  int reps;
  int id;
  pthread_barrier_t *bar;
  int64_t best_ns; /* filled by thread 0 */
} triad_job;

/* The kernel itself, kept separate so the compiler sees restrict pointers
 * and vectorises it. */
static void triad_kernel(float *restrict a, const float *restrict b, const float *restrict c, float s,
                         int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
}

static void *triad_thread(void *arg) {
  triad_job *j = arg;
  for (int64_t i = j->lo; i < j->hi; i++) {
    j->a[i] = 0.0f;
    j->b[i] = 1.0f + (float)(i & 7);
    j->c[i] = 2.0f - (float)(i & 3);
  }
  int64_t best = INT64_MAX;
  for (int r = 0; r < j->reps; r++) {
    pthread_barrier_wait(j->bar);
    int64_t t0 = bench_now_ns();
    triad_kernel(j->a, j->b, j->c, 3.0f, j->lo, j->hi);
    pthread_barrier_wait(j->bar);
    int64_t dt = bench_now_ns() - t0;
    if (dt < best) best = dt;
  }
  j->best_ns = best;
  return NULL;
}

volatile double bench_triad_checksum;

typedef float v16 __attribute__((vector_size(64)));

/* Sum of p[lo, hi) (lo, hi multiples of 64 elements). */
static float read_kernel(const float *p, int64_t lo, int64_t hi) {
  v16 acc[4] = {{0}};
  for (int64_t i = lo; i < hi; i += 64)
    for (int k = 0; k < 4; k++) {
      v16 x;
      memcpy(&x, p + i + 16 * k, sizeof x);
      acc[k] += x;
    }
  v16 t = acc[0] + acc[1] + acc[2] + acc[3];
  float s = 0;
  for (int k = 0; k < 16; k++) s += t[k];
  return s;
}

typedef struct read_job {
  const float *arr[3];
  int64_t lo, hi;
  int reps;
  pthread_barrier_t *bar;
  int64_t best_ns;
  float sum;
} read_job;

static void *read_thread(void *arg) {
  read_job *j = arg;
  int64_t best = INT64_MAX;
  for (int r = 0; r < j->reps; r++) {
    pthread_barrier_wait(j->bar);
    int64_t t0 = bench_now_ns();
    for (int a = 0; a < 3; a++) j->sum += read_kernel(j->arr[a], j->lo, j->hi);
    pthread_barrier_wait(j->bar);
    int64_t dt = bench_now_ns() - t0;
    if (dt < best) best = dt;
  }
  j->best_ns = best;
  return NULL;
}

static float *arr[3]; /* a, b, c of arr_n elements each, or NULL */
static int64_t arr_n;

void bench_triad_free(void) {
  for (int i = 0; i < 3; i++) {
    free(arr[i]);
    arr[i] = NULL;
  }
  arr_n = 0;
}

static bool triad_alloc(int64_t n) {
  if (arr_n == n) return true;
  bench_triad_free();
  size_t huge = (size_t)2 << 20, bytes = ((size_t)n * sizeof(float) + huge - 1) / huge * huge;
  for (int i = 0; i < 3; i++) {
    if (posix_memalign((void **)&arr[i], huge, bytes) != 0) {
      arr[i] = NULL;
      bench_triad_free();
      return false;
    }
#ifdef MADV_HUGEPAGE
    madvise(arr[i], bytes, MADV_HUGEPAGE); /* advice only: failure is fine */
#endif
  }
  arr_n = n;
  return true;
}

double bench_triad(int64_t n, int threads, int reps) {
  if (threads < 1 || threads > 64 || n < threads || reps < 1 || !triad_alloc(n)) return -1;
  size_t bytes = (size_t)n * sizeof(float);
  float *a = arr[0], *b = arr[1], *c = arr[2];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)threads);
  triad_job jobs[64];
  pthread_t tids[64];
  for (int t = 0; t < threads; t++) {
    /* slices start on 16-element (64-byte) boundaries */
    int64_t lo = (n * t / threads) & ~(int64_t)15;
    int64_t hi = t == threads - 1 ? n : (n * (t + 1) / threads) & ~(int64_t)15;
    jobs[t] = (triad_job){.a = a, .b = b, .c = c, .lo = lo, .hi = hi, .reps = reps, .id = t, .bar = &bar};
  }
  for (int t = 1; t < threads; t++) {
    if (pthread_create(&tids[t], NULL, triad_thread, &jobs[t]) != 0) {
      /* earlier threads would wait at the barrier forever: end here */
      fprintf(stderr, "kiln_bench: triad: pthread_create failed for thread %d of %d\n", t, threads);
      exit(1);
    }
  }
  triad_thread(&jobs[0]);
  for (int t = 1; t < threads; t++) pthread_join(tids[t], NULL);
  pthread_barrier_destroy(&bar);
  /* a checksum the caller can see, so the stores cannot be dropped */
  double sum = 0;
  for (int64_t i = 0; i < n; i += 4099) sum += a[i];
  bench_triad_checksum = sum;
  double gbs = jobs[0].best_ns > 0 ? 3.0 * (double)bytes / (double)jobs[0].best_ns : -1;
  return gbs;
}

double bench_read(int64_t n, int threads, int reps) {
  if (threads < 1 || threads > 64 || reps < 1 || arr_n != n || n < 64 * threads) return -1;
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)threads);
  read_job jobs[64];
  pthread_t tids[64];
  int64_t whole = n & ~(int64_t)63; /* the kernel's 64-element steps; the tail is not read */
  for (int t = 0; t < threads; t++) {
    int64_t lo = (whole * t / threads) & ~(int64_t)63, hi = t == threads - 1 ? whole : (whole * (t + 1) / threads) & ~(int64_t)63;
    jobs[t] = (read_job){.arr = {arr[0], arr[1], arr[2]}, .lo = lo, .hi = hi, .reps = reps, .bar = &bar};
  }
  for (int t = 1; t < threads; t++)
    if (pthread_create(&tids[t], NULL, read_thread, &jobs[t]) != 0) {
      fprintf(stderr, "kiln_bench: read: pthread_create failed for thread %d of %d\n", t, threads);
      exit(1);
    }
  read_thread(&jobs[0]);
  float sum = jobs[0].sum;
  for (int t = 1; t < threads; t++) {
    pthread_join(tids[t], NULL);
    sum += jobs[t].sum;
  }
  pthread_barrier_destroy(&bar);
  bench_triad_checksum = sum;
  return jobs[0].best_ns > 0 ? 3.0 * (double)whole * sizeof(float) / (double)jobs[0].best_ns : -1;
}
