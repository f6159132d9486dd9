/*
 * io_safetensors.c — safetensors files of named tensors:
 * kiln_save_safetensors, kiln_load_safetensors, kiln_load_safetensor,
 * kiln_safetensors_free.
 *
 * Format (the safetensors specification, github.com/huggingface/safetensors):
 * an unsigned little-endian 64-bit header size N, N bytes of UTF-8 JSON (an
 * object that starts with '{', possibly padded with spaces), then the data
 * section. Each key except "__metadata__" names a tensor:
 *   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
 * with offsets in bytes relative to the data section, elements row-major
 * little-endian. The tensors must cover the data section exactly, without
 * holes or overlaps, as the reference implementation requires.
 *
 * The header is parsed with jansson (duplicate keys rejected, integers
 * exact to 64 bits) and validated completely before any tensor data is
 * read: known dtype strings, non-negative integer shapes, offsets
 * consistent with dtype × shape, coverage of the data section, and N
 * against the file size (at most 100,000,000 bytes, the reference limit).
 * The writer lays out tensors with larger elements first (stable), so every
 * tensor is aligned to its element size from a data section that starts at
 * a multiple of 8; JSON keys keep the caller's order, which is the order
 * kiln_load_safetensors returns.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "io_internal.h"

#define ST_MAX_HEADER 100000000 /* bytes, as the reference implementation */

/* safetensors dtype strings with their element sizes; the first
 * KILN_DTYPE_COUNT are Kiln's in enum order, the rest are valid in the
 * format but have no Kiln dtype (they are validated, not loaded). */
typedef struct st_dtype {
  const char *name;
  int size;
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},      {"I8", 1},      {"I16", 2},     {"I32", 4}, {"I64", 8},
    {"F16", 2},  {"BF16", 2},    {"F32", 4},     {"F64", 8},     {"U16", 2}, {"U32", 4},
    {"U64", 8},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"C64", 8},
};
#define ST_N_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

/* One tensor of a file's header. */
typedef struct st_entry {
  const char *name; /* owned by the parsed JSON */
  int dtype;        /* index into st_dtypes; < KILN_DTYPE_COUNT = Kiln's */
  int ndim;         /* may exceed KILN_MAX_DIMS; sizes keeps the first 16 */
  int64_t sizes[KILN_MAX_DIMS];
  int64_t begin, end; /* bytes, relative to the data section */
} st_entry;

typedef struct st_file {
  io_reader r;
  json_t *root;
  st_entry *e;
  int n;
  int64_t data_off;  /* 8 + N */
  int64_t data_size; /* bytes of the data section */
} st_file;

/* ------------------------------------------------------ header checks */

static int bad(const st_file *f, const char *name, const char *what) {
  return api_error(KILN_ERR_IO, f->r.fn, "%s: bad safetensors header: tensor '%s': %s", f->r.path, name, what);
}

static int parse_dtype(st_file *f, st_entry *e, json_t *v) {
  const char *s = json_string_value(v);
  if (!s) return bad(f, e->name, "dtype is not a string");
  for (int k = 0; k < ST_N_DTYPES; k++) {
    if (strcmp(s, st_dtypes[k].name) == 0) {
      e->dtype = k;
      return KILN_OK;
    }
  }
  return api_error(KILN_ERR_IO, f->r.fn, "%s: bad safetensors header: tensor '%s': unknown dtype \"%s\"", f->r.path,
                   e->name, s);
}

static int parse_shape(st_file *f, st_entry *e, json_t *v) {
  if (!json_is_array(v)) return bad(f, e->name, "shape is not an array");
  size_t n = json_array_size(v);
  if (n > 1000) return bad(f, e->name, "shape has more than 1000 dims");
  e->ndim = (int)n;
  for (size_t i = 0; i < n; i++) {
    json_t *x = json_array_get(v, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0) return bad(f, e->name, "shape entries must be integers >= 0");
    if (i < KILN_MAX_DIMS) e->sizes[i] = json_integer_value(x);
  }
  return KILN_OK;
}

static int parse_offsets(st_file *f, st_entry *e, json_t *v) {
  json_t *b = json_array_get(v, 0), *x = json_array_get(v, 1);
  if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(b) || !json_is_integer(x))
    return bad(f, e->name, "data_offsets is not an array of two integers");
  e->begin = json_integer_value(b);
  e->end = json_integer_value(x);
  if (e->begin < 0 || e->end < e->begin) return bad(f, e->name, "data_offsets [begin, end] need 0 <= begin <= end");
  return KILN_OK;
}

