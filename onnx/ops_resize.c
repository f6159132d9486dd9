/*
 * ops_resize.c — ONNX's Resize (opsets 10 to 18) and Upsample (7 to 9):
 * nearest, linear and cubic interpolation as separable gathers.
 *
 * Each resized axis (any axis whose output size differs, or whose scale
 * is not 1) maps output coordinate x to a source coordinate x_ori by the
 * coordinate_transformation_mode (half_pixel, pytorch_half_pixel,
 * align_corners, asymmetric, tf_half_pixel_for_nn), then reads T taps
 * around it: T = 1 (nearest, by nearest_mode), 2 (linear) or 4 (cubic,
 * coefficient A, exclude_outside). The taps and their weights follow
 * ONNX's reference (onnx/backend/test/case/node/resize.py): base =
 * floor(x_ori) and ratio r = x_ori - base, with an integer x_ori taken as
 * base - 1 and r = 1; taps base - 1 .. base + 2 (cubic) or base, base + 1
 * (linear); indices past the edges read the edge (the reference pads in
 * 'edge' mode). The host computes, per axis, each tap's index [out] and
 * weight [out]; the result is the sum over taps of index_select along the
 * axis times the weight broadcast along it — lazy, fused with its
 * neighbours, and differentiable (a scatter-add). tf_crop_and_resize
 * (roi) and antialiasing are not supported.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

#define OP(name) static int op_##name(onnx_ctx *c, kiln_tensor **in, int n_in, kiln_tensor **out, int n_out)
#define UNUSED_ARGS (void)c, (void)n_in, (void)n_out

typedef enum { M_NEAREST, M_LINEAR, M_CUBIC } resize_mode;
typedef enum { C_HALF_PIXEL, C_PYTORCH_HALF_PIXEL, C_ALIGN_CORNERS, C_ASYMMETRIC, C_TF_HALF_PIXEL } coord_mode;
typedef enum { N_ROUND_PREFER_FLOOR, N_ROUND_PREFER_CEIL, N_FLOOR, N_CEIL } nearest_mode;

typedef struct resize_spec {
  resize_mode mode;
  coord_mode coord;
  nearest_mode nearest;
  double cubic_a;
  bool exclude_outside;
} resize_spec;

/* Source coordinate of output coordinate x; the output width is
 * scale * in, unrounded, as ONNX's reference computes it (a downscale by
 * 0.6 of 4 elements aligns corners over 2.4). */
static double source_coord(const resize_spec *s, int64_t x, int64_t in, double scale) {
  double out = scale * (double)in;
  switch (s->coord) {
  case C_ALIGN_CORNERS: return out == 1 ? 0 : (double)x * (double)(in - 1) / (out - 1);
  case C_ASYMMETRIC: return (double)x / scale;
  case C_PYTORCH_HALF_PIXEL: return out == 1 ? -0.5 : ((double)x + 0.5) / scale - 0.5;
  case C_TF_HALF_PIXEL: return ((double)x + 0.5) / scale;
  default: return ((double)x + 0.5) / scale - 0.5;
  }
}

