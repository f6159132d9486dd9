/*
 * callbacks.c — element callbacks: kiln_apply_, kiln_map_, kiln_map2_
 * (Torch7's apply, map and map2).
 *
 * A user function runs once per element of t's view, in row-major order,
 * on the calling thread, and its result is stored into that element
 * (converted as a cast does, graph_store_scalar). To keep Torch7's
 * sequential semantics inside Kiln's lazy model:
 *
 *  1. t and the inputs are forced;
 *  2. the part of t's storage its view spans, [offset, extent), is copied
 *     into a fresh buffer, and the loop reads and writes t's elements there
 *     at their storage offsets, so overlapping views (stride 0, unfold)
 *     behave as in Torch7: a later visit of a storage element sees the
 *     earlier store. An input over t's own storage reads that buffer too
 *     (inside the span), so it sees the values already updated, exactly
 *     like Torch7's lockstep loop over the same memory;
 *  3. the buffer becomes a realized node that is written into t's view by
 *     an ordinary ASSIGN (api_assign), which is then forced: ops recorded
 *     before the call keep the old version (copy-on-write by the runtime),
 *     every tensor over the storage sees the new values.
 */
#include <string.h>

#include "ops.h"
#include "runtime.h"
#include "graph_walk.h"

/* The user function, of arity 1, 2 or 3 (one of the pointers is set). */
typedef struct cb_fn {
  kiln_fn1 f1;
  kiln_fn2 f2;
  kiln_fn3 f3;
  void *ctx;
} cb_fn;

/* One input being walked: its realized storage, or the working buffer
 * when it shares t's storage. */
typedef struct cb_input {
  kiln_dtype dtype;
  size_t esize;
  const char *base; /* realized buffer of its storage */
  bool alias;       /* same storage as t: read the span from `work` */
  graph_walk w;
} cb_input;

/* The span of t's storage being rewritten: storage elements [lo, hi) live
 * at work[(i - lo) * esize]. */
typedef struct cb_span {
  char *work;
  int64_t lo, hi;
  kiln_dtype dtype;
  size_t esize;
} cb_span;

static double read_input(const cb_input *in, const cb_span *s) {
  int64_t off = in->w.off;
  if (in->alias && off >= s->lo && off < s->hi)
    return graph_load_scalar(in->dtype, s->work + (size_t)(off - s->lo) * s->esize);
  return graph_load_scalar(in->dtype, in->base + (size_t)off * in->esize);
}

/* The sequential loop over numel elements (step 2 above). */
static void run_loop(const kiln_tensor *t, cb_span *s, cb_input *in, int n_in, const cb_fn *fn) {
  int64_t numel = graph_view_numel(&t->view);
  graph_walk w;
  graph_walk_init(&w, &t->view, 0);
  for (int64_t e = 0; e < numel; e++) {
    char *p = s->work + (size_t)(w.off - s->lo) * s->esize;
    double x = graph_load_scalar(s->dtype, p), y[2] = {0, 0};
    for (int k = 0; k < n_in; k++) y[k] = read_input(&in[k], s);
    double r = n_in == 0 ? fn->f1(x, fn->ctx) : n_in == 1 ? fn->f2(x, y[0], fn->ctx) : fn->f3(x, y[0], y[1], fn->ctx);
    graph_store_scalar(s->dtype, p, r);
    graph_walk_next(&w);
    for (int k = 0; k < n_in; k++) graph_walk_next(&in[k].w);
  }
}

/* Argument checks: non-NULL tensors and function, equal element counts. */
static int check_args(kiln_tensor *t, kiln_tensor *const *in, const char *const *names, int n_in, bool have_fn,
                      const char *fn) {
  if (!api_check(t, fn, "t")) return api_status();
  for (int k = 0; k < n_in; k++)
    if (!api_check(in[k], fn, names[k])) return api_status();
  if (!have_fn) return api_error(KILN_ERR_ARG, fn, "the callback fn is NULL");
  if (!api_check_host(t, fn)) return KILN_ERR_DEVICE;
  for (int k = 0; k < n_in; k++)
    if (!api_check_host(in[k], fn)) return KILN_ERR_DEVICE;
  int64_t numel = graph_view_numel(&t->view);
  for (int k = 0; k < n_in; k++) {
    int64_t m = graph_view_numel(&in[k]->view);
    if (m == numel) continue;
    char a[256], b[256];
    return api_error(KILN_ERR_SHAPE, fn, "%s has %lld elements (sizes %s) but t has %lld (sizes %s)", names[k],
                     (long long)m, api_fmt_sizes(a, sizeof a, in[k]->view.ndim, in[k]->view.sizes), (long long)numel,
                     api_fmt_sizes(b, sizeof b, t->view.ndim, t->view.sizes));
  }
  return KILN_OK;
}

