/*
 * test_print.c — kiln_print / kiln_to_string in Torch7's format: integer,
 * fixed, scaled and exponent formats, matrices cut into column blocks,
 * ≥3-d slices, 0-d and empty tensors, nan/inf, every dtype's type name,
 * and the error paths. Expected strings are written out in full.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"

#define V(...) ((const int64_t[]){__VA_ARGS__})


/* Asserts kiln_to_string(t) is `want`, and that kiln_print writes the same. */
static void check_text(kiln_tensor *t, const char *want) {
  char *s = kiln_to_string(t);
  if (!s) fail_msg("kiln_to_string: %s", kiln_last_error());
  if (strcmp(s, want) != 0) fail_msg("printed:\n%s\nexpected:\n%s", s, want);
  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(kiln_print(t, f), KILN_OK);
  long n = ftell(f);
  assert_int_equal(n, (long)strlen(want));
  rewind(f);
  char *back = calloc((size_t)n + 1, 1);
  assert_int_equal(fread(back, 1, (size_t)n, f), (size_t)n);
  assert_string_equal(back, want);
  free(back);
  fclose(f);
  free(s);
}

static kiln_tensor *f64(int ndim, const int64_t *sizes, const double *data) {
  return kiln_from_data(KILN_F64, ndim, sizes, data);
}

static void test_vector_formats(void **state) {
  (void)state;
  kiln_scope_begin();
  check_text(kiln_from_data(KILN_F32, 1, V(3), (const float[]){1, 2, 3}),
             " 1\n 2\n 3\n[kiln.FloatTensor of size 3]\n");
  check_text(f64(1, V(2), (const double[]){0.5, 2.5}), " 0.5000\n 2.5000\n[kiln.DoubleTensor of size 2]\n");
  check_text(f64(1, V(2), (const double[]){0.5, 0.25}), " 0.5000\n 0.2500\n[kiln.DoubleTensor of size 2]\n");
  check_text(f64(1, V(2), (const double[]){123.5, -1.5}), " 123.5000\n  -1.5000\n[kiln.DoubleTensor of size 2]\n");
  /* common scale below 1e-3 ... */
  check_text(kiln_full(KILN_F32, 1, V(3), 0.00012),
             "0.0001 *\n 1.2000\n 1.2000\n 1.2000\n[kiln.FloatTensor of size 3]\n");
  /* ... and past 1e5 */
  check_text(f64(1, V(2), (const double[]){1234567.5, 2345678.25}),
             "1e+06 *\n 1.2346\n 2.3457\n[kiln.DoubleTensor of size 2]\n");
  /* magnitudes spanning more than 4 decades: exponent format */
  check_text(f64(1, V(2), (const double[]){0.001, 1000.5}),
             " 1.0000e-03\n 1.0005e+03\n[kiln.DoubleTensor of size 2]\n");
  /* integer values past 1e9 in a float dtype */
  check_text(f64(1, V(2), (const double[]){1e10, 1}), " 1.0000e+10\n 1.0000e+00\n[kiln.DoubleTensor of size 2]\n");
  check_text(f64(1, V(2), (const double[]){-0.0, 1}), " 0\n 1\n[kiln.DoubleTensor of size 2]\n");
  check_text(f64(1, V(4), (const double[]){1, NAN, -INFINITY, 2}),
             "   1\n nan\n-inf\n   2\n[kiln.DoubleTensor of size 4]\n");
  check_text(f64(1, V(2), (const double[]){0.5, INFINITY}), " 0.5000\n    inf\n[kiln.DoubleTensor of size 2]\n");
  kiln_scope_end();
}

static void test_integer_dtypes(void **state) {
  (void)state;
  kiln_scope_begin();
  check_text(kiln_from_data(KILN_I32, 1, V(2), (const int32_t[]){-5, 123}), "  -5\n 123\n[kiln.IntTensor of size 2]\n");
  check_text(kiln_from_data(KILN_I64, 1, V(2), (const int64_t[]){INT64_MIN, 7}),
             "-9223372036854775808\n                   7\n[kiln.LongTensor of size 2]\n"); /* width digits+1 */
  check_text(kiln_ones(KILN_BOOL, 2, V(2, 2)), " 1  1\n 1  1\n[kiln.BoolTensor of size 2x2]\n");
  check_text(kiln_full(KILN_U8, 1, V(1), 255), " 255\n[kiln.ByteTensor of size 1]\n");
  check_text(kiln_full(KILN_I8, 1, V(1), -1), "-1\n[kiln.CharTensor of size 1]\n");
  check_text(kiln_full(KILN_I16, 1, V(1), 0), " 0\n[kiln.ShortTensor of size 1]\n");
  check_text(kiln_full(KILN_F16, 1, V(1), 0.5), " 0.5000\n[kiln.HalfTensor of size 1]\n");
  check_text(kiln_full(KILN_BF16, 1, V(1), 2), " 2\n[kiln.BFloat16Tensor of size 1]\n");
  kiln_scope_end();
}

