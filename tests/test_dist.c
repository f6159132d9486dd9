/*
 * test_dist.c — collectives (kiln/dist.h) against host references.
 *
 * Run alone (ctest "dist"): backend "none" and "auto" give a group of
 * size 1 whose collectives are copies, and "mpi" with a plugin that does
 * not load is KILN_ERR_UNSUPPORTED. Run under mpirun (ctest dist_mpi2,
 * dist_mpi4, through tests/run_mpi.sh): every collective and reduction on
 * strided inputs against values computed here for every rank, in-place
 * bucketed all-reduce, recorded order kept whatever order values are
 * forced in, bit-identical float sums on every rank, and ranks that
 * disagree on sizes all failing with KILN_ERR_SHAPE. KILN_TEST_DIST_MODE
 * = "hang" (rank 1 never joins) or "exit" (rank 1 exits early) runs one
 * collective, "kill" (rank 1 killed by SIGKILL amid a run of all-reduces)
 * many, that must end the job (tests/run_mpi.sh checks how).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"

static kiln_group *world;
static int R, P; /* this rank, the world's size */

/* t's elements (≤ 4096) as F64, row-major. */
static void values(kiln_tensor *t, double *out, int64_t n) {
  assert_non_null(t);
  assert_int_equal(kiln_numel(t), n);
  kiln_tensor *d = kiln_to_dtype(t, KILN_F64);
  assert_int_equal(kiln_read(d, out, sizeof(double) * (size_t)n), KILN_OK);
  kiln_release(d);
}

/* Rank r's input element i for reduction op (exact in every dtype). */
static double input_of(int r, int64_t i, kiln_reduce_op op, kiln_dtype dt) {
  if (dt == KILN_BOOL) return (double)(((i + r) % 3) == 0);
  if (op == KILN_REDUCE_PROD) return (double)(1 + (i + r) % 2);
  return (double)((i * 7 + r * 5) % 11) - 4.0;
}

static double ref_reduce(int64_t i, kiln_reduce_op op, kiln_dtype dt) {
  double acc = input_of(0, i, op, dt);
  for (int r = 1; r < P; r++) {
    double v = input_of(r, i, op, dt);
    switch (op) {
      case KILN_REDUCE_SUM:
      case KILN_REDUCE_MEAN: acc += v; break;
      case KILN_REDUCE_MAX: acc = v > acc ? v : acc; break;
      case KILN_REDUCE_MIN: acc = v < acc ? v : acc; break;
      case KILN_REDUCE_PROD: acc *= v; break;
    }
  }
  if (dt == KILN_BOOL) return acc != 0;
  return op == KILN_REDUCE_MEAN ? acc / P : acc;
}

/* A [rows, cols] tensor of rank r's inputs, read through a transpose (so
 * the collective packs a strided view): element (i, j) is input i*cols+j. */
static kiln_tensor *strided_input(int r, int64_t rows, int64_t cols, kiln_reduce_op op, kiln_dtype dt) {
  double host[4096];
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) host[j * rows + i] = input_of(r, i * cols + j, op, dt);
  int64_t sz[2] = {cols, rows};
  kiln_tensor *h = kiln_from_data(KILN_F64, 2, sz, host);
  kiln_tensor *c = kiln_to_dtype(h, dt);
  kiln_tensor *t = kiln_transpose(c, 0, 1);
  kiln_release(h);
  kiln_release(c);
  assert_false(kiln_is_contiguous(t));
  return t;
}

