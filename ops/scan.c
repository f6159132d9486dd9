/*
 * scan.c — cumulative sums and products along one dim (kiln_cumsum,
 * kiln_cumprod), recorded as one SCAN node each.
 *
 * The node produces t's sizes, contiguous; element i along the scanned dim
 * is the sum (product) of elements 0..i. Result dtypes follow Torch: BOOL
 * and integer inputs give I64, floats keep their dtype. Lowering
 * (passes/lower.c, lower_scan) runs a sequential loop over the scanned dim
 * with an F64 (floats) or I64 (integers) accumulator, in parallel over the
 * other dims; elementwise producers fuse into the scan's kernel.
 */
#include "ops.h"

static kiln_tensor *scan(kiln_tensor *t, int dim, graph_op op, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  int d = api_wrap_dim(dim, t->view.ndim, fn);
  if (d < 0) return NULL;
  kiln_dtype in = t->storage->dtype, out = graph_is_float(in) ? in : KILN_I64;
  /* a 0-d tensor is its own scan (Torch accepts dim 0 and -1) */
  if (t->view.ndim == 0) return ops_copy_contiguous(t, out, fn);
  const graph_view *v = &t->view;
  graph_node *n = graph_node_new(op, out, v->ndim, v->sizes);
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  n->cdtype = in;
  graph_attr_set_reduce_mask(n, 1u << d);
  if (!api_add_input(n, t, v)) {
    graph_node_release(n);
    return NULL;
  }
  return api_tensor_from_node(n, fn);
}

KILN_API kiln_tensor *kiln_cumsum(kiln_tensor *t, int dim) { return scan(t, dim, GRAPH_OP_CUMSUM, "kiln_cumsum"); }
KILN_API kiln_tensor *kiln_cumprod(kiln_tensor *t, int dim) { return scan(t, dim, GRAPH_OP_CUMPROD, "kiln_cumprod"); }
