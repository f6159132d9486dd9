/*
 * ops_shape.c — ONNX's shape and data-movement operators as Kiln views
 * and copies: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat,
 * Split, Slice, Gather, GatherElements, Expand, Tile, Pad, Shape, Size,
 * Constant, ConstantOfShape, Range, Dropout (inference: the identity),
 * Trilu, DepthToSpace, SpaceToDepth.
 *
 * The integer inputs these read (a shape, starts and ends, pads...) are
 * read on the host (onnx_read_ints forces them): the output's shape
 * depends on them. Negative axes count from the end; negative indices
 * (Gather) from the end of their axis, as ONNX says.
 */
#include <math.h>
#include <string.h>

#include "onnx_internal.h"

#define OP(name) static int op_##name(onnx_ctx *c, kiln_tensor **in, int n_in, kiln_tensor **out, int n_out)
#define UNUSED_ARGS (void)c, (void)n_in, (void)n_out
#define MAXD KILN_MAX_DIMS

/* The int list of input k (opset >= since) or of attribute attr; -1 on
 * error, -2 when neither is present. */
static int ints_of(onnx_ctx *c, kiln_tensor **in, int n_in, int k, const char *attr, int64_t *vals, int max) {
  if (n_in > k && in[k]) return onnx_read_ints(c, in[k], vals, max, attr);
  const int64_t *a;
  int n = onnx_attr_ints(c, attr, &a);
  if (n < 0) return -2;
  if (n > max) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "%s holds %d values (at most %d)", attr, n, max), -1;
  for (int j = 0; j < n; j++) vals[j] = a[j];
  return n;
}

OP(Reshape) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int64_t s[MAXD];
  int n = onnx_read_ints(c, in[1], s, MAXD, "shape");
  if (n < 0) return onnx_status();
  bool allowzero = onnx_attr_int(c, "allowzero", 0) != 0;
  for (int d = 0; d < n; d++) {
    if (s[d] != 0 || allowzero) continue;
    if (d >= kiln_dim(x)) return onnx_fail(c, KILN_ERR_SHAPE, "shape[%d] = 0 copies a dim the input lacks", d);
    s[d] = kiln_size(x, d);
  }
  return onnx_set(out, kiln_reshape(x, n, s));
}

OP(Flatten) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  int64_t axis = onnx_attr_int(c, "axis", 1);
  if (axis < -rank || axis > rank) return onnx_fail(c, KILN_ERR_ARG, "axis %lld for rank %d", (long long)axis, rank);
  if (axis < 0) axis += rank;
  int64_t s[2] = {1, 1};
  for (int d = 0; d < rank; d++) s[d < axis ? 0 : 1] *= kiln_size(x, d);
  return onnx_set(out, kiln_reshape(x, 2, s));
}

OP(Transpose) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x), perm[MAXD];
  const int64_t *p;
  int n = onnx_attr_ints(c, "perm", &p);
  if (n >= 0 && n != rank) return onnx_fail(c, KILN_ERR_ARG, "perm has %d entries for rank %d", n, rank);
  for (int d = 0; d < rank; d++) {
    perm[d] = n < 0 ? rank - 1 - d : onnx_axis(c, p[d], rank);
    if (perm[d] < 0) return onnx_status();
  }
  return onnx_set(out, kiln_permute(x, rank, perm));
}

OP(Squeeze) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int64_t ax[MAXD];
  int n = ints_of(c, in, n_in, 1, "axes", ax, MAXD);
  if (n == -1) return onnx_status();
  if (n == -2) return onnx_set(out, kiln_squeeze(x));
  int rank = kiln_dim(x);
  bool drop[MAXD] = {0};
  for (int k = 0; k < n; k++) {
    int d = onnx_axis(c, ax[k], rank);
    if (d < 0) return onnx_status();
    if (kiln_size(x, d) != 1) return onnx_fail(c, KILN_ERR_SHAPE, "axis %d has size %lld, not 1", d, (long long)kiln_size(x, d));
    drop[d] = true;
  }
  int64_t s[MAXD];
  int m = 0;
  for (int d = 0; d < rank; d++)
    if (!drop[d]) s[m++] = kiln_size(x, d);
  return onnx_set(out, kiln_reshape(x, m, s));
}

