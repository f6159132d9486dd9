/*
 * masked.c — boolean-mask indexing: masked_fill_, masked_copy_,
 * masked_select and nonzero.
 *
 * A mask is BOOL or U8 (nonzero = selected). Its sizes either broadcast to
 * the tensor's (PyTorch), or — Torch7's rule — differ but hold the same
 * number of elements, and then both are walked in row-major order.
 *
 * masked_fill_ is fully lazy and fused: t = where(mask, value, t), one
 * elementwise kernel written back by an ASSIGN. masked_copy_,
 * masked_select and nonzero have data-dependent positions: they force the
 * mask (nonzero: the tensor) and compute the positions on the host; the
 * values stay lazy — a GATHER of the selected elements, for masked_copy_
 * fused into where(mask, gathered src, t) (one kernel).
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static bool check_mask_dtype(const kiln_tensor *mask, const char *fn) {
  kiln_dtype d = mask->storage->dtype;
  if (d == KILN_BOOL || d == KILN_U8) return true;
  api_error(KILN_ERR_DTYPE, fn, "mask dtype %s is not bool or u8", graph_dtypes[d].name);
  return false;
}

/* The mask seen through sizes [ndim] (broadcast, or the same elements in
 * row-major order): a new untracked tensor the caller releases. */
static kiln_tensor *mask_as(kiln_tensor *mask, int ndim, const int64_t *sizes, const char *fn) {
  graph_view v;
  if (graph_view_broadcast(&mask->view, ndim, sizes, &v)) {
    api_untracked_begin();
    kiln_tensor *r = api_tensor(mask->storage, &v, fn);
    api_untracked_end();
    return r;
  }
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  if (graph_view_numel(&mask->view) != n) {
    char a[256], b[256];
    api_error(KILN_ERR_SHAPE, fn, "mask sizes %s neither broadcast to sizes %s nor hold %lld elements",
              api_fmt_sizes(a, sizeof a, mask->view.ndim, mask->view.sizes), api_fmt_sizes(b, sizeof b, ndim, sizes),
              (long long)n);
    return NULL;
  }
  api_untracked_begin();
  kiln_tensor *r = kiln_reshape(mask, ndim, sizes);
  api_untracked_end();
  return r;
}

/* Forces x and returns its n elements, row-major, as bytes 0/1 (malloc'ed;
 * the caller frees). NULL with the error set. */
static uint8_t *read_bools(kiln_tensor *x, int64_t *n, const char *fn) {
  *n = graph_view_numel(&x->view);
  uint8_t *b = graph_malloc((size_t)(*n > 0 ? *n : 1));
  if (!b) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  api_untracked_begin();
  kiln_tensor *c = kiln_to_dtype(x, KILN_BOOL);
  int st = c ? kiln_read(c, b, (size_t)*n) : api_status();
  kiln_release(c);
  api_untracked_end();
  if (st != KILN_OK) {
    free(b);
    return NULL;
  }
  return b;
}

/* An untracked I64 tensor [n] over host values, on like's device. */
static kiln_tensor *long_tensor(const int64_t *v, int64_t n, const kiln_tensor *like, const char *fn) {
  api_untracked_begin();
  kiln_tensor *r = ops_move_like(kiln_from_data(KILN_I64, 1, &n, v), like, fn);
  api_untracked_end();
  return r;
}

/* t = where(m, value, t) written back into t. */
static int write_where(kiln_tensor *t, kiln_tensor *m, kiln_tensor *value) {
  api_untracked_begin();
  kiln_tensor *w = kiln_where(m, value, t);
  int st = w ? kiln_copy_(t, w) : api_status();
  kiln_release(w);
  api_untracked_end();
  return st;
}

KILN_API int kiln_masked_fill_(kiln_tensor *t, kiln_tensor *mask, double value) {
  const char *fn = "kiln_masked_fill_";
  if (!api_check(t, fn, "t") || !api_check(mask, fn, "mask") || !check_mask_dtype(mask, fn)) return api_status();
  if (!ops_check_writable(t, fn)) return KILN_ERR_ARG;
  kiln_tensor *m = mask_as(mask, t->view.ndim, t->view.sizes, fn);
  if (!m) return api_status();
  api_untracked_begin();
  kiln_tensor *v = kiln_scalar(t->storage->dtype, value);
  api_untracked_end();
  int st = v ? write_where(t, m, v) : api_status();
  kiln_release(v);
  kiln_release(m);
  return st;
}

/* masked_copy_ once the mask m (t's sizes) has been read into sel [n]. */
static int copy_selected(kiln_tensor *t, kiln_tensor *m, const uint8_t *sel, int64_t n, kiln_tensor *src,
                         const char *fn) {
  int64_t *rank = graph_malloc(sizeof *rank * (size_t)(n > 0 ? n : 1)), k = 0;
  if (!rank) return api_error(KILN_ERR_OOM, fn, "out of memory");
  for (int64_t i = 0; i < n; i++) rank[i] = sel[i] ? k++ : 0;
  int64_t have = graph_view_numel(&src->view);
  if (k > have) {
    free(rank);
    return api_error(KILN_ERR_SHAPE, fn, "mask selects %lld elements but src has only %lld", (long long)k,
                     (long long)have);
  }
  int st = KILN_OK;
  if (k > 0) {
    int64_t all = -1;
    api_untracked_begin();
    /* src in t's dtype, so that where() keeps t's other elements exact */
    kiln_tensor *idx = long_tensor(rank, n, src, fn), *flat = kiln_reshape(src, 1, &all);
    kiln_tensor *conv = flat ? kiln_to_dtype(flat, t->storage->dtype) : NULL;
    kiln_tensor *g = idx && conv ? ops_gather(conv, &conv->view, 0, idx, &idx->view, fn) : NULL;
    kiln_tensor *gv = g ? kiln_view(g, t->view.ndim, t->view.sizes) : NULL;
    st = gv ? write_where(t, m, gv) : api_status();
    kiln_release(idx), kiln_release(flat), kiln_release(conv), kiln_release(g), kiln_release(gv);
    api_untracked_end();
  }
  free(rank);
  return st;
}

