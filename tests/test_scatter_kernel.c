/*
 * test_scatter_kernel.c — the generated scatter-add kernel (ops.def
 * SCATTER, passes/lower.c lower_scatter) behind kiln_index_add_ and the
 * gradients of gathers: values against a sequential host loop over many
 * chunks, bit-identical results for every thread count, the exact
 * sequential sum when there is one chunk, integer wrapping, strided
 * targets, fusion of the source into the kernel, its profile record,
 * the gradient of src through chunked partial sums, and one chunk's
 * target rows scattered in parallel.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "test_util.h"

/* A deterministic pseudo-random sequence (xorshift64*). */
static uint64_t rng_state = 88172645463325252ull;
static uint64_t next_u64(void) {
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
static double next_unit(void) { return (double)(next_u64() >> 11) / 9007199254740992.0 * 2 - 1; }

static kiln_tensor *longs(int64_t n, const int64_t *v) { return kiln_from_data(KILN_I64, 1, &n, v); }

/* Sequential index_add_ along dim 0 of a [rows, cols] F64 target. */
static void host_index_add(double *t, int64_t cols, const int64_t *idx, const double *src, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < cols; j++) t[idx[i] * cols + j] += src[i * cols + j];
}

enum { ROWS = 10, COLS = 3, N = 100000 }; /* N * COLS index elements: many chunks */

typedef struct case_data {
  int64_t idx[N];
  double src[N * COLS], want[ROWS * COLS], abs_sum[ROWS * COLS];
} case_data;

static case_data *make_case(bool integers) {
  case_data *c = calloc(1, sizeof *c);
  assert_non_null(c);
  for (int64_t i = 0; i < N; i++) c->idx[i] = (int64_t)(next_u64() % ROWS);
  for (int64_t i = 0; i < N * COLS; i++) c->src[i] = integers ? (double)(next_u64() % 1000) - 500 : next_unit();
  for (int64_t r = 0; r < ROWS * COLS; r++) c->want[r] = (double)r;
  host_index_add(c->want, COLS, c->idx, c->src, N);
  for (int64_t r = 0; r < ROWS * COLS; r++) c->abs_sum[r] = fabs((double)r);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < COLS; j++) c->abs_sum[c->idx[i] * COLS + j] += fabs(c->src[i * COLS + j]);
  return c;
}

/* kiln_index_add_ of the case into arange(ROWS*COLS) of dtype dt, read
 * back as F64 into out. */
static void run_case(const case_data *c, kiln_dtype dt, double *out) {
  kiln_scope_begin();
  kiln_tensor *t = kiln_view(kiln_arange(dt, 0, ROWS * COLS, 1), 2, (int64_t[]){ROWS, COLS});
  kiln_tensor *src = kiln_to_dtype(kiln_from_data(KILN_F64, 2, (int64_t[]){N, COLS}, c->src), dt);
  assert_int_equal(kiln_index_add_(t, 0, longs(N, c->idx), src), KILN_OK);
  assert_int_equal(kiln_read(kiln_to_dtype(t, KILN_F64), out, sizeof(double) * ROWS * COLS), KILN_OK);
  kiln_scope_end();
}

/* Integer-valued sums are exact in F64 however they are grouped: every
 * chunk's partial and their sum equal the sequential loop's. */
static void exact_integers_over_chunks(void **state) {
  case_data *c = make_case(true);
  double got[ROWS * COLS];
  run_case(c, KILN_F64, got);
  for (int r = 0; r < ROWS * COLS; r++) assert_true(got[r] == c->want[r]);
  run_case(c, KILN_I32, got);
  for (int r = 0; r < ROWS * COLS; r++) assert_true(got[r] == c->want[r]);
  free(c);
}

/* Real-valued sums: within the documented bound (n eps sum|x|) of the
 * sequential loop, in F64 and in F32 (which accumulates in F64 and rounds
 * once). */
