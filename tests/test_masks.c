/*
 * test_masks.c — the masks and constructors of ops/masks.c and
 * ops/creation.c: kiln_tril/kiln_triu (diagonals -2..2 on a matrix, a
 * batch and a transposed view, BOOL, laziness, the gradient through
 * where), kiln_eye, kiln_full_like/zeros_like/ones_like, kiln_randint and
 * kiln_randperm (ranges, reproducibility after kiln_manual_seed, coverage
 * of a small range, permutations), and every error case.
 * tests/python/test_masks_torch.py compares them with Torch at random.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "graph.h"
#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

#define V(...) ((int64_t[]){__VA_ARGS__})

static void expect_values(kiln_tensor *t, const double *want, int64_t n) { expect_values_tol(t, want, n, 0); }

/* tril/triu of [3, 4] = 1..12, diagonals -2..2 (row i, column j kept when
 * j - i <= k, resp. >= k). */
static const double tril_3x4[5][12] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0},     /* diagonal -2 */
    {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0},    /* diagonal -1 */
    {1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0},   /* diagonal 0 */
    {1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12},  /* diagonal 1 */
    {1, 2, 3, 0, 5, 6, 7, 8, 9, 10, 11, 12},  /* diagonal 2 */
};
static const double triu_3x4[5][12] = {
    {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},  /* diagonal -2 */
    {1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12},  /* diagonal -1 */
    {1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12},   /* diagonal 0 */
    {0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12},    /* diagonal 1 */
    {0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0},     /* diagonal 2 */
};

static void tril_triu_matrix(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_reshape(kiln_arange(KILN_F32, 1, 13, 1), 2, V(3, 4));
  for (int k = -2; k <= 2; k++) {
    kiln_tensor *lo = kiln_tril(x, k), *up = kiln_triu(x, k);
    assert_int_equal(kiln_dtype_of(lo), KILN_F32);
    assert_int_equal(kiln_dim(up), 2);
    assert_int_equal(kiln_size(up, 0), 3);
    assert_int_equal(kiln_size(up, 1), 4);
    assert_true(kiln_is_contiguous(lo));
    expect_values(lo, tril_3x4[k + 2], 12);
    expect_values(up, triu_3x4[k + 2], 12);
  }
  /* diagonals beyond the matrix: all or nothing */
  expect_values(kiln_tril(x, 1000), triu_3x4[0], 12);
  expect_values(kiln_triu(x, -1000), triu_3x4[0], 12);
  expect_values(kiln_tril(x, INT64_MIN), (double[12]){0}, 12);
  expect_values(kiln_triu(x, INT64_MAX), (double[12]){0}, 12);
  expect_values(kiln_tril(x, INT64_MAX), triu_3x4[0], 12); /* Torch 1.13 overflows here */
  expect_values(kiln_triu(x, INT64_MIN), triu_3x4[0], 12);
  kiln_scope_end();
  expect_no_error();
}

/* [2, 3, 4] = 1..24: the [3, 4] mask applies to both matrices. */
static void tril_triu_batched(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_reshape(kiln_arange(KILN_I32, 1, 25, 1), 3, V(2, 3, 4));
  for (int k = -2; k <= 2; k++) {
    double lo[24], up[24];
    for (int b = 0; b < 2; b++)
      for (int e = 0; e < 12; e++) {
        lo[b * 12 + e] = tril_3x4[k + 2][e] ? tril_3x4[k + 2][e] + 12 * b : 0;
        up[b * 12 + e] = triu_3x4[k + 2][e] ? triu_3x4[k + 2][e] + 12 * b : 0;
      }
    kiln_tensor *l = kiln_tril(x, k);
    assert_int_equal(kiln_dtype_of(l), KILN_I32);
    assert_int_equal(kiln_dim(l), 3);
    expect_values(l, lo, 24);
    expect_values(kiln_triu(x, k), up, 24);
  }
  kiln_scope_end();
  expect_no_error();
}

/* t = transpose of [4, 3] = 1..12: t[i][j] = 3j + i + 1, read through
 * strides [1, 3]. */
