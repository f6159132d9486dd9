/*
 * test_grad_views.c — gradient checks (tests/grad_check.h) for every view
 * (narrow select slice transpose t permute view reshape flatten squeeze
 * unsqueeze expand as_strided unfold split chunk), the index ops
 * (index_select gather scatter_ scatter_value_ index_copy_ index_add_
 * index_fill_ masked_fill_ masked_copy_ masked_select), joins (cat stack
 * repeat) and copies (clone contiguous copy_ fill_), with in-place writes
 * through views of intermediates: the written region's gradient goes to
 * the value written, the rest to the old contents.
 *
 * Each case applies a nonlinear op after its views (sin, a square) so the
 * gradient depends on which element went where. Index tensors are
 * constants; a write that could lose an element to a duplicate index
 * (scatter_, index_copy_) uses distinct indices, since which duplicate
 * wins is not differentiable information Torch agrees on.
 * tests/CMakeLists.txt runs this program again with KILN_FUSE=0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_util.h"
#include "grad_check.h"

#define M gc_mark

static kiln_tensor *idx(int64_t n, const int64_t *v) { return kiln_from_data(KILN_I64, 1, &n, v); }
static kiln_tensor *idx2(int64_t r, int64_t c, const int64_t *v) {
  return kiln_from_data(KILN_I64, 2, (int64_t[]){r, c}, v);
}
static kiln_tensor *mask(int nd, const int64_t *sizes, const bool *v) { return kiln_from_data(KILN_BOOL, nd, sizes, v); }
/* A smooth, non-linear, non-even function: the check sees where each
 * element went. */
static kiln_tensor *wiggle(kiln_tensor *t) { return kiln_add(kiln_sin(t), kiln_mul(t, t)); }

/* ----------------------------------------------------------------- views */

/* x0 [4, 6] (and x0 [4, 6] only) through one view each; exp(x0) is an
 * intermediate so views of a computed value are checked too. */
static kiln_tensor *view_case(kiln_tensor *const *x, void *ctx) {
  int kind = *(const int *)ctx;
  kiln_tensor *a = x[0], *e = M(kiln_exp(kiln_mul_scalar(x[0], 0.5)));
  kiln_tensor *v = NULL;
  switch (kind) {
  case 0: v = kiln_narrow(a, 1, 2, 3); break;
  case 1: v = kiln_select(a, 1, -2); break;
  case 2: v = kiln_slice(a, 1, -5, 6, 2); break;
  case 3: v = kiln_transpose(kiln_narrow(e, 0, 1, 2), 0, 1); break;
  case 4: v = kiln_t(a); break;
  case 5: v = kiln_permute(kiln_view(a, 3, (int64_t[]){2, 2, 6}), 3, (int[]){2, 0, 1}); break;
  case 6: v = kiln_view(kiln_narrow(a, 0, 1, 2), 3, (int64_t[]){2, 3, 2}); break; /* contiguous rows */
  case 7: v = kiln_view_as(e, kiln_ones(KILN_F64, 2, (int64_t[]){3, 8})); break;
  case 8: v = kiln_reshape(kiln_t(a), 2, (int64_t[]){3, 8}); break;               /* a copy */
  case 9: v = kiln_reshape(a, 1, (int64_t[]){-1}); break;                          /* a view */
  case 10: v = kiln_flatten(kiln_t(kiln_narrow(a, 1, 1, 4)), 0, 1); break;         /* a copy */
  case 11: v = kiln_flatten(kiln_view(e, 3, (int64_t[]){2, 2, 6}), 1, 2); break;  /* a view */
  case 12: v = kiln_squeeze(kiln_view(a, 4, (int64_t[]){4, 1, 6, 1})); break;
  case 13: v = kiln_squeeze_dim(kiln_narrow(a, 0, 2, 1), 0); break;
  case 14: v = kiln_unsqueeze(kiln_narrow(a, 1, 0, 3), 1); break;
  case 15: v = kiln_expand(kiln_unsqueeze(kiln_select(a, 0, 1), 0), 2, (int64_t[]){3, 6}); break;
  case 16: v = kiln_expand_as(kiln_narrow(a, 1, 4, 1), kiln_ones(KILN_F64, 3, (int64_t[]){2, 4, 3})); break;
  case 17: v = kiln_as_strided(a, 2, (int64_t[]){3, 4}, (int64_t[]){5, 2}, 3); break;  /* disjoint, offset */
  case 18: v = kiln_as_strided(e, 2, (int64_t[]){4, 5}, (int64_t[]){2, 1}, 1); break;  /* overlapping */
  case 19: v = kiln_unfold(kiln_select(a, 0, 1), 0, 3, 1); break;                      /* overlapping windows */
  case 20: v = kiln_unfold(kiln_t(a), 1, 2, 3); break;                                 /* gaps between windows */
  case 21: v = kiln_unfold(kiln_unfold(a, 0, 2, 1), 1, 4, 2); break;                   /* windows of windows */
  case 22: v = kiln_as_strided(a, 2, (int64_t[]){3, 3}, (int64_t[]){0, 7}, 2); break;  /* stride 0 */
  case 25: v = kiln_as_strided(kiln_select(a, 0, 0), 2, (int64_t[]){2, 3}, (int64_t[]){6, 1}, 8); break; /* outside */
  case 23: {
    kiln_tensor *p[3];
    assert_int_equal(kiln_split(a, 4, 1, p, 3), 2);
    v = kiln_add(kiln_mul_scalar(p[0], 2), kiln_narrow(kiln_mul(p[1], p[1]), 1, 0, 1));
    kiln_release(p[0]), kiln_release(p[1]);
    break;
  }
  case 24: {
    kiln_tensor *p[4];
    assert_int_equal(kiln_chunk(e, 3, 0, p, 4), 2);
    v = kiln_sub(p[1], kiln_mul_scalar(p[0], 3));
    kiln_release(p[0]), kiln_release(p[1]);
    break;
  }
  }
  return wiggle(v);
}

