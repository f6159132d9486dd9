/*
 * test_attention_fused.c — the fused attention kernel (ATTENTION and
 * ATTENTION_BWD: ops/attention_nodes.c, runtime/attention_kernels.c)
 * that kiln_scaled_dot_product_attention records: values and gradients
 * against the unfused composition (KILN_ATTENTION=unfused) over lengths
 * that cross the kernel's 64-row and 64-key blocks, every mask kind and
 * F32/F64; that no [L, S] buffer is allocated (the allocator's peak) and
 * the profile names the two kernels; empty dims; a row with no key
 * kept; the backward when the forward's result was overwritten in
 * place; and results identical for 1 and 2 threads (the backward's two
 * schedules). test_attention.c checks values against a loop and
 * gradients by differences; tests/python/test_attention_torch.py
 * against Torch.
 */
#define _GNU_SOURCE /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "kiln/profile.h"
#include "test_util.h"

#define V(...) ((int64_t[]){__VA_ARGS__})

void rt_set_fusion(int enabled); /* runtime/rt_internal.h: 1 on, 0 off, -1 KILN_FUSE's */

enum { MASK_NONE, MASK_BOOL, MASK_FLOAT, MASK_CAUSAL };

static void set_fused(bool on) {
  if (on) unsetenv("KILN_ATTENTION");
  else setenv("KILN_ATTENTION", "unfused", 1);
}

/* The largest |a - b| over two tensors of the same sizes (as F64; NaN
 * in both counts as equal, in one as infinite). */
static double max_diff(kiln_tensor *a, kiln_tensor *b) {
  int64_t n = kiln_numel(a);
  assert_int_equal(kiln_numel(b), n);
  double *x = malloc(sizeof *x * (size_t)(n ? n : 1)), *y = malloc(sizeof *y * (size_t)(n ? n : 1));
  kiln_scope_begin();
  assert_int_equal(kiln_read(kiln_to_dtype(a, KILN_F64), x, sizeof *x * (size_t)n), KILN_OK);
  assert_int_equal(kiln_read(kiln_to_dtype(b, KILN_F64), y, sizeof *y * (size_t)n), KILN_OK);
  kiln_scope_end();
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(x[i]) && isnan(y[i])) continue;
    double d = isnan(x[i]) || isnan(y[i]) ? INFINITY : fabs(x[i] - y[i]);
    m = d > m ? d : m;
  }
  free(x);
  free(y);
  return m;
}

/* One problem: q [B, H, L, E], k [B, H, S, E], v [B, 1, S, Ev] (v
 * broadcast over the heads), the mask [L, S] (BOOL: [B, 1, L, S]); B, H
 * 2, 3 when 0. */
typedef struct problem {
  int64_t L, S, E, Ev;
  int mask;
  kiln_dtype dtype;
  int64_t B, H;
} problem;

typedef struct inputs {
  kiln_tensor *q, *k, *v, *m, *c;
} inputs;

static inputs make(const problem *p, uint64_t seed) {
  kiln_manual_seed(seed);
  kiln_dtype d = p->dtype;
  int64_t B = p->B ? p->B : 2, H = p->H ? p->H : 3;
  inputs x = {.q = kiln_randn(d, 4, V(B, H, p->L, p->E)), .k = kiln_randn(d, 4, V(B, H, p->S, p->E)),
              .v = kiln_randn(d, 4, V(B, 1, p->S, p->Ev)), .c = kiln_randn(d, 4, V(B, H, p->L, p->Ev))};
  if (p->mask == MASK_FLOAT) x.m = kiln_randn(d, 2, V(p->L, p->S));
  if (p->mask == MASK_BOOL) /* key 0 always kept: no row without keys */
    x.m = kiln_logical_or(kiln_lt(kiln_rand(KILN_F32, 4, V(B, 1, p->L, p->S)), kiln_scalar(KILN_F32, 0.5)),
                          kiln_eq(kiln_view(kiln_arange(KILN_I64, 0, (double)p->S, 1), 2, V(1, p->S)),
                                  kiln_scalar(KILN_I64, 0)));
  kiln_tensor *all[] = {x.q, x.k, x.v, x.c, x.m};
  assert_int_equal(kiln_realize_many(all, x.m ? 5 : 4), KILN_OK);
  return x;
}

