/*
 * semantics.c — what each elementwise graph op computes, written once as
 * kernel IR for every backend: Torch's semantics for abs of -0.0, sign of
 * NaN, Python's remainder, integer pow, bool add/mul, logical ops, clamp.
 * Operands arrive in the compute type (F16/BF16 widened to F32).
 */
#include <math.h>

#include "semantics.h"

bool pass_is_int_type(kir_type t) { return kir_is_int(t); }

int pass_cst(kir_kernel *k, kir_type type, double v) {
  if (pass_is_int_type(type)) return kir_const_i(k, type, (int64_t)v);
  return kir_const_f(k, type, v);
}

kir_type pass_type_of(const kir_kernel *k, int v) { return v >= 0 ? k->uops[v].type : KIR_INDEX; }

int pass_cast_to(kir_kernel *k, kir_type type, int v) {
  if (v < 0 || pass_type_of(k, v) == type) return v;
  return kir_cast(k, type, v);
}

int pass_alu2(kir_kernel *k, kir_op op, int a, int b) { return kir_alu(k, op, pass_type_of(k, a), a, b, -1); }
int pass_alu1(kir_kernel *k, kir_op op, int a) { return kir_alu(k, op, pass_type_of(k, a), a, -1, -1); }
int pass_cmp(kir_kernel *k, kir_op op, int a, int b) { return kir_alu(k, op, KIR_BOOL, a, b, -1); }
int pass_where(kir_kernel *k, int c, int a, int b) { return kir_alu(k, KIR_WHERE, pass_type_of(k, a), c, a, b); }
/* A value in registers: F16/BF16 widen to F32. */
int pass_to_register(kir_kernel *k, int v) { return pass_cast_to(k, kir_compute_type(pass_type_of(k, v)), v); }
/* ------------------------------------------------- elementwise semantics */

/* clamp on integer type t (op_clamp_int). A NaN bound is no bound (as for floats). Any
 * other bound is truncated toward zero and saturated to t's range, so
 * -inf/+inf and finite bounds past the range become the range's ends (a
 * plain cast of them is undefined: -inf became 0), and a bound at the end
 * of the range it limits is dropped. Torch computes clamp(int, float
 * bound) in float and the result is then stored in t: truncation and
 * saturation are monotonic, so clamping with the converted bounds gives
 * those same integers. */
static int64_t int_bound(double v, int64_t min, int64_t max) {
  if (v <= (double)min) return min;
  if (v >= (double)max) return max; /* (double)INT64_MAX is 2^63: v < 2^63 converts */
  return (int64_t)v;
}

/* The range [*min, *max] of integer type t (graph_int_range's, from kir_types). */
static void int_range(kir_type t, int64_t *min, int64_t *max) {
  int bits = kir_types[t].bits;
  bool s = kir_types[t].is_signed;
  *max = (int64_t)((UINT64_C(1) << (s ? bits - 1 : bits)) - 1);
  *min = s ? -*max - 1 : 0;
}

static int op_clamp_int(kir_kernel *k, int x, double lo, double hi) {
  kir_type t = pass_type_of(k, x);
  int64_t min, max;
  int_range(t, &min, &max);
  if (!isnan(lo) && int_bound(lo, min, max) > min)
    x = pass_alu2(k, KIR_MAX, x, kir_const_i(k, t, int_bound(lo, min, max)));
  if (!isnan(hi) && int_bound(hi, min, max) < max)
    x = pass_alu2(k, KIR_MIN, x, kir_const_i(k, t, int_bound(hi, min, max)));
  return x;
}

static int op_abs(kir_kernel *k, int x) {
  /* 0 - x for x <= 0 turns -0.0 into +0.0 and keeps NaN as is */
  int zero = pass_cst(k, pass_type_of(k, x), 0);
  return pass_where(k, pass_cmp(k, KIR_CMPLE, x, zero), pass_alu2(k, KIR_SUB, zero, x), x);
}

static int op_sign(kir_kernel *k, int x) {
  kir_type t = pass_type_of(k, x);
  if (t == KIR_BOOL) return x;
  int zero = pass_cst(k, t, 0);
  int pos = kir_cast(k, t, pass_cmp(k, KIR_CMPLT, zero, x));
  int neg = kir_cast(k, t, pass_cmp(k, KIR_CMPLT, x, zero));
  int s = pass_alu2(k, KIR_SUB, pos, neg);
  if (pass_is_int_type(t)) return s;
  return pass_where(k, pass_cmp(k, KIR_CMPNE, x, x), x, s); /* NaN stays NaN */
}

