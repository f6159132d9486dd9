/*
 * test_views.c — every view function of kiln.h: the sizes, strides and
 * offsets PyTorch gives (written out below), storage sharing, the lazy
 * copy of reshape/flatten, split/chunk counts, scopes, and every error
 * path (status and a message naming the function and the values).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "graph.h"
#include "kiln/kiln.h"
#include "test_util.h"



/* Asserts t's view is exactly sizes/strides [ndim] at offset. */
static void check_view(const kiln_tensor *t, int ndim, const int64_t *sizes, const int64_t *strides, int64_t offset) {
  assert_non_null(t);
  assert_int_equal(kiln_dim(t), ndim);
  for (int i = 0; i < ndim; i++) {
    if (kiln_sizes(t)[i] != sizes[i] || kiln_strides(t)[i] != strides[i])
      fail_msg("dim %d: size %lld stride %lld, expected %lld %lld", i, (long long)kiln_sizes(t)[i],
               (long long)kiln_strides(t)[i], (long long)sizes[i], (long long)strides[i]);
  }
  assert_int_equal(kiln_storage_offset(t), offset);
}

#define V(...) ((const int64_t[]){__VA_ARGS__})

static bool same_storage(const kiln_tensor *a, const kiln_tensor *b) {
  kiln_storage *sa = kiln_storage_of(a), *sb = kiln_storage_of(b);
  bool same = sa == sb;
  kiln_storage_release(sa);
  kiln_storage_release(sb);
  return same;
}

/* arange(n) in F64 viewed with sizes [ndim]. */
static kiln_tensor *iota(int ndim, const int64_t *sizes) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= sizes[i];
  kiln_tensor *a = kiln_arange(KILN_F64, 0, (double)n, 1);
  return kiln_view(a, ndim, sizes);
}

/* Asserts t's row-major values equal want[n]. */
static void check_values(kiln_tensor *t, int64_t n, const double *want) {
  kiln_tensor *d = kiln_to_dtype(t, KILN_F64);
  double got[64];
  assert_true(n <= 64);
  assert_int_equal(kiln_numel(d), n);
  assert_int_equal(kiln_read(d, got, sizeof got), KILN_OK);
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("element %lld is %g, expected %g", (long long)i, got[i], want[i]);
}

/* ------------------------------------------------------------- narrow */

static void test_narrow(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, V(4, 5));
  check_view(kiln_narrow(x, 1, 1, 3), 2, V(4, 3), V(5, 1), 1);
  check_view(kiln_narrow(x, 0, -2, 2), 2, V(2, 5), V(5, 1), 10);
  check_view(kiln_narrow(x, -1, 4, 1), 2, V(4, 1), V(5, 1), 4);
  check_view(kiln_narrow(x, 0, 4, 0), 2, V(0, 5), V(5, 1), 20); /* length 0 at the end */
  assert_true(same_storage(x, kiln_narrow(x, 0, 1, 2)));
  expect_no_error();

  assert_null(kiln_narrow(x, 0, 0, -1));
  expect_error(KILN_ERR_ARG, "kiln_narrow", "length -1", NULL);
  assert_null(kiln_narrow(x, 0, 5, 0));
  expect_error(KILN_ERR_INDEX, "kiln_narrow", "start 5", "size 4", NULL);
  assert_null(kiln_narrow(x, 0, -5, 1));
  expect_error(KILN_ERR_INDEX, "kiln_narrow", "start -5", NULL);
  assert_null(kiln_narrow(x, 0, 3, 2));
  expect_error(KILN_ERR_INDEX, "kiln_narrow", "start 3 + length 2", "size 4", NULL);
  assert_null(kiln_narrow(x, 2, 0, 1));
  expect_error(KILN_ERR_ARG, "kiln_narrow", "dim 2", NULL);
  assert_null(kiln_narrow(kiln_scalar(KILN_F32, 1), 0, 0, 1));
  expect_error(KILN_ERR_ARG, "kiln_narrow", "0-d", NULL);
  assert_null(kiln_narrow(NULL, 0, 0, 1));
  expect_error(KILN_ERR_ARG, "kiln_narrow", "NULL", NULL);
  kiln_scope_end();
}

static void test_narrow_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(2, V(3, 4));
  check_values(kiln_narrow(x, 1, 1, 2), 6, (const double[]){1, 2, 5, 6, 9, 10});
  check_values(kiln_narrow(kiln_narrow(x, 0, 1, 2), 1, -1, 1), 2, (const double[]){7, 11});
  expect_no_error();
  kiln_scope_end();
}

/* ------------------------------------------------------------- select */

static void test_select(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, V(4, 5));
  check_view(kiln_select(x, 0, 2), 1, V(5), V(1), 10);
  check_view(kiln_select(x, 1, -1), 1, V(4), V(5), 4);
  check_view(kiln_select(kiln_select(x, 0, 3), 0, 2), 0, NULL, NULL, 17); /* 0-d */
  kiln_tensor *y = kiln_zeros(KILN_F32, 3, V(2, 3, 4));
  check_view(kiln_select(y, 1, 1), 2, V(2, 4), V(12, 1), 4);
  expect_no_error();

  assert_null(kiln_select(x, 0, 4));
  expect_error(KILN_ERR_INDEX, "kiln_select", "index 4", "size 4", NULL);
  assert_null(kiln_select(x, 1, -6));
  expect_error(KILN_ERR_INDEX, "kiln_select", "index -6", NULL);
  assert_null(kiln_select(kiln_zeros(KILN_F32, 1, V(0)), 0, 0));
  expect_error(KILN_ERR_INDEX, "kiln_select", "size 0", NULL);
  assert_null(kiln_select(kiln_scalar(KILN_F32, 1), 0, 0));
  expect_error(KILN_ERR_ARG, "kiln_select", "0-d", NULL);
  assert_null(kiln_select(x, -3, 0));
  expect_error(KILN_ERR_ARG, "kiln_select", "dim -3", NULL);
  kiln_scope_end();
}

