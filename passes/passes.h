/*
 * passes.h — the passes layer's interface, what the runtime (and tests)
 * use: the per-force plan (plan.h), algebraic simplification, fusion
 * decisions, each kernel's options record (its optimisation choices as
 * data), lowering of one kernel to kernel IR (kir.h) with what the
 * runtime binds to it, and a kernel's costs. What only passes/ files
 * share is in pass_internal.h, lower_ctx.h and semantics.h.
 *
 * A kernel is a materialized root node plus the pending producers fused
 * into it (the plan's decision: pass_fused): their values are computed
 * inside the root's loops, at the index the reader's view names, instead
 * of being loaded from a buffer. Sources (pending FULL and ARANGE) are
 * always computed in place.
 *
 * Parameter layout of a lowered kernel:
 *   PARAM 0       the root's output buffer (numel × root->dtype, written);
 *   PARAM 1       int64 arguments (binding->args): one storage offset per
 *                 external read, and the values of integer/bool fills;
 *   PARAM 2       F64 arguments (binding->fargs): values of float fills;
 *   PARAM 3 + j   binding->outputs[j]: more results the kernel stores (a
 *                 multi-output kernel: the plan's host of each, pass_host,
 *                 is the root's position);
 *   PARAM 3 + n_outputs + i
 *                 binding->inputs[i]: a realized node's buffer.
 * Arguments are loaded once at kernel entry. Offsets of external reads
 * and fill values are arguments, not code, so one compiled kernel serves
 * every offset and every constant; the views inside a fused group are
 * part of the kernel's structure.
 */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include <stdbool.h>
#include <stddef.h>

#include "graph.h"
#include "kir.h"
#include "plan.h"

/* The kernel-size contract. A kernel takes at most PASS_MAX_INPUTS
 * buffers besides its output, stores at most PASS_MAX_OUTPUTS further
 * results and takes at most PASS_MAX_ARGS arguments of each array (the
 * binding's arrays have these sizes). Lowering a group past one of them
 * fails with KILN_ERR_UNSUPPORTED and a message naming it, and the
 * runtime then materializes the group's producers (they run as kernels
 * of their own) and lowers it again. The fusion pass keeps groups within
 * them so that this fallback is rare, and within two limits of its own:
 * PASS_MAX_EDGES external reads (each takes an argument; one more is
 * kept for an ASSIGN's region offset) and PASS_MAX_GROUP fused nodes,
 * which bounds a kernel's size and compile time (lowering itself has no
 * node cap: its arrays grow). */
#define PASS_MAX_INPUTS (KIR_MAX_PARAMS - 3) /* outputs beyond the first included */
#define PASS_MAX_OUTPUTS 8                   /* results stored besides the root's */
#define PASS_MAX_ARGS 64
#define PASS_MAX_EDGES (PASS_MAX_ARGS - 1)
#define PASS_MAX_GROUP 200

/** Where a binding slot's value came from: input `input` of the node at
 *  schedule position `pos` (its plan position); pos -1 = a value fixed by
 *  the kernel's structure (a view offset). A cached schedule uses these to
 *  bind the same kernel to a new graph of the same structure. */
typedef struct pass_slot {
  int32_t pos;
  int32_t input;
} pass_slot;

/** What the runtime binds to a lowered kernel's parameters. */
typedef struct pass_binding {
  int n_outputs;
  const graph_node *outputs[PASS_MAX_OUTPUTS]; /* PARAM 3 + j */
  int32_t output_pos[PASS_MAX_OUTPUTS];        /* their schedule positions */
  int n_inputs;
  const graph_node *inputs[PASS_MAX_INPUTS]; /* PARAM 3 + n_outputs + i */
  int n_args, n_fargs;
  int64_t args[PASS_MAX_ARGS];               /* PARAM 1 */
  double fargs[PASS_MAX_ARGS];               /* PARAM 2 */
  int n_ops;                                 /* graph ops in the kernel */
  int64_t bytes_read;                        /* external reads, each element once */
  pass_slot input_slot[PASS_MAX_INPUTS];     /* where inputs[i] was read */
  pass_slot arg_slot[PASS_MAX_ARGS];         /* fill values: the FULL read there */
  pass_slot farg_slot[PASS_MAX_ARGS];
} pass_binding;

