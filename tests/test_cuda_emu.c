/*
 * test_cuda_emu.c — the "cuda-emu" backend: kernels printed as CUDA C,
 * checked by NVRTC (sm_80, compute_90 + ptxas sm_90) and run on the CPU
 * from the same source built by the host C++ compiler. Values are checked
 * against known results. Skipped (with a message) when NVRTC or the host
 * compiler is missing, unless $CI is set and /usr/local/cuda exists, or
 * NVRTC is missing under KILN_TEST_EXPECT_DEVICE=1 (then they fail).
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda_backend.h"
#include "cuda_test_util.h"
#include "cuda_flat_kernel.h"
#include "cuda_emu_run.h"
#include "kir.h"
#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

/* Selects cuda-emu, or skips the test when the toolchain is missing
 * (fails under CI with /usr/local/cuda, and, when NVRTC is what is
 * missing, under KILN_TEST_EXPECT_DEVICE=1: cuda_test_util.h). */
static void use_emu(void) {
  if (kiln_set_backend("cuda-emu") == KILN_OK) return;
  char why[1024];
  snprintf(why, sizeof why, "%s", kiln_last_error());
  kiln_clear_error();
  skip_without_emu(why);
}

static int back_to_llvm(void **state) {
  (void)state;
  return kiln_set_backend("llvm");
}

static void elementwise_chain(void **state) {
  use_emu();
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F32, 0, 8, 1);
  kiln_tensor *y = kiln_add(kiln_exp(kiln_mul_scalar(x, 0.5)), kiln_tanh(kiln_add_scalar(x, -3)));
  double want[8];
  for (int i = 0; i < 8; i++) want[i] = exp(i * 0.5) + tanh(i - 3.0);
  expect_values_tol(y, want, 8, 1e-4);
  kiln_scope_end();
  expect_no_error();
}

static void reduction(void **state) {
  use_emu();
  float data[4 * 25];
  for (int i = 0; i < 100; i++) data[i] = (float)i;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){4, 25}, data);
  kiln_tensor *rows = kiln_sum(kiln_mul_scalar(x, 2), 1, (int[]){1}, false);
  kiln_tensor *cols = kiln_sum(x, 1, (int[]){0}, false);
  double want_rows[4], want_cols[25];
  for (int r = 0; r < 4; r++) want_rows[r] = 2.0 * (25 * 25 * r + 300);
  for (int c = 0; c < 25; c++) want_cols[c] = 4 * c + 150;
  expect_values_tol(rows, want_rows, 4, 1e-3);
  expect_values_tol(cols, want_cols, 25, 1e-3);
  kiln_scope_end();
  expect_no_error();
}

static void row_softmax(void **state) {
  use_emu();
  float data[] = {0, logf(2), logf(5), 1, 1, 1};
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, data);
  kiln_tensor *s = kiln_softmax(x, -1);
  double want[] = {1 / 8.0, 2 / 8.0, 5 / 8.0, 1 / 3.0, 1 / 3.0, 1 / 3.0};
  expect_values_tol(s, want, 6, 1e-6);
  kiln_scope_end();
  expect_no_error();
}

static void write_through_view(void **state) {
  use_emu();
  kiln_scope_begin();
  kiln_tensor *x = kiln_full(KILN_F32, 1, (int64_t[]){5}, 0);
  kiln_tensor *n = kiln_narrow(x, 0, 1, 3);
  assert_int_equal(kiln_fill_(n, 1.5), KILN_OK);
  kiln_tensor *z = kiln_mul_scalar(x, 2);
  expect_values_tol(z, (double[]){0, 3, 3, 3, 0}, 5, 0);
  expect_values_tol(x, (double[]){0, 1.5, 1.5, 1.5, 0}, 5, 0);
  kiln_scope_end();
  expect_no_error();
}

static void cast_chain(void **state) {
  use_emu();
  float data[] = {-1.7f, 2.5f, 3.9f, 260.0f};
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 1, (int64_t[]){4}, data);
  kiln_tensor *i = kiln_to_dtype(x, KILN_I32); /* truncates: -1 2 3 260 */
  kiln_tensor *u = kiln_to_dtype(i, KILN_U8);  /* wraps: 255 2 3 4 */
  kiln_tensor *d = kiln_add_scalar(kiln_to_dtype(u, KILN_F64), 0.25);
  expect_values_tol(d, (double[]){255.25, 2.25, 3.25, 4.25}, 4, 0);
  expect_values_tol(kiln_to_dtype(i, KILN_F64), (double[]){-1, 2, 3, 260}, 4, 0);
  kiln_scope_end();
  expect_no_error();
}

/* ------------------------------------------- cooperative reductions */

