/*
 * test_init.c — torch.nn.init's Kaiming and Xavier initialisers
 * (nn/init.c): the samples' bounds and variance against Torch's formulas
 * (computed here in double), with tolerances that a wrong gain or fan
 * cannot meet — the uniform's largest |x| within 0.1% of the bound (the
 * chance that none of n = 131072 samples comes that close is
 * e^-65), the variance within 8 standard errors (2% uniform, 3% normal),
 * where the nearest wrong gain or fan is 20% off; reproducibility under
 * kiln_manual_seed, writes through a non-contiguous view, F16, the
 * gains, and the errors. tests/python/test_init_torch.py checks the same
 * statistics against Torch's own calculate_gain and fans.
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

typedef struct stats {
  double mean, var, maxabs;
  int64_t n;
} stats;

static stats stats_of(kiln_tensor *t) {
  stats s = {0};
  s.n = kiln_numel(t);
  double *v = malloc(sizeof *v * (size_t)s.n);
  assert_non_null(v);
  kiln_scope_begin();
  assert_int_equal(kiln_read(kiln_to_dtype(t, KILN_F64), v, sizeof *v * (size_t)s.n), KILN_OK);
  kiln_scope_end();
  for (int64_t i = 0; i < s.n; i++) s.mean += v[i], s.maxabs = fmax(s.maxabs, fabs(v[i]));
  s.mean /= (double)s.n;
  for (int64_t i = 0; i < s.n; i++) s.var += (v[i] - s.mean) * (v[i] - s.mean);
  s.var /= (double)(s.n - 1);
  free(v);
  return s;
}

/* Uniform on [-bound, bound): max |x| in [0.999 bound, bound] (plus half
 * an ulp of t's dtype: F16 rounds the samples), variance bound^2 / 3
 * within 2%, mean within 5 standard errors of 0. */
static void expect_uniform(kiln_tensor *t, double bound, const char *what) {
  stats s = stats_of(t);
  double ulp = kiln_dtype_of(t) == KILN_F16 ? 0x1p-11 : kiln_dtype_of(t) == KILN_F32 ? 0x1p-23 : 0x1p-52;
  if (!(s.maxabs <= bound * (1 + ulp) && s.maxabs >= 0.999 * bound))
    fail_msg("%s: max |x| %.6g, bound %.6g", what, s.maxabs, bound);
  double want = bound * bound / 3;
  if (!(fabs(s.var / want - 1) < 0.02)) fail_msg("%s: variance %.6g, want %.6g", what, s.var, want);
  if (!(fabs(s.mean) < 5 * sqrt(want / (double)s.n))) fail_msg("%s: mean %.6g", what, s.mean);
}

/* Normal(0, std): variance std^2 within 3%, mean within 5 standard errors. */
static void expect_normal(kiln_tensor *t, double std, const char *what) {
  stats s = stats_of(t);
  if (!(fabs(s.var / (std * std) - 1) < 0.03)) fail_msg("%s: variance %.6g, want %.6g", what, s.var, std * std);
  if (!(fabs(s.mean) < 5 * std / sqrt((double)s.n))) fail_msg("%s: mean %.6g", what, s.mean);
  if (!(s.maxabs > 3 * std && s.maxabs < 7 * std)) fail_msg("%s: max |x| %.6g for std %.6g", what, s.maxabs, std);
}

static void gains(void **state) {
  (void)state;
  assert_float_equal(kiln_calculate_gain(KILN_NONLINEARITY_LINEAR, 0), 1, 0);
  assert_float_equal(kiln_calculate_gain(KILN_NONLINEARITY_SIGMOID, 0), 1, 0);
  assert_float_equal(kiln_calculate_gain(KILN_NONLINEARITY_TANH, 0), 5.0 / 3, 1e-15);
  assert_float_equal(kiln_calculate_gain(KILN_NONLINEARITY_RELU, 0), sqrt(2), 1e-15);
  assert_float_equal(kiln_calculate_gain(KILN_NONLINEARITY_LEAKY_RELU, 0.2), sqrt(2 / 1.04), 1e-15);
  assert_float_equal(kiln_calculate_gain(KILN_NONLINEARITY_SELU, 0), 0.75, 0);
  assert_true(isnan(kiln_calculate_gain((kiln_nonlinearity)42, 0)));
  expect_error(KILN_ERR_ARG, "kiln_calculate_gain", "unknown nonlinearity 42", NULL);
}

static void kaiming(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_manual_seed(1);
  /* linear weight [out 256, in 512]: fan_in 512, fan_out 256 */
  kiln_tensor *w = kiln_zeros(KILN_F32, 2, (int64_t[]){256, 512});
  assert_int_equal(kiln_kaiming_uniform_(w, 0, KILN_FAN_IN, KILN_NONLINEARITY_RELU), KILN_OK);
  expect_uniform(w, sqrt(3.0) * sqrt(2.0) / sqrt(512), "kaiming_uniform relu fan_in");
  assert_int_equal(kiln_kaiming_uniform_(w, 0.5, KILN_FAN_OUT, KILN_NONLINEARITY_LEAKY_RELU), KILN_OK);
  expect_uniform(w, sqrt(3.0) * sqrt(2 / 1.25) / sqrt(256), "kaiming_uniform leaky_relu(0.5) fan_out");
  assert_int_equal(kiln_kaiming_normal_(w, 0, KILN_FAN_IN, KILN_NONLINEARITY_TANH), KILN_OK);
  expect_normal(w, 5.0 / 3 / sqrt(512), "kaiming_normal tanh fan_in");
  /* conv weight [64, 32, 5, 5]: receptive 25, fan_in 800, fan_out 1600 */
  kiln_tensor *c = kiln_zeros(KILN_F64, 4, (int64_t[]){64, 32, 5, 5});
  assert_int_equal(kiln_kaiming_normal_(c, 0, KILN_FAN_OUT, KILN_NONLINEARITY_RELU), KILN_OK);
  expect_normal(c, sqrt(2.0 / 1600), "kaiming_normal relu fan_out (conv)");
  assert_int_equal(kiln_kaiming_uniform_(c, 0, KILN_FAN_IN, KILN_NONLINEARITY_LINEAR), KILN_OK);
  expect_uniform(c, sqrt(3.0 / 800), "kaiming_uniform linear fan_in (conv)");
  expect_no_error();
  kiln_scope_end();
}

