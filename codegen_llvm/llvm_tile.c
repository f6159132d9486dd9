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
 *
 * A skewed tile (kir_tile_skew: a last dim that is not a multiple of the
 * tile, W7r) reads row ti at columns L + skew(ti) + tj: its block is two,
 * source rows [0, T) and [T, 2T), both inside the view (kir.h). When
 * each row's skew is a constant (fixed_skew), row ti of the block is a
 * window of the two transposed rows (one shuffle) and the block is a
 * plain one; else it is kept [ti][2T] and read at ti*2T + skew + tj.
 * Rows [T, 2T) are kept on the stack for the band's next column block,
 * which reads them as its rows [0, T) (skewed_rows).
 */
#include <stdint.h>

#include "llvm_internal.h"

#define T KIR_TILE

/* ------------------------------------------------------------ analysis */

typedef struct affine {
  bool ok;
  int64_t ci, cj, cs; /* coefficients of ti, tj and the tile's skew */
} affine;

static const affine not_affine = {false, 0, 0, 0};

/* The integer value of CONST uop u, if it is one. */
static bool const_int(const kir_kernel *k, int u, int64_t *v) {
  const kir_uop *x = &k->uops[u];
  if (x->op != KIR_CONST || (x->type != KIR_INDEX && x->type != KIR_I64)) return false;
  *v = x->ival;
  return true;
}

/* Index uop u as an affine function of the tile's ranges (tile, tile+1);
 * uops before the tile are constants of it. Only ADD, SUB, MUL by a
 * constant and 64-bit casts are followed; anything else is not affine. */
static affine affine_of(const kir_kernel *k, int tile, int u, int depth) {
  if (u < tile) return (affine){k->uops[u].op != KIR_ACC, 0, 0, 0};
  if (u == tile) return (affine){true, 1, 0, 0};
  if (u == tile + 1) return (affine){true, 0, 1, 0};
  const kir_uop *x = &k->uops[u];
  if (x->skew) return (affine){true, 0, 0, 1};
  if (depth > 32) return not_affine;
  int64_t m;
  switch (x->op) {
  case KIR_CONST: return (affine){x->type == KIR_INDEX || x->type == KIR_I64, 0, 0, 0};
  case KIR_CAST: {
    kir_type from = k->uops[x->src[0]].type;
    if ((x->type != KIR_INDEX && x->type != KIR_I64) || (from != KIR_INDEX && from != KIR_I64)) return not_affine;
    return affine_of(k, tile, x->src[0], depth + 1);
  }
  case KIR_ADD:
  case KIR_SUB: {
    affine a = affine_of(k, tile, x->src[0], depth + 1), b = affine_of(k, tile, x->src[1], depth + 1);
    if (!a.ok || !b.ok) return not_affine;
    int64_t sg = x->op == KIR_ADD ? 1 : -1;
    return (affine){true, a.ci + sg * b.ci, a.cj + sg * b.cj, a.cs + sg * b.cs};
  }
  case KIR_MUL: {
    affine a = affine_of(k, tile, x->src[0], depth + 1), b = affine_of(k, tile, x->src[1], depth + 1);
    if (!a.ok || !b.ok) return not_affine;
    if (!a.ci && !a.cj && !a.cs && !b.ci && !b.cj && !b.cs) return a;
    if (const_int(k, x->src[1], &m)) return (affine){true, a.ci * m, a.cj * m, a.cs * m};
    if (const_int(k, x->src[0], &m)) return (affine){true, b.ci * m, b.cj * m, b.cs * m};
    return not_affine;
  }
  default: return not_affine;
  }
}

/* The tile's skew uop (kir_tile_skew), or -1. */
int llvm_tile_skew(const kir_kernel *k, int tile) {
  for (int u = tile + 2; u < k->n_uops && k->uops[u].op != KIR_END; u++)
    if (k->uops[u].skew) return u;
  return -1;
}

/* Load u of the tile at `tile` reads transposed: index base + ti + tj*s,
 * or in a skewed tile base + ti + (tj + skew)*s. */
static bool transposed(const kir_kernel *k, int tile, int u, bool skewed, int64_t *s) {
  const kir_uop *x = &k->uops[u];
  const kir_uop *buf = x->op == KIR_LOAD ? &k->uops[x->src[0]] : NULL;
  if (!buf || buf->op != KIR_PARAM || k->param_written[buf->ival]) return false;
  affine a = affine_of(k, tile, x->src[1], 0);
  *s = a.cj;
  return a.ok && a.ci == 1 && a.cj != 0 && a.cj != 1 && a.cs == (skewed ? a.cj : 0);
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
 * accepted u); the skew taken as 0 unless `skew`, which computes it (an
 * AND of such terms: lower_skewed). */
