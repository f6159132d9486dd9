/*
 * fuzz_program.c — libFuzzer harness: the fuzz input is decoded into a
 * small program of Kiln calls (creation, views, in-place writes through
 * views, elementwise ops, reductions, index ops with in- and out-of-range
 * indices, forces and reads at any point), which runs twice — with fusion
 * on and with fusion off (rt_set_fusion, what KILN_FUSE=0 selects) — and
 * is checked after every call against the host reference (prog_ref.c):
 *
 *  - the status: a call fails exactly when the reference says it must,
 *    with the same kiln_status (an out-of-range index is KILN_ERR_INDEX)
 *    and a message naming a kiln_ function; a failed call changes nothing
 *    (every value read later is checked);
 *  - results: dtype and sizes, and for views the exact strides and offset
 *    over the same storage (Torch's view semantics); new results are
 *    contiguous;
 *  - values, whenever the program reads them and for every live tensor
 *    and its whole storage at the end: exact for integers and exact float
 *    ops, within the reference's error bound otherwise; and the fused and
 *    unfused runs read the same values.
 *
 * Any difference aborts (libFuzzer reports a crash) after printing the
 * pass, the step and the op. Shapes stay tiny (at most 4 dims of at most 6)
 * so that compiling kernels, not running them, dominates; compiled kernels
 * are cached across inputs.
 *
 * Input format: a sequence of instructions, each an opcode byte (modulo the
 * op table below) followed by its argument bytes; missing bytes read as 0.
 * Programs stop after MAX_STEPS instructions.
 *
 * Seeds: tests/fuzz/corpus/program (written by `fuzz_program -seeds=DIR`,
 * see docs/testing.md).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"
#include "prog_ref.h"
#include "rt_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_SLOTS 8
#define MAX_STEPS 40

typedef struct slot {
  bool live;
  pview v;
  kiln_tensor *k;
} slot;

typedef struct run {
  const uint8_t *p, *end;
  pmodel m;
  slot s[N_SLOTS];
  int pass, step;
  const char *op; /* the current instruction, for messages */
  uint8_t *seen;  /* bytes read in pass 0, compared in pass 1 */
  size_t n_seen, cap_seen, at_seen;
} run;

/* -------------------------------------------------------------- basics */

/* FUZZ_TRACE=1 prints every call's status (pass 0): what an input does. */
static bool trace;

static unsigned next(run *r) { return r->p < r->end ? *r->p++ : 0; }

/* An integer in [lo, hi] from one byte. */
static int64_t pick_int(run *r, int64_t lo, int64_t hi) { return lo + (int64_t)(next(r) % (unsigned)(hi - lo + 1)); }

static void mismatch(run *r, const char *fmt, ...) {
  fprintf(stderr, "fuzz_program: pass %d (%s), step %d (%s): ", r->pass, r->pass ? "fusion off" : "fusion on", r->step,
          r->op);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n  kiln_last_error: %s\n", kiln_last_error());
  abort();
}

/* The status of a call that returned tensor t. */
static int status_of(run *r, kiln_tensor *t) {
  kiln_status s = kiln_last_status();
  if (t && s != KILN_OK) mismatch(r, "a tensor and an error %s", kiln_status_name(s));
  if (!t && s == KILN_OK) mismatch(r, "NULL without an error");
  return t ? KILN_OK : (int)s;
}

/* Kiln's status against the reference's; clears the error. */
static void expect(run *r, int got, int want) {
  if (trace && r->pass == 0)
    fprintf(stderr, "fuzz_program: step %d %s: %s%s%s\n", r->step, r->op, kiln_status_name((kiln_status)got),
            got != KILN_OK ? ": " : "", got != KILN_OK ? kiln_last_error() : "");
  if (got != want)
    mismatch(r, "Kiln returned %s, the reference expects %s", kiln_status_name((kiln_status)got),
             kiln_status_name((kiln_status)want));
  if (got != KILN_OK && (kiln_last_status() != got || strncmp(kiln_last_error(), "kiln_", 5) != 0))
    mismatch(r, "error %s without its own message", kiln_status_name((kiln_status)got));
  kiln_clear_error();
}

/* "[2, 3] strides [3, 1] offset 0 of storage 4 (F32)" into buf. */
static const char *fmt_view(char *buf, size_t n, const pmodel *m, const pview *v) {
  int at = snprintf(buf, n, "[");
  for (int d = 0; d < v->ndim; d++) at += snprintf(buf + at, n - (size_t)at, d ? ", %lld" : "%lld", (long long)v->size[d]);
  at += snprintf(buf + at, n - (size_t)at, "] strides [");
  for (int d = 0; d < v->ndim; d++) at += snprintf(buf + at, n - (size_t)at, d ? ", %lld" : "%lld", (long long)v->stride[d]);
  snprintf(buf + at, n - (size_t)at, "] offset %lld of storage %d (%s)", (long long)v->off, v->st,
           kiln_dtype_name(pm_dtype(m, v)));
  return buf;
}

static slot *pick(run *r) {
  unsigned b = next(r);
  for (int i = 0; i < N_SLOTS; i++) {
    slot *s = &r->s[(b + (unsigned)i) % N_SLOTS];
    char buf[256];
    if (!s->live) continue;
    if (trace && r->pass == 0)
      fprintf(stderr, "fuzz_program:   operand slot %d: %s\n", (int)(s - r->s), fmt_view(buf, sizeof buf, &r->m, &s->v));
    return s;
  }
  return NULL;
}

static void put(run *r, unsigned dst, kiln_tensor *k, const pview *v) {
  slot *s = &r->s[dst % N_SLOTS];
  char buf[256];
  if (trace && r->pass == 0) fprintf(stderr, "fuzz_program:   -> slot %u: %s\n", dst % N_SLOTS, fmt_view(buf, sizeof buf, &r->m, v));
  kiln_release(s->k);
  *s = (slot){true, *v, k};
}

