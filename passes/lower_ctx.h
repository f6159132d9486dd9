/*
 * lower_ctx.h — the state of one kernel's lowering (passes/lower.c), for
 * the files that lower a kind of root beside it (lower_columns.c), and
 * the helpers they share. Private to passes/.
 */
#ifndef KILN_LOWER_CTX_H
#define KILN_LOWER_CTX_H

#include "pass_internal.h"

/* One external read: input `input` of `consumer`. */
typedef struct edge {
  const graph_node *consumer;
  int input;
  int param;  /* PARAM uop of the source buffer, -1 for ARANGE */
  int offset; /* KIR_INDEX uop: the view's storage offset */
  int scalar; /* register value of a pending FULL, else -1 */
} edge;

/* A value computed for node n at the index uops idx (value_at). */
typedef struct lower_memo {
  const graph_node *n;
  int idx[KILN_MAX_DIMS];
  int value;
} lower_memo;

/* The walk's arrays grow as the group needs (heap, freed when lowering
 * ends; no cap of their own): the group's size is bounded by the fusion
 * pass's PASS_MAX_GROUP, the per-kernel limits of passes.h are checked
 * where they are used. */
typedef struct lower_ctx {
  kir_kernel *k;
  const graph_node *root;
  const pass_plan *plan;   /* the force's decisions: what is fused, what the host stores */
  const graph_node *host; /* the node being lowered (root may be its merged copy) */
  int store_param[PASS_MAX_OUTPUTS]; /* PARAM uop of binding->outputs[j] */
  pass_binding *b;
  const pass_opts *opts; /* the kernel's choices (heuristics.c): lowering reads only these */
  int out;  /* PARAM 0 */
  int args;  /* PARAM 1 */
  int fargs; /* PARAM 2 */
  int n_edges;
  edge edges[PASS_MAX_ARGS];        /* each takes an argument: PASS_MAX_EDGES */
  int input_param[PASS_MAX_INPUTS]; /* PARAM uop of binding->inputs[i] */
  int n_seen, cap_seen;
  const graph_node **seen; /* [cap_seen] fused nodes already walked / named */
  int n_memo, cap_memo;
  lower_memo *memo;        /* [cap_memo] value_at results in the open loops */
  int n_rows, cap_rows;
  const graph_node **rows; /* [cap_rows] fused reductions, producers first */
  int *row_value;          /* [cap_rows] their value for the current row */
  int outer[KILN_MAX_DIMS]; /* the row loops' ranges */
  int n_outer;
  const char *unfit; /* why the group does not fit one kernel (a limit of
                        passes.h, named), NULL while it fits: the caller
                        gets KILN_ERR_UNSUPPORTED and materializes producers */
  bool oom;          /* a growing array could not allocate: KILN_ERR_OOM */
  char why[96];      /* unfit's text, when formatted */
  const graph_node *spill; /* row kernels: a reduction input kept in the output (the options' spill) */
  bool spill_stored;       /* the epilogue loads spill from the output */
  bool plain_stores;       /* the edge loops of skewed tiles (lower_skewed): no streaming stores */
  char name[96];
  int name_len;
  /* a GEMM tile epilogue (pass_lower_gemm_tile; lower_gemm.c): the
   * product it reads, the block's rows × cols and row stride ld in the
   * buffer bound for the product, its (r0, c0) arguments, the loops'
   * index uops (i, j; -1 outside them) */
  const graph_node *gemm_x;
  int64_t gemm_mr, gemm_nr, gemm_ld;
  int gemm_arg, gemm_i, gemm_j;
} lower_ctx;

/* n's input i at the root's multi-index idx (a fused producer computed
 * there, or an external read). */
int lower_input_at(lower_ctx *c, const graph_node *n, int i, const int *idx);
/* Node n's value at its multi-index idx (value_at): a fused node
 * computed there, rounded to its dtype. */
int lower_value_at(lower_ctx *c, const graph_node *n, const int *idx);
/* An int64 kernel argument of the given value, loaded at entry as
 * KIR_INDEX (its slot: the binding's n_args before the call); -1 when
 * the argument array is full. */
int lower_int_arg(lower_ctx *c, int64_t value);
/* Stores value into the root's output at the contiguous index of ranges. */
void lower_store_contiguous(lower_ctx *c, const int *ranges, int value);
/* Closes the open loops (>= 0) of ranges [ndim], innermost first. */
void lower_close_ranges(kir_kernel *k, int ndim, const int *ranges);
/* A reduction's accumulator dtype, identity and update op. */
kir_type lower_reduce_acc_type(const graph_node *n);
int lower_reduce_init(kir_kernel *k, graph_op op, kir_type t);
kir_op lower_reduce_alu(graph_op op, kir_type t);

/* Column reductions (lower_columns.c): blocks of `width` columns. */
int lower_columns(lower_ctx *c, int64_t width);

/* A GEMM's tile epilogue (lower_gemm.c): the root over one tile of the
 * product c->gemm_x. */
int lower_gemm_tile(lower_ctx *c);

#endif
