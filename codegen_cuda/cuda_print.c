/*
 * cuda_print.c — kernel IR → CUDA C source (one printer for every kernel).
 *
 * Each uop becomes one statement defining `v<index>` (SSA values are
 * `const` locals; an ACC is a mutable local, so a use of it reads its
 * current value, as kir.h says), in uop order:
 *  - PARAM i: a typed alias of the kernel parameter p<i>;
 *  - RANGE/END: `for (...) {` / `}`, so a value defined in a loop is only
 *    visible inside it (kir_verify's scoping rule makes that valid C++);
 *  - the first parallel RANGE iterates [max(start,0), min(end,extent)).
 *    In a splittable kernel (cuda_kernel_splittable) it is a grid-stride
 *    loop (each thread takes indices blockIdx.x*blockDim.x+threadIdx.x,
 *    then steps by gridDim.x*blockDim.x); otherwise the kernel runs on
 *    thread 0 of block 0 only. Reductions are therefore sequential per
 *    output (one thread per index of the parallel range).
 * Register types: BOOL bool (a byte in memory), U8 unsigned char, I8
 * signed char, I16 short, I32 int, I64/INDEX long long, F16 __half, BF16
 * __nv_bfloat16 (cuda_fp16.h / cuda_bf16.h are included only when the
 * kernel uses them; ALU uops never see them, CAST widens and narrows
 * through float with round-to-nearest-even), F32 float, F64 double.
 * Semantics follow kir.h and the CPU backend (codegen_llvm/llvm_lower.c):
 * integer arithmetic other than index arithmetic wraps (computed on
 * unsigned long long), integer ÷0 and %0 give 0 and INT_MIN/-1 wraps,
 * float MAX/MIN propagate NaN and order -0 < +0, float → int truncates
 * through int64 with INT64_MIN for NaN and out-of-range values, RINT is
 * rint (half to even under the default rounding mode), MOD on floats is
 * fmod. Math calls CUDA's libdevice functions (no fast-math), whose
 * results may differ from the CPU backend's in the last ulps.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

/* ---------------------------------------------------------------- types */

static bool is_fp(kiln_dtype t) { return t == KILN_F32 || t == KILN_F64; }
static bool is_half(kiln_dtype t) { return t == KILN_F16 || t == KILN_BF16; }

/* Register type of a value. */
static const char *ctype(kiln_dtype t) {
  switch ((int)t) {
  case KILN_BOOL: return "bool";
  case KILN_U8: return "unsigned char";
  case KILN_I8: return "signed char";
  case KILN_I16: return "short";
  case KILN_I32: return "int";
  case KILN_F16: return "__half";
  case KILN_BF16: return "__nv_bfloat16";
  case KILN_F32: return "float";
  case KILN_F64: return "double";
  default: return "long long"; /* I64, KIR_INDEX */
  }
}

/* Element type in memory: BOOL is a byte. */
static const char *mtype(kiln_dtype t) { return t == KILN_BOOL ? "unsigned char" : ctype(t); }

/* ------------------------------------------------------------ constants */

/* A float literal that reads back exactly (or an exact bit pattern for
 * the non-finite values). */
static void put_float(kir_strbuf *b, double v, bool f32) {
  if (f32) v = (double)(float)v;
  if (isnan(v)) {
    kir_sb_printf(b, f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)");
  } else if (isinf(v)) {
    kir_sb_printf(b, "%s%s", v < 0 ? "-" : "", f32 ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)");
  } else {
    char s[40];
    snprintf(s, sizeof s, f32 ? "%.9g" : "%.17g", v);
    bool plain = !strpbrk(s, ".e");
    kir_sb_printf(b, "%s%s%s", s, plain ? ".0" : "", f32 ? "f" : "");
  }
}

static void put_int(kir_strbuf *b, kiln_dtype t, int64_t v) {
  if (v == INT64_MIN) kir_sb_printf(b, "(%s)(-9223372036854775807LL - 1)", ctype(t));
  else kir_sb_printf(b, "(%s)%lldLL", ctype(t), (long long)v);
}

