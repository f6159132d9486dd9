/*
 * lr_schedule.c — learning-rate schedules as pure functions of the step
 * (torch.optim.lr_scheduler's StepLR, CosineAnnealingLR and LinearLR, by
 * their closed forms): the caller passes the result to
 * kiln_optimizer_set_lr before each step, so a schedule holds no state
 * and a restored run resumes from its step count alone. Torch's
 * schedulers update the rate recursively (StepLR multiplies by gamma,
 * CosineAnnealingLR applies a ratio of cosines); the closed forms agree
 * with them to rounding (tests/python/test_optim_torch.py compares every
 * step).
 */
#include <math.h>

#include "nn_internal.h"

#define PI 3.14159265358979323846

/* base_lr >= 0 and step >= 0; else NaN with KILN_ERR_ARG. */
static bool check_common(double base_lr, int64_t step, const char *fn) {
  if (!(base_lr >= 0) || isinf(base_lr)) {
    api_error(KILN_ERR_ARG, fn, "base_lr %g must be finite and >= 0", base_lr);
    return false;
  }
  if (step < 0) {
    api_error(KILN_ERR_ARG, fn, "step %lld must be >= 0", (long long)step);
    return false;
  }
  return true;
}

KILN_API double kiln_lr_step(double base_lr, int64_t step, int64_t step_size, double gamma) {
  const char *fn = "kiln_lr_step";
  if (!check_common(base_lr, step, fn)) return NAN;
  if (step_size < 1 || !isfinite(gamma)) {
    api_error(KILN_ERR_ARG, fn, "step_size %lld must be >= 1 and gamma %g finite", (long long)step_size, gamma);
    return NAN;
  }
  return base_lr * pow(gamma, (double)(step / step_size));
}

KILN_API double kiln_lr_cosine(double base_lr, int64_t step, int64_t t_max, double eta_min) {
  const char *fn = "kiln_lr_cosine";
  if (!check_common(base_lr, step, fn)) return NAN;
  if (t_max < 1 || !isfinite(eta_min)) {
    api_error(KILN_ERR_ARG, fn, "t_max %lld must be >= 1 and eta_min %g finite", (long long)t_max, eta_min);
    return NAN;
  }
  return eta_min + (base_lr - eta_min) * (1 + cos(PI * (double)step / (double)t_max)) / 2;
}

KILN_API double kiln_lr_linear(double base_lr, int64_t step, double start_factor, double end_factor,
                               int64_t total_iters) {
  const char *fn = "kiln_lr_linear";
  if (!check_common(base_lr, step, fn)) return NAN;
  if (!(start_factor > 0 && start_factor <= 1) || !(end_factor >= 0 && end_factor <= 1)) {
    api_error(KILN_ERR_ARG, fn, "start_factor %g must be in (0, 1] and end_factor %g in [0, 1]", start_factor,
              end_factor);
    return NAN;
  }
  if (total_iters < 1) {
    api_error(KILN_ERR_ARG, fn, "total_iters %lld must be >= 1", (long long)total_iters);
    return NAN;
  }
  double t = (double)(step < total_iters ? step : total_iters);
  return base_lr * (start_factor + (end_factor - start_factor) * t / (double)total_iters);
}
