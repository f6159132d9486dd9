/*
 * llvm_gemm.c — the GEMM micro-kernel, emitted as LLVM IR with explicit
 * vector types and compiled through the kernels' JIT path
 * (llvm_compile_module). The BLIS scheme (Van Zee & van de Geijn, "BLIS:
 * A Framework for Rapidly Instantiating BLAS Functionality", TOMS 2015):
 * the runtime's driver (runtime/gemm.c) packs A into panels of MR rows
 * and B into panels of NR columns and calls this kernel for each MR×NR
 * tile of C with one KC-long pair of panels.
 *
 * The kernel keeps the tile in MR·nv vector accumulators (<vl x T>, nv
 * vectors per row, NR = nv·vl) across the k loop; per k it loads the nv
 * vectors of B's panel row (aligned: the panel is), broadcasts each of
 * the MR elements of A's panel column, and does MR·nv llvm.fma. After
 * the loop it adds C's old value when the call accumulates (a later KC
 * block, beta 1), applies the fused epilogue on the last KC block
 * (the spec's steps, llvm_gemm_epi_step: bias along N or M, residual,
 * scale, relu, their operands read from the call's llvm_gemm_epi_args
 * into vectors beside the accumulators; emit_epilogue) and stores the
 * tile with unaligned vector stores at row stride ldc, or with aligned
 * nontemporal ones when the call says LLVM_GEMM_STREAM.
 *
 * MR and nv come from the target's vector registers (choose_shape): the
 * accumulators, nv B vectors and one broadcast must fit, so with 32
 * registers (AVX-512) nv = 2 and MR = 14 (28 accumulators), with 16
 * (AVX2, SSE) nv = 2 and MR = 6. The register query is one function
 * (target_vectors), so a pinned target ISA (KILN_CPU) can replace the
 * host's.
 *
 * Compiled variants are cached by their spec (dtype, vl, MR, nv, fma,
 * epilogue steps) for the life of the JIT: each is compiled once per process,
 * under `lock` (a compile takes tens of ms, once).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "llvm_backend.h"
#include "llvm_internal.h"

/* ------------------------------------------------- the target's shape */

static struct {
  int bits, regs, mr, nv; /* llvm_gemm_override's; 0: the host's or the rule's */
} forced;

void llvm_gemm_override(int bits, int regs, int mr, int nv) {
  forced.bits = bits > 0 ? bits : 0;
  forced.regs = regs > 0 ? regs : 0;
  forced.mr = mr > 0 ? mr : 0;
  forced.nv = nv > 0 ? nv : 0;
}

/* The vector registers the micro-kernel is shaped for: the JIT's target
 * (llvm_target.c: the host, or the CPU KILN_CPU pins), or the test
 * override. *fma: llvm.fma where the host's features say FMA (or not x86:
 * AArch64 always fuses); a pinned CPU gets llvm.fmuladd, which LLVM fuses
 * where that CPU has FMA. */
static int target_vectors(int *bits, int *regs, bool *fma, char *err, size_t errlen) {
  const llvm_target_info *t = llvm_target();
  if (!t->ok) {
    snprintf(err, errlen, "%s", t->err);
    return KILN_ERR_COMPILE;
  }
  *bits = t->vector_bits;
  *regs = t->vector_regs;
  bool x86 = strncmp(t->triple, "x86_64", 6) == 0 || strncmp(t->triple, "i686", 4) == 0;
  *fma = !t->pinned && (!x86 || strstr(t->features, "+fma") != NULL);
  if (forced.bits) *bits = forced.bits < *bits ? forced.bits : *bits; /* never wider than the target runs */
  if (forced.regs) *regs = forced.regs;
  return KILN_OK;
}

/* MR and nv for `regs` vector registers: MR·nv accumulators + nv B
 * vectors + 1 broadcast ≤ regs, nv = 2 (two B loads per MR broadcasts:
 * 14×2 on 32 registers, 6×2 on 16). */
static void choose_shape(int regs, int vl, int *mr, int *nv) {
  *nv = forced.nv ? forced.nv : 2;
  if (*nv * vl > LLVM_GEMM_MAX_NR) *nv = LLVM_GEMM_MAX_NR / vl > 0 ? LLVM_GEMM_MAX_NR / vl : 1;
  int m = (regs - *nv - 1) / *nv;
  *mr = forced.mr ? forced.mr : m < 1 ? 1 : m;
  if (*mr > LLVM_GEMM_MAX_MR) *mr = LLVM_GEMM_MAX_MR;
}

