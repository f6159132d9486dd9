/*
 * attention_pattern.c — graph_attention_match: an attention written out
 * of ordinary ops, found from its last matmul (docs/internals.md,
 * "Attention"). The fusion pass (passes/attention_plan.c) runs a match whose
 * intermediates only the chain reads through the fused kernel, and
 * kiln_grad (autograd/grad.c) differentiates one through the fused
 * backward; both read the same match, so the graph layer holds it.
 *
 * The chain, from o back (each node reading the next through the view of
 * its whole value: contiguous, offset 0, its own sizes, unless said):
 *
 *   o  = matmul(p, v)
 *   p  = div(e, s)          s read broadcast along the last dim
 *   s  = sum(e, -1, keepdim)
 *   e  = exp(xm)
 *   xm = sub(x, m)          m read broadcast (m = amax, or its DETACH)
 *   m  = amax(x, -1, keepdim)
 *   x  = where(keep, y, -inf) | add(y, mask) | add(mask, y) | y
 *   y  = mul(sc, c) | mul(c, sc) | div(sc, c) | sc      (c a pending fill)
 *   sc = matmul(q, kᵀ)
 *
 * which is what kiln_softmax records and what a user writes by hand
 * (kiln_scaled_dot_product_attention records its ATTENTION node
 * instead). A keep of `le(col, row)` over two aranges from 0 (col read
 * along the last dim, row along the one before: the causal mask
 * nn/attention.c and a user build) is the causal kind; any other keep or
 * mask is read as a tensor. Anything else — a cast in the chain, another
 * reduction, a mask that reads the scores — is no match. Under
 * KILN_ATTENTION=unfused nothing matches (measurements against the
 * composition).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

static int n_in(const graph_node *n) { return n->n_inputs ? n->n_inputs : n->n_hist; }

/* Edge e reads its node's whole value as it lies, in order: offset 0,
 * its element count, contiguous strides (a DETACH kiln_detach made is
 * flat [numel]: its readers and its own read are such views too). */
static bool plain(const graph_input *e) {
  const graph_node *n = e->node;
  const graph_view *v = &e->view;
  if (!n || v->offset != 0 || graph_view_numel(v) != n->numel) return false;
  graph_view c = graph_view_contiguous(v->ndim, v->sizes);
  for (int d = 0; d < v->ndim; d++)
    if (v->sizes[d] != 1 && v->strides[d] != c.strides[d]) return false;
  return true;
}

static bool same_sizes(const graph_node *a, const graph_node *b) {
  return a->ndim == b->ndim && !memcmp(a->sizes, b->sizes, sizeof *a->sizes * (size_t)a->ndim);
}

/* Edge e reads a keepdim row value (one element per row of reader's
 * [..., N], in order) broadcast along the last dim. */
static bool row_broadcast(const graph_input *e, const graph_node *reader) {
  const graph_node *n = e->node;
  const graph_view *v = &e->view;
  int nd = reader->ndim;
  if (!n || v->ndim != nd || v->offset != 0 || v->strides[nd - 1] != 0 ||
      memcmp(v->sizes, reader->sizes, sizeof *v->sizes * (size_t)nd))
    return false;
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; d++) rows *= v->sizes[d];
  if (n->numel != rows) return false;
  graph_view c = graph_view_contiguous(nd - 1, v->sizes);
  for (int d = 0; d < nd - 1; d++)
    if (v->sizes[d] != 1 && v->strides[d] != c.strides[d]) return false;
  return true;
}

/* n is op over a float dtype of the chain's, with its expected input
 * count. */
static bool is(const graph_node *n, graph_op op, int inputs, kiln_dtype dtype) {
  return n && n->op == op && n->dtype == dtype && n_in(n) == inputs && !n->hist_dropped && !n->opaque;
}

/* A keepdim reduction of the last dim only. */
static bool last_dim_reduce(const graph_node *n, graph_op op, kiln_dtype dtype) {
  return is(n, op, 1, dtype) && graph_attr_reduce_mask(n) == 1u << (n->ndim - 1) && plain(&n->inputs[0]) &&
         n->ndim == n->inputs[0].view.ndim;
}

/* A pending fill's value into *c. */
static bool fill_value(const graph_node *n, double *c) {
  if (!n || n->buffer || n->op != GRAPH_OP_FULL) return false;
  *c = graph_attr_scalar(n);
  return true;
}

static bool arange_from_0(const graph_node *n) {
  return n && !n->buffer && n->op == GRAPH_OP_ARANGE && graph_attr_scalar(n) == 0 && graph_attr_scalar2(n) == 1;
}

/* keep (read through e by x of sizes [..., L, S]) is le(col, row): col
 * an arange read along the last dim, row one read along the dim before,
 * and e reads keep's [L, S] as it lies (any batch dims broadcast). */
static bool causal_keep(const graph_input *e) {
  const graph_node *k = e->node;
  if (!k || k->buffer || k->op != GRAPH_OP_LE || k->n_inputs != 2 || k->ndim != 2) return false;
  const graph_view *v = &e->view, *col = &k->inputs[0].view, *row = &k->inputs[1].view;
  int nd = v->ndim;
  for (int d = 0; d < nd - 2; d++)
    if (v->sizes[d] != 1 && v->strides[d] != 0) return false;
  if (v->offset || v->sizes[nd - 2] != k->sizes[0] || v->sizes[nd - 1] != k->sizes[1] ||
      (k->sizes[0] > 1 && v->strides[nd - 2] != k->sizes[1]) || (k->sizes[1] > 1 && v->strides[nd - 1] != 1))
    return false;
  return arange_from_0(k->inputs[0].node) && arange_from_0(k->inputs[1].node) && col->offset == 0 &&
         row->offset == 0 && (k->sizes[1] == 1 || col->strides[1] == 1) && (k->sizes[0] == 1 || col->strides[0] == 0) &&
         (k->sizes[0] == 1 || row->strides[0] == 1) && (k->sizes[1] == 1 || row->strides[1] == 0);
}

