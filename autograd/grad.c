/*
 * grad.c — kiln_grad: reverse-mode differentiation as a transformation of
 * the lazy graph (docs/autodiff.md).
 *
 * 1. Collect: from the outputs' version nodes, walk every input a gradient
 *    can flow through (grad_edge), pending inputs or a forced node's kept
 *    recipe alike, into a topological order (inputs first).
 * 2. Mark: a node is *relevant* when it is a wrt node or an input leads to
 *    one; it is *exposed* when the outputs reach it without crossing a wrt
 *    node. An exposed older version of a wrt's storage means the wrt was
 *    written after the outputs read it: an error, as Torch's "modified by
 *    an inplace operation".
 * 3. Propagate: seed each output's cotangent through its view, then visit
 *    nodes consumers first; each relevant input gets its rule's
 *    contribution, sent back through the view it was read by (the view's
 *    adjoint) and added to its flat cotangent.
 * 4. Read each wrt's gradient through its view.
 * Everything recorded is ordinary graph ops in one scope; on error the
 * scope's end releases it all, so nothing stays recorded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"

static const char *FN = "kiln_grad";

typedef struct gslot {
  graph_node *n;
  kiln_tensor *cot; /* flat cotangent [numel] in n's dtype, or NULL */
  bool relevant, exposed, wrt;
} gslot;

typedef struct gtable {
  gslot *slots;
  size_t cap; /* power of two */
  graph_node **order;
  int n, order_cap;
} gtable;

static size_t hash_ptr(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

static gslot *find(gtable *t, const graph_node *n) {
  for (size_t i = hash_ptr(n, t->cap);; i = (i + 1) & (t->cap - 1))
    if (t->slots[i].n == n || !t->slots[i].n) return &t->slots[i];
}

static bool grow(gtable *t) {
  gtable g = {.cap = t->cap ? t->cap * 2 : 256};
  g.slots = graph_calloc(g.cap, sizeof *g.slots);
  if (!g.slots) return false;
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].n) *find(&g, t->slots[i].n) = t->slots[i];
  free(t->slots);
  t->slots = g.slots;
  t->cap = g.cap;
  return true;
}

/* The slot of n, inserted when new (*fresh). NULL on OOM. */
static gslot *insert(gtable *t, graph_node *n, bool *fresh) {
  if ((size_t)(t->n + 1) * 2 > t->cap && !grow(t)) return NULL;
  gslot *s = find(t, n);
  *fresh = !s->n;
  if (*fresh) {
    s->n = n;
    if (t->n == t->order_cap) {
      int cap = t->order_cap ? t->order_cap * 2 : 256;
      graph_node **o = graph_realloc(t->order, sizeof *o * (size_t)cap);
      if (!o) return NULL;
      t->order = o;
      t->order_cap = cap;
    }
    t->n++; /* counts slots; order is filled in post-order by collect */
  }
  return s;
}

/* ------------------------------------------------------------ collect */

typedef struct frame {
  graph_node *n;
  int next;
} frame;

/* Post-order walk from the roots over gradient edges: t->order gets
 * every reached node after all its inputs. */
static bool collect(gtable *t, graph_node *const *roots, int n_roots) {
  int cap = 64, top = 0, placed = 0;
  frame *st = graph_malloc(sizeof *st * (size_t)cap);
  if (!st) return false;
  bool ok = true;
  for (int r = 0; r < n_roots && ok; r++) {
    bool fresh;
    gslot *s = insert(t, roots[r], &fresh);
    if (!s) ok = false;
    if (!ok || !fresh) continue;
    st[top++] = (frame){roots[r], 0};
    while (top && ok) {
      frame *f = &st[top - 1];
      if (f->next == grad_n_inputs(f->n)) {
        t->order[placed++] = f->n;
        top--;
        continue;
      }
      int k = f->next++;
      if (!grad_edge(f->n, k)) continue;
      graph_node *in = f->n->inputs[k].node;
      gslot *c = insert(t, in, &fresh);
      if (!c) ok = false;
      if (!ok || !fresh) continue;
      if (top == cap) {
        frame *g = graph_realloc(st, sizeof *st * (size_t)(cap *= 2));
        if (!g) ok = false;
        else st = g;
      }
      if (ok) st[top++] = (frame){in, 0};
    }
  }
  free(st);
  return ok;
}

