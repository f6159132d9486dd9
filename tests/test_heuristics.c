/*
 * test_heuristics.c — the per-kernel options record (passes/heuristics.c):
 * what the heuristics choose for known shapes (tiles for a transposed
 * read, skewed ones for a ragged last dim, unrolled rows of 7, streaming
 * stores for a 64 MiB output and not for a small one, column blocks, the
 * softmax spill, scan lanes), how KILN_OPTS and pass_opts_override force
 * choices (the kernel IR changes as asked, the values do not), and the
 * KILN_DEBUG=2 line. The environment is read once per process: those
 * checks run first, in child processes.
 */
#define _POSIX_C_SOURCE 200809L /* fork, setenv, dup2 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "passes.h"
#include "rt_internal.h"
#include "kernel_util.h"
#include "test_util.h"

#define V(...) ((int64_t[]){__VA_ARGS__})

/* The record the heuristics choose for the kernel that would compute t. */
static pass_opts opts_of(kiln_tensor *t) {
  graph_node *root = t->storage->version;
  pass_plan p;
  assert_int_equal(rt_plan(&root, 1, true, &p), KILN_OK);
  pass_opts o;
  assert_int_equal(pass_kernel_opts(&p, root, false, &o), KILN_OK);
  pass_plan_free(&p);
  return o;
}

static int count_ops(const kir_kernel *k, kir_op op) {
  int n = 0;
  for (int i = 0; i < k->n_uops; i++) n += k->uops[i].op == op;
  return n;
}

static int count_streaming(const kir_kernel *k) {
  int n = 0;
  for (int i = 0; i < k->n_uops; i++) n += k->uops[i].op == KIR_STORE && k->uops[i].nontemporal;
  return n;
}

static int count_tiles(const kir_kernel *k) {
  int n = 0;
  for (int i = 0; i < k->n_uops; i++) n += k->uops[i].op == KIR_RANGE && k->uops[i].tile;
  return n;
}

static int count_skews(const kir_kernel *k) {
  int n = 0;
  for (int i = 0; i < k->n_uops; i++) n += k->uops[i].skew;
  return n;
}

/* [r, c] F32 with element (i, j) = i * c + j, realized. */
static kiln_tensor *grid(int64_t r, int64_t c) {
  kiln_tensor *x = kiln_view(kiln_arange(KILN_F32, 0, (double)(r * c), 1), 2, V(r, c));
  assert_int_equal(kiln_realize(x), KILN_OK);
  return x;
}

/* a.T + b over [n, m] (a: [m, n]), read back and checked. */
static void expect_transposed_sum(kiln_tensor *y, int64_t n, int64_t m) {
  float *got = malloc(sizeof *got * (size_t)(n * m));
  assert_non_null(got);
  assert_int_equal(kiln_read(y, got, sizeof *got * (size_t)(n * m)), KILN_OK);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < m; j++) assert_float_equal(got[i * m + j], (float)(j * n + i) + (float)(i * m + j), 0);
  free(got);
}

/* ------------------------------------------------------- environment */

/* Runs fn in a child with env name=value; its exit status, its stderr in
 * err [n]. */
static int in_child(const char *name, const char *value, int (*fn)(void), char *err, size_t n) {
  FILE *f = tmpfile();
  assert_non_null(f);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fileno(f), 2);
    setenv(name, value, 1);
    _exit(fn());
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  rewind(f);
  size_t got = fread(err, 1, n - 1, f);
  err[got] = 0;
  fclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* 0 when a small elementwise kernel over rows of 7 pairs is not unrolled
 * and streams (KILN_OPTS="unroll=0,stream=1"; a bad item between them). */
static int forced_by_env(void) {
  kiln_tensor *x = kiln_rand(KILN_F32, 3, V(3, 7, 2)), *y = kiln_rand(KILN_F32, 2, V(7, 1));
  kiln_tensor *z = kiln_add(x, y);
  pass_opts o = opts_of(z);
  return o.unroll_inner == 0 && o.stream && !o.tile ? 0 : 1;
}

/* 0 after forcing a small kernel (KILN_DEBUG=2 prints its options). */
static int force_one(void) {
  kiln_tensor *x = kiln_rand(KILN_F32, 1, V(100));
  float got[100];
  return kiln_read(kiln_mul_scalar(x, 2), got, sizeof got) == KILN_OK ? 0 : 1;
}

static void environment(void **state) {
  char err[4096];
  assert_int_equal(in_child("KILN_OPTS", "unroll=0,bogus=3,stream=1", forced_by_env, err, sizeof err), 0);
  assert_string_equal(err, "kiln: KILN_OPTS item \"bogus=3\" is not one of unroll, tile, skew, stream, columns, "
                           "spill, lanes, slabs (=0 or 1), bands=1..64 or colrows=1..64; ignored\n");
  assert_int_equal(in_child("KILN_OPTS", "stream=2", forced_by_env, err, sizeof err), 1); /* ignored: not forced */
  assert_non_null(strstr(err, "\"stream=2\""));
  assert_int_equal(in_child("KILN_DEBUG", "2", force_one, err, sizeof err), 0);
  assert_non_null(strstr(err, "kiln: options E_mul_100: elementwise unroll=0 tile=0 stream=0\n"));
}

