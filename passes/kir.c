/*
 * kir.c — kernel IR: the builder, the canonical text form (compile-cache
 * key) and the verifier.
 *
 * Invariants the verifier enforces (kir.h has the model):
 *  - every operand index refers to an earlier uop that produces a value
 *    (not END, ACC_SET or STORE, whose type is KIR_VOID); unused operand
 *    slots are -1;
 *  - RANGE/END nest like brackets, all RANGEs are closed at the end, and a
 *    value defined inside a loop (including the loop variable) is used only
 *    while that loop is open;
 *  - types: PARAM and LOCAL are KIR_PTR, RANGE is KIR_INDEX, LOAD/STORE
 *    index operands are KIR_INDEX, loaded/stored values have the PARAM's
 *    (LOCAL's) element type; a LOCAL holds a compute type (not F16/BF16)
 *    within KIR_LOCAL_MAX bytes and is never stored to nontemporally; ALU
 *    operands match the result type (CMP: result BOOL, WHERE: BOOL
 *    condition) and are never F16/BF16, float math is F32/F64 only.
 * kir_to_string prints only the fields each op reads, so it is canonical:
 * floats with %a (NaN with its bits), ints in decimal.
 */
#include "fault.h"
#include "kir.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ op table */

enum { C_BOOL = 1, C_INT = 2, C_FLOAT = 4, C_NUM = C_INT | C_FLOAT };

typedef struct op_info {
  const char *name;
  int arity;
  unsigned classes; /* ALU: type classes the result/operands may have */
} op_info;

static const op_info op_table[KIR_OP_COUNT] = {
    [KIR_PARAM] = {"param", 0, 0},
    [KIR_LOCAL] = {"local", 0, 0},
    [KIR_CONST] = {"const", 0, 0},
    [KIR_RANGE] = {"range", 0, 0},
    [KIR_END] = {"end", 1, 0},
    [KIR_ACC] = {"acc", 1, C_BOOL | C_NUM},
    [KIR_ACC_SET] = {"acc_set", 2, 0},
    [KIR_LOAD] = {"load", 2, 0},
    [KIR_STORE] = {"store", 3, 0},
    [KIR_CAST] = {"cast", 1, 0},
    [KIR_NEG] = {"neg", 1, C_NUM},
    [KIR_ADD] = {"add", 2, C_NUM},
    [KIR_SUB] = {"sub", 2, C_NUM},
    [KIR_MUL] = {"mul", 2, C_NUM},
    [KIR_DIV] = {"div", 2, C_NUM},
    [KIR_MOD] = {"mod", 2, C_NUM},
    [KIR_MAX] = {"max", 2, C_BOOL | C_NUM},
    [KIR_MIN] = {"min", 2, C_BOOL | C_NUM},
    [KIR_CMPLT] = {"cmplt", 2, C_BOOL | C_NUM},
    [KIR_CMPLE] = {"cmple", 2, C_BOOL | C_NUM},
    [KIR_CMPEQ] = {"cmpeq", 2, C_BOOL | C_NUM},
    [KIR_CMPNE] = {"cmpne", 2, C_BOOL | C_NUM},
    [KIR_AND] = {"and", 2, C_BOOL | C_INT},
    [KIR_OR] = {"or", 2, C_BOOL | C_INT},
    [KIR_XOR] = {"xor", 2, C_BOOL | C_INT},
    [KIR_WHERE] = {"where", 3, C_BOOL | C_NUM},
    [KIR_SQRT] = {"sqrt", 1, C_FLOAT},
    [KIR_EXP] = {"exp", 1, C_FLOAT},
    [KIR_EXP2] = {"exp2", 1, C_FLOAT},
    [KIR_LOG] = {"log", 1, C_FLOAT},
    [KIR_LOG2] = {"log2", 1, C_FLOAT},
    [KIR_LOG1P] = {"log1p", 1, C_FLOAT},
    [KIR_EXPM1] = {"expm1", 1, C_FLOAT},
    [KIR_SIN] = {"sin", 1, C_FLOAT},
    [KIR_COS] = {"cos", 1, C_FLOAT},
    [KIR_TAN] = {"tan", 1, C_FLOAT},
    [KIR_TANH] = {"tanh", 1, C_FLOAT},
    [KIR_ERF] = {"erf", 1, C_FLOAT},
    [KIR_FLOOR] = {"floor", 1, C_FLOAT},
    [KIR_CEIL] = {"ceil", 1, C_FLOAT},
    [KIR_RINT] = {"rint", 1, C_FLOAT},
    [KIR_TRUNC] = {"trunc", 1, C_FLOAT},
    [KIR_POW] = {"pow", 2, C_FLOAT},
    [KIR_ATAN2] = {"atan2", 2, C_FLOAT},
};
_Static_assert(KIR_OP_COUNT == 44, "op_table must list every kir_op");

