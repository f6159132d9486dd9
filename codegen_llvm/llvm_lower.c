/*
 * llvm_lower.c — kernel IR → LLVM IR for the CPU backend.
 *
 * The kernel becomes  void @name(ptr %bufs, i64 %start, i64 %end).
 * Uops are lowered in order into straight-line code; kir_verify's scoping
 * rules (defined before use, loop values used only inside their loop) make
 * that valid SSA. Layout of the generated code:
 *  - entry block: one alloca per ACC (promoted to registers by the O2
 *    pipeline's SROA/mem2reg) and per LOCAL (an array on the stack, 64-byte
 *    aligned, that no pointer escapes: LLVM knows the kernel's buffers do
 *    not alias it), then a branch to the first code block;
 *  - RANGE: a header block with an i64 phi (lo from the preheader, i+1 from
 *    the latch), `i < hi` branching to the body or the exit; END adds the
 *    latch and continues in the exit block. The first RANGE flagged
 *    parallel iterates [max(start,0), min(end,extent)) (in a kernel with
 *    nontemporal stores, innermost, both rounded down to multiples of 64
 *    except the extent: llvm_stream.c).
 * Register types: BOOL i1 (i8 in memory), U8/I8 i8, I16 i16, I32 i32,
 * I64/INDEX i64, F16 half, BF16 i16 (bits; converted with integer code),
 * F32 float, F64 double. U8 and BOOL are unsigned. Nothing traps: integer
 * ÷0 gives 0, INT_MIN/-1 wraps, float→int out of range gives INT64_MIN
 * truncated (as graph/dtype.c's host conversion does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/DebugInfo.h>

#include "llvm_internal.h"

typedef struct loop_info {
  LLVMValueRef phi;
  LLVMBasicBlockRef header, exit;
} loop_info;

typedef struct llvm_ctx {
  const kir_kernel *k;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;  /* current insertion point */
  LLVMBuilderRef ab; /* allocas: end of the entry block, before its branch */
  LLVMValueRef bufs, start, end;
  LLVMValueRef *vals; /* per uop: its value (an ACC: its alloca) */
  loop_info *loops;   /* per RANGE uop */
  bool parallel_done; /* the first parallel RANGE has been lowered */
  bool streaming;     /* the kernel has nontemporal stores (llvm_stream.c) */
  bool stream_param[KIR_MAX_PARAMS]; /* PARAM index: a nontemporal store writes it */
  bool failed;        /* an intrinsic was missing (a bug in this file) */
  LLVMValueRef *staged; /* per LOAD uop: its tile's staged block (llvm_tile.c), or NULL */
  int tile;             /* outer RANGE of the tile being lowered */
  int skew;             /* its skew uop (kir_tile_skew) while inside it, else -1 */
  int load_skew;        /* the skew its staged reads index by (llvm_tile_stage), or -1 */
  /* per PARAM index, and n_params for the staged blocks: !alias.scope of
   * its accesses (NULL: none) and !noalias (every other's scope) */
  LLVMValueRef scope[KIR_MAX_PARAMS + 1], noalias[KIR_MAX_PARAMS + 1];
  LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, ptr;
} llvm_ctx;

/* ---------------------------------------------------------------- types */

static LLVMTypeRef reg_type(const llvm_ctx *c, kir_type t) {
  switch ((int)t) {
  case KIR_BOOL: return c->i1;
  case KIR_U8:
  case KIR_I8: return c->i8;
  case KIR_I16:
  case KIR_BF16: return c->i16;
  case KIR_I32: return c->i32;
  case KIR_F16: return c->f16;
  case KIR_F32: return c->f32;
  case KIR_F64: return c->f64;
  case KIR_PTR: return c->ptr;
  default: return c->i64; /* I64, KIR_INDEX */
  }
}

static void init_types(llvm_ctx *c);

static LLVMTypeRef mem_type(const llvm_ctx *c, kir_type t) {
  return t == KIR_BOOL ? c->i8 : reg_type(c, t);
}

LLVMTypeRef llvm_mem_type(LLVMContextRef ctx, kir_type t) {
  llvm_ctx c = {.ctx = ctx};
  init_types(&c);
  return mem_type(&c, t);
}

/* A float type arithmetic runs in (F32, F64; not F16/BF16). */
static bool is_fp(kir_type t) { return kir_is_float(t) && !kir_is_half(t); }
/* U8 and BOOL: zero-extended, compared and converted unsigned. */
static bool is_unsigned(kir_type t) { return kir_is_elem(t) && !kir_types[t].is_signed; }

static LLVMValueRef cint(LLVMTypeRef t, unsigned long long v) { return LLVMConstInt(t, v, 0); }

/* Value of uop i at the insertion point (an ACC reads its current value). */
static LLVMValueRef val(llvm_ctx *c, int i) {
  const kir_uop *u = &c->k->uops[i];
  if (u->op == KIR_ACC) return LLVMBuildLoad2(c->b, reg_type(c, u->type), c->vals[i], "");
  return c->vals[i];
}

static kir_type src_type(const llvm_ctx *c, const kir_uop *u, int s) {
  return c->k->uops[u->src[s]].type;
}

/* ---------------------------------------------------------------- calls */

static void add_attr(llvm_ctx *c, LLVMValueRef fn, unsigned idx, const char *name) {
  unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
  LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(c->ctx, kind, 0));
}

/* Calls an intrinsic overloaded on one type `t` (llvm.sqrt, llvm.smax...). */
static LLVMValueRef call_intrinsic(llvm_ctx *c, const char *name, LLVMTypeRef t, LLVMValueRef *args,
                                   unsigned n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  if (!id) {
    c->failed = true;
    return LLVMGetUndef(t);
  }
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(c->mod, id, &t, 1);
  LLVMTypeRef fty = LLVMIntrinsicGetType(c->ctx, id, &t, 1);
  return LLVMBuildCall2(c->b, fty, fn, args, n, "");
}

