/*
 * test_loops.c — view and stride simplification (passes/merge_loops.c): the loop
 * nest an elementwise kernel or a reduction is lowered to (size-1 dims
 * dropped, dims contiguous in every operand merged, others kept), and the
 * values it computes, checked element by element against a plain C loop
 * over the same strided inputs.
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
#include "text_util.h"

/* The loop extents [return] of the kernel that would compute t. */
static int loop_extents(kiln_tensor *t, int64_t *extents) {
  kir_kernel k;
  lower_for_test(t, &k);
  int loops = 0;
  for (int i = 0; i < k.n_uops; i++)
    if (k.uops[i].op == KIR_RANGE) extents[loops++] = k.uops[i].ival;
  kir_free(&k);
  return loops;
}

static void expect_loops(kiln_tensor *t, int n, const int64_t *want) {
  int64_t got[16];
  int loops = loop_extents(t, got);
  assert_int_equal(loops, n);
  for (int i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

/* arange(numel) viewed as sizes: known values at every position. */
static kiln_tensor *ramp(int ndim, const int64_t *sizes, double scale) {
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= sizes[d];
  return kiln_mul_scalar(kiln_view(kiln_arange(KILN_F32, 0, (double)numel, 1), ndim, sizes), scale);
}

static void read_all(kiln_tensor *t, float *out, int64_t n) {
  assert_int_equal(kiln_numel(t), n);
  assert_int_equal(kiln_read(t, out, sizeof(float) * (size_t)n), KILN_OK);
}

static void contiguous_merges_to_one_loop(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  int64_t s[4] = {6, 3, 1, 40};
  kiln_tensor *a = ramp(4, s, 1), *b = ramp(4, s, 0.5);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){a, b}, 2), KILN_OK);
  kiln_tensor *y = kiln_relu(kiln_sub(kiln_mul(a, b), a));
  expect_loops(y, 1, (int64_t[]){720});
  float got[720];
  read_all(y, got, 720);
  for (int i = 0; i < 720; i++) {
    float v = (float)i * (float)(0.5 * i) - (float)i;
    assert_float_equal(got[i], v > 0 ? v : 0, 1e-3 * (v > 1 ? v : 1));
  }
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* b [1, 40] broadcasts over the leading dims: they merge, the last stays. */
static void broadcast_keeps_its_dim(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  int64_t s[4] = {6, 3, 1, 40};
  kiln_tensor *a = ramp(4, s, 1), *b = ramp(2, (int64_t[]){1, 40}, 1);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){a, b}, 2), KILN_OK);
  kiln_tensor *y = kiln_add(a, b);
  expect_loops(y, 2, (int64_t[]){18, 40});
  float got[720];
  read_all(y, got, 720);
  for (int i = 0; i < 720; i++) assert_float_equal(got[i], (float)i + (float)(i % 40), 0);
  /* a column broadcast ([6, 3, 1, 1] over the last dim) */
  kiln_tensor *col = ramp(4, (int64_t[]){6, 3, 1, 1}, 1);
  kiln_tensor *z = kiln_mul(a, col);
  expect_loops(z, 2, (int64_t[]){18, 40});
  read_all(z, got, 720);
  for (int i = 0; i < 720; i++) assert_float_equal(got[i], (float)i * (float)(i / 40), 0);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* A transposed read and a narrowed (strided-row) read keep their dims. */
