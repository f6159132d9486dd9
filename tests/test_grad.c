/*
 * test_grad.c — kiln_grad's mechanics: seeds, views and in-place writes,
 * forced intermediates, errors, second derivatives. The per-op gradient
 * checks are tests/test_grad_ops.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "graph.h"
#include "test_util.h"
#include "grad_check.h"

static kiln_tensor *vec(const double *v, int64_t n) { return kiln_from_data(KILN_F64, 1, &n, v); }

static void read_vals(kiln_tensor *t, double *out, size_t n) {
  assert_int_equal(kiln_read(t, out, n * sizeof *out), KILN_OK);
}

/* y = sum(x * x): dy/dx = 2x, seeded with 1 (NULL cotangents). */
static void scalar_output(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, -2, 3}, 3), *g;
  kiln_tensor *y = kiln_sum(kiln_mul(x, x), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){2, -4, 6}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

/* A wrt the outputs do not depend on gets zeros of its sizes and dtype. */
static void unused_wrt_is_zero(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2}, 2), *w = kiln_ones(KILN_F32, 2, (int64_t[]){2, 3}), *g[2];
  kiln_tensor *y = kiln_sum(x, 0, NULL, false);
  kiln_tensor *wrt[2] = {x, w};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){1, 1}, 2, 0);
  assert_int_equal(kiln_dtype_of(g[1]), KILN_F32);
  assert_int_equal(kiln_dim(g[1]), 2);
  expect_values_tol(g[1], (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Reads through views send their gradient to the region read; a wrt that
 * is itself a view gets the gradient of its region. */
static void views_route_gradients(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){0, 1, 2, 3, 4, 5}, 6), *g[2];
  kiln_tensor *m = kiln_view(x, 2, (int64_t[]){2, 3});
  kiln_tensor *t = kiln_t(m);                      /* [3, 2] */
  kiln_tensor *n = kiln_narrow(x, 0, 2, 3);        /* x[2..4] */
  kiln_tensor *y = kiln_add(kiln_sum(kiln_mul_scalar(t, 3), 0, NULL, false),
                            kiln_sum(kiln_mul(n, n), 0, NULL, false));
  kiln_tensor *wrt[2] = {x, n};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){3, 3, 3 + 4, 3 + 6, 3 + 8, 3}, 6, 1e-12);
  expect_values_tol(g[1], (double[]){3 + 4, 3 + 6, 3 + 8}, 3, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* An in-place write through a view: the written region's gradient goes to
 * the value written, the rest to the old contents (Torch's semantics for
 * x = a.clone(); x[1:3] = b * 2; y = x * w). */
static void inplace_write_through_view(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = vec((double[]){1, 2, 3, 4}, 4), *b = vec((double[]){5, 6}, 2), *g[2];
  kiln_tensor *x = kiln_clone(a);
  assert_int_equal(kiln_copy_(kiln_narrow(x, 0, 1, 2), kiln_mul_scalar(b, 2)), KILN_OK);
  kiln_tensor *w = vec((double[]){10, 20, 30, 40}, 4);
  kiln_tensor *y = kiln_sum(kiln_mul(x, w), 0, NULL, false);
  kiln_tensor *wrt[2] = {a, b};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){10, 0, 0, 40}, 4, 0);
  expect_values_tol(g[1], (double[]){40, 60}, 2, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Broadcast reads sum their gradient over the broadcast dims; an expand
 * (stride 0) too. */
static void broadcast_sums(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6});
  kiln_tensor *b = vec((double[]){1, 1, 1}, 3), *c = kiln_scalar(KILN_F64, 2), *g[3];
  kiln_tensor *y = kiln_sum(kiln_mul(kiln_add(x, b), c), 0, NULL, false);
  kiln_tensor *wrt[3] = {x, b, c};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 3, g), KILN_OK);
  expect_values_tol(g[0], (double[]){2, 2, 2, 2, 2, 2}, 6, 0);
  expect_values_tol(g[1], (double[]){4, 4, 4}, 3, 0);
  expect_values_tol(g[2], (double[]){21 + 6}, 1, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* Forcing intermediates (before or after kiln_grad) changes no gradient. */
static void forcing_midway_changes_nothing(void **state) {
  (void)state;
  double want[6], got[6];
  for (int forced = 0; forced < 2; forced++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 3}, (double[]){0.5, -1, 2, 0.25, 3, -2}), *g;
    kiln_tensor *w = kiln_from_data(KILN_F64, 2, (int64_t[]){3, 2}, (double[]){1, 2, 3, 4, 5, 6});
    kiln_tensor *h = kiln_tanh(kiln_matmul(x, w));
    if (forced) assert_int_equal(kiln_realize(h), KILN_OK);
    kiln_tensor *y = kiln_sum(kiln_exp(kiln_mul(h, h)), 0, NULL, false);
    if (forced) assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
    read_vals(g, forced ? got : want, 6);
    kiln_scope_end();
  }
  for (int i = 0; i < 6; i++) assert_float_equal(got[i], want[i], 1e-12 * fabs(want[i]));
  expect_no_error();
}