/* Row lengths around the warp (32) and block sizes, and a long row. */
static const int64_t lens[] = {1, 31, 32, 33, 255, 1000, 4097};
#define N_LENS ((int)(sizeof lens / sizeof lens[0]))
enum { ROWS = 3 };

/* Value i of a deterministic pattern in [-1, 1). */
static double pattern(int64_t i) { return (double)((i * 7919) % 2001 - 1000) / 1000.0; }

/* A [rows, cols] tensor of dtype dt from the F64 values v (converted as
 * a C cast would; BOOL: v != 0). No kernel runs. */
static kiln_tensor *from_f64(kiln_dtype dt, int64_t rows, int64_t cols, const double *v) {
  int64_t n = rows * cols;
  void *buf = malloc((size_t)(n > 0 ? n : 1) * 8);
  assert_non_null(buf);
  for (int64_t i = 0; i < n; i++) {
    switch ((int)dt) {
    case KILN_F32: ((float *)buf)[i] = (float)v[i]; break;
    case KILN_F64: ((double *)buf)[i] = v[i]; break;
    case KILN_I32: ((int32_t *)buf)[i] = (int32_t)v[i]; break;
    case KILN_I64: ((int64_t *)buf)[i] = (int64_t)v[i]; break;
    default: ((uint8_t *)buf)[i] = v[i] != 0; break; /* BOOL */
    }
  }
  kiln_tensor *t = kiln_from_data(dt, 2, (int64_t[]){rows, cols}, buf);
  free(buf);
  return t;
}

/* t's n values as F64, read in t's own dtype (no conversion kernel).
 * The caller frees. */
static double *read_all(kiln_tensor *t, int64_t n) {
  assert_non_null(t);
  assert_int_equal(kiln_numel(t), n);
  kiln_dtype dt = kiln_dtype_of(t);
  void *raw = malloc((size_t)(n > 0 ? n : 1) * 8);
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  assert_true(raw && v);
  if (kiln_read(t, raw, (size_t)n * kiln_dtype_size(dt)) != KILN_OK) fail_msg("read: %s", kiln_last_error());
  for (int64_t i = 0; i < n; i++) {
    switch ((int)dt) {
    case KILN_F32: v[i] = ((float *)raw)[i]; break;
    case KILN_F64: v[i] = ((double *)raw)[i]; break;
    case KILN_I32: v[i] = ((int32_t *)raw)[i]; break;
    case KILN_I64: v[i] = (double)((int64_t *)raw)[i]; break;
    default: v[i] = ((uint8_t *)raw)[i]; break;
    }
  }
  free(raw);
  return v;
}

/* t's n values within rtol * (1 + |want|) of want (NaN matches NaN). */
static void expect_close(kiln_tensor *t, const double *want, int64_t n, double rtol, const char *what) {
  double *got = read_all(t, n);
  for (int64_t i = 0; i < n; i++) {
    bool ok = isnan(want[i]) ? isnan(got[i]) : fabs(got[i] - want[i]) <= rtol * (1 + fabs(want[i]));
    if (!ok) fail_msg("%s: element %lld is %.17g, want %.17g", what, (long long)i, got[i], want[i]);
  }
  free(got);
}

/* An I64 tensor's n values equal want exactly (wrapping arithmetic). */
static void expect_i64(kiln_tensor *t, const int64_t *want, int64_t n, const char *what) {
  int64_t got[ROWS];
  assert_true(n <= ROWS);
  assert_int_equal(kiln_read(t, got, (size_t)n * 8), KILN_OK);
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("%s: element %lld is %lld, want %lld", what, (long long)i, (long long)got[i],
                                    (long long)want[i]);
}

typedef enum { RED_SUM, RED_PROD, RED_MAX, RED_MIN } red_kind;

/* Launches so far of kernels whose blocks share reductions (the
 * cooperative form): each test below asserts it ran some. */
static int64_t cooperative(void) { return rt_cuda_emu_cooperative_launches(); }

/* The reference reduction of each row of v [ROWS, len] in double. */
static void row_reference(red_kind r, const double *v, int64_t len, double *want) {
  for (int i = 0; i < ROWS; i++) {
    double a = r == RED_SUM ? 0 : r == RED_PROD ? 1 : r == RED_MAX ? -INFINITY : INFINITY;
    for (int64_t j = 0; j < len; j++) {
      double x = v[i * len + j];
      if (r == RED_SUM) a += x;
      else if (r == RED_PROD) a *= x;
      else if (isnan(x) || isnan(a)) a = NAN;
      else a = r == RED_MAX ? fmax(a, x) : fmin(a, x);
    }
    want[i] = a;
  }
}

