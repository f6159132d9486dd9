/*
 * test_cuda_gemm.c — the CUDA tiled GEMM kernel (codegen_cuda/cuda_gemm.c):
 * printed for a shape and layout, checked by NVRTC (sm_80, compute_90 +
 * ptxas sm_90) and run from the same source under cuda-emu; values
 * against a double-precision reference within the bound of a K-term dot
 * product, for sizes below, at and past the 64 × 64 tile and the 16-deep
 * K step, K = 0, row- and column-major operands, strided and offset
 * views, batches with a broadcast operand, F32 and F64. Skipped (with a
 * message) without NVRTC or a host C++ compiler, unless $CI is set and
 * /usr/local/cuda exists (then it fails).
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda_backend.h"
#include "cuda_emu_run.h"
#include "cuda_test_util.h"

static void require_emu(void) {
  char why[1024];
  if (cuda_emu_available(why, sizeof why)) return;
  skip_without_emu(why);
}

/* A layout: row-major (a[i][k] at i·k_len + k) or column-major, with
 * `pad` extra elements per line and an offset of 3 elements. */
typedef struct layout {
  bool col;
  int64_t pad;
} layout;

/* Fills the strides of one [rows, cols] operand of each batch; returns
 * the elements it spans. */
static int64_t place(layout l, int64_t rows, int64_t cols, int64_t batch, bool broadcast, int64_t *off, int64_t *sb,
                     int64_t *sr, int64_t *sc) {
  int64_t ld = (l.col ? rows : cols) + l.pad;
  *off = 3;
  *sr = l.col ? 1 : ld;
  *sc = l.col ? ld : 1;
  int64_t per = ld * (l.col ? cols : rows);
  *sb = broadcast ? 0 : per;
  return 3 + per * (broadcast ? 1 : batch);
}

static double value(int64_t i) { return (double)((i * 7919 + 13) % 17) / 8.0 - 1.0; }

/* The cuda-emu build of variant v's kernel, built once per variant. */
static cuda_emu_fn emu_kernel(cuda_gemm_variant v) {
  static cuda_emu_fn built[8];
  int i = v.f64 * 4 + v.a_along_k * 2 + v.b_along_k;
  if (built[i]) return built[i];
  char *src = NULL, err[4096];
  assert_int_equal(cuda_gemm_print(v, "kiln_emu_kernel", &src, err, sizeof err), KILN_OK);
  cuda_launch_rule rule;
  cuda_gemm_launch_rule(&rule);
  int st = cuda_emu_compile_source("gemm_test", src, 4, &rule, &rt_cuda_emu_launcher, &built[i], err, sizeof err);
  if (st != KILN_OK) fail_msg("%s\n%s", err, src);
  free(src);
  return built[i];
}

/* Builds, runs and checks C = A·B for one spec; A and B hold values in
 * [-1, 1] where the spec reads them. */
