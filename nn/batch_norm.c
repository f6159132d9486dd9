/*
 * batch_norm.c — kiln_batch_norm: Torch 1.13's nn.functional.batch_norm
 * as a composition of reductions and elementwise ops over input
 * [N, C, *] (so kiln_grad differentiates it w.r.t. input, weight and bias
 * through the ops' own rules):
 *
 *   training  mean = mean(x over every dim but 1), xc = x - mean,
 *             var = mean(xc * xc) (biased, two passes, as layer_norm),
 *             y = xc * rsqrt(var + eps) * weight + bias; then, when given,
 *             running_mean and running_var are written in place through
 *             their views (a lazy kiln_copy_), detached: r = (1 -
 *             momentum) r + momentum s with s the detached batch mean and
 *             the unbiased variance var * n / (n - 1) (Torch);
 *   eval      y = (x - running_mean) * rsqrt(running_var + eps) * weight
 *             + bias.
 * Per-channel tensors (weight, bias, stats: any shape of C elements, as
 * Torch) are read as [1, C, 1, ...]. F16/BF16 inputs compute in F32 and
 * round to the input's dtype at the end (Torch keeps the input's dtype).
 */
#include <math.h>

#include "nn_internal.h"

/* p (C elements) as [1, C, 1, ...] of ndim dims, converted to cd. */
static kiln_tensor *per_channel(kiln_tensor *p, int64_t c, int ndim, kiln_dtype cd) {
  int64_t sizes[KILN_MAX_DIMS];
  for (int d = 0; d < ndim; d++) sizes[d] = d == 1 ? c : 1;
  return kiln_to_dtype(kiln_reshape(p, ndim, sizes), cd);
}

static bool check_param(kiln_tensor *p, int64_t c, const char *name, const char *fn) {
  if (!p) return true;
  if (!graph_is_float(p->storage->dtype)) {
    api_error(KILN_ERR_DTYPE, fn, "%s needs a float dtype, got %s", name, graph_dtypes[p->storage->dtype].name);
    return false;
  }
  int64_t n = graph_view_numel(&p->view);
  if (n == c) return true;
  api_error(KILN_ERR_SHAPE, fn, "%s should contain %lld elements (the channels, dim 1 of input), not %lld", name,
            (long long)c, (long long)n);
  return false;
}

static bool check_args(kiln_tensor *input, kiln_tensor *rm, kiln_tensor *rv, kiln_tensor *w, kiln_tensor *b,
                       bool training, double momentum, double eps, const char *fn) {
  if (!api_check(input, fn, "input")) return false;
  /* NULL optional tensors are allowed, but not after an earlier error */
  if ((!rm || !rv || !w || !b) && kiln_last_status() != KILN_OK) return false;
  const graph_view *v = &input->view;
  char s[256];
  api_fmt_sizes(s, sizeof s, v->ndim, v->sizes);
  if (v->ndim < 2) {
    api_error(KILN_ERR_SHAPE, fn, "input must have at least 2 dims [N, C, *], got sizes %s", s);
    return false;
  }
  if (!graph_is_float(input->storage->dtype)) {
    api_error(KILN_ERR_DTYPE, fn, "needs a float dtype, got %s (convert with kiln_to_dtype)",
              graph_dtypes[input->storage->dtype].name);
    return false;
  }
  if (!isfinite(eps) || !isfinite(momentum)) {
    api_error(KILN_ERR_ARG, fn, "eps %g and momentum %g must be finite", eps, momentum);
    return false;
  }
  if (!training && (!rm || !rv)) {
    api_error(KILN_ERR_ARG, fn, "running_%s must be given when not training", rm ? "var" : "mean");
    return false;
  }
  int64_t c = v->sizes[1];
  if (!check_param(rm, c, "running_mean", fn) || !check_param(rv, c, "running_var", fn) ||
      !check_param(w, c, "weight", fn) || !check_param(b, c, "bias", fn))
    return false;
  if (training && graph_view_numel(v) / (c ? c : 1) <= 1 && graph_view_numel(v) > 0) {
    api_error(KILN_ERR_SHAPE, fn, "expected more than 1 value per channel when training, got input sizes %s", s);
    return false;
  }
  if ((rm && training && !ops_check_writable(rm, fn)) || (rv && training && !ops_check_writable(rv, fn)))
    return false;
  return true;
}

/* r = (1 - momentum) r + momentum s (s [1, C, 1...], detached), written
 * through r's view, detached. */
static int update(kiln_tensor *r, kiln_tensor *s, double momentum) {
  kiln_dtype rd = r->storage->dtype;
  kiln_tensor *sv = kiln_reshape(kiln_detach(s), r->view.ndim, r->view.sizes);
  kiln_tensor *old = kiln_to_dtype(kiln_detach(r), kiln_dtype_of(sv));
  kiln_tensor *nv = kiln_add(kiln_mul_scalar(old, 1 - momentum), kiln_mul_scalar(sv, momentum));
  return nv ? ops_write_detached(r, kiln_to_dtype(nv, rd)) : api_status();
}

KILN_API kiln_tensor *kiln_batch_norm(kiln_tensor *input, kiln_tensor *running_mean, kiln_tensor *running_var,
                                      kiln_tensor *weight, kiln_tensor *bias, bool training, double momentum,
                                      double eps) {
  const char *fn = "kiln_batch_norm";
  if (!check_args(input, running_mean, running_var, weight, bias, training, momentum, eps, fn)) return NULL;
  const graph_view *v = &input->view;
  int nd = v->ndim, dims[KILN_MAX_DIMS], nr = 0;
  int64_t c = v->sizes[1], count = 1;
  for (int d = 0; d < nd; d++)
    if (d != 1) dims[nr++] = d, count *= v->sizes[d];
  kiln_dtype dt = input->storage->dtype, cd = graph_compute_dtype(dt);
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *x = kiln_to_dtype(input, cd), *xc, *inv, *y = NULL;
  if (training) {
    kiln_tensor *mean = kiln_mean(x, nr, dims, true); /* [1, C, 1...] */
    xc = kiln_sub(x, mean);
    kiln_tensor *var = kiln_mean(kiln_mul(xc, xc), nr, dims, true);
    inv = kiln_rsqrt(kiln_add_scalar(var, eps));
    int st = KILN_OK;
    if (running_mean && count > 0) st = update(running_mean, mean, momentum);
    if (running_var && count > 0 && st == KILN_OK)
      st = update(running_var, kiln_mul_scalar(var, (double)count / (double)(count - 1)), momentum);
    if (st != KILN_OK) goto done;
  } else {
    xc = kiln_sub(x, per_channel(running_mean, c, nd, cd));
    inv = kiln_rsqrt(kiln_add_scalar(per_channel(running_var, c, nd, cd), eps));
  }
  y = kiln_mul(xc, inv);
  if (weight) y = kiln_mul(y, per_channel(weight, c, nd, cd));
  if (bias) y = kiln_add(y, per_channel(bias, c, nd, cd));
  y = kiln_to_dtype(y, dt);
done:
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
