/*
 * test_linalg_solve.c — kiln_linalg_solve and kiln_linalg_inv
 * (ops/linalg_solve.c: the SOLVE extern op on LAPACK's ?gesv): A X = B checked
 * by its residual and inv(A) A = I in double, F32 and batches, the
 * profiler record of the LAPACK call, a singular matrix failing the force
 * (and nothing else), and gradient checks (grad_check.h) w.r.t. A and B
 * through non-contiguous inputs, second order included.
 * tests/python/test_linalg_solve_torch.py compares with Torch 1.13;
 * tests/CMakeLists.txt runs this program again with KILN_FUSE=0.
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
#include "rt_internal.h"
#include "test_util.h"
#include "grad_check.h"

enum { B = 3, N = 5, K = 2 };

/* a: B dominant-diagonal N x N matrices */
static void matrices(double *a, double *b, uint64_t seed) {
  for (int i = 0; i < B * N * N; i++) a[i] = gc_uniform(&seed, -1, 1) + (i % (N * N) % (N + 1) == 0 ? 4 : 0);
  for (int i = 0; i < B * N * K; i++) b[i] = gc_uniform(&seed, -2, 2);
}

static void residuals(void **state) {
  (void)state;
  kiln_scope_begin();
  double a[B * N * N], b[B * N * K], x[B * N * K], inv[B * N * N];
  matrices(a, b, 7);
  kiln_tensor *at = kiln_from_data(KILN_F64, 3, (int64_t[]){B, N, N}, a);
  kiln_tensor *bt = kiln_from_data(KILN_F64, 3, (int64_t[]){B, N, K}, b);
  kiln_profile_begin();
  assert_int_equal(kiln_read(kiln_linalg_solve(at, bt), x, sizeof x), KILN_OK);
  kiln_profile_end();
  kiln_kernel_record r;
  bool found = false;
  for (int i = 0; i < kiln_profile_count(); i++)
    if (kiln_profile_get(i, &r) == KILN_OK && strcmp(r.backend, "lapack") == 0) {
      found = true;
      assert_string_equal(r.name, "lapack_dgesv_5x2");
    }
  assert_true(found);
  assert_int_equal(kiln_read(kiln_linalg_inv(at), inv, sizeof inv), KILN_OK);
  for (int m = 0; m < B; m++)
    for (int i = 0; i < N; i++) {
      for (int j = 0; j < K; j++) {
        double s = 0;
        for (int l = 0; l < N; l++) s += a[m * N * N + i * N + l] * x[m * N * K + l * K + j];
        assert_float_equal(s, b[m * N * K + i * K + j], 1e-13);
      }
      for (int j = 0; j < N; j++) {
        double s = 0;
        for (int l = 0; l < N; l++) s += inv[m * N * N + i * N + l] * a[m * N * N + l * N + j];
        assert_float_equal(s, i == j, 1e-13);
      }
    }
  /* F32 solves in F32 */
  kiln_tensor *x32 = kiln_linalg_solve(kiln_to_dtype(at, KILN_F32), kiln_to_dtype(bt, KILN_F32));
  assert_int_equal(kiln_dtype_of(x32), KILN_F32);
  expect_values_tol(x32, x, B * N * K, 1e-5);
  expect_no_error();
  kiln_scope_end();
}

/* A singular batch fails the force with KILN_ERR_ARG; the inputs stay
 * usable. */
static void singular(void **state) {
  (void)state;
  kiln_scope_begin();
  double a[8] = {1, 0, 0, 1, 1, 2, 2, 4};
  kiln_tensor *at = kiln_from_data(KILN_F64, 3, (int64_t[]){2, 2, 2}, a);
  kiln_tensor *x = kiln_linalg_inv(at);
  assert_non_null(x);
  assert_int_equal(kiln_realize(x), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "singular", "batch 1", NULL);
  expect_values_tol(kiln_linalg_inv(kiln_narrow(at, 0, 0, 1)), (double[]){1, 0, 0, 1}, 4, 0);
  assert_null(kiln_linalg_solve(at, kiln_zeros(KILN_F64, 2, (int64_t[]){3, 2})));
  expect_error(KILN_ERR_SHAPE, "kiln_linalg_solve", "B sizes [3, 2]", NULL);
  kiln_scope_end();
}

static kiln_tensor *solve_case(kiln_tensor *const *x, void *ctx) {
  int kind = *(int *)ctx;
  kiln_tensor *a = kiln_add(gc_mark(kiln_transpose(x[0], 1, 2)), kiln_mul_scalar(kiln_eye(KILN_F64, N, N), 4));
  if (kind == 0) return kiln_linalg_solve(a, x[1]);
  if (kind == 1) return kiln_linalg_solve(a, kiln_select(x[1], 2, 0)); /* a batch of vectors */
  if (kind == 2) return kiln_linalg_inv(a);
  /* second order: the gradient of sum(inv(a)^2) w.r.t. a, as a function of a */
  kiln_tensor *y = kiln_linalg_inv(a), *g;
  kiln_tensor *l = kiln_sum(kiln_mul(y, y), 0, NULL, false);
  if (kiln_grad(&l, NULL, 1, &a, 1, &g) != KILN_OK) return NULL;
  return g;
}

static void grads(void **state) {
  (void)state;
  uint64_t seed = 31;
  for (int kind = 0; kind < 4; kind++) {
    gc_input in[2] = {gc_in(&seed, 3, (int64_t[]){B, N, N}, -1, 1), gc_in(&seed, 3, (int64_t[]){B, N, K}, -2, 2)};
    char name[32];
    snprintf(name, sizeof name, "solve kind %d", kind);
    gc_check(name, solve_case, &kind, in, kind >= 2 ? 1 : 2, seed);
  }
}

static void report(void **state) {
  (void)state;
  gc_report("test_linalg_solve");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(residuals),
      cmocka_unit_test(singular),
      cmocka_unit_test(grads),
      cmocka_unit_test(report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
