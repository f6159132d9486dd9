/*
 * cuda_print.c — kernel IR → CUDA C source (one printer for every kernel).
 *
 * Each uop becomes one statement defining `v<index>` (SSA values are
 * `const` locals; an ACC is a mutable local, so a use of it reads its
 * current value, as kir.h says), in uop order:
 *  - PARAM i: a typed alias of the kernel parameter p<i>;
 *  - LOCAL: a local array `T v<index>[n]` (per thread; CUDA puts it in
 *    local memory), declared where the uop stands;
 *  - RANGE/END: `for (...) {` / `}`, so a value defined in a loop is only
 *    visible inside it (kir_verify's scoping rule makes that valid C++);
 *  - the first parallel RANGE iterates [max(start,0), min(end,extent)).
 *    In a splittable kernel (cuda_kernel_splittable) it is a grid-stride
 *    loop (each thread takes indices blockIdx.x*blockDim.x+threadIdx.x,
 *    then steps by gridDim.x*blockDim.x); otherwise the kernel runs on
 *    thread 0 of block 0 only. A flat elementwise kernel whose accesses
 *    are 4-byte elements at the range index (plus an invariant offset)
 *    first takes groups of 4 indices with float4 / int4 loads and stores
 *    where they are aligned, printing its body once per lane (cuda_vec.h);
 *  - a kernel with reductions that cuda_coop.c can share between threads
 *    (cuda_coop.h) takes the cooperative form instead: one block per index
 *    of the parallel range (or block 0 for a kernel without one),
 *    reduction and epilogue loops strided over threadIdx.x, partials
 *    combined by kiln_block_reduce (warp shuffles, then shared memory),
 *    stores outside those loops by thread 0. Other reductions stay
 *    sequential per output (one thread per index of the parallel range).
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
#include "cuda_coop.h"
#include "cuda_vec.h"

/* ---------------------------------------------------------------- types */

/* A float type arithmetic runs in (F32, F64; not F16/BF16). */
static bool is_fp(kir_type t) { return kir_is_float(t) && !kir_is_half(t); }

/* Register type of a value. */
static const char *ctype(kir_type t) {
  switch ((int)t) {
  case KIR_BOOL: return "bool";
  case KIR_U8: return "unsigned char";
  case KIR_I8: return "signed char";
  case KIR_I16: return "short";
  case KIR_I32: return "int";
  case KIR_F16: return "__half";
  case KIR_BF16: return "__nv_bfloat16";
  case KIR_F32: return "float";
  case KIR_F64: return "double";
  default: return "long long"; /* I64, KIR_INDEX */
  }
}

/* Element type in memory: BOOL is a byte. */
static const char *mtype(kir_type t) { return t == KIR_BOOL ? "unsigned char" : ctype(t); }

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

static void put_int(kir_strbuf *b, kir_type t, int64_t v) {
  if (v == INT64_MIN) kir_sb_printf(b, "(%s)(-9223372036854775807LL - 1)", ctype(t));
  else kir_sb_printf(b, "(%s)%lldLL", ctype(t), (long long)v);
}

static void put_const(kir_strbuf *b, const kir_uop *u) {
  switch ((int)u->type) {
  case KIR_BOOL: kir_sb_printf(b, u->cval != 0 ? "true" : "false"); break;
  case KIR_F16:
  case KIR_BF16:
    kir_sb_printf(b, u->type == KIR_F16 ? "__float2half_rn(" : "__float2bfloat16_rn(");
    put_float(b, u->cval, true);
    kir_sb_printf(b, ")");
    break;
  case KIR_F32:
  case KIR_F64: put_float(b, u->cval, u->type == KIR_F32); break;
  default: put_int(b, u->type, u->ival);
  }
}

/* ---------------------------------------------------------- conversions */

/* Prints the conversion of value `v` (a name) from `from` to `to`, C
 * semantics as kir.h's CAST; F16/BF16 go through float both ways. */