KILN_API int kiln_masked_copy_(kiln_tensor *t, kiln_tensor *mask, kiln_tensor *src) {
  const char *fn = "kiln_masked_copy_";
  if (!api_check(t, fn, "t") || !api_check(mask, fn, "mask") || !api_check(src, fn, "src")) return api_status();
  if (!check_mask_dtype(mask, fn) || !ops_check_writable(t, fn)) return api_status();
  kiln_tensor *m = mask_as(mask, t->view.ndim, t->view.sizes, fn);
  if (!m) return api_status();
  int64_t n;
  uint8_t *sel = read_bools(m, &n, fn);
  int st = sel ? copy_selected(t, m, sel, n, src, fn) : api_status();
  free(sel);
  kiln_release(m);
  return st;
}

/* Broadcast sizes of a and b into sizes [*ndim]; false when they do not
 * broadcast. */
static bool broadcast2(const graph_view *a, const graph_view *b, int *ndim, int64_t *sizes) {
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int d = 0; d < nd; d++) {
    int ia = d - (nd - a->ndim), ib = d - (nd - b->ndim);
    int64_t x = ia >= 0 ? a->sizes[ia] : 1, y = ib >= 0 ? b->sizes[ib] : 1;
    if (x != y && x != 1 && y != 1) return false;
    sizes[d] = x == 1 ? y : x;
  }
  *ndim = nd;
  return true;
}

KILN_API kiln_tensor *kiln_masked_select(kiln_tensor *t, kiln_tensor *mask) {
  const char *fn = "kiln_masked_select";
  if (!api_check(t, fn, "t") || !api_check(mask, fn, "mask") || !check_mask_dtype(mask, fn)) return NULL;
  int nd;
  int64_t sizes[KILN_MAX_DIMS];
  graph_view tv = t->view;
  if (broadcast2(&t->view, &mask->view, &nd, sizes)) {
    graph_view_broadcast(&t->view, nd, sizes, &tv); /* cannot fail */
  } else {
    nd = t->view.ndim;
    memcpy(sizes, t->view.sizes, sizeof(int64_t) * (size_t)nd);
  }
  kiln_tensor *m = mask_as(mask, nd, sizes, fn);
  if (!m) return NULL;
  int64_t n, k = 0;
  uint8_t *sel = read_bools(m, &n, fn);
  kiln_release(m);
  if (!sel) return NULL;
  int64_t *pos = graph_malloc(sizeof *pos * (size_t)(n > 0 ? n : 1));
  if (!pos) {
    free(sel);
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  for (int64_t i = 0; i < n; i++)
    if (sel[i]) pos[k++] = i;
  free(sel);
  kiln_tensor *out = NULL;
  api_untracked_begin();
  int64_t all = -1;
  kiln_tensor *idx = long_tensor(pos, k, t, fn), *tb = api_view(t, &tv, fn);
  kiln_tensor *flat = tb ? kiln_reshape(tb, 1, &all) : NULL;
  if (idx && flat)
    out = k > 0 ? ops_gather(flat, &flat->view, 0, idx, &idx->view, fn) : ops_move_like(kiln_empty(t->storage->dtype, 1, &k), t, fn);
  kiln_release(idx), kiln_release(tb), kiln_release(flat);
  api_untracked_end();
  free(pos);
  return api_track(out);
}

KILN_API kiln_tensor *kiln_nonzero(kiln_tensor *t) {
  const char *fn = "kiln_nonzero";
  if (!api_check(t, fn, "t")) return NULL;
  int64_t n, k = 0;
  uint8_t *sel = read_bools(t, &n, fn);
  if (!sel) return NULL;
  for (int64_t i = 0; i < n; i++) k += sel[i];
  int nd = t->view.ndim;
  int64_t *coords = graph_malloc(sizeof *coords * (size_t)(k * nd > 0 ? k * nd : 1)), row = 0;
  if (!coords) {
    free(sel);
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  int64_t idx[KILN_MAX_DIMS] = {0};
  for (int64_t i = 0; i < n; i++) {
    if (sel[i]) memcpy(coords + row++ * nd, idx, sizeof(int64_t) * (size_t)nd);
    for (int d = nd - 1; d >= 0; d--) { /* row-major successor of idx */
      if (++idx[d] < t->view.sizes[d]) break;
      idx[d] = 0;
    }
  }
  free(sel);
  int64_t sizes[2] = {k, nd};
  api_untracked_begin();
  kiln_tensor *r = ops_move_like(kiln_from_data(KILN_I64, 2, sizes, coords), t, fn);
  api_untracked_end();
  free(coords);
  return api_track(r);
}