static const char *const view_names[] = {
    "narrow", "select", "slice", "transpose", "t", "permute", "view", "view_as", "reshape (copy)",
    "reshape (view)", "flatten (copy)", "flatten (view)", "squeeze", "squeeze_dim", "unsqueeze", "expand",
    "expand_as", "as_strided", "as_strided overlapping", "unfold overlapping", "unfold with gaps",
    "unfold of unfold", "as_strided stride 0", "split", "chunk",
    /* storage coordinates beyond its input view (row 0): the gradient goes
     * to every position read (docs/autodiff.md; Torch 1.13 sends none) */
    "as_strided outside its input view",
};

static void views(void **state) {
  (void)state;
  for (int kind = 0; kind < (int)(sizeof view_names / sizeof *view_names); kind++) {
    uint64_t seed = 100 + (uint64_t)kind;
    gc_input in = gc_in(&seed, 2, (int64_t[]){4, 6}, -1.5, 1.5);
    gc_check(view_names[kind], view_case, &kind, &in, 1, seed);
  }
}

/* -------------------------------------------------------------- indexing */

/* x0 [4, 5] (t), x1 [3, 5] or so (src); writes go into a clone (or an
 * intermediate) of x0 through a view. */
static kiln_tensor *index_case(kiln_tensor *const *x, void *ctx) {
  int kind = *(const int *)ctx;
  kiln_tensor *t = M(kiln_mul_scalar(x[0], 1.5)), *src = x[1];
  int st = KILN_OK;
  switch (kind) {
  case 0: return wiggle(kiln_index_select(kiln_t(x[0]), 1, idx(5, (int64_t[]){3, 0, 3, 1, 3})));
  case 1: return wiggle(kiln_gather(kiln_t(x[0]), 0, idx2(3, 2, (int64_t[]){4, 0, 4, 3, 1, 3})));
  case 2: /* scatter_ into rows of t^T, distinct indices per column */
    st = kiln_scatter_(kiln_t(t), 0, idx2(2, 3, (int64_t[]){4, 0, 2, 1, 3, 0}), kiln_t(src));
    break;
  case 3: st = kiln_scatter_value_(kiln_narrow(t, 1, 1, 4), 1, idx2(2, 2, (int64_t[]){3, 0, 1, 1}), 0.25); break;
  case 4: st = kiln_index_copy_(kiln_narrow(t, 0, 1, 3), 1, idx(2, (int64_t[]){4, 1}),
                         kiln_narrow(kiln_narrow(src, 0, 1, 3), 1, 3, 2));
    break;
  case 5: st = kiln_index_add_(kiln_t(t), 1, idx(4, (int64_t[]){3, 0, 3, 2}), kiln_t(src)); break;
  case 6: st = kiln_index_fill_(kiln_t(t), 1, idx(2, (int64_t[]){-1, 1}), -0.5); break;
  case 7: {
    bool m[5] = {true, false, false, true, false};
    st = kiln_masked_fill_(kiln_narrow(t, 0, 1, 3), mask(1, (int64_t[]){5}, m), 2);
    break;
  }
  case 8: {
    bool m[8] = {true, false, true, true, false, false, true, true};
    st = kiln_masked_copy_(kiln_t(kiln_narrow(t, 1, 1, 2)), mask(2, (int64_t[]){2, 4}, m), kiln_t(src));
    break;
  }
  case 9: {
    bool m[20] = {false};
    for (int i = 0; i < 20; i += 3) m[i] = true;
    return wiggle(kiln_masked_select(kiln_t(x[0]), mask(2, (int64_t[]){5, 4}, m)));
  }
  case 10: { /* broadcast mask [5] over rows */
    bool m[5] = {false, true, true, false, true};
    return wiggle(kiln_masked_select(kiln_narrow(x[0], 0, 1, 2), mask(1, (int64_t[]){5}, m)));
  }
  }
  if (st != KILN_OK) return NULL;
  return kiln_mul(wiggle(t), kiln_add_scalar(src, 2));
}

