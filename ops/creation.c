/*
 * creation.c — new tensors and storages: constants (empty, zeros, ones,
 * full, scalar, and the *_like forms), ranges (arange, linspace), random
 * tensors (rand, randn, randint, randperm, rand_like, randn_like, and the
 * in-place uniform_, normal_),
 * tensors over caller memory (from_data, from_blob) or over an existing
 * storage, set_/resize_, and the dtype helpers of the public API.
 *
 * Constants and arange are lazy sources: a FULL or ARANGE node producing
 * the flat storage [numel], viewed contiguously with the requested sizes.
 * linspace, the random tensors and from_data fill a fresh buffer on the
 * host now.
 *
 * Numerics follow PyTorch (aten/src/ATen/native/RangeFactories*.cpp):
 *  - full converts its value as a cast does (I32 2.7 → 2, BOOL v != 0);
 *  - arange: for float dtypes the length is ceil((end-start)/step) in
 *    double and element i = start + i*step; for integer dtypes start, end
 *    and step are first truncated (Scalar::to<int64_t>), I64's length uses
 *    integer arithmetic, the other integers' the double formula;
 *  - linspace: step = (end-start)/(steps-1); element i = start + i*step for
 *    i < steps/2, else end - (steps-1-i)*step, in double (so F32/F64 are
 *    within 1 ulp of numpy.linspace), integer dtypes truncate start/end
 *    first and the result;
 *  - rand/randn: a process-wide xoshiro256** generator (seeded through
 *    splitmix64, default seed Torch's 67280421310721), uniform values with
 *    as many random bits as the dtype's mantissa holds (so never 1.0 after
 *    rounding), normals by Box-Muller. Values differ from Torch's;
 *  - randint/randperm draw from the same generator: an integer uniform in
 *    [0, range) by rejection (no modulo bias), randperm by Fisher-Yates
 *    (Knuth's algorithm P, from the last element down).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "runtime.h"

/* ------------------------------------------------------------- dtypes */

KILN_API const char *kiln_dtype_name(kiln_dtype d) { return graph_dtype_valid(d) ? graph_dtypes[d].name : "?"; }

KILN_API size_t kiln_dtype_size(kiln_dtype d) { return graph_dtype_valid(d) ? (size_t)graph_dtypes[d].size : 0; }

KILN_API int kiln_set_default_dtype(kiln_dtype d) {
  if (!graph_dtype_valid(d) || !graph_is_float(d))
    return api_error(KILN_ERR_DTYPE, "kiln_set_default_dtype", "dtype %d (%s) is not f16, bf16, f32 or f64", (int)d,
                     kiln_dtype_name(d));
  graph_set_default_float(d);
  return KILN_OK;
}

KILN_API kiln_dtype kiln_default_dtype(void) { return graph_default_float(); }

/* ------------------------------------------------------------ helpers */

static int64_t sizes_numel(int ndim, const int64_t *sizes) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= sizes[i];
  return n;
}

/* The status of the error a callee just set (never KILN_OK). */
static int failed(const char *fn) {
  kiln_status s = api_status();
  return s != KILN_OK ? s : api_error(KILN_ERR_OOM, fn, "out of memory");
}

/* A tensor with view v over a fresh storage of n->numel elements whose
 * contents are node n (takes the node reference; NULL n means OOM). */
static kiln_tensor *node_tensor(graph_node *n, kiln_dtype dtype, const graph_view *v, const char *fn) {
  kiln_storage *s = n ? graph_storage_new(dtype, n->numel, n) : NULL;
  if (!s) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  kiln_tensor *t = api_tensor(s, v, fn);
  kiln_storage_release(s);
  return t;
}

/* A source node producing [numel] as a contiguous tensor of sizes [ndim]. */
static kiln_tensor *source_tensor(graph_node *n, kiln_dtype dtype, int ndim, const int64_t *sizes, const char *fn) {
  graph_view v = graph_view_contiguous(ndim, sizes);
  return node_tensor(n, dtype, &v, fn);
}

/* A realized buffer of numel elements as a contiguous tensor of sizes. */
static kiln_tensor *buffer_tensor(graph_buffer *buf, kiln_dtype dtype, int ndim, const int64_t *sizes,
                                  const char *fn) {
  graph_node *n = graph_node_from_buffer(buf, dtype, sizes_numel(ndim, sizes));
  return source_tensor(n, dtype, ndim, sizes, fn);
}

