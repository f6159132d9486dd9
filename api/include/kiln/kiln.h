/*
 * kiln.h — the public C API of Kiln, a lazy, graph-compiling tensor engine.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise (docs/api.md is the long form):
 *
 *  - A tensor is a view (sizes, strides in elements, storage offset in
 *    elements) of a flat storage, exactly as in Torch. Views share storage;
 *    an in-place write through one view is seen by every tensor over it.
 *  - Nothing is computed until a value is forced (kiln_realize, kiln_read,
 *    kiln_item, kiln_get, kiln_data, printing). An op recorded before an
 *    in-place write does not see that write (program order).
 *  - Ownership: a function returning `kiln_tensor *` returns a NEW reference;
 *    release it with kiln_release. Inside kiln_scope_begin()/kiln_scope_end()
 *    returned tensors are owned by the scope instead (see kiln_keep).
 *    Tensor arguments are borrowed, never stolen.
 *  - Errors never abort. A function returning a pointer returns NULL; one
 *    returning int returns a negative kiln_status. The thread's first error
 *    is kept (kiln_last_error) until kiln_clear_error. A NULL tensor argument
 *    makes an op return NULL (or KILN_ERR_ARG) and keeps the first error, so
 *    a chain of calls can be checked once at its end. On error, inputs are
 *    left unchanged and out-parameters untouched (no output is written,
 *    not even NULL: every function, the multi-output ones such as
 *    kiln_sort, kiln_max and kiln_grad included). A function returning int
 *    returns its own outcome (KILN_OK, or its own error's status) even while
 *    an earlier error is uncleared; kiln_last_status() stays the first's.
 *  - Dimensions are 0-based; a negative dim counts from the end (-1 = last).
 *  - At most KILN_MAX_DIMS dimensions per tensor.
 *
 * Threads. Every function may be called from any thread; errors and
 * scopes are per thread. What may run at the same time:
 *  - Private tensors: threads may record ops and force at once on tensors
 *    that share no pending work, also with the same shapes (the schedule
 *    and kernel caches are shared and locked). A tensor whose value is
 *    still pending (lazy), and every tensor over the same storage or
 *    recorded from it while it is pending, is used by one thread at a
 *    time; to hand it to another thread, synchronize as for any data
 *    (a mutex, pthread_join), or realize it first.
 *  - Shared realized tensors: once a tensor is realized (kiln_realize
 *    returned KILN_OK, or a read forced it) and while no thread writes its
 *    storage, any number of threads may at the same time read it (kiln_read,
 *    kiln_data, kiln_item, kiln_get, printing), take views of it, record ops
 *    that read it, force graphs that read it, and kiln_retain / kiln_release
 *    it (reference counts are atomic).
 *  - Writes: an in-place write to a storage (any function ending in `_`,
 *    kiln_set, and what they call) needs exclusive use of every tensor over
 *    that storage: no other thread may read, view or write it meanwhile.
 *  - Process-wide settings (kiln_set_default_dtype, kiln_set_backend,
 *    kiln_set_num_threads, kiln_manual_seed, kiln_profile_begin/_end) are
 *    changed while no other thread uses Kiln. kiln_rand/kiln_randn/kiln_randint/
 *    kiln_randperm (and kiln_rand_like, kiln_randn_like, kiln_uniform_,
 *    kiln_normal_) share one generator (locked): which thread draws which
 *    numbers depends on timing.
 *  - Kernels of forces from different threads share one thread pool and
 *    run one after another; compiling happens in parallel.
 */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KILN_BUILDING_LIBRARY)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

/* The types every layer shares (dtypes, devices, status codes, the
 * profiler's kernel record) are in kiln/types.h. */

/* ------------------------------------------------------ lifetime, errors */

/** Adds a reference to `t` and returns it (Torch `retain`). NULL-safe. */
KILN_API kiln_tensor *kiln_retain(kiln_tensor *t);
/** Drops a reference (Torch `free`); the last one frees the handle. The
 *  storage lives while any tensor or pending op uses it. When this drops
 *  the last reference to a kiln_from_blob storage with a write into it
 *  still pending, the write is performed first (forces), then the deleter
 *  runs; if that force fails the thread's error is set (naming
 *  kiln_release) and the write is lost. NULL-safe. Any later use of a
 *  freed handle — an op, a query, kiln_retain, a
 *  second kiln_release — is KILN_ERR_ARG "argument t was released", saying
 *  how it died: "used after its last kiln_release", or "used after the
 *  kiln_scope_end of the scope that owned it, opened at depth N" (1: the
 *  outermost open scope); a pointer Kiln never returned is "argument t
 *  (0x...) is not a Kiln tensor". Every entry point that takes a handle
 *  (tensor, storage, optimizer, ONNX model) checks it so, however long
 *  ago the handle died: a freed handle is never handed out again (after
 *  about 3,800 later tensor deaths the message says "long ago" instead of
 *  how; after 2^36 tensors made, the oldest are reused: docs/api.md,
 *  "Misuse"). */
KILN_API void kiln_release(kiln_tensor *t);
/** Opens a scope on this thread: every tensor returned by a Kiln function
 *  until the matching kiln_scope_end is owned by the scope. Scopes nest. */
KILN_API void kiln_scope_begin(void);
/** Closes the innermost scope, releasing every tensor it owns that was not
 *  passed to kiln_keep or kiln_escape. A tensor the scope owned that the
 *  caller released with kiln_release (holding no reference of its own) is
 *  no longer the scope's: that release took it out of the scope, which
 *  does not release it again. Without an open scope it does nothing. */
KILN_API void kiln_scope_end(void);
/** Takes `t` out of the innermost scope: it moves to the enclosing scope, or
 *  to the caller (who then releases it) when there is none. Returns `t`
 *  (borrowed: no new reference). A tensor not owned by the scope is returned
 *  unchanged. NULL-safe. */
KILN_API kiln_tensor *kiln_keep(kiln_tensor *t);
/** Hands `t` to the caller from any scope depth: the open scope that owns
 *  it (the innermost one, if several do) gives up its reference, which the
 *  caller now owns and releases with kiln_release (or passes on). Use it to
 *  return a tensor from a helper that opens scopes of its own, or to carry
 *  state across loop iterations that each run in a scope. Returns `t`
 *  (borrowed: no new reference); a tensor no scope owns is returned
 *  unchanged. NULL-safe. Torch: — (Python's references). */
KILN_API kiln_tensor *kiln_escape(kiln_tensor *t);

/** Message of this thread's first error since the last kiln_clear_error,
 *  e.g. "kiln_add: sizes [3, 4] and [5] cannot be broadcast"; "" if none.
 *  Borrowed; valid until the next kiln_clear_error on this thread. */
KILN_API const char *kiln_last_error(void);
/** Status of this thread's first error, KILN_OK if none. */
KILN_API kiln_status kiln_last_status(void);
/** Forgets this thread's error. */
KILN_API void kiln_clear_error(void);
/** Name of a status code, e.g. "KILN_ERR_SHAPE". Static string. */
KILN_API const char *kiln_status_name(kiln_status s);

/* ------------------------------------------------------------- dtypes */

/** Name of a dtype ("f32", "i64", ...). Static string; "?" if invalid. */
KILN_API const char *kiln_dtype_name(kiln_dtype d);
/** Bytes per element of a dtype (BOOL: 1); 0 if invalid. */
KILN_API size_t kiln_dtype_size(kiln_dtype d);
/** Sets the dtype that float results of integer inputs take (default F32),
 *  like torch.set_default_dtype. Only F16, BF16, F32, F64 are accepted;
 *  returns KILN_ERR_DTYPE otherwise. Process-wide. */
KILN_API int kiln_set_default_dtype(kiln_dtype d);
/** The current default float dtype. */
KILN_API kiln_dtype kiln_default_dtype(void);

/* ------------------------------------------------------------ creation */

/** Uninitialised contiguous tensor of `sizes` [ndim] (contents are zeros in
 *  Kiln, never garbage). Torch: torch.empty. Errors: ndim outside
 *  [0, KILN_MAX_DIMS], negative size, bad dtype. */
KILN_API kiln_tensor *kiln_empty(kiln_dtype dtype, int ndim, const int64_t *sizes);
/** Contiguous tensor of zeros. Torch: torch.zeros. Errors as kiln_empty. */
KILN_API kiln_tensor *kiln_zeros(kiln_dtype dtype, int ndim, const int64_t *sizes);
/** Contiguous tensor of ones. Torch: torch.ones. Errors as kiln_empty. */
KILN_API kiln_tensor *kiln_ones(kiln_dtype dtype, int ndim, const int64_t *sizes);
/** Contiguous tensor filled with `value` (converted to dtype as a cast
 *  does). Torch: torch.full. Errors as kiln_empty. */
KILN_API kiln_tensor *kiln_full(kiln_dtype dtype, int ndim, const int64_t *sizes, double value);
/** 0-d tensor holding `value`. Torch: torch.tensor(value, dtype=...). */
KILN_API kiln_tensor *kiln_scalar(kiln_dtype dtype, double value);
/** Contiguous tensor with t's sizes and dtype, every element `value`
 *  (converted as a cast does), in a new storage on t's device; t is only
 *  read for its sizes, dtype and device (never forced). Torch:
 *  torch.full_like with default arguments. Errors: NULL t (KILN_ERR_ARG).
 *  New reference. */
KILN_API kiln_tensor *kiln_full_like(kiln_tensor *t, double value);
/** kiln_full_like(t, 0). Torch: torch.zeros_like. */
KILN_API kiln_tensor *kiln_zeros_like(kiln_tensor *t);
/** kiln_full_like(t, 1). Torch: torch.ones_like. */
KILN_API kiln_tensor *kiln_ones_like(kiln_tensor *t);
/** Identity-like matrix [n, m]: 1 where row == column, else 0, in dtype
 *  (BOOL: true/false; BF16 too, which Torch 1.13 lacks on the CPU). m < 0 means m = n. Lazy: a fusable comparison of
 *  two aranges, cast to dtype. Torch: torch.eye(n, m). Errors: n < 0
 *  (KILN_ERR_ARG), a bad dtype (KILN_ERR_DTYPE), n * m overflowing
 *  (KILN_ERR_SHAPE). New reference. */
KILN_API kiln_tensor *kiln_eye(kiln_dtype dtype, int64_t n, int64_t m);
/** 1-d tensor start, start+step, ... up to but excluding `end`; size
 *  ceil((end-start)/step). Torch: torch.arange. Errors: step 0, or a step
 *  whose sign does not lead from start to end (KILN_ERR_ARG). */
KILN_API kiln_tensor *kiln_arange(kiln_dtype dtype, double start, double end, double step);
/** 1-d tensor of `steps` evenly spaced values from start to end inclusive.
 *  Torch: torch.linspace. Errors: steps < 0. */
KILN_API kiln_tensor *kiln_linspace(kiln_dtype dtype, double start, double end, int64_t steps);
/** Seeds this process's generator for kiln_rand, kiln_randn, kiln_randint
 *  and kiln_randperm. */
KILN_API void kiln_manual_seed(uint64_t seed);
/** Uniform samples in [0, 1). Float dtypes only (KILN_ERR_DTYPE otherwise).
 *  Torch: torch.rand. Deterministic for a seed. */
KILN_API kiln_tensor *kiln_rand(kiln_dtype dtype, int ndim, const int64_t *sizes);
/** Standard normal samples. Float dtypes only. Torch: torch.randn. */
KILN_API kiln_tensor *kiln_randn(kiln_dtype dtype, int ndim, const int64_t *sizes);
/** kiln_rand / kiln_randn of t's sizes and dtype (a float dtype, else
 *  KILN_ERR_DTYPE), contiguous, on t's device; t is only read for those
 *  (never forced). Torch: rand_like, randn_like. New reference. */
KILN_API kiln_tensor *kiln_rand_like(kiln_tensor *t);
KILN_API kiln_tensor *kiln_randn_like(kiln_tensor *t);
/** Fills t's view in place with samples uniform in [from, to) (before
 *  rounding to t's dtype) or normal with mean and std, drawn now from the
 *  kiln_rand generator in row-major order of the view (deterministic after
 *  kiln_manual_seed) and written lazily as kiln_copy_ does: every tensor
 *  over t's storage sees them. t float (KILN_ERR_DTYPE), not an expanded
 *  view (KILN_ERR_ARG); from <= to finite, std >= 0 and mean finite
 *  (KILN_ERR_ARG). Returns KILN_OK or the error. Torch: uniform_, normal_. */
KILN_API int kiln_uniform_(kiln_tensor *t, double from, double to);
KILN_API int kiln_normal_(kiln_tensor *t, double mean, double std);
/** Integers uniform in [low, high) (without modulo bias), of sizes [ndim],
 *  drawn from the kiln_rand generator (deterministic after
 *  kiln_manual_seed; values differ from Torch's). dtype is an integer or
 *  float dtype (floats hold the integer values, rounded beyond their
 *  mantissa as in Torch). Torch: torch.randint(low, high, sizes, dtype=).
 *  Errors: high <= low, or a range outside what dtype holds (for U8
 *  [0, 256), for F16 its finite range) (KILN_ERR_ARG); BOOL or a bad dtype
 *  (KILN_ERR_DTYPE); sizes as kiln_empty. New reference. */