/* MR where a CPU measured a shorter tile faster than the register rule's
 * (the target's name: the host's, or KILN_CPU's; not under an override
 * of the width or registers, which asks for the rule). Zen 4 runs its
 * 512-bit FMAs on two 256-bit pipes: 8 × NR beat 14 × NR there by 3–5 %
 * (bench/gemm_tune --mr 8|14 --nv 2, alternated runs: 2048³ F32 209–211
 * → 221–222 GFLOP/s on 2 threads, 106–107 → 112 on one; F64 104–106 →
 * 108–109). Zen 5 (two full 512-bit FMA pipes) too: 2048³ F32 in
 * three alternated pairs 342 → 387, 374 → 357 and 350 → 375 GFLOP/s on
 * 2 threads, 176 → 193, 197 → 204 and 196 → 207 on one; 1000³ on one
 * and F64 2048³ on two within the noise, 191–202 and 165–192 either
 * way. */
static const struct {
  const char *cpu;
  int bits, regs, mr;
} measured[] = {{"znver4", 512, 32, 8}, {"znver5", 512, 32, 8}};

static int measured_mr(int bits, int regs, int mr) {
  const llvm_target_info *t = llvm_target();
  if (forced.bits || forced.regs || !t->ok || !t->cpu) return mr;
  for (size_t i = 0; i < sizeof measured / sizeof *measured; i++)
    if (!strcmp(t->cpu, measured[i].cpu) && bits == measured[i].bits && regs == measured[i].regs)
      return measured[i].mr;
  return mr;
}

/* The spec for dtype; *rule_mr: the register rule's MR (the longest
 * tile the registers hold), before the measured table. */
static int choose(kiln_dtype dtype, llvm_gemm_spec *out, int *rule_mr, char *err, size_t errlen) {
  if (dtype != KILN_F32 && dtype != KILN_F64) {
    snprintf(err, errlen, "llvm_gemm_choose: dtype %d is not F32 or F64", (int)dtype);
    return KILN_ERR_ARG;
  }
  int bits = 0, regs = 0;
  bool fma = false;
  int st = target_vectors(&bits, &regs, &fma, err, errlen);
  if (st != KILN_OK) return st;
  int esz = dtype == KILN_F64 ? 8 : 4, vl = bits / 8 / esz;
  *out = (llvm_gemm_spec){.dtype = dtype, .vl = vl < 1 ? 1 : vl, .fma = fma, .n_epi = 0};
  choose_shape(regs, out->vl, &out->mr, &out->nv);
  out->nr = out->nv * out->vl;
  *rule_mr = out->mr;
  if (!forced.mr && !forced.nv) out->mr = measured_mr(bits, regs, out->mr);
  return KILN_OK;
}

int llvm_gemm_choose(kiln_dtype dtype, llvm_gemm_spec *out, char *err, size_t errlen) {
  int rule_mr;
  return choose(dtype, out, &rule_mr, err, errlen);
}

/* MR for a product of m rows: the target's MR (mr, the rule's or the
 * measured one) unless another tile wastes less of the last row tile.
 * Candidates are the tiles from the rule's (rule_mr, the longest the
 * registers hold) down to at least 16 accumulators (MR·nv: enough
 * independent FMA chains for two pipes of latency 4 to 8), so a
 * 16-register target keeps its 6×2; of them the one padding m to the
 * fewest rows, the longer on a tie, replaces mr when that saves more
 * than 2 % of mr's rows. fashion_cnn's conv2 (M = 64) and the MLP's
 * products (M = 128) run 8×32 instead of 14×32 (70 and 140 rows: 9 %
 * padding); on a Zen 4 host, 64×25088×288 went from 151–153 to 164–166
 * GFLOP/s and 128×256×784 from 189 to 213 (bench/gemm_tune --mr, 2
 * threads, two alternated runs). */
static int rows_mr(int mr, int rule_mr, int nv, int64_t m) {
  int lo = (16 + nv - 1) / nv, best = mr;
  int64_t base_rows = (m + mr - 1) / mr * mr, best_rows = base_rows;
  for (int c = rule_mr; c >= lo; c--) {
    int64_t rows = (m + c - 1) / c * c;
    if (rows < best_rows) best = c, best_rows = rows;
  }
  return 50 * (base_rows - best_rows) > base_rows ? best : mr;
}

