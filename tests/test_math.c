/*
 * test_math.c — accuracy and vectorisation of the inline F32 math
 * (codegen_llvm/llvm_math.c).
 *
 * Each function is compiled as the kernel out[i] = f(a[i] [, b[i]]) and run
 * over a dense sample of the float domain: every bit pattern with a stride of
 * 997 (~4.3M inputs, all signs and binades), plus edge cases. The reference
 * is (float) of glibc's double function. The max error in ulp (distance in
 * representable floats, NaN matching NaN only) is printed per function and
 * checked against the bound documented in llvm_math.c; special values
 * (zeros, infinities, NaN, thresholds) must match exactly, signed zeros
 * included. KILN_MATH_STRIDE=1 in the environment checks every float
 * (minutes per function).
 *
 * pow and atan2 take random pairs from several distributions (any bits;
 * results spanning the whole range; negative bases with integer exponents;
 * nearby magnitudes) plus a grid of special values.
 *
 * Finally the optimised IR of each 1024-element kernel must contain vector
 * types (<16 x float>, <8 x float>, ...) and no call to libm.
 */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <math.h>
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

enum { CHUNK = 1 << 20 };

typedef struct fn_case {
  kir_op op;
  const char *name;
  double (*f1)(double);
  double (*f2)(double, double);
  int64_t bound; /* max ulp allowed (the documented bound) */
  double range;  /* the bound holds for |x| < range (trig), else all x */
} fn_case;

static const fn_case cases[] = {
    {KIR_EXP, "exp", exp, NULL, 1, INFINITY},       {KIR_TANH, "tanh", tanh, NULL, 1, INFINITY},
    {KIR_LOG, "log", log, NULL, 2, INFINITY},       {KIR_ERF, "erf", erf, NULL, 1, INFINITY},
    {KIR_SIN, "sin", sin, NULL, 2, 4.2e8},          {KIR_COS, "cos", cos, NULL, 2, 4.2e8},
    {KIR_EXP2, "exp2", exp2, NULL, 1, INFINITY},    {KIR_LOG2, "log2", log2, NULL, 2, INFINITY},
    {KIR_EXPM1, "expm1", expm1, NULL, 1, INFINITY}, {KIR_LOG1P, "log1p", log1p, NULL, 2, INFINITY},
    {KIR_POW, "pow", NULL, pow, 1, INFINITY},       {KIR_TAN, "tan", tan, NULL, 2, 4.2e8},
    {KIR_ATAN2, "atan2", NULL, atan2, 1, INFINITY},
};
enum { NCASES = sizeof cases / sizeof *cases };

/* ------------------------------------------------------------- helpers */

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Distance in representable floats; NaN matches NaN only; -0 == +0. */
static int64_t ulps(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT64_MAX;
  int32_t i, j;
  memcpy(&i, &a, 4);
  memcpy(&j, &b, 4);
  int64_t x = i < 0 ? (int64_t)INT32_MIN - i : i, y = j < 0 ? (int64_t)INT32_MIN - j : j;
  return x > y ? x - y : y - x;
}

/* Exactly the same value: same NaN-ness, same bits otherwise (signed zero). */
static bool same(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return memcmp(&a, &b, 4) == 0;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 32);
}
static double unif(void) { return rnd() / 4294967296.0; }

/* out[i] = op(a[i] [, b[i]]) for i < n, F32. */
static llvm_kernel_fn compile_op(kir_op op, int arity, int64_t n, char **ir) {
  kir_kernel k;
  kir_init(&k, kir_op_name(op));
  int out = kir_param(&k, KIR_F32, true), pa = kir_param(&k, KIR_F32, false);
  int pb = arity > 1 ? kir_param(&k, KIR_F32, false) : -1;
  int i = kir_range(&k, n, true);
  int x = kir_load(&k, pa, i), y = arity > 1 ? kir_load(&k, pb, i) : -1;
  kir_store(&k, out, i, kir_alu(&k, op, KIR_F32, x, y, -1));
  kir_end(&k, i);
  char err[512] = "";
  llvm_kernel_fn fn = NULL;
  int rc = llvm_compile(&k, &fn, ir, err, sizeof err);
  kir_free(&k);
  if (rc != KILN_OK) fail_msg("llvm_compile(%s) = %d: %s", kir_op_name(op), rc, err);
  return fn;
}

