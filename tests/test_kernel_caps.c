/*
 * test_kernel_caps.c — lowering has no caps of its own beyond the
 * kernel-size contract of passes.h: groups past the sizes its walk once
 * kept in fixed arrays (256 fused nodes walked, 128 values remembered,
 * 16 fused row reductions, 64 reshaped copies in the loop merge) lower
 * to one kernel that computes the right values, and a group past a
 * contract limit fails with KILN_ERR_UNSUPPORTED naming it.
 *
 * Some groups are planned by hand (every producer fused) to go past
 * what the fusion pass would put into one kernel (PASS_MAX_GROUP), and
 * their kernels are compiled and run here, with the binding lowering
 * returned.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "passes.h"
#include "rt_internal.h"
#include "kernel_util.h"
#include "test_util.h"

#define V(...) ((int64_t[]){__VA_ARGS__})

static graph_node *node_of(kiln_tensor *t) { return t->storage->version; }

/* The plan a force of roots [n] makes, then every pending elementwise
 * producer fused by hand (past the fusion pass's own limits). */
static void plan_all_fused(kiln_tensor *const *roots, int n, pass_plan *p) {
  graph_node *nodes[8];
  for (int i = 0; i < n; i++) nodes[i] = node_of(roots[i]);
  assert_int_equal(rt_plan(nodes, n, true, p), KILN_OK);
  for (int i = 0; i < p->n; i++) {
    bool root = false;
    for (int r = 0; r < n; r++) root = root || p->order[i] == nodes[r];
    if (!root && graph_op_is_elementwise(p->order[i]->op)) p->e[i].fused = true;
  }
}

/* Compiles k and runs it over its whole parallel range, its buffers
 * bound as the runtime binds them (passes.h's parameter layout). */
static void run_by_hand(const kir_kernel *k, const pass_binding *b, void *out) {
  rt_code code = {0};
  bool hit;
  char err[256];
  assert_int_equal(rt_kernel_get(&rt_backend_llvm, k, &code, &hit, NULL, err, sizeof err), KILN_OK);
  void *bufs[3 + PASS_MAX_INPUTS];
  bufs[0] = out;
  bufs[1] = (void *)b->args;
  bufs[2] = (void *)b->fargs;
  assert_int_equal(b->n_outputs, 0);
  for (int i = 0; i < b->n_inputs; i++) bufs[3 + i] = b->inputs[i]->buffer->data;
  code.fn(bufs, 0, pass_parallel_extent(k));
}

static int count_ops(const kir_kernel *k, kir_op op) {
  int n = 0;
  for (int i = 0; i < k->n_uops; i++) n += k->uops[i].op == op;
  return n;
}

/* x: [n] F32, -n/2 .. n/2 - 1, realized. */
static kiln_tensor *ramp(int64_t n) {
  kiln_tensor *x = kiln_arange(KILN_F32, (double)(-n / 2), (double)(n - n / 2), 1);
  assert_int_equal(kiln_realize(x), KILN_OK);
  return x;
}

/* 300 fused nodes, one kernel: the walk's former cap was 256 (past it the
 * group was called too big and split). */
static void walks_past_256_nodes(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *x = ramp(64), *a = x;
  for (int i = 0; i < 300; i++) a = i % 2 ? kiln_abs(a) : kiln_neg(a); /* ends in abs: |x| */
  pass_plan p;
  plan_all_fused(&a, 1, &p);
  kir_kernel k;
  pass_binding b;
  char err[256];
  int st = pass_lower_node(&p, node_of(a), false, &k, &b, err, sizeof err);
  if (st != KILN_OK) fail_msg("%s", err);
  assert_int_equal(b.n_ops, 300);
  assert_int_equal(count_ops(&k, KIR_NEG), 150);
  assert_int_equal(count_ops(&k, KIR_WHERE), 150); /* abs */
  float got[64];
  run_by_hand(&k, &b, got);
  for (int i = 0; i < 64; i++) assert_float_equal(got[i], (abs(i - 32)), 0);
  kir_free(&k);
  pass_plan_free(&p);
  kiln_scope_end();
}

/* A value read twice after 140 others: computed once (the memo of
 * values was capped at 128; past it, values were computed again). */