OP(Unsqueeze) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int64_t ax[MAXD];
  int n = ints_of(c, in, n_in, 1, "axes", ax, MAXD);
  if (n < 0) return n == -1 ? onnx_status() : onnx_fail(c, KILN_ERR_ARG, "no axes");
  int rank = kiln_dim(x), out_rank = rank + n;
  if (out_rank > MAXD) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "rank %d", out_rank);
  bool ins[MAXD] = {0};
  for (int k = 0; k < n; k++) {
    int d = onnx_axis(c, ax[k], out_rank);
    if (d < 0) return onnx_status();
    if (ins[d]) return onnx_fail(c, KILN_ERR_ARG, "axis %d repeated", d);
    ins[d] = true;
  }
  int64_t s[MAXD];
  for (int d = 0, j = 0; d < out_rank; d++) s[d] = ins[d] ? 1 : kiln_size(x, j++);
  return onnx_set(out, kiln_reshape(x, out_rank, s));
}

OP(Concat) {
  UNUSED_ARGS;
  int axis = onnx_axis(c, onnx_attr_int(c, "axis", 0), kiln_dim(in[0]));
  if (axis < 0) return onnx_status();
  return onnx_set(out, kiln_cat(in, n_in, axis));
}

OP(Split) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int axis = onnx_axis(c, onnx_attr_int(c, "axis", 0), kiln_dim(x));
  if (axis < 0) return onnx_status();
  int64_t len[64];
  int n = ints_of(c, in, n_in, 1, "split", len, 64);
  if (n == -1) return onnx_status();
  int64_t size = kiln_size(x, axis);
  if (n == -2) { /* equal parts (opset 18: the last one smaller) */
    int64_t parts = onnx_attr_int(c, "num_outputs", n_out), step = (size + parts - 1) / parts;
    n = n_out;
    for (int k = 0; k < n; k++) len[k] = k < n - 1 ? step : size - step * (n - 1);
  }
  if (n != n_out) return onnx_fail(c, KILN_ERR_ARG, "split has %d parts for %d outputs", n, n_out);
  int64_t at = 0;
  for (int k = 0; k < n; k++) {
    if (len[k] < 0 || at + len[k] > size) return onnx_fail(c, KILN_ERR_SHAPE, "split sizes exceed dim %d", axis);
    out[k] = kiln_narrow(x, axis, at, len[k]);
    if (!out[k]) return onnx_status();
    at += len[k];
  }
  return at == size ? KILN_OK : onnx_fail(c, KILN_ERR_SHAPE, "split sizes sum to %lld, dim %d has %lld", (long long)at, axis, (long long)size);
}

/* start, end clamped for one axis of size n with step (ONNX's rules). */
static void slice_bounds(int64_t n, int64_t step, int64_t *start, int64_t *end) {
  int64_t s = *start, e = *end;
  if (s < 0) s += n;
  if (e < 0) e += n;
  if (step > 0) {
    s = s < 0 ? 0 : s > n ? n : s;
    e = e < 0 ? 0 : e > n ? n : e;
  } else {
    s = s < 0 ? -1 : s > n - 1 ? n - 1 : s;
    e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
  }
  *start = s;
  *end = e;
}

