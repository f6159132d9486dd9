/*
 * index.c — indexing by index tensors: index_select and gather (GATHER
 * nodes), index_copy_, index_fill_, scatter_ and scatter_value_ (a fused
 * where), index_add_ (SCATTER partial sums, added to the target and
 * written back by an ASSIGN).
 *
 * GATHER is elementwise over its result and lowered to a kernel (passes/
 * lower.c: a load at an index read from the index buffer), so it fuses
 * into its readers. SCATTER is a generated kernel too (lower_scatter):
 * chunks of the index elements add into partial sums in parallel, each
 * chunk in order. Both are lazy: the call records a node and nothing else
 * runs, except that the *index* tensor is forced and every value checked
 * against the dim's size first. An out-of-range
 * index is therefore reported by the call itself (KILN_ERR_INDEX, naming
 * the function, the dim, the index and the size), nothing is recorded, and
 * the target keeps its contents — as in Torch, whose checks run before any
 * write. The runtime checks again before it writes (defence in depth).
 *
 * Negative indices follow PyTorch per op: index_fill_ wraps them (i + size
 * for -size <= i < 0); every other op here rejects them.
 *
 * index_copy_, index_fill_, scatter_ and scatter_value_ keep the last
 * write, so once the (forced) index has been read they need no loop: for
 * each slot of the dim (index_*) or element of t (scatter*) the host
 * computes the last index position writing it, and the write becomes
 * t = where(written, gather(src at that position) or value, t) — one fused
 * kernel. index_add_ (duplicates accumulate) builds the target's new
 * contents from SCATTER partial sums and the target's current version. Either way the result is recorded as an ASSIGN
 * into the target's view (kiln_copy_ / api_assign): views sharing the
 * storage see the write, ops recorded before do not.
 */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "graph_walk.h"

bool api_index_check(kiln_tensor *index, const char *fn, int dim, int64_t size, bool wrap) {
  kiln_dtype dt = index->storage->dtype;
  if (dt != KILN_I64 && dt != KILN_I32) {
    api_error(KILN_ERR_DTYPE, fn, "index dtype %s is not i64 or i32", graph_dtypes[dt].name);
    return false;
  }
  int64_t n = graph_view_numel(&index->view);
  if (n == 0) return true;
  void *tmp;
  const char *base = api_host_data(index, fn, &tmp);
  if (!base) return false;
  graph_walk w;
  graph_walk_init(&w, &index->view, 0);
  bool ok = true;
  for (int64_t e = 0; e < n && ok; e++, graph_walk_next(&w)) {
    int64_t i = graph_load_index(dt, base, w.off);
    if (wrap && i < 0 && i >= -size) i += size;
    ok = i >= 0 && i < size;
    if (!ok)
      api_error(KILN_ERR_INDEX, fn, "index %lld is out of range for dim %d of size %lld", (long long)i, dim,
                (long long)size);
  }
  free(tmp);
  return ok;
}

kiln_tensor *api_gather(kiln_tensor *t, const graph_view *tv, int dim, kiln_tensor *index, const graph_view *iv,
                        const char *fn) {
  graph_node *n = graph_node_new(GRAPH_OP_GATHER, t->storage->dtype, iv->ndim, iv->sizes);
  if (n) {
    n->cdtype = n->dtype;
    graph_attr_set_scalar(n, dim);
  }
  if (n && (!api_add_input(n, t, tv) || !api_add_input(n, index, iv))) {
    graph_node_release(n);
    return NULL;
  }
  return api_tensor_from_node(n, fn);
}

/* The sizes of t's view with dim replaced by n. */
static graph_view with_dim_size(const graph_view *v, int dim, int64_t n) {
  graph_view r = *v;
  r.sizes[dim] = n;
  return r;
}

/* A 1-D (or 0-d) index spread over `sizes` [ndim]: stride 0 except at dim. */
static graph_view spread_index(const kiln_tensor *index, int ndim, const int64_t *sizes, int dim) {
  graph_view r = {.ndim = ndim, .offset = index->view.offset};
  for (int d = 0; d < ndim; d++) r.sizes[d] = sizes[d];
  r.strides[dim] = index->view.ndim == 1 ? index->view.strides[0] : 0;
  return r;
}

