/*
 * node.c — version nodes (and their attribute bytes), buffers, storages and
 * tensor handles, with their reference counts.
 *
 * Invariants: a pending node holds a reference to each input node; once
 * realized (buffer set) it drops them, so a realized graph is freed as soon
 * as no tensor needs it. Releasing a long chain is iterative, never
 * recursive, so a million-node chain cannot overflow the C stack.
 * Reference counts (nodes, buffers, storages, tensors) and the pending
 * counter are atomic: realized tensors may be shared between threads
 * (kiln.h, "Threads"), and every thread's graphs retain and release the
 * nodes they read. A pending graph is used by one thread at a time.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* The properties each kind implies (ops.def's header); the props column
 * adds the op's own. */
#define KIND_SOURCE 0
#define KIND_UNARY (GRAPH_PROP_POINTWISE | GRAPH_PROP_ELEMENTWISE)
#define KIND_BINARY KIND_UNARY
#define KIND_TERNARY KIND_UNARY
#define KIND_CAST KIND_UNARY
#define KIND_GATHER GRAPH_PROP_ELEMENTWISE
#define KIND_REDUCE 0
#define KIND_SCAN 0
#define KIND_ASSIGN 0
#define KIND_EXTERN 0
#define KIND_SCATTER 0
#define CHEAP GRAPH_PROP_CHEAP
#define MOVE GRAPH_PROP_MOVEMENT
#define DIFF GRAPH_PROP_DIFFERENTIABLE

const graph_op_info graph_ops[GRAPH_OP_COUNT] = {
#define X(name, arity, kind, result, props) {#name, arity, GRAPH_##kind, GRAPH_RES_##result, KIND_##kind | (props)},
#include "ops.def"
#undef X
#undef CHEAP
#undef MOVE
#undef DIFF
};

static atomic_uint_fast64_t next_node_id = 1;
static atomic_int_fast64_t pending_nodes = 0, live_nodes = 0, live_buffers = 0;
static atomic_uint_fast64_t next_storage_id = 1;

int64_t graph_pending_count(void) { return atomic_load_explicit(&pending_nodes, memory_order_relaxed); }
int64_t graph_live_nodes(void) { return atomic_load_explicit(&live_nodes, memory_order_relaxed); }
int64_t graph_live_buffers(void) { return atomic_load_explicit(&live_buffers, memory_order_relaxed); }

/* ------------------------------------------------------------ buffers */

static void *default_alloc(int64_t bytes) { return aligned_alloc(64, ((size_t)bytes + 63) / 64 * 64); }
static void default_free(void *p, int64_t bytes) { free(p); }

static graph_allocator allocator = {default_alloc, default_free};

void graph_set_allocator(const graph_allocator *a) { allocator = *a; }

/* A buffer of refcount 1 over data [bytes]; callers say how it is freed. */
static graph_buffer *new_buffer(void *data, int64_t bytes) {
  graph_buffer *b = graph_calloc(1, sizeof *b);
  if (!b) return NULL;
  atomic_fetch_add_explicit(&live_buffers, 1, memory_order_relaxed);
  b->refcount = 1;
  b->data = data;
  b->bytes = bytes;
  return b;
}

graph_buffer *graph_buffer_alloc(int64_t bytes) {
  int64_t n = bytes > 0 ? bytes : 1;
  void *data = graph_fault_hit(GRAPH_FAULT_BUFFER) ? NULL : allocator.alloc(n);
  if (!data) return NULL;
  graph_buffer *b = graph_buffer_own(data, bytes, KILN_CPU, allocator.free);
  if (!b) allocator.free(data, n);
  return b;
}

graph_buffer *graph_buffer_wrap(void *data, int64_t bytes, void (*deleter)(void *, void *), void *ctx) {
  graph_buffer *b = new_buffer(data, bytes);
  if (!b) return NULL;
  b->deleter = deleter;
  b->ctx = ctx;
  b->borrowed = deleter == NULL;
  return b;
}

graph_buffer *graph_buffer_own(void *data, int64_t bytes, kiln_device device, void (*free_fn)(void *, int64_t)) {
  graph_buffer *b = new_buffer(data, bytes);
  if (!b) return NULL;
  b->device = device;
  b->free_fn = free_fn;
  return b;
}

graph_buffer *graph_buffer_retain(graph_buffer *b) {
  if (b) graph_ref(&b->refcount);
  return b;
}

void graph_buffer_release(graph_buffer *b) {
  if (!b || !graph_unref(&b->refcount)) return;
  if (b->deleter) b->deleter(b->data, b->ctx);
  else if (!b->borrowed) b->free_fn(b->data, b->bytes > 0 ? b->bytes : 1);
  free(b);
  atomic_fetch_sub_explicit(&live_buffers, 1, memory_order_relaxed);
}

/* -------------------------------------------------------------- nodes */

/* Elements of sizes [ndim], or -1 when the buffer's bytes (8 per element
 * at most) would not fit int64. */
static int64_t checked_numel(int ndim, const int64_t *sizes) {
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++)
    if (sizes[i] < 0 || __builtin_mul_overflow(numel, sizes[i], &numel) || numel > INT64_MAX / 8) return -1;
  return numel;
}

