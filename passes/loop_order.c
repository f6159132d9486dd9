/*
 * loop_order.c — interchange of an elementwise kernel's outer loops, so
 * that its accesses walk memory from the outermost loop inward.
 *
 * Lowering opens an elementwise kernel's loops in its root's dim order:
 * the output is written row-major, and a read through a permuted view
 * follows that order too. When the kernel's heavy reads live in another
 * layout, each step of the inner loops jumps across the read buffer. A
 * convolution's product is the common case: the GEMM writes [C, N·H·W]
 * and its consumers (bias, ReLU, pooling) read it as [N, C, H, W], so a
 * loop over N outside C walks C streams 100 KB apart at a time, more
 * than the hardware prefetchers follow, and pooling the conv's output
 * ran at 3 GB/s. Walking C outside N reads the same bytes in order.
 *
 * The pass looks at the kernel after lowering. Every LOAD and STORE of a
 * PARAM has an index affine in the loop variables (else the kernel is
 * left alone); a loop's weight is the bytes its step skips, summed over
 * the accesses (element size times the index's coefficient, a store's
 * halved). The outer loops are reordered by decreasing weight — a stable
 * sort, so a kernel whose accesses all follow the root's layout keeps its
 * order — and the innermost loop stays innermost (it is the vectorised
 * one, and the options chose its unrolling and streaming). The first
 * loop stays the parallel one; an order whose first loop would be much
 * shorter than today's (fewer chunks for the pool) is not taken.
 *
 * Only a plain nest is reordered: its RANGEs consecutive uops, closed by
 * the kernel's last uops in reverse order, no accumulators, locals,
 * tiles, skews or streaming stores. Reordering is then a renaming: the
 * RANGE uop at depth p takes the extent of the loop placed there, and
 * every use of a loop variable is redirected to its new RANGE.
 */
#include <stdlib.h>
#include <string.h>

#include "pass_internal.h"

/* A parallel first loop shorter than this (and than today's) gives the
 * pool too few chunks: such an order is not taken. */
#define MIN_PARALLEL 16

/* The plain nest of k: its depth (0 when k has none, or fewer than three
 * loops, so nothing outer to reorder) and the first RANGE's uop. */
static int plain_nest(const kir_kernel *k, int *first) {
  int r0 = -1, depth = 0;
  for (int i = 0; i < k->n_uops; i++) {
    const kir_uop *u = &k->uops[i];
    if (u->op == KIR_ACC || u->op == KIR_LOCAL || u->tile || u->skew || u->nontemporal) return 0;
    if (u->op != KIR_RANGE) continue;
    if (r0 < 0) r0 = i;
    if (i != r0 + depth || u->parallel != (i == r0)) return 0; /* not consecutive, or another parallel loop */
    depth++;
  }
  if (depth < 3 || k->n_uops < r0 + 2 * depth) return 0;
  for (int t = 0; t < depth; t++) { /* the tail closes them, innermost first */
    const kir_uop *e = &k->uops[k->n_uops - depth + t];
    if (e->op != KIR_END || e->src[0] != r0 + depth - 1 - t) return 0;
  }
  *first = r0;
  return depth;
}

/* Coefficients of the loop variables in each index uop (cf[u * depth +
 * l]); ok[u] false where u is not affine in them. Uops before the nest
 * are constants of it. */
static bool affine_indices(const kir_kernel *k, int r0, int depth, int64_t *cf, bool *ok) {
  for (int u = 0; u < k->n_uops; u++) {
    const kir_uop *x = &k->uops[u];
    int64_t *c = cf + (size_t)u * depth;
    ok[u] = u < r0 && x->op != KIR_ACC;
    if (u < r0) continue;
    if (u < r0 + depth) {
      c[u - r0] = 1;
      ok[u] = true;
      continue;
    }
    bool ints = x->type == KIR_INDEX || x->type == KIR_I64;
    const int64_t *a = x->src[0] >= 0 ? cf + (size_t)x->src[0] * depth : NULL;
    const int64_t *b = x->src[1] >= 0 ? cf + (size_t)x->src[1] * depth : NULL;
    switch (ints ? x->op : KIR_OP_COUNT) {
    case KIR_CONST: ok[u] = true; break;
    case KIR_CAST: {
      kir_type from = k->uops[x->src[0]].type;
      ok[u] = ok[x->src[0]] && (from == KIR_INDEX || from == KIR_I64);
      if (ok[u]) memcpy(c, a, (size_t)depth * sizeof *c);
      break;
    }
    case KIR_ADD: case KIR_SUB: {
      ok[u] = ok[x->src[0]] && ok[x->src[1]];
      for (int l = 0; l < depth && ok[u]; l++) c[l] = x->op == KIR_ADD ? a[l] + b[l] : a[l] - b[l];
      break;
    }
    case KIR_MUL: {
      const kir_uop *sa = &k->uops[x->src[0]], *sb = &k->uops[x->src[1]];
      const int64_t *v = sb->op == KIR_CONST ? a : sa->op == KIR_CONST ? b : NULL;
      int64_t m = sb->op == KIR_CONST ? sb->ival : sa->ival;
      ok[u] = v && ok[x->src[0]] && ok[x->src[1]];
      for (int l = 0; l < depth && ok[u]; l++) c[l] = v[l] * m;
      break;
    }
    default: break;
    }
  }
  for (int u = r0 + depth; u < k->n_uops; u++) { /* every access to a buffer must be affine */
    const kir_uop *x = &k->uops[u];
    if ((x->op == KIR_LOAD || x->op == KIR_STORE) && k->uops[x->src[0]].op == KIR_PARAM && !ok[x->src[1]])
      return false;
  }
  return true;
}