static void tril_triu_transposed(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_t(kiln_reshape(kiln_arange(KILN_F64, 1, 13, 1), 2, V(4, 3)));
  assert_false(kiln_is_contiguous(t));
  expect_values(kiln_tril(t, 0), (double[]){1, 0, 0, 0, 2, 5, 0, 0, 3, 6, 9, 0}, 12);
  expect_values(kiln_triu(t, 1), (double[]){0, 4, 7, 10, 0, 0, 8, 11, 0, 0, 0, 12}, 12);
  for (int k = -2; k <= 2; k++) {
    double lo[12], up[12];
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) {
        lo[i * 4 + j] = j - i <= k ? 3 * j + i + 1 : 0;
        up[i * 4 + j] = j - i >= k ? 3 * j + i + 1 : 0;
      }
    expect_values(kiln_tril(t, k), lo, 12);
    expect_values(kiln_triu(t, k), up, 12);
  }
  /* the source is unchanged */
  expect_values(t, (double[]){1, 4, 7, 10, 2, 5, 8, 11, 3, 6, 9, 12}, 12);
  kiln_scope_end();
  expect_no_error();
}

static void tril_triu_bool_and_empty(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *b = kiln_ones(KILN_BOOL, 2, V(3, 3));
  kiln_tensor *l = kiln_tril(b, 0), *u = kiln_triu(b, 1);
  assert_int_equal(kiln_dtype_of(l), KILN_BOOL);
  assert_int_equal(kiln_dtype_of(u), KILN_BOOL);
  uint8_t got[9];
  assert_int_equal(kiln_read(l, got, sizeof got), KILN_OK);
  assert_memory_equal(got, ((uint8_t[]){1, 0, 0, 1, 1, 0, 1, 1, 1}), 9);
  assert_int_equal(kiln_read(u, got, sizeof got), KILN_OK);
  assert_memory_equal(got, ((uint8_t[]){0, 1, 1, 0, 0, 1, 0, 0, 0}), 9);
  /* empty matrices and batches keep their sizes */
  kiln_tensor *e = kiln_tril(kiln_zeros(KILN_F32, 3, V(2, 0, 4)), 0);
  assert_int_equal(kiln_numel(e), 0);
  assert_int_equal(kiln_size(e, 2), 4);
  assert_int_equal(kiln_realize(e), KILN_OK);
  assert_int_equal(kiln_numel(kiln_triu(kiln_zeros(KILN_I64, 3, V(0, 3, 3)), -1)), 0);
  kiln_scope_end();
  expect_no_error();
}

/* Recording tril/triu/eye compiles and runs nothing; the graph is pending. */
static void lazy_until_read(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_reshape(kiln_arange(KILN_F32, 1, 13, 1), 2, V(3, 4));
  int64_t compiled = rt_compile_count();
  kiln_tensor *y = kiln_add(kiln_tril(x, 0), kiln_triu(x, 1)); /* x again */
  kiln_tensor *e = kiln_eye(KILN_F32, 3, 4);
  assert_int_equal(rt_compile_count(), compiled);
  assert_true(graph_pending_count() > 0);
  expect_values(y, triu_3x4[0], 12);
  expect_values(e, (double[]){1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, 12);
  kiln_scope_end();
  expect_no_error();
}

static void eye_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *e = kiln_eye(KILN_F32, 3, -1);
  assert_int_equal(kiln_dtype_of(e), KILN_F32);
  assert_int_equal(kiln_size(e, 0), 3);
  assert_int_equal(kiln_size(e, 1), 3);
  expect_values(e, (double[]){1, 0, 0, 0, 1, 0, 0, 0, 1}, 9);
  kiln_tensor *r = kiln_eye(KILN_I64, 2, 4);
  assert_int_equal(kiln_dtype_of(r), KILN_I64);
  assert_int_equal(kiln_size(r, 1), 4);
  expect_values(r, (double[]){1, 0, 0, 0, 0, 1, 0, 0}, 8);
  expect_values(kiln_eye(KILN_F64, 4, 2), (double[]){1, 0, 0, 1, 0, 0, 0, 0}, 8);
  kiln_tensor *b = kiln_eye(KILN_BOOL, 2, 2);
  assert_int_equal(kiln_dtype_of(b), KILN_BOOL);
  uint8_t got[4];
  assert_int_equal(kiln_read(b, got, sizeof got), KILN_OK);
  assert_memory_equal(got, ((uint8_t[]){1, 0, 0, 1}), 4);
  assert_int_equal(kiln_numel(kiln_eye(KILN_F32, 0, -1)), 0);
  assert_int_equal(kiln_numel(kiln_eye(KILN_F32, 3, 0)), 0);
  kiln_scope_end();
  expect_no_error();
}