/* d/dx of (dy/dx) for y = x^3: 6x. */
static void second_derivative(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, -3}, 3), *g, *gg;
  kiln_tensor *y = kiln_sum(kiln_mul(kiln_mul(x, x), x), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){3, 12, 27}, 3, 1e-12);
  kiln_tensor *s = kiln_sum(g, 0, NULL, false);
  assert_int_equal(kiln_grad(&s, NULL, 1, &x, 1, &gg), KILN_OK);
  expect_values_tol(gg, (double[]){6, 12, -18}, 3, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* kiln_detach: the value, shared storage, no gradient. */
static void detach_stops_gradients(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *g;
  kiln_tensor *d = kiln_detach(x);
  kiln_tensor *y = kiln_sum(kiln_mul(x, d), 0, NULL, false); /* d/dx = d = x */
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){1, 2, 3}, 3, 0);
  assert_int_equal(kiln_fill_(kiln_narrow(d, 0, 0, 1), 7), KILN_OK); /* writes are shared */
  expect_values_tol(x, (double[]){7, 2, 3}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

/* A value read through a detached view, written into the tensor, then
 * forced: the recipe the write keeps still stops the gradient there (the
 * simplifier reads through the DETACH when it forces). */
static void detach_survives_forcing(void **state) {
  (void)state;
  for (int force = 0; force < 2; force++) {
    kiln_scope_begin();
    kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *g;
    kiln_tensor *c = kiln_clone(x);
    kiln_tensor *m = kiln_mean(kiln_detach(c), 0, NULL, false);
    kiln_tensor *head = kiln_narrow(c, 0, 0, 2);
    assert_int_equal(kiln_copy_(head, kiln_add(head, m)), KILN_OK); /* c[:2] += mean(c) */
    if (force) assert_int_equal(kiln_realize(c), KILN_OK);
    kiln_tensor *y = kiln_sum(kiln_mul(c, x), 0, NULL, false); /* sum(x^2) + m (x0 + x1), m = 2 */
    assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
    expect_values_tol(g, (double[]){4, 6, 6}, 3, 0); /* [5, 7, 7] if a gradient flowed into m */
    kiln_scope_end();
  }
  expect_no_error();
}

/* z = x * detach(x), forced (the simplifier lets MUL read x directly, on
 * an edge that carries no gradient): dz/dx = detach(x), whose own
 * derivative is 0 — the first gradient reads the value detached too. */
static void detach_second_order(void **state) {
  (void)state;
  for (int force = 0; force < 2; force++) {
    kiln_scope_begin();
    kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *r = vec((double[]){0.5, -1, 2}, 3), *g, *gg;
    kiln_tensor *z = kiln_sum(kiln_mul(x, kiln_detach(x)), 0, NULL, false);
    if (force) assert_int_equal(kiln_realize(z), KILN_OK);
    assert_int_equal(kiln_grad(&z, NULL, 1, &x, 1, &g), KILN_OK);
    expect_values_tol(g, (double[]){1, 2, 3}, 3, 0);
    kiln_tensor *y = kiln_sum(kiln_mul(g, r), 0, NULL, false);
    assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &gg), KILN_OK);
    expect_values_tol(gg, (double[]){0, 0, 0}, 3, 0); /* r if the detach were lost */
    kiln_scope_end();
  }
  expect_no_error();
}

/* Every op that reads a detached tensor through views of its own
 * (products, repeat, masked_select, index_add_ and scatter_ sources)
 * passes no gradient: only the direct term sum(x) reaches x. */