static bool same_storage(const kiln_tensor *a, const kiln_tensor *b) {
  kiln_storage *x = kiln_storage_of(a), *y = kiln_storage_of(b);
  kiln_storage_release(x), kiln_storage_release(y);
  return x == y;
}

/* t's dtype, sizes, and for a view strides, offset and storage. */
static void check_meta(run *r, kiln_tensor *t, const pview *v, const kiln_tensor *view_of) {
  if (kiln_dtype_of(t) != pm_dtype(&r->m, v))
    mismatch(r, "dtype %s, the reference has %s", kiln_dtype_name(kiln_dtype_of(t)),
             kiln_dtype_name(pm_dtype(&r->m, v)));
  if (kiln_dim(t) != v->ndim) mismatch(r, "%d dims, the reference has %d", kiln_dim(t), v->ndim);
  for (int d = 0; d < v->ndim; d++)
    if (kiln_size(t, d) != v->size[d]) mismatch(r, "size %lld at dim %d, the reference has %lld", (long long)kiln_size(t, d), d, (long long)v->size[d]);
  if (!view_of) {
    if (!kiln_is_contiguous(t)) mismatch(r, "a new result is not contiguous");
    return;
  }
  for (int d = 0; d < v->ndim; d++)
    if (kiln_stride(t, d) != v->stride[d])
      mismatch(r, "stride %lld at dim %d, the reference has %lld", (long long)kiln_stride(t, d), d, (long long)v->stride[d]);
  if (kiln_storage_offset(t) != v->off)
    mismatch(r, "offset %lld, the reference has %lld", (long long)kiln_storage_offset(t), (long long)v->off);
  if (!same_storage(t, view_of)) mismatch(r, "a view with a storage of its own");
}

/* ----------------------------------------------------------- values */

static void fmt_elem(char *buf, size_t n, kiln_dtype d, const uint8_t *p) {
  pval v = pd_load(d, p);
  if (pd_is_float(d)) snprintf(buf, n, "%.9g", v.f);
  else snprintf(buf, n, "%lld", (long long)v.i);
}

/* Pass 0 keeps what it read; pass 1 must read the same (within 2 e). */
static void record(run *r, kiln_dtype d, const uint8_t *buf, int64_t n, const pval *want) {
  size_t es = kiln_dtype_size(d), bytes = (size_t)n * es;
  if (bytes == 0) return;
  if (r->pass == 0) {
    if (r->n_seen + bytes > r->cap_seen) {
      r->cap_seen = (r->n_seen + bytes) * 2;
      r->seen = realloc(r->seen, r->cap_seen);
      if (!r->seen) abort();
    }
    memcpy(r->seen + r->n_seen, buf, bytes);
    r->n_seen += bytes;
    return;
  }
  if (r->at_seen + bytes > r->n_seen) mismatch(r, "read more values than the fused run");
  for (int64_t p = 0; p < n; p++)
    if (!pd_agree(d, r->seen + r->at_seen + p * es, buf + p * es, want[p].e)) {
      char a[64], b[64];
      fmt_elem(a, sizeof a, d, r->seen + r->at_seen + p * es);
      fmt_elem(b, sizeof b, d, buf + p * es);
      mismatch(r, "element %lld: %s with fusion, %s without", (long long)p, a, b);
    }
  r->at_seen += bytes;
}

/* Reads t and checks every element against the reference view v. */
static void check_values(run *r, kiln_tensor *t, const pview *v, const char *what) {
  static uint8_t buf[P_MAX_NUMEL * 8];
  static pval want[P_MAX_NUMEL];
  int64_t n = pv_numel(v), offs[P_MAX_NUMEL];
  kiln_dtype d = pm_dtype(&r->m, v);
  size_t es = kiln_dtype_size(d);
  expect(r, kiln_read(t, buf, (size_t)n * es), KILN_OK);
  pv_offsets(v, offs);
  for (int64_t p = 0; p < n; p++) {
    want[p] = r->m.s[v->st].x[offs[p]];
    if (pd_matches(d, want[p], buf + p * es)) continue;
    char got[64];
    fmt_elem(got, sizeof got, d, buf + p * es);
    mismatch(r, "%s: element %lld (storage %lld) is %s, the reference has %.17g / %lld (error bound %g)", what,
             (long long)p, (long long)offs[p], got, want[p].f, (long long)want[p].i, want[p].e);
  }
  record(r, d, buf, n, want);
}

/* ------------------------------------------------------- decoding data */

static const kiln_dtype dtypes[] = {KILN_F32, KILN_I32, KILN_I64, KILN_BOOL, KILN_F64, KILN_U8, KILN_I8, KILN_I16};
#define N_DTYPES ((unsigned)(sizeof dtypes / sizeof dtypes[0]))

static const double scalars[] = {0, 1, -1, 2, -2, 0.5, -0.25, 3, 7, -100, 1.5, 0.125, 100, NAN, INFINITY, -INFINITY};
#define N_SCALARS ((unsigned)(sizeof scalars / sizeof scalars[0]))

/* One of the eight dtypes above; a quarter of the bytes that give F32
 * or F64 give F16 or BF16 instead (added later: the other bytes keep the
 * meaning they had in stored inputs). */
static kiln_dtype pick_dtype(run *r) {
  unsigned b = next(r);
  kiln_dtype d = dtypes[b % N_DTYPES];
  if (b / N_DTYPES % 4 == 3 && (d == KILN_F32 || d == KILN_F64)) return d == KILN_F32 ? KILN_F16 : KILN_BF16;
  return d;
}
static double pick_scalar(run *r) { return scalars[next(r) % N_SCALARS]; }

