/*
 * walk.h — a row-major walk over a strided view: the storage offset (in
 * elements) of each element of the view in turn, the last dim fastest.
 * Used by the file writers (io_common.c) and the element callbacks
 * (callbacks.c). Internal to the API layer.
 *
 * The walk keeps the multi-index and the running offset, so each step costs
 * one add in the common case (Torch7's THTensorApply does the same).
 */
#ifndef KILN_API_WALK_H
#define KILN_API_WALK_H

#include "graph.h"

typedef struct api_walk {
  const graph_view *v;
  int64_t idx[KILN_MAX_DIMS]; /* multi-index of the current element */
  int64_t off;                /* its storage offset, in elements */
} api_walk;

/** Starts at element `start` (row-major position, 0 ≤ start ≤ numel). */
static inline void api_walk_init(api_walk *w, const graph_view *v, int64_t start) {
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
static inline void api_walk_next(api_walk *w) {
  const graph_view *v = w->v;
  for (int d = v->ndim - 1; d >= 0; d--) {
    w->off += v->strides[d];
    if (++w->idx[d] < v->sizes[d]) return;
    w->off -= v->strides[d] * v->sizes[d];
    w->idx[d] = 0;
  }
}

#endif /* KILN_API_WALK_H */