/* 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below: e = e^-|x| never overflows,
 * so silu(-90) keeps its tiny value instead of collapsing to -0. */
static int op_sigmoid(kir_kernel *k, int x) {
  kir_type t = pass_type_of(k, x);
  int zero = pass_cst(k, t, 0), one = pass_cst(k, t, 1);
  int nonneg = pass_cmp(k, KIR_CMPLE, zero, x);
  int neg_abs = pass_where(k, nonneg, pass_alu1(k, KIR_NEG, x), x);
  int e = pass_alu1(k, KIR_EXP, neg_abs);
  int num = pass_where(k, nonneg, one, e);
  return pass_alu2(k, KIR_DIV, num, pass_alu2(k, KIR_ADD, one, e));
}

static int op_gelu(kir_kernel *k, int x) {
  kir_type t = pass_type_of(k, x);
  int e = pass_alu1(k, KIR_ERF, pass_alu2(k, KIR_MUL, x, pass_cst(k, t, M_SQRT1_2)));
  int h = pass_alu2(k, KIR_MUL, x, pass_cst(k, t, 0.5));
  return pass_alu2(k, KIR_MUL, h, pass_alu2(k, KIR_ADD, pass_cst(k, t, 1), e));
}

/* Python's %: the result takes the divisor's sign. */
static int op_remainder(kir_kernel *k, int a, int b) {
  kir_type t = pass_type_of(k, a);
  int r = pass_alu2(k, KIR_MOD, a, b), zero = pass_cst(k, t, 0);
  int signs_differ = pass_alu2(k, KIR_XOR, pass_cmp(k, KIR_CMPLT, r, zero), pass_cmp(k, KIR_CMPLT, b, zero));
  int fix = pass_alu2(k, KIR_AND, pass_cmp(k, KIR_CMPNE, r, zero), signs_differ);
  return pass_where(k, fix, pass_alu2(k, KIR_ADD, r, b), r);
}

static int op_pow(kir_kernel *k, int a, int b) {
  kir_type t = pass_type_of(k, a);
  if (!pass_is_int_type(t) && t != KIR_BOOL) return pass_alu2(k, KIR_POW, a, b);
  /* integers: through F64 (exact below 2^53), truncated back */
  int p = kir_alu(k, KIR_POW, KIR_F64, kir_cast(k, KIR_F64, a), kir_cast(k, KIR_F64, b), -1);
  return kir_cast(k, t, p);
}

