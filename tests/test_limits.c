/*
 * test_limits.c — resource limits: sizes whose element count or bytes
 * overflow are errors when the tensor is made (creation, views, broadcast
 * results); a tensor too large for memory stays lazy while a fused
 * reduction reads it, and a force that must materialize it is
 * KILN_ERR_OOM, leaving everything else usable; the auto-force keeps a
 * loop that is never forced within bounded memory; integer settings from
 * the environment reject garbage with one line on stderr (checked in
 * child processes: each is read once per process).
 */
#define _POSIX_C_SOURCE 200809L /* fork, setenv, dup2 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "api_internal.h"
#include "graph.h"
#include "rt_internal.h"
#include "test_util.h"

#define V(...) ((int64_t[]){__VA_ARGS__})
#define G (INT64_C(1) << 30)
#define T (INT64_C(1) << 40)

/* ------------------------------------------------------------ overflow */

static void overflowing_sizes_are_errors(void **state) {
  int64_t pending = graph_pending_count();
  kiln_scope_begin();
  assert_null(kiln_zeros(KILN_F32, 3, V(2 * G, 2 * G, 4)));
  expect_error(KILN_ERR_SHAPE, "kiln_zeros", "overflow", NULL);
  assert_null(kiln_full(KILN_U8, 2, V(T, T), 1));
  expect_error(KILN_ERR_SHAPE, "kiln_full", "overflow", NULL);
  char byte = 0;
  assert_null(kiln_from_blob(KILN_F64, 2, V(T, T), NULL, &byte, NULL, NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_from_blob", "overflow", NULL);
  assert_null(kiln_from_blob(KILN_F64, 2, V(1 << 20, 2), V(INT64_C(1) << 50, 1), &byte, NULL, NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_from_blob", "reach past", NULL);
  kiln_tensor *s = kiln_scalar(KILN_F32, 1), *x = kiln_zeros(KILN_F32, 1, V(6));
  /* views that repeat elements name more than any buffer holds */
  assert_null(kiln_expand(s, 3, V(G, G, G)));
  expect_error(KILN_ERR_SHAPE, "kiln_expand", "overflow", NULL);
  assert_null(kiln_as_strided(x, 2, V(T, T), V(0, 0), 0));
  expect_error(KILN_ERR_SHAPE, "kiln_as_strided", "overflow", NULL);
  kiln_tensor *long_row = kiln_expand(s, 1, V(T));
  assert_non_null(long_row);
  assert_null(kiln_unfold(long_row, 0, 1 << 21, 1));
  expect_error(KILN_ERR_SHAPE, "kiln_unfold", "overflow", NULL);
  assert_null(kiln_reshape(x, 2, V(T, T)));
  expect_error(KILN_ERR_SHAPE, "kiln_reshape", NULL);
  /* results whose sizes come from broadcasting views that fit */
  kiln_tensor *col = kiln_expand(s, 2, V(T, 1)), *row = kiln_expand(s, 2, V(1, T));
  assert_null(kiln_add(col, row));
  expect_error(KILN_ERR_SHAPE, "kiln_add", "overflow", NULL);
  kiln_tensor *tall = kiln_expand(s, 2, V(4 * G, 1)), *wide = kiln_expand(s, 2, V(1, 4 * G));
  assert_null(kiln_matmul(tall, wide));
  expect_error(KILN_ERR_SHAPE, "kiln_matmul", "overflow", NULL);
  kiln_scope_end();
  assert_int_equal(graph_pending_count(), pending);
}

/* --------------------------------------------------- too large to hold */

/* x: a scalar expanded to 2^40 elements (4 TiB as F32), y = x * 2 lazy.
 * A reduction over a slice of y computes y inside its loop; a sum over
 * 2^32 elements of an expand loops past 32-bit indices without a buffer;
 * materializing y (or a copy of x) cannot be done: KILN_ERR_OOM, and
 * everything else stays usable, y included. */
static void huge_lazy_tensor_stays_lazy(void **state) {
  rt_set_fusion(1); /* what is not materialized is fusion's doing */
  int64_t pending = graph_pending_count();
  kiln_scope_begin();
  kiln_tensor *x = kiln_expand(kiln_scalar(KILN_F32, 1.5), 2, V(1 << 20, 1 << 20));
  kiln_tensor *y = kiln_mul_scalar(x, 2);
  assert_non_null(y);
  assert_int_equal(kiln_numel(y), T);
  kiln_tensor *rows = kiln_sum(kiln_narrow(y, 0, 7, 2), 1, (int[]){1}, false);
  int64_t buffers = graph_live_buffers();
  assert_int_equal(kiln_realize(rows), KILN_OK);
  assert_true(graph_live_buffers() <= buffers + 1); /* rows' buffer only */
  expect_values_tol(rows, (double[]){3 << 20, 3 << 20}, 2, 0);

  kiln_tensor *big = kiln_expand(kiln_scalar(KILN_F32, 1.5), 2, V(1 << 16, 1 << 16));
  kiln_tensor *total = kiln_sum(kiln_mul_scalar(big, 2), 0, NULL, false);
  expect_values_tol(total, (double[]){3.0 * (double)(INT64_C(1) << 32)}, 1, 0);

  kiln_tensor *copy = kiln_contiguous(x);
  assert_int_equal(kiln_realize(copy), KILN_ERR_OOM);
  expect_error(KILN_ERR_OOM, "kiln_realize", "out of memory allocating 4398046511104 bytes", NULL);
  assert_int_equal(kiln_realize(y), KILN_ERR_OOM);
  expect_error(KILN_ERR_OOM, "kiln_realize", "out of memory", NULL);
  /* y is still pending and still usable lazily */
  kiln_tensor *tail = kiln_sum(kiln_narrow(y, 1, (1 << 20) - 4, 4), 0, NULL, false);
  expect_values_tol(tail, (double[]){3.0 * 4 * (1 << 20)}, 1, 0);
  expect_values_tol(kiln_add_scalar(rows, 1), (double[]){(3 << 20) + 1, (3 << 20) + 1}, 2, 0);
  kiln_scope_end();
  assert_int_equal(graph_pending_count(), pending);
  rt_set_fusion(-1);
}

/* ---------------------------------------------------------- auto-force */

/* A float loop recorded 20,000 times and never forced, releasing each
 * step's handles: functional updates (x = x * 0.5 + 1) and in-place writes
 * through a view, with a history budget of `budget` bytes (graph/history.c).
 * The auto-force (limit 1,000 pending nodes) keeps the pending graph
 * within that limit; the forced values no tensor shows keep their recipes
 * within the budget: the live nodes and buffers are bounded by the limit
 * and the budget, not by the number of steps. */
static void never_forced_loop(int64_t budget, int64_t max_nodes_seen, int64_t max_buffers_seen) {
  api_set_auto_realize_limit(1000);
  graph_history_set_budget(budget);
  int64_t nodes = graph_live_nodes(), buffers = graph_live_buffers(), pending = graph_pending_count();
  int64_t max_pending = 0, max_nodes = 0, max_buffers = 0, max_weight = 0;
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, V(64)), *acc = kiln_zeros(KILN_F32, 1, V(64));
  kiln_tensor *v = kiln_narrow(acc, 0, 8, 16);
  for (int i = 0; i < 20000; i++) {
    kiln_scope_begin();
    kiln_tensor *y = kiln_keep(kiln_add_scalar(kiln_mul_scalar(x, 0.5), 1));
    assert_int_equal(kiln_copy_(acc, kiln_add_scalar(kiln_mul_scalar(acc, 0.5), 2)), KILN_OK);
    assert_int_equal(kiln_fill_(v, i), KILN_OK);
    kiln_scope_end();
    kiln_release(x);
    x = y;
    int64_t p = graph_pending_count() - pending, n = graph_live_nodes() - nodes, b = graph_live_buffers() - buffers;
    int64_t w = graph_history_weight();
    max_pending = p > max_pending ? p : max_pending;
    max_nodes = n > max_nodes ? n : max_nodes;
    max_buffers = b > max_buffers ? b : max_buffers;
    max_weight = w > max_weight ? w : max_weight;
  }
  expect_no_error();
  if (max_pending > 1010 || max_nodes > max_nodes_seen || max_buffers > max_buffers_seen || max_weight > budget)
    fail_msg("budget %lld: at most %lld pending, %lld live nodes, %lld buffers, %lld bytes of history", (long long)budget,
             (long long)max_pending, (long long)max_nodes, (long long)max_buffers, (long long)max_weight);
  kiln_scope_begin();
  expect_values_tol(kiln_narrow(x, 0, 0, 2), (double[]){2, 2}, 2, 0);
  expect_values_tol(kiln_narrow(acc, 0, 6, 4), (double[]){4, 4, 19999, 19999}, 4, 0);
  kiln_scope_end();
  kiln_release(v);
  kiln_release(acc);
  kiln_release(x);
  assert_int_equal(graph_pending_count(), pending);
  assert_int_equal(graph_history_weight(), 0);
  graph_history_set_budget(-1);
  api_set_auto_realize_limit(-1);
}

/* seen: with no history, 1,000 pending, 1,012 live nodes, 4 buffers;
 * with 4 MiB of history, 7,176 live nodes and 681 buffers (KILN_FUSE=0:
 * 6,536 and 2,465), the queue weighing just under the budget. */
static void auto_force_bounds_a_never_forced_loop(void **state) {
  (void)state;
  never_forced_loop(0, 2100, 1000);
  int64_t budget = 4 << 20, per_node = (int64_t)sizeof(graph_node);
  never_forced_loop(budget, 2100 + 2 * budget / per_node, 1000 + budget / 256);
}

/* --------------------------------------------------------- environment */

/* Runs fn in a child process with env name=value; returns its exit
 * status and what it wrote to stderr (in err [n]). */
static int in_child(const char *name, const char *value, int (*fn)(void), char *err, size_t n) {
  FILE *f = tmpfile();
  assert_non_null(f);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fileno(f), 2);
    setenv(name, value, 1);
    _exit(fn());
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  rewind(f);
  size_t got = fread(err, 1, n - 1, f);
  err[got] = 0;
  fclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* 0 when the auto-force limit is 50: a chain of 200 ops stays within it. */
static int auto_limit_is_50(void) {
  api_set_auto_realize_limit(-1); /* read the environment again */
  int64_t base = graph_pending_count(), most = 0;
  kiln_tensor *x = kiln_zeros(KILN_I64, 1, V(2));
  for (int i = 0; i < 200; i++) {
    kiln_tensor *y = kiln_add_scalar(x, 1);
    kiln_release(x);
    x = y;
    most = graph_pending_count() - base > most ? graph_pending_count() - base : most;
  }
  kiln_release(x);
  return most <= 52 ? 0 : 1;
}

/* 0 when the default limit (10,000) is in effect: 200 ops stay pending. */
static int auto_limit_is_default(void) {
  api_set_auto_realize_limit(-1);
  int64_t base = graph_pending_count();
  kiln_tensor *x = kiln_zeros(KILN_I64, 1, V(2));
  for (int i = 0; i < 200; i++) {
    kiln_tensor *y = kiln_add_scalar(x, 1);
    kiln_release(x);
    x = y;
  }
  int64_t kept = graph_pending_count() - base;
  kiln_release(x);
  return kept >= 200 ? 0 : 1;
}

/* 0 when freed buffers are not cached (limit 0). */
static int cache_keeps_nothing(void) {
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, V(4), (double[]){1, 2, 3, 4});
  kiln_release(x);
  return rt_alloc_cached_bytes() == 0 ? 0 : 1;
}

/* 0 when a freed 1 KiB buffer is cached (the default limit). */
static int cache_keeps_a_buffer(void) {
  double data[128] = {0};
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, V(128), data);
  kiln_release(x);
  return rt_alloc_cached_bytes() >= 1024 ? 0 : 1;
}

/* 0 when the first allocation fails (KILN_FAULT_ALLOC=1). */
static int first_allocation_fails(void) {
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, V(3));
  if (x || kiln_last_status() != KILN_ERR_OOM) return 1;
  kiln_clear_error();
  x = kiln_zeros(KILN_F32, 1, V(3)); /* once only */
  int ok = x && kiln_last_status() == KILN_OK;
  kiln_release(x);
  return ok ? 0 : 2;
}

