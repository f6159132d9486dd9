/*
 * sort.c — sort, argsort, topk, kthvalue, median, mode, max/min with
 * indices and unique: Torch 1.13's sorting ops, built on two extern ops
 * (graph/ops.def ARGSORT and MODE, run by runtime/sort_loops.c) and lazy
 * GATHERs.
 *
 * Every op but unique records nodes and forces nothing:
 *   sort      indices = ARGSORT(t), values = gather(t, dim, indices)
 *   topk      the first k of a descending (largest) or ascending ARGSORT,
 *             then gather
 *   kthvalue  position k-1 of an ascending ARGSORT, then gather
 *   median    position (n-1)/2 — or, in a row holding c > 0 NaNs, n - c
 *             (the first NaN: Torch's median propagates NaN and returns a
 *             NaN's index) — a where() over a NaN count, then two gathers
 *   max/min   kiln_argmax/argmin (first occurrence, NaN wins), then gather
 *   mode      MODE(t), then gather
 * The indices these gathers read come from ARGSORT/MODE/ARGMAX nodes and
 * are in range by construction, so they go through ops_gather directly,
 * never through kiln_gather's ops_index_check, which would force them.
 * Values are GATHER nodes: they fuse into their readers, and their
 * gradient is GATHER's rule (g scattered back to the selected elements).
 *
 * unique's output size depends on the data (as masked_select's does): it
 * forces t and the ARGSORT of its flat view, finds the runs of equal keys
 * on the host, and returns values as a lazy gather of each run's first
 * element, inverse and counts as new I64 tensors.
 *
 * A 0-d t is read as a [1] view (dim 0 or -1), and the results are 0-d
 * again, as Torch's (unique's values and counts stay 1-D).
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* t as the tensor the row ops read: t itself, or a [1] view of a 0-d t.
 * dim is wrapped into *d. New untracked reference, or NULL with the error
 * set. */
static kiln_tensor *rows_of(kiln_tensor *t, int dim, int *d, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  *d = api_wrap_dim(dim, t->view.ndim, fn);
  if (*d < 0) return NULL;
  if (t->view.ndim > 0) return kiln_retain(t);
  graph_view v = {.ndim = 1, .offset = t->view.offset, .sizes = {1}, .strides = {1}};
  return api_view(t, &v, fn);
}

/* Both outputs non-NULL (KILN_ERR_ARG naming them otherwise). */
static bool check_outputs(kiln_tensor **values, kiln_tensor **indices, const char *fn) {
  if (values && indices) return true;
  api_error(KILN_ERR_ARG, fn, "output pointer %s is NULL", values ? "indices" : "values");
  return false;
}

/* Reductions along d need a row: Torch's "Expected reduction dim to have
 * non-zero size". */
static bool check_row(const kiln_tensor *x, int d, const char *fn) {
  if (x->view.sizes[d] > 0) return true;
  api_error(KILN_ERR_SHAPE, fn, "cannot reduce dim %d of size 0", d);
  return false;
}

/* The ARGSORT of x along d (untracked): I64, contiguous [x sizes]. An
 * empty x needs no loop: an empty I64 tensor. */
static kiln_tensor *argsort_node(kiln_tensor *x, int d, bool descending, const char *fn) {
  const graph_view *v = &x->view;
  if (graph_view_numel(v) == 0) return ops_move_like(kiln_empty(KILN_I64, v->ndim, v->sizes), x, fn);
  graph_node *n = graph_node_new(GRAPH_OP_ARGSORT, KILN_I64, v->ndim, v->sizes);
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  n->cdtype = x->storage->dtype;
  graph_attr_set_scalar(n, d);
  graph_attr_set_scalar2(n, descending ? 1 : 0);
  if (!api_add_input(n, x, v)) {
    graph_node_release(n);
    return NULL;
  }
  return api_tensor_from_node(n, fn);
}