/* o and the gradients of sum(o * c) w.r.t. q, k, v (and a float mask)
 * into out[0..4]; forced. */
static int run(const inputs *x, const problem *p, kiln_tensor **out) {
  out[0] = kiln_scaled_dot_product_attention(x->q, x->k, x->v, x->m, 0, p->mask == MASK_CAUSAL, 0);
  kiln_tensor *loss = kiln_sum(kiln_mul(out[0], x->c), 0, NULL, false);
  kiln_tensor *wrt[] = {x->q, x->k, x->v, x->m};
  int n = p->mask == MASK_FLOAT ? 4 : 3;
  assert_int_equal(kiln_grad(&loss, NULL, 1, wrt, n, out + 1), KILN_OK);
  assert_int_equal(kiln_realize_many(out, n + 1), KILN_OK);
  return n + 1;
}

static void compare(const problem *p, uint64_t seed, double tol) {
  kiln_scope_begin();
  inputs x = make(p, seed);
  kiln_tensor *fused[5], *unfused[5];
  set_fused(true);
  int n = run(&x, p, fused);
  set_fused(false);
  run(&x, p, unfused);
  set_fused(true);
  for (int i = 0; i < n; i++) {
    double d = max_diff(fused[i], unfused[i]);
    if (!(d <= tol))
      fail_msg("L %lld S %lld E %lld Ev %lld mask %d %s: output %d differs by %g", (long long)p->L, (long long)p->S,
               (long long)p->E, (long long)p->Ev, p->mask, kiln_dtype_name(p->dtype), i, d);
  }
  kiln_scope_end();
  expect_no_error();
}

/* Lengths around the 64-blocks, a head dim past the micro-kernel's
 * tile, L != S with causal masks (blocks skipped) and every mask kind. */
static void matches_the_composition(void **state) {
  (void)state;
  static const int64_t shapes[][4] = {{64, 64, 16, 16}, {65, 130, 33, 7}, {130, 63, 8, 40}, {1, 200, 70, 1},
                                      {150, 1, 5, 3}};
  uint64_t seed = 1;
  for (int s = 0; s < 5; s++)
    for (int mask = MASK_NONE; mask <= MASK_CAUSAL; mask++) {
      problem p = {shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], mask, KILN_F64, 0, 0};
      compare(&p, seed++, 1e-12);
      p.dtype = KILN_F32;
      compare(&p, seed++, 2e-4);
    }
}

/* Forward and backward of [1, 1, 4096, 8] against 4200 keys: the
 * allocator's peak over the force stays below a quarter of the [L, S]
 * scores (4096 × 4200 F32, 65.6 MiB; the unfused chain makes several of
 * them) — what it makes is O(L·E): q, k, v, o and their gradients, the
 * kernels' blocks and each thread's panels of the operands (E rounded
 * up to the micro-kernel's NR) — and the profile names the two kernels
 * and no product or kernel of the scores' shape. */
static void stores_no_scores(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_manual_seed(2);
  kiln_tensor *q = kiln_randn(KILN_F32, 4, V(1, 1, 4096, 8)), *k = kiln_randn(KILN_F32, 4, V(1, 1, 4200, 8));
  kiln_tensor *v = kiln_randn(KILN_F32, 4, V(1, 1, 4200, 8)), *c = kiln_randn(KILN_F32, 4, V(1, 1, 4096, 8));
  kiln_tensor *all[] = {q, k, v, c};
  assert_int_equal(kiln_realize_many(all, 4), KILN_OK);
  kiln_engine_stats before, after;
  assert_int_equal(kiln_engine_stats_get(&before), KILN_OK);
  kiln_engine_stats_reset_peak();
  kiln_profile_begin();
  kiln_tensor *o = kiln_scaled_dot_product_attention(q, k, v, NULL, 0, true, 0), *g[3];
  kiln_tensor *loss = kiln_sum(kiln_mul(o, c), 0, NULL, false);
  assert_int_equal(kiln_grad(&loss, NULL, 1, (kiln_tensor *[]){q, k, v}, 3, g), KILN_OK);
  assert_int_equal(kiln_realize_many(g, 3), KILN_OK);
  kiln_profile_end();
  assert_int_equal(kiln_engine_stats_get(&after), KILN_OK);
  int64_t added = after.allocator_peak_bytes - before.allocator_live_bytes, scores = INT64_C(4096) * 4200 * 4;
  if (added >= scores / 4)
    fail_msg("the force's buffers peaked at %lld bytes, not below a quarter of the scores' %lld", (long long)added,
             (long long)scores);
  int fwd = 0, bwd = 0;
  for (int i = 0; i < kiln_profile_count(); i++) {
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    fwd += strcmp(r.name, "attention_1x4096x4200x8") == 0;
    bwd += strcmp(r.name, "attention_bwd_1x4096x4200x8") == 0;
    if (strstr(r.name, "4096x4200")) assert_non_null(strstr(r.name, "attention")); /* no [L, S] GEMM or kernel */
  }
  assert_int_equal(fwd, 1);
  assert_int_equal(bwd, 1);
  kiln_scope_end();
  expect_no_error();
}

