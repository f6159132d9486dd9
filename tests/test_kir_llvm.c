/*
 * test_kir_llvm.c — kernel IR builder/verifier and the LLVM CPU backend.
 *
 * Kernels are built by hand with the kir builder, compiled with
 * llvm_compile and run on real arrays; results are checked against values
 * computed here in C (libm for math, reference F16/BF16 conversions written
 * with frexp/ldexp/rint, independent of the bit tricks the backend uses).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kir.h"
#include "llvm_backend.h"
#include "llvm_internal.h"
#include "text_util.h"

/* ------------------------------------------------------------- helpers */

/* Compiles k (the optimised LLVM IR into *ir when ir is not NULL, to
 * free) or fails the test with the compiler's message. */
static llvm_kernel_fn compile_text(const kir_kernel *k, char **ir) {
  char err[512] = "";
  llvm_kernel_fn fn = NULL;
  int rc = llvm_compile(k, &fn, ir, err, sizeof err);
  if (rc != KILN_OK) fail_msg("llvm_compile(%s) = %d: %s", k->name, rc, err);
  assert_non_null(fn);
  return fn;
}

static llvm_kernel_fn compile_ok(const kir_kernel *k) { return compile_text(k, NULL); }

static int idx_const(kir_kernel *k, int64_t v) { return kir_const_i(k, KIR_INDEX, v); }

/* Builds out[i] = op(a[i] [, b[i]]) for i < n (parallel range). Operands of
 * type t, result of type rt. */
static void build_elementwise(kir_kernel *k, kir_op op, kir_type t, kir_type rt, int arity, int64_t n) {
  kir_init(k, kir_op_name(op));
  int out = kir_param(k, rt, true);
  int a = kir_param(k, t, false);
  int b = arity > 1 ? kir_param(k, t, false) : -1;
  int i = kir_range(k, n, true);
  int x = kir_load(k, a, i);
  int y = arity > 1 ? kir_load(k, b, i) : -1;
  kir_store(k, out, i, kir_alu(k, op, rt, x, y, -1));
  kir_end(k, i);
}

static void run_elementwise(kir_op op, kir_type t, kir_type rt, int arity, int64_t n, void *out,
                            const void *a, const void *b) {
  kir_kernel k;
  build_elementwise(&k, op, t, rt, arity, n);
  llvm_kernel_fn fn = compile_ok(&k);
  void *bufs[3] = {out, (void *)a, (void *)b};
  fn(bufs, 0, n);
  kir_free(&k);
}

/* Distance in units in the last place; NaN matches NaN only. */
static int64_t ulps32(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
  int32_t i, j;
  memcpy(&i, &a, 4);
  memcpy(&j, &b, 4);
  int64_t x = i < 0 ? (int64_t)INT32_MIN - i : i, y = j < 0 ? (int64_t)INT32_MIN - j : j;
  return x > y ? x - y : y - x;
}

static int64_t ulps64(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
  int64_t i, j;
  memcpy(&i, &a, 8);
  memcpy(&j, &b, 8);
  if (i < 0) i = INT64_MIN - i;
  if (j < 0) j = INT64_MIN - j;
  return i > j ? (int64_t)((uint64_t)i - (uint64_t)j) : (int64_t)((uint64_t)j - (uint64_t)i);
}

static uint32_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 32);
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ------------------------------------------- reference half conversions */

/* Rounds finite |a| to `mant` explicit mantissa bits and exponent bias
 * `bias` (nearest even, via rint), returning the encoding without sign. */
static uint32_t ref_round(double a, int mant, int bias) {
  int emax = 2 * bias + 1; /* all-ones exponent */
  double min_normal = ldexp(1.0, 1 - bias);
  if (a < min_normal) return (uint32_t)rint(ldexp(a, bias - 1 + mant)); /* 2^mant → smallest normal */
  int e;
  frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  double q = rint(ldexp(a, mant + 1 - e)); /* in [2^mant, 2^(mant+1)] */
  int biased = e - 1 + bias;
  if (q == ldexp(1.0, mant + 1)) {
    q = ldexp(1.0, mant);
    biased++;
  }
  if (biased >= emax) return (uint32_t)emax << mant; /* overflow: inf */
  return ((uint32_t)biased << mant) | ((uint32_t)q - (1u << mant));
}

static uint16_t ref_to_half(float f, int mant, int bias) {
  uint16_t sign = signbit(f) ? (uint16_t)(1u << (mant + (bias == 15 ? 5 : 8))) : 0;
  int ebits = bias == 15 ? 5 : 8;
  uint32_t inf = ((1u << ebits) - 1) << mant;
  if (isnan(f)) return (uint16_t)(sign | inf | (1u << (mant - 1)));
  if (isinf(f)) return (uint16_t)(sign | inf);
  return (uint16_t)(sign | ref_round(fabs((double)f), mant, bias));
}

static uint16_t ref_f16(float f) { return ref_to_half(f, 10, 15); }
static uint16_t ref_bf16(float f) { return ref_to_half(f, 7, 127); }

static float ref_from_half(uint16_t h, int mant, int bias) {
  int ebits = bias == 15 ? 5 : 8;
  int sign = h >> (mant + ebits), e = (h >> mant) & ((1 << ebits) - 1);
  double m = h & ((1u << mant) - 1);
  double v;
  if (e == (1 << ebits) - 1) v = m ? NAN : INFINITY;
  else if (e == 0) v = ldexp(m, 1 - bias - mant);
  else v = ldexp(m + ldexp(1.0, mant), e - bias - mant);
  return (float)(sign ? -v : v);
}

static bool half_is_nan(uint16_t h, int mant) {
  uint16_t e = (uint16_t)(h & 0x7fff) >> mant, emax = mant == 10 ? 31 : 255;
  return e == emax && (h & ((1u << mant) - 1));
}

/* ---------------------------------------------------------------- tests */

/* out[r, c] = a[off + r*sa0 + c*sa1] + b[c]: F32 with strided indexing. */
static void test_add_strided(void **state) {
  (void)state;
  enum { R = 5, C = 7, SA0 = 16, SA1 = 2, OFF = 3 };
  float a[OFF + R * SA0], b[C], out[R * C];
  for (int i = 0; i < OFF + R * SA0; i++) a[i] = (float)i * 0.5f - 3.0f;
  for (int i = 0; i < C; i++) b[i] = (float)(i * i) + 0.25f;
  kir_kernel k;
  kir_init(&k, "add strided");
  int po = kir_param(&k, KIR_F32, true), pa = kir_param(&k, KIR_F32, false);
  int pb = kir_param(&k, KIR_F32, false);
  int r = kir_range(&k, R, true);
  int ra = kir_alu(&k, KIR_MUL, KIR_INDEX, r, idx_const(&k, SA0), -1);
  int ra2 = kir_alu(&k, KIR_ADD, KIR_INDEX, ra, idx_const(&k, OFF), -1);
  int ro = kir_alu(&k, KIR_MUL, KIR_INDEX, r, idx_const(&k, C), -1);
  int c = kir_range(&k, C, false);
  int ia = kir_alu(&k, KIR_ADD, KIR_INDEX, ra2, kir_alu(&k, KIR_MUL, KIR_INDEX, c, idx_const(&k, SA1), -1), -1);
  int sum = kir_alu(&k, KIR_ADD, KIR_F32, kir_load(&k, pa, ia), kir_load(&k, pb, c), -1);
  kir_store(&k, po, kir_alu(&k, KIR_ADD, KIR_INDEX, ro, c, -1), sum);
  kir_end(&k, c);
  kir_end(&k, r);
  assert_null(kir_verify(&k));
  llvm_kernel_fn fn = compile_ok(&k);
  void *bufs[3] = {out, a, b};
  fn(bufs, 0, R);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) assert_true(out[i * C + j] == a[OFF + i * SA0 + j * SA1] + b[j]);
  kir_free(&k);
}