static void strided_reads_keep_dims(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *a = ramp(2, (int64_t[]){24, 40}, 1);
  kiln_tensor *wide = ramp(2, (int64_t[]){40, 50}, 1);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){a, wide}, 2), KILN_OK);
  kiln_tensor *at = kiln_t(a);                      /* [40, 24], strides [1, 40] */
  kiln_tensor *nar = kiln_narrow(wide, 1, 3, 24);   /* [40, 24], strides [50, 1] */
  kiln_tensor *y = kiln_add(at, nar);
  expect_loops(y, 2, (int64_t[]){40, 24});
  float got[960];
  read_all(y, got, 960);
  for (int i = 0; i < 40; i++)
    for (int j = 0; j < 24; j++) assert_float_equal(got[i * 24 + j], (float)(j * 40 + i) + (float)(i * 50 + 3 + j), 0);
  /* [2, 20, 24] split of the narrowed rows: dims 0 and 1 merge (row stride 50 · 20 = 1000), dim 2 does not */
  kiln_tensor *v3 = kiln_as_strided(wide, 3, (int64_t[]){2, 20, 24}, (int64_t[]){1000, 50, 1}, 3);
  kiln_tensor *z = kiln_neg(v3);
  expect_loops(z, 2, (int64_t[]){40, 24});
  read_all(z, got, 960);
  for (int i = 0; i < 40; i++)
    for (int j = 0; j < 24; j++) assert_float_equal(got[i * 24 + j], -(float)(i * 50 + 3 + j), 0);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* Only size-1 dims and a scalar: one loop over what is left. */
static void size_one_dims_drop(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = ramp(4, (int64_t[]){1, 5, 1, 1}, 2);
  assert_int_equal(kiln_realize(a), KILN_OK);
  kiln_tensor *y = kiln_add_scalar(a, 1);
  expect_loops(y, 1, (int64_t[]){5});
  expect_values_tol(y, (double[]){1, 3, 5, 7, 9}, 5, 0);
  kiln_tensor *one = kiln_exp(ramp(3, (int64_t[]){1, 1, 1}, 1));
  expect_loops(one, 1, (int64_t[]){1});
  expect_values_tol(one, (double[]){1}, 1, 0);
  kiln_scope_end();
}

/* A fused producer read through a non-plain view (here a transpose of an
 * intermediate) is not pointwise: the loop nest stays as it was. */
static void non_pointwise_group_unchanged(void **state) {
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *a = ramp(3, (int64_t[]){2, 24, 40}, 1);
  assert_int_equal(kiln_realize(a), KILN_OK);
  kiln_tensor *e = kiln_mul_scalar(a, 2);      /* fused producer */
  kiln_tensor *y = kiln_add_scalar(kiln_transpose(e, 1, 2), 1);
  expect_loops(y, 3, (int64_t[]){2, 40, 24});
  float got[1920];
  read_all(y, got, 1920);
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 40; i++)
      for (int j = 0; j < 24; j++)
        assert_float_equal(got[(b * 40 + i) * 24 + j], 2.0f * (float)(b * 960 + j * 40 + i) + 1, 0);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* A reduction's adjacent reduced dims that are contiguous in every read
 * merge, and so do its adjacent kept ones: a sum of [N, C, H, W] over N,
 * H, W (a convolution's bias gradient, here with a fused relu-mask
 * producer) loops over C, then N, then H·W; a sum over N alone is a
 * column reduction of [N, C·H·W]. Values against a host loop (integers: exact). */