static void real_sums_within_bound(void **state) {
  case_data *c = make_case(false);
  double got[ROWS * COLS];
  run_case(c, KILN_F64, got);
  for (int r = 0; r < ROWS * COLS; r++) assert_true(fabs(got[r] - c->want[r]) <= 64 * 0x1p-52 * c->abs_sum[r]);
  /* F32: src rounded to F32 first (Torch converts src to t's dtype) */
  for (int64_t i = 0; i < N * COLS; i++) c->src[i] = (float)c->src[i];
  for (int64_t r = 0; r < ROWS * COLS; r++) c->want[r] = (double)r;
  host_index_add(c->want, COLS, c->idx, c->src, N);
  run_case(c, KILN_F32, got);
  for (int r = 0; r < ROWS * COLS; r++)
    assert_true(fabs(got[r] - c->want[r]) <= 0x1p-24 * fabs(c->want[r]) + 64 * 0x1p-52 * c->abs_sum[r]);
  free(c);
}

/* The chunks depend on the sizes alone: 1 and 2 threads give the same
 * bits. */
static void same_bits_for_any_thread_count(void **state) {
  case_data *c = make_case(false);
  double one[ROWS * COLS], two[ROWS * COLS];
  assert_int_equal(kiln_set_num_threads(1), KILN_OK);
  run_case(c, KILN_F32, one);
  assert_int_equal(kiln_set_num_threads(2), KILN_OK);
  run_case(c, KILN_F32, two);
  assert_memory_equal(one, two, sizeof one);
  free(c);
}

/* Below one chunk's grain the kernel adds in index order from zero, then
 * adds the target: with integer-valued partial sums that is the
 * sequential loop's result bit for bit; duplicates accumulate. */
static void one_chunk_duplicates(void **state) {
  kiln_scope_begin();
  kiln_tensor *t = kiln_zeros(KILN_F64, 1, (int64_t[]){3});
  double s[] = {0.1, 0.2, 0.3, 0.4};
  kiln_tensor *src = kiln_from_data(KILN_F64, 1, (int64_t[]){4}, s);
  assert_int_equal(kiln_index_add_(t, 0, longs(4, (int64_t[]){2, 0, 2, 2}), src), KILN_OK);
  double want[] = {0.2, 0, ((0.1 + 0.3) + 0.4)};
  double got[3];
  assert_int_equal(kiln_read(t, got, sizeof got), KILN_OK);
  assert_memory_equal(got, want, sizeof got);
  kiln_scope_end();
}

/* scatter_add_ along dim 1 (one chunk: the target's rows run in parallel,
 * passes/lower.c lower_scatter_slabs), with an index of fewer rows than
 * the target: rows past it keep their values; each element is the
 * in-order sum of its contributions, for 1 and 2 threads alike. */
static void rows_in_parallel(void **state) {
  enum { R = 6, C = 5, IR = 4, IC = 7 };
  int64_t idx[IR * IC];
  double src[IR * IC], want[R * C], got[2][R * C];
  for (int i = 0; i < R * C; i++) want[i] = i;
  for (int i = 0; i < IR; i++)
    for (int j = 0; j < IC; j++) {
      idx[i * IC + j] = (int64_t)(next_u64() % C);
      src[i * IC + j] = next_unit();
      want[i * C + idx[i * IC + j]] += src[i * IC + j];
    }
  for (int th = 1; th <= 2; th++) {
    kiln_scope_begin();
    assert_int_equal(kiln_set_num_threads(th), KILN_OK);
    kiln_tensor *t = kiln_reshape(kiln_arange(KILN_F64, 0, R * C, 1), 2, (int64_t[]){R, C});
    kiln_tensor *ix = kiln_from_data(KILN_I64, 2, (int64_t[]){IR, IC}, idx);
    assert_int_equal(kiln_scatter_add_(t, 1, ix, kiln_from_data(KILN_F64, 2, (int64_t[]){IR, IC}, src)), KILN_OK);
    assert_int_equal(kiln_read(t, got[th - 1], sizeof got[0]), KILN_OK);
    kiln_scope_end();
  }
  assert_memory_equal(got[0], got[1], sizeof got[0]);
  for (int i = 0; i < R * C; i++) assert_true(fabs(got[0][i] - want[i]) <= 1e-12);
  for (int i = IR * C; i < R * C; i++) assert_true(got[0][i] == i);
}

