/*
 * lifetime.c — reference counting of tensors and storages, and scopes.
 *
 * A scope is a thread-local list of tensors it owns (one reference each).
 * Scopes nest as a stack; kiln_keep moves a tensor from the innermost scope
 * to the enclosing one (or to the caller when there is none).
 *
 * A storage over user memory (kiln_from_blob) whose last reference goes
 * while a write into it is pending performs that write first: the memory
 * is the user's, and no one else would ever force it (storage_release).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "runtime.h"

typedef struct api_scope {
  kiln_tensor **items;
  int n, cap;
} api_scope;

/* The scope stack: its first levels live in the thread's own storage, so
 * opening a scope there cannot fail (a scope that failed to open would
 * leave its tensors to no one); deeper levels are allocated. When they
 * cannot be, the new scope is merged into the enclosing one (`merged`
 * counts such levels, always the innermost): its tensors are released at
 * that one's end instead. */
#define INLINE_SCOPES 8
static _Thread_local api_scope inline_scopes[INLINE_SCOPES];
static _Thread_local api_scope *deep; /* levels INLINE_SCOPES.. */
static _Thread_local int n_scopes, cap_deep, merged;
static _Thread_local int untracked_depth;

static api_scope *scope_at(int k) { return k < INLINE_SCOPES ? &inline_scopes[k] : &deep[k - INLINE_SCOPES]; }

void api_untracked_begin(void) { untracked_depth++; }
void api_untracked_end(void) { untracked_depth--; }
int api_untracked_pause(void) {
  int d = untracked_depth;
  untracked_depth = 0;
  return d;
}
void api_untracked_resume(int depth) { untracked_depth = depth; }

/* Takes one entry of t out of the open scopes, innermost first: that
 * reference is the caller's from now on (kiln_escape), or is the one the
 * caller is releasing (kiln_release). Each tensor counts the references
 * scopes hold (scope_refs; a handle returned twice, e.g. by
 * kiln_contiguous, is listed twice); a user who releases a tensor whose
 * every reference is a scope's holds none of its own, so the release is of
 * a scope-owned tensor, and the scope must not release it again (that was
 * a double free at kiln_scope_end). False when no scope lists t. */
static bool scope_remove(kiln_tensor *t) {
  for (int k = n_scopes - 1; k >= 0; k--) {
    api_scope *s = scope_at(k);
    for (int i = s->n - 1; i >= 0; i--) {
      if (s->items[i] != t) continue;
      s->items[i] = s->items[--s->n];
      t->scope_refs--;
      return true;
    }
  }
  return false;
}

/* Set while kiln_scope_end releases the tensors of the scope at that
 * depth (1: outermost): the handles it frees died by its end, which their
 * slots record (graph/handle.h; api_check's message). */
static _Thread_local int ending_scope;

KILN_API kiln_tensor *kiln_retain(kiln_tensor *t) {
  if (t && !api_check(t, "kiln_retain", "t")) return NULL;
  if (t) graph_ref(&t->refcount);
  return t;
}

/* True when s's version is a pending write (a chain of ASSIGNs) into a
 * realized buffer of user memory (kiln_from_blob, with or without a
 * deleter): nothing but this storage will ever perform it. */
static bool pending_user_write(const kiln_storage *s) {
  const graph_node *v = s->version;
  while (v && !v->buffer && v->op == GRAPH_OP_ASSIGN) v = v->inputs[0].node;
  return v && v != s->version && v->buffer && (v->buffer->deleter || v->buffer->borrowed);
}

/* Drops a reference to s; the last one frees it. A pending write into
 * user memory is performed first (the user reads that memory after the
 * deleter ran, or after releasing a NULL-deleter blob); a failure is the
 * thread's error, named after `fn`, and the write is then lost — never
 * silently. */
static void storage_release(kiln_storage *s, const char *fn) {
  if (!s || !graph_unref(&s->refcount)) return;
  /* a storage over another storage's version (kiln_grad reads inputs so)
   * neither performs its writes nor lets its recipe go */
  bool owner = s->version && s->version->storage_id == s->id;
  if (owner && pending_user_write(s)) {
    char err[512];
    graph_node *v = s->version;
    int st = rt_realize(&v, 1, err, sizeof err);
    if (st != KILN_OK)
      api_error((kiln_status)st, fn, "a pending write into from_blob memory could not be performed: %s", err);
  }
  if (owner) graph_node_orphan(s->version); /* no tensor shows it any more (graph/history.c) */
  graph_node_release(s->version);
  graph_handle_free(GRAPH_HANDLE_STORAGE, s, 0);
}

KILN_API void kiln_release(kiln_tensor *t) {
  if (t && !api_check(t, "kiln_release", "t")) return; /* released before, or not a tensor */
  if (t && t->scope_refs > 0 && t->refcount <= t->scope_refs) scope_remove(t); /* a scope's reference */
  if (!t || !graph_unref(&t->refcount)) return;
  graph_node_release(t->detach_read);
  storage_release(t->storage, "kiln_release");
  graph_handle_free(GRAPH_HANDLE_TENSOR, t, ending_scope);
}

KILN_API kiln_storage *kiln_storage_retain(kiln_storage *s) {
  if (s && !api_check_storage(s, "kiln_storage_retain", "s")) return NULL;
  if (s) graph_ref(&s->refcount);
  return s;
}

KILN_API void kiln_storage_release(kiln_storage *s) {
  if (s && !api_check_storage(s, "kiln_storage_release", "s")) return;
  storage_release(s, "kiln_storage_release");
}

