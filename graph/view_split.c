/*
 * view_split.c — a view read through a reshape copy, without the copy.
 *
 * A CAST to the same dtype whose input view has other sizes than the
 * node (kiln_reshape of a view that no strided view can express: the
 * window view of a convolution, a permuted tensor merged) writes its
 * input view's elements in row-major order. A reader's view of that
 * copy (outer: offset, sizes, strides over the copy's contiguous
 * buffer) often still maps onto the copy's input directly: each outer
 * dim steps through a run of whole input dims (its stride is the
 * row-major step of the run's last dim, its size the run's element
 * count). Then outer index i of dim d is the run's sub-indices
 * (row-major) and element (i_0, ..., i_n) of the outer view is
 *
 *     src_base[offset + Σ_d Σ_{t in run d} sub_t(i_d) · stride_t]
 *
 * which the generated GEMM's packing reads (runtime/gemm_pack.c): a
 * convolution's B operand [G, C/G·ΠK, N·ΠOut] is its window view split
 * as [G], [C/G, *K], [N, *Out], so no im2col buffer exists.
 *
 * Broadcast (stride 0) and size-1 outer dims take no sub-dims. Size-1
 * input dims are dropped first (they do not change the row-major
 * order). Anything else — a dim that steps inside an input dim, two
 * outer dims over one run, an offset inside a run — is not split.
 */
#include "graph.h"

/* The input view without its size-1 dims; false when it is empty. */
static bool compact(const graph_view *v, int *n, int64_t *sizes, int64_t *strides) {
  *n = 0;
  for (int t = 0; t < v->ndim; t++) {
    if (v->sizes[t] == 0) return false;
    if (v->sizes[t] == 1) continue;
    sizes[*n] = v->sizes[t];
    strides[(*n)++] = v->strides[t];
  }
  return true;
}

/* Appends the run of input dims that outer dim (size, stride) steps
 * through to out, marking them used; false when there is none. */
static bool add_run(graph_split_view *out, int n, const int64_t *sz, const int64_t *st, const int64_t *below,
                    bool *used, int64_t size, int64_t stride) {
  int j = -1;
  for (int t = 0; t < n && j < 0; t++)
    if (below[t] == stride) j = t;
  if (j < 0) return false;
  int64_t prod = 1;
  int a = j;
  while (a >= 0 && prod < size) prod *= sz[a--];
  if (prod != size) return false;
  for (int t = a + 1; t <= j; t++) {
    if (used[t]) return false;
    used[t] = true;
    out->sizes[out->nsub] = sz[t];
    out->strides[out->nsub++] = st[t];
  }
  return true;
}

bool graph_view_split(const graph_view *outer, const graph_view *src, graph_split_view *out) {
  int n;
  int64_t sz[KILN_MAX_DIMS], st[KILN_MAX_DIMS], below[KILN_MAX_DIMS], total = 1;
  bool used[KILN_MAX_DIMS] = {false};
  if (!compact(src, &n, sz, st)) return false;
  for (int t = n - 1; t >= 0; t--) below[t] = total, total *= sz[t];
  if (outer->offset < 0 || outer->offset >= total) return false;
  *out = (graph_split_view){.ndim = outer->ndim, .offset = src->offset};
  for (int d = 0; d < outer->ndim; d++) {
    out->first[d] = out->nsub;
    int64_t size = outer->sizes[d], stride = outer->strides[d];
    if (size == 0 || stride < 0) return false;
    if (size == 1 || stride == 0) continue;
    if (!add_run(out, n, sz, st, below, used, size, stride)) return false;
  }
  out->first[outer->ndim] = out->nsub;
  for (int t = 0; t < n; t++) { /* the outer offset: fixed indices of the unused dims */
    int64_t at = outer->offset / below[t] % sz[t];
    if (used[t] && at != 0) return false;
    out->offset += at * st[t];
  }
  return true;
}

int64_t graph_split_offset(const graph_split_view *s, int d, int64_t i) {
  int64_t off = 0;
  for (int t = s->first[d + 1] - 1; t >= s->first[d]; t--) {
    off += i % s->sizes[t] * s->strides[t];
    i /= s->sizes[t];
  }
  return off;
}
