/*
 * flip_roll.c — flip and roll (Torch flip, roll): copies that move
 * elements along dims, composed of existing differentiable ops:
 *   flip: one index_select per flipped dim with the index n-1, ..., 0 (a
 *         GATHER load that fuses with t's producer and its consumers; Kiln
 *         has no negative strides, and Torch's flip copies too);
 *   roll: per (shift, dim), cat of the last s and the first n-s slices
 *         along dim; no dims: roll of the flattened tensor, viewed back.
 * Both always return a new tensor (a clone when nothing moves).
 */
#include "ops.h"

/* Wrapped dims [n] into out; a dim listed twice is an error when !repeat. */
static bool wrap_dims(const kiln_tensor *t, int n, const int *dims, bool repeat, int *out, const char *fn) {
  uint32_t seen = 0;
  for (int i = 0; i < n; i++) {
    out[i] = api_wrap_dim(dims[i], t->view.ndim, fn);
    if (out[i] < 0) return false;
    if (!repeat && (seen >> out[i] & 1)) {
      api_error(KILN_ERR_ARG, fn, "dim %d appears more than once in the list of dims", dims[i]);
      return false;
    }
    seen |= 1u << out[i];
  }
  return true;
}

static bool check_count(int ndims, const char *fn) {
  if (ndims <= KILN_MAX_DIMS) return true;
  api_error(KILN_ERR_ARG, fn, "%d dims listed (at most %d)", ndims, KILN_MAX_DIMS);
  return false;
}

/* A copy: r itself, or a clone of t when r still shares t's storage (no
 * element moved: r is t or a view of it). */
static kiln_tensor *as_copy(kiln_tensor *r, kiln_tensor *t) {
  return r && r->storage == t->storage ? kiln_clone(t) : r;
}

/* t reversed along dim d (size > 1), in the caller's scope. */
static kiln_tensor *reverse(kiln_tensor *t, int d) {
  int64_t n = t->view.sizes[d];
  kiln_tensor *index = kiln_arange(KILN_I64, (double)(n - 1), -1, -1);
  if (index && t->storage->device != KILN_CPU) index = kiln_to_device(index, t->storage->device);
  return index ? kiln_index_select(t, d, index) : NULL;
}

KILN_API kiln_tensor *kiln_flip(kiln_tensor *t, int ndims, const int *dims) {
  const char *fn = "kiln_flip";
  int wrapped[KILN_MAX_DIMS];
  if (!api_check(t, fn, "t") || api_check_list(dims, ndims, "dims", fn) != KILN_OK) return NULL;
  if (!check_count(ndims, fn) || !wrap_dims(t, ndims, dims, false, wrapped, fn)) return NULL;
  kiln_scope_begin();
  kiln_tensor *r = t;
  for (int i = 0; r && i < ndims; i++)
    if (t->view.ndim > 0 && t->view.sizes[wrapped[i]] > 1) r = reverse(r, wrapped[i]);
  r = kiln_keep(as_copy(r, t));
  kiln_scope_end();
  return r;
}

/* t rolled by shift along dim d, in the caller's scope. */
static kiln_tensor *roll_dim(kiln_tensor *t, int64_t shift, int d) {
  int64_t n = t->view.ndim ? t->view.sizes[d] : 1;
  int64_t s = n ? ((shift % n) + n) % n : 0;
  if (s == 0) return t;
  kiln_tensor *parts[2] = {kiln_narrow(t, d, n - s, s), kiln_narrow(t, d, 0, n - s)};
  return kiln_cat(parts, 2, d);
}

KILN_API kiln_tensor *kiln_roll(kiln_tensor *t, int nshifts, const int64_t *shifts, int ndims, const int *dims) {
  const char *fn = "kiln_roll";
  int wrapped[KILN_MAX_DIMS];
  if (!api_check(t, fn, "t") || api_check_list(shifts, nshifts, "shifts", fn) != KILN_OK ||
      api_check_list(dims, ndims, "dims", fn) != KILN_OK)
    return NULL;
  if (ndims == 0 ? nshifts != 1 : nshifts != ndims) {
    api_error(KILN_ERR_ARG, fn, "%d shifts and %d dims do not align (without dims: one shift)", nshifts, ndims);
    return NULL;
  }
  if (!check_count(ndims, fn) || !wrap_dims(t, ndims, dims, true, wrapped, fn)) return NULL;
  kiln_scope_begin();
  kiln_tensor *r = t;
  if (ndims == 0) { /* the flattened tensor, viewed back */
    kiln_tensor *flat = roll_dim(kiln_flatten(t, 0, -1), shifts[0], 0);
    r = flat ? kiln_reshape(flat, t->view.ndim, t->view.sizes) : NULL;
  }
  for (int i = 0; r && i < ndims; i++) r = roll_dim(r, shifts[i], wrapped[i]);
  r = kiln_keep(as_copy(r, t));
  kiln_scope_end();
  return r;
}
