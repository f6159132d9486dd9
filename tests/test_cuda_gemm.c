/*
 * test_cuda_gemm.c — the CUDA tiled GEMM kernel (codegen_cuda/cuda_gemm.c):
 * printed for a shape and layout, checked by NVRTC (sm_80, compute_90 +
 * ptxas sm_90) and run from the same source under cuda-emu; values
 * against a double-precision reference within the bound of a K-term dot
 * product, for sizes below, at and past the 64 × 64 tile and the 16-deep
 * K step, K = 0, row- and column-major operands, strided and offset
 * views, batches with a broadcast operand, F32 and F64; every epilogue
 * step (operation and operand kind) against the same reference with
 * each step's rounding. Skipped (with a
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
  static cuda_emu_fn with_epilogue; /* (a variant with steps: built each time) */
  int i = v.f64 * 4 + v.a_along_k * 2 + v.b_along_k;
  cuda_emu_fn *slot = v.n_epi ? &with_epilogue : &built[i];
  if (*slot && !v.n_epi) return *slot;
  char *src = NULL, err[4096];
  assert_int_equal(cuda_gemm_print(v, "kiln_emu_kernel", &src, err, sizeof err), KILN_OK);
  cuda_launch_rule rule;
  cuda_gemm_launch_rule(&rule);
  int st = cuda_emu_compile_source("gemm_test", src, cuda_gemm_n_buffers(v), &rule, &rt_cuda_emu_launcher, slot, err,
                                   sizeof err);
  if (st != KILN_OK) fail_msg("%s\n%s", err, src);
  free(src);
  return *slot;
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
  /* epilogue steps: at most CUDA_GEMM_EPI_MAX, each with the operand its operation takes */
  bad = s;
  bad.n_epi = CUDA_GEMM_EPI_MAX + 1;
  assert_int_equal(cuda_gemm_params(&bad, p, err, sizeof err), KILN_ERR_ARG);
  bad = s;
  bad.n_epi = 1;
  bad.epi[0] = (cuda_gemm_epi_step){.op = CUDA_GEMM_EPI_RELU, .operand = CUDA_GEMM_OPND_BUFFER};
  assert_int_equal(cuda_gemm_params(&bad, p, err, sizeof err), KILN_ERR_ARG);
  bad.epi[0] = (cuda_gemm_epi_step){.op = CUDA_GEMM_EPI_ADD, .operand = CUDA_GEMM_OPND_NONE};
  assert_int_equal(cuda_gemm_params(&bad, p, err, sizeof err), KILN_ERR_ARG);
  bad.epi[0] = (cuda_gemm_epi_step){.op = CUDA_GEMM_EPI_ADD, .operand = CUDA_GEMM_OPND_BUFFER, .sm = -1};
  assert_int_equal(cuda_gemm_params(&bad, p, err, sizeof err), KILN_ERR_ARG);
  /* a bias and a scale: one operand buffer each after P, the scale's bits in P */
  cuda_gemm_spec epi = s;
  epi.n_epi = 2;
  epi.epi[0] = (cuda_gemm_epi_step){.op = CUDA_GEMM_EPI_ADD, .operand = CUDA_GEMM_OPND_BUFFER, .off = 2, .sn = 1};
  epi.epi[1] = (cuda_gemm_epi_step){.op = CUDA_GEMM_EPI_MUL, .operand = CUDA_GEMM_OPND_VALUE, .value = 0.25};
  assert_int_equal(cuda_gemm_params(&epi, p, err, sizeof err), KILN_OK);
  double bits;
  memcpy(&bits, &p[17 + 4], sizeof bits);
  assert_true(p[17] == 2 && p[17 + 3] == 1 && bits == 0.25);
  v = cuda_gemm_variant_of(&epi);
  assert_int_equal(cuda_gemm_n_buffers(v), 6);
  assert_int_equal(cuda_gemm_print(v, NULL, &src, err, sizeof err), KILN_OK);
  assert_non_null(strstr(src, "const T *__restrict__ E1, long long start"));
  assert_non_null(strstr(src, "v = v * x1;"));
  free(src);
  cuda_gemm_variant badv = v;
  badv.epi_op[1] = 42; /* not an operation: refused, nothing printed */
  assert_int_equal(cuda_gemm_print(badv, NULL, &src, err, sizeof err), KILN_ERR_ARG);
  assert_null(src);
}

/* A product with each epilogue operation, its operands as the runtime
 * passes them (a row, a column, a tile with batch stride, a value),
 * against the double reference: each step's rounding added to the
 * product's bound (an RDIV's by the derivative of x / acc). */
