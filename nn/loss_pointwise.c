/*
 * loss_pointwise.c — torch.nn.functional (1.13) losses of one input and
 * one target of the same sizes, element by element, then reduced:
 * binary_cross_entropy (with and without logits), l1_loss,
 * smooth_l1_loss, huber_loss and kl_div. Each is the elementwise formula
 * Torch's ATen kernel computes, written with lazy graph ops (so it fuses
 * with its reduction and its neighbours, and kiln_grad differentiates it
 * through the ops' rules):
 *
 *   bce          -w (t max(log x, -100) + (1 - t) max(log(1 - x), -100))
 *   bce_logits   (1 - t) x + lw sp(-x),  lw = 1 + (pos_weight - 1) t,
 *                sp(-x) = log(1 + exp(-x)) written as
 *                where(x > 0, log1p(exp(-x)), log1p(exp(x)) - x), each
 *                branch reading x clamped to its side: both are finite
 *                for every x (no overflow, so no NaN through where's
 *                gradient), and the gradient at x == 0
 *                is the smooth function's (-1/2), which max(-x, 0) +
 *                log1p(exp(-|x|)), Torch's value, would lose (abs and
 *                relu have slope 0 at 0). Values equal Torch's to rounding.
 *   l1           |x - t|
 *   smooth_l1    |d| < beta ? d^2 / (2 beta) : |d| - beta / 2 (beta 0: l1)
 *   huber        |d| < delta ? d^2 / 2 : delta (|d| - delta / 2)
 *   kl_div       log_target ? exp(t) (t - x) : xlogy(t, t) - t x, with
 *                xlogy(t, t) = t log(t == 0 ? 1 : t) (0 at t == 0, no NaN
 *                through the gradient)
 *
 * F16/BF16 compute in F32 and round once, as the other losses.
 */
#include <math.h>

#include "nn_internal.h"

/* The shared checks of (input, target): arguments live, reduction known,
 * float dtypes alike, same sizes. */
static bool check_args(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction, const char *fn) {
  if (!api_check(input, fn, "input") || !api_check(target, fn, "target")) return false;
  if (!nn_check_reduction(reduction, fn)) return false;
  return nn_check_pair(input, target, "input", "target", fn);
}

/* An optional tensor (weight, pos_weight): NULL is fine unless an earlier
 * error is pending; else a float tensor that broadcasts to input's sizes
 * without growing them (Torch expands it to input's sizes). */
static bool check_optional(kiln_tensor *w, const kiln_tensor *input, const char *name, const char *fn) {
  if (!w) return kiln_last_status() == KILN_OK;
  if (!api_check(w, fn, name) || !nn_check_float(w, fn, name)) return false;
  const graph_view *wv = &w->view, *iv = &input->view;
  bool ok = wv->ndim <= iv->ndim;
  for (int d = 0; ok && d < wv->ndim; d++) {
    int64_t ws = wv->sizes[wv->ndim - 1 - d];
    ok = ws == 1 || ws == iv->sizes[iv->ndim - 1 - d];
  }
  if (ok) return true;
  char a[256], b[256];
  api_error(KILN_ERR_SHAPE, fn, "%s sizes %s do not broadcast to input sizes %s", name,
            api_fmt_sizes(a, sizeof a, wv->ndim, wv->sizes), api_fmt_sizes(b, sizeof b, iv->ndim, iv->sizes));
  return false;
}

/* loss (compute dtype) reduced, rounded to input's dtype, kept out of
 * the caller's scope. */
