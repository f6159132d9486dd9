/*
 * test_grad_rules.c — the gradient rule table (autograd/grad_rules.c) against
 * the op table (graph/ops.def): every differentiable (DIFF) op has a rule
 * and no other op has one, so an op added later without its rule fails
 * here rather than in a user's kiln_grad. Then the rules' values where a
 * derivative is infinite, undefined or taken across a branch: no NaN or
 * inf leaks from the branch not taken (where, clamp, maximum/minimum),
 * and sqrt, norm, std, pow, logsumexp, softmax at 0 or -inf give what
 * PyTorch 1.13 gives (the expected values are torch.autograd.grad's, in
 * F64); cumprod's long-scan gradient against a direct O(n^2) sum.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "autograd.h"
#include "test_util.h"

static void every_diff_op_has_a_rule(void **state) {
  (void)state;
  int n_diff = 0;
  for (int op = 0; op < GRAPH_OP_COUNT; op++) {
    bool diff = graph_op_is_differentiable((graph_op)op), rule = grad_rule_of((graph_op)op) != NULL;
    if (diff && !rule) fail_msg("op %s is differentiable (ops.def DIFF) but has no gradient rule", graph_ops[op].name);
    if (!diff && rule) fail_msg("op %s has a gradient rule but is not marked DIFF in ops.def", graph_ops[op].name);
    n_diff += diff;
  }
  assert_true(n_diff > 30);
  assert_null(grad_rule_of(GRAPH_OP_COUNT));
  assert_null(grad_rule_of((graph_op)-1));
}

static kiln_tensor *vec(int64_t n, const double *v) { return kiln_from_data(KILN_F64, 1, &n, v); }

/* t [n] (F64) equals want: infinities and NaN exactly, the rest within
 * 1e-12 relative (Torch and Kiln round differently). */
static void expect_grad(const char *what, kiln_tensor *t, const double *want, int64_t n) {
  double got[64];
  assert_true(n <= 64);
  if (!t) fail_msg("%s: %s", what, kiln_last_error());
  assert_int_equal(kiln_numel(t), n);
  assert_int_equal(kiln_read(t, got, sizeof got), KILN_OK);
  for (int64_t i = 0; i < n; i++) {
    bool ok = isnan(want[i]) ? isnan(got[i])
              : isinf(want[i]) ? got[i] == want[i]
                               : fabs(got[i] - want[i]) <= 1e-12 * (1 + fabs(want[i]));
    if (!ok) fail_msg("%s: element %lld is %.17g, PyTorch gives %.17g", what, (long long)i, got[i], want[i]);
  }
}

/* The gradients of sum(y) (or y) with respect to wrt [n], checked. */
static void check1(const char *what, kiln_tensor *y, kiln_tensor *x, const double *want) {
  kiln_tensor *g;
  kiln_tensor *s = kiln_numel(y) == 1 ? y : kiln_sum(y, 0, NULL, false);
  if (kiln_grad(&s, NULL, 1, &x, 1, &g) != KILN_OK) fail_msg("%s: %s", what, kiln_last_error());
  expect_grad(what, g, want, kiln_numel(x));
}
static void check2(const char *what, kiln_tensor *y, kiln_tensor *a, kiln_tensor *b, const double *wa,
                   const double *wb) {
  kiln_tensor *g[2], *wrt[2] = {a, b};
  kiln_tensor *s = kiln_sum(y, 0, NULL, false);
  if (kiln_grad(&s, NULL, 1, wrt, 2, g) != KILN_OK) fail_msg("%s: %s", what, kiln_last_error());
  expect_grad(what, g[0], wa, kiln_numel(a));
  expect_grad(what, g[1], wb, kiln_numel(b));
}

/* sqrt(y) makes the cotangent of y infinite where y is 0: the side that
 * was not selected there must get 0, not inf * 0 = NaN. */
