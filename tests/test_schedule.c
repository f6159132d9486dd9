/*
 * test_schedule.c — the schedule cache: forcing a graph with the same
 * structure on new data is a hit (no passes, no compiles) and gives the
 * same values as a fresh schedule; changed shapes, dtypes, views or
 * sharing are misses; fill values travel as arguments (a hit with a new
 * value computes with the new value); in-place writes stay correct.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "runtime.h"
#include "test_util.h"

/* relu(a * b + c) * sigmoid(d) + s over [n] tensors made from `base`. */
static kiln_tensor *w1(kiln_tensor *a, kiln_tensor *b, kiln_tensor *c, kiln_tensor *d, double s) {
  return kiln_add_scalar(kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(d)), s);
}

static kiln_tensor *data(int64_t n, double start) {
  kiln_tensor *t = kiln_arange(KILN_F32, start, start + (double)n, 1);
  kiln_realize(t);
  return t;
}

static double w1_value(double a, double b, double c, double d, double s) {
  double x = a * b + c;
  return (x > 0 ? x : 0) * (1 / (1 + exp(-d))) + s;
}

static void same_structure_new_data_hits(void **state) {
  kiln_scope_begin();
  int64_t n = 8;
  /* first force: a miss (compiles are the kernel cache's business) */
  kiln_tensor *y0 = w1(data(n, 0), data(n, 1), data(n, -3), data(n, -2), 0.5);
  assert_int_equal(kiln_realize(y0), KILN_OK);
  for (int rep = 1; rep <= 3; rep++) {
    double s = 0.5 * rep + 0.25; /* a new fill value (non-integral: F64 like 0.5): an argument, a hit */
    kiln_tensor *a = data(n, rep), *b = data(n, 1), *c = data(n, -3), *d = data(n, -2);
    int64_t hits = rt_schedule_hits(), compiles = rt_compile_count();
    kiln_tensor *y = w1(a, b, c, d, s);
    assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(rt_schedule_hits(), hits + 1);
    assert_int_equal(rt_compile_count(), compiles);
    double want[8];
    for (int i = 0; i < 8; i++) want[i] = w1_value(rep + i, 1 + i, -3 + i, -2 + i, s);
    expect_values_tol(y, want, n, 1e-5);
  }
  kiln_scope_end();
  expect_no_error();
}

static void different_structure_misses(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = data(6, 0), *b = data(6, 10);
  assert_int_equal(kiln_realize(kiln_mul(a, b)), KILN_OK);
  int64_t hits = rt_schedule_hits();
  /* sharing differs: a*a reads one buffer twice */
  kiln_tensor *sq = kiln_mul(a, a);
  expect_values_tol(sq, (double[]){0, 1, 4, 9, 16, 25}, 6, 0);
  /* a view with another offset */
  kiln_tensor *nb = kiln_mul(kiln_narrow(data(8, 0), 0, 2, 6), b);
  expect_values_tol(nb, (double[]){20, 33, 48, 65, 84, 105}, 6, 0);
  /* another dtype */
  kiln_tensor *ib = kiln_mul(kiln_to_dtype(a, KILN_I32), kiln_to_dtype(b, KILN_I32));
  expect_values_tol(ib, (double[]){0, 11, 24, 39, 56, 75}, 6, 0);
  /* none of those could reuse the first schedule */
  kiln_tensor *again = kiln_mul(data(6, 1), data(6, 10));
  expect_values_tol(again, (double[]){10, 22, 36, 52, 70, 90}, 6, 0);
  assert_true(rt_schedule_hits() >= hits + 1); /* the last one hits */
  kiln_scope_end();
  expect_no_error();
}

/* Forces y and checks that it missed the schedule cache. */
static void expect_miss(kiln_tensor *y, const double *want, int64_t n) {
  int64_t hits = rt_schedule_hits();
  assert_int_equal(kiln_realize(y), KILN_OK);
  assert_int_equal(rt_schedule_hits(), hits);
  expect_values_tol(y, want, n, 0);
}

/* The key's compact encoding still tells apart what lowering reads: a
 * plain view from a transposed one of the same sizes, inputs of equal
 * numel but other sizes, a scalar attribute that is zero (left out of the
 * key) from one that is not, -0.0 from 0.0, and the reduced dims. */