KILN_API kiln_tensor *kiln_randint(kiln_dtype dtype, int64_t low, int64_t high, int ndim,
                                   const int64_t *sizes);
/** A random permutation of 0 .. n-1, I64 [n] (Fisher-Yates from the
 *  kiln_rand generator; n = 0 gives an empty tensor). Torch:
 *  torch.randperm(n). Errors: n < 0 (KILN_ERR_ARG). New reference. */
KILN_API kiln_tensor *kiln_randperm(int64_t n);
/** Contiguous tensor whose elements are copied from row-major `data`
 *  (numel × dtype size bytes, dtype's own layout; BOOL = 1 byte 0/1).
 *  Torch: torch.tensor(data). `data` may be NULL only when numel is 0. */
KILN_API kiln_tensor *kiln_from_data(kiln_dtype dtype, int ndim, const int64_t *sizes, const void *data);
/** Wraps caller memory without copying. `strides` (in elements, ≥ 0) may be
 *  NULL for contiguous. Kiln reads and writes `data` in place; when the last
 *  user of the storage is gone, `deleter(data, ctx)` is called (deleter may
 *  be NULL: the caller keeps ownership and must keep `data` alive as long as
 *  the tensor or anything computed from it is alive). Writes through Kiln
 *  land in `data` once forced, at the latest when the storage's last
 *  reference is released (before the deleter runs). Torch:
 *  torch.from_blob. */
KILN_API kiln_tensor *kiln_from_blob(kiln_dtype dtype, int ndim, const int64_t *sizes,
                                     const int64_t *strides, void *data,
                                     void (*deleter)(void *data, void *ctx), void *ctx);

/** New zero-filled storage of `numel` elements. Returns a new reference
 *  (release with kiln_storage_release). Torch: torch.Storage(n). */
KILN_API kiln_storage *kiln_storage_new(kiln_dtype dtype, int64_t numel);
/** The storage of `t`, as a NEW reference. Torch: t.storage(). */
KILN_API kiln_storage *kiln_storage_of(const kiln_tensor *t);
/** Adds a reference to a storage. NULL-safe. */
KILN_API kiln_storage *kiln_storage_retain(kiln_storage *s);
/** Drops a storage reference. NULL-safe. The last reference to a
 *  kiln_from_blob storage performs a pending write into it first, as
 *  kiln_release. */
KILN_API void kiln_storage_release(kiln_storage *s);
/** Elements in a storage (-1 and an error for NULL). */
KILN_API int64_t kiln_storage_numel(const kiln_storage *s);
/** dtype of a storage. */
KILN_API kiln_dtype kiln_storage_dtype(const kiln_storage *s);
/** A view of `s` (the storage is shared, not copied): `sizes`/`strides`
 *  [ndim] in elements (strides NULL = contiguous), `offset` in elements.
 *  Errors: negative sizes/strides/offset, or a view reaching past the
 *  storage's end. Torch: torch.Tensor(storage, offset, sizes, strides). */
KILN_API kiln_tensor *kiln_tensor_from_storage(kiln_storage *s, int64_t offset, int ndim,
                                               const int64_t *sizes, const int64_t *strides);
/** Makes `dst` view the same storage with the same view as `src` (Torch
 *  `set`). Other tensors that shared dst's old storage are unaffected. */
KILN_API int kiln_set_(kiln_tensor *dst, kiln_tensor *src);
/** Torch `resize_`: gives `t` contiguous `sizes` [ndim] at its current
 *  offset (resizing to its own sizes keeps its strides, as in Torch). If the
 *  storage is too small it grows (forcing it; old contents kept, new
 *  elements zero; a from_blob storage is copied into Kiln memory).
 *  Errors: negative size. */
KILN_API int kiln_resize_(kiln_tensor *t, int ndim, const int64_t *sizes);

/* ----------------------------------------------- queries (never force) */

/** Number of dimensions (-1 and an error for NULL). Torch: dim(). */
KILN_API int kiln_dim(const kiln_tensor *t);
/** Size of dim (negative counts from the end); -1 and an error if out of
 *  range. Torch: size(dim). */
KILN_API int64_t kiln_size(const kiln_tensor *t, int dim);
/** Sizes [dim()], borrowed (valid while `t` lives and is not resized). */
KILN_API const int64_t *kiln_sizes(const kiln_tensor *t);
/** Stride of dim in elements; -1 and an error if out of range. */
KILN_API int64_t kiln_stride(const kiln_tensor *t, int dim);
/** Strides [dim()] in elements, borrowed like kiln_sizes. */
KILN_API const int64_t *kiln_strides(const kiln_tensor *t);
/** Storage offset in elements. Torch: storage_offset(). */
KILN_API int64_t kiln_storage_offset(const kiln_tensor *t);
/** Number of elements (1 for 0-d). Torch: numel(). */
KILN_API int64_t kiln_numel(const kiln_tensor *t);
/** Element type. */
KILN_API kiln_dtype kiln_dtype_of(const kiln_tensor *t);
/** Device. */
KILN_API kiln_device kiln_device_of(const kiln_tensor *t);
/** True when the view is row-major contiguous (size-1 dims ignored).
 *  Torch: is_contiguous(). */
KILN_API bool kiln_is_contiguous(const kiln_tensor *t);
/** True when sizes are equal. Torch: isSameSizeAs. */
KILN_API bool kiln_is_same_size(const kiln_tensor *a, const kiln_tensor *b);
/** True when a and b view the same storage with the same offset, sizes and
 *  strides. Torch: isSetTo. */
KILN_API bool kiln_is_set_to(const kiln_tensor *a, const kiln_tensor *b);

/* ---------------------------------------- views (no copy, share storage) */

/** Elements start..start+length-1 of dim. Torch: narrow. */
KILN_API kiln_tensor *kiln_narrow(kiln_tensor *t, int dim, int64_t start, int64_t length);
/** Removes dim by taking `index` (negative counts from the end).
 *  Torch: select, t[i]. */
KILN_API kiln_tensor *kiln_select(kiln_tensor *t, int dim, int64_t index);
/** Python slice start:end:step of dim (step > 0; start/end clamp and may be
 *  negative as in Python). Torch: t[a:b:s]. */