static void remembers_past_128_values(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *x = ramp(64), *c = x;
  for (int i = 0; i < 140; i++) c = kiln_neg(c);
  kiln_tensor *y = kiln_add(c, c);
  kir_kernel k;
  lower_for_test(y, &k);
  assert_int_equal(count_ops(&k, KIR_NEG), 140);
  kir_free(&k);
  float got[64];
  assert_int_equal(kiln_read(y, got, sizeof got), KILN_OK);
  for (int i = 0; i < 64; i++) assert_float_equal(got[i], (2 * (i - 32)), 0);
  kiln_scope_end();
}

/* 17 fused row reductions in one row kernel (the cap was 16). */
static void rows_past_16_reductions(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  const int n_rows = 8, n_cols = 32;
  float data[8 * 32];
  for (int i = 0; i < n_rows * n_cols; i++) data[i] = (float)(i % 7);
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, V(n_rows, n_cols), data);
  kiln_tensor *r = x;
  for (int s = 1; s <= 17; s++) r = kiln_add(r, kiln_sum(kiln_mul_scalar(x, s), 1, (int[]){1}, true));
  kir_kernel k;
  lower_for_test(r, &k);
  assert_int_equal(k.name[0], 'R');
  kir_free(&k);
  float got[8 * 32];
  assert_int_equal(kiln_read(r, got, sizeof got), KILN_OK);
  for (int i = 0; i < n_rows; i++) {
    double row = 0;
    for (int j = 0; j < n_cols; j++) row += (i * n_cols + j) % 7;
    for (int j = 0; j < n_cols; j++) assert_float_equal(got[i * n_cols + j], ((i * n_cols + j) % 7 + 153 * row), 0); /* 153 = 1 + ... + 17 */
  }
  kiln_scope_end();
}

/* 70 producers, each read through a reshape, merge into one loop (the
 * loop merge kept at most 64 reshaped copies: past it, it did not merge). */
static void merges_past_64_reshapes(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *x = kiln_view(ramp(24), 2, V(4, 6)), *y = x;
  for (int i = 0; i < 70; i++) y = kiln_neg(kiln_view(y, 2, i % 2 ? V(4, 6) : V(6, 4)));
  kir_kernel k;
  lower_for_test(y, &k);
  assert_int_equal(count_ops(&k, KIR_RANGE), 1);
  assert_int_equal(count_ops(&k, KIR_NEG), 70);
  kir_free(&k);
  float got[24];
  assert_int_equal(kiln_read(y, got, sizeof got), KILN_OK);
  for (int i = 0; i < 24; i++) assert_float_equal(got[i], (i - 12), 0); /* 70 negations */
  kiln_scope_end();
}

/* A group reading more buffers than a kernel takes is refused with a
 * message naming the limit (the runtime then materializes producers:
 * the force still computes the sum). */
static void contract_limits_fail_loudly(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *xs[PASS_MAX_INPUTS + 1], *s = NULL;
  for (int i = 0; i <= PASS_MAX_INPUTS; i++) {
    xs[i] = kiln_full(KILN_F32, 1, V(16), i);
    assert_int_equal(kiln_realize(xs[i]), KILN_OK);
    s = s ? kiln_add(s, xs[i]) : xs[i];
  }
  pass_plan p;
  plan_all_fused(&s, 1, &p);
  kir_kernel k;
  pass_binding b;
  char err[256];
  assert_int_equal(pass_lower_node(&p, node_of(s), false, &k, &b, err, sizeof err), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(err, "PASS_MAX_INPUTS"));
  pass_plan_free(&p);
  float got[16];
  assert_int_equal(kiln_read(s, got, sizeof got), KILN_OK);
  for (int i = 0; i < 16; i++) assert_float_equal(got[i], (PASS_MAX_INPUTS * (PASS_MAX_INPUTS + 1) / 2), 0);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(walks_past_256_nodes),
      cmocka_unit_test(remembers_past_128_values),
      cmocka_unit_test(rows_past_16_reductions),
      cmocka_unit_test(merges_past_64_reshapes),
      cmocka_unit_test(contract_limits_fail_loudly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