/* -------------------------------------------------------------- slice */

static void test_slice(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, V(10));
  check_view(kiln_slice(x, 0, 1, 8, 3), 1, V(3), V(3), 1);               /* 1, 4, 7 */
  check_view(kiln_slice(x, 0, -3, INT64_MAX, 1), 1, V(3), V(1), 7);      /* x[-3:] */
  check_view(kiln_slice(x, 0, 8, 2, 1), 1, V(0), V(1), 8);               /* empty */
  check_view(kiln_slice(x, 0, -100, 100, 4), 1, V(3), V(4), 0);          /* clamped: 0, 4, 8 */
  check_view(kiln_slice(x, 0, 0, 10, INT64_MAX), 1, V(1), V(INT64_MAX), 0); /* Torch: stride * step */
  check_view(kiln_slice(x, 0, 20, 30, 1), 1, V(0), V(1), 10);
  kiln_tensor *m = kiln_zeros(KILN_F32, 2, V(4, 5));
  check_view(kiln_slice(m, 1, 1, 5, 2), 2, V(4, 2), V(5, 2), 1);
  check_view(kiln_slice(m, -2, 1, -1, 1), 2, V(2, 5), V(5, 1), 5);
  expect_no_error();

  assert_null(kiln_slice(x, 0, 0, 5, 0));
  expect_error(KILN_ERR_ARG, "kiln_slice", "step 0", NULL);
  assert_null(kiln_slice(x, 0, 5, 0, -1));
  expect_error(KILN_ERR_ARG, "kiln_slice", "step -1", NULL);
  assert_null(kiln_slice(x, 1, 0, 5, 1));
  expect_error(KILN_ERR_ARG, "kiln_slice", "dim 1", NULL);
  assert_null(kiln_slice(kiln_scalar(KILN_F32, 0), 0, 0, 1, 1));
  expect_error(KILN_ERR_ARG, "kiln_slice", "0-d", NULL);
  kiln_scope_end();
}

static void test_slice_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(1, V(10));
  check_values(kiln_slice(x, 0, 1, 8, 3), 3, (const double[]){1, 4, 7});
  check_values(kiln_slice(x, 0, -3, 100, 2), 2, (const double[]){7, 9});
  expect_no_error();
  kiln_scope_end();
}

/* ------------------------------------------------- transpose, t, permute */

static void test_transpose_and_t(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, V(2, 3));
  check_view(kiln_transpose(x, 0, 1), 2, V(3, 2), V(1, 3), 0);
  check_view(kiln_transpose(x, 1, 1), 2, V(2, 3), V(3, 1), 0);
  check_view(kiln_t(x), 2, V(3, 2), V(1, 3), 0);
  kiln_tensor *y = kiln_zeros(KILN_F32, 3, V(2, 3, 4));
  check_view(kiln_transpose(y, -1, 0), 3, V(4, 3, 2), V(1, 4, 12), 0);
  check_view(kiln_t(kiln_zeros(KILN_F32, 1, V(5))), 1, V(5), V(1), 0);
  check_view(kiln_t(kiln_scalar(KILN_F32, 1)), 0, NULL, NULL, 0);
  check_view(kiln_transpose(kiln_scalar(KILN_F32, 1), 0, -1), 0, NULL, NULL, 0);
  check_values(kiln_t(iota(2, V(2, 3))), 6, (const double[]){0, 3, 1, 4, 2, 5});
  expect_no_error();

  assert_null(kiln_transpose(x, 0, 2));
  expect_error(KILN_ERR_ARG, "kiln_transpose", "dim 2", NULL);
  assert_null(kiln_transpose(x, -3, 0));
  expect_error(KILN_ERR_ARG, "kiln_transpose", "dim -3", NULL);
  assert_null(kiln_t(y));
  expect_error(KILN_ERR_ARG, "kiln_t", "[2, 3, 4]", NULL);
  assert_null(kiln_t(NULL));
  expect_error(KILN_ERR_ARG, "kiln_t", NULL);
  kiln_scope_end();
}

static void test_permute(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *y = kiln_zeros(KILN_F32, 3, V(2, 3, 4));
  check_view(kiln_permute(y, 3, (const int[]){2, 0, 1}), 3, V(4, 2, 3), V(1, 12, 4), 0);
  check_view(kiln_permute(y, 3, (const int[]){-1, -3, -2}), 3, V(4, 2, 3), V(1, 12, 4), 0);
  check_view(kiln_permute(y, 3, (const int[]){0, 1, 2}), 3, V(2, 3, 4), V(12, 4, 1), 0);
  check_view(kiln_permute(kiln_scalar(KILN_F32, 1), 0, NULL), 0, NULL, NULL, 0);
  expect_no_error();

  assert_null(kiln_permute(y, 2, (const int[]){1, 0}));
  expect_error(KILN_ERR_ARG, "kiln_permute", "2 dims", "[1, 0]", "[2, 3, 4]", NULL);
  assert_null(kiln_permute(y, 3, (const int[]){0, 0, 1}));
  expect_error(KILN_ERR_ARG, "kiln_permute", "[0, 0, 1]", "repeat dim 0", NULL);
  assert_null(kiln_permute(y, 3, (const int[]){0, 1, 3}));
  expect_error(KILN_ERR_ARG, "kiln_permute", "dim 3", NULL);
  assert_null(kiln_permute(y, 3, NULL));
  expect_error(KILN_ERR_ARG, "kiln_permute", "NULL", NULL);
  kiln_scope_end();
}

