/*
 * test_sort.c — the sorting ops (ops/sort.c) on known values: sort and
 * argsort (NaN largest, -0.0 == 0.0 keeping input order, stable ties in
 * both directions), topk, kthvalue, median (NaN propagates), mode (ties,
 * last index), max/min with indices (first occurrence, NaN wins), unique
 * (values, inverse, counts); every dtype (BOOL, integers with I64 beyond
 * 2^53, F16, BF16); transposed, stepped and expanded views; empty dims and 0-d
 * inputs; laziness (recording forces nothing, the values' gather reads
 * the ARGSORT's result without forcing it first); gradients through the
 * values; and the errors (bad dim, k out of range, NULL outputs, a
 * reduction over a dim of size 0), after which every output is NULL.
 * The expected values are Torch 1.13's (checked by hand in Python).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"

static kiln_tensor *f32s(int64_t n, const float *v) { return kiln_from_data(KILN_F32, 1, &n, v); }

/* t's n (≤ 64) I64 elements equal want exactly. */
static void expect_longs(kiln_tensor *t, const int64_t *want, int64_t n) {
  assert_non_null(t);
  assert_int_equal(kiln_dtype_of(t), KILN_I64);
  assert_int_equal(kiln_numel(t), n);
  int64_t got[64];
  assert_true(n <= 64);
  assert_int_equal(kiln_read(t, got, sizeof got), KILN_OK);
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("element %lld: got %lld, want %lld", (long long)i, (long long)got[i], (long long)want[i]);
}

static void expect_sizes(kiln_tensor *t, int ndim, const int64_t *sizes) {
  assert_non_null(t);
  assert_int_equal(kiln_dim(t), ndim);
  for (int d = 0; d < ndim; d++) assert_int_equal(kiln_size(t, d), sizes[d]);
}

static const float MIXED[7] = {1, NAN, 3, NAN, 3, -0.0f, 0};

static void sort_nan_zero_ties(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = f32s(7, MIXED), *v, *i;
  assert_int_equal(kiln_sort(x, 0, false, true, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){0, 0, 1, 3, 3, NAN, NAN}, 7, 0);
  expect_longs(i, (int64_t[]){5, 6, 0, 2, 4, 1, 3}, 7);
  float first;
  assert_int_equal(kiln_read(kiln_narrow(v, 0, 0, 1), &first, sizeof first), KILN_OK);
  assert_true(signbit(first)); /* -0.0 came first in the input: it stays first */
  assert_int_equal(kiln_sort(x, -1, true, true, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){NAN, NAN, 3, 3, 1, 0, 0}, 7, 0);
  expect_longs(i, (int64_t[]){1, 3, 2, 4, 0, 5, 6}, 7);
  expect_longs(kiln_argsort(x, 0, true, false), (int64_t[]){1, 3, 2, 4, 0, 5, 6}, 7);
  /* infinities sort below NaN */
  kiln_tensor *inf = f32s(4, (float[]){NAN, INFINITY, -INFINITY, 2});
  expect_longs(kiln_argsort(inf, 0, false, true), (int64_t[]){2, 3, 1, 0}, 4);
  expect_no_error();
  kiln_scope_end();
}

/* Rows along dim 1 of a transposed view and along dim 0 of a view with
 * step 2 (strides 1 and 2 elements), batched. */
