/*
 * test_schedule.c — the schedule cache and the kernel cache under it.
 * Forcing a graph with the same structure on new data is a schedule-cache
 * hit (rt_schedule_hits goes up by one) that compiles nothing
 * (rt_compile_count unchanged); changed shapes, dtypes, views or sharing
 * are misses (the hit count stays). Fill values travel as arguments (a
 * hit with a new value computes with the new value). Every hit and every
 * miss checked here is also checked for its values, element by element,
 * against a reference computed on the host: in-place updates, a
 * 100-op chain, and a kernel-cache hit (rt_kernel_get) included.
 */
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

/* relu(a * b + c) * sigmoid(d) + s over [n] tensors made from `base`. */
static kiln_tensor *w1(kiln_tensor *a, kiln_tensor *b, kiln_tensor *c, kiln_tensor *d, double s) {
  return kiln_add_scalar(kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(d)), s);
}

static kiln_tensor *data(int64_t n, double start) {
  kiln_tensor *t = kiln_arange(KILN_F32, start, start + (double)n, 1);
  kiln_realize(t);
  return t;
}

static double w1_value(double a, double b, double c, double d, double s) {
  double x = a * b + c;
  return (x > 0 ? x : 0) * (1 / (1 + exp(-d))) + s;
}

/* Forces y and checks that it missed the schedule cache, then its values
 * (exact). */
static void expect_miss(kiln_tensor *y, const double *want, int64_t n) {
  int64_t hits = rt_schedule_hits();
  assert_int_equal(kiln_realize(y), KILN_OK);
  assert_int_equal(rt_schedule_hits(), hits);
  expect_values_tol(y, want, n, 0);
}

/* Forces y and checks that it hit the schedule cache without compiling,
 * then its values (exact). */
static void expect_hit(kiln_tensor *y, const double *want, int64_t n) {
  int64_t hits = rt_schedule_hits(), compiles = rt_compile_count();
  assert_int_equal(kiln_realize(y), KILN_OK);
  assert_int_equal(rt_schedule_hits(), hits + 1);
  assert_int_equal(rt_compile_count(), compiles);
  expect_values_tol(y, want, n, 0);
}

static void same_structure_new_data_hits(void **state) {
  kiln_scope_begin();
  int64_t n = 8;
  /* first force: a miss (compiles are the kernel cache's business) */
  kiln_tensor *y0 = w1(data(n, 0), data(n, 1), data(n, -3), data(n, -2), 0.5);
  assert_int_equal(kiln_realize(y0), KILN_OK);
  for (int rep = 1; rep <= 3; rep++) {
    double s = 0.5 * rep + 0.25; /* a new fill value (non-integral: F64 like 0.5): an argument, a hit */
    kiln_tensor *a = data(n, rep), *b = data(n, 1), *c = data(n, -3), *d = data(n, -2);
    int64_t hits = rt_schedule_hits(), compiles = rt_compile_count();
    kiln_tensor *y = w1(a, b, c, d, s);
    assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(rt_schedule_hits(), hits + 1);
    assert_int_equal(rt_compile_count(), compiles);
    double want[8];
    for (int i = 0; i < 8; i++) want[i] = w1_value(rep + i, 1 + i, -3 + i, -2 + i, s);
    expect_values_tol(y, want, n, 1e-5);
  }
  kiln_scope_end();
  expect_no_error();
}

static void different_structure_misses(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = data(6, 0), *b = data(6, 10);
  kiln_tensor *ab = kiln_mul(a, b);
  assert_int_equal(kiln_realize(ab), KILN_OK); /* cached as [6] F32 a*b */
  expect_values_tol(ab, (double[]){0, 11, 24, 39, 56, 75}, 6, 0);
  /* none of these can reuse a*b's schedule: sharing differs (a*a reads
   * one buffer twice), a view with another offset, another dtype */
  expect_miss(kiln_mul(a, a), (double[]){0, 1, 4, 9, 16, 25}, 6);
  kiln_tensor *wide = data(8, 0);
  expect_miss(kiln_mul(kiln_narrow(wide, 0, 2, 6), b), (double[]){20, 33, 48, 65, 84, 105}, 6);
  kiln_tensor *ia = kiln_to_dtype(a, KILN_I32), *ib = kiln_to_dtype(b, KILN_I32);
  expect_miss(kiln_mul(ia, ib), (double[]){0, 11, 24, 39, 56, 75}, 6);
  /* a*b's structure on new data reuses it */
  kiln_tensor *a1 = data(6, 1), *b1 = data(6, 10);
  expect_hit(kiln_mul(a1, b1), (double[]){10, 22, 36, 52, 70, 90}, 6);
  kiln_scope_end();
  expect_no_error();
}