static kiln_tensor *finish(kiln_tensor *loss, kiln_reduction reduction, kiln_dtype dtype) {
  kiln_tensor *y = nn_reduce(loss, reduction, dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

KILN_API kiln_tensor *kiln_binary_cross_entropy(kiln_tensor *input, kiln_tensor *target, kiln_tensor *weight,
                                                kiln_reduction reduction) {
  const char *fn = "kiln_binary_cross_entropy";
  if (!check_args(input, target, reduction, fn) || !check_optional(weight, input, "weight", fn)) return NULL;
  kiln_scope_begin();
  kiln_tensor *x = nn_widen(input), *t = nn_widen(target);
  kiln_tensor *lx = kiln_maximum_scalar(kiln_log(x), -100);
  kiln_tensor *l1x = kiln_maximum_scalar(kiln_log(kiln_add_scalar(kiln_neg(x), 1)), -100);
  kiln_tensor *loss = kiln_neg(kiln_add(kiln_mul(t, lx), kiln_mul(kiln_add_scalar(kiln_neg(t), 1), l1x)));
  if (weight) loss = kiln_mul(loss, nn_widen(weight));
  return finish(loss, reduction, input->storage->dtype);
}

/* log(1 + exp(-x)) for every x without overflow (see the file comment).
 * Each branch reads x clamped to its side (xp = x > 0 ? x : 0, xn = x > 0
 * ? 0 : x), so the branch where does not take never overflows either: its
 * zero cotangent would otherwise meet exp's infinite slope (0 * inf, NaN). */
static kiln_tensor *softplus_neg(kiln_tensor *x) {
  kiln_tensor *c = kiln_gt_scalar(x, 0), *z = kiln_zeros_like(x);
  kiln_tensor *xp = kiln_where(c, x, z), *xn = kiln_where(c, z, x);
  kiln_tensor *pos = kiln_log1p(kiln_exp(kiln_neg(xp)));
  kiln_tensor *neg = kiln_sub(kiln_log1p(kiln_exp(xn)), xn);
  return kiln_where(c, pos, neg);
}

KILN_API kiln_tensor *kiln_binary_cross_entropy_with_logits(kiln_tensor *input, kiln_tensor *target,
                                                            kiln_tensor *weight, kiln_tensor *pos_weight,
                                                            kiln_reduction reduction) {
  const char *fn = "kiln_binary_cross_entropy_with_logits";
  if (!check_args(input, target, reduction, fn) || !check_optional(weight, input, "weight", fn) ||
      !check_optional(pos_weight, input, "pos_weight", fn))
    return NULL;
  kiln_scope_begin();
  kiln_tensor *x = nn_widen(input), *t = nn_widen(target), *sp = softplus_neg(x);
  if (pos_weight) sp = kiln_mul(kiln_add_scalar(kiln_mul(kiln_sub_scalar(nn_widen(pos_weight), 1), t), 1), sp);
  kiln_tensor *loss = kiln_add(kiln_sub(x, kiln_mul(t, x)), sp);
  if (weight) loss = kiln_mul(loss, nn_widen(weight));
  return finish(loss, reduction, input->storage->dtype);
}

KILN_API kiln_tensor *kiln_l1_loss(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction) {
  const char *fn = "kiln_l1_loss";
  if (!check_args(input, target, reduction, fn)) return NULL;
  kiln_scope_begin();
  return finish(kiln_abs(kiln_sub(nn_widen(input), nn_widen(target))), reduction, input->storage->dtype);
}

/* |d| < beta ? d^2 / 2 * quad : |d| * lin - off (smooth_l1: quad = 1 /
 * beta, lin = 1, off = beta / 2; huber: quad = 1, lin = delta, off =
 * delta^2 / 2). */
static kiln_tensor *piecewise(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction, double beta,
                              double quad, double lin, double off) {
  kiln_scope_begin();
  kiln_tensor *d = kiln_sub(nn_widen(input), nn_widen(target)), *a = kiln_abs(d);
  kiln_tensor *q = kiln_mul_scalar(kiln_mul(d, d), quad / 2);
  kiln_tensor *l = kiln_sub_scalar(kiln_mul_scalar(a, lin), off);
  return finish(kiln_where(kiln_lt_scalar(a, beta), q, l), reduction, input->storage->dtype);
}

KILN_API kiln_tensor *kiln_smooth_l1_loss(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction,
                                          double beta) {
  const char *fn = "kiln_smooth_l1_loss";
  if (!check_args(input, target, reduction, fn)) return NULL;
  if (!(beta >= 0) || isinf(beta)) {
    api_error(KILN_ERR_ARG, fn, "beta %g must be finite and >= 0", beta);
    return NULL;
  }
  if (beta == 0) return kiln_l1_loss(input, target, reduction);
  return piecewise(input, target, reduction, beta, 1 / beta, 1, beta / 2);
}

KILN_API kiln_tensor *kiln_huber_loss(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction,
                                      double delta) {
  const char *fn = "kiln_huber_loss";
  if (!check_args(input, target, reduction, fn)) return NULL;
  if (!(delta > 0) || isinf(delta)) {
    api_error(KILN_ERR_ARG, fn, "delta %g must be finite and > 0", delta);
    return NULL;
  }
  return piecewise(input, target, reduction, delta, 1, delta, delta * delta / 2);
}

KILN_API kiln_tensor *kiln_kl_div(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction,
                                  bool log_target) {
  const char *fn = "kiln_kl_div";
  if (!api_check(input, fn, "input") || !api_check(target, fn, "target")) return NULL;
  bool batchmean = reduction == KILN_REDUCTION_BATCHMEAN;
  if (!batchmean && !nn_check_reduction(reduction, fn)) return NULL;
  if (!nn_check_pair(input, target, "input", "target", fn)) return NULL;
  kiln_scope_begin();
  kiln_tensor *x = nn_widen(input), *t = nn_widen(target), *loss;
  if (log_target) {
    loss = kiln_mul(kiln_exp(t), kiln_sub(t, x));
  } else {
    kiln_tensor *safe = kiln_where(kiln_eq_scalar(t, 0), kiln_ones_like(t), t);
    loss = kiln_mul(t, kiln_sub(kiln_log(safe), x));
  }
  if (!batchmean) return finish(loss, reduction, input->storage->dtype);
  int64_t n = input->view.ndim ? input->view.sizes[0] : 1;
  return finish(kiln_div_scalar(kiln_sum(loss, 0, NULL, false), (double)n), KILN_REDUCTION_NONE,
                input->storage->dtype);
}