static bool scope_push(api_scope *s, kiln_tensor *t) {
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 16;
    kiln_tensor **items = graph_realloc(s->items, sizeof *items * (size_t)cap);
    if (!items) return false;
    s->items = items;
    s->cap = cap;
  }
  s->items[s->n++] = t;
  return true;
}

/* Room for one more level of the stack. */
static bool scope_room(void) {
  int need = n_scopes + 1 - INLINE_SCOPES;
  if (need <= cap_deep) return true;
  int cap = cap_deep ? cap_deep * 2 : 8;
  api_scope *bigger = graph_realloc(deep, sizeof *bigger * (size_t)cap);
  if (!bigger) return false;
  deep = bigger;
  cap_deep = cap;
  return true;
}

KILN_API void kiln_scope_begin(void) {
  if (merged || !scope_room()) {
    if (!merged)
      api_error(KILN_ERR_OOM, "kiln_scope_begin",
                "out of memory opening scope %d: merged into the enclosing scope, which releases its tensors",
                n_scopes + 1);
    merged++;
    return;
  }
  *scope_at(n_scopes++) = (api_scope){0};
}

KILN_API void kiln_scope_end(void) {
  if (merged) {
    merged--;
    return;
  }
  if (n_scopes == 0) return;
  api_scope *s = scope_at(--n_scopes);
  int outer = ending_scope;
  ending_scope = n_scopes + 1;
  for (int i = 0; i < s->n; i++) {
    s->items[i]->scope_refs--; /* then refcount > scope_refs: a plain release */
    kiln_release(s->items[i]);
  }
  ending_scope = outer;
  free(s->items);
  *s = (api_scope){0};
  if (n_scopes == INLINE_SCOPES) {
    free(deep);
    deep = NULL;
    cap_deep = 0;
  }
}

KILN_API kiln_tensor *kiln_keep(kiln_tensor *t) {
  if (!t || n_scopes == 0 || merged) return t; /* a merged scope's tensors are the enclosing one's already */
  api_scope *s = scope_at(n_scopes - 1);
  for (int i = s->n - 1; i >= 0; i--) {
    if (s->items[i] != t) continue;
    s->items[i] = s->items[--s->n];
    if (n_scopes == 1) t->scope_refs--; /* to the caller */
    else if (!scope_push(scope_at(n_scopes - 2), t)) {
      api_error(KILN_ERR_OOM, "kiln_keep", "out of memory");
      s->items[s->n++] = t; /* stays owned by the inner scope */
    }
    return t;
  }
  return t;
}

KILN_API kiln_tensor *kiln_escape(kiln_tensor *t) {
  if (t && !api_check(t, "kiln_escape", "t")) return NULL;
  if (t && t->scope_refs > 0) scope_remove(t);
  return t;
}

kiln_tensor *api_track(kiln_tensor *t) {
  if (!t || n_scopes == 0 || untracked_depth > 0) return t;
  /* Each scope entry is one of t's references, released at the scope's
   * end: never list more entries than t has references (a handle tracked
   * twice by one call was freed twice at kiln_scope_end: kiln_recv). */
  if (atomic_load(&t->scope_refs) >= atomic_load(&t->refcount)) return t;
  if (!scope_push(scope_at(n_scopes - 1), t)) {
    api_error(KILN_ERR_OOM, "kiln_scope", "out of memory registering a tensor");
    kiln_release(t);
    return NULL;
  }
  t->scope_refs++;
  return t;
}

kiln_tensor *api_tensor(kiln_storage *s, const graph_view *v, const char *fn) {
  kiln_tensor *t = graph_tensor_new(s, v);
  if (!t) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  return api_track(t);
}

kiln_tensor *api_view(kiln_tensor *t, const graph_view *v, const char *fn) {
  kiln_tensor *r = api_tensor(t->storage, v, fn);
  if (r) r->detached = t->detached;
  return r;
}

static const char *device_name(kiln_device d) { return d == KILN_CUDA ? "KILN_CUDA" : "KILN_CPU"; }

int api_device_mismatch(const char *fn, kiln_device a, kiln_device b) {
  return api_error(KILN_ERR_DEVICE, fn, "expected all tensors to be on the same device, but found %s and %s",
                   device_name(a), device_name(b));
}

/* True when the view reads a single element (a 0-d tensor, broadcast or
 * not): such an input may come from another device. */
static bool reads_one(const graph_view *v) {
  for (int d = 0; d < v->ndim; d++)
    if (v->sizes[d] > 1 && v->strides[d] != 0) return false;
  return true;
}

/* Torch's rule: every tensor an op reads is on one device, scalars (one
 * element) aside; the op runs there. Only when every input is a scalar
 * does a CUDA one put the op on the device (graph_node_add_input's
 * default). */
static bool check_devices(graph_node *n, const char *fn) {
  const graph_input *first = NULL;
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_input *in = &n->inputs[i];
    if (reads_one(&in->view) || in->node->numel == 1) continue;
    if (!first) first = in;
    else if (in->node->device != first->node->device) {
      api_device_mismatch(fn, first->node->device, in->node->device);
      return false;
    }
  }
  if (first) n->device = first->node->device;
  return true;
}

kiln_tensor *api_tensor_from_node(graph_node *n, const char *fn) {
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  if (!check_devices(n, fn)) {
    graph_node_release(n);
    return NULL;
  }
  graph_view v = graph_view_contiguous(n->ndim, n->sizes);
  kiln_storage *s = graph_storage_new(n->dtype, n->numel, n);
  if (!s) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  kiln_tensor *t = api_tensor(s, &v, fn);
  kiln_storage_release(s);
  if (t) api_maybe_realize(n, fn);
  return t;
}
