/*
 * reduce_composed.c — reductions composed from graph ops: kiln_logsumexp, kiln_var,
 * kiln_std and kiln_norm.
 *
 * Each records keepdim reductions and elementwise ops over them; over the
 * last dims (rows) the fusion pass makes each one kernel (passes/fuse.c).
 * logsumexp subtracts the maximum first (an infinite maximum is replaced
 * by 0, so all -inf gives -inf and any +inf gives +inf, as Torch); var is
 * two-pass (the mean, then the sum of squared deviations from it), both
 * accumulated in F64 by the reduction kernels. F16/BF16 compute in F32
 * (norm: all floats in F64) and round once at the end. The roots and
 * powers of std and norm are masked at 0 (pow_zero_masked) so that their
 * gradient there is 0, as Torch's, not NaN.
 */
#include <math.h>

#include "ops.h"

/* What a composed reduction needs to know about its dims. */
typedef struct red {
  uint32_t mask;
  int ndims; /* explicit dims for the kiln_* calls; 0 for a 0-d tensor */
  int dims[KILN_MAX_DIMS];
  int64_t count; /* elements per output element */
} red;

static bool red_init(const kiln_tensor *t, int ndims, const int *dims, red *r, const char *fn) {
  if (!ops_reduce_mask(t, ndims, dims, &r->mask, fn)) return false;
  r->ndims = 0;
  r->count = 1;
  for (int d = 0; d < t->view.ndim; d++)
    if (r->mask & (1u << d)) {
      r->dims[r->ndims++] = d;
      r->count *= t->view.sizes[d];
    }
  return true;
}

static bool check_float(const kiln_tensor *t, const char *fn) {
  kiln_dtype d = t->storage->dtype;
  if (graph_is_float(d)) return true;
  api_error(KILN_ERR_DTYPE, fn, "needs a float dtype, got %s (convert with kiln_to_dtype)", graph_dtypes[d].name);
  return false;
}

/* The keepdim result y without the reduced dims unless keepdim. */
static kiln_tensor *finish(kiln_tensor *y, const kiln_tensor *t, const red *r, bool keepdim) {
  if (keepdim || !y) return y;
  int64_t sizes[KILN_MAX_DIMS];
  int nd = 0;
  for (int d = 0; d < t->view.ndim; d++)
    if (!(r->mask & (1u << d))) sizes[nd++] = t->view.sizes[d];
  return kiln_reshape(y, nd, sizes);
}

/* Sizes of the keepdim result into sizes [t's ndim]. */
static void kept_sizes(const kiln_tensor *t, const red *r, int64_t *sizes) {
  for (int d = 0; d < t->view.ndim; d++) sizes[d] = (r->mask & (1u << d)) ? 1 : t->view.sizes[d];
}

/* Every public function below runs its composition in a scope of its own
 * and keeps only the result (moved to the caller's scope, if any). */
