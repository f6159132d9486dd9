/*
 * pool.c — kiln_max_pool and kiln_avg_pool over 1, 2 or 3 spatial dims
 * (Torch 1.13's max_pool{1,2,3}d and avg_pool{1,2,3}d), composed from
 * lazy graph ops:
 *
 *   xp   the input padded (kiln_pad, constant -inf or 0) by the padding on
 *        the left and, on the right, by the padding or what the last
 *        window needs in ceil_mode (a window may hang past the padded
 *        input there): omitted when nothing is padded;
 *   win  the windows, a view of xp's storage [N, C, *out, *kernel] with
 *        strides stride * s and dilation * s (no copy, as kiln_unfold);
 *   avg  sum(win) over the kernel dims / a host-computed divisor per
 *        output position (Torch's rule, below);
 *   max  m = amax(win); the position of the element Torch picks — the
 *        first maximum in scan order, or the last NaN — as one more row
 *        reduction: amax of key = 2^41 + pos at a NaN, 2^40 - pos where
 *        win == m inside the input, -1 elsewhere (pos is the flat index
 *        into xp's spatial block, computed from aranges); and the value a
 *        gather of xp at that position. The gather's gradient is a
 *        scatter-add to that one element, as Torch's max_pool backward
 *        (amax's own gradient would split ties evenly).
 * Both reductions run over the last dims of win (rows), which the fusion
 * pass computes inside their reader: max pooling without padding is one
 * kernel. xp must have mergeable spatial dims for the gather (a flat
 * view); an input whose are not is copied once (kiln_contiguous).
 *
 * Output size per dim (Torch's pooling_output_shape): floor or ceil of
 * (in + 2 p - d (k - 1) - 1) / s, plus 1; in ceil_mode, minus 1 when the
 * last window would start at or past in + p. Average divisor per dim
 * (AvgPoolKernel.cpp): the window clipped to [-p, in + p) with
 * count_include_pad, else clipped to [0, in); multiplied over the dims.
 */
#include <math.h>
#include <stdlib.h>

#include "api_internal.h"

#define KEY_MAX 4611686018427387904.0 /* 2^62: past every position */

typedef struct pool_geom {
  int nd;
  int64_t in[3], k[3], s[3], p[3], dil[3], out[3], right[3]; /* right: padding on the right */
} pool_geom;

static const char *fmt_arr(char *buf, size_t len, int n, const int64_t *v) { return api_fmt_sizes(buf, len, n, v); }

/* Torch's pooling_output_shape. */
static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) o--;
  return o;
}

/* Checks the arguments and fills g. Returns input viewed as [N, C, ...]
 * (a new tracked view when the batch dim is missing), or NULL. */
