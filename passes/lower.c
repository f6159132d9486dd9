/*
 * lower.c — lowers one graph node to one kernel-IR kernel (the unfused
 * path: one kernel per node). Later passes fuse before this point; the
 * per-op semantics (apply_op) are written once here for every backend.
 *
 * Loop nests follow the node's logical sizes; every input is read through
 * its recorded view: element (i0..ik) of input j is at
 * view.offset + sum(id * view.strides[d]). Outputs are contiguous.
 * Arithmetic runs in graph_compute_dtype(node->cdtype) (F16/BF16 in F32);
 * reductions of floats accumulate in F64, of integers in I64.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower.h"

typedef struct lower_ctx {
  kir_kernel *k;
  const graph_node *n;
  int out;                          /* PARAM 0 */
  int params[GRAPH_MAX_INPUTS];     /* PARAM 1 + i */
  int scalar[GRAPH_MAX_INPUTS];     /* value of an inlined FULL input, or -1 */
  int offset[GRAPH_MAX_INPUTS + 1]; /* view offsets, then ASSIGN's region */
} lower_ctx;

bool pass_is_inlined(const graph_node *n) {
  return !n->buffer && (n->op == GRAPH_OP_FULL || n->op == GRAPH_OP_ARANGE);
}

int64_t pass_parallel_extent(const kir_kernel *k) {
  for (int i = 0; i < k->n_uops; i++)
    if (k->uops[i].op == KIR_RANGE && k->uops[i].parallel) return k->uops[i].ival;
  return 0;
}

/* ------------------------------------------------------------ helpers */

static bool is_int_type(kiln_dtype t) { return t == KIR_INDEX || graph_is_int(t); }

static int cst(kir_kernel *k, kiln_dtype type, double v) {
  if (is_int_type(type)) return kir_const_i(k, type, (int64_t)v);
  return kir_const_f(k, type, v);
}

static kiln_dtype type_of(const kir_kernel *k, int v) { return v >= 0 ? k->uops[v].type : KIR_INDEX; }

static int cast_to(kir_kernel *k, kiln_dtype type, int v) {
  if (v < 0 || type_of(k, v) == type) return v;
  return kir_cast(k, type, v);
}

static int alu2(kir_kernel *k, kir_op op, int a, int b) { return kir_alu(k, op, type_of(k, a), a, b, -1); }
static int alu1(kir_kernel *k, kir_op op, int a) { return kir_alu(k, op, type_of(k, a), a, -1, -1); }
static int cmp(kir_kernel *k, kir_op op, int a, int b) { return kir_alu(k, op, KILN_BOOL, a, b, -1); }
static int where(kir_kernel *k, int c, int a, int b) { return kir_alu(k, KIR_WHERE, type_of(k, a), c, a, b); }

/* offset + sum(range[d] * stride[d]) over dims with a range; dims whose
 * range is -1 contribute nothing. `off` is the uop holding the offset
 * (a kernel argument), or -1 for offset 0. */
static int view_index(kir_kernel *k, const graph_view *v, const int *ranges, int off) {
  int idx = -1;
  for (int d = 0; d < v->ndim; d++) {
    if (ranges[d] < 0 || v->strides[d] == 0 || v->sizes[d] == 1) continue;
    int term = ranges[d];
    if (v->strides[d] != 1) term = alu2(k, KIR_MUL, term, kir_const_i(k, KIR_INDEX, v->strides[d]));
    idx = idx < 0 ? term : alu2(k, KIR_ADD, idx, term);
  }
  if (off < 0 && idx < 0) return kir_const_i(k, KIR_INDEX, 0);
  if (off >= 0) idx = idx < 0 ? off : alu2(k, KIR_ADD, idx, off);
  return idx;
}

/* A value in registers: F16/BF16 widen to F32. */
static int to_register(kir_kernel *k, int v) { return cast_to(k, graph_compute_dtype(type_of(k, v)), v); }

