/*
 * view_adjoint.c — grad_view_add, the adjoint of reading through a view:
 * zeros of a flat storage's size with a cotangent added at the positions
 * the view reads, duplicates (overlapping windows) accumulating. kiln_grad
 * sends a gradient back through the view its input was read by with it,
 * and a transposed convolution's col2im is the same sum (nn/conv.c).
 *
 * The strategy follows the view's shape (autograd.h says which applies
 * when): an injective view is one strided copy; a window view whose
 * offsets shift one injective view by whole steps (a convolution of
 * stride 1) is one kernel summing the cotangent's shifted, masked slices;
 * another window view is one strided in-place add per window offset;
 * anything else is a scatter-add kernel (ops_scatter_sum).
 */
#include <stdlib.h>
#include <string.h>

#include "autograd.h"

/* The flat positions v reads, as an I64 tensor of v's sizes: lazy
 * aranges, computed inside the kernel that reads them. */
static kiln_tensor *positions(const graph_view *v) {
  kiln_tensor *pos = kiln_full(KILN_I64, 0, NULL, (double)v->offset);
  for (int d = 0; d < v->ndim && pos; d++) {
    int64_t shape[KILN_MAX_DIMS];
    for (int e = 0; e < v->ndim; e++) shape[e] = e == d ? v->sizes[d] : 1;
    kiln_tensor *a = kiln_arange(KILN_I64, 0, (double)v->sizes[d], 1);
    a = kiln_mul_scalar(kiln_view(a, v->ndim, shape), (double)v->strides[d]);
    pos = kiln_add(pos, a);
  }
  return pos ? kiln_expand(pos, v->ndim, v->sizes) : NULL;
}

/* Index combinations of the window dims at most (the number of in-place
 * adds grad_view_add records for a window view: 27 for a 3x3x3 kernel). */
#define WINDOW_TERMS 64

/* v with the dims in mask set to size 1. */
static graph_view without(const graph_view *v, uint32_t mask) {
  graph_view r = *v;
  for (int d = 0; d < r.ndim; d++)
    if (mask & (1u << d)) r.sizes[d] = 1;
  return r;
}

/* The window dims of v: at most three dims, whose index combinations
 * number at most WINDOW_TERMS, without which v is injective — a kernel's
 * dims in a convolution's or unfold's windows, which overlap the output
 * positions' dims. A mask of dims, or 0 when there are none such. */
static uint32_t window_dims(const graph_view *v) {
  int cand[KILN_MAX_DIMS], n = 0;
  for (int d = 0; d < v->ndim; d++)
    if (v->sizes[d] > 1 && v->sizes[d] <= WINDOW_TERMS) cand[n++] = d;
  for (int a = 0; a < n; a++) {
    uint32_t ma = 1u << cand[a];
    graph_view r = without(v, ma);
    if (graph_view_injective(&r)) return ma;
    for (int b = a + 1; b < n; b++) {
      uint32_t mb = ma | 1u << cand[b];
      if (v->sizes[cand[a]] * v->sizes[cand[b]] > WINDOW_TERMS) continue;
      r = without(v, mb);
      if (graph_view_injective(&r)) return mb;
      for (int e = b + 1; e < n; e++) {
        if (v->sizes[cand[a]] * v->sizes[cand[b]] * v->sizes[cand[e]] > WINDOW_TERMS) continue;
        r = without(v, mb | 1u << cand[e]);
        if (graph_view_injective(&r)) return mb | 1u << cand[e];
      }
    }
  }
  return 0;
}

/* z (flat, zeros) += c through window view v, one window offset at a
 * time: for each index combination of the window dims (mask) the rest of
 * v is injective, so that slice of c is added in place through a strided
 * view of z — a dense, parallel kernel per offset (in order: the result
 * is the same whatever the thread count). */