/* 0-4 dims of 1-6 (0 now and then). */
static int pick_shape(run *r, int64_t *size) {
  int nd = (int)(next(r) % (P_MAX_DIMS + 1));
  for (int d = 0; d < nd; d++) {
    unsigned b = next(r);
    size[d] = b % 23 == 22 ? 0 : 1 + b % P_MAX_SIZE;
  }
  return nd;
}

static uint32_t xorshift(uint32_t *s) {
  *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
  return *s;
}

/* One element of dtype d: small values, now and then a special float or
 * an integer from the whole range. Stored into p; the reference's value
 * returned. */
static pval make_elem(kiln_dtype d, uint32_t *rng, bool wide, void *p) {
  static const double special[] = {NAN, INFINITY, -INFINITY, -0.0, 1e30, 1e-30};
  uint32_t x = xorshift(rng);
  if (pd_is_float(d)) { /* the value as the dtype holds it, exactly */
    double v = wide && x % 16 == 0 ? special[(x >> 4) % 6] : ((int)(x % 33) - 16) / 4.0;
    pval e = {.f = pd_convert((pval){.f = (double)(float)v}, KILN_F32, d).f};
    pd_encode(d, e.f, p);
    return e;
  }
  int64_t v = wide ? (int64_t)((uint64_t)x << 32 | xorshift(rng)) : d == KILN_BOOL ? x % 2 : (int64_t)(x % 21) - (d == KILN_U8 ? 0 : 10);
  pval e = pd_convert((pval){.i = v, .f = (double)v}, KILN_I64, d);
  memcpy(p, &e.i, kiln_dtype_size(d)); /* little-endian: the low bytes */
  if (d == KILN_BOOL) *(uint8_t *)p = (uint8_t)e.i;
  return e;
}

/* A realized tensor of dtype d and sizes [nd] from generated values; its
 * reference view in *v. NULL when the model is full. */
static kiln_tensor *make_data(run *r, kiln_dtype d, int nd, const int64_t *size, pview *v) {
  static uint8_t buf[P_MAX_NUMEL * 8];
  int st = pm_new_view(&r->m, d, nd, size, v);
  if (st < 0) return NULL;
  int64_t n = pv_numel(v);
  pstore *s = &r->m.s[st];
  unsigned seed = next(r), mode = next(r);
  uint32_t rng = 0x9e3779b9u ^ seed << 8 ^ mode;
  size_t es = kiln_dtype_size(d);
  for (int64_t i = 0; i < n; i++) s->x[i] = make_elem(d, &rng, mode % 8 == 7, buf + i * es);
  kiln_tensor *t = kiln_from_data(d, nd, size, buf);
  expect(r, status_of(r, t), KILN_OK);
  return t;
}

/* An index value for a dim of `size`: mostly in range, now and then past
 * either end (index_fill_ wraps the negative ones). */
static int64_t pick_index(run *r, int64_t size) {
  unsigned b = next(r);
  if (b % 8 < 6 && size > 0) return (int64_t)(b / 8) % size;
  if (b % 8 == 6) return size + (int64_t)(b / 8) % 3;
  return -1 - (int64_t)(b / 8) % (size + 2);
}

/* A 1-D (or gather's n-D) index tensor of I64 or I32 (now and then I16,
 * which Kiln refuses), realized or (bit 4 of its first byte) still
 * pending: index + 0, which the index op must force. */
static kiln_tensor *make_index(run *r, int nd, const int64_t *size, int64_t dim_size, pview *v) {
  static int64_t vals[P_MAX_NUMEL];
  static int32_t v32[P_MAX_NUMEL];
  static int16_t v16[P_MAX_NUMEL];
  unsigned b = next(r);
  kiln_dtype d = b % 8 == 7 ? KILN_I16 : b % 2 ? KILN_I32 : KILN_I64;
  int st = pm_new_view(&r->m, d, nd, size, v);
  if (st < 0) return NULL;
  int64_t n = pv_numel(v);
  pstore *s = &r->m.s[st];
  for (int64_t i = 0; i < n; i++) {
    vals[i] = pick_index(r, dim_size);
    v32[i] = (int32_t)vals[i], v16[i] = (int16_t)vals[i];
    s->x[i] = (pval){.i = vals[i], .f = (double)vals[i]};
  }
  const void *data = d == KILN_I64 ? (const void *)vals : d == KILN_I32 ? (const void *)v32 : (const void *)v16;
  kiln_tensor *t = kiln_from_data(d, nd, size, data);
  expect(r, status_of(r, t), KILN_OK);
  if (b & 16) { /* the same values, lazily (an integral scalar keeps the dtype) */
    kiln_tensor *lazy = kiln_add_scalar(t, 0);
    kiln_release(t);
    t = lazy;
    expect(r, status_of(r, t), KILN_OK);
  }
  return t;
}

/* A dim argument for an ndim-d tensor: [-ndim-1, ndim], the two ends
 * out of range. */
static int pick_dim(run *r, int ndim) { return (int)pick_int(r, -ndim - 1, ndim); }

/* --------------------------------------------------------- creation */

static void op_from_data(run *r) {
  unsigned dst = next(r);
  kiln_dtype d = pick_dtype(r);
  int64_t size[P_MAX_DIMS];
  int nd = pick_shape(r, size);
  pview v;
  kiln_tensor *t = make_data(r, d, nd, size, &v);
  if (t) put(r, dst, t, &v);
}

static void op_full(run *r) {
  unsigned dst = next(r), kind = next(r);
  kiln_dtype d = pick_dtype(r);
  int64_t size[P_MAX_DIMS];
  int nd = pick_shape(r, size);
  double value = kind % 3 == 0 ? 0 : kind % 3 == 1 ? 1 : pick_scalar(r);
  pview v;
  if (pm_new_view(&r->m, d, nd, size, &v) < 0) return;
  pr_fill(&r->m, &v, value);
  kiln_tensor *t = kind % 3 == 0   ? kiln_zeros(d, nd, size)
                   : kind % 3 == 1 ? kiln_ones(d, nd, size)
                                   : kiln_full(d, nd, size, value);
  expect(r, status_of(r, t), KILN_OK);
  check_meta(r, t, &v, NULL);
  put(r, dst, t, &v);
}

