/*
 * test_creation_values.c — the values creation functions produce, read back
 * through the runtime and compared with values computed independently here:
 * constants in every dtype (cast rules), arange and linspace (Torch's
 * formulas; linspace F32 within 1 ulp of NumPy's, F64 bitwise Torch's),
 * rand/randn statistics and determinism, from_data round trips, from_blob zero-copy reads and
 * writes, storages, set_ and a growing resize_.
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

#define V(...) ((const int64_t[]){__VA_ARGS__})

static void expect_no_error(void) {
  if (kiln_last_status() != KILN_OK) fail_msg("unexpected error: %s", kiln_last_error());
}

/* Reads t (in its own dtype) into a malloc'ed buffer. */
static void *read_all(kiln_tensor *t) {
  size_t bytes = (size_t)kiln_numel(t) * kiln_dtype_size(kiln_dtype_of(t));
  void *p = malloc(bytes ? bytes : 1);
  assert_non_null(p);
  if (kiln_read(t, p, bytes) != KILN_OK) fail_msg("kiln_read: %s", kiln_last_error());
  return p;
}

/* Distance in units in the last place between two finite doubles/floats. */
static int64_t ulps64(double a, double b) {
  int64_t x, y;
  memcpy(&x, &a, 8);
  memcpy(&y, &b, 8);
  if (x < 0) x = INT64_MIN - x;
  if (y < 0) y = INT64_MIN - y;
  return x > y ? x - y : y - x;
}

static int32_t ulps32(float a, float b) {
  int32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  if (x < 0) x = INT32_MIN - x;
  if (y < 0) y = INT32_MIN - y;
  return x > y ? x - y : y - x;
}

/* ---------------------------------------------------------- constants */

static void test_constant_values(void **state) {
  (void)state;
  kiln_scope_begin();
  int32_t *i32 = read_all(kiln_full(KILN_I32, 2, V(2, 2), 2.7));
  for (int i = 0; i < 4; i++) assert_int_equal(i32[i], 2);
  free(i32);
  int64_t *i64 = read_all(kiln_full(KILN_I64, 1, V(3), -7.9));
  for (int i = 0; i < 3; i++) assert_int_equal(i64[i], -7);
  free(i64);
  uint8_t *u8 = read_all(kiln_full(KILN_U8, 1, V(2), 300));
  assert_int_equal(u8[0], 44);
  free(u8);
  int8_t *i8 = read_all(kiln_full(KILN_I8, 1, V(2), -128));
  assert_int_equal(i8[1], -128);
  free(i8);
  uint8_t *b = read_all(kiln_full(KILN_BOOL, 1, V(3), 0.5));
  for (int i = 0; i < 3; i++) assert_int_equal(b[i], 1);
  free(b);
  uint16_t *h = read_all(kiln_full(KILN_F16, 1, V(2), 0.1));
  assert_int_equal(h[0], 0x2E66); /* 0.1 in binary16 */
  free(h);
  uint16_t *bf = read_all(kiln_full(KILN_BF16, 1, V(2), 1.5));
  assert_int_equal(bf[1], 0x3FC0);
  free(bf);
  float *f = read_all(kiln_full(KILN_F32, 1, V(5), 0.1));
  for (int i = 0; i < 5; i++) assert_true(f[i] == 0.1f);
  free(f);
  double *d = read_all(kiln_full(KILN_F64, 3, V(2, 1, 2), -0.1));
  for (int i = 0; i < 4; i++) assert_true(d[i] == -0.1);
  free(d);

  float *z = read_all(kiln_zeros(KILN_F32, 2, V(3, 3)));
  for (int i = 0; i < 9; i++) assert_true(z[i] == 0.0f);
  free(z);
  int16_t *o = read_all(kiln_ones(KILN_I16, 1, V(4)));
  for (int i = 0; i < 4; i++) assert_int_equal(o[i], 1);
  free(o);
  double *e = read_all(kiln_empty(KILN_F64, 1, V(4)));
  for (int i = 0; i < 4; i++) assert_true(e[i] == 0.0); /* Kiln's empty is zeros */
  free(e);
  assert_true(kiln_item(kiln_scalar(KILN_F64, 3.25)) == 3.25);
  assert_true(kiln_item(kiln_scalar(KILN_I32, -2.5)) == -2.0);
  assert_true(kiln_item(kiln_scalar(KILN_BOOL, -2.5)) == 1.0);
  /* non-finite float fills travel as kernel arguments (passes/lower.c
   * fill_value converted them to int64 too: undefined for inf and NaN;
   * fuzz_program found it, clang's UBSan reports it) */
  assert_true(kiln_item(kiln_scalar(KILN_F32, -INFINITY)) == -INFINITY);
  assert_true(isnan(kiln_item(kiln_full(KILN_F64, 1, V(1), NAN))));
  assert_true(kiln_item(kiln_add_scalar(kiln_ones(KILN_F32, 1, V(1)), INFINITY)) == INFINITY);
  expect_no_error();
  kiln_scope_end();
}

