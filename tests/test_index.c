/*
 * test_index.c — indexing on known values: index_select, gather, the
 * scatter family (index_copy_, index_add_ with duplicates, index_fill_ with
 * negative indices, scatter_, scatter_value_), the mask ops (broadcast
 * and Torch7 same-count masks, BOOL and U8), nonzero, cat, stack, repeat;
 * in-place semantics (views see the write, earlier ops do not); laziness;
 * and the error paths (bad dim, out-of-range index reported by the call
 * with the target unchanged, mismatched sizes, wrong dtypes, NULL).
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
#include "test_util.h"

/* [rows, cols] F32 tensor holding 0, 1, 2, ... */
static kiln_tensor *ramp(int64_t rows, int64_t cols) {
  return kiln_view(kiln_arange(KILN_F32, 0, (double)(rows * cols), 1), 2, (int64_t[]){rows, cols});
}

static kiln_tensor *longs(int64_t n, const int64_t *v) { return kiln_from_data(KILN_I64, 1, &n, v); }

static void index_select_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = ramp(3, 4);
  kiln_tensor *r = kiln_index_select(t, 1, longs(3, (int64_t[]){3, 0, 3}));
  assert_int_equal(kiln_size(r, 0), 3);
  assert_int_equal(kiln_size(r, 1), 3);
  expect_values_tol(r, (double[]){3, 0, 3, 7, 4, 7, 11, 8, 11}, 9, 0);
  /* dim -2 of a transposed view, I32 index */
  int32_t i32[2] = {2, 1};
  kiln_tensor *idx32 = kiln_from_data(KILN_I32, 1, (int64_t[]){2}, i32);
  kiln_tensor *r2 = kiln_index_select(kiln_t(t), -2, idx32);
  expect_values_tol(r2, (double[]){2, 6, 10, 1, 5, 9}, 6, 0);
  /* an empty index gives an empty dim */
  kiln_tensor *r3 = kiln_index_select(t, 0, kiln_empty(KILN_I64, 1, (int64_t[]){0}));
  assert_int_equal(kiln_size(r3, 0), 0);
  assert_int_equal(kiln_numel(r3), 0);
  assert_int_equal(kiln_realize(r3), KILN_OK);
  expect_no_error();
  kiln_scope_end();
}

static void gather_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = ramp(2, 3); /* [[0,1,2],[3,4,5]] */
  kiln_tensor *idx = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, 1, 1});
  expect_values_tol(kiln_gather(t, 1, idx), (double[]){2, 0, 4, 4}, 4, 0);
  kiln_tensor *i0 = kiln_from_data(KILN_I64, 2, (int64_t[]){1, 3}, (int64_t[]){1, 0, 1});
  expect_values_tol(kiln_gather(t, 0, i0), (double[]){3, 1, 5}, 3, 0);
  /* integer data, expanded index */
  kiln_tensor *ti = kiln_to_dtype(t, KILN_I64);
  kiln_tensor *ie = kiln_expand(kiln_from_data(KILN_I64, 2, (int64_t[]){1, 1}, (int64_t[]){2}), 2, (int64_t[]){2, 3});
  expect_values_tol(kiln_gather(ti, 1, ie), (double[]){2, 2, 2, 5, 5, 5}, 6, 0);
  expect_no_error();
  kiln_scope_end();
}

/* The gather is lowered into its reader's kernel: one kernel, two ops
 * (with KILN_FUSE=0: one kernel each). */
static void gather_fuses_with_reader(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_clone(ramp(3, 4));
  kiln_tensor *idx = kiln_from_data(KILN_I64, 2, (int64_t[]){3, 1}, (int64_t[]){3, 0, 2});
  assert_int_equal(kiln_realize(t), KILN_OK);
  assert_int_equal(kiln_realize(idx), KILN_OK);
  kiln_profile_begin();
  kiln_tensor *r = kiln_add_scalar(kiln_gather(t, 1, idx), 0.5);
  assert_int_equal(kiln_realize(r), KILN_OK);
  kiln_profile_end();
  const char *fuse = getenv("KILN_FUSE");
  bool unfused = fuse && strcmp(fuse, "0") == 0;
  assert_int_equal(kiln_profile_count(), unfused ? 2 : 1);
  kiln_kernel_record rec;
  assert_int_equal(kiln_profile_get(kiln_profile_count() - 1, &rec), KILN_OK);
  if (!unfused) assert_int_equal(rec.n_ops, 2);
  expect_values_tol(r, (double[]){3.5, 4.5, 10.5}, 3, 0);
  expect_no_error();
  kiln_scope_end();
}