static void reduction_dims_merge(void **state) {
  enum { N = 3, C = 4, H = 5, W = 6 };
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *a = ramp(4, (int64_t[]){N, C, H, W}, 1), *g = ramp(4, (int64_t[]){N, C, H, W}, 3);
  assert_int_equal(kiln_realize(a), KILN_OK);
  assert_int_equal(kiln_realize(g), KILN_OK);
  kiln_tensor *masked = kiln_where(kiln_gt_scalar(kiln_fmod(a, kiln_scalar(KILN_F32, 3)), 0), g, kiln_scalar(KILN_F32, 0));
  kiln_tensor *bias = kiln_sum(masked, 3, (int[]){0, 2, 3}, false);
  expect_loops(bias, 3, (int64_t[]){C, N, H * W});
  double want[C] = {0}, want0[C * H * W] = {0};
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < H * W; i++) {
        int64_t at = (n * C + c) * H * W + i;
        double v = (double)(at % 3) > 0 ? 3.0 * (double)at : 0;
        want[c] += v;
        want0[c * H * W + i] += v;
      }
  expect_values_tol(bias, want, C, 0);
  kiln_tensor *over_n = kiln_sum(masked, 1, (int[]){0}, false);
  /* a column reduction of [N, C·H·W] (test_columns.c): 3 blocks of 40
   * columns, each set, one pass over the N rows, stored */
  expect_loops(over_n, 4, (int64_t[]){3, C * H * W / 3, C * H * W / 3, C * H * W / 3});
  expect_values_tol(over_n, want0, C * H * W, 0);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* A fused producer read through a reshape of its layout still merges:
 * the CNN's bias gradient reads its cotangent, computed as [1, N, C, H·W]
 * (here a cast of an F64 buffer and a multiply), as [N, C, H, W]; the sum
 * over N, H, W loops over C, N, H·W as above. A producer that cannot be
 * re-expressed over the reader's sizes (a transposed read that the
 * reshape would have to merge) is not merged. Values against a host loop. */
static void reshaped_producer_merges(void **state) {
  enum { N = 3, C = 4, H = 5, W = 6 };
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *g64 = kiln_to_dtype(ramp(4, (int64_t[]){1, N, C, H * W}, 1), KILN_F64);
  kiln_tensor *a = ramp(4, (int64_t[]){N, C, H, W}, 1);
  kiln_tensor *bt = ramp(4, (int64_t[]){N, C, W, H}, 1);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){g64, a, bt}, 3), KILN_OK);
  kiln_tensor *cot = kiln_mul_scalar(kiln_to_dtype(g64, KILN_F32), 2); /* [1, N, C, H·W] */
  kiln_tensor *masked = kiln_where(kiln_gt_scalar(kiln_fmod(a, kiln_scalar(KILN_F32, 3)), 0),
                                   kiln_view(cot, 4, (int64_t[]){N, C, H, W}), kiln_scalar(KILN_F32, 0));
  kiln_tensor *bias = kiln_sum(masked, 3, (int[]){0, 2, 3}, false);
  expect_loops(bias, 3, (int64_t[]){C, N, H * W});
  double want[C] = {0}, total = 0;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < H * W; i++) {
        int64_t at = (n * C + c) * H * W + i;
        want[c] += (double)(at % 3) > 0 ? 2.0 * (double)at : 0;
        total += (double)at;
      }
  expect_values_tol(bias, want, C, 0);
  /* the producer [N, C, H, W] reads bt transposed; read as [N, C, H·W],
   * its H and W would have to merge in bt, where they do not */
  kiln_tensor *tr = kiln_add_scalar(kiln_transpose(bt, 2, 3), 0);
  kiln_tensor *tsum = kiln_sum(kiln_view(tr, 3, (int64_t[]){N, C, H * W}), 3, (int[]){0, 1, 2}, false);
  expect_loops(tsum, 3, (int64_t[]){N, C, H * W});
  expect_values_tol(tsum, &total, 1, 0);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* The uops of op in the kernel that would compute t. */
static int count_op(kiln_tensor *t, kir_op op) {
  kir_kernel k;
  lower_for_test(t, &k);
  int n = 0;
  for (int i = 0; i < k.n_uops; i++) n += k.uops[i].op == op;
  kir_free(&k);
  return n;
}

/* A fused producer [N, C, H·W] read as [N, C, H, W] beside a transposed
 * operand (so H and W cannot merge): both reader dims step inside the
 * producer's H·W dim, and its coordinate is h·W + w — no division or
 * remainder of a flat index (passes/lower.c map_by_strides). */
