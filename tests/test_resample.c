/*
 * test_resample.c — kiln_adaptive_avg_pool, kiln_adaptive_max_pool
 * (nn/adaptive_pool.c) and kiln_interpolate (nn/interpolate.c): values
 * against references written here from Torch's index formulas (adaptive
 * windows floor(o * in / out) .. ceil((o + 1) * in / out); bilinear with
 * and without align_corners), F16 computing in F32, and gradient checks
 * (grad_check.h) through non-contiguous inputs.
 * tests/python/test_resample_torch.py compares with Torch 1.13;
 * tests/CMakeLists.txt runs this program again with KILN_FUSE=0.
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
#include "rt_internal.h"
#include "test_util.h"
#include "grad_check.h"

enum { H = 5, W = 7 };

/* adaptive pooling of a [H, W] plane to [oh, ow], reference */
static void ref_adaptive(const double *x, int oh, int ow, bool max, double *y) {
  for (int i = 0; i < oh; i++)
    for (int j = 0; j < ow; j++) {
      int h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh, w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
      double acc = max ? -INFINITY : 0;
      for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) acc = max ? fmax(acc, x[h * W + w]) : acc + x[h * W + w];
      y[i * ow + j] = max ? acc : acc / ((h1 - h0) * (w1 - w0));
    }
}

/* bilinear source coordinate (Torch's area_pixel_compute_source_index) */
static double src_of(int dst, int in, int out, bool align) {
  if (align) return out > 1 ? (double)dst * (in - 1) / (out - 1) : 0;
  double s = (double)in / out * (dst + 0.5) - 0.5;
  return s < 0 ? 0 : s;
}

static void ref_bilinear(const double *x, int oh, int ow, bool align, double *y) {
  for (int i = 0; i < oh; i++)
    for (int j = 0; j < ow; j++) {
      double sh = src_of(i, H, oh, align), sw = src_of(j, W, ow, align);
      int h0 = (int)sh, w0 = (int)sw, h1 = h0 < H - 1 ? h0 + 1 : h0, w1 = w0 < W - 1 ? w0 + 1 : w0;
      double a = sh - h0, b = sw - w0;
      y[i * ow + j] = (1 - a) * ((1 - b) * x[h0 * W + w0] + b * x[h0 * W + w1]) +
                      a * ((1 - b) * x[h1 * W + w0] + b * x[h1 * W + w1]);
    }
}

static void values(void **state) {
  (void)state;
  kiln_scope_begin();
  double x[H * W], want[16 * 16];
  uint64_t seed = 5;
  for (int i = 0; i < H * W; i++) x[i] = gc_uniform(&seed, -3, 3);
  kiln_tensor *t = kiln_from_data(KILN_F64, 4, (int64_t[]){1, 1, H, W}, x);
  int outs[][2] = {{1, 1}, {2, 3}, {3, 4}, {5, 7}, {7, 9}, {4, 2}};
  for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
    int oh = outs[k][0], ow = outs[k][1];
    int64_t os[2] = {oh, ow};
    for (int m = 0; m < 2; m++) {
      ref_adaptive(x, oh, ow, m, want);
      kiln_tensor *y = m ? kiln_adaptive_max_pool(t, 2, os) : kiln_adaptive_avg_pool(t, 2, os);
      assert_int_equal(kiln_size(y, 2), oh);
      expect_values_tol(y, want, oh * ow, 1e-14);
    }
    for (int align = 0; align < 2; align++) {
      ref_bilinear(x, oh, ow, align, want);
      expect_values_tol(kiln_interpolate(t, 2, os, NULL, KILN_INTERP_LINEAR, align), want, oh * ow, 1e-14);
    }
  }
  /* nearest, doubling: each pixel twice along each dim */
  kiln_tensor *up = kiln_interpolate(t, 2, NULL, (double[]){2, 2}, KILN_INTERP_NEAREST, false);
  double got[4 * H * W];
  assert_int_equal(kiln_read(up, got, sizeof got), KILN_OK);
  for (int i = 0; i < 2 * H; i++)
    for (int j = 0; j < 2 * W; j++) assert_true(got[i * 2 * W + j] == x[(i / 2) * W + j / 2]);
  /* F16 keeps its dtype and computes in F32 */
  kiln_tensor *t16 = kiln_to_dtype(t, KILN_F16);
  kiln_tensor *y16 = kiln_adaptive_avg_pool(t16, 2, (int64_t[]){2, 3});
  assert_int_equal(kiln_dtype_of(y16), KILN_F16);
  double x16[H * W];
  assert_int_equal(kiln_read(kiln_to_dtype(t16, KILN_F64), x16, sizeof x16), KILN_OK);
  ref_adaptive(x16, 2, 3, false, want);
  expect_values_tol(y16, want, 6, 2e-3);
  /* an unbatched [C, *] input pools too; equal sizes give a copy */
  kiln_tensor *c = kiln_view(t, 3, (int64_t[]){1, H, W});
  kiln_tensor *same = kiln_adaptive_max_pool(c, 2, (int64_t[]){H, W});
  assert_int_equal(kiln_dim(same), 3);
  expect_values_tol(same, x, H * W, 0);
  expect_no_error();
  kiln_scope_end();
}

typedef struct rs_ctx {
  int kind; /* 0 avg, 1 max, 2 nearest, 3 linear, 4 linear align_corners */
  int64_t out[2];
} rs_ctx;

/* x[0] [W, H, 2] (transposed to [1, 2, H, W], non-contiguous) */
static kiln_tensor *rs_case(kiln_tensor *const *x, void *p) {
  const rs_ctx *c = p;
  kiln_tensor *in = gc_mark(kiln_unsqueeze(kiln_permute(x[0], 3, (int[]){2, 1, 0}), 0));
  switch (c->kind) {
  case 0: return kiln_adaptive_avg_pool(in, 2, c->out);
  case 1: return kiln_adaptive_max_pool(in, 2, c->out);
  case 2: return kiln_interpolate(in, 2, c->out, NULL, KILN_INTERP_NEAREST, false);
  default: return kiln_interpolate(in, 2, c->out, NULL, KILN_INTERP_LINEAR, c->kind == 4);
  }
}

static void grads(void **state) {
  (void)state;
  uint64_t seed = 23;
  int64_t xs[3] = {W, H, 2};
  int64_t outs[][2] = {{2, 3}, {3, 5}, {7, 9}, {1, 1}};
  /* under cuda-emu every new kernel costs NVRTC: one size per kind there */
  size_t n_outs = gc_all_modes() ? sizeof outs / sizeof outs[0] : 1;
  for (int kind = 0; kind <= 4; kind++)
    for (size_t k = 0; k < n_outs; k++) {
      rs_ctx c = {kind, {outs[k][0], outs[k][1]}};
      gc_input in = gc_in(&seed, 3, xs, -2, 2);
      char name[64];
      snprintf(name, sizeof name, "resample kind %d to [%lld, %lld]", kind, (long long)c.out[0], (long long)c.out[1]);
      gc_check(name, rs_case, &c, &in, 1, seed);
    }
}

static void report(void **state) {
  (void)state;
  gc_report("test_resample");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(values),
      cmocka_unit_test(grads),
      cmocka_unit_test(report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
