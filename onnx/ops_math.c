/*
 * ops_math.c — ONNX's elementwise operators, reductions, MatMul/Gemm and
 * Softmax/LogSoftmax as Kiln ops.
 *
 * ONNX's multidirectional broadcasting is NumPy's, which is Kiln's. ONNX
 * keeps the operands' type where Torch promotes (integer Div truncates,
 * an integer sum stays in its type, Pow keeps the base's type): results
 * are cast back to the type ONNX gives (onnx_like). Reductions take their
 * axes from the attribute (older opsets) or the second input (ReduceSum
 * from opset 13, the others from 18), keepdims default 1, and with
 * noop_with_empty_axes an empty axes list is the identity.
 */
#include <math.h>
#include <string.h>

#include "onnx_internal.h"

#define OP(name) static int op_##name(onnx_ctx *c, kiln_tensor **in, int n_in, kiln_tensor **out, int n_out)
#define UNUSED_ARGS (void)c, (void)n_in, (void)n_out

/* t cast to dtype d (t itself when it has it): a scope-owned result. */
static kiln_tensor *like(kiln_tensor *t, kiln_dtype d) {
  if (!t) return NULL;
  return kiln_dtype_of(t) == d ? t : kiln_to_dtype(t, d);
}

static bool is_float(kiln_dtype d) { return d == KILN_F16 || d == KILN_BF16 || d == KILN_F32 || d == KILN_F64; }

/* ------------------------------------------------------------- unary */

#define UNARY(name, expr)                                                                                          \
  OP(name) {                                                                                                       \
    UNUSED_ARGS;                                                                                                   \
    kiln_tensor *x = in[0];                                                                                        \
    return onnx_set(out, (expr));                                                                                  \
  }

UNARY(Abs, kiln_abs(x))
UNARY(Neg, kiln_neg(x))
UNARY(Exp, kiln_exp(x))
UNARY(Log, kiln_log(x))
UNARY(Sqrt, kiln_sqrt(x))
UNARY(Reciprocal, kiln_reciprocal(x))
UNARY(Sin, kiln_sin(x))
UNARY(Cos, kiln_cos(x))
UNARY(Tan, kiln_tan(x))
UNARY(Asin, kiln_asin(x))
UNARY(Acos, kiln_acos(x))
UNARY(Atan, kiln_atan(x))
UNARY(Sinh, kiln_sinh(x))
UNARY(Cosh, kiln_cosh(x))
UNARY(Asinh, kiln_asinh(x))
UNARY(Acosh, kiln_acosh(x))
UNARY(Atanh, kiln_atanh(x))
UNARY(Tanh, kiln_tanh(x))
UNARY(Sigmoid, kiln_sigmoid(x))
UNARY(Relu, kiln_relu(x))
UNARY(Erf, kiln_erf(x))
UNARY(Floor, kiln_floor(x))
UNARY(Ceil, kiln_ceil(x))
UNARY(Round, kiln_round(x))
UNARY(Sign, kiln_sign(x))
UNARY(Not, kiln_logical_not(x))
UNARY(Softsign, kiln_softsign(x))
UNARY(IsNaN, kiln_isnan(x))
UNARY(Identity, x)
UNARY(Elu, kiln_elu(x, onnx_attr_float(c, "alpha", 1.0)))
UNARY(LeakyRelu, kiln_leaky_relu(x, onnx_attr_float(c, "alpha", 0.01)))
UNARY(Softplus, like(kiln_log1p(kiln_exp(x)), kiln_dtype_of(x)))
UNARY(Mish, kiln_mul(x, kiln_tanh(kiln_log1p(kiln_exp(x)))))
UNARY(HardSigmoid,
      kiln_clamp(kiln_add_scalar(kiln_mul_scalar(x, onnx_attr_float(c, "alpha", 0.2)), onnx_attr_float(c, "beta", 0.5)),
                 0, 1))
UNARY(HardSwish, kiln_mul(x, kiln_clamp(kiln_add_scalar(kiln_div_scalar(x, 6), 0.5), 0, 1)))
UNARY(ThresholdedRelu, kiln_where(kiln_gt_scalar(x, onnx_attr_float(c, "alpha", 1.0)), x, kiln_zeros_like(x)))