static void split_dim_reads_without_division(void **state) {
  enum { N = 3, C = 4, H = 5, W = 6 };
  rt_set_fusion(1);
  kiln_scope_begin();
  /* a: F64 data cast to F32, the cast fused into y's kernel (the CNN's
   * bias gradient reads its F64 cotangent so) */
  kiln_tensor *a64 = kiln_to_dtype(ramp(3, (int64_t[]){N, C, H * W}, 1), KILN_F64);
  kiln_tensor *b = ramp(4, (int64_t[]){N, C, W, H}, 1000);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){a64, b}, 2), KILN_OK);
  kiln_tensor *a = kiln_to_dtype(a64, KILN_F32);
  kiln_tensor *y = kiln_add(kiln_view(a, 4, (int64_t[]){N, C, H, W}), kiln_transpose(b, 2, 3));
  assert_int_equal(count_op(y, KIR_DIV), 0);
  assert_int_equal(count_op(y, KIR_MOD), 0);
  static float got[N * C * H * W];
  read_all(y, got, N * C * H * W);
  for (int nc = 0; nc < N * C; nc++)
    for (int h = 0; h < H; h++)
      for (int w = 0; w < W; w++)
        assert_float_equal(got[(nc * H + h) * W + w],
                           (float)((nc * H + h) * W + w) + 1000.0f * (float)((nc * W + w) * H + h), 0);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* A fused producer over 2x2 windows [N, C, H, 2, W, 2] (a max pool's
 * window gradient: it reads a per-window value broadcast over the
 * window, so its views do not reshape to [N, C, 2H, 2W]), read as
 * [N, C, 2H, 2W] by a reader that also reads a transposed operand: the
 * loops are refined to the windows' dims, so no index is divided by a
 * reshape's sizes (passes/merge_loops.c), and the innermost dim of 2 is
 * unrolled, the rows of W windows innermost (passes/lower.c). Values
 * against a host loop. */
static void split_producer_refines_loops(void **state) {
  enum { N = 3, C = 4, H = 5, W = 9 }; /* W >= 7: lower.c unrolls the 2 under it */
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *x = ramp(4, (int64_t[]){N, C, 2 * H, 2 * W}, 1);
  kiln_tensor *m = ramp(6, (int64_t[]){N, C, H, 1, W, 1}, 4); /* one value a window */
  kiln_tensor *t = ramp(4, (int64_t[]){N, C, 2 * W, 2 * H}, 1);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){x, m, t}, 3), KILN_OK);
  kiln_tensor *xw = kiln_view(x, 6, (int64_t[]){N, C, H, 2, W, 2});
  kiln_tensor *win = kiln_where(kiln_gt(kiln_mul_scalar(xw, 3), m), m, kiln_scalar(KILN_F32, 0));
  kiln_tensor *y = kiln_add(kiln_view(win, 4, (int64_t[]){N, C, 2 * H, 2 * W}), kiln_transpose(t, 2, 3));
  assert_int_equal(count_op(y, KIR_DIV), 0);
  assert_int_equal(count_op(y, KIR_MOD), 0);
  expect_loops(y, 4, (int64_t[]){N * C, H, 2, W});
  static float got[N * C * 4 * H * W];
  read_all(y, got, N * C * 4 * H * W);
  for (int nc = 0; nc < N * C; nc++)
    for (int h = 0; h < 2 * H; h++)
      for (int w = 0; w < 2 * W; w++) {
        int at = (nc * 2 * H + h) * 2 * W + w;
        float mv = 4.0f * (float)((nc * H + h / 2) * W + w / 2);
        float want = (3.0f * (float)at > mv ? mv : 0) + (float)((nc * 2 * W + w) * 2 * H + h);
        assert_float_equal(got[at], want, 0);
      }
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* A write through a transposed view loops with the destination's unit
 * stride innermost: x.t().copy_(y) into x [64, 96] runs its region loops
 * as [64, 96] (after the copy of the old contents), not [96, 64]; a
 * region already in that order (a narrow) keeps it. */
