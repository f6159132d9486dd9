/*
 * ops_nn.c — ONNX's neural-network operators on kiln/nn.h's layers: Conv,
 * ConvTranspose, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool,
 * BatchNormalization (inference), InstanceNormalization,
 * LayerNormalization.
 *
 * ONNX pads each spatial axis by a begin and an end amount
 * (pads = [x1_begin, x2_begin, ..., x1_end, x2_end, ...]) or by auto_pad
 * (SAME_UPPER / SAME_LOWER: the output is ceil(in / stride), the odd
 * pixel at the end or the beginning; VALID: none). Kiln's layers pad
 * symmetrically: unequal pads are applied first with kiln_pad (zeros for
 * convolution, -inf for max pooling; average pooling divides by the
 * pooled mask of the input when padding is not counted) and the layer
 * then runs unpadded.
 */
#include <math.h>
#include <string.h>

#include "onnx_internal.h"

#define OP(name) static int op_##name(onnx_ctx *c, kiln_tensor **in, int n_in, kiln_tensor **out, int n_out)
#define UNUSED_ARGS (void)c, (void)n_in, (void)n_out
#define MAXS 3 /* spatial dims Kiln's layers take */

typedef struct window {
  int nd;
  int64_t kernel[MAXS], stride[MAXS], dil[MAXS], begin[MAXS], end[MAXS];
  bool symmetric;
} window;

/* Reads an ints attribute of nd entries into v (default def when absent). */
static bool spatial_attr(onnx_ctx *c, const char *name, int nd, int64_t def, int64_t *v) {
  const int64_t *a;
  int n = onnx_attr_ints(c, name, &a);
  for (int k = 0; k < nd; k++) v[k] = n < 0 ? def : k < n ? a[k] : def;
  if (n >= 0 && n != nd) return onnx_fail(c, KILN_ERR_ARG, "%s has %d entries for %d spatial dims", name, n, nd), false;
  return true;
}

/* The window of a conv or pool over x [N, C, *S]: kernel from the
 * attribute or (kernel_in) the weight's trailing dims. */
static bool read_window(onnx_ctx *c, kiln_tensor *x, const int64_t *kernel_in, window *w) {
  int nd = kiln_dim(x) - 2;
  if (nd < 1 || nd > MAXS) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "%d spatial dims (Kiln: 1 to 3)", nd), false;
  w->nd = nd;
  if (kernel_in) {
    for (int k = 0; k < nd; k++) w->kernel[k] = kernel_in[k];
    const int64_t *a;
    int n = onnx_attr_ints(c, "kernel_shape", &a);
    for (int k = 0; n == nd && k < nd; k++)
      if (a[k] != kernel_in[k]) return onnx_fail(c, KILN_ERR_SHAPE, "kernel_shape does not match the weight"), false;
  } else if (!spatial_attr(c, "kernel_shape", nd, -1, w->kernel) || w->kernel[0] < 0) {
    return api_status() ? false : (onnx_fail(c, KILN_ERR_ARG, "no kernel_shape"), false);
  }
  if (!spatial_attr(c, "strides", nd, 1, w->stride) || !spatial_attr(c, "dilations", nd, 1, w->dil)) return false;
  int64_t pads[2 * MAXS];
  const int64_t *a;
  int n = onnx_attr_ints(c, "pads", &a);
  if (n >= 0 && n != 2 * nd) return onnx_fail(c, KILN_ERR_ARG, "pads has %d entries for %d spatial dims", n, nd), false;
  for (int k = 0; k < 2 * nd; k++) pads[k] = n < 0 ? 0 : a[k];
  char ap[32];
  onnx_attr_string(c, "auto_pad", "NOTSET", ap, sizeof ap);
  bool upper = strcmp(ap, "SAME_UPPER") == 0, lower = strcmp(ap, "SAME_LOWER") == 0;
  for (int k = 0; k < nd; k++) {
    w->begin[k] = pads[k];
    w->end[k] = pads[nd + k];
    if (strcmp(ap, "VALID") == 0) w->begin[k] = w->end[k] = 0;
    if (!upper && !lower) continue;
    int64_t size = kiln_size(x, 2 + k), o = (size + w->stride[k] - 1) / w->stride[k];
    int64_t total = (o - 1) * w->stride[k] + (w->kernel[k] - 1) * w->dil[k] + 1 - size;
    if (total < 0) total = 0;
    w->begin[k] = upper ? total / 2 : total - total / 2;
    w->end[k] = total - w->begin[k];
  }
  w->symmetric = true;
  for (int k = 0; k < nd; k++) w->symmetric &= w->begin[k] == w->end[k];
  return true;
}

/* x padded by the window's begin/end amounts with value. */
static kiln_tensor *pad_input(kiln_tensor *x, const window *w, double value) {
  int64_t p[2 * MAXS];
  for (int k = 0; k < w->nd; k++) {
    p[2 * (w->nd - 1 - k)] = w->begin[k];
    p[2 * (w->nd - 1 - k) + 1] = w->end[k];
  }
  return kiln_pad(x, 2 * w->nd, p, KILN_PAD_CONSTANT, value);
}

