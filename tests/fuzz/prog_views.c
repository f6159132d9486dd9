/*
 * prog_views.c — the views of fuzz_program's host reference (prog_ref.h):
 * the sizes, strides and offset Torch gives for narrow, select, slice,
 * transpose, permute, expand, unfold, as_strided, squeeze/unsqueeze and
 * view/reshape (PyTorch's computeStride), and the status Kiln documents
 * for bad arguments. Pure view arithmetic: no values.
 */
#include "prog_ref.h"

#include <string.h>

int pr_wrap_dim(int dim, int ndim) {
  int n = ndim > 0 ? ndim : 1; /* a 0-d tensor accepts 0 and -1, as in Torch */
  if (dim < -n || dim >= n) return -1;
  return dim < 0 ? dim + n : dim;
}

static void remove_dim(pview *v, int d) {
  for (int i = d; i + 1 < v->ndim; i++) v->size[i] = v->size[i + 1], v->stride[i] = v->stride[i + 1];
  v->ndim--;
}

static void insert_dim(pview *v, int d, int64_t size, int64_t stride) {
  for (int i = v->ndim; i > d; i--) v->size[i] = v->size[i - 1], v->stride[i] = v->stride[i - 1];
  v->size[d] = size;
  v->stride[d] = stride;
  v->ndim++;
}

int pr_narrow(const pview *in, int dim, int64_t start, int64_t length, pview *out) {
  int d = pr_wrap_dim(dim, in->ndim);
  if (in->ndim == 0 || d < 0 || length < 0) return KILN_ERR_ARG;
  int64_t size = in->size[d];
  if (start < -size || start > size) return KILN_ERR_INDEX;
  if (start < 0) start += size;
  if (start + length > size) return KILN_ERR_INDEX;
  *out = *in;
  out->off += start * in->stride[d];
  out->size[d] = length;
  return KILN_OK;
}

int pr_select(const pview *in, int dim, int64_t index, pview *out) {
  int d = pr_wrap_dim(dim, in->ndim);
  if (in->ndim == 0 || d < 0) return KILN_ERR_ARG;
  if (index < -in->size[d] || index >= in->size[d]) return KILN_ERR_INDEX;
  if (index < 0) index += in->size[d];
  *out = *in;
  out->off += index * in->stride[d];
  remove_dim(out, d);
  return KILN_OK;
}

/* Python's bound: negative counts from the end, then clamped. */
static int64_t bound(int64_t i, int64_t size) {
  if (i < 0) i += size;
  return i < 0 ? 0 : i > size ? size : i;
}

int pr_slice(const pview *in, int dim, int64_t start, int64_t end, int64_t step, pview *out) {
  int d = pr_wrap_dim(dim, in->ndim);
  if (in->ndim == 0 || d < 0 || step <= 0) return KILN_ERR_ARG;
  int64_t size = in->size[d];
  start = bound(start, size);
  end = bound(end, size);
  *out = *in;
  out->off += start * in->stride[d];
  out->size[d] = end > start ? (end - start - 1) / step + 1 : 0;
  out->stride[d] = in->stride[d] * step;
  return KILN_OK;
}

int pr_transpose(const pview *in, int d0, int d1, pview *out) {
  int a = pr_wrap_dim(d0, in->ndim), b = pr_wrap_dim(d1, in->ndim);
  if (a < 0 || b < 0) return KILN_ERR_ARG;
  *out = *in;
  if (in->ndim == 0) return KILN_OK;
  out->size[a] = in->size[b], out->stride[a] = in->stride[b];
  out->size[b] = in->size[a], out->stride[b] = in->stride[a];
  return KILN_OK;
}

int pr_permute(const pview *in, const int *dims, pview *out) {
  bool seen[P_MAX_DIMS] = {false};
  *out = *in;
  for (int i = 0; i < in->ndim; i++) {
    int d = pr_wrap_dim(dims[i], in->ndim);
    if (d < 0 || seen[d]) return KILN_ERR_ARG;
    seen[d] = true;
    out->size[i] = in->size[d];
    out->stride[i] = in->stride[d];
  }
  return KILN_OK;
}

/* PyTorch's inferExpandGeometry: dims aligned from the right; a size-1
 * dim (or a new leading one) may take any size, with stride 0. */
int pr_expand(const pview *in, int ndim, const int64_t *sizes, pview *out) {
  if (ndim < in->ndim) return KILN_ERR_ARG;
  pview r = {.st = in->st, .ndim = ndim, .off = in->off};
  for (int i = ndim - 1; i >= 0; i--) {
    int d = in->ndim - (ndim - i);
    int64_t size = d >= 0 ? in->size[d] : 1;
    int64_t stride = d >= 0 ? in->stride[d] : i + 1 < ndim ? r.size[i + 1] * r.stride[i + 1] : 1;
    int64_t target = sizes[i] == -1 && d >= 0 ? size : sizes[i];
    if (target < 0) return KILN_ERR_SHAPE;
    if (size != target) {
      if (size != 1) return KILN_ERR_SHAPE;
      size = target;
      stride = 0;
    }
    r.size[i] = size;
    r.stride[i] = in->ndim == 0 ? 0 : stride;
  }
  *out = r;
  return KILN_OK;
}

