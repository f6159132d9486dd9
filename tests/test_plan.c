/*
 * test_plan.c — the per-force plan (passes/plan.h) and the checks around
 * the schedule cache: a force writes no node outside its own pending
 * set; the fusion pass decides from plan entries (a stale row dependence
 * does not keep an expensive node fused); a schedule-cache entry whose
 * slots fall outside its schedule is refused; KILN_DEBUG_CACHE re-lowers
 * every hit and catches a binding that differs; a lowering fallback's
 * nested force keeps the plan's nodes alive; row reductions are fused
 * only where their kernel can walk their rows, so no lowering falls back.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "passes.h"
#include "rt_internal.h"
#include "kernel_util.h"
#include "test_util.h"

static kiln_tensor *ramp(int64_t rows, int64_t cols, double start, double step) {
  double v[256];
  assert_true(rows * cols <= 256);
  for (int64_t i = 0; i < rows * cols; i++) v[i] = start + step * (double)i;
  int64_t sizes[2] = {rows, cols};
  kiln_tensor *t = kiln_from_data(KILN_F64, 2, sizes, v);
  assert_int_equal(kiln_realize(t), KILN_OK);
  return t;
}

/* A realized input read by a force keeps every byte of its node: the
 * scheduler's marks go to the plan, not to nodes outside it. */
static void force_writes_no_outside_node(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = ramp(4, 8, -1, 0.25);
  graph_node *node = x->storage->version, before = *node;
  for (int rep = 0; rep < 3; rep++) { /* a miss, then schedule-cache hits */
    kiln_tensor *y = kiln_add(kiln_exp(x), kiln_mul_scalar(x, 2));
    assert_int_equal(kiln_realize(y), KILN_OK);
    double want[32];
    for (int i = 0; i < 32; i++) want[i] = exp(-1 + 0.25 * i) + 2 * (-1 + 0.25 * i);
    expect_values_tol(y, want, 32, 1e-12);
  }
  assert_true(node->plan_id == before.plan_id && node->plan_pos == before.plan_pos);
  assert_int_equal(memcmp(&node->attr, &before.attr, sizeof before.attr), 0);
  kiln_scope_end();
  expect_no_error();
}

/* Every collect takes a new id: marks of an earlier plan never match. */
static void plans_have_distinct_ids(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = ramp(2, 3, 0, 1);
  kiln_tensor *y = kiln_exp(kiln_add_scalar(x, 1));
  graph_node *root = y->storage->version;
  pass_plan a, b;
  assert_int_equal(rt_plan(&root, 1, false, &a), KILN_OK);
  assert_int_equal(rt_plan(&root, 1, false, &b), KILN_OK);
  assert_true(a.id != b.id);
  assert_int_equal(a.n, 2);
  assert_int_equal(pass_pos(&b, root), 1);
  assert_int_equal(pass_pos(&a, root), -1); /* b's collect re-marked it */
  assert_int_equal(pass_pos(&b, x->storage->version), -1);
  pass_plan_free(&a);
  pass_plan_free(&b);
  kiln_scope_end();
}

/* m = amax(x, rows) is a row reduction, but a reduction over the other
 * dim also reads it, so it is materialized; y = exp(x - m) then depends
 * on no fused row and, read twice and expensive, is materialized too
 * instead of being recomputed by both readers. */