static void xavier(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_manual_seed(2);
  kiln_tensor *w = kiln_zeros(KILN_F64, 2, (int64_t[]){256, 512});
  assert_int_equal(kiln_xavier_uniform_(w, 1), KILN_OK);
  expect_uniform(w, sqrt(6.0 / 768), "xavier_uniform gain 1");
  assert_int_equal(kiln_xavier_normal_(w, 5.0 / 3), KILN_OK);
  expect_normal(w, 5.0 / 3 * sqrt(2.0 / 768), "xavier_normal gain 5/3");
  kiln_tensor *c = kiln_zeros(KILN_F32, 4, (int64_t[]){64, 32, 5, 5});
  assert_int_equal(kiln_xavier_uniform_(c, sqrt(2)), KILN_OK);
  expect_uniform(c, sqrt(2) * sqrt(6.0 / 2400), "xavier_uniform gain sqrt 2 (conv)");
  expect_no_error();
  kiln_scope_end();
}

/* The same seed gives the same values; a transposed view is written
 * through (the base holds the samples, other storage untouched); F16
 * keeps its dtype; empty tensors are left alone. */
static void views_seeds_dtypes(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t sz[2] = {300, 400};
  kiln_tensor *a = kiln_zeros(KILN_F32, 2, sz), *b = kiln_zeros(KILN_F32, 2, sz);
  kiln_manual_seed(9);
  assert_int_equal(kiln_xavier_normal_(a, 1), KILN_OK);
  kiln_manual_seed(9);
  assert_int_equal(kiln_xavier_normal_(b, 1), KILN_OK);
  assert_true(kiln_item(kiln_all(kiln_eq(a, b), 0, NULL, false)) == 1);
  /* a [400, 300] view of a wider base: columns 100.. stay 7 */
  kiln_tensor *base = kiln_full(KILN_F64, 2, (int64_t[]){300, 500}, 7);
  kiln_tensor *v = kiln_t(kiln_narrow(base, 1, 0, 400));
  assert_int_equal(kiln_kaiming_uniform_(v, 0, KILN_FAN_IN, KILN_NONLINEARITY_RELU), KILN_OK);
  expect_uniform(v, sqrt(3.0) * sqrt(2.0) / sqrt(300), "kaiming_uniform through a transposed view");
  kiln_tensor *rest = kiln_narrow(base, 1, 400, 100);
  assert_true(kiln_item(kiln_all(kiln_eq_scalar(rest, 7), 0, NULL, false)) == 1);
  kiln_tensor *h = kiln_zeros(KILN_F16, 2, sz);
  assert_int_equal(kiln_xavier_uniform_(h, 1), KILN_OK);
  assert_int_equal(kiln_dtype_of(h), KILN_F16);
  expect_uniform(h, sqrt(6.0 / 700), "xavier_uniform F16");
  kiln_tensor *e = kiln_zeros(KILN_F32, 2, (int64_t[]){0, 5});
  assert_int_equal(kiln_kaiming_normal_(e, 0, KILN_FAN_IN, KILN_NONLINEARITY_RELU), KILN_OK);
  expect_no_error();
  kiln_scope_end();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *one = kiln_zeros(KILN_F32, 1, (int64_t[]){5});
  assert_int_equal(kiln_xavier_uniform_(one, 1), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_xavier_uniform_", "fewer than 2 dims", "[5]", NULL);
  kiln_tensor *i = kiln_zeros(KILN_I32, 2, (int64_t[]){2, 2});
  assert_int_equal(kiln_kaiming_normal_(i, 0, KILN_FAN_IN, KILN_NONLINEARITY_RELU), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_kaiming_normal_", NULL);
  kiln_tensor *f = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 2});
  assert_int_equal(kiln_kaiming_uniform_(f, 0, (kiln_fan_mode)3, KILN_NONLINEARITY_RELU), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "mode 3", NULL);
  assert_int_equal(kiln_kaiming_uniform_(f, 0, KILN_FAN_IN, (kiln_nonlinearity)9), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_kaiming_uniform_", "nonlinearity 9", NULL);
  kiln_tensor *ex = kiln_expand(kiln_zeros(KILN_F32, 2, (int64_t[]){1, 3}), 2, (int64_t[]){4, 3});
  assert_int_equal(kiln_xavier_normal_(ex, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_xavier_normal_", NULL);
  assert_int_equal(kiln_xavier_normal_(f, INFINITY), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "not finite", NULL);
  assert_true(kiln_item(kiln_sum(f, 0, NULL, false)) == 0); /* untouched */
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gains),
      cmocka_unit_test(kaiming),
      cmocka_unit_test(xavier),
      cmocka_unit_test(views_seeds_dtypes),
      cmocka_unit_test(errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