KILN_API kiln_tensor *kiln_slice(kiln_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
/** Swaps two dims. Torch: transpose. */
KILN_API kiln_tensor *kiln_transpose(kiln_tensor *t, int d0, int d1);
/** Transpose of a ≤ 2-d tensor. Torch: t(). Error for ndim > 2. */
KILN_API kiln_tensor *kiln_t(kiln_tensor *t);
/** Reorders dims: `dims` [ndim] is a permutation. Torch: permute. */
KILN_API kiln_tensor *kiln_permute(kiln_tensor *t, int ndim, const int *dims);
/** Sliding windows of `size` with `step` along dim, as a new last dim.
 *  Torch: unfold. */
KILN_API kiln_tensor *kiln_unfold(kiln_tensor *t, int dim, int64_t size, int64_t step);
/** Broadcasts size-1 dims to `sizes` [ndim ≥ t's] with stride 0; -1 keeps a
 *  size. Torch: expand. Error if a non-1 size would change. */
KILN_API kiln_tensor *kiln_expand(kiln_tensor *t, int ndim, const int64_t *sizes);
/** kiln_expand to other's sizes. Torch: expand_as. */
KILN_API kiln_tensor *kiln_expand_as(kiln_tensor *t, const kiln_tensor *other);
/** Same storage, new sizes [ndim] (one may be -1). Error (KILN_ERR_SHAPE)
 *  when the strides cannot express it: call kiln_contiguous first or use
 *  kiln_reshape. Torch: view. */
KILN_API kiln_tensor *kiln_view(kiln_tensor *t, int ndim, const int64_t *sizes);
/** kiln_view to other's sizes. Torch: view_as. */
KILN_API kiln_tensor *kiln_view_as(kiln_tensor *t, const kiln_tensor *other);
/** A view when possible, else a lazy contiguous copy. Torch: reshape. */
KILN_API kiln_tensor *kiln_reshape(kiln_tensor *t, int ndim, const int64_t *sizes);
/** Removes all size-1 dims. Torch: squeeze(). */
KILN_API kiln_tensor *kiln_squeeze(kiln_tensor *t);
/** Removes dim if its size is 1 (else returns an equal view). Torch:
 *  squeeze(dim). */
KILN_API kiln_tensor *kiln_squeeze_dim(kiln_tensor *t, int dim);
/** Inserts a size-1 dim at `dim` (in [-ndim-1, ndim]). Torch: unsqueeze. */
KILN_API kiln_tensor *kiln_unsqueeze(kiln_tensor *t, int dim);
/** Merges dims start_dim..end_dim; a view when possible, else a lazy copy.
 *  Torch: flatten. */
KILN_API kiln_tensor *kiln_flatten(kiln_tensor *t, int start_dim, int end_dim);
/** Any view of t's storage: sizes/strides [ndim] (≥ 0), `offset` absolute in
 *  elements. Error if it reaches past the storage. Torch: as_strided. */
KILN_API kiln_tensor *kiln_as_strided(kiln_tensor *t, int ndim, const int64_t *sizes,
                                      const int64_t *strides, int64_t offset);
/** Splits dim into pieces of `size` (the last may be smaller); stores up to
 *  max_out new references in out[] and returns the piece count (which may
 *  exceed max_out: only max_out are stored). Torch: split. */
KILN_API int kiln_split(kiln_tensor *t, int64_t size, int dim, kiln_tensor **out, int max_out);
/** Splits dim into n pieces of ceil(size/n) (fewer if it runs out); returns
 *  the count as kiln_split does. Torch: chunk. */
KILN_API int kiln_chunk(kiln_tensor *t, int n, int dim, kiln_tensor **out, int max_out);

/* ------------------------------------------ copies, conversion, in-place */

/** Lazy contiguous copy with its own storage. Torch: clone. */
KILN_API kiln_tensor *kiln_clone(kiln_tensor *t);
/** `t` itself (new reference) when contiguous, else a lazy contiguous copy.
 *  Torch: contiguous. */
KILN_API kiln_tensor *kiln_contiguous(kiln_tensor *t);
/** Lazy conversion (new storage; a new reference to `t` if already that
 *  dtype). Float→int truncates toward zero, →BOOL is x != 0. Torch: to. */
KILN_API kiln_tensor *kiln_to_dtype(kiln_tensor *t, kiln_dtype dtype);
/** A tensor on `device` with t's values: `t` itself (new reference) when
 *  it is already there, else a lazy contiguous copy (new storage, t's
 *  sizes and dtype) on that device — like kiln_to_dtype. KILN_CUDA tensors
 *  live on CUDA device 0 (or, under the "cuda-emu" backend, in emulated
 *  device memory on the host); ops on them produce KILN_CUDA tensors and
 *  run there; reading their values (kiln_read, kiln_get, kiln_item,
 *  printing, saving) copies them to the host after the device finished.
 *  An op mixing a KILN_CPU and a KILN_CUDA tensor fails with
 *  KILN_ERR_DEVICE ("expected all tensors to be on the same device"),
 *  except a CPU tensor of one element (a 0-d scalar), which is copied
 *  over; kiln_copy_ copies across devices. kiln_data of a KILN_CUDA tensor
 *  is KILN_ERR_DEVICE. Errors: KILN_CUDA without a usable device and not
 *  under "cuda-emu" (libcuda missing, cuInit failing, no GPU): NULL with
 *  KILN_ERR_DEVICE "no CUDA device: <reason>"; another device value:
 *  KILN_ERR_ARG. Torch: to(device). */
KILN_API kiln_tensor *kiln_to_device(kiln_tensor *t, kiln_device device);
/** Copies src's elements into dst (row-major order of each), converting the
 *  dtype. Element counts must match; sizes may differ. If src broadcasts to
 *  dst's sizes it is broadcast. Lazy. A dst whose view repeats a storage
 *  element (a dim of size > 1 with stride 0, e.g. from kiln_expand) is
 *  KILN_ERR_ARG, as in PyTorch: which value would win is unspecified.
 *  Torch: copy_. */
KILN_API int kiln_copy_(kiln_tensor *dst, kiln_tensor *src);
/** Sets every element of t's view to value. Lazy. An expanded (stride-0)
 *  view is accepted (every write stores the same value), as in Torch7;
 *  PyTorch rejects it. Torch: fill_. */
KILN_API int kiln_fill_(kiln_tensor *t, double value);
/** kiln_fill_(t, 0). Torch: zero_. */
KILN_API int kiln_zero_(kiln_tensor *t);

/* ------------------------------------------------------------ elementwise
 * Lazy, broadcasting (NumPy/Torch rules) and with Torch's type promotion:
 * bool < integer < float categories; among dimensioned tensors the wider
 * type wins (U8 with I8 gives I16, F16 with BF16 gives F32); a 0-d tensor or
 * a double scalar only lifts the category (int tensor + 2.5 gives the
 * default float dtype). Float-only functions (exp, sin, sqrt, div, ...)
 * give the default float dtype for integer or bool inputs. Comparisons and
 * logical_* return BOOL. Integer division by zero gives 0 (Torch raises).
 * Errors: NULL input, sizes that cannot broadcast (KILN_ERR_SHAPE). */

/** Unary functions: each returns a new tensor of t's sizes. */
KILN_API kiln_tensor *kiln_neg(kiln_tensor *t);        /* Torch neg (error for BOOL) */
KILN_API kiln_tensor *kiln_abs(kiln_tensor *t);        /* abs */
KILN_API kiln_tensor *kiln_sign(kiln_tensor *t);       /* sign: -1, 0, 1 */
KILN_API kiln_tensor *kiln_exp(kiln_tensor *t);        /* exp */
KILN_API kiln_tensor *kiln_exp2(kiln_tensor *t);       /* exp2 */
KILN_API kiln_tensor *kiln_log(kiln_tensor *t);        /* log */
KILN_API kiln_tensor *kiln_log2(kiln_tensor *t);       /* log2 */
KILN_API kiln_tensor *kiln_log1p(kiln_tensor *t);      /* log1p */
KILN_API kiln_tensor *kiln_expm1(kiln_tensor *t);      /* expm1 */
KILN_API kiln_tensor *kiln_sqrt(kiln_tensor *t);       /* sqrt */
KILN_API kiln_tensor *kiln_rsqrt(kiln_tensor *t);      /* rsqrt: 1/sqrt */
KILN_API kiln_tensor *kiln_reciprocal(kiln_tensor *t); /* reciprocal: 1/x */
KILN_API kiln_tensor *kiln_sin(kiln_tensor *t);        /* sin */
KILN_API kiln_tensor *kiln_cos(kiln_tensor *t);        /* cos */
KILN_API kiln_tensor *kiln_tan(kiln_tensor *t);        /* tan */
KILN_API kiln_tensor *kiln_tanh(kiln_tensor *t);       /* tanh */
KILN_API kiln_tensor *kiln_sigmoid(kiln_tensor *t);    /* sigmoid: 1/(1+exp(-x)) */
KILN_API kiln_tensor *kiln_relu(kiln_tensor *t);       /* relu: max(x, 0), keeps dtype */
KILN_API kiln_tensor *kiln_gelu(kiln_tensor *t);       /* gelu (exact, erf form) */
KILN_API kiln_tensor *kiln_silu(kiln_tensor *t);       /* silu: x*sigmoid(x) */
KILN_API kiln_tensor *kiln_erf(kiln_tensor *t);        /* erf */
/* Inverse trigonometric and hyperbolic functions (Torch asin ... atanh):
 * float results, NaN outside the domain (|x| > 1 for asin, acos, atanh;
 * x < 1 for acosh), atanh(±1) = ±inf; differentiable with Torch's
 * formulas (asin' = rsqrt(1 - x²): inf at ±1). */
KILN_API kiln_tensor *kiln_asin(kiln_tensor *t);       /* asin */
KILN_API kiln_tensor *kiln_acos(kiln_tensor *t);       /* acos */
KILN_API kiln_tensor *kiln_atan(kiln_tensor *t);       /* atan */
KILN_API kiln_tensor *kiln_sinh(kiln_tensor *t);       /* sinh */
KILN_API kiln_tensor *kiln_cosh(kiln_tensor *t);       /* cosh */
KILN_API kiln_tensor *kiln_asinh(kiln_tensor *t);      /* asinh */
KILN_API kiln_tensor *kiln_acosh(kiln_tensor *t);      /* acosh */
KILN_API kiln_tensor *kiln_atanh(kiln_tensor *t);      /* atanh */
KILN_API kiln_tensor *kiln_floor(kiln_tensor *t);      /* floor (integers unchanged) */
KILN_API kiln_tensor *kiln_ceil(kiln_tensor *t);       /* ceil */
KILN_API kiln_tensor *kiln_round(kiln_tensor *t);      /* round half to even */
KILN_API kiln_tensor *kiln_trunc(kiln_tensor *t);      /* trunc */
KILN_API kiln_tensor *kiln_logical_not(kiln_tensor *t);/* logical_not → BOOL */

/** Binary functions of two broadcastable tensors. */
KILN_API kiln_tensor *kiln_add(kiln_tensor *a, kiln_tensor *b);     /* a + b */
KILN_API kiln_tensor *kiln_sub(kiln_tensor *a, kiln_tensor *b);     /* a - b (error for BOOL) */
KILN_API kiln_tensor *kiln_mul(kiln_tensor *a, kiln_tensor *b);     /* a * b */
KILN_API kiln_tensor *kiln_div(kiln_tensor *a, kiln_tensor *b);     /* true division: float result */
KILN_API kiln_tensor *kiln_pow(kiln_tensor *a, kiln_tensor *b);     /* a ** b */
KILN_API kiln_tensor *kiln_maximum(kiln_tensor *a, kiln_tensor *b); /* max, NaN propagates */
KILN_API kiln_tensor *kiln_minimum(kiln_tensor *a, kiln_tensor *b); /* min, NaN propagates */
KILN_API kiln_tensor *kiln_fmod(kiln_tensor *a, kiln_tensor *b);    /* C fmod: sign of a (error for BOOL) */
KILN_API kiln_tensor *kiln_remainder(kiln_tensor *a, kiln_tensor *b);/* Python %: sign of b (error for BOOL) */
KILN_API kiln_tensor *kiln_atan2(kiln_tensor *a, kiln_tensor *b);   /* atan2(a, b), float */
KILN_API kiln_tensor *kiln_eq(kiln_tensor *a, kiln_tensor *b);      /* == → BOOL */
KILN_API kiln_tensor *kiln_ne(kiln_tensor *a, kiln_tensor *b);      /* != → BOOL */
KILN_API kiln_tensor *kiln_lt(kiln_tensor *a, kiln_tensor *b);      /* <  → BOOL */
KILN_API kiln_tensor *kiln_le(kiln_tensor *a, kiln_tensor *b);      /* <= → BOOL */
KILN_API kiln_tensor *kiln_gt(kiln_tensor *a, kiln_tensor *b);      /* >  → BOOL */
KILN_API kiln_tensor *kiln_ge(kiln_tensor *a, kiln_tensor *b);      /* >= → BOOL */
KILN_API kiln_tensor *kiln_logical_and(kiln_tensor *a, kiln_tensor *b); /* → BOOL */
KILN_API kiln_tensor *kiln_logical_or(kiln_tensor *a, kiln_tensor *b);  /* → BOOL */
KILN_API kiln_tensor *kiln_logical_xor(kiln_tensor *a, kiln_tensor *b); /* → BOOL */

/** Scalar forms: `t op s`, with s treated as a Python number. */
KILN_API kiln_tensor *kiln_add_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_sub_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_mul_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_div_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_pow_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_maximum_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_minimum_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_eq_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_ne_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_lt_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_le_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_gt_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_ge_scalar(kiln_tensor *t, double s);

/** cond ? a : b, broadcasting all three; cond is BOOL or U8 (nonzero =
 *  true); result dtype promotes a and b. Torch: where. */
KILN_API kiln_tensor *kiln_where(kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b);
/** min(max(t, lo), hi), same sizes, keeps t's dtype; BOOL is KILN_ERR_DTYPE.
 *  A NaN bound is no bound, as is -INFINITY for lo and INFINITY for hi. On
 *  integer dtypes a bound is truncated toward zero and saturated to the
 *  dtype's range (clamp(I8 [-6, 0, 6], -1000, 5) = [-6, 0, 5];
 *  clamp(I8, 1000, INFINITY) = all 127): Torch's value, stored in t's
 *  dtype. Torch: clamp (Torch 1.13 promotes an integer tensor with a float
 *  bound to float and returns NaN for a NaN bound). New reference. */
KILN_API kiln_tensor *kiln_clamp(kiln_tensor *t, double lo, double hi);
/** start + weight × (end − start), broadcasting all three, as Torch's
 *  two-sided formula (|w| < 0.5: start + w(end − start), else end −
 *  (end − start)(1 − w): exact at w = 0 and 1); F16/BF16 computed in F32.
 *  start float; end and weight of start's dtype (else KILN_ERR_DTYPE).
 *  Differentiable in all three. Torch: lerp. New reference. */
KILN_API kiln_tensor *kiln_lerp(kiln_tensor *start, kiln_tensor *end, kiln_tensor *weight);
/** kiln_lerp with a scalar weight. Torch: lerp(start, end, float). */
KILN_API kiln_tensor *kiln_lerp_scalar(kiln_tensor *start, kiln_tensor *end, double weight);

/** BOOL tests of t's elements, t's sizes, lazy (integer and bool tensors:
 *  isnan and isinf all false, isfinite all true). Torch: isnan, isinf,
 *  isfinite. New reference. */
KILN_API kiln_tensor *kiln_isnan(kiln_tensor *t);
KILN_API kiln_tensor *kiln_isinf(kiln_tensor *t);
KILN_API kiln_tensor *kiln_isfinite(kiln_tensor *t);
/** BOOL: a == b, or |a − b| finite and <= atol + |rtol × b|, or (with
 *  equal_nan) both NaN; broadcasting; equal infinities are close. a and b
 *  of one dtype (KILN_ERR_DTYPE), rtol, atol >= 0 (KILN_ERR_ARG); bool
 *  tensors compare with ==. Torch: isclose. New reference. */
KILN_API kiln_tensor *kiln_isclose(kiln_tensor *a, kiln_tensor *b, double rtol, double atol, bool equal_nan);
/** *out = every element of kiln_isclose(a, b, ...) is true (forces; true
 *  for empty). Returns KILN_OK, or kiln_isclose's errors, KILN_ERR_ARG for
 *  a NULL out, or the forcing's error, with *out untouched. Torch:
 *  allclose (rtol 1e-5, atol 1e-8 by default there). */
KILN_API int kiln_allclose(kiln_tensor *a, kiln_tensor *b, double rtol, double atol, bool equal_nan, bool *out);
/** *out = a and b have the same sizes and equal elements (compared after
 *  type promotion; NaN is never equal; no broadcasting: other sizes give
 *  false). Forces. KILN_OK, or KILN_ERR_ARG (NULL argument) or the
 *  forcing's error, with *out untouched. Torch: equal. */
KILN_API int kiln_equal(kiln_tensor *a, kiln_tensor *b, bool *out);

/* --------------------------------------------------- triangular masks */

/** Lower triangle of the matrices of t [..., R, C] (leading dims are a
 *  batch): element [..., i, j] is t's where j - i <= diagonal, else 0.
 *  diagonal 0 is the main diagonal, > 0 above it, < 0 below; any value is
 *  allowed. Keeps t's dtype (BOOL too) and sizes; t may be any view. Lazy
 *  and fusable: where(mask, t, 0) with the mask [R, C] built from aranges,
 *  so gradients flow through where's rule. Torch: torch.tril (which
 *  overflows at diagonal INT64_MAX; Kiln keeps the whole matrix there).
 *  Errors: t with fewer than 2 dims (KILN_ERR_SHAPE), NULL t. New
 *  reference (a new contiguous storage). */
KILN_API kiln_tensor *kiln_tril(kiln_tensor *t, int64_t diagonal);
/** Upper triangle: t's elements where j - i >= diagonal, else 0. As
 *  kiln_tril otherwise. Torch: torch.triu. */
KILN_API kiln_tensor *kiln_triu(kiln_tensor *t, int64_t diagonal);

/* ---------------------------------------------------- in-place arithmetic
 * Torch's in-place Tensor methods (t.add_(other), t.exp_(), ...): t = op(t,
 * ...) written back through t's view, lazily, like kiln_copy_ (every
 * tensor over t's storage sees it; ops recorded before do not). Each is the
 * out-of-place op above (same values, promotion and BOOL errors) followed
 * by a write into t that keeps t's dtype and sizes, as in Torch 1.13:
 *  - the out-of-place result dtype must be castable to t's dtype by Torch's
 *    can_cast: never float -> integer/BOOL, never integer -> BOOL; a lower
 *    or equal category is fine (i32.add_(i64 tensor) computes in i64 and
 *    stores i32). Otherwise KILN_ERR_DTYPE "kiln_div_: result type f32
 *    can't be cast to the desired output type i32 (t's dtype)": so div_,
 *    atan2_ and the float unary functions (exp_, sqrt_, ...) need a float
 *    t, and an integer t takes only integral scalars (add_scalar_(2.5) on
 *    i64 is an error);
 *  - tensor operands must broadcast to t's sizes without changing them
 *    (t [3] with other [2, 3] is KILN_ERR_SHAPE);
 *  - a t whose view repeats a storage element (a dim of size > 1 with
 *    stride 0) is KILN_ERR_ARG, as for kiln_copy_;
 *  - a NULL tensor argument is KILN_ERR_ARG.
 * Operands are read as they were before the write, so an operand that
 * aliases t (kiln_add_(x, kiln_t(x))) reads the old values. Gradients flow
 * through kiln_grad as through kiln_copy_ of the out-of-place result.
 * Tensor arguments are borrowed; nothing is returned but the status
 * (KILN_OK, or the error's own status with t unchanged and nothing
 * recorded). */

/** t = t op other, other broadcast to t's sizes. Torch: add_, sub_ (BOOL
 *  is an error), mul_, div_ (true division: float t only), pow_, fmod_ and
 *  remainder_ (BOOL is an error; integer by zero gives 0 where Torch
 *  raises), atan2_ (float t only). */
KILN_API int kiln_add_(kiln_tensor *t, kiln_tensor *other);
KILN_API int kiln_sub_(kiln_tensor *t, kiln_tensor *other);
KILN_API int kiln_mul_(kiln_tensor *t, kiln_tensor *other);
KILN_API int kiln_div_(kiln_tensor *t, kiln_tensor *other);
KILN_API int kiln_pow_(kiln_tensor *t, kiln_tensor *other);
KILN_API int kiln_fmod_(kiln_tensor *t, kiln_tensor *other);
KILN_API int kiln_remainder_(kiln_tensor *t, kiln_tensor *other);
KILN_API int kiln_atan2_(kiln_tensor *t, kiln_tensor *other);
/** t = t op value, value a Python number as for the *_scalar functions
 *  (integral: int, else float). Torch: add_, sub_, mul_, div_, pow_ with a
 *  number. */
KILN_API int kiln_add_scalar_(kiln_tensor *t, double value);
KILN_API int kiln_sub_scalar_(kiln_tensor *t, double value);
KILN_API int kiln_mul_scalar_(kiln_tensor *t, double value);
KILN_API int kiln_div_scalar_(kiln_tensor *t, double value);
KILN_API int kiln_pow_scalar_(kiln_tensor *t, double value);
/** t += value * t1 * t2 (addcmul_) or t += value * t1 / t2 (addcdiv_), t1
 *  and t2 broadcast to t's sizes; computed in the promoted dtype of t, t1
 *  and t2 (value is cast to it: truncated toward zero for integers, so
 *  i32.addcmul_(a, b, 0.5) adds 0, as in Torch; a non-finite value is then
 *  KILN_ERR_ARG). addcmul_ of BOOL, and addcdiv_ with both t1 and t2 of
 *  integer or BOOL dtype, are KILN_ERR_DTYPE, as in Torch. Torch: addcmul_,
 *  addcdiv_. */
KILN_API int kiln_addcmul_(kiln_tensor *t, kiln_tensor *t1, kiln_tensor *t2, double value);
KILN_API int kiln_addcdiv_(kiln_tensor *t, kiln_tensor *t1, kiln_tensor *t2, double value);
/** t = kiln_clamp(t, lo, hi), with kiln_clamp's bound rules (a NaN or
 *  infinite bound is no bound; integer dtypes truncate and saturate the
 *  bounds; BOOL is KILN_ERR_DTYPE). Torch: clamp_ (Torch 1.13 instead
 *  rejects a float bound on an integer tensor). */
KILN_API int kiln_clamp_(kiln_tensor *t, double lo, double hi);
/** t = f(t) for the unary functions above of the same name (BOOL rules as
 *  there). The float functions (exp_ ... erf_) need a float t. Torch:
 *  neg_, abs_, sign_, exp_, ..., floor_, ceil_, round_, trunc_. */
KILN_API int kiln_neg_(kiln_tensor *t);
KILN_API int kiln_abs_(kiln_tensor *t);
KILN_API int kiln_sign_(kiln_tensor *t);
KILN_API int kiln_exp_(kiln_tensor *t);
KILN_API int kiln_exp2_(kiln_tensor *t);
KILN_API int kiln_log_(kiln_tensor *t);
KILN_API int kiln_log2_(kiln_tensor *t);
KILN_API int kiln_log1p_(kiln_tensor *t);
KILN_API int kiln_expm1_(kiln_tensor *t);
KILN_API int kiln_sqrt_(kiln_tensor *t);
KILN_API int kiln_rsqrt_(kiln_tensor *t);
KILN_API int kiln_reciprocal_(kiln_tensor *t);
KILN_API int kiln_sin_(kiln_tensor *t);
KILN_API int kiln_cos_(kiln_tensor *t);
KILN_API int kiln_tan_(kiln_tensor *t);
KILN_API int kiln_tanh_(kiln_tensor *t);
KILN_API int kiln_sigmoid_(kiln_tensor *t);
KILN_API int kiln_relu_(kiln_tensor *t);
KILN_API int kiln_erf_(kiln_tensor *t);
KILN_API int kiln_floor_(kiln_tensor *t);
KILN_API int kiln_ceil_(kiln_tensor *t);
KILN_API int kiln_round_(kiln_tensor *t);
KILN_API int kiln_trunc_(kiln_tensor *t);
/** t = asin(t) ... atanh(t) (float t). Torch: asin_, acos_, atan_, sinh_,
 *  cosh_, asinh_, acosh_, atanh_. */
KILN_API int kiln_asin_(kiln_tensor *t);
KILN_API int kiln_acos_(kiln_tensor *t);
KILN_API int kiln_atan_(kiln_tensor *t);
KILN_API int kiln_sinh_(kiln_tensor *t);
KILN_API int kiln_cosh_(kiln_tensor *t);
KILN_API int kiln_asinh_(kiln_tensor *t);
KILN_API int kiln_acosh_(kiln_tensor *t);
KILN_API int kiln_atanh_(kiln_tensor *t);

/* ------------------------------------------------------------ reductions
 * `dims` [ndims] lists the dims to reduce (negative allowed, no repeats);
 * ndims 0 reduces all. keepdim keeps them as size 1. Lazy.
 * Result dtypes as in Torch: sum/prod of BOOL or integers give I64; mean
 * needs a float dtype (KILN_ERR_DTYPE otherwise); amax/amin keep the dtype;
 * all/any give BOOL. An empty reduction gives the identity (sum 0, prod 1);
 * amax/amin of an empty dim are an error. */
KILN_API kiln_tensor *kiln_sum(kiln_tensor *t, int ndims, const int *dims, bool keepdim);
KILN_API kiln_tensor *kiln_mean(kiln_tensor *t, int ndims, const int *dims, bool keepdim);
KILN_API kiln_tensor *kiln_prod(kiln_tensor *t, int ndims, const int *dims, bool keepdim);
KILN_API kiln_tensor *kiln_amax(kiln_tensor *t, int ndims, const int *dims, bool keepdim);
KILN_API kiln_tensor *kiln_amin(kiln_tensor *t, int ndims, const int *dims, bool keepdim);
KILN_API kiln_tensor *kiln_all(kiln_tensor *t, int ndims, const int *dims, bool keepdim);
KILN_API kiln_tensor *kiln_any(kiln_tensor *t, int ndims, const int *dims, bool keepdim);
/** Index (I64) of the first maximum along dim. Torch: argmax(dim).
 *  Error for an empty dim. */
KILN_API kiln_tensor *kiln_argmax(kiln_tensor *t, int dim, bool keepdim);
/** Index (I64) of the first minimum along dim. Torch: argmin(dim). */
KILN_API kiln_tensor *kiln_argmin(kiln_tensor *t, int dim, bool keepdim);
/** log(sum(exp(t))) over dims, computed stably: the maximum m is
 *  subtracted before exp (an infinite m is replaced by 0, so a row of -inf
 *  gives -inf and one holding +inf gives +inf; NaN propagates). Float
 *  inputs keep their dtype (F16/BF16 compute in F32); BOOL and integer
 *  inputs give the default float dtype, as in Torch. An empty reduction
 *  gives -inf. Over the last dims it runs as one kernel. New reference
 *  (lazy) or NULL: KILN_ERR_ARG for bad dims. Torch: logsumexp(dims,
 *  keepdim). */
KILN_API kiln_tensor *kiln_logsumexp(kiln_tensor *t, int ndims, const int *dims, bool keepdim);
/** Variance over dims: sum((t - mean)^2) / max(N - correction, 0), N the
 *  number of elements reduced (correction 1: the unbiased estimate, 0: the
 *  population variance; N - correction <= 0 gives inf, or NaN when every
 *  deviation is 0, as Torch). `correction` comes after the dims and before
 *  keepdim, as in torch.var(input, dim, correction=, keepdim=). Two-pass
 *  (the mean, then squared deviations; F64 accumulation); one kernel over
 *  the last dims. Float dtypes only (KILN_ERR_DTYPE for BOOL/integers, as
 *  Torch); the result keeps t's dtype (F16/BF16 compute in F32). An empty
 *  reduction gives NaN. New reference (lazy) or NULL: KILN_ERR_ARG for bad
 *  dims. Torch: var(dim, correction=, keepdim=). */
KILN_API kiln_tensor *kiln_var(kiln_tensor *t, int ndims, const int *dims, int correction, bool keepdim);
/** sqrt(kiln_var(t, ndims, dims, correction, keepdim)); same dtypes and
 *  errors. Torch: std(dim, correction=, keepdim=). */
KILN_API kiln_tensor *kiln_std(kiln_tensor *t, int ndims, const int *dims, int correction, bool keepdim);
/** Vector p-norm over dims: p = INFINITY: max |t|; -INFINITY: min |t|;
 *  0: the count of nonzero elements; 1: sum |t|; 2: sqrt(sum t^2); any
 *  other p: (sum |t|^p)^(1/p). Computed in F64 (no overflow of squares of
 *  large F32 values) and rounded to t's dtype. Float dtypes only
 *  (KILN_ERR_DTYPE otherwise, as Torch). KILN_ERR_ARG for a NaN p or bad
 *  dims; KILN_ERR_SHAPE for an inf/-inf norm of an empty reduction (other
 *  p give 0). New reference (lazy) or NULL. Torch: norm(p, dim, keepdim),
 *  linalg.vector_norm. */
KILN_API kiln_tensor *kiln_norm(kiln_tensor *t, double p, int ndims, const int *dims, bool keepdim);
/** Cumulative sum along dim: result[..., i, ...] = sum of t[..., 0..i, ...]
 *  along dim; t's sizes, contiguous. BOOL and integer inputs give I64
 *  (exact, wrapping as int64); floats keep their dtype and accumulate in
 *  F64. A 0-d t (dim 0 or -1) gives a copy. One sequential loop over dim
 *  per position of the other dims (in parallel over them); elementwise
 *  producers of t fuse into it. New reference (lazy) or NULL:
 *  KILN_ERR_ARG for an out-of-range dim. Torch: cumsum(dim). */
KILN_API kiln_tensor *kiln_cumsum(kiln_tensor *t, int dim);
/** Cumulative product along dim; as kiln_cumsum (integers wrap as int64).
 *  Torch: cumprod(dim). */
KILN_API kiln_tensor *kiln_cumprod(kiln_tensor *t, int dim);

/* ------------------------------------------------------ linear algebra
 * Products of F32/F64 operands run in OpenBLAS (sgemm/dgemm, gemv for a
 * vector side) on the operands' views: a transposed view is a transpose
 * flag and a leading dimension, never a copy. Integer, F16 and BF16
 * products run in a generated kernel (F16/BF16 accumulate in F32,
 * integers wrap like Torch's). Operand dtypes promote as for kiln_add;
 * BOOL operands are KILN_ERR_DTYPE. The product is one graph node: its
 * elementwise readers (bias, activation, scale) fuse into one kernel.
 * Products of KILN_CUDA operands run in the generated kernel on the device
 * for every dtype (F64 accumulates in F64); operands on different
 * devices are KILN_ERR_DEVICE.
 * All return a new reference (lazy) or NULL: KILN_ERR_SHAPE for mismatched
 * sizes (the message gives both), KILN_ERR_ARG for NULL operands. */

/** NumPy matmul: a [..., M, K] @ b [..., K, N] -> [batch..., M, N] with the
 *  batch dims broadcast; a 1-D a is a row [1, K] and a 1-D b a column
 *  [K, 1], and that dim is removed from the result (1-D @ 1-D gives a
 *  0-d tensor). 0-d operands are KILN_ERR_SHAPE. Torch: matmul. */
KILN_API kiln_tensor *kiln_matmul(kiln_tensor *a, kiln_tensor *b);
/** a [M, K] @ b [K, N] -> [M, N]; both exactly 2-D. Torch: mm. */
KILN_API kiln_tensor *kiln_mm(kiln_tensor *a, kiln_tensor *b);
/** a [B, M, K] @ b [B, K, N] -> [B, M, N]; both 3-D with equal B (no
 *  broadcasting). Torch: bmm. */
KILN_API kiln_tensor *kiln_bmm(kiln_tensor *a, kiln_tensor *b);
/** a [M, K] @ x [K] -> [M]. Torch: mv. */
KILN_API kiln_tensor *kiln_mv(kiln_tensor *a, kiln_tensor *x);
/** Inner product of two 1-D tensors of equal size -> 0-d. Torch: dot. */
KILN_API kiln_tensor *kiln_dot(kiln_tensor *a, kiln_tensor *b);
/** Einstein summation over operands [n] (1 to 64), Torch's semantics: the
 *  equation names each operand's dims with letters a-z, A-Z ("ij,jk->ik";
 *  spaces ignored), "..." for any number of broadcast dims; "->" gives the
 *  output's subscripts, else they are "..." then the letters used once,
 *  A-Z before a-z. A letter repeated in one operand takes its diagonal;
 *  letters missing from the output are summed; sizes per letter agree or
 *  are 1 (broadcast). Each contraction of two operands runs as a batched
 *  matmul (left to right), so dtypes promote as kiln_matmul's; lazy and
 *  differentiable; the result may be a view of a single operand. Errors:
 *  KILN_ERR_ARG (a bad equation, or terms and operands that do not match,
 *  the message quotes it), KILN_ERR_SHAPE (subscripts and dims, or sizes,
 *  that disagree). Torch: einsum. New reference. */
KILN_API kiln_tensor *kiln_einsum(const char *equation, kiln_tensor *const *operands, int n);
/** Outer product of 1-D a [n] and b [m] -> [n, m] (a[i] × b[j]), dtype
 *  promoted; other ranks are KILN_ERR_SHAPE. Lazy, one elementwise kernel;
 *  differentiable. Torch: outer (ger). */
KILN_API kiln_tensor *kiln_outer(kiln_tensor *a, kiln_tensor *b);
/** beta × bias + alpha × (a [M, K] @ b [K, N]) -> [M, N]; bias broadcasts
 *  to [M, N] (e.g. [N] or [M, 1]). beta = 0 ignores bias's values (NaN
 *  included) but still checks its sizes. Composed lazily: the scale and
 *  bias fuse into one kernel after the product. Torch: addmm. */
KILN_API kiln_tensor *kiln_addmm(kiln_tensor *bias, kiln_tensor *a, kiln_tensor *b, double beta, double alpha);

/* ---------------------------------------------- neural-network helpers
 * Composed from graph ops (row reductions and elementwise ops) that the
 * fusion pass turns into one kernel per block of rows, as fast as a
 * hand-written kernel. Float dtypes only: BOOL and integer inputs are
 * KILN_ERR_DTYPE, as in Torch (convert with kiln_to_dtype). F16/BF16
 * compute in F32 and round once. Lazy; new reference or NULL. */

/** exp(t - m) / sum(exp(t - m)) along dim, m the maximum along dim (so no
 *  finite input overflows; a slice of all -inf gives NaN, as Torch). Same
 *  sizes and dtype as t, contiguous. Over the last dim: one kernel. Over
 *  another dim the maximum and the sum are column reductions of their own
 *  (a few streaming kernels rather than one strided one). An empty t
 *  gives an empty copy. Errors: KILN_ERR_ARG for a bad dim,
 *  KILN_ERR_DTYPE for non-float t. Torch: softmax(dim). */
KILN_API kiln_tensor *kiln_softmax(kiln_tensor *t, int dim);
/** (t - m) - log(sum(exp(t - m))) along dim: log(softmax) without its
 *  underflow. Layout, kernels and errors as kiln_softmax. Torch:
 *  log_softmax(dim). */
KILN_API kiln_tensor *kiln_log_softmax(kiln_tensor *t, int dim);
/** Layer normalization over the last normalized_ndim dims of t:
 *  (t - mean) / sqrt(var + eps) * weight + bias, var the biased variance
 *  (divided by the count) computed in two passes. weight and bias may be
 *  NULL (no scale / no shift); when given, their sizes are exactly the
 *  last normalized_ndim sizes of t (t [..., N1, N2] with normalized_ndim
 *  2: weight [N1, N2]). Result: t's sizes, contiguous, dtype t's promoted
 *  with weight's and bias's (a float dtype). One kernel. Errors:
 *  KILN_ERR_ARG for normalized_ndim outside [1, ndim], a negative or
 *  non-finite eps, or a NULL t; KILN_ERR_SHAPE when weight or bias have
 *  other sizes (the message gives both); KILN_ERR_DTYPE for non-float t.
 *  Borrows weight and bias. Torch: nn.functional.layer_norm(t,
 *  t.shape[-normalized_ndim:], weight, bias, eps). */
KILN_API kiln_tensor *kiln_layer_norm(kiln_tensor *t, int normalized_ndim, kiln_tensor *weight, kiln_tensor *bias,
                                      double eps);

/* ---------------------------------------------------------- convolution
 * nd is the number of spatial dims (1, 2 or 3); stride, padding, dilation
 * and output_padding have nd entries each, or are NULL for the defaults
 * (1, 0, 1, 0). Inputs are [N, C, *spatial] or, unbatched, [C, *spatial]
 * (the result then has no batch dim either). Input, weight and bias have
 * one float dtype (F16/BF16 compute in F32). Lazy: the windows are a view
 * of the (zero-padded) input, gathered into columns by one generated
 * kernel (im2col), multiplied by the weight with OpenBLAS (one GEMM per
 * group; F16/BF16 by a generated kernel), and the bias with any
 * elementwise op applied to the result (an activation) is one epilogue
 * kernel. Differentiable in input, weight and bias (kiln_grad). Errors:
 * KILN_ERR_ARG for nd outside 1..3, groups < 1, a stride or dilation < 1,
 * negative padding, an output_padding not smaller than stride or
 * dilation; KILN_ERR_SHAPE for inputs of the wrong rank, channels that do
 * not match the weight or are not divisible by groups, a bias that is
 * not [out channels], a (dilated) kernel larger than the padded input;
 * KILN_ERR_DTYPE for integer inputs or mixed dtypes. Result contiguous
 * when bias is given (else a permuted view of the GEMM's output). */

/** input [N, C, *S], weight [O, C/groups, *K], bias [O] or NULL ->
 *  [N, O, *Out], Out = (S + 2 padding - dilation (K - 1) - 1) / stride + 1
 *  (floor). Output channel o of group g = o / (O/groups) sees input
 *  channels g·C/groups .. (g+1)·C/groups - 1 (groups = C = O: depthwise).
 *  Torch: nn.functional.conv1d/conv2d/conv3d. */
KILN_API kiln_tensor *kiln_conv(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, int nd,
                                const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                                int64_t groups);
/** The transpose (gradient w.r.t. its input) of kiln_conv: input
 *  [N, Ci, *S], weight [Ci, Co/groups, *K], bias [Co] or NULL ->
 *  [N, Co, *Out], Out = (S - 1) stride - 2 padding + dilation (K - 1) +
 *  output_padding + 1. The columns W^T·x (one GEMM per group) are added
 *  into the output through the windows of kiln_conv (one dense strided
 *  add per kernel offset: col2im), the padding cropped. Torch: nn.functional.conv_transpose1d/
 *  2d/3d (note the parameter order, Torch's: output_padding, groups,
 *  dilation). */
KILN_API kiln_tensor *kiln_conv_transpose(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, int nd,
                                          const int64_t *stride, const int64_t *padding,
                                          const int64_t *output_padding, int64_t groups, const int64_t *dilation);

/* ------------------------------------------------------------- sorting
 * Torch 1.13's sorting ops (ops/sort.c). Order: by value; for floats NaN
 * is above +inf (first in descending order) and -0.0 equals 0.0; equal
 * elements keep their input order (every sort here is stable, also when
 * `stable` or `sorted` is false, which Torch allows to order differently).
 * Every dtype is accepted (BOOL, integers, F16, BF16, F32, F64; Torch 1.13
 * lacks some: topk, kthvalue and median on BOOL and F16, unique on F16).
 * dim may be negative; a 0-d t accepts dim 0 or -1 and gives 0-d results.
 * Indices are I64 positions along dim. Outputs are new references, lazy
 * (nothing is forced, except by kiln_unique): values are gathers of t, so
 * they fuse into their readers and kiln_grad passes their gradient back
 * to the selected elements of t (ties: to the element whose index is
 * returned). On error the function returns a negative kiln_status, sets
 * the thread's error and leaves every output untouched (the general rule
 * at the top of this file): KILN_ERR_ARG for a
 * NULL t (or the first error kept) or output pointer, an out-of-range dim
 * or k; KILN_ERR_SHAPE for a reduction over a dim of size 0 (Torch's
 * "Expected reduction dim to have non-zero size"). A reduction (max, min,
 * median, kthvalue, mode) gives t's sizes with dim of size 1 when keepdim,
 * else without dim. */

/** t sorted along dim: values (t's dtype) and indices (I64), both
 *  contiguous with t's sizes; values = gather(t, dim, indices). Ascending,
 *  or descending when `descending`. An empty t gives empty outputs. Torch:
 *  sort(dim, descending, stable). */
KILN_API int kiln_sort(kiln_tensor *t, int dim, bool descending, bool stable, kiln_tensor **values,
                       kiln_tensor **indices);
/** The indices of kiln_sort (I64, t's sizes); NULL on error. Torch:
 *  argsort(dim, descending, stable). */
KILN_API kiln_tensor *kiln_argsort(kiln_tensor *t, int dim, bool descending, bool stable);
/** The k largest (or, when !largest, smallest) elements along dim, in
 *  sorted order (largest first / smallest first; NaN counts as largest),
 *  with their indices: t's sizes with dim of size k. k in [0, size of dim]
 *  (KILN_ERR_ARG otherwise; a 0-d t gives its element for k 0 or 1, as
 *  Torch). Torch: topk(k, dim, largest, sorted). */
KILN_API int kiln_topk(kiln_tensor *t, int64_t k, int dim, bool largest, bool sorted, kiln_tensor **values,
                       kiln_tensor **indices);
/** The maximum along dim and the index of its first occurrence; NaN is
 *  the maximum when a row holds one (its first NaN). Torch: max(dim,
 *  keepdim). */
KILN_API int kiln_max(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices);
/** The minimum along dim and the index of its first occurrence; NaN wins
 *  here too, as Torch's min(dim, keepdim). */
KILN_API int kiln_min(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices);
/** The lower median along dim (element (n-1)/2 of the row in ascending
 *  order) and its index; a float row holding NaN gives NaN and the index
 *  of its first NaN, as Torch's median(dim, keepdim) (not nanmedian).
 *  Among equal elements the index is the stable sort's; Torch's may be
 *  another position of the same value. */
KILN_API int kiln_median(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices);
/** The k-th smallest element along dim (k from 1; NaN sorts as largest)
 *  and its index in the stable ascending order. k in [1, size of dim]
 *  (KILN_ERR_ARG otherwise). Torch: kthvalue(k, dim, keepdim). */
KILN_API int kiln_kthvalue(kiln_tensor *t, int64_t k, int dim, bool keepdim, kiln_tensor **values,
                           kiln_tensor **indices);
/** The most frequent value along dim (ties: the smallest value; all NaNs
 *  count as one value, above every number) and the index of its last
 *  occurrence — Torch 1.13 CPU's mode(dim, keepdim) for rows of up to 16
 *  elements without NaN (beyond, Torch's index depends on its unstable
 *  std::sort; with NaN, so does its value). */
KILN_API int kiln_mode(kiln_tensor *t, int dim, bool keepdim, kiln_tensor **values, kiln_tensor **indices);
/** The distinct elements of t (flattened), ascending (also when !sorted,
 *  which Torch allows to leave unordered), as values [u] of t's dtype;
 *  elements equal as in kiln_sort are one value (-0.0 and 0.0 are one;
 *  all NaNs are one, last — Torch 1.13's CPU result for NaN is
 *  unspecified). When return_inverse, *inverse (I64, t's sizes) holds for
 *  each element its position in values; when return_counts, *counts (I64
 *  [u]) how often each value occurs. inverse/counts may be NULL when not
 *  requested (and are set to NULL then). Forces t (u depends on the
 *  data); values stay a lazy gather of t. KILN_ERR_ARG for a NULL values,
 *  or a NULL inverse/counts that was requested. Torch: unique(sorted,
 *  return_inverse, return_counts) without dim. */
KILN_API int kiln_unique(kiln_tensor *t, bool sorted, bool return_inverse, bool return_counts, kiln_tensor **values,
                         kiln_tensor **inverse, kiln_tensor **counts);

/* ------------------------------------------------------------- indexing
 * Index tensors hold 0-based indices, I64 or I32 (other dtypes:
 * KILN_ERR_DTYPE; kiln_scatter_add_ and kiln_index_put_: I64 only, as
 * Torch). The index tensor is forced when the op is called and
 * every value is checked: an index outside [0, size) gives KILN_ERR_INDEX
 * with a message such as "kiln_gather: index 7 is out of range for dim 1 of
 * size 5", nothing is recorded and the target is unchanged. Negative
 * indices follow PyTorch per op: kiln_index_fill_ and kiln_index_put_
 * wrap them (-1 is the last), every other op rejects them. The values of t and src stay lazy.
 * In-place ops (ending in `_`) write through t's view like kiln_copy_:
 * every tensor over t's storage sees the write, ops recorded earlier do
 * not; a t whose view repeats a storage element (a dim of size > 1 with
 * stride 0) is KILN_ERR_ARG, as in PyTorch; they return KILN_OK or a negative kiln_status. Functions returning a
 * tensor return a new reference (contiguous) or NULL. A NULL argument gives
 * KILN_ERR_ARG (or keeps the first error); a bad dim KILN_ERR_ARG; sizes
 * that do not fit KILN_ERR_SHAPE. A 0-d t has no dim to index
 * (KILN_ERR_SHAPE), except for kiln_scatter_add_ (Torch's rule). src of
 * another dtype is converted to t's dtype, except by kiln_scatter_add_
 * and kiln_index_put_ (KILN_ERR_DTYPE, as in Torch). */

/** t [..., s_dim, ...] and a 1-D index [n] -> [..., n, ...]: result slice i
 *  along dim is t's slice index[i]; t's dtype. Torch: index_select
 *  (Torch7: index). */
KILN_API kiln_tensor *kiln_index_select(kiln_tensor *t, int dim, kiln_tensor *index);
/** For each i, t's slice index[i] along dim = src's slice i. index is 1-D
 *  [n]; src has t's sizes with dim replaced by n. With duplicate indices
 *  the last write wins. Torch: index_copy_ (Torch7: indexCopy). */
KILN_API int kiln_index_copy_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src);
/** As kiln_index_copy_ but adds: t's slice index[i] += src's slice i;
 *  duplicate indices accumulate, in order of i (integers wrap, BOOL ors).
 *  Torch: index_add_ (Torch7: indexAdd). */
