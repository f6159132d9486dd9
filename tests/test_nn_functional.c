/*
 * test_nn_functional.c — the torch.nn.functional ops of nn/functional.c
 * and nn/loss.c: values against hand-computed references (F64, F32 and
 * F16), non-contiguous inputs, the kernels linear promises (the GEMM and
 * one epilogue), dropout's generator, every error path (status and the
 * message naming the function), and a gradient check (grad_check.h) per
 * differentiable op w.r.t. every float argument. tests/CMakeLists.txt
 * runs this program again with KILN_FUSE=0; tests/python/
 * test_nn_functional_torch.py compares values and gradients with Torch.
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

#define SELU_A 1.6732632423543772848170429916717
#define SELU_S 1.0507009873554804934193349852946

static kiln_tensor *f64(int ndim, const int64_t *sizes, const double *v) {
  kiln_tensor *t = kiln_from_data(KILN_F64, ndim, sizes, v);
  assert_non_null(t);
  return t;
}

static kiln_tensor *i64(int ndim, const int64_t *sizes, const int64_t *v) {
  kiln_tensor *t = kiln_from_data(KILN_I64, ndim, sizes, v);
  assert_non_null(t);
  return t;
}

/* ------------------------------------------------------------ values */

static const double X5[5] = {-2, -0.5, 0, 0.5, 3};

static double softplus_ref(double x, double beta, double thr) {
  return x * beta > thr ? x : log1p(exp(x * beta)) / beta;
}

static void activation_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = f64(1, (int64_t[]){5}, X5);
  double want[5];
  for (int i = 0; i < 5; i++) want[i] = X5[i] > 0 ? X5[i] : 0.1 * X5[i];
  expect_values_tol(kiln_leaky_relu(x, 0.1), want, 5, 0);
  for (int i = 0; i < 5; i++) want[i] = X5[i] > 0 ? X5[i] : 0.7 * expm1(X5[i]);
  expect_values_tol(kiln_elu(x, 0.7), want, 5, 1e-15);
  for (int i = 0; i < 5; i++) want[i] = SELU_S * (X5[i] > 0 ? X5[i] : SELU_A * expm1(X5[i]));
  expect_values_tol(kiln_selu(x), want, 5, 1e-15);
  for (int i = 0; i < 5; i++) want[i] = softplus_ref(X5[i], 1, 20);
  expect_values_tol(kiln_softplus(x, 1, 20), want, 5, 1e-15);
  for (int i = 0; i < 5; i++) want[i] = softplus_ref(X5[i], 2, 1); /* 3 and 0.5... 0.5*2 = 1 is not > 1 */
  expect_values_tol(kiln_softplus(x, 2, 1), want, 5, 1e-15);
  assert_true(kiln_get(kiln_softplus(x, 2, 1), (int64_t[]){4}) == 3); /* the linear branch exactly */
  for (int i = 0; i < 5; i++) want[i] = X5[i] / (1 + fabs(X5[i]));
  expect_values_tol(kiln_softsign(x), want, 5, 1e-15);
  /* large inputs: no overflow on the side not taken */
  kiln_tensor *big = f64(1, (int64_t[]){2}, (double[]){800, -800});
  expect_values_tol(kiln_elu(big, 1), (double[]){800, -1}, 2, 0);
  expect_values_tol(kiln_softplus(big, 1, 20), (double[]){800, 0}, 2, 0);
  /* F32 and F16 keep their dtype (F16 computes in F32, rounds once) */
  for (int k = 0; k < 2; k++) {
    kiln_dtype dt = k ? KILN_F16 : KILN_F32;
    kiln_tensor *xd = kiln_to_dtype(x, dt), *y = kiln_elu(xd, 1);
    assert_int_equal(kiln_dtype_of(y), dt);
    for (int i = 0; i < 5; i++) want[i] = X5[i] > 0 ? X5[i] : expm1(X5[i]);
    expect_values_tol(y, want, 5, k ? 1e-3 : 1e-7);
  }
  expect_no_error();
  kiln_scope_end();
}

/* The ops read any strides: a transposed narrow gives what its
 * contiguous copy gives. */