static bool op_valid(kir_op op) { return (unsigned)op < KIR_OP_COUNT; }

const char *kir_op_name(kir_op op) { return op_valid(op) ? op_table[op].name : "?"; }
int kir_op_arity(kir_op op) { return op_valid(op) ? op_table[op].arity : -1; }

const kir_type_traits kir_types[KIR_TYPE_COUNT] = {
    [KIR_BOOL] = {"bool", 1, 1, KIR_CAT_BOOL, false, false},
    [KIR_U8] = {"u8", 1, 8, KIR_CAT_INT, false, false},
    [KIR_I8] = {"i8", 1, 8, KIR_CAT_INT, true, false},
    [KIR_I16] = {"i16", 2, 16, KIR_CAT_INT, true, false},
    [KIR_I32] = {"i32", 4, 32, KIR_CAT_INT, true, false},
    [KIR_I64] = {"i64", 8, 64, KIR_CAT_INT, true, false},
    [KIR_F16] = {"f16", 2, 16, KIR_CAT_FLOAT, true, true},
    [KIR_BF16] = {"bf16", 2, 16, KIR_CAT_FLOAT, true, true},
    [KIR_F32] = {"f32", 4, 32, KIR_CAT_FLOAT, true, false},
    [KIR_F64] = {"f64", 8, 64, KIR_CAT_FLOAT, true, false},
    [KIR_INDEX] = {"index", 8, 64, KIR_CAT_INT, true, false},
    [KIR_PTR] = {"ptr", 8, 64, KIR_CAT_NONE, false, false},
    [KIR_VOID] = {"void", 0, 0, KIR_CAT_NONE, false, false},
};
_Static_assert(KIR_TYPE_COUNT == 103, "kir_types must list every kir_type");

const char *kir_type_name(kir_type t) { return kir_type_valid(t) ? kir_types[t].name : "?"; }

static bool is_value_type(kir_type t) { return kir_is_elem(t) || t == KIR_INDEX; }

/* Type class of a compute (non-half) value type, 0 for anything else. */
static unsigned type_class(kir_type t) {
  if (!is_value_type(t) || kir_is_half(t)) return 0;
  switch (kir_types[t].category) {
  case KIR_CAT_BOOL: return C_BOOL;
  case KIR_CAT_FLOAT: return C_FLOAT;
  case KIR_CAT_INT: return C_INT;
  default: return 0;
  }
}

/* -------------------------------------------------------------- builder */

void kir_init(kir_kernel *k, const char *name) {
  memset(k, 0, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name ? name : "kernel");
}

void kir_free(kir_kernel *k) {
  free(k->uops);
  k->uops = NULL;
  k->n_uops = k->cap = 0;
}