/* S = 0: every weight row is empty, o = 0 (p·v over no keys), its
 * gradients 0; L = 0 and Ev = 0: empty results; E = 0: equal scores,
 * o the mean of v's rows. */
static void empty_dims(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *q = kiln_randn(KILN_F32, 3, V(2, 5, 4)), *k = kiln_zeros(KILN_F32, 3, V(2, 0, 4));
  kiln_tensor *v = kiln_zeros(KILN_F32, 3, V(2, 0, 3)), *g[3];
  kiln_tensor *o = kiln_scaled_dot_product_attention(q, k, v, NULL, 0, false, 0);
  double zeros[40] = {0};
  expect_values_tol(o, zeros, 30, 0);
  kiln_tensor *loss = kiln_sum(o, 0, NULL, false);
  assert_int_equal(kiln_grad(&loss, NULL, 1, (kiln_tensor *[]){q, k, v}, 3, g), KILN_OK);
  expect_values_tol(g[0], zeros, 40, 0);
  assert_int_equal(kiln_numel(g[1]), 0);
  o = kiln_scaled_dot_product_attention(kiln_zeros(KILN_F32, 2, V(0, 4)), kiln_ones(KILN_F32, 2, V(3, 4)),
                                        kiln_ones(KILN_F32, 2, V(3, 2)), NULL, 0, true, 0);
  assert_int_equal(kiln_realize(o), KILN_OK);
  assert_int_equal(kiln_numel(o), 0);
  o = kiln_scaled_dot_product_attention(q, kiln_ones(KILN_F32, 3, V(2, 3, 4)), kiln_ones(KILN_F32, 3, V(2, 3, 0)),
                                        NULL, 0, false, 0);
  assert_int_equal(kiln_realize(o), KILN_OK);
  assert_int_equal(kiln_numel(o), 0);
  double vals[] = {1, 2, 3, 4, 5, 6}, mean[] = {3, 4, 3, 4};
  o = kiln_scaled_dot_product_attention(kiln_zeros(KILN_F64, 2, V(2, 0)), kiln_zeros(KILN_F64, 2, V(3, 0)),
                                        kiln_from_data(KILN_F64, 2, V(3, 2), vals), NULL, 0, false, 0);
  expect_values_tol(o, mean, 4, 1e-15);
  kiln_scope_end();
  expect_no_error();
}

/* A query whose BOOL mask keeps no key gives NaN, as Torch's math path
 * (and the composition); the other rows are finite. */
static void row_without_keys_is_nan(void **state) {
  (void)state;
  kiln_scope_begin();
  bool keep[] = {1, 0, 1, 0, 0, 0, 0, 1, 1};
  kiln_tensor *x = kiln_randn(KILN_F32, 2, V(3, 4));
  kiln_tensor *o = kiln_scaled_dot_product_attention(x, x, x, kiln_from_data(KILN_BOOL, 2, V(3, 3), keep), 0,
                                                     false, 0);
  float got[12];
  assert_int_equal(kiln_read(o, got, sizeof got), KILN_OK);
  for (int i = 0; i < 12; i++) assert_true(i / 4 == 1 ? isnan(got[i]) : isfinite(got[i]));
  kiln_scope_end();
  expect_no_error();
}

/* The forward's result taken over by an in-place write: the rule cannot
 * read O (D = rowsum(dO ∘ O) needs it) any more and computes it again. */
