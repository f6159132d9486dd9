/*
 * algebra.c — algebraic simplification of a schedule before fusion:
 * identities, common-subexpression elimination by hash-consing, constant
 * folding; dead nodes then drop out when the runtime collects the
 * schedule again (DCE: a node no root reaches is not scheduled).
 *
 * Nodes are visited in post-order, so a node's inputs are final when it
 * is visited. Each rewrite redirects the edges of the node's readers; the
 * graph stays pure and every rewritten value is bit-identical:
 *  - identities: x * 1, x / 1, x - 0 and, for integers, x + 0 (for floats
 *    -0.0 + 0 is +0.0, so x + 0 is not an identity); a CAST to the same
 *    dtype; a DETACH (the reader's new edge is marked no_grad, so a
 *    recipe kept after forcing still stops gradients there). The reader
 *    then reads x directly — only when x's view is the
 *    identity layout (contiguous, offset 0, same sizes and dtype), so the
 *    reader's view of the node is the same view of x (and x is on the
 *    same device: a CAST to another device is a copy, never an identity).
 *  - CSE: two nodes with the same op, device, dtypes, sizes, attributes and the
 *    same inputs through the same views compute the same values; readers
 *    of the second read the first. A requested node keeps its identity.
 *  - constant folding: an elementwise node of F32/F64/I32/I64 whose inputs
 *    are all fill values (pending FULL) becomes a FULL itself for add, sub,
 *    mul, div (floats), neg, maximum and minimum, computed in its compute
 *    dtype and rounded as a kernel would.
 * (A double transpose never reaches the graph: views compose when they
 * are recorded.) Released edges are handed back to the caller, who drops
 * them once the schedule no longer points at the old nodes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* ------------------------------------------------------------- helpers */

static bool pending_full(const graph_node *n) { return !n->buffer && n->op == GRAPH_OP_FULL; }

static bool same_view(const graph_view *a, const graph_view *b) {
  if (a->ndim != b->ndim || a->offset != b->offset) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d] || a->strides[d] != b->strides[d]) return false;
  return true;
}

/* The view of input i is x's identity layout: offset 0, contiguous,
 * n's sizes. */
static bool identity_layout(const graph_node *n, int i) {
  graph_view id = graph_view_contiguous(n->ndim, n->sizes);
  const graph_input *in = &n->inputs[i];
  return in->node->dtype == n->dtype && in->node->numel == n->numel && same_view(&in->view, &id);
}

/* A fill value of exactly v (as its own dtype holds it). */
static bool fill_is(const graph_node *n, double v) {
  if (!pending_full(n)) return false;
  unsigned char tmp[8];
  graph_store_scalar(n->dtype, tmp, graph_attr_scalar(n));
  double got = graph_load_scalar(n->dtype, tmp);
  return got == v && !signbit(got);
}

/* The input n passes through unchanged, or -1. */
static int identity_input(const graph_node *n) {
  if (n->cdtype != n->dtype && n->op != GRAPH_OP_CAST) return -1;
  int x = -1;
  switch (n->op) {
  case GRAPH_OP_CAST:
  case GRAPH_OP_DETACH: x = 0; break;
  case GRAPH_OP_MUL: x = fill_is(n->inputs[1].node, 1) ? 0 : fill_is(n->inputs[0].node, 1) ? 1 : -1; break;
  case GRAPH_OP_DIV: x = fill_is(n->inputs[1].node, 1) ? 0 : -1; break;
  case GRAPH_OP_SUB: x = fill_is(n->inputs[1].node, 0) ? 0 : -1; break;
  case GRAPH_OP_ADD:
    if (graph_is_float(n->dtype)) return -1;
    x = fill_is(n->inputs[1].node, 0) ? 0 : fill_is(n->inputs[0].node, 0) ? 1 : -1;
    break;
  default: return -1;
  }
  return x >= 0 && identity_layout(n, x) && n->inputs[x].node->device == n->device ? x : -1;
}

/* ------------------------------------------------------ constant folding */

