/*
 * init.c — torch.nn.init's Kaiming (He) and Xavier (Glorot)
 * initialisers and calculate_gain, in place on a tensor.
 *
 * Torch 1.13's formulas (torch/nn/init.py): for a tensor of at least 2
 * dims, receptive = prod(sizes[2:]), fan_in = sizes[1] * receptive,
 * fan_out = sizes[0] * receptive;
 *   kaiming  std = gain / sqrt(fan), fan = fan_in or fan_out (mode),
 *            gain = calculate_gain(nonlinearity, a);
 *            uniform on [-sqrt(3) std, sqrt(3) std], or normal(0, std)
 *   xavier   std = gain * sqrt(2 / (fan_in + fan_out));
 *            uniform on [-sqrt(3) std, sqrt(3) std], or normal(0, std)
 * The samples come from Kiln's generator (kiln_rand / kiln_randn in the
 * tensor's compute dtype: kiln_manual_seed makes them reproducible; the
 * values differ from Torch's), are scaled and shifted lazily and written
 * through the tensor's view as an update no gradient flows through
 * (Torch's init runs under no_grad). A tensor without elements is left
 * alone (Torch warns and does nothing).
 */
#include <math.h>

#include "nn_internal.h"

/* The gain, or NaN for an unknown nonlinearity (no error set). */
static double gain_of(kiln_nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
  case KILN_NONLINEARITY_LINEAR:
  case KILN_NONLINEARITY_SIGMOID: return 1;
  case KILN_NONLINEARITY_TANH: return 5.0 / 3;
  case KILN_NONLINEARITY_RELU: return sqrt(2.0);
  case KILN_NONLINEARITY_LEAKY_RELU: return sqrt(2.0 / (1 + param * param));
  case KILN_NONLINEARITY_SELU: return 3.0 / 4;
  }
  return NAN;
}

KILN_API double kiln_calculate_gain(kiln_nonlinearity nonlinearity, double param) {
  double g = gain_of(nonlinearity, param);
  if (isnan(g)) api_error(KILN_ERR_ARG, "kiln_calculate_gain", "unknown nonlinearity %d", (int)nonlinearity);
  return g;
}

/* Checks t (float, writable, >= 2 dims) and computes its fans. */
static bool fans(kiln_tensor *t, double *fan_in, double *fan_out, const char *fn) {
  if (!api_check(t, fn, "t") || !nn_check_float(t, fn, "t") || !ops_check_writable(t, fn)) return false;
  const graph_view *v = &t->view;
  if (v->ndim < 2) {
    char a[256];
    api_error(KILN_ERR_SHAPE, fn, "fan in and fan out cannot be computed for a tensor of fewer than 2 dims (sizes %s)",
              api_fmt_sizes(a, sizeof a, v->ndim, v->sizes));
    return false;
  }
  double receptive = 1;
  for (int d = 2; d < v->ndim; d++) receptive *= (double)v->sizes[d];
  *fan_in = (double)v->sizes[1] * receptive;
  *fan_out = (double)v->sizes[0] * receptive;
  return true;
}

/* t = uniform(-bound, bound) with bound = sqrt(3) std, or normal(0, std). */
static int fill(kiln_tensor *t, double std, bool normal, const char *fn) {
  if (graph_view_numel(&t->view) == 0) return KILN_OK;
  if (!isfinite(std)) return api_error(KILN_ERR_ARG, fn, "the standard deviation %g is not finite", std);
  kiln_dtype dt = t->storage->dtype, cd = graph_compute_dtype(dt);
  const graph_view *v = &t->view;
  kiln_scope_begin(); /* owns the samples */
  kiln_tensor *r;
  if (normal) {
    r = kiln_mul_scalar(kiln_randn(cd, v->ndim, v->sizes), std);
  } else {
    double bound = sqrt(3.0) * std;
    r = kiln_sub_scalar(kiln_mul_scalar(kiln_rand(cd, v->ndim, v->sizes), 2 * bound), bound);
  }
  r = kiln_to_device(kiln_to_dtype(r, dt), kiln_device_of(t));
  int st = r ? ops_write_detached(t, r) : api_status();
  kiln_scope_end();
  return st;
}

static int kaiming(kiln_tensor *t, double a, kiln_fan_mode mode, kiln_nonlinearity nonlinearity, bool normal,
                   const char *fn) {
  double fan_in, fan_out;
  if (!fans(t, &fan_in, &fan_out, fn)) return api_status();
  if (mode != KILN_FAN_IN && mode != KILN_FAN_OUT)
    return api_error(KILN_ERR_ARG, fn, "mode %d is not KILN_FAN_IN or KILN_FAN_OUT", (int)mode);
  double gain = gain_of(nonlinearity, a);
  if (isnan(gain)) return api_error(KILN_ERR_ARG, fn, "unknown nonlinearity %d", (int)nonlinearity);
  return fill(t, gain / sqrt(mode == KILN_FAN_IN ? fan_in : fan_out), normal, fn);
}

static int xavier(kiln_tensor *t, double gain, bool normal, const char *fn) {
  double fan_in, fan_out;
  if (!fans(t, &fan_in, &fan_out, fn)) return api_status();
  return fill(t, gain * sqrt(2.0 / (fan_in + fan_out)), normal, fn);
}

KILN_API int kiln_kaiming_uniform_(kiln_tensor *t, double a, kiln_fan_mode mode, kiln_nonlinearity nonlinearity) {
  return kaiming(t, a, mode, nonlinearity, false, "kiln_kaiming_uniform_");
}

KILN_API int kiln_kaiming_normal_(kiln_tensor *t, double a, kiln_fan_mode mode, kiln_nonlinearity nonlinearity) {
  return kaiming(t, a, mode, nonlinearity, true, "kiln_kaiming_normal_");
}

KILN_API int kiln_xavier_uniform_(kiln_tensor *t, double gain) {
  return xavier(t, gain, false, "kiln_xavier_uniform_");
}

KILN_API int kiln_xavier_normal_(kiln_tensor *t, double gain) { return xavier(t, gain, true, "kiln_xavier_normal_"); }
