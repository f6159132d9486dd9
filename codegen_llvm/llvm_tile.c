/*
 * llvm_tile.c — transposed reads of a tile (kir_range_tile) in the CPU
 * backend.
 *
 * A read inside a tile whose index is base + ti + tj*s (s a constant
 * other than 0 and 1) walks its buffer across rows: element by element,
 * every load would touch another cache line, and LLVM's vectoriser turns
 * the tj loop into gathers. Before the tile's loops, this file instead
 * loads the read's KIR_TILE x KIR_TILE block as KIR_TILE vector loads
 * along ti (row r at base + r*s), transposes them in registers with
 * shuffles (four butterfly stages), and stores the result to a stack
 * block laid out [ti][tj]. The read itself then loads from that block at
 * ti*KIR_TILE + tj: contiguous along tj, so the loop vectoriser makes one
 * vector load of it (and SROA usually keeps the block in registers).
 * The block holds exactly the elements the tile's loops read, so nothing
 * outside the view is touched. Reads of a buffer the kernel writes are
 * left alone. bench/README.md, row W7, has the measurements.
 */
#include <stdint.h>

#include "llvm_internal.h"

#define T KIR_TILE

/* ------------------------------------------------------------ analysis */

typedef struct affine {
  bool ok;
  int64_t ci, cj; /* coefficients of ti and tj */
} affine;

static const affine not_affine = {false, 0, 0};

/* The integer value of CONST uop u, if it is one. */
static bool const_int(const kir_kernel *k, int u, int64_t *v) {
  const kir_uop *x = &k->uops[u];
  if (x->op != KIR_CONST || (x->type != KIR_INDEX && x->type != KILN_I64)) return false;
  *v = x->ival;
  return true;
}

/* Index uop u as an affine function of the tile's ranges (tile, tile+1);
 * uops before the tile are constants of it. Only ADD, SUB, MUL by a
 * constant and 64-bit casts are followed; anything else is not affine. */
static affine affine_of(const kir_kernel *k, int tile, int u, int depth) {
  if (u < tile) return (affine){k->uops[u].op != KIR_ACC, 0, 0};
  if (u == tile) return (affine){true, 1, 0};
  if (u == tile + 1) return (affine){true, 0, 1};
  const kir_uop *x = &k->uops[u];
  if (depth > 32) return not_affine;
  int64_t m;
  switch (x->op) {
  case KIR_CONST: return (affine){x->type == KIR_INDEX || x->type == KILN_I64, 0, 0};
  case KIR_CAST: {
    kiln_dtype from = k->uops[x->src[0]].type;
    if ((x->type != KIR_INDEX && x->type != KILN_I64) || (from != KIR_INDEX && from != KILN_I64)) return not_affine;
    return affine_of(k, tile, x->src[0], depth + 1);
  }
  case KIR_ADD:
  case KIR_SUB: {
    affine a = affine_of(k, tile, x->src[0], depth + 1), b = affine_of(k, tile, x->src[1], depth + 1);
    if (!a.ok || !b.ok) return not_affine;
    int64_t sg = x->op == KIR_ADD ? 1 : -1;
    return (affine){true, a.ci + sg * b.ci, a.cj + sg * b.cj};
  }
  case KIR_MUL: {
    affine a = affine_of(k, tile, x->src[0], depth + 1), b = affine_of(k, tile, x->src[1], depth + 1);
    if (!a.ok || !b.ok) return not_affine;
    if (!a.ci && !a.cj && !b.ci && !b.cj) return a;
    if (const_int(k, x->src[1], &m)) return (affine){true, a.ci * m, a.cj * m};
    if (const_int(k, x->src[0], &m)) return (affine){true, b.ci * m, b.cj * m};
    return not_affine;
  }
  default: return not_affine;
  }
}

/* Load u of the tile at `tile` reads transposed: index base + ti + tj*s. */
static bool transposed(const kir_kernel *k, int tile, int u, int64_t *s) {
  const kir_uop *x = &k->uops[u];
  const kir_uop *buf = x->op == KIR_LOAD ? &k->uops[x->src[0]] : NULL;
  if (!buf || buf->op != KIR_PARAM || k->param_written[buf->ival]) return false;
  affine a = affine_of(k, tile, x->src[1], 0);
  *s = a.cj;
  return a.ok && a.ci == 1 && a.cj != 0 && a.cj != 1;
}

/* ---------------------------------------------------------------- code */

/* Bytes of a buffer element of LLVM type mt (llvm_mem_type). */
static unsigned elem_bytes(LLVMTypeRef mt) {
  switch (LLVMGetTypeKind(mt)) {
  case LLVMHalfTypeKind: return 2;
  case LLVMFloatTypeKind: return 4;
  case LLVMDoubleTypeKind: return 8;
  default: return LLVMGetIntTypeWidth(mt) / 8;
  }
}

/* Index uop u at ti = `ti` (a value), tj = 0, emitted at b (affine_of
 * accepted u). */
static LLVMValueRef at_row(const llvm_tile_env *e, int tile, int u, LLVMValueRef ti) {
  LLVMTypeRef i64 = LLVMInt64TypeInContext(e->ctx);
  if (u == tile) return ti;
  if (u == tile + 1) return LLVMConstInt(i64, 0, 0);
  if (u < tile) return e->vals[u];
  const kir_uop *x = &e->k->uops[u];
  switch (x->op) {
  case KIR_CONST: return LLVMConstInt(i64, (unsigned long long)x->ival, 1);
  case KIR_CAST: return at_row(e, tile, x->src[0], ti);
  case KIR_ADD: return LLVMBuildAdd(e->b, at_row(e, tile, x->src[0], ti), at_row(e, tile, x->src[1], ti), "");
  case KIR_SUB: return LLVMBuildSub(e->b, at_row(e, tile, x->src[0], ti), at_row(e, tile, x->src[1], ti), "");
  default: return LLVMBuildMul(e->b, at_row(e, tile, x->src[0], ti), at_row(e, tile, x->src[1], ti), "");
  }
}