static bool check_vector_index(const kiln_tensor *index, const char *fn) {
  if (index->view.ndim <= 1) return true;
  char s[256];
  api_error(KILN_ERR_SHAPE, fn, "index must be 1-D but has sizes %s",
            api_fmt_sizes(s, sizeof s, index->view.ndim, index->view.sizes));
  return false;
}

/* Common checks: tensors non-NULL, t not 0-d, dim wrapped into *d. */
static bool check_common(kiln_tensor *t, kiln_tensor *index, int dim, int *d, const char *fn) {
  if (!api_check(t, fn, "t") || !api_check(index, fn, "index")) return false;
  if (t->view.ndim == 0) {
    api_error(KILN_ERR_SHAPE, fn, "t is 0-d; it has no dim to index");
    return false;
  }
  *d = api_wrap_dim(dim, t->view.ndim, fn);
  return *d >= 0;
}

/* check_common for an in-place op: t must not repeat a storage element. */
static bool check_target(kiln_tensor *t, kiln_tensor *index, int dim, int *d, const char *fn) {
  return check_common(t, index, dim, d, fn) && api_check_writable(t, fn);
}

KILN_API kiln_tensor *kiln_index_select(kiln_tensor *t, int dim, kiln_tensor *index) {
  const char *fn = "kiln_index_select";
  int d;
  if (!check_common(t, index, dim, &d, fn) || !check_vector_index(index, fn)) return NULL;
  if (!api_index_check(index, fn, d, t->view.sizes[d], false)) return NULL;
  int64_t n = graph_view_numel(&index->view);
  graph_view out = with_dim_size(&t->view, d, n);
  graph_view iv = spread_index(index, out.ndim, out.sizes, d);
  return api_gather(t, &t->view, d, index, &iv, fn);
}

KILN_API kiln_tensor *kiln_gather(kiln_tensor *t, int dim, kiln_tensor *index) {
  const char *fn = "kiln_gather";
  int d;
  if (!check_common(t, index, dim, &d, fn)) return NULL;
  char a[256], b[256];
  const graph_view *tv = &t->view, *iv = &index->view;
  if (iv->ndim != tv->ndim) {
    api_error(KILN_ERR_SHAPE, fn, "index sizes %s and t sizes %s differ in dims",
              api_fmt_sizes(a, sizeof a, iv->ndim, iv->sizes), api_fmt_sizes(b, sizeof b, tv->ndim, tv->sizes));
    return NULL;
  }
  for (int k = 0; k < tv->ndim; k++) {
    if (k == d || iv->sizes[k] <= tv->sizes[k]) continue;
    api_error(KILN_ERR_SHAPE, fn, "index sizes %s exceed t sizes %s at dim %d",
              api_fmt_sizes(a, sizeof a, iv->ndim, iv->sizes), api_fmt_sizes(b, sizeof b, tv->ndim, tv->sizes), k);
    return NULL;
  }
  if (!api_index_check(index, fn, d, tv->sizes[d], false)) return NULL;
  return api_gather(t, tv, d, index, iv, fn);
}

/* Index elements per chunk of a scatter-add, at least (SCATTER_GRAIN),
 * and chunks at most (SCATTER_CHUNKS_MAX). */
#define SCATTER_GRAIN 4096
#define SCATTER_CHUNKS_MAX 64

/* The number of partial sums of a scatter-add of n index elements into a
 * target of m elements: one per SCATTER_GRAIN elements, at most
 * SCATTER_CHUNKS_MAX, and few enough that zeroing and adding the
 * partials (chunks x m elements) costs about what the scatter itself does
 * (n, plus a small target's worth of slack). A function of the sizes
 * alone: the same program gives bit-identical results whatever the
 * number of threads. */
static int64_t scatter_chunks(int64_t n, int64_t m) {
  int64_t c = n / SCATTER_GRAIN, cap = (n + SCATTER_GRAIN * 16) / (m > 0 ? m : 1);
  if (c > SCATTER_CHUNKS_MAX) c = SCATTER_CHUNKS_MAX;
  if (c > cap) c = cap;
  return c < 1 ? 1 : c;
}