static void detach_through_every_reader(void **state) {
  (void)state;
  for (int kind = 0; kind < 12; kind++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}), *g;
    kiln_tensor *d = kiln_detach(x), *dt = kiln_t(d), *f = NULL;
    kiln_tensor *ix = kiln_from_data(KILN_I64, 1, (int64_t[]){2}, (int64_t[]){1, 0});
    kiln_tensor *t = kiln_zeros(KILN_F64, 2, (int64_t[]){2, 3});
    switch (kind) {
    case 0: f = kiln_matmul(d, dt); break;
    case 1: f = kiln_mm(dt, d); break;
    case 2: f = kiln_mv(d, kiln_select(d, 0, 1)); break;
    case 3: f = kiln_dot(kiln_select(d, 0, 0), kiln_select(dt, 1, 1)); break;
    case 4: f = kiln_bmm(kiln_unsqueeze(d, 0), kiln_unsqueeze(dt, 0)); break;
    case 5: f = kiln_addmm(kiln_select(d, 0, 0), dt, d, 1, 1); break;
    case 6: f = kiln_repeat(dt, 2, (int64_t[]){2, 1}); break;
    case 7: f = kiln_masked_select(d, kiln_gt_scalar(x, 2.5)); break;
    case 8: assert_int_equal(kiln_index_add_(t, 0, ix, d), KILN_OK); f = t; break;
    case 9: assert_int_equal(kiln_index_add_(t, 0, ix, kiln_to_dtype(d, KILN_F32)), KILN_OK); f = t; break;
    case 10: {
      kiln_tensor *si = kiln_from_data(KILN_I64, 2, (int64_t[]){1, 3}, (int64_t[]){1, 0, 1});
      assert_int_equal(kiln_scatter_(t, 0, si, d), KILN_OK);
      f = t;
      break;
    }
    case 11: f = kiln_reshape(dt, 1, (int64_t[]){6}); break; /* a copy */
    }
    kiln_tensor *y = kiln_add(kiln_sum(kiln_mul(f, f), 0, NULL, false), kiln_sum(x, 0, NULL, false));
    if (kiln_grad(&y, NULL, 1, &x, 1, &g) != KILN_OK) fail_msg("case %d: %s", kind, kiln_last_error());
    double got[6];
    assert_int_equal(kiln_read(g, got, sizeof got), KILN_OK);
    for (int i = 0; i < 6; i++)
      if (got[i] != 1) fail_msg("case %d: d/dx[%d] is %g: a gradient went through the detached tensor", kind, i, got[i]);
    kiln_scope_end();
  }
  expect_no_error();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *g = (kiln_tensor *)1;
  kiln_tensor *y = kiln_mul(x, x);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_ERR_ARG);
  assert_ptr_equal(g, (kiln_tensor *)1); /* untouched on error */
  expect_error(KILN_ERR_ARG, "kiln_grad", "output 0", "[3]", NULL);
  kiln_tensor *bad = vec((double[]){1, 2}, 2);
  assert_int_equal(kiln_grad(&y, &bad, 1, &x, 1, &g), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "cotangent 0 has sizes [2]", NULL);
  kiln_tensor *i = kiln_arange(KILN_I64, 0, 3, 1);
  kiln_tensor *s = kiln_sum(x, 0, NULL, false);
  assert_int_equal(kiln_grad(&s, NULL, 1, &i, 1, &g), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "wrt 0", "i64", NULL);
  /* written after read */
  kiln_tensor *p = kiln_clone(x);
  kiln_tensor *loss = kiln_sum(kiln_mul(p, p), 0, NULL, false);
  assert_int_equal(kiln_fill_(kiln_narrow(p, 0, 0, 1), 0), KILN_OK);
  assert_int_equal(kiln_grad(&loss, NULL, 1, &p, 1, &g), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "wrt 0 was modified by an in-place write after the outputs read it", NULL);
  kiln_scope_end();
}

static double twice(double v, void *ctx) {
  (void)ctx;
  return 2 * v;
}

