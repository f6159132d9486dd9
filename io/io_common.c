/*
 * io_common.c — the file helpers of io_internal.h: bounds-checked reads,
 * tensors read straight into a fresh buffer, and streaming writers.
 *
 * Invariants: a reader never reads past the size the file had when it was
 * opened (every range is checked against it first, so a corrupt header
 * cannot make Kiln allocate more than the file holds or read beyond it);
 * a writer reports the first failing call and removes its partial file.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io_internal.h"
#include "runtime.h"
#include "graph_walk.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Kiln's file formats (.npy, safetensors) are implemented for little-endian hosts only"
#endif

/* ------------------------------------------------------------ reading */

int io_open_read(io_reader *r, const char *path, const char *fn) {
  *r = (io_reader){.path = path, .fn = fn};
  if (!path) return api_error(KILN_ERR_ARG, fn, "path is NULL");
  r->f = fopen(path, "rb");
  if (!r->f) return api_error(KILN_ERR_IO, fn, "cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(r->f), &st) != 0) {
    int e = errno;
    io_close_read(r);
    return api_error(KILN_ERR_IO, fn, "cannot stat %s: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    io_close_read(r);
    return api_error(KILN_ERR_IO, fn, "%s is not a regular file", path);
  }
  r->size = (int64_t)st.st_size;
  return KILN_OK;
}

int io_open_mem(io_reader *r, const void *data, size_t size, const char *name, const char *fn) {
  static const unsigned char none; /* fmemopen wants a buffer of >= 1 byte */
  *r = (io_reader){.path = name, .fn = fn, .size = (int64_t)size};
  r->f = fmemopen(size ? (void *)data : (void *)&none, size ? size : 1, "rb");
  if (!r->f) return api_error(KILN_ERR_IO, fn, "cannot open %s in memory: %s", name, strerror(errno));
  return KILN_OK;
}

void io_close_read(io_reader *r) {
  if (r->f) fclose(r->f);
  r->f = NULL;
}

int io_read_at(io_reader *r, int64_t off, void *dst, size_t n, const char *what) {
  if (off < 0 || off > r->size || (int64_t)n > r->size - off)
    return api_error(KILN_ERR_IO, r->fn, "%s: truncated file: %s needs bytes [%lld, %lld) but the file has %lld bytes",
                     r->path, what, (long long)off, (long long)off + (long long)n, (long long)r->size);
  if (n == 0) return KILN_OK;
  if (fseeko(r->f, (off_t)off, SEEK_SET) != 0)
    return api_error(KILN_ERR_IO, r->fn, "%s: cannot seek to byte %lld: %s", r->path, (long long)off, strerror(errno));
  if (fread(dst, 1, n, r->f) != n)
    return api_error(KILN_ERR_IO, r->fn, "%s: reading %s failed%s%s", r->path, what, ferror(r->f) ? ": " : "",
                     ferror(r->f) ? strerror(errno) : " (file shrank while reading)");
  return KILN_OK;
}

/* Reverses the bytes of each of the n elements of esize bytes at p. */
static void swap_bytes(unsigned char *p, int64_t n, int esize) {
  for (int64_t i = 0; i < n; i++, p += esize) {
    for (int a = 0, b = esize - 1; a < b; a++, b--) {
      unsigned char c = p[a];
      p[a] = p[b];
      p[b] = c;
    }
  }
}

/* A fresh buffer of `bytes` holding the file's n = bytes/esize elements
 * of esize bytes from offset off, each byte-reversed when swap (the buffer
 * may be larger: `alloc` bytes). NULL with the error set. */
static graph_buffer *read_elements(io_reader *r, int64_t off, int64_t bytes, int64_t alloc, int esize, bool swap,
                                   const char *what) {
  /* check the range before allocating: a header cannot claim more memory
   * than the file holds */
  if (off < 0 || off > r->size || bytes > r->size - off) {
    io_read_at(r, off, NULL, (size_t)bytes, what);
    return NULL;
  }
  rt_alloc_install();
  graph_buffer *buf = graph_buffer_alloc(alloc);
  if (!buf) {
    api_error(KILN_ERR_OOM, r->fn, "out of memory allocating %lld bytes for %s", (long long)alloc, what);
    return NULL;
  }
  if (io_read_at(r, off, buf->data, (size_t)bytes, what) != KILN_OK) {
    graph_buffer_release(buf);
    return NULL;
  }
  if (swap && esize > 1) swap_bytes(buf->data, bytes / esize, esize);
  return buf;
}

/* The tensor over buffer buf (numel elements of dtype) seen through v;
 * takes buf. */
static kiln_tensor *buffer_tensor(io_reader *r, graph_buffer *buf, kiln_dtype dtype, int64_t numel,
                                  const graph_view *v) {
  graph_node *n = graph_node_from_buffer(buf, dtype, numel);
  kiln_storage *s = n ? graph_storage_new(dtype, numel, n) : NULL;
  kiln_tensor *t = s ? graph_tensor_new(s, v) : NULL;
  kiln_storage_release(s);
  if (!t) api_error(KILN_ERR_OOM, r->fn, "out of memory");
  return t;
}

kiln_tensor *io_read_tensor(io_reader *r, int64_t off, kiln_dtype dtype, int64_t numel, const graph_view *v, bool swap,
                            const char *what) {
  int esize = graph_dtypes[dtype].size;
  int64_t bytes = numel * esize;
  graph_buffer *buf = read_elements(r, off, bytes, bytes, esize, swap, what);
  if (!buf) return NULL;
  if (dtype == KILN_BOOL) {
    unsigned char *p = buf->data;
    for (int64_t i = 0; i < numel; i++) p[i] = p[i] != 0;
  }
  return buffer_tensor(r, buf, dtype, numel, v);
}

/* Widens the n unsigned integers of usize bytes (host order) at the start
 * of p to dtype's (I32 or I64) in place. u16 and u32 go from the last
 * element down (an element never lands on one not yet read); u64 values
 * keep their bytes as I64 once none is past INT64_MAX (else false with the
 * error set, naming the first such value). */
static bool widen_unsigned(unsigned char *p, int64_t n, int usize, kiln_dtype dtype, const io_reader *r) {
  if (usize == 8) {
    for (int64_t i = 0; i < n; i++) {
      uint64_t u;
      memcpy(&u, p + i * 8, 8);
      if (u > (uint64_t)INT64_MAX) {
        api_error(KILN_ERR_DTYPE, r->fn,
                  "%s: uint64 element %lld is %llu, more than any Kiln dtype holds exactly (i64 stops at %lld)",
                  r->path, (long long)i, (unsigned long long)u, (long long)INT64_MAX);
        return false;
      }
    }
    return true;
  }
  for (int64_t i = n - 1; i >= 0; i--) {
    uint16_t u16;
    uint32_t u32;
    int64_t w;
    if (usize == 2) memcpy(&u16, p + i * 2, 2), w = u16;
    else memcpy(&u32, p + i * 4, 4), w = u32;
    if (dtype == KILN_I32) {
      int32_t w32 = (int32_t)w;
      memcpy(p + i * 4, &w32, 4);
    } else {
      memcpy(p + i * 8, &w, 8);
    }
  }
  return true;
}

kiln_tensor *io_read_unsigned(io_reader *r, int64_t off, int usize, kiln_dtype dtype, int64_t numel,
                              const graph_view *v, bool swap, const char *what) {
  int64_t alloc = numel * graph_dtypes[dtype].size;
  graph_buffer *buf = read_elements(r, off, numel * usize, alloc, usize, swap, what);
  if (!buf) return NULL;
  if (!widen_unsigned(buf->data, numel, usize, dtype, r)) {
    graph_buffer_release(buf);
    return NULL;
  }
  return buffer_tensor(r, buf, dtype, numel, v);
}

int64_t io_numel_checked(int ndim, const int64_t *sizes, int64_t esize) {
  /* span: the sizes' product with 0 counted as 1, what the contiguous
   * strides of the tensor reach; it must fit even for an empty shape */
  int64_t numel = 1, span = 1;
  for (int d = 0; d < ndim; d++) {
    if (sizes[d] < 0) return -1;
    if (sizes[d] > 0 && span > INT64_MAX / sizes[d]) return -1;
    span *= sizes[d] > 0 ? sizes[d] : 1;
    numel *= sizes[d];
  }
  if (span > INT64_MAX / (esize > 0 ? esize : 1)) return -1;
  return numel;
}

/* ------------------------------------------------------------ writing */

int io_create(io_writer *w, const char *path, const char *fn) {
  *w = (io_writer){.path = path, .fn = fn};
  if (!path) return w->status = api_error(KILN_ERR_ARG, fn, "path is NULL");
  w->f = fopen(path, "wb");
  if (!w->f) return w->status = api_error(KILN_ERR_IO, fn, "cannot create %s: %s", path, strerror(errno));
  struct stat st; /* only a regular file is removed on failure, never a device */
  w->regular = fstat(fileno(w->f), &st) == 0 && S_ISREG(st.st_mode);
  return KILN_OK;
}

int io_write(io_writer *w, const void *p, size_t n) {
  if (w->status != KILN_OK) return w->status;
  if (n > 0 && fwrite(p, 1, n, w->f) != n)
    w->status = api_error(KILN_ERR_IO, w->fn, "writing %s failed: %s", w->path, strerror(errno));
  return w->status;
}

/* Row-major gather in chunks of up to 1 MiB, so a strided or expanded view
 * is written without a full-size copy. */
/* Writes the view's elements from the host bytes of its storage. */
static int write_elems(io_writer *w, const graph_view *v, size_t esize, const char *base) {
  int64_t numel = graph_view_numel(v);
  if (graph_view_is_contiguous(v)) return io_write(w, base + (size_t)v->offset * esize, (size_t)numel * esize);
  int64_t chunk = (int64_t)((1u << 20) / esize);
  char *tmp = graph_malloc((size_t)chunk * esize);
  if (!tmp) return w->status = api_error(KILN_ERR_OOM, w->fn, "out of memory");
  graph_walk it;
  graph_walk_init(&it, v, 0);
  for (int64_t done = 0; done < numel && w->status == KILN_OK;) {
    int64_t k = numel - done < chunk ? numel - done : chunk;
    for (int64_t i = 0; i < k; i++, graph_walk_next(&it))
      memcpy(tmp + (size_t)i * esize, base + (size_t)it.off * esize, esize);
    io_write(w, tmp, (size_t)k * esize);
    done += k;
  }
  free(tmp);
  return w->status;
}

int io_write_view(io_writer *w, const kiln_tensor *t) {
  if (graph_view_numel(&t->view) == 0) return w->status;
  void *copy; /* a KILN_CUDA tensor's storage, copied to the host */
  const char *base = api_host_data((kiln_tensor *)t, w->fn, &copy);
  if (!base) return w->status = api_status();
  write_elems(w, &t->view, (size_t)graph_dtypes[t->storage->dtype].size, base);
  free(copy);
  return w->status;
}

int io_finish(io_writer *w, int status) {
  if (w->status == KILN_OK && status != KILN_OK) w->status = status;
  if (w->f) {
    bool flushed = fflush(w->f) == 0;
    int e = errno;
    bool closed = fclose(w->f) == 0;
    if (!closed && flushed) e = errno;
    if ((!flushed || !closed) && w->status == KILN_OK)
      w->status = api_error(KILN_ERR_IO, w->fn, "writing %s failed: %s", w->path, strerror(e));
    w->f = NULL;
    if (w->status != KILN_OK && w->regular) remove(w->path);
  }
  return w->status;
}
