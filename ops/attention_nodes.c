/*
 * attention_nodes.c — recording the fused attention nodes, ATTENTION and
 * ATTENTION_BWD (graph/ops.def; runtime/attention_kernels.c runs them), for
 * kiln_scaled_dot_product_attention (nn/attention.c) and ATTENTION's
 * gradient rule (autograd/grad_rules.c).
 *
 * k and v go in side by side as one input, kv = cat(k, v, -1) over the
 * broadcast batch dims (a node has at most GRAPH_MAX_INPUTS inputs; the
 * copy is [batch..., S, E + Ev], the size of k and v themselves), and the
 * backward's per-query values — q, dO and D = rowsum(dO ∘ O) — likewise
 * as one `rows` input (the backward computes the rows' log-sum-exp
 * itself, so the forward's result is O alone). So ATTENTION's
 * gradient for input 1 is d(kv), which the cat's own rule splits into dk
 * and dv. Nothing here is [L, S] except a float mask's gradient, which
 * only a caller differentiating the mask asks for: it is the unfused
 * formula, dS = P ∘ (dO·vᵀ − D), recorded from ordinary ops.
 */
#include "ops.h"

#define MASK_CAUSAL GRAPH_ATTENTION_CAUSAL
#define MASK_INPUT GRAPH_ATTENTION_MASK

/* sizes [batch..., r, c] into out; returns the rank. */
static int shape(int nb, const int64_t *batch, int64_t r, int64_t c, int64_t *out) {
  for (int d = 0; d < nb; d++) out[d] = batch[d];
  out[nb] = r, out[nb + 1] = c;
  return nb + 2;
}

static int64_t prod(int n, const int64_t *s) {
  int64_t p = 1;
  for (int d = 0; d < n; d++) p *= s[d];
  return p;
}

/* The view [sizes] (contiguous) at element `offset` of flat. */
static kiln_tensor *part(kiln_tensor *flat, int nd, const int64_t *sizes, int64_t offset) {
  graph_view v = graph_view_contiguous(nd, sizes);
  return kiln_as_strided(flat, nd, sizes, v.strides, offset);
}

/* An attention node of op over a, kv and mask (NULL unless kind is
 * MASK_INPUT) with sizes [ndim] and the attributes of ops.def. */
static kiln_tensor *node(graph_op op, int ndim, const int64_t *sizes, kiln_tensor *a, kiln_tensor *kv,
                         kiln_tensor *mask, int kind, double scale, int64_t e, const char *fn) {
  if (!a || !kv || (kind == MASK_INPUT && !mask)) return NULL;
  graph_node *n = graph_node_new(op, kiln_dtype_of(a), ndim, sizes);
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  graph_attr_set_scalar(n, scale);
  graph_attr_set_scalar2(n, (double)e);
  graph_attr_set_reduce_mask(n, (uint32_t)kind);
  bool ok = api_add_input(n, a, &a->view) && api_add_input(n, kv, &kv->view);
  if (ok && kind == MASK_INPUT) ok = api_add_input(n, mask, &mask->view);
  if (!ok) {
    graph_node_release(n);
    return NULL;
  }
  return api_tensor_from_node(n, fn);
}

kiln_tensor *ops_attention(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *mask, bool causal,
                           double scale, int nb, const int64_t *batch, const char *fn) {
  int64_t L = q->view.sizes[q->view.ndim - 2], S = k->view.sizes[k->view.ndim - 2];
  int64_t E = q->view.sizes[q->view.ndim - 1], Ev = v->view.sizes[v->view.ndim - 1], sz[KILN_MAX_DIMS];
  int nd = shape(nb, batch, L, E, sz);
  kiln_tensor *qx = kiln_expand(q, nd, sz);
  shape(nb, batch, S, E, sz);
  kiln_tensor *kx = kiln_expand(k, nd, sz);
  shape(nb, batch, S, Ev, sz);
  kiln_tensor *kv = kiln_cat((kiln_tensor *[]){kx, kiln_expand(v, nd, sz)}, 2, -1);
  kiln_tensor *mx = NULL;
  if (mask) mx = kiln_expand(mask, shape(nb, batch, L, S, sz), sz);
  int kind = causal ? MASK_CAUSAL : mask ? MASK_INPUT : 0;
  shape(nb, batch, L, Ev, sz);
  return node(GRAPH_OP_ATTENTION, nd, sz, qx, kv, mx, kind, scale, E, fn);
}

/* dS = P ∘ (dO·vᵀ − D)·1 for a float mask (added after the scale, so its
 * gradient is dS itself): the unfused formula, [batch..., L, S]. */
