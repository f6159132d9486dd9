/*
 * test_losses.c — the pointwise losses of nn/loss_pointwise.c
 * (binary_cross_entropy with and without logits, l1, smooth_l1, huber,
 * kl_div): values at the points where Torch's formulas clamp or switch
 * branch (against double-precision references written here), F16
 * computing in F32, and a gradient check
 * (grad_check.h) w.r.t. every float argument, weights included (Torch
 * does not differentiate its weights, so tests/python/
 * test_losses_torch.py, which compares values and the input and target
 * gradients with Torch 1.13, cannot). tests/CMakeLists.txt runs this
 * program again with KILN_FUSE=0.
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

static kiln_tensor *f64(int ndim, const int64_t *sizes, const double *v) {
  kiln_tensor *t = kiln_from_data(KILN_F64, ndim, sizes, v);
  assert_non_null(t);
  return t;
}

/* Torch's binary_cross_entropy at the ends: log clamped to -100, so x =
 * 0 or 1 gives 100 (times the wrong side's target share), not inf. */
static void bce_values(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t n = 5;
  double xv[5] = {0, 1, 0.25, 1e-50, 0.5}, tv[5] = {1, 0.5, 0.75, 0, 0.5};
  kiln_tensor *x = f64(1, &n, xv), *t = f64(1, &n, tv);
  double want[5];
  for (int i = 0; i < 5; i++)
    want[i] = -(tv[i] * fmax(log(xv[i]), -100) + (1 - tv[i]) * fmax(log1p(-xv[i]), -100));
  assert_float_equal(want[0], 100, 0);
  expect_values_tol(kiln_binary_cross_entropy(x, t, NULL, KILN_REDUCTION_NONE), want, 5, 1e-13);
  double sum = 0;
  for (int i = 0; i < 5; i++) sum += want[i] * (i + 1);
  kiln_tensor *w = f64(1, &n, (double[]){1, 2, 3, 4, 5});
  expect_values_tol(kiln_binary_cross_entropy(x, t, w, KILN_REDUCTION_SUM), &sum, 1, 1e-12);
  double mean = sum / 5;
  expect_values_tol(kiln_binary_cross_entropy(x, t, w, KILN_REDUCTION_MEAN), &mean, 1, 1e-13);
  expect_no_error();
  kiln_scope_end();
}

/* with logits: (1 - t) x + lw log(1 + exp(-x)) in long double, at
 * extremes (no overflow either way) and at 0. */
static void bce_logits_values(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t n = 6;
  double xv[6] = {-800, -40, -1e-9, 0, 35, 800}, tv[6] = {1, 0.25, 0.5, 1, 0, 0.5};
  double pw = 2.5, want[6], want_pw[6];
  for (int i = 0; i < 6; i++) {
    long double x = xv[i], sp = x > 0 ? log1pl(expl(-x)) : log1pl(expl(x)) - x;
    want[i] = (double)((1 - tv[i]) * x + sp);
    want_pw[i] = (double)((1 - tv[i]) * x + (1 + (pw - 1) * tv[i]) * sp);
  }
  kiln_tensor *x = f64(1, &n, xv), *t = f64(1, &n, tv), *p = f64(0, NULL, &pw);
  kiln_tensor *y = kiln_binary_cross_entropy_with_logits(x, t, NULL, NULL, KILN_REDUCTION_NONE);
  kiln_tensor *yp = kiln_binary_cross_entropy_with_logits(x, t, NULL, p, KILN_REDUCTION_NONE);
  double got[6], gotp[6];
  assert_int_equal(kiln_read(y, got, sizeof got), KILN_OK);
  assert_int_equal(kiln_read(yp, gotp, sizeof gotp), KILN_OK);
  for (int i = 0; i < 6; i++) {
    if (!(fabs(got[i] - want[i]) <= 1e-15 * fabs(want[i]) + 1e-300))
      fail_msg("element %d: %.17g, want %.17g", i, got[i], want[i]);
    if (!(fabs(gotp[i] - want_pw[i]) <= 1e-15 * fabs(want_pw[i]) + 1e-300))
      fail_msg("pos_weight element %d: %.17g, want %.17g", i, gotp[i], want_pw[i]);
  }
  /* the gradient is sigmoid(x) - t everywhere, x == 0 included */
  kiln_tensor *g;
  assert_int_equal(kiln_grad(&y, (kiln_tensor *[]){kiln_ones_like(y)}, 1, &x, 1, &g), KILN_OK);
  double gv[6];
  assert_int_equal(kiln_read(g, gv, sizeof gv), KILN_OK);
  for (int i = 0; i < 6; i++) assert_float_equal(gv[i], 1 / (1 + exp(-xv[i])) - tv[i], 1e-15);
  /* F32 at +-100: finite */
  kiln_tensor *x32 = kiln_to_dtype(f64(1, (int64_t[]){2}, (double[]){-100, 100}), KILN_F32);
  kiln_tensor *t32 = kiln_to_dtype(f64(1, (int64_t[]){2}, (double[]){1, 0}), KILN_F32);
  expect_values_tol(kiln_binary_cross_entropy_with_logits(x32, t32, NULL, NULL, KILN_REDUCTION_NONE),
                    (double[]){100, 100}, 2, 1e-5);
  expect_no_error();
  kiln_scope_end();
}

