/*
 * test_inplace.c — storage versions: in-place writes through views are
 * seen by every tensor over the storage, ops recorded earlier do not see
 * them, and nothing is computed before a value is forced; a write into
 * a pending fill runs on every thread.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "graph.h"
#include "kiln/kiln.h"
#include "test_util.h"
#include "rt_internal.h"

static void expect_values(kiln_tensor *t, const double *want, int64_t n) {
  expect_values_tol(t, want, n, 1e-6);
}

/* The write-through-a-view example of docs/semantics.md, step by step. */
static void design_example(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){5});
  kiln_tensor *n = kiln_narrow(x, 0, 1, 3);
  kiln_tensor *y = kiln_add(x, x);
  assert_int_equal(kiln_fill_(n, 1), KILN_OK);
  kiln_tensor *z = kiln_mul_scalar(x, 2);
  expect_values(y, (double[]){0, 0, 0, 0, 0}, 5);
  expect_values(x, (double[]){0, 1, 1, 1, 0}, 5);
  expect_values(n, (double[]){1, 1, 1}, 3);
  expect_values(z, (double[]){0, 2, 2, 2, 0}, 5);
  kiln_scope_end();
}

static void lazy_until_forced(void **state) {
  kiln_scope_begin();
  int64_t before = rt_compile_count();
  int64_t pending = graph_pending_count();
  kiln_tensor *x = kiln_arange(KILN_F64, 0, 7, 1);
  kiln_tensor *y = kiln_exp(kiln_mul_scalar(x, 0.123456789));
  assert_non_null(y);
  assert_true(graph_pending_count() > pending);
  assert_int_equal(rt_compile_count(), before); /* nothing compiled or run yet */
  assert_int_equal(kiln_realize(y), KILN_OK);
  assert_float_equal(kiln_get(y, (int64_t[]){3}), exp(3 * 0.123456789), 1e-12);
  kiln_scope_end();
}

static void overlapping_and_stride0_views(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_I32, 0, 6, 1);
  /* windows [0,1,2],[2,3,4] overlap at element 2 */
  kiln_tensor *w = kiln_unfold(x, 0, 3, 2);
  kiln_tensor *row = kiln_select(w, 0, 1);
  assert_int_equal(kiln_fill_(row, -1), KILN_OK);
  expect_values(x, (double[]){0, 1, -1, -1, -1, 5}, 6);
  expect_values(w, (double[]){0, 1, -1, -1, -1, -1}, 6);
  /* a stride-0 view of one element: writing it writes that one element */
  kiln_tensor *e = kiln_expand(kiln_narrow(x, 0, 5, 1), 1, (int64_t[]){4});
  assert_int_equal(kiln_fill_(e, 9), KILN_OK);
  expect_values(e, (double[]){9, 9, 9, 9}, 4);
  expect_values(x, (double[]){0, 1, -1, -1, -1, 9}, 6);
  kiln_scope_end();
}

/* copy_ of varying values into an expanded view: which value would win is
 * unspecified, so it is an error (as in PyTorch) and nothing is written. */
static void copy_into_expanded_view_rejected(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 1});
  kiln_tensor *e = kiln_expand(x, 2, (int64_t[]){2, 3});
  kiln_tensor *src = kiln_arange(KILN_F32, 0, 6, 1);
  assert_int_equal(kiln_copy_(e, src), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_copy_", "dim 1 has size 3 and stride 0", NULL);
  expect_values(x, (double[]){0, 0}, 2);
  /* a size-1 dim of stride 0 repeats nothing: accepted */
  kiln_tensor *one = kiln_expand(kiln_narrow(x, 0, 1, 1), 2, (int64_t[]){1, 1});
  assert_int_equal(kiln_copy_(one, kiln_full(KILN_F32, 1, (int64_t[]){1}, 4)), KILN_OK);
  expect_values(x, (double[]){0, 4}, 2);
  kiln_scope_end();
}

