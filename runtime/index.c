/*
 * index.c — the SCATTER extern op: a plain C loop over realized buffers,
 * run by rt_run_extern (extern.c). (GATHER is a generated kernel: passes/
 * lower.c.) The API layer (api/index.c) checks index values when it
 * records the op; the check here repeats that before anything is written,
 * so an index can never make the loop read or write outside a buffer.
 *
 * SCATTER (index_add_): inputs self (the target's view), index and src
 *   (both views of the index's sizes); attribute scalar = dim. The result [self
 *   sizes] is self's elements, then for each c of the index in row-major
 *   order out[c with c[dim] = index[c]] += src[c]. Sequential, so duplicate
 *   indices accumulate in order, as in Torch's CPU loop. (index_copy_ and
 *   scatter_ are generated kernels: api/index.c.)
 */
#include <stdio.h>
#include <string.h>

#include "graph_walk.h"
#include "runtime.h"

/* Checks every index of input `in` of n (its buffer holds `base`)
 * against size. */
static int check_indices(const graph_node *n, int in, const char *base, int64_t size, char *err, size_t errlen) {
  const graph_input *ix = &n->inputs[in];
  int64_t count = graph_view_numel(&ix->view);
  graph_walk w;
  graph_walk_init(&w, &ix->view, 0);
  for (int64_t e = 0; e < count; e++, graph_walk_next(&w)) {
    int64_t i = graph_load_index(ix->node->dtype, base, w.off);
    if (i < 0 || i >= size) {
      snprintf(err, errlen, "%s: index %lld is out of range for dim %d of size %lld", graph_ops[n->op].name,
               (long long)i, (int)graph_attr_scalar(n), (long long)size);
      return KILN_ERR_INDEX;
    }
  }
  return KILN_OK;
}

/* out[at] += src value (both in dtype dt); integers wrap as Torch's. */
static void add_at(kiln_dtype dt, char *at, const char *v) {
  if (graph_is_float(dt)) {
    graph_store_scalar(dt, at, graph_load_scalar(dt, at) + graph_load_scalar(dt, v));
  } else if (dt == KILN_BOOL) {
    *at = (char)(*at || *v);
  } else {
    int64_t a = 0, b = 0;
    if (dt == KILN_I64) {
      memcpy(&a, at, 8), memcpy(&b, v, 8);
      uint64_t r = (uint64_t)a + (uint64_t)b;
      memcpy(at, &r, 8);
      return;
    }
    a = (int64_t)graph_load_scalar(dt, at), b = (int64_t)graph_load_scalar(dt, v);
    graph_store_scalar(dt, at, (double)(a + b));
  }
}

int rt_index_scatter(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  const graph_input *self = &n->inputs[0], *ix = &n->inputs[1], *src = &n->inputs[2];
  int dim = (int)graph_attr_scalar(n);
  int64_t size = self->view.sizes[dim];
  int st = check_indices(n, 1, in[1], size, err, errlen);
  if (st != KILN_OK) return st;
  size_t esz = (size_t)graph_dtypes[n->dtype].size;
  char *o = out->data;
  const char *b = in[0];
  graph_walk w;
  graph_walk_init(&w, &self->view, 0);
  for (int64_t e = 0; e < n->numel; e++, graph_walk_next(&w)) memcpy(o + (size_t)e * esz, b + (size_t)w.off * esz, esz);
  int64_t ostride[KILN_MAX_DIMS];
  graph_contiguous_strides(self->view.ndim, self->view.sizes, ostride);
  const char *ib = in[1], *sb = in[2];
  int64_t count = graph_view_numel(&ix->view);
  graph_walk wi, ws;
  graph_walk_init(&wi, &ix->view, 0);
  graph_walk_init(&ws, &src->view, 0);
  for (int64_t e = 0; e < count; e++, graph_walk_next(&wi), graph_walk_next(&ws)) {
    int64_t i = graph_load_index(ix->node->dtype, ib, wi.off), off = 0;
    for (int d = 0; d < ix->view.ndim; d++) off += (d == dim ? i : wi.idx[d]) * ostride[d];
    add_at(n->dtype, o + (size_t)off * esz, sb + (size_t)ws.off * esz);
  }
  return KILN_OK;
}