static void put_cast(kir_strbuf *b, const char *v, kir_type from, kir_type to) {
  char x[64];
  if (from == to) {
    kir_sb_printf(b, "%s", v);
    return;
  }
  if (kir_is_half(from)) {
    snprintf(x, sizeof x, from == KIR_F16 ? "__half2float(%s)" : "__bfloat162float(%s)", v);
    v = x;
    from = KIR_F32;
  }
  if (kir_is_half(to)) {
    kir_sb_printf(b, to == KIR_F16 ? "__float2half_rn(" : "__float2bfloat16_rn(");
    put_cast(b, v, from, KIR_F32);
    kir_sb_printf(b, ")");
  } else if (from == to) {
    kir_sb_printf(b, "%s", v);
  } else if (to == KIR_BOOL) {
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
  int64_t max = u->type == KIR_U8     ? 255
                : u->type == KIR_I8   ? 127
                : u->type == KIR_I16  ? 32767
                : u->type == KIR_I32  ? 2147483647
                : u->type == KIR_BOOL ? 0
                                       : INT64_MAX;
  return u->op == KIR_CONST && u->ival > 0 && u->ival <= max;
}

/* The right-hand side of ALU uop u on operands named a, c, d (its
 * src[0..2]). Integer ADD/SUB/MUL/NEG wrap: computed on unsigned long long
 * and truncated (BOOL as 1-bit integers: + and - are xor, * is and). */
static void put_alu_on(kir_strbuf *b, const kir_kernel *k, const kir_uop *u, const char *a, const char *c,
                       const char *d) {
  kir_type t = u->type;
  const char *T = ctype(t);
  bool wrap = !is_fp(t) && t != KIR_INDEX;
  switch (u->op) {
  case KIR_NEG:
    if (t == KIR_BOOL) kir_sb_printf(b, "%s", a);
    else if (wrap) kir_sb_printf(b, "(%s)(0ull - (unsigned long long)%s)", T, a);
    else kir_sb_printf(b, "-%s", a);
    return;
  case KIR_ADD:
  case KIR_SUB:
  case KIR_MUL:
    if (t == KIR_BOOL) kir_sb_printf(b, u->op == KIR_MUL ? "(%s && %s)" : "(%s != %s)", a, c);
    else if (wrap) kir_sb_printf(b, "(%s)((unsigned long long)%s %s (unsigned long long)%s)", T, a, infix(u->op), c);
    else kir_sb_printf(b, "%s %s %s", a, infix(u->op), c);
    return;
  case KIR_DIV:
  case KIR_MOD:
    if (is_fp(t) && u->op == KIR_DIV) kir_sb_printf(b, "%s / %s", a, c);
    else if (is_fp(t)) kir_sb_printf(b, "%s(%s, %s)", t == KIR_F32 ? "fmodf" : "fmod", a, c);
    else if (divisor_is_safe(k, u->src[1])) kir_sb_printf(b, "(%s)(%s %s %s)", T, a, u->op == KIR_DIV ? "/" : "%", c);
    else kir_sb_printf(b, "kiln_%s<%s>(%s, %s)", u->op == KIR_DIV ? "idiv" : "imod", T, a, c);
    return;
  case KIR_MAX:
  case KIR_MIN:
    if (is_fp(t)) kir_sb_printf(b, "kiln_f%s(%s, %s)", u->op == KIR_MAX ? "max" : "min", a, c);
    else kir_sb_printf(b, "(%s %s %s ? %s : %s)", a, u->op == KIR_MAX ? ">" : "<", c, a, c);
    return;
  case KIR_CMPLT:
  case KIR_CMPLE:
  case KIR_CMPEQ:
  case KIR_CMPNE: kir_sb_printf(b, "%s %s %s", a, infix(u->op), c); return;
  case KIR_AND:
  case KIR_OR:
  case KIR_XOR: kir_sb_printf(b, "(%s)(%s %s %s)", T, a, infix(u->op), c); return;
  case KIR_WHERE: kir_sb_printf(b, "%s ? %s : %s", a, c, d); return;
  default: break;
  }
  const char *fn = math_name(u->op);
  const char *suffix = t == KIR_F32 ? "f" : "";
  if (kir_op_arity(u->op) == 2) kir_sb_printf(b, "%s%s(%s, %s)", fn, suffix, a, c);
  else kir_sb_printf(b, "%s%s(%s)", fn, suffix, a);
}

/* put_alu_on with the operands v<src[i]>. */
static void put_alu(kir_strbuf *b, const kir_kernel *k, const kir_uop *u) {
  char n[3][24] = {"", "", ""};
  for (int i = 0; i < 3; i++)
    if (u->src[i] >= 0) snprintf(n[i], sizeof n[i], "v%d", u->src[i]);
  put_alu_on(b, k, u, n[0], n[1], n[2]);
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
    "}\n";

/* Float max and min as the kernels' MAX/MIN compute them (also printed
 * into the tiled GEMM's epilogue: cuda_float_minmax). */
static const char minmax[] =
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

const char *cuda_float_minmax(void) { return minmax; }

/* Helpers of cooperative kernels (blockDim.x a multiple of 32, at most
 * 1024): warp shuffles of any register type, and the block-wide combine. */
static const char coop_prelude[] =
    "static __device__ __forceinline__ float kiln_shfl_down(float v, unsigned o) {\n"
    "  return __shfl_down_sync(0xffffffffu, v, o);\n"
    "}\n"
    "static __device__ __forceinline__ double kiln_shfl_down(double v, unsigned o) {\n"
    "  return __shfl_down_sync(0xffffffffu, v, o);\n"
    "}\n"
    "static __device__ __forceinline__ long long kiln_shfl_down(long long v, unsigned o) {\n"
    "  return __shfl_down_sync(0xffffffffu, v, o);\n"
    "}\n"
    "template <class T> static __device__ __forceinline__ T kiln_shfl_down(T v, unsigned o) {\n"
    "  return (T)__shfl_down_sync(0xffffffffu, (int)v, o);\n"
    "}\n"
    "/* v combined by f over the block's threads; every thread gets the result. Lanes\n"
    "   combine down a tree within each warp, warp 0 combines the warps' results\n"
    "   through shared memory; the last barrier lets s be reused. */\n"
    "template <class T, class F> static __device__ __forceinline__ T kiln_block_reduce(T v, F f, long long *smem) {\n"
    "  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;\n"
    "  T *s = (T *)smem;\n"
    "  for (unsigned o = 16; o > 0; o >>= 1) {\n"
    "    const T w = kiln_shfl_down(v, o);\n"
    "    if (lane + o < 32u) v = f(v, w);\n"
    "  }\n"
    "  if (lane == 0) s[warp] = v;\n"
    "  __syncthreads();\n"
    "  if (warp == 0) {\n"
    "    v = s[lane < warps ? lane : 0];\n"
    "    for (unsigned o = 16; o > 0; o >>= 1) {\n"
    "      const T w = kiln_shfl_down(v, o);\n"
    "      if (lane + o < warps) v = f(v, w);\n"
    "    }\n"
    "    if (lane == 0) s[0] = v;\n"
    "  }\n"
    "  __syncthreads();\n"
    "  v = s[0];\n"
    "  __syncthreads();\n"
    "  return v;\n"
    "}\n"
    "/* argmax (MAX) / argmin: (bv, bi) beats (av, ai) when its value is better, NaN\n"
    "   first, ties to the smaller index -- the first best element, as sequentially */\n"
    "template <bool MAX, class T> static __device__ __forceinline__ bool kiln_arg_better(T bv, long long bi, T av,\n"
    "                                                                                   long long ai) {\n"
    "  const bool bn = bv != bv, an = av != av;\n"
    "  if (bn || an) return bn && (!an || bi < ai);\n"
    "  if (MAX ? av < bv : bv < av) return true;\n"
    "  return !(av < bv) && !(bv < av) && bi < ai;\n"
    "}\n"
    "template <bool MAX, class T> static __device__ __forceinline__ void kiln_warp_arg(T &v, long long &i, unsigned n) {\n"
    "  const unsigned lane = threadIdx.x & 31u;\n"
    "  for (unsigned o = 16; o > 0; o >>= 1) {\n"
    "    const T w = kiln_shfl_down(v, o);\n"
    "    const long long j = kiln_shfl_down(i, o);\n"
    "    if (lane + o < n && kiln_arg_better<MAX>(w, j, v, i)) v = w, i = j;\n"
    "  }\n"
    "}\n"
    "/* the block's best (v, i) of every thread's; every thread gets it */\n"
    "template <bool MAX, class T> static __device__ __forceinline__ void kiln_block_arg(T &v, long long &i, long long *sv,\n"
    "                                                                                  long long *si) {\n"
    "  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;\n"
    "  T *s = (T *)sv;\n"
    "  kiln_warp_arg<MAX>(v, i, 32u);\n"
    "  if (lane == 0) s[warp] = v, si[warp] = i;\n"
    "  __syncthreads();\n"
    "  if (warp == 0) {\n"
    "    v = s[lane < warps ? lane : 0];\n"
    "    i = si[lane < warps ? lane : 0];\n"
    "    kiln_warp_arg<MAX>(v, i, warps);\n"
    "    if (lane == 0) s[0] = v, si[0] = i;\n"
    "  }\n"
    "  __syncthreads();\n"
    "  v = s[0];\n"
    "  i = si[0];\n"
    "  __syncthreads();\n"
    "}\n";

static bool uses_type(const kir_kernel *k, kir_type t) {
  for (int p = 0; p < k->n_params; p++)
    if (k->param_type[p] == t) return true;
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
  const cuda_coop *plan; /* plan->on: the cooperative form */
  const cuda_vec *vec;   /* vec->on: the vector form (cuda_vec.h) */
  kir_strbuf *b;
  int depth;
  int per_thread; /* depth of STRIDED/REDUCE loops around the current uop */
  bool split, parallel_done;
  bool lanes; /* printing the lanes of the vector form */
} print_ctx;

static void print_uop(print_ctx *c, int i);

static void indent(print_ctx *c) { kir_sb_printf(c->b, "%*s", 2 * c->depth, ""); }

/* The identity of combine op `op` on type t, for threads other than 0
 * (ADD and XOR: 0, -0.0 for floats so that a sum of -0s stays -0; MUL: 1). */
static void put_identity(kir_strbuf *b, kir_op op, kir_type t) {
  bool one = op == KIR_MUL;
  if (t == KIR_BOOL) kir_sb_printf(b, one ? "true" : "false");
  else if (is_fp(t)) kir_sb_printf(b, "%s%s", one ? "1.0" : "-0.0", t == KIR_F32 ? "f" : "");
  else kir_sb_printf(b, "(%s)%d", ctype(t), one ? 1 : 0);
}

/* True when ACC_SET j is the first in REDUCE loop r to set its
 * accumulator (defined before r): each accumulator is reset and combined
 * once per loop. */
static bool first_outer_set(const kir_kernel *k, int r, int j) {
  const kir_uop *u = &k->uops[j];
  if (u->op != KIR_ACC_SET || u->src[0] >= r) return false;
  for (int i = r + 1; i < j; i++)
    if (k->uops[i].op == KIR_ACC_SET && k->uops[i].src[0] == u->src[0]) return false;
  return true;
}

/* Before REDUCE loop r: threads other than 0 start each accumulator whose
 * combine counts (ADD, MUL, XOR) from the identity, so the initial value
 * is combined once. */
static void print_resets(print_ctx *c, int r) {
  const kir_kernel *k = c->k;
  if (c->plan->arg[r].val >= 0) return; /* every thread starts from the initial pair */
  for (int j = r + 1; j < c->plan->end[r]; j++) {
    if (!first_outer_set(k, r, j)) continue;
    const kir_uop *upd = &k->uops[k->uops[j].src[1]];
    if (cuda_coop_idempotent(upd->op)) continue;
    indent(c);
    kir_sb_printf(c->b, "if (threadIdx.x != 0) v%d = ", k->uops[j].src[0]);
    put_identity(c->b, upd->op, upd->type);
    kir_sb_printf(c->b, ";\n");
  }
}

/* After REDUCE loop r: each accumulator combined across the block with
 * its update's op. */
static void print_combines(print_ctx *c, int r) {
  const kir_kernel *k = c->k;
  const cuda_coop_arg *a = &c->plan->arg[r];
  if (a->val >= 0) {
    indent(c);
    kir_sb_printf(c->b, "kiln_block_arg<%s>(v%d, v%d, kiln_smem, kiln_smem_i);\n", a->max ? "true" : "false", a->val,
                  a->idx);
    return;
  }
  for (int j = r + 1; j < c->plan->end[r]; j++) {
    if (!first_outer_set(k, r, j)) continue;
    int acc = k->uops[j].src[0];
    const kir_uop *upd = &k->uops[k->uops[j].src[1]];
    const char *T = ctype(upd->type);
    indent(c);
    kir_sb_printf(c->b, "v%d = kiln_block_reduce(v%d, [](%s a, %s b) -> %s { return ", acc, acc, T, T, T);
    put_alu_on(c->b, k, upd, "a", "b", "");
    kir_sb_printf(c->b, "; }, kiln_smem);\n");
  }
}

/* A RANGE of the cooperative form (by its role in the plan). */
static void print_coop_range(print_ctx *c, int i, const kir_uop *u) {
  kir_strbuf *b = c->b;
  const cuda_coop *p = c->plan;
  long long ext = (long long)u->ival;
  switch (p->role[i]) {
  case CUDA_LOOP_STRIDED:
    indent(c);
    kir_sb_printf(b, "for (long long v%d = threadIdx.x; v%d < %lldLL; v%d += blockDim.x) {\n", i, i, ext, i);
    break;
  case CUDA_LOOP_REDUCE:
    print_resets(c, i);
    indent(c);
    kir_sb_printf(b, "for (long long v%d_f = threadIdx.x; v%d_f < %lldLL; v%d_f += blockDim.x) {\n", i, i,
                  (long long)(p->div[i] * u->ival), i);
    c->depth++;
    indent(c);
    kir_sb_printf(b, "const long long v%d = v%d_f / %lldLL;\n", i, i, (long long)p->div[i]);
    c->depth--;
    break;
  case CUDA_LOOP_FLAT:
    indent(c);
    kir_sb_printf(b, "const long long v%d = v%d_f / %lldLL %% %lldLL;\n", i, p->root[i], (long long)p->div[i], ext);
    return; /* no block of its own */
  default:
    indent(c);
    kir_sb_printf(b, "for (long long v%d = 0; v%d < %lldLL; v%d++) {\n", i, i, ext, i);
    break;
  }
  if (p->role[i] == CUDA_LOOP_STRIDED || p->role[i] == CUDA_LOOP_REDUCE) c->per_thread++;
  c->depth++;
}

/* The vector form of parallel range i (cuda_vec.c), its body printed
 * once per lane of each group of 4 indices, then the scalar grid-stride
 * loop over the rest (the tail, or all of it when unaligned). */
static void print_vector_part(print_ctx *c, int i) {
  kir_strbuf *b = c->b;
  kir_sb_printf(b, "/* groups of 4 where aligned, then one index at a time */\n");
  cuda_vec_open(c->k, c->vec, b, c->depth);
  c->depth += 2;
  c->lanes = true;
  for (int j = i + 1; j < c->vec->end && !b->oom; j++) print_uop(c, j);
  c->lanes = false;
  c->depth -= 2;
  cuda_vec_close(c->k, c->vec, b, c->depth);
  indent(c);
  kir_sb_printf(b,
      "for (long long v%d = v%d_lo + v%d_vn + (long long)blockIdx.x * blockDim.x + threadIdx.x; v%d < v%d_hi;\n"
      "%*s     v%d += (long long)gridDim.x * blockDim.x) {\n",
      i, i, i, i, i, 2 * c->depth, "", i);
}

static void print_range(print_ctx *c, int i, const kir_uop *u) {
  kir_strbuf *b = c->b;
  long long ext = (long long)u->ival;
  if (c->plan->on && i != c->plan->parallel && (c->per_thread == 0 || c->plan->role[i] == CUDA_LOOP_FLAT)) {
    print_coop_range(c, i, u);
    return;
  }
  indent(c);
  if (!u->parallel || c->parallel_done) {
    kir_sb_printf(b, "for (long long v%d = 0; v%d < %lldLL; v%d++) {\n", i, i, ext, i);
  } else {
    c->parallel_done = true;
    kir_sb_printf(b, "const long long v%d_lo = start > 0 ? start : 0, v%d_hi = end < %lldLL ? end : %lldLL;\n", i, i, ext, ext);
    indent(c);
    if (c->plan->on)
      kir_sb_printf(b, "for (long long v%d = v%d_lo + blockIdx.x; v%d < v%d_hi; v%d += gridDim.x) { /* one block each */\n",
                    i, i, i, i, i);
    else if (c->split && c->vec->on)
      print_vector_part(c, i);
    else if (c->split)
      kir_sb_printf(b,
          "for (long long v%d = v%d_lo + (long long)blockIdx.x * blockDim.x + threadIdx.x; v%d < v%d_hi;\n"
          "%*s     v%d += (long long)gridDim.x * blockDim.x) {\n",
          i, i, i, i, 2 * c->depth, "", i);
    else kir_sb_printf(b, "for (long long v%d = v%d_lo; v%d < v%d_hi; v%d++) {\n", i, i, i, i, i);
  }
  c->depth++;
}

static void print_end(print_ctx *c, int range) {
  int role = c->plan->role[range];
  if (role == CUDA_LOOP_FLAT) return;
  c->depth--;
  indent(c);
  kir_sb_printf(c->b, "}\n");
  if (role == CUDA_LOOP_STRIDED || role == CUDA_LOOP_REDUCE) c->per_thread--;
  if (role == CUDA_LOOP_REDUCE) print_combines(c, range);
}

static void print_uop(print_ctx *c, int i) {
  const kir_uop *u = &c->k->uops[i];
  kir_strbuf *b = c->b;
  const kir_uop *src0 = u->src[0] >= 0 ? &c->k->uops[u->src[0]] : NULL;
  switch (u->op) {
  case KIR_RANGE: print_range(c, i, u); return;
  case KIR_END: print_end(c, u->src[0]); return;
  case KIR_PARAM:
    indent(c);
    kir_sb_printf(b, "%s%s *const v%d = (%s%s *)p%lld;\n", c->k->param_written[u->ival] ? "" : "const ", mtype(u->elem), i,
        c->k->param_written[u->ival] ? "" : "const ", mtype(u->elem), (long long)u->ival);
    return;
  case KIR_LOCAL:
    indent(c);
    kir_sb_printf(b, "%s v%d[%lld];\n", mtype(u->elem), i, (long long)u->ival);
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
    if (c->lanes && c->vec->wide[i]) {
      cuda_vec_put_store(c->k, b, i);
      return;
    }
    if (c->plan->on && c->per_thread == 0) kir_sb_printf(b, "if (threadIdx.x == 0) "); /* one value per block */
    if (src0->elem == KIR_BOOL) kir_sb_printf(b, "v%d[v%d] = (unsigned char)v%d;\n", u->src[0], u->src[1], u->src[2]);
    else kir_sb_printf(b, "v%d[v%d] = v%d;\n", u->src[0], u->src[1], u->src[2]);
    return;
  default: break;
  }
  indent(c);
  kir_sb_printf(b, "const %s v%d = ", ctype(u->type), i);
  if (u->op == KIR_CONST) {
    put_const(b, u);
  } else if (u->op == KIR_LOAD && c->lanes && c->vec->wide[i]) {
    cuda_vec_put_load(c->k, b, i);
  } else if (u->op == KIR_LOAD) {
    kir_sb_printf(b, u->type == KIR_BOOL ? "v%d[v%d] != 0" : "v%d[v%d]", u->src[0], u->src[1]);
  } else if (u->op == KIR_CAST) {
    char v[24];
    snprintf(v, sizeof v, "v%d", u->src[0]);
    put_cast(b, v, src0->type, u->type);
  } else {
    put_alu(b, c->k, u);
  }
  kir_sb_printf(b, ";\n");
}

/* The kernel's first lines: which threads run it. */
static void print_entry_guard(print_ctx *c) {
  kir_strbuf *b = c->b;
  if (c->plan->on) {
    kir_sb_printf(b, "  __shared__ long long kiln_smem[32]; /* a partial per warp */\n");
    if (c->plan->has_arg) kir_sb_printf(b, "  __shared__ long long kiln_smem_i[32]; /* its index (argmax/argmin) */\n");
    if (c->plan->parallel < 0) kir_sb_printf(b, "  if (blockIdx.x != 0) return; /* one block shares the work */\n");
  } else if (!c->split) {
    kir_sb_printf(b, "  if (blockIdx.x != 0 || threadIdx.x != 0) return; /* not splittable: one thread */\n");
  }
}

int cuda_print_kernel(const kir_kernel *k, const char *fname, char **out, char *err, size_t errlen) {
  *out = NULL;
  const char *bad = kir_verify(k);
  if (bad) {
    snprintf(err, errlen, "cuda_print_kernel: %s: invalid kernel IR: %s", k->name, bad);
    return KILN_ERR_UNSUPPORTED;
  }
  cuda_coop plan;
  cuda_vec vec;
  kir_strbuf b = {0};
  b.oom = cuda_coop_plan(k, &plan) != KILN_OK;
  bool split = cuda_kernel_splittable(k);
  b.oom |= cuda_vec_plan(k, split && !plan.on, &vec) != KILN_OK;
  kir_sb_printf(&b, "/* %s: generated by Kiln from kernel IR */\n", k->name);
  if (uses_type(k, KIR_F16)) kir_sb_printf(&b, "#include <cuda_fp16.h>\n");
  if (uses_type(k, KIR_BF16)) kir_sb_printf(&b, "#include <cuda_bf16.h>\n");
  kir_sb_printf(&b, "%s%s%s\nextern \"C\" __global__ void ", prelude, minmax, plan.on ? coop_prelude : "");
  put_name(&b, fname ? fname : k->name);
  kir_sb_printf(&b, "(");
  for (int p = 0; p < k->n_params; p++)
    kir_sb_printf(&b, "%s%s *p%d, ", k->param_written[p] ? "" : "const ", mtype(k->param_type[p]), p);
  kir_sb_printf(&b, "long long start, long long end) {\n");
  print_ctx c = {.k = k, .plan = &plan, .vec = &vec, .b = &b, .depth = 1, .split = split};
  print_entry_guard(&c);
  for (int i = 0; i < k->n_uops && !b.oom; i++) print_uop(&c, i);
  kir_sb_printf(&b, "}\n");
  cuda_coop_free(&plan);
  cuda_vec_free(&vec);
  if (b.oom) {
    free(b.p);
    snprintf(err, errlen, "cuda_print_kernel: out of memory printing %s", k->name);
    return KILN_ERR_OOM;
  }
  *out = b.p;
  return KILN_OK;
}