/* The key's compact encoding still tells apart what lowering reads: a
 * plain view from a transposed one of the same sizes, inputs of equal
 * numel but other sizes, a scalar attribute that is zero (left out of the
 * key) from one that is not, -0.0 from 0.0, and the reduced dims. */
static void key_tells_apart(void **state) {
  kiln_scope_begin();
  int64_t sq[2] = {2, 2};
  /* computed, so their nodes are [2, 2] and a view of all of a is plain */
  kiln_tensor *a = kiln_add_scalar(kiln_reshape(data(4, -1), 2, sq), 1);
  kiln_tensor *b = kiln_add_scalar(kiln_reshape(data(4, 9), 2, sq), 1);
  assert_int_equal(kiln_realize(a), KILN_OK);
  assert_int_equal(kiln_realize(b), KILN_OK);
  assert_int_equal(kiln_realize(kiln_add(a, b)), KILN_OK);
  expect_miss(kiln_add(kiln_t(a), b), (double[]){10, 13, 13, 16}, 4);
  kiln_tensor *a4 = data(4, 0), *b4 = data(4, 10); /* [4], not [2, 2]: same bytes otherwise */
  expect_miss(kiln_add(a4, b4), (double[]){10, 12, 14, 16}, 4);
  kiln_tensor *c = data(4, -2);
  assert_int_equal(kiln_realize(kiln_clamp(c, 0, 5)), KILN_OK);
  expect_miss(kiln_clamp(c, 0.5, 5), (double[]){0.5, 0.5, 0.5, 1}, 4);
  expect_miss(kiln_clamp(c, -0.0, 5), (double[]){-0.0, -0.0, 0, 1}, 4);
  assert_int_equal(kiln_realize(kiln_sum(a, 1, (int[]){0}, false)), KILN_OK);
  expect_miss(kiln_sum(a, 1, (int[]){1}, false), (double[]){1, 5}, 2);
  kiln_scope_end();
  expect_no_error();
}

/* The schedule key of the pending graph below root (as rt_realize builds
 * it, before simplification) copied into key [4096]; returns its length. */
static size_t key_of(graph_node *root, unsigned char *key) {
  pass_plan p;
  assert_int_equal(rt_plan(&root, 1, false, &p), KILN_OK);
  size_t len = 0;
  const unsigned char *k = rt_schedule_key(&p, &root, 1, true, &len);
  pass_plan_free(&p);
  assert_non_null(k);
  assert_true(len <= 4096);
  memcpy(key, k, len);
  return len;
}

/* A node of `op` over input `in` read through view v, sizes v's. */
static graph_node *node_over(graph_op op, graph_node *in, const graph_view *v) {
  graph_node *n = graph_node_new(op, KILN_F32, v->ndim, v->sizes);
  assert_non_null(n);
  graph_node_add_input(n, in, v);
  return n;
}

/* Keys of a and b are equal exactly when `equal`; releases both. */
static void expect_keys(graph_node *a, graph_node *b, bool equal) {
  static unsigned char ka[4096], kb[4096];
  size_t la = key_of(a, ka), lb = key_of(b, kb);
  assert_int_equal(la == lb && memcmp(ka, kb, la) == 0, equal);
  graph_node_release(a);
  graph_node_release(b);
}

/* Two nodes that differ only in one attribute have different keys, for
 * every attribute (the key holds the attribute bytes, whatever they are);
 * equal attributes, or a zero one set and one never set, give one key. */
