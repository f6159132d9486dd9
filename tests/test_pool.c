/*
 * test_pool.c — the CPU thread pool: every element of the parallel range
 * is run by exactly one chunk, chunks are contiguous, near-equal and the
 * same for the same thread count, the thread count can change between
 * runs, several user threads can run kernels at once, a worker never runs
 * its chunk on the caller's CPU when another is allowed, and through the
 * public API a multi-threaded reduction is bit-identical to one thread.
 */
#define _GNU_SOURCE /* setenv, sched_getcpu, CPU_SET, pthread_setaffinity_np */

#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "pool.h"

#define MAX_CHUNKS 64

/* What a test kernel records: per-element write counts, out[i] = i*i, and
 * the chunks it was called with. */
typedef struct chunk_log {
  atomic_int n;
  int64_t start[MAX_CHUNKS], end[MAX_CHUNKS];
} chunk_log;

typedef struct target {
  atomic_int *count; /* [extent] */
  int64_t *out;      /* [extent] */
  chunk_log log;
} target;

/* Kernel-signature function: bufs[0] = atomic_int counts, bufs[1] =
 * int64 out, bufs[2] = chunk_log. */
static void square_kernel(void *const *bufs, int64_t start, int64_t end) {
  atomic_int *count = bufs[0];
  int64_t *out = bufs[1];
  chunk_log *log = bufs[2];
  int slot = atomic_fetch_add(&log->n, 1);
  if (slot < MAX_CHUNKS) {
    log->start[slot] = start;
    log->end[slot] = end;
  }
  for (int64_t i = start; i < end; i++) {
    atomic_fetch_add_explicit(&count[i], 1, memory_order_relaxed);
    out[i] = i * i;
  }
}

static void target_init(target *t, int64_t extent) {
  size_t n = extent > 0 ? (size_t)extent : 1;
  t->count = malloc(sizeof *t->count * n);
  t->out = malloc(sizeof *t->out * n);
  assert_non_null(t->count);
  assert_non_null(t->out);
  for (size_t i = 0; i < n; i++) atomic_init(&t->count[i], 0);
  memset(t->out, 0, sizeof *t->out * n);
  atomic_init(&t->log.n, 0);
}

static void target_free(target *t) {
  free(t->count);
  free(t->out);
}

static int run(target *t, int64_t extent, int64_t cost) {
  void *bufs[3] = {t->count, t->out, &t->log};
  return rt_pool_run(square_kernel, bufs, extent, cost);
}

static int cmp_start(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Chunks sorted by start; they must tile [0, extent), sizes within 1. */
static int sorted_chunks(const target *t, int64_t *pairs) {
  int n = atomic_load(&t->log.n);
  assert_true(n <= MAX_CHUNKS);
  for (int i = 0; i < n; i++) {
    pairs[2 * i] = t->log.start[i];
    pairs[2 * i + 1] = t->log.end[i];
  }
  qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_start);
  return n;
}

static void check_run(target *t, int64_t extent, int used) {
  for (int64_t i = 0; i < extent; i++) {
    assert_int_equal(atomic_load(&t->count[i]), 1);
    assert_int_equal(t->out[i], i * i);
  }
  int64_t pairs[2 * MAX_CHUNKS];
  int n = sorted_chunks(t, pairs);
  assert_int_equal(n, used);
  int64_t at = 0, lo = INT64_MAX, hi = 0;
  for (int i = 0; i < n; i++) {
    assert_int_equal(pairs[2 * i], at);
    at = pairs[2 * i + 1];
    int64_t size = pairs[2 * i + 1] - pairs[2 * i];
    lo = size < lo ? size : lo;
    hi = size > hi ? size : hi;
  }
  assert_int_equal(at, extent);
  assert_true(hi - lo <= 1);
}

/* main() sets KILN_NUM_THREADS=3 before anything touches the pool. */
static void default_from_env(void **state) {
  assert_int_equal(rt_pool_threads(), 3);
  rt_pool_set_threads(0); /* ignored */
  assert_int_equal(rt_pool_threads(), 3);
}

