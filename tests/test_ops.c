/*
 * test_ops.c — elementwise ops and reductions on known values: Torch's
 * type promotion, broadcasting, integer division/remainder semantics,
 * reductions over dim sets with keepdim, and error messages.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"

#define expect_values expect_values_tol

static kiln_tensor *vec(kiln_dtype dt, int64_t n, const double *v) {
  kiln_tensor *d = kiln_from_data(KILN_F64, 1, &n, v);
  return kiln_to_dtype(d, dt);
}

static void promotion(void **state) {
  kiln_scope_begin();
  int64_t s3[] = {3};
  kiln_tensor *i32 = kiln_ones(KILN_I32, 1, s3), *u8 = kiln_ones(KILN_U8, 1, s3), *i8 = kiln_ones(KILN_I8, 1, s3);
  kiln_tensor *f16 = kiln_ones(KILN_F16, 1, s3), *bf16 = kiln_ones(KILN_BF16, 1, s3), *b = kiln_ones(KILN_BOOL, 1, s3);
  kiln_tensor *f64_0d = kiln_scalar(KILN_F64, 2), *i64_0d = kiln_scalar(KILN_I64, 2);
  assert_int_equal(kiln_dtype_of(kiln_add(u8, i8)), KILN_I16);
  assert_int_equal(kiln_dtype_of(kiln_add(f16, bf16)), KILN_F32);
  assert_int_equal(kiln_dtype_of(kiln_add(i32, f64_0d)), KILN_F64); /* higher category 0-d wins */
  assert_int_equal(kiln_dtype_of(kiln_add(i32, i64_0d)), KILN_I32); /* same category: tensor wins */
  assert_int_equal(kiln_dtype_of(kiln_add_scalar(i32, 2.5)), KILN_F32);
  assert_int_equal(kiln_dtype_of(kiln_add_scalar(i32, 2)), KILN_I32);
  assert_int_equal(kiln_dtype_of(kiln_add_scalar(b, 2)), KILN_I64);
  assert_int_equal(kiln_dtype_of(kiln_add_scalar(f16, 2.5)), KILN_F16);
  assert_int_equal(kiln_dtype_of(kiln_div(i32, i32)), KILN_F32);
  assert_int_equal(kiln_dtype_of(kiln_exp(u8)), KILN_F32);
  assert_int_equal(kiln_dtype_of(kiln_lt(i32, f16)), KILN_BOOL);
  assert_int_equal(kiln_dtype_of(kiln_add(b, b)), KILN_BOOL);
  assert_int_equal(kiln_set_default_dtype(KILN_F64), KILN_OK);
  assert_int_equal(kiln_dtype_of(kiln_sqrt(i32)), KILN_F64);
  assert_int_equal(kiln_set_default_dtype(KILN_F32), KILN_OK);
  kiln_scope_end();
}

static void broadcasting(void **state) {
  kiln_scope_begin();
  kiln_tensor *col = kiln_view(kiln_arange(KILN_F32, 0, 3, 1), 2, (int64_t[]){3, 1});
  kiln_tensor *row = kiln_arange(KILN_F32, 0, 20, 10);
  kiln_tensor *s = kiln_add(col, row);
  assert_int_equal(kiln_dim(s), 2);
  assert_int_equal(kiln_size(s, 0), 3);
  assert_int_equal(kiln_size(s, 1), 2);
  expect_values(s, (double[]){0, 10, 1, 11, 2, 12}, 6, 0);
  kiln_clear_error();
  assert_null(kiln_add(kiln_zeros(KILN_F32, 2, (int64_t[]){3, 4}), kiln_zeros(KILN_F32, 1, (int64_t[]){5})));
  assert_int_equal(kiln_last_status(), KILN_ERR_SHAPE);
  assert_string_equal(kiln_last_error(), "kiln_add: sizes [3, 4] and [5] cannot be broadcast");
  /* NULL propagates, the first error is kept */
  assert_null(kiln_exp(kiln_mul(NULL, row)));
  assert_string_equal(kiln_last_error(), "kiln_add: sizes [3, 4] and [5] cannot be broadcast");
  kiln_clear_error();
  assert_null(kiln_exp(NULL));
  assert_int_equal(kiln_last_status(), KILN_ERR_ARG);
  assert_non_null(strstr(kiln_last_error(), "kiln_exp"));
  kiln_clear_error();
  kiln_scope_end();
}