/* The SCATTER node of api_scatter_sum: the partial sums [C, *sizes]. */
static kiln_tensor *scatter_partials(kiln_dtype dtype, int ndim, const int64_t *sizes, int dim, graph_node *index,
                                     const graph_view *iv, kiln_tensor *src, const graph_view *sv, const char *fn) {
  if (ndim + 1 > KILN_MAX_DIMS) {
    api_error(KILN_ERR_SHAPE, fn, "a scatter-add target has at most %d dims, not %d", KILN_MAX_DIMS - 1, ndim);
    return NULL;
  }
  int64_t psizes[KILN_MAX_DIMS], m = 1;
  for (int d = 0; d < ndim; d++) m *= sizes[d];
  psizes[0] = scatter_chunks(graph_view_numel(iv), m);
  memcpy(psizes + 1, sizes, sizeof *sizes * (size_t)ndim);
  kiln_dtype acc = graph_is_float(dtype) ? KILN_F64 : KILN_I64;
  graph_node *n = graph_node_new(GRAPH_OP_SCATTER, acc, ndim + 1, psizes);
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  n->cdtype = acc;
  graph_attr_set_scalar(n, dim);
  if (!api_add_input(n, src, sv)) {
    graph_node_release(n);
    return NULL;
  }
  graph_node_add_input(n, index, iv);
  return api_tensor_from_node(n, fn);
}

kiln_tensor *api_scatter_sum(kiln_dtype dtype, int ndim, const int64_t *sizes, int dim, graph_node *index,
                             const graph_view *iv, kiln_tensor *src, const graph_view *sv, const char *fn) {
  api_untracked_begin();
  kiln_tensor *p = scatter_partials(dtype, ndim, sizes, dim, index, iv, src, sv, fn), *sum = NULL;
  /* one chunk: its row is the sum (a view, read by the next kernel) */
  if (p) sum = p->view.sizes[0] == 1 ? kiln_select(p, 0, 0) : kiln_sum(p, 1, (const int[]){0}, false);
  kiln_release(p);
  api_untracked_end();
  return api_track(sum);
}

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
 * adds api_view_add records for a window view: 27 for a 3x3x3 kernel). */
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
    api_error(KILN_ERR_OOM, "api_view_add", "out of memory");
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
  *out = kiln_view(api_host_const(KILN_BOOL, count, m, like, "api_view_add"), ndim, shape);
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

/* api_view_add for a window view that is shifted copies of one injective
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

/* api_view_add for a permutation view: c read in storage order (a
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

kiln_tensor *api_view_add(kiln_dtype dtype, int64_t numel, const graph_view *v, kiln_tensor *c, const char *fn) {
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
    if (pv) r = api_scatter_sum(dtype, 1, &numel, 0, pv, &pos->view, src, &src->view, fn);
    out = r ? kiln_to_dtype(r, dtype) : NULL;
    kiln_release(pos), kiln_release(src), kiln_release(r);
  }
  api_untracked_end();
  return api_track(out);
}

/* index_add_ and its kin, once checked: t += the sum over index elements
 * c (row-major over iv's sizes) of src[c] at t[c with c[dim] = index[c]].
 * A generated kernel adds chunks of the elements into partial sums in
 * parallel (ops.def SCATTER); their sum over the chunks is added to t's
 * current contents and written back through t's view (one fused
 * reduction and write), converted to t's dtype: integers wrap as int64
 * sums do, bool ors. src is converted to t's dtype first, as in Torch. */
int api_scatter_add(kiln_tensor *t, int dim, kiln_tensor *index, const graph_view *iv, kiln_tensor *src,
                    const graph_view *sv, const char *fn) {
  api_untracked_begin();
  kiln_tensor *part = api_view(src, sv, fn), *conv = NULL, *sum = NULL, *res = NULL;
  if (part && part->storage->dtype != t->storage->dtype) conv = api_copy_contiguous(part, t->storage->dtype, fn);
  kiln_tensor *s = conv ? conv : part;
  graph_node *ix = s ? api_version(index) : NULL;
  if (ix) sum = api_scatter_sum(t->storage->dtype, t->view.ndim, t->view.sizes, dim, ix, iv, s, &s->view, fn);
  if (sum) res = kiln_add(t, sum);
  int st = res ? kiln_copy_(t, res) : api_status();
  kiln_release(part), kiln_release(conv), kiln_release(sum), kiln_release(res);
  api_untracked_end();
  return st;
}

/* index_copy_ / index_add_: src has t's sizes with dim replaced by the
 * index's length. */