static void every_element_once(void **state) {
  const int64_t extents[] = {0, 1, 7, 1000000};
  const int threads[] = {1, 2, 3, 8};
  for (int e = 0; e < 4; e++)
    for (int h = 0; h < 4; h++) {
      int64_t extent = extents[e];
      int64_t cost = extent < 100 ? 1 << 20 : 1; /* make small extents worth splitting */
      rt_pool_set_threads(threads[h]);
      assert_int_equal(rt_pool_threads(), threads[h]);
      target t;
      target_init(&t, extent);
      int used = run(&t, extent, cost);
      int want = extent < 2 ? 1 : threads[h] < extent ? threads[h] : (int)extent;
      assert_int_equal(used, want);
      check_run(&t, extent, extent == 0 ? 1 : used);
      target_free(&t);
    }
}

static void small_work_runs_inline(void **state) {
  rt_pool_set_threads(4);
  target t;
  target_init(&t, 1000);
  assert_int_equal(run(&t, 1000, 1), 1);
  check_run(&t, 1000, 1);
  target_free(&t);
  target_init(&t, 1000);
  assert_int_equal(run(&t, 1000, RT_POOL_MIN_WORK / 1000 + 1), 2); /* just above: 2 threads */
  check_run(&t, 1000, 2);
  target_free(&t);
}

/* Same extent and thread count → same chunks, also after changing the
 * thread count and back. */
static void chunking_is_deterministic(void **state) {
  int64_t first[2 * MAX_CHUNKS], again[2 * MAX_CHUNKS];
  const int64_t extent = 100003;
  const int counts[] = {3, 5, 3};
  int n_first = 0;
  for (int r = 0; r < 3; r++) {
    rt_pool_set_threads(counts[r]);
    target t;
    target_init(&t, extent);
    int used = run(&t, extent, 1);
    check_run(&t, extent, used);
    int n = sorted_chunks(&t, r == 0 ? first : again);
    if (r == 0) n_first = n;
    if (r == 2) {
      assert_int_equal(n, n_first);
      assert_memory_equal(first, again, sizeof first[0] * 2 * (size_t)n);
    }
    target_free(&t);
  }
}

/* A kernel that calls back into the pool gets an inline run, not a hang. */
static void nested_kernel(void *const *bufs, int64_t start, int64_t end) {
  target *inner = bufs[0];
  atomic_int *inner_threads = bufs[1];
  if (start == 0) atomic_store(inner_threads, run(inner, 100000, 1));
}

static void nested_run_is_inline(void **state) {
  rt_pool_set_threads(2);
  target inner;
  target_init(&inner, 100000);
  atomic_int inner_threads;
  atomic_init(&inner_threads, 0);
  void *bufs[2] = {&inner, &inner_threads};
  assert_int_equal(rt_pool_run(nested_kernel, bufs, 100, 1 << 20), 2);
  assert_int_equal(atomic_load(&inner_threads), 1);
  check_run(&inner, 100000, 1);
  target_free(&inner);
}

static void *user_thread(void *arg) {
  int *failures = arg;
  for (int r = 0; r < 40; r++) {
    target t;
    target_init(&t, 200000);
    int used = run(&t, 200000, 1);
    for (int64_t i = 0; i < 200000; i++)
      if (atomic_load(&t.count[i]) != 1 || t.out[i] != i * i) (*failures)++;
    if (used < 1 || used > 3 || atomic_load(&t.log.n) != used) (*failures)++;
    target_free(&t);
  }
  return NULL;
}

static void concurrent_callers(void **state) {
  rt_pool_set_threads(3);
  pthread_t th[4];
  int failures[4] = {0};
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, user_thread, &failures[i]), 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(failures[i], 0);
  }
}

