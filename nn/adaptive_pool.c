/*
 * adaptive_pool.c — kiln_adaptive_avg_pool and kiln_adaptive_max_pool
 * (Torch 1.13's adaptive_{avg,max}_pool{1,2,3}d) composed from lazy graph
 * ops, one spatial dim at a time.
 *
 * Output o of a dim of input size in and output size out pools the
 * window [start, end) with Torch's formula start = floor(o * in / out),
 * end = ceil((o + 1) * in / out). Windows differ in length (K the
 * longest), so each dim is one gather of K taps per output, tap j at min(start + j,
 * end - 1) (index lists computed on the host: a GATHER node that fuses
 * into its reader, its gradient a scatter-add), the taps split off into
 * a dim of their own, then reduced over it:
 *   max  amax over the taps (a repeated last tap changes no maximum);
 *   avg  the sum of the taps weighted by w_j = (j < end - start), divided
 *        by end - start (a host-computed [out] divisor, read broadcast).
 * Both reductions are separable over a box window (the max of maxima, the
 * mean of means of equal-length rows), so pooling dim by dim is Torch's
 * pooling over the box. A dim whose output size equals its input size is
 * left alone (each window one element).
 */
#include <math.h>
#include <stdlib.h>

#include "nn_internal.h"

kiln_tensor *nn_take(kiln_tensor *x, int dim, int64_t n, const int64_t *idx, const char *fn) {
  kiln_tensor *i = ops_host_const(KILN_I64, n, idx, x, fn);
  return i ? kiln_index_select(x, dim, i) : NULL;
}

/* Window of output o: [*start, *end) (Torch's adaptive start/end). */
static void window(int64_t o, int64_t in, int64_t out, int64_t *start, int64_t *end) {
  *start = (o * in) / out;
  *end = ((o + 1) * in + out - 1) / out;
}

/* x pooled along dim (input size in) to out: [..., out, ...]. */
static kiln_tensor *pool_dim(kiln_tensor *x, int dim, int64_t out, bool max, const char *fn) {
  const graph_view *v = &x->view;
  int64_t in = v->sizes[dim], k = 0, s, e;
  if (in == out) return x;
  for (int64_t o = 0; o < out; o++) window(o, in, out, &s, &e), k = e - s > k ? e - s : k;
  int64_t *idx = malloc(sizeof *idx * (size_t)(out * k));
  double *w = malloc(sizeof *w * (size_t)(out * k)), *len = malloc(sizeof *len * (size_t)out);
  kiln_tensor *y = NULL;
  if (!idx || !w || !len) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    goto done;
  }
  for (int64_t o = 0; o < out; o++) {
    window(o, in, out, &s, &e);
    len[o] = (double)(e - s);
    for (int64_t j = 0; j < k; j++) idx[o * k + j] = s + j < e ? s + j : e - 1, w[o * k + j] = s + j < e;
  }
  int64_t sz[KILN_MAX_DIMS + 1], wsz[KILN_MAX_DIMS + 1];
  int nd = v->ndim;
  for (int d = 0, j = 0; d < nd; d++, j++) {
    sz[j] = v->sizes[d], wsz[j] = 1;
    if (d == dim) sz[j] = wsz[j] = out, sz[j + 1] = wsz[j + 1] = k, j++;
  }
  kiln_tensor *taps = kiln_view(nn_take(x, dim, out * k, idx, fn), nd + 1, sz);
  int kd = dim + 1;
  if (max) {
    y = kiln_amax(taps, 1, &kd, false);
  } else {
    kiln_dtype cd = kiln_dtype_of(x);
    kiln_tensor *wt = kiln_view(kiln_to_dtype(ops_host_const(KILN_F64, out * k, w, x, fn), cd), nd + 1, wsz);
    wsz[kd] = 1;
    kiln_tensor *lt = kiln_view(kiln_to_dtype(ops_host_const(KILN_F64, out, len, x, fn), cd), nd + 1, wsz);
    y = kiln_squeeze_dim(kiln_div(kiln_sum(kiln_mul(taps, wt), 1, &kd, true), lt), kd);
  }
done:
  free(idx), free(w), free(len);
  return y;
}

/* Checks input ([C, *] or [N, C, *] with nd spatial dims, float,
 * non-empty but for the batch) and output_size (nd values >= 1). */
static bool check_adaptive(kiln_tensor *input, int nd, const int64_t *output_size, const char *fn) {
  if (!api_check(input, fn, "input")) return false;
  if (nd < 1 || nd > 3) {
    api_error(KILN_ERR_ARG, fn, "nd %d (spatial dims) must be 1, 2 or 3", nd);
    return false;
  }
  if (!output_size) {
    api_error(KILN_ERR_ARG, fn, "output_size is NULL");
    return false;
  }
  const graph_view *v = &input->view;
  char a[256];
  api_fmt_sizes(a, sizeof a, v->ndim, v->sizes);
  if (v->ndim != nd + 1 && v->ndim != nd + 2) {
    api_error(KILN_ERR_SHAPE, fn, "expected a %d-D or %d-D (batch) input for %d spatial dims, got sizes %s", nd + 1,
              nd + 2, nd, a);
    return false;
  }
  for (int d = v->ndim - nd - 1; d < v->ndim; d++)
    if (v->sizes[d] == 0) {
      api_error(KILN_ERR_SHAPE, fn, "the channel and spatial dims must be non-empty (only the batch may be 0), got %s", a);
      return false;
    }
  for (int i = 0; i < nd; i++)
    if (output_size[i] < 1) {
      api_error(KILN_ERR_ARG, fn, "output_size %s must be positive", api_fmt_sizes(a, sizeof a, nd, output_size));
      return false;
    }
  return nn_check_float(input, fn, "input");
}

static kiln_tensor *adaptive(kiln_tensor *input, int nd, const int64_t *output_size, bool max, const char *fn) {
  if (!check_adaptive(input, nd, output_size, fn)) return NULL;
  kiln_dtype dt = input->storage->dtype;
  int lead = input->view.ndim - nd;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *y = nn_widen(input);
  for (int i = 0; i < nd && y; i++) y = pool_dim(y, lead + i, output_size[i], max, fn);
  y = kiln_to_dtype(y, dt);
  if (y == input) y = kiln_clone(input); /* every output size equals the input's: a new tensor */
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

KILN_API kiln_tensor *kiln_adaptive_avg_pool(kiln_tensor *input, int nd, const int64_t *output_size) {
  return adaptive(input, nd, output_size, false, "kiln_adaptive_avg_pool");
}

KILN_API kiln_tensor *kiln_adaptive_max_pool(kiln_tensor *input, int nd, const int64_t *output_size) {
  return adaptive(input, nd, output_size, true, "kiln_adaptive_max_pool");
}
