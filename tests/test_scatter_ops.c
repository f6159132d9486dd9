/*
 * test_scatter_ops.c — the accumulating scatters of ops/scatter.c on known
 * values: scatter_add_ (duplicates, dims, index smaller than src, 0-d,
 * transposed and stepped targets, integer/BOOL/F16 dtypes), index_put_
 * (accumulate or last write, negative and broadcast indices, BOOL/U8
 * masks, broadcast values, non-contiguous targets), bincount (minlength, weights and their
 * result dtypes, empty input) and histc (the data range when min == max,
 * NaN (bin 0, as Torch 1.13) and out-of-range values, x == max, F64/BF16, laziness); the error
 * paths with the target unchanged; and gradients through scatter_add_ and
 * index_put_ (known values, and grad_check.h's central differences).
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
#include "grad_check.h"

static kiln_tensor *longs(int64_t n, const int64_t *v) { return kiln_from_data(KILN_I64, 1, &n, v); }
static kiln_tensor *floats(int64_t n, const float *v) { return kiln_from_data(KILN_F32, 1, &n, v); }
static kiln_tensor *zeros2(kiln_dtype d, int64_t r, int64_t c) { return kiln_zeros(d, 2, (int64_t[]){r, c}); }

/* ------------------------------------------------------- scatter_add_ */

static void scatter_add_values(void **state) {
  (void)state;
  kiln_scope_begin();
  /* 1-D, duplicates accumulate */
  kiln_tensor *t = kiln_zeros(KILN_F32, 1, (int64_t[]){4});
  assert_int_equal(kiln_scatter_add_(t, 0, longs(4, (int64_t[]){0, 0, 3, 0}), floats(4, (float[]){1, 2, 3, 4})),
                   KILN_OK);
  expect_values_tol(t, (double[]){7, 0, 0, 3}, 4, 0);
  /* 2-D along dim 0: index [2, 2] smaller than src [2, 3] and t [3, 3] */
  kiln_tensor *t2 = kiln_ones(KILN_F32, 2, (int64_t[]){3, 3});
  kiln_tensor *src = kiln_view(kiln_arange(KILN_F32, 1, 7, 1), 2, (int64_t[]){2, 3}); /* [[1,2,3],[4,5,6]] */
  kiln_tensor *i0 = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, 2, 2});
  assert_int_equal(kiln_scatter_add_(t2, 0, i0, src), KILN_OK);
  expect_values_tol(t2, (double[]){1, 3, 1, 1, 1, 1, 6, 6, 1}, 9, 0);
  /* along dim -1 (1): index [2, 4] may be longer than t's dim 1 (3) */
  kiln_tensor *t3 = zeros2(KILN_F32, 2, 3);
  kiln_tensor *s3 = kiln_view(kiln_arange(KILN_F32, 1, 9, 1), 2, (int64_t[]){2, 4});
  kiln_tensor *i3 = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 4}, (int64_t[]){0, 1, 0, 2, 2, 2, 2, 1});
  assert_int_equal(kiln_scatter_add_(t3, -1, i3, s3), KILN_OK);
  expect_values_tol(t3, (double[]){4, 2, 4, 0, 8, 18}, 6, 0);
  /* 0-d t with a 0-d or 1-element index, as Torch */
  kiln_tensor *z = kiln_scalar(KILN_F32, 2);
  assert_int_equal(kiln_scatter_add_(z, 0, kiln_from_data(KILN_I64, 0, NULL, (int64_t[]){0}), kiln_scalar(KILN_F32, 5)),
                   KILN_OK);
  assert_int_equal(kiln_scatter_add_(z, 0, longs(1, (int64_t[]){0}), floats(1, (float[]){3})), KILN_OK);
  expect_values_tol(z, (double[]){10}, 1, 0);
  /* an empty index writes nothing, whatever its dims */
  kiln_tensor *t4 = kiln_ones(KILN_F32, 2, (int64_t[]){2, 2});
  assert_int_equal(kiln_scatter_add_(t4, 0, kiln_empty(KILN_I64, 1, (int64_t[]){0}), kiln_empty(KILN_F32, 1, (int64_t[]){0})),
                   KILN_OK);
  expect_values_tol(t4, (double[]){1, 1, 1, 1}, 4, 0);
  expect_no_error();
  kiln_scope_end();
}

