/*
 * views.c — Torch's view functions: narrow, select, slice, transpose,
 * permute, unfold, expand, view/reshape, squeeze/unsqueeze, flatten,
 * as_strided, split and chunk.
 *
 * A view never copies: it is a new tensor handle over the same storage with
 * new sizes, strides and offset (all in elements), computed exactly as
 * PyTorch computes them (aten/src/ATen/native/TensorShape.cpp,
 * ExpandUtils.cpp, TensorUtils.cpp computeStride). Only reshape and flatten
 * fall back to a lazy contiguous copy (a CAST node) when the strides
 * cannot express the new sizes.
 *
 * Errors: NULL and an api_error that names the function and the offending
 * dims/sizes; the input tensor is never modified.
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#define SIZES_BUF 400 /* room for "[...]" of KILN_MAX_DIMS int64 values */

static const char *fmt_sizes(char *buf, const graph_view *v) {
  return api_fmt_sizes(buf, SIZES_BUF, v->ndim, v->sizes);
}

static const char *fmt_strides(char *buf, const graph_view *v) {
  return api_fmt_sizes(buf, SIZES_BUF, v->ndim, v->strides);
}

static const char *fmt_ints(char *buf, int n, const int *vals) {
  int64_t wide[KILN_MAX_DIMS];
  int k = n < KILN_MAX_DIMS ? n : KILN_MAX_DIMS;
  for (int i = 0; i < k; i++) wide[i] = vals[i];
  return api_fmt_sizes(buf, SIZES_BUF, k, wide);
}

/* A view of t: a view of a kiln_detach handle is detached too (Torch).
 * Views that repeat elements (expand, as_strided, unfold) can name more
 * elements than any buffer could hold: sizes whose element count
 * overflows are rejected as at creation (a copy of the view would need
 * that buffer; every op's result would have that count). */
static kiln_tensor *new_view(kiln_tensor *t, const graph_view *v, const char *fn) {
  if (!api_check_sizes(v->ndim, v->sizes, fn)) return NULL;
  return api_view(t, v, fn);
}

static void view_remove_dim(graph_view *v, int d) {
  for (int i = d; i < v->ndim - 1; i++) {
    v->sizes[i] = v->sizes[i + 1];
    v->strides[i] = v->strides[i + 1];
  }
  v->ndim--;
}

static void view_insert_dim(graph_view *v, int d, int64_t size, int64_t stride) {
  for (int i = v->ndim; i > d; i--) {
    v->sizes[i] = v->sizes[i - 1];
    v->strides[i] = v->strides[i - 1];
  }
  v->sizes[d] = size;
  v->strides[d] = stride;
  v->ndim++;
}

/* stride * step, or stride unchanged when that overflows: it only can when
 * the dim keeps at most one element, where its stride is never used. */
static int64_t scaled_stride(int64_t stride, int64_t step) {
  int64_t r;
  return __builtin_mul_overflow(stride, step, &r) ? stride : r;
}

/* A dim of t that must exist (t is not 0-d); -1 after an error. */
static int wrap_existing_dim(const kiln_tensor *t, int dim, const char *fn) {
  if (t->view.ndim == 0) {
    api_error(KILN_ERR_ARG, fn, "dim %d given for a 0-d tensor, which has no dims", dim);
    return -1;
  }
  return api_wrap_dim(dim, t->view.ndim, fn);
}

/*
 * Checks a view against a storage of storage_numel elements: sizes,
 * strides and offset non-negative, sizes whose element count (and the
 * strides of a contiguous copy) fit (api_check_sizes: an empty or
 * stride-0 view reaches little storage but can be copied), and the last
 * element it touches (sizes × strides, overflow-checked) inside the
 * storage. Shared with creation.c.
 */
