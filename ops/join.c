/*
 * join.c — tensors built from other tensors: cat, stack, repeat. All lazy
 * and copy-based, with no op of their own:
 *
 *  - cat writes each input into its slice of a fresh result with the same
 *    in-place write as copy_ (one ASSIGN per input, converted to the
 *    promoted dtype on the way);
 *  - stack is cat of the inputs unsqueezed at dim;
 *  - repeat reads t through a view with a stride-0 dim before each dim
 *    that repeats ([r0, s0, r1, s1, ...]) and copies that view into a
 *    contiguous result (one elementwise copy kernel, fusable with t's
 *    producer), then views it as [r0*s0, r1*s1, ...].
 */
#include <stdlib.h>

#include "ops.h"

/* cat's checks: the list, each tensor, dims and sizes. Legacy empty 1-D
 * tensors (sizes [0]) are skipped as in Torch. Sets *ref to the first
 * other tensor, *d to the wrapped dim, *dtype to the promoted dtype. */
static bool check_cat(kiln_tensor *const *ts, int n, int dim, int *ref, int *d, kiln_dtype *dtype, const char *fn) {
  if (n < 1) {
    api_error(KILN_ERR_ARG, fn, "needs at least one tensor (n = %d)", n);
    return false;
  }
  if (api_check_list(ts, n, "tensor", fn) != KILN_OK) return false;
  *ref = -1;
  for (int i = 0; i < n; i++) {
    if (!ts[i]) {
      if (kiln_last_status() == KILN_OK) api_error(KILN_ERR_ARG, fn, "tensor %d is NULL", i);
      return false;
    }
    if (*ref < 0 && !(ts[i]->view.ndim == 1 && ts[i]->view.sizes[0] == 0)) *ref = i;
  }
  if (*ref < 0) *ref = 0;
  const graph_view *r = &ts[*ref]->view;
  if (r->ndim == 0) {
    api_error(KILN_ERR_SHAPE, fn, "tensor %d is 0-d and cannot be concatenated", *ref);
    return false;
  }
  if ((*d = api_wrap_dim(dim, r->ndim, fn)) < 0) return false;
  *dtype = ts[*ref]->storage->dtype;
  for (int i = 0; i < n; i++) {
    const graph_view *v = &ts[i]->view;
    *dtype = graph_promote(*dtype, ts[i]->storage->dtype);
    if (v->ndim == 1 && v->sizes[0] == 0) continue;
    if (ts[i]->storage->device != ts[*ref]->storage->device) { /* as api_tensor_from_node checks other ops */
      api_device_mismatch(fn, ts[*ref]->storage->device, ts[i]->storage->device);
      return false;
    }
    bool ok = v->ndim == r->ndim;
    for (int k = 0; ok && k < r->ndim; k++) ok = k == *d || v->sizes[k] == r->sizes[k];
    if (ok) continue;
    char a[256], b[256];
    api_error(KILN_ERR_SHAPE, fn, "tensor %d has sizes %s but tensor %d has %s (only dim %d may differ)", i,
              api_fmt_sizes(a, sizeof a, v->ndim, v->sizes), *ref, api_fmt_sizes(b, sizeof b, r->ndim, r->sizes), *d);
    return false;
  }
  return true;
}

KILN_API kiln_tensor *kiln_cat(kiln_tensor *const *ts, int n, int dim) {
  const char *fn = "kiln_cat";
  int ref, d;
  kiln_dtype dtype;
  if (!check_cat(ts, n, dim, &ref, &d, &dtype, fn)) return NULL;
  graph_view out = ts[ref]->view;
  out.sizes[d] = 0;
  for (int i = 0; i < n; i++)
    if (!(ts[i]->view.ndim == 1 && ts[i]->view.sizes[0] == 0)) out.sizes[d] += ts[i]->view.sizes[d];
  api_untracked_begin();
  kiln_tensor *r = ops_move_like(kiln_empty(dtype, out.ndim, out.sizes), ts[ref], fn);
  int64_t at = 0;
  for (int i = 0; r && i < n; i++) {
    const graph_view *v = &ts[i]->view;
    if ((v->ndim == 1 && v->sizes[0] == 0) || v->sizes[d] == 0) continue;
    kiln_tensor *part = kiln_narrow(r, d, at, v->sizes[d]);
    int st = part ? kiln_copy_(part, ts[i]) : api_status();
    kiln_release(part);
    at += v->sizes[d];
    if (st != KILN_OK) {
      kiln_release(r);
      r = NULL;
    }
  }
  api_untracked_end();
  return api_track(r);
}

