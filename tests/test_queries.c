/*
 * test_queries.c — kiln_dim, kiln_size(s), kiln_stride(s), offsets, numel,
 * dtype, device, contiguity, same-size and set-to checks, including 0-d
 * and empty tensors and every NULL/out-of-range error. Queries never force:
 * the pending node count must not change.
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

/* Asserts the thread's error has `status` and a message containing every
 * string in the NULL-terminated list, then clears it. */


static void test_basic_queries(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t sizes[] = {2, 3, 4};
  kiln_tensor *t = kiln_zeros(KILN_F32, 3, sizes);
  int64_t pending = graph_pending_count();
  assert_int_equal(kiln_dim(t), 3);
  assert_int_equal(kiln_size(t, 0), 2);
  assert_int_equal(kiln_size(t, 2), 4);
  assert_int_equal(kiln_size(t, -1), 4);
  assert_int_equal(kiln_size(t, -3), 2);
  assert_memory_equal(kiln_sizes(t), sizes, sizeof sizes);
  int64_t strides[] = {12, 4, 1};
  assert_memory_equal(kiln_strides(t), strides, sizeof strides);
  assert_int_equal(kiln_stride(t, 0), 12);
  assert_int_equal(kiln_stride(t, -2), 4);
  assert_int_equal(kiln_storage_offset(t), 0);
  assert_int_equal(kiln_numel(t), 24);
  assert_int_equal(kiln_dtype_of(t), KILN_F32);
  assert_int_equal(kiln_device_of(t), KILN_CPU);
  assert_true(kiln_is_contiguous(t));
  assert_int_equal(graph_pending_count(), pending); /* queries never force */
  expect_no_error();
  kiln_scope_end();
}

static void test_zero_dim_and_empty(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *s = kiln_scalar(KILN_I64, 7);
  assert_int_equal(kiln_dim(s), 0);
  assert_int_equal(kiln_numel(s), 1);
  assert_non_null(kiln_sizes(s));
  assert_non_null(kiln_strides(s));
  assert_true(kiln_is_contiguous(s));
  assert_int_equal(kiln_dtype_of(s), KILN_I64);
  assert_int_equal(kiln_size(s, 0), -1);
  expect_error(KILN_ERR_ARG, "kiln_size", "0-d", NULL);
  assert_int_equal(kiln_stride(s, -1), -1);
  expect_error(KILN_ERR_ARG, "kiln_stride", "dim -1", NULL);

  int64_t sizes[] = {2, 0, 3};
  kiln_tensor *e = kiln_empty(KILN_F64, 3, sizes);
  assert_int_equal(kiln_numel(e), 0);
  assert_int_equal(kiln_size(e, 1), 0);
  assert_true(kiln_is_contiguous(e));
  int64_t strides[] = {3, 3, 1}; /* Torch: size 0 counts as 1 in strides */
  assert_memory_equal(kiln_strides(e), strides, sizeof strides);
  expect_no_error();
  kiln_scope_end();
}

static void test_out_of_range_dims(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t sizes[] = {2, 3};
  kiln_tensor *t = kiln_ones(KILN_F32, 2, sizes);
  assert_int_equal(kiln_size(t, 2), -1);
  expect_error(KILN_ERR_ARG, "kiln_size", "dim 2", "2-d", NULL);
  assert_int_equal(kiln_size(t, -3), -1);
  expect_error(KILN_ERR_ARG, "kiln_size", "dim -3", NULL);
  assert_int_equal(kiln_stride(t, 5), -1);
  expect_error(KILN_ERR_ARG, "kiln_stride", "dim 5", NULL);
  kiln_scope_end();
}

static void test_null_arguments(void **state) {
  (void)state;
  assert_int_equal(kiln_dim(NULL), -1);
  expect_error(KILN_ERR_ARG, "kiln_dim", "NULL", NULL);
  assert_int_equal(kiln_size(NULL, 0), -1);
  expect_error(KILN_ERR_ARG, "kiln_size", NULL);
  assert_null(kiln_sizes(NULL));
  expect_error(KILN_ERR_ARG, "kiln_sizes", NULL);
  assert_int_equal(kiln_stride(NULL, 0), -1);
  expect_error(KILN_ERR_ARG, "kiln_stride", NULL);
  assert_null(kiln_strides(NULL));
  expect_error(KILN_ERR_ARG, "kiln_strides", NULL);
  assert_int_equal(kiln_storage_offset(NULL), -1);
  expect_error(KILN_ERR_ARG, "kiln_storage_offset", NULL);
  assert_int_equal(kiln_numel(NULL), -1);
  expect_error(KILN_ERR_ARG, "kiln_numel", NULL);
  assert_int_equal((int)kiln_dtype_of(NULL), -1);
  expect_error(KILN_ERR_ARG, "kiln_dtype_of", NULL);
  assert_int_equal((int)kiln_device_of(NULL), -1);
  expect_error(KILN_ERR_ARG, "kiln_device_of", NULL);
  assert_false(kiln_is_contiguous(NULL));
  expect_error(KILN_ERR_ARG, "kiln_is_contiguous", NULL);
  kiln_tensor *t = kiln_scalar(KILN_F32, 1);
  assert_false(kiln_is_same_size(t, NULL));
  expect_error(KILN_ERR_ARG, "kiln_is_same_size", "b", NULL);
  assert_false(kiln_is_same_size(NULL, t));
  expect_error(KILN_ERR_ARG, "kiln_is_same_size", "a", NULL);
  assert_false(kiln_is_set_to(NULL, t));
  expect_error(KILN_ERR_ARG, "kiln_is_set_to", NULL);
  assert_false(kiln_is_set_to(t, NULL));
  expect_error(KILN_ERR_ARG, "kiln_is_set_to", NULL);
  kiln_release(t);
}