static void like_constructors(void **state) {
  (void)state;
  kiln_scope_begin();
  /* a transposed I32 view [3, 2] */
  kiln_tensor *t = kiln_t(kiln_reshape(kiln_arange(KILN_I32, 0, 6, 1), 2, V(2, 3)));
  kiln_tensor *z = kiln_zeros_like(t), *o = kiln_ones_like(t), *f = kiln_full_like(t, 7.9);
  kiln_tensor *ts[3] = {z, o, f};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(kiln_dtype_of(ts[i]), KILN_I32);
    assert_int_equal(kiln_dim(ts[i]), 2);
    assert_int_equal(kiln_size(ts[i], 0), 3);
    assert_int_equal(kiln_size(ts[i], 1), 2);
    assert_true(kiln_is_contiguous(ts[i]));
    assert_false(kiln_is_set_to(ts[i], t));
    kiln_storage *a = kiln_storage_of(ts[i]), *b = kiln_storage_of(t);
    assert_ptr_not_equal(a, b);
    kiln_storage_release(a);
    kiln_storage_release(b);
  }
  expect_values(z, (double[]){0, 0, 0, 0, 0, 0}, 6);
  expect_values(o, (double[]){1, 1, 1, 1, 1, 1}, 6);
  expect_values(f, (double[]){7, 7, 7, 7, 7, 7}, 6); /* cast truncates */
  /* other dtypes and ranks */
  kiln_tensor *h = kiln_full_like(kiln_zeros(KILN_F64, 1, V(3)), -2.5);
  assert_int_equal(kiln_dtype_of(h), KILN_F64);
  expect_values(h, (double[]){-2.5, -2.5, -2.5}, 3);
  kiln_tensor *s = kiln_ones_like(kiln_scalar(KILN_BOOL, 0));
  assert_int_equal(kiln_dtype_of(s), KILN_BOOL);
  assert_int_equal(kiln_dim(s), 0);
  expect_values(s, (double[]){1}, 1);
  kiln_tensor *e = kiln_zeros_like(kiln_empty(KILN_F16, 2, V(0, 5)));
  assert_int_equal(kiln_dtype_of(e), KILN_F16);
  assert_int_equal(kiln_size(e, 1), 5);
  assert_int_equal(kiln_numel(e), 0);
  /* the new storage is independent */
  kiln_tensor *src = kiln_zeros(KILN_F32, 1, V(2));
  kiln_tensor *c = kiln_ones_like(src);
  assert_int_equal(kiln_fill_(src, 5), KILN_OK);
  expect_values(c, (double[]){1, 1}, 2);
  kiln_scope_end();
  expect_no_error();
}

static void randint_values(void **state) {
  (void)state;
  kiln_scope_begin();
  enum { N = 4000 };
  static int64_t a[N], b[N];
  kiln_manual_seed(123);
  kiln_tensor *x = kiln_randint(KILN_I64, -3, 4, 2, V(40, 100));
  assert_int_equal(kiln_dtype_of(x), KILN_I64);
  assert_int_equal(kiln_size(x, 0), 40);
  assert_int_equal(kiln_read(x, a, sizeof a), KILN_OK);
  int hits[7] = {0};
  for (int i = 0; i < N; i++) {
    assert_in_range(a[i] + 3, 0, 6);
    hits[a[i] + 3]++;
  }
  for (int v = 0; v < 7; v++) assert_true(hits[v] > N / 7 / 2); /* every value, roughly uniformly */
  /* the same seed, the same draws */
  kiln_manual_seed(123);
  assert_int_equal(kiln_read(kiln_randint(KILN_I64, -3, 4, 2, V(40, 100)), b, sizeof b), KILN_OK);
  assert_memory_equal(a, b, sizeof a);
  kiln_manual_seed(124);
  assert_int_equal(kiln_read(kiln_randint(KILN_I64, -3, 4, 2, V(40, 100)), b, sizeof b), KILN_OK);
  assert_true(memcmp(a, b, sizeof a) != 0);
  /* other dtypes */
  uint8_t u[1000];
  assert_int_equal(kiln_read(kiln_randint(KILN_U8, 250, 256, 1, V(1000)), u, sizeof u), KILN_OK);
  bool seen[6] = {0};
  for (int i = 0; i < 1000; i++) {
    assert_in_range(u[i], 250, 255);
    seen[u[i] - 250] = true;
  }
  for (int v = 0; v < 6; v++) assert_true(seen[v]);
  float f[500];
  kiln_tensor *fx = kiln_randint(KILN_F32, 10, 12, 1, V(500));
  assert_int_equal(kiln_dtype_of(fx), KILN_F32);
  assert_int_equal(kiln_read(fx, f, sizeof f), KILN_OK);
  int tens = 0;
  for (int i = 0; i < 500; i++) {
    assert_true(f[i] == 10 || f[i] == 11);
    tens += f[i] == 10;
  }
  assert_true(tens > 0 && tens < 500);
  /* one value; the whole int64 range; empty */
  expect_values(kiln_randint(KILN_I16, -7, -6, 1, V(3)), (double[]){-7, -7, -7}, 3);
  assert_non_null(kiln_randint(KILN_I64, INT64_MIN, INT64_MAX, 1, V(8)));
  assert_int_equal(kiln_realize(kiln_randint(KILN_I64, INT64_MIN, INT64_MAX, 1, V(8))), KILN_OK);
  assert_int_equal(kiln_numel(kiln_randint(KILN_I8, 0, 2, 2, V(3, 0))), 0);
  kiln_scope_end();
  expect_no_error();
}