bool ops_check_view(const graph_view *v, int64_t storage_numel, const char *fn) {
  char b[SIZES_BUF], c[SIZES_BUF];
  if (v->offset < 0) {
    api_error(KILN_ERR_ARG, fn, "negative storage offset %lld", (long long)v->offset);
    return false;
  }
  for (int i = 0; i < v->ndim; i++) {
    if (v->sizes[i] < 0 || v->strides[i] < 0) {
      api_error(KILN_ERR_ARG, fn, "sizes %s and strides %s must be non-negative", fmt_sizes(b, v),
                fmt_strides(c, v));
      return false;
    }
  }
  if (!api_check_sizes(v->ndim, v->sizes, fn)) return false; /* a count or a copy's strides past int64 */
  int64_t last = v->offset;
  bool empty = false, overflow = false;
  for (int i = 0; i < v->ndim; i++) {
    int64_t step;
    if (v->sizes[i] == 0) empty = true;
    else if (__builtin_mul_overflow(v->sizes[i] - 1, v->strides[i], &step) ||
             __builtin_add_overflow(last, step, &last))
      overflow = true;
  }
  if (empty) return true;
  if (overflow || last >= storage_numel) {
    api_error(KILN_ERR_SHAPE, fn, "sizes %s, strides %s and offset %lld reach past a storage of %lld elements",
              fmt_sizes(b, v), fmt_strides(c, v), (long long)v->offset, (long long)storage_numel);
    return false;
  }
  return true;
}

/* --------------------------------------------------- narrow, select, slice */

KILN_API kiln_tensor *kiln_narrow(kiln_tensor *t, int dim, int64_t start, int64_t length) {
  static const char fn[] = "kiln_narrow";
  if (!api_check(t, fn, "t")) return NULL;
  int d = wrap_existing_dim(t, dim, fn);
  if (d < 0) return NULL;
  int64_t size = t->view.sizes[d];
  if (length < 0) {
    api_error(KILN_ERR_ARG, fn, "length %lld must be non-negative", (long long)length);
    return NULL;
  }
  if (start < -size || start > size) {
    api_error(KILN_ERR_INDEX, fn, "start %lld out of range [%lld, %lld] for dim %d of size %lld", (long long)start,
              (long long)-size, (long long)size, d, (long long)size);
    return NULL;
  }
  if (start < 0) start += size;
  if (start > size - length) {
    api_error(KILN_ERR_INDEX, fn, "start %lld + length %lld exceeds size %lld of dim %d", (long long)start,
              (long long)length, (long long)size, d);
    return NULL;
  }
  graph_view v = t->view;
  v.offset += start * v.strides[d];
  v.sizes[d] = length;
  return new_view(t, &v, fn);
}

KILN_API kiln_tensor *kiln_select(kiln_tensor *t, int dim, int64_t index) {
  static const char fn[] = "kiln_select";
  if (!api_check(t, fn, "t")) return NULL;
  int d = wrap_existing_dim(t, dim, fn);
  if (d < 0) return NULL;
  int64_t size = t->view.sizes[d];
  if (index < -size || index >= size) {
    api_error(KILN_ERR_INDEX, fn, "index %lld out of range for dim %d of size %lld", (long long)index, d,
              (long long)size);
    return NULL;
  }
  if (index < 0) index += size;
  graph_view v = t->view;
  v.offset += index * v.strides[d];
  view_remove_dim(&v, d);
  return new_view(t, &v, fn);
}

/* Python's slice bound: negative counts from the end, then clamp to [0, size]. */
static int64_t clamp_bound(int64_t i, int64_t size) {
  if (i < 0) i += size;
  if (i < 0) return 0;
  return i > size ? size : i;
}