/* ------------------------------------------------------------- arange */

static void test_arange_values(void **state) {
  (void)state;
  kiln_scope_begin();
  float *a = read_all(kiln_arange(KILN_F32, 0, 10, 3));
  assert_true(a[0] == 0 && a[1] == 3 && a[2] == 6 && a[3] == 9);
  free(a);
  /* Torch computes start + i*step in double for F32/F64, then rounds */
  kiln_tensor *t = kiln_arange(KILN_F64, 0, 1, 0.1);
  double *d = read_all(t);
  for (int i = 0; i < 10; i++)
    if (d[i] != 0 + i * 0.1) fail_msg("arange f64 [%d] = %.17g, expected %.17g", i, d[i], i * 0.1);
  free(d);
  t = kiln_arange(KILN_F32, -1, 1, 0.1);
  assert_int_equal(kiln_numel(t), 20);
  float *f = read_all(t);
  for (int i = 0; i < 20; i++) {
    float want = (float)(-1 + i * 0.1);
    if (ulps32(f[i], want) > 1) fail_msg("arange f32 [%d] = %.9g, expected %.9g", i, f[i], want);
  }
  free(f);
  int32_t *i32 = read_all(kiln_arange(KILN_I32, 0, 5, 1.5));
  for (int i = 0; i < 4; i++) assert_int_equal(i32[i], i); /* step truncated to 1 */
  free(i32);
  int64_t *i64 = read_all(kiln_arange(KILN_I64, 10, 0, -3));
  assert_true(i64[0] == 10 && i64[1] == 7 && i64[2] == 4 && i64[3] == 1);
  free(i64);
  /* integral I64 and I32 aranges are computed in index arithmetic, others
   * in F64 (passes/lower.c source_value): the same exact values, on both
   * sides of the bound (2^53 for I64) */
  const double big = 4503599627370496.0; /* 2^52 */
  int64_t *far = read_all(kiln_arange(KILN_I64, -1099511627776.0, -1099511627776.0 - 7 * 3000, -7));
  int64_t *edge = read_all(kiln_arange(KILN_I64, big, big + 2 * 3000, 2));
  int32_t *neg32 = read_all(kiln_arange(KILN_I32, 2000000000, 2000000000 - 3 * 3000, -3));
  for (int64_t i = 0; i < 3000; i++) {
    assert_true(far[i] == INT64_C(-1099511627776) - 7 * i);
    assert_true(edge[i] == (INT64_C(1) << 52) + 2 * i);
    assert_true(neg32[i] == 2000000000 - 3 * (int32_t)i);
  }
  free(far), free(edge), free(neg32);
  uint8_t *u8 = read_all(kiln_arange(KILN_U8, 250, 255, 2));
  assert_true(u8[0] == 250 && u8[1] == 252 && u8[2] == 254);
  free(u8);
  expect_no_error();
  kiln_scope_end();
}

/* ----------------------------------------------------------- linspace */

/* numpy.linspace (float64): step*i + start, the last value set to end. */
static double numpy_linspace(double start, double end, int64_t n, int64_t i) {
  if (n == 1) return start;
  if (i == n - 1) return end;
  double step = (end - start) / (double)(n - 1);
  return (double)i * step + start;
}

/* torch.linspace for F64: two-sided, start + i*step below steps/2. */
static double torch_linspace(double start, double end, int64_t n, int64_t i) {
  if (n == 1) return start;
  double step = (end - start) / (double)(n - 1);
  return i < n / 2 ? start + step * (double)i : end - step * (double)(n - 1 - i);
}

