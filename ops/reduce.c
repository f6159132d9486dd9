/*
 * reduce.c — reductions over any set of dims (sum, mean, prod, amax,
 * amin, all, any, argmax, argmin), recorded as one REDUCE node each.
 *
 * The node always produces the keepdim shape (reduced dims of size 1,
 * contiguous); keepdim = false is a view of that storage without them.
 * Result dtypes follow Torch: sum/prod of bool or integers give I64.
 */
#include "ops.h"

/* Declared in api_internal.h: the dims of a reduction as a bit mask. */
bool ops_reduce_mask(const kiln_tensor *t, int ndims, const int *dims, uint32_t *mask, const char *fn) {
  int nd = t->view.ndim;
  *mask = 0;
  if (ndims < 0 || (ndims > 0 && !dims)) {
    api_error(KILN_ERR_ARG, fn, "bad dim list (ndims = %d)", ndims);
    return false;
  }
  if (ndims == 0) {
    *mask = nd ? (uint32_t)((1ull << nd) - 1) : 0;
    return true;
  }
  for (int i = 0; i < ndims; i++) {
    int d = api_wrap_dim(dims[i], nd, fn);
    if (d < 0) return false;
    if (nd == 0) continue;
    if (*mask & (1u << d)) {
      api_error(KILN_ERR_ARG, fn, "dim %d appears more than once", dims[i]);
      return false;
    }
    *mask |= 1u << d;
  }
  return true;
}

static bool check_nonempty(const kiln_tensor *t, uint32_t mask, const char *fn) {
  for (int d = 0; d < t->view.ndim; d++)
    if ((mask & (1u << d)) && t->view.sizes[d] == 0) {
      api_error(KILN_ERR_SHAPE, fn, "cannot reduce dim %d of size 0: the operation has no identity", d);
      return false;
    }
  return true;
}

/* Records op over t with the given mask, producing dtype. */
static kiln_tensor *reduce_node(kiln_tensor *t, uint32_t mask, bool keepdim, graph_op op, kiln_dtype dtype,
                                const char *fn) {
  const graph_view *v = &t->view;
  int64_t kept[KILN_MAX_DIMS];
  for (int d = 0; d < v->ndim; d++) kept[d] = (mask & (1u << d)) ? 1 : v->sizes[d];
  graph_node *n = graph_node_new(op, dtype, v->ndim, kept);
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  n->cdtype = t->storage->dtype;
  graph_attr_set_reduce_mask(n, mask);
  if (!api_add_input(n, t, v)) {
    graph_node_release(n);
    return NULL;
  }
  kiln_tensor *r = api_tensor_from_node(n, fn);
  if (!r || keepdim) return r;
  graph_view sq = {.ndim = 0};
  for (int d = 0; d < v->ndim; d++)
    if (!(mask & (1u << d))) sq.sizes[sq.ndim++] = v->sizes[d];
  graph_contiguous_strides(sq.ndim, sq.sizes, sq.strides);
  r->view = sq;
  return r;
}

static kiln_dtype widened(kiln_dtype d) { return graph_is_float(d) ? d : KILN_I64; }

/* A reduction of every element of a large tensor runs in two stages —
 * SPLIT partial reductions over rows of the flat view (one per thread
 * chunk), then one over the partials — so it uses every core. The split is
 * fixed, so the result does not depend on the thread count. */
#define SPLIT 64
static kiln_tensor *reduce_all_split(kiln_tensor *t, bool keepdim, graph_op op, kiln_dtype dtype, const char *fn) {
  int64_t numel = graph_view_numel(&t->view), rows[2] = {SPLIT, numel / SPLIT};
  graph_view flat;
  if (numel < (1 << 18) || numel % SPLIT || !graph_view_reshape(&t->view, 2, rows, &flat)) return NULL;
  kiln_tensor *v = graph_tensor_new(t->storage, &flat);
  if (!v) return NULL;
  v->detached = t->detached;
  api_untracked_begin();
  kiln_tensor *part = reduce_node(v, 2u, true, op, dtype, fn);
  kiln_tensor *all = part ? reduce_node(part, 3u, false, op, dtype, fn) : NULL;
  kiln_tensor *r = all;
  if (all && keepdim) {
    int64_t ones[KILN_MAX_DIMS];
    for (int d = 0; d < t->view.ndim; d++) ones[d] = 1;
    r = kiln_view(all, t->view.ndim, ones);
    kiln_release(all);
  }
  kiln_release(part);
  kiln_release(v);
  api_untracked_end();
  return api_track(r);
}