static void key_tells_apart(void **state) {
  kiln_scope_begin();
  int64_t sq[2] = {2, 2};
  /* computed, so their nodes are [2, 2] and a view of all of a is plain */
  kiln_tensor *a = kiln_add_scalar(kiln_reshape(data(4, -1), 2, sq), 1);
  kiln_tensor *b = kiln_add_scalar(kiln_reshape(data(4, 9), 2, sq), 1);
  assert_int_equal(kiln_realize(a), KILN_OK);
  assert_int_equal(kiln_realize(b), KILN_OK);
  assert_int_equal(kiln_realize(kiln_add(a, b)), KILN_OK);
  expect_miss(kiln_add(kiln_t(a), b), (double[]){10, 13, 13, 16}, 4);
  kiln_tensor *a4 = data(4, 0), *b4 = data(4, 10); /* [4], not [2, 2]: same bytes otherwise */
  expect_miss(kiln_add(a4, b4), (double[]){10, 12, 14, 16}, 4);
  kiln_tensor *c = data(4, -2);
  assert_int_equal(kiln_realize(kiln_clamp(c, 0, 5)), KILN_OK);
  expect_miss(kiln_clamp(c, 0.5, 5), (double[]){0.5, 0.5, 0.5, 1}, 4);
  expect_miss(kiln_clamp(c, -0.0, 5), (double[]){-0.0, -0.0, 0, 1}, 4);
  assert_int_equal(kiln_realize(kiln_sum(a, 1, (int[]){0}, false)), KILN_OK);
  expect_miss(kiln_sum(a, 1, (int[]){1}, false), (double[]){1, 5}, 2);
  kiln_scope_end();
  expect_no_error();
}

/* The cache is looked up before simplification, then after it when it
 * changed the graph. (x*s)+b with s = 1 simplifies to x+b; with s = 2 it
 * does not, and is cached unsimplified; with s = 1 again that entry is a
 * hit (the multiply by 1 then runs, with the same values). a*b + a*b is
 * simplified (CSE) on every force, and hits after simplifying. */
static void lookup_before_and_after_simplify(void **state) {
  rt_set_fusion(1); /* the simplifier runs with fusion on (KILN_FUSE=0 skips the passes) */
  kiln_scope_begin();
  kiln_tensor *x = data(4, 1), *b = data(4, 10);
  x = kiln_reshape(x, 2, (int64_t[]){1, 4}); /* a shape no other test forces */
  double s[3] = {1, 2, 1};
  for (int rep = 0; rep < 3; rep++) {
      int64_t hits = rt_schedule_hits();
    kiln_tensor *y = kiln_add(kiln_mul_scalar(x, s[rep]), b);
    assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(rt_schedule_hits(), hits + (rep == 2));
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = s[rep] * (1 + i) + 10 + i;
    expect_values_tol(y, want, 4, 0);
  }
  for (int rep = 0; rep < 3; rep++) {
    int64_t hits = rt_schedule_hits();
    kiln_tensor *y = kiln_add(kiln_mul(x, b), kiln_mul(x, b));
    assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(rt_schedule_hits(), hits + (rep > 0));
    expect_values_tol(y, (double[]){20, 44, 72, 104}, 4, 0);
  }
  kiln_scope_end();
  rt_set_fusion(-1);
  expect_no_error();
}

/* SGD-style in-place updates repeated: p -= 0.5 * g, each step a hit,
 * each writing into p's one buffer. */
static void in_place_updates_hit(void **state) {
  kiln_scope_begin();
  kiln_tensor *p = kiln_zeros(KILN_F32, 1, (int64_t[]){4});
  assert_int_equal(kiln_realize(p), KILN_OK);
  const void *buf = kiln_data(p);
  for (int step = 0; step < 4; step++) {
    kiln_tensor *g = data(4, step);
    int64_t hits = rt_schedule_hits();
    assert_int_equal(kiln_copy_(p, kiln_sub(p, kiln_mul_scalar(g, 0.5))), KILN_OK);
    assert_int_equal(kiln_realize(p), KILN_OK);
    if (step > 0) assert_int_equal(rt_schedule_hits(), hits + 1);
  }
  /* p = -0.5 * sum over steps of (step + i) */
  expect_values_tol(p, (double[]){-3, -5, -7, -9}, 4, 0);
  assert_ptr_equal(kiln_data(p), buf);
  kiln_scope_end();
  expect_no_error();
}

/* A chain of 100 tiny ops over one input, recorded and forced again and
 * again (the W8 benchmark): every repeat is a hit. */
static void repeated_chain_hits(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = data(1000, 0);
  for (int rep = 0; rep < 3; rep++) {
    kiln_scope_begin();
    kiln_tensor *y = x;
    for (int i = 0; i < 100; i++) y = i % 3 == 0 ? kiln_mul_scalar(y, 1.0001) : i % 3 == 1 ? kiln_add(y, x) : kiln_tanh(y);
    int64_t hits = rt_schedule_hits();
    assert_int_equal(kiln_realize(y), KILN_OK);
    if (rep > 0) assert_int_equal(rt_schedule_hits(), hits + 1);
    kiln_scope_end();
  }
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(same_structure_new_data_hits),
      cmocka_unit_test(different_structure_misses),
      cmocka_unit_test(key_tells_apart),
      cmocka_unit_test(lookup_before_and_after_simplify),
      cmocka_unit_test(in_place_updates_hit),
      cmocka_unit_test(repeated_chain_hits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
