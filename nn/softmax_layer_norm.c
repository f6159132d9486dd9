/*
 * nn.c — neural-network helpers (kiln_softmax, kiln_log_softmax,
 * kiln_layer_norm, kiln_rms_norm), composed from graph ops.
 *
 * Each is written as a user would write it — row reductions with keepdim
 * and elementwise ops over the row — because the fusion pass makes that
 * composition one kernel per block of rows (passes/fuse.c, row fusion): a
 * hand-written kernel would read and write memory the same number of
 * times. Softmax subtracts the row maximum before exp (no overflow for any
 * finite input); layer norm computes the variance in two passes (mean,
 * then the mean of squared deviations), both over a row still in cache.
 *
 * Softmax over a dim other than the last reduces over that dim directly:
 * the maximum and the sum become column reductions (kernels of their own,
 * reading whole cache lines), and the result stays contiguous. Moving the
 * dim last instead would keep one kernel but walk memory with a stride,
 * several times slower than those kernels for a large square F32 input
 * (bench/ has no row for it: add one, see bench/README.md, before
 * changing this). F16/BF16 inputs compute in F32 and round once at the
 * end, as Torch's CPU kernels do. Integer and bool inputs are
 * KILN_ERR_DTYPE, as in Torch (convert with kiln_to_dtype first).
 */
#include <math.h>

#include "nn_internal.h"

kiln_tensor *nn_widen(kiln_tensor *t) { return kiln_to_dtype(t, graph_compute_dtype(t->storage->dtype)); }

bool nn_check_float(const kiln_tensor *t, const char *fn, const char *arg) {
  kiln_dtype d = t->storage->dtype;
  if (graph_is_float(d)) return true;
  api_error(KILN_ERR_DTYPE, fn, "%s needs a float dtype, got %s (convert with kiln_to_dtype)", arg,
            graph_dtypes[d].name);
  return false;
}

/* softmax (log = false) or log_softmax along dim d of x (a float compute
 * dtype), rounded to dtype:
 *   m = amax(x, d, keepdim); xm = x - m
 *   softmax = exp(xm) / sum(exp(xm));  log_softmax = xm - log(sum(exp(xm))) */
static kiln_tensor *softmax_dim(kiln_tensor *x, int d, bool log, kiln_dtype dtype) {
  /* detached: the result does not depend on the shift m (its gradient
   * through m is exactly 0), so kiln_grad need not compute it */
  kiln_tensor *m = kiln_detach(kiln_amax(x, 1, &d, true));
  kiln_tensor *xm = kiln_sub(x, m);
  kiln_tensor *e = kiln_exp(xm);
  kiln_tensor *s = kiln_sum(e, 1, &d, true);
  kiln_tensor *y = log ? kiln_sub(xm, kiln_log(s)) : kiln_div(e, s);
  return kiln_to_dtype(y, dtype);
}