/* The first error is kept: a later NULL query does not overwrite it. */
static void test_first_error_kept(void **state) {
  (void)state;
  assert_int_equal(kiln_dim(NULL), -1);
  assert_int_equal(kiln_numel(NULL), -1);
  expect_error(KILN_ERR_ARG, "kiln_dim", NULL);
}

static void test_contiguity(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t sizes[] = {4, 5};
  kiln_tensor *t = kiln_zeros(KILN_F32, 2, sizes);
  assert_false(kiln_is_contiguous(kiln_transpose(t, 0, 1)));
  assert_true(kiln_is_contiguous(kiln_narrow(t, 0, 1, 2)));  /* rows: still contiguous */
  assert_false(kiln_is_contiguous(kiln_narrow(t, 1, 1, 2))); /* columns: not */
  assert_true(kiln_is_contiguous(kiln_narrow(t, 1, 1, 0)));  /* empty */
  /* a size-1 dim's stride does not matter */
  int64_t s1[] = {1, 5}, st1[] = {99, 1};
  kiln_tensor *odd = kiln_as_strided(t, 2, s1, st1, 0);
  assert_non_null(odd);
  assert_true(kiln_is_contiguous(odd));
  expect_no_error();
  kiln_scope_end();
}

static void test_contiguity_strided_1d(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t sizes[] = {4, 5};
  kiln_tensor *t = kiln_zeros(KILN_F32, 2, sizes);
  kiln_tensor *col = kiln_select(t, 1, 2); /* sizes [4] strides [5] */
  assert_int_equal(kiln_stride(col, 0), 5);
  assert_false(kiln_is_contiguous(col));
  kiln_scope_end();
}

static void test_same_size_and_set_to(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t a_sizes[] = {2, 3}, b_sizes[] = {3, 2}, c_sizes[] = {2, 3, 1};
  kiln_tensor *a = kiln_zeros(KILN_F32, 2, a_sizes);
  kiln_tensor *a2 = kiln_ones(KILN_I32, 2, a_sizes);
  kiln_tensor *b = kiln_zeros(KILN_F32, 2, b_sizes);
  kiln_tensor *c = kiln_zeros(KILN_F32, 3, c_sizes);
  assert_true(kiln_is_same_size(a, a2)); /* dtype does not matter */
  assert_false(kiln_is_same_size(a, b));
  assert_false(kiln_is_same_size(a, c));
  assert_true(kiln_is_same_size(kiln_scalar(KILN_F32, 1), kiln_scalar(KILN_F64, 2)));

  assert_true(kiln_is_set_to(a, a));
  assert_true(kiln_is_set_to(a, kiln_narrow(a, 0, 0, 2))); /* same storage, same view */
  assert_false(kiln_is_set_to(a, kiln_narrow(a, 0, 1, 1)));
  assert_false(kiln_is_set_to(a, kiln_transpose(a, 0, 1)));
  int64_t six[] = {6};
  assert_false(kiln_is_set_to(a, kiln_view(a, 1, six)));
  assert_false(kiln_is_set_to(a, a2)); /* another storage */
  assert_false(kiln_is_set_to(a, kiln_clone(a)));
  assert_int_equal(kiln_set_(a2, a), KILN_OK);
  assert_true(kiln_is_set_to(a2, a));
  expect_no_error();
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_basic_queries),     cmocka_unit_test(test_zero_dim_and_empty),
      cmocka_unit_test(test_out_of_range_dims), cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_first_error_kept),  cmocka_unit_test(test_contiguity),
      cmocka_unit_test(test_contiguity_strided_1d), cmocka_unit_test(test_same_size_and_set_to),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