static void branch_not_taken(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = vec(3, (double[]){1, 2, 3}), *b = vec(3, (double[]){0, 4, 0});
  kiln_tensor *c = kiln_from_data(KILN_BOOL, 1, (int64_t[]){3}, (bool[]){false, true, false});
  check2("where", kiln_sqrt(kiln_where(c, a, b)), a, b, (double[]){0, 0.35355339059327373, 0},
         (double[]){INFINITY, 0, INFINITY});
  kiln_tensor *x = vec(3, (double[]){-1, 0.5, 3});
  check1("clamp", kiln_sqrt(kiln_clamp(x, 0, 1)), x, (double[]){0, 0.7071067811865475, 0});
  a = vec(2, (double[]){0, 3}), b = vec(2, (double[]){-1, 5});
  check2("maximum", kiln_sqrt(kiln_maximum(a, b)), a, b, (double[]){INFINITY, 0}, (double[]){0, 0.22360679774997896});
  b = vec(2, (double[]){1, -5});
  check2("minimum", kiln_sqrt(kiln_neg(kiln_minimum(a, b))), a, b, (double[]){INFINITY, 0},
         (double[]){0, -0.22360679774997896});
  /* a NaN value in the branch not taken (log of a negative) stays there */
  x = vec(3, (double[]){-1, 2, -3});
  check1("where over log", kiln_where(kiln_gt_scalar(x, 0), kiln_mul(x, x), kiln_log(x)), x,
         (double[]){-1, 4, -0.3333333333333333});
  /* a NaN operand of maximum: both sides get the gradient (Torch) */
  a = vec(2, (double[]){NAN, 1}), b = vec(2, (double[]){1, NAN});
  check2("maximum with NaN", kiln_maximum(a, b), a, b, (double[]){1, 1}, (double[]){1, 1});
  /* relu and abs at 0: 0; clamp at its bounds: the gradient passes */
  x = vec(3, (double[]){0, -1, 2});
  check1("relu + abs at 0", kiln_add(kiln_relu(x), kiln_abs(x)), x, (double[]){0, -1, 2});
  x = vec(3, (double[]){0, 1, 2});
  check1("clamp at its bounds", kiln_clamp(x, 0, 2), x, (double[]){1, 1, 1});
  kiln_scope_end();
  expect_no_error();
}

/* relu's rule reads the forward's result: NaN passes the gradient (Torch's
 * threshold_backward), and a result overwritten in place since is not
 * read — the rule falls back to the input, the same mask. */
static void relu_reads_its_result(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec(6, (double[]){NAN, -0.0, 1, -INFINITY, INFINITY, 0});
  check1("relu at NaN, +-0, +-inf", kiln_relu(x), x, (double[]){1, 0, 1, 0, 1, 0});
  kiln_tensor *y = kiln_relu(x);
  assert_int_equal(kiln_realize(y), KILN_OK); /* forced: its buffer is read */
  check1("relu forced", y, x, (double[]){1, 0, 1, 0, 1, 0});
  /* forced, then written in place: the relu's buffer goes to the write */
  x = vec(4, (double[]){-1, 2, 3, -4});
  y = kiln_relu(x);
  assert_int_equal(kiln_realize(y), KILN_OK);
  graph_node *r = y->storage->version;
  assert_int_equal(kiln_fill_(kiln_narrow(y, 0, 2, 2), 7), KILN_OK);
  assert_int_equal(kiln_realize(y), KILN_OK);
  assert_true(r->overwritten && !grad_has_output(r));
  check1("relu overwritten in place", y, x, (double[]){0, 1, 0, 0});
  kiln_scope_end();
  expect_no_error();
}

static double d_exp(double x) { return exp(x); }
static double d_sqrt(double x) { return 0.5 / sqrt(x); }
static double d_tanh(double x) { return 1 - tanh(x) * tanh(x); }
static double d_sigmoid(double x) { return exp(-x) / ((1 + exp(-x)) * (1 + exp(-x))); }

/* exp, sqrt, tanh and sigmoid read their result as Torch's backward does
 * while it is there (lazy or forced), and their input once a write in
 * place replaced it: there the written NaN would make 0 * NaN = NaN
 * where the cotangent is 0. */