/* Writes through a transposed and a stepped view reach the base; an op
 * recorded before the write does not see it. */
static void scatter_add_views(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *base = zeros2(KILN_F32, 3, 2);
  kiln_tensor *before = kiln_add_scalar(base, 0);
  kiln_tensor *tt = kiln_t(base); /* [2, 3], strides [1, 2] */
  kiln_tensor *idx = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 2, 0, 1});
  kiln_tensor *src = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4});
  assert_int_equal(kiln_scatter_add_(tt, 1, idx, src), KILN_OK);
  /* tt = [[0,0,3],[3,4,0]] -> base = tt^T */
  expect_values_tol(base, (double[]){0, 3, 0, 4, 3, 0}, 6, 0);
  expect_values_tol(before, (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
  /* every other element of a 1-D storage */
  kiln_tensor *flat = kiln_zeros(KILN_F32, 1, (int64_t[]){7});
  kiln_tensor *st = kiln_slice(flat, 0, 1, 7, 2); /* elements 1, 3, 5 */
  assert_int_equal(kiln_scatter_add_(st, 0, longs(3, (int64_t[]){2, 0, 2}), floats(3, (float[]){1, 2, 4})), KILN_OK);
  expect_values_tol(flat, (double[]){0, 2, 0, 0, 0, 5, 0}, 7, 0);
  /* src read through a transposed view */
  kiln_tensor *t5 = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 2});
  kiln_tensor *s5 = kiln_t(kiln_from_data(KILN_F32, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4})); /* [[1,3],[2,4]] */
  kiln_tensor *i5 = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 2}, (int64_t[]){1, 1, 1, 0});
  assert_int_equal(kiln_scatter_add_(t5, 0, i5, s5), KILN_OK);
  expect_values_tol(t5, (double[]){0, 4, 3, 3}, 4, 0);
  expect_no_error();
  kiln_scope_end();
}

static void scatter_add_dtypes(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *idx = longs(3, (int64_t[]){1, 1, 0});
  /* I8 wraps as Torch's: 100 + 100 = -56 */
  kiln_tensor *t8 = kiln_zeros(KILN_I8, 1, (int64_t[]){2});
  assert_int_equal(kiln_scatter_add_(t8, 0, idx, kiln_from_data(KILN_I8, 1, (int64_t[]){3}, (int8_t[]){100, 100, 7})),
                   KILN_OK);
  expect_values_tol(t8, (double[]){7, -56}, 2, 0);
  kiln_tensor *t32 = kiln_full(KILN_I32, 1, (int64_t[]){2}, 10);
  assert_int_equal(kiln_scatter_add_(t32, 0, idx, kiln_from_data(KILN_I32, 1, (int64_t[]){3}, (int32_t[]){-3, 5, 1})),
                   KILN_OK);
  expect_values_tol(t32, (double[]){11, 12}, 2, 0);
  /* BOOL ors */
  kiln_tensor *tb = kiln_zeros(KILN_BOOL, 1, (int64_t[]){3});
  assert_int_equal(kiln_scatter_add_(tb, 0, idx, kiln_from_data(KILN_BOOL, 1, (int64_t[]){3}, (uint8_t[]){1, 1, 0})),
                   KILN_OK);
  expect_values_tol(tb, (double[]){0, 1, 0}, 3, 0);
  /* F16 sums in F64 and rounds once (docs/api.md): 2048 + 1 + 1 is 2050,
   * where rounding at each step (Torch's loop) keeps 2048; 2048.5 rounds
   * to 2048 */
  kiln_tensor *th = kiln_full(KILN_F16, 1, (int64_t[]){2}, 2048);
  kiln_tensor *sh = kiln_to_dtype(floats(3, (float[]){1, 1, 0.5f}), KILN_F16);
  assert_int_equal(kiln_scatter_add_(th, 0, idx, sh), KILN_OK);
  expect_values_tol(th, (double[]){2048, 2050}, 2, 0);
  assert_int_equal(kiln_dtype_of(th), KILN_F16);
  expect_no_error();
  kiln_scope_end();
}