static void test_all_reduce_ops(void **state) {
  (void)state;
  static const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_I16, KILN_F16, KILN_BOOL};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
    for (int op = KILN_REDUCE_SUM; op <= KILN_REDUCE_PROD; op++) {
      bool float_dt = dts[k] == KILN_F32 || dts[k] == KILN_F64 || dts[k] == KILN_F16;
      if (op == KILN_REDUCE_MEAN && !float_dt) continue;
      kiln_tensor *x = strided_input(R, 3, 5, (kiln_reduce_op)op, dts[k]);
      kiln_tensor *y = kiln_all_reduce(x, (kiln_reduce_op)op, world);
      assert_non_null(y);
      assert_int_equal(kiln_dtype_of(y), dts[k]);
      double got[15];
      values(y, got, 15);
      for (int64_t i = 0; i < 15; i++) {
        double want = ref_reduce(i, (kiln_reduce_op)op, dts[k]);
        if (dts[k] == KILN_F16 || (op == KILN_REDUCE_MEAN && dts[k] == KILN_F32)) assert_float_equal(got[i], want, 1e-3);
        else if (got[i] != want) fail_msg("dtype %d op %d element %lld: %g, expected %g", dts[k], op, (long long)i, got[i], want);
      }
      kiln_release(x);
      kiln_release(y);
    }
  }
  /* MEAN on integers: an error, nothing recorded */
  kiln_tensor *i32 = kiln_zeros(KILN_I32, 1, (int64_t[]){3});
  assert_null(kiln_all_reduce(i32, KILN_REDUCE_MEAN, world));
  expect_error(KILN_ERR_DTYPE, "kiln_all_reduce", "MEAN", NULL);
  kiln_release(i32);
}

static void test_all_gather(void **state) {
  (void)state;
  for (int dim = 0; dim < 2; dim++) {
    kiln_tensor *x = strided_input(R, 3, 5, KILN_REDUCE_SUM, KILN_F32);
    kiln_tensor *y = kiln_all_gather(x, dim, world);
    assert_non_null(y);
    int64_t rows = dim == 0 ? 3 * P : 3, cols = dim == 1 ? 5 * P : 5;
    assert_int_equal(kiln_size(y, 0), rows);
    assert_int_equal(kiln_size(y, 1), cols);
    double got[4096];
    values(y, got, rows * cols);
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) {
        int r = dim == 0 ? (int)(i / 3) : (int)(j / 5);
        int64_t li = dim == 0 ? i % 3 : i, lj = dim == 1 ? j % 5 : j;
        assert_float_equal(got[i * cols + j], input_of(r, li * 5 + lj, KILN_REDUCE_SUM, KILN_F32), 0);
      }
    kiln_release(x);
    kiln_release(y);
  }
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){4});
  assert_null(kiln_all_gather(x, 1, world));
  expect_error(KILN_ERR_ARG, "kiln_all_gather", NULL);
  kiln_release(x);
}

static void test_reduce_scatter(void **state) {
  (void)state;
  int64_t cols = 2 * P; /* divisible by P */
  for (int op = KILN_REDUCE_SUM; op <= KILN_REDUCE_PROD; op++) {
    kiln_tensor *x = strided_input(R, 3, cols, (kiln_reduce_op)op, KILN_F64);
    kiln_tensor *y = kiln_reduce_scatter(x, (kiln_reduce_op)op, 1, world);
    assert_non_null(y);
    assert_int_equal(kiln_size(y, 0), 3);
    assert_int_equal(kiln_size(y, 1), 2);
    double got[6];
    values(y, got, 6);
    for (int64_t i = 0; i < 3; i++)
      for (int64_t j = 0; j < 2; j++)
        assert_float_equal(got[i * 2 + j], ref_reduce(i * cols + R * 2 + j, (kiln_reduce_op)op, KILN_F64), 0);
    kiln_release(x);
    kiln_release(y);
  }
  kiln_tensor *odd = kiln_zeros(KILN_F32, 2, (int64_t[]){3, 2 * P + 1});
  kiln_tensor *r = kiln_reduce_scatter(odd, KILN_REDUCE_SUM, 1, world);
  if (P > 1) {
    assert_null(r);
    expect_error(KILN_ERR_SHAPE, "kiln_reduce_scatter", "not divisible", NULL);
  } else {
    assert_non_null(r); /* a group of size 1 divides everything */
    kiln_release(r);
  }
  assert_null(kiln_reduce_scatter(odd, KILN_REDUCE_SUM, 2, world));
  expect_error(KILN_ERR_ARG, "kiln_reduce_scatter", NULL);
  kiln_release(odd);
}