static void check_product(bool f64, int64_t batch, int64_t m, int64_t n, int64_t k, layout la, layout lb,
                          bool a_broadcast) {
  cuda_gemm_spec s = {.f64 = f64, .batch = batch, .m = m, .n = n, .k = k};
  int64_t na = place(la, m, k, batch, a_broadcast, &s.a_off, &s.a_b, &s.a_m, &s.a_k);
  int64_t nb = place(lb, k, n, batch, false, &s.b_off, &s.b_b, &s.b_k, &s.b_n);
  int64_t nc = place((layout){false, 2}, m, n, batch, false, &s.c_off, &s.c_b, &s.c_m, &s.c_n);
  size_t esz = f64 ? 8 : 4;
  char *a = malloc((size_t)na * esz), *b = malloc((size_t)nb * esz), *c = malloc((size_t)nc * esz);
  assert_non_null(a), assert_non_null(b), assert_non_null(c);
  for (int64_t i = 0; i < na; i++) f64 ? (((double *)a)[i] = value(i)) : (((float *)a)[i] = (float)value(i));
  for (int64_t i = 0; i < nb; i++) f64 ? (((double *)b)[i] = value(i + 5)) : (((float *)b)[i] = (float)value(i + 5));
  for (int64_t i = 0; i < nc; i++) f64 ? (((double *)c)[i] = NAN) : (((float *)c)[i] = NAN);

  char err[4096];
  int64_t params[CUDA_GEMM_NPARAMS];
  assert_int_equal(cuda_gemm_params(&s, params, err, sizeof err), KILN_OK);
  void *bufs[4] = {a, b, c, params};
  emu_kernel(cuda_gemm_variant_of(&s))(bufs, 0, cuda_gemm_tiles(&s));
  assert_int_equal(cuda_gemm_tiles(&s), batch * ((m + 63) / 64) * ((n + 63) / 64));

  for (int64_t bt = 0; bt < batch; bt++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double want = 0, mag = 0;
        for (int64_t q = 0; q < k; q++) {
          int64_t ia = s.a_off + bt * s.a_b + i * s.a_m + q * s.a_k, ib = s.b_off + bt * s.b_b + q * s.b_k + j * s.b_n;
          double x = f64 ? ((double *)a)[ia] : ((float *)a)[ia], y = f64 ? ((double *)b)[ib] : ((float *)b)[ib];
          want += x * y, mag += fabs(x * y);
        }
        int64_t ic = s.c_off + bt * s.c_b + i * s.c_m + j * s.c_n;
        double got = f64 ? ((double *)c)[ic] : ((float *)c)[ic];
        /* a K-term dot product in the type's precision: |error| <= K·eps·sum|x·y| */
        double bound = (double)(k + 1) * (f64 ? 2.3e-16 : 1.2e-7) * mag;
        if (!(fabs(got - want) <= bound))
          fail_msg("%s batch %lld %lldx%lldx%lld: C[%lld][%lld][%lld] = %.17g, want %.17g (bound %.3g)",
                   f64 ? "f64" : "f32", (long long)batch, (long long)m, (long long)n, (long long)k, (long long)bt,
                   (long long)i, (long long)j, got, want, bound);
      }
  /* nothing written outside C: the padding of each row stays NaN */
  for (int64_t bt = 0; bt < batch; bt++)
    for (int64_t i = 0; i < m; i++) {
      int64_t ic = s.c_off + bt * s.c_b + i * s.c_m + n;
      assert_true(isnan(f64 ? ((double *)c)[ic] : ((float *)c)[ic]));
    }
  free(a), free(b), free(c);
}

static const layout ROW = {false, 0}, COL = {true, 0}, ROW_PAD = {false, 5}, COL_PAD = {true, 3};

static void sizes_around_the_tile(void **state) {
  (void)state;
  require_emu();
  static const int64_t shapes[][3] = {{1, 1, 1}, {5, 3, 7}, {64, 64, 16}, {65, 63, 17}, {130, 70, 33}, {3, 129, 0}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    check_product(false, 1, shapes[i][0], shapes[i][1], shapes[i][2], ROW, ROW, false);
}

static void every_operand_layout(void **state) {
  (void)state;
  require_emu();
  check_product(false, 1, 67, 45, 37, COL, ROW, false);
  check_product(false, 1, 67, 45, 37, ROW_PAD, COL, false);
  check_product(false, 1, 67, 45, 37, COL_PAD, COL_PAD, false);
}

static void f64_and_batches(void **state) {
  (void)state;
  require_emu();
  check_product(true, 1, 70, 66, 40, ROW, COL, false);
  check_product(false, 3, 20, 70, 18, ROW, ROW, true); /* A broadcast over the batch */
  check_product(true, 2, 65, 9, 5, COL, ROW_PAD, false);
}

static void bad_specs_are_errors(void **state) {
  (void)state;
  char err[256];
  int64_t p[CUDA_GEMM_NPARAMS];
  cuda_gemm_spec s = {.batch = 1, .m = 4, .n = 4, .k = 4, .a_m = 4, .a_k = 1, .b_k = 4, .b_n = 1, .c_m = 4, .c_n = 1};
  cuda_gemm_spec bad = s;
  bad.m = 0;
  assert_int_equal(cuda_gemm_params(&bad, p, err, sizeof err), KILN_ERR_ARG);
  assert_non_null(strstr(err, "bad shape or strides"));
  bad = s;
  bad.b_n = -1;
  assert_int_equal(cuda_gemm_params(&bad, p, err, sizeof err), KILN_ERR_ARG);
  assert_int_equal(cuda_gemm_params(&s, p, err, sizeof err), KILN_OK);
  /* row-major A (k stride 1) stages along k, row-major B along n */
  cuda_gemm_variant v = cuda_gemm_variant_of(&s);
  assert_true(v.a_along_k && !v.b_along_k && !v.f64);
  char *src = NULL;
  assert_int_equal(cuda_gemm_print(v, NULL, &src, err, sizeof err), KILN_OK);
  assert_non_null(strstr(src, "void __launch_bounds__(256) kiln_gemm("));
  free(src);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_specs_are_errors),
      cmocka_unit_test(sizes_around_the_tile),
      cmocka_unit_test(every_operand_layout),
      cmocka_unit_test(f64_and_batches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