/* Byte size dtype × shape, or -1 on overflow: of the bytes, or of the
 * span (the sizes' product with 0 counted as 1, which the contiguous
 * strides of an empty tensor reach too). Dims past the first 16 are read
 * from the JSON array `shape` again. */
static int64_t entry_bytes(const st_entry *e, json_t *shape) {
  int64_t bytes = st_dtypes[e->dtype].size, span = bytes;
  for (int d = 0; d < e->ndim; d++) {
    int64_t s = d < KILN_MAX_DIMS ? e->sizes[d] : json_integer_value(json_array_get(shape, (size_t)d));
    if (s > 0 && span > INT64_MAX / s) return -1;
    span *= s > 0 ? s : 1;
    bytes *= s;
  }
  return bytes;
}

static int parse_entry(st_file *f, st_entry *e, const char *name, json_t *v) {
  *e = (st_entry){.name = name};
  if (!json_is_object(v)) return bad(f, name, "entry is not an object");
  json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
         *off = json_object_get(v, "data_offsets");
  if (!dt || !sh || !off) return bad(f, name, "entry needs dtype, shape and data_offsets");
  if (json_object_size(v) != 3) return bad(f, name, "entry has keys besides dtype, shape and data_offsets");
  if (parse_dtype(f, e, dt) || parse_shape(f, e, sh) || parse_offsets(f, e, off)) return api_status();
  int64_t bytes = entry_bytes(e, sh);
  if (bytes < 0) return bad(f, name, "shape overflows");
  if (bytes != e->end - e->begin)
    return api_error(
        KILN_ERR_IO, f->r.fn,
        "%s: bad safetensors header: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes but %s x shape "
        "needs %lld",
        f->r.path, name, (long long)e->begin, (long long)e->end, (long long)(e->end - e->begin),
        st_dtypes[e->dtype].name, (long long)bytes);
  return KILN_OK;
}

static int by_offset(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

/* The tensors cover [0, data_size) exactly: no hole, no overlap. */
static int check_coverage(st_file *f) {
  const st_entry **order = graph_malloc(sizeof *order * (size_t)(f->n > 0 ? f->n : 1));
  if (!order) return api_error(KILN_ERR_OOM, f->r.fn, "out of memory");
  for (int i = 0; i < f->n; i++) order[i] = &f->e[i];
  qsort(order, (size_t)f->n, sizeof *order, by_offset);
  int64_t at = 0;
  int st = KILN_OK;
  for (int i = 0; i < f->n && st == KILN_OK; i++) {
    const st_entry *e = order[i];
    if (e->begin < at)
      st = api_error(KILN_ERR_IO, f->r.fn,
                     "%s: bad safetensors header: tensor '%s' at bytes [%lld, %lld) overlaps tensor '%s'", f->r.path,
                     e->name, (long long)e->begin, (long long)e->end, order[i - 1]->name);
    else if (e->begin > at)
      st = api_error(KILN_ERR_IO, f->r.fn,
                     "%s: bad safetensors header: bytes [%lld, %lld) before tensor '%s' belong to no tensor", f->r.path,
                     (long long)at, (long long)e->begin, e->name);
    at = e->end;
  }
  free(order);
  if (st == KILN_OK && at != f->data_size)
    st = api_error(KILN_ERR_IO, f->r.fn, "%s: the tensors cover %lld bytes but the data section has %lld (%s)",
                   f->r.path, (long long)at, (long long)f->data_size,
                   at > f->data_size ? "truncated file" : "trailing bytes");
  return st;
}

/* ---------------------------------------------------------- open/close */

static void st_close(st_file *f) {
  io_close_read(&f->r);
  json_decref(f->root);
  free(f->e);
  f->root = NULL;
  f->e = NULL;
}

/* Reads and parses the header JSON into f->root. */
static int read_json(st_file *f) {
  unsigned char len8[8];
  if (f->r.size < 8)
    return api_error(KILN_ERR_IO, f->r.fn, "%s: file of %lld bytes is too short for a safetensors header", f->r.path,
                     (long long)f->r.size);
  if (io_read_at(&f->r, 0, len8, 8, "the header size") != KILN_OK) return api_status();
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
  if (n < 2 || n > ST_MAX_HEADER || n > (uint64_t)(f->r.size - 8))
    return api_error(KILN_ERR_IO, f->r.fn, "%s: header size %llu is impossible for a file of %lld bytes (limit %d)",
                     f->r.path, (unsigned long long)n, (long long)f->r.size, ST_MAX_HEADER);
  char *text = graph_malloc((size_t)n);
  if (!text) return api_error(KILN_ERR_OOM, f->r.fn, "out of memory");
  int st = io_read_at(&f->r, 8, text, (size_t)n, "the header");
  if (st == KILN_OK && text[0] != '{')
    st = api_error(KILN_ERR_IO, f->r.fn, "%s: the safetensors header does not start with '{'", f->r.path);
  if (st == KILN_OK) {
    json_error_t err;
    f->root = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!f->root)
      st = api_error(KILN_ERR_IO, f->r.fn, "%s: bad safetensors header JSON at byte %d: %s", f->r.path, err.position,
                     err.text);
    else if (!json_is_object(f->root))
      st = api_error(KILN_ERR_IO, f->r.fn, "%s: the safetensors header is not a JSON object", f->r.path);
  }
  free(text);
  f->data_off = 8 + (int64_t)n;
  f->data_size = f->r.size - f->data_off;
  return st;
}

