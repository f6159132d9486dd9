/*
 * index.c — indexing by index tensors: index_select, gather (GATHER
 * nodes) and index_copy_, index_add_, index_fill_, scatter_,
 * scatter_value_ (SCATTER nodes written back by an ASSIGN).
 *
 * GATHER is elementwise over its result and lowered to a kernel (passes/
 * lower.c: a load at an index read from the index buffer), so it fuses
 * into its readers. SCATTER is an extern op run as a plain C loop by the
 * runtime (runtime/index.c): a scatter with duplicate indices is
 * sequential. Both are lazy: the call records a node and nothing else
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
 * In-place ops build the target's new contents as a SCATTER node reading
 * the target's current version, then record an ASSIGN of it into the
 * target's view (api_assign): views sharing the storage see the write, ops
 * recorded before do not.
 */
#include <string.h>

#include "api_internal.h"
#include "walk.h"

bool api_index_check(kiln_tensor *index, const char *fn, int dim, int64_t size, bool wrap) {
  kiln_dtype dt = index->storage->dtype;
  if (dt != KILN_I64 && dt != KILN_I32) {
    api_error(KILN_ERR_DTYPE, fn, "index dtype %s is not i64 or i32", graph_dtypes[dt].name);
    return false;
  }
  int64_t n = graph_view_numel(&index->view);
  if (n == 0) return true;
  graph_node *v = api_force(index, fn);
  if (!v) return false;
  const char *base = v->buffer->data;
  api_walk w;
  api_walk_init(&w, &index->view, 0);
  for (int64_t e = 0; e < n; e++, api_walk_next(&w)) {
    int64_t i;
    if (dt == KILN_I32) {
      int32_t x;
      memcpy(&x, base + w.off * 4, 4);
      i = x;
    } else {
      memcpy(&i, base + w.off * 8, 8);
    }
    if (wrap && i < 0 && i >= -size) i += size;
    if (i < 0 || i >= size) {
      api_error(KILN_ERR_INDEX, fn, "index %lld is out of range for dim %d of size %lld", (long long)i, dim,
                (long long)size);
      return false;
    }
  }
  return true;
}

kiln_tensor *api_gather(kiln_tensor *t, const graph_view *tv, int dim, kiln_tensor *index, const graph_view *iv,
                        const char *fn) {
  graph_node *n = graph_node_new(GRAPH_OP_GATHER, t->storage->dtype, iv->ndim, iv->sizes);
  if (n) {
    n->cdtype = n->dtype;
    n->attr.scalar = dim;
    graph_node_add_input(n, api_version(t), tv);
    graph_node_add_input(n, api_version(index), iv);
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

/* Records t[view] = SCATTER(t, index over iv, src over sv). src is
 * converted to t's dtype first when needed. */
static int scatter(kiln_tensor *t, int dim, kiln_tensor *index, const graph_view *iv, kiln_tensor *src,
                   const graph_view *sv, int mode, const char *fn) {
  kiln_tensor *conv = NULL;
  graph_view cv = *sv;
  if (src->storage->dtype != t->storage->dtype) {
    api_untracked_begin();
    kiln_tensor *part = api_tensor(src->storage, sv, fn);
    conv = part ? api_copy_contiguous(part, t->storage->dtype, fn) : NULL;
    kiln_release(part);
    api_untracked_end();
    if (!conv) return kiln_last_status();
    cv = conv->view;
    src = conv;
  }
  graph_node *n = graph_node_new(GRAPH_OP_SCATTER, t->storage->dtype, t->view.ndim, t->view.sizes);
  if (!n) {
    kiln_release(conv);
    return api_error(KILN_ERR_OOM, fn, "out of memory");
  }
  n->cdtype = n->dtype;
  n->attr.scalar = dim;
  n->attr.scalar2 = mode;
  graph_node_add_input(n, api_version(t), &t->view);
  graph_node_add_input(n, api_version(index), iv);
  graph_node_add_input(n, api_version(src), &cv);
  graph_view whole = graph_view_contiguous(t->view.ndim, t->view.sizes);
  int st = api_assign(t, n, &whole, fn);
  graph_node_release(n);
  kiln_release(conv);
  return st;
}

/* index_copy_ / index_add_: src has t's sizes with dim replaced by the
 * index's length. */
static int index_put(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src, int mode, const char *fn) {
  int d;
  if (!check_common(t, index, dim, &d, fn) || !api_check(src, fn, "src")) return kiln_last_status();
  if (!check_vector_index(index, fn)) return kiln_last_status();
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
  if (!api_index_check(index, fn, d, t->view.sizes[d], false)) return kiln_last_status();
  graph_view iv = spread_index(index, want.ndim, want.sizes, d);
  return scatter(t, d, index, &iv, src, &src->view, mode, fn);
}

KILN_API int kiln_index_copy_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  return index_put(t, dim, index, src, 0, "kiln_index_copy_");
}

KILN_API int kiln_index_add_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  return index_put(t, dim, index, src, 1, "kiln_index_add_");
}

/* A 0-d tensor holding value in t's dtype, viewed with stride 0 over
 * `sizes` of v. */
static kiln_tensor *value_tensor(kiln_tensor *t, double value, const graph_view *v, graph_view *out) {
  api_untracked_begin();
  kiln_tensor *s = kiln_scalar(t->storage->dtype, value);
  api_untracked_end();
  *out = (graph_view){.ndim = v->ndim};
  for (int k = 0; k < v->ndim; k++) out->sizes[k] = v->sizes[k];
  return s;
}

KILN_API int kiln_index_fill_(kiln_tensor *t, int dim, kiln_tensor *index, double value) {
  const char *fn = "kiln_index_fill_";
  int d;
  if (!check_common(t, index, dim, &d, fn) || !check_vector_index(index, fn)) return kiln_last_status();
  if (!api_index_check(index, fn, d, t->view.sizes[d], true)) return kiln_last_status();
  graph_view want = with_dim_size(&t->view, d, graph_view_numel(&index->view));
  graph_view iv = spread_index(index, want.ndim, want.sizes, d), sv;
  kiln_tensor *s = value_tensor(t, value, &want, &sv);
  if (!s) return kiln_last_status();
  int st = scatter(t, d, index, &iv, s, &sv, 2, fn);
  kiln_release(s);
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

KILN_API int kiln_scatter_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src) {
  const char *fn = "kiln_scatter_";
  int d;
  if (!check_common(t, index, dim, &d, fn) || !api_check(src, fn, "src")) return kiln_last_status();
  if (!check_scatter_sizes(t, d, index, src, fn)) return kiln_last_status();
  if (!api_index_check(index, fn, d, t->view.sizes[d], false)) return kiln_last_status();
  graph_view sv = src->view; /* the part of src the index covers */
  for (int k = 0; k < sv.ndim; k++) sv.sizes[k] = index->view.sizes[k];
  return scatter(t, d, index, &index->view, src, &sv, 0, fn);
}

KILN_API int kiln_scatter_value_(kiln_tensor *t, int dim, kiln_tensor *index, double value) {
  const char *fn = "kiln_scatter_value_";
  int d;
  if (!check_common(t, index, dim, &d, fn)) return kiln_last_status();
  if (!check_scatter_sizes(t, d, index, NULL, fn)) return kiln_last_status();
  if (!api_index_check(index, fn, d, t->view.sizes[d], false)) return kiln_last_status();
  graph_view sv;
  kiln_tensor *s = value_tensor(t, value, &index->view, &sv);
  if (!s) return kiln_last_status();
  int st = scatter(t, d, index, &index->view, s, &sv, 0, fn);
  kiln_release(s);
  return st;
}
