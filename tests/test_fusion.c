/*
 * test_fusion.c — the fusion pass: which graphs become one kernel, and
 * that fused kernels give bit-identical results to one kernel per node
 * (each fused value is rounded to its node's dtype).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "passes.h"
#include "rt_internal.h"
#include "kernel_util.h"
#include "test_util.h"

typedef kiln_tensor *(*builder)(kiln_tensor *const *in);
/* Builds several results into out[]; returns how many. */
typedef int (*builder_many)(kiln_tensor *const *in, kiln_tensor **out);

enum { MAX_OUT = 8 };

static void expect_same(kiln_tensor *fused, kiln_tensor *plain) {
  int64_t n = kiln_numel(fused);
  assert_int_equal(n, kiln_numel(plain));
  size_t bytes = (size_t)n * kiln_dtype_size(kiln_dtype_of(fused));
  char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
  assert_int_equal(kiln_read(fused, a, bytes), KILN_OK);
  assert_int_equal(kiln_read(plain, b, bytes), KILN_OK);
  assert_memory_equal(a, b, bytes);
  free(a);
  free(b);
}

/* Builds the graph twice (fused, unfused) on the same realized inputs
 * (random, seeded by `seed`), forces all results of each at once, and
 * checks the kernel count of the fused run (when want_kernels > 0) and
 * bitwise equal results. */
static void check_many_seeded(builder_many build, int n_in, const int64_t *sizes, int ndim, kiln_dtype dt,
                              int want_kernels, uint64_t seed) {
  kiln_scope_begin();
  kiln_manual_seed(seed);
  kiln_tensor *in[40], *fused[MAX_OUT], *plain[MAX_OUT];
  for (int i = 0; i < n_in; i++) {
    in[i] = kiln_sub_scalar(kiln_mul_scalar(kiln_rand(KILN_F32, ndim, sizes), 4), 2);
    in[i] = kiln_to_dtype(in[i], dt);
    assert_int_equal(kiln_realize(in[i]), KILN_OK);
  }
  rt_set_fusion(1);
  kiln_profile_begin();
  int n_out = build(in, fused);
  for (int i = 0; i < n_out; i++) assert_non_null(fused[i]);
  assert_int_equal(kiln_realize_many(fused, n_out), KILN_OK);
  kiln_profile_end();
  if (want_kernels > 0) assert_int_equal(kiln_profile_count(), want_kernels);
  rt_set_fusion(0);
  assert_int_equal(build(in, plain), n_out);
  assert_int_equal(kiln_realize_many(plain, n_out), KILN_OK);
  rt_set_fusion(-1);
  for (int i = 0; i < n_out; i++) expect_same(fused[i], plain[i]);
  kiln_scope_end();
}

static void check_many(builder_many build, int n_in, const int64_t *sizes, int ndim, kiln_dtype dt, int want_kernels) {
  check_many_seeded(build, n_in, sizes, ndim, dt, want_kernels, 7);
}

static builder single;
static int one_result(kiln_tensor *const *in, kiln_tensor **out) {
  out[0] = single(in);
  return 1;
}

/* check_many for a graph with one result. */
static void check(builder build, int n_in, const int64_t *sizes, int ndim, kiln_dtype dt, int want_kernels) {
  single = build;
  check_many(one_result, n_in, sizes, ndim, dt, want_kernels);
}

static kiln_tensor *w1(kiln_tensor *const *in) {
  return kiln_mul(kiln_relu(kiln_add(kiln_mul(in[0], in[1]), in[2])), kiln_sigmoid(in[3]));
}
static void w1_is_one_kernel(void **state) {
  int64_t s[] = {1000};
  check(w1, 4, s, 1, KILN_F32, 1);
  check(w1, 4, s, 1, KILN_F16, 1);
  check(w1, 4, s, 1, KILN_BF16, 1);
}

static kiln_tensor *transpose_broadcast(kiln_tensor *const *in) {
  kiln_tensor *row = kiln_unsqueeze(kiln_select(in[1], 0, 0), 0);
  return kiln_exp(kiln_add(kiln_t(in[0]), row));
}
static void transposed_and_broadcast_reads(void **state) {
  check(transpose_broadcast, 2, (int64_t[]){33, 33}, 2, KILN_F32, 1);
}

