/*
 * predicates.c — tests of values: isnan, isinf, isfinite, isclose (BOOL
 * tensors, lazy) and allclose, equal (a C bool, forcing). Compositions of
 * the comparison ops, no op of their own:
 *   isnan x    = x != x
 *   isinf x    = |x| == inf
 *   isfinite x = x - x == 0          (inf - inf and NaN - NaN are NaN)
 *   isclose    = a == b | (equal_nan & isnan a & isnan b)
 *                | (isfinite |a-b| & |a-b| <= atol + |rtol b|)
 * the last as Torch 1.13's isclose (aten/native/TensorCompare.cpp), so
 * equal infinities are close and a finite value is never close to one.
 * Integer and bool tensors hold no NaN or infinity: their isnan/isinf are
 * all false and isfinite all true, computed lazily on the tensor's device.
 */
#include <math.h>

#include "ops.h"

static bool is_float(const kiln_tensor *t) { return graph_is_float(t->storage->dtype); }

KILN_API kiln_tensor *kiln_isnan(kiln_tensor *t) {
  if (!api_check(t, "kiln_isnan", "t")) return NULL;
  return kiln_ne(t, t);
}

KILN_API kiln_tensor *kiln_isinf(kiln_tensor *t) {
  if (!api_check(t, "kiln_isinf", "t")) return NULL;
  if (!is_float(t)) return kiln_ne(t, t);
  kiln_scope_begin();
  kiln_tensor *r = kiln_keep(kiln_eq_scalar(kiln_abs(t), INFINITY));
  kiln_scope_end();
  return r;
}

KILN_API kiln_tensor *kiln_isfinite(kiln_tensor *t) {
  if (!api_check(t, "kiln_isfinite", "t")) return NULL;
  if (!is_float(t)) return kiln_eq(t, t);
  kiln_scope_begin();
  kiln_tensor *r = kiln_keep(kiln_eq_scalar(kiln_sub(t, t), 0));
  kiln_scope_end();
  return r;
}

/* isclose's checks: tensors, one dtype (Torch: "Float did not match
 * Double"), tolerances >= 0. */
static int check_close(kiln_tensor *a, kiln_tensor *b, double rtol, double atol, const char *fn) {
  if (!api_check(a, fn, "a") || !api_check(b, fn, "b")) return KILN_ERR_ARG;
  kiln_dtype da = a->storage->dtype, db = b->storage->dtype;
  if (da != db)
    return api_error(KILN_ERR_DTYPE, fn, "a dtype %s and b dtype %s differ (convert one with kiln_to_dtype)",
                     graph_dtypes[da].name, graph_dtypes[db].name);
  if (!(rtol >= 0) || !(atol >= 0)) return api_error(KILN_ERR_ARG, fn, "rtol %g and atol %g must be >= 0", rtol, atol);
  return KILN_OK;
}

/* The isclose mask (inside the caller's scope). */
static kiln_tensor *close_mask(kiln_tensor *a, kiln_tensor *b, double rtol, double atol, bool equal_nan) {
  kiln_tensor *close = kiln_eq(a, b); /* NULL: sizes that do not broadcast */
  if (!close || a->storage->dtype == KILN_BOOL) return close; /* Torch: a == b for bool */
  if (equal_nan) close = kiln_logical_or(close, kiln_logical_and(kiln_isnan(a), kiln_isnan(b)));
  kiln_tensor *err = kiln_abs(kiln_sub(a, b));
  kiln_tensor *allowed = kiln_add_scalar(kiln_abs(kiln_mul_scalar(b, rtol)), atol);
  kiln_tensor *within = kiln_logical_and(kiln_isfinite(err), kiln_le(err, allowed));
  return kiln_logical_or(close, within);
}

KILN_API kiln_tensor *kiln_isclose(kiln_tensor *a, kiln_tensor *b, double rtol, double atol, bool equal_nan) {
  if (check_close(a, b, rtol, atol, "kiln_isclose") != KILN_OK) return NULL;
  kiln_scope_begin();
  kiln_tensor *r = kiln_keep(close_mask(a, b, rtol, atol, equal_nan));
  kiln_scope_end();
  return r;
}

/* *out = all(mask) (forces); out untouched on error. mask NULL: the
 * error of the call that made it. */
static int all_true(kiln_tensor *mask, bool *out) {
  double v = 0;
  kiln_tensor *all = mask ? kiln_all(mask, 0, NULL, false) : NULL;
  int st = all ? kiln_item_f64(all, &v) : api_status();
  if (st == KILN_OK) *out = v != 0;
  return st;
}

KILN_API int kiln_allclose(kiln_tensor *a, kiln_tensor *b, double rtol, double atol, bool equal_nan, bool *out) {
  const char *fn = "kiln_allclose";
  int st = check_close(a, b, rtol, atol, fn);
  if (st != KILN_OK) return st;
  if (!out) return api_error(KILN_ERR_ARG, fn, "out is NULL");
  kiln_scope_begin();
  st = all_true(close_mask(a, b, rtol, atol, equal_nan), out);
  kiln_scope_end();
  return st;
}

KILN_API int kiln_equal(kiln_tensor *a, kiln_tensor *b, bool *out) {
  const char *fn = "kiln_equal";
  if (!api_check(a, fn, "a") || !api_check(b, fn, "b")) return KILN_ERR_ARG;
  if (!out) return api_error(KILN_ERR_ARG, fn, "out is NULL");
  if (!kiln_is_same_size(a, b)) {
    *out = false;
    return KILN_OK;
  }
  kiln_scope_begin();
  int st = all_true(kiln_eq(a, b), out);
  kiln_scope_end();
  return st;
}