static void sort_views(void **state) {
  (void)state;
  kiln_scope_begin();
  /* base [3, 4] = [[5,1,4,1],[0,9,2,7],[3,3,8,6]]; t(base) is [4, 3] */
  float b[12] = {5, 1, 4, 1, 0, 9, 2, 7, 3, 3, 8, 6};
  kiln_tensor *base = kiln_from_data(KILN_F32, 2, (int64_t[]){3, 4}, b), *v, *i;
  assert_int_equal(kiln_sort(kiln_t(base), 1, false, true, &v, &i), KILN_OK);
  expect_sizes(v, 2, (int64_t[]){4, 3});
  assert_true(kiln_is_contiguous(v) && kiln_is_contiguous(i));
  expect_values_tol(v, (double[]){0, 3, 5, 1, 3, 9, 2, 4, 8, 1, 6, 7}, 12, 0);
  expect_longs(i, (int64_t[]){1, 2, 0, 0, 2, 1, 1, 0, 2, 0, 2, 1}, 12);
  /* columns 0 and 2 (step 2), sorted along dim 0, descending */
  kiln_tensor *s = kiln_slice(base, 1, 0, 4, 2);
  assert_int_equal(kiln_sort(s, 0, true, true, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){5, 8, 3, 4, 0, 2}, 6, 0);
  expect_longs(i, (int64_t[]){0, 2, 2, 0, 1, 1}, 6);
  /* the same through topk, kthvalue, median, max */
  assert_int_equal(kiln_topk(s, 2, 0, false, true, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){0, 2, 3, 4}, 4, 0);
  expect_longs(i, (int64_t[]){1, 1, 2, 0}, 4);
  assert_int_equal(kiln_kthvalue(kiln_t(base), 2, 1, true, &v, &i), KILN_OK);
  expect_sizes(v, 2, (int64_t[]){4, 1});
  expect_values_tol(v, (double[]){3, 3, 4, 6}, 4, 0);
  expect_longs(i, (int64_t[]){2, 2, 0, 2}, 4);
  assert_int_equal(kiln_max(kiln_t(base), 1, false, &v, &i), KILN_OK);
  expect_sizes(v, 1, (int64_t[]){4});
  expect_values_tol(v, (double[]){5, 9, 8, 7}, 4, 0);
  expect_longs(i, (int64_t[]){0, 1, 2, 1}, 4);
  /* an expanded row (stride 0 along dim 0): each copy sorted alike */
  kiln_tensor *e = kiln_expand(kiln_narrow(base, 0, 1, 1), 2, (int64_t[]){2, 4}); /* [0,9,2,7] twice */
  assert_int_equal(kiln_sort(e, 1, true, true, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){9, 7, 2, 0, 9, 7, 2, 0}, 8, 0);
  expect_longs(i, (int64_t[]){1, 3, 2, 0, 1, 3, 2, 0}, 8);
  /* along the expanded dim: all ties, input order kept */
  expect_longs(kiln_argsort(e, 0, true, true), (int64_t[]){0, 0, 0, 0, 1, 1, 1, 1}, 8);
  expect_no_error();
  kiln_scope_end();
}

/* Integers compare exactly (I64 beyond 2^53), BOOL and the half types. */
static void sort_dtypes(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t big[4] = {(1LL << 62) + 1, (1LL << 62), INT64_MIN, -1};
  kiln_tensor *l = kiln_from_data(KILN_I64, 1, (int64_t[]){4}, big), *v, *i;
  assert_int_equal(kiln_sort(l, 0, false, true, &v, &i), KILN_OK);
  expect_longs(v, (int64_t[]){INT64_MIN, -1, (1LL << 62), (1LL << 62) + 1}, 4);
  expect_longs(i, (int64_t[]){2, 3, 1, 0}, 4);
  uint8_t u[5] = {200, 3, 255, 3, 0};
  kiln_tensor *u8 = kiln_from_data(KILN_U8, 1, (int64_t[]){5}, u);
  assert_int_equal(kiln_sort(u8, 0, true, true, &v, &i), KILN_OK);
  assert_int_equal(kiln_dtype_of(v), KILN_U8);
  expect_values_tol(v, (double[]){255, 200, 3, 3, 0}, 5, 0);
  expect_longs(i, (int64_t[]){2, 0, 1, 3, 4}, 5);
  int8_t s8[4] = {-5, 7, -128, 0};
  kiln_tensor *i8 = kiln_from_data(KILN_I8, 1, (int64_t[]){4}, s8);
  expect_longs(kiln_argsort(i8, 0, false, true), (int64_t[]){2, 0, 3, 1}, 4);
  uint8_t bo[5] = {1, 0, 1, 0, 0};
  kiln_tensor *bl = kiln_from_data(KILN_BOOL, 1, (int64_t[]){5}, bo);
  assert_int_equal(kiln_sort(bl, 0, false, true, &v, &i), KILN_OK);
  assert_int_equal(kiln_dtype_of(v), KILN_BOOL);
  expect_values_tol(v, (double[]){0, 0, 0, 1, 1}, 5, 0);
  expect_longs(i, (int64_t[]){1, 3, 4, 0, 2}, 5);
  assert_int_equal(kiln_max(bl, 0, false, &v, &i), KILN_OK);
  expect_longs(i, (int64_t[]){0}, 1);
  assert_int_equal(kiln_median(bl, 0, false, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){0}, 1, 0);
  for (int k = 0; k < 2; k++) {
    kiln_dtype dt = k ? KILN_BF16 : KILN_F16;
    kiln_tensor *h = kiln_to_dtype(f32s(7, MIXED), dt);
    assert_int_equal(kiln_sort(h, 0, true, true, &v, &i), KILN_OK);
    assert_int_equal(kiln_dtype_of(v), dt);
    expect_values_tol(v, (double[]){NAN, NAN, 3, 3, 1, 0, 0}, 7, 0);
    expect_longs(i, (int64_t[]){1, 3, 2, 4, 0, 5, 6}, 7);
    assert_int_equal(kiln_topk(h, 3, 0, false, true, &v, &i), KILN_OK);
    expect_longs(i, (int64_t[]){5, 6, 0}, 3);
  }
  expect_no_error();
  kiln_scope_end();
}

