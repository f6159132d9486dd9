/*
 * test_nn.c — softmax, log_softmax, layer_norm, logsumexp, var, std, norm,
 * cumsum and cumprod: values against hand-computed references, the
 * kernel counts fusion promises (one kernel per row op), results equal
 * with fusion off (KILN_FUSE=0), and error paths.
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

/* A realized tensor of dtype from F64 values. */
static kiln_tensor *make(kiln_dtype dt, int ndim, const int64_t *sizes, const double *v) {
  kiln_tensor *t = kiln_to_dtype(kiln_from_data(KILN_F64, ndim, sizes, v), dt);
  assert_non_null(t);
  assert_int_equal(kiln_realize(t), KILN_OK);
  return t;
}

/* Kernels run to force y (its inputs already realized). */
static int kernels(kiln_tensor *y) {
  assert_non_null(y);
  kiln_profile_begin();
  assert_int_equal(kiln_realize(y), KILN_OK);
  kiln_profile_end();
  return kiln_profile_count();
}

typedef kiln_tensor *(*op1)(kiln_tensor *x);

/* op on a random realized input of sizes: want_kernels kernels fused (0:
 * don't check) and the same result as the unfused run — bit-identical when
 * exact (scans: a fixed order), else within 4 ulp of the dtype: a sum's
 * reassociable updates may be vectorised differently when its input is
 * computed in the same loop than when it is read from a buffer, or when
 * one run merges its loops (passes/merge_loops.c) and the other does not. The
 * ulp are those of the larger of the element and a tenth of the tensor's
 * largest magnitude: a reordered sum moves a row's mean by a few ulp of
 * the row's scale, and an element far smaller than that (x - mean near 0)
 * inherits that absolute error. */
static void fused_equals_unfused(op1 op, kiln_dtype dt, int ndim, const int64_t *sizes, int want_kernels, bool exact) {
  kiln_scope_begin();
  kiln_manual_seed(11);
  kiln_tensor *x = kiln_to_dtype(kiln_sub_scalar(kiln_mul_scalar(kiln_randn(KILN_F64, ndim, sizes), 30), 5), dt);
  assert_int_equal(kiln_realize(x), KILN_OK);
  rt_set_fusion(1);
  kiln_tensor *a = op(x);
  int k = kernels(a);
  if (want_kernels > 0) assert_int_equal(k, want_kernels);
  rt_set_fusion(0);
  kiln_tensor *b = op(x);
  assert_int_equal(kiln_realize(b), KILN_OK);
  rt_set_fusion(-1);
  int64_t n = kiln_numel(a);
  assert_int_equal(n, kiln_numel(b));
  if (exact) {
    size_t bytes = (size_t)n * kiln_dtype_size(kiln_dtype_of(a));
    char *pa = malloc(bytes + 1), *pb = malloc(bytes + 1);
    assert_int_equal(kiln_read(a, pa, bytes), KILN_OK);
    assert_int_equal(kiln_read(b, pb, bytes), KILN_OK);
    assert_memory_equal(pa, pb, bytes);
    free(pa);
    free(pb);
  } else {
    double eps = dt == KILN_F64 ? 0x1p-52 : dt == KILN_F32 ? 0x1p-23 : dt == KILN_F16 ? 0x1p-10 : 0x1p-7;
    double *da = malloc((size_t)n * sizeof *da + 8), *db = malloc((size_t)n * sizeof *db + 8);
    assert_int_equal(kiln_read(kiln_to_dtype(a, KILN_F64), da, (size_t)n * sizeof *da), KILN_OK);
    assert_int_equal(kiln_read(kiln_to_dtype(b, KILN_F64), db, (size_t)n * sizeof *db), KILN_OK);
    double scale = 0; /* the tensor's largest magnitude */
    for (int64_t i = 0; i < n; i++)
      if (isfinite(db[i])) scale = fmax(scale, fabs(db[i]));
    for (int64_t i = 0; i < n; i++)
      if (!(isnan(da[i]) && isnan(db[i])) &&
          !(fabs(da[i] - db[i]) <= 4 * eps * fmax(fmax(fabs(db[i]), 0.1 * scale), 1e-300)))
        fail_msg("dtype %d, element %lld: fused %.17g, unfused %.17g", (int)dt, (long long)i, da[i], db[i]);
    free(da);
    free(db);
  }
  kiln_scope_end();
}