static void noncontiguous_inputs(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_manual_seed(5);
  kiln_tensor *base = kiln_mul_scalar(kiln_randn(KILN_F64, 2, (int64_t[]){6, 8}), 2);
  kiln_tensor *v = kiln_t(kiln_narrow(base, 1, 1, 6)); /* [6, 6], strides [1, 8], offset 1 */
  kiln_tensor *c = kiln_contiguous(v);
  assert_false(kiln_is_contiguous(v));
  kiln_tensor *w = kiln_randn(KILN_F64, 1, (int64_t[]){6});
  kiln_tensor *img = kiln_transpose(kiln_view(base, 3, (int64_t[]){4, 3, 4}), 1, 2); /* [4, 4, 3] */
  kiln_tensor *pairs[][2] = {
      {kiln_leaky_relu(v, 0.2), kiln_leaky_relu(c, 0.2)},
      {kiln_elu(v, 1.5), kiln_elu(c, 1.5)},
      {kiln_selu(v), kiln_selu(c)},
      {kiln_softplus(v, 1.5, 2), kiln_softplus(c, 1.5, 2)},
      {kiln_softsign(v), kiln_softsign(c)},
      {kiln_prelu(v, w), kiln_prelu(c, w)},
      {kiln_glu(v, 0), kiln_glu(c, 0)},
      {kiln_linear(v, kiln_narrow(v, 0, 0, 4), kiln_narrow(w, 0, 2, 4)), kiln_linear(c, kiln_contiguous(kiln_narrow(c, 0, 0, 4)), kiln_narrow(w, 0, 2, 4))},
      {kiln_mse_loss(v, kiln_t(v), KILN_REDUCTION_NONE), kiln_mse_loss(c, kiln_contiguous(kiln_t(v)), KILN_REDUCTION_NONE)},
      {kiln_pixel_shuffle(img, 2), kiln_pixel_shuffle(kiln_contiguous(img), 2)},
  };
  int n = (int)(sizeof pairs / sizeof pairs[0]);
  for (int i = 0; i < n; i++) {
    assert_non_null(pairs[i][0]);
    int64_t m = kiln_numel(pairs[i][0]);
    assert_int_equal(m, kiln_numel(pairs[i][1]));
    double a[64], b[64];
    assert_int_equal(kiln_read(pairs[i][0], a, sizeof a), KILN_OK);
    assert_int_equal(kiln_read(pairs[i][1], b, sizeof b), KILN_OK);
    for (int64_t e = 0; e < m; e++)
      if (!(fabs(a[e] - b[e]) <= 1e-13 * fmax(1, fabs(b[e])))) fail_msg("case %d element %lld: %.17g vs %.17g", i, (long long)e, a[e], b[e]);
  }
  expect_no_error();
  kiln_scope_end();
}

static void prelu_glu_pixel_shuffle_values(void **state) {
  (void)state;
  kiln_scope_begin();
  /* x [2, 2, 2]: channel c's negatives scaled by w[c] */
  double xv[8] = {-1, 2, -3, 4, 5, -6, 7, -8};
  kiln_tensor *x = f64(3, (int64_t[]){2, 2, 2}, xv);
  kiln_tensor *w = f64(1, (int64_t[]){2}, (double[]){0.5, 0.25});
  expect_values_tol(kiln_prelu(x, w), (double[]){-0.5, 2, -0.75, 4, 5, -3, 7, -2}, 8, 0);
  expect_values_tol(kiln_prelu(x, f64(0, NULL, (double[]){0.1})), (double[]){-0.1, 2, -0.3, 4, 5, -0.6, 7, -0.8}, 8,
                    1e-15);
  expect_values_tol(kiln_prelu(f64(0, NULL, (double[]){-4}), f64(1, (int64_t[]){1}, (double[]){0.5})), (double[]){-2},
                    1, 0);
  /* glu along dim 1 of [2, 4]: a * sigmoid(b) */
  double gv[8] = {1, 2, 0, -1, 3, 4, 2, 5};
  kiln_tensor *g = kiln_glu(f64(2, (int64_t[]){2, 4}, gv), -1);
  assert_int_equal(kiln_size(g, 1), 2);
  double want[4] = {1 / (1 + exp(0.0)), 2 / (1 + exp(1.0)), 3 / (1 + exp(-2.0)), 4 / (1 + exp(-5.0))};
  expect_values_tol(g, want, 4, 1e-15);
  /* pixel_shuffle: out[c, h*r + i, w*r + j] = t[c*r^2 + i*r + j, h, w] */
  double pv[16];
  for (int i = 0; i < 16; i++) pv[i] = i;
  kiln_tensor *p = kiln_pixel_shuffle(f64(3, (int64_t[]){4, 2, 2}, pv), 2);
  assert_int_equal(kiln_dim(p), 3);
  assert_int_equal(kiln_size(p, 0), 1);
  assert_int_equal(kiln_size(p, 1), 4);
  assert_int_equal(kiln_size(p, 2), 4);
  expect_values_tol(p, (double[]){0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15}, 16, 0);
  /* any dtype, and with leading dims */
  kiln_tensor *pi = kiln_pixel_shuffle(kiln_to_dtype(f64(4, (int64_t[]){1, 4, 2, 2}, pv), KILN_I32), 2);
  assert_int_equal(kiln_dtype_of(pi), KILN_I32);
  expect_values_tol(pi, (double[]){0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15}, 16, 0);
  expect_no_error();
  kiln_scope_end();
}