static void attribute_bytes_in_key(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = data(4, 0), *y = data(4, 10);
  graph_node *xn = x->storage->version, *yn = y->storage->version;
  int64_t four = 4, sq[2] = {2, 2};
  graph_view flat = graph_view_contiguous(1, &four), grid = graph_view_contiguous(2, sq);
  graph_node *a, *b;
  /* scalar: clamp's lower bound, 0.0 against -0.0 and against unset */
  a = node_over(GRAPH_OP_CLAMP, xn, &flat), b = node_over(GRAPH_OP_CLAMP, xn, &flat);
  graph_attr_set_scalar(a, 0.0);
  expect_keys(a, b, true);
  a = node_over(GRAPH_OP_CLAMP, xn, &flat), b = node_over(GRAPH_OP_CLAMP, xn, &flat);
  graph_attr_set_scalar(a, 0.0);
  graph_attr_set_scalar(b, -0.0);
  expect_keys(a, b, false);
  /* scalar2: clamp's upper bound */
  a = node_over(GRAPH_OP_CLAMP, xn, &flat), b = node_over(GRAPH_OP_CLAMP, xn, &flat);
  graph_attr_set_scalar2(a, 5);
  graph_attr_set_scalar2(b, 6);
  expect_keys(a, b, false);
  /* reduce_mask: a cumsum along dim 0 or dim 1 of [2, 2] */
  a = node_over(GRAPH_OP_CUMSUM, xn, &grid), b = node_over(GRAPH_OP_CUMSUM, xn, &grid);
  graph_attr_set_reduce_mask(a, 1);
  graph_attr_set_reduce_mask(b, 2);
  expect_keys(a, b, false);
  /* region: two in-place writes into [4] buffers (external buffers are
   * numbered by first use, so x and y encode alike) whose regions differ
   * only in their last stride, the last attribute byte */
  graph_node *val = graph_node_new(GRAPH_OP_FULL, KILN_F32, 0, NULL);
  graph_view region = {.ndim = 2, .offset = 0, .sizes = {2, 1}, .strides = {2, 1}};
  graph_node *w[2];
  for (int i = 0; i < 2; i++) {
    w[i] = node_over(GRAPH_OP_ASSIGN, i ? yn : xn, &flat);
    graph_view bv;
    assert_true(graph_view_broadcast(&(graph_view){.ndim = 0}, 2, region.sizes, &bv));
    graph_node_add_input(w[i], val, &bv);
    region.strides[1] = i ? 3 : 1; /* a size-1 dim: any stride writes the same elements */
    graph_attr_set_region(w[i], &region);
  }
  expect_keys(w[0], w[1], false);
  graph_node_release(val);
  kiln_scope_end();
  expect_no_error();
}

/* The setters keep the attribute bytes canonical (zero past attr_len,
 * attr_len at the last nonzero byte), so equal attributes are equal bytes
 * whatever order they were set in: a scalar set back to 0, a region
 * replaced by a shorter one or by the zero region. */
static void attribute_bytes_are_canonical(void **state) {
  int64_t one = 1;
  graph_node *n = graph_node_new(GRAPH_OP_ASSIGN, KILN_F32, 1, &one);
  graph_node *m = graph_node_new(GRAPH_OP_ASSIGN, KILN_F32, 1, &one);
  assert_int_equal(n->attr_len, 0);
  graph_attr_set_scalar2(n, 5);
  assert_int_equal(n->attr_len, GRAPH_ATTR_SCALAR2 + 8);
  assert_true(graph_attr_scalar2(n) == 5 && graph_attr_scalar(n) == 0);
  graph_attr_set_scalar2(n, 0);
  assert_int_equal(n->attr_len, 0);
  graph_attr_set_scalar(n, -0.0);
  assert_int_equal(n->attr_len, 8); /* the sign bit is the last byte */
  assert_true(signbit(graph_attr_scalar(n)));
  graph_attr_set_scalar(n, 0);
  graph_view big = {.ndim = 3, .offset = 7, .sizes = {2, 3, 4}, .strides = {12, 4, 1}};
  graph_view small = {.ndim = 1, .offset = 7, .sizes = {24}, .strides = {1}};
  graph_attr_set_reduce_mask(n, 4);
  graph_attr_set_region(n, &big);
  graph_attr_set_region(n, &small);
  graph_attr_set_reduce_mask(m, 4);
  graph_attr_set_region(m, &small);
  assert_int_equal(n->attr_len, m->attr_len);
  assert_memory_equal(n->attr, m->attr, sizeof n->attr);
  graph_view got = graph_attr_region(n);
  assert_true(got.ndim == 1 && got.offset == 7 && got.sizes[0] == 24 && got.strides[0] == 1);
  assert_int_equal(graph_attr_reduce_mask(n), 4);
  graph_attr_set_reduce_mask(n, 0);
  graph_attr_set_region(n, &(graph_view){.ndim = 0});
  assert_int_equal(n->attr_len, 0);
  graph_node_release(n);
  graph_node_release(m);
}