int llvm_gemm_choose_rows(kiln_dtype dtype, int64_t m, llvm_gemm_spec *out, char *err, size_t errlen) {
  int rule_mr;
  int st = choose(dtype, out, &rule_mr, err, errlen);
  if (st == KILN_OK && !forced.mr && m > 0) out->mr = rows_mr(out->mr, rule_mr, out->nv, m);
  return st;
}

/* -------------------------------------------------------- the emitter */

/* What the emitter of one kernel works with. */
typedef struct gemm_emit {
  const llvm_gemm_spec *s;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTypeRef et, vt, i64, ptr, fma_ty;
  LLVMValueRef fma_fn;
  LLVMValueRef *acc; /* [mr·nv] allocas of vt, promoted to registers by the O2 pipeline */
  int esz;
} gemm_emit;

static LLVMValueRef i64c(const gemm_emit *e, int64_t v) { return LLVMConstInt(e->i64, (unsigned long long)v, 1); }

static LLVMValueRef elem_ptr(const gemm_emit *e, LLVMValueRef base, LLVMValueRef idx) {
  return LLVMBuildGEP2(e->b, e->et, base, &idx, 1, "");
}

static LLVMValueRef load_vec(const gemm_emit *e, LLVMValueRef p, unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(e->b, e->vt, p, "");
  LLVMSetAlignment(v, align);
  return v;
}

static LLVMValueRef store_vec(const gemm_emit *e, LLVMValueRef v, LLVMValueRef p, unsigned align) {
  LLVMValueRef st = LLVMBuildStore(e->b, v, p);
  LLVMSetAlignment(st, align);
  return st;
}

/* x broadcast to all vl lanes. */
static LLVMValueRef splat(const gemm_emit *e, LLVMValueRef x) {
  LLVMValueRef ins = LLVMBuildInsertElement(e->b, LLVMGetUndef(e->vt), x, i64c(e, 0), "");
  LLVMValueRef mask = LLVMConstNull(LLVMVectorType(LLVMInt32TypeInContext(e->ctx), (unsigned)e->s->vl));
  return LLVMBuildShuffleVector(e->b, ins, LLVMGetUndef(e->vt), mask, "");
}

/* One k step: acc[i][j] += a[k·MR + i] · b[k·NR + j·vl ..]. */
static void emit_k_step(gemm_emit *e, LLVMValueRef a, LLVMValueRef bp, LLVMValueRef k) {
  const llvm_gemm_spec *s = e->s;
  LLVMValueRef bv[LLVM_GEMM_MAX_NR];
  LLVMValueRef boff = LLVMBuildMul(e->b, k, i64c(e, s->nr), ""), aoff = LLVMBuildMul(e->b, k, i64c(e, s->mr), "");
  for (int j = 0; j < s->nv; j++)
    bv[j] = load_vec(e, elem_ptr(e, bp, LLVMBuildAdd(e->b, boff, i64c(e, (int64_t)j * s->vl), "")),
                     (unsigned)(s->vl * e->esz));
  for (int i = 0; i < s->mr; i++) {
    LLVMValueRef ai = LLVMBuildLoad2(e->b, e->et, elem_ptr(e, a, LLVMBuildAdd(e->b, aoff, i64c(e, i), "")), "");
    LLVMSetAlignment(ai, (unsigned)e->esz);
    LLVMValueRef av = splat(e, ai);
    for (int j = 0; j < s->nv; j++) {
      LLVMValueRef slot = e->acc[i * s->nv + j];
      LLVMValueRef args[3] = {av, bv[j], LLVMBuildLoad2(e->b, e->vt, slot, "")};
      LLVMBuildStore(e->b, LLVMBuildCall2(e->b, e->fma_ty, e->fma_fn, args, 3, ""), slot);
    }
  }
}

/* Address of C's vector (i, j): c + i·ldc + j·vl. */
static LLVMValueRef c_vec(const gemm_emit *e, LLVMValueRef c, LLVMValueRef ldc, int i, int j) {
  LLVMValueRef off = LLVMBuildAdd(e->b, LLVMBuildMul(e->b, ldc, i64c(e, i), ""), i64c(e, (int64_t)j * e->s->vl), "");
  return elem_ptr(e, c, off);
}