static void integer_semantics(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = vec(KILN_I32, 6, (double[]){7, -7, 7, -7, 5, INT32_MIN});
  kiln_tensor *b = vec(KILN_I32, 6, (double[]){2, 2, -2, -2, 0, -1});
  expect_values(kiln_fmod(a, b), (double[]){1, -1, 1, -1, 0, 0}, 6, 0);
  expect_values(kiln_remainder(a, b), (double[]){1, 1, -1, -1, 0, 0}, 6, 0);
  expect_values(kiln_div(a, b), (double[]){3.5, -3.5, -3.5, 3.5, INFINITY, 2147483648.0}, 6, 0);
  expect_values(kiln_pow(vec(KILN_I64, 3, (double[]){2, 3, -2}), vec(KILN_I64, 3, (double[]){10, 3, 3})),
                (double[]){1024, 27, -8}, 3, 0);
  kiln_tensor *f = vec(KILN_F32, 4, (double[]){5.5, -5.5, 5.5, -5.5});
  kiln_tensor *g = vec(KILN_F32, 4, (double[]){2, 2, -2, -2});
  expect_values(kiln_remainder(f, g), (double[]){1.5, 0.5, -0.5, -1.5}, 4, 0);
  expect_values(kiln_fmod(f, g), (double[]){1.5, -1.5, 1.5, -1.5}, 4, 0);
  kiln_scope_end();
}

static void unary_values(void **state) {
  kiln_scope_begin();
  double xs[] = {-2.5, -0.5, 0.5, 1.5, 2.5};
  kiln_tensor *x = vec(KILN_F64, 5, xs);
  expect_values(kiln_round(x), (double[]){-2, -0., 0, 2, 2}, 5, 0);
  expect_values(kiln_floor(x), (double[]){-3, -1, 0, 1, 2}, 5, 0);
  expect_values(kiln_ceil(x), (double[]){-2, -0., 1, 2, 3}, 5, 0);
  expect_values(kiln_trunc(x), (double[]){-2, 0, 0, 1, 2}, 5, 0);
  expect_values(kiln_sign(x), (double[]){-1, -1, 1, 1, 1}, 5, 0);
  expect_values(kiln_relu(x), (double[]){0, 0, 0.5, 1.5, 2.5}, 5, 0);
  double want[5];
  for (int i = 0; i < 5; i++) want[i] = 0.5 * xs[i] * (1 + erf(xs[i] / sqrt(2)));
  expect_values(kiln_gelu(x), want, 5, 1e-12);
  for (int i = 0; i < 5; i++) want[i] = xs[i] / (1 + exp(-xs[i]));
  expect_values(kiln_silu(x), want, 5, 1e-12);
  for (int i = 0; i < 5; i++) want[i] = tanh(xs[i]);
  expect_values(kiln_tanh(x), want, 5, 1e-12);
  expect_values(kiln_clamp(x, -1, 1), (double[]){-1, -0.5, 0.5, 1, 1}, 5, 0);
  expect_values(kiln_clamp(x, NAN, 0), (double[]){-2.5, -0.5, 0, 0, 0}, 5, 0);
  expect_values(kiln_abs(vec(KILN_I8, 3, (double[]){-128, -3, 4})), (double[]){-128, 3, 4}, 3, 0);
  expect_values(kiln_logical_not(x), (double[]){0, 0, 0, 0, 0}, 5, 0);
  expect_values(kiln_maximum(x, kiln_scalar(KILN_F64, NAN)), (double[]){NAN, NAN, NAN, NAN, NAN}, 5, 0);
  kiln_tensor *c = kiln_gt_scalar(x, 0);
  assert_int_equal(kiln_dtype_of(c), KILN_BOOL);
  expect_values(kiln_where(c, x, kiln_scalar(KILN_I32, -1)), (double[]){-1, -1, 0.5, 1.5, 2.5}, 5, 0);
  kiln_scope_end();
}