static void transposed_write_is_unit_stride(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 2, (int64_t[]){64, 96});
  kiln_tensor *y = ramp(2, (int64_t[]){96, 64}, 1);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){x, y}, 2), KILN_OK);
  assert_int_equal(kiln_copy_(kiln_t(x), y), KILN_OK);
  expect_loops(x, 3, (int64_t[]){6144, 64, 96});
  static float got[6144];
  read_all(x, got, 6144);
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 96; j++) assert_float_equal(got[i * 96 + j], (float)(j * 64 + i), 0);
  kiln_tensor *z = kiln_zeros(KILN_F32, 2, (int64_t[]){3, 4});
  assert_int_equal(kiln_realize(z), KILN_OK);
  assert_int_equal(kiln_copy_(kiln_narrow(z, 1, 1, 2), ramp(2, (int64_t[]){3, 2}, 1)), KILN_OK);
  /* a partial write into a new buffer whose rows tile it: one loop over
   * the rows (parallel), each copying its row, then writing its part */
  expect_loops(z, 3, (int64_t[]){3, 4, 2});
  expect_values_tol(z, (double[]){0, 0, 1, 0, 0, 2, 3, 0, 0, 4, 5, 0}, 12, 0);
  kiln_scope_end();
}

/* The uops flagged skew / the nontemporal STOREs of the kernel of t. */
static void count_flags(kiln_tensor *t, int *skews, int *streams) {
  kir_kernel k;
  lower_for_test(t, &k);
  *skews = *streams = 0;
  for (int i = 0; i < k.n_uops; i++) {
    *skews += k.uops[i].skew;
    *streams += k.uops[i].op == KIR_STORE && k.uops[i].nontemporal;
  }
  kir_free(&k);
}

/* y = a^T + b[None, :] over [nb, r, w] (nb = 0: 2-D) in dtype dt, a =
 * ramp / 8 and b = ramp / 2 (I32: ramp, 3 ramp; exact in F16 for the
 * small F16 case), read back as F64 and
 * checked against the same sums in double, rounded to dt (kiln_to_dtype
 * of the expected values). Returns the kernel's skew uops and streaming stores. */
static void check_ragged_transpose(int64_t nb, int64_t r, int64_t w, kiln_dtype dt, int *skews, int *streams) {
  kiln_scope_begin();
  int64_t n = (nb ? nb : 1) * r * w, as[3] = {nb, w, r};
  bool ints = dt == KILN_I32;
  double sa = ints ? 1 : 0.125, sb = ints ? 3 : 0.5; /* exact in dt */
  kiln_tensor *a = kiln_to_dtype(nb ? ramp(3, as, sa) : ramp(2, as + 1, sa), dt);
  kiln_tensor *b = kiln_to_dtype(ramp(1, (int64_t[]){w}, sb), dt);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){a, b}, 2), KILN_OK);
  kiln_tensor *y = kiln_add(nb ? kiln_transpose(a, 1, 2) : kiln_t(a), kiln_unsqueeze(b, 0));
  count_flags(y, skews, streams);
  double *exact = malloc(sizeof(double) * (size_t)n), *want = malloc(sizeof(double) * (size_t)n);
  double *got = malloc(sizeof(double) * (size_t)n);
  for (int64_t q = 0; q < (nb ? nb : 1); q++)
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < w; j++)
        exact[(q * r + i) * w + j] = (double)((q * w + j) * r + i) * sa + (double)j * sb;
  int64_t ys[3] = {nb, r, w};
  kiln_tensor *wt = kiln_to_dtype(kiln_from_data(KILN_F64, nb ? 3 : 2, nb ? ys : ys + 1, exact), dt);
  assert_int_equal(kiln_read(kiln_to_dtype(wt, KILN_F64), want, sizeof(double) * (size_t)n), KILN_OK);
  assert_int_equal(kiln_read(kiln_to_dtype(y, KILN_F64), got, sizeof(double) * (size_t)n), KILN_OK);
  for (int64_t e = 0; e < n; e++)
    if (got[e] != want[e]) fail_msg("[%lld, %lld, %lld] %s: element %lld is %g, want %g", (long long)nb, (long long)r,
                                    (long long)w, kiln_dtype_name(dt), (long long)e, got[e], want[e]);
  free(exact);
  free(want);
  free(got);
  kiln_scope_end();
}