int pass_op_unary(kir_kernel *k, graph_op op, int x, const graph_node *n) {
  kir_type t = pass_type_of(k, x);
  bool fl = !pass_is_int_type(t) && t != KIR_BOOL;
  switch (op) {
  case GRAPH_OP_NEG: return pass_alu1(k, KIR_NEG, x);
  case GRAPH_OP_ABS: return t == KIR_BOOL ? x : op_abs(k, x);
  case GRAPH_OP_SIGN: return op_sign(k, x);
  case GRAPH_OP_EXP: return pass_alu1(k, KIR_EXP, x);
  case GRAPH_OP_EXP2: return pass_alu1(k, KIR_EXP2, x);
  case GRAPH_OP_LOG: return pass_alu1(k, KIR_LOG, x);
  case GRAPH_OP_LOG2: return pass_alu1(k, KIR_LOG2, x);
  case GRAPH_OP_LOG1P: return pass_alu1(k, KIR_LOG1P, x);
  case GRAPH_OP_EXPM1: return pass_alu1(k, KIR_EXPM1, x);
  case GRAPH_OP_SQRT: return pass_alu1(k, KIR_SQRT, x);
  case GRAPH_OP_RSQRT: return pass_alu2(k, KIR_DIV, pass_cst(k, t, 1), pass_alu1(k, KIR_SQRT, x));
  case GRAPH_OP_RECIPROCAL: return pass_alu2(k, KIR_DIV, pass_cst(k, t, 1), x);
  case GRAPH_OP_SIN: return pass_alu1(k, KIR_SIN, x);
  case GRAPH_OP_COS: return pass_alu1(k, KIR_COS, x);
  case GRAPH_OP_TAN: return pass_alu1(k, KIR_TAN, x);
  case GRAPH_OP_TANH: return pass_alu1(k, KIR_TANH, x);
  case GRAPH_OP_SIGMOID: return op_sigmoid(k, x);
  case GRAPH_OP_RELU: return pass_alu2(k, KIR_MAX, x, pass_cst(k, t, 0));
  case GRAPH_OP_GELU: return op_gelu(k, x);
  case GRAPH_OP_SILU: return pass_alu2(k, KIR_MUL, x, op_sigmoid(k, x));
  case GRAPH_OP_ERF: return pass_alu1(k, KIR_ERF, x);
  case GRAPH_OP_FLOOR: return fl ? pass_alu1(k, KIR_FLOOR, x) : x;
  case GRAPH_OP_CEIL: return fl ? pass_alu1(k, KIR_CEIL, x) : x;
  case GRAPH_OP_ROUND: return fl ? pass_alu1(k, KIR_RINT, x) : x;
  case GRAPH_OP_TRUNC: return fl ? pass_alu1(k, KIR_TRUNC, x) : x;
  case GRAPH_OP_LOGICAL_NOT: return pass_alu2(k, KIR_XOR, pass_cast_to(k, KIR_BOOL, x), kir_const_f(k, KIR_BOOL, 1));
  case GRAPH_OP_DETACH: return x;
  case GRAPH_OP_CLAMP: {
    double lo = graph_attr_scalar(n), hi = graph_attr_scalar2(n);
    if (kir_is_int(t)) return op_clamp_int(k, x, lo, hi);
    if (!isnan(lo)) x = pass_alu2(k, KIR_MAX, x, pass_cst(k, t, lo));
    if (!isnan(hi)) x = pass_alu2(k, KIR_MIN, x, pass_cst(k, t, hi));
    return x;
  }
  default: return pass_op_trig(k, op, x);
  }
}

static int logical(kir_kernel *k, kir_op op, int a, int b) {
  return pass_alu2(k, op, pass_cast_to(k, KIR_BOOL, a), pass_cast_to(k, KIR_BOOL, b));
}

int pass_op_binary(kir_kernel *k, graph_op op, int a, int b) {
  bool is_bool = pass_type_of(k, a) == KIR_BOOL;
  switch (op) {
  case GRAPH_OP_ADD: return pass_alu2(k, is_bool ? KIR_OR : KIR_ADD, a, b);
  case GRAPH_OP_SUB: return pass_alu2(k, KIR_SUB, a, b);
  case GRAPH_OP_MUL: return pass_alu2(k, is_bool ? KIR_AND : KIR_MUL, a, b);
  case GRAPH_OP_DIV: return pass_alu2(k, KIR_DIV, a, b);
  case GRAPH_OP_POW: return op_pow(k, a, b);
  case GRAPH_OP_MAXIMUM: return pass_alu2(k, is_bool ? KIR_OR : KIR_MAX, a, b);
  case GRAPH_OP_MINIMUM: return pass_alu2(k, is_bool ? KIR_AND : KIR_MIN, a, b);
  case GRAPH_OP_FMOD: return pass_alu2(k, KIR_MOD, a, b);
  case GRAPH_OP_REMAINDER: return op_remainder(k, a, b);
  case GRAPH_OP_ATAN2: return pass_alu2(k, KIR_ATAN2, a, b);
  case GRAPH_OP_EQ: return pass_cmp(k, KIR_CMPEQ, a, b);
  case GRAPH_OP_NE: return pass_cmp(k, KIR_CMPNE, a, b);
  case GRAPH_OP_LT: return pass_cmp(k, KIR_CMPLT, a, b);
  case GRAPH_OP_LE: return pass_cmp(k, KIR_CMPLE, a, b);
  case GRAPH_OP_GT: return pass_cmp(k, KIR_CMPLT, b, a);
  case GRAPH_OP_GE: return pass_cmp(k, KIR_CMPLE, b, a);
  case GRAPH_OP_LOGICAL_AND: return logical(k, KIR_AND, a, b);
  case GRAPH_OP_LOGICAL_OR: return logical(k, KIR_OR, a, b);
  case GRAPH_OP_LOGICAL_XOR: return logical(k, KIR_XOR, a, b);
  default: return -1;
  }
}