/* smooth_l1 and huber on both sides of the switch, l1, kl_div's xlogy. */
static void piecewise_kl_values(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t n = 6;
  double dv[6] = {-3, -1, -0.5, 0, 0.99, 2};
  kiln_tensor *d = f64(1, &n, dv), *z = kiln_zeros_like(d);
  double sl1[6], hub[6], l1[6], beta = 1, delta = 1.5;
  for (int i = 0; i < 6; i++) {
    double a = fabs(dv[i]);
    sl1[i] = a < beta ? 0.5 * a * a / beta : a - 0.5 * beta;
    hub[i] = a < delta ? 0.5 * a * a : delta * (a - 0.5 * delta);
    l1[i] = a;
  }
  expect_values_tol(kiln_smooth_l1_loss(d, z, KILN_REDUCTION_NONE, beta), sl1, 6, 1e-15);
  expect_values_tol(kiln_huber_loss(d, z, KILN_REDUCTION_NONE, delta), hub, 6, 1e-15);
  expect_values_tol(kiln_l1_loss(d, z, KILN_REDUCTION_NONE), l1, 6, 0);
  expect_values_tol(kiln_smooth_l1_loss(d, z, KILN_REDUCTION_NONE, 0), l1, 6, 0);
  /* kl_div: t (log t - x), 0 where t == 0; batchmean divides by dim 0 */
  double xv[4] = {-1, -2, -0.5, -3}, tv[4] = {0, 0.25, 0.5, 0.25}, kl[4], s = 0;
  for (int i = 0; i < 4; i++) kl[i] = tv[i] == 0 ? 0 : tv[i] * (log(tv[i]) - xv[i]), s += kl[i];
  kiln_tensor *x = f64(2, (int64_t[]){2, 2}, xv), *t = f64(2, (int64_t[]){2, 2}, tv);
  expect_values_tol(kiln_kl_div(x, t, KILN_REDUCTION_NONE, false), kl, 4, 1e-15);
  double bm = s / 2;
  expect_values_tol(kiln_kl_div(x, t, KILN_REDUCTION_BATCHMEAN, false), &bm, 1, 1e-15);
  /* log_target: exp(t) (t - x) with t = log of the same targets */
  double lt[4] = {-700, log(0.25), log(0.5), log(0.25)}, klt[4];
  for (int i = 0; i < 4; i++) klt[i] = exp(lt[i]) * (lt[i] - xv[i]);
  expect_values_tol(kiln_kl_div(x, f64(2, (int64_t[]){2, 2}, lt), KILN_REDUCTION_NONE, true), klt, 4, 1e-15);
  expect_no_error();
  kiln_scope_end();
}

/* F16 computes in F32, rounding once: within F16's half ulp of the F64
 * loss of the same F16 values. */
static void f16_computes_in_f32(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_manual_seed(3);
  int64_t sz[2] = {16, 8};
  kiln_tensor *x = kiln_rand(KILN_F32, 2, sz), *t = kiln_rand(KILN_F32, 2, sz);
  kiln_tensor *x16 = kiln_to_dtype(x, KILN_F16), *t16 = kiln_to_dtype(t, KILN_F16);
  kiln_tensor *y16 = kiln_huber_loss(x16, t16, KILN_REDUCTION_MEAN, 0.3);
  assert_int_equal(kiln_dtype_of(y16), KILN_F16);
  kiln_tensor *ref = kiln_huber_loss(kiln_to_dtype(x16, KILN_F64), kiln_to_dtype(t16, KILN_F64), KILN_REDUCTION_MEAN, 0.3);
  double a = kiln_item(y16), b = kiln_item(ref);
  assert_true(fabs(a - b) <= fabs(b) * 0x1p-11);
  expect_no_error();
  kiln_scope_end();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(KILN_F64, 2, (int64_t[]){2, 3}), *b = kiln_zeros(KILN_F64, 2, (int64_t[]){3, 2});
  kiln_tensor *i = kiln_zeros(KILN_I64, 2, (int64_t[]){2, 3}), *f = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 3});
  assert_null(kiln_l1_loss(a, b, KILN_REDUCTION_MEAN));
  expect_error(KILN_ERR_SHAPE, "kiln_l1_loss", "input sizes [2, 3] and target sizes [3, 2] differ", NULL);
  assert_null(kiln_huber_loss(a, f, KILN_REDUCTION_MEAN, 1));
  expect_error(KILN_ERR_DTYPE, "kiln_huber_loss", "f64", "f32", NULL);
  assert_null(kiln_smooth_l1_loss(i, i, KILN_REDUCTION_MEAN, 1));
  expect_error(KILN_ERR_DTYPE, "kiln_smooth_l1_loss", "float", NULL);
  assert_null(kiln_huber_loss(a, a, KILN_REDUCTION_MEAN, -1));
  expect_error(KILN_ERR_ARG, "kiln_huber_loss", "delta -1", NULL);
  assert_null(kiln_smooth_l1_loss(a, a, KILN_REDUCTION_MEAN, INFINITY));
  expect_error(KILN_ERR_ARG, "kiln_smooth_l1_loss", "beta inf", NULL);
  assert_null(kiln_binary_cross_entropy(a, a, NULL, KILN_REDUCTION_BATCHMEAN));
  expect_error(KILN_ERR_ARG, "kiln_binary_cross_entropy", "reduction 3", NULL);
  assert_null(kiln_binary_cross_entropy_with_logits(a, a, NULL, b, KILN_REDUCTION_SUM));
  expect_error(KILN_ERR_SHAPE, "kiln_binary_cross_entropy_with_logits", "pos_weight sizes [3, 2]", NULL);
  assert_null(kiln_binary_cross_entropy(a, a, i, KILN_REDUCTION_SUM));
  expect_error(KILN_ERR_DTYPE, "weight", NULL);
  /* a NULL weight after an earlier error keeps that error */
  assert_null(kiln_l1_loss(a, b, KILN_REDUCTION_SUM));
  assert_null(kiln_binary_cross_entropy(a, a, NULL, KILN_REDUCTION_SUM));
  expect_error(KILN_ERR_SHAPE, "kiln_l1_loss", NULL);
  assert_null(kiln_kl_div(a, a, (kiln_reduction)9, false));
  expect_error(KILN_ERR_ARG, "kiln_kl_div", NULL);
  kiln_scope_end();
}