static kiln_tensor *mask_grad(kiln_tensor *q, kiln_tensor *kv, kiln_tensor *mask, kiln_tensor *dout, double scale,
                              int64_t E) {
  kiln_tensor *k = kiln_narrow(kv, -1, 0, E), *v = kiln_narrow(kv, -1, E, kiln_size(kv, -1) - E);
  kiln_tensor *s = kiln_add(kiln_mul_scalar(kiln_matmul(q, kiln_transpose(k, -2, -1)), scale), mask);
  kiln_tensor *e = kiln_exp(kiln_sub(s, kiln_amax(s, 1, (int[]){-1}, true))); /* softmax (nn/ is above ops/) */
  kiln_tensor *p = kiln_div(e, kiln_sum(e, 1, (int[]){-1}, true));
  kiln_tensor *dp = kiln_matmul(dout, kiln_transpose(v, -2, -1));
  kiln_tensor *d = kiln_sum(kiln_mul(dp, p), 1, (int[]){-1}, true);
  return kiln_mul(p, kiln_sub(dp, d));
}

/* The ATTENTION_BWD node (flat: dq, then d(kv)) of the attention of q,
 * kv, mask with cotangent g; o its value, or NULL (computed again). */
static kiln_tensor *backward(kiln_tensor *q, kiln_tensor *kv, kiln_tensor *mask, int kind, double scale, int64_t E,
                             kiln_tensor *o, kiln_tensor *g, const char *fn) {
  if (!q || !kv || !g) return NULL;
  int nd = q->view.ndim, nb = nd - 2;
  int64_t L = q->view.sizes[nd - 2], S = kv->view.sizes[nd - 2], W = kv->view.sizes[nd - 1];
  int64_t B = prod(nb, q->view.sizes), sz[KILN_MAX_DIMS];
  if (!o) o = node(GRAPH_OP_ATTENTION, shape(nb, q->view.sizes, L, W - E, sz), sz, q, kv, mask, kind, scale, E, fn);
  kiln_tensor *d = kiln_sum(kiln_mul(g, o), 1, (int[]){-1}, true);
  kiln_tensor *rows = kiln_cat((kiln_tensor *[]){q, g, d}, 3, -1);
  int64_t numel = B * L * E + B * S * W;
  return rows ? node(GRAPH_OP_ATTENTION_BWD, 1, &numel, rows, kv, mask, kind, scale, E, fn) : NULL;
}

kiln_tensor *ops_attention_grad(const graph_node *n, kiln_tensor *const *x, kiln_tensor *o, kiln_tensor *g,
                                kiln_tensor **joint, int k, const char *fn) {
  kiln_tensor *q = x[0], *kv = x[1], *mask = x[2];
  if (!q || !kv || !g) return NULL;
  int nd = q->view.ndim, nb = nd - 2, kind = (int)graph_attr_reduce_mask(n);
  double scale = graph_attr_scalar(n);
  int64_t E = (int64_t)graph_attr_scalar2(n), L = q->view.sizes[nd - 2], S = kv->view.sizes[nd - 2];
  int64_t W = kv->view.sizes[nd - 1], B = prod(nb, q->view.sizes), sz[KILN_MAX_DIMS];
  const int64_t *batch = q->view.sizes;
  if (k == 2) return mask_grad(q, kv, mask, g, scale, E);
  if (!*joint) *joint = backward(q, kv, mask, kind, scale, E, o, g, fn);
  if (!*joint) return NULL;
  if (k == 0) return part(*joint, shape(nb, batch, L, E, sz), sz, 0);
  return part(*joint, shape(nb, batch, S, W, sz), sz, B * L * E);
}

bool ops_attention_backward(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *mask, int kind,
                            double scale, kiln_tensor *o, kiln_tensor *g, bool mask_grad_too, kiln_tensor **out,
                            const char *fn) {
  if (!q || !k || !v || !g) return false;
  int nd = q->view.ndim, nb = nd - 2;
  int64_t L = q->view.sizes[nd - 2], S = k->view.sizes[nd - 2], E = q->view.sizes[nd - 1];
  int64_t Ev = v->view.sizes[nd - 1], B = prod(nb, q->view.sizes), sz[KILN_MAX_DIMS];
  kiln_tensor *kv = kiln_cat((kiln_tensor *[]){k, v}, 2, -1);
  kiln_tensor *joint = backward(q, kv, kind == MASK_INPUT ? mask : NULL, kind, scale, E, o, g, fn);
  if (!joint) return false;
  out[0] = part(joint, shape(nb, q->view.sizes, L, E, sz), sz, 0);
  kiln_tensor *dkv = part(joint, shape(nb, q->view.sizes, S, E + Ev, sz), sz, B * L * E);
  out[1] = kiln_narrow(dkv, -1, 0, E);
  out[2] = kiln_narrow(dkv, -1, E, Ev);
  out[3] = mask_grad_too ? mask_grad(q, kv, mask, g, scale, E) : NULL;
  return out[1] && out[2] && (!mask_grad_too || out[3]);
}
