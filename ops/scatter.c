/*
 * scatter.c — the accumulating scatters built on the SCATTER node:
 * scatter_add_, index_put_, bincount and histc (PyTorch 1.13 semantics).
 *
 * Each records graph nodes only: a SCATTER node (ops_scatter_add, api/
 * index.c: out = self, then out[c with c[dim] = index[c]] += src[c] for
 * every c of the index in row-major order) reading the target's current
 * version, written back by an ASSIGN. So they stay lazy, fuse as SCATTER
 * does, and get their gradients from SCATTER's rule (autograd/grad_rules.c):
 * the target's gradient passes through, src's is a gather of it.
 *
 * What each forces, as Torch's checks do before any write:
 *   scatter_add_  the index (every value checked against the dim's size);
 *   index_put_    the index tensors and masks (a mask stands for the
 *                 columns of its nonzero(); negative values wrap; the linear
 *                 position of each indexed slice is computed on the host);
 *   bincount      t (the result's size is max(t) + 1);
 *   histc         nothing, unless min == max (then t's min and max).
 * An error therefore leaves the target untouched and records nothing.
 *
 * histc's bin of x is computed elementwise, in t's dtype as Torch's CPU
 * kernel (aten/src/ATen/native/cpu/HistogramKernel.cpp, linear
 * interpolation): pos = (x - lo) * bins / (hi - lo), truncated, x == hi in
 * the last bin, x outside [lo, hi] not counted, NaN counted in bin 0 (what
 * Torch 1.13's CPU kernel does: its range test lets NaN through and its
 * bin for NaN comes out 0; checked in tests/python/test_scatter_torch.py).
 * The bins are in
 * range by construction (clamped), so the histogram is one lazy graph: no
 * index is forced (the runtime still checks them before writing).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* ------------------------------------------------------------ helpers */

static bool is_int_dtype(kiln_dtype d) { return d != KILN_BOOL && !graph_is_float(d); }

/* max(ndim, 1): Torch's scatter treats a 0-d tensor as 1-d of size 1. */
static int dims1(const graph_view *v) { return v->ndim > 0 ? v->ndim : 1; }

/* v with a 0-d view seen as [1]. */
static graph_view as_1d(const graph_view *v) {
  graph_view r = *v;
  if (r.ndim == 0) r.ndim = 1, r.sizes[0] = 1, r.strides[0] = 0;
  return r;
}

/* x rounded to dtype d (as storing it in a tensor of d would). */
static double round_to(kiln_dtype d, double x) {
  char b[8];
  graph_store_scalar(d, b, x);
  return graph_load_scalar(d, b);
}

/* ------------------------------------------------------- scatter_add_ */

/* Torch's scatter size rule, 0-d counted as 1-d: index, t and src have the
 * same number of dims, index.size(k) <= src.size(k) for every k and <=
 * t.size(k) for k != d. */
static bool check_scatter_add_sizes(const graph_view *tv, int d, const graph_view *iv, const graph_view *sv,
                                    const char *fn) {
  char a[256], b[256], c[256];
  if (dims1(iv) != dims1(tv) || dims1(sv) != dims1(iv)) {
    api_error(KILN_ERR_SHAPE, fn, "index sizes %s, t sizes %s and src sizes %s must have the same number of dims",
              api_fmt_sizes(a, sizeof a, iv->ndim, iv->sizes), api_fmt_sizes(b, sizeof b, tv->ndim, tv->sizes),
              api_fmt_sizes(c, sizeof c, sv->ndim, sv->sizes));
    return false;
  }
  graph_view t1 = as_1d(tv), i1 = as_1d(iv), s1 = as_1d(sv);
  for (int k = 0; k < t1.ndim; k++) {
    bool bad_t = k != d && i1.sizes[k] > t1.sizes[k], bad_s = i1.sizes[k] > s1.sizes[k];
    if (!bad_t && !bad_s) continue;
    const graph_view *o = bad_t ? tv : sv;
    api_error(KILN_ERR_SHAPE, fn, "index sizes %s exceed %s sizes %s at dim %d",
              api_fmt_sizes(a, sizeof a, iv->ndim, iv->sizes), bad_t ? "t" : "src",
              api_fmt_sizes(b, sizeof b, o->ndim, o->sizes), k);
    return false;
  }
  return true;
}