static int32_t ref_div32(int32_t a, int32_t d, bool div) {
  if (d == 0) return 0;
  if (d == -1) return div ? (int32_t)(0u - (uint32_t)a) : 0;
  return div ? a / d : a % d;
}

static void test_int_div(void **state) {
  (void)state;
  enum { N = 12 };
  int32_t a[N] = {7, -7, 7, -7, 5, INT32_MIN, INT32_MIN, INT32_MAX, 0, 9, -9, 123456};
  int32_t d[N] = {2, 2, -2, -2, 0, -1, 1, -1, 0, 0, 4, -1000};
  int32_t q[N], m[N];
  run_elementwise(KIR_DIV, KIR_I32, KIR_I32, 2, N, q, a, d);
  run_elementwise(KIR_MOD, KIR_I32, KIR_I32, 2, N, m, a, d);
  for (int i = 0; i < N; i++) {
    assert_int_equal(q[i], ref_div32(a[i], d[i], true));
    assert_int_equal(m[i], ref_div32(a[i], d[i], false));
  }
  int8_t a8[4] = {-128, -128, 100, -7}, d8[4] = {-1, 0, 7, 2}, q8[4], m8[4];
  run_elementwise(KIR_DIV, KIR_I8, KIR_I8, 2, 4, q8, a8, d8);
  run_elementwise(KIR_MOD, KIR_I8, KIR_I8, 2, 4, m8, a8, d8);
  assert_int_equal(q8[0], -128);
  assert_int_equal(q8[1], 0);
  assert_int_equal(q8[2], 14);
  assert_int_equal(q8[3], -3);
  assert_int_equal(m8[0], 0);
  assert_int_equal(m8[1], 0);
  assert_int_equal(m8[2], 2);
  assert_int_equal(m8[3], -1);
  uint8_t au[4] = {200, 255, 9, 250}, du[4] = {7, 0, 255, 100}, qu[4], mu[4], mx[4];
  run_elementwise(KIR_DIV, KIR_U8, KIR_U8, 2, 4, qu, au, du);
  run_elementwise(KIR_MOD, KIR_U8, KIR_U8, 2, 4, mu, au, du);
  run_elementwise(KIR_MAX, KIR_U8, KIR_U8, 2, 4, mx, au, du);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(qu[i], du[i] ? au[i] / du[i] : 0);
    assert_int_equal(mu[i], du[i] ? au[i] % du[i] : 0);
    assert_int_equal(mx[i], au[i] > du[i] ? au[i] : du[i]);
  }
  int64_t a64[3] = {INT64_MIN, INT64_MIN, -5}, d64[3] = {-1, 0, 3}, q64[3];
  run_elementwise(KIR_DIV, KIR_I64, KIR_I64, 2, 3, q64, a64, d64);
  assert_true(q64[0] == INT64_MIN && q64[1] == 0 && q64[2] == -1);
}

typedef struct math_case {
  kir_op op;
  double (*f)(double);
  double (*f2)(double, double);
  int tol32, tol64; /* ulps */
} math_case;

static const math_case math_cases[] = {
    {KIR_SQRT, sqrt, NULL, 0, 0},   {KIR_EXP, exp, NULL, 2, 1},     {KIR_EXP2, exp2, NULL, 2, 1},
    {KIR_LOG, log, NULL, 2, 1},     {KIR_LOG2, log2, NULL, 2, 1},   {KIR_LOG1P, log1p, NULL, 2, 1},
    {KIR_EXPM1, expm1, NULL, 2, 1}, {KIR_SIN, sin, NULL, 2, 1},     {KIR_COS, cos, NULL, 2, 1},
    {KIR_TAN, tan, NULL, 3, 1},     {KIR_TANH, tanh, NULL, 2, 1},   {KIR_ERF, erf, NULL, 2, 1},
    {KIR_FLOOR, floor, NULL, 0, 0}, {KIR_CEIL, ceil, NULL, 0, 0},   {KIR_RINT, rint, NULL, 0, 0},
    {KIR_TRUNC, trunc, NULL, 0, 0}, {KIR_POW, NULL, pow, 3, 1},     {KIR_ATAN2, NULL, atan2, 3, 1},
};

enum { NM = 48 };

static void math_inputs(double *x, double *y) {
  static const double special[] = {0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 1.0, -1.0, 88.5, -100.0, INFINITY, NAN};
  int ns = (int)(sizeof special / sizeof *special);
  uint64_t s = 42;
  for (int i = 0; i < NM; i++) {
    x[i] = i < ns ? special[i] : ((double)lcg(&s) / 4294967296.0 - 0.5) * 20.0;
    y[i] = ((double)lcg(&s) / 4294967296.0 - 0.3) * 6.0;
  }
}

static void check_math_f32(const math_case *mc, const double *x, const double *y) {
  float xf[NM], yf[NM], out[NM];
  for (int i = 0; i < NM; i++) xf[i] = (float)x[i], yf[i] = (float)y[i];
  int arity = mc->f2 ? 2 : 1;
  run_elementwise(mc->op, KIR_F32, KIR_F32, arity, NM, out, xf, yf);
  for (int i = 0; i < NM; i++) {
    float ref = (float)(mc->f2 ? mc->f2(xf[i], yf[i]) : mc->f(xf[i]));
    if (ulps32(out[i], ref) > mc->tol32)
      fail_msg("%sf(%a, %a) = %a, expected %a", kir_op_name(mc->op), xf[i], yf[i], out[i], ref);
  }
}

static void check_math_f64(const math_case *mc, const double *x, const double *y) {
  double out[NM];
  int arity = mc->f2 ? 2 : 1;
  run_elementwise(mc->op, KIR_F64, KIR_F64, arity, NM, out, x, y);
  for (int i = 0; i < NM; i++) {
    double ref = mc->f2 ? mc->f2(x[i], y[i]) : mc->f(x[i]);
    if (ulps64(out[i], ref) > mc->tol64)
      fail_msg("%s(%a, %a) = %a, expected %a", kir_op_name(mc->op), x[i], y[i], out[i], ref);
  }
}

static void test_math(void **state) {
  (void)state;
  double x[NM], y[NM];
  math_inputs(x, y);
  for (size_t c = 0; c < sizeof math_cases / sizeof *math_cases; c++) {
    check_math_f32(&math_cases[c], x, y);
    check_math_f64(&math_cases[c], x, y);
  }
}

/* Lines of text containing both a and b (each line under 1 KiB). */
static int count_lines_with(const char *text, const char *a, const char *b) {
  int n = 0;
  char line[1024];
  for (const char *p = text; *p;) {
    size_t len = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s", (int)len, p);
    n += strstr(line, a) && strstr(line, b);
    p += len + (p[len] == '\n');
  }
  return n;
}

/* A long dependent chain per element (ten tanh, as W2 of bench/) is
 * interleaved 4 ways: four times the vector divisions of one chain in the
 * optimised IR; values as computed one element at a time. */