static void test_broadcast(void **state) {
  (void)state;
  int root = P - 1;
  kiln_tensor *x = strided_input(R, 3, 5, KILN_REDUCE_SUM, KILN_I64);
  kiln_tensor *y = kiln_broadcast(x, root, world);
  double got[15];
  values(y, got, 15);
  for (int64_t i = 0; i < 15; i++) assert_float_equal(got[i], input_of(root, i, KILN_REDUCE_SUM, KILN_I64), 0);
  assert_null(kiln_broadcast(x, P, world));
  expect_error(KILN_ERR_ARG, "kiln_broadcast", "root", NULL);
  kiln_release(x);
  kiln_release(y);
}

static void test_send_recv(void **state) {
  (void)state;
  if (P < 2) return;
  int next = (R + 1) % P, prev = (R + P - 1) % P;
  kiln_tensor *x = strided_input(R, 2, 3, KILN_REDUCE_SUM, KILN_F32);
  kiln_tensor *y = kiln_recv(KILN_F32, 2, (int64_t[]){2, 3}, prev, 7, world);
  assert_non_null(y);
  if (R % 2 == 0) {
    assert_int_equal(kiln_send(x, next, 7, world), KILN_OK);
    assert_int_equal(kiln_realize(y), KILN_OK);
  } else {
    assert_int_equal(kiln_realize(y), KILN_OK);
    assert_int_equal(kiln_send(x, next, 7, world), KILN_OK);
  }
  double got[6];
  values(y, got, 6);
  for (int64_t i = 0; i < 6; i++) assert_float_equal(got[i], input_of(prev, i, KILN_REDUCE_SUM, KILN_F32), 0);
  assert_int_equal(kiln_send(x, R, 0, world), KILN_ERR_ARG);
  kiln_clear_error();
  kiln_release(x);
  kiln_release(y);
}

/* Two gradients-like tensors and a view, MEAN in place, then an update. */
static void test_all_reduce_inplace(void **state) {
  (void)state;
  kiln_tensor *a = strided_input(R, 4, 6, KILN_REDUCE_SUM, KILN_F32);
  kiln_tensor *a_c = kiln_contiguous(a);
  kiln_tensor *b = kiln_full(KILN_F64, 1, (int64_t[]){5}, R + 1);
  kiln_tensor *big = kiln_full(KILN_F32, 1, (int64_t[]){10}, 100 + R);
  kiln_tensor *part = kiln_narrow(big, 0, 2, 5); /* written through a view */
  kiln_tensor *ts[3] = {a_c, b, part};
  assert_int_equal(kiln_all_reduce_(ts, 3, KILN_REDUCE_MEAN, world), KILN_OK);
  kiln_tensor *upd = kiln_mul_scalar(a_c, 2); /* a consumer of the result */
  double got[24];
  values(upd, got, 24);
  for (int64_t i = 0; i < 24; i++) assert_float_equal(got[i], 2 * ref_reduce(i, KILN_REDUCE_MEAN, KILN_F32), 1e-5);
  double gb[5], gbig[10];
  values(b, gb, 5);
  double mean_b = (P + 1) / 2.0, mean_big = 100 + (P - 1) / 2.0;
  for (int i = 0; i < 5; i++) assert_float_equal(gb[i], mean_b, 0);
  values(big, gbig, 10);
  for (int i = 0; i < 10; i++) assert_float_equal(gbig[i], i >= 2 && i < 7 ? mean_big : 100 + R, 1e-5);
  kiln_release(upd);
  kiln_release(part);
  kiln_release(big);
  kiln_release(b);
  kiln_release(a_c);
  kiln_release(a);
}

