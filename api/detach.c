/*
 * detach.c — kiln_detach: a handle over the same storage and view whose
 * reads pass a DETACH node (api_version), an identity that no gradient
 * crosses and that the fusion pass compiles to nothing.
 */
#include "api_internal.h"

KILN_API kiln_tensor *kiln_detach(kiln_tensor *t) {
  if (!api_check(t, "kiln_detach", "t")) return NULL;
  kiln_tensor *r = api_tensor(t->storage, &t->view, "kiln_detach");
  if (r) r->detached = true;
  return r;
}