/* Appends a zeroed uop (operands -1); returns its index or -1 on OOM. */
static int push(kir_kernel *k, kir_op op, kir_type type) {
  if (k->oom) return -1;
  if (k->n_uops == k->cap) {
    int cap = k->cap ? k->cap * 2 : 64;
    kir_uop *p = cap > k->cap && (size_t)cap <= SIZE_MAX / sizeof *p
                     ? graph_realloc(k->uops, (size_t)cap * sizeof *p)
                     : NULL;
    if (!p) {
      k->oom = true;
      return -1;
    }
    k->uops = p;
    k->cap = cap;
  }
  kir_uop *u = &k->uops[k->n_uops];
  memset(u, 0, sizeof *u);
  u->op = op;
  u->type = type;
  u->elem = KIR_VOID;
  u->src[0] = u->src[1] = u->src[2] = -1;
  return k->n_uops++;
}

static int push_src(kir_kernel *k, kir_op op, kir_type type, int a, int b, int c) {
  int i = push(k, op, type);
  if (i >= 0) {
    k->uops[i].src[0] = a;
    k->uops[i].src[1] = b;
    k->uops[i].src[2] = c;
  }
  return i;
}

/* A full table records index KIR_MAX_PARAMS, which kir_verify rejects. */
int kir_param(kir_kernel *k, kir_type elem, bool written) {
  int i = push(k, KIR_PARAM, KIR_PTR);
  if (i < 0) return -1;
  k->uops[i].elem = elem;
  if (k->n_params < KIR_MAX_PARAMS) {
    k->param_type[k->n_params] = elem;
    k->param_written[k->n_params] = written;
    k->uops[i].ival = k->n_params++;
  } else {
    k->uops[i].ival = KIR_MAX_PARAMS;
  }
  return i;
}

/* Float → int64 as graph/dtype.c does: truncation, out of range → INT64_MIN. */
static int64_t double_to_i64(double v) {
  if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
  return (int64_t)v;
}

int kir_const_f(kir_kernel *k, kir_type type, double v) {
  int i = push(k, KIR_CONST, type);
  if (i < 0) return -1;
  if (type == KIR_BOOL) k->uops[i].cval = v != 0;
  else if (kir_is_float(type)) k->uops[i].cval = v;
  else k->uops[i].ival = double_to_i64(v);
  return i;
}

int kir_const_i(kir_kernel *k, kir_type type, int64_t v) {
  int i = push(k, KIR_CONST, type);
  if (i < 0) return -1;
  if (type == KIR_BOOL) k->uops[i].cval = v != 0;
  else if (kir_is_float(type)) k->uops[i].cval = (double)v;
  else k->uops[i].ival = v;
  return i;
}

int kir_range(kir_kernel *k, int64_t extent, bool parallel) {
  int i = push(k, KIR_RANGE, KIR_INDEX);
  if (i < 0) return -1;
  k->uops[i].ival = extent;
  k->uops[i].parallel = parallel;
  return i;
}

int kir_range_tile(kir_kernel *k, int *inner) {
  int outer = kir_range(k, KIR_TILE, false);
  *inner = kir_range(k, KIR_TILE, false);
  if (outer >= 0) k->uops[outer].tile = true;
  return outer;
}

int kir_tile_skew(kir_kernel *k, int off) {
  if (off >= 0) k->uops[off].skew = true;
  return off;
}

void kir_end(kir_kernel *k, int range) { push_src(k, KIR_END, KIR_VOID, range, -1, -1); }

int kir_acc(kir_kernel *k, kir_type type, int init) {
  return push_src(k, KIR_ACC, type, init, -1, -1);
}

void kir_acc_set(kir_kernel *k, int acc, int value) {
  push_src(k, KIR_ACC_SET, KIR_VOID, acc, value, -1);
}

int kir_local(kir_kernel *k, kir_type elem, int64_t n) {
  int i = push(k, KIR_LOCAL, KIR_PTR);
  if (i < 0) return -1;
  k->uops[i].elem = elem;
  k->uops[i].ival = n;
  return i;
}