KILN_API kiln_tensor *kiln_slice(kiln_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
  static const char fn[] = "kiln_slice";
  if (!api_check(t, fn, "t")) return NULL;
  int d = wrap_existing_dim(t, dim, fn);
  if (d < 0) return NULL;
  if (step <= 0) {
    api_error(KILN_ERR_ARG, fn, "step %lld must be positive", (long long)step);
    return NULL;
  }
  int64_t size = t->view.sizes[d];
  start = clamp_bound(start, size);
  end = clamp_bound(end, size);
  int64_t len = end > start ? (end - start - 1) / step + 1 : 0;
  graph_view v = t->view;
  v.offset += start * v.strides[d];
  v.sizes[d] = len;
  v.strides[d] = scaled_stride(v.strides[d], step);
  return new_view(t, &v, fn);
}

/* ------------------------------------------------ transpose, t, permute */

KILN_API kiln_tensor *kiln_transpose(kiln_tensor *t, int d0, int d1) {
  static const char fn[] = "kiln_transpose";
  if (!api_check(t, fn, "t")) return NULL;
  int a = api_wrap_dim(d0, t->view.ndim, fn);
  if (a < 0) return NULL;
  int b = api_wrap_dim(d1, t->view.ndim, fn);
  if (b < 0) return NULL;
  graph_view v = t->view;
  if (v.ndim > 0) {
    v.sizes[a] = t->view.sizes[b];
    v.strides[a] = t->view.strides[b];
    v.sizes[b] = t->view.sizes[a];
    v.strides[b] = t->view.strides[a];
  }
  return new_view(t, &v, fn);
}

KILN_API kiln_tensor *kiln_t(kiln_tensor *t) {
  static const char fn[] = "kiln_t";
  if (!api_check(t, fn, "t")) return NULL;
  if (t->view.ndim > 2) {
    char b[SIZES_BUF];
    api_error(KILN_ERR_ARG, fn, "expects a tensor with <= 2 dims, got sizes %s", fmt_sizes(b, &t->view));
    return NULL;
  }
  graph_view v = t->view;
  if (v.ndim == 2) {
    v.sizes[0] = t->view.sizes[1];
    v.strides[0] = t->view.strides[1];
    v.sizes[1] = t->view.sizes[0];
    v.strides[1] = t->view.strides[0];
  }
  return new_view(t, &v, fn);
}

KILN_API kiln_tensor *kiln_permute(kiln_tensor *t, int ndim, const int *dims) {
  static const char fn[] = "kiln_permute";
  if (!api_check(t, fn, "t")) return NULL;
  char b[SIZES_BUF], c[SIZES_BUF];
  if (ndim != t->view.ndim || (ndim > 0 && !dims)) {
    api_error(KILN_ERR_ARG, fn, "%d dims given (dims %s) for a tensor of sizes %s", ndim,
              dims ? fmt_ints(c, ndim, dims) : "NULL", fmt_sizes(b, &t->view));
    return NULL;
  }
  graph_view v = t->view;
  bool seen[KILN_MAX_DIMS] = {false};
  for (int i = 0; i < ndim; i++) {
    int d = api_wrap_dim(dims[i], ndim, fn);
    if (d < 0) return NULL;
    if (seen[d]) {
      api_error(KILN_ERR_ARG, fn, "dims %s repeat dim %d", fmt_ints(c, ndim, dims), d);
      return NULL;
    }
    seen[d] = true;
    v.sizes[i] = t->view.sizes[d];
    v.strides[i] = t->view.strides[d];
  }
  return new_view(t, &v, fn);
}

/* ---------------------------------------------------------------- unfold */