/* The MODE of x along d (untracked): I64 [x sizes with d of size 1]. */
static kiln_tensor *mode_node(kiln_tensor *x, int d, const char *fn) {
  int64_t sizes[KILN_MAX_DIMS];
  memcpy(sizes, x->view.sizes, sizeof(int64_t) * (size_t)x->view.ndim);
  sizes[d] = 1;
  if (graph_view_numel(&x->view) == 0) return ops_move_like(kiln_empty(KILN_I64, x->view.ndim, sizes), x, fn);
  graph_node *n = graph_node_new(GRAPH_OP_MODE, KILN_I64, x->view.ndim, sizes);
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  n->cdtype = x->storage->dtype;
  graph_attr_set_scalar(n, d);
  if (!api_add_input(n, x, &x->view)) {
    graph_node_release(n);
    return NULL;
  }
  return api_tensor_from_node(n, fn);
}

/* x's elements at index (in range by construction) along d: a lazy
 * GATHER, untracked; an empty index gives an empty tensor of x's dtype. */
static kiln_tensor *take(kiln_tensor *x, int d, kiln_tensor *index, const char *fn) {
  if (!index) return NULL;
  const graph_view *iv = &index->view;
  if (graph_view_numel(iv) == 0) return ops_move_like(kiln_empty(x->storage->dtype, iv->ndim, iv->sizes), x, fn);
  return ops_gather(x, &x->view, d, index, iv, fn);
}

/* r reshaped for the caller (untracked; r is released): 0-d when t was
 * (scalar), else without dim d unless keep. */
static kiln_tensor *finish(kiln_tensor *r, bool scalar, int d, bool keep, const char *fn) {
  if (!r || (!scalar && keep)) return r;
  graph_view v = {.ndim = 0, .offset = r->view.offset};
  if (!scalar)
    for (int k = 0; k < r->view.ndim; k++) {
      if (k == d) continue;
      v.sizes[v.ndim] = r->view.sizes[k];
      v.strides[v.ndim++] = r->view.strides[k];
    }
  kiln_tensor *s = api_view(r, &v, fn);
  kiln_release(r);
  return s;
}

/* Hands the pair to the caller (tracked), or on failure releases both and
 * leaves the outputs untouched (kiln.h's rule). Returns the status. */
static int deliver(kiln_tensor *v, kiln_tensor *i, kiln_tensor **values, kiln_tensor **indices) {
  if (!v || !i) {
    kiln_release(v), kiln_release(i);
    int st = api_status();
    return st != KILN_OK ? st : KILN_ERR_ARG; /* a NULL input keeps an older error */
  }
  *values = api_track(v);
  *indices = api_track(i);
  return KILN_OK;
}

KILN_API int kiln_sort(kiln_tensor *t, int dim, bool descending, bool stable, kiln_tensor **values,
                       kiln_tensor **indices) {
  const char *fn = "kiln_sort";
  (void)stable; /* the sort is always stable: a valid unstable result too */
  if (!check_outputs(values, indices, fn)) return KILN_ERR_ARG;
  int d;
  api_untracked_begin();
  kiln_tensor *x = rows_of(t, dim, &d, fn), *i = NULL, *v = NULL;
  if (x) i = argsort_node(x, d, descending, fn);
  if (i) v = take(x, d, i, fn);
  bool scalar = x && t->view.ndim == 0;
  v = finish(v, scalar, d, true, fn);
  i = finish(i, scalar, d, true, fn);
  kiln_release(x);
  api_untracked_end();
  return deliver(v, i, values, indices);
}

KILN_API kiln_tensor *kiln_argsort(kiln_tensor *t, int dim, bool descending, bool stable) {
  const char *fn = "kiln_argsort";
  (void)stable;
  int d;
  api_untracked_begin();
  kiln_tensor *x = rows_of(t, dim, &d, fn);
  kiln_tensor *i = x ? finish(argsort_node(x, d, descending, fn), t->view.ndim == 0, d, true, fn) : NULL;
  kiln_release(x);
  api_untracked_end();
  return api_track(i);
}

