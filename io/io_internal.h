/*
 * io_internal.h — file helpers shared by the .npy (io_npy.c) and
 * safetensors (io_safetensors.c) readers and writers: bounds-checked reads
 * at an offset, tensors filled straight from a file, and writers that
 * stream a view's elements in row-major order and remove a partly written
 * file on failure. Every failure is reported through api_error with the
 * public function's name and the path. Internal to the API layer.
 *
 * Both formats are little-endian; Kiln builds only for little-endian hosts
 * (io_common.c checks), so element bytes are copied as they are.
 */
#ifndef KILN_API_IO_INTERNAL_H
#define KILN_API_IO_INTERNAL_H

#include <stdio.h>

#include "ops.h"

/* ---- reading ---- */

typedef struct io_reader {
  FILE *f;
  const char *path;
  const char *fn; /* public function, for messages */
  int64_t size;   /* file size in bytes */
} io_reader;

/** Opens a regular file for reading and finds its size. KILN_ERR_ARG for a
 *  NULL path, KILN_ERR_IO (with strerror) when it cannot be opened. */
int io_open_read(io_reader *r, const char *path, const char *fn);
/** Opens `size` bytes at `data` (which must outlive the reader) as the
 *  contents of a file called `name`, for the fuzz harnesses
 *  (tests/fuzz): the loaders' parsing without a file system. Everything
 *  after opening behaves as for a regular file of that size. KILN_ERR_IO
 *  when fmemopen fails. */
int io_open_mem(io_reader *r, const void *data, size_t size, const char *name, const char *fn);
void io_close_read(io_reader *r);
/** Reads exactly n bytes at byte offset off. A range past the end of the
 *  file is KILN_ERR_IO "truncated" naming `what`; nothing is read past
 *  the file's size. */
int io_read_at(io_reader *r, int64_t off, void *dst, size_t n, const char *what);
/** A new tensor (NOT scope-tracked: the caller passes it to api_track or
 *  keeps it) over a fresh realized storage of `numel` elements of dtype,
 *  read from byte offset `off`, seen through view v (which must fit in
 *  numel). `swap` reverses each element's bytes (big-endian files); BOOL
 *  bytes become 0/1. NULL with the error set on failure. */
kiln_tensor *io_read_tensor(io_reader *r, int64_t off, kiln_dtype dtype, int64_t numel, const graph_view *v, bool swap,
                            const char *what);

/** io_read_tensor for a file of numel unsigned integers of usize bytes
 *  (2, 4 or 8): each becomes an element of dtype (I32 for usize 2, I64
 *  otherwise), so every value stays exact; a u64 value past INT64_MAX is
 *  KILN_ERR_DTYPE naming the value and its element. */
kiln_tensor *io_read_unsigned(io_reader *r, int64_t off, int usize, kiln_dtype dtype, int64_t numel,
                              const graph_view *v, bool swap, const char *what);

/** kiln_load_npy and kiln_load_safetensors over bytes in memory (see
 *  io_open_mem; `name` stands for the path in messages). Same results,
 *  errors and ownership as the public functions. */
kiln_tensor *io_load_npy_mem(const void *data, size_t size, const char *name);
int io_load_safetensors_mem(const void *data, size_t size, const char *name, int *n_out, char ***names_out,
                            kiln_tensor ***tensors_out);

/* ---- writing ---- */

typedef struct io_writer {
  FILE *f;
  const char *path;
  const char *fn;
  int status;   /* first failure, KILN_OK until then */
  bool regular; /* a regular file (removed on failure) */
} io_writer;

/** Creates (truncates) path for writing. KILN_ERR_IO when it cannot. */
int io_create(io_writer *w, const char *path, const char *fn);
/** Appends n bytes; after a failure every later call does nothing. */
int io_write(io_writer *w, const void *p, size_t n);
/** Appends the elements of t's view in row-major order, in t's dtype. t's
 *  storage must be realized (api_force). */
int io_write_view(io_writer *w, const kiln_tensor *t);
/** Closes the file. If any step failed (or the `status` passed in is an
 *  error), the partly written file is removed when it is a regular file.
 *  Returns the first error or KILN_OK. */
int io_finish(io_writer *w, int status);

/** Element count of sizes [ndim] (all ≥ 0), or -1 when the product of
 *  the sizes with zeros counted as 1 (the reach of contiguous strides; ≥
 *  numel) × esize would overflow int64. */
int64_t io_numel_checked(int ndim, const int64_t *sizes, int64_t esize);

#endif /* KILN_API_IO_INTERNAL_H */
