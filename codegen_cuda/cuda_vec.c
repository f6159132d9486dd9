/*
 * cuda_vec.c — the vector form of flat elementwise kernels (cuda_vec.h;
 * docs/cuda.md, "The generated code").
 *
 * It applies to a splittable, non-cooperative kernel whose parallel RANGE
 * is its only loop (no accumulator either) — a flat elementwise kernel
 * after the CPU-side loop merging — when every STORE in that loop, and at
 * least one access, is "wide": its buffer holds 4-byte elements (F32,
 * I32) and its index is the range variable r itself or r + X, X
 * loop-invariant (a uop defined before the loop, like a view offset
 * loaded from the argument array at entry, or an index constant). The
 * other LOADs in the loop must have a loop-invariant index (a broadcast
 * scalar, read per element as before) and a buffer the loop does not
 * store to. A wide LOAD from a buffer the loop stores to is refused
 * unless every such store comes after it at the same offset: a group's
 * loads are done before its lanes run and its stores after, so no lane
 * may read what another lane writes; stores to one buffer must share
 * their offset.
 *
 * The printed kernel then checks at entry that the range's first index
 * is a multiple of 4 and that p + X is 16-byte aligned for every wide
 * access; if so each thread of the grid-stride loop takes groups of 4
 * consecutive indices, loads each wide input as one float4 / int4, runs
 * the unchanged per-element code once per lane (a `#pragma unroll` loop
 * over the 4 lanes; the stores fill a 4-element array) and stores each
 * output as one float4 / int4. What remains — the last 1..3 indices, or
 * the whole range when a check fails — runs in the scalar grid-stride
 * loop. Every element goes through the same operations as in the scalar
 * form, so results are bit-identical.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_vec.h"

#include "kiln/types.h"

enum { NO_OFFSET = -2, NOT_AFFINE = -1 };

static bool wide_type(kir_type t) { return t == KIR_F32 || t == KIR_I32; }

/* True when uop x has the same value in every iteration of loop r. */
static bool invariant(const kir_kernel *k, int r, int x) { return x < r || k->uops[x].op == KIR_CONST; }

/* For an index x of loop r: NO_OFFSET when x is r, X when x is r + X or
 * X + r with X invariant, else NOT_AFFINE. */
static int offset_of(const kir_kernel *k, int r, int x) {
  if (x == r) return NO_OFFSET;
  const kir_uop *u = &k->uops[x];
  if (u->op != KIR_ADD || u->type != KIR_INDEX) return NOT_AFFINE;
  if (u->src[0] == r && invariant(k, r, u->src[1])) return u->src[1];
  if (u->src[1] == r && invariant(k, r, u->src[0])) return u->src[0];
  return NOT_AFFINE;
}

void cuda_vec_free(cuda_vec *v) {
  free(v->wide);
  memset(v, 0, sizeof *v);
  v->range = v->end = -1;
}

/* True when LOAD i of loop r (ending at e) may read a whole group before
 * the group's stores: no STORE to its buffer comes before it, and every
 * later one writes the element it reads (the same offset), so no lane
 * reads what another lane writes. */
static bool load_before_stores(const kir_kernel *k, int r, int e, int i) {
  int p = k->uops[i].src[0], x = offset_of(k, r, k->uops[i].src[1]);
  for (int j = r + 1; j < e; j++)
    if (k->uops[j].op == KIR_STORE && k->uops[j].src[0] == p && (j < i || offset_of(k, r, k->uops[j].src[1]) != x))
      return false;
  return true;
}

/* True when every STORE of loop r (ending at e) to STORE i's buffer
 * writes at i's offset (a group's stores keep the per-element order only
 * for the same elements). */
static bool stores_agree(const kir_kernel *k, int r, int e, int i) {
  int p = k->uops[i].src[0], x = offset_of(k, r, k->uops[i].src[1]);
  for (int j = r + 1; j < e; j++)
    if (k->uops[j].op == KIR_STORE && k->uops[j].src[0] == p && offset_of(k, r, k->uops[j].src[1]) != x) return false;
  return true;
}

