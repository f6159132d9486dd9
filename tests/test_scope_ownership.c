/*
 * test_scope_ownership.c — scopes and explicit releases together: releasing
 * a tensor a scope owns takes it out of the scope (kiln_scope_end used to
 * release it again: "double free or corruption"); kiln_escape hands a
 * tensor to the caller from any scope depth. Handles are from_blob tensors
 * whose deleter counts how often their storage is freed; the ASan build
 * (KILN_SANITIZE) checks that nothing is freed twice or leaked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"

static void count_free(void *data, void *ctx) {
  (void)data;
  ++*(int *)ctx;
}

/* A tensor over buf [4] whose storage's end increments *freed. */
static kiln_tensor *blob(float *buf, int *freed) {
  return kiln_from_blob(KILN_F32, 1, (int64_t[]){4}, NULL, buf, count_free, freed);
}

static void release_scope_owned_then_end(void **state) {
  (void)state;
  float buf[4] = {1, 2, 3, 4};
  int freed = 0;
  kiln_scope_begin();
  kiln_tensor *t = blob(buf, &freed);
  kiln_tensor *u = kiln_add(t, t);
  kiln_tensor *v = kiln_mul_scalar(u, 2);
  kiln_release(u); /* the scope's reference, given back early */
  kiln_release(t);
  assert_int_equal(freed, 0); /* v's pending node still reads t's memory */
  expect_values_tol(v, (double[]){4, 8, 12, 16}, 4, 0);
  kiln_scope_end(); /* releases v only */
  assert_int_equal(freed, 1);
  expect_no_error();
}

/* A caller's own reference (kiln_retain) is released as usual; the
 * scope's reference stays the scope's. */
static void retained_reference_is_the_callers(void **state) {
  (void)state;
  float buf[4] = {1, 2, 3, 4};
  int freed = 0;
  kiln_scope_begin();
  kiln_tensor *t = blob(buf, &freed);
  kiln_retain(t);
  kiln_release(t); /* the retained one */
  assert_int_equal(freed, 0);
  assert_float_equal(kiln_get(t, (int64_t[]){2}), 3, 0);
  kiln_scope_end();
  assert_int_equal(freed, 1);

  /* kiln_contiguous of a contiguous tensor returns the same handle: the
   * scope then holds two references to it */
  kiln_scope_begin();
  t = blob(buf, &freed);
  assert_ptr_equal(kiln_contiguous(t), t);
  kiln_release(t);
  assert_float_equal(kiln_get(t, (int64_t[]){3}), 4, 0);
  kiln_scope_end();
  assert_int_equal(freed, 2);
  expect_no_error();
}

/* Computes (x + 1) * 2 inside two scopes of its own and returns it to the
 * caller. */
static kiln_tensor *helper(kiln_tensor *x, float *buf, int *freed) {
  kiln_scope_begin();
  kiln_tensor *one = kiln_scalar(KILN_F32, 1);
  kiln_scope_begin();
  kiln_tensor *y = kiln_mul_scalar(kiln_add(x, one), 2);
  kiln_tensor *b = blob(buf, freed); /* a handle returned as is */
  kiln_escape(y);
  kiln_escape(b);
  kiln_scope_end();
  kiln_scope_end();
  kiln_release(b);
  return y;
}

static void escape_from_two_scopes(void **state) {
  (void)state;
  float buf[4] = {5, 6, 7, 8};
  int freed = 0;
  kiln_tensor *x = kiln_from_data(KILN_F32, 1, (int64_t[]){3}, (float[]){1, 2, 3});
  kiln_tensor *y = helper(x, buf, &freed); /* no scope open here */
  assert_int_equal(freed, 1);
  expect_values_tol(y, (double[]){4, 6, 8}, 3, 0);
  kiln_release(y);
  kiln_release(x);

  /* the caller inside a scope of its own: the result is still the caller's,
   * not its scope's */
  kiln_scope_begin();
  x = kiln_from_data(KILN_F32, 1, (int64_t[]){3}, (float[]){0, 1, 2});
  kiln_scope_begin();
  kiln_tensor *b = blob(buf, &freed);
  kiln_scope_begin();
  kiln_escape(b);
  y = helper(x, buf, &freed);
  kiln_scope_end();
  kiln_scope_end();
  kiln_scope_end();
  assert_int_equal(freed, 2); /* helper's own blob; b is still the caller's */
  expect_values_tol(y, (double[]){2, 4, 6}, 3, 0);
  expect_values_tol(b, (double[]){5, 6, 7, 8}, 4, 0);
  kiln_release(y);
  kiln_release(b);
  assert_int_equal(freed, 3);
  /* not owned by any scope: unchanged; NULL-safe */
  assert_ptr_equal(kiln_escape(NULL), NULL);
  expect_no_error();
}

/* State carried across iterations that each run in a scope. */
static void state_across_iterations(void **state) {
  (void)state;
  kiln_tensor *h = kiln_zeros(KILN_F32, 1, (int64_t[]){2});
  for (int step = 0; step < 20; step++) {
    kiln_scope_begin();
    kiln_tensor *next = kiln_add_scalar(kiln_mul_scalar(h, 1), 1);
    if (step % 5 == 4) assert_int_equal(kiln_realize(next), KILN_OK);
    kiln_escape(next);
    kiln_scope_end();
    kiln_release(h);
    h = next;
  }
  expect_values_tol(h, (double[]){20, 20}, 2, 0);
  kiln_release(h);

  /* kiln_keep at the outermost scope also hands the tensor to the caller */
  float buf[4] = {0};
  int freed = 0;
  kiln_scope_begin();
  kiln_tensor *t = kiln_keep(blob(buf, &freed));
  kiln_scope_end();
  assert_int_equal(freed, 0);
  kiln_release(t);
  assert_int_equal(freed, 1);
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(release_scope_owned_then_end),
      cmocka_unit_test(retained_reference_is_the_callers),
      cmocka_unit_test(escape_from_two_scopes),
      cmocka_unit_test(state_across_iterations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
