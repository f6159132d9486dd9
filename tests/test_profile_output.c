/*
 * test_profile_output.c — what the profiler writes: the table of
 * kiln_profile_print (rows per kernel, sorted by total time, counts that
 * match the records), the Chrome trace of kiln_profile_write_trace (valid
 * JSON, parsed back with jansson: one "kernel" event per record with its
 * fields, one "chunk" event per thread of a parallel run, one "compile"
 * event per compile, a named track per thread) and the DOT graphs of
 * kiln_graph_write_dot (before and after the passes; writing forces
 * nothing and changes no value).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"
#include "text_util.h"

/* relu(a*b + c) over n elements, inputs realized (n differs per test so
 * each test compiles its own kernels). */
static kiln_tensor *fused_chain(int64_t n) {
  kiln_tensor *in[3];
  for (int i = 0; i < 3; i++) in[i] = kiln_rand(KILN_F32, 1, &n);
  assert_int_equal(kiln_realize_many(in, 3), KILN_OK);
  return kiln_relu(kiln_add(kiln_mul(in[0], in[1]), in[2]));
}

/* (noinline: inlined, gcc -O3 takes the result for a pointer into the
 * local `buf`, -Wdangling-pointer) */
__attribute__((noinline)) static char *print_to_string(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  assert_int_equal(kiln_profile_print(f), KILN_OK);
  fclose(f);
  return buf;
}

static void table_rows(void **state) {
  rt_set_fusion(1);
  kiln_profile_begin();
  for (int r = 0; r < 3; r++) {
    kiln_scope_begin();
    assert_int_equal(kiln_realize(fused_chain(3001)), KILN_OK);                       /* 1 kernel */
    kiln_tensor *x = kiln_rand(KILN_F32, 2, (int64_t[]){300, 7});
    assert_int_equal(kiln_realize(kiln_sum(kiln_exp(x), 1, (int[]){1}, false)), KILN_OK); /* rand, exp+sum */
    kiln_scope_end();
  }
  kiln_profile_end();
  char *txt = print_to_string();
  int runs = kiln_profile_count();
  char want[128];
  snprintf(want, sizeof want, "kiln profile: %d kernel runs of ", runs);
  assert_non_null(strstr(txt, want));
  /* each kernel's row has its call count */
  for (int i = 0; i < runs; i++) {
    kiln_kernel_record r, q;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    int64_t calls = 0, total = 0;
    for (int j = 0; j < runs; j++) {
      assert_int_equal(kiln_profile_get(j, &q), KILN_OK);
      if (strcmp(q.name, r.name) == 0) calls++, total += q.run_ns;
    }
    const char *row = strstr(txt, r.name);
    assert_non_null(row);
    char name[128];
    long long got_calls = 0;
    assert_int_equal(sscanf(row, "%127s %*s %*d %lld", name, &got_calls), 2);
    assert_string_equal(name, r.name);
    assert_int_equal(got_calls, calls);
  }
  assert_non_null(strstr(txt, "E_mul_add_relu_3001"));
  assert_non_null(strstr(txt, "R_exp_sum_300x1"));
  free(txt);
  rt_set_fusion(-1);
}