/* For each slot j of a dim of `size`: the last position i with index[i] ==
 * j (negative indices wrapped), or -1 — the index's effect once duplicates
 * are resolved (the last write wins). The index was forced and checked by
 * api_index_check. malloc'ed [size], or NULL with the error set. */
static int64_t *last_writer(kiln_tensor *index, int64_t size, const char *fn) {
  int64_t *inv = graph_malloc(sizeof *inv * (size_t)(size > 0 ? size : 1));
  if (!inv) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  for (int64_t j = 0; j < size; j++) inv[j] = -1;
  int64_t n = graph_view_numel(&index->view);
  if (n == 0) return inv;
  void *tmp;
  const char *base = api_host_data(index, fn, &tmp);
  if (!base) {
    free(inv);
    return NULL;
  }
  graph_walk w;
  graph_walk_init(&w, &index->view, 0);
  for (int64_t e = 0; e < n; e++, graph_walk_next(&w)) {
    int64_t i = graph_load_index(index->storage->dtype, base, w.off);
    inv[i < 0 ? i + size : i] = e;
  }
  free(tmp);
  return inv;
}

/* t = where(slot selected along dim d, value, t), written back into t: one
 * fused elementwise kernel. inv [size of dim d] selects the slots >= 0;
 * value has t's dtype and broadcasts to t's sizes. */
static int write_selected(kiln_tensor *t, int d, const int64_t *inv, kiln_tensor *value, const char *fn) {
  int64_t size = t->view.sizes[d];
  uint8_t *sel = graph_malloc((size_t)(size > 0 ? size : 1));
  if (!sel) return api_error(KILN_ERR_OOM, fn, "out of memory");
  for (int64_t j = 0; j < size; j++) sel[j] = inv[j] >= 0;
  api_untracked_begin();
  kiln_tensor *ms = api_move_like(kiln_from_data(KILN_BOOL, 1, &size, sel), t, fn);
  graph_view mv = {.ndim = t->view.ndim}; /* sel spread over t's sizes */
  for (int k = 0; k < mv.ndim; k++) mv.sizes[k] = t->view.sizes[k];
  mv.strides[d] = 1;
  kiln_tensor *m = ms ? api_tensor(ms->storage, &mv, fn) : NULL;
  kiln_tensor *w = m ? kiln_where(m, value, t) : NULL;
  int st = w ? kiln_copy_(t, w) : api_status();
  kiln_release(ms), kiln_release(m), kiln_release(w);
  api_untracked_end();
  free(sel);
  return st;
}

/* index_copy_ once checked: t's slot j along d takes src's slice inv[j]
 * (the last writer): a gather from src selected into t — lazy and fused. */
static int copy_slices(kiln_tensor *t, int d, kiln_tensor *index, kiln_tensor *src, const char *fn) {
  int64_t size = t->view.sizes[d];
  if (graph_view_numel(&index->view) == 0 || graph_view_numel(&t->view) == 0) return KILN_OK;
  int64_t *inv = last_writer(index, size, fn);
  if (!inv) return api_status();
  int64_t *from = graph_malloc(sizeof *from * (size_t)size);
  if (!from) {
    free(inv);
    return api_error(KILN_ERR_OOM, fn, "out of memory");
  }
  for (int64_t j = 0; j < size; j++) from[j] = inv[j] >= 0 ? inv[j] : 0;
  api_untracked_begin();
  kiln_tensor *conv =
      src->storage->dtype == t->storage->dtype ? kiln_retain(src) : api_copy_contiguous(src, t->storage->dtype, fn);
  kiln_tensor *ft = api_move_like(kiln_from_data(KILN_I64, 1, &size, from), conv, fn), *g = NULL;
  if (conv && ft) {
    graph_view iv = spread_index(ft, t->view.ndim, t->view.sizes, d);
    g = api_gather(conv, &conv->view, d, ft, &iv, fn);
  }
  api_untracked_end();
  int st = g ? write_selected(t, d, inv, g, fn) : api_status();
  kiln_release(conv), kiln_release(ft), kiln_release(g);
  free(inv);
  free(from);
  return st;
}

