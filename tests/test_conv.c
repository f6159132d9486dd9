/*
 * test_conv.c — kiln_conv and kiln_conv_transpose: values against a
 * direct host loop (1-, 2- and 3-D; stride, padding, dilation, groups,
 * depthwise; strided and transposed inputs; unbatched input), the
 * transpose as the adjoint of the convolution (<conv(x), y> =
 * <x, conv_transpose(y)>), gradients by central differences
 * (grad_check.h, also with fusion switched), and the errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "autograd.h"
#include "test_util.h"
#include "grad_check.h"
#include "rt_internal.h"

static uint64_t seed = 12345;

/* A conv problem: sizes and parameters (nd spatial dims). */
typedef struct conv_case {
  int nd;
  int64_t n, c, o, s[3], k[3], stride[3], pad[3], dil[3], groups;
} conv_case;

static int64_t out_size(const conv_case *p, int i) {
  return (p->s[i] + 2 * p->pad[i] - p->dil[i] * (p->k[i] - 1) - 1) / p->stride[i] + 1;
}

static int64_t spatial(const int64_t *v, int nd) {
  int64_t r = 1;
  for (int i = 0; i < nd; i++) r *= v[i];
  return r;
}

/* Every (output element, weight tap) product of case p in double, over
 * host loops: forward (dw NULL), y [N, O, *Out] (row-major) = bias +
 * sum of x times w; else the weight gradient, dw [O, C/G, *K] += g
 * (y's place, read) times the input element the tap read. */