/* Calls libm's `base` (F64) or `base`f (F32), declared on first use as a
 * pure function (errno is never read). */
static LLVMValueRef call_libm(llvm_ctx *c, const char *base, kir_type t, LLVMValueRef *args,
                              unsigned n) {
  char name[32];
  snprintf(name, sizeof name, "%s%s", base, t == KIR_F32 ? "f" : "");
  LLVMTypeRef ft = reg_type(c, t), params[2] = {ft, ft};
  LLVMTypeRef fty = LLVMFunctionType(ft, params, n, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
  if (!fn) {
    fn = LLVMAddFunction(c->mod, name, fty);
    add_attr(c, fn, LLVMAttributeFunctionIndex, "nounwind");
    add_attr(c, fn, LLVMAttributeFunctionIndex, "willreturn");
    add_attr(c, fn, LLVMAttributeFunctionIndex, "memory"); /* value 0: memory(none) */
  }
  return LLVMBuildCall2(c->b, fty, fn, args, n, "");
}

/* ---------------------------------------------------------- conversions */

/* bf16 bits → float: the bits are the top half of an f32. */
static LLVMValueRef bf16_to_f32(llvm_ctx *c, LLVMValueRef v) {
  LLVMValueRef w = LLVMBuildZExt(c->b, v, c->i32, "");
  w = LLVMBuildShl(c->b, w, cint(c->i32, 16), "");
  return LLVMBuildBitCast(c->b, w, c->f32, "");
}

/* float → bf16 bits, round to nearest even; NaN stays a quiet NaN. */
static LLVMValueRef f32_to_bf16(llvm_ctx *c, LLVMValueRef v) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef u = LLVMBuildBitCast(b, v, c->i32, "");
  LLVMValueRef mag = LLVMBuildAnd(b, u, cint(c->i32, 0x7fffffff), "");
  LLVMValueRef nan = LLVMBuildICmp(b, LLVMIntUGT, mag, cint(c->i32, 0x7f800000), "");
  LLVMValueRef hi = LLVMBuildLShr(b, u, cint(c->i32, 16), "");
  LLVMValueRef lsb = LLVMBuildAnd(b, hi, cint(c->i32, 1), "");
  LLVMValueRef r = LLVMBuildAdd(b, u, cint(c->i32, 0x7fff), "");
  r = LLVMBuildLShr(b, LLVMBuildAdd(b, r, lsb, ""), cint(c->i32, 16), "");
  LLVMValueRef q = LLVMBuildOr(b, hi, cint(c->i32, 0x40), "");
  return LLVMBuildTrunc(b, LLVMBuildSelect(b, nan, q, r, ""), c->i16, "");
}

/* The same rounding on the host, for constants. */
static unsigned f32_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* Float → int of type `to`: truncate to int64 (out of range and NaN give
 * INT64_MIN, never poison), then wrap to the narrower type. */
static LLVMValueRef float_to_int(llvm_ctx *c, LLVMValueRef v, kir_type to) {
  LLVMBuilderRef b = c->b;
  LLVMTypeRef ft = LLVMTypeOf(v);
  LLVMValueRef lo = LLVMBuildFCmp(b, LLVMRealOGT, v, LLVMConstReal(ft, -9223372036854775808.0), "");
  LLVMValueRef hi = LLVMBuildFCmp(b, LLVMRealOLT, v, LLVMConstReal(ft, 9223372036854775808.0), "");
  LLVMValueRef ok = LLVMBuildAnd(b, lo, hi, "");
  LLVMValueRef safe = LLVMBuildSelect(b, ok, v, LLVMConstReal(ft, 0.0), "");
  LLVMValueRef i = LLVMBuildFPToSI(b, safe, c->i64, "");
  i = LLVMBuildSelect(b, ok, i, cint(c->i64, 1ull << 63), "");
  return LLVMBuildIntCast2(b, i, reg_type(c, to), 1, "");
}

/* Conversion between compute types (no F16/BF16), C semantics. */
static LLVMValueRef convert(llvm_ctx *c, LLVMValueRef v, kir_type from, kir_type to) {
  LLVMBuilderRef b = c->b;
  LLVMTypeRef t = reg_type(c, to);
  if (from == to) return v;
  if (to == KIR_BOOL) {
    if (is_fp(from)) return LLVMBuildFCmp(b, LLVMRealUNE, v, LLVMConstReal(LLVMTypeOf(v), 0.0), "");
    return LLVMBuildICmp(b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
  }
  if (is_fp(from) && is_fp(to))
    return to == KIR_F64 ? LLVMBuildFPExt(b, v, t, "") : LLVMBuildFPTrunc(b, v, t, "");
  if (is_fp(from)) return float_to_int(c, v, to);
  if (is_fp(to)) return is_unsigned(from) ? LLVMBuildUIToFP(b, v, t, "") : LLVMBuildSIToFP(b, v, t, "");
  return LLVMBuildIntCast2(b, v, t, !is_unsigned(from), "");
}

/* Any conversion: F16/BF16 go through F32 both ways (as graph/dtype.c). */
static LLVMValueRef cast_value(llvm_ctx *c, LLVMValueRef v, kir_type from, kir_type to) {
  if (from == to) return v;
  if (from == KIR_F16) v = LLVMBuildFPExt(c->b, v, c->f32, "");
  if (from == KIR_BF16) v = bf16_to_f32(c, v);
  if (from == KIR_F16 || from == KIR_BF16) from = KIR_F32;
  if (to == KIR_F16) return LLVMBuildFPTrunc(c->b, convert(c, v, from, KIR_F32), c->f16, "");
  if (to == KIR_BF16) return f32_to_bf16(c, convert(c, v, from, KIR_F32));
  return convert(c, v, from, to);
}

/* ------------------------------------------------------ uop lowerings */

typedef LLVMValueRef (*lower_fn)(llvm_ctx *c, const kir_uop *u);

typedef struct op_lowering {
  lower_fn fn;
  LLVMOpcode iop, fop;          /* arithmetic: int and float opcodes */
  LLVMIntPredicate spred, upred; /* CMP: signed and unsigned */
  LLVMRealPredicate fpred;       /* CMP: float */
  const char *intrinsic;         /* math: llvm.* intrinsic, or ... */
  const char *libm;              /* ... libm function (F64 name) */
} op_lowering;

static const op_lowering lowerings[KIR_OP_COUNT];

static LLVMValueRef lower_param(llvm_ctx *c, const kir_uop *u) {
  LLVMValueRef idx = cint(c->i64, (unsigned long long)u->ival);
  LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->ptr, c->bufs, &idx, 1, "");
  char name[16];
  snprintf(name, sizeof name, "p%d", (int)u->ival);
  LLVMValueRef buf = LLVMBuildLoad2(c->b, c->ptr, p, name);
  if (c->stream_param[u->ival] && !llvm_assume_aligned(c->b, c->mod, buf, 64)) c->failed = true;
  return buf;
}