static void callback_in_path(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *g;
  kiln_tensor *u = kiln_clone(kiln_exp(x));
  assert_int_equal(kiln_apply_(u, twice, NULL), KILN_OK);
  kiln_tensor *y = kiln_sum(u, 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_ERR_UNSUPPORTED);
  expect_error(KILN_ERR_UNSUPPORTED, "kiln_apply_", NULL);
  /* a callback value that does not depend on wrt is a constant */
  kiln_tensor *c = kiln_ones(KILN_F64, 1, (int64_t[]){3});
  assert_int_equal(kiln_apply_(c, twice, NULL), KILN_OK);
  kiln_tensor *z = kiln_sum(kiln_mul(x, c), 0, NULL, false);
  if (kiln_grad(&z, NULL, 1, &x, 1, &g) != KILN_OK) fail_msg("%s", kiln_last_error());
  expect_values_tol(g, (double[]){2, 2, 2}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

#define SENTINEL ((kiln_tensor *)1)

/* A rejected kiln_grad: the status, a message with every string of the
 * NULL-terminated list, every grad untouched (the caller set them to
 * SENTINEL), and nothing recorded (no pending node added). */
static void expect_rejected(int st, kiln_tensor **g, int n_wrt, int64_t pending, kiln_status status, ...) {
  assert_int_equal(st, status);
  for (int j = 0; j < n_wrt; j++) assert_ptr_equal(g[j], SENTINEL);
  assert_int_equal(graph_pending_count(), pending);
  assert_int_equal(kiln_last_status(), status);
  const char *msg = kiln_last_error();
  if (strncmp(msg, "kiln_grad: ", 11) != 0) fail_msg("error \"%s\" does not name kiln_grad", msg);
  va_list ap;
  va_start(ap, status);
  for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *))
    if (!strstr(msg, w)) fail_msg("error \"%s\" does not contain \"%s\"", msg, w);
  va_end(ap);
  kiln_clear_error();
}

static void errors_record_nothing(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *z = vec((double[]){4, 5}, 2);
  kiln_tensor *y = kiln_mul(x, x), *s = kiln_sum(y, 0, NULL, false), *g[2] = {SENTINEL, SENTINEL};
  kiln_tensor *wrt[2] = {x, z};
  kiln_tensor *c2 = vec((double[]){1, 2}, 2), *c31 = kiln_ones(KILN_F64, 2, (int64_t[]){3, 1});
  kiln_tensor *outs[2] = {s, y}, *cots[2] = {kiln_scalar(KILN_F64, 1), c2};
  kiln_tensor *ci = kiln_ones(KILN_I64, 1, (int64_t[]){3});
  kiln_tensor *xi = kiln_arange(KILN_I64, 0, 3, 1), *si = kiln_sum(xi, 0, NULL, false);
  kiln_tensor *iw[2] = {x, xi}, *nul[2] = {x, NULL}, *nulc[2] = {kiln_scalar(KILN_F64, 1), NULL};
  int64_t pending = graph_pending_count();
#define TRY(call) (g[0] = g[1] = SENTINEL, (call))
  expect_rejected(TRY(kiln_grad(&y, NULL, 1, wrt, 2, g)), g, 2, pending, KILN_ERR_ARG,
                  "output 0 has sizes [3] (3 elements): without cotangents every output must have one element", NULL);
  expect_rejected(TRY(kiln_grad(&y, &c2, 1, wrt, 2, g)), g, 2, pending, KILN_ERR_SHAPE,
                  "cotangent 0 has sizes [2] but output 0 has sizes [3]", NULL);
  expect_rejected(TRY(kiln_grad(&y, &c31, 1, wrt, 2, g)), g, 2, pending, KILN_ERR_SHAPE,
                  "cotangent 0 has sizes [3, 1] but output 0 has sizes [3]", NULL);
  expect_rejected(TRY(kiln_grad(outs, cots, 2, wrt, 2, g)), g, 2, pending, KILN_ERR_SHAPE, "cotangent 1", NULL);
  expect_rejected(TRY(kiln_grad(&y, &ci, 1, wrt, 2, g)), g, 2, pending, KILN_ERR_DTYPE, "cotangent 0 has dtype i64",
                  NULL);
  expect_rejected(TRY(kiln_grad(&s, NULL, 1, iw, 2, g)), g, 2, pending, KILN_ERR_DTYPE,
                  "wrt 1 has dtype i64; gradients need a float dtype", NULL);
  expect_rejected(TRY(kiln_grad(&si, NULL, 1, wrt, 2, g)), g, 2, pending, KILN_ERR_DTYPE, "output 0 has dtype i64",
                  NULL);
  expect_rejected(TRY(kiln_grad(&s, NULL, 1, nul, 2, g)), g, 2, pending, KILN_ERR_ARG, "wrt 1 is NULL", NULL);
  expect_rejected(TRY(kiln_grad(outs, nulc, 2, wrt, 2, g)), g, 2, pending, KILN_ERR_ARG, "cotangent 1 is NULL", NULL);
  expect_rejected(TRY(kiln_grad(&s, NULL, 0, wrt, 2, g)), g, 2, pending, KILN_ERR_ARG, "needs at least one output",
                  NULL);
  expect_rejected(TRY(kiln_grad(&s, NULL, 1, wrt, 0, g)), g, 0, pending, KILN_ERR_ARG, "n_wrt = 0", NULL);
  expect_rejected(TRY(kiln_grad(NULL, NULL, 1, wrt, 2, g)), g, 2, pending, KILN_ERR_ARG, "output list is NULL", NULL);
  expect_rejected(kiln_grad(&s, NULL, 1, wrt, 2, NULL), g, 0, pending, KILN_ERR_ARG, "grads is NULL", NULL);
#undef TRY
  kiln_scope_end();
}