static kiln_tensor *reduce_rows(red_kind r, kiln_tensor *x) {
  int last = -1;
  switch (r) {
  case RED_SUM: return kiln_sum(x, 1, &last, false);
  case RED_PROD: return kiln_prod(x, 1, &last, false);
  case RED_MAX: return kiln_amax(x, 1, &last, false);
  default: return kiln_amin(x, 1, &last, false);
  }
}

/* Reduction r over rows of length len of dtype dt, values pattern() *
 * scale + shift (a NaN at element nan_at when >= 0), against the double
 * reference. */
static void check_rows(red_kind r, kiln_dtype dt, int64_t len, double scale, double shift, int64_t nan_at, double rtol) {
  int64_t n = ROWS * len;
  double *v = malloc((size_t)n * sizeof *v), want[ROWS];
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) {
    v[i] = pattern(i) * scale + shift;
    if (dt == KILN_F32) v[i] = (float)v[i];
    if (dt == KILN_I32) v[i] = (int32_t)v[i];
  }
  if (nan_at >= 0) v[nan_at] = NAN;
  row_reference(r, v, len, want);
  char what[96];
  snprintf(what, sizeof what, "reduction %d of %s rows of %lld", (int)r, kiln_dtype_name(dt), (long long)len);
  kiln_scope_begin();
  expect_close(reduce_rows(r, from_f64(dt, ROWS, len, v)), want, ROWS, rtol, what);
  kiln_scope_end();
  free(v);
  expect_no_error();
}

/* Sum and max of F32 rows of every length; min and prod on some. The F32
 * sum accumulates in F64, so only the final rounding differs. */
static void row_reductions_f32(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  for (int i = 0; i < N_LENS; i++) {
    check_rows(RED_SUM, KILN_F32, lens[i], 1, 0.25, -1, 1e-6);
    check_rows(RED_MAX, KILN_F32, lens[i], 1, 0, -1, 0);
  }
  check_rows(RED_MIN, KILN_F32, 1, 1, 0, -1, 0);
  check_rows(RED_MIN, KILN_F32, 33, 1, 0, -1, 0);
  check_rows(RED_MIN, KILN_F32, 4097, 1, 0, -1, 0);
  check_rows(RED_PROD, KILN_F32, 33, 0.01, 1, -1, 1e-6);
  check_rows(RED_PROD, KILN_F32, 1000, 0.01, 1, -1, 1e-6);
  assert_true(cooperative() - coop0 >= 2 * (N_LENS - 1));
  cuda_emu_stats st;
  cuda_emu_get_stats(&st);
  assert_true(st.cooperative >= 2 * (N_LENS - 1)); /* kernels built in that form */
}

/* NaN anywhere in a row makes its max and min NaN (first, middle, last
 * element of a row: lanes of different warps). */
static void max_min_nan(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  const int64_t at[] = {1000 + 0, 1000 + 517, 3 * 1000 - 1};
  for (int i = 0; i < 3; i++) {
    check_rows(RED_MAX, KILN_F32, 1000, 1, 0, at[i], 0);
    check_rows(RED_MIN, KILN_F32, 4097, 1, 0, at[i], 0);
  }
  check_rows(RED_MAX, KILN_F64, 255, 1, 0, 300, 0);
  assert_true(cooperative() - coop0 >= 1);
}

static void row_reductions_f64_i32(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  check_rows(RED_SUM, KILN_F64, 31, 1, 0.5, -1, 1e-13);
  check_rows(RED_SUM, KILN_F64, 1000, 1, 0.5, -1, 1e-13);
  check_rows(RED_MAX, KILN_F64, 255, 1, 0, -1, 0);
  check_rows(RED_SUM, KILN_I32, 255, 1e6, 0, -1, 0);
  check_rows(RED_MIN, KILN_I32, 255, 1e6, 0, -1, 0);
  assert_true(cooperative() - coop0 >= 1);
}

/* I64 sums and products that overflow wrap as on the CPU: the reference
 * is computed on uint64_t. */