OP(Selu) {
  UNUSED_ARGS;
  double alpha = onnx_attr_float(c, "alpha", 1.67326319217681884765625);
  double gamma = onnx_attr_float(c, "gamma", 1.05070102214813232421875);
  return onnx_set(out, kiln_mul_scalar(kiln_elu(in[0], alpha), gamma));
}

OP(Celu) {
  UNUSED_ARGS;
  double a = onnx_attr_float(c, "alpha", 1.0);
  kiln_tensor *x = in[0];
  kiln_tensor *neg = kiln_minimum_scalar(kiln_mul_scalar(kiln_expm1(kiln_div_scalar(x, a)), a), 0);
  return onnx_set(out, kiln_add(kiln_relu(x), neg));
}

OP(Gelu) {
  UNUSED_ARGS;
  char mode[16];
  onnx_attr_string(c, "approximate", "none", mode, sizeof mode);
  kiln_tensor *x = in[0];
  if (strcmp(mode, "tanh") != 0) return onnx_set(out, kiln_gelu(x));
  /* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
  kiln_tensor *inner = kiln_mul_scalar(kiln_add(x, kiln_mul_scalar(kiln_pow_scalar(x, 3), 0.044715)),
                                       sqrt(2.0 / M_PI));
  return onnx_set(out, kiln_mul(kiln_mul_scalar(x, 0.5), kiln_add_scalar(kiln_tanh(inner), 1)));
}

OP(IsInf) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  bool neg = onnx_attr_int(c, "detect_negative", 1), pos = onnx_attr_int(c, "detect_positive", 1);
  kiln_tensor *r = kiln_isinf(x);
  if (!neg) r = kiln_logical_and(r, kiln_gt_scalar(x, 0));
  if (!pos) r = kiln_logical_and(r, kiln_lt_scalar(x, 0));
  return onnx_set(out, r);
}

OP(PRelu) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0], *slope = in[1];
  int rank = kiln_dim(x);
  if (c->opset < 7 && kiln_dim(slope) == 1 && rank > 2 && kiln_size(slope, 0) == kiln_size(x, 1) &&
      kiln_size(x, 1) != kiln_size(x, rank - 1)) {
    /* PRelu-6: a 1-d slope holds one value per channel (dim 1) */
    int64_t s[KILN_MAX_DIMS];
    for (int d = 1; d < rank; d++) s[d - 1] = d == 1 ? kiln_size(slope, 0) : 1;
    slope = kiln_reshape(slope, rank - 1, s);
  }
  return onnx_set(out, kiln_where(kiln_lt_scalar(x, 0), kiln_mul(x, slope), x));
}

/* ------------------------------------------------------------ binary */

/* Before opset 7, B broadcast to A only with broadcast=1, its dims
 * matched to A's from `axis` on (default: A's trailing dims, NumPy's
 * rule): B gets trailing dims of size 1. */
static kiln_tensor *legacy_b(onnx_ctx *c, kiln_tensor *a, kiln_tensor *b) {
  if (c->opset >= 7 || !onnx_attr_int(c, "broadcast", 0) || !onnx_attr(c, "axis")) return b;
  int ra = kiln_dim(a), rb = kiln_dim(b);
  int64_t axis = onnx_attr_int(c, "axis", 0), s[KILN_MAX_DIMS];
  if (axis < 0) axis += ra;
  if (axis < 0 || axis + rb > ra) return b; /* the op reports the shapes */
  for (int d = 0; d < ra - axis; d++) s[d] = d < rb ? kiln_size(b, d) : 1;
  return kiln_reshape(b, (int)(ra - axis), s);
}

#define BINARY(name, expr)                                                                                         \
  OP(name) {                                                                                                       \
    UNUSED_ARGS;                                                                                                   \
    kiln_tensor *a = in[0], *b = legacy_b(c, in[0], in[1]);                                                        \
    return onnx_set(out, (expr));                                                                                  \
  }

