/*
 * test_alloc.c — the caching allocator: freed buffers are reused by size
 * class (small and huge-page classes), contents of a reused buffer are
 * fully overwritten by the kernel that fills it, and trimming empties it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "rt_internal.h"

static void reuse(int64_t n) {
  rt_alloc_trim();
  kiln_tensor *a = kiln_full(KILN_F32, 1, &n, 3);
  assert_int_equal(kiln_realize(a), KILN_OK);
  const void *first = kiln_data(a);
  kiln_release(a);
  int64_t cached = rt_alloc_cached_bytes();
  assert_true(cached >= n * 4);
  kiln_tensor *b = kiln_full(KILN_F32, 1, &n, 5);
  assert_int_equal(kiln_realize(b), KILN_OK);
  assert_ptr_equal(kiln_data(b), first); /* the same block came back */
  assert_true(rt_alloc_cached_bytes() < cached);
  assert_float_equal(kiln_get(b, (int64_t[]){n - 1}), 5, 0);
  assert_float_equal(kiln_get(b, (int64_t[]){0}), 5, 0);
  kiln_release(b);
  rt_alloc_trim();
  assert_int_equal(rt_alloc_cached_bytes(), 0);
}

static void small_buffers_are_reused(void **state) { reuse(1000); }
static void huge_page_buffers_are_reused(void **state) { reuse(INT64_C(3) << 20); }

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(small_buffers_are_reused),
                                     cmocka_unit_test(huge_page_buffers_are_reused)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
