/*
 * test_linalg.c — matrix products on known values: every layout BLAS
 * takes as it is (row-major, transposed views) and the packed fallback,
 * broadcast batches, the generated-kernel path for integer dtypes, F16
 * and BF16 products on the F32 GEMM, addmm's beta/alpha, the profile records of a product and its
 * fused epilogue, and the error paths.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "pool.h"
#include "rt_internal.h"
#include "test_util.h"

/* [rows, cols] tensor of dtype dt holding 0, 1, 2, ... scaled by `scale`. */
static kiln_tensor *ramp(kiln_dtype dt, int64_t rows, int64_t cols, double scale) {
  kiln_tensor *r = kiln_mul_scalar(kiln_arange(KILN_F64, 0, (double)(rows * cols), 1), scale);
  return kiln_to_dtype(kiln_view(r, 2, (int64_t[]){rows, cols}), dt);
}

/* want = a @ b for ramp matrices, computed here in double. */
static void reference(int64_t m, int64_t k, int64_t n, double sa, double sb, bool ta, bool tb, double *want) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t p = 0; p < k; p++) {
        double x = (ta ? p * m + i : i * k + p) * sa, y = (tb ? j * k + p : p * n + j) * sb;
        acc += x * y;
      }
      want[i * n + j] = acc;
    }
}

/* a [3, 4] @ b [4, 5] for every transposed/plain combination and dtype. */
static void layouts_and_dtypes(void **state) {
  kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_I64, KILN_U8};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (int t = 0; t < 4; t++) {
      kiln_scope_begin();
      bool ta = t & 1, tb = t & 2;
      kiln_tensor *a = ta ? kiln_t(ramp(dts[d], 4, 3, 1)) : ramp(dts[d], 3, 4, 1);
      kiln_tensor *b = tb ? kiln_t(ramp(dts[d], 5, 4, 1)) : ramp(dts[d], 4, 5, 1);
      kiln_tensor *c = kiln_mm(a, b);
      assert_int_equal(kiln_dtype_of(c), dts[d]);
      assert_int_equal(kiln_size(c, 0), 3);
      assert_int_equal(kiln_size(c, 1), 5);
      double want[15];
      reference(3, 4, 5, 1, 1, ta, tb, want);
      if (dts[d] == KILN_U8)
        for (int i = 0; i < 15; i++) want[i] = fmod(want[i], 256);
      /* BF16 holds 8 significant bits: products up to ~1000 round */
      expect_values_tol(c, want, 15, dts[d] == KILN_BF16 ? 4 : 0);
      kiln_scope_end();
    }
  expect_no_error();
}

/* F16 and BF16 products run on the F32 GEMM (ops/linalg.c, half_product):
 * the profile has a GEMM record of the product's shape and no
 * reduction kernel; values in multiples of 1/8 (exact in both dtypes)
 * give exact F32 sums, so the result is the exact product rounded once to
 * the dtype (half an ulp: 2^-11 relative for F16, 2^-8 for BF16). A
 * transposed operand and a batch too. */