/* index_copy_ (add false) and index_add_ (add true). */
static int index_put(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src, bool add, const char *fn) {
  int d;
  if (!check_target(t, index, dim, &d, fn) || !api_check(src, fn, "src")) return api_status();
  if (!check_vector_index(index, fn)) return api_status();
  int64_t n = graph_view_numel(&index->view);
  graph_view want = with_dim_size(&t->view, d, n);
  bool ok = src->view.ndim == want.ndim;
  for (int k = 0; ok && k < want.ndim; k++) ok = src->view.sizes[k] == want.sizes[k];
  if (!ok) {
    char a[256], b[256];
    return api_error(KILN_ERR_SHAPE, fn,
                     "src sizes %s do not match %s (t's sizes with dim %d of the index's length %lld)",
                     api_fmt_sizes(a, sizeof a, src->view.ndim, src->view.sizes),
                     api_fmt_sizes(b, sizeof b, want.ndim, want.sizes), d, (long long)n);
  }
  if (!api_index_check(index, fn, d, t->view.sizes[d], false)) return api_status();
  if (!add) return copy_slices(t, d, index, src, fn);
  graph_view iv = spread_index(index, want.ndim, want.sizes, d);
  return api_scatter_add(t, d, index, &iv, src, &src->view, fn);
}

KILN_API int kiln_index_copy_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  return index_put(t, dim, index, src, false, "kiln_index_copy_");
}

KILN_API int kiln_index_add_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  return index_put(t, dim, index, src, true, "kiln_index_add_");
}

KILN_API int kiln_index_fill_(kiln_tensor *t, int dim, kiln_tensor *index, double value) {
  const char *fn = "kiln_index_fill_";
  int d;
  if (!check_target(t, index, dim, &d, fn) || !check_vector_index(index, fn)) return api_status();
  if (!api_index_check(index, fn, d, t->view.sizes[d], true)) return api_status();
  if (graph_view_numel(&index->view) == 0 || graph_view_numel(&t->view) == 0) return KILN_OK;
  int64_t *inv = last_writer(index, t->view.sizes[d], fn);
  if (!inv) return api_status();
  api_untracked_begin();
  kiln_tensor *s = kiln_scalar(t->storage->dtype, value);
  api_untracked_end();
  int st = s ? write_selected(t, d, inv, s, fn) : api_status();
  kiln_release(s);
  free(inv);
  return st;
}

/* scatter_ checks: index has t's dims, index sizes <= t sizes off dim and
 * <= src sizes (when src is given) everywhere. */
static bool check_scatter_sizes(kiln_tensor *t, int d, kiln_tensor *index, kiln_tensor *src, const char *fn) {
  const graph_view *tv = &t->view, *iv = &index->view;
  char a[256], b[256];
  if (iv->ndim != tv->ndim || (src && src->view.ndim != tv->ndim)) {
    api_error(KILN_ERR_SHAPE, fn, "index sizes %s must have the dims of t sizes %s%s",
              api_fmt_sizes(a, sizeof a, iv->ndim, iv->sizes), api_fmt_sizes(b, sizeof b, tv->ndim, tv->sizes),
              src ? " and of src" : "");
    return false;
  }
  for (int k = 0; k < tv->ndim; k++) {
    bool bad_t = k != d && iv->sizes[k] > tv->sizes[k], bad_src = src && iv->sizes[k] > src->view.sizes[k];
    if (!bad_t && !bad_src) continue;
    const graph_view *o = bad_t ? tv : &src->view;
    api_error(KILN_ERR_SHAPE, fn, "index sizes %s exceed %s sizes %s at dim %d",
              api_fmt_sizes(a, sizeof a, iv->ndim, iv->sizes), bad_t ? "t" : "src",
              api_fmt_sizes(b, sizeof b, o->ndim, o->sizes), k);
    return false;
  }
  return true;
}

/* For each element of t's view (row-major position p): the last element
 * (row-major position e) of the checked, forced index that writes it, or
 * -1. malloc'ed [numel(t)], or NULL with the error set. */