graph_node *graph_node_new(graph_op op, kiln_dtype dtype, int ndim, const int64_t *sizes) {
  if (checked_numel(ndim, sizes) < 0) return NULL; /* callers check sizes first: defence in depth */
  graph_node *n = graph_calloc(1, sizeof *n);
  if (!n) return NULL;
  n->refcount = 1;
  n->id = atomic_fetch_add_explicit(&next_node_id, 1, memory_order_relaxed);
  n->op = op;
  n->dtype = dtype;
  n->cdtype = dtype;
  n->ndim = ndim;
  n->numel = 1;
  for (int i = 0; i < ndim; i++) {
    n->sizes[i] = sizes[i];
    n->numel *= sizes[i];
  }
  atomic_fetch_add_explicit(&pending_nodes, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&live_nodes, 1, memory_order_relaxed);
  return n;
}

graph_node *graph_node_from_buffer(graph_buffer *buf, kiln_dtype dtype, int64_t numel) {
  graph_node *n = graph_node_new(GRAPH_OP_BUFFER, dtype, 1, &numel);
  if (!n) {
    graph_buffer_release(buf);
    return NULL;
  }
  n->buffer = buf;
  n->device = buf->device;
  atomic_fetch_sub_explicit(&pending_nodes, 1, memory_order_relaxed);
  return n;
}

void graph_node_add_input(graph_node *n, graph_node *src, const graph_view *view) {
  graph_input *in = &n->inputs[n->n_inputs++];
  in->node = graph_node_retain(src);
  in->view = *view;
  in->no_grad = false;
  n->deps |= src->deps | graph_dep_bit(src->storage_id);
  if (src->device == KILN_CUDA) n->device = KILN_CUDA;
}

graph_node *graph_node_clone(const graph_node *n, graph_node *const *inputs) {
  graph_node *c = graph_node_new(n->op, n->dtype, n->ndim, n->sizes);
  if (!c) return NULL;
  c->cdtype = n->cdtype;
  c->device = n->device;
  c->numel = n->numel;
  c->attr_len = n->attr_len;
  memcpy(c->attr, n->attr, sizeof c->attr);
  c->no_grad = n->no_grad;
  c->opaque = n->opaque;
  c->deps = n->deps;
  for (int i = 0; i < n->n_inputs; i++) {
    graph_node_add_input(c, inputs[i], &n->inputs[i].view);
    c->inputs[i].no_grad = n->inputs[i].no_grad;
    c->inputs[i].order_only = n->inputs[i].order_only;
  }
  return c;
}

graph_node *graph_node_retain(graph_node *n) {
  if (n) graph_ref(&n->refcount);
  return n;
}

/* Drops a reference to n; true when it was the last. An orphan may sit
 * in the history queue, whose eviction takes a reference from the count
 * alone (graph/history.c, try_retain): its last reference is a real
 * decrement, so the two cannot both think they own it. A count of one
 * with no orphan mark is ours alone (the mark is set by a holder, before
 * its reference is dropped, so the acquire load sees it). */
static bool node_unref(graph_node *n) {
  if (atomic_load_explicit(&n->refcount, memory_order_acquire) == 1 && !n->orphan) return true;
  return atomic_fetch_sub_explicit(&n->refcount, 1, memory_order_acq_rel) == 1;
}

/* Frees n and every input whose last reference it held, through an
 * intrusive work list (no recursion, no allocation). */
void graph_node_release(graph_node *n) {
  if (!n || !node_unref(n)) return;
  n->free_next = NULL;
  graph_node *work = n;
  int64_t pending_freed = 0, freed = 0; /* one atomic update each for the whole chain */
  while (work) {
    graph_node *cur = work;
    work = cur->free_next;
    for (int i = 0; i < cur->n_inputs + cur->n_hist; i++) { /* one of them is 0 */
      graph_node *in = cur->inputs[i].node;
      if (!node_unref(in)) continue;
      in->free_next = work;
      work = in;
    }
    pending_freed += !cur->buffer && !cur->overwritten && !cur->retired;
    freed++;
    graph_history_forget(cur);
    graph_buffer_release(cur->buffer);
    free(cur);
  }
  if (pending_freed) atomic_fetch_sub_explicit(&pending_nodes, pending_freed, memory_order_relaxed);
  atomic_fetch_sub_explicit(&live_nodes, freed, memory_order_relaxed);
}

/* Whether a gradient could flow from n into its inputs (as grad_edge:
 * from a float value into float inputs): the recipe worth keeping once n
 * is realized. */
static bool keeps_recipe(const graph_node *n) {
  if (n->no_grad || !graph_op_is_differentiable(n->op) || !graph_is_float(n->dtype)) return false;
  for (int i = 0; i < n->n_inputs; i++)
    if (!n->inputs[i].no_grad && graph_is_float(n->inputs[i].node->dtype)) return true;
  return false;
}

static void release_inputs(graph_node *n, int count) {
  for (int i = 0; i < count; i++) {
    graph_node_release(n->inputs[i].node);
    n->inputs[i].node = NULL;
  }
}