static void test_long_body_interleaved(void **state) {
  (void)state;
  enum { N = 1003 };
  kir_kernel k;
  kir_init(&k, "tanh_chain");
  int out = kir_param(&k, KIR_F32, true), a = kir_param(&k, KIR_F32, false);
  int i = kir_range(&k, N, true), y = kir_load(&k, a, i);
  for (int r = 0; r < 10; r++) {
    y = kir_alu(&k, KIR_ADD, KIR_F32, kir_alu(&k, KIR_MUL, KIR_F32, y, kir_const_f(&k, KIR_F32, 1.0001), -1),
                kir_const_f(&k, KIR_F32, 0.5), -1);
    y = kir_alu(&k, KIR_TANH, KIR_F32, y, -1, -1);
  }
  kir_store(&k, out, i, y);
  kir_end(&k, i);
  char *ir = NULL;
  llvm_kernel_fn fn = compile_text(&k, &ir);
  assert_non_null(ir);
  assert_true(count_text(ir, "fdiv <") >= 40);
  free(ir);
  static float in[N], got[N], single[N];
  for (int j = 0; j < N; j++) in[j] = (float)(j - 500) / 100.0f;
  fn((void *[]){got, in}, 0, N);
  for (int j = 0; j < N; j += 7) {
    fn((void *[]){single, in}, j, j + 1); /* one element: the scalar remainder path */
    assert_int_equal(ulps32(got[j], single[j]), 0);
    double want = in[j];
    for (int r = 0; r < 10; r++) want = tanh((double)(float)((double)(float)(want * (double)1.0001f)) + 0.5);
    assert_true(fabs(got[j] - want) < 1e-5);
  }
  kir_free(&k);
}

/* Short rows: an inner loop of 14 (a CNN's image rows) copied from a
 * padded plane of rows of 16 runs as masked vector loads and stores on an
 * AVX-512 host (llvm_lower.c short_row), not only as 14 scalar copies; every
 * element is written once, the two pad columns of each row untouched. */
static void test_short_rows_masked(void **state) {
  (void)state;
  enum { R = 37, W = 14, P = 16 };
  kir_kernel k;
  kir_init(&k, "short_rows");
  int po = kir_param(&k, KIR_F32, true), pi = kir_param(&k, KIR_F32, false);
  int r = kir_range(&k, R, true), c = kir_range(&k, W, false);
  int src = kir_alu(&k, KIR_ADD, KIR_INDEX, kir_alu(&k, KIR_MUL, KIR_INDEX, r, kir_const_i(&k, KIR_INDEX, P), -1), c, -1);
  int dst = kir_alu(&k, KIR_ADD, KIR_INDEX, kir_alu(&k, KIR_MUL, KIR_INDEX, r, kir_const_i(&k, KIR_INDEX, W), -1), c, -1);
  kir_store(&k, po, dst, kir_alu(&k, KIR_MUL, KIR_F32, kir_load(&k, pi, src), kir_const_f(&k, KIR_F32, 3.0), -1));
  kir_end(&k, c);
  kir_end(&k, r);
  assert_null(kir_verify(&k));
  char *ir = NULL;
  llvm_kernel_fn fn = compile_text(&k, &ir);
  if (llvm_wide_vectors()) /* (a scalar copy of the loop stays for overlapping buffers) */
    assert_true(count_text(ir, "call void @llvm.masked.store") > 0);
  free(ir);
  static float in[R * P], out[R * W + 1];
  for (int j = 0; j < R * P; j++) in[j] = (float)j;
  out[R * W] = -7.0f; /* past the end: not written */
  fn((void *[]){out, in}, 0, R);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < W; j++) assert_true(out[i * W + j] == 3.0f * (float)(i * P + j));
  assert_true(out[R * W] == -7.0f);
  kir_free(&k);
}

/* Pairs in short rows: out[r][2w + d] = in[r][2w + d] * 3 + g[r][w] for
 * d = 0, 1 written out in the body of a loop of 14 (max pooling's
 * gradient after its innermost dim of 2 is unrolled). On an AVX-512 host
 * the pairs are one masked wide load and store with shuffles (the
 * vectorizer's masked interleaved groups, llvm_jit.c), not gathers and
 * scatters; every element is written once. */
static void test_short_row_pairs(void **state) {
  (void)state;
  enum { R = 37, W = 14 };
  kir_kernel k;
  kir_init(&k, "short_row_pairs");
  int po = kir_param(&k, KIR_F32, true), pi = kir_param(&k, KIR_F32, false), pg = kir_param(&k, KIR_F32, false);
  int r = kir_range(&k, R, true), w = kir_range(&k, W, false);
  int row = kir_alu(&k, KIR_MUL, KIR_INDEX, r, idx_const(&k, 2 * W), -1);
  int g = kir_load(&k, pg, kir_alu(&k, KIR_ADD, KIR_INDEX, kir_alu(&k, KIR_MUL, KIR_INDEX, r, idx_const(&k, W), -1), w, -1));
  for (int d = 0; d < 2; d++) {
    int at = kir_alu(&k, KIR_ADD, KIR_INDEX, row,
                     kir_alu(&k, KIR_ADD, KIR_INDEX, kir_alu(&k, KIR_MUL, KIR_INDEX, w, idx_const(&k, 2), -1),
                             idx_const(&k, d), -1), -1);
    int v = kir_alu(&k, KIR_MUL, KIR_F32, kir_load(&k, pi, at), kir_const_f(&k, KIR_F32, 3.0), -1);
    kir_store(&k, po, at, kir_alu(&k, KIR_ADD, KIR_F32, v, g, -1));
  }
  kir_end(&k, w);
  kir_end(&k, r);
  assert_null(kir_verify(&k));
  char *ir = NULL;
  llvm_kernel_fn fn = compile_text(&k, &ir);
  if (llvm_wide_vectors()) {
    assert_int_equal(count_text(ir, "@llvm.masked.gather"), 0);
    assert_int_equal(count_text(ir, "@llvm.masked.scatter"), 0);
    assert_true(count_text(ir, "call void @llvm.masked.store") > 0);
  }
  free(ir);
  static float in[R * 2 * W], gv[R * W], out[R * 2 * W + 1];
  for (int j = 0; j < R * 2 * W; j++) in[j] = (float)j;
  for (int j = 0; j < R * W; j++) gv[j] = (float)(-j) / 4.0f;
  out[R * 2 * W] = -7.0f; /* past the end: not written */
  fn((void *[]){out, in, gv}, 0, R);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < 2 * W; j++)
      assert_true(out[i * 2 * W + j] == 3.0f * (float)(i * 2 * W + j) + gv[i * W + j / 2]);
  assert_true(out[R * 2 * W] == -7.0f);
  kir_free(&k);
}

/* Streaming stores: the optimised IR streams the vector stores of the
 * flagged output (and only those: the counter's stores stay plain) and
 * fences before returning; chunks whose bounds are not multiples of 64
 * are rounded, and still write every element exactly once. */
