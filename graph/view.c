/*
 * view.c — strided views: element counts, contiguity, extents, and Torch's
 * rule for re-viewing a strided window with new sizes (no copy).
 *
 * All sizes, strides and offsets are in elements. Strides are never
 * negative (Kiln rejects negative strides, as Torch does).
 */
#include "graph.h"

int64_t graph_view_numel(const graph_view *v) {
  int64_t n = 1;
  for (int i = 0; i < v->ndim; i++) n *= v->sizes[i];
  return n;
}

void graph_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= sizes[i] > 1 ? sizes[i] : 1;
  }
}

graph_view graph_view_contiguous(int ndim, const int64_t *sizes) {
  graph_view v = {0};
  v.ndim = ndim;
  for (int i = 0; i < ndim; i++) v.sizes[i] = sizes[i];
  graph_contiguous_strides(ndim, sizes, v.strides);
  return v;
}

bool graph_view_injective(const graph_view *v) {
  int order[KILN_MAX_DIMS], m = 0;
  for (int d = 0; d < v->ndim; d++) {
    if (v->sizes[d] == 0) return true;
    if (v->sizes[d] > 1) order[m++] = d;
  }
  for (int i = 1; i < m; i++) /* insertion sort by stride */
    for (int j = i; j > 0 && v->strides[order[j]] < v->strides[order[j - 1]]; j--) {
      int x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  int64_t extent = 1; /* elements spanned by the dims so far */
  for (int i = 0; i < m; i++) {
    const int d = order[i];
    if (v->strides[d] < extent) return false;
    extent = v->strides[d] * (v->sizes[d] - 1) + extent;
  }
  return true;
}

bool graph_view_is_contiguous(const graph_view *v) {
  int64_t expect = 1;
  for (int i = v->ndim - 1; i >= 0; i--) {
    if (v->sizes[i] == 0) return true;
    if (v->sizes[i] == 1) continue;
    if (v->strides[i] != expect) return false;
    expect *= v->sizes[i];
  }
  return true;
}

int64_t graph_view_extent(const graph_view *v) {
  int64_t last = v->offset;
  for (int i = 0; i < v->ndim; i++) {
    if (v->sizes[i] == 0) return 0;
    last += (v->sizes[i] - 1) * v->strides[i];
  }
  return last + 1;
}

/*
 * Torch's computeStride: walk the old dims from the last, grouping runs of
 * dims that are contiguous with each other (stride[k] == stride[k+1] *
 * size[k+1]); each group of new dims must multiply to one such run.
 */
bool graph_view_reshape(const graph_view *v, int ndim, const int64_t *sizes, graph_view *out) {
  graph_view r = {0};
  r.ndim = ndim;
  r.offset = v->offset;
  for (int i = 0; i < ndim; i++) r.sizes[i] = sizes[i];
  int64_t numel = graph_view_numel(v);
  if (numel == 0 || v->ndim == 0) {
    graph_contiguous_strides(ndim, sizes, r.strides);
    *out = r;
    return true;
  }
  int view_d = ndim - 1;
  int64_t chunk_base_stride = v->strides[v->ndim - 1];
  int64_t tensor_numel = 1, view_numel = 1;
  for (int td = v->ndim - 1; td >= 0; td--) {
    tensor_numel *= v->sizes[td];
    bool boundary = td == 0 ||
                    (v->sizes[td - 1] != 1 && v->strides[td - 1] != tensor_numel * chunk_base_stride);
    if (!boundary) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
      r.strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= sizes[view_d];
      view_d--;
    }
    if (view_numel != tensor_numel) return false;
    if (td > 0) {
      chunk_base_stride = v->strides[td - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return false;
  *out = r;
  return true;
}

bool graph_view_broadcast(const graph_view *v, int ndim, const int64_t *sizes, graph_view *out) {
  int shift = ndim - v->ndim;
  if (shift < 0) return false;
  graph_view r = {.ndim = ndim, .offset = v->offset};
  for (int d = 0; d < ndim; d++) {
    int sd = d - shift;
    if (sd >= 0 && v->sizes[sd] != sizes[d] && v->sizes[sd] != 1) return false;
    r.sizes[d] = sizes[d];
    r.strides[d] = (sd < 0 || v->sizes[sd] != sizes[d]) ? 0 : v->strides[sd];
  }
  *out = r;
  return true;
}
