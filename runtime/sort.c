/*
 * sort.c — the ARGSORT and MODE extern ops: plain C loops over realized
 * buffers, run by rt_run_extern (extern.c). Everything the API builds on
 * them (sort values, topk, kthvalue, median, unique) is a lazy GATHER or
 * narrow of their I64 result (api/sort.c).
 *
 * Both sort each row along dim (the node's scalar attribute) by
 * graph_order_key: Torch's order, NaN above +inf, -0.0 equal to 0.0. The
 * sort is a stable merge sort of (key, position) pairs (insertion sort
 * below 16 elements), so ties keep their input order; descending sorts
 * the complemented keys, which keeps ties in input order too, as Torch's
 * stable descending sort does. O(n log n) per row, one thread.
 *
 * ARGSORT: input t's view; result [t sizes] I64, contiguous: result
 *   [..., j, ...] = the position along dim of the j-th element of the row
 *   in sorted order. scalar2 = 1 for descending.
 * MODE: input t's view; result [t sizes with dim of size 1] I64: per row
 *   the position of the most frequent key (ties: the smallest key; all
 *   NaNs are one key), the last such position — what Torch 1.13's CPU mode
 *   returns for rows its std::sort leaves stable (up to 16 elements).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "graph_walk.h"
#include "runtime.h"

typedef struct sort_pair {
  uint64_t key;
  int64_t pos;
} sort_pair;

static void insertion_sort(sort_pair *a, int64_t n) {
  for (int64_t i = 1; i < n; i++) {
    sort_pair x = a[i];
    int64_t j = i;
    for (; j > 0 && a[j - 1].key > x.key; j--) a[j] = a[j - 1];
    a[j] = x;
  }
}

/* Stable sort of a [n] by key; tmp has room for n pairs. */
static void merge_sort(sort_pair *a, sort_pair *tmp, int64_t n) {
  if (n <= 16) {
    insertion_sort(a, n);
    return;
  }
  int64_t h = n / 2;
  merge_sort(a, tmp, h);
  merge_sort(a + h, tmp, n - h);
  if (a[h - 1].key <= a[h].key) return; /* already in order */
  memcpy(tmp, a, sizeof *a * (size_t)h);
  int64_t i = 0, j = h, k = 0;
  while (i < h && j < n) a[k++] = a[j].key < tmp[i].key ? a[j++] : tmp[i++];
  while (i < h) a[k++] = tmp[i++];
}

/* The rows of n's input along dim: a view of its sizes with dim set to
 * 1, so a walk over it visits the first element of each row. */
static graph_view row_starts(const graph_node *n, int dim) {
  graph_view v = n->inputs[0].view;
  v.sizes[dim] = 1;
  return v;
}

/* Loads the row at storage offset off (n elements, stride s) into pairs,
 * complemented keys when descending, and sorts them. */
static void sort_row(kiln_dtype dt, const char *base, int64_t off, int64_t len, int64_t s, bool descending,
                     sort_pair *pairs, sort_pair *tmp) {
  size_t esz = (size_t)graph_dtypes[dt].size;
  for (int64_t j = 0; j < len; j++) {
    uint64_t k = graph_order_key(dt, base + (size_t)(off + j * s) * esz);
    pairs[j] = (sort_pair){descending ? ~k : k, j};
  }
  merge_sort(pairs, tmp, len);
}

/* Room for one row (2 x len pairs), or an error. */
static sort_pair *row_buffers(int64_t len, char *err, size_t errlen) {
  sort_pair *p = graph_malloc(sizeof *p * (size_t)(2 * (len > 0 ? len : 1)));
  if (!p) snprintf(err, errlen, "out of memory sorting rows of %lld elements", (long long)len);
  return p;
}

int rt_sort_argsort(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  int dim = (int)graph_attr_scalar(n);
  bool descending = graph_attr_scalar2(n) != 0;
  const graph_input *x = &n->inputs[0];
  int64_t len = x->view.sizes[dim], s = x->view.strides[dim];
  if (n->numel == 0) return KILN_OK;
  sort_pair *pairs = row_buffers(len, err, errlen);
  if (!pairs) return KILN_ERR_OOM;
  int64_t ostride[KILN_MAX_DIMS];
  graph_contiguous_strides(n->ndim, n->sizes, ostride);
  graph_view rows = row_starts(n, dim);
  int64_t count = graph_view_numel(&rows);
  int64_t *o = out->data;
  graph_walk w;
  graph_walk_init(&w, &rows, 0);
  for (int64_t r = 0; r < count; r++, graph_walk_next(&w)) {
    sort_row(x->node->dtype, in[0], w.off, len, s, descending, pairs, pairs + len);
    int64_t at = 0;
    for (int d = 0; d < n->ndim; d++) at += w.idx[d] * ostride[d];
    for (int64_t j = 0; j < len; j++) o[at + j * ostride[dim]] = pairs[j].pos;
  }
  free(pairs);
  return KILN_OK;
}

int rt_sort_mode(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  int dim = (int)graph_attr_scalar(n);
  const graph_input *x = &n->inputs[0];
  int64_t len = x->view.sizes[dim], s = x->view.strides[dim];
  if (n->numel == 0) return KILN_OK;
  sort_pair *pairs = row_buffers(len, err, errlen);
  if (!pairs) return KILN_ERR_OOM;
  graph_view rows = row_starts(n, dim);
  int64_t *o = out->data;
  graph_walk w;
  graph_walk_init(&w, &rows, 0);
  for (int64_t r = 0; r < n->numel; r++, graph_walk_next(&w)) {
    sort_row(x->node->dtype, in[0], w.off, len, s, false, pairs, pairs + len);
    int64_t best = 0, best_pos = 0, run = 0;
    for (int64_t j = 0; j < len; j++) {
      run++;
      if (j + 1 < len && pairs[j + 1].key == pairs[j].key) continue;
      if (run > best) best = run, best_pos = pairs[j].pos; /* the run's last position */
      run = 0;
    }
    o[r] = best_pos;
  }
  free(pairs);
  return KILN_OK;
}
