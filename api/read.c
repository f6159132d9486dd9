/*
 * read.c — forcing and reading values, and single-element writes.
 *
 * Forcing hands the storages' current versions to the runtime; reading
 * then walks the realized buffer through the tensor's view in row-major
 * order. kiln_set records an ASSIGN (record.c) like any other in-place
 * write, so it is lazy and seen by every tensor sharing the storage.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "runtime.h"

int api_force_nodes(graph_node *const *nodes, int n, const char *fn) {
  char err[512];
  int st = rt_realize(nodes, n, err, sizeof err);
  if (st != KILN_OK) api_error((kiln_status)st, fn, "%s", err);
  return st;
}

graph_node *api_force(kiln_tensor *t, const char *fn) {
  graph_node *v = t->storage->version;
  if (api_force_nodes(&v, 1, fn) != KILN_OK) return NULL;
  return t->storage->version;
}

/* bytes of b at byte offset into dst, from the host or the device.
 * Returns KILN_OK or the error's status (error set). */
static int copy_out(const graph_buffer *b, int64_t offset, int64_t bytes, void *dst, const char *fn) {
  if (b->device == KILN_CPU) {
    memcpy(dst, (const char *)b->data + offset, (size_t)bytes);
    return KILN_OK;
  }
  char err[512];
  int st = rt_device_download(dst, b, offset, bytes, err, sizeof err);
  if (st != KILN_OK) api_error((kiln_status)st, fn, "%s", err);
  return st;
}

const char *api_host_data(kiln_tensor *t, const char *fn, void **tmp) {
  *tmp = NULL;
  graph_node *v = api_force(t, fn);
  if (!v) return NULL;
  const graph_buffer *b = v->buffer;
  if (b->device == KILN_CPU) return b->data;
  *tmp = graph_malloc((size_t)(b->bytes > 0 ? b->bytes : 1));
  if (!*tmp) {
    api_error(KILN_ERR_OOM, fn, "out of memory copying %lld bytes from the device", (long long)b->bytes);
    return NULL;
  }
  if (copy_out(b, 0, b->bytes, *tmp, fn) == KILN_OK) return *tmp;
  free(*tmp);
  *tmp = NULL;
  return NULL;
}

bool api_check_host(const kiln_tensor *t, const char *fn) {
  if (t->storage->device == KILN_CPU) return true;
  api_error(KILN_ERR_DEVICE, fn,
            "the tensor is on KILN_CUDA and this call needs it in host memory; copy it with "
            "kiln_to_device(t, KILN_CPU) first");
  return false;
}

KILN_API int kiln_realize(kiln_tensor *t) {
  if (!api_check(t, "kiln_realize", "t")) return KILN_ERR_ARG;
  return api_force(t, "kiln_realize") ? KILN_OK : api_status();
}

KILN_API int kiln_realize_many(kiln_tensor *const *ts, int n) {
  int st = api_check_list(ts, n, "tensor", "kiln_realize_many");
  if (st != KILN_OK) return st;
  graph_node **nodes = graph_malloc(sizeof *nodes * (size_t)(n > 0 ? n : 1));
  if (!nodes) return api_error(KILN_ERR_OOM, "kiln_realize_many", "out of memory");
  for (int i = 0; i < n; i++) {
    if (!ts[i]) {
      free(nodes);
      return api_error(KILN_ERR_ARG, "kiln_realize_many", "tensor %d is NULL", i);
    }
    nodes[i] = ts[i]->storage->version;
  }
  st = api_force_nodes(nodes, n, "kiln_realize_many");
  free(nodes);
  return st;
}

/* Copies the view's elements, row-major, from the realized base. */
static void gather(const graph_view *v, const char *base, size_t esize, char *dst) {
  int64_t numel = graph_view_numel(v);
  int64_t idx[KILN_MAX_DIMS] = {0};
  int64_t off = v->offset;
  for (int64_t e = 0; e < numel; e++) {
    memcpy(dst + (size_t)e * esize, base + (size_t)off * esize, esize);
    for (int d = v->ndim - 1; d >= 0; d--) {
      off += v->strides[d];
      if (++idx[d] < v->sizes[d]) break;
      off -= v->strides[d] * v->sizes[d];
      idx[d] = 0;
    }
  }
}

