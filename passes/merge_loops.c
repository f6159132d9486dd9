/*
 * merge_loops.c — view and stride simplification of an elementwise kernel's
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
 * A fused pointwise producer read through a reshape that splits the
 * root's dims ([N, C, 14, 2, 14, 2], 2x2 pooling windows, read as
 * [N, C, 28, 28] by the ReLU's gradient) would need its index divided by
 * the split sizes: instead the loop space is refined to the dims both
 * shapes split into, the root too becoming a copy over them (every
 * strided view splits a dim without a copy), so every read is strided.
 * A fused pointwise producer read through another view (a broadcast) stays
 * outside the group: lowering computes it at its own index, mapped
 * through the view, and two loops merge only where that view broadcasts
 * both (else the producer's dims would be divided back out of the merged
 * index).
 *
 * The rewrite is done on shallow copies of the group's nodes with the
 * merged sizes and strides; lowering then runs unchanged on the copies.
 * Copies keep their schedule position, so bindings and the schedule cache
 * see the original graph.
 */
#include <stdlib.h>
#include <string.h>

#include "pass_internal.h"

/* The group's arrays grow with it (no cap of their own: fusion keeps a
 * group within PASS_MAX_GROUP nodes); when one cannot, `oom` is set and
 * the merge fails with it. */
typedef struct group {
  const graph_node **nodes;  /* [cap] the root first, then fused producers */
  const graph_node **orig;   /* [cap] the graph's node of each (nodes[m] may be a reshaped copy) */
  int n, cap;
  graph_node **reshaped;     /* [cap_reshaped] those copies, over the loop space, each allocated */
  int n_reshaped, cap_reshaped;
  int nd;                        /* the loop space: the root's sizes (a reduction's */
  int64_t sizes[KILN_MAX_DIMS];  /* input's), or their refinement (refine) */
  bool refined;
  bool oom;
} group;

/* Doubles an array of pointers *arr of capacity *cap when n reaches it;
 * false (g->oom set) when it cannot. */
static bool room(group *g, const graph_node ***arr, int n, int cap) {
  if (n < cap) return true;
  const graph_node **grown = graph_realloc(*arr, sizeof *grown * (size_t)(cap ? 2 * cap : 32));
  if (!grown) g->oom = true;
  else *arr = grown;
  return grown != NULL;
}

/* Room for one more member: nodes and orig grow together. */
static bool member_room(group *g) {
  if (!room(g, &g->nodes, g->n, g->cap) || !room(g, &g->orig, g->n, g->cap)) return false;
  if (g->n == g->cap) g->cap = g->cap ? 2 * g->cap : 32;
  return true;
}

/* Drops the reshaped copies (the group is collected again, or freed). */
static void drop_reshaped(group *g) {
  for (int i = 0; i < g->n_reshaped; i++) free(g->reshaped[i]);
  g->n_reshaped = 0;
}

static void group_free(group *g) {
  drop_reshaped(g);
  free(g->reshaped);
  free(g->nodes);
  free(g->orig);
}

/* A reduction the loops of its input can be merged for. */
static bool merges_reduce(const graph_node *root) {
  return graph_ops[root->op].kind == GRAPH_REDUCE && root->op != GRAPH_OP_ARGMAX && root->op != GRAPH_OP_ARGMIN &&
         root->n_inputs == 1;
}

/* The root's own loop space: its sizes, or a reduction's input's. */
static void root_space(group *g, const graph_node *root) {
  const graph_view *v = merges_reduce(root) ? &root->inputs[0].view : NULL;
  g->nd = v ? v->ndim : root->ndim;
  memcpy(g->sizes, v ? v->sizes : root->sizes, sizeof g->sizes[0] * (size_t)g->nd);
  g->refined = false;
}