/* Stores the tile: unaligned plain stores, or (stream) nontemporal
 * stores at the vector's alignment (x86's MOVNTPS and kin need it). */
static void store_tile(gemm_emit *e, LLVMValueRef c, LLVMValueRef ldc, bool stream) {
  const llvm_gemm_spec *s = e->s;
  unsigned nt = LLVMGetMDKindIDInContext(e->ctx, "nontemporal", 11);
  LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(LLVMInt32TypeInContext(e->ctx), 1, 0));
  LLVMValueRef nt_node = LLVMMetadataAsValue(e->ctx, LLVMMDNodeInContext2(e->ctx, &one, 1));
  unsigned align = stream ? (unsigned)(s->vl * e->esz) : (unsigned)e->esz;
  for (int i = 0; i < s->mr; i++)
    for (int j = 0; j < s->nv; j++) {
      LLVMValueRef st = store_vec(e, LLVMBuildLoad2(e->b, e->vt, e->acc[i * s->nv + j], ""), c_vec(e, c, ldc, i, j), align);
      if (stream) LLVMSetMetadata(st, nt, nt_node);
    }
}

/* Loads field `slot` (8 bytes each: ptr[LLVM_GEMM_EPI_MAX], then ld[])
 * of the llvm_gemm_epi_args at ep, as type ty. */
static LLVMValueRef epi_field(const gemm_emit *e, LLVMValueRef ep, int slot, LLVMTypeRef ty) {
  LLVMValueRef idx = i64c(e, slot);
  LLVMValueRef p = LLVMBuildGEP2(e->b, e->i64, ep, &idx, 1, "");
  LLVMValueRef v = LLVMBuildLoad2(e->b, ty, p, "");
  LLVMSetAlignment(v, 8);
  return v;
}

/* acc op x for one epilogue step (x: a vector, NULL for RELU). */
static LLVMValueRef epi_apply(const gemm_emit *e, int op, LLVMValueRef acc, LLVMValueRef x) {
  switch (op) {
  case LLVM_GEMM_EPI_ADD: return LLVMBuildFAdd(e->b, acc, x, "");
  case LLVM_GEMM_EPI_SUB: return LLVMBuildFSub(e->b, acc, x, "");
  case LLVM_GEMM_EPI_RSUB: return LLVMBuildFSub(e->b, x, acc, "");
  case LLVM_GEMM_EPI_MUL: return LLVMBuildFMul(e->b, acc, x, "");
  case LLVM_GEMM_EPI_DIV: return LLVMBuildFDiv(e->b, acc, x, "");
  case LLVM_GEMM_EPI_RDIV: return LLVMBuildFDiv(e->b, x, acc, "");
  default: { /* RELU, MAX, MIN: llvm.maximum / minimum, as the kernels lower them (NaN propagates) */
    const char *name = op == LLVM_GEMM_EPI_MINIMUM ? "llvm.minimum" : "llvm.maximum";
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMTypeRef vt = e->vt;
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(e->mod, id, &vt, 1);
    LLVMValueRef args[2] = {acc, op == LLVM_GEMM_EPI_RELU ? LLVMConstNull(e->vt) : x};
    return LLVMBuildCall2(e->b, LLVMIntrinsicGetType(e->ctx, id, &vt, 1), fn, args, 2, "");
  }
  }
}

/* The operand of step s for accumulator (i, j), given its tile address
 * base and stride ld: a row vector, a broadcast column element, a tile
 * vector or the broadcast scalar (llvm_gemm_epi_arg). */
static LLVMValueRef epi_operand(const gemm_emit *e, int arg, LLVMValueRef base, LLVMValueRef ld, int i, int j) {
  const unsigned al = (unsigned)e->esz;
  LLVMValueRef off;
  switch (arg) {
  case LLVM_GEMM_ARG_ROW: return load_vec(e, elem_ptr(e, base, i64c(e, (int64_t)j * e->s->vl)), al);
  case LLVM_GEMM_ARG_TILE:
    off = LLVMBuildAdd(e->b, LLVMBuildMul(e->b, ld, i64c(e, i), ""), i64c(e, (int64_t)j * e->s->vl), "");
    return load_vec(e, elem_ptr(e, base, off), al);
  case LLVM_GEMM_ARG_COL: off = LLVMBuildMul(e->b, ld, i64c(e, i), ""); break;
  default: off = i64c(e, 0); break; /* SCALAR */
  }
  LLVMValueRef x = LLVMBuildLoad2(e->b, e->et, elem_ptr(e, base, off), "");
  LLVMSetAlignment(x, al);
  return splat(e, x);
}

