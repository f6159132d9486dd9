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
 *   max  when the windows do not overlap: sel, a bool over win, true at
 *        the element Torch picks — the first maximum in scan order, or
 *        the last NaN, never padding when the window holds an input
 *        element: an elementwise chain over the kernel's taps (each a
 *        strided view of win), giving the chosen tap per output position
 *        (I8), compared with each position's tap number; past CHAIN_TAPS
 *        taps, amax and a key/amin reduction giving the chosen position
 *        instead (key_at). The value is a sum over the kernel dims of
 *        where(sel, win, 0) (with the sign of a -0 maximum kept:
 *        select_sum), so the gradient is where(sel, g, 0) through the one
 *        window view: a reshaped or permuted read of the cotangent, no
 *        scatter (amax's own gradient would split ties evenly; Torch's
 *        max_pool backward sends it to the one element). Overlapping
 *        windows: key_at's position and a gather of xp there, whose
 *        gradient is a scatter-add (gather_pool).
 * Both pools reduce over the last dims of win (rows), which the fusion
 * pass computes inside their reader.
 * Output size per dim (Torch's pooling_output_shape): floor or ceil of
 * (in + 2 p - d (k - 1) - 1) / s, plus 1; in ceil_mode, minus 1 when the
 * last window would start at or past in + p. Average divisor per dim
 * (AvgPoolKernel.cpp): the window clipped to [-p, in + p) with
 * count_include_pad, else clipped to [0, in); multiplied over the dims.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"

#define KEY_MAX 4611686018427387904.0 /* 2^62: past every position */

/* Windows of at most this many taps choose by the elementwise chain. Each
 * tap is one more external read of the kernel (PASS_MAX_EDGES 63) and
 * 5 (9 with padding) more nodes (PASS_MAX_GROUP 200): up to about 22
 * taps fuse into one kernel, a few more split it in two; the code grows
 * with the taps while the reduction's loop does not. 32 keeps 3x3x3
 * windows (27) on the chain, and -1 - t in I8. */
#define CHAIN_TAPS 32

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
  kiln_tensor *a = ops_move_like(kiln_arange(KILN_I64, 0, (double)(n * step), (double)step), like, "kiln_max_pool");
  api_untracked_end();
  return kiln_view(api_track(a), ndim, sizes);
}

/* Max pooling's windows interleave the dims, [N, C, o0, k0, o1, k1, ...]:
 * kernel dim i is dim KDIM(i). For windows that neither overlap nor
 * leave gaps (stride == kernel, no padding) this is x's own layout, so
 * the gradient to the window view is a reshape of the cotangent
 * (grad.c adjoint) — no permutation, whose flat index the kernels
 * would take apart with divisions. */
#define KDIM(i) (3 + 2 * (i))

/* win [N, C, *out, *kernel] as [N, C, o0, k0, o1, k1, ...]. */
static kiln_tensor *interleave(kiln_tensor *win, int nd) {
  int perm[8] = {0, 1};
  for (int i = 0; i < nd; i++) perm[KDIM(i) - 1] = 2 + i, perm[KDIM(i)] = 2 + nd + i;
  return kiln_permute(win, 2 + 2 * nd, perm);
}

/* Tap t (row-major over the kernel dims) of interleaved windows w: the
 * kernel dims selected away, a strided view [N, C, *out]. */
static kiln_tensor *tap(kiln_tensor *w, const pool_geom *g, int64_t t) {
  for (int i = g->nd - 1; i >= 0 && w; i--) {
    w = kiln_select(w, KDIM(i), t % g->k[i]);
    t /= g->k[i];
  }
  return w;
}

/* Torch's choice (MaxPoolKernel.cpp: over the window's input elements
 * in scan order, take val when val > maxval or val is NaN, maxval
 * starting at -inf and the index at the first input element) as an
 * elementwise chain over the k taps of win, each a strided view
 * [N, C, *out], so it vectorizes over the output positions:
 *   upd_t = w_t > m or w_t != w_t;  code = where(upd_t, t, code);
 *   m = maximum(m, w_t)  (NaN-propagating: equal to Torch's maxval for
 *   every comparison, whatever the sign of a zero)
 * starting from m = -inf and code = first, the first input tap (padding
 * is -inf, so it never updates: no inside test per tap; a window of
 * padding only keeps tap 0, a -inf padding element). m is read twice a
 * step; fuse.c sizes a group by its distinct nodes, so the chain (with
 * producers fused into its taps, e.g. a conv's bias and ReLU) is one
 * kernel while it fits the limits below.
 * Returns the code [N, C, *out] I8: the chosen tap t, or
 * -1 - t when its value is negative or -0 (1/w < 0: see select_sum);
 * k <= CHAIN_TAPS keeps both in I8. */
