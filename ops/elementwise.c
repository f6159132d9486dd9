/*
 * elementwise.c — unary, binary and ternary elementwise ops: broadcasting,
 * Torch's type promotion, and recording one graph node per op.
 *
 * Promotion (Torch's result_type): operands are ranked by category (bool <
 * integer < float). Dimensioned tensors promote with each other; a 0-d
 * tensor or a scalar counts only when its category is higher than every
 * dimensioned operand's. A double scalar is an integer when it is
 * integral, else a float (Kiln has no separate Python int/float).
 */
#include <math.h>

#include "ops.h"

/* One operand for promotion: its dtype and whether it is dimensioned. */
typedef struct operand {
  kiln_dtype dtype;
  bool dimensioned;
  bool scalar; /* a double: its dtype is I64 or the default float */
} operand;

static operand of_tensor(const kiln_tensor *t) { return (operand){t->storage->dtype, t->view.ndim > 0, false}; }

static operand of_scalar(double s) {
  bool integral = isfinite(s) && s == floor(s) && fabs(s) < 9.2e18;
  return (operand){integral ? KILN_I64 : KILN_F64, false, true};
}

static kiln_dtype result_type(const operand *ops, int n) {
  kiln_dtype dim = KILN_BOOL, zero = KILN_BOOL;
  bool has_dim = false, has_zero = false;
  for (int i = 0; i < n; i++) {
    kiln_dtype d = ops[i].dtype;
    if (ops[i].scalar) d = d == KILN_F64 ? graph_default_float() : KILN_I64;
    if (ops[i].dimensioned) {
      dim = has_dim ? graph_promote(dim, d) : d;
      has_dim = true;
    } else if (!ops[i].scalar) {
      zero = has_zero ? graph_promote(zero, d) : d;
      has_zero = true;
    }
  }
  /* scalars: only their category matters */
  kiln_dtype best = has_dim ? dim : has_zero ? zero : ops[0].dtype;
  if (has_dim && has_zero && graph_dtypes[zero].category > graph_dtypes[dim].category) best = zero;
  for (int i = 0; i < n; i++) {
    if (!ops[i].scalar) continue;
    if (!has_dim && !has_zero) return ops[i].dtype == KILN_F64 ? graph_default_float() : KILN_I64;
    graph_category c = graph_dtypes[ops[i].dtype].category;
    if (c > graph_dtypes[best].category) best = c == GRAPH_CAT_FLOAT ? graph_default_float() : KILN_I64;
  }
  return best;
}

/* Broadcast sizes of views [n] into out; false if incompatible. */
static bool broadcast_sizes(const graph_view *const *vs, int n, int *ndim, int64_t *sizes) {
  int nd = 0;
  for (int i = 0; i < n; i++) nd = vs[i]->ndim > nd ? vs[i]->ndim : nd;
  for (int d = 0; d < nd; d++) sizes[d] = 1;
  for (int i = 0; i < n; i++) {
    int shift = nd - vs[i]->ndim;
    for (int d = 0; d < vs[i]->ndim; d++) {
      int64_t s = vs[i]->sizes[d], *o = &sizes[d + shift];
      if (s == *o || s == 1) continue;
      if (*o != 1) return false;
      *o = s;
    }
  }
  *ndim = nd;
  return true;
}

static kiln_dtype op_result(graph_op op, kiln_dtype promoted) {
  switch (graph_ops[op].result) {
  case GRAPH_RES_FLOAT: return graph_is_float(promoted) ? promoted : graph_default_float();
  case GRAPH_RES_BOOL: return KILN_BOOL;
  case GRAPH_RES_LONG: return KILN_I64;
  default: return promoted;
  }
}

/* Rejects what Torch rejects for bool operands. */
static bool check_bool_op(graph_op op, kiln_dtype promoted, const char *fn) {
  if (promoted != KILN_BOOL) return true;
  if (op == GRAPH_OP_NEG || op == GRAPH_OP_SUB || op == GRAPH_OP_RELU) {
    api_error(KILN_ERR_DTYPE, fn, "not supported for bool tensors (use logical_not / logical_xor)");
    return false;
  }
  if (op == GRAPH_OP_FMOD || op == GRAPH_OP_REMAINDER) { /* Torch: not implemented for 'Bool' */
    api_error(KILN_ERR_DTYPE, fn, "not supported for bool tensors (convert them to an integer dtype first)");
    return false;
  }
  return true;
}