/* As PyTorch: a 0-d tensor unfolds as if it had one dim of size 1. */
int pr_unfold(const pview *in, int dim, int64_t size, int64_t step, pview *out) {
  int d = pr_wrap_dim(dim, in->ndim);
  if (d < 0) return KILN_ERR_ARG;
  int64_t max = in->ndim == 0 ? 1 : in->size[d];
  if (size < 0 || size > max) return KILN_ERR_SHAPE;
  if (step <= 0) return KILN_ERR_ARG;
  *out = *in;
  out->size[in->ndim] = size;
  out->stride[in->ndim] = in->ndim == 0 ? 1 : in->stride[d];
  out->ndim = in->ndim + 1;
  if (d < in->ndim) {
    out->size[d] = (in->size[d] - size) / step + 1;
    out->stride[d] = in->stride[d] * step;
  }
  return KILN_OK;
}

int pr_as_strided(const pmodel *m, const pview *in, int ndim, const int64_t *sizes, const int64_t *strides,
                  int64_t off, pview *out) {
  if (off < 0) return KILN_ERR_ARG;
  pview r = {.st = in->st, .ndim = ndim, .off = off};
  int64_t last = off;
  bool empty = false;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0 || strides[d] < 0) return KILN_ERR_ARG;
    r.size[d] = sizes[d], r.stride[d] = strides[d];
    if (sizes[d] == 0) empty = true;
    else last += (sizes[d] - 1) * strides[d];
  }
  if (!empty && last >= m->s[in->st].n) return KILN_ERR_SHAPE;
  *out = r;
  return KILN_OK;
}

int pr_unsqueeze(const pview *in, int dim, pview *out) {
  int d = pr_wrap_dim(dim, in->ndim + 1);
  if (d < 0) return KILN_ERR_ARG;
  *out = *in;
  insert_dim(out, d, 1, d >= in->ndim ? 1 : in->size[d] * in->stride[d]);
  return KILN_OK;
}

int pr_squeeze_dim(const pview *in, int dim, pview *out) {
  int d = pr_wrap_dim(dim, in->ndim);
  if (d < 0) return KILN_ERR_ARG;
  *out = *in;
  if (in->ndim > 0 && in->size[d] == 1) remove_dim(out, d);
  return KILN_OK;
}

/* PyTorch's infer_size: at most one -1, filled from numel. */
static int infer(int64_t numel, int ndim, const int64_t *sizes, int64_t *out) {
  int at = -1;
  int64_t product = 1;
  for (int i = 0; i < ndim; i++) {
    out[i] = sizes[i];
    if (sizes[i] == -1 && at < 0) at = i;
    else if (sizes[i] < 0) return KILN_ERR_SHAPE;
    else product *= sizes[i];
  }
  if (at < 0) return product == numel ? KILN_OK : KILN_ERR_SHAPE;
  if (product == 0 || numel % product != 0) return KILN_ERR_SHAPE;
  out[at] = numel / product;
  return KILN_OK;
}

/* PyTorch's computeStride: new sizes over the old strides, when each
 * group of new dims multiplies to a run of old dims contiguous with each
 * other. False when none exists (a copy is needed). */
static bool compute_stride(const pview *in, int ndim, const int64_t *size, int64_t *stride) {
  int64_t numel = pv_numel(in);
  if (in->ndim == 0 || numel == 0) { /* NumPy's choice: contiguous strides */
    if (numel == 0 && ndim == in->ndim && !memcmp(size, in->size, sizeof *size * (size_t)ndim)) {
      memcpy(stride, in->stride, sizeof *stride * (size_t)ndim);
      return true;
    }
    pview c = pv_contiguous(0, ndim, size);
    memcpy(stride, c.stride, sizeof *stride * (size_t)ndim);
    return true;
  }
  int view_d = ndim - 1;
  int64_t base = in->stride[in->ndim - 1], tensor_numel = 1, view_numel = 1;
  for (int td = in->ndim - 1; td >= 0; td--) {
    tensor_numel *= in->size[td];
    if (td > 0 && (in->size[td - 1] == 1 || in->stride[td - 1] == tensor_numel * base)) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || size[view_d] == 1)) {
      stride[view_d] = view_numel * base;
      view_numel *= size[view_d--];
    }
    if (view_numel != tensor_numel) return false;
    if (td > 0) base = in->stride[td - 1], tensor_numel = view_numel = 1;
  }
  return view_d == -1;
}

int pr_view(const pview *in, int ndim, const int64_t *sizes, pview *out, bool *copy) {
  int64_t size[P_MAX_DIMS], stride[P_MAX_DIMS];
  int st = infer(pv_numel(in), ndim, sizes, size);
  if (st != KILN_OK) return st;
  *copy = !compute_stride(in, ndim, size, stride);
  *out = (pview){.st = in->st, .ndim = ndim, .off = in->off};
  memcpy(out->size, size, sizeof size);
  memcpy(out->stride, stride, sizeof stride); /* meaningless when *copy */
  return KILN_OK;
}