static kiln_tensor *chain_code(kiln_tensor *win, kiln_tensor *first, const pool_geom *g, int64_t k) {
  kiln_tensor *m = NULL, *code = first;
  for (int64_t t = 0; t < k; t++) {
    kiln_tensor *w = tap(win, g, t);
    kiln_tensor *neg = kiln_lt_scalar(kiln_reciprocal(w), 0);
    kiln_tensor *ct = kiln_where(neg, kiln_scalar(KILN_I8, (double)(-1 - t)), kiln_scalar(KILN_I8, (double)t));
    if (!m && !first) { /* tap 0 of an unpadded window: taken (a -inf gives code 0 too) */
      code = ct;
    } else {
      kiln_tensor *upd = kiln_logical_or(m ? kiln_gt(w, m) : kiln_gt_scalar(w, -INFINITY), kiln_ne(w, w));
      code = kiln_where(upd, ct, code);
    }
    if (t + 1 < k) m = m ? kiln_maximum(m, w) : w;
  }
  return code;
}

/* The first input tap of each window (row-major over the kernel dims;
 * 0 when it holds padding only): *out, an I8 tensor [*out] computed on
 * the host, or NULL when it is 0 everywhere. Returns a status. */
static int first_taps(const pool_geom *g, const kiln_tensor *like, const char *fn, kiln_tensor **out) {
  int nd = g->nd;
  int64_t q = 1, o[3] = {0, 0, 0};
  for (int i = 0; i < nd; i++) q *= g->out[i];
  int8_t *host = malloc((size_t)q);
  *out = NULL;
  if (!host) return api_error(KILN_ERR_OOM, fn, "out of memory");
  bool any = false;
  for (int64_t e = 0; e < q; e++) {
    int64_t flat = 0;
    bool empty = false;
    for (int i = 0; i < nd; i++) {
      int64_t j = 0, start = o[i] * g->s[i] - g->p[i]; /* input coordinate of kernel index 0 */
      while (j < g->k[i] && start + j * g->dil[i] < 0) j++;
      empty = empty || j == g->k[i] || start + j * g->dil[i] >= g->in[i];
      flat = flat * g->k[i] + j;
    }
    host[e] = (int8_t)(empty ? 0 : flat);
    any = any || host[e];
    for (int i = nd - 1; i >= 0 && ++o[i] == g->out[i]; i--) o[i] = 0;
  }
  if (any) *out = kiln_view(ops_host_const(KILN_I8, q, host, like, fn), nd, g->out);
  free(host);
  return any && !*out ? KILN_ERR_OOM : KILN_OK;
}

/* The flat tap number of each kernel position (row-major over the kernel
 * dims), an I64 tensor [1, 1, 1, k0, 1, k1, ...]. */
static kiln_tensor *tap_numbers(const pool_geom *g, const kiln_tensor *like) {
  int nd = g->nd;
  kiln_tensor *n = NULL;
  int64_t row = 1;
  for (int i = nd - 1; i >= 0; i--) {
    kiln_tensor *a = axis(g->k[i], row, KDIM(i), 2 + 2 * nd, like);
    n = n ? kiln_add(n, a) : a;
    row *= g->k[i];
  }
  return n;
}

/* The output from the choice: sel [N, C, o0, k0, ...] (true at the
 * chosen element) and neg [N, C, o0, 1, ...] (its value is negative or
 * -0). y = sum over the kernel dims of where(sel, c · win, 0) / c, c = -1
 * where neg, else 1: the chosen value exactly (the sum adds zeros to it;
 * c keeps a -0 maximum -0, where -0 + 0 would give +0), and the gradient
 * to win is where(sel, g / c, 0) · c = where(sel, g, 0) — one cotangent
 * for the one window view, which grad.c sends back to the input as a
 * reshape (windows that cover the input without overlap, KDIM), or a
 * permuted read or a strided copy into zeros (other windows that do not
 * overlap; overlapping ones never come here: sum_path): no scatter.
 * Dividing rather than multiplying by c matters for
 * speed: g / c is not CHEAP (fuse.c rule 4), so the backward computes it
 * once per output position into a buffer, instead of recomputing g's
 * producers (e.g. the next conv's col2im) for each of the k window
 * elements it is broadcast to. */