KILN_API int kiln_topk(kiln_tensor *t, int64_t k, int dim, bool largest, bool sorted, kiln_tensor **values,
                       kiln_tensor **indices) {
  const char *fn = "kiln_topk";
  (void)sorted; /* always sorted: a valid order for sorted = false too */
  if (!check_outputs(values, indices, fn)) return KILN_ERR_ARG;
  int d;
  api_untracked_begin();
  kiln_tensor *x = rows_of(t, dim, &d, fn), *i = NULL, *v = NULL;
  bool scalar = x && t->view.ndim == 0;
  if (x) {
    int64_t n = x->view.sizes[d];
    if (k < 0 || k > n) {
      api_error(KILN_ERR_ARG, fn, "k = %lld is out of range [0, %lld] for dim %d", (long long)k, (long long)n, dim);
    } else {
      kiln_tensor *all = argsort_node(x, d, largest, fn);
      /* Torch returns a 0-d t's element whatever k (0 or 1) */
      i = all ? kiln_narrow(all, d, 0, scalar ? 1 : k) : NULL;
      kiln_release(all);
      v = take(x, d, i, fn);
    }
  }
  v = finish(v, scalar, d, true, fn);
  i = finish(i, scalar, d, true, fn);
  kiln_release(x);
  api_untracked_end();
  return deliver(v, i, values, indices);
}

/* The reductions: pos (untracked, I64 [x sizes with d of size 1]) picks
 * the element of each row; values gather it; both reshaped as keepdim
 * says, into *v and *i (untracked: the caller delivers them once its
 * untracked section ended). pos is released. */
static void pick(kiln_tensor *t, kiln_tensor *x, int d, kiln_tensor *pos, bool keepdim, kiln_tensor **v,
                 kiln_tensor **i, const char *fn) {
  bool scalar = t->view.ndim == 0;
  *v = finish(take(x, d, pos, fn), scalar, d, keepdim, fn);
  *i = finish(pos, scalar, d, keepdim, fn);
}

/* Shared entry of the reductions: outputs checked, x the rows
 * (untracked, NULL on error), d the dim. */
static kiln_tensor *reduction_rows(kiln_tensor *t, int dim, int *d, kiln_tensor **values, kiln_tensor **indices,
                                   const char *fn) {
  if (!check_outputs(values, indices, fn)) return NULL;
  kiln_tensor *x = rows_of(t, dim, d, fn);
  if (x && !check_row(x, *d, fn)) {
    kiln_release(x);
    return NULL;
  }
  return x;
}

static int extremum(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices, bool max,
                    const char *fn) {
  int d;
  kiln_tensor *v = NULL, *i = NULL;
  api_untracked_begin();
  kiln_tensor *x = reduction_rows(t, dim, &d, values, indices, fn);
  if (x) pick(t, x, d, max ? kiln_argmax(x, d, true) : kiln_argmin(x, d, true), keepdim, &v, &i, fn);
  kiln_release(x);
  api_untracked_end();
  return deliver(v, i, values, indices);
}

KILN_API int kiln_max(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices) {
  return extremum(t, dim, keepdim, values, indices, true, "kiln_max");
}

KILN_API int kiln_min(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices) {
  return extremum(t, dim, keepdim, values, indices, false, "kiln_min");
}

/* Position k0 (0-based) of each row in ascending order, or for float
 * rows holding NaNs (when nan_first) the first NaN's: untracked I64 [x
 * sizes with d of size 1]. */