static kiln_tensor *softmax_last(kiln_tensor *x) { return kiln_softmax(x, -1); }
static kiln_tensor *softmax_first(kiln_tensor *x) { return kiln_softmax(x, 0); }
static kiln_tensor *log_softmax_last(kiln_tensor *x) { return kiln_log_softmax(x, 1); }
static kiln_tensor *layer_norm_1(kiln_tensor *x) { return kiln_layer_norm(x, 1, NULL, NULL, 1e-5); }
static kiln_tensor *layer_norm_2(kiln_tensor *x) { return kiln_layer_norm(x, 2, NULL, NULL, 1e-5); }
static kiln_tensor *lse_last(kiln_tensor *x) { return kiln_logsumexp(x, 1, (int[]){-1}, false); }
static kiln_tensor *var_last(kiln_tensor *x) { return kiln_var(x, 1, (int[]){-1}, 1, true); }
static kiln_tensor *std_last(kiln_tensor *x) { return kiln_std(x, 1, (int[]){-1}, 0, false); }
static kiln_tensor *norm2_last(kiln_tensor *x) { return kiln_norm(x, 2, 1, (int[]){-1}, false); }
static kiln_tensor *cumsum_0(kiln_tensor *x) { return kiln_cumsum(kiln_exp(kiln_mul_scalar(x, 0.01)), 0); }
/* a scan of a row-dependent value: the softmax is materialized first */
static kiln_tensor *cumsum_softmax(kiln_tensor *x) { return kiln_cumsum(kiln_softmax(x, 1), 1); }
static kiln_tensor *cumprod_1(kiln_tensor *x) { return kiln_cumprod(kiln_add_scalar(kiln_mul_scalar(x, 1e-3), 1), 1); }

/* The row ops are one kernel each (the ISSUE's requirement) and equal to
 * their unfused results: the scans bit for bit, the others within 4 ulp
 * (fused_equals_unfused says why). */
static void row_ops_are_one_kernel(void **state) {
  (void)state;
  const int64_t s[] = {37, 129}, s3[] = {3, 5, 64};
  kiln_dtype dts[] = {KILN_F32, KILN_F64};
  for (int i = 0; i < 2; i++) {
    fused_equals_unfused(softmax_last, dts[i], 2, s, 1, false);
    fused_equals_unfused(softmax_first, dts[i], 2, s, 0, false); /* column reductions: more kernels */
    fused_equals_unfused(log_softmax_last, dts[i], 2, s, 1, false);
    fused_equals_unfused(layer_norm_1, dts[i], 2, s, 1, false);
    fused_equals_unfused(layer_norm_2, dts[i], 3, s3, 1, false);
    fused_equals_unfused(lse_last, dts[i], 2, s, 1, false);
    fused_equals_unfused(var_last, dts[i], 2, s, 1, false);
    fused_equals_unfused(std_last, dts[i], 2, s, 1, false);
    fused_equals_unfused(norm2_last, dts[i], 2, s, 1, false);
    fused_equals_unfused(cumsum_0, dts[i], 2, s, 1, true);
    fused_equals_unfused(cumprod_1, dts[i], 2, s, 1, true);
  }
  fused_equals_unfused(cumsum_softmax, KILN_F64, 2, s, 2, false);
  /* last size a multiple of 16: scans down the columns run 16 at a time */
  const int64_t s16[] = {37, 64};
  fused_equals_unfused(cumsum_0, KILN_F32, 2, s16, 1, true);
  fused_equals_unfused(cumsum_0, KILN_F16, 2, s16, 1, true);
  fused_equals_unfused(softmax_last, KILN_F16, 2, s, 1, false);
  fused_equals_unfused(layer_norm_1, KILN_BF16, 2, s, 1, false);
}

static void layer_norm_affine_is_one_kernel(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_randn(KILN_F32, 2, (int64_t[]){64, 256});
  kiln_tensor *w = kiln_rand(KILN_F32, 1, (int64_t[]){256}), *b = kiln_rand(KILN_F32, 1, (int64_t[]){256});
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){x, w, b}, 3), KILN_OK);
  rt_set_fusion(1); /* the count is fusion's, also under KILN_FUSE=0 */
  assert_int_equal(kernels(kiln_layer_norm(x, 1, w, b, 1e-5)), 1);
  rt_set_fusion(-1);
  kiln_scope_end();
}