static LLVMValueRef at_row(const llvm_tile_env *e, int tile, int u, LLVMValueRef ti, bool skew) {
  LLVMTypeRef i64 = LLVMInt64TypeInContext(e->ctx);
  if (u == tile) return ti;
  if (u == tile + 1) return LLVMConstInt(i64, 0, 0);
  if (u < tile) return e->vals[u];
  const kir_uop *x = &e->k->uops[u];
  if (x->skew && !skew) return LLVMConstInt(i64, 0, 0);
  if (x->op == KIR_CONST) return LLVMConstInt(i64, (unsigned long long)x->ival, 1);
  if (x->op == KIR_CAST) return at_row(e, tile, x->src[0], ti, skew);
  LLVMValueRef a = at_row(e, tile, x->src[0], ti, skew), b = at_row(e, tile, x->src[1], ti, skew);
  switch (x->op) {
  case KIR_ADD: return LLVMBuildAdd(e->b, a, b, "");
  case KIR_SUB: return LLVMBuildSub(e->b, a, b, "");
  case KIR_AND: return LLVMBuildAnd(e->b, a, b, "");
  default: return LLVMBuildMul(e->b, a, b, "");
  }
}

static LLVMValueRef at_origin(const llvm_tile_env *e, int tile, int u) {
  return at_row(e, tile, u, LLVMConstInt(LLVMInt64TypeInContext(e->ctx), 0, 0), false);
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

/* The ranges enclosing a skewed tile (passes/lower.c lower_skewed): the
 * column blocks' (*blocks, not parallel, so it starts at 0) and, inside
 * it, the bands' (*band). */
static bool carry_ranges(const kir_kernel *k, int tile, int *blocks, int *band) {
  int found[2], n = 0, depth = 0;
  for (int u = tile - 1; u >= 0 && n < 2; u--) {
    if (k->uops[u].op == KIR_END) depth++;
    else if (k->uops[u].op == KIR_RANGE && depth-- == 0) found[n++] = u, depth = 0;
  }
  if (n < 2 || k->uops[found[1]].parallel) return false;
  *band = found[0];
  *blocks = found[1];
  return true;
}

/* Rows [r0, r0 + T) of load u's block (row r at base + r*s), transposed. */
static void load_block(const llvm_tile_env *e, const kir_uop *x, LLVMValueRef base, int64_t s, int r0, LLVMValueRef *rows) {
  LLVMTypeRef i64 = LLVMInt64TypeInContext(e->ctx), mt = llvm_mem_type(e->ctx, x->type);
  for (int r = 0; r < T; r++) {
    LLVMValueRef idx = LLVMBuildAdd(e->b, base, LLVMConstInt(i64, (unsigned long long)(s * (r0 + r)), 1), "");
    LLVMValueRef p = LLVMBuildInBoundsGEP2(e->b, mt, e->vals[x->src[0]], &idx, 1, "");
    rows[r] = LLVMBuildLoad2(e->b, LLVMVectorType(mt, T), p, "");
    LLVMSetAlignment(rows[r], elem_bytes(mt));
  }
  transpose(e->b, e->ctx, rows);
}

/* Vector t of slot `slot` of a carry buffer (T vectors a slot). The
 * slot is one index of a [slots][T] array and t a constant one, so the
 * address is a base register plus a displacement (an index slot*T + t
 * became T induction variables, spilled). */
static LLVMValueRef carry_at(const llvm_tile_env *e, LLVMTypeRef carry_type, LLVMValueRef carry, LLVMValueRef slot, int t) {
  LLVMTypeRef i64 = LLVMInt64TypeInContext(e->ctx);
  LLVMValueRef idx[3] = {LLVMConstInt(i64, 0, 0), slot, LLVMConstInt(i64, (unsigned long long)t, 0)};
  return LLVMBuildInBoundsGEP2(e->b, carry_type, carry, idx, 3, "");
}

/* A skewed tile's rows: lo[] (source rows [0, T)) and hi[] ([T, 2T)),
 * transposed. hi is loaded; lo is the band's hi of the previous column
 * block, kept in a stack buffer of a slot per band, and loaded only at
 * the first column block (kir.h, kir_tile_skew). */
static void skewed_rows(const llvm_tile_env *e, int tile, const kir_uop *x, LLVMValueRef base, int64_t s, LLVMValueRef *lo, LLVMValueRef *hi) {
  int blocks, band;
  if (!carry_ranges(e->k, tile, &blocks, &band)) {
    load_block(e, x, base, s, 0, lo);
    load_block(e, x, base, s, T, hi);
    return;
  }
  LLVMTypeRef i64 = LLVMInt64TypeInContext(e->ctx), vt = LLVMVectorType(llvm_mem_type(e->ctx, x->type), T);
  LLVMTypeRef ct = LLVMArrayType(LLVMArrayType(vt, T), (unsigned)e->k->uops[band].ival);
  LLVMValueRef carry = LLVMBuildAlloca(e->ab, ct, "carry");
  LLVMSetAlignment(carry, 64);
  LLVMValueRef slot = e->vals[band];
  LLVMValueRef first = LLVMBuildICmp(e->b, LLVMIntEQ, e->vals[blocks], LLVMConstInt(i64, 0, 0), "");
  LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(e->b));
  LLVMBasicBlockRef fill = LLVMAppendBasicBlockInContext(e->ctx, fn, "carry_fill");
  LLVMBasicBlockRef cont = LLVMAppendBasicBlockInContext(e->ctx, fn, "carry_kept");
  LLVMBuildCondBr(e->b, first, fill, cont);
  LLVMPositionBuilderAtEnd(e->b, fill);
  load_block(e, x, base, s, 0, lo);
  for (int t = 0; t < T; t++) LLVMBuildStore(e->b, lo[t], carry_at(e, ct, carry, slot, t));
  LLVMBuildBr(e->b, cont);
  LLVMPositionBuilderAtEnd(e->b, cont);
  for (int t = 0; t < T; t++) lo[t] = LLVMBuildLoad2(e->b, vt, carry_at(e, ct, carry, slot, t), "");
  load_block(e, x, base, s, T, hi);
  for (int t = 0; t < T; t++) LLVMBuildStore(e->b, hi[t], carry_at(e, ct, carry, slot, t));
}