OP(Slice) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  int64_t st[MAXD], en[MAXD], ax[MAXD], sp[MAXD];
  int n = c->opset < 10 ? ints_of(c, in, 0, 9, "starts", st, MAXD) : onnx_read_ints(c, in[1], st, MAXD, "starts");
  int ne = c->opset < 10 ? ints_of(c, in, 0, 9, "ends", en, MAXD) : onnx_read_ints(c, in[2], en, MAXD, "ends");
  if (n < 0 || ne != n) return n == -1 || ne == -1 ? onnx_status() : onnx_fail(c, KILN_ERR_ARG, "starts and ends differ in length");
  int na = c->opset < 10 ? ints_of(c, in, 0, 9, "axes", ax, MAXD) : ints_of(c, in, n_in, 3, "_axes", ax, MAXD);
  int ns = c->opset < 10 ? -2 : ints_of(c, in, n_in, 4, "_steps", sp, MAXD);
  if (na == -1 || ns == -1) return onnx_status();
  for (int k = 0; k < n; k++) {
    if (na == -2) ax[k] = k;
    if (ns == -2) sp[k] = 1;
  }
  if ((na >= 0 && na != n) || (ns >= 0 && ns != n)) return onnx_fail(c, KILN_ERR_ARG, "axes or steps differ in length from starts");
  kiln_tensor *r = x;
  for (int k = 0; k < n; k++) {
    int d = onnx_axis(c, ax[k], rank);
    if (d < 0) return onnx_status();
    if (sp[k] == 0) return onnx_fail(c, KILN_ERR_ARG, "step 0");
    int64_t s = st[k], e = en[k], size = kiln_size(r, d);
    slice_bounds(size, sp[k], &s, &e);
    if (sp[k] > 0) r = kiln_slice(r, d, s, e > s ? e : s, sp[k]);
    else { /* negative step: flip, then a positive slice of the flipped axis */
      int64_t fs = size - 1 - s, fe = size - 1 - e;
      r = kiln_slice(kiln_flip(r, 1, &d), d, fs, fe > fs ? fe : fs, -sp[k]);
    }
    if (!r) return onnx_status();
  }
  return onnx_set(out, r == x ? kiln_slice(x, 0, 0, rank ? kiln_size(x, 0) : 0, 1) : r);
}

/* Indices with negatives counted from the end of an axis of size n. */
static kiln_tensor *wrap_index(kiln_tensor *idx, int64_t n) {
  kiln_tensor *i64 = kiln_to_dtype(idx, KILN_I64);
  return kiln_where(kiln_lt_scalar(i64, 0), kiln_add_scalar(i64, (double)n), i64);
}

OP(Gather) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0], *idx = in[1];
  int rank = kiln_dim(x), axis = onnx_axis(c, onnx_attr_int(c, "axis", 0), rank);
  if (axis < 0) return onnx_status();
  int ir = kiln_dim(idx);
  if (rank - 1 + ir > MAXD) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "result rank %d", rank - 1 + ir);
  int64_t flat = kiln_numel(idx);
  kiln_tensor *sel = kiln_index_select(x, axis, kiln_reshape(wrap_index(idx, kiln_size(x, axis)), 1, &flat));
  int64_t s[MAXD];
  int m = 0;
  for (int d = 0; d < axis; d++) s[m++] = kiln_size(x, d);
  for (int d = 0; d < ir; d++) s[m++] = kiln_size(idx, d);
  for (int d = axis + 1; d < rank; d++) s[m++] = kiln_size(x, d);
  return onnx_set(out, kiln_reshape(sel, m, s));
}

OP(GatherElements) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int axis = onnx_axis(c, onnx_attr_int(c, "axis", 0), kiln_dim(x));
  if (axis < 0) return onnx_status();
  return onnx_set(out, kiln_gather(x, axis, wrap_index(in[1], kiln_size(x, axis))));
}

/* Expand: broadcasts x and shape together (both ways, as NumPy). */
OP(Expand) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int64_t s[MAXD], r[MAXD];
  int n = onnx_read_ints(c, in[1], s, MAXD, "shape");
  if (n < 0) return onnx_status();
  int rank = kiln_dim(x), m = n > rank ? n : rank;
  for (int k = 0; k < m; k++) {
    int64_t a = k - (m - rank) >= 0 ? kiln_size(x, k - (m - rank)) : 1, b = k - (m - n) >= 0 ? s[k - (m - n)] : 1;
    if (a != b && a != 1 && b != 1) return onnx_fail(c, KILN_ERR_SHAPE, "dim %d: %lld and %lld cannot broadcast", k, (long long)a, (long long)b);
    r[k] = a == 1 ? b : a;
  }
  return onnx_set(out, kiln_contiguous(kiln_expand(x, m, r)));
}

