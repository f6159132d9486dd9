/*
 * combine.c — small Torch functions composed of broadcasting elementwise
 * ops, differentiable through their rules: outer (a[:, None] * b[None,
 * :]), lerp (Torch 1.13's two-sided formula, exact at weight 0 and 1:
 *   |w| < 0.5 ? start + w (end - start) : end - (end - start)(1 - w)
 * computed in F32 for F16/BF16 and rounded once, as Torch's opmath), and
 * one_hot (index[..., None] == arange(C), I64). one_hot forces its index
 * to check the classes, as Torch does.
 */
#include <math.h>

#include "ops.h"

KILN_API kiln_tensor *kiln_outer(kiln_tensor *a, kiln_tensor *b) {
  const char *fn = "kiln_outer";
  if (!api_check(a, fn, "a") || !api_check(b, fn, "b")) return NULL;
  if (a->view.ndim != 1 || b->view.ndim != 1) {
    api_error(KILN_ERR_SHAPE, fn, "expects 1-d a and b, got %d-d and %d-d", a->view.ndim, b->view.ndim);
    return NULL;
  }
  kiln_scope_begin();
  kiln_tensor *r = kiln_keep(kiln_mul(kiln_unsqueeze(a, 1), kiln_unsqueeze(b, 0)));
  kiln_scope_end();
  return r;
}

/* lerp's dtype rule (Torch): float start; end (and a weight tensor) of
 * start's dtype. */
static bool check_lerp(kiln_tensor *start, kiln_tensor *end, kiln_tensor *weight, bool has_weight, const char *fn) {
  if (!api_check(start, fn, "start") || !api_check(end, fn, "end")) return false;
  if (has_weight && !api_check(weight, fn, "weight")) return false;
  kiln_dtype d = start->storage->dtype;
  if (!graph_is_float(d)) {
    api_error(KILN_ERR_DTYPE, fn, "start must be a float tensor, got %s", graph_dtypes[d].name);
    return false;
  }
  kiln_tensor *other[2] = {end, weight};
  const char *name[2] = {"end", "weight"};
  for (int i = 0; i < 2; i++)
    if (other[i] && other[i]->storage->dtype != d) {
      api_error(KILN_ERR_DTYPE, fn, "%s dtype %s differs from start dtype %s", name[i],
                graph_dtypes[other[i]->storage->dtype].name, graph_dtypes[d].name);
      return false;
    }
  return true;
}

/* F16/BF16 widened to F32 (in the caller's scope). */
static kiln_tensor *widen(kiln_tensor *t) {
  kiln_dtype d = t->storage->dtype;
  return d == KILN_F16 || d == KILN_BF16 ? kiln_to_dtype(t, KILN_F32) : t;
}

/* lerp of widened tensors; weight w, or the scalar ws when w is NULL. */
static kiln_tensor *lerp_body(kiln_tensor *s, kiln_tensor *e, kiln_tensor *w, double ws) {
  kiln_tensor *diff = kiln_sub(e, s);
  if (!w) {
    if (fabs(ws) < 0.5) return kiln_add(s, kiln_mul_scalar(diff, ws));
    return kiln_sub(e, kiln_mul_scalar(diff, 1 - ws));
  }
  kiln_tensor *lo = kiln_add(s, kiln_mul(w, diff));
  kiln_tensor *hi = kiln_sub(e, kiln_mul(diff, kiln_add_scalar(kiln_neg(w), 1)));
  return kiln_where(kiln_lt_scalar(kiln_abs(w), 0.5), lo, hi);
}

/* has_weight: kiln_lerp (weight tensor), else kiln_lerp_scalar (ws). */
static kiln_tensor *lerp(kiln_tensor *start, kiln_tensor *end, kiln_tensor *weight, bool has_weight, double ws,
                         const char *fn) {
  if (!check_lerp(start, end, weight, has_weight, fn)) return NULL;
  kiln_scope_begin();
  kiln_tensor *y = lerp_body(widen(start), widen(end), weight ? widen(weight) : NULL, ws);
  kiln_tensor *r = kiln_keep(kiln_to_dtype(y, start->storage->dtype));
  kiln_scope_end();
  return r;
}

KILN_API kiln_tensor *kiln_lerp(kiln_tensor *start, kiln_tensor *end, kiln_tensor *weight) {
  return lerp(start, end, weight, true, 0, "kiln_lerp");
}

KILN_API kiln_tensor *kiln_lerp_scalar(kiln_tensor *start, kiln_tensor *end, double weight) {
  return lerp(start, end, NULL, false, weight, "kiln_lerp_scalar");
}

/* one_hot's class check (forces index): every value in [0, *n); *n = -1
 * becomes max + 1. */
static bool check_classes(kiln_tensor *index, int64_t *n, const char *fn) {
  int64_t numel = graph_view_numel(&index->view);
  if (numel == 0) {
    if (*n >= 0) return true;
    api_error(KILN_ERR_ARG, fn, "cannot infer the number of classes from an empty index");
    return false;
  }
  double lo = 0, hi = 0;
  kiln_tensor *mn = kiln_amin(index, 0, NULL, false), *mx = kiln_amax(index, 0, NULL, false);
  bool ok = mn && mx && kiln_item_f64(mn, &lo) == KILN_OK && kiln_item_f64(mx, &hi) == KILN_OK;
  if (!ok) return false;
  if (lo < 0) {
    api_error(KILN_ERR_INDEX, fn, "class value %lld is negative", (long long)lo);
    return false;
  }
  if (*n < 0) *n = (int64_t)hi + 1;
  if (hi >= (double)*n) {
    api_error(KILN_ERR_INDEX, fn, "class value %lld is not smaller than num_classes %lld", (long long)hi,
              (long long)*n);
    return false;
  }
  return true;
}

KILN_API kiln_tensor *kiln_one_hot(kiln_tensor *index, int64_t num_classes) {
  const char *fn = "kiln_one_hot";
  if (!api_check(index, fn, "index")) return NULL;
  kiln_dtype d = index->storage->dtype;
  if (d != KILN_I64 && d != KILN_I32) {
    api_error(KILN_ERR_DTYPE, fn, "index must be i64 or i32, got %s", graph_dtypes[d].name);
    return NULL;
  }
  if (num_classes < -1) {
    api_error(KILN_ERR_ARG, fn, "num_classes %lld must be >= 0, or -1 (inferred)", (long long)num_classes);
    return NULL;
  }
  if (index->view.ndim >= KILN_MAX_DIMS) {
    api_error(KILN_ERR_SHAPE, fn, "index has %d dims: the result would have more than %d", index->view.ndim,
              KILN_MAX_DIMS);
    return NULL;
  }
  kiln_scope_begin();
  kiln_tensor *r = NULL;
  if (check_classes(index, &num_classes, fn)) {
    kiln_tensor *classes = kiln_arange(KILN_I64, 0, (double)num_classes, 1);
    if (classes && index->storage->device != KILN_CPU) classes = kiln_to_device(classes, index->storage->device);
    r = kiln_to_dtype(kiln_eq(kiln_unsqueeze(index, -1), classes), KILN_I64);
  }
  kiln_keep(r);
  kiln_scope_end();
  return r;
}