/* Rank 0 forces the later collective first, the others the earlier one:
 * both are issued in recorded order everywhere. */
static void test_force_order(void **state) {
  (void)state;
  kiln_tensor *x = kiln_full(KILN_F32, 1, (int64_t[]){4}, R + 1);
  kiln_tensor *y = kiln_full(KILN_I32, 1, (int64_t[]){3}, 2 * R);
  kiln_tensor *a = kiln_all_reduce(x, KILN_REDUCE_SUM, world);
  kiln_tensor *b = kiln_all_reduce(y, KILN_REDUCE_MAX, world);
  kiln_tensor *first = R == 0 ? b : a, *second = R == 0 ? a : b;
  assert_int_equal(kiln_realize(first), KILN_OK);
  assert_int_equal(kiln_realize(second), KILN_OK);
  double ga[4], gb[3];
  values(a, ga, 4);
  values(b, gb, 3);
  for (int i = 0; i < 4; i++) assert_float_equal(ga[i], P * (P + 1) / 2.0, 0);
  for (int i = 0; i < 3; i++) assert_float_equal(gb[i], 2.0 * (P - 1), 0);
  kiln_release(a);
  kiln_release(b);
  kiln_release(x);
  kiln_release(y);
}

/* Non-integer float sums: the same bits on every rank. */
static void test_bit_identical(void **state) {
  (void)state;
  kiln_manual_seed(1000 + (uint64_t)R);
  kiln_tensor *x = kiln_randn(KILN_F32, 1, (int64_t[]){257});
  kiln_tensor *s = kiln_all_reduce(x, KILN_REDUCE_SUM, world);
  kiln_tensor *bits = kiln_to_dtype(s, KILN_F64);
  kiln_tensor *all = kiln_all_gather(bits, 0, world); /* every rank's result */
  static double got[257 * 64];
  assert_true(P <= 64);
  assert_int_equal(kiln_read(all, got, sizeof(double) * 257 * (size_t)P), KILN_OK);
  for (int r = 1; r < P; r++) assert_memory_equal(&got[r * 257], &got[0], sizeof(double) * 257);
  kiln_release(all);
  kiln_release(bits);
  kiln_release(s);
  kiln_release(x);
}

/* Gradients through collectives: the loss is the sum of every rank's
 * loss_r, each rank differentiates its own (data-parallel convention). */
static double grad_of(kiln_tensor *loss, kiln_tensor *x, double *out, int64_t n) {
  kiln_tensor *g = NULL;
  assert_int_equal(kiln_grad(&loss, NULL, 1, &x, 1, &g), KILN_OK);
  values(g, out, n);
  return out[0];
}