typedef struct stats {
  int64_t max_ulp, max_ulp_outside; /* within / beyond the accurate range */
  float worst_x, worst_y;
  long n;
} stats;

static float reference(const fn_case *c, float x, float y) {
  return c->f2 ? (float)c->f2(x, y) : (float)c->f1(x);
}

/* Runs fn on a[0..n) (b) and folds the errors into s. */
static void measure(const fn_case *c, llvm_kernel_fn fn, const float *a, const float *b, float *out,
                    int64_t n, stats *s) {
  void *bufs[3] = {out, (void *)a, (void *)b};
  fn(bufs, 0, n);
  for (int64_t i = 0; i < n; i++) {
    float y = b ? b[i] : 0.0f;
    int64_t u = ulps(out[i], reference(c, a[i], y));
    bool inside = isinf(c->range) || !(fabsf(a[i]) >= c->range);
    if (!inside) {
      bool ok = isnan(a[i]) || isinf(a[i]) ? isnan(out[i]) : !isnan(out[i]);
      if (c->op != KIR_TAN) ok = ok && !(fabsf(out[i]) > 1.0f);
      if (!ok) fail_msg("%s(%a) = %a outside the accurate range", c->name, a[i], out[i]);
      if (u > s->max_ulp_outside) s->max_ulp_outside = u;
      continue;
    }
    if (u > s->max_ulp) {
      s->max_ulp = u;
      s->worst_x = a[i];
      s->worst_y = y;
    }
  }
  s->n += (long)n;
}

/* ------------------------------------------------------- special values */

static const float specials[] = {0.0f,
                                 -0.0f,
                                 INFINITY,
                                 -INFINITY,
                                 NAN,
                                 -NAN,
                                 1.0f,
                                 -1.0f,
                                 2.0f,
                                 0.5f,
                                 0x1p-149f,
                                 -0x1p-149f,
                                 0x1p-126f,
                                 -0x1p-126f,
                                 FLT_MAX,
                                 -FLT_MAX,
                                 0x1p-25f,
                                 -0x1p-25f,
                                 0x1p-12f,
                                 88.72283172607422f,
                                 88.72283935546875f,
                                 -87.33654f,
                                 -103.97207f,
                                 -103.97208f,
                                 -104.0f,
                                 89.0f,
                                 127.99999f,
                                 128.0f,
                                 -149.0f,
                                 -150.0f,
                                 -151.0f,
                                 3.9192059f,
                                 3.925f,
                                 0.875f,
                                 0.625f,
                                 9.0f,
                                 -9.0f,
                                 0.78539819f,
                                 1.5707964f,
                                 3.1415927f,
                                 1e5f,
                                 -1e5f,
                                 1e8f,
                                 4e8f};

/* Unary specials must match (float)libm exactly. */
static void check_specials_unary(const fn_case *c, llvm_kernel_fn fn) {
  enum { NS = sizeof specials / sizeof *specials };
  float out[NS];
  void *bufs[2] = {out, (void *)specials};
  fn(bufs, 0, NS);
  for (int i = 0; i < NS; i++) {
    float x = specials[i], ref = reference(c, x, 0);
    /* special inputs, special results, and saturation (tanh, erf, cos of tiny x) */
    bool exact_expected = isnan(x) || isinf(x) || x == 0 || isinf(ref) || ref == 0 || isnan(ref) ||
                          (fabsf(ref) == 1 && c->op != KIR_TAN);
    if (fabsf(x) >= c->range) continue;
    if (exact_expected && !same(out[i], ref))
      fail_msg("%s(%a) = %a, expected exactly %a", c->name, x, out[i], ref);
    if (ulps(out[i], ref) > c->bound) fail_msg("%s(%a) = %a, expected %a", c->name, x, out[i], ref);
  }
}

static const float grid[] = {0.0f,     -0.0f,   INFINITY, -INFINITY,   NAN,        1.0f,
                             -1.0f,    0.5f,    -0.5f,    2.0f,        -2.0f,      3.0f,
                             -3.0f,    2.5f,    -2.5f,    0x1p-149f,   -0x1p-149f, FLT_MAX,
                             -FLT_MAX, 0x1p24f, -0x1p24f, 0x1p25f + 2, 7.0f,       -7.0f};