static void integer_wrap(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  const int64_t wl[] = {33, 1000};
  for (int l = 0; l < 2; l++) {
    int64_t len = wl[l], n = ROWS * len, sum[ROWS], prod[ROWS];
    double *v = malloc((size_t)n * sizeof *v), *p = malloc((size_t)n * sizeof *p);
    assert_true(v && p);
    for (int i = 0; i < ROWS; i++) {
      uint64_t s = 0, q = 1;
      for (int64_t j = 0; j < len; j++) {
        int64_t x = INT64_C(1) << 61 | (i * len + j) * 12345, y = 3 + (i * len + j) % 5;
        v[i * len + j] = (double)x; /* exact: x fits 53 bits of mantissa? no: convert back below */
        x = (int64_t)v[i * len + j];
        p[i * len + j] = (double)y;
        s += (uint64_t)x;
        q *= (uint64_t)y;
      }
      sum[i] = (int64_t)s;
      prod[i] = (int64_t)q;
    }
    kiln_scope_begin();
    expect_i64(reduce_rows(RED_SUM, from_f64(KILN_I64, ROWS, len, v)), sum, ROWS, "wrapping I64 sum");
    expect_i64(reduce_rows(RED_PROD, from_f64(KILN_I64, ROWS, len, p)), prod, ROWS, "wrapping I64 prod");
    kiln_scope_end();
    free(v);
    free(p);
  }
  expect_no_error();
  assert_true(cooperative() - coop0 >= 1);
}

/* any/all of BOOL rows (OR/AND across the block): one odd element, at
 * either end of the row. */
static void bool_any_all(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  const int64_t bl[] = {33, 1000};
  for (int l = 0; l < 2; l++) {
    int64_t len = bl[l], n = ROWS * len;
    double *zeros = calloc((size_t)n, sizeof(double)), *ones = malloc((size_t)n * sizeof(double));
    assert_true(zeros && ones);
    for (int64_t i = 0; i < n; i++) ones[i] = 1;
    zeros[len - 1] = 1; /* row 0: its last element */
    ones[len] = 0;      /* row 1: its first element */
    int last = -1;
    kiln_scope_begin();
    expect_close(kiln_any(from_f64(KILN_BOOL, ROWS, len, zeros), 1, &last, false), (double[]){1, 0, 0}, ROWS, 0, "any");
    expect_close(kiln_all(from_f64(KILN_BOOL, ROWS, len, ones), 1, &last, false), (double[]){1, 0, 1}, ROWS, 0, "all");
    kiln_scope_end();
    free(zeros);
    free(ones);
  }
  expect_no_error();
  assert_true(cooperative() - coop0 >= 1);
}

/* Index of the first maximum (minimum) of x[0..len), a NaN counting as
 * the extreme: the CPU backend's argmax (argmin). */
static int64_t ref_arg(const double *x, int64_t len, bool max) {
  int64_t at = 0;
  double best = max ? -INFINITY : INFINITY;
  for (int64_t j = 0; j < len && !isnan(best); j++)
    if (isnan(x[j]) || (max ? x[j] > best : x[j] < best)) best = x[j], at = j;
  return at;
}

/* argmax/argmin over rows (the (value, index) pair combined across the
 * block): ties go to the first index, the first NaN wins, a row of -inf
 * gives 0. F32 rows of 33 and 1,000, I32 rows of 255. */
static void arg_rows(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  const int64_t al[] = {33, 1000, 255};
  for (int l = 0; l < 3; l++) {
    int64_t len = al[l], n = ROWS * len;
    kiln_dtype dt = l == 2 ? KILN_I32 : KILN_F32;
    double *v = malloc((size_t)n * sizeof *v), want_max[ROWS], want_min[ROWS];
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = dt == KILN_I32 ? (double)(int)(pattern(i) * 100) : (float)pattern(i);
    v[len - 1] = v[3] = 5;            /* row 0: a tied maximum */
    v[len / 2] = v[len - 2] = -5;     /* and a tied minimum */
    if (dt == KILN_F32) {
      v[len + len - 1] = v[len + 7] = NAN; /* row 1: NaNs */
      for (int64_t j = 0; j < len; j++) v[2 * len + j] = -INFINITY; /* row 2 */
    }
    for (int i = 0; i < ROWS; i++) {
      want_max[i] = (double)ref_arg(v + i * len, len, true);
      want_min[i] = (double)ref_arg(v + i * len, len, false);
    }
    kiln_scope_begin();
    kiln_tensor *x = from_f64(dt, ROWS, len, v);
    expect_close(kiln_argmax(x, -1, false), want_max, ROWS, 0, "argmax");
    expect_close(kiln_argmin(x, -1, false), want_min, ROWS, 0, "argmin");
    kiln_scope_end();
    free(v);
  }
  expect_no_error();
  assert_true(cooperative() - coop0 >= 6);
}

/* Row-fused kernels (several cooperative reductions, then an epilogue
 * over the row split across the threads) against double references. */