/* Relevance (inputs first) and exposure (consumers first). */
static void mark(gtable *t, graph_node *const *roots, int n_roots) {
  for (int i = 0; i < t->n; i++) {
    graph_node *n = t->order[i];
    gslot *s = find(t, n);
    for (int k = 0; k < grad_n_inputs(n) && !s->relevant; k++)
      if (grad_edge(n, k) && find(t, n->inputs[k].node)->relevant) s->relevant = true;
  }
  for (int r = 0; r < n_roots; r++) find(t, roots[r])->exposed = true;
  for (int i = t->n - 1; i >= 0; i--) {
    graph_node *n = t->order[i];
    gslot *s = find(t, n);
    if (!s->exposed || s->wrt) continue;
    for (int k = 0; k < grad_n_inputs(n); k++)
      if (grad_edge(n, k)) find(t, n->inputs[k].node)->exposed = true;
  }
}

/* An exposed forced value whose recipe was let go, computed from a wrt's
 * storage (its deps filter says so; a false positive is an error too,
 * never a silent zero). */
static int check_released(const graph_node *n, kiln_tensor *const *wrt, int n_wrt) {
  if (!n->hist_dropped) return KILN_OK;
  for (int j = 0; j < n_wrt; j++) {
    const graph_node *w = wrt[j]->storage->version;
    if (n->deps & graph_dep_bit(w->storage_id))
      return api_error(KILN_ERR_ARG, FN,
                       "the outputs read a forced value (op %s) whose recipe was released (its tensors were freed or "
                       "it was overwritten in place), so the gradient for wrt %d cannot flow through it; compute "
                       "gradients before releasing or overwriting it (docs/autodiff.md)",
                       graph_ops[n->op].name, j);
  }
  return KILN_OK;
}

/* An exposed older version of wrt[j]'s storage: wrt[j] was written in
 * place after the outputs read it. */
static int check_versions(gtable *t, kiln_tensor *const *wrt, int n_wrt) {
  for (int i = 0; i < t->n; i++) {
    const graph_node *n = t->order[i];
    if (!find(t, n)->exposed) continue;
    int st = check_released(n, wrt, n_wrt);
    if (st != KILN_OK) return st;
    if (!n->storage_id) continue;
    for (int j = 0; j < n_wrt; j++) {
      const graph_node *w = wrt[j]->storage->version;
      if (n != w && n->storage_id == w->storage_id && n->version_no < w->version_no)
        return api_error(KILN_ERR_ARG, FN,
                         "wrt %d was modified by an in-place write after the outputs read it (they read version %llu "
                         "of its storage, it is now version %llu)",
                         j, (unsigned long long)n->version_no, (unsigned long long)w->version_no);
    }
  }
  return KILN_OK;
}

/* --------------------------------------------- private recipe copies */

/* The pending nodes of a forced value's recipe (retired: computed inside
 * a kernel, never stored) are shared by every thread that reads the
 * value, and kiln.h lets threads differentiate a shared realized tensor
 * at once; a gradient that read them directly would have two threads'
 * forces plan the same nodes (passes/plan.h marks them). So a kiln_grad
 * call reads private copies (graph_node_clone), one per node per call,
 * their inputs copied the same way down to realized buffers. It costs no
 * work: such a node is computed again by whichever force reads it. */
typedef struct clone_map {
  const graph_node **from;
  graph_node **to;
  size_t cap, n;
} clone_map;
static _Thread_local clone_map *clones; /* the running kiln_grad's */

static bool shared_pending(const graph_node *n) {
  return !n->buffer && n->retired && graph_ops[n->op].kind != GRAPH_EXTERN;
}

static size_t clone_slot(const clone_map *m, const graph_node *n) {
  size_t i = (size_t)(((uintptr_t)n >> 4) * 0x9E3779B97F4A7C15ULL) & (m->cap - 1);
  while (m->from[i] && m->from[i] != n) i = (i + 1) & (m->cap - 1);
  return i;
}