KILN_API int kiln_scatter_add_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  const char *fn = "kiln_scatter_add_";
  if (!api_check(t, fn, "t") || !api_check(index, fn, "index") || !api_check(src, fn, "src")) return api_status();
  int d = api_wrap_dim(dim, t->view.ndim, fn);
  if (d < 0) return KILN_ERR_ARG;
  if (index->storage->dtype != KILN_I64)
    return api_error(KILN_ERR_DTYPE, fn, "index dtype %s is not i64", graph_dtypes[index->storage->dtype].name);
  if (src->storage->dtype != t->storage->dtype)
    return api_error(KILN_ERR_DTYPE, fn, "src dtype %s differs from t dtype %s",
                     graph_dtypes[src->storage->dtype].name, graph_dtypes[t->storage->dtype].name);
  if (!ops_check_writable(t, fn)) return KILN_ERR_ARG;
  if (graph_view_numel(&index->view) == 0) return KILN_OK; /* Torch: no size checks either */
  if (!check_scatter_add_sizes(&t->view, d, &index->view, &src->view, fn)) return api_status();
  graph_view tv = as_1d(&t->view), iv = as_1d(&index->view), sv = as_1d(&src->view);
  if (!ops_index_check(index, fn, d, tv.sizes[d], false)) return api_status();
  for (int k = 0; k < sv.ndim; k++) sv.sizes[k] = iv.sizes[k]; /* the part of src the index covers */
  api_untracked_begin();
  kiln_tensor *tt = t->view.ndim == 0 ? api_view(t, &tv, fn) : kiln_retain(t);
  int st = tt ? ops_scatter_add(tt, d, index, &iv, src, &sv, fn) : api_status();
  kiln_release(tt);
  api_untracked_end();
  return st;
}

/* -------------------------------------------------------- index_put_ */

/* The broadcast sizes of the index tensors into sizes [*ndim]. */
static bool broadcast_indices(int n, kiln_tensor *const *ix, int *ndim, int64_t *sizes, const char *fn) {
  int nd = 0;
  for (int j = 0; j < n; j++) nd = ix[j]->view.ndim > nd ? ix[j]->view.ndim : nd;
  for (int k = 0; k < nd; k++) sizes[k] = 1;
  for (int j = 0; j < n; j++) {
    const graph_view *v = &ix[j]->view;
    for (int k = 0; k < v->ndim; k++) {
      int64_t *s = &sizes[nd - v->ndim + k], x = v->sizes[k];
      if (x == *s || x == 1) continue;
      if (*s != 1) {
        char a[256], b[256];
        api_error(KILN_ERR_SHAPE, fn, "index sizes %s cannot be broadcast with the other indices' sizes %s",
                  api_fmt_sizes(a, sizeof a, v->ndim, v->sizes), api_fmt_sizes(b, sizeof b, nd, sizes));
        return false;
      }
      *s = x;
    }
  }
  *ndim = nd;
  return true;
}

/* For each element b of the broadcast indices (row-major, count nb): the
 * row-major position of t's slice (i_0[b], ..., i_{n-1}[b]) among t's
 * first n dims, negative indices wrapped. Forces the indices; an index
 * outside [-size, size) is KILN_ERR_INDEX. malloc'ed [nb] or NULL. */
