/*
 * test_callbacks.c — kiln_apply_, kiln_map_, kiln_map2_ (Torch7's apply,
 * map, map2): row-major visiting order over any view, stateful callbacks,
 * overlapping views (a later visit sees an earlier store), inputs over
 * t's own storage, dtype conversion of results, laziness (ops recorded
 * before the call keep the old values), from_blob memory, and errors.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"

static void expect_values(kiln_tensor *t, const double *want, int64_t n) { expect_values_tol(t, want, n, 0); }

/* Returns 1, 2, 3, ... in call order. */
static double counter(double x, void *ctx) {
  int *n = ctx;
  return ++*n;
}

static double plus_one(double x, void *ctx) { return x + 1; }
static double add2(double x, double y, void *ctx) { return x + y; }
static double second(double x, double y, void *ctx) { return y; }
static double fma3(double x, double y, double z, void *ctx) { return x + y * z; }

/* Records the arguments of each call. */
typedef struct trace {
  int n;
  double args[3][64];
} trace;

static double record3(double x, double y, double z, void *ctx) {
  trace *t = ctx;
  t->args[0][t->n] = x;
  t->args[1][t->n] = y;
  t->args[2][t->n] = z;
  t->n++;
  return -x;
}

/* The counter numbers a transposed view's elements in its row-major
 * order, which is column-major order of the base. */
static void apply_counter_on_transposed_view(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 3});
  int n = 0;
  assert_int_equal(kiln_apply_(kiln_t(x), counter, &n), KILN_OK);
  assert_int_equal(n, 6);
  expect_values(x, (double[]){1, 3, 5, 2, 4, 6}, 6);
  /* a strided slice: only its elements, in its order */
  kiln_tensor *y = kiln_zeros(KILN_I64, 1, (int64_t[]){7});
  n = 10;
  assert_int_equal(kiln_apply_(kiln_slice(y, 0, 1, 7, 2), counter, &n), KILN_OK);
  expect_values(y, (double[]){0, 11, 0, 12, 0, 13, 0}, 7);
  kiln_scope_end();
}

/* Overlapping views: each visit of a storage element sees the earlier
 * store, as Torch7's loop over memory does. */
static void overlapping_views_accumulate(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_full(KILN_I32, 1, (int64_t[]){3}, 10);
  kiln_tensor *e = kiln_expand(kiln_narrow(x, 0, 1, 1), 2, (int64_t[]){2, 4}); /* stride 0 */
  assert_int_equal(kiln_apply_(e, plus_one, NULL), KILN_OK);
  expect_values(x, (double[]){10, 18, 10}, 3);
  expect_values(e, (double[]){18, 18, 18, 18, 18, 18, 18, 18}, 8);
  /* unfold: windows [0,1,2] and [2,3,4] share element 2 */
  kiln_tensor *z = kiln_zeros(KILN_F64, 1, (int64_t[]){5});
  int n = 0;
  assert_int_equal(kiln_apply_(kiln_unfold(z, 0, 3, 2), counter, &n), KILN_OK);
  expect_values(z, (double[]){1, 2, 4, 5, 6}, 5);
  kiln_scope_end();
}

/* map_ walks src in its own row-major order; sizes may differ. */
static void map_transposed_src_and_conversion(void **state) {
  kiln_scope_begin();
  kiln_tensor *src = kiln_view(kiln_arange(KILN_F64, 0, 6, 1), 2, (int64_t[]){2, 3});
  kiln_tensor *t = kiln_zeros(KILN_I16, 1, (int64_t[]){6});
  assert_int_equal(kiln_map_(t, kiln_t(src), second, NULL), KILN_OK);
  expect_values(t, (double[]){0, 3, 1, 4, 2, 5}, 6);
  /* results convert as a cast: truncation toward zero, bool is != 0 */
  kiln_tensor *f = kiln_from_data(KILN_F32, 1, (int64_t[]){4}, (float[]){-2.75f, 2.75f, 0.5f, 0});
  kiln_tensor *i = kiln_zeros(KILN_I32, 2, (int64_t[]){2, 2});
  assert_int_equal(kiln_map_(i, f, second, NULL), KILN_OK);
  expect_values(i, (double[]){-2, 2, 0, 0}, 4);
  kiln_tensor *b = kiln_zeros(KILN_BOOL, 1, (int64_t[]){4});
  assert_int_equal(kiln_map_(b, f, second, NULL), KILN_OK);
  expect_values(b, (double[]){1, 1, 1, 0}, 4);
  kiln_tensor *h = kiln_zeros(KILN_BF16, 1, (int64_t[]){1});
  assert_int_equal(kiln_map_(h, kiln_scalar(KILN_F64, 1.0 + 1.0 / 256), second, NULL), KILN_OK);
  expect_values(h, (double[]){1.0}, 1); /* round to nearest even */
  kiln_scope_end();
}

/* src over t's storage reads the values already updated: a prefix sum. */
static void map_src_aliasing_t(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F32, 1, 6, 1); /* 1 2 3 4 5 */
  assert_int_equal(kiln_map_(kiln_narrow(x, 0, 1, 4), kiln_narrow(x, 0, 0, 4), add2, NULL), KILN_OK);
  expect_values(x, (double[]){1, 3, 6, 10, 15}, 5);
  /* src == t: each element is read before it is written */
  kiln_tensor *y = kiln_arange(KILN_I8, 0, 4, 1);
  assert_int_equal(kiln_map_(y, y, add2, NULL), KILN_OK);
  expect_values(y, (double[]){0, 2, 4, 6}, 4);
  /* src reversed through a transposed view of the same storage */
  kiln_tensor *m = kiln_view(kiln_arange(KILN_F64, 0, 4, 1), 2, (int64_t[]){2, 2});
  assert_int_equal(kiln_map_(m, kiln_t(m), second, NULL), KILN_OK);
  /* m[0,0]=mT[0,0]=0; m[0,1]=mT[0,1]=m[1,0]=2; m[1,0]=mT[1,0]=m[0,1] (now 2); m[1,1]=3 */
  expect_values(m, (double[]){0, 2, 2, 3}, 4);
  kiln_scope_end();
}