/* Uop u's value mod T at ti = `ti`, when the uops it depends on fix it
 * (a value before the tile fixes it when it is a multiple of T). */
static bool mod_tile(const kir_kernel *k, int tile, int u, int64_t ti, int64_t *m, int depth) {
  const kir_uop *x = &k->uops[u];
  int64_t a, b;
  if (u == tile) return *m = ti % T, true;
  if (depth > 32 || u == tile + 1 || x->skew) return false;
  switch (x->op) {
  case KIR_CONST: return *m = ((x->ival % T) + T) % T, x->type == KIR_INDEX || x->type == KIR_I64;
  case KIR_CAST: return x->type == KIR_INDEX && mod_tile(k, tile, x->src[0], ti, m, depth + 1);
  case KIR_ADD:
  case KIR_SUB:
    if (!mod_tile(k, tile, x->src[0], ti, &a, depth + 1) || !mod_tile(k, tile, x->src[1], ti, &b, depth + 1)) return false;
    return *m = ((x->op == KIR_ADD ? a + b : a - b) % T + T) % T, true;
  case KIR_MUL: {
    bool ka = mod_tile(k, tile, x->src[0], ti, &a, depth + 1), kb = mod_tile(k, tile, x->src[1], ti, &b, depth + 1);
    if ((ka && a == 0) || (kb && b == 0)) return *m = 0, true; /* a multiple of T times anything */
    if (!ka || !kb) return false;
    return *m = (a * b) % T, true;
  }
  default: return false;
  }
}

/* The skew of row ti of a tile when lowering's form of it, C - (X & (T-1)),
 * has X mod T fixed (passes/lower.c lower_skewed: a 2-D kernel). */
static bool fixed_skew(const kir_kernel *k, int tile, int skew, int64_t ti, int64_t *v) {
  const kir_uop *x = &k->uops[skew], *y = &k->uops[x->src[1]];
  int64_t c, mask, m;
  if (x->op != KIR_SUB || !const_int(k, x->src[0], &c) || y->op != KIR_AND || !const_int(k, y->src[1], &mask) ||
      mask != T - 1 || !mod_tile(k, tile, y->src[0], ti, &m, 0))
    return false;
  *v = c - m;
  return *v >= 0 && *v <= T;
}

/* Lane j of the result: lane off + j of the concatenation a ++ b. */
static LLVMValueRef window(LLVMBuilderRef b, LLVMContextRef ctx, LLVMValueRef lo, LLVMValueRef hi, int64_t off) {
  LLVMValueRef m[T];
  for (int j = 0; j < T; j++) m[j] = LLVMConstInt(LLVMInt32TypeInContext(ctx), (unsigned long long)(off + j), 0);
  return LLVMBuildShuffleVector(b, lo, hi, LLVMConstVector(m, T), "");
}