OP(Tile) {
  UNUSED_ARGS;
  int64_t reps[MAXD];
  int n = onnx_read_ints(c, in[1], reps, MAXD, "repeats");
  if (n < 0) return onnx_status();
  if (n != kiln_dim(in[0])) return onnx_fail(c, KILN_ERR_ARG, "%d repeats for rank %d", n, kiln_dim(in[0]));
  return onnx_set(out, kiln_repeat(in[0], n, reps));
}

/* Pad: pads [2 rank] = begins of every axis, then ends (opset < 11: the
 * attribute pads, value attribute). Converted to kiln_pad's order (last
 * dim first); negative pads crop. */
OP(Pad) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  int64_t p[2 * MAXD], q[2 * MAXD], ax[MAXD];
  int n = c->opset < 11 ? ints_of(c, in, 0, 9, "pads", p, 2 * MAXD) : onnx_read_ints(c, in[1], p, 2 * MAXD, "pads");
  if (n < 0) return n == -1 ? onnx_status() : onnx_fail(c, KILN_ERR_ARG, "no pads");
  double value = onnx_attr_float(c, "value", 0.0);
  if (c->opset >= 11 && n_in > 2 && in[2] && kiln_item_f64(in[2], &value) < 0) return onnx_status();
  int na = c->opset >= 18 ? ints_of(c, in, n_in, 3, "_axes", ax, MAXD) : -2;
  if (na == -1) return onnx_status();
  if (na == -2) {
    na = rank;
    for (int k = 0; k < rank; k++) ax[k] = k;
  }
  if (n != 2 * na) return onnx_fail(c, KILN_ERR_ARG, "%d pads for %d axes", n, na);
  int64_t full[2 * MAXD] = {0};
  for (int k = 0; k < na; k++) {
    int d = onnx_axis(c, ax[k], rank);
    if (d < 0) return onnx_status();
    full[d] = p[k];
    full[rank + d] = p[na + k];
  }
  for (int d = 0; d < rank; d++) {
    q[2 * (rank - 1 - d)] = full[d];
    q[2 * (rank - 1 - d) + 1] = full[rank + d];
  }
  char mode[16];
  onnx_attr_string(c, "mode", "constant", mode, sizeof mode);
  kiln_pad_mode m = strcmp(mode, "reflect") == 0 ? KILN_PAD_REFLECT
                    : strcmp(mode, "edge") == 0  ? KILN_PAD_REPLICATE
                                                 : KILN_PAD_CONSTANT;
  if (m == KILN_PAD_CONSTANT && strcmp(mode, "constant") != 0) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "mode '%s'", mode);
  /* the pads from the first padded dim on (kiln_pad's reflect and
   * replicate modes take the trailing dims only) */
  int first = rank;
  for (int d = 0; d < rank; d++)
    if (full[d] || full[rank + d]) {
      first = d;
      break;
    }
  if (first == rank) return onnx_set(out, kiln_clone(x));
  return onnx_set(out, kiln_pad(x, 2 * (rank - first), q, m, value));
}

OP(Shape) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int rank = kiln_dim(x);
  int64_t s = onnx_attr_int(c, "start", 0), e = onnx_attr_int(c, "end", rank);
  if (s < 0) s += rank;
  if (e < 0) e += rank;
  s = s < 0 ? 0 : s > rank ? rank : s;
  e = e < s ? s : e > rank ? rank : e;
  int64_t n = e - s;
  return onnx_set(out, kiln_from_data(KILN_I64, 1, &n, kiln_sizes(x) + s));
}