static const char *const index_names[] = {
    "index_select", "gather", "scatter_", "scatter_value_", "index_copy_", "index_add_", "index_fill_",
    "masked_fill_", "masked_copy_", "masked_select", "masked_select broadcast",
};

static void indexing(void **state) {
  (void)state;
  for (int kind = 0; kind < (int)(sizeof index_names / sizeof *index_names); kind++) {
    uint64_t seed = 200 + (uint64_t)kind;
    /* src is [4, 5] too (its rows/columns are read through views); the
     * output multiplies by src + 2, broadcast where it fits */
    gc_input in[2] = {gc_in(&seed, 2, (int64_t[]){4, 5}, -1.5, 1.5), gc_in(&seed, 2, (int64_t[]){4, 5}, -1.5, 1.5)};
    gc_check(index_names[kind], index_case, &kind, in, kind <= 1 || kind >= 9 ? 1 : 2, seed);
  }
}

/* index_add_ with a duplicated index accumulates: both sources get the
 * gradient of the slot (exact). */
static void index_add_duplicates(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t0 = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  kiln_tensor *src = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, (double[]){10, 20, 30}), *g[2];
  kiln_tensor *t = kiln_clone(t0);
  assert_int_equal(kiln_index_add_(t, 0, idx(3, (int64_t[]){2, 0, 2}), src), KILN_OK);
  kiln_tensor *c = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  kiln_tensor *wrt[2] = {t0, src};
  assert_int_equal(kiln_grad(&t, &c, 1, wrt, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){1, 2, 3}, 3, 0);
  expect_values_tol(g[1], (double[]){3, 1, 3}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

/* ----------------------------------------------------------------- joins */

static kiln_tensor *join_case(kiln_tensor *const *x, void *ctx) {
  int kind = *(const int *)ctx;
  kiln_tensor *a = kiln_t(x[0]);                        /* [3, 4] */
  kiln_tensor *b = M(kiln_exp(kiln_narrow(x[1], 0, 1, 2)));  /* [2, 4] */
  kiln_tensor *c = kiln_expand(x[2], 2, (int64_t[]){3, 4});  /* [4] -> stride 0 */
  switch (kind) {
  case 0: return wiggle(kiln_cat((kiln_tensor *[]){a, b, a}, 3, 0));
  case 1: return wiggle(kiln_cat((kiln_tensor *[]){kiln_t(b), kiln_t(a)}, 2, -1));
  case 2: return wiggle(kiln_stack((kiln_tensor *[]){a, c, a}, 3, 1));
  case 3: return wiggle(kiln_repeat(kiln_narrow(a, 0, 1, 2), 3, (int64_t[]){2, 1, 3}));
  case 4: return wiggle(kiln_repeat(x[2], 2, (int64_t[]){3, 2}));
  default: return NULL;
  }
}

static void joins(void **state) {
  (void)state;
  const char *names[] = {"cat", "cat last dim", "stack", "repeat", "repeat new dims"};
  for (int kind = 0; kind < 5; kind++) {
    uint64_t seed = 300 + (uint64_t)kind;
    gc_input in[3] = {gc_in(&seed, 2, (int64_t[]){4, 3}, -1.5, 1.5), gc_in(&seed, 2, (int64_t[]){3, 4}, -1.5, 1.5),
                      gc_in(&seed, 1, (int64_t[]){4}, -1.5, 1.5)};
    gc_check(names[kind], join_case, &kind, in, 3, seed);
  }
}

/* ---------------------------------------------------- copies and writes */

static kiln_tensor *copy_case(kiln_tensor *const *x, void *ctx) {
  int kind = *(const int *)ctx;
  kiln_tensor *a = x[0], *b = x[1], *t;
  switch (kind) {
  case 0: return wiggle(kiln_clone(kiln_t(a)));
  case 1: return wiggle(kiln_contiguous(kiln_narrow(kiln_t(a), 1, 1, 3)));
  case 2: /* copy_ of a broadcast row into a column block of a clone */
    t = kiln_clone(a);
    if (kiln_copy_(kiln_narrow(t, 1, 1, 2), kiln_unsqueeze(kiln_narrow(b, 0, 0, 2), 0)) != KILN_OK) return NULL;
    return wiggle(t);
  case 3: /* copy_ converting F32 -> F64 (small values), into a transposed view */
    t = kiln_mul_scalar(a, 2);
    if (kiln_copy_(kiln_t(kiln_narrow(t, 0, 0, 3)), kiln_to_dtype(kiln_view(b, 2, (int64_t[]){3, 3}), KILN_F32)) != KILN_OK)
      return NULL;
    return wiggle(t);
  case 4: /* copy_ with the same element count but other sizes */
    t = kiln_exp(a);
    if (kiln_copy_(kiln_select(t, 0, 2), kiln_narrow(b, 0, 3, 3)) != KILN_OK) return NULL;
    return kiln_mul(wiggle(t), kiln_narrow(b, 0, 0, 3));
  case 5: /* fill_ and zero_ through views: those elements get no gradient */
    t = M(kiln_sin(a));
    if (kiln_fill_(kiln_slice(t, 0, 0, 4, 2), 0.5) != KILN_OK || kiln_zero_(kiln_select(t, 1, 2)) != KILN_OK) return NULL;
    return kiln_mul(wiggle(t), kiln_sum(b, 0, NULL, false));
  case 6: /* fill_ through a stride-0 view (Torch7 accepts it) */
    t = kiln_clone(a);
    if (kiln_fill_(kiln_expand(kiln_narrow(kiln_select(t, 1, 0), 0, 1, 1), 1, (int64_t[]){3}), 1) != KILN_OK)
      return NULL;
    return wiggle(t);
  case 7: /* writes on writes: a region written twice, read in between */
    t = kiln_clone(a);
    if (kiln_copy_(kiln_narrow(t, 0, 0, 2), kiln_mul(kiln_narrow(t, 0, 2, 2), kiln_narrow(t, 0, 1, 2))) != KILN_OK)
      return NULL;
    {
      kiln_tensor *mid = kiln_sum(kiln_mul(t, t), 0, NULL, false);
      if (kiln_copy_(kiln_narrow(t, 1, 1, 1), kiln_unsqueeze(kiln_narrow(b, 0, 4, 4), 1)) != KILN_OK) return NULL;
      return kiln_add(wiggle(t), mid);
    }
  case 8: /* an in-place write into a view of a view, then read through another view */
    t = kiln_clone(kiln_mul(a, a));
    {
      kiln_tensor *u = kiln_unfold(kiln_view(t, 1, (int64_t[]){12}), 0, 4, 4);    /* [3, 4], a view */
      if (kiln_copy_(kiln_t(kiln_narrow(u, 1, 1, 2)), kiln_view(kiln_narrow(b, 0, 2, 6), 2, (int64_t[]){2, 3})) != KILN_OK)
        return NULL;
      return wiggle(kiln_t(t));
    }
  default: return NULL;
  }
}

static void copies(void **state) {
  (void)state;
  const char *names[] = {"clone", "contiguous", "copy_ broadcast", "copy_ F32 into transposed", "copy_ reshaped",
                         "fill_ and zero_", "fill_ stride 0", "writes over writes", "write through view of view"};
  for (int kind = 0; kind < 9; kind++) {
    uint64_t seed = 400 + (uint64_t)kind;
    gc_input in[2] = {gc_in(&seed, 2, (int64_t[]){4, 3}, -1.5, 1.5), gc_in(&seed, 1, (int64_t[]){9}, -1.5, 1.5)};
    if (kind == 3)
      for (int i = 0; i < 2; i++)
        for (int64_t e = 0; e < in[i].n; e++) in[i].v[e] *= 1e-3; /* F32 rounding stays invisible */
    gc_check(names[kind], copy_case, &kind, in, 2, seed);
  }
}

/* The gradient of overlapping windows whose shifted reads of the
 * cotangent would leave it (unfold of 100 windows of 3, the window dim
 * innermost: grad_view_add's one-kernel sum does not apply, the per-tap
 * adds do): d/dx[j] of sum(unfold(x) * w) is the sum of w[i][k] over
 * i + k = j. */
static void unfold_windows_past_the_cotangent(void **state) {
  (void)state;
  enum { L = 100, K = 3, N = L + K - 1 };
  static double xv[N], wv[L * K], want[N];
  for (int j = 0; j < N; j++) xv[j] = 0.5 * j - 7, want[j] = 0;
  for (int i = 0; i < L; i++)
    for (int k = 0; k < K; k++) {
      wv[i * K + k] = (double)((i * 7 + k * 3) % 11) - 5;
      want[i + k] += wv[i * K + k];
    }
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, (int64_t[]){N}, xv);
  kiln_tensor *w = kiln_from_data(KILN_F64, 2, (int64_t[]){L, K}, wv);
  kiln_tensor *s = kiln_sum(kiln_mul(kiln_unfold(x, 0, K, 1), w), 0, NULL, false), *g = NULL;
  assert_int_equal(kiln_grad(&s, NULL, 1, &x, 1, &g), KILN_OK);
  double got[N];
  assert_int_equal(kiln_read(g, got, sizeof got), KILN_OK);
  for (int j = 0; j < N; j++)
    if (got[j] != want[j]) fail_msg("d/dx[%d] is %g, want %g", j, got[j], want[j]);
  kiln_scope_end();
}