static kiln_tensor *reduce(kiln_tensor *t, int ndims, const int *dims, bool keepdim, graph_op op, const char *fn) {
  uint32_t mask;
  if (!api_check(t, fn, "t") || !ops_reduce_mask(t, ndims, dims, &mask, fn)) return NULL;
  kiln_dtype d = t->storage->dtype;
  bool extremum = op == GRAPH_OP_AMAX || op == GRAPH_OP_AMIN;
  if (extremum && !check_nonempty(t, mask, fn)) return NULL;
  kiln_dtype out = extremum ? d : widened(d);
  bool all = t->view.ndim > 0 && mask == (uint32_t)((1ull << t->view.ndim) - 1);
  kiln_tensor *r = all ? reduce_all_split(t, keepdim, op, out, fn) : NULL;
  return r ? r : reduce_node(t, mask, keepdim, op, out, fn);
}

KILN_API kiln_tensor *kiln_sum(kiln_tensor *t, int ndims, const int *dims, bool keepdim) {
  return reduce(t, ndims, dims, keepdim, GRAPH_OP_SUM, "kiln_sum");
}
KILN_API kiln_tensor *kiln_prod(kiln_tensor *t, int ndims, const int *dims, bool keepdim) {
  return reduce(t, ndims, dims, keepdim, GRAPH_OP_PROD, "kiln_prod");
}
KILN_API kiln_tensor *kiln_amax(kiln_tensor *t, int ndims, const int *dims, bool keepdim) {
  return reduce(t, ndims, dims, keepdim, GRAPH_OP_AMAX, "kiln_amax");
}
KILN_API kiln_tensor *kiln_amin(kiln_tensor *t, int ndims, const int *dims, bool keepdim) {
  return reduce(t, ndims, dims, keepdim, GRAPH_OP_AMIN, "kiln_amin");
}

/* mean = sum (in the compute dtype, F32 for F16/BF16) / count. */
KILN_API kiln_tensor *kiln_mean(kiln_tensor *t, int ndims, const int *dims, bool keepdim) {
  const char *fn = "kiln_mean";
  uint32_t mask;
  if (!api_check(t, fn, "t") || !ops_reduce_mask(t, ndims, dims, &mask, fn)) return NULL;
  kiln_dtype d = t->storage->dtype;
  if (!graph_is_float(d)) {
    api_error(KILN_ERR_DTYPE, fn, "needs a float dtype, got %s (convert with kiln_to_dtype)", graph_dtypes[d].name);
    return NULL;
  }
  int64_t count = 1;
  for (int i = 0; i < t->view.ndim; i++)
    if (mask & (1u << i)) count *= t->view.sizes[i];
  api_untracked_begin();
  kiln_tensor *s = reduce_node(t, mask, keepdim, GRAPH_OP_SUM, graph_compute_dtype(d), fn);
  kiln_tensor *m = kiln_div_scalar(s, (double)count);
  kiln_tensor *r = kiln_to_dtype(m, d);
  kiln_release(m);
  kiln_release(s);
  api_untracked_end();
  return api_track(r);
}

/* all/any reduce the truth values (x != 0) with AND/OR. */
static kiln_tensor *logical(kiln_tensor *t, int ndims, const int *dims, bool keepdim, graph_op op, const char *fn) {
  uint32_t mask;
  if (!api_check(t, fn, "t") || !ops_reduce_mask(t, ndims, dims, &mask, fn)) return NULL;
  api_untracked_begin();
  kiln_tensor *b = t->storage->dtype == KILN_BOOL ? kiln_retain(t) : kiln_ne_scalar(t, 0);
  kiln_tensor *r = b ? reduce_node(b, mask, keepdim, op, KILN_BOOL, fn) : NULL;
  kiln_release(b);
  api_untracked_end();
  return api_track(r);
}

KILN_API kiln_tensor *kiln_all(kiln_tensor *t, int ndims, const int *dims, bool keepdim) {
  return logical(t, ndims, dims, keepdim, GRAPH_OP_AMIN, "kiln_all");
}
KILN_API kiln_tensor *kiln_any(kiln_tensor *t, int ndims, const int *dims, bool keepdim) {
  return logical(t, ndims, dims, keepdim, GRAPH_OP_AMAX, "kiln_any");
}

static kiln_tensor *arg(kiln_tensor *t, int dim, bool keepdim, graph_op op, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  uint32_t mask;
  if (!ops_reduce_mask(t, 1, &dim, &mask, fn) || !check_nonempty(t, mask, fn)) return NULL;
  if (t->view.ndim == 0) return kiln_zeros(KILN_I64, 0, NULL); /* Torch: the only index is 0 */
  return reduce_node(t, mask, keepdim, op, KILN_I64, fn);
}

KILN_API kiln_tensor *kiln_argmax(kiln_tensor *t, int dim, bool keepdim) {
  return arg(t, dim, keepdim, GRAPH_OP_ARGMAX, "kiln_argmax");
}
KILN_API kiln_tensor *kiln_argmin(kiln_tensor *t, int dim, bool keepdim) {
  return arg(t, dim, keepdim, GRAPH_OP_ARGMIN, "kiln_argmin");
}