static void topk_kthvalue(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = f32s(7, MIXED), *v, *i;
  assert_int_equal(kiln_topk(x, 3, 0, true, true, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){NAN, NAN, 3}, 3, 0);
  expect_longs(i, (int64_t[]){1, 3, 2}, 3);
  assert_int_equal(kiln_topk(x, 0, 0, true, false, &v, &i), KILN_OK);
  assert_int_equal(kiln_numel(v), 0);
  assert_int_equal(kiln_realize(v), KILN_OK);
  assert_int_equal(kiln_topk(x, 7, 0, false, true, &v, &i), KILN_OK);
  expect_longs(i, (int64_t[]){5, 6, 0, 2, 4, 1, 3}, 7);
  /* Torch 1.13: k = 1..7 give indices 5, 6, 0, 2, 4, 1, 3 */
  const int64_t want[7] = {5, 6, 0, 2, 4, 1, 3};
  for (int64_t k = 1; k <= 7; k++) {
    assert_int_equal(kiln_kthvalue(x, k, 0, false, &v, &i), KILN_OK);
    assert_int_equal(kiln_dim(v), 0);
    expect_longs(i, &want[k - 1], 1);
  }
  expect_no_error();
  kiln_scope_end();
}

static void median_mode_max_min(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = f32s(7, MIXED), *v, *i;
  /* NaN propagates: the first NaN and its index */
  assert_int_equal(kiln_median(x, 0, false, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){NAN}, 1, 0);
  expect_longs(i, (int64_t[]){1}, 1);
  assert_int_equal(kiln_max(x, 0, true, &v, &i), KILN_OK);
  expect_sizes(v, 1, (int64_t[]){1});
  expect_values_tol(v, (double[]){NAN}, 1, 0);
  expect_longs(i, (int64_t[]){1}, 1);
  assert_int_equal(kiln_min(x, 0, true, &v, &i), KILN_OK);
  expect_longs(i, (int64_t[]){1}, 1);
  /* rows [4,1,3,2] (median 2 at 3), [2,1,2,1] (lower median: the second
   * 1 in stable order), [1,NaN,2,3] (NaN at 1) */
  float m[12] = {4, 1, 3, 2, 2, 1, 2, 1, 1, NAN, 2, 3};
  kiln_tensor *rows = kiln_from_data(KILN_F32, 2, (int64_t[]){3, 4}, m);
  assert_int_equal(kiln_median(rows, 1, true, &v, &i), KILN_OK);
  expect_sizes(i, 2, (int64_t[]){3, 1});
  expect_values_tol(v, (double[]){2, 1, NAN}, 3, 0);
  expect_longs(i, (int64_t[]){3, 3, 1}, 3); /* Torch 1.13 too: 3 for [2,1,2,1] */
  /* max/min: first occurrence among ties */
  float t[5] = {3, 1, 3, 1, 2};
  assert_int_equal(kiln_max(f32s(5, t), 0, false, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){3}, 1, 0);
  expect_longs(i, (int64_t[]){0}, 1);
  assert_int_equal(kiln_min(f32s(5, t), 0, false, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){1}, 1, 0);
  expect_longs(i, (int64_t[]){1}, 1);
  /* mode: Torch 1.13 gives 1 at index 3, and 1 at index 6 (ties: the
   * smaller value, its last index) */
  assert_int_equal(kiln_mode(f32s(5, (float[]){1, 2, 2, 1, 3}), 0, false, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){1}, 1, 0);
  expect_longs(i, (int64_t[]){3}, 1);
  assert_int_equal(kiln_mode(f32s(7, (float[]){2, 2, 1, 1, 3, 2, 1}), 0, false, &v, &i), KILN_OK);
  expect_longs(i, (int64_t[]){6}, 1);
  /* NaNs count as one value; -0.0 and 0.0 as one */
  assert_int_equal(kiln_mode(f32s(5, (float[]){NAN, 1, NAN, -0.0f, 0}), 0, false, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){0}, 1, 0);
  expect_longs(i, (int64_t[]){4}, 1);
  assert_int_equal(kiln_mode(f32s(3, (float[]){NAN, NAN, 1}), 0, false, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){NAN}, 1, 0);
  expect_longs(i, (int64_t[]){1}, 1);
  /* mode per column of an I32 matrix read transposed */
  int32_t c[6] = {7, 7, 5, 5, 7, 5};
  kiln_tensor *ci = kiln_from_data(KILN_I32, 2, (int64_t[]){3, 2}, c);
  assert_int_equal(kiln_mode(kiln_t(ci), 1, false, &v, &i), KILN_OK);
  expect_values_tol(v, (double[]){7, 5}, 2, 0);
  expect_longs(i, (int64_t[]){2, 2}, 2);
  expect_no_error();
  kiln_scope_end();
}

