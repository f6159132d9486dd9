/*
 * semantics_trig.c — asin, acos, atan, sinh, cosh, asinh, acosh, atanh as
 * compositions of the kernel IR's existing math (atan2, sqrt, log, log1p,
 * exp, expm1), so that both backends print and vectorise them with no new
 * kir_op (llvm_math.c has vector F32 forms of all of these). Each is
 * written in the form that keeps full relative precision (the usual libm
 * reductions, e.g. glibc's e_asinh.c / e_atanh.c):
 *   asin x = atan2(x, sqrt((1-x)(1+x)))    (1-x is exact near 1)
 *   acos x = atan2(sqrt((1-x)(1+x)), x)
 *   atan x = atan2(x, 1)
 *   sinh x = (u + u/(u+1))/2, u = expm1 x   for |x| < 1 (no cancellation)
 *          = ±(h - 1/(4h)), h = (E/2)·E, E = e^(|x|/2)   elsewhere (E·E
 *            overflows only where sinh does)
 *   cosh x = h + 1/(4h)
 *   asinh x = ±log1p(a + a²/(1 + sqrt(1 + a²))), a = |x| < 2^28
 *           = ±(log a + ln 2)                   beyond (a² may overflow)
 *   acosh x = log1p(t + sqrt(t(x+1))), t = x-1 (exact near 1), x < 2^28;
 *             log x + ln 2 beyond; NaN below 1
 *   atanh x = ±log1p(2a/(1-a))/2, a = |x|
 * Signed zeros and NaN are kept as C99's functions keep them. Operands
 * arrive in the compute type (F32 or F64).
 */
#include <math.h>

#include "semantics.h"

#define BIG 268435456.0 /* 2^28: past it 1 is lost next to a² (F64) */

static int c_(kir_kernel *k, int x, double v) { return pass_cst(k, pass_type_of(k, x), v); }
static int add(kir_kernel *k, int a, int b) { return pass_alu2(k, KIR_ADD, a, b); }
static int sub(kir_kernel *k, int a, int b) { return pass_alu2(k, KIR_SUB, a, b); }
static int mul(kir_kernel *k, int a, int b) { return pass_alu2(k, KIR_MUL, a, b); }
static int div_(kir_kernel *k, int a, int b) { return pass_alu2(k, KIR_DIV, a, b); }
static int lt(kir_kernel *k, int a, int b) { return pass_cmp(k, KIR_CMPLT, a, b); }

/* |x| with NaN kept (x < 0 is false for NaN). */
static int abs_(kir_kernel *k, int x) { return pass_where(k, lt(k, x, c_(k, x, 0)), pass_alu1(k, KIR_NEG, x), x); }

/* r with x's sign: -r for x < 0, x itself for ±0 (keeps -0), r otherwise
 * (NaN: r, which is NaN). */
static int with_sign(kir_kernel *k, int x, int r) {
  int zero = c_(k, x, 0);
  int s = pass_where(k, lt(k, x, zero), pass_alu1(k, KIR_NEG, r), r);
  return pass_where(k, pass_cmp(k, KIR_CMPEQ, x, zero), x, s);
}

/* sqrt((1-x)(1+x)): NaN for |x| > 1. */
static int cos_of_asin(kir_kernel *k, int x) {
  int one = c_(k, x, 1);
  return pass_alu1(k, KIR_SQRT, mul(k, sub(k, one, x), add(k, one, x)));
}

/* h = e^a / 2 as (E/2)·E, E = e^(a/2), for a >= 0. */
static int half_exp(kir_kernel *k, int a) {
  int e = pass_alu1(k, KIR_EXP, mul(k, a, c_(k, a, 0.5)));
  return mul(k, mul(k, e, c_(k, a, 0.5)), e);
}

static int op_sinh(kir_kernel *k, int x) {
  int a = abs_(k, x), one = c_(k, x, 1);
  int u = pass_alu1(k, KIR_EXPM1, x);
  int small = mul(k, add(k, u, div_(k, u, add(k, u, one))), c_(k, x, 0.5));
  int h = half_exp(k, a);
  int large = sub(k, h, div_(k, c_(k, x, 0.25), h));
  int signed_large = pass_where(k, lt(k, x, c_(k, x, 0)), pass_alu1(k, KIR_NEG, large), large);
  return pass_where(k, lt(k, a, one), small, signed_large);
}

static int op_cosh(kir_kernel *k, int x) {
  int h = half_exp(k, abs_(k, x));
  return add(k, h, div_(k, c_(k, x, 0.25), h));
}

static int op_asinh(kir_kernel *k, int x) {
  int a = abs_(k, x), one = c_(k, x, 1);
  int a2 = mul(k, a, a);
  int q = div_(k, a2, add(k, one, pass_alu1(k, KIR_SQRT, add(k, one, a2))));
  int small = pass_alu1(k, KIR_LOG1P, add(k, a, q));
  int large = add(k, pass_alu1(k, KIR_LOG, a), c_(k, x, M_LN2));
  return with_sign(k, x, pass_where(k, lt(k, c_(k, x, BIG), a), large, small));
}

static int op_acosh(kir_kernel *k, int x) {
  int one = c_(k, x, 1), t = sub(k, x, one);
  int small = pass_alu1(k, KIR_LOG1P, add(k, t, pass_alu1(k, KIR_SQRT, mul(k, t, add(k, x, one)))));
  int large = add(k, pass_alu1(k, KIR_LOG, x), c_(k, x, M_LN2));
  int r = pass_where(k, lt(k, c_(k, x, BIG), x), large, small);
  return pass_where(k, lt(k, x, one), c_(k, x, NAN), r);
}

static int op_atanh(kir_kernel *k, int x) {
  int a = abs_(k, x);
  int q = div_(k, add(k, a, a), sub(k, c_(k, x, 1), a));
  return with_sign(k, x, mul(k, pass_alu1(k, KIR_LOG1P, q), c_(k, x, 0.5)));
}

int pass_op_trig(kir_kernel *k, graph_op op, int x) {
  switch (op) {
  case GRAPH_OP_ASIN: return pass_alu2(k, KIR_ATAN2, x, cos_of_asin(k, x));
  case GRAPH_OP_ACOS: return pass_alu2(k, KIR_ATAN2, cos_of_asin(k, x), x);
  case GRAPH_OP_ATAN: return pass_alu2(k, KIR_ATAN2, x, c_(k, x, 1));
  case GRAPH_OP_SINH: return op_sinh(k, x);
  case GRAPH_OP_COSH: return op_cosh(k, x);
  case GRAPH_OP_ASINH: return op_asinh(k, x);
  case GRAPH_OP_ACOSH: return op_acosh(k, x);
  case GRAPH_OP_ATANH: return op_atanh(k, x);
  default: return -1;
  }
}
