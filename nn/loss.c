/*
 * loss.c — torch.nn.functional (1.13) losses composed from lazy graph
 * ops: nll_loss, cross_entropy (log_softmax + nll, with label smoothing)
 * and mse_loss, with a reduction (none, mean, sum).
 *
 * nll_loss is a gather of -log_probs at the target class along the class
 * dim (dim 1, or dim 0 for an unbatched [C] input): a GATHER node, which
 * fuses into the reduction that follows, and whose gradient is a
 * scatter-add into the class dim (the existing rule). The target is
 * forced and range-checked when the loss is called, as the index ops do
 * (ops_index_check): an out-of-range class is KILN_ERR_INDEX, nothing is
 * recorded and the target stays usable. No class weights and no
 * ignore_index: mean divides by the number of targets.
 *
 * cross_entropy with label smoothing e over C classes is Torch's
 *   (1 - e) * nll(lp, target) + e / C * (-sum_c lp_c),   lp = log_softmax
 * each term reduced as asked (the reductions are linear, so this is the
 * reduction of the per-target sum), computed from the row maximum and
 * row sums without writing lp out (cross_entropy_terms): one row kernel
 * per block of targets. Floats only; F16/BF16 compute in F32 and the
 * loss rounds once to the input's dtype.
 */
#include <math.h>

#include "nn_internal.h"

bool nn_check_reduction(kiln_reduction r, const char *fn) {
  if (r == KILN_REDUCTION_NONE || r == KILN_REDUCTION_MEAN || r == KILN_REDUCTION_SUM) return true;
  api_error(KILN_ERR_ARG, fn, "reduction %d is not KILN_REDUCTION_NONE, _MEAN or _SUM", (int)r);
  return false;
}

kiln_tensor *nn_reduce(kiln_tensor *loss, kiln_reduction r, kiln_dtype dtype) {
  if (r == KILN_REDUCTION_MEAN) loss = kiln_mean(loss, 0, NULL, false);
  if (r == KILN_REDUCTION_SUM) loss = kiln_sum(loss, 0, NULL, false);
  return kiln_to_dtype(loss, dtype);
}

/* The class dim of an input of scores or log-probabilities x [C] or
 * [N, C, d1...]; checks x's rank and dtype and that target (I64) has
 * x's sizes without the class dim, then forces target and checks its
 * classes. -1 with the error set. Records nothing. */
static int check_target(const kiln_tensor *x, kiln_tensor *target, const char *xname, const char *fn) {
  if (!nn_check_float(x, fn, xname)) return -1;
  const graph_view *xv = &x->view, *tv = &target->view;
  char a[256], b[256], c[256];
  if (xv->ndim == 0) {
    api_error(KILN_ERR_SHAPE, fn, "%s is 0-d; expected [C], [N, C] or [N, C, d1, ...]", xname);
    return -1;
  }
  kiln_dtype td = target->storage->dtype;
  if (td != KILN_I64) {
    api_error(KILN_ERR_DTYPE, fn, "target dtype %s is not i64 (class indices are Long in Torch)", graph_dtypes[td].name);
    return -1;
  }
  int cd = xv->ndim >= 2 ? 1 : 0;
  int64_t want[KILN_MAX_DIMS];
  int nw = 0;
  for (int d = 0; d < xv->ndim; d++)
    if (d != cd) want[nw++] = xv->sizes[d];
  bool ok = tv->ndim == nw;
  for (int d = 0; ok && d < nw; d++) ok = tv->sizes[d] == want[d];
  if (!ok) {
    api_error(KILN_ERR_SHAPE, fn, "target sizes %s do not match %s sizes %s (expected %s: dim %d removed)",
              api_fmt_sizes(a, sizeof a, tv->ndim, tv->sizes), xname, api_fmt_sizes(b, sizeof b, xv->ndim, xv->sizes),
              api_fmt_sizes(c, sizeof c, nw, want), cd);
    return -1;
  }
  if (!ops_index_check(target, fn, cd, xv->sizes[cd], false)) return -1;
  return cd;
}

/* x[target] along class dim cd: x's sizes with the class dim 1 (x and
 * target checked by check_target). */
static kiln_tensor *at_target(kiln_tensor *x, kiln_tensor *target, int cd, const char *fn) {
  /* target read as x's sizes with the class dim 1 (stride 0 there) */
  graph_view iv = {.ndim = x->view.ndim, .offset = target->view.offset};
  for (int d = 0, k = 0; d < iv.ndim; d++) {
    iv.sizes[d] = d == cd ? 1 : target->view.sizes[k];
    iv.strides[d] = d == cd ? 0 : target->view.strides[k++];
  }
  return ops_gather(x, &x->view, cd, target, &iv, fn);
}