static bool is_buffer(const kir_kernel *k, int u) {
  return u >= 0 && u < k->n_uops && (k->uops[u].op == KIR_PARAM || k->uops[u].op == KIR_LOCAL);
}

int kir_load(kir_kernel *k, int param, int index) {
  kir_type t = KIR_VOID;
  if (is_buffer(k, param)) t = k->uops[param].elem;
  return push_src(k, KIR_LOAD, t, param, index, -1);
}

void kir_store(kir_kernel *k, int param, int index, int value) {
  push_src(k, KIR_STORE, KIR_VOID, param, index, value);
}

void kir_store_streaming(kir_kernel *k, int param, int index, int value) {
  kir_store(k, param, index, value);
  if (!k->oom) k->uops[k->n_uops - 1].nontemporal = true;
}

void kir_mark_fresh_outputs(kir_kernel *k) {
  for (int i = 0; i < k->n_uops; i++) {
    kir_uop *u = &k->uops[i];
    if (u->op == KIR_PARAM && u->ival < k->n_params && k->param_written[u->ival]) u->fresh = true;
  }
}

bool kir_outputs_fresh(const kir_kernel *k) {
  bool any = false;
  for (int i = 0; i < k->n_uops; i++) {
    const kir_uop *u = &k->uops[i];
    if (u->op != KIR_PARAM || u->ival >= k->n_params || !k->param_written[u->ival]) continue;
    if (!u->fresh) return false;
    any = true;
  }
  return any;
}

void kir_set_reassoc(kir_kernel *k, int u) {
  if (u >= 0 && u < k->n_uops) k->uops[u].reassoc = true;
}

int kir_cast(kir_kernel *k, kir_type type, int a) { return push_src(k, KIR_CAST, type, a, -1, -1); }

/* CMP ops always produce BOOL, whatever `type` says. */
int kir_alu(kir_kernel *k, kir_op op, kir_type type, int a, int b, int c) {
  if (op >= KIR_CMPLT && op <= KIR_CMPNE) type = KIR_BOOL;
  return push_src(k, op, type, a, b, c);
}

/* --------------------------------------------------------- canonical text */

void kir_sb_printf(kir_strbuf *sb, const char *fmt, ...) {
  if (sb->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(sb->p ? sb->p + sb->n : NULL, sb->p ? sb->cap - sb->n : 0, fmt, ap);
    va_end(ap);
    if (len < 0) {
      sb->oom = true;
      return;
    }
    if (sb->p && sb->n + (size_t)len < sb->cap) {
      sb->n += (size_t)len;
      return;
    }
    size_t cap = sb->cap ? sb->cap * 2 : 1024;
    while (cap < sb->n + (size_t)len + 1) cap *= 2;
    char *q = graph_realloc(sb->p, cap);
    if (!q) {
      sb->oom = true;
      return;
    }
    sb->p = q;
    sb->cap = cap;
  }
}

static void print_const(kir_strbuf *sb, const kir_uop *u) {
  if (u->type == KIR_BOOL) {
    kir_sb_printf(sb, " %s", u->cval != 0 ? "true" : "false");
  } else if (kir_is_float(u->type)) {
    if (isnan(u->cval)) {
      uint64_t bits;
      memcpy(&bits, &u->cval, sizeof bits);
      kir_sb_printf(sb, " nan:0x%016" PRIx64, bits);
    } else {
      kir_sb_printf(sb, " %a", u->cval);
    }
  } else {
    kir_sb_printf(sb, " %" PRId64, u->ival);
  }
}

