/*
 * views.c — view and stride simplification of an elementwise kernel's
 * loop nest: size-1 dims are dropped and neighbouring dims are merged when
 * they are contiguous in every operand, so a kernel over [64, 3, 1, 4096]
 * that reads contiguous and broadcast operands runs one loop of 786,432
 * (or [64, 12288] when one operand broadcasts along dim 0) instead of four
 * nested loops — fewer loop levels, longer vectorisable inner loops, no
 * index arithmetic for the merged dims.
 *
 * Applies to a "pointwise" group: an elementwise or cast root whose fused
 * producers all have the root's sizes and are read through the plain
 * contiguous view, so every access in the kernel — the output, each
 * external read and each inlined source — is offset + Σ i[d] · stride[d]
 * over the root's index i. Dims a (outer) and b (inner) merge when, for
 * every access, stride[a] == stride[b] · size[b] (true for the contiguous
 * output, for two broadcast dims, and for any row-major layout).
 *
 * A reduction root (not argmax/argmin) with such producers of its input's
 * sizes is a group too: its loop space is its input's sizes, and two dims
 * merge only when both are reduced or both kept, so a convolution's bias
 * gradient, a sum of [N, C, H, W] over N, H and W, loops over [N, C, H·W]
 * with a long contiguous inner loop instead of rows of W.
 *
 * A fused pointwise producer may also be read through a reshape of its
 * contiguous layout (a gradient's cotangent [1, N, C, H·W] read as
 * [N, C, H, W]): when each of its own input views reshapes to the root's
 * sizes too (graph_view_reshape: no copy), it joins the group as a copy
 * over the root's sizes, so the bias gradient above still merges H and W.
 *
 * The rewrite is done on shallow copies of the group's nodes with the
 * merged sizes and strides; lowering then runs unchanged on the copies.
 * Copies keep their schedule position, so bindings and the schedule cache
 * see the original graph.
 */
#include <stdlib.h>
#include <string.h>

#include "lower.h"

#define MAX_GROUP 256
#define MAX_RESHAPED 8 /* producers read through a reshape, a group */

typedef struct group {
  const graph_node *nodes[MAX_GROUP]; /* the root first, then fused producers */
  const graph_node *orig[MAX_GROUP];  /* the graph's node of each (nodes[m] may be a reshaped copy) */
  graph_node reshaped[MAX_RESHAPED];  /* those copies, over the root's sizes */
  int n, n_reshaped;
} group;

/* A reduction the loops of its input can be merged for. */
static bool merges_reduce(const graph_node *root) {
  return graph_ops[root->op].kind == GRAPH_REDUCE && root->op != GRAPH_OP_ARGMAX && root->op != GRAPH_OP_ARGMIN &&
         root->n_inputs == 1;
}

/* The group's loop space: the root's sizes, or a reduction's input's. */
static const int64_t *space(const graph_node *root, int *ndim) {
  const graph_view *v = merges_reduce(root) ? &root->inputs[0].view : NULL;
  *ndim = v ? v->ndim : root->ndim;
  return v ? v->sizes : root->sizes;
}

static bool same_sizes(const graph_view *v, const graph_node *root) {
  int nd;
  const int64_t *sizes = space(root, &nd);
  return v->ndim == nd && memcmp(v->sizes, sizes, sizeof v->sizes[0] * (size_t)nd) == 0;
}

bool pass_plain_view(const graph_view *v, const graph_node *src) {
  if (v->offset != 0 || v->ndim != src->ndim) return false;
  graph_view c = graph_view_contiguous(src->ndim, src->sizes);
  return memcmp(v->sizes, c.sizes, sizeof c.sizes[0] * (size_t)c.ndim) == 0 &&
         memcmp(v->strides, c.strides, sizeof c.strides[0] * (size_t)c.ndim) == 0;
}

static int find(const group *g, const graph_node *n) {
  for (int i = 0; i < g->n; i++)
    if (g->orig[i] == n) return i;
  return -1;
}

/* v reads all of src in order: its contiguous layout, reshaped (or as
 * it is: callers try pass_plain_view first). */
static bool reshape_view(const graph_view *v, const graph_node *src) {
  if (v->offset != 0 || graph_view_numel(v) != src->numel) return false;
  graph_view c = graph_view_contiguous(v->ndim, v->sizes);
  return memcmp(v->strides, c.strides, sizeof c.strides[0] * (size_t)c.ndim) == 0;
}

/* A copy of pointwise src over the root's sizes, each input view
 * reshaped to them; NULL when one does not reshape (or no room). */
static const graph_node *reshaped_copy(group *g, const graph_node *src, const graph_node *root) {
  int nd;
  const int64_t *sizes = space(root, &nd);
  if (!graph_op_is_pointwise(src->op) || g->n_reshaped == MAX_RESHAPED) return NULL;
  graph_node *c = &g->reshaped[g->n_reshaped];
  *c = *src;
  c->ndim = nd;
  memcpy(c->sizes, sizes, sizeof c->sizes[0] * (size_t)nd);
  for (int i = 0; i < src->n_inputs; i++)
    if (!graph_view_reshape(&src->inputs[i].view, nd, sizes, &c->inputs[i].view)) return NULL;
  g->n_reshaped++;
  return c;
}