static kiln_tensor *select_sum(kiln_tensor *win, kiln_tensor *sel, kiln_tensor *neg, const pool_geom *g) {
  kiln_dtype dt = kiln_dtype_of(win);
  int kdims[3];
  for (int i = 0; i < g->nd; i++) kdims[i] = KDIM(i);
  kiln_tensor *c = kiln_where(neg, kiln_scalar(dt, -1), kiln_scalar(dt, 1));
  kiln_tensor *s = kiln_sum(kiln_where(sel, kiln_mul(win, c), kiln_scalar(dt, 0)), g->nd, kdims, true);
  return kiln_to_dtype(kiln_div(s, c), dt);
}

/* Torch's choice by row reductions: amax of win, then amin of key =
 * -pos at a NaN (m is NaN then, and no element equals it), pos at a
 * maximum inside the input, else past every pos (KEY_MAX + pos) — minus
 * the last NaN's pos or the first maximum's. pos: the flat index into
 * xp's spatial block (row-major), from aranges, [*out, *kernel] or
 * interleaved [o0, k0, ...] as win is (inter). With dilation a window may
 * hold padding only (no hit): its first pos, a padding element (-inf, as
 * the chain's tap 0). Returns at [N, C, *out, 1...] (or interleaved) and
 * sets *pos. */
static kiln_tensor *key_at(kiln_tensor *win, const pool_geom *g, bool padded, bool inter, const kiln_tensor *like,
                           kiln_tensor **pos) {
  int nd = g->nd, kdims[3];
  kiln_tensor *inside = NULL;
  int64_t row = 1;
  bool dilated = false; /* else every window holds an input element (padding <= kernel / 2) */
  *pos = kiln_scalar(KILN_I64, 0);
  for (int i = nd - 1; i >= 0; i--) {
    int od = inter ? 2 * i : i, kd = inter ? 2 * i + 1 : nd + i;
    kiln_tensor *c = kiln_add(axis(g->out[i], g->s[i], od, 2 * nd, like), axis(g->k[i], g->dil[i], kd, 2 * nd, like));
    *pos = kiln_add(*pos, kiln_mul_scalar(c, (double)row));
    row *= g->in[i] + g->p[i] + g->right[i];
    kdims[i] = inter ? KDIM(i) : 2 + nd + i, dilated = dilated || g->dil[i] > 1;
    if (!padded) continue;
    kiln_tensor *in = kiln_logical_and(kiln_ge_scalar(c, (double)g->p[i]), kiln_lt_scalar(c, (double)(g->p[i] + g->in[i])));
    inside = inside ? kiln_logical_and(inside, in) : in;
  }
  kiln_tensor *m = kiln_amax(win, nd, kdims, true);
  kiln_tensor *hit = kiln_eq(win, m);
  if (inside) hit = kiln_logical_and(hit, inside);
  kiln_tensor *key = kiln_where(kiln_ne(win, win), kiln_neg(*pos), kiln_where(hit, *pos, kiln_add_scalar(*pos, KEY_MAX)));
  kiln_tensor *at = kiln_abs(kiln_amin(key, nd, kdims, true));
  if (inside && dilated) at = kiln_where(kiln_ge_scalar(at, KEY_MAX), kiln_sub_scalar(at, KEY_MAX), at);
  return at;
}

/* The fallback for windows of more than CHAIN_TAPS taps: key_at's
 * position as sel and neg, as select_sum takes them. */
static void key_choice(kiln_tensor *win, const pool_geom *g, bool padded, const kiln_tensor *like, kiln_tensor **sel,
                       kiln_tensor **neg) {
  int kdims[3];
  kiln_tensor *pos;
  for (int i = 0; i < g->nd; i++) kdims[i] = KDIM(i);
  kiln_tensor *at = key_at(win, g, padded, true, like, &pos);
  *sel = kiln_eq(pos, at);
  *neg = kiln_any(kiln_logical_and(*sel, kiln_lt_scalar(kiln_reciprocal(win), 0)), g->nd, kdims, true);
}

/* Spatial dims [2, 2 + nd) of x merge into one (a flat view exists). */
static bool spatial_mergeable(const kiln_tensor *x, int nd) {
  const graph_view *v = &x->view;
  for (int d = 2; d < 1 + nd; d++)
    if (v->sizes[d + 1] != 1 && v->strides[d] != v->strides[d + 1] * v->sizes[d + 1]) return false;
  return true;
}