/* A forked child runs parallel kernels on workers of its own. */
static bool child_run_ok(void) {
  target t;
  target_init(&t, 300000);
  bool ok = run(&t, 300000, 1) == 2;
  for (int64_t i = 0; i < 300000; i++) ok = ok && atomic_load(&t.count[i]) == 1 && t.out[i] == i * i;
  target_free(&t);
  return ok;
}

/* rt_pool_hold (a BLAS call): another thread's parallel kernel does not
 * start until rt_pool_release, then runs normally. */
typedef struct held_run {
  target t;
  atomic_bool done;
} held_run;

static void *run_while_held(void *arg) {
  held_run *h = arg;
  void *bufs[] = {h->t.count, h->t.out, &h->t.log};
  rt_pool_run(square_kernel, bufs, 1 << 20, 1);
  atomic_store(&h->done, true);
  return NULL;
}

static void hold_blocks_parallel_runs(void **state) {
  rt_pool_set_threads(2);
  held_run h = {.done = false};
  target_init(&h.t, 1 << 20);
  rt_pool_hold();
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, run_while_held, &h), 0);
  nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL); /* 100 ms: ample time to start, were it allowed */
  assert_false(atomic_load(&h.done));
  assert_int_equal(atomic_load(&h.t.log.n), 0);
  rt_pool_release();
  pthread_join(th, NULL);
  assert_true(atomic_load(&h.done));
  check_run(&h.t, 1 << 20, 2);
  target_free(&h.t);
}