/* Binary specials: every pair of the grid matches (float)libm exactly
 * when the expected result is a special value. */
static void check_specials_binary(const fn_case *c, llvm_kernel_fn fn) {
  enum { NG = sizeof grid / sizeof *grid };
  float a[NG * NG], b[NG * NG], out[NG * NG];
  for (int i = 0; i < NG; i++)
    for (int j = 0; j < NG; j++) a[i * NG + j] = grid[i], b[i * NG + j] = grid[j];
  void *bufs[3] = {out, a, b};
  fn(bufs, 0, NG * NG);
  for (int i = 0; i < NG * NG; i++) {
    float ref = reference(c, a[i], b[i]);
    bool exact_expected = isnan(ref) || isinf(ref) || ref == 0 || fabsf(ref) == 1;
    if (exact_expected && !same(out[i], ref))
      fail_msg("%s(%a, %a) = %a, expected exactly %a", c->name, a[i], b[i], out[i], ref);
    if (ulps(out[i], ref) > c->bound)
      fail_msg("%s(%a, %a) = %a, expected %a", c->name, a[i], b[i], out[i], ref);
  }
}

/* --------------------------------------------------------------- sweeps */

static void sweep_unary(const fn_case *c, llvm_kernel_fn fn, float *a, float *out, stats *s) {
  const char *env = getenv("KILN_MATH_STRIDE");
  uint64_t stride = env && atoi(env) > 0 ? (uint64_t)atoi(env) : 997;
  int64_t n = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += stride) {
    a[n++] = f_of((uint32_t)u);
    if (n == CHUNK) {
      measure(c, fn, a, NULL, out, n, s);
      n = 0;
    }
  }
  /* dense around the interesting places: near 0, 1, thresholds */
  static const float centres[] = {1.0f,        -1.0f,      0.625f,     0.875f,      3.92f,
                                  88.72f,      -87.33f,    -103.97f,   0.69314718f, -0.34657359f,
                                  0.34657359f, 1.5707964f, 3.1415927f, 0.70710677f, 1.4142135f};
  for (size_t i = 0; i < sizeof centres / sizeof *centres; i++) {
    uint32_t base;
    memcpy(&base, &centres[i], 4);
    for (int64_t d = -20000; d <= 20000; d++) {
      a[n++] = f_of((uint32_t)((int64_t)base + d));
      if (n == CHUNK) {
        measure(c, fn, a, NULL, out, n, s);
        n = 0;
      }
    }
  }
  if (n) measure(c, fn, a, NULL, out, n, s);
}

static float rand_bits(void) { return f_of(rnd()); }

/* One (x, y) pair for c from distribution d. */
static void pair(const fn_case *c, int d, float *x, float *y) {
  if (d == 0) { /* any bits */
    *x = rand_bits();
    *y = rand_bits();
  } else if (c->op == KIR_POW && d == 1) { /* positive base, result over the whole range */
    *x = f_of(rnd() & 0x7fffffffu);
    double l = log2(*x);
    *y = (float)((unif() * 2 - 1) * 160.0 / (fabs(l) > 1e-3 ? fabs(l) : 1e-3));
  } else if (c->op == KIR_POW && d == 2) { /* base near 1, larger exponents */
    *x = (float)(1.0 + (unif() * 2 - 1) * 0.01);
    *y = (float)((unif() * 2 - 1) * 2e4);
  } else if (c->op == KIR_POW) { /* negative base, integer exponent */
    *x = -(float)exp(unif() * 10 - 5);
    *y = (float)(int)(unif() * 61 - 30);
  } else { /* atan2: magnitudes within 2^±6, all signs; d == 2: small and large */
    float m =
        d == 1 ? (float)ldexp(1.0, (int)(unif() * 200) - 100) : (float)ldexp(1.0, (int)(unif() * 250) - 125);
    *x = m * (float)(unif() * 2 - 1);
    *y = (d == 1 ? m * (float)ldexp(unif(), (int)(unif() * 12) - 6)
                 : (float)ldexp(1.0, (int)(unif() * 250) - 125)) *
         (rnd() & 1 ? 1.0f : -1.0f);
  }
}