static void unique_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *v, *inv, *cnt;
  float x[6] = {3, 1, 2, 3, 1, 3};
  kiln_tensor *t = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, x);
  assert_int_equal(kiln_unique(t, true, true, true, &v, &inv, &cnt), KILN_OK);
  expect_values_tol(v, (double[]){1, 2, 3}, 3, 0);
  expect_sizes(inv, 2, (int64_t[]){2, 3});
  expect_longs(inv, (int64_t[]){2, 0, 1, 2, 0, 2}, 6);
  expect_longs(cnt, (int64_t[]){2, 1, 3}, 3);
  /* not requested: may be NULL, and are set to NULL when given */
  assert_int_equal(kiln_unique(kiln_t(t), false, false, false, &v, NULL, NULL), KILN_OK);
  expect_values_tol(v, (double[]){1, 2, 3}, 3, 0);
  inv = cnt = (kiln_tensor *)1;
  assert_int_equal(kiln_unique(t, true, false, true, &v, &inv, &cnt), KILN_OK);
  assert_null(inv);
  expect_longs(cnt, (int64_t[]){2, 1, 3}, 3);
  /* -0.0 == 0.0; NaNs are one value, last */
  assert_int_equal(kiln_unique(f32s(7, MIXED), true, true, true, &v, &inv, &cnt), KILN_OK);
  expect_values_tol(v, (double[]){0, 1, 3, NAN}, 4, 0);
  expect_longs(inv, (int64_t[]){1, 3, 2, 3, 2, 0, 0}, 7);
  expect_longs(cnt, (int64_t[]){2, 1, 2, 2}, 4);
  /* I64 beyond 2^53 stay distinct */
  int64_t big[3] = {(1LL << 62) + 1, (1LL << 62), (1LL << 62) + 1};
  assert_int_equal(kiln_unique(kiln_from_data(KILN_I64, 1, (int64_t[]){3}, big), true, true, true, &v, &inv, &cnt),
                   KILN_OK);
  expect_longs(v, (int64_t[]){(1LL << 62), (1LL << 62) + 1}, 2);
  expect_longs(cnt, (int64_t[]){1, 2}, 2);
  /* 0-d: values [1], inverse 0-d, counts [1]; empty: all empty */
  assert_int_equal(kiln_unique(kiln_scalar(KILN_F32, 5), true, true, true, &v, &inv, &cnt), KILN_OK);
  expect_sizes(v, 1, (int64_t[]){1});
  expect_sizes(inv, 0, NULL);
  expect_longs(cnt, (int64_t[]){1}, 1);
  assert_int_equal(kiln_unique(kiln_zeros(KILN_F32, 2, (int64_t[]){2, 0}), true, true, true, &v, &inv, &cnt),
                   KILN_OK);
  expect_sizes(v, 1, (int64_t[]){0});
  expect_sizes(inv, 2, (int64_t[]){2, 0});
  expect_sizes(cnt, 1, (int64_t[]){0});
  expect_no_error();
  kiln_scope_end();
}