static graph_buffer *alloc_elems(kiln_dtype dtype, int64_t numel, const char *fn) {
  rt_alloc_install(); /* data made here gets huge pages and reuse too */
  graph_buffer *b = graph_buffer_alloc(numel * graph_dtypes[dtype].size);
  if (!b) api_error(KILN_ERR_OOM, fn, "out of memory allocating %lld elements of %s", (long long)numel,
                    graph_dtypes[dtype].name);
  return b;
}

/* The value a cast to dtype stores, back as a double. */
static double cast_value(kiln_dtype dtype, double v) {
  unsigned char tmp[8];
  graph_store_scalar(dtype, tmp, v);
  return graph_load_scalar(dtype, tmp);
}

/* -------------------------------------------------------- constants */

static kiln_tensor *full_tensor(kiln_dtype dtype, int ndim, const int64_t *sizes, double value, const char *fn) {
  if (!api_check_dtype(dtype, fn) || !api_check_sizes(ndim, sizes, fn)) return NULL;
  int64_t numel = sizes_numel(ndim, sizes);
  graph_node *n = graph_node_new(GRAPH_OP_FULL, dtype, 1, &numel);
  if (n) graph_attr_set_scalar(n, cast_value(dtype, value));
  return source_tensor(n, dtype, ndim, sizes, fn);
}

KILN_API kiln_tensor *kiln_empty(kiln_dtype dtype, int ndim, const int64_t *sizes) {
  return full_tensor(dtype, ndim, sizes, 0.0, "kiln_empty");
}

KILN_API kiln_tensor *kiln_zeros(kiln_dtype dtype, int ndim, const int64_t *sizes) {
  return full_tensor(dtype, ndim, sizes, 0.0, "kiln_zeros");
}

KILN_API kiln_tensor *kiln_ones(kiln_dtype dtype, int ndim, const int64_t *sizes) {
  return full_tensor(dtype, ndim, sizes, 1.0, "kiln_ones");
}

KILN_API kiln_tensor *kiln_full(kiln_dtype dtype, int ndim, const int64_t *sizes, double value) {
  return full_tensor(dtype, ndim, sizes, value, "kiln_full");
}

KILN_API kiln_tensor *kiln_scalar(kiln_dtype dtype, double value) {
  return full_tensor(dtype, 0, NULL, value, "kiln_scalar");
}

/* Torch's *_like with default arguments: t's sizes and dtype, contiguous,
 * a new storage on t's device. */
static kiln_tensor *full_like(kiln_tensor *t, double value, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  api_untracked_begin();
  kiln_tensor *r = full_tensor(t->storage->dtype, t->view.ndim, t->view.sizes, value, fn);
  r = ops_move_like(r, t, fn);
  api_untracked_end();
  return api_track(r);
}

KILN_API kiln_tensor *kiln_full_like(kiln_tensor *t, double value) { return full_like(t, value, "kiln_full_like"); }

KILN_API kiln_tensor *kiln_zeros_like(kiln_tensor *t) { return full_like(t, 0.0, "kiln_zeros_like"); }

KILN_API kiln_tensor *kiln_ones_like(kiln_tensor *t) { return full_like(t, 1.0, "kiln_ones_like"); }

/* ------------------------------------------------------------ ranges */

/* The length of arange for (already truncated, for integers) xstart,
 * xend, xstep; -1 after an error. */