static void op_arange(run *r) {
  unsigned dst = next(r);
  kiln_dtype d = pick_dtype(r);
  double start = (double)pick_int(r, -3, 3), step = pd_is_float(d) && next(r) % 2 ? 0.5 : (double)pick_int(r, 1, 2);
  int64_t n = pick_int(r, 0, P_MAX_SIZE);
  kiln_tensor *t = kiln_arange(d, start, start + (double)n * step, step);
  int want = d == KILN_BOOL ? KILN_ERR_DTYPE : KILN_OK;
  expect(r, status_of(r, t), want);
  if (!t) return;
  pview v;
  if (pm_new_view(&r->m, d, 1, &n, &v) < 0) return kiln_release(t);
  for (int64_t i = 0; i < n; i++) r->m.s[v.st].x[i] = pd_from_double(start + (double)i * step, d);
  check_meta(r, t, &v, NULL);
  put(r, dst, t, &v);
}

static void op_scalar(run *r) {
  unsigned dst = next(r);
  kiln_dtype d = pick_dtype(r);
  double value = pick_scalar(r);
  pview v;
  if (pm_new_view(&r->m, d, 0, NULL, &v) < 0) return;
  pr_fill(&r->m, &v, value);
  kiln_tensor *t = kiln_scalar(d, value);
  expect(r, status_of(r, t), KILN_OK);
  check_meta(r, t, &v, NULL);
  put(r, dst, t, &v);
}

/* ------------------------------------------------------------- views */

/* A view op's outcome: the reference's status want and view rv against
 * Kiln's result t of viewing slot s. */
static void finish_view(run *r, unsigned dst, slot *s, kiln_tensor *t, int want, const pview *rv) {
  expect(r, status_of(r, t), want);
  if (!t) return;
  check_meta(r, t, rv, s->k);
  /* a view past the model's element bound (an expand of a long dim) is
   * not kept: every slot fits the reference's fixed arrays */
  if (pv_numel(rv) > P_MAX_NUMEL) return kiln_release(t);
  put(r, dst, t, rv);
}

static void op_narrow(run *r) {
  unsigned dst = next(r);
  slot *s = pick(r);
  if (!s) return;
  int dim = pick_dim(r, s->v.ndim);
  int64_t start = pick_int(r, -P_MAX_SIZE - 1, P_MAX_SIZE + 1), len = pick_int(r, -1, P_MAX_SIZE);
  pview v;
  int want = pr_narrow(&s->v, dim, start, len, &v);
  finish_view(r, dst, s, kiln_narrow(s->k, dim, start, len), want, &v);
}

static void op_select(run *r) {
  unsigned dst = next(r);
  slot *s = pick(r);
  if (!s) return;
  int dim = pick_dim(r, s->v.ndim);
  int64_t index = pick_int(r, -P_MAX_SIZE - 1, P_MAX_SIZE);
  pview v;
  int want = pr_select(&s->v, dim, index, &v);
  finish_view(r, dst, s, kiln_select(s->k, dim, index), want, &v);
}

static void op_slice(run *r) {
  unsigned dst = next(r);
  slot *s = pick(r);
  if (!s) return;
  int dim = pick_dim(r, s->v.ndim);
  int64_t start = pick_int(r, -8, 8), end = pick_int(r, -8, 8), step = pick_int(r, 0, 3);
  pview v;
  int want = pr_slice(&s->v, dim, start, end, step, &v);
  finish_view(r, dst, s, kiln_slice(s->k, dim, start, end, step), want, &v);
}

static void op_transpose(run *r) {
  unsigned dst = next(r);
  slot *s = pick(r);
  if (!s) return;
  int d0 = pick_dim(r, s->v.ndim), d1 = pick_dim(r, s->v.ndim);
  pview v;
  int want = pr_transpose(&s->v, d0, d1, &v);
  finish_view(r, dst, s, kiln_transpose(s->k, d0, d1), want, &v);
}

static void op_permute(run *r) {
  unsigned dst = next(r);
  slot *s = pick(r);
  if (!s) return;
  int dims[P_MAX_DIMS], nd = s->v.ndim;
  for (int i = 0; i < nd; i++) dims[i] = i;
  for (int i = nd - 1; i > 0; i--) { /* a permutation, now and then a repeat or a negative dim */
    int j = (int)(next(r) % (unsigned)(i + 1)), t = dims[i];
    dims[i] = dims[j], dims[j] = t;
  }
  unsigned twist = next(r);
  if (nd > 1 && twist % 8 == 0) dims[0] = dims[1];
  if (nd > 0 && twist % 8 == 1) dims[nd - 1] -= nd;
  pview v;
  int want = pr_permute(&s->v, dims, &v);
  finish_view(r, dst, s, kiln_permute(s->k, nd, dims), want, &v);
}

static void op_expand(run *r) {
  unsigned dst = next(r);
  slot *s = pick(r);
  if (!s) return;
  int nd = (int)pick_int(r, s->v.ndim, P_MAX_DIMS);
  int64_t sizes[P_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    int k = i - (nd - s->v.ndim);
    unsigned b = next(r);
    int64_t cur = k >= 0 ? s->v.size[k] : 1;
    sizes[i] = b % 4 == 0 ? -1 : (cur == 1 || b % 4 == 1) ? (int64_t)(b / 4) % (P_MAX_SIZE + 1) : cur;
  }
  pview v;
  int want = pr_expand(&s->v, nd, sizes, &v);
  finish_view(r, dst, s, kiln_expand(s->k, nd, sizes), want, &v);
}

