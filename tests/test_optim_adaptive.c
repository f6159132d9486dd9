/*
 * test_optim_adaptive.c — kiln_rmsprop and kiln_adagrad (nn/optim.c)
 * against references written here in double (Torch's update rules, step
 * by step, every option), their state buffers, one fused kernel per
 * parameter update (as SGD's and Adam's: test_optim.c), the creation
 * errors; and the learning-rate schedules (nn/lr_schedule.c) against
 * their closed forms and Torch's recursive updates.
 * tests/python/test_optim_torch.py compares both with torch.optim.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "nn_internal.h"
#include "rt_internal.h"
#include "test_util.h"

#define PI 3.14159265358979323846

enum { N = 6, STEPS = 5 };

typedef struct opt_cfg {
  bool adagrad;
  double lr, alpha, eps, wd, mu, lr_decay, init;
  bool centered;
} opt_cfg;

static kiln_optimizer *make(const opt_cfg *c, kiln_tensor *p) {
  return c->adagrad ? kiln_adagrad(&p, 1, c->lr, c->lr_decay, c->wd, c->init, c->eps)
                    : kiln_rmsprop(&p, 1, c->lr, c->alpha, c->eps, c->wd, c->mu, c->centered);
}

/* One reference step of parameter p with gradient g0 at step t (from 1);
 * s, b, ga: the state. */
static void ref_step(const opt_cfg *c, int t, double *p, const double *g0, double *s, double *b, double *ga) {
  for (int i = 0; i < N; i++) {
    double g = g0[i] + c->wd * p[i];
    if (c->adagrad) {
      double clr = c->lr / (1 + (t - 1) * c->lr_decay);
      s[i] += g * g;
      p[i] -= clr * g / (sqrt(s[i]) + c->eps);
      continue;
    }
    s[i] = c->alpha * s[i] + (1 - c->alpha) * g * g;
    double avg;
    if (c->centered) {
      ga[i] = c->alpha * ga[i] + (1 - c->alpha) * g;
      avg = sqrt(s[i] - ga[i] * ga[i]) + c->eps;
    } else {
      avg = sqrt(s[i]) + c->eps;
    }
    if (c->mu > 0) {
      b[i] = c->mu * b[i] + g / avg;
      p[i] -= c->lr * b[i];
    } else {
      p[i] -= c->lr * g / avg;
    }
  }
}

static void expect_close(kiln_tensor *t, const double *want, const char *what, int step) {
  double got[N];
  assert_int_equal(kiln_read(t, got, sizeof got), KILN_OK);
  for (int i = 0; i < N; i++)
    if (!(fabs(got[i] - want[i]) <= 1e-13 * fabs(want[i]) + 1e-15))
      fail_msg("%s, step %d, element %d: %.17g, want %.17g", what, step, i, got[i], want[i]);
}

static void run(const opt_cfg *c) {
  kiln_scope_begin();
  double p[N], s[N], b[N] = {0}, ga[N] = {0}, g[STEPS][N];
  uint64_t seed = 99;
  for (int i = 0; i < N; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = (double)(seed >> 11) / 9007199254740992.0 * 4 - 2;
    s[i] = c->adagrad ? c->init : 0;
  }
  for (int t = 0; t < STEPS; t++)
    for (int i = 0; i < N; i++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      g[t][i] = (double)(seed >> 11) / 9007199254740992.0 * 6 - 3;
    }
  int64_t n = N;
  kiln_tensor *pt = kiln_from_data(KILN_F64, 1, &n, p);
  kiln_optimizer *o = make(c, pt);
  assert_non_null(o);
  for (int t = 1; t <= STEPS; t++) {
    kiln_tensor *gt = kiln_from_data(KILN_F64, 1, &n, g[t - 1]);
    assert_int_equal(kiln_optimizer_step(o, &gt), KILN_OK);
    ref_step(c, t, p, g[t - 1], s, b, ga);
    expect_close(pt, p, "parameter", t);
    expect_close(nn_optimizer_state(o, 0, 0), s, c->adagrad ? "sum" : "square_avg", t);
    int k = 1;
    if (!c->adagrad && c->mu > 0) expect_close(nn_optimizer_state(o, 0, k++), b, "momentum_buffer", t);
    if (!c->adagrad && c->centered) expect_close(nn_optimizer_state(o, 0, k++), ga, "grad_avg", t);
    assert_null(nn_optimizer_state(o, 0, k));
  }
  kiln_optimizer_free(o);
  expect_no_error();
  kiln_scope_end();
}