static kiln_tensor *kept(kiln_tensor *y) {
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* m = amax(x); m0 = m where finite, else 0; log(sum(exp(x - m0))) + m0. */
KILN_API kiln_tensor *kiln_logsumexp(kiln_tensor *t, int ndims, const int *dims, bool keepdim) {
  const char *fn = "kiln_logsumexp";
  red r;
  if (!api_check(t, fn, "t") || !red_init(t, ndims, dims, &r, fn)) return NULL;
  kiln_dtype in = t->storage->dtype, out = graph_is_float(in) ? in : graph_default_float();
  kiln_scope_begin();
  kiln_tensor *y;
  if (r.count == 0) { /* the sum of no exponentials is 0: log gives -inf */
    int64_t sizes[KILN_MAX_DIMS];
    kept_sizes(t, &r, sizes);
    y = kiln_full(out, t->view.ndim, sizes, -INFINITY);
  } else {
    kiln_tensor *x = kiln_to_dtype(t, graph_compute_dtype(out));
    kiln_tensor *m = kiln_amax(x, r.ndims, r.dims, true);
    kiln_tensor *inf = kiln_eq_scalar(kiln_abs(m), INFINITY);
    /* detached: the result's gradient through the shift m0 is exactly 0 */
    kiln_tensor *m0 = kiln_detach(kiln_where(inf, kiln_scalar(graph_compute_dtype(out), 0), m));
    kiln_tensor *s = kiln_sum(kiln_exp(kiln_sub(x, m0)), r.ndims, r.dims, true);
    y = kiln_to_dtype(kiln_add(kiln_log(s), m0), out);
  }
  return kept(finish(y, t, &r, keepdim));
}

/* pow(x, p) (sqrt(x) when root) where x != 0, and the constant pow(0, p)
 * where x == 0: the same values, but no gradient flows at 0, where the
 * derivative of x^p (p < 1) is infinite and the chain rule would
 * multiply it by a zero (0 * inf = NaN). This is Torch's masking in the
 * backward of norm and std ("the gradient at 0 is 0"). x is never -0
 * here (sums of squares, |t|^p). */
static kiln_tensor *pow_zero_masked(kiln_tensor *x, double p, bool root) {
  kiln_dtype dt = kiln_dtype_of(x);
  kiln_tensor *zero = kiln_eq_scalar(x, 0);
  kiln_tensor *safe = kiln_where(zero, kiln_scalar(dt, 1), x);
  kiln_tensor *y = root ? kiln_sqrt(safe) : kiln_pow_scalar(safe, p);
  return kiln_where(zero, kiln_scalar(dt, pow(0, p)), y);
}

/* sum((x - mean(x))^2) / max(count - correction, 0), in the compute dtype. */
static kiln_tensor *variance(kiln_tensor *t, int ndims, const int *dims, int correction, bool keepdim, bool root,
                             const char *fn) {
  red r;
  if (!api_check(t, fn, "t") || !red_init(t, ndims, dims, &r, fn) || !check_float(t, fn)) return NULL;
  kiln_dtype dtype = t->storage->dtype;
  double divisor = fmax((double)r.count - (double)correction, 0);
  kiln_scope_begin();
  kiln_tensor *x = kiln_to_dtype(t, graph_compute_dtype(dtype));
  kiln_tensor *xc = kiln_sub(x, kiln_mean(x, r.ndims, r.dims, true));
  kiln_tensor *v = kiln_div_scalar(kiln_sum(kiln_mul(xc, xc), r.ndims, r.dims, true), divisor);
  if (root) v = pow_zero_masked(v, 0.5, true); /* std of a constant slice: gradient 0, as Torch */
  return kept(finish(kiln_to_dtype(v, dtype), t, &r, keepdim));
}

KILN_API kiln_tensor *kiln_var(kiln_tensor *t, int ndims, const int *dims, int correction, bool keepdim) {
  return variance(t, ndims, dims, correction, keepdim, false, "kiln_var");
}
KILN_API kiln_tensor *kiln_std(kiln_tensor *t, int ndims, const int *dims, int correction, bool keepdim) {
  return variance(t, ndims, dims, correction, keepdim, true, "kiln_std");
}

/* Vector p-norm over dims, computed in F64 (squares and powers of large
 * F32 values do not overflow) and rounded to t's dtype. */
KILN_API kiln_tensor *kiln_norm(kiln_tensor *t, double p, int ndims, const int *dims, bool keepdim) {
  const char *fn = "kiln_norm";
  red r;
  if (!api_check(t, fn, "t") || !red_init(t, ndims, dims, &r, fn) || !check_float(t, fn)) return NULL;
  if (isnan(p)) {
    api_error(KILN_ERR_ARG, fn, "p is NaN");
    return NULL;
  }
  if (isinf(p) && r.count == 0) {
    api_error(KILN_ERR_SHAPE, fn, "the %s-norm of an empty reduction is undefined (no identity)",
              p > 0 ? "inf" : "-inf");
    return NULL;
  }
  kiln_dtype dtype = t->storage->dtype;
  kiln_scope_begin();
  kiln_tensor *x = kiln_to_dtype(t, KILN_F64), *a = kiln_abs(x), *y;
  if (isinf(p)) y = p > 0 ? kiln_amax(a, r.ndims, r.dims, true) : kiln_amin(a, r.ndims, r.dims, true);
  else if (p == 0) y = kiln_sum(kiln_to_dtype(kiln_ne_scalar(x, 0), KILN_F64), r.ndims, r.dims, true);
  else if (p == 1) y = kiln_sum(a, r.ndims, r.dims, true);
  else if (p == 2) y = pow_zero_masked(kiln_sum(kiln_mul(x, x), r.ndims, r.dims, true), 0.5, true);
  else y = pow_zero_masked(kiln_sum(pow_zero_masked(a, p, false), r.ndims, r.dims, true), 1 / p, false);
  return kept(finish(kiln_to_dtype(y, dtype), t, &r, keepdim));
}