/* The value a pending source node holds at flat element `idx`. */
static int source_value(kir_kernel *k, const graph_node *src, int idx) {
  if (src->op == GRAPH_OP_FULL) {
    unsigned char tmp[8];
    graph_store_scalar(src->dtype, tmp, src->attr.scalar); /* round as a cast does */
    double v = graph_load_scalar(src->dtype, tmp);
    return cst(k, graph_compute_dtype(src->dtype), v);
  }
  /* ARANGE: start + i * step, computed in F64 then converted */
  int x = kir_cast(k, KILN_F64, idx);
  x = alu2(k, KIR_MUL, x, kir_const_f(k, KILN_F64, src->attr.scalar2));
  x = alu2(k, KIR_ADD, x, kir_const_f(k, KILN_F64, src->attr.scalar));
  return to_register(k, cast_to(k, src->dtype, x));
}

static int load_input(lower_ctx *c, int i, const graph_view *v, const int *ranges) {
  const graph_node *src = c->n->inputs[i].node;
  if (c->scalar[i] >= 0) return c->scalar[i];
  int idx = view_index(c->k, v, ranges, c->offset[i]);
  if (pass_is_inlined(src)) return source_value(c->k, src, idx);
  return to_register(c->k, kir_load(c->k, c->params[i], idx));
}

static void set_name(kir_kernel *k, const char *prefix, const graph_node *n) {
  char name[96];
  int len = snprintf(name, sizeof name, "%s_", prefix);
  for (const char *p = graph_ops[n->op].name; *p && len < 60; p++) name[len++] = (char)(*p | 0x20);
  for (int d = 0; d < n->ndim && len < 80; d++)
    len += snprintf(name + len, sizeof name - (size_t)len, d ? "x%lld" : "_%lld", (long long)n->sizes[d]);
  name[len < 95 ? len : 95] = 0;
  snprintf(k->name, sizeof k->name, "%s", name);
}

/* ------------------------------------------------- elementwise semantics */

static int op_abs(kir_kernel *k, int x) {
  /* 0 - x for x <= 0 turns -0.0 into +0.0 and keeps NaN as is */
  int zero = cst(k, type_of(k, x), 0);
  return where(k, cmp(k, KIR_CMPLE, x, zero), alu2(k, KIR_SUB, zero, x), x);
}

static int op_sign(kir_kernel *k, int x) {
  kiln_dtype t = type_of(k, x);
  if (t == KILN_BOOL) return x;
  int zero = cst(k, t, 0);
  int pos = kir_cast(k, t, cmp(k, KIR_CMPLT, zero, x));
  int neg = kir_cast(k, t, cmp(k, KIR_CMPLT, x, zero));
  int s = alu2(k, KIR_SUB, pos, neg);
  if (is_int_type(t)) return s;
  return where(k, cmp(k, KIR_CMPNE, x, x), x, s); /* NaN stays NaN */
}

static int op_sigmoid(kir_kernel *k, int x) {
  kiln_dtype t = type_of(k, x);
  int e = alu1(k, KIR_EXP, alu1(k, KIR_NEG, x));
  return alu2(k, KIR_DIV, cst(k, t, 1), alu2(k, KIR_ADD, cst(k, t, 1), e));
}

static int op_gelu(kir_kernel *k, int x) {
  kiln_dtype t = type_of(k, x);
  int e = alu1(k, KIR_ERF, alu2(k, KIR_MUL, x, cst(k, t, M_SQRT1_2)));
  int h = alu2(k, KIR_MUL, x, cst(k, t, 0.5));
  return alu2(k, KIR_MUL, h, alu2(k, KIR_ADD, cst(k, t, 1), e));
}

/* Python's %: the result takes the divisor's sign. */
static int op_remainder(kir_kernel *k, int a, int b) {
  kiln_dtype t = type_of(k, a);
  int r = alu2(k, KIR_MOD, a, b), zero = cst(k, t, 0);
  int signs_differ = alu2(k, KIR_XOR, cmp(k, KIR_CMPLT, r, zero), cmp(k, KIR_CMPLT, b, zero));
  int fix = alu2(k, KIR_AND, cmp(k, KIR_CMPNE, r, zero), signs_differ);
  return where(k, fix, alu2(k, KIR_ADD, r, b), r);
}