static void half_products_on_the_gemm(void **state) {
  kiln_dtype dts[2] = {KILN_F16, KILN_BF16};
  const int64_t m = 37, k = 90, n = 70;
  for (int d = 0; d < 2; d++) {
    kiln_scope_begin();
    double av[37 * 90], bv[90 * 70];
    for (int i = 0; i < m * k; i++) av[i] = (double)((i * 7) % 17 - 8) / 8;
    for (int i = 0; i < k * n; i++) bv[i] = (double)((i * 5) % 13 - 6) / 8;
    kiln_tensor *a = kiln_to_dtype(kiln_from_data(KILN_F64, 2, (int64_t[]){m, k}, av), dts[d]);
    kiln_tensor *bt = kiln_to_dtype(kiln_t(kiln_from_data(KILN_F64, 2, (int64_t[]){k, n}, bv)), dts[d]);
    assert_int_equal(kiln_realize(a), KILN_OK);
    assert_int_equal(kiln_realize(bt), KILN_OK);
    kiln_profile_begin();
    kiln_tensor *c = kiln_matmul(a, kiln_t(kiln_contiguous(bt))); /* a column-major B */
    kiln_tensor *cb = kiln_matmul(kiln_stack((kiln_tensor *[]){a, a}, 2, 0), kiln_t(bt)); /* batched, B broadcast */
    kiln_tensor *both[2] = {c, cb};
    assert_int_equal(kiln_realize_many(both, 2), KILN_OK);
    kiln_profile_end();
    assert_int_equal(kiln_dtype_of(c), dts[d]);
    bool gemm = false, reduction = false;
    kiln_kernel_record r;
    for (int i = 0; i < kiln_profile_count(); i++) {
      assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
      gemm |= strstr(r.name, "gemm_37x70x90") != NULL;
      reduction |= r.name[0] == 'R';
    }
    assert_true(gemm);
    assert_false(reduction);
    double *got = test_malloc(sizeof *got * (size_t)(2 * m * n));
    kiln_scope_begin();
    assert_int_equal(kiln_read(kiln_to_dtype(c, KILN_F64), got, sizeof *got * (size_t)(m * n)), KILN_OK);
    assert_int_equal(kiln_read(kiln_to_dtype(kiln_select(cb, 0, 1), KILN_F64), got + m * n, sizeof *got * (size_t)(m * n)),
                     KILN_OK); /* (the second batch: both are a @ B) */
    kiln_scope_end();
    double rel = d == 0 ? ldexp(1, -11) : ldexp(1, -8);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double want = 0;
        for (int64_t q = 0; q < k; q++) want += av[i * k + q] * bv[q * n + j];
        for (int rep = 0; rep < 2; rep++)
          if (!(fabs(got[rep * m * n + i * n + j] - want) <= rel * fabs(want)))
            fail_msg("%s c[%lld][%lld] = %.9g, want %.9g", d ? "BF16" : "F16", (long long)i, (long long)j,
                     got[rep * m * n + i * n + j], want);
      }
    test_free(got);
    kiln_scope_end();
  }
  expect_no_error();
}

/* Neither layout (stride 2 in both dims): the operand is packed first. */
static void packed_operand(void **state) {
  kiln_scope_begin();
  kiln_tensor *big = ramp(KILN_F32, 6, 8, 1);
  kiln_tensor *a = kiln_as_strided(big, 2, (int64_t[]){3, 4}, (int64_t[]){16, 2}, 0);
  kiln_tensor *b = ramp(KILN_F32, 4, 2, 1);
  double want[6];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) {
      want[i * 2 + j] = 0;
      for (int p = 0; p < 4; p++) want[i * 2 + j] += (double)(i * 16 + p * 2) * (p * 2 + j);
    }
  expect_values_tol(kiln_mm(a, b), want, 6, 0);
  kiln_scope_end();
}

/* Batch dims broadcast ([2, 1, 2, 3] @ [3, 3, 2] -> [2, 3, 2, 2]); 1-D
 * operands lose their added dim. */
