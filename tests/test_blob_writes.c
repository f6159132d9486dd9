/*
 * test_blob_writes.c — a lazy write into user memory (kiln_from_blob) that
 * is still pending when the storage's last reference goes is performed
 * before the storage lets go of the memory: the caller's array holds the
 * written values, and the deleter runs after the write.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"

typedef struct deleter_log {
  int calls;
  float seen[4]; /* the array when the deleter ran */
  void *data;
} deleter_log;

static void record_deleter(void *data, void *ctx) {
  deleter_log *log = ctx;
  log->calls++;
  log->data = data;
  memcpy(log->seen, data, sizeof log->seen);
}

static void expect_floats(const float *got, const float *want, int n) {
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("element %d is %g, want %g", i, (double)got[i], (double)want[i]);
}

/* fill_ on a narrow view, then the only handle is released. */
static void fill_then_release(void **state) {
  (void)state;
  float buf[4] = {1, 2, 3, 4};
  deleter_log log = {0};
  kiln_tensor *t = kiln_from_blob(KILN_F32, 1, (int64_t[]){4}, NULL, buf, record_deleter, &log);
  kiln_tensor *n = kiln_narrow(t, 0, 1, 2);
  assert_int_equal(kiln_fill_(n, 9), KILN_OK);
  kiln_release(n);
  expect_floats(buf, (float[]){1, 2, 3, 4}, 4); /* still lazy */
  assert_int_equal(log.calls, 0);
  kiln_release(t);
  expect_floats(buf, (float[]){1, 9, 9, 4}, 4);
  assert_int_equal(log.calls, 1);
  assert_ptr_equal(log.data, buf);
  expect_floats(log.seen, (float[]){1, 9, 9, 4}, 4); /* written before the deleter ran */
  expect_no_error();
}

/* Several pending writes (through views, a scope, kiln_set), the view
 * released last; and a pending reader of the old contents keeps them. */
static void writes_through_views_and_scope(void **state) {
  (void)state;
  float buf[4] = {1, 2, 3, 4};
  deleter_log log = {0};
  kiln_tensor *before;
  kiln_scope_begin();
  kiln_tensor *t = kiln_from_blob(KILN_F32, 1, (int64_t[]){4}, NULL, buf, record_deleter, &log);
  before = kiln_keep(kiln_mul_scalar(t, 10)); /* recorded before the writes */
  assert_int_equal(kiln_fill_(kiln_narrow(t, 0, 0, 2), 5), KILN_OK);
  assert_int_equal(kiln_set(t, (int64_t[]){3}, -1), KILN_OK);
  assert_int_equal(kiln_copy_(kiln_narrow(t, 0, 1, 1), kiln_scalar(KILN_F64, 7)), KILN_OK);
  kiln_scope_end(); /* releases t and its views: the storage's last reference */
  expect_floats(buf, (float[]){5, 7, 3, -1}, 4);
  assert_int_equal(log.calls, 1);
  expect_floats(log.seen, (float[]){5, 7, 3, -1}, 4);
  expect_values_tol(before, (double[]){10, 20, 30, 40}, 4, 0); /* the old contents */
  kiln_release(before);
  expect_no_error();
}

/* The storage outlives the tensors (kiln_storage_of) and is released last;
 * a NULL deleter (the caller keeps the memory) also gets the write. */
static void storage_released_last(void **state) {
  (void)state;
  float buf[4] = {1, 2, 3, 4};
  deleter_log log = {0};
  kiln_tensor *t = kiln_from_blob(KILN_F32, 1, (int64_t[]){4}, NULL, buf, record_deleter, &log);
  kiln_storage *s = kiln_storage_of(t);
  assert_non_null(s);
  kiln_tensor *v = kiln_slice(t, 0, 0, 4, 2);
  assert_int_equal(kiln_fill_(v, 0), KILN_OK);
  kiln_release(t);
  kiln_release(v);
  expect_floats(buf, (float[]){1, 2, 3, 4}, 4);
  assert_int_equal(log.calls, 0);
  kiln_storage_release(s);
  expect_floats(buf, (float[]){0, 2, 0, 4}, 4);
  assert_int_equal(log.calls, 1);
  expect_floats(log.seen, (float[]){0, 2, 0, 4}, 4);

  int32_t ibuf[3] = {1, 2, 3};
  kiln_tensor *u = kiln_from_blob(KILN_I32, 1, (int64_t[]){3}, NULL, ibuf, NULL, NULL);
  assert_int_equal(kiln_fill_(u, 6), KILN_OK);
  kiln_release(u);
  assert_int_equal(ibuf[0], 6);
  assert_int_equal(ibuf[1], 6);
  assert_int_equal(ibuf[2], 6);
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fill_then_release),
      cmocka_unit_test(writes_through_views_and_scope),
      cmocka_unit_test(storage_released_last),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