/* The fused epilogue (llvm_gemm_epi_step): each step applied to every
 * accumulator, C's old value already added, before the last KC block's
 * store (the caller branches on LLVM_GEMM_LAST). Operands the same for
 * a whole row or column are loaded once per row or column; LLVM's
 * scheduler interleaves the steps' loads with the arithmetic. */
static void emit_epilogue(gemm_emit *e, LLVMValueRef ep) {
  const llvm_gemm_spec *s = e->s;
  for (int st = 0; st < s->n_epi; st++) {
    int op = s->epi[st].op, arg = s->epi[st].arg;
    LLVMValueRef base = NULL, ld = NULL;
    if (arg != LLVM_GEMM_ARG_NONE) {
      base = epi_field(e, ep, st, e->ptr);
      ld = epi_field(e, ep, LLVM_GEMM_EPI_MAX + st, e->i64);
    }
    LLVMValueRef scalar = arg == LLVM_GEMM_ARG_SCALAR ? epi_operand(e, arg, base, ld, 0, 0) : NULL;
    LLVMValueRef row[LLVM_GEMM_MAX_NR];
    for (int j = 0; j < s->nv && arg == LLVM_GEMM_ARG_ROW; j++) row[j] = epi_operand(e, arg, base, ld, 0, j);
    for (int i = 0; i < s->mr; i++) {
      LLVMValueRef col = arg == LLVM_GEMM_ARG_COL ? epi_operand(e, arg, base, ld, i, 0) : NULL;
      for (int j = 0; j < s->nv; j++) {
        LLVMValueRef x = arg == LLVM_GEMM_ARG_ROW ? row[j] : arg == LLVM_GEMM_ARG_COL ? col
                         : arg == LLVM_GEMM_ARG_TILE ? epi_operand(e, arg, base, ld, i, j) : scalar;
        LLVMValueRef slot = e->acc[i * s->nv + j];
        LLVMBuildStore(e->b, epi_apply(e, op, LLVMBuildLoad2(e->b, e->vt, slot, ""), x), slot);
      }
    }
  }
}

/* Prefetches the tile of C (each row's first and last element: a row
 * spans at most three lines) for writing, before the k loop: C is first
 * touched after it, a KC-long loop later. */
static void emit_prefetch_c(gemm_emit *e, LLVMValueRef c, LLVMValueRef ldc) {
  unsigned id = LLVMLookupIntrinsicID("llvm.prefetch", 13);
  LLVMTypeRef ptr = e->ptr;
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(e->mod, id, &ptr, 1);
  LLVMTypeRef ty = LLVMIntrinsicGetType(e->ctx, id, &ptr, 1);
  LLVMTypeRef i32 = LLVMInt32TypeInContext(e->ctx);
  for (int i = 0; i < e->s->mr; i++)
    for (int end = 0; end < 2; end++) {
      LLVMValueRef off = LLVMBuildAdd(e->b, LLVMBuildMul(e->b, ldc, i64c(e, i), ""), i64c(e, end ? e->s->nr - 1 : 0), "");
      LLVMValueRef args[4] = {elem_ptr(e, c, off), LLVMConstInt(i32, 1, 0), LLVMConstInt(i32, 3, 0),
                              LLVMConstInt(i32, 1, 0)}; /* write, keep in all levels, data */
      LLVMBuildCall2(e->b, ty, fn, args, 4, "");
    }
}

/* The kernel's body after its entry block: the k loop, then beta, the
 * epilogue and the stores (file comment). */