static void op_unfold(run *r) {
  unsigned dst = next(r);
  slot *s = pick(r);
  if (!s || s->v.ndim == P_MAX_DIMS) return;
  int dim = pick_dim(r, s->v.ndim);
  int64_t size = pick_int(r, -1, 4), step = pick_int(r, 0, 3);
  pview v;
  int want = pr_unfold(&s->v, dim, size, step, &v);
  finish_view(r, dst, s, kiln_unfold(s->k, dim, size, step), want, &v);
}

static void op_as_strided(run *r) {
  unsigned dst = next(r);
  slot *s = pick(r);
  if (!s) return;
  int nd = (int)pick_int(r, 0, P_MAX_DIMS);
  int64_t sizes[P_MAX_DIMS], strides[P_MAX_DIMS], off = pick_int(r, 0, 7);
  for (int i = 0; i < nd; i++) sizes[i] = pick_int(r, 0, 4), strides[i] = pick_int(r, 0, 5);
  pview v;
  int want = pr_as_strided(&r->m, &s->v, nd, sizes, strides, off, &v);
  finish_view(r, dst, s, kiln_as_strided(s->k, nd, sizes, strides, off), want, &v);
}

static void op_unsqueeze(run *r) {
  unsigned dst = next(r), kind = next(r);
  slot *s = pick(r);
  if (!s) return;
  pview v;
  if (kind % 2 && s->v.ndim < P_MAX_DIMS) {
    int dim = pick_dim(r, s->v.ndim + 1);
    int want = pr_unsqueeze(&s->v, dim, &v);
    finish_view(r, dst, s, kiln_unsqueeze(s->k, dim), want, &v);
  } else {
    int dim = pick_dim(r, s->v.ndim);
    int want = pr_squeeze_dim(&s->v, dim, &v);
    finish_view(r, dst, s, kiln_squeeze_dim(s->k, dim), want, &v);
  }
}

/* New sizes for n elements: up to 4 factors, one maybe -1, now and then
 * a wrong product. */
static int pick_reshape(run *r, int64_t n, int64_t *sizes) {
  int nd = (int)pick_int(r, 0, P_MAX_DIMS);
  int64_t left = n;
  for (int i = 0; i < nd; i++) {
    int64_t f = 1;
    if (i == nd - 1) f = left;
    else
      for (int64_t c = pick_int(r, 1, P_MAX_SIZE); c > 1; c--)
        if (left % c == 0) { f = c; break; }
    sizes[i] = f;
    left = f ? left / f : left;
  }
  unsigned twist = next(r);
  if (nd > 0 && twist % 4 == 0) sizes[twist / 4 % (unsigned)nd] = -1;
  if (nd > 0 && twist % 16 == 1) sizes[0] += 1;
  return nd;
}

static void op_view(run *r) {
  unsigned dst = next(r), kind = next(r);
  slot *s = pick(r);
  if (!s) return;
  int64_t sizes[P_MAX_DIMS];
  int nd = pick_reshape(r, pv_numel(&s->v), sizes);
  bool copy = false;
  pview v;
  int want = pr_view(&s->v, nd, sizes, &v, &copy);
  if (kind % 2 == 0) { /* kiln_view: no copy, an error instead */
    finish_view(r, dst, s, kiln_view(s->k, nd, sizes), want == KILN_OK && copy ? KILN_ERR_SHAPE : want, &v);
    return;
  }
  kiln_tensor *t = kiln_reshape(s->k, nd, sizes);
  if (want != KILN_OK || !copy) return finish_view(r, dst, s, t, want, &v);
  pview c; /* a contiguous copy, seen with the new sizes */
  expect(r, status_of(r, t), pr_copy_as(&r->m, &s->v, pm_dtype(&r->m, &s->v), &c));
  if (c.st < 0) return kiln_release(t);
  v = pv_contiguous(c.st, v.ndim, v.size);
  check_meta(r, t, &v, NULL);
  put(r, dst, t, &v);
}

/* contiguous (itself when already contiguous), clone, to_dtype (itself
 * for the same dtype). */
static void op_copy_as(run *r) {
  unsigned dst = next(r), kind = next(r) % 3;
  slot *s = pick(r);
  if (!s) return;
  kiln_dtype d = kind == 2 ? pick_dtype(r) : pm_dtype(&r->m, &s->v);
  bool alias = kind == 0 ? pv_is_contiguous(&s->v) : kind == 2 && d == pm_dtype(&r->m, &s->v);
  kiln_tensor *t = kind == 0 ? kiln_contiguous(s->k) : kind == 1 ? kiln_clone(s->k) : kiln_to_dtype(s->k, d);
  if (alias) return finish_view(r, dst, s, t, KILN_OK, &s->v);
  pview v;
  expect(r, status_of(r, t), pr_copy_as(&r->m, &s->v, d, &v));
  if (v.st < 0) return kiln_release(t);
  check_meta(r, t, &v, NULL);
  put(r, dst, t, &v);
}

/* ------------------------------------------------------- computation */

/* The outcome of an op with a new result: status, then the result. */
static void finish_new(run *r, unsigned dst, kiln_tensor *t, int want, const pview *v) {
  expect(r, status_of(r, t), want);
  if (!t) return;
  if (v->st < 0) return kiln_release(t);
  check_meta(r, t, v, NULL);
  put(r, dst, t, v);
}

typedef kiln_tensor *(*unary_fn)(kiln_tensor *);
static const unary_fn unary_fns[PU_COUNT] = {
    [PU_NEG] = kiln_neg,     [PU_ABS] = kiln_abs,     [PU_SIGN] = kiln_sign,         [PU_RELU] = kiln_relu,
    [PU_FLOOR] = kiln_floor, [PU_CEIL] = kiln_ceil,   [PU_ROUND] = kiln_round,       [PU_TRUNC] = kiln_trunc,
    [PU_SQRT] = kiln_sqrt,   [PU_EXP] = kiln_exp,     [PU_TANH] = kiln_tanh,         [PU_SIGMOID] = kiln_sigmoid,
    [PU_RECIPROCAL] = kiln_reciprocal, [PU_LOGICAL_NOT] = kiln_logical_not,
};

