/*
 * test_profile.c — kernel-run records: one per kernel, with names, element
 * counts, bytes and cache hits that follow from the graph that ran.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

static void run_once(void) {
  kiln_scope_begin();
  kiln_tensor *a = kiln_rand(KILN_F32, 2, (int64_t[]){64, 32});
  kiln_tensor *b = kiln_exp(kiln_t(a));            /* reads 2048 f32, writes 2048 f32 */
  kiln_tensor *s = kiln_sum(b, 1, (int[]){1}, false); /* reads 2048, writes 32 */
  assert_int_equal(kiln_realize(s), KILN_OK);
  kiln_scope_end();
}

static void records_each_kernel(void **state) {
  rt_set_fusion(1); /* the counts below assume fusion, even under KILN_FUSE=0 */
  kiln_profile_begin();
  run_once();
  run_once();
  kiln_profile_end();
  run_once(); /* not recorded */
  /* exp is fused into the reduction: one kernel per run */
  assert_int_equal(kiln_profile_count(), 2);
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
  assert_string_equal(r.name, "R_exp_sum_32x1");
  assert_string_equal(r.backend, test_kernel_backend());
  assert_int_equal(r.n_ops, 2);
  assert_int_equal(r.numel, 32);
  assert_int_equal(r.bytes_read, 2048 * 4);
  assert_int_equal(r.bytes_written, 32 * 4);
  assert_int_equal(r.flops, 2048 * 2);
  assert_true(r.run_ns > 0);
  /* the second run hits the kernel cache */
  assert_int_equal(kiln_profile_get(1, &r), KILN_OK);
  assert_true(r.cache_hit);
  assert_int_equal(r.compile_ns, 0);
  rt_set_fusion(-1);
}

static void unfused_records(void **state) {
  /* the exp result is also requested: it is materialized, then summed */
  kiln_profile_begin();
  kiln_scope_begin();
  kiln_tensor *a = kiln_rand(KILN_F32, 2, (int64_t[]){64, 32});
  kiln_tensor *b = kiln_exp(kiln_t(a));
  kiln_tensor *s = kiln_sum(b, 1, (int[]){1}, false);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){b, s}, 2), KILN_OK);
  kiln_scope_end();
  kiln_profile_end();
  assert_int_equal(kiln_profile_count(), 2);
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
  assert_string_equal(r.name, "E_exp_32x64");
  assert_int_equal(r.bytes_read, 2048 * 4);
  assert_int_equal(r.bytes_written, 2048 * 4);
  assert_int_equal(kiln_profile_get(1, &r), KILN_OK);
  assert_string_equal(r.name, "R_sum_32x1");
}

static void errors(void **state) {
  kiln_kernel_record r;
  kiln_clear_error();
  assert_int_equal(kiln_profile_get(kiln_profile_count(), &r), KILN_ERR_INDEX);
  assert_non_null(strstr(kiln_last_error(), "kiln_profile_get"));
  kiln_clear_error();
  assert_int_equal(kiln_profile_get(0, NULL), KILN_ERR_ARG);
  kiln_clear_error();
}

/* kiln_engine_stats_get counts what exists: nodes and buffers come and go
 * with the tensors that hold them, a new kernel is one compile and one
 * cached kernel, the same graph again neither; NULL is an error. */
static void engine_stats(void **state) {
  (void)state;
  kiln_engine_stats a, b, c, d, e;
  assert_int_equal(kiln_engine_stats_get(&a), KILN_OK);
  assert_true(a.rss_bytes > 0);
  kiln_scope_begin();
  kiln_tensor *x = kiln_rand(KILN_F32, 1, (int64_t[]){1000});
  kiln_tensor *y = kiln_mul_scalar(kiln_add_scalar(x, 3.25), -7.5); /* a kernel no other test here makes */
  assert_int_equal(kiln_engine_stats_get(&b), KILN_OK);
  assert_true(b.live_nodes > a.live_nodes);
  assert_true(b.pending_nodes > a.pending_nodes);
  assert_int_equal(kiln_realize(y), KILN_OK);
  assert_int_equal(kiln_engine_stats_get(&c), KILN_OK);
  assert_true(c.kernels_compiled > b.kernels_compiled);
  assert_true(c.kernels_cached > b.kernels_cached);
  assert_true(c.live_buffers > a.live_buffers);
  assert_int_equal(c.pending_nodes, a.pending_nodes);
  kiln_scope_end();
  /* the same graph on new data, twice: cache hits, and the second time
   * leaves exactly what the first left (nothing accumulates) */
  for (int round = 0; round < 2; round++) {
    kiln_scope_begin(); /* owns the intermediate too */
    y = kiln_mul_scalar(kiln_add_scalar(kiln_rand(KILN_F32, 1, (int64_t[]){1000}), 3.25), -7.5);
    assert_int_equal(kiln_realize(y), KILN_OK);
    kiln_scope_end();
    assert_int_equal(kiln_engine_stats_get(round ? &e : &d), KILN_OK);
  }
  assert_int_equal(d.kernels_compiled, c.kernels_compiled);
  assert_int_equal(d.kernels_cached, c.kernels_cached);
  assert_int_equal(e.live_nodes, d.live_nodes);
  assert_int_equal(e.live_buffers, d.live_buffers);
  assert_int_equal(e.live_nodes, a.live_nodes); /* every tensor released: no node or buffer left */
  assert_int_equal(e.live_buffers, a.live_buffers);
  assert_int_equal(e.pending_nodes, a.pending_nodes);
  kiln_clear_error();
  assert_int_equal(kiln_engine_stats_get(NULL), KILN_ERR_ARG);
  assert_non_null(strstr(kiln_last_error(), "kiln_engine_stats_get"));
  kiln_clear_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(records_each_kernel), cmocka_unit_test(unfused_records),
                                     cmocka_unit_test(errors), cmocka_unit_test(engine_stats)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