/* Every error leaves t as it was and names the function. */
static void scatter_add_errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_ones(KILN_F32, 2, (int64_t[]){2, 3});
  kiln_tensor *src = kiln_ones(KILN_F32, 2, (int64_t[]){2, 3});
  kiln_tensor *i_ok = kiln_from_data(KILN_I64, 2, (int64_t[]){1, 3}, (int64_t[]){0, 1, 1});
  assert_int_equal(kiln_scatter_add_(t, 0, kiln_from_data(KILN_I64, 2, (int64_t[]){1, 3}, (int64_t[]){0, 2, 1}), src),
                   KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "kiln_scatter_add_: index 2 is out of range for dim 0 of size 2", NULL);
  assert_int_equal(kiln_scatter_add_(t, 1, kiln_from_data(KILN_I64, 2, (int64_t[]){1, 2}, (int64_t[]){0, -1}), src),
                   KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "index -1 is out of range", NULL);
  assert_int_equal(kiln_scatter_add_(t, 2, i_ok, src), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_scatter_add_: dim 2 out of range", NULL);
  assert_int_equal(kiln_scatter_add_(t, 0, kiln_to_dtype(i_ok, KILN_I32), src), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "index dtype i32 is not i64", NULL);
  assert_int_equal(kiln_scatter_add_(t, 0, i_ok, kiln_to_dtype(src, KILN_F64)), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "src dtype f64 differs from t dtype f32", NULL);
  /* index larger than src, than t off dim, other dims */
  assert_int_equal(kiln_scatter_add_(t, 0, i_ok, kiln_ones(KILN_F32, 2, (int64_t[]){1, 2})), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "exceed src sizes [1, 2] at dim 1", NULL);
  kiln_tensor *wide = kiln_zeros(KILN_I64, 2, (int64_t[]){1, 4});
  assert_int_equal(kiln_scatter_add_(t, 0, wide, kiln_ones(KILN_F32, 2, (int64_t[]){1, 4})), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "exceed t sizes [2, 3] at dim 1", NULL);
  assert_int_equal(kiln_scatter_add_(t, 0, longs(2, (int64_t[]){0, 1}), src), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "same number of dims", NULL);
  /* an expanded target repeats storage elements */
  kiln_tensor *e = kiln_expand(kiln_zeros(KILN_F32, 2, (int64_t[]){1, 3}), 2, (int64_t[]){2, 3});
  assert_int_equal(kiln_scatter_add_(e, 0, i_ok, src), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_scatter_add_", NULL);
  assert_int_equal(kiln_scatter_add_(NULL, 0, i_ok, src), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_scatter_add_", NULL);
  expect_values_tol(t, (double[]){1, 1, 1, 1, 1, 1}, 6, 0);
  kiln_scope_end();
}

/* --------------------------------------------------------- index_put_ */

static void index_put_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *i1[1] = {longs(3, (int64_t[]){0, 0, 2})};
  kiln_tensor *v = floats(3, (float[]){1, 2, 3});
  kiln_tensor *a = kiln_zeros(KILN_F32, 1, (int64_t[]){3}), *b = kiln_zeros(KILN_F32, 1, (int64_t[]){3});
  assert_int_equal(kiln_index_put_(a, 1, i1, v, true), KILN_OK);
  assert_int_equal(kiln_index_put_(b, 1, i1, v, false), KILN_OK);
  expect_values_tol(a, (double[]){3, 0, 3}, 3, 0);
  expect_values_tol(b, (double[]){2, 0, 3}, 3, 0); /* the last write wins */
  /* negative indices wrap */
  kiln_tensor *c = kiln_zeros(KILN_F32, 1, (int64_t[]){3});
  kiln_tensor *in[1] = {longs(2, (int64_t[]){-1, -3})};
  assert_int_equal(kiln_index_put_(c, 1, in, floats(2, (float[]){5, 6}), false), KILN_OK);
  expect_values_tol(c, (double[]){6, 0, 5}, 3, 0);
  /* rows of a [3, 2] with a broadcast value row */
  kiln_tensor *m = kiln_ones(KILN_F32, 2, (int64_t[]){3, 2});
  kiln_tensor *ir[1] = {longs(3, (int64_t[]){2, 0, 2})};
  assert_int_equal(kiln_index_put_(m, 1, ir, floats(2, (float[]){7, 8}), true), KILN_OK);
  expect_values_tol(m, (double[]){8, 9, 1, 1, 15, 17}, 6, 0);
  /* two index tensors broadcast together: [2, 1] and [3] -> [2, 3] */
  kiln_tensor *g = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 3});
  kiln_tensor *two[2] = {kiln_from_data(KILN_I64, 2, (int64_t[]){2, 1}, (int64_t[]){1, 0}), longs(3, (int64_t[]){0, 2, 2})};
  kiln_tensor *vals = kiln_view(kiln_arange(KILN_F32, 1, 7, 1), 2, (int64_t[]){2, 3});
  assert_int_equal(kiln_index_put_(g, 2, two, vals, true), KILN_OK);
  expect_values_tol(g, (double[]){4, 0, 11, 1, 0, 5}, 6, 0);
  /* a scalar value, 0-d index, I64 and BOOL targets */
  kiln_tensor *h = kiln_zeros(KILN_I64, 2, (int64_t[]){2, 2});
  kiln_tensor *i0[1] = {kiln_from_data(KILN_I64, 0, NULL, (int64_t[]){1})};
  assert_int_equal(kiln_index_put_(h, 1, i0, kiln_scalar(KILN_I64, 9), false), KILN_OK);
  expect_values_tol(h, (double[]){0, 0, 9, 9}, 4, 0);
  kiln_tensor *bo = kiln_zeros(KILN_BOOL, 1, (int64_t[]){3});
  assert_int_equal(kiln_index_put_(bo, 1, i1, kiln_from_data(KILN_BOOL, 1, (int64_t[]){3}, (uint8_t[]){1, 0, 0}), true),
                   KILN_OK);
  expect_values_tol(bo, (double[]){1, 0, 0}, 3, 0);
  /* BOOL and U8 masks: the columns of their nonzero(), mixed with I64 */
  kiln_tensor *mk = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 3});
  kiln_tensor *m2[1] = {kiln_from_data(KILN_BOOL, 2, (int64_t[]){2, 3}, (uint8_t[]){1, 0, 1, 0, 0, 1})};
  assert_int_equal(kiln_index_put_(mk, 1, m2, floats(3, (float[]){1, 2, 3}), true), KILN_OK);
  expect_values_tol(mk, (double[]){1, 0, 2, 0, 0, 3}, 6, 0);
  kiln_tensor *mix[2] = {longs(2, (int64_t[]){1, 1}), kiln_from_data(KILN_U8, 1, (int64_t[]){3}, (uint8_t[]){0, 2, 1})};
  assert_int_equal(kiln_index_put_(mk, 2, mix, floats(2, (float[]){10, 20}), true), KILN_OK);
  expect_values_tol(mk, (double[]){1, 0, 2, 0, 10, 23}, 6, 0);
  kiln_tensor *none[1] = {kiln_zeros(KILN_BOOL, 1, (int64_t[]){2})};
  assert_int_equal(kiln_index_put_(mk, 1, none, floats(3, (float[]){7, 7, 7}), false), KILN_OK);
  expect_values_tol(mk, (double[]){1, 0, 2, 0, 10, 23}, 6, 0);
  /* an empty index list element count writes nothing */
  kiln_tensor *e = kiln_ones(KILN_F32, 1, (int64_t[]){2});
  kiln_tensor *ie[1] = {kiln_empty(KILN_I64, 1, (int64_t[]){0})};
  assert_int_equal(kiln_index_put_(e, 1, ie, kiln_scalar(KILN_F32, 5), true), KILN_OK);
  expect_values_tol(e, (double[]){1, 1}, 2, 0);
  expect_no_error();
  kiln_scope_end();
}