/* ------------------------------------------------------------- unfold */

static void test_unfold(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, V(7));
  check_view(kiln_unfold(x, 0, 2, 2), 2, V(3, 2), V(2, 1), 0);
  check_view(kiln_unfold(x, 0, 3, 1), 2, V(5, 3), V(1, 1), 0);
  check_view(kiln_unfold(x, -1, 7, 3), 2, V(1, 7), V(3, 1), 0);
  check_view(kiln_unfold(x, 0, 0, 1), 2, V(8, 0), V(1, 1), 0);
  kiln_tensor *m = kiln_zeros(KILN_F32, 2, V(3, 4));
  check_view(kiln_unfold(m, 1, 2, 1), 3, V(3, 3, 2), V(4, 1, 1), 0);
  check_view(kiln_unfold(m, 0, 2, 1), 3, V(2, 4, 2), V(4, 1, 4), 0);
  check_view(kiln_unfold(kiln_scalar(KILN_F32, 1), 0, 1, 1), 1, V(1), V(1), 0); /* 0-d */
  check_values(kiln_unfold(iota(1, V(7)), 0, 3, 2), 9, (const double[]){0, 1, 2, 2, 3, 4, 4, 5, 6});
  expect_no_error();

  assert_null(kiln_unfold(x, 0, 8, 1));
  expect_error(KILN_ERR_SHAPE, "kiln_unfold", "size 8", "7", NULL);
  assert_null(kiln_unfold(x, 0, -1, 1));
  expect_error(KILN_ERR_SHAPE, "kiln_unfold", "size -1", NULL);
  assert_null(kiln_unfold(x, 0, 2, 0));
  expect_error(KILN_ERR_ARG, "kiln_unfold", "step 0", NULL);
  assert_null(kiln_unfold(x, 1, 2, 1));
  expect_error(KILN_ERR_ARG, "kiln_unfold", "dim 1", NULL);
  assert_null(kiln_unfold(kiln_scalar(KILN_F32, 1), 0, 2, 1));
  expect_error(KILN_ERR_SHAPE, "kiln_unfold", "size 2", NULL);
  kiln_scope_end();
}

/* ------------------------------------------------------------- expand */

static void test_expand(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, V(3, 1));
  check_view(kiln_expand(x, 3, V(2, 3, 4)), 3, V(2, 3, 4), V(0, 1, 0), 0);
  check_view(kiln_expand(x, 2, V(-1, 4)), 2, V(3, 4), V(1, 0), 0);
  check_view(kiln_expand(x, 3, V(1, 3, 4)), 3, V(1, 3, 4), V(3, 1, 0), 0); /* Torch's stride for a kept leading 1 */
  check_view(kiln_expand(x, 2, V(3, 0)), 2, V(3, 0), V(1, 0), 0);
  check_view(kiln_expand(x, 2, V(3, 1)), 2, V(3, 1), V(1, 1), 0);
  check_view(kiln_expand(kiln_scalar(KILN_F32, 1), 2, V(2, 2)), 2, V(2, 2), V(0, 0), 0);
  check_view(kiln_expand_as(x, kiln_zeros(KILN_I8, 3, V(5, 3, 2))), 3, V(5, 3, 2), V(0, 1, 0), 0);
  check_values(kiln_expand(iota(2, V(2, 1)), 2, V(2, 3)), 6, (const double[]){0, 0, 0, 1, 1, 1});
  expect_no_error();

  assert_null(kiln_expand(x, 2, V(4, 4)));
  expect_error(KILN_ERR_SHAPE, "kiln_expand", "size 3", "4", "[3, 1]", "[4, 4]", NULL);
  assert_null(kiln_expand(x, 1, V(3)));
  expect_error(KILN_ERR_ARG, "kiln_expand", "1 sizes", "[3, 1]", NULL);
  assert_null(kiln_expand(x, 3, V(-1, 3, 4)));
  expect_error(KILN_ERR_SHAPE, "kiln_expand", "size -1", NULL);
  assert_null(kiln_expand(x, 2, V(3, -2)));
  expect_error(KILN_ERR_SHAPE, "kiln_expand", "size -2", NULL);
  assert_null(kiln_expand(x, 17, V(1)));
  expect_error(KILN_ERR_ARG, "kiln_expand", "17 sizes", NULL);
  assert_null(kiln_expand(x, 2, NULL));
  expect_error(KILN_ERR_ARG, "kiln_expand", NULL);
  assert_null(kiln_expand_as(x, kiln_zeros(KILN_F32, 1, V(3))));
  expect_error(KILN_ERR_SHAPE, "kiln_expand_as", "[3, 1]", "[3]", NULL);
  assert_null(kiln_expand_as(x, NULL));
  expect_error(KILN_ERR_ARG, "kiln_expand_as", "other", NULL);
  /* an element count past int64 (the leading stride multiplied past it
   * too: signed overflow before the check) */
  kiln_tensor *one = kiln_zeros(KILN_F32, 2, V(1, 1));
  assert_null(kiln_expand(one, 3, V(1LL << 40, 1LL << 40, 1LL << 40)));
  expect_error(KILN_ERR_SHAPE, "kiln_expand", "overflow", NULL);
  assert_null(kiln_expand(one, 4, V(0, 1LL << 40, 1LL << 40, 1LL << 40)));
  expect_error(KILN_ERR_SHAPE, "kiln_expand", "overflow", NULL);
  kiln_scope_end();
}