static void print_uop(kir_strbuf *sb, int i, const kir_uop *u) {
  kir_sb_printf(sb, "%d %s %s", i, kir_op_name(u->op), kir_type_name(u->type));
  int arity = kir_op_arity(u->op);
  for (int s = 0; s < (arity < 0 ? 3 : arity); s++) kir_sb_printf(sb, " %%%d", u->src[s]);
  switch (u->op) {
  case KIR_PARAM: kir_sb_printf(sb, " p%" PRId64 " %s%s", u->ival, kir_type_name(u->elem), u->fresh ? " fresh" : ""); break;
  case KIR_LOCAL: kir_sb_printf(sb, " %s[%" PRId64 "]", kir_type_name(u->elem), u->ival); break;
  case KIR_CONST: print_const(sb, u); break;
  case KIR_RANGE: kir_sb_printf(sb, " %" PRId64 "%s", u->ival, u->parallel ? " parallel" : u->tile ? " tile" : "");
    break;
  default: break;
  }
  kir_sb_printf(sb, "%s%s%s\n", u->reassoc ? " reassoc" : "", u->nontemporal ? " nontemporal" : "", u->skew ? " skew" : "");
}

char *kir_to_string(const kir_kernel *k) {
  kir_strbuf sb = {0};
  kir_sb_printf(&sb, "params");
  for (int p = 0; p < k->n_params && p < KIR_MAX_PARAMS; p++)
    kir_sb_printf(&sb, " %s:%c", kir_type_name(k->param_type[p]), k->param_written[p] ? 'w' : 'r');
  kir_sb_printf(&sb, "\n");
  for (int i = 0; i < k->n_uops; i++) print_uop(&sb, i, &k->uops[i]);
  if (sb.oom) {
    free(sb.p);
    return NULL;
  }
  return sb.p;
}

/* ------------------------------------------------------------- verifier */

/* Verifier state: for each uop, the innermost RANGE open where it is
 * defined (-1 at top level); whether each RANGE is closed yet. */
typedef struct vstate {
  const kir_kernel *k;
  int *outer;
  bool *closed;
  int cur; /* innermost open RANGE, -1 if none */
} vstate;

static _Thread_local char verr[200];

static const char *fail(int i, const kir_uop *u, const char *what) {
  snprintf(verr, sizeof verr, "uop %d (%s): %s", i, kir_op_name(u->op), what);
  return verr;
}

/* Scope of the value uop d defines: a RANGE's variable lives in its loop. */
static int value_scope(const vstate *v, int d) {
  return v->k->uops[d].op == KIR_RANGE ? d : v->outer[d];
}

static const char *check_operands(const vstate *v, int i) {
  const kir_uop *u = &v->k->uops[i];
  int arity = op_table[u->op].arity;
  for (int s = 0; s < 3; s++) {
    int d = u->src[s];
    if (s >= arity) {
      if (d != -1) return fail(i, u, "unused operand slot is not -1");
      continue;
    }
    if (d < 0 || d >= i) return fail(i, u, "operand not defined before its use");
    if (v->k->uops[d].type == KIR_VOID) return fail(i, u, "operand has no value");
    int sc = value_scope(v, d);
    if (sc >= 0 && v->closed[sc]) return fail(i, u, "operand used outside the loop defining it");
  }
  return NULL;
}

static kir_type src_type(const vstate *v, const kir_uop *u, int s) {
  return v->k->uops[u->src[s]].type;
}

static const char *check_param(const vstate *v, int i, const kir_uop *u) {
  const kir_kernel *k = v->k;
  if (u->type != KIR_PTR) return fail(i, u, "type must be ptr");
  if (u->ival < 0 || u->ival >= k->n_params) return fail(i, u, "param index >= n_params");
  if (k->param_type[u->ival] != u->elem || !kir_is_elem(u->elem))
    return fail(i, u, "element type differs from param_type or is invalid");
  for (int j = 0; j < i; j++)
    if (k->uops[j].op == KIR_PARAM && k->uops[j].ival == u->ival)
      return fail(i, u, "param index defined twice");
  return NULL;
}