static int op_pow(kir_kernel *k, int a, int b) {
  kiln_dtype t = type_of(k, a);
  if (!is_int_type(t) && t != KILN_BOOL) return alu2(k, KIR_POW, a, b);
  /* integers: through F64 (exact below 2^53), truncated back */
  int p = kir_alu(k, KIR_POW, KILN_F64, kir_cast(k, KILN_F64, a), kir_cast(k, KILN_F64, b), -1);
  return kir_cast(k, t, p);
}

static int op_unary(kir_kernel *k, graph_op op, int x, const graph_node *n) {
  kiln_dtype t = type_of(k, x);
  bool fl = !is_int_type(t) && t != KILN_BOOL;
  switch (op) {
  case GRAPH_OP_NEG: return alu1(k, KIR_NEG, x);
  case GRAPH_OP_ABS: return t == KILN_BOOL ? x : op_abs(k, x);
  case GRAPH_OP_SIGN: return op_sign(k, x);
  case GRAPH_OP_EXP: return alu1(k, KIR_EXP, x);
  case GRAPH_OP_EXP2: return alu1(k, KIR_EXP2, x);
  case GRAPH_OP_LOG: return alu1(k, KIR_LOG, x);
  case GRAPH_OP_LOG2: return alu1(k, KIR_LOG2, x);
  case GRAPH_OP_LOG1P: return alu1(k, KIR_LOG1P, x);
  case GRAPH_OP_EXPM1: return alu1(k, KIR_EXPM1, x);
  case GRAPH_OP_SQRT: return alu1(k, KIR_SQRT, x);
  case GRAPH_OP_RSQRT: return alu2(k, KIR_DIV, cst(k, t, 1), alu1(k, KIR_SQRT, x));
  case GRAPH_OP_RECIPROCAL: return alu2(k, KIR_DIV, cst(k, t, 1), x);
  case GRAPH_OP_SIN: return alu1(k, KIR_SIN, x);
  case GRAPH_OP_COS: return alu1(k, KIR_COS, x);
  case GRAPH_OP_TAN: return alu1(k, KIR_TAN, x);
  case GRAPH_OP_TANH: return alu1(k, KIR_TANH, x);
  case GRAPH_OP_SIGMOID: return op_sigmoid(k, x);
  case GRAPH_OP_RELU: return alu2(k, KIR_MAX, x, cst(k, t, 0));
  case GRAPH_OP_GELU: return op_gelu(k, x);
  case GRAPH_OP_SILU: return alu2(k, KIR_MUL, x, op_sigmoid(k, x));
  case GRAPH_OP_ERF: return alu1(k, KIR_ERF, x);
  case GRAPH_OP_FLOOR: return fl ? alu1(k, KIR_FLOOR, x) : x;
  case GRAPH_OP_CEIL: return fl ? alu1(k, KIR_CEIL, x) : x;
  case GRAPH_OP_ROUND: return fl ? alu1(k, KIR_RINT, x) : x;
  case GRAPH_OP_TRUNC: return fl ? alu1(k, KIR_TRUNC, x) : x;
  case GRAPH_OP_LOGICAL_NOT: return alu2(k, KIR_XOR, cast_to(k, KILN_BOOL, x), kir_const_f(k, KILN_BOOL, 1));
  case GRAPH_OP_CLAMP: {
    if (!isnan(n->attr.scalar)) x = alu2(k, KIR_MAX, x, cst(k, t, n->attr.scalar));
    if (!isnan(n->attr.scalar2)) x = alu2(k, KIR_MIN, x, cst(k, t, n->attr.scalar2));
    return x;
  }
  default: return -1;
  }
}