static bool foldable(const graph_node *n) {
  kiln_dtype d = n->dtype;
  if (!graph_op_is_elementwise(n->op) || n->cdtype != d) return false;
  if (d != KILN_F32 && d != KILN_F64 && d != KILN_I32 && d != KILN_I64) return false;
  for (int i = 0; i < n->n_inputs; i++)
    if (!pending_full(n->inputs[i].node)) return false;
  switch (n->op) {
  case GRAPH_OP_ADD: case GRAPH_OP_SUB: case GRAPH_OP_MUL: case GRAPH_OP_NEG: case GRAPH_OP_MAXIMUM:
  case GRAPH_OP_MINIMUM: return true;
  case GRAPH_OP_DIV: return graph_is_float(d);
  default: return false;
  }
}

/* Input i's fill value converted to n's dtype, as a kernel loads it. */
static double operand(const graph_node *n, int i) {
  const graph_node *f = n->inputs[i].node;
  unsigned char tmp[8];
  graph_store_scalar(f->dtype, tmp, graph_attr_scalar(f));
  double v = graph_load_scalar(f->dtype, tmp);
  graph_store_scalar(n->dtype, tmp, v);
  return graph_load_scalar(n->dtype, tmp);
}

static double fold_float(graph_op op, double a, double b, bool f32) {
  double r;
  switch (op) {
  case GRAPH_OP_ADD: r = f32 ? (double)((float)a + (float)b) : a + b; break;
  case GRAPH_OP_SUB: r = f32 ? (double)((float)a - (float)b) : a - b; break;
  case GRAPH_OP_MUL: r = f32 ? (double)((float)a * (float)b) : a * b; break;
  case GRAPH_OP_DIV: r = f32 ? (double)((float)a / (float)b) : a / b; break;
  case GRAPH_OP_NEG: r = -a; break;
  case GRAPH_OP_MAXIMUM: r = isnan(a) || isnan(b) ? NAN : fmax(a, b); break;
  default: r = isnan(a) || isnan(b) ? NAN : fmin(a, b); break;
  }
  return r;
}

/* Integer ops wrap in the dtype (two's complement), as kernels do. */
static int64_t fold_int(graph_op op, int64_t a, int64_t b, bool i32) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b, r;
  switch (op) {
  case GRAPH_OP_ADD: r = ua + ub; break;
  case GRAPH_OP_SUB: r = ua - ub; break;
  case GRAPH_OP_MUL: r = ua * ub; break;
  case GRAPH_OP_NEG: r = 0 - ua; break;
  case GRAPH_OP_MAXIMUM: return a > b ? a : b;
  default: return a < b ? a : b;
  }
  return i32 ? (int64_t)(int32_t)(uint32_t)r : (int64_t)r;
}

/* n becomes a FULL of its computed value; its inputs go to `dropped`. */
static void fold(graph_node *n, graph_node **dropped, int *n_dropped) {
  double a = operand(n, 0), b = n->n_inputs > 1 ? operand(n, 1) : 0, v;
  if (graph_is_float(n->dtype)) v = fold_float(n->op, a, b, n->dtype == KILN_F32);
  else v = (double)fold_int(n->op, (int64_t)a, (int64_t)b, n->dtype == KILN_I32);
  for (int i = 0; i < n->n_inputs; i++) dropped[(*n_dropped)++] = n->inputs[i].node;
  n->n_inputs = 0;
  n->op = GRAPH_OP_FULL;
  graph_attr_set_scalar(n, v);
  graph_attr_set_scalar2(n, 0);
}

/* ------------------------------------------------------------------ CSE */

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t node_hash(const graph_node *n) {
  uint64_t h = mix(mix(n->op, n->dtype), (uint64_t)n->numel);
  for (int i = 0; i < n->n_inputs; i++) {
    h = mix(h, (uint64_t)(uintptr_t)n->inputs[i].node);
    h = mix(h, (uint64_t)n->inputs[i].view.offset);
    for (int d = 0; d < n->inputs[i].view.ndim; d++) h = mix(h, (uint64_t)n->inputs[i].view.strides[d]);
  }
  return h;
}

static bool same_node(const graph_node *a, const graph_node *b) {
  if (a->op != b->op || a->device != b->device || a->dtype != b->dtype || a->cdtype != b->cdtype || a->ndim != b->ndim ||
      a->numel != b->numel || a->n_inputs != b->n_inputs || a->attr_len != b->attr_len)
    return false;
  if (memcmp(a->attr, b->attr, a->attr_len)) return false; /* every attribute, bitwise: -0.0 is not 0.0 */
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d]) return false;
  for (int i = 0; i < a->n_inputs; i++)
    if (a->inputs[i].node != b->inputs[i].node || a->inputs[i].no_grad != b->inputs[i].no_grad ||
        !same_view(&a->inputs[i].view, &b->inputs[i].view))
      return false;
  return true;
}