/* Whether the windows overlap along no dim: then the window view's
 * gradient is one elementwise kernel (grad_view_add: a reshape or
 * permutation of the input, or a strided copy into zeros), and
 * select_sum's formulation pays. Overlapping windows would take
 * add_shifted's kernel (stride 1, measured slower than the scatter: 3x3
 * stride 1 on [128, 32, 28, 28] F32, backward 95-100 ms against 30) or
 * one in-place add per tap (stride 2); they keep gather_pool. */
static bool sum_path(const pool_geom *g) {
  for (int i = 0; i < g->nd; i++) {
    graph_view v = {.ndim = 2, .sizes = {g->out[i], g->k[i]}, .strides = {g->s[i], g->dil[i]}};
    if (!graph_view_injective(&v)) return false;
  }
  return true;
}

/* Max pooling as a gather of xp [N, C, *padded] at key_at's positions
 * (rows of win [N, C, *out, *kernel]: one fused kernel, then the gather);
 * its gradient is a scatter-add. xp's spatial dims must merge (a copy
 * when they do not). [N, C, q] (q = prod(out)). */
static kiln_tensor *gather_pool(kiln_tensor *x, kiln_tensor *xp, bool padded, const pool_geom *g, const char *fn) {
  int64_t q = 1;
  for (int i = 0; i < g->nd; i++) q *= g->out[i];
  if (!padded && !spatial_mergeable(xp, g->nd)) xp = kiln_contiguous(xp);
  kiln_tensor *win = windows(xp, g), *pos;
  kiln_tensor *at = win ? key_at(win, g, padded, false, x, &pos) : NULL;
  kiln_tensor *plane = kiln_flatten(xp, 2, -1);
  kiln_tensor *at3 = kiln_reshape(at, 3, (int64_t[]){x->view.sizes[0], x->view.sizes[1], q});
  if (!plane || !at3) return NULL;
  return ops_gather(plane, &plane->view, 2, at3, &at3->view, fn);
}

/* The result's sizes: input's leading dims, then out (into sizes). */
static const int64_t *out_shape(const kiln_tensor *input, const pool_geom *g, int64_t *sizes) {
  int lead = input->view.ndim - g->nd;
  for (int d = 0; d < lead; d++) sizes[d] = input->view.sizes[d];
  for (int i = 0; i < g->nd; i++) sizes[lead + i] = g->out[i];
  return sizes;
}

KILN_API kiln_tensor *kiln_max_pool(kiln_tensor *input, int nd, const int64_t *kernel, const int64_t *stride,
                                    const int64_t *padding, const int64_t *dilation, bool ceil_mode) {
  const char *fn = "kiln_max_pool";
  pool_geom g;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *x = check_pool(input, nd, kernel, stride, padding, dilation, ceil_mode, &g, fn), *y = NULL;
  int64_t out_sizes[5];
  if (!x) goto done;
  bool padded = false;
  int64_t k = 1;
  for (int i = 0; i < nd; i++) padded = padded || g.p[i] || g.right[i], k *= g.k[i];
  kiln_tensor *xp = padded ? pad_input(x, &g, -INFINITY) : x;
  if (!sum_path(&g)) {
    kiln_tensor *flat = gather_pool(x, xp, padded, &g, fn);
    y = flat ? kiln_view(flat, input->view.ndim, out_shape(input, &g, out_sizes)) : NULL;
    goto done;
  }
  kiln_tensor *win = interleave(windows(xp, &g), nd);
  if (!win) goto done;
  kiln_tensor *sel, *neg;
  if (k <= CHAIN_TAPS) {
    int64_t ksz[8];
    memcpy(ksz, win->view.sizes, sizeof(int64_t) * (size_t)(2 + 2 * nd));
    for (int i = 0; i < nd; i++) ksz[KDIM(i)] = 1;
    kiln_tensor *first = NULL;
    if (padded && first_taps(&g, x, fn, &first) != KILN_OK) goto done;
    kiln_tensor *code = kiln_reshape(chain_code(win, first, &g, k), 2 + 2 * nd, ksz); /* [N, C, o0, 1, ...] */
    neg = kiln_lt_scalar(code, 0);
    sel = kiln_eq(tap_numbers(&g, x), kiln_where(neg, kiln_sub_scalar(kiln_neg(code), 1), code));
  } else {
    key_choice(win, &g, padded, x, &sel, &neg);
  }
  kiln_tensor *pooled = select_sum(win, sel, neg, &g);
  y = pooled ? kiln_view(pooled, input->view.ndim, out_shape(input, &g, out_sizes)) : NULL;
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
                           : kiln_div(sum, kiln_view(ops_host_const(cd, q, host, like, fn), 2 * nd, shape));
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