static void put_const(kir_strbuf *b, const kir_uop *u) {
  switch ((int)u->type) {
  case KILN_BOOL: kir_sb_printf(b, u->cval != 0 ? "true" : "false"); break;
  case KILN_F16:
  case KILN_BF16:
    kir_sb_printf(b, u->type == KILN_F16 ? "__float2half_rn(" : "__float2bfloat16_rn(");
    put_float(b, u->cval, true);
    kir_sb_printf(b, ")");
    break;
  case KILN_F32:
  case KILN_F64: put_float(b, u->cval, u->type == KILN_F32); break;
  default: put_int(b, u->type, u->ival);
  }
}

/* ---------------------------------------------------------- conversions */

/* Prints the conversion of value `v` (a name) from `from` to `to`, C
 * semantics as kir.h's CAST; F16/BF16 go through float both ways. */
static void put_cast(kir_strbuf *b, const char *v, kiln_dtype from, kiln_dtype to) {
  char x[64];
  if (from == to) {
    kir_sb_printf(b, "%s", v);
    return;
  }
  if (is_half(from)) {
    snprintf(x, sizeof x, from == KILN_F16 ? "__half2float(%s)" : "__bfloat162float(%s)", v);
    v = x;
    from = KILN_F32;
  }
  if (is_half(to)) {
    kir_sb_printf(b, to == KILN_F16 ? "__float2half_rn(" : "__float2bfloat16_rn(");
    put_cast(b, v, from, KILN_F32);
    kir_sb_printf(b, ")");
  } else if (from == to) {
    kir_sb_printf(b, "%s", v);
  } else if (to == KILN_BOOL) {
    kir_sb_printf(b, "(%s != 0)", v);
  } else if (is_fp(from) && !is_fp(to)) {
    kir_sb_printf(b, "(%s)kiln_f2i((double)%s)", ctype(to), v);
  } else {
    kir_sb_printf(b, "(%s)%s", ctype(to), v);
  }
}

/* ------------------------------------------------------------------ ALU */

static const char *math_name(kir_op op) {
  switch (op) {
  case KIR_SQRT: return "sqrt";
  case KIR_EXP: return "exp";
  case KIR_EXP2: return "exp2";
  case KIR_LOG: return "log";
  case KIR_LOG2: return "log2";
  case KIR_LOG1P: return "log1p";
  case KIR_EXPM1: return "expm1";
  case KIR_SIN: return "sin";
  case KIR_COS: return "cos";
  case KIR_TAN: return "tan";
  case KIR_TANH: return "tanh";
  case KIR_ERF: return "erf";
  case KIR_FLOOR: return "floor";
  case KIR_CEIL: return "ceil";
  case KIR_RINT: return "rint";
  case KIR_TRUNC: return "trunc";
  case KIR_POW: return "pow";
  case KIR_ATAN2: return "atan2";
  default: return NULL;
  }
}

static const char *infix(kir_op op) {
  switch (op) {
  case KIR_ADD: return "+";
  case KIR_SUB: return "-";
  case KIR_MUL: return "*";
  case KIR_DIV: return "/";
  case KIR_CMPLT: return "<";
  case KIR_CMPLE: return "<=";
  case KIR_CMPEQ: return "==";
  case KIR_CMPNE: return "!=";
  case KIR_AND: return "&";
  case KIR_OR: return "|";
  case KIR_XOR: return "^";
  default: return NULL;
  }
}

/* True when integer uop d is a positive constant its type can hold (index
 * arithmetic divides by extents and strides): neither 0 nor -1, so a
 * plain / or % is exact. */
static bool divisor_is_safe(const kir_kernel *k, int d) {
  const kir_uop *u = &k->uops[d];
  int64_t max = u->type == KILN_U8     ? 255
                : u->type == KILN_I8   ? 127
                : u->type == KILN_I16  ? 32767
                : u->type == KILN_I32  ? 2147483647
                : u->type == KILN_BOOL ? 0
                                       : INT64_MAX;
  return u->op == KIR_CONST && u->ival > 0 && u->ival <= max;
}