static void fused_rows(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  const int64_t fl[] = {33, 1000};
  for (int l = 0; l < 2; l++) {
    int64_t len = fl[l], n = ROWS * len;
    double *v = malloc((size_t)n * sizeof *v), *sm = malloc((size_t)n * sizeof *sm), *lsm = malloc((size_t)n * sizeof *lsm),
           *ln = malloc((size_t)n * sizeof *ln), w[1000], b[1000];
    assert_true(v && sm && lsm && ln);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(pattern(i) * 4);
    for (int64_t j = 0; j < len; j++) w[j] = (float)(1 + pattern(j + 7) / 2), b[j] = (float)pattern(j + 11);
    for (int i = 0; i < ROWS; i++) {
      const double *x = v + i * len;
      double m = -INFINITY, s = 0, mu = 0, var = 0;
      for (int64_t j = 0; j < len; j++) m = fmax(m, x[j]), mu += x[j] / (double)len;
      for (int64_t j = 0; j < len; j++) s += exp(x[j] - m), var += (x[j] - mu) * (x[j] - mu) / (double)len;
      for (int64_t j = 0; j < len; j++) {
        sm[i * len + j] = exp(x[j] - m) / s;
        lsm[i * len + j] = x[j] - m - log(s);
        ln[i * len + j] = (x[j] - mu) / sqrt(var + 1e-5) * w[j] + b[j];
      }
    }
    kiln_scope_begin();
    kiln_tensor *x = from_f64(KILN_F32, ROWS, len, v);
    kiln_tensor *wt = kiln_view(from_f64(KILN_F32, 1, len, w), 1, (int64_t[]){len});
    kiln_tensor *bt = kiln_view(from_f64(KILN_F32, 1, len, b), 1, (int64_t[]){len});
    expect_close(kiln_softmax(x, -1), sm, n, 1e-5, "softmax");
    expect_close(kiln_log_softmax(x, -1), lsm, n, 1e-5, "log_softmax");
    expect_close(kiln_layer_norm(x, 1, wt, bt, 1e-5), ln, n, 1e-4, "layer_norm");
    kiln_scope_end();
    free(v), free(sm), free(lsm), free(ln);
  }
  expect_no_error();
  assert_true(cooperative() - coop0 >= 1);
}

/* Column reductions (a [R, 48] tensor: a block of 48 columns with its
 * accumulator row in a LOCAL; plain columns of [255, 5]) and whole-tensor
 * sums (one block). */
static void columns_and_total(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  const int64_t shapes[][2] = {{1000, 48}, {255, 5}, {33, 48}};
  for (int s = 0; s < 3; s++) {
    int64_t r = shapes[s][0], c = shapes[s][1];
    double *v = malloc((size_t)(r * c) * sizeof *v), want[48], mx[48];
    assert_non_null(v);
    for (int64_t i = 0; i < r * c; i++) v[i] = (float)pattern(i);
    for (int64_t j = 0; j < c; j++) {
      want[j] = 0, mx[j] = -INFINITY;
      for (int64_t i = 0; i < r; i++) want[j] += v[i * c + j], mx[j] = fmax(mx[j], v[i * c + j]);
    }
    int first = 0;
    kiln_scope_begin();
    kiln_tensor *x = from_f64(KILN_F32, r, c, v);
    expect_close(kiln_sum(x, 1, &first, false), want, c, 1e-6, "column sum");
    if (s == 2) expect_close(kiln_amax(x, 1, &first, false), mx, c, 0, "column max");
    kiln_scope_end();
    free(v);
  }
  int64_t r = 7, c = 4097;
  double *v = malloc((size_t)(r * c) * sizeof *v), total = 0;
  assert_non_null(v);
  for (int64_t i = 0; i < r * c; i++) v[i] = (float)(pattern(i) + 0.125), total += v[i];
  kiln_scope_begin();
  expect_close(kiln_sum(from_f64(KILN_F32, r, c, v), 0, NULL, false), &total, 1, 1e-6, "whole-tensor sum");
  kiln_scope_end();
  free(v);
  expect_no_error();
  assert_true(cooperative() - coop0 >= 1);
}

/* A hand-built row sum through cuda_emu_compile, called like the runtime
 * calls a chunk: only rows [start, end) are written. */