KILN_API int kiln_index_add_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src);
/** Fills t's slices index[i] along dim with value (converted to t's dtype
 *  as kiln_fill_ does). index is 1-D; negative indices count from the end.
 *  Torch: index_fill_ (Torch7: indexFill). */
KILN_API int kiln_index_fill_(kiln_tensor *t, int dim, kiln_tensor *index, double value);
/** out[i][j][k] = t[index[i][j][k]][j][k] for dim 0 (likewise for other
 *  dims). index has t's number of dims and index.size(d) <= t.size(d) for
 *  d != dim; the result has index's sizes and t's dtype. Lazy: a
 *  generated kernel that fuses with its readers (t is materialized).
 *  Torch: gather. */
KILN_API kiln_tensor *kiln_gather(kiln_tensor *t, int dim, kiln_tensor *index);
/** t[index[i][j][k]][j][k] = src[i][j][k] for dim 0 (likewise for other
 *  dims), for every element of index in row-major order (with duplicate
 *  indices the last write wins). index, t and src have the same number of
 *  dims; index.size(d) <= src.size(d) for every d and <= t.size(d) for
 *  d != dim. Torch: scatter_(dim, index, src). */
KILN_API int kiln_scatter_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src);
/** kiln_scatter_ with every src element equal to value (converted to t's
 *  dtype). Torch: scatter_(dim, index, value). */