static int64_t arange_length(kiln_dtype dtype, double start, double end, double step, double xstart, double xend,
                             double xstep, const char *fn) {
  if (!isfinite(start) || !isfinite(end) || !isfinite(step)) {
    api_error(KILN_ERR_ARG, fn, "unsupported range %g -> %g with step %g", start, end, step);
    return -1;
  }
  if (xstep == 0) {
    api_error(KILN_ERR_ARG, fn, "step %g must be nonzero (for %s)", step, graph_dtypes[dtype].name);
    return -1;
  }
  if ((xstep > 0 && xend < xstart) || (xstep < 0 && xend > xstart)) {
    api_error(KILN_ERR_ARG, fn, "step %g does not lead from start %g to end %g", step, start, end);
    return -1;
  }
  const double limit = 0x1p62; /* keeps integer range arithmetic exact */
  if (!graph_is_float(dtype) && (fabs(xstart) >= limit || fabs(xend) >= limit || fabs(xstep) >= limit)) {
    api_error(KILN_ERR_ARG, fn, "range %g -> %g with step %g is outside the %s range", start, end, step,
              graph_dtypes[dtype].name);
    return -1;
  }
  double len;
  if (dtype == KILN_I64) {
    int64_t s = (int64_t)xstart, e = (int64_t)xend, st = (int64_t)xstep, sgn = st > 0 ? 1 : -1;
    len = (double)((e - s + st - sgn) / st);
  } else {
    len = ceil((end - start) / step);
  }
  if (!(len >= 0 && len <= (double)(INT64_MAX / 8))) {
    api_error(KILN_ERR_ARG, fn, "range %g -> %g with step %g has an invalid length", start, end, step);
    return -1;
  }
  return (int64_t)len;
}

/* Scalar::to<int64_t> for integer dtypes; identity for floats. */
static double range_value(kiln_dtype dtype, double v) {
  if (graph_is_float(dtype) || !isfinite(v)) return v;
  return trunc(v);
}

KILN_API kiln_tensor *kiln_arange(kiln_dtype dtype, double start, double end, double step) {
  static const char fn[] = "kiln_arange";
  if (!api_check_dtype(dtype, fn)) return NULL;
  if (dtype == KILN_BOOL) {
    api_error(KILN_ERR_DTYPE, fn, "dtype bool is not supported");
    return NULL;
  }
  double xstart = range_value(dtype, start), xend = range_value(dtype, end), xstep = range_value(dtype, step);
  int64_t n = arange_length(dtype, start, end, step, xstart, xend, xstep, fn);
  if (n < 0) return NULL;
  graph_node *node = graph_node_new(GRAPH_OP_ARANGE, dtype, 1, &n);
  if (node) {
    graph_attr_set_scalar(node, xstart);
    graph_attr_set_scalar2(node, xstep);
  }
  return source_tensor(node, dtype, 1, &n, fn);
}

static void fill_linspace(kiln_dtype dtype, unsigned char *p, double start, double end, int64_t steps) {
  int size = graph_dtypes[dtype].size;
  if (steps == 1) {
    graph_store_scalar(dtype, p, start);
    return;
  }
  double step = (end - start) / (double)(steps - 1);
  int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; i++) {
    double v = i < half ? start + step * (double)i : end - step * (double)(steps - 1 - i);
    graph_store_scalar(dtype, p + i * size, v);
  }
}

KILN_API kiln_tensor *kiln_linspace(kiln_dtype dtype, double start, double end, int64_t steps) {
  static const char fn[] = "kiln_linspace";
  if (!api_check_dtype(dtype, fn)) return NULL;
  if (steps < 0) {
    api_error(KILN_ERR_ARG, fn, "steps %lld must be non-negative", (long long)steps);
    return NULL;
  }
  if (!api_check_sizes(1, &steps, fn)) return NULL;
  graph_buffer *buf = alloc_elems(dtype, steps, fn);
  if (!buf) return NULL;
  if (steps > 0) fill_linspace(dtype, buf->data, range_value(dtype, start), range_value(dtype, end), steps);
  return buffer_tensor(buf, dtype, 1, &steps, fn);
}

/* ------------------------------------------------------------ random */

static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rng_state[4];
static bool rng_ready;

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void rng_seed_locked(uint64_t seed) {
  for (int i = 0; i < 4; i++) rng_state[i] = splitmix64(&seed);
  rng_ready = true;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman and Vigna, 2018). Call with rng_lock held. */