/* F64: bitwise Torch's formula, and as close to NumPy's as two roundings
 * allow: 2 ulps, or near 0 (where both cancel) 2 ulps of the bounds.
 * The formulas can round to opposite sides, e.g. (-3.3, 17.9, 101)[75]. */
static void check_linspace_f64(double start, double end, int64_t n) {
  double *d = read_all(kiln_linspace(KILN_F64, start, end, n));
  double big = fmax(fabs(start), fabs(end));
  for (int64_t i = 0; i < n; i++) {
    double torch = torch_linspace(start, end, n, i), numpy = numpy_linspace(start, end, n, i);
    bool near = ulps64(d[i], numpy) <= 2 || fabs(d[i] - numpy) <= 2 * (nextafter(big, INFINITY) - big);
    if (d[i] != torch || !near)
      fail_msg("linspace(%g, %g, %lld)[%lld] = %.17g, torch %.17g, numpy %.17g", start, end, (long long)n,
               (long long)i, d[i], torch, numpy);
  }
  free(d);
}

static void check_linspace_f32(double start, double end, int64_t n) {
  float *f = read_all(kiln_linspace(KILN_F32, start, end, n));
  for (int64_t i = 0; i < n; i++) {
    float want = (float)numpy_linspace(start, end, n, i);
    if (ulps32(f[i], want) > 1) fail_msg("linspace f32 (%g, %g, %lld)[%lld] = %.9g, numpy %.9g", start, end,
                                         (long long)n, (long long)i, f[i], want);
  }
  free(f);
}

static void test_linspace_values(void **state) {
  (void)state;
  kiln_scope_begin();
  double *d = read_all(kiln_linspace(KILN_F64, 0, 1, 5));
  assert_true(d[0] == 0 && d[1] == 0.25 && d[2] == 0.5 && d[3] == 0.75 && d[4] == 1);
  free(d);
  float *f = read_all(kiln_linspace(KILN_F32, 10, 0, 6));
  for (int i = 0; i < 6; i++) assert_true(f[i] == (float)(10 - 2 * i));
  free(f);
  assert_true(kiln_item(kiln_linspace(KILN_F64, 3, 7, 1)) == 3);
  assert_int_equal(kiln_numel(kiln_linspace(KILN_F64, -1, 1, 0)), 0);
  check_linspace_f64(0, 1, 7);
  check_linspace_f64(-3.3, 17.9, 101);
  check_linspace_f64(1e-3, 1e3, 1000);
  check_linspace_f64(5, -5, 33);
  check_linspace_f64(-17.9, 3.3, 101); /* crosses 0 in the second half */
  check_linspace_f32(0, 1, 7);
  check_linspace_f32(-3.3, 17.9, 101);
  check_linspace_f32(0.1, 0.2, 1001);
  int32_t *i32 = read_all(kiln_linspace(KILN_I32, 0, 10, 4)); /* Torch: 0, 3, 6, 10 */
  assert_true(i32[0] == 0 && i32[1] == 3 && i32[2] == 6 && i32[3] == 10);
  free(i32);
  int64_t *i64 = read_all(kiln_linspace(KILN_I64, 0.9, 4.9, 5)); /* start/end truncate first */
  for (int i = 0; i < 5; i++) assert_int_equal(i64[i], i);
  free(i64);
  expect_no_error();
  kiln_scope_end();
}

/* ------------------------------------------------------------- random */