/* Validates the whole header of the file f->r has open. */
static int st_validate(st_file *f, const char *fn) {
  int st = read_json(f);
  if (st == KILN_OK) {
    size_t cap = json_object_size(f->root);
    f->e = graph_malloc(sizeof *f->e * (cap > 0 ? cap : 1));
    if (!f->e) st = api_error(KILN_ERR_OOM, fn, "out of memory");
  }
  const char *key;
  json_t *v;
  if (st == KILN_OK) {
    json_object_foreach(f->root, key, v) {
      if (strcmp(key, "__metadata__") == 0) continue; /* accepted, ignored */
      if ((st = parse_entry(f, &f->e[f->n], key, v)) != KILN_OK) break;
      f->n++;
    }
  }
  if (st == KILN_OK) st = check_coverage(f);
  if (st != KILN_OK) st_close(f);
  return st;
}

/* Opens path and validates its whole header. */
static int st_open(st_file *f, const char *path, const char *fn) {
  *f = (st_file){0};
  if (io_open_read(&f->r, path, fn) != KILN_OK) return api_status();
  return st_validate(f, fn);
}

/* Errors (set) for an entry Kiln cannot hold. */
static int check_loadable(const st_file *f, const st_entry *e) {
  if (e->dtype >= KILN_DTYPE_COUNT)
    return api_error(KILN_ERR_DTYPE, f->r.fn, "%s: tensor '%s' has dtype %s, which Kiln does not have", f->r.path,
                     e->name, st_dtypes[e->dtype].name);
  if (e->ndim > KILN_MAX_DIMS)
    return api_error(KILN_ERR_UNSUPPORTED, f->r.fn, "%s: tensor '%s' has %d dims (Kiln tensors have at most %d)",
                     f->r.path, e->name, e->ndim, KILN_MAX_DIMS);
  return KILN_OK;
}

/* A new (untracked) tensor with e's data. */
static kiln_tensor *load_entry(st_file *f, const st_entry *e) {
  kiln_dtype d = (kiln_dtype)e->dtype;
  graph_view v = graph_view_contiguous(e->ndim, e->sizes);
  char what[300];
  snprintf(what, sizeof what, "tensor '%s'", e->name);
  return io_read_tensor(&f->r, f->data_off + e->begin, d, (e->end - e->begin) / graph_dtypes[d].size, &v, false, what);
}

/* -------------------------------------------------------------- load */

KILN_API kiln_tensor *kiln_load_safetensor(const char *path, const char *name) {
  static const char fn[] = "kiln_load_safetensor";
  if (!name) {
    api_error(KILN_ERR_ARG, fn, "name is NULL");
    return NULL;
  }
  st_file f;
  if (st_open(&f, path, fn) != KILN_OK) return NULL;
  kiln_tensor *t = NULL;
  int i = 0;
  while (i < f.n && strcmp(f.e[i].name, name) != 0) i++;
  if (i == f.n)
    api_error(KILN_ERR_ARG, fn, "%s: no tensor named '%s' (the file has %d tensors)", path, name, f.n);
  else if (check_loadable(&f, &f.e[i]) == KILN_OK)
    t = load_entry(&f, &f.e[i]);
  st_close(&f);
  return api_track(t);
}

