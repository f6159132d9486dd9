/*
 * index.c — the SCATTER extern op: a plain C loop over realized buffers,
 * run by rt_run_extern (extern.c). (GATHER is a generated kernel: passes/
 * lower.c.) The API layer (api/index.c) checks index values when it
 * records the op; the check here repeats that before anything is written,
 * so an index can never make the loop read or write outside a buffer.
 *
 * SCATTER: inputs self (the target's view), index and src (both views of
 *   the index's sizes); attr.scalar = dim, attr.scalar2 = mode. The result
 *   [self sizes] is self's elements, then for each c of the index in
 *   row-major order out[c with c[dim] = index[c]] = src[c] (mode 0) or
 *   += src[c] (mode 1). Sequential, so duplicate indices accumulate (add:
 *   index_add_) or the last one wins (copy: scatter_), as in Torch's CPU
 *   loops.
 */
#include <stdio.h>
#include <string.h>

#include "runtime.h"

/* A row-major walk over a view (offsets in elements), and over the
 * contiguous index space of its sizes. */
typedef struct walk {
  const graph_view *v;
  int64_t idx[KILN_MAX_DIMS];
  int64_t off;
} walk;

static void walk_init(walk *w, const graph_view *v) {
  w->v = v;
  w->off = v->offset;
  for (int d = 0; d < v->ndim; d++) w->idx[d] = 0;
}

static void walk_next(walk *w) {
  const graph_view *v = w->v;
  for (int d = v->ndim - 1; d >= 0; d--) {
    w->off += v->strides[d];
    if (++w->idx[d] < v->sizes[d]) return;
    w->off -= v->strides[d] * v->sizes[d];
    w->idx[d] = 0;
  }
}

static int64_t load_index(kiln_dtype dt, const char *base, int64_t off) {
  if (dt == KILN_I32) {
    int32_t x;
    memcpy(&x, base + off * 4, 4);
    return x;
  }
  int64_t x;
  memcpy(&x, base + off * 8, 8);
  return x;
}

/* Checks every index of input `in` of n against size. */
static int check_indices(const graph_node *n, int in, int64_t size, char *err, size_t errlen) {
  const graph_input *ix = &n->inputs[in];
  const char *base = ix->node->buffer->data;
  int64_t count = graph_view_numel(&ix->view);
  walk w;
  walk_init(&w, &ix->view);
  for (int64_t e = 0; e < count; e++, walk_next(&w)) {
    int64_t i = load_index(ix->node->dtype, base, w.off);
    if (i < 0 || i >= size) {
      snprintf(err, errlen, "%s: index %lld is out of range for dim %d of size %lld", graph_ops[n->op].name,
               (long long)i, (int)n->attr.scalar, (long long)size);
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

int rt_index_scatter(graph_node *n, graph_buffer *out, char *err, size_t errlen) {
  const graph_input *self = &n->inputs[0], *ix = &n->inputs[1], *src = &n->inputs[2];
  int dim = (int)n->attr.scalar, mode = (int)n->attr.scalar2;
  int64_t size = self->view.sizes[dim];
  int st = check_indices(n, 1, size, err, errlen);
  if (st != KILN_OK) return st;
  size_t esz = (size_t)graph_dtypes[n->dtype].size;
  char *o = out->data;
  const char *b = self->node->buffer->data;
  walk w;
  walk_init(&w, &self->view);
  for (int64_t e = 0; e < n->numel; e++, walk_next(&w)) memcpy(o + (size_t)e * esz, b + (size_t)w.off * esz, esz);
  int64_t ostride[KILN_MAX_DIMS];
  graph_contiguous_strides(self->view.ndim, self->view.sizes, ostride);
  const char *ib = ix->node->buffer->data, *sb = src->node->buffer->data;
  int64_t count = graph_view_numel(&ix->view);
  walk wi, ws;
  walk_init(&wi, &ix->view);
  walk_init(&ws, &src->view);
  for (int64_t e = 0; e < count; e++, walk_next(&wi), walk_next(&ws)) {
    int64_t i = load_index(ix->node->dtype, ib, wi.off), off = 0;
    for (int d = 0; d < ix->view.ndim; d++) off += (d == dim ? i : wi.idx[d]) * ostride[d];
    const char *v = sb + (size_t)ws.off * esz;
    if (mode == 1)
      add_at(n->dtype, o + (size_t)off * esz, v);
    else
      memcpy(o + (size_t)off * esz, v, esz);
  }
  return KILN_OK;
}