/* ------------------------------------------------------ chosen records */

static void transposed_reads_are_tiled(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  pass_opts o = opts_of(kiln_add(kiln_t(grid(64, 64)), grid(64, 64)));
  assert_int_equal(o.path, PASS_PATH_ELEMENTWISE);
  assert_true(o.tile && !o.skew && !o.stream);
  o = opts_of(kiln_add(kiln_t(grid(40, 48)), grid(48, 40))); /* last dim 40: skewed */
  assert_true(o.tile && o.skew);
  assert_int_equal(o.skew_bands, 32);
  o = opts_of(kiln_add(grid(64, 64), grid(64, 64))); /* rows read along rows */
  assert_false(o.tile);
  o = opts_of(kiln_add(kiln_t(grid(20, 64)), grid(64, 20))); /* 20 columns: under two tiles */
  assert_false(o.tile);
  kiln_scope_end();
}

static void short_rows_are_unrolled(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  /* [3, 7, 2] + [7, 1]: loops [3, 7, 2] (the broadcast keeps them apart) */
  pass_opts o = opts_of(kiln_add(kiln_rand(KILN_F32, 3, V(3, 7, 2)), kiln_rand(KILN_F32, 2, V(7, 1))));
  assert_int_equal(o.unroll_inner, 2);
  assert_false(o.tile);
  o = opts_of(kiln_add(kiln_rand(KILN_F32, 3, V(3, 5, 2)), kiln_rand(KILN_F32, 2, V(5, 1)))); /* rows of 5 */
  assert_int_equal(o.unroll_inner, 0);
  /* sums of pairs in rows of 7 (max pooling's windows), and of 32 terms */
  o = opts_of(kiln_sum(kiln_rand(KILN_F32, 3, V(3, 7, 2)), 1, (int[]){2}, false));
  assert_int_equal(o.path, PASS_PATH_REDUCE);
  assert_int_equal(o.unroll_reduce, 2);
  o = opts_of(kiln_sum(kiln_rand(KILN_F32, 3, V(3, 7, 32)), 1, (int[]){2}, false));
  assert_int_equal(o.unroll_reduce, 0);
  o = opts_of(kiln_argmax(kiln_rand(KILN_F32, 3, V(3, 7, 2)), 2, false)); /* keeps an index: loops */
  assert_int_equal(o.unroll_reduce, 0);
  kiln_scope_end();
}

static void large_outputs_stream(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *big = kiln_full(KILN_F32, 2, V(4096, 4096), 1); /* 64 MiB, never computed */
  pass_opts o = opts_of(kiln_mul_scalar(kiln_add(big, kiln_full(KILN_F32, 1, V(4096), 2)), 3));
  assert_true(o.stream);
  o = opts_of(kiln_mul_scalar(kiln_add(kiln_full(KILN_F32, 2, V(64, 64), 1), kiln_full(KILN_F32, 1, V(64), 2)), 3));
  assert_false(o.stream);
  /* a tiled kernel streams from an eighth: 8 MiB (a is read transposed) */
  kiln_tensor *a = kiln_rand(KILN_F32, 2, V(1024, 2048)), *b = kiln_full(KILN_F32, 2, V(2048, 1024), 1);
  assert_int_equal(kiln_realize(a), KILN_OK);
  o = opts_of(kiln_add(kiln_t(a), b));
  assert_true(o.tile && o.stream);
  o = opts_of(kiln_add(kiln_t(kiln_narrow(a, 0, 0, 512)), kiln_narrow(b, 1, 0, 512))); /* 4 MiB */
  assert_true(o.tile && !o.stream);
  kiln_scope_end();
}

static void reductions(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  pass_opts o = opts_of(kiln_sum(kiln_rand(KILN_F32, 2, V(64, 256)), 1, (int[]){0}, false));
  assert_int_equal(o.path, PASS_PATH_REDUCE);
  assert_int_equal(o.column_block, 64); /* one kept row: 4 blocks for the pool */
  assert_int_equal(o.column_rows, 8);
  o = opts_of(kiln_sum(kiln_rand(KILN_F32, 2, V(64, 8)), 1, (int[]){0}, false)); /* 8 columns */
  assert_int_equal(o.column_block, 0);
  /* softmax: exp(x - max) is kept in the output for the epilogue */
  kiln_tensor *s = kiln_softmax(kiln_rand(KILN_F32, 2, V(8, 64)), 1);
  graph_node *root = s->storage->version;
  pass_plan p;
  assert_int_equal(rt_plan(&root, 1, true, &p), KILN_OK);
  assert_int_equal(pass_kernel_opts(&p, root, false, &o), KILN_OK);
  assert_int_equal(o.path, PASS_PATH_ROWS);
  assert_true(o.spill >= 0);
  assert_int_equal(p.order[o.spill]->op, GRAPH_OP_EXP);
  assert_false(o.stream);
  pass_plan_free(&p);
  o = opts_of(kiln_cumsum(kiln_rand(KILN_F32, 2, V(8, 32)), 0));
  assert_int_equal(o.path, PASS_PATH_SCAN);
  assert_int_equal(o.scan_lanes, 16);
  o = opts_of(kiln_cumsum(kiln_rand(KILN_F32, 2, V(8, 32)), 1));
  assert_int_equal(o.scan_lanes, 1);
  kiln_scope_end();
}