static LLVMValueRef lower_const(llvm_ctx *c, const kir_uop *u) {
  switch ((int)u->type) {
  case KIR_BOOL: return cint(c->i1, u->cval != 0);
  case KIR_F16: return LLVMConstReal(c->f16, (double)(float)u->cval);
  case KIR_BF16: return cint(c->i16, f32_to_bf16_bits((float)u->cval));
  case KIR_F32: return LLVMConstReal(c->f32, (double)(float)u->cval);
  case KIR_F64: return LLVMConstReal(c->f64, u->cval);
  default: return LLVMConstInt(reg_type(c, u->type), (unsigned long long)u->ival, 1);
  }
}

static LLVMValueRef call_i64(llvm_ctx *c, const char *name, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef args[2] = {a, b};
  return call_intrinsic(c, name, c->i64, args, 2);
}

/* True when RANGE uop r opens no other loop before its END. */
static bool innermost(const kir_kernel *k, int r) {
  for (int i = r + 1; i < k->n_uops; i++) {
    if (k->uops[i].op == KIR_RANGE) return false;
    if (k->uops[i].op == KIR_END && k->uops[i].src[0] == r) return true;
  }
  return true;
}

/* A streaming kernel's chunk [lo, hi) of its innermost parallel range
 * starts at a multiple of 64 elements (and ends at one, or at the extent):
 * neighbouring chunks still meet, and every vector store of the
 * vectorised loop is aligned to its size. */
#define STREAM_CHUNK 64
static void align_chunk(llvm_ctx *c, LLVMValueRef *lo, LLVMValueRef *hi, int64_t extent) {
  LLVMValueRef mask = cint(c->i64, (unsigned long long)-STREAM_CHUNK), ext = cint(c->i64, (unsigned long long)extent);
  *lo = LLVMBuildAnd(c->b, *lo, mask, "");
  LLVMValueRef whole = LLVMBuildICmp(c->b, LLVMIntSGE, *hi, ext, "");
  *hi = LLVMBuildSelect(c->b, whole, ext, LLVMBuildAnd(c->b, *hi, mask, ""), "");
}

static LLVMValueRef lower_range(llvm_ctx *c, const kir_uop *u) {
  int i = (int)(u - c->k->uops);
  llvm_tile_env e = {.k = c->k, .ctx = c->ctx, .b = c->b, .ab = c->ab, .vals = c->vals};
  if (u->tile) {
    llvm_tile_stage(&e, i, c->staged, &c->load_skew);
    c->tile = i;
    c->skew = llvm_tile_skew(c->k, i);
  } else if (i > 0 && c->k->uops[i - 1].tile && !llvm_tile_align_rows(&e, c->mod, i - 1, c->vals[i - 1])) {
    c->failed = true;
  }
  LLVMValueRef lo = cint(c->i64, 0), hi = cint(c->i64, (unsigned long long)u->ival);
  if (u->parallel && !c->parallel_done) {
    c->parallel_done = true;
    lo = call_i64(c, "llvm.smax", c->start, lo);
    hi = call_i64(c, "llvm.smin", c->end, hi);
    if (c->streaming && innermost(c->k, i)) align_chunk(c, &lo, &hi, u->ival);
  }
  LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(c->b));
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
  LLVMBasicBlockRef header = LLVMAppendBasicBlockInContext(c->ctx, fn, "loop");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->ctx, fn, "body");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(c->ctx, fn, "exit");
  LLVMBuildBr(c->b, header);
  LLVMPositionBuilderAtEnd(c->b, header);
  LLVMValueRef phi = LLVMBuildPhi(c->b, c->i64, "i");
  LLVMAddIncoming(phi, &lo, &pre, 1);
  LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntSLT, phi, hi, ""), body, exit);
  LLVMPositionBuilderAtEnd(c->b, body);
  c->loops[i] = (loop_info){phi, header, exit};
  return phi;
}

/* Cost of a uop in the body of an innermost loop, in rough vector
 * instructions: the F32 math expands to dozens (llvm_math.c). */
static int body_cost(const kir_uop *u) {
  switch (u->op) {
  case KIR_EXP: case KIR_EXP2: case KIR_LOG: case KIR_LOG2: case KIR_LOG1P: case KIR_EXPM1: case KIR_SIN:
  case KIR_COS: case KIR_TAN: case KIR_TANH: case KIR_ERF: case KIR_POW: case KIR_ATAN2:
    return 30;
  case KIR_DIV: case KIR_SQRT: return 4;
  default: return 1;
  }
}

