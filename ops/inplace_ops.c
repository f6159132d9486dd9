/*
 * inplace_ops.c — Torch's in-place arithmetic: add_, sub_, ..., the
 * *_scalar_ forms, addcmul_/addcdiv_, clamp_ and the unary exp_, sqrt_,
 * floor_, ... Each is thin: check what Torch 1.13 checks for an in-place
 * op, record the out-of-place op (elementwise.c) and write its result back
 * through t's view with api_assign, as kiln_copy_ does.
 *
 * Invariants (Torch 1.13):
 *  - t keeps its dtype and sizes. The out-of-place result dtype (Kiln's
 *    promotion) must be castable to t's dtype by Torch's can_cast: no
 *    float -> integer/bool, no integer -> bool (the same or a lower
 *    category is fine: i32.add_(i64) computes in i64 and stores i32).
 *  - Tensor operands broadcast to t's sizes without changing them.
 *  - t's view may not repeat a storage element (ops_check_writable).
 *  - The op reads t's version from before the write, so an operand that
 *    aliases t (x.add_(x.t())) reads the old values; gradients flow
 *    through the ASSIGN version and the op's own rule, nothing new.
 *  - On any error nothing is recorded and t is unchanged.
 */
#include <math.h>

#include "ops.h"

/* Torch's canCast(from, to): never to a lower category (bool < int < float). */
static bool can_cast(kiln_dtype from, kiln_dtype to) {
  return graph_dtypes[from].category <= graph_dtypes[to].category;
}

/* The checks every in-place op shares: t writable, each of the n operands
 * broadcasts to t's sizes, and `result` (the op's dtype) casts to t's. */
static int check(kiln_tensor *t, kiln_tensor *const *operands, int n, kiln_dtype result, const char *fn) {
  if (!ops_check_writable(t, fn)) return KILN_ERR_ARG;
  for (int i = 0; i < n; i++) {
    graph_view bv;
    if (graph_view_broadcast(&operands[i]->view, t->view.ndim, t->view.sizes, &bv)) continue;
    char a[256], b[256];
    return api_error(KILN_ERR_SHAPE, fn, "operand sizes %s do not broadcast to the in-place destination's sizes %s",
                     api_fmt_sizes(a, sizeof a, operands[i]->view.ndim, operands[i]->view.sizes),
                     api_fmt_sizes(b, sizeof b, t->view.ndim, t->view.sizes));
  }
  kiln_dtype d = t->storage->dtype;
  if (!can_cast(result, d))
    return api_error(KILN_ERR_DTYPE, fn, "result type %s can't be cast to the desired output type %s (t's dtype)",
                     graph_dtypes[result].name, graph_dtypes[d].name);
  return KILN_OK;
}

/* Writes r (t's sizes, any dtype) into t's view and releases r. NULL r:
 * the error its op just reported. */
static int write_back(kiln_tensor *t, kiln_tensor *r, const char *fn) {
  if (!r) return api_status();
  graph_node *v = api_version(r);
  int st = v ? api_assign(t, v, &r->view, fn) : api_status();
  kiln_release(r);
  return st;
}

typedef enum form { FORM_UNARY, FORM_TENSOR, FORM_SCALAR } form;

/* t = op(t) / op(t, other) / op(t, s). */
static int inplace(kiln_tensor *t, form f, kiln_tensor *other, double s, graph_op op, const char *fn) {
  if (!api_check(t, fn, "t") || (f == FORM_TENSOR && !api_check(other, fn, "other"))) return KILN_ERR_ARG;
  kiln_tensor *ts[2] = {t, f == FORM_TENSOR ? other : NULL};
  double sc[2] = {0, s};
  int n = f == FORM_UNARY ? 1 : 2;
  int st = check(t, ts + 1, f == FORM_TENSOR, ops_elementwise_dtype(op, ts, sc, n), fn);
  if (st != KILN_OK) return st;
  api_untracked_begin();
  kiln_tensor *r = ops_elementwise(op, ts, sc, n, fn, 0, 0);
  api_untracked_end();
  return write_back(t, r, fn);
}

#define UNARY_(name, OP) \
  KILN_API int kiln_##name##_(kiln_tensor *t) { return inplace(t, FORM_UNARY, NULL, 0, GRAPH_OP_##OP, "kiln_" #name "_"); }
#define BINARY_(name, OP)                                                      \
  KILN_API int kiln_##name##_(kiln_tensor *t, kiln_tensor *other) {            \
    return inplace(t, FORM_TENSOR, other, 0, GRAPH_OP_##OP, "kiln_" #name "_"); \
  }
#define SCALAR_(name, OP)                                                             \
  KILN_API int kiln_##name##_scalar_(kiln_tensor *t, double value) {                  \
    return inplace(t, FORM_SCALAR, NULL, value, GRAPH_OP_##OP, "kiln_" #name "_scalar_"); \
  }