/* As PyTorch: a 0-d tensor unfolds as if it had one dim of size 1. */
KILN_API kiln_tensor *kiln_unfold(kiln_tensor *t, int dim, int64_t size, int64_t step) {
  static const char fn[] = "kiln_unfold";
  if (!api_check(t, fn, "t")) return NULL;
  int ndim = t->view.ndim;
  int d = api_wrap_dim(dim, ndim, fn);
  if (d < 0) return NULL;
  int64_t max_size = ndim == 0 ? 1 : t->view.sizes[d];
  if (size < 0 || size > max_size) {
    api_error(KILN_ERR_SHAPE, fn, "window size %lld outside [0, %lld], the size of dim %d", (long long)size,
              (long long)max_size, d);
    return NULL;
  }
  if (step <= 0) {
    api_error(KILN_ERR_ARG, fn, "step %lld must be positive", (long long)step);
    return NULL;
  }
  if (ndim + 1 > KILN_MAX_DIMS) {
    api_error(KILN_ERR_SHAPE, fn, "result would have %d dims (max %d)", ndim + 1, KILN_MAX_DIMS);
    return NULL;
  }
  graph_view v = t->view;
  v.sizes[ndim] = size;
  v.strides[ndim] = ndim == 0 ? 1 : t->view.strides[d];
  v.ndim = ndim + 1;
  if (d < ndim) {
    v.sizes[d] = (t->view.sizes[d] - size) / step + 1;
    v.strides[d] = scaled_stride(t->view.strides[d], step);
  }
  return new_view(t, &v, fn);
}

/* ---------------------------------------------------------------- expand */

/* PyTorch's inferExpandGeometry: align dims from the right; a new leading
 * dim gets stride size*stride of the next dim unless it is broadcast. */
static bool expand_geometry(const graph_view *in, int ndim, const int64_t *sizes, graph_view *out,
                            const char *fn) {
  char b[SIZES_BUF], c[SIZES_BUF];
  graph_view r = {0};
  r.ndim = ndim;
  r.offset = in->offset;
  bool scalar = in->ndim == 0; /* PyTorch: a 0-d tensor expands with all strides 0 */
  for (int i = ndim - 1; i >= 0; i--) {
    int d = in->ndim - (ndim - i);
    int64_t size = d >= 0 ? in->sizes[d] : 1;
    int64_t stride = d >= 0 ? in->strides[d] : i + 1 < ndim ? r.strides[i + 1] : 1;
    if (d < 0 && i + 1 < ndim) /* a size-1 dim's stride is never used: any value that fits will do */
      stride = scaled_stride(stride, r.sizes[i + 1]);
    int64_t target = sizes[i];
    if (target == -1 && d >= 0) target = size;
    if (target < 0) {
      api_error(KILN_ERR_SHAPE, fn, "size %lld at dim %d of %s is invalid (only -1 on an existing dim keeps a size)",
                (long long)sizes[i], i, api_fmt_sizes(c, sizeof c, ndim, sizes));
      return false;
    }
    if (size != target) {
      if (size != 1) {
        api_error(KILN_ERR_SHAPE, fn, "size %lld of dim %d must match %lld at non-singleton dim %d; sizes %s, target %s",
                  (long long)size, d, (long long)target, i, fmt_sizes(b, in), api_fmt_sizes(c, sizeof c, ndim, sizes));
        return false;
      }
      size = target;
      stride = 0;
    }
    r.sizes[i] = size;
    r.strides[i] = scalar ? 0 : stride;
  }
  if (!api_check_sizes(ndim, r.sizes, fn)) return false; /* an element count that overflows */
  *out = r;
  return true;
}

KILN_API kiln_tensor *kiln_expand(kiln_tensor *t, int ndim, const int64_t *sizes) {
  static const char fn[] = "kiln_expand";
  if (!api_check(t, fn, "t")) return NULL;
  char b[SIZES_BUF];
  if (ndim < t->view.ndim || ndim > KILN_MAX_DIMS || (ndim > 0 && !sizes)) {
    api_error(KILN_ERR_ARG, fn, "%d sizes given for a tensor of sizes %s (expected %d to %d)", ndim,
              fmt_sizes(b, &t->view), t->view.ndim, KILN_MAX_DIMS);
    return NULL;
  }
  graph_view v;
  if (!expand_geometry(&t->view, ndim, sizes, &v, fn)) return NULL;
  return new_view(t, &v, fn);
}