/* Records op over inputs (tensors or scalars) and returns the result. */
static kiln_tensor *record(graph_op op, kiln_tensor *const *ts, const double *scalars, int n, const char *fn,
                           double attr0, double attr1) {
  operand ops[GRAPH_MAX_INPUTS];
  graph_node *scalar_nodes[GRAPH_MAX_INPUTS] = {0};
  graph_view views[GRAPH_MAX_INPUTS];
  const graph_view *vp[GRAPH_MAX_INPUTS];
  for (int i = 0; i < n; i++) {
    if (ts[i]) {
      ops[i] = of_tensor(ts[i]);
      views[i] = ts[i]->view;
    } else {
      ops[i] = of_scalar(scalars[i]);
      views[i] = (graph_view){0};
    }
    vp[i] = &views[i];
  }
  int ndim;
  int64_t sizes[KILN_MAX_DIMS];
  if (!broadcast_sizes(vp, n, &ndim, sizes)) {
    char a[256], b[256];
    api_error(KILN_ERR_SHAPE, fn, "sizes %s and %s cannot be broadcast", api_fmt_sizes(a, sizeof a, vp[0]->ndim, vp[0]->sizes),
              api_fmt_sizes(b, sizeof b, vp[n - 1]->ndim, vp[n - 1]->sizes));
    return NULL;
  }
  if (!api_check_sizes(ndim, sizes, fn)) return NULL; /* broadcast views: [n, 1] with [1, n] */
  /* where(): the condition does not take part in promotion */
  int first = op == GRAPH_OP_WHERE ? 1 : 0;
  kiln_dtype promoted = result_type(ops + first, n - first);
  if (!check_bool_op(op, promoted, fn)) return NULL;
  graph_node *node = graph_node_new(op, op_result(op, promoted), ndim, sizes);
  if (!node) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  node->cdtype = graph_ops[op].result == GRAPH_RES_FLOAT ? node->dtype : promoted;
  graph_attr_set_scalar(node, attr0);
  graph_attr_set_scalar2(node, attr1);
  for (int i = 0; i < n; i++) {
    graph_view bv;
    graph_view_broadcast(vp[i], ndim, sizes, &bv); /* cannot fail: sizes broadcast */
    if (ts[i] && !api_add_input(node, ts[i], &bv)) {
      graph_node_release(node);
      return NULL;
    }
    if (ts[i]) continue;
    scalar_nodes[i] = graph_node_new(GRAPH_OP_FULL, ops[i].dtype, 0, NULL);
    if (!scalar_nodes[i]) {
      graph_node_release(node);
      api_error(KILN_ERR_OOM, fn, "out of memory");
      return NULL;
    }
    graph_attr_set_scalar(scalar_nodes[i], scalars[i]);
    graph_node_add_input(node, scalar_nodes[i], &bv);
    graph_node_release(scalar_nodes[i]);
  }
  return api_tensor_from_node(node, fn);
}

kiln_tensor *ops_elementwise(graph_op op, kiln_tensor *const *ts, const double *scalars, int n, const char *fn,
                             double attr0, double attr1) {
  return record(op, ts, scalars, n, fn, attr0, attr1);
}

kiln_dtype ops_elementwise_dtype(graph_op op, kiln_tensor *const *ts, const double *scalars, int n) {
  operand ops[GRAPH_MAX_INPUTS];
  for (int i = 0; i < n; i++) ops[i] = ts[i] ? of_tensor(ts[i]) : of_scalar(scalars[i]);
  return op_result(op, result_type(ops, n));
}

static kiln_tensor *unary(kiln_tensor *t, graph_op op, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  return record(op, &t, NULL, 1, fn, 0, 0);
}

static kiln_tensor *binary(kiln_tensor *a, kiln_tensor *b, graph_op op, const char *fn) {
  if (!api_check(a, fn, "a") || !api_check(b, fn, "b")) return NULL;
  kiln_tensor *ts[2] = {a, b};
  return record(op, ts, NULL, 2, fn, 0, 0);
}

static kiln_tensor *binary_scalar(kiln_tensor *t, double s, graph_op op, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  kiln_tensor *ts[2] = {t, NULL};
  double sc[2] = {0, s};
  return record(op, ts, sc, 2, fn, 0, 0);
}

