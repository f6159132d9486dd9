/*
 * ops_misc.c — ONNX operators that map onto one Kiln op or a short
 * composition and fit none of the other files: Einsum, TopK, NonZero,
 * OneHot, EyeLike, ScatterElements (and its older name Scatter), Shrink,
 * MeanVarianceNormalization, GatherND (batch_dims 0), LRN.
 *
 * ScatterElements writes into a copy of its data input (ONNX operators
 * are pure); OneHot compares the indices with an arange along the new
 * axis; negative indices count from the end of their axis, as ONNX says.
 */
#include <math.h>
#include <string.h>

#include "onnx_internal.h"

#define OP(name) static int op_##name(onnx_ctx *c, kiln_tensor **in, int n_in, kiln_tensor **out, int n_out)
#define UNUSED_ARGS (void)c, (void)n_in, (void)n_out

OP(Einsum) {
  UNUSED_ARGS;
  char eq[256];
  onnx_attr_string(c, "equation", "", eq, sizeof eq);
  return onnx_set(out, kiln_einsum(eq, in, n_in));
}

OP(TopK) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int64_t k;
  if (onnx_read_ints(c, in[1], &k, 1, "K") != 1) return api_status() ? onnx_status() : onnx_fail(c, KILN_ERR_ARG, "K must hold one value");
  int dim = onnx_axis(c, onnx_attr_int(c, "axis", -1), kiln_dim(x));
  if (dim < 0) return onnx_status();
  bool largest = onnx_attr_int(c, "largest", 1) != 0, sorted = onnx_attr_int(c, "sorted", 1) != 0;
  return kiln_topk(x, k, dim, largest, sorted, &out[0], &out[1]);
}

OP(NonZero) {
  UNUSED_ARGS;
  kiln_tensor *nz = kiln_nonzero(in[0]); /* [n, rank] */
  return onnx_set(out, nz ? kiln_contiguous(kiln_t(nz)) : NULL);
}

/* Indices with negatives counted from the end of an axis of size n, I64. */
static kiln_tensor *wrapped(kiln_tensor *idx, int64_t n) {
  kiln_tensor *i64 = kiln_to_dtype(idx, KILN_I64);
  return kiln_where(kiln_lt_scalar(i64, 0), kiln_add_scalar(i64, (double)n), i64);
}

OP(OneHot) {
  UNUSED_ARGS;
  kiln_tensor *idx = in[0], *values = in[2];
  double depth_f;
  if (kiln_item_f64(in[1], &depth_f) < 0) return onnx_status();
  int64_t depth = (int64_t)depth_f;
  if (depth < 1 || kiln_numel(values) != 2) return onnx_fail(c, KILN_ERR_ARG, "depth %lld, %lld values", (long long)depth, (long long)kiln_numel(values));
  int rank = kiln_dim(idx) + 1;
  if (rank > KILN_MAX_DIMS) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "rank %d", rank);
  int axis = onnx_axis(c, onnx_attr_int(c, "axis", -1), rank);
  if (axis < 0) return onnx_status();
  int64_t s[KILN_MAX_DIMS];
  for (int d = 0; d < rank; d++) s[d] = d == axis ? depth : 1;
  kiln_tensor *classes = kiln_reshape(kiln_arange(KILN_I64, 0, (double)depth, 1), rank, s);
  kiln_tensor *hit = kiln_eq(kiln_unsqueeze(wrapped(idx, depth), axis), classes);
  kiln_tensor *off = kiln_select(values, 0, 0), *on = kiln_select(values, 0, 1);
  return onnx_set(out, kiln_where(hit, on, off));
}