static void test_gradients(void **state) {
  (void)state;
  kiln_scope_begin(); /* owns every tensor below (nested calls) */
  int64_t n = 3, pn = 3 * (int64_t)P;
  double xs[3] = {1 + R, 2 - R, 0.5};
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, &n, xs);
  double got[64];
  assert_true(pn <= 64);
  /* all_reduce(SUM): loss_r = sum(all_reduce(x * x) * (r + 1)) */
  kiln_tensor *y = kiln_all_reduce(kiln_mul(x, x), KILN_REDUCE_SUM, world);
  kiln_tensor *loss = kiln_sum(kiln_mul_scalar(y, R + 1), 0, NULL, false);
  grad_of(loss, x, got, n);
  for (int i = 0; i < 3; i++) assert_float_equal(got[i], 2 * xs[i] * P * (P + 1) / 2.0, 1e-12);
  /* all_gather: loss_r = sum(all_gather(x) * c_r), c_r[j] = j + r */
  double c[64];
  for (int64_t j = 0; j < pn; j++) c[j] = (double)(j + R);
  kiln_tensor *ct = kiln_from_data(KILN_F64, 1, &pn, c);
  y = kiln_all_gather(x, 0, world);
  loss = kiln_sum(kiln_mul(y, ct), 0, NULL, false);
  grad_of(loss, x, got, n);
  for (int i = 0; i < 3; i++) { /* sum over ranks q of (R * 3 + i + q) */
    double want = 0;
    for (int q = 0; q < P; q++) want += (double)(R * 3 + i + q);
    assert_float_equal(got[i], want, 1e-12);
  }
  /* broadcast from root 0: the root gets the sum of the cotangents */
  y = kiln_broadcast(x, 0, world);
  loss = kiln_sum(kiln_mul_scalar(y, R + 1), 0, NULL, false);
  grad_of(loss, x, got, n);
  for (int i = 0; i < 3; i++) assert_float_equal(got[i], R == 0 ? P * (P + 1) / 2.0 : 0, 1e-12);
  /* reduce_scatter: x [3P] -> [3]; loss_r = sum(y * (r + 1)): x's block
   * b gets b + 1 */
  kiln_tensor *xb = kiln_ones(KILN_F64, 1, &pn);
  y = kiln_reduce_scatter(xb, KILN_REDUCE_MEAN, 0, world);
  loss = kiln_sum(kiln_mul_scalar(y, R + 1), 0, NULL, false);
  grad_of(loss, xb, got, pn);
  for (int64_t j = 0; j < pn; j++) assert_float_equal(got[j], (double)(j / 3 + 1) / P, 1e-12);
  /* MAX has no gradient: an error, not a silent zero */
  y = kiln_all_reduce(x, KILN_REDUCE_MAX, world);
  loss = kiln_sum(y, 0, NULL, false);
  kiln_tensor *g = NULL;
  if (P > 1) {
    assert_int_equal(kiln_grad(&loss, NULL, 1, &x, 1, &g), KILN_ERR_UNSUPPORTED);
    expect_error(KILN_ERR_UNSUPPORTED, "MAX", NULL);
  }
  assert_int_equal(kiln_realize(loss), KILN_OK);
  kiln_scope_end();
}

/* Every collective and kiln_recv inside nested scopes: the inner scope's
 * end frees each result exactly once (kiln_recv's was listed twice and
 * freed twice), a kiln_keep'd one outlives it in the outer scope. */
static void test_in_scopes(void **state) {
  (void)state;
  int next = (R + 1) % P, prev = (R + P - 1) % P;
  int64_t n = 6;
  kiln_scope_begin();
  kiln_tensor *x = strided_input(R, 2, 3, KILN_REDUCE_SUM, KILN_F32);
  kiln_tensor *kept[2];
  kiln_scope_begin();
  kiln_tensor *sum = kiln_all_reduce(x, KILN_REDUCE_SUM, world);
  kiln_tensor *gathered = kiln_all_gather(x, 0, world);
  kiln_tensor *scattered = kiln_reduce_scatter(gathered, KILN_REDUCE_SUM, 0, world);
  kiln_tensor *bcast = kiln_broadcast(x, 0, world);
  kiln_tensor *got_r = NULL;
  if (P > 1) {
    kiln_scope_begin(); /* a receive in a third scope, kept into the second */
    got_r = kiln_keep(kiln_recv(KILN_F32, 2, (int64_t[]){2, 3}, prev, 11, world));
    assert_non_null(got_r);
    assert_int_equal(kiln_send(x, next, 11, world), KILN_OK);
    kiln_scope_end();
    double v[6];
    values(got_r, v, n);
    for (int64_t i = 0; i < n; i++) assert_float_equal(v[i], input_of(prev, i, KILN_REDUCE_SUM, KILN_F32), 0);
  }
  double w[6]; /* block R of the sum over ranks of [x_0, ..., x_P-1]: P * x_R */
  values(scattered, w, n);
  for (int64_t i = 0; i < n; i++) assert_float_equal(w[i], P * input_of(R, i, KILN_REDUCE_SUM, KILN_F32), 0);
  assert_non_null(bcast);
  kept[0] = kiln_keep(sum);
  kept[1] = kiln_keep(P > 1 ? got_r : bcast);
  kiln_scope_end(); /* frees gathered, scattered, bcast (or got_r) once each */
  double v[6];
  values(kept[0], v, n);
  for (int64_t i = 0; i < n; i++) assert_float_equal(v[i], ref_reduce(i, KILN_REDUCE_SUM, KILN_F32), 0);
  values(kept[1], v, n);
  for (int64_t i = 0; i < n; i++) assert_float_equal(v[i], input_of(P > 1 ? prev : 0, i, KILN_REDUCE_SUM, KILN_F32), 0);
  kiln_scope_end();
}