static void set_and_get(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_I64, 2, (int64_t[]){2, 3});
  kiln_tensor *t = kiln_t(x);
  kiln_tensor *old = kiln_add_scalar(x, 0);
  assert_int_equal(kiln_set(t, (int64_t[]){2, 1}, 42), KILN_OK); /* x[1][2] */
  assert_int_equal(kiln_set(x, (int64_t[]){-2, -3}, 7), KILN_OK); /* x[0][0] */
  expect_values(x, (double[]){7, 0, 0, 0, 0, 42}, 6);
  expect_values(old, (double[]){0, 0, 0, 0, 0, 0}, 6);
  assert_float_equal(kiln_get(t, (int64_t[]){2, 1}), 42, 0);
  kiln_clear_error();
  assert_true(isnan(kiln_get(x, (int64_t[]){2, 0})));
  assert_int_equal(kiln_last_status(), KILN_ERR_INDEX);
  assert_non_null(strstr(kiln_last_error(), "kiln_get"));
  kiln_clear_error();
  kiln_scope_end();
}

static void copy_sizes_differ(void **state) {
  kiln_scope_begin();
  kiln_tensor *dst = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 3});
  kiln_tensor *src = kiln_arange(KILN_I64, 0, 6, 1);
  kiln_tensor *srcT = kiln_t(kiln_view(src, 2, (int64_t[]){3, 2})); /* not reshapeable: copied */
  assert_int_equal(kiln_copy_(dst, src), KILN_OK);
  expect_values(dst, (double[]){0, 1, 2, 3, 4, 5}, 6);
  assert_int_equal(kiln_copy_(kiln_t(dst), srcT), KILN_OK); /* dst.T = src.view(3,2).T */
  expect_values(dst, (double[]){0, 4, 3, 2, 1, 5}, 6);
  /* broadcast a row */
  assert_int_equal(kiln_copy_(dst, kiln_full(KILN_F64, 1, (int64_t[]){3}, 2.5)), KILN_OK);
  expect_values(dst, (double[]){2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, 6);
  /* element counts differ: error, dst unchanged */
  kiln_clear_error();
  assert_int_equal(kiln_copy_(dst, kiln_zeros(KILN_F32, 1, (int64_t[]){4})), KILN_ERR_SHAPE);
  assert_non_null(strstr(kiln_last_error(), "kiln_copy_"));
  kiln_clear_error();
  expect_values(dst, (double[]){2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, 6);
  kiln_scope_end();
}

static void copy_from_own_storage(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F32, 0, 6, 1);
  assert_int_equal(kiln_realize(x), KILN_OK);
  /* x[1:] = x[:-1]: reads the old contents (no smearing) */
  assert_int_equal(kiln_copy_(kiln_narrow(x, 0, 1, 5), kiln_narrow(x, 0, 0, 5)), KILN_OK);
  expect_values(x, (double[]){0, 0, 1, 2, 3, 4}, 6);
  kiln_scope_end();
}

static void from_blob_write_through(void **state) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_blob(KILN_F32, 2, (int64_t[]){2, 3}, NULL, data, NULL, NULL);
  kiln_tensor *pending_reader = kiln_mul_scalar(x, 10); /* still needs the old values */
  assert_int_equal(kiln_fill_(kiln_select(x, 1, 2), 0), KILN_OK);
  assert_int_equal(kiln_realize(x), KILN_OK);
  assert_ptr_equal(kiln_data(x), data);
  assert_float_equal(data[2], 0, 0);
  assert_float_equal(data[5], 0, 0);
  assert_float_equal(data[4], 5, 0);
  expect_values(pending_reader, (double[]){10, 20, 30, 40, 50, 60}, 6);
  kiln_scope_end();
}

static void realize_many_shares_work(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_exp(kiln_arange(KILN_F32, 0, 4, 1));
  kiln_tensor *b = kiln_add_scalar(a, 1);
  kiln_tensor *c = kiln_mul_scalar(a, 2);
  kiln_tensor *both[2] = {b, c};
  assert_int_equal(kiln_realize_many(both, 2), KILN_OK);
  assert_float_equal(kiln_get(b, (int64_t[]){1}), expf(1) + 1, 1e-5);
  assert_float_equal(kiln_get(c, (int64_t[]){2}), 2 * expf(2), 1e-4);
  kiln_scope_end();
}

static void dtype_round_trip(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, (int64_t[]){5}, (double[]){-2.7, -0.5, 0, 1.5, 300.25});
  expect_values(kiln_to_dtype(x, KILN_I32), (double[]){-2, 0, 0, 1, 300}, 5);
  expect_values(kiln_to_dtype(x, KILN_BOOL), (double[]){1, 1, 0, 1, 1}, 5);
  expect_values(kiln_to_dtype(x, KILN_F16), (double[]){-2.69921875, -0.5, 0, 1.5, 300.25}, 5);
  expect_values(kiln_to_dtype(x, KILN_BF16), (double[]){-2.703125, -0.5, 0, 1.5, 300}, 5);
  expect_values(kiln_to_dtype(kiln_to_dtype(x, KILN_I16), KILN_U8), (double[]){254, 0, 0, 1, 44}, 5);
  kiln_scope_end();
}

