/*
 * test_pool_pad.c — kiln_pad, kiln_max_pool, kiln_avg_pool and
 * kiln_batch_norm: values against Torch 1.13's (printed by
 * torch.nn.functional on the same inputs), Torch's errors, non-contiguous
 * inputs, the kernels fusion promises, and gradient checks
 * (tests/grad_check.h) — max pooling's gradient goes to the element Torch
 * picks (first maximum, last NaN, an input element rather than padding),
 * checked on ties. tests/CMakeLists.txt runs it again with KILN_FUSE=0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_util.h"
#include "grad_check.h"

/* A realized F64 tensor of sizes from values. */
static kiln_tensor *make(int ndim, const int64_t *sizes, const double *v) {
  kiln_tensor *t = kiln_from_data(KILN_F64, ndim, sizes, v);
  assert_int_equal(kiln_realize(t), KILN_OK);
  return t;
}

/* arange(n) as F64 of sizes. */
static kiln_tensor *iota(int ndim, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  return kiln_view(kiln_arange(KILN_F64, 0, (double)n, 1), ndim, sizes);
}

static void expect_sizes(kiln_tensor *t, int ndim, const int64_t *sizes) {
  assert_non_null(t);
  assert_int_equal(kiln_dim(t), ndim);
  for (int d = 0; d < ndim; d++) assert_int_equal(kiln_size(t, d), sizes[d]);
}

/* ------------------------------------------------------------------ pad */

static void pad_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(3, (int64_t[]){1, 3, 4}); /* [[0..3], [4..7], [8..11]] */
  kiln_tensor *y = kiln_pad(x, 2, (int64_t[]){2, 1}, KILN_PAD_REFLECT, 0);
  expect_sizes(y, 3, (int64_t[]){1, 3, 7});
  expect_values_tol(y, (double[]){2, 1, 0, 1, 2, 3, 2, 6, 5, 4, 5, 6, 7, 6, 10, 9, 8, 9, 10, 11, 10}, 21, 0);
  kiln_tensor *x2 = kiln_narrow(x, 1, 0, 2); /* [1, 2, 4]: 2-D padding of a [C, H, W] input */
  expect_values_tol(kiln_pad(x2, 4, (int64_t[]){1, 1, 1, 0}, KILN_PAD_REFLECT, 0),
                    (double[]){5, 4, 5, 6, 7, 6, 1, 0, 1, 2, 3, 2, 5, 4, 5, 6, 7, 6}, 18, 0);
  expect_values_tol(kiln_pad(x2, 4, (int64_t[]){1, 1, 1, 0}, KILN_PAD_REPLICATE, 0),
                    (double[]){0, 0, 1, 2, 3, 3, 0, 0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 7}, 18, 0);
  y = kiln_pad(kiln_unsqueeze(x, 0), 4, (int64_t[]){1, 2, 0, 1}, KILN_PAD_CIRCULAR, 0);
  expect_sizes(y, 4, (int64_t[]){1, 1, 4, 7});
  expect_values_tol(y, (double[]){3, 0, 1, 2, 3, 0, 1, 7, 4, 5, 6, 7, 4, 5, 11, 8, 9, 10, 11, 8, 9, 3, 0, 1, 2, 3, 0, 1},
                    28, 0);
  /* constant: any value, negative pads crop */
  y = kiln_pad(x, 4, (int64_t[]){-1, 2, 1, -2}, KILN_PAD_CONSTANT, -7);
  expect_sizes(y, 3, (int64_t[]){1, 2, 5});
  expect_values_tol(y, (double[]){-7, -7, -7, -7, -7, 1, 2, 3, -7, -7}, 10, 0);
  /* integer dtype: the value is converted (truncated) */
  y = kiln_pad(kiln_to_dtype(x, KILN_I32), 2, (int64_t[]){1, 0}, KILN_PAD_CONSTANT, 2.7);
  assert_int_equal(kiln_dtype_of(y), KILN_I32);
  expect_values_tol(kiln_narrow(y, 1, 0, 1), (double[]){2, 0, 1, 2, 3}, 5, 0);
  /* circular with a crop: the rest wraps (Torch: [1, 2, 3, 4, 1, 2]) */
  kiln_tensor *five = iota(3, (int64_t[]){1, 1, 5});
  expect_values_tol(kiln_pad(five, 2, (int64_t[]){-1, 2}, KILN_PAD_CIRCULAR, 0), (double[]){1, 2, 3, 4, 1, 2}, 6, 0);
  expect_values_tol(kiln_pad(five, 2, (int64_t[]){-5, 1}, KILN_PAD_REFLECT, 0), (double[]){3}, 1, 0);
  expect_values_tol(kiln_pad(five, 2, (int64_t[]){0, 5}, KILN_PAD_REPLICATE, 0),
                    (double[]){0, 1, 2, 3, 4, 4, 4, 4, 4, 4}, 10, 0);
  /* non-contiguous input: a transpose */
  kiln_tensor *t = kiln_transpose(iota(3, (int64_t[]){1, 4, 3}), 1, 2); /* [1, 3, 4] */
  kiln_tensor *a = kiln_pad(t, 2, (int64_t[]){1, 2}, KILN_PAD_REFLECT, 0);
  kiln_tensor *b = kiln_pad(kiln_contiguous(t), 2, (int64_t[]){1, 2}, KILN_PAD_REFLECT, 0);
  double va[21], vb[21];
  assert_int_equal(kiln_read(a, va, sizeof va), KILN_OK);
  assert_int_equal(kiln_read(b, vb, sizeof vb), KILN_OK);
  assert_memory_equal(va, vb, sizeof va);
  assert_float_equal(va[0], 3, 0); /* t[0, 0, :] = 0, 3, 6, 9: reflect(1) starts with 3 */
  kiln_scope_end();
  expect_no_error();
}