/* The cache is looked up before simplification, then after it when it
 * changed the graph. (x*s)+b with s = 1 simplifies to x+b; with s = 2 it
 * does not, and is cached unsimplified; with s = 1 again that entry is a
 * hit (the multiply by 1 then runs, with the same values). a*b + a*b is
 * simplified (CSE) on every force, and hits after simplifying. */
static void lookup_before_and_after_simplify(void **state) {
  rt_set_fusion(1); /* the simplifier runs with fusion on (KILN_FUSE=0 skips the passes) */
  kiln_scope_begin();
  kiln_tensor *x = data(4, 1), *b = data(4, 10);
  x = kiln_reshape(x, 2, (int64_t[]){1, 4}); /* a shape no other test forces */
  double s[3] = {1, 2, 1};
  for (int rep = 0; rep < 3; rep++) {
    int64_t hits = rt_schedule_hits();
    kiln_tensor *y = kiln_add(kiln_mul_scalar(x, s[rep]), b);
    assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(rt_schedule_hits(), hits + (rep == 2));
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = s[rep] * (1 + i) + 10 + i;
    expect_values_tol(y, want, 4, 0);
  }
  for (int rep = 0; rep < 3; rep++) {
    int64_t hits = rt_schedule_hits();
    kiln_tensor *y = kiln_add(kiln_mul(x, b), kiln_mul(x, b));
    assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(rt_schedule_hits(), hits + (rep > 0));
    expect_values_tol(y, (double[]){20, 44, 72, 104}, 4, 0);
  }
  kiln_scope_end();
  rt_set_fusion(-1);
  expect_no_error();
}

/* SGD-style in-place updates repeated: p -= 0.5 * g, each step after the
 * first a hit, each writing into p's one buffer, p checked after each. */
static void in_place_updates_hit(void **state) {
  kiln_scope_begin();
  kiln_tensor *p = kiln_zeros(KILN_F32, 1, (int64_t[]){4});
  assert_int_equal(kiln_realize(p), KILN_OK);
  const void *buf = kiln_data(p);
  double want[4] = {0, 0, 0, 0};
  for (int step = 0; step < 4; step++) {
    kiln_tensor *g = data(4, 3 * step - 2); /* g[i] = 3 step - 2 + i */
    int64_t hits = rt_schedule_hits();
    assert_int_equal(kiln_copy_(p, kiln_sub(p, kiln_mul_scalar(g, 0.5))), KILN_OK);
    assert_int_equal(kiln_realize(p), KILN_OK);
    if (step > 0) assert_int_equal(rt_schedule_hits(), hits + 1);
    for (int i = 0; i < 4; i++) want[i] -= 0.5 * (3 * step - 2 + i);
    expect_values_tol(p, want, 4, 0);
    assert_ptr_equal(kiln_data(p), buf);
  }
  kiln_scope_end();
  expect_no_error();
}

/* A chain of 100 tiny ops over one input of 1000 elements, recorded and
 * forced again and again (the W8 workload of bench/) on new data each
 * time: every repeat is a hit that compiles nothing, and every result
 * matches the same chain computed in double on the host. */
static void repeated_chain_hits(void **state) {
  enum { N = 1000, OPS = 100 };
  static float xs[N], got[N];
  for (int rep = 0; rep < 3; rep++) {
    kiln_scope_begin();
    /* x[i] = 0.004 (i - 500 + 7 rep), in [-2, 2]: the tanh do not saturate */
    kiln_tensor *x = kiln_mul_scalar(data(N, -500 + 7 * rep), 0.004);
    assert_int_equal(kiln_read(x, xs, sizeof xs), KILN_OK);
    kiln_tensor *y = x;
    for (int i = 0; i < OPS; i++) y = i % 3 == 0 ? kiln_mul_scalar(y, 1.0001) : i % 3 == 1 ? kiln_add(y, x) : kiln_tanh(y);
    int64_t hits = rt_schedule_hits(), compiles = rt_compile_count();
    assert_int_equal(kiln_realize(y), KILN_OK);
    if (rep > 0) {
      assert_int_equal(rt_schedule_hits(), hits + 1);
      assert_int_equal(rt_compile_count(), compiles);
    }
    assert_int_equal(kiln_read(y, got, sizeof got), KILN_OK);
    for (int e = 0; e < N; e++) {
      double v = xs[e];
      for (int i = 0; i < OPS; i++) v = i % 3 == 0 ? v * 1.0001 : i % 3 == 1 ? v + xs[e] : tanh(v);
      /* F32 rounding and tanh error per op; the chain does not amplify them */
      if (!(fabs(got[e] - v) <= 1e-5)) fail_msg("rep %d element %d: %.9g, want %.9g", rep, e, got[e], v);
    }
    kiln_scope_end();
  }
  expect_no_error();
}