static kiln_tensor *reshape_of_strided(kiln_tensor *const *in) {
  /* (x.T * 2).reshape(6, 10) + 1: the reshape of a non-contiguous
   * intermediate becomes index arithmetic in the one kernel */
  kiln_tensor *y = kiln_reshape(kiln_mul_scalar(kiln_t(in[0]), 2), 2, (int64_t[]){6, 10});
  return kiln_add_scalar(kiln_transpose(y, 0, 1), 1);
}
static void reshape_is_index_arithmetic(void **state) {
  check(reshape_of_strided, 1, (int64_t[]){4, 15}, 2, KILN_F64, 1);
}

static kiln_tensor *narrowed(kiln_tensor *const *in) {
  kiln_tensor *y = kiln_add_scalar(in[0], 1);
  return kiln_mul_scalar(kiln_narrow(kiln_narrow(y, 0, 2, 3), 1, 1, 4), 2);
}
static void narrowed_producer(void **state) { check(narrowed, 1, (int64_t[]){7, 9}, 2, KILN_I32, 1); }

static kiln_tensor *shared_expensive(kiln_tensor *const *in) {
  kiln_tensor *e = kiln_exp(in[0]);
  return kiln_add(e, kiln_mul_scalar(e, 2));
}
static void shared_expensive_is_materialized(void **state) {
  check(shared_expensive, 1, (int64_t[]){100}, 1, KILN_F32, 2);
}

static kiln_tensor *shared_cheap(kiln_tensor *const *in) {
  kiln_tensor *e = kiln_add(in[0], in[1]);
  return kiln_mul(e, kiln_sub(e, in[0]));
}
static void shared_cheap_is_recomputed(void **state) {
  check(shared_cheap, 2, (int64_t[]){100}, 1, KILN_I64, 1);
}

/* A running maximum over 12 inputs that reads its running value twice a
 * step (as max pooling's chain does): the group's size is its distinct
 * nodes and reads (12 buffers, about 50 nodes), not its paths (2^12). */
static kiln_tensor *twice_read_chain(kiln_tensor *const *in) {
  kiln_tensor *m = in[0], *count = kiln_zeros_like(in[0]);
  for (int i = 1; i < 12; i++) {
    count = kiln_add(count, kiln_to_dtype(kiln_gt(in[i], m), KILN_F32));
    m = kiln_maximum(m, in[i]);
  }
  return kiln_add(m, count);
}
static void twice_read_chain_is_one_kernel(void **state) {
  check(twice_read_chain, 12, (int64_t[]){100}, 1, KILN_F32, 1);
}

static kiln_tensor *many_inputs(kiln_tensor *const *in) {
  kiln_tensor *acc = in[0];
  for (int i = 1; i < 36; i++) acc = kiln_add(acc, kiln_mul_scalar(in[i], i));
  return acc;
}
static void more_inputs_than_a_kernel_takes(void **state) {
  check(many_inputs, 36, (int64_t[]){64}, 1, KILN_F32, 0);
}

static kiln_tensor *reduce_of_expression(kiln_tensor *const *in) {
  kiln_tensor *sq = kiln_mul(kiln_sub(in[0], in[1]), kiln_sub(in[0], in[1]));
  return kiln_sum(kiln_t(sq), 1, (int[]){0}, false);
}
static void producer_fused_into_reduction(void **state) {
  check(reduce_of_expression, 2, (int64_t[]){17, 23}, 2, KILN_F32, 1);
}

static kiln_tensor *copy_expression(kiln_tensor *const *in) {
  kiln_tensor *dst = kiln_zeros(KILN_F32, 2, (int64_t[]){5, 5});
  kiln_copy_(kiln_narrow(dst, 1, 1, 3), kiln_tanh(kiln_narrow(in[0], 0, 0, 5)));
  return dst;
}
static void expression_fused_into_write(void **state) {
  check(copy_expression, 1, (int64_t[]){6, 3}, 2, KILN_F32, 1);
}