static kiln_tensor *order_stat(kiln_tensor *x, int d, int64_t k0, bool nan_first, const char *fn) {
  kiln_tensor *all = argsort_node(x, d, false, fn);
  if (!all) return NULL;
  if (!nan_first || !graph_is_float(x->storage->dtype) || graph_view_numel(&x->view) == 0) {
    kiln_tensor *r = kiln_narrow(all, d, k0, 1);
    kiln_release(all);
    return r;
  }
  int64_t n = x->view.sizes[d];
  kiln_tensor *isnan = kiln_ne(x, x), *c = kiln_sum(isnan, 1, &d, true);
  kiln_tensor *neg = kiln_neg(c), *first_nan = kiln_add_scalar(neg, (double)n);
  kiln_tensor *mid = kiln_scalar(KILN_I64, (double)k0);
  kiln_tensor *has = kiln_gt_scalar(c, 0), *p = kiln_where(has, first_nan, mid);
  kiln_tensor *r = p ? ops_gather(all, &all->view, d, p, &p->view, fn) : NULL;
  kiln_release(isnan), kiln_release(c), kiln_release(neg), kiln_release(first_nan), kiln_release(mid);
  kiln_release(has), kiln_release(p), kiln_release(all);
  return r;
}

KILN_API int kiln_kthvalue(kiln_tensor *t, int64_t k, int dim, bool keepdim, kiln_tensor **values,
                           kiln_tensor **indices) {
  const char *fn = "kiln_kthvalue";
  int d;
  kiln_tensor *v = NULL, *i = NULL;
  api_untracked_begin();
  kiln_tensor *x = reduction_rows(t, dim, &d, values, indices, fn);
  if (x && (k < 1 || k > x->view.sizes[d]))
    api_error(KILN_ERR_ARG, fn, "k = %lld is out of range [1, %lld] for dim %d", (long long)k,
              (long long)x->view.sizes[d], dim);
  else if (x)
    pick(t, x, d, order_stat(x, d, k - 1, false, fn), keepdim, &v, &i, fn);
  kiln_release(x);
  api_untracked_end();
  return deliver(v, i, values, indices);
}

KILN_API int kiln_median(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices) {
  const char *fn = "kiln_median";
  int d;
  kiln_tensor *v = NULL, *i = NULL;
  api_untracked_begin();
  kiln_tensor *x = reduction_rows(t, dim, &d, values, indices, fn);
  if (x) pick(t, x, d, order_stat(x, d, (x->view.sizes[d] - 1) / 2, true, fn), keepdim, &v, &i, fn);
  kiln_release(x);
  api_untracked_end();
  return deliver(v, i, values, indices);
}

KILN_API int kiln_mode(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices) {
  const char *fn = "kiln_mode";
  int d;
  kiln_tensor *v = NULL, *i = NULL;
  api_untracked_begin();
  kiln_tensor *x = reduction_rows(t, dim, &d, values, indices, fn);
  if (x) pick(t, x, d, mode_node(x, d, fn), keepdim, &v, &i, fn);
  kiln_release(x);
  api_untracked_end();
  return deliver(v, i, values, indices);
}

/* ---------------------------------------------------------------- unique */

/* Runs of equal keys of flat [n] (forced, host data base) in the order of
 * perm [n] (its ascending stable argsort): first[r] the position of run
 * r's first element, count[r] its length, inv[e] the run of element e.
 * Returns the number of runs. */
static int64_t find_runs(const kiln_tensor *flat, const char *base, const int64_t *perm, int64_t n, int64_t *first,
                         int64_t *count, int64_t *inv) {
  kiln_dtype dt = flat->storage->dtype;
  size_t esz = (size_t)graph_dtypes[dt].size;
  int64_t off = flat->view.offset, s = flat->view.strides[0], runs = 0;
  uint64_t prev = 0;
  for (int64_t j = 0; j < n; j++) {
    uint64_t key = graph_order_key(dt, base + (size_t)(off + perm[j] * s) * esz);
    if (j == 0 || key != prev) {
      first[runs] = perm[j];
      count[runs++] = 0;
    }
    count[runs - 1]++;
    inv[perm[j]] = runs - 1;
    prev = key;
  }
  return runs;
}