static bool clone_room(clone_map *m) {
  if ((m->n + 1) * 2 <= m->cap) return true;
  clone_map big = {.cap = m->cap ? m->cap * 2 : 64, .n = m->n};
  big.from = graph_calloc(big.cap, sizeof *big.from);
  big.to = graph_calloc(big.cap, sizeof *big.to);
  if (!big.from || !big.to) {
    free(big.from), free(big.to);
    return false;
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->from[i]) {
      size_t j = clone_slot(&big, m->from[i]);
      big.from[j] = m->from[i], big.to[j] = m->to[i];
    }
  free(m->from), free(m->to);
  *m = big;
  return true;
}

/* n, or this call's private copy of it when it is a shared recipe node;
 * NULL on OOM. */
static graph_node *privatize(graph_node *n) {
  clone_map *m = clones;
  if (!m || !shared_pending(n)) return n;
  if (m->cap && m->from[clone_slot(m, n)]) return m->to[clone_slot(m, n)];
  graph_node *in[GRAPH_MAX_INPUTS];
  for (int k = 0; k < n->n_inputs; k++)
    if (!(in[k] = privatize(n->inputs[k].node))) return NULL;
  graph_node *c = clone_room(m) ? graph_node_clone(n, in) : NULL;
  if (!c) return NULL;
  size_t i = clone_slot(m, n);
  m->from[i] = n, m->to[i] = c, m->n++;
  return c;
}

static void clones_free(clone_map *m) {
  for (size_t i = 0; i < m->cap; i++) graph_node_release(m->to[i]);
  free(m->from), free(m->to);
}

/* ----------------------------------------------------- view adjoints */

kiln_tensor *grad_wrap(graph_node *n, const graph_view *v) {
  graph_node *p = privatize(n);
  kiln_storage *s = p ? graph_storage_new(p->dtype, p->numel, graph_node_retain(p)) : NULL;
  if (!s) {
    api_error(KILN_ERR_OOM, FN, "out of memory");
    return NULL;
  }
  kiln_tensor *t = api_tensor(s, v, FN);
  kiln_storage_release(s);
  return t;
}

kiln_tensor *grad_scatter_add(kiln_dtype dtype, int ndim, const int64_t *sizes, int dim, graph_node *index,
                              const graph_view *iv, kiln_tensor *src) {
  if (!src) return NULL;
  if (!(index = privatize(index))) {
    api_error(KILN_ERR_OOM, FN, "out of memory");
    return NULL;
  }
  return kiln_to_dtype(ops_scatter_sum(dtype, ndim, sizes, dim, index, iv, src, &src->view, FN), dtype);
}

/* Contribution c (v's sizes) read from node m through v, sent back to a
 * flat [m->numel] tensor: summed over broadcast dims, then reshaped (v is
 * m's whole contents in order), written into zeros (v one-to-one) or
 * added at v's positions (overlapping windows, e.g. unfold). */
static kiln_tensor *adjoint(const graph_node *m, const graph_view *view, kiln_tensor *c) {
  graph_view v = *view;
  int dims[KILN_MAX_DIMS], nb = 0;
  for (int d = 0; d < v.ndim; d++)
    if (v.strides[d] == 0 && v.sizes[d] > 1) {
      dims[nb++] = d;
      v.sizes[d] = 1;
    }
  if (nb) c = kiln_sum(c, nb, dims, true);
  int64_t numel = m->numel, vn = graph_view_numel(&v);
  if (!c) return NULL;
  if (vn == numel && v.offset == 0 && graph_view_is_contiguous(&v)) return kiln_reshape(c, 1, &numel);
  return grad_view_add(m->dtype, numel, &v, c, FN);
}