static void test_rand_values(void **state) {
  (void)state;
  kiln_scope_begin();
  const int64_t n = 100000;
  kiln_manual_seed(1234);
  float *u = read_all(kiln_rand(KILN_F32, 1, &n));
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!(u[i] >= 0.0f && u[i] < 1.0f)) fail_msg("rand[%lld] = %g", (long long)i, u[i]);
    sum += u[i];
    sq += (double)u[i] * u[i];
  }
  double mean = sum / n, var = sq / n - mean * mean;
  assert_true(fabs(mean - 0.5) < 0.01);
  assert_true(fabs(var - 1.0 / 12) < 0.005);
  kiln_manual_seed(1234);
  float *again = read_all(kiln_rand(KILN_F32, 2, V(100, 1000)));
  assert_memory_equal(u, again, sizeof(float) * (size_t)n); /* same seed, same values */
  kiln_manual_seed(1235);
  float *other = read_all(kiln_rand(KILN_F32, 1, V(100)));
  assert_memory_not_equal(u, other, sizeof(float) * 100);
  free(u);
  free(again);
  free(other);
  const kiln_dtype floats[] = {KILN_F16, KILN_BF16, KILN_F64};
  for (int k = 0; k < 3; k++) {
    kiln_tensor *r = kiln_to_dtype(kiln_rand(floats[k], 1, V(20000)), KILN_F64);
    double *v = read_all(r);
    for (int i = 0; i < 20000; i++)
      if (!(v[i] >= 0.0 && v[i] < 1.0)) fail_msg("rand %s [%d] = %g", kiln_dtype_name(floats[k]), i, v[i]);
    free(v);
  }
  expect_no_error();
  kiln_scope_end();
}

static void test_randn_values(void **state) {
  (void)state;
  kiln_scope_begin();
  const int64_t n = 100001; /* odd: the last value uses half a Box-Muller pair */
  kiln_manual_seed(7);
  double *z = read_all(kiln_randn(KILN_F64, 1, &n));
  double sum = 0, sq = 0;
  int64_t beyond3 = 0;
  for (int64_t i = 0; i < n; i++) {
    assert_true(isfinite(z[i]));
    sum += z[i];
    sq += z[i] * z[i];
    beyond3 += fabs(z[i]) > 3;
  }
  double mean = sum / n, sd = sqrt(sq / n - mean * mean);
  assert_true(fabs(mean) < 0.02);
  assert_true(fabs(sd - 1) < 0.02);
  assert_true(beyond3 > 150 && beyond3 < 400); /* 0.27% of 100001 ≈ 270 */
  kiln_manual_seed(7);
  double *again = read_all(kiln_randn(KILN_F64, 1, &n));
  assert_memory_equal(z, again, sizeof(double) * (size_t)n);
  free(z);
  free(again);
  float *f = read_all(kiln_randn(KILN_F32, 2, V(10, 10)));
  for (int i = 0; i < 100; i++) assert_true(isfinite(f[i]));
  free(f);
  expect_no_error();
  kiln_scope_end();
}

/* ------------------------------------------------------ caller memory */

static void test_from_data_values(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t src64[6] = {INT64_MIN, -1, 0, 1, (int64_t)1 << 60, INT64_MAX};
  int64_t *r64 = read_all(kiln_from_data(KILN_I64, 2, V(2, 3), src64));
  assert_memory_equal(r64, src64, sizeof src64); /* exact, beyond 2^53 too */
  free(r64);
  uint16_t half[3] = {0x3C00, 0x7C00, 0x8001};
  uint16_t *rh = read_all(kiln_from_data(KILN_F16, 1, V(3), half));
  assert_memory_equal(rh, half, sizeof half);
  free(rh);
  double dd[4] = {0.1, -2.5, 1e300, -0.0};
  double *rd = read_all(kiln_from_data(KILN_F64, 2, V(2, 2), dd));
  assert_memory_equal(rd, dd, sizeof dd);
  free(rd);
  uint8_t bools[4] = {0, 2, 1, 255};
  uint8_t *rb = read_all(kiln_from_data(KILN_BOOL, 1, V(4), bools));
  assert_true(rb[0] == 0 && rb[1] == 1 && rb[2] == 1 && rb[3] == 1); /* normalised to 0/1 */
  free(rb);
  float src[6] = {1, 2, 3, 4, 5, 6};
  kiln_tensor *t = kiln_from_data(KILN_F32, 2, V(2, 3), src);
  src[0] = 100; /* copied: later changes to the source do not show */
  assert_true(kiln_get(t, V(0, 0)) == 1);
  assert_true(kiln_get(t, V(1, 2)) == 6);
  expect_no_error();
  kiln_scope_end();
}