/** Rebinds b (a binding lowered from a graph of the same structure) to the
 *  nodes of `order` (the new schedule, by position): its extra outputs,
 *  its input buffers and the fill values of the pending FULL sources it
 *  reads. */
void pass_rebind(pass_binding *b, graph_node *const *order);
/** True when every slot of b names an input that exists in a schedule
 *  whose node at position i has n_inputs[i] inputs (i < n): a cached
 *  binding is checked with this before it is kept. */
bool pass_binding_valid(const pass_binding *b, const uint8_t *n_inputs, int n);

/** True when a pending input node is computed inside its consumer's kernel
 *  rather than realized first (pending FULL/ARANGE sources). */
bool pass_is_inlined(const graph_node *n);

/* ------------------------------------------------- per-kernel options */

/** Which lowering a kernel takes: decided by its root's kind and the
 *  reductions fused into it (not a choice). */
typedef enum pass_path {
  PASS_PATH_ELEMENTWISE, /* loops over the root's sizes (sources, casts, gathers too) */
  PASS_PATH_ROWS,        /* fused row reductions, then the root per row */
  PASS_PATH_REDUCE,      /* a reduction: kept dims, then reduced ones (or column blocks) */
  PASS_PATH_SCAN,        /* cumsum, cumprod */
  PASS_PATH_SCATTER,     /* scatter-add into chunk partials */
  PASS_PATH_ASSIGN       /* an in-place write: copy, then the region */
} pass_path;

#define PASS_SCAN_LANES_MAX 16

/** The optimisation choices of one kernel, as data (like tinygrad's Opt
 *  list): heuristics.c fills it before the kernel is lowered, and
 *  lowering reads only it. Zero/false is "off": the plain loop nest.
 *  Every choice computes the same values; KILN_OPTS forces them
 *  (README.md, docs/internals.md "Forcing"), KILN_DEBUG=2 prints them. */
typedef struct pass_opts {
  pass_path path;
  /* elementwise */
  int unroll_inner;        /* > 0: the innermost dim, of this many elements, is
                              unrolled (the body copied per element), so the dim
                              above is the innermost loop and vectorises */
  bool tile;               /* the last two dims run in KIR_TILE x KIR_TILE tiles,
                              column blocks outside row blocks (kir_range_tile):
                              a transposed read becomes vector loads and an
                              in-register transpose */
  bool skew;               /* (tile) skewed tiles (kir_tile_skew): each row's
                              chunk starts at a multiple of KIR_TILE of the flat
                              output, for a last dim that is not one */
  int skew_bands;          /* (skew) row bands a group, whose last source rows
                              the next column block reuses */
  /* stores */
  bool stream;             /* the root's output is written with streaming
                              (nontemporal) stores: kir_store_streaming */
  uint32_t stream_outputs; /* bit j: binding->outputs[j] too */
  /* reductions */
  int unroll_reduce;       /* > 0: each output's terms, this many, are added
                              unrolled in loop order (argmax/argmin loop) */
  int64_t column_block;    /* > 0: a column reduction (lower_columns.c), blocks
                              of this many columns in a LOCAL accumulator row */
  int column_rows;         /* (column_block) rows a pass adds to the block */
  int spill;               /* (rows) plan position of the fused input of a row
                              reduction the reduction pass stores into the
                              output and the epilogue loads back instead of
                              recomputing; -1: none */
  /* scans, scatters */
  int scan_lanes;          /* neighbouring scans run together (one accumulator
                              each), 1..PASS_SCAN_LANES_MAX */
  bool scatter_slabs;      /* one chunk along a dim other than 0: the target's
                              slabs along dim 0 run in parallel */
} pass_opts;

/** The record the heuristics choose for the kernel rooted at n of plan
 *  p, as pass_lower_node would lower it. KILN_OK or KILN_ERR_OOM. */
int pass_kernel_opts(const pass_plan *p, const graph_node *n, bool in_place, pass_opts *o);
/** o in one line, "elementwise unroll=0 tile=1 skew=1 bands=32 stream=1":
 *  its path, then the fields that apply to it. */