static const char *check_local(int i, const kir_uop *u) {
  if (u->type != KIR_PTR) return fail(i, u, "type must be ptr");
  if (!kir_is_elem(u->elem) || !type_class(u->elem)) return fail(i, u, "element type is not a compute type");
  if (u->ival <= 0 || u->ival > KIR_LOCAL_MAX / kir_types[u->elem].size)
    return fail(i, u, "length not in 1..KIR_LOCAL_MAX bytes");
  return NULL;
}

static const char *check_memory(const vstate *v, int i, const kir_uop *u) {
  const kir_uop *p = &v->k->uops[u->src[0]];
  bool local = p->op == KIR_LOCAL;
  if (p->op != KIR_PARAM && !local) return fail(i, u, "src[0] is not a PARAM or LOCAL");
  if (src_type(v, u, 1) != KIR_INDEX) return fail(i, u, "index operand is not KIR_INDEX");
  if (u->op == KIR_LOAD && u->type != p->elem) return fail(i, u, "type differs from the param's dtype");
  if (u->op == KIR_STORE) {
    if (src_type(v, u, 2) != p->elem) return fail(i, u, "stored value type differs from the param's dtype");
    if (!local && !v->k->param_written[p->ival]) return fail(i, u, "store to a param not flagged written");
    if (local && u->nontemporal) return fail(i, u, "nontemporal store to a LOCAL");
  }
  return NULL;
}

/* A tile (kir_range_tile): RANGE i and i + 1 of KIR_TILE each, the inner
 * one innermost, their ENDs adjacent. */
static const char *check_tile(const vstate *v, int i, const kir_uop *u) {
  const kir_kernel *k = v->k;
  if (u->ival != KIR_TILE || u->parallel || i + 1 >= k->n_uops || k->uops[i + 1].op != KIR_RANGE ||
      k->uops[i + 1].ival != KIR_TILE || k->uops[i + 1].parallel || k->uops[i + 1].tile)
    return fail(i, u, "a tile is two ranges of KIR_TILE, not parallel");
  for (int j = i + 2; j < k->n_uops; j++) {
    if (k->uops[j].op == KIR_RANGE) break;
    if (k->uops[j].op == KIR_END && k->uops[j].src[0] == i + 1) {
      if (j + 1 < k->n_uops && k->uops[j + 1].op == KIR_END && k->uops[j + 1].src[0] == i) return NULL;
      break;
    }
  }
  return fail(i, u, "a tile's inner range must be innermost, its ENDs adjacent");
}

/* RANGE/END nesting. */
static const char *check_loop(vstate *v, int i, const kir_uop *u) {
  if (u->op == KIR_RANGE) {
    if (u->type != KIR_INDEX) return fail(i, u, "type must be index");
    if (u->ival < 0) return fail(i, u, "negative extent");
    if (u->tile) {
      const char *e = check_tile(v, i, u);
      if (e) return e;
    }
    v->cur = i;
    return NULL;
  }
  if (v->k->uops[u->src[0]].op != KIR_RANGE) return fail(i, u, "src[0] is not a RANGE");
  if (u->src[0] != v->cur) return fail(i, u, "does not close the innermost open RANGE");
  v->closed[v->cur] = true;
  v->cur = v->outer[v->cur];
  return NULL;
}

static const char *check_alu(const vstate *v, int i, const kir_uop *u) {
  const op_info *info = &op_table[u->op];
  bool cmp = u->op >= KIR_CMPLT && u->op <= KIR_CMPNE;
  kir_type t = cmp ? src_type(v, u, 0) : u->type;
  if (cmp && u->type != KIR_BOOL) return fail(i, u, "comparison result must be bool");
  if (!(type_class(t) & info->classes)) return fail(i, u, "type not allowed for this op");
  int first = u->op == KIR_WHERE ? 1 : 0;
  if (u->op == KIR_WHERE && src_type(v, u, 0) != KIR_BOOL) return fail(i, u, "condition must be bool");
  for (int s = first; s < info->arity; s++)
    if (src_type(v, u, s) != t) return fail(i, u, "operand types differ");
  return NULL;
}