static int op_binary(kir_kernel *k, graph_op op, int a, int b) {
  bool is_bool = type_of(k, a) == KILN_BOOL;
  switch (op) {
  case GRAPH_OP_ADD: return alu2(k, is_bool ? KIR_OR : KIR_ADD, a, b);
  case GRAPH_OP_SUB: return alu2(k, KIR_SUB, a, b);
  case GRAPH_OP_MUL: return alu2(k, is_bool ? KIR_AND : KIR_MUL, a, b);
  case GRAPH_OP_DIV: return alu2(k, KIR_DIV, a, b);
  case GRAPH_OP_POW: return op_pow(k, a, b);
  case GRAPH_OP_MAXIMUM: return alu2(k, is_bool ? KIR_OR : KIR_MAX, a, b);
  case GRAPH_OP_MINIMUM: return alu2(k, is_bool ? KIR_AND : KIR_MIN, a, b);
  case GRAPH_OP_FMOD: return alu2(k, KIR_MOD, a, b);
  case GRAPH_OP_REMAINDER: return op_remainder(k, a, b);
  case GRAPH_OP_ATAN2: return alu2(k, KIR_ATAN2, a, b);
  case GRAPH_OP_EQ: return cmp(k, KIR_CMPEQ, a, b);
  case GRAPH_OP_NE: return cmp(k, KIR_CMPNE, a, b);
  case GRAPH_OP_LT: return cmp(k, KIR_CMPLT, a, b);
  case GRAPH_OP_LE: return cmp(k, KIR_CMPLE, a, b);
  case GRAPH_OP_GT: return cmp(k, KIR_CMPLT, b, a);
  case GRAPH_OP_GE: return cmp(k, KIR_CMPLE, b, a);
  case GRAPH_OP_LOGICAL_AND: return alu2(k, KIR_AND, cast_to(k, KILN_BOOL, a), cast_to(k, KILN_BOOL, b));
  case GRAPH_OP_LOGICAL_OR: return alu2(k, KIR_OR, cast_to(k, KILN_BOOL, a), cast_to(k, KILN_BOOL, b));
  case GRAPH_OP_LOGICAL_XOR: return alu2(k, KIR_XOR, cast_to(k, KILN_BOOL, a), cast_to(k, KILN_BOOL, b));
  default: return -1;
  }
}

/* ------------------------------------------------------------ kernels */

/* Parameters, then the kernel arguments read once at entry: the offsets
 * of every input view (and the ASSIGN region) and the values of inlined
 * FULL inputs. Keeping them out of the code lets one compiled kernel
 * serve every offset and every constant. */
static void declare_params(lower_ctx *c) {
  kir_kernel *k = c->k;
  const graph_node *n = c->n;
  c->out = kir_param(k, n->dtype, true);
  for (int i = 0; i < n->n_inputs; i++) c->params[i] = kir_param(k, n->inputs[i].node->dtype, false);
  int args = kir_param(k, KILN_I64, false);
  int n_offsets = n->n_inputs + (graph_ops[n->op].kind == GRAPH_ASSIGN);
  for (int i = 0; i < n_offsets; i++)
    c->offset[i] = kir_cast(k, KIR_INDEX, kir_load(k, args, kir_const_i(k, KIR_INDEX, i)));
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *src = n->inputs[i].node;
    bool full = pass_is_inlined(src) && src->op == GRAPH_OP_FULL;
    c->scalar[i] = full ? to_register(k, kir_load(k, c->params[i], kir_const_i(k, KIR_INDEX, 0))) : -1;
  }
}

static void open_ranges(kir_kernel *k, int ndim, const int64_t *sizes, int *ranges) {
  for (int d = 0; d < ndim; d++) ranges[d] = kir_range(k, sizes[d], d == 0);
}

static void close_ranges(kir_kernel *k, int ndim, const int *ranges) {
  for (int d = ndim - 1; d >= 0; d--)
    if (ranges[d] >= 0) kir_end(k, ranges[d]);
}

static void store_contiguous(lower_ctx *c, const int *ranges, int value) {
  graph_view out = graph_view_contiguous(c->n->ndim, c->n->sizes);
  kir_store(c->k, c->out, view_index(c->k, &out, ranges, -1), cast_to(c->k, c->n->dtype, value));
}