void pass_opts_format(const pass_opts *o, char *buf, size_t len);
/** Replaces KILN_OPTS's forced choices with spec (the same syntax,
 *  "unroll=0,stream=1"; NULL or "": none) for the kernels lowered from
 *  now on; false, and nothing replaced, when an item does not parse
 *  (each bad one named on stderr). A test hook: not while another thread
 *  lowers (a schedule the schedule cache serves is not lowered again). */
bool pass_opts_override(const char *spec);

/** Lowers the kernel rooted at n (a node of plan p, fused as p decided)
 *  into k (initialised by this call) and fills *b. The nodes n stores
 *  (p's multi-output decision) are computed and stored too
 *  (binding->outputs; elementwise and ASSIGN roots only, else
 *  KILN_ERR_UNSUPPORTED; a stored ASSIGN must be a whole write).
 *  For ASSIGN, `in_place` says the output buffer already holds the old
 *  version: only the region is written. Returns KILN_OK, or an
 *  error with a message in err (KILN_ERR_UNSUPPORTED when the group needs
 *  more inputs or arguments than a kernel takes: the caller then
 *  materializes its producers). */
int pass_lower_node(const pass_plan *p, const graph_node *n, bool in_place, kir_kernel *k, pass_binding *b, char *err,
                    size_t errlen);

/** The epilogue kernel rooted at `root` (a node of plan p, its group as
 *  p fused it; elementwise) as a GEMM's tile epilogue: the root over the
 *  tile of mr rows × nr columns of the 2-D product x [M, N] at (r0, c0),
 *  which the group must read at the root's own flat index (root's sizes
 *  [..., N], M·N elements, stored contiguous; pass_gemm_group_of checks
 *  it). x is an input of *b, whose buffer holds the block: element
 *  (r0 + i, c0 + j) of x at i·ld + j (the GEMM's block of final sums,
 *  not x's own layout); r0 and c0 are the int64 arguments *coord_arg and
 *  *coord_arg + 1 of b->args (0 as lowered: the runtime sets them per
 *  call). The kernel's parallel range is the tile's rows (a call with
 *  [0, rows) computes an edge tile's rows), its columns run c0 .. c0 + nr
 *  - 1 (an edge tile's columns: a kernel lowered with nr = N mod NR).
 *  Errors as pass_lower_node's; KILN_ERR_ARG when root is not
 *  elementwise or x not 2-D. */
int pass_lower_gemm_tile(const pass_plan *p, const graph_node *root, const graph_node *x, int64_t mr, int64_t nr,
                         int64_t ld, kir_kernel *k, pass_binding *b, int *coord_arg, char *err, size_t errlen);

/** What a kernel rooted at n costs, from its kind's row of the lowering
 *  table: `numel` elements computed (an ASSIGN's region), `written`
 *  elements stored (the region only in place), `work` elements one split
 *  of the parallel range covers in all (a reduction: the input it reads),
 *  and `flops` (n_ops arithmetic ops per element, the write excluded). */
typedef struct pass_kernel_cost {
  int64_t numel, written, work, flops;
} pass_kernel_cost;
pass_kernel_cost pass_kernel_cost_of(const graph_node *n, bool in_place, int n_ops);

/** Extent of the kernel's parallel range (the runtime passes [0, extent)
 *  or splits it), 0 when it has none. */
int64_t pass_parallel_extent(const kir_kernel *k);

/** Algebraic simplification of a plan's schedule (post-order; `roots`
 *  requested), before fusion: identities, CSE, constant folding (see
 *  algebra.c). Rewrites edges in place; returns how many edges it
 *  dropped, with the nodes they held in *dropped (malloc'ed; the caller
 *  releases each node once the schedule no longer points at them, then
 *  frees the array), 0 when nothing changed. Dead nodes drop out when the
 *  caller collects the schedule again. */
int pass_simplify(pass_plan *p, graph_node *const *roots, int n_roots, graph_node ***dropped);

/** Fusion decisions for a plan (its pending nodes in post-order,
 *  producers first); the requested `roots` are materialized. Writes the
 *  plan's entries only (fused, host/stores, counts). `enabled` false
 *  (KILN_FUSE=0) keeps one kernel per node. The cost function is
 *  documented in fuse.c. */