static void backward_after_in_place_write(void **state) {
  (void)state;
  problem p = {70, 90, 8, 6, MASK_FLOAT, KILN_F64, 0, 0};
  kiln_scope_begin();
  inputs x = make(&p, 9);
  kiln_tensor *want[5], *g[4];
  run(&x, &p, want);
  kiln_tensor *o = kiln_scaled_dot_product_attention(x.q, x.k, x.v, x.m, 0, false, 0);
  kiln_tensor *loss = kiln_sum(kiln_mul(o, x.c), 0, NULL, false);
  assert_int_equal(kiln_realize(loss), KILN_OK);
  assert_int_equal(kiln_fill_(o, 0), KILN_OK); /* o's storage is the attention node's: its buffer is written */
  assert_int_equal(kiln_realize(o), KILN_OK);
  assert_int_equal(kiln_grad(&loss, NULL, 1, (kiln_tensor *[]){x.q, x.k, x.v, x.m}, 4, g), KILN_OK);
  for (int i = 0; i < 4; i++) assert_true(max_diff(g[i], want[i + 1]) <= 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* One batch (the backward's two sweeps at 2 threads, one sweep at 1):
 * the same bits whatever the thread count. */
static void same_bits_for_any_thread_count(void **state) {
  (void)state;
  problem p = {150, 170, 24, 20, MASK_CAUSAL, KILN_F32, 1, 1};
  kiln_scope_begin();
  inputs x = make(&p, 4);
  kiln_tensor *one[4], *two[4];
  kiln_set_num_threads(1);
  run(&x, &p, one);
  kiln_set_num_threads(2);
  run(&x, &p, two);
  for (int i = 0; i < 4; i++) assert_true(max_diff(one[i], two[i]) == 0);
  kiln_scope_end();
  expect_no_error();
}

/* --------------------------------------- attention written out by hand */

/* softmax(q·kᵀ / sqrt(E) + mask)·v written as a user would (the scale a
 * division, the causal mask two aranges); `near` makes it almost
 * attention: 1 a mask that reads the scores, 2 log_softmax. */
static kiln_tensor *by_hand(const inputs *x, const problem *p, int near, kiln_tensor **scores) {
  kiln_tensor *s = kiln_div_scalar(kiln_matmul(x->q, kiln_transpose(x->k, -2, -1)), sqrt((double)p->E));
  *scores = s;
  kiln_tensor *ninf = kiln_scalar(p->dtype, -INFINITY);
  if (p->mask == MASK_CAUSAL) {
    kiln_tensor *row = kiln_view(kiln_arange(KILN_I64, 0, (double)p->L, 1), 2, V(p->L, 1));
    kiln_tensor *col = kiln_view(kiln_arange(KILN_I64, 0, (double)p->S, 1), 2, V(1, p->S));
    s = kiln_where(kiln_le(col, row), s, ninf);
  }
  if (p->mask == MASK_BOOL) s = kiln_where(x->m, s, ninf);
  if (p->mask == MASK_FLOAT) s = kiln_add(s, x->m);
  if (near == 1) s = kiln_where(kiln_gt(s, kiln_scalar(p->dtype, -1)), s, ninf);
  return kiln_matmul(near == 2 ? kiln_log_softmax(s, -1) : kiln_softmax(s, -1), x->v);
}

/* o by hand and the gradients of sum(o * c) w.r.t. q, k, v (a float mask,
 * and the scores when `wrt_scores`) into out[]; kernels named attention*
 * counted into *fused. */
static int run_by_hand(const inputs *x, const problem *p, int near, bool wrt_scores, kiln_tensor **out, int *fused) {
  kiln_profile_begin();
  kiln_tensor *scores;
  out[0] = by_hand(x, p, near, &scores);
  kiln_tensor *loss = kiln_sum(kiln_mul(out[0], x->c), 0, NULL, false);
  kiln_tensor *wrt[5] = {x->q, x->k, x->v};
  int n = 3;
  if (p->mask == MASK_FLOAT) wrt[n++] = x->m;
  if (wrt_scores) wrt[n++] = scores;
  assert_int_equal(kiln_grad(&loss, NULL, 1, wrt, n, out + 1), KILN_OK);
  assert_int_equal(kiln_realize_many(out, n + 1), KILN_OK);
  kiln_profile_end();
  *fused = 0;
  for (int i = 0; i < kiln_profile_count(); i++) {
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    *fused += strncmp(r.name, "attention", 9) == 0;
  }
  return n + 1;
}

/* The hand-written chain, with and without KILN_ATTENTION=unfused: the
 * same values within tol; *fused_runs: attention kernels in the first. */
static void compare_by_hand(const problem *p, int near, bool wrt_scores, double tol, int *fused_runs) {
  kiln_scope_begin();
  inputs x = make(p, 21);
  kiln_tensor *a[6], *b[6];
  int unfused_runs;
  int n = run_by_hand(&x, p, near, wrt_scores, a, fused_runs);
  set_fused(false);
  run_by_hand(&x, p, near, wrt_scores, b, &unfused_runs);
  set_fused(true);
  assert_int_equal(unfused_runs, 0);
  for (int i = 0; i < n; i++) {
    double d = max_diff(a[i], b[i]);
    if (!(d <= tol)) fail_msg("mask %d near %d: output %d differs by %g", p->mask, near, i, d);
  }
  kiln_scope_end();
  expect_no_error();
}

/* Written by hand, attention runs as the fused forward and backward
 * (two attention kernels) for every mask kind, with the gradients of the
 * composition. Fusion pinned on, whatever KILN_FUSE says: under
 * KILN_FUSE=0 (one kernel per node) the forward is the composition's,
 * the backward still the fused one. */
static void by_hand_fuses(void **state) {
  (void)state;
  rt_set_fusion(1);
  for (int mask = MASK_NONE; mask <= MASK_CAUSAL; mask++) {
    problem p = {100, 130, 16, 12, mask, KILN_F64, 0, 0};
    int runs;
    compare_by_hand(&p, 0, false, 1e-12, &runs);
    assert_int_equal(runs, 2);
  }
  rt_set_fusion(-1);
}

/* Almost attention (a mask that reads the scores; log_softmax) computes
 * the composition's values, unfused; a gradient w.r.t. the scores
 * themselves keeps the forward fused but not the backward. */
static void near_misses_stay_unfused(void **state) {
  (void)state;
  problem p = {70, 90, 8, 6, MASK_FLOAT, KILN_F64, 0, 0};
  int runs;
  compare_by_hand(&p, 1, false, 1e-12, &runs);
  assert_int_equal(runs, 0);
  compare_by_hand(&p, 2, false, 1e-12, &runs);
  assert_int_equal(runs, 0);
  compare_by_hand(&p, 0, true, 1e-12, &runs);
  assert_int_equal(runs, 0); /* the backward reads the scores' chain: the forward's is not private either */
}

/* The hand-written forward and backward of [1, 1, 4096, 8] × 4200 keys
 * make no [L, S] buffer either (fusion pinned on, as by_hand_fuses). */
static void by_hand_stores_no_scores(void **state) {
  (void)state;
  rt_set_fusion(1);
  problem p = {4096, 4200, 8, 8, MASK_CAUSAL, KILN_F32, 1, 1};
  kiln_scope_begin();
  inputs x = make(&p, 3);
  kiln_engine_stats before, after;
  assert_int_equal(kiln_engine_stats_get(&before), KILN_OK);
  kiln_engine_stats_reset_peak();
  kiln_tensor *out[5];
  int runs;
  run_by_hand(&x, &p, 0, false, out, &runs);
  assert_int_equal(kiln_engine_stats_get(&after), KILN_OK);
  assert_int_equal(runs, 2);
  int64_t added = after.allocator_peak_bytes - before.allocator_live_bytes, scores = INT64_C(4096) * 4200 * 4;
  if (added >= scores / 4)
    fail_msg("the force's buffers peaked at %lld bytes, not below a quarter of the scores' %lld", (long long)added,
             (long long)scores);
  kiln_scope_end();
  rt_set_fusion(-1);
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matches_the_composition),     cmocka_unit_test(stores_no_scores),
      cmocka_unit_test(empty_dims),                  cmocka_unit_test(row_without_keys_is_nan),
      cmocka_unit_test(backward_after_in_place_write), cmocka_unit_test(same_bits_for_any_thread_count),
      cmocka_unit_test(by_hand_fuses),               cmocka_unit_test(near_misses_stay_unfused),
      cmocka_unit_test(by_hand_stores_no_scores),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