static void emit_body(gemm_emit *e, LLVMValueRef fn) {
  const llvm_gemm_spec *s = e->s;
  LLVMValueRef kc = LLVMGetParam(fn, 0), a = LLVMGetParam(fn, 1), bp = LLVMGetParam(fn, 2);
  LLVMValueRef c = LLVMGetParam(fn, 3), ldc = LLVMGetParam(fn, 4), flags = LLVMGetParam(fn, 5);
  LLVMValueRef ep = LLVMGetParam(fn, 6);
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(e->ctx, fn, "k_loop");
  LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(e->ctx, fn, "after");
  LLVMBasicBlockRef accum = LLVMAppendBasicBlockInContext(e->ctx, fn, "beta");
  LLVMBasicBlockRef store = LLVMAppendBasicBlockInContext(e->ctx, fn, "store");
  LLVMBasicBlockRef prefetch = LLVMAppendBasicBlockInContext(e->ctx, fn, "prefetch_c");
  LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(e->ctx, fn, "start");
  LLVMValueRef stream = LLVMBuildICmp(e->b, LLVMIntNE, LLVMBuildAnd(e->b, flags, i64c(e, LLVM_GEMM_STREAM), ""),
                                      i64c(e, 0), "stream");
  LLVMBuildCondBr(e->b, stream, start, prefetch);
  LLVMPositionBuilderAtEnd(e->b, prefetch);
  emit_prefetch_c(e, c, ldc);
  LLVMBuildBr(e->b, start);
  LLVMPositionBuilderAtEnd(e->b, start);
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSGT, kc, i64c(e, 0), ""), loop, after);

  LLVMPositionBuilderAtEnd(e->b, loop);
  LLVMValueRef k = LLVMBuildPhi(e->b, e->i64, "k");
  emit_k_step(e, a, bp, k);
  LLVMValueRef k1 = LLVMBuildAdd(e->b, k, i64c(e, 1), "");
  LLVMValueRef in_vals[2] = {i64c(e, 0), k1};
  LLVMBasicBlockRef in_blocks[2] = {start, LLVMGetInsertBlock(e->b)};
  LLVMAddIncoming(k, in_vals, in_blocks, 2);
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, k1, kc, ""), loop, after);

  LLVMPositionBuilderAtEnd(e->b, after);
  LLVMValueRef beta = LLVMBuildAnd(e->b, flags, i64c(e, LLVM_GEMM_ACCUMULATE), "");
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntNE, beta, i64c(e, 0), ""), accum, store);

  LLVMPositionBuilderAtEnd(e->b, accum);
  for (int i = 0; i < s->mr; i++)
    for (int j = 0; j < s->nv; j++) {
      LLVMValueRef slot = e->acc[i * s->nv + j], old = load_vec(e, c_vec(e, c, ldc, i, j), (unsigned)e->esz);
      LLVMBuildStore(e->b, LLVMBuildFAdd(e->b, LLVMBuildLoad2(e->b, e->vt, slot, ""), old, ""), slot);
    }
  LLVMBuildBr(e->b, store);

  LLVMPositionBuilderAtEnd(e->b, store);
  if (s->n_epi > 0) { /* the epilogue on the last KC block only */
    LLVMBasicBlockRef epi = LLVMAppendBasicBlockInContext(e->ctx, fn, "epilogue");
    LLVMBasicBlockRef write = LLVMAppendBasicBlockInContext(e->ctx, fn, "write");
    LLVMValueRef last = LLVMBuildAnd(e->b, flags, i64c(e, LLVM_GEMM_LAST), "");
    LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntNE, last, i64c(e, 0), ""), epi, write);
    LLVMPositionBuilderAtEnd(e->b, epi);
    emit_epilogue(e, ep);
    LLVMBuildBr(e->b, write);
    LLVMPositionBuilderAtEnd(e->b, write);
  }
  LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(e->ctx, fn, "plain_store");
  LLVMBasicBlockRef streamed = LLVMAppendBasicBlockInContext(e->ctx, fn, "stream_store");
  LLVMBuildCondBr(e->b, stream, streamed, plain);
  LLVMPositionBuilderAtEnd(e->b, plain);
  store_tile(e, c, ldc, false);
  LLVMBuildRetVoid(e->b);
  LLVMPositionBuilderAtEnd(e->b, streamed);
  store_tile(e, c, ldc, true);
  LLVMBuildRetVoid(e->b);
}

/* Marks parameter i of fn noalias (the panels and C never overlap). */
static void set_noalias(LLVMContextRef ctx, LLVMValueRef fn, unsigned i) {
  unsigned kind = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAddAttributeAtIndex(fn, i + 1, LLVMCreateEnumAttribute(ctx, kind, 0));
}

