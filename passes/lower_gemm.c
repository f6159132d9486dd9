/*
 * lower_gemm.c — an elementwise group after a GEMM, lowered as the GEMM's
 * tile epilogue (pass_lower_gemm_tile; docs/internals.md, "The generated
 * GEMM", general epilogues).
 *
 * The group is the kernel the fuser made of the product's elementwise
 * consumers (GELU, SiLU, a cast, a bias along rows or columns, a
 * residual of any stride...). Lowered here, its loops cover one block
 * of the product (mr rows: the runtime gives the GEMM's MC; nr columns:
 * NR, or N mod NR for the last column panel, a second kernel) instead
 * of the root's whole sizes: the row loop is the parallel range (a call
 * computes rows [start, end) of the block), the column loop runs from
 * the block's corner (r0, c0), which the runtime passes per call as two
 * int64 arguments. Both loops have constant extents and the columns
 * unit stride, so the column loop vectorises (clamping the columns to
 * N instead kept it scalar: 4x slower on GELU). Everything else is
 * lower.c's: the root's value at its multi-index (value_at: fused
 * producers, broadcasts and views of the other operands, fill values,
 * casts rounded per node), so the values are the unfused kernels'. The
 * group reads the product at the root's own element (row, col), which
 * the runtime's buffer for it holds at i·ld + j: the GEMM driver's block
 * of final sums, in L1 (runtime/gemm.c, block_panel), so the product is
 * never stored to memory.
 */
#include "lower_ctx.h"
#include "semantics.h"

/* The root's multi-index for the product's (row, col): its last dim is
 * N (col), its leading dims split row (mixed radix; index arithmetic a
 * row, hoisted out of the column loop). */
static void root_index(kir_kernel *k, const graph_node *r, int row, int col, int *idx) {
  int nd = r->ndim;
  idx[nd - 1] = col;
  for (int d = nd - 2; d >= 0; d--) {
    if (d == 0) {
      idx[d] = row;
      break;
    }
    int size = kir_const_i(k, KIR_INDEX, r->sizes[d]);
    idx[d] = pass_alu2(k, KIR_MOD, row, size);
    row = pass_alu2(k, KIR_DIV, row, size);
  }
}

int lower_gemm_tile(lower_ctx *c) {
  kir_kernel *k = c->k;
  const graph_node *r = c->root, *x = c->gemm_x;
  int64_t n = x->sizes[1];
  if (r->ndim < 1 || r->sizes[r->ndim - 1] != n || r->numel != x->numel) return KILN_ERR_UNSUPPORTED;
  c->gemm_arg = c->b->n_args;
  int r0 = lower_int_arg(c, 0), c0 = lower_int_arg(c, 0);
  if (r0 < 0 || c0 < 0) return KILN_ERR_UNSUPPORTED;
  int i = kir_range(k, c->gemm_mr, true), j = kir_range(k, c->gemm_nr, false);
  c->gemm_i = i, c->gemm_j = j; /* the product's reads: its block's (i, j) (lower_input_at) */
  int row = pass_alu2(k, KIR_ADD, r0, i);
  int col = pass_alu2(k, KIR_ADD, c0, j);
  int idx[KILN_MAX_DIMS];
  root_index(k, r, row, col, idx);
  int v = lower_value_at(c, r, idx);
  if (v < 0) return KILN_ERR_UNSUPPORTED;
  int flat = pass_alu2(k, KIR_ADD, pass_alu2(k, KIR_MUL, row, kir_const_i(k, KIR_INDEX, n)), col);
  kir_store(k, c->out, flat, pass_cast_to(k, kir_type_of(r->dtype), v));
  kir_end(k, j);
  kir_end(k, i);
  return KILN_OK;
}