/* Adds contribution c, read from node m through view, to m's cotangent. */
static int accumulate(gtable *t, graph_node *m, const graph_view *view, kiln_tensor *c) {
  if (!c) return api_status();
  if (graph_view_numel(view) == 0) return KILN_OK;
  if (c->storage->dtype != m->dtype) c = kiln_to_dtype(c, m->dtype);
  kiln_tensor *flat = c ? adjoint(m, view, c) : NULL;
  if (!flat) return api_status();
  gslot *s = find(t, m);
  s->cot = s->cot ? kiln_add(s->cot, flat) : flat;
  return s->cot ? KILN_OK : api_status();
}

/* --------------------------------------------------------- propagate */

kiln_tensor *grad_input(grad_inputs *in, int k) {
  const graph_input *x = &in->n->inputs[k];
  if (!in->x[k]) {
    kiln_tensor *v = grad_wrap(x->node, &x->view);
    /* an edge the simplifier made over a DETACH: the value stays detached
     * in the gradient's graph too (second derivatives) */
    in->x[k] = v && x->no_grad ? kiln_detach(v) : v;
  }
  return in->x[k];
}

kiln_tensor *grad_output(grad_inputs *in) {
  if (!in->y) {
    graph_view v = graph_view_contiguous(in->n->ndim, in->n->sizes);
    in->y = grad_wrap((graph_node *)in->n, &v);
  }
  return in->y;
}

/* n's cotangent in n's logical sizes. */
static kiln_tensor *logical(const graph_node *n, kiln_tensor *cot) {
  return n->op == GRAPH_OP_ASSIGN ? cot : kiln_reshape(cot, n->ndim, n->sizes);
}

/* ------------------------------------------- attention written by hand */

/* A gradient flows along edge e into a relevant float value. */
static bool edge_wanted(gtable *t, const graph_input *e) {
  return e && e->node && !e->no_grad && !e->order_only && graph_is_float(e->node->dtype) && find(t, e->node)->relevant;
}

/* n is the last matmul of an attention written out of ops
 * (graph_attention_match) none of whose intermediates is a wrt or stops
 * gradients: its inputs get the fused backward's gradients directly
 * (backward_attention). */
static bool attention_shortcut(gtable *t, graph_node *n, graph_attention *m) {
  if (n->op != GRAPH_OP_MATMUL || !graph_attention_match(n, m)) return false;
  for (int i = 0; i < m->n_chain; i++) {
    const graph_node *c = m->chain[i];
    gslot *s = find(t, c);
    if ((s->n && s->wrt) || (c->no_grad && c->op != GRAPH_OP_DETACH)) return false;
  }
  return true;
}

/* q, k, v and a float mask get the fused backward's contributions
 * (ops_attention_backward: the scores are recomputed blockwise, never
 * stored); the chain gets none from n (a reader of it outside the chain
 * still sends its own through the chain's rules). */