/* llvm_module_fill: void @sym(i64 kc, ptr a, ptr b, ptr c, i64 ldc, i64 flags, ptr ep). */
static bool fill_gemm(LLVMModuleRef mod, const char *sym, void *ctx_spec, char *err, size_t errlen) {
  const llvm_gemm_spec *s = ctx_spec;
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  gemm_emit e = {.s = s, .ctx = ctx, .mod = mod, .esz = s->dtype == KILN_F64 ? 8 : 4};
  e.et = s->dtype == KILN_F64 ? LLVMDoubleTypeInContext(ctx) : LLVMFloatTypeInContext(ctx);
  e.vt = LLVMVectorType(e.et, (unsigned)s->vl);
  e.i64 = LLVMInt64TypeInContext(ctx);
  e.ptr = LLVMPointerTypeInContext(ctx, 0);
  const char *iname = s->fma ? "llvm.fma" : "llvm.fmuladd";
  unsigned id = LLVMLookupIntrinsicID(iname, strlen(iname));
  e.fma_fn = id ? LLVMGetIntrinsicDeclaration(mod, id, &e.vt, 1) : NULL;
  if (!e.fma_fn) {
    snprintf(err, errlen, "cannot declare %s", iname);
    return false;
  }
  e.fma_ty = LLVMIntrinsicGetType(ctx, id, &e.vt, 1);
  LLVMTypeRef params[7] = {e.i64, e.ptr, e.ptr, e.ptr, e.i64, e.i64, e.ptr};
  LLVMValueRef fn = LLVMAddFunction(mod, sym, LLVMFunctionType(LLVMVoidTypeInContext(ctx), params, 7, 0));
  for (unsigned i = 1; i <= 3; i++) set_noalias(ctx, fn, i);
  e.b = LLVMCreateBuilderInContext(ctx);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(ctx, fn, "entry");
  LLVMPositionBuilderAtEnd(e.b, entry);
  LLVMValueRef acc[LLVM_GEMM_MAX_MR * LLVM_GEMM_MAX_NR];
  e.acc = acc;
  for (int i = 0; i < s->mr * s->nv; i++) {
    acc[i] = LLVMBuildAlloca(e.b, e.vt, "acc");
    LLVMBuildStore(e.b, LLVMConstNull(e.vt), acc[i]);
  }
  emit_body(&e, fn);
  LLVMDisposeBuilder(e.b);
  return true;
}

/* ------------------------------------------------ compiled variants */

#define GEMM_CACHE_MAX 128

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  llvm_gemm_spec spec;
  llvm_gemm_fn fn;
} cache[GEMM_CACHE_MAX]; /* guarded by lock */
static int n_cached, n_compiled;

static bool same_spec(const llvm_gemm_spec *x, const llvm_gemm_spec *y) {
  if (x->n_epi != y->n_epi) return false;
  for (int i = 0; i < x->n_epi; i++)
    if (x->epi[i].op != y->epi[i].op || x->epi[i].arg != y->epi[i].arg) return false;
  return x->dtype == y->dtype && x->vl == y->vl && x->mr == y->mr && x->nv == y->nv && x->nr == y->nr &&
         x->fma == y->fma;
}

/* Each step an op with the operand it takes (RELU none, the others one). */
static bool valid_epilogue(const llvm_gemm_spec *s) {
  if (s->n_epi < 0 || s->n_epi > LLVM_GEMM_EPI_MAX) return false;
  for (int i = 0; i < s->n_epi; i++) {
    int op = s->epi[i].op, arg = s->epi[i].arg;
    if (op < LLVM_GEMM_EPI_ADD || op > LLVM_GEMM_EPI_MINIMUM || arg > LLVM_GEMM_ARG_SCALAR) return false;
    if ((op == LLVM_GEMM_EPI_RELU) != (arg == LLVM_GEMM_ARG_NONE)) return false;
  }
  return true;
}

static bool valid_spec(const llvm_gemm_spec *s) {
  return (s->dtype == KILN_F32 || s->dtype == KILN_F64) && s->vl >= 1 && s->nv >= 1 && s->nr == s->nv * s->vl &&
         s->nr <= LLVM_GEMM_MAX_NR && s->mr >= 1 && s->mr <= LLVM_GEMM_MAX_MR && valid_epilogue(s);
}