static void scatter_family_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_zeros(KILN_F32, 2, (int64_t[]){3, 2});
  kiln_tensor *src = ramp(4, 2); /* rows [0,1] [2,3] [4,5] [6,7] */
  assert_int_equal(kiln_index_add_(t, 0, longs(4, (int64_t[]){2, 0, 2, 2}), src), KILN_OK);
  expect_values_tol(t, (double[]){2, 3, 0, 0, 10, 13}, 6, 0);
  assert_int_equal(kiln_index_copy_(t, 1, longs(1, (int64_t[]){0}), kiln_full(KILN_F64, 2, (int64_t[]){3, 1}, 9)),
                   KILN_OK);
  expect_values_tol(t, (double[]){9, 3, 9, 0, 9, 13}, 6, 0);
  assert_int_equal(kiln_index_fill_(t, 0, longs(2, (int64_t[]){-1, 1}), -1), KILN_OK);
  expect_values_tol(t, (double[]){9, 3, -1, -1, -1, -1}, 6, 0);
  /* scatter_: t[idx[i][j]][j] = src[i][j] over a larger src */
  kiln_tensor *u = kiln_zeros(KILN_I32, 2, (int64_t[]){3, 3});
  kiln_tensor *idx = kiln_from_data(KILN_I64, 2, (int64_t[]){1, 3}, (int64_t[]){0, 2, 1});
  assert_int_equal(kiln_scatter_(u, 0, idx, kiln_add_scalar(ramp(2, 3), 1)), KILN_OK);
  expect_values_tol(u, (double[]){1, 0, 0, 0, 0, 3, 0, 2, 0}, 9, 0);
  assert_int_equal(kiln_scatter_value_(u, 1, kiln_from_data(KILN_I64, 2, (int64_t[]){2, 1}, (int64_t[]){2, 0}), 7),
                   KILN_OK);
  expect_values_tol(u, (double[]){1, 0, 7, 7, 0, 3, 0, 2, 0}, 9, 0);
  /* integer index_add_ wraps; U8 */
  kiln_tensor *b = kiln_full(KILN_U8, 1, (int64_t[]){2}, 200);
  assert_int_equal(kiln_index_add_(b, 0, longs(2, (int64_t[]){1, 1}), kiln_full(KILN_U8, 1, (int64_t[]){2}, 100)),
                   KILN_OK);
  expect_values_tol(b, (double[]){200, (200 + 200) % 256}, 2, 0);
  expect_no_error();
  kiln_scope_end();
}

/* Writes through a view are seen by the base; ops recorded before are not
 * affected; the index op is lazy. */