typedef kiln_tensor *(*binary_fn)(kiln_tensor *, kiln_tensor *);
static const binary_fn binary_fns[PB_COUNT] = {
    [PB_ADD] = kiln_add,     [PB_SUB] = kiln_sub,     [PB_MUL] = kiln_mul,           [PB_DIV] = kiln_div,
    [PB_MAXIMUM] = kiln_maximum, [PB_MINIMUM] = kiln_minimum, [PB_FMOD] = kiln_fmod, [PB_REMAINDER] = kiln_remainder,
    [PB_EQ] = kiln_eq,       [PB_NE] = kiln_ne,       [PB_LT] = kiln_lt,             [PB_LE] = kiln_le,
    [PB_GT] = kiln_gt,       [PB_GE] = kiln_ge,       [PB_AND] = kiln_logical_and,   [PB_OR] = kiln_logical_or,
    [PB_XOR] = kiln_logical_xor,
};

typedef kiln_tensor *(*scalar_fn)(kiln_tensor *, double);
static const scalar_fn scalar_fns[PB_COUNT] = {
    [PB_ADD] = kiln_add_scalar, [PB_SUB] = kiln_sub_scalar, [PB_MUL] = kiln_mul_scalar, [PB_DIV] = kiln_div_scalar,
    [PB_MAXIMUM] = kiln_maximum_scalar, [PB_MINIMUM] = kiln_minimum_scalar, [PB_EQ] = kiln_eq_scalar,
    [PB_NE] = kiln_ne_scalar, [PB_LT] = kiln_lt_scalar, [PB_LE] = kiln_le_scalar, [PB_GT] = kiln_gt_scalar,
    [PB_GE] = kiln_ge_scalar,
};

static void op_unary(run *r) {
  unsigned dst = next(r);
  punary op = (punary)(next(r) % PU_COUNT);
  slot *s = pick(r);
  if (!s) return;
  pview v;
  int want = pr_unary(&r->m, op, &s->v, &v);
  finish_new(r, dst, unary_fns[op](s->k), want, &v);
}

static void op_binary(run *r) {
  unsigned dst = next(r);
  pbinary op = (pbinary)(next(r) % PB_COUNT);
  slot *a = pick(r), *b = pick(r);
  if (!a || !b) return;
  pview v;
  int want = pr_binary(&r->m, op, (poperand){&a->v, 0}, (poperand){&b->v, 0}, &v);
  finish_new(r, dst, binary_fns[op](a->k, b->k), want, &v);
}

static void op_binary_scalar(run *r) {
  unsigned dst = next(r);
  pbinary op = (pbinary)(next(r) % PB_COUNT);
  slot *a = pick(r);
  double s = pick_scalar(r);
  if (!a || !scalar_fns[op]) return;
  pview v;
  int want = pr_binary(&r->m, op, (poperand){&a->v, 0}, (poperand){NULL, s}, &v);
  finish_new(r, dst, scalar_fns[op](a->k, s), want, &v);
}

static void op_where(run *r) {
  unsigned dst = next(r);
  slot *c = pick(r), *a = pick(r), *b = pick(r);
  if (!c || !a || !b) return;
  pview v;
  int want = pr_where(&r->m, &c->v, &a->v, &b->v, &v);
  finish_new(r, dst, kiln_where(c->k, a->k, b->k), want, &v);
}

static void op_clamp(run *r) {
  unsigned dst = next(r);
  slot *a = pick(r);
  double lo = pick_scalar(r), hi = pick_scalar(r);
  if (!a) return;
  pview v;
  int want = pr_clamp(&r->m, &a->v, lo, hi, &v);
  finish_new(r, dst, kiln_clamp(a->k, lo, hi), want, &v);
}

typedef kiln_tensor *(*reduce_fn)(kiln_tensor *, int, const int *, bool);
static const reduce_fn reduce_fns[PR_COUNT] = {
    [PR_SUM] = kiln_sum, [PR_PROD] = kiln_prod, [PR_AMAX] = kiln_amax, [PR_AMIN] = kiln_amin,
    [PR_MEAN] = kiln_mean, [PR_ALL] = kiln_all, [PR_ANY] = kiln_any,
};

static void op_reduce(run *r) {
  unsigned dst = next(r), bits = next(r), keep = next(r) % 2;
  preduce op = (preduce)(next(r) % PR_COUNT);
  slot *a = pick(r);
  if (!a) return;
  int dims[P_MAX_DIMS], n = 0, nd = a->v.ndim;
  unsigned mask = 0;
  for (int d = 0; d < nd; d++) /* distinct dims, written negative now and then */
    if (bits >> d & 1) dims[n++] = bits >> (4 + d) & 1 ? d - nd : d, mask |= 1u << d;
  pview v;
  int want = pr_reduce(&r->m, op, &a->v, mask, keep, &v);
  finish_new(r, dst, reduce_fns[op](a->k, n, dims, keep), want, &v);
}

static void op_argmax(run *r) {
  unsigned dst = next(r), kind = next(r);
  slot *a = pick(r);
  if (!a) return;
  int dim = pick_dim(r, a->v.ndim), d = pr_wrap_dim(dim, a->v.ndim);
  bool max = kind % 2, keep = kind / 2 % 2;
  pview v = {.st = -1};
  int want = d < 0 ? KILN_ERR_ARG : pr_argmax(&r->m, max, &a->v, d, keep, &v);
  finish_new(r, dst, max ? kiln_argmax(a->k, dim, keep) : kiln_argmin(a->k, dim, keep), want, &v);
}