KILN_API kiln_tensor *kiln_expand_as(kiln_tensor *t, const kiln_tensor *other) {
  static const char fn[] = "kiln_expand_as";
  if (!api_check(t, fn, "t") || !api_check(other, fn, "other")) return NULL;
  char b[SIZES_BUF], c[SIZES_BUF];
  if (other->view.ndim < t->view.ndim) {
    api_error(KILN_ERR_SHAPE, fn, "cannot expand sizes %s to fewer dims %s", fmt_sizes(b, &t->view),
              fmt_sizes(c, &other->view));
    return NULL;
  }
  graph_view v;
  if (!expand_geometry(&t->view, other->view.ndim, other->view.sizes, &v, fn)) return NULL;
  return new_view(t, &v, fn);
}

/* ------------------------------------------------------ view and reshape */

/* Fills out[ndim] from sizes with a -1 inferred from numel (PyTorch's
 * infer_size). False after an error. */
static bool infer_sizes(int64_t numel, int ndim, const int64_t *sizes, int64_t *out, const char *fn) {
  char b[SIZES_BUF];
  if (ndim < 0 || ndim > KILN_MAX_DIMS || (ndim > 0 && !sizes)) {
    api_error(KILN_ERR_ARG, fn, "ndim %d outside [0, %d] or sizes NULL", ndim, KILN_MAX_DIMS);
    return false;
  }
  int infer = -1;
  int64_t product = 1, span = 1; /* span: zeros counted as 1, the strides' reach */
  bool overflow = false;
  for (int i = 0; i < ndim; i++) {
    out[i] = sizes[i];
    if (sizes[i] == -1 && infer < 0) infer = i;
    else if (sizes[i] < 0) {
      api_error(KILN_ERR_SHAPE, fn, "invalid size %lld in %s (only one -1 may be inferred)", (long long)sizes[i],
                api_fmt_sizes(b, sizeof b, ndim, sizes));
      return false;
    } else if (__builtin_mul_overflow(product, sizes[i], &product) ||
               __builtin_mul_overflow(span, sizes[i] > 0 ? sizes[i] : 1, &span))
      overflow = true;
  }
  bool ok = !overflow && (infer >= 0 ? product != 0 && numel % product == 0 : product == numel);
  if (infer >= 0 && product == 0 && numel == 0) {
    api_error(KILN_ERR_SHAPE, fn, "shape %s is ambiguous: the -1 could be any size for %lld elements",
              api_fmt_sizes(b, sizeof b, ndim, sizes), (long long)numel);
    return false;
  }
  if (!ok) {
    api_error(KILN_ERR_SHAPE, fn, "shape %s is invalid for input of %lld elements",
              api_fmt_sizes(b, sizeof b, ndim, sizes), (long long)numel);
    return false;
  }
  if (infer >= 0) out[infer] = numel / product;
  return true;
}

/* graph_view_reshape, plus PyTorch's rule that an empty tensor viewed with
 * its own sizes keeps its strides. */
static bool reshape_view(const graph_view *v, int ndim, const int64_t *sizes, graph_view *out) {
  if (graph_view_numel(v) == 0 && ndim == v->ndim &&
      memcmp(sizes, v->sizes, sizeof *sizes * (size_t)ndim) == 0) {
    *out = *v;
    return true;
  }
  return graph_view_reshape(v, ndim, sizes, out);
}

static kiln_tensor *view_impl(kiln_tensor *t, int ndim, const int64_t *sizes, const char *fn) {
  int64_t shape[KILN_MAX_DIMS];
  if (!infer_sizes(graph_view_numel(&t->view), ndim, sizes, shape, fn)) return NULL;
  graph_view v;
  if (!reshape_view(&t->view, ndim, shape, &v)) {
    char a[SIZES_BUF], b[SIZES_BUF], c[SIZES_BUF];
    api_error(KILN_ERR_SHAPE, fn,
              "size %s is not compatible with sizes %s and strides %s; call kiln_contiguous first or use kiln_reshape",
              api_fmt_sizes(a, sizeof a, ndim, shape), fmt_sizes(b, &t->view), fmt_strides(c, &t->view));
    return NULL;
  }
  return new_view(t, &v, fn);
}

