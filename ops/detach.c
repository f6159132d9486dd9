/*
 * detach.c — kiln_detach: a handle over the same storage and view whose
 * reads pass a DETACH node (api_version), an identity that no gradient
 * crosses and that the fusion pass compiles to nothing. And detached
 * writes (ops_write_detached): an in-place write whose ASSIGN version is
 * no_grad, as the optimizers record their updates.
 */
#include "ops.h"

KILN_API kiln_tensor *kiln_detach(kiln_tensor *t) {
  if (!api_check(t, "kiln_detach", "t")) return NULL;
  kiln_tensor *r = api_tensor(t->storage, &t->view, "kiln_detach");
  if (r) r->detached = true;
  return r;
}

void ops_mark_detached_write(kiln_tensor *t) {
  graph_node *v = t->storage->version;
  v->no_grad = true;
  if (!v->n_hist) return; /* pending (the usual case), or realized without a recipe */
  /* forced already, keeping a recipe: let it go, leaving the node as a
   * realized no_grad node is (no recipe, not "dropped") */
  graph_node_drop_history(v);
  v->hist_dropped = false;
}

int ops_write_detached(kiln_tensor *dst, kiln_tensor *value) {
  int st = kiln_copy_(dst, value);
  if (st == KILN_OK) ops_mark_detached_write(dst);
  return st;
}
