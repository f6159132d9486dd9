/*
 * test_threads.c — forcing from several threads at once, as kiln.h's
 * thread rules allow: each thread builds and forces graphs of its own
 * (same and different shapes, so the threads share schedule-cache and
 * kernel-cache entries and also miss them at the same time), graphs that
 * read one realized tensor shared by every thread (views of it too), and
 * both again while busy processes compete for the cores, so forces are
 * preempted half-way. Every value is checked against a host reference.
 *
 * CI also runs this test built with ThreadSanitizer (.ci/run, build-tsan):
 * there it must report no data race.
 *
 * Threads never call cmocka (its assertions longjmp): they count wrong
 * values and errors, and the main thread asserts the counts.
 */
#define _GNU_SOURCE /* fork, kill, alarm */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/kiln.h"

#define N_THREADS 4
#define MAX_COLS 40

/* Iterations per thread: fewer under a sanitizer (ten times slower). */
static int iterations(void) {
  const char *e = getenv("KILN_TEST_THREAD_ITERS");
  return e && atoi(e) > 0 ? atoi(e) : 150;
}

typedef struct worker {
  int id;
  kiln_tensor *shared; /* [ROWS, MAX_COLS] F64, realized; NULL: private graphs only */
  atomic_int *wrong;   /* values off the reference */
  atomic_int *errors;  /* failed calls */
  char first_error[256];
} worker;

#define ROWS 6

static double input_value(int id, int it, int64_t i) {
  return 0.01 * (double)((i * 37 + id * 11 + it * 5) % 101) - 0.4;
}
static double shared_value(int64_t i) { return 0.001 * (double)(i % 97) + 0.25; }

static bool close_to(double got, double want) { return fabs(got - want) <= 1e-9 * (1 + fabs(want)); }

static void note_error(worker *w, const char *what) {
  if (atomic_fetch_add(w->errors, 1) == 0)
    snprintf(w->first_error, sizeof w->first_error, "thread %d: %s: %s", w->id, what, kiln_last_error());
  kiln_clear_error();
}

/* One private graph: y = exp(x * 0.5 + 1) - x  (elementwise, fused), its row
 * sums (a reduction over y, row-fused) and relu(y - rowsum/cols) (an
 * epilogue reading both), over x [ROWS, cols] of this thread's data. */
static void private_graph(worker *w, int it, int cols) {
  int64_t sizes[2] = {ROWS, cols};
  double x[ROWS * MAX_COLS], out[ROWS * MAX_COLS], sums[ROWS];
  for (int64_t i = 0; i < ROWS * cols; i++) x[i] = input_value(w->id, it, i);
  kiln_scope_begin();
  kiln_tensor *xt = kiln_from_data(KILN_F64, 2, sizes, x);
  kiln_tensor *y = kiln_sub(kiln_exp(kiln_add_scalar(kiln_mul_scalar(xt, 0.5), 1)), xt);
  int dim = 1;
  kiln_tensor *s = kiln_sum(y, 1, &dim, true);
  kiln_tensor *z = kiln_relu(kiln_sub(y, kiln_div_scalar(s, (double)cols)));
  if (kiln_read(z, out, sizeof out) != KILN_OK || kiln_read(s, sums, sizeof sums) != KILN_OK) {
    note_error(w, "private graph");
    kiln_scope_end();
    return;
  }
  for (int r = 0; r < ROWS; r++) {
    double want_sum = 0;
    for (int c = 0; c < cols; c++) want_sum += exp(x[r * cols + c] * 0.5 + 1) - x[r * cols + c];
    if (!close_to(sums[r], want_sum)) atomic_fetch_add(w->wrong, 1);
    for (int c = 0; c < cols; c++) {
      double yv = exp(x[r * cols + c] * 0.5 + 1) - x[r * cols + c], want = yv - want_sum / cols;
      if (!close_to(out[r * cols + c], want > 0 ? want : 0)) atomic_fetch_add(w->wrong, 1);
    }
  }
  kiln_scope_end();
}

/* A graph over the shared realized tensor: a narrow view of its columns
 * [first, first + cols) times this thread's data, plus the shared
 * tensor's column 0 broadcast, summed over rows. */