/* unique once t has elements: flat is t's row-major [n] view or copy. */
static int unique_of(kiln_tensor *t, kiln_tensor *flat, kiln_tensor **v, kiln_tensor **inv_t, kiln_tensor **cnt_t,
                     const char *fn) {
  int64_t n = flat->view.sizes[0];
  kiln_tensor *perm_t = argsort_node(flat, 0, false, fn);
  if (!perm_t) return api_status();
  int64_t *buf = graph_malloc(sizeof(int64_t) * (size_t)n * 4);
  void *tmp_p = NULL, *tmp_x = NULL;
  const char *pb = buf ? api_host_data(perm_t, fn, &tmp_p) : NULL;
  const char *xb = pb ? api_host_data(flat, fn, &tmp_x) : NULL;
  int st = xb ? KILN_OK : buf ? api_status() : api_error(KILN_ERR_OOM, fn, "out of memory");
  if (st == KILN_OK) {
    int64_t *perm = buf, *first = buf + n, *count = buf + 2 * n, *inv = buf + 3 * n;
    memcpy(perm, (const int64_t *)pb + perm_t->view.offset, sizeof(int64_t) * (size_t)n);
    int64_t runs = find_runs(flat, xb, perm, n, first, count, inv);
    kiln_tensor *ft = ops_move_like(kiln_from_data(KILN_I64, 1, &runs, first), t, fn);
    *v = ft ? ops_gather(flat, &flat->view, 0, ft, &ft->view, fn) : NULL;
    *inv_t = ops_move_like(kiln_from_data(KILN_I64, t->view.ndim, t->view.sizes, inv), t, fn);
    *cnt_t = ops_move_like(kiln_from_data(KILN_I64, 1, &runs, count), t, fn);
    kiln_release(ft);
    st = *v && *inv_t && *cnt_t ? KILN_OK : api_status();
  }
  free(tmp_p), free(tmp_x), free(buf);
  kiln_release(perm_t);
  return st;
}

KILN_API int kiln_unique(kiln_tensor *t, bool sorted, bool return_inverse, bool return_counts, kiln_tensor **values,
                         kiln_tensor **inverse, kiln_tensor **counts) {
  const char *fn = "kiln_unique";
  (void)sorted; /* always sorted: a valid order for sorted = false too */
  if (!values || (return_inverse && !inverse) || (return_counts && !counts))
    return api_error(KILN_ERR_ARG, fn, "output pointer %s is NULL",
                     !values ? "values" : (return_inverse && !inverse) ? "inverse" : "counts");
  if (!api_check(t, fn, "t")) return api_status();
  kiln_tensor *v = NULL, *inv = NULL, *cnt = NULL;
  int64_t all = -1, zero = 0;
  api_untracked_begin();
  kiln_tensor *flat = kiln_reshape(t, 1, &all);
  int st = flat ? KILN_OK : api_status();
  if (flat && flat->view.sizes[0] == 0) {
    v = ops_move_like(kiln_empty(t->storage->dtype, 1, &zero), t, fn);
    inv = ops_move_like(kiln_empty(KILN_I64, t->view.ndim, t->view.sizes), t, fn);
    cnt = ops_move_like(kiln_empty(KILN_I64, 1, &zero), t, fn);
    st = v && inv && cnt ? KILN_OK : api_status();
  } else if (flat) {
    st = unique_of(t, flat, &v, &inv, &cnt, fn);
  }
  kiln_release(flat);
  api_untracked_end();
  if (st != KILN_OK) {
    kiln_release(v), kiln_release(inv), kiln_release(cnt);
    return st;
  }
  /* an output not requested is released, and set to NULL when given */
  *values = api_track(v);
  if (inverse) *inverse = return_inverse ? api_track(inv) : NULL;
  if (!return_inverse) kiln_release(inv);
  if (counts) *counts = return_counts ? api_track(cnt) : NULL;
  if (!return_counts) kiln_release(cnt);
  return KILN_OK;
}