BINARY(Add, like(kiln_add(a, b), kiln_dtype_of(a)))
BINARY(Sub, like(kiln_sub(a, b), kiln_dtype_of(a)))
BINARY(Mul, like(kiln_mul(a, b), kiln_dtype_of(a)))
BINARY(Pow, like(kiln_pow(a, b), kiln_dtype_of(a)))
BINARY(Equal, kiln_eq(a, b))
BINARY(Less, kiln_lt(a, b))
BINARY(LessOrEqual, kiln_le(a, b))
BINARY(Greater, kiln_gt(a, b))
BINARY(GreaterOrEqual, kiln_ge(a, b))
BINARY(And, kiln_logical_and(a, b))
BINARY(Or, kiln_logical_or(a, b))
BINARY(Xor, kiln_logical_xor(a, b))

OP(Div) {
  UNUSED_ARGS;
  kiln_tensor *a = in[0], *b = legacy_b(c, in[0], in[1]);
  kiln_dtype d = kiln_dtype_of(a);
  if (is_float(d)) return onnx_set(out, like(kiln_div(a, b), d));
  /* integers: C's truncating division, exact in double for |v| < 2^53 */
  kiln_tensor *q = kiln_trunc(kiln_div(kiln_to_dtype(a, KILN_F64), kiln_to_dtype(b, KILN_F64)));
  return onnx_set(out, like(q, d));
}

OP(Mod) {
  UNUSED_ARGS;
  kiln_tensor *a = in[0], *b = in[1];
  kiln_tensor *r = onnx_attr_int(c, "fmod", 0) ? kiln_fmod(a, b) : kiln_remainder(a, b);
  return onnx_set(out, like(r, kiln_dtype_of(a)));
}

/* Max, Min, Sum, Mean: any number of inputs, broadcast together. */
static int variadic(kiln_tensor **in, int n_in, kiln_tensor **out, kiln_tensor *(*f)(kiln_tensor *, kiln_tensor *)) {
  kiln_tensor *r = in[0];
  for (int k = 1; k < n_in; k++) r = f(r, in[k]);
  if (r == in[0]) r = kiln_add_scalar(r, 0); /* a result of its own, broadcast as one input */
  return onnx_set(out, like(r, kiln_dtype_of(in[0])));
}

OP(Max) { UNUSED_ARGS; return variadic(in, n_in, out, kiln_maximum); }
OP(Min) { UNUSED_ARGS; return variadic(in, n_in, out, kiln_minimum); }
OP(Sum) { UNUSED_ARGS; return variadic(in, n_in, out, kiln_add); }
OP(Mean) {
  UNUSED_ARGS;
  int rc = variadic(in, n_in, out, kiln_add);
  return rc < 0 ? rc : onnx_set(out, kiln_div_scalar(out[0], n_in));
}

OP(Where) {
  UNUSED_ARGS;
  return onnx_set(out, kiln_where(in[0], in[1], in[2]));
}

OP(Clip) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  kiln_dtype d = kiln_dtype_of(x);
  if (c->opset < 11) {
    double lo = onnx_attr_float(c, "min", -INFINITY), hi = onnx_attr_float(c, "max", INFINITY);
    return onnx_set(out, kiln_clamp(x, lo, hi));
  }
  kiln_tensor *r = x;
  if (n_in > 1 && in[1]) r = like(kiln_maximum(r, in[1]), d);
  if (n_in > 2 && in[2]) r = like(kiln_minimum(r, in[2]), d);
  return onnx_set(out, r);
}

OP(Cast) {
  UNUSED_ARGS;
  kiln_dtype d;
  int64_t to = onnx_attr_int(c, "to", 0);
  if (!onnx_dtype((int32_t)to, &d)) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "cast to ONNX data type %lld", (long long)to);
  return onnx_set(out, like(in[0], d));
}

OP(CastLike) {
  UNUSED_ARGS;
  return onnx_set(out, like(in[0], kiln_dtype_of(in[1])));
}

/* -------------------------------------------------------- reductions */

/* The axes of a reduction as dims of x: *nd = 0 means all; returns false
 * on error. *noop: empty axes with noop_with_empty_axes. */