static int64_t *last_writer_elems(kiln_tensor *t, int d, kiln_tensor *index, const char *fn) {
  int64_t n = graph_view_numel(&t->view), cs[KILN_MAX_DIMS];
  int64_t *inv = graph_malloc(sizeof *inv * (size_t)(n > 0 ? n : 1));
  if (!inv) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  for (int64_t p = 0; p < n; p++) inv[p] = -1;
  graph_contiguous_strides(t->view.ndim, t->view.sizes, cs);
  void *tmp;
  const char *base = api_host_data(index, fn, &tmp);
  if (!base) {
    free(inv);
    return NULL;
  }
  int64_t count = graph_view_numel(&index->view);
  graph_walk w;
  graph_walk_init(&w, &index->view, 0);
  for (int64_t e = 0; e < count; e++, graph_walk_next(&w)) {
    int64_t i = graph_load_index(index->storage->dtype, base, w.off), p = 0;
    for (int k = 0; k < t->view.ndim; k++) p += (k == d ? i : w.idx[k]) * cs[k];
    inv[p] = e;
  }
  free(tmp);
  return inv;
}

/* scatter_ (src) or scatter_value_ (src NULL) once checked: the host
 * resolves which index element writes each element of t (the last one in
 * row-major order), then t = where(written, src gathered at that element
 * or value, t) — one fused kernel. */
static int scatter_elems(kiln_tensor *t, int d, kiln_tensor *index, kiln_tensor *src, double value, const char *fn) {
  int64_t n = graph_view_numel(&t->view);
  if (graph_view_numel(&index->view) == 0 || n == 0) return KILN_OK;
  int64_t *inv = last_writer_elems(t, d, index, fn);
  uint8_t *sel = inv ? graph_malloc((size_t)n) : NULL;
  if (!sel) {
    free(inv);
    return inv ? api_error(KILN_ERR_OOM, fn, "out of memory") : api_status();
  }
  for (int64_t p = 0; p < n; p++) {
    sel[p] = inv[p] >= 0;
    if (inv[p] < 0) inv[p] = 0; /* any valid element: not selected */
  }
  api_untracked_begin();
  kiln_tensor *m = api_move_like(kiln_from_data(KILN_BOOL, t->view.ndim, t->view.sizes, sel), t, fn);
  kiln_tensor *part = NULL, *conv = NULL;
  kiln_tensor *flat = NULL, *ft = NULL, *g = NULL, *value_t = NULL;
  if (src) {
    graph_view sv = src->view; /* the part of src the index covers */
    for (int k = 0; k < sv.ndim; k++) sv.sizes[k] = index->view.sizes[k];
    int64_t all = -1;
    part = api_view(src, &sv, fn);
    if (part && src->storage->dtype == t->storage->dtype)
      conv = kiln_retain(part);
    else if (part)
      conv = api_copy_contiguous(part, t->storage->dtype, fn);
    flat = conv ? kiln_reshape(conv, 1, &all) : NULL;
    ft = api_move_like(kiln_from_data(KILN_I64, 1, &n, inv), flat, fn);
    g = flat && ft ? api_gather(flat, &flat->view, 0, ft, &ft->view, fn) : NULL;
    value_t = g ? kiln_view(g, t->view.ndim, t->view.sizes) : NULL;
  } else {
    value_t = kiln_scalar(t->storage->dtype, value);
  }
  kiln_tensor *w = m && value_t ? kiln_where(m, value_t, t) : NULL;
  int st = w ? kiln_copy_(t, w) : api_status();
  kiln_release(m), kiln_release(part), kiln_release(conv), kiln_release(flat);
  kiln_release(ft), kiln_release(g), kiln_release(value_t), kiln_release(w);
  api_untracked_end();
  free(inv);
  free(sel);
  return st;
}

KILN_API int kiln_scatter_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  const char *fn = "kiln_scatter_";
  int d;
  if (!check_target(t, index, dim, &d, fn) || !api_check(src, fn, "src")) return api_status();
  if (!check_scatter_sizes(t, d, index, src, fn)) return api_status();
  if (!api_index_check(index, fn, d, t->view.sizes[d], false)) return api_status();
  return scatter_elems(t, d, index, src, 0, fn);
}

KILN_API int kiln_scatter_value_(kiln_tensor *t, int dim, kiln_tensor *index, double value) {
  const char *fn = "kiln_scatter_value_";
  int d;
  if (!check_target(t, index, dim, &d, fn)) return api_status();
  if (!check_scatter_sizes(t, d, index, NULL, fn)) return api_status();
  if (!api_index_check(index, fn, d, t->view.sizes[d], false)) return api_status();
  return scatter_elems(t, d, index, NULL, value, fn);
}