/* The right-hand side of ALU uop u (operands v<a>, v<b>, v<c>). Integer
 * ADD/SUB/MUL/NEG wrap: computed on unsigned long long and truncated
 * (BOOL as 1-bit integers: + and - are xor, * is and). */
static void put_alu(kir_strbuf *b, const kir_kernel *k, const kir_uop *u) {
  int a = u->src[0], c = u->src[1], d = u->src[2];
  kiln_dtype t = u->type;
  const char *T = ctype(t);
  bool wrap = !is_fp(t) && t != KIR_INDEX;
  switch (u->op) {
  case KIR_NEG:
    if (t == KILN_BOOL) kir_sb_printf(b, "v%d", a);
    else if (wrap) kir_sb_printf(b, "(%s)(0ull - (unsigned long long)v%d)", T, a);
    else kir_sb_printf(b, "-v%d", a);
    return;
  case KIR_ADD:
  case KIR_SUB:
  case KIR_MUL:
    if (t == KILN_BOOL) kir_sb_printf(b, u->op == KIR_MUL ? "(v%d && v%d)" : "(v%d != v%d)", a, c);
    else if (wrap) kir_sb_printf(b, "(%s)((unsigned long long)v%d %s (unsigned long long)v%d)", T, a, infix(u->op), c);
    else kir_sb_printf(b, "v%d %s v%d", a, infix(u->op), c);
    return;
  case KIR_DIV:
  case KIR_MOD:
    if (is_fp(t) && u->op == KIR_DIV) kir_sb_printf(b, "v%d / v%d", a, c);
    else if (is_fp(t)) kir_sb_printf(b, "%s(v%d, v%d)", t == KILN_F32 ? "fmodf" : "fmod", a, c);
    else if (divisor_is_safe(k, c)) kir_sb_printf(b, "(%s)(v%d %s v%d)", T, a, u->op == KIR_DIV ? "/" : "%", c);
    else kir_sb_printf(b, "kiln_%s<%s>(v%d, v%d)", u->op == KIR_DIV ? "idiv" : "imod", T, a, c);
    return;
  case KIR_MAX:
  case KIR_MIN:
    if (is_fp(t)) kir_sb_printf(b, "kiln_f%s(v%d, v%d)", u->op == KIR_MAX ? "max" : "min", a, c);
    else kir_sb_printf(b, "(v%d %s v%d ? v%d : v%d)", a, u->op == KIR_MAX ? ">" : "<", c, a, c);
    return;
  case KIR_CMPLT:
  case KIR_CMPLE:
  case KIR_CMPEQ:
  case KIR_CMPNE: kir_sb_printf(b, "v%d %s v%d", a, infix(u->op), c); return;
  case KIR_AND:
  case KIR_OR:
  case KIR_XOR: kir_sb_printf(b, "(%s)(v%d %s v%d)", T, a, infix(u->op), c); return;
  case KIR_WHERE: kir_sb_printf(b, "v%d ? v%d : v%d", a, c, d); return;
  default: break;
  }
  const char *fn = math_name(u->op);
  const char *suffix = t == KILN_F32 ? "f" : "";
  if (kir_op_arity(u->op) == 2) kir_sb_printf(b, "%s%s(v%d, v%d)", fn, suffix, a, c);
  else kir_sb_printf(b, "%s%s(v%d)", fn, suffix, a);
}

/* -------------------------------------------------------------- kernel */

bool cuda_kernel_splittable(const kir_kernel *k) { return kir_splittable(k); }