static void pad_errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(3, (int64_t[]){1, 1, 5});
  assert_null(kiln_pad(x, 3, (int64_t[]){1, 1, 1}, KILN_PAD_CONSTANT, 0));
  expect_error(KILN_ERR_ARG, "kiln_pad", "divisible by 2", NULL);
  assert_null(kiln_pad(x, 8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1}, KILN_PAD_CONSTANT, 0));
  expect_error(KILN_ERR_ARG, "kiln_pad", "too large", NULL);
  assert_null(kiln_pad(x, 2, (int64_t[]){5, 0}, KILN_PAD_REFLECT, 0));
  expect_error(KILN_ERR_ARG, "kiln_pad", "less than its size", NULL);
  assert_null(kiln_pad(x, 2, (int64_t[]){6, 0}, KILN_PAD_CIRCULAR, 0));
  expect_error(KILN_ERR_ARG, "kiln_pad", "more than once", NULL);
  assert_null(kiln_pad(x, 2, (int64_t[]){1, 1}, KILN_PAD_REFLECT, 1.5));
  expect_error(KILN_ERR_ARG, "kiln_pad", "doesn't take a value", NULL);
  assert_non_null(kiln_pad(x, 4, (int64_t[]){1, 1, 0, 0}, KILN_PAD_REPLICATE, 0)); /* 2-D padding of [C, H, W] */
  assert_null(kiln_pad(kiln_view(x, 1, (int64_t[]){5}), 2, (int64_t[]){1, 1}, KILN_PAD_REPLICATE, 0));
  expect_error(KILN_ERR_UNSUPPORTED, "kiln_pad", "replicate", NULL);
  assert_null(kiln_pad(kiln_view(x, 2, (int64_t[]){1, 5}), 2, (int64_t[]){1, 1}, KILN_PAD_CIRCULAR, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_pad", "circular", NULL);
  assert_null(kiln_pad(x, 2, (int64_t[]){-3, -2}, KILN_PAD_REPLICATE, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_pad", "empty output", NULL);
  assert_null(kiln_pad(x, 2, (int64_t[]){-3, -3}, KILN_PAD_CONSTANT, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_pad", "output size -1", NULL);
  expect_sizes(kiln_pad(x, 2, (int64_t[]){-3, -2}, KILN_PAD_CONSTANT, 0), 3, (int64_t[]){1, 1, 0});
  assert_null(kiln_pad(x, 2, (int64_t[]){-5, 1}, KILN_PAD_CIRCULAR, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_pad", "crops every element", NULL);
  assert_null(kiln_pad(x, 2, (int64_t[]){1, 1}, (kiln_pad_mode)9, 0));
  expect_error(KILN_ERR_ARG, "kiln_pad", "unknown mode", NULL);
  assert_null(kiln_pad(NULL, 2, (int64_t[]){1, 1}, KILN_PAD_CONSTANT, 0));
  expect_error(KILN_ERR_ARG, "kiln_pad", NULL);
  kiln_scope_end();
}

/* --------------------------------------------------------------- pools */

static void pool_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(4, (int64_t[]){1, 1, 5, 5});
  kiln_tensor *y = kiln_max_pool(x, 2, (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, NULL, true);
  expect_sizes(y, 4, (int64_t[]){1, 1, 3, 3});
  expect_values_tol(y, (double[]){6, 8, 9, 16, 18, 19, 21, 23, 24}, 9, 0);
  y = kiln_max_pool(x, 2, (int64_t[]){2, 2}, NULL, NULL, NULL, true); /* the last window hangs past the input */
  expect_values_tol(y, (double[]){6, 8, 9, 16, 18, 19, 21, 23, 24}, 9, 0);
  y = kiln_max_pool(x, 2, (int64_t[]){2, 2}, (int64_t[]){1, 1}, NULL, (int64_t[]){2, 2}, false);
  expect_values_tol(y, (double[]){12, 13, 14, 17, 18, 19, 22, 23, 24}, 9, 0);
  y = kiln_avg_pool(x, 2, (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, true, true);
  expect_values_tol(y, (double[]){4.0 / 3, 3, 8.0 / 3, 7, 12, 9, 8, 13, 28.0 / 3}, 9, 1e-12);
  y = kiln_avg_pool(x, 2, (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, true, false);
  expect_values_tol(y, (double[]){3, 4.5, 6, 10.5, 12, 13.5, 18, 19.5, 21}, 9, 1e-12);
  /* 1-D, no batch dim: [C, L] */
  kiln_tensor *l = iota(2, (int64_t[]){1, 5});
  y = kiln_avg_pool(l, 1, (int64_t[]){2}, NULL, NULL, true, true);
  expect_sizes(y, 2, (int64_t[]){1, 3});
  expect_values_tol(y, (double[]){0.5, 2.5, 4}, 3, 0);
  expect_values_tol(kiln_avg_pool(l, 1, (int64_t[]){3}, (int64_t[]){2}, (int64_t[]){1}, true, true),
                    (double[]){1.0 / 3, 2, 7.0 / 3}, 3, 1e-12);
  expect_values_tol(kiln_avg_pool(l, 1, (int64_t[]){3}, (int64_t[]){2}, (int64_t[]){1}, true, false),
                    (double[]){0.5, 2, 3.5}, 3, 1e-12);
  /* 3-D */
  kiln_tensor *c = iota(5, (int64_t[]){1, 1, 3, 3, 3});
  expect_values_tol(kiln_avg_pool(c, 3, (int64_t[]){2, 2, 2}, NULL, (int64_t[]){1, 1, 1}, false, true),
                    (double[]){0, 0.375, 1.125, 3, 3.375, 7.5, 9, 19.5}, 8, 1e-12);
  kiln_tensor *sign = kiln_view(make(1, (int64_t[]){3}, (double[]){1, -1, 1}), 3, (int64_t[]){3, 1, 1});
  kiln_tensor *c3 = kiln_mul(kiln_view(c, 4, (int64_t[]){1, 3, 3, 3}), sign); /* [C, D, H, W] */
  expect_values_tol(kiln_max_pool(c3, 3, (int64_t[]){2, 2, 2}, (int64_t[]){1, 1, 1}, NULL, NULL, false),
                    (double[]){4, 5, 7, 8, 22, 23, 25, 26}, 8, 0);
  /* NaN propagates */
  kiln_tensor *n = make(3, (int64_t[]){1, 1, 5}, (double[]){1, NAN, 3, 7, 2});
  expect_values_tol(kiln_max_pool(n, 1, (int64_t[]){2}, NULL, NULL, NULL, false), (double[]){NAN, 7}, 2, 0);
  /* F32 and F16 keep their dtype */
  y = kiln_avg_pool(kiln_to_dtype(x, KILN_F16), 2, (int64_t[]){2, 2}, NULL, NULL, false, true);
  assert_int_equal(kiln_dtype_of(y), KILN_F16);
  expect_values_tol(y, (double[]){3, 5, 13, 15}, 4, 0);
  y = kiln_max_pool(kiln_to_dtype(x, KILN_F32), 2, (int64_t[]){2, 2}, NULL, NULL, NULL, false);
  assert_int_equal(kiln_dtype_of(y), KILN_F32);
  expect_values_tol(y, (double[]){6, 8, 16, 18}, 4, 0);
  /* non-contiguous input (a transpose: spatial dims that do not merge) */
  kiln_tensor *t = kiln_transpose(iota(4, (int64_t[]){2, 3, 5, 6}), 2, 3);
  kiln_tensor *tc = kiln_contiguous(t);
  for (int k = 0; k < 2; k++) {
    kiln_tensor *a = k ? kiln_max_pool(t, 2, (int64_t[]){3, 2}, (int64_t[]){2, 1}, (int64_t[]){1, 0}, NULL, true)
                       : kiln_avg_pool(t, 2, (int64_t[]){3, 2}, (int64_t[]){2, 1}, (int64_t[]){1, 0}, true, false);
    kiln_tensor *b = k ? kiln_max_pool(tc, 2, (int64_t[]){3, 2}, (int64_t[]){2, 1}, (int64_t[]){1, 0}, NULL, true)
                       : kiln_avg_pool(tc, 2, (int64_t[]){3, 2}, (int64_t[]){2, 1}, (int64_t[]){1, 0}, true, false);
    double va[256], vb[256];
    assert_int_equal(kiln_numel(a), 2 * 3 * 4 * 4);
    assert_int_equal(kiln_read(a, va, sizeof va), KILN_OK);
    assert_int_equal(kiln_read(b, vb, sizeof vb), KILN_OK);
    for (int i = 0; i < 96; i++) assert_float_equal(va[i], vb[i], 1e-12);
  }
  kiln_scope_end();
  expect_no_error();
}

static void pool_errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = iota(4, (int64_t[]){1, 1, 4, 4});
  int64_t k2[2] = {2, 2};
  assert_null(kiln_max_pool(x, 2, k2, NULL, (int64_t[]){2, 0}, NULL, false));
  expect_error(KILN_ERR_ARG, "kiln_max_pool", "at most half", NULL);
  assert_null(kiln_avg_pool(x, 2, k2, NULL, (int64_t[]){-1, 0}, false, true));
  expect_error(KILN_ERR_ARG, "kiln_avg_pool", "padding", NULL);
  assert_null(kiln_max_pool(x, 2, (int64_t[]){5, 5}, NULL, NULL, NULL, false));
  expect_error(KILN_ERR_SHAPE, "kiln_max_pool", "too small", NULL);
  assert_null(kiln_max_pool(x, 2, k2, (int64_t[]){0, 1}, NULL, NULL, false));
  expect_error(KILN_ERR_ARG, "kiln_max_pool", "stride", NULL);
  assert_null(kiln_max_pool(x, 2, k2, NULL, NULL, (int64_t[]){1, 0}, false));
  expect_error(KILN_ERR_ARG, "kiln_max_pool", "dilation", NULL);
  assert_null(kiln_max_pool(x, 2, (int64_t[]){0, 2}, NULL, NULL, NULL, false));
  expect_error(KILN_ERR_ARG, "kiln_max_pool", "kernel", NULL);
  assert_null(kiln_max_pool(x, 4, k2, NULL, NULL, NULL, false));
  expect_error(KILN_ERR_ARG, "kiln_max_pool", "nd 4", NULL);
  assert_null(kiln_max_pool(x, 1, k2, NULL, NULL, NULL, false));
  expect_error(KILN_ERR_SHAPE, "kiln_max_pool", "[1, 1, 4, 4]", NULL);
  assert_null(kiln_avg_pool(kiln_view(x, 1, (int64_t[]){16}), 1, k2, NULL, NULL, false, true));
  expect_error(KILN_ERR_SHAPE, "kiln_avg_pool", NULL);
  assert_null(kiln_max_pool(kiln_to_dtype(x, KILN_I64), 2, k2, NULL, NULL, NULL, false));
  expect_error(KILN_ERR_DTYPE, "kiln_max_pool", "float", NULL);
  assert_null(kiln_max_pool(kiln_narrow(x, 1, 0, 0), 2, k2, NULL, NULL, NULL, false));
  expect_error(KILN_ERR_SHAPE, "kiln_max_pool", "non-empty", NULL);
  /* an empty batch is fine */
  expect_sizes(kiln_max_pool(kiln_narrow(x, 0, 0, 0), 2, k2, NULL, NULL, NULL, false), 4, (int64_t[]){0, 1, 2, 2});
  assert_null(kiln_max_pool(NULL, 2, k2, NULL, NULL, NULL, false));
  expect_error(KILN_ERR_ARG, "kiln_max_pool", NULL);
  kiln_scope_end();
}

/* Kernels run to force y (its inputs realized). */
static int kernels(kiln_tensor *y) {
  assert_non_null(y);
  kiln_profile_begin();
  assert_int_equal(kiln_realize(y), KILN_OK);
  kiln_profile_end();
  return kiln_profile_count();
}

/* max pooling without padding: the choice (an elementwise chain over the
 * taps), the masked sum over the kernel dims, and its division by c
 * (nn/pooling.c select_sum): 3 kernels; avg pooling: one. With fusion on
 * (the KILN_FUSE=0 run checks nothing here). */
static void pool_kernels(void **state) {
  (void)state;
  const char *e = getenv("KILN_FUSE");
  if (e && strcmp(e, "0") == 0) skip();
  kiln_scope_begin();
  kiln_tensor *x = kiln_randn(KILN_F32, 4, (int64_t[]){4, 8, 16, 16});
  assert_int_equal(kiln_realize(x), KILN_OK);
  assert_int_equal(kernels(kiln_max_pool(x, 2, (int64_t[]){2, 2}, NULL, NULL, NULL, false)), 3);
  assert_int_equal(kernels(kiln_avg_pool(x, 2, (int64_t[]){2, 2}, NULL, NULL, false, true)), 1);
  kiln_scope_end();
}

/* ----------------------------------------------------- max_pool routing */

/* d sum(max_pool(x) * 1) / dx for a 1-D pool of x [1, 1, n]. */
static void expect_routing(int64_t n, const double *x, int64_t k, int64_t s, int64_t p, const double *want) {
  kiln_scope_begin();
  kiln_tensor *t = make(3, (int64_t[]){1, 1, n}, x), *g;
  kiln_tensor *y = kiln_sum(kiln_max_pool(t, 1, &k, &s, &p, NULL, false), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &t, 1, &g), KILN_OK);
  expect_values_tol(g, want, n, 0);
  kiln_scope_end();
}

static void max_pool_routing(void **state) {
  (void)state;
  expect_routing(4, (double[]){2, 2, 1, 2}, 4, 4, 0, (double[]){1, 0, 0, 0});       /* first maximum */
  expect_routing(5, (double[]){1, NAN, 3, NAN, 2}, 5, 5, 0, (double[]){0, 0, 0, 1, 0}); /* the last NaN */
  expect_routing(3, (double[]){-INFINITY, -INFINITY, 1}, 2, 2, 1, (double[]){1, 0, 1}); /* an input element, not padding */
  expect_routing(6, (double[]){0, 0, 0, 0, 0, 0}, 3, 1, 1, (double[]){2, 1, 1, 1, 1, 0});
  /* dilation 2: the only window holds padding only (-inf, no gradient;
   * Torch 1.13 writes out of bounds here) */
  kiln_scope_begin();
  kiln_tensor *one = make(3, (int64_t[]){1, 1, 1}, (double[]){4}), *g1;
  kiln_tensor *m = kiln_max_pool(one, 1, (int64_t[]){3}, NULL, (int64_t[]){1}, (int64_t[]){2}, true);
  expect_values_tol(m, (double[]){-INFINITY}, 1, 0);
  kiln_tensor *s = kiln_sum(m, 0, NULL, false);
  assert_int_equal(kiln_grad(&s, NULL, 1, &one, 1, &g1), KILN_OK);
  expect_values_tol(g1, (double[]){0}, 1, 0);
  kiln_scope_end();
  /* 2-D: zeros after a relu; each 2x2 window's first element (row-major) */
  kiln_scope_begin();
  kiln_tensor *x = make(4, (int64_t[]){1, 1, 2, 4}, (double[]){-1, 0, -3, -2, 0, 5, -1, -1}), *g;
  kiln_tensor *y = kiln_sum(kiln_max_pool(kiln_relu(x), 2, (int64_t[]){2, 2}, NULL, NULL, NULL, false), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){0, 0, 0, 0, 0, 1, 0, 0}, 8, 0); /* relu's gradient is 0 at 0; 5 wins */
  kiln_tensor *z = make(4, (int64_t[]){1, 1, 2, 4}, (double[]){0, 0, 1, 1, 0, 0, 0, 1});
  y = kiln_sum(kiln_max_pool(z, 2, (int64_t[]){2, 2}, NULL, NULL, NULL, false), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &z, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){1, 0, 1, 0, 0, 0, 0, 0}, 8, 0);
  kiln_scope_end();
  expect_no_error();
}

/* d sum(max_pool(x)) / dx for x [1, 1, n] and a 1-D kernel of k taps
 * (stride k): past 32 taps the choice takes nn/pooling.c's key/amin
 * fallback instead of the chain; both must route the same. */
static void routing_both_paths(int64_t k) {
  double x[80], want[80];
  int64_t n = 2 * k;
  for (int64_t i = 0; i < n; i++) x[i] = (double)(i % 3), want[i] = 0; /* ties: 2 every third element */
  want[2] = 1, want[k + (k % 3 == 0 ? 2 : k % 3 == 1 ? 1 : 0)] = 1;    /* each window's first 2 */
  expect_routing(n, x, k, k, 0, want);
  for (int64_t i = 0; i < n; i++) want[i] = 0;
  x[1] = NAN, x[k - 2] = NAN, x[k + 3] = -INFINITY;
  want[k - 2] = 1; /* the last NaN of window 0 */
  want[k + (k % 3 == 0 ? 2 : k % 3 == 1 ? 1 : 0)] = 1;
  expect_routing(n, x, k, k, 0, want);
  for (int64_t i = 0; i < n; i++) x[i] = -INFINITY, want[i] = 0;
  want[0] = want[k] = 1; /* only -inf: the first element (Torch's initial index) */
  expect_routing(n, x, k, k, 0, want);
}

/* The sign of a zero maximum is Torch's (the first zero among equal
 * zeros), on the chain and on the fallback. */
static void expect_zero_signs(int64_t k) {
  double x[80];
  int64_t n = 2 * k;
  for (int64_t i = 0; i < n; i++) x[i] = i % 2 ? -0.0 : 0.0;
  x[k] = 0.0, x[k + 1] = -0.0; /* window 0 starts with -0, window 1 with +0 */
  x[0] = -INFINITY;            /* a -0 after -inf is still the first maximum */
  kiln_scope_begin();
  kiln_tensor *t = make(3, (int64_t[]){1, 1, n}, x);
  kiln_tensor *y = kiln_max_pool(t, 1, &k, NULL, NULL, NULL, false);
  double v0, v1;
  assert_int_equal(kiln_get_f64(y, (int64_t[]){0, 0, 0}, &v0), KILN_OK);
  assert_int_equal(kiln_get_f64(y, (int64_t[]){0, 0, 1}, &v1), KILN_OK);
  assert_true(v0 == 0 && signbit(v0));
  assert_true(v1 == 0 && !signbit(v1));
  kiln_scope_end();
}

static void max_pool_paths(void **state) {
  (void)state;
  routing_both_paths(4);
  routing_both_paths(33);
  routing_both_paths(40);
  expect_zero_signs(3);
  expect_zero_signs(34);
  expect_no_error();
}

/* ------------------------------------------------------- gradient checks */

typedef struct pool_case {
  int kind; /* 0 max, 1 avg, 2 pad */
  int nd;
  int64_t k[3], s[3], p[3], d[3];
  bool ceil, include;
  kiln_pad_mode mode;
  int n_pad;
  int64_t pads[6];
  bool transpose; /* read the input through a transpose of its last two dims */
} pool_case;

static kiln_tensor *pool_fn(kiln_tensor *const *x, void *ctx) {
  const pool_case *c = ctx;
  kiln_tensor *in = c->transpose ? kiln_transpose(x[0], -1, -2) : x[0];
  switch (c->kind) {
  case 0: return kiln_max_pool(in, c->nd, c->k, c->s, c->p, c->d, c->ceil);
  case 1: return kiln_avg_pool(in, c->nd, c->k, c->s, c->p, c->ceil, c->include);
  default: return kiln_pad(in, c->n_pad, c->pads, c->mode, c->mode == KILN_PAD_CONSTANT ? 1.5 : 0);
  }
}

static void pool_grads(void **state) {
  (void)state;
  uint64_t seed = 5;
  const pool_case cases[] = {
      {.kind = 0, .nd = 2, .k = {2, 2}, .s = {2, 2}, .p = {0, 0}, .d = {1, 1}},
      {.kind = 0, .nd = 2, .k = {3, 2}, .s = {2, 1}, .p = {1, 1}, .d = {1, 2}, .ceil = true, .transpose = true},
      {.kind = 0, .nd = 1, .k = {3}, .s = {2}, .p = {1}, .d = {1}, .ceil = true},
      {.kind = 0, .nd = 3, .k = {2, 2, 2}, .s = {1, 2, 1}, .p = {1, 0, 1}, .d = {1, 1, 1}},
      {.kind = 0, .nd = 2, .k = {5, 4}, .s = {1, 1}, .p = {2, 1}, .d = {1, 1}, .ceil = true}, /* overlapping: gather */
      {.kind = 0, .nd = 2, .k = {5, 7}, .s = {5, 7}, .p = {2, 1}, .d = {1, 1}, .ceil = true}, /* 35 taps: key/amin */
      {.kind = 0, .nd = 3, .k = {3, 2, 2}, .s = {3, 2, 2}, .p = {0, 0, 0}, .d = {1, 1, 1}},
      {.kind = 1, .nd = 2, .k = {3, 3}, .s = {2, 2}, .p = {1, 1}, .ceil = true, .include = true},
      {.kind = 1, .nd = 2, .k = {3, 2}, .s = {2, 1}, .p = {1, 0}, .ceil = true, .transpose = true},
      {.kind = 1, .nd = 1, .k = {2}, .s = {1}, .p = {1}, .include = false},
      {.kind = 1, .nd = 3, .k = {2, 2, 2}, .s = {2, 2, 2}, .p = {1, 1, 0}, .include = true},
      {.kind = 2, .mode = KILN_PAD_CONSTANT, .n_pad = 4, .pads = {2, -1, 1, 1}},
      {.kind = 2, .mode = KILN_PAD_REFLECT, .n_pad = 4, .pads = {2, 1, 1, 3}, .transpose = true},
      {.kind = 2, .mode = KILN_PAD_REPLICATE, .n_pad = 4, .pads = {3, 1, -1, 2}},
      {.kind = 2, .mode = KILN_PAD_CIRCULAR, .n_pad = 4, .pads = {2, 4, 1, -1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const pool_case *c = &cases[i];
    int nd = c->kind == 2 ? 2 : c->nd;
    int64_t sizes[5] = {2, 2, 5, 4, 3};
    if (nd == 3) sizes[2] = 3, sizes[3] = 3, sizes[4] = 4;
    if (c->transpose) { /* the function reads the transpose */
      int64_t t = sizes[1 + nd];
      sizes[1 + nd] = sizes[nd];
      sizes[nd] = t;
    }
    gc_input in = gc_in(&seed, 2 + nd, sizes, -2, 2);
    char name[64];
    snprintf(name, sizeof name, "pool case %zu", i);
    gc_check(name, pool_fn, (void *)c, &in, 1, seed);
  }
}

/* ---------------------------------------------------------- batch_norm */

static void batch_norm_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = make(3, (int64_t[]){3, 2, 1}, (double[]){1, 2, 3, 5, 0, -1});
  kiln_tensor *w = make(1, (int64_t[]){2}, (double[]){2, 1}), *b = make(1, (int64_t[]){2}, (double[]){0, 1});
  kiln_tensor *rm = kiln_to_dtype(make(1, (int64_t[]){2}, (double[]){0.5, -0.5}), KILN_F32);
  kiln_tensor *rv = kiln_to_dtype(make(1, (int64_t[]){2}, (double[]){2, 3}), KILN_F32);
  kiln_tensor *rm_view = kiln_view(rm, 2, (int64_t[]){1, 2}); /* stats of any shape with C elements */
  kiln_tensor *y = kiln_batch_norm(x, rm_view, rv, w, b, true, 0.2, 1e-5);
  expect_values_tol(y, (double[]){-0.5345208644866943, 1, 2.6726038455963135, 2.2247438430786133, -2.1380832195281982,
                                  -0.22474384307861328},
                    6, 1e-6);
  expect_values_tol(rm, (double[]){2.0 / 3, 0}, 2, 1e-6);
  expect_values_tol(rv, (double[]){2.066666603088379, 4.200000286102295}, 2, 1e-6);
  assert_int_equal(kiln_dtype_of(rm), KILN_F32);
  y = kiln_batch_norm(x, rm, rv, w, b, false, 0.2, 1e-5);
  expect_values_tol(y, (double[]){0.46373772621154785, 1.9758988618850708, 3.246164321899414, 3.4397470951080322,
                                  -0.9274755716323853, 0.5120505690574646},
                    6, 1e-6);
  expect_values_tol(rm, (double[]){2.0 / 3, 0}, 2, 1e-6); /* eval leaves the stats alone */
  /* training without running stats, weight or bias; F16 keeps its dtype */
  y = kiln_batch_norm(kiln_to_dtype(x, KILN_F16), NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
  assert_int_equal(kiln_dtype_of(y), KILN_F16);
  expect_values_tol(y, (double[]){-0.2673, -0.0, 1.3363, 1.2247, -1.0690, -1.2247}, 6, 2e-3);
  kiln_scope_end();
  expect_no_error();
}

static void batch_norm_errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F64, 2, (int64_t[]){2, 3});
  kiln_tensor *c3 = kiln_zeros(KILN_F64, 1, (int64_t[]){3}), *c4 = kiln_zeros(KILN_F64, 1, (int64_t[]){4});
  assert_null(kiln_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5));
  expect_error(KILN_ERR_ARG, "kiln_batch_norm", "running_mean", NULL);
  assert_null(kiln_batch_norm(x, c4, c3, NULL, NULL, false, 0.1, 1e-5));
  expect_error(KILN_ERR_SHAPE, "kiln_batch_norm", "running_mean should contain 3 elements", NULL);
  assert_null(kiln_batch_norm(x, NULL, NULL, c3, c4, true, 0.1, 1e-5));
  expect_error(KILN_ERR_SHAPE, "kiln_batch_norm", "bias", NULL);
  assert_null(kiln_batch_norm(kiln_narrow(x, 0, 0, 1), NULL, NULL, NULL, NULL, true, 0.1, 1e-5));
  expect_error(KILN_ERR_SHAPE, "kiln_batch_norm", "more than 1 value per channel", NULL);
  assert_null(kiln_batch_norm(kiln_view(x, 1, (int64_t[]){6}), NULL, NULL, NULL, NULL, true, 0.1, 1e-5));
  expect_error(KILN_ERR_SHAPE, "kiln_batch_norm", "at least 2 dims", NULL);
  assert_null(kiln_batch_norm(kiln_to_dtype(x, KILN_I32), NULL, NULL, NULL, NULL, true, 0.1, 1e-5));
  expect_error(KILN_ERR_DTYPE, "kiln_batch_norm", NULL);
  kiln_tensor *rep = kiln_expand(kiln_zeros(KILN_F64, 1, (int64_t[]){1}), 1, (int64_t[]){3});
  assert_null(kiln_batch_norm(x, rep, c3, NULL, NULL, true, 0.1, 1e-5));
  expect_error(KILN_ERR_ARG, "kiln_batch_norm", NULL);
  assert_null(kiln_batch_norm(x, NULL, NULL, NULL, NULL, true, NAN, 1e-5));
  expect_error(KILN_ERR_ARG, "kiln_batch_norm", "finite", NULL);
  kiln_scope_end();
}

static kiln_tensor *bn_fn(kiln_tensor *const *x, void *ctx) {
  bool training = *(const bool *)ctx;
  kiln_tensor *rm = kiln_full(KILN_F64, 1, (int64_t[]){3}, 0.25), *rv = kiln_full(KILN_F64, 1, (int64_t[]){3}, 1.5);
  return kiln_batch_norm(kiln_transpose(x[0], 2, 3), rm, rv, x[1], x[2], training, 0.1, 1e-3);
}

static void batch_norm_grads(void **state) {
  (void)state;
  uint64_t seed = 9;
  for (int training = 0; training < 2; training++) {
    gc_input in[3] = {gc_in(&seed, 4, (int64_t[]){2, 3, 3, 2}, -2, 2), gc_in(&seed, 1, (int64_t[]){3}, 0.5, 2),
                      gc_in(&seed, 1, (int64_t[]){3}, -1, 1)};
    bool t = training;
    gc_check(training ? "batch_norm training" : "batch_norm eval", bn_fn, &t, in, 3, seed);
  }
  /* the running-stat update is detached: sum(y) has gradient 0, so a
   * gradient through the new running_mean (momentum / N each) would show */
  kiln_scope_begin();
  kiln_tensor *x = kiln_randn(KILN_F64, 2, (int64_t[]){4, 3}), *rm = kiln_zeros(KILN_F64, 1, (int64_t[]){3}), *g;
  kiln_tensor *y = kiln_batch_norm(x, rm, NULL, NULL, NULL, true, 0.5, 1e-5);
  kiln_tensor *loss = kiln_add(kiln_sum(y, 0, NULL, false), kiln_sum(rm, 0, NULL, false));
  assert_int_equal(kiln_grad(&loss, NULL, 1, &x, 1, &g), KILN_OK);
  double gx[12];
  assert_int_equal(kiln_read(g, gx, sizeof gx), KILN_OK);
  for (int i = 0; i < 12; i++) assert_true(fabs(gx[i]) < 1e-9);
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(pad_values),        cmocka_unit_test(pad_errors),       cmocka_unit_test(pool_values),
      cmocka_unit_test(pool_errors),       cmocka_unit_test(pool_kernels),     cmocka_unit_test(max_pool_routing), cmocka_unit_test(max_pool_paths),
      cmocka_unit_test(pool_grads),        cmocka_unit_test(batch_norm_values), cmocka_unit_test(batch_norm_errors),
      cmocka_unit_test(batch_norm_grads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