static uint64_t rng_next(void) {
  uint64_t *s = rng_state;
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

KILN_API void kiln_manual_seed(uint64_t seed) {
  pthread_mutex_lock(&rng_lock);
  rng_seed_locked(seed);
  pthread_mutex_unlock(&rng_lock);
}

/* A uniform value in [0, 1) with the dtype's precision (k/2^bits, exact
 * in the dtype, so rounding never yields 1.0). */
static double uniform01(kiln_dtype dtype, uint64_t x) {
  switch (dtype) {
  case KILN_F64: return (double)(x >> 11) * 0x1p-53;
  case KILN_F32: return (double)(x >> 40) * 0x1p-24;
  case KILN_F16: return (double)(x >> 53) * 0x1p-11;
  default: return (double)(x >> 56) * 0x1p-8; /* BF16 */
  }
}

static void fill_uniform(kiln_dtype dtype, unsigned char *p, int64_t n) {
  int size = graph_dtypes[dtype].size;
  for (int64_t i = 0; i < n; i++) graph_store_scalar(dtype, p + i * size, uniform01(dtype, rng_next()));
}

/* Box-Muller: two normals from u1 in (0, 1] and u2 in [0, 1). */
static void fill_normal(kiln_dtype dtype, unsigned char *p, int64_t n) {
  const double two_pi = 6.283185307179586476925286766559;
  int size = graph_dtypes[dtype].size;
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = (double)((rng_next() >> 11) + 1) * 0x1p-53;
    double u2 = (double)(rng_next() >> 11) * 0x1p-53;
    double r = sqrt(-2.0 * log(u1));
    graph_store_scalar(dtype, p + i * size, r * cos(two_pi * u2));
    if (i + 1 < n) graph_store_scalar(dtype, p + (i + 1) * size, r * sin(two_pi * u2));
  }
}

/* Takes the generator (seeding it with Torch's default seed on first use);
 * rng_end gives it back. */
static void rng_begin(void) {
  pthread_mutex_lock(&rng_lock);
  if (!rng_ready) rng_seed_locked(67280421310721ull);
}

static void rng_end(void) { pthread_mutex_unlock(&rng_lock); }

/* A uniform integer in [0, range), range >= 1, without modulo bias: draws
 * below 2^64 mod range are rejected (fewer than half of them for any
 * range). Call between rng_begin and rng_end. */
static uint64_t rng_below(uint64_t range) {
  uint64_t reject = (0 - range) % range; /* 2^64 mod range */
  for (;;) {
    uint64_t x = rng_next();
    if (x >= reject) return x % range;
  }
}

static kiln_tensor *random_tensor(kiln_dtype dtype, int ndim, const int64_t *sizes, bool normal, const char *fn) {
  if (!api_check_dtype(dtype, fn) || !api_check_sizes(ndim, sizes, fn)) return NULL;
  if (!graph_is_float(dtype)) {
    api_error(KILN_ERR_DTYPE, fn, "dtype %s is not a float dtype", graph_dtypes[dtype].name);
    return NULL;
  }
  int64_t numel = sizes_numel(ndim, sizes);
  graph_buffer *buf = alloc_elems(dtype, numel, fn);
  if (!buf) return NULL;
  rng_begin();
  if (normal) fill_normal(dtype, buf->data, numel);
  else fill_uniform(dtype, buf->data, numel);
  rng_end();
  return buffer_tensor(buf, dtype, ndim, sizes, fn);
}

KILN_API kiln_tensor *kiln_rand(kiln_dtype dtype, int ndim, const int64_t *sizes) {
  return random_tensor(dtype, ndim, sizes, false, "kiln_rand");
}

KILN_API kiln_tensor *kiln_randn(kiln_dtype dtype, int ndim, const int64_t *sizes) {
  return random_tensor(dtype, ndim, sizes, true, "kiln_randn");
}

/* Torch's rand_like/randn_like with default arguments: t's sizes and
 * dtype, contiguous, on t's device; t is never forced. */
static kiln_tensor *random_like(kiln_tensor *t, bool normal, const char *fn) {
  if (!api_check(t, fn, "t")) return NULL;
  api_untracked_begin();
  kiln_tensor *r = random_tensor(t->storage->dtype, t->view.ndim, t->view.sizes, normal, fn);
  r = ops_move_like(r, t, fn);
  api_untracked_end();
  return api_track(r);
}

KILN_API kiln_tensor *kiln_rand_like(kiln_tensor *t) { return random_like(t, false, "kiln_rand_like"); }

KILN_API kiln_tensor *kiln_randn_like(kiln_tensor *t) { return random_like(t, true, "kiln_randn_like"); }

/* t = a + b * (uniform [0, 1) or standard normal samples), written through
 * t's view (copy_'s assign: lazy, every tensor over t's storage sees it);
 * the samples are drawn now, in row-major order of t's view, at t's
 * dtype's precision. */
