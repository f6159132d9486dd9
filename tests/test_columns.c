/*
 * test_columns.c — column reductions (passes/lower_columns.c):
 * reductions over leading dims whose last dim is kept and unit-stride run
 * as blocks of columns with an accumulator row in a LOCAL, rows added in
 * groups of 8. Checked here: the kernel IR has that shape, and the values
 * equal, bit for bit, a host loop that reduces each column sequentially in
 * row order in the accumulator type (F64 for float sums, I64 for integer
 * ones) — the order the general path and the unfused kernels use. Shapes
 * cover ragged column counts (the last block shifted back), row counts
 * below, at and past a multiple of the row group, strided views, kept
 * leading dims and several reduced dims.
 */
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

enum { MAXD = 4 };
typedef enum { SUM, AMAX, ANY } red_op;

/* A strided view of a host buffer: sizes/strides [nd] in elements. */
typedef struct view {
  int nd;
  int64_t size[MAXD], stride[MAXD], off;
} view;

/* Value i of a pattern whose magnitudes span 2^-6..2^6, so a sum's
 * rounding depends on its order; exact in F32. */
static double pattern(int64_t i) {
  uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull;
  double m = (double)(int64_t)((h >> 40) % 2001 - 1000) / 1000.0;
  return (double)(float)ldexp(m, (int)((h >> 20) % 13) - 6);
}

static int64_t numel_of(int nd, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= sizes[d];
  return n;
}

/* A contiguous tensor of dtype dt [nd sizes] holding pattern values
 * (I64: scaled to integers; BOOL: pattern > 0.25); *host gets them as F64
 * (the caller frees). */
static kiln_tensor *make_input(kiln_dtype dt, int nd, const int64_t *sizes, double **host) {
  int64_t n = numel_of(nd, sizes);
  double *v = malloc((size_t)n * sizeof *v);
  void *buf = malloc((size_t)n * 8);
  assert_non_null(v);
  assert_non_null(buf);
  for (int64_t i = 0; i < n; i++) {
    double p = pattern(i);
    switch ((int)dt) {
    case KILN_F32: ((float *)buf)[i] = (float)(v[i] = p); break;
    case KILN_F64: ((double *)buf)[i] = v[i] = p * (1 + 0x1p-30); break;
    case KILN_I64: ((int64_t *)buf)[i] = (int64_t)(v[i] = (double)(int64_t)(p * 1e6)); break;
    default: ((uint8_t *)buf)[i] = (uint8_t)(v[i] = p > 0.25); break; /* BOOL */
    }
  }
  kiln_tensor *t = kiln_from_data(dt, nd, sizes, buf);
  free(buf);
  *host = v;
  return t;
}

/* Steps the multi-index idx over the dims of w selected by `sel` (last
 * fastest); false after the last one. */
static bool next_index(const view *w, unsigned sel, int64_t *idx) {
  for (int d = w->nd - 1; d >= 0; d--) {
    if (!(sel & (1u << d))) continue;
    if (++idx[d] < w->size[d]) return true;
    idx[d] = 0;
  }
  return false;
}

/* The reduction of view w of host values v over the dims in mask, each
 * output reduced in row order: F32/F64 sums in F64, I64 sums in I64,
 * AMAX of F32 in F32, ANY of BOOL. out[] in the dtype Kiln returns. */
static void reference(const double *v, kiln_dtype dt, const view *w, unsigned mask, red_op op, void *out) {
  unsigned all = (1u << w->nd) - 1, kept = all & ~mask;
  int64_t idx[MAXD] = {0}, o = 0;
  do {
    for (int d = 0; d < w->nd; d++)
      if (mask & (1u << d)) idx[d] = 0;
    double f = op == AMAX ? -INFINITY : 0;
    uint64_t i = 0;
    bool any = false;
    do {
      int64_t at = w->off;
      for (int d = 0; d < w->nd; d++) at += idx[d] * w->stride[d];
      if (op == AMAX) f = (double)fmaxf((float)f, (float)v[at]);
      else if (op == ANY) any |= v[at] != 0;
      else if (dt == KILN_I64) i += (uint64_t)(int64_t)v[at];
      else f += dt == KILN_F32 ? (double)(float)v[at] : v[at];
    } while (next_index(w, mask, idx));
    if (op == ANY) ((uint8_t *)out)[o] = any;
    else if (dt == KILN_I64) ((int64_t *)out)[o] = (int64_t)i;
    else if (dt == KILN_F32) ((float *)out)[o] = (float)f;
    else ((double *)out)[o] = f;
    o++;
  } while (kept && next_index(w, kept, idx));
}

static size_t out_size(kiln_dtype dt, red_op op) {
  return op == ANY ? 1 : dt == KILN_F32 ? 4 : 8;
}

/* y (the reduction of view w of x's values v) equals the reference bit
 * for bit. */
