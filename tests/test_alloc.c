/*
 * test_alloc.c — the caching allocator: freed buffers are reused by size
 * class (small and huge-page classes), contents of a reused buffer are
 * fully overwritten by the kernel that fills it, and trimming empties it.
 * A new kernel's large output is allocated before its compile and faulted
 * in meanwhile (runtime/realize.c compile_early): the values are right,
 * faulting in keeps what a block holds, and a failed compile gives the
 * block back.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "fault.h"
#include "kiln/kiln.h"
#include "runtime.h"

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

/* A fresh large block is not resident until written; faulting it in
 * keeps its contents (written ones and the zeros of untouched pages). */
static void prefault_keeps_contents(void **state) {
  (void)state;
  rt_alloc_trim();
  int64_t bytes = INT64_C(5) << 20;
  graph_buffer *b = graph_buffer_alloc(bytes);
  assert_non_null(b);
  assert_true(rt_alloc_is_fresh(b->data, b->bytes));
  unsigned char *c = b->data;
  c[4096 * 3 + 5] = 7;
  rt_alloc_prefault(c, bytes);
  assert_false(rt_alloc_is_fresh(b->data, b->bytes));
  assert_int_equal(c[4096 * 3 + 5], 7);
  assert_int_equal(c[bytes - 1], 0);
  assert_int_equal(c[0], 0);
  graph_buffer_release(b);
  assert_false(rt_alloc_is_fresh(c, 1000)); /* small blocks never are */
  rt_alloc_trim();
}

/* A new kernel writing 24 MiB into a fresh block: right values. */
static void early_output_values(void **state) {
  (void)state;
  rt_alloc_trim();
  kiln_scope_begin();
  int64_t n = INT64_C(6) << 20;
  kiln_tensor *x = kiln_arange(KILN_F32, 0, (double)n, 1);
  kiln_tensor *y = kiln_add_scalar(kiln_mul_scalar(kiln_sqrt(x), 3), 0.25);
  assert_int_equal(kiln_realize(y), KILN_OK);
  const int64_t at[] = {0, 1, 4096, n / 2 + 3, n - 1};
  for (size_t i = 0; i < sizeof at / sizeof *at; i++)
    assert_float_equal(kiln_get(y, &at[i]), 3 * sqrtf((float)at[i]) + 0.25f, 1e-6 * (1 + 3 * sqrt((double)at[i])));
  kiln_scope_end();
  rt_alloc_trim();
}

/* A failed compile (the JIT's link, injected) of a new kernel whose
 * 24 MiB output was allocated early: the force reports it and the block
 * goes back to the cache, not leaked. */
static void failed_compile_gives_the_output_back(void **state) {
  (void)state;
  kiln_set_num_threads(2); /* early outputs need two pool threads */
  kiln_scope_begin();
  int64_t n = INT64_C(6) << 20;
  kiln_tensor *x = kiln_arange(KILN_F32, 0, (double)n, 1);
  assert_int_equal(kiln_realize(x), KILN_OK);
  bool failed_compile = false;
  for (int64_t k = 1; k < 5000 && !failed_compile; k++) {
    rt_schedule_cache_clear(); /* every run compiles */
    rt_kernel_cache_clear();
    rt_alloc_trim();
    kiln_scope_begin();
    kiln_tensor *y = kiln_sub_scalar(kiln_exp(kiln_neg(x)), 0.5); /* no other test compiles it */
    graph_fault_arm(k);
    int st = kiln_realize(y);
    int fired = graph_fault_fired();
    graph_fault_arm(-1);
    if (fired == GRAPH_FAULT_JIT) {
      failed_compile = true;
      assert_int_equal(st, KILN_ERR_COMPILE);
      assert_true(rt_alloc_cached_bytes() >= n * 4); /* the early output, released */
    }
    kiln_scope_end();
    kiln_clear_error();
  }
  assert_true(failed_compile);
  kiln_scope_end();
  rt_alloc_trim();
}

int main(void) {
  setenv("KILN_CACHE_DIR", "", 1); /* every compile is a real one (no disk cache) */
  const struct CMUnitTest tests[] = {cmocka_unit_test(small_buffers_are_reused),
                                     cmocka_unit_test(huge_page_buffers_are_reused),
                                     cmocka_unit_test(prefault_keeps_contents),
                                     cmocka_unit_test(early_output_values),
                                     cmocka_unit_test(failed_compile_gives_the_output_back)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