static int random_fill_(kiln_tensor *t, bool normal, double a, double b, const char *fn) {
  if (!api_check(t, fn, "t")) return KILN_ERR_ARG;
  if (!ops_check_writable(t, fn)) return api_status();
  api_untracked_begin();
  kiln_tensor *r = random_tensor(t->storage->dtype, t->view.ndim, t->view.sizes, normal, fn);
  kiln_tensor *times = r ? kiln_mul_scalar(r, b) : NULL;
  kiln_tensor *plus = times ? kiln_add_scalar(times, a) : NULL;
  int st = plus ? kiln_copy_(t, plus) : api_status();
  kiln_release(r), kiln_release(times), kiln_release(plus);
  api_untracked_end();
  return st;
}

KILN_API int kiln_uniform_(kiln_tensor *t, double from, double to) {
  const char *fn = "kiln_uniform_";
  if (!api_check(t, fn, "t")) return KILN_ERR_ARG;
  if (!(from <= to) || !isfinite(to - from))
    return api_error(KILN_ERR_ARG, fn, "needs finite from <= to, got from %g, to %g", from, to);
  return random_fill_(t, false, from, to - from, fn);
}

KILN_API int kiln_normal_(kiln_tensor *t, double mean, double std) {
  const char *fn = "kiln_normal_";
  if (!api_check(t, fn, "t")) return KILN_ERR_ARG;
  if (!(std >= 0) || !isfinite(std) || !isfinite(mean))
    return api_error(KILN_ERR_ARG, fn, "needs a finite mean and a finite std >= 0, got mean %g, std %g", mean,
                     std);
  return random_fill_(t, true, mean, std, fn);
}

/* The values randint may draw for dtype: an integer dtype's range
 * (graph_int_range), a float dtype's finite range (Torch only warns where
 * a float stops holding every integer). */
static void int_limits(kiln_dtype dtype, double *lo, double *hi) {
  if (!graph_is_float(dtype)) {
    int64_t min, max;
    graph_int_range(dtype, &min, &max);
    *lo = (double)min, *hi = (double)max; /* I64: +-2^63, every int64_t */
    return;
  }
  switch (dtype) {
  case KILN_F16: *hi = 65504; break;
  case KILN_BF16: *hi = 0x1.fep127; break;
  case KILN_F32: *hi = 0x1.fffffep127; break;
  default: *hi = 0x1p1023; break;
  }
  *lo = -*hi;
}

KILN_API kiln_tensor *kiln_randint(kiln_dtype dtype, int64_t low, int64_t high, int ndim, const int64_t *sizes) {
  static const char fn[] = "kiln_randint";
  if (!api_check_dtype(dtype, fn) || !api_check_sizes(ndim, sizes, fn)) return NULL;
  if (dtype == KILN_BOOL) {
    api_error(KILN_ERR_DTYPE, fn, "dtype bool is not supported (use an integer or float dtype)");
    return NULL;
  }
  if (high <= low) {
    api_error(KILN_ERR_ARG, fn, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
              (long long)low, (long long)high);
    return NULL;
  }
  double lo, hi;
  int_limits(dtype, &lo, &hi);
  if ((double)low < lo || (double)(high - 1) > hi) {
    api_error(KILN_ERR_ARG, fn, "range [%lld, %lld) is out of bounds for %s", (long long)low, (long long)high,
              graph_dtypes[dtype].name);
    return NULL;
  }
  int64_t numel = sizes_numel(ndim, sizes);
  graph_buffer *buf = alloc_elems(dtype, numel, fn);
  if (!buf) return NULL;
  uint64_t range = (uint64_t)high - (uint64_t)low; /* >= 1, exact mod 2^64 */
  unsigned char *p = buf->data;
  int size = graph_dtypes[dtype].size;
  rng_begin();
  for (int64_t i = 0; i < numel; i++) {
    int64_t v = (int64_t)((uint64_t)low + rng_below(range));
    if (dtype == KILN_I64) memcpy(p + i * size, &v, sizeof v);
    else graph_store_scalar(dtype, p + i * size, (double)v);
  }
  rng_end();
  return buffer_tensor(buf, dtype, ndim, sizes, fn);
}

