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

#include "ops.h"
#include "graph_walk.h"

bool ops_index_check(kiln_tensor *index, const char *fn, int dim, int64_t size, bool wrap) {
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

kiln_tensor *ops_gather(kiln_tensor *t, const graph_view *tv, int dim, kiln_tensor *index, const graph_view *iv,
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
  return check_common(t, index, dim, d, fn) && ops_check_writable(t, fn);
}

KILN_API kiln_tensor *kiln_index_select(kiln_tensor *t, int dim, kiln_tensor *index) {
  const char *fn = "kiln_index_select";
  int d;
  if (!check_common(t, index, dim, &d, fn) || !check_vector_index(index, fn)) return NULL;
  if (!ops_index_check(index, fn, d, t->view.sizes[d], false)) return NULL;
  int64_t n = graph_view_numel(&index->view);
  graph_view out = with_dim_size(&t->view, d, n);
  graph_view iv = spread_index(index, out.ndim, out.sizes, d);
  return ops_gather(t, &t->view, d, index, &iv, fn);
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
  if (!ops_index_check(index, fn, d, tv->sizes[d], false)) return NULL;
  return ops_gather(t, tv, d, index, iv, fn);
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

/* The SCATTER node of ops_scatter_sum: the partial sums [C, *sizes]. */
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

kiln_tensor *ops_scatter_sum(kiln_dtype dtype, int ndim, const int64_t *sizes, int dim, graph_node *index,
                             const graph_view *iv, kiln_tensor *src, const graph_view *sv, const char *fn) {
  api_untracked_begin();
  kiln_tensor *p = scatter_partials(dtype, ndim, sizes, dim, index, iv, src, sv, fn), *sum = NULL;
  /* one chunk: its row is the sum (a view, read by the next kernel) */
  if (p) sum = p->view.sizes[0] == 1 ? kiln_select(p, 0, 0) : kiln_sum(p, 1, (const int[]){0}, false);
  kiln_release(p);
  api_untracked_end();
  return api_track(sum);
}

/* index_add_ and its kin, once checked: t += the sum over index elements
 * c (row-major over iv's sizes) of src[c] at t[c with c[dim] = index[c]].
 * A generated kernel adds chunks of the elements into partial sums in
 * parallel (ops.def SCATTER); their sum over the chunks is added to t's
 * current contents and written back through t's view (one fused
 * reduction and write), converted to t's dtype: integers wrap as int64
 * sums do, bool ors. src is converted to t's dtype first, as in Torch. */
int ops_scatter_add(kiln_tensor *t, int dim, kiln_tensor *index, const graph_view *iv, kiln_tensor *src,
                    const graph_view *sv, const char *fn) {
  api_untracked_begin();
  kiln_tensor *part = api_view(src, sv, fn), *conv = NULL, *sum = NULL, *res = NULL;
  if (part && part->storage->dtype != t->storage->dtype) conv = ops_copy_contiguous(part, t->storage->dtype, fn);
  kiln_tensor *s = conv ? conv : part;
  graph_node *ix = s ? api_version(index) : NULL;
  if (ix) sum = ops_scatter_sum(t->storage->dtype, t->view.ndim, t->view.sizes, dim, ix, iv, s, &s->view, fn);
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
 * ops_index_check. malloc'ed [size], or NULL with the error set. */
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
  kiln_tensor *ms = ops_move_like(kiln_from_data(KILN_BOOL, 1, &size, sel), t, fn);
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
      src->storage->dtype == t->storage->dtype ? kiln_retain(src) : ops_copy_contiguous(src, t->storage->dtype, fn);
  kiln_tensor *ft = ops_move_like(kiln_from_data(KILN_I64, 1, &size, from), conv, fn), *g = NULL;
  if (conv && ft) {
    graph_view iv = spread_index(ft, t->view.ndim, t->view.sizes, d);
    g = ops_gather(conv, &conv->view, d, ft, &iv, fn);
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
  if (!ops_index_check(index, fn, d, t->view.sizes[d], false)) return api_status();
  if (!add) return copy_slices(t, d, index, src, fn);
  graph_view iv = spread_index(index, want.ndim, want.sizes, d);
  return ops_scatter_add(t, d, index, &iv, src, &src->view, fn);
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
  if (!ops_index_check(index, fn, d, t->view.sizes[d], true)) return api_status();
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
  kiln_tensor *m = ops_move_like(kiln_from_data(KILN_BOOL, t->view.ndim, t->view.sizes, sel), t, fn);
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
      conv = ops_copy_contiguous(part, t->storage->dtype, fn);
    flat = conv ? kiln_reshape(conv, 1, &all) : NULL;
    ft = ops_move_like(kiln_from_data(KILN_I64, 1, &n, inv), flat, fn);
    g = flat && ft ? ops_gather(flat, &flat->view, 0, ft, &ft->view, fn) : NULL;
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
  if (!ops_index_check(index, fn, d, t->view.sizes[d], false)) return api_status();
  return scatter_elems(t, d, index, src, 0, fn);
}

KILN_API int kiln_scatter_value_(kiln_tensor *t, int dim, kiln_tensor *index, double value) {
  const char *fn = "kiln_scatter_value_";
  int d;
  if (!check_target(t, index, dim, &d, fn)) return api_status();
  if (!check_scatter_sizes(t, d, index, NULL, fn)) return api_status();
  if (!ops_index_check(index, fn, d, t->view.sizes[d], false)) return api_status();
  return scatter_elems(t, d, index, NULL, value, fn);
}