/* Helpers every kernel may call (unused ones cost nothing). */
static const char prelude[] =
    "/* float → int: truncate through int64; NaN and out of range give INT64_MIN */\n"
    "static __device__ __forceinline__ long long kiln_f2i(double x) {\n"
    "  return x > -9223372036854775808.0 && x < 9223372036854775808.0 ? (long long)x : (-9223372036854775807LL - "
    "1);\n"
    "}\n"
    "/* integer division and remainder: divisor 0 gives 0; MIN / -1 wraps */\n"
    "template <class T> static __device__ __forceinline__ T kiln_idiv(T a, T b) {\n"
    "  if (b == (T)0) return (T)0;\n"
    "  if ((T)-1 < (T)0 && b == (T)-1) return (T)(0ull - (unsigned long long)a);\n"
    "  return (T)(a / b);\n"
    "}\n"
    "template <class T> static __device__ __forceinline__ T kiln_imod(T a, T b) {\n"
    "  if (b == (T)0 || ((T)-1 < (T)0 && b == (T)-1)) return (T)0;\n"
    "  return (T)(a % b);\n"
    "}\n"
    "/* float max/min: NaN propagates, -0 < +0 */\n"
    "static __device__ __forceinline__ float kiln_fmax(float a, float b) {\n"
    "  if (a != a || b != b) return a + b;\n"
    "  if (a == b) return __float_as_int(a) < 0 ? b : a;\n"
    "  return a > b ? a : b;\n"
    "}\n"
    "static __device__ __forceinline__ float kiln_fmin(float a, float b) {\n"
    "  if (a != a || b != b) return a + b;\n"
    "  if (a == b) return __float_as_int(a) < 0 ? a : b;\n"
    "  return a < b ? a : b;\n"
    "}\n"
    "static __device__ __forceinline__ double kiln_fmax(double a, double b) {\n"
    "  if (a != a || b != b) return a + b;\n"
    "  if (a == b) return __double_as_longlong(a) < 0 ? b : a;\n"
    "  return a > b ? a : b;\n"
    "}\n"
    "static __device__ __forceinline__ double kiln_fmin(double a, double b) {\n"
    "  if (a != a || b != b) return a + b;\n"
    "  if (a == b) return __double_as_longlong(a) < 0 ? a : b;\n"
    "  return a < b ? a : b;\n"
    "}\n";

static bool uses_type(const kir_kernel *k, kiln_dtype t) {
  for (int p = 0; p < k->n_params; p++)
    if (k->param_dtype[p] == t) return true;
  for (int i = 0; i < k->n_uops; i++)
    if (k->uops[i].type == t || (k->uops[i].op == KIR_PARAM && k->uops[i].elem == t)) return true;
  return false;
}

static void put_name(kir_strbuf *b, const char *name) {
  char s[100];
  size_t n = 0;
  if (!name[0] || (name[0] >= '0' && name[0] <= '9')) s[n++] = 'k', s[n++] = '_';
  for (const char *p = name; *p && n + 1 < sizeof s; p++) {
    char ch = *p;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
    s[n++] = ok ? ch : '_';
  }
  s[n] = 0;
  kir_sb_printf(b, "%s", s);
}

typedef struct print_ctx {
  const kir_kernel *k;
  kir_strbuf *b;
  int depth;
  bool split, parallel_done;
} print_ctx;

static void indent(print_ctx *c) { kir_sb_printf(c->b, "%*s", 2 * c->depth, ""); }

static void print_range(print_ctx *c, int i, const kir_uop *u) {
  kir_strbuf *b = c->b;
  long long ext = (long long)u->ival;
  indent(c);
  if (!u->parallel || c->parallel_done) {
    kir_sb_printf(b, "for (long long v%d = 0; v%d < %lldLL; v%d++) {\n", i, i, ext, i);
  } else {
    c->parallel_done = true;
    kir_sb_printf(b, "const long long v%d_lo = start > 0 ? start : 0, v%d_hi = end < %lldLL ? end : %lldLL;\n", i, i, ext, ext);
    indent(c);
    if (c->split)
      kir_sb_printf(b,
          "for (long long v%d = v%d_lo + (long long)blockIdx.x * blockDim.x + threadIdx.x; v%d < v%d_hi;\n"
          "%*s     v%d += (long long)gridDim.x * blockDim.x) {\n",
          i, i, i, i, 2 * c->depth, "", i);
    else kir_sb_printf(b, "for (long long v%d = v%d_lo; v%d < v%d_hi; v%d++) {\n", i, i, i, i, i);
  }
  c->depth++;
}