static void test_bad_arguments(void **state) {
  (void)state;
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){2});
  assert_null(kiln_all_reduce(x, KILN_REDUCE_SUM, NULL));
  expect_error(KILN_ERR_ARG, "kiln_all_reduce", "group is NULL", NULL);
  assert_null(kiln_all_reduce(x, (kiln_reduce_op)9, world));
  expect_error(KILN_ERR_ARG, "kiln_all_reduce", "unknown reduction 9", NULL);
  assert_null(kiln_all_reduce(NULL, KILN_REDUCE_SUM, world));
  expect_error(KILN_ERR_ARG, NULL);
  kiln_group *fake = (kiln_group *)x;
  assert_int_equal(kiln_group_size(fake), -1);
  expect_error(KILN_ERR_ARG, "kiln_group_size", "bad group", NULL);
  assert_int_equal(kiln_all_reduce_(NULL, 2, KILN_REDUCE_SUM, world), KILN_ERR_ARG);
  kiln_clear_error();
  assert_null(kiln_recv(KILN_F32, 1, (int64_t[]){2}, P, 0, world));
  expect_error(KILN_ERR_ARG, "kiln_recv", "src", NULL);
  kiln_release(x);
}

/* Ranks that disagree on sizes: KILN_ERR_SHAPE on every rank, naming
 * both shapes; on a group of its own (the failed collective stays
 * pending there). */
static void test_mismatch(void **state) {
  (void)state;
  if (P < 2) return;
  kiln_group *g = NULL;
  assert_int_equal(kiln_group_split(world, 0, R, &g), KILN_OK);
  assert_int_equal(kiln_group_size(g), P);
  kiln_tensor *x = kiln_ones(KILN_F32, 2, (int64_t[]){4 + (R > 0), 3});
  kiln_tensor *y = kiln_all_reduce(x, KILN_REDUCE_SUM, g);
  assert_non_null(y);
  assert_int_equal(kiln_realize(y), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "ranks disagree", "[4, 3]", "[5, 3]", NULL);
  kiln_release(x);
  kiln_release(y);
  /* the world still works */
  kiln_tensor *z = kiln_ones(KILN_I32, 1, (int64_t[]){2});
  kiln_tensor *s = kiln_all_reduce(z, KILN_REDUCE_SUM, world);
  double got[2];
  values(s, got, 2);
  assert_float_equal(got[0], P, 0);
  kiln_release(z);
  kiln_release(s);
}

/* Without mpirun: "mpi" that cannot load, then "none"/"auto" of size 1. */
static void test_size_one(void **state) {
  (void)state;
  kiln_group *g = NULL;
  setenv("KILN_MPI_PLUGIN", "/nonexistent/libkiln_mpi.so", 1);
  assert_int_equal(kiln_dist_init("mpi", &g), KILN_ERR_UNSUPPORTED);
  expect_error(KILN_ERR_UNSUPPORTED, "kiln_dist_init", "MPI is not available", NULL);
  assert_int_equal(kiln_dist_init("tcp", &g), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "unknown backend", NULL);
  assert_int_equal(kiln_dist_init("none", &g), KILN_OK);
  kiln_group *again = NULL;
  assert_int_equal(kiln_dist_init(NULL, &again), KILN_OK);
  assert_ptr_equal(g, again);
  assert_int_equal(kiln_group_rank(g), 0);
  assert_int_equal(kiln_group_size(g), 1);
}