static void shared_graph(worker *w, int it, int cols) {
  int first = (w->id + it) % (MAX_COLS - cols + 1);
  int64_t sizes[2] = {ROWS, cols};
  double x[ROWS * MAX_COLS], out[MAX_COLS];
  for (int64_t i = 0; i < ROWS * cols; i++) x[i] = input_value(w->id, it, i);
  kiln_scope_begin();
  kiln_tensor *xt = kiln_from_data(KILN_F64, 2, sizes, x);
  kiln_tensor *view = kiln_narrow(w->shared, 1, first, cols);
  kiln_tensor *col0 = kiln_narrow(w->shared, 1, 0, 1);
  int dim = 0;
  kiln_tensor *t = kiln_sum(kiln_add(kiln_mul(view, xt), col0), 1, &dim, false);
  if (kiln_read(t, out, sizeof out) != KILN_OK) {
    note_error(w, "shared graph");
    kiln_scope_end();
    return;
  }
  for (int c = 0; c < cols; c++) {
    double want = 0;
    for (int r = 0; r < ROWS; r++)
      want += shared_value(r * MAX_COLS + first + c) * x[r * cols + c] + shared_value(r * MAX_COLS);
    if (!close_to(out[c], want)) atomic_fetch_add(w->wrong, 1);
  }
  kiln_scope_end();
}

/* Columns per iteration: the same for every thread (same shapes: shared
 * cache entries) or different per thread (different shapes). */
static int columns(const worker *w, int it, bool same_shapes) {
  return same_shapes ? 8 + it % 3 : 3 + (w->id * 7 + it) % 30;
}

typedef struct run_cfg {
  bool same_shapes;
  bool with_shared;
} run_cfg;

static run_cfg cfg;

static void *work(void *arg) {
  worker *w = arg;
  int n = iterations();
  for (int it = 0; it < n; it++) {
    int cols = columns(w, it, cfg.same_shapes);
    if (!w->shared || it % 2 == 0) private_graph(w, it, cols);
    else shared_graph(w, it, cols);
  }
  return NULL;
}

static kiln_tensor *make_shared(void) {
  static double v[ROWS * MAX_COLS];
  for (int64_t i = 0; i < ROWS * MAX_COLS; i++) v[i] = shared_value(i);
  int64_t sizes[2] = {ROWS, MAX_COLS};
  kiln_tensor *t = kiln_from_data(KILN_F64, 2, sizes, v);
  assert_non_null(t);
  assert_int_equal(kiln_realize(t), KILN_OK);
  return t;
}

static void run_threads(bool same_shapes, bool with_shared) {
  cfg = (run_cfg){same_shapes, with_shared};
  atomic_int wrong = 0, errors = 0;
  kiln_tensor *shared = with_shared ? make_shared() : NULL;
  worker w[N_THREADS];
  pthread_t th[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    w[i] = (worker){.id = i, .shared = shared, .wrong = &wrong, .errors = &errors};
    assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < N_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  for (int i = 0; i < N_THREADS; i++)
    if (w[i].first_error[0]) print_error("%s\n", w[i].first_error);
  kiln_release(shared);
  assert_int_equal(atomic_load(&errors), 0);
  assert_int_equal(atomic_load(&wrong), 0);
}

static void private_same_shapes(void **state) { run_threads(true, false); }
static void private_different_shapes(void **state) { run_threads(false, false); }
static void shared_input_same_shapes(void **state) { run_threads(true, true); }
static void shared_input_different_shapes(void **state) { run_threads(false, true); }

/* Busy processes (one per core) compete with the forcing threads, so the
 * scheduler preempts them mid-force. The children spin until killed. */
static void under_load(void **state) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int n_busy = cores > 0 && cores < 8 ? (int)cores : 2;
  pid_t busy[8];
  for (int i = 0; i < n_busy; i++) {
    busy[i] = fork();
    assert_true(busy[i] >= 0);
    if (busy[i] == 0) {
      alarm(600); /* never outlives a stuck parent */
      for (volatile unsigned long x = 0;; x++) {
      }
    }
  }
  run_threads(false, true);
  run_threads(true, false);
  for (int i = 0; i < n_busy; i++) {
    kill(busy[i], SIGKILL);
    waitpid(busy[i], NULL, 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(private_same_shapes),
      cmocka_unit_test(private_different_shapes),
      cmocka_unit_test(shared_input_same_shapes),
      cmocka_unit_test(shared_input_different_shapes),
      cmocka_unit_test(under_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