static void test_streaming_stores(void **state) {
  (void)state;
  enum { N = 4099 };
  kir_kernel k;
  kir_init(&k, "stream");
  int po = kir_param(&k, KIR_F32, true), pc = kir_param(&k, KIR_I32, true), pi = kir_param(&k, KIR_F32, false);
  int i = kir_range(&k, N, true);
  int x = kir_alu(&k, KIR_MUL, KIR_F32, kir_load(&k, pi, i), kir_const_f(&k, KIR_F32, 2.0), -1);
  kir_store_streaming(&k, po, i, kir_alu(&k, KIR_ADD, KIR_F32, x, kir_const_f(&k, KIR_F32, 1.0), -1));
  kir_store(&k, pc, i, kir_alu(&k, KIR_ADD, KIR_I32, kir_load(&k, pc, i), kir_const_i(&k, KIR_I32, 1), -1));
  kir_end(&k, i);
  assert_null(kir_verify(&k));
  char *ir = NULL;
  llvm_kernel_fn fn = compile_text(&k, &ir);
  int vec_stores = count_lines_with(ir, "store <", " x float>"); /* any vector width */
  assert_true(vec_stores > 0);
  assert_int_equal(count_lines_with(ir, " x float>", "!nontemporal"), vec_stores);
  assert_true(count_lines_with(ir, "store <", " x i32>") > 0);
  assert_int_equal(count_lines_with(ir, "x i32>", "!nontemporal"), 0);
  assert_int_equal(count_lines_with(ir, "store float", "!nontemporal"), 0); /* the scalar remainder */
  assert_int_equal(count_text(ir, "fence seq_cst"), 1);
  free(ir);
  float *out = aligned_alloc(64, sizeof(float) * 4160), in[N];
  int32_t cnt[N];
  memset(cnt, 0, sizeof cnt);
  for (int j = 0; j < N; j++) in[j] = (float)j - 2000.5f;
  int64_t bounds[] = {0, 100, 1000, 1001, 1001, 2050, N};
  for (int c = 0; c + 1 < (int)(sizeof bounds / sizeof *bounds); c++) fn((void *[]){out, cnt, in}, bounds[c], bounds[c + 1]);
  for (int j = 0; j < N; j++) {
    assert_int_equal(cnt[j], 1);
    assert_true(out[j] == in[j] * 2.0f + 1.0f);
  }
  free(out);
  kir_free(&k);
}

/* MAX/MIN propagate NaN; comparisons with NaN; fmod; IEEE division. */
static void test_float_alu(void **state) {
  (void)state;
  enum { N = 6 };
  float a[N] = {1.0f, NAN, 2.0f, -0.0f, 7.5f, 1.0f}, b[N] = {2.0f, 1.0f, NAN, 0.0f, -2.0f, 0.0f};
  float mx[N], mn[N], md[N], dv[N];
  uint8_t lt[N], le[N], eq[N], ne[N];
  run_elementwise(KIR_MAX, KIR_F32, KIR_F32, 2, N, mx, a, b);
  run_elementwise(KIR_MIN, KIR_F32, KIR_F32, 2, N, mn, a, b);
  run_elementwise(KIR_MOD, KIR_F32, KIR_F32, 2, N, md, a, b);
  run_elementwise(KIR_DIV, KIR_F32, KIR_F32, 2, N, dv, a, b);
  run_elementwise(KIR_CMPLT, KIR_F32, KIR_BOOL, 2, N, lt, a, b);
  run_elementwise(KIR_CMPLE, KIR_F32, KIR_BOOL, 2, N, le, a, b);
  run_elementwise(KIR_CMPEQ, KIR_F32, KIR_BOOL, 2, N, eq, a, b);
  run_elementwise(KIR_CMPNE, KIR_F32, KIR_BOOL, 2, N, ne, a, b);
  for (int i = 0; i < N; i++) {
    bool nan = isnan(a[i]) || isnan(b[i]);
    assert_true(nan ? isnan(mx[i]) : mx[i] == fmaxf(a[i], b[i]));
    assert_true(nan ? isnan(mn[i]) : mn[i] == fminf(a[i], b[i]));
    assert_int_equal(ulps32(md[i], fmodf(a[i], b[i])), 0);
    assert_int_equal(ulps32(dv[i], a[i] / b[i]), 0);
    assert_int_equal(lt[i], a[i] < b[i]);
    assert_int_equal(le[i], a[i] <= b[i]);
    assert_int_equal(eq[i], a[i] == b[i]);
    assert_int_equal(ne[i], a[i] != b[i]);
  }
  assert_true(signbit(mn[3]) && !signbit(mx[3])); /* min(-0, 0) = -0 */
}

/* Float → int casts truncate; out of range and NaN give INT64_MIN wrapped. */
static int64_t ref_f2i(double v) {
  if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
  return (int64_t)v;
}

static void run_cast(kir_type from, kir_type to, int64_t n, void *out, const void *in) {
  kir_kernel k;
  kir_init(&k, "cast");
  int po = kir_param(&k, to, true), pi = kir_param(&k, from, false);
  int i = kir_range(&k, n, false);
  kir_store(&k, po, i, kir_cast(&k, to, kir_load(&k, pi, i)));
  kir_end(&k, i);
  llvm_kernel_fn fn = compile_ok(&k);
  void *bufs[2] = {out, (void *)in};
  fn(bufs, 0, 0);
  kir_free(&k);
}

static void test_casts(void **state) {
  (void)state;
  enum { N = 10 };
  float x[N] = {1.9f, -1.9f, 300.0f, -1.0f, NAN, 3e9f, -3e9f, 1e20f, INFINITY, -0.0f};
  int32_t i32[N];
  uint8_t u8[N], bo[N];
  int64_t i64[N];
  double f64[N];
  run_cast(KIR_F32, KIR_I32, N, i32, x);
  run_cast(KIR_F32, KIR_U8, N, u8, x);
  run_cast(KIR_F32, KIR_I64, N, i64, x);
  run_cast(KIR_F32, KIR_BOOL, N, bo, x);
  run_cast(KIR_F32, KIR_F64, N, f64, x);
  for (int i = 0; i < N; i++) {
    assert_int_equal(i32[i], (int32_t)(uint32_t)ref_f2i(x[i]));
    assert_int_equal(u8[i], (uint8_t)ref_f2i(x[i]));
    assert_true(i64[i] == ref_f2i(x[i]));
    assert_int_equal(bo[i], x[i] != 0);
    assert_int_equal(ulps64(f64[i], x[i]), 0);
  }
  uint8_t u[4] = {0, 1, 200, 255};
  float uf[4];
  int16_t us[4];
  int8_t s8[4] = {-1, -128, 5, 127};
  int64_t s64[4]; /* I8 → I64 sign-extends */
  run_cast(KIR_U8, KIR_F32, 4, uf, u);
  run_cast(KIR_U8, KIR_I16, 4, us, u);
  run_cast(KIR_I8, KIR_I64, 4, s64, s8);
  for (int i = 0; i < 4; i++) {
    assert_true(uf[i] == (float)u[i] && us[i] == u[i]);
    assert_true(s64[i] == s8[i]);
  }
}

/* F32 → F16/BF16 (round to nearest even) and all 65536 patterns back. */
static void check_to_half(kir_type t, const float *x, int n) {
  uint16_t *h = malloc((size_t)n * 2);
  run_cast(KIR_F32, t, n, h, x);
  int mant = t == KIR_F16 ? 10 : 7;
  for (int i = 0; i < n; i++) {
    uint16_t ref = t == KIR_F16 ? ref_f16(x[i]) : ref_bf16(x[i]);
    if (isnan(x[i])) assert_true(half_is_nan(h[i], mant));
    else if (h[i] != ref) fail_msg("%s(%a) = 0x%04x, expected 0x%04x", kir_type_name(t), x[i], h[i], ref);
  }
  free(h);
}

