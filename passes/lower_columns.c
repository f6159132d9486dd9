/*
 * lower_columns.c — column reductions: a reduction over leading dims whose
 * last dim is kept and unit-stride (a sum over dim 0 of [R, C], bench row
 * W3b; a bias gradient over [N, C]), lowered over blocks of columns with
 * their accumulators in a LOCAL (docs/internals.md, Column reductions).
 */
#include "lower_ctx.h"
#include "semantics.h"

/* Column reductions: the input's last dim is kept (the options'
 * column_block, heuristics.c, chooses when and how wide), so
 * neighbouring outputs are reduced together, a block of `width` columns
 * at a time. The block's accumulators are a row in a LOCAL (F64 for a
 * sum: 8 KiB for 1,024 columns, in L1), and the rows are walked in
 * groups of the options' column_rows: each pass over the block loads an
 * accumulator, adds the group's rows to it in registers, in row order,
 * and stores it back (then one pass for the rows left over). A pass
 * reads the group's rows of the block as sequential runs (bench/ row
 * W3b, sum over dim 0 of 4096 x 4096 F32, reads at the read roofline
 * with 8 rows of 1,024 columns: docs/internals.md, Column reductions),
 * where 64 register accumulators a block (256-byte runs, 16 KiB apart)
 * read at 0.4-0.7 x and one row a pass was no faster. The adds are plain
 * (not reassociable), so every output is still the sequential sum of its
 * column in the accumulator type, as the general path computes it:
 * fused and unfused results agree bitwise. */

/* First column of block b of `width` columns: b * width, the last block
 * shifted back to end at cols (its first columns are computed twice,
 * with the same values). */
static int column_base(kir_kernel *k, int b, int64_t width, int64_t cols) {
  int base = pass_alu2(k, KIR_MUL, b, kir_const_i(k, KIR_INDEX, width));
  int64_t blocks = (cols + width - 1) / width;
  if (blocks * width == cols) return base;
  return pass_alu2(k, KIR_MIN, base, kir_const_i(k, KIR_INDEX, cols - width));
}

/* One pass over the block: for each column, acc[col] = op(...op(acc[col],
 * x[row0][col])..., x[row0 + n - 1][col]), rows along dim `dim` (ranges[d]
 * set for every other dim but the last). row0 is a KIR_INDEX uop. */
static void column_pass(lower_ctx *c, int acc, int64_t width, int base, int dim, int row0, int n_rows, int *ranges) {
  const graph_node *n = c->root;
  kir_kernel *k = c->k;
  int last = n->inputs[0].view.ndim - 1;
  kir_type t = lower_reduce_acc_type(n);
  int col = kir_range(k, width, false);
  ranges[last] = pass_alu2(k, KIR_ADD, base, col);
  int a = kir_load(k, acc, col);
  for (int r = 0; r < n_rows; r++) {
    ranges[dim] = r ? pass_alu2(k, KIR_ADD, row0, kir_const_i(k, KIR_INDEX, r)) : row0;
    int x = pass_cast_to(k, t, lower_input_at(c, n, 0, ranges));
    a = kir_alu(k, lower_reduce_alu(n->op, t), t, a, x, -1); /* in order: see above */
  }
  kir_store(k, acc, col, a);
  kir_end(k, col);
  ranges[last] = ranges[dim] = -1;
  c->n_memo = 0; /* values of the closed loop are out of scope */
}

/* The reduced dims of the block: the outer ones as loops, the innermost
 * (dim `in`, `size` rows) as groups of `per` rows (the options'
 * column_rows), then its rest. */
static void column_rows(lower_ctx *c, int acc, int64_t width, int base, int *ranges) {
  kir_kernel *k = c->k;
  const graph_view *v = &c->root->inputs[0].view;
  uint32_t mask = graph_attr_reduce_mask(c->root);
  int in = 31 - __builtin_clz(mask), per = c->opts->column_rows;
  int64_t size = v->sizes[in], groups = size / per, rest = size % per;
  for (int d = 0; d < in; d++)
    if (mask & (1u << d)) ranges[d] = kir_range(k, v->sizes[d], false);
  if (groups > 0) {
    int g = kir_range(k, groups, false);
    column_pass(c, acc, width, base, in, pass_alu2(k, KIR_MUL, g, kir_const_i(k, KIR_INDEX, per)), per, ranges);
    kir_end(k, g);
  }
  if (rest > 0) column_pass(c, acc, width, base, in, kir_const_i(k, KIR_INDEX, groups * per), (int)rest, ranges);
  for (int d = in - 1; d >= 0; d--)
    if (mask & (1u << d)) {
      kir_end(k, ranges[d]);
      ranges[d] = -1;
    }
  c->n_memo = 0;
}

/* The loops of a column reduction: kept leading dims, then
 * blocks of `width` columns (the first of them parallel); in a block, the
 * LOCAL accumulator row is set to the identity, updated by column_rows,
 * then cast and stored. */
int lower_columns(lower_ctx *c, int64_t width) {
  const graph_node *n = c->root;
  kir_kernel *k = c->k;
  const graph_view *v = &n->inputs[0].view;
  uint32_t mask = graph_attr_reduce_mask(n);
  int last = v->ndim - 1, ranges[KILN_MAX_DIMS];
  int64_t cols = v->sizes[last];
  kir_type t = lower_reduce_acc_type(n);
  bool first = true;
  for (int d = 0; d < last; d++) {
    ranges[d] = -1;
    if (mask & (1u << d)) continue;
    ranges[d] = kir_range(k, v->sizes[d], first);
    first = false;
  }
  int block = kir_range(k, (cols + width - 1) / width, first);
  int base = column_base(k, block, width, cols);
  int acc = kir_local(k, t, width);
  int col = kir_range(k, width, false);
  kir_store(k, acc, col, lower_reduce_init(k, n->op, t));
  kir_end(k, col);
  column_rows(c, acc, width, base, ranges);
  col = kir_range(k, width, false);
  ranges[last] = pass_alu2(k, KIR_ADD, base, col);
  lower_store_contiguous(c, ranges, pass_to_register(k, pass_cast_to(k, kir_type_of(n->dtype), kir_load(k, acc, col))));
  kir_end(k, col);
  kir_end(k, block);
  ranges[last] = -1;
  lower_close_ranges(k, last, ranges);
  return KILN_OK;
}