static void expect_exact(kiln_tensor *y, const double *v, kiln_dtype dt, const view *w, unsigned mask, red_op op,
                         const char *what) {
  assert_non_null(y);
  int64_t n = kiln_numel(y);
  size_t es = out_size(dt, op);
  unsigned char *got = malloc((size_t)n * es), *want = malloc((size_t)n * es);
  assert_non_null(got);
  assert_non_null(want);
  assert_int_equal(kiln_read(y, got, (size_t)n * es), KILN_OK);
  reference(v, dt, w, mask, op, want);
  for (int64_t i = 0; i < n; i++)
    if (memcmp(got + (size_t)i * es, want + (size_t)i * es, es) != 0)
      fail_msg("%s: output %lld of %lld differs from the sequential reference", what, (long long)i, (long long)n);
  free(got);
  free(want);
}

static int dims_of(unsigned mask, int *dims) {
  int n = 0;
  for (int d = 0; d < MAXD; d++)
    if (mask & (1u << d)) dims[n++] = d;
  return n;
}

static kiln_tensor *reduce(kiln_tensor *x, unsigned mask, red_op op) {
  int dims[MAXD], n = dims_of(mask, dims);
  if (op == AMAX) return kiln_amax(x, n, dims, false);
  return op == ANY ? kiln_any(x, n, dims, false) : kiln_sum(x, n, dims, false);
}

/* A contiguous input of dtype dt [nd sizes] reduced over mask. */
static void check_contiguous(kiln_dtype dt, int nd, const int64_t *sizes, unsigned mask, red_op op) {
  kiln_scope_begin();
  double *v;
  kiln_tensor *x = make_input(dt, nd, sizes, &v);
  view w = {.nd = nd};
  for (int d = nd - 1, s = 1; d >= 0; s *= (int)sizes[d], d--) w.size[d] = sizes[d], w.stride[d] = s;
  char what[96];
  snprintf(what, sizeof what, "%s of [%lld, ..., %lld] over mask %u", kir_type_name(kir_type_of(dt)), (long long)sizes[0],
           (long long)sizes[nd - 1], mask);
  expect_exact(reduce(x, mask, op), v, dt, &w, mask, op, what);
  expect_no_error();
  kiln_scope_end();
  free(v);
}

/* Sums over dim 0 of [R, C] F32: column counts that are one block, split
 * for the pool, ragged (the last block shifted back over its neighbour)
 * and several blocks; rows fewer than, equal to, and past a multiple of
 * the row group of 8. */
static void f32_column_sums(void **state) {
  static const int64_t shapes[][2] = {{3, 16}, {8, 64}, {20, 17}, {37, 1001}, {1031, 48},
                                      {5, 4099}, {300, 2500}, {9, 1000}, {1, 40}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    check_contiguous(KILN_F32, 2, shapes[s], 1u, SUM);
}

/* F64 and I64 inputs (F64 and I64 accumulators), amax of F32 (an F32
 * accumulator), any of BOOL (a BOOL accumulator row). */
static void other_dtypes_and_ops(void **state) {
  static const int64_t shapes[][2] = {{37, 1001}, {13, 64}, {2, 3000}};
  for (int s = 0; s < 3; s++) {
    check_contiguous(KILN_F64, 2, shapes[s], 1u, SUM);
    check_contiguous(KILN_I64, 2, shapes[s], 1u, SUM);
    check_contiguous(KILN_F32, 2, shapes[s], 1u, AMAX);
    check_contiguous(KILN_BOOL, 2, shapes[s], 1u, ANY);
  }
}

/* Kept leading dims ([K, R, C] over dim 1: the blocks run inside the kept
 * rows) and several reduced dims ([A, K, B, C] over dims 0 and 2: the
 * outer one a loop around the row groups of the inner one). */
static void kept_and_several_reduced_dims(void **state) {
  check_contiguous(KILN_F32, 3, (int64_t[]){3, 21, 130}, 2u, SUM);
  check_contiguous(KILN_F32, 3, (int64_t[]){2, 1000, 48}, 2u, SUM);
  check_contiguous(KILN_F32, 4, (int64_t[]){3, 2, 11, 200}, 5u, SUM);
  check_contiguous(KILN_I64, 4, (int64_t[]){5, 3, 9, 33}, 5u, SUM);
}

/* Strided views whose last dim is unit-stride: every other row of a
 * wider tensor, from column 3 (rows 2·W apart); and a transposed view
 * (last dim strided: the general path). */
static void strided_inputs(void **state) {
  enum { R = 43, W = 1037, C = 1001 };
  kiln_scope_begin();
  double *v;
  kiln_tensor *base = make_input(KILN_F32, 2, (int64_t[]){2 * R, W}, &v);
  kiln_tensor *x = kiln_as_strided(base, 2, (int64_t[]){R, C}, (int64_t[]){2 * W, 1}, 3);
  view w = {2, {R, C}, {2 * W, 1}, 3};
  expect_exact(kiln_sum(x, 1, (int[]){0}, false), v, KILN_F32, &w, 1u, SUM, "every other row, from column 3");
  kiln_tensor *t = kiln_transpose(kiln_as_strided(base, 2, (int64_t[]){64, 2 * R}, (int64_t[]){1, W}, 0), 0, 1);
  view wt = {2, {2 * R, 64}, {W, 1}, 0};
  expect_exact(kiln_sum(t, 1, (int[]){0}, false), v, KILN_F32, &wt, 1u, SUM, "transposed twice");
  kiln_tensor *tt = kiln_as_strided(base, 2, (int64_t[]){40, 2 * R}, (int64_t[]){1, W}, 0);
  view wtt = {2, {40, 2 * R}, {1, W}, 0};
  expect_exact(kiln_sum(tt, 1, (int[]){0}, false), v, KILN_F32, &wtt, 1u, SUM, "last dim strided");
  expect_no_error();
  kiln_scope_end();
  free(v);
}

/* A fused producer (x·x in F32, rounded as its node) summed over dim 0:
 * the same bits fused and unfused (KILN_FUSE=0's one kernel per node). */
static void fused_equals_unfused(void **state) {
  enum { R = 77, C = 1001 };
  float out[2][C];
  for (int fuse = 0; fuse < 2; fuse++) {
    rt_set_fusion(fuse);
    kiln_scope_begin();
    double *v;
    kiln_tensor *x = make_input(KILN_F32, 2, (int64_t[]){R, C}, &v);
    kiln_tensor *y = kiln_sum(kiln_mul(x, x), 1, (int[]){0}, false);
    assert_int_equal(kiln_read(y, out[fuse], sizeof out[fuse]), KILN_OK);
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int r = 0; r < R; r++) s += (double)((float)v[r * C + c] * (float)v[r * C + c]);
      if ((float)s != out[fuse][c]) fail_msg("fuse %d: column %d differs from the sequential reference", fuse, c);
    }
    kiln_scope_end();
    free(v);
  }
  rt_set_fusion(-1);
  assert_memory_equal(out[0], out[1], sizeof out[0]);
}