static void inplace_semantics(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *base = kiln_zeros(KILN_F32, 2, (int64_t[]){3, 4});
  kiln_tensor *before = kiln_add_scalar(base, 1);
  kiln_tensor *col = kiln_t(base); /* [4, 3] view of the same storage */
  assert_int_equal(kiln_index_fill_(col, 1, longs(1, (int64_t[]){1}), 5), KILN_OK);
  expect_values_tol(base, (double[]){0, 0, 0, 0, 5, 5, 5, 5, 0, 0, 0, 0}, 12, 0);
  expect_values_tol(before, (double[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 12, 0);
  /* scatter with src over the target's own storage reads the old values */
  kiln_tensor *v = kiln_arange(KILN_F32, 0, 4, 1);
  assert_int_equal(kiln_index_copy_(v, 0, longs(4, (int64_t[]){3, 2, 1, 0}), v), KILN_OK);
  expect_values_tol(v, (double[]){3, 2, 1, 0}, 4, 0);
  /* a masked fill through a narrowed view */
  kiln_tensor *w = kiln_zeros(KILN_F32, 1, (int64_t[]){5});
  kiln_tensor *mid = kiln_narrow(w, 0, 1, 3);
  kiln_tensor *m = kiln_from_data(KILN_BOOL, 1, (int64_t[]){3}, (bool[]){true, false, true});
  assert_int_equal(kiln_masked_fill_(mid, m, 2), KILN_OK);
  expect_values_tol(w, (double[]){0, 2, 0, 2, 0}, 5, 0);
  expect_no_error();
  kiln_scope_end();
}

static void mask_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = ramp(2, 3);
  /* a broadcast mask [3] */
  kiln_tensor *m = kiln_from_data(KILN_BOOL, 1, (int64_t[]){3}, (bool[]){true, false, true});
  expect_values_tol(kiln_masked_select(t, m), (double[]){0, 2, 3, 5}, 4, 0);
  /* Torch7: a U8 mask of other sizes with the same element count */
  uint8_t mb[6] = {0, 1, 1, 0, 0, 1};
  kiln_tensor *m32 = kiln_from_data(KILN_U8, 2, (int64_t[]){3, 2}, mb);
  expect_values_tol(kiln_masked_select(t, m32), (double[]){1, 2, 5}, 3, 0);
  kiln_tensor *t2 = kiln_clone(t);
  assert_int_equal(kiln_masked_fill_(t2, m32, -1), KILN_OK);
  expect_values_tol(t2, (double[]){0, -1, -1, 3, 4, -1}, 6, 0);
  assert_int_equal(kiln_masked_copy_(t2, m, kiln_arange(KILN_I64, 10, 20, 1)), KILN_OK);
  expect_values_tol(t2, (double[]){10, -1, 11, 12, 4, 13}, 6, 0);
  /* src of another dtype: t's unselected I64 values stay exact */
  int64_t big[2] = {(INT64_C(1) << 53) + 1, 5};
  kiln_tensor *tb = kiln_from_data(KILN_I64, 1, (int64_t[]){2}, big);
  kiln_tensor *m01 = kiln_from_data(KILN_BOOL, 1, (int64_t[]){2}, (bool[]){false, true});
  assert_int_equal(kiln_masked_copy_(tb, m01, kiln_full(KILN_F32, 1, (int64_t[]){1}, 7.5)), KILN_OK);
  int64_t got[2];
  assert_int_equal(kiln_read(tb, got, sizeof got), KILN_OK);
  assert_true(got[0] == big[0] && got[1] == 7);
  assert_int_equal(kiln_index_copy_(tb, 0, longs(1, (int64_t[]){1}), kiln_full(KILN_F32, 1, (int64_t[]){1}, 3)),
                   KILN_OK);
  assert_int_equal(kiln_scatter_(tb, 0, longs(1, (int64_t[]){1}), kiln_full(KILN_F64, 1, (int64_t[]){1}, 4)), KILN_OK);
  assert_int_equal(kiln_read(tb, got, sizeof got), KILN_OK);
  assert_true(got[0] == big[0] && got[1] == 4);
  kiln_tensor *none = kiln_masked_select(t, kiln_zeros(KILN_BOOL, 1, (int64_t[]){3}));
  assert_int_equal(kiln_numel(none), 0);
  /* nonzero */
  kiln_tensor *nz = kiln_nonzero(kiln_from_data(KILN_F32, 2, (int64_t[]){2, 2}, (float[]){0, 3, NAN, 0}));
  assert_int_equal(kiln_dtype_of(nz), KILN_I64);
  assert_int_equal(kiln_size(nz, 0), 2);
  assert_int_equal(kiln_size(nz, 1), 2);
  expect_values_tol(nz, (double[]){0, 1, 1, 0}, 4, 0);
  kiln_tensor *nz0 = kiln_nonzero(kiln_zeros(KILN_I32, 1, (int64_t[]){4}));
  assert_int_equal(kiln_size(nz0, 0), 0);
  assert_int_equal(kiln_size(nz0, 1), 1);
  expect_no_error();
  kiln_scope_end();
}

static void join_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = ramp(2, 2), *b = kiln_to_dtype(kiln_add_scalar(ramp(1, 2), 10), KILN_I32);
  kiln_tensor *c = kiln_cat((kiln_tensor *[]){a, kiln_empty(KILN_F64, 1, (int64_t[]){0}), b}, 3, 0);
  assert_int_equal(kiln_dtype_of(c), KILN_F64);
  assert_int_equal(kiln_size(c, 0), 3);
  expect_values_tol(c, (double[]){0, 1, 2, 3, 10, 11}, 6, 0);
  kiln_tensor *c1 = kiln_cat((kiln_tensor *[]){a, kiln_t(a)}, 2, -1);
  expect_values_tol(c1, (double[]){0, 1, 0, 2, 2, 3, 1, 3}, 8, 0);
  kiln_tensor *s = kiln_stack((kiln_tensor *[]){a, kiln_t(a)}, 2, 2);
  assert_int_equal(kiln_dim(s), 3);
  expect_values_tol(s, (double[]){0, 0, 1, 2, 2, 1, 3, 3}, 8, 0);
  kiln_tensor *r = kiln_repeat(kiln_arange(KILN_I64, 0, 2, 1), 2, (int64_t[]){2, 2});
  assert_int_equal(kiln_size(r, 0), 2);
  assert_int_equal(kiln_size(r, 1), 4);
  expect_values_tol(r, (double[]){0, 1, 0, 1, 0, 1, 0, 1}, 8, 0);
  /* repeat copies even when every count is 1 */
  kiln_tensor *one = kiln_repeat(a, 2, (int64_t[]){1, 1});
  kiln_fill_(a, 7);
  expect_values_tol(one, (double[]){0, 1, 2, 3}, 4, 0);
  /* cat is lazy: a later write to an input is not seen */
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){2});
  kiln_tensor *cx = kiln_cat((kiln_tensor *[]){x, x}, 2, 0);
  kiln_fill_(x, 1);
  expect_values_tol(cx, (double[]){0, 0, 0, 0}, 4, 0);
  expect_no_error();
  kiln_scope_end();
}