static void batches_and_vectors(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_view(ramp(KILN_F64, 2, 6, 1), 4, (int64_t[]){2, 1, 2, 3});
  kiln_tensor *b = kiln_view(ramp(KILN_F64, 3, 6, 1), 3, (int64_t[]){3, 3, 2});
  kiln_tensor *c = kiln_matmul(a, b);
  assert_int_equal(kiln_dim(c), 4);
  int64_t want_sizes[] = {2, 3, 2, 2};
  for (int d = 0; d < 4; d++) assert_int_equal(kiln_size(c, d), want_sizes[d]);
  double got[24];
  assert_int_equal(kiln_read(c, got, sizeof got), KILN_OK);
  for (int x = 0; x < 2; x++)
    for (int y = 0; y < 3; y++)
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
          double acc = 0;
          for (int p = 0; p < 3; p++) acc += (double)(x * 6 + i * 3 + p) * (y * 6 + p * 2 + j);
          assert_float_equal(got[((x * 3 + y) * 2 + i) * 2 + j], acc, 0);
        }
  kiln_tensor *v = kiln_arange(KILN_F32, 1, 4, 1); /* [1, 2, 3] */
  kiln_tensor *m = ramp(KILN_F32, 3, 2, 1);        /* [[0,1],[2,3],[4,5]] */
  kiln_tensor *vm = kiln_matmul(v, m), *mv = kiln_mv(kiln_t(m), v), *dot = kiln_dot(v, v);
  assert_int_equal(kiln_dim(vm), 1);
  assert_int_equal(kiln_dim(dot), 0);
  expect_values_tol(vm, (double[]){16, 22}, 2, 0);
  expect_values_tol(mv, (double[]){16, 22}, 2, 0);
  assert_float_equal(kiln_item(dot), 14, 0);
  /* K = 0: zeros; M = 0: empty */
  kiln_tensor *z = kiln_mm(kiln_zeros(KILN_F32, 2, (int64_t[]){2, 0}), kiln_zeros(KILN_F32, 2, (int64_t[]){0, 3}));
  expect_values_tol(z, (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
  kiln_tensor *e = kiln_mm(kiln_zeros(KILN_F32, 2, (int64_t[]){0, 2}), kiln_ones(KILN_F32, 2, (int64_t[]){2, 3}));
  assert_int_equal(kiln_numel(e), 0);
  assert_int_equal(kiln_realize(e), KILN_OK);
  kiln_scope_end();
  expect_no_error();
}

static void addmm_values(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = ramp(KILN_F32, 2, 2, 1), *id = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 2});
  kiln_set(id, (int64_t[]){0, 0}, 1);
  kiln_set(id, (int64_t[]){1, 1}, 1);
  kiln_tensor *bias = kiln_arange(KILN_F32, 10, 12, 1); /* [10, 11] broadcast over rows */
  /* 0.5 * bias + 2 * (a @ I) */
  expect_values_tol(kiln_addmm(bias, a, id, 0.5, 2), (double[]){5, 7.5, 9, 11.5}, 4, 0);
  kiln_tensor *nan_bias = kiln_full(KILN_F32, 2, (int64_t[]){2, 2}, NAN);
  expect_values_tol(kiln_addmm(nan_bias, a, id, 0, 1), (double[]){0, 1, 2, 3}, 4, 0);
  kiln_scope_end();
  expect_no_error();
}

/* relu(a @ b + bias): the BLAS call, then one fused kernel; under
 * cuda-emu one kernel, the tiled GEMM (runtime/cuda_gemm_run.c) with the
 * bias and relu applied before its stores. */
static void profile_of_product_and_epilogue(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = ramp(KILN_F32, 8, 16, 0.01), *b = ramp(KILN_F32, 16, 4, -0.01);
  kiln_tensor *bias = kiln_arange(KILN_F32, 0, 4, 1);
  assert_int_equal(kiln_realize(a), KILN_OK);
  assert_int_equal(kiln_realize(b), KILN_OK);
  assert_int_equal(kiln_realize(bias), KILN_OK);
  rt_set_fusion(1); /* the kernel count below is fusion's */
  kiln_profile_begin();
  kiln_tensor *y = kiln_relu(kiln_add(kiln_mm(kiln_t(b), kiln_t(a)), kiln_unsqueeze(bias, 1)));
  assert_int_equal(kiln_realize(y), KILN_OK);
  kiln_profile_end();
  rt_set_fusion(-1);
  bool emu = strcmp(test_kernel_backend(), "cuda-emu") == 0;
  assert_int_equal(kiln_profile_count(), emu ? 1 : 2);
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
  assert_string_equal(r.backend, emu ? "cuda-emu" : "blas");
  assert_string_equal(r.name, emu ? "cuda_gemm_4x8x16_bias_relu" : "blas_sgemm_4x8x16");
  assert_int_equal(r.flops, 2 * 4 * 8 * 16 + (emu ? 2 * 4 * 8 : 0));
  assert_int_equal(r.bytes_written, 4 * 8 * 4);
  double y_want[32];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 8; j++) {
      double s = 0;
      for (int q = 0; q < 16; q++) s += -0.01 * (q * 4 + i) * 0.01 * (j * 16 + q);
      y_want[i * 8 + j] = s + i > 0 ? s + i : 0;
    }
  expect_values_tol(y, y_want, 32, 1e-5);
  if (emu) {
    kiln_scope_end();
    return;
  }
  assert_int_equal(kiln_profile_get(1, &r), KILN_OK);
  assert_string_equal(r.backend, test_kernel_backend());
  assert_int_equal(r.n_ops, 2); /* add and relu */
  kiln_scope_end();
}

/* c against the double reference of the ramp product a [m, k] @ b [k, n]
 * (scales sa, sb; ta, tb: built transposed), relative error 1e-12. */