/* --------------------------------------------------------------- view */

static void test_view(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, V(4, 4));
  check_view(kiln_view(x, 1, V(16)), 1, V(16), V(1), 0);
  check_view(kiln_view(x, 2, V(-1, 8)), 2, V(2, 8), V(8, 1), 0); /* Torch docs: x.view(-1, 8) */
  check_view(kiln_view(x, 3, V(2, -1, 2)), 3, V(2, 4, 2), V(8, 2, 1), 0);
  assert_true(same_storage(x, kiln_view(x, 1, V(16))));
  /* a narrowed matrix: rows of 3 with stride 6 split, but cannot merge */
  kiln_tensor *n = kiln_narrow(kiln_zeros(KILN_F32, 2, V(4, 6)), 1, 0, 3);
  check_view(kiln_view(n, 3, V(2, 2, 3)), 3, V(2, 2, 3), V(12, 6, 1), 0);
  check_view(kiln_view(n, 3, V(4, 3, 1)), 3, V(4, 3, 1), V(6, 1, 1), 0);
  /* size-1 dims are skipped */
  kiln_tensor *s1 = kiln_zeros(KILN_F32, 3, V(2, 1, 3));
  check_view(kiln_view(s1, 2, V(2, 3)), 2, V(2, 3), V(3, 1), 0);
  /* a transpose that keeps memory order in groups: [1,2,3,4].transpose(1,2) */
  kiln_tensor *a = kiln_transpose(kiln_zeros(KILN_F32, 4, V(1, 2, 3, 4)), 1, 2); /* [1,3,2,4] [24,4,12,1] */
  check_view(kiln_view(a, 3, V(3, 2, 4)), 3, V(3, 2, 4), V(4, 12, 1), 0);
  check_view(kiln_view(a, 4, V(3, 2, 2, 2)), 4, V(3, 2, 2, 2), V(4, 12, 2, 1), 0);
  /* 0-d and empty */
  kiln_tensor *sc = kiln_scalar(KILN_F32, 3);
  check_view(kiln_view(sc, 2, V(1, 1)), 2, V(1, 1), V(1, 1), 0);
  check_view(kiln_view(kiln_view(sc, 1, V(1)), 0, NULL), 0, NULL, NULL, 0);
  check_view(kiln_view(sc, 1, V(-1)), 1, V(1), V(1), 0);
  kiln_tensor *e = kiln_zeros(KILN_F32, 2, V(0, 3));
  check_view(kiln_view(e, 1, V(-1)), 1, V(0), V(1), 0);
  check_view(kiln_view(e, 2, V(3, 0)), 2, V(3, 0), V(1, 1), 0);
  kiln_tensor *es = kiln_as_strided(e, 2, V(2, 0), V(7, 3), 0);
  check_view(kiln_view(es, 2, V(2, 0)), 2, V(2, 0), V(7, 3), 0); /* same sizes keep strides */
  check_view(kiln_view_as(x, kiln_zeros(KILN_I32, 2, V(8, 2))), 2, V(8, 2), V(2, 1), 0);
  expect_no_error();
  kiln_scope_end();
}