/* Interleave count for the innermost loop whose RANGE is uop r and END uop
 * e: a long dependent chain per element (W2 of bench/: ten tanh in a row,
 * about 500 vector instructions) fills the core's reorder window with one
 * vector iteration, so iterations do not overlap and the loop runs at the
 * chain's latency; interleaving 4 independent vectors hides it (see
 * bench/README.md, row W2). Short bodies keep LLVM's own choice (0). */
#define LONG_BODY 150
static unsigned interleave_count(const kir_kernel *k, int r, int e) {
  int cost = 0;
  for (int i = r + 1; i < e; i++) {
    if (k->uops[i].op == KIR_RANGE) return 0; /* not innermost */
    cost += body_cost(&k->uops[i]);
  }
  return cost >= LONG_BODY ? 4 : 0;
}

/* Vector lanes for an innermost loop that computes in F32 and accumulates
 * into F64 with a reassociable update (softmax's sum of exp, layer norm's
 * sums): LLVM sizes vectors by the widest type, 8 lanes at 512 bits, so
 * the F32 math ran on half vectors; 16 lanes run it on whole ones, the F64
 * adds on two (see bench/README.md, row W4). 0: LLVM's choice. */
static unsigned mixed_width(const kir_kernel *k, int r, int e) {
  if (!llvm_wide_vectors()) return 0;
  bool f32 = false, f64_acc = false;
  for (int i = r + 1; i < e; i++) {
    const kir_uop *u = &k->uops[i];
    if (u->op == KIR_RANGE) return 0; /* not innermost */
    f32 |= u->type == KIR_F32 && u->op != KIR_LOAD;
    f64_acc |= u->type == KIR_F64 && u->reassoc;
  }
  return f32 && f64_acc ? 16 : 0;
}

/* An innermost loop of fewer than SHORT_ROW iterations, not a multiple
 * of 16 (a CNN's rows of 7, 14, 28 or 56 along W): on an AVX-512 host it
 * is vectorised with a masked tail (llvm.loop.vectorize.predicate.enable)
 * and not unrolled first. Without the hints LLVM unrolls a row of 14
 * whole before the vectoriser runs and leaves 14 scalar loads and
 * stores (it cannot prove the buffers apart), a row of 28 runs one
 * vector iteration and a scalar remainder, and a row of 56 read at
 * stride 2 runs 32 elements vectorised (8 lanes, interleaved 4 times)
 * and 24 scalar: ResNet-18's max pooling over [32, 64, 112, 112] took
 * 158 ms, 82 ms with the masked tail (its 2x2 chain kernel on
 * [8, 64, 112, 112]: 17.7 -> 4.8 ms). Past 256 the remainder is a
 * small share of the row. Rows that accumulate a
 * reduction keep LLVM's choice: a masked tail would regroup the sum, and
 * fused and unfused results must stay bitwise equal. Hosts without
 * 512-bit vectors get no masked tail (masked stores are slow on some AVX2
 * CPUs) but interleave count 1, so the scalar remainder is shorter than
 * one vector (the 2x2 chain kernel above under KILN_CPU=haswell: 18.2 ->
 * 11.8 ms), and llvm.loop.vectorize.enable: LLVM's cost model leaves a
 * row of 14 read at stride 2 scalar for want of one full 8-lane
 * iteration and its run-time checks; forced, it runs 4 lanes (fashion_cnn
 * under KILN_CPU=x86-64-v3 on an Intel host: the 2x2 pooling gradient
 * over [128, 32, 28, 28] 4.7-5.7 -> 1.95-1.98 ms with the no-alias
 * metadata of distinct_params). */
#define SHORT_ROW 256

static bool short_row(const kir_kernel *k, int r, int e) {
  int64_t n = k->uops[r].ival;
  if (n >= SHORT_ROW || n % 16 == 0 || n < 4) return false;
  for (int i = r + 1; i < e; i++) /* innermost, and no reduction: a masked tail would regroup its sum */
    if (k->uops[i].op == KIR_RANGE || k->uops[i].reassoc) return false;
  return true;
}

static LLVMMetadataRef loop_hint(llvm_ctx *c, const char *key, unsigned n) {
  LLVMMetadataRef hint[2] = {LLVMMDStringInContext2(c->ctx, key, strlen(key)), LLVMValueAsMetadata(cint(c->i32, n))};
  return LLVMMDNodeInContext2(c->ctx, hint, 2);
}

static LLVMMetadataRef loop_flag(llvm_ctx *c, const char *key) {
  LLVMMetadataRef hint[2] = {LLVMMDStringInContext2(c->ctx, key, strlen(key)),
                             LLVMValueAsMetadata(LLVMConstInt(LLVMInt1TypeInContext(c->ctx), 1, 0))};
  return LLVMMDNodeInContext2(c->ctx, hint, 2);
}

/* How an innermost loop's vector tail runs: as LLVM chooses, masked
 * (predicated), or as a scalar remainder with vectorisation forced. */
typedef enum { TAIL_ANY, TAIL_MASKED, TAIL_FORCED } loop_tail;

/* Attaches !llvm.loop !{self, hints...} to the latch branch: an interleave
 * count and a vector width, each when nonzero, an unroll hint
 * ("llvm.loop.unroll.disable", ".full") when not NULL, and the tail. */