/* An out-of-range index is reported by the call; nothing is recorded. */
static void bad_index_leaves_target(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = ramp(2, 5);
  kiln_tensor *bad = kiln_from_data(KILN_I64, 2, (int64_t[]){1, 2}, (int64_t[]){1, 7});
  assert_null(kiln_gather(t, 1, bad));
  expect_error(KILN_ERR_INDEX, "kiln_gather: index 7 is out of range for dim 1 of size 5", NULL);
  assert_null(kiln_index_select(t, 0, longs(2, (int64_t[]){0, -1})));
  expect_error(KILN_ERR_INDEX, "kiln_index_select: index -1 is out of range for dim 0 of size 2", NULL);
  kiln_tensor *src = kiln_ones(KILN_F32, 2, (int64_t[]){2, 2});
  assert_int_equal(kiln_index_add_(t, 1, longs(2, (int64_t[]){0, 5}), src), KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "kiln_index_add_: index 5 is out of range for dim 1 of size 5", NULL);
  assert_int_equal(kiln_index_copy_(t, 1, longs(2, (int64_t[]){-1, 0}), src), KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "kiln_index_copy_", "index -1", NULL);
  assert_int_equal(kiln_index_fill_(t, 1, longs(1, (int64_t[]){-6}), 0), KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "kiln_index_fill_: index -6 is out of range for dim 1 of size 5", NULL);
  assert_int_equal(kiln_scatter_(t, 0, bad, kiln_ones(KILN_F32, 2, (int64_t[]){1, 2})), KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "kiln_scatter_: index 7 is out of range for dim 0 of size 2", NULL);
  assert_int_equal(kiln_scatter_value_(t, 1, bad, 3), KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "kiln_scatter_value_: index 7 is out of range for dim 1 of size 5", NULL);
  /* the target is readable and unchanged */
  expect_values_tol(t, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 10, 0);
  /* a good write after the failures still works */
  assert_int_equal(kiln_index_fill_(t, 1, longs(1, (int64_t[]){4}), -1), KILN_OK);
  expect_values_tol(t, (double[]){0, 1, 2, 3, -1, 5, 6, 7, 8, -1}, 10, 0);
  expect_no_error();
  kiln_scope_end();
}