static void check_from_half(kir_type t) {
  uint16_t *h = malloc(65536 * 2);
  float *f = malloc(65536 * 4);
  for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  run_cast(t, KIR_F32, 65536, f, h);
  int mant = t == KIR_F16 ? 10 : 7, bias = t == KIR_F16 ? 15 : 127;
  for (int i = 0; i < 65536; i++) {
    float ref = ref_from_half((uint16_t)i, mant, bias);
    bool sign_ok = isnan(ref) || !signbit(f[i]) == !signbit(ref);
    if (ulps32(f[i], ref) != 0 || !sign_ok)
      fail_msg("%s 0x%04x -> %a, expected %a", kir_type_name(t), i, f[i], ref);
  }
  free(h);
  free(f);
}

static void test_half_conversions(void **state) {
  (void)state;
  enum { N = 4096 };
  static const float special[] = {
      0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f,
      0x3p-25f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 0x1p-14f, 0x1.ffcp-15f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f,
      0x1.fep127f, 0x1.ffp127f, 3.4e38f, 0x1p-133f, 0x1p-134f, 0x1p-149f, 1e-40f, INFINITY, -INFINITY,
      NAN, 0.1f, 1e5f, -7.77e-3f};
  int ns = (int)(sizeof special / sizeof *special);
  float *x = malloc(N * sizeof *x);
  uint64_t s = 7;
  for (int i = 0; i < N; i++) {
    uint32_t r = lcg(&s);
    /* mix of raw bit patterns and ties for both formats */
    if (i < ns) x[i] = special[i];
    else if (i % 3 == 0) x[i] = bits_f32(r);
    else if (i % 3 == 1) x[i] = bits_f32((r & 0xffff0000u) | 0x8000u); /* bf16 tie */
    else x[i] = bits_f32((r & 0x8fffe000u) | 0x38001000u);             /* f16 ties, near range */
  }
  check_to_half(KIR_F16, x, N);
  check_to_half(KIR_BF16, x, N);
  check_from_half(KIR_F16);
  check_from_half(KIR_BF16);
  free(x);
  /* CONSTs of F16/BF16 round as a CAST from F32 does. */
  kir_kernel k;
  kir_init(&k, "half consts");
  int ph = kir_param(&k, KIR_F16, true), pb = kir_param(&k, KIR_BF16, true);
  int zero = idx_const(&k, 0);
  kir_store(&k, ph, zero, kir_const_f(&k, KIR_F16, 1.0 / 3.0));
  kir_store(&k, pb, zero, kir_const_f(&k, KIR_BF16, 1.0 / 3.0));
  llvm_kernel_fn fn = compile_ok(&k);
  uint16_t ch = 0, cb = 0;
  void *bufs[2] = {&ch, &cb};
  fn(bufs, 0, 0);
  assert_int_equal(ch, ref_f16((float)(1.0 / 3.0)));
  assert_int_equal(cb, ref_bf16((float)(1.0 / 3.0)));
  kir_free(&k);
  /* F16 → BF16 goes through F32 exactly. */
  uint16_t h[3] = {0x3c01, 0x7bff, 0x0001}, bf[3];
  run_cast(KIR_F16, KIR_BF16, 3, bf, h);
  for (int i = 0; i < 3; i++) assert_int_equal(bf[i], ref_bf16(ref_from_half(h[i], 10, 15)));
}

/* BOOL: bytes in memory (any nonzero byte is true), 0/1 out. */
static void test_bool(void **state) {
  (void)state;
  enum { N = 8 };
  uint8_t in[N] = {0, 1, 2, 0, 255, 1, 0, 1}, nb[N], fb[N];
  float a[N] = {0.0f, 1.0f, -0.0f, NAN, 2.0f, 0.5f, -3.0f, 0.0f}, outf[N];
  kir_kernel k;
  kir_init(&k, "bool");
  int po = kir_param(&k, KIR_BOOL, true), pf = kir_param(&k, KIR_F32, true);
  int pb = kir_param(&k, KIR_BOOL, true), pi = kir_param(&k, KIR_BOOL, false);
  int pa = kir_param(&k, KIR_F32, false);
  int t = kir_const_i(&k, KIR_BOOL, 1);
  int i = kir_range(&k, N, false);
  int b = kir_load(&k, pi, i);
  kir_store(&k, po, i, kir_alu(&k, KIR_XOR, KIR_BOOL, b, t, -1));
  int x = kir_load(&k, pa, i);
  int f = kir_alu(&k, KIR_WHERE, KIR_F32, b, x, kir_cast(&k, KIR_F32, b));
  kir_store(&k, pf, i, f);
  kir_store(&k, pb, i, kir_cast(&k, KIR_BOOL, x));
  kir_end(&k, i);
  llvm_kernel_fn fn = compile_ok(&k);
  void *bufs[5] = {nb, outf, fb, in, a};
  fn(bufs, 0, 0);
  for (int j = 0; j < N; j++) {
    assert_int_equal(nb[j], in[j] == 0);
    assert_int_equal(fb[j], a[j] != 0);
    assert_int_equal(ulps32(outf[j], in[j] ? a[j] : 0.0f), 0);
  }
  kir_free(&k);
}

/* out[r] = sum_c x[r, c] with an ACC; row count split as the runtime would. */
static void test_sum_acc(void **state) {
  (void)state;
  enum { R = 9, C = 33 };
  double x[R * C], out[R];
  for (int i = 0; i < R * C; i++) x[i] = sin(i) * 10.0;
  kir_kernel k;
  kir_init(&k, "sum");
  int po = kir_param(&k, KIR_F64, true), px = kir_param(&k, KIR_F64, false);
  int r = kir_range(&k, R, true);
  int acc = kir_acc(&k, KIR_F64, kir_const_f(&k, KIR_F64, 0.0));
  int base = kir_alu(&k, KIR_MUL, KIR_INDEX, r, idx_const(&k, C), -1);
  int c = kir_range(&k, C, false);
  int v = kir_load(&k, px, kir_alu(&k, KIR_ADD, KIR_INDEX, base, c, -1));
  kir_acc_set(&k, acc, kir_alu(&k, KIR_ADD, KIR_F64, acc, v, -1));
  kir_end(&k, c);
  kir_store(&k, po, r, acc);
  kir_end(&k, r);
  assert_null(kir_verify(&k));
  llvm_kernel_fn fn = compile_ok(&k);
  void *bufs[2] = {out, x};
  fn(bufs, 0, R);
  for (int i = 0; i < R; i++) {
    double s = 0.0;
    for (int j = 0; j < C; j++) s += x[i * C + j];
    assert_true(out[i] == s);
  }
  kir_free(&k);
}

static void expect_broken(kir_kernel *k, const char *what);

/* A LOCAL row of F64 partial sums (passes/lower.c's column reductions):
 * out[c] = sum_r x[r, c] for C columns, the row set, updated two rows a
 * pass, then stored; split over two column blocks as two threads would.
 * The LOCAL prints as `local ptr f64[C]`; splittable (its stores are per
 * thread). */