static void reductions(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_view(kiln_arange(KILN_I32, 0, 24, 1), 3, (int64_t[]){2, 3, 4});
  kiln_tensor *s = kiln_sum(x, 2, (int[]){0, -1}, false);
  assert_int_equal(kiln_dtype_of(s), KILN_I64);
  assert_int_equal(kiln_dim(s), 1);
  expect_values(s, (double[]){60, 92, 124}, 3, 0);
  kiln_tensor *k = kiln_sum(x, 1, (int[]){1}, true);
  assert_int_equal(kiln_dim(k), 3);
  assert_int_equal(kiln_size(k, 1), 1);
  expect_values(k, (double[]){12, 15, 18, 21, 48, 51, 54, 57}, 8, 0);
  expect_values(kiln_sum(x, 0, NULL, false), (double[]){276}, 1, 0);
  expect_values(kiln_amax(x, 1, (int[]){2}, false), (double[]){3, 7, 11, 15, 19, 23}, 6, 0);
  expect_values(kiln_amin(kiln_t(kiln_select(x, 0, 1)), 1, (int[]){0}, false), (double[]){12, 16, 20}, 3, 0);
  kiln_tensor *f = vec(KILN_F32, 6, (double[]){3, -1, 7, 7, NAN, 2});
  expect_values(kiln_argmax(vec(KILN_F32, 5, (double[]){3, -1, 7, 7, 2}), 0, false), (double[]){2}, 1, 0);
  expect_values(kiln_argmax(f, 0, false), (double[]){4}, 1, 0);
  expect_values(kiln_argmin(f, 0, false), (double[]){4}, 1, 0);
  expect_values(kiln_mean(kiln_to_dtype(x, KILN_F32), 1, (int[]){2}, false), (double[]){1.5, 5.5, 9.5, 13.5, 17.5, 21.5}, 6, 0);
  expect_values(kiln_prod(vec(KILN_I16, 4, (double[]){2, -3, 4, 5}), 0, NULL, false), (double[]){-120}, 1, 0);
  expect_values(kiln_all(vec(KILN_F32, 3, (double[]){1, NAN, -2}), 0, NULL, false), (double[]){1}, 1, 0);
  expect_values(kiln_any(kiln_zeros(KILN_I8, 1, (int64_t[]){4}), 0, NULL, false), (double[]){0}, 1, 0);
  /* empty: sum is 0, amax is an error */
  kiln_tensor *e = kiln_zeros(KILN_F32, 2, (int64_t[]){0, 3});
  expect_values(kiln_sum(e, 1, (int[]){0}, false), (double[]){0, 0, 0}, 3, 0);
  kiln_clear_error();
  assert_null(kiln_amax(e, 1, (int[]){0}, false));
  assert_int_equal(kiln_last_status(), KILN_ERR_SHAPE);
  kiln_clear_error();
  assert_null(kiln_sum(x, 2, (int[]){1, -2}, false));
  assert_int_equal(kiln_last_status(), KILN_ERR_ARG);
  kiln_clear_error();
  assert_null(kiln_mean(x, 0, NULL, false));
  assert_int_equal(kiln_last_status(), KILN_ERR_DTYPE);
  kiln_clear_error();
  /* fmod and remainder of bools: Torch implements neither */
  kiln_tensor *bt = kiln_ones(KILN_BOOL, 1, (int64_t[]){3});
  assert_null(kiln_fmod(bt, bt));
  expect_error(KILN_ERR_DTYPE, "kiln_fmod", "bool", NULL);
  assert_null(kiln_remainder(bt, bt));
  expect_error(KILN_ERR_DTYPE, "kiln_remainder", "bool", NULL);
  kiln_scope_end();
}

/* Reductions over leading dims with a wide unit-stride last dim take the
 * blocked column path: check it against sums computed here. */
static void column_reductions(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_view(kiln_arange(KILN_I32, 0, 3 * 5 * 32, 1), 3, (int64_t[]){3, 5, 32});
  kiln_tensor *s = kiln_sum(kiln_mul_scalar(x, 3), 2, (int[]){0, 1}, false);
  kiln_tensor *m = kiln_amax(kiln_neg(x), 1, (int[]){1}, false);
  kiln_tensor *f = kiln_sum(kiln_to_dtype(x, KILN_F32), 1, (int[]){0}, true);
  double want_s[32], want_m[96], want_f[160];
  for (int j = 0; j < 32; j++) {
    double acc = 0;
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 5; b++) acc += 3.0 * (a * 160 + b * 32 + j);
    want_s[j] = acc;
  }
  for (int a = 0; a < 3; a++)
    for (int j = 0; j < 32; j++) want_m[a * 32 + j] = -(a * 160 + j);
  for (int b = 0; b < 5; b++)
    for (int j = 0; j < 32; j++) want_f[b * 32 + j] = 3.0 * (b * 32 + j) + 480;
  double got[160];
  assert_int_equal(kiln_read(kiln_to_dtype(s, KILN_F64), got, sizeof got), KILN_OK);
  for (int j = 0; j < 32; j++) assert_float_equal(got[j], want_s[j], 0);
  assert_int_equal(kiln_read(kiln_to_dtype(m, KILN_F64), got, sizeof got), KILN_OK);
  for (int j = 0; j < 96; j++) assert_float_equal(got[j], want_m[j], 0);
  assert_int_equal(kiln_size(f, 0), 1);
  assert_int_equal(kiln_read(kiln_to_dtype(f, KILN_F64), got, sizeof got), KILN_OK);
  for (int j = 0; j < 160; j++) assert_float_equal(got[j], want_f[j], 0);
  kiln_scope_end();
}