static void host_walk(const conv_case *p, const double *x, const double *w, const double *b, double *y, double *dw) {
  int nd = p->nd;
  int64_t out[3] = {1, 1, 1}, s[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pd[3] = {0}, dl[3] = {1, 1, 1};
  for (int i = 0; i < nd; i++) out[i] = out_size(p, i), s[i] = p->s[i], k[i] = p->k[i], st[i] = p->stride[i], pd[i] = p->pad[i], dl[i] = p->dil[i];
  int64_t cg = p->c / p->groups, og = p->o / p->groups, so = spatial(out, 3), ss = spatial(s, 3), sk = spatial(k, 3);
  for (int64_t n = 0; n < p->n; n++)
    for (int64_t o = 0; o < p->o; o++)
      for (int64_t q = 0; q < so; q++) {
        int64_t oz = q % out[2], oy = q / out[2] % out[1], ox = q / out[2] / out[1];
        double *yq = &y[(n * p->o + o) * so + q], acc = b ? b[o] : 0;
        for (int64_t c = 0; c < cg; c++)
          for (int64_t r = 0; r < sk; r++) {
            int64_t kz = r % k[2], ky = r / k[2] % k[1], kx = r / k[2] / k[1];
            int64_t ix = ox * st[0] - pd[0] + kx * dl[0], iy = oy * st[1] - pd[1] + ky * dl[1], iz = oz * st[2] - pd[2] + kz * dl[2];
            if (ix < 0 || ix >= s[0] || iy < 0 || iy >= s[1] || iz < 0 || iz >= s[2]) continue;
            double xv = x[(n * p->c + o / og * cg + c) * ss + (ix * s[1] + iy) * s[2] + iz];
            if (dw) dw[(o * cg + c) * sk + r] += *yq * xv;
            else acc += xv * w[(o * cg + c) * sk + r];
          }
        if (!dw) *yq = acc;
      }
}

/* Direct convolution in double: y [N, O, *Out] (row-major). */
static void host_conv(const conv_case *p, const double *x, const double *w, const double *b, double *y) {
  host_walk(p, x, w, b, y, NULL);
}

static double *randoms(int64_t n) {
  double *v = malloc(sizeof *v * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = gc_uniform(&seed, -1, 1);
  return v;
}

static kiln_tensor *from(int ndim, const int64_t *sizes, const double *v) { return kiln_from_data(KILN_F64, ndim, sizes, v); }

/* kiln_conv of case p against host_conv, computed in dtype dt (F32: the
 * inputs rounded to F32, the result within 1e-4 of the F64 reference). */
static void check_case_in(const conv_case *p, bool with_bias, kiln_dtype dt) {
  int nd = p->nd;
  int64_t xs[5] = {p->n, p->c}, ws[5] = {p->o, p->c / p->groups}, ys[5] = {p->n, p->o};
  for (int i = 0; i < nd; i++) xs[2 + i] = p->s[i], ws[2 + i] = p->k[i], ys[2 + i] = out_size(p, i);
  int64_t nx = p->n * p->c * spatial(p->s, nd), nw = p->o * p->c / p->groups * spatial(p->k, nd);
  int64_t ny = p->n * p->o, out[3];
  for (int i = 0; i < nd; i++) out[i] = out_size(p, i);
  ny *= spatial(out, nd);
  double *x = randoms(nx), *w = randoms(nw), *b = randoms(p->o), *want = malloc(sizeof *want * (size_t)ny);
  double *got = malloc(sizeof *got * (size_t)ny);
  host_conv(p, x, w, with_bias ? b : NULL, want);
  kiln_scope_begin();
  kiln_tensor *tx = kiln_to_dtype(from(nd + 2, xs, x), dt), *tw = kiln_to_dtype(from(nd + 2, ws, w), dt);
  kiln_tensor *tb = with_bias ? kiln_to_dtype(from(1, &p->o, b), dt) : NULL;
  kiln_tensor *y = kiln_to_dtype(kiln_conv(tx, tw, tb, nd, p->stride, p->pad, p->dil, p->groups), KILN_F64);
  assert_non_null(y);
  assert_int_equal(kiln_dim(y), nd + 2);
  for (int d = 0; d < nd + 2; d++) assert_int_equal(kiln_size(y, d), ys[d]);
  assert_int_equal(kiln_read(y, got, sizeof *got * (size_t)ny), KILN_OK);
  for (int64_t i = 0; i < ny; i++) assert_float_equal(got[i], want[i], dt == KILN_F64 ? 1e-12 : 1e-4);
  kiln_scope_end();
  free(x), free(w), free(b), free(want), free(got);
}

static void check_case(const conv_case *p, bool with_bias) { check_case_in(p, with_bias, KILN_F64); }

static void values_against_host_loop(void **state) {
  conv_case cases[] = {
      {1, 2, 3, 4, {9}, {3}, {1}, {0}, {1}, 1},
      {1, 3, 4, 6, {11}, {3}, {2}, {2}, {2}, 2},
      {2, 2, 3, 5, {7, 6}, {3, 2}, {1, 1}, {1, 0}, {1, 1}, 1},
      {2, 1, 4, 4, {8, 9}, {3, 3}, {2, 1}, {1, 2}, {1, 2}, 4}, /* depthwise */
      {2, 2, 6, 4, {5, 5}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 2},
      {3, 1, 2, 3, {5, 4, 6}, {2, 3, 2}, {1, 2, 1}, {1, 1, 0}, {1, 1, 2}, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    check_case(&cases[i], true);
    check_case(&cases[i], false);
  }
}

/* The implicit GEMM's edges (runtime/gemm_pack.c: the generated GEMM
 * packs the columns from the padded input): K = C/G·ΠK and N·ΠOut that
 * are multiples of no block size and span several KC and NC blocks
 * (333 and 6,345; M = 5 ≤ K, so plan_prefetch cuts NC to a quarter of
 * L2 for the window view's B), padding wider than the kernel, batch 1, 1-D with
 * stride and dilation, 3-D with groups; in F64 and F32 (the run copies'
 * 64-byte moves and masked tails: output rows of 45, 6 and 5). */
static void implicit_gemm_edges(void **state) {
  (void)state;
  conv_case cases[] = {
      {2, 3, 37, 5, {47, 45}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {2, 1, 3, 7, {5, 6}, {2, 2}, {1, 1}, {3, 4}, {1, 1}, 1},
      {1, 1, 5, 3, {200}, {5}, {3}, {2}, {2}, 1},
      {3, 2, 4, 6, {6, 5, 7}, {3, 2, 3}, {1, 1, 2}, {2, 1, 3}, {1, 2, 1}, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    check_case(&cases[i], true);
    check_case(&cases[i], false);
    check_case_in(&cases[i], true, KILN_F32);
  }
  /* K = 576 in one KC block of 640: the run copies' rows past the
   * offsets a call shares (KCHUNK, 512) */
  conv_case deep = {2, 1, 64, 3, {9, 20}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
  rt_gemm_set_blocking(0, 640, 0);
  check_case_in(&deep, true, KILN_F32);
  check_case(&deep, false);
  rt_gemm_set_blocking(0, 0, 0);
}

/* The weight gradient (kiln_grad of conv) through the implicit GEMM's
 * transposed panels (gemm_pack.c: B is the window view read along the
 * output positions, its lines the weight taps), against host_walk:
 * 45 and 36 taps (F32 panels of 32 lines on AVX-512, 16 on AVX2: the
 * transposes 16 lines at a time, then 8, the rest in SSE2 blocks), output rows of 14 (a
 * partial 16-element block) and 40 (16 + 16 + 8), groups, a 1-D row of
 * 100; F32 within 2e-3 of the double sums (up to 1,200 products), F64
 * within 1e-10. */
static void weight_gradient_panels(void **state) {
  (void)state;
  conv_case cases[] = {
      {2, 3, 5, 7, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {2, 2, 4, 3, {9, 40}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {2, 2, 8, 4, {6, 20}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
      {1, 2, 6, 4, {100}, {3}, {1}, {1}, {1}, 1},
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
    for (int d = 0; d < 2; d++) {
      const conv_case *p = &cases[t];
      kiln_dtype dt = d ? KILN_F64 : KILN_F32;
      int nd = p->nd;
      int64_t xs[5] = {p->n, p->c}, ws[5] = {p->o, p->c / p->groups}, ys[5] = {p->n, p->o}, out[3];
      for (int i = 0; i < nd; i++) xs[2 + i] = p->s[i], ws[2 + i] = p->k[i], ys[2 + i] = out[i] = out_size(p, i);
      int64_t nx = p->n * p->c * spatial(p->s, nd), nw = p->o * p->c / p->groups * spatial(p->k, nd);
      int64_t ny = p->n * p->o * spatial(out, nd);
      double *x = randoms(nx), *w = randoms(nw), *g = randoms(ny), *want = malloc(sizeof *want * (size_t)nw);
      double *got = malloc(sizeof *got * (size_t)nw);
      if (!d) /* the reference from the F32 values the product reads */
        for (int64_t i = 0; i < nx; i++) x[i] = (float)x[i];
      if (!d)
        for (int64_t i = 0; i < ny; i++) g[i] = (float)g[i];
      for (int64_t i = 0; i < nw; i++) want[i] = 0;
      host_walk(p, x, NULL, NULL, g, want);
      kiln_scope_begin();
      kiln_tensor *tx = kiln_to_dtype(from(nd + 2, xs, x), dt), *tw = kiln_to_dtype(from(nd + 2, ws, w), dt);
      kiln_tensor *tg = kiln_to_dtype(from(nd + 2, ys, g), dt);
      kiln_tensor *y = kiln_conv(tx, tw, NULL, nd, p->stride, p->pad, p->dil, p->groups), *dw = NULL;
      assert_int_equal(kiln_grad(&y, &tg, 1, &tw, 1, &dw), KILN_OK);
      assert_int_equal(kiln_read(kiln_to_dtype(dw, KILN_F64), got, sizeof *got * (size_t)nw), KILN_OK);
      for (int64_t i = 0; i < nw; i++) assert_float_equal(got[i], want[i], d ? 1e-10 : 2e-3);
      kiln_scope_end();
      free(x), free(w), free(g), free(want), free(got);
    }
}

/* Strided windows packed as B in F32 (gemm_pack.c's lines that are one
 * element each: 2 apart along an output row of at least a panel through
 * SSE shuffles, others element by element): ResNet's 7x7 stride-2 stem
 * (output rows of 40), a 1x1 stride-2 downsample, stride 3, and rows of
 * output positions shorter than a panel. */
static void strided_windows_f32(void **state) {
  (void)state;
  conv_case cases[] = {
      {2, 2, 3, 8, {24, 80}, {7, 7}, {2, 2}, {3, 3}, {1, 1}, 1},
      {2, 2, 16, 8, {14, 14}, {1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},
      {2, 1, 2, 5, {29, 31}, {3, 3}, {3, 3}, {1, 1}, {1, 1}, 1},
      {1, 2, 4, 6, {23}, {3}, {2}, {1}, {1}, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    check_case_in(&cases[i], true, KILN_F32);
    check_case_in(&cases[i], false, KILN_F64);
  }
}

/* Which kernels a conv's forward and weight gradient ran: with fusion
 * on and the generated GEMM (KILN_GEMM unset, auto or jit) neither the
 * im2col copy nor the output gradient's copy as [G, O/G, N·ΠOut]
 * (`C_cast_...` kernels) is written and the products are `gemm_` (llvm);
 * with KILN_GEMM=blas or KILN_FUSE=0 the copies run as kernels, and the
 * values are checked against the host loop in every configuration. */
static void implicit_gemm_writes_no_columns(void **state) {
  (void)state;
  const char *mode = getenv("KILN_GEMM"), *fuse = getenv("KILN_FUSE");
  bool blas = mode && strcmp(mode, "blas") == 0, unfused = fuse && strcmp(fuse, "0") == 0;
  kiln_scope_begin();
  kiln_tensor *x = kiln_randn(KILN_F32, 4, (const int64_t[]){2, 3, 12, 10});
  kiln_tensor *w = kiln_randn(KILN_F32, 4, (const int64_t[]){8, 3, 3, 3});
  kiln_realize(x), kiln_realize(w);
  kiln_profile_begin();
  kiln_tensor *y = kiln_conv(x, w, NULL, 2, NULL, (const int64_t[]){1, 1}, NULL, 1);
  kiln_tensor *gw = NULL;
  assert_int_equal(kiln_grad(&y, &y, 1, &w, 1, &gw), KILN_OK); /* d/dw of |y|²/2 */
  kiln_tensor *both[2] = {y, gw};
  assert_int_equal(kiln_realize_many(both, 2), KILN_OK);
  kiln_profile_end();
  int casts = 0, gemms = 0;
  for (int i = 0; i < kiln_profile_count(); i++) {
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    /* the columns [27, 240], or y's gradient as [8, 240] (the weight's
     * gradient itself is a copy to w's sizes, 216 elements) */
    casts += strncmp(r.name, "C_cast", 6) == 0 && (r.numel == 27 * 240 || r.numel == 8 * 240);
    gemms += strncmp(r.name, "gemm_", 5) == 0 && strcmp(r.backend, "llvm") == 0;
  }
  if (blas || unfused) {
    assert_true(casts >= 1);
  } else {
    assert_int_equal(casts, 0);
    assert_int_equal(gemms, 2);
  }
  /* y against the host loop, in double */
  conv_case p = {2, 2, 3, 8, {12, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
  float xf[2 * 3 * 120], wf[8 * 27], yf[2 * 8 * 120];
  double xd[2 * 3 * 120], wd[8 * 27], yd[2 * 8 * 120];
  assert_int_equal(kiln_read(x, xf, sizeof xf), KILN_OK);
  assert_int_equal(kiln_read(w, wf, sizeof wf), KILN_OK);
  assert_int_equal(kiln_read(y, yf, sizeof yf), KILN_OK);
  for (size_t i = 0; i < sizeof xf / sizeof *xf; i++) xd[i] = xf[i];
  for (size_t i = 0; i < sizeof wf / sizeof *wf; i++) wd[i] = wf[i];
  host_conv(&p, xd, wd, NULL, yd);
  for (size_t i = 0; i < sizeof yf / sizeof *yf; i++) assert_float_equal(yf[i], yd[i], 1e-4);
  kiln_scope_end();
}

/* The output gradient of relu(conv(x, w, b)) — an elementwise chain,
 * NCHW — is written once, as the reshape copy [O, N·ΠOut] both GEMMs
 * of the backward read (fuse.c, packs_through; conv.c adds the bias
 * before the NCHW view, so the bias gradient is that copy's row sum):
 * one C_ kernel of its size and no E_ kernel of it, and the weight and
 * bias gradients against the host loop in double (F64: no mask sign
 * can differ from the reference's). */
static void output_gradient_in_gemm_layout(void **state) {
  (void)state;
  const char *mode = getenv("KILN_GEMM"), *fuse = getenv("KILN_FUSE");
  bool structure = !(mode && strcmp(mode, "blas") == 0) && !(fuse && strcmp(fuse, "0") == 0);
  conv_case p = {2, 3, 4, 6, {10, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
  int64_t xs[4] = {3, 4, 10, 9}, ws[4] = {6, 4, 3, 3}, ys[4] = {3, 6, 10, 9}, o = 6;
  int64_t nx = 3 * 4 * 90, nw = 6 * 4 * 9, ny = 3 * 6 * 90;
  double *x = randoms(nx), *w = randoms(nw), *b = randoms(o), *g = randoms(ny), *pre = malloc(sizeof *pre * (size_t)ny);
  double *gm = malloc(sizeof *gm * (size_t)ny), want_dw[6 * 4 * 9] = {0}, want_db[6] = {0}, got_dw[6 * 4 * 9], got_db[6];
  host_conv(&p, x, w, b, pre);
  for (int64_t i = 0; i < ny; i++) {
    gm[i] = pre[i] > 0 ? g[i] : 0;
    want_db[i / 90 % 6] += gm[i];
  }
  host_walk(&p, x, NULL, NULL, gm, want_dw);
  kiln_scope_begin();
  kiln_tensor *tx = from(4, xs, x), *tw = from(4, ws, w), *tb = from(1, &o, b), *tg = from(4, ys, g);
  kiln_tensor *y = kiln_relu(kiln_conv(tx, tw, tb, 2, p.stride, p.pad, p.dil, 1));
  kiln_tensor *wrt[3] = {tx, tw, tb}, *grads[3] = {NULL, NULL, NULL};
  assert_int_equal(kiln_grad(&y, &tg, 1, wrt, 3, grads), KILN_OK);
  kiln_profile_begin();
  assert_int_equal(kiln_realize_many(grads, 3), KILN_OK);
  kiln_profile_end();
  int copies = 0, elementwise = 0;
  for (int i = 0; i < kiln_profile_count(); i++) {
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    copies += r.numel == ny && strncmp(r.name, "C_", 2) == 0;
    elementwise += r.numel == ny && strncmp(r.name, "E_", 2) == 0;
  }
  if (structure) {
    assert_int_equal(copies, 1);
    assert_int_equal(elementwise, 0);
  }
  assert_int_equal(kiln_read(grads[1], got_dw, sizeof got_dw), KILN_OK);
  assert_int_equal(kiln_read(grads[2], got_db, sizeof got_db), KILN_OK);
  for (int64_t i = 0; i < nw; i++) assert_float_equal(got_dw[i], want_dw[i], 1e-10);
  for (int64_t i = 0; i < o; i++) assert_float_equal(got_db[i], want_db[i], 1e-10);
  kiln_scope_end();
  free(x), free(w), free(b), free(g), free(pre), free(gm);
}

/* A transposed (non-contiguous) input and weight, and an unbatched input
 * [C, *S] giving [O, *Out]. */
static void strided_and_unbatched(void **state) {
  kiln_scope_begin();
  double xv[2 * 5 * 6], wv[3 * 2 * 3 * 3];
  for (int i = 0; i < 60; i++) xv[i] = gc_uniform(&seed, -1, 1);
  for (int i = 0; i < 54; i++) wv[i] = gc_uniform(&seed, -1, 1);
  kiln_tensor *x = kiln_from_data(KILN_F64, 3, (int64_t[]){2, 5, 6}, xv); /* [C, H, W] */
  kiln_tensor *w = kiln_from_data(KILN_F64, 4, (int64_t[]){3, 2, 3, 3}, wv);
  int64_t pad[] = {1, 1};
  kiln_tensor *y = kiln_conv(x, w, NULL, 2, NULL, pad, NULL, 1);
  assert_non_null(y);
  assert_int_equal(kiln_dim(y), 3);
  /* the same input as a transposed view of a [C, W, H] tensor */
  kiln_tensor *xt = kiln_contiguous(kiln_transpose(x, 1, 2));
  kiln_tensor *wt = kiln_contiguous(kiln_transpose(w, 2, 3));
  kiln_tensor *y2 = kiln_conv(kiln_transpose(xt, 1, 2), kiln_transpose(wt, 2, 3), NULL, 2, NULL, pad, NULL, 1);
  assert_non_null(y2);
  double a[3 * 5 * 6], b2[3 * 5 * 6];
  assert_int_equal(kiln_read(y, a, sizeof a), KILN_OK);
  assert_int_equal(kiln_read(y2, b2, sizeof b2), KILN_OK);
  for (int i = 0; i < 90; i++) assert_float_equal(a[i], b2[i], 1e-12);
  /* against the host loop with a batch of one */
  conv_case p = {2, 1, 2, 3, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1};
  double want[90];
  host_conv(&p, xv, wv, NULL, want);
  for (int i = 0; i < 90; i++) assert_float_equal(a[i], want[i], 1e-12);
  kiln_scope_end();
}

/* <conv(x, w), y> == <x, conv_transpose(y, w)>: the transpose is the
 * adjoint, for strides, padding, dilation, groups and output padding
 * that restores x's size. */
static void transpose_is_adjoint(void **state) {
  conv_case cases[] = {
      {1, 2, 4, 6, {10}, {3}, {2}, {1}, {1}, 2},
      {2, 2, 3, 4, {7, 8}, {3, 2}, {2, 1}, {1, 0}, {1, 2}, 1},
      {3, 1, 2, 2, {5, 6, 4}, {2, 2, 3}, {1, 2, 1}, {0, 1, 1}, {2, 1, 1}, 2},
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    const conv_case *p = &cases[t];
    int nd = p->nd;
    int64_t xs[5] = {p->n, p->c}, ws[5] = {p->o, p->c / p->groups}, ys[5] = {p->n, p->o}, op[3] = {0};
    for (int i = 0; i < nd; i++) {
      xs[2 + i] = p->s[i], ws[2 + i] = p->k[i], ys[2 + i] = out_size(p, i);
      /* the size conv_transpose gives back, short of x's by op */
      int64_t back = (ys[2 + i] - 1) * p->stride[i] - 2 * p->pad[i] + p->dil[i] * (p->k[i] - 1) + 1;
      op[i] = p->s[i] - back;
    }
    int64_t nx = 1, ny = 1, nw = 1;
    for (int d = 0; d < nd + 2; d++) nx *= xs[d], ny *= ys[d], nw *= ws[d];
    double *x = randoms(nx), *w = randoms(nw), *y = randoms(ny);
    kiln_scope_begin();
    kiln_tensor *kw = from(nd + 2, ws, w);
    kiln_tensor *cx = kiln_conv(from(nd + 2, xs, x), kw, NULL, nd, p->stride, p->pad, p->dil, p->groups);
    kiln_tensor *ty = kiln_conv_transpose(from(nd + 2, ys, y), kw, NULL, nd, p->stride, p->pad, op, p->groups, p->dil);
    assert_non_null(cx);
    assert_non_null(ty);
    for (int d = 0; d < nd + 2; d++) assert_int_equal(kiln_size(ty, d), xs[d]);
    double lhs = kiln_item(kiln_sum(kiln_mul(cx, from(nd + 2, ys, y)), 0, NULL, false));
    double rhs = kiln_item(kiln_sum(kiln_mul(ty, from(nd + 2, xs, x)), 0, NULL, false));
    expect_no_error();
    assert_float_equal(lhs, rhs, 1e-10 * (1 + fabs(lhs)));
    kiln_scope_end();
    free(x), free(w), free(y);
  }
}

/* ------------------------------------------------------------ gradients */

static kiln_tensor *conv_fn(kiln_tensor *const *x, void *ctx) {
  const conv_case *p = ctx;
  return kiln_relu(kiln_conv(x[0], x[1], x[2], p->nd, p->stride, p->pad, p->dil, p->groups));
}

static kiln_tensor *conv_t_fn(kiln_tensor *const *x, void *ctx) {
  const conv_case *p = ctx;
  int64_t op[3] = {0};
  return kiln_conv_transpose(gc_mark(kiln_mul_scalar(x[0], 2)), x[1], x[2], p->nd, p->stride, p->pad, op, p->groups, p->dil);
}

static void gradients(void **state) {
  conv_case cases[] = {
      {1, 2, 2, 4, {7}, {3}, {2}, {1}, {1}, 2},
      {2, 2, 2, 3, {5, 4}, {3, 2}, {1, 1}, {1, 1}, {1, 1}, 1},
      {2, 1, 2, 2, {6, 5}, {2, 2}, {2, 1}, {0, 1}, {2, 1}, 2},
      {2, 1, 3, 2, {4, 3}, {2, 2}, {1, 2}, {3, 2}, {1, 1}, 1}, /* padding wider than the kernel, batch 1 */
  };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    const conv_case *p = &cases[t];
    int nd = p->nd;
    int64_t xs[5] = {p->n, p->c}, ws[5] = {p->o, p->c / p->groups};
    for (int i = 0; i < nd; i++) xs[2 + i] = p->s[i], ws[2 + i] = p->k[i];
    gc_input in[3] = {gc_in(&seed, nd + 2, xs, -1, 1), gc_in(&seed, nd + 2, ws, -1, 1), gc_in(&seed, 1, &p->o, -1, 1)};
    gc_check("conv", conv_fn, (void *)p, in, 3, 7 + t);
    /* the transpose: input [N, O, *Out] of the conv above, weight [O, C/G, *K] */
    int64_t ys[5] = {p->n, p->o}, tw[5] = {p->o, p->c / p->groups}, cb = p->c;
    for (int i = 0; i < nd; i++) ys[2 + i] = out_size(p, i), tw[2 + i] = p->k[i];
    gc_input tin[3] = {gc_in(&seed, nd + 2, ys, -1, 1), gc_in(&seed, nd + 2, tw, -1, 1), gc_in(&seed, 1, &cb, -1, 1)};
    gc_check("conv_transpose", conv_t_fn, (void *)p, tin, 3, 17 + t);
  }
  gc_report("test_conv");
}

/* ---------------------------------------------------------------- col2im */

/* grad_view_add (col2im: a conv's input gradient, conv_transpose) against
 * the sum it stands for, in F32 and in its order: zeros, then each
 * window offset's slice added in turn (offsets row-major over the window
 * dims). Exact: the one-kernel path (stride 1) sums in that order too;
 * stride 2 and a window view whose shifted reads would leave c's storage
 * take the per-offset path. */
static void col2im_sums_in_order(void **state) {
  (void)state;
  static const struct {
    int ndim;
    int64_t numel, offset, sizes[9], strides[9];
    uint32_t window;
  } cases[] = {
      /* (the channels are many enough, C·ΠK > 64, that grad_view_add's
       * window dims are the kernel's, the offsets this loop counts) */
      /* [N 2, C 8, 6, 6] as [G 1, C 8, K 3, K 3, N 2, 4, 4]: 3x3, pad 1 */
      {7, 576, 0, {1, 8, 3, 3, 2, 4, 4}, {288, 36, 6, 1, 288, 6, 1}, 0x0c},
      /* dilation 2: [N 1, C 8, 7, 7], K 3 -> out 3 */
      {7, 392, 0, {1, 8, 3, 3, 1, 3, 3}, {392, 49, 14, 2, 392, 7, 1}, 0x0c},
      /* stride 2 (the per-offset path): [N 2, C 8, 7, 7], K 3 -> out 3 */
      {7, 784, 0, {1, 8, 3, 3, 2, 3, 3}, {392, 49, 7, 1, 392, 14, 2}, 0x0c},
      /* 1-D, K 2: [N 2, C 1, 9] -> out 8 */
      {5, 18, 0, {1, 1, 2, 2, 8}, {9, 9, 1, 9, 1}, 0x04},
      /* unfold(0, 3, 1) of 6 (the window dim is the first, of 4) */
      {2, 6, 0, {4, 3}, {1, 1}, 0x01},
      /* 3-D, K 2x2x2: [N 1, C 1, 3, 4, 3] */
      {9, 36, 0, {1, 1, 2, 2, 2, 1, 2, 3, 2}, {36, 36, 12, 3, 1, 36, 12, 3, 1}, 0x1c},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    graph_view v = {.ndim = cases[k].ndim, .offset = cases[k].offset};
    memcpy(v.sizes, cases[k].sizes, sizeof cases[k].sizes); /* (the case's 9; the view holds KILN_MAX_DIMS) */
    memcpy(v.strides, cases[k].strides, sizeof cases[k].strides);
    int64_t n = graph_view_numel(&v), numel = cases[k].numel, idx[9];
    float *c = malloc(sizeof *c * (size_t)n), *want = calloc((size_t)numel, sizeof *want), got[1024];
    double *r = randoms(n);
    for (int64_t i = 0; i < n; i++) c[i] = (float)r[i];
    int64_t taps = 1;
    for (int d = 0; d < v.ndim; d++)
      if (cases[k].window & (1u << d)) taps *= v.sizes[d];
    for (int64_t t = 0; t < taps; t++)
      for (int64_t i = 0; i < n; i++) {
        int64_t rest = i, pos = v.offset, tap = 0;
        for (int d = v.ndim - 1; d >= 0; d--) idx[d] = rest % v.sizes[d], rest /= v.sizes[d];
        for (int d = 0; d < v.ndim; d++) {
          pos += idx[d] * v.strides[d];
          if (cases[k].window & (1u << d)) tap = tap * v.sizes[d] + idx[d];
        }
        if (tap == t) want[pos] += c[i];
      }
    kiln_scope_begin();
    kiln_tensor *ct = kiln_from_data(KILN_F32, v.ndim, v.sizes, c);
    kiln_tensor *z = grad_view_add(KILN_F32, numel, &v, ct, "test");
    assert_non_null(z);
    assert_int_equal(kiln_read(z, got, sizeof got), KILN_OK);
    for (int64_t i = 0; i < numel; i++)
      if (got[i] != want[i]) fail_msg("case %zu: element %lld is %.9g, the ordered sum is %.9g", k, (long long)i, got[i], want[i]);
    kiln_scope_end();
    free(c), free(want), free(r);
  }
  expect_no_error();
}

/* --------------------------------------------------------------- errors */

static void errors(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 4, (int64_t[]){1, 4, 5, 5});
  kiln_tensor *w = kiln_zeros(KILN_F32, 4, (int64_t[]){6, 2, 3, 3});
  int64_t one[] = {1, 1}, zero[] = {0, 0};
  assert_null(kiln_conv(x, w, NULL, 4, NULL, NULL, NULL, 2));
  expect_error(KILN_ERR_ARG, "kiln_conv", "nd must be 1, 2 or 3", NULL);
  assert_null(kiln_conv(x, w, NULL, 2, NULL, NULL, NULL, 0));
  expect_error(KILN_ERR_ARG, "groups must be positive", NULL);
  assert_null(kiln_conv(x, w, NULL, 2, zero, NULL, NULL, 2));
  expect_error(KILN_ERR_ARG, "stride must be positive", NULL);
  assert_null(kiln_conv(x, w, NULL, 2, NULL, (int64_t[]){-1, 0}, NULL, 2));
  expect_error(KILN_ERR_ARG, "padding must not be negative", NULL);
  assert_null(kiln_conv(x, w, NULL, 2, NULL, NULL, NULL, 3));
  expect_error(KILN_ERR_SHAPE, "does not fit 4 input channels in 3 groups", NULL);
  assert_null(kiln_conv(x, w, NULL, 2, NULL, NULL, NULL, 1));
  expect_error(KILN_ERR_SHAPE, "does not fit 4 input channels", NULL);
  assert_null(kiln_conv(x, w, kiln_zeros(KILN_F32, 1, (int64_t[]){5}), 2, NULL, NULL, NULL, 2));
  expect_error(KILN_ERR_SHAPE, "bias must be [6]", NULL);
  assert_null(kiln_conv(x, w, NULL, 2, NULL, NULL, (int64_t[]){3, 3}, 2));
  expect_error(KILN_ERR_SHAPE, "exceeds the padded input size 5", NULL);
  assert_null(kiln_conv(kiln_zeros(KILN_F32, 2, (int64_t[]){4, 5}), w, NULL, 2, NULL, NULL, NULL, 2));
  expect_error(KILN_ERR_SHAPE, "expected a 3-D (unbatched) or 4-D (batched) input", NULL);
  assert_null(kiln_conv(x, kiln_zeros(KILN_F64, 4, (int64_t[]){6, 2, 3, 3}), NULL, 2, NULL, NULL, NULL, 2));
  expect_error(KILN_ERR_DTYPE, "must have the same dtype", NULL);
  assert_null(kiln_conv(kiln_zeros(KILN_I32, 4, (int64_t[]){1, 4, 5, 5}), w, NULL, 2, NULL, NULL, NULL, 2));
  expect_error(KILN_ERR_DTYPE, "needs a float input", NULL);
  assert_null(kiln_conv(NULL, w, NULL, 2, NULL, NULL, NULL, 2));
  expect_error(KILN_ERR_ARG, "kiln_conv", NULL);
  assert_null(kiln_conv_transpose(x, kiln_zeros(KILN_F32, 4, (int64_t[]){4, 3, 3, 3}), NULL, 2, one, NULL, one, 1, one));
  expect_error(KILN_ERR_ARG, "output padding 1 must be smaller than either stride (1) or dilation (1)", NULL);
  assert_null(kiln_conv_transpose(x, w, NULL, 2, NULL, NULL, NULL, 1, NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_conv_transpose", "does not fit 4 input channels", NULL);
  /* the inputs stay usable */
  kiln_tensor *y = kiln_conv(x, w, NULL, 2, NULL, one, NULL, 2);
  assert_non_null(y);
  assert_int_equal(kiln_size(y, 1), 6);
  assert_int_equal(kiln_size(y, 2), 5);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(values_against_host_loop), cmocka_unit_test(strided_and_unbatched),
      cmocka_unit_test(transpose_is_adjoint),     cmocka_unit_test(gradients),
      cmocka_unit_test(col2im_sums_in_order),     cmocka_unit_test(errors),
      cmocka_unit_test(implicit_gemm_edges),      cmocka_unit_test(strided_windows_f32),
      cmocka_unit_test(weight_gradient_panels),
      cmocka_unit_test(implicit_gemm_writes_no_columns),
      cmocka_unit_test(output_gradient_in_gemm_layout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