KILN_API int kiln_scatter_value_(kiln_tensor *t, int dim, kiln_tensor *index, double value);
/** t[index[i][j]][j] += src[i][j] for dim 0 (likewise for other dims),
 *  for every element of index in row-major order: duplicate indices
 *  accumulate, in that order (integers wrap, BOOL ors). index is I64
 *  (KILN_ERR_DTYPE otherwise, as in Torch: no I32) and src has t's dtype
 *  (KILN_ERR_DTYPE: Torch does not convert here); index, t and src have
 *  the same number of dims (a 0-d tensor counts as 1-d of size 1), and
 *  index.size(d) <= src.size(d) for every d and <= t.size(d) for d != dim
 *  (KILN_ERR_SHAPE). An empty index writes nothing and skips the size
 *  checks, as in Torch. Indices are forced and checked at the call:
 *  negative or >= t.size(dim) is KILN_ERR_INDEX and nothing is written. t
 *  may be any view (transposed, sliced with a step): the write goes through
 *  it like kiln_copy_. Lazy: a scatter node reading t's current version;
 *  gradients flow to t (unchanged) and to src (a gather of the gradient).
 *  Torch: Tensor.scatter_add_(dim, index, src). */
KILN_API int kiln_scatter_add_(kiln_tensor *t, int dim, kiln_tensor *index, kiln_tensor *src);
/** t[indices[0][b], ..., indices[n-1][b], ...] = values[b, ...] (or += when
 *  accumulate) for each element b of the index tensors broadcast together
 *  (sizes B), indexing t's first n = n_indices dims; values broadcasts to
 *  the indexed sizes B + t.sizes[n:] and has t's dtype (KILN_ERR_DTYPE).
 *  Indices are I64 (other integer dtypes: KILN_ERR_DTYPE), or BOOL/U8
 *  masks as in Torch: a k-d mask stands for the k index tensors of its
 *  nonzero() and must have the sizes of the k dims of t it indexes
 *  (KILN_ERR_SHAPE; a 0-d mask is KILN_ERR_UNSUPPORTED); negative values
 *  count from the end; outside [-size, size) is KILN_ERR_INDEX and nothing
 *  is written. accumulate false: with duplicate positions the last (row-
 *  major over B) wins, as kiln_scatter_; true: duplicates accumulate in
 *  order (integers wrap, BOOL ors). Errors: n_indices < 1 or NULL list
 *  (KILN_ERR_ARG), more indices than t has dims or sizes that do not
 *  broadcast (KILN_ERR_SHAPE). The indices (and masks) are forced; t and values stay
 *  lazy (accumulate: a scatter node; otherwise one fused where). t's view
 *  is written through like kiln_copy_ (a t whose first n dims cannot be
 *  merged into one is written through a lazy copy and copied back).
 *  Differences from Torch: an expanded t is KILN_ERR_ARG (Torch 1.13
 *  only warns); a 0-d mask is not supported.
 *  Torch: Tensor.index_put_(indices, values, accumulate). */