static void expect_ramp_product(kiln_tensor *c, int64_t m, int64_t k, int64_t n, double sa, double sb, bool ta,
                                bool tb) {
  double *want = test_malloc(sizeof *want * (size_t)(m * n)), *got = test_malloc(sizeof *got * (size_t)(m * n));
  reference(m, k, n, sa, sb, ta, tb, want);
  assert_int_equal(kiln_numel(c), m * n);
  assert_int_equal(kiln_read(c, got, sizeof *got * (size_t)(m * n)), KILN_OK);
  for (int64_t i = 0; i < m * n; i++) assert_float_equal(got[i], want[i], 1e-12 * (fabs(want[i]) + 1));
  test_free(want);
  test_free(got);
}

/* Products split over the pool (runtime/blas.c), on 3 threads (blocks
 * of 16 that do not divide the side) and 2: by columns (N ≥ M), by
 * rows, transposed operands (a block starts one column or one row in),
 * a packed operand, matrix-vector and vector-matrix products (gemv on
 * a block of rows or columns), and batches. Values against the double
 * reference; the record counts the threads the product ran on.
 * OpenBLAS forced (KILN_GEMM=blas): this is blas.c's split (the
 * generated GEMM's is test_gemm.c's). */
static void split_over_pool(void **state) {
  if (strcmp(test_kernel_backend(), "cuda-emu") == 0) {
    print_message("skipped: cuda-emu runs products through the tiled GEMM kernel, not blas.c\n");
    skip();
  }
  int threads[] = {3, 2}, before = rt_pool_threads();
  rt_gemm_set_mode(2);
  for (int t = 0; t < 2; t++) {
    kiln_set_num_threads(threads[t]);
    for (int c = 0; c < 8; c++) {
      kiln_scope_begin();
      bool ta = c & 1, tb = c & 2, rows = c & 4; /* rows: M > N */
      int64_t m = rows ? 301 : 37, k = 140, n = rows ? 37 : 301;
      kiln_tensor *a = ta ? kiln_t(ramp(KILN_F64, k, m, 1e-3)) : ramp(KILN_F64, m, k, 1e-3);
      kiln_tensor *b = tb ? kiln_t(ramp(KILN_F64, n, k, -2e-3)) : ramp(KILN_F64, k, n, -2e-3);
      kiln_profile_begin();
      kiln_tensor *y = kiln_mm(a, b);
      assert_int_equal(kiln_realize(y), KILN_OK);
      kiln_profile_end();
      expect_ramp_product(y, m, k, n, 1e-3, -2e-3, ta, tb);
      kiln_kernel_record r;
      assert_int_equal(kiln_profile_get(kiln_profile_count() - 1, &r), KILN_OK);
      assert_string_equal(r.backend, "blas");
      assert_int_equal(r.threads, threads[t]);
      kiln_scope_end();
    }
    kiln_scope_begin();
    /* packed: rows of a are every other row of a [2m, 2k] ramp, every other column */
    kiln_tensor *big = ramp(KILN_F64, 2 * 301, 2 * 70, 1);
    kiln_tensor *pa = kiln_as_strided(big, 2, (int64_t[]){301, 70}, (int64_t[]){4 * 70, 2}, 0);
    kiln_tensor *y = kiln_mm(pa, kiln_t(kiln_contiguous(kiln_t(ramp(KILN_F64, 70, 37, 1)))));
    double *want = test_malloc(sizeof *want * 301 * 37), got[2];
    for (int64_t i = 0; i < 301; i++)
      for (int64_t j = 0; j < 37; j++) {
        want[i * 37 + j] = 0;
        for (int64_t p = 0; p < 70; p++) want[i * 37 + j] += (double)(i * 4 * 70 + p * 2) * (double)(p * 37 + j);
      }
    double *all = test_malloc(sizeof *all * 301 * 37);
    assert_int_equal(kiln_read(y, all, sizeof *all * 301 * 37), KILN_OK);
    for (int64_t i = 0; i < 301 * 37; i++) assert_float_equal(all[i], want[i], 1e-12 * fabs(want[i]));
    test_free(all);
    test_free(want);
    /* gemv: [2000, 300] @ [300] (a block of rows each), [300] @ [300, 2000] (a block of columns each) */
    kiln_tensor *mat = ramp(KILN_F64, 2000, 300, 1e-3), *v = kiln_arange(KILN_F64, 0, 300, 1);
    kiln_tensor *mv = kiln_mv(mat, v), *vm = kiln_matmul(v, kiln_t(mat));
    for (int64_t i = 0; i < 2000; i += 333) {
      double acc = 0;
      for (int64_t p = 0; p < 300; p++) acc += (double)(i * 300 + p) * 1e-3 * (double)p;
      assert_int_equal(kiln_read(kiln_narrow(mv, 0, i, 1), &got[0], sizeof got[0]), KILN_OK);
      assert_int_equal(kiln_read(kiln_narrow(vm, 0, i, 1), &got[1], sizeof got[1]), KILN_OK);
      assert_float_equal(got[0], acc, 1e-12 * acc);
      assert_float_equal(got[1], acc, 1e-12 * acc);
    }
    /* batches: [4, 40, 50] @ [4, 50, 70], one batch per item */
    kiln_tensor *ba = kiln_view(ramp(KILN_F64, 4 * 40, 50, 1e-2), 3, (int64_t[]){4, 40, 50});
    kiln_tensor *bb = kiln_view(ramp(KILN_F64, 4 * 50, 70, 1e-2), 3, (int64_t[]){4, 50, 70});
    kiln_tensor *bc = kiln_bmm(ba, bb);
    for (int64_t x = 0; x < 4; x++) {
      double acc = 0;
      for (int64_t p = 0; p < 50; p++) acc += (double)((x * 40 + 39) * 50 + p) * 1e-2 * (double)((x * 50 + p) * 70 + 69) * 1e-2;
      assert_int_equal(kiln_read(kiln_select(kiln_select(kiln_select(bc, 0, x), 0, 39), 0, 69), &got[0], sizeof got[0]),
                       KILN_OK);
      assert_float_equal(got[0], acc, 1e-12 * acc);
    }
    kiln_scope_end();
  }
  kiln_set_num_threads(before);
  rt_gemm_set_mode(-1);
  expect_no_error();
}