KILN_API int kiln_read(kiln_tensor *t, void *dst, size_t dst_bytes) {
  if (!api_check(t, "kiln_read", "t")) return KILN_ERR_ARG;
  size_t esize = (size_t)graph_dtypes[t->storage->dtype].size;
  size_t need = (size_t)graph_view_numel(&t->view) * esize;
  if (dst_bytes < need || (need > 0 && !dst))
    return api_error(KILN_ERR_ARG, "kiln_read", "destination of %zu bytes is too small for %zu bytes", dst_bytes, need);
  void *tmp;
  const char *base = api_host_data(t, "kiln_read", &tmp);
  if (!base) return api_status();
  if (need > 0) gather(&t->view, base, esize, dst);
  free(tmp);
  return KILN_OK;
}

/* Storage element of `index` [ndim] in t's view in *off. Returns KILN_OK
 * or the error's status (error set). */
static int element_offset(const kiln_tensor *t, const int64_t *index, const char *fn, int64_t *off) {
  *off = t->view.offset;
  if (t->view.ndim > 0 && !index)
    return api_error(KILN_ERR_ARG, fn, "index is NULL for a %d-d tensor", t->view.ndim);
  for (int d = 0; d < t->view.ndim; d++) {
    int64_t i = index[d], size = t->view.sizes[d];
    if (i < -size || i >= size)
      return api_error(KILN_ERR_INDEX, fn, "index %lld is out of range for dim %d of size %lld", (long long)i, d,
                       (long long)size);
    *off += (i < 0 ? i + size : i) * t->view.strides[d];
  }
  return KILN_OK;
}

/* Element `index` of t (forced) in *out; *out untouched on error. Returns
 * the status: a read that fails is never mistaken for a NaN. */
static int read_element(kiln_tensor *t, const int64_t *index, double *out, const char *fn) {
  if (!api_check(t, fn, "t")) return KILN_ERR_ARG;
  if (!out) return api_error(KILN_ERR_ARG, fn, "out is NULL");
  int64_t off;
  int st = element_offset(t, index, fn, &off);
  if (st != KILN_OK) return st;
  graph_node *v = t->storage->version;
  st = api_force_nodes(&v, 1, fn);
  if (st != KILN_OK) return st;
  kiln_dtype d = t->storage->dtype;
  unsigned char elem[8]; /* only this element leaves the device */
  st = copy_out(t->storage->version->buffer, off * graph_dtypes[d].size, graph_dtypes[d].size, elem, fn);
  if (st != KILN_OK) return st;
  *out = graph_load_scalar(d, elem);
  return KILN_OK;
}

/* The one element of a 1-element t, as read_element. */
static int read_item(kiln_tensor *t, double *out, const char *fn) {
  if (!api_check(t, fn, "t")) return KILN_ERR_ARG;
  int64_t numel = graph_view_numel(&t->view);
  if (numel != 1)
    return api_error(KILN_ERR_SHAPE, fn, "a tensor with %lld elements cannot be converted to a scalar",
                     (long long)numel);
  int64_t zero[KILN_MAX_DIMS] = {0};
  return read_element(t, zero, out, fn);
}

KILN_API int kiln_get_f64(kiln_tensor *t, const int64_t *index, double *out) {
  return read_element(t, index, out, "kiln_get_f64");
}

KILN_API int kiln_item_f64(kiln_tensor *t, double *out) { return read_item(t, out, "kiln_item_f64"); }

KILN_API double kiln_get(kiln_tensor *t, const int64_t *index) {
  double v = NAN;
  read_element(t, index, &v, "kiln_get");
  return v;
}

KILN_API double kiln_item(kiln_tensor *t) {
  double v = NAN;
  read_item(t, &v, "kiln_item");
  return v;
}

KILN_API int kiln_set(kiln_tensor *t, const int64_t *index, double value) {
  if (!api_check(t, "kiln_set", "t")) return KILN_ERR_ARG;
  int64_t off;
  int st = element_offset(t, index, "kiln_set", &off);
  if (st != KILN_OK) return st;
  graph_node *val = graph_node_new(GRAPH_OP_FULL, t->storage->dtype, 0, NULL);
  if (!val) return api_error(KILN_ERR_OOM, "kiln_set", "out of memory");
  graph_attr_set_scalar(val, value);
  kiln_tensor elem = {.storage = t->storage, .view = {.ndim = 0, .offset = off}};
  graph_view vv = {0};
  st = api_assign(&elem, val, &vv, "kiln_set");
  graph_node_release(val);
  return st;
}

KILN_API const void *kiln_data(kiln_tensor *t) {
  if (!api_check(t, "kiln_data", "t") || !api_check_host(t, "kiln_data")) return NULL;
  graph_node *v = api_force(t, "kiln_data");
  if (!v) return NULL;
  return (const char *)v->buffer->data + t->view.offset * graph_dtypes[t->storage->dtype].size;
}