static kiln_tensor *check_pool(kiln_tensor *input, int nd, const int64_t *kernel, const int64_t *stride,
                               const int64_t *padding, const int64_t *dilation, bool ceil_mode, pool_geom *g,
                               const char *fn) {
  char a[256], b[256];
  if (!api_check(input, fn, "input")) return NULL;
  if (nd < 1 || nd > 3) {
    api_error(KILN_ERR_ARG, fn, "nd %d (spatial dims) must be 1, 2 or 3", nd);
    return NULL;
  }
  if (!kernel) {
    api_error(KILN_ERR_ARG, fn, "kernel is NULL");
    return NULL;
  }
  const graph_view *v = &input->view;
  fmt_arr(a, sizeof a, v->ndim, v->sizes);
  if (v->ndim != nd + 1 && v->ndim != nd + 2) {
    api_error(KILN_ERR_SHAPE, fn, "expected a %d-D or %d-D (batch) input for %d spatial dims, got sizes %s", nd + 1,
              nd + 2, nd, a);
    return NULL;
  }
  for (int d = v->ndim - nd - 1; d < v->ndim; d++)
    if (v->sizes[d] == 0) {
      api_error(KILN_ERR_SHAPE, fn, "the channel and spatial dims must be non-empty (only the batch may be 0), got %s", a);
      return NULL;
    }
  kiln_dtype dt = input->storage->dtype;
  if (!graph_is_float(dt)) {
    api_error(KILN_ERR_DTYPE, fn, "needs a float dtype, got %s (convert with kiln_to_dtype)", graph_dtypes[dt].name);
    return NULL;
  }
  g->nd = nd;
  for (int i = 0; i < nd; i++) {
    g->in[i] = v->sizes[v->ndim - nd + i];
    g->k[i] = kernel[i];
    g->s[i] = stride ? stride[i] : kernel[i];
    g->p[i] = padding ? padding[i] : 0;
    g->dil[i] = dilation ? dilation[i] : 1;
  }
  fmt_arr(b, sizeof b, nd, g->k);
  for (int i = 0; i < nd; i++) {
    const char *bad = g->k[i] < 1 ? "kernel" : g->s[i] < 1 ? "stride" : g->dil[i] < 1 ? "dilation" : NULL;
    if (bad) {
      const int64_t *arr = g->k[i] < 1 ? g->k : g->s[i] < 1 ? g->s : g->dil;
      api_error(KILN_ERR_ARG, fn, "%s %s must be positive", bad, fmt_arr(a, sizeof a, nd, arr));
      return NULL;
    }
    if (g->p[i] < 0 || g->p[i] > g->k[i] / 2) {
      api_error(KILN_ERR_ARG, fn, "padding %s must be non-negative and at most half of kernel %s",
                fmt_arr(a, sizeof a, nd, g->p), b);
      return NULL;
    }
  }
  for (int i = 0; i < nd; i++) {
    g->out[i] = out_size(g->in[i], g->k[i], g->s[i], g->p[i], g->dil[i], ceil_mode);
    if (g->out[i] < 1) {
      int64_t o[3];
      for (int j = 0; j < nd; j++) o[j] = out_size(g->in[j], g->k[j], g->s[j], g->p[j], g->dil[j], ceil_mode);
      api_error(KILN_ERR_SHAPE, fn,
                "output size %s is too small: kernel %s (dilation %s) larger than the input %s padded by %s",
                fmt_arr(a, sizeof a, nd, o), b, fmt_arr((char[256]){0}, 256, nd, g->dil),
                fmt_arr((char[256]){0}, 256, nd, g->in), fmt_arr((char[256]){0}, 256, nd, g->p));
      return NULL;
    }
    int64_t need = (g->out[i] - 1) * g->s[i] + g->dil[i] * (g->k[i] - 1) + 1; /* extent of the windows */
    g->right[i] = need > g->in[i] + g->p[i] ? need - g->in[i] - g->p[i] : 0;
  }
  if (v->ndim == nd + 2) return kiln_retain(input) ? api_track(input) : NULL;
  return kiln_unsqueeze(input, 0);
}

/* Spatial dims [2, 2 + nd) of x merge into one (a flat view exists). */
static bool spatial_mergeable(const kiln_tensor *x, int nd) {
  const graph_view *v = &x->view;
  for (int d = 2; d < 1 + nd; d++)
    if (v->sizes[d + 1] != 1 && v->strides[d] != v->strides[d + 1] * v->sizes[d + 1]) return false;
  return true;
}

/* x [N, C, *in] padded by g's left padding and right[] with value, or x
 * itself when nothing is padded. */
static kiln_tensor *pad_input(kiln_tensor *x, const pool_geom *g, double value) {
  int64_t pads[6];
  bool any = false;
  for (int i = 0; i < g->nd; i++) {
    int j = g->nd - 1 - i; /* Torch order: last dim first */
    pads[2 * i] = g->p[j];
    pads[2 * i + 1] = g->right[j];
    any = any || g->p[j] || g->right[j];
  }
  return any ? kiln_pad(x, 2 * g->nd, pads, KILN_PAD_CONSTANT, value) : x;
}

/* The windows of xp [N, C, *padded]: [N, C, *out, *kernel]. */
static kiln_tensor *windows(kiln_tensor *xp, const pool_geom *g) {
  const graph_view *v = &xp->view;
  int nd = g->nd;
  int64_t sizes[8], strides[8];
  for (int d = 0; d < 2; d++) sizes[d] = v->sizes[d], strides[d] = v->strides[d];
  for (int i = 0; i < nd; i++) {
    sizes[2 + i] = g->out[i];
    strides[2 + i] = v->strides[2 + i] * g->s[i];
    sizes[2 + nd + i] = g->k[i];
    strides[2 + nd + i] = v->strides[2 + i] * g->dil[i];
  }
  return kiln_as_strided(xp, 2 + 2 * nd, sizes, strides, v->offset);
}

/* An I64 arange 0, step, ... of n values on like's device, placed at dim
 * `at` of a [ndim] tensor whose other sizes are 1. */
