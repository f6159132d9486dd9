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
/** Checks a handle argument of kind k (graph/handle.h) without reading
 *  memory that is not a live handle's: NULL is KILN_ERR_ARG "argument t is
 *  NULL" (the thread keeps its first error); a freed handle "argument t
 *  was released (how it died)"; any other pointer "argument t (0x...) is
 *  not a Kiln tensor". */
bool api_check_handle(graph_handle_kind k, const void *p, const char *fn, const char *arg);
/** api_check_handle for a tensor. */
bool api_check(const kiln_tensor *t, const char *fn, const char *arg);
/** api_check_handle for a storage. */
static inline bool api_check_storage(const kiln_storage *s, const char *fn, const char *arg) {
  return api_check_handle(GRAPH_HANDLE_STORAGE, s, fn, arg);
}
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


/* ---- lifetime (lifetime.c) ---- */

/** Registers a new tensor with the innermost open scope (if any) and
 *  returns it. NULL-safe. Every public function returning a new tensor
 *  passes it through here, once: a tensor whose every reference a scope
 *  lists already is not listed again (each entry is a reference the
 *  scope's end releases). */
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

/* ---- recording (record.c) and forcing (read.c) ---- */

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
/** Forces n when more than the auto-realize limit of nodes are pending
 *  (docs/semantics.md: a graph that is never forced cannot grow without bound).
 *  A failure is recorded as the thread's error; n then stays pending. */
void api_maybe_realize(graph_node *n, const char *fn);
/** Sets that limit (0 disables; default 10,000 or env KILN_AUTO_REALIZE). */
void api_set_auto_realize_limit(int64_t limit);
/** Forces nodes [n] (rt_realize); on failure the thread's error names fn.
 *  Returns KILN_OK or the status. */
int api_force_nodes(graph_node *const *nodes, int n, const char *fn);
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

#endif /* KILN_API_INTERNAL_H */
