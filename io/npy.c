/*
 * io_npy.c — NumPy .npy files: kiln_save_npy and kiln_load_npy.
 *
 * Format (NumPy's NEP 1, "A Simple File Format for NumPy Arrays"): the
 * magic "\x93NUMPY", a major and minor version byte (1.0, 2.0 or 3.0), the
 * header length (little-endian u16 for 1.0, u32 for 2.0/3.0), then the
 * header: a Python dict literal {'descr': '<f4', 'fortran_order': False,
 * 'shape': (3, 4), } padded with spaces and ending in '\n', then the raw
 * elements. Writers pad so the data starts at a multiple of 64 bytes.
 *
 * The header is parsed by a small bounds-checked tokenizer (strings,
 * True/False, integers, tuples), never evaluated: it accepts exactly the
 * three keys, each once, and reports anything else as KILN_ERR_IO. dtypes
 * NumPy has but Kiln lacks (complex, structured, ...) are KILN_ERR_DTYPE;
 * big-endian ('>') files are byte-swapped on load. Unsigned integers wider
 * than a byte load into the nearest signed dtype that holds every value
 * (uint16 -> i32, uint32 and uint64 -> i64); a uint64 value past INT64_MAX
 * is KILN_ERR_DTYPE naming it.
 */
#include <stdlib.h>
#include <string.h>

#include "io_internal.h"

#define NPY_MAX_HEADER (1 << 20) /* bytes; NumPy's own writer stays far below */

/* descr of each Kiln dtype (little-endian, as NumPy writes them); BF16 has
 * no NumPy dtype. */
static const char *const npy_descr[KILN_DTYPE_COUNT] = {
    [KILN_BOOL] = "|b1", [KILN_U8] = "|u1",  [KILN_I8] = "|i1",  [KILN_I16] = "<i2", [KILN_I32] = "<i4",
    [KILN_I64] = "<i8",  [KILN_F16] = "<f2", [KILN_BF16] = NULL, [KILN_F32] = "<f4", [KILN_F64] = "<f8",
};

/* ----------------------------------------------------- header parsing */

typedef struct npy_header {
  char descr[32];    /* the descr string, if it is one and fits */
  bool descr_ok;     /* a string that fit in descr */
  bool descr_struct; /* a list: a structured dtype */
  bool fortran;
  int ndim; /* may exceed KILN_MAX_DIMS; sizes keeps the first 16 */
  int64_t sizes[KILN_MAX_DIMS];
} npy_header;

typedef struct npy_lex {
  const char *p, *end;
  const char *why; /* first parse failure */
} npy_lex;

static bool lex_fail(npy_lex *x, const char *why) {
  if (!x->why) x->why = why;
  return false;
}

static void skip_ws(npy_lex *x) {
  while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\n' || *x->p == '\r')) x->p++;
}

static bool peek(npy_lex *x, char c) {
  skip_ws(x);
  return x->p < x->end && *x->p == c;
}

static bool eat(npy_lex *x, char c) {
  if (!peek(x, c)) return false;
  x->p++;
  return true;
}

/* A quoted string without escapes: *s, *n point into the header. */
static bool lex_string(npy_lex *x, const char **s, size_t *n) {
  skip_ws(x);
  if (x->p >= x->end || (*x->p != '\'' && *x->p != '"')) return lex_fail(x, "expected a quoted string");
  char q = *x->p++;
  const char *start = x->p;
  while (x->p < x->end && *x->p != q) {
    if (*x->p == '\\' || *x->p == '\n') return lex_fail(x, "escape or newline inside a string");
    x->p++;
  }
  if (x->p >= x->end) return lex_fail(x, "unterminated string");
  *s = start;
  *n = (size_t)(x->p - start);
  x->p++;
  return true;
}