/* Column sums of random floats at widths taking 64, 32, 16 lanes: each
 * output is the sequential F64 sum of its column in row order, rounded
 * once to F32 (bit-exact); at width 40 (no lanes) within rounding. NaN
 * propagates through sum and amax. */
static void column_sums_in_row_order(void **state) {
  static const int64_t widths[] = {128, 96, 48, 40};
  for (int w = 0; w < 4; w++) {
    kiln_scope_begin();
    int64_t rows = 37, cols = widths[w];
    kiln_tensor *x = kiln_sub_scalar(kiln_mul_scalar(kiln_rand(KILN_F32, 2, (int64_t[]){rows, cols}), 1e4), 5e3);
    float *in = malloc(sizeof(float) * (size_t)(rows * cols)), got[128], mx[128];
    assert_int_equal(kiln_read(x, in, sizeof(float) * (size_t)(rows * cols)), KILN_OK);
    in[5 * cols + 3] = NAN;
    x = kiln_from_data(KILN_F32, 2, (int64_t[]){rows, cols}, in);
    assert_int_equal(kiln_read(kiln_sum(x, 1, (int[]){0}, false), got, sizeof(float) * (size_t)cols), KILN_OK);
    assert_int_equal(kiln_read(kiln_amax(x, 1, (int[]){0}, false), mx, sizeof(float) * (size_t)cols), KILN_OK);
    for (int64_t j = 0; j < cols; j++) {
      double acc = 0, m = -INFINITY;
      for (int64_t i = 0; i < rows; i++) {
        acc += in[i * cols + j];
        m = isnan(in[i * cols + j]) || isnan(m) ? NAN : fmax(m, in[i * cols + j]);
      }
      if (j == 3) {
        assert_true(isnan(got[j]) && isnan(mx[j]));
        continue;
      }
      if (cols % 16 == 0) assert_memory_equal(&got[j], &(float){(float)acc}, sizeof(float));
      else assert_float_equal(got[j], acc, 1e-6 * rows * 5e3); /* 40: the general path may reassociate */
      assert_float_equal(mx[j], m, 0);
    }
    free(in);
    kiln_scope_end();
  }
}

/* A transposed read over 64x96 runs in 32x32 tiles: every element right. */
static void tiled_transpose(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_view(kiln_arange(KILN_F64, 0, 96 * 64, 1), 2, (int64_t[]){96, 64});
  kiln_tensor *b = kiln_arange(KILN_F64, 0, 96, 1);
  kiln_tensor *y = kiln_add(kiln_t(a), kiln_mul_scalar(kiln_unsqueeze(b, 0), 1e6));
  static double got[64 * 96];
  assert_int_equal(kiln_read(y, got, sizeof got), KILN_OK);
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 96; j++) assert_float_equal(got[i * 96 + j], j * 64 + i + 1e6 * j, 0);
  kiln_scope_end();
}

/* Whole-tensor reductions of large tensors run in two stages. */
static void split_full_reductions(void **state) {
  kiln_scope_begin();
  int64_t n = INT64_C(1) << 18;
  kiln_tensor *x = kiln_view(kiln_arange(KILN_I64, 0, (double)n, 1), 3, (int64_t[]){64, 64, 64});
  kiln_tensor *s = kiln_sum(x, 0, NULL, false);
  assert_int_equal(kiln_dim(s), 0);
  assert_float_equal(kiln_item(s), (double)(n * (n - 1) / 2), 0);
  kiln_tensor *m = kiln_amax(kiln_t(kiln_view(x, 2, (int64_t[]){512, 512})), 0, NULL, true);
  assert_int_equal(kiln_dim(m), 2);
  assert_int_equal(kiln_size(m, 1), 1);
  assert_float_equal(kiln_item(m), (double)(n - 1), 0);
  kiln_tensor *f = kiln_sum(kiln_ones(KILN_F32, 1, (int64_t[]){INT64_C(1) << 20}), 0, NULL, false);
  assert_float_equal(kiln_item(f), 1048576.0, 0);
  kiln_scope_end();
}

/* Integers clamped in the tensor's dtype: [x] [n] stored as int64. */
static kiln_tensor *ints(kiln_dtype dt, int64_t n, const int64_t *x) {
  return kiln_to_dtype(kiln_from_data(KILN_I64, 1, &n, x), dt);
}

