/*
 * gemm_epilogue.h — a fused GEMM epilogue as the runtime runs it: the
 * micro-kernel's steps (llvm_gemm_epi_step) and each step's operand in
 * host memory, and the helpers of gemm_epilogue.c (the operands of one
 * tile) and gemm_fused.c (running a matmul with its epilogue in place of
 * the epilogue kernel). docs/internals.md, "The generated GEMM".
 */
#ifndef KILN_GEMM_EPILOGUE_H
#define KILN_GEMM_EPILOGUE_H

#include <stdbool.h>
#include <stdint.h>

#include "graph.h"
#include "llvm_backend.h"
#include "passes.h"

/** Called by the GEMM driver for each column panel of C's last KC
 *  block (a general epilogue: gemm_group.c): the final sums of the rows
 *  × cols of C at (r0, c0) (rows at most the blocking's MC, cols NR, or
 *  fewer at C's edges) are in `block`, row i at element i·NR (C itself
 *  does not hold them). Runs on pool threads, concurrently for
 *  different panels. */
typedef void (*rt_gemm_after_fn)(void *ctx, int64_t r0, int64_t c0, int64_t rows, int64_t cols, const void *block);

/** A product's epilogue: step s applies step[s] with the operand whose
 *  element (r, c) of C's [M, N] is base[s][r·sm[s] + c·sn[s]] (type T;
 *  ROW: sm 0, sn 1; COL: sn 0; TILE: sn 1; SCALAR: both 0; a fill value
 *  lives in value[s]). Not copied once made (base may point into it). */
typedef struct rt_gemm_epi {
  int n, esz, nb; /* steps, T's size, batch dims of the product */
  llvm_gemm_epi_step step[LLVM_GEMM_EPI_MAX];
  const char *base[LLVM_GEMM_EPI_MAX]; /* batch 0's */
  int64_t sm[LLVM_GEMM_EPI_MAX], sn[LLVM_GEMM_EPI_MAX];
  graph_view batch[LLVM_GEMM_EPI_MAX]; /* a realized operand's view: its first nb dims step the batches */
  bool batched[LLVM_GEMM_EPI_MAX];     /* base moves with the batch (a realized operand of a batched product) */
  _Alignas(8) unsigned char value[LLVM_GEMM_EPI_MAX][8];
  rt_gemm_after_fn after; /* or NULL: called after each tile's last store (2-D products only) */
  void *after_ctx;
} rt_gemm_epi;

/** Scratch rt_gemm_epi_tile needs for an edge tile (bytes). */
#define RT_GEMM_EPI_SCRATCH (LLVM_GEMM_EPI_MAX * LLVM_GEMM_MAX_MR * LLVM_GEMM_MAX_NR * 8)

/** Fills *e from pe (pass_gemm_epilogue_of's chain for the product x,
 *  T its dtype): each operand's data (realized on x's device; on a
 *  KILN_CUDA device, base is a device address) and
 *  where it varies; a CLAMP becomes a MAX and a MIN with its bounds (a
 *  NaN bound left out). False when an operand is not on x's device or
 *  reads along N with a stride other than 0 or 1, or the steps are more
 *  than LLVM_GEMM_EPI_MAX (the run keeps its kernels). */
bool rt_gemm_epi_of(const pass_gemm_epilogue *pe, const graph_node *x, rt_gemm_epi *e);
/** True when step s's operand is a fill value (value[s]), not data. */
static inline bool rt_gemm_epi_is_fill(const rt_gemm_epi *e, int s) {
  return e->base[s] == (const char *)e->value[s];
}
/** *out = e for batch number i (row-major over the batch dims) of a
 *  batched product: each realized operand's base moved to that batch. */
void rt_gemm_epi_batch(const rt_gemm_epi *e, int64_t i, rt_gemm_epi *out);
/** The operands of the MR×NR tile at C's (r0, c0), of which rows × cols
 *  lie inside C, into *out: pointers into the operands for a whole tile;
 *  for an edge tile copies of their part inside C, zero-padded to MR×NR,
 *  in scratch (RT_GEMM_EPI_SCRATCH bytes, 64-byte aligned). */
void rt_gemm_epi_tile(const rt_gemm_epi *e, int64_t r0, int64_t c0, int64_t rows, int64_t cols, int mr, int nr,
                      int esz, char *scratch, llvm_gemm_epi_args *out);
/** The epilogue's name in kernel names: its steps joined by '_' (bias:
 *  an add of a ROW or COL operand; res: of a TILE; scale: a multiply by a
 *  scalar; relu; max, min — a CLAMP is max_min —; add, sub, mul, div
 *  otherwise), e.g. "bias_relu". */
void rt_gemm_epi_name(const rt_gemm_epi *e, char *buf, size_t len);

/** The generated GEMM with a fused epilogue: as rt_gemm_matmul (gemm.c)
 *  with epi applied to every tile of C (each batch's: rt_gemm_epi_batch)
 *  before its last store (epi NULL: rt_gemm_matmul); with epi->after,
 *  the last KC block's sums go to the hook instead (rt_gemm_after_fn),
 *  and out holds only scratch afterwards. K must be > 0 when epi has
 *  steps or an after hook, and the hook needs a 2-D product
 *  (KILN_ERR_ARG). */
int rt_gemm_matmul_epi(const graph_node *n, const void *const *in, const rt_gemm_epi *epi, graph_buffer *out,
                       char *err, size_t errlen);

/** At the MATMUL x at plan position `at` (roots [n_roots]: the force's
 *  requested nodes): when the chain after it is an epilogue
 *  (pass_gemm_epilogue_of) and x's backend runs the product with it
 *  (contract_epilogue), computes the chain's root — its buffer set, x
 *  left pending as a fused node is — and reports one kernel
 *  (`gemm_MxNxK_bias_relu`); *done then. Otherwise *done is false and
 *  nothing ran: x and the epilogue kernel run as planned. */
int rt_gemm_fused_run(const pass_plan *p, int at, graph_node *const *roots, int n_roots, bool *done, char *err,
                      size_t errlen);

/** The profiler record and KILN_DEBUG line of a fused run of the
 *  product x: gemm_MxNxK_<suffix> (gemm_f64_... for F64), n_ops graph
 *  ops, `read` elements read besides A and B, compile_ns spent compiling
 *  for it (the micro-kernel's added), backend llvm; when run->tiled (the
 *  tiled GEMM kernel ran it) cuda_gemm_MxNxK_<suffix>, x's backend. */
struct rt_extern_run; /* backend.h */
void rt_gemm_fused_report(const graph_node *x, const char *suffix, int n_ops, int64_t read, int64_t compile_ns,
                          const struct rt_extern_run *run);

/** rt_gemm_fused_run's general case (gemm_group.c): when the epilogue
 *  kernel after the 2-D MATMUL x at `at` is a tile epilogue
 *  (pass_gemm_group_of) and x's backend runs the product on the
 *  generated GEMM, computes the kernel's root with the kernel lowered
 *  over tiles (pass_lower_gemm_tile) and run after each tile's last
 *  store, its buffer set, x left pending; *done then. Otherwise *done is
 *  false and nothing ran. */
int rt_gemm_group_run(const pass_plan *p, int at, graph_node *const *roots, int n_roots, bool *done, char *err,
                      size_t errlen);

#endif /* KILN_GEMM_EPILOGUE_H */