/* The kernel of a sum over dim 0 of [rows, cols] F32: its loop extents,
 * its LOCALs (the last one's length and dtype), and the input loads
 * inside the row-group loop (the third loop: blocks, set, groups). */
typedef struct shape_info {
  int n_loops, n_local, group_loads;
  int64_t loops[16], local_len;
  kir_type local_type;
  bool first_parallel;
} shape_info;

static shape_info kernel_shape(int64_t rows, int64_t cols) {
  shape_info s = {0};
  kiln_scope_begin();
  kiln_tensor *x = kiln_full(KILN_F32, 2, (int64_t[]){rows, cols}, 1);
  assert_int_equal(kiln_realize(x), KILN_OK);
  kir_kernel k;
  lower_for_test(kiln_sum(x, 1, (int[]){0}, false), &k);
  assert_null(kir_verify(&k));
  int group = -1;
  for (int i = 0; i < k.n_uops; i++) {
    const kir_uop *u = &k.uops[i];
    if (u->op == KIR_RANGE) {
      if (s.n_loops == 0) s.first_parallel = u->parallel;
      if (s.n_loops < 16) s.loops[s.n_loops] = u->ival;
      if (s.n_loops++ == 2) group = i;
    }
    if (u->op == KIR_END && u->src[0] == group) group = -2;
    if (u->op == KIR_LOCAL) s.n_local++, s.local_len = u->ival, s.local_type = u->elem;
    if (u->op == KIR_LOAD && group >= 0 && k.uops[u->src[0]].op == KIR_PARAM) s.group_loads++;
  }
  kir_free(&k);
  kiln_scope_end();
  return s;
}

/* [4096, 4096] (bench/ row W3b): 4 blocks of 1024 columns, the first loop
 * parallel; one F64 LOCAL of 1024; blocks: set (1024), 512 groups of 8
 * rows (each a pass of 1024 columns loading 8 input rows), store (1024).
 * [37, 1001]: 4 blocks of 251, 4 groups and a pass over the 5 rows left. */
static void kernel_has_block_shape(void **state) {
  rt_set_fusion(1);
  shape_info s = kernel_shape(4096, 4096);
  assert_int_equal(s.n_loops, 5);
  const int64_t want[5] = {4, 1024, 512, 1024, 1024};
  for (int i = 0; i < 5; i++) assert_int_equal(s.loops[i], want[i]);
  assert_true(s.first_parallel);
  assert_int_equal(s.n_local, 1);
  assert_int_equal(s.local_len, 1024);
  assert_int_equal(s.local_type, KIR_F64);
  assert_int_equal(s.group_loads, 8);
  s = kernel_shape(37, 1001);
  assert_int_equal(s.n_loops, 6);
  const int64_t want2[6] = {4, 251, 4, 251, 251, 251};
  for (int i = 0; i < 6; i++) assert_int_equal(s.loops[i], want2[i]);
  assert_int_equal(s.group_loads, 8);
  rt_set_fusion(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(f32_column_sums),
      cmocka_unit_test(other_dtypes_and_ops),
      cmocka_unit_test(kept_and_several_reduced_dims),
      cmocka_unit_test(strided_inputs),
      cmocka_unit_test(fused_equals_unfused),
      cmocka_unit_test(kernel_has_block_shape),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