/* Integers wrap as the sequential loop does: int64 sums, converted. */
static void integers_wrap(void **state) {
  kiln_scope_begin();
  int64_t n = 20000;
  kiln_tensor *t = kiln_full(KILN_I32, 1, (int64_t[]){2}, 2147483000);
  kiln_tensor *idx = kiln_zeros(KILN_I64, 1, &n);
  kiln_tensor *src = kiln_full(KILN_I32, 1, &n, 1000000);
  assert_int_equal(kiln_index_add_(t, 0, idx, src), KILN_OK);
  int32_t got[2];
  assert_int_equal(kiln_read(t, got, sizeof got), KILN_OK);
  int64_t sum = 2147483000 + n * INT64_C(1000000);
  assert_int_equal(got[0], (int32_t)(uint32_t)(uint64_t)sum);
  assert_int_equal(got[1], 2147483000);
  /* bool ors */
  kiln_tensor *b = kiln_zeros(KILN_BOOL, 1, (int64_t[]){3});
  assert_int_equal(kiln_index_add_(b, 0, longs(3, (int64_t[]){1, 1, 1}), kiln_ones(KILN_BOOL, 1, (int64_t[]){3})),
                   KILN_OK);
  bool bv[3];
  assert_int_equal(kiln_read(b, bv, sizeof bv), KILN_OK);
  assert_false(bv[0]);
  assert_true(bv[1]);
  assert_false(bv[2]);
  kiln_scope_end();
}

/* A transposed target, dim 1, many chunks: values through the view, and
 * the storage's other elements untouched. */
static void strided_target(void **state) {
  kiln_scope_begin();
  enum { R = 4, M = 9000 };
  kiln_tensor *base = kiln_view(kiln_arange(KILN_F64, 0, 2 * R * 5, 1), 2, (int64_t[]){5, 2 * R});
  kiln_tensor *t = kiln_t(kiln_slice(base, 1, 0, 2 * R, 2)); /* [R, 5], strides (2, 8) */
  int64_t *idx = malloc(sizeof *idx * M);
  double *s = malloc(sizeof *s * R * M);
  for (int64_t i = 0; i < M; i++) idx[i] = (int64_t)(next_u64() % 5);
  for (int64_t i = 0; i < R * M; i++) s[i] = (double)(next_u64() % 7);
  double want[5 * 2 * R];
  for (int i = 0; i < 5 * 2 * R; i++) want[i] = i;
  for (int64_t r = 0; r < R; r++) /* t[r][idx[i]] += s[r][i]: base[idx[i]][2r] */
    for (int64_t i = 0; i < M; i++) want[idx[i] * 2 * R + 2 * r] += s[r * M + i];
  assert_int_equal(kiln_index_add_(t, 1, longs(M, idx), kiln_from_data(KILN_F64, 2, (int64_t[]){R, M}, s)), KILN_OK);
  double got[5 * 2 * R];
  assert_int_equal(kiln_read(base, got, sizeof got), KILN_OK);
  assert_memory_equal(got, want, sizeof got);
  free(idx), free(s);
  kiln_scope_end();
}

/* The source's elementwise producer is computed inside the scatter
 * kernel (no kernel of its own; not under KILN_FUSE=0); the record has
 * bytes and flops. */