static kiln_tensor *softmax(kiln_tensor *const *in) {
  int last = -1;
  kiln_tensor *m = kiln_amax(in[0], 1, &last, true);
  kiln_tensor *e = kiln_exp(kiln_sub(in[0], m));
  return kiln_div(e, kiln_sum(e, 1, &last, true));
}
/* Uops of op `op` in the kernel that would compute t. */
static int count_uops(kiln_tensor *t, kir_op op) {
  int count = 0;
  rt_set_fusion(1);
  kir_kernel k;
  lower_for_test(t, &k);
  for (int i = 0; i < k.n_uops; i++) count += k.uops[i].op == op;
  kir_free(&k);
  rt_set_fusion(-1);
  return count;
}

static void softmax_is_one_kernel(void **state) {
  check(softmax, 1, (int64_t[]){37, 53}, 2, KILN_F32, 1);
  check(softmax, 1, (int64_t[]){3, 4, 9}, 3, KILN_F64, 1);
  check(softmax, 1, (int64_t[]){5, 40}, 2, KILN_BF16, 1);
  /* exp(x - max) is computed once per element: the sum pass keeps it in
   * the output, the epilogue divides it in place (bit-identical above) */
  kiln_scope_begin(); /* rows of 40: a row of at most 16 would be unrolled, an exp per element of it */
  kiln_tensor *x = kiln_rand(KILN_F32, 2, (int64_t[]){4, 40});
  assert_int_equal(kiln_realize(x), KILN_OK);
  assert_int_equal(count_uops(softmax(&x), KIR_EXP), 1);
  int last = -1; /* log_softmax's epilogue does not read the exp: nothing kept */
  kiln_tensor *m = kiln_amax(x, 1, &last, true), *d = kiln_sub(x, m);
  kiln_tensor *ls = kiln_sub(d, kiln_log(kiln_sum(kiln_exp(d), 1, &last, true)));
  assert_int_equal(count_uops(ls, KIR_EXP), 1);
  assert_int_equal(count_uops(ls, KIR_STORE), 1);
  kiln_scope_end();
}

/* A sum over small dims that are not the last (max pooling's 2x2
 * windows, [N, C, o0, k0, o1, k1]): unrolled, the terms added in the
 * loop's order, so the kernel loops over the kept dims only. */
static kiln_tensor *window_sum(kiln_tensor *const *in) { return kiln_sum(in[0], 2, (int[]){1, 3}, true); }
static void small_reduction_is_unrolled(void **state) {
  for (int64_t w = 7; w <= 35; w += 28) { /* rows of 7: conv2's pooled rows; 35 */
    int64_t sizes[] = {6, 2, w, 2};
    check(window_sum, 1, sizes, 4, KILN_F32, 1);
    check(window_sum, 1, sizes, 4, KILN_F64, 1);
    kiln_scope_begin();
    kiln_tensor *x = kiln_rand(KILN_F32, 4, sizes);
    assert_int_equal(kiln_realize(x), KILN_OK);
    kiln_tensor *y = window_sum(&x);
    assert_int_equal(count_uops(y, KIR_RANGE), 2);
    const float *xs = kiln_data(x), *ys = kiln_data(y);
    for (int i = 0; i < 6; i++)
      for (int j = 0; j < w; j++) {
        double acc = 0; /* F64 accumulator, terms in row-major order */
        for (int a = 0; a < 2; a++)
          for (int b = 0; b < 2; b++) acc += xs[((i * 2 + a) * w + j) * 2 + b];
        assert_true(ys[i * w + j] == (float)acc);
      }
    kiln_scope_end();
  }
}

static kiln_tensor *layer_norm(kiln_tensor *const *in) {
  int last = -1;
  kiln_tensor *mu = kiln_mean(in[0], 1, &last, true);
  kiln_tensor *d = kiln_sub(in[0], mu);
  kiln_tensor *var = kiln_mean(kiln_mul(d, d), 1, &last, true);
  kiln_tensor *y = kiln_mul(d, kiln_rsqrt(kiln_add_scalar(var, 1e-5)));
  return kiln_add(kiln_mul(y, in[1]), in[2]);
}
static void layer_norm_is_one_kernel(void **state) {
  check(layer_norm, 3, (int64_t[]){16, 40}, 2, KILN_F32, 1);
}

