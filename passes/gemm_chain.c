/*
 * gemm_chain.c — which elementwise consumers of a matmul its GEMM
 * applies to each output tile before the store (pass_gemm_epilogue_of):
 * the fusion of bias, activation, scale and residual into the
 * contraction (issue 32; docs/internals.md, "The generated GEMM", fused
 * epilogues).
 *
 * The fuser leaves a MATMUL materialized (fuse.c rule 5: a library reads
 * buffers) and fuses its elementwise readers into one kernel, the
 * epilogue kernel. When that kernel's group is a plain chain from the
 * product — each node (add, sub, mul, div, maximum, minimum, relu,
 * clamp) reading the previous one through its row-major view (of any
 * rank: kiln_linear's 3-D result is C reshaped), plus at most one
 * operand already realized (a bias, a residual: any view of [M, N],
 * broadcast or not) or a fill value (a scale) — and
 * nothing else reads the product or the chain, the chain is the
 * epilogue: the runtime may compute the product with the chain applied
 * to the tile in registers and store the kernel's result directly
 * (runtime/gemm_fused.c), or run both kernels as planned. Either way the
 * decisions in the plan stay as pass_fuse made them.
 */
#include <string.h>

#include "passes.h"

static bool is_root(const graph_node *n, graph_node *const *roots, int n_roots) {
  for (int i = 0; i < n_roots; i++)
    if (roots[i] == n) return true;
  return false;
}

/* v, a view over a node of sizes [..., N] (M·N elements: the product's
 * C, reshaped as kiln_linear does for a 3-D input), as the [M, N] view of
 * C it reads: its leading dims merged into one (possible when each outer
 * one steps by the extent of those inside it, or all broadcast); false
 * when they do not merge. */
static bool as_matrix(const graph_view *v, int64_t m, int64_t n, graph_view *out) {
  int nd = v->ndim;
  if (nd < 1 || v->sizes[nd - 1] != n) return false;
  int64_t stride = 0, extent = 1;
  bool seen = false;
  for (int d = nd - 2; d >= 0; d--) {
    if (v->sizes[d] == 1) continue;
    if (!seen) stride = v->strides[d], seen = true;
    else if (v->strides[d] != stride * extent) return false;
    extent *= v->sizes[d];
  }
  if (extent != m) return false;
  *out = (graph_view){.ndim = 2, .offset = v->offset};
  out->sizes[0] = m, out->sizes[1] = n;
  out->strides[0] = stride, out->strides[1] = v->strides[nd - 1];
  return true;
}

/* v reads all of the product so far (M·N elements) as it lies: offset 0,
 * row-major, whatever dims it gives it. */
static bool plain_view(const graph_view *v, int64_t m, int64_t n) {
  graph_view c;
  return as_matrix(v, m, n, &c) && c.offset == 0 && (m == 1 || c.strides[0] == n) && (n == 1 || c.strides[1] == 1);
}

/* The single reader of x in p after position `at` (reading it through
 * one edge), with that edge's index in *edge; NULL when there is none or
 * more than one. (Counted here: a cached schedule's plan has its fusion
 * decisions but not pass_fuse's consumer counts.) */
static graph_node *only_reader(const pass_plan *p, int at, const graph_node *x, int *edge) {
  graph_node *found = NULL;
  for (int j = at + 1; j < p->n; j++) {
    graph_node *r = p->order[j];
    if (r->buffer || p->e[j].replace) continue;
    for (int i = 0; i < r->n_inputs; i++) {
      if (r->inputs[i].node != x) continue;
      if (found) return NULL;
      found = r;
      *edge = i;
    }
  }
  return found;
}

/* v reads all of a batched product's C as it lies: its sizes, offset 0,
 * row-major. */
static bool plain_batched(const graph_view *v, const graph_node *x) {
  if (v->ndim != x->ndim || v->offset != 0) return false;
  for (int d = 0; d < v->ndim; d++)
    if (v->sizes[d] != x->sizes[d]) return false;
  return graph_view_is_contiguous(v);
}