void pass_fuse(pass_plan *p, graph_node *const *roots, int n_roots, bool enabled);
/** The attention decision, the last step of pass_fuse (attention_plan.c): a
 *  hand-written attention whose chain nothing else in p reads gets its
 *  chain marked fused, so only its last matmul runs (rt_attention_matmul
 *  computes it with the fused kernel). */
void pass_attention(pass_plan *p, graph_node *const *roots, int n_roots);
/** o (at its turn in p) is such an attention: fills *m. */
bool pass_attention_planned(const pass_plan *p, graph_node *o, graph_attention *m);
/** Undoes fusion into n's inputs (they become kernels of their own); used
 *  when n's group would not fit a kernel's parameter limits. */
void pass_unfuse_inputs(pass_plan *p, const graph_node *n);
/** Undoes n's multi-output plan: the nodes it would store get kernels of
 *  their own. */
void pass_unstore(pass_plan *p, const graph_node *n);

/* ------------------------------------- GEMM epilogues (gemm_chain.c) */

/** Most elementwise steps a GEMM epilogue takes. */
#define PASS_GEMM_EPI_MAX 4

/** One step of a GEMM epilogue: the product so far (C) goes through op
 *  with one more operand. */
typedef struct pass_gemm_step {
  graph_op op;           /* ADD, SUB, MUL, DIV (C op x; x op C when swapped), MAXIMUM, MINIMUM,
                            RELU, CLAMP (its bounds in the node's attributes) */
  bool swapped;          /* C is the op's second input (x - C, x / C) */
  const graph_node *arg; /* x: a realized node, or an inlined FULL source; NULL for RELU, CLAMP */
  double lo, hi;         /* CLAMP's bounds (NaN: none) */
  graph_view view;       /* how the op reads x, as a view of C's sizes [batch..., M, N] (stride
                            0 where it broadcasts; for a 2-D C, the op's leading dims merged
                            when it reads C reshaped) */
} pass_gemm_step;

/** The elementwise consumers of a MATMUL node that its GEMM can apply to
 *  each output tile before storing it: a chain from the product to the
 *  kernel root `root`, which stores the result. */
typedef struct pass_gemm_epilogue {
  graph_node *root;
  int n_steps;
  pass_gemm_step step[PASS_GEMM_EPI_MAX];
} pass_gemm_epilogue;

/** The epilogue of the MATMUL node at plan position `at`, when its
 *  value is needed only inside one elementwise kernel that computes it
 *  through a chain of at most PASS_GEMM_EPI_MAX ADD/SUB/MUL/DIV/
 *  MAXIMUM/MINIMUM/RELU/CLAMP nodes of its dtype and element count, each reading the previous one
 *  through its plain row-major view (for a 2-D product any sizes
 *  [..., N]: kiln_linear's 3-D result is C reshaped; a batched one's
 *  sizes) and, for the binary ones, one operand that is realized
 *  or an inlined FULL: C + bias (a bias along N or M is a broadcast
 *  view), relu, C * scale, C + residual. The product itself must not be
 *  requested (one of roots [n_roots]), nor read elsewhere, nor the chain's
 *  nodes (each fused, one reader); the root stores nothing else. False
 *  (and *out untouched) otherwise. Reads the plan's decisions only. */
bool pass_gemm_epilogue_of(const pass_plan *p, int at, graph_node *const *roots, int n_roots,
                           pass_gemm_epilogue *out);

/** The general form: true, with the kernel root in *root, when the
 *  2-D MATMUL x at plan position `at` (F32/F64, not requested, not
 *  realized) is read only inside one elementwise kernel (no multi-output
 *  store) whose group — any elementwise and cast nodes, GELU, SiLU,
 *  sigmoid, a cast to F64 — reads x and every node depending on it at
 *  the reader's own flat index (plain row-major views: for the root,
 *  sizes [..., N] of M·N elements), and whose other inputs are realized
 *  buffers (any view: broadcast along rows or columns, strided) or
 *  inlined fills. That kernel can then run as the GEMM's tile epilogue
 *  (pass_lower_gemm_tile). False, *root untouched, otherwise. Reads the
 *  plan's decisions only. */
bool pass_gemm_group_of(const pass_plan *p, int at, graph_node *const *roots, int n_roots, graph_node **root);

#endif /* KILN_PASSES_H */