static kiln_tensor *axis(int64_t n, int64_t step, int at, int ndim, const kiln_tensor *like) {
  int64_t sizes[8];
  for (int d = 0; d < ndim; d++) sizes[d] = d == at ? n : 1;
  api_untracked_begin();
  kiln_tensor *a = api_move_like(kiln_arange(KILN_I64, 0, (double)(n * step), (double)step), like, "kiln_max_pool");
  api_untracked_end();
  return kiln_view(api_track(a), ndim, sizes);
}

KILN_API kiln_tensor *kiln_max_pool(kiln_tensor *input, int nd, const int64_t *kernel, const int64_t *stride,
                                    const int64_t *padding, const int64_t *dilation, bool ceil_mode) {
  const char *fn = "kiln_max_pool";
  pool_geom g;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *x = check_pool(input, nd, kernel, stride, padding, dilation, ceil_mode, &g, fn), *y = NULL;
  if (!x) goto done;
  bool padded = false;
  for (int i = 0; i < nd; i++) padded = padded || g.p[i] || g.right[i];
  kiln_tensor *xp = padded ? pad_input(x, &g, -INFINITY) : spatial_mergeable(x, nd) ? x : kiln_contiguous(x);
  kiln_tensor *win = windows(xp, &g);
  if (!win) goto done;
  int kdims[3];
  for (int i = 0; i < nd; i++) kdims[i] = 2 + nd + i;
  /* pos: flat index into xp's spatial block of each window element [*out, *kernel];
   * inside: whether it is an input element (not padding) */
  kiln_tensor *pos = kiln_scalar(KILN_I64, 0), *inside = NULL;
  int64_t row = 1;
  for (int i = nd - 1; i >= 0; i--) {
    kiln_tensor *c = kiln_add(axis(g.out[i], g.s[i], i, 2 * nd, x), axis(g.k[i], g.dil[i], nd + i, 2 * nd, x));
    pos = kiln_add(pos, kiln_mul_scalar(c, (double)row));
    row *= g.in[i] + g.p[i] + g.right[i];
    if (!padded) continue;
    kiln_tensor *in = kiln_logical_and(kiln_ge_scalar(c, (double)g.p[i]), kiln_lt_scalar(c, (double)(g.p[i] + g.in[i])));
    inside = inside ? kiln_logical_and(inside, in) : in;
  }
  kiln_tensor *m = kiln_amax(win, nd, kdims, true);
  kiln_tensor *hit = kiln_eq(win, m);
  if (inside) hit = kiln_logical_and(hit, inside);
  /* key: -pos at a NaN (m is NaN then, and no element equals it), pos at
   * a maximum, else past every pos: its amin is minus the last NaN's pos
   * or the first maximum's. With dilation a window may hold padding only
   * (no hit): then KEY_MAX + its first pos, a padding element (Torch
   * returns -inf there too, and its backward writes out of bounds) */
  kiln_tensor *key = kiln_where(kiln_ne(win, win), kiln_neg(pos), kiln_where(hit, pos, kiln_add_scalar(pos, KEY_MAX)));
  kiln_tensor *at = kiln_abs(kiln_amin(key, nd, kdims, true)); /* [N, C, *out, 1...] */
  bool dilated = false; /* else every window holds an input element (padding <= kernel / 2) */
  for (int i = 0; i < nd; i++) dilated = dilated || g.dil[i] > 1;
  if (padded && dilated) at = kiln_where(kiln_ge_scalar(at, KEY_MAX), kiln_sub_scalar(at, KEY_MAX), at);
  int64_t q = 1, out_sizes[5];
  for (int i = 0; i < nd; i++) q *= g.out[i];
  kiln_tensor *plane = kiln_flatten(xp, 2, -1);
  kiln_tensor *at3 = kiln_reshape(at, 3, (int64_t[]){x->view.sizes[0], x->view.sizes[1], q});
  if (!plane || !at3) goto done;
  kiln_tensor *flat = api_gather(plane, &plane->view, 2, at3, &at3->view, fn);
  int od = input->view.ndim, lead = od - nd;
  for (int d = 0; d < lead; d++) out_sizes[d] = input->view.sizes[d];
  for (int i = 0; i < nd; i++) out_sizes[lead + i] = g.out[i];
  y = kiln_view(flat, od, out_sizes);
done:
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* Torch's divisor of output o along dim i: the window clipped to the
 * padded input (count_include_pad) or to the input. */
static int64_t divisor(const pool_geom *g, int i, int64_t o, bool count_include_pad) {
  int64_t start = o * g->s[i] - g->p[i], end = start + g->k[i];
  if (end > g->in[i] + g->p[i]) end = g->in[i] + g->p[i];
  int64_t lo = start < 0 ? 0 : start, hi = end > g->in[i] ? g->in[i] : end;
  return count_include_pad ? end - start : hi - lo;
}

/* sum [N, C, *out, 1...] (compute dtype) divided by each position's divisor: a
 * scalar when they are all equal (no padding or ceil_mode window
 * changes them), else a host-computed tensor [*out] read broadcast. */
static kiln_tensor *divide(kiln_tensor *sum, const pool_geom *g, bool count_include_pad, const kiln_tensor *like,
                           const char *fn) {
  int nd = g->nd;
  int64_t q = 1;
  for (int i = 0; i < nd; i++) q *= g->out[i];
  bool uniform = true;
  int64_t first = 1;
  for (int i = 0; i < nd; i++) first *= divisor(g, i, 0, count_include_pad);
  kiln_dtype cd = kiln_dtype_of(sum);
  size_t es = cd == KILN_F64 ? sizeof(double) : sizeof(float);
  char *host = malloc(es * (size_t)q);
  if (!host) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  int64_t o[3] = {0, 0, 0}, shape[6] = {1, 1, 1, 1, 1, 1};
  for (int i = 0; i < nd; i++) shape[i] = g->out[i];
  for (int64_t e = 0; e < q; e++) {
    int64_t c = 1;
    for (int i = 0; i < nd; i++) c *= divisor(g, i, o[i], count_include_pad);
    uniform = uniform && c == first;
    if (cd == KILN_F64) ((double *)host)[e] = (double)c;
    else ((float *)host)[e] = (float)c;
    for (int i = nd - 1; i >= 0 && ++o[i] == g->out[i]; i--) o[i] = 0;
  }
  kiln_tensor *r = uniform ? kiln_div_scalar(sum, (double)first)
                           : kiln_div(sum, kiln_view(api_host_const(cd, q, host, like, fn), 2 * nd, shape));
  free(host);
  return r;
}

KILN_API kiln_tensor *kiln_avg_pool(kiln_tensor *input, int nd, const int64_t *kernel, const int64_t *stride,
                                    const int64_t *padding, bool ceil_mode, bool count_include_pad) {
  const char *fn = "kiln_avg_pool";
  pool_geom g;
  kiln_scope_begin();
  kiln_tensor *x = check_pool(input, nd, kernel, stride, padding, NULL, ceil_mode, &g, fn), *y = NULL;
  if (!x) goto done;
  /* Torch's avg_pool3d (only it) also wants the unpadded input at least as
   * large as the kernel */
  for (int i = 0; nd == 3 && i < nd; i++)
    if (g.in[i] < g.k[i]) {
      char a[256], b[256];
      api_error(KILN_ERR_SHAPE, fn, "3-D input %s smaller than kernel %s (Torch's avg_pool3d rule)",
                fmt_arr(a, sizeof a, nd, g.in), fmt_arr(b, sizeof b, nd, g.k));
      goto done;
    }
  kiln_dtype dt = input->storage->dtype, cd = graph_compute_dtype(dt);
  kiln_tensor *win = windows(pad_input(x, &g, 0), &g);
  if (!win) goto done;
  int kdims[3];
  for (int i = 0; i < nd; i++) kdims[i] = 2 + nd + i;
  /* keepdim: the reduction's readers fuse it when they read it as it is
   * stored, [N, C, *out, 1...]; the kernel dims go from the result */
  kiln_tensor *sum = kiln_sum(dt == cd ? win : kiln_to_dtype(win, cd), nd, kdims, true);
  kiln_tensor *avg = kiln_to_dtype(divide(sum, &g, count_include_pad, x, fn), dt);
  if (!avg) goto done;
  int od = input->view.ndim, lead = od - nd;
  int64_t out_sizes[5];
  for (int d = 0; d < lead; d++) out_sizes[d] = input->view.sizes[d];
  for (int i = 0; i < nd; i++) out_sizes[lead + i] = g.out[i];
  y = kiln_view(avg, od, out_sizes);
done:
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