static void stale_row_dependence_is_dropped(void **state) {
  rt_set_fusion(1); /* fusion decisions, also when the suite runs with KILN_FUSE=0 */
  kiln_scope_begin();
  kiln_tensor *x = ramp(4, 6, -2, 0.5);
  int d1 = 1, d0 = 0;
  kiln_tensor *m = kiln_amax(x, 1, &d1, true);
  kiln_tensor *y = kiln_exp(kiln_sub(x, m));
  kiln_tensor *a = kiln_sum(y, 1, &d1, true), *b = kiln_sum(y, 1, &d0, true);
  kiln_tensor *mm = kiln_sum(m, 1, &d0, true);
  kiln_tensor *out = kiln_add(kiln_add(kiln_mul(a, kiln_sum(b, 1, &d1, true)), mm), kiln_sum(y, 0, NULL, true));
  graph_node *root = out->storage->version;
  pass_plan p;
  assert_int_equal(rt_plan(&root, 1, true, &p), KILN_OK);
  int at_m = pass_pos(&p, m->storage->version), at_y = pass_pos(&p, y->storage->version);
  assert_true(at_m >= 0 && at_y >= 0);
  assert_false(p.e[at_m].fused);
  assert_false(p.e[at_y].row_dep);
  assert_false(p.e[at_y].fused);
  pass_plan_free(&p);
  /* the values: rows of x are increasing, so m is the last column */
  double xs[24], ys[24], sum_all = 0, col[6] = {0}, mm_v = 0;
  for (int i = 0; i < 24; i++) xs[i] = -2 + 0.5 * i;
  for (int r = 0; r < 4; r++) mm_v += xs[r * 6 + 5];
  for (int i = 0; i < 24; i++) {
    ys[i] = exp(xs[i] - xs[(i / 6) * 6 + 5]);
    sum_all += ys[i];
    col[i % 6] += ys[i];
  }
  double sum_b = 0;
  for (int c = 0; c < 6; c++) sum_b += col[c];
  double want[4];
  for (int r = 0; r < 4; r++) {
    double row = 0;
    for (int c = 0; c < 6; c++) row += ys[r * 6 + c];
    want[r] = row * sum_b + mm_v + sum_all;
  }
  expect_values_tol(out, want, 4, 1e-9);
  kiln_scope_end();
  rt_set_fusion(-1);
  expect_no_error();
}

/* A cached entry must lie inside its schedule: a binding slot past the
 * order, or an input past the node's inputs, is refused. */
static void invalid_entries_are_not_cached(void **state) {
  rt_decision decided[2] = {{.fused = false, .n_inputs = 1, .host = -1}, {.fused = false, .n_inputs = 2, .host = -1}};
  rt_sched_kernel k;
  memset(&k, 0, sizeof k);
  k.pos = 1;
  k.binding.n_inputs = 1;
  unsigned char key[3][16] = {{'t', 'e', 's', 't', 0}, {'t', 'e', 's', 't', 1}, {'t', 'e', 's', 't', 2}};
  k.binding.input_slot[0] = (pass_slot){.pos = 1, .input = 1}; /* valid */
  rt_schedule_insert(key[0], sizeof key[0], decided, 2, &k, 1);
  assert_non_null(rt_schedule_find(key[0], sizeof key[0]));
  k.binding.input_slot[0] = (pass_slot){.pos = 2, .input = 0}; /* past the order */
  rt_schedule_insert(key[1], sizeof key[1], decided, 2, &k, 1);
  assert_null(rt_schedule_find(key[1], sizeof key[1]));
  k.binding.input_slot[0] = (pass_slot){.pos = 0, .input = 1}; /* node 0 has one input */
  rt_schedule_insert(key[2], sizeof key[2], decided, 2, &k, 1);
  assert_null(rt_schedule_find(key[2], sizeof key[2]));
}

/* relu(a*b + c) * sigmoid(d) + s, its row softmax, and an in-place
 * write: forced again on new data with KILN_DEBUG_CACHE on, each hit is
 * lowered again and matches. */