/* A transposed read with a last dim that is not a multiple of KIR_TILE
 * is lowered in skewed tiles (passes/lower.c lower_skewed) plus edge
 * loops: every element right, ragged in either or both dims, batched,
 * F32/F64/F16/I32; a large output streams its stores. */
static void ragged_transpose_skews_tiles(void **state) {
  rt_set_fusion(1);
  static const struct { int64_t nb, r, w; kiln_dtype dt; } cases[] = {
      {0, 33, 47, KILN_F32},  {0, 47, 33, KILN_F32}, {0, 32, 33, KILN_F32},  {0, 100, 100, KILN_F64},
      {0, 63, 1001, KILN_F32}, {0, 40, 50, KILN_F16}, {3, 37, 51, KILN_F32}, {2, 64, 33, KILN_F64},
      {2, 517, 95, KILN_F32},  {0, 50, 77, KILN_I32},  {0, 1500, 1501, KILN_F32},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int skews, streams;
    check_ragged_transpose(cases[c].nb, cases[c].r, cases[c].w, cases[c].dt, &skews, &streams);
    assert_int_equal(skews, 1);
    if (cases[c].r == 1500) assert_int_equal(streams, 1); /* 9 MB: the tile's store streams, the edges' do not */
  }
  int skews, streams; /* a last dim that is a multiple of the tile: plain tiles, streaming */
  check_ragged_transpose(0, 1501, 1504, KILN_F32, &skews, &streams);
  assert_int_equal(skews, 0);
  assert_int_equal(streams, 1);
  rt_set_fusion(-1);
}

/* The optimised LLVM IR of t's kernel (malloc'ed; the caller frees it). */
static char *lowered_ir(kiln_tensor *t) {
  kir_kernel k;
  lower_for_test(t, &k);
  char err[256] = "", *ir = NULL;
  llvm_kernel_fn fn = NULL;
  assert_int_equal(llvm_compile(&k, &fn, &ir, err, sizeof err), KILN_OK);
  kir_free(&k);
  return ir;
}

/* The optimised LLVM IR of the kernel of a.T + b[None, :], a [w, r]
 * (malloc'ed; the caller frees it). */
static char *transpose_ir(int64_t r, int64_t w) {
  kiln_tensor *a = ramp(2, (int64_t[]){w, r}, 1), *b = ramp(1, (int64_t[]){w}, 1);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){a, b}, 2), KILN_OK);
  return lowered_ir(kiln_add(kiln_t(a), kiln_unsqueeze(b, 0)));
}

/* A skewed tile's kernel tells LLVM its buffers and its staged blocks
 * are distinct (scoped no-alias metadata, codegen_llvm/llvm_lower.c
 * distinct_params), so the tile's rows need no run-time overlap check
 * and no scalar copy; so does a plain tile's, whose output is a fresh
 * buffer (kir_mark_fresh_outputs). A write in place (an ASSIGN: its
 * buffer may be one it reads) gets no such metadata, and a kernel that
 * writes fresh buffers runs a short row (a 2x2 pooling window's taps at
 * stride 2) without overlap checks. */
