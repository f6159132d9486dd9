/*
 * test_algebra.c — the algebraic simplifier (passes/algebra.c): identities,
 * CSE, constant folding and dead-node removal change how many ops a kernel
 * runs (profile n_ops) but never a value; requested nodes keep their own
 * buffers; float x + 0 is not an identity (-0.0 + 0 = +0.0).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

static kiln_tensor *realized(kiln_tensor *t) {
  assert_int_equal(kiln_realize(t), KILN_OK);
  return t;
}

/* Forces t with the profiler on; returns the one kernel's n_ops. */
static int ops_of_single_kernel(kiln_tensor *t) {
  kiln_profile_begin();
  assert_int_equal(kiln_realize(t), KILN_OK);
  kiln_profile_end();
  assert_int_equal(kiln_profile_count(), 1);
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
  return r.n_ops;
}

static void identities(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = realized(kiln_arange(KILN_F32, 0, 4, 1));
  kiln_tensor *xi = realized(kiln_arange(KILN_I32, 0, 4, 1));
  /* (x * 1) / 1 - 0, cast to its own dtype, + 0.5: only the add remains */
  kiln_tensor *id = kiln_to_dtype(kiln_sub_scalar(kiln_div_scalar(kiln_mul_scalar(x, 1), 1), 0), KILN_F32);
  kiln_tensor *y = kiln_add_scalar(id, 0.5);
  assert_int_equal(ops_of_single_kernel(y), 1);
  expect_values_tol(y, (double[]){0.5, 1.5, 2.5, 3.5}, 4, 0);
  /* integers: i + 0 is an identity */
  kiln_tensor *yi = kiln_mul_scalar(kiln_add_scalar(xi, 0), 3);
  assert_int_equal(ops_of_single_kernel(yi), 1);
  expect_values_tol(yi, (double[]){0, 3, 6, 9}, 4, 0);
  /* a multiply by 1 that changes the dtype is not an identity */
  kiln_tensor *yp = kiln_add_scalar(kiln_mul_scalar(xi, 1.0), 0.5);
  kiln_tensor *promoted = kiln_mul_scalar(xi, 1.5);
  assert_int_equal(kiln_dtype_of(promoted), KILN_F32);
  expect_values_tol(yp, (double[]){0.5, 1.5, 2.5, 3.5}, 4, 0);
  kiln_scope_end();
  expect_no_error();
}

static void float_plus_zero_keeps_its_sign_rule(void **state) {
  kiln_scope_begin();
  kiln_tensor *nz = realized(kiln_full(KILN_F32, 1, (int64_t[]){2}, -0.0));
  kiln_tensor *y = kiln_neg(kiln_mul_scalar(kiln_add_scalar(nz, 0), 1));
  assert_int_equal(ops_of_single_kernel(y), 2); /* * 1 goes, + 0 stays */
  const float *v = kiln_data(y);
  assert_non_null(v);
  assert_true(signbit(v[0])); /* -(-0.0 + 0) = -(+0.0) = -0.0, as in Torch */
  kiln_scope_end();
  expect_no_error();
}