static void epilogue_steps(void **state) {
  (void)state;
  require_emu();
  const int64_t batch = 2, m = 67, n = 45, k = 19, ld = n + 3;
  cuda_gemm_spec s = {.batch = batch, .m = m, .n = n, .k = k, .a_b = m * k, .a_m = k, .a_k = 1,
                      .b_b = k * n, .b_k = n, .b_n = 1, .c_b = m * n, .c_m = n, .c_n = 1};
  float *a = malloc(sizeof(float) * (size_t)(batch * m * k)), *b = malloc(sizeof(float) * (size_t)(batch * k * n));
  float *c = malloc(sizeof(float) * (size_t)(batch * m * n)), *tile = malloc(sizeof(float) * (size_t)(batch * m * ld));
  float row[45], col[67];
  assert_non_null(a), assert_non_null(b), assert_non_null(c), assert_non_null(tile);
  for (int64_t i = 0; i < batch * m * k; i++) a[i] = (float)value(i);
  for (int64_t i = 0; i < batch * k * n; i++) b[i] = (float)value(i + 5);
  for (int64_t i = 0; i < batch * m * ld; i++) tile[i] = (float)value(i + 2);
  for (int64_t i = 0; i < n; i++) row[i] = (float)value(i + 1);
  for (int64_t i = 0; i < m; i++) col[i] = 1.5f + (float)value(i + 3) * 0.5f; /* in [1, 2]: a divisor */
  const cuda_gemm_epi_step ROWV = {.operand = CUDA_GEMM_OPND_BUFFER, .sn = 1},
                           COLV = {.operand = CUDA_GEMM_OPND_BUFFER, .sm = 1},
                           TILEV = {.operand = CUDA_GEMM_OPND_BUFFER, .off = 1, .sb = m * ld, .sm = ld, .sn = 1},
                           VAL = {.operand = CUDA_GEMM_OPND_VALUE, .value = 3.0}, NONE = {0};
  /* each case: 4 steps (op, operand) */
  static const unsigned char ops[3][4] = {
      {CUDA_GEMM_EPI_ADD, CUDA_GEMM_EPI_RELU, CUDA_GEMM_EPI_SUB, CUDA_GEMM_EPI_MUL},
      {CUDA_GEMM_EPI_RSUB, CUDA_GEMM_EPI_DIV, CUDA_GEMM_EPI_MAXIMUM, CUDA_GEMM_EPI_MINIMUM},
      {CUDA_GEMM_EPI_ADD, CUDA_GEMM_EPI_RDIV, CUDA_GEMM_EPI_ADD, CUDA_GEMM_EPI_MUL},
  };
  const cuda_gemm_epi_step opnd[3][4] = {{ROWV, NONE, TILEV, VAL}, {VAL, COLV, ROWV, TILEV}, {VAL, VAL, TILEV, COLV}};
  for (int cs = 0; cs < 3; cs++) {
    s.n_epi = 4;
    const void *e[4];
    for (int i = 0; i < 4; i++) {
      s.epi[i] = opnd[cs][i];
      s.epi[i].op = ops[cs][i];
      e[i] = s.epi[i].operand == CUDA_GEMM_OPND_BUFFER ? (s.epi[i].sn ? (s.epi[i].sm ? (void *)tile : row) : col) : NULL;
    }
    char err[4096];
    int64_t params[CUDA_GEMM_NPARAMS];
    assert_int_equal(cuda_gemm_params(&s, params, err, sizeof err), KILN_OK);
    void *bufs[8] = {a, b, c, params, (void *)e[0], (void *)e[1], (void *)e[2], (void *)e[3]};
    emu_kernel(cuda_gemm_variant_of(&s))(bufs, 0, cuda_gemm_tiles(&s));
    for (int64_t bt = 0; bt < batch; bt++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double v = 0, mag = 0;
          for (int64_t q = 0; q < k; q++) {
            double x = (double)a[bt * m * k + i * k + q] * b[bt * k * n + q * n + j];
            v += x, mag += fabs(x);
          }
          double err_v = (double)(k + 1) * 1.2e-7 * mag, eps = 1.2e-7;
          bool skip = false;
          for (int st = 0; st < 4; st++) {
            const cuda_gemm_epi_step *p = &s.epi[st];
            double x = p->operand == CUDA_GEMM_OPND_VALUE ? p->value
                       : p->operand == CUDA_GEMM_OPND_NONE ? 0
                       : e[st] == tile                     ? tile[1 + bt * m * ld + i * ld + j]
                       : e[st] == row                      ? row[j]
                                                           : col[i];
            switch (p->op) {
            case CUDA_GEMM_EPI_ADD: v += x; break;
            case CUDA_GEMM_EPI_SUB: v -= x; break;
            case CUDA_GEMM_EPI_RSUB: v = x - v; break;
            case CUDA_GEMM_EPI_MUL: v *= x, err_v *= fabs(x); break;
            case CUDA_GEMM_EPI_DIV: v /= x, err_v /= fabs(x); break;
            case CUDA_GEMM_EPI_RDIV:
              skip |= fabs(v) <= 2 * err_v; /* near a pole: no useful bound */
              err_v = fabs(x) * err_v / (fabs(v) * (fabs(v) - err_v));
              v = x / v;
              break;
            case CUDA_GEMM_EPI_RELU: v = v > 0 ? v : 0; break;
            case CUDA_GEMM_EPI_MAXIMUM: v = v > x ? v : x; break;
            default: v = v < x ? v : x; break;
            }
            err_v += eps * fabs(v); /* the step's rounding */
          }
          float got = c[bt * m * n + i * n + j];
          if (!skip && !(fabs(got - v) <= err_v + 1e-30))
            fail_msg("case %d: C[%lld][%lld][%lld] = %.9g, want %.9g (bound %.3g)", cs, (long long)bt, (long long)i,
                     (long long)j, got, v, err_v);
        }
  }
  free(a), free(b), free(c), free(tile);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_specs_are_errors),
      cmocka_unit_test(sizes_around_the_tile),
      cmocka_unit_test(every_operand_layout),
      cmocka_unit_test(f64_and_batches),
      cmocka_unit_test(epilogue_steps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