/* The callback's result depends on t's old contents and on the inputs:
 * they are kept as its recipe, so that kiln_grad can tell a gradient
 * asked through it (an error naming fname) from a constant. */
static void mark_opaque(graph_node *value, kiln_tensor *t, kiln_tensor *const *in, int n_in, const char *fname) {
  value->opaque = fname;
  graph_node_add_input(value, t->storage->version, &t->view);
  for (int k = 0; k < n_in; k++) graph_node_add_input(value, in[k]->storage->version, &in[k]->view);
  value->n_hist = value->n_inputs;
  value->n_inputs = 0;
}

/* A call that fails returns with t unchanged: when forcing the write
 * fails (out of memory), the storage goes back to its old version (the
 * write, still pending, is dropped). */
static void forget_write(kiln_storage *s, graph_node *old) {
  graph_node *w = s->version;
  s->version = graph_node_retain(old);
  graph_node_release(w);
}

/* Steps 1-3 for t and n_in (0..2) inputs. */
static int cb_run(kiln_tensor *t, kiln_tensor *const *in, const char *const *names, int n_in, const cb_fn *fn,
                  const char *fname) {
  bool have_fn = n_in == 0 ? fn->f1 != NULL : n_in == 1 ? fn->f2 != NULL : fn->f3 != NULL;
  if (check_args(t, in, names, n_in, have_fn, fname) != KILN_OK) return api_status();
  if (graph_view_numel(&t->view) == 0) return KILN_OK;
  if (!api_force(t, fname)) return api_status();
  for (int k = 0; k < n_in; k++)
    if (!api_force(in[k], fname)) return api_status();
  cb_span s = {.lo = t->view.offset, .hi = graph_view_extent(&t->view), .dtype = t->storage->dtype};
  s.esize = (size_t)graph_dtypes[s.dtype].size;
  rt_alloc_install();
  graph_buffer *buf = graph_buffer_alloc((s.hi - s.lo) * (int64_t)s.esize);
  if (!buf) return api_error(KILN_ERR_OOM, fname, "out of memory");
  s.work = buf->data;
  memcpy(s.work, (const char *)t->storage->version->buffer->data + (size_t)s.lo * s.esize,
         (size_t)(s.hi - s.lo) * s.esize);
  cb_input inputs[2];
  for (int k = 0; k < n_in; k++) {
    cb_input *c = &inputs[k];
    c->dtype = in[k]->storage->dtype;
    c->esize = (size_t)graph_dtypes[c->dtype].size;
    c->base = in[k]->storage->version->buffer->data;
    c->alias = in[k]->storage == t->storage;
    graph_walk_init(&c->w, &in[k]->view, 0);
  }
  run_loop(t, &s, inputs, n_in, fn);
  graph_node *value = graph_node_from_buffer(buf, s.dtype, s.hi - s.lo);
  if (!value) return api_error(KILN_ERR_OOM, fname, "out of memory");
  mark_opaque(value, t, in, n_in, fname);
  graph_view vv = t->view;
  vv.offset -= s.lo;
  graph_node *old = graph_node_retain(t->storage->version);
  int st = api_assign(t, value, &vv, fname);
  graph_node_release(value);
  if (st == KILN_OK && !api_force(t, fname)) {
    st = api_status();
    forget_write(t->storage, old);
  }
  graph_node_release(old);
  return st;
}

KILN_API int kiln_apply_(kiln_tensor *t, kiln_fn1 fn, void *ctx) {
  cb_fn f = {.f1 = fn, .ctx = ctx};
  return cb_run(t, NULL, NULL, 0, &f, "kiln_apply_");
}

KILN_API int kiln_map_(kiln_tensor *t, kiln_tensor *src, kiln_fn2 fn, void *ctx) {
  cb_fn f = {.f2 = fn, .ctx = ctx};
  kiln_tensor *in[1] = {src};
  static const char *const names[1] = {"src"};
  return cb_run(t, in, names, 1, &f, "kiln_map_");
}

KILN_API int kiln_map2_(kiln_tensor *t, kiln_tensor *a, kiln_tensor *b, kiln_fn3 fn, void *ctx) {
  cb_fn f = {.f3 = fn, .ctx = ctx};
  kiln_tensor *in[2] = {a, b};
  static const char *const names[2] = {"a", "b"};
  return cb_run(t, in, names, 2, &f, "kiln_map2_");
}