static kiln_tensor *logsumexp(kiln_tensor *const *in) {
  int last = -1;
  kiln_tensor *m = kiln_amax(in[0], 1, &last, true);
  kiln_tensor *s = kiln_sum(kiln_exp(kiln_sub(in[0], m)), 1, &last, true);
  return kiln_add(kiln_log(s), m);
}
static void logsumexp_is_one_kernel(void **state) {
  check(logsumexp, 1, (int64_t[]){21, 30}, 2, KILN_F32, 1);
}

static kiln_tensor *column_softmax(kiln_tensor *const *in) {
  /* reduction over dim 0 is not a row: it is materialized, results equal */
  int first = 0;
  kiln_tensor *e = kiln_exp(in[0]);
  return kiln_div(e, kiln_sum(e, 1, &first, true));
}
static void column_reduction_still_correct(void **state) {
  check(column_softmax, 1, (int64_t[]){12, 7}, 2, KILN_F32, 0);
}

static kiln_tensor *argmax_mask(kiln_tensor *const *in) {
  kiln_tensor *a = kiln_argmax(in[0], -1, true);
  return kiln_eq(kiln_view(kiln_arange(KILN_I64, 0, 8, 1), 2, (int64_t[]){1, 8}), a);
}
static void row_argmax_feeds_elementwise(void **state) {
  check(argmax_mask, 1, (int64_t[]){5, 8}, 2, KILN_F32, 1);
}

/* ------------------------------------------------ multi-output kernels */

static int siblings(kiln_tensor *const *in, kiln_tensor **out) {
  out[0] = kiln_add(in[0], in[1]);
  out[1] = kiln_sub(in[0], in[1]);
  out[2] = kiln_mul(kiln_exp(in[0]), in[1]);
  return 3;
}
static void forced_siblings_share_one_loop(void **state) {
  check_many(siblings, 2, (int64_t[]){9, 70}, 2, KILN_F32, 1);
  check_many(siblings, 2, (int64_t[]){1000}, 1, KILN_F64, 1);
}

static int producer_and_reader(kiln_tensor *const *in, kiln_tensor **out) {
  out[0] = kiln_exp(in[0]);                             /* forced, and read below */
  out[1] = kiln_add(kiln_mul_scalar(out[0], 2), in[1]); /* read by a producer fused here */
  return 2;
}
static int and_a_third(kiln_tensor *const *in, kiln_tensor **out) {
  producer_and_reader(in, out);
  out[2] = kiln_to_dtype(kiln_gt(out[0], out[1]), KILN_F32); /* reads both buffers */
  return 3;
}
static void forced_producer_is_stored_by_its_reader(void **state) {
  check_many(producer_and_reader, 2, (int64_t[]){5, 6, 7}, 3, KILN_F32, 1);
  check_many(producer_and_reader, 2, (int64_t[]){333}, 1, KILN_BF16, 1);
  /* a chain: the kernel that stores exp(a) is stored by the comparison's */
  check_many(and_a_third, 2, (int64_t[]){5, 6, 7}, 3, KILN_F32, 1);
  check_many(and_a_third, 2, (int64_t[]){1001}, 1, KILN_F64, 1);
}

static int different_sizes(kiln_tensor *const *in, kiln_tensor **out) {
  out[0] = kiln_exp(in[0]);
  out[1] = kiln_add_scalar(kiln_narrow(out[0], 0, 1, 3), 1); /* other sizes: reads the buffer */
  out[2] = kiln_sum(out[0], 0, NULL, false);           /* a reduction reads it too */
  return 3;
}
static void producer_with_other_readers_gets_its_buffer(void **state) {
  check_many(different_sizes, 1, (int64_t[]){6, 4}, 2, KILN_F32, 3);
}

static int reader_in_between(kiln_tensor *const *in, kiln_tensor **out) {
  kiln_tensor *e = kiln_exp(in[0]);
  int last = -1;
  out[0] = kiln_sum(e, 1, &last, false);                 /* materializes e first */
  out[1] = kiln_add(e, in[1]);
  out[2] = e;
  return 3;
}
static void reader_between_producer_and_host(void **state) {
  check_many(reader_in_between, 2, (int64_t[]){8, 8}, 2, KILN_F32, 0);
}