static void debug_cache_checks_hits(void **state) {
  rt_set_debug_cache(1);
  for (int rep = 0; rep < 3; rep++) {
    kiln_scope_begin();
    kiln_tensor *a = ramp(3, 5, rep, 0.5), *b = ramp(3, 5, 1, -0.25), *c = ramp(3, 5, -2, 0.125);
    int64_t hits = rt_schedule_hits();
    kiln_tensor *y = kiln_add_scalar(kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(b)), 0.5 + rep);
    kiln_tensor *s = kiln_softmax(y, 1);
    kiln_tensor *w = kiln_clone(a);
    assert_int_equal(kiln_fill_(kiln_narrow(w, 1, 1, 2), -rep), KILN_OK);
    kiln_tensor *all[3] = {y, s, w};
    assert_int_equal(kiln_realize_many(all, 3), KILN_OK);
    if (rep > 0) assert_true(rt_schedule_hits() > hits);
    double want[15], sm[15], wv[15];
    for (int i = 0; i < 15; i++) {
      double av = rep + 0.5 * i, bv = 1 - 0.25 * i, cv = -2 + 0.125 * i, x = av * bv + cv;
      want[i] = (x > 0 ? x : 0) * (1 / (1 + exp(-bv))) + 0.5 + rep;
      wv[i] = (i % 5 == 1 || i % 5 == 2) ? -rep : av;
    }
    for (int r = 0; r < 3; r++) {
      double mx = -INFINITY, z = 0;
      for (int j = 0; j < 5; j++) mx = fmax(mx, want[r * 5 + j]);
      for (int j = 0; j < 5; j++) z += exp(want[r * 5 + j] - mx);
      for (int j = 0; j < 5; j++) sm[r * 5 + j] = exp(want[r * 5 + j] - mx) / z;
    }
    expect_values_tol(y, want, 15, 1e-12);
    expect_values_tol(s, sm, 15, 1e-12);
    expect_values_tol(w, wv, 15, 0);
    kiln_scope_end();
    expect_no_error();
  }
  rt_set_debug_cache(-1);
}

/* The check itself can fail: a cached kernel whose binding names another
 * input buffer, or other fill values, than a fresh lowering. */