KILN_API int kiln_index_put_(kiln_tensor *t, int n_indices, kiln_tensor *const *indices, kiln_tensor *values,
                             bool accumulate);
/** Counts of each value of t: t is a 1-D integer tensor (U8, I8, I16,
 *  I32, I64; else KILN_ERR_DTYPE; not 1-D: KILN_ERR_SHAPE) of non-negative
 *  values (a negative one: KILN_ERR_ARG); the result [max(max(t) + 1,
 *  minlength)] has out[v] = number of elements equal to v, I64, or with
 *  weights (1-D, t's length, any dtype) the sum of their weights: F32 for
 *  F32 weights, else F64 (as Torch 1.13). An empty t gives I64 zeros
 *  [minlength], weights or not (as Torch). minlength < 0 is KILN_ERR_ARG.
 *  Forces t (the size depends on its values); the counts are a lazy
 *  scatter node. New reference. Torch: torch.bincount(t, weights,
 *  minlength). */
KILN_API kiln_tensor *kiln_bincount(kiln_tensor *t, kiln_tensor *weights, int64_t minlength);
/** Histogram of t's elements (any sizes, read row-major) in `bins` equal
 *  bins over [min, max]: result [bins] of t's dtype. Float dtypes only
 *  (KILN_ERR_DTYPE; Torch 1.13 on the CPU also rejects F16, which Kiln
 *  accepts). When min == max, t's min and max are used (this forces t);
 *  if they are equal too, [min - 1, max + 1]. The range must be finite and
 *  min < max, bins > 0 (KILN_ERR_ARG). The bin of x is
 *  trunc((x - min) * bins / (max - min)) computed in t's dtype, as Torch's
 *  CPU kernel does; x == max counts in the last bin; elements outside
 *  [min, max] are not counted; NaN elements count in bin 0, as in Torch
 *  1.13 (and, with min == max, make the data range NaN: KILN_ERR_ARG).
 *  Otherwise lazy: the bins are
 *  computed elementwise and accumulated by a scatter node, one graph.
 *  New reference. Torch: torch.histc(t, bins, min, max). */
KILN_API kiln_tensor *kiln_histc(kiln_tensor *t, int64_t bins, double min, double max);
/** The elements of t where mask is nonzero, in row-major order, as a 1-D
 *  tensor [k] of t's dtype. mask is BOOL or U8 (else KILN_ERR_DTYPE); t
 *  and mask broadcast together as in PyTorch, or (Torch7) have different
 *  sizes but the same element count and are walked row-major. Forces the
 *  mask (k depends on it); t's values stay lazy. Torch: masked_select
 *  (Torch7: maskedSelect). */
KILN_API kiln_tensor *kiln_masked_select(kiln_tensor *t, kiln_tensor *mask);
/** Where mask is nonzero, t's elements (row-major) take src's elements in
 *  row-major order: the k-th selected element gets src's k-th element.
 *  mask broadcasts to t's sizes or has t's element count; src needs at
 *  least as many elements as mask selects (KILN_ERR_SHAPE). Forces the
 *  mask. Torch: masked_scatter_ (Torch7: maskedCopy). */
KILN_API int kiln_masked_copy_(kiln_tensor *t, kiln_tensor *mask, kiln_tensor *src);
/** Sets t's elements where mask is nonzero to value. mask broadcasts to
 *  t's sizes or has t's element count. Fully lazy: one fused kernel.
 *  Torch: masked_fill_ (Torch7: maskedFill). */
KILN_API int kiln_masked_fill_(kiln_tensor *t, kiln_tensor *mask, double value);
/** The coordinates of t's nonzero elements (NaN counts as nonzero), one row
 *  per element in row-major order: I64 [n, dim(t)]. Forces t.
 *  Torch: nonzero. */
KILN_API kiln_tensor *kiln_nonzero(kiln_tensor *t);
/** t tiled reps[k] times along each dim: result sizes [s_k * reps[k]].
 *  ndim >= dim(t) (t gets leading size-1 dims), reps >= 0 (else
 *  KILN_ERR_ARG). Always a lazy copy. Each dim with a count other than 1
 *  takes two internal dims: more than KILN_MAX_DIMS of them in all is
 *  KILN_ERR_UNSUPPORTED. Torch: repeat (Torch7: repeatTensor). */
KILN_API kiln_tensor *kiln_repeat(kiln_tensor *t, int ndim, const int64_t *reps);
/** Concatenates ts [n] (n >= 1) along dim: sizes must match except at dim;
 *  1-D empty tensors are skipped as in Torch; the dtype promotes across
 *  all. Lazy: each input is written into its slice of a fresh result.
 *  Torch: cat. */
KILN_API kiln_tensor *kiln_cat(kiln_tensor *const *ts, int n, int dim);
/** Stacks ts [n] (n >= 1, all of equal sizes) along a new dim in
 *  [0, dim(t)] (negative counts from dim(t) + 1). Torch: stack. */
KILN_API kiln_tensor *kiln_stack(kiln_tensor *const *ts, int n, int dim);
/** Copy of t with the order of elements reversed along each of dims
 *  [ndims] (negative allowed; a dim listed twice is KILN_ERR_ARG; ndims 0:
 *  a plain copy). Lazy (one gather per flipped dim), differentiable. Torch:
 *  flip (a copy there too). */
KILN_API kiln_tensor *kiln_flip(kiln_tensor *t, int ndims, const int *dims);
/** Copy of t with elements shifted by shifts[i] (negative: backwards,
 *  any size: taken modulo) along dims[i], wrapping around; nshifts ==
 *  ndims, or ndims 0 and one shift: t is rolled as if flattened, then
 *  viewed back. Mismatched counts are KILN_ERR_ARG. Lazy (a cat of two
 *  slices per dim), differentiable. Torch: roll. */
KILN_API kiln_tensor *kiln_roll(kiln_tensor *t, int nshifts, const int64_t *shifts, int ndims, const int *dims);
/** I64 [..., C]: element [..., c] is 1 where index[...] == c, else 0.
 *  index I64 or I32 (else KILN_ERR_DTYPE); num_classes C >= 0, or -1 for
 *  max(index) + 1 (an empty index then is KILN_ERR_ARG). Forces index to
 *  check it: a negative value or one >= C is KILN_ERR_INDEX naming the
 *  value. Torch: nn.functional.one_hot. New reference. */
KILN_API kiln_tensor *kiln_one_hot(kiln_tensor *index, int64_t num_classes);

/* ----------------------------------------------- forcing, reading values */

/** Computes t's storage contents now. Returns KILN_OK or an error. */
KILN_API int kiln_realize(kiln_tensor *t);
/** Computes several tensors ts [n] in one schedule: shared work runs
 *  once, and elementwise results of the same sizes that read common inputs
 *  are written by one multi-output kernel (a+b and a*b: one loop reading a
 *  and b once). Returns KILN_OK or an error, as kiln_realize. */
KILN_API int kiln_realize_many(kiln_tensor *const *ts, int n);
/** Forces t and copies its elements in row-major order of its view, in its
 *  dtype, to dst. Error (KILN_ERR_ARG) if dst_bytes < numel × dtype size. */
KILN_API int kiln_read(kiln_tensor *t, void *dst, size_t dst_bytes);
/** The single element of a 1-element tensor (any sizes, any dtype) as a
 *  double (forces). NaN and an error otherwise: KILN_ERR_SHAPE for another
 *  element count — indistinguishable from a real NaN without checking
 *  kiln_last_status(); kiln_item_f64 returns the status. Torch: item(). */
KILN_API double kiln_item(kiln_tensor *t);
/** Element at `index` [dim()] (negative counts from the end; NULL for a
 *  0-d tensor) as a double (forces). NaN and an error (KILN_ERR_INDEX) when
 *  out of range; kiln_get_f64 returns the status. Torch: t[i][j]... */