static void chunk_of_rows(void **state) {
  use_emu();
  int64_t coop0 = cooperative();
  kir_kernel k;
  kir_init(&k, "rows");
  int out = kir_param(&k, KIR_F64, true), in = kir_param(&k, KIR_F64, false);
  int r = kir_range(&k, 6, true);
  int acc = kir_acc(&k, KIR_F64, kir_const_f(&k, KIR_F64, 0.5)); /* not the identity: added once */
  int j = kir_range(&k, 100, false);
  int idx = kir_alu(&k, KIR_ADD, KIR_INDEX, kir_alu(&k, KIR_MUL, KIR_INDEX, r, kir_const_i(&k, KIR_INDEX, 100), -1), j, -1);
  int u = kir_alu(&k, KIR_ADD, KIR_F64, acc, kir_load(&k, in, idx), -1);
  kir_set_reassoc(&k, u);
  kir_acc_set(&k, acc, u);
  kir_end(&k, j);
  kir_store(&k, out, r, acc);
  kir_end(&k, r);
  cuda_emu_fn fn = NULL;
  char err[4096];
  if (cuda_emu_compile(&k, &rt_cuda_emu_launcher, &fn, err, sizeof err) != KILN_OK) fail_msg("%s", err);
  double x[600], o[6] = {-1, -1, -1, -1, -1, -1};
  for (int i = 0; i < 600; i++) x[i] = i;
  void *bufs[] = {o, x};
  fn(bufs, 2, 5);
  for (int i = 0; i < 6; i++) assert_float_equal(o[i], i >= 2 && i < 5 ? 0.5 + 100 * (100 * i) + 4950 : -1, 0);
  kir_free(&k);
  assert_true(cooperative() - coop0 >= 1);
}

/* ------------------------------------------------------ the vector form */

/* Lengths around the group of 4, and long ones (several blocks; 4097 is
 * also split into chunks by the runtime's pool). */
static const int64_t vec_lens[] = {1, 3, 4, 5, 1023, 4097};
#define N_VEC_LENS ((int)(sizeof vec_lens / sizeof vec_lens[0]))

/* The flat elementwise kernel of cuda_flat_kernel.h, built for cuda-emu
 * and called as the runtime calls a chunk [start, end), with every input
 * and output aligned to 16 bytes or not (off 0 or 1; outputs shifted by
 * one element): each written element is bit-identical to the scalar
 * formula in C, the others untouched. */
static void vector_form_hand_built(void **state) {
  use_emu();
  for (int l = 0; l < N_VEC_LENS; l++) {
    int64_t n = vec_lens[l];
    kir_kernel k;
    build_flat(&k, n);
    cuda_emu_fn fn = NULL;
    char err[4096];
    if (cuda_emu_compile(&k, &rt_cuda_emu_launcher, &fn, err, sizeof err) != KILN_OK) fail_msg("%s", err);
    size_t cap = ((size_t)n + 16 + 15) / 16 * 16; /* aligned_alloc: a multiple of the alignment */
    float *a = aligned_alloc(64, cap * 4), *out = aligned_alloc(64, cap * 4);
    int32_t *q = aligned_alloc(64, cap * 4);
    assert_true(a && out && q);
    for (size_t i = 0; i < cap; i++) a[i] = (float)(pattern((int64_t)i) * 1000.0);
    a[0] = 1.5f; /* the broadcast scale: a[0] of the view */
    const int64_t bounds[][2] = {{0, n}, {0, n - 1}, {1, n}, {4, n}, {2, n / 2}};
    for (int shift = 0; shift < 4; shift++)
      for (int b = 0; b < 5; b++) {
        int64_t off = shift & 1, start = bounds[b][0], end = bounds[b][1];
        int64_t args[1] = {off};
        float *o = out + (shift >> 1), *in = a + (shift >> 1);
        memset(out, 0xff, cap * 4);
        memset(q, 0xff, cap * 4);
        void *bufs[] = {o, args, in, q};
        fn(bufs, start, end);
        for (int64_t i = 0; i < n; i++) {
          bool written = i >= start && i < end;
          volatile float m = in[i + off] * in[i]; /* rounded as the kernel does: no contraction */
          float t = m + in[4 + i], v = (t != t ? t : t > 0 ? t : 0.0f) * in[0];
          int32_t want_q = written ? (int32_t)(int64_t)v : -1;
          uint32_t got_bits, want_bits = 0xffffffffu;
          if (written) memcpy(&want_bits, &v, 4);
          memcpy(&got_bits, &o[i], 4);
          if (got_bits != want_bits || q[i + off] != want_q)
            fail_msg("n %lld, off %lld, shift %d, [%lld, %lld): element %lld is %g / %d, want %g / %d", (long long)n,
                     (long long)off, shift >> 1, (long long)start, (long long)end, (long long)i, (double)o[i],
                     q[i + off], (double)v, want_q);
        }
      }
    free(a);
    free(out);
    free(q);
    kir_free(&k);
  }
}

/* relu(a * b + c) * (d / (|d| + 1)) (F32) and a * b + c (I32, wrapping)
 * over narrow views at offset `off` (passed to the kernel as an argument):
 * the result of the current backend, malloc'ed (the caller frees). */