static void embedding_values(void **state) {
  (void)state;
  kiln_scope_begin();
  double wv[12];
  for (int i = 0; i < 12; i++) wv[i] = i;
  kiln_tensor *w = f64(2, (int64_t[]){4, 3}, wv);
  kiln_tensor *idx = i64(2, (int64_t[]){2, 2}, (int64_t[]){3, 0, 1, 1});
  kiln_tensor *e = kiln_embedding(w, idx);
  assert_int_equal(kiln_dim(e), 3);
  assert_int_equal(kiln_size(e, 2), 3);
  expect_values_tol(e, (double[]){9, 10, 11, 0, 1, 2, 3, 4, 5, 3, 4, 5}, 12, 0);
  /* transposed I32 indices, a 0-d index, a transposed weight */
  kiln_tensor *t32 = kiln_t(kiln_to_dtype(idx, KILN_I32));
  expect_values_tol(kiln_embedding(w, t32), (double[]){9, 10, 11, 3, 4, 5, 0, 1, 2, 3, 4, 5}, 12, 0);
  kiln_tensor *e0 = kiln_embedding(w, i64(0, NULL, (int64_t[]){2}));
  assert_int_equal(kiln_dim(e0), 1);
  expect_values_tol(e0, (double[]){6, 7, 8}, 3, 0);
  expect_values_tol(kiln_embedding(kiln_t(w), i64(1, (int64_t[]){2}, (int64_t[]){2, 0})), (double[]){2, 5, 8, 11, 0, 3, 6, 9}, 8, 0);
  /* out of range: KILN_ERR_INDEX naming the function; the indices stay usable */
  kiln_tensor *bad = i64(1, (int64_t[]){3}, (int64_t[]){0, 4, 1});
  assert_null(kiln_embedding(w, bad));
  expect_error(KILN_ERR_INDEX, "kiln_embedding", "index 4", "size 4", NULL);
  assert_null(kiln_embedding(w, i64(1, (int64_t[]){1}, (int64_t[]){-1})));
  expect_error(KILN_ERR_INDEX, "kiln_embedding", "index -1", NULL);
  expect_values_tol(bad, (double[]){0, 4, 1}, 3, 0);
  expect_values_tol(kiln_embedding(kiln_cat((kiln_tensor *[]){w, w}, 2, 0), bad), (double[]){0, 1, 2, 0, 1, 2, 3, 4, 5}, 9, 0);
  expect_no_error();
  kiln_scope_end();
}

/* Kernels run to force y (its inputs already realized). */
static int kernels(kiln_tensor *y) {
  assert_non_null(y);
  kiln_profile_begin();
  assert_int_equal(kiln_realize(y), KILN_OK);
  kiln_profile_end();
  return kiln_profile_count();
}

static void linear_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = f64(2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
  kiln_tensor *w = f64(2, (int64_t[]){2, 3}, (double[]){1, 0, -1, 0.5, 0.5, 0.5});
  kiln_tensor *b = f64(1, (int64_t[]){2}, (double[]){10, 20});
  expect_values_tol(kiln_linear(x, w, b), (double[]){8, 23, 8, 27.5}, 4, 1e-14);
  expect_values_tol(kiln_linear(x, w, NULL), (double[]){-2, 3, -2, 7.5}, 4, 1e-14);
  expect_values_tol(kiln_linear(kiln_select(x, 0, 1), w, b), (double[]){8, 27.5}, 2, 1e-14);
  /* [2, 2, 3] -> [2, 2, 2]; a transposed input (its layout cannot be one matrix view) */
  kiln_tensor *x3 = kiln_stack((kiln_tensor *[]){x, kiln_neg(x)}, 2, 0);
  kiln_tensor *y3 = kiln_linear(x3, w, b);
  assert_int_equal(kiln_dim(y3), 3);
  expect_values_tol(y3, (double[]){8, 23, 8, 27.5, 12, 17, 12, 12.5}, 8, 1e-14);
  kiln_tensor *x3t = kiln_transpose(kiln_contiguous(kiln_transpose(x3, 0, 1)), 0, 1);
  expect_values_tol(kiln_linear(x3t, w, b), (double[]){8, 23, 8, 27.5, 12, 17, 12, 12.5}, 8, 1e-14);
  /* in_features 0: zeros plus the bias (Torch too) */
  kiln_tensor *e = kiln_linear(kiln_zeros(KILN_F64, 3, (int64_t[]){2, 1, 0}), kiln_zeros(KILN_F64, 2, (int64_t[]){2, 0}), b);
  assert_int_equal(kiln_dim(e), 3);
  expect_values_tol(e, (double[]){10, 20, 10, 20}, 4, 0);
  /* F32: on OpenBLAS the GEMM and one epilogue kernel adding the bias;
   * on the generated GEMM one kernel, the bias added before its stores */
  kiln_tensor *xf = kiln_randn(KILN_F32, 2, (int64_t[]){64, 32}), *wf = kiln_randn(KILN_F32, 2, (int64_t[]){16, 32});
  kiln_tensor *bf = kiln_randn(KILN_F32, 1, (int64_t[]){16});
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){xf, wf, bf}, 3), KILN_OK);
  if (strcmp(test_kernel_backend(), "llvm") == 0) {
    rt_set_fusion(1);
    rt_gemm_set_mode(2);
    assert_int_equal(kernels(kiln_linear(xf, wf, bf)), 2);
    rt_gemm_set_mode(1);
    assert_int_equal(kernels(kiln_linear(xf, wf, bf)), 1);
    rt_gemm_set_mode(-1);
    rt_set_fusion(-1);
  }
  expect_no_error();
  kiln_scope_end();
}