static void index_put_views(void **state) {
  (void)state;
  kiln_scope_begin();
  /* a transposed [3, 2] view of a [2, 3]: indexing both dims needs them
   * merged, which this layout does not allow, so that write goes through a
   * copy written back; indexing dim 0 alone writes through the view */
  kiln_tensor *base = zeros2(KILN_F32, 2, 3);
  kiln_tensor *before = kiln_mul_scalar(base, 1);
  kiln_tensor *tt = kiln_t(base);
  kiln_tensor *two[2] = {longs(3, (int64_t[]){2, 0, 2}), longs(3, (int64_t[]){1, 1, 1})};
  assert_int_equal(kiln_index_put_(tt, 2, two, floats(3, (float[]){1, 2, 4}), true), KILN_OK);
  expect_values_tol(base, (double[]){0, 0, 0, 2, 0, 5}, 6, 0);
  kiln_tensor *one[1] = {longs(2, (int64_t[]){1, 1})};
  assert_int_equal(kiln_index_put_(tt, 1, one, floats(2, (float[]){7, 8}), false), KILN_OK);
  expect_values_tol(base, (double[]){0, 7, 0, 2, 8, 5}, 6, 0);
  expect_values_tol(before, (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
  /* stepped rows of a [5, 2] */
  kiln_tensor *b2 = zeros2(KILN_F32, 5, 2);
  kiln_tensor *rows = kiln_slice(b2, 0, 0, 5, 2); /* rows 0, 2, 4 */
  kiln_tensor *ir[1] = {longs(2, (int64_t[]){-1, 1})};
  assert_int_equal(kiln_index_put_(rows, 1, ir, floats(2, (float[]){3, 4}), true), KILN_OK);
  expect_values_tol(b2, (double[]){0, 0, 0, 0, 3, 4, 0, 0, 3, 4}, 10, 0);
  expect_no_error();
  kiln_scope_end();
}

static void index_put_errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_ones(KILN_F32, 2, (int64_t[]){2, 3});
  kiln_tensor *v = kiln_scalar(KILN_F32, 5);
  /* the second index is out of range: nothing is written */
  kiln_tensor *bad[2] = {longs(2, (int64_t[]){0, 1}), longs(2, (int64_t[]){1, 3})};
  assert_int_equal(kiln_index_put_(t, 2, bad, v, true), KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "kiln_index_put_: index 3 is out of range for dim 1 of size 3", NULL);
  kiln_tensor *neg[1] = {longs(1, (int64_t[]){-3})};
  assert_int_equal(kiln_index_put_(t, 1, neg, v, false), KILN_ERR_INDEX);
  expect_error(KILN_ERR_INDEX, "index -3 is out of range for dim 0 of size 2", NULL);
  kiln_tensor *ok[1] = {longs(2, (int64_t[]){0, 1})};
  assert_int_equal(kiln_index_put_(t, 1, ok, kiln_scalar(KILN_F64, 1), false), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "values dtype f64 differs from t dtype f32", NULL);
  kiln_tensor *i32[1] = {kiln_to_dtype(ok[0], KILN_I32)};
  assert_int_equal(kiln_index_put_(t, 1, i32, v, false), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "indices[0] dtype i32 is not i64", NULL);
  kiln_tensor *mask[1] = {kiln_from_data(KILN_BOOL, 1, (int64_t[]){3}, (uint8_t[]){1, 0, 1})};
  assert_int_equal(kiln_index_put_(t, 1, mask, v, false), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "mask indices[0] sizes [3] do not match t sizes [2, 3] from dim 0", NULL);
  kiln_tensor *m0[1] = {kiln_from_data(KILN_BOOL, 0, NULL, (uint8_t[]){1})};
  assert_int_equal(kiln_index_put_(t, 1, m0, v, false), KILN_ERR_UNSUPPORTED);
  expect_error(KILN_ERR_UNSUPPORTED, "indices[0] is a 0-d mask", NULL);
  kiln_tensor *three[3] = {ok[0], ok[0], ok[0]};
  assert_int_equal(kiln_index_put_(t, 3, three, v, false), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "too many indices (3) for a 2-d tensor", NULL);
  kiln_tensor *mis[2] = {ok[0], longs(3, (int64_t[]){0, 1, 2})};
  assert_int_equal(kiln_index_put_(t, 2, mis, v, false), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "cannot be broadcast", NULL);
  assert_int_equal(kiln_index_put_(t, 1, ok, floats(2, (float[]){1, 2}), false), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "values sizes [2] cannot be broadcast to the indexed sizes [2, 3]", NULL);
  assert_int_equal(kiln_index_put_(t, 0, ok, v, false), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "at least one index", NULL);
  assert_int_equal(kiln_index_put_(t, 1, NULL, v, false), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "the tensor list is NULL", NULL);
  expect_values_tol(t, (double[]){1, 1, 1, 1, 1, 1}, 6, 0);
  kiln_scope_end();
}

/* ----------------------------------------------------------- bincount */

static void bincount_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = longs(5, (int64_t[]){1, 3, 1, 0, 1});
  kiln_tensor *c = kiln_bincount(x, NULL, 0);
  assert_int_equal(kiln_dtype_of(c), KILN_I64);
  expect_values_tol(c, (double[]){1, 3, 0, 1}, 4, 0);
  expect_values_tol(kiln_bincount(x, NULL, 6), (double[]){1, 3, 0, 1, 0, 0}, 6, 0);
  /* U8 input */
  kiln_tensor *u = kiln_from_data(KILN_U8, 1, (int64_t[]){3}, (uint8_t[]){2, 2, 200});
  kiln_tensor *cu = kiln_bincount(u, NULL, 0);
  assert_int_equal(kiln_size(cu, 0), 201);
  assert_int_equal((int)kiln_get(cu, (int64_t[]){2}), 2);
  assert_int_equal((int)kiln_get(cu, (int64_t[]){200}), 1);
  /* weights: F32 keeps F32, others give F64 */
  kiln_tensor *w = floats(5, (float[]){0.5f, 1, 0.25f, 2, 1});
  kiln_tensor *cw = kiln_bincount(x, w, 0);
  assert_int_equal(kiln_dtype_of(cw), KILN_F32);
  expect_values_tol(cw, (double[]){2, 1.75, 0, 1}, 4, 0);
  kiln_tensor *wi = kiln_from_data(KILN_I32, 1, (int64_t[]){5}, (int32_t[]){1, 2, 3, 4, 5});
  kiln_tensor *ci = kiln_bincount(kiln_to_dtype(x, KILN_I16), wi, 0);
  assert_int_equal(kiln_dtype_of(ci), KILN_F64);
  expect_values_tol(ci, (double[]){4, 9, 0, 2}, 4, 0);
  /* a strided input */
  kiln_tensor *s = kiln_slice(longs(6, (int64_t[]){2, 9, 0, 9, 2, 9}), 0, 0, 6, 2);
  expect_values_tol(kiln_bincount(s, NULL, 0), (double[]){1, 0, 2}, 3, 0);
  /* empty: I64 zeros [minlength], weights or not (Torch 1.13) */
  kiln_tensor *e = kiln_empty(KILN_I64, 1, (int64_t[]){0});
  kiln_tensor *ce = kiln_bincount(e, kiln_empty(KILN_F32, 1, (int64_t[]){0}), 3);
  assert_int_equal(kiln_dtype_of(ce), KILN_I64);
  expect_values_tol(ce, (double[]){0, 0, 0}, 3, 0);
  assert_int_equal(kiln_numel(kiln_bincount(e, NULL, 0)), 0);
  expect_no_error();
  /* errors */
  assert_null(kiln_bincount(longs(2, (int64_t[]){1, -2}), NULL, 0));
  expect_error(KILN_ERR_ARG, "kiln_bincount: t holds -2", NULL);
  assert_null(kiln_bincount(floats(1, (float[]){1}), NULL, 0));
  expect_error(KILN_ERR_DTYPE, "t dtype f32 is not an integer dtype", NULL);
  assert_null(kiln_bincount(kiln_from_data(KILN_BOOL, 1, (int64_t[]){1}, (uint8_t[]){1}), NULL, 0));
  expect_error(KILN_ERR_DTYPE, "t dtype bool", NULL);
  assert_null(kiln_bincount(kiln_zeros(KILN_I64, 2, (int64_t[]){1, 2}), NULL, 0));
  expect_error(KILN_ERR_SHAPE, "t must be 1-D but has sizes [1, 2]", NULL);
  assert_null(kiln_bincount(x, NULL, -1));
  expect_error(KILN_ERR_ARG, "minlength -1 is negative", NULL);
  assert_null(kiln_bincount(x, floats(2, (float[]){1, 2}), 0));
  expect_error(KILN_ERR_SHAPE, "weights sizes [2] do not match t sizes [5]", NULL);
  kiln_scope_end();
}