KILN_API kiln_tensor *kiln_randperm(int64_t n) {
  static const char fn[] = "kiln_randperm";
  if (n < 0) {
    api_error(KILN_ERR_ARG, fn, "n must be non-negative, got %lld", (long long)n);
    return NULL;
  }
  if (!api_check_sizes(1, &n, fn)) return NULL;
  graph_buffer *buf = alloc_elems(KILN_I64, n, fn);
  if (!buf) return NULL;
  int64_t *p = (int64_t *)buf->data;
  for (int64_t i = 0; i < n; i++) p[i] = i;
  rng_begin();
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)rng_below((uint64_t)i + 1), tmp = p[i];
    p[i] = p[j];
    p[j] = tmp;
  }
  rng_end();
  return buffer_tensor(buf, KILN_I64, 1, &n, fn);
}

/* ------------------------------------------------------ caller memory */

KILN_API kiln_tensor *kiln_from_data(kiln_dtype dtype, int ndim, const int64_t *sizes, const void *data) {
  static const char fn[] = "kiln_from_data";
  if (!api_check_dtype(dtype, fn) || !api_check_sizes(ndim, sizes, fn)) return NULL;
  int64_t numel = sizes_numel(ndim, sizes);
  if (numel > 0 && !data) {
    api_error(KILN_ERR_ARG, fn, "data is NULL for %lld elements", (long long)numel);
    return NULL;
  }
  graph_buffer *buf = alloc_elems(dtype, numel, fn);
  if (!buf) return NULL;
  if (numel > 0) memcpy(buf->data, data, (size_t)(numel * graph_dtypes[dtype].size));
  if (dtype == KILN_BOOL) {
    unsigned char *p = buf->data;
    for (int64_t i = 0; i < numel; i++) p[i] = p[i] != 0;
  }
  return buffer_tensor(buf, dtype, ndim, sizes, fn);
}

/* The view from_blob describes: sizes [ndim], strides or contiguous. */
static graph_view blob_view(int ndim, const int64_t *sizes, const int64_t *strides) {
  graph_view v = graph_view_contiguous(ndim, sizes);
  for (int i = 0; strides && i < ndim; i++) v.strides[i] = strides[i];
  return v;
}

/* Wraps data in a realized node of extent elements. On failure the caller
 * keeps ownership of data: the deleter is never called. */
static graph_node *blob_node(kiln_dtype dtype, void *data, int64_t extent, void (*deleter)(void *, void *),
                             void *ctx) {
  graph_buffer *buf = graph_buffer_wrap(data, extent * graph_dtypes[dtype].size, deleter, ctx);
  if (!buf) return NULL;
  graph_buffer_retain(buf); /* survives a failing graph_node_from_buffer */
  graph_node *n = graph_node_from_buffer(buf, dtype, extent);
  if (!n) {
    buf->deleter = NULL;
    buf->borrowed = true;
  }
  graph_buffer_release(buf);
  return n;
}

KILN_API kiln_tensor *kiln_from_blob(kiln_dtype dtype, int ndim, const int64_t *sizes, const int64_t *strides,
                                     void *data, void (*deleter)(void *data, void *ctx), void *ctx) {
  static const char fn[] = "kiln_from_blob";
  if (!api_check_dtype(dtype, fn) || !api_check_sizes(ndim, sizes, fn)) return NULL;
  graph_view v = blob_view(ndim, sizes, strides);
  if (!ops_check_view(&v, INT64_MAX / 8, fn)) return NULL;
  int64_t extent = graph_view_extent(&v);
  if (extent > 0 && !data) {
    api_error(KILN_ERR_ARG, fn, "data is NULL for a view of %lld elements", (long long)extent);
    return NULL;
  }
  return node_tensor(blob_node(dtype, data, extent, deleter, ctx), dtype, &v, fn);
}

/* ---------------------------------------------------------- storages */

KILN_API kiln_storage *kiln_storage_new(kiln_dtype dtype, int64_t numel) {
  static const char fn[] = "kiln_storage_new";
  if (!api_check_dtype(dtype, fn) || !api_check_sizes(1, &numel, fn)) return NULL;
  graph_node *n = graph_node_new(GRAPH_OP_FULL, dtype, 1, &numel);
  kiln_storage *s = n ? graph_storage_new(dtype, numel, n) : NULL;
  if (!s) api_error(KILN_ERR_OOM, fn, "out of memory");
  return s;
}

static bool check_storage(const kiln_storage *s, const char *fn) { return api_check_storage(s, fn, "s"); }