static void test_local_row(void **state) {
  (void)state;
  enum { R = 7, C = 40, H = C / 2 };
  double x[R * C], out[C];
  for (int i = 0; i < R * C; i++) x[i] = sin(i) * 10.0;
  kir_kernel k;
  kir_init(&k, "local row");
  int po = kir_param(&k, KIR_F64, true), px = kir_param(&k, KIR_F64, false);
  int b = kir_range(&k, 2, true);
  int base = kir_alu(&k, KIR_MUL, KIR_INDEX, b, idx_const(&k, H), -1);
  int row = kir_local(&k, KIR_F64, H);
  int c = kir_range(&k, H, false);
  kir_store(&k, row, c, kir_const_f(&k, KIR_F64, 0.0));
  kir_end(&k, c);
  int r = kir_range(&k, R, false);
  c = kir_range(&k, H, false);
  int at = kir_alu(&k, KIR_ADD, KIR_INDEX, kir_alu(&k, KIR_MUL, KIR_INDEX, r, idx_const(&k, C), -1),
                   kir_alu(&k, KIR_ADD, KIR_INDEX, base, c, -1), -1);
  kir_store(&k, row, c, kir_alu(&k, KIR_ADD, KIR_F64, kir_load(&k, row, c), kir_load(&k, px, at), -1));
  kir_end(&k, c);
  kir_end(&k, r);
  c = kir_range(&k, H, false);
  kir_store(&k, po, kir_alu(&k, KIR_ADD, KIR_INDEX, base, c, -1), kir_load(&k, row, c));
  kir_end(&k, c);
  kir_end(&k, b);
  assert_null(kir_verify(&k));
  assert_true(kir_splittable(&k));
  char *txt = kir_to_string(&k);
  assert_non_null(txt);
  assert_non_null(strstr(txt, "5 local ptr f64[20]\n"));
  free(txt);
  llvm_kernel_fn fn = compile_ok(&k);
  void *bufs[2] = {out, x};
  fn(bufs, 0, 1);
  fn(bufs, 1, 2);
  for (int j = 0; j < C; j++) {
    double s = 0.0;
    for (int i = 0; i < R; i++) s += x[i * C + j];
    assert_true(out[j] == s);
  }
  kir_free(&k);
  /* broken LOCALs: no length, too large, half elements, a nontemporal store */
  const int64_t lens[] = {0, KIR_LOCAL_MAX / 8 + 1, 4, 4};
  const kir_type types[] = {KIR_F64, KIR_F64, KIR_F16, KIR_F64};
  for (int v = 0; v < 4; v++) {
    kir_init(&k, "bad local");
    int l = kir_local(&k, types[v], lens[v]), i = kir_range(&k, 1, false);
    int one = kir_const_f(&k, types[v] == KIR_F16 ? KIR_F32 : KIR_F64, 1);
    int val = types[v] == KIR_F16 ? kir_cast(&k, KIR_F16, one) : one;
    if (v == 3) kir_store_streaming(&k, l, i, val);
    else kir_store(&k, l, i, val);
    kir_end(&k, i);
    expect_broken(&k, "bad local");
  }
}

/* Softmax's sum pass: exp of F32 values summed into an F64 accumulator
 * (reassociable). With 512-bit vectors the loop runs 16 lanes, so the F32
 * math is on whole vectors (<16 x float>), not the 8 lanes F64 would pick;
 * the sums equal a sequential F64 sum to rounding. */
static void test_mixed_width(void **state) {
  (void)state;
  enum { R = 5, C = 1000 };
  static float x[R * C];
  double out[R];
  for (int i = 0; i < R * C; i++) x[i] = (float)sin(i) * 3.0f;
  kir_kernel k;
  kir_init(&k, "sum_exp");
  int po = kir_param(&k, KIR_F64, true), px = kir_param(&k, KIR_F32, false);
  int r = kir_range(&k, R, true);
  int acc = kir_acc(&k, KIR_F64, kir_const_f(&k, KIR_F64, 0.0));
  int base = kir_alu(&k, KIR_MUL, KIR_INDEX, r, idx_const(&k, C), -1);
  int c = kir_range(&k, C, false);
  int e = kir_alu(&k, KIR_EXP, KIR_F32, kir_load(&k, px, kir_alu(&k, KIR_ADD, KIR_INDEX, base, c, -1)), -1, -1);
  int upd = kir_alu(&k, KIR_ADD, KIR_F64, acc, kir_cast(&k, KIR_F64, e), -1);
  kir_set_reassoc(&k, upd);
  kir_acc_set(&k, acc, upd);
  kir_end(&k, c);
  kir_store(&k, po, r, acc);
  kir_end(&k, r);
  assert_null(kir_verify(&k));
  char *ir = NULL;
  llvm_kernel_fn fn = compile_text(&k, &ir);
  if (llvm_wide_vectors()) {
    assert_true(count_text(ir, "<16 x float>") > 0);
    assert_int_equal(count_text(ir, "<8 x float>"), 0);
  }
  free(ir);
  fn((void *[]){out, x}, 0, R);
  for (int i = 0; i < R; i++) {
    double s = 0.0;
    for (int j = 0; j < C; j++) s += exp((double)x[i * C + j]);
    assert_true(fabs(out[i] - s) <= 1e-6 * s);
  }
  kir_free(&k);
}

/* argmax over x[0..N) with two ACCs (best value, best index) and WHERE. */
static void test_argmax(void **state) {
  (void)state;
  enum { N = 100 };
  float x[N];
  int64_t out = -1;
  uint64_t s = 3;
  for (int i = 0; i < N; i++) x[i] = (float)(lcg(&s) % 1000) - 500.0f;
  x[37] = 600.0f;
  x[80] = 600.0f; /* ties keep the first */
  kir_kernel k;
  kir_init(&k, "argmax");
  int po = kir_param(&k, KIR_I64, true), px = kir_param(&k, KIR_F32, false);
  int best = kir_acc(&k, KIR_F32, kir_const_f(&k, KIR_F32, -INFINITY));
  int bi = kir_acc(&k, KIR_I64, kir_const_i(&k, KIR_I64, 0));
  int i = kir_range(&k, N, false);
  int v = kir_load(&k, px, i);
  int gt = kir_alu(&k, KIR_CMPLT, KIR_BOOL, best, v, -1);
  kir_acc_set(&k, best, kir_alu(&k, KIR_WHERE, KIR_F32, gt, v, best));
  kir_acc_set(&k, bi, kir_alu(&k, KIR_WHERE, KIR_I64, gt, kir_cast(&k, KIR_I64, i), bi));
  kir_end(&k, i);
  kir_store(&k, po, idx_const(&k, 0), bi);
  assert_null(kir_verify(&k));
  llvm_kernel_fn fn = compile_ok(&k);
  void *bufs[2] = {&out, x};
  fn(bufs, 0, 0);
  assert_int_equal(out, 37);
  kir_free(&k);
}

/* A parallel RANGE run as [0, k) and [k, n): every element once; start/end
 * outside [0, n) are clamped. */
static void test_parallel_chunks(void **state) {
  (void)state;
  enum { N = 1000, K = 377 };
  int32_t cnt[N + 8];
  float in[N], out[N];
  memset(cnt, 0, sizeof cnt);
  for (int i = 0; i < N; i++) in[i] = (float)i * 0.25f;
  kir_kernel k;
  kir_init(&k, "par");
  int pc = kir_param(&k, KIR_I32, true), po = kir_param(&k, KIR_F32, true);
  int pi = kir_param(&k, KIR_F32, false);
  int i = kir_range(&k, N, true);
  int one = kir_const_i(&k, KIR_I32, 1);
  kir_store(&k, pc, i, kir_alu(&k, KIR_ADD, KIR_I32, kir_load(&k, pc, i), one, -1));
  int x = kir_load(&k, pi, i);
  kir_store(&k, po, i, kir_alu(&k, KIR_MUL, KIR_F32, x, kir_const_f(&k, KIR_F32, 2.0), -1));
  kir_end(&k, i);
  llvm_kernel_fn fn = compile_ok(&k);
  void *bufs[3] = {cnt, out, in};
  fn(bufs, 0, K);
  for (int j = 0; j < N; j++) assert_int_equal(cnt[j], j < K ? 1 : 0);
  fn(bufs, K, N);
  fn(bufs, N, N);
  fn(bufs, N + 5, N + 8); /* clamped: nothing */
  for (int j = 0; j < N + 8; j++) assert_int_equal(cnt[j], j < N ? 1 : 0);
  for (int j = 0; j < N; j++) assert_true(out[j] == in[j] * 2.0f);
  fn(bufs, -10, 3); /* clamped to [0, 3) */
  assert_int_equal(cnt[0], 2);
  assert_int_equal(cnt[3], 1);
  kir_free(&k);
}