OP(EyeLike) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  if (kiln_dim(x) != 2) return onnx_fail(c, KILN_ERR_SHAPE, "input rank %d (needs 2)", kiln_dim(x));
  kiln_dtype d = kiln_dtype_of(x);
  const Onnx__AttributeProto *a = onnx_attr(c, "dtype");
  if (a && a->has_i && !onnx_dtype((int32_t)a->i, &d)) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "dtype %lld", (long long)a->i);
  int64_t n = kiln_size(x, 0), m = kiln_size(x, 1), k = onnx_attr_int(c, "k", 0);
  kiln_tensor *rows = kiln_reshape(kiln_arange(KILN_I64, 0, (double)n, 1), 2, (int64_t[]){n, 1});
  kiln_tensor *cols = kiln_reshape(kiln_arange(KILN_I64, 0, (double)m, 1), 2, (int64_t[]){1, m});
  return onnx_set(out, kiln_to_dtype(kiln_eq_scalar(kiln_sub(cols, rows), (double)k), d));
}

OP(ScatterElements) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int axis = onnx_axis(c, onnx_attr_int(c, "axis", 0), kiln_dim(x));
  if (axis < 0) return onnx_status();
  char red[16];
  onnx_attr_string(c, "reduction", "none", red, sizeof red);
  bool add = strcmp(red, "add") == 0;
  if (!add && strcmp(red, "none") != 0) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "reduction '%s'", red);
  kiln_tensor *r = kiln_clone(x), *idx = wrapped(in[1], kiln_size(x, axis));
  if (!r || !idx) return onnx_status();
  int rc = add ? kiln_scatter_add_(r, axis, idx, in[2]) : kiln_scatter_(r, axis, idx, in[2]);
  return rc < 0 ? rc : onnx_set(out, r);
}

OP(Shrink) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  double l = onnx_attr_float(c, "lambd", 0.5), b = onnx_attr_float(c, "bias", 0.0);
  kiln_tensor *zero = kiln_zeros_like(x);
  kiln_tensor *r = kiln_where(kiln_lt_scalar(x, -l), kiln_add_scalar(x, b),
                              kiln_where(kiln_gt_scalar(x, l), kiln_sub_scalar(x, b), zero));
  return onnx_set(out, r && kiln_dtype_of(r) != kiln_dtype_of(x) ? kiln_to_dtype(r, kiln_dtype_of(x)) : r);
}

/* (x - mean) / (std + 1e-9) over axes (default [0, 2, 3]), std from the
 * biased variance E[x^2] - E[x]^2, as ONNX's reference. */
OP(MeanVarianceNormalization) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  const int64_t *a, def[3] = {0, 2, 3};
  int n = onnx_attr_ints(c, "axes", &a), dims[KILN_MAX_DIMS];
  if (n < 0) {
    n = 3;
    a = def;
  }
  if (n > KILN_MAX_DIMS) return onnx_fail(c, KILN_ERR_ARG, "%d axes", n);
  for (int k = 0; k < n; k++)
    if ((dims[k] = onnx_axis(c, a[k], kiln_dim(x))) < 0) return onnx_status();
  kiln_tensor *mean = kiln_mean(x, n, dims, true);
  kiln_tensor *var = kiln_sub(kiln_mean(kiln_mul(x, x), n, dims, true), kiln_mul(mean, mean));
  return onnx_set(out, kiln_div(kiln_sub(x, mean), kiln_add_scalar(kiln_sqrt(var), 1e-9)));
}

/* GatherND, batch_dims 0: indices [..., k] pick data's first k dims;
 * the result is indices' leading dims then data's dims from k on. The
 * k-tuples become flat row numbers of data viewed as [prod(first k),
 * rest...], one index_select. */