static void test_view_errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *y = kiln_transpose(kiln_zeros(KILN_F32, 2, V(3, 2)), 0, 1); /* [2,3] strides [1,2] */
  assert_null(kiln_view(y, 1, V(6)));
  assert_int_equal(kiln_last_status(), KILN_ERR_SHAPE);
  assert_string_equal(kiln_last_error(), "kiln_view: size [6] is not compatible with sizes [2, 3] and strides [1, 2]; "
                                         "call kiln_contiguous first or use kiln_reshape");
  kiln_clear_error();
  assert_null(kiln_view(y, 1, V(-1)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "size [6]", "kiln_reshape", NULL);
  kiln_tensor *a = kiln_transpose(kiln_zeros(KILN_F32, 4, V(1, 2, 3, 4)), 1, 2);
  assert_null(kiln_view(a, 3, V(1, 6, 4)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "[1, 6, 4]", "[1, 3, 2, 4]", "[24, 4, 12, 1]", NULL);

  kiln_tensor *x = kiln_zeros(KILN_F32, 2, V(2, 3));
  assert_null(kiln_view(x, 2, V(4, -1)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "[4, -1]", "6 elements", NULL);
  assert_null(kiln_view(x, 1, V(7)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "[7]", "6 elements", NULL);
  assert_null(kiln_view(x, 2, V(-1, -1)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "[-1, -1]", NULL);
  assert_null(kiln_view(x, 2, V(-2, -3)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "size -2", NULL);
  assert_null(kiln_view(kiln_zeros(KILN_F32, 2, V(0, 3)), 2, V(0, -1)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "[0, -1]", "ambiguous", NULL);
  assert_null(kiln_view(x, 2, V(0, -1)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "[0, -1]", NULL);
  /* empty, but contiguous strides over the other dims would overflow */
  kiln_tensor *e = kiln_zeros(KILN_F32, 1, V(0));
  assert_null(kiln_view(e, 3, V(1LL << 40, 0, 1LL << 40)));
  expect_error(KILN_ERR_SHAPE, "kiln_view", "invalid", NULL);
  assert_null(kiln_reshape(e, 3, V(1LL << 40, 0, 1LL << 40)));
  expect_error(KILN_ERR_SHAPE, "kiln_reshape", "invalid", NULL);
  assert_null(kiln_view(x, 17, V(1)));
  expect_error(KILN_ERR_ARG, "kiln_view", "ndim 17", NULL);
  assert_null(kiln_view(x, 2, NULL));
  expect_error(KILN_ERR_ARG, "kiln_view", NULL);
  assert_null(kiln_view_as(x, kiln_zeros(KILN_F32, 1, V(5))));
  expect_error(KILN_ERR_SHAPE, "kiln_view_as", "[5]", NULL);
  assert_null(kiln_view_as(NULL, x));
  expect_error(KILN_ERR_ARG, "kiln_view_as", NULL);
  kiln_scope_end();
}

/* ------------------------------------------------------------ reshape */

static void test_reshape(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(2, V(2, 3));
  kiln_tensor *r = kiln_reshape(x, 2, V(3, -1));
  check_view(r, 2, V(3, 2), V(2, 1), 0);
  assert_true(same_storage(x, r)); /* a view */
  int64_t pending = graph_pending_count();
  kiln_tensor *xt = kiln_t(x);                 /* [3,2] strides [1,3] */
  kiln_tensor *c = kiln_reshape(xt, 1, V(6)); /* needs a copy */
  check_view(c, 1, V(6), V(1), 0);
  assert_false(same_storage(x, c));
  assert_int_equal(graph_pending_count(), pending + 1); /* one lazy CAST node */
  assert_int_equal(kiln_dtype_of(c), KILN_F64);
  check_values(c, 6, (const double[]){0, 3, 1, 4, 2, 5});
  check_view(kiln_reshape(xt, 3, V(1, 2, 3)), 3, V(1, 2, 3), V(6, 3, 1), 0);
  check_view(kiln_reshape(kiln_scalar(KILN_F32, 1), 0, NULL), 0, NULL, NULL, 0);
  expect_no_error();

  assert_null(kiln_reshape(x, 1, V(5)));
  expect_error(KILN_ERR_SHAPE, "kiln_reshape", "[5]", "6 elements", NULL);
  assert_null(kiln_reshape(NULL, 1, V(6)));
  expect_error(KILN_ERR_ARG, "kiln_reshape", NULL);
  kiln_scope_end();
}

/* ------------------------------------------ squeeze, unsqueeze, flatten */

static void test_squeeze(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 4, V(1, 3, 1, 2)); /* strides [6, 2, 2, 1] */
  check_view(kiln_squeeze(x), 2, V(3, 2), V(2, 1), 0);
  check_view(kiln_squeeze_dim(x, 0), 3, V(3, 1, 2), V(2, 2, 1), 0);
  check_view(kiln_squeeze_dim(x, -2), 3, V(1, 3, 2), V(6, 2, 1), 0);
  check_view(kiln_squeeze_dim(x, 1), 4, V(1, 3, 1, 2), V(6, 2, 2, 1), 0); /* size 3: unchanged */
  check_view(kiln_squeeze(kiln_zeros(KILN_F32, 2, V(1, 1))), 0, NULL, NULL, 0);
  check_view(kiln_squeeze_dim(kiln_scalar(KILN_F32, 1), 0), 0, NULL, NULL, 0);
  check_view(kiln_squeeze(kiln_scalar(KILN_F32, 1)), 0, NULL, NULL, 0);
  expect_no_error();
  assert_null(kiln_squeeze_dim(x, 4));
  expect_error(KILN_ERR_ARG, "kiln_squeeze_dim", "dim 4", NULL);
  assert_null(kiln_squeeze(NULL));
  expect_error(KILN_ERR_ARG, "kiln_squeeze", NULL);
  kiln_scope_end();
}

static void test_unsqueeze(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, V(2, 3));
  check_view(kiln_unsqueeze(x, 0), 3, V(1, 2, 3), V(6, 3, 1), 0);
  check_view(kiln_unsqueeze(x, 1), 3, V(2, 1, 3), V(3, 3, 1), 0);
  check_view(kiln_unsqueeze(x, 2), 3, V(2, 3, 1), V(3, 1, 1), 0);
  check_view(kiln_unsqueeze(x, -1), 3, V(2, 3, 1), V(3, 1, 1), 0);
  check_view(kiln_unsqueeze(x, -3), 3, V(1, 2, 3), V(6, 3, 1), 0);
  check_view(kiln_unsqueeze(kiln_t(x), 1), 3, V(3, 1, 2), V(1, 6, 3), 0);
  check_view(kiln_unsqueeze(kiln_scalar(KILN_F32, 1), 0), 1, V(1), V(1), 0);
  expect_no_error();
  assert_null(kiln_unsqueeze(x, 3));
  expect_error(KILN_ERR_ARG, "kiln_unsqueeze", "dim 3", NULL);
  assert_null(kiln_unsqueeze(x, -4));
  expect_error(KILN_ERR_ARG, "kiln_unsqueeze", "dim -4", NULL);
  int64_t ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_null(kiln_unsqueeze(kiln_zeros(KILN_F32, 16, ones), 0));
  expect_error(KILN_ERR_SHAPE, "kiln_unsqueeze", "17 dims", NULL);
  kiln_scope_end();
}

static void test_flatten(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(3, V(2, 3, 4));
  kiln_tensor *f = kiln_flatten(x, 0, -1);
  check_view(f, 1, V(24), V(1), 0);
  assert_true(same_storage(x, f));
  check_view(kiln_flatten(x, 1, 2), 2, V(2, 12), V(12, 1), 0);
  check_view(kiln_flatten(x, 0, 1), 2, V(6, 4), V(4, 1), 0);
  check_view(kiln_flatten(x, 1, 1), 3, V(2, 3, 4), V(12, 4, 1), 0);
  check_view(kiln_flatten(kiln_scalar(KILN_F32, 1), 0, -1), 1, V(1), V(1), 0);
  kiln_tensor *p = kiln_permute(x, 3, (const int[]){2, 1, 0}); /* [4,3,2] strides [1,4,12] */
  kiln_tensor *pf = kiln_flatten(p, 0, 1);                    /* not a view: copy */
  check_view(pf, 2, V(12, 2), V(2, 1), 0);
  assert_false(same_storage(x, pf));
  check_values(kiln_flatten(kiln_narrow(p, 0, 0, 1), 0, -1), 6, (const double[]){0, 12, 4, 16, 8, 20});
  expect_no_error();
  assert_null(kiln_flatten(x, 2, 1));
  expect_error(KILN_ERR_ARG, "kiln_flatten", "start_dim 2", "end_dim 1", NULL);
  assert_null(kiln_flatten(x, 0, 3));
  expect_error(KILN_ERR_ARG, "kiln_flatten", "dim 3", NULL);
  kiln_scope_end();
}

/* --------------------------------------------------------- as_strided */

static void test_as_strided(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(1, V(10));
  kiln_tensor *w = kiln_as_strided(x, 2, V(3, 3), V(1, 1), 2); /* sliding windows from 2 */
  check_view(w, 2, V(3, 3), V(1, 1), 2);
  assert_true(same_storage(x, w));
  check_values(w, 9, (const double[]){2, 3, 4, 3, 4, 5, 4, 5, 6});
  check_view(kiln_as_strided(x, 2, V(3, 3), V(3, 1), 1), 2, V(3, 3), V(3, 1), 1); /* last element 9 */
  check_view(kiln_as_strided(x, 2, V(4, 0), V(100, 1), 50), 2, V(4, 0), V(100, 1), 50); /* empty: anything */
  check_view(kiln_as_strided(x, 1, V(5), V(0), 9), 1, V(5), V(0), 9);
  check_view(kiln_as_strided(kiln_narrow(x, 0, 5, 2), 1, V(2), V(1), 0), 1, V(2), V(1), 0); /* absolute offset */
  expect_no_error();
  assert_null(kiln_as_strided(x, 2, V(3, 3), V(3, 1), 2));
  expect_error(KILN_ERR_SHAPE, "kiln_as_strided", "[3, 3]", "[3, 1]", "offset 2", "10 elements", NULL);
  assert_null(kiln_as_strided(x, 1, V(2), V(-1), 5));
  expect_error(KILN_ERR_ARG, "kiln_as_strided", "[-1]", NULL);
  /* views within the storage whose element count, or a contiguous copy's
   * strides, overflow (kiln_clone of them overflowed int64) */
  assert_null(kiln_as_strided(x, 3, V(0, 1LL << 40, 1LL << 40), V(1, 1, 1), 0));
  expect_error(KILN_ERR_SHAPE, "kiln_as_strided", "overflow", NULL);
  assert_null(kiln_as_strided(x, 2, V(1LL << 40, 1LL << 40), V(0, 0), 0));
  expect_error(KILN_ERR_SHAPE, "kiln_as_strided", "overflow", NULL);
  assert_null(kiln_as_strided(x, 1, V(-2), V(1), 0));
  expect_error(KILN_ERR_ARG, "kiln_as_strided", "[-2]", NULL);
  assert_null(kiln_as_strided(x, 1, V(1), V(1), -1));
  expect_error(KILN_ERR_ARG, "kiln_as_strided", "offset -1", NULL);
  assert_null(kiln_as_strided(x, 2, V(3, 3), NULL, 0));
  expect_error(KILN_ERR_ARG, "kiln_as_strided", NULL);
  assert_null(kiln_as_strided(x, 1, V(INT64_MAX / 2), V(4), 0));
  expect_error(KILN_ERR_SHAPE, "kiln_as_strided", NULL);
  kiln_scope_end();
}

/* ------------------------------------------------------- split, chunk */

static void test_split(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, V(5, 2));
  kiln_tensor *out[4] = {NULL, NULL, NULL, NULL};
  assert_int_equal(kiln_split(x, 2, 0, out, 4), 3);
  check_view(out[0], 2, V(2, 2), V(2, 1), 0);
  check_view(out[1], 2, V(2, 2), V(2, 1), 4);
  check_view(out[2], 2, V(1, 2), V(2, 1), 8);
  assert_null(out[3]);
  assert_true(same_storage(x, out[2]));
  kiln_tensor *sentinel = (kiln_tensor *)&out;
  kiln_tensor *few[2] = {sentinel, sentinel};
  assert_int_equal(kiln_split(x, 2, 0, few, 1), 3); /* only one stored */
  check_view(few[0], 2, V(2, 2), V(2, 1), 0);
  assert_ptr_equal(few[1], sentinel);
  assert_int_equal(kiln_split(x, 1, -1, NULL, 0), 2); /* count only */
  assert_int_equal(kiln_split(x, INT64_MAX, 0, out, 4), 1);
  check_view(out[0], 2, V(5, 2), V(2, 1), 0);
  assert_int_equal(kiln_split(x, 10, 0, out, 4), 1);
  check_view(out[0], 2, V(5, 2), V(2, 1), 0);
  kiln_tensor *e = kiln_zeros(KILN_F32, 1, V(0));
  assert_int_equal(kiln_split(e, 0, 0, out, 4), 1); /* Torch: size 0 allowed for an empty dim */
  check_view(out[0], 1, V(0), V(1), 0);
  assert_int_equal(kiln_split(e, 3, 0, out, 4), 1);
  check_view(out[0], 1, V(0), V(1), 0);
  check_values(kiln_split(iota(1, V(5)), 2, 0, out, 4) == 3 ? out[2] : NULL, 1, (const double[]){4});
  expect_no_error();

  kiln_tensor *keep[2] = {sentinel, sentinel};
  assert_int_equal(kiln_split(x, 0, 0, keep, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_split", "split size 0", "size 5", NULL);
  assert_ptr_equal(keep[0], sentinel); /* untouched on error */
  assert_int_equal(kiln_split(x, -1, 0, keep, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_split", "split size -1", NULL);
  assert_int_equal(kiln_split(x, 1, 2, keep, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_split", "dim 2", NULL);
  assert_int_equal(kiln_split(kiln_scalar(KILN_F32, 1), 1, 0, keep, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_split", "0-d", NULL);
  assert_int_equal(kiln_split(x, 1, 0, NULL, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_split", "max_out 2", NULL);
  assert_int_equal(kiln_split(x, 1, 0, keep, -1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_split", "max_out -1", NULL);
  assert_int_equal(kiln_split(NULL, 1, 0, keep, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_split", NULL);
  assert_ptr_equal(keep[0], sentinel);
  kiln_scope_end();
}

static void test_chunk(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, V(5));
  kiln_tensor *out[8] = {NULL};
  assert_int_equal(kiln_chunk(x, 3, 0, out, 8), 3); /* ceil(5/3) = 2: 2, 2, 1 */
  check_view(out[0], 1, V(2), V(1), 0);
  check_view(out[1], 1, V(2), V(1), 2);
  check_view(out[2], 1, V(1), V(1), 4);
  assert_int_equal(kiln_chunk(x, 4, 0, out, 8), 3); /* fewer than asked: 2, 2, 1 */
  assert_int_equal(kiln_chunk(x, 5, 0, out, 8), 5);
  assert_int_equal(kiln_chunk(x, 9, 0, out, 8), 5);
  assert_int_equal(kiln_chunk(x, 1, 0, out, 8), 1);
  check_view(out[0], 1, V(5), V(1), 0);
  kiln_tensor *m = kiln_zeros(KILN_F32, 2, V(2, 6));
  assert_int_equal(kiln_chunk(m, 2, -1, out, 8), 2);
  check_view(out[1], 2, V(2, 3), V(6, 1), 3);
  assert_int_equal(kiln_chunk(kiln_zeros(KILN_F32, 1, V(0)), 3, 0, out, 8), 3); /* Torch: 3 empty chunks */
  check_view(out[2], 1, V(0), V(1), 0);
  expect_no_error();
  assert_int_equal(kiln_chunk(x, 0, 0, out, 8), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_chunk", "chunk count 0", NULL);
  assert_int_equal(kiln_chunk(kiln_scalar(KILN_F32, 1), 2, 0, out, 8), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_chunk", "0-d", NULL);
  assert_int_equal(kiln_chunk(x, 2, 1, out, 8), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_chunk", "dim 1", NULL);
  kiln_scope_end();
}

/* ------------------------------------------------ sharing and lifetime */

/* A write through a view is seen by the base and by other views. */
static void test_views_share_writes(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F64, 2, V(3, 4));
  kiln_tensor *col = kiln_select(x, 1, 2);
  kiln_tensor *tr = kiln_t(x);
  assert_int_equal(kiln_set(col, V(1), 7), KILN_OK);
  assert_int_equal(kiln_get(x, V(1, 2)), 7);
  assert_int_equal(kiln_get(tr, V(2, 1)), 7);
  assert_int_equal(kiln_fill_(kiln_narrow(x, 0, 2, 1), 5), KILN_OK);
  check_values(kiln_flatten(x, 0, -1), 12, (const double[]){0, 0, 0, 0, 0, 0, 7, 0, 5, 5, 5, 5});
  check_values(col, 3, (const double[]){0, 7, 5});
  expect_no_error();
  kiln_scope_end();
}

/* Views add no graph nodes; a scope releases them all, and kiln_keep moves
 * one out. Leaks are caught by the ASan build. */
static void test_views_and_scopes(void **state) {
  (void)state;
  int64_t before = graph_pending_count();
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 3, V(2, 3, 4));
  int64_t with_x = graph_pending_count();
  kiln_tensor *v = kiln_permute(kiln_unsqueeze(kiln_narrow(x, 2, 1, 2), 0), 4, (const int[]){3, 2, 1, 0});
  kiln_tensor *parts[3];
  assert_int_equal(kiln_chunk(v, 2, 0, parts, 3), 2);
  assert_int_equal(graph_pending_count(), with_x);
  kiln_tensor *kept = kiln_keep(kiln_expand(kiln_select(x, 0, 1), 3, V(5, 3, 4)));
  kiln_scope_end();
  assert_int_equal(graph_pending_count(), with_x); /* kept still holds the storage */
  check_view(kept, 3, V(5, 3, 4), V(0, 4, 1), 12);
  kiln_release(kept);
  assert_int_equal(graph_pending_count(), before);
}

/* A NULL input propagates through a chain and keeps the first error. */
static void test_null_chain(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, V(4));
  kiln_tensor *bad = kiln_narrow(x, 0, 3, 5);
  kiln_tensor *r = kiln_unsqueeze(kiln_transpose(kiln_view(bad, 1, V(-1)), 0, 0), 0);
  assert_null(r);
  expect_error(KILN_ERR_INDEX, "kiln_narrow", "length 5", NULL);
  kiln_scope_end();
}

/* graph_view from sizes and strides [nd] at offset. */
static graph_view gv(int nd, const int64_t *sizes, const int64_t *strides, int64_t offset) {
  graph_view v = {.ndim = nd, .offset = offset};
  for (int d = 0; d < nd; d++) v.sizes[d] = sizes[d], v.strides[d] = strides[d];
  return v;
}

/* Checks a split of `outer` (a view of the contiguous copy of src)
 * against its definition at every outer index: the copy's flat element
 * outer.offset + Σ i_d·stride_d, unravelled row-major over src's sizes,
 * is src element src.offset + Σ j_t·stride_t. */
static void check_split(const graph_view *outer, const graph_view *src) {
  graph_split_view s;
  assert_true(graph_view_split(outer, src, &s));
  assert_int_equal(s.ndim, outer->ndim);
  int64_t n = graph_view_numel(outer);
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e, flat = outer->offset, got = s.offset;
    for (int d = outer->ndim - 1; d >= 0; d--) {
      int64_t i = rest % outer->sizes[d];
      rest /= outer->sizes[d];
      flat += i * outer->strides[d];
      got += graph_split_offset(&s, d, i);
    }
    int64_t want = src->offset;
    for (int t = src->ndim - 1; t >= 0; t--) {
      want += flat % src->sizes[t] * src->strides[t];
      flat /= src->sizes[t];
    }
    assert_int_equal(got, want);
  }
}

/* graph_view_split: a 2-D convolution's window view (groups 2, 3×2
 * kernel, dilation 2, stride 2 over a padded [2, 4, 9, 8] input) read as
 * its column matrix [G, C/G·ΠK, N·ΠOut], transposed (the weight
 * gradient's columnsᵀ), with a broadcast batch dim, and a merged
 * permuted tensor read at an offset in an unsplit dim; the views that
 * step inside a dim, overlap or start inside a run are not split. */
static void test_split_views(void **state) {
  (void)state;
  /* window [G, C/G, KH, KW, N, OH, OW] of [N=2, C=4, 9, 8] (strides 288, 72, 8, 1) */
  graph_view win = gv(7, V(2, 2, 3, 2, 2, 3, 3), V(144, 72, 16, 2, 288, 16, 2), 5);
  int64_t kk = 2 * 3 * 2, nn = 2 * 3 * 3;
  graph_view cols = gv(3, V(2, kk, nn), V(kk * nn, nn, 1), 0);
  check_split(&cols, &win);
  graph_view cols_t = gv(3, V(2, nn, kk), V(kk * nn, 1, nn), 0);
  check_split(&cols_t, &win);
  graph_view bcast = gv(4, V(3, 2, kk, nn), V(0, kk * nn, nn, 1), 0);
  check_split(&bcast, &win);
  /* [N=3, O=4, 5] permuted to [O, N, 5] and merged to [O, N·5]; its row
   * o = 1 as [N, 5] (offset 15 in the copy: o fixed, not split) */
  graph_view perm = gv(3, V(4, 3, 5), V(5, 20, 1), 0);
  graph_view merged = gv(2, V(4, 15), V(15, 1), 0);
  check_split(&merged, &perm);
  graph_view row = gv(2, V(3, 5), V(5, 1), 15);
  check_split(&row, &perm);
  graph_split_view s;
  graph_view inside = gv(2, V(2, 7), V(21, 3), 0); /* stride 3 steps inside N·5 */
  assert_false(graph_view_split(&inside, &perm, &s));
  graph_view overlap = gv(2, V(4, 4), V(15, 15), 0); /* two dims over one run */
  assert_false(graph_view_split(&overlap, &perm, &s));
  graph_view offset_in_run = gv(2, V(4, 14), V(15, 1), 1); /* starts inside the N·5 run */
  assert_false(graph_view_split(&offset_in_run, &perm, &s));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_narrow),          cmocka_unit_test(test_narrow_values),
      cmocka_unit_test(test_select),          cmocka_unit_test(test_slice),
      cmocka_unit_test(test_slice_values),    cmocka_unit_test(test_transpose_and_t),
      cmocka_unit_test(test_permute),         cmocka_unit_test(test_unfold),
      cmocka_unit_test(test_expand),          cmocka_unit_test(test_view),
      cmocka_unit_test(test_view_errors),     cmocka_unit_test(test_reshape),
      cmocka_unit_test(test_squeeze),         cmocka_unit_test(test_unsqueeze),
      cmocka_unit_test(test_flatten),         cmocka_unit_test(test_as_strided),
      cmocka_unit_test(test_split),           cmocka_unit_test(test_chunk),
      cmocka_unit_test(test_views_share_writes), cmocka_unit_test(test_views_and_scopes),
      cmocka_unit_test(test_null_chain),      cmocka_unit_test(test_split_views),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