OP(Size) {
  UNUSED_ARGS;
  return onnx_set(out, kiln_scalar(KILN_I64, (double)kiln_numel(in[0])));
}

OP(Constant) {
  UNUSED_ARGS;
  const Onnx__AttributeProto *a = onnx_attr(c, "value");
  if (a && a->t) return onnx_set(out, onnx_tensor_from_proto(a->t, NULL, "kiln_onnx_run"));
  if ((a = onnx_attr(c, "value_float")) && a->has_f) return onnx_set(out, kiln_scalar(KILN_F32, a->f));
  if ((a = onnx_attr(c, "value_int")) && a->has_i) return onnx_set(out, kiln_scalar(KILN_I64, (double)a->i));
  if ((a = onnx_attr(c, "value_floats"))) {
    int64_t n = (int64_t)a->n_floats;
    return onnx_set(out, kiln_from_data(KILN_F32, 1, &n, a->floats));
  }
  if ((a = onnx_attr(c, "value_ints"))) {
    int64_t n = (int64_t)a->n_ints;
    return onnx_set(out, kiln_from_data(KILN_I64, 1, &n, a->ints));
  }
  return onnx_fail(c, KILN_ERR_UNSUPPORTED, "a Constant without value, value_float(s) or value_int(s)");
}

OP(ConstantOfShape) {
  UNUSED_ARGS;
  int64_t s[MAXD];
  int n = onnx_read_ints(c, in[0], s, MAXD, "shape");
  if (n < 0) return onnx_status();
  const Onnx__AttributeProto *a = onnx_attr(c, "value");
  kiln_tensor *v = a && a->t ? onnx_tensor_from_proto(a->t, NULL, "kiln_onnx_run") : kiln_scalar(KILN_F32, 0);
  if (!v) return onnx_status();
  if (kiln_numel(v) != 1) return onnx_fail(c, KILN_ERR_SHAPE, "value must hold one element");
  return onnx_set(out, kiln_contiguous(kiln_expand(kiln_reshape(v, 0, NULL), n, s)));
}

OP(Range) {
  UNUSED_ARGS;
  double st, lim, dl;
  if (kiln_item_f64(in[0], &st) < 0 || kiln_item_f64(in[1], &lim) < 0 || kiln_item_f64(in[2], &dl) < 0) return onnx_status();
  if (dl == 0) return onnx_fail(c, KILN_ERR_ARG, "delta 0");
  int64_t n = (int64_t)fmax(ceil((lim - st) / dl), 0);
  kiln_dtype d = kiln_dtype_of(in[0]);
  /* start + k delta in the input's type, as ONNX defines the elements */
  kiln_tensor *k = kiln_arange(KILN_F64, 0, (double)n, 1);
  return onnx_set(out, kiln_to_dtype(kiln_add_scalar(kiln_mul_scalar(k, dl), st), d));
}

OP(Dropout) {
  UNUSED_ARGS;
  if (n_in > 2 && in[2]) {
    double training;
    if (kiln_item_f64(in[2], &training) < 0) return onnx_status();
    if (training != 0) return onnx_fail(c, KILN_ERR_UNSUPPORTED, "training mode (Kiln runs inference)");
  }
  out[0] = in[0];
  if (n_out > 1) out[1] = kiln_full(KILN_BOOL, kiln_dim(in[0]), kiln_sizes(in[0]), 1);
  return n_out > 1 && !out[1] ? onnx_status() : KILN_OK;
}

OP(Trilu) {
  UNUSED_ARGS;
  double k = 0;
  if (n_in > 1 && in[1] && kiln_item_f64(in[1], &k) < 0) return onnx_status();
  bool upper = onnx_attr_int(c, "upper", 1) != 0;
  return onnx_set(out, upper ? kiln_triu(in[0], (int64_t)k) : kiln_tril(in[0], (int64_t)k));
}

