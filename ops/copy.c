/*
 * copy.c — copies, conversions and in-place writes (clone, contiguous,
 * to_dtype, to_device, copy_, fill_, zero_). kiln_to_device is a copy
 * whose node (and so storage) is on the other device: the runtime moves
 * the bytes (runtime/device.h).
 *
 * In-place writes record an ASSIGN version on the destination's storage
 * (api_assign): lazy, seen by every tensor over that storage, invisible to
 * ops recorded before them.
 */
#include "ops.h"
#include "runtime.h"

KILN_API kiln_tensor *kiln_clone(kiln_tensor *t) {
  if (!api_check(t, "kiln_clone", "t")) return NULL;
  return ops_copy_contiguous(t, t->storage->dtype, "kiln_clone");
}

KILN_API kiln_tensor *kiln_contiguous(kiln_tensor *t) {
  if (!api_check(t, "kiln_contiguous", "t")) return NULL;
  if (graph_view_is_contiguous(&t->view)) return api_track(kiln_retain(t));
  return ops_copy_contiguous(t, t->storage->dtype, "kiln_contiguous");
}

KILN_API kiln_tensor *kiln_to_dtype(kiln_tensor *t, kiln_dtype dtype) {
  if (!api_check(t, "kiln_to_dtype", "t") || !api_check_dtype(dtype, "kiln_to_dtype")) return NULL;
  if (dtype == t->storage->dtype) return api_track(kiln_retain(t));
  return ops_copy_contiguous(t, dtype, "kiln_to_dtype");
}

KILN_API kiln_tensor *kiln_to_device(kiln_tensor *t, kiln_device device) {
  if (!api_check(t, "kiln_to_device", "t")) return NULL;
  if (device != KILN_CPU && device != KILN_CUDA) {
    api_error(KILN_ERR_ARG, "kiln_to_device", "unknown device %d (expected KILN_CPU or KILN_CUDA)", (int)device);
    return NULL;
  }
  if (device == t->storage->device) return api_track(kiln_retain(t));
  char err[1200];
  int st = device == KILN_CUDA ? rt_device_ready(err, sizeof err) : KILN_OK;
  if (st != KILN_OK) {
    api_error((kiln_status)st, "kiln_to_device", "%s", err);
    return NULL;
  }
  return ops_copy_to(t, t->storage->dtype, device, "kiln_to_device");
}

kiln_tensor *ops_move_like(kiln_tensor *x, const kiln_tensor *like, const char *fn) {
  if (!x || !like || x->storage->device == like->storage->device) return x;
  kiln_tensor *y = ops_copy_to(x, x->storage->dtype, like->storage->device, fn);
  kiln_release(x);
  return y;
}

/* src's view as seen through dst's sizes: broadcast when src broadcasts to
 * them, else the same elements in row-major order (a reshape of the view,
 * or of a contiguous copy when the view cannot be reshaped). *owned gets a
 * tensor the caller releases (NULL when none was made). */
static bool source_view(kiln_tensor *dst, kiln_tensor *src, graph_view *out, kiln_tensor **owned) {
  const graph_view *d = &dst->view, *s = &src->view;
  *owned = NULL;
  if (graph_view_broadcast(s, d->ndim, d->sizes, out)) return true;
  if (graph_view_numel(s) != graph_view_numel(d)) {
    char a[256], b[256];
    api_error(KILN_ERR_SHAPE, "kiln_copy_", "source sizes %s (%lld elements) do not match destination sizes %s (%lld elements)",
              api_fmt_sizes(a, sizeof a, s->ndim, s->sizes), (long long)graph_view_numel(s),
              api_fmt_sizes(b, sizeof b, d->ndim, d->sizes), (long long)graph_view_numel(d));
    return false;
  }
  if (graph_view_reshape(s, d->ndim, d->sizes, out)) return true;
  api_untracked_begin();
  *owned = ops_copy_contiguous(src, src->storage->dtype, "kiln_copy_");
  api_untracked_end();
  if (!*owned) return false;
  *out = graph_view_contiguous(d->ndim, d->sizes);
  return true;
}

bool ops_check_writable(const kiln_tensor *t, const char *fn) {
  if (graph_view_numel(&t->view) == 0) return true; /* writes nothing */
  for (int d = 0; d < t->view.ndim; d++)
    if (t->view.strides[d] == 0 && t->view.sizes[d] > 1) {
      api_error(KILN_ERR_ARG, fn,
                "more than one element of the written-to tensor refers to a single memory location (dim %d has "
                "size %lld and stride 0); clone it before writing",
                d, (long long)t->view.sizes[d]);
      return false;
    }
  return true;
}

KILN_API int kiln_copy_(kiln_tensor *dst, kiln_tensor *src) {
  if (!api_check(dst, "kiln_copy_", "dst") || !api_check(src, "kiln_copy_", "src")) return api_status();
  if (!ops_check_writable(dst, "kiln_copy_")) return KILN_ERR_ARG;
  graph_view v;
  kiln_tensor *owned;
  if (!source_view(dst, src, &v, &owned)) return api_status();
  kiln_tensor *from = owned ? owned : src;
  graph_node *value = api_version(from);
  int st = value ? api_assign(dst, value, &v, "kiln_copy_") : api_status();
  kiln_release(owned);
  return st;
}

KILN_API int kiln_fill_(kiln_tensor *t, double value) {
  if (!api_check(t, "kiln_fill_", "t")) return KILN_ERR_ARG;
  graph_node *val = graph_node_new(GRAPH_OP_FULL, KILN_F64, 0, NULL);
  if (!val) return api_error(KILN_ERR_OOM, "kiln_fill_", "out of memory");
  graph_attr_set_scalar(val, value);
  graph_view bv = {.ndim = t->view.ndim}; /* every stride 0 */
  for (int d = 0; d < bv.ndim; d++) bv.sizes[d] = t->view.sizes[d];
  int st = api_assign(t, val, &bv, "kiln_fill_");
  graph_node_release(val);
  return st;
}

KILN_API int kiln_zero_(kiln_tensor *t) {
  if (!api_check(t, "kiln_zero_", "t")) return KILN_ERR_ARG;
  return kiln_fill_(t, 0);
}