static void test_from_blob_values(void **state) {
  (void)state;
  kiln_scope_begin();
  float blob[6] = {0, 1, 2, 3, 4, 5};
  kiln_tensor *t = kiln_from_blob(KILN_F32, 2, V(2, 3), NULL, blob, NULL, NULL);
  assert_ptr_equal(kiln_data(t), blob); /* zero copy */
  assert_ptr_equal(kiln_data(kiln_narrow(t, 1, 1, 2)), blob + 1);
  blob[4] = 40; /* the caller's memory is the storage */
  assert_true(kiln_get(t, V(1, 1)) == 40);
  kiln_tensor *tr = kiln_from_blob(KILN_F32, 2, V(3, 2), V(1, 3), blob, NULL, NULL);
  float *r = read_all(tr);
  const float want[6] = {0, 3, 1, 40, 2, 5};
  assert_memory_equal(r, want, sizeof want);
  free(r);
  assert_int_equal(kiln_fill_(kiln_select(t, 0, 0), 9), KILN_OK);
  assert_int_equal(kiln_realize(t), KILN_OK);
  assert_true(blob[0] == 9 && blob[1] == 9 && blob[2] == 9 && blob[3] == 3); /* writes land in the blob */
  expect_no_error();
  kiln_scope_end();
}

/* ------------------------------------------- storages, set_, resize_ */

static void test_storage_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_storage *s = kiln_storage_new(KILN_I32, 6);
  kiln_tensor *a = kiln_tensor_from_storage(s, 0, 2, V(2, 3), NULL);
  kiln_tensor *b = kiln_tensor_from_storage(s, 1, 1, V(2), V(3)); /* elements 1 and 4 */
  int32_t *z = read_all(a);
  for (int i = 0; i < 6; i++) assert_int_equal(z[i], 0); /* zero-filled */
  free(z);
  assert_int_equal(kiln_set(a, V(1, 1), 7), KILN_OK);
  assert_true(kiln_get(b, V(1)) == 7); /* shared through the storage */
  kiln_storage_release(s);
  kiln_tensor *c = kiln_from_data(KILN_F64, 1, V(3), (const double[]){4, 5, 6});
  kiln_tensor *d = kiln_zeros(KILN_F64, 1, V(1));
  assert_int_equal(kiln_set_(d, c), KILN_OK);
  assert_true(kiln_get(d, V(2)) == 6);
  assert_int_equal(kiln_set(d, V(0), -1), KILN_OK);
  assert_true(kiln_get(c, V(0)) == -1);
  expect_no_error();
  kiln_scope_end();
}

static void test_resize_grow_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_from_data(KILN_F32, 1, V(3), (const float[]){1, 2, 3});
  kiln_tensor *old_view = kiln_narrow(t, 0, 1, 2);
  assert_int_equal(kiln_resize_(t, 2, V(2, 3)), KILN_OK);
  kiln_storage *s = kiln_storage_of(t);
  assert_int_equal(kiln_storage_numel(s), 6);
  kiln_storage_release(s);
  float *r = read_all(t);
  const float want[6] = {1, 2, 3, 0, 0, 0}; /* old contents kept, new zero */
  assert_memory_equal(r, want, sizeof want);
  free(r);
  assert_true(kiln_get(old_view, V(1)) == 3); /* other views see the grown storage */
  /* a pending write is part of the kept contents */
  kiln_tensor *p = kiln_zeros(KILN_I64, 1, V(3));
  assert_int_equal(kiln_fill_(p, 5), KILN_OK);
  kiln_tensor *q = kiln_narrow(p, 0, 2, 1);
  assert_int_equal(kiln_resize_(q, 1, V(3)), KILN_OK); /* offset 2 + 3 = 5 elements */
  int64_t *rq = read_all(q);
  assert_true(rq[0] == 5 && rq[1] == 0 && rq[2] == 0);
  free(rq);
  int64_t *rp = read_all(p);
  assert_true(rp[0] == 5 && rp[1] == 5 && rp[2] == 5);
  free(rp);
  expect_no_error();
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_constant_values),  cmocka_unit_test(test_arange_values),
      cmocka_unit_test(test_linspace_values),  cmocka_unit_test(test_rand_values),
      cmocka_unit_test(test_randn_values),     cmocka_unit_test(test_from_data_values),
      cmocka_unit_test(test_from_blob_values), cmocka_unit_test(test_storage_values),
      cmocka_unit_test(test_resize_grow_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