/* -------------------------------------------------------------- histc */

static void histc_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = floats(7, (float[]){1, 2, 1, 3, -1, NAN, 2.9f});
  kiln_tensor *h = kiln_histc(x, 4, 0, 3); /* bins [0, .75) [.75, 1.5) [1.5, 2.25) [2.25, 3] */
  assert_int_equal(kiln_dtype_of(h), KILN_F32);
  expect_values_tol(h, (double[]){1, 2, 1, 2}, 4, 0); /* -1 not counted, NaN in bin 0 (Torch 1.13) */
  /* min == max: the data's range (NaN-free data) */
  kiln_tensor *y = floats(3, (float[]){1, 2, 5});
  expect_values_tol(kiln_histc(y, 3, 0, 0), (double[]){2, 0, 1}, 3, 0);
  expect_values_tol(kiln_histc(y, 3, 2, 2), (double[]){2, 0, 1}, 3, 0);
  /* equal data: [v - 1, v + 1] */
  expect_values_tol(kiln_histc(floats(3, (float[]){1, 1, 1}), 4, 0, 0), (double[]){0, 0, 3, 0}, 4, 0);
  /* 0.1 steps in F64 and F32 (Torch: the value 1.0 in the last bin) */
  double d[11];
  for (int i = 0; i < 11; i++) d[i] = i / 10.0;
  kiln_tensor *hd = kiln_histc(kiln_from_data(KILN_F64, 1, (int64_t[]){11}, d), 10, 0, 1);
  assert_int_equal(kiln_dtype_of(hd), KILN_F64);
  expect_values_tol(hd, (double[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 2}, 10, 0);
  /* any sizes, read through a transposed view; BF16 */
  kiln_tensor *m = kiln_t(kiln_from_data(KILN_F32, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 0}));
  expect_values_tol(kiln_histc(kiln_to_dtype(m, KILN_BF16), 4, 0, 3), (double[]){1, 1, 1, 1}, 4, 0);
  /* empty input */
  expect_values_tol(kiln_histc(kiln_empty(KILN_F32, 1, (int64_t[]){0}), 2, 0, 0), (double[]){0, 0}, 2, 0);
  expect_no_error();
  /* errors */
  assert_null(kiln_histc(longs(1, (int64_t[]){1}), 4, 0, 3));
  expect_error(KILN_ERR_DTYPE, "kiln_histc: t dtype i64 is not a float dtype", NULL);
  assert_null(kiln_histc(y, 0, 0, 3));
  expect_error(KILN_ERR_ARG, "bins must be > 0, but got 0", NULL);
  assert_null(kiln_histc(y, 3, 3, 1));
  expect_error(KILN_ERR_ARG, "max 1 must be larger than min 3", NULL);
  assert_null(kiln_histc(y, 3, 0, INFINITY));
  expect_error(KILN_ERR_ARG, "is not finite", NULL);
  assert_null(kiln_histc(x, 3, 0, 0)); /* the data range holds NaN */
  expect_error(KILN_ERR_ARG, "is not finite", NULL);
  kiln_scope_end();
}