static bool reduce_axes(onnx_ctx *c, kiln_tensor **in, int n_in, int axes_input_opset, int *dims, int *nd, bool *noop) {
  int64_t ax[KILN_MAX_DIMS];
  int n = -1, rank = kiln_dim(in[0]);
  *noop = false;
  if (c->opset >= axes_input_opset) {
    n = n_in > 1 && in[1] ? onnx_read_ints(c, in[1], ax, KILN_MAX_DIMS, "axes") : 0;
    if (n < 0) return false;
    if (n == 0 && onnx_attr_int(c, "noop_with_empty_axes", 0)) *noop = true;
  } else {
    const int64_t *a;
    n = onnx_attr_ints(c, "axes", &a);
    if (n > KILN_MAX_DIMS) return onnx_fail(c, KILN_ERR_ARG, "%d axes", n), false;
    for (int k = 0; k < n; k++) ax[k] = a[k];
    if (n < 0) n = 0;
  }
  for (int k = 0; k < n; k++)
    if ((dims[k] = onnx_axis(c, ax[k], rank)) < 0) return false;
  *nd = n;
  return true;
}

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LSE, R_SUMSQ, R_LOGSUM } reduce_kind;

static int reduce(onnx_ctx *c, kiln_tensor **in, int n_in, kiln_tensor **out, reduce_kind k) {
  int dims[KILN_MAX_DIMS], nd;
  bool noop;
  if (!reduce_axes(c, in, n_in, k == R_SUM ? 13 : 18, dims, &nd, &noop)) return onnx_status();
  kiln_tensor *x = in[0];
  if (noop) return onnx_set(out, x);
  bool keep = onnx_attr_int(c, "keepdims", 1) != 0;
  kiln_dtype d = kiln_dtype_of(x);
  if (kiln_dim(x) == 0) nd = 0;
  kiln_tensor *r = NULL;
  switch (k) {
  case R_SUM: r = kiln_sum(x, nd, dims, keep); break;
  case R_MEAN: r = kiln_mean(x, nd, dims, keep); break;
  case R_MAX: r = kiln_amax(x, nd, dims, keep); break;
  case R_MIN: r = kiln_amin(x, nd, dims, keep); break;
  case R_PROD: r = kiln_prod(x, nd, dims, keep); break;
  case R_L1: r = kiln_sum(kiln_abs(x), nd, dims, keep); break;
  case R_L2: r = kiln_sqrt(kiln_sum(kiln_mul(x, x), nd, dims, keep)); break;
  case R_LSE: r = kiln_logsumexp(x, nd, dims, keep); break;
  case R_SUMSQ: r = kiln_sum(kiln_mul(x, x), nd, dims, keep); break;
  case R_LOGSUM: r = kiln_log(kiln_sum(x, nd, dims, keep)); break;
  }
  return onnx_set(out, like(r, d));
}

OP(ReduceSum) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_SUM); }
OP(ReduceMean) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_MEAN); }
OP(ReduceMax) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_MAX); }
OP(ReduceMin) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_MIN); }
OP(ReduceProd) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_PROD); }
OP(ReduceL1) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_L1); }
OP(ReduceL2) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_L2); }
OP(ReduceLogSumExp) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_LSE); }
OP(ReduceSumSquare) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_SUMSQ); }
OP(ReduceLogSum) { UNUSED_ARGS; return reduce(c, in, n_in, out, R_LOGSUM); }

static int arg_reduce(onnx_ctx *c, kiln_tensor **in, kiln_tensor **out, bool max) {
  kiln_tensor *x = in[0];
  int axis = onnx_axis(c, onnx_attr_int(c, "axis", 0), kiln_dim(x));
  if (axis < 0) return onnx_status();
  bool keep = onnx_attr_int(c, "keepdims", 1) != 0;
  if (!onnx_attr_int(c, "select_last_index", 0)) return onnx_set(out, max ? kiln_argmax(x, axis, keep) : kiln_argmin(x, axis, keep));
  /* the last extreme: the first one of the reversed axis, mapped back */
  kiln_tensor *f = kiln_flip(x, 1, &axis);
  kiln_tensor *i = max ? kiln_argmax(f, axis, keep) : kiln_argmin(f, axis, keep);
  return onnx_set(out, kiln_sub(kiln_scalar(KILN_I64, (double)(kiln_size(x, axis) - 1)), i));
}