/* Bytes each loop's step skips, summed over the nest's accesses; a
 * store's count half (a load stalls the loop until its line arrives, a
 * store drains from the store buffer: of two nests that stride one or
 * the other, the one reading in order ran faster). */
static void loop_weights(const kir_kernel *k, int r0, int depth, const int64_t *cf, double *w) {
  for (int l = 0; l < depth; l++) w[l] = 0;
  for (int u = r0 + depth; u < k->n_uops; u++) {
    const kir_uop *x = &k->uops[u];
    if ((x->op != KIR_LOAD && x->op != KIR_STORE) || k->uops[x->src[0]].op != KIR_PARAM) continue;
    int size = kir_types[k->uops[x->src[0]].elem].size;
    const int64_t *c = cf + (size_t)x->src[1] * depth;
    double bytes = x->op == KIR_LOAD ? size : size / 2.0;
    for (int l = 0; l < depth; l++) w[l] += bytes * (double)llabs(c[l]);
  }
}

/* The new order of the outer loops (order[p]: the loop placed at depth
 * p), by decreasing weight, stable; false when it is today's. */
static bool choose_order(const kir_kernel *k, int r0, int depth, const double *w, int *order) {
  bool moved = false;
  for (int p = 0; p < depth; p++) order[p] = p;
  for (int p = 1; p < depth - 1; p++) { /* insertion sort, the innermost fixed */
    int l = order[p], q = p;
    for (; q > 0 && w[order[q - 1]] < w[l]; q--) order[q] = order[q - 1];
    order[q] = l;
    moved |= q != p;
  }
  int64_t now = k->uops[r0].ival, then = k->uops[r0 + order[0]].ival;
  return moved && (then >= now || then >= MIN_PARALLEL);
}

/* Renames the nest's loops: the RANGE at depth p iterates what loop
 * order[p] did, and every use of that loop's variable follows it. */
static void apply_order(kir_kernel *k, int r0, int depth, const int *order) {
  int to[KILN_MAX_DIMS + 2];
  int64_t extent[KILN_MAX_DIMS + 2];
  for (int p = 0; p < depth; p++) {
    to[order[p]] = r0 + p;
    extent[p] = k->uops[r0 + order[p]].ival;
  }
  for (int p = 0; p < depth; p++) k->uops[r0 + p].ival = extent[p];
  for (int u = r0 + depth; u < k->n_uops - depth; u++)
    for (int s = 0; s < 3; s++) {
      int *src = &k->uops[u].src[s];
      if (*src >= r0 && *src < r0 + depth) *src = to[*src - r0];
    }
}

void pass_order_loops(kir_kernel *k) {
  int r0 = 0, depth = plain_nest(k, &r0);
  if (depth == 0 || depth > KILN_MAX_DIMS + 2) return;
  int64_t *cf = calloc((size_t)k->n_uops * (size_t)depth, sizeof *cf);
  bool *ok = calloc((size_t)k->n_uops, sizeof *ok);
  double w[KILN_MAX_DIMS + 2];
  int order[KILN_MAX_DIMS + 2];
  if (cf && ok && affine_indices(k, r0, depth, cf, ok)) { /* out of memory: the kernel keeps its order */
    loop_weights(k, r0, depth, cf, w);
    if (choose_order(k, r0, depth, w, order)) apply_order(k, r0, depth, order);
  }
  free(cf);
  free(ok);
}
