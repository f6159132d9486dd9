/*
 * graph_walk.h — a row-major walk over a strided view: the storage offset
 * (in elements) of each element of the view in turn, the last dim fastest;
 * and the value of an index element. Used where C loops walk realized
 * buffers: the file writers (io/) and element callbacks (ops/callbacks.c), the index checks
 * (ops/index.c) and the sort loops (runtime/sort_loops.c).
 * Internal.
 *
 * The walk keeps the multi-index and the running offset, so each step costs
 * one add in the common case (Torch7's THTensorApply does the same).
 */
#ifndef KILN_GRAPH_WALK_H
#define KILN_GRAPH_WALK_H

#include <string.h>

#include "graph.h"

typedef struct graph_walk {
  const graph_view *v;
  int64_t idx[KILN_MAX_DIMS]; /* multi-index of the current element */
  int64_t off;                /* its storage offset, in elements */
} graph_walk;

/** Starts at element `start` (row-major position, 0 ≤ start ≤ numel). */
static inline void graph_walk_init(graph_walk *w, const graph_view *v, int64_t start) {
  w->v = v;
  w->off = v->offset;
  for (int d = v->ndim - 1; d >= 0; d--) {
    int64_t size = v->sizes[d] > 0 ? v->sizes[d] : 1;
    w->idx[d] = start % size;
    start /= size;
    w->off += w->idx[d] * v->strides[d];
  }
}

/** Moves to the next element in row-major order. */
static inline void graph_walk_next(graph_walk *w) {
  const graph_view *v = w->v;
  for (int d = v->ndim - 1; d >= 0; d--) {
    w->off += v->strides[d];
    if (++w->idx[d] < v->sizes[d]) return;
    w->off -= v->strides[d] * v->sizes[d];
    w->idx[d] = 0;
  }
}

/** The index value at storage offset off of a realized I64 or I32 buffer. */
static inline int64_t graph_load_index(kiln_dtype dt, const char *base, int64_t off) {
  if (dt == KILN_I32) {
    int32_t x;
    memcpy(&x, base + off * 4, 4);
    return x;
  }
  int64_t x;
  memcpy(&x, base + off * 8, 8);
  return x;
}

#endif /* KILN_GRAPH_WALK_H */