OP(ArgMax) { UNUSED_ARGS; return arg_reduce(c, in, out, true); }
OP(ArgMin) { UNUSED_ARGS; return arg_reduce(c, in, out, false); }

/* ------------------------------------------------------ linear algebra */

OP(MatMul) {
  UNUSED_ARGS;
  return onnx_set(out, kiln_matmul(in[0], in[1]));
}

/* Y = alpha A' B' + beta C, A' = transA ? A^T : A (2-d operands). */
OP(Gemm) {
  UNUSED_ARGS;
  kiln_tensor *a = in[0], *b = in[1];
  if (kiln_dim(a) != 2 || kiln_dim(b) != 2) return onnx_fail(c, KILN_ERR_SHAPE, "A and B must be 2-d");
  if (onnx_attr_int(c, "transA", 0)) a = kiln_t(a);
  if (onnx_attr_int(c, "transB", 0)) b = kiln_t(b);
  double alpha = onnx_attr_float(c, "alpha", 1.0), beta = onnx_attr_float(c, "beta", 1.0);
  kiln_tensor *y = kiln_matmul(a, b);
  if (alpha != 1.0) y = kiln_mul_scalar(y, alpha);
  if (n_in > 2 && in[2]) y = kiln_add(y, beta != 1.0 ? kiln_mul_scalar(in[2], beta) : in[2]);
  return onnx_set(out, like(y, kiln_dtype_of(in[0])));
}

/* Softmax and LogSoftmax: from opset 13 along axis (default -1);
 * before, over the input coerced to 2-d [prod(:axis), prod(axis:)] (axis
 * default 1). */
static int softmax_like(onnx_ctx *c, kiln_tensor **in, kiln_tensor **out, int kind) {
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  int axis = onnx_axis(c, onnx_attr_int(c, "axis", c->opset >= 13 ? -1 : 1), rank);
  if (axis < 0) return onnx_status();
  kiln_tensor *v = x;
  int dim = axis;
  if (c->opset < 13) {
    int64_t s[2] = {1, 1};
    for (int d = 0; d < rank; d++) s[d < axis ? 0 : 1] *= kiln_size(x, d);
    v = kiln_reshape(x, 2, s);
    dim = 1;
  }
  kiln_tensor *r = kind == 0 ? kiln_softmax(v, dim) : kiln_log_softmax(v, dim);
  if (c->opset < 13 && r) r = kiln_reshape(r, rank, kiln_sizes(x));
  return onnx_set(out, r);
}

/* Hardmax: 1 at the first maximum along the axis, else 0 (the axis
 * rule of Softmax). */
OP(Hardmax) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  int axis = onnx_axis(c, onnx_attr_int(c, "axis", c->opset >= 13 ? -1 : 1), rank);
  if (axis < 0) return onnx_status();
  kiln_tensor *v = x;
  int dim = axis, vr = rank;
  if (c->opset < 13) {
    int64_t s[2] = {1, 1};
    for (int d = 0; d < rank; d++) s[d < axis ? 0 : 1] *= kiln_size(x, d);
    v = kiln_reshape(x, 2, s);
    dim = 1;
    vr = 2;
  }
  /* one_hot puts the classes last: move them back to dim */
  kiln_tensor *h = kiln_one_hot(kiln_argmax(v, dim, false), kiln_size(v, dim));
  int perm[KILN_MAX_DIMS];
  for (int d = 0, j = 0; d < vr; d++) perm[d] = d == dim ? vr - 1 : j++;
  kiln_tensor *r = kiln_to_dtype(kiln_permute(h, vr, perm), kiln_dtype_of(x));
  if (c->opset < 13 && r) r = kiln_reshape(r, rank, kiln_sizes(x));
  return onnx_set(out, r);
}

/* CumSum along the axis input; exclusive drops each element's own term,
 * reverse sums from the end. */