/* A write into a view of a pending fill (a padded copy, as kiln_conv
 * makes its padded input): one kernel writes the fill and then the
 * region into a new buffer (passes/lower.c, assign_over_slabs). Where
 * the region's leading dims tile the buffer (batch and channels), each
 * of their slabs is filled and written by one parallel index, so the
 * kernel runs on every thread; a region that only narrows the first dim
 * leaves none (a parallel fill, then a serial region loop). Values
 * against the definition, 1 and 2 threads alike. */
static void write_into_pending_fill(void **state) {
  int64_t n = 8, ch = 16, h = 28, w = 28, out_n = n * ch * (h + 2) * (w + 2), in_n = n * ch * h * w;
  kiln_scope_begin();
  kiln_manual_seed(5);
  kiln_tensor *x = kiln_rand(KILN_F32, 4, (int64_t[]){n, ch, h, w});
  float *xv = malloc(sizeof *xv * (size_t)in_n), *yv = malloc(sizeof *yv * (size_t)out_n);
  assert_non_null(xv);
  assert_non_null(yv);
  assert_int_equal(kiln_read(x, xv, sizeof *xv * (size_t)in_n), KILN_OK);
  for (int threads = 1; threads <= 2; threads++) {
    assert_int_equal(kiln_set_num_threads(threads), KILN_OK);
    kiln_tensor *y = kiln_full(KILN_F32, 4, (int64_t[]){n, ch, h + 2, w + 2}, -1.5);
    assert_int_equal(kiln_copy_(kiln_narrow(kiln_narrow(y, 2, 1, h), 3, 1, w), x), KILN_OK);
    kiln_profile_begin();
    assert_int_equal(kiln_realize(y), KILN_OK);
    kiln_profile_end();
    assert_int_equal(kiln_profile_count(), 1);
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
    assert_int_equal(r.name[0], 'A');
    assert_int_equal(r.threads, threads);
    assert_int_equal(kiln_read(y, yv, sizeof *yv * (size_t)out_n), KILN_OK);
    for (int64_t i = 0; i < out_n; i++) {
      int64_t col = i % (w + 2), row = i / (w + 2) % (h + 2), plane = i / ((h + 2) * (w + 2));
      bool inside = row >= 1 && row <= h && col >= 1 && col <= w;
      float want = inside ? xv[(plane * h + row - 1) * w + col - 1] : -1.5f;
      if (yv[i] != want) fail_msg("threads %d: y[%lld] = %g, want %g", threads, (long long)i, yv[i], want);
    }
  }
  /* rows written into the middle of a [rows, w] fill: no dim tiles */
  int64_t rows = n * ch * h + 3;
  kiln_tensor *z = kiln_full(KILN_F32, 2, (int64_t[]){rows, w}, 3);
  assert_int_equal(kiln_copy_(kiln_narrow(z, 0, 2, rows - 3), kiln_view(x, 2, (int64_t[]){rows - 3, w})), KILN_OK);
  assert_int_equal(kiln_read(z, yv, sizeof *yv * (size_t)(rows * w)), KILN_OK);
  for (int64_t i = 0; i < rows * w; i++) {
    int64_t row = i / w;
    float want = row >= 2 && row < rows - 1 ? xv[i - 2 * w] : 3.0f;
    if (yv[i] != want) fail_msg("first dim: z[%lld] = %g, want %g", (long long)i, yv[i], want);
  }
  free(xv); /* (the pool keeps 2 threads: the later tests do not depend on it) */
  free(yv);
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(design_example),        cmocka_unit_test(lazy_until_forced),
      cmocka_unit_test(overlapping_and_stride0_views), cmocka_unit_test(copy_into_expanded_view_rejected),
      cmocka_unit_test(set_and_get),
      cmocka_unit_test(copy_sizes_differ),     cmocka_unit_test(copy_from_own_storage),
      cmocka_unit_test(from_blob_write_through), cmocka_unit_test(realize_many_shares_work),
      cmocka_unit_test(dtype_round_trip),      cmocka_unit_test(write_into_pending_fill),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