KILN_API void kiln_safetensors_free(int n, char **names, kiln_tensor **tensors) {
  for (int i = 0; i < n; i++) {
    if (names) free(names[i]);
    if (tensors) kiln_release(tensors[i]);
  }
  free(names);
  free(tensors);
}

/* Every tensor of an open file into fresh arrays (names strdup'ed). */
static int load_all(st_file *f, char ***names_out, kiln_tensor ***ts_out) {
  for (int i = 0; i < f->n; i++)
    if (check_loadable(f, &f->e[i]) != KILN_OK) return api_status();
  if (f->n == 0) {
    *names_out = NULL;
    *ts_out = NULL;
    return KILN_OK;
  }
  size_t cap = (size_t)f->n;
  char **names = graph_calloc(cap, sizeof *names);
  kiln_tensor **ts = graph_calloc(cap, sizeof *ts);
  int st = names && ts ? KILN_OK : api_error(KILN_ERR_OOM, f->r.fn, "out of memory");
  for (int i = 0; i < f->n && st == KILN_OK; i++) {
    names[i] = graph_strdup(f->e[i].name);
    ts[i] = names[i] ? load_entry(f, &f->e[i]) : NULL;
    if (!names[i])
      st = api_error(KILN_ERR_OOM, f->r.fn, "out of memory");
    else if (!ts[i])
      st = api_status();
  }
  if (st != KILN_OK) {
    kiln_safetensors_free(f->n, names, ts);
    return st;
  }
  *names_out = names;
  *ts_out = ts;
  return KILN_OK;
}

/* kiln_load_safetensors once f is open and validated; closes it. */
static int load_file(st_file *f, int *n_out, char ***names_out, kiln_tensor ***tensors_out) {
  char **names = NULL;
  kiln_tensor **ts = NULL;
  int st = load_all(f, &names, &ts);
  if (st == KILN_OK) {
    *n_out = f->n;
    *names_out = names;
    *tensors_out = ts;
  }
  st_close(f);
  return st;
}

KILN_API int kiln_load_safetensors(const char *path, int *n_out, char ***names_out, kiln_tensor ***tensors_out) {
  static const char fn[] = "kiln_load_safetensors";
  if (!n_out || !names_out || !tensors_out) return api_error(KILN_ERR_ARG, fn, "an output pointer is NULL");
  st_file f;
  if (st_open(&f, path, fn) != KILN_OK) return api_status();
  return load_file(&f, n_out, names_out, tensors_out);
}

int io_load_safetensors_mem(const void *data, size_t size, const char *name, int *n_out, char ***names_out,
                            kiln_tensor ***tensors_out) {
  static const char fn[] = "kiln_load_safetensors";
  if (!n_out || !names_out || !tensors_out) return api_error(KILN_ERR_ARG, fn, "an output pointer is NULL");
  st_file f = {0};
  if (io_open_mem(&f.r, data, size, name, fn) != KILN_OK || st_validate(&f, fn) != KILN_OK) return api_status();
  return load_file(&f, n_out, names_out, tensors_out);
}

/* -------------------------------------------------------------- save */

typedef struct st_name {
  const char *name;
  int index;
} st_name;

static int by_name(const void *a, const void *b) {
  return strcmp(((const st_name *)a)->name, ((const st_name *)b)->name);
}

/* Arguments: non-NULL names and tensors, no reserved or repeated name. */
static int check_save_args(const char *path, int n, const char *const *names, kiln_tensor *const *ts, const char *fn) {
  if (!path) return api_error(KILN_ERR_ARG, fn, "path is NULL");
  if (n < 0 || (n > 0 && (!names || !ts)))
    return api_error(KILN_ERR_ARG, fn, "bad tensor list (n = %d, names %s, tensors %s)", n, names ? "set" : "NULL",
                     ts ? "set" : "NULL");
  for (int i = 0; i < n; i++) {
    if (!names[i]) return api_error(KILN_ERR_ARG, fn, "name %d is NULL", i);
    if (!ts[i]) return api_error(KILN_ERR_ARG, fn, "tensor %d ('%s') is NULL", i, names[i]);
    if (strcmp(names[i], "__metadata__") == 0)
      return api_error(KILN_ERR_ARG, fn, "name %d: \"__metadata__\" is reserved by the format", i);
  }
  st_name *sorted = graph_malloc(sizeof *sorted * (size_t)(n > 0 ? n : 1));
  if (!sorted) return api_error(KILN_ERR_OOM, fn, "out of memory");
  for (int i = 0; i < n; i++) sorted[i] = (st_name){names[i], i};
  qsort(sorted, (size_t)n, sizeof *sorted, by_name);
  int st = KILN_OK;
  for (int i = 1; i < n && st == KILN_OK; i++) {
    if (strcmp(sorted[i - 1].name, sorted[i].name) == 0) {
      int x = sorted[i - 1].index, y = sorted[i].index;
      int a = x < y ? x : y, b = x < y ? y : x;
      st = api_error(KILN_ERR_ARG, fn, "duplicate name '%s' (tensors %d and %d)", sorted[i].name, a, b);
    }
  }
  free(sorted);
  return st;
}