static int lower_elementwise(lower_ctx *c) {
  const graph_node *n = c->n;
  kir_kernel *k = c->k;
  kiln_dtype t = graph_compute_dtype(n->cdtype);
  int ranges[KILN_MAX_DIMS];
  declare_params(c);
  open_ranges(k, n->ndim, n->sizes, ranges);
  int v[GRAPH_MAX_INPUTS];
  for (int i = 0; i < n->n_inputs; i++) v[i] = load_input(c, i, &n->inputs[i].view, ranges);
  int res = -1;
  switch (graph_ops[n->op].kind) {
  case GRAPH_CAST: res = v[0]; break;
  case GRAPH_UNARY: res = op_unary(k, n->op, cast_to(k, t, v[0]), n); break;
  case GRAPH_BINARY: res = op_binary(k, n->op, cast_to(k, t, v[0]), cast_to(k, t, v[1])); break;
  case GRAPH_TERNARY:
    res = where(k, cast_to(k, KILN_BOOL, v[0]), cast_to(k, t, v[1]), cast_to(k, t, v[2]));
    break;
  case GRAPH_SOURCE: {
    graph_view flat = graph_view_contiguous(n->ndim, n->sizes);
    res = source_value(k, n, view_index(k, &flat, ranges, -1));
    break;
  }
  default: break;
  }
  if (res < 0) return KILN_ERR_UNSUPPORTED;
  store_contiguous(c, ranges, res);
  close_ranges(k, n->ndim, ranges);
  return KILN_OK;
}

/* Identity and combining op of a reduction in accumulator type t. */
static int reduce_init(kir_kernel *k, graph_op op, kiln_dtype t) {
  bool fl = !is_int_type(t) && t != KILN_BOOL;
  switch (op) {
  case GRAPH_OP_SUM: return cst(k, t, 0);
  case GRAPH_OP_PROD: return cst(k, t, 1);
  case GRAPH_OP_AMAX: case GRAPH_OP_ARGMAX:
    if (t == KILN_BOOL) return kir_const_f(k, t, 0);
    if (fl) return kir_const_f(k, t, -INFINITY);
    if (!graph_dtypes[t].is_signed) return kir_const_i(k, t, 0);
    return kir_const_i(k, t, graph_dtypes[t].bits == 64 ? INT64_MIN : -(INT64_C(1) << (graph_dtypes[t].bits - 1)));
  default: /* AMIN, ARGMIN */
    if (t == KILN_BOOL) return kir_const_f(k, t, 1);
    if (fl) return kir_const_f(k, t, INFINITY);
    if (graph_dtypes[t].bits == 64) return kir_const_i(k, t, INT64_MAX);
    return kir_const_i(k, t, (INT64_C(1) << (graph_dtypes[t].bits - (graph_dtypes[t].is_signed ? 1 : 0))) - 1);
  }
}

static kir_op reduce_alu(graph_op op, kiln_dtype t) {
  switch (op) {
  case GRAPH_OP_SUM: return KIR_ADD;
  case GRAPH_OP_PROD: return KIR_MUL;
  case GRAPH_OP_AMAX: return t == KILN_BOOL ? KIR_OR : KIR_MAX;
  default: return t == KILN_BOOL ? KIR_AND : KIR_MIN;
  }
}

static kiln_dtype reduce_acc_type(const graph_node *n) {
  kiln_dtype in = n->inputs[0].node->dtype;
  if (n->op == GRAPH_OP_SUM || n->op == GRAPH_OP_PROD) return graph_is_float(n->dtype) ? KILN_F64 : KILN_I64;
  if (n->op == GRAPH_OP_ARGMAX || n->op == GRAPH_OP_ARGMIN) return graph_compute_dtype(in);
  return graph_compute_dtype(n->dtype);
}

/* Argmax/argmin update: take the new element when strictly better, or when
 * it is the first NaN (NaN counts as the extreme, as in Torch). */
static void arg_update(kir_kernel *k, graph_op op, int acc, int acc_idx, int v, int r) {
  int better = op == GRAPH_OP_ARGMAX ? cmp(k, KIR_CMPLT, acc, v) : cmp(k, KIR_CMPLT, v, acc);
  kiln_dtype t = type_of(k, v);
  if (!is_int_type(t) && t != KILN_BOOL) {
    int first_nan = alu2(k, KIR_AND, cmp(k, KIR_CMPNE, v, v), cmp(k, KIR_CMPEQ, acc, acc));
    better = alu2(k, KIR_OR, better, first_nan);
  }
  kir_acc_set(k, acc_idx, where(k, better, kir_cast(k, KILN_I64, r), acc_idx));
  kir_acc_set(k, acc, where(k, better, v, acc));
}