static int backward_attention(gtable *t, graph_node *n, const graph_attention *m, kiln_tensor *g) {
  const graph_input *e[4] = {m->q, m->kt, m->v, m->mask};
  kiln_tensor *x[4] = {NULL};
  for (int i = 0; i < 4; i++)
    if (e[i] && !(x[i] = grad_wrap(e[i]->node, &e[i]->view))) return api_status();
  graph_view ov = graph_view_contiguous(n->ndim, n->sizes);
  kiln_tensor *o = grad_has_output(n) ? grad_wrap(n, &ov) : NULL;
  bool want_mask = m->mask && m->mask->node->dtype != KILN_BOOL && edge_wanted(t, m->mask);
  kiln_tensor *d[4];
  if (!ops_attention_backward(x[0], kiln_transpose(x[1], -2, -1), x[2], x[3], m->kind, m->scale, o, g, want_mask, d,
                              FN))
    return api_status();
  d[1] = kiln_transpose(d[1], -2, -1); /* kᵀ's gradient */
  for (int i = 0; i < 4; i++) {
    if (!edge_wanted(t, e[i]) || (i == 3 && !want_mask)) continue;
    int st = accumulate(t, e[i]->node, &e[i]->view, d[i]);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

static int backward_node(gtable *t, graph_node *n, kiln_tensor *cot) {
  if (n->opaque)
    return api_error(KILN_ERR_UNSUPPORTED, FN, "the gradient path goes through %s (an element callback has no derivative)",
                     n->opaque);
  grad_rule_fn rule = grad_rule_of(n->op);
  if (!rule)
    return api_error(KILN_ERR_UNSUPPORTED, FN, "no gradient rule for op %s", graph_ops[n->op].name);
  kiln_tensor *g = logical(n, cot);
  if (!g) return api_status();
  graph_attention m;
  if (attention_shortcut(t, n, &m)) return backward_attention(t, n, &m, g);
  grad_inputs in = {.n = n};
  for (int k = 0; k < grad_n_inputs(n); k++) {
    graph_input *x = &n->inputs[k];
    if (!grad_edge(n, k) || !find(t, x->node)->relevant) continue;
    int st = accumulate(t, x->node, &x->view, rule(&in, k, g));
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

static int seed(gtable *t, kiln_tensor *out, kiln_tensor *cot) {
  kiln_tensor *c = cot ? cot : kiln_ones(out->storage->dtype, out->view.ndim, out->view.sizes);
  return accumulate(t, out->storage->version, &out->view, c);
}

static int propagate(gtable *t) {
  for (int i = t->n - 1; i >= 0; i--) {
    graph_node *n = t->order[i];
    gslot *s = find(t, n);
    if (!s->cot || !s->relevant || !grad_n_inputs(n)) continue;
    int st = backward_node(t, n, s->cot);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------ checks */

static int check_float(const kiln_tensor *x, const char *what, int i) {
  kiln_dtype d = x->storage->dtype;
  if (graph_is_float(d)) return KILN_OK;
  return api_error(KILN_ERR_DTYPE, FN, "%s %d has dtype %s; gradients need a float dtype", what, i,
                   graph_dtypes[d].name);
}

static int check_outputs(kiln_tensor *const *outputs, kiln_tensor *const *cotangents, int n) {
  for (int i = 0; i < n; i++) {
    const kiln_tensor *o = outputs[i], *c = cotangents ? cotangents[i] : NULL;
    if (!o || (cotangents && !c))
      return api_error(KILN_ERR_ARG, FN, "%s %d is NULL", o ? "cotangent" : "output", i);
    int st = check_float(o, "output", i);
    if (st == KILN_OK && c) st = check_float(c, "cotangent", i);
    if (st != KILN_OK) return st;
    char a[256], b[256];
    if (c && (c->view.ndim != o->view.ndim || memcmp(c->view.sizes, o->view.sizes, sizeof(int64_t) * (size_t)o->view.ndim)))
      return api_error(KILN_ERR_SHAPE, FN, "cotangent %d has sizes %s but output %d has sizes %s", i,
                       api_fmt_sizes(a, sizeof a, c->view.ndim, c->view.sizes), i,
                       api_fmt_sizes(b, sizeof b, o->view.ndim, o->view.sizes));
    if (!c && graph_view_numel(&o->view) != 1)
      return api_error(KILN_ERR_ARG, FN,
                       "output %d has sizes %s (%lld elements): without cotangents every output must have one element",
                       i, api_fmt_sizes(a, sizeof a, o->view.ndim, o->view.sizes),
                       (long long)graph_view_numel(&o->view));
  }
  return KILN_OK;
}

static int check_args(kiln_tensor *const *outputs, kiln_tensor *const *cotangents, int n_outputs,
                      kiln_tensor *const *wrt, int n_wrt, kiln_tensor **grads) {
  if (!grads) return api_error(KILN_ERR_ARG, FN, "grads is NULL");
  if (n_outputs < 1 || n_wrt < 1)
    return api_error(KILN_ERR_ARG, FN, "needs at least one output and one wrt (n_outputs = %d, n_wrt = %d)",
                     n_outputs, n_wrt);
  int st = api_check_list(outputs, n_outputs, "output", FN);
  if (st == KILN_OK) st = api_check_list(wrt, n_wrt, "wrt", FN);
  if (st == KILN_OK) st = check_outputs(outputs, cotangents, n_outputs);
  for (int j = 0; j < n_wrt && st == KILN_OK; j++) {
    if (!wrt[j]) return api_error(KILN_ERR_ARG, FN, "wrt %d is NULL", j);
    st = check_float(wrt[j], "wrt", j);
  }
  return st;
}

/* ---------------------------------------------------------------- api */

/* The cotangent of a node must be a tensor over its own storage with the
 * flat contiguous view, for kiln_as_strided to read it by position. */
static void own_storage_cotangents(gtable *t) {
  for (size_t i = 0; i < t->cap; i++) {
    gslot *s = &t->slots[i];
    if (!s->n || !s->cot || !s->wrt) continue;
    const graph_view *v = &s->cot->view;
    if (v->offset != 0 || !graph_view_is_contiguous(v) || s->cot->storage->numel != s->n->numel)
      s->cot = kiln_clone(s->cot);
  }
}

static int run(kiln_tensor *const *outputs, kiln_tensor *const *cotangents, int n_outputs, kiln_tensor *const *wrt,
               int n_wrt, kiln_tensor **grads, gtable *t) {
  graph_node *roots[64], **rp = n_outputs <= 64 ? roots : graph_malloc(sizeof *rp * (size_t)n_outputs);
  if (!rp) return api_error(KILN_ERR_OOM, FN, "out of memory");
  for (int i = 0; i < n_outputs; i++) rp[i] = outputs[i]->storage->version;
  bool ok = collect(t, rp, n_outputs);
  for (int j = 0; ok && j < n_wrt; j++) {
    gslot *s = find(t, wrt[j]->storage->version);
    if (s->n) s->wrt = s->relevant = true;
  }
  if (ok) mark(t, rp, n_outputs);
  if (rp != roots) free(rp);
  if (!ok) return api_error(KILN_ERR_OOM, FN, "out of memory");
  int st = check_versions(t, wrt, n_wrt);
  for (int i = 0; i < n_outputs && st == KILN_OK; i++) st = seed(t, outputs[i], cotangents ? cotangents[i] : NULL);
  if (st == KILN_OK) st = propagate(t);
  if (st == KILN_OK) own_storage_cotangents(t);
  for (int j = 0; j < n_wrt && st == KILN_OK; j++) {
    const kiln_tensor *w = wrt[j];
    gslot *s = find(t, w->storage->version);
    kiln_tensor *g = s->n && s->cot ? kiln_as_strided(s->cot, w->view.ndim, w->view.sizes, w->view.strides, w->view.offset)
                                    : kiln_zeros(w->storage->dtype, w->view.ndim, w->view.sizes);
    grads[j] = g && s->n && s->cot ? kiln_clone(g) : g;
    if (!grads[j]) st = api_status();
  }
  return st;
}

KILN_API int kiln_grad(kiln_tensor *const *outputs, kiln_tensor *const *cotangents, int n_outputs,
                       kiln_tensor *const *wrt, int n_wrt, kiln_tensor **grads) {
  int st = check_args(outputs, cotangents, n_outputs, wrt, n_wrt, grads);
  if (st != KILN_OK) return st;
  /* computed into g: grads[] is written only on success (kiln.h's rule) */
  kiln_tensor **g = graph_calloc((size_t)(n_wrt > 0 ? n_wrt : 1), sizeof *g);
  if (!g) return api_error(KILN_ERR_OOM, FN, "out of memory");
  gtable t = {0};
  clone_map private_copies = {0};
  graph_history_hold(); /* no recipe we walk is let go meanwhile, by any thread */
  clones = &private_copies;
  kiln_scope_begin(); /* owns every intermediate; the gradients are kept */
  st = run(outputs, cotangents, n_outputs, wrt, n_wrt, g, &t);
  for (int j = 0; j < n_wrt && st == KILN_OK; j++) kiln_keep(g[j]);
  kiln_scope_end();
  clones = NULL;
  clones_free(&private_copies);
  graph_history_unhold();
  if (st == KILN_OK) memcpy(grads, g, sizeof *g * (size_t)n_wrt);
  free(g);
  free(t.slots);
  free(t.order);
  return st;
}