/* A chain whose middle link's stored node is read from its buffer in
 * between (the row sum of e): e stays where its buffer is needed first. */
static int chain_read_in_between(kiln_tensor *const *in, kiln_tensor **out) {
  int last = -1;
  out[0] = kiln_exp(in[0]);
  out[1] = kiln_add(kiln_mul_scalar(out[0], 2), in[1]);
  out[2] = kiln_sum(out[0], 1, &last, true);
  out[3] = kiln_add(kiln_to_dtype(kiln_gt(out[0], out[1]), KILN_F32), out[2]);
  return 4;
}
static void chain_with_a_reader_in_between(void **state) {
  check_many(chain_read_in_between, 2, (int64_t[]){8, 8}, 2, KILN_F32, 0);
  check_many(chain_read_in_between, 2, (int64_t[]){3, 70}, 2, KILN_F64, 0);
}

/* 20 + 12 + 1 distinct inputs: more than one kernel takes, so the host is
 * lowered alone after the node it would store gets its own kernel. */
static int too_wide(kiln_tensor *const *in, kiln_tensor **out) {
  kiln_tensor *a = in[1], *b = in[21];
  for (int i = 2; i <= 20; i++) a = kiln_add(a, kiln_mul_scalar(in[i], i));
  for (int i = 22; i <= 32; i++) b = kiln_sub(b, in[i]);
  out[0] = kiln_add(a, in[0]); /* both read in[0] at the top of their group */
  out[1] = kiln_mul(b, in[0]);
  return 2;
}
static void multi_output_too_wide_falls_back(void **state) {
  check_many(too_wide, 33, (int64_t[]){40}, 1, KILN_F32, 2);
}

static void multi_output_schedule_cache(void **state) {
  kiln_profile_begin();
  kiln_profile_end();
  check_many_seeded(siblings, 2, (int64_t[]){3, 50}, 2, KILN_F32, 1, 11);
  int64_t hits = rt_schedule_hits();
  check_many_seeded(siblings, 2, (int64_t[]){3, 50}, 2, KILN_F32, 1, 12); /* new data, same graph */
  assert_true(rt_schedule_hits() > hits);
}

/* ------------------------------------ whole-buffer writes (rule 7) */

/* Records in-place writes into b [nb] and p [np] (both wrapped from host
 * arrays with kiln_from_blob) from g [np], and puts what to force in
 * out[]; returns how many. */
typedef int (*writes)(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out);

enum { WN = 16 * 16, W_MAX = 4 };

typedef struct write_run {
  int kernels;
  bool in_place;            /* b's and p's buffers are still the host arrays */
  float bv[WN], pv[WN];     /* the arrays afterwards */
  float got[W_MAX][2 * WN]; /* the forced results (F32, at most 2 WN each) */
} write_run;

/* Runs `rec` fused or not on the same data, forcing its results at once. */
static void run_writes(writes rec, int64_t nb, bool fused, write_run *w) {
  kiln_scope_begin();
  kiln_manual_seed(5);
  kiln_tensor *g = kiln_randn(KILN_F32, 1, (int64_t[]){WN});
  assert_int_equal(kiln_realize(g), KILN_OK);
  for (int i = 0; i < WN; i++) w->bv[i] = 0.25f * (float)(i % 9) - 1, w->pv[i] = 0.5f - 0.125f * (float)(i % 13);
  kiln_tensor *b = kiln_from_blob(KILN_F32, 1, &nb, NULL, w->bv, NULL, NULL);
  kiln_tensor *p = kiln_from_blob(KILN_F32, 1, (int64_t[]){WN}, NULL, w->pv, NULL, NULL);
  rt_set_fusion(fused);
  kiln_profile_begin();
  kiln_tensor *out[W_MAX];
  int n = rec(b, p, g, out);
  assert_int_equal(kiln_realize_many(out, n), KILN_OK);
  kiln_profile_end();
  rt_set_fusion(-1);
  w->kernels = kiln_profile_count();
  for (int i = 0; i < n; i++) {
    assert_true(kiln_numel(out[i]) <= 2 * WN);
    assert_int_equal(kiln_read(out[i], w->got[i], (size_t)kiln_numel(out[i]) * sizeof(float)), KILN_OK);
  }
  w->in_place = kiln_data(b) == (const void *)w->bv && kiln_data(p) == (const void *)w->pv;
  kiln_scope_end();
  expect_no_error();
}