static void common_subexpressions(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = realized(kiln_arange(KILN_F32, 0, 3, 1));
  /* exp(x) recorded twice, then both used: computed once */
  kiln_tensor *y = kiln_add(kiln_exp(x), kiln_exp(x));
  assert_int_equal(ops_of_single_kernel(y), 2);
  expect_values_tol(y, (double[]){2, 2 * exp(1.0), 2 * exp(2.0)}, 3, 1e-5);
  /* same op through another view is not common */
  kiln_tensor *z = kiln_add(kiln_exp(x), kiln_exp(kiln_narrow(realized(kiln_arange(KILN_F32, 0, 4, 1)), 0, 1, 3)));
  assert_int_equal(ops_of_single_kernel(z), 3);
  expect_values_tol(z, (double[]){1 + exp(1.0), exp(1.0) + exp(2.0), exp(2.0) + exp(3.0)}, 3, 1e-5);
  /* two requested equal nodes keep their own storages */
  kiln_tensor *a = kiln_mul_scalar(x, 2), *b = kiln_mul_scalar(x, 2);
  kiln_tensor *both[] = {a, b};
  assert_int_equal(kiln_realize_many(both, 2), KILN_OK);
  assert_ptr_not_equal(kiln_data(a), kiln_data(b));
  assert_int_equal(kiln_fill_(a, 7), KILN_OK);
  expect_values_tol(b, (double[]){0, 2, 4}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

static void constant_folding(void **state) {
  kiln_scope_begin();
  int64_t s[] = {3};
  kiln_tensor *x = realized(kiln_arange(KILN_F32, 0, 3, 1));
  /* (2 * 3 - 1) computed once at force time: the kernel only adds */
  kiln_tensor *c = kiln_sub_scalar(kiln_mul(kiln_full(KILN_F32, 1, s, 2), kiln_full(KILN_F32, 1, s, 3)), 1);
  kiln_tensor *y = kiln_add(x, c);
  assert_int_equal(ops_of_single_kernel(y), 1);
  expect_values_tol(y, (double[]){5, 6, 7}, 3, 0);
  /* F32 rounding as a kernel would: 0.1f + 0.2f */
  kiln_tensor *f = kiln_add(kiln_full(KILN_F32, 1, s, 0.1), kiln_full(KILN_F32, 1, s, 0.2));
  const float *fv = kiln_data(f);
  assert_non_null(fv);
  assert_true(fv[0] == 0.1f + 0.2f);
  /* I32 wraps */
  kiln_tensor *w = kiln_add(kiln_full(KILN_I32, 1, s, 2147483647), kiln_full(KILN_I32, 1, s, 1));
  expect_values_tol(w, (double[]){-2147483648.0, -2147483648.0, -2147483648.0}, 3, 0);
  /* NaN propagates through maximum */
  kiln_tensor *m = kiln_maximum(kiln_full(KILN_F64, 1, s, NAN), kiln_full(KILN_F64, 1, s, 1));
  expect_values_tol(m, (double[]){NAN, NAN, NAN}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Nodes that differ only in an attribute are not common (CSE compares
 * the attribute bytes): clamp's lower bound 0.0 and -0.0 (1 / clamp(-2,
 * lo, 5) is +inf and -inf; merged, their difference would be NaN), gather
 * along dim 0 and dim 1 with one source and index, cumsum along dim 0 and
 * dim 1 (merged, each difference would be 0). */
static void attributes_tell_nodes_apart(void **state) {
  rt_set_fusion(1); /* the simplifier runs with fusion on */
  kiln_scope_begin();
  kiln_tensor *x = realized(kiln_full(KILN_F64, 1, (int64_t[]){1}, -2));
  kiln_tensor *inv = kiln_sub(kiln_reciprocal(kiln_clamp(x, 0.0, 5)), kiln_reciprocal(kiln_clamp(x, -0.0, 5)));
  double got;
  assert_int_equal(kiln_read(inv, &got, sizeof got), KILN_OK);
  assert_true(isinf(got) && got > 0);
  int64_t sq[2] = {2, 2};
  kiln_tensor *src = realized(kiln_reshape(kiln_arange(KILN_F32, 1, 5, 1), 2, sq));
  kiln_tensor *flat_idx = kiln_from_data(KILN_I64, 1, (int64_t[]){4}, (int64_t[]){0, 1, 1, 0});
  kiln_tensor *idx = realized(kiln_reshape(flat_idx, 2, sq));
  /* src [[1, 2], [3, 4]]: dim 0 [[1, 4], [3, 2]], dim 1 [[1, 2], [4, 3]] */
  kiln_tensor *g = kiln_sub(kiln_gather(src, 0, idx), kiln_gather(src, 1, idx));
  expect_values_tol(g, (double[]){0, 2, -1, -1}, 4, 0);
  /* dim 0 [[1, 2], [4, 6]], dim 1 [[1, 3], [3, 7]] */
  kiln_tensor *c = kiln_sub(kiln_cumsum(src, 0), kiln_cumsum(src, 1));
  expect_values_tol(c, (double[]){0, -1, 1, -1}, 4, 0);
  kiln_scope_end();
  rt_set_fusion(-1);
  expect_no_error();
}

/* Fused and simplified results equal the unfused, unsimplified ones bit
 * for bit on a mix of everything above. */
static void same_bits_as_unsimplified(void **state) {
  double got[2][6];
  for (int mode = 0; mode < 2; mode++) {
    rt_set_fusion(mode == 0 ? 0 : 1);
    kiln_scope_begin();
    kiln_tensor *x = kiln_div_scalar(kiln_arange(KILN_F32, -3, 3, 1), 7);
    kiln_tensor *e = kiln_add(kiln_tanh(kiln_mul_scalar(x, 1)), kiln_tanh(x));
    kiln_tensor *k = kiln_mul(kiln_full(KILN_F32, 1, (int64_t[]){6}, 0.3), kiln_full(KILN_F32, 1, (int64_t[]){6}, 3));
    kiln_tensor *y = kiln_sub_scalar(kiln_add(e, k), 0);
    kiln_tensor *y64 = kiln_to_dtype(y, KILN_F64);
    assert_int_equal(kiln_read(y64, got[mode], sizeof got[mode]), KILN_OK);
    kiln_scope_end();
  }
  rt_set_fusion(-1);
  assert_memory_equal(got[0], got[1], sizeof got[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(identities), cmocka_unit_test(float_plus_zero_keeps_its_sign_rule),
      cmocka_unit_test(common_subexpressions), cmocka_unit_test(constant_folding),
      cmocka_unit_test(same_bits_as_unsimplified), cmocka_unit_test(attributes_tell_nodes_apart),
  };
  rt_set_fusion(1); /* the simplifier runs with fusion on (KILN_FUSE=0 skips the passes) */
  return cmocka_run_group_tests(tests, NULL, NULL);
}
