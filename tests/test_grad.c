/*
 * test_grad.c — kiln_grad's mechanics: seeds, views and in-place writes,
 * forced intermediates, errors, second derivatives. The per-op gradient
 * checks are tests/test_grad_ops.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_util.h"
#include "grad_check.h"

static kiln_tensor *vec(const double *v, int64_t n) { return kiln_from_data(KILN_F64, 1, &n, v); }

static void read_vals(kiln_tensor *t, double *out, size_t n) {
  assert_int_equal(kiln_read(t, out, n * sizeof *out), KILN_OK);
}

/* y = sum(x * x): dy/dx = 2x, seeded with 1 (NULL cotangents). */
static void scalar_output(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, -2, 3}, 3), *g;
  kiln_tensor *y = kiln_sum(kiln_mul(x, x), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){2, -4, 6}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

/* A wrt the outputs do not depend on gets zeros of its sizes and dtype. */
static void unused_wrt_is_zero(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2}, 2), *w = kiln_ones(KILN_F32, 2, (int64_t[]){2, 3}), *g[2];
  kiln_tensor *y = kiln_sum(x, 0, NULL, false);
  kiln_tensor *wrt[2] = {x, w};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){1, 1}, 2, 0);
  assert_int_equal(kiln_dtype_of(g[1]), KILN_F32);
  assert_int_equal(kiln_dim(g[1]), 2);
  expect_values_tol(g[1], (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Reads through views send their gradient to the region read; a wrt that
 * is itself a view gets the gradient of its region. */
static void views_route_gradients(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){0, 1, 2, 3, 4, 5}, 6), *g[2];
  kiln_tensor *m = kiln_view(x, 2, (int64_t[]){2, 3});
  kiln_tensor *t = kiln_t(m);                      /* [3, 2] */
  kiln_tensor *n = kiln_narrow(x, 0, 2, 3);        /* x[2..4] */
  kiln_tensor *y = kiln_add(kiln_sum(kiln_mul_scalar(t, 3), 0, NULL, false),
                            kiln_sum(kiln_mul(n, n), 0, NULL, false));
  kiln_tensor *wrt[2] = {x, n};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){3, 3, 3 + 4, 3 + 6, 3 + 8, 3}, 6, 1e-12);
  expect_values_tol(g[1], (double[]){3 + 4, 3 + 6, 3 + 8}, 3, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* An in-place write through a view: the written region's gradient goes to
 * the value written, the rest to the old contents (Torch's semantics for
 * x = a.clone(); x[1:3] = b * 2; y = x * w). */
static void inplace_write_through_view(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = vec((double[]){1, 2, 3, 4}, 4), *b = vec((double[]){5, 6}, 2), *g[2];
  kiln_tensor *x = kiln_clone(a);
  assert_int_equal(kiln_copy_(kiln_narrow(x, 0, 1, 2), kiln_mul_scalar(b, 2)), KILN_OK);
  kiln_tensor *w = vec((double[]){10, 20, 30, 40}, 4);
  kiln_tensor *y = kiln_sum(kiln_mul(x, w), 0, NULL, false);
  kiln_tensor *wrt[2] = {a, b};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){10, 0, 0, 40}, 4, 0);
  expect_values_tol(g[1], (double[]){40, 60}, 2, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Broadcast reads sum their gradient over the broadcast dims; an expand
 * (stride 0) too. */
static void broadcast_sums(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
  kiln_tensor *b = vec((double[]){1, 1, 1}, 3), *c = kiln_scalar(KILN_F64, 2), *g[3];
  kiln_tensor *y = kiln_sum(kiln_mul(kiln_add(x, b), c), 0, NULL, false);
  kiln_tensor *wrt[3] = {x, b, c};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 3, g), KILN_OK);
  expect_values_tol(g[0], (double[]){2, 2, 2, 2, 2, 2}, 6, 0);
  expect_values_tol(g[1], (double[]){4, 4, 4}, 3, 0);
  expect_values_tol(g[2], (double[]){21 + 6}, 1, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* Forcing intermediates (before or after kiln_grad) changes no gradient. */
static void forcing_midway_changes_nothing(void **state) {
  (void)state;
  double want[6], got[6];
  for (int forced = 0; forced < 2; forced++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 3}, (double[]){0.5, -1, 2, 0.25, 3, -2}), *g;
    kiln_tensor *w = kiln_from_data(KILN_F64, 2, (int64_t[]){3, 2}, (double[]){1, 2, 3, 4, 5, 6});
    kiln_tensor *h = kiln_tanh(kiln_matmul(x, w));
    if (forced) assert_int_equal(kiln_realize(h), KILN_OK);
    kiln_tensor *y = kiln_sum(kiln_exp(kiln_mul(h, h)), 0, NULL, false);
    if (forced) assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
    read_vals(g, forced ? got : want, 6);
    kiln_scope_end();
  }
  for (int i = 0; i < 6; i++) assert_float_equal(got[i], want[i], 1e-12 * fabs(want[i]));
  expect_no_error();
}