static void softmax_values(void **state) {
  (void)state;
  kiln_scope_begin();
  /* rows shifted by 1000: the same softmax, no overflow */
  double v[] = {1, 2, 3, 1000, 1001, 1002};
  const double p[] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
  const double want[] = {p[0], p[1], p[2], p[0], p[1], p[2]};
  /* F16/BF16: rows shifted by 64 (exact in BF16) */
  double vh[] = {1, 2, 3, 65, 66, 67};
  kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
  double tol[] = {1e-6, 1e-12, 1e-3, 1e-2};
  for (int i = 0; i < 4; i++) {
    kiln_tensor *x = make(dts[i], 2, (int64_t[]){2, 3}, i < 2 ? v : vh);
    kiln_tensor *y = kiln_softmax(x, 1);
    assert_int_equal(kiln_dtype_of(y), dts[i]);
    expect_values_tol(y, want, 6, tol[i]);
    /* log_softmax: log p, exact even where p underflows */
    kiln_tensor *l = kiln_log_softmax(x, -1);
    const double lw[] = {log(p[0]), log(p[1]), log(p[2]), log(p[0]), log(p[1]), log(p[2])};
    expect_values_tol(l, lw, 6, tol[i] * 10);
  }
  /* dim 0 of the transpose is dim 1 of x */
  kiln_tensor *x = make(KILN_F64, 2, (int64_t[]){2, 3}, v);
  expect_values_tol(kiln_softmax(kiln_t(x), 0), (double[]){p[0], p[0], p[1], p[1], p[2], p[2]}, 6, 1e-12);
  kiln_tensor *y = kiln_softmax(x, 0); /* columns: [1, 1000] etc. */
  assert_int_equal(kiln_size(y, 0), 2);
  expect_values_tol(y, (double[]){0, 0, 0, 1, 1, 1}, 6, 1e-12);
  /* a far-below entry underflows in softmax, not in log_softmax */
  kiln_tensor *z = make(KILN_F32, 1, (int64_t[]){2}, (double[]){0, -200});
  expect_values_tol(kiln_softmax(z, 0), (double[]){1, 0}, 2, 1e-7);
  expect_values_tol(kiln_log_softmax(z, 0), (double[]){0, -200}, 2, 1e-4);
  /* 0-d: softmax 1, log_softmax 0; empty stays empty */
  expect_values_tol(kiln_softmax(kiln_scalar(KILN_F32, 5), 0), (double[]){1}, 1, 0);
  expect_values_tol(kiln_log_softmax(kiln_scalar(KILN_F32, 5), -1), (double[]){0}, 1, 0);
  kiln_tensor *e = kiln_softmax(kiln_zeros(KILN_F32, 2, (int64_t[]){3, 0}), 1);
  assert_non_null(e);
  assert_int_equal(kiln_numel(e), 0);
  expect_no_error();
  kiln_scope_end();
}

static void layer_norm_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = make(KILN_F32, 2, (int64_t[]){2, 4}, (double[]){1, 2, 3, 4, 10, 10, 10, 10});
  /* row 0: mean 2.5, var 1.25 */
  double r = 1 / sqrt(1.25 + 1e-5);
  const double want[] = {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r, 0, 0, 0, 0};
  expect_values_tol(kiln_layer_norm(x, 1, NULL, NULL, 1e-5), want, 8, 1e-6);
  kiln_tensor *w = make(KILN_F32, 1, (int64_t[]){4}, (double[]){1, 2, 3, 4});
  kiln_tensor *b = make(KILN_F32, 1, (int64_t[]){4}, (double[]){0, 0, 0, 1});
  const double wb[] = {-1.5 * r, -1 * r, 1.5 * r, 6 * r + 1, 0, 0, 0, 1};
  expect_values_tol(kiln_layer_norm(x, 1, w, b, 1e-5), wb, 8, 1e-5);
  expect_values_tol(kiln_layer_norm(x, 1, NULL, b, 1e-5),
                    (double[]){-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r + 1, 0, 0, 0, 1}, 8, 1e-5);
  /* over both dims: mean 6.25, deviations scaled by 1/std of the 8 */
  double m = 6.25, var = 0;
  double v[] = {1, 2, 3, 4, 10, 10, 10, 10}, want2[8];
  for (int i = 0; i < 8; i++) var += (v[i] - m) * (v[i] - m) / 8;
  for (int i = 0; i < 8; i++) want2[i] = (v[i] - m) / sqrt(var + 1e-5);
  kiln_tensor *y = kiln_layer_norm(x, 2, NULL, NULL, 1e-5);
  expect_values_tol(y, want2, 8, 1e-5);
  assert_true(kiln_is_contiguous(y));
  /* large offsets: two passes keep the variance exact */
  kiln_tensor *big = make(KILN_F64, 1, (int64_t[]){4}, (double[]){1e9 + 1, 1e9 + 2, 1e9 + 3, 1e9 + 4});
  expect_values_tol(kiln_layer_norm(big, 1, NULL, NULL, 0),
                    (double[]){-1.5 / sqrt(1.25), -0.5 / sqrt(1.25), 0.5 / sqrt(1.25), 1.5 / sqrt(1.25)}, 4, 1e-9);
  expect_no_error();
  kiln_scope_end();
}