static void empty_and_scalar(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *e = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 0}), *v, *i;
  assert_int_equal(kiln_sort(e, 1, false, true, &v, &i), KILN_OK);
  expect_sizes(v, 2, (int64_t[]){2, 0});
  expect_sizes(i, 2, (int64_t[]){2, 0});
  assert_int_equal(kiln_realize(v), KILN_OK);
  assert_int_equal(kiln_topk(e, 0, 1, true, true, &v, &i), KILN_OK);
  expect_sizes(i, 2, (int64_t[]){2, 0});
  /* reducing dim 0 (size 2) of [2, 0] gives [0] */
  assert_int_equal(kiln_max(e, 0, false, &v, &i), KILN_OK);
  expect_sizes(v, 1, (int64_t[]){0});
  assert_int_equal(kiln_median(e, 0, true, &v, &i), KILN_OK);
  expect_sizes(i, 2, (int64_t[]){1, 0});
  assert_int_equal(kiln_kthvalue(e, 1, 0, false, &v, &i), KILN_OK);
  expect_sizes(i, 1, (int64_t[]){0});
  assert_int_equal(kiln_mode(e, 0, false, &v, &i), KILN_OK);
  expect_sizes(i, 1, (int64_t[]){0});
  expect_no_error();
  /* a 0-d tensor: dim 0 or -1, 0-d results */
  kiln_tensor *s = kiln_scalar(KILN_F32, 5);
  int (*pairs[])(kiln_tensor *, int, bool, kiln_tensor **, kiln_tensor **) = {kiln_max, kiln_min, kiln_median,
                                                                                kiln_mode};
  for (int k = 0; k < 4; k++) {
    assert_int_equal(pairs[k](s, -1, true, &v, &i), KILN_OK);
    expect_sizes(v, 0, NULL);
    expect_sizes(i, 0, NULL);
    expect_values_tol(v, (double[]){5}, 1, 0);
    expect_longs(i, (int64_t[]){0}, 1);
  }
  assert_int_equal(kiln_sort(s, 0, true, true, &v, &i), KILN_OK);
  expect_sizes(v, 0, NULL);
  expect_longs(i, (int64_t[]){0}, 1);
  assert_int_equal(kiln_topk(s, 1, 0, true, true, &v, &i), KILN_OK);
  expect_sizes(v, 0, NULL);
  expect_values_tol(v, (double[]){5}, 1, 0);
  assert_int_equal(kiln_kthvalue(s, 1, 0, false, &v, &i), KILN_OK);
  expect_sizes(i, 0, NULL);
  expect_sizes(kiln_argsort(s, -1, false, true), 0, NULL);
  expect_no_error();
  kiln_scope_end();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = f32s(3, (float[]){1, 2, 3}), *v = (kiln_tensor *)1, *i = (kiln_tensor *)1;
  assert_int_equal(kiln_sort(x, 1, false, true, &v, &i), KILN_ERR_ARG);
  assert_ptr_equal(v, (kiln_tensor *)1); /* untouched */
  assert_ptr_equal(i, (kiln_tensor *)1); /* untouched */
  expect_error(KILN_ERR_ARG, "kiln_sort", NULL);
  assert_null(kiln_argsort(x, -2, false, true));
  expect_error(KILN_ERR_ARG, "kiln_argsort", NULL);
  v = i = (kiln_tensor *)1;
  assert_int_equal(kiln_topk(x, 4, 0, true, true, &v, &i), KILN_ERR_ARG);
  assert_ptr_equal(v, (kiln_tensor *)1); /* untouched */
  assert_ptr_equal(i, (kiln_tensor *)1); /* untouched */
  expect_error(KILN_ERR_ARG, "kiln_topk", "k = 4", NULL);
  assert_int_equal(kiln_topk(x, -1, 0, true, true, &v, &i), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_topk", NULL);
  v = i = (kiln_tensor *)1;
  assert_int_equal(kiln_kthvalue(x, 0, 0, false, &v, &i), KILN_ERR_ARG);
  assert_ptr_equal(v, (kiln_tensor *)1); /* untouched */
  expect_error(KILN_ERR_ARG, "kiln_kthvalue", "k = 0", NULL);
  assert_int_equal(kiln_kthvalue(x, 4, 0, false, &v, &i), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_kthvalue", NULL);
  /* NULL outputs and inputs */
  v = (kiln_tensor *)1;
  assert_int_equal(kiln_sort(x, 0, false, true, &v, NULL), KILN_ERR_ARG);
  assert_ptr_equal(v, (kiln_tensor *)1); /* untouched */
  expect_error(KILN_ERR_ARG, "kiln_sort", "indices", NULL);
  assert_int_equal(kiln_max(x, 0, false, NULL, &i), KILN_ERR_ARG);
  assert_ptr_equal(i, (kiln_tensor *)1); /* untouched */
  expect_error(KILN_ERR_ARG, "kiln_max", "values", NULL);
  assert_int_equal(kiln_median(NULL, 0, false, &v, &i), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_median", NULL);
  assert_int_equal(kiln_mode(x, 5, false, &v, &i), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_mode", NULL);
  kiln_tensor *inv = (kiln_tensor *)1;
  assert_int_equal(kiln_unique(x, true, true, false, &v, NULL, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_unique", "inverse", NULL);
  assert_int_equal(kiln_unique(x, true, false, false, NULL, &inv, NULL), KILN_ERR_ARG);
  assert_ptr_equal(inv, (kiln_tensor *)1); /* untouched */
  expect_error(KILN_ERR_ARG, "kiln_unique", "values", NULL);
  /* reducing a dim of size 0 (Torch: "Expected reduction dim 1 to have
   * non-zero size") */
  kiln_tensor *e = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 0});
  int (*reds[])(kiln_tensor *, int, bool, kiln_tensor **, kiln_tensor **) = {kiln_max, kiln_min, kiln_median,
                                                                               kiln_mode};
  for (int k = 0; k < 4; k++) {
    v = i = (kiln_tensor *)1;
    assert_int_equal(reds[k](e, 1, false, &v, &i), KILN_ERR_SHAPE);
    assert_ptr_equal(v, (kiln_tensor *)1); /* untouched */
    assert_ptr_equal(i, (kiln_tensor *)1); /* untouched */
    expect_error(KILN_ERR_SHAPE, "size 0", NULL);
  }
  assert_int_equal(kiln_kthvalue(e, 1, -1, false, &v, &i), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_kthvalue", NULL);
  kiln_scope_end();
}

/* Recording forces nothing; the values' GATHER reads the ARGSORT's
 * result without an index check forcing it first: one loop, then the
 * gather fused with its reader. */
static void lazy(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_clone(f32s(5, (float[]){4, 0, 3, 1, 2})), *v, *i;
  assert_int_equal(kiln_realize(x), KILN_OK);
  kiln_profile_begin();
  assert_int_equal(kiln_sort(kiln_mul_scalar(x, 2), 0, false, true, &v, &i), KILN_OK);
  kiln_tensor *k3v, *k3i, *mv, *mi;
  assert_int_equal(kiln_median(x, 0, false, &mv, &mi), KILN_OK);
  assert_int_equal(kiln_topk(x, 3, 0, true, true, &k3v, &k3i), KILN_OK);
  assert_int_equal(kiln_profile_count(), 0);
  kiln_tensor *r = kiln_add_scalar(v, 1);
  expect_values_tol(r, (double[]){1, 3, 5, 7, 9}, 5, 0);
  kiln_profile_end();
  bool saw_sort = false;
  for (int k = 0; k < kiln_profile_count(); k++) {
    kiln_kernel_record rec;
    assert_int_equal(kiln_profile_get(k, &rec), KILN_OK);
    if (strncmp(rec.name, "loop_ARGSORT", 12) == 0) {
      saw_sort = true;
      assert_string_equal(rec.backend, "loop");
      assert_int_equal(rec.bytes_read, 5 * 4);
      assert_int_equal(rec.bytes_written, 5 * 8);
      assert_true(rec.flops >= 5);
    }
  }
  assert_true(saw_sort);
  expect_values_tol(mv, (double[]){2}, 1, 0);
  expect_longs(mi, (int64_t[]){4}, 1);
  expect_values_tol(k3v, (double[]){4, 3, 2}, 3, 0);
  expect_no_error();
  kiln_scope_end();
}

/* Rows are sorted in parallel (the pool splits them): the result is the
 * same with 1 and 2 threads, each row a stable sort (checked directly),
 * and the profiler record says how many threads ran. */
static void rows_in_parallel(void **state) {
  (void)state;
  kiln_scope_begin();
  enum { R = 64, C = 600 };
  static float x[R * C];
  static int64_t a[R * C], b[R * C];
  for (int i = 0; i < R * C; i++) x[i] = (float)((i * 7919) % 13) - 6; /* many ties */
  kiln_tensor *t = kiln_from_data(KILN_F32, 2, (int64_t[]){R, C}, x);
  assert_int_equal(kiln_set_num_threads(1), KILN_OK);
  assert_int_equal(kiln_read(kiln_argsort(t, 1, true, true), a, sizeof a), KILN_OK);
  assert_int_equal(kiln_set_num_threads(2), KILN_OK);
  kiln_profile_begin();
  assert_int_equal(kiln_read(kiln_argsort(t, 1, true, true), b, sizeof b), KILN_OK);
  kiln_profile_end();
  assert_int_equal(kiln_set_num_threads(1), KILN_OK);
  assert_memory_equal(a, b, sizeof a);
  for (int r = 0; r < R; r++)
    for (int j = 1; j < C; j++) {
      float p = x[r * C + a[r * C + j - 1]], q = x[r * C + a[r * C + j]];
      assert_true(p > q || (p == q && a[r * C + j - 1] < a[r * C + j]));
    }
  kiln_kernel_record rec;
  assert_int_equal(kiln_profile_count(), 1);
  assert_int_equal(kiln_profile_get(0, &rec), KILN_OK);
  assert_string_equal(rec.name, "loop_ARGSORT_38400");
  assert_int_equal(rec.threads, 2);
  assert_int_equal(rec.flops, (int64_t)R * C * 10); /* ceil(log2(600)) = 10 */
  expect_no_error();
  kiln_scope_end();
}

/* Gradients through the values go to the selected elements of t. */
static void gradients(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, (int64_t[]){4}, (double[]){3, 1, 2, 5}), *v, *i, *g;
  /* sort: cotangent [10, 20, 30, 40] on sorted [1, 2, 3, 5] (from 1, 2, 0, 3) */
  assert_int_equal(kiln_sort(x, 0, false, true, &v, &i), KILN_OK);
  kiln_tensor *cot = kiln_from_data(KILN_F64, 1, (int64_t[]){4}, (double[]){10, 20, 30, 40});
  assert_int_equal(kiln_grad(&v, &cot, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){30, 10, 20, 40}, 4, 0);
  /* topk 2 (5 at 3, 3 at 0), weighted by [1, 2] */
  assert_int_equal(kiln_topk(x, 2, 0, true, true, &v, &i), KILN_OK);
  kiln_tensor *w = kiln_from_data(KILN_F64, 1, (int64_t[]){2}, (double[]){1, 2});
  kiln_tensor *loss = kiln_sum(kiln_mul(v, w), 0, NULL, false);
  assert_int_equal(kiln_grad(&loss, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){2, 0, 0, 1}, 4, 0);
  /* max over rows of [2, 2] (ties: the first), median, via x viewed */
  kiln_tensor *m = kiln_view(x, 2, (int64_t[]){2, 2}); /* [[3, 1], [2, 5]] */
  assert_int_equal(kiln_max(m, 1, false, &v, &i), KILN_OK);
  loss = kiln_sum(kiln_mul_scalar(v, 3), 0, NULL, false);
  assert_int_equal(kiln_grad(&loss, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){3, 0, 0, 3}, 4, 0);
  kiln_tensor *y = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, (double[]){7, 7, 1});
  assert_int_equal(kiln_max(y, 0, false, &v, &i), KILN_OK);
  assert_int_equal(kiln_grad(&v, NULL, 1, &y, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){1, 0, 0}, 3, 0);
  assert_int_equal(kiln_median(x, 0, false, &v, &i), KILN_OK); /* lower median 2 at 2 */
  assert_int_equal(kiln_grad(&v, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){0, 0, 1, 0}, 4, 0);
  expect_no_error();
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sort_nan_zero_ties), cmocka_unit_test(sort_views),   cmocka_unit_test(sort_dtypes),
      cmocka_unit_test(topk_kthvalue),      cmocka_unit_test(median_mode_max_min), cmocka_unit_test(unique_values),
      cmocka_unit_test(empty_and_scalar),   cmocka_unit_test(errors),       cmocka_unit_test(lazy),
      cmocka_unit_test(rows_in_parallel),   cmocka_unit_test(gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