/* d/dx of (dy/dx) for y = x^3: 6x. */
static void second_derivative(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, -3}, 3), *g, *gg;
  kiln_tensor *y = kiln_sum(kiln_mul(kiln_mul(x, x), x), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){3, 12, 27}, 3, 1e-12);
  kiln_tensor *s = kiln_sum(g, 0, NULL, false);
  assert_int_equal(kiln_grad(&s, NULL, 1, &x, 1, &gg), KILN_OK);
  expect_values_tol(gg, (double[]){6, 12, -18}, 3, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* kiln_detach: the value, shared storage, no gradient. */
static void detach_stops_gradients(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *g;
  kiln_tensor *d = kiln_detach(x);
  kiln_tensor *y = kiln_sum(kiln_mul(x, d), 0, NULL, false); /* d/dx = d = x */
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){1, 2, 3}, 3, 0);
  assert_int_equal(kiln_fill_(kiln_narrow(d, 0, 0, 1), 7), KILN_OK); /* writes are shared */
  expect_values_tol(x, (double[]){7, 2, 3}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *g = (kiln_tensor *)1;
  kiln_tensor *y = kiln_mul(x, x);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_ERR_ARG);
  assert_null(g);
  expect_error(KILN_ERR_ARG, "kiln_grad", "output 0", "[3]", NULL);
  kiln_tensor *bad = vec((double[]){1, 2}, 2);
  assert_int_equal(kiln_grad(&y, &bad, 1, &x, 1, &g), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "cotangent 0 has sizes [2]", NULL);
  kiln_tensor *i = kiln_arange(KILN_I64, 0, 3, 1);
  kiln_tensor *s = kiln_sum(x, 0, NULL, false);
  assert_int_equal(kiln_grad(&s, NULL, 1, &i, 1, &g), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "wrt 0", "i64", NULL);
  /* written after read */
  kiln_tensor *p = kiln_clone(x);
  kiln_tensor *loss = kiln_sum(kiln_mul(p, p), 0, NULL, false);
  assert_int_equal(kiln_fill_(kiln_narrow(p, 0, 0, 1), 0), KILN_OK);
  assert_int_equal(kiln_grad(&loss, NULL, 1, &p, 1, &g), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "wrt 0 was modified by an in-place write after the outputs read it", NULL);
  kiln_scope_end();
}

static double twice(double v, void *ctx) {
  (void)ctx;
  return 2 * v;
}

static void callback_in_path(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *g;
  kiln_tensor *u = kiln_clone(kiln_exp(x));
  assert_int_equal(kiln_apply_(u, twice, NULL), KILN_OK);
  kiln_tensor *y = kiln_sum(u, 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_ERR_UNSUPPORTED);
  expect_error(KILN_ERR_UNSUPPORTED, "kiln_apply_", NULL);
  /* a callback value that does not depend on wrt is a constant */
  kiln_tensor *c = kiln_ones(KILN_F64, 1, (int64_t[]){3});
  assert_int_equal(kiln_apply_(c, twice, NULL), KILN_OK);
  kiln_tensor *z = kiln_sum(kiln_mul(x, c), 0, NULL, false);
  if (kiln_grad(&z, NULL, 1, &x, 1, &g) != KILN_OK) fail_msg("%s", kiln_last_error());
  expect_values_tol(g, (double[]){2, 2, 2}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scalar_output),          cmocka_unit_test(unused_wrt_is_zero),
      cmocka_unit_test(views_route_gradients),  cmocka_unit_test(inplace_write_through_view),
      cmocka_unit_test(broadcast_sums),         cmocka_unit_test(forcing_midway_changes_nothing),
      cmocka_unit_test(second_derivative),      cmocka_unit_test(detach_stops_gradients),
      cmocka_unit_test(errors),                 cmocka_unit_test(callback_in_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