KILN_API kiln_tensor *kiln_view(kiln_tensor *t, int ndim, const int64_t *sizes) {
  if (!api_check(t, "kiln_view", "t")) return NULL;
  return view_impl(t, ndim, sizes, "kiln_view");
}

KILN_API kiln_tensor *kiln_view_as(kiln_tensor *t, const kiln_tensor *other) {
  if (!api_check(t, "kiln_view_as", "t") || !api_check(other, "kiln_view_as", "other")) return NULL;
  return view_impl(t, other->view.ndim, other->view.sizes, "kiln_view_as");
}

/* A CAST node reading t's current version through t's view: the lazy
 * contiguous copy of t, converted to dtype, with sizes t's sizes, on
 * `device`. */
static graph_node *copy_node(kiln_tensor *t, kiln_dtype dtype, kiln_device device) {
  graph_node *n = graph_node_new(GRAPH_OP_CAST, dtype, t->view.ndim, t->view.sizes);
  if (n && !api_add_input(n, t, &t->view)) {
    graph_node_release(n);
    return NULL;
  }
  if (n) n->device = device;
  return n;
}

/* The lazy copy of t viewed (contiguously) with sizes [ndim], whose
 * product is t's numel. */
static kiln_tensor *copy_with_sizes(kiln_tensor *t, kiln_dtype dtype, kiln_device device, int ndim,
                                    const int64_t *sizes, const char *fn) {
  graph_node *n = copy_node(t, dtype, device);
  kiln_storage *s = n ? graph_storage_new(dtype, n->numel, n) : NULL;
  if (!s) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  graph_view v = graph_view_contiguous(ndim, sizes);
  kiln_tensor *r = api_tensor(s, &v, fn);
  kiln_storage_release(s);
  return r;
}

kiln_tensor *ops_copy_to(kiln_tensor *t, kiln_dtype dtype, kiln_device device, const char *fn) {
  if (!api_check(t, fn, "t") || !api_check_dtype(dtype, fn)) return NULL;
  return copy_with_sizes(t, dtype, device, t->view.ndim, t->view.sizes, fn);
}

kiln_tensor *ops_copy_contiguous(kiln_tensor *t, kiln_dtype dtype, const char *fn) {
  return ops_copy_to(t, dtype, t ? t->storage->device : KILN_CPU, fn);
}

/* A view of t with sizes [ndim] (already inferred) when the strides allow,
 * else a lazy copy. */
static kiln_tensor *reshape_impl(kiln_tensor *t, int ndim, const int64_t *shape, const char *fn) {
  graph_view v;
  if (reshape_view(&t->view, ndim, shape, &v)) return new_view(t, &v, fn);
  return copy_with_sizes(t, t->storage->dtype, t->storage->device, ndim, shape, fn);
}

KILN_API kiln_tensor *kiln_reshape(kiln_tensor *t, int ndim, const int64_t *sizes) {
  static const char fn[] = "kiln_reshape";
  if (!api_check(t, fn, "t")) return NULL;
  int64_t shape[KILN_MAX_DIMS];
  if (!infer_sizes(graph_view_numel(&t->view), ndim, sizes, shape, fn)) return NULL;
  return reshape_impl(t, ndim, shape, fn);
}

/* ------------------------------------------ squeeze, unsqueeze, flatten */

KILN_API kiln_tensor *kiln_squeeze(kiln_tensor *t) {
  if (!api_check(t, "kiln_squeeze", "t")) return NULL;
  graph_view v = t->view;
  for (int i = v.ndim - 1; i >= 0; i--)
    if (v.sizes[i] == 1) view_remove_dim(&v, i);
  return new_view(t, &v, "kiln_squeeze");
}