static kiln_tensor *softmax_impl(kiln_tensor *t, int dim, bool log, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  int d = api_wrap_dim(dim, t->view.ndim, fn);
  if (d < 0 || !nn_check_float(t, fn, "t")) return NULL;
  kiln_dtype dtype = t->storage->dtype;
  if (graph_view_numel(&t->view) == 0) return ops_copy_contiguous(t, dtype, fn);
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *y = softmax_dim(nn_widen(t), d, log, dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

KILN_API kiln_tensor *kiln_softmax(kiln_tensor *t, int dim) { return softmax_impl(t, dim, false, "kiln_softmax"); }
KILN_API kiln_tensor *kiln_log_softmax(kiln_tensor *t, int dim) {
  return softmax_impl(t, dim, true, "kiln_log_softmax");
}

/* weight or bias (name) must have exactly the normalized sizes. */
static bool check_affine(const kiln_tensor *p, const kiln_tensor *t, int n, const char *name, const char *fn) {
  const graph_view *v = &t->view;
  bool ok = p->view.ndim == n;
  for (int i = 0; ok && i < n; i++) ok = p->view.sizes[i] == v->sizes[v->ndim - n + i];
  if (ok) return true;
  char a[256], b[256], c[256];
  api_error(KILN_ERR_SHAPE, fn, "%s has sizes %s but the normalized sizes of t %s are %s", name,
            api_fmt_sizes(a, sizeof a, p->view.ndim, p->view.sizes), api_fmt_sizes(b, sizeof b, v->ndim, v->sizes),
            api_fmt_sizes(c, sizeof c, n, v->sizes + v->ndim - n));
  return false;
}

/* y = (x - mean) / sqrt(var + eps) * weight + bias over the last n dims,
 * var the biased variance (divided by the count), as Torch's layer_norm:
 *   mu = mean(x); xc = x - mu; var = mean(xc * xc); y = xc * rsqrt(var + eps) */
KILN_API kiln_tensor *kiln_layer_norm(kiln_tensor *t, int normalized_ndim, kiln_tensor *weight, kiln_tensor *bias,
                                      double eps) {
  const char *fn = "kiln_layer_norm";
  if (!api_check(t, fn, "t")) return NULL;
  /* a NULL weight/bias is allowed, but not after an earlier error */
  if ((!weight || !bias) && kiln_last_status() != KILN_OK) return NULL;
  int nd = t->view.ndim, n = normalized_ndim;
  if (n < 1 || n > nd) {
    api_error(KILN_ERR_ARG, fn, "normalized_ndim %d out of range for a %d-d tensor (expected [1, %d])", n, nd, nd);
    return NULL;
  }
  if (!nn_check_float(t, fn, "t")) return NULL;
  if ((weight && !check_affine(weight, t, n, "weight", fn)) || (bias && !check_affine(bias, t, n, "bias", fn)))
    return NULL;
  if (!isfinite(eps) || eps < 0) {
    api_error(KILN_ERR_ARG, fn, "eps %g must be finite and >= 0", eps);
    return NULL;
  }
  kiln_dtype dtype = t->storage->dtype;
  if (weight) dtype = graph_promote(dtype, weight->storage->dtype);
  if (bias) dtype = graph_promote(dtype, bias->storage->dtype);
  if (!graph_is_float(dtype)) dtype = t->storage->dtype;
  int dims[KILN_MAX_DIMS];
  for (int i = 0; i < n; i++) dims[i] = nd - n + i;
  kiln_scope_begin();
  kiln_tensor *x = nn_widen(t);
  kiln_tensor *xc = kiln_sub(x, kiln_mean(x, n, dims, true));
  kiln_tensor *var = kiln_mean(kiln_mul(xc, xc), n, dims, true);
  kiln_tensor *y = kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, eps)));
  if (weight) y = kiln_mul(y, weight);
  if (bias) y = kiln_add(y, bias);
  y = kiln_to_dtype(y, dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* y = x * rsqrt(mean(x * x) + eps) * weight over the last n dims, as Torch
 * 2.4's rms_norm (one row kernel, like layer norm's). */
KILN_API kiln_tensor *kiln_rms_norm(kiln_tensor *t, int normalized_ndim, kiln_tensor *weight, double eps) {
  const char *fn = "kiln_rms_norm";
  if (!api_check(t, fn, "t")) return NULL;
  if (!weight && kiln_last_status() != KILN_OK) return NULL; /* a NULL weight, but not after an error */
  int nd = t->view.ndim, n = normalized_ndim;
  if (n < 1 || n > nd) {
    api_error(KILN_ERR_ARG, fn, "normalized_ndim %d out of range for a %d-d tensor (expected [1, %d])", n, nd, nd);
    return NULL;
  }
  if (!nn_check_float(t, fn, "t")) return NULL;
  if (weight && (!nn_check_float(weight, fn, "weight") || !check_affine(weight, t, n, "weight", fn))) return NULL;
  if (!isfinite(eps) || eps < 0) {
    api_error(KILN_ERR_ARG, fn, "eps %g must be finite and >= 0", eps);
    return NULL;
  }
  kiln_dtype dtype = weight ? graph_promote(t->storage->dtype, weight->storage->dtype) : t->storage->dtype;
  int dims[KILN_MAX_DIMS];
  for (int i = 0; i < n; i++) dims[i] = nd - n + i;
  kiln_scope_begin();
  kiln_tensor *x = nn_widen(t);
  kiln_tensor *ms = kiln_mean(kiln_mul(x, x), n, dims, true);
  kiln_tensor *y = kiln_mul(x, kiln_rsqrt(kiln_add_scalar(ms, eps)));
  if (weight) y = kiln_mul(y, nn_widen(weight));
  y = kiln_to_dtype(y, dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