/* In-place ops into a view that repeats a storage element (expand): which
 * value would win is unspecified, so each is KILN_ERR_ARG naming itself,
 * and the storage is unchanged. */
static void expanded_target_rejected(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, (int64_t[]){1, 3});
  kiln_tensor *e = kiln_expand(x, 2, (int64_t[]){4, 3});
  kiln_tensor *i1 = kiln_from_data(KILN_I64, 1, (int64_t[]){2}, (int64_t[]){0, 2});
  kiln_tensor *src = kiln_ones(KILN_F32, 2, (int64_t[]){2, 3});
  kiln_tensor *i2 = kiln_zeros(KILN_I64, 2, (int64_t[]){2, 3});
  kiln_tensor *mask = kiln_ones(KILN_BOOL, 2, (int64_t[]){4, 3});
  kiln_tensor *msrc = kiln_ones(KILN_F32, 1, (int64_t[]){12});
  assert_int_equal(kiln_index_copy_(e, 0, i1, src), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_index_copy_", "stride 0", NULL);
  assert_int_equal(kiln_index_add_(e, 0, i1, src), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_index_add_", NULL);
  assert_int_equal(kiln_index_fill_(e, 0, i1, 5), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_index_fill_", NULL);
  assert_int_equal(kiln_scatter_(e, 0, i2, src), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_scatter_", NULL);
  assert_int_equal(kiln_scatter_value_(e, 0, i2, 5), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_scatter_value_", NULL);
  assert_int_equal(kiln_masked_fill_(e, mask, 5), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_masked_fill_", NULL);
  assert_int_equal(kiln_masked_copy_(e, mask, msrc), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_masked_copy_", NULL);
  expect_values_tol(x, (double[]){0, 0, 0}, 3, 0);
  kiln_scope_end();
}

static void errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = ramp(2, 3), *i2 = longs(2, (int64_t[]){0, 1});
  assert_null(kiln_index_select(t, 2, i2));
  expect_error(KILN_ERR_ARG, "kiln_index_select", NULL);
  assert_null(kiln_index_select(t, 0, kiln_from_data(KILN_F32, 1, (int64_t[]){1}, (float[]){0})));
  expect_error(KILN_ERR_DTYPE, "kiln_index_select: index dtype f32 is not i64 or i32", NULL);
  assert_null(kiln_index_select(t, 0, kiln_zeros(KILN_I64, 2, (int64_t[]){1, 1})));
  expect_error(KILN_ERR_SHAPE, "kiln_index_select: index must be 1-D but has sizes [1, 1]", NULL);
  assert_null(kiln_index_select(kiln_scalar(KILN_F32, 1), 0, i2));
  expect_error(KILN_ERR_SHAPE, "kiln_index_select", "0-d", NULL);
  assert_null(kiln_index_select(NULL, 0, i2));
  expect_error(KILN_ERR_ARG, "kiln_index_select", NULL);
  assert_null(kiln_gather(t, 0, i2));
  expect_error(KILN_ERR_SHAPE, "kiln_gather", "[2]", "[2, 3]", NULL);
  assert_null(kiln_gather(t, 0, kiln_zeros(KILN_I64, 2, (int64_t[]){1, 4})));
  expect_error(KILN_ERR_SHAPE, "kiln_gather: index sizes [1, 4] exceed t sizes [2, 3] at dim 1", NULL);
  assert_int_equal(kiln_index_copy_(t, 0, i2, kiln_ones(KILN_F32, 2, (int64_t[]){2, 2})), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_index_copy_: src sizes [2, 2] do not match [2, 3]", NULL);
  assert_int_equal(kiln_index_add_(t, 0, i2, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_index_add_", NULL);
  assert_int_equal(
      kiln_scatter_(t, 0, kiln_zeros(KILN_I64, 2, (int64_t[]){2, 2}), kiln_ones(KILN_F32, 2, (int64_t[]){1, 3})),
      KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_scatter_: index sizes [2, 2] exceed src sizes [1, 3] at dim 0", NULL);
  assert_int_equal(kiln_scatter_value_(t, 1, kiln_zeros(KILN_I64, 2, (int64_t[]){3, 1}), 1), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_scatter_value_", "exceed t sizes", NULL);
  kiln_tensor *m4 = kiln_ones(KILN_BOOL, 1, (int64_t[]){4});
  assert_null(kiln_masked_select(t, m4));
  expect_error(KILN_ERR_SHAPE, "kiln_masked_select: mask sizes [4] neither broadcast to sizes [2, 3]", NULL);
  assert_int_equal(kiln_masked_fill_(t, kiln_ones(KILN_F32, 1, (int64_t[]){3}), 0), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_masked_fill_: mask dtype f32 is not bool or u8", NULL);
  assert_int_equal(
      kiln_masked_copy_(t, kiln_ones(KILN_BOOL, 1, (int64_t[]){3}), kiln_ones(KILN_F32, 1, (int64_t[]){5})),
      KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_masked_copy_: mask selects 6 elements but src has only 5", NULL);
  assert_null(kiln_nonzero(NULL));
  expect_error(KILN_ERR_ARG, "kiln_nonzero", NULL);
  assert_null(kiln_cat((kiln_tensor *[]){t, kiln_ones(KILN_F32, 2, (int64_t[]){2, 2})}, 2, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_cat: tensor 1 has sizes [2, 2] but tensor 0 has [2, 3] (only dim 0 may differ)",
               NULL);
  assert_null(kiln_cat(NULL, 0, 0));
  expect_error(KILN_ERR_ARG, "kiln_cat", NULL);
  assert_null(kiln_cat((kiln_tensor *[]){t, NULL}, 2, 0));
  expect_error(KILN_ERR_ARG, "kiln_cat: tensor 1 is NULL", NULL);
  assert_null(kiln_cat((kiln_tensor *[]){t}, 1, 2));
  expect_error(KILN_ERR_ARG, "kiln_cat", NULL);
  assert_null(kiln_stack((kiln_tensor *[]){t, kiln_t(t)}, 2, 0));
  expect_error(KILN_ERR_SHAPE, "kiln_stack: tensor 1 has sizes [3, 2] but tensor 0 has [2, 3]", NULL);
  assert_null(kiln_stack((kiln_tensor *[]){t}, 1, 3));
  expect_error(KILN_ERR_ARG, "kiln_stack", NULL);
  assert_null(kiln_repeat(t, 1, (int64_t[]){2}));
  expect_error(KILN_ERR_ARG, "kiln_repeat: needs 2 to 16 repeat counts, got 1", NULL);
  assert_null(kiln_repeat(t, 2, (int64_t[]){2, -1}));
  expect_error(KILN_ERR_ARG, "kiln_repeat: repeat count -1 at dim 1 is negative", NULL);
  /* sizes past int64: one dim (signed overflow before), or their product */
  assert_null(kiln_repeat(t, 2, (int64_t[]){1, INT64_MAX / 2}));
  expect_error(KILN_ERR_SHAPE, "kiln_repeat: size 3 repeated", "overflows", NULL);
  assert_null(kiln_repeat(t, 2, (int64_t[]){1LL << 40, 1LL << 40}));
  expect_error(KILN_ERR_SHAPE, "kiln_repeat", "overflow", NULL);
  /* a NULL from an earlier failure propagates with the first error */
  assert_null(kiln_gather(kiln_index_select(t, 5, i2), 0, i2));
  expect_error(KILN_ERR_ARG, "kiln_index_select", NULL);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(index_select_values),
      cmocka_unit_test(gather_values),
      cmocka_unit_test(gather_fuses_with_reader),
      cmocka_unit_test(scatter_family_values),
      cmocka_unit_test(inplace_semantics),
      cmocka_unit_test(mask_values),
      cmocka_unit_test(join_values),
      cmocka_unit_test(bad_index_leaves_target),
      cmocka_unit_test(expanded_target_rejected),
      cmocka_unit_test(errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