/* A wrt written in place after the outputs read it, through another view
 * of its storage; the error names the wrt (the first written one) and
 * the versions, and records nothing. */
static void written_after_read(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3, 4}, 4), *g[3];
  kiln_tensor *p = kiln_clone(x), *q = kiln_clone(x);
  kiln_tensor *v = kiln_narrow(p, 0, 1, 2); /* a view of p's storage */
  kiln_tensor *loss = kiln_sum(kiln_mul(kiln_exp(v), kiln_narrow(q, 0, 0, 2)), 0, NULL, false);
  kiln_tensor *ones = kiln_ones(KILN_F64, 2, (int64_t[]){2, 2});
  assert_int_equal(kiln_copy_(kiln_t(kiln_view(p, 2, (int64_t[]){2, 2})), ones), KILN_OK);
  int64_t pending = graph_pending_count();
  kiln_tensor *wrt[3] = {x, q, v};
  g[0] = g[1] = g[2] = SENTINEL;
  expect_rejected(kiln_grad(&loss, NULL, 1, wrt, 3, g), g, 3, pending, KILN_ERR_ARG,
                  "wrt 2 was modified by an in-place write after the outputs read it", "version", NULL);
  /* reading it again after the write is fine: the outputs read the new version */
  kiln_tensor *loss2 = kiln_sum(kiln_mul(kiln_exp(v), kiln_narrow(q, 0, 0, 2)), 0, NULL, false);
  assert_int_equal(kiln_grad(&loss2, NULL, 1, wrt, 3, g), KILN_OK);
  /* p was overwritten whole (v = [1, 1]): x reaches loss2 through q only */
  expect_values_tol(g[0], (double[]){exp(1), exp(1), 0, 0}, 4, 1e-12);
  expect_values_tol(g[1], (double[]){exp(1), exp(1), 0, 0}, 4, 1e-12);
  expect_values_tol(g[2], (double[]){exp(1), 2 * exp(1)}, 2, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

static double sum2(double a, double b, void *ctx) {
  (void)ctx;
  return a + b;
}
static double sum3(double a, double b, double c, void *ctx) {
  (void)ctx;
  return a + b + c;
}

/* kiln_map_ and kiln_map2_ on the path: KILN_ERR_UNSUPPORTED naming them;
 * nothing recorded. */
static void map_callbacks_in_path(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2, 3}, 3), *g = SENTINEL;
  kiln_tensor *u = kiln_zeros(KILN_F64, 1, (int64_t[]){3}), *w = kiln_zeros(KILN_F64, 1, (int64_t[]){3});
  assert_int_equal(kiln_map_(u, kiln_exp(x), sum2, NULL), KILN_OK);
  assert_int_equal(kiln_map2_(w, x, kiln_sin(x), sum3, NULL), KILN_OK);
  kiln_tensor *y = kiln_sum(kiln_mul(u, u), 0, NULL, false), *z = kiln_sum(w, 0, NULL, false);
  expect_no_error();
  int64_t pending = graph_pending_count();
  expect_rejected(kiln_grad(&y, NULL, 1, &x, 1, &g), &g, 1, pending, KILN_ERR_UNSUPPORTED, "kiln_map_",
                  "no derivative", NULL);
  g = SENTINEL;
  expect_rejected(kiln_grad(&z, NULL, 1, &x, 1, &g), &g, 1, pending, KILN_ERR_UNSUPPORTED, "kiln_map2_", NULL);
  kiln_scope_end();
}