/* x [N, C, H, W] through a 6-d reshape and permutation to [N, C', H', W']. */
static int shuffle(onnx_ctx *c, kiln_tensor *x, const int64_t *s6, const int *perm, const int64_t *s4, kiln_tensor **out) {
  if (kiln_dim(x) != 4) return onnx_fail(c, KILN_ERR_SHAPE, "input rank %d (needs 4)", kiln_dim(x));
  return onnx_set(out, kiln_reshape(kiln_permute(kiln_reshape(x, 6, s6), 6, perm), 4, s4));
}

OP(DepthToSpace) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int64_t b = onnx_attr_int(c, "blocksize", 0);
  if (kiln_dim(x) != 4 || b < 1 || kiln_size(x, 1) % (b * b)) return onnx_fail(c, KILN_ERR_SHAPE, "blocksize %lld for the input", (long long)b);
  int64_t n = kiln_size(x, 0), ch = kiln_size(x, 1) / (b * b), h = kiln_size(x, 2), w = kiln_size(x, 3);
  char mode[8];
  onnx_attr_string(c, "mode", "DCR", mode, sizeof mode);
  int64_t s4[4] = {n, ch, h * b, w * b};
  if (strcmp(mode, "CRD") == 0) return shuffle(c, x, (int64_t[]){n, ch, b, b, h, w}, (int[]){0, 1, 4, 2, 5, 3}, s4, out);
  return shuffle(c, x, (int64_t[]){n, b, b, ch, h, w}, (int[]){0, 3, 4, 1, 5, 2}, s4, out);
}

OP(SpaceToDepth) {
  UNUSED_ARGS;
  kiln_tensor *x = in[0];
  int64_t b = onnx_attr_int(c, "blocksize", 0);
  if (kiln_dim(x) != 4 || b < 1 || kiln_size(x, 2) % b || kiln_size(x, 3) % b)
    return onnx_fail(c, KILN_ERR_SHAPE, "blocksize %lld for the input", (long long)b);
  int64_t n = kiln_size(x, 0), ch = kiln_size(x, 1), h = kiln_size(x, 2) / b, w = kiln_size(x, 3) / b;
  return shuffle(c, x, (int64_t[]){n, ch, h, b, w, b}, (int[]){0, 3, 5, 1, 2, 4}, (int64_t[]){n, ch * b * b, h, w}, out);
}

const onnx_op onnx_ops_shape[] = {
    {"DepthToSpace", op_DepthToSpace, 1, 1, 1, 1},
    {"SpaceToDepth", op_SpaceToDepth, 1, 1, 1, 1},
    {"Reshape", op_Reshape, 2, 2, 1, 1},
    {"Flatten", op_Flatten, 1, 1, 1, 1},
    {"Transpose", op_Transpose, 1, 1, 1, 1},
    {"Squeeze", op_Squeeze, 1, 2, 1, 1},
    {"Unsqueeze", op_Unsqueeze, 1, 2, 1, 1},
    {"Concat", op_Concat, 1, -1, 1, 1},
    {"Split", op_Split, 1, 2, 1, -1},
    {"Slice", op_Slice, 1, 5, 1, 1},
    {"Gather", op_Gather, 2, 2, 1, 1},
    {"GatherElements", op_GatherElements, 2, 2, 1, 1},
    {"Expand", op_Expand, 2, 2, 1, 1},
    {"Tile", op_Tile, 2, 2, 1, 1},
    {"Pad", op_Pad, 1, 4, 1, 1},
    {"Shape", op_Shape, 1, 1, 1, 1},
    {"Size", op_Size, 1, 1, 1, 1},
    {"Constant", op_Constant, 0, 0, 1, 1},
    {"ConstantOfShape", op_ConstantOfShape, 1, 1, 1, 1},
    {"Range", op_Range, 3, 3, 1, 1},
    {"Dropout", op_Dropout, 1, 3, 1, 2},
    {"Trilu", op_Trilu, 1, 2, 1, 1},
    {NULL, NULL, 0, 0, 0, 0},
};