static int lower_reduce(lower_ctx *c) {
  const graph_node *n = c->n;
  kir_kernel *k = c->k;
  const graph_view *v = &n->inputs[0].view;
  uint32_t mask = n->attr.reduce_mask;
  bool is_arg = n->op == GRAPH_OP_ARGMAX || n->op == GRAPH_OP_ARGMIN;
  kiln_dtype t = reduce_acc_type(n);
  int ranges[KILN_MAX_DIMS], red_dim = -1;
  bool first = true;
  declare_params(c);
  for (int d = 0; d < v->ndim; d++) {
    ranges[d] = -1;
    if (mask & (1u << d)) continue;
    ranges[d] = kir_range(k, v->sizes[d], first);
    first = false;
  }
  int acc = kir_acc(k, t, reduce_init(k, n->op, t));
  int acc_idx = is_arg ? kir_acc(k, KILN_I64, kir_const_i(k, KILN_I64, 0)) : -1;
  for (int d = 0; d < v->ndim; d++)
    if (mask & (1u << d)) ranges[red_dim = d] = kir_range(k, v->sizes[d], false);
  int x = cast_to(k, t, load_input(c, 0, v, ranges));
  if (is_arg) arg_update(k, n->op, acc, acc_idx, x, ranges[red_dim]);
  else kir_acc_set(k, acc, kir_alu(k, reduce_alu(n->op, t), t, acc, x, -1));
  for (int d = v->ndim - 1; d >= 0; d--)
    if (mask & (1u << d)) {
      kir_end(k, ranges[d]);
      ranges[d] = -1;
    }
  store_contiguous(c, ranges, is_arg ? acc_idx : acc);
  close_ranges(k, v->ndim, ranges);
  return KILN_OK;
}

/* New version = old contents with the region overwritten by the value. */
static int lower_assign(lower_ctx *c, bool in_place) {
  const graph_node *n = c->n;
  kir_kernel *k = c->k;
  declare_params(c);
  if (!in_place) {
    int r = kir_range(k, n->numel, true);
    kir_store(k, c->out, r, cast_to(k, n->dtype, load_input(c, 0, &n->inputs[0].view, &r)));
    kir_end(k, r);
  }
  const graph_view *reg = &n->attr.region;
  int ranges[KILN_MAX_DIMS];
  for (int d = 0; d < reg->ndim; d++) ranges[d] = kir_range(k, reg->sizes[d], in_place && d == 0);
  int val = load_input(c, 1, &n->inputs[1].view, ranges);
  kir_store(k, c->out, view_index(k, reg, ranges, c->offset[n->n_inputs]), cast_to(k, n->dtype, val));
  close_ranges(k, reg->ndim, ranges);
  return KILN_OK;
}

int pass_lower_node(const graph_node *n, bool in_place, kir_kernel *k, char *err, size_t errlen) {
  static const char *prefix[] = {
      [GRAPH_SOURCE] = "S", [GRAPH_UNARY] = "E", [GRAPH_BINARY] = "E", [GRAPH_TERNARY] = "E",
      [GRAPH_CAST] = "C", [GRAPH_REDUCE] = "R", [GRAPH_ASSIGN] = "A"};
  graph_kind kind = graph_ops[n->op].kind;
  kir_init(k, "");
  set_name(k, prefix[kind], n);
  lower_ctx c = {.k = k, .n = n};
  for (int i = 0; i < GRAPH_MAX_INPUTS; i++) c.scalar[i] = -1;
  int st;
  if (n->op == GRAPH_OP_BUFFER) st = KILN_ERR_ARG;
  else if (kind == GRAPH_REDUCE) st = lower_reduce(&c);
  else if (kind == GRAPH_ASSIGN) st = lower_assign(&c, in_place);
  else st = lower_elementwise(&c);
  if (st == KILN_OK && k->oom) st = KILN_ERR_OOM;
  if (st != KILN_OK) {
    snprintf(err, errlen, "cannot lower op %s (%s)", graph_ops[n->op].name, kiln_status_name(st));
    kir_free(k);
  }
  return st;
}

void pass_kernel_args(const graph_node *n, int64_t *args) {
  for (int i = 0; i < n->n_inputs; i++) args[i] = n->inputs[i].view.offset;
  if (graph_ops[n->op].kind == GRAPH_ASSIGN) args[n->n_inputs] = n->attr.region.offset;
}
