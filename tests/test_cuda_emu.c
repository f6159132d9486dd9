/*
 * test_cuda_emu.c — the "cuda-emu" backend: kernels printed as CUDA C,
 * checked by NVRTC (sm_80, compute_90 + ptxas sm_90) and run on the CPU
 * from the same source built by the host C++ compiler. Values are checked
 * against known results. Skipped (with a message) when NVRTC or the host
 * compiler is missing, unless $CI is set and /usr/local/cuda exists.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda_backend.h"
#include "kiln/kiln.h"
#include "runtime.h"
#include "test_util.h"

/* Selects cuda-emu, or skips the test when the toolchain is missing. */
static void use_emu(void) {
  if (kiln_set_backend("cuda-emu") == KILN_OK) return;
  const char *ci = getenv("CI");
  if (ci && *ci && access("/usr/local/cuda", F_OK) == 0)
    fail_msg("cuda-emu unavailable under CI: %s", kiln_last_error());
  print_message("cuda-emu skipped: %s\n", kiln_last_error());
  kiln_clear_error();
  skip();
}

static int back_to_llvm(void **state) {
  (void)state;
  return kiln_set_backend("llvm");
}

static void elementwise_chain(void **state) {
  use_emu();
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F32, 0, 8, 1);
  kiln_tensor *y = kiln_add(kiln_exp(kiln_mul_scalar(x, 0.5)), kiln_tanh(kiln_add_scalar(x, -3)));
  double want[8];
  for (int i = 0; i < 8; i++) want[i] = exp(i * 0.5) + tanh(i - 3.0);
  expect_values_tol(y, want, 8, 1e-4);
  kiln_scope_end();
  expect_no_error();
}

static void reduction(void **state) {
  use_emu();
  float data[4 * 25];
  for (int i = 0; i < 100; i++) data[i] = (float)i;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){4, 25}, data);
  kiln_tensor *rows = kiln_sum(kiln_mul_scalar(x, 2), 1, (int[]){1}, false);
  kiln_tensor *cols = kiln_sum(x, 1, (int[]){0}, false);
  double want_rows[4], want_cols[25];
  for (int r = 0; r < 4; r++) want_rows[r] = 2.0 * (25 * 25 * r + 300);
  for (int c = 0; c < 25; c++) want_cols[c] = 4 * c + 150;
  expect_values_tol(rows, want_rows, 4, 1e-3);
  expect_values_tol(cols, want_cols, 25, 1e-3);
  kiln_scope_end();
  expect_no_error();
}

static void row_softmax(void **state) {
  use_emu();
  float data[] = {0, logf(2), logf(5), 1, 1, 1};
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, data);
  kiln_tensor *s = kiln_softmax(x, -1);
  double want[] = {1 / 8.0, 2 / 8.0, 5 / 8.0, 1 / 3.0, 1 / 3.0, 1 / 3.0};
  expect_values_tol(s, want, 6, 1e-6);
  kiln_scope_end();
  expect_no_error();
}

static void write_through_view(void **state) {
  use_emu();
  kiln_scope_begin();
  kiln_tensor *x = kiln_full(KILN_F32, 1, (int64_t[]){5}, 0);
  kiln_tensor *n = kiln_narrow(x, 0, 1, 3);
  assert_int_equal(kiln_fill_(n, 1.5), KILN_OK);
  kiln_tensor *z = kiln_mul_scalar(x, 2);
  expect_values_tol(z, (double[]){0, 3, 3, 3, 0}, 5, 0);
  expect_values_tol(x, (double[]){0, 1.5, 1.5, 1.5, 0}, 5, 0);
  kiln_scope_end();
  expect_no_error();
}

static void cast_chain(void **state) {
  use_emu();
  float data[] = {-1.7f, 2.5f, 3.9f, 260.0f};
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 1, (int64_t[]){4}, data);
  kiln_tensor *i = kiln_to_dtype(x, KILN_I32); /* truncates: -1 2 3 260 */
  kiln_tensor *u = kiln_to_dtype(i, KILN_U8);  /* wraps: 255 2 3 4 */
  kiln_tensor *d = kiln_add_scalar(kiln_to_dtype(u, KILN_F64), 0.25);
  expect_values_tol(d, (double[]){255.25, 2.25, 3.25, 4.25}, 4, 0);
  expect_values_tol(kiln_to_dtype(i, KILN_F64), (double[]){-1, 2, 3, 260}, 4, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Kernels went through the toolchain check and the host build, and the
 * profiler names the backend. */
static void checked_and_recorded(void **state) {
  use_emu();
  kiln_profile_begin();
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F64, 0, 16, 1);
  expect_values_tol(kiln_sum(kiln_mul(x, x), 0, NULL, false), (double[]){1240}, 1, 0);
  kiln_scope_end();
  kiln_profile_end();
  assert_true(kiln_profile_count() >= 1);
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(kiln_profile_count() - 1, &r), KILN_OK);
  assert_string_equal(r.backend, "cuda-emu");
  cuda_emu_stats s;
  cuda_emu_get_stats(&s);
  assert_true(s.kernels >= 1);
  assert_int_equal(s.checks, 2 * s.kernels);
  assert_int_equal(s.failures, 0);
  assert_true(s.host_compiles >= 1);
}

/* A host compiler that does not exist: selecting cuda-emu says so. */
static void missing_host_compiler(void **state) {
  setenv("KILN_CXX", "/nonexistent/c++", 1);
  int st = kiln_set_backend("cuda-emu");
  unsetenv("KILN_CXX");
  if (!cuda_nvrtc_available(NULL, 0)) {
    assert_true(st < 0);
    kiln_clear_error();
    skip();
  }
  assert_int_equal(st, KILN_ERR_UNSUPPORTED);
  expect_error(KILN_ERR_UNSUPPORTED, "kiln_set_backend", "host C++ compiler", "KILN_CXX", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(elementwise_chain, back_to_llvm),
      cmocka_unit_test_teardown(reduction, back_to_llvm),
      cmocka_unit_test_teardown(row_softmax, back_to_llvm),
      cmocka_unit_test_teardown(write_through_view, back_to_llvm),
      cmocka_unit_test_teardown(cast_chain, back_to_llvm),
      cmocka_unit_test_teardown(checked_and_recorded, back_to_llvm),
      cmocka_unit_test_teardown(missing_host_compiler, back_to_llvm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