/* --------------------------------------------------------- overrides */

static void overrides_parse_strictly(void **state) {
  assert_false(pass_opts_override("unroll=2"));
  assert_false(pass_opts_override("tile"));
  assert_false(pass_opts_override("bands=0"));
  assert_false(pass_opts_override("bands=65"));
  assert_false(pass_opts_override("stream=1,=1"));
  assert_false(pass_opts_override("tile=1 1"));
  assert_true(pass_opts_override("bands=16, tile = 1,"));
  assert_true(pass_opts_override("bands=16,tile=1"));
  assert_true(pass_opts_override(""));
  assert_true(pass_opts_override(NULL));
}

/* unroll=0: the rows of 7 pairs loop over the pairs (one more RANGE, two
 * stores fewer); the values are the same. */
static void override_unroll(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  float xs[5 * 7 * 2], ys[7];
  for (int i = 0; i < 70; i++) xs[i] = (float)i;
  for (int i = 0; i < 7; i++) ys[i] = (float)(100 * i);
  kiln_tensor *x = kiln_from_data(KILN_F32, 3, V(5, 7, 2), xs), *y = kiln_from_data(KILN_F32, 2, V(7, 1), ys);
  kiln_tensor *z = kiln_add(x, y);
  kir_kernel k;
  lower_for_test(z, &k);
  assert_int_equal(count_ops(&k, KIR_RANGE), 2);
  assert_int_equal(count_ops(&k, KIR_STORE), 2);
  kir_free(&k);
  assert_true(pass_opts_override("unroll=0"));
  lower_for_test(z, &k);
  assert_int_equal(count_ops(&k, KIR_RANGE), 3);
  assert_int_equal(count_ops(&k, KIR_STORE), 1);
  kir_free(&k);
  float got[70];
  assert_int_equal(kiln_read(z, got, sizeof got), KILN_OK);
  for (int i = 0; i < 70; i++) assert_float_equal(got[i], (float)(i + 100 * ((i / 2) % 7)), 0);
  assert_true(pass_opts_override(NULL));
  kiln_scope_end();
}

/* stream=1: a small kernel's store is nontemporal; tile=1 tiles a kernel
 * without a transposed read; skew=0 lowers a ragged transposed kernel in
 * plain tiles, which never stream. Values as before. */
static void override_stream_and_tiles(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  assert_true(pass_opts_override("stream=1"));
  float xs[100];
  for (int i = 0; i < 100; i++) xs[i] = (float)i;
  kiln_tensor *x = kiln_from_data(KILN_F32, 1, V(100), xs), *y = kiln_mul_scalar(x, 3);
  kir_kernel k;
  lower_for_test(y, &k);
  assert_int_equal(count_streaming(&k), 1);
  kir_free(&k);
  float got[100];
  assert_int_equal(kiln_read(y, got, sizeof got), KILN_OK);
  for (int i = 0; i < 100; i++) assert_float_equal(got[i], (float)(3 * i), 0);

  assert_true(pass_opts_override("tile=1"));
  kiln_tensor *a = grid(48, 48), *b = kiln_arange(KILN_F32, 0, 48, 1);
  kiln_tensor *s = kiln_add(a, b); /* read along its rows (the broadcast keeps two loops) */
  lower_for_test(s, &k);
  assert_int_equal(count_tiles(&k), 1);
  kir_free(&k);
  float sum[48 * 48];
  assert_int_equal(kiln_read(s, sum, sizeof sum), KILN_OK);
  for (int i = 0; i < 48 * 48; i++) assert_float_equal(sum[i], (float)(i + i % 48), 0);

  assert_true(pass_opts_override("skew=0,stream=1"));
  kiln_tensor *t = kiln_add(kiln_t(grid(40, 48)), grid(48, 40));
  pass_opts o = opts_of(t);
  assert_true(o.tile && !o.skew && !o.stream);
  lower_for_test(t, &k);
  assert_int_equal(count_tiles(&k), 1);
  assert_int_equal(count_skews(&k), 0);
  assert_int_equal(count_streaming(&k), 0);
  kir_free(&k);
  expect_transposed_sum(t, 48, 40);
  assert_true(pass_opts_override(NULL));
  o = opts_of(kiln_add(kiln_t(grid(40, 48)), grid(48, 40)));
  assert_true(o.tile && o.skew);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(environment), /* first: nothing read the environment yet */
      cmocka_unit_test(transposed_reads_are_tiled),
      cmocka_unit_test(short_rows_are_unrolled),
      cmocka_unit_test(large_outputs_stream),
      cmocka_unit_test(reductions),
      cmocka_unit_test(overrides_parse_strictly),
      cmocka_unit_test(override_unroll),
      cmocka_unit_test(override_stream_and_tiles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