/* ---------------------------------------------------- gradient checks */

typedef struct loss_ctx {
  int which; /* 0 bce, 1 bce+weight, 2 logits, 3 logits+weight+pos_weight, 4 l1, 5 smooth_l1, 6 huber,
                7 kl_div, 8 kl_div log_target */
  kiln_reduction r;
} loss_ctx;

static kiln_tensor *loss_case(kiln_tensor *const *x, void *p) {
  const loss_ctx *c = p;
  switch (c->which) {
  case 0: return kiln_binary_cross_entropy(x[0], x[1], NULL, c->r);
  case 1: return kiln_binary_cross_entropy(x[0], x[1], x[2], c->r);
  case 2: return kiln_binary_cross_entropy_with_logits(x[0], x[1], NULL, NULL, c->r);
  case 3: return kiln_binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3], c->r);
  case 4: return kiln_l1_loss(gc_mark(kiln_transpose(x[0], 0, 1)), kiln_transpose(x[1], 0, 1), c->r);
  case 5: return kiln_smooth_l1_loss(x[0], x[1], c->r, 0.8);
  case 6: return kiln_huber_loss(x[0], x[1], c->r, 0.6);
  case 7: return kiln_kl_div(x[0], x[1], c->r, false);
  default: return kiln_kl_div(x[0], x[1], c->r, true);
  }
}

static void grad_losses(void **state) {
  (void)state;
  uint64_t seed = 11;
  int64_t sz[2] = {3, 4}, last = 4;
  for (int which = 0; which <= 8; which++) {
    for (int r = 0; r <= 3; r++) {
      if (r == KILN_REDUCTION_BATCHMEAN && which < 7) continue;
      /* under cuda-emu every new kernel costs NVRTC: none and sum are
       * the mean's kernels, less a scaling */
      if (!gc_all_modes() && r != KILN_REDUCTION_MEAN) continue;
      gc_input in[4];
      bool prob = which <= 1 || which == 7;
      in[0] = gc_in(&seed, 2, sz, prob ? 0.05 : -3, prob ? 0.95 : 3);
      if (which == 7) /* log-probabilities */
        for (int64_t e = 0; e < in[0].n; e++) in[0].v[e] = log(in[0].v[e]);
      in[1] = gc_in(&seed, 2, sz, which == 8 ? -3 : 0.05, which == 8 ? -0.1 : 0.95);
      if (which >= 4 && which <= 6) /* keep |d| off the kinks (0, beta 0.8, delta 0.6) */
        for (int64_t e = 0; e < in[0].n; e++) {
          double dd = fabs(in[0].v[e] - in[1].v[e]);
          if (dd < 0.01 || fabs(dd - 0.8) < 0.01 || fabs(dd - 0.6) < 0.01) in[0].v[e] += 0.05;
        }
      if (which == 2 || which == 3) in[0].v[0] = 0; /* the branch point */
      in[2] = gc_in(&seed, 1, &last, 0.5, 2);
      in[3] = gc_in(&seed, 1, &last, 0.5, 3);
      int n = which == 1 ? 3 : which == 3 ? 4 : 2;
      loss_ctx c = {which, (kiln_reduction)r};
      char name[64];
      snprintf(name, sizeof name, "loss %d reduction %d", which, r);
      gc_check(name, loss_case, &c, in, n, seed);
    }
  }
}

static void report(void **state) {
  (void)state;
  gc_report("test_losses");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bce_values),        cmocka_unit_test(bce_logits_values), cmocka_unit_test(piecewise_kl_values),
      cmocka_unit_test(f16_computes_in_f32), cmocka_unit_test(errors),          cmocka_unit_test(grad_losses),
      cmocka_unit_test(report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
