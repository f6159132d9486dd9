/*
 * pass_internal.h — what the files of passes/ share beyond passes.h:
 * whole-buffer writes (fuse.c rule 7), the loop-dim merge of merge_loops.c,
 * and view and row predicates fusion and lowering both ask. Private to
 * passes/.
 */
#ifndef KILN_PASS_INTERNAL_H
#define KILN_PASS_INTERNAL_H

#include "passes.h"

/** True when n is a whole-buffer write: an ASSIGN whose region is its
 *  storage's whole contiguous extent (offset 0, contiguous, every
 *  element). It never reads its old version, its value is elementwise
 *  over the region, and a multi-output kernel of the region's sizes may
 *  store it (fuse.c rule 7). */
bool pass_whole_write(const graph_node *n);

/** An elementwise kernel's group rewritten over merged loop dims (merge_loops.c):
 *  `root` is a copy of the root whose sizes, and whose fused producers'
 *  sizes and views, have size-1 dims dropped and dims that are contiguous
 *  in every operand merged. The copies live in `copies`. */
typedef struct pass_merged {
  graph_node *root;
  graph_node *copies;
} pass_merged;

/** Fills *out and returns true when the kernel rooted at `root` has loop
 *  dims to drop or merge; false (nothing to free) otherwise, with *oom
 *  set when that is because memory ran out. Free with pass_merged_free. */
bool pass_merge_loops(const pass_plan *p, const graph_node *root, pass_merged *out, bool *oom);
void pass_merged_free(pass_merged *m);

/** n is computed inside the kernel of `host`: fused (pass_fused), or
 *  stored by it (a multi-output kernel's further result). */
static inline bool pass_computed_in(const pass_plan *p, const graph_node *n, const graph_node *host) {
  if (pass_fused(p, n)) return true;
  int h = pass_host(p, n);
  return h >= 0 && h == pass_pos(p, host);
}

/** The options of the kernel rooted at `root` (host's group, or the
 *  merged copy of it pass_lower_node lowers: merge_loops.c), as the heuristics
 *  choose them, KILN_OPTS's forced choices applied (heuristics.c).
 *  KILN_OK or KILN_ERR_OOM. */
int pass_choose_opts(const pass_plan *p, const graph_node *root, const graph_node *host, bool in_place,
                     pass_opts *o);
/** Reorders the outer loops of k's plain loop nest (an elementwise
 *  kernel's) so that its accesses walk memory outermost loop first, by
 *  the bytes each loop's step skips (loop_order.c); leaves any other
 *  kernel, or one whose accesses are not affine in its loops, as it is. */
void pass_order_loops(kir_kernel *k);
/** With KILN_DEBUG=2 or more, prints o on one line of stderr, after the
 *  kernel's name. */
void pass_opts_debug(const pass_opts *o, const char *kernel);

/** True when view v reads src in src's own contiguous layout (offset 0,
 *  src's sizes, contiguous strides). */
bool pass_plain_view(const graph_view *v, const graph_node *src);

/** True when reductions a and b reduce the same dims of inputs of the same
 *  sizes (they can share a row loop). */
bool pass_same_rows(const graph_node *a, const graph_node *b);
/** The rows of the fused row reduction q (its input's leading dims up to
 *  the first reduced one: *n_outer of them) fit a kernel rooted at root:
 *  a reduction over the same rows, or a root whose leading dims are the
 *  rows' and whose other dims are all those of q's input (*full) or all
 *  1, or that has no others (keepdim = false) (lower.c, lower_rows). */
bool pass_rows_fit(const graph_node *root, const graph_node *q, int *n_outer, bool *full);

#endif /* KILN_PASS_INTERNAL_H */