static void set_loop_hints(llvm_ctx *c, LLVMValueRef br, unsigned interleave, unsigned width, const char *unroll,
                           loop_tail tail) {
  if (!interleave && !width && !unroll && tail == TAIL_ANY) return;
  LLVMMetadataRef self = LLVMTemporaryMDNode(c->ctx, NULL, 0);
  LLVMMetadataRef ops[5] = {self};
  unsigned n = 1;
  if (interleave) ops[n++] = loop_hint(c, "llvm.loop.interleave.count", interleave);
  if (width) ops[n++] = loop_hint(c, "llvm.loop.vectorize.width", width);
  if (tail == TAIL_MASKED) ops[n++] = loop_flag(c, "llvm.loop.vectorize.predicate.enable");
  if (tail == TAIL_FORCED) ops[n++] = loop_flag(c, "llvm.loop.vectorize.enable");
  if (unroll) {
    LLVMMetadataRef md = LLVMMDStringInContext2(c->ctx, unroll, strlen(unroll));
    ops[n++] = LLVMMDNodeInContext2(c->ctx, &md, 1);
  }
  LLVMMetadataRef loop = LLVMMDNodeInContext2(c->ctx, ops, n);
  LLVMMetadataReplaceAllUsesWith(self, loop);
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(c->ctx, "llvm.loop", 9), LLVMMetadataAsValue(c->ctx, loop));
}