static void distinct_buffers_have_no_overlap_checks(void **state) {
  (void)state;
  rt_set_fusion(1);
  kiln_scope_begin();
  char *ir = transpose_ir(1500, 1501); /* 9 MB: the tile's stores stream */
  assert_true(count_text(ir, "!noalias") > 0);
  assert_int_equal(count_text(ir, "diff.check"), 0); /* the loop vectoriser's overlap checks */
  assert_int_equal(count_text(ir, "conflict"), 0);
  assert_true(count_text(ir, "!nontemporal") > 0);
  free(ir);
  ir = transpose_ir(1501, 1504); /* a multiple of the tile: plain tiles */
  assert_true(count_text(ir, "!noalias") > 0);
  free(ir);

  kiln_tensor *x = ramp(4, (int64_t[]){8, 4, 14, 28}, 1), *y = ramp(4, (int64_t[]){8, 4, 14, 28}, 1);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){x, y}, 2), KILN_OK);
  int64_t sz[4] = {8, 4, 14, 14}, st[4] = {4 * 14 * 28, 14 * 28, 28, 2};
  ir = lowered_ir(kiln_add(kiln_as_strided(x, 4, sz, st, 0), kiln_as_strided(x, 4, sz, st, 1)));
  assert_true(count_text(ir, "!noalias") > 0);
  assert_int_equal(count_text(ir, "diff.check"), 0);
  free(ir);
  assert_int_equal(kiln_add_(y, x), KILN_OK);
  ir = lowered_ir(y);
  assert_int_equal(count_text(ir, "!noalias"), 0);
  free(ir);
  kiln_scope_end();
  rt_set_fusion(-1);
}

/* A convolution's GEMM writes [C, N, H·W]; its consumers read it as
 * [N, C, H, W] (a permuted view). The elementwise kernel then loops C
 * outside N, so the product is read in its own order (passes/loop_order.c),
 * while the output is still [N, C, H, W]. With C too short to split over
 * the pool (and shorter than N), the root's order stays. Values against a
 * host loop. */
static void permuted_reads_reorder_loops(void **state) {
  enum { C = 20, N = 24, HW = 12 };
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_tensor *prod = ramp(3, (int64_t[]){C, N, HW}, 1);
  kiln_tensor *bias = ramp(2, (int64_t[]){C, 1}, 100);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){prod, bias}, 2), KILN_OK);
  kiln_tensor *y = kiln_relu(kiln_add(kiln_transpose(prod, 0, 1), bias)); /* [N, C, HW] */
  expect_loops(y, 3, (int64_t[]){C, N, HW});
  static float got[N * C * HW];
  read_all(y, got, N * C * HW);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int i = 0; i < HW; i++)
        assert_float_equal(got[(n * C + c) * HW + i], (float)((c * N + n) * HW + i) + 100.0f * (float)c, 0);
  kiln_tensor *few = ramp(3, (int64_t[]){3, N, HW}, 1); /* C = 3 < 16: N stays the parallel loop */
  assert_int_equal(kiln_realize(few), KILN_OK);
  kiln_tensor *z = kiln_neg(kiln_transpose(few, 0, 1));
  expect_loops(z, 3, (int64_t[]){N, 3, HW});
  read_all(z, got, N * 3 * HW);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < 3; c++)
      for (int i = 0; i < HW; i++) assert_float_equal(got[(n * 3 + c) * HW + i], -(float)((c * N + n) * HW + i), 0);
  kiln_scope_end();
  rt_set_fusion(-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(transposed_write_is_unit_stride),
      cmocka_unit_test(contiguous_merges_to_one_loop), cmocka_unit_test(broadcast_keeps_its_dim),
      cmocka_unit_test(strided_reads_keep_dims),       cmocka_unit_test(size_one_dims_drop),
      cmocka_unit_test(non_pointwise_group_unchanged), cmocka_unit_test(reduction_dims_merge),
      cmocka_unit_test(reshaped_producer_merges),
      cmocka_unit_test(split_dim_reads_without_division), cmocka_unit_test(ragged_transpose_skews_tiles),
      cmocka_unit_test(distinct_buffers_have_no_overlap_checks), cmocka_unit_test(split_producer_refines_loops),
      cmocka_unit_test(permuted_reads_reorder_loops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