static void source_fuses_and_is_profiled(void **state) {
  kiln_scope_begin();
  int64_t n = 50000;
  kiln_tensor *x = kiln_arange(KILN_F32, 0, (double)n, 1);
  assert_int_equal(kiln_realize(x), KILN_OK);
  kiln_tensor *idx = kiln_remainder(kiln_arange(KILN_I64, 0, (double)n, 1), kiln_scalar(KILN_I64, 7));
  assert_int_equal(kiln_realize(idx), KILN_OK);
  kiln_tensor *t = kiln_zeros(KILN_F32, 1, (int64_t[]){7});
  assert_int_equal(kiln_realize(t), KILN_OK);
  kiln_profile_begin();
  assert_int_equal(kiln_index_add_(t, 0, idx, kiln_mul_scalar(x, 2)), KILN_OK);
  assert_int_equal(kiln_realize(t), KILN_OK);
  kiln_profile_end();
  int scatter = -1, elementwise = 0;
  for (int i = 0; i < kiln_profile_count(); i++) {
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    if (r.name[0] == 'I') scatter = i;
    if (r.name[0] == 'E') elementwise++;
  }
  assert_true(scatter >= 0);
  kiln_kernel_record r;
  kiln_profile_get(scatter, &r);
  const char *fuse = getenv("KILN_FUSE"); /* the KILN_FUSE=0 run of CI: one kernel per node */
  if (!fuse || strcmp(fuse, "0") != 0) {
    assert_int_equal(elementwise, 0);
    assert_non_null(strstr(r.name, "mul"));
  }
  assert_true(r.bytes_read >= n * 4 + n * 8);
  assert_true(r.flops >= n);
  double got[7], want[7] = {0};
  for (int64_t i = 0; i < n; i++) want[i % 7] += 2.0 * (double)i;
  assert_int_equal(kiln_read(kiln_to_dtype(t, KILN_F64), got, sizeof got), KILN_OK);
  for (int j = 0; j < 7; j++) assert_float_equal(got[j], want[j], 1e-6 * want[j]);
  kiln_scope_end();
}

/* d/dsrc of sum(w * index_add_(t, idx, src)) = w[idx]: the rule gathers
 * g from the chunk rows each element went to. */
static void gradient_through_chunks(void **state) {
  kiln_scope_begin();
  int64_t n = 30000;
  int64_t *idx = malloc(sizeof *idx * n);
  for (int64_t i = 0; i < n; i++) idx[i] = (int64_t)(next_u64() % 6);
  double wv[12];
  for (int j = 0; j < 12; j++) wv[j] = j + 1;
  kiln_tensor *w = kiln_from_data(KILN_F64, 2, (int64_t[]){6, 2}, wv);
  kiln_tensor *src = kiln_randn(KILN_F64, 2, (int64_t[]){n, 2});
  kiln_tensor *t = kiln_zeros(KILN_F64, 2, (int64_t[]){6, 2});
  assert_int_equal(kiln_index_add_(t, 0, longs(n, idx), src), KILN_OK);
  kiln_tensor *loss = kiln_sum(kiln_mul(t, w), 0, NULL, false);
  kiln_tensor *g = NULL;
  assert_int_equal(kiln_grad(&loss, NULL, 1, &src, 1, &g), KILN_OK);
  double *got = malloc(sizeof *got * n * 2);
  assert_int_equal(kiln_read(g, got, sizeof *got * n * 2), KILN_OK);
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < 2; j++) assert_true(got[i * 2 + j] == wv[idx[i] * 2 + j]);
  free(got), free(idx);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(exact_integers_over_chunks), cmocka_unit_test(real_sums_within_bound),
      cmocka_unit_test(same_bits_for_any_thread_count), cmocka_unit_test(one_chunk_duplicates),
      cmocka_unit_test(integers_wrap), cmocka_unit_test(strided_target),
      cmocka_unit_test(source_fuses_and_is_profiled), cmocka_unit_test(gradient_through_chunks),
      cmocka_unit_test(rows_in_parallel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
