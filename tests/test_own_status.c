/*
 * test_own_status.c — every function returns its own outcome: after an
 * earlier error that was not cleared (a failed kiln_load_npy, KILN_ERR_IO),
 * an in-place op that succeeds returns KILN_OK and one that fails returns
 * its own error's status, never the earlier one; kiln_last_error() keeps
 * the first error's message (the documented rule).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"

static const char *const missing = "/nonexistent-kiln-dir/missing.npy";

/* Leaves the thread's first error at KILN_ERR_IO from kiln_load_npy. */
static void earlier_error(void) {
  kiln_clear_error();
  assert_null(kiln_load_npy(missing));
  assert_int_equal(kiln_last_status(), KILN_ERR_IO);
}

static void still_the_earlier_error(void) {
  assert_int_equal(kiln_last_status(), KILN_ERR_IO);
  assert_non_null(strstr(kiln_last_error(), "kiln_load_npy"));
  assert_non_null(strstr(kiln_last_error(), missing));
}

static void successes_return_ok(void **state) {
  (void)state;
  kiln_scope_begin();
  earlier_error();
  int64_t s23[2] = {2, 3};
  kiln_tensor *t = kiln_zeros(KILN_F32, 2, s23);
  kiln_tensor *mask = kiln_gt_scalar(kiln_view(kiln_arange(KILN_F32, 0, 6, 1), 2, s23), 3); /* last two */
  kiln_tensor *idx = kiln_from_data(KILN_I64, 1, (int64_t[]){1}, (int64_t[]){0});
  kiln_tensor *idx2 = kiln_from_data(KILN_I64, 2, (int64_t[]){1, 1}, (int64_t[]){2});
  assert_int_equal(kiln_copy_(t, kiln_full(KILN_F64, 1, (int64_t[]){3}, 1)), KILN_OK);
  assert_int_equal(kiln_masked_fill_(t, mask, 5), KILN_OK);
  assert_int_equal(kiln_index_fill_(t, 1, idx, 7), KILN_OK);
  assert_int_equal(kiln_scatter_value_(t, 1, idx2, 9), KILN_OK);
  assert_int_equal(kiln_index_add_(t, 0, idx, kiln_ones(KILN_F32, 2, (int64_t[]){1, 3})), KILN_OK);
  float got[6];
  assert_int_equal(kiln_read(t, got, sizeof got), KILN_OK);
  const float want[6] = {8, 2, 10, 7, 5, 5};
  for (int i = 0; i < 6; i++) assert_float_equal(got[i], want[i], 0);
  assert_int_equal(kiln_realize(t), KILN_OK);
  still_the_earlier_error();
  kiln_scope_end();
  kiln_clear_error();
}

/* Failures return their own status (each was the earlier KILN_ERR_IO). */
static void failures_return_their_own_status(void **state) {
  (void)state;
  kiln_scope_begin();
  earlier_error();
  int64_t s23[2] = {2, 3};
  kiln_tensor *t = kiln_zeros(KILN_F32, 2, s23);
  kiln_tensor *bad_idx = kiln_from_data(KILN_I64, 1, (int64_t[]){1}, (int64_t[]){5});
  kiln_tensor *bad_idx2 = kiln_from_data(KILN_I64, 2, (int64_t[]){1, 1}, (int64_t[]){5});
  assert_int_equal(kiln_copy_(NULL, t), KILN_ERR_ARG);
  assert_int_equal(kiln_copy_(t, kiln_ones(KILN_F32, 1, (int64_t[]){4})), KILN_ERR_SHAPE);
  assert_int_equal(kiln_masked_fill_(t, NULL, 1), KILN_ERR_ARG);
  assert_int_equal(kiln_masked_fill_(t, kiln_ones(KILN_F32, 2, s23), 1), KILN_ERR_DTYPE);
  assert_int_equal(kiln_index_fill_(t, 1, bad_idx, 1), KILN_ERR_INDEX);
  assert_int_equal(kiln_index_fill_(t, 5, bad_idx, 1), KILN_ERR_ARG);
  assert_int_equal(kiln_scatter_value_(t, 1, bad_idx2, 1), KILN_ERR_INDEX);
  assert_int_equal(kiln_index_copy_(t, 1, bad_idx, kiln_ones(KILN_F32, 2, (int64_t[]){2, 1})), KILN_ERR_INDEX);
  assert_int_equal(kiln_index_add_(t, 1, bad_idx, kiln_ones(KILN_F32, 2, (int64_t[]){2, 1})), KILN_ERR_INDEX);
  assert_int_equal(kiln_realize(NULL), KILN_ERR_ARG);
  assert_int_equal(kiln_print(NULL, stdout), KILN_ERR_ARG);
  float buf[6];
  assert_int_equal(kiln_read(t, buf, 4), KILN_ERR_ARG);
  still_the_earlier_error();
  kiln_scope_end();
  kiln_clear_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(successes_return_ok),
      cmocka_unit_test(failures_return_their_own_status),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