KILN_API double kiln_get(kiln_tensor *t, const int64_t *index);
/** kiln_item with the status returned: KILN_OK and the element in *out, or
 *  a negative status with *out untouched — KILN_ERR_ARG (t or out NULL),
 *  KILN_ERR_SHAPE (numel != 1), or the forcing's error. A real NaN reads
 *  back as KILN_OK and NaN. Borrows t. Torch: item(). */
KILN_API int kiln_item_f64(kiln_tensor *t, double *out);
/** kiln_get with the status returned: KILN_OK and the element at `index`
 *  [dim()] in *out, or a negative status with *out untouched —
 *  KILN_ERR_ARG (t, out, or index for a tensor of dim() > 0, NULL),
 *  KILN_ERR_INDEX (an index out of range), or the forcing's error. Borrows
 *  t. Torch: t[i][j]... */
KILN_API int kiln_get_f64(kiln_tensor *t, const int64_t *index, double *out);
/** Writes one element through the view (lazy, seen by every tensor sharing
 *  the storage). Torch: t[i][j] = v. */
KILN_API int kiln_set(kiln_tensor *t, const int64_t *index, double value);
/** Forces t and returns a pointer to element 0 of its view in host memory
 *  (borrowed: valid until the next in-place write to the storage or its
 *  release). Strided: index it with kiln_strides. NULL on error; a
 *  KILN_CUDA tensor is KILN_ERR_DEVICE (kiln_to_device(t, KILN_CPU) first). */
KILN_API const void *kiln_data(kiln_tensor *t);

/* ------------------------------------------------------------- printing */

/** Prints t (forcing it) in Torch7's format, ending with a line such as
 *  "[kiln.FloatTensor of size 4x5]". Returns KILN_OK or an error. */
KILN_API int kiln_print(kiln_tensor *t, FILE *f);
/** The text kiln_print writes, as a malloc'ed string the caller frees with
 *  free(); NULL on error. */
KILN_API char *kiln_to_string(kiln_tensor *t);

/* ---------------------------------------------------------------- files
 * Saving forces the tensors and writes the elements of each view in
 * row-major order (a transposed, strided or expanded view is written as
 * the values it shows), little-endian. Loading returns tensors with their
 * own, already realized storage. Round trips are bit-exact (NaN payloads,
 * -0.0, F16/BF16 bits). A file that cannot be opened, read or written, or
 * whose contents are truncated or malformed, gives KILN_ERR_IO with a
 * message naming the path and the problem; nothing is read past the end
 * of the file, and a failed save removes its partly written file. A NULL
 * path or tensor is KILN_ERR_ARG. */

/** Writes t to a NumPy .npy file (format 1.0, descr '|b1' '|u1' '|i1'
 *  '<i2' '<i4' '<i8' '<f2' '<f4' '<f8' for BOOL U8 I8 I16 I32 I64 F16 F32
 *  F64, fortran_order False, shape = t's sizes; 0-d and empty tensors
 *  included). BF16 has no NumPy dtype: KILN_ERR_DTYPE (convert with
 *  kiln_to_dtype(t, KILN_F32), which is exact, or use safetensors).
 *  Forces t. NumPy: numpy.save. */
KILN_API int kiln_save_npy(kiln_tensor *t, const char *path);
/** Reads a NumPy .npy file (format 1.0, 2.0 or 3.0) into a new tensor (new
 *  reference) of the file's shape and dtype; unsigned '<u2' loads as I32,
 *  '<u4' and '<u8' as I64 (every value exact). Big-endian files ('>f4') are
 *  byte-swapped; fortran_order True gives a column-major view (strides
 *  [1, d0, d0*d1, ...], no copy: kiln_contiguous makes it row-major).
 *  Errors: a uint64 value past INT64_MAX (KILN_ERR_DTYPE, naming the value
 *  and its element); dtypes Kiln lacks (complex, strings, objects,
 *  structured) KILN_ERR_DTYPE; more than KILN_MAX_DIMS dims
 *  KILN_ERR_UNSUPPORTED; a bad magic, version, header or size
 *  KILN_ERR_IO. Bytes after the data are ignored, as NumPy does.
 *  NumPy: numpy.load. */
KILN_API kiln_tensor *kiln_load_npy(const char *path);

/** Writes n named tensors to a safetensors file. names [n] are distinct,
 *  non-NULL, valid UTF-8 and not "__metadata__" (else KILN_ERR_ARG, nothing
 *  written); ts [n] may be any views of any dtype (dtype strings BOOL U8
 *  I8 I16 I32 I64 F16 BF16 F32 F64). The header lists the tensors in the
 *  given order; their data is laid out with larger elements first, so
 *  each is aligned to its element size. n may be 0. No __metadata__ is
 *  written. Forces every tensor. Borrows everything.
 *  Python: safetensors.torch.save_file. */
KILN_API int kiln_save_safetensors(const char *path, int n, const char *const *names, kiln_tensor *const *ts);
/** Reads every tensor of a safetensors file. On success *n_out is the
 *  tensor count, *names_out a malloc'ed array of n malloc'ed names and
 *  *tensors_out a malloc'ed array of n new references, in the header's
 *  order (both arrays NULL when n is 0). The caller owns all of it and
 *  frees it with kiln_safetensors_free; these tensors are NOT registered
 *  with an open scope (kiln_retain one to keep it past the free).
 *  "__metadata__" is accepted and ignored. The whole header is validated
 *  first: known dtype strings, integer shapes, data_offsets consistent with
 *  dtype x shape, tensors covering the data section exactly (no holes, no
 *  overlaps), header size against the file size (KILN_ERR_IO otherwise).
 *  A tensor of a dtype Kiln lacks (U16, U32, U64, F8_*, C64) is
 *  KILN_ERR_DTYPE, more than KILN_MAX_DIMS dims KILN_ERR_UNSUPPORTED. On
 *  error the outputs are untouched. Python: safetensors.torch.load_file. */
KILN_API int kiln_load_safetensors(const char *path, int *n_out, char ***names_out, kiln_tensor ***tensors_out);
/** Frees what kiln_load_safetensors returned: frees names[0..n) and
 *  releases tensors[0..n) (NULL entries are skipped), then frees both
 *  arrays. NULL-safe. */
KILN_API void kiln_safetensors_free(int n, char **names, kiln_tensor **tensors);
/** Reads the one tensor called `name` from a safetensors file (new
 *  reference, scope-tracked like any returned tensor), after validating
 *  the whole header as kiln_load_safetensors does; only that tensor's
 *  bytes are read. No such tensor: KILN_ERR_ARG. Python:
 *  safetensors.safe_open(path).get_tensor(name). */
KILN_API kiln_tensor *kiln_load_safetensor(const char *path, const char *name);

/* ---------------------------------------------------- element callbacks
 * Torch7's apply/map/map2. fn runs once per element of t's view, in
 * row-major order, on the calling thread; it gets the elements as doubles
 * (I64 beyond 2^53 rounds) and its result is stored into that element of t,
 * converted as a cast does (float → int truncates, → BOOL is != 0, F16/BF16
 * round to nearest even). Each store is visible to later visits: with an
 * overlapping view (stride 0, unfold) a later visit of the same storage
 * element sees the earlier result, and stateful callbacks (counters) run
 * in a defined order. The inputs (src, a, b) must have as many elements as
 * t (sizes may differ, as in Torch7) and are walked in row-major order of
 * their own views. An input over t's storage reads the values as updated
 * so far by this call (Torch7's loop over the same memory). They force t
 * and the inputs and are not lazy: the result is computed before they
 * return. Ops recorded before the call still see the old values; every
 * tensor over t's storage sees the new ones. fn must not write to t's or
 * the inputs' storages through Kiln. Errors: NULL tensor or fn
 * (KILN_ERR_ARG), element counts that differ (KILN_ERR_SHAPE); nothing is
 * written then, and fn is not called. */
typedef double (*kiln_fn1)(double x, void *ctx);
typedef double (*kiln_fn2)(double x, double y, void *ctx);
typedef double (*kiln_fn3)(double x, double y, double z, void *ctx);

/** t[i] = fn(t[i], ctx) for every element i. Torch7: apply. The callbacks
 *  run on the host: a KILN_CUDA t or input is KILN_ERR_DEVICE. */
KILN_API int kiln_apply_(kiln_tensor *t, kiln_fn1 fn, void *ctx);
/** t[i] = fn(t[i], src[i], ctx); src has t's element count. Torch7: map. */
KILN_API int kiln_map_(kiln_tensor *t, kiln_tensor *src, kiln_fn2 fn, void *ctx);
/** t[i] = fn(t[i], a[i], b[i], ctx); a and b have t's element count.
 *  Torch7: map2. */
KILN_API int kiln_map2_(kiln_tensor *t, kiln_tensor *a, kiln_tensor *b, kiln_fn3 fn, void *ctx);

/* ----------------------------------------------------------- execution */

/** Selects the backend for later forces: "llvm" (the CPU; the default).
 *  "cuda-emu": the CUDA code path on the CPU (docs/cuda.md) — every kernel
 *  printed as CUDA C, compiled by NVRTC for sm_80 and sm_90 with ptxas
 *  (a rejection fails the force with KILN_ERR_COMPILE), then that source
 *  built by the host C++ compiler (c++/g++ on PATH, or env KILN_CXX) and
 *  run on the CPU; KILN_ERR_UNSUPPORTED when NVRTC or the compiler is
 *  missing. For testing the GPU backend's code; slow to compile.
 *  "cuda": KILN_ERR_DEVICE "no CUDA device: <reason>" when libcuda cannot
 *  be loaded (env KILN_CUDA_LIB picks it), cuInit fails or there is no
 *  GPU; with one, KILN_CUDA tensors (kiln_to_device) run on device 0
 *  and CPU tensors keep running on LLVM. Under "cuda-emu", KILN_CUDA
 *  tensors live in emulated device memory. Other names: KILN_ERR_ARG. On error the selection is unchanged. When
 *  never called, the first force reads env KILN_BACKEND (unset: "llvm");
 *  if that selection fails, every force fails with its error (no silent
 *  CPU fall-back) until the program calls kiln_set_backend("llvm"). */
KILN_API int kiln_set_backend(const char *name);
/** Threads for kernels; n ≥ 1 (KILN_ERR_ARG otherwise). The default is env
 *  KILN_NUM_THREADS, else the number of CPUs; a KILN_NUM_THREADS that is
 *  not a positive integer is ignored with one line on stderr when the pool
 *  starts ("kiln: KILN_NUM_THREADS=abc is not a positive integer; using 8
 *  threads"), the only thing Kiln prints unless KILN_DEBUG asks. */
KILN_API int kiln_set_num_threads(int n);
/** The CPU the llvm backend compiles kernels for: env KILN_CPU (read once;
 *  unset, empty or "native": the host), its name copied into cpu[cpu_len]
 *  (NUL-terminated, truncated to fit; skipped when cpu is NULL or cpu_len
 *  is 0), the width in bits of its widest vector register in
 *  *vector_bits (512 with AVX-512, 256 with AVX2, 128 with SSE only) and
 *  its count of vector registers in *vector_regs (x86-64: 32 with
 *  AVX-512, else 16); either pointer may be NULL. Sets up LLVM's target
 *  on the first call. KILN_ERR_COMPILE when no kernel can be compiled
 *  for it ("KILN_CPU=foo: LLVM does not know this CPU ..."), the
 *  outputs untouched. */
KILN_API int kiln_cpu_target(char *cpu, size_t cpu_len, int *vector_bits, int *vector_regs);

/* ------------------------------------------- automatic differentiation
 * Reverse mode, as a transformation of the lazy graph: a gradient is an
 * ordinary lazy tensor whose nodes join the same DAG, so the backward pass
 * fuses with the forward pass's tail, with itself and with an optimizer's
 * update. No tape and no flags: kiln_grad finds what needs a gradient by
 * walking from `outputs` to `wrt`. Rules for views and in-place writes are
 * in docs/autodiff.md. */

/** Vector-Jacobian product: grads[j] = sum_i (d outputs[i] / d wrt[j])^T
 *  cotangents[i]. outputs [n_outputs] (n_outputs >= 1), cotangents
 *  [n_outputs] or NULL (then every output must have exactly one element
 *  and its cotangent is 1), wrt [n_wrt] (n_wrt >= 1), grads [n_wrt] (out).
 *  A cotangent has its output's sizes (any float dtype; converted to the
 *  output's). Each grads[j] is a new lazy tensor with wrt[j]'s sizes and
 *  dtype, contiguous, owned by the caller like any returned tensor (the
 *  open scope's, if any). A wrt that no output depends on gets zeros.
 *  Gradients are themselves differentiable (kiln_grad of a gradient gives
 *  second derivatives). Forcing values before or after the call changes
 *  no gradient: a forced value keeps the recipe it was computed by (see
 *  docs/autodiff.md for when that recipe is let go). Errors (grads
 *  is then untouched and nothing is recorded): KILN_ERR_ARG for NULL
 *  lists or tensors, n < 1, NULL cotangents with a non-scalar output, a
 *  wrt whose storage was written in place after an output read it ("wrt
 *  0 was modified by an in-place write after the outputs read it"), or a
 *  path through a forced value whose recipe was released;
 *  KILN_ERR_SHAPE for a cotangent whose sizes differ from its output's;
 *  KILN_ERR_DTYPE for a non-float output, cotangent or wrt;
 *  KILN_ERR_UNSUPPORTED for a path through a value written by an element
 *  callback (kiln_apply_, kiln_map_, kiln_map2_), naming it. Borrows every
 *  argument. (Torch: torch.autograd.grad(outputs, wrt, cotangents,
 *  create_graph=True, allow_unused=True) with zeros for unused; JAX: vjp.) */