/* With a given range nothing runs until the histogram is read. */
static void histc_is_lazy(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_mul_scalar(kiln_arange(KILN_F32, 0, 10, 1), 0.5); /* 0, .5, ..., 4.5 */
  kiln_profile_begin();
  kiln_tensor *h = kiln_histc(x, 5, 0, 5);
  assert_non_null(h);
  assert_int_equal(kiln_profile_count(), 0);
  expect_values_tol(h, (double[]){2, 2, 2, 2, 2}, 5, 0);
  assert_true(kiln_profile_count() > 0);
  kiln_profile_end();
  expect_no_error();
  kiln_scope_end();
}

/* ---------------------------------------------------------- gradients */

/* y = t.clone(); y.scatter_add_(0, idx, src); loss = sum(y * c): d/dt =
 * c, d/dsrc[i][j] = c[idx[i][j]][j]. */
static void scatter_add_grad_known(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_zeros(KILN_F64, 2, (int64_t[]){3, 2});
  kiln_tensor *src = kiln_ones(KILN_F64, 2, (int64_t[]){2, 2});
  kiln_tensor *idx = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, 2, 2});
  kiln_tensor *y = kiln_clone(t);
  assert_int_equal(kiln_scatter_add_(y, 0, idx, src), KILN_OK);
  kiln_tensor *c = kiln_from_data(KILN_F64, 2, (int64_t[]){3, 2}, (double[]){1, 2, 3, 4, 5, 6});
  kiln_tensor *wrt[2] = {t, src}, *g[2];
  assert_int_equal(kiln_grad(&y, &c, 1, wrt, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){1, 2, 3, 4, 5, 6}, 6, 0);
  expect_values_tol(g[1], (double[]){5, 2, 5, 6}, 4, 0);
  /* index_put_ accumulate: rows 2, 0, 2 of values get c's rows */
  kiln_tensor *z = kiln_clone(t), *v = kiln_ones(KILN_F64, 2, (int64_t[]){3, 2});
  kiln_tensor *ir[1] = {longs(3, (int64_t[]){2, 0, 2})};
  assert_int_equal(kiln_index_put_(z, 1, ir, v, true), KILN_OK);
  kiln_tensor *wz[2] = {t, v};
  assert_int_equal(kiln_grad(&z, &c, 1, wz, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){1, 2, 3, 4, 5, 6}, 6, 0);
  expect_values_tol(g[1], (double[]){5, 6, 1, 2, 5, 6}, 6, 0);
  expect_no_error();
  kiln_scope_end();
}

