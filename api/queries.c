/*
 * queries.c — read-only questions about a tensor's view: dims, sizes,
 * strides (in elements), offset, element count, dtype, device, contiguity.
 *
 * None of these ever forces a computation. A NULL tensor keeps the first
 * error (api_check) and gets -1, NULL or false.
 */
#include "api_internal.h"

KILN_API int kiln_dim(const kiln_tensor *t) {
  if (!api_check(t, "kiln_dim", "t")) return -1;
  return t->view.ndim;
}

/* The wrapped index of an existing dim of t, or -1 after an error. A 0-d
 * tensor has no dim to ask about (Torch: "tensor has no dimensions"). */
static int existing_dim(const kiln_tensor *t, int dim, const char *fn) {
  if (!api_check(t, fn, "t")) return -1;
  if (t->view.ndim == 0) {
    api_error(KILN_ERR_ARG, fn, "dim %d given for a 0-d tensor, which has no dims", dim);
    return -1;
  }
  return api_wrap_dim(dim, t->view.ndim, fn);
}

KILN_API int64_t kiln_size(const kiln_tensor *t, int dim) {
  int d = existing_dim(t, dim, "kiln_size");
  return d < 0 ? -1 : t->view.sizes[d];
}

KILN_API const int64_t *kiln_sizes(const kiln_tensor *t) {
  if (!api_check(t, "kiln_sizes", "t")) return NULL;
  return t->view.sizes;
}

KILN_API int64_t kiln_stride(const kiln_tensor *t, int dim) {
  int d = existing_dim(t, dim, "kiln_stride");
  return d < 0 ? -1 : t->view.strides[d];
}

KILN_API const int64_t *kiln_strides(const kiln_tensor *t) {
  if (!api_check(t, "kiln_strides", "t")) return NULL;
  return t->view.strides;
}

KILN_API int64_t kiln_storage_offset(const kiln_tensor *t) {
  if (!api_check(t, "kiln_storage_offset", "t")) return -1;
  return t->view.offset;
}

KILN_API int64_t kiln_numel(const kiln_tensor *t) {
  if (!api_check(t, "kiln_numel", "t")) return -1;
  return graph_view_numel(&t->view);
}

KILN_API kiln_dtype kiln_dtype_of(const kiln_tensor *t) {
  if (!api_check(t, "kiln_dtype_of", "t")) return (kiln_dtype)-1;
  return t->storage->dtype;
}

KILN_API kiln_device kiln_device_of(const kiln_tensor *t) {
  if (!api_check(t, "kiln_device_of", "t")) return (kiln_device)-1;
  return t->storage->device;
}

KILN_API bool kiln_is_contiguous(const kiln_tensor *t) {
  if (!api_check(t, "kiln_is_contiguous", "t")) return false;
  return graph_view_is_contiguous(&t->view);
}

KILN_API bool kiln_is_same_size(const kiln_tensor *a, const kiln_tensor *b) {
  if (!api_check(a, "kiln_is_same_size", "a") || !api_check(b, "kiln_is_same_size", "b")) return false;
  if (a->view.ndim != b->view.ndim) return false;
  for (int i = 0; i < a->view.ndim; i++)
    if (a->view.sizes[i] != b->view.sizes[i]) return false;
  return true;
}

KILN_API bool kiln_is_set_to(const kiln_tensor *a, const kiln_tensor *b) {
  if (!api_check(a, "kiln_is_set_to", "a") || !api_check(b, "kiln_is_set_to", "b")) return false;
  if (a->storage != b->storage || a->view.offset != b->view.offset) return false;
  if (!kiln_is_same_size(a, b)) return false;
  for (int i = 0; i < a->view.ndim; i++)
    if (a->view.strides[i] != b->view.strides[i]) return false;
  return true;
}
