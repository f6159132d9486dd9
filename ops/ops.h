/*
 * ops.h — what the files of the op-recording layer (ops/) share with each
 * other and with the layers above it (dist/, autograd/, io/, nn/): the
 * recording helpers behind the public ops. Every function here reports
 * its errors through api_error (naming `fn`) and returns tracked tensors
 * as the public ops do.
 */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include "api_internal.h"

/* ---- elementwise (elementwise.c) ---- */

/** Records elementwise op over n inputs (elementwise.c): ts[i], or the
 *  double scalars[i] where ts[i] is NULL; broadcasting, Torch's promotion
 *  and the bool checks of the public ops; attrs as for CLAMP (lo, hi).
 *  Errors name `fn`. A new tensor (tracked) or NULL. */
kiln_tensor *ops_elementwise(graph_op op, kiln_tensor *const *ts, const double *scalars, int n, const char *fn,
                             double attr0, double attr1);
/** The dtype ops_elementwise would give those operands, without recording
 *  anything (all ts[i] non-NULL tensors or scalars as above). */
kiln_dtype ops_elementwise_dtype(graph_op op, kiln_tensor *const *ts, const double *scalars, int n);

/* ---- copies (copy.c, views.c) ---- */

/** Lazy contiguous copy of t converted to dtype: a CAST node whose one
 *  input is (api_version(t), t->view) and whose sizes are t's sizes, over a
 *  fresh storage; the result is contiguous with t's sizes. New tracked
 *  reference, or NULL with the error set. Used by reshape/flatten and by
 *  kiln_clone/kiln_contiguous/kiln_to_dtype. */
kiln_tensor *ops_copy_contiguous(kiln_tensor *t, kiln_dtype dtype, const char *fn);
/** The same copy with its storage on `device` (kiln_to_device). */
kiln_tensor *ops_copy_to(kiln_tensor *t, kiln_dtype dtype, kiln_device device, const char *fn);
/** x on like's device: x itself, or its copy there (x is released). For
 *  the masks and index lists a function builds on the host to combine
 *  with its arguments; untracked callers only. NULL-safe. */
kiln_tensor *ops_move_like(kiln_tensor *x, const kiln_tensor *like, const char *fn);
/** Checks that an in-place write of varying values into t's view writes
 *  each storage element once: a dim of size > 1 with stride 0 (an expanded
 *  view) is an error (KILN_ERR_ARG), as in PyTorch — which value would win
 *  is unspecified (and threads would race). Writes of one value (fill_)
 *  need no check. Other overlapping views are accepted, as in Torch. */
bool ops_check_writable(const kiln_tensor *t, const char *fn);
/** Checks a view against a storage of storage_numel elements: sizes,
 *  strides and offset non-negative and (when not empty) the last element
 *  touched, overflow-checked, inside the storage. False with the error set. */
bool ops_check_view(const graph_view *v, int64_t storage_numel, const char *fn);

/* ---- creation (creation.c) ---- */

/** A 1-D tensor of n values of dtype dt copied from host data, on like's
 *  device: a new tracked reference (the index lists and masks the NN
 *  layers compute on the host), or NULL with the error set. */
kiln_tensor *ops_host_const(kiln_dtype dt, int64_t n, const void *data, const kiln_tensor *like, const char *fn);

/* ---- reductions (reduce.c) ---- */

/** Bit mask of t's dims listed in dims [ndims] (negative allowed; ndims 0 =
 *  all dims). False with the error set (naming fn) for an out-of-range or
 *  repeated dim or a bad list. */
bool ops_reduce_mask(const kiln_tensor *t, int ndims, const int *dims, uint32_t *mask, const char *fn);

/* ---- indexing (index.c) ---- */

/** Checks an index tensor for an op on a dim of `size`: dtype I64 or I32
 *  (KILN_ERR_DTYPE), then forces it and checks every value is in
 *  [0, size) — or [-size, size) when `wrap` — (KILN_ERR_INDEX: "index 7 is
 *  out of range for dim 1 of size 5"). False with the error set. */
bool ops_index_check(kiln_tensor *index, const char *fn, int dim, int64_t size, bool wrap);
/** A GATHER node over t's storage read through tv, with the index read
 *  through iv (the result's sizes, values already checked): new tracked
 *  tensor, contiguous [iv sizes]. */
kiln_tensor *ops_gather(kiln_tensor *t, const graph_view *tv, int dim, kiln_tensor *index, const graph_view *iv,
                        const char *fn);