/* The T taps of output coordinate x: indices (clamped to the axis) and weights. */
static int taps(const resize_spec *s, double xo, int64_t in, int64_t *idx, double *w) {
  double base = floor(xo), r = xo - base;
  if (r == 0) {
    base -= 1;
    r = 1;
  }
  int n;
  if (s->mode == M_NEAREST) {
    bool hi;
    if (r == 1) hi = true;
    else if (s->nearest == N_ROUND_PREFER_FLOOR) hi = r > 0.5;
    else if (s->nearest == N_ROUND_PREFER_CEIL) hi = r >= 0.5;
    else hi = s->nearest == N_CEIL;
    idx[0] = (int64_t)base + hi;
    w[0] = 1;
    n = 1;
  } else if (s->mode == M_LINEAR) {
    idx[0] = (int64_t)base;
    idx[1] = (int64_t)base + 1;
    w[0] = 1 - r;
    w[1] = r;
    n = 2;
  } else {
    double a = s->cubic_a, p = r + 1, q = 1 - r, t = 2 - r;
    w[0] = ((a * p - 5 * a) * p + 8 * a) * p - 4 * a;
    w[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
    w[2] = ((a + 2) * q - (a + 3)) * q * q + 1;
    w[3] = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
    for (int k = 0; k < 4; k++) idx[k] = (int64_t)base - 1 + k;
    n = 4;
  }
  if (s->exclude_outside && n > 1) {
    double sum = 0;
    for (int k = 0; k < n; k++) {
      if (idx[k] < 0 || idx[k] >= in) w[k] = 0;
      sum += w[k];
    }
    for (int k = 0; k < n && sum != 0; k++) w[k] /= sum;
  }
  for (int k = 0; k < n; k++) idx[k] = idx[k] < 0 ? 0 : idx[k] >= in ? in - 1 : idx[k];
  return n;
}

/* x resized along dim d from in to out elements (coordinate scale). */
static kiln_tensor *resize_dim(onnx_ctx *c, const resize_spec *s, kiln_tensor *x, int d, int64_t out, double scale) {
  int64_t in = kiln_size(x, d);
  int64_t *idx = malloc(sizeof *idx * 4 * (size_t)out);
  double *w = malloc(sizeof *w * 4 * (size_t)out);
  if (!idx || !w) {
    free(idx);
    free(w);
    onnx_fail(c, KILN_ERR_OOM, "out of memory for %lld output positions", (long long)out);
    return NULL;
  }
  int n = 1;
  for (int64_t o = 0; o < out; o++) {
    int64_t ti[4];
    double tw[4];
    n = taps(s, source_coord(s, o, in, scale), in, ti, tw);
    for (int k = 0; k < n; k++) {
      idx[k * out + o] = ti[k];
      w[k * out + o] = tw[k];
    }
  }
  int rank = kiln_dim(x);
  int64_t wsize[KILN_MAX_DIMS];
  for (int k = 0; k < rank; k++) wsize[k] = k == d ? out : 1;
  kiln_tensor *y = NULL;
  for (int k = 0; k < n; k++) {
    kiln_tensor *g = kiln_index_select(x, d, kiln_from_data(KILN_I64, 1, &out, idx + k * out));
    if (n > 1) {
      kiln_tensor *wk = kiln_to_dtype(kiln_from_data(KILN_F64, rank, wsize, w + k * out), kiln_dtype_of(x));
      g = kiln_mul(g, wk);
    }
    y = y ? kiln_add(y, g) : g;
  }
  free(idx);
  free(w);
  return y;
}

static bool parse_spec(onnx_ctx *c, resize_spec *s, bool upsample) {
  char m[32], ct[32], nm[32];
  onnx_attr_string(c, "mode", "nearest", m, sizeof m);
  onnx_attr_string(c, "coordinate_transformation_mode", upsample ? "asymmetric" : "half_pixel", ct, sizeof ct);
  onnx_attr_string(c, "nearest_mode", upsample ? "floor" : "round_prefer_floor", nm, sizeof nm);
  if (c->opset < 11 && !upsample) snprintf(ct, sizeof ct, "asymmetric"); /* Resize-10: asymmetric, floor */
  if (c->opset < 11 && !upsample) snprintf(nm, sizeof nm, "floor");
  s->mode = strcmp(m, "nearest") == 0 ? M_NEAREST : strcmp(m, "linear") == 0 || strcmp(m, "bilinear") == 0 ? M_LINEAR
          : strcmp(m, "cubic") == 0 ? M_CUBIC : (resize_mode)-1;
  if ((int)s->mode < 0) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "mode '%s'", m), false;
  static const char *const coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                       "tf_half_pixel_for_nn"};
  static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  int k;
  for (k = 0; k < 5 && strcmp(ct, coords[k]) != 0; k++) {}
  if (k == 5) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s'", ct), false;
  s->coord = (coord_mode)k;
  for (k = 0; k < 4 && strcmp(nm, nearests[k]) != 0; k++) {}
  if (k == 4) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "nearest_mode '%s'", nm), false;
  s->nearest = (nearest_mode)k;
  s->cubic_a = onnx_attr_float(c, "cubic_coeff_a", -0.75);
  s->exclude_outside = onnx_attr_int(c, "exclude_outside", 0) != 0;
  if (onnx_attr_int(c, "antialias", 0)) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "antialias"), false;
  if (onnx_attr(c, "axes")) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "the axes attribute"), false;
  return true;
}