/* How r reads the operand o of a step: for a 2-D product, as a view of
 * C's [M, N] (as_matrix); for a batched one, as r reads it (r has C's
 * sizes: batch dims first, then M and N). */
static bool operand_view(const graph_view *o, const graph_node *x, graph_view *out) {
  int nd = x->ndim;
  if (nd == 2) return as_matrix(o, x->sizes[0], x->sizes[1], out);
  *out = *o;
  return o->ndim == nd;
}

/* The step r makes of its input `edge` (the product so far, of the
 * product x's elements). */
static bool step_of(const graph_node *r, int edge, const graph_node *x, pass_gemm_step *s) {
  int nd = x->ndim;
  int64_t m = x->sizes[nd - 2], n = x->sizes[nd - 1];
  if (r->dtype != x->dtype || r->cdtype != x->dtype || r->numel != x->numel) return false;
  const graph_view *in = &r->inputs[edge].view;
  if (nd == 2 ? !plain_view(in, m, n) : !plain_batched(in, x)) return false;
  *s = (pass_gemm_step){.op = r->op};
  if (r->op == GRAPH_OP_RELU) return r->n_inputs == 1;
  if (r->op == GRAPH_OP_CLAMP) {
    s->lo = graph_attr_scalar(r), s->hi = graph_attr_scalar2(r);
    return r->n_inputs == 1;
  }
  if (r->op != GRAPH_OP_ADD && r->op != GRAPH_OP_SUB && r->op != GRAPH_OP_MUL && r->op != GRAPH_OP_DIV &&
      r->op != GRAPH_OP_MAXIMUM && r->op != GRAPH_OP_MINIMUM)
    return false;
  if (r->n_inputs != 2) return false;
  const graph_input *o = &r->inputs[1 - edge];
  bool full = o->node->op == GRAPH_OP_FULL && pass_is_inlined(o->node);
  /* a realized operand of T; a fill value of any dtype (the kernel computes in T: it is converted) */
  if (!(full || (o->node->buffer && o->node->dtype == x->dtype))) return false;
  s->swapped = edge == 1;
  s->arg = o->node;
  return operand_view(&o->view, x, &s->view);
}

bool pass_gemm_epilogue_of(const pass_plan *p, int at, graph_node *const *roots, int n_roots,
                           pass_gemm_epilogue *out) {
  graph_node *x = p->order[at];
  if (x->op != GRAPH_OP_MATMUL || x->ndim < 2 || x->buffer || is_root(x, roots, n_roots)) return false;
  if (x->dtype != KILN_F32 && x->dtype != KILN_F64) return false;
  pass_gemm_epilogue e = {0};
  graph_node *cur = x;
  for (int pos = at;;) {
    int edge = -1;
    graph_node *r = only_reader(p, pos, cur, &edge);
    if (!r || e.n_steps == PASS_GEMM_EPI_MAX || !step_of(r, edge, x, &e.step[e.n_steps])) return false;
    e.n_steps++;
    pos = pass_pos(p, r);
    if (pos < 0 || r->device != x->device || p->e[pos].host >= 0) return false;
    if (pass_is_kernel_root(p, pos)) {
      if (p->e[pos].stores >= 0) return false; /* a multi-output kernel: it stores more than this */
      e.root = r;
      *out = e;
      return true;
    }
    if (!p->e[pos].fused || is_root(r, roots, n_roots)) return false;
    cur = r;
  }
}

/* ------------------------------------------ general groups (lower_gemm.c) */

/* The nodes of a kernel's group (its root and the fused nodes below it),
 * each marked when it depends on the product. */
#define GROUP_MAX 128
typedef struct group {
  const graph_node *x; /* the product */
  const graph_node *node[GROUP_MAX];
  bool dep[GROUP_MAX];
  int n;
} group;

static int group_find(const group *g, const graph_node *n) {
  for (int i = 0; i < g->n; i++)
    if (g->node[i] == n) return i;
  return -1;
}