/* out[i] = a[i] * 0.8125 - b[i] over [n] (F32), named `name`. */
static void build_scaled_diff(kir_kernel *k, const char *name, int64_t n) {
  kir_init(k, name);
  int out = kir_param(k, KIR_F32, true);
  int a = kir_param(k, KIR_F32, false);
  int b = kir_param(k, KIR_F32, false);
  int i = kir_range(k, n, true);
  int ax = kir_alu(k, KIR_MUL, KIR_F32, kir_load(k, a, i), kir_const_f(k, KIR_F32, 0.8125), -1);
  kir_store(k, out, i, kir_alu(k, KIR_SUB, KIR_F32, ax, kir_load(k, b, i), -1));
  kir_end(k, i);
}

/* Runs fn (build_scaled_diff over [n]) on inputs that differ at every
 * element and checks every element (exact: 0.8125 a is exact in F32). */
static void check_scaled_diff(llvm_kernel_fn fn, int64_t n, float shift) {
  enum { MAX = 1024 };
  static _Alignas(64) float out[MAX], a[MAX], b[MAX];
  assert_true(n <= MAX);
  for (int64_t i = 0; i < n; i++) {
    a[i] = (float)(i % 97) * 0.5f - 20 + shift;
    b[i] = (float)((i * 37) % 101) - 50;
    out[i] = NAN;
  }
  void *bufs[3] = {out, a, b};
  fn(bufs, 0, n);
  for (int64_t i = 0; i < n; i++)
    if (!(out[i] == a[i] * 0.8125f - b[i]))
      fail_msg("element %lld: %g, want %g", (long long)i, out[i], a[i] * 0.8125f - b[i]);
}

/* The kernel cache under the schedule cache: the first get of a kernel
 * compiles it (not a hit; rt_compile_count + 1); a second get of the same
 * kernel IR, built again under another name (the name is not part of the
 * key), is a hit that compiles nothing and returns the same code; both
 * compute the kernel's values. */
static void kernel_cache_second_get_hits(void **state) {
  (void)state;
  enum { N = 777 }; /* a kernel no other test builds */
  kir_kernel k1, k2;
  build_scaled_diff(&k1, "scaled_diff_first", N);
  build_scaled_diff(&k2, "scaled_diff_second", N);
  char err[256] = "";
  rt_code c1 = {0}, c2 = {0};
  bool hit = true;
  int64_t compiles = rt_compile_count();
  const rt_backend *b = rt_backend_selected(); /* llvm, or cuda-emu in tests/run_cuda_emu.sh: both host code */
  if (rt_kernel_get(b, &k1, &c1, &hit, NULL, err, sizeof err) != KILN_OK) fail_msg("rt_kernel_get: %s", err);
  llvm_kernel_fn f1 = c1.fn;
  assert_false(hit);
  assert_int_equal(rt_compile_count(), compiles + 1);
  check_scaled_diff(f1, N, 0);
  if (rt_kernel_get(b, &k2, &c2, &hit, NULL, err, sizeof err) != KILN_OK) fail_msg("rt_kernel_get: %s", err);
  llvm_kernel_fn f2 = c2.fn;
  assert_true(hit);
  assert_int_equal(rt_compile_count(), compiles + 1);
  assert_true(f2 == f1);
  check_scaled_diff(f2, N, 0.25f); /* new data through the cached code */
  kir_free(&k1);
  kir_free(&k2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(same_structure_new_data_hits),
      cmocka_unit_test(different_structure_misses),
      cmocka_unit_test(key_tells_apart),
      cmocka_unit_test(attribute_bytes_in_key),
      cmocka_unit_test(attribute_bytes_are_canonical),
      cmocka_unit_test(lookup_before_and_after_simplify),
      cmocka_unit_test(in_place_updates_hit),
      cmocka_unit_test(repeated_chain_hits),
      cmocka_unit_test(kernel_cache_second_get_hits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
