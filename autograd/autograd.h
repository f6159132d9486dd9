/*
 * autograd.h — the autograd layer's interface: what kiln_grad's
 * traversal (grad.c) and its gradient rules (grad_rules.c) share, and
 * the adjoint of a view read (view_adjoint.c), which nn/conv.c uses too.
 * docs/autodiff.md explains the model.
 *
 * A node's cotangent is a flat tensor of its numel elements in its dtype
 * (every node produces a flat, contiguous buffer). A rule turns the
 * cotangent of node n into the contribution for one of its inputs, in the
 * sizes of the view that input was read through; grad.c then sends that
 * contribution back through the view (the view's adjoint) into the input
 * node's flat cotangent.
 */
#ifndef KILN_AUTOGRAD_H
#define KILN_AUTOGRAD_H

#include "collectives.h"

/** The values a gradient rule reads: n's inputs as tensors (input k read
 *  through its recorded view) and n's own result, made on first use; all
 *  owned by the kiln_grad call's scope. */
typedef struct grad_inputs {
  const graph_node *n;
  kiln_tensor *x[GRAPH_MAX_INPUTS];
  kiln_tensor *y; /* grad_output's */
  kiln_tensor *joint; /* a value a rule computes once for all inputs
                         (ATTENTION's backward node), NULL before */
} grad_inputs;

/** A tensor over node n's flat contents read through view v: the way a
 *  rule reads a recorded input. Tracked by the open scope; NULL on OOM. */
kiln_tensor *grad_wrap(graph_node *n, const graph_view *v);
/** Input k of in->n as a tensor (grad_wrap of the input, cached). */
kiln_tensor *grad_input(grad_inputs *in, int k);
/** Whether n's own result can still be read: n is pending, or realized
 *  and still holds its buffer. A realized node whose buffer a later
 *  version took for an in-place write (`overwritten`) keeps only its
 *  recipe; its inputs can always be read. A buffer that still has other
 *  readers is never written in place (realize.c copies it first), so a
 *  result read here is the value the forward produced. */
static inline bool grad_has_output(const graph_node *n) { return n->buffer || !n->overwritten; }
/** in->n's result as a tensor of its logical sizes (n->ndim, n->sizes:
 *  an elementwise node's contiguous result), cached; for rules whose
 *  formula reads the result, as Torch's do (threshold_backward,
 *  sigmoid_backward). Only when grad_has_output(in->n). */
kiln_tensor *grad_output(grad_inputs *in);

/** The contribution of cotangent g (n's logical sizes: its node sizes)
 *  to input k of n, in the sizes of input k's view; NULL with the error
 *  set. Only called for inputs grad_edge accepts. */
typedef kiln_tensor *(*grad_rule_fn)(grad_inputs *in, int k, kiln_tensor *g);

/** The rule of op, or NULL for an op without a derivative (ops.def has
 *  no DIFF for it). tests/test_grad_rules.c checks that every DIFF op has
 *  one. */
grad_rule_fn grad_rule_of(graph_op op);
/** Whether a gradient flows from n into its input k: n differentiable and
 *  not no_grad, input k a float value that is not a condition or an index
 *  (WHERE's input 0, GATHER's and SCATTER's input 1). */
bool grad_edge(const graph_node *n, int k);
/** The inputs n keeps for gradients: its pending inputs, or once
 *  realized the recipe it kept (graph_node's n_hist). */
static inline int grad_n_inputs(const graph_node *n) { return n->n_inputs ? n->n_inputs : n->n_hist; }

/** Zeros of sizes [ndim] (dtype) plus src added at index along dim
 *  (SCATTER partial sums, summed: ops_scatter_sum); index and src
 *  are read through views of the same sizes. New tracked tensor,
 *  contiguous. */
kiln_tensor *grad_scatter_add(kiln_dtype dtype, int ndim, const int64_t *sizes, int dim, graph_node *index,
                              const graph_view *iv, kiln_tensor *src);

/* ---- view_adjoint.c ---- */

/** Zeros [numel] of dtype with c (v's sizes) added at the positions of a
 *  flat storage that view v reads, duplicates (overlapping windows)
 *  accumulating: the adjoint of reading through v (kiln_grad) and the
 *  col2im of a transposed convolution. Injective v: one strided copy;
 *  a window view (a few kernel dims overlap the rest, as in conv and
 *  unfold) whose offsets shift one injective view by whole steps (a conv
 *  of stride 1): one kernel summing c's shifted, masked slices; another
 *  window view: one strided in-place add per window offset; otherwise a
 *  scatter-add kernel. New tracked tensor or NULL. */
kiln_tensor *grad_view_add(kiln_dtype dtype, int64_t numel, const graph_view *v, kiln_tensor *c, const char *fn);

#endif /* KILN_AUTOGRAD_H */