/* The kernel root that computes the fused node n: n's first reader, then
 * its first reader, ... up to a kernel root; NULL when the walk leaves
 * the plan. (Which kernel a fused node lands in is checked after: every
 * reader of a node depending on the product must be in that one.) */
static graph_node *kernel_of(const pass_plan *p, graph_node *n) {
  for (int guard = 0; guard < GROUP_MAX; guard++) {
    int at = pass_pos(p, n);
    if (at < 0) return NULL;
    if (pass_is_kernel_root(p, at)) return n;
    if (!p->e[at].fused) return NULL;
    graph_node *next = NULL;
    for (int j = at + 1; j < p->n && !next; j++) {
      graph_node *r = p->order[j];
      if (r->buffer || p->e[j].replace) continue;
      for (int i = 0; i < r->n_inputs && !next; i++)
        if (r->inputs[i].node == n) next = r;
    }
    if (!next) return NULL;
    n = next;
  }
  return NULL;
}

static bool elementwise(const graph_node *n) {
  graph_kind k = graph_ops[n->op].kind;
  return k == GRAPH_UNARY || k == GRAPH_BINARY || k == GRAPH_TERNARY || k == GRAPH_CAST;
}

/* Adds n (the root, or a node fused into it) and the fused nodes below it
 * to g: 1 when n depends on the product, 0 when not, -1 when the group
 * is not a tile epilogue (a node that is not elementwise; the product or
 * a node depending on it read other than at the reader's own flat index
 * — plain_view —; a dependent node of another element count; an input
 * that is neither realized, inlined, fused nor the product). */
static int visit(const pass_plan *p, group *g, const graph_node *n) {
  int at = group_find(g, n);
  if (at >= 0) return g->dep[at];
  if (!elementwise(n) || g->n == GROUP_MAX) return -1;
  int64_t m = g->x->sizes[0], nn = g->x->sizes[1];
  bool dep = false;
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *s = n->inputs[i].node;
    int d = 0;
    if (s == g->x) d = 1;
    else if (pass_fused(p, s)) d = visit(p, g, s);
    else if (!s->buffer && !pass_is_inlined(s)) d = -1;
    if (d < 0 || (d == 1 && !plain_view(&n->inputs[i].view, m, nn))) return -1;
    dep |= d == 1;
  }
  if (dep && n->numel != g->x->numel) return -1;
  g->node[g->n] = n;
  g->dep[g->n++] = dep;
  return dep;
}

bool pass_gemm_group_of(const pass_plan *p, int at, graph_node *const *roots, int n_roots, graph_node **root) {
  graph_node *x = p->order[at];
  if (x->op != GRAPH_OP_MATMUL || x->ndim != 2 || x->buffer || is_root(x, roots, n_roots)) return false;
  if (x->dtype != KILN_F32 && x->dtype != KILN_F64) return false;
  graph_node *first = NULL;
  for (int j = at + 1; j < p->n && !first; j++) /* the product's first reader */
    if (!p->order[j]->buffer && !p->e[j].replace)
      for (int i = 0; i < p->order[j]->n_inputs && !first; i++)
        if (p->order[j]->inputs[i].node == x) first = p->order[j];
  graph_node *r = first ? kernel_of(p, first) : NULL;
  int pos = r ? pass_pos(p, r) : -1;
  if (pos < 0 || r->device != x->device || p->e[pos].host >= 0 || p->e[pos].stores >= 0) return false;
  group g = {.x = x};
  if (visit(p, &g, r) != 1) return false;
  for (int j = at + 1; j < p->n; j++) { /* nothing outside the group reads the product or what depends on it */
    const graph_node *q = p->order[j];
    if (q->buffer || p->e[j].replace || group_find(&g, q) >= 0) continue;
    for (int i = 0; i < q->n_inputs; i++) {
      int k = group_find(&g, q->inputs[i].node);
      if (q->inputs[i].node == x || (k >= 0 && g.dep[k])) return false;
    }
  }
  *root = r;
  return true;
}