/* Data layout: begin offsets of each tensor, larger elements first (stable)
 * so every tensor is aligned to its element size. */
static void layout(int n, kiln_tensor *const *ts, int64_t *begin, int *order) {
  int k = 0;
  int64_t at = 0;
  for (int size = 8; size >= 1; size /= 2) {
    for (int i = 0; i < n; i++) {
      if (graph_dtypes[ts[i]->storage->dtype].size != size) continue;
      order[k++] = i;
      begin[i] = at;
      at += graph_view_numel(&ts[i]->view) * size;
    }
  }
}

static json_t *entry_json(const kiln_tensor *t, int64_t begin) {
  const graph_view *v = &t->view;
  json_t *shape = json_array();
  for (int d = 0; d < v->ndim; d++) json_array_append_new(shape, json_integer(v->sizes[d]));
  int64_t end = begin + graph_view_numel(v) * graph_dtypes[t->storage->dtype].size;
  return json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtypes[t->storage->dtype].name, "shape", shape, "data_offsets",
                   (json_int_t)begin, (json_int_t)end);
}

/* The header JSON in the caller's order, padded with spaces to a multiple
 * of 8 bytes; malloc'ed, NULL with the error set. */
static char *header_json(int n, const char *const *names, kiln_tensor *const *ts, const int64_t *begin, size_t *len,
                         const char *fn) {
  json_t *root = json_object();
  int st = root ? KILN_OK : api_error(KILN_ERR_OOM, fn, "out of memory");
  for (int i = 0; i < n && st == KILN_OK; i++) {
    json_t *e = entry_json(ts[i], begin[i]);
    if (!e)
      st = api_error(KILN_ERR_OOM, fn, "out of memory");
    else if (json_object_set_new(root, names[i], e) != 0)
      st = api_error(KILN_ERR_ARG, fn, "name %d is not valid UTF-8", i);
  }
  char *text = st == KILN_OK ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (st != KILN_OK) return NULL;
  size_t n0 = text ? strlen(text) : 0, padded = (n0 + 7) / 8 * 8;
  char *out = text ? graph_realloc(text, padded) : NULL;
  if (!out) {
    free(text);
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  memset(out + n0, ' ', padded - n0);
  *len = padded;
  return out;
}

static int write_file(const char *path, int n, kiln_tensor *const *ts, const char *header, size_t hlen,
                      const int *order, const char *fn) {
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  io_writer w;
  if (io_create(&w, path, fn) != KILN_OK) return w.status;
  io_write(&w, len8, 8);
  io_write(&w, header, hlen);
  for (int k = 0; k < n; k++) io_write_view(&w, ts[order[k]]);
  return io_finish(&w, KILN_OK);
}

KILN_API int kiln_save_safetensors(const char *path, int n, const char *const *names, kiln_tensor *const *ts) {
  static const char fn[] = "kiln_save_safetensors";
  if (check_save_args(path, n, names, ts, fn) != KILN_OK) return api_status();
  for (int i = 0; i < n; i++)
    if (!api_force(ts[i], fn)) return api_status();
  size_t cap = (size_t)(n > 0 ? n : 1);
  int64_t *begin = graph_malloc(sizeof *begin * cap);
  int *order = graph_malloc(sizeof *order * cap);
  int st = begin && order ? KILN_OK : api_error(KILN_ERR_OOM, fn, "out of memory");
  char *header = NULL;
  size_t hlen = 0;
  if (st == KILN_OK) {
    layout(n, ts, begin, order);
    header = header_json(n, names, ts, begin, &hlen, fn);
    if (!header) st = api_status();
  }
  if (st == KILN_OK) st = write_file(path, n, ts, header, hlen, order, fn);
  free(header);
  free(begin);
  free(order);
  return st;
}