static void logsumexp_values(void **state) {
  (void)state;
  kiln_scope_begin();
  double v[] = {1, 2, 3, 1000, 1001, 1002, -INFINITY, -INFINITY, -INFINITY, 1, INFINITY, -INFINITY};
  kiln_tensor *x = make(KILN_F32, 2, (int64_t[]){4, 3}, v);
  double l = 3.40760596444438;
  kiln_tensor *y = kiln_logsumexp(x, 1, (int[]){1}, false);
  assert_int_equal(kiln_dim(y), 1);
  expect_values_tol(y, (double[]){l, 999 + l, -INFINITY, INFINITY}, 4, 1e-4);
  kiln_tensor *k = kiln_logsumexp(x, 1, (int[]){-1}, true);
  assert_int_equal(kiln_dim(k), 2);
  assert_int_equal(kiln_size(k, 1), 1);
  /* over dim 0 and over all */
  kiln_tensor *x2 = make(KILN_F64, 2, (int64_t[]){2, 3}, v);
  expect_values_tol(kiln_logsumexp(x2, 1, (int[]){0}, false),
                    (double[]){1000 + log1p(exp(-999)), 1001 + log1p(exp(-999)), 1002 + log1p(exp(-999))}, 3, 1e-9);
  expect_values_tol(kiln_logsumexp(x2, 0, NULL, false), (double[]){1002 + log(1 + exp(-1) + exp(-2))}, 1, 1e-9);
  /* integers give the default float; empty gives -inf */
  kiln_tensor *xi = make(KILN_I32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  kiln_tensor *yi = kiln_logsumexp(xi, 0, NULL, false);
  assert_int_equal(kiln_dtype_of(yi), KILN_F32);
  expect_values_tol(yi, (double[]){l}, 1, 1e-5);
  kiln_tensor *e = kiln_logsumexp(kiln_zeros(KILN_F32, 2, (int64_t[]){2, 0}), 1, (int[]){1}, false);
  expect_values_tol(e, (double[]){-INFINITY, -INFINITY}, 2, 0);
  expect_no_error();
  kiln_scope_end();
}

static void var_std_norm_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = make(KILN_F64, 2, (int64_t[]){2, 4}, (double[]){1, 2, 3, 4, 2, 2, 2, 2});
  expect_values_tol(kiln_var(x, 1, (int[]){1}, 1, false), (double[]){5.0 / 3, 0}, 2, 1e-12);
  expect_values_tol(kiln_var(x, 1, (int[]){1}, 0, false), (double[]){1.25, 0}, 2, 1e-12);
  expect_values_tol(kiln_std(x, 1, (int[]){-1}, 1, true), (double[]){sqrt(5.0 / 3), 0}, 2, 1e-12);
  expect_values_tol(kiln_var(x, 1, (int[]){0}, 1, false), (double[]){0.5, 0, 0.5, 2}, 4, 1e-12);
  expect_values_tol(kiln_var(x, 0, NULL, 1, false), (double[]){(46 - 8 * 2.25 * 2.25) / 7}, 1, 1e-12);
  /* N - correction <= 0: 0/0 is NaN, a positive sum over 0 is inf */
  expect_values_tol(kiln_var(x, 1, (int[]){1}, 4, false), (double[]){INFINITY, NAN}, 2, 0);
  /* large offset: two passes */
  kiln_tensor *big = make(KILN_F32, 1, (int64_t[]){4}, (double[]){1e4 + 1, 1e4 + 2, 1e4 + 3, 1e4 + 4});
  expect_values_tol(kiln_var(big, 0, NULL, 0, false), (double[]){1.25}, 1, 1e-6);
  kiln_tensor *v = make(KILN_F32, 2, (int64_t[]){2, 2}, (double[]){3, -4, 0, 0});
  expect_values_tol(kiln_norm(v, 2, 1, (int[]){1}, false), (double[]){5, 0}, 2, 1e-6);
  expect_values_tol(kiln_norm(v, 1, 1, (int[]){1}, false), (double[]){7, 0}, 2, 1e-6);
  expect_values_tol(kiln_norm(v, INFINITY, 1, (int[]){1}, false), (double[]){4, 0}, 2, 0);
  expect_values_tol(kiln_norm(v, -INFINITY, 1, (int[]){1}, false), (double[]){3, 0}, 2, 0);
  expect_values_tol(kiln_norm(v, 0, 1, (int[]){1}, false), (double[]){2, 0}, 2, 0);
  expect_values_tol(kiln_norm(v, 3, 1, (int[]){1}, false), (double[]){cbrt(91), 0}, 2, 1e-5);
  expect_values_tol(kiln_norm(v, 2, 0, NULL, false), (double[]){5}, 1, 1e-6);
  /* squares of large F32 values do not overflow */
  kiln_tensor *huge = make(KILN_F32, 1, (int64_t[]){2}, (double[]){3e30, 4e30});
  expect_values_tol(kiln_norm(huge, 2, 0, NULL, false), (double[]){5e30}, 1, 1e24);
  expect_no_error();
  kiln_scope_end();
}