static const char *check_types(vstate *v, int i, const kir_uop *u) {
  switch (u->op) {
  case KIR_PARAM: return check_param(v, i, u);
  case KIR_LOCAL: return check_local(i, u);
  case KIR_CONST: return is_value_type(u->type) ? NULL : fail(i, u, "invalid type");
  case KIR_RANGE:
  case KIR_END: return check_loop(v, i, u);
  case KIR_ACC:
    if (!type_class(u->type)) return fail(i, u, "invalid accumulator type");
    return src_type(v, u, 0) == u->type ? NULL : fail(i, u, "initial value type differs");
  case KIR_ACC_SET:
    if (v->k->uops[u->src[0]].op != KIR_ACC) return fail(i, u, "src[0] is not an ACC");
    return src_type(v, u, 1) == src_type(v, u, 0) ? NULL : fail(i, u, "value type differs");
  case KIR_LOAD:
  case KIR_STORE: return check_memory(v, i, u);
  case KIR_CAST:
    return is_value_type(u->type) && is_value_type(src_type(v, u, 0)) ? NULL
                                                                       : fail(i, u, "invalid types");
  default: return check_alu(v, i, u);
  }
}

static const char *verify_uops(vstate *v) {
  const kir_kernel *k = v->k;
  for (int i = 0; i < k->n_uops; i++) {
    const kir_uop *u = &k->uops[i];
    v->outer[i] = v->cur;
    if (!op_valid(u->op)) return fail(i, u, "invalid op");
    const char *e = check_operands(v, i);
    if (!e) e = check_types(v, i, u);
    if (e) return e;
    bool want_void = u->op == KIR_END || u->op == KIR_ACC_SET || u->op == KIR_STORE;
    if (want_void != (u->type == KIR_VOID)) return fail(i, u, want_void ? "type must be void" : "void type");
  }
  if (v->cur >= 0) {
    snprintf(verr, sizeof verr, "RANGE uop %d is never closed by END", v->cur);
    return verr;
  }
  return NULL;
}

const char kir_verify_oom[] = "out of memory";

const char *kir_verify(const kir_kernel *k) {
  if (!k) return "kernel is NULL";
  if (k->oom) return kir_verify_oom; /* while being built */
  if (k->n_uops < 0 || (k->n_uops > 0 && !k->uops)) return "bad uop list";
  if (k->n_params < 0 || k->n_params > KIR_MAX_PARAMS) return "bad n_params";
  size_t n = (size_t)k->n_uops + 1;
  vstate v = {k, graph_malloc(n * sizeof(int)), graph_calloc(n, sizeof(bool)), -1};
  const char *e = v.outer && v.closed ? verify_uops(&v) : kir_verify_oom;
  free(v.outer);
  free(v.closed);
  return e;
}

bool kir_same_code(const kir_kernel *a, const kir_kernel *b) {
  return a->n_uops == b->n_uops && a->n_params == b->n_params &&
         memcmp(a->param_written, b->param_written, sizeof a->param_written[0] * (size_t)a->n_params) == 0 &&
         memcmp(a->uops, b->uops, sizeof *a->uops * (size_t)a->n_uops) == 0;
}

bool kir_splittable(const kir_kernel *k) {
  int par = -1, end = -1;
  for (int i = 0; i < k->n_uops; i++) {
    const kir_uop *u = &k->uops[i];
    if (par < 0 && u->op == KIR_RANGE && u->parallel) par = i;
    else if (par >= 0 && end < 0 && u->op == KIR_END && u->src[0] == par) end = i;
    else if (u->op == KIR_STORE && k->uops[u->src[0]].op == KIR_PARAM && (par < 0 || end >= 0)) return false;
    else if (u->op == KIR_ACC_SET && u->src[0] < par) return false;
  }
  return par >= 0;
}