static void rmsprop_values(void **state) {
  (void)state;
  run(&(opt_cfg){.lr = 0.01, .alpha = 0.99, .eps = 1e-8});
  run(&(opt_cfg){.lr = 0.02, .alpha = 0.9, .eps = 1e-6, .wd = 0.1});
  run(&(opt_cfg){.lr = 0.01, .alpha = 0.9, .eps = 1e-8, .mu = 0.9});
  run(&(opt_cfg){.lr = 0.01, .alpha = 0.8, .eps = 1e-4, .centered = true});
  run(&(opt_cfg){.lr = 0.01, .alpha = 0.8, .eps = 1e-4, .mu = 0.5, .wd = 0.01, .centered = true});
}

static void adagrad_values(void **state) {
  (void)state;
  run(&(opt_cfg){.adagrad = true, .lr = 0.1, .eps = 1e-10});
  run(&(opt_cfg){.adagrad = true, .lr = 0.1, .eps = 1e-10, .lr_decay = 0.1, .wd = 0.05});
  run(&(opt_cfg){.adagrad = true, .lr = 0.05, .eps = 1e-6, .init = 0.5});
}

/* One kernel per parameter update, its state writes fused into it —
 * except with RMSprop's momentum: b = mu b + g / d is read by both b's
 * write and the parameter's, and g / d is not CHEAP (passes/fuse.c rule
 * 4), so the fusion pass computes it into a buffer of its own and the
 * update takes 3 kernels (measured here; left to the fusion pass). */
static void kernels(void **state) {
  (void)state;
  rt_set_fusion(1); /* also under KILN_FUSE=0 */
  const opt_cfg cfgs[] = {{.lr = 0.01, .alpha = 0.99, .eps = 1e-8},
                          {.lr = 0.01, .alpha = 0.99, .eps = 1e-8, .mu = 0.9},
                          {.lr = 0.01, .alpha = 0.99, .eps = 1e-8, .centered = true},
                          {.lr = 0.01, .alpha = 0.99, .eps = 1e-8, .mu = 0.9, .centered = true},
                          {.adagrad = true, .lr = 0.1, .eps = 1e-10, .lr_decay = 0.1}};
  for (int c = 0; c < 5; c++) {
    kiln_scope_begin();
    int64_t big = 1 << 14;
    kiln_manual_seed(3);
    kiln_tensor *p = kiln_randn(KILN_F32, 1, &big), *g = kiln_randn(KILN_F32, 1, &big);
    assert_int_equal(kiln_realize(p), KILN_OK);
    assert_int_equal(kiln_realize(g), KILN_OK);
    kiln_optimizer *o = make(&cfgs[c], p);
    int n_state = c == 4 ? 1 : 1 + (cfgs[c].mu > 0) + cfgs[c].centered, count = 0;
    for (int t = 0; t < 3; t++) {
      assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
      kiln_tensor *ts[4] = {p, nn_optimizer_state(o, 0, 0), nn_optimizer_state(o, 0, 1), nn_optimizer_state(o, 0, 2)};
      kiln_profile_begin();
      assert_int_equal(kiln_realize_many(ts, 1 + n_state), KILN_OK);
      kiln_profile_end();
      count = kiln_profile_count();
    }
    int want = cfgs[c].mu > 0 ? 3 : 1;
    if (count > want) {
      kiln_profile_print(stdout);
      fail_msg("config %d: %d kernels per parameter update, expected at most %d", c, count, want);
    }
    kiln_optimizer_free(o);
    kiln_scope_end();
  }
  rt_set_fusion(-1);
}

