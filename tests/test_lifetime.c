/*
 * test_lifetime.c — reference counting, scopes, the thread-local first
 * error, and execution settings. Pending-node counts show what a release
 * or a scope end freed (the ASan job checks that nothing leaks).
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api_internal.h"
#include "graph.h"
#include "kiln/kiln.h"

static void release_frees_pending_graph(void **state) {
  int64_t base = graph_pending_count();
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){8});
  kiln_tensor *y = kiln_exp(x);
  kiln_tensor *z = kiln_add(y, x);
  assert_int_equal(graph_pending_count(), base + 3);
  assert_ptr_equal(kiln_retain(z), z);
  kiln_release(x);
  kiln_release(y);
  kiln_release(z);
  assert_int_equal(graph_pending_count(), base + 3); /* z still referenced */
  assert_float_equal(kiln_get(z, (int64_t[]){0}), 1, 0);
  kiln_release(z);
  assert_int_equal(graph_pending_count(), base);
  kiln_release(NULL);
  assert_null(kiln_retain(NULL));
}

static void scopes_release_and_keep(void **state) {
  int64_t base = graph_pending_count();
  kiln_tensor *kept;
  kiln_scope_begin();
  {
    kiln_tensor *a = kiln_full(KILN_I32, 1, (int64_t[]){3}, 4);
    kiln_scope_begin();
    kiln_tensor *b = kiln_mul(a, a);
    kiln_tensor *c = kiln_add_scalar(b, 1);
    assert_ptr_equal(kiln_keep(c), c); /* moves to the outer scope */
    kiln_scope_end();
    assert_float_equal(kiln_get(c, (int64_t[]){2}), 17, 0);
    kept = kiln_keep(kiln_sub_scalar(c, 2)); /* caller owns it */
  }
  kiln_scope_end();
  assert_float_equal(kiln_get(kept, (int64_t[]){0}), 15, 0);
  kiln_release(kept);
  assert_int_equal(graph_pending_count(), base);
  kiln_scope_end(); /* no scope open: nothing happens */
  assert_null(kiln_keep(NULL));
}

static void first_error_is_kept(void **state) {
  kiln_clear_error();
  assert_int_equal(kiln_last_status(), KILN_OK);
  assert_string_equal(kiln_last_error(), "");
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){2});
  assert_null(kiln_select(x, 3, 0));
  kiln_status first = kiln_last_status();
  char msg[256];
  strncpy(msg, kiln_last_error(), sizeof msg - 1);
  msg[sizeof msg - 1] = 0;
  assert_int_not_equal(first, KILN_OK);
  assert_non_null(strstr(msg, "kiln_select"));
  assert_null(kiln_empty(KILN_F32, 1, (int64_t[]){-1}));
  assert_int_equal(kiln_last_status(), first);
  assert_string_equal(kiln_last_error(), msg);
  kiln_clear_error();
  assert_null(kiln_empty(KILN_F32, 1, (int64_t[]){-1}));
  assert_int_equal(kiln_last_status(), KILN_ERR_SHAPE);
  kiln_clear_error();
  assert_string_equal(kiln_status_name(KILN_ERR_SHAPE), "KILN_ERR_SHAPE");
  assert_string_equal(kiln_status_name(KILN_OK), "KILN_OK");
  for (int s = KILN_ERR_INDEX; s <= KILN_OK; s++) /* every code is named (graph/status.c) */
    assert_null(strstr(kiln_status_name((kiln_status)s), "UNKNOWN"));
  assert_string_equal(kiln_status_name((kiln_status)-1000), "KILN_ERR_UNKNOWN");
  kiln_release(x);
}

static void *other_thread(void *arg) {
  /* errors are per thread: this thread starts clean */
  *(kiln_status *)arg = kiln_last_status();
  return NULL;
}

static void errors_are_thread_local(void **state) {
  assert_null(kiln_exp(NULL));
  assert_int_equal(kiln_last_status(), KILN_ERR_ARG);
  kiln_status seen = KILN_ERR_IO;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, other_thread, &seen), 0);
  pthread_join(th, NULL);
  assert_int_equal(seen, KILN_OK);
  kiln_clear_error();
}

static void execution_settings(void **state) {
  assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
  assert_int_equal(kiln_set_backend("cuda"), KILN_ERR_DEVICE);
  assert_non_null(strstr(kiln_last_error(), "no CUDA device"));
  kiln_clear_error();
  assert_int_equal(kiln_set_backend("tpu"), KILN_ERR_ARG);
  kiln_clear_error();
  assert_int_equal(kiln_set_backend(NULL), KILN_ERR_ARG);
  kiln_clear_error();
  assert_int_equal(kiln_set_num_threads(0), KILN_ERR_ARG);
  kiln_clear_error();
  assert_int_equal(kiln_set_num_threads(2), KILN_OK);
  kiln_tensor *x = kiln_ones(KILN_F32, 0, NULL);
  assert_null(kiln_to_device(x, KILN_CUDA));
  assert_int_equal(kiln_last_status(), KILN_ERR_DEVICE);
  kiln_clear_error();
  kiln_tensor *same = kiln_to_device(x, KILN_CPU);
  assert_ptr_equal(same, x);
  kiln_release(same);
  kiln_release(x);
}

static void long_chain_releases_iteratively(void **state) {
  api_set_auto_realize_limit(0);
  int64_t base = graph_pending_count();
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){1});
  for (int i = 0; i < 200000; i++) {
    kiln_tensor *y = kiln_add_scalar(x, 1);
    kiln_release(x);
    x = y;
  }
  assert_true(graph_pending_count() > base + 200000); /* ops and their scalars */
  kiln_release(x); /* must not recurse 200,000 frames deep */
  assert_int_equal(graph_pending_count(), base);
  api_set_auto_realize_limit(-1);
}

static void long_unforced_loop_is_realized_automatically(void **state) {
  api_set_auto_realize_limit(1000);
  kiln_tensor *x = kiln_zeros(KILN_I64, 1, (int64_t[]){4});
  kiln_tensor *v = kiln_narrow(x, 0, 1, 2);
  for (int i = 0; i < 5000; i++) {
    kiln_tensor *y = kiln_add_scalar(x, 1);
    kiln_release(x);
    x = y;
    if (graph_pending_count() > 1002) fail_msg("step %d: %lld pending", i, (long long)graph_pending_count());
    assert_int_equal(kiln_fill_(v, i), KILN_OK); /* writes into the old x's storage */
  }
  assert_float_equal(kiln_get(x, (int64_t[]){3}), 5000, 0);
  assert_float_equal(kiln_get(v, (int64_t[]){1}), 4999, 0);
  kiln_release(x);
  kiln_release(v);
  api_set_auto_realize_limit(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(release_frees_pending_graph), cmocka_unit_test(scopes_release_and_keep),
      cmocka_unit_test(first_error_is_kept),         cmocka_unit_test(errors_are_thread_local),
      cmocka_unit_test(execution_settings),          cmocka_unit_test(long_chain_releases_iteratively),
      cmocka_unit_test(long_unforced_loop_is_realized_automatically),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
