/*
 * masks.c — triangular masks and the identity: tril, triu and eye.
 *
 * All three are lazy, fusable graphs of existing ops, never a host loop:
 * row = arange(R) viewed [R, 1] and col = arange(C) viewed [1, C] (I64
 * sources), and a comparison of them broadcast to the matrix [R, C]:
 *
 *   tril(t, k) = where(col - row <= k, t, 0)     t: [..., R, C]
 *   triu(t, k) = where(col - row >= k, t, 0)
 *   eye(n, m)  = cast(row == col) to dtype        [n, m]
 *
 * The mask [R, C] broadcasts over t's leading (batch) dims; where keeps
 * t's dtype (the 0 is a 0-d tensor of that dtype, BOOL included) and its
 * gradient rule sends where(mask, g, 0) back to t, so tril/triu need no
 * rule of their own. The result is a new contiguous storage, as Torch's.
 *
 * Semantics are Torch 1.13's (torch.tril, torch.triu, torch.eye): t needs
 * at least 2 dims, any diagonal is allowed (one beyond the matrix keeps
 * all or nothing of it).
 */
#include "ops.h"

/* The BOOL mask [R, C] of (col - row) `cmp` k, cmp LE (tril), GE (triu)
 * or EQ (eye), on like's device (NULL like: the host). Untracked; the
 * caller releases it. NULL with the error set. */
static kiln_tensor *band_mask(int64_t R, int64_t C, int64_t k, graph_op cmp, const kiln_tensor *like, const char *fn) {
  /* col - row lies in [-(R - 1), C - 1]: a k outside [-R, C] selects the
   * same elements as the nearest end, and stays exact as a double */
  if (k < -R) k = -R;
  if (k > C) k = C;
  api_untracked_begin();
  kiln_tensor *row = kiln_arange(KILN_I64, 0, (double)R, 1), *col = kiln_arange(KILN_I64, 0, (double)C, 1);
  kiln_tensor *r = row ? kiln_view(row, 2, (int64_t[]){R, 1}) : NULL;
  kiln_tensor *c = col ? kiln_view(col, 2, (int64_t[]){1, C}) : NULL;
  kiln_tensor *d = r && c ? kiln_sub(c, r) : NULL;
  kiln_tensor *m = d ? ops_elementwise(cmp, (kiln_tensor *[]){d, NULL}, (double[]){0, (double)k}, 2, fn, 0, 0) : NULL;
  if (m && like) m = ops_move_like(m, like, fn);
  api_untracked_end();
  kiln_release(row);
  kiln_release(col);
  kiln_release(r);
  kiln_release(c);
  kiln_release(d);
  return m;
}

static kiln_tensor *triangle(kiln_tensor *t, int64_t diagonal, graph_op cmp, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  int nd = t->view.ndim;
  if (nd < 2) {
    char b[256];
    api_error(KILN_ERR_SHAPE, fn, "input tensor must have at least 2 dimensions, got sizes %s (%d-d)",
              api_fmt_sizes(b, sizeof b, nd, t->view.sizes), nd);
    return NULL;
  }
  kiln_tensor *mask = band_mask(t->view.sizes[nd - 2], t->view.sizes[nd - 1], diagonal, cmp, t, fn);
  if (!mask) return NULL;
  api_untracked_begin();
  kiln_tensor *zero = kiln_scalar(t->storage->dtype, 0);
  kiln_tensor *r = zero ? ops_elementwise(GRAPH_OP_WHERE, (kiln_tensor *[]){mask, t, zero}, NULL, 3, fn, 0, 0) : NULL;
  api_untracked_end();
  kiln_release(zero);
  kiln_release(mask);
  return api_track(r);
}

KILN_API kiln_tensor *kiln_tril(kiln_tensor *t, int64_t diagonal) {
  return triangle(t, diagonal, GRAPH_OP_LE, "kiln_tril");
}

KILN_API kiln_tensor *kiln_triu(kiln_tensor *t, int64_t diagonal) {
  return triangle(t, diagonal, GRAPH_OP_GE, "kiln_triu");
}

KILN_API kiln_tensor *kiln_eye(kiln_dtype dtype, int64_t n, int64_t m) {
  static const char fn[] = "kiln_eye";
  if (!api_check_dtype(dtype, fn)) return NULL;
  if (n < 0) {
    api_error(KILN_ERR_ARG, fn, "n must be greater or equal to 0, got %lld", (long long)n);
    return NULL;
  }
  if (m < 0) m = n;
  if (!api_check_sizes(2, (int64_t[]){n, m}, fn)) return NULL;
  kiln_tensor *d = band_mask(n, m, 0, GRAPH_OP_EQ, NULL, fn);
  if (!d) return NULL;
  api_untracked_begin();
  kiln_tensor *r = dtype == KILN_BOOL ? kiln_retain(d) : ops_copy_contiguous(d, dtype, fn);
  api_untracked_end();
  kiln_release(d);
  return api_track(r);
}