/* Rows come in order of decreasing total time. */
static void table_sorted(void **state) {
  kiln_profile_begin();
  kiln_scope_begin();
  assert_int_equal(kiln_realize(fused_chain(1 << 20)), KILN_OK); /* large */
  assert_int_equal(kiln_realize(fused_chain(17)), KILN_OK);      /* tiny */
  kiln_scope_end();
  kiln_profile_end();
  char *txt = print_to_string();
  double last = 1e300;
  int rows = 0;
  for (char *line = strchr(txt, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
    char name[128];
    double total;
    if (sscanf(line + 1, "%127s %*s %*d %*d %lf", name, &total) != 2 || strcmp(name, "total") == 0) continue;
    assert_true(total <= last);
    last = total;
    rows++;
  }
  assert_true(rows >= 2);
  free(txt);
}

static const char *str_field(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  assert_non_null(v);
  return json_string_value(v);
}

static json_t *load_trace(const char *path) {
  json_error_t e;
  json_t *root = json_load_file(path, 0, &e);
  if (!root) fail_msg("trace is not valid JSON: %s (line %d)", e.text, e.line);
  return root;
}

static void trace_events(void **state) {
  int threads = rt_pool_threads();
  kiln_set_num_threads(2);
  kiln_profile_begin();
  for (int r = 0; r < 2; r++) {
    kiln_scope_begin();
    assert_int_equal(kiln_realize(fused_chain((1 << 21) + 5)), KILN_OK); /* large: split across threads */
    kiln_scope_end();
  }
  kiln_profile_end();
  char path[] = "/tmp/kiln_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(kiln_profile_write_trace(path), KILN_OK);
  json_t *root = load_trace(path);
  json_t *events = json_object_get(root, "traceEvents");
  assert_true(json_is_array(events));
  int kernels = 0, chunks = 0, compiles = 0, names = 0, want_chunks = 0, want_compiles = 0;
  size_t i;
  json_t *ev;
  json_array_foreach(events, i, ev) {
    const char *ph = str_field(ev, "ph");
    if (strcmp(ph, "M") == 0) {
      names++;
      continue;
    }
    assert_string_equal(ph, "X");
    assert_true(json_is_number(json_object_get(ev, "ts")) && json_is_number(json_object_get(ev, "dur")));
    assert_true(json_integer_value(json_object_get(ev, "tid")) > 0);
    const char *cat = str_field(ev, "cat");
    if (strcmp(cat, "kernel") == 0) {
      kiln_kernel_record r;
      assert_int_equal(kiln_profile_get(kernels++, &r), KILN_OK); /* events in run order */
      assert_string_equal(str_field(ev, "name"), r.name);
      json_t *args = json_object_get(ev, "args");
      assert_int_equal(json_integer_value(json_object_get(args, "bytes_read")), r.bytes_read);
      assert_int_equal(json_integer_value(json_object_get(args, "threads")), r.threads);
      want_chunks += r.threads > 1 ? r.threads : 0;
      want_compiles += !r.cache_hit;
    } else if (strcmp(cat, "chunk") == 0) {
      chunks++;
    } else {
      assert_string_equal(cat, "compile");
      assert_non_null(strstr(str_field(ev, "name"), "compile "));
      compiles++;
    }
  }
  assert_int_equal(kernels, kiln_profile_count());
  assert_true(kernels >= 2);
  assert_int_equal(chunks, want_chunks);
  assert_true(chunks >= 2); /* the large kernel ran on two threads */
  assert_int_equal(compiles, want_compiles);
  assert_true(compiles >= 1);
  assert_true(names >= 2); /* the caller's track and a pool worker's */
  json_decref(root);
  remove(path);
  kiln_set_num_threads(threads);
}

static void errors(void **state) {
  kiln_clear_error();
  assert_int_equal(kiln_profile_print(NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_profile_print", NULL);
  assert_int_equal(kiln_profile_write_trace(NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_profile_write_trace", NULL);
  assert_int_equal(kiln_profile_write_trace("/nonexistent-dir/t.json"), KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "kiln_profile_write_trace", "/nonexistent-dir/t.json", NULL);
  kiln_scope_begin();
  kiln_tensor *t = kiln_ones(KILN_F32, 1, (int64_t[]){4});
  assert_int_equal(kiln_graph_write_dot(&t, 1, NULL, 0), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_graph_write_dot", "path", NULL);
  assert_int_equal(kiln_graph_write_dot(&t, 1, "/tmp/x.dot", 8), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_graph_write_dot", "flags", NULL);
  assert_int_equal(kiln_graph_write_dot((kiln_tensor *[]){NULL}, 1, "/tmp/x.dot", 0), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_graph_write_dot", "tensor 0 is NULL", NULL);
  assert_int_equal(kiln_graph_write_dot(&t, 1, "/nonexistent-dir/g.dot", 0), KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "kiln_graph_write_dot", "/nonexistent-dir/g.dot", NULL);
  kiln_scope_end();
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

/* y = relu(a*b + c) and s = sum(exp(x^T), 1): two kernels after fusion. */
static void dot_graphs(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F32, 0, 6, 1);
  kiln_tensor *x2 = kiln_t(kiln_view(x, 2, (int64_t[]){2, 3}));
  kiln_tensor *ts[2] = {fused_chain(33), kiln_sum(kiln_exp(kiln_mul_scalar(x2, 0.5)), 1, (int[]){1}, false)};
  assert_non_null(ts[1]);
  char path[] = "/tmp/kiln_dot_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  kiln_profile_begin(); /* writing a graph runs no kernel */
  assert_int_equal(kiln_graph_write_dot(ts, 2, path, KILN_DOT_BEFORE_PASSES), KILN_OK);
  const char *g = slurp(path);
  assert_non_null(strstr(g, "digraph kiln {"));
  assert_int_equal(count_text(g, "subgraph cluster_"), 0);
  assert_true(count_text(g, "[label=\"MUL\\n") == 2 && count_text(g, "[label=\"ADD\\n") == 1);
  assert_int_equal(count_text(g, "[label=\"RELU\\nf32 [33]\"]"), 1);
  assert_non_null(strstr(g, "strides [1, 3]")); /* the transposed read is labelled */
  assert_int_equal(kiln_graph_write_dot(ts, 2, path, KILN_DOT_AFTER_PASSES), KILN_OK);
  g = slurp(path);
  assert_int_equal(count_text(g, "subgraph cluster_"), 2);
  assert_non_null(strstr(g, "label=\"E_mul_add_relu_33\""));
  assert_non_null(strstr(g, "label=\"R_mul_exp_sum_3x1\""));
  /* nothing was forced, and the values are right */
  kiln_profile_end();
  assert_int_equal(kiln_profile_count(), 0);
  double want[3];
  for (int j = 0; j < 3; j++) want[j] = exp(0.5 * j) + exp(0.5 * (j + 3));
  expect_values_tol(ts[1], want, 3, 1e-5);
  remove(path);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* A DOT of realized tensors is an empty graph. */
static void dot_of_realized(void **state) {
  kiln_scope_begin();
  kiln_tensor *t = kiln_ones(KILN_F32, 1, (int64_t[]){4});
  assert_int_equal(kiln_realize(t), KILN_OK);
  char path[] = "/tmp/kiln_dot_XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  assert_int_equal(kiln_graph_write_dot(&t, 1, path, KILN_DOT_AFTER_PASSES), KILN_OK);
  const char *g = slurp(path);
  assert_non_null(strstr(g, "0 pending nodes"));
  assert_int_equal(count_text(g, "->"), 0);
  remove(path);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(table_rows), cmocka_unit_test(table_sorted), cmocka_unit_test(trace_events),
      cmocka_unit_test(errors),     cmocka_unit_test(dot_graphs),   cmocka_unit_test(dot_of_realized),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