/* The per-target cross entropy (row max, both row sums, the gather and
 * the smoothing) is one row kernel: log_softmax [N, C] is never written. */
static void cross_entropy_is_one_kernel(void **state) {
  (void)state;
  if (strcmp(test_kernel_backend(), "llvm") != 0) skip();
  rt_set_fusion(1); /* the count is fusion's, also under KILN_FUSE=0 */
  kiln_scope_begin();
  kiln_manual_seed(3);
  kiln_tensor *x = kiln_randn(KILN_F32, 2, (int64_t[]){64, 50});
  kiln_tensor *t = kiln_randint(KILN_I64, 0, 50, 1, (int64_t[]){64});
  assert_int_equal(kiln_realize(x), KILN_OK);
  assert_int_equal(kernels(kiln_cross_entropy(x, t, KILN_REDUCTION_NONE, 0)), 1);
  assert_int_equal(kernels(kiln_cross_entropy(x, t, KILN_REDUCTION_NONE, 0.1)), 1);
  rt_set_fusion(-1);
  /* large logits keep their precision: every term is a difference from the row max */
  kiln_tensor *big = f64(2, (int64_t[]){1, 3}, (double[]){1e4, 1e4 + 1, 1e4 - 2});
  kiln_tensor *bt = i64(1, (int64_t[]){1}, (int64_t[]){0});
  double lse = 1 + log(exp(-1.0) + 1 + exp(-3.0)), lp[3] = {-1 - (lse - 1), -(lse - 1), -3 - (lse - 1)};
  double want = 0.8 * -lp[0] + 0.2 / 3 * -(lp[0] + lp[1] + lp[2]);
  expect_values_tol(kiln_to_dtype(kiln_cross_entropy(kiln_to_dtype(big, KILN_F32), bt, KILN_REDUCTION_SUM, 0.2), KILN_F64),
                    &want, 1, 1e-6);
  expect_no_error();
  kiln_scope_end();
}

static void loss_values(void **state) {
  (void)state;
  kiln_scope_begin();
  double lv[6] = {0, 0, 0, 1, 2, 3};
  kiln_tensor *logits = f64(2, (int64_t[]){2, 3}, lv);
  kiln_tensor *target = i64(1, (int64_t[]){2}, (int64_t[]){0, 2});
  double lse1 = 3 + log(1 + exp(-1.0) + exp(-2.0)), lp[6];
  for (int j = 0; j < 3; j++) lp[j] = -log(3.0), lp[3 + j] = lv[3 + j] - lse1;
  double l0 = -lp[0], l1 = -lp[5];
  expect_values_tol(kiln_cross_entropy(logits, target, KILN_REDUCTION_NONE, 0), (double[]){l0, l1}, 2, 1e-14);
  expect_values_tol(kiln_cross_entropy(logits, target, KILN_REDUCTION_MEAN, 0), (double[]){(l0 + l1) / 2}, 1, 1e-14);
  expect_values_tol(kiln_cross_entropy(logits, target, KILN_REDUCTION_SUM, 0), (double[]){l0 + l1}, 1, 1e-14);
  /* label smoothing e: (1 - e) nll + e / C * -sum_c lp_c */
  double e = 0.3, s0 = -(lp[0] + lp[1] + lp[2]), s1 = -(lp[3] + lp[4] + lp[5]);
  double m0 = (1 - e) * l0 + e / 3 * s0, m1 = (1 - e) * l1 + e / 3 * s1;
  expect_values_tol(kiln_cross_entropy(logits, target, KILN_REDUCTION_NONE, e), (double[]){m0, m1}, 2, 1e-14);
  expect_values_tol(kiln_cross_entropy(logits, target, KILN_REDUCTION_MEAN, e), (double[]){(m0 + m1) / 2}, 1, 1e-14);
  /* unbatched [C] with a 0-d target; spatial [N, C, d] */
  kiln_tensor *ce0 = kiln_cross_entropy(kiln_select(logits, 0, 1), i64(0, NULL, (int64_t[]){2}), KILN_REDUCTION_MEAN, 0);
  assert_int_equal(kiln_dim(ce0), 0);
  expect_values_tol(ce0, (double[]){l1}, 1, 1e-14);
  kiln_tensor *sp = kiln_unsqueeze(kiln_t(logits), 0); /* [1, 3, 2]: the two rows as positions */
  kiln_tensor *ces = kiln_cross_entropy(sp, i64(2, (int64_t[]){1, 2}, (int64_t[]){0, 2}), KILN_REDUCTION_NONE, 0);
  assert_int_equal(kiln_dim(ces), 2);
  expect_values_tol(ces, (double[]){l0, l1}, 2, 1e-14);
  /* nll: -lp[target]; mean over the targets */
  kiln_tensor *lpt = f64(2, (int64_t[]){2, 3}, lp);
  expect_values_tol(kiln_nll_loss(lpt, target, KILN_REDUCTION_NONE), (double[]){l0, l1}, 2, 1e-14);
  expect_values_tol(kiln_nll_loss(lpt, target, KILN_REDUCTION_MEAN), (double[]){(l0 + l1) / 2}, 1, 1e-14);
  expect_values_tol(kiln_nll_loss(f64(2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 4}), i64(1, (int64_t[]){2}, (int64_t[]){1, 0}),
                                  KILN_REDUCTION_SUM),
                    (double[]){-5}, 1, 0);
  /* an empty batch: mean is NaN, as Torch */
  kiln_tensor *empty = kiln_cross_entropy(kiln_zeros(KILN_F32, 2, (int64_t[]){0, 3}), kiln_zeros(KILN_I64, 1, (int64_t[]){0}),
                                          KILN_REDUCTION_MEAN, 0);
  assert_true(isnan(kiln_item(empty)));
  /* mse */
  kiln_tensor *a = f64(1, (int64_t[]){3}, (double[]){1, 2, 3}), *t = f64(1, (int64_t[]){3}, (double[]){0, 4, 3});
  expect_values_tol(kiln_mse_loss(a, t, KILN_REDUCTION_NONE), (double[]){1, 4, 0}, 3, 0);
  expect_values_tol(kiln_mse_loss(a, t, KILN_REDUCTION_MEAN), (double[]){5.0 / 3}, 1, 1e-15);
  expect_values_tol(kiln_mse_loss(a, t, KILN_REDUCTION_SUM), (double[]){5}, 1, 0);
  /* F32 and F16 logits: the loss in their dtype */
  kiln_tensor *c16 = kiln_cross_entropy(kiln_to_dtype(logits, KILN_F16), target, KILN_REDUCTION_MEAN, 0);
  assert_int_equal(kiln_dtype_of(c16), KILN_F16);
  expect_values_tol(c16, (double[]){(l0 + l1) / 2}, 1, 2e-3);
  expect_no_error();
  kiln_scope_end();
}

