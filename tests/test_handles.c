#define _POSIX_C_SOURCE 200809L
/*
 * test_debug_handles.c — KILN_DEBUG_HANDLES=1 (set before the first
 * release): using a handle after its last kiln_release is KILN_ERR_ARG,
 * not a use after free (ASan would report one without the mode).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "test_util.h"

static void use_after_release_is_an_error(void **state) {
  (void)state;
  int64_t n = 3;
  kiln_tensor *t = kiln_ones(KILN_F32, 1, &n), *u = kiln_zeros(KILN_F32, 1, &n);
  kiln_release(t);
  assert_null(kiln_add(t, u));
  expect_error(KILN_ERR_ARG, "kiln_add", "argument a was released", NULL);
  assert_int_equal(kiln_dim(t), -1);
  expect_error(KILN_ERR_ARG, "kiln_dim", "was released", NULL);
  assert_null(kiln_retain(t));
  expect_error(KILN_ERR_ARG, "kiln_retain", NULL);
  kiln_release(t); /* a second release */
  expect_error(KILN_ERR_ARG, "kiln_release", "was released", NULL);
  /* live handles are untouched */
  expect_values_tol(u, (double[]){0, 0, 0}, 3, 0);
  kiln_release(u);
  expect_no_error();
}

/* A handle released inside a scope that owns it: the scope's end does not
 * release it again, and a later use is an error. */
static void scope_owned_release(void **state) {
  (void)state;
  kiln_tensor *t;
  kiln_scope_begin();
  t = kiln_arange(KILN_F64, 0, 4, 1);
  kiln_release(t);
  kiln_scope_end();
  assert_int_equal(kiln_realize(t), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_realize", "was released", NULL);
}

/* A handle freed by the end of the scope that owned it: the message names
 * that scope (by depth), not kiln_release; one freed by kiln_release inside
 * a scope names kiln_release. */
static void scope_end_names_the_scope(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = kiln_ones(KILN_F32, 1, (int64_t[]){2});
  kiln_scope_begin();
  kiln_tensor *x = kiln_mul_scalar(a, 2), *y = kiln_add_scalar(a, 1);
  kiln_release(y);
  kiln_scope_end();
  assert_null(kiln_add(x, a));
  expect_error(KILN_ERR_ARG, "kiln_add", "argument a was released", "kiln_scope_end", "depth 2", NULL);
  assert_null(kiln_add(a, y));
  expect_error(KILN_ERR_ARG, "kiln_add", "argument b was released", "its last kiln_release", NULL);
  kiln_scope_end();
  assert_int_equal(kiln_dim(a), -1);
  expect_error(KILN_ERR_ARG, "kiln_dim", "kiln_scope_end", "depth 1", NULL);
}

int main(void) {
  setenv("KILN_DEBUG_HANDLES", "1", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(use_after_release_is_an_error),
      cmocka_unit_test(scope_owned_release),
      cmocka_unit_test(scope_end_names_the_scope),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
