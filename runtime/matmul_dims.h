/*
 * matmul_dims.h — what the host contractions share about a MATMUL node
 * (graph/ops.def; ops/linalg.c records it): C [batch..., M, N] = A
 * [batch..., M, K] · B [batch..., K, N], each operand a strided view in
 * elements (offset included; batch dims may broadcast with stride 0).
 * Used by blas.c (OpenBLAS, cuBLAS) and gemm.c (the generated GEMM).
 * Internal to runtime/.
 */
#ifndef KILN_RT_MATMUL_DIMS_H
#define KILN_RT_MATMUL_DIMS_H

#include <stdint.h>

#include "graph.h"

/** The product's dims: C [batch..., m, nn] = A [..., m, k] · B [..., k, nn];
 *  esz bytes per element, nb batch dims holding `batches` products. */
typedef struct mm_dims {
  int esz, nb;
  int64_t m, nn, k, batches;
} mm_dims;

static inline int64_t mm_max1(int64_t x) { return x > 1 ? x : 1; }

/** The dims of MATMUL node n. */
static inline mm_dims mm_dims_of(const graph_node *n) {
  int nd = n->ndim;
  mm_dims d = {.esz = graph_dtypes[n->dtype].size, .nb = nd - 2, .m = n->sizes[nd - 2], .nn = n->sizes[nd - 1],
               .k = n->inputs[0].view.sizes[nd - 1], .batches = 1};
  for (int i = 0; i < d.nb; i++) d.batches *= n->sizes[i];
  return d;
}

/** Element offset of batch number i (row-major over the batch dims) in a
 *  view whose first nb dims are the batch dims (a broadcast dim, stride
 *  0, adds nothing). */
static inline int64_t mm_batch_offset(const graph_view *v, int nb, int64_t i) {
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; d--) {
    off += (i % v->sizes[d]) * v->strides[d];
    i /= v->sizes[d];
  }
  return off;
}

#endif /* KILN_RT_MATMUL_DIMS_H */