/* True when loop r (ending at e) stores to param p. */
static bool stored_in(const kir_kernel *k, int r, int e, int p) {
  for (int j = r + 1; j < e; j++)
    if (k->uops[j].op == KIR_STORE && k->uops[j].src[0] == p) return true;
  return false;
}

int cuda_vec_plan(const kir_kernel *k, bool split, cuda_vec *v) {
  memset(v, 0, sizeof *v);
  v->range = v->end = -1;
  v->wide = calloc(k->n_uops > 0 ? (size_t)k->n_uops : 1, sizeof *v->wide);
  if (!v->wide) return KILN_ERR_OOM;
  if (!split) return KILN_OK;
  for (int i = 0; i < k->n_uops; i++) {
    const kir_uop *u = &k->uops[i];
    if (u->op == KIR_ACC || u->op == KIR_LOCAL) return KILN_OK;
    if (u->op == KIR_RANGE) {
      if (v->range >= 0 || !u->parallel) return KILN_OK; /* not the only loop */
      v->range = i;
    }
    if (u->op == KIR_END) v->end = i;
  }
  int r = v->range, n_wide = 0;
  if (r < 0 || v->end < 0) return KILN_OK;
  for (int i = r + 1; i < v->end; i++) {
    const kir_uop *u = &k->uops[i];
    if (u->op != KIR_LOAD && u->op != KIR_STORE) continue;
    int p = u->src[0];
    bool wide = p < r && wide_type(k->uops[p].elem) && offset_of(k, r, u->src[1]) != NOT_AFFINE;
    if (wide && u->op == KIR_LOAD && !load_before_stores(k, r, v->end, i)) wide = false;
    if (wide && u->op == KIR_STORE && !stores_agree(k, r, v->end, i)) wide = false;
    if (!wide && (u->op == KIR_STORE || !invariant(k, r, u->src[1]) || stored_in(k, r, v->end, p))) return KILN_OK;
    v->wide[i] = wide;
    n_wide += wide;
  }
  v->on = n_wide > 0;
  return KILN_OK;
}

/* "float4" or "int4" (and the scalar "float" / "int") for wide uop i. */
static const char *vtype(const kir_kernel *k, int i) {
  return k->uops[k->uops[i].src[0]].elem == KIR_F32 ? "float4" : "int4";
}
static const char *stype(const kir_kernel *k, int i) {
  return k->uops[k->uops[i].src[0]].elem == KIR_F32 ? "float" : "int";
}

/* The address of wide uop i of loop r at index `base` (NULL: 0) plus its
 * offset X: `v<param> + (base + X)`, `v<param> + base`, `v<param> + X` or
 * `v<param>`. An offset defined inside the loop is a constant: printed as
 * its value. */
static void put_at(const kir_kernel *k, int r, kir_strbuf *b, int i, const char *base) {
  const kir_uop *u = &k->uops[i];
  int x = offset_of(k, r, u->src[1]);
  char xs[32] = "";
  if (x >= 0 && k->uops[x].op == KIR_CONST) snprintf(xs, sizeof xs, "%lldLL", (long long)k->uops[x].ival);
  else if (x >= 0) snprintf(xs, sizeof xs, "v%d", x);
  kir_sb_printf(b, "v%d", u->src[0]);
  if (base && xs[0]) kir_sb_printf(b, " + (%s + %s)", base, xs);
  else if (base || xs[0]) kir_sb_printf(b, " + %s", base ? base : xs);
}

/* True when an earlier wide uop than i has i's buffer and offset (its
 * alignment is checked once). */
static bool same_access_before(const kir_kernel *k, const cuda_vec *v, int i) {
  for (int j = v->range + 1; j < i; j++)
    if (v->wide[j] && k->uops[j].src[0] == k->uops[i].src[0] &&
        offset_of(k, v->range, k->uops[j].src[1]) == offset_of(k, v->range, k->uops[i].src[1]))
      return true;
  return false;
}