OP(Conv) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0], *wt = in[1], *b = n_in > 2 ? in[2] : NULL;
  window w;
  if (kiln_dim(wt) != kiln_dim(x)) return onnx_fail(c, KILN_ERR_SHAPE, "weight rank %d, input rank %d", kiln_dim(wt), kiln_dim(x));
  if (!read_window(c, x, kiln_sizes(wt) + 2, &w)) return onnx_status();
  int64_t zero[MAXS] = {0};
  if (!w.symmetric) x = pad_input(x, &w, 0);
  int64_t groups = onnx_attr_int(c, "group", 1);
  return onnx_set(out, kiln_conv(x, wt, b, w.nd, w.stride, w.symmetric ? w.begin : zero, w.dil, groups));
}

OP(ConvTranspose) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0], *wt = in[1], *b = n_in > 2 ? in[2] : NULL;
  int nd = kiln_dim(x) - 2;
  if (nd < 1 || nd > MAXS) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "%d spatial dims", nd);
  if (onnx_attr(c, "output_shape")) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "the output_shape attribute");
  char ap[32];
  onnx_attr_string(c, "auto_pad", "NOTSET", ap, sizeof ap);
  if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "auto_pad %s", ap);
  int64_t stride[MAXS], dil[MAXS], opad[MAXS], pads[2 * MAXS];
  if (!spatial_attr(c, "strides", nd, 1, stride) || !spatial_attr(c, "dilations", nd, 1, dil) ||
      !spatial_attr(c, "output_padding", nd, 0, opad))
    return onnx_status();
  const int64_t *a;
  int n = onnx_attr_ints(c, "pads", &a);
  if (n >= 0 && n != 2 * nd) return onnx_fail(c, KILN_ERR_ARG, "pads has %d entries", n);
  for (int k = 0; k < 2 * nd; k++) pads[k] = n < 0 || strcmp(ap, "VALID") == 0 ? 0 : a[k];
  int64_t zero[MAXS] = {0};
  bool sym = true;
  for (int k = 0; k < nd; k++) sym &= pads[k] == pads[nd + k];
  int64_t groups = onnx_attr_int(c, "group", 1);
  kiln_tensor *y = kiln_conv_transpose(x, wt, b, nd, stride, sym ? pads : zero, zero, groups, dil);
  if (sym) {
    /* output_padding adds zeros past the end (plus the bias): Kiln's own
     * output_padding must stay below the stride, ONNX's need not */
    bool any = false;
    for (int k = 0; k < nd; k++) any |= opad[k] != 0;
    if (!any) return onnx_set(out, y);
    y = kiln_conv_transpose(x, wt, b, nd, stride, pads, opad, groups, dil);
    return onnx_set(out, y);
  }
  /* unequal pads: crop the unpadded result */
  for (int k = 0; y && k < nd; k++)
    y = kiln_narrow(y, 2 + k, pads[k], kiln_size(y, 2 + k) - pads[k] - pads[nd + k] + opad[k]);
  return onnx_set(out, y);
}

OP(MaxPool) {
  UNUSED_ARGS;
  if (n_out > 1) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "the Indices output");
  kiln_tensor *x = in[0];
  window w;
  if (!read_window(c, x, NULL, &w)) return onnx_status();
  bool ceil_mode = onnx_attr_int(c, "ceil_mode", 0) != 0;
  int64_t zero[MAXS] = {0};
  bool fits = w.symmetric;
  for (int k = 0; k < w.nd; k++) fits &= w.begin[k] * 2 <= w.kernel[k];
  kiln_dtype d = kiln_dtype_of(x);
  bool integer = d != KILN_F16 && d != KILN_BF16 && d != KILN_F32 && d != KILN_F64;
  if (integer) x = kiln_to_dtype(x, KILN_F64); /* exact for every integer ONNX pools (8 bits) */
  if (!fits) x = pad_input(x, &w, -INFINITY);
  kiln_tensor *y = kiln_max_pool(x, w.nd, w.kernel, w.stride, fits ? w.begin : zero, w.dil, ceil_mode);
  return onnx_set(out, integer && y ? kiln_to_dtype(y, d) : y);
}