static void test_matrices(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *m = kiln_view(kiln_arange(KILN_F32, 0, 20, 1), 2, V(4, 5));
  check_text(m, "  0   1   2   3   4\n"
                "  5   6   7   8   9\n"
                " 10  11  12  13  14\n"
                " 15  16  17  18  19\n"
                "[kiln.FloatTensor of size 4x5]\n");
  check_text(kiln_t(kiln_narrow(m, 1, 0, 2)), "  0   5  10  15\n  1   6  11  16\n[kiln.FloatTensor of size 2x4]\n");
  check_text(kiln_full(KILN_F64, 2, V(2, 2), 0.00012),
             "0.0001 *\n  1.2000  1.2000\n  1.2000  1.2000\n[kiln.DoubleTensor of size 2x2]\n");
  check_text(kiln_zeros(KILN_F32, 2, V(1, 1)), " 0\n[kiln.FloatTensor of size 1x1]\n");
  kiln_scope_end();
}

/* 80 columns: width-7 values fit 10 a line; the rest go to a new block. */
static void test_column_blocks(void **state) {
  (void)state;
  kiln_scope_begin();
  char want[1024] = "Columns 0 to 9\n";
  for (int r = 0; r < 2; r++) {
    for (int c = 0; c < 10; c++) strcat(want, c ? "  1.5000" : " 1.5000");
    strcat(want, "\n");
  }
  strcat(want, "\nColumns 10 to 11\n");
  for (int r = 0; r < 2; r++) strcat(want, " 1.5000  1.5000\n");
  strcat(want, "[kiln.DoubleTensor of size 2x12]\n");
  check_text(kiln_full(KILN_F64, 2, V(2, 12), 1.5), want);
  kiln_scope_end();
}

static void test_slices(void **state) {
  (void)state;
  kiln_scope_begin();
  check_text(kiln_view(kiln_arange(KILN_I64, 0, 8, 1), 3, V(2, 2, 2)),
             "(0,.,.) = \n  0  1\n  2  3\n\n(1,.,.) = \n  4  5\n  6  7\n[kiln.LongTensor of size 2x2x2]\n");
  check_text(kiln_view(kiln_arange(KILN_F32, 0, 4, 1), 4, V(2, 1, 1, 2)),
             "(0,0,.,.) = \n  0  1\n\n(1,0,.,.) = \n  2  3\n[kiln.FloatTensor of size 2x1x1x2]\n");
  check_text(kiln_view(kiln_arange(KILN_F32, 0, 8, 1), 4, V(1, 2, 2, 2)),
             "(0,0,.,.) = \n  0  1\n  2  3\n\n(0,1,.,.) = \n  4  5\n  6  7\n[kiln.FloatTensor of size 1x2x2x2]\n");
  kiln_scope_end();
}

static void test_zero_dim_and_empty(void **state) {
  (void)state;
  kiln_scope_begin();
  check_text(kiln_scalar(KILN_F32, 2.5), " 2.5000\n[kiln.FloatTensor of size ()]\n");
  check_text(kiln_scalar(KILN_I64, -3), "-3\n[kiln.LongTensor of size ()]\n"); /* Torch7: "%2d" */
  check_text(kiln_zeros(KILN_F64, 2, V(2, 0)), "[kiln.DoubleTensor of size 2x0]\n");
  check_text(kiln_zeros(KILN_F64, 1, V(0)), "[kiln.DoubleTensor of size 0]\n");
  check_text(kiln_zeros(KILN_BOOL, 3, V(0, 2, 2)), "[kiln.BoolTensor of size 0x2x2]\n");
  kiln_scope_end();
}

static void test_print_errors(void **state) {
  (void)state;
  assert_int_equal(kiln_print(NULL, stdout), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_print", "NULL", NULL);
  kiln_tensor *t = kiln_scalar(KILN_F32, 1);
  assert_int_equal(kiln_print(t, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_print", "f is NULL", NULL);
  assert_null(kiln_to_string(NULL));
  expect_error(KILN_ERR_ARG, "kiln_to_string", NULL);
  kiln_release(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vector_formats), cmocka_unit_test(test_integer_dtypes),
      cmocka_unit_test(test_matrices),       cmocka_unit_test(test_column_blocks),
      cmocka_unit_test(test_slices),         cmocka_unit_test(test_zero_dim_and_empty),
      cmocka_unit_test(test_print_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