/* `rec` runs `want` kernels fused, writes b and p in place, and gives
 * bit for bit the results of one kernel per node. */
static void check_writes(writes rec, int64_t nb, int want) {
  static write_run fused, plain;
  run_writes(rec, nb, true, &fused);
  run_writes(rec, nb, false, &plain);
  assert_int_equal(fused.kernels, want);
  assert_true(fused.in_place);
  assert_true(plain.in_place);
  assert_memory_equal(fused.bv, plain.bv, sizeof fused.bv);
  assert_memory_equal(fused.pv, plain.pv, sizeof fused.pv);
  assert_memory_equal(fused.got, plain.got, sizeof fused.got);
}

/* SGD with momentum: b = 0.9 b + g, p -= 0.1 b (the new b). */
static int momentum(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  kiln_tensor *nb = kiln_add(kiln_mul_scalar(b, 0.9), g);
  assert_int_equal(kiln_copy_(b, nb), KILN_OK);
  assert_int_equal(kiln_copy_(p, kiln_sub(p, kiln_mul_scalar(nb, 0.1))), KILN_OK); /* reads the value written */
  out[0] = b, out[1] = p;
  return 2;
}
static int momentum_reads_b(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  assert_int_equal(kiln_copy_(b, kiln_add(kiln_mul_scalar(b, 0.9), g)), KILN_OK);
  assert_int_equal(kiln_copy_(p, kiln_sub(p, kiln_mul_scalar(b, 0.1))), KILN_OK); /* reads b's new version */
  out[0] = b, out[1] = p;
  return 2;
}
/* 2-d views of both; the new b computed in F64 and rounded by the write:
 * p's update reads the rounded value, as from b's buffer. */
static int momentum_2d_f64(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  int64_t sz[2] = {8, 32};
  kiln_tensor *b2 = kiln_view(b, 2, sz), *p2 = kiln_view(p, 2, sz), *g2 = kiln_view(g, 2, sz);
  kiln_tensor *nb = kiln_add(kiln_mul_scalar(kiln_to_dtype(b2, KILN_F64), 0.9), kiln_to_dtype(g2, KILN_F64));
  assert_int_equal(kiln_copy_(b2, nb), KILN_OK);
  assert_int_equal(kiln_copy_(p2, kiln_sub(p2, kiln_mul_scalar(b2, 0.1))), KILN_OK);
  out[0] = b2, out[1] = p2;
  return 2;
}
/* p's update reads the new b transposed: b's value is computed at the
 * transposed index for the read, and at the loop's index for the store. */
static int reads_transposed(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  int64_t sz[2] = {16, 16};
  kiln_tensor *b2 = kiln_view(b, 2, sz), *p2 = kiln_view(p, 2, sz), *g2 = kiln_view(g, 2, sz);
  assert_int_equal(kiln_copy_(b2, kiln_add(kiln_mul_scalar(b2, 0.9), g2)), KILN_OK);
  assert_int_equal(kiln_copy_(p2, kiln_sub(p2, kiln_mul_scalar(kiln_t(b2), 0.1))), KILN_OK);
  out[0] = b2, out[1] = p2;
  return 2;
}
/* An elementwise kernel of the write's sizes that reads the new b stores
 * it too: y = b + p after b = 2 g. */
static int read_by_elementwise(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  assert_int_equal(kiln_copy_(b, kiln_mul_scalar(g, 2)), KILN_OK);
  out[0] = b, out[1] = kiln_exp(kiln_add(b, p));
  return 2;
}