OP(AveragePool) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  window w;
  if (!read_window(c, x, NULL, &w)) return onnx_status();
  bool ceil_mode = onnx_attr_int(c, "ceil_mode", 0) != 0;
  bool count_pad = onnx_attr_int(c, "count_include_pad", 0) != 0;
  for (int k = 0; k < w.nd; k++)
    if (w.dil[k] != 1) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "dilated average pooling");
  bool fits = w.symmetric;
  for (int k = 0; k < w.nd; k++) fits &= w.begin[k] * 2 <= w.kernel[k];
  if (fits) return onnx_set(out, kiln_avg_pool(x, w.nd, w.kernel, w.stride, w.begin, ceil_mode, count_pad));
  if (ceil_mode) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "ceil_mode with unequal pads");
  int64_t zero[MAXS] = {0};
  kiln_tensor *sum = kiln_avg_pool(pad_input(x, &w, 0), w.nd, w.kernel, w.stride, zero, false, true);
  if (count_pad) return onnx_set(out, sum);
  kiln_tensor *mask = pad_input(kiln_ones_like(x), &w, 0);
  return onnx_set(out, kiln_div(sum, kiln_avg_pool(mask, w.nd, w.kernel, w.stride, zero, false, true)));
}

static int global_pool(onnx_ctx *c, kiln_tensor *x, kiln_tensor **out, bool max) {
  int rank = kiln_dim(x), dims[KILN_MAX_DIMS];
  if (rank < 3) return onnx_fail(c, KILN_ERR_SHAPE, "rank %d (needs [N, C, ...])", rank);
  for (int d = 2; d < rank; d++) dims[d - 2] = d;
  return onnx_set(out, max ? kiln_amax(x, rank - 2, dims, true) : kiln_mean(x, rank - 2, dims, true));
}

OP(GlobalAveragePool) { UNUSED_ARGS; return global_pool(c, in[0], out, false); }
OP(GlobalMaxPool) { UNUSED_ARGS; return global_pool(c, in[0], out, true); }

OP(BatchNormalization) {
  UNUSED_ARGS;
  if (onnx_attr_int(c, "training_mode", 0) || n_out > 1)
    return onnx_fail(c, KILN_ERR_UNSUPPORTED, "training mode (Kiln runs BatchNormalization for inference)");
  if (c->opset < 7 && onnx_attr_int(c, "spatial", 1) == 0) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "spatial = 0");
  double eps = onnx_attr_float(c, "epsilon", 1e-5);
  return onnx_set(out, kiln_batch_norm(in[0], in[3], in[4], in[1], in[2], false, 0.1, eps));
}

OP(InstanceNormalization) {
  UNUSED_ARGS;
  return onnx_set(out, kiln_instance_norm(in[0], in[1], in[2], onnx_attr_float(c, "epsilon", 1e-5)));
}

/* LayerNormalization: normalizes the dims from axis on; Scale and B
 * broadcast to them. */
OP(LayerNormalization) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x), axis = onnx_axis(c, onnx_attr_int(c, "axis", -1), rank);
  if (axis < 0) return onnx_status();
  int nn = rank - axis;
  const int64_t *ns = kiln_sizes(x) + axis;
  double eps = onnx_attr_float(c, "epsilon", 1e-5);
  kiln_tensor *scale = kiln_contiguous(kiln_expand(in[1], nn, ns));
  kiln_tensor *bias = n_in > 2 && in[2] ? kiln_contiguous(kiln_expand(in[2], nn, ns)) : NULL;
  int rc = onnx_set(out, kiln_layer_norm(x, nn, scale, bias, eps));
  if (rc < 0 || n_out == 1) return rc;
  /* Mean and InvStdDev: [x's leading dims, 1...], in the stash type
   * (F32 by default), the variance biased */
  kiln_dtype st;
  if (!onnx_dtype((int32_t)onnx_attr_int(c, "stash_type", 1), &st)) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "stash_type");
  int dims[KILN_MAX_DIMS];
  for (int k = 0; k < nn; k++) dims[k] = axis + k;
  kiln_tensor *xs = kiln_to_dtype(x, st);
  kiln_tensor *mean = kiln_mean(xs, nn, dims, true);
  kiln_tensor *dev = kiln_sub(xs, mean);
  out[1] = mean;
  if (n_out > 2) out[2] = kiln_rsqrt(kiln_add_scalar(kiln_mean(kiln_mul(dev, dev), nn, dims, true), eps));
  return out[1] && (n_out < 3 || out[2]) ? KILN_OK : onnx_status();
}

const onnx_op onnx_ops_nn[] = {
    {"Conv", op_Conv, 2, 3, 1, 1},
    {"ConvTranspose", op_ConvTranspose, 2, 3, 1, 1},
    {"MaxPool", op_MaxPool, 1, 1, 1, 2},
    {"AveragePool", op_AveragePool, 1, 1, 1, 1},
    {"GlobalAveragePool", op_GlobalAveragePool, 1, 1, 1, 1},
    {"GlobalMaxPool", op_GlobalMaxPool, 1, 1, 1, 1},
    {"BatchNormalization", op_BatchNormalization, 5, 5, 1, 5},
    {"InstanceNormalization", op_InstanceNormalization, 3, 3, 1, 1},
    {"LayerNormalization", op_LayerNormalization, 2, 3, 1, 3},
    {NULL, NULL, 0, 0, 0, 0},
};