static void expect_ints(kiln_tensor *t, const int64_t *want, int64_t n, double lo, double hi) {
  assert_non_null(t);
  int64_t got[8];
  kiln_scope_begin();
  assert_int_equal(kiln_read(kiln_to_dtype(t, KILN_I64), got, sizeof got), KILN_OK);
  kiln_scope_end();
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("clamp(%s, %g, %g)[%lld] = %lld, want %lld", kiln_dtype_name(kiln_dtype_of(t)), lo, hi, (long long)i,
               (long long)got[i], (long long)want[i]);
}

/* An infinite bound is no bound; a finite bound past the dtype's range
 * clamps to the range (Torch's float result stored in the dtype); a NaN
 * bound is no bound (Kiln's documented choice: Torch 1.13 returns a float
 * tensor of NaN). Before the fix -inf/inf became 0 on every integer dtype. */
static void clamp_integer_bounds(void **state) {
  kiln_scope_begin();
  int64_t x3[] = {-6, 0, 6};
  kiln_tensor *i8 = ints(KILN_I8, 3, x3);
  expect_ints(kiln_clamp(i8, -INFINITY, 5), (int64_t[]){-6, 0, 5}, 3, -INFINITY, 5);
  expect_ints(kiln_clamp(i8, -INFINITY, INFINITY), (int64_t[]){-6, 0, 6}, 3, -INFINITY, INFINITY);
  expect_ints(kiln_clamp(i8, -1000, 1000), (int64_t[]){-6, 0, 6}, 3, -1000, 1000);
  expect_ints(kiln_clamp(i8, 1000, INFINITY), (int64_t[]){127, 127, 127}, 3, 1000, INFINITY);
  expect_ints(kiln_clamp(i8, NAN, -1000), (int64_t[]){-128, -128, -128}, 3, NAN, -1000);
  expect_ints(kiln_clamp(i8, -0.5, 2.7), (int64_t[]){0, 0, 2}, 3, -0.5, 2.7);
  expect_ints(kiln_clamp(i8, NAN, NAN), (int64_t[]){-6, 0, 6}, 3, NAN, NAN);

  const kiln_dtype dts[] = {KILN_U8, KILN_I8, KILN_I16, KILN_I32, KILN_I64};
  const double los[] = {-INFINITY, NAN, -1e30, -300, -5.5, 2.7, 1e30, INFINITY};
  const double his[] = {INFINITY, NAN, 1e30, 300, 5, -1e30, -INFINITY};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    kiln_dtype dt = dts[d];
    int bits = kiln_dtype_size(dt) * 8;
    long double max = dt == KILN_U8 ? 255.0L : ldexpl(1, bits - 1) - 1, min = dt == KILN_U8 ? 0 : -max - 1;
    int64_t x[5] = {(int64_t)min, dt == KILN_U8 ? 3 : -6, 0, 6, (int64_t)max};
    kiln_tensor *t = ints(dt, 5, x);
    for (size_t i = 0; i < sizeof los / sizeof los[0]; i++)
      for (size_t j = 0; j < sizeof his / sizeof his[0]; j++) {
        /* Torch's formula min(max(x, lo), hi) in exact arithmetic, then
         * stored in dt: truncated, saturated to the range */
        int64_t want[5];
        for (int e = 0; e < 5; e++) {
          long double r = x[e];
          if (!isnan(los[i]) && r < los[i]) r = los[i];
          if (!isnan(his[j]) && r > his[j]) r = his[j];
          r = r < min ? min : r > max ? max : truncl(r);
          want[e] = (int64_t)r;
        }
        kiln_scope_begin();
        expect_ints(kiln_clamp(t, los[i], his[j]), want, 5, los[i], his[j]);
        kiln_scope_end();
      }
  }
  assert_null(kiln_clamp(kiln_ones(KILN_BOOL, 1, (int64_t[]){2}), -INFINITY, INFINITY));
  expect_error(KILN_ERR_DTYPE, "kiln_clamp", "bool", NULL);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(promotion), cmocka_unit_test(broadcasting), cmocka_unit_test(integer_semantics),
      cmocka_unit_test(unary_values), cmocka_unit_test(reductions), cmocka_unit_test(column_reductions), cmocka_unit_test(column_sums_in_row_order),
      cmocka_unit_test(tiled_transpose), cmocka_unit_test(split_full_reductions),
      cmocka_unit_test(clamp_integer_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