static void whole_writes_share_one_kernel(void **state) {
  check_writes(momentum, WN, 1);
  check_writes(momentum_reads_b, WN, 1);
  check_writes(momentum_2d_f64, WN, 1);
  check_writes(reads_transposed, WN, 1);
  check_writes(read_by_elementwise, WN, 1);
  /* the values themselves */
  static write_run w;
  run_writes(momentum, WN, true, &w);
  float g[WN];
  kiln_manual_seed(5);
  kiln_tensor *gt = kiln_randn(KILN_F32, 1, (int64_t[]){WN});
  assert_int_equal(kiln_read(gt, g, sizeof g), KILN_OK);
  kiln_release(gt);
  for (int i = 0; i < WN; i++) {
    float b = 0.25f * (float)(i % 9) - 1, p = 0.5f - 0.125f * (float)(i % 13);
    double nb = 0.9 * b + g[i];
    assert_float_equal(w.bv[i], nb, 1e-6);
    assert_float_equal(w.pv[i], p - 0.1 * nb, 1e-6);
  }
}

/* The new b is read from its buffer between its write and p's (the sum):
 * b's kernel runs first, as its own. */
static int reader_between(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  assert_int_equal(kiln_copy_(b, kiln_add(kiln_mul_scalar(b, 0.9), g)), KILN_OK);
  kiln_tensor *s = kiln_sum(b, 0, NULL, false);
  assert_int_equal(kiln_copy_(p, kiln_sub(p, kiln_mul_scalar(b, 0.1))), KILN_OK);
  out[0] = b, out[1] = s, out[2] = p;
  return 3;
}
/* b is written through a strided view (every other element): not a
 * whole-buffer write, so not stored by p's kernel. */
static int strided_region(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  kiln_tensor *bs = kiln_select(kiln_view(b, 2, (int64_t[]){WN / 2, 2}), 1, 0);
  kiln_tensor *ps = kiln_narrow(p, 0, 0, WN / 2), *gs = kiln_narrow(g, 0, 0, WN / 2);
  assert_int_equal(kiln_copy_(bs, kiln_add(kiln_mul_scalar(bs, 0.9), gs)), KILN_OK);
  assert_int_equal(kiln_copy_(ps, kiln_sub(ps, kiln_mul_scalar(bs, 0.1))), KILN_OK);
  out[0] = b, out[1] = p;
  return 2;
}
/* b [WN / 2] is read broadcast by p's update [2, WN / 2]: other sizes. */
static int other_sizes(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  int64_t sz[2] = {2, WN / 2};
  assert_int_equal(kiln_copy_(b, kiln_add(kiln_mul_scalar(b, 0.9), kiln_narrow(g, 0, 0, WN / 2))), KILN_OK);
  kiln_tensor *p2 = kiln_view(p, 2, sz);
  assert_int_equal(kiln_copy_(p2, kiln_sub(p2, kiln_mul_scalar(kiln_expand(b, 2, sz), 0.1))), KILN_OK);
  out[0] = b, out[1] = p;
  return 2;
}
/* b written twice: the second write overwrites the first, whose storage
 * keeps one buffer only when each is written there in turn. */
static int written_twice(kiln_tensor *b, kiln_tensor *p, kiln_tensor *g, kiln_tensor **out) {
  assert_int_equal(kiln_copy_(b, kiln_mul_scalar(g, 2)), KILN_OK);
  assert_int_equal(kiln_copy_(b, kiln_add_scalar(kiln_mul_scalar(b, 3), 1)), KILN_OK);
  assert_int_equal(kiln_copy_(p, kiln_sub(p, b)), KILN_OK);
  out[0] = b, out[1] = p;
  return 2;
}

static void whole_writes_not_stored(void **state) {
  check_writes(reader_between, WN, 3);
  check_writes(strided_region, WN, 2);
  check_writes(other_sizes, WN / 2, 2);
  check_writes(written_twice, WN, 2); /* the second write stores no first: p's kernel stores the second */
}

/* b's write reads 20 buffers, p's 12 more and b: more than one kernel
 * takes, so p's kernel is lowered alone after b's write ran as its own
 * (in place, values as unfused). */
