/*
 * sort_loops.c — the ARGSORT and MODE extern ops: plain C loops over realized
 * buffers, run by rt_run_extern (extern.c). Everything the API builds on
 * them (sort values, topk, kthvalue, median, unique) is a lazy GATHER or
 * narrow of their I64 result (ops/sort.c).
 *
 * Both sort each row along dim (the node's scalar attribute) by
 * graph_order_key: Torch's order, NaN above +inf, -0.0 equal to 0.0. The
 * sort is a stable merge sort of (key, position) pairs (insertion sort
 * below 16 elements), so ties keep their input order; descending sorts
 * the complemented keys, which keeps ties in input order too, as Torch's
 * stable descending sort does. O(n log n) per row; rows are split across
 * the thread pool (rt_pool_run), each chunk with its own scratch.
 *
 * ARGSORT: input t's view; result [t sizes] I64, contiguous: result
 *   [..., j, ...] = the position along dim of the j-th element of the row
 *   in sorted order. scalar2 = 1 for descending.
 * MODE: input t's view; result [t sizes with dim of size 1] I64: per row
 *   the position of the most frequent key (ties: the smallest key; all
 *   NaNs are one key), the last such position — what Torch 1.13's CPU mode
 *   returns for rows its std::sort leaves stable (up to 16 elements).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "graph_walk.h"
#include "pool.h"
#include "rt_internal.h"

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

/* One sort loop: ARGSORT (mode false) or MODE over the rows of n's
 * input, split across the pool by rows (each row is independent, so the
 * result does not depend on the split). Each chunk has its own scratch. */
typedef struct sort_job {
  const graph_node *n;
  const char *in;
  int64_t *out;
  bool mode;
  atomic_bool oom;
} sort_job;

static _Thread_local int last_threads = 1;

/* The result of rows [start, end) of the job in bufs[0]. */
static void sort_rows(void *const *bufs, int64_t start, int64_t end) {
  sort_job *job = bufs[0];
  const graph_node *n = job->n;
  int dim = (int)graph_attr_scalar(n);
  bool descending = !job->mode && graph_attr_scalar2(n) != 0;
  const graph_input *x = &n->inputs[0];
  int64_t len = x->view.sizes[dim], s = x->view.strides[dim];
  if (start >= end) return;
  sort_pair *pairs = graph_malloc(sizeof *pairs * (size_t)(2 * len));
  if (!pairs) {
    job->oom = true;
    return;
  }
  int64_t ostride[KILN_MAX_DIMS];
  graph_contiguous_strides(n->ndim, n->sizes, ostride);
  graph_view rows = n->inputs[0].view;
  rows.sizes[dim] = 1; /* a walk over it visits the first element of each row */
  graph_walk w;
  graph_walk_init(&w, &rows, start);
  for (int64_t r = start; r < end; r++, graph_walk_next(&w)) {
    sort_row(x->node->dtype, job->in, w.off, len, s, descending, pairs, pairs + len);
    if (job->mode) {
      int64_t best = 0, best_pos = 0, run = 0;
      for (int64_t j = 0; j < len; j++) {
        run++;
        if (j + 1 < len && pairs[j + 1].key == pairs[j].key) continue;
        if (run > best) best = run, best_pos = pairs[j].pos; /* the run's last position */
        run = 0;
      }
      job->out[r] = best_pos; /* MODE's result is [rows] in row-major order */
      continue;
    }
    int64_t at = 0;
    for (int d = 0; d < n->ndim; d++) at += w.idx[d] * ostride[d];
    for (int64_t j = 0; j < len; j++) job->out[at + j * ostride[dim]] = pairs[j].pos;
  }
  free(pairs);
}

static int run_sort(const graph_node *n, const void *in, graph_buffer *out, bool mode, char *err, size_t errlen) {
  last_threads = 1;
  if (n->numel == 0) return KILN_OK;
  const graph_view *v = &n->inputs[0].view;
  int64_t len = v->sizes[(int)graph_attr_scalar(n)], lg = 1;
  while (lg < 62 && (1LL << lg) < len) lg++;
  sort_job job = {.n = n, .in = in, .out = out->data, .mode = mode};
  void *bufs[1] = {&job};
  last_threads = rt_pool_run(sort_rows, bufs, graph_view_numel(v) / len, len * lg);
  if (!job.oom) return KILN_OK;
  snprintf(err, errlen, "out of memory sorting rows of %lld elements", (long long)len);
  return KILN_ERR_OOM;
}

int rt_sort_argsort(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  return run_sort(n, in[0], out, false, err, errlen);
}

int rt_sort_mode(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  return run_sort(n, in[0], out, true, err, errlen);
}

int rt_sort_last_threads(void) { return last_threads; }