static void creation_errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *p = kiln_zeros(KILN_F32, 1, (int64_t[]){3});
  assert_null(kiln_rmsprop(&p, 1, 0.1, -0.1, 1e-8, 0, 0, false));
  expect_error(KILN_ERR_ARG, "kiln_rmsprop", "alpha = -0.1", NULL);
  assert_null(kiln_rmsprop(&p, 1, 0.1, 0.9, NAN, 0, 0, false));
  expect_error(KILN_ERR_ARG, "kiln_rmsprop", "eps", NULL);
  assert_null(kiln_rmsprop(&p, 1, 0.1, 0.9, 1e-8, 0, -1, false));
  expect_error(KILN_ERR_ARG, "kiln_rmsprop", "momentum = -1", NULL);
  assert_null(kiln_adagrad(&p, 1, 0.1, -0.5, 0, 0, 1e-10));
  expect_error(KILN_ERR_ARG, "kiln_adagrad", "lr_decay = -0.5", NULL);
  assert_null(kiln_adagrad(&p, 1, 0.1, 0, 0, -1, 1e-10));
  expect_error(KILN_ERR_ARG, "kiln_adagrad", "initial_accumulator_value = -1", NULL);
  assert_null(kiln_adagrad(&p, 1, -0.1, 0, 0, 0, 1e-10));
  expect_error(KILN_ERR_ARG, "kiln_adagrad", "lr = -0.1", NULL);
  kiln_tensor *i = kiln_zeros(KILN_I32, 1, (int64_t[]){3});
  assert_null(kiln_adagrad(&i, 1, 0.1, 0, 0, 0, 1e-10));
  expect_error(KILN_ERR_DTYPE, "kiln_adagrad", NULL);
  kiln_scope_end();
}

/* The closed forms against Torch's recursive updates, replayed here:
 * StepLR multiplies by gamma every step_size steps; CosineAnnealingLR's
 * get_lr (T_max 10, eta_min 0.01) applies (1 + cos(pi t / T)) / (1 +
 * cos(pi (t - 1) / T)) to lr - eta_min; LinearLR multiplies by 1 + (end -
 * start) / (total * start + (t - 1) (end - start)). */
static void schedules(void **state) {
  (void)state;
  double base = 0.3, step_lr = base, cos_lr = base, lin_lr = base * 0.1, eta = 0.01;
  for (int t = 0; t <= 30; t++) {
    if (t > 0 && t % 4 == 0) step_lr *= 0.5;
    if (t > 0 && (t - 1 - 10) % 20 == 0) cos_lr = cos_lr + (base - eta) * (1 - cos(PI / 10)) / 2;
    else if (t > 0)
      cos_lr = (1 + cos(PI * t / 10)) / (1 + cos(PI * (t - 1) / 10)) * (cos_lr - eta) + eta;
    if (t > 0 && t <= 6) lin_lr *= 1 + (1 - 0.1) / (6 * 0.1 + (t - 1) * (1 - 0.1));
    assert_float_equal(kiln_lr_step(base, t, 4, 0.5), step_lr, 1e-15);
    assert_float_equal(kiln_lr_cosine(base, t, 10, eta), cos_lr, 1e-13);
    assert_float_equal(kiln_lr_linear(base, t, 0.1, 1, 6), lin_lr, 1e-15);
  }
  assert_float_equal(kiln_lr_cosine(base, 10, 10, eta), eta, 1e-16);
  assert_float_equal(kiln_lr_linear(base, 100, 0.1, 0.5, 6), base * 0.5, 1e-16);
  expect_no_error();
  assert_true(isnan(kiln_lr_step(0.1, 3, 0, 0.5)));
  expect_error(KILN_ERR_ARG, "kiln_lr_step", "step_size 0", NULL);
  assert_true(isnan(kiln_lr_cosine(0.1, -2, 5, 0)));
  expect_error(KILN_ERR_ARG, "kiln_lr_cosine", "step -2", NULL);
  assert_true(isnan(kiln_lr_linear(NAN, 0, 0.5, 1, 5)));
  expect_error(KILN_ERR_ARG, "kiln_lr_linear", "base_lr nan", NULL);
  assert_true(isnan(kiln_lr_linear(0.1, 0, 1.5, 1, 5)));
  expect_error(KILN_ERR_ARG, "start_factor 1.5", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(rmsprop_values), cmocka_unit_test(adagrad_values), cmocka_unit_test(kernels),
      cmocka_unit_test(creation_errors), cmocka_unit_test(schedules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
