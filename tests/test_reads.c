/*
 * test_reads.c — checked reads: kiln_item_f64 and kiln_get_f64 return the
 * status and pass the value through `out`, so a real NaN (KILN_OK + NaN)
 * is told from an error (a negative status, `out` untouched), which
 * kiln_item/kiln_get (NaN for both) cannot do.
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

#define UNTOUCHED 42.5

static void real_values_and_nan(void **state) {
  (void)state;
  kiln_scope_begin();
  double out = UNTOUCHED;
  assert_int_equal(kiln_item_f64(kiln_scalar(KILN_F32, NAN), &out), KILN_OK);
  assert_true(isnan(out));
  out = UNTOUCHED;
  assert_int_equal(kiln_item_f64(kiln_full(KILN_F64, 2, (int64_t[]){1, 1}, -2.25), &out), KILN_OK);
  assert_float_equal(out, -2.25, 0);
  /* lazy: the NaN comes out of a kernel (0 / 0) */
  kiln_tensor *z = kiln_zeros(KILN_F32, 1, (int64_t[]){3});
  kiln_tensor *q = kiln_div(z, z);
  out = UNTOUCHED;
  assert_int_equal(kiln_get_f64(q, (int64_t[]){1}, &out), KILN_OK);
  assert_true(isnan(out));
  kiln_tensor *m = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 3}, (int64_t[]){1, 2, 3, 4, 5, -6});
  assert_int_equal(kiln_get_f64(m, (int64_t[]){1, 2}, &out), KILN_OK);
  assert_float_equal(out, -6, 0);
  assert_int_equal(kiln_get_f64(m, (int64_t[]){-2, -3}, &out), KILN_OK);
  assert_float_equal(out, 1, 0);
  assert_int_equal(kiln_get_f64(kiln_t(m), (int64_t[]){2, 0}, &out), KILN_OK);
  assert_float_equal(out, 3, 0);
  assert_int_equal(kiln_get_f64(kiln_scalar(KILN_I32, 7), NULL, &out), KILN_OK); /* 0-d: no index */
  assert_float_equal(out, 7, 0);
  kiln_scope_end();
  expect_no_error();
}

static void errors_leave_out_untouched(void **state) {
  (void)state;
  kiln_scope_begin();
  double out = UNTOUCHED;
  assert_int_equal(kiln_item_f64(NULL, &out), KILN_ERR_ARG);
  assert_float_equal(out, UNTOUCHED, 0);
  expect_error(KILN_ERR_ARG, "kiln_item_f64", NULL);
  assert_int_equal(kiln_get_f64(NULL, (int64_t[]){0}, &out), KILN_ERR_ARG);
  assert_float_equal(out, UNTOUCHED, 0);
  expect_error(KILN_ERR_ARG, "kiln_get_f64", NULL);

  kiln_tensor *m = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
  assert_int_equal(kiln_item_f64(m, &out), KILN_ERR_SHAPE);
  assert_float_equal(out, UNTOUCHED, 0);
  expect_error(KILN_ERR_SHAPE, "kiln_item_f64", "6 elements", NULL);
  assert_int_equal(kiln_get_f64(m, (int64_t[]){2, 0}, &out), KILN_ERR_INDEX);
  assert_float_equal(out, UNTOUCHED, 0);
  expect_error(KILN_ERR_INDEX, "kiln_get_f64", "index 2 is out of range for dim 0 of size 2", NULL);
  assert_int_equal(kiln_get_f64(m, (int64_t[]){0, -4}, &out), KILN_ERR_INDEX);
  assert_float_equal(out, UNTOUCHED, 0);
  expect_error(KILN_ERR_INDEX, "kiln_get_f64", "index -4", "dim 1 of size 3", NULL);
  assert_int_equal(kiln_get_f64(m, NULL, &out), KILN_ERR_ARG);
  assert_float_equal(out, UNTOUCHED, 0);
  expect_error(KILN_ERR_ARG, "kiln_get_f64", "index is NULL", NULL);
  assert_int_equal(kiln_get_f64(m, (int64_t[]){0, 0}, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_get_f64", "out is NULL", NULL);
  assert_int_equal(kiln_item_f64(kiln_zeros(KILN_F32, 1, (int64_t[]){0}), &out), KILN_ERR_SHAPE);
  assert_float_equal(out, UNTOUCHED, 0);
  expect_error(KILN_ERR_SHAPE, "kiln_item_f64", "0 elements", NULL);

  /* each call returns its own outcome, whatever error came before */
  assert_int_equal(kiln_item_f64(m, &out), KILN_ERR_SHAPE); /* first error, kept */
  assert_int_equal(kiln_get_f64(m, (int64_t[]){1, 1}, &out), KILN_OK);
  assert_float_equal(out, 5, 0);
  assert_int_equal(kiln_get_f64(m, (int64_t[]){9, 9}, &out), KILN_ERR_INDEX);
  expect_error(KILN_ERR_SHAPE, "kiln_item_f64", NULL);
  /* the unchecked forms still give NaN and the error */
  assert_true(isnan(kiln_item(m)));
  expect_error(KILN_ERR_SHAPE, "kiln_item", NULL);
  assert_true(isnan(kiln_get(m, (int64_t[]){0, 3})));
  expect_error(KILN_ERR_INDEX, "kiln_get", NULL);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(real_values_and_nan),
      cmocka_unit_test(errors_leave_out_untouched),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