static void expect_permutation(const int64_t *p, int64_t n) {
  static bool seen[1000];
  assert_true(n <= 1000);
  memset(seen, 0, sizeof seen);
  for (int64_t i = 0; i < n; i++) {
    assert_in_range(p[i], 0, n - 1);
    assert_false(seen[p[i]]);
    seen[p[i]] = true;
  }
}

static void randperm_values(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t a[1000], b[1000];
  kiln_manual_seed(7);
  kiln_tensor *p = kiln_randperm(1000);
  assert_int_equal(kiln_dtype_of(p), KILN_I64);
  assert_int_equal(kiln_dim(p), 1);
  assert_int_equal(kiln_read(p, a, sizeof a), KILN_OK);
  expect_permutation(a, 1000);
  int fixed = 0;
  for (int i = 0; i < 1000; i++) fixed += a[i] == i;
  assert_true(fixed < 20); /* shuffled (about 1 fixed point expected) */
  kiln_manual_seed(7);
  assert_int_equal(kiln_read(kiln_randperm(1000), b, sizeof b), KILN_OK);
  assert_memory_equal(a, b, sizeof a);
  /* every permutation of 3 turns up */
  int counts[27] = {0};
  for (int r = 0; r < 300; r++) {
    int64_t q[3];
    assert_int_equal(kiln_read(kiln_randperm(3), q, sizeof q), KILN_OK);
    expect_permutation(q, 3);
    counts[q[0] * 9 + q[1] * 3 + q[2]]++;
  }
  int kinds = 0;
  for (int i = 0; i < 27; i++) kinds += counts[i] > 0;
  assert_int_equal(kinds, 6);
  expect_values(kiln_randperm(1), (double[]){0}, 1);
  kiln_tensor *e = kiln_randperm(0);
  assert_int_equal(kiln_numel(e), 0);
  assert_int_equal(kiln_dim(e), 1);
  assert_int_equal(kiln_realize(e), KILN_OK);
  kiln_scope_end();
  expect_no_error();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *v = kiln_zeros(KILN_F32, 1, V(4));
  assert_null(kiln_tril(v, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_tril", "at least 2 dimensions", "[4]", NULL);
  assert_null(kiln_triu(kiln_scalar(KILN_F32, 1), 0));
  expect_error(KILN_ERR_SHAPE, "kiln_triu", "at least 2 dimensions", NULL);
  assert_null(kiln_tril(NULL, 0));
  expect_error(KILN_ERR_ARG, "kiln_tril", NULL);
  assert_null(kiln_triu(NULL, 0));
  expect_error(KILN_ERR_ARG, "kiln_triu", NULL);
  assert_null(kiln_eye(KILN_F32, -1, 3));
  expect_error(KILN_ERR_ARG, "kiln_eye", "-1", NULL);
  assert_null(kiln_eye((kiln_dtype)99, 2, 2));
  expect_error(KILN_ERR_DTYPE, "kiln_eye", NULL);
  assert_null(kiln_eye(KILN_F32, INT64_MAX / 4, INT64_MAX / 4));
  expect_error(KILN_ERR_SHAPE, "kiln_eye", NULL);
  assert_null(kiln_full_like(NULL, 1));
  expect_error(KILN_ERR_ARG, "kiln_full_like", NULL);
  assert_null(kiln_zeros_like(NULL));
  expect_error(KILN_ERR_ARG, "kiln_zeros_like", NULL);
  assert_null(kiln_ones_like(NULL));
  expect_error(KILN_ERR_ARG, "kiln_ones_like", NULL);
  assert_null(kiln_randint(KILN_I64, 5, 5, 1, V(2)));
  expect_error(KILN_ERR_ARG, "kiln_randint", "from=5", "to=5", NULL);
  assert_null(kiln_randint(KILN_I32, 3, -1, 1, V(2)));
  expect_error(KILN_ERR_ARG, "kiln_randint", NULL);
  assert_null(kiln_randint(KILN_BOOL, 0, 2, 1, V(2)));
  expect_error(KILN_ERR_DTYPE, "kiln_randint", "bool", NULL);
  assert_null(kiln_randint(KILN_U8, -1, 5, 1, V(2)));
  expect_error(KILN_ERR_ARG, "kiln_randint", "u8", NULL);
  assert_null(kiln_randint(KILN_I8, 0, 129, 1, V(2)));
  expect_error(KILN_ERR_ARG, "kiln_randint", "i8", NULL);
  assert_null(kiln_randint(KILN_F16, 0, 70000, 1, V(2)));
  expect_error(KILN_ERR_ARG, "kiln_randint", "f16", NULL);
  assert_null(kiln_randint(KILN_I64, 0, 2, 1, V(-2)));
  expect_error(KILN_ERR_SHAPE, "kiln_randint", NULL);
  assert_null(kiln_randperm(-3));
  expect_error(KILN_ERR_ARG, "kiln_randperm", "-3", NULL);
  kiln_scope_end();
  expect_no_error();
}

/* loss = sum(tril(x, k) * w): dloss/dx = tril(w, k); the same for triu,
 * also for a batch read through a transposed view. */
static void gradient(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_manual_seed(5);
  kiln_tensor *x = kiln_randn(KILN_F64, 2, V(3, 4)), *w = kiln_randn(KILN_F64, 2, V(3, 4));
  double want[24], got[24];
  for (int k = -1; k <= 1; k++) {
    for (int upper = 0; upper < 2; upper++) {
      kiln_tensor *m = upper ? kiln_triu(x, k) : kiln_tril(x, k);
      kiln_tensor *loss = kiln_sum(kiln_mul(m, w), 0, NULL, false), *g = NULL;
      assert_int_equal(kiln_grad(&loss, NULL, 1, &x, 1, &g), KILN_OK);
      assert_int_equal(kiln_read(upper ? kiln_triu(w, k) : kiln_tril(w, k), want, 12 * sizeof(double)), KILN_OK);
      expect_values(g, want, 12);
    }
  }
  /* batch [2, 3, 4] as a transposed view of [2, 4, 3] */
  kiln_tensor *xb = kiln_randn(KILN_F64, 3, V(2, 4, 3)), *wb = kiln_randn(KILN_F64, 3, V(2, 3, 4));
  kiln_tensor *xt = kiln_transpose(xb, 1, 2);
  kiln_tensor *loss = kiln_sum(kiln_mul(kiln_tril(xt, 0), wb), 0, NULL, false), *g = NULL;
  assert_int_equal(kiln_grad(&loss, NULL, 1, &xb, 1, &g), KILN_OK);
  assert_int_equal(kiln_size(g, 1), 4);
  assert_int_equal(kiln_read(kiln_transpose(kiln_tril(wb, 0), 1, 2), want, sizeof want), KILN_OK);
  assert_int_equal(kiln_read(g, got, sizeof got), KILN_OK);
  for (int i = 0; i < 24; i++) assert_float_equal(got[i], want[i], 0);
  kiln_scope_end();
  expect_no_error();
}

/* Under KILN_BACKEND=cuda-emu: tril, triu and zeros_like of a KILN_CUDA tensor
 * stay on the device (the mask moves there); skipped without a device. */
static void on_device(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_reshape(kiln_arange(KILN_F32, 1, 13, 1), 2, V(3, 4));
  kiln_tensor *d = kiln_to_device(x, KILN_CUDA);
  if (!d) {
    kiln_clear_error();
    kiln_scope_end();
    skip();
  }
  kiln_tensor *l = kiln_tril(d, 0), *z = kiln_zeros_like(d);
  assert_int_equal(kiln_device_of(l), KILN_CUDA);
  assert_int_equal(kiln_device_of(z), KILN_CUDA);
  expect_values(kiln_to_device(l, KILN_CPU), tril_3x4[2], 12);
  expect_values(kiln_to_device(kiln_triu(d, 1), KILN_CPU), triu_3x4[3], 12);
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tril_triu_matrix),  cmocka_unit_test(tril_triu_batched),
      cmocka_unit_test(tril_triu_transposed), cmocka_unit_test(tril_triu_bool_and_empty),
      cmocka_unit_test(lazy_until_read),   cmocka_unit_test(eye_values),
      cmocka_unit_test(like_constructors), cmocka_unit_test(randint_values),
      cmocka_unit_test(randperm_values),   cmocka_unit_test(errors),
      cmocka_unit_test(gradient),          cmocka_unit_test(on_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