static void rules_read_their_results(void **state) {
  (void)state;
  static const struct {
    const char *name;
    kiln_tensor *(*f)(kiln_tensor *);
    double (*d)(double);
  } ops[] = {{"exp", kiln_exp, d_exp}, {"sqrt", kiln_sqrt, d_sqrt}, {"tanh", kiln_tanh, d_tanh},
             {"sigmoid", kiln_sigmoid, d_sigmoid}};
  const double xs[4] = {0.25, 1, 2, 4};
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
    kiln_scope_begin();
    double want[4], want_cut[4];
    for (int i = 0; i < 4; i++) want[i] = ops[o].d(xs[i]), want_cut[i] = i < 2 ? want[i] : 0;
    char what[64];
    kiln_tensor *x = vec(4, xs);
    snprintf(what, sizeof what, "%s lazy", ops[o].name);
    check1(what, ops[o].f(x), x, want);
    kiln_tensor *y = ops[o].f(x);
    assert_int_equal(kiln_realize(y), KILN_OK);
    snprintf(what, sizeof what, "%s forced", ops[o].name);
    check1(what, y, x, want);
    y = ops[o].f(x);
    assert_int_equal(kiln_realize(y), KILN_OK);
    graph_node *r = y->storage->version;
    assert_int_equal(kiln_fill_(kiln_narrow(y, 0, 2, 2), NAN), KILN_OK);
    assert_int_equal(kiln_realize(y), KILN_OK);
    assert_true(r->overwritten && !grad_has_output(r));
    snprintf(what, sizeof what, "%s overwritten in place", ops[o].name);
    check1(what, y, x, want_cut);
    kiln_scope_end();
  }
  expect_no_error();
}

/* sqrt and pow at 0 keep their infinite derivative (as Torch); norm and
 * std at 0 give 0 (Torch masks them). */
static void zero_points(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec(2, (double[]){0, 4});
  check1("sqrt at 0", kiln_sqrt(x), x, (double[]){INFINITY, 0.25});
  x = vec(2, (double[]){0, 2});
  check1("pow_scalar 0.5 at 0", kiln_pow_scalar(x, 0.5), x, (double[]){INFINITY, 0.35355339059327373});
  check1("pow_scalar 0", kiln_pow_scalar(x, 0), x, (double[]){0, 0});
  kiln_tensor *a = vec(5, (double[]){0, 0, 2, 0, -2}), *b = vec(5, (double[]){0, 2, 0, 0.5, 2});
  check2("pow at 0", kiln_pow(a, b), a, b, (double[]){0, 0, 0, INFINITY, -4},
         (double[]){0, 0, 0.6931471805599453, 0, NAN});
  const double ps[] = {2, 1, 3, 0.5, INFINITY, -INFINITY, -1};
  kiln_tensor *z = vec(3, (double[]){0, 0, 0});
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
    char what[64];
    snprintf(what, sizeof what, "norm p=%g at 0", ps[i]);
    check1(what, kiln_norm(z, ps[i], 0, NULL, false), z, (double[]){0, 0, 0});
  }
  static const struct {
    double p, g[3];
  } with_zero[] = {
      {2, {0.4472135954999579, 0, -0.8944271909999159}},
      {1, {1, 0, -1}},
      {3, {0.2311204247835449, 0, -0.9244816991341795}},
      {0.5, {2.414213562373095, 0, -1.7071067811865472}},
      {INFINITY, {0, 0, -1}},
      {-INFINITY, {0, 0, 0}},
      {-1, {0, 0, 0}},
      {-0.5, {0, 0, 0}},
  };
  kiln_tensor *y = vec(3, (double[]){1, 0, -2});
  for (size_t i = 0; i < sizeof with_zero / sizeof *with_zero; i++) {
    char what[64];
    snprintf(what, sizeof what, "norm p=%g of [1, 0, -2]", with_zero[i].p);
    check1(what, kiln_norm(y, with_zero[i].p, 0, NULL, false), y, with_zero[i].g);
  }
  kiln_tensor *m = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 2}, (double[]){0, 0, 3, 4});
  check1("norm of rows, one zero", kiln_norm(m, 2, 1, (int[]){1}, false), m, (double[]){0, 0, 0.6, 0.8});
  x = vec(3, (double[]){1, 1, 1});
  check1("std of a constant", kiln_std(x, 0, NULL, 1, false), x, (double[]){0, 0, 0});
  m = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 3}, (double[]){2, 2, 2, 1, 2, 4});
  check1("std of rows, one constant", kiln_std(m, 1, (int[]){1}, 1, false), m,
         (double[]){0, 0, 0, -0.43643578047198484, -0.10910894511799625, 0.5455447255899809});
  kiln_scope_end();
  expect_no_error();
}