static int64_t *linear_positions(kiln_tensor *t, int n, kiln_tensor *const *ix, int bnd, const int64_t *bsizes,
                                 int64_t nb, const char *fn) {
  int64_t *lin = graph_malloc(sizeof *lin * (size_t)(nb > 0 ? nb : 1));
  int64_t *v = graph_malloc(sizeof *v * (size_t)(nb > 0 ? nb : 1));
  if (!lin || !v) {
    free(lin), free(v);
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  memset(lin, 0, sizeof *lin * (size_t)nb);
  bool ok = true;
  for (int j = 0; j < n && ok; j++) {
    graph_view bv;
    graph_view_broadcast(&ix[j]->view, bnd, bsizes, &bv); /* checked by broadcast_indices */
    api_untracked_begin();
    kiln_tensor *b = api_view(ix[j], &bv, fn);
    ok = b && kiln_read(b, v, sizeof *v * (size_t)nb) == KILN_OK;
    kiln_release(b);
    api_untracked_end();
    int64_t size = t->view.sizes[j];
    for (int64_t e = 0; e < nb && ok; e++) {
      int64_t i = v[e];
      if (i < -size || i >= size) {
        api_error(KILN_ERR_INDEX, fn, "index %lld is out of range for dim %d of size %lld", (long long)i, j,
                  (long long)size);
        ok = false;
      }
      lin[e] = lin[e] * size + (i < 0 ? i + size : i);
    }
  }
  free(v);
  if (!ok) free(lin);
  return ok ? lin : NULL;
}

/* accumulate = false: each slot p of tt [P, rest...] takes the values' row
 * of its last writer (row-major over the indices), the others keep tt:
 * tt = where(written, gather(vr rows), tt) — one fused kernel. */
static int put_last(kiln_tensor *tt, kiln_tensor *vr, const int64_t *lin, int64_t nb, const char *fn) {
  int64_t p_count = tt->view.sizes[0];
  int64_t *from = graph_malloc(sizeof *from * (size_t)(p_count > 0 ? p_count : 1));
  uint8_t *sel = graph_malloc((size_t)(p_count > 0 ? p_count : 1));
  if (!from || !sel) {
    free(from), free(sel);
    return api_error(KILN_ERR_OOM, fn, "out of memory");
  }
  memset(sel, 0, (size_t)p_count);
  memset(from, 0, sizeof *from * (size_t)p_count);
  for (int64_t b = 0; b < nb; b++) from[lin[b]] = b, sel[lin[b]] = 1;
  kiln_tensor *ft = ops_move_like(kiln_from_data(KILN_I64, 1, &p_count, from), tt, fn);
  kiln_tensor *ms = ops_move_like(kiln_from_data(KILN_BOOL, 1, &p_count, sel), tt, fn);
  kiln_tensor *m = NULL, *g = NULL, *w = NULL;
  if (ft && ms) {
    graph_view sv = {.ndim = tt->view.ndim}; /* [P] spread over tt's sizes */
    for (int k = 0; k < sv.ndim; k++) sv.sizes[k] = tt->view.sizes[k];
    sv.strides[0] = 1;
    m = api_tensor(ms->storage, &sv, fn);
    g = ops_gather(vr, &vr->view, 0, ft, &sv, fn);
    w = m && g ? kiln_where(m, g, tt) : NULL;
  }
  int st = w ? kiln_copy_(tt, w) : api_status();
  kiln_release(ft), kiln_release(ms), kiln_release(m), kiln_release(g), kiln_release(w);
  free(from), free(sel);
  return st;
}

/* index_put_ once checked: t's first n dims are seen as one dim of P
 * slots (tt: a view of t when its layout allows, else a lazy copy written
 * back at the end), the values as [nb, rest...], and each broadcast index
 * element b names slot lin[b]. */
static int put_rows(kiln_tensor *t, int n, const int64_t *lin, int64_t nb, kiln_tensor *values, const graph_view *vv,
                    bool accumulate, const char *fn) {
  int r = t->view.ndim - n;
  int64_t ts[KILN_MAX_DIMS], vs[KILN_MAX_DIMS], p_count = 1;
  for (int k = 0; k < n; k++) p_count *= t->view.sizes[k];
  ts[0] = p_count, vs[0] = nb;
  for (int k = 0; k < r; k++) ts[1 + k] = vs[1 + k] = t->view.sizes[n + k];
  api_untracked_begin();
  kiln_tensor *tt = kiln_reshape(t, 1 + r, ts);
  kiln_tensor *vb = api_view(values, vv, fn);
  kiln_tensor *vr = vb ? kiln_reshape(vb, 1 + r, vs) : NULL;
  kiln_tensor *lt = ops_move_like(kiln_from_data(KILN_I64, 1, &nb, lin), t, fn);
  int st = api_status();
  if (tt && vr && lt) {
    if (accumulate) {
      graph_view iv = {.ndim = 1 + r, .offset = lt->view.offset}; /* lin spread over [nb, rest...] */
      memcpy(iv.sizes, vs, sizeof(int64_t) * (size_t)(1 + r));
      iv.strides[0] = 1;
      st = ops_scatter_add(tt, 0, lt, &iv, vr, &vr->view, fn);
    } else {
      st = put_last(tt, vr, lin, nb, fn);
    }
    if (st == KILN_OK && tt->storage != t->storage) st = kiln_copy_(t, tt); /* reshape copied */
  }
  kiln_release(tt), kiln_release(vb), kiln_release(vr), kiln_release(lt);
  api_untracked_end();
  return st;
}

/* index_put_ once the indices are I64 tensors ix [n]. */
static int index_put_long(kiln_tensor *t, int n, kiln_tensor *const *ix, kiln_tensor *values, bool accumulate,
                          const char *fn) {
  if (n > t->view.ndim)
    return api_error(KILN_ERR_SHAPE, fn, "too many indices (%d) for a %d-d tensor", n, t->view.ndim);
  if (values->storage->dtype != t->storage->dtype)
    return api_error(KILN_ERR_DTYPE, fn, "values dtype %s differs from t dtype %s",
                     graph_dtypes[values->storage->dtype].name, graph_dtypes[t->storage->dtype].name);
  if (!ops_check_writable(t, fn)) return KILN_ERR_ARG;
  int bnd;
  int64_t bsizes[KILN_MAX_DIMS], rs[KILN_MAX_DIMS], nb = 1;
  if (!broadcast_indices(n, ix, &bnd, bsizes, fn)) return api_status();
  int r = t->view.ndim - n;
  if (bnd + r > KILN_MAX_DIMS)
    return api_error(KILN_ERR_SHAPE, fn, "the indexed result would have %d dims (more than %d)", bnd + r,
                     KILN_MAX_DIMS);
  for (int k = 0; k < bnd; k++) nb *= rs[k] = bsizes[k];
  for (int k = 0; k < r; k++) rs[bnd + k] = t->view.sizes[n + k];
  graph_view vv;
  if (!graph_view_broadcast(&values->view, bnd + r, rs, &vv)) {
    char a[256], b[256];
    return api_error(KILN_ERR_SHAPE, fn, "values sizes %s cannot be broadcast to the indexed sizes %s",
                     api_fmt_sizes(a, sizeof a, values->view.ndim, values->view.sizes),
                     api_fmt_sizes(b, sizeof b, bnd + r, rs));
  }
  int64_t *lin = linear_positions(t, n, ix, bnd, bsizes, nb, fn);
  if (!lin) return api_status();
  int st = nb == 0 || graph_view_numel(&t->view) == 0 ? KILN_OK
                                                      : put_rows(t, n, lin, nb, values, &vv, accumulate, fn);
  free(lin);
  return st;
}

/* The index list with each BOOL/U8 mask (k dims, which must equal the
 * sizes of the k dims of t it indexes) replaced by the k columns of its
 * nonzero() — Torch's rule. Forces the masks. *out [*n_out] holds new
 * references (the caller releases them); false with the error set. */
static bool expand_masks(kiln_tensor *t, int n, kiln_tensor *const *ix, kiln_tensor **out, int *n_out,
                         const char *fn) {
  int m = 0, pos = 0, j;
  for (j = 0; j < n; j++) {
    kiln_tensor *x = ix[j];
    kiln_dtype d = x->storage->dtype;
    if (d != KILN_BOOL && d != KILN_U8) {
      if (d != KILN_I64) {
        api_error(KILN_ERR_DTYPE, fn, "indices[%d] dtype %s is not i64, bool or u8", j, graph_dtypes[d].name);
        break;
      }
      if (m == KILN_MAX_DIMS) {
        api_error(KILN_ERR_SHAPE, fn, "too many indices for a %d-d tensor", t->view.ndim);
        break;
      }
      out[m++] = kiln_retain(x), pos++;
      continue;
    }
    int k = x->view.ndim;
    if (k == 0) {
      api_error(KILN_ERR_UNSUPPORTED, fn, "indices[%d] is a 0-d mask", j);
      break;
    }
    bool fits = pos + k <= t->view.ndim && m + k <= KILN_MAX_DIMS;
    for (int q = 0; fits && q < k; q++) fits = x->view.sizes[q] == t->view.sizes[pos + q];
    if (!fits) {
      char a[256], b[256];
      api_error(KILN_ERR_SHAPE, fn, "mask indices[%d] sizes %s do not match t sizes %s from dim %d", j,
                api_fmt_sizes(a, sizeof a, k, x->view.sizes), api_fmt_sizes(b, sizeof b, t->view.ndim, t->view.sizes),
                pos);
      break;
    }
    api_untracked_begin();
    kiln_tensor *nz = kiln_nonzero(x); /* [count, k] */
    bool made = nz != NULL;
    for (int q = 0; nz && q < k; q++) made = (out[m++] = kiln_select(nz, 1, q)) != NULL && made;
    kiln_release(nz);
    api_untracked_end();
    if (!made) break;
    pos += k;
  }
  *n_out = m;
  return j == n;
}

KILN_API int kiln_index_put_(kiln_tensor *t, int n_indices, kiln_tensor *const *indices, kiln_tensor *values,
                             bool accumulate) {
  const char *fn = "kiln_index_put_";
  if (!api_check(t, fn, "t") || !api_check(values, fn, "values")) return api_status();
  int st = api_check_list(indices, n_indices, "tensor", fn);
  if (st != KILN_OK) return st;
  if (n_indices == 0) return api_error(KILN_ERR_ARG, fn, "needs at least one index tensor (n_indices = 0)");
  if (n_indices > KILN_MAX_DIMS)
    return api_error(KILN_ERR_SHAPE, fn, "too many indices (%d) for a %d-d tensor", n_indices, t->view.ndim);
  for (int j = 0; j < n_indices; j++)
    if (!api_check(indices[j], fn, "indices[j]")) return api_status();
  kiln_tensor *ix[KILN_MAX_DIMS] = {0};
  int n = 0;
  bool ok = expand_masks(t, n_indices, indices, ix, &n, fn);
  st = ok ? index_put_long(t, n, ix, values, accumulate, fn) : api_status();
  for (int q = 0; q < n; q++) kiln_release(ix[q]);
  return st;
}

/* ----------------------------------------------------------- bincount */

KILN_API kiln_tensor *kiln_bincount(kiln_tensor *t, kiln_tensor *weights, int64_t minlength) {
  const char *fn = "kiln_bincount";
  if (!api_check(t, fn, "t") || (weights && !api_check(weights, fn, "weights"))) return NULL;
  kiln_dtype dt = t->storage->dtype;
  char a[256], b[256];
  if (!is_int_dtype(dt)) {
    api_error(KILN_ERR_DTYPE, fn, "t dtype %s is not an integer dtype", graph_dtypes[dt].name);
    return NULL;
  }
  if (t->view.ndim != 1) {
    api_error(KILN_ERR_SHAPE, fn, "t must be 1-D but has sizes %s",
              api_fmt_sizes(a, sizeof a, t->view.ndim, t->view.sizes));
    return NULL;
  }
  if (minlength < 0) {
    api_error(KILN_ERR_ARG, fn, "minlength %lld is negative", (long long)minlength);
    return NULL;
  }
  int64_t n = t->view.sizes[0];
  if (weights && (weights->view.ndim != 1 || weights->view.sizes[0] != n)) {
    api_error(KILN_ERR_SHAPE, fn, "weights sizes %s do not match t sizes %s (both must be 1-D)",
              api_fmt_sizes(a, sizeof a, weights->view.ndim, weights->view.sizes),
              api_fmt_sizes(b, sizeof b, t->view.ndim, t->view.sizes));
    return NULL;
  }
  if (n == 0) { /* Torch 1.13: I64 zeros, even with weights */
    api_untracked_begin();
    kiln_tensor *z = ops_move_like(kiln_zeros(KILN_I64, 1, &minlength), t, fn);
    api_untracked_end();
    return api_track(z);
  }
  int64_t *v = graph_malloc(sizeof *v * (size_t)n);
  if (!v) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  api_untracked_begin();
  kiln_tensor *idx = kiln_to_dtype(t, KILN_I64), *out = NULL, *src = NULL;
  int64_t lo = 0, hi = -1;
  bool ok = idx && kiln_read(idx, v, sizeof *v * (size_t)n) == KILN_OK;
  for (int64_t e = 0; ok && e < n; e++) {
    lo = e == 0 || v[e] < lo ? v[e] : lo;
    hi = e == 0 || v[e] > hi ? v[e] : hi;
  }
  if (ok && lo < 0) {
    api_error(KILN_ERR_ARG, fn, "t holds %lld; only non-negative values can be counted", (long long)lo);
    ok = false;
  }
  if (ok) {
    int64_t size = hi + 1 > minlength ? hi + 1 : minlength;
    kiln_dtype od = !weights ? KILN_I64 : weights->storage->dtype == KILN_F32 ? KILN_F32 : KILN_F64;
    out = ops_move_like(kiln_zeros(od, 1, &size), t, fn);
    if (weights) {
      src = kiln_to_dtype(weights, od);
    } else {
      kiln_tensor *one = ops_move_like(kiln_scalar(KILN_I64, 1), t, fn);
      src = one ? kiln_expand(one, 1, &n) : NULL;
      kiln_release(one);
    }
    ok = out && src && ops_scatter_add(out, 0, idx, &idx->view, src, &src->view, fn) == KILN_OK;
  }
  kiln_release(idx), kiln_release(src);
  if (!ok) kiln_release(out), out = NULL;
  api_untracked_end();
  free(v);
  return api_track(out);
}

/* -------------------------------------------------------------- histc */

/* Torch's histc range: [min, max], or t's extrema when min == max (forces
 * t), widened by 1 each way when still equal; it must be finite. */
static bool histc_range(kiln_tensor *t, double *lo, double *hi, const char *fn) {
  if (*lo == *hi && graph_view_numel(&t->view) > 0) {
    api_untracked_begin();
    kiln_tensor *mn = kiln_amin(t, 0, NULL, false), *mx = kiln_amax(t, 0, NULL, false);
    bool ok = mn && mx && kiln_item_f64(mn, lo) == KILN_OK && kiln_item_f64(mx, hi) == KILN_OK;
    kiln_release(mn), kiln_release(mx);
    api_untracked_end();
    if (!ok) return false;
  }
  if (*lo == *hi) *lo -= 1, *hi += 1;
  if (!isfinite(*lo) || !isfinite(*hi)) {
    api_error(KILN_ERR_ARG, fn, "range of [%g, %g] is not finite", *lo, *hi);
    return false;
  }
  if (!(*lo < *hi)) {
    api_error(KILN_ERR_ARG, fn, "max %g must be larger than min %g", *hi, *lo);
    return false;
  }
  return true;
}

KILN_API kiln_tensor *kiln_histc(kiln_tensor *t, int64_t bins, double min, double max) {
  const char *fn = "kiln_histc";
  if (!api_check(t, fn, "t")) return NULL;
  kiln_dtype dt = t->storage->dtype;
  if (!graph_is_float(dt)) {
    api_error(KILN_ERR_DTYPE, fn, "t dtype %s is not a float dtype", graph_dtypes[dt].name);
    return NULL;
  }
  if (bins <= 0) {
    api_error(KILN_ERR_ARG, fn, "bins must be > 0, but got %lld", (long long)bins);
    return NULL;
  }
  double lo = min, hi = max;
  if (!histc_range(t, &lo, &hi, fn)) return NULL;
  int64_t n = graph_view_numel(&t->view), all = -1;
  api_untracked_begin();
  kiln_tensor *out = ops_move_like(kiln_zeros(dt, 1, &bins), t, fn);
  bool ok = out != NULL;
  if (ok && n > 0) {
    /* the outer bin edges and their distance, in t's dtype as Torch's */
    double lo_d = round_to(dt, lo), hi_d = round_to(dt, hi), width = round_to(dt, hi_d - lo_d);
    kiln_tensor *x = kiln_reshape(t, 1, &all);
    kiln_tensor *ge = x ? kiln_ge_scalar(x, lo_d) : NULL, *le = x ? kiln_le_scalar(x, hi_d) : NULL;
    kiln_tensor *inside = ge && le ? kiln_logical_and(ge, le) : NULL; /* false for NaN */
    kiln_tensor *nan = x ? kiln_ne(x, x) : NULL;
    kiln_tensor *in = inside && nan ? kiln_logical_or(inside, nan) : NULL; /* Torch 1.13 counts NaN */
    kiln_tensor *d0 = x ? kiln_sub_scalar(x, lo_d) : NULL, *d1 = d0 ? kiln_mul_scalar(d0, (double)bins) : NULL;
    kiln_tensor *pos = d1 ? kiln_div_scalar(d1, width) : NULL;
    kiln_tensor *num = pos ? kiln_eq(pos, pos) : NULL; /* NaN x (or hi - lo overflowing): bin 0 */
    kiln_tensor *keep = in && num ? kiln_logical_and(in, num) : NULL;
    kiln_tensor *zero = kiln_scalar(dt, 0);
    kiln_tensor *p0 = keep && zero ? kiln_where(keep, pos, zero) : NULL;
    kiln_tensor *p1 = p0 ? kiln_clamp(p0, 0, round_to(dt, (double)bins)) : NULL; /* finite before the cast */
    kiln_tensor *pi = p1 ? kiln_to_dtype(p1, KILN_I64) : NULL; /* truncates, as static_cast */
    kiln_tensor *idx = pi ? kiln_clamp(pi, 0, (double)(bins - 1)) : NULL; /* x == hi: last bin */
    kiln_tensor *w = in ? kiln_to_dtype(in, dt) : NULL;
    ok = idx && w && ops_scatter_add(out, 0, idx, &idx->view, w, &w->view, fn) == KILN_OK;
    kiln_release(x), kiln_release(ge), kiln_release(le), kiln_release(inside), kiln_release(nan), kiln_release(in), kiln_release(d0), kiln_release(d1);
    kiln_release(pos), kiln_release(num), kiln_release(keep), kiln_release(zero), kiln_release(p0);
    kiln_release(p1), kiln_release(pi), kiln_release(idx), kiln_release(w);
  }
  if (!ok) kiln_release(out), out = NULL;
  api_untracked_end();
  return api_track(out);
}