static int setup_world(void **state) {
  (void)state;
  if (kiln_dist_init(getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "none", &world) != KILN_OK) {
    fprintf(stderr, "kiln_dist_init: %s\n", kiln_last_error());
    return -1;
  }
  R = kiln_group_rank(world);
  P = kiln_group_size(world);
  return 0;
}

/* KILN_TEST_DIST_MODE=kill: every rank runs all-reduces of 4 MiB in a
 * loop; rank 1 is killed (SIGKILL: no clean-up, no MPI_Finalize) between
 * two of them while the others are already inside the next one. */
static int killed_mid_all_reduce(void) {
  kiln_tensor *x = kiln_ones(KILN_F32, 1, (int64_t[]){1 << 20});
  for (int it = 0; it < 1000; it++) {
    if (R == 1 && it == 20) {
      fprintf(stderr, "rank 1 is killed after %d all-reduces\n", it);
      fflush(stderr);
      raise(SIGKILL);
    }
    kiln_tensor *y = kiln_all_reduce(x, KILN_REDUCE_SUM, world);
    int st = kiln_realize(y);
    kiln_release(y);
    if (st != KILN_OK) {
      fprintf(stderr, "rank %d: all-reduce %d failed: %s\n", R, it, kiln_last_error());
      return 1;
    }
  }
  fprintf(stderr, "rank %d: every all-reduce completed\n", R);
  return 1; /* reaching here is a failure: the job should have ended */
}

/* KILN_TEST_DIST_MODE=hang|exit: rank 1 never joins the all-reduce (it
 * sleeps, or exits); =kill: it dies in the middle of a run of them
 * (killed_mid_all_reduce). The job must end (run_mpi.sh checks how fast). */
static int failure_mode(const char *mode) {
  if (setup_world(NULL) != 0) return 2;
  if (strcmp(mode, "kill") == 0) return killed_mid_all_reduce();
  if (R == 1) {
    if (strcmp(mode, "exit") == 0) {
      fprintf(stderr, "rank 1 exits early\n");
      exit(1);
    }
    sleep(600);
  }
  kiln_tensor *x = kiln_ones(KILN_F32, 1, (int64_t[]){8});
  kiln_tensor *y = kiln_all_reduce(x, KILN_REDUCE_SUM, world);
  int st = kiln_realize(y);
  fprintf(stderr, "rank %d: the all-reduce returned %d (%s)\n", R, st, kiln_last_error());
  return 1; /* reaching here is a failure: the job should have ended */
}

int main(void) {
  const char *mode = getenv("KILN_TEST_DIST_MODE");
  if (mode && *mode) return failure_mode(mode);
  if (!getenv("OMPI_COMM_WORLD_SIZE")) {
    const struct CMUnitTest one[] = {cmocka_unit_test(test_size_one)};
    int fails = cmocka_run_group_tests_name("dist_size_one", one, NULL, NULL);
    if (fails) return fails;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_reduce_ops), cmocka_unit_test(test_all_gather),
      cmocka_unit_test(test_reduce_scatter), cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_send_recv),      cmocka_unit_test(test_all_reduce_inplace),
      cmocka_unit_test(test_force_order),    cmocka_unit_test(test_bit_identical),
      cmocka_unit_test(test_gradients),      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_mismatch),       cmocka_unit_test(test_in_scopes),
  };
  int fails = cmocka_run_group_tests_name("dist", tests, setup_world, NULL);
  int st = kiln_dist_finalize();
  if (st != KILN_OK && st != KILN_ERR_SHAPE) { /* the mismatched group's collective fails again */
    fprintf(stderr, "kiln_dist_finalize: %s\n", kiln_last_error());
    fails++;
  }
  return fails;
}