static void print_uop(print_ctx *c, int i) {
  const kir_uop *u = &c->k->uops[i];
  kir_strbuf *b = c->b;
  const kir_uop *src0 = u->src[0] >= 0 ? &c->k->uops[u->src[0]] : NULL;
  switch (u->op) {
  case KIR_RANGE: print_range(c, i, u); return;
  case KIR_END:
    c->depth--;
    indent(c);
    kir_sb_printf(b, "}\n");
    return;
  case KIR_PARAM:
    indent(c);
    kir_sb_printf(b, "%s%s *const v%d = (%s%s *)p%lld;\n", c->k->param_written[u->ival] ? "" : "const ", mtype(u->elem), i,
        c->k->param_written[u->ival] ? "" : "const ", mtype(u->elem), (long long)u->ival);
    return;
  case KIR_ACC:
    indent(c);
    kir_sb_printf(b, "%s v%d = v%d;\n", ctype(u->type), i, u->src[0]);
    return;
  case KIR_ACC_SET:
    indent(c);
    kir_sb_printf(b, "v%d = v%d;\n", u->src[0], u->src[1]);
    return;
  case KIR_STORE:
    indent(c);
    if (src0->elem == KILN_BOOL) kir_sb_printf(b, "v%d[v%d] = (unsigned char)v%d;\n", u->src[0], u->src[1], u->src[2]);
    else kir_sb_printf(b, "v%d[v%d] = v%d;\n", u->src[0], u->src[1], u->src[2]);
    return;
  default: break;
  }
  indent(c);
  kir_sb_printf(b, "const %s v%d = ", ctype(u->type), i);
  if (u->op == KIR_CONST) {
    put_const(b, u);
  } else if (u->op == KIR_LOAD) {
    kir_sb_printf(b, u->type == KILN_BOOL ? "v%d[v%d] != 0" : "v%d[v%d]", u->src[0], u->src[1]);
  } else if (u->op == KIR_CAST) {
    char v[24];
    snprintf(v, sizeof v, "v%d", u->src[0]);
    put_cast(b, v, src0->type, u->type);
  } else {
    put_alu(b, c->k, u);
  }
  kir_sb_printf(b, ";\n");
}

int cuda_print_kernel(const kir_kernel *k, const char *fname, char **out, char *err, size_t errlen) {
  *out = NULL;
  const char *bad = kir_verify(k);
  if (bad) {
    snprintf(err, errlen, "cuda_print_kernel: %s: invalid kernel IR: %s", k->name, bad);
    return KILN_ERR_UNSUPPORTED;
  }
  kir_strbuf b = {0};
  kir_sb_printf(&b, "/* %s: generated by Kiln from kernel IR */\n", k->name);
  if (uses_type(k, KILN_F16)) kir_sb_printf(&b, "#include <cuda_fp16.h>\n");
  if (uses_type(k, KILN_BF16)) kir_sb_printf(&b, "#include <cuda_bf16.h>\n");
  kir_sb_printf(&b, "%s\nextern \"C\" __global__ void ", prelude);
  put_name(&b, fname ? fname : k->name);
  kir_sb_printf(&b, "(");
  for (int p = 0; p < k->n_params; p++)
    kir_sb_printf(&b, "%s%s *p%d, ", k->param_written[p] ? "" : "const ", mtype(k->param_dtype[p]), p);
  kir_sb_printf(&b, "long long start, long long end) {\n");
  print_ctx c = {.k = k, .b = &b, .depth = 1, .split = cuda_kernel_splittable(k)};
  if (!c.split) kir_sb_printf(&b, "  if (blockIdx.x != 0 || threadIdx.x != 0) return; /* not splittable: one thread */\n");
  for (int i = 0; i < k->n_uops; i++) print_uop(&c, i);
  kir_sb_printf(&b, "}\n");
  if (b.oom) {
    free(b.p);
    snprintf(err, errlen, "cuda_print_kernel: out of memory printing %s", k->name);
    return KILN_ERR_OOM;
  }
  *out = b.p;
  return KILN_OK;
}