static void scan_values(void **state) {
  (void)state;
  kiln_scope_begin();
  double v[] = {1, 2, 3, 4, 5, 6};
  kiln_tensor *x = make(KILN_I32, 2, (int64_t[]){2, 3}, v);
  kiln_tensor *c1 = kiln_cumsum(x, 1);
  assert_int_equal(kiln_dtype_of(c1), KILN_I64);
  expect_values_tol(c1, (double[]){1, 3, 6, 4, 9, 15}, 6, 0);
  expect_values_tol(kiln_cumsum(x, 0), (double[]){1, 2, 3, 5, 7, 9}, 6, 0);
  expect_values_tol(kiln_cumprod(x, -1), (double[]){1, 2, 6, 4, 20, 120}, 6, 0);
  expect_values_tol(kiln_cumprod(kiln_t(x), 1), (double[]){1, 4, 2, 10, 3, 18}, 6, 0);
  /* bool gives I64 counts */
  kiln_tensor *b = kiln_gt_scalar(x, 2);
  kiln_tensor *cb = kiln_cumsum(b, 1);
  assert_int_equal(kiln_dtype_of(cb), KILN_I64);
  expect_values_tol(cb, (double[]){0, 0, 1, 1, 2, 3}, 6, 0);
  /* floats keep their dtype */
  kiln_tensor *f = make(KILN_F32, 1, (int64_t[]){4}, (double[]){0.5, 0.25, 0.125, 2});
  kiln_tensor *cf = kiln_cumsum(f, 0);
  assert_int_equal(kiln_dtype_of(cf), KILN_F32);
  expect_values_tol(cf, (double[]){0.5, 0.75, 0.875, 2.875}, 4, 0);
  expect_values_tol(kiln_cumprod(f, 0), (double[]){0.5, 0.125, 0.015625, 0.03125}, 4, 0);
  /* I64 beyond 2^53 stays exact */
  int64_t big[] = {(INT64_C(1) << 53) + 1, 1, 1};
  kiln_tensor *xb = kiln_from_data(KILN_I64, 1, (int64_t[]){3}, big);
  int64_t got[3];
  assert_int_equal(kiln_read(kiln_cumsum(xb, 0), got, sizeof got), KILN_OK);
  assert_true(got[0] == big[0] && got[1] == big[0] + 1 && got[2] == big[0] + 2);
  /* 0-d and empty */
  kiln_tensor *s = kiln_cumsum(kiln_scalar(KILN_I8, 7), 0);
  assert_int_equal(kiln_dim(s), 0);
  assert_int_equal(kiln_dtype_of(s), KILN_I64);
  expect_values_tol(s, (double[]){7}, 1, 0);
  assert_int_equal(kiln_numel(kiln_cumprod(kiln_zeros(KILN_F32, 2, (int64_t[]){0, 3}), 1)), 0);
  assert_int_equal(kiln_realize(kiln_cumprod(kiln_zeros(KILN_F32, 2, (int64_t[]){2, 0}), 0)), KILN_OK);
  /* the scan sees writes recorded before it, not after */
  kiln_tensor *w = kiln_ones(KILN_I64, 1, (int64_t[]){4});
  kiln_tensor *cw = kiln_cumsum(w, 0);
  assert_int_equal(kiln_fill_(w, 2), KILN_OK);
  expect_values_tol(cw, (double[]){1, 2, 3, 4}, 4, 0);
  expect_no_error();
  kiln_scope_end();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 3});
  kiln_tensor *xi = kiln_zeros(KILN_I32, 2, (int64_t[]){2, 3});
  assert_null(kiln_softmax(x, 2));
  expect_error(KILN_ERR_ARG, "kiln_softmax", "dim 2", NULL);
  assert_null(kiln_log_softmax(x, -3));
  expect_error(KILN_ERR_ARG, "kiln_log_softmax", "dim -3", NULL);
  assert_null(kiln_softmax(xi, 1));
  expect_error(KILN_ERR_DTYPE, "kiln_softmax", "i32", NULL);
  assert_null(kiln_softmax(NULL, 0));
  expect_error(KILN_ERR_ARG, "kiln_softmax", NULL);
  /* NULL propagates and keeps the first error */
  assert_null(kiln_softmax(kiln_narrow(x, 0, 5, 1), 0));
  expect_error(KILN_ERR_INDEX, "kiln_narrow", NULL);
  assert_null(kiln_layer_norm(kiln_narrow(x, 0, 5, 1), 1, NULL, NULL, 1e-5));
  expect_error(KILN_ERR_INDEX, "kiln_narrow", NULL);
  assert_null(kiln_layer_norm(x, 1, kiln_narrow(x, 0, 5, 1), NULL, 1e-5));
  expect_error(KILN_ERR_INDEX, "kiln_narrow", NULL);

  assert_null(kiln_layer_norm(x, 3, NULL, NULL, 1e-5));
  expect_error(KILN_ERR_ARG, "kiln_layer_norm", "normalized_ndim 3", "2-d", NULL);
  assert_null(kiln_layer_norm(x, 0, NULL, NULL, 1e-5));
  expect_error(KILN_ERR_ARG, "kiln_layer_norm", "normalized_ndim 0", NULL);
  kiln_tensor *w4 = kiln_ones(KILN_F32, 1, (int64_t[]){4});
  assert_null(kiln_layer_norm(x, 1, w4, NULL, 1e-5));
  expect_error(KILN_ERR_SHAPE, "kiln_layer_norm", "weight", "[4]", "[3]", NULL);
  assert_null(kiln_layer_norm(x, 2, kiln_ones(KILN_F32, 1, (int64_t[]){3}), NULL, 1e-5));
  expect_error(KILN_ERR_SHAPE, "kiln_layer_norm", "weight", "[2, 3]", NULL);
  assert_null(kiln_layer_norm(x, 1, NULL, w4, 1e-5));
  expect_error(KILN_ERR_SHAPE, "kiln_layer_norm", "bias", "[4]", NULL);
  assert_null(kiln_layer_norm(x, 1, NULL, NULL, -1));
  expect_error(KILN_ERR_ARG, "kiln_layer_norm", "eps", NULL);
  assert_null(kiln_layer_norm(xi, 1, NULL, NULL, 1e-5));
  expect_error(KILN_ERR_DTYPE, "kiln_layer_norm", "i32", NULL);

  assert_null(kiln_logsumexp(x, 1, (int[]){2}, false));
  expect_error(KILN_ERR_ARG, "kiln_logsumexp", "dim 2", NULL);
  assert_null(kiln_logsumexp(x, 2, (int[]){1, -1}, false));
  expect_error(KILN_ERR_ARG, "kiln_logsumexp", "more than once", NULL);
  assert_null(kiln_var(xi, 0, NULL, 1, false));
  expect_error(KILN_ERR_DTYPE, "kiln_var", "i32", NULL);
  assert_null(kiln_std(x, 1, (int[]){5}, 1, false));
  expect_error(KILN_ERR_ARG, "kiln_std", "dim 5", NULL);
  assert_null(kiln_norm(xi, 2, 0, NULL, false));
  expect_error(KILN_ERR_DTYPE, "kiln_norm", NULL);
  assert_null(kiln_norm(x, NAN, 0, NULL, false));
  expect_error(KILN_ERR_ARG, "kiln_norm", "NaN", NULL);
  assert_null(kiln_norm(kiln_zeros(KILN_F32, 1, (int64_t[]){0}), INFINITY, 0, NULL, false));
  expect_error(KILN_ERR_SHAPE, "kiln_norm", "empty", NULL);
  assert_null(kiln_var(NULL, 0, NULL, 1, false));
  expect_error(KILN_ERR_ARG, "kiln_var", NULL);

  assert_null(kiln_cumsum(x, 2));
  expect_error(KILN_ERR_ARG, "kiln_cumsum", "dim 2", NULL);
  assert_null(kiln_cumprod(kiln_scalar(KILN_F32, 1), 1));
  expect_error(KILN_ERR_ARG, "kiln_cumprod", "dim 1", NULL);
  assert_null(kiln_cumprod(NULL, 0));
  expect_error(KILN_ERR_ARG, "kiln_cumprod", NULL);
  kiln_scope_end();
}

