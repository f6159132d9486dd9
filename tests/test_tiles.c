/*
 * test_tiles.c — elementwise kernels that read an input transposed.
 *
 * Such kernels run the last two dims in 16 x 16 tiles when both are at
 * least 32 (passes/lower.c wants_tiles; a size that is not a multiple of
 * 16 shifts its last tile back), else row by row; the CPU backend loads
 * each tile of a transposed read with vector loads and transposes it in
 * registers (codegen_llvm/llvm_tile.c). Every case here compares every
 * element with a reference computed on the host: sizes that are
 * multiples of 16 and sizes that are not, sizes below a tile, 3-D
 * batches, offset views, several dtypes, outputs large enough for
 * streaming stores, and a transposed input mixed with other transposed,
 * contiguous and broadcast inputs. Values are small integers, so every
 * dtype holds them and results must be exact.
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
#include "test_util.h"

/* A contiguous tensor of dtype dt and the given sizes holding
 * v(flat index) = (flat * mult + add) % 97 - 48 (I8 holds it; U8 gets
 * |v|). */
static kiln_tensor *pattern(kiln_dtype dt, int ndim, const int64_t *sizes, int mult, int add) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  double *v = malloc((size_t)n * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) {
    double x = (double)((i * mult + add) % 97 - 48);
    v[i] = dt == KILN_U8 ? fabs(x) : x;
  }
  kiln_tensor *t = kiln_to_dtype(kiln_from_data(KILN_F64, ndim, sizes, v), dt);
  free(v);
  assert_int_equal(kiln_realize(t), KILN_OK); /* read from a buffer of dtype dt, not fused */
  return t;
}

/* Same values as pattern(), computed on the host. */
static double pattern_at(kiln_dtype dt, int64_t i, int mult, int add) {
  double x = (double)((i * mult + add) % 97 - 48);
  return dt == KILN_U8 ? fabs(x) : x;
}

/* t (realized first, in its own dtype) read as F64. */
static double *read_f64(kiln_tensor *t) {
  assert_int_equal(kiln_realize(t), KILN_OK);
  int64_t n = kiln_numel(t);
  double *got = malloc((size_t)n * sizeof *got);
  assert_non_null(got);
  assert_int_equal(kiln_read(kiln_to_dtype(t, KILN_F64), got, (size_t)n * sizeof *got), KILN_OK);
  return got;
}

static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_I8, KILN_U8, KILN_F16, KILN_BF16};

/* Checks y = a.T + b[None, :] for a [cols, rows] of dtype dt. */
static void check_transpose_plus_row(kiln_dtype dt, int64_t rows, int64_t cols) {
      kiln_scope_begin();
      kiln_tensor *a = pattern(dt, 2, (int64_t[]){cols, rows}, 7, 3);
      kiln_tensor *b = pattern(dt, 1, (int64_t[]){cols}, 5, 11);
      kiln_tensor *y = kiln_add(kiln_t(a), kiln_unsqueeze(b, 0));
      double *got = read_f64(y);
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
          double want = pattern_at(dt, j * rows + i, 7, 3) + pattern_at(dt, j, 5, 11);
          if (got[i * cols + j] != want)
            fail_msg("dtype %d [%lld, %lld] at (%lld, %lld): got %g, want %g", (int)dt, (long long)rows,
                     (long long)cols, (long long)i, (long long)j, got[i * cols + j], want);
        }
      free(got);
      kiln_scope_end();
}

/* y = a.T + b[None, :] for a [cols, rows]: y [rows, cols]. Sizes that are
 * multiples of 16 (and of 32), of neither, and below a tile. */
static void transpose_plus_row(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{64, 96}, {48, 80}, {128, 32}, {40, 72}, {33, 50}, {47, 33}, {20, 100}, {100, 20}};
  for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; di++)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
      check_transpose_plus_row(dtypes[di], shapes[si][0], shapes[si][1]);
}

/* Outputs of at least 8 MiB: a tiled kernel streams its stores when the
 * last dim is a multiple of 16 (passes/lower.c streams), and stores
 * plainly when it is not. */
static void large_outputs(void **state) {
  (void)state;
  check_transpose_plus_row(KILN_F32, 1536, 1536);
  check_transpose_plus_row(KILN_F32, 1499, 1501);
  check_transpose_plus_row(KILN_F64, 1024, 1040);
}

/* A 3-D batch read with its last two dims swapped, from an offset view
 * (a narrowed batch and narrowed rows), times a contiguous input, plus a
 * transposed second input and a column broadcast. */
static void batched_mixed_inputs(void **state) {
  (void)state;
  enum { B = 3, R = 64, C = 96 }; /* y [B, R, C]: tiled */
  for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; di++) {
    kiln_dtype dt = dtypes[di];
    if (dt == KILN_I8 || dt == KILN_U8 || dt == KILN_F16 || dt == KILN_BF16) continue; /* products overflow them */
    kiln_scope_begin();
    kiln_tensor *big = pattern(dt, 3, (int64_t[]){B + 1, C, R + 5}, 3, 1); /* a = big[1:, :, 2:2+R] */
    kiln_tensor *a = kiln_narrow(kiln_narrow(big, 0, 1, B), 2, 2, R);
    kiln_tensor *c = pattern(dt, 3, (int64_t[]){B, R, C}, 11, 4);
    kiln_tensor *e = pattern(dt, 2, (int64_t[]){C, R}, 13, 9);
    kiln_tensor *d = pattern(dt, 2, (int64_t[]){R, 1}, 17, 2);
    int perm[] = {0, 2, 1};
    kiln_tensor *y = kiln_add(kiln_add(kiln_mul(kiln_permute(a, 3, perm), c), kiln_t(e)), d);
    double *got = read_f64(y);
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
          double av = pattern_at(dt, ((b + 1) * C + j) * (R + 5) + 2 + i, 3, 1);
          double want = av * pattern_at(dt, (b * R + i) * C + j, 11, 4) + pattern_at(dt, j * R + i, 13, 9) +
                        pattern_at(dt, i, 17, 2);
          if (got[(b * R + i) * C + j] != want)
            fail_msg("dtype %d at (%lld, %lld, %lld): got %g, want %g", (int)dt, (long long)b, (long long)i,
                     (long long)j, got[(b * R + i) * C + j], want);
        }
    free(got);
    kiln_scope_end();
  }
}

/* BOOL: a.T & b[None, :] through logical ops (1-byte elements in memory). */
static void bool_transpose(void **state) {
  (void)state;
  enum { R = 32, C = 48 };
  kiln_scope_begin();
  kiln_tensor *a = kiln_gt(pattern(KILN_I32, 2, (int64_t[]){C, R}, 7, 3), kiln_scalar(KILN_I32, 0));
  kiln_tensor *b = kiln_gt(pattern(KILN_I32, 1, (int64_t[]){C}, 5, 11), kiln_scalar(KILN_I32, -20));
  assert_int_equal(kiln_realize(a), KILN_OK);
  kiln_tensor *y = kiln_logical_and(kiln_t(a), kiln_unsqueeze(b, 0));
  assert_int_equal(kiln_dtype_of(y), KILN_BOOL);
  double *got = read_f64(y);
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) {
      bool want = pattern_at(KILN_I32, j * R + i, 7, 3) > 0 && pattern_at(KILN_I32, j, 5, 11) > -20;
      assert_true(got[i * C + j] == (want ? 1.0 : 0.0));
    }
  free(got);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(transpose_plus_row),
      cmocka_unit_test(large_outputs),
      cmocka_unit_test(batched_mixed_inputs),
      cmocka_unit_test(bool_transpose),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