KILN_API kiln_tensor *kiln_squeeze_dim(kiln_tensor *t, int dim) {
  static const char fn[] = "kiln_squeeze_dim";
  if (!api_check(t, fn, "t")) return NULL;
  int d = api_wrap_dim(dim, t->view.ndim, fn);
  if (d < 0) return NULL;
  graph_view v = t->view;
  if (v.ndim > 0 && v.sizes[d] == 1) view_remove_dim(&v, d);
  return new_view(t, &v, fn);
}

/* The new dim's stride is PyTorch's: size*stride of the dim it precedes,
 * 1 at the end. */
KILN_API kiln_tensor *kiln_unsqueeze(kiln_tensor *t, int dim) {
  static const char fn[] = "kiln_unsqueeze";
  if (!api_check(t, fn, "t")) return NULL;
  int ndim = t->view.ndim;
  if (ndim + 1 > KILN_MAX_DIMS) {
    api_error(KILN_ERR_SHAPE, fn, "result would have %d dims (max %d)", ndim + 1, KILN_MAX_DIMS);
    return NULL;
  }
  int d = api_wrap_dim(dim, ndim + 1, fn);
  if (d < 0) return NULL;
  graph_view v = t->view;
  int64_t stride = d >= ndim ? 1 : v.sizes[d] * v.strides[d];
  view_insert_dim(&v, d, 1, stride);
  return new_view(t, &v, fn);
}

KILN_API kiln_tensor *kiln_flatten(kiln_tensor *t, int start_dim, int end_dim) {
  static const char fn[] = "kiln_flatten";
  if (!api_check(t, fn, "t")) return NULL;
  int ndim = t->view.ndim;
  int s = api_wrap_dim(start_dim, ndim, fn);
  if (s < 0) return NULL;
  int e = api_wrap_dim(end_dim, ndim, fn);
  if (e < 0) return NULL;
  if (s > e) {
    api_error(KILN_ERR_ARG, fn, "start_dim %d (dim %d) comes after end_dim %d (dim %d)", start_dim, s, end_dim, e);
    return NULL;
  }
  int64_t one = 1;
  if (ndim == 0) return reshape_impl(t, 1, &one, fn); /* PyTorch: 0-d flattens to [1] */
  if (s == e) return new_view(t, &t->view, fn);
  int64_t shape[KILN_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < s; i++) shape[n++] = t->view.sizes[i];
  int64_t merged = 1;
  for (int i = s; i <= e; i++) merged *= t->view.sizes[i];
  shape[n++] = merged;
  for (int i = e + 1; i < ndim; i++) shape[n++] = t->view.sizes[i];
  return reshape_impl(t, n, shape, fn);
}

/* ------------------------------------------------------------ as_strided */

KILN_API kiln_tensor *kiln_as_strided(kiln_tensor *t, int ndim, const int64_t *sizes, const int64_t *strides,
                                      int64_t offset) {
  static const char fn[] = "kiln_as_strided";
  if (!api_check(t, fn, "t")) return NULL;
  if (ndim < 0 || ndim > KILN_MAX_DIMS || (ndim > 0 && (!sizes || !strides))) {
    api_error(KILN_ERR_ARG, fn, "ndim %d outside [0, %d] or sizes/strides NULL", ndim, KILN_MAX_DIMS);
    return NULL;
  }
  graph_view v = {0};
  v.ndim = ndim;
  v.offset = offset;
  for (int i = 0; i < ndim; i++) {
    v.sizes[i] = sizes[i];
    v.strides[i] = strides[i];
  }
  if (!ops_check_view(&v, t->storage->numel, fn)) return NULL;
  return new_view(t, &v, fn);
}

/* --------------------------------------------------------- split, chunk */

/* Stores narrow(t, d, i*size, len_i) for i < min(count, max_out) in out.
 * Pieces are built untracked first so that a failure leaves out untouched
 * and no scope holds a released tensor. */