static LLVMValueRef lower_end(llvm_ctx *c, const kir_uop *u) {
  const loop_info *l = &c->loops[u->src[0]];
  LLVMValueRef next = LLVMBuildNSWAdd(c->b, l->phi, cint(c->i64, 1), "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(c->b);
  LLVMValueRef br = LLVMBuildBr(c->b, l->header);
  int r = u->src[0], e = (int)(u - c->k->uops);
  if (c->k->uops[r].tile) c->skew = -1;
  if (r > 0 && c->k->uops[r - 1].tile) /* a tile's inner loop: vectorised whole, not unrolled first */
    set_loop_hints(c, br, 1, KIR_TILE, "llvm.loop.unroll.disable", TAIL_ANY);
  else if (c->k->uops[r].tile) /* the outer one: unrolled, so the staged block's loads have fixed offsets */
    set_loop_hints(c, br, 0, 0, "llvm.loop.unroll.full", TAIL_ANY);
  else {
    bool short_loop = short_row(c->k, r, e), masked = short_loop && llvm_wide_vectors();
    unsigned interleave = short_loop && !masked ? 1 : interleave_count(c->k, r, e);
    loop_tail tail = !short_loop ? TAIL_ANY : masked ? TAIL_MASKED : TAIL_FORCED;
    set_loop_hints(c, br, interleave, mixed_width(c->k, r, e), masked ? "llvm.loop.unroll.disable" : NULL, tail);
  }
  LLVMAddIncoming(l->phi, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(c->b, l->exit);
  return NULL;
}

static LLVMValueRef lower_acc(llvm_ctx *c, const kir_uop *u) {
  LLVMValueRef slot = LLVMBuildAlloca(c->ab, reg_type(c, u->type), "acc");
  LLVMBuildStore(c->b, val(c, u->src[0]), slot);
  return slot;
}

static LLVMValueRef lower_local(llvm_ctx *c, const kir_uop *u) {
  LLVMTypeRef t = LLVMArrayType2(mem_type(c, u->elem), (uint64_t)u->ival);
  LLVMValueRef slot = LLVMBuildAlloca(c->ab, t, "local");
  LLVMSetAlignment(slot, 64);
  return slot;
}

static LLVMValueRef lower_acc_set(llvm_ctx *c, const kir_uop *u) {
  LLVMBuildStore(c->b, val(c, u->src[1]), c->vals[u->src[0]]);
  return NULL;
}

/* Address of element src[1] of the buffer src[0]; *mt gets its type. */
static LLVMValueRef element_ptr(llvm_ctx *c, const kir_uop *u, LLVMTypeRef *mt) {
  *mt = mem_type(c, c->k->uops[u->src[0]].elem);
  LLVMValueRef idx = val(c, u->src[1]);
  return LLVMBuildInBoundsGEP2(c->b, *mt, val(c, u->src[0]), &idx, 1, "");
}

/* Tags an access to buffer uop `buf` (a PARAM; -1: a staged block) with
 * its scoped no-alias metadata, when the kernel has it (distinct_params).
 * A LOCAL's accesses stay untagged. */
static void tag_access(llvm_ctx *c, LLVMValueRef inst, int buf) {
  int scope = buf < 0 ? c->k->n_params : c->k->uops[buf].op == KIR_PARAM ? (int)c->k->uops[buf].ival : -1;
  if (scope < 0 || !c->scope[scope]) return;
  LLVMSetMetadata(inst, LLVMGetMDKindIDInContext(c->ctx, "alias.scope", 11), c->scope[scope]);
  LLVMSetMetadata(inst, LLVMGetMDKindIDInContext(c->ctx, "noalias", 7), c->noalias[scope]);
}

static LLVMValueRef lower_load(llvm_ctx *c, const kir_uop *u) {
  LLVMTypeRef mt;
  LLVMValueRef p, block = c->staged[u - c->k->uops];
  if (block) { /* a transposed read of a tile */
    mt = mem_type(c, u->type);
    LLVMValueRef skew = c->load_skew >= 0 ? c->vals[c->load_skew] : NULL;
    LLVMValueRef idx = llvm_tile_index(c->b, c->ctx, c->vals[c->tile], c->vals[c->tile + 1], skew);
    p = LLVMBuildInBoundsGEP2(c->b, mt, block, &idx, 1, "");
  } else {
    p = element_ptr(c, u, &mt);
  }
  LLVMValueRef v = LLVMBuildLoad2(c->b, mt, p, "");
  tag_access(c, v, block ? -1 : u->src[0]);
  if (u->type == KIR_BOOL) v = LLVMBuildICmp(c->b, LLVMIntNE, v, cint(c->i8, 0), "");
  return v;
}

/* A nontemporal store of a skewed tile starts an aligned row at tj = 0
 * (kir.h); LLVM cannot prove it from the skew's arithmetic, so its index
 * is written (idx - tj) & -KIR_TILE + tj, the same value, whose
 * alignment LLVM's known bits see. */
static LLVMValueRef skewed_store_ptr(llvm_ctx *c, const kir_uop *u, LLVMTypeRef *mt) {
  *mt = mem_type(c, c->k->uops[u->src[0]].elem);
  LLVMValueRef tj = c->vals[c->tile + 1];
  LLVMValueRef row = LLVMBuildAnd(c->b, LLVMBuildSub(c->b, val(c, u->src[1]), tj, ""), cint(c->i64, (unsigned long long)-KIR_TILE), "");
  LLVMValueRef idx = LLVMBuildAdd(c->b, row, tj, "");
  return LLVMBuildInBoundsGEP2(c->b, *mt, val(c, u->src[0]), &idx, 1, "");
}

static LLVMValueRef lower_store(llvm_ctx *c, const kir_uop *u) {
  LLVMTypeRef mt;
  LLVMValueRef p = u->nontemporal && c->skew >= 0 ? skewed_store_ptr(c, u, &mt) : element_ptr(c, u, &mt);
  LLVMValueRef v = val(c, u->src[2]);
  if (src_type(c, u, 2) == KIR_BOOL) v = LLVMBuildZExt(c->b, v, c->i8, "");
  LLVMValueRef st = LLVMBuildStore(c->b, v, p);
  tag_access(c, st, u->src[0]);
  if (u->nontemporal) llvm_stream_tag_store(st);
  return NULL;
}

static LLVMValueRef lower_cast(llvm_ctx *c, const kir_uop *u) {
  return cast_value(c, val(c, u->src[0]), src_type(c, u, 0), u->type);
}

static LLVMValueRef lower_neg(llvm_ctx *c, const kir_uop *u) {
  LLVMValueRef a = val(c, u->src[0]);
  if (is_fp(u->type)) return LLVMBuildFNeg(c->b, a, "");
  return u->type == KIR_INDEX ? LLVMBuildNSWNeg(c->b, a, "") : LLVMBuildNeg(c->b, a, "");
}

/* ADD SUB MUL AND OR XOR. Index arithmetic never wraps (nsw), which lets
 * LLVM reason about strided addresses; other ints wrap as in Torch. */
static LLVMValueRef lower_arith(llvm_ctx *c, const kir_uop *u) {
  const op_lowering *l = &lowerings[u->op];
  LLVMValueRef a = val(c, u->src[0]), b = val(c, u->src[1]);
  LLVMValueRef r = LLVMBuildBinOp(c->b, is_fp(u->type) ? l->fop : l->iop, a, b, "");
  bool wraps = u->op == KIR_ADD || u->op == KIR_SUB || u->op == KIR_MUL;
  if (u->type == KIR_INDEX && wraps && LLVMIsAInstruction(r)) LLVMSetNSW(r, 1);
  return r;
}

/* Integer DIV/MOD that never traps: the divisor 0 and (signed) -1 are
 * replaced by 1; then ÷0 selects 0 and ÷-1 selects the wrapping -a.
 * a % 1 == 0 is already the right remainder for both. */
static LLVMValueRef lower_divmod(llvm_ctx *c, const kir_uop *u) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef a = val(c, u->src[0]), d = val(c, u->src[1]);
  bool div = u->op == KIR_DIV, uns = is_unsigned(u->type);
  if (is_fp(u->type)) return LLVMBuildBinOp(b, div ? LLVMFDiv : LLVMFRem, a, d, "");
  LLVMTypeRef t = reg_type(c, u->type);
  LLVMValueRef zero = LLVMConstNull(t), one = cint(t, 1);
  LLVMValueRef dzero = LLVMBuildICmp(b, LLVMIntEQ, d, zero, "");
  LLVMValueRef dneg1 = uns ? cint(c->i1, 0) : LLVMBuildICmp(b, LLVMIntEQ, d, LLVMConstAllOnes(t), "");
  LLVMValueRef safe = LLVMBuildSelect(b, LLVMBuildOr(b, dzero, dneg1, ""), one, d, "");
  LLVMOpcode opc = div ? (uns ? LLVMUDiv : LLVMSDiv) : (uns ? LLVMURem : LLVMSRem);
  LLVMValueRef r = LLVMBuildBinOp(b, opc, a, safe, "");
  if (!div) return r;
  if (!uns) r = LLVMBuildSelect(b, dneg1, LLVMBuildNeg(b, a, ""), r, "");
  return LLVMBuildSelect(b, dzero, zero, r, "");
}

/* Floats: llvm.maximum/minimum propagate NaN (and order -0 < +0). */
static LLVMValueRef lower_minmax(llvm_ctx *c, const kir_uop *u) {
  bool max = u->op == KIR_MAX;
  const char *name = is_fp(u->type) ? (max ? "llvm.maximum" : "llvm.minimum")
                     : is_unsigned(u->type) ? (max ? "llvm.umax" : "llvm.umin")
                                            : (max ? "llvm.smax" : "llvm.smin");
  LLVMValueRef args[2] = {val(c, u->src[0]), val(c, u->src[1])};
  return call_intrinsic(c, name, reg_type(c, u->type), args, 2);
}

static LLVMValueRef lower_cmp(llvm_ctx *c, const kir_uop *u) {
  const op_lowering *l = &lowerings[u->op];
  kir_type t = src_type(c, u, 0);
  LLVMValueRef a = val(c, u->src[0]), b = val(c, u->src[1]);
  if (is_fp(t)) return LLVMBuildFCmp(c->b, l->fpred, a, b, "");
  return LLVMBuildICmp(c->b, is_unsigned(t) ? l->upred : l->spred, a, b, "");
}

static LLVMValueRef lower_where(llvm_ctx *c, const kir_uop *u) {
  return LLVMBuildSelect(c->b, val(c, u->src[0]), val(c, u->src[1]), val(c, u->src[2]), "");
}

/* F32 transcendentals are expanded inline (llvm_math.c) so that loops
 * containing them vectorise; F64 and the rest call intrinsics or libm. */
static LLVMValueRef lower_math(llvm_ctx *c, const kir_uop *u) {
  const op_lowering *l = &lowerings[u->op];
  unsigned n = (unsigned)kir_op_arity(u->op);
  LLVMValueRef args[2] = {val(c, u->src[0]), n > 1 ? val(c, u->src[1]) : NULL};
  if (u->type == KIR_F32) {
    LLVMValueRef v = llvm_math_f32(c->b, c->mod, u->op, args[0], args[1], &c->failed);
    if (v) return v;
  }
  if (l->intrinsic) return call_intrinsic(c, l->intrinsic, reg_type(c, u->type), args, n);
  return call_libm(c, l->libm, u->type, args, n);
}

#define ARITH(i, f) {lower_arith, i, f, 0, 0, 0, NULL, NULL}
#define CMP(s, u, f) {lower_cmp, 0, 0, s, u, f, NULL, NULL}
#define INTRIN(name) {lower_math, 0, 0, 0, 0, 0, name, NULL}
#define LIBM(name) {lower_math, 0, 0, 0, 0, 0, NULL, name}

static const op_lowering lowerings[KIR_OP_COUNT] = {
    [KIR_PARAM] = {.fn = lower_param},
    [KIR_LOCAL] = {.fn = lower_local},
    [KIR_CONST] = {.fn = lower_const},
    [KIR_RANGE] = {.fn = lower_range},
    [KIR_END] = {.fn = lower_end},
    [KIR_ACC] = {.fn = lower_acc},
    [KIR_ACC_SET] = {.fn = lower_acc_set},
    [KIR_LOAD] = {.fn = lower_load},
    [KIR_STORE] = {.fn = lower_store},
    [KIR_CAST] = {.fn = lower_cast},
    [KIR_NEG] = {.fn = lower_neg},
    [KIR_ADD] = ARITH(LLVMAdd, LLVMFAdd),
    [KIR_SUB] = ARITH(LLVMSub, LLVMFSub),
    [KIR_MUL] = ARITH(LLVMMul, LLVMFMul),
    [KIR_DIV] = {.fn = lower_divmod},
    [KIR_MOD] = {.fn = lower_divmod},
    [KIR_MAX] = {.fn = lower_minmax},
    [KIR_MIN] = {.fn = lower_minmax},
    [KIR_CMPLT] = CMP(LLVMIntSLT, LLVMIntULT, LLVMRealOLT),
    [KIR_CMPLE] = CMP(LLVMIntSLE, LLVMIntULE, LLVMRealOLE),
    [KIR_CMPEQ] = CMP(LLVMIntEQ, LLVMIntEQ, LLVMRealOEQ),
    [KIR_CMPNE] = CMP(LLVMIntNE, LLVMIntNE, LLVMRealUNE),
    [KIR_AND] = ARITH(LLVMAnd, LLVMAnd),
    [KIR_OR] = ARITH(LLVMOr, LLVMOr),
    [KIR_XOR] = ARITH(LLVMXor, LLVMXor),
    [KIR_WHERE] = {.fn = lower_where},
    [KIR_SQRT] = INTRIN("llvm.sqrt"),
    [KIR_EXP] = INTRIN("llvm.exp"),
    [KIR_EXP2] = INTRIN("llvm.exp2"),
    [KIR_LOG] = INTRIN("llvm.log"),
    [KIR_LOG2] = INTRIN("llvm.log2"),
    [KIR_LOG1P] = LIBM("log1p"),
    [KIR_EXPM1] = LIBM("expm1"),
    [KIR_SIN] = INTRIN("llvm.sin"),
    [KIR_COS] = INTRIN("llvm.cos"),
    [KIR_TAN] = LIBM("tan"),
    [KIR_TANH] = LIBM("tanh"),
    [KIR_ERF] = LIBM("erf"),
    [KIR_FLOOR] = INTRIN("llvm.floor"),
    [KIR_CEIL] = INTRIN("llvm.ceil"),
    [KIR_RINT] = INTRIN("llvm.roundeven"),
    [KIR_TRUNC] = INTRIN("llvm.trunc"),
    [KIR_POW] = INTRIN("llvm.pow"),
    [KIR_ATAN2] = LIBM("atan2"),
};
_Static_assert(KIR_OP_COUNT == 44, "lowerings must list every kir_op");

/* ------------------------------------------------------------- function */

static void init_types(llvm_ctx *c) {
  LLVMContextRef x = c->ctx;
  c->i1 = LLVMInt1TypeInContext(x);
  c->i8 = LLVMInt8TypeInContext(x);
  c->i16 = LLVMInt16TypeInContext(x);
  c->i32 = LLVMInt32TypeInContext(x);
  c->i64 = LLVMInt64TypeInContext(x);
  c->f16 = LLVMHalfTypeInContext(x);
  c->f32 = LLVMFloatTypeInContext(x);
  c->f64 = LLVMDoubleTypeInContext(x);
  c->ptr = LLVMPointerTypeInContext(x, 0);
}

/* Which buffers nontemporal stores write (kir.h: they are 64-byte aligned). */
static void find_streams(llvm_ctx *c) {
  for (int i = 0; i < c->k->n_uops; i++) {
    const kir_uop *u = &c->k->uops[i];
    if (u->op != KIR_STORE || !u->nontemporal) continue;
    c->streaming = true;
    c->stream_param[c->k->uops[u->src[0]].ival] = true;
  }
}

/* A kernel whose written PARAMs are all fresh (kir_outputs_fresh), or
 * that has a skewed tile (kir_tile_skew: tiles are never lowered for
 * in-place writes), writes only buffers that no other of its PARAMs
 * points into. LLVM cannot know it (the buffers are loaded from %bufs),
 * nor that a staged block (a stack array) is none of them: it versions
 * loops on run-time overlap checks, which on a short row cost more than
 * the row (a 3x3 convolution's col2im, a 2x2 pooling gradient), and
 * versions each row of a tile with a scalar copy that keeps the staged
 * block on the stack. Each PARAM gets an alias scope of its own, and the
 * staged blocks one more (index n_params); every access is in its scope
 * and no-alias with all the others. */
static void distinct_params(llvm_ctx *c) {
  const kir_kernel *k = c->k;
  bool skewed = false;
  for (int i = 0; i < k->n_uops && !skewed; i++) skewed = k->uops[i].skew;
  int n = k->n_params + 1;
  if ((!skewed && !kir_outputs_fresh(k)) || n > KIR_MAX_PARAMS + 1) return;
  LLVMMetadataRef domain_name = LLVMMDStringInContext2(c->ctx, "kiln.buffers", 12);
  LLVMMetadataRef domain = LLVMMDNodeInContext2(c->ctx, &domain_name, 1);
  LLVMMetadataRef scopes[KIR_MAX_PARAMS + 1], others[KIR_MAX_PARAMS + 1];
  for (int p = 0; p < n; p++) {
    char name[24];
    int len = p < k->n_params ? snprintf(name, sizeof name, "kiln.param%d", p) : snprintf(name, sizeof name, "kiln.staged");
    LLVMMetadataRef md[2] = {LLVMMDStringInContext2(c->ctx, name, (size_t)len), domain};
    scopes[p] = LLVMMDNodeInContext2(c->ctx, md, 2);
  }
  for (int p = 0; p < n; p++) {
    int m = 0;
    for (int q = 0; q < n; q++)
      if (q != p) others[m++] = scopes[q];
    c->scope[p] = LLVMMetadataAsValue(c->ctx, LLVMMDNodeInContext2(c->ctx, &scopes[p], 1));
    c->noalias[p] = LLVMMetadataAsValue(c->ctx, LLVMMDNodeInContext2(c->ctx, others, (size_t)m));
  }
}

/* Declares the kernel, its entry block (allocas) and first code block. */
static LLVMValueRef begin_function(llvm_ctx *c, const char *fname) {
  LLVMTypeRef params[3] = {c->ptr, c->i64, c->i64};
  LLVMTypeRef fty = LLVMFunctionType(LLVMVoidTypeInContext(c->ctx), params, 3, 0);
  LLVMValueRef fn = LLVMAddFunction(c->mod, fname, fty);
  add_attr(c, fn, LLVMAttributeFunctionIndex, "nounwind");
  add_attr(c, fn, 1, "noalias"); /* bufs: no kernel store writes it */
  add_attr(c, fn, 1, "nocapture");
  add_attr(c, fn, 1, "readonly");
  c->bufs = LLVMGetParam(fn, 0);
  c->start = LLVMGetParam(fn, 1);
  c->end = LLVMGetParam(fn, 2);
  LLVMSetValueName2(c->bufs, "bufs", 4);
  LLVMSetValueName2(c->start, "start", 5);
  LLVMSetValueName2(c->end, "end", 3);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c->ctx, fn, "entry");
  LLVMBasicBlockRef code = LLVMAppendBasicBlockInContext(c->ctx, fn, "code");
  LLVMPositionBuilderAtEnd(c->b, entry);
  LLVMPositionBuilderBefore(c->ab, LLVMBuildBr(c->b, code));
  LLVMPositionBuilderAtEnd(c->b, code);
  return fn;
}