void cuda_vec_open(const kir_kernel *k, const cuda_vec *v, kir_strbuf *b, int depth) {
  int r = v->range, d = 2 * depth;
  kir_sb_printf(b, "%*sconst bool v%d_al = (v%d_lo & 3LL) == 0", d, "", r, r);
  for (int i = r + 1; i < v->end; i++) {
    if (!v->wide[i] || same_access_before(k, v, i)) continue;
    kir_sb_printf(b, " &&\n%*s    ((unsigned long long)(", d, "");
    put_at(k, r, b, i, NULL);
    kir_sb_printf(b, ") & 15ull) == 0");
  }
  kir_sb_printf(b, "; /* 16-byte aligned groups of 4 */\n");
  kir_sb_printf(b, "%*sconst long long v%d_vn = v%d_al && v%d_hi > v%d_lo ? (v%d_hi - v%d_lo) & ~3LL : 0LL;\n", d, "",
                r, r, r, r, r, r);
  kir_sb_printf(b,
                "%*sfor (long long v%d_g = v%d_lo + 4LL * ((long long)blockIdx.x * blockDim.x + threadIdx.x); "
                "v%d_g < v%d_lo + v%d_vn;\n"
                "%*s     v%d_g += 4LL * gridDim.x * blockDim.x) { /* 4 elements a step */\n",
                d, "", r, r, r, r, r, d, "", r);
  for (int i = r + 1; i < v->end; i++) {
    if (!v->wide[i]) continue;
    const char *V = vtype(k, i), *S = stype(k, i);
    if (k->uops[i].op == KIR_LOAD) {
      kir_sb_printf(b, "%*s  const %s v%d_q = *reinterpret_cast<const %s *>(", d, "", V, i, V);
      char base[32];
      snprintf(base, sizeof base, "v%d_g", r);
      put_at(k, r, b, i, base);
      kir_sb_printf(b, ");\n%*s  const %s v%d_a[4] = {v%d_q.x, v%d_q.y, v%d_q.z, v%d_q.w};\n", d, "", S, i, i, i, i, i);
    } else {
      kir_sb_printf(b, "%*s  %s v%d_a[4];\n", d, "", S, i);
    }
  }
  kir_sb_printf(b, "%*s  #pragma unroll\n", d, "");
  kir_sb_printf(b, "%*s  for (int kiln_l = 0; kiln_l < 4; kiln_l++) {\n", d, "");
  kir_sb_printf(b, "%*s    const long long v%d = v%d_g + kiln_l;\n", d, "", r, r);
}

void cuda_vec_put_load(const kir_kernel *k, kir_strbuf *b, int i) {
  (void)k;
  kir_sb_printf(b, "v%d_a[kiln_l]", i);
}

void cuda_vec_put_store(const kir_kernel *k, kir_strbuf *b, int i) {
  kir_sb_printf(b, "v%d_a[kiln_l] = v%d;\n", i, k->uops[i].src[2]);
}

void cuda_vec_close(const kir_kernel *k, const cuda_vec *v, kir_strbuf *b, int depth) {
  int r = v->range, d = 2 * depth;
  kir_sb_printf(b, "%*s  }\n", d, "");
  char base[32];
  snprintf(base, sizeof base, "v%d_g", r);
  for (int i = r + 1; i < v->end; i++) {
    if (!v->wide[i] || k->uops[i].op != KIR_STORE) continue;
    kir_sb_printf(b, "%*s  *reinterpret_cast<%s *>(", d, "", vtype(k, i));
    put_at(k, r, b, i, base);
    kir_sb_printf(b, ") = make_%s(v%d_a[0], v%d_a[1], v%d_a[2], v%d_a[3]);\n", vtype(k, i), i, i, i, i);
  }
  kir_sb_printf(b, "%*s}\n", d, "");
}