/* -inf inputs of logsumexp, softmax and log_softmax (a masked logit). */
static void minus_inf(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec(3, (double[]){-INFINITY, 0, 0});
  check1("logsumexp", kiln_logsumexp(x, 1, (int[]){0}, false), x, (double[]){0, 0.5, 0.5});
  x = vec(3, (double[]){-INFINITY, 1, 2});
  kiln_tensor *w = vec(3, (double[]){0.5, -1, 2});
  check1("softmax", kiln_mul(kiln_softmax(x, 0), w), x, (double[]){0, -0.5898357997244457, 0.5898357997244457});
  check1("log_softmax", kiln_mul(kiln_log_softmax(x, 0), w), x,
         (double[]){0.5, -1.4034121320549926, 0.9034121320549926});
  kiln_scope_end();
  expect_no_error();
}

/* cumprod over a scan longer than the exact n x n formula handles (1100),
 * with no zero, one zero and two zeros: against the direct sum
 * grad_i = sum_{j >= i} g_j prod_{m <= j, m != i} x_m. */
static void cumprod_long_scans(void **state) {
  (void)state;
  enum { N = 1100 };
  static double x[N], g[N], want[N], got[N];
  uint64_t seed = 42;
  for (int zeros = 0; zeros < 3; zeros++) {
    for (int i = 0; i < N; i++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      x[i] = 0.9 + 0.2 * (double)(seed >> 11) / (double)(1ULL << 53);
      g[i] = (double)((seed >> 20) % 7) - 3;
    }
    if (zeros >= 1) x[300] = 0;
    if (zeros >= 2) x[301] = x[900] = 0;
    for (int i = 0; i < N; i++) {
      double sum = 0, p = 1;
      for (int m = 0; m < i; m++) p *= x[m];
      for (int j = i; j < N; j++) {
        if (j > i) p *= x[j];
        sum += g[j] * p;
      }
      want[i] = sum;
    }
    kiln_scope_begin();
    kiln_tensor *t = kiln_from_data(KILN_F64, 2, (int64_t[]){1, N}, x), *gr;
    kiln_tensor *c = kiln_from_data(KILN_F64, 2, (int64_t[]){N, 1}, g);
    kiln_tensor *y = kiln_cumprod(kiln_t(t), 0); /* along a strided dim */
    assert_int_equal(kiln_grad(&y, &c, 1, &t, 1, &gr), KILN_OK);
    assert_int_equal(kiln_read(gr, got, sizeof got), KILN_OK);
    kiln_scope_end();
    for (int i = 0; i < N; i++)
      if (!(fabs(got[i] - want[i]) <= 1e-9 * (1 + fabs(want[i]))))
        fail_msg("%d zeros: d/dx[%d] is %.17g, want %.17g", zeros, i, got[i], want[i]);
  }
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_diff_op_has_a_rule), cmocka_unit_test(branch_not_taken), cmocka_unit_test(zero_points),
      cmocka_unit_test(minus_inf),                cmocka_unit_test(cumprod_long_scans),
      cmocka_unit_test(relu_reads_its_result),
      cmocka_unit_test(rules_read_their_results),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