LLVMValueRef llvm_lower_kernel(const kir_kernel *k, LLVMModuleRef mod, const char *fname, char *err,
                               size_t errlen) {
  llvm_ctx c = {.k = k, .mod = mod, .ctx = LLVMGetModuleContext(mod), .skew = -1};
  size_t n = (size_t)k->n_uops + 1;
  c.vals = calloc(n, sizeof *c.vals);
  c.loops = calloc(n, sizeof *c.loops);
  c.staged = calloc(n, sizeof *c.staged);
  if (!c.vals || !c.loops || !c.staged) {
    free(c.vals);
    free(c.loops);
    free(c.staged);
    snprintf(err, errlen, "out of memory lowering %s", k->name);
    return NULL;
  }
  init_types(&c);
  find_streams(&c);
  distinct_params(&c);
  c.b = LLVMCreateBuilderInContext(c.ctx);
  c.ab = LLVMCreateBuilderInContext(c.ctx);
  LLVMValueRef fn = begin_function(&c, fname);
  for (int i = 0; i < k->n_uops; i++) {
    c.vals[i] = lowerings[k->uops[i].op].fn(&c, &k->uops[i]);
    if (k->uops[i].reassoc && c.vals[i] && LLVMCanValueUseFastMathFlags(c.vals[i]))
      LLVMSetFastMathFlags(c.vals[i], LLVMFastMathAllowReassoc);
  }
  /* streaming stores are weakly ordered: drain them before the pool
   * reports the chunk done (seq_cst is MFENCE on x86) */
  if (c.streaming) LLVMBuildFence(c.b, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
  LLVMBuildRetVoid(c.b);
  LLVMDisposeBuilder(c.b);
  LLVMDisposeBuilder(c.ab);
  free(c.vals);
  free(c.loops);
  free(c.staged);
  if (c.failed) {
    snprintf(err, errlen, "lowering %s: an LLVM intrinsic is missing", k->name);
    return NULL;
  }
  return fn;
}