#define UNARY(name, OP) \
  KILN_API kiln_tensor *kiln_##name(kiln_tensor *t) { return unary(t, GRAPH_OP_##OP, "kiln_" #name); }
#define BINARY(name, OP)                                          \
  KILN_API kiln_tensor *kiln_##name(kiln_tensor *a, kiln_tensor *b) { \
    return binary(a, b, GRAPH_OP_##OP, "kiln_" #name);             \
  }
#define SCALAR(name, OP)                                                   \
  KILN_API kiln_tensor *kiln_##name##_scalar(kiln_tensor *t, double s) {   \
    return binary_scalar(t, s, GRAPH_OP_##OP, "kiln_" #name "_scalar");    \
  }

UNARY(neg, NEG) UNARY(abs, ABS) UNARY(sign, SIGN) UNARY(exp, EXP) UNARY(exp2, EXP2) UNARY(log, LOG)
UNARY(log2, LOG2) UNARY(log1p, LOG1P) UNARY(expm1, EXPM1) UNARY(sqrt, SQRT) UNARY(rsqrt, RSQRT)
UNARY(reciprocal, RECIPROCAL) UNARY(sin, SIN) UNARY(cos, COS) UNARY(tan, TAN) UNARY(tanh, TANH)
UNARY(sigmoid, SIGMOID) UNARY(relu, RELU) UNARY(gelu, GELU) UNARY(silu, SILU) UNARY(erf, ERF)
UNARY(floor, FLOOR) UNARY(ceil, CEIL) UNARY(round, ROUND) UNARY(trunc, TRUNC)
UNARY(logical_not, LOGICAL_NOT)
UNARY(asin, ASIN) UNARY(acos, ACOS) UNARY(atan, ATAN) UNARY(sinh, SINH) UNARY(cosh, COSH)
UNARY(asinh, ASINH) UNARY(acosh, ACOSH) UNARY(atanh, ATANH)

BINARY(add, ADD) BINARY(sub, SUB) BINARY(mul, MUL) BINARY(div, DIV) BINARY(pow, POW)
BINARY(maximum, MAXIMUM) BINARY(minimum, MINIMUM) BINARY(fmod, FMOD) BINARY(remainder, REMAINDER)
BINARY(atan2, ATAN2) BINARY(eq, EQ) BINARY(ne, NE) BINARY(lt, LT) BINARY(le, LE) BINARY(gt, GT)
BINARY(ge, GE) BINARY(logical_and, LOGICAL_AND) BINARY(logical_or, LOGICAL_OR)
BINARY(logical_xor, LOGICAL_XOR)

SCALAR(add, ADD) SCALAR(sub, SUB) SCALAR(mul, MUL) SCALAR(div, DIV) SCALAR(pow, POW)
SCALAR(maximum, MAXIMUM) SCALAR(minimum, MINIMUM) SCALAR(eq, EQ) SCALAR(ne, NE) SCALAR(lt, LT)
SCALAR(le, LE) SCALAR(gt, GT) SCALAR(ge, GE)

KILN_API kiln_tensor *kiln_where(kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b) {
  const char *fn = "kiln_where";
  if (!api_check(cond, fn, "cond") || !api_check(a, fn, "a") || !api_check(b, fn, "b")) return NULL;
  kiln_dtype cd = cond->storage->dtype;
  if (cd != KILN_BOOL && cd != KILN_U8) {
    api_error(KILN_ERR_DTYPE, fn, "condition must be bool or u8, got %s", graph_dtypes[cd].name);
    return NULL;
  }
  kiln_tensor *ts[3] = {cond, a, b};
  return record(GRAPH_OP_WHERE, ts, NULL, 3, fn, 0, 0);
}

KILN_API kiln_tensor *kiln_clamp(kiln_tensor *t, double lo, double hi) {
  if (!api_check(t, "kiln_clamp", "t")) return NULL;
  if (t->storage->dtype == KILN_BOOL) {
    api_error(KILN_ERR_DTYPE, "kiln_clamp", "not supported for bool tensors");
    return NULL;
  }
  return record(GRAPH_OP_CLAMP, &t, NULL, 1, "kiln_clamp", lo, hi);
}