static void debug_cache_check_catches_a_wrong_binding(void **state) {
  rt_set_fusion(1); /* one kernel reading a and b, also under KILN_FUSE=0 */
  kiln_scope_begin();
  kiln_tensor *a = ramp(2, 4, 0, 1), *b = ramp(2, 4, 5, -1);
  kiln_tensor *y = kiln_add_scalar(kiln_mul(a, b), 3.5); /* non-integral: an F64 fill */
  graph_node *root = y->storage->version;
  pass_plan p;
  assert_int_equal(rt_plan(&root, 1, true, &p), KILN_OK);
  rt_sched_kernel k;
  memset(&k, 0, sizeof k);
  kir_kernel kir;
  char err[256];
  assert_int_equal(pass_lower_node(&p, root, false, &kir, &k.binding, err, sizeof err), KILN_OK);
  bool hit;
  k.backend = rt_backend_for(root);
  assert_int_equal(rt_kernel_get(k.backend, &kir, &k.code, &hit, NULL, err, sizeof err), KILN_OK);
  snprintf(k.name, sizeof k.name, "%s", kir.name);
  kir_free(&kir);
  k.pos = pass_pos(&p, root);
  assert_int_equal(rt_check_cached_kernel(&p, root, &k, err, sizeof err), KILN_OK);
  rt_sched_kernel wrong = k;
  assert_int_equal(wrong.binding.n_inputs, 2);
  const graph_node *t = wrong.binding.inputs[0];
  wrong.binding.inputs[0] = wrong.binding.inputs[1];
  wrong.binding.inputs[1] = t;
  assert_int_equal(rt_check_cached_kernel(&p, root, &wrong, err, sizeof err), KILN_ERR_COMPILE);
  assert_non_null(strstr(err, "input buffer"));
  wrong = k;
  assert_true(wrong.binding.n_fargs >= 1);
  wrong.binding.fargs[0] += 1;
  assert_int_equal(rt_check_cached_kernel(&p, root, &wrong, err, sizeof err), KILN_ERR_COMPILE);
  assert_non_null(strstr(err, "float arguments"));
  pass_plan_free(&p);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* Two results of one loop over 33 inputs (in[0] read by both): more
 * buffers than one kernel takes, so the node the second's kernel would
 * store (fuse.c rule 7) is lowered alone after a nested force of it
 * (realize.c, lower_alone): a lowering fallback at run time. Their
 * values are checked against want0/want1 (element j of input i is
 * v(i, j), in[0] given). */
#define WIDE 33
static double wide_v(int i, int j) { return (double)((i * 7 + j * 3) % 11) - 5; }

static void wide_pair(kiln_tensor *const *in, kiln_tensor **out) {
  kiln_tensor *a = in[1], *b = in[21];
  for (int i = 2; i <= 20; i++) a = kiln_add(a, in[i]);
  for (int i = 22; i < WIDE; i++) b = kiln_sub(b, in[i]);
  out[0] = kiln_add(a, in[0]);
  out[1] = kiln_mul(b, in[0]);
}

/* wide_pair's values at element j, in[0]'s element x0. */
static void wide_want(int j, double x0, double *w0, double *w1) {
  double a = wide_v(1, j), b = wide_v(21, j);
  for (int i = 2; i <= 20; i++) a += wide_v(i, j);
  for (int i = 22; i < WIDE; i++) b -= wide_v(i, j);
  *w0 = a + x0, *w1 = b * x0;
}

/* Inputs 1.. of wide_pair: realized buffers of n elements of dt. */
static void wide_inputs(kiln_dtype dt, int64_t n, kiln_tensor **in) {
  for (int i = 1; i < WIDE; i++) {
    double v[16];
    assert_true(n <= 16);
    for (int j = 0; j < n; j++) v[j] = wide_v(i, j);
    kiln_tensor *t = kiln_from_data(KILN_F64, 1, &n, v);
    assert_int_equal(kiln_realize(t), KILN_OK);
    in[i] = kiln_to_dtype(t, dt);
    assert_int_equal(kiln_realize(in[i]), KILN_OK);
  }
}

/* A lowering fallback realizes the stored node in a nested force. That
 * force realizes nodes of the outer plan (the first result and the chain
 * it reads), which drop their inputs; the outer plan holds its nodes (pass_plan_hold), so
 * none it still points at is freed (ASan checks). */
static void fallback_keeps_the_plan_alive(void **state) {
  kiln_dtype dtypes[] = {KILN_I16, KILN_I32, KILN_F32};
  for (int d = 0; d < 3; d++) {
    kiln_scope_begin();
    int64_t n = 5;
    kiln_tensor *in[WIDE], *out[2];
    wide_inputs(dtypes[d], n, in);
    double v0[5] = {2, -1, 0, 3, 1};
    in[0] = kiln_to_dtype(kiln_from_data(KILN_F64, 1, &n, v0), dtypes[d]);
    assert_int_equal(kiln_realize(in[0]), KILN_OK);
    in[0] = kiln_mul_scalar(in[0], 1); /* (pending: read by both results) */
    wide_pair(in, out);
    int64_t before = rt_lowering_fallbacks();
    rt_set_fusion(1); /* the fallback is fusion's */
    assert_int_equal(kiln_realize_many(out, 2), KILN_OK);
    rt_set_fusion(-1);
    assert_true(rt_lowering_fallbacks() > before);
    double w0[5], w1[5];
    for (int j = 0; j < 5; j++) wide_want(j, v0[j], &w0[j], &w1[j]);
    expect_values_tol(out[0], w0, 5, 0);
    expect_values_tol(out[1], w1, 5, 0);
    kiln_scope_end();
    expect_no_error();
  }
}

/* The same fallback late in a force, after earlier nodes of the plan ran
 * and were freed (their last reader ran and no handle holds them): the
 * plan holds only what is still to run and what that reaches, never a
 * node already freed (ASan, or valgrind, checks). */
static void fallback_after_freed_nodes(void **state) {
  kiln_scope_begin();
  int64_t n = 4;
  kiln_tensor *in[WIDE], *out[3];
  wide_inputs(KILN_F64, n, in);
  kiln_scope_begin(); /* the intermediates' handles go before the force */
  /* integer values keep no recipe: the first scan is freed once the
   * second ran, before the wide pair's fallback */
  kiln_tensor *scan = kiln_cumsum(kiln_arange(KILN_I64, 0, 5, 1), 0);              /* 0 1 3 6 10 */
  kiln_tensor *q = kiln_sum(kiln_cumsum(kiln_mul_scalar(scan, 2), 0), 0, NULL, false); /* 70 */
  in[0] = kiln_to_dtype(kiln_arange(KILN_I64, 1, 5, 1), KILN_F64); /* 1 2 3 4 */
  assert_int_equal(kiln_realize(in[0]), KILN_OK);
  in[0] = kiln_mul_scalar(in[0], 1); /* (pending: read by both results) */
  wide_pair(in, out);
  out[2] = kiln_keep(kiln_to_dtype(q, KILN_F64)); /* q first in post-order */
  out[0] = kiln_keep(out[0]), out[1] = kiln_keep(out[1]);
  kiln_scope_end();
  int64_t before = rt_lowering_fallbacks();
  rt_set_fusion(1);
  kiln_tensor *order[3] = {out[2], out[0], out[1]};
  assert_int_equal(kiln_realize_many(order, 3), KILN_OK);
  rt_set_fusion(-1);
  assert_true(rt_lowering_fallbacks() > before);
  double w0[4], w1[4];
  for (int j = 0; j < 4; j++) wide_want(j, j + 1, &w0[j], &w1[j]);
  expect_values_tol(out[0], w0, 4, 0);
  expect_values_tol(out[1], w1, 4, 0);
  expect_values_tol(out[2], (const double[]){70}, 1, 0);
  kiln_scope_end();
  expect_no_error();
}

/* The same fallback after kernels of the force already ran: a
 * masked_fill_ of an input's source runs first and drops nodes of the
 * plan; the nested force comes after. The plan held every node of its
 * order then, freed ones included (fuzz_program found the
 * heap-use-after-free, with a fallback of a reduction fused into a
 * masked_fill_, which fuse.c now materializes); it holds only what the
 * rest of the schedule reaches. */
static void fallback_after_kernels_ran(void **state) {
  kiln_dtype dtypes[] = {KILN_I16, KILN_F32, KILN_I64};
  for (int d = 0; d < 3; d++) {
    kiln_scope_begin();
    int64_t n = 3;
    kiln_tensor *in[WIDE], *out[2];
    wide_inputs(dtypes[d], n, in);
    kiln_tensor *t = kiln_to_dtype(kiln_arange(KILN_I64, 3, 9, 2), dtypes[d]); /* [3, 5, 7] */
    bool m3[3] = {1, 0, 1};
    assert_int_equal(kiln_masked_fill_(t, kiln_from_data(KILN_BOOL, 1, &n, m3), -2), KILN_OK);
    in[0] = kiln_mul_scalar(t, 1);
    wide_pair(in, out);
    int64_t before = rt_lowering_fallbacks();
    rt_set_fusion(1);
    assert_int_equal(kiln_realize_many(out, 2), KILN_OK);
    rt_set_fusion(-1);
    assert_true(rt_lowering_fallbacks() > before);
    double x0[3] = {-2, 5, -2}, w0[3], w1[3];
    for (int j = 0; j < 3; j++) wide_want(j, x0[j], &w0[j], &w1[j]);
    expect_values_tol(out[0], w0, 3, 0);
    expect_values_tol(out[1], w1, 3, 0);
    expect_values_tol(t, x0, 3, 0);
    kiln_scope_end();
    expect_no_error();
  }
}

/* A row sum read as [O] by an in-place write's chain (a bias gradient,
 * [1, O, L] summed over L, and an optimizer-like step on the bias and
 * its moment): the write cannot walk the sum's rows, so the sum is
 * materialized and the chain stays one write kernel per buffer (fuse.c,
 * fit_rows_once), not one kernel per node of the chain. Values against
 * the host. */
static void row_values_keep_their_chain(void **state) {
  (void)state;
  rt_set_fusion(1);
  kiln_scope_begin();
  double xv[4 * 50], gv[4 * 50], bv[4] = {0.5, -1, 2, 0}, mv[4] = {0.1, 0.2, -0.3, 0.4};
  for (int i = 0; i < 200; i++) xv[i] = 0.01 * i - 1, gv[i] = 0.5 - 0.005 * i;
  kiln_tensor *x = kiln_from_data(KILN_F64, 3, (int64_t[]){1, 4, 50}, xv);
  kiln_tensor *g = kiln_from_data(KILN_F64, 3, (int64_t[]){1, 4, 50}, gv);
  kiln_tensor *b = kiln_from_data(KILN_F64, 1, (int64_t[]){4}, bv), *m = kiln_from_data(KILN_F64, 1, (int64_t[]){4}, mv);
  kiln_tensor *y = kiln_add(x, kiln_view(b, 3, (int64_t[]){1, 4, 1})), *gb = NULL;
  assert_int_equal(kiln_grad(&y, &g, 1, &b, 1, &gb), KILN_OK);
  kiln_tensor *m2 = kiln_add(kiln_mul_scalar(m, 0.9), kiln_mul_scalar(gb, 0.1));
  kiln_tensor *nb = kiln_sub(b, kiln_div(m2, kiln_add_scalar(kiln_sqrt(kiln_mul(gb, gb)), 1e-8)));
  assert_int_equal(kiln_copy_(b, nb), KILN_OK);
  int64_t fallbacks = rt_lowering_fallbacks();
  kiln_profile_begin();
  assert_int_equal(kiln_realize(b), KILN_OK);
  kiln_profile_end();
  assert_int_equal(kiln_profile_count(), 2); /* the row sum, the write */
  assert_int_equal(rt_lowering_fallbacks(), fallbacks);
  double want[4];
  for (int o = 0; o < 4; o++) {
    double s = 0;
    for (int l = 0; l < 50; l++) s += gv[o * 50 + l];
    want[o] = bv[o] - (0.9 * mv[o] + 0.1 * s) / (sqrt(s * s) + 1e-8);
  }
  expect_values_tol(b, want, 4, 1e-12);
  kiln_scope_end();
  expect_no_error();
  rt_set_fusion(-1);
}

/* Row reductions that do not fit their reader's kernel are materialized
 * by the fusion pass, so no lowering falls back and the schedule is
 * cached (fuse.c, fit_rows): the main job's loss (the mean of
 * log_softmax · one-hot over all elements: a reduction over other rows
 * than the softmax's, read through a keepdim = false view), its
 * accuracy (argmax along rows compared with labels, then summed) and a
 * row softmax read through a flattening reshape; an integer matmul
 * (cast, product, row sum and cast: the sum read without its reduced
 * dim) is one kernel; a masked_fill_ of a row maximum. Forced twice on
 * new data: the second force is a schedule-cache hit. Values against
 * references computed here. */
static void rows_fit_their_kernels(void **state) {
  rt_set_fusion(1);
  for (int rep = 0; rep < 2; rep++) {
    kiln_scope_begin();
    kiln_tensor *x = ramp(4, 3, -1 + rep, 0.5), *lab = kiln_from_data(KILN_I64, 1, (int64_t[]){4}, (int64_t[]){2, 0, 1, 2});
    kiln_tensor *logp = kiln_log_softmax(x, -1);
    kiln_tensor *onehot = kiln_to_dtype(kiln_eq(kiln_unsqueeze(kiln_arange(KILN_I64, 0, 3, 1), 0),
                                                kiln_unsqueeze(lab, 1)), KILN_F64);
    kiln_tensor *loss = kiln_div_scalar(kiln_neg(kiln_sum(kiln_mul(onehot, logp), 0, NULL, false)), 4);
    kiln_tensor *correct = kiln_sum(kiln_eq(kiln_argmax(x, -1, false), lab), 0, NULL, false);
    kiln_tensor *flat = kiln_add(kiln_reshape(kiln_softmax(x, 1), 1, (int64_t[]){12}), kiln_arange(KILN_F64, 0, 12, 1));
    kiln_tensor *ia = kiln_to_dtype(x, KILN_I32), *ib = kiln_to_dtype(kiln_t(x), KILN_I32);
    kiln_tensor *imm = kiln_matmul(ib, ia);
    kiln_tensor *mx = kiln_amax(x, 1, (int[]){1}, false);
    bool yes[4] = {1, 0, 1, 0};
    assert_int_equal(kiln_masked_fill_(mx, kiln_from_data(KILN_BOOL, 1, (int64_t[]){4}, yes), 7), KILN_OK);
    int64_t fallbacks = rt_lowering_fallbacks(), hits = rt_schedule_hits();
    kiln_profile_begin();
    kiln_tensor *all[5] = {loss, correct, flat, imm, mx};
    assert_int_equal(kiln_realize_many(all, 5), KILN_OK);
    kiln_profile_end();
    assert_int_equal(rt_lowering_fallbacks(), fallbacks);
    if (rep > 0) assert_true(rt_schedule_hits() > hits);
    double xs[12], want_loss = 0, want_flat[12], want_mm[9], want_mx[4];
    int64_t labs[4] = {2, 0, 1, 2};
    double want_correct = 0;
    for (int i = 0; i < 12; i++) xs[i] = -1 + rep + 0.5 * i;
    for (int r = 0; r < 4; r++) {
      double m = xs[r * 3 + 2], z = 0; /* rows increase: the last column is the max */
      for (int c = 0; c < 3; c++) z += exp(xs[r * 3 + c] - m);
      want_loss -= xs[r * 3 + labs[r]] - m - log(z);
      want_correct += labs[r] == 2;
      for (int c = 0; c < 3; c++) want_flat[r * 3 + c] = exp(xs[r * 3 + c] - m) / z + r * 3 + c;
      want_mx[r] = r % 2 == 0 ? 7 : m;
    }
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++) {
        want_mm[i * 3 + j] = 0;
        for (int r = 0; r < 4; r++) want_mm[i * 3 + j] += (double)(int)xs[r * 3 + i] * (double)(int)xs[r * 3 + j];
      }
    expect_values_tol(loss, (const double[]){want_loss / 4}, 1, 1e-12);
    expect_values_tol(correct, &want_correct, 1, 0);
    expect_values_tol(flat, want_flat, 12, 1e-12);
    expect_values_tol(imm, want_mm, 9, 0);
    expect_values_tol(mx, want_mx, 4, 0);
    bool one_matmul_kernel = false;
    kiln_kernel_record rec;
    for (int i = 0; i < kiln_profile_count(); i++) {
      assert_int_equal(kiln_profile_get(i, &rec), KILN_OK);
      one_matmul_kernel |= strstr(rec.name, "mul_sum_cast") != NULL;
    }
    assert_true(one_matmul_kernel);
    kiln_scope_end();
    expect_no_error();
  }
  rt_set_fusion(-1);
}