static void map2_values_and_order(void **state) {
  kiln_scope_begin();
  kiln_tensor *t = kiln_full(KILN_F64, 2, (int64_t[]){2, 2}, 1);
  kiln_tensor *a = kiln_arange(KILN_I32, 0, 4, 1);
  kiln_tensor *b = kiln_t(kiln_view(kiln_arange(KILN_F32, 10, 14, 1), 2, (int64_t[]){2, 2}));
  assert_int_equal(kiln_map2_(t, a, b, fma3, NULL), KILN_OK);
  expect_values(t, (double[]){1 + 0 * 10, 1 + 1 * 12, 1 + 2 * 11, 1 + 3 * 13}, 4);
  trace tr = {0};
  kiln_tensor *u = kiln_arange(KILN_F32, 5, 8, 1);
  assert_int_equal(kiln_map2_(u, kiln_arange(KILN_U8, 0, 3, 1), kiln_scalar(KILN_F64, 0), record3, &tr),
                   KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_map2_", "b has 1 elements", NULL);
  assert_int_equal(tr.n, 0);
  assert_int_equal(kiln_map2_(u, kiln_arange(KILN_U8, 0, 3, 1),
                              kiln_expand(kiln_scalar(KILN_F64, 9), 1, (int64_t[]){3}), record3, &tr),
                   KILN_OK);
  assert_int_equal(tr.n, 3);
  for (int i = 0; i < 3; i++) {
    assert_float_equal(tr.args[0][i], 5 + i, 0);
    assert_float_equal(tr.args[1][i], i, 0);
    assert_float_equal(tr.args[2][i], 9, 0);
  }
  expect_values(u, (double[]){-5, -6, -7}, 3);
  kiln_scope_end();
}

/* Ops recorded before the call keep the old values; views and ops after
 * it see the new ones. */
static void laziness_and_sharing(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F32, 0, 4, 1);
  kiln_tensor *before = kiln_mul_scalar(x, 10);
  kiln_tensor *view = kiln_narrow(x, 0, 2, 2);
  assert_int_equal(kiln_apply_(kiln_narrow(x, 0, 1, 2), plus_one, NULL), KILN_OK);
  kiln_tensor *after = kiln_mul_scalar(x, 10);
  expect_values(before, (double[]){0, 10, 20, 30}, 4);
  expect_values(after, (double[]){0, 20, 30, 30}, 4);
  expect_values(view, (double[]){3, 3}, 2);
  /* t itself pending: forced first */
  kiln_tensor *p = kiln_add_scalar(x, 100);
  assert_int_equal(kiln_apply_(p, plus_one, NULL), KILN_OK);
  expect_values(p, (double[]){101, 103, 104, 104}, 4);
  kiln_scope_end();
}

static void from_blob_memory_updated(void **state) {
  float mem[4] = {1, 2, 3, 4};
  kiln_tensor *t = kiln_from_blob(KILN_F32, 1, (int64_t[]){4}, NULL, mem, NULL, NULL);
  assert_int_equal(kiln_apply_(t, plus_one, NULL), KILN_OK);
  assert_true(mem[0] == 2 && mem[1] == 3 && mem[2] == 4 && mem[3] == 5);
  kiln_release(t);
}

static void errors_write_nothing(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F32, 0, 4, 1);
  int n = 0;
  assert_int_equal(kiln_apply_(x, NULL, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_apply_", "fn is NULL", NULL);
  assert_int_equal(kiln_map_(x, x, NULL, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_map_", NULL);
  assert_int_equal(kiln_map2_(x, x, x, NULL, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_map2_", NULL);
  assert_int_equal(kiln_apply_(NULL, counter, &n), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "argument t is NULL", NULL);
  assert_int_equal(kiln_map_(x, NULL, add2, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "argument src is NULL", NULL);
  assert_int_equal(kiln_map2_(x, x, NULL, fma3, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "argument b is NULL", NULL);
  assert_int_equal(kiln_map_(x, kiln_zeros(KILN_F32, 2, (int64_t[]){2, 3}), add2, NULL), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_map_", "src has 6 elements (sizes [2, 3]) but t has 4 (sizes [4])", NULL);
  assert_int_equal(kiln_map2_(x, kiln_zeros(KILN_F32, 1, (int64_t[]){3}), x, fma3, NULL), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "a has 3 elements", NULL);
  expect_values(x, (double[]){0, 1, 2, 3}, 4);
  /* an empty tensor: fn is never called */
  assert_int_equal(kiln_apply_(kiln_zeros(KILN_F32, 2, (int64_t[]){0, 3}), counter, &n), KILN_OK);
  assert_int_equal(n, 0);
  /* the first error is kept */
  kiln_apply_(NULL, counter, &n);
  kiln_apply_(x, NULL, NULL);
  expect_error(KILN_ERR_ARG, "argument t is NULL", NULL);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(apply_counter_on_transposed_view),
      cmocka_unit_test(overlapping_views_accumulate),
      cmocka_unit_test(map_transposed_src_and_conversion),
      cmocka_unit_test(map_src_aliasing_t),
      cmocka_unit_test(map2_values_and_order),
      cmocka_unit_test(laziness_and_sharing),
      cmocka_unit_test(from_blob_memory_updated),
      cmocka_unit_test(errors_write_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