OP(CumSum) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int64_t a;
  if (onnx_read_ints(c, in[1], &a, 1, "axis") != 1) return api_status() ? onnx_status() : onnx_fail(c, KILN_ERR_ARG, "axis must hold one value");
  int dim = onnx_axis(c, a, kiln_dim(x));
  if (dim < 0) return onnx_status();
  bool rev = onnx_attr_int(c, "reverse", 0) != 0, excl = onnx_attr_int(c, "exclusive", 0) != 0;
  kiln_tensor *v = rev ? kiln_flip(x, 1, &dim) : x;
  kiln_tensor *y = like(kiln_cumsum(v, dim), kiln_dtype_of(x));
  if (excl) y = kiln_sub(y, v);
  if (rev) y = kiln_flip(y, 1, &dim);
  return onnx_set(out, y);
}

OP(Softmax) { UNUSED_ARGS; return softmax_like(c, in, out, 0); }
OP(LogSoftmax) { UNUSED_ARGS; return softmax_like(c, in, out, 1); }

const onnx_op onnx_ops_math[] = {
#define U(n) {#n, op_##n, 1, 1, 1, 1}
#define B(n) {#n, op_##n, 2, 2, 1, 1}
    U(Abs), U(Neg), U(Exp), U(Log), U(Sqrt), U(Reciprocal), U(Sin), U(Cos), U(Tan), U(Asin), U(Acos), U(Atan),
    U(Sinh), U(Cosh), U(Asinh), U(Acosh), U(Atanh), U(Tanh), U(Sigmoid), U(Relu), U(Erf), U(Floor), U(Ceil),
    U(Round), U(Sign), U(Not), U(Softsign), U(IsNaN), U(Identity), U(Elu), U(LeakyRelu), U(Softplus), U(Mish),
    U(HardSigmoid), U(HardSwish), U(ThresholdedRelu), U(Selu), U(Celu), U(Gelu), U(IsInf),
    B(PRelu), B(Add), B(Sub), B(Mul), B(Div), B(Pow), B(Mod), B(Equal), B(Less), B(LessOrEqual), B(Greater),
    B(GreaterOrEqual), B(And), B(Or), B(Xor), B(MatMul), B(CastLike),
    {"Max", op_Max, 1, -1, 1, 1}, {"Min", op_Min, 1, -1, 1, 1}, {"Sum", op_Sum, 1, -1, 1, 1},
    {"Mean", op_Mean, 1, -1, 1, 1}, {"Where", op_Where, 3, 3, 1, 1}, {"Clip", op_Clip, 1, 3, 1, 1},
    {"Cast", op_Cast, 1, 1, 1, 1}, {"Gemm", op_Gemm, 2, 3, 1, 1},
    {"ReduceSum", op_ReduceSum, 1, 2, 1, 1}, {"ReduceMean", op_ReduceMean, 1, 2, 1, 1},
    {"ReduceMax", op_ReduceMax, 1, 2, 1, 1}, {"ReduceMin", op_ReduceMin, 1, 2, 1, 1},
    {"ReduceProd", op_ReduceProd, 1, 2, 1, 1}, {"ReduceL1", op_ReduceL1, 1, 2, 1, 1},
    {"ReduceL2", op_ReduceL2, 1, 2, 1, 1}, {"ReduceLogSumExp", op_ReduceLogSumExp, 1, 2, 1, 1},
    {"ReduceSumSquare", op_ReduceSumSquare, 1, 2, 1, 1}, {"ReduceLogSum", op_ReduceLogSum, 1, 2, 1, 1},
    {"ArgMax", op_ArgMax, 1, 1, 1, 1}, {"ArgMin", op_ArgMin, 1, 1, 1, 1},
    {"Softmax", op_Softmax, 1, 1, 1, 1}, {"LogSoftmax", op_LogSoftmax, 1, 1, 1, 1},
    {"Hardmax", op_Hardmax, 1, 1, 1, 1}, {"CumSum", op_CumSum, 2, 2, 1, 1},
#undef U
#undef B
    {NULL, NULL, 0, 0, 0, 0},
};
