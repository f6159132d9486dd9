/*
 * group_norm.c — kiln_group_norm and kiln_instance_norm: Torch 1.13's
 * nn.functional.group_norm and instance_norm (without running stats) as
 * compositions of reductions and elementwise ops, so they fuse and
 * kiln_grad differentiates them w.r.t. input, weight and bias through the
 * ops' own rules.
 *
 * input [N, C, *] is read as [N, G, C / G * prod(*)] (a view of a
 * contiguous input, else one lazy copy) and each of the N * G rows is
 * normalized as layer_norm does (two passes: mean, then the mean of the
 * squared deviations — the biased variance):
 *   xc = x - mean(x);  y = xc * rsqrt(mean(xc * xc) + eps)
 * then read back as input's sizes and scaled per channel, y * weight[c] +
 * bias[c] (weight, bias [C] read as [1, C, 1, ...]). Instance norm is
 * group norm with one channel per group (G = C). F16/BF16 compute in F32
 * and round once to the input's dtype.
 */
#include <math.h>

#include "nn_internal.h"

/* weight or bias (may be NULL): a float tensor of C elements. */
static bool check_param(kiln_tensor *p, int64_t c, const char *name, const char *fn) {
  if (!p) return true;
  if (!api_check(p, fn, name) || !nn_check_float(p, fn, name)) return false;
  if (p->view.ndim == 1 && p->view.sizes[0] == c) return true;
  char a[256];
  api_error(KILN_ERR_SHAPE, fn, "%s has sizes %s; expected [%lld] (the channels, dim 1 of input)", name,
            api_fmt_sizes(a, sizeof a, p->view.ndim, p->view.sizes), (long long)c);
  return false;
}

static bool check_input(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, double eps, const char *fn) {
  if (!api_check(input, fn, "input")) return false;
  /* NULL weight or bias is allowed, but not after an earlier error */
  if ((!weight || !bias) && kiln_last_status() != KILN_OK) return false;
  const graph_view *v = &input->view;
  if (v->ndim < 2) {
    char a[256];
    api_error(KILN_ERR_SHAPE, fn, "input must have at least 2 dims [N, C, *], got sizes %s",
              api_fmt_sizes(a, sizeof a, v->ndim, v->sizes));
    return false;
  }
  if (!nn_check_float(input, fn, "input")) return false;
  if (!isfinite(eps) || eps < 0) {
    api_error(KILN_ERR_ARG, fn, "eps %g must be finite and >= 0", eps);
    return false;
  }
  return check_param(weight, v->sizes[1], "weight", fn) && check_param(bias, v->sizes[1], "bias", fn);
}

/* The normalization of input (checked) in g groups, then the affine. */
static kiln_tensor *normalize(kiln_tensor *input, int64_t g, kiln_tensor *weight, kiln_tensor *bias, double eps) {
  const graph_view *v = &input->view;
  int nd = v->ndim;
  int64_t n = v->sizes[0], c = v->sizes[1], per = 1;
  for (int d = 1; d < nd; d++) per *= v->sizes[d];
  kiln_dtype dt = input->storage->dtype;
  kiln_scope_begin(); /* owns the intermediates */
  int last = 2;
  kiln_tensor *x = kiln_reshape(nn_widen(input), 3, (int64_t[]){n, g, g ? per / g : 0});
  kiln_tensor *xc = kiln_sub(x, kiln_mean(x, 1, &last, true));
  kiln_tensor *var = kiln_mean(kiln_mul(xc, xc), 1, &last, true);
  kiln_tensor *y = kiln_reshape(kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, eps))), nd, v->sizes);
  int64_t cs[KILN_MAX_DIMS];
  for (int d = 0; d < nd; d++) cs[d] = d == 1 ? c : 1;
  if (weight) y = kiln_mul(y, kiln_reshape(nn_widen(weight), nd, cs));
  if (bias) y = kiln_add(y, kiln_reshape(nn_widen(bias), nd, cs));
  y = kiln_to_dtype(y, dt);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

KILN_API kiln_tensor *kiln_group_norm(kiln_tensor *input, int64_t num_groups, kiln_tensor *weight,
                                      kiln_tensor *bias, double eps) {
  const char *fn = "kiln_group_norm";
  if (!check_input(input, weight, bias, eps, fn)) return NULL;
  int64_t c = input->view.sizes[1];
  if (num_groups < 1 || c % num_groups != 0) {
    api_error(KILN_ERR_ARG, fn, "num_groups %lld must be >= 1 and divide the %lld channels", (long long)num_groups,
              (long long)c);
    return NULL;
  }
  return normalize(input, num_groups, weight, bias, eps);
}

KILN_API kiln_tensor *kiln_instance_norm(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, double eps) {
  const char *fn = "kiln_instance_norm";
  if (!check_input(input, weight, bias, eps, fn)) return NULL;
  const graph_view *v = &input->view;
  int64_t spatial = 1;
  for (int d = 2; d < v->ndim; d++) spatial *= v->sizes[d];
  if (v->ndim < 3 || spatial == 1) {
    char a[256];
    api_error(KILN_ERR_SHAPE, fn, "expected more than 1 spatial element per channel, got input sizes %s",
              api_fmt_sizes(a, sizeof a, v->ndim, v->sizes));
    return NULL;
  }
  return normalize(input, v->sizes[1], weight, bias, eps);
}