static void op_index_select(run *r) {
  unsigned dst = next(r);
  slot *a = pick(r);
  if (!a) return;
  int dim = pick_dim(r, a->v.ndim), d = pr_wrap_dim(dim, a->v.ndim);
  int64_t n = pick_int(r, 0, 4);
  pview iv, v = {.st = -1};
  kiln_tensor *idx = make_index(r, 1, &n, d >= 0 && a->v.ndim ? a->v.size[d] : 1, &iv);
  if (!idx) return;
  int want = a->v.ndim == 0 ? KILN_ERR_SHAPE : d < 0 ? KILN_ERR_ARG : pr_index_select(&r->m, &a->v, d, &iv, &v);
  finish_new(r, dst, kiln_index_select(a->k, dim, idx), want, &v);
  kiln_release(idx);
}

static void op_gather(run *r) {
  unsigned dst = next(r);
  slot *a = pick(r);
  if (!a) return;
  int dim = pick_dim(r, a->v.ndim), d = pr_wrap_dim(dim, a->v.ndim), nd = a->v.ndim;
  int64_t size[P_MAX_DIMS];
  for (int k = 0; k < nd; k++) { /* off dim: at most t's size, now and then one more */
    unsigned grow = k == d ? 0 : next(r) % 16 == 0;
    size[k] = pick_int(r, 0, k == d ? 4 : a->v.size[k] + grow);
  }
  pview iv, v = {.st = -1};
  kiln_tensor *idx = make_index(r, nd, size, d >= 0 && nd ? a->v.size[d] : 1, &iv);
  if (!idx) return;
  int want = nd == 0 ? KILN_ERR_SHAPE : d < 0 ? KILN_ERR_ARG : pr_gather(&r->m, &a->v, d, &iv, &v);
  finish_new(r, dst, kiln_gather(a->k, dim, idx), want, &v);
  kiln_release(idx);
}

/* --------------------------------------------------- in-place writes */

/* Kiln leaves unspecified which write lands where a written view repeats
 * a storage element with nonzero strides (unfold, as_strided): such
 * targets are skipped. A stride-0 repeat is an error Kiln must report. */
static bool ambiguous_target(const pview *v) { return !pv_repeats(v) && pv_overlaps(v); }

static void op_fill(run *r) {
  slot *t = pick(r);
  double value = pick_scalar(r);
  if (!t) return;
  expect(r, kiln_fill_(t->k, value), pr_fill(&r->m, &t->v, value));
}

static void op_copy(run *r) {
  slot *dst = pick(r), *src = pick(r);
  if (!dst || !src || ambiguous_target(&dst->v)) return;
  expect(r, kiln_copy_(dst->k, src->k), pr_copy(&r->m, &dst->v, &src->v));
}

static void op_index_fill(run *r) {
  slot *t = pick(r);
  if (!t || ambiguous_target(&t->v)) return;
  int dim = pick_dim(r, t->v.ndim), d = pr_wrap_dim(dim, t->v.ndim);
  int64_t n = pick_int(r, 0, 4);
  double value = pick_scalar(r);
  pview iv;
  kiln_tensor *idx = make_index(r, 1, &n, d >= 0 && t->v.ndim ? t->v.size[d] : 1, &iv);
  if (!idx) return;
  int want = t->v.ndim == 0 ? KILN_ERR_SHAPE : d < 0 ? KILN_ERR_ARG : pr_index_fill(&r->m, &t->v, d, &iv, value);
  expect(r, kiln_index_fill_(t->k, dim, idx, value), want);
  kiln_release(idx);
}

/* index_add_ / index_copy_ with a fresh src (now and then of a wrong size
 * or another dtype). */
static void op_index_put(run *r) {
  unsigned kind = next(r);
  slot *t = pick(r);
  if (!t || ambiguous_target(&t->v)) return;
  int dim = pick_dim(r, t->v.ndim), d = pr_wrap_dim(dim, t->v.ndim), nd = t->v.ndim;
  int64_t n = pick_int(r, 0, 4), size[P_MAX_DIMS];
  for (int k = 0; k < nd; k++) size[k] = k == d ? n : t->v.size[k];
  if (nd > 0 && kind % 16 == 15) size[0]++;
  pview iv, sv;
  kiln_tensor *idx = make_index(r, 1, &n, d >= 0 && nd ? t->v.size[d] : 1, &iv);
  kiln_tensor *src = idx ? make_data(r, kind / 2 % 4 == 0 ? pick_dtype(r) : pm_dtype(&r->m, &t->v), nd, size, &sv) : NULL;
  if (src) {
    bool add = kind % 2;
    int want = nd == 0 ? KILN_ERR_SHAPE : d < 0 ? KILN_ERR_ARG : pr_index_put(&r->m, &t->v, d, &iv, &sv, add);
    expect(r, add ? kiln_index_add_(t->k, dim, idx, src) : kiln_index_copy_(t->k, dim, idx, src), want);
  }
  kiln_release(idx), kiln_release(src);
}

/* masked_fill_ with a mask of t's sizes, broadcasting sizes, t's count in
 * another shape (Torch7), U8, or any live tensor. */
static void op_masked_fill(run *r) {
  unsigned kind = next(r) % 8;
  slot *t = pick(r);
  double value = pick_scalar(r);
  if (!t || ambiguous_target(&t->v)) return;
  int64_t size[P_MAX_DIMS], n = pv_numel(&t->v);
  int nd = t->v.ndim;
  for (int k = 0; k < nd; k++) size[k] = kind == 4 && next(r) % 2 ? 1 : t->v.size[k];
  pview mv;
  kiln_tensor *mask = NULL;
  slot *other = kind == 6 ? pick(r) : NULL;
  if (other) mask = kiln_retain(other->k), mv = other->v;
  else if (kind == 5) mask = make_data(r, KILN_BOOL, 1, &n, &mv);
  else mask = make_data(r, kind == 7 ? KILN_U8 : KILN_BOOL, nd, size, &mv);
  if (!mask) return;
  expect(r, kiln_masked_fill_(t->k, mask, value), pr_masked_fill(&r->m, &t->v, &mv, value));
  kiln_release(mask);
}