void graph_node_set_buffer(graph_node *n, graph_buffer *buf) {
  if (!n->buffer && !n->retired) atomic_fetch_sub_explicit(&pending_nodes, 1, memory_order_relaxed);
  n->retired = true; /* counted once */
  graph_buffer_release(n->buffer);
  n->buffer = buf;
  if (!n->n_inputs) return;
  graph_node *old = n->op == GRAPH_OP_ASSIGN ? n->inputs[0].node : NULL;
  if (old && old->buffer == buf) { /* written in place: the old contents are gone */
    old->buffer = NULL;
    old->overwritten = true;
    graph_buffer_release(buf);
  }
  n->n_hist = n->n_inputs;
  n->n_inputs = 0;
}

void graph_node_retire(graph_node *n) {
  if (n->buffer || n->overwritten || n->retired) return;
  n->retired = true;
  atomic_fetch_sub_explicit(&pending_nodes, 1, memory_order_relaxed);
}

void graph_node_settle(graph_node *n) {
  if (!n->buffer || !n->n_hist) return;
  n->n_inputs = n->n_hist; /* keeps_recipe reads the inputs */
  bool keep = keeps_recipe(n);
  n->n_inputs = 0;
  if (keep) {
    /* ordering edges (always last) are not part of the recipe: a kept
     * chain of them would hold every earlier collective's result */
    while (n->n_hist > 0 && n->inputs[n->n_hist - 1].order_only) {
      graph_node_release(n->inputs[n->n_hist - 1].node);
      n->inputs[n->n_hist - 1] = (graph_input){0};
      n->n_hist--;
    }
    graph_history_settled(n);
    return;
  }
  int count = n->n_hist;
  n->n_hist = 0;
  release_inputs(n, count);
}

void graph_node_drop_history(graph_node *n) {
  if (!n) return;
  graph_history_forget(n);
  if (!(n->buffer || n->overwritten) || !n->n_hist) return;
  int count = n->n_hist;
  n->n_hist = 0;
  n->hist_dropped = true;
  release_inputs(n, count);
}

/* ---------------------------------------------------------- attributes */

void graph_attr_set_region(graph_node *n, const graph_view *region) {
  unsigned char buf[GRAPH_ATTR_BYTES - GRAPH_ATTR_REGION], *w = buf;
  size_t dims = sizeof *region->sizes * (size_t)region->ndim;
  *w++ = (unsigned char)region->ndim;
  memcpy(w, &region->offset, sizeof region->offset);
  memcpy(w + sizeof region->offset, region->sizes, dims);
  memcpy(w + sizeof region->offset + dims, region->strides, dims);
  w += sizeof region->offset + 2 * dims;
  if (n->attr_len > GRAPH_ATTR_REGION) { /* drop the old region: a shorter one leaves no old bytes */
    memset(n->attr + GRAPH_ATTR_REGION, 0, (size_t)(n->attr_len - GRAPH_ATTR_REGION));
    int len = GRAPH_ATTR_REGION;
    while (len > 0 && n->attr[len - 1] == 0) len--;
    n->attr_len = (uint16_t)len;
  }
  graph_attr_write(n, GRAPH_ATTR_REGION, buf, (int)(w - buf));
}

graph_view graph_attr_region(const graph_node *n) {
  const unsigned char *r = n->attr + GRAPH_ATTR_REGION;
  graph_view v = {.ndim = r[0]};
  size_t dims = sizeof *v.sizes * (size_t)v.ndim;
  memcpy(&v.offset, r + 1, sizeof v.offset);
  memcpy(v.sizes, r + 1 + sizeof v.offset, dims);
  memcpy(v.strides, r + 1 + sizeof v.offset + dims, dims);
  return v;
}

/* ------------------------------------------------ storages and tensors */

kiln_storage *graph_storage_new(kiln_dtype dtype, int64_t numel, graph_node *version) {
  kiln_storage *s = graph_handle_alloc(GRAPH_HANDLE_STORAGE, sizeof *s);
  if (!s) {
    graph_node_release(version);
    return NULL;
  }
  s->refcount = 1;
  s->id = atomic_fetch_add_explicit(&next_storage_id, 1, memory_order_relaxed);
  s->dtype = dtype;
  s->device = version ? version->device : KILN_CPU;
  s->numel = numel;
  s->version = version;
  if (version && !version->storage_id) version->storage_id = s->id;
  return s;
}

void graph_storage_set_version(kiln_storage *s, graph_node *v) {
  graph_node *old = s->version;
  s->version = v;
  if (v && old) {
    v->storage_id = s->id;
    v->version_no = old->version_no + 1;
  }
  graph_node_orphan(old); /* no tensor shows the old version any more */
  graph_node_release(old);
}

kiln_tensor *graph_tensor_new(kiln_storage *s, const graph_view *v) {
  kiln_tensor *t = graph_handle_alloc(GRAPH_HANDLE_TENSOR, sizeof *t);
  if (!t) return NULL;
  t->refcount = 1;
  t->storage = s;
  graph_ref(&s->refcount);
  t->view = *v;
  return t;
}