/* The variant's name: its symbol's stem and the name in messages. */
static void variant_name(const llvm_gemm_spec *s, char *name, size_t cap) {
  int len = snprintf(name, cap, "gemm_ukr_%s_%dx%d_v%d%s", s->dtype == KILN_F64 ? "f64" : "f32", s->mr, s->nr,
                     s->vl, s->fma ? "" : "_muladd");
  for (int i = 0; i < s->n_epi && len > 0 && len < (int)cap - 8; i++) /* a distinct symbol per epilogue */
    len += snprintf(name + len, cap - (size_t)len, "_e%d%d", s->epi[i].op, s->epi[i].arg);
}

int llvm_gemm_compile(const llvm_gemm_spec *s, const char *sym, llvm_gemm_fn *out, void **obj, size_t *obj_len,
                      char *err, size_t errlen) {
  char name[96];
  variant_name(s, name, sizeof name);
  void *addr = NULL;
  llvm_gemm_spec copy = *s;
  int st = llvm_compile_module(name, fill_gemm, &copy, sym, &addr, obj, obj_len, err, errlen);
  if (st == KILN_OK) memcpy(out, &addr, sizeof *out); /* object → function pointer, as llvm_jit.c does */
  return st;
}

size_t llvm_gemm_key(const llvm_gemm_spec *s, unsigned char key[LLVM_GEMM_KEY_MAX]) {
  static const char tag[16] = "kiln gemm ukr 2"; /* no kernel IR's uop bytes start so */
  size_t n = sizeof tag;
  memcpy(key, tag, n);
  const int fields[] = {(int)s->dtype, s->vl, s->mr, s->nv, s->nr, s->fma, s->n_epi};
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) key[n++] = (unsigned char)fields[i];
  for (int i = 0; i < s->n_epi; i++) {
    key[n++] = s->epi[i].op;
    key[n++] = s->epi[i].arg;
  }
  return n;
}

/* Under lock: builds s into slot n_cached. */
static int add_variant(const llvm_gemm_spec *s, llvm_gemm_builder build, llvm_gemm_fn *out, llvm_gemm_got *got,
                       char *err, size_t errlen) {
  if (n_cached == GEMM_CACHE_MAX) {
    snprintf(err, errlen, "llvm_gemm_kernel: more than %d micro-kernel variants", GEMM_CACHE_MAX);
    return KILN_ERR_UNSUPPORTED;
  }
  llvm_gemm_fn fn = NULL;
  bool compiled = true;
  int st = build ? build(s, &fn, &compiled, err, errlen) : llvm_gemm_compile(s, NULL, &fn, NULL, NULL, err, errlen);
  if (st != KILN_OK) return st;
  cache[n_cached].spec = *s;
  cache[n_cached++].fn = fn;
  n_compiled += compiled;
  *out = fn;
  *got = compiled ? LLVM_GEMM_COMPILED : LLVM_GEMM_LOADED;
  return KILN_OK;
}

int llvm_gemm_kernel(const llvm_gemm_spec *s, llvm_gemm_builder build, llvm_gemm_fn *out, llvm_gemm_got *got,
                     char *err, size_t errlen) {
  llvm_gemm_got mine = LLVM_GEMM_HELD;
  if (!got) got = &mine;
  *got = LLVM_GEMM_HELD;
  if (!s || !valid_spec(s)) {
    snprintf(err, errlen, "llvm_gemm_kernel: invalid micro-kernel spec (mr %d, nr %d, vl %d)", s ? s->mr : 0,
             s ? s->nr : 0, s ? s->vl : 0);
    return KILN_ERR_ARG;
  }
  pthread_mutex_lock(&lock);
  int st = KILN_OK;
  int i = 0;
  while (i < n_cached && !same_spec(&cache[i].spec, s)) i++;
  if (i < n_cached) *out = cache[i].fn;
  else st = add_variant(s, build, out, got, err, errlen);
  pthread_mutex_unlock(&lock);
  return st;
}

int llvm_gemm_compiled(void) {
  pthread_mutex_lock(&lock);
  int n = n_compiled;
  pthread_mutex_unlock(&lock);
  return n;
}

void llvm_gemm_forget(void) {
  pthread_mutex_lock(&lock);
  n_cached = 0;
  pthread_mutex_unlock(&lock);
}