KILN_API int kiln_grad(kiln_tensor *const *outputs, kiln_tensor *const *cotangents, int n_outputs,
                       kiln_tensor *const *wrt, int n_wrt, kiln_tensor **grads);

/** A view of t's value through which no gradient flows: same storage,
 *  sizes, strides and offset as t, so writes through either are seen by
 *  both; gradients of values read through the returned handle stop there
 *  (they are zero for what lies behind it). New reference, or NULL.
 *  (Torch: detach.) */
KILN_API kiln_tensor *kiln_detach(kiln_tensor *t);

/** Scales grads [n] in place so that their global p-norm (the norm of all
 *  their elements together) is at most max_norm: every grad is multiplied
 *  by min(1, max_norm / (total + 1e-6)), lazily (no force; the scale is a
 *  graph value), through its view. The grads are read and written
 *  detached: no gradient flows through the scaling (Torch scales
 *  g.detach()). norm_type is p (> 0, or INFINITY for the max-abs norm);
 *  total is the p-norm of the grads' p-norms, each rounded to its grad's
 *  dtype. An empty grad adds nothing to the INFINITY-norm; n = 0 gives a
 *  total of 0. total_norm (may be NULL) receives a new 0-d tensor (owned
 *  like any returned tensor) with the total norm before clipping (F32, or
 *  F64 when any grad is F64); untouched on error. Errors: KILN_ERR_ARG
 *  (bad list, NULL grad, an expanded grad — a dim of size > 1 with stride
 *  0 —, max_norm < 0 or NaN, norm_type <= 0 or NaN), KILN_ERR_DTYPE
 *  (non-float grad), KILN_ERR_DEVICE (grads on different devices); then
 *  no grad is written. (Torch: torch.nn.utils.clip_grad_norm_(grads,
 *  max_norm, norm_type).) */
KILN_API int kiln_clip_grad_norm_(kiln_tensor *const *grads, int n, double max_norm, double norm_type,
                                  kiln_tensor **total_norm);

/** An optimizer over a fixed list of parameter tensors (borrowed handles
 *  kept alive by the optimizer, which holds a reference to each). */
typedef struct kiln_optimizer kiln_optimizer;

/** torch.optim.SGD's update rule (dampening 0): with weight decay wd,
 *  momentum mu and learning rate lr, per parameter p and gradient g:
 *  g += wd * p; b = mu * b + g (b = g at the first step); g = nesterov ?
 *  g + mu * b : b (or g itself when mu == 0); p -= lr * g. params [n]
 *  are float tensors written in place through their views (any layout);
 *  the update is computed in each parameter's dtype. Momentum buffers
 *  (only when mu > 0) are contiguous tensors of each parameter's sizes,
 *  dtype and device, made at the first step. NULL on error: KILN_ERR_ARG
 *  (bad list or n < 1, NULL parameter, repeated parameter — the same
 *  handle, or another with the same storage and view —, an expanded
 *  parameter — a dim of size > 1 with stride 0 —, lr, momentum or
 *  weight_decay < 0 or NaN, nesterov without momentum), KILN_ERR_DTYPE
 *  (non-float parameter), KILN_ERR_OOM. Free with kiln_optimizer_free. */
KILN_API kiln_optimizer *kiln_sgd(kiln_tensor *const *params, int n, double lr, double momentum,
                                  double weight_decay, bool nesterov);
/** torch.optim.Adam, or torch.optim.AdamW when decoupled_weight_decay
 *  (amsgrad and maximize off): step t (from 1), m = b1 m + (1 - b1) g,
 *  v = b2 v + (1 - b2) g^2, p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 -
 *  b2^t)) + eps) — bias corrected, eps outside the sqrt; the corrections
 *  are computed on the host in double. Weight decay adds wd * p to g
 *  (Adam) or multiplies p by 1 - lr * wd first (AdamW). m and v start as
 *  zeros, made at the first step like SGD's buffers. Errors as kiln_sgd,
 *  and KILN_ERR_ARG for betas outside [0, 1) or eps < 0 (NaN included). */
KILN_API kiln_optimizer *kiln_adam(kiln_tensor *const *params, int n, double lr, double beta1, double beta2,
                                   double eps, double weight_decay, bool decoupled_weight_decay);
/** torch.optim.RMSprop (maximize off): with weight decay wd, g += wd * p;
 *  s = alpha * s + (1 - alpha) * g^2; centered: ga = alpha * ga + (1 -
 *  alpha) * g and d = sqrt(s - ga^2) + eps, else d = sqrt(s) + eps; with
 *  momentum mu > 0: b = mu * b + g / d, p -= lr * b; else p -= lr * g / d.
 *  State (zeros at the first step, as SGD's buffers): square_avg, then
 *  momentum_buffer when mu > 0, then grad_avg when centered. Errors as
 *  kiln_sgd, and KILN_ERR_ARG for alpha, eps or momentum < 0 (NaN
 *  included). (Torch: torch.optim.RMSprop(params, lr, alpha, eps,
 *  weight_decay, momentum, centered).) */
KILN_API kiln_optimizer *kiln_rmsprop(kiln_tensor *const *params, int n, double lr, double alpha, double eps,
                                      double weight_decay, double momentum, bool centered);
/** torch.optim.Adagrad (dense, maximize off): at step t (from 1), g +=
 *  wd * p; clr = lr / (1 + (t - 1) * lr_decay) (on the host, in double);
 *  s += g^2; p -= clr * g / (sqrt(s) + eps). State: sum, made at the
 *  first step filled with initial_accumulator_value. Errors as kiln_sgd,
 *  and KILN_ERR_ARG for lr_decay, initial_accumulator_value or eps < 0
 *  (NaN included) or an infinite initial_accumulator_value. (Torch:
 *  torch.optim.Adagrad(params, lr, lr_decay, weight_decay,
 *  initial_accumulator_value, eps).) */
KILN_API kiln_optimizer *kiln_adagrad(kiln_tensor *const *params, int n, double lr, double lr_decay,
                                      double weight_decay, double initial_accumulator_value, double eps);
/** Records the in-place update of every parameter (and of the optimizer's
 *  state buffers) from grads [n] (n the optimizer's parameter count; grad
 *  j has parameter j's sizes and device, any float dtype, converted to the
 *  parameter's): lazy, like any write — the next force of a parameter runs
 *  it. A parameter's update is one fused kernel that writes the
 *  parameter and its state buffers, the new state values computed once,
 *  in registers. The update is recorded detached: no gradient flows
 *  through it, and a parameter's previous value and the graph that
 *  computed it (and the gradient's) are not kept alive by the new one
 *  once it has run. Borrows grads (they may be released at once). Errors
 *  (nothing recorded, no state changed): KILN_ERR_ARG (NULL opt or list,
 *  NULL grad), KILN_ERR_SHAPE (grad sizes differ, or the parameter's sizes
 *  no longer match its state after a kiln_resize_ or kiln_set_),
 *  KILN_ERR_DTYPE (non-float grad, or the parameter's dtype changed since
 *  its state was made), KILN_ERR_DEVICE (a grad on another device than its
 *  parameter). KILN_ERR_OOM while recording may leave the parameters
 *  before the failing one updated. */
KILN_API int kiln_optimizer_step(kiln_optimizer *opt, kiln_tensor *const *grads);
/** Sets the learning rate used by later steps (lr >= 0, else KILN_ERR_ARG;
 *  NaN too). (Torch: param_group["lr"] = lr.) */
KILN_API int kiln_optimizer_set_lr(kiln_optimizer *opt, double lr);
/** The current learning rate (NaN and KILN_ERR_ARG for NULL opt). */
KILN_API double kiln_optimizer_lr(const kiln_optimizer *opt);
/** Saves the optimizer's state (step count, learning rate and every state
 *  buffer, forced) to a safetensors file at path, so that a run restored
 *  with kiln_optimizer_load (and the parameters saved alongside) continues
 *  bit-exactly. The file holds 0-d F64 tensors "kind", "n_params", "step",
 *  "lr" and one per hyper-parameter ("momentum", "weight_decay",
 *  "nesterov"; "beta1", "beta2", "eps", "weight_decay",
 *  "decoupled_weight_decay"; RMSprop's "alpha", "eps", "weight_decay",
 *  "momentum", "centered"; Adagrad's "lr_decay", "weight_decay",
 *  "initial_accumulator_value", "eps"), and once a step was taken the
 *  buffers "state.<j>.momentum_buffer" or "state.<j>.exp_avg" and
 *  "state.<j>.exp_avg_sq" (RMSprop: "square_avg", "momentum_buffer",
 *  "grad_avg" — those it has; Adagrad: "sum") for parameter j. Errors: KILN_ERR_ARG (NULL opt
 *  or path), KILN_ERR_IO (no partial file is left), and any error of
 *  forcing. (Torch: optimizer.state_dict().) */
KILN_API int kiln_optimizer_save(kiln_optimizer *opt, const char *path);
/** Restores state saved by kiln_optimizer_save — step count, learning rate
 *  and state buffers (on the parameters' devices) — into an optimizer of
 *  the same kind and hyper-parameters over parameters of the same count,
 *  sizes and dtypes. Errors (opt unchanged): KILN_ERR_ARG (NULL opt or
 *  path; the state of another kind — SGD, Adam, AdamW, RMSprop, Adagrad —
 *  or another value
 *  of a hyper-parameter, the message names it), KILN_ERR_IO (unreadable
 *  file, or not an optimizer state: an entry missing, extra or not a 0-d
 *  F64 tensor, a bad step or lr), KILN_ERR_SHAPE (another parameter count,
 *  or a buffer whose sizes differ from its parameter's), KILN_ERR_DTYPE (a
 *  buffer of another dtype); the message says which. (Torch:
 *  optimizer.load_state_dict(), which also restores hyper-parameters.) */
KILN_API int kiln_optimizer_load(kiln_optimizer *opt, const char *path);
/** Frees the optimizer and its state; the parameters stay (NULL-safe).
 *  Any later use of opt, a second free included, is KILN_ERR_ARG "argument
 *  opt was released (used after kiln_optimizer_free)". */
KILN_API void kiln_optimizer_free(kiln_optimizer *opt);

/* Learning-rate schedules as pure functions of the step (nn/
 * lr_schedule.c): the closed forms of torch.optim.lr_scheduler's
 * schedulers, whose get_last_lr() after `step` scheduler steps they give
 * (to rounding). Pass the result to kiln_optimizer_set_lr before each
 * optimizer step; compose them as functions, e.g. a linear warm-up then
 * cosine: step < w ? kiln_lr_linear(lr, step, f, 1, w) :
 * kiln_lr_cosine(lr, step - w, t_max, 0) (Torch's SequentialLR). Each
 * returns NaN with KILN_ERR_ARG for base_lr < 0, NaN or inf, step < 0,
 * or a bad parameter (named in the message). */

/** base_lr * gamma^floor(step / step_size) (step_size >= 1, gamma
 *  finite). Torch: lr_scheduler.StepLR(opt, step_size, gamma). */
KILN_API double kiln_lr_step(double base_lr, int64_t step, int64_t step_size, double gamma);
/** eta_min + (base_lr - eta_min) * (1 + cos(pi * step / t_max)) / 2
 *  (t_max >= 1, eta_min finite; past t_max the cosine goes on, as
 *  Torch's). Torch: lr_scheduler.CosineAnnealingLR(opt, T_max, eta_min). */
KILN_API double kiln_lr_cosine(double base_lr, int64_t step, int64_t t_max, double eta_min);
/** base_lr * (start_factor + (end_factor - start_factor) * min(step,
 *  total_iters) / total_iters): a linear warm-up from start_factor *
 *  base_lr (in (0, 1]) to end_factor * base_lr (in [0, 1]) over
 *  total_iters >= 1 steps, then constant. Torch:
 *  lr_scheduler.LinearLR(opt, start_factor, end_factor, total_iters). */
KILN_API double kiln_lr_linear(double base_lr, int64_t step, double start_factor, double end_factor,
                               int64_t total_iters);

/* Profiling: kernel records, the profile table and trace, engine
 * statistics, the Graphviz dump of pending work. */
#include "kiln/profile.h"
/* Neural-network layers and losses (torch.nn.functional): kiln_linear,
 * kiln_conv, kiln_max_pool, kiln_batch_norm, kiln_cross_entropy, ... */
#include "kiln/nn.h"
/* Collectives across processes (MPI): kiln_group, kiln_all_reduce, ... */
#include "kiln/dist.h"

#ifdef __cplusplus
}
#endif
#endif /* KILN_KILN_H */