static void pick_position(run *r, const pview *v, int64_t *index) {
  for (int d = 0; d < v->ndim; d++) index[d] = pick_int(r, -v->size[d] - 1, v->size[d]);
}

static void op_set(run *r) {
  slot *t = pick(r);
  double value = pick_scalar(r);
  if (!t) return;
  int64_t index[P_MAX_DIMS];
  pick_position(r, &t->v, index);
  expect(r, kiln_set(t->k, index, value), pr_set(&r->m, &t->v, index, value));
}

/* ------------------------------------------------------ forces, reads */

static void op_get(run *r) {
  slot *t = pick(r);
  if (!t) return;
  int64_t index[P_MAX_DIMS];
  pick_position(r, &t->v, index);
  pval want;
  double got = NAN;
  int st = kiln_get_f64(t->k, index, &got);
  expect(r, st, pr_get(&r->m, &t->v, index, &want));
  if (st != KILN_OK) return;
  kiln_dtype d = pm_dtype(&r->m, &t->v);
  uint8_t elem[8];
  if (pd_is_float(d)) pd_encode(d, got, elem); /* exact: got holds a value of d */
  else if (!isinf(want.e) && (double)want.i != got) /* integers come back as doubles */
    mismatch(r, "kiln_get_f64 gave %.17g, the reference has %lld", got, (long long)want.i);
  if (pd_is_float(d) && !pd_matches(d, want, elem))
    mismatch(r, "kiln_get_f64 gave %.17g, the reference has %.17g (error bound %g)", got, want.f, want.e);
}

static void op_read(run *r) {
  slot *t = pick(r);
  if (t) check_values(r, t->k, &t->v, "kiln_read");
}

static void op_realize(run *r) {
  slot *a = pick(r), *b = pick(r);
  if (!a || !b) return;
  if (next(r) % 2) {
    expect(r, kiln_realize(a->k), KILN_OK);
  } else {
    kiln_tensor *both[2] = {a->k, b->k};
    expect(r, kiln_realize_many(both, 2), KILN_OK);
  }
}

static void op_release(run *r) {
  slot *t = pick(r);
  if (!t) return;
  kiln_release(t->k);
  *t = (slot){0};
}

/* ------------------------------------------------------------ program */

typedef struct op_entry {
  const char *name;
  void (*fn)(run *r);
} op_entry;

static const op_entry ops[] = {
    {"from_data", op_from_data}, {"full", op_full},         {"arange", op_arange},
    {"scalar", op_scalar},       {"narrow", op_narrow},     {"select", op_select},
    {"slice", op_slice},         {"transpose", op_transpose}, {"permute", op_permute},
    {"expand", op_expand},       {"unfold", op_unfold},     {"as_strided", op_as_strided},
    {"squeeze/unsqueeze", op_unsqueeze}, {"view/reshape", op_view}, {"contiguous/clone/to_dtype", op_copy_as},
    {"unary", op_unary},         {"binary", op_binary},     {"binary_scalar", op_binary_scalar},
    {"where", op_where},         {"clamp", op_clamp},       {"reduce", op_reduce},
    {"argmax/argmin", op_argmax}, {"index_select", op_index_select}, {"gather", op_gather},
    {"fill_", op_fill},          {"copy_", op_copy},        {"index_fill_", op_index_fill},
    {"index_add_/index_copy_", op_index_put}, {"masked_fill_", op_masked_fill}, {"set", op_set},
    {"get", op_get},             {"read", op_read},         {"realize", op_realize},
    {"release", op_release},
};
#define N_OPS ((unsigned)(sizeof ops / sizeof ops[0]))

/* Every live tensor, then the whole storage under each. */
static void final_checks(run *r) {
  r->op = "final read";
  for (int i = 0; i < N_SLOTS; i++)
    if (r->s[i].live) check_values(r, r->s[i].k, &r->s[i].v, "final read");
  r->op = "final read of whole storages";
  bool done[P_MAX_STORES] = {false};
  for (int i = 0; i < N_SLOTS; i++) {
    slot *s = &r->s[i];
    if (!s->live || done[s->v.st]) continue;
    done[s->v.st] = true;
    int64_t n = r->m.s[s->v.st].n, one = 1;
    kiln_tensor *all = kiln_as_strided(s->k, 1, &n, &one, 0);
    expect(r, status_of(r, all), KILN_OK);
    pview v = pv_contiguous(s->v.st, 1, &n);
    check_values(r, all, &v, "whole storage");
    kiln_release(all);
  }
}

static void run_program(run *r, const uint8_t *data, size_t size, int pass) {
  r->p = data, r->end = data + size, r->pass = pass, r->at_seen = 0;
  rt_set_fusion(pass == 0);
  kiln_clear_error();
  for (r->step = 0; r->p < r->end && r->step < MAX_STEPS && r->m.n < P_MAX_STORES - 4; r->step++) {
    const op_entry *e = &ops[next(r) % N_OPS];
    r->op = e->name;
    e->fn(r);
  }
  final_checks(r);
  if (pass == 1 && r->at_seen != r->n_seen) mismatch(r, "read fewer values than the fused run");
  for (int i = 0; i < N_SLOTS; i++) kiln_release(r->s[i].k);
  memset(r->s, 0, sizeof r->s);
  pm_reset(&r->m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static run r; /* large: the model's arrays */
  const char *t = getenv("FUZZ_TRACE");
  trace = t && *t && strcmp(t, "0") != 0;
  r.n_seen = 0;
  run_program(&r, data, size, 0);
  run_program(&r, data, size, 1);
  rt_set_fusion(-1);
  kiln_clear_error();
  return 0;
}