UNARY_(neg, NEG) UNARY_(abs, ABS) UNARY_(sign, SIGN) UNARY_(exp, EXP) UNARY_(exp2, EXP2) UNARY_(log, LOG)
UNARY_(log2, LOG2) UNARY_(log1p, LOG1P) UNARY_(expm1, EXPM1) UNARY_(sqrt, SQRT) UNARY_(rsqrt, RSQRT)
UNARY_(reciprocal, RECIPROCAL) UNARY_(sin, SIN) UNARY_(cos, COS) UNARY_(tan, TAN) UNARY_(tanh, TANH)
UNARY_(sigmoid, SIGMOID) UNARY_(relu, RELU) UNARY_(erf, ERF) UNARY_(floor, FLOOR) UNARY_(ceil, CEIL)
UNARY_(round, ROUND) UNARY_(trunc, TRUNC)
UNARY_(asin, ASIN) UNARY_(acos, ACOS) UNARY_(atan, ATAN) UNARY_(sinh, SINH) UNARY_(cosh, COSH)
UNARY_(asinh, ASINH) UNARY_(acosh, ACOSH) UNARY_(atanh, ATANH)

BINARY_(add, ADD) BINARY_(sub, SUB) BINARY_(mul, MUL) BINARY_(div, DIV) BINARY_(pow, POW) BINARY_(fmod, FMOD)
BINARY_(remainder, REMAINDER) BINARY_(atan2, ATAN2)

SCALAR_(add, ADD) SCALAR_(sub, SUB) SCALAR_(mul, MUL) SCALAR_(div, DIV) SCALAR_(pow, POW)

KILN_API int kiln_clamp_(kiln_tensor *t, double lo, double hi) {
  const char *fn = "kiln_clamp_";
  if (!api_check(t, fn, "t")) return KILN_ERR_ARG;
  if (t->storage->dtype == KILN_BOOL) return api_error(KILN_ERR_DTYPE, fn, "not supported for bool tensors");
  int st = check(t, NULL, 0, t->storage->dtype, fn);
  if (st != KILN_OK) return st;
  api_untracked_begin();
  kiln_tensor *r = ops_elementwise(GRAPH_OP_CLAMP, &t, NULL, 1, fn, lo, hi);
  api_untracked_end();
  return write_back(t, r, fn);
}

/* t += value * op(t1, t2), op MUL (addcmul_) or DIV (addcdiv_), computed
 * as Torch does in the common dtype of t, t1 and t2: t1 and t2 are
 * converted to it and value is cast to it (truncated for integers, so
 * i32.addcmul_(a, b, 0.5) adds nothing, as in Torch). */
static int addc(kiln_tensor *t, kiln_tensor *t1, kiln_tensor *t2, double value, graph_op op, const char *fn) {
  if (!api_check(t, fn, "t") || !api_check(t1, fn, "t1") || !api_check(t2, fn, "t2")) return KILN_ERR_ARG;
  kiln_tensor *ts[3] = {t, t1, t2};
  kiln_dtype cd = ops_elementwise_dtype(GRAPH_OP_ADD, ts, NULL, 3);
  kiln_dtype d1 = t1->storage->dtype, d2 = t2->storage->dtype;
  if (op == GRAPH_OP_DIV && !graph_is_float(d1) && !graph_is_float(d2))
    return api_error(KILN_ERR_DTYPE, fn,
                     "integer division of t1 (%s) by t2 (%s) is not supported (Torch: \"Integer division with "
                     "addcdiv is no longer supported\"); convert one of them to a float dtype",
                     graph_dtypes[d1].name, graph_dtypes[d2].name);
  if (cd == KILN_BOOL) return api_error(KILN_ERR_DTYPE, fn, "not supported for bool tensors");
  int st = check(t, ts + 1, 2, cd, fn);
  if (st != KILN_OK) return st;
  if (!graph_is_float(cd)) {
    if (!isfinite(value) || fabs(value) >= 9.2e18)
      return api_error(KILN_ERR_ARG, fn, "value %g cannot be converted to %s without overflow", value,
                       graph_dtypes[cd].name);
    value = trunc(value);
  }
  api_untracked_begin();
  kiln_tensor *a = d1 == cd ? kiln_retain(t1) : kiln_to_dtype(t1, cd);
  kiln_tensor *b = d2 == cd ? kiln_retain(t2) : kiln_to_dtype(t2, cd);
  kiln_tensor *p = NULL, *q = NULL, *r = NULL;
  if (a && b) p = ops_elementwise(op, (kiln_tensor *[]){a, b}, NULL, 2, fn, 0, 0);
  if (p) q = ops_elementwise(GRAPH_OP_MUL, (kiln_tensor *[]){p, NULL}, (double[]){0, value}, 2, fn, 0, 0);
  if (q) r = ops_elementwise(GRAPH_OP_ADD, (kiln_tensor *[]){t, q}, NULL, 2, fn, 0, 0);
  api_untracked_end();
  kiln_release(a);
  kiln_release(b);
  kiln_release(p);
  kiln_release(q);
  return write_back(t, r, fn);
}

KILN_API int kiln_addcmul_(kiln_tensor *t, kiln_tensor *t1, kiln_tensor *t2, double value) {
  return addc(t, t1, t2, value, GRAPH_OP_MUL, "kiln_addcmul_");
}

KILN_API int kiln_addcdiv_(kiln_tensor *t, kiln_tensor *t1, kiln_tensor *t2, double value) {
  return addc(t, t1, t2, value, GRAPH_OP_DIV, "kiln_addcdiv_");
}