static int add_windows(kiln_tensor *z, const graph_view *v, uint32_t mask, kiln_tensor *c) {
  graph_view r = without(v, mask);
  int64_t terms = graph_view_numel(v) / (graph_view_numel(&r) > 0 ? graph_view_numel(&r) : 1);
  for (int64_t t = 0; t < terms; t++) {
    int64_t rest = t, off = v->offset;
    kiln_tensor *slice = kiln_retain(c), *next;
    for (int d = v->ndim - 1; d >= 0 && slice; d--) {
      if (!(mask & (1u << d))) continue;
      int64_t i = rest % v->sizes[d];
      rest /= v->sizes[d];
      off += i * v->strides[d];
      next = kiln_narrow(slice, d, i, 1);
      kiln_release(slice);
      slice = next;
    }
    kiln_tensor *region = slice ? kiln_as_strided(z, r.ndim, r.sizes, r.strides, off) : NULL;
    int st = region ? kiln_add_(region, slice) : api_status();
    kiln_release(slice), kiln_release(region);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* The window view v (mask: its window dims) as shifted copies of one
 * injective view: each window dim w moves the rest by a whole number of
 * steps q[w] of one rest dim own[w] (a conv of stride 1: the kernel's
 * row moves the output row by dil), so window offset t writes the rest's
 * element i at e(i + delta_t), e the rest with every owned dim widened by
 * its largest shift. */
typedef struct shifts {
  graph_view e;                      /* the widened rest of v; window dims size 1 */
  int own[KILN_MAX_DIMS];            /* window dim -> the rest dim it moves */
  int64_t q[KILN_MAX_DIMS];          /* steps of own[w] per index of w */
  int64_t rest_sizes[KILN_MAX_DIMS]; /* v's sizes, window dims 1 */
} shifts;

/* Fills sh for v over a flat storage of numel; false when v is not such
 * a set of shifted copies of an injective view inside the storage. */
static bool find_shifts(const graph_view *v, uint32_t mask, int64_t numel, shifts *sh) {
  graph_view r = without(v, mask);
  sh->e = r;
  for (int d = 0; d < v->ndim; d++) {
    sh->rest_sizes[d] = r.sizes[d];
    if (v->strides[d] < 0 || (!(mask & (1u << d)) && v->sizes[d] > 1 && v->strides[d] == 0)) return false;
  }
  for (int w = 0; w < v->ndim; w++) {
    if (!(mask & (1u << w))) continue;
    sh->own[w] = -1;
    for (int d = 0; d < v->ndim; d++) /* the rest dim of largest stride dividing w's */
      if (!(mask & (1u << d)) && r.strides[d] > 0 && v->strides[w] % r.strides[d] == 0 &&
          (sh->own[w] < 0 || r.strides[d] > r.strides[sh->own[w]]))
        sh->own[w] = d;
    if (sh->own[w] < 0) return false;
    sh->q[w] = v->strides[w] / r.strides[sh->own[w]];
    sh->e.sizes[sh->own[w]] += (v->sizes[w] - 1) * sh->q[w];
  }
  return graph_view_injective(&sh->e) && graph_view_extent(&sh->e) <= numel;
}

/* Window offset t's shifts (t row-major over the window dims, as
 * add_windows counts) into delta [ndim]; the offset of its slice of the
 * contiguous view cv into *at. */
static void tap(const graph_view *v, uint32_t mask, const shifts *sh, const graph_view *cv, int64_t t, int64_t *delta,
                int64_t *at) {
  int64_t rest = t;
  *at = cv->offset;
  for (int d = 0; d < v->ndim; d++) delta[d] = 0;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (!(mask & (1u << d))) continue;
    int64_t i = rest % v->sizes[d];
    rest /= v->sizes[d];
    delta[sh->own[d]] += i * sh->q[d];
    *at += i * cv->strides[d];
  }
  for (int d = 0; d < v->ndim; d++) *at -= delta[d] * cv->strides[d];
}

/* Whether every window offset's shifted read of cv (contiguous, over a
 * storage of cn elements) stays inside that storage: it reads beyond its
 * slice where the shift leaves the slice, and those elements are masked. */
static bool reads_in_bounds(const graph_view *v, uint32_t mask, const shifts *sh, const graph_view *cv, int64_t cn) {
  int64_t terms = 1, delta[KILN_MAX_DIMS];
  for (int d = 0; d < v->ndim; d++)
    if (mask & (1u << d)) terms *= v->sizes[d];
  for (int64_t t = 0; t < terms; t++) {
    int64_t at, last;
    tap(v, mask, sh, cv, t, delta, &at);
    last = at;
    for (int d = 0; d < v->ndim; d++) last += (sh->e.sizes[d] - 1) * cv->strides[d];
    if (at < 0 || last >= cn) return false;
  }
  return true;
}

/* Where window offset t wrote: e's index j with j - delta inside the
 * rest's sizes, as a host-made bool over the dims the offsets move (e's
 * sizes there, 1 elsewhere: broadcast) — one small buffer, one read in
 * the kernel — into *out, NULL when it wrote all of e. False on error. */
static bool tap_mask(const shifts *sh, int ndim, const int64_t *delta, kiln_tensor *like, kiln_tensor **out) {
  int64_t shape[KILN_MAX_DIMS], count = 1;
  *out = NULL;
  bool any = false;
  for (int d = 0; d < ndim; d++) {
    bool moved = sh->e.sizes[d] != sh->rest_sizes[d];
    shape[d] = moved ? sh->e.sizes[d] : 1;
    count *= shape[d];
    any = any || (moved && (delta[d] > 0 || delta[d] + sh->rest_sizes[d] < sh->e.sizes[d]));
  }
  if (!any) return true;
  bool *m = graph_malloc((size_t)count);
  if (!m) {
    api_error(KILN_ERR_OOM, "grad_view_add", "out of memory");
    return false;
  }
  for (int64_t i = 0; i < count; i++) {
    int64_t rest = i;
    m[i] = true;
    for (int d = ndim - 1; d >= 0; d--) {
      int64_t j = rest % shape[d];
      rest /= shape[d];
      if (shape[d] > 1 && (j < delta[d] || j >= delta[d] + sh->rest_sizes[d])) m[i] = false;
    }
  }
  *out = kiln_view(ops_host_const(KILN_BOOL, count, m, like, "grad_view_add"), ndim, shape);
  free(m);
  return *out != NULL;
}

/* e's values (sizes e's): the sum over window offsets, in add_windows'
 * order, of c's slice read shifted into place and masked to where it
 * lands — one elementwise kernel. cc: c contiguous. */
static kiln_tensor *shifted_sum(const graph_view *v, uint32_t mask, const shifts *sh, kiln_tensor *cc) {
  int64_t terms = 1, delta[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
  for (int d = 0; d < v->ndim; d++) {
    if (mask & (1u << d)) terms *= v->sizes[d];
    strides[d] = mask & (1u << d) ? 0 : cc->view.strides[d];
  }
  kiln_tensor *acc = NULL, *zero = kiln_scalar(cc->storage->dtype, 0);
  for (int64_t t = 0; t < terms && zero; t++) {
    int64_t at;
    tap(v, mask, sh, &cc->view, t, delta, &at);
    kiln_tensor *term = kiln_as_strided(cc, v->ndim, sh->e.sizes, strides, at);
    kiln_tensor *m;
    if (!tap_mask(sh, v->ndim, delta, cc, &m)) return NULL;
    if (m) term = kiln_where(m, term, zero);
    acc = acc ? kiln_add(acc, term) : term;
    if (!acc) return NULL;
  }
  return acc;
}

/* e's values x placed in zeros [numel]: when e covers the storage (a
 * permutation of it), x read in storage order — one copy that the sum
 * fuses into; otherwise a strided copy into zeros. */
static kiln_tensor *place(kiln_dtype dtype, int64_t numel, const graph_view *e, kiln_tensor *x) {
  if (!x) return NULL;
  if (graph_view_numel(e) == numel) { /* injective inside [0, numel): a permutation */
    int perm[KILN_MAX_DIMS];
    for (int d = 0; d < e->ndim; d++) perm[d] = d;
    for (int i = 1; i < e->ndim; i++) /* strides descending (stable) */
      for (int j = i; j > 0 && e->strides[perm[j]] > e->strides[perm[j - 1]]; j--) {
        int tmp = perm[j];
        perm[j] = perm[j - 1], perm[j - 1] = tmp;
      }
    return kiln_reshape(kiln_permute(x, e->ndim, perm), 1, &numel);
  }
  kiln_tensor *z = kiln_zeros(dtype, 1, &numel);
  int st = z ? kiln_copy_(kiln_as_strided(z, e->ndim, e->sizes, e->strides, e->offset), x) : api_status();
  return st == KILN_OK ? z : NULL;
}

/* grad_view_add for a window view that is shifted copies of one injective
 * view (find_shifts): one kernel instead of one per window offset, the
 * same sums in the same order. *out: a new untracked reference, or NULL
 * when this does not apply. Its intermediates go in a scope of its own
 * (with the caller's untracked depth set aside). */
static int add_shifted(kiln_dtype dtype, int64_t numel, const graph_view *v, uint32_t mask, kiln_tensor *c,
                       kiln_tensor **out) {
  shifts sh;
  *out = NULL;
  if (!find_shifts(v, mask, numel, &sh)) return KILN_OK;
  int depth = api_untracked_pause();
  kiln_scope_begin();
  kiln_tensor *cc = kiln_contiguous(kiln_to_dtype(kiln_reshape(c, v->ndim, v->sizes), dtype)), *r = NULL;
  bool ok = cc != NULL;
  if (ok && reads_in_bounds(v, mask, &sh, &cc->view, cc->storage->numel)) {
    r = kiln_escape(place(dtype, numel, &sh.e, shifted_sum(v, mask, &sh, cc)));
    ok = r != NULL;
  }
  kiln_scope_end();
  api_untracked_resume(depth);
  *out = r;
  return ok ? KILN_OK : api_status();
}

/* v covers all of [0, numel) exactly once: a permutation of a
 * contiguous layout (e.g. the [N, C, H, W] view of a conv's GEMM
 * output [C, N·H·W]). */
static bool is_permutation(const graph_view *v, int64_t numel) {
  if (v->offset != 0 || graph_view_numel(v) != numel || !graph_view_injective(v)) return false;
  for (int d = 0; d < v->ndim; d++)
    if (v->strides[d] < 0) return false;
  return true;
}

/* grad_view_add for a permutation view: c read in storage order (a
 * permuted read the sum's producers fuse into), no zeros and no strided
 * write. A new untracked reference; its intermediates in a scope of its
 * own (with the caller's untracked depth set aside). */
static kiln_tensor *add_permuted(kiln_dtype dtype, int64_t numel, const graph_view *v, kiln_tensor *c) {
  int depth = api_untracked_pause();
  kiln_scope_begin();
  kiln_tensor *r = kiln_escape(place(dtype, numel, v, kiln_to_dtype(kiln_reshape(c, v->ndim, v->sizes), dtype)));
  kiln_scope_end();
  api_untracked_resume(depth);
  return r;
}

kiln_tensor *grad_view_add(kiln_dtype dtype, int64_t numel, const graph_view *v, kiln_tensor *c, const char *fn) {
  if (is_permutation(v, numel)) {
    kiln_tensor *r = add_permuted(dtype, numel, v, c);
    return r ? api_track(r) : NULL;
  }
  bool injective = graph_view_injective(v);
  uint32_t mask = injective ? 0 : window_dims(v);
  kiln_tensor *out = NULL;
  if (mask) { /* a conv's windows: one kernel when they are shifted copies */
    if (add_shifted(dtype, numel, v, mask, c, &out) != KILN_OK) return NULL;
    if (out) return api_track(out);
  }
  api_untracked_begin();
  if (injective || mask) { /* dense: strided writes into zeros */
    kiln_tensor *z = kiln_zeros(dtype, 1, &numel), *shaped = kiln_reshape(c, v->ndim, v->sizes);
    kiln_tensor *conv = shaped ? kiln_to_dtype(shaped, dtype) : NULL, *region = NULL;
    int st = z && conv ? KILN_OK : api_status();
    if (st == KILN_OK && !mask) {
      region = kiln_as_strided(z, v->ndim, v->sizes, v->strides, v->offset);
      st = region ? kiln_copy_(region, conv) : api_status();
    } else if (st == KILN_OK) {
      st = add_windows(z, v, mask, conv);
    }
    kiln_release(shaped), kiln_release(conv), kiln_release(region);
    if (st == KILN_OK) out = z;
    else kiln_release(z);
  } else { /* any other overlap: a scatter-add at the positions v reads */
    int64_t vn = graph_view_numel(v);
    kiln_tensor *pos = kiln_reshape(positions(v), 1, &vn), *src = kiln_reshape(c, 1, &vn), *r = NULL;
    graph_node *pv = pos && src ? api_version(pos) : NULL;
    if (pv) r = ops_scatter_sum(dtype, 1, &numel, 0, pv, &pos->view, src, &src->view, fn);
    out = r ? kiln_to_dtype(r, dtype) : NULL;
    kiln_release(pos), kiln_release(src), kiln_release(r);
  }
  api_untracked_end();
  return api_track(out);
}

