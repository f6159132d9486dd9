/*
 * test_norms.c — kiln_group_norm and kiln_instance_norm (nn/group_norm.c):
 * values against a double-precision reference computed here (per sample
 * and group: mean, biased variance), F16 computing in F32, the errors,
 * and a gradient check (grad_check.h) w.r.t. input, weight and bias,
 * with a non-contiguous input. tests/python/test_norms_torch.py compares
 * with Torch 1.13; tests/CMakeLists.txt runs this program again with
 * KILN_FUSE=0.
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
#include "rt_internal.h"
#include "test_util.h"
#include "grad_check.h"

/* group norm of x [n, c, s] (contiguous) in g groups, reference. */
static void ref_group_norm(const double *x, int n, int c, int s, int g, const double *w, const double *b, double eps,
                           double *y) {
  int per = c / g * s;
  for (int i = 0; i < n * g; i++) {
    const double *r = x + (size_t)i * per;
    double m = 0, v = 0;
    for (int e = 0; e < per; e++) m += r[e];
    m /= per;
    for (int e = 0; e < per; e++) v += (r[e] - m) * (r[e] - m);
    v /= per;
    for (int e = 0; e < per; e++) {
      int ch = (i % g) * (c / g) + e / s;
      y[(size_t)i * per + e] = (r[e] - m) / sqrt(v + eps) * (w ? w[ch] : 1) + (b ? b[ch] : 0);
    }
  }
}

static void values(void **state) {
  (void)state;
  kiln_scope_begin();
  enum { N = 2, C = 6, S = 5 };
  double x[N * C * S], w[C], b[C], want[N * C * S];
  uint64_t seed = 3;
  for (int i = 0; i < N * C * S; i++) x[i] = gc_uniform(&seed, -4, 6);
  for (int i = 0; i < C; i++) w[i] = gc_uniform(&seed, 0.5, 2), b[i] = gc_uniform(&seed, -1, 1);
  int64_t sz[3] = {N, C, S}, cs = C;
  kiln_tensor *xt = kiln_from_data(KILN_F64, 3, sz, x);
  kiln_tensor *wt = kiln_from_data(KILN_F64, 1, &cs, w), *bt = kiln_from_data(KILN_F64, 1, &cs, b);
  for (int g = 1; g <= C; g++) {
    if (C % g) continue;
    ref_group_norm(x, N, C, S, g, w, b, 1e-5, want);
    expect_values_tol(kiln_group_norm(xt, g, wt, bt, 1e-5), want, N * C * S, 1e-13);
    ref_group_norm(x, N, C, S, g, NULL, NULL, 0.1, want);
    expect_values_tol(kiln_group_norm(xt, g, NULL, NULL, 0.1), want, N * C * S, 1e-13);
  }
  ref_group_norm(x, N, C, S, C, w, NULL, 1e-5, want);
  expect_values_tol(kiln_instance_norm(xt, wt, NULL, 1e-5), want, N * C * S, 1e-13);
  /* F16 in, F16 out, computed in F32 */
  kiln_tensor *y16 = kiln_group_norm(kiln_to_dtype(xt, KILN_F16), 3, NULL, NULL, 1e-5);
  assert_int_equal(kiln_dtype_of(y16), KILN_F16);
  double x16[N * C * S];
  assert_int_equal(kiln_read(kiln_to_dtype(kiln_to_dtype(xt, KILN_F16), KILN_F64), x16, sizeof x16), KILN_OK);
  ref_group_norm(x16, N, C, S, 3, NULL, NULL, 1e-5, want);
  expect_values_tol(y16, want, N * C * S, 4e-3);
  expect_no_error();
  kiln_scope_end();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F64, 3, (int64_t[]){2, 6, 3});
  assert_null(kiln_group_norm(x, 4, NULL, NULL, 1e-5));
  expect_error(KILN_ERR_ARG, "kiln_group_norm", "num_groups 4", "6 channels", NULL);
  assert_null(kiln_group_norm(x, 2, kiln_zeros(KILN_F64, 2, (int64_t[]){2, 3}), NULL, 1e-5));
  expect_error(KILN_ERR_SHAPE, "weight has sizes [2, 3]", "[6]", NULL);
  assert_null(kiln_group_norm(x, 2, NULL, kiln_zeros(KILN_I64, 1, (int64_t[]){6}), 1e-5));
  expect_error(KILN_ERR_DTYPE, "bias", NULL);
  assert_null(kiln_group_norm(x, 2, NULL, NULL, NAN));
  expect_error(KILN_ERR_ARG, "eps", NULL);
  assert_null(kiln_instance_norm(kiln_zeros(KILN_F64, 2, (int64_t[]){2, 6}), NULL, NULL, 1e-5));
  expect_error(KILN_ERR_SHAPE, "kiln_instance_norm", "more than 1 spatial element", NULL);
  assert_null(kiln_instance_norm(kiln_zeros(KILN_I32, 3, (int64_t[]){2, 6, 3}), NULL, NULL, 1e-5));
  expect_error(KILN_ERR_DTYPE, "kiln_instance_norm", NULL);
  /* an earlier error with a NULL weight stays the error */
  assert_null(kiln_group_norm(x, 5, NULL, NULL, 1e-5));
  assert_null(kiln_instance_norm(x, NULL, NULL, 1e-5));
  expect_error(KILN_ERR_ARG, "kiln_group_norm", NULL);
  kiln_scope_end();
}

/* x[0] [N, S, C] transposed to [N, C, S] (non-contiguous), x[1], x[2] [C] */
static kiln_tensor *group_case(kiln_tensor *const *x, void *ctx) {
  int g = *(int *)ctx;
  kiln_tensor *in = gc_mark(kiln_transpose(x[0], 1, 2));
  if (g == 0) return kiln_instance_norm(in, x[1], x[2], 1e-3);
  return kiln_group_norm(in, g, x[1], x[2], 1e-3);
}

static void grads(void **state) {
  (void)state;
  uint64_t seed = 17;
  int64_t xs[3] = {2, 4, 6}, cs = 6;
  for (int g = 0; g <= 6; g++) {
    if (g && 6 % g) continue;
    gc_input in[3] = {gc_in(&seed, 3, xs, -2, 3), gc_in(&seed, 1, &cs, 0.5, 2), gc_in(&seed, 1, &cs, -1, 1)};
    char name[32];
    snprintf(name, sizeof name, g ? "group_norm g=%d" : "instance_norm", g);
    gc_check(name, group_case, &g, in, 3, seed);
  }
}

static void report(void **state) {
  (void)state;
  gc_report("test_norms");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(values),
      cmocka_unit_test(errors),
      cmocka_unit_test(grads),
      cmocka_unit_test(report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