static bool same_sizes(const group *g, int ndim, const int64_t *sizes) {
  return ndim == g->nd && memcmp(sizes, g->sizes, sizeof sizes[0] * (size_t)ndim) == 0;
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

/* A copy of pointwise src over the loop space, each input view
 * reshaped to it; NULL when one does not reshape (or, g->oom set, no
 * memory). */
static const graph_node *reshaped_copy(group *g, const graph_node *src) {
  if (!graph_op_is_pointwise(src->op)) return NULL;
  if (g->n_reshaped == g->cap_reshaped) {
    int cap = g->cap_reshaped ? 2 * g->cap_reshaped : 16;
    graph_node **grown = graph_realloc(g->reshaped, sizeof *grown * (size_t)cap);
    if (!grown) {
      g->oom = true;
      return NULL;
    }
    g->reshaped = grown;
    g->cap_reshaped = cap;
  }
  graph_node *c = graph_malloc(sizeof *c);
  if (!c) {
    g->oom = true;
    return NULL;
  }
  *c = *src;
  c->ndim = g->nd;
  memcpy(c->sizes, g->sizes, sizeof c->sizes[0] * (size_t)g->nd);
  for (int i = 0; i < src->n_inputs; i++)
    if (!graph_view_reshape(&src->inputs[i].view, g->nd, g->sizes, &c->inputs[i].view)) {
      free(c);
      return NULL;
    }
  g->reshaped[g->n_reshaped++] = c;
  return c;
}

/* The group member a read of `in` through v (over the loop space) is,
 * or -1: an external read, or a fused producer read through a broadcast
 * or strided view (computed at its own index). */
static int in_group(const pass_plan *p, const group *g, const graph_node *in, const graph_view *v) {
  if (!pass_fused(p, in) || (!pass_plain_view(v, in) && !reshape_view(v, in))) return -1;
  return find(g, in);
}

/* Collects the pointwise group below n; false when it is not one. */
static bool collect(const pass_plan *p, group *g, const graph_node *n, const graph_node *root) {
  bool reduce_root = n == root && merges_reduce(root);
  if (!reduce_root && (!graph_op_is_pointwise(n->op) || !same_sizes(g, n->ndim, n->sizes))) return false;
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    const graph_view *v = &n->inputs[i].view;
    if (!same_sizes(g, v->ndim, v->sizes)) return false;
    if (!pass_fused(p, in)) continue; /* an external read or an inlined source */
    bool plain = pass_plain_view(v, in);
    if (!plain && !reshape_view(v, in)) { /* outside the group: computed at its own index (lowering maps v) */
      if (!graph_op_is_pointwise(in->op) || p->e[pass_pos(p, in)].row_dep) return false; /* row fusion keeps its loops */
      continue;
    }
    int at = find(g, in);
    if (at >= 0) { /* read the same way by every consumer */
      if (plain != (g->nodes[at] == in)) return false;
      continue;
    }
    const graph_node *node = plain ? in : reshaped_copy(g, in);
    if (!node || !member_room(g)) return false;
    g->orig[g->n] = in;
    g->nodes[g->n++] = node;
    if (!collect(p, g, node, root)) return false;
  }
  return true;
}

/* ------------------------------------------------- refined loop space */

/* The cut points of a contiguous layout of sizes [nd]: the element
 * strides of its dims of size > 1, ascending, then numel. Returns their
 * count. */
static int cut_points(int nd, const int64_t *sizes, int64_t *cuts) {
  int n = 0;
  int64_t run = 1;
  for (int d = nd - 1; d >= 0; d--)
    if (sizes[d] != 1) cuts[n++] = run, run *= sizes[d];
  cuts[n++] = run;
  return n;
}

/* Refines the loop space by sizes [nd] (same numel): the dims both
 * layouts' dims split into — [N, C, 28, 28] by [N, C, 14, 2, 14, 2] is
 * the latter. False when they have no common refinement (their cut
 * points do not divide one another in order) or it has too many dims. */
static bool refine_by(group *g, int nd, const int64_t *sizes) {
  int64_t a[KILN_MAX_DIMS + 1], b[KILN_MAX_DIMS + 1], u[2 * KILN_MAX_DIMS + 2];
  int na = cut_points(g->nd, g->sizes, a), nb = cut_points(nd, sizes, b), n = 0;
  for (int i = 0, j = 0; i < na || j < nb;) {
    int64_t next = j == nb || (i < na && a[i] < b[j]) ? a[i++] : b[j++];
    if (n && u[n - 1] == next) continue;
    if (n && next % u[n - 1]) return false;
    u[n++] = next;
  }
  if (n - 1 > KILN_MAX_DIMS) return false;
  if (n == na) return true; /* nothing new */
  g->nd = n - 1;
  for (int k = 0; k < g->nd; k++) g->sizes[k] = u[n - 1 - k] / u[n - 2 - k];
  g->refined = true;
  return true;
}

/* The producers refine has visited (grows; oom in the group). */
typedef struct visited {
  const graph_node **nodes;
  int n, cap;
} visited;

/* Refines the loop space by the sizes of every fused pointwise producer
 * below n that is read through a reshape of its whole contiguous layout,
 * so that every read of the group is a strided view of the space (no
 * division of the index by a reshape's sizes). */