static void dropout_values(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t n = 20000;
  kiln_tensor *x = kiln_add_scalar(kiln_rand(KILN_F32, 1, &n), 0.5);
  assert_int_equal(kiln_realize(x), KILN_OK);
  float *xv = malloc(sizeof *xv * (size_t)n), *a = malloc(sizeof *a * (size_t)n), *b = malloc(sizeof *b * (size_t)n);
  assert_int_equal(kiln_read(x, xv, sizeof *xv * (size_t)n), KILN_OK);
  double p = 0.3;
  kiln_manual_seed(42);
  assert_int_equal(kiln_read(kiln_dropout(x, p, true), a, sizeof *a * (size_t)n), KILN_OK);
  kiln_manual_seed(42);
  assert_int_equal(kiln_read(kiln_dropout(x, p, true), b, sizeof *b * (size_t)n), KILN_OK);
  assert_memory_equal(a, b, sizeof *a * (size_t)n); /* reproducible */
  float scale = 1.0f / (float)(1 - p);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] == 0) continue;
    kept++;
    if (a[i] != xv[i] * scale) fail_msg("element %lld: %.9g is not %.9g * %.9g", (long long)i, a[i], xv[i], scale);
  }
  /* binomial(n, 0.7): sd 65; 6 sd */
  assert_true(llabs(kept - 14000) < 390);
  /* another draw differs */
  assert_int_equal(kiln_read(kiln_dropout(x, p, true), b, sizeof *b * (size_t)n), KILN_OK);
  assert_true(memcmp(a, b, sizeof *a * (size_t)n) != 0);
  /* the identity: the same handle, a new reference */
  kiln_tensor *id = kiln_dropout(x, p, false);
  assert_ptr_equal(id, x);
  assert_ptr_equal(kiln_dropout(x, 0, true), x);
  /* p == 1: zeros (NaN stays NaN, as Torch's input * 0) */
  kiln_tensor *z = kiln_dropout(f64(1, (int64_t[]){3}, (double[]){1, -2, NAN}), 1, true);
  expect_values_tol(z, (double[]){0, 0, NAN}, 3, 0);
  free(xv), free(a), free(b);
  expect_no_error();
  kiln_scope_end();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, (int64_t[]){3, 4}), *xi = kiln_zeros(KILN_I32, 2, (int64_t[]){3, 4});
  kiln_tensor *tgt = kiln_zeros(KILN_I64, 1, (int64_t[]){3});
  assert_null(kiln_leaky_relu(xi, 0.1));
  expect_error(KILN_ERR_DTYPE, "kiln_leaky_relu", "i32", NULL);
  assert_null(kiln_elu(xi, 1));
  expect_error(KILN_ERR_DTYPE, "kiln_elu", NULL);
  assert_null(kiln_selu(kiln_zeros(KILN_BOOL, 1, (int64_t[]){2})));
  expect_error(KILN_ERR_DTYPE, "kiln_selu", NULL);
  assert_null(kiln_softplus(xi, 1, 20));
  expect_error(KILN_ERR_DTYPE, "kiln_softplus", NULL);
  assert_null(kiln_softsign(xi));
  expect_error(KILN_ERR_DTYPE, "kiln_softsign", NULL);
  /* prelu */
  assert_null(kiln_prelu(x, kiln_zeros(KILN_F32, 1, (int64_t[]){3})));
  expect_error(KILN_ERR_SHAPE, "kiln_prelu", "3 elements", "4 channels", NULL);
  assert_null(kiln_prelu(x, kiln_zeros(KILN_F32, 2, (int64_t[]){2, 2})));
  expect_error(KILN_ERR_SHAPE, "kiln_prelu", "[2, 2]", NULL);
  assert_null(kiln_prelu(x, kiln_zeros(KILN_F64, 1, (int64_t[]){4})));
  expect_error(KILN_ERR_DTYPE, "kiln_prelu", "f32", "f64", NULL);
  /* glu */
  assert_null(kiln_glu(x, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_glu", "dim 0", "size 3", NULL);
  assert_null(kiln_glu(x, 2));
  expect_error(KILN_ERR_ARG, "kiln_glu", NULL);
  assert_null(kiln_glu(kiln_scalar(KILN_F32, 1), 0));
  expect_error(KILN_ERR_SHAPE, "kiln_glu", "0-d", NULL);
  /* pixel_shuffle */
  assert_null(kiln_pixel_shuffle(x, 2));
  expect_error(KILN_ERR_SHAPE, "kiln_pixel_shuffle", "at least 3 dims", NULL);
  kiln_tensor *img = kiln_zeros(KILN_F32, 3, (int64_t[]){6, 2, 2});
  assert_null(kiln_pixel_shuffle(img, 2));
  expect_error(KILN_ERR_SHAPE, "kiln_pixel_shuffle", "size 6", "4", NULL);
  assert_null(kiln_pixel_shuffle(img, 0));
  expect_error(KILN_ERR_ARG, "kiln_pixel_shuffle", "upscale_factor 0", NULL);
  /* embedding */
  assert_null(kiln_embedding(kiln_zeros(KILN_F32, 1, (int64_t[]){4}), tgt));
  expect_error(KILN_ERR_SHAPE, "kiln_embedding", "2-D", NULL);
  assert_null(kiln_embedding(x, kiln_zeros(KILN_F32, 1, (int64_t[]){2})));
  expect_error(KILN_ERR_DTYPE, "kiln_embedding", "f32", NULL);
  /* linear */
  kiln_tensor *w = kiln_zeros(KILN_F32, 2, (int64_t[]){5, 4});
  assert_null(kiln_linear(x, kiln_zeros(KILN_F32, 2, (int64_t[]){5, 3}), NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_linear", "[3, 4]", "[5, 3]", NULL);
  assert_null(kiln_linear(x, kiln_zeros(KILN_F32, 1, (int64_t[]){4}), NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_linear", "2-D", NULL);
  assert_null(kiln_linear(x, w, kiln_zeros(KILN_F32, 1, (int64_t[]){4})));
  expect_error(KILN_ERR_SHAPE, "kiln_linear", "bias", "[5]", NULL);
  assert_null(kiln_linear(x, kiln_zeros(KILN_F64, 2, (int64_t[]){5, 4}), NULL));
  expect_error(KILN_ERR_DTYPE, "kiln_linear", "f64", NULL);
  assert_null(kiln_linear(kiln_scalar(KILN_F32, 1), w, NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_linear", NULL);
  assert_null(kiln_linear(xi, w, NULL));
  expect_error(KILN_ERR_DTYPE, "kiln_linear", NULL);
  assert_null(kiln_linear(NULL, w, NULL)); /* a NULL input: KILN_ERR_ARG */
  expect_error(KILN_ERR_ARG, "kiln_linear", NULL);
  /* losses */
  assert_null(kiln_cross_entropy(x, kiln_zeros(KILN_I32, 1, (int64_t[]){3}), KILN_REDUCTION_MEAN, 0));
  expect_error(KILN_ERR_DTYPE, "kiln_cross_entropy", "i32", NULL);
  assert_null(kiln_cross_entropy(x, kiln_zeros(KILN_I64, 1, (int64_t[]){4}), KILN_REDUCTION_MEAN, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_cross_entropy", "[4]", "[3, 4]", NULL);
  assert_null(kiln_cross_entropy(x, tgt, KILN_REDUCTION_MEAN, 1.5));
  expect_error(KILN_ERR_ARG, "kiln_cross_entropy", "label_smoothing 1.5", NULL);
  assert_null(kiln_cross_entropy(x, tgt, KILN_REDUCTION_MEAN, NAN));
  expect_error(KILN_ERR_ARG, "kiln_cross_entropy", NULL);
  assert_null(kiln_cross_entropy(x, tgt, (kiln_reduction)7, 0));
  expect_error(KILN_ERR_ARG, "kiln_cross_entropy", "reduction 7", NULL);
  assert_null(kiln_cross_entropy(xi, tgt, KILN_REDUCTION_MEAN, 0));
  expect_error(KILN_ERR_DTYPE, "kiln_cross_entropy", NULL);
  assert_null(kiln_cross_entropy(kiln_scalar(KILN_F32, 1), kiln_scalar(KILN_I64, 0), KILN_REDUCTION_MEAN, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_cross_entropy", "0-d", NULL);
  kiln_tensor *bad = i64(1, (int64_t[]){3}, (int64_t[]){0, 4, 1});
  assert_null(kiln_cross_entropy(x, bad, KILN_REDUCTION_MEAN, 0));
  expect_error(KILN_ERR_INDEX, "kiln_cross_entropy", "index 4", NULL);
  assert_null(kiln_nll_loss(x, i64(1, (int64_t[]){3}, (int64_t[]){0, -1, 1}), KILN_REDUCTION_SUM));
  expect_error(KILN_ERR_INDEX, "kiln_nll_loss", "index -1", NULL);
  expect_values_tol(bad, (double[]){0, 4, 1}, 3, 0); /* the target stays usable */
  assert_null(kiln_mse_loss(x, kiln_zeros(KILN_F32, 1, (int64_t[]){4}), KILN_REDUCTION_MEAN));
  expect_error(KILN_ERR_SHAPE, "kiln_mse_loss", "[3, 4]", "[4]", NULL);
  assert_null(kiln_mse_loss(x, kiln_zeros(KILN_F64, 2, (int64_t[]){3, 4}), KILN_REDUCTION_MEAN));
  expect_error(KILN_ERR_DTYPE, "kiln_mse_loss", NULL);
  /* dropout */
  assert_null(kiln_dropout(x, 1.5, true));
  expect_error(KILN_ERR_ARG, "kiln_dropout", "1.5", NULL);
  assert_null(kiln_dropout(x, -0.1, false));
  expect_error(KILN_ERR_ARG, "kiln_dropout", NULL);
  assert_null(kiln_dropout(x, NAN, true));
  expect_error(KILN_ERR_ARG, "kiln_dropout", NULL);
  assert_null(kiln_dropout(xi, 0.5, true));
  expect_error(KILN_ERR_DTYPE, "kiln_dropout", NULL);
  kiln_scope_end();
}

/* ---------------------------------------------------- gradient checks */

#define M gc_mark

/* Moves every value within margin of p away from it. */
static void avoid(gc_input *in, double p, double margin) {
  for (int64_t i = 0; i < in->n; i++) {
    double d = in->v[i] - p;
    if (fabs(d) < margin) in->v[i] = p + (d < 0 ? -1 : 1) * (margin + fabs(d));
  }
}

/* x [4, 6] read as t(narrow(x, 1, 1, 4)): [4, 4], strides [1, 6] */
static kiln_tensor *twist(kiln_tensor *x) { return kiln_t(kiln_narrow(x, 1, 1, 4)); }

typedef kiln_tensor *(*act_fn)(kiln_tensor *);
static kiln_tensor *leaky(kiln_tensor *t) { return kiln_leaky_relu(t, 0.2); }
static kiln_tensor *elu(kiln_tensor *t) { return kiln_elu(t, 1.3); }
static kiln_tensor *softplus(kiln_tensor *t) { return kiln_softplus(t, 2, 1); }
static kiln_tensor *dropout(kiln_tensor *t) {
  kiln_manual_seed(7); /* the same mask in every evaluation */
  return kiln_dropout(t, 0.4, true);
}

static kiln_tensor *act_case(kiln_tensor *const *x, void *ctx) { return ((act_fn)ctx)(M(twist(x[0]))); }

static void grad_activations(void **state) {
  (void)state;
  struct { const char *name; act_fn f; double kink; } cases[] = {
      {"leaky_relu", leaky, 0}, {"elu", elu, 0}, {"selu", kiln_selu, 0},
      {"softplus", softplus, 0.5}, {"softsign", kiln_softsign, 0}, {"dropout", dropout, 0},
  };
  uint64_t seed = 1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gc_input in = gc_in(&seed, 2, (int64_t[]){4, 6}, -3, 3);
    avoid(&in, cases[i].kink, 0.05);
    gc_check(cases[i].name, act_case, (void *)cases[i].f, &in, 1, seed);
  }
}

static kiln_tensor *prelu_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  return kiln_prelu(kiln_permute(x[0], 3, (int[]){1, 0, 2}), x[1]); /* [3, 2, 4] read as [2, 3, 4] */
}
static kiln_tensor *prelu1_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  return kiln_prelu(x[0], x[1]);
}
static kiln_tensor *glu_case(kiln_tensor *const *x, void *ctx) {
  return kiln_glu(twist(x[0]), *(int *)ctx);
}
static kiln_tensor *shuffle_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  return kiln_pixel_shuffle(kiln_transpose(x[0], 2, 3), 2); /* [1, 8, 3, 2] read as [1, 8, 2, 3] */
}

static void grad_layers(void **state) {
  (void)state;
  uint64_t seed = 2;
  gc_input in[2] = {gc_in(&seed, 3, (int64_t[]){3, 2, 4}, -2, 2), gc_in(&seed, 1, (int64_t[]){3}, -1, 1)};
  avoid(&in[0], 0, 0.05);
  gc_check("prelu [C]", prelu_case, NULL, in, 2, seed);
  in[1] = gc_in(&seed, 1, (int64_t[]){1}, -1, 1);
  gc_check("prelu [1]", prelu1_case, NULL, in, 2, seed);
  for (int d = 0; d < 2; d++) {
    gc_input g = gc_in(&seed, 2, (int64_t[]){4, 6}, -3, 3);
    gc_check("glu", glu_case, &d, &g, 1, seed);
  }
  gc_input p = gc_in(&seed, 4, (int64_t[]){1, 8, 3, 2}, -1, 1);
  gc_check("pixel_shuffle", shuffle_case, NULL, &p, 1, seed);
}

static kiln_tensor *embedding_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  kiln_tensor *idx = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 3}, (int64_t[]){4, 0, 2, 2, 4, 4});
  return kiln_embedding(kiln_t(x[0]), kiln_t(idx)); /* weight [3, 5] read as [5, 3] */
}
static kiln_tensor *linear_case(kiln_tensor *const *x, void *ctx) {
  bool bias = *(bool *)ctx;
  /* input [4, 2, 3] read as [2, 4, 3]; weight [5, 3]; bias [5] */
  return kiln_linear(M(kiln_transpose(x[0], 0, 1)), x[1], bias ? x[2] : NULL);
}

static void grad_embedding_linear(void **state) {
  (void)state;
  uint64_t seed = 3;
  gc_input w = gc_in(&seed, 2, (int64_t[]){3, 5}, -1, 1);
  gc_check("embedding", embedding_case, NULL, &w, 1, seed);
  for (int b = 0; b < 2; b++) {
    bool bias = b;
    gc_input in[3] = {gc_in(&seed, 3, (int64_t[]){4, 2, 3}, -1, 1), gc_in(&seed, 2, (int64_t[]){5, 3}, -1, 1),
                      gc_in(&seed, 1, (int64_t[]){5}, -1, 1)};
    gc_check(bias ? "linear with bias" : "linear", linear_case, &bias, in, bias ? 3 : 2, seed);
  }
}

typedef struct loss_ctx {
  kiln_reduction r;
  double smoothing;
  int which; /* 0 cross_entropy [3, 4], 1 cross_entropy [2, 3, 2], 2 nll, 3 mse */
} loss_ctx;

static kiln_tensor *loss_case(kiln_tensor *const *x, void *ctx) {
  const loss_ctx *c = ctx;
  switch (c->which) {
  case 0:
    return kiln_cross_entropy(kiln_t(x[0]), kiln_from_data(KILN_I64, 1, (int64_t[]){3}, (int64_t[]){1, 3, 0}), c->r,
                              c->smoothing);
  case 1:
    return kiln_cross_entropy(x[0], kiln_from_data(KILN_I64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, 1, 1}), c->r,
                              c->smoothing);
  case 2:
    return kiln_nll_loss(kiln_t(x[0]), kiln_from_data(KILN_I64, 1, (int64_t[]){3}, (int64_t[]){1, 3, 3}), c->r);
  default:
    return kiln_mse_loss(kiln_t(x[0]), x[1], c->r);
  }
}

static void grad_losses(void **state) {
  (void)state;
  uint64_t seed = 4;
  kiln_reduction rs[3] = {KILN_REDUCTION_NONE, KILN_REDUCTION_MEAN, KILN_REDUCTION_SUM};
  for (int r = 0; r < 3; r++) {
    for (int which = 0; which < 4; which++) {
      loss_ctx c = {rs[r], which < 2 ? 0.25 * r : 0, which};
      int64_t s0[2] = {4, 3}, s1[3] = {2, 3, 2}, st[2] = {3, 4};
      gc_input in[2] = {which == 1 ? gc_in(&seed, 3, s1, -2, 2) : gc_in(&seed, 2, s0, -2, 2), gc_in(&seed, 2, st, -2, 2)};
      char name[64];
      snprintf(name, sizeof name, "loss %d reduction %d", which, r);
      gc_check(name, loss_case, &c, in, which == 3 ? 2 : 1, seed);
    }
  }
}

static void report(void **state) {
  (void)state;
  gc_report("test_nn_functional");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(activation_values),
      cmocka_unit_test(noncontiguous_inputs),
      cmocka_unit_test(prelu_glu_pixel_shuffle_values),
      cmocka_unit_test(embedding_values),
      cmocka_unit_test(linear_values),
      cmocka_unit_test(cross_entropy_is_one_kernel),
      cmocka_unit_test(loss_values),
      cmocka_unit_test(dropout_values),
      cmocka_unit_test(errors),
      cmocka_unit_test(grad_activations),
      cmocka_unit_test(grad_layers),
      cmocka_unit_test(grad_embedding_linear),
      cmocka_unit_test(grad_losses),
      cmocka_unit_test(report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
