/*
 * record.c — the primitives every op records through: the node a read of
 * a tensor sees now (its storage's version, or a DETACH node over it for
 * a kiln_detach handle), an input edge (version, view) captured at
 * recording time, an in-place write as a new ASSIGN version of the
 * storage, and the automatic force of a graph that grew past
 * KILN_AUTO_REALIZE pending nodes.
 */
#include "api_internal.h"

/* Pending nodes allowed before an op forces its own result (env
 * KILN_AUTO_REALIZE; 0 disables). */
static atomic_int_fast64_t auto_realize_limit = GRAPH_ENV_UNREAD;

void api_set_auto_realize_limit(int64_t limit) {
  atomic_store_explicit(&auto_realize_limit, limit < 0 ? GRAPH_ENV_UNREAD : limit, memory_order_relaxed);
}

static int64_t read_auto_limit(void) { return graph_env_int("KILN_AUTO_REALIZE", 0, 10000, "pending nodes"); }

static int64_t auto_limit(void) { return graph_env_once(&auto_realize_limit, read_auto_limit); }

void api_maybe_realize(graph_node *n, const char *fn) {
  int64_t limit = auto_limit();
  if (limit > 0 && graph_pending_count() > limit) api_force_nodes(&n, 1, fn);
}

int api_assign(kiln_tensor *dst, graph_node *value, const graph_view *value_view, const char *fn) {
  kiln_storage *s = dst->storage;
  int64_t numel = s->numel;
  graph_node *n = graph_node_new(GRAPH_OP_ASSIGN, s->dtype, 1, &numel);
  if (!n) return api_error(KILN_ERR_OOM, fn, "out of memory");
  graph_view flat = graph_view_contiguous(1, &numel);
  graph_node_add_input(n, s->version, &flat);
  graph_node_add_input(n, value, value_view);
  graph_attr_set_region(n, &dst->view);
  n->device = s->device; /* a write from another device is copied over */
  graph_storage_set_version(s, n);
  api_maybe_realize(n, fn);
  return KILN_OK;
}

graph_node *api_version(kiln_tensor *t) {
  graph_node *v = t->storage->version;
  if (!t->detached) return v;
  graph_node *d = t->detach_read;
  if (d && d->n_inputs == 1 && d->inputs[0].node == v) return d;
  graph_node *n = graph_node_new(GRAPH_OP_DETACH, v->dtype, 1, &v->numel);
  if (!n) {
    api_error(KILN_ERR_OOM, "kiln_detach", "out of memory reading a detached tensor");
    return NULL;
  }
  graph_view flat = graph_view_contiguous(1, &v->numel);
  graph_node_add_input(n, v, &flat);
  n->no_grad = true;
  t->detach_read = n;
  graph_node_release(d);
  return n;
}

bool api_add_input(graph_node *n, kiln_tensor *t, const graph_view *view) {
  graph_node *v = api_version(t);
  if (v) graph_node_add_input(n, v, view);
  return v != NULL;
}