static void fork_child_has_own_workers(void **state) {
#if defined(__SANITIZE_THREAD__)
  skip(); /* TSan cannot start threads after a multi-threaded fork */
#endif
  rt_pool_set_threads(2);
  assert_true(child_run_ok()); /* parent workers running */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(30); /* a hang fails the test instead of stalling it */
    _exit(child_run_ok() ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_true(child_run_ok());
}

/* ------------------------------------------------ through the public API */

/* Realizes t with profiling on; returns the threads of its last kernel. */
static int realize_threads(kiln_tensor *t) {
  kiln_profile_begin();
  assert_int_equal(kiln_realize(t), KILN_OK);
  kiln_profile_end();
  kiln_kernel_record r;
  assert_true(kiln_profile_count() >= 1);
  assert_int_equal(kiln_profile_get(kiln_profile_count() - 1, &r), KILN_OK);
  return r.threads;
}

/* sum over `dim` of x with 1 and with 2 threads: bit-identical. */
static void check_sum_identical(kiln_tensor *x, int dim, int64_t numel) {
  float *one = malloc(sizeof *one * (size_t)numel), *two = malloc(sizeof *two * (size_t)numel);
  assert_non_null(one);
  assert_non_null(two);
  assert_int_equal(kiln_set_num_threads(1), KILN_OK);
  kiln_tensor *s1 = kiln_sum(x, 1, (int[]){dim}, false);
  assert_int_equal(realize_threads(s1), 1);
  assert_int_equal(kiln_read(s1, one, sizeof *one * (size_t)numel), KILN_OK);
  assert_int_equal(kiln_set_num_threads(2), KILN_OK);
  kiln_tensor *s2 = kiln_sum(x, 1, (int[]){dim}, false);
  assert_int_equal(realize_threads(s2), 2);
  assert_int_equal(kiln_read(s2, two, sizeof *two * (size_t)numel), KILN_OK);
  assert_memory_equal(one, two, sizeof *one * (size_t)numel);
  free(one);
  free(two);
}

/* A kernel whose outer loop has one iteration (a batch of one) splits
 * its first longer loop: max pooling with overlapping windows over
 * [1, 64, 112, 112] (its key reduction and gather keep the batch dim as
 * a loop) runs every kernel of at least the output's size on 2 threads,
 * with the values of 1 thread. */
static void leading_ones_split(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_manual_seed(11);
  kiln_tensor *x = kiln_rand(KILN_F32, 4, (int64_t[]){1, 64, 112, 112});
  assert_int_equal(kiln_realize(x), KILN_OK);
  enum { OUT = 64 * 56 * 56 };
  float *one = malloc(sizeof *one * OUT), *two = malloc(sizeof *two * OUT);
  assert_non_null(one);
  assert_non_null(two);
  for (int threads = 1; threads <= 2; threads++) {
    assert_int_equal(kiln_set_num_threads(threads), KILN_OK);
    kiln_tensor *y = kiln_max_pool(x, 2, (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, NULL, false);
    kiln_profile_begin();
    assert_int_equal(kiln_realize(y), KILN_OK);
    kiln_profile_end();
    int large = 0; /* kernels of at least the output's size (unfused, the window's small index kernels run inline) */
    for (int i = 0; i < kiln_profile_count(); i++) {
      kiln_kernel_record r;
      assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
      if (r.numel < OUT) continue;
      assert_int_equal(r.threads, threads);
      large++;
    }
    assert_true(large >= 1);
    assert_int_equal(kiln_read(y, threads == 1 ? one : two, sizeof *one * OUT), KILN_OK);
  }
  assert_memory_equal(one, two, sizeof *one * OUT);
  free(one);
  free(two);
  kiln_scope_end();
}

static void api_reduction_bit_identical(void **state) {
  kiln_scope_begin();
  kiln_manual_seed(7);
  kiln_tensor *x = kiln_rand(KILN_F32, 2, (int64_t[]){512, 4096});
  assert_int_equal(kiln_realize(x), KILN_OK);
  check_sum_identical(x, 1, 512);
  check_sum_identical(x, 0, 4096);
  /* a tiny kernel stays on one thread even with two available */
  kiln_tensor *tiny = kiln_sum(kiln_rand(KILN_F32, 2, (int64_t[]){4, 4}), 1, (int[]){1}, false);
  assert_int_equal(realize_threads(tiny), 1);
  assert_int_equal(kiln_set_num_threads(0), KILN_ERR_ARG);
  kiln_clear_error();
  kiln_scope_end();
}

/* Kernel-signature function over [0, 2): bufs[0] = int cpu[2], the CPU
 * each element's chunk ran on. */
static void cpu_kernel(void *const *bufs, int64_t start, int64_t end) {
  int *cpu = bufs[0];
  for (int64_t i = start; i < end; i++) cpu[i] = sched_getcpu();
}

/* pool.c's Placement: with the caller bound to one CPU, the worker's chunk
 * runs on another in every run, whether or not the scheduler woke it on
 * the caller's CPU. Skipped when the process may use one CPU only. */
static void worker_leaves_callers_cpu(void **state) {
  cpu_set_t allowed;
  assert_int_equal(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  if (CPU_COUNT(&allowed) < 2) skip();
  rt_pool_set_threads(2);
  int cpu[2] = {-1, -1};
  void *bufs[1] = {cpu};
  assert_int_equal(rt_pool_run(cpu_kernel, bufs, 2, 1 << 20), 2); /* workers start, seeing every allowed CPU */
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) first++;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
  for (int r = 0; r < 50; r++) {
    cpu[0] = cpu[1] = -1;
    assert_int_equal(rt_pool_run(cpu_kernel, bufs, 2, 1 << 20), 2);
    assert_int_equal(cpu[0], first);
    assert_true(cpu[1] >= 0 && cpu[1] != first);
    if (r % 10 == 9) usleep(2000); /* past the workers' spin: they sleep, and are woken again */
  }
  assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed), 0);
}

int main(void) {
  setenv("KILN_NUM_THREADS", "3", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(default_from_env),     cmocka_unit_test(every_element_once),
      cmocka_unit_test(small_work_runs_inline), cmocka_unit_test(chunking_is_deterministic),
      cmocka_unit_test(nested_run_is_inline), cmocka_unit_test(concurrent_callers),
      cmocka_unit_test(fork_child_has_own_workers), cmocka_unit_test(hold_blocks_parallel_runs),
      cmocka_unit_test(worker_leaves_callers_cpu),  cmocka_unit_test(api_reduction_bit_identical),
      cmocka_unit_test(leading_ones_split),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
