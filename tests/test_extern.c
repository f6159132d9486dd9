/*
 * test_extern.c — extern ops registered from above the runtime
 * (rt_extern_register, runtime.h): forcing an EXTERN op that no layer
 * registered is KILN_ERR_UNSUPPORTED with a message naming the op; a
 * registered runner is run on host memory and profiled through its
 * describe function; registering the same runner again does nothing, and
 * a different runner, a built-in op (MATMUL, ARGSORT, MODE) or an op that
 * is not EXTERN is KILN_ERR_ARG. The collective BROADCAST stands in for
 * any op registered from above: this program never calls kiln_dist_init,
 * which would register the collectives' own rows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "graph.h"
#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

enum { N = 4 };

/* A pending BROADCAST node [N] F32 over a realized input holding in [N]. */
static graph_node *broadcast_node(const float *in) {
  int64_t n = N;
  graph_buffer *buf = graph_buffer_alloc(N * sizeof(float));
  assert_non_null(buf);
  memcpy(buf->data, in, N * sizeof(float));
  graph_node *src = graph_node_from_buffer(buf, KILN_F32, N);
  graph_node *x = graph_node_new(GRAPH_OP_BROADCAST, KILN_F32, 1, &n);
  assert_non_null(src);
  assert_non_null(x);
  graph_view v = graph_view_contiguous(1, &n);
  graph_node_add_input(x, src, &v);
  graph_node_release(src); /* x holds it */
  return x;
}

/* The test's runner: out = 2 * in. */
static int double_it(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  (void)err, (void)errlen;
  const float *a = (const float *)in[0] + n->inputs[0].view.offset;
  float *o = out->data;
  for (int64_t i = 0; i < n->numel; i++) o[i] = 2 * a[i];
  return KILN_OK;
}

static int other_runner(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  (void)n, (void)in, (void)out;
  snprintf(err, errlen, "never called");
  return KILN_ERR_ARG;
}

static void describe_double(const graph_node *n, bool on_device, kiln_kernel_record *r, char *name, size_t len) {
  assert_false(on_device);
  snprintf(name, len, "test_double_%lld", (long long)n->numel);
  *r = (kiln_kernel_record){.name = name, .backend = "test", .n_ops = 1, .numel = n->numel, .run_ns = r->run_ns,
                            .cache_hit = true, .threads = 1};
}

/* Before any registration the force fails cleanly and the node stays
 * pending; after it, the runner computes the node and its record is the
 * describe function's. */
static void unregistered_then_registered(void **state) {
  (void)state;
  const float in[N] = {1, -2, 3.5f, 0};
  graph_node *x = broadcast_node(in);
  char err[512] = "";
  assert_int_equal(rt_realize(&x, 1, err, sizeof err), KILN_ERR_UNSUPPORTED);
  if (!strstr(err, "extern op BROADCAST has no runner")) fail_msg("unexpected message: %s", err);
  assert_null(x->buffer);

  assert_int_equal(rt_extern_register(GRAPH_OP_BROADCAST, double_it, describe_double, false, err, sizeof err), KILN_OK);
  kiln_profile_begin();
  assert_int_equal(rt_realize(&x, 1, err, sizeof err), KILN_OK);
  kiln_profile_end();
  assert_non_null(x->buffer);
  const float *got = x->buffer->data;
  for (int i = 0; i < N; i++) assert_float_equal(got[i], 2 * in[i], 0);
  assert_int_equal(kiln_profile_count(), 1);
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
  assert_string_equal(r.name, "test_double_4");
  assert_string_equal(r.backend, "test");
  graph_node_release(x);
}

/* Registering is idempotent per op; anything else is refused. */
static void registration_rules(void **state) {
  (void)state;
  char err[512] = "";
  assert_int_equal(rt_extern_register(GRAPH_OP_BROADCAST, double_it, describe_double, false, err, sizeof err), KILN_OK);
  assert_int_equal(rt_extern_register(GRAPH_OP_BROADCAST, double_it, describe_double, false, err, sizeof err), KILN_OK);
  assert_int_equal(rt_extern_register(GRAPH_OP_BROADCAST, other_runner, describe_double, false, err, sizeof err),
                   KILN_ERR_ARG);
  assert_non_null(strstr(err, "BROADCAST already has another runner"));
  assert_int_equal(rt_extern_register(GRAPH_OP_MATMUL, double_it, describe_double, false, err, sizeof err),
                   KILN_ERR_ARG);
  assert_non_null(strstr(err, "MATMUL is built into the runtime"));
  assert_int_equal(rt_extern_register(GRAPH_OP_ADD, double_it, describe_double, false, err, sizeof err), KILN_ERR_ARG);
  assert_non_null(strstr(err, "not an extern op"));
  assert_int_equal(rt_extern_register(GRAPH_OP_SEND, NULL, describe_double, true, err, sizeof err), KILN_ERR_ARG);
  /* the refused calls changed nothing: the first runner still runs */
  const float in[N] = {4, 5, 6, 7};
  graph_node *x = broadcast_node(in);
  assert_int_equal(rt_realize(&x, 1, err, sizeof err), KILN_OK);
  assert_float_equal(((const float *)x->buffer->data)[3], 14, 0);
  graph_node_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unregistered_then_registered),
      cmocka_unit_test(registration_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