/* Loads, transposes and stores the block of load u (index stride s per
 * tj) to a new stack block; returns the block. A skewed tile's block is
 * two: source rows [0, T) and [T, 2T), laid out [ti][2T], so row ti's
 * elements are at ti*2T + skew + tj. */
static LLVMValueRef stage(const llvm_tile_env *e, int tile, int u, int64_t s, bool skewed, const int64_t *offs) {
  const kir_uop *x = &e->k->uops[u];
  LLVMTypeRef i64 = LLVMInt64TypeInContext(e->ctx), mt = llvm_mem_type(e->ctx, x->type);
  LLVMTypeRef vt = LLVMVectorType(mt, T);
  unsigned esize = elem_bytes(mt);
  LLVMValueRef base = at_origin(e, tile, x->src[1]), rows[2 * T];
  if (skewed) skewed_rows(e, tile, x, base, s, rows, rows + T);
  else load_block(e, x, base, s, 0, rows);
  if (skewed && offs) { /* each row's window at a fixed lane: a plain block */
    for (int t = 0; t < T; t++) rows[t] = window(e->b, e->ctx, rows[t], rows[T + t], offs[t]);
    skewed = false;
  }
  int halves = skewed ? 2 : 1;
  LLVMValueRef block = LLVMBuildAlloca(e->ab, LLVMArrayType(mt, (unsigned)(T * T * halves)), "tile");
  LLVMSetAlignment(block, 64);
  for (int h = 0; h < halves; h++)
    for (int t = 0; t < T; t++) {
      LLVMValueRef idx = LLVMConstInt(i64, (unsigned long long)(t * halves + h), 0);
      LLVMValueRef st = LLVMBuildStore(e->b, rows[h * T + t], LLVMBuildInBoundsGEP2(e->b, vt, block, &idx, 1, ""));
      LLVMSetAlignment(st, esize);
    }
  return block;
}

int llvm_tile_stage(const llvm_tile_env *e, int tile, LLVMValueRef *staged, int *load_skew) {
  const kir_kernel *k = e->k;
  int skew = llvm_tile_skew(k, tile), n = 0;
  int64_t offs[T];
  bool fixed = skew >= 0;
  for (int t = 0; fixed && t < T; t++) fixed = fixed_skew(k, tile, skew, t, &offs[t]);
  *load_skew = fixed ? -1 : skew;
  for (int u = tile + 2; u < k->n_uops; u++) {
    if (k->uops[u].op == KIR_END) break; /* the inner range's END: kir_verify's tile rule */
    int64_t s;
    if (!transposed(k, tile, u, skew >= 0, &s)) continue;
    staged[u] = stage(e, tile, u, s, skew >= 0, fixed ? offs : NULL);
    n++;
  }
  return n;
}

bool llvm_tile_align_rows(const llvm_tile_env *e, LLVMModuleRef mod, int tile, LLVMValueRef ti) {
  const kir_kernel *k = e->k;
  bool skewed = llvm_tile_skew(k, tile) >= 0;
  for (int u = tile + 2; u < k->n_uops && k->uops[u].op != KIR_END; u++) {
    const kir_uop *x = &k->uops[u];
    if (x->op != KIR_STORE || !x->nontemporal) continue;
    affine a = affine_of(k, tile, x->src[1], 0);
    if (!a.ok || a.cj != 1 || (skewed ? a.cs != 1 : a.cs || a.ci % T)) continue; /* (kir.h promises it) */
    LLVMTypeRef mt = llvm_mem_type(e->ctx, k->uops[x->src[0]].elem);
    LLVMValueRef idx = at_row(e, tile, x->src[1], ti, true);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(e->b, mt, e->vals[x->src[0]], &idx, 1, "");
    unsigned align = elem_bytes(mt) * T;
    if (!llvm_assume_aligned(e->b, mod, p, align > 64 ? 64 : align)) return false;
  }
  return true;
}

LLVMValueRef llvm_tile_index(LLVMBuilderRef b, LLVMContextRef ctx, LLVMValueRef ti, LLVMValueRef tj, LLVMValueRef skew) {
  LLVMValueRef row = LLVMBuildMul(b, ti, LLVMConstInt(LLVMInt64TypeInContext(ctx), skew ? 2 * T : T, 0), "");
  if (skew) row = LLVMBuildAdd(b, row, skew, "");
  return LLVMBuildAdd(b, row, tj, "");
}