OP(GatherND) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0], *idx = in[1];
  if (onnx_attr_int(c, "batch_dims", 0) != 0) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "batch_dims != 0");
  int rank = kiln_dim(x), ir = kiln_dim(idx);
  int64_t k = ir ? kiln_size(idx, ir - 1) : 0;
  if (ir < 1 || k < 1 || k > rank) return onnx_fail(c, KILN_ERR_SHAPE, "indices' last dim %lld for data rank %d", (long long)k, rank);
  int64_t rows = 1, stride = 1, s[KILN_MAX_DIMS];
  for (int d = 0; d < k; d++) rows *= kiln_size(x, d);
  kiln_tensor *flat = NULL;
  for (int j = (int)k - 1; j >= 0; j--) {
    kiln_tensor *part = kiln_mul_scalar(wrapped(kiln_select(idx, ir - 1, j), kiln_size(x, j)), (double)stride);
    flat = flat ? kiln_add(flat, part) : part;
    stride *= kiln_size(x, j);
  }
  int m = 0;
  s[m++] = rows;
  for (int d = (int)k; d < rank; d++) s[m++] = kiln_size(x, d);
  int64_t n = kiln_numel(flat);
  kiln_tensor *g = kiln_index_select(kiln_reshape(x, m, s), 0, kiln_reshape(flat, 1, &n));
  m = 0;
  for (int d = 0; d < ir - 1; d++) s[m++] = kiln_size(idx, d);
  for (int d = (int)k; d < rank; d++) s[m++] = kiln_size(x, d);
  if (m > KILN_MAX_DIMS) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "result rank %d", m);
  return onnx_set(out, kiln_reshape(g, m, s));
}

/* LRN over channels: x / (bias + alpha / size * sum of x^2 over the
 * channels c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2))^beta;
 * the window sum is an average pool over a channel axis made spatial. */
OP(LRN) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  if (rank < 3) return onnx_fail(c, KILN_ERR_SHAPE, "input rank %d (needs [N, C, ...])", rank);
  int64_t size = onnx_attr_int(c, "size", 0);
  if (size < 1) return onnx_fail(c, KILN_ERR_ARG, "size %lld", (long long)size);
  double alpha = onnx_attr_float(c, "alpha", 1e-4), beta = onnx_attr_float(c, "beta", 0.75),
         bias = onnx_attr_float(c, "bias", 1.0);
  int64_t n = kiln_size(x, 0), ch = kiln_size(x, 1), rest = n * ch > 0 ? kiln_numel(x) / (n * ch) : 1;
  /* x^2 as [N, 1, C, rest], channels padded by (floor, ceil) of (size - 1) / 2 */
  kiln_tensor *sq = kiln_reshape(kiln_mul(x, x), 4, (int64_t[]){n, 1, ch, rest});
  int64_t pad[4] = {0, 0, (size - 1) / 2, size - 1 - (size - 1) / 2};
  kiln_tensor *sum = kiln_mul_scalar(kiln_avg_pool(kiln_pad(sq, 4, pad, KILN_PAD_CONSTANT, 0), 2, (int64_t[]){size, 1},
                                                   (int64_t[]){1, 1}, (int64_t[]){0, 0}, false, true),
                                     (double)size);
  kiln_tensor *den = kiln_pow_scalar(kiln_add_scalar(kiln_mul_scalar(sum, alpha / (double)size), bias), beta);
  return onnx_set(out, kiln_div(x, kiln_reshape(den, rank, kiln_sizes(x))));
}

const onnx_op onnx_ops_misc[] = {
    {"GatherND", op_GatherND, 2, 2, 1, 1},
    {"LRN", op_LRN, 1, 1, 1, 1},
    {"Einsum", op_Einsum, 1, -1, 1, 1},
    {"TopK", op_TopK, 2, 2, 2, 2},
    {"NonZero", op_NonZero, 1, 1, 1, 1},
    {"OneHot", op_OneHot, 3, 3, 1, 1},
    {"EyeLike", op_EyeLike, 1, 1, 1, 1},
    {"ScatterElements", op_ScatterElements, 3, 3, 1, 1},
    {"Scatter", op_ScatterElements, 3, 3, 1, 1},
    {"Shrink", op_Shrink, 1, 1, 1, 1},
    {"MeanVarianceNormalization", op_MeanVarianceNormalization, 1, 1, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