/* The per-target cross entropy of scores x (a float compute dtype) along
 * class dim cd of size c, with label smoothing e, without writing
 * log_softmax [N, C] out: with m the row maximum, xm = x - m and
 * lse = log(sum_c exp(xm)), log_softmax = xm - lse, so
 *   nll = lse - xm[t],  -sum_c log_softmax_c = c * lse - sum_c xm_c,
 *   (1 - e) * nll + e / c * (c * lse - sum_c xm_c)
 *     = lse - (1 - e) * xm[t] - e / c * sum_c xm_c.
 * Everything keeps the class dim (size 1) until the end, so the
 * elementwise tail fuses into the row reductions' kernel. The result
 * does not depend on m (its gradient through m is exactly 0): m is
 * detached, as in softmax. Every term is of the size of the differences
 * xm, as Torch's, so large logits lose no precision. */
static kiln_tensor *cross_entropy_terms(kiln_tensor *x, kiln_tensor *target, int cd, int64_t c, double e,
                                        const char *fn) {
  kiln_tensor *m = kiln_detach(kiln_amax(x, 1, &cd, true));
  kiln_tensor *xm = kiln_sub(x, m);
  kiln_tensor *lse = kiln_log(kiln_sum(kiln_exp(xm), 1, &cd, true));
  kiln_tensor *xt = kiln_sub(at_target(x, target, cd, fn), m), *loss;
  if (e == 0) {
    loss = kiln_sub(lse, xt);
  } else {
    loss = kiln_sub(lse, kiln_mul_scalar(xt, 1 - e));
    loss = kiln_sub(loss, kiln_mul_scalar(kiln_sum(xm, 1, &cd, true), e / (double)c));
  }
  return kiln_select(loss, cd, 0);
}

KILN_API kiln_tensor *kiln_nll_loss(kiln_tensor *log_probs, kiln_tensor *target, kiln_reduction reduction) {
  const char *fn = "kiln_nll_loss";
  if (!api_check(log_probs, fn, "log_probs") || !api_check(target, fn, "target")) return NULL;
  if (!nn_check_reduction(reduction, fn)) return NULL;
  int cd = check_target(log_probs, target, "log_probs", fn);
  if (cd < 0) return NULL;
  kiln_scope_begin();
  kiln_tensor *y = nn_reduce(nn_widen(kiln_neg(kiln_select(at_target(log_probs, target, cd, fn), cd, 0))), reduction, log_probs->storage->dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

KILN_API kiln_tensor *kiln_cross_entropy(kiln_tensor *logits, kiln_tensor *target, kiln_reduction reduction,
                                         double label_smoothing) {
  const char *fn = "kiln_cross_entropy";
  if (!api_check(logits, fn, "logits") || !api_check(target, fn, "target")) return NULL;
  if (!nn_check_reduction(reduction, fn)) return NULL;
  double e = label_smoothing;
  if (!(e >= 0 && e <= 1)) {
    api_error(KILN_ERR_ARG, fn, "label_smoothing %g must be in [0, 1]", e);
    return NULL;
  }
  int cd = check_target(logits, target, "logits", fn);
  if (cd < 0) return NULL;
  int64_t c = logits->view.sizes[cd];
  kiln_scope_begin();
  kiln_tensor *loss = cross_entropy_terms(nn_widen(logits), target, cd, c, e, fn);
  kiln_tensor *y = nn_reduce(loss, reduction, logits->storage->dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

bool nn_check_pair(const kiln_tensor *input, const kiln_tensor *target, const char *a_name, const char *b_name,
                   const char *fn) {
  if (!nn_check_float(input, fn, a_name) || !nn_check_float(target, fn, b_name)) return false;
  kiln_dtype dtype = input->storage->dtype;
  if (target->storage->dtype != dtype) {
    api_error(KILN_ERR_DTYPE, fn, "%s dtype %s and %s dtype %s differ (convert one with kiln_to_dtype)", a_name,
              graph_dtypes[dtype].name, b_name, graph_dtypes[target->storage->dtype].name);
    return false;
  }
  const graph_view *iv = &input->view, *tv = &target->view;
  bool same = iv->ndim == tv->ndim;
  for (int d = 0; same && d < iv->ndim; d++) same = iv->sizes[d] == tv->sizes[d];
  if (same) return true;
  char a[256], b[256];
  api_error(KILN_ERR_SHAPE, fn, "%s sizes %s and %s sizes %s differ", a_name,
            api_fmt_sizes(a, sizeof a, iv->ndim, iv->sizes), b_name, api_fmt_sizes(b, sizeof b, tv->ndim, tv->sizes));
  return false;
}

KILN_API kiln_tensor *kiln_mse_loss(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction) {
  const char *fn = "kiln_mse_loss";
  if (!api_check(input, fn, "input") || !api_check(target, fn, "target")) return NULL;
  if (!nn_check_reduction(reduction, fn)) return NULL;
  if (!nn_check_pair(input, target, "input", "target", fn)) return NULL;
  kiln_dtype dtype = input->storage->dtype;
  kiln_scope_begin();
  kiln_tensor *d = kiln_sub(nn_widen(input), nn_widen(target));
  kiln_tensor *y = nn_reduce(kiln_mul(d, d), reduction, dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