static int store_pieces(kiln_tensor *t, int d, int64_t count, const int64_t *lens, int64_t size, kiln_tensor **out,
                        int max_out, const char *fn) {
  int n = count < max_out ? (int)count : max_out;
  kiln_tensor *made[64], **pieces = n <= 64 ? made : graph_calloc((size_t)n, sizeof *pieces);
  if (!pieces) return api_error(KILN_ERR_OOM, fn, "out of memory");
  for (int i = 0; i < n; i++) {
    graph_view v = t->view;
    v.offset += (int64_t)i * size * v.strides[d];
    v.sizes[d] = lens ? lens[i] : size;
    pieces[i] = graph_tensor_new(t->storage, &v);
    if (pieces[i]) pieces[i]->detached = t->detached;
    if (pieces[i]) continue;
    for (int j = 0; j < i; j++) kiln_release(pieces[j]);
    if (pieces != made) free(pieces);
    return api_error(KILN_ERR_OOM, fn, "out of memory");
  }
  for (int i = 0; i < n; i++) out[i] = api_track(pieces[i]);
  if (pieces != made) free(pieces);
  return (int)count;
}

/* Common checks of split/chunk; the wrapped dim or -1. */
static int split_dim(kiln_tensor *t, int dim, kiln_tensor **out, int max_out, const char *fn) {
  if (!api_check(t, fn, "t")) return -1;
  if (max_out < 0 || (max_out > 0 && !out)) {
    api_error(KILN_ERR_ARG, fn, "max_out %d with out %s", max_out, out ? "non-NULL" : "NULL");
    return -1;
  }
  return wrap_existing_dim(t, dim, fn);
}

/* The last of `count` pieces of `size` covering dim_size elements. */
static int split_last(kiln_tensor *t, int d, int64_t count, int64_t size, kiln_tensor **out, int max_out,
                      const char *fn) {
  int64_t dim_size = t->view.sizes[d];
  if (count > 2147483647) return api_error(KILN_ERR_ARG, fn, "%lld pieces exceed an int", (long long)count);
  int64_t last = dim_size - size * (count - 1);
  int n = count < max_out ? (int)count : max_out;
  int64_t lens_small[64], *lens = n <= 64 ? lens_small : graph_malloc(sizeof *lens * (size_t)(n > 0 ? n : 1));
  if (!lens) return api_error(KILN_ERR_OOM, fn, "out of memory");
  for (int i = 0; i < n; i++) lens[i] = i == count - 1 ? last : size;
  int r = store_pieces(t, d, count, lens, size, out, max_out, fn);
  if (lens != lens_small) free(lens);
  return r;
}

KILN_API int kiln_split(kiln_tensor *t, int64_t size, int dim, kiln_tensor **out, int max_out) {
  static const char fn[] = "kiln_split";
  int d = split_dim(t, dim, out, max_out, fn);
  if (d < 0) return api_status();
  int64_t dim_size = t->view.sizes[d];
  if (size < 0 || (size == 0 && dim_size != 0)) {
    return api_error(KILN_ERR_ARG, fn, "split size %lld is invalid for dim %d of size %lld", (long long)size, d,
                     (long long)dim_size);
  }
  int64_t count = size == 0 ? 1 : dim_size / size + (dim_size % size != 0);
  if (count < 1) count = 1;
  return split_last(t, d, count, size, out, max_out, fn);
}

KILN_API int kiln_chunk(kiln_tensor *t, int n, int dim, kiln_tensor **out, int max_out) {
  static const char fn[] = "kiln_chunk";
  int d = split_dim(t, dim, out, max_out, fn);
  if (d < 0) return api_status();
  if (n <= 0) return api_error(KILN_ERR_ARG, fn, "chunk count %d must be positive", n);
  int64_t dim_size = t->view.sizes[d];
  int64_t size = (dim_size + n - 1) / n;
  if (dim_size == 0) return split_last(t, d, n, 0, out, max_out, fn); /* n empty pieces, as PyTorch */
  return kiln_split(t, size, d, out, max_out);
}