KILN_API kiln_storage *kiln_storage_of(const kiln_tensor *t) {
  if (!api_check(t, "kiln_storage_of", "t")) return NULL;
  return kiln_storage_retain(t->storage);
}

KILN_API int64_t kiln_storage_numel(const kiln_storage *s) {
  return check_storage(s, "kiln_storage_numel") ? s->numel : -1;
}

KILN_API kiln_dtype kiln_storage_dtype(const kiln_storage *s) {
  return check_storage(s, "kiln_storage_dtype") ? s->dtype : (kiln_dtype)-1;
}

KILN_API kiln_tensor *kiln_tensor_from_storage(kiln_storage *s, int64_t offset, int ndim, const int64_t *sizes,
                                               const int64_t *strides) {
  static const char fn[] = "kiln_tensor_from_storage";
  if (!check_storage(s, fn) || !api_check_sizes(ndim, sizes, fn)) return NULL;
  graph_view v = blob_view(ndim, sizes, strides);
  v.offset = offset;
  if (!ops_check_view(&v, s->numel, fn)) return NULL;
  return api_tensor(s, &v, fn);
}

/* ------------------------------------------------------- set_, resize_ */

KILN_API int kiln_set_(kiln_tensor *dst, kiln_tensor *src) {
  if (!api_check(dst, "kiln_set_", "dst") || !api_check(src, "kiln_set_", "src")) return failed("kiln_set_");
  kiln_storage *old = dst->storage;
  dst->storage = kiln_storage_retain(src->storage);
  dst->view = src->view;
  kiln_storage_release(old);
  return KILN_OK;
}

/* Grows t's storage to numel elements: the old contents (forced) are
 * copied into a fresh zero-filled buffer that becomes the new version. */
static int grow_storage(kiln_tensor *t, int64_t numel, const char *fn) {
  kiln_storage *s = t->storage;
  int64_t size = graph_dtypes[s->dtype].size;
  if (!api_check_host(t, fn)) return KILN_ERR_DEVICE;
  graph_node *old = api_force(t, fn);
  if (!old) return failed(fn);
  graph_buffer *buf = graph_buffer_alloc(numel * size);
  if (!buf) return api_error(KILN_ERR_OOM, fn, "out of memory growing a storage to %lld elements", (long long)numel);
  if (s->numel > 0) memcpy(buf->data, old->buffer->data, (size_t)(s->numel * size));
  memset((char *)buf->data + s->numel * size, 0, (size_t)((numel - s->numel) * size));
  graph_node *n = graph_node_from_buffer(buf, s->dtype, numel);
  if (!n) return api_error(KILN_ERR_OOM, fn, "out of memory");
  graph_storage_set_version(s, n);
  s->numel = numel;
  return KILN_OK;
}

/* As PyTorch's resize_: same sizes keep the view (and its strides);
 * otherwise contiguous strides at the current offset, growing the storage
 * when the new view reaches past it (never for an empty view). */
KILN_API int kiln_resize_(kiln_tensor *t, int ndim, const int64_t *sizes) {
  static const char fn[] = "kiln_resize_";
  if (!api_check(t, fn, "t") || !api_check_sizes(ndim, sizes, fn)) return failed(fn);
  if (ndim == t->view.ndim && (ndim == 0 || memcmp(sizes, t->view.sizes, sizeof *sizes * (size_t)ndim) == 0))
    return KILN_OK;
  graph_view v = graph_view_contiguous(ndim, sizes);
  v.offset = t->view.offset;
  int64_t numel = graph_view_numel(&v);
  if (numel > 0 && v.offset > INT64_MAX / 8 - numel)
    return api_error(KILN_ERR_SHAPE, fn, "offset %lld + %lld elements overflow", (long long)v.offset,
                     (long long)numel);
  if (numel > 0 && v.offset + numel > t->storage->numel) {
    int r = grow_storage(t, v.offset + numel, fn);
    if (r != KILN_OK) return r;
  }
  t->view = v;
  return KILN_OK;
}

/* A 1-D host array of n values of dtype dt on like's device, tracked. */
kiln_tensor *ops_host_const(kiln_dtype dt, int64_t n, const void *data, const kiln_tensor *like, const char *fn) {
  api_untracked_begin();
  kiln_tensor *t = ops_move_like(kiln_from_data(dt, 1, &n, data), like, fn);
  api_untracked_end();
  return api_track(t);
}