/* Resizes x to sizes (when given) or by scales [rank]. */
static int resize(onnx_ctx *c, const resize_spec *s, kiln_tensor *x, const double *scales, const int64_t *sizes,
                  kiln_tensor **out) {
  kiln_dtype d = kiln_dtype_of(x);
  bool integer = d != KILN_F16 && d != KILN_BF16 && d != KILN_F32 && d != KILN_F64;
  if (integer && s->mode != M_NEAREST) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "%s input with interpolation", kiln_dtype_name(d));
  kiln_tensor *y = x;
  for (int k = 0; y && k < kiln_dim(x); k++) {
    int64_t in = kiln_size(x, k), o = sizes ? sizes[k] : (int64_t)((double)in * scales[k]);
    double scale = sizes ? (double)o / (double)in : scales[k];
    if (o < 0 || scale <= 0 || !isfinite(scale)) return onnx_fail(c, KILN_ERR_ARG, "axis %d: scale %g, size %lld", k, scale, (long long)o);
    if (o == in && scale == 1.0) continue;
    y = resize_dim(c, s, y, k, o, scale);
  }
  if (y == x) y = kiln_clone(x);
  return onnx_set(out, y);
}

OP(Resize) {
  UNUSED_ARGS;
  resize_spec s;
  if (!parse_spec(c, &s, false)) return onnx_status();
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  char ct[32];
  onnx_attr_string(c, "coordinate_transformation_mode", "", ct, sizeof ct);
  if (strcmp(ct, "tf_crop_and_resize") == 0) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "tf_crop_and_resize");
  /* opset 10: X, scales; from 11: X, roi, scales, sizes */
  kiln_tensor *sc = c->opset < 11 ? in[1] : n_in > 2 ? in[2] : NULL, *sz = c->opset >= 11 && n_in > 3 ? in[3] : NULL;
  int64_t sizes[KILN_MAX_DIMS];
  double scales[KILN_MAX_DIMS];
  if (sz && kiln_numel(sz) > 0) {
    int n = onnx_read_ints(c, sz, sizes, KILN_MAX_DIMS, "sizes");
    if (n < 0) return onnx_status();
    if (n != rank) return onnx_fail(c, KILN_ERR_ARG, "sizes holds %d values for rank %d", n, rank);
    return resize(c, &s, x, NULL, sizes, out);
  }
  if (!sc || kiln_numel(sc) != rank) return onnx_fail(c, KILN_ERR_ARG, "scales needs %d values", rank);
  if (kiln_read(kiln_to_dtype(sc, KILN_F64), scales, sizeof *scales * (size_t)rank) < 0) return onnx_status();
  return resize(c, &s, x, scales, NULL, out);
}

OP(Upsample) {
  UNUSED_ARGS;
  resize_spec s;
  if (!parse_spec(c, &s, true)) return onnx_status();
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  double scales[KILN_MAX_DIMS];
  if (n_in > 1 && in[1]) {
    if (kiln_numel(in[1]) != rank) return onnx_fail(c, KILN_ERR_ARG, "scales needs %d values", rank);
    if (kiln_read(kiln_to_dtype(in[1], KILN_F64), scales, sizeof *scales * (size_t)rank) < 0) return onnx_status();
  } else {
    const float *f;
    if (onnx_attr_floats(c, "scales", &f) != rank) return onnx_fail(c, KILN_ERR_ARG, "scales needs %d values", rank);
    for (int k = 0; k < rank; k++) scales[k] = f[k];
  }
  return resize(c, &s, x, scales, NULL, out);
}

const onnx_op onnx_ops_resize[] = {
    {"Resize", op_Resize, 1, 4, 1, 1},
    {"Upsample", op_Upsample, 1, 2, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