KILN_API kiln_tensor *kiln_stack(kiln_tensor *const *ts, int n, int dim) {
  const char *fn = "kiln_stack";
  if (n < 1) {
    api_error(KILN_ERR_ARG, fn, "needs at least one tensor (n = %d)", n);
    return NULL;
  }
  if (api_check_list(ts, n, "tensor", fn) != KILN_OK) return NULL;
  for (int i = 0; i < n; i++) {
    if (!ts[i]) {
      if (kiln_last_status() == KILN_OK) api_error(KILN_ERR_ARG, fn, "tensor %d is NULL", i);
      return NULL;
    }
    if (kiln_is_same_size(ts[i], ts[0])) continue;
    char a[256], b[256];
    api_error(KILN_ERR_SHAPE, fn, "tensor %d has sizes %s but tensor 0 has %s", i,
              api_fmt_sizes(a, sizeof a, ts[i]->view.ndim, ts[i]->view.sizes),
              api_fmt_sizes(b, sizeof b, ts[0]->view.ndim, ts[0]->view.sizes));
    return NULL;
  }
  int d = api_wrap_dim(dim, ts[0]->view.ndim + 1, fn);
  if (d < 0) return NULL;
  if (ts[0]->view.ndim + 1 > KILN_MAX_DIMS) {
    api_error(KILN_ERR_UNSUPPORTED, fn, "the result would have more than %d dims", KILN_MAX_DIMS);
    return NULL;
  }
  kiln_tensor **u = graph_calloc((size_t)n, sizeof *u);
  if (!u) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  api_untracked_begin();
  for (int i = 0; i < n; i++) u[i] = kiln_unsqueeze(ts[i], d);
  kiln_tensor *r = kiln_cat(u, n, d);
  for (int i = 0; i < n; i++) kiln_release(u[i]);
  api_untracked_end();
  free(u);
  return api_track(r);
}

KILN_API kiln_tensor *kiln_repeat(kiln_tensor *t, int ndim, const int64_t *reps) {
  const char *fn = "kiln_repeat";
  if (!api_check(t, fn, "t")) return NULL;
  if (ndim < t->view.ndim || ndim > KILN_MAX_DIMS || (ndim > 0 && !reps)) {
    api_error(KILN_ERR_ARG, fn, "needs %d to %d repeat counts, got %d%s", t->view.ndim, KILN_MAX_DIMS, ndim,
              ndim > 0 && !reps ? " (reps is NULL)" : "");
    return NULL;
  }
  for (int k = 0; k < ndim; k++) {
    if (reps[k] >= 0) continue;
    api_error(KILN_ERR_ARG, fn, "repeat count %lld at dim %d is negative", (long long)reps[k], k);
    return NULL;
  }
  /* t as [1..., s0, s1, ...] with ndim dims; each repeated dim k becomes
   * [reps[k], s_k] with stride 0 for the repeat */
  int lead = ndim - t->view.ndim, nd = 0;
  graph_view v = {.offset = t->view.offset};
  int64_t out[KILN_MAX_DIMS];
  for (int k = 0; k < ndim; k++) {
    int64_t s = k < lead ? 1 : t->view.sizes[k - lead], st = k < lead ? 0 : t->view.strides[k - lead];
    if (__builtin_mul_overflow(s, reps[k], &out[k])) {
      api_error(KILN_ERR_SHAPE, fn, "size %lld repeated %lld times at dim %d overflows", (long long)s,
                (long long)reps[k], k);
      return NULL;
    }
    if (reps[k] != 1) {
      if (nd == KILN_MAX_DIMS) {
        api_error(KILN_ERR_UNSUPPORTED, fn, "too many repeated dims for %d dims", KILN_MAX_DIMS);
        return NULL;
      }
      v.sizes[nd] = reps[k], v.strides[nd++] = 0;
    }
    if (nd == KILN_MAX_DIMS) {
      api_error(KILN_ERR_UNSUPPORTED, fn, "too many repeated dims for %d dims", KILN_MAX_DIMS);
      return NULL;
    }
    v.sizes[nd] = s, v.strides[nd++] = st;
  }
  v.ndim = nd;
  if (!api_check_sizes(ndim, out, fn)) return NULL; /* an element count that overflows */
  api_untracked_begin();
  kiln_tensor *spread = api_view(t, &v, fn);
  kiln_tensor *c = spread ? ops_copy_contiguous(spread, t->storage->dtype, fn) : NULL;
  kiln_tensor *r = c ? kiln_view(c, ndim, out) : NULL;
  kiln_release(spread), kiln_release(c);
  api_untracked_end();
  return api_track(r);
}