static void add_chain(graph_attention *m, graph_node *n) { m->chain[m->n_chain++] = n; }

/* y = scaled scores: sets m->scores, m->scale. */
static bool match_scaled(graph_node *y, graph_attention *m, kiln_dtype dt) {
  double c = 1;
  graph_node *sc = y;
  if (is(y, GRAPH_OP_MUL, 2, dt) && fill_value(y->inputs[1].node, &c) && plain(&y->inputs[0])) {
    sc = y->inputs[0].node;
  } else if (is(y, GRAPH_OP_MUL, 2, dt) && fill_value(y->inputs[0].node, &c) && plain(&y->inputs[1])) {
    sc = y->inputs[1].node;
  } else if (is(y, GRAPH_OP_DIV, 2, dt) && fill_value(y->inputs[1].node, &c) && plain(&y->inputs[0])) {
    sc = y->inputs[0].node;
    c = 1 / c;
  }
  if (!is(sc, GRAPH_OP_MATMUL, 2, dt) || !isfinite(c) || !same_sizes(sc, y)) return false;
  if (sc != y) add_chain(m, y);
  add_chain(m, sc);
  m->scores = sc;
  m->scale = c;
  return true;
}

/* x = masked scaled scores: sets the mask and what match_scaled sets. */
static bool match_masked(graph_node *x, graph_attention *m, kiln_dtype dt) {
  double c;
  if (is(x, GRAPH_OP_WHERE, 3, dt) && plain(&x->inputs[1]) && same_sizes(x, x->inputs[1].node) && fill_value(x->inputs[2].node, &c) && c == -INFINITY &&
      x->inputs[0].node && x->inputs[0].node->dtype == KILN_BOOL) {
    add_chain(m, x);
    m->mask = causal_keep(&x->inputs[0]) ? NULL : &x->inputs[0];
    m->kind = m->mask ? GRAPH_ATTENTION_MASK : GRAPH_ATTENTION_CAUSAL;
    return match_scaled(x->inputs[1].node, m, dt);
  }
  for (int side = 0; side < 2 && is(x, GRAPH_OP_ADD, 2, dt); side++) {
    const graph_input *mask = &x->inputs[1 - side];
    if (!plain(&x->inputs[side]) || !same_sizes(x, x->inputs[side].node) || !mask->node || mask->node->dtype != dt)
      continue;
    graph_attention saved = *m;
    add_chain(m, x);
    m->mask = mask;
    m->kind = GRAPH_ATTENTION_MASK;
    if (match_scaled(x->inputs[side].node, m, dt)) return true;
    *m = saved;
  }
  return match_scaled(x, m, dt);
}

bool graph_attention_fused(void) {
  const char *s = getenv("KILN_ATTENTION");
  return !s || strcmp(s, "unfused") != 0;
}

bool graph_attention_match(graph_node *o, graph_attention *m) {
  *m = (graph_attention){0};
  kiln_dtype dt = o ? o->dtype : KILN_F32;
  if (!o || o->op != GRAPH_OP_MATMUL || (dt != KILN_F32 && dt != KILN_F64) || n_in(o) != 2 || !plain(&o->inputs[0]))
    return false;
  graph_node *p = o->inputs[0].node;
  if (!is(p, GRAPH_OP_DIV, 2, dt) || !plain(&p->inputs[0]) || !row_broadcast(&p->inputs[1], p) ||
      p->ndim != o->ndim || memcmp(p->sizes, o->inputs[0].view.sizes, sizeof *p->sizes * (size_t)p->ndim))
    return false;
  graph_node *e = p->inputs[0].node, *s = p->inputs[1].node;
  if (!last_dim_reduce(s, GRAPH_OP_SUM, dt) || s->inputs[0].node != e || !is(e, GRAPH_OP_EXP, 1, dt) ||
      !same_sizes(e, p) || !plain(&e->inputs[0]))
    return false;
  graph_node *xm = e->inputs[0].node;
  if (!is(xm, GRAPH_OP_SUB, 2, dt) || !same_sizes(xm, p) || !plain(&xm->inputs[0]) ||
      !row_broadcast(&xm->inputs[1], xm))
    return false;
  graph_node *x = xm->inputs[0].node, *mx = xm->inputs[1].node, *md = NULL;
  if (is(mx, GRAPH_OP_DETACH, 1, dt) && plain(&mx->inputs[0])) md = mx, mx = mx->inputs[0].node;
  if (!last_dim_reduce(mx, GRAPH_OP_AMAX, dt) || mx->inputs[0].node != x || !same_sizes(x, p)) return false;
  graph_node *head[] = {p, s, e, xm, mx};
  for (int i = 0; i < 5; i++) add_chain(m, head[i]);
  if (md) add_chain(m, md);
  if (!match_masked(x, m, dt)) return false;
  graph_node *sc = m->scores;
  if (!same_sizes(sc, x)) return false;
  if (m->mask && m->mask->node->dtype != KILN_BOOL && m->mask->node->dtype != dt) return false;
  if (!graph_attention_fused()) return false; /* read last: most matmuls fail the structure first */
  m->o = o;
  m->q = &sc->inputs[0];
  m->kt = &sc->inputs[1];
  m->v = &o->inputs[1];
  return true;
}
