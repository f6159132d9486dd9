/*
 * interpolate.c — kiln_interpolate: Torch 1.13's nn.functional.interpolate
 * in modes 'nearest' and 'linear' / 'bilinear' / 'trilinear' (by the
 * number of spatial dims), composed from lazy graph ops one spatial dim
 * at a time (both modes are separable: bilinear is linear along H, then
 * along W).
 *
 * Source coordinates follow ATen's UpSample.h, with scale = in / out, or
 * 1 / scale_factor when the caller gives scale factors (Torch's
 * recompute_scale_factor=None):
 *   nearest  src = min(floor(dst * scale), in - 1), computed in float as
 *            Torch does (floorf of a float product: a double product
 *            would pick another pixel at some sizes);
 *   linear   align_corners: src = dst * (in - 1) / (out - 1) (0 when out
 *            == 1); else src = max(scale * (dst + 0.5) - 0.5, 0); then
 *            i0 = floor(src), i1 = min(i0 + 1, in - 1), l1 = src - i0:
 *            y = x[i0] * (1 - l1) + x[i1] * l1.
 * Each index list is a gather along the dim (GATHER nodes fuse into their
 * reader; their gradient is a scatter-add), the weights host-computed
 * [out] tensors read broadcast.
 */
#include <math.h>
#include <stdlib.h>

#include "nn_internal.h"

typedef struct interp_dim {
  int64_t in, out;
  double scale; /* Torch's: in / out, or 1 / scale_factor */
  bool given;   /* scale came from a scale factor */
} interp_dim;

static kiln_tensor *nearest_dim(kiln_tensor *x, int dim, const interp_dim *g, const char *fn) {
  int64_t *idx = malloc(sizeof *idx * (size_t)g->out);
  if (!idx) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  float scale = g->given ? (float)g->scale : (float)g->in / (float)g->out;
  for (int64_t o = 0; o < g->out; o++) {
    int64_t s = g->out == g->in ? o : g->out == 2 * g->in ? o >> 1 : (int64_t)floorf((float)o * scale);
    idx[o] = s < g->in - 1 ? s : g->in - 1;
  }
  kiln_tensor *y = nn_take(x, dim, g->out, idx, fn);
  free(idx);
  return y;
}

/* A host [out] weight as [1.., out, 1..] (dim of ndim), x's dtype. */
static kiln_tensor *weights(const double *w, int64_t out, int dim, int ndim, kiln_tensor *x, const char *fn) {
  int64_t sz[KILN_MAX_DIMS];
  for (int d = 0; d < ndim; d++) sz[d] = d == dim ? out : 1;
  return kiln_view(kiln_to_dtype(ops_host_const(KILN_F64, out, w, x, fn), kiln_dtype_of(x)), ndim, sz);
}

static kiln_tensor *linear_dim(kiln_tensor *x, int dim, const interp_dim *g, bool align_corners, const char *fn) {
  int64_t n = g->out, *i0 = malloc(sizeof *i0 * (size_t)n * 2);
  double *l = malloc(sizeof *l * (size_t)n * 2);
  kiln_tensor *y = NULL;
  if (!i0 || !l) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    goto done;
  }
  int64_t *i1 = i0 + n;
  double *l0 = l, *l1 = l + n;
  for (int64_t o = 0; o < n; o++) {
    double src;
    if (align_corners) {
      src = n > 1 ? (double)o * (double)(g->in - 1) / (double)(n - 1) : 0;
    } else {
      double sc = g->given ? g->scale : (double)g->in / (double)n;
      src = sc * ((double)o + 0.5) - 0.5;
      if (src < 0) src = 0;
    }
    i0[o] = (int64_t)src;
    i1[o] = i0[o] < g->in - 1 ? i0[o] + 1 : i0[o];
    l1[o] = src - (double)i0[o];
    l0[o] = 1 - l1[o];
  }
  int nd = x->view.ndim;
  kiln_tensor *a = kiln_mul(nn_take(x, dim, n, i0, fn), weights(l0, n, dim, nd, x, fn));
  kiln_tensor *b = kiln_mul(nn_take(x, dim, n, i1, fn), weights(l1, n, dim, nd, x, fn));
  y = kiln_add(a, b);
done:
  free(i0), free(l);
  return y;
}

/* Checks the arguments and fills g [nd]. */
static bool check_interp(kiln_tensor *input, int nd, const int64_t *size, const double *scale_factor,
                         kiln_interp_mode mode, bool align_corners, interp_dim *g, const char *fn) {
  if (!api_check(input, fn, "input")) return false;
  if (nd < 1 || nd > 3) {
    api_error(KILN_ERR_ARG, fn, "nd %d (spatial dims) must be 1, 2 or 3", nd);
    return false;
  }
  if (!size == !scale_factor) {
    api_error(KILN_ERR_ARG, fn, "give exactly one of size and scale_factor");
    return false;
  }
  if (mode != KILN_INTERP_NEAREST && mode != KILN_INTERP_LINEAR) {
    api_error(KILN_ERR_ARG, fn, "mode %d is not KILN_INTERP_NEAREST or KILN_INTERP_LINEAR", (int)mode);
    return false;
  }
  if (mode == KILN_INTERP_NEAREST && align_corners) {
    api_error(KILN_ERR_ARG, fn, "align_corners only applies to KILN_INTERP_LINEAR (Torch's rule)");
    return false;
  }
  const graph_view *v = &input->view;
  char a[256];
  if (v->ndim != nd + 2) {
    api_error(KILN_ERR_SHAPE, fn, "expected a %d-D input [N, C, *] for %d spatial dims, got sizes %s", nd + 2, nd,
              api_fmt_sizes(a, sizeof a, v->ndim, v->sizes));
    return false;
  }
  for (int i = 0; i < nd; i++) {
    g[i].in = v->sizes[2 + i];
    g[i].given = scale_factor != NULL;
    if (scale_factor && !(scale_factor[i] > 0 && isfinite(scale_factor[i]))) {
      api_error(KILN_ERR_ARG, fn, "scale_factor %g must be finite and > 0", scale_factor[i]);
      return false;
    }
    g[i].out = size ? size[i] : (int64_t)floor((double)g[i].in * scale_factor[i]);
    g[i].scale = scale_factor ? 1 / scale_factor[i] : 0;
    if (g[i].in < 1 || g[i].out < 1) {
      api_error(KILN_ERR_SHAPE, fn, "input spatial size %lld and output size %lld must be positive", (long long)g[i].in,
                (long long)g[i].out);
      return false;
    }
  }
  return nn_check_float(input, fn, "input");
}

KILN_API kiln_tensor *kiln_interpolate(kiln_tensor *input, int nd, const int64_t *size, const double *scale_factor,
                                       kiln_interp_mode mode, bool align_corners) {
  const char *fn = "kiln_interpolate";
  interp_dim g[3];
  if (!check_interp(input, nd, size, scale_factor, mode, align_corners, g, fn)) return NULL;
  kiln_dtype dt = input->storage->dtype;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *y = nn_widen(input);
  for (int i = 0; i < nd && y; i++)
    y = mode == KILN_INTERP_NEAREST ? nearest_dim(y, 2 + i, &g[i], fn) : linear_dim(y, 2 + i, &g[i], align_corners, fn);
  y = kiln_to_dtype(y, dt);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