/* Scans over every dim of a 3-d transposed view, against a loop in C. */
static void scan_every_dim(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t sz[] = {3, 4, 5};
  double v[60];
  for (int i = 0; i < 60; i++) v[i] = (i * 7) % 11 - 5;
  kiln_tensor *x = kiln_permute(make(KILN_I16, 3, sz, v), 3, (int[]){2, 0, 1}); /* [5, 3, 4] */
  for (int d = 0; d < 3; d++) {
    double want[60];
    /* element [a, b, c] of x is v[b][c][a] */
    for (int a = 0; a < 5; a++)
      for (int b = 0; b < 3; b++)
        for (int c = 0; c < 4; c++) {
          int i[3] = {a, b, c};
          double acc = 0;
          for (int j = 0; j <= i[d]; j++) {
            int k[3] = {a, b, c};
            k[d] = j;
            acc += v[k[1] * 20 + k[2] * 5 + k[0]];
          }
          want[(a * 3 + b) * 4 + c] = acc;
        }
    expect_values_tol(kiln_cumsum(x, d), want, 60, 0);
  }
  kiln_scope_end();
}

/* Scans down columns of a [3, 7, 32] tensor (16 lanes at a time) and of
 * its transpose, against a loop in C; I64 exact. */
static void scan_columns(void **state) {
  (void)state;
  kiln_scope_begin();
  double v[3 * 7 * 32];
  for (int i = 0; i < 3 * 7 * 32; i++) v[i] = (i * 13) % 9 - 4;
  kiln_tensor *x = make(KILN_I32, 3, (int64_t[]){3, 7, 32}, v);
  for (int d = 0; d < 2; d++) {
    double want[3 * 7 * 32];
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 7; b++)
        for (int c = 0; c < 32; c++) {
          double prev = d == 0 ? (a ? want[((a - 1) * 7 + b) * 32 + c] : 0) : (b ? want[(a * 7 + b - 1) * 32 + c] : 0);
          want[(a * 7 + b) * 32 + c] = prev + v[(a * 7 + b) * 32 + c];
        }
    kiln_tensor *y = kiln_cumsum(x, d);
    double got[3 * 7 * 32];
    assert_int_equal(kiln_read(kiln_to_dtype(y, KILN_F64), got, sizeof got), KILN_OK);
    for (int i = 0; i < 3 * 7 * 32; i++) assert_float_equal(got[i], want[i], 0);
  }
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(row_ops_are_one_kernel),
      cmocka_unit_test(layer_norm_affine_is_one_kernel),
      cmocka_unit_test(softmax_values),
      cmocka_unit_test(layer_norm_values),
      cmocka_unit_test(logsumexp_values),
      cmocka_unit_test(var_std_norm_values),
      cmocka_unit_test(scan_values),
      cmocka_unit_test(scan_every_dim),
      cmocka_unit_test(scan_columns),
      cmocka_unit_test(errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