/** The scatter-add of src (read through sv) at index (through iv; both
 *  views of the same sizes, index values checked) along dim into zeros of
 *  sizes [ndim], in F64 when dtype is a float dtype, else I64: the sum
 *  over dim 0 of SCATTER's partial sums [C, *sizes] (ops.def; C from the
 *  sizes alone, index.c scatter_chunks). New tracked tensor, or NULL
 *  with the error set. */
kiln_tensor *ops_scatter_sum(kiln_dtype dtype, int ndim, const int64_t *sizes, int dim, graph_node *index,
                             const graph_view *iv, kiln_tensor *src, const graph_view *sv, const char *fn);
/** t[c with c[dim] = index[c]] += src[c] for every c of iv's sizes (index
 *  read through iv, src through sv: both views of those sizes, with t's
 *  number of dims). The index values are NOT checked here: the caller
 *  checked them (ops_index_check) or built them in range (histc's clamped
 *  bins); the kernel clamps them all the same. Duplicates accumulate: SCATTER partial sums added
 *  to t's current contents and written back through t's view (index.c).
 *  Returns KILN_OK or the error. */
int ops_scatter_add(kiln_tensor *t, int dim, kiln_tensor *index, const graph_view *iv, kiln_tensor *src,
                    const graph_view *sv, const char *fn);

/* ---- detached writes (detach.c) ---- */

/** Marks the write just recorded into t's storage (its current version,
 *  an ASSIGN) as one no gradient flows through: the node is no_grad, so
 *  once realized it keeps no recipe and neither the storage's previous
 *  value nor the graph that computed the written value stay alive through
 *  it. A version already forced (by the auto-realize limit) lets its
 *  recipe go now. For the optimizers' and clip_grad_norm_'s updates. */
void ops_mark_detached_write(kiln_tensor *t);
/** kiln_copy_(dst, value), then ops_mark_detached_write(dst) when it
 *  succeeded. Returns kiln_copy_'s status (value NULL, from a failed op:
 *  KILN_ERR_ARG, and the first error stays). */
int ops_write_detached(kiln_tensor *dst, kiln_tensor *value);

/* ---- fused attention (attention_nodes.c) ---- */

/** The fused attention of q [.., L, E], k [.., S, E], v [.., S, Ev] (one
 *  float dtype, F32 or F64; checked by the caller, as their batch dims,
 *  which broadcast to batch [nb]) with mask NULL, or BOOL / q's dtype
 *  broadcastable to [batch..., L, S], or causal (keep j <= i): one
 *  ATTENTION node (graph/ops.def) over q, cat(k, v) and the mask, the
 *  k/v copy the only one. Returns O [batch..., L, Ev] (contiguous).
 *  Tracked; NULL with the error set (naming fn). */
kiln_tensor *ops_attention(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *mask, bool causal,
                           double scale, int nb, const int64_t *batch, const char *fn);
/** ATTENTION node n's gradient for its input k (0 q, 1 kv, 2 a float
 *  mask) in the sizes of that input's view, from cotangent g (n's sizes):
 *  x[] are n's inputs as tensors (x[2] NULL without a mask), o n's
 *  result or NULL when it can no longer be read (it is then computed
 *  again from x). *joint caches the ATTENTION_BWD node the calls for q
 *  and kv share (NULL before the first). Tracked; NULL with the error
 *  set. */
kiln_tensor *ops_attention_grad(const graph_node *n, kiln_tensor *const *x, kiln_tensor *o, kiln_tensor *g,
                                kiln_tensor **joint, int k, const char *fn);
/** The fused backward of o = softmax(q·kᵀ·scale + mask)·v written out of
 *  ops (kiln_grad's shortcut for graph_attention_match): q [b.., L, E],
 *  k [b.., S, E], v [b.., S, Ev] (the same batch dims), mask read at
 *  [b.., L, S] as kind (GRAPH_ATTENTION_*) says, o its value or NULL
 *  (computed again), cotangent g [b.., L, Ev]. out[0..2] = dq, dk, dv;
 *  out[3] = the float mask's gradient when mask_grad_too (else NULL).
 *  Tracked; false with the error set. */
bool ops_attention_backward(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *mask, int kind,
                            double scale, kiln_tensor *o, kiln_tensor *g, bool mask_grad_too, kiln_tensor **out,
                            const char *fn);

#endif /* KILN_OPS_H */