static void sweep_binary(const fn_case *c, llvm_kernel_fn fn, float *a, float *b, float *out, stats *s) {
  for (int d = 0; d < 4; d++) {
    int64_t n = CHUNK;
    for (int64_t i = 0; i < n; i++) pair(c, d, &a[i], &b[i]);
    measure(c, fn, a, b, out, n, s);
  }
}

/* ---------------------------------------------------------------- tests */

static void test_accuracy(void **state) {
  (void)state;
  float *a = malloc(CHUNK * sizeof *a), *b = malloc(CHUNK * sizeof *b), *out = malloc(CHUNK * sizeof *out);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(out);
  printf("  function  max ulp      inputs  worst input\n");
  for (int i = 0; i < NCASES; i++) {
    const fn_case *c = &cases[i];
    int arity = c->f2 ? 2 : 1;
    llvm_kernel_fn fn = compile_op(c->op, arity, CHUNK, NULL);
    stats s = {0};
    if (arity == 1) {
      check_specials_unary(c, fn);
      sweep_unary(c, fn, a, out, &s);
    } else {
      check_specials_binary(c, fn);
      sweep_binary(c, fn, a, b, out, &s);
    }
    printf("  %-8s  %7lld  %10ld  %-14a", c->name, (long long)s.max_ulp, s.n, s.worst_x);
    if (arity > 1) printf(" %-14a", s.worst_y);
    if (isfinite(c->range)) printf(" (for |x| < %g; beyond: %lld)", c->range, (long long)s.max_ulp_outside);
    printf("\n");
    if (s.max_ulp > c->bound)
      fail_msg("%s: max error %lld ulp at (%a, %a), bound %lld", c->name, (long long)s.max_ulp, s.worst_x,
               s.worst_y, (long long)c->bound);
  }
  free(a);
  free(b);
  free(out);
}

/* The optimised IR of a 1024-element kernel is vector code without calls. */
static void test_vectorised(void **state) {
  (void)state;
  for (int i = 0; i < NCASES; i++) {
    char *ir = NULL;
    compile_op(cases[i].op, cases[i].f2 ? 2 : 1, 1024, &ir);
    assert_non_null(ir);
    bool vec = strstr(ir, "<16 x float>") || strstr(ir, "<8 x float>") || strstr(ir, "<4 x float>");
    if (!vec) fail_msg("%s: no vector type in the optimised IR", cases[i].name);
    char call[64];
    snprintf(call, sizeof call, "@%sf(", cases[i].name);
    if (strstr(ir, call)) fail_msg("%s: the kernel still calls libm", cases[i].name);
    if (i == 0) assert_true(strstr(ir, "<16 x float>") || strstr(ir, "<8 x float>"));
    free(ir);
  }
}

/* F64 keeps libm accuracy (spot check: exp and tanh agree to 1 ulp). */
static void test_f64_unchanged(void **state) {
  (void)state;
  kir_kernel k;
  kir_init(&k, "exp64");
  int out = kir_param(&k, KIR_F64, true), pa = kir_param(&k, KIR_F64, false);
  int i = kir_range(&k, 5, true);
  kir_store(&k, out, i, kir_alu(&k, KIR_TANH, KIR_F64, kir_load(&k, pa, i), -1, -1));
  kir_end(&k, i);
  llvm_kernel_fn fn;
  char err[256];
  assert_int_equal(llvm_compile(&k, &fn, NULL, err, sizeof err), KILN_OK);
  double a[5] = {-3.0, -0.1, 0.0, 0.3, 20.0}, r[5];
  void *bufs[2] = {r, a};
  fn(bufs, 0, 5);
  for (int j = 0; j < 5; j++) assert_true(fabs(r[j] - tanh(a[j])) <= 2.3e-16 * fabs(tanh(a[j])));
  kir_free(&k);
}

static int teardown(void **state) {
  (void)state;
  llvm_shutdown();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vectorised),
      cmocka_unit_test(test_f64_unchanged),
      cmocka_unit_test(test_accuracy),
  };
  return cmocka_run_group_tests(tests, NULL, teardown);
}