/* out[i, j] = a[j, i] + 1 over R x C in tiles (kir_range_tile): out is
 * [R, C], a is [C, R] of dtype t; bj outer (parallel), bi inner. */
enum { TR = 48, TC = 64 };
static void build_tile_transpose(kir_kernel *k, kir_type t) {
  kir_init(k, "tile_t");
  int out = kir_param(k, t, true), a = kir_param(k, t, false), tj;
  int bj = kir_range(k, TC / KIR_TILE, true), bi = kir_range(k, TR / KIR_TILE, false);
  int i0 = kir_alu(k, KIR_MUL, KIR_INDEX, bi, idx_const(k, KIR_TILE), -1);
  int j0 = kir_alu(k, KIR_MUL, KIR_INDEX, bj, idx_const(k, KIR_TILE), -1);
  int ti = kir_range_tile(k, &tj);
  int i = kir_alu(k, KIR_ADD, KIR_INDEX, i0, ti, -1), j = kir_alu(k, KIR_ADD, KIR_INDEX, j0, tj, -1);
  int src = kir_alu(k, KIR_ADD, KIR_INDEX, kir_alu(k, KIR_MUL, KIR_INDEX, j, idx_const(k, TR), -1), i, -1);
  int dst = kir_alu(k, KIR_ADD, KIR_INDEX, kir_alu(k, KIR_MUL, KIR_INDEX, i, idx_const(k, TC), -1), j, -1);
  kir_store(k, out, dst, kir_alu(k, KIR_ADD, t, kir_load(k, a, src), kir_const_i(k, t, 1), -1));
  kir_end(k, tj);
  kir_end(k, ti);
  kir_end(k, bi);
  kir_end(k, bj);
}

/* A tile's transposed read becomes vector loads and shuffles (no
 * gathers); every element is right, run whole and split by chunks of
 * its parallel range. */
static void test_tile_transpose(void **state) {
  (void)state;
  kir_kernel k;
  build_tile_transpose(&k, KIR_F32);
  assert_null(kir_verify(&k));
  char *ir = NULL;
  llvm_kernel_fn fn = compile_text(&k, &ir);
  assert_true(count_text(ir, "shufflevector") >= 16);
  assert_int_equal(count_text(ir, "gather"), 0);
  free(ir);
  static float a[TC * TR], out[TR * TC];
  for (int x = 0; x < TC * TR; x++) a[x] = (float)x;
  fn((void *[]){out, a}, 0, 1);
  fn((void *[]){out, a}, 1, TC / KIR_TILE);
  for (int i = 0; i < TR; i++)
    for (int j = 0; j < TC; j++) assert_true(out[i * TC + j] == a[j * TR + i] + 1);
  kir_free(&k);
  build_tile_transpose(&k, KIR_U8); /* one-byte elements */
  fn = compile_ok(&k);
  static uint8_t a8[TC * TR], out8[TR * TC];
  for (int x = 0; x < TC * TR; x++) a8[x] = (uint8_t)(x * 7);
  fn((void *[]){out8, a8}, 0, TC / KIR_TILE);
  for (int i = 0; i < TR; i++)
    for (int j = 0; j < TC; j++) assert_int_equal(out8[i * TC + j], (uint8_t)(a8[j * TR + i] + 1));
  kir_free(&k);
}

/* A valid base kernel the broken variants start from:
 *   0 param(f32 w) 1 param(f32 r) 2 range 3 load 4 neg 5 store 6 end */
static void build_base(kir_kernel *k) {
  kir_init(k, "base");
  int o = kir_param(k, KIR_F32, true), a = kir_param(k, KIR_F32, false);
  int i = kir_range(k, 4, false);
  int x = kir_load(k, a, i);
  kir_store(k, o, i, kir_alu(k, KIR_NEG, KIR_F32, x, -1, -1));
  kir_end(k, i);
}

static void expect_broken(kir_kernel *k, const char *what) {
  const char *e = kir_verify(k);
  if (!e) fail_msg("kir_verify accepted: %s", what);
  kir_free(k);
}

static void test_verify_rejects(void **state) {
  (void)state;
  kir_kernel k;
  build_base(&k);
  assert_null(kir_verify(&k));
  kir_free(&k);
  build_base(&k);
  k.uops[4].src[0] = 5; /* operand defined later */
  expect_broken(&k, "forward reference");
  build_base(&k);
  k.n_uops = 6; /* RANGE never closed */
  expect_broken(&k, "unclosed range");
  build_base(&k);
  kir_store(&k, 0, 2, 4); /* loop variable and value used after END */
  expect_broken(&k, "use outside loop");
  kir_init(&k, "f16 alu"); /* ALU on F16 */
  int h = kir_param(&k, KIR_F16, true);
  int hi = kir_range(&k, 4, false);
  kir_store(&k, h, hi, kir_alu(&k, KIR_NEG, KIR_F16, kir_load(&k, h, hi), -1, -1));
  kir_end(&k, hi);
  assert_non_null(strstr(kir_verify(&k), "(neg)"));
  expect_broken(&k, "alu on f16");
  build_base(&k);
  k.uops[2].type = KIR_I32; /* index not KIR_INDEX */
  expect_broken(&k, "non-index range");
  build_base(&k);
  k.uops[1].ival = 5; /* param index >= n_params */
  expect_broken(&k, "param index");
  build_base(&k);
  k.param_written[0] = false;
  expect_broken(&k, "store to read-only param");
  build_base(&k);
  kir_alu(&k, KIR_ADD, KIR_F32, 1, 1, -1); /* ADD on pointers */
  expect_broken(&k, "add of params");
  build_base(&k);
  kir_end(&k, 2); /* END twice */
  expect_broken(&k, "double end");
  build_base(&k);
  kir_alu(&k, KIR_CMPLT, KIR_BOOL, 0, 5, -1); /* operand is a STORE */
  expect_broken(&k, "void operand");
  build_base(&k);
  k.uops[4].src[2] = 3; /* unused slot not -1 */
  expect_broken(&k, "unused slot");
  build_base(&k);
  k.uops[2].tile = true; /* a tile of 4, with no inner range */
  expect_broken(&k, "tile shape");
  build_tile_transpose(&k, KIR_F32);
  for (int u = 0; u < k.n_uops; u++)
    if (k.uops[u].tile) k.uops[u + 1].ival = 8; /* inner range of 8 */
  expect_broken(&k, "tile inner extent");
}

static char *build_and_print(double c, bool parallel, const char *name) {
  kir_kernel k;
  kir_init(&k, name);
  int o = kir_param(&k, KIR_F32, true);
  int i = kir_range(&k, 10, parallel);
  kir_store(&k, o, i, kir_const_f(&k, KIR_F32, c));
  kir_end(&k, i);
  char *s = kir_to_string(&k);
  kir_free(&k);
  assert_non_null(s);
  return s;
}