/* Every kind of node a kernel computes has a row in lower.c's table of
 * kinds: its kernel lowers, and its name starts with the kind's letter. */
static void every_kind_has_a_lowering(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = ramp(2, 3, -1, 0.5);
  int64_t idx_sizes[2] = {2, 3};
  int64_t idx_v[6] = {2, 0, 1, 1, 2, 0};
  kiln_tensor *idx = kiln_from_data(KILN_I64, 2, idx_sizes, idx_v);
  kiln_tensor *w = kiln_clone(x);
  assert_int_equal(kiln_fill_(kiln_narrow(w, 1, 0, 1), 7), KILN_OK);
  int d1 = 1;
  struct { kiln_tensor *t; char prefix; } cases[] = {
      {kiln_full(KILN_F32, 2, idx_sizes, 1.5), 'S'},
      {kiln_exp(x), 'E'},
      {kiln_add(x, x), 'E'},
      {kiln_where(kiln_gt_scalar(x, 0), x, kiln_neg(x)), 'E'},
      {kiln_to_dtype(x, KILN_F32), 'C'},
      {kiln_sum(x, 1, &d1, false), 'R'},
      {kiln_cumsum(x, 1), 'P'},
      {w, 'A'},
      {kiln_gather(x, 1, idx), 'G'},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kir_kernel k;
    lower_for_test(cases[i].t, &k);
    if (k.name[0] != cases[i].prefix) fail_msg("case %zu: kernel %s, expected prefix %c", i, k.name, cases[i].prefix);
    kir_free(&k);
  }
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(force_writes_no_outside_node),
      cmocka_unit_test(plans_have_distinct_ids),
      cmocka_unit_test(stale_row_dependence_is_dropped),
      cmocka_unit_test(invalid_entries_are_not_cached),
      cmocka_unit_test(debug_cache_checks_hits),
      cmocka_unit_test(debug_cache_check_catches_a_wrong_binding),
      cmocka_unit_test(fallback_after_kernels_ran),
      cmocka_unit_test(fallback_keeps_the_plan_alive),
      cmocka_unit_test(fallback_after_freed_nodes),
      cmocka_unit_test(rows_fit_their_kernels),
      cmocka_unit_test(row_values_keep_their_chain),
      cmocka_unit_test(every_kind_has_a_lowering),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