/* Collects the pointwise group below n; false when it is not one. */
static bool collect(const pass_plan *p, group *g, const graph_node *n, const graph_node *root) {
  int nd;
  const int64_t *sizes = space(root, &nd);
  bool reduce_root = n == root && merges_reduce(root);
  if (!reduce_root && (!graph_op_is_pointwise(n->op) || n->ndim != nd ||
                       memcmp(n->sizes, sizes, sizeof n->sizes[0] * (size_t)nd) != 0))
    return false;
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    const graph_view *v = &n->inputs[i].view;
    if (!same_sizes(v, root)) return false;
    if (!pass_fused(p, in)) continue; /* an external read or an inlined source */
    bool plain = pass_plain_view(v, in);
    if (!plain && !reshape_view(v, in)) return false;
    int at = find(g, in);
    if (at >= 0) { /* read the same way by every consumer */
      if (plain != (g->nodes[at] == in)) return false;
      continue;
    }
    const graph_node *node = plain ? in : reshaped_copy(g, in, root);
    if (!node || g->n == MAX_GROUP) return false;
    g->orig[g->n] = in;
    g->nodes[g->n++] = node;
    if (!collect(p, g, node, root)) return false;
  }
  return true;
}

/* The merged loop dims: groups[j] is the outermost root dim of loop j;
 * dims of size 1 belong to no loop. Returns the loop count. */
static int plan(const group *g, int *first, int64_t *sizes) {
  const graph_node *root = g->nodes[0];
  int n_loops = 0, inner = -1, nd; /* inner: the root dim that starts the current loop */
  const int64_t *space_sizes = space(root, &nd);
  uint32_t mask = merges_reduce(root) ? graph_attr_reduce_mask(root) : 0;
  int64_t extent = 1;
  for (int d = nd - 1; d >= 0; d--) {
    if (space_sizes[d] == 1) continue;
    bool merge = inner >= 0 && !(mask & (1u << d)) == !(mask & (1u << inner));
    for (int m = 0; m < g->n && merge; m++)
      for (int i = 0; i < g->nodes[m]->n_inputs && merge; i++) {
        const graph_view *v = &g->nodes[m]->inputs[i].view;
        merge = v->strides[d] == v->strides[inner] * extent;
      }
    if (merge) {
      extent *= space_sizes[d];
      sizes[n_loops - 1] = extent;
      first[n_loops - 1] = d;
    } else {
      inner = d;
      extent = space_sizes[d];
      first[n_loops] = d;
      sizes[n_loops++] = extent;
    }
  }
  /* innermost first so far: reverse */
  for (int a = 0, b = n_loops - 1; a < b; a++, b--) {
    int f = first[a];
    first[a] = first[b], first[b] = f;
    int64_t s = sizes[a];
    sizes[a] = sizes[b], sizes[b] = s;
  }
  return n_loops;
}

/* v over the merged loops: loop j keeps the stride of its innermost dim. */
static void merge_view(graph_view *v, int n_loops, const int *first, const int64_t *sizes, int root_ndim) {
  graph_view out = {.ndim = n_loops > 0 ? n_loops : 1, .offset = v->offset};
  out.sizes[0] = 1;
  out.strides[0] = 0;
  for (int j = 0; j < n_loops; j++) {
    int last = j + 1 < n_loops ? first[j + 1] - 1 : root_ndim - 1;
    while (last > first[j] && v->sizes[last] == 1) last--; /* skip size-1 dims inside the loop */
    out.sizes[j] = sizes[j];
    out.strides[j] = v->strides[last];
  }
  *v = out;
}

/* A reduction's copy over the merged loops: kept loops keep their extent,
 * reduced ones are 1, and the mask marks the reduced loops. */
static void reduce_copy(graph_node *c, int n_loops, const int *first, const int64_t *sizes) {
  uint32_t mask = graph_attr_reduce_mask(c), merged = 0;
  for (int j = 0; j < n_loops; j++) {
    bool reduced = mask & (1u << first[j]);
    c->sizes[j] = reduced ? 1 : sizes[j];
    if (reduced) merged |= 1u << j;
  }
  graph_attr_set_reduce_mask(c, merged);
}

bool pass_merge_loops(const pass_plan *p, const graph_node *root, pass_merged *out) {
  memset(out, 0, sizeof *out);
  group *g = graph_malloc(sizeof *g);
  if (!g) return false;
  g->nodes[0] = g->orig[0] = root;
  g->n = 1;
  g->n_reshaped = 0;
  int first[KILN_MAX_DIMS], nd;
  int64_t sizes[KILN_MAX_DIMS];
  space(root, &nd);
  int n_loops = collect(p, g, root, root) ? plan(g, first, sizes) : nd;
  if (n_loops == nd || root->numel == 0 || (merges_reduce(root) && n_loops == 0)) {
    free(g);
    return false;
  }
  graph_node *copies = graph_malloc(sizeof *copies * (size_t)g->n);
  if (!copies) {
    free(g);
    return false;
  }
  for (int m = 0; m < g->n; m++) {
    graph_node *c = &copies[m];
    *c = *g->nodes[m];
    c->ndim = n_loops > 0 ? n_loops : 1;
    c->sizes[0] = 1;
    for (int j = 0; j < n_loops; j++) c->sizes[j] = sizes[j];
    if (m == 0 && merges_reduce(root)) reduce_copy(c, n_loops, first, sizes);
    for (int i = 0; i < c->n_inputs; i++) {
      merge_view(&c->inputs[i].view, n_loops, first, sizes, nd);
      int at = find(g, c->inputs[i].node);
      if (at >= 0 && pass_fused(p, c->inputs[i].node)) c->inputs[i].node = &copies[at];
    }
  }
  out->root = &copies[0];
  out->copies = copies;
  free(g);
  return true;
}

void pass_merged_free(pass_merged *m) {
  free(m->copies);
  memset(m, 0, sizeof *m);
}
