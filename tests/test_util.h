/*
 * test_util.h — assertions shared by the C tests (include after cmocka.h).
 */
#ifndef KILN_TEST_UTIL_H
#define KILN_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

/* The tests count compiles and cache hits: a warm on-disk kernel cache
 * (docs/cache.md; ~/.cache/kiln or KILN_CACHE_DIR) would turn compiles
 * into loads. Every test program that includes this header runs without
 * it, however it is started (CTest also sets KILN_CACHE_DIR empty).
 * test_disk_cache.c, which tests it, does not include this header. */
void rt_disk_cache_set_dir(const char *dir); /* runtime/runtime.h */
__attribute__((constructor)) static void test_no_disk_cache(void) { rt_disk_cache_set_dir(""); }

/* The thread's error has `status` and its message contains every string of
 * the NULL-terminated list; the error is cleared afterwards. */
static inline void expect_error(kiln_status status, ...) {
  assert_int_equal(kiln_last_status(), status);
  const char *msg = kiln_last_error();
  va_list ap;
  va_start(ap, status);
  for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *)) {
    if (!strstr(msg, s)) fail_msg("error \"%s\" does not contain \"%s\"", msg, s);
  }
  va_end(ap);
  kiln_clear_error();
}

static inline void expect_no_error(void) {
  if (kiln_last_status() != KILN_OK) fail_msg("unexpected error: %s", kiln_last_error());
}

/* t's n (≤ 256) elements, read as F64 in row-major order, equal want
 * within tol (NaN matches NaN). */
static inline void expect_values_tol(kiln_tensor *t, const double *want, int64_t n, double tol) {
  assert_non_null(t);
  assert_int_equal(kiln_numel(t), n);
  double got[256];
  assert_true(n <= 256);
  kiln_scope_begin(); /* owns the converted copy */
  int st = kiln_read(kiln_to_dtype(t, KILN_F64), got, sizeof got);
  kiln_scope_end();
  assert_int_equal(st, KILN_OK);
  for (int64_t i = 0; i < n; i++) {
    if (isnan(want[i])) assert_true(isnan(got[i]));
    else assert_float_equal(got[i], want[i], tol);
  }
}

/* The backend name kernel records carry: "cuda-emu" when the suite runs
 * under KILN_BACKEND=cuda-emu (tests/run_cuda_emu.sh), else "llvm". */
static inline const char *test_kernel_backend(void) {
  const char *b = getenv("KILN_BACKEND");
  return b && strcmp(b, "cuda-emu") == 0 ? "cuda-emu" : "llvm";
}

#endif /* KILN_TEST_UTIL_H */