/* A write recorded over a forced in-place write lets the forced write's
 * recipe go (docs/autodiff.md): a gradient through it to a wrt it
 * depends on is an error that says so, never a wrong gradient; a wrt it
 * does not depend on still gets its gradient. */
/* A forced in-place write superseded by a later one keeps its recipe:
 * the gradient flows through it as if nothing had been forced. */
static void forced_write_superseded(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2}, 2), *z = vec((double[]){3, 4}, 2), *g = SENTINEL;
  kiln_tensor *a = kiln_zeros(KILN_F64, 1, (int64_t[]){4});
  assert_int_equal(kiln_copy_(kiln_narrow(a, 0, 0, 2), kiln_mul(x, x)), KILN_OK);
  assert_int_equal(kiln_realize(a), KILN_OK);
  assert_int_equal(kiln_copy_(kiln_narrow(a, 0, 2, 2), kiln_mul_scalar(z, 2)), KILN_OK);
  assert_int_equal(kiln_realize(a), KILN_OK);
  kiln_tensor *y = kiln_sum(kiln_mul(a, a), 0, NULL, false); /* sum(x^4) + 4 sum(z^2) */
  if (kiln_grad(&y, NULL, 1, &x, 1, &g) != KILN_OK) fail_msg("%s", kiln_last_error());
  expect_values_tol(g, (double[]){4, 32}, 2, 1e-12);
  assert_int_equal(kiln_grad(&y, NULL, 1, &z, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){24, 32}, 2, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* acc = x^4 = [1, 16], built by forced steps whose tensors are released
 * (acc = acc * x) and by forced in-place writes superseded by later ones
 * (out = out * x); returns sum(acc) + sum(out). */
static kiln_tensor *loss_over_orphans(kiln_tensor *x) {
  kiln_tensor *acc = kiln_clone(x), *out = kiln_clone(x);
  for (int i = 0; i < 3; i++) {
    kiln_tensor *next = kiln_mul(acc, x);
    assert_int_equal(kiln_realize(next), KILN_OK);
    kiln_release(acc);
    acc = next;
    assert_int_equal(kiln_copy_(out, kiln_mul(out, x)), KILN_OK);
    assert_int_equal(kiln_realize(out), KILN_OK);
  }
  return kiln_add(kiln_sum(acc, 0, NULL, false), kiln_sum(out, 0, NULL, false));
}

/* Forced values no tensor shows any more (released, or a version a later
 * write superseded) keep their recipes within the history budget, so the
 * gradient through them is exact; with no budget they let them go at
 * once, and a gradient through one is an error that says so. */
static void orphan_history(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = vec((double[]){1, 2}, 2), *g = SENTINEL, *y = loss_over_orphans(x);
  if (kiln_grad(&y, NULL, 1, &x, 1, &g) != KILN_OK) fail_msg("%s", kiln_last_error());
  expect_values_tol(g, (double[]){8, 64}, 2, 1e-12); /* 2 * 4x^3 */
  assert_true(graph_history_weight() > 0);
  graph_history_set_budget(0);
  assert_int_equal(graph_history_weight(), 0);
  y = loss_over_orphans(x), g = SENTINEL;
  int64_t pending = graph_pending_count();
  expect_rejected(kiln_grad(&y, NULL, 1, &x, 1, &g), &g, 1, pending, KILN_ERR_ARG, "recipe was released", "wrt 0",
                  NULL);
  graph_history_set_budget(-1);
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scalar_output),          cmocka_unit_test(unused_wrt_is_zero),
      cmocka_unit_test(views_route_gradients),  cmocka_unit_test(inplace_write_through_view),
      cmocka_unit_test(broadcast_sums),         cmocka_unit_test(forcing_midway_changes_nothing),
      cmocka_unit_test(second_derivative),      cmocka_unit_test(detach_stops_gradients),
      cmocka_unit_test(detach_through_every_reader), cmocka_unit_test(detach_survives_forcing),
      cmocka_unit_test(detach_second_order),
      cmocka_unit_test(errors),                 cmocka_unit_test(callback_in_path),
      cmocka_unit_test(errors_record_nothing),  cmocka_unit_test(written_after_read),
      cmocka_unit_test(map_callbacks_in_path),  cmocka_unit_test(forced_write_superseded),
      cmocka_unit_test(orphan_history),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