static int nothing_fails(void) {
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, V(3));
  int ok = x && kiln_realize(x) == KILN_OK;
  kiln_release(x);
  return ok ? 0 : 1;
}

static void expect_child(const char *name, const char *value, int (*fn)(void), const char *line) {
  char err[512];
  int st = in_child(name, value, fn, err, sizeof err);
  if (st != 0) fail_msg("%s=\"%s\": the child exited with %d (stderr: %s)", name, value, st, err);
  if (!line && err[0]) fail_msg("%s=\"%s\": unexpected stderr: %s", name, value, err);
  if (line && strcmp(err, line) != 0) fail_msg("%s=\"%s\": stderr \"%s\", want \"%s\"", name, value, err, line);
}

static void settings_reject_garbage(void **state) {
  expect_child("KILN_AUTO_REALIZE", "50", auto_limit_is_50, NULL);
  expect_child("KILN_AUTO_REALIZE", " 50\n", auto_limit_is_50, NULL);
  expect_child("KILN_AUTO_REALIZE", "abc", auto_limit_is_default,
               "kiln: KILN_AUTO_REALIZE=abc is not a non-negative integer; using 10000 pending nodes\n");
  expect_child("KILN_AUTO_REALIZE", "50k", auto_limit_is_default,
               "kiln: KILN_AUTO_REALIZE=50k is not a non-negative integer; using 10000 pending nodes\n");
  expect_child("KILN_AUTO_REALIZE", "-5", auto_limit_is_default,
               "kiln: KILN_AUTO_REALIZE=-5 is not a non-negative integer; using 10000 pending nodes\n");
  expect_child("KILN_CACHE_BYTES", "0", cache_keeps_nothing, NULL);
  expect_child("KILN_CACHE_BYTES", "2GB", cache_keeps_a_buffer,
               "kiln: KILN_CACHE_BYTES=2GB is not a non-negative integer; using 2147483648 bytes\n");
  expect_child("KILN_CACHE_BYTES", "", cache_keeps_a_buffer,
               "kiln: KILN_CACHE_BYTES= is not a non-negative integer; using 2147483648 bytes\n");
  expect_child("KILN_FAULT_ALLOC", "1", first_allocation_fails, NULL);
  expect_child("KILN_FAULT_ALLOC", "x", nothing_fails,
               "kiln: KILN_FAULT_ALLOC=x is not a positive integer; no allocation fails\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(settings_reject_garbage), /* first: children fork before any thread starts */
      cmocka_unit_test(overflowing_sizes_are_errors),
      cmocka_unit_test(huge_lazy_tensor_stays_lazy),
      cmocka_unit_test(auto_force_bounds_a_never_forced_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