static void whole_write_too_wide(bool fused, float *bv, float *pv) {
  kiln_scope_begin();
  kiln_manual_seed(9);
  kiln_tensor *in[33];
  for (int i = 0; i < 33; i++) {
    in[i] = kiln_rand(KILN_F32, 1, (int64_t[]){40});
    assert_int_equal(kiln_realize(in[i]), KILN_OK);
  }
  for (int i = 0; i < 40; i++) bv[i] = (float)i, pv[i] = 1 - (float)i;
  kiln_tensor *b = kiln_from_blob(KILN_F32, 1, (int64_t[]){40}, NULL, bv, NULL, NULL);
  kiln_tensor *p = kiln_from_blob(KILN_F32, 1, (int64_t[]){40}, NULL, pv, NULL, NULL);
  rt_set_fusion(fused);
  kiln_profile_begin();
  kiln_tensor *a = kiln_add(b, in[1]), *c = in[21];
  for (int i = 2; i <= 20; i++) a = kiln_add(a, kiln_mul_scalar(in[i], i));
  for (int i = 22; i <= 32; i++) c = kiln_sub(c, in[i]);
  assert_int_equal(kiln_copy_(b, a), KILN_OK);
  assert_int_equal(kiln_copy_(p, kiln_add(p, kiln_mul(b, c))), KILN_OK);
  kiln_tensor *both[2] = {b, p};
  assert_int_equal(kiln_realize_many(both, 2), KILN_OK);
  kiln_profile_end();
  rt_set_fusion(-1);
  if (fused) assert_int_equal(kiln_profile_count(), 2);
  assert_ptr_equal(kiln_data(b), bv);
  assert_ptr_equal(kiln_data(p), pv);
  kiln_scope_end();
  expect_no_error();
}

static void whole_writes_too_wide_fall_back(void **state) {
  float bv[2][40], pv[2][40];
  whole_write_too_wide(true, bv[0], pv[0]);
  whole_write_too_wide(false, bv[1], pv[1]);
  assert_memory_equal(bv[0], bv[1], sizeof bv[0]);
  assert_memory_equal(pv[0], pv[1], sizeof pv[0]);
}

/* Forced again on new data: a schedule-cache hit, checked against a fresh
 * fusion pass and lowering (KILN_DEBUG_CACHE). */
static void whole_writes_schedule_cache(void **state) {
  static write_run w;
  rt_set_debug_cache(1);
  run_writes(momentum, WN, true, &w);
  int64_t hits = rt_schedule_hits();
  run_writes(momentum, WN, true, &w);
  assert_true(rt_schedule_hits() > hits);
  assert_int_equal(w.kernels, 1);
  assert_true(w.in_place);
  rt_set_debug_cache(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(w1_is_one_kernel),
      cmocka_unit_test(transposed_and_broadcast_reads),
      cmocka_unit_test(reshape_is_index_arithmetic),
      cmocka_unit_test(narrowed_producer),
      cmocka_unit_test(shared_expensive_is_materialized),
      cmocka_unit_test(shared_cheap_is_recomputed),
      cmocka_unit_test(twice_read_chain_is_one_kernel),
      cmocka_unit_test(more_inputs_than_a_kernel_takes),
      cmocka_unit_test(producer_fused_into_reduction),
      cmocka_unit_test(expression_fused_into_write),
      cmocka_unit_test(softmax_is_one_kernel),
      cmocka_unit_test(small_reduction_is_unrolled),
      cmocka_unit_test(layer_norm_is_one_kernel),
      cmocka_unit_test(logsumexp_is_one_kernel),
      cmocka_unit_test(column_reduction_still_correct),
      cmocka_unit_test(row_argmax_feeds_elementwise),
      cmocka_unit_test(forced_siblings_share_one_loop),
      cmocka_unit_test(forced_producer_is_stored_by_its_reader),
      cmocka_unit_test(producer_with_other_readers_gets_its_buffer),
      cmocka_unit_test(reader_between_producer_and_host),
      cmocka_unit_test(chain_with_a_reader_in_between),
      cmocka_unit_test(multi_output_too_wide_falls_back),
      cmocka_unit_test(multi_output_schedule_cache),
      cmocka_unit_test(whole_writes_share_one_kernel),
      cmocka_unit_test(whole_writes_not_stored),
      cmocka_unit_test(whole_writes_too_wide_fall_back),
      cmocka_unit_test(whole_writes_schedule_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