/* A wrt that is a view of an intermediate's storage region, and a wrt
 * read only through an in-place write into another tensor. */
static void wrt_through_writes(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = kiln_from_data(KILN_F64, 1, (int64_t[]){4}, (double[]){1, 2, 3, 4}), *g[2];
  kiln_tensor *t = kiln_zeros(KILN_F64, 2, (int64_t[]){2, 4});
  assert_int_equal(kiln_copy_(kiln_select(t, 0, 1), kiln_mul(a, a)), KILN_OK);
  kiln_tensor *r = kiln_select(t, 0, 1); /* the written row itself as a wrt */
  kiln_tensor *y = kiln_sum(kiln_mul(t, t), 0, NULL, false);
  kiln_tensor *wrt[2] = {a, r};
  assert_int_equal(kiln_grad(&y, NULL, 1, wrt, 2, g), KILN_OK);
  /* y = sum(a^4): 4 a^3; dy/dr = 2 r = 2 a^2 */
  expect_values_tol(g[0], (double[]){4, 32, 108, 256}, 4, 1e-12);
  expect_values_tol(g[1], (double[]){2, 8, 18, 32}, 4, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

static void report(void **state) {
  (void)state;
  gc_report("test_grad_views");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(views),  cmocka_unit_test(indexing),           cmocka_unit_test(index_add_duplicates),
      cmocka_unit_test(joins),  cmocka_unit_test(copies),             cmocka_unit_test(wrt_through_writes),
      cmocka_unit_test(unfold_windows_past_the_cotangent), cmocka_unit_test(report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