static LLVMValueRef at_origin(const llvm_tile_env *e, int tile, int u) {
  return at_row(e, tile, u, LLVMConstInt(LLVMInt64TypeInContext(e->ctx), 0, 0));
}

/* Shuffle mask of one butterfly half: lane j of the result takes lane j
 * of a when bit h of j is clear (lo) else lane j - h of b; hi: lane j + h
 * of a, else lane j of b. */
static LLVMValueRef mask(LLVMContextRef ctx, int h, bool hi) {
  LLVMValueRef m[T];
  LLVMTypeRef i32 = LLVMInt32TypeInContext(ctx);
  for (int j = 0; j < T; j++) {
    int lane = (j & h) == 0 ? (hi ? j + h : j) : (hi ? T + j : T + j - h);
    m[j] = LLVMConstInt(i32, (unsigned)lane, 0);
  }
  return LLVMConstVector(m, T);
}

/* Transposes rows r[T] (vectors of T lanes) in place: stage h swaps bit h
 * of the row and lane numbers of every element whose bits differ. */
static void transpose(LLVMBuilderRef b, LLVMContextRef ctx, LLVMValueRef *r) {
  for (int h = T / 2; h >= 1; h /= 2) {
    LLVMValueRef lo = mask(ctx, h, false), hi = mask(ctx, h, true);
    for (int i = 0; i < T; i++) {
      if (i & h) continue;
      LLVMValueRef a = r[i], c = r[i + h];
      r[i] = LLVMBuildShuffleVector(b, a, c, lo, "");
      r[i + h] = LLVMBuildShuffleVector(b, a, c, hi, "");
    }
  }
}

/* Loads, transposes and stores the block of load u (index stride s per
 * tj) to a new stack block; returns the block. */
static LLVMValueRef stage(const llvm_tile_env *e, int tile, int u, int64_t s) {
  const kir_uop *x = &e->k->uops[u];
  LLVMTypeRef i64 = LLVMInt64TypeInContext(e->ctx), mt = llvm_mem_type(e->ctx, x->type);
  LLVMTypeRef vt = LLVMVectorType(mt, T);
  unsigned esize = elem_bytes(mt);
  LLVMValueRef block = LLVMBuildAlloca(e->ab, LLVMArrayType(mt, T * T), "tile");
  LLVMSetAlignment(block, 64);
  LLVMValueRef base = at_origin(e, tile, x->src[1]), rows[T];
  for (int r = 0; r < T; r++) {
    LLVMValueRef idx = LLVMBuildAdd(e->b, base, LLVMConstInt(i64, (unsigned long long)(s * r), 1), "");
    LLVMValueRef p = LLVMBuildInBoundsGEP2(e->b, mt, e->vals[x->src[0]], &idx, 1, "");
    rows[r] = LLVMBuildLoad2(e->b, vt, p, "");
    LLVMSetAlignment(rows[r], esize);
  }
  transpose(e->b, e->ctx, rows);
  for (int t = 0; t < T; t++) {
    LLVMValueRef idx = LLVMConstInt(i64, (unsigned long long)t, 0);
    LLVMValueRef st = LLVMBuildStore(e->b, rows[t], LLVMBuildInBoundsGEP2(e->b, vt, block, &idx, 1, ""));
    LLVMSetAlignment(st, esize);
  }
  return block;
}

int llvm_tile_stage(const llvm_tile_env *e, int tile, LLVMValueRef *staged) {
  const kir_kernel *k = e->k;
  int n = 0;
  for (int u = tile + 2; u < k->n_uops; u++) {
    if (k->uops[u].op == KIR_END) break; /* the inner range's END: kir_verify's tile rule */
    int64_t s;
    if (!transposed(k, tile, u, &s)) continue;
    staged[u] = stage(e, tile, u, s);
    n++;
  }
  return n;
}

bool llvm_tile_align_rows(const llvm_tile_env *e, LLVMModuleRef mod, int tile, LLVMValueRef ti) {
  const kir_kernel *k = e->k;
  for (int u = tile + 2; u < k->n_uops && k->uops[u].op != KIR_END; u++) {
    const kir_uop *x = &k->uops[u];
    if (x->op != KIR_STORE || !x->nontemporal) continue;
    affine a = affine_of(k, tile, x->src[1], 0);
    if (!a.ok || a.cj != 1 || a.ci % T) continue; /* (kir.h promises both) */
    LLVMTypeRef mt = llvm_mem_type(e->ctx, k->uops[x->src[0]].elem);
    LLVMValueRef idx = at_row(e, tile, x->src[1], ti);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(e->b, mt, e->vals[x->src[0]], &idx, 1, "");
    unsigned align = elem_bytes(mt) * T;
    if (!llvm_assume_aligned(e->b, mod, p, align > 64 ? 64 : align)) return false;
  }
  return true;
}

LLVMValueRef llvm_tile_index(LLVMBuilderRef b, LLVMContextRef ctx, LLVMValueRef ti, LLVMValueRef tj) {
  LLVMValueRef row = LLVMBuildMul(b, ti, LLVMConstInt(LLVMInt64TypeInContext(ctx), T, 0), "");
  return LLVMBuildAdd(b, row, tj, "");
}