static void *flat_chain(kiln_dtype dt, int64_t n, int64_t off) {
  double *v = malloc((size_t)(n + 1) * 4 * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < (n + 1) * 4; i++) v[i] = pattern(i) * (dt == KILN_F32 ? 3.0 : 3e6);
  kiln_scope_begin();
  kiln_tensor *x[4];
  for (int j = 0; j < 4; j++) {
    kiln_tensor *flat = kiln_reshape(from_f64(dt, 1, n + 1, v + j * (n + 1)), 1, &(int64_t){n + 1});
    x[j] = kiln_narrow(flat, 0, off, n);
  }
  kiln_tensor *y = kiln_add(kiln_mul(x[0], x[1]), x[2]);
  if (dt == KILN_F32) y = kiln_mul(kiln_relu(y), kiln_div(x[3], kiln_add_scalar(kiln_abs(x[3]), 1)));
  void *got = malloc((size_t)n * 4);
  assert_non_null(got);
  if (kiln_read(y, got, (size_t)n * 4) != KILN_OK) fail_msg("read: %s", kiln_last_error());
  kiln_scope_end();
  free(v);
  expect_no_error();
  return got;
}

/* The same flat elementwise chains on LLVM and on cuda-emu, aligned (off
 * 0: the float4 / int4 path) and not (off 1: the scalar loop), bit for
 * bit. */
static void vector_form_matches_llvm(void **state) {
  const kiln_dtype dts[] = {KILN_F32, KILN_I32};
  for (int d = 0; d < 2; d++)
    for (int l = 0; l < N_VEC_LENS; l++)
      for (int64_t off = 0; off < 2; off++) {
        int64_t n = vec_lens[l];
        assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
        void *want = flat_chain(dts[d], n, off);
        use_emu();
        void *got = flat_chain(dts[d], n, off);
        if (memcmp(got, want, (size_t)n * 4) != 0)
          fail_msg("%s, n %lld, offset %lld: cuda-emu differs from llvm", kiln_dtype_name(dts[d]), (long long)n,
                   (long long)off);
        free(got);
        free(want);
      }
}

/* A graph forced on LLVM, then again (same structure, new data) after
 * switching to cuda-emu, is built by the emulator: the schedule cache
 * does not hand back the other backend's entry points. */
static void backend_switch_rebuilds(void **state) {
  assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) use_emu();
    cuda_emu_stats s0, s1;
    cuda_emu_get_stats(&s0);
    kiln_scope_begin();
    kiln_tensor *x = kiln_arange(KILN_F32, 0, 37, 1);
    assert_int_equal(kiln_realize(x), KILN_OK);
    kiln_tensor *y = kiln_add_scalar(kiln_mul(x, x), 0.5);
    double want[37];
    for (int i = 0; i < 37; i++) want[i] = i * i + 0.5;
    expect_values_tol(y, want, 37, 0);
    kiln_scope_end();
    cuda_emu_get_stats(&s1);
    assert_true(pass == 0 ? s1.kernels == s0.kernels : s1.kernels > s0.kernels);
  }
  expect_no_error();
}

/* ------------------------------------------------ the emulator's threads */

/* What the threads of one emulated block saw. */
typedef struct emu_probe {
  int shared[64];
  bool order_ok;
  unsigned long long down[64], xor5[64];
} emu_probe;

/* Writes its slot, waits at the barrier, reads its neighbour's (written
 * before the barrier by a thread that runs after it), then two shuffles. */
static void probe_thread(void *ctx, unsigned b, unsigned t, unsigned grid, unsigned block) {
  emu_probe *p = ctx;
  p->shared[t] = (int)t * 10;
  rt_cuda_emu_launcher.sync();
  unsigned next = (t + 1) % block, lane = t & 31u;
  if (p->shared[next] != (int)next * 10) p->order_ok = false;
  p->down[t] = rt_cuda_emu_launcher.shfl(0xffffffffu, t, lane + 1 < 32 ? lane + 1 : lane); /* __shfl_down_sync(.., 1) */
  p->xor5[t] = rt_cuda_emu_launcher.shfl(0xffffffffu, 1000 + t, lane ^ 5u);                /* __shfl_xor_sync(.., 5) */
}

/* Threads 0..31 wait at a barrier that 32..63 never reach. */
static void divergent_barrier(void *ctx, unsigned b, unsigned t, unsigned grid, unsigned block) {
  if (t < 32) rt_cuda_emu_launcher.sync();
}

/* Runs fn as a 64-thread block (kind) in a child process; returns what it
 * printed to stderr and whether it was stopped by SIGABRT. */
static bool child_aborts(cuda_emu_thread_fn fn, int kind, char *msg, size_t len) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd[1], 2);
    rt_cuda_emu_launcher.launch(kind, 0, 64, 0, 0, fn, NULL);
    _exit(0);
  }
  close(fd[1]);
  ssize_t n = read(fd[0], msg, len - 1);
  msg[n > 0 ? n : 0] = 0;
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