static void errors(void **state) {
  kiln_scope_begin();
  kiln_tensor *m23 = kiln_zeros(KILN_F32, 2, (int64_t[]){2, 3}), *m45 = kiln_zeros(KILN_F32, 2, (int64_t[]){4, 5});
  assert_null(kiln_matmul(m23, m45));
  expect_error(KILN_ERR_SHAPE, "kiln_matmul", "[2, 3]", "[4, 5]", "inner dims differ (3 and 4)", NULL);
  assert_null(kiln_matmul(NULL, m45));
  expect_error(KILN_ERR_ARG, "kiln_matmul", NULL);
  assert_null(kiln_mm(kiln_zeros(KILN_F32, 1, (int64_t[]){3}), m23));
  expect_error(KILN_ERR_SHAPE, "kiln_mm: a must be 2-D, got 1-D", NULL);
  assert_null(kiln_mv(m23, m23));
  expect_error(KILN_ERR_SHAPE, "kiln_mv: b must be 1-D", NULL);
  assert_null(kiln_dot(kiln_scalar(KILN_F32, 1), kiln_scalar(KILN_F32, 1)));
  expect_error(KILN_ERR_SHAPE, "kiln_dot: a must be 1-D, got 0-D", NULL);
  assert_null(kiln_bmm(kiln_zeros(KILN_F32, 3, (int64_t[]){2, 2, 3}), kiln_zeros(KILN_F32, 3, (int64_t[]){3, 3, 2})));
  expect_error(KILN_ERR_SHAPE, "kiln_bmm", "batch sizes differ", NULL);
  kiln_tensor *bools = kiln_ones(KILN_BOOL, 2, (int64_t[]){2, 2});
  assert_null(kiln_mm(bools, bools));
  expect_error(KILN_ERR_DTYPE, "kiln_mm", "bool", NULL);
  assert_null(kiln_addmm(kiln_zeros(KILN_F32, 1, (int64_t[]){3}), m23, kiln_t(m23), 1, 1));
  expect_error(KILN_ERR_SHAPE, "kiln_addmm", "bias of sizes [3] cannot be broadcast to [2, 2]", NULL);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layouts_and_dtypes),
      cmocka_unit_test(half_products_on_the_gemm), cmocka_unit_test(packed_operand),
      cmocka_unit_test(batches_and_vectors), cmocka_unit_test(addmm_values),
      cmocka_unit_test(profile_of_product_and_epilogue), cmocka_unit_test(split_over_pool),
      cmocka_unit_test(errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