static void refine(const pass_plan *p, group *g, const graph_node *n, visited *seen) {
  for (int i = 0; i < n->n_inputs && !g->oom; i++) {
    const graph_node *in = n->inputs[i].node;
    if (!pass_fused(p, in) || !graph_op_is_pointwise(in->op)) continue;
    bool was = false;
    for (int s = 0; s < seen->n && !was; s++) was = seen->nodes[s] == in;
    if (was || !room(g, &seen->nodes, seen->n, seen->cap)) continue;
    if (seen->n == seen->cap) seen->cap = seen->cap ? 2 * seen->cap : 32;
    seen->nodes[seen->n++] = in;
    const graph_view *v = &n->inputs[i].view;
    if (in->numel == g->nodes[0]->numel && !pass_plain_view(v, in) && reshape_view(v, in) &&
        !refine_by(g, in->ndim, in->sizes))
      continue;
    refine(p, g, in, seen);
  }
}

/* The merged loop dims: groups[j] is the outermost root dim of loop j;
 * dims of size 1 belong to no loop. Returns the loop count. */
/* Dims d and inner (the loop being built) of view v may form one loop:
 * v's stride of d is the extent's, and when v reads a fused producer
 * outside the group (computed at its own index, lowering maps v onto
 * it) only when both are broadcast (a merged dim the producer's own
 * dims split would need a division by their sizes). */
static bool merges(const pass_plan *p, const group *g, const graph_input *in, int d, int inner, int64_t extent) {
  const graph_view *v = &in->view;
  if (v->strides[d] != v->strides[inner] * extent) return false;
  if (!pass_fused(p, in->node) || in_group(p, g, in->node, v) >= 0) return true;
  return v->strides[d] == 0 && v->strides[inner] == 0;
}

static int plan(const pass_plan *p, const group *g, int *first, int64_t *sizes) {
  const graph_node *root = g->nodes[0];
  int n_loops = 0, inner = -1, nd = g->nd; /* inner: the root dim that starts the current loop */
  const int64_t *space_sizes = g->sizes;
  uint32_t mask = merges_reduce(root) ? graph_attr_reduce_mask(root) : 0;
  int64_t extent = 1;
  for (int d = nd - 1; d >= 0; d--) {
    if (space_sizes[d] == 1) continue;
    bool merge = inner >= 0 && !(mask & (1u << d)) == !(mask & (1u << inner));
    for (int m = 0; m < g->n && merge; m++)
      for (int i = 0; i < g->nodes[m]->n_inputs && merge; i++)
        merge = merges(p, g, &g->nodes[m]->inputs[i], d, inner, extent);
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

/* Collects the group of an elementwise root over the refined loop space
 * (refine), the root itself a copy over it; false when the space is the
 * root's own or some view of the group does not reshape to it. */
static bool collect_refined(const pass_plan *p, group *g, const graph_node *root) {
  visited seen = {0};
  if (merges_reduce(root) || root->numel == 0) return false;
  refine(p, g, root, &seen);
  free(seen.nodes);
  if (!g->refined || g->oom) return false;
  const graph_node *r = reshaped_copy(g, root);
  if (r) g->nodes[0] = r;
  if (r && collect(p, g, r, root)) return true;
  root_space(g, root);
  g->nodes[0] = root;
  g->n = 1;
  drop_reshaped(g);
  return false;
}

bool pass_merge_loops(const pass_plan *p, const graph_node *root, pass_merged *out, bool *oom) {
  memset(out, 0, sizeof *out);
  group *g = graph_calloc(1, sizeof *g);
  if (!g || !member_room(g)) {
    if (g) group_free(g);
    free(g);
    *oom = true;
    return false;
  }
  g->nodes[0] = g->orig[0] = root;
  g->n = 1;
  root_space(g, root);
  int first[KILN_MAX_DIMS], nd = g->nd;
  int64_t sizes[KILN_MAX_DIMS];
  bool grouped = collect_refined(p, g, root) || (!g->oom && collect(p, g, root, root));
  int n_loops = grouped ? plan(p, g, first, sizes) : nd;
  graph_node *copies = NULL;
  bool merged = !g->oom && !((n_loops == nd && !g->refined) || root->numel == 0 || (merges_reduce(root) && n_loops == 0));
  if (merged && !(copies = graph_malloc(sizeof *copies * (size_t)g->n))) g->oom = true;
  if (!copies) {
    *oom = g->oom;
    group_free(g);
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
      const graph_node *in = c->inputs[i].node;
      int at = in_group(p, g, in, &c->inputs[i].view);
      merge_view(&c->inputs[i].view, n_loops, first, sizes, g->nd);
      if (at >= 0) c->inputs[i].node = &copies[at];
    }
  }
  out->root = &copies[0];
  out->copies = copies;
  group_free(g);
  free(g);
  return true;
}

void pass_merged_free(pass_merged *m) {
  free(m->copies);
  memset(m, 0, sizeof *m);
}
