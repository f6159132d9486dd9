/*
 * clip.c — kiln_clip_grad_norm_ (torch.nn.utils.clip_grad_norm_), composed
 * from public ops and lazy like them: the total norm, the clip coefficient
 * and the scaled gradients are graph values; nothing is forced.
 *
 * As Torch 1.13 computes it:
 *   norms[j] = ||g_j||_p (inf: max |g_j|), each in g_j's dtype
 *   total    = ||stack(norms)||_p (inf: max), in F32, or F64 when a grad is
 *   coef     = min(reciprocal(total + 1e-6) * max_norm, 1)  (Torch's
 *              `max_norm / x` on a tensor is reciprocal(x) * max_norm)
 *   g_j     <- g_j * coef, in place through g_j's view, read detached and
 *              written no_grad (Torch: g.detach().mul_(coef))
 * An empty grad adds nothing to the inf-norm (Torch would fail on max of
 * an empty tensor); no grads, or only empty ones, give total 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn_internal.h"

static bool check_grads(kiln_tensor *const *grads, int n, const char *fn) {
  if (api_check_list(grads, n, "grad", fn) != KILN_OK) return false;
  for (int j = 0; j < n; j++) {
    char arg[32];
    snprintf(arg, sizeof arg, "grads[%d]", j);
    kiln_tensor *g = grads[j];
    if (!api_check(g, fn, arg)) return false;
    if (!graph_is_float(g->storage->dtype)) {
      api_error(KILN_ERR_DTYPE, fn, "grad %d has dtype %s; gradients must be float tensors", j,
                graph_dtypes[g->storage->dtype].name);
      return false;
    }
    if (!ops_check_writable(g, fn)) return false;
    if (g->storage->device != grads[0]->storage->device) {
      api_device_mismatch(fn, grads[0]->storage->device, g->storage->device);
      return false;
    }
  }
  return true;
}

/* The total norm of grads [n] as a 0-d tensor of dtype (scope-owned). */
static kiln_tensor *total_norm_of(kiln_tensor *const *grads, int n, double p, kiln_dtype dtype) {
  kiln_tensor **norms = malloc(sizeof *norms * (size_t)(n + 1));
  if (!norms) {
    api_error(KILN_ERR_OOM, "kiln_clip_grad_norm_", "out of memory");
    return NULL;
  }
  int k = 0;
  for (int j = 0; j < n; j++) {
    kiln_tensor *g = kiln_detach(grads[j]);
    if (isinf(p) && kiln_numel(g) == 0) continue;
    kiln_tensor *nj = isinf(p) ? kiln_amax(kiln_abs(g), 0, NULL, false) : kiln_norm(g, p, 0, NULL, false);
    norms[k++] = kiln_to_dtype(nj, dtype);
  }
  kiln_tensor *total;
  if (k == 0) total = kiln_scalar(dtype, 0);
  else {
    kiln_tensor *s = kiln_stack(norms, k, 0);
    total = isinf(p) ? kiln_amax(s, 0, NULL, false) : kiln_norm(s, p, 0, NULL, false);
  }
  free(norms);
  return total;
}

KILN_API int kiln_clip_grad_norm_(kiln_tensor *const *grads, int n, double max_norm, double norm_type,
                                  kiln_tensor **total_norm) {
  const char *fn = "kiln_clip_grad_norm_";
  if (!check_grads(grads, n, fn)) return api_status();
  if (!(max_norm >= 0)) return api_error(KILN_ERR_ARG, fn, "max_norm = %g must be >= 0", max_norm);
  if (!(norm_type > 0)) return api_error(KILN_ERR_ARG, fn, "norm_type = %g must be > 0 (or INFINITY)", norm_type);
  kiln_dtype dtype = KILN_F32;
  for (int j = 0; j < n; j++)
    if (grads[j]->storage->dtype == KILN_F64) dtype = KILN_F64;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *total = total_norm_of(grads, n, norm_type, dtype);
  kiln_tensor *coef = kiln_minimum_scalar(kiln_mul_scalar(kiln_reciprocal(kiln_add_scalar(total, 1e-6)), max_norm), 1);
  int st = coef ? KILN_OK : api_status();
  for (int j = 0; j < n && st == KILN_OK; j++) st = ops_write_detached(grads[j], kiln_mul(kiln_detach(grads[j]), coef));
  if (st == KILN_OK && total_norm) *total_norm = kiln_keep(total);
  kiln_scope_end();
  return st;
}