static bool cse_candidate(const graph_node *n) {
  graph_kind k = graph_ops[n->op].kind;
  return !n->buffer && (graph_op_is_elementwise(n->op) || k == GRAPH_REDUCE || k == GRAPH_SCAN || k == GRAPH_EXTERN ||
                         k == GRAPH_SCATTER);
}

typedef struct cse_table {
  const graph_node **slots;
  size_t cap;
} cse_table;

/* The earlier node equal to n, after inserting n when there is none. */
static const graph_node *cse_find(cse_table *t, const graph_node *n) {
  for (size_t i = node_hash(n) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    if (!t->slots[i]) {
      t->slots[i] = n;
      return NULL;
    }
    if (same_node(t->slots[i], n)) return t->slots[i];
  }
}

/* ---------------------------------------------------------------- pass */

/* What readers of n read instead (set by this pass in n's plan entry),
 * or NULL. */
static graph_node *replacement(const pass_plan *p, const graph_node *n) {
  int at = pass_pos(p, n);
  return !n->buffer && at >= 0 ? p->e[at].replace : NULL;
}

/* Points n's inputs at their replacements. */
static void redirect(const pass_plan *p, graph_node *n, graph_node **dropped, int *n_dropped) {
  for (int i = 0; i < n->n_inputs; i++) {
    graph_node *in = n->inputs[i].node, *to = replacement(p, in);
    if (!to) continue;
    dropped[(*n_dropped)++] = in;
    n->inputs[i].node = graph_node_retain(to);
    n->inputs[i].no_grad |= p->e[pass_pos(p, in)].replace_no_grad;
  }
}

/* Sets x's (at plan position i) replacement `to` (an input it passes
 * through, input `id`, or an equal earlier node when id < 0), or one
 * further when `to` was replaced itself; notes whether the readers' path
 * to it crosses a DETACH. */
static void set_replacement(pass_plan *p, int i, graph_node *x, graph_node *to, int id) {
  if (!to) return;
  bool no_grad = id >= 0 && (x->op == GRAPH_OP_DETACH || x->inputs[id].no_grad);
  graph_node *further = replacement(p, to);
  if (further) no_grad |= p->e[pass_pos(p, to)].replace_no_grad;
  p->e[i].replace = further ? further : to;
  p->e[i].replace_no_grad = no_grad;
}

static bool is_root(const graph_node *n, graph_node *const *roots, int n_roots) {
  for (int i = 0; i < n_roots; i++)
    if (roots[i] == n) return true;
  return false;
}

int pass_simplify(pass_plan *p, graph_node *const *roots, int n_roots, graph_node ***dropped_out) {
  int n = p->n;
  graph_node **dropped = graph_malloc(sizeof *dropped * (size_t)(2 * n * GRAPH_MAX_INPUTS + 1));
  cse_table t = {.cap = 16};
  while (t.cap < (size_t)n * 2) t.cap *= 2;
  t.slots = graph_calloc(t.cap, sizeof *t.slots);
  *dropped_out = NULL;
  if (!dropped || !t.slots) {
    free(dropped);
    free(t.slots);
    return 0; /* no memory: simply no rewrites */
  }
  int n_dropped = 0;
  for (int i = 0; i < n; i++) p->e[i].replace = NULL, p->e[i].replace_no_grad = false;
  for (int i = 0; i < n; i++) {
    graph_node *x = p->order[i];
    redirect(p, x, dropped, &n_dropped);
    if (foldable(x)) {
      fold(x, dropped, &n_dropped);
      continue;
    }
    if (is_root(x, roots, n_roots)) {
      if (cse_candidate(x)) cse_find(&t, x); /* may be the one others reuse */
      continue;
    }
    int id = graph_op_is_elementwise(x->op) ? identity_input(x) : -1;
    graph_node *to = id >= 0 ? x->inputs[id].node : cse_candidate(x) ? (graph_node *)cse_find(&t, x) : NULL;
    set_replacement(p, i, x, to, id);
  }
  free(t.slots);
  if (n_dropped == 0) {
    free(dropped);
    return 0;
  }
  *dropped_out = dropped;
  return n_dropped;
}
