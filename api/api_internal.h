/*
 * api_internal.h — helpers shared by the files of the API layer: error
 * reporting, argument checks, scope registration and op recording.
 */
#ifndef KILN_API_INTERNAL_H
#define KILN_API_INTERNAL_H

#include <stdarg.h>

#include "graph.h"
#include "kiln/kiln.h"

/* ---- errors (errors.c) ---- */

/** Records the thread's first error: "<fn>: <formatted message>". Later
 *  errors are ignored until kiln_clear_error. Returns `status`. */
int api_error(kiln_status status, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** The status of the error this thread reported last through api_error
 *  (KILN_OK after kiln_clear_error): what a function returns when a callee
 *  that signals failure with false or NULL just failed. Never
 *  kiln_last_status() for that: it is the thread's *first* error, maybe an
 *  older one the caller did not clear, and a function returns its own
 *  outcome. */
kiln_status api_status(void);
/** Formats sizes as "[3, 4]" into buf (returns buf). */
const char *api_fmt_sizes(char *buf, size_t len, int ndim, const int64_t *sizes);
/** Checks a tensor argument: NULL keeps the first error (or sets
 *  KILN_ERR_ARG naming `arg` when none is set); a handle released before
 *  (kept poisoned under KILN_DEBUG_HANDLES=1) is KILN_ERR_ARG "argument t
 *  was released". */
bool api_check(const kiln_tensor *t, const char *fn, const char *arg);
/** Checks a list argument of n entries: n < 0 ("n = -1 is negative") or
 *  a NULL list for n > 0 ("the tensor list is NULL (n = 2)", `what` =
 *  "tensor") is KILN_ERR_ARG. Returns KILN_OK or that status. */
int api_check_list(const void *list, int n, const char *what, const char *fn);
/** Normalises a dim in [-ndim, ndim) to [0, ndim); -1 and an error if out
 *  of range. `ndim` 0 accepts -1 and 0 as in Torch. */
int api_wrap_dim(int dim, int ndim, const char *fn);
/** Checks ndim/sizes for a creation call. */
bool api_check_sizes(int ndim, const int64_t *sizes, const char *fn);
bool api_check_dtype(kiln_dtype d, const char *fn);

/** Checks that an in-place write of varying values into t's view writes
 *  each storage element once: a dim of size > 1 with stride 0 (an expanded
 *  view) is an error (KILN_ERR_ARG), as in PyTorch — which value would win
 *  is unspecified (and threads would race). Writes of one value (fill_)
 *  need no check. Other overlapping views are accepted, as in Torch. */
bool api_check_writable(const kiln_tensor *t, const char *fn);

/* ---- lifetime (lifetime.c) ---- */

/** Registers a new tensor with the innermost open scope (if any) and
 *  returns it. NULL-safe. Every public function returning a new tensor
 *  passes it through here. */
kiln_tensor *api_track(kiln_tensor *t);
/** Between these, api_track does nothing: a public function composed of
 *  other public calls owns (and releases) its intermediates itself, then
 *  passes only its result to api_track. Nestable. */
void api_untracked_begin(void);
void api_untracked_end(void);
/** Sets the untracked depth aside (returned) so that a helper called
 *  while untracked can own its intermediates in a kiln_scope of its own;
 *  api_untracked_resume puts it back. */
int api_untracked_pause(void);
void api_untracked_resume(int depth);
/** New tensor over storage s with view v, tracked. NULL (+ KILN_ERR_OOM) on
 *  OOM. */
kiln_tensor *api_tensor(kiln_storage *s, const graph_view *v, const char *fn);
/** A tensor over t's storage with view v that reads like t: detached when
 *  t is (a view of a kiln_detach handle passes no gradient either, as in
 *  Torch). Every view of a tensor an op makes to read it goes through
 *  here. Tracked like api_tensor. */
kiln_tensor *api_view(kiln_tensor *t, const graph_view *v, const char *fn);
/** New tensor over a fresh storage whose contents are the pending node
 *  (takes the node reference): view = contiguous node sizes. Every op
 *  that computes a new tensor passes here, so this is where the devices
 *  of its inputs are checked: an input on another device than the node
 *  (KILN_CUDA when any input is) is KILN_ERR_DEVICE, unless it reads one
 *  element (a 0-d CPU scalar, copied over when the op runs). */
kiln_tensor *api_tensor_from_node(graph_node *n, const char *fn);
/** Torch's error for operands on devices a and b (KILN_ERR_DEVICE, "<fn>:
 *  expected all tensors to be on the same device, but found KILN_CPU and
 *  KILN_CUDA"); returns the status. */
int api_device_mismatch(const char *fn, kiln_device a, kiln_device b);

/* ---- ops (record.c) ---- */

/** The node a value read through `t` comes from, right now: its
 *  storage's version, or for a kiln_detach handle a DETACH node over it
 *  (cached in t; NULL with KILN_ERR_OOM set when it cannot be made). The
 *  view to read it through is t's view. Borrowed: retain to keep it. */
graph_node *api_version(kiln_tensor *t);
/** Appends (api_version(t), view) to n's inputs. False, with the error
 *  set, when that version cannot be made: the caller releases n. */
bool api_add_input(graph_node *n, kiln_tensor *t, const graph_view *view);
/** Records an in-place write of `value` (its view already broadcast to the
 *  region's sizes) into `dst`'s view: the storage gets a new ASSIGN version.
 *  Returns KILN_OK or an error. */
int api_assign(kiln_tensor *dst, graph_node *value, const graph_view *value_view, const char *fn);
/** t converted to its compute dtype (F32 for F16/BF16), or t itself
 *  (nn.c; shared by the layers and losses). New reference. */
kiln_tensor *api_widen(kiln_tensor *t);
/** t has a float dtype; else KILN_ERR_DTYPE "<arg> needs a float dtype,
 *  got ..." and false (nn.c). */
bool api_check_float(const kiln_tensor *t, const char *fn, const char *arg);
/** Records elementwise op over n inputs (elementwise.c): ts[i], or the
 *  double scalars[i] where ts[i] is NULL; broadcasting, Torch's promotion
 *  and the bool checks of the public ops; attrs as for CLAMP (lo, hi).
 *  Errors name `fn`. A new tensor (tracked) or NULL. */
kiln_tensor *api_elementwise(graph_op op, kiln_tensor *const *ts, const double *scalars, int n, const char *fn,
                             double attr0, double attr1);
/** The dtype api_elementwise would give those operands, without recording
 *  anything (all ts[i] non-NULL tensors or scalars as above). */
kiln_dtype api_elementwise_dtype(graph_op op, kiln_tensor *const *ts, const double *scalars, int n);
/** Forces n when more than the auto-realize limit of nodes are pending
 *  (DESIGN.md: a graph that is never forced cannot grow without bound).
 *  A failure is recorded as the thread's error; n then stays pending. */
void api_maybe_realize(graph_node *n, const char *fn);
/** Sets that limit (0 disables; default 10,000 or env KILN_AUTO_REALIZE). */
void api_set_auto_realize_limit(int64_t limit);
/** Forces the storage of t (runtime) and returns its realized buffer node;
 *  NULL with the error set on failure. The buffer may be on the device:
 *  host code reads it through api_host_data. */
graph_node *api_force(kiln_tensor *t, const char *fn);
/** Forces t and returns its storage's elements in host memory: the
 *  buffer itself on KILN_CPU; on KILN_CUDA a copy made after the device
 *  finished, in *tmp (the caller frees it; NULL otherwise). NULL with the
 *  error set on failure. */
const char *api_host_data(kiln_tensor *t, const char *fn, void **tmp);
/** False (KILN_ERR_DEVICE, naming fn) when t is on KILN_CUDA: for the
 *  calls that need its memory on the host (kiln_data, callbacks, ...). */
bool api_check_host(const kiln_tensor *t, const char *fn);

/* ---- detach.c ---- */

/** Marks the write just recorded into t's storage (its current version,
 *  an ASSIGN) as one no gradient flows through: the node is no_grad, so
 *  once realized it keeps no recipe and neither the storage's previous
 *  value nor the graph that computed the written value stay alive through
 *  it. A version already forced (by the auto-realize limit) lets its
 *  recipe go now. For the optimizers' and clip_grad_norm_'s updates. */
void api_mark_detached_write(kiln_tensor *t);
/** kiln_copy_(dst, value), then api_mark_detached_write(dst) when it
 *  succeeded. Returns kiln_copy_'s status (value NULL, from a failed op:
 *  KILN_ERR_ARG, and the first error stays). */
int api_write_detached(kiln_tensor *dst, kiln_tensor *value);

/* ---- optim.c ---- */

/** Parameter j's state buffer k (SGD: 0 momentum_buffer; Adam: 0 exp_avg,
 *  1 exp_avg_sq), borrowed; NULL before the first step or out of range.
 *  For tests and tools that force or inspect the state. */
kiln_tensor *api_optimizer_state(const kiln_optimizer *opt, int j, int k);

/* ---- reduce.c ---- */

/** Bit mask of t's dims listed in dims [ndims] (negative allowed; ndims 0 =
 *  all dims). False with the error set (naming fn) for an out-of-range or
 *  repeated dim or a bad list. */
bool api_reduce_mask(const kiln_tensor *t, int ndims, const int *dims, uint32_t *mask, const char *fn);

/* ---- dist.c ---- */

/** The gradient of collective n (ALL_REDUCE or REDUCE_SCATTER with SUM,
 *  ALL_GATHER, BROADCAST) for its data input, given its cotangent g in
 *  n's sizes: all_reduce(g, SUM); reduce_scatter(g, SUM) along the rank
 *  dim; all_gather(g) along dim 0; on the root all_reduce(g, SUM), zeros
 *  elsewhere (the collective is recorded on every rank all the same). A
 *  collective itself: every rank must differentiate the same graph. NULL
 *  and KILN_ERR_UNSUPPORTED for MAX, MIN and PROD. */
kiln_tensor *api_dist_grad(const graph_node *n, kiln_tensor *g);

/* ---- views.c ---- */

/** Lazy contiguous copy of t converted to dtype: a CAST node whose one
 *  input is (api_version(t), t->view) and whose sizes are t's sizes, over a
 *  fresh storage; the result is contiguous with t's sizes. New tracked
 *  reference, or NULL with the error set. Used by reshape/flatten and by
 *  kiln_clone/kiln_contiguous/kiln_to_dtype. */
kiln_tensor *api_copy_contiguous(kiln_tensor *t, kiln_dtype dtype, const char *fn);
/** The same copy with its storage on `device` (kiln_to_device). */
kiln_tensor *api_copy_to(kiln_tensor *t, kiln_dtype dtype, kiln_device device, const char *fn);
/** x on like's device: x itself, or its copy there (x is released). For
 *  the masks and index lists a function builds on the host to combine
 *  with its arguments; untracked callers only. NULL-safe. */
kiln_tensor *api_move_like(kiln_tensor *x, const kiln_tensor *like, const char *fn);
/** Checks a view against a storage of storage_numel elements: sizes,
 *  strides and offset non-negative and (when not empty) the last element
 *  touched, overflow-checked, inside the storage. False with the error set. */
bool api_check_view(const graph_view *v, int64_t storage_numel, const char *fn);

/* ---- index.c ---- */

/** Checks an index tensor for an op on a dim of `size`: dtype I64 or I32
 *  (KILN_ERR_DTYPE), then forces it and checks every value is in
 *  [0, size) — or [-size, size) when `wrap` — (KILN_ERR_INDEX: "index 7 is
 *  out of range for dim 1 of size 5"). False with the error set. */
bool api_index_check(kiln_tensor *index, const char *fn, int dim, int64_t size, bool wrap);
/** A GATHER node over t's storage read through tv, with the index read
 *  through iv (the result's sizes, values already checked): new tracked
 *  tensor, contiguous [iv sizes]. */
kiln_tensor *api_gather(kiln_tensor *t, const graph_view *tv, int dim, kiln_tensor *index, const graph_view *iv,
                        const char *fn);

/* ---- pad.c ---- */

/** A 1-D tensor of n values of dtype dt copied from host data, on like's
 *  device: a new tracked reference (the index lists and masks the NN
 *  layers compute on the host), or NULL with the error set. */
kiln_tensor *api_host_const(kiln_dtype dt, int64_t n, const void *data, const kiln_tensor *like, const char *fn);
/** The scatter-add of src (read through sv) at index (through iv; both
 *  views of the same sizes, index values checked) along dim into zeros of
 *  sizes [ndim], in F64 when dtype is a float dtype, else I64: the sum
 *  over dim 0 of SCATTER's partial sums [C, *sizes] (ops.def; C from the
 *  sizes alone, index.c scatter_chunks). New tracked tensor, or NULL
 *  with the error set. */
kiln_tensor *api_scatter_sum(kiln_dtype dtype, int ndim, const int64_t *sizes, int dim, graph_node *index,
                             const graph_view *iv, kiln_tensor *src, const graph_view *sv, const char *fn);
/** Zeros [numel] of dtype with c (v's sizes) added at the positions of a
 *  flat storage that view v reads, duplicates (overlapping windows)
 *  accumulating: the adjoint of reading through v (kiln_grad) and the
 *  col2im of a transposed convolution. Injective v: one strided copy;
 *  a window view (a few kernel dims overlap the rest, as in conv and
 *  unfold) whose offsets shift one injective view by whole steps (a conv
 *  of stride 1): one kernel summing c's shifted, masked slices; another
 *  window view: one strided in-place add per window offset; otherwise a
 *  scatter-add kernel. New tracked tensor or NULL. */
kiln_tensor *api_view_add(kiln_dtype dtype, int64_t numel, const graph_view *v, kiln_tensor *c, const char *fn);
/** t[c with c[dim] = index[c]] += src[c] for every c of iv's sizes (index
 *  read through iv, src through sv: both views of those sizes, with t's
 *  number of dims). The index values are NOT checked here: the caller
 *  checked them (api_index_check) or built them in range (histc's clamped
 *  bins); the kernel clamps them all the same. Duplicates accumulate: SCATTER partial sums added
 *  to t's current contents and written back through t's view (index.c).
 *  Returns KILN_OK or the error. */
int api_scatter_add(kiln_tensor *t, int dim, kiln_tensor *index, const graph_view *iv, kiln_tensor *src,
                    const graph_view *sv, const char *fn);

#endif /* KILN_API_INTERNAL_H */