static void test_to_string(void **state) {
  (void)state;
  char *a = build_and_print(0.1, true, "k1"), *b = build_and_print(0.1, true, "k2");
  char *c = build_and_print(0.1000000001, true, "k1"), *d = build_and_print(0.1, false, "k1");
  char *e = build_and_print(-0.0, true, "k1"), *f = build_and_print(0.0, true, "k1");
  assert_string_equal(a, b);
  assert_string_not_equal(a, c);
  assert_string_not_equal(a, d);
  assert_string_not_equal(e, f);
  assert_non_null(strstr(a, "range index 10 parallel"));
  assert_non_null(strstr(a, "params f32:w"));
  free(a), free(b), free(c), free(d), free(e), free(f);
}

static void test_compile_errors(void **state) {
  (void)state;
  kir_kernel k;
  build_base(&k);
  k.uops[4].src[0] = 5;
  char err[256] = "";
  llvm_kernel_fn fn = NULL;
  assert_int_equal(llvm_compile(&k, &fn, NULL, err, sizeof err), KILN_ERR_COMPILE);
  assert_null(fn);
  assert_non_null(strstr(err, "invalid kernel"));
  kir_free(&k);
  kir_init(&k, "oom");
  k.oom = true;
  assert_int_equal(llvm_compile(&k, &fn, NULL, err, sizeof err), KILN_ERR_OOM);
  assert_int_equal(llvm_compile(NULL, &fn, NULL, NULL, 0), KILN_ERR_COMPILE);
  kir_free(&k);
  /* a valid kernel with IR text */
  build_base(&k);
  char *ir = NULL;
  assert_int_equal(llvm_compile(&k, &fn, &ir, err, sizeof err), KILN_OK);
  assert_non_null(ir);
  assert_non_null(strstr(ir, "define"));
  free(ir);
  kir_free(&k);
}

/* Two threads compile and run kernels at the same time. */
typedef struct thread_job {
  int seed, failures;
} thread_job;

static void *compile_thread(void *arg) {
  thread_job *job = arg;
  for (int n = 0; n < 8; n++) {
    float c = (float)(job->seed * 100 + n), out[16], in[16];
    for (int i = 0; i < 16; i++) in[i] = (float)i;
    kir_kernel k;
    kir_init(&k, "thread");
    int o = kir_param(&k, KIR_F32, true), a = kir_param(&k, KIR_F32, false);
    int i = kir_range(&k, 16, true);
    int x = kir_alu(&k, KIR_ADD, KIR_F32, kir_load(&k, a, i), kir_const_f(&k, KIR_F32, c), -1);
    kir_store(&k, o, i, kir_alu(&k, KIR_TANH, KIR_F32, x, -1, -1));
    kir_end(&k, i);
    llvm_kernel_fn fn = NULL;
    char err[256];
    if (llvm_compile(&k, &fn, NULL, err, sizeof err) != KILN_OK) {
      job->failures++;
    } else {
      void *bufs[2] = {out, in};
      fn(bufs, 0, 16);
      for (int j = 0; j < 16; j++) job->failures += ulps32(out[j], (float)tanh(in[j] + c)) > 2;
    }
    kir_free(&k);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  pthread_t t[2];
  thread_job jobs[2] = {{1, 0}, {2, 0}};
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, compile_thread, &jobs[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  assert_int_equal(jobs[0].failures + jobs[1].failures, 0);
}

/* llvm_shutdown frees the JIT; the next compile creates a new one. */
static void test_shutdown_restart(void **state) {
  (void)state;
  kir_kernel k;
  build_base(&k);
  float a[4] = {1, 2, 3, 4}, out[4];
  void *bufs[2] = {out, a};
  compile_ok(&k)(bufs, 0, 0);
  llvm_shutdown();
  llvm_shutdown(); /* idempotent */
  compile_ok(&k)(bufs, 0, 0);
  for (int i = 0; i < 4; i++) assert_true(out[i] == -a[i]);
  kir_free(&k);
}

/* out[i] = a[i] - b[i] over n elements (operands distinct at every i) for
 * the range [0, n) run as two chunks, checked at every element. */
static void check_sub(llvm_kernel_fn fn, int n, float *out, float *a, float *b, float shift) {
  for (int i = 0; i < n; i++) {
    a[i] = 0.5f * (float)i - 100 + shift;
    b[i] = (float)(i % 7) * 1.25f - 3 * shift;
    out[i] = NAN;
  }
  void *bufs[3] = {out, a, b};
  fn(bufs, 0, n / 3);
  fn(bufs, n / 3, n);
  for (int i = 0; i < n; i++)
    if (!(out[i] == a[i] - b[i])) fail_msg("element %d: %a, want %a", i, out[i], a[i] - b[i]);
}

/* Each successful llvm_compile compiles and links exactly one kernel
 * (llvm_compile_count goes up by one) and a kernel kir_verify rejects
 * none; the code computes the kernel's values. The LLVM layer has no
 * cache: the same IR compiled again is linked again, as a second entry
 * point with the same values (the runtime's kernel cache, where a second
 * get is a hit, is tested in test_schedule.c). Nothing is timed: speed
 * is bench/'s business. */
static void test_compile_counts(void **state) {
  (void)state;
  enum { N = 1000 };
  static float a[N], b[N], out[N];
  kir_kernel k;
  build_elementwise(&k, KIR_SUB, KIR_F32, KIR_F32, 2, N);
  unsigned long long before = llvm_compile_count();
  llvm_kernel_fn fn = compile_ok(&k);
  assert_int_equal(llvm_compile_count(), before + 1);
  check_sub(fn, N, out, a, b, 0);
  check_sub(fn, N, out, a, b, 0.25f); /* new data, same code */
  assert_int_equal(llvm_compile_count(), before + 1);

  llvm_kernel_fn again = compile_ok(&k);
  assert_int_equal(llvm_compile_count(), before + 2);
  assert_true(again != fn);
  check_sub(again, N, out, a, b, -1);

  kir_kernel bad;
  build_base(&bad);
  bad.uops[4].src[0] = 5; /* as in test_compile_errors: fails kir_verify */
  char err[256] = "";
  llvm_kernel_fn none = NULL;
  assert_int_equal(llvm_compile(&bad, &none, NULL, err, sizeof err), KILN_ERR_COMPILE);
  assert_null(none);
  assert_int_equal(llvm_compile_count(), before + 2);
  kir_free(&bad);
  kir_free(&k);
}

static int teardown(void **state) {
  (void)state;
  llvm_shutdown();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_strided),     cmocka_unit_test(test_int_div),
      cmocka_unit_test(test_math),            cmocka_unit_test(test_float_alu),
      cmocka_unit_test(test_casts),           cmocka_unit_test(test_half_conversions),
      cmocka_unit_test(test_bool),            cmocka_unit_test(test_sum_acc),
      cmocka_unit_test(test_local_row),
      cmocka_unit_test(test_mixed_width),
      cmocka_unit_test(test_argmax),          cmocka_unit_test(test_parallel_chunks),
      cmocka_unit_test(test_verify_rejects),  cmocka_unit_test(test_tile_transpose),
      cmocka_unit_test(test_to_string),
      cmocka_unit_test(test_compile_errors),  cmocka_unit_test(test_threads),
      cmocka_unit_test(test_shutdown_restart), cmocka_unit_test(test_compile_counts), cmocka_unit_test(test_long_body_interleaved),
      cmocka_unit_test(test_short_rows_masked), cmocka_unit_test(test_short_row_pairs), cmocka_unit_test(test_streaming_stores),
  };
  return cmocka_run_group_tests(tests, NULL, teardown);
}