/* x0 [3, 4] target (read through a transpose), x1 [2, 3] src */
static kiln_tensor *scatter_add_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  kiln_tensor *y = kiln_mul_scalar(kiln_t(x[0]), 2); /* [4, 3] */
  kiln_tensor *idx = kiln_from_data(KILN_I64, 2, (int64_t[]){2, 3}, (int64_t[]){3, 0, 3, 3, 1, 0});
  if (kiln_scatter_add_(y, 0, idx, kiln_sin(x[1])) != KILN_OK) return NULL;
  return kiln_mul(y, y);
}

/* x0 [3, 2] target, x1 [4, 2] values */
static kiln_tensor *index_put_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  kiln_tensor *y = kiln_exp(x[0]);
  kiln_tensor *ir[1] = {longs(4, (int64_t[]){-1, 0, 2, 2})};
  if (kiln_index_put_(y, 1, ir, kiln_mul(x[1], x[1]), true) != KILN_OK) return NULL;
  return kiln_mul(y, y);
}

static void scatter_grad_check(void **state) {
  (void)state;
  uint64_t seed = 900;
  gc_input a[2] = {gc_in(&seed, 2, (int64_t[]){3, 4}, -1, 1), gc_in(&seed, 2, (int64_t[]){2, 3}, -1, 1)};
  gc_check("scatter_add_", scatter_add_case, NULL, a, 2, seed);
  gc_input b[2] = {gc_in(&seed, 2, (int64_t[]){3, 2}, -1, 1), gc_in(&seed, 2, (int64_t[]){4, 2}, -1, 1)};
  gc_check("index_put_ accumulate", index_put_case, NULL, b, 2, seed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scatter_add_values),   cmocka_unit_test(scatter_add_views),
      cmocka_unit_test(scatter_add_dtypes),   cmocka_unit_test(scatter_add_errors),
      cmocka_unit_test(index_put_values),     cmocka_unit_test(index_put_views),
      cmocka_unit_test(index_put_errors),     cmocka_unit_test(bincount_values),
      cmocka_unit_test(histc_values),         cmocka_unit_test(histc_is_lazy),
      cmocka_unit_test(scatter_add_grad_known), cmocka_unit_test(scatter_grad_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
