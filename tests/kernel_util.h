/*
 * kernel_util.h — the kernel IR a force would run, for tests that check
 * how a graph is lowered (include after cmocka.h).
 */
#ifndef KILN_TEST_KERNEL_UTIL_H
#define KILN_TEST_KERNEL_UTIL_H

#include <stdlib.h>

#include "kiln/kiln.h"
#include "passes.h"
#include "rt_internal.h"

/* Plans t's pending graph (fusion decisions as a force makes them) and
 * lowers its root into *k (the caller kir_free's it). */
static inline void lower_for_test(kiln_tensor *t, kir_kernel *k) {
  graph_node *root = t->storage->version;
  pass_plan p;
  assert_int_equal(rt_plan(&root, 1, true, &p), KILN_OK);
  pass_binding b;
  char err[256];
  assert_int_equal(pass_lower_node(&p, root, false, k, &b, err, sizeof err), KILN_OK);
  pass_plan_free(&p);
}

#endif /* KILN_TEST_KERNEL_UTIL_H */