/* Barriers and warp shuffles of an emulated block behave as on a GPU, and
 * a barrier not every thread reaches stops the process with a message
 * instead of hanging (also one in a launch without cooperation). */
static void emulated_block_semantics(void **state) {
  use_emu();
  emu_probe p = {.order_ok = true};
  rt_cuda_emu_launcher.launch(CUDA_LAUNCH_ONE_BLOCK, 0, 64, 0, 0, probe_thread, &p);
  assert_true(p.order_ok);
  for (unsigned t = 0; t < 64; t++) {
    unsigned lane = t & 31u, base = t - lane;
    assert_int_equal(p.down[t], lane + 1 < 32 ? t + 1 : t);
    assert_int_equal(p.xor5[t], 1000 + base + (lane ^ 5u));
  }
  char msg[1024];
  assert_true(child_aborts(divergent_barrier, CUDA_LAUNCH_ONE_BLOCK, msg, sizeof msg));
  assert_non_null(strstr(msg, "32 at __syncthreads, 0 at a warp shuffle, 32 finished"));
  assert_non_null(strstr(msg, "a deadlock on a GPU"));
  assert_true(child_aborts(divergent_barrier, CUDA_LAUNCH_GRID_STRIDE, msg, sizeof msg));
  assert_non_null(strstr(msg, "__syncthreads() in a kernel launched without block cooperation"));
}

/* Kernels went through the toolchain check and the host build, and the
 * profiler names the backend. */
static void checked_and_recorded(void **state) {
  use_emu();
  kiln_profile_begin();
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F64, 0, 16, 1);
  expect_values_tol(kiln_sum(kiln_mul(x, x), 0, NULL, false), (double[]){1240}, 1, 0);
  kiln_scope_end();
  kiln_profile_end();
  assert_true(kiln_profile_count() >= 1);
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(kiln_profile_count() - 1, &r), KILN_OK);
  assert_string_equal(r.backend, "cuda-emu");
  cuda_emu_stats s;
  cuda_emu_get_stats(&s);
  assert_true(s.kernels >= 1);
  assert_int_equal(s.checks, 2 * s.kernels);
  assert_int_equal(s.failures, 0);
  assert_true(s.host_compiles >= 1);
}

/* A host compiler that does not exist: selecting cuda-emu says so. */
static void missing_host_compiler(void **state) {
  setenv("KILN_CXX", "/nonexistent/c++", 1);
  int st = kiln_set_backend("cuda-emu");
  unsetenv("KILN_CXX");
  if (!cuda_nvrtc_available(NULL, 0)) {
    assert_true(st < 0);
    kiln_clear_error();
    require_nvrtc(); /* skips, or fails under KILN_TEST_EXPECT_DEVICE=1 */
  }
  assert_int_equal(st, KILN_ERR_UNSUPPORTED);
  expect_error(KILN_ERR_UNSUPPORTED, "kiln_set_backend", "host C++ compiler", "KILN_CXX", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(elementwise_chain, back_to_llvm),
      cmocka_unit_test_teardown(reduction, back_to_llvm),
      cmocka_unit_test_teardown(row_softmax, back_to_llvm),
      cmocka_unit_test_teardown(write_through_view, back_to_llvm),
      cmocka_unit_test_teardown(cast_chain, back_to_llvm),
      cmocka_unit_test_teardown(row_reductions_f32, back_to_llvm),
      cmocka_unit_test_teardown(max_min_nan, back_to_llvm),
      cmocka_unit_test_teardown(row_reductions_f64_i32, back_to_llvm),
      cmocka_unit_test_teardown(integer_wrap, back_to_llvm),
      cmocka_unit_test_teardown(bool_any_all, back_to_llvm),
      cmocka_unit_test_teardown(arg_rows, back_to_llvm),
      cmocka_unit_test_teardown(fused_rows, back_to_llvm),
      cmocka_unit_test_teardown(columns_and_total, back_to_llvm),
      cmocka_unit_test_teardown(chunk_of_rows, back_to_llvm),
      cmocka_unit_test_teardown(backend_switch_rebuilds, back_to_llvm),
      cmocka_unit_test_teardown(vector_form_hand_built, back_to_llvm),
      cmocka_unit_test_teardown(vector_form_matches_llvm, back_to_llvm),
      cmocka_unit_test_teardown(emulated_block_semantics, back_to_llvm),
      cmocka_unit_test_teardown(checked_and_recorded, back_to_llvm),
      cmocka_unit_test_teardown(missing_host_compiler, back_to_llvm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