static bool is_ident(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* The identifier `w` (True, False), not followed by more identifier chars. */
static bool lex_word(npy_lex *x, const char *w) {
  skip_ws(x);
  size_t n = strlen(w);
  if ((size_t)(x->end - x->p) < n || memcmp(x->p, w, n) != 0) return false;
  if (x->p + n < x->end && is_ident(x->p[n])) return false;
  x->p += n;
  return true;
}

/* A non-negative decimal integer (Python 2 files may add an 'L'). */
static bool lex_int(npy_lex *x, int64_t *v) {
  skip_ws(x);
  if (x->p >= x->end || *x->p < '0' || *x->p > '9') return lex_fail(x, "expected a non-negative integer in shape");
  int64_t r = 0;
  while (x->p < x->end && *x->p >= '0' && *x->p <= '9') {
    int digit = *x->p++ - '0';
    if (r > (INT64_MAX - digit) / 10) return lex_fail(x, "shape entry too large");
    r = r * 10 + digit;
  }
  if (x->p < x->end && (*x->p == 'L' || *x->p == 'l')) x->p++;
  *v = r;
  return true;
}

/* Skips a bracketed value ([...] or (...), nested, strings included). */
static bool skip_nested(npy_lex *x) {
  int depth = 0;
  do {
    skip_ws(x);
    if (x->p >= x->end) return lex_fail(x, "unterminated list");
    char c = *x->p;
    if (c == '\'' || c == '"') {
      const char *s;
      size_t n;
      if (!lex_string(x, &s, &n)) return false;
      continue;
    }
    if (c == '[' || c == '(')
      depth++;
    else if (c == ']' || c == ')')
      depth--;
    x->p++;
  } while (depth > 0);
  return true;
}

static bool parse_descr(npy_lex *x, npy_header *h) {
  if (peek(x, '[')) return (h->descr_struct = true) && skip_nested(x);
  const char *s;
  size_t n;
  if (!lex_string(x, &s, &n)) return false;
  if (n < sizeof h->descr && !memchr(s, 0, n)) { /* a NUL inside is no descr NumPy writes */
    memcpy(h->descr, s, n);
    h->descr[n] = 0;
    h->descr_ok = true;
  }
  return true;
}

static bool parse_fortran(npy_lex *x, npy_header *h) {
  if (lex_word(x, "True"))
    h->fortran = true;
  else if (lex_word(x, "False"))
    h->fortran = false;
  else
    return lex_fail(x, "fortran_order is not True or False");
  return true;
}

/* A tuple of integers: (), (3,), (2, 3) or (2, 3,). */
static bool parse_shape(npy_lex *x, npy_header *h) {
  if (!eat(x, '(')) return lex_fail(x, "shape is not a tuple");
  h->ndim = 0;
  if (eat(x, ')')) return true;
  for (;;) {
    int64_t v;
    if (!lex_int(x, &v)) return false;
    if (h->ndim < KILN_MAX_DIMS) h->sizes[h->ndim] = v;
    if (h->ndim < 1000) h->ndim++;
    if (!eat(x, ',')) {
      if (h->ndim == 1) return lex_fail(x, "a 1-element shape needs a trailing comma");
      return eat(x, ')') || lex_fail(x, "expected ',' or ')' in shape");
    }
    if (eat(x, ')')) return true;
  }
}

/* One "key: value" entry; `seen` bits: 1 descr, 2 fortran_order, 4 shape. */
static bool parse_entry(npy_lex *x, npy_header *h, int *seen) {
  const char *k;
  size_t n;
  if (!lex_string(x, &k, &n)) return false;
  if (!eat(x, ':')) return lex_fail(x, "expected ':' after a key");
  int bit;
  bool ok;
  if (n == 5 && !memcmp(k, "descr", 5))
    bit = 1, ok = parse_descr(x, h);
  else if (n == 13 && !memcmp(k, "fortran_order", 13))
    bit = 2, ok = parse_fortran(x, h);
  else if (n == 5 && !memcmp(k, "shape", 5))
    bit = 4, ok = parse_shape(x, h);
  else
    return lex_fail(x, "unknown key (expected descr, fortran_order and shape)");
  if (*seen & bit) return lex_fail(x, "repeated key");
  *seen |= bit;
  return ok;
}

static bool parse_dict(npy_lex *x, npy_header *h) {
  int seen = 0;
  if (!eat(x, '{')) return lex_fail(x, "header is not a dict");
  while (!eat(x, '}')) {
    if (!parse_entry(x, h, &seen)) return false;
    if (!eat(x, ',')) {
      if (!eat(x, '}')) return lex_fail(x, "expected ',' or '}'");
      break;
    }
  }
  skip_ws(x);
  if (x->p != x->end) return lex_fail(x, "characters after the dict");
  if (seen != 7) return lex_fail(x, "missing key (descr, fortran_order and shape are required)");
  return true;
}

/* ------------------------------------------------------------ dtypes */

/* The Kiln dtype of a descr such as '<f4' or '|b1'; *swap for big-endian.
 * KILN_ERR_DTYPE (set) when Kiln has no such dtype. */
static int descr_dtype(const npy_header *h, kiln_dtype *out, bool *swap, int *usize, const char *path) {
  static const char fn[] = "kiln_load_npy";
  if (h->descr_struct) return api_error(KILN_ERR_DTYPE, fn, "%s: structured dtypes are not supported", path);
  if (!h->descr_ok) return api_error(KILN_ERR_DTYPE, fn, "%s: unsupported descr (too long, or a NUL byte in it)", path);
  const char *d = h->descr;
  char order = '=';
  if (*d == '<' || *d == '>' || *d == '|' || *d == '=') order = *d++;
  *usize = 0;
  if (d[0] == 'u' && (d[1] == '2' || d[1] == '4' || d[1] == '8') && !d[2]) { /* widened on load */
    *usize = d[1] - '0';
    *out = *usize == 2 ? KILN_I32 : KILN_I64;
    *swap = order == '>';
    return KILN_OK;
  }
  for (int k = 0; k < KILN_DTYPE_COUNT; k++) {
    if (!npy_descr[k] || strcmp(d, npy_descr[k] + 1) != 0) continue;
    *out = (kiln_dtype)k;
    *swap = order == '>' && graph_dtypes[k].size > 1;
    return KILN_OK;
  }
  return api_error(KILN_ERR_DTYPE, fn,
                   "%s: descr '%s' has no Kiln dtype (supported: b1 u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8, either byte "
                   "order)",
                   path, h->descr);
}

/* -------------------------------------------------------------- load */

/* Reads the preamble; sets the header's offset and length. */
static int read_preamble(io_reader *r, int64_t *hoff, uint32_t *hlen) {
  unsigned char pre[12] = {0};
  size_t have = r->size < 12 ? (size_t)r->size : 12;
  if (io_read_at(r, 0, pre, have, "the preamble") != KILN_OK) return api_status();
  if (have < 6 || memcmp(pre, "\x93NUMPY", 6) != 0)
    return api_error(KILN_ERR_IO, r->fn, "%s: not a .npy file (no \\x93NUMPY magic)", r->path);
  if (have < 10) return io_read_at(r, 0, pre, 10, "the preamble");
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    return api_error(KILN_ERR_IO, r->fn, "%s: unsupported .npy format version %d.%d (1.0, 2.0, 3.0 are)", r->path,
                     major, minor);
  if (major == 1) {
    *hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    *hoff = 10;
  } else {
    if (have < 12) return io_read_at(r, 0, pre, 12, "the preamble");
    *hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    *hoff = 12;
  }
  if (*hlen > NPY_MAX_HEADER)
    return api_error(KILN_ERR_IO, r->fn, "%s: header length %u is larger than %d bytes", r->path, *hlen,
                     NPY_MAX_HEADER);
  return KILN_OK;
}

static int read_header(io_reader *r, npy_header *h, int64_t *data_off) {
  int64_t hoff = 0;
  uint32_t hlen = 0;
  if (read_preamble(r, &hoff, &hlen) != KILN_OK) return api_status();
  char *text = graph_malloc(hlen ? hlen : 1);
  if (!text) return api_error(KILN_ERR_OOM, r->fn, "out of memory");
  int st = io_read_at(r, hoff, text, hlen, "the header");
  if (st == KILN_OK) {
    npy_lex x = {.p = text, .end = text + hlen};
    *h = (npy_header){0};
    if (!parse_dict(&x, h)) {
      int at = (int)(x.p - text);
      st = api_error(KILN_ERR_IO, r->fn, "%s: malformed .npy header (%s) at byte %d: \"%.*s\"", r->path,
                     x.why ? x.why : "syntax error", at, (int)(hlen - (uint32_t)at < 40 ? hlen - (uint32_t)at : 40),
                     x.p);
    }
  }
  free(text);
  *data_off = hoff + hlen;
  return st;
}

/* The view of the file's elements: row-major, or column-major
 * (strides [1, d0, d0*d1, ...]) for fortran_order files. */
static graph_view npy_view(const npy_header *h) {
  graph_view v = graph_view_contiguous(h->ndim, h->sizes);
  if (h->fortran) {
    int64_t s = 1;
    for (int d = 0; d < h->ndim; d++) {
      v.strides[d] = s;
      s *= h->sizes[d] > 0 ? h->sizes[d] : 1;
    }
  }
  return v;
}

static kiln_tensor *npy_load(io_reader *r) {
  npy_header h;
  int64_t off = 0;
  kiln_dtype dtype = KILN_F32;
  bool swap = false;
  int usize = 0; /* an unsigned file's element size (widened to dtype), else 0 */
  if (read_header(r, &h, &off) != KILN_OK || descr_dtype(&h, &dtype, &swap, &usize, r->path) != KILN_OK) return NULL;
  if (h.ndim > KILN_MAX_DIMS) {
    api_error(KILN_ERR_UNSUPPORTED, r->fn, "%s: %d dims (Kiln tensors have at most %d)", r->path, h.ndim,
              KILN_MAX_DIMS);
    return NULL;
  }
  int64_t numel = io_numel_checked(h.ndim, h.sizes, graph_dtypes[dtype].size);
  if (numel < 0) {
    char b[512];
    api_error(KILN_ERR_IO, r->fn, "%s: shape %s overflows", r->path, api_fmt_sizes(b, sizeof b, h.ndim, h.sizes));
    return NULL;
  }
  graph_view v = npy_view(&h);
  if (usize) return io_read_unsigned(r, off, usize, dtype, numel, &v, swap, "the array data");
  return io_read_tensor(r, off, dtype, numel, &v, swap, "the array data");
}

KILN_API kiln_tensor *kiln_load_npy(const char *path) {
  io_reader r;
  if (io_open_read(&r, path, "kiln_load_npy") != KILN_OK) return NULL;
  kiln_tensor *t = npy_load(&r);
  io_close_read(&r);
  return api_track(t);
}

kiln_tensor *io_load_npy_mem(const void *data, size_t size, const char *name) {
  io_reader r;
  if (io_open_mem(&r, data, size, name, "kiln_load_npy") != KILN_OK) return NULL;
  kiln_tensor *t = npy_load(&r);
  io_close_read(&r);
  return api_track(t);
}

/* -------------------------------------------------------------- save */

/* The header text (padded so the data starts at a multiple of 64) into
 * buf; returns its length. */
static size_t npy_format_header(const kiln_tensor *t, char *buf, size_t cap) {
  const graph_view *v = &t->view;
  int n = snprintf(buf, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (", npy_descr[t->storage->dtype]);
  for (int d = 0; d < v->ndim; d++)
    n += snprintf(buf + n, cap - (size_t)n, d ? ", %lld" : "%lld", (long long)v->sizes[d]);
  n += snprintf(buf + n, cap - (size_t)n, "%s), }", v->ndim == 1 ? "," : "");
  size_t len = (size_t)n + 1; /* + '\n' */
  size_t total = (10 + len + 63) / 64 * 64;
  memset(buf + n, ' ', total - 10 - (size_t)n);
  buf[total - 10 - 1] = '\n';
  return total - 10;
}

KILN_API int kiln_save_npy(kiln_tensor *t, const char *path) {
  static const char fn[] = "kiln_save_npy";
  if (!api_check(t, fn, "t")) return KILN_ERR_ARG;
  if (!path) return api_error(KILN_ERR_ARG, fn, "path is NULL");
  if (!npy_descr[t->storage->dtype])
    return api_error(KILN_ERR_DTYPE, fn,
                     "%s has no NumPy dtype; convert it with kiln_to_dtype(t, KILN_F32) (exact) or save it with "
                     "kiln_save_safetensors",
                     graph_dtypes[t->storage->dtype].name);
  if (!api_force(t, fn)) return api_status();
  char header[1024]; /* 16 dims of 19 digits fit with room to spare */
  size_t hlen = npy_format_header(t, header, sizeof header);
  unsigned char pre[10] = {
      0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
  io_writer w;
  if (io_create(&w, path, fn) != KILN_OK) return w.status;
  io_write(&w, pre, sizeof pre);
  io_write(&w, header, hlen);
  io_write_view(&w, t);
  return io_finish(&w, KILN_OK);
}
